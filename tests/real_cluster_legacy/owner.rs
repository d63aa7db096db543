//! A real initializer is the owner: two controllers written on the seeds' own library
//! (`initializer.py`), each renewing the v1beta1 Lease the guard watches. The head one is
//! killed while a Job and two ReplicaSets create pods, then revived.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::legacy::*;
use crate::testbed::*;

const NS: &str = "legacy-owner";
const HEAD: &str = "podinit.example.com";
const SECOND: &str = "second.example.com";
/// The guard's `ownerDownGrace`.
const GRACE: Duration = Duration::from_secs(3);
/// initializer.py's `LEASE_SECONDS`.
const LEASE: Duration = Duration::from_secs(5);

fn template(app: &str, opted_in: bool) -> Value {
    let mut labels = json!({ "app": app });
    if opted_in {
        labels[OPT_IN] = json!("true");
    }
    json!({
        "metadata": { "labels": labels },
        "spec": {
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
        },
    })
}

async fn create(tb: &Testbed, path: &str, object: Value) {
    let (status, answer) = raw(tb, Method::POST, path, Some(("application/json", object))).await;
    assert_eq!(status, 201, "POST {path}: {answer}");
}

async fn job(tb: &Testbed, name: &str) {
    let mut template = template(name, true);
    template["metadata"]["labels"]["job-name"] = json!(name);
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name },
        "spec": { "backoffLimit": 0, "template": template },
    });
    create(tb, &format!("/apis/batch/v1/namespaces/{NS}/jobs"), job).await;
}

async fn replica_set(tb: &Testbed, name: &str, opted_in: bool) {
    let mut rs = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": { "name": name },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "template": template(name, opted_in),
        },
    });
    rs["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
    create(
        tb,
        &format!("/apis/apps/v1/namespaces/{NS}/replicasets"),
        rs,
    )
    .await;
}

