//! Writes that cannot go wrong: a leader cut off from the API server stops writing before
//! another may take over, a bypass patch never touches a pod opted out or a record written
//! since the read, a rejected write (409) is never retried blindly (nor at once when the pod
//! is unchanged), a pod found gone (404) is forgotten at once, and a bypass stays expected
//! until the pod watch shows it (30 s at most).

use std::time::{Duration, SystemTime};

use initguard::bypass::BYPASSED_ANNOTATION;
use initguard::config::Mechanism;
use initguard::guard::Guard;
use kube_sim::{PolicyRule, Rbac, RequestRecord};
use serde_json::json;

use crate::harness::*;

both_mechanisms!(
    a_leader_cut_off_stops_writing_before_the_other_takes_over,
    a_pod_found_gone_is_forgotten_at_once,
    a_pod_opted_out_since_the_read_is_never_bypassed,
    a_record_written_since_the_read_is_never_overwritten,
    a_conflict_is_followed_by_a_fresh_read_never_a_blind_retry,
    a_conflict_on_an_unchanged_pod_is_tried_again_after_a_pause,
);

/// Two deadline-only initializers.
fn deadline_config(
    mechanism: Mechanism,
    deadline: &str,
    rest: &str,
) -> std::sync::Arc<initguard::config::Config> {
    config(
        mechanism,
        &format!(
            "{rest}initializers:\n  - {{ name: {SIDECAR}, deadline: {deadline} }}\n  \
             - {{ name: {AUDIT}, deadline: {deadline} }}\n"
        ),
    )
}

/// PATCHes on pods by `user`, whatever their answer.
fn pod_patches_by(c: &Cluster, user: &str) -> Vec<RequestRecord> {
    c.sim
        .requests()
        .into_iter()
        .filter(|r| r.user == user && r.verb == "patch" && r.resource == "pods")
        .collect()
}

