//! The real control plane of tests/testbed/ for the tests and benchmarks: started with `up`,
//! stopped by a Drop guard with `down`; kubectl of the same version; the API server's audit
//! log; the `initguard` binary run as a child process under one of the guard's identities.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

/// The guard's static-token user, bound by `deploy/rbac.yaml`.
pub const GUARD_USER: &str = "system:initguard";
/// The other subject `deploy/rbac.yaml` binds: ServiceAccount kube-system/initguard.
pub const GUARD_USER_2: &str = "system:serviceaccount:kube-system:initguard";
/// The opt-in label key of every test config.
pub const OPT_IN: &str = "initguard.io/bypass";
/// A listed gate owned by a Deployment.
pub const SIDECAR: &str = "sidecar.example.com";
/// A second listed gate, of the same owner as [`SIDECAR`] where a test lists it.
pub const SECOND: &str = "second.example.com";
/// A gate no config lists (`unlistedInitializers: ignore`).
pub const UNLISTED: &str = "unlisted.example.com";

/// Longest one kubectl command may take before it is killed and its test fails.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(120);

/// The initguard repository: this crate lives in `crates/test-support`.
pub fn repo() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::canonicalize(&path).unwrap_or(path)
}

/// A version of the test bed (tests/testbed/build `DEFAULT_VERSION`, `GATES_BETA_VERSION` or
/// `LEGACY_VERSION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The current release, the default of `build` and `up`.
    Current,
    /// The oldest release with scheduling gates on by default (1.27: beta) and webhook
    /// matchConditions off (alpha).
    GatesBeta,
    /// Kubernetes 1.13: pod initializers (the Initializers admission plugin).
    Legacy,
}

impl Version {
    /// The version string tests/testbed/build pins for this version.
    pub fn pinned(self) -> Result<String, String> {
        let build = repo().join("tests/testbed/build");
        let text = std::fs::read_to_string(&build)
            .map_err(|e| format!("cannot read {}: {e}", build.display()))?;
        let key = match self {
            Version::Current => "DEFAULT_VERSION=",
            Version::GatesBeta => "GATES_BETA_VERSION=",
            Version::Legacy => "LEGACY_VERSION=",
        };
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_owned())
            .ok_or_else(|| format!("{} pins no {key}", build.display()))
    }
}

/// Why the test bed of the current version cannot run.
pub fn not_built() -> Option<String> {
    not_built_version(Version::Current)
}

/// Why the test bed of `version` cannot run.
pub fn not_built_version(version: Version) -> Option<String> {
    let pinned = match version.pinned() {
        Ok(v) => v,
        Err(e) => return Some(e),
    };
    let bin = repo().join(format!("tests/testbed/.cache/{pinned}/bin/kube-apiserver"));
    (!bin.exists()).then(|| {
        format!(
            "{} is missing: run tests/testbed/build --version {pinned} (or the README's test command)",
            bin.display()
        )
    })
}

/// Why a node bed (`tests/testbed/up --node`) cannot run on this machine: not root, or a
/// program it needs missing (.ci/run installs them).
pub fn node_missing() -> Option<String> {
    // The effective user, from /proc/self/status (no libc call).
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_default();
    if uid != "0" {
        return Some("not root".to_owned());
    }
    let missing: Vec<&str> = [
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "runc",
        "umoci",
        "skopeo",
        "busybox",
        "gcc",
        "iptables",
        "iptables-save",
        "ip",
    ]
    .into_iter()
    .filter(|tool| !crate::host::on_path(tool))
    .chain((!Path::new("/usr/lib/cni/bridge").exists()).then_some("/usr/lib/cni/bridge"))
    .collect();
    (!missing.is_empty()).then(|| format!("missing {}", missing.join(", ")))
}

/// A running test bed; `down` runs when it is dropped.
pub struct Testbed {
    pub dir: PathBuf,
    /// Kept on failure so logs and the audit log can be read afterwards.
    tmp: Option<tempfile::TempDir>,
    pub bin: PathBuf,
    /// The `initguard` binary under test (`env!("CARGO_BIN_EXE_initguard")` of the caller).
    guard_bin: PathBuf,
    /// Set when a scenario failed: the directory is kept.
    pub failed: AtomicBool,
    /// When the running scenario began ([`Testbed::begin_scenario`]): the start of its window
    /// of the audit log.
    scenario_start: std::sync::Mutex<jiff::Timestamp>,
}

impl Testbed {
    /// `tests/testbed/up` in a fresh directory; a watchdog stops it when this process exits.
    /// `guard_bin` is the `initguard` binary that [`Testbed::guard`] runs.
    pub fn up(guard_bin: impl Into<PathBuf>) -> Result<Testbed, String> {
        Testbed::up_version(guard_bin, Version::Current)
    }

    /// [`Testbed::up`] of `version`.
    pub fn up_version(guard_bin: impl Into<PathBuf>, version: Version) -> Result<Testbed, String> {
        Testbed::start(guard_bin.into(), version, false)
    }

    /// [`Testbed::up_version`] with a real node (`up --node`: containerd and a kubelet, as
    /// root; [`node_missing`] says why it cannot run).
    pub fn up_node(guard_bin: impl Into<PathBuf>, version: Version) -> Result<Testbed, String> {
        Testbed::start(guard_bin.into(), version, true)
    }

