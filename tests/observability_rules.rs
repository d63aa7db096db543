//! The observability deliverables: the Grafana dashboard (`dashboards/initguard.json`), the
//! alerting rules (`deploy/prometheus-rules.plain.yaml` and the PrometheusRule
//! `deploy/prometheus-rules.yaml`) and their promtool unit tests (`tests/prometheus/*.yml`).
//!
//! PromQL is checked with promtool, Prometheus' own parser (Debian package `prometheus`).
//! Without promtool the promtool checks are skipped with a message, unless `CI` is set, in
//! which case they fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use initguard_test_support::promql;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

const DASHBOARD: &str = "dashboards/initguard.json";
const RULES_PLAIN: &str = "deploy/prometheus-rules.plain.yaml";
const RULES_OPERATOR: &str = "deploy/prometheus-rules.yaml";
const RULE_TESTS_DIR: &str = "tests/prometheus";
/// Each alert names its README section; the chart turns it into a `runbook_url` under the
/// base the operator publishes the README at (no made-up host in the shipped files).
const RUNBOOK: &str = "README.md#";

/// Every alert, as the runbook documents them.
const ALERTS: &[&str] = &[
    "InitguardStuckInitialization",
    "InitguardInitializerOwnerDown",
    "InitguardInitializerOwnerUnknown",
    "InitguardPileup",
    "InitguardBypassing",
    "InitguardBypassErrors",
    "InitguardAbsent",
    "InitguardNotScraping",
    "InitguardNoLeader",
    "InitguardMultipleLeaders",
    "InitguardWatchRestartsHigh",
    "InitguardWebhookBypassed",
    "InitguardWebhookRestoreConflict",
    "InitguardWebhookFlapping",
    "InitguardInitContainerStuck",
    "InitguardInitContainerOwnerDown",
    "InitguardRecreationsRefused",
];

/// Metrics initguard exports (README "Observe"), `initguard_deadline_seconds` and
/// `initguard_dry_run` included. `up` and `process_*` are accepted besides.
const EXPORTED: &[&str] = &[
    "initguard_waiting_pods",
    "initguard_oldest_wait_seconds",
    "initguard_wait_duration_seconds_bucket",
    "initguard_wait_duration_seconds_sum",
    "initguard_wait_duration_seconds_count",
    "initguard_bypasses_total",
    "initguard_bypass_errors_total",
    "initguard_bypass_refused_total",
    "initguard_events_total",
    "initguard_tls_reloads_total",
    "initguard_owner_up",
    "initguard_owner_state",
    "initguard_pileup_max_waiting_pods",
    "initguard_pileups",
    "initguard_is_leader",
    "initguard_watch_restarts_total",
    "initguard_owner_probe_total",
    "initguard_build_info",
    "initguard_deadline_seconds",
    "initguard_unlisted_alert_after_seconds",
    "initguard_dry_run",
    "initguard_webhook_bypassed",
    "initguard_webhook_bypasses_total",
    "initguard_webhook_restores_total",
    "initguard_webhook_flapping",
    "initguard_webhook_admitted_without_total",
    "initguard_webhook_evictions_total",
    "initguard_init_waiting_pods",
    "initguard_init_oldest_wait_seconds",
    "initguard_init_deadline_seconds",
    "initguard_init_wait_duration_seconds_bucket",
    "initguard_init_wait_duration_seconds_sum",
    "initguard_init_wait_duration_seconds_count",
    "initguard_init_failures_total",
    "initguard_init_recreations_total",
    "initguard_owner_down_nodes",
];

/// Exported metrics that carry an `initializer` label.
const PER_INITIALIZER: &[&str] = &[
    "initguard_waiting_pods",
    "initguard_oldest_wait_seconds",
    "initguard_wait_duration_seconds_bucket",
    "initguard_wait_duration_seconds_sum",
    "initguard_wait_duration_seconds_count",
    "initguard_bypasses_total",
    "initguard_bypass_errors_total",
    "initguard_bypass_refused_total",
    "initguard_owner_up",
    "initguard_owner_state",
    "initguard_pileup_max_waiting_pods",
    "initguard_pileups",
    "initguard_deadline_seconds",
];

