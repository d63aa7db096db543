//! The webhook guard's loop against the simulator, which serves admissionregistration.k8s.io/v1
//! as the real server does (its defaults and matchConditions checks are compared with the real
//! one by tests/real_cluster/differential.rs). Judged from the server's object history.

use initguard::config::Mechanism;
use initguard_sim::SimClients as _;
use kube_sim::{ObjectChange, RequestRecord};
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
    bed_with(own, available, |_| {}).await
}

/// [`bed`] with `faults` set on the server before the guard starts.
async fn bed_with(
    own: usize,
    available: i64,
    faults: impl FnOnce(&kube_sim::Faults),
) -> (Cluster, initguard::guard::Guard, Value) {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let created = webhook_world(&c, CONFIGURATION, ENTRY, own_conditions(own)).await;
    set_available(&c, available).await;
    faults(c.sim.faults());
    let config = config(
        Mechanism::SchedulingGates,
        &policy_webhook(CONFIGURATION, ENTRY, "0s", Some("0s")),
    );
    let guard = c.guard(&config).await;
    (c, guard, created)
}

/// `n` matchConditions of the entry's own, each always true.
fn own_conditions(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({ "name": format!("own-{i}"), "expression": "true" }))
        .collect()
}

/// Create the configuration `name` of `kind` (`Validating` or `Mutating`) holding `webhooks`.
async fn post_configuration(c: &Cluster, kind: &str, name: &str, webhooks: &Value) {
    c.admin_post(
        &format!(
            "/apis/admissionregistration.k8s.io/v1/{}webhookconfigurations",
            kind.to_lowercase()
        ),
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": format!("{kind}WebhookConfiguration"),
            "metadata": { "name": name },
            "webhooks": webhooks,
        }),
    )
    .await;
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

/// Commits of the configuration by the guard, in commit order.
fn guard_commits(c: &Cluster) -> Vec<ObjectChange> {
    commits(c)
        .into_iter()
        .filter(|ch| ch.user == GUARD_USER)
        .collect()
}

/// The guard's PATCHes of the configuration, from the server's log.
fn guard_patches(c: &Cluster) -> Vec<RequestRecord> {
    c.guard_writes()
        .into_iter()
        .filter(|w| w.resource == RESOURCE && w.verb == "patch")
        .collect()
}

/// The guard's GETs and PATCHes of the configuration, as (verb, status), in arrival order.
fn reads_and_writes(c: &Cluster) -> Vec<(String, u16)> {
    c.sim
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == GUARD_USER
                && r.resource == RESOURCE
                && matches!(r.verb.as_str(), "get" | "patch")
        })
        .map(|r| (r.verb, r.status))
        .collect()
}

/// Another writer's label on the configuration: a new resourceVersion, the entry unchanged.
async fn label_configuration(c: &Cluster) {
    c.admin_request(
        http::Method::PATCH,
        &format!("/apis/admissionregistration.k8s.io/v1/{RESOURCE}/{CONFIGURATION}"),
        Some(&json!({ "metadata": { "labels": { "team": "policy" } } })),
    )
    .await;
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
    // The record names the owner that was down, as configured.
    let record: Value = during["metadata"]["annotations"][RECORD]
        .as_str()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    assert_eq!(
        record[ENTRY]["owner"], "deployment kube-system/policy",
        "{record:#}"
    );
    assert_eq!(
        during["webhooks"][0]["objectSelector"], created["webhooks"][0]["objectSelector"],
        "matchConditions alone: {during:#}"
    );
    set_available(&c, 1).await;
    until("the restore", || !bypassed(&stored(&c))).await;
    let after = stored(&c);
    assert_eq!(after["webhooks"], created["webhooks"], "restored exactly");
    let by_guard: Vec<String> = guard_commits(&c)
        .iter()
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

/// An entry with its 64 matchConditions, listed with `optIn: none` and `exemptCriticalPath`:
/// while its owner is down only the critical path would pass, which selectors cannot say, so
/// the guard writes nothing rather than a bypass that lets nothing through. The witness that
/// the outage was decided: a second listed configuration of the same dead owner, created once
/// the guard showed the first with its owner down, bypassed in a later pass that steps the
/// first before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_entry_that_only_exempts_the_critical_path_is_not_bypassed() {
    const WITNESS: &str = "policy-witness";
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let created = webhook_world(&c, CONFIGURATION, ENTRY, own_conditions(64)).await;
    webhook_rbac(&c, &[CONFIGURATION, WITNESS]);
    set_available(&c, 0).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "{}    optIn: none\n    exemptCriticalPath: true\n{}",
            policy_webhook(CONFIGURATION, ENTRY, "0s", Some("0s")),
            policy_webhook(WITNESS, ENTRY, "0s", Some("0s")).replacen("webhooks:\n", "", 1),
        ),
    );
    let guard = c.guard(&config).await;
    until("the guard to see the owner down", || {
        status_in(&guard, CONFIGURATION)
            .is_some_and(|s| matches!(s.owner, initguard::policy::OwnerState::Down { .. }))
    })
    .await;
    let mut witness = created["webhooks"].clone();
    witness[0]
        .as_object_mut()
        .map(|e| e.remove("matchConditions"));
    post_configuration(&c, "Validating", WITNESS, &witness).await;
    until("the witness configuration bypassed", || {
        c.sim
            .get_object(RESOURCE, None, WITNESS)
            .is_some_and(|o| bypassed(&o))
    })
    .await;
    assert_eq!(guard_commits(&c).len(), 0, "{:#?}", guard_commits(&c));
    assert_eq!(stored(&c)["webhooks"], created["webhooks"]);
    c.finish(guard).await;
}

