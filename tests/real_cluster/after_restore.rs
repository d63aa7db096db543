//! `afterRestore: evict` on the real API server, with the real ReplicaSet, Job and disruption
//! controllers: pods admitted while a mutating webhook was bypassed lack what it adds; after the
//! restore they are annotated, and those a controller re-creates and can spare are evicted one at
//! a time, each only after the previous replacement is Ready. Judged by the audit log and the
//! objects: which evictions the server answered, in what order against the readiness updates,
//! and what the pods carry.

use std::collections::BTreeSet;
use std::sync::Arc;

use initguard_test_support::webhook::*;
use serde_json::{Value, json};

use crate::gates::config;
use crate::testbed::*;
use crate::wait::eventually;

const PREFIX: &str = "war";
const ANNOTATION: &str = "initguard.io/admitted-without";

/// A pod template's labels: `app=NAME`, opted in.
fn template(app: &str) -> Value {
    json!({
        "metadata": { "labels": { "app": app, OPT_IN: "true" } },
        "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
    })
}

fn replica_set(ns: &str, name: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "replicas": replicas, "selector": { "matchLabels": { "app": name } },
                  "template": template(name) },
    })
}

fn pdb(ns: &str, app: &str, rule: Value) -> Value {
    let mut spec = json!({ "selector": { "matchLabels": { "app": app } } });
    if let (Some(spec), Some(rule)) = (spec.as_object_mut(), rule.as_object()) {
        spec.extend(rule.clone());
    }
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": { "name": app, "namespace": ns },
        "spec": spec,
    })
}