    fn start(guard_bin: PathBuf, version: Version, node: bool) -> Result<Testbed, String> {
        let pinned = version.pinned()?;
        let tmp = tempfile::Builder::new()
            .prefix("initguard-testbed-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let dir = tmp.path().to_owned();
        let mut tb = Testbed {
            dir: dir.clone(),
            tmp: Some(tmp),
            bin: PathBuf::new(),
            guard_bin,
            failed: AtomicBool::new(false),
            scenario_start: std::sync::Mutex::new(jiff::Timestamp::now()),
        };
        let status = Command::new(repo().join("tests/testbed/up"))
            .arg(&dir)
            .arg("--version")
            .arg(&pinned)
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
            .args(node.then_some("--node"))
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run tests/testbed/up: {e}"))?;
        if !status.success() {
            tb.failed.store(true, Ordering::Relaxed);
            return Err(format!(
                "tests/testbed/up {} failed ({status}); logs kept there",
                dir.display()
            ));
        }
        let env = std::fs::read_to_string(dir.join("testbed.env"))
            .map_err(|e| format!("no testbed.env after up: {e}"))?;
        tb.bin = env
            .lines()
            .find_map(|l| l.strip_prefix("TESTBED_BIN="))
            .map(PathBuf::from)
            .ok_or("testbed.env names no TESTBED_BIN")?;
        Ok(tb)
    }

    /// `KEY` of `DIR/testbed.env`; panics when it is missing.
    pub fn env(&self, key: &str) -> String {
        let path = self.dir.join("testbed.env");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{} has no {key}", path.display()))
    }

    /// `DIR/NAME.kubeconfig`.
    pub fn kubeconfig(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.kubeconfig"))
    }

    /// Compact etcd's history up to `revision` (what kube-apiserver does every 5 minutes), so
    /// that a watch from an older resourceVersion is answered 410 Expired.
    pub fn compact_etcd(&self, revision: u64) {
        let env = std::fs::read_to_string(self.dir.join("testbed.env"))
            .unwrap_or_else(|e| panic!("cannot read testbed.env: {e}"));
        let port = env
            .lines()
            .find_map(|l| l.strip_prefix("TESTBED_PORTS="))
            .and_then(|ports| ports.split(',').find_map(|p| p.strip_prefix("etcd:")))
            .unwrap_or_else(|| panic!("testbed.env names no etcd port:\n{env}"));
        let body = json!({ "revision": revision.to_string(), "physical": true }).to_string();
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "30", "-X", "POST", "-d", &body])
            .arg(format!("http://127.0.0.1:{port}/v3/kv/compaction"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run curl: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("header"),
            "etcd compaction to {revision} failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `tests/testbed/crash`: SIGKILL `components` (in order), wait `down`, start them again
    /// from their recorded arguments (in the same order) and wait until each is healthy.
    /// Returns the script's report, one line per component. Blocking: call it from
    /// `spawn_blocking` where other tasks must go on meanwhile.
    pub fn crash(&self, components: &[&str], down: Duration) -> String {
        let out = Command::new(repo().join("tests/testbed/crash"))
            .arg(&self.dir)
            .arg("--down")
            .arg(format!("{:.1}", down.as_secs_f64()))
            .args(components)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run tests/testbed/crash: {e}"));
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "tests/testbed/crash {components:?} failed ({}): {report}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        report
    }

    /// When kube-apiserver was down and restarting ([`Testbed::crash`]): (killed, healthy
    /// again), from `crashes.log`.
    pub fn apiserver_restarts(&self) -> Vec<(jiff::Timestamp, jiff::Timestamp)> {
        let Ok(text) = std::fs::read_to_string(self.dir.join("crashes.log")) else {
            return Vec::new();
        };
        text.lines()
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                ["kube-apiserver", killed, healthy] => {
                    Some((timestamp(killed), timestamp(healthy)))
                }
                _ => None,
            })
            .collect()
    }

    /// The test bed's kubectl (same version as the server).
    pub fn kubectl_path(&self) -> PathBuf {
        self.bin.join("kubectl")
    }

