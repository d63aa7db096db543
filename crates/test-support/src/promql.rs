//! PromQL helpers for tests that read the Grafana dashboard (`dashboards/initguard.json`).
//!
//! [`dashboard_queries`] extracts every panel query together with a runnable form in which
//! the dashboard's template variables and Grafana's built-in interval variables are replaced
//! by fixed values ([`substitute`]); [`scan`] finds the vector selectors and range windows of
//! an expression without a full parser, which is enough to check metric names and filters.

use serde_json::Value;

/// What each variable becomes in a runnable expression: the dashboard's own variables match
/// everything (as "All" does; `job` takes its default), Grafana's built-ins get values that suit a 15 s scrape interval.
pub const SUBSTITUTIONS: &[(&str, &str)] = &[
    ("cluster", ".*"),
    // The dashboard's default job (a single choice), as the scrape configs name it.
    ("job", "initguard"),
    ("initializer", ".*"),
    ("instance", ".*"),
    ("__rate_interval", "1m"),
    ("__interval", "30s"),
    ("__range", "5m"),
];

/// Replaces `$name` and `${name}` by the values in [`SUBSTITUTIONS`].
///
/// An unknown variable is an error rather than left in place, so a typo in a dashboard
/// query cannot reach Prometheus as a literal `$`.
pub fn substitute(expr: &str) -> Result<String, String> {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, consumed) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("unterminated ${{ in {expr:?}"))?;
            (&braced[..end], end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = SUBSTITUTIONS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("unknown variable ${name} in {expr:?}"))?;
        out.push_str(value);
        rest = &after[consumed..];
    }
    out.push_str(rest);
    Ok(out)
}

/// One PromQL query of one dashboard panel.
#[derive(Debug, Clone)]
pub struct DashboardQuery {
    /// The panel's `id`.
    pub panel_id: i64,
    /// The panel's `title`.
    pub panel_title: String,
    /// The target's `refId` (A, B, ...).
    pub ref_id: String,
    /// The expression as written in the dashboard, variables and all.
    pub expr: String,
    /// The expression with every variable substituted, ready to send to Prometheus.
    pub runnable: String,
}

/// Every panel of a dashboard, panels nested in collapsed rows included.
pub fn dashboard_panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel);
            if let Some(nested) = panel.get("panels") {
                walk(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    if let Some(panels) = dashboard.get("panels") {
        walk(panels, &mut out);
    }
    out
}

/// Every target expression of every panel, in panel order.
///
/// Fails on a target without a non-empty `expr` or with an unknown variable.
pub fn dashboard_queries(dashboard: &Value) -> Result<Vec<DashboardQuery>, String> {
    let mut out = Vec::new();
    for panel in dashboard_panels(dashboard) {
        let panel_id = panel.get("id").and_then(Value::as_i64).unwrap_or(-1);
        let panel_title = panel
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        for target in panel
            .get("targets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ref_id = target
                .get("refId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let expr = target
                .get("expr")
                .and_then(Value::as_str)
                .filter(|e| !e.trim().is_empty())
                .ok_or_else(|| {
                    format!("panel {panel_id} {panel_title:?} target {ref_id:?}: no expr")
                })?
                .to_owned();
            let runnable = substitute(&expr)
                .map_err(|e| format!("panel {panel_id} {panel_title:?} target {ref_id}: {e}"))?;
            out.push(DashboardQuery {
                panel_id,
                panel_title: panel_title.clone(),
                ref_id,
                expr,
                runnable,
            });
        }
    }
    Ok(out)
}

/// A vector selector found in an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// The metric name (from before the braces, or from a `__name__="..."` matcher).
    pub metric: String,
    /// The text between the braces, empty without braces.
    pub matchers: String,
}

/// What [`scan`] finds in an expression.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Vector selectors, in order of appearance.
    pub selectors: Vec<Selector>,
    /// The text between the brackets of every range or subquery (`5m`, `$__rate_interval`).
    pub ranges: Vec<String>,
}