fn is_exported(metric: &str) -> bool {
    EXPORTED.contains(&metric) || metric == "up" || metric.starts_with("process_")
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn dashboard() -> Json {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

fn yaml(path: &str) -> Yaml {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every alerting rule of the plain rules file, in file order.
fn alert_rules() -> Vec<Yaml> {
    let groups = yaml(RULES_PLAIN)["groups"].clone();
    let groups = groups.as_sequence().expect("groups is a list");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

fn str_of<'a>(v: &'a Yaml, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing or not a string in {v:?}"))
}

/// The unit test files, sorted.
fn rule_test_files() -> Vec<PathBuf> {
    let dir = root().join(RULE_TESTS_DIR);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.yml in {}", dir.display());
    files
}

/// promtool's path, or `None` (after saying so) when it is missing outside CI.
fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("promtool");
    }
    initguard_test_support::tools::missing(
        "observability_rules",
        "promtool",
        "apt-get install --no-install-recommends prometheus",
    );
    None
}

/// Runs promtool in the repository root; its stdout, or its whole output as the error.
fn try_promtool(promtool: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(root())
        .output()
        .map_err(|e| format!("running promtool {args:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "promtool {args:?} failed ({}):\n{stdout}\n{stderr}",
            out.status
        ))
    }
}

/// Runs promtool in the repository root and fails with its output unless it succeeds.
fn run_promtool(promtool: &str, args: &[&str]) -> String {
    try_promtool(promtool, args).unwrap_or_else(|e| panic!("{e}"))
}

/// Writes `(record name, expression)` pairs as recording rules and runs `promtool check
/// rules` on them, which parses each expression with Prometheus' own PromQL parser.
fn promtool_check_exprs(promtool: &str, exprs: &[(String, String)]) -> Result<(), String> {
    let rules: Vec<Json> = exprs
        .iter()
        .map(|(record, expr)| serde_json::json!({ "record": record, "expr": expr }))
        .collect();
    let file = serde_json::json!({ "groups": [{ "name": "expressions", "rules": rules }] });
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("expressions.yaml");
    std::fs::write(&path, serde_yaml::to_string(&file).expect("rules as YAML"))
        .expect("write rules");
    let path = path.to_str().expect("UTF-8 temporary path");
    let out = try_promtool(promtool, &["check", "rules", path])?;
    if out.contains(&format!("SUCCESS: {} rules found", exprs.len())) {
        Ok(())
    } else {
        Err(format!("promtool did not check every expression:\n{out}"))
    }
}

mod rules {
    use super::*;

    #[test]
    fn plain_rules_pass_promtool_check() {
        let Some(promtool) = promtool() else { return };
        let out = run_promtool(promtool, &["check", "rules", RULES_PLAIN]);
        assert!(
            out.contains(&format!("SUCCESS: {} rules found", ALERTS.len())),
            "{out}"
        );
    }

    #[test]
    fn prometheus_rule_carries_the_plain_groups() {
        let cr = yaml(RULES_OPERATOR);
        assert_eq!(str_of(&cr, "apiVersion"), "monitoring.coreos.com/v1");
        assert_eq!(str_of(&cr, "kind"), "PrometheusRule");
        assert_eq!(str_of(&cr["metadata"], "namespace"), "kube-system");
        assert_eq!(str_of(&cr["metadata"], "name"), "initguard");
        // No guessed selector labels (`release: prometheus`): the operator adds theirs.
        assert!(cr["metadata"]["labels"]["release"].is_null());
        let plain = yaml(RULES_PLAIN);
        assert_eq!(
            plain.as_mapping().map(|m| m.len()),
            Some(1),
            "the plain file holds only `groups`"
        );
        assert_eq!(
            cr["spec"]["groups"], plain["groups"],
            "{RULES_OPERATOR} spec.groups differ from {RULES_PLAIN} groups"
        );
    }

