//! The project's one YAML location helper (config files and scenario files): a structural pass
//! over the YAML events (yaml-rust2) that maps key paths such as
//! `initializers[1].owner.lease` to line and column, finds duplicate keys and extra documents,
//! and rejects pathological nesting before serde_yaml sees the text. Aliases are recorded where
//! they appear and never expanded, so the pass is linear in the input size.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A 1-based position in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

impl Pos {
    fn from_marker(m: &Marker) -> Pos {
        // yaml-rust2 markers have 1-based lines and 0-based columns.
        Pos {
            line: m.line(),
            column: m.col() + 1,
        }
    }
}

/// Where a node and the key naming it start.
#[derive(Debug, Clone, Copy)]
struct NodePos {
    key: Option<Pos>,
    value: Pos,
    scalar: bool,
}

/// A key that appears twice in one mapping.
#[derive(Debug, Clone)]
pub struct DuplicateKey {
    /// The key's path from the root, as the config's error messages name it.
    pub path: String,
    /// Where the key first appears.
    pub first: Pos,
    /// Where it appears again.
    pub second: Pos,
}

/// What the pass learned about a document.
#[derive(Debug, Default)]
pub struct Layout {
    nodes: HashMap<String, NodePos>,
    /// Every key that appears twice in one mapping.
    pub duplicates: Vec<DuplicateKey>,
    /// Start of the second document, if the stream holds more than one.
    pub extra_document: Option<Pos>,
    /// The root is absent or a plain null scalar (empty file, comments only, `~`).
    pub empty: bool,
    /// First alias (`*name`) in the text.
    pub first_alias: Option<Pos>,
}

/// A syntax error found by the pass.
#[derive(Debug, Clone)]
pub struct SyntaxError {
    /// Where the parser stopped.
    pub pos: Pos,
    /// The parser's message.
    pub message: String,
}

impl Layout {
    /// Where to point for a problem with the value at `path`: the scalar itself, or the key
    /// naming a mapping or sequence (its first entry for sequence items).
    pub fn value(&self, path: &str) -> Option<Pos> {
        self.nodes.get(path).map(|n| {
            if n.scalar {
                n.value
            } else {
                n.key.unwrap_or(n.value)
            }
        })
    }

    /// How many nodes were recorded (aliases count once, unexpanded).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Where to point for a problem with the key at `path` (falls back to the value).
    pub fn key(&self, path: &str) -> Option<Pos> {
        self.nodes.get(path).map(|n| n.key.unwrap_or(n.value))
    }
}

enum Frame {
    Map {
        path: String,
        /// The pending key and its position once read; None while expecting a key.
        key: Option<(String, Pos)>,
        seen: HashMap<String, Pos>,
        /// Set until the first child fixes the mapping's own position.
        first_child: bool,
    },
    Seq {
        path: String,
        index: usize,
        first_child: bool,
    },
}

/// Deepest nesting of mappings and sequences accepted. initguard's configuration needs five levels; the
/// limit keeps key paths short (a path grows with depth) and stays below serde_yaml's own
/// recursion limit of 128.
pub const MAX_DEPTH: usize = 100;

/// Path segment used for keys that are not plain scalars.
const COMPLEX_KEY: &str = "<complex key>";

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

fn is_null(value: &str, style: TScalarStyle) -> bool {
    style == TScalarStyle::Plain && matches!(value, "" | "~" | "null" | "Null" | "NULL")
}

