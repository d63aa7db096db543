//! The pileup the guard exists to prevent: creators that keep making pods while an initializer's
//! owner is dead.

use initguard_sim::SimClients as _;
use std::time::Duration;

use initguard::config::Mechanism;
use initguard_sim::controllers::{
    Creator, CreatorHandle, CreatorKind, CreatorOptions, pending_names, pile_report,
};

use crate::harness::*;
use initguard_test_support::pod;
use serde_json::json;

legacy_versions!(
    legacy_job_piles_up_without_the_guard,
    legacy_job_pileup_is_prevented
);

/// Legacy CREATEs time out after this long (504, pod kept) where a test needs the pile to
/// grow quickly; otherwise the simulator's default, a real server's 30 s.
const SHORT_CREATE_TIMEOUT: Duration = Duration::from_secs(2);

async fn legacy_cluster(create_timeout: Option<Duration>) -> Cluster {
    Cluster::start_with(Mechanism::Initializers, |o| {
        o.legacy_initializers = vec![SIDECAR.to_owned()];
        if let Some(timeout) = create_timeout {
            o.create_timeout = timeout;
        }
    })
    .await
}

/// A Job-like creator of one pod, opted in, re-creating 100 ms after a failed CREATE.
fn job(c: &Cluster, name: &str) -> (CreatorHandle, String) {
    let mut options = CreatorOptions::job("default", name, 1);
    options.kind = CreatorKind::Job {
        parallelism: 1,
        retry_backoff: Duration::from_millis(100),
    };
    options.opt_in_label = Some(OPT_IN.to_owned());
    let key = options.controller_key();
    (
        Creator::start(c.sim.kube_config("job-controller"), options).unwrap(),
        key,
    )
}

/// Waiting pods of the controller `key` in the store right now.
fn pile(c: &Cluster, key: &str) -> usize {
    pile_report(&c.sim, c.mechanism)
        .per_controller
        .get(key)
        .copied()
        .unwrap_or(0)
}

/// Without the guard: the Job controller cannot see its uninitialized pod, its CREATE times
/// out, it creates another, and the pile grows (kubernetes/kubernetes#48893).
async fn legacy_job_piles_up_without_the_guard() {
    let c = legacy_cluster(Some(SHORT_CREATE_TIMEOUT)).await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let (_job, key) = job(&c, "backfill");
    until("more than 3 pods piled up for the Job", || {
        pile(&c, &key) > 3
    })
    .await;
}

/// With the guard (owner down for 500 ms, deadline 1 s), every Job gets its pod on its first
/// CREATE: the guard initializes the pod the CREATE waits on, so no CREATE times out and no
/// Job makes a second pod. Causal, whatever the machine's load: the CREATE waits as long as
/// a real server lets it (30 s). How many pods wait at once under a short create timeout is
/// a speed figure: the pileup benchmark's (benches/RESULTS.md, section 1).
async fn legacy_job_pileup_is_prevented() {
    let c = legacy_cluster(None).await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let config = config(
        Mechanism::Initializers,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}",
            owned(SIDECAR, "1s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, false).await;
    let jobs: Vec<(CreatorHandle, String)> =
        (0..3).map(|i| job(&c, &format!("backfill-{i}"))).collect();

    until("every Job to have its pod running", || {
        jobs.iter().all(|(job, _)| job.stats().visible_pods() == 1)
    })
    .await;
    let pods = c.sim.list_objects("pods");
    for (job, key) in &jobs {
        let name = key.rsplit('/').next().unwrap();
        let own: Vec<_> = pods
            .iter()
            .filter(|p| p["metadata"]["labels"]["job-name"] == name)
            .collect();
        assert_eq!(own.len(), 1, "{key} has {} pods", own.len());
        assert!(pending_names(own[0], c.mechanism).is_empty());
        assert_eq!(job.stats().create_timeouts(), 0, "{key}");
    }
    c.finish(guard).await;
}

/// Scheduling gates, a CronJob-like creator every 200 ms and a dead gate owner: the guard
/// bypasses every pod it makes, each once, for the owner (judged by the server's history).
/// How many pods wait at once while it keeps up is a speed figure: the pileup benchmark's
/// (benches/RESULTS.md, section 1: never more than one per controller).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_cron_job_pods_are_each_bypassed_once() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "defaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}",
            owned(SIDECAR, "1h")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, false).await;
    let (cron, key) = cron_job(&c, "report", true);
    until("the CronJob to make 10 pods", || {
        cron.stats().creates_issued() >= 10
    })
    .await;
    cron.stop().await;
    until("every pod of the CronJob bypassed", || pile(&c, &key) == 0).await;
    // Pods, not Jobs: stopping the creator may leave a Job without its pod.
    let created = c.sim.list_objects("pods").len();
    let mut bypassed: Vec<_> = c
        .removals()
        .into_iter()
        .filter(|r| r.user == GUARD_USER)
        .collect();
    assert!(
        bypassed
            .iter()
            .all(|r| r.reason.as_deref() == Some("owner_down")),
        "{bypassed:?}"
    );
    bypassed.sort_by(|a, b| a.pod.cmp(&b.pod));
    bypassed.dedup_by(|a, b| a.pod == b.pod);
    assert_eq!(
        (bypassed.len(), c.removals().len()),
        (created, created),
        "each of the {created} pods bypassed once, by the guard"
    );
    c.finish(guard).await;
}