/// `initguard restore` while the owner is down leaves a tombstone: the running guard, having
/// seen it, does not bypass again; once the owner is up the tombstone goes, and the next outage
/// is bypassed again. Judged by the order of commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_on_demand_holds_until_the_owner_was_up() {
    let (c, guard, created) = bed(0, 0).await;
    until("the bypass", || bypassed(&stored(&c))).await;
    restore_on_demand(&c).await;
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

/// Undos by another writer count only within the webhook's `flapping.window`: with `flapping:
/// { undos: 2, window: 5s }`, an undo is re-applied; an undo a window after the last one is
/// re-applied too (the first no longer counts); a second undo within the window makes the
/// bypass flapping: a Warning Event, and the entry left as the other writer put it, also on
/// the loop's next pass (the witness: a second listed configuration of the same dead owner,
/// created afterwards and bypassed in a pass that steps the flapping one first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undos_count_within_the_configured_flapping_window() {
    const WINDOW: std::time::Duration = std::time::Duration::from_secs(5);
    const WITNESS: &str = "policy-witness";
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let created = webhook_world(&c, CONFIGURATION, ENTRY, Vec::new()).await;
    webhook_rbac(&c, &[CONFIGURATION, WITNESS]);
    set_available(&c, 0).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "{}    flapping: {{ undos: 2, window: {}s }}\n{}",
            policy_webhook(CONFIGURATION, ENTRY, "0s", Some("0s")),
            WINDOW.as_secs(),
            policy_webhook(WITNESS, ENTRY, "0s", Some("0s")).replacen("webhooks:\n", "", 1),
        ),
    );
    let guard = c.guard(&config).await;
    // A webhook manager puts its own version of the entries back.
    let undo = || async {
        c.admin_request(
            http::Method::PATCH,
            &format!("/apis/admissionregistration.k8s.io/v1/{RESOURCE}/{CONFIGURATION}"),
            Some(&json!({ "webhooks": created["webhooks"] })),
        )
        .await;
        // Judged from the commit: the guard may re-apply before the stored object is read.
        let undone = commits(&c)
            .into_iter()
            .rev()
            .find(|ch| ch.user == ADMIN)
            .and_then(|ch| ch.after)
            .is_some_and(|o| !bypassed_entry(&o));
        assert!(undone, "the undo did not apply");
    };
    until("the bypass", || bypassed_entry(&stored(&c))).await;
    undo().await;
    until("the bypass re-applied after one undo", || {
        bypassed_entry(&stored(&c))
    })
    .await;
    // The guard counted that undo before it re-applied: a window from now it no longer counts.
    tokio::time::sleep(WINDOW).await;
    undo().await;
    until(
        "the bypass re-applied, the earlier undo out of the window",
        || bypassed_entry(&stored(&c)),
    )
    .await;
    undo().await;
    until("the flapping Event", || {
        c.sim
            .list_objects("events")
            .iter()
            .any(|e| e["reason"] == "WebhookBypassFlapping")
    })
    .await;
    post_configuration(&c, "Validating", WITNESS, &created["webhooks"]).await;
    until("the witness configuration bypassed", || {
        c.sim
            .get_object(RESOURCE, None, WITNESS)
            .is_some_and(|o| bypassed_entry(&o))
    })
    .await;
    assert!(!bypassed_entry(&stored(&c)), "re-applied while flapping");
    let by_guard = guard_commits(&c).len();
    assert_eq!(by_guard, 3, "three bypasses, no fourth");
    c.finish(guard).await;
}