fn name_of(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn deleting(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
}

/// A 3-replica ReplicaSet, a 2-replica one whose PodDisruptionBudget allows one disruption
/// (the positive control), a single-replica one, a Job and a 2-replica ReplicaSet whose budget
/// allows none, all opted in and created while the mutating webhook is bypassed. After the
/// restore every pod is annotated; only the pods of the first two are evicted, one at a time
/// per controller, each after the previous replacement was Ready, and their replacements carry
/// the webhook's annotation; the budget that forbids it is respected (429s, no eviction).
pub(crate) async fn webhook_after_restore_evicts_one_at_a_time_what_can_be_spared(
    tb: Arc<Testbed>,
) {
    let (apps, system) = (format!("{PREFIX}-apps"), format!("{PREFIX}-system"));
    let name = format!("{PREFIX}-inject");
    for ns in [&apps, &system] {
        tb.namespace(ns);
        tb.kubectl(&["label", "namespace", ns, &format!("webhook-test={PREFIX}")]);
    }
    let mut server = WebhookServer::start().await;
    let mut lease = OwnerLease::start(&tb, &system, "policy-webhook");
    tb.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": { "name": name },
        "webhooks": [{
            "name": ENTRY,
            "clientConfig": { "url": format!("https://{}/mutate", server.addr),
                              "caBundle": server.ca_bundle() },
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["pods"] }],
            "namespaceSelector": { "matchLabels": { "webhook-test": PREFIX } },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    }));
    let role = format!("{PREFIX}-initguard-webhooks");
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": role },
        "rules": [
            { "apiGroups": ["admissionregistration.k8s.io"],
              "resources": ["mutatingwebhookconfigurations"], "resourceNames": [name],
              "verbs": ["get", "list", "watch", "patch"] },
            { "apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"] },
            { "apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"] },
        ],
    }));
    tb.kubectl(&[
        "create",
        "clusterrolebinding",
        &role,
        &format!("--clusterrole={role}"),
        &format!("--user={GUARD_USER}"),
    ]);
    let webhook = format!("mutating/{name}/{ENTRY}");
    let guard = tb
        .guard(
            PREFIX,
            "initguard",
            &config(&format!(
                "webhooks:\n\
                 \x20 - name: {webhook}\n\
                 \x20   owner: {{ lease: {system}/policy-webhook }}\n\
                 \x20   ownerDownGrace: 1s\n\
                 \x20   restoreGrace: 1s\n\
                 \x20   exemptNamespaces: [{system}]\n\
                 \x20   afterRestore: evict\n\
                 \x20   maxWait: 30s\n"
            )),
        )
        .await;
    // A pod created while the webhook works gets its annotation, and is never reported.
    create_pod(&tb, &apps, "before", true).expect("the webhook admits it");

    server.stop().await;
    lease.kill(&tb);
    let mut attempt = 0;
    eventually("an opted-in pod admitted through the bypass", || {
        attempt += 1;
        create_pod(&tb, &apps, &format!("bypassed-{attempt}"), true).ok()
    })
    .await;
    tb.apply(&replica_set(&apps, "web", 3));
    tb.apply(&replica_set(&apps, "allowed", 2));
    tb.apply(&replica_set(&apps, "solo", 1));
    tb.apply(&replica_set(&apps, "guarded", 2));
    tb.apply(&json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "batch", "namespace": apps },
        "spec": { "template": { "metadata": template("batch")["metadata"],
                                "spec": { "restartPolicy": "Never",
                                          "containers": template("batch")["spec"]["containers"] } } },
    }));
    tb.apply(&pdb(&apps, "allowed", json!({ "maxUnavailable": 1 })));
    tb.apply(&pdb(&apps, "guarded", json!({ "minAvailable": 2 })));
    let pods_of = |app: &str| tb.list("pods", &apps, Some(&format!("app={app}")));
    let admitted: Vec<Value> =
        eventually("every controller's pods created during the bypass", || {
            let all: Vec<Value> = ["web", "allowed", "solo", "guarded", "batch"]
                .iter()
                .flat_map(|app| pods_of(app))
                .collect();
            (all.len() == 9).then_some(all)
        })
        .await;
    for pod in &admitted {
        assert!(
            pod["metadata"]["annotations"][INJECTED].is_null(),
            "admitted through the bypass, yet mutated: {pod:#}"
        );
        mark_ready(&tb, &apps, &name_of(pod), true);
    }
    // Evicted: web (no budget) and allowed (a budget that allows one disruption).
    const EVICTED: [&str; 2] = ["web", "allowed"];
    let original = |app: &str| -> BTreeSet<String> { pods_of(app).iter().map(name_of).collect() };
    let originals: BTreeSet<String> = EVICTED.iter().flat_map(|app| original(app)).collect();

    lease = OwnerLease::start(&tb, &system, "policy-webhook");
    server.serve();
    // Play the kubelet: every new pod of web and allowed becomes Ready, until all are replaced.
    let mut marked: BTreeSet<String> = BTreeSet::new();
    let replaced = eventually(
        "the pods of web and allowed replaced, one at a time",
        || {
            let pods: Vec<Value> = EVICTED.iter().flat_map(|app| pods_of(app)).collect();
            for pod in &pods {
                let n = name_of(pod);
                if !originals.contains(&n)
                    && !deleting(pod)
                    && !ready(pod)
                    && marked.insert(n.clone())
                {
                    mark_ready(&tb, &apps, &n, true);
                }
            }
            let live: Vec<&Value> = pods.iter().filter(|p| !deleting(p)).collect();
            (live.len() == 5
                && live
                    .iter()
                    .all(|p| !originals.contains(&name_of(p)) && ready(p)))
            .then(|| live.iter().map(|p| (*p).clone()).collect::<Vec<Value>>())
        },
    )
    .await;
    for pod in &replaced {
        assert_eq!(
            pod["metadata"]["annotations"][INJECTED], "true",
            "a replacement went through the restored webhook: {pod:#}"
        );
    }
    // The budget that forbids it is respected: refused until maxWait, then reported.
    eventually("the refused eviction reported", || {
        tb.list("events", &apps, None)
            .into_iter()
            .find(|e| e["reason"] == "EvictionRefused")
    })
    .await;
    guard.stop();

    let audit = tb.audit();
    let evictions: Vec<&Audit> = audit
        .iter()
        .filter(|a| a.user == GUARD_USER && a.subresource == "eviction" && a.namespace == apps)
        .collect();
    let evicted: Vec<&Audit> = evictions
        .iter()
        .copied()
        .filter(|a| a.code == 201)
        .collect();
    let names: BTreeSet<String> = evicted.iter().map(|a| a.name.clone()).collect();
    assert_eq!(
        names, originals,
        "exactly the bypassed pods of web and allowed are evicted: {evictions:#?}"
    );
    assert_eq!(evicted.len(), 5, "each once: {evicted:#?}");
    // Each Eviction names the pod's uid, so a namesake created meanwhile is never evicted.
    let uid_of = |name: &str| {
        admitted
            .iter()
            .find(|p| name_of(p) == name)
            .map(|p| p["metadata"]["uid"].clone())
            .unwrap_or(Value::Null)
    };
    for a in &evictions {
        assert_eq!(
            a.request["deleteOptions"]["preconditions"]["uid"],
            uid_of(&a.name),
            "an Eviction without the pod's uid: {a:#?}"
        );
    }
    let guarded: BTreeSet<String> = pods_of("guarded").iter().map(name_of).collect();
    assert!(
        evictions
            .iter()
            .filter(|a| guarded.contains(&a.name))
            .all(|a| a.code == 429)
            && evictions.iter().any(|a| guarded.contains(&a.name)),
        "the budget that forbids it answered 429 to every try: {evictions:#?}"
    );
    // One at a time per controller: between two evictions of its pods, the kubelet (the
    // test) marked one of its replacements Ready.
    for app in EVICTED {
        let ours = original(app);
        let readied: Vec<&Audit> = audit
            .iter()
            .filter(|a| {
                a.subresource == "status"
                    && a.namespace == apps
                    && a.verb == "patch"
                    && marked.contains(&a.name)
                    && a.name.starts_with(&format!("{app}-"))
            })
            .collect();
        let mut times: Vec<&str> = evicted
            .iter()
            .filter(|a| ours.contains(&a.name))
            .map(|a| a.received.as_str())
            .collect();
        times.sort_unstable();
        assert!(times.len() >= 2, "{app}: {evicted:#?}");
        for pair in times.windows(2) {
            assert!(
                readied
                    .iter()
                    .any(|r| pair[0] < r.received.as_str() && r.received.as_str() < pair[1]),
                "{app}: evicted at {} before the replacement of the eviction at {} was Ready: \
                 {readied:#?}",
                pair[1],
                pair[0]
            );
        }
    }
    // Everything found carries the annotation; only the evicted pods are gone.
    let value = |pod: &Value| pod["metadata"]["annotations"][ANNOTATION].clone();
    for app in ["solo", "guarded", "batch"] {
        let pods = pods_of(app);
        assert!(!pods.is_empty(), "{app}'s pods are still there");
        for pod in pods {
            assert!(
                value(&pod)
                    .as_str()
                    .is_some_and(|v| v.starts_with(&format!("{webhook}@"))),
                "{app}: {pod:#}"
            );
            assert!(!deleting(&pod), "{app} was evicted: {pod:#}");
        }
    }
    let before = tb
        .get("pods", &apps, "before")
        .expect("the pod created before");
    assert!(value(&before).is_null(), "{before:#}");
    assert_eq!(before["metadata"]["annotations"][INJECTED], "true");
    let reported = tb
        .list("events", &apps, None)
        .into_iter()
        .filter(|e| e["reason"] == "AdmittedWithoutWebhook")
        .count();
    // Nine pods of controllers and the bypassed bare pod(s).
    assert!(reported >= 10, "{reported} AdmittedWithoutWebhook Events");

    drop(lease);
    server.stop().await;
    tb.kubectl(&["delete", "mutatingwebhookconfiguration", &name]);
    tb.kubectl(&["delete", "clusterrolebinding", &role]);
    tb.kubectl(&["delete", "clusterrole", &role]);
    for kind in ["replicaset", "job", "poddisruptionbudget"] {
        tb.kubectl(&["delete", kind, "--all", "-n", &apps, "--wait=false"]);
    }
    crate::gates::cleanup(&tb, &apps);
    for ns in [&apps, &system] {
        tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }
}