/// Two replicas as distinct users (lease 3 s, so renew deadline 2 s and write timeout 500 ms).
/// The leader is cut off from the API server (its requests answered 503 by "the load
/// balancer") just before its pods' deadline: it stops writing, the other takes over and
/// bypasses them, and when the cut heals the old leader writes nothing more (without the
/// fence, kube's retry layer re-sent the old leader's 503'd patch long after it lost the
/// lease). Every initializer is removed exactly once, judged by the server's log.
async fn a_leader_cut_off_stops_writing_before_the_other_takes_over(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let config = deadline_config(
        mechanism,
        "1s",
        "leaderElection: { enabled: true, namespace: kube-system, name: initguard, \
         leaseDuration: 3s }\n",
    );
    let users = ["system:initguard-a", "system:initguard-b"];
    let mut replicas: Vec<Option<Guard>> = vec![
        Some(c.guard_as(&config, "guard-a", users[0]).await),
        Some(c.guard_as(&config, "guard-b", users[1]).await),
    ];
    let leader = sole_leader(&replicas).await;
    let follower = 1 - leader;
    let (old, new) = (users[leader], users[follower]);

    // The leader writes while it is connected.
    let first: Vec<String> = (0..2).map(|i| format!("first-{i}")).collect();
    for name in &first {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    until("the first pods bypassed", || {
        first.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;

    // Pods the leader has seen, due about a second later: it is cut off before then.
    let second: Vec<String> = (0..3).map(|i| format!("second-{i}")).collect();
    for name in &second {
        c.pod("default", name, true, &[SIDECAR, AUDIT]).await;
    }
    {
        let shared = replicas[leader].as_ref().unwrap().shared.clone();
        until("the leader to see the second pods", || {
            let tracker = shared.tracker();
            second
                .iter()
                .all(|n| tracker.get(&format!("default/{n}")).is_some())
        })
        .await;
    }
    c.sim.faults().partition_user(old);
    let survivor = replicas[follower].take().unwrap();
    until("the other replica to lead", || survivor.shared.is_leader()).await;
    until("the second pods bypassed", || {
        second.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    c.sim.faults().heal_user(old);
    let cut_off = replicas[leader].take().unwrap();
    until("the old leader to step down", || {
        !cut_off.shared.is_leader()
    })
    .await;
    // A graceful shutdown drains its in-flight patches: anything it still had to send is
    // sent by the time this returns.
    cut_off.shutdown().await;

    let new_first = pod_patches_by(&c, new)
        .iter()
        .map(|r| r.time)
        .min()
        .expect("the new leader wrote");
    let late: Vec<RequestRecord> = pod_patches_by(&c, old)
        .into_iter()
        .filter(|r| r.time >= new_first)
        .collect();
    assert_eq!(
        late,
        vec![],
        "the old leader wrote after the new one started"
    );
    let old_ok = pod_patches_by(&c, old)
        .iter()
        .filter(|r| r.status == 200)
        .count();
    let new_ok = pod_patches_by(&c, new)
        .iter()
        .filter(|r| r.status == 200)
        .count();
    // Gates due at one instant (same creation, same deadline) go in one patch; a legacy
    // entry behind the head has no head-time, so its deadline starts once the head is gone.
    let per_pod = match mechanism {
        Mechanism::SchedulingGates => 1,
        Mechanism::Initializers => 2,
    };
    assert_eq!(
        old_ok,
        per_pod * first.len(),
        "successful patches by the old leader"
    );
    assert_eq!(
        new_ok,
        per_pod * second.len(),
        "successful patches by the new leader"
    );
    for name in first.iter().chain(&second) {
        let mut removed: Vec<String> = c
            .removals()
            .into_iter()
            .filter(|r| r.pod == format!("default/{name}"))
            .map(|r| r.initializer)
            .collect();
        removed.sort_unstable();
        assert_eq!(removed, [AUDIT, SIDECAR], "{name}");
    }
    survivor.shutdown().await;
}

/// A write the server answers 503 is retried by the actuator with backoff, six attempts in
/// all, then counted once in `initguard_bypass_errors_total` (what InitguardBypassErrors pages
/// on) and tried again by the loop 15 s later. The server answers the guard's first six
/// PATCHes 503: by its log, six PATCHes failed and the seventh succeeded, no sooner than 15 s
/// after the sixth; the counter says one failed bypass, not none (retrying forever) and not
/// six (giving up at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_write_is_retried_then_counted_once_and_tried_again_later() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let config = deadline_config(Mechanism::SchedulingGates, "1s", "");
    let guard = c.guard(&config).await;
    for _ in 0..6 {
        c.sim.faults().fail_next(GUARD_USER, "patch", "pods", 503);
    }
    c.pod("default", "flaky", true, &[SIDECAR]).await;
    until("the pod bypassed despite the failed writes", || {
        c.pending("default", "flaky").is_empty()
    })
    .await;
    let patches = c.guard_pod_patches("flaky");
    let statuses: Vec<u16> = patches.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 503, 503, 503, 503, 503, 200]);
    // Tried again later: 15 s after the failed bypass was reported, not at once.
    assert_not_before(
        "the failed bypass tried again",
        patches[5].time,
        patches[6].time,
        Duration::from_secs(15),
    );
    let metrics = guard.shared.metrics.render().unwrap();
    assert_eq!(
        metric_sum(&metrics, "initguard_bypass_errors_total", &[]),
        1.0,
        "failed bypasses counted"
    );
    c.finish(guard).await;
}

/// The fence, not the step-down, is what stops writes when renewals hang. Lease 9 s: renew
/// deadline 6 s, write timeout 1.5 s, a renew round every 1.2 s that gives up after 1.2 s. The
/// leader's requests on its Lease are then held open unanswered while its pod writes still go
/// through, and opted-in pods keep falling due. Its rounds time out and it steps down only at
/// the first failed round past the renew deadline (about 7.2 s after its last renew), but no
/// write may start later than the renew deadline minus the write timeout. Judged from the
/// server's record: every pod PATCH it sent arrived within the renew deadline of its last
/// committed Lease renew, while pods did fall due between that deadline and the step-down.
/// Failing for less than a lease, it stays ready (a blip is not a 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_hang_writes_nothing_past_the_renew_deadline() {
    const USER: &str = "system:initguard-a";
    let renew_deadline = Duration::from_secs(6);
    let deadline = Duration::from_secs(1);
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 9s }}\ninitializers:\n  - {{ name: {SIDECAR}, deadline: 1s }}\n"
        ),
    );
    let guard = c.guard_as(&config, "guard-a", USER).await;
    let shared = guard.shared.clone();
    until("the guard to lead", || shared.is_leader()).await;

    let stalled_at = SystemTime::now();
    c.sim.faults().stall(USER, "leases");
    // A pod every 150 ms until the guard has stepped down.
    let mut pods = Vec::new();
    let stepped_down = loop {
        let name = format!("p-{}", pods.len());
        c.pod("default", &name, true, &[SIDECAR]).await;
        pods.push(name);
        // Failing for less than a lease is a blip, not a reason to be unready.
        let unready = shared.not_ready();
        assert!(
            !unready.iter().any(|p| p.contains("leader election")),
            "{unready:?}"
        );
        if !shared.is_leader() {
            break SystemTime::now();
        }
        assert!(
            pods.len() < 400,
            "the guard still leads a minute after its renewals began to hang"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    };
    c.sim.faults().unstall(USER, "leases");
    until("the guard to lead again and bypass every pod", || {
        pods.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    c.finish(guard).await;
    // Shut down gracefully while leading, it hands the Lease back: no holder, so a successor
    // need not wait the lease out.
    let lease = c
        .sim
        .get_object("leases", Some("kube-system"), "initguard")
        .expect("the guard's Lease");
    assert_eq!(
        lease["spec"]["holderIdentity"].as_str().unwrap_or_default(),
        "",
        "{lease:#}"
    );

    let history = c.sim.object_history();
    let renewals: Vec<SystemTime> = history
        .iter()
        .filter(|ch| ch.resource == "leases" && ch.name == "initguard" && ch.user == USER)
        .map(|ch| ch.time)
        .collect();
    let patches = pod_patches_by(&c, USER);
    let late: Vec<String> = patches
        .iter()
        .filter_map(|p| {
            let renewed = renewals.iter().filter(|t| **t <= p.time).max()?;
            let since = p.time.duration_since(*renewed).unwrap_or_default();
            (since > renew_deadline).then(|| format!("{:?} {since:?} after a renew", p.name))
        })
        .collect();
    assert_eq!(late, Vec::<String>::new(), "writes past the renew deadline");
    assert!(
        patches
            .iter()
            .all(|p| renewals.iter().any(|t| *t <= p.time)),
        "a write before the first renew"
    );

    // What happened is what the scenario needs: writes while renewals hung, pods falling due
    // after the renew deadline and before the step-down, and a renew again after the heal.
    let last_renew = renewals
        .iter()
        .filter(|t| **t <= stalled_at)
        .max()
        .copied()
        .expect("a renew before the stall");
    assert!(
        renewals
            .iter()
            .all(|t| *t <= stalled_at || *t >= stepped_down),
        "a renew committed while the Lease requests were held"
    );
    let fenced = last_renew + renew_deadline;
    let during = patches
        .iter()
        .filter(|p| p.time > stalled_at && p.time < fenced)
        .count();
    assert!(
        during >= 1,
        "no write while the renewals hung and the lease was still fresh"
    );
    let due_while_fenced = history
        .iter()
        .filter(|ch| ch.resource == "pods" && ch.before.is_none())
        .map(|ch| ch.time + deadline)
        .filter(|due| *due > fenced + Duration::from_millis(300) && *due < stepped_down)
        .count();
    assert!(
        due_while_fenced >= 2,
        "only {due_while_fenced} pods fell due between the renew deadline and the step-down"
    );
    assert!(
        renewals.iter().any(|t| *t >= stepped_down),
        "no renew after the heal"
    );
    let by_others: Vec<_> = c
        .removals()
        .into_iter()
        .filter(|r| r.user != USER)
        .collect();
    assert_eq!(by_others.len(), 0, "{by_others:?}");
}

/// Rules of the shipped RBAC without list and watch on pods: the guard's pod watch goes down
/// and stays down while it can still read and patch single pods.
fn rbac_without_pod_watch() -> Rbac {
    Rbac::cluster_wide(vec![
        PolicyRule::new(&[""], &["pods"], &["get", "patch", "initialize"]),
        PolicyRule::new(&["", "events.k8s.io"], &["events"], &["create", "patch"]),
    ])
}

/// Take the guard's pod watch down: returns once the guard's attempt to watch or list again
/// was refused, so no event of a later change can reach it.
async fn cut_pod_watch(c: &Cluster) {
    let before = c.sim.requests().len();
    c.sim
        .enforce_rbac_policy(GUARD_USER, rbac_without_pod_watch());
    c.sim.faults().drop_watches();
    until("the guard's pod watch to be refused", || {
        c.sim.requests()[before..].iter().any(|r| {
            r.user == GUARD_USER
                && r.resource == "pods"
                && matches!(r.verb.as_str(), "watch" | "list")
                && r.status == 403
        })
    })
    .await;
}

/// A deadline-only guard (3 s) tracking the opted-in pod `name`, its pod watch then cut.
async fn guard_with_stale_view(c: &Cluster, name: &str, setup: serde_json::Value) -> Guard {
    guard_with_stale_view_until(c, name, "3s", setup).await
}

/// [`guard_with_stale_view`] with the deadline `deadline`.
async fn guard_with_stale_view_until(
    c: &Cluster,
    name: &str,
    deadline: &str,
    setup: serde_json::Value,
) -> Guard {
    let config = deadline_config(c.mechanism, deadline, "");
    let guard = c.guard(&config).await;
    c.pod("default", name, true, &[SIDECAR]).await;
    if !setup.is_null() {
        c.merge_patch_pod("default", name, &setup).await;
    }
    let shared = guard.shared.clone();
    let key = format!("default/{name}");
    let want_annotations = !setup["metadata"]["annotations"].is_null();
    until("the guard to track the pod", || {
        shared
            .tracker()
            .get(&key)
            .is_some_and(|p| p.annotations_present == want_annotations)
    })
    .await;
    cut_pod_watch(c).await;
    guard
}

/// The pod is deleted while the guard's watch is down; at the deadline its patch finds no pod
/// (404) and the guard forgets the pod at once (before the fix it kept it, and patched it again
/// every 2 s, until the watch came back).
async fn a_pod_found_gone_is_forgotten_at_once(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let guard = guard_with_stale_view(&c, "gone", serde_json::Value::Null).await;
    c.delete_pod("default", "gone").await;
    let shared = guard.shared.clone();
    until("the guard to patch and find the pod gone", || {
        !c.guard_pod_patches("gone").is_empty()
    })
    .await;
    until("the guard to forget the pod", || {
        shared.tracker().get("default/gone").is_none()
    })
    .await;
    let patches = c.guard_pod_patches("gone");
    assert_eq!(patches.len(), 1, "{patches:#?}");
    assert_eq!(patches[0].status, 404, "{patches:#?}");
    guard.shutdown().await;
}

/// The opt-in label is removed while the guard's view is stale: the bypass patch tests the
/// label's value, fails (422), the guard re-reads the pod and leaves it alone. The pod already
/// carries a bypass record, so the patch tests that record rather than the resourceVersion,
/// which alone would have caught the change.
async fn a_pod_opted_out_since_the_read_is_never_bypassed(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let earlier = "other.example.com=deadline@2026-01-01T00:00:00Z";
    let guard = guard_with_stale_view(
        &c,
        "optout",
        json!({ "metadata": { "annotations": { BYPASSED_ANNOTATION: earlier } } }),
    )
    .await;
    c.merge_patch_pod(
        "default",
        "optout",
        &json!({ "metadata": { "labels": { OPT_IN: null } } }),
    )
    .await;
    let shared = guard.shared.clone();
    until("the guard to re-read the pod as opted out", || {
        shared
            .tracker()
            .get("default/optout")
            .is_some_and(|p| !p.opted_in)
    })
    .await;
    let patches = c.guard_pod_patches("optout");
    assert!(
        !patches.is_empty() && patches.iter().all(|p| p.status == failed_test_status()),
        "{patches:#?}"
    );
    assert_eq!(c.pending("default", "optout"), [SIDECAR]);
    assert!(c.bypasses_of("default/optout").is_empty());
    guard.shutdown().await;
}

/// The server answers the guard's bypass 409 Conflict, and the pod changed meanwhile while
/// the guard's pod watch is down. Judged by the server's request log: after the 409 the
/// guard reads the pod (GET) before it writes again, and the write that lands tests the
/// resourceVersion the server held at that moment, which only the fresh read could tell it.
async fn a_conflict_is_followed_by_a_fresh_read_never_a_blind_retry(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    c.sim.faults().fail_next(GUARD_USER, "patch", "pods", 409);
    let guard = guard_with_stale_view(&c, "conflict", serde_json::Value::Null).await;
    c.merge_patch_pod(
        "default",
        "conflict",
        &json!({ "metadata": { "labels": { "team": "batch" } } }),
    )
    .await;
    until("the pod bypassed", || {
        !c.bypasses_of("default/conflict").is_empty()
    })
    .await;
    let requests: Vec<RequestRecord> = c
        .sim
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == GUARD_USER
                && r.resource == "pods"
                && r.name.as_deref() == Some("conflict")
                && matches!(r.verb.as_str(), "get" | "patch")
        })
        .collect();
    let trace: Vec<(&str, u16)> = requests
        .iter()
        .map(|r| (r.verb.as_str(), r.status))
        .collect();
    assert_eq!(trace.first(), Some(&("patch", 409)), "{trace:?}");
    // Every write after a rejected one comes after a successful read of the pod.
    for (i, r) in requests.iter().enumerate().skip(1) {
        if r.verb == "patch" {
            let since_last_patch = requests[..i].iter().rev().take_while(|p| p.verb != "patch");
            assert!(
                since_last_patch
                    .clone()
                    .any(|p| p.verb == "get" && p.status == 200),
                "a write without a fresh read after the previous one: {trace:?}"
            );
        }
    }
    let landed = requests
        .iter()
        .find(|r| r.verb == "patch" && r.status == 200)
        .expect("a successful patch");
    let body: serde_json::Value =
        serde_json::from_str(landed.body.as_deref().unwrap_or("[]")).expect("JSON Patch body");
    let tested = body
        .as_array()
        .into_iter()
        .flatten()
        .find(|op| op["op"] == "test" && op["path"] == "/metadata/resourceVersion")
        .and_then(|op| op["value"].as_str())
        .expect("the patch tests the resourceVersion")
        .to_owned();
    // The resourceVersion the server held when the patch landed: the last change before it.
    let held = c
        .sim
        .object_history()
        .into_iter()
        .filter(|ch| ch.resource == "pods" && ch.name == "conflict" && ch.time <= landed.time)
        .filter_map(|ch| ch.after)
        .filter_map(|after| {
            after["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_owned)
        })
        .last()
        .expect("the pod's history");
    let labelled = c.sim.object_history().into_iter().any(|ch| {
        ch.name == "conflict"
            && ch
                .after
                .as_ref()
                .is_some_and(|a| a["metadata"]["labels"]["team"] == "batch")
            && ch.time <= landed.time
    });
    assert!(labelled, "the label change came before the landed write");
    assert_eq!(tested, held, "{trace:?}");
    assert_eq!(c.pending("default", "conflict"), Vec::<String>::new());
    guard.shutdown().await;
}

/// The server answers the guard's bypass 409 Conflict while the pod has not changed (as when
/// the guard's view lags behind a write that was then undone): the fresh read shows the pod
/// as decided, so deciding again at once would repeat the same write in a tight loop. Judged
/// by the server's record: the pod did not change between the two PATCHes, and the second
/// came no sooner than the 2 s pause after the first was refused.
async fn a_conflict_on_an_unchanged_pod_is_tried_again_after_a_pause(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let config = deadline_config(mechanism, "1s", "");
    let guard = c.guard(&config).await;
    c.sim.faults().fail_next(GUARD_USER, "patch", "pods", 409);
    c.pod("default", "unchanged", true, &[SIDECAR]).await;
    until("the pod bypassed after the conflict", || {
        c.pending("default", "unchanged").is_empty()
    })
    .await;
    let patches = c.guard_pod_patches("unchanged");
    let statuses: Vec<u16> = patches.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [409, 200]);
    let (refused, landed) = (&patches[0], &patches[1]);
    let changes: Vec<SystemTime> = c
        .sim
        .object_history()
        .into_iter()
        .filter(|ch| ch.resource == "pods" && ch.name == "unchanged")
        .map(|ch| ch.time)
        .filter(|t| *t > refused.time && *t < landed.time)
        .collect();
    assert_eq!(
        changes,
        Vec::<SystemTime>::new(),
        "the pod changed between the two writes"
    );
    assert_not_before(
        "the write tried again",
        refused.time,
        landed.time,
        Duration::from_secs(2),
    );
    guard.shutdown().await;
}

