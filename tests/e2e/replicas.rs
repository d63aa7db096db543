//! More than one guard over time: two replicas with leader election and a failover, and a guard
//! restarted in the middle of a wait.

use std::time::{Duration, SystemTime};

use initguard::config::Mechanism;
use initguard::guard::Guard;
use kube_sim::RequestRecord;

use crate::harness::*;

both_mechanisms!(
    replicas_bypass_each_initializer_once_across_a_failover,
    restarted_guard_is_never_early_and_never_repeats,
);

/// The two replicas of the failover test, as distinct users so the server's log tells them apart.
const REPLICAS: [(&str, &str); 2] = [
    ("guard-a", "system:initguard-a"),
    ("guard-b", "system:initguard-b"),
];

/// Every PATCH on pod `name` by a guard (any of the guards' users) succeeded, there is at most
/// one per initializer (one when they were all due at once), and the object history shows each
/// of `initializers` removed by a guard exactly once.
fn assert_bypassed_once(c: &Cluster, name: &str, initializers: &[&str]) {
    let is_replica = |user: &str| user.starts_with(GUARD_USER);
    let patches: Vec<RequestRecord> = c
        .sim
        .requests()
        .into_iter()
        .filter(|r| {
            is_replica(&r.user)
                && r.verb == "patch"
                && r.resource == "pods"
                && r.name.as_deref() == Some(name)
        })
        .collect();
    assert!(
        (1..=initializers.len()).contains(&patches.len()),
        "{name}: {patches:#?}"
    );
    assert!(
        patches.iter().all(|p| p.status == 200),
        "{name}: {patches:#?}"
    );
    let pod = format!("default/{name}");
    let bypasses: Vec<Removal> = c
        .removals()
        .into_iter()
        .filter(|r| r.pod == pod && is_replica(&r.user))
        .collect();
    let mut removed: Vec<&str> = bypasses.iter().map(|b| b.initializer.as_str()).collect();
    removed.sort_unstable();
    let mut expected = initializers.to_vec();
    expected.sort_unstable();
    assert_eq!(removed, expected, "{name}: {bypasses:#?}");
    let uid = c.sim.get_object("pods", Some("default"), name).unwrap()["metadata"]["uid"].clone();
    assert!(
        bypasses.iter().all(|b| uid == b.uid.as_str()),
        "{name}: {bypasses:#?}"
    );
}

/// Requests of `user` on the leader lock (a Lease, or a ConfigMap before 1.12), in the
/// server's order.
fn lock_requests_by(c: &Cluster, user: &str) -> Vec<RequestRecord> {
    c.sim
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == user
                && matches!(r.resource.as_str(), "leases" | "configmaps")
                && r.name.as_deref() == Some("initguard")
        })
        .collect()
}

/// Successful writes of `user` to the leader lock, in the server's order.
fn lock_writes_by(c: &Cluster, user: &str) -> Vec<SystemTime> {
    lock_requests_by(c, user)
        .into_iter()
        .filter(|r| {
            matches!(r.verb.as_str(), "create" | "update" | "patch")
                && (200..300).contains(&r.status)
        })
        .map(|r| r.time)
        .collect()
}

