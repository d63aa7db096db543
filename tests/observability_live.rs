//! The observability deliverables against a real Prometheus scraping a running guard.
//!
//! One end-to-end test spawns the released binaries as an operator would: `initguard sim` with
//! the scenario `tests/fixtures/observability-live.yaml` (an owner that is slow, one that
//! dies, labeled and unlabeled creators, a pile, a watch restart), `initguard run` with
//! `tests/fixtures/observability-live-config.yaml`, and a real `prometheus` scraping the guard
//! every second with `deploy/prometheus-rules.plain.yaml` loaded. Once Prometheus has seen the
//! scenario's signals it checks that
//!
//! * `promtool check metrics` finds nothing to report on a live scrape of `/metrics`;
//! * the target is up and every rule group is loaded and evaluates without error;
//! * every query of `dashboards/initguard.json` runs and returns data, and its template
//!   variables resolve to values;
//! * every rule expression runs, and `InitguardBypassing` fires for both bypass reasons.
//!
//! It needs `prometheus` and `promtool` (Debian package `prometheus`): without them the test is
//! skipped with a message, unless `CI` is set, in which case it fails. It takes about 15 s.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use initguard_test_support::promql;
use initguard_test_support::testbed::free_port;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_initguard");
const SCENARIO: &str = "tests/fixtures/observability-live.yaml";
const GUARD_CONFIG: &str = "tests/fixtures/observability-live-config.yaml";
const DASHBOARD: &str = "dashboards/initguard.json";
const RULES: &str = "deploy/prometheus-rules.plain.yaml";
/// The scrape job name the rules and the dashboard select.
const JOB: &str = "initguard";

