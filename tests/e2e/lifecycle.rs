//! Shutdown: every writer drains before the Lease goes, and a write that may still be committed
//! keeps the Lease from being handed back. Judged from the server's record of commits.

use std::time::Duration;

use initguard::config::Mechanism;
use kube_sim::ObjectChange;
use serde_json::Value;

use crate::harness::*;

const CONFIGURATION: &str = "policy";
const ENTRY: &str = "check.policy.example.com";
const IDENTITY: &str = "drainer";
/// The guard's writes on webhook configurations are committed this long after they arrive.
const HELD: &str = "validatingwebhookconfigurations";

/// A cluster with a listed webhook whose owner (a Deployment without available replicas) is
/// down, and a guard (leader election on, 15 s lease: 2.5 s write timeout) allowed to patch
/// that one configuration. Each write of the guard on it is held `delay` by the server.
async fn bed(delay: Duration) -> (Cluster, initguard::guard::Guard) {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    webhook_world(&c, CONFIGURATION, ENTRY, Vec::new()).await;
    c.sim.faults().delay_writes(GUARD_USER, HELD, delay);
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 15s }}\n{}",
            policy_webhook(CONFIGURATION, ENTRY, "1s", None)
        ),
    );
    let guard = c.guard_named(&config, IDENTITY).await;
    (c, guard)
}

/// Waits until the server holds the guard's first PATCH of the configuration.
async fn patch_held(c: &Cluster) {
    until("the guard's webhook PATCH to reach the server", || {
        c.sim.faults().delayed_writes() >= 1
    })
    .await;
}

/// Commits of the guard's user, in commit order.
fn guard_commits(c: &Cluster) -> Vec<ObjectChange> {
    c.sim
        .object_history()
        .into_iter()
        .filter(|ch| ch.user == GUARD_USER)
        .collect()
}

/// The lock's holder after `change` (a Lease commit).
fn holder(change: &ObjectChange) -> String {
    let after = change.after.as_deref().unwrap_or(&Value::Null);
    after["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn describe(commits: &[ObjectChange]) -> Vec<String> {
    commits
        .iter()
        .map(|ch| {
            format!(
                "{} {} {}/{}",
                ch.resource_version,
                ch.resource,
                ch.namespace.as_deref().unwrap_or(""),
                ch.name
            )
        })
        .collect()
}

/// A webhook PATCH the server holds for a second when shutdown begins is committed, and only
/// then is the Lease handed back: no write of the guard is committed after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_released_only_after_a_held_webhook_patch_is_committed() {
    let (c, guard) = bed(Duration::from_secs(1)).await;
    patch_held(&c).await;
    c.finish(guard).await;

    let commits = guard_commits(&c);
    let listed = describe(&commits);
    let patch = commits
        .iter()
        .position(|ch| ch.resource == HELD && ch.name == CONFIGURATION)
        .unwrap_or_else(|| panic!("the held PATCH was never committed: {listed:#?}"));
    let release = commits
        .iter()
        .position(|ch| ch.resource == "leases" && holder(ch).is_empty())
        .unwrap_or_else(|| panic!("the Lease was not handed back: {listed:#?}"));
    assert!(
        patch < release,
        "the PATCH was committed after the release: {listed:#?}"
    );
    assert_eq!(
        release,
        commits.len() - 1,
        "a write of the guard was committed after the release: {listed:#?}"
    );
    // The PATCH was the bypass itself, which the guard saw answered.
    let entry = c
        .sim
        .get_object(HELD, None, CONFIGURATION)
        .expect("the configuration");
    assert!(
        entry["metadata"]["annotations"]["initguard.io/bypassed-webhooks"].is_string(),
        "{entry:#}"
    );
}