/// The entry carries the guard's bypass condition.
fn bypassed_entry(object: &Value) -> bool {
    object["webhooks"][0]["matchConditions"]
        .as_array()
        .is_some_and(|l| l.iter().any(|m| m["name"] == "initguard-bypass"))
}

/// A server that drops `matchConditions` silently (a 1.27 server with the feature gate off):
/// the guard reads the entry back, finds its condition gone, and bypasses through selectors
/// instead; once the owner is back, the entry is restored exactly, and the next outage is
/// bypassed through selectors at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_drops_match_conditions_gets_the_selector_bypass() {
    let c = Cluster::start_with(Mechanism::SchedulingGates, |o| {
        o.drop_match_conditions = true
    })
    .await;
    let created = webhook_world(&c, CONFIGURATION, ENTRY, Vec::new()).await;
    set_available(&c, 0).await;
    let config = config(
        Mechanism::SchedulingGates,
        &policy_webhook(CONFIGURATION, ENTRY, "0s", Some("0s")),
    );
    let guard = c.guard(&config).await;
    let through_selectors = || {
        stored(&c)["webhooks"][0]["objectSelector"]["matchExpressions"]
            .as_array()
            .is_some_and(|e| e.iter().any(|r| r["key"] == OPT_IN))
    };
    until("a selector bypass", through_selectors).await;
    let during = stored(&c);
    assert!(bypassed(&during), "recorded: {during:#}");
    assert!(
        during["webhooks"][0]["matchConditions"].is_null(),
        "{during:#}"
    );
    // Its first try went through matchConditions: accepted, and dropped by the server.
    let by_guard = guard_commits(&c);
    assert_eq!(
        by_guard.len(),
        2,
        "the dropped try, then selectors: {by_guard:#?}"
    );
    // The guard counts a bypass once the server's answer shows it kept, then records the
    // Event: the Event is the witness that the count is done.
    let bypass_events = || {
        c.sim
            .list_objects("events")
            .into_iter()
            .filter(|e| e["reason"] == "WebhookBypassed")
            .collect::<Vec<Value>>()
    };
    until("the WebhookBypassed Event", || !bypass_events().is_empty()).await;
    let metrics = guard.shared.metrics.render().unwrap();
    assert_eq!(
        metric_sum(&metrics, "initguard_webhook_bypasses_total", &[]),
        1.0,
        "one bypass: {metrics}"
    );
    let events = bypass_events();
    assert_eq!(events.len(), 1, "{events:#?}");
    let message = events[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("(objectSelector/namespaceSelector requirements)"),
        "{message}"
    );
    // The server's log: the try it dropped, then selectors; never the dropped try again.
    assert_eq!(
        guard_patches(&c).len(),
        2,
        "the guard's PATCHes of the configuration"
    );
    set_available(&c, 1).await;
    until("the restore", || !bypassed(&stored(&c))).await;
    assert_eq!(
        stored(&c)["webhooks"],
        created["webhooks"],
        "restored exactly"
    );
    // The next outage goes straight to selectors: the server's answer is remembered.
    let restored = commits(&c).len();
    set_available(&c, 0).await;
    until(
        "the next outage bypassed through selectors",
        through_selectors,
    )
    .await;
    let next: Vec<ObjectChange> = commits(&c).into_iter().skip(restored).collect();
    assert_eq!(next.len(), 1, "one write, through selectors: {next:#?}");
    c.finish(guard).await;
}