    /// A client of the admin kubeconfig that does not retry, so tests see answers raw.
    pub async fn admin_client(&self) -> kube::Client {
        let path = self.kubeconfig("admin");
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("bad kubeconfig {}: {e}", path.display()));
        config.default_retry = false;
        kube::Client::try_from(config).unwrap_or_else(|e| panic!("admin client: {e}"))
    }

    /// Run kubectl (same version as the server) with `kubeconfig` (admin, initguard,
    /// initguard-2), feeding `stdin`.
    pub fn kubectl_with(&self, kubeconfig: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(self.bin.join("kubectl"));
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig(kubeconfig))
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run kubectl {args:?}: {e}"));
        if let Some(text) = stdin {
            use std::io::Write;
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(text.as_bytes())
                .unwrap_or_else(|e| panic!("kubectl {args:?} stdin: {e}"));
        }
        crate::process::output_within(child, KUBECTL_TIMEOUT, &format!("kubectl {args:?}"))
    }

    /// kubectl as admin; panics with its stderr unless it succeeds; returns stdout.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_stdin(args, None)
    }

    /// [`Testbed::kubectl`] with `stdin`.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_with("admin", args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Create (or replace) `object` as admin.
    pub fn apply(&self, object: &Value) {
        self.kubectl_stdin(&["apply", "-f", "-"], Some(&object.to_string()));
    }

    /// `GET` an object as JSON (`kubectl get KIND NAME -n NS -o json`); None when absent.
    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let out = self.kubectl_with(
            "admin",
            &[
                "get",
                kind,
                name,
                "-n",
                namespace,
                "-o",
                "json",
                "--ignore-not-found",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "kubectl get {kind} {namespace}/{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        if text.trim().is_empty() {
            return None;
        }
        Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{kind} {name}: {e}: {text}")))
    }

    /// Items of `kubectl get KIND -n NS -o json` (with an optional label selector).
    pub fn list(&self, kind: &str, namespace: &str, selector: Option<&str>) -> Vec<Value> {
        let mut args = vec!["get", kind, "-n", namespace, "-o", "json"];
        if let Some(s) = selector {
            args.extend(["-l", s]);
        }
        let text = self.kubectl(&args);
        let list: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("list {kind}: {e}: {text}"));
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// A fresh namespace.
    pub fn namespace(&self, name: &str) {
        self.kubectl(&["create", "namespace", name]);
    }

    /// A plain pod with these scheduling gates, opted in or not.
    pub fn gated_pod(&self, namespace: &str, name: &str, opted_in: bool, gates: &[&str]) {
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": name, "namespace": namespace, "labels": { "app": "real" } },
            "spec": {
                "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
                "schedulingGates": gates.iter().map(|g| json!({ "name": g })).collect::<Vec<_>>(),
            },
        });
        if opted_in {
            pod["metadata"]["labels"][OPT_IN] = json!("true");
        }
        self.kubectl_stdin(&["create", "-f", "-"], Some(&pod.to_string()));
    }

    /// Scheduling gates still on the pod (empty when it has none). Panics when the pod is
    /// gone: a deleted pod has no gates, and must never read as a bypassed one.
    pub fn gates(&self, namespace: &str, name: &str) -> Vec<String> {
        let pod = self.get("pod", namespace, name).unwrap_or_else(|| {
            panic!("pod {namespace}/{name} is gone: its gates cannot be read (deleted?)")
        });
        gate_names(&pod)
    }

    /// Mark the start of a scenario: [`Testbed::scenario_audit`] is judged from here on.
    pub fn begin_scenario(&self) {
        *self
            .scenario_start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = jiff::Timestamp::now();
    }

    /// The audit events the server received since the running scenario began, so that one
    /// scenario's refusals never fail the next one's judge.
    pub fn scenario_audit(&self) -> Vec<Audit> {
        let start = *self
            .scenario_start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.audit()
            .into_iter()
            .filter(|a| timestamp(&a.received) >= start)
            .collect()
    }

    /// Every audit event so far (one JSON object a line). A last line without its newline is
    /// one the server is still writing: it is left for the next read, never judged cut short.
    pub fn audit(&self) -> Vec<Audit> {
        let text = std::fs::read_to_string(self.dir.join("audit.log"))
            .unwrap_or_else(|e| panic!("cannot read the audit log: {e}"));
        complete_lines(&text)
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("bad audit line {l:?}: {e}"));
                Audit::from(v)
            })
            .collect()
    }

    /// Successful or failed pod writes (create, update, patch, delete) by `user` in `namespace`,
    /// subresources included.
    pub fn pod_writes_by(&self, user: &str, namespace: &str) -> Vec<Audit> {
        self.audit()
            .into_iter()
            .filter(|a| {
                a.user == user && a.is_write() && a.resource == "pods" && a.namespace == namespace
            })
            .collect()
    }

    /// Run the `initguard` binary as `identity` (kubeconfig name) with `config` (YAML without
    /// `listen`: the guard binds a port of its own choosing and logs it) until it is ready.
    pub async fn guard(&self, name: &str, kubeconfig: &str, config: &str) -> GuardProcess {
        let config_path = self.dir.join(format!("{name}.config.yaml"));
        let yaml = format!("listen: 127.0.0.1:0\n{config}");
        std::fs::write(&config_path, &yaml)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", config_path.display()));
        let log_path = self.dir.join(format!("logs/{name}.log"));
        let log = std::fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot clone the log handle: {e}"));
        let child = Command::new(&self.guard_bin)
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .arg("--kubeconfig")
            .arg(self.kubeconfig(kubeconfig))
            .env("POD_NAME", name)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start initguard: {e}"));
        // Registered with the test bed, so that `down` (also from the watchdog, should this
        // process die) stops it.
        let pid_file = self.dir.join(format!("pids/guard-{name}.pid"));
        std::fs::write(&pid_file, child.id().to_string())
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", pid_file.display()));
        let mut guard = GuardProcess {
            name: name.to_owned(),
            child,
            port: 0,
            log: log_path,
            pid_file,
        };
        // The port it bound, from its start-up line (no port is picked here and released
        // for it to take: another process could take it in between).
        guard.port = eventually(format!("guard {name} to log the port it serves"), || {
            if let Ok(Some(status)) = guard.child.try_wait() {
                panic!("guard {name} exited ({status}):\n{}", guard.log_text());
            }
            started_port(&guard.log_text())
        })
        .await;
        let url = format!("http://127.0.0.1:{}/readyz", guard.port);
        let ready = eventually(format!("guard {name} /readyz"), || {
            if let Ok(Some(status)) = guard.child.try_wait() {
                panic!("guard {name} exited ({status}):\n{}", guard.log_text());
            }
            (curl(&url).0 == 200).then_some(())
        });
        ready.await;
        guard
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let status = Command::new(repo().join("tests/testbed/down"))
            .arg(&self.dir)
            .stdin(Stdio::null())
            .status();
        if let Err(e) = status {
            eprintln!("tests/testbed/down {}: {e}", self.dir.display());
        }
        if self.failed.load(Ordering::Relaxed)
            && let Some(tmp) = self.tmp.take()
        {
            let kept = tmp.keep();
            eprintln!("test bed logs and audit log kept in {}", kept.display());
        }
    }
}

