//! Two replicas on a server without Lease v1: the guard locks a coordination.k8s.io/v1beta1
//! Lease. The leader is SIGKILLed mid-run. Judged by the audit log: the lock is the v1beta1
//! Lease, every pod initialized by exactly one guard patch, each from the replica holding the
//! lock when the server received it, and the survivor takes over.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::legacy::*;
use crate::testbed::*;

const NS: &str = "legacy-replicas";
const INIT: &str = "deadline.example.com";
/// The lock deploy/rbac.yaml lets the guard write (by resourceName).
const LOCK: &str = "initguard";

/// Create an opted-in pod without waiting for it to be initialized (202 on 1.13).
async fn pod(tb: &Testbed, name: &str) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { OPT_IN: "true", "app": "replicas" } },
        "spec": {
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
            "automountServiceAccountToken": false,
        },
    });
    let path = format!("/api/v1/namespaces/{NS}/pods?includeUninitialized=true");
    let (status, answer) = raw(tb, Method::POST, &path, Some(("application/json", pod))).await;
    assert!(
        status == 201 || status == 202,
        "POST {path}: {status} {answer}"
    );
}

async fn all_initialized(tb: &Testbed, names: &[String]) {
    for _ in 0..450 {
        let initialized = plain_pod_names(tb, NS, "app=replicas").await;
        if names.iter().all(|n| initialized.contains(n)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "timed out waiting for {names:?} to be initialized: {:#?}",
        pods(tb, NS, "app=replicas").await
    );
}

pub async fn two_replicas_on_a_v1beta1_lease_one_leader_failover(tb: Arc<Testbed>) {
    tb.namespace(NS);
    let config_object = InitializerConfiguration::create(&tb, "legacy-replicas", &[INIT]).await;
    let config = config(&format!(
        "leaderElection: {{ enabled: true, namespace: kube-system, name: {LOCK}, leaseDuration: 3s }}\n\
         initializers:\n  - {{ name: {INIT}, deadline: 1s }}\n"
    ));
    let a = tb.guard("legacy-replica-a", "initguard", &config).await;
    let b = tb.guard("legacy-replica-b", "initguard-2", &config).await;
    let holder = eventually(format!("a holder of Lease kube-system/{LOCK}"), || {
        let lease = tb.get("lease", "kube-system", LOCK)?;
        lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
    })
    .await;
    let (leader, survivor, leader_user, survivor_user) = if holder.starts_with("legacy-replica-a_")
    {
        (a, b, GUARD_USER, GUARD_USER_2)
    } else {
        assert!(holder.starts_with("legacy-replica-b_"), "holder {holder:?}");
        (b, a, GUARD_USER_2, GUARD_USER)
    };

    let first: Vec<String> = (0..3).map(|i| format!("first-{i}")).collect();
    let second: Vec<String> = (0..3).map(|i| format!("second-{i}")).collect();
    for n in &first {
        pod(&tb, n).await;
    }
    all_initialized(&tb, &first).await;
    leader.kill();
    for n in &second {
        pod(&tb, n).await;
    }
    all_initialized(&tb, &second).await;
    survivor.stop();

    let audit = tb.audit();
    let lock_writes: Vec<&Audit> = audit
        .iter()
        .filter(|e| e.resource == "leases" && e.name == LOCK && e.is_write() && e.ok())
        .collect();
    assert!(
        !lock_writes.is_empty()
            && lock_writes
                .iter()
                .all(|e| e.uri.starts_with("/apis/coordination.k8s.io/v1beta1/")),
        "the lock is a coordination.k8s.io/v1beta1 Lease: {lock_writes:#?}"
    );
    let pod_writes = guard_pod_writes_by_lease_holders(&audit, ("kube-system", LOCK), NS);
    for n in first.iter().chain(&second) {
        let writes: Vec<&&Audit> = pod_writes.iter().filter(|w| &w.name == n).collect();
        assert_eq!(
            writes.len(),
            1,
            "{n} written {} times: {writes:#?}",
            writes.len()
        );
        assert!(writes[0].ok() && writes[0].verb == "patch", "{writes:#?}");
    }
    let users = |names: &[String]| -> BTreeSet<&str> {
        pod_writes
            .iter()
            .filter(|w| names.contains(&w.name))
            .map(|w| w.user.as_str())
            .collect()
    };
    assert_eq!(users(&first), BTreeSet::from([leader_user]));
    assert_eq!(users(&second), BTreeSet::from([survivor_user]));
    drop(config_object);
    tb.kubectl(&["delete", "namespace", NS, "--wait=false"]);
}
