//! `InitializerWaiting`: a pod that has waited half its deadline (or whose initializer's owner
//! is down) is told why, once per pod and initializer, by the leader only, across a failover
//! and a restart; never a pod due at once, nor one whose wait ended while its explanation
//! was queued. Judged by the server's store and request log.

use std::time::Duration;

use initguard::config::Mechanism;
use initguard::guard::Guard;
use kube_sim::ChangeType;
use serde_json::json;

use crate::harness::*;

both_mechanisms!(waiting_pods_are_explained_once_across_a_failover_and_a_restart);

/// Two replicas, each its own user, so the server's log tells them apart.
const REPLICAS: [(&str, &str); 3] = [
    ("guard-a", "system:initguard-a"),
    ("guard-b", "system:initguard-b"),
    ("guard-c", "system:initguard-c"),
];

/// When the Event about pod `name` was created in the store.
fn written_at(c: &Cluster, name: &str) -> Vec<std::time::SystemTime> {
    c.sim
        .object_history()
        .into_iter()
        .filter(|h| {
            h.resource == "events"
                && h.change_type == ChangeType::Added
                && h.after.as_ref().is_some_and(|e| {
                    e["reason"] == "InitializerWaiting" && e["involvedObject"]["name"] == name
                })
        })
        .map(|h| h.time)
        .collect()
}

/// Event creations by `user` with this answer status.
fn event_creates(c: &Cluster, user: &str, status: u16) -> usize {
    c.sim
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == user && r.verb == "create" && r.resource == "events" && r.status == status
        })
        .count()
}

/// A healthy but slow owner, a 3 s deadline: a pod that did not opt in is told at half the deadline
/// that it never will be bypassed and how to opt in; one that did is told when it will be; one
/// whose initializer has a deadline of 0 is bypassed at once and told nothing. A new leader
/// after a failover, and a guard restarted after that, each offer the explanation again and
/// get 409: the store holds one Event per pod and initializer.
async fn waiting_pods_are_explained_once_across_a_failover_and_a_restart(mechanism: Mechanism) {
    const DEADLINE: Duration = Duration::from_secs(3);
    let c = Cluster::start(mechanism).await;
    // Up, but slow: nothing is removed while the test runs but by the guard.
    let slow = |o: &mut initguard_sim::controllers::GateOwnerOptions| {
        o.latency = Duration::from_secs(3600)
    };
    let _sidecar = c.owner(SIDECAR, slow).await;
    let _audit = c.owner(AUDIT, slow).await;
    let config = config(
        mechanism,
        &format!(
            "leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 2s }}\ninitializers:\n{}{}",
            owned(SIDECAR, &format!("{}s", DEADLINE.as_secs())),
            owned(AUDIT, "0s")
        ),
    );
    let first = c.guard_as(&config, REPLICAS[0].0, REPLICAS[0].1).await;
    wait_owner(&first, SIDECAR, true).await;
    until("the first replica to lead", || first.shared.is_leader()).await;
    c.pod("default", "plain", false, &[SIDECAR]).await;
    c.pod("default", "opted", true, &[SIDECAR]).await;
    c.pod("default", "zero", true, &[AUDIT]).await;
    for name in ["plain", "opted"] {
        eventually(format!("an InitializerWaiting Event about {name}"), || {
            (!c.waiting_events(name).is_empty()).then_some(())
        })
        .await;
    }
    until("the opted-in pods bypassed", || {
        c.pending("default", "opted").is_empty() && c.pending("default", "zero").is_empty()
    })
    .await;

    // Failover: a second replica, then the leader dies; the heir offers again.
    let mut replicas = vec![
        Some(first),
        Some(c.guard_as(&config, REPLICAS[1].0, REPLICAS[1].1).await),
    ];
    let leader = sole_leader(&replicas).await;
    replicas[leader].take().expect("the leader").kill();
    let heir = replicas[1 - leader].take().expect("the standby");
    let heir_user = REPLICAS[1 - leader].1;
    until("the standby to lead", || heir.shared.is_leader()).await;
    until("the new leader to offer the explanation again", || {
        event_creates(&c, heir_user, 409) >= 1
    })
    .await;
    c.finish(heir).await;

    // Restart: a new guard, the same answer.
    let restarted = c.guard_as(&config, REPLICAS[2].0, REPLICAS[2].1).await;
    until("the restarted guard to offer the explanation again", || {
        event_creates(&c, REPLICAS[2].1, 409) >= 1
    })
    .await;
    c.finish(restarted).await;

    for (name, says) in [
        (
            "plain",
            "has not opted in; add the label initguard.io/bypass",
        ),
        ("opted", "(deadline) unless it is removed first"),
    ] {
        let events = c.waiting_events(name);
        assert_eq!(events.len(), 1, "{name}: {events:#?}");
        let e = &events[0];
        assert_eq!(e["type"], "Normal", "{e:#}");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(SIDECAR) && message.contains(says) && message.contains(" up for "),
            "{name}: {message}"
        );
        // Never early: not before the pod had waited half its deadline, counted from its
        // creationTimestamp (whole seconds, as the rule counts a gate's wait; a legacy wait
        // starts later, when the guard first sees the head).
        let created = c.created("default", name).timestamp;
        for at in written_at(&c, name) {
            assert!(
                at >= created + DEADLINE / 2,
                "{name}: explained {:?} after its creation",
                at.duration_since(created)
            );
        }
    }
    // A pod due at once is bypassed, not explained; no replica even tried.
    assert!(c.waiting_events("zero").is_empty());
    // Only the leaders wrote: the plain pod's one Event, and the opted one's.
    let written: usize = REPLICAS
        .iter()
        .map(|(_, user)| event_creates(&c, user, 201))
        .sum();
    let bypass_events = ["opted", "zero"]
        .iter()
        .map(|n| c.bypass_events(n).len())
        .sum::<usize>();
    assert_eq!(
        written,
        2 + bypass_events,
        "Event creations by the replicas"
    );
}