/// One audit event, the fields the tests judge by.
#[derive(Debug, Clone)]
pub struct Audit {
    pub verb: String,
    /// `objectRef.apiGroup`: empty for the core group.
    pub group: String,
    pub user: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i64,
    /// `requestReceivedTimestamp` (RFC 3339, microseconds, UTC: sorts as text). The only time
    /// the tests compare: `stageTimestamp` of ResponseComplete may be stamped after the client
    /// already acted on the response.
    pub received: String,
    pub request: Value,
    /// `requestURI`, query included (`dryRun=All`).
    pub uri: String,
    /// `userAgent`: `kubectl/…` when a test speaks as one of the guard's identities.
    pub user_agent: String,
    /// `responseStatus.message`: who refused, and why.
    pub message: String,
    /// The pod whose bound ServiceAccount token made the request (the token's
    /// `authentication.kubernetes.io/pod-name` extra, 1.30+); empty for any other credential.
    pub pod: String,
}

impl From<Value> for Audit {
    fn from(v: Value) -> Audit {
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        Audit {
            verb: s("/verb"),
            group: s("/objectRef/apiGroup"),
            user: s("/user/username"),
            resource: s("/objectRef/resource"),
            subresource: s("/objectRef/subresource"),
            namespace: s("/objectRef/namespace"),
            name: s("/objectRef/name"),
            code: v
                .pointer("/responseStatus/code")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            received: s("/requestReceivedTimestamp"),
            request: v.get("requestObject").cloned().unwrap_or(Value::Null),
            uri: s("/requestURI"),
            user_agent: s("/userAgent"),
            message: s("/responseStatus/message"),
            pod: s("/user/extra/authentication.kubernetes.io~1pod-name/0"),
        }
    }
}

impl Audit {
    /// Anything but get, list and watch.
    pub fn is_write(&self) -> bool {
        !matches!(self.verb.as_str(), "get" | "list" | "watch")
    }

    /// 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

/// tests/real_cluster_legacy/initializer.py: a pod initializer on the seeds' own library,
/// renewing the v1beta1 Lease the guard watches as its owner. Killed on drop.
pub struct Initializer {
    child: Child,
    pid_file: PathBuf,
}

impl Initializer {
    /// Start the initializer `name`, renewing Lease `namespace/lease`, as the admin.
    pub fn start(tb: &Testbed, name: &str, namespace: &str, lease: &str) -> Initializer {
        let python = tb
            .bin
            .parent()
            .map(|v| v.join("python/bin/python"))
            .unwrap_or_default();
        assert!(
            python.exists(),
            "{} is missing: run tests/testbed/build --version v1.13.12",
            python.display()
        );
        let script = repo().join("tests/real_cluster_legacy/initializer.py");
        let log_path = tb.dir.join(format!("logs/initializer-{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log_path.display()));
        let err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot clone the log handle: {e}"));
        let child = Command::new(&python)
            .arg(&script)
            .arg(tb.kubeconfig("admin"))
            .args([name, namespace, lease])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", script.display()));
        // Registered with the test bed, so that `down` stops it should this process die.
        let pid_file = tb.dir.join(format!("pids/initializer-{name}.pid"));
        std::fs::write(&pid_file, child.id().to_string())
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", pid_file.display()));
        Initializer { child, pid_file }
    }

    /// SIGKILL: the initializer's controller died.
    pub fn kill(self) {}
}

impl Drop for Initializer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

/// The guard as a child process; SIGKILLed on drop.
pub struct GuardProcess {
    pub name: String,
    child: Child,
    pub port: u16,
    log: PathBuf,
    pid_file: PathBuf,
}

impl GuardProcess {
    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident set size in KiB, as the kernel reports it (None once it is gone).
    pub fn rss_kib(&self) -> Option<u64> {
        crate::process::rss_kib(self.child.id())
    }

    /// `/metrics` text.
    pub fn metrics(&self) -> String {
        let (status, body) = curl(&format!("http://127.0.0.1:{}/metrics", self.port));
        assert_eq!(status, 200, "guard {} /metrics: {body}", self.name);
        body
    }

    /// Die as on SIGKILL (no lease release).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, wait for the exit; then assert it exited, successfully, and the log shows no
    /// panic.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let mut exited = None;
        for _ in 0..300 {
            if let Ok(Some(status)) = self.child.try_wait() {
                exited = Some(status);
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = self.log_text();
        // Drop kills it if SIGTERM was not enough.
        let status = exited.unwrap_or_else(|| {
            panic!(
                "guard {} still running 30 s after SIGTERM:\n{log}",
                self.name
            )
        });
        assert!(
            !log.contains("panicked"),
            "guard {} panicked:\n{log}",
            self.name
        );
        assert!(
            status.success(),
            "guard {} exited {status} after SIGTERM:\n{log}",
            self.name
        );
    }
}

impl Drop for GuardProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

/// Names of `spec.schedulingGates` of a pod object.
pub fn gate_names(pod: &Value) -> Vec<String> {
    pod["spec"]["schedulingGates"]
        .as_array()
        .map(|gates| {
            gates
                .iter()
                .filter_map(|g| g["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The port of `addr=127.0.0.1:PORT` on the guard's `initguard started` log line, if logged.
fn started_port(log: &str) -> Option<u16> {
    log.lines()
        .find(|l| l.contains("initguard started"))?
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))?
        .rsplit_once(':')?
        .1
        .parse()
        .ok()
}

/// A free port on 127.0.0.1 below the kernel's ephemeral range, as `tests/testbed/up` picks
/// its components' ports: bound, then released for the caller to bind. Below that range no
/// outgoing connection (a client's retry, a TCP self-connect) is ever given it, so a server
/// that stops and comes back on it (the webhook backend) finds it free; only a process that
/// binds that very number in between could take it. Where the range starts too low to leave
/// room, any free port.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    for _ in 0..1000 {
        let port = if low > 11000 {
            let random = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            10000 + (random % u64::from(low - 10000)) as u16
        } else {
            0
        };
        if let Ok(bound) =
            std::net::TcpListener::bind(("127.0.0.1", port)).and_then(|l| l.local_addr())
        {
            return bound.port();
        }
    }
    panic!("no free port on 127.0.0.1 below {low} in 1000 tries")
}

/// `GET url` with curl (5 s limit): (status, body); status 0 when nothing answered.
pub fn curl(url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}", url])
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

pub use crate::metrics::sum as metric_sum;

/// Polls `check` every 250 ms (checks here spawn kubectl) until it answers Some; fails naming
/// `what` after [`crate::wait::PATIENCE`].
pub async fn eventually<T>(what: impl Display, mut check: impl FnMut() -> Option<T>) -> T {
    crate::wait::eventually_every(Duration::from_millis(250), what, || {
        std::future::ready(check())
    })
    .await
}

/// A Deployment `namespace/name` with one pause replica, standing in for a gate's controller.
/// No kubelet runs: the test marks its pod Ready or not through the status subresource, as a
/// kubelet would, and the real ReplicaSet and Deployment controllers compute availability.
pub struct OwnerDeployment {
    pub namespace: String,
    pub name: String,
}

impl OwnerDeployment {
    /// Create it and wait until it is available (its pod bound, then marked Ready).
    pub async fn start(tb: &Testbed, namespace: &str, name: &str) -> OwnerDeployment {
        tb.apply(&json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": { "name": name, "namespace": namespace },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": name } },
                "template": {
                    "metadata": { "labels": { "app": name } },
                    "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
                },
            },
        }));
        let owner = OwnerDeployment {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        owner.set_ready(tb, true).await;
        owner
    }