/// A healthy owner's batch is never a pile. A parallel Job creates 10 opted-in
/// gated pods at once while the gate's owner is up and needs 1.5 s per pod; with
/// `pileup: {threshold: 3, action: bypass}` (minWait 10s by default) the guard writes nothing
/// and the owner initializes every pod itself. Judged by the server's request log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_parallel_job_is_never_a_pile() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let _owner = c
        .owner(SIDECAR, |o| o.latency = Duration::from_millis(1500))
        .await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "pileup: {{ threshold: 3, action: bypass }}\ninitializers:\n{}",
            owned(SIDECAR, "1m")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, true).await;
    let mut options = CreatorOptions::job("default", "parallel", 10);
    options.opt_in_label = Some(OPT_IN.to_owned());
    options.gates = vec![SIDECAR.to_owned()];
    let key = options.controller_key();
    let job = Creator::start(c.sim.kube_config("job-controller"), options).unwrap();

    until("the Job to create its 10 pods", || {
        job.stats().creates_issued() == 10 && c.sim.list_objects("pods").len() >= 10
    })
    .await;
    until("every gate of the Job's pods to be removed", || {
        pile(&c, &key) == 0
    })
    .await;
    let patches: Vec<_> = c
        .guard_writes()
        .into_iter()
        .filter(|r| r.verb == "patch")
        .collect();
    assert_eq!(patches, vec![], "the guard patched a healthy batch");
    assert!(
        c.removals().iter().all(|r| r.user != GUARD_USER),
        "{:?}",
        c.removals()
    );
    // The owner did the work, on all 10 pods, by the server's record (its own counter is bumped
    // only once each response is back, after the test may already see the gates gone).
    let by_owner = c
        .removals()
        .iter()
        .filter(|r| r.user == owner_user(SIDECAR))
        .count();
    assert_eq!(by_owner, 10, "{:?}", c.removals());
    assert_eq!(job.stats().creates_issued(), 10);
    c.finish(guard).await;
}

/// A CronJob-like creator every 200 ms (each run a Job, each Job one gated pod) with `gates`,
/// opted in or not, run by the CronJob controller's user.
fn cron_job(c: &Cluster, name: &str, opted_in: bool) -> (CreatorHandle, String) {
    let mut options = CreatorOptions::cron_job("default", name, Duration::from_millis(200));
    options.opt_in_label = opted_in.then(|| OPT_IN.to_owned());
    options.gates = vec![SIDECAR.to_owned()];
    let key = options.controller_key();
    let creator = Creator::start(c.sim.kube_config("cronjob-controller"), options).unwrap();
    (creator, key)
}

