//! Security: least privilege and secrets.
//!
//! * The shipped RBAC (`deploy/rbac.yaml`) allows every call the guard makes with every owner
//!   kind that talks to the API, leader election, Events and `initguard status`: the simulated
//!   API server enforces it for `system:initguard` and no request may be denied. (The soak runs
//!   under the same enforcement, legacy RBAC included.)
//! * No bearer token or other kubeconfig secret reaches the guard's output, whatever the log
//!   level or format, on success, on 401, on an unreachable server or a malformed kubeconfig,
//!   nor `/status` or `/metrics`.

use initguard_sim::SimClients as _;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use initguard::config::Mechanism;
use initguard_sim::controllers::{GateOwner, GateOwnerOptions, dns_name};
use kube_sim::{Sim, SimOptions};
use rand::Rng;
use serde_json::json;

use crate::support::*;

const NS: &str = "secure";
const SIDECAR: &str = "sidecar.example.com";
const QUOTA: &str = "quota.example.com";
const AUDIT: &str = "audit.example.com";

async fn opted_in_pod(sim: &Sim, name: &str, gates: &[&str]) {
    let gates: Vec<_> = gates.iter().map(|g| json!({ "name": g })).collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { OPT_IN: "true" } },
        "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
            "schedulingGates": gates },
    });
    post(sim, &format!("/api/v1/namespaces/{NS}/pods"), &pod).await;
}