/// The one pod of `app`, once a plain list (which on 1.13 shows initialized pods only) shows it.
async fn initialized(tb: &Testbed, app: &str) -> String {
    let selector = format!("app={app}");
    let mut waited = 0;
    loop {
        let names = plain_pod_names(tb, NS, &selector).await;
        if let Some(name) = names.first() {
            return name.clone();
        }
        waited += 1;
        assert!(
            waited < 450,
            "timed out waiting for the pod of {app} to be initialized; pods: {:#?}",
            pods(tb, NS, &selector).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The guard's view of the owner of `initializer`, from `/status` (a sync point only).
fn owner_state(guard: &GuardProcess, initializer: &str) -> Option<String> {
    let (code, body) = curl(&format!("http://127.0.0.1:{}/status", guard.port));
    let status: Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
    status["owners"]
        .as_array()?
        .iter()
        .find(|o| o["initializer"] == initializer)
        .and_then(|o| o["state"].as_str().map(str::to_owned))
}

pub(crate) async fn real_initializer_down_then_back_only_the_failed_head_only_opted_in(
    tb: Arc<Testbed>,
) {
    tb.namespace(NS);
    let head = Initializer::start(&tb, HEAD, NS, "podinit");
    let _second = Initializer::start(&tb, SECOND, NS, "second");
    eventually("both initializers' leases", || {
        tb.get("lease", NS, "podinit")
            .and_then(|_| tb.get("lease", NS, "second"))
    })
    .await;
    let config_object =
        InitializerConfiguration::create(&tb, "legacy-owner", &[HEAD, SECOND]).await;
    let guard = tb
        .guard(
            "legacy-owner",
            "initguard",
            &config(&format!(
                "leaderElection: {{ enabled: false }}\n\
                 defaults: {{ deadline: 600s, ownerDownGrace: {}s, probeInterval: 1s }}\n\
                 initializers:\n\
                 \x20 - name: {HEAD}\n    owner: {{ lease: {NS}/podinit }}\n\
                 \x20 - name: {SECOND}\n    owner: {{ lease: {NS}/second }}\n",
                GRACE.as_secs()
            )),
        )
        .await;
    eventually("the guard to see both owners up", || {
        (owner_state(&guard, HEAD).as_deref() == Some("up")
            && owner_state(&guard, SECOND).as_deref() == Some("up"))
        .then_some(())
    })
    .await;

    // Healthy: the initializers initialize an opted-in Job's pod; the guard writes nothing.
    job(&tb, "healthy").await;
    let healthy = initialized(&tb, "healthy").await;
    assert!(
        guard_patches(&tb, GUARD_USER, NS).is_empty(),
        "the guard wrote while every owner was up"
    );

    // The head initializer dies: its Lease stops being renewed.
    head.kill();
    let last_renewal = tb
        .audit()
        .into_iter()
        .filter(|a| a.resource == "leases" && a.name == "podinit" && a.is_write() && a.ok())
        .map(|a| timestamp(&a.received))
        .max()
        .unwrap_or_else(|| panic!("no renewal of lease {NS}/podinit in the audit log"));
    job(&tb, "down").await;
    replica_set(&tb, "down-rs", true).await;
    replica_set(&tb, "plain-rs", false).await;
    let down_job_pod = initialized(&tb, "down").await;
    let down_rs_pod = initialized(&tb, "down-rs").await;

    let patches = guard_patches(&tb, GUARD_USER, NS);
    for pod in [&down_job_pod, &down_rs_pod] {
        let mine: Vec<&Audit> = patches.iter().filter(|a| &a.name == pod).collect();
        assert_eq!(mine.len(), 1, "one guard patch of {pod}: {patches:#?}");
        let patch = mine[0];
        // Head only, tested by name; the second initializer is never touched.
        let ops = operations(patch);
        assert!(
            ops.contains(&json!({ "op": "test", "path": "/metadata/initializers/pending/0/name", "value": HEAD }))
                && ops.contains(&json!({ "op": "remove", "path": "/metadata/initializers/pending/0" })),
            "the patch of {pod} removes the tested head: {ops:#?}"
        );
        assert!(
            ops.iter()
                .all(|op| op["op"] != "remove" || op["path"] == "/metadata/initializers/pending/0")
                && !patch.request.to_string().contains(&format!("{SECOND}=")),
            "the patch of {pod} touches only the head: {ops:#?}"
        );
        assert!(
            patch
                .request
                .to_string()
                .contains(&format!("{HEAD}=owner_down@")),
            "the patch of {pod} records owner_down: {ops:#?}"
        );
        // Never early, on the server's own clock: not before the lease ran out plus the grace.
        let at = timestamp(&patch.received);
        assert!(
            at >= last_renewal + LEASE + GRACE,
            "{pod} bypassed at {at}, before the last renewal {last_renewal} + lease {LEASE:?} + \
             grace {GRACE:?}"
        );
    }
    // The second initializer, alive, removed itself from those pods (an update, as its
    // library does), not the guard.
    let audit = tb.audit();
    for pod in [&down_job_pod, &down_rs_pod] {
        assert!(
            audit.iter().any(|a| a.verb == "update"
                && a.resource == "pods"
                && a.namespace == NS
                && &a.name == pod
                && a.user == "system:admin"
                && a.ok()),
            "the second initializer initialized {pod}"
        );
    }

    // Not opted in: still waiting for both, never written by the guard (checked after the
    // guard acted on the opted-in pods of the same owner).
    let plain = pods(&tb, NS, "app=plain-rs").await;
    assert!(!plain.is_empty(), "the plain ReplicaSet created a pod");
    for pod in &plain {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(
            pending_names(pod),
            [HEAD, SECOND],
            "{name} still waits for both"
        );
        assert!(
            patches.iter().all(|a| a.name != name),
            "the guard wrote {name}, which did not opt in"
        );
    }
    // No pile: one pod for the Job whose owner died.
    assert_eq!(
        pods(&tb, NS, "job-name=down").await.len(),
        1,
        "the Job piled up pods"
    );

    // Revived: the initializer takes over again; the guard writes none of its new pods.
    let _head = Initializer::start(&tb, HEAD, NS, "podinit");
    eventually("the guard to see the head owner up again", || {
        (owner_state(&guard, HEAD).as_deref() == Some("up")).then_some(())
    })
    .await;
    job(&tb, "revived").await;
    let revived = initialized(&tb, "revived").await;
    let audit = tb.audit();
    let updates_by_initializers = audit
        .iter()
        .filter(|a| {
            a.verb == "update"
                && a.resource == "pods"
                && a.name == revived
                && a.user == "system:admin"
                && a.ok()
        })
        .count();
    assert_eq!(
        updates_by_initializers, 2,
        "both initializers updated {revived} (head, then second)"
    );
    let patches = guard_patches(&tb, GUARD_USER, NS);
    assert!(
        patches
            .iter()
            .all(|a| a.name != revived && a.name != healthy),
        "the guard wrote a pod whose owner was up: {patches:#?}"
    );

    // Only what 1.13 serves: no request of the guard's answered 404 for a whole collection
    // or a discovery document (a group, version or resource the server does not serve);
    // Events are core/v1.
    let unserved: Vec<&Audit> = audit
        .iter()
        .filter(|a| a.user == GUARD_USER && a.code == 404 && a.name.is_empty())
        .collect();
    assert!(
        unserved.is_empty(),
        "the guard asked for what 1.13 does not serve: {unserved:#?}"
    );
    let events: Vec<&Audit> = audit
        .iter()
        .filter(|a| a.user == GUARD_USER && a.resource == "events" && a.verb == "create")
        .collect();
    assert!(
        !events.is_empty() && events.iter().all(|a| a.uri.starts_with("/api/v1/")),
        "the guard's Events are core/v1: {events:#?}"
    );

    guard.stop();
    drop(config_object);
    tb.kubectl(&["delete", "namespace", NS, "--wait=false"]);
}