    #[test]
    fn promtool_unit_tests_pass() {
        let Some(promtool) = promtool() else { return };
        let files: Vec<String> = rule_test_files()
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let mut args = vec!["test", "rules"];
        args.extend(files.iter().map(String::as_str));
        let out = run_promtool(promtool, &args);
        assert_eq!(out.matches("SUCCESS").count(), files.len(), "{out}");
    }

    /// Each alert needs a unit test where it fires and one where it stays quiet.
    #[test]
    fn every_alert_is_unit_tested_firing_and_quiet() {
        let mut firing: BTreeMap<String, usize> = BTreeMap::new();
        let mut quiet: BTreeMap<String, usize> = BTreeMap::new();
        for file in rule_test_files() {
            let text = std::fs::read_to_string(&file).expect("read unit test file");
            let doc: Yaml =
                serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let rule_files = doc["rule_files"].as_sequence().expect("rule_files list");
            assert!(
                rule_files
                    .iter()
                    .any(|f| f.as_str() == Some("../../deploy/prometheus-rules.plain.yaml")),
                "{} must test {RULES_PLAIN}",
                file.display()
            );
            for test in doc["tests"].as_sequence().expect("tests list") {
                for case in test["alert_rule_test"].as_sequence().into_iter().flatten() {
                    let name = str_of(case, "alertname").to_owned();
                    let expected = case["exp_alerts"].as_sequence().map_or(0, Vec::len);
                    let counter = if expected > 0 {
                        &mut firing
                    } else {
                        &mut quiet
                    };
                    *counter.entry(name).or_default() += 1;
                }
            }
        }
        for alert in ALERTS {
            assert!(
                firing.contains_key(*alert),
                "no unit test where {alert} fires"
            );
            assert!(
                quiet.contains_key(*alert),
                "no unit test where {alert} stays quiet"
            );
        }
        let known: BTreeSet<&str> = ALERTS.iter().copied().collect();
        for name in firing.keys().chain(quiet.keys()) {
            assert!(
                known.contains(name.as_str()),
                "unit test for unknown alert {name}"
            );
        }
    }

    #[test]
    fn alerts_are_the_documented_set_with_labels_and_annotations() {
        let rules = alert_rules();
        let names: Vec<&str> = rules.iter().map(|r| str_of(r, "alert")).collect();
        assert_eq!(names, ALERTS, "alerts differ from the documented list");
        for rule in &rules {
            let name = str_of(rule, "alert");
            let severity = str_of(&rule["labels"], "severity");
            assert!(
                ["critical", "warning", "info"].contains(&severity),
                "{name}: severity {severity}"
            );
            let annotations = &rule["annotations"];
            for key in ["summary", "description"] {
                assert!(
                    str_of(annotations, key).len() > 20,
                    "{name}: {key} too short to help"
                );
            }
            assert_eq!(
                str_of(annotations, "runbook"),
                format!("{RUNBOOK}{}", name.to_ascii_lowercase()),
                "{name}: runbook must point at the README heading `### {name}`"
            );
            assert!(
                annotations["runbook_url"].is_null(),
                "{name}: a runbook_url in the shipped files would lead nowhere"
            );
        }
    }

    /// The README runbook, once pasted in, must have a heading for every alert's anchor.
    #[test]
    fn readme_runbook_has_a_section_per_alert() {
        let readme = std::fs::read_to_string(root().join("README.md"))
            .unwrap_or_else(|e| panic!("README.md: {e}"));
        assert!(
            readme.lines().any(|l| l.trim() == "## Alert runbook"),
            "README.md has no `## Alert runbook` section, which every alert's runbook_url names"
        );
        for alert in ALERTS {
            assert!(
                readme.lines().any(|l| l.trim() == format!("### {alert}")),
                "README.md runbook lacks `### {alert}` (anchor of its runbook_url)"
            );
        }
    }

    #[test]
    fn rule_expressions_read_only_exported_metrics_of_job_initguard() {
        for rule in alert_rules() {
            let name = str_of(&rule, "alert");
            let expr = str_of(&rule, "expr");
            let scan = promql::scan(expr).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!scan.selectors.is_empty(), "{name}: no selector found");
            for selector in scan.selectors {
                assert!(
                    is_exported(&selector.metric),
                    "{name}: {} is not a metric initguard exports",
                    selector.metric
                );
                assert!(
                    selector.matchers.contains(r#"job="initguard""#),
                    "{name}: {} is not restricted to job=\"initguard\"",
                    selector.metric
                );
            }
        }
    }
}