/// Another writer records a bypass in an existing annotations map while the guard's view is
/// stale (the key absent when read): the guard's patch must not overwrite it. It fails (the
/// resourceVersion changed), the guard re-reads and appends its own record after it.
async fn a_record_written_since_the_read_is_never_overwritten(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let guard = guard_with_stale_view(
        &c,
        "annotated",
        json!({ "metadata": { "annotations": { "team": "batch" } } }),
    )
    .await;
    let theirs = "other.example.com=deadline@2026-01-01T00:00:00Z";
    c.merge_patch_pod(
        "default",
        "annotated",
        &json!({ "metadata": { "annotations": { BYPASSED_ANNOTATION: theirs } } }),
    )
    .await;
    until("the pod bypassed", || {
        !c.bypasses_of("default/annotated").is_empty()
    })
    .await;
    let pod = c
        .sim
        .get_object("pods", Some("default"), "annotated")
        .unwrap();
    let record = pod["metadata"]["annotations"][BYPASSED_ANNOTATION]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        record.starts_with(&format!("{theirs},{SIDECAR}=deadline@")),
        "{record}"
    );
    assert_eq!(pod["metadata"]["annotations"]["team"], "batch");
    let statuses: Vec<u16> = c
        .guard_pod_patches("annotated")
        .iter()
        .map(|p| p.status)
        .collect();
    assert_eq!(statuses, [failed_test_status(), 200]);
    guard.shutdown().await;
}