/// A webhook PATCH held longer than the write timeout gets no answer before shutdown ends;
/// the server may (and here does) commit it later, so the guard leaves the Lease to expire
/// rather than hand it to a successor that would write beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_without_answer_leaves_the_lease_to_expire() {
    let (c, guard) = bed(Duration::from_secs(4)).await;
    patch_held(&c).await;
    c.finish(guard).await;
    until("the held PATCH to be committed", || {
        c.sim
            .object_history()
            .iter()
            .any(|ch| ch.user == GUARD_USER && ch.resource == HELD)
    })
    .await;

    let commits = guard_commits(&c);
    let listed = describe(&commits);
    let leases: Vec<&ObjectChange> = commits
        .iter()
        .filter(|ch| ch.resource == "leases")
        .collect();
    assert!(
        !leases.is_empty(),
        "the guard never took the Lease: {listed:#?}"
    );
    assert!(
        leases.iter().all(|ch| holder(ch) == IDENTITY),
        "the Lease was handed back with a write in flight: {listed:#?}"
    );
    let lease = c
        .sim
        .get_object("leases", Some("kube-system"), "initguard")
        .expect("the Lease");
    assert_eq!(lease["spec"]["holderIdentity"], IDENTITY, "{lease:#}");
}

/// Discovery is read once for the whole guard: the owners (two Deployments), the election (a
/// Lease lock) and the webhook guard all wait on the same `/apis` read. Counted in the server's
/// request log once every one of them has acted on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_is_read_once_for_every_reader() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    webhook_world(&c, CONFIGURATION, ENTRY, Vec::new()).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 15s }}\n\
             initializers:\n{}{}",
            owned(SIDECAR, "1h"),
            policy_webhook(CONFIGURATION, ENTRY, "1h", None)
        ),
    );
    let guard = c.guard_named(&config, IDENTITY).await;
    let by_guard = |verb: &str, resource: &str| {
        c.sim
            .requests()
            .iter()
            .any(|r| r.user == GUARD_USER && r.verb == verb && r.resource == resource)
    };
    // Each reader has used what discovery told it: the Lease lock is written, the
    // configuration and both owners' Deployments are watched.
    until(
        "the election, the webhook guard and the owners to start",
        || {
            by_guard("create", "leases")
                && by_guard("watch", "validatingwebhookconfigurations")
                && c.sim
                    .requests()
                    .iter()
                    .filter(|r| {
                        r.user == GUARD_USER && r.verb == "watch" && r.resource == "deployments"
                    })
                    .count()
                    >= 2
        },
    )
    .await;
    c.finish(guard).await;
    let reads: Vec<String> = c
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.user == GUARD_USER && r.path == "/apis")
        .map(|r| format!("{} {} {}", r.verb, r.path, r.status))
        .collect();
    assert_eq!(reads.len(), 1, "discovery reads by the guard: {reads:?}");
}

/// The webhook guard keeps asking for discovery while the API server cannot answer it (as a
/// static pod started before kube-apiserver), says so in `/readyz` meanwhile, and guards the
/// configuration once it can: judged by its watch of the configuration in the server's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_guard_waits_for_discovery_instead_of_giving_up() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    webhook_world(&c, CONFIGURATION, ENTRY, Vec::new()).await;
    let config = config(
        Mechanism::SchedulingGates,
        &policy_webhook(CONFIGURATION, ENTRY, "1h", None),
    );
    c.sim.faults().partition_user(GUARD_USER);
    let guard = initguard::guard::Guard::start_with(
        c.guard_client(),
        config.clone(),
        IDENTITY.to_owned(),
        initguard::guard::STALL_AFTER,
    )
    .await
    .expect("the guard starts");
    eventually_async("/readyz to name the webhook guard", || async {
        let (status, body) = http_get(guard.addr, "/readyz").await;
        (status == 503 && body.contains("webhook guard")).then_some(())
    })
    .await;
    c.sim.faults().heal_user(GUARD_USER);
    until("the guard to watch the configuration", || {
        c.sim.requests().iter().any(|r| {
            r.user == GUARD_USER
                && r.verb == "watch"
                && r.resource == "validatingwebhookconfigurations"
        })
    })
    .await;
    wait_ready(&guard).await;
    c.finish(guard).await;
}
