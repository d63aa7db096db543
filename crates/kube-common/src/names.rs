//! Kubernetes name syntax (apimachinery `validation`): DNS-1123 labels and subdomains, qualified
//! names (label keys, scheduling gate names) and label values.
//!
//! Each check returns `Err` with a sentence saying what is expected, ready to follow a key path.

/// Longest DNS-1123 label (namespace names).
pub const DNS1123_LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain (most object names, qualified-name prefixes).
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest name part of a qualified name, and longest label value.
pub const QUALIFIED_NAME_MAX: usize = 63;
/// Longest initializer name: a subdomain prefix, a `/` and a 63-character name.
pub const INITIALIZER_NAME_MAX: usize = 316;

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without the length limit.
fn is_dns_label_shape(s: &str) -> bool {
    let (Some(first), Some(last)) = (s.chars().next(), s.chars().last()) else {
        return false;
    };
    is_lower_alnum(first)
        && is_lower_alnum(last)
        && s.chars().all(|c| is_lower_alnum(c) || c == '-')
}

/// A DNS-1123 label such as a namespace name: at most 63 lowercase letters, digits and '-',
/// starting and ending with a letter or digit.
pub fn validate_dns1123_label(s: &str) -> Result<(), InvalidName> {
    if s.is_empty() {
        return Err(InvalidName(
            "expected a DNS-1123 label such as \"kube-system\", got an empty string".into(),
        ));
    }
    if s.len() > DNS1123_LABEL_MAX {
        return Err(InvalidName(format!(
            "expected a DNS-1123 label of at most {DNS1123_LABEL_MAX} characters, got {} characters",
            s.len()
        )));
    }
    if !is_dns_label_shape(s) {
        return Err(InvalidName(format!(
            "expected a DNS-1123 label (lowercase letters, digits and '-', starting and ending \
             with a letter or digit, e.g. \"kube-system\"), got {s:?}"
        )));
    }
    Ok(())
}

/// A DNS-1123 subdomain such as most object names: at most 253 characters, dot-separated
/// DNS-1123 labels.
pub fn validate_dns1123_subdomain(s: &str) -> Result<(), InvalidName> {
    if s.is_empty() {
        return Err(InvalidName(
            "expected a DNS-1123 subdomain such as \"example.com\", got an empty string".into(),
        ));
    }
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        return Err(InvalidName(format!(
            "expected a DNS-1123 subdomain of at most {DNS1123_SUBDOMAIN_MAX} characters, got {} \
             characters",
            s.len()
        )));
    }
    if !s.split('.').all(is_dns_label_shape) {
        return Err(InvalidName(format!(
            "expected a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', each \
             dot-separated part starting and ending with a letter or digit, e.g. \
             \"sidecar-injector\"), got {s:?}"
        )));
    }
    Ok(())
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters: the name part of a
/// qualified name.
fn check_qualified_name_part(name: &str, whole: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("the name part is empty in {whole:?}"));
    }
    if name.len() > QUALIFIED_NAME_MAX {
        return Err(format!(
            "the name part must be at most {QUALIFIED_NAME_MAX} characters, got {} in {whole:?}",
            name.len()
        ));
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let (Some(first), Some(last)) = (name.chars().next(), name.chars().last()) else {
        return Err(format!("the name part is empty in {whole:?}"));
    };
    if !alnum(first)
        || !alnum(last)
        || !name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "the name part must consist of letters, digits, '-', '_' and '.', starting and \
             ending with a letter or digit; got {whole:?}"
        ));
    }
    Ok(())
}

/// A Kubernetes qualified name, the syntax of label keys and scheduling gate names:
/// an optional DNS-1123 subdomain prefix and '/', then a name of at most 63 characters.
pub fn validate_qualified_name(s: &str) -> Result<(), InvalidName> {
    if s.is_empty() {
        return Err(InvalidName(
            "expected a qualified name such as \"initguard.io/bypass\", got an empty string".into(),
        ));
    }
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    if let Some(prefix) = prefix {
        if name.contains('/') {
            return Err(InvalidName(format!(
                "expected a qualified name with at most one '/' (PREFIX/NAME), got {s:?}"
            )));
        }
        validate_dns1123_subdomain(prefix).map_err(|e| {
            InvalidName(format!(
                "the prefix of qualified name {s:?} is invalid: {e}"
            ))
        })?;
    }
    check_qualified_name_part(name, s)
        .map_err(|e| InvalidName(format!("invalid qualified name: {e}")))
}