/// (holderIdentity, transitions) of the leader lock as the server stores it: a Lease's spec,
/// or client-go's annotation on a ConfigMap before 1.12. Read with this test's own code.
fn lock_record(c: &Cluster) -> (String, i64) {
    if let Some(lease) = c.sim.get_object("leases", Some("kube-system"), "initguard") {
        let spec = &lease["spec"];
        return (
            spec["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            spec["leaseTransitions"].as_i64().unwrap_or_default(),
        );
    }
    let map = c
        .sim
        .get_object("configmaps", Some("kube-system"), "initguard")
        .expect("no leader lock");
    let text = map["metadata"]["annotations"]["control-plane.alpha.kubernetes.io/leader"]
        .as_str()
        .expect("a ConfigMap lock without client-go's annotation");
    let record: serde_json::Value = serde_json::from_str(text).expect("the lock's record");
    (
        record["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        record["leaderTransitions"].as_i64().unwrap_or_default(),
    )
}

/// Requests of `user` on the leader lock: a round (a GET, then at most one write) at most
/// every retry period, plus the first round and the release: no busy loop, whatever the load
/// (a slower machine only makes fewer rounds).
fn assert_lock_rounds_paced(c: &Cluster, user: &str, since: SystemTime, retry: Duration) {
    let elapsed = SystemTime::now().duration_since(since).unwrap_or_default();
    let requests = lock_requests_by(c, user).len();
    let rounds = (elapsed.as_secs_f64() / retry.as_secs_f64()).ceil() as usize + 2;
    assert!(
        requests <= 2 * rounds,
        "{user}: {requests} lock requests in {elapsed:?}, at most {} expected",
        2 * rounds
    );
}

/// Every pod PATCH by a replica came from the lock's holder at the time: the replica whose
/// successful lock write is the latest before the patch, and within a lease of that write.
fn assert_only_the_holder_patched(c: &Cluster, lease: Duration) {
    let mut lock: Vec<(SystemTime, &str)> = REPLICAS
        .iter()
        .flat_map(|(_, user)| lock_writes_by(c, user).into_iter().map(move |t| (t, *user)))
        .collect();
    lock.sort();
    for patch in c.sim.requests() {
        if !(REPLICAS.iter().any(|(_, u)| *u == patch.user)
            && patch.verb == "patch"
            && patch.resource == "pods")
        {
            continue;
        }
        let holder = lock.iter().rev().find(|(t, _)| *t <= patch.time);
        assert!(
            holder.is_some_and(|(t, user)| *user == patch.user && patch.time <= *t + lease),
            "{} patched {:?} at {:?} while the last lock write was {holder:?}",
            patch.user,
            patch.name,
            patch.time
        );
    }
}

/// Two replicas (lease 3 s), each its own user: only the leader writes, each initializer of
/// each pod is bypassed exactly once, and when the leader dies (no lease release) the other
/// takes the lock over only once the lease, as last renewed, has run out, then carries on.
/// Judged by the server's request log, by order and not by how fast anything happened.
async fn replicas_bypass_each_initializer_once_across_a_failover(mechanism: Mechanism) {
    const LEASE: Duration = Duration::from_secs(3);
    let c = Cluster::start(mechanism).await;
    let _sidecar = c.owner(SIDECAR, |o| o.alive = false).await;
    let _audit = c.owner(AUDIT, |o| o.alive = false).await;
    let config = config(
        mechanism,
        &format!(
            "leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: {}s }}\n\
             defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}{}",
            LEASE.as_secs(),
            owned(SIDECAR, "20s"),
            owned(AUDIT, "20s")
        ),
    );
    let started = SystemTime::now();
    let mut replicas: Vec<Option<Guard>> = Vec::new();
    for (identity, user) in REPLICAS {
        replicas.push(Some(c.guard_as(&config, identity, user).await));
    }
    for g in replicas.iter().flatten() {
        wait_owner(g, SIDECAR, false).await;
        wait_owner(g, AUDIT, false).await;
    }

    let first: Vec<String> = (0..4).map(|i| format!("first-{i}")).collect();
    for name in &first {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    until("the first pods bypassed", || {
        first.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;

    // Kill whoever leads now (leadership may have moved on a loaded machine: that is allowed).
    let leader = sole_leader(&replicas).await;
    let follower = 1 - leader;
    let (dead, heir) = (REPLICAS[leader].1, REPLICAS[follower].1);
    let (_, transitions_before) = lock_record(&c);
    replicas[leader].take().unwrap().kill();
    // Created while nobody leads: they wait for the new leader.
    let second: Vec<String> = (0..4).map(|i| format!("second-{i}")).collect();
    for name in &second {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    let survivor = replicas[follower].take().unwrap();
    until("the surviving replica to lead", || {
        survivor.shared.is_leader()
    })
    .await;
    until("the second pods bypassed", || {
        second.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;

    // It must not take a live lease over: its first lock write after the kill comes a whole
    // lease after the dead leader's last renewal (it counts from when it saw that renewal,
    // which is after the server recorded it; 50 ms for the log's own timing).
    // Read once the heir leads: a renewal in flight at the kill is in the log by now.
    let dead_last_renewal = *lock_writes_by(&c, dead)
        .last()
        .expect("the leader held the lock");
    let took_over = *lock_writes_by(&c, heir)
        .iter()
        .find(|t| **t > dead_last_renewal)
        .expect("the survivor wrote the lock");
    assert_not_before(
        "the survivor's takeover after the dead leader's last renewal",
        dead_last_renewal,
        took_over,
        LEASE - Duration::from_millis(50),
    );
    // The lock says so as client-go would write it: the heir holds it, one more transition.
    let (holder, transitions) = lock_record(&c);
    assert_eq!(holder, REPLICAS[follower].0, "the lock's holder");
    assert_eq!(
        transitions,
        transitions_before + 1,
        "leader transitions before the takeover and after"
    );
    for name in first.iter().chain(&second) {
        assert_bypassed_once(&c, name, &[SIDECAR, AUDIT]);
    }
    assert_only_the_holder_patched(&c, LEASE);
    c.finish(survivor).await;
    // Lease 3 s: a round every 400 ms.
    for (_, user) in REPLICAS {
        assert_lock_rounds_paced(&c, user, started, Duration::from_millis(400));
    }
}

/// A guard shut down and replaced in the middle of a wait: the new one bypasses no earlier than
/// the rule allows (gates: creationTimestamp + deadline; legacy: its own first observation +
/// deadline) and never a second time.
async fn restarted_guard_is_never_early_and_never_repeats(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _owner = c
        .owner(SIDECAR, |o| o.latency = Duration::from_secs(60))
        .await;
    let deadline = Duration::from_secs(3);
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}",
            owned(SIDECAR, "3s")
        ),
    );
    let first = c.guard(&config).await;
    wait_owner(&first, SIDECAR, true).await;
    // Bypassed by the first guard before the restart.
    c.pod("default", "early", true, &[SIDECAR, UNLISTED]).await;
    until("the early pod bypassed", || {
        !c.bypasses_of("default/early").is_empty()
    })
    .await;
    let names: Vec<String> = (0..2).map(|i| format!("restart-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR]).await;
    }
    // Part of the deadline passes under the first guard.
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.finish(first).await;
    let restarted = SystemTime::now();
    let second = c.guard(&config).await;

    for name in &names {
        let pod = format!("default/{name}");
        let bypass = eventually(format!("{pod} bypassed"), || c.bypasses_of(&pod).pop()).await;
        assert_eq!(bypass.reason.as_deref(), Some("deadline"), "{bypass:?}");
        let created = c.created("default", name);
        match mechanism {
            // Restart-safe: the wait counts from creation, across the restart.
            Mechanism::SchedulingGates => {
                assert!(bypass.time >= created.timestamp + deadline, "{bypass:?}");
                assert_not_before(
                    "bypass after the create",
                    created.committed,
                    bypass.time,
                    Duration::ZERO,
                );
            }
            // The head's clock restarts at the new guard's first observation: never early.
            Mechanism::Initializers => {
                assert_not_before("bypass after the restart", restarted, bypass.time, deadline)
            }
        }
    }
    // The early pod still waits on the unlisted initializer; the new guard leaves it alone.
    assert_eq!(c.pending("default", "early"), vec![UNLISTED.to_owned()]);
    assert_bypassed_once(&c, "early", &[SIDECAR]);
    for name in &names {
        assert_bypassed_once(&c, name, &[SIDECAR]);
    }
    c.finish(second).await;
}