mod dashboard {
    use super::*;

    const PANEL_TYPES: &[&str] = &[
        "row",
        "timeseries",
        "stat",
        "state-timeline",
        "heatmap",
        "table",
    ];

    fn variable<'a>(d: &'a Json, name: &str) -> &'a Json {
        d["templating"]["list"]
            .as_array()
            .expect("templating.list")
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no template variable {name}"))
    }

    /// A query variable's query, which recent Grafana stores as an object.
    fn variable_query(v: &Json) -> &str {
        v["query"]
            .as_str()
            .or_else(|| v["query"]["query"].as_str())
            .expect("variable query")
    }

    #[test]
    fn current_schema_uid_and_tags() {
        let d = dashboard();
        assert_eq!(d["uid"], "initguard");
        assert!(d["schemaVersion"].as_i64().expect("schemaVersion") >= 39);
        assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
        let tags = d["tags"].as_array().expect("tags");
        assert!(tags.iter().any(|t| t == "initguard"), "tags: {tags:?}");
        for panel in promql::dashboard_panels(&d) {
            let kind = panel["type"].as_str().expect("panel type");
            assert!(
                PANEL_TYPES.contains(&kind),
                "panel type {kind} (no legacy panels)"
            );
        }
    }

    #[test]
    fn template_variables() {
        let d = dashboard();
        let ds = variable(&d, "datasource");
        assert_eq!(ds["type"], "datasource");
        assert_eq!(ds["query"], "prometheus");
        // (name, query, multi-valued with All). `job` picks one scrape job (default
        // `initguard`): "All" would let `up` count every target of the Prometheus.
        for (name, query, multi) in [
            (
                "cluster",
                "label_values(initguard_build_info, cluster)",
                true,
            ),
            (
                "job",
                r#"label_values(initguard_build_info{cluster=~"$cluster"}, job)"#,
                false,
            ),
            (
                "initializer",
                r#"label_values(initguard_waiting_pods{cluster=~"$cluster", job=~"$job"}, initializer)"#,
                true,
            ),
            (
                "instance",
                r#"label_values(initguard_build_info{cluster=~"$cluster", job=~"$job"}, instance)"#,
                true,
            ),
        ] {
            let v = variable(&d, name);
            assert_eq!(v["type"], "query", "{name}");
            assert_eq!(variable_query(v), query, "{name}");
            assert_eq!(v["datasource"]["uid"], "${datasource}", "{name}");
            assert_eq!(v["multi"], multi, "{name}");
            assert_eq!(v["includeAll"], multi, "{name}");
            if multi {
                // `.*` also matches a series without the label: a single-cluster Prometheus
                // (no `cluster` label at all) still shows everything.
                assert_eq!(v["allValue"], ".*", "{name}");
            } else {
                assert_eq!(v["current"]["value"], "initguard", "{name}");
            }
            // The metric inside label_values() must exist too.
            let metric = query
                .trim_start_matches("label_values(")
                .split(['{', ','])
                .next()
                .expect("metric argument");
            assert!(is_exported(metric), "{name}: {metric}");
        }
    }

    #[test]
    fn panels_have_ids_layout_datasource_and_description() {
        let d = dashboard();
        let panels = promql::dashboard_panels(&d);
        let mut ids = BTreeSet::new();
        let mut boxes: Vec<(i64, [i64; 4])> = Vec::new();
        for panel in &panels {
            let id = panel["id"].as_i64().expect("panel id");
            assert!(ids.insert(id), "duplicate panel id {id}");
            let grid = &panel["gridPos"];
            let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| {
                grid[k]
                    .as_i64()
                    .unwrap_or_else(|| panic!("panel {id}: gridPos.{k} missing"))
            });
            assert!(
                w > 0 && h > 0 && x >= 0 && y >= 0 && x + w <= 24,
                "panel {id}: {grid}"
            );
            for (other, [ox, oy, ow, oh]) in &boxes {
                let overlap = x < ox + ow && *ox < x + w && y < oy + oh && *oy < y + h;
                assert!(!overlap, "panels {id} and {other} overlap");
            }
            boxes.push((id, [x, y, w, h]));
            if panel["type"] == "row" {
                continue;
            }
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "panel {id}");
            assert_eq!(panel["datasource"]["type"], "prometheus", "panel {id}");
            assert!(
                panel["description"].as_str().is_some_and(|s| s.len() > 40),
                "panel {id}: describe what an operator should read from it"
            );
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "panel {id}: no targets");
            for target in targets {
                assert_eq!(target["datasource"]["uid"], "${datasource}", "panel {id}");
            }
        }
        assert!(panels.len() >= 15, "only {} panels", panels.len());
    }

    /// Every selector honours the variables it can: `$cluster`, `$job` and `$instance`
    /// everywhere, `$initializer` on per-initializer metrics; windows follow Grafana's
    /// interval variables.
    #[test]
    fn queries_use_the_template_variables() {
        let d = dashboard();
        let queries = promql::dashboard_queries(&d).unwrap_or_else(|e| panic!("{e}"));
        for q in &queries {
            let at = format!("panel {} {:?} {}", q.panel_id, q.panel_title, q.ref_id);
            let scan = promql::scan(&q.expr).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert!(!scan.selectors.is_empty(), "{at}: no selector");
            for s in &scan.selectors {
                let m: String = s.matchers.split_whitespace().collect();
                for variable in ["cluster", "job", "instance"] {
                    assert!(
                        m.contains(&format!(r#"{variable}=~"${variable}""#)),
                        "{at}: {} lacks ${variable}",
                        s.metric
                    );
                }
                if PER_INITIALIZER.contains(&s.metric.as_str()) {
                    assert!(
                        m.contains(r#"initializer=~"$initializer""#),
                        "{at}: {} lacks $initializer",
                        s.metric
                    );
                }
            }
            for range in &scan.ranges {
                assert!(
                    range == "$__rate_interval" || range == "$__range",
                    "{at}: window [{range}] should be $__rate_interval or $__range"
                );
            }
        }
    }

    /// The rules of Grafana's dashboard-linter (github.com/grafana/dashboard-linter, its
    /// docs/rules list, as of its v0 releases; its Go module is not served by the module
    /// proxy here, so the rules are checked in this suite). Checked here or in the tests
    /// above:
    /// * uneditable-dashboard: `editable` is false (provisioned boards are not edited in place);
    /// * template-datasource-rule: a `datasource` variable of type datasource for prometheus
    ///   (`template_variables`);
    /// * template-job-rule / template-instance-rule: `job` and `instance` query variables on
    ///   `$datasource` (`template_variables`);
    /// * template-label-promql-rule: variable queries are `label_values(...)` of an exported
    ///   metric whose selector parses;
    /// * template-on-time-change-reload-rule: query variables refresh on time range change (2);
    /// * panel-datasource-rule: panels and targets use `${datasource}`
    ///   (`panels_have_ids_layout_datasource_and_description`);
    /// * panel-title-description-rule: every panel has a title and a description;
    /// * panel-units-rule: time series, stat and gauge panels name a unit Grafana knows;
    /// * target-promql-rule: queries parse (`queries_parse_with_promtool`);
    /// * target-job-rule / target-instance-rule: every selector filters on `$job` and
    ///   `$instance` (`queries_use_the_template_variables`);
    /// * target-rate-interval-rule: `rate` and `irate` use `$__rate_interval`;
    /// * target-counter-agg-rule: counters (`_total`, `_bucket`, `_count`, `_sum`) only inside
    ///   `rate`, `irate` or `increase`.
    #[test]
    fn dashboard_linter_rules() {
        let d = dashboard();
        assert_eq!(d["editable"], false, "uneditable-dashboard");
        for v in d["templating"]["list"].as_array().expect("templating.list") {
            let name = v["name"].as_str().unwrap_or_default();
            if v["type"] != "query" {
                continue;
            }
            assert_eq!(v["refresh"], 2, "{name}: reload on time range change");
            let query = variable_query(v);
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{name}: {query} is not label_values(...)"));
            let (selector, label) = inner
                .rsplit_once(',')
                .unwrap_or_else(|| panic!("{name}: {query}: no label argument"));
            assert_eq!(label.trim(), name, "{name}: lists its own label");
            let runnable = promql::substitute(selector).unwrap_or_else(|e| panic!("{name}: {e}"));
            let scan = promql::scan(&runnable).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(scan.selectors.len(), 1, "{name}: {selector}");
            assert!(is_exported(&scan.selectors[0].metric), "{name}: {selector}");
        }
        const UNITS: &[&str] = &["short", "s", "bytes", "percentunit", "none", "reqps"];
        for panel in promql::dashboard_panels(&d) {
            let id = &panel["id"];
            assert!(
                panel["title"]
                    .as_str()
                    .is_some_and(|t| !t.trim().is_empty()),
                "panel {id}: no title"
            );
            if matches!(
                panel["type"].as_str(),
                Some("timeseries" | "stat" | "gauge")
            ) {
                let unit = panel["fieldConfig"]["defaults"]["unit"].as_str();
                assert!(
                    unit.is_some_and(|u| UNITS.contains(&u)),
                    "panel {id}: unit {unit:?}"
                );
            }
        }
        for q in promql::dashboard_queries(&d).unwrap_or_else(|e| panic!("{e}")) {
            let at = format!("panel {} {:?} {}", q.panel_id, q.panel_title, q.ref_id);
            for (function, window) in windows(&q.expr) {
                if function == "rate" || function == "irate" {
                    assert_eq!(window, "$__rate_interval", "{at}: {function}");
                }
            }
            let bare = counters_outside_rates(&q.expr);
            assert!(
                bare.is_empty(),
                "{at}: counters {bare:?} read without rate/irate/increase"
            );
        }
    }

    /// (function, window) of every `f(...[window])` call.
    fn windows(expr: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (at, _) in expr.match_indices('[') {
            let window = expr[at + 1..]
                .split(']')
                .next()
                .unwrap_or_default()
                .to_owned();
            // The function whose parenthesis encloses this range: the identifier before the
            // nearest unclosed `(` to the left.
            let mut depth = 0;
            let mut function = String::new();
            for (i, c) in expr[..at].char_indices().rev() {
                match c {
                    ')' => depth += 1,
                    '(' if depth == 0 => {
                        function = expr[..i]
                            .chars()
                            .rev()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect::<String>()
                            .chars()
                            .rev()
                            .collect();
                        break;
                    }
                    '(' => depth -= 1,
                    _ => {}
                }
            }
            out.push((function, window));
        }
        out
    }

    /// Counter series of `expr` that no rate-like function encloses.
    fn counters_outside_rates(expr: &str) -> Vec<String> {
        let runnable = promql::substitute(expr).unwrap_or_else(|e| panic!("{e}"));
        let scan = promql::scan(&runnable).unwrap_or_else(|e| panic!("{e}"));
        let is_counter = |m: &str| {
            ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .any(|s| m.ends_with(s))
        };
        let ranged: Vec<String> = windows(expr)
            .into_iter()
            .filter(|(f, _)| matches!(f.as_str(), "rate" | "irate" | "increase"))
            .map(|(f, _)| f)
            .collect();
        let counters: Vec<String> = scan
            .selectors
            .iter()
            .filter(|s| is_counter(&s.metric))
            .map(|s| s.metric.clone())
            .collect();
        // Every counter selector needs a range window in a rate-like function of its own.
        if counters.len() > ranged.len() {
            counters
        } else {
            Vec::new()
        }
    }

    #[test]
    fn the_linter_checks_can_fail() {
        assert_eq!(
            windows("sum(rate(m_total{a=\"b\"}[5m]))"),
            [("rate".to_owned(), "5m".to_owned())]
        );
        assert_eq!(
            counters_outside_rates("sum(initguard_bypasses_total)"),
            ["initguard_bypasses_total"]
        );
        assert!(
            counters_outside_rates("sum(increase(initguard_bypasses_total[$__range]))").is_empty()
        );
    }

    #[test]
    fn queries_read_only_exported_metrics() {
        let d = dashboard();
        let mut used = BTreeSet::new();
        for q in promql::dashboard_queries(&d).unwrap_or_else(|e| panic!("{e}")) {
            for metric in promql::metric_names(&q.runnable).unwrap_or_else(|e| panic!("{e}")) {
                assert!(
                    is_exported(&metric),
                    "panel {} {:?}: {metric} is not a metric initguard exports",
                    q.panel_id,
                    q.panel_title
                );
                used.insert(metric);
            }
        }
        // The board shows every signal the guard exports.
        for metric in EXPORTED {
            let shown = used.contains(*metric)
                || metric.starts_with("initguard_wait_duration_seconds_")
                    && used.contains("initguard_wait_duration_seconds_bucket");
            assert!(shown, "no panel shows {metric}");
        }
    }

    #[test]
    fn queries_parse_with_promtool() {
        let Some(promtool) = promtool() else { return };
        let d = dashboard();
        let exprs: Vec<(String, String)> = promql::dashboard_queries(&d)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|q| {
                (
                    format!("dashboard:panel_{}_{}", q.panel_id, q.ref_id),
                    q.runnable,
                )
            })
            .collect();
        promtool_check_exprs(promtool, &exprs).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The helpers, including those other tests reuse against a live Prometheus.
mod helpers {
    use super::promql::{Selector, metric_names, scan, substitute};
    use super::{promtool, promtool_check_exprs};

    /// The syntax check would be worthless if promtool accepted anything.
    #[test]
    fn promtool_check_rejects_invalid_promql() {
        let Some(promtool) = promtool() else { return };
        let good = (
            "check:good".to_owned(),
            "sum by (le) (rate(m_bucket[1m]))".to_owned(),
        );
        promtool_check_exprs(promtool, std::slice::from_ref(&good)).unwrap();
        for bad in [
            "sum by (le) (rate(m_bucket[1m])",
            "rate(m[$__rate_interval])",
            "m{a=~\"(\"}",
        ] {
            let exprs = [good.clone(), ("check:bad".to_owned(), bad.to_owned())];
            assert!(
                promtool_check_exprs(promtool, &exprs).is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn substitutes_every_variable_form() {
        assert_eq!(
            substitute(r#"rate(m{a=~"$initializer",b=~"${instance}"}[$__rate_interval])"#).unwrap(),
            r#"rate(m{a=~".*",b=~".*"}[1m])"#
        );
        assert_eq!(
            substitute("increase(m[$__range]) / increase(m[${__interval}])").unwrap(),
            "increase(m[5m]) / increase(m[30s])"
        );
        assert!(substitute("m{a=~\"$initialiser\"}").is_err());
        assert!(substitute("m[${__range]").is_err());
    }

    #[test]
    fn scan_finds_selectors_but_not_functions_keywords_or_labels() {
        let expr = r#"
            histogram_quantile(0.99, sum by (outcome, le) (rate(a_bucket{x="y"}[5m])))
            > on (initializer) group_left (owner_kind) 2 * max without(z) (b)
            or label_replace(c offset 1h, "d", "$1", "e", "(.*)") unless sum(d) by (f) > 1e-09
            # comment_metric
        "#;
        let found = scan(expr).unwrap();
        assert_eq!(
            found.selectors,
            vec![
                Selector {
                    metric: "a_bucket".into(),
                    matchers: r#"x="y""#.into()
                },
                Selector {
                    metric: "b".into(),
                    matchers: String::new()
                },
                Selector {
                    metric: "c".into(),
                    matchers: String::new()
                },
                Selector {
                    metric: "d".into(),
                    matchers: String::new()
                },
            ]
        );
        assert_eq!(found.ranges, vec!["5m".to_owned()]);
        assert_eq!(
            metric_names(r#"{__name__="up", job="x"} == 0"#)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["up".to_owned()]
        );
        assert!(scan(r#"{job="x"}"#).is_err());
        assert!(scan(r#"m{job="x}"#).is_err());
    }
}