/// Dry-run decides and writes nothing: with the owner down it counts the bypass it would
/// make; over a bypass left by an earlier guard, with the owner back, it does not restore it;
/// over a tombstone left by `initguard restore`, with the owner back, it does not drop it.
/// Judged by the server's record of the configuration. The witness that the restore and the
/// tombstone were decided: a second listed configuration, changed once the guard showed the
/// first as it read it, is read in a later pass of the loop, which steps the first before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_guard_writes_no_bypass_no_restore_and_keeps_a_tombstone() {
    const WITNESS: &str = "policy-witness";
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let created = webhook_world(&c, CONFIGURATION, ENTRY, Vec::new()).await;
    webhook_rbac(&c, &[CONFIGURATION, WITNESS]);
    set_available(&c, 0).await;
    let listed = format!(
        "{}{}",
        policy_webhook(CONFIGURATION, ENTRY, "0s", Some("0s")),
        policy_webhook(WITNESS, ENTRY, "0s", Some("0s")).replacen("webhooks:\n", "", 1),
    );
    let dry_run = config(
        Mechanism::SchedulingGates,
        &format!("dryRun: true\n{listed}"),
    );

    let guard = c.guard(&dry_run).await;
    until("the dry-run bypass counted", || {
        let text = guard.shared.metrics.render().unwrap_or_default();
        metric_sum(&text, "initguard_webhook_bypasses_total", &[]) == 1.0
    })
    .await;
    assert_eq!(guard_commits(&c).len(), 0, "dry-run bypassed");
    c.finish(guard).await;

    // A guard that writes bypasses it; then, with the owner back, a dry-run guard takes over.
    let writing = c.guard(&config(Mechanism::SchedulingGates, &listed)).await;
    until("the bypass", || bypassed(&stored(&c))).await;
    c.finish(writing).await;
    let written = guard_commits(&c).len();
    set_available(&c, 1).await;
    let guard = c.guard(&dry_run).await;
    until(
        "the dry-run guard to see the bypass with its owner up",
        || {
            // Or a write, which ends the wait at once with the verdict below.
            guard_commits(&c).len() > written
                || status_in(&guard, CONFIGURATION).is_some_and(|s| {
                    s.state == "bypassed"
                        && matches!(s.owner, initguard::policy::OwnerState::Up { .. })
                })
        },
    )
    .await;
    assert_eq!(guard_commits(&c).len(), written, "dry-run restored");
    post_configuration(&c, "Validating", WITNESS, &created["webhooks"]).await;
    until("the witness configuration read", || {
        status_in(&guard, WITNESS).is_some_and(|s| s.state != "not found")
    })
    .await;
    assert_eq!(guard_commits(&c).len(), written, "dry-run restored");
    assert!(bypassed(&stored(&c)), "dry-run restored");
    c.finish(guard).await;

    // `initguard restore` while the owner is down leaves a tombstone, which a writing guard
    // drops once the owner is up; a dry-run guard leaves it. Its witness: the second
    // configuration deleted, and seen gone in a later pass.
    set_available(&c, 0).await;
    restore_on_demand(&c).await;
    let tombstone = |c: &Cluster| {
        stored(c)["metadata"]["annotations"][RECORD]
            .as_str()
            .is_some_and(|r| r.contains("restored"))
    };
    assert!(tombstone(&c), "no tombstone: {:#}", stored(&c));
    let written = guard_commits(&c).len();
    set_available(&c, 1).await;
    let guard = c.guard(&dry_run).await;
    until(
        "the dry-run guard to see the tombstone with its owner up",
        || {
            guard_commits(&c).len() > written
                || (status_in(&guard, WITNESS).is_some_and(|s| s.state == "guarded")
                    && status_in(&guard, CONFIGURATION).is_some_and(|s| {
                        s.state == "guarded"
                            && matches!(s.owner, initguard::policy::OwnerState::Up { .. })
                    }))
        },
    )
    .await;
    assert_eq!(
        guard_commits(&c).len(),
        written,
        "dry-run dropped the tombstone"
    );
    c.admin_request(
        http::Method::DELETE,
        &format!("/apis/admissionregistration.k8s.io/v1/{RESOURCE}/{WITNESS}"),
        None,
    )
    .await;
    until("the witness configuration seen gone", || {
        status_in(&guard, WITNESS).is_some_and(|s| s.state == "not found")
    })
    .await;
    assert_eq!(
        guard_commits(&c).len(),
        written,
        "dry-run dropped the tombstone"
    );
    assert!(tombstone(&c), "dry-run dropped the tombstone");
    c.finish(guard).await;
}

/// The guard's status of the listed entry ENTRY of `configuration`.
fn status_in(
    guard: &initguard::guard::Guard,
    configuration: &str,
) -> Option<initguard::webhook::WebhookStatus> {
    guard
        .shared
        .webhook_statuses()
        .into_iter()
        .find(|s| s.webhook == format!("validating/{configuration}/{ENTRY}"))
}

/// `initguard restore` of every listed webhook, as the CLI runs it, by an administrator.
async fn restore_on_demand(c: &Cluster) {
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
}

