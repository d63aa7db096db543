//! Faults on the real control plane. Two replicas elect on a real Lease, guard one gate
//! (deadline 1 s) and one admission webhook; the webhook's owner is killed and the guard
//! bypasses the entry. Then:
//! - a burst of due opted-in pods is created (5,000; `INITGUARD_FAULT_PODS` sets another
//!   number), and halfway through it etcd and kube-apiserver are SIGKILLed and started again
//!   (`tests/testbed/crash`);
//! - three quarters through, the replica holding the Lease is SIGKILLed while it writes;
//! - once every pod is bypassed, etcd and kube-apiserver are crashed again, with the webhook
//!   still bypassed; then the owner comes back.
//!
//! Judged by the API server's objects and its audit log, never by the guard's counters: every
//! guard write came from the replica holding the Lease when the server received it, within
//! its lease; no pod's gate was removed twice (one audited patch at most, one record); every
//! pod lost the listed gate and kept the unlisted one; the webhook entry, bypassed across the
//! crash, is restored exactly and only restoreGrace after the owner came back; the survivor's
//! resident memory (from the kernel) did not double across the restarts (the soak's bound).
//! The counts are printed, as the soak prints its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use initguard_test_support::pod::records;
use initguard_test_support::wait::PATIENCE;
use initguard_test_support::webhook::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::testbed::*;

const NS: &str = "faults";
/// The listed gate: due one second after a pod is created.
const GATE: &str = "fault.example.com";
/// A gate no config lists: it keeps every burst pod away from the scheduler (three fake
/// Nodes hold 1,500 pods) and must survive every bypass.
const HOLD: &str = "hold.example.com";
/// The replicas' `leaseDuration`.
const LEASE: Duration = Duration::from_secs(4);
const DEFAULT_PODS: usize = 5_000;
/// Creates in flight at once.
const CREATORS: usize = 8;
const OWNER_DOWN_GRACE_S: u64 = 2;
const RESTORE_GRACE_S: u64 = 3;
/// What `tests/testbed/crash` kills and starts again, in this order.
const CONTROL_PLANE: &[&str] = &["etcd", "kube-apiserver"];
/// How long the control plane stays down.
const DOWN: Duration = Duration::from_secs(2);
/// A burst pod's name.
const BURST: &str = "burst";

/// The burst's size: `INITGUARD_FAULT_PODS` or [`DEFAULT_PODS`].
fn burst_size() -> usize {
    match std::env::var("INITGUARD_FAULT_PODS") {
        Ok(text) => {
            text.parse().ok().filter(|n| *n >= 4).unwrap_or_else(|| {
                panic!("INITGUARD_FAULT_PODS={text:?}: want a number, at least 4")
            })
        }
        Err(_) => DEFAULT_PODS,
    }
}

fn guard_config(bed: &Bed) -> String {
    format!(
        "mechanism: schedulingGates\n\
         optIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: true, namespace: {}, name: {}, leaseDuration: {}s }}\n\
         unlistedInitializers: ignore\n\
         initializers:\n\
         \x20 - {{ name: {GATE}, deadline: 1s }}\n\
         webhooks:\n\
         \x20 - name: validating/{}/{ENTRY}\n\
         \x20   owner: {{ lease: {}/policy-webhook }}\n\
         \x20   ownerDownGrace: {OWNER_DOWN_GRACE_S}s\n\
         \x20   restoreGrace: {RESTORE_GRACE_S}s\n\
         \x20   exemptNamespaces: [{}]\n",
        LOCK.0,
        LOCK.1,
        LEASE.as_secs(),
        bed.name,
        bed.system,
        bed.system,
    )
}

/// The webhook grant of [`Bed::new`] binds `system:initguard`; the second replica runs as
/// the ServiceAccount.
fn grant_second_identity(tb: &Testbed, prefix: &str) {
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": format!("{prefix}-initguard-webhooks-2") },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": format!("{prefix}-initguard-webhooks") },
        "subjects": [{ "kind": "ServiceAccount", "name": "initguard", "namespace": "kube-system" }],
    }));
}

fn burst_pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{BURST}-{i:05}"),
            "labels": { "app": NS, OPT_IN: "true" },
        },
        "spec": {
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
            "schedulingGates": [{ "name": GATE }, { "name": HOLD }],
        },
    }))
    .unwrap_or_else(|e| panic!("burst pod: {e}"))
}

/// The test's own creator: how far it got and how often the server did not answer.
#[derive(Default)]
struct Creator {
    created: AtomicUsize,
    retried: AtomicUsize,
}

