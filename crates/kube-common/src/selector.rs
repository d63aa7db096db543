//! Label selectors with the syntax, semantics and error words of apimachinery's `labels.Parse`:
//! `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`, comma
//! separated, whitespace between tokens ignored. The one parser and matcher of the project:
//! the guard validates its config with it, the simulated API server answers `?labelSelector=`
//! with it.
//!
//! kube-core's `Selector` builds and matches selectors but does not parse strings, and no
//! well-kept crate parses this syntax, hence this small hand-written one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::names::{validate_label_value, validate_qualified_name};

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
    /// `key>n`: the label is present and an integer greater than n.
    GreaterThan,
    /// `key<n`.
    LessThan,
}

/// One comma-separated term of a selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// How the label's value is compared with `values`.
    pub op: SelectorOp,
    /// Sorted and deduplicated; one value for `=`, `!=`, `>` and `<`, none for `key`/`!key`.
    pub values: BTreeSet<String>,
}

impl Requirement {
    /// Whether the labels `get` returns satisfy this requirement.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let value = get(&self.key);
        let number = || value.and_then(|v| v.parse::<i64>().ok());
        let bound = || self.values.first().and_then(|v| v.parse::<i64>().ok());
        match self.op {
            SelectorOp::Equals | SelectorOp::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOp::NotEquals | SelectorOp::NotIn => {
                value.is_none_or(|v| !self.values.contains(v))
            }
            SelectorOp::Exists => value.is_some(),
            SelectorOp::DoesNotExist => value.is_none(),
            SelectorOp::GreaterThan => number().zip(bound()).is_some_and(|(v, n)| v > n),
            SelectorOp::LessThan => number().zip(bound()).is_some_and(|(v, n)| v < n),
        }
    }
}

/// A parsed label selector: the AND of its requirements. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// Why a selector string does not parse: apimachinery's words (what an API server answers
/// with 400) and the 0-based character offset of the offending token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError {
    /// 0-based character offset of the offending token.
    pub position: usize,
    /// What is wrong, in apimachinery's words.
    pub message: String,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.position)
    }
}

impl std::error::Error for SelectorError {}