    /// Mark its pods not Ready (the owner dies) and return when the API server received the
    /// last of those status writes, from its audit log: the instant the owner went down.
    pub async fn kill(&self, tb: &Testbed) -> String {
        let killed_pods = self.set_ready(tb, false).await;
        tb.audit()
            .into_iter()
            .filter(|a| a.subresource == "status" && killed_pods.contains(&a.name) && a.ok())
            .map(|a| a.received)
            .max()
            .unwrap_or_else(|| panic!("no status write of {killed_pods:?} in the audit log"))
    }

    /// Mark the Deployment's pods Ready (alive) or not (crashed), then wait until the
    /// Deployment's `availableReplicas` says so.
    pub async fn set_ready(&self, tb: &Testbed, ready: bool) -> Vec<String> {
        let selector = format!("app={}", self.name);
        let pods = eventually(
            format!("a bound pod of deployment {}/{}", self.namespace, self.name),
            || {
                let pods = tb.list("pods", &self.namespace, Some(&selector));
                (!pods.is_empty() && pods.iter().all(|p| p["spec"]["nodeName"].is_string()))
                    .then_some(pods)
            },
        )
        .await;
        let mut names = Vec::new();
        for pod in pods {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            mark_ready(tb, &self.namespace, name, ready);
            names.push(name.to_owned());
        }
        let want = i64::from(ready);
        eventually(
            format!(
                "deployment {}/{} availableReplicas = {want}",
                self.namespace, self.name
            ),
            || {
                let d = tb.get("deployment", &self.namespace, &self.name)?;
                (d["status"]["availableReplicas"].as_i64().unwrap_or(0) == want).then_some(())
            },
        )
        .await;
        names
    }
}

/// Path of a committed expectation file under tests/real_cluster/.
pub fn expectation(name: &str) -> PathBuf {
    repo().join("tests/real_cluster").join(name)
}

/// A Lease `namespace/name` renewed by the test every second (leaseDurationSeconds 5: slack for
/// a loaded machine), as a gate's controller renews its leader lock; [`OwnerLease::kill`]
/// stops the renewals.
pub struct OwnerLease {
    pub namespace: String,
    pub name: String,
    stop: std::sync::Arc<AtomicBool>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

/// `leaseDurationSeconds` of an [`OwnerLease`].
pub const OWNER_LEASE_SECONDS: u64 = 5;

impl OwnerLease {
    /// Create the Lease and renew it until killed.
    pub fn start(tb: &std::sync::Arc<Testbed>, namespace: &str, name: &str) -> OwnerLease {
        OwnerLease::start_skewed(tb, namespace, name, jiff::SignedDuration::ZERO)
    }