/// Every owner kind that reads the API (Deployment, Lease, Ready pods), leader election, owner
/// outages with their bypasses and Events, then `initguard status`: not one request denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_rbac_allows_every_call() {
    let sim = Sim::start(SimOptions {
        schedule_delay: Duration::from_millis(20),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    sim.enforce_rbac_policy(GUARD_USER, shipped_rbac(Mechanism::SchedulingGates));
    create_namespace(&sim, NS).await;
    let mut owners = Vec::new();
    for (gate, pod_owner) in [(SIDECAR, false), (QUOTA, false), (AUDIT, true)] {
        let mut o = GateOwnerOptions::new(gate, Mechanism::SchedulingGates);
        o.heartbeat = Duration::from_millis(100);
        o.lease_duration = Duration::from_secs(1);
        if pod_owner {
            o.owner_pod_labels = [("app".to_owned(), "audit-owner".to_owned())].into();
        }
        owners.push(
            GateOwner::start(sim.kube_config(&format!("owner:{}", dns_name(gate))), o).unwrap(),
        );
    }
    let config = format!(
        "mechanism: schedulingGates\nlisten: 127.0.0.1:0\noptIn: {{ label: {OPT_IN} }}\n\
         defaults: {{ deadline: 30s, ownerDownGrace: 500ms }}\ninitializers:\n\
         \x20 - {{ name: {SIDECAR}, owner: {{ deployment: kube-system/{} }} }}\n\
         \x20 - {{ name: {QUOTA}, owner: {{ lease: kube-system/{} }} }}\n\
         \x20 - {{ name: {AUDIT}, owner: {{ pods: {{ namespace: kube-system, selector: app=audit-owner }} }} }}\n\
         leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, leaseDuration: 2s }}\n",
        dns_name(SIDECAR),
        dns_name(QUOTA)
    );
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, &config).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig, GUARD_USER).unwrap();
    let mut guard = GuardProcess::run(dir.path(), "guard", &config_path, &kubeconfig, &[], &[]);
    let addr = guard.wait_addr(Duration::from_secs(20)).await;
    let ready = Instant::now();
    while http_get(addr, "/readyz", Duration::from_secs(3))
        .await
        .map(|r| r.0)
        != Ok(200)
    {
        assert!(
            ready.elapsed() < Duration::from_secs(15),
            "not ready:\n{}",
            guard.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Owners up: they clear their own gates; then down: the guard bypasses.
    opted_in_pod(&sim, "while-up", &[SIDECAR, QUOTA, AUDIT]).await;
    let pending = |name: &str| {
        sim.get_object("pods", Some(NS), name)
            .map(|p| initguard_test_support::pod::pending(Mechanism::SchedulingGates, &p))
            .unwrap_or_default()
    };
    until("owners to clear their gates", || {
        pending("while-up").is_empty()
    })
    .await;
    for o in &owners {
        o.kill();
    }
    opted_in_pod(&sim, "while-down", &[SIDECAR, QUOTA, AUDIT]).await;
    let waited = Instant::now();
    while !pending("while-down").is_empty() {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "owner_down bypasses missing, pending {:?}:\n{}",
            pending("while-down"),
            guard.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = Command::new(BIN)
        .args([
            "status",
            "--config",
            config_path.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    guard.kill();

    let requests: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.user == GUARD_USER)
        .collect();
    let denied: Vec<_> = requests.iter().filter(|r| r.status == 403).collect();
    assert!(
        denied.is_empty(),
        "requests denied by deploy/rbac.yaml: {denied:#?}"
    );
    // Gates due at one instant go in one patch, so the writes are at most one per gate; the
    // record holds each gate once, owner_down.
    let writes = sim
        .object_history()
        .into_iter()
        .filter(|c| c.user == GUARD_USER && c.resource == "pods" && c.name == "while-down")
        .count();
    assert!((1..=3).contains(&writes), "{writes} writes for three gates");
    let stored = sim
        .get_object("pods", Some(NS), "while-down")
        .unwrap_or_default();
    let mut recorded: Vec<(String, String)> = initguard_test_support::pod::records(&stored)
        .into_iter()
        .map(|r| (r.initializer, r.reason))
        .collect();
    recorded.sort();
    let mut expected: Vec<(String, String)> = [SIDECAR, QUOTA, AUDIT]
        .iter()
        .map(|g| ((*g).to_owned(), "owner_down".to_owned()))
        .collect();
    expected.sort();
    assert_eq!(recorded, expected, "one owner_down bypass per gate");
    let used: BTreeSet<(String, String, String)> = requests
        .iter()
        .filter(|r| !r.resource.is_empty())
        .map(|r| (r.api_group.clone(), r.resource.clone(), r.verb.clone()))
        .collect();
    for needed in [
        ("", "pods", "patch"),
        ("apps", "deployments", "watch"),
        ("coordination.k8s.io", "leases", "update"),
    ] {
        let needed = (
            needed.0.to_owned(),
            needed.1.to_owned(),
            needed.2.to_owned(),
        );
        assert!(used.contains(&needed), "{needed:?} never used: {used:?}");
    }
    println!("calls made by {GUARD_USER} (group, resource, verb), all allowed: {used:?}");
}

/// A fresh random secret.
fn secret(prefix: &str) -> String {
    let mut rng = rand::rng();
    let hex: String = (0..32)
        .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap())
        .collect();
    format!("{prefix}{hex}")
}

/// A kubeconfig whose current user authenticates with `token` at `server`, with a second,
/// unused user carrying more secrets.
fn kubeconfig(server: &str, token: &str, unused: &[String; 3]) -> String {
    use base64_free::encode;
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
         users:\n- name: guard\n  user:\n    token: {token}\n\
         - name: other\n  user:\n    token: {}\n    username: admin\n    password: {}\n    \
         client-key-data: {}\n\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: guard\n\
         - name: other\n  context:\n    cluster: c\n    user: other\n\
         current-context: c\n",
        unused[0],
        unused[1],
        encode(unused[2].as_bytes())
    )
}

/// Standard base64, enough for a kubeconfig's `*-data` fields (no crate needed for it).
mod base64_free {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub(super) fn encode(bytes: &[u8]) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn encodes_like_rfc4648() {
        assert_eq!(encode(b"f"), "Zg==");
        assert_eq!(encode(b"fo"), "Zm8=");
        assert_eq!(encode(b"foo"), "Zm9v");
        assert_eq!(encode(b"foobar"), "Zm9vYmFy");
    }
}

fn assert_no_secret(what: &str, text: &str, secrets: &[String]) {
    for s in secrets {
        assert!(
            !text.contains(s.as_str()),
            "{what} contains the secret {s}:\n{text}"
        );
    }
}

/// The token (and the unused user's token, password and key) never appear in anything the
/// guard prints or serves: `run` with debug and trace logs, text and JSON, `status` (table and
/// JSON), a 401 from the server, an unreachable server, a malformed kubeconfig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_logs_or_endpoints() {
    let sim = Sim::start(SimOptions {
        schedule_delay: Duration::from_millis(20),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    create_namespace(&sim, NS).await;
    // The server takes `user:NAME`; the secret is the whole token.
    let token = format!("user:{}", secret("tok-"));
    let rejected = secret("rejected-");
    let unused = [secret("unused-token-"), secret("pw-"), secret("key-")];
    let mut secrets: Vec<String> = vec![
        token.clone(),
        token["user:".len()..].to_owned(),
        rejected.clone(),
    ];
    secrets.extend(unused.iter().cloned());
    secrets.push(base64_free::encode(unused[2].as_bytes()));

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "mechanism: schedulingGates\nlisten: 127.0.0.1:0\noptIn: {{ label: {OPT_IN} }}\n\
             initializers:\n  - {{ name: {AUDIT}, deadline: 1s }}\nleaderElection: {{ enabled: false }}\n"
        ),
    )
    .unwrap();
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let good = write("good", kubeconfig(&sim.url(), &token, &unused));
    let unauthorized = write("unauthorized", kubeconfig(&sim.url(), &rejected, &unused));
    let closed = {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        write(
            "closed",
            kubeconfig(&format!("http://127.0.0.1:{port}"), &token, &unused),
        )
    };
    let mut broken_text = kubeconfig(&sim.url(), &token, &unused);
    broken_text.push_str(&format!(
        "users: [ {{ name: x, user: {{ token: {token} }} ]\n  - : :\n"
    ));
    let broken = write("broken", broken_text);

    opted_in_pod(&sim, "bypassed", &[AUDIT]).await;
    let debug = [("RUST_LOG", "debug")];
    let trace = [("RUST_LOG", "trace")];
    let runs: Vec<(GuardProcess, bool)> = vec![
        (
            GuardProcess::run(dir.path(), "debug-text", &config, &good, &[], &debug),
            true,
        ),
        (
            GuardProcess::run(
                dir.path(),
                "debug-json",
                &config,
                &good,
                &["--log-format", "json"],
                &debug,
            ),
            true,
        ),
        (
            GuardProcess::run(dir.path(), "trace-text", &config, &good, &[], &trace),
            true,
        ),
        (
            GuardProcess::run(
                dir.path(),
                "unauthorized",
                &config,
                &unauthorized,
                &[],
                &debug,
            ),
            false,
        ),
        (
            GuardProcess::run(
                dir.path(),
                "unreachable",
                &config,
                &closed,
                &["--log-format", "json"],
                &debug,
            ),
            false,
        ),
        (
            GuardProcess::run(
                dir.path(),
                "broken-kubeconfig",
                &config,
                &broken,
                &[],
                &trace,
            ),
            false,
        ),
    ];
    let mut runs = runs;
    // Serving runs: until the pod is bypassed and the endpoints answer.
    until("the pod to be bypassed", || {
        sim.get_object("pods", Some(NS), "bypassed")
            .is_some_and(|p| {
                p["spec"]["schedulingGates"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            })
    })
    .await;
    for (process, serves) in &mut runs {
        if !*serves {
            continue;
        }
        let addr = process.wait_addr(Duration::from_secs(10)).await;
        for path in ["/status", "/metrics", "/readyz", "/healthz"] {
            let (code, body) = http_get(addr, path, Duration::from_secs(5)).await.unwrap();
            assert_eq!(code, 200, "{} {path}: {body}", process.label);
            assert_no_secret(&format!("{} {path}", process.label), &body, &secrets);
        }
    }
    // The failing ones have failed (and logged it) before their logs are read: the
    // unauthorized one was answered 401, the unreachable one logged, the broken one exited.
    let unauthorized_said = |log: &str| log.contains("401") || log.contains("Unauthorized");
    initguard_test_support::wait::until("the unauthorized run to log its 401", || {
        unauthorized_said(&runs[3].0.log_text())
    })
    .await;
    // Its first failure is a WARN or ERROR line (JSON logs), not the start-up line.
    initguard_test_support::wait::until("the unreachable run to log a failure", || {
        let log = runs[4].0.log_text();
        log.contains("\"level\":\"WARN\"") || log.contains("\"level\":\"ERROR\"")
    })
    .await;
    let broken_exit = runs[5]
        .0
        .wait_exit(initguard_test_support::wait::PATIENCE)
        .await;
    assert_eq!(
        broken_exit.and_then(|s| s.code()),
        Some(1),
        "malformed kubeconfig: {}",
        runs[5].0.log_text()
    );
    for (process, _) in &mut runs {
        process.kill();
        let log = process.log_text();
        assert!(!log.trim().is_empty(), "{} logged nothing", process.label);
        assert_no_secret(&process.label, &log, &secrets);
    }

    for (label, kubeconfig, output, log) in [
        ("status-table", &good, "table", "debug"),
        ("status-json", &good, "json", "trace"),
        ("status-unauthorized", &unauthorized, "table", "trace"),
        ("status-broken", &broken, "table", "trace"),
    ] {
        let out = status(&config, kubeconfig, output, log);
        assert_no_secret(label, &out, &secrets);
    }
    assert!(status(&config, &good, "json", "info").contains("\"waitingPods\""));
}

/// `initguard status` with everything it prints, stdout and stderr.
fn status(config: &Path, kubeconfig: &Path, output: &str, log: &str) -> String {
    let out = Command::new(BIN)
        .args([
            "status",
            "--config",
            config.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--output",
            output,
        ])
        .env("RUST_LOG", log)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Send raw bytes to `addr` and read the answer's status line (empty when the server just closes).
async fn raw_exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before reading everything; a failed write is fine then.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The unauthenticated endpoints refuse bad requests with a 4xx and keep serving: bad query
/// values, unknown paths and methods, a huge path, a garbage request line, hundreds of idle
/// connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_refuse_bad_requests() {
    let api = crate::fake_api::FakeApi::start(vec![], &[], &[], vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "mechanism: schedulingGates\nlisten: 127.0.0.1:0\nleaderElection: { enabled: false }\n",
    )
    .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig("token")).unwrap();
    let mut guard = GuardProcess::run(dir.path(), "guard", &config, &kubeconfig, &[], &[]);
    let addr = guard.wait_addr(Duration::from_secs(20)).await;
    let status_of = |r: Result<(u16, String), String>| r.map(|(code, _)| code);
    for (path, expected) in [
        ("/status?limit=abc", 400),
        ("/status?limit=-1", 400),
        ("/status?limit=99999999999999999999999", 400),
        ("/status?limit=0", 200),
        ("/nope", 404),
        ("/metrics/../healthz", 404),
    ] {
        let got = status_of(http_get(addr, path, Duration::from_secs(5)).await);
        assert_eq!(got, Ok(expected), "GET {path}");
    }
    let long = format!("/{}", "a".repeat(64 << 10));
    let got = status_of(http_get(addr, &long, Duration::from_secs(5)).await);
    assert!(
        matches!(got, Ok(400..=499)) || got.is_err(),
        "GET of a 64 KiB path: {got:?}"
    );
    let line = raw_exchange(
        addr,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(line.contains(" 405 "), "POST /metrics: {line:?}");
    let line = raw_exchange(addr, b"\x00\x01GARBAGE \xff\r\n\r\n").await;
    assert!(
        line.is_empty() || line.contains(" 400 "),
        "garbage request line: {line:?}"
    );
    // Idle connections that never send a request do not starve the others.
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let took = Instant::now();
    let got = http_get(addr, "/healthz", Duration::from_secs(5)).await;
    assert_eq!(
        status_of(got),
        Ok(200),
        "/healthz with 300 idle connections open"
    );
    println!(
        "bad requests: /healthz answered in {:?} with 300 idle connections",
        took.elapsed()
    );
    drop(idle);
    assert!(guard.exit_status().is_none(), "{}", guard.log_text());
    assert!(
        !guard.log_text().contains("panicked"),
        "{}",
        guard.log_text()
    );
}