/// A label value: empty, or at most 63 letters, digits, '-', '_' and '.', starting and ending
/// with a letter or digit.
pub fn validate_label_value(s: &str) -> Result<(), InvalidName> {
    if s.is_empty() {
        return Ok(());
    }
    check_qualified_name_part(s, s).map_err(|_| {
        InvalidName(format!(
            "expected a label value (at most {QUALIFIED_NAME_MAX} letters, digits, '-', '_' and \
             '.', starting and ending with a letter or digit), got {s:?}"
        ))
    })
}

/// An initializer name: a legacy initializer name (`sidecar.example.com`) or a scheduling gate
/// name (`kueue.x-k8s.io/admission`). Non-empty, at most 316 characters of letters, digits,
/// '-', '_', '.' and '/', starting and ending with a letter or digit. The character set also
/// keeps the name safe inside the `NAME=REASON@TIME` bypass annotation.
pub fn validate_initializer_name(s: &str) -> Result<(), InvalidName> {
    if s.is_empty() {
        return Err(InvalidName(
            "expected a non-empty initializer name such as \"sidecar.example.com\"".into(),
        ));
    }
    if s.chars().count() > INITIALIZER_NAME_MAX {
        return Err(InvalidName(format!(
            "expected an initializer name of at most {INITIALIZER_NAME_MAX} characters, got {}",
            s.chars().count()
        )));
    }
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
    let ends_ok = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ends_ok || !s.chars().all(ok_char) {
        return Err(InvalidName(format!(
            "expected an initializer name of letters, digits, '-', '_', '.' and '/', starting \
             and ending with a letter or digit (e.g. \"sidecar.example.com\" or \
             \"kueue.x-k8s.io/admission\"), got {s:?}"
        )));
    }
    Ok(())
}

/// A name that breaks Kubernetes' syntax; the message says which rule and shows the name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidName(String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for ok in ["a", "kube-system", "a1", "0", &"a".repeat(63)] {
            assert!(validate_dns1123_label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64), "ä"] {
            assert!(validate_dns1123_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dns_subdomains() {
        for ok in ["a", "a.b", "c1f6bfd2.kueue.x-k8s.io", "sidecar-injector"] {
            assert!(validate_dns1123_subdomain(ok).is_ok(), "{ok}");
        }
        let long = format!("{}.{}", "a".repeat(200), "b".repeat(53));
        for bad in ["", ".a", "a.", "a..b", "A.b", "a_b", &long] {
            assert!(validate_dns1123_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "a",
            "initguard.io/bypass",
            "k8s.opsani.io/initializer",
            "App_Name.v1",
            "x/Y-z",
        ] {
            assert!(validate_qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "a/b/c",
            "Example.com/a",
            "-a",
            "a b",
            "a=b",
            &"a".repeat(64),
        ] {
            assert!(validate_qualified_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn label_values() {
        for ok in ["", "a", "A-b_c.d", &"z".repeat(63)] {
            assert!(validate_label_value(ok).is_ok(), "{ok}");
        }
        for bad in ["-a", "a b", "a/b", &"z".repeat(64)] {
            assert!(validate_label_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn initializer_names() {
        for ok in [
            "sidecar.example.com",
            "kueue.x-k8s.io/admission",
            "a",
            &"a".repeat(316),
        ] {
            assert!(validate_initializer_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            " a",
            "a b",
            "a=b",
            "a@b",
            "a,b",
            "a\tb",
            ".a",
            "a/",
            &"a".repeat(317),
        ] {
            assert!(validate_initializer_name(bad).is_err(), "{bad}");
        }
    }
}
