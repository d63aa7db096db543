//! Label and field selectors with the syntax and errors of the Kubernetes API server.
//!
//! Label selectors are parsed and matched by [`kube_common::selector`], the project's one
//! implementation. Field selectors accept `f=v`, `f==v` and `f!=v` over the fields each
//! resource supports; an unknown field is a `BadRequest`, as on a real server.

use serde_json::Value;

pub use kube_common::selector::LabelSelector;

/// A parse error; the server answers it as 400 BadRequest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// Parse the `labelSelector` query parameter; the error is the server's 400 message.
pub fn parse_labels(text: &str) -> Result<LabelSelector, SelectorError> {
    LabelSelector::parse(text).map_err(|e| SelectorError(e.message))
}

/// Whether an object's `metadata.labels` (absent counts as empty) satisfy `selector`.
pub fn labels_match(selector: &LabelSelector, obj: &Value) -> bool {
    let labels = obj["metadata"]["labels"].as_object();
    selector.is_empty()
        || selector.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
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

    #[test]
    fn label_selectors_match_object_labels() {
        let obj = json!({"metadata": {"labels": {"app": "web", "n": "5"}}});
        let m = |s: &str| labels_match(&parse_labels(s).unwrap(), &obj);
        assert!(m("") && m("app=web") && m("n>4") && m("!missing"));
        assert!(!m("app!=web") && !m("n<4"));
        assert!(labels_match(&parse_labels("!app").unwrap(), &json!({})));
        let e = parse_labels("app in web").unwrap_err();
        assert!(e.0.starts_with("unable to parse requirement"), "{e}");
        assert!(
            !e.0.contains("at character"),
            "the server's words only: {e}"
        );
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