    /// [`OwnerLease::start`] by a holder whose clock is `skew` ahead of this machine's
    /// (behind when negative): every `renewTime` it writes is off by that much.
    pub fn start_skewed(
        tb: &std::sync::Arc<Testbed>,
        namespace: &str,
        name: &str,
        skew: jiff::SignedDuration,
    ) -> OwnerLease {
        let lease = |renew: &str| {
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": { "name": name, "namespace": namespace },
                "spec": {
                    "holderIdentity": "gate-controller-0",
                    "leaseDurationSeconds": OWNER_LEASE_SECONDS,
                    "renewTime": renew,
                },
            })
        };
        let micro_now = move || {
            (jiff::Timestamp::now() + skew)
                .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
                .to_string()
        };
        tb.apply(&lease(&micro_now()));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let renewer = {
            let (tb, stop, namespace, name) = (
                tb.clone(),
                stop.clone(),
                namespace.to_owned(),
                name.to_owned(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let patch = json!({ "spec": { "renewTime": micro_now() } }).to_string();
                    tb.kubectl(&[
                        "patch", "lease", &name, "-n", &namespace, "--type", "merge", "-p", &patch,
                    ]);
                }
            })
        };
        OwnerLease {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            stop,
            renewer: Some(renewer),
        }
    }

    /// Stop renewing (the controller died) and return when the API server received the last
    /// renewal, from its audit log: the lease runs out [`OWNER_LEASE_SECONDS`] after it.
    pub fn kill(&mut self, tb: &Testbed) -> jiff::Timestamp {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(renewer) = self.renewer.take()
            && renewer.join().is_err()
        {
            panic!(
                "the renewer of lease {}/{} panicked",
                self.namespace, self.name
            );
        }
        let last = tb
            .audit()
            .into_iter()
            .filter(|a| {
                a.resource == "leases"
                    && a.namespace == self.namespace
                    && a.name == self.name
                    && a.is_write()
                    && a.ok()
            })
            .map(|a| a.received)
            .max()
            .unwrap_or_else(|| panic!("no write of lease {} in the audit log", self.name));
        last.parse()
            .unwrap_or_else(|e| panic!("audit time {last:?}: {e}"))
    }
}

impl Drop for OwnerLease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Joined (within its 1 s sleep), so that its handle on the test bed is gone before the
        // runner drops the last one: otherwise the process could exit first, and the test
        // bed's `Drop` (`down`, then removing its directory) would never run.
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
    }
}

/// A plain pod labelled `app=NAME`, bound by the scheduler and marked Ready by the test (no
/// kubelet runs): the owner of a gate whose config names `{ pods: { selector: app=NAME } }`.
pub async fn ready_owner_pod(tb: &Testbed, namespace: &str, name: &str) {
    tb.apply(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": namespace, "labels": { "app": name } },
        "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
    }));
    eventually(format!("owner pod {namespace}/{name} bound"), || {
        tb.get("pod", namespace, name)?["spec"]["nodeName"]
            .is_string()
            .then_some(())
    })
    .await;
    mark_ready(tb, namespace, name, true);
}

/// Set pod `namespace/name` Running and Ready (or not) through the status subresource, as its
/// kubelet would (no kubelet runs in the test bed).
pub fn mark_ready(tb: &Testbed, namespace: &str, name: &str, ready: bool) {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = if ready { "True" } else { "False" };
    let patch = json!({ "status": {
        "phase": "Running",
        "conditions": [
            { "type": "PodScheduled", "status": "True", "lastTransitionTime": now },
            { "type": "Ready", "status": status, "lastTransitionTime": now },
            { "type": "ContainersReady", "status": status, "lastTransitionTime": now },
        ],
    }});
    patch_pod_status(tb, namespace, name, &patch);
}

/// Merge `patch` into pod `namespace/name` through the status subresource, as its kubelet
/// would write it (no kubelet runs in the test bed).
pub fn patch_pod_status(tb: &Testbed, namespace: &str, name: &str, patch: &Value) {
    tb.kubectl(&[
        "patch",
        "pod",
        name,
        "-n",
        namespace,
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ]);
}

/// The guards' pod writes in `namespace`, after asserting from the audit log that each came
/// from the replica holding the lock `(namespace, name)` when the server received it (the
/// last successful lock write before it was by the same user). Received times only: a
/// ResponseComplete stage may be stamped after the client already acted on the response.
pub fn guard_pod_writes_by_lease_holders<'a>(
    audit: &'a [Audit],
    lock: (&str, &str),
    namespace: &str,
) -> Vec<&'a Audit> {
    guard_writes_by_lease_holders(audit, lock, None, |e| {
        e.namespace == namespace && e.resource == "pods"
    })
}

/// The guards' writes that `judged` selects, after asserting from the audit log that each
/// came from the replica holding the lock `(namespace, name)` when the server received it:
/// the last successful lock write before it was by the same user and, with `lease`, a write
/// that may have taken effect (2xx, or 504: the client gave up, the server may have applied
/// it) less than `lease` after it (a replica whose lease ran out holds nothing, even if
/// nobody took the lock yet). Received times only, as in
/// [`guard_pod_writes_by_lease_holders`]. The fence bounds when a write is sent, the judge
/// when it is received: a server that takes the rest of the lease to read a request fails it.
pub fn guard_writes_by_lease_holders<'a>(
    audit: &'a [Audit],
    lock: (&str, &str),
    lease: Option<Duration>,
    judged: impl Fn(&Audit) -> bool,
) -> Vec<&'a Audit> {
    let mut lock_writes: Vec<&Audit> = audit
        .iter()
        .filter(|e| {
            e.resource == "leases"
                && e.namespace == lock.0
                && e.name == lock.1
                && e.is_write()
                && e.ok()
        })
        .collect();
    lock_writes.sort_by(|x, y| x.received.cmp(&y.received));
    let last_lock_write = |t: &str| lock_writes.iter().rev().find(|w| w.received.as_str() < t);
    let writes: Vec<&Audit> = audit
        .iter()
        .filter(|e| e.is_write() && (e.user == GUARD_USER || e.user == GUARD_USER_2) && judged(e))
        .collect();
    for w in &writes {
        let last = last_lock_write(&w.received);
        assert_eq!(
            last.map(|l| l.user.as_str()),
            Some(w.user.as_str()),
            "a write by a replica not holding the lock {lock:?}: {w:#?}"
        );
        let may_have_applied = w.ok() || w.code == 504;
        if let (Some(lease), Some(last), true) = (lease, last, may_have_applied) {
            let expired = timestamp(&last.received)
                + jiff::SignedDuration::try_from(lease)
                    .unwrap_or_else(|e| panic!("lease {lease:?}: {e}"));
            assert!(
                timestamp(&w.received) < expired,
                "a write after the writer's lease ran out (its last lock write {} + {lease:?}): \
                 {w:#?}",
                last.received
            );
        }
    }
    writes
}

