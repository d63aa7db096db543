//! A webhook backend as users run one: a Deployment on the real node behind a Service, its
//! EndpointSlices written by the real endpointslice controller from the kubelet's readiness,
//! called by the API server at its ready endpoints. Killed by scaling to zero, made unready by
//! its readiness probe, and frozen (its process stopped by its host pid while an exec
//! readiness probe keeps the pod Ready): the guard (a process, as the bed's
//! `system:initguard`) bypasses and restores each entry by its own owner's verdict, judged by
//! the configuration the server stores.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};

use initguard_test_support::pki;
use initguard_test_support::webhook::{RECORD, dry_run_pod, get_configuration, grant_names};

use crate::pods::{POLL, namespace};
use crate::testbed::*;
use crate::wait::eventually_every;

const PREFIX: &str = "wb";
const SYSTEM: &str = "wb-system";
const TENANT: &str = "wb-tenant";
const CANARY: &str = "wb-canary";
const NAME: &str = "wb-policy";
/// The entry judged by its default owner: the Service's ready endpoints.
const BY_ENDPOINTS: &str = "endpoints.policy.example.com";
/// The entry judged by a canary (the `apiserver` owner): calls that fail.
const BY_CANARY: &str = "canary.policy.example.com";
/// The labels the entries' namespaceSelectors select: the tenant namespace has both, the
/// canary's namespace only the canary entry's, so that its dry runs call that entry alone (a
/// dry run failing on the other entry would say nothing about this one: unknown).
const SELECTED: [(&str, &str); 2] = [(BY_ENDPOINTS, "wb-endpoints"), (BY_CANARY, "wb-canary")];

/// The image of the backend: test-support's `test-webhook` on busybox (tests/testbed/image).
const IMAGE: &str = "initguard.test/webhook:dev";

/// The `test-webhook` binary `tests/all` builds beside the test watchdog.
fn webhook_binary() -> std::path::PathBuf {
    let path = repo().join("target/release/test-webhook");
    assert!(
        path.exists(),
        "{} is missing: cargo build --release -p initguard-test-support --bin test-webhook \
         (tests/all builds it)",
        path.display()
    );
    path
}

/// A CA and the backend's certificate for its Service's name, as a TLS Secret in [`SYSTEM`];
/// returns the CA's PEM (the configuration's caBundle).
fn tls_secret(tb: &Testbed) -> String {
    let dir = tb.dir.join("wb-pki");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    pki::ca(&dir, "ca");
    pki::leaf(
        &dir,
        "ca",
        "policy",
        &format!("subjectAltName=DNS:policy.{SYSTEM}.svc\nextendedKeyUsage=serverAuth\n"),
    );
    let path = |f: &str| dir.join(f).display().to_string();
    tb.kubectl(&[
        "create",
        "secret",
        "tls",
        "policy-tls",
        "-n",
        SYSTEM,
        &format!("--cert={}", path("policy.pem")),
        &format!("--key={}", path("policy.key")),
    ]);
    std::fs::read_to_string(dir.join("ca.pem")).unwrap_or_else(|e| panic!("ca.pem: {e}"))
}

fn deployment(replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "policy", "namespace": SYSTEM },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": "policy" } },
            "template": {
                "metadata": { "labels": { "app": "policy" } },
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "webhook",
                        "image": IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        // Ready while /tmp/ready exists: an exec probe, which answers even
                        // while the server process is stopped.
                        "command": ["sh", "-c", "touch /tmp/ready && exec /test-webhook \
                            --cert /tls/tls.crt --key /tls/tls.key --port 8443"],
                        "ports": [{ "containerPort": 8443 }],
                        "readinessProbe": {
                            "exec": { "command": ["cat", "/tmp/ready"] },
                            "periodSeconds": 1,
                            "failureThreshold": 1,
                        },
                        "volumeMounts": [{ "name": "tls", "mountPath": "/tls", "readOnly": true }],
                    }],
                    "volumes": [{ "name": "tls", "secret": { "secretName": "policy-tls" } }],
                },
            },
        },
    })
}

fn configuration(ca_pem: &str) -> Value {
    let entry = |(name, label): (&str, &str)| {
        json!({
            "name": name,
            "clientConfig": {
                "service": { "namespace": SYSTEM, "name": "policy", "path": "/validate", "port": 443 },
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            },
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
            "namespaceSelector": { "matchLabels": { label: "on" } },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2,
        })
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": NAME },
        "webhooks": [entry(SELECTED[0]), entry(SELECTED[1])],
    })
}