/// A real CronJob creates a Job per run and the Job its pod, so grouping by
/// a pod's own controller sees piles of one. With the gate's owner dead and
/// `pileup.action: alert`, the CronJob's pods are one pileup of that CronJob: the guard's
/// pileup gauges match the waiting pods counted in the server's store, and `/status` names
/// the CronJob (and the Job in between) for each of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_job_jobs_pods_are_one_pileup_of_the_cron_job() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "pileup: {{ threshold: 3, minWait: 500ms, action: alert }}\ninitializers:\n{}",
            owned(SIDECAR, "10m")
        ),
    );
    let guard = c.guard(&config).await;
    let (cron, key) = cron_job(&c, "report", false);
    until("6 waiting pods of the CronJob", || pile(&c, &key) >= 6).await;
    cron.stop().await;
    // Every waiting pod in the store belongs to one of the CronJob's Jobs.
    let report = pile_report(&c.sim, c.mechanism);
    let waiting = pile(&c, &key);
    assert_eq!(report.stored_waiting_pods, waiting, "{report:?}");
    assert_eq!(
        c.sim.list_objects("jobs").len(),
        waiting,
        "one Job per pod expected"
    );
    let labels = [("initializer", SIDECAR)];
    let text = eventually_async(
        format!("one pileup of {waiting} pods in /metrics"),
        || async {
            let (_, text) = http_get(guard.addr, "/metrics").await;
            let piles = metric_series(&text, "initguard_pileups", &labels);
            let max = metric_series(&text, "initguard_pileup_max_waiting_pods", &labels);
            (piles == Some(1.0) && max == Some(waiting as f64)).then_some(text)
        },
    )
    .await;
    assert_eq!(
        metric_sum(&text, "initguard_waiting_pods", &labels),
        waiting as f64
    );
    let (status, body) = http_get(guard.addr, "/status").await;
    assert_eq!(status, 200);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    let pods = body["waitingPods"].as_array().unwrap();
    assert_eq!(pods.len(), waiting, "{body}");
    for pod in pods {
        assert_eq!(pod["controller"]["kind"], "CronJob", "{pod}");
        assert_eq!(pod["controller"]["name"], "report", "{pod}");
        assert_eq!(pod["via"]["kind"], "Job", "{pod}");
    }
    // Alert only: nothing written but the explanations of long waits (InitializerWaiting
    // Events). Jobs are read under the shipped RBAC (list, then watch).
    let writes: Vec<_> = c
        .guard_writes()
        .into_iter()
        .filter(|w| w.resource != "events")
        .collect();
    assert_eq!(writes, vec![], "the guard wrote with action alert");
    let other: Vec<_> = c
        .sim
        .list_objects("events")
        .into_iter()
        .filter(|e| e["reason"] != "InitializerWaiting")
        .collect();
    assert_eq!(
        other,
        Vec::<serde_json::Value>::new(),
        "only explanations of waits"
    );
    let job_reads: Vec<_> = c
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.user == GUARD_USER && r.resource == "jobs")
        .map(|r| (r.verb, r.status))
        .collect();
    assert!(
        job_reads.contains(&("list".to_owned(), 200))
            && job_reads.contains(&("watch".to_owned(), 200)),
        "{job_reads:?}"
    );
    c.finish(guard).await;
}