/// Create `n` burst pods, [`CREATORS`] at a time. A create the server did not answer is
/// tried again until it is answered: a conflict means the killed server stored it before it
/// died. A pod that cannot be created for [`PATIENCE`] fails the test.
async fn create_burst(api: Api<Pod>, n: usize, progress: Arc<Creator>) {
    futures::stream::iter(0..n)
        .for_each_concurrent(CREATORS, |i| {
            let (api, progress) = (api.clone(), progress.clone());
            async move {
                let pod = burst_pod(i);
                let first = tokio::time::Instant::now();
                loop {
                    match api.create(&PostParams::default(), &pod).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 409 => break,
                        Err(e) => {
                            assert!(
                                first.elapsed() < PATIENCE,
                                "pod {BURST}-{i:05} not created within {PATIENCE:?}: {e}"
                            );
                            progress.retried.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
                progress.created.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
}

/// Wait until `count` reaches `target`. The wait fails only when the count stops moving for
/// [`PATIENCE`]: a burst takes as long as the machine needs, a stall is a failure.
async fn until_reached<F, Fut>(what: &str, target: usize, mut count: F) -> usize
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<usize>>,
{
    let mut best = 0;
    let mut moved = tokio::time::Instant::now();
    loop {
        if let Some(now) = count().await {
            if now >= target {
                return now;
            }
            if now > best {
                best = now;
                moved = tokio::time::Instant::now();
            }
        }
        assert!(
            moved.elapsed() < PATIENCE,
            "{what}: stuck at {best} of {target} for {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Burst pods that lost [`GATE`], from the server (None while it does not answer).
async fn bypassed(api: &Api<Pod>) -> Option<usize> {
    let pods = api
        .list(&ListParams::default().labels(&format!("app={NS}")))
        .await
        .ok()?;
    Some(
        pods.items
            .iter()
            .filter(|p| !pod_gates(p).iter().any(|g| g == GATE))
            .count(),
    )
}

fn pod_gates(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .map(|gates| gates.iter().map(|g| g.name.clone()).collect())
        .unwrap_or_default()
}

/// `tests/testbed/crash` of the control plane, off the runtime's threads (the creators go on).
async fn crash(tb: &Arc<Testbed>) -> String {
    let tb = tb.clone();
    tokio::task::spawn_blocking(move || tb.crash(CONTROL_PLANE, DOWN))
        .await
        .unwrap_or_else(|e| panic!("the crash task failed: {e}"))
}

pub(crate) async fn control_plane_crashes_mid_burst_and_while_a_webhook_is_bypassed(
    tb: Arc<Testbed>,
) {
    let n = burst_size();
    let started = jiff::Timestamp::now();
    let mut bed = Bed::new(tb.clone(), "flt").await;
    grant_second_identity(&tb, &bed.prefix);
    tb.namespace(NS);
    let config = guard_config(&bed);
    let Replicas {
        leader: first,
        survivor: second,
        leader_user: first_user,
        survivor_user: second_user,
    } = two_replicas(&tb, "faults", &config).await;
    let mut replicas = vec![(first, first_user), (second, second_user)];

    // The webhook's owner dies: the guard bypasses the entry.
    bed.kill_owner().await;
    let bypassed_configuration = eventually("the webhook entry bypassed", || {
        let c = get_configuration(&tb, &bed.name);
        c["metadata"]["annotations"]
            .get(RECORD)
            .is_some()
            .then_some(c)
    })
    .await;

    // The burst, with the control plane crashed halfway through it.
    let api: Api<Pod> = Api::namespaced(tb.admin_client().await, NS);
    let creator = Arc::new(Creator::default());
    let creating = tokio::spawn(create_burst(api.clone(), n, creator.clone()));
    let created = || std::future::ready(Some(creator.created.load(Ordering::Relaxed)));
    until_reached("burst pods created", n / 2, created).await;
    let first_crash_started = jiff::Timestamp::now();
    let first_crash = crash(&tb).await;

    // Three quarters through, the replica holding the Lease dies while it writes.
    until_reached("burst pods created", 3 * n / 4, created).await;
    // Killed while it writes: the replica the Lease names (renewed within the lease) has a
    // bypass count that moved since the last scrape of it. Read again at every poll, in case
    // the Lease changes hands meanwhile. A sync point only: the audit log judges.
    let bypasses = |g: &GuardProcess| metric_sum(&g.metrics(), "initguard_bypasses_total", &[]);
    let mut last: Vec<f64> = replicas.iter().map(|(g, _)| bypasses(g)).collect();
    let index = eventually(
        "the replica holding the Lease writing after the crash",
        || {
            let lease = tb.get("lease", LOCK.0, LOCK.1)?;
            let renewed = timestamp(lease["spec"]["renewTime"].as_str()?);
            let fresh =
                jiff::Timestamp::now() < renewed + jiff::SignedDuration::try_from(LEASE).ok()?;
            let holder = lease["spec"]["holderIdentity"].as_str()?;
            let index = replicas
                .iter()
                .position(|(g, _)| holder.starts_with(&format!("{}_", g.name)))?;
            let now = bypasses(&replicas[index].0);
            let moved = now > last[index];
            last[index] = now;
            (fresh && moved).then_some(index)
        },
    )
    .await;
    let (leader, leader_user) = replicas.remove(index);
    leader.kill();
    let leader_killed = jiff::Timestamp::now();
    let (survivor, survivor_user) = replicas.remove(0);

    creating
        .await
        .unwrap_or_else(|e| panic!("the burst's creator failed: {e}"));
    until_reached("burst pods bypassed", n, || bypassed(&api)).await;
    let rss_after_burst = survivor
        .rss_kib()
        .unwrap_or_else(|| panic!("the survivor is gone:\n{}", survivor.log_text()));

    // The control plane crashes again while the webhook is bypassed; a witness pod created
    // after it shows the survivor watching and writing again.
    let second_crash = crash(&tb).await;
    let after_crash = get_configuration(&tb, &bed.name);
    assert_eq!(
        after_crash["webhooks"], bypassed_configuration["webhooks"],
        "the bypassed entry is as it was before the crash"
    );
    create_pod(&tb, &bed.apps, "admitted-after-crash", true)
        .unwrap_or_else(|e| panic!("an opted-in pod after the crash (the bypass holds): {e}"));
    create_pod(&tb, &bed.apps, "plain-after-crash", false)
        .expect_err("a pod that did not opt in still goes to the dead webhook");
    tb.gated_pod(NS, "witness", true, &[GATE]);
    eventually("the witness bypassed after the second crash", || {
        tb.gates(NS, "witness").is_empty().then_some(())
    })
    .await;
    let rss_after_second_crash = survivor
        .rss_kib()
        .unwrap_or_else(|| panic!("the survivor is gone:\n{}", survivor.log_text()));

    // The owner comes back: the entry is restored exactly, not before restoreGrace.
    let revived = jiff::Timestamp::now();
    bed.revive_owner();
    eventually(
        "the entry restored exactly after the owner came back",
        || {
            let now = get_configuration(&tb, &bed.name);
            (now["webhooks"] == bed.baseline["webhooks"]
                && now["metadata"]["annotations"].get(RECORD).is_none())
            .then_some(())
        },
    )
    .await;
    let rss_after_restore = survivor
        .rss_kib()
        .unwrap_or_else(|| panic!("the survivor is gone:\n{}", survivor.log_text()));
    survivor.stop();

    // The judge: the server's record.
    let audit = tb.audit();
    let since = |a: &Audit| timestamp(&a.received) >= started;
    let judged = |a: &Audit| {
        since(a)
            && ((a.namespace == NS && a.resource == "pods")
                || (a.resource == "validatingwebhookconfigurations" && a.name == bed.name))
    };
    // Every write by the replica holding the Lease, within its lease.
    let writes = guard_writes_by_lease_holders(&audit, LOCK, Some(LEASE), judged);
    let mut removals: BTreeMap<&str, usize> = BTreeMap::new();
    for w in writes.iter().filter(|w| w.resource == "pods") {
        assert_eq!(w.verb, "patch", "the guard only patches pods: {w:#?}");
        if w.ok() {
            *removals.entry(w.name.as_str()).or_default() += 1;
        }
    }
    let twice: Vec<_> = removals.iter().filter(|(_, k)| **k > 1).collect();
    assert!(twice.is_empty(), "pods patched more than once: {twice:?}");
    // The leader's patches its death cut short: the server saw the connection close
    // ("context canceled", 504) and may have applied them all the same. (The server may
    // read a request a dead client sent after the kill: no time bound.)
    let cut_short: std::collections::BTreeSet<&str> = writes
        .iter()
        .filter(|w| w.resource == "pods" && w.user == leader_user && w.code == 504)
        .map(|w| w.name.as_str())
        .collect();
    // The objects: every burst pod lost the listed gate once and kept the unlisted one.
    let pods = api
        .list(&ListParams::default().labels(&format!("app={NS}")))
        .await
        .unwrap_or_else(|e| panic!("listing the burst: {e}"));
    assert_eq!(pods.items.len(), n, "every burst pod is there");
    let (mut unaudited, mut applied_cut_short) = (0, 0);
    for pod in &pods.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        assert_eq!(
            pod_gates(pod),
            [HOLD],
            "{name}: only the listed gate removed"
        );
        let value = serde_json::to_value(pod).unwrap_or_else(|e| panic!("{name}: {e}"));
        let recorded = records(&value);
        assert!(
            recorded.len() == 1
                && recorded[0].initializer == GATE
                && recorded[0].reason == "deadline",
            "{name}: one deadline record of {GATE}: {recorded:?}"
        );
        if cut_short.contains(name.as_str()) && !removals.contains_key(name.as_str()) {
            applied_cut_short += 1;
        } else if !removals.contains_key(name.as_str()) {
            // A patch the killed server applied but did not log: its own record of the
            // pod's last write (managedFields, whole seconds) is from before the kill.
            unaudited += 1;
            let written = pod
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .filter_map(|f| f.time.as_ref())
                .map(|t| t.0)
                .max()
                .unwrap_or_else(|| panic!("{name}: no managedFields time"));
            assert!(
                written <= first_crash_started + jiff::SignedDuration::from_secs(1),
                "{name}: bypassed at {written} with no audited patch, after the first crash \
                 began ({first_crash_started})"
            );
        }
    }
    // Two configuration writes: the bypass, held across both crashes, and the restore,
    // restoreGrace after the owner came back (the server's clock, which this machine shares).
    let mut configuration_patches: Vec<&&Audit> = writes
        .iter()
        .filter(|w| w.resource == "validatingwebhookconfigurations" && w.ok())
        .collect();
    configuration_patches.sort_by(|a, b| a.received.cmp(&b.received));
    assert_eq!(
        configuration_patches.len(),
        2,
        "the entry written twice, bypass and restore: {writes:#?}"
    );
    let restored_at = timestamp(&configuration_patches[1].received);
    assert!(
        restored_at >= revived + jiff::SignedDuration::from_secs(RESTORE_GRACE_S as i64),
        "restored at {restored_at}, less than restoreGrace after the owner came back \
         ({revived}): the bypass did not hold"
    );
    // How close to its death the leader last wrote (reported, not bounded: machine load).
    let leader_last = writes
        .iter()
        .filter(|w| w.user == leader_user && timestamp(&w.received) <= leader_killed)
        .map(|w| timestamp(&w.received))
        .max()
        .unwrap_or_else(|| panic!("the leader never wrote"));
    let by_survivor_after = writes
        .iter()
        .filter(|w| w.user == survivor_user && timestamp(&w.received) > leader_killed)
        .count();
    assert!(
        by_survivor_after > 0,
        "the survivor wrote after the leader's death"
    );
    // Memory, from the kernel: not grown across the restarts (the soak's bound).
    for (when, kib) in [
        ("the second crash", rss_after_second_crash),
        ("the restore", rss_after_restore),
    ] {
        assert!(
            kib <= 2 * rss_after_burst,
            "the survivor's RSS grew to {kib} KiB after {when}, from {rss_after_burst} KiB \
             after the burst"
        );
    }
    let guard_requests: Vec<&Audit> = audit
        .iter()
        .filter(|a| since(a) && (a.user == GUARD_USER || a.user == GUARD_USER_2))
        .collect();
    let refused = guard_requests
        .iter()
        .filter(|a| a.is_write() && !a.ok())
        .count();
    let mut refusals: BTreeMap<i64, usize> = BTreeMap::new();
    for a in guard_requests.iter().filter(|a| a.is_write() && !a.ok()) {
        *refusals.entry(a.code).or_default() += 1;
    }
    let relists = guard_requests.iter().filter(|a| a.verb == "list").count();
    let watches = guard_requests.iter().filter(|a| a.verb == "watch").count();
    println!(
        "faults: {n} due pods; faults injected: 2 control-plane crashes and 1 leader killed\n\
         {first_crash}{second_crash}\
         guard writes: {} accepted, {refused} refused (by code {refusals:?}); {relists} lists \
         and {watches} watches by the guard; {} pods bypassed with the patch unaudited (a \
         killed server's last events); the leader's kill cut {} patches short, {applied_cut_short} \
         of them applied; the leader's last write was received \
         {:.0} ms before its kill, the survivor wrote {by_survivor_after} times after it; creates \
         retried by the test: {}\n\
         survivor RSS: {rss_after_burst} KiB after the burst, {rss_after_second_crash} KiB \
         after the second crash, {rss_after_restore} KiB after the restore",
        writes.iter().filter(|w| w.ok()).count(),
        unaudited,
        cut_short.len(),
        leader_killed.duration_since(leader_last).as_secs_f64() * 1000.0,
        creator.retried.load(Ordering::Relaxed),
    );

    tb.kubectl(&[
        "delete",
        "clusterrolebinding",
        &format!("{}-initguard-webhooks-2", bed.prefix),
        "--ignore-not-found",
    ]);
    bed.cleanup();
    tb.kubectl(&["delete", "namespace", NS, "--wait=false"]);
}