/// The lock of every replicas scenario, as deploy/rbac.yaml lets the guard write it.
pub const LOCK: (&str, &str) = ("kube-system", "initguard");

/// Two replicas of the guard run by [`two_replicas`], told apart by who holds [`LOCK`].
pub struct Replicas {
    pub leader: GuardProcess,
    pub survivor: GuardProcess,
    pub leader_user: &'static str,
    pub survivor_user: &'static str,
}

/// Start `PREFIX-a` (as [`GUARD_USER`]) and `PREFIX-b` (as [`GUARD_USER_2`]) with `config`,
/// which elects on [`LOCK`], and wait until one holds it.
pub async fn two_replicas(tb: &Testbed, prefix: &str, config: &str) -> Replicas {
    let a = tb.guard(&format!("{prefix}-a"), "initguard", config).await;
    let b = tb
        .guard(&format!("{prefix}-b"), "initguard-2", config)
        .await;
    // An earlier scenario's replicas may have left their name (or none) in the Lease.
    let ours =
        |h: &str| h.starts_with(&format!("{prefix}-a_")) || h.starts_with(&format!("{prefix}-b_"));
    let holder = eventually(format!("a holder of Lease {}/{}", LOCK.0, LOCK.1), || {
        let lease = tb.get("lease", LOCK.0, LOCK.1)?;
        let holder = lease["spec"]["holderIdentity"].as_str()?;
        ours(holder).then(|| holder.to_owned())
    })
    .await;
    if holder.starts_with(&format!("{prefix}-a_")) {
        Replicas {
            leader: a,
            survivor: b,
            leader_user: GUARD_USER,
            survivor_user: GUARD_USER_2,
        }
    } else {
        assert!(
            holder.starts_with(&format!("{prefix}-b_")),
            "holder {holder:?}"
        );
        Replicas {
            leader: b,
            survivor: a,
            leader_user: GUARD_USER_2,
            survivor_user: GUARD_USER,
        }
    }
}

/// Judge a failover from the audit log: every guard pod write in `namespace` is a successful
/// patch from the replica holding [`LOCK`] when the server received it, each pod of `before`
/// and `after` is written exactly once, `before` by `users.0` (the leader) and `after` by
/// `users.1` (the survivor).
pub fn assert_failover_written_once(
    audit: &[Audit],
    namespace: &str,
    (before, after): (&[String], &[String]),
    users: (&str, &str),
) {
    let pod_writes = guard_pod_writes_by_lease_holders(audit, LOCK, namespace);
    for w in &pod_writes {
        assert!(w.ok() && w.verb == "patch", "{w:#?}");
    }
    for n in before.iter().chain(after) {
        let writes: Vec<&&Audit> = pod_writes.iter().filter(|w| &w.name == n).collect();
        assert_eq!(
            writes.len(),
            1,
            "{n} written {} times: {writes:#?}",
            writes.len()
        );
    }
    let by = |names: &[String]| -> std::collections::BTreeSet<&str> {
        pod_writes
            .iter()
            .filter(|w| names.contains(&w.name))
            .map(|w| w.user.as_str())
            .collect()
    };
    assert_eq!(by(before), std::collections::BTreeSet::from([users.0]));
    assert_eq!(by(after), std::collections::BTreeSet::from([users.1]));
}

/// Parse an audit or object timestamp (RFC 3339).
pub fn timestamp(text: &str) -> jiff::Timestamp {
    text.parse()
        .unwrap_or_else(|e| panic!("timestamp {text:?}: {e}"))
}

/// The gate of the witness [`assert_no_pod_write_once_seen`] creates; a config lists it with
/// [`WITNESS_ENTRY`].
pub const WITNESS: &str = "witness.example.com";

/// The config entry of [`WITNESS`] (under `initializers:`): due at once, no owner.
pub const WITNESS_ENTRY: &str = "  - { name: witness.example.com, deadline: 0s }\n";

/// Assert that the guard has written no pod of `ns` though it has seen them: a witness pod,
/// created after them in `NS-witness` with the [`WITNESS`] gate (due at once; the guard's
/// config lists [`WITNESS_ENTRY`]), is bypassed first, so the guard's watch delivered the pods
/// of `ns` and the guard decided on them before it wrote the witness. Judged by the server's
/// audit log, scoped to `ns`; the witness and its namespace are then deleted.
pub async fn assert_no_pod_write_once_seen(tb: &Testbed, ns: &str, while_: &str) {
    let witness_ns = format!("{ns}-witness");
    tb.namespace(&witness_ns);
    tb.gated_pod(&witness_ns, "witness", true, &[WITNESS]);
    eventually(format!("the witness in {witness_ns} bypassed"), || {
        (!tb.pod_writes_by(GUARD_USER, &witness_ns).is_empty()
            && tb.gates(&witness_ns, "witness").is_empty())
        .then_some(())
    })
    .await;
    let early = tb.pod_writes_by(GUARD_USER, ns);
    assert!(
        early.is_empty(),
        "the guard wrote while {while_}: {early:#?}"
    );
    tb.kubectl(&[
        "delete",
        "pod",
        "witness",
        "-n",
        &witness_ns,
        "--force",
        "--grace-period=0",
    ]);
    tb.kubectl(&["delete", "namespace", &witness_ns, "--wait=false"]);
}