/// `afterRestore: report` on a mutating webhook: once the guard has restored its bypass, the
/// pods created while it was in place that it let through (one opted in, one on the critical
/// path) are annotated `initguard.io/admitted-without`, naming the webhook, by the guard.
/// Another mutating webhook with the default `afterRestore: ignore`, bypassed over the same
/// outage and restored first (its sweep, were there one, would take the one-at-a-time turn
/// first and annotate the add-only value), is named on no pod. Judged from the server's record
/// of the pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_admitted_through_a_mutating_webhooks_bypass_is_reported_after_the_restore() {
    const MUTATING: &str = "mutatingwebhookconfigurations";
    const ADMITTED_WITHOUT: &str = "initguard.io/admitted-without";
    const QUIET: &str = "policy-quiet";
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    // The owner, and a validating configuration whose entry the mutating one copies; only
    // the mutating one is listed and granted.
    let created = webhook_world(&c, CONFIGURATION, ENTRY, Vec::new()).await;
    let mut rbac = webhook_policy(MUTATING, &[QUIET, CONFIGURATION]);
    // As deploy/README.md grants for afterRestore: the sweep reads namespaces' labels.
    rbac.merge(kube_sim::Rbac::cluster_wide(vec![
        kube_sim::PolicyRule::new(&[""], &["namespaces"], &["list"]),
    ]));
    c.sim.enforce_rbac_policy(GUARD_USER, rbac);
    post_configuration(&c, "Mutating", QUIET, &created["webhooks"]).await;
    post_configuration(&c, "Mutating", CONFIGURATION, &created["webhooks"]).await;
    set_available(&c, 0).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "{}    exemptCriticalPath: true\n{}    afterRestore: report\n    exemptCriticalPath: true\n",
            policy_webhook(QUIET, ENTRY, "0s", Some("0s")).replace("validating/", "mutating/"),
            policy_webhook(CONFIGURATION, ENTRY, "0s", Some("2s"))
                .replace("validating/", "mutating/")
                .replacen("webhooks:\n", "", 1)
        ),
    );
    let guard = c.guard(&config).await;
    let mutating = |name: &str| {
        c.sim
            .get_object(MUTATING, None, name)
            .unwrap_or_else(|| panic!("configuration {name} is gone"))
    };
    until("both bypasses", || {
        bypassed(&mutating(QUIET)) && bypassed(&mutating(CONFIGURATION))
    })
    .await;
    c.pod("default", "during", true, &[]).await;
    // Not opted in, but on the critical path, which the matchConditions bypass let through.
    c.pod("kube-system", "system", false, &[]).await;
    set_available(&c, 1).await;
    until("both restores", || {
        !bypassed(&mutating(QUIET)) && !bypassed(&mutating(CONFIGURATION))
    })
    .await;
    // The restore grace orders them: the ignored webhook's first, by a pass or more.
    let restored_at = |name: &str| {
        c.sim
            .object_history()
            .into_iter()
            .filter(|ch| ch.resource == MUTATING && ch.name == name && ch.user == GUARD_USER)
            .last()
            .map(|ch| ch.resource_version)
    };
    assert!(restored_at(QUIET) < restored_at(CONFIGURATION));
    let reported = |name: &str| {
        c.sim
            .object_history()
            .into_iter()
            .filter(|ch| ch.resource == "pods" && ch.name == name && ch.user == GUARD_USER)
            .filter_map(|ch| ch.after)
            .find_map(|p| {
                p["metadata"]["annotations"][ADMITTED_WITHOUT]
                    .as_str()
                    .map(str::to_owned)
            })
    };
    until("both pods reported", || {
        reported("during").is_some() && reported("system").is_some()
    })
    .await;
    for name in ["during", "system"] {
        let value = reported(name).unwrap_or_default();
        assert!(
            value.contains(&format!("mutating/{CONFIGURATION}/{ENTRY}")),
            "{name}: {value}"
        );
        assert!(!value.contains(&format!("/{QUIET}/")), "{name}: {value}");
    }
    c.finish(guard).await;
}

/// A PATCH of the configuration refused 409 (the object changed since it was read) is never
/// retried blindly, nor taken for a server that drops matchConditions: the server's log shows
/// the 409, a fresh GET, then the bypass, decided again at once (nothing else wakes the loop)
/// and still through matchConditions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_on_the_configuration_is_followed_by_a_fresh_read_and_the_same_bypass() {
    let (c, guard, created) =
        bed_with(0, 0, |f| f.fail_next(GUARD_USER, "patch", RESOURCE, 409)).await;
    until("the bypass", || bypassed(&stored(&c))).await;
    let trace = reads_and_writes(&c);
    let expected = [("patch", 409), ("get", 200), ("patch", 200)].map(|(v, s)| (v.to_owned(), s));
    assert_eq!(trace, expected);
    // A conflict says nothing about matchConditions: the bypass still goes through them.
    assert!(bypassed_entry(&stored(&c)), "{:#}", stored(&c));
    assert_eq!(
        stored(&c)["webhooks"][0]["rules"],
        created["webhooks"][0]["rules"]
    );
    c.finish(guard).await;
}

