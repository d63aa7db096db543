//! Shared pieces: the guard binary as a child process, plain HTTP probes, metric parsing, the
//! shipped RBAC and object-history readers.

use initguard_sim::SimClients as _;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use initguard::config::Mechanism;
use kube_sim::{Rbac, Sim};
use serde_json::{Value, json};

/// The released binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_initguard");
/// The guard's user, bound by `deploy/rbac.yaml`.
pub(crate) const GUARD_USER: &str = "system:initguard";
/// Unrestricted user for setup and the simulated cluster's housekeeping.
pub(crate) const ADMIN: &str = "system:admin";
/// The opt-in label key used throughout.
pub(crate) const OPT_IN: &str = "initguard.io/bypass";

/// The RBAC the guard's user gets from the shipped manifests: `deploy/rbac.yaml`, plus
/// `deploy/rbac-legacy-initializers.yaml` on legacy clusters.
pub(crate) fn shipped_rbac(mechanism: Mechanism) -> Rbac {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let load = |file: &str| {
        let path = deploy.join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let rbac = Rbac::from_yaml_str(&text, GUARD_USER)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_ne!(rbac, Rbac::default(), "{} grants nothing", path.display());
        rbac
    };
    let mut rbac = load("rbac.yaml");
    if mechanism == Mechanism::Initializers {
        rbac.merge(load("rbac-legacy-initializers.yaml"));
    }
    rbac
}

/// Create namespace `name` as [`ADMIN`].
pub(crate) async fn create_namespace(sim: &Sim, name: &str) {
    let body = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } });
    post(sim, "/api/v1/namespaces", &body).await;
}

/// POST `body` to `path` as [`ADMIN`]; panics on an error answer.
pub(crate) async fn post(sim: &Sim, path: &str, body: &Value) -> Value {
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    sim.client(ADMIN)
        .request::<Value>(request)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// A child process of the guard binary. Its stdout and stderr go to one log file; it is killed
/// with SIGKILL and reaped on drop, so a failing test leaves nothing running.
pub(crate) struct GuardProcess {
    pub label: String,
    pub log: PathBuf,
    pub started: Instant,
    child: Child,
    exited: Option<ExitStatus>,
}

impl GuardProcess {
    /// Start `initguard ARGS` with `envs`, logging to `DIR/LABEL.log`.
    pub(crate) fn spawn(
        dir: &Path,
        label: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> GuardProcess {
        let log = dir.join(format!("{label}.log"));
        let out = File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().unwrap();
        let mut command = Command::new(BIN);
        command
            .args(args)
            // Plain text logs: no colour codes between field names and values.
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        for (k, v) in envs {
            command.env(k, v);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {BIN} {args:?}: {e}"));
        GuardProcess {
            label: label.to_owned(),
            log,
            started: Instant::now(),
            child,
            exited: None,
        }
    }

    /// `initguard run --config CONFIG --kubeconfig KUBECONFIG EXTRA…`.
    pub(crate) fn run(
        dir: &Path,
        label: &str,
        config: &Path,
        kubeconfig: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> GuardProcess {
        let (config, kubeconfig) = (config.to_str().unwrap(), kubeconfig.to_str().unwrap());
        let mut args = vec!["run", "--config", config, "--kubeconfig", kubeconfig];
        args.extend_from_slice(extra);
        GuardProcess::spawn(dir, label, &args, envs)
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything logged so far.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The HTTP address from the "initguard started" log line (text or JSON), once logged.
    pub(crate) fn logged_addr(&self) -> Option<SocketAddr> {
        started_addr(&self.log_text())
    }

    /// Waits for [`GuardProcess::logged_addr`]; panics with the log after `timeout`.
    pub(crate) async fn wait_addr(&mut self, timeout: Duration) -> SocketAddr {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(addr) = self.logged_addr() {
                return addr;
            }
            if let Some(status) = self.exit_status() {
                panic!("{} exited with {status}:\n{}", self.label, self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "{} did not start within {timeout:?}:\n{}",
                self.label,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The exit status if the process has ended (without waiting).
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(&mut self) {
        if self.exit_status().is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub(crate) async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        None
    }

    /// Resident set size in KiB, from `/proc/PID/status`.
    pub(crate) fn rss_kib(&self) -> Option<u64> {
        initguard_test_support::process::rss_kib(self.pid())
    }
}

impl Drop for GuardProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The address of the "initguard started" line: `addr=HOST:PORT` (text) or
/// `"addr":"HOST:PORT"` (JSON).
pub(crate) fn started_addr(log: &str) -> Option<SocketAddr> {
    let line = log.lines().find(|l| l.contains("initguard started"))?;
    let (_, rest) = line.split_once("addr")?;
    let value: String = rest
        .trim_start_matches(['"', ':', '='])
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    value.parse().ok()
}

pub(crate) use initguard_test_support::http::try_get as http_get;
pub(crate) use initguard_test_support::metrics::sum as metric_sum;

/// `metadata.creationTimestamp` of a stored pod.
pub(crate) fn creation_timestamp(pod: &Value) -> Option<SystemTime> {
    pod["metadata"]["creationTimestamp"]
        .as_str()?
        .parse::<jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

/// Whether a stored pod carries the opt-in label.
pub(crate) fn has_opt_in(pod: &Value) -> bool {
    pod["metadata"]["labels"].get(OPT_IN).is_some()
}

/// `later - earlier` in seconds, negative when `later` is earlier.
pub(crate) fn secs_between(earlier: SystemTime, later: SystemTime) -> f64 {
    match later.duration_since(earlier) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

pub(crate) use crate::wait::until;

#[test]
fn started_addr_reads_text_and_json_lines() {
    let text = "2026-11-21T10:00:00Z  INFO initguard::guard: initguard started addr=127.0.0.1:41234 \
                mechanism=\"schedulingGates\" dry_run=false";
    assert_eq!(started_addr(text), Some("127.0.0.1:41234".parse().unwrap()));
    let json = r#"{"timestamp":"x","level":"INFO","message":"initguard started","addr":"127.0.0.1:9","dry_run":false}"#;
    assert_eq!(started_addr(json), Some("127.0.0.1:9".parse().unwrap()));
    assert_eq!(started_addr("nothing here"), None);
}