/// The RBAC an operator grants for these entries: the configuration by name, the Service
/// owner's reads, the canary's dry runs and its namespace.
fn grant(tb: &Testbed) {
    grant_names(tb, PREFIX, &[NAME]);
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "wb-owners" },
        "rules": [
            { "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"] },
            { "apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"] },
            { "apiGroups": [""], "resources": ["namespaces"], "resourceNames": [CANARY], "verbs": ["get", "list", "watch"] },
        ],
    }));
    tb.kubectl(&[
        "create",
        "clusterrolebinding",
        "wb-owners",
        "--clusterrole=wb-owners",
        &format!("--user={GUARD_USER}"),
    ]);
    tb.kubectl(&[
        "create",
        "role",
        "wb-canary",
        "-n",
        CANARY,
        "--verb=create",
        "--resource=pods",
    ]);
    tb.kubectl(&[
        "create",
        "rolebinding",
        "wb-canary",
        "-n",
        CANARY,
        "--role=wb-canary",
        &format!("--user={GUARD_USER}"),
    ]);
}

/// Which entries of the stored configuration carry the bypass condition.
fn bypassed(tb: &Testbed) -> Vec<String> {
    get_configuration(tb, NAME)["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| {
            w["matchConditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["name"] == "initguard-bypass"))
        })
        .filter_map(|w| w["name"].as_str().map(str::to_owned))
        .collect()
}

async fn until_bypassed(tb: &Testbed, what: &str, want: &[&str]) {
    eventually_every(POLL, format!("{what}: bypassed {want:?}"), || async {
        (bypassed(tb) == want).then_some(())
    })
    .await;
}

/// The backend's pods, Ready or not, once the Deployment has exactly `n` of them Ready.
async fn ready_backends(tb: &Testbed, n: usize) -> Vec<Value> {
    eventually_every(POLL, format!("{n} Ready backend pods"), || async {
        let pods: Vec<Value> = tb
            .list("pods", SYSTEM, Some("app=policy"))
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        let ready = pods
            .iter()
            .filter(|p| {
                p["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count();
        (pods.len() == n && ready == n).then_some(pods)
    })
    .await
}

/// The host pid of the backend's server process: the process whose executable is the
/// container's /test-webhook (one backend pod runs).
fn server_pid() -> i32 {
    let pids: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe.file_name().is_some_and(|n| n == "test-webhook"))
        })
        .collect();
    assert_eq!(pids.len(), 1, "test-webhook processes: {pids:?}");
    pids[0]
}

fn signal(pid: i32, sig: &str) {
    let out = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("kill: {e}"));
    assert!(
        out.status.success(),
        "kill -{sig} {pid}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn exec(tb: &Testbed, pod: &Value, command: &[&str]) {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let args = [&["exec", "-n", SYSTEM, name, "--"][..], command].concat();
    tb.kubectl(&args);
}

