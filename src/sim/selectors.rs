//! Label and field selectors with the syntax and errors of the Kubernetes API server.
//!
//! Label selectors accept `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
//! `k>1` and `k<1`, comma separated. Field selectors accept `f=v`, `f==v` and `f!=v` over the
//! fields each resource supports; an unknown field is a `BadRequest`, as on a real server.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

/// A parse error; the server answers it as 400 BadRequest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key` (the label is present).
    Exists(String),
    /// `!key` (the label is absent).
    DoesNotExist(String),
    /// `key=v`, `key==v`, `key in (v1,v2)`.
    In(String, BTreeSet<String>),
    /// `key!=v`, `key notin (v1,v2)`; also true when the label is absent.
    NotIn(String, BTreeSet<String>),
    /// `key>n` (the label is present and an integer greater than n).
    GreaterThan(String, i64),
    /// `key<n`.
    LessThan(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parse the `labelSelector` query parameter.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let mut lexer = Lexer::new(text);
        let mut requirements = Vec::new();
        if lexer.peek_is_end() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(parse_requirement(&mut lexer)?);
            match lexer.next() {
                Token::End => break,
                Token::Comma => continue,
                other => {
                    return Err(unable(format!(
                        "found '{other}', expected: ',' or 'end of string'"
                    )));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The parsed requirements, in order.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether an object's `metadata.labels` (absent counts as empty) satisfy every requirement.
    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.requirements.iter().all(|r| match r {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::GreaterThan(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }

    /// Whether the object (a full JSON object) matches.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.is_empty() || self.matches(obj["metadata"]["labels"].as_object())
    }
}

fn unable(detail: String) -> SelectorError {
    SelectorError(format!("unable to parse requirement: {detail}"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    End,
    Identifier(String),
    Comma,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Gt,
    Lt,
    OpenParen,
    CloseParen,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::End => f.write_str("end of string"),
            Token::Identifier(s) => f.write_str(s),
            Token::Comma => f.write_str(","),
            Token::Not => f.write_str("!"),
            Token::Equals => f.write_str("="),
            Token::DoubleEquals => f.write_str("=="),
            Token::NotEquals => f.write_str("!="),
            Token::In => f.write_str("in"),
            Token::NotIn => f.write_str("notin"),
            Token::Gt => f.write_str(">"),
            Token::Lt => f.write_str("<"),
            Token::OpenParen => f.write_str("("),
            Token::CloseParen => f.write_str(")"),
        }
    }
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    peeked: Option<Token>,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str) -> Self {
        Lexer {
            chars: text.chars().peekable(),
            peeked: None,
        }
    }

    fn peek_is_end(&mut self) -> bool {
        let t = self.next();
        let end = t == Token::End;
        self.peeked = Some(t);
        end
    }

    fn peek(&mut self) -> &Token {
        if self.peeked.is_none() {
            let t = self.lex();
            self.peeked = Some(t);
        }
        self.peeked.as_ref().unwrap_or(&Token::End)
    }

    fn next(&mut self) -> Token {
        match self.peeked.take() {
            Some(t) => t,
            None => self.lex(),
        }
    }

    fn lex(&mut self) -> Token {
        while self.chars.peek().is_some_and(|c| c.is_whitespace()) {
            self.chars.next();
        }
        let Some(c) = self.chars.next() else {
            return Token::End;
        };
        match c {
            ',' => Token::Comma,
            '(' => Token::OpenParen,
            ')' => Token::CloseParen,
            '>' => Token::Gt,
            '<' => Token::Lt,
            '!' => {
                if self.chars.peek() == Some(&'=') {
                    self.chars.next();
                    Token::NotEquals
                } else {
                    Token::Not
                }
            }
            '=' => {
                if self.chars.peek() == Some(&'=') {
                    self.chars.next();
                    Token::DoubleEquals
                } else {
                    Token::Equals
                }
            }
            _ => {
                let mut s = String::from(c);
                while let Some(&n) = self.chars.peek() {
                    if n.is_whitespace() || ",()!=<>".contains(n) {
                        break;
                    }
                    s.push(n);
                    self.chars.next();
                }
                match s.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Identifier(s),
                }
            }
        }
    }
}

fn parse_requirement(lexer: &mut Lexer<'_>) -> Result<Requirement, SelectorError> {
    let negated = if lexer.peek() == &Token::Not {
        lexer.next();
        true
    } else {
        false
    };
    let key = match lexer.next() {
        Token::Identifier(k) => k,
        other => return Err(unable(format!("found '{other}', expected: identifier"))),
    };
    validate_key(&key)?;
    if negated {
        return Ok(Requirement::DoesNotExist(key));
    }
    match lexer.peek() {
        Token::End | Token::Comma => return Ok(Requirement::Exists(key)),
        _ => {}
    }
    let op = lexer.next();
    match op {
        Token::Equals | Token::DoubleEquals | Token::NotEquals => {
            let value = match lexer.peek() {
                Token::Identifier(_) => match lexer.next() {
                    Token::Identifier(v) => v,
                    _ => String::new(),
                },
                // `k=` selects the empty value.
                Token::End | Token::Comma => String::new(),
                other => {
                    return Err(unable(format!("found '{other}', expected: identifier")));
                }
            };
            validate_value(&key, &value)?;
            let set = BTreeSet::from([value]);
            Ok(if op == Token::NotEquals {
                Requirement::NotIn(key, set)
            } else {
                Requirement::In(key, set)
            })
        }
        Token::In | Token::NotIn => {
            if lexer.next() != Token::OpenParen {
                return Err(unable("found '', expected: '('".to_string()));
            }
            let mut values = BTreeSet::new();
            loop {
                match lexer.next() {
                    Token::Identifier(v) => {
                        validate_value(&key, &v)?;
                        values.insert(v);
                        match lexer.next() {
                            Token::Comma => continue,
                            Token::CloseParen => break,
                            other => {
                                return Err(unable(format!(
                                    "found '{other}', expected: ',', ')' or identifier"
                                )));
                            }
                        }
                    }
                    // `k in (a,)` and `k in ()` carry an empty value.
                    Token::Comma => {
                        values.insert(String::new());
                    }
                    Token::CloseParen => {
                        if values.is_empty() {
                            values.insert(String::new());
                        }
                        break;
                    }
                    other => {
                        return Err(unable(format!(
                            "found '{other}', expected: ',', ')' or identifier"
                        )));
                    }
                }
            }
            Ok(if op == Token::In {
                Requirement::In(key, values)
            } else {
                Requirement::NotIn(key, values)
            })
        }
        Token::Gt | Token::Lt => {
            let n = match lexer.next() {
                Token::Identifier(v) => v.parse::<i64>().map_err(|_| {
                    unable(format!(
                        "for 'Gt', 'Lt' operators, the value must be an integer: {v}"
                    ))
                })?,
                other => return Err(unable(format!("found '{other}', expected: identifier"))),
            };
            Ok(if op == Token::Gt {
                Requirement::GreaterThan(key, n)
            } else {
                Requirement::LessThan(key, n)
            })
        }
        other => Err(unable(format!(
            "found '{other}', expected: in, notin, =, ==, !=, gt, lt"
        ))),
    }
}

/// A qualified name with an optional DNS subdomain prefix, as label keys must be.
fn validate_key(key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && is_dns_subdomain(p));
    if !prefix_ok || !is_qualified_name_part(name) {
        return Err(unable(format!(
            "key: Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )));
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_qualified_name_part(value) {
        Ok(())
    } else {
        Err(unable(format!(
            "values[0][{key}]: Invalid value: \"{value}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )))
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// RFC 1123 subdomain: lowercase alphanumerics, '-' and '.', alphanumeric at both ends of
/// every label.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTerm {
    /// Dotted field path, e.g. `status.phase`.
    pub field: String,
    /// The wanted value.
    pub value: String,
    /// `!=` rather than `=`.
    pub negated: bool,
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parse the `fieldSelector` query parameter and check every field against `supported`
    /// (the resource's selectable fields besides `metadata.name` and `metadata.namespace`).
    pub fn parse(text: &str, supported: &[&str]) -> Result<FieldSelector, SelectorError> {
        let mut terms = Vec::new();
        for raw in split_unescaped(text, ',') {
            if raw.trim().is_empty() {
                continue;
            }
            let (field, value, negated) = if let Some((f, v)) = split_once_unescaped(&raw, "!=") {
                (f, v, true)
            } else if let Some((f, v)) = split_once_unescaped(&raw, "==") {
                (f, v, false)
            } else if let Some((f, v)) = split_once_unescaped(&raw, "=") {
                (f, v, false)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{text}'; can't understand '{raw}'"
                )));
            };
            let field = field.trim().to_string();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !supported.contains(&field.as_str())
            {
                return Err(SelectorError(format!("field label not supported: {field}")));
            }
            terms.push(FieldTerm {
                field,
                value: unescape(&value),
                negated,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// Whether the selector has no term.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The parsed terms.
    pub fn terms(&self) -> &[FieldTerm] {
        &self.terms
    }

    /// The value of an `=` term on `field`, if any (used to narrow a scan to one name).
    pub fn equals(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && !t.negated)
            .map(|t| t.value.as_str())
    }

    /// Whether the object matches every term; absent fields read as "" (and booleans as
    /// "true"/"false"), as the server's field label conversion does.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.terms.iter().all(|t| {
            let mut cur = obj;
            for part in t.field.split('.') {
                cur = &cur[part];
            }
            let actual = match cur {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            (actual == t.value) != t.negated
        })
    }
}

/// Split on `sep` not preceded by a backslash; escapes are kept for [`unescape`].
fn split_unescaped(text: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == sep {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
}

fn split_once_unescaped(text: &str, op: &str) -> Option<(String, String)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if text[i..].starts_with(op) {
            return Some((text[..i].to_string(), text[i + op.len()..].to_string()));
        }
        i += 1;
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn label_selector_forms() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m(""));
        assert!(m("app"));
        assert!(!m("!app"));
        assert!(m("!missing"));
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("missing!=x"));
        assert!(m("app in (web, api)"));
        assert!(!m("app notin (web,api)"));
        assert!(m("missing notin (web)"));
        assert!(m("app=web,tier=front"));
        assert!(!m("app=web,tier=back"));
        assert!(m("n>4"));
        assert!(!m("n<4"));
        assert!(m("example.com/x notin (a)"));
    }

    #[test]
    fn label_selector_errors() {
        assert!(LabelSelector::parse("app=").is_ok());
        for bad in [
            "=web",
            "app in web",
            "app in (a",
            "app=web,,",
            "Bad Key=1",
            "n>x",
        ] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert!(e.0.starts_with("unable to parse requirement"), "{bad}: {e}");
        }
    }

    #[test]
    fn field_selector_matches_and_rejects_unknown_fields() {
        let pod =
            json!({"metadata": {"name": "p", "namespace": "a"}, "status": {"phase": "Running"}});
        let sel = FieldSelector::parse("metadata.name=p,status.phase!=Pending", &["status.phase"])
            .unwrap();
        assert!(sel.matches_object(&pod));
        assert_eq!(sel.equals("metadata.name"), Some("p"));
        let sel = FieldSelector::parse("spec.nodeName=", &["spec.nodeName"]).unwrap();
        assert!(sel.matches_object(&pod));
        let err = FieldSelector::parse("spec.foo=x", &["status.phase"]).unwrap_err();
        assert_eq!(err.0, "field label not supported: spec.foo");
        let sel = FieldSelector::parse(r"metadata.name=a\,b", &[]).unwrap();
        assert_eq!(sel.terms()[0].value, "a,b");
    }
}
