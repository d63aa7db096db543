//! Real controllers: a parallel Job whose pod template carries a scheduling gate. Healthy
//! owner: the guard writes nothing; owner down: every pod of the Job is bypassed, once, after
//! the crash, and bound by the scheduler.

use std::sync::Arc;

use serde_json::json;

use crate::gates::{assert_no_denied, bypass_annotation, config, guard_patches};
use crate::testbed::*;

pub(crate) async fn parallel_job_healthy_then_owner_down(tb: Arc<Testbed>) {
    let ns = "jobs";
    tb.namespace(ns);
    let owner = OwnerDeployment::start(&tb, ns, "sidecar-injector").await;
    let guard = tb
        .guard(
            "jobs",
            "initguard",
            &config(&format!(
                "defaults: {{ ownerDownGrace: 2s }}\ninitializers:\n  - {{ name: {SIDECAR}, \
                 deadline: 10m, owner: {{ deployment: {ns}/sidecar-injector }} }}\n{WITNESS_ENTRY}"
            )),
        )
        .await;
    tb.apply(&json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": "work", "namespace": ns },
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": { "app": "work", OPT_IN: "true" } },
                "spec": {
                    "restartPolicy": "Never",
                    "schedulingGates": [{ "name": SIDECAR }],
                    "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
                },
            },
        },
    }));
    let pods = eventually("the Job controller to create 3 pods", || {
        let pods = tb.list("pods", ns, Some("app=work"));
        (pods.len() == 3).then_some(pods)
    })
    .await;
    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_no_pod_write_once_seen(&tb, ns, "the owner was healthy").await;

    let killed_at = owner.kill(&tb).await;
    for n in &names {
        bypassed_and_bound(&tb, ns, n).await;
        let annotation = bypass_annotation(&tb, ns, n);
        assert!(
            annotation.contains(&format!("{SIDECAR}=owner_down@")),
            "{n}: {annotation:?}"
        );
    }
    let patches = guard_patches(&tb, GUARD_USER, ns);
    assert_eq!(patches.len(), names.len(), "{patches:#?}");
    for n in &names {
        let writes = &patches[n];
        assert_eq!(writes.len(), 1, "{n}: {writes:#?}");
        assert!(writes[0].ok(), "{:?}", writes[0]);
        // Zero bypasses while the owner was healthy: none before the crash.
        assert!(
            writes[0].received > killed_at,
            "{n} bypassed while the owner was up"
        );
    }
    // The Job controller kept its 3 pods (a bypass neither kills nor duplicates them).
    assert_eq!(tb.list("pods", ns, Some("app=work")).len(), 3);
    assert_no_denied(&tb);
    guard.stop();
    tb.kubectl(&["delete", "job", "work", "-n", ns, "--cascade=orphan"]);
    crate::gates::cleanup(&tb, ns);
}