/// Walk the event stream of `text` (without a byte-order mark).
pub fn scan(text: &str) -> Result<Layout, SyntaxError> {
    let mut parser = Parser::new_from_str(text);
    let mut layout = Layout {
        empty: true,
        ..Layout::default()
    };
    let mut stack: Vec<Frame> = Vec::new();
    let mut documents = 0usize;
    loop {
        let (event, marker) = parser.next_token().map_err(|e| SyntaxError {
            pos: Pos::from_marker(e.marker()),
            message: e.info().to_owned(),
        })?;
        let pos = Pos::from_marker(&marker);
        let (scalar_key, opens) = match &event {
            Event::StreamEnd => return Ok(layout),
            Event::DocumentStart => {
                documents += 1;
                if documents == 2 && layout.extra_document.is_none() {
                    layout.extra_document = Some(pos);
                }
                continue;
            }
            Event::Scalar(value, style, _, _) => {
                if stack.is_empty() && !is_null(value, *style) {
                    layout.empty = false;
                }
                (Some(value.clone()), false)
            }
            Event::Alias(_) => {
                layout.first_alias.get_or_insert(pos);
                if stack.is_empty() {
                    layout.empty = false;
                }
                (None, false)
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                if stack.is_empty() {
                    layout.empty = false;
                }
                (None, true)
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
                continue;
            }
            Event::StreamStart | Event::DocumentEnd | Event::Nothing => continue,
        };
        let path = match stack.last_mut() {
            None => String::new(),
            Some(Frame::Map {
                path,
                key,
                seen,
                first_child,
            }) => {
                // yaml-rust2 marks a block mapping after its first key; point at that key.
                if std::mem::take(first_child)
                    && let Some(n) = layout.nodes.get_mut(path.as_str())
                {
                    n.value = pos;
                }
                match key.take() {
                    None => {
                        // This node is a key. Collection and alias keys are walked under a
                        // placeholder name and never count as duplicates.
                        let Some(name) = scalar_key else {
                            *key = Some((COMPLEX_KEY.to_owned(), pos));
                            if !opens {
                                continue;
                            }
                            let placeholder = child_path(path, COMPLEX_KEY);
                            push_frame(&mut stack, &event, placeholder, pos)?;
                            continue;
                        };
                        if let Some(first) = seen.get(&name) {
                            layout.duplicates.push(DuplicateKey {
                                path: child_path(path, &name),
                                first: *first,
                                second: pos,
                            });
                        } else {
                            seen.insert(name.clone(), pos);
                        }
                        *key = Some((name, pos));
                        continue;
                    }
                    Some((name, key_pos)) => {
                        let p = child_path(path, &name);
                        layout.nodes.insert(
                            p.clone(),
                            NodePos {
                                key: Some(key_pos),
                                value: pos,
                                scalar: !opens,
                            },
                        );
                        p
                    }
                }
            }
            Some(Frame::Seq {
                path,
                index,
                first_child,
            }) => {
                if std::mem::take(first_child)
                    && let Some(n) = layout.nodes.get_mut(path.as_str())
                {
                    n.value = pos;
                }
                let p = format!("{path}[{index}]");
                *index += 1;
                layout.nodes.insert(
                    p.clone(),
                    NodePos {
                        key: None,
                        value: pos,
                        scalar: !opens,
                    },
                );
                p
            }
        };
        if stack.is_empty() && path.is_empty() {
            layout.nodes.insert(
                String::new(),
                NodePos {
                    key: None,
                    value: pos,
                    scalar: !opens,
                },
            );
        }
        if opens {
            push_frame(&mut stack, &event, path, pos)?;
        }
    }
}

/// Enter the mapping or sequence that starts with `event`, within [`MAX_DEPTH`].
fn push_frame(
    stack: &mut Vec<Frame>,
    event: &Event,
    path: String,
    pos: Pos,
) -> Result<(), SyntaxError> {
    if stack.len() >= MAX_DEPTH {
        return Err(SyntaxError {
            pos,
            message: format!("collections nested more than {MAX_DEPTH} levels deep"),
        });
    }
    let frame = match event {
        Event::MappingStart(..) => Frame::Map {
            path,
            key: None,
            seen: HashMap::new(),
            first_child: true,
        },
        _ => Frame::Seq {
            path,
            index: 0,
            first_child: true,
        },
    };
    stack.push(frame);
    Ok(())
}