/// The CronJob pileup with `pileup.action: bypass`: the gate's owner is dead but its grace is an
/// hour and the deadline ten minutes, so only the pileup rule can act. Grouped by Job, each
/// pile has one pod and nothing would ever be bypassed; grouped by the CronJob, the pile is
/// bypassed as it ages, until fewer than `threshold` pods are left, and every bypass is a
/// `pileup`. Judged on the server's store and history, by the end state: how large the pile
/// grows meanwhile depends on the machine's speed, which no correctness test bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_job_pile_with_pileup_bypass_ends_below_the_threshold() {
    const THRESHOLD: usize = 3;
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "defaults: {{ ownerDownGrace: 1h }}\npileup: {{ threshold: {THRESHOLD}, minWait: 500ms, action: bypass }}\ninitializers:\n{}",
            owned(SIDECAR, "10m")
        ),
    );
    let guard = c.guard(&config).await;
    let (cron, key) = cron_job(&c, "report", true);
    until("10 Jobs of the CronJob and a pileup bypass", || {
        c.sim.list_objects("jobs").len() >= 10 && c.removals().iter().any(|r| r.user == GUARD_USER)
    })
    .await;
    cron.stop().await;
    // Below the threshold, and no bypass committed between two looks (the guard bypasses a
    // pile in one decision, patch after patch).
    let mut seen = usize::MAX;
    until(
        "the CronJob's pile below the threshold, no bypass in flight",
        || {
            let removed = c.removals().len();
            let quiet = removed == seen;
            seen = removed;
            quiet && pile(&c, &key) < THRESHOLD
        },
    )
    .await;
    // One snapshot of the store: every pod still waiting, below the threshold, or freed by
    // one `pileup` record (the judge's own reader).
    let pods = c.sim.list_objects("pods");
    let waiting = pods
        .iter()
        .filter(|p| !pod::pending(c.mechanism, p).is_empty())
        .count();
    assert!(waiting < THRESHOLD, "{waiting} pods still waiting");
    for p in pods
        .iter()
        .filter(|p| pod::pending(c.mechanism, p).is_empty())
    {
        let records = pod::records(p);
        assert!(
            records.len() == 1 && records[0].reason == "pileup",
            "{}: freed without one pileup record: {records:?}",
            p["metadata"]["name"]
        );
    }
    let bypasses: Vec<_> = c
        .removals()
        .into_iter()
        .filter(|r| r.user == GUARD_USER)
        .collect();
    assert!(
        bypasses
            .iter()
            .all(|r| r.reason.as_deref() == Some("pileup")),
        "{bypasses:?}"
    );
    assert_eq!(
        bypasses.len(),
        c.removals().len(),
        "only the guard removed the gate"
    );
    c.finish(guard).await;
}

/// A pod of the Job `job` (uid `job_uid`) in `default`, gated by [`SIDECAR`], opted in or not.
async fn job_pod(c: &Cluster, name: &str, job: &str, job_uid: &str, opted_in: bool) {
    c.pod_with("default", name, opted_in, &[SIDECAR], |pod| {
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
            "controller": true }]);
    })
    .await;
}