/// A change of the configuration that the guard's watch has not shown (its watch held, as
/// behind a lagging watch cache) makes the bypass's PATCH fail its resourceVersion `test`: the
/// guard re-reads the configuration and writes the bypass on what it read, not on its stale
/// copy again. The server's log: the refused PATCH, the GET, then the PATCH that lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_the_watch_has_not_shown_is_read_before_the_bypass_is_written_again() {
    let (c, guard, _) = bed(0, 1).await;
    until("the configuration read", || {
        status_in(&guard, CONFIGURATION).is_some_and(|s| s.state == "guarded")
    })
    .await;
    c.sim.faults().stall_verb(GUARD_USER, "watch", RESOURCE);
    c.sim.faults().drop_watches();
    until("the guard's watch of the configuration held", || {
        c.sim.faults().stalled_requests() >= 1
    })
    .await;
    label_configuration(&c).await;
    set_available(&c, 0).await;
    until("the guard's second PATCH", || {
        reads_and_writes(&c)
            .iter()
            .filter(|(v, _)| v == "patch")
            .count()
            >= 2
    })
    .await;
    let expected = [("patch", 422), ("get", 200), ("patch", 200)].map(|(v, s)| (v.to_owned(), s));
    assert_eq!(reads_and_writes(&c)[..3], expected);
    assert!(bypassed(&stored(&c)), "{:#}", stored(&c));
    assert_eq!(stored(&c)["metadata"]["labels"]["team"], "policy");
    c.sim.faults().unstall(GUARD_USER, RESOURCE);
    c.finish(guard).await;
}

/// The canary of an `apiserver` owner in a namespace that `optIn.namespaceSelector` selects
/// would be let past the webhook by its bypass: the guard's status names that problem (and
/// the owner counts as unknown) while the namespace's labels match, and drops it once they do
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_in_an_opted_in_namespace_is_a_problem_while_it_is_selected() {
    const CANARY: &str = "canary";
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    webhook_world(&c, CONFIGURATION, ENTRY, Vec::new()).await;
    let mut rbac = webhook_policy(RESOURCE, &[CONFIGURATION]);
    // `optIn.namespaceSelector` reads every namespace's labels (the canary's among them).
    rbac.merge(kube_sim::Rbac::cluster_wide(vec![
        kube_sim::PolicyRule::new(&[""], &["namespaces"], &["get", "list", "watch"]),
    ]));
    // The canary's dry-run creates, as deploy/README.md grants them for an `apiserver` owner.
    rbac.merge(kube_sim::Rbac::namespaced(
        CANARY,
        vec![kube_sim::PolicyRule::new(&[""], &["pods"], &["create"])],
    ));
    c.sim.enforce_rbac_policy(GUARD_USER, rbac);
    c.admin_post(
        "/api/v1/namespaces",
        &json!({ "apiVersion": "v1", "kind": "Namespace",
                 "metadata": { "name": CANARY, "labels": { "team": "batch" } } }),
    )
    .await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "optIn: {{ label: {OPT_IN}, namespaceSelector: team=batch }}\n\
             webhooks:\n\
             \x20 - name: validating/{CONFIGURATION}/{ENTRY}\n\
             \x20   owner: {{ apiserver: {{ namespace: {CANARY}, resource: pods, interval: 1s }} }}\n"
        ),
    );
    let guard = c.guard(&config).await;
    let problem = || status_in(&guard, CONFIGURATION).and_then(|s| s.canary_problem);
    until("the opted-in canary namespace named as a problem", || {
        problem().is_some_and(|p| p.contains("opted in by optIn.namespaceSelector"))
    })
    .await;
    assert!(
        status_in(&guard, CONFIGURATION)
            .is_some_and(|s| s.owner == initguard::policy::OwnerState::Unknown),
        "an owner whose canary cannot be trusted is unknown"
    );
    c.admin_request(
        http::Method::PATCH,
        &format!("/api/v1/namespaces/{CANARY}"),
        Some(&json!({ "metadata": { "labels": { "team": "web" } } })),
    )
    .await;
    until(
        "the problem gone once the namespace is not selected",
        || {
            status_in(&guard, CONFIGURATION).is_some_and(|s| {
                s.canary_problem
                    .is_none_or(|p| !p.contains("opted in by optIn.namespaceSelector"))
            })
        },
    )
    .await;
    c.finish(guard).await;
}

/// A PATCH of the configuration that gets no answer (the server holds it past the write
/// timeout) is tried again later by the loop's own timer: nothing else changes that would
/// wake it, yet the bypass lands once the server answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_write_without_answer_is_tried_again_later() {
    let (c, guard, _) = bed_with(0, 0, |f| {
        f.delay_writes(GUARD_USER, RESOURCE, std::time::Duration::from_secs(3600))
    })
    .await;
    until("the first PATCH held by the server", || {
        c.sim.faults().delayed_writes() >= 1
    })
    .await;
    c.sim.faults().clear();
    until("the bypass", || bypassed(&stored(&c))).await;
    c.finish(guard).await;
}