/// Longest wait for a process to start serving.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest wait for Prometheus to have seen every signal of the scenario.
const SIGNALS_TIMEOUT: Duration = Duration::from_secs(45);
/// Longest wait for every rule to have been evaluated once.
const RULES_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(250);
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the scenario must have produced, as Prometheus sees it, before the dashboard is
/// checked: each expression must return at least one series. Counters are pre-created at 0,
/// so `increase` over a minute proves that Prometheus itself saw them grow.
const SCENARIO_SIGNALS: &[(&str, &str)] = &[
    (
        "the guard was scraped at least 5 times",
        r#"count_over_time(up{job="initguard"}[1m]) >= 5"#,
    ),
    ("the guard is up", r#"up{job="initguard"} == 1"#),
    (
        "the guard leads",
        r#"initguard_is_leader{job="initguard"} == 1"#,
    ),
    (
        "bypasses with reason deadline",
        r#"increase(initguard_bypasses_total{job="initguard", reason="deadline"}[1m]) > 0"#,
    ),
    (
        "bypasses with reason owner_down",
        r#"increase(initguard_bypasses_total{job="initguard", reason="owner_down"}[1m]) > 0"#,
    ),
    (
        "an owner down",
        r#"initguard_owner_up{job="initguard"} == 0"#,
    ),
    ("an owner up", r#"initguard_owner_up{job="initguard"} == 1"#),
    (
        "opted-in pods waiting",
        r#"max_over_time(initguard_waiting_pods{job="initguard", opted_in="true"}[1m]) > 0"#,
    ),
    (
        "pods waiting that are not opted in",
        r#"initguard_waiting_pods{job="initguard", opted_in="false"} > 0"#,
    ),
    (
        "a pile at the threshold",
        r#"initguard_pileups{job="initguard"} > 0"#,
    ),
    (
        "waits ended by a bypass",
        r#"increase(initguard_wait_duration_seconds_count{job="initguard", outcome="bypassed"}[1m]) > 0"#,
    ),
    (
        "waits ended by the owner",
        r#"increase(initguard_wait_duration_seconds_count{job="initguard", outcome="initialized"}[1m]) > 0"#,
    ),
    (
        "a watch restart, in two scrapes",
        r#"count_over_time(initguard_watch_restarts_total{job="initguard"}[1m]) >= 2"#,
    ),
    (
        "process metrics",
        r#"process_resident_memory_bytes{job="initguard"} > 0"#,
    ),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Whether `prometheus` and `promtool` run; false (after saying so) when one is missing
/// outside CI. With `CI` set a missing tool is a failure.
fn tools_present() -> bool {
    let missing: Vec<&str> = ["prometheus", "promtool"]
        .into_iter()
        .filter(|tool| {
            !Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    initguard_test_support::tools::missing(
        "observability_live",
        &missing.join(" and "),
        "apt-get install --no-install-recommends prometheus",
    );
    false
}

/// A child process whose stdout and stderr are collected line by line; killed and reaped on
/// drop, so a failing test leaves nothing running.
struct Process {
    name: &'static str,
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Process {
    fn spawn(name: &'static str, command: &mut Command) -> Process {
        let mut child = command
            // Plain logs in failure messages.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({command:?}): {e}"));
        let output = Arc::new(Mutex::new(String::new()));
        let streams: [Option<Box<dyn Read + Send>>; 2] = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ];
        for stream in streams.into_iter().flatten() {
            let output = output.clone();
            // Ends when the pipe closes, that is when the process is gone.
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let mut out = output.lock().unwrap_or_else(|e| e.into_inner());
                    out.push_str(&line);
                    out.push('\n');
                }
            });
        }
        Process {
            name,
            child,
            output,
        }
    }

    fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The first output line containing `needle`, if any yet.
    fn line_with(&self, needle: &str) -> Option<String> {
        self.output()
            .lines()
            .find(|l| l.contains(needle))
            .map(str::to_owned)
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn tail(&self, lines: usize) -> String {
        let output = self.output();
        let all: Vec<&str> = output.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every process of the test, and the directory holding their files (removed last).
struct Stack {
    processes: Vec<Process>,
    dir: tempfile::TempDir,
}

impl Stack {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn spawn(&mut self, name: &'static str, command: &mut Command) -> usize {
        self.processes.push(Process::spawn(name, command));
        self.processes.len() - 1
    }

    /// Panics with `message` and the end of every process' output.
    fn fail(&self, message: &str) -> ! {
        let mut text = format!("{message}\n");
        for p in &self.processes {
            text.push_str(&format!(
                "\n--- last output of {} ---\n{}\n",
                p.name,
                p.tail(40)
            ));
        }
        panic!("{text}");
    }

    /// Fails if a process has exited: everything here should run until the end.
    fn check_running(&mut self) {
        let exited: Vec<String> = self
            .processes
            .iter_mut()
            .filter_map(|p| {
                p.exited()
                    .map(|status| format!("{} exited ({status})", p.name))
            })
            .collect();
        if !exited.is_empty() {
            self.fail(&exited.join(", "));
        }
    }

    /// Polls `check` until it succeeds; fails with its last error after `timeout`.
    async fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut check: impl AsyncFnMut() -> Result<T, String>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running();
            let last = match check().await {
                Ok(value) => return value,
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "timed out after {timeout:?} waiting for {what}:\n{last}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until process `index` prints a line containing `needle`.
    async fn wait_for_line(&mut self, index: usize, needle: &str) -> String {
        let what = format!("{} to print {needle:?}", self.processes[index].name);
        let output = self.processes[index].output.clone();
        self.wait_for(&what, START_TIMEOUT, async || {
            let out = output.lock().unwrap_or_else(|e| e.into_inner());
            out.lines()
                .find(|l| l.contains(needle))
                .map(str::to_owned)
                .ok_or_else(|| "not yet".to_owned())
        })
        .await
    }
}

/// A plain HTTP/1 client for the guard and Prometheus.
#[derive(Clone)]
struct Http(Client<HttpConnector, Empty<Bytes>>);

impl Http {
    fn new() -> Http {
        Http(Client::builder(TokioExecutor::new()).build_http())
    }

    /// GET `url`: status and body.
    async fn get(&self, url: &str) -> Result<(u16, String), String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("bad URL {url}: {e}"))?;
        let response = tokio::time::timeout(HTTP_TIMEOUT, self.0.get(uri))
            .await
            .map_err(|_| format!("GET {url}: no answer within {HTTP_TIMEOUT:?}"))?
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("GET {url}: reading the body: {e}"))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// GET `url` and require 200.
    async fn get_ok(&self, url: &str) -> Result<String, String> {
        match self.get(url).await? {
            (200, body) => Ok(body),
            (status, body) => Err(format!("GET {url}: {status}: {body}")),
        }
    }
}

/// Prometheus' HTTP API.
#[derive(Clone)]
struct Prometheus {
    base: String,
    http: Http,
}

impl Prometheus {
    /// GET an API path and return `data` of a `success` answer, or the error Prometheus gave.
    async fn api(&self, path_and_query: &str) -> Result<Value, String> {
        let url = format!("{}{path_and_query}", self.base);
        let (status, body) = self.http.get(&url).await?;
        let json: Value = serde_json::from_str(&body)
            .map_err(|e| format!("GET {url}: {status}: not JSON ({e}): {body}"))?;
        if json["status"] != "success" {
            return Err(format!(
                "GET {url}: {status}: {} {}",
                json["errorType"], json["error"]
            ));
        }
        Ok(json["data"].clone())
    }

    /// Evaluates `expr` now: the series (or the one scalar) it returns.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self
            .api(&format!("/api/v1/query?query={}", encode(expr)))
            .await?;
        match data["resultType"].as_str() {
            Some("vector" | "matrix") => Ok(data["result"].as_array().cloned().unwrap_or_default()),
            Some("scalar" | "string") => Ok(vec![data["result"].clone()]),
            other => Err(format!("{expr}: unexpected result type {other:?}")),
        }
    }
}

/// The value of one query result: a vector element's `[time, value]`, or a scalar's.
fn sample_value(result: &Value) -> Option<&str> {
    result.get("value").unwrap_or(result).get(1)?.as_str()
}

fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Starts the simulated cluster and the guard; returns the guard's address.
async fn start_guard(stack: &mut Stack, http: &Http) -> String {
    let kubeconfig = stack.path("kubeconfig");
    let sim = stack.spawn(
        "initguard sim",
        Command::new(BIN)
            .args(["sim", "--listen", "127.0.0.1:0", "--scenario"])
            .arg(root().join(SCENARIO))
            .arg("--kubeconfig-out")
            .arg(&kubeconfig),
    );
    // Printed once the kubeconfig is written.
    stack.wait_for_line(sim, "kubeconfig: ").await;

    let guard = stack.spawn(
        "initguard run",
        Command::new(BIN)
            .args(["run", "--log-format", "json", "--config"])
            .arg(root().join(GUARD_CONFIG))
            .arg("--kubeconfig")
            .arg(&kubeconfig),
    );
    let started = stack.wait_for_line(guard, "\"initguard started\"").await;
    let addr = serde_json::from_str::<Value>(&started)
        .ok()
        .and_then(|line| line["addr"].as_str().map(str::to_owned))
        .unwrap_or_else(|| stack.fail(&format!("no addr in the start line {started}")));
    let readyz = format!("http://{addr}/readyz");
    stack
        .wait_for("the guard to be ready", START_TIMEOUT, async || {
            http.get_ok(&readyz).await
        })
        .await;
    addr
}

/// Prometheus scraping `target` every second with the alert rules loaded.
fn prometheus_config(target: &str) -> String {
    let rules = root().join(RULES);
    let config = serde_json::json!({
        "global": {
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "evaluation_interval": "1s",
        },
        "rule_files": [rules.to_string_lossy()],
        "scrape_configs": [{
            "job_name": JOB,
            "static_configs": [{ "targets": [target] }],
        }],
    });
    serde_yaml::to_string(&config).expect("Prometheus configuration as YAML")
}

/// Starts Prometheus on a free port (again on another one if that port was taken meanwhile)
/// and waits until it is ready.
async fn start_prometheus(stack: &mut Stack, http: &Http, target: &str) -> Prometheus {
    let config = stack.path("prometheus.yml");
    std::fs::write(&config, prometheus_config(target)).expect("write prometheus.yml");
    for attempt in 1..=3 {
        let listen = format!("127.0.0.1:{}", free_port());
        let index = stack.spawn(
            "prometheus",
            Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    stack.path(&format!("tsdb-{attempt}")).display()
                ))
                .arg(format!("--web.listen-address={listen}")),
        );
        let base = format!("http://{listen}");
        let ready = format!("{base}/-/ready");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if http.get_ok(&ready).await.is_ok() {
                return Prometheus {
                    base,
                    http: http.clone(),
                };
            }
            let process = &mut stack.processes[index];
            if let Some(status) = process.exited() {
                // Let the output readers catch up with the last lines before reading them.
                tokio::time::sleep(POLL).await;
                let process = &stack.processes[index];
                if process.line_with("address already in use").is_some() && attempt < 3 {
                    stack.processes.remove(index);
                    break;
                }
                stack.fail(&format!("prometheus exited ({status})"));
            }
            if Instant::now() >= deadline {
                stack.fail(&format!(
                    "prometheus not ready on {listen} after {START_TIMEOUT:?}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
    stack.fail("prometheus found no free port in 3 attempts")
}

/// `promtool check metrics` on `exposition`: Ok when it succeeds and prints nothing.
fn promtool_check_metrics(exposition: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting promtool: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("promtool has no stdin")?
        .write_all(exposition.as_bytes())
        .map_err(|e| format!("feeding promtool: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for promtool: {e}"))?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && report.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics ({}):\n{report}",
            out.status
        ))
    }
}

/// `(group, rule name, expression)` of every rule in the rules file.
fn rule_expressions() -> Vec<(String, String, String)> {
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&read(RULES)).unwrap_or_else(|e| panic!("{RULES}: {e}"));
    let mut out = Vec::new();
    for group in doc["groups"].as_sequence().expect("groups list") {
        let name = group["name"].as_str().expect("group name");
        for rule in group["rules"].as_sequence().expect("rules list") {
            let rule_name = rule["alert"]
                .as_str()
                .or_else(|| rule["record"].as_str())
                .expect("alert or record name");
            let expr = rule["expr"].as_str().expect("rule expr");
            out.push((name.to_owned(), rule_name.to_owned(), expr.to_owned()));
        }
    }
    out
}

/// `label_values(METRIC, LABEL)` of each query variable of the dashboard.
fn dashboard_variables(dashboard: &Value) -> Vec<(String, String, String)> {
    let vars = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    vars.iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let name = v["name"].as_str().expect("variable name");
            let query = v["query"]
                .as_str()
                .or_else(|| v["query"]["query"].as_str())
                .expect("variable query");
            let args = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("variable {name}: {query} is not label_values(M, L)"));
            // The selector may itself contain commas (`m{a=~"$a", b=~"$b"}`): the label is
            // the last argument.
            let (metric, label) = args
                .rsplit_once(',')
                .unwrap_or_else(|| panic!("variable {name}: {query} has no label"));
            // Other variables in the selector take the values the queries run with.
            let metric = promql::substitute(metric.trim())
                .unwrap_or_else(|e| panic!("variable {name}: {e}"));
            (name.to_owned(), metric, label.trim().to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_shows_every_dashboard_query_and_rule_on_a_live_guard() {
    if !tools_present() {
        return;
    }
    let began = Instant::now();
    let http = Http::new();
    let mut stack = Stack {
        processes: Vec::new(),
        dir: tempfile::tempdir().expect("temporary directory"),
    };
    let guard = start_guard(&mut stack, &http).await;
    let prometheus = start_prometheus(&mut stack, &http, &guard).await;

    // 1. Prometheus has seen the scenario: scrapes, bypasses, waits, piles, an owner down.
    for (what, expr) in SCENARIO_SIGNALS {
        let p = prometheus.clone();
        stack
            .wait_for(what, SIGNALS_TIMEOUT, async || {
                match p.query(expr).await? {
                    series if series.is_empty() => Err(format!("{expr} returned nothing")),
                    _ => Ok(()),
                }
            })
            .await;
    }
    let scenario_seen = began.elapsed();

    // 2. The live exposition passes promtool's lint.
    let metrics = http
        .get_ok(&format!("http://{guard}/metrics"))
        .await
        .unwrap_or_else(|e| stack.fail(&e));
    if let Err(e) = promtool_check_metrics(&metrics) {
        stack.fail(&e);
    }

    // 3. The target: one, up, scraped without error.
    let targets = prometheus
        .api("/api/v1/targets?state=active")
        .await
        .unwrap_or_else(|e| stack.fail(&e));
    let ours: Vec<&Value> = targets["activeTargets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["labels"]["job"] == JOB)
        .collect();
    if ours.len() != 1
        || ours[0]["health"] != "up"
        || ours[0]["labels"]["instance"] != guard.as_str()
        || ours[0]["lastError"].as_str().is_some_and(|e| !e.is_empty())
    {
        stack.fail(&format!(
            "expected one healthy target {guard} in job {JOB}: {targets}"
        ));
    }

    // 4. Every dashboard query runs and shows data.
    let dashboard: Value =
        serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"));
    let queries = promql::dashboard_queries(&dashboard).unwrap_or_else(|e| panic!("{e}"));
    assert!(!queries.is_empty(), "{DASHBOARD} has no queries");
    let mut problems = Vec::new();
    for q in &queries {
        let at = format!(
            "panel {} {:?} target {}: {}",
            q.panel_id, q.panel_title, q.ref_id, q.runnable
        );
        let problem = match prometheus.query(&q.runnable).await {
            Ok(series) if series.is_empty() => "returned no data".to_owned(),
            // Grafana draws nothing for NaN (a quantile of no observations, say).
            Ok(series) if series.iter().all(|s| sample_value(s) == Some("NaN")) => {
                format!("returned only NaN: {}", Value::from(series))
            }
            Ok(_) => continue,
            Err(e) => format!("failed: {e}"),
        };
        problems.push(format!("{at}\n  {problem}"));
    }
    // Its variables resolve: label_values(M, L) is Grafana's call of the label values API.
    let variables = dashboard_variables(&dashboard);
    for (name, metric, label) in &variables {
        let path = format!("/api/v1/label/{label}/values?match[]={}", encode(metric));
        match prometheus.api(&path).await {
            Ok(values) if values.as_array().is_some_and(|v| !v.is_empty()) => {}
            // This Prometheus, like any single-cluster one, adds no `cluster` label: the list
            // is empty, "All" (`.*`) matches the absent label, and every query above ran with
            // cluster=~".*" and returned data.
            Ok(values) if name == "cluster" && values.as_array().is_some_and(|v| v.is_empty()) => {}
            Ok(values) => problems.push(format!("variable ${name}: {path} gave {values}")),
            Err(e) => problems.push(format!("variable ${name}: {e}")),
        }
    }
    if !problems.is_empty() {
        stack.fail(&format!(
            "{} problems with the {} queries and {} variables of {DASHBOARD} against a live \
             guard:\n{}",
            problems.len(),
            queries.len(),
            variables.len(),
            problems.join("\n")
        ));
    }

    // 5. Every rule expression runs.
    let rules = rule_expressions();
    let mut problems = Vec::new();
    for (group, name, expr) in &rules {
        if let Err(e) = prometheus.query(expr).await {
            problems.push(format!("{group}/{name}: {e}"));
        }
    }
    if !problems.is_empty() {
        stack.fail(&format!(
            "rule expressions failed:\n{}",
            problems.join("\n")
        ));
    }

    // 6. Prometheus loaded every group and evaluates every rule without error.
    let expected_groups: BTreeSet<&str> = rules.iter().map(|(g, _, _)| g.as_str()).collect();
    let p = prometheus.clone();
    let loaded = stack
        .wait_for("every rule to be evaluated", RULES_TIMEOUT, async || {
            let data = p.api("/api/v1/rules").await?;
            let groups = data["groups"].as_array().cloned().unwrap_or_default();
            let pending = groups
                .iter()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .filter(|r| r["health"] == "unknown")
                .count();
            if groups.is_empty() || pending > 0 {
                return Err(format!("{pending} rules not evaluated yet: {data}"));
            }
            Ok(groups)
        })
        .await;
    let loaded_groups: BTreeSet<&str> = loaded.iter().filter_map(|g| g["name"].as_str()).collect();
    if loaded_groups != expected_groups {
        stack.fail(&format!(
            "Prometheus loaded groups {loaded_groups:?}, {RULES} has {expected_groups:?}"
        ));
    }
    let loaded_rules: usize = loaded
        .iter()
        .map(|g| g["rules"].as_array().map_or(0, Vec::len))
        .sum();
    let unhealthy: Vec<String> = loaded
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["health"] != "ok" || r["lastError"].as_str().is_some_and(|e| !e.is_empty()))
        .map(|r| {
            format!(
                "{}: health {} error {}",
                r["name"], r["health"], r["lastError"]
            )
        })
        .collect();
    if loaded_rules != rules.len() || !unhealthy.is_empty() {
        stack.fail(&format!(
            "{loaded_rules} rules loaded of {}; unhealthy: {unhealthy:#?}",
            rules.len()
        ));
    }

    // 7. The rules see the guard's real series: InitguardBypassing (no `for`) fires for both
    //    reasons the scenario produces.
    let p = prometheus.clone();
    stack
        .wait_for("InitguardBypassing to fire", RULES_TIMEOUT, async || {
            let data = p.api("/api/v1/alerts").await?;
            let reasons: BTreeSet<String> = data["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| {
                    a["labels"]["alertname"] == "InitguardBypassing" && a["state"] == "firing"
                })
                .filter_map(|a| a["labels"]["reason"].as_str().map(str::to_owned))
                .collect();
            if reasons.contains("deadline") && reasons.contains("owner_down") {
                Ok(())
            } else {
                Err(format!("firing for reasons {reasons:?}: {data}"))
            }
        })
        .await;

    eprintln!(
        "checked {} dashboard queries and {} rules against a live guard; scenario seen after \
         {scenario_seen:?}, test took {:?}",
        queries.len(),
        rules.len(),
        began.elapsed()
    );
}