impl LabelSelector {
    /// The selector that matches every label set.
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// Parse the Kubernetes selector syntax. Keys must be qualified names and values label
    /// values; `k=` and `k in ()` select the empty value, as in Kubernetes.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        Parser::new(text).parse()
    }

    /// Whether the labels `get` returns satisfy every requirement.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str> + Copy) -> bool {
        self.requirements.iter().all(|r| r.matches(get))
    }

    /// Whether a label set satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
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
        let single = || self.values.first().map(String::as_str).unwrap_or("");
        let list = || self.values.iter().cloned().collect::<Vec<_>>().join(",");
        match self.op {
            SelectorOp::Equals => write!(f, "{}={}", self.key, single()),
            SelectorOp::NotEquals => write!(f, "{}!={}", self.key, single()),
            SelectorOp::In => write!(f, "{} in ({})", self.key, list()),
            SelectorOp::NotIn => write!(f, "{} notin ({})", self.key, list()),
            SelectorOp::Exists => write!(f, "{}", self.key),
            SelectorOp::DoesNotExist => write!(f, "!{}", self.key),
            SelectorOp::GreaterThan => write!(f, "{}>{}", self.key, single()),
            SelectorOp::LessThan => write!(f, "{}<{}", self.key, single()),
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
    Gt,
    Lt,
    End,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Token::Ident(s) => s,
            Token::Comma => ",",
            Token::Open => "(",
            Token::Close => ")",
            Token::Eq => "=",
            Token::DoubleEq => "==",
            Token::NotEq => "!=",
            Token::Bang => "!",
            Token::Gt => ">",
            Token::Lt => "<",
            Token::End => "end of string",
        })
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
                '>' => Token::Gt,
                '<' => Token::Lt,
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

    /// apimachinery's framing of every parse error.
    fn error<T>(position: usize, detail: impl fmt::Display) -> Result<T, SelectorError> {
        Err(SelectorError {
            position,
            message: format!("unable to parse requirement: {detail}"),
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
                (_, Token::Comma) => {}
                (pos, other) => {
                    return Self::error(
                        pos,
                        format!("found '{other}', expected: ',' or 'end of string'"),
                    );
                }
            }
        }
    }

    /// A key; `in` and `notin` are operators there, as in apimachinery's lexer.
    fn key(&mut self) -> Result<String, SelectorError> {
        match self.bump() {
            (pos, Token::Ident(key)) if key != "in" && key != "notin" => {
                validate_qualified_name(&key)
                    .or_else(|e| Self::error(pos, format!("key: Invalid value: {key:?}: {e}")))
                    .map(|()| key)
            }
            (pos, other) => Self::error(pos, format!("found '{other}', expected: identifier")),
        }
    }

    fn value(key: &str, pos: usize, value: String) -> Result<String, SelectorError> {
        validate_label_value(&value)
            .or_else(|e| {
                Self::error(
                    pos,
                    format!("values[0][{key}]: Invalid value: {value:?}: {e}"),
                )
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
        if matches!(self.peek().1, Token::End | Token::Comma) {
            // The terminator is the caller's.
            return Ok(requirement(key, SelectorOp::Exists, BTreeSet::new()));
        }
        let (pos, token) = self.bump();
        let op = match token {
            Token::Eq | Token::DoubleEq => SelectorOp::Equals,
            Token::NotEq => SelectorOp::NotEquals,
            Token::Gt => SelectorOp::GreaterThan,
            Token::Lt => SelectorOp::LessThan,
            Token::Ident(word) if word == "in" => SelectorOp::In,
            Token::Ident(word) if word == "notin" => SelectorOp::NotIn,
            other => {
                return Self::error(
                    pos,
                    format!("found '{other}', expected: in, notin, =, ==, !=, gt, lt"),
                );
            }
        };
        let values = match op {
            SelectorOp::In | SelectorOp::NotIn => self.value_set(&key)?,
            SelectorOp::GreaterThan | SelectorOp::LessThan => match self.bump() {
                (pos, Token::Ident(v)) => {
                    if v.parse::<i64>().is_err() {
                        return Self::error(
                            pos,
                            format!("for 'Gt', 'Lt' operators, the value must be an integer: {v}"),
                        );
                    }
                    BTreeSet::from([v])
                }
                (pos, other) => {
                    return Self::error(pos, format!("found '{other}', expected: identifier"));
                }
            },
            _ => {
                // `key=` selects the empty value.
                let value = match self.peek().clone() {
                    (_, Token::End | Token::Comma) => String::new(),
                    (pos, Token::Ident(v)) => {
                        self.bump();
                        Self::value(&key, pos, v)?
                    }
                    (pos, other) => {
                        return Self::error(pos, format!("found '{other}', expected: identifier"));
                    }
                };
                BTreeSet::from([value])
            }
        };
        Ok(requirement(key, op, values))
    }

    /// `( v1, v2 )`; empty members (`(a,)`, `()`) are the empty value, as in Kubernetes.
    fn value_set(&mut self, key: &str) -> Result<BTreeSet<String>, SelectorError> {
        match self.bump() {
            (_, Token::Open) => {}
            (pos, other) => return Self::error(pos, format!("found '{other}', expected: '('")),
        }
        let mut values = BTreeSet::new();
        loop {
            let value = match self.peek().clone() {
                (pos, Token::Ident(v)) => {
                    self.bump();
                    Self::value(key, pos, v)?
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
                        format!("found '{other}', expected: ',', ')' or identifier"),
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
    fn rejects_bad_syntax_with_position_in_apimachinery_words() {
        let cases: &[(&str, usize, &str)] = &[
            ("a=b,", 4, "found 'end of string', expected: identifier"),
            (",a", 0, "found ',', expected: identifier"),
            ("a in (b", 7, "expected: ',', ')' or identifier"),
            ("a in b", 5, "expected: '('"),
            ("a b", 2, "expected: in, notin, =, ==, !=, gt, lt"),
            ("a>x", 2, "the value must be an integer"),
            ("a=b=c", 3, "expected: ',' or 'end of string'"),
            ("-a=b", 0, "key: Invalid value: \"-a\""),
            ("a=-b", 2, "values[0][a]: Invalid value: \"-b\""),
            ("Bad.Prefix/a=b", 0, "prefix"),
            ("!", 1, "expected: identifier"),
            ("!a=b", 2, "expected: ',' or 'end of string'"),
            ("a=(b)", 2, "found '(', expected: identifier"),
            ("a in (b c)", 8, "expected: ',', ')' or identifier"),
            ("in=1", 0, "found 'in', expected: identifier"),
        ];
        for (text, position, fragment) in cases {
            let e = LabelSelector::parse(text).expect_err(text);
            assert_eq!(e.position, *position, "{text:?}: {e}");
            assert!(
                e.message.starts_with("unable to parse requirement: "),
                "{text:?}: {e}"
            );
            assert!(e.message.contains(fragment), "{text:?}: {e}");
            assert!(
                e.to_string()
                    .ends_with(&format!("(at character {position})"))
            );
        }
    }

    #[test]
    fn an_exists_requirement_may_come_last() {
        // The old config parser stepped back past the end here and rejected these.
        let s = sel("app in (web,db),tier");
        assert_eq!(s.to_string(), "app in (db,web),tier");
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert_eq!(sel("a=b,c").requirements().len(), 2);
        assert_eq!(sel("c").requirements()[0].op, SelectorOp::Exists);
    }

    #[test]
    fn empty_set_members_are_the_empty_value() {
        let s = sel("a in ()");
        assert!(s.matches(&labels(&[("a", "")])));
        assert!(!s.matches(&labels(&[("a", "x")])));
        let s = sel("a notin (b,)");
        assert!(!s.matches(&labels(&[("a", "")])));
        assert!(s.matches(&labels(&[("a", "c")])));
    }

    #[test]
    fn numeric_comparisons() {
        let s = sel("n>4,m<10");
        assert!(s.matches(&labels(&[("n", "5"), ("m", "9")])));
        assert!(!s.matches(&labels(&[("n", "4"), ("m", "9")])));
        assert!(
            !s.matches(&labels(&[("n", "x"), ("m", "9")])),
            "not a number"
        );
        assert!(!s.matches(&labels(&[("m", "9")])), "absent");
        assert_eq!(s.to_string(), "n>4,m<10");
        assert_eq!(sel(&s.to_string()), s);
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