/// Scheduling gates under clock skew: the simulated server's clock runs `offset_secs` from the
/// guard's. No gate is bypassed before `creationTimestamp + deadline` on the server's own
/// clock (judged from the object history), and none waits a minute too long either.
async fn gates_are_never_bypassed_early_under_skew(offset_secs: i64) {
    let mechanism = Mechanism::SchedulingGates;
    let offset = jiff::SignedDuration::from_secs(offset_secs);
    let c = Cluster::start_with(mechanism, |o| o.clock_offset = offset).await;
    let deadline = Duration::from_secs(2);
    let config = deadline_config(mechanism, "2s", "");
    let guard = c.guard(&config).await;
    let names: Vec<String> = (0..3).map(|i| format!("skewed-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR]).await;
    }
    for name in &names {
        let pod = format!("default/{name}");
        // A guard fooled by a server clock ahead would wait a minute longer.
        let bypass = eventually(format!("{pod} bypassed"), || c.bypasses_of(&pod).pop()).await;
        let created = c.created("default", name);
        let due = jiff::Timestamp::try_from(created.timestamp + deadline).unwrap();
        assert_on_time_under_skew(&pod, bypass.time, offset_secs, due);
    }
    c.finish(guard).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_are_never_bypassed_early_when_the_server_clock_is_behind() {
    gates_are_never_bypassed_early_under_skew(-60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_are_never_bypassed_late_by_the_skew_when_the_server_clock_is_ahead() {
    gates_are_never_bypassed_early_under_skew(60).await;
}

/// `initguard status` on legacy initializers shows how long the head has waited since the
/// pod's creation (a one-shot report has no other history), not zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_status_shows_real_waits() {
    let mechanism = Mechanism::Initializers;
    let c = Cluster::start(mechanism).await;
    let config = deadline_config(mechanism, "1h", "");
    c.pod("default", "waiting", true, &[SIDECAR, AUDIT]).await;
    let created = c.created("default", "waiting");
    let waited_at_least = Duration::from_secs(2);
    until("two seconds past the creationTimestamp", || {
        std::time::SystemTime::now()
            >= created.timestamp + waited_at_least + Duration::from_millis(500)
    })
    .await;
    let report = initguard::status::gather(c.guard_client(), config)
        .await
        .unwrap();
    let upper = since(created.timestamp, std::time::SystemTime::now());
    let pod = report
        .waiting_pods
        .iter()
        .find(|p| p.name == "waiting")
        .expect("the pod in the report");
    let head = &pod.initializers[0];
    assert_eq!(head.initializer, SIDECAR);
    // The server's clock is read from `Date` (whole seconds): up to a second is lost.
    let waited = head.waited.expect("the head's wait");
    assert!(
        waited >= waited_at_least - Duration::from_secs(1) && waited <= upper,
        "waited {waited:?}, expected within [1s, {upper:?}]"
    );
    assert_eq!(pod.initializers[1].waited, None, "{pod:?}");
}

/// How long the control loop expects the pod watch to show a bypass it wrote (its
/// `EXPECTATION_TTL`).
const EXPECTATION_TTL: Duration = Duration::from_secs(30);

/// A bypass the pod watch never shows (the watch is down) stays expected for
/// [`EXPECTATION_TTL`]: the pod is not decided again before, so no second write, and is decided
/// again after, so a lost watch cannot hold a pod forever. By the server's log: the second
/// PATCH comes no sooner than the TTL after the first, and finds the gate gone (its `test`
/// fails), so the gate is removed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bypass_the_watch_never_shows_is_decided_again_once_its_expectation_expires() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let guard = guard_with_stale_view(&c, "unseen", serde_json::Value::Null).await;
    until("a second PATCH of the pod", || {
        c.guard_pod_patches("unseen").len() >= 2
    })
    .await;
    let patches = c.guard_pod_patches("unseen");
    assert_eq!(patches[0].status, 200, "{patches:#?}");
    assert_eq!(patches[1].status, failed_test_status(), "{patches:#?}");
    let apart = patches[1]
        .time
        .duration_since(patches[0].time)
        .unwrap_or_default();
    assert!(
        apart >= EXPECTATION_TTL,
        "decided again {apart:?} after its bypass, before the expectation expired"
    );
    assert_eq!(c.bypasses_of("default/unseen").len(), 1);
    guard.shutdown().await;
}

/// An event of the pod older than its bypass (delivered after the write's answer, as a watch
/// catching up does) is not the bypass: the pod stays expected, and is not written again. The
/// watch is down while the pod is relabelled and then bypassed (the write on the stale view
/// fails its resourceVersion test; the one after a fresh read lands); once the watch is back
/// it delivers both in order, then a later pod's creation, whose bypass is the witness that
/// the guard has read past them (a 10 s deadline leaves room for the cut and the relabel
/// before it). By the server's log: no PATCH of the first pod after the one that landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_event_of_the_pod_does_not_end_its_bypass_expectation() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let guard = guard_with_stale_view_until(&c, "older", "10s", serde_json::Value::Null).await;
    c.merge_patch_pod(
        "default",
        "older",
        &json!({ "metadata": { "labels": { "team": "batch" } } }),
    )
    .await;
    until("the pod bypassed", || {
        !c.bypasses_of("default/older").is_empty()
    })
    .await;
    let history = c.sim.object_history();
    let of_pod = |c: &&kube_sim::ObjectChange| c.resource == "pods" && c.name == "older";
    let relabelled = history
        .iter()
        .filter(of_pod)
        .find(|c| {
            c.after
                .as_ref()
                .is_some_and(|a| a["metadata"]["labels"]["team"] == "batch")
        })
        .map(|c| c.resource_version);
    let bypassed = history
        .iter()
        .filter(of_pod)
        .find(|c| c.user == GUARD_USER)
        .map(|c| c.resource_version);
    assert!(
        relabelled < bypassed,
        "the relabel (rv {relabelled:?}) must come before the bypass (rv {bypassed:?})"
    );
    c.sim
        .enforce_rbac_policy(GUARD_USER, shipped_rbac(c.mechanism));
    c.pod("default", "later", true, &[SIDECAR]).await;
    until("the later pod bypassed", || {
        !c.bypasses_of("default/later").is_empty()
    })
    .await;
    // The first write, on the stale view, fails its resourceVersion test; a fresh read, then
    // the write that lands. Nothing after it.
    let patches = c.guard_pod_patches("older");
    assert_eq!(
        patches.last().map(|p| p.status),
        Some(200),
        "no write after the bypass: {patches:#?}"
    );
    guard.shutdown().await;
}

/// A burst larger than the actuator's queue is bypassed in full: the pods the full queue
/// refused wait in line and go in as slots free, though no event of theirs comes to wake
/// them. Every pod is past its deadline when a guard with `maxInFlight: 1` (and no election:
/// it leads at once) starts, and the server holds its PATCHes until that guard is ready,
/// which it is only once it has decided its whole first list: one PATCH held, 4,096 queued,
/// so at least 40 pods in line. Then, by the server's record, each pod loses its gate once,
/// to the guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_larger_than_the_queue_is_bypassed_in_full() {
    use futures::StreamExt;
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let names: Vec<String> = (0..initguard::guard::actuator::QUEUE + 1 + 40)
        .map(|i| format!("q-{i}"))
        .collect();
    futures::stream::iter(&names)
        .for_each_concurrent(16, |name| c.pod("default", name, true, &[SIDECAR]))
        .await;
    // creationTimestamp is whole seconds, never later than the CREATE.
    let created = SystemTime::now();
    until("every pod of the burst past its 1 s deadline", || {
        SystemTime::now() >= created + Duration::from_secs(2)
    })
    .await;
    c.sim.faults().stall_verb(GUARD_USER, "patch", "pods");
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "maxInFlight: 1\nevents: off\nwaitingEvents: off\n\
             initializers:\n  - {{ name: {SIDECAR}, deadline: 1s }}\n"
        ),
    );
    // Ready once the first list is decided.
    let guard = c.guard(&config).await;
    eventually("the guard's first PATCH held by the server", || {
        (c.sim.faults().stalled_requests() >= 1).then_some(())
    })
    .await;
    c.sim.faults().unstall(GUARD_USER, "pods");
    // Each look copies every pod under the server's lock: not too often.
    let look = Duration::from_millis(250);
    crate::wait::eventually_every(look, "every pod of the burst without its gate", || async {
        let gated = c
            .sim
            .list_objects("pods")
            .iter()
            .filter(|p| {
                p["spec"]["schedulingGates"]
                    .as_array()
                    .is_some_and(|g| !g.is_empty())
            })
            .count();
        (gated == 0).then_some(())
    })
    .await;
    c.finish(guard).await;
    let mut removed: Vec<String> = c
        .removals()
        .into_iter()
        .inspect(|r| assert_eq!(r.user, GUARD_USER, "{r:?}"))
        .map(|r| r.pod)
        .collect();
    removed.sort();
    let mut expected: Vec<String> = names.iter().map(|n| format!("default/{n}")).collect();
    expected.sort();
    assert_eq!(removed, expected, "each pod's gate removed once");
}
