//! deploy/static-pod.yaml run by the kubelet as users run it on a master: the shipped manifest
//! with only its image rewritten, its config and kubeconfig at the host paths it mounts.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::pods::{POLL, namespace, node_name};
use crate::testbed::*;
use crate::wait::eventually_every;

/// The gate the static pod's guard bypasses: listed with a short deadline, no owner.
const GATE: &str = "example.com/dead";

/// The image the test bed builds from the shipped binary (tests/testbed/node.sh).
pub(crate) const IMAGE: &str = "initguard.test/initguard:dev";

/// The guard's config at /etc/initguard/config.yaml: deploy/config.yaml's listeners and
/// leader election on [`LOCK`], acting (not a dry run) on one gate.
fn config() -> String {
    format!(
        "mechanism: schedulingGates\n\
         optIn: {{ label: {OPT_IN} }}\n\
         initializers:\n  - {{ name: {GATE}, deadline: 3s }}\n\
         unlistedInitializers: ignore\n\
         leaderElection: {{ enabled: true, namespace: {}, name: {}, leaseDuration: 15s }}\n\
         listen: 127.0.0.1:9777\n\
         secureListen: 0.0.0.0:9778\n\
         dryRun: false\n",
        LOCK.0, LOCK.1
    )
}

/// deploy/static-pod.yaml with its placeholder image replaced by [`IMAGE`], and nothing else.
pub(crate) fn manifest() -> String {
    let path = repo().join("deploy/static-pod.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let placeholder = "image: registry.example.com/initguard:0.1.0";
    assert_eq!(
        text.matches(placeholder).count(),
        1,
        "{} must name its image once as {placeholder:?}",
        path.display()
    );
    text.replace(placeholder, &format!("image: {IMAGE}"))
}

/// The files the manifest mounts from the host: the config and the guard's kubeconfig (the
/// bed's `system:initguard` credentials), readable by the image's user (uid 65532).
/// `tests/testbed/down` removes /etc/initguard when the bed created it.
fn install_host_files(tb: &Testbed) {
    let dir = Path::new("/etc/initguard");
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let kubeconfig = std::fs::read_to_string(tb.kubeconfig("initguard"))
        .unwrap_or_else(|e| panic!("cannot read the guard's kubeconfig: {e}"));
    for (name, text) in [("config.yaml", config()), ("kubeconfig", kubeconfig)] {
        let path = dir.join(name);
        // A master's own files are never overwritten (uninstall removes the test's).
        assert!(
            !path.exists(),
            "{} exists: refusing to replace the host's",
            path.display()
        );
        std::fs::write(&path, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", path.display()));
    }
}

/// The mirror pod of the static pod `name` on the real node, once the kubelet reports it Ready.
pub(crate) async fn ready_mirror(tb: &Testbed, name: &str) -> Value {
    let mirror = format!("{name}-{}", node_name(tb));
    eventually_every(
        POLL,
        format!("mirror pod kube-system/{mirror} Ready"),
        || async {
            let pod = tb.get("pod", "kube-system", &mirror)?;
            let ready = pod["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then_some(pod)
        },
    )
    .await
}

/// The one container's status of a pod.
fn container(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

/// A pod on the real node that the scheduler may place once its gates are gone.
fn gated_pod(tb: &Testbed, ns: &str, name: &str) {
    tb.apply(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": { OPT_IN: "true" } },
        "spec": {
            "schedulingGates": [{ "name": GATE }],
            "containers": [{
                "name": "main",
                "image": "initguard.test/pause:1",
                "imagePullPolicy": "IfNotPresent",
            }],
        },
    }));
}

/// The kubelet starts deploy/static-pod.yaml: its mirror pod turns Ready through the
/// manifest's own readiness probe (HTTPS on 127.0.0.1:9778) and its container is never
/// restarted by the liveness probe; the guard inside takes the Lease and bypasses an opted-in
/// pod's gate (the audit log's patch by `system:initguard`), whose pod then runs on the node.
pub(crate) async fn the_kubelet_runs_it_and_it_bypasses_a_gate(tb: Arc<Testbed>) {
    let ns = "static-pod";
    namespace(&tb, ns).await;
    let path = install(&tb);

    let mirror = ready_mirror(&tb, "initguard").await;
    assert!(
        mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string(),
        "{mirror:#}"
    );
    assert_eq!(container(&mirror)["image"], json!(IMAGE), "{mirror:#}");
    let holder = eventually_every(
        POLL,
        format!("a holder of Lease {}/{}", LOCK.0, LOCK.1),
        || async {
            let lease = tb.get("lease", LOCK.0, LOCK.1)?;
            lease["spec"]["holderIdentity"]
                .as_str()
                .filter(|h| !h.is_empty())
                .map(str::to_owned)
        },
    )
    .await;

    gated_pod(&tb, ns, "held");
    eventually_every(POLL, format!("the gate of {ns}/held bypassed"), || async {
        tb.gates(ns, "held").is_empty().then_some(())
    })
    .await;
    let running = eventually_every(POLL, format!("{ns}/held Running on the node"), || async {
        let pod = tb.get("pod", ns, "held")?;
        (pod["status"]["phase"] == "Running").then_some(pod)
    })
    .await;
    assert_eq!(running["spec"]["nodeName"], json!(node_name(&tb)));
    let patches = tb.pod_writes_by(GUARD_USER, ns);
    assert!(
        patches
            .iter()
            .any(|a| a.name == "held" && a.verb == "patch" && a.ok()),
        "no successful patch of {ns}/held by {GUARD_USER}: {patches:#?}"
    );
    // The guard that wrote holds the lock (its lease writes and the patch, in order).
    guard_pod_writes_by_lease_holders(&tb.scenario_audit(), LOCK, ns);

    // The liveness probe has had its initial delay and more by now: nothing restarted.
    let mirror = ready_mirror(&tb, "initguard").await;
    assert_eq!(container(&mirror)["restartCount"], json!(0), "{mirror:#}");
    let lease = tb.get("lease", LOCK.0, LOCK.1).unwrap_or_default();
    assert_eq!(lease["spec"]["holderIdentity"], json!(holder), "{lease:#}");

    uninstall(&tb, &path).await;
    tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// The host files and the manifest in the kubelet's staticPodPath; returns the manifest's path.
fn install(tb: &Testbed) -> std::path::PathBuf {
    install_host_files(tb);
    let manifests = tb.env("TESTBED_NODE_MANIFESTS");
    let path = Path::new(&manifests).join("initguard.yaml");
    std::fs::write(&path, manifest())
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// Remove the manifest, wait until the kubelet removed the mirror pod (it stops the container
/// first), then remove the host files.
async fn uninstall(tb: &Testbed, path: &Path) {
    std::fs::remove_file(path).unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
    let mirror = format!("initguard-{}", node_name(tb));
    eventually_every(POLL, "the mirror pod gone with its manifest", || async {
        tb.get("pod", "kube-system", &mirror)
            .is_none()
            .then_some(())
    })
    .await;
    // Its host files go too: on this host they would be any later guard's or `initguard
    // why`'s configuration (/etc/initguard/config.yaml, the static pod's default).
    let dir = Path::new("/etc/initguard");
    for name in ["config.yaml", "kubeconfig"] {
        let file = dir.join(name);
        std::fs::remove_file(&file)
            .unwrap_or_else(|e| panic!("cannot remove {}: {e}", file.display()));
    }
    // The kubelet made the tls directory (DirectoryOrCreate); empty, it goes with the rest.
    let _ = std::fs::remove_dir(dir.join("tls"));
    let _ = std::fs::remove_dir(dir);
}

/// Gated pod `name` in `ns` bypassed: create it, wait until its gate is gone.
async fn bypassed(tb: &Testbed, ns: &str, name: &str) {
    gated_pod(tb, ns, name);
    eventually_every(
        POLL,
        format!("the gate of {ns}/{name} bypassed"),
        || async { tb.gates(ns, name).is_empty().then_some(()) },
    )
    .await;
}

/// From this scenario's audit log: the holders named by the successful writes of [`LOCK`],
/// in the order the server received them, after asserting that a holder took over from
/// another only after the other released it (an empty holder) or after a full `lease`
/// without a write by the other: never two leaders at once.
fn assert_one_leader_at_a_time(tb: &Testbed, lease: Duration) -> Vec<String> {
    let mut writes: Vec<Audit> = tb
        .scenario_audit()
        .into_iter()
        .filter(|a| {
            a.resource == "leases"
                && a.namespace == LOCK.0
                && a.name == LOCK.1
                && a.is_write()
                && a.ok()
        })
        .collect();
    writes.sort_by(|x, y| x.received.cmp(&y.received));
    let holder = |a: &Audit| {
        a.request["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let lease = jiff::SignedDuration::try_from(lease).unwrap_or_else(|e| panic!("{lease:?}: {e}"));
    for pair in writes.windows(2) {
        let (before, after) = (holder(&pair[0]), holder(&pair[1]));
        if before != after && !before.is_empty() && !after.is_empty() {
            // pair[0] is `before`'s last write: the lock was free only a lease after it.
            let gap = timestamp(&pair[1].received).duration_since(timestamp(&pair[0].received));
            assert!(
                gap >= lease,
                "{after} took Lease {}/{} {gap:?} after {before}'s last write, within its \
                 {lease:?} lease: {pair:#?}",
                LOCK.0,
                LOCK.1,
            );
        }
    }
    let mut holders: Vec<String> = Vec::new();
    for h in writes.iter().map(holder).filter(|h| !h.is_empty()) {
        if holders.last() != Some(&h) {
            holders.push(h);
        }
    }
    holders
}

/// `tests/testbed/crash` of `component`, off the runtime's threads.
async fn crash(tb: &Arc<Testbed>, component: &'static str, down: Duration) {
    let tb = tb.clone();
    let report = tokio::task::spawn_blocking(move || tb.crash(&[component], down))
        .await
        .unwrap_or_else(|e| panic!("crash {component}: {e}"));
    println!("{report}");
}

/// The static pod across restarts. The API server crashed and started again: the guard's
/// container keeps running (the same container) and bypasses again once the server is back.
/// The kubelet crashed and started again: the container keeps running, and the audit log's
/// Lease writes show one leader throughout. Then the hand-over: a second replica, run as a
/// process (two static pods need two kubelets, which one host cannot keep apart: README
/// "Test bed: a real node"), takes the Lease once the manifest is removed and the kubelet
/// stops the container, and bypasses the next pod, written by the replica holding the lock.
pub(crate) async fn it_survives_restarts_and_hands_over_the_lease(tb: Arc<Testbed>) {
    let ns = "static-restarts";
    namespace(&tb, ns).await;
    let path = install(&tb);
    let first = ready_mirror(&tb, "initguard").await;
    let id = container(&first)["containerID"].clone();
    assert!(id.is_string(), "{first:#}");
    bypassed(&tb, ns, "before").await;

    crash(&tb, "kube-apiserver", Duration::from_secs(5)).await;
    bypassed(&tb, ns, "after-api-server").await;
    let mirror = ready_mirror(&tb, "initguard").await;
    assert_eq!(container(&mirror)["containerID"], id, "{mirror:#}");

    crash(&tb, "kubelet", Duration::from_secs(2)).await;
    bypassed(&tb, ns, "after-kubelet").await;
    let mirror = ready_mirror(&tb, "initguard").await;
    assert_eq!(container(&mirror)["containerID"], id, "{mirror:#}");
    // The same container ID is the proof. (Not restartCount: the same manifest as the
    // scenario before gives the same pod UID, and the kubelet counts that pod's stopped
    // container for a while.)
    assert_eq!(
        container(&mirror)["state"]["running"]["startedAt"],
        container(&first)["state"]["running"]["startedAt"],
        "{mirror:#}"
    );
    let lease = Duration::from_secs(15);
    let holders = assert_one_leader_at_a_time(&tb, lease);
    assert_eq!(
        holders.len(),
        1,
        "the Lease changed hands while one guard ran: {holders:?}"
    );

    // The hand-over, to a replica with the bed's ServiceAccount identity.
    let replica_config =
        config().replace("listen: 127.0.0.1:9777\nsecureListen: 0.0.0.0:9778\n", "");
    let replica = tb
        .guard("static-replica", "initguard-2", &replica_config)
        .await;
    uninstall(&tb, &path).await;
    eventually_every(POLL, "the replica to hold the Lease", || async {
        let lease = tb.get("lease", LOCK.0, LOCK.1)?;
        lease["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| h.starts_with("static-replica_"))
            .then_some(())
    })
    .await;
    bypassed(&tb, ns, "after-hand-over").await;
    let holders = assert_one_leader_at_a_time(&tb, lease);
    assert_eq!(holders.len(), 2, "{holders:?}");
    let audit = tb.scenario_audit();
    let writes = guard_pod_writes_by_lease_holders(&audit, LOCK, ns);
    let by = |pod: &str| -> Vec<&str> {
        writes
            .iter()
            .filter(|w| w.name == pod && w.ok())
            .map(|w| w.user.as_str())
            .collect()
    };
    for pod in ["before", "after-api-server", "after-kubelet"] {
        assert_eq!(by(pod), [GUARD_USER], "{pod}");
    }
    assert_eq!(by("after-hand-over"), [GUARD_USER_2]);
    replica.stop();
    tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}
