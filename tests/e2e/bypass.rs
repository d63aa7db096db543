//! What gets bypassed, when and why: healthy, slow and dead owners, opt-in, and pods waiting on
//! several initializers.

use std::time::{Duration, SystemTime};

use initguard::config::Mechanism;

use crate::harness::*;

both_mechanisms!(
    healthy_owner_is_never_bypassed,
    slow_owner_is_bypassed_at_the_deadline,
    dead_owner_is_bypassed_after_the_grace,
    only_opted_in_pods_are_touched,
    only_the_failed_initializer_is_removed,
    every_failed_initializer_goes_in_one_patch,
    initializers_due_at_different_times_are_removed_in_turn,
    events_off_writes_no_event,
);

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A fast owner initializes every pod well before the deadline: the guard writes nothing at all
/// (no patch, no Event).
async fn healthy_owner_is_never_bypassed(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _owner = c.owner(SIDECAR, |_| {}).await;
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}  - {{ name: {AUDIT}, deadline: 1s }}\n",
            owned(SIDECAR, "1s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, true).await;
    let names: Vec<String> = (0..5).map(|i| format!("fast-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR]).await;
    }
    until("the owner to initialize every pod", || {
        names.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    // The witness, created after every fast pod with the same deadline and no owner, is
    // bypassed: the guard's clock passed every fast pod's deadline, and it wrote nothing else.
    c.pod("default", "witness", true, &[AUDIT]).await;
    until("the witness bypassed at its deadline", || {
        !c.bypasses_of("default/witness").is_empty()
    })
    .await;

    assert_eq!(
        c.guard_writes_besides("witness"),
        vec![],
        "the guard wrote to the API"
    );
    let removals = c.removals();
    let removals: Vec<_> = removals
        .into_iter()
        .filter(|r| r.initializer == SIDECAR)
        .collect();
    assert_eq!(removals.len(), names.len(), "{removals:?}");
    for r in &removals {
        assert_eq!(r.user, owner_user(SIDECAR), "{r:?}");
        assert_eq!(r.reason, None, "{r:?}");
    }
    let metrics = guard.shared.metrics.render().unwrap();
    assert_eq!(
        metric_sum(
            &metrics,
            "initguard_bypasses_total",
            &[("initializer", SIDECAR)]
        ),
        0.0
    );
    c.finish(guard).await;
}

/// An owner that is up but slower than the deadline: each opted-in pod loses exactly that
/// initializer at the deadline, recorded as `deadline`; the unlisted one stays.
async fn slow_owner_is_bypassed_at_the_deadline(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _owner = c
        .owner(SIDECAR, |o| o.latency = Duration::from_secs(5))
        .await;
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}  - {{ name: {AUDIT}, deadline: 1s }}\n",
            owned(SIDECAR, "1s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, true).await;
    let names: Vec<String> = (0..3).map(|i| format!("slow-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR, UNLISTED]).await;
    }
    let deadline = Duration::from_secs(1);
    for name in &names {
        let pod = format!("default/{name}");
        let bypass = eventually(format!("{pod} bypassed"), || c.bypasses_of(&pod).pop()).await;
        assert_eq!(bypass.initializer, SIDECAR);
        assert_eq!(bypass.reason.as_deref(), Some("deadline"), "{bypass:?}");
        let created = c.created("default", name);
        match mechanism {
            // The wait counts from creationTimestamp (whole seconds, so up to 1 s before the
            // commit).
            Mechanism::SchedulingGates => {
                assert!(
                    bypass.time >= created.timestamp + deadline,
                    "{bypass:?} {created:?}"
                );
                assert_not_before(
                    "bypass after the create",
                    created.committed,
                    bypass.time,
                    Duration::ZERO,
                );
            }
            // The head's clock starts when the guard first sees it, after the commit.
            Mechanism::Initializers => assert_not_before(
                "bypass after the create",
                created.committed,
                bypass.time,
                deadline,
            ),
        }
    }
    // Nothing else happens to these pods: the unlisted initializer is never the guard's. The
    // witness, created after every bypass above and due a deadline later, is bypassed first.
    c.pod("default", "witness", true, &[AUDIT]).await;
    until("the witness bypassed at its deadline", || {
        !c.bypasses_of("default/witness").is_empty()
    })
    .await;
    for name in &names {
        assert_eq!(c.pending("default", name), vec![UNLISTED.to_owned()]);
        let patches = c.guard_pod_patches(name);
        assert_eq!(patches.len(), 1, "{patches:?}");
        assert_eq!(c.bypasses_of(&format!("default/{name}")).len(), 1);
        let events = c.bypass_events(name);
        assert_eq!(events.len(), 1, "{events:#?}");
        assert_eq!(events[0]["type"], "Warning");
        let message = events[0]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(SIDECAR) && message.contains("deadline"),
            "{message}"
        );
    }
    c.finish(guard).await;
}

/// Killed owner: the pods waiting on it are bypassed once it has been down for
/// `ownerDownGrace`, long before the deadline, and so are pods created while it is down. Once
/// it is back, it initializes new pods itself.
async fn dead_owner_is_bypassed_after_the_grace(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let owner = c
        .owner(SIDECAR, |o| o.latency = Duration::from_secs(60))
        .await;
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}",
            owned(SIDECAR, "30s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, true).await;
    let grace = millis(500);

    for i in 0..2 {
        c.pod("default", &format!("before-{i}"), true, &[SIDECAR])
            .await;
    }
    until("the guard to track both pods", || {
        guard.shared.tracker().len() == 2
    })
    .await;
    owner.set_latency(Duration::ZERO);
    let killed = SystemTime::now();
    owner.kill();
    for i in 0..2 {
        let pod = format!("default/before-{i}");
        let bypass = eventually(format!("{pod} bypassed"), || c.bypasses_of(&pod).pop()).await;
        assert_eq!(bypass.reason.as_deref(), Some("owner_down"), "{bypass:?}");
        assert_not_before("bypass after the kill", killed, bypass.time, grace);
    }

    for i in 0..2 {
        let name = format!("during-{i}");
        c.pod("default", &name, true, &[SIDECAR]).await;
        let pod = format!("default/{name}");
        let bypass = eventually(format!("{pod} bypassed"), || c.bypasses_of(&pod).pop()).await;
        assert_eq!(bypass.reason.as_deref(), Some("owner_down"), "{bypass:?}");
        // owner_down, not the deadline: it came while the owner was down, after the create.
        assert_not_before(
            "bypass after the create",
            c.created("default", &name).committed,
            bypass.time,
            Duration::ZERO,
        );
    }

    owner.revive();
    wait_owner(&guard, SIDECAR, true).await;
    let after: Vec<String> = (0..2).map(|i| format!("after-{i}")).collect();
    for name in &after {
        c.pod("default", name, true, &[SIDECAR]).await;
    }
    until("the revived owner to initialize new pods", || {
        after.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    for name in &after {
        assert_eq!(c.guard_pod_patches(name), vec![]);
        let removals: Vec<_> = c
            .removals()
            .into_iter()
            .filter(|r| r.pod == format!("default/{name}"))
            .collect();
        assert_eq!(removals.len(), 1, "{removals:?}");
        assert_eq!(removals[0].user, owner_user(SIDECAR));
    }
    let bypassed = c
        .removals()
        .into_iter()
        .filter(|r| r.user == GUARD_USER)
        .count();
    assert_eq!(bypassed, 4, "bypasses: before-0/1 and during-0/1 only");
    c.finish(guard).await;
}

/// Pods without the opt-in label are never written, whatever happens to their owner; pods in
/// an opted-in namespace count as labeled.
async fn only_opted_in_pods_are_touched(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    c.namespace("batch").await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let config = config(
        mechanism,
        &format!(
            "optIn: {{ label: {OPT_IN}, namespaces: [batch] }}\n\
             defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}  - {{ name: {AUDIT}, deadline: 1s }}\n",
            owned(SIDECAR, "1s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, false).await;
    for i in 0..3 {
        c.pod("default", &format!("plain-{i}"), false, &[SIDECAR])
            .await;
    }
    c.pod("batch", "in-namespace", false, &[SIDECAR]).await;
    c.pod("default", "labeled", true, &[SIDECAR]).await;

    for pod in ["batch/in-namespace", "default/labeled"] {
        let bypass = eventually(format!("{pod} bypassed"), || c.bypasses_of(pod).pop()).await;
        // Either rule may come first: the owner went down just before, and creationTimestamp
        // has whole seconds, so a pod may count as 1 s old at once.
        assert!(
            matches!(bypass.reason.as_deref(), Some("owner_down" | "deadline")),
            "{bypass:?}"
        );
    }
    // Owner down and deadline both past for the plain pods too: the witness, created after
    // them with the same deadline and no owner, is bypassed at its deadline.
    c.pod("default", "witness", true, &[AUDIT]).await;
    until("the witness bypassed at its deadline", || {
        !c.bypasses_of("default/witness").is_empty()
    })
    .await;
    for i in 0..3 {
        let name = format!("plain-{i}");
        assert_eq!(c.pending("default", &name), vec![SIDECAR.to_owned()]);
        let touched: Vec<_> = c
            .guard_writes()
            .into_iter()
            .filter(|r| r.name.as_deref() == Some(name.as_str()))
            .collect();
        assert_eq!(touched, vec![], "the guard wrote to unlabeled {name}");
    }
    let mut written: Vec<_> = c
        .guard_writes()
        .into_iter()
        .filter(|r| r.resource == "pods")
        .filter_map(|r| r.name)
        .collect();
    written.sort();
    assert_eq!(written, vec!["in-namespace", "labeled", "witness"]);
    // Still counted as waiting, as not opted in (the gauges are refreshed on scrape).
    let (_, text) = http_get(guard.addr, "/metrics").await;
    let waiting = [("initializer", SIDECAR), ("opted_in", "false")];
    assert_eq!(
        metric_sum(&text, "initguard_waiting_pods", &waiting),
        3.0,
        "{text}"
    );
    c.finish(guard).await;
}

/// One pod waits on two initializers whose owners are one healthy (slowish) and one dead: only
/// the dead one's initializer is removed by the guard. Legacy: the healthy head is left to its
/// owner, and the failed one is bypassed once it becomes the head.
async fn only_the_failed_initializer_is_removed(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _healthy = c
        .owner(SIDECAR, |o| o.latency = Duration::from_secs(1))
        .await;
    let _dead = c.owner(AUDIT, |o| o.alive = false).await;
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}{}",
            owned(SIDECAR, "20s"),
            owned(AUDIT, "20s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, true).await;
    wait_owner(&guard, AUDIT, false).await;
    let names: Vec<String> = (0..3).map(|i| format!("two-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    until("every pod initialized", || {
        names.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    for name in &names {
        let pod = format!("default/{name}");
        let removals: Vec<_> = c.removals().into_iter().filter(|r| r.pod == pod).collect();
        assert_eq!(removals.len(), 2, "{removals:?}");
        let by = |initializer: &str| {
            removals
                .iter()
                .find(|r| r.initializer == initializer)
                .unwrap_or_else(|| panic!("{initializer} never removed from {pod}"))
                .clone()
        };
        let (healthy, failed) = (by(SIDECAR), by(AUDIT));
        assert_eq!(healthy.user, owner_user(SIDECAR), "{healthy:?}");
        assert_eq!(failed.user, GUARD_USER, "{failed:?}");
        assert_eq!(failed.reason.as_deref(), Some("owner_down"), "{failed:?}");
        match mechanism {
            // Gates are independent: the dead owner's is bypassed without waiting for the other.
            Mechanism::SchedulingGates => assert!(failed.time < healthy.time),
            // Only the head is in progress: the failed one waits for the healthy head.
            Mechanism::Initializers => assert!(failed.time > healthy.time),
        }
        assert_eq!(c.guard_pod_patches(name).len(), 1);
    }
    c.finish(guard).await;
}

/// Both owners of a pod's two initializers are dead past their grace: one PATCH per pod removes
/// both (legacy: the head, and the entry behind it, due the moment it becomes the head), each
/// recorded once with its reason, and one Event per patch names both.
async fn every_failed_initializer_goes_in_one_patch(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _sidecar = c.owner(SIDECAR, |o| o.alive = false).await;
    let _audit = c.owner(AUDIT, |o| o.alive = false).await;
    let grace = millis(500);
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}{}",
            owned(SIDECAR, "20s"),
            owned(AUDIT, "20s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, false).await;
    wait_owner(&guard, AUDIT, false).await;
    // Both were down when seen so, so both graces are over after one more grace: the pods
    // below are decided with both due (waiting longer only makes that more certain).
    tokio::time::sleep(grace + millis(100)).await;
    let names: Vec<String> = (0..4).map(|i| format!("both-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    until("both initializers bypassed on every pod", || {
        names.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    for name in &names {
        let bypasses = c.bypasses_of(&format!("default/{name}"));
        let removed: Vec<&str> = bypasses.iter().map(|b| b.initializer.as_str()).collect();
        assert_eq!(removed, vec![SIDECAR, AUDIT], "{bypasses:#?}");
        assert!(
            bypasses
                .iter()
                .all(|b| b.reason.as_deref() == Some("owner_down")),
            "{bypasses:#?}"
        );
    }
    // One Event per patch, naming both initializers. Events are written after the burst, so
    // wait for them; then stopping the guard (which writes what it still holds before it
    // exits) shows there is no second one.
    for name in &names {
        eventually(format!("an InitializerBypassed Event about {name}"), || {
            (!c.bypass_events(name).is_empty()).then_some(())
        })
        .await;
    }
    let metrics = guard.shared.metrics.clone();
    c.finish(guard).await;
    // The guard's own count agrees with the server's store.
    let written = metrics
        .events_total
        .with_label_values(&["InitializerBypassed", "written"])
        .get();
    assert_eq!(written, names.len() as u64);
    for name in &names {
        // The server records a request just before it answers, after the change it made is
        // already on the watch: counted once the guard, and so every answer, is done.
        let patches = c.guard_pod_patches(name);
        assert_eq!(patches.len(), 1, "one patch per pod: {patches:#?}");
        let events = c.bypass_events(name);
        assert_eq!(events.len(), 1, "{events:#?}");
        let e = &events[0];
        assert_eq!(e["type"], "Warning", "{e:#}");
        let message = e["message"].as_str().unwrap_or_default();
        for initializer in [SIDECAR, AUDIT] {
            assert!(
                message.contains(&format!("{initializer} (owner_down) after waiting")),
                "{e:#}"
            );
        }
        assert!(message.contains("2 initializers in one patch"), "{e:#}");
    }
    // Written as core/v1 Events, which every supported version serves.
    let groups: Vec<String> = c
        .guard_writes()
        .into_iter()
        .filter(|r| r.resource == "events")
        .map(|r| r.api_group)
        .collect();
    assert_eq!(groups, vec![String::new(); names.len()]);
}

/// During a burst the write slots go to removing initializers: Events wait until no bypass is
/// queued or in flight, and patches and Events together stay within `maxInFlight`. Six
/// opted-in pods are all past their deadline when a guard with `maxInFlight: 2` starts and
/// the server holds each of its requests 300 ms. By the server's log: every bypass PATCH
/// arrives before the first `InitializerBypassed` Event, and a write arrives only once one of
/// the two before it can have been answered (300 ms after the earlier one arrived).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_patched_before_any_event_is_written() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let names: Vec<String> = (0..6).map(|i| format!("burst-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR]).await;
    }
    let last = c.created("default", &names[5]).timestamp;
    until("every pod of the burst past its 1 s deadline", || {
        SystemTime::now() >= last + Duration::from_secs(1)
    })
    .await;
    c.sim.faults().exempt_users(&[ADMIN]);
    c.sim.faults().set_latency(millis(300));
    let config = config(
        Mechanism::SchedulingGates,
        &format!("maxInFlight: 2\ninitializers:\n  - {{ name: {SIDECAR}, deadline: 1s }}\n"),
    );
    let guard = c.guard(&config).await;
    for name in &names {
        eventually(
            format!("the InitializerBypassed Event about {name}"),
            || (!c.bypass_events(name).is_empty()).then_some(()),
        )
        .await;
    }
    c.sim.faults().clear();
    c.finish(guard).await;

    let log = c.sim.requests();
    let is_patch = |r: &&kube_sim::RequestRecord| {
        r.user == GUARD_USER && r.verb == "patch" && r.resource == "pods"
    };
    let is_event = |r: &&kube_sim::RequestRecord| {
        r.user == GUARD_USER && r.verb == "create" && r.resource == "events"
    };
    let patches: Vec<SystemTime> = log.iter().filter(is_patch).map(|r| r.time).collect();
    assert_eq!(patches.len(), names.len(), "one PATCH per pod");
    let first_event = log
        .iter()
        .filter(is_event)
        .map(|r| r.time)
        .min()
        .expect("the guard wrote Events");
    let last_patch = patches.iter().max().copied().unwrap_or(first_event);
    assert!(
        last_patch < first_event,
        "an Event was written {:?} before the burst's last PATCH",
        last_patch.duration_since(first_event).unwrap_or_default()
    );
    let mut writes: Vec<SystemTime> = log
        .iter()
        .filter(|r| is_patch(r) || is_event(r))
        .map(|r| r.time)
        .collect();
    writes.sort();
    assert_eq!(
        writes.len(),
        2 * names.len(),
        "a PATCH and an Event per pod"
    );
    for (i, pair) in writes.windows(3).enumerate() {
        let gap = pair[2].duration_since(pair[0]).unwrap_or_default();
        assert!(
            gap >= millis(300),
            "writes {i} and {} arrived {gap:?} apart: more than two were in flight",
            i + 2
        );
    }
}

/// AUDIT's deadline in [`dead_sidecar_slow_audit`].
const AUDIT_DEADLINE: Duration = Duration::from_secs(2);

/// SIDECAR's owner dead (ownerDownGrace 500 ms), AUDIT's alive but slow past its 2 s
/// deadline, and a guard that has seen both; keep the owners while the test runs.
async fn dead_sidecar_slow_audit(
    mechanism: Mechanism,
) -> (
    Cluster,
    initguard::guard::Guard,
    [initguard_sim::controllers::GateOwnerHandle; 2],
) {
    let c = Cluster::start(mechanism).await;
    let sidecar = c.owner(SIDECAR, |o| o.alive = false).await;
    let audit = c
        .owner(AUDIT, |o| o.latency = Duration::from_secs(600))
        .await;
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}{}",
            owned(SIDECAR, "10m"),
            owned(AUDIT, &format!("{}s", AUDIT_DEADLINE.as_secs()))
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, false).await;
    wait_owner(&guard, AUDIT, true).await;
    (c, guard, [sidecar, audit])
}

/// The head's owner is dead; the initializer behind it is healthy but slow, with a deadline of
/// its own (2 s): two patches, the second never before that deadline and not held back by the
/// first one's expectation (regression: when the pod watch showed the first removal before the
/// actuator reported it, the second waited for the 30 s expectation timeout). The late bound
/// is half that timeout, so it holds at any machine load and still catches the regression.
async fn initializers_due_at_different_times_are_removed_in_turn(mechanism: Mechanism) {
    let (c, guard, _owners) = dead_sidecar_slow_audit(mechanism).await;
    let names: Vec<String> = (0..3).map(|i| format!("turn-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    until("both initializers bypassed on every pod", || {
        names.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    c.finish(guard).await;
    for name in &names {
        let patches = c.guard_pod_patches(name);
        assert_eq!(patches.len(), 2, "{patches:#?}");
        let removed: Vec<(String, Option<String>)> = c
            .bypasses_of(&format!("default/{name}"))
            .into_iter()
            .map(|b| (b.initializer, b.reason))
            .collect();
        assert_eq!(
            removed,
            [
                (SIDECAR.to_owned(), Some("owner_down".to_owned())),
                (AUDIT.to_owned(), Some("deadline".to_owned())),
            ]
        );
        // When AUDIT's clock started: gates at creation, legacy once it became the head.
        let started = match mechanism {
            Mechanism::SchedulingGates => c.created("default", name).timestamp,
            Mechanism::Initializers => patches[0].time,
        };
        assert_not_before("the second patch", started, patches[1].time, AUDIT_DEADLINE);
        let late = since(started.max(patches[0].time), patches[1].time);
        assert!(
            late < AUDIT_DEADLINE + Duration::from_secs(15),
            "{name}: the second patch came {late:?} after the first could be followed"
        );
    }
}

/// A legacy pod whose pending list names one initializer twice, around another one:
/// `[SIDECAR, AUDIT, SIDECAR]`, SIDECAR's owner dead and AUDIT's slow with a 2 s deadline. The
/// first patch removes the head only; the watch showing SIDECAR pending once instead of twice
/// ends that bypass's expectation, so once AUDIT (now the head) is due the second patch
/// removes it and the last SIDECAR, not held back by the expectation's 30 s timeout. The late
/// bound is half that timeout, as in the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_legacy_initializer_removed_once_is_seen_removed() {
    on_version(kube_sim::KubeVersion::V1_11, async {
        let (c, guard, _owners) = dead_sidecar_slow_audit(Mechanism::Initializers).await;
        c.pod("default", "twice", true, &[SIDECAR, AUDIT, SIDECAR])
            .await;
        until("every initializer bypassed", || {
            c.pending("default", "twice").is_empty()
        })
        .await;
        c.finish(guard).await;
        let patches = c.guard_pod_patches("twice");
        assert_eq!(patches.len(), 2, "{patches:#?}");
        let removed: Vec<String> = c
            .bypasses_of("default/twice")
            .into_iter()
            .map(|b| b.initializer)
            .collect();
        assert_eq!(removed, [SIDECAR, AUDIT, SIDECAR]);
        // AUDIT's clock starts when it becomes the head: at the first patch.
        assert_not_before(
            "the second patch",
            patches[0].time,
            patches[1].time,
            AUDIT_DEADLINE,
        );
        let late = since(patches[0].time, patches[1].time);
        assert!(
            late < AUDIT_DEADLINE + Duration::from_secs(15),
            "the second patch came {late:?} after the first"
        );
    })
    .await;
}

/// `events: off`: the bypasses are written and recorded in the annotation, but no Event, not
/// even while the guard drains at shutdown (it writes what it holds before it exits).
async fn events_off_writes_no_event(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let config = config(
        mechanism,
        &format!("events: off\ninitializers:\n  - {{ name: {AUDIT}, deadline: 0s }}\n"),
    );
    let guard = c.guard(&config).await;
    let names: Vec<String> = (0..3).map(|i| format!("quiet-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[AUDIT]).await;
    }
    until("every pod bypassed", || {
        names.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    let metrics = guard.shared.metrics.clone();
    c.finish(guard).await;
    for name in &names {
        assert_eq!(c.bypass_events(name), Vec::<serde_json::Value>::new());
        assert_eq!(c.bypasses_of(&format!("default/{name}")).len(), 1);
    }
    let events: Vec<_> = c
        .guard_writes()
        .into_iter()
        .filter(|r| r.resource == "events")
        .collect();
    assert!(events.is_empty(), "{events:#?}");
    assert!(
        !metrics
            .render()
            .unwrap_or_default()
            .contains("InitializerBypassed"),
        "no Event series without Events"
    );
}

/// An Event the API server refuses is counted `failed` (once: an Event is never re-sent), by
/// the server's own log; the bypass it records stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_event_is_counted_failed_and_the_bypass_stands() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    c.sim
        .faults()
        .fail_next(GUARD_USER, "create", "events", 500);
    let config = config(
        Mechanism::SchedulingGates,
        &format!("initializers:\n  - {{ name: {AUDIT}, deadline: 0s }}\n"),
    );
    let guard = c.guard(&config).await;
    c.pod("default", "refused-event", true, &[AUDIT]).await;
    until("the pod bypassed", || {
        c.pending("default", "refused-event").is_empty()
    })
    .await;
    let metrics = guard.shared.metrics.clone();
    c.finish(guard).await;
    let refused = c
        .guard_writes()
        .into_iter()
        .filter(|r| r.resource == "events" && r.status == 500)
        .count();
    assert_eq!(refused, 1, "the server refused one Event");
    assert!(c.bypass_events("refused-event").is_empty());
    let count = |outcome: &str| {
        metrics
            .events_total
            .with_label_values(&["InitializerBypassed", outcome])
            .get()
    };
    assert_eq!((count("failed"), count("written")), (1, 0));
    assert_eq!(c.bypasses_of("default/refused-event").len(), 1);
}

/// More initializers due at once than one patch removes (64): the rest go in the next patch,
/// decided once the watch shows the first; each is removed exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_due_than_one_patch_takes_go_in_the_next() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let config = config(
        Mechanism::SchedulingGates,
        "unlistedInitializers: deadline\ndefaults: { deadline: 0s }\n",
    );
    let guard = c.guard(&config).await;
    let gates: Vec<String> = (0..70).map(|i| format!("g-{i:02}.example.com")).collect();
    let refs: Vec<&str> = gates.iter().map(String::as_str).collect();
    c.pod("default", "many", true, &refs).await;
    until("every gate of the pod removed", || {
        c.pending("default", "many").is_empty()
    })
    .await;
    c.finish(guard).await;
    let patches = c.guard_pod_patches("many");
    assert_eq!(patches.len(), 2, "{patches:#?}");
    let mut removed: Vec<String> = c
        .bypasses_of("default/many")
        .into_iter()
        .map(|b| b.initializer)
        .collect();
    removed.sort();
    assert_eq!(removed, gates);
}