/// A webhook Deployment killed (scaled to zero), unready (its probe fails), and frozen (its
/// process stopped while Ready). Scaled to zero, both entries are bypassed (the endpoints
/// entry by its EndpointSlices, the canary entry by failing calls); unready, the endpoints
/// entry is; back, both are restored exactly. Frozen, the endpoints still say Ready:
/// only the canary entry is bypassed, and it is restored when the process continues. Calls
/// reach the backend through the API server's endpoint routing to the pod's address.
pub(crate) async fn a_webhook_deployment_killed_unready_and_frozen(tb: Arc<Testbed>) {
    for ns in [SYSTEM, TENANT, CANARY] {
        namespace(&tb, ns).await;
    }
    for (_, label) in SELECTED {
        tb.kubectl(&["label", "namespace", TENANT, &format!("{label}=on")]);
    }
    tb.kubectl(&[
        "label",
        "namespace",
        CANARY,
        &format!("{}=on", SELECTED[1].1),
    ]);
    let out = std::process::Command::new(repo().join("tests/testbed/image"))
        .arg(&tb.dir)
        .arg(IMAGE)
        .arg(webhook_binary())
        .output()
        .unwrap_or_else(|e| panic!("tests/testbed/image: {e}"));
    assert!(
        out.status.success(),
        "tests/testbed/image: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ca = tls_secret(&tb);
    tb.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "policy", "namespace": SYSTEM },
        "spec": { "selector": { "app": "policy" }, "ports": [{ "port": 443, "targetPort": 8443 }] },
    }));
    tb.apply(&deployment(1));
    ready_backends(&tb, 1).await;
    tb.apply(&configuration(&ca));
    let before = get_configuration(&tb, NAME)["webhooks"].clone();
    // The backend answers: a pod that is not opted in is admitted (a dry run).
    eventually_every(POLL, "the backend admitting a dry-run create", || async {
        dry_run_pod(&tb, TENANT, false).ok()
    })
    .await;

    grant(&tb);
    let config = format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: false }}\nunlistedInitializers: ignore\ndryRun: false\n\
         webhooks:\n\
         \x20 - {{ name: validating/{NAME}/{BY_ENDPOINTS}, ownerDownGrace: 1s, restoreGrace: 1s }}\n\
         \x20 - name: validating/{NAME}/{BY_CANARY}\n\
         \x20   owner: {{ apiserver: {{ namespace: {CANARY}, resource: pods, interval: 1s }} }}\n\
         \x20   ownerDownGrace: 1s\n\
         \x20   restoreGrace: 1s\n"
    );
    let guard = tb.guard(PREFIX, "initguard", &config).await;
    let both = [BY_ENDPOINTS, BY_CANARY];

    // Killed: scaled to zero.
    tb.kubectl(&[
        "scale",
        "deployment",
        "policy",
        "-n",
        SYSTEM,
        "--replicas=0",
    ]);
    until_bypassed(&tb, "scaled to zero", &both).await;
    let refused =
        dry_run_pod(&tb, TENANT, false).expect_err("not opted in: still sent to the dead webhook");
    assert!(refused.contains("failed calling webhook"), "{refused}");
    dry_run_pod(&tb, TENANT, true)
        .unwrap_or_else(|e| panic!("opted in: admitted while bypassed: {e}"));
    tb.kubectl(&[
        "scale",
        "deployment",
        "policy",
        "-n",
        SYSTEM,
        "--replicas=1",
    ]);
    let pods = ready_backends(&tb, 1).await;
    until_bypassed(&tb, "scaled back", &[]).await;
    assert_eq!(
        get_configuration(&tb, NAME)["webhooks"],
        before,
        "restored exactly"
    );

    // Unready: the readiness probe fails; the process still serves. The endpoints entry is
    // bypassed; the canary's verdict depends on the API server: it resolves new connections to
    // ready endpoints only, but a pooled connection to the pod still carries calls.
    exec(&tb, &pods[0], &["rm", "/tmp/ready"]);
    eventually_every(
        POLL,
        format!("unready: {BY_ENDPOINTS} bypassed"),
        || async {
            bypassed(&tb)
                .iter()
                .any(|b| b == BY_ENDPOINTS)
                .then_some(())
        },
    )
    .await;
    exec(&tb, &pods[0], &["touch", "/tmp/ready"]);
    until_bypassed(&tb, "ready again", &[]).await;
    assert_eq!(
        get_configuration(&tb, NAME)["webhooks"],
        before,
        "restored exactly"
    );

    // Frozen: the server process stopped by its host pid; the exec probe keeps it Ready.
    let pid = server_pid();
    signal(pid, "STOP");
    until_bypassed(&tb, "frozen", &[BY_CANARY]).await;
    ready_backends(&tb, 1).await;
    let refused = dry_run_pod(&tb, TENANT, false).expect_err("frozen: calls time out");
    assert!(refused.contains("failed calling webhook"), "{refused}");
    signal(pid, "CONT");
    until_bypassed(&tb, "continued", &[]).await;
    let after = get_configuration(&tb, NAME);
    assert_eq!(after["webhooks"], before, "restored exactly");
    // Nothing bypassed is left to record.
    assert!(
        after["metadata"]["annotations"][RECORD].is_null(),
        "{after:#}"
    );

    guard.stop();
    tb.kubectl(&["delete", "validatingwebhookconfiguration", NAME]);
    for kind in ["clusterrolebinding", "clusterrole"] {
        tb.kubectl(&[
            "delete",
            kind,
            "wb-owners",
            &format!("{PREFIX}-initguard-webhooks"),
        ]);
    }
    tb.kubectl(&[
        "delete",
        "namespace",
        TENANT,
        CANARY,
        SYSTEM,
        "--wait=false",
    ]);
}
