//! Reading Prometheus text exposition in tests, independently of the guard's own code.
//!
//! Absence is never a number: [`sum`] fails when no series matches, so a renamed metric or
//! label fails the test that reads it instead of reading as 0; [`series`] says "none" where a
//! test polls for a series that does not exist yet.

use std::collections::BTreeMap;

/// One sample line: the metric name, its label set and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of `text`; panics on a line that is not a sample, a comment or blank.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| parse_sample(l).unwrap_or_else(|e| panic!("sample {l:?}: {e}")))
        .collect()
}

/// Sum of every sample of `name` whose labels include each of `labels` with exactly that
/// value. Panics when no sample matches: a missing series is not 0.
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    series(text, name, labels).unwrap_or_else(|| {
        let names: std::collections::BTreeSet<String> =
            samples(text).into_iter().map(|s| s.name).collect();
        panic!("no series {name} with labels {labels:?}; the metrics served: {names:?}")
    })
}

/// [`sum`], or None when no sample matches.
pub fn series(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = samples(text)
        .into_iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).is_some_and(|got| got == v))
        })
        .map(|s| s.value)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return Err("no value".into()),
    };
    let mut labels = BTreeMap::new();
    let rest = if let Some(mut body) = rest.strip_prefix('{') {
        loop {
            body = body.trim_start_matches([',', ' ']);
            if let Some(after) = body.strip_prefix('}') {
                break after;
            }
            let (key, after) = body.split_once("=\"").ok_or("a label without =\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next() {
                    None => return Err(format!("label {key}: unterminated value")),
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        other => return Err(format!("label {key}: bad escape {other:?}")),
                    },
                    Some((_, c)) => value.push(c),
                }
            };
            if labels.insert(key.trim().to_owned(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
            body = &after[end + 1..];
        }
    } else {
        rest
    };
    // The value, then an optional timestamp.
    let value = rest
        .split_whitespace()
        .next()
        .ok_or("no value")?
        .parse::<f64>()
        .map_err(|e| e.to_string())?;
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::{samples, series, sum};

    const TEXT: &str = "# HELP x y\nx{a=\"1\",b=\"2\"} 3\nx{a=\"1\"} 4\nx 1\nxy 9\n\
                        y{xa=\"1\",a=\"2\"} 5\nz{q=\"a \\\"b\\\", c}\"} 6 1700000000\n";

    #[test]
    fn sums_samples_whose_labels_match_exactly() {
        assert_eq!(sum(TEXT, "x", &[]), 8.0);
        assert_eq!(sum(TEXT, "x", &[("a", "1")]), 7.0);
        assert_eq!(sum(TEXT, "x", &[("b", "2")]), 3.0);
        assert_eq!(
            series(TEXT, "y", &[("a", "1")]),
            None,
            "xa=\"1\" is not a=\"1\""
        );
        assert_eq!(sum(TEXT, "y", &[("a", "2")]), 5.0);
        assert_eq!(
            series(TEXT, "x", &[("a", "11")]),
            None,
            "values match whole"
        );
        assert_eq!(
            sum(TEXT, "z", &[("q", "a \"b\", c}")]),
            6.0,
            "escapes, commas and braces inside a value"
        );
    }

    #[test]
    #[should_panic(expected = "no series nothing")]
    fn a_missing_series_is_no_number() {
        sum(TEXT, "nothing", &[]);
    }

    #[test]
    fn every_sample_is_parsed_or_refused() {
        assert_eq!(samples(TEXT).len(), 6);
        for bad in [
            "x{a=\"1\" 2",
            "x{a=1} 2",
            "x nan-ish",
            "x{a=\"\\q\"} 1",
            "x{a=\"1\",a=\"2\"} 1",
        ] {
            let r = std::panic::catch_unwind(|| samples(bad));
            assert!(r.is_err(), "{bad:?} accepted");
        }
    }
}