/// A PATCH of the configuration the server refuses for another reason than a change (500)
/// is tried again 5 s later, not at once, even when something else wakes the loop meanwhile
/// (here another writer's label on the configuration, once the refusal is in the server's
/// log): the second PATCH comes no sooner than 5 s after the refused one arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_configuration_write_is_tried_again_after_a_pause() {
    let (c, guard, _) = bed_with(0, 0, |f| f.fail_next(GUARD_USER, "patch", RESOURCE, 500)).await;
    until("the refused PATCH", || {
        guard_patches(&c).iter().any(|r| r.status == 500)
    })
    .await;
    label_configuration(&c).await;
    until("the bypass", || bypassed(&stored(&c))).await;
    let patches = guard_patches(&c);
    let statuses: Vec<u16> = patches.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [500, 200]);
    assert_not_before(
        "the second PATCH",
        patches[0].time,
        patches[1].time,
        std::time::Duration::from_secs(5),
    );
    c.finish(guard).await;
}

/// A configuration deleted while the guard's watch of it was down, and found missing when the
/// watch lists again (its resourceVersion expired: 410), is forgotten: the guard's status says
/// `not found`, not the entry it last saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_deleted_while_its_watch_was_down_is_forgotten_at_the_relist() {
    let (c, guard, _) = bed(0, 1).await;
    until("the configuration read", || {
        status_in(&guard, CONFIGURATION).is_some_and(|s| s.state == "guarded")
    })
    .await;
    c.sim.faults().stall(GUARD_USER, RESOURCE);
    c.sim.faults().drop_watches();
    c.admin_request(
        http::Method::DELETE,
        &format!("/apis/admissionregistration.k8s.io/v1/{RESOURCE}/{CONFIGURATION}"),
        None,
    )
    .await;
    // The held watch is answered 503; the next one, 410: the watcher lists again.
    c.sim.faults().force_gone_next_watch();
    c.sim.faults().unstall(GUARD_USER, RESOURCE);
    until("the guard to forget the configuration", || {
        status_in(&guard, CONFIGURATION).is_some_and(|s| s.state == "not found")
    })
    .await;
    c.finish(guard).await;
}

/// `initguard status` reads each listed webhook's configuration itself: bypassed while the
/// owner is down, guarded once it is restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initguard_status_shows_a_webhook_bypassed_then_guarded() {
    let (c, guard, _) = bed(0, 0).await;
    let config = config(
        Mechanism::SchedulingGates,
        &policy_webhook(CONFIGURATION, ENTRY, "0s", Some("0s")),
    );
    let states = || async {
        initguard::status::gather(c.guard_client(), config.clone())
            .await
            .unwrap_or_else(|e| panic!("status: {e}"))
            .webhooks
            .into_iter()
            .map(|s| (s.webhook, s.state))
            .collect::<Vec<_>>()
    };
    let webhook = format!("validating/{CONFIGURATION}/{ENTRY}");
    until("the bypass", || bypassed(&stored(&c))).await;
    assert_eq!(states().await, [(webhook.clone(), "bypassed")]);
    set_available(&c, 1).await;
    until("the restore", || !bypassed(&stored(&c))).await;
    assert_eq!(states().await, [(webhook, "guarded")]);
    c.finish(guard).await;
}