/// The message follows the initializer's `optIn` mode: with `namespaces` a pod's own label is
/// not offered as the way in, with `none` nothing is; an owner down is explained at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_messages_follow_each_initializers_opt_in_mode() {
    let mechanism = Mechanism::SchedulingGates;
    let c = Cluster::start(mechanism).await;
    let _sidecar = c.owner(SIDECAR, |o| o.alive = false).await;
    let _audit = c.owner(AUDIT, |o| o.alive = false).await;
    let config = config(
        mechanism,
        &format!(
            "initializers:\n  - {{ name: {SIDECAR}, deadline: 1h, optIn: namespaces, owner: {{ \
             deployment: kube-system/{} }} }}\n  - {{ name: {AUDIT}, deadline: 1h, optIn: none, \
             owner: {{ deployment: kube-system/{} }} }}\n",
            initguard_sim::controllers::dns_name(SIDECAR),
            initguard_sim::controllers::dns_name(AUDIT)
        ),
    );
    let guard: Guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, false).await;
    wait_owner(&guard, AUDIT, false).await;
    c.pod("default", "labelled", true, &[SIDECAR]).await;
    c.pod("default", "none", true, &[AUDIT]).await;
    for name in ["labelled", "none"] {
        eventually(format!("an InitializerWaiting Event about {name}"), || {
            (!c.waiting_events(name).is_empty()).then_some(())
        })
        .await;
    }
    c.finish(guard).await;
    let message = |name: &str| {
        let events = c.waiting_events(name);
        assert_eq!(events.len(), 1, "{name}: {events:#?}");
        events[0]["message"].as_str().unwrap_or_default().to_owned()
    };
    let labelled = message("labelled");
    assert!(
        labelled.contains("only pods of opted-in namespaces qualify")
            && !labelled.contains("add the label")
            && labelled.contains(" down for "),
        "{labelled}"
    );
    let none = message("none");
    assert!(
        none.ends_with("initguard never bypasses it (optIn: none)") && none.contains(AUDIT),
        "{none}"
    );
    // Neither was bypassed: the Events explain, they do not act.
    assert!(c.guard_pod_patches("labelled").is_empty() && c.guard_pod_patches("none").is_empty());
}

/// An explanation queued for a pod that stops waiting on that initializer before its turn is
/// dropped, also while the pod still waits on another one. Explanations come last, once no
/// bypass is in flight: the opted-in `blocker`'s bypass is held by the server (its writes
/// delayed) while three pods that did not opt in are decided and told, in order, and the
/// owner's work (the admin, here) removes `second`'s gate. The witness: the third pod's
/// Event, queued after the second's; the shutdown waits for Event writes in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explanation_of_a_wait_that_ended_while_queued_is_dropped() {
    let mechanism = Mechanism::SchedulingGates;
    let c = Cluster::start(mechanism).await;
    let _sidecar = c.owner(SIDECAR, |o| o.alive = false).await;
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 0s }}\ninitializers:\n{}  - {{ name: {AUDIT}, deadline: 1h }}\n",
            owned(SIDECAR, "1h")
        ),
    );
    let guard: Guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, false).await;
    c.sim
        .faults()
        .delay_writes(GUARD_USER, "pods", Duration::from_secs(3600));
    c.pod("default", "blocker", true, &[SIDECAR]).await;
    until("the blocker's bypass held by the server", || {
        c.sim.faults().delayed_writes() >= 1
    })
    .await;
    c.pod("default", "first", false, &[SIDECAR]).await;
    c.pod("default", "second", false, &[SIDECAR, AUDIT]).await;
    c.pod("default", "third", false, &[SIDECAR]).await;
    // The guard records and decides each pod in one step, in the watch's order: once it
    // tracks the third, the second's explanation is queued.
    let tracked = |name: &str| {
        guard
            .shared
            .tracker()
            .get(&format!("default/{name}"))
            .map(|p| p.pending.clone())
    };
    until("the guard to track the third pod", || {
        tracked("third").is_some()
    })
    .await;
    c.merge_patch_pod(
        "default",
        "second",
        &json!({ "spec": { "schedulingGates": [{ "name": AUDIT }] } }),
    )
    .await;
    until("the guard to see the second pod's gate gone", || {
        tracked("second").is_some_and(|p| p == [AUDIT])
    })
    .await;
    c.sim.faults().clear();
    until("the third pod's explanation", || {
        !c.waiting_events("third").is_empty()
    })
    .await;
    c.finish(guard).await;
    // The premise: the explanations waited until after the gate was removed.
    let removed = c
        .sim
        .object_history()
        .into_iter()
        .find(|h| {
            h.resource == "pods"
                && h.name == "second"
                && h.after
                    .as_ref()
                    .is_some_and(|p| p["spec"]["schedulingGates"] == json!([{ "name": AUDIT }]))
        })
        .map(|h| h.time)
        .expect("the gate's removal in the store's record");
    let first = written_at(&c, "first");
    assert!(
        first.len() == 1 && first[0] > removed,
        "the first explanation, {first:?}, not after the removal at {removed:?}"
    );
    assert_eq!(
        c.waiting_events("second"),
        Vec::<serde_json::Value>::new(),
        "the ended wait was explained"
    );
}
