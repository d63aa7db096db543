//! The webhook guard's loop against the simulator, which serves admissionregistration.k8s.io/v1
//! as the real server does (its defaults and matchConditions checks are compared with the real
//! one by tests/real_cluster/differential.rs). Judged from the server's object history.

use initguard::config::Mechanism;
use initguard_sim::SimClients as _;
use kube_sim::ObjectChange;
use serde_json::{Value, json};

use crate::harness::*;

const CONFIGURATION: &str = "policy";
const ENTRY: &str = "check.policy.example.com";
const RESOURCE: &str = "validatingwebhookconfigurations";
const RECORD: &str = "initguard.io/bypassed-webhooks";

/// A cluster with one listed fail-closed webhook whose `own` matchConditions are given, its
/// owner a Deployment with `available` replicas, and a guard (grace 0 s both ways) allowed to
/// patch that one configuration.
async fn bed(own: usize, available: i64) -> (Cluster, initguard::guard::Guard, Value) {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let conditions: Vec<Value> = (0..own)
        .map(|i| json!({ "name": format!("own-{i}"), "expression": "true" }))
        .collect();
    let created = webhook_world(&c, CONFIGURATION, ENTRY, conditions).await;
    set_available(&c, available).await;
    let config = config(
        Mechanism::SchedulingGates,
        &policy_webhook(CONFIGURATION, ENTRY, "0s", Some("0s")),
    );
    let guard = c.guard(&config).await;
    (c, guard, created)
}

async fn set_available(c: &Cluster, available: i64) {
    c.admin_request(
        http::Method::PATCH,
        "/apis/apps/v1/namespaces/kube-system/deployments/policy/status",
        Some(
            &json!({ "status": { "replicas": 1, "availableReplicas": available,
                                  "readyReplicas": available } }),
        ),
    )
    .await;
}

fn stored(c: &Cluster) -> Value {
    c.sim
        .get_object(RESOURCE, None, CONFIGURATION)
        .unwrap_or_else(|| panic!("configuration {CONFIGURATION} is gone"))
}

/// Commits of the configuration, in commit order.
fn commits(c: &Cluster) -> Vec<ObjectChange> {
    c.sim
        .object_history()
        .into_iter()
        .filter(|ch| ch.resource == RESOURCE && ch.name == CONFIGURATION)
        .collect()
}

fn bypassed(object: &Value) -> bool {
    object["metadata"]["annotations"][RECORD]
        .as_str()
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
        .is_some_and(|r| r[ENTRY]["since"].is_string())
}

/// Down: the entry gets the bypass condition and the record, and nothing else changes; up: it
/// is exactly as it was created (with the server's defaults).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_bypassed_through_match_conditions_and_restored_exactly() {
    let (c, guard, created) = bed(1, 0).await;
    until("the bypass", || bypassed(&stored(&c))).await;
    let during = stored(&c);
    let conditions: Vec<&str> = during["webhooks"][0]["matchConditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(conditions, ["own-0", "initguard-bypass"], "{during:#}");
    assert_eq!(
        during["webhooks"][0]["objectSelector"], created["webhooks"][0]["objectSelector"],
        "matchConditions alone: {during:#}"
    );
    set_available(&c, 1).await;
    until("the restore", || !bypassed(&stored(&c))).await;
    let after = stored(&c);
    assert_eq!(after["webhooks"], created["webhooks"], "restored exactly");
    let by_guard: Vec<String> = commits(&c)
        .iter()
        .filter(|ch| ch.user == GUARD_USER)
        .map(|ch| ch.resource_version.to_string())
        .collect();
    assert_eq!(by_guard.len(), 2, "one bypass, one restore: {by_guard:?}");
    c.finish(guard).await;
}

/// An entry with the 64 matchConditions the server allows cannot take one more: the guard
/// bypasses it through selectors, and never sends a patch the server refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_with_every_match_condition_it_may_have_is_bypassed_through_selectors() {
    let (c, guard, created) = bed(64, 0).await;
    until("the bypass", || bypassed(&stored(&c))).await;
    let during = stored(&c);
    assert_eq!(
        during["webhooks"][0]["matchConditions"], created["webhooks"][0]["matchConditions"],
        "{during:#}"
    );
    assert!(
        during["webhooks"][0]["objectSelector"]["matchExpressions"]
            .as_array()
            .is_some_and(|e| !e.is_empty()),
        "{during:#}"
    );
    let refused: Vec<_> = c
        .guard_writes()
        .into_iter()
        .filter(|w| w.resource == RESOURCE && w.status >= 400)
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
    c.finish(guard).await;
}

/// `initguard restore` while the owner is down leaves a tombstone: the running guard, having
/// seen it, does not bypass again; once the owner is up the tombstone goes, and the next outage
/// is bypassed again. Judged by the order of commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_on_demand_holds_until_the_owner_was_up() {
    let (c, guard, created) = bed(0, 0).await;
    until("the bypass", || bypassed(&stored(&c))).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!("webhooks:\n  - name: validating/{CONFIGURATION}/{ENTRY}\n"),
    );
    let client = kube::Client::try_from(c.sim.kube_config("system:admin"))
        .unwrap_or_else(|e| panic!("admin client: {e}"));
    let options = initguard::restore::Options {
        webhooks: Vec::new(),
        dry_run: false,
        by: initguard::restore::RestoredBy::Cli,
    };
    let lines = initguard::restore::restore(&client, &config, &options)
        .await
        .unwrap_or_else(|e| panic!("restore: {e}"));
    assert!(
        lines.iter().all(|l| l.to_string().contains("restored")),
        "{lines:?}"
    );
    assert_eq!(stored(&c)["webhooks"], created["webhooks"]);
    // The guard has read the restored configuration once its status says so.
    until("the guard to see the restore", || {
        guard
            .shared
            .webhook_statuses()
            .iter()
            .any(|s| s.state == "guarded")
    })
    .await;
    let restored_at = commits(&c)
        .last()
        .map(|ch| ch.resource_version)
        .unwrap_or_default();
    set_available(&c, 1).await;
    until("the tombstone dropped", || {
        stored(&c)["metadata"]["annotations"][RECORD]
            .as_str()
            .is_none_or(|r| !r.contains("restored"))
    })
    .await;
    let after_restore: Vec<ObjectChange> = commits(&c)
        .into_iter()
        .filter(|ch| ch.resource_version > restored_at)
        .collect();
    assert!(
        after_restore
            .iter()
            .all(|ch| ch.after.as_deref().is_some_and(|o| !bypassed(o))),
        "bypassed again before the owner was up: {:#?}",
        after_restore
            .iter()
            .map(|ch| ch.after.clone())
            .collect::<Vec<_>>()
    );
    set_available(&c, 0).await;
    until("the next outage bypassed", || bypassed(&stored(&c))).await;
    c.finish(guard).await;
}