/// Owners never seen, of every kind a webhook entry can have — a Deployment, a Lease and a pod
/// selector that match nothing, and the default owner, the entry's own `clientConfig.service`,
/// whose Service the guard may not read (a Service read and not found is down, DESIGN.md
/// "Missing Service"; one never read is unknown) and which has no EndpointSlice — are unknown,
/// not down: none of their entries is bypassed (grace 0 s), and `/status` and `/metrics` say
/// `unknown`. The witness, an entry whose owner goes down after the guard has read every
/// configuration, is bypassed: so the guard decided with the unseen ones known and did not act
/// on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_never_seen_are_unknown_and_never_bypassed() {
    const UNSEEN: &str = "unseen";
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    webhook_world(&c, CONFIGURATION, ENTRY, own_conditions(0)).await;
    set_available(&c, 1).await;
    // A Service owner's endpoints (EndpointSlices, or core/v1 Endpoints where the server
    // profile serves no slices), without the Services themselves.
    let mut rbac = webhook_policy(RESOURCE, &[CONFIGURATION, UNSEEN]);
    rbac.merge(kube_sim::Rbac::cluster_wide(vec![
        kube_sim::PolicyRule::new(
            &["discovery.k8s.io"],
            &["endpointslices"],
            &["list", "watch"],
        ),
        kube_sim::PolicyRule::new(&[""], &["endpoints"], &["list", "watch"]),
    ]));
    c.sim.enforce_rbac_policy(GUARD_USER, rbac);
    let entry = |name: &str, client_config: Value| {
        json!({
            "name": name,
            "clientConfig": client_config,
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["pods"] }],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    };
    let url = json!({ "url": "https://127.0.0.1:1/validate" });
    let owned = [
        (
            "deployment.unseen.example.com",
            "{ deployment: kube-system/nope }",
        ),
        ("lease.unseen.example.com", "{ lease: kube-system/nope }"),
        (
            "pods.unseen.example.com",
            "{ pods: { namespace: kube-system, selector: \"app=nope\" } }",
        ),
    ];
    let service = "service.unseen.example.com";
    let mut webhooks: Vec<Value> = owned.iter().map(|(n, _)| entry(n, url.clone())).collect();
    webhooks.push(entry(
        service,
        json!({ "service": { "namespace": "kube-system", "name": "nope", "path": "/validate" } }),
    ));
    post_configuration(&c, "Validating", UNSEEN, &Value::Array(webhooks)).await;
    let before = c
        .sim
        .get_object(RESOURCE, None, UNSEEN)
        .expect("the unseen configuration stored");

    let mut yaml = policy_webhook(CONFIGURATION, ENTRY, "0s", Some("0s"));
    for (name, owner) in owned {
        yaml.push_str(&format!(
            "  - name: validating/{UNSEEN}/{name}\n    owner: {owner}\n    ownerDownGrace: 0s\n"
        ));
    }
    yaml.push_str(&format!(
        "  - name: validating/{UNSEEN}/{service}\n    ownerDownGrace: 0s\n"
    ));
    // Not `c.guard`, which waits until every owner was read.
    let guard =
        initguard::guard::Guard::start(c.guard_client(), config(Mechanism::SchedulingGates, &yaml))
            .await
            .unwrap();
    until("the guard ready", || guard.shared.not_ready().is_empty()).await;
    let names: Vec<String> = owned
        .iter()
        .map(|(n, _)| *n)
        .chain([service])
        .map(|n| format!("validating/{UNSEEN}/{n}"))
        .collect();
    // Read: each unseen entry has its configuration's state (guarded), not `not found`.
    until("the unseen configuration read", || {
        let statuses = guard.shared.webhook_statuses();
        names.iter().all(|n| {
            statuses
                .iter()
                .any(|s| &s.webhook == n && s.state == "guarded")
        })
    })
    .await;

    set_available(&c, 0).await;
    until("the witness bypassed", || bypassed(&stored(&c))).await;
    let after = c
        .sim
        .get_object(RESOURCE, None, UNSEEN)
        .expect("the unseen configuration stored");
    assert_eq!(after, before, "an entry of an unseen owner was bypassed");
    assert!(
        c.guard_writes()
            .iter()
            .all(|w| w.name.as_deref() != Some(UNSEEN)),
        "{:#?}",
        c.guard_writes()
    );
    let (code, body) = http_get(guard.addr, "/status").await;
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let listed = status["webhooks"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), names.len() + 1, "{status:#}");
    for name in &names {
        let entry = listed
            .iter()
            .find(|w| w["webhook"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not in /status: {status:#}"));
        assert_eq!(entry["state"], "guarded", "{entry:#}");
        assert_eq!(entry["owner"]["state"], "unknown", "{entry:#}");
    }
    let witness = format!("validating/{CONFIGURATION}/{ENTRY}");
    let (_, text) = http_get(guard.addr, "/metrics").await;
    for name in &names {
        assert_eq!(
            metric_sum(
                &text,
                "initguard_owner_state",
                &[("initializer", name), ("state", "unknown")]
            ),
            1.0,
            "{name}"
        );
        assert_eq!(
            metric_sum(
                &text,
                "initguard_owner_state",
                &[("initializer", name), ("state", "down")]
            ),
            0.0,
            "{name}"
        );
        assert_eq!(
            metric_sum(&text, "initguard_webhook_bypassed", &[("webhook", name)]),
            0.0,
            "{name}"
        );
    }
    assert_eq!(
        metric_sum(
            &text,
            "initguard_webhook_bypassed",
            &[("webhook", &witness)]
        ),
        1.0
    );
    c.finish_refused(guard, |r| r.resource == "services").await;
}
