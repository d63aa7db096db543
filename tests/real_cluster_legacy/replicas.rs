//! Two replicas on a server without Lease v1: the guard locks a coordination.k8s.io/v1beta1
//! Lease. The leader is SIGKILLed mid-run. Judged by the audit log: the lock is the v1beta1
//! Lease, every pod initialized by exactly one guard patch, each from the replica holding the
//! lock when the server received it, and the survivor takes over.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::legacy::*;
use crate::testbed::*;

const NS: &str = "legacy-replicas";
const INIT: &str = "deadline.example.com";

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

pub(crate) async fn two_replicas_on_a_v1beta1_lease_one_leader_failover(tb: Arc<Testbed>) {
    tb.namespace(NS);
    let config_object = InitializerConfiguration::create(&tb, "legacy-replicas", &[INIT]).await;
    let config = config(&format!(
        "leaderElection: {{ enabled: true, namespace: {}, name: {}, leaseDuration: 3s }}\n\
         initializers:\n  - {{ name: {INIT}, deadline: 1s }}\n",
        LOCK.0, LOCK.1
    ));
    let Replicas {
        leader,
        survivor,
        leader_user,
        survivor_user,
    } = two_replicas(&tb, "legacy-replica", &config).await;

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
        .filter(|e| {
            e.resource == "leases"
                && e.namespace == LOCK.0
                && e.name == LOCK.1
                && e.is_write()
                && e.ok()
        })
        .collect();
    assert!(
        !lock_writes.is_empty()
            && lock_writes
                .iter()
                .all(|e| e.uri.starts_with("/apis/coordination.k8s.io/v1beta1/")),
        "the lock is a coordination.k8s.io/v1beta1 Lease: {lock_writes:#?}"
    );
    assert_failover_written_once(&audit, NS, (&first, &second), (leader_user, survivor_user));
    drop(config_object);
    tb.kubectl(&["delete", "namespace", NS, "--wait=false"]);
}
