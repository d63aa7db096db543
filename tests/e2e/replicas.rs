//! More than one guard over time: two replicas with leader election and a failover, and a guard
//! restarted in the middle of a wait.

use std::time::{Duration, SystemTime};

use initguard::config::Mechanism;
use initguard::run::Guard;

use crate::harness::*;

both_mechanisms!(
    replicas_bypass_each_initializer_once_across_a_failover,
    restarted_guard_is_never_early_and_never_repeats,
);

/// Every PATCH by the guard's user on pod `name` succeeded, and there are `n` of them; the
/// object history shows each of `initializers` removed by the guard exactly once.
fn assert_bypassed_once(c: &Cluster, name: &str, initializers: &[&str]) {
    let patches = c.guard_pod_patches(name);
    assert_eq!(patches.len(), initializers.len(), "{name}: {patches:#?}");
    assert!(
        patches.iter().all(|p| p.status == 200),
        "{name}: {patches:#?}"
    );
    let bypasses = c.bypasses_of(&format!("default/{name}"));
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

/// Two replicas (lease 3 s): only the leader writes, each initializer of each pod is bypassed
/// exactly once, and when the leader dies (no lease release) the other takes over within the
/// lease duration plus a retry period and carries on.
async fn replicas_bypass_each_initializer_once_across_a_failover(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _sidecar = c.owner(SIDECAR, |o| o.alive = false).await;
    let _audit = c.owner(AUDIT, |o| o.alive = false).await;
    let config = config(
        mechanism,
        &format!(
            "leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 3s }}\n\
             defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}{}",
            owned(SIDECAR, "20s"),
            owned(AUDIT, "20s")
        ),
    );
    let mut replicas: Vec<Option<Guard>> = vec![
        Some(c.guard_named(&config, "guard-a").await),
        Some(c.guard_named(&config, "guard-b").await),
    ];
    let leader = eventually(Duration::from_secs(5), "a leader", || {
        let leading: Vec<usize> = replicas
            .iter()
            .enumerate()
            .filter(|(_, g)| g.as_ref().is_some_and(|g| g.shared.is_leader()))
            .map(|(i, _)| i)
            .collect();
        (leading.len() == 1).then(|| leading[0])
    })
    .await;
    let follower = 1 - leader;
    for g in replicas.iter().flatten() {
        wait_owner(g, SIDECAR, false).await;
        wait_owner(g, AUDIT, false).await;
    }

    let first: Vec<String> = (0..4).map(|i| format!("first-{i}")).collect();
    for name in &first {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    until(Duration::from_secs(5), "the first pods bypassed", || {
        first.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    assert!(!replicas[follower].as_ref().unwrap().shared.is_leader());

    let killed = SystemTime::now();
    replicas[leader].take().unwrap().kill();
    // Created while nobody leads: they wait for the new leader.
    let second: Vec<String> = (0..4).map(|i| format!("second-{i}")).collect();
    for name in &second {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    let survivor = replicas[follower].take().unwrap();
    until(
        Duration::from_secs(5),
        "the surviving replica to lead",
        || survivor.shared.is_leader(),
    )
    .await;
    let took_over = since(killed, SystemTime::now());
    // It must not take a live lease over: the lease (3 s) runs out first, counted from the
    // last renewal it saw (at most one 400 ms renew period before the kill).
    assert!(
        took_over >= Duration::from_secs(2),
        "took over after {took_over:?}"
    );
    until(Duration::from_secs(5), "the second pods bypassed", || {
        second.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;

    for name in first.iter().chain(&second) {
        assert_bypassed_once(&c, name, &[SIDECAR, AUDIT]);
    }
    c.finish(survivor).await;
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
    until(Duration::from_secs(6), "the early pod bypassed", || {
        !c.bypasses_of("default/early").is_empty()
    })
    .await;
    let names: Vec<String> = (0..2).map(|i| format!("restart-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR]).await;
    }
    // Part of the deadline passes under the first guard.
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.shutdown().await;
    let restarted = SystemTime::now();
    let second = c.guard(&config).await;

    for name in &names {
        let pod = format!("default/{name}");
        let bypass = eventually(Duration::from_secs(30), format!("{pod} bypassed"), || {
            c.bypasses_of(&pod).pop()
        })
        .await;
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
