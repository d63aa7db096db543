//! Kubernetes equality- and set-based label selectors (`app=quota,tier in (a,b),!canary`), as
//! accepted by `labels.Parse` in apimachinery, minus the numeric `>`/`<` operators.
//!
//! Shared by the config (pods owners), the guard (matching owner pods) and the simulated API
//! server (`?labelSelector=`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::names::{validate_label_value, validate_qualified_name};

/// How one requirement compares a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SelectorOp {
    /// `key=value` or `key==value`.
    Equals,
    /// `key!=value`: also matches when the label is absent.
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`: also matches when the label is absent.
    NotIn,
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
}

/// One comma-separated term of a selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: String,
    pub op: SelectorOp,
    /// Sorted and deduplicated; one value for `=`/`!=`, none for `key`/`!key`.
    pub values: BTreeSet<String>,
}

impl Requirement {
    /// Whether a label set satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.op {
            SelectorOp::Equals | SelectorOp::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOp::NotEquals | SelectorOp::NotIn => {
                value.is_none_or(|v| !self.values.contains(v))
            }
            SelectorOp::Exists => value.is_some(),
            SelectorOp::DoesNotExist => value.is_none(),
        }
    }
}

/// A parsed label selector: the AND of its requirements. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// Why a selector string does not parse; `position` is the 0-based character offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at character {position})")]
pub struct SelectorError {
    pub position: usize,
    pub message: String,
}

impl LabelSelector {
    /// The selector that matches every label set.
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// Parse the Kubernetes selector syntax: comma-separated `key`, `!key`, `key=v`, `key==v`,
    /// `key!=v`, `key in (v1,v2)` and `key notin (v1,v2)`. Keys must be qualified names and
    /// values label values; whitespace between tokens is ignored.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        Parser::new(text).parse()
    }

    /// Whether a label set satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True for the selector that matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements in written order.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let single = || self.values.iter().next().map(String::as_str).unwrap_or("");
        let list = || self.values.iter().cloned().collect::<Vec<_>>().join(",");
        match self.op {
            SelectorOp::Equals => write!(f, "{}={}", self.key, single()),
            SelectorOp::NotEquals => write!(f, "{}!={}", self.key, single()),
            SelectorOp::In => write!(f, "{} in ({})", self.key, list()),
            SelectorOp::NotIn => write!(f, "{} notin ({})", self.key, list()),
            SelectorOp::Exists => write!(f, "{}", self.key),
            SelectorOp::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// Canonical form: `=` for `==`, set values sorted, no spaces except around `in`/`notin`.
/// Parsing the output yields an equal selector.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Comma,
    Open,
    Close,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    /// `<` or `>`: valid in apimachinery for numeric values, not supported here.
    Compare(char),
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Ident(s) => format!("{s:?}"),
            Token::Comma => "','".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::Eq => "'='".into(),
            Token::DoubleEq => "'=='".into(),
            Token::NotEq => "'!='".into(),
            Token::Bang => "'!'".into(),
            Token::Compare(c) => format!("'{c}'"),
            Token::End => "the end of the selector".into(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, ',' | '(' | ')' | '=' | '!' | '<' | '>')
}

/// Tokens with their character offsets, produced up front (selectors are short).
struct Parser {
    tokens: Vec<(usize, Token)>,
    next: usize,
}

impl Parser {
    fn new(text: &str) -> Parser {
        let chars: Vec<char> = text.chars().collect();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c.is_whitespace() {
                i += 1;
                continue;
            }
            let start = i;
            let token = match c {
                ',' => Token::Comma,
                '(' => Token::Open,
                ')' => Token::Close,
                '<' | '>' => Token::Compare(c),
                '=' if chars.get(i + 1) == Some(&'=') => {
                    i += 1;
                    Token::DoubleEq
                }
                '=' => Token::Eq,
                '!' if chars.get(i + 1) == Some(&'=') => {
                    i += 1;
                    Token::NotEq
                }
                '!' => Token::Bang,
                _ => {
                    while i + 1 < chars.len()
                        && !chars[i + 1].is_whitespace()
                        && !is_special(chars[i + 1])
                    {
                        i += 1;
                    }
                    Token::Ident(chars[start..=i].iter().collect())
                }
            };
            tokens.push((start, token));
            i += 1;
        }
        tokens.push((chars.len(), Token::End));
        Parser { tokens, next: 0 }
    }

    fn peek(&self) -> &(usize, Token) {
        // The token list always ends with `End`, which is never consumed past.
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn bump(&mut self) -> (usize, Token) {
        let t = self.peek().clone();
        if t.1 != Token::End {
            self.next += 1;
        }
        t
    }

    fn error<T>(position: usize, message: impl Into<String>) -> Result<T, SelectorError> {
        Err(SelectorError {
            position,
            message: message.into(),
        })
    }

    fn parse(mut self) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        if self.peek().1 == Token::End {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(self.requirement()?);
            match self.bump() {
                (_, Token::End) => return Ok(LabelSelector { requirements }),
                (pos, Token::Comma) => {
                    if self.peek().1 == Token::End {
                        return Self::error(pos, "expected a requirement after ','");
                    }
                }
                (pos, other) => {
                    return Self::error(
                        pos,
                        format!(
                            "expected ',' or the end of the selector, found {}",
                            other.describe()
                        ),
                    );
                }
            }
        }
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.bump() {
            (pos, Token::Ident(key)) => validate_qualified_name(&key)
                .map_err(|e| SelectorError {
                    position: pos,
                    message: format!("invalid label key: {e}"),
                })
                .map(|()| key),
            (pos, other) => Self::error(
                pos,
                format!("expected a label key, found {}", other.describe()),
            ),
        }
    }

    fn value(pos: usize, value: String) -> Result<String, SelectorError> {
        validate_label_value(&value)
            .map_err(|e| SelectorError {
                position: pos,
                message: e,
            })
            .map(|()| value)
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let requirement = |key, op, values: BTreeSet<String>| Requirement { key, op, values };
        if self.peek().1 == Token::Bang {
            self.bump();
            let key = self.key()?;
            return Ok(requirement(key, SelectorOp::DoesNotExist, BTreeSet::new()));
        }
        let key = self.key()?;
        let (pos, token) = self.bump();
        let op = match token {
            Token::End | Token::Comma => {
                // Give the terminator back to the caller.
                self.next -= 1;
                return Ok(requirement(key, SelectorOp::Exists, BTreeSet::new()));
            }
            Token::Eq | Token::DoubleEq => SelectorOp::Equals,
            Token::NotEq => SelectorOp::NotEquals,
            Token::Ident(word) if word == "in" => SelectorOp::In,
            Token::Ident(word) if word == "notin" => SelectorOp::NotIn,
            Token::Compare(c) => {
                return Self::error(
                    pos,
                    format!(
                        "the numeric operator '{c}' is not supported; use =, ==, !=, in or notin"
                    ),
                );
            }
            other => {
                return Self::error(
                    pos,
                    format!(
                        "expected =, ==, !=, in or notin after key {key:?}, found {}",
                        other.describe()
                    ),
                );
            }
        };
        let values = match op {
            SelectorOp::In | SelectorOp::NotIn => self.value_set()?,
            _ => {
                // `key=` selects the empty value, as in Kubernetes.
                let value = match self.peek().clone() {
                    (_, Token::End | Token::Comma) => String::new(),
                    (pos, Token::Ident(v)) => {
                        self.bump();
                        Self::value(pos, v)?
                    }
                    (pos, other) => {
                        return Self::error(
                            pos,
                            format!("expected a label value, found {}", other.describe()),
                        );
                    }
                };
                BTreeSet::from([value])
            }
        };
        Ok(requirement(key, op, values))
    }

    /// `( v1, v2 )`; empty members are allowed as in Kubernetes, an empty set is not.
    fn value_set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        match self.bump() {
            (_, Token::Open) => {}
            (pos, other) => {
                return Self::error(
                    pos,
                    format!("expected '(' after in/notin, found {}", other.describe()),
                );
            }
        }
        if let (pos, Token::Close) = self.peek().clone() {
            return Self::error(pos, "expected at least one value between '(' and ')'");
        }
        let mut values = BTreeSet::new();
        loop {
            let value = match self.peek().clone() {
                (pos, Token::Ident(v)) => {
                    self.bump();
                    Self::value(pos, v)?
                }
                _ => String::new(),
            };
            values.insert(value);
            match self.bump() {
                (_, Token::Comma) => {}
                (_, Token::Close) => return Ok(values),
                (pos, other) => {
                    return Self::error(
                        pos,
                        format!(
                            "expected ',' or ')' in a value list, found {}",
                            other.describe()
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn parses_every_operator() {
        let s = sel("a=1, b==2,c != 3,d in (x, y,x),e notin (z),f,!g");
        let ops: Vec<SelectorOp> = s.requirements().iter().map(|r| r.op).collect();
        assert_eq!(
            ops,
            [
                SelectorOp::Equals,
                SelectorOp::Equals,
                SelectorOp::NotEquals,
                SelectorOp::In,
                SelectorOp::NotIn,
                SelectorOp::Exists,
                SelectorOp::DoesNotExist
            ]
        );
        assert_eq!(s.to_string(), "a=1,b=2,c!=3,d in (x,y),e notin (z),f,!g");
        assert_eq!(sel(&s.to_string()), s);
    }

    #[test]
    fn empty_selector_matches_everything() {
        for text in ["", "   "] {
            let s = sel(text);
            assert!(s.is_empty());
            assert!(s.matches(&labels(&[])));
            assert!(s.matches(&labels(&[("a", "b")])));
        }
        assert_eq!(LabelSelector::everything(), sel(""));
    }

    #[test]
    fn equality_matching() {
        let s = sel("app=quota");
        assert!(s.matches(&labels(&[("app", "quota"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "other")])));
        assert!(!s.matches(&labels(&[])));
        let s = sel("app!=quota");
        assert!(s.matches(&labels(&[])), "!= matches a missing label");
        assert!(s.matches(&labels(&[("app", "x")])));
        assert!(!s.matches(&labels(&[("app", "quota")])));
    }

    #[test]
    fn empty_value_matches_empty_label() {
        let s = sel("a=");
        assert!(s.matches(&labels(&[("a", "")])));
        assert!(!s.matches(&labels(&[("a", "x")])));
        assert!(!s.matches(&labels(&[])));
    }

    #[test]
    fn set_matching() {
        let s = sel("tier in (web,api)");
        assert!(s.matches(&labels(&[("tier", "api")])));
        assert!(!s.matches(&labels(&[("tier", "db")])));
        assert!(!s.matches(&labels(&[])));
        let s = sel("tier notin (web,api)");
        assert!(s.matches(&labels(&[("tier", "db")])));
        assert!(s.matches(&labels(&[])), "notin matches a missing label");
        assert!(!s.matches(&labels(&[("tier", "web")])));
    }

    #[test]
    fn existence_matching_and_conjunction() {
        let s = sel("app,!canary");
        assert!(s.matches(&labels(&[("app", "")])));
        assert!(!s.matches(&labels(&[("app", "x"), ("canary", "true")])));
        assert!(!s.matches(&labels(&[("other", "x")])));
        let s = sel("example.com/role=gate, app in (quota)");
        assert!(s.matches(&labels(&[("example.com/role", "gate"), ("app", "quota")])));
        assert!(!s.matches(&labels(&[("example.com/role", "gate")])));
    }

    #[test]
    fn rejects_bad_syntax_with_position() {
        let cases: &[(&str, usize, &str)] = &[
            ("a=b,", 3, "after ','"),
            (",a", 0, "expected a label key"),
            ("a in ()", 6, "at least one value"),
            ("a in (b", 7, "',' or ')'"),
            ("a in b", 5, "expected '('"),
            ("a b", 2, "expected =, ==, !=, in or notin"),
            ("a>1", 1, "not supported"),
            ("a=b=c", 3, "',' or the end"),
            ("-a=b", 0, "invalid label key"),
            ("a=-b", 2, "label value"),
            ("Bad.Prefix/a=b", 0, "prefix"),
            ("!", 1, "expected a label key"),
            ("!a=b", 2, "',' or the end"),
            ("a=(b)", 2, "expected a label value"),
            ("a in (b c)", 8, "',' or ')'"),
        ];
        for (text, position, fragment) in cases {
            let e = LabelSelector::parse(text).expect_err(text);
            assert_eq!(e.position, *position, "{text:?}: {e}");
            assert!(e.message.contains(fragment), "{text:?}: {e}");
        }
    }

    #[test]
    fn keywords_are_values_after_an_operator() {
        let s = sel("a=in,b notin (notin)");
        assert!(s.matches(&labels(&[("a", "in"), ("b", "x")])));
    }

    #[test]
    fn unicode_does_not_panic() {
        assert!(LabelSelector::parse("ä=ö").is_err());
        assert!(LabelSelector::parse("a in (ö, ü)").is_err());
    }
}
