//! Real workload controllers with gated pod templates and the other kinds of owner: a
//! Deployment's ReplicaSet whose gate owner is a Lease renewed by the test, and a CronJob whose
//! Jobs' gated pods pile up while the gate owner (a Ready pod, found by selector) is healthy
//! but never removes its gate.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::gates::{assert_no_denied, bypass_annotation, cleanup, config, guard_patches};
use crate::testbed::*;

/// A gated, opted-in pod template labelled `app=APP`.
fn gated_template(app: &str) -> Value {
    json!({
        "metadata": { "labels": { "app": app, OPT_IN: "true" } },
        "spec": {
            "restartPolicy": "Never",
            "schedulingGates": [{ "name": SIDECAR }],
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
        },
    })
}

/// Names of the pods labelled `app=APP`.
fn pod_names(tb: &Testbed, ns: &str, app: &str) -> Vec<String> {
    tb.list("pods", ns, Some(&format!("app={app}")))
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// A Deployment of 3 gated replicas; the gate's owner is a Lease the test renews. While it is
/// renewed the guard writes nothing; once the renewals stop, every pod is bypassed once
/// (owner_down), no sooner than the lease's run-out plus `ownerDownGrace` after the last
/// renewal the API server received, and the ReplicaSet keeps its 3 pods.
pub(crate) async fn deployment_pods_bypassed_once_the_lease_owner_stops(tb: Arc<Testbed>) {
    let ns = "replicasets";
    tb.namespace(ns);
    let mut owner = OwnerLease::start(&tb, ns, "gate-controller");
    let grace = Duration::from_secs(2);
    let guard = tb
        .guard(
            "replicasets",
            "initguard",
            &config(&format!(
                "defaults: {{ ownerDownGrace: {}s }}\ninitializers:\n  - {{ name: {SIDECAR}, \
                 deadline: 10m, owner: {{ lease: {ns}/gate-controller }} }}\n{WITNESS_ENTRY}",
                grace.as_secs()
            )),
        )
        .await;
    tb.apply(&json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "web", "namespace": ns },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": gated_template("web")["metadata"],
                "spec": {
                    "schedulingGates": [{ "name": SIDECAR }],
                    "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
                },
            },
        },
    }));
    let names = eventually("the ReplicaSet controller to create 3 pods", || {
        let names = pod_names(&tb, ns, "web");
        (names.len() == 3).then_some(names)
    })
    .await;
    assert_no_pod_write_once_seen(&tb, ns, "the lease was renewed").await;

    let last_renewal = owner.kill(&tb);
    for n in &names {
        bypassed_and_bound(&tb, ns, n).await;
        let annotation = bypass_annotation(&tb, ns, n);
        assert!(
            annotation.contains(&format!("{SIDECAR}=owner_down@")),
            "{n}: {annotation:?}"
        );
    }
    // The guard counts the lease from when it saw the last renewal, which is after the
    // server received it.
    let earliest = last_renewal + Duration::from_secs(OWNER_LEASE_SECONDS) + grace;
    let patches = guard_patches(&tb, GUARD_USER, ns);
    assert_eq!(patches.len(), names.len(), "{patches:#?}");
    for n in &names {
        let writes = &patches[n];
        assert_eq!(writes.len(), 1, "{n}: {writes:#?}");
        assert!(writes[0].ok(), "{:?}", writes[0]);
        let received = timestamp(&writes[0].received);
        assert!(
            received >= earliest,
            "{n} bypassed at {received}, before the lease (last renewed {last_renewal}) had been \
             out for the grace ({earliest})"
        );
    }
    // A bypass neither kills nor duplicates the ReplicaSet's pods.
    assert_eq!(pod_names(&tb, ns, "web").len(), 3);
    assert_no_denied(&tb);
    guard.stop();
    // Not orphaned: its ReplicaSet would re-create gated pods for the next scenario's guard.
    tb.kubectl(&["delete", "deployment", "web", "-n", ns]);
    cleanup(&tb, ns);
}