/// Wait until pod `ns/name` has lost every gate and the scheduler has bound it.
pub async fn bypassed_and_bound(tb: &Testbed, ns: &str, name: &str) {
    eventually(format!("{ns}/{name} bypassed and bound"), || {
        let pod = tb.get("pod", ns, name)?;
        (gate_names(&pod).is_empty() && pod["spec"]["nodeName"].is_string()).then_some(())
    })
    .await;
}

/// The lease-holder judge on hand-made audit logs.
/// The lines of `text` that end with a newline (a file another process is appending to may
/// end in the middle of one).
fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete.lines()
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_audit_line_still_being_written_is_left_for_the_next_read() {
        let lines: Vec<&str> = super::complete_lines("{\"a\":1}\n{\"b\":2}\n{\"ki").collect();
        assert_eq!(lines, ["{\"a\":1}", "{\"b\":2}"]);
        assert_eq!(super::complete_lines("{\"ki").count(), 0);
        assert_eq!(super::complete_lines("").count(), 0);
    }
    use super::*;

    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_free() {
        let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .expect("the ephemeral range")
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("its low end");
        for _ in 0..20 {
            let port = free_port();
            if low > 11000 {
                assert!((10000..low).contains(&port), "{port} (range from {low})");
            }
            std::net::TcpListener::bind(("127.0.0.1", port)).expect("still free");
        }
    }

    #[test]
    fn the_port_is_read_from_the_guards_start_up_line() {
        let log = "2026-12-01T23:59:00.100Z  INFO initguard::guard: leader election started\n\
                   2026-12-01T23:59:00.123Z  INFO initguard::guard: initguard started \
                   addr=127.0.0.1:41234 secure_addr=None mechanism=\"schedulingGates\" dry_run=false\n";
        assert_eq!(started_port(log), Some(41234));
        assert_eq!(started_port("2026-12-01T23:59:00Z  INFO starting\n"), None);
    }

    fn event(user: &str, resource: &str, name: &str, received: &str, code: i64) -> Audit {
        Audit::from(json!({
            "verb": "patch",
            "user": { "username": user },
            "objectRef": { "resource": resource, "namespace": if resource == "leases" { LOCK.0 } else { "ns" }, "name": name },
            "responseStatus": { "code": code },
            "requestReceivedTimestamp": received,
        }))
    }

    fn lock(user: &str, received: &str) -> Audit {
        event(user, "leases", LOCK.1, received, 200)
    }

    fn pod(user: &str, received: &str) -> Audit {
        event(user, "pods", "p", received, 200)
    }

    const LEASE: Option<Duration> = Some(Duration::from_secs(4));

    fn judge(audit: &[Audit]) -> usize {
        guard_writes_by_lease_holders(audit, LOCK, LEASE, |e| e.resource == "pods").len()
    }

    #[test]
    fn writes_of_the_holder_within_its_lease_pass() {
        let audit = [
            lock(GUARD_USER, "2026-01-01T00:00:00.000000Z"),
            pod(GUARD_USER, "2026-01-01T00:00:03.000000Z"),
            // A refused lock write does not hand the lock over.
            event(
                GUARD_USER_2,
                "leases",
                LOCK.1,
                "2026-01-01T00:00:03.500000Z",
                409,
            ),
            pod(GUARD_USER, "2026-01-01T00:00:03.900000Z"),
            lock(GUARD_USER_2, "2026-01-01T00:00:05.000000Z"),
            pod(GUARD_USER_2, "2026-01-01T00:00:05.100000Z"),
        ];
        assert_eq!(judge(&audit), 3);
    }

    #[test]
    #[should_panic(expected = "not holding the lock")]
    fn a_write_after_another_took_the_lock_fails() {
        judge(&[
            lock(GUARD_USER, "2026-01-01T00:00:00.000000Z"),
            lock(GUARD_USER_2, "2026-01-01T00:00:01.000000Z"),
            pod(GUARD_USER, "2026-01-01T00:00:01.500000Z"),
        ]);
    }

    #[test]
    #[should_panic(expected = "lease ran out")]
    fn a_write_after_the_lease_ran_out_fails_though_nobody_took_it() {
        judge(&[
            lock(GUARD_USER, "2026-01-01T00:00:00.000000Z"),
            pod(GUARD_USER, "2026-01-01T00:00:04.000000Z"),
        ]);
    }

    #[test]
    fn a_refused_write_after_the_lease_is_not_judged_by_it() {
        let audit = [
            lock(GUARD_USER, "2026-01-01T00:00:00.000000Z"),
            event(GUARD_USER, "pods", "p", "2026-01-01T00:00:05.000000Z", 422),
        ];
        assert_eq!(judge(&audit), 1);
    }

    #[test]
    #[should_panic(expected = "lease ran out")]
    fn a_cut_short_write_after_the_lease_ran_out_fails() {
        judge(&[
            lock(GUARD_USER, "2026-01-01T00:00:00.000000Z"),
            event(GUARD_USER, "pods", "p", "2026-01-01T00:00:05.000000Z", 504),
        ]);
    }

    #[test]
    #[should_panic(expected = "not holding the lock")]
    fn a_write_before_any_lock_write_fails() {
        judge(&[pod(GUARD_USER, "2026-01-01T00:00:00.000000Z")]);
    }
}