/// Words that are never metric names: aggregations (which may be followed by `by` rather
/// than a parenthesis), binary and grouping keywords, and number literals.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "atan2",
    "offset",
    "inf",
    "nan",
];

/// Keywords whose following parenthesis holds label names, not an expression.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Finds the vector selectors and range windows of a PromQL expression.
///
/// A lexical scan, not a parser: string literals, comments, label lists and numbers are
/// skipped, identifiers followed by `(` are functions. Syntax errors are left to promtool;
/// this only fails on unterminated strings, braces or brackets and on selectors without a
/// metric name, which it cannot attribute.
pub fn scan(expr: &str) -> Result<Scan, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut scan = Scan::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&chars, i, expr)?;
        } else if c == '[' {
            let end = find_closing(&chars, i, ']', expr)?;
            scan.ranges.push(chars[i + 1..end].iter().collect());
            i = end + 1;
        } else if c == '{' {
            let end = find_closing(&chars, i, '}', expr)?;
            let matchers: String = chars[i + 1..end].iter().collect();
            let metric = name_matcher(&matchers)
                .ok_or_else(|| format!("selector without a metric name in {expr:?}"))?;
            scan.selectors.push(Selector { metric, matchers });
            i = end + 1;
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            i = skip_number(&chars, i);
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':'))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_space(&chars, i);
            let lower = word.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) && chars.get(next) == Some(&'(') {
                i = find_closing(&chars, next, ')', expr)? + 1;
            } else if KEYWORDS.contains(&lower.as_str()) || chars.get(next) == Some(&'(') {
                // A keyword or a function call: its arguments are scanned as they come.
            } else if chars.get(next) == Some(&'{') {
                let end = find_closing(&chars, next, '}', expr)?;
                scan.selectors.push(Selector {
                    metric: word,
                    matchers: chars[next + 1..end].iter().collect(),
                });
                i = end + 1;
            } else {
                scan.selectors.push(Selector {
                    metric: word,
                    matchers: String::new(),
                });
            }
        } else {
            i += 1;
        }
    }
    Ok(scan)
}

/// The metric names an expression reads.
pub fn metric_names(expr: &str) -> Result<std::collections::BTreeSet<String>, String> {
    Ok(scan(expr)?
        .selectors
        .into_iter()
        .map(|s| s.metric)
        .collect())
}

fn skip_space(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

/// Index just past the string literal starting at `start`.
fn skip_string(chars: &[char], start: usize, expr: &str) -> Result<usize, String> {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(format!("unterminated string in {expr:?}"))
}

/// Index of the `close` matching the opening character at `open`, skipping strings.
fn find_closing(chars: &[char], open: usize, close: char, expr: &str) -> Result<usize, String> {
    let opener = chars[open];
    let mut depth = 0usize;
    let mut i = open;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(chars, i, expr)?;
            continue;
        }
        if c == opener {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Ok(i);
            }
        }
        i += 1;
    }
    Err(format!("unbalanced {opener:?} in {expr:?}"))
}

/// Index just past a number or duration literal (`0.5`, `1e-09`, `0x1f`, `5m`, `1h30m`).
fn skip_number(chars: &[char], start: usize) -> usize {
    let hex = chars[start] == '0' && matches!(chars.get(start + 1), Some('x' | 'X'));
    let mut i = start;
    while i < chars.len() {
        let c = chars[i];
        let exponent_sign =
            !hex && matches!(c, '+' | '-') && i > start && matches!(chars[i - 1], 'e' | 'E');
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' || exponent_sign {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// The value of an equality `__name__` matcher, if any.
fn name_matcher(matchers: &str) -> Option<String> {
    let rest = matchers.split("__name__").nth(1)?.trim_start();
    let rest = rest.strip_prefix('=')?.trim_start();
    let quote = rest.chars().next().filter(|q| matches!(q, '"' | '\''))?;
    let value = &rest[1..];
    value.find(quote).map(|end| value[..end].to_owned())
}