/// With `pileup.action: bypass`, the pod that completes a pile makes its older siblings due
/// as well: they were decided while the pile was too small, and are decided again when it
/// reaches the threshold (nothing else would wake them before their deadline). The gate's
/// owner is dead but its grace is an hour and the deadline ten minutes, so only the pileup
/// rule can act; all three pods become due at the same instant and each is bypassed once, as
/// a `pileup` (judged by the server's history).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_that_completes_a_pile_makes_its_older_siblings_due() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "defaults: {{ ownerDownGrace: 1h }}\npileup: {{ threshold: 3, minWait: 500ms, action: bypass }}\ninitializers:\n{}",
            owned(SIDECAR, "10m")
        ),
    );
    let guard = c.guard(&config).await;
    let names = ["run-a", "run-b", "run-c"];
    for name in names {
        job_pod(&c, name, "batch-run", "batch-run-uid", true).await;
    }
    until("every pod of the pile bypassed", || {
        names.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    for name in names {
        let bypasses = c.bypasses_of(&format!("default/{name}"));
        assert!(
            bypasses.len() == 1 && bypasses[0].reason.as_deref() == Some("pileup"),
            "{name}: {bypasses:?}"
        );
    }
    c.finish(guard).await;
}

/// Jobs first seen in the guard's initial list keep their CronJob: pods those Jobs create
/// afterwards join the CronJob's pile (the end of a list forgets only the Jobs it did not
/// show). Judged by `/status` once the server's log shows the guard watching Jobs, which its
/// watcher starts only after the control loop has taken in the end of the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_jobs_listed_at_start_join_the_cron_jobs_pile() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let mut jobs = Vec::new();
    for name in ["nightly-1", "nightly-2"] {
        let job = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": { "name": name, "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
                "uid": "cron-job-nightly", "controller": true }] },
        });
        let job = c
            .admin_post("/apis/batch/v1/namespaces/default/jobs", &job)
            .await;
        let uid = job["metadata"]["uid"].as_str().unwrap().to_owned();
        jobs.push((name, uid));
    }
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "pileup: {{ threshold: 3, action: alert }}\ninitializers:\n{}",
            owned(SIDECAR, "10m")
        ),
    );
    let guard = c.guard(&config).await;
    until("the guard watching Jobs after its initial list", || {
        c.sim
            .requests()
            .iter()
            .any(|r| r.user == GUARD_USER && r.resource == "jobs" && r.verb == "watch")
    })
    .await;
    for (job, uid) in &jobs {
        job_pod(&c, &format!("{job}-pod"), job, uid, false).await;
    }
    let body = eventually_async("both pods waiting in /status", || async {
        let (_, body) = http_get(guard.addr, "/status").await;
        let body: serde_json::Value = serde_json::from_str(&body).ok()?;
        (body["waitingPods"].as_array()?.len() == 2).then_some(body)
    })
    .await;
    for pod in body["waitingPods"].as_array().unwrap() {
        assert_eq!(pod["controller"]["kind"], "CronJob", "{pod}");
        assert_eq!(pod["controller"]["name"], "nightly", "{pod}");
        assert_eq!(pod["via"]["kind"], "Job", "{pod}");
    }
    c.finish(guard).await;
}

/// `pileup.minWait` under clock skew: the simulated server's clock runs `offset_secs` from the
/// guard's. A pile of three pods of one Job (owner dead, grace an hour, deadline ten minutes:
/// only the pileup rule acts) is bypassed no sooner than `minWait` after its last pod's
/// `creationTimestamp` on the server's own clock, when the third pod has waited long enough,
/// and not half the skew later (judged from the object history). A guard that compared the
/// server's timestamps with its own clock would be a minute early behind, a minute late ahead.
async fn a_pile_is_never_bypassed_early_under_skew(offset_secs: i64) {
    let offset = jiff::SignedDuration::from_secs(offset_secs);
    let c = Cluster::start_with(Mechanism::SchedulingGates, |o| o.clock_offset = offset).await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let min_wait = Duration::from_secs(2);
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "defaults: {{ ownerDownGrace: 1h }}\npileup: {{ threshold: 3, minWait: 2s, action: bypass }}\ninitializers:\n{}",
            owned(SIDECAR, "10m")
        ),
    );
    let guard = c.guard(&config).await;
    let names = ["skew-a", "skew-b", "skew-c"];
    for name in names {
        job_pod(&c, name, "skewed-run", "skewed-run-uid", true).await;
    }
    until("every pod of the pile bypassed", || {
        names.iter().all(|n| c.pending("default", n).is_empty())
    })
    .await;
    let last_created = names
        .iter()
        .map(|n| c.created("default", n).timestamp)
        .max()
        .expect("three pods");
    let due = jiff::Timestamp::try_from(last_created + min_wait).expect("a timestamp");
    for name in names {
        let bypasses = c.bypasses_of(&format!("default/{name}"));
        assert!(
            bypasses.len() == 1 && bypasses[0].reason.as_deref() == Some("pileup"),
            "{name}: {bypasses:?}"
        );
        assert_on_time_under_skew(name, bypasses[0].time, offset_secs, due);
    }
    c.finish(guard).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pile_is_never_bypassed_early_when_the_server_clock_is_behind() {
    a_pile_is_never_bypassed_early_under_skew(-60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pile_is_never_bypassed_late_by_the_skew_when_the_server_clock_is_ahead() {
    a_pile_is_never_bypassed_early_under_skew(60).await;
}
