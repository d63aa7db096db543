//! Reading Prometheus text exposition in tests, independently of the guard's own code.

/// Sum of every sample of `name` whose labels contain all of `labels` (`key="value"` pairs);
/// panics on a sample value that is not a number.
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, label_text) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            (metric == name).then_some((l, label_text, value))
        })
        .filter(|(_, label_text, _)| {
            labels
                .iter()
                .all(|(k, v)| label_text.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|(line, _, value)| {
            value
                .parse::<f64>()
                .unwrap_or_else(|e| panic!("sample {line:?}: {e}"))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::sum;

    #[test]
    fn sums_matching_samples() {
        let text = "# HELP x y\nx{a=\"1\",b=\"2\"} 3\nx{a=\"1\"} 4\nx 1\nxy 9\n";
        assert_eq!(sum(text, "x", &[]), 8.0);
        assert_eq!(sum(text, "x", &[("a", "1")]), 7.0);
        assert_eq!(sum(text, "x", &[("b", "2")]), 3.0);
        assert_eq!(sum(text, "nothing", &[]), 0.0);
    }
}