/// A CronJob whose Jobs each leave one gated pod behind, the gate's owner a Ready pod (up, but
/// never removing the gate). Without the guard the pile grows run after run; with it
/// (`pileup: bypass`, threshold 3, minWait 2 s) the pods of all the CronJob's Jobs count as
/// one pile — each Job alone has one pod, below the threshold — and the pile stays bounded:
/// fewer than `threshold` of its pods keep waiting, after the first runs and after later ones.
/// Each bypassed pod is bypassed once (reason pileup), never before it has waited minWait.
pub(crate) async fn cron_job_pile_is_bypassed_as_one(tb: Arc<Testbed>) {
    let ns = "cron";
    tb.namespace(ns);
    ready_owner_pod(&tb, ns, "gate-owner").await;
    tb.apply(&json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": { "name": "nightly", "namespace": ns },
        "spec": {
            // Never due while the test runs: the test starts each run, as the schedule would.
            "schedule": "0 0 1 1 *",
            "jobTemplate": { "spec": { "backoffLimit": 0, "template": gated_template("nightly") } },
        },
    }));
    let run = |i: usize| {
        tb.kubectl(&[
            "create",
            "job",
            &format!("nightly-{i}"),
            "--from=cronjob/nightly",
            "-n",
            ns,
        ]);
    };
    // Without the guard, the pile only grows.
    for i in 0..4 {
        run(i);
    }
    let before = eventually("4 runs, each leaving a gated pod", || {
        let pods = tb.list("pods", ns, Some("app=nightly"));
        (pods.len() == 4 && pods.iter().all(|p| gate_names(p) == [SIDECAR])).then_some(pods)
    })
    .await;
    assert!(before.iter().all(|p| p["spec"]["nodeName"].is_null()));

    let min_wait = Duration::from_secs(2);
    let guard = tb
        .guard(
            "cron",
            "initguard",
            &config(&format!(
                "pileup: {{ threshold: 3, action: bypass, minWait: {}s }}\ninitializers:\n  \
                 - {{ name: {SIDECAR}, deadline: 10m, owner: {{ pods: {{ namespace: {ns}, \
                 selector: app=gate-owner }} }} }}\n",
                min_wait.as_secs()
            )),
        )
        .await;
    // A pod of the pile is bypassed only while `threshold` of them have each waited minWait,
    // so up to threshold - 1 younger ones may keep waiting: the pile is bounded, not emptied.
    let gated = |tb: &Testbed| {
        tb.list("pods", ns, Some("app=nightly"))
            .iter()
            .filter(|p| !gate_names(p).is_empty())
            .count()
    };
    eventually(
        "the pile of the first 4 runs cut below the threshold",
        || (gated(&tb) < 3).then_some(()),
    )
    .await;
    // Later runs do not pile up either.
    for i in 4..7 {
        run(i);
    }
    let names = eventually("7 pods of the CronJob", || {
        let names = pod_names(&tb, ns, "nightly");
        (names.len() == 7).then_some(names)
    })
    .await;
    eventually("the pile of all 7 runs cut below the threshold", || {
        (gated(&tb) < 3 && guard_patches(&tb, GUARD_USER, ns).len() >= 5).then_some(())
    })
    .await;

    let patches = guard_patches(&tb, GUARD_USER, ns);
    assert!(
        patches.keys().all(|n| names.contains(n)),
        "the guard wrote pods other than the CronJob's: {patches:#?}"
    );
    for n in patches.keys() {
        let writes = &patches[n];
        assert_eq!(writes.len(), 1, "{n}: {writes:#?}");
        assert!(writes[0].ok(), "{:?}", writes[0]);
        let annotation = bypass_annotation(&tb, ns, n);
        assert!(
            annotation.contains(&format!("{SIDECAR}=pileup@")),
            "{n}: {annotation:?}"
        );
        // Never before minWait: creationTimestamp is whole seconds (rounded down), so
        // compare in whole seconds.
        let pod = tb.get("pod", ns, n).unwrap_or_default();
        let created = timestamp(pod["metadata"]["creationTimestamp"].as_str().unwrap_or(""));
        let received = timestamp(&writes[0].received);
        assert!(
            received.as_second() >= created.as_second() + min_wait.as_secs() as i64,
            "{n} bypassed at {received}, created {created}"
        );
    }
    assert_no_denied(&tb);
    guard.stop();
    tb.kubectl(&["delete", "cronjob", "nightly", "-n", ns, "--cascade=orphan"]);
    tb.kubectl(&["delete", "jobs", "--all", "-n", ns, "--cascade=orphan"]);
    cleanup(&tb, ns);
}
