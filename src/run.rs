//! `initguard run`: wires watches, owners, policy, actuator, leader election and the HTTP server
//! into one control loop.
//!
//! The loop owns every decision. It re-decides a pod on its own events, on owner state changes,
//! on leadership changes and at the pod's next wake-up (a timer keyed by the policy's answer, not
//! a fixed tick). Only one bypass per pod is in flight at a time, and a bypass stays "expected"
//! until the pod watch shows it, so a stale event can never trigger a second write.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::actuator::{Actuator, BypassJob, Report};
use crate::client::Connection;
use crate::config::Config;
use crate::discovery::Problems;
use crate::jobs::cron_job_of;
use crate::metrics::{Metrics, MetricsError};
use crate::owners::{Owners, owner_target};
use crate::pod::SlimPod;
use crate::policy::{self, ControllerRef, Environment, OwnerState};
use crate::supervise::{self, Failures};
use crate::tracker::{PodKey, Tracker};

/// How often the loop proves it is alive even when nothing happens.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// A control loop silent for this long is reported unhealthy by /healthz.
pub const STALL_AFTER: Duration = Duration::from_secs(20);
/// An expected bypass not seen in the pod watch by then is forgotten (the watch may be down);
/// the pod is re-decided and any new patch still tests the pod's current state.
const EXPECTATION_TTL: Duration = Duration::from_secs(30);
/// After a bypass failed for good, try that pod again after this long.
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(15);
/// After a write that found no pod, or that the API server rejected although the pod had not
/// changed, decide again only after this pause: at once would repeat it in a tight loop.
const RETRY_STALE_AFTER: Duration = Duration::from_secs(2);

/// Errors that stop the guard.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// State shared between the control loop and the HTTP endpoints.
pub struct Shared {
    pub config: Arc<Config>,
    pub metrics: Arc<Metrics>,
    pub owners: Owners,
    pub identity: String,
    leader: watch::Receiver<bool>,
    /// Why this replica cannot take part in the leader election, if it cannot.
    problems: Problems,
    tracker: Mutex<Tracker>,
    pods_synced: AtomicBool,
    last_progress: Mutex<Instant>,
    wedged: AtomicBool,
    stall_after: Duration,
    /// Panics of the guard's tasks: any fails /healthz.
    pub failures: Failures,
    /// Serializes scrapes: each resets and refills the gauges before rendering.
    pub(crate) scrape: Mutex<()>,
}

impl Shared {
    /// The waiting pods (held briefly: the control loop needs the same lock).
    pub fn tracker(&self) -> MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this replica may write now.
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Whether no task has panicked and the control loop made progress within the stall
    /// window.
    pub fn healthy(&self) -> bool {
        self.failures.list().is_empty()
            && self
                .last_progress
                .lock()
                .map(|t| t.elapsed() < self.stall_after)
                .unwrap_or(false)
    }

    /// What initial lists are still missing (empty when ready). Owners never count: an owner
    /// not observed (yet) is unknown, which is safe (never `owner_down`); `/readyz` lists them.
    pub fn not_ready(&self) -> Vec<String> {
        let mut missing = Vec::new();
        if !self.pods_synced.load(Ordering::Acquire) {
            missing.push("pods: initial list not complete".to_owned());
        }
        // Owners not observed yet are unknown, not missing (never owner_down); /readyz lists
        // them in its 200 body. A Deployment API the server does not serve is missing.
        missing.extend(
            self.owners
                .problems()
                .into_iter()
                .map(|p| format!("owner {p}")),
        );
        missing.extend(self.problems.list());
        missing
    }

    /// Test hook: freeze (true) or release (false) the control loop, to exercise /healthz.
    pub fn set_wedged(&self, wedged: bool) {
        self.wedged.store(wedged, Ordering::Release);
    }

    fn progress(&self) {
        if let Ok(mut t) = self.last_progress.lock() {
            *t = Instant::now();
        }
    }
}

/// The policy's view of the world outside a pod.
pub struct Env<'a> {
    pub tracker: &'a Tracker,
    pub owners: &'a Owners,
    /// The instant being decided, which pile starts are expressed against.
    pub now: SystemTime,
}

impl Environment for Env<'_> {
    fn owner_state(&self, initializer: &str) -> OwnerState {
        self.owners.state(initializer)
    }
    fn pile_start(
        &self,
        controller: &ControllerRef,
        initializer: &str,
        k: u32,
    ) -> Option<SystemTime> {
        self.tracker
            .pile_start(&controller.uid, initializer, k, self.now)
    }
}

/// A running guard.
pub struct Guard {
    pub shared: Arc<Shared>,
    /// Where the HTTP endpoints listen.
    pub addr: SocketAddr,
    cancel: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Leader election and actuator, aborted by [`Guard::kill`].
    aborts: Vec<tokio::task::AbortHandle>,
}

impl Guard {
    /// Start everything: owners, leader election, actuator, pod watch, control loop, HTTP.
    /// Pass a [`Connection`] from [`crate::client::connect`] so that waits are measured
    /// against the API server's clock; a bare client counts waits from first sight.
    pub async fn start(
        client: impl Into<Connection>,
        config: Arc<Config>,
    ) -> Result<Guard, RunError> {
        Self::start_with(client, config, crate::leader::identity(), STALL_AFTER).await
    }

    /// As [`Guard::start`] with an explicit identity and stall window (tests).
    pub async fn start_with(
        client: impl Into<Connection>,
        config: Arc<Config>,
        identity: String,
        stall_after: Duration,
    ) -> Result<Guard, RunError> {
        let Connection { client, clock } = client.into();
        // Fail before any task starts, so a taken port leaves nothing running.
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| RunError::Listen {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| RunError::Listen {
            addr: config.listen,
            source,
        })?;
        let cancel = CancellationToken::new();
        let metrics = Arc::new(Metrics::new(&config)?);
        let failures = Failures::default();
        let owners = Owners::spawn(
            client.clone(),
            &config,
            metrics.clone(),
            &failures,
            cancel.child_token(),
        );
        // Not a child of `cancel`: the lease is released only after in-flight patches drain.
        let leader_cancel = CancellationToken::new();
        let problems = Problems::default();
        let (renewed, renewed_rx) = watch::channel(None);
        let (leader, election) = crate::leader::elect(
            client.clone(),
            &config.leader_election,
            identity.clone(),
            metrics.clone(),
            problems.clone(),
            renewed,
            leader_cancel.clone(),
        );
        let leader_task = supervise::spawn(&failures, "leader election", election);
        let fence =
            crate::actuator::Fence::new(&config.leader_election, leader.clone(), renewed_rx);
        let shared = Arc::new(Shared {
            config: config.clone(),
            metrics: metrics.clone(),
            owners: owners.clone(),
            identity: identity.clone(),
            leader: leader.clone(),
            problems,
            tracker: Mutex::new(Tracker::new(config.clone()).with_clock(clock)),
            pods_synced: AtomicBool::new(false),
            last_progress: Mutex::new(Instant::now()),
            wedged: AtomicBool::new(false),
            stall_after,
            failures: failures.clone(),
            scrape: Mutex::new(()),
        });
        let server = supervise::spawn(
            &failures,
            "http server",
            crate::server::serve(listener, shared.clone(), cancel.child_token()),
        );

        let (report_tx, report_rx) = mpsc::unbounded_channel();
        let actuator_cancel = CancellationToken::new();
        let (actuator, worker) = Actuator::new(
            client.clone(),
            config.clone(),
            metrics,
            fence,
            identity,
            report_tx,
            actuator_cancel.clone(),
        );
        let actuator_task = supervise::spawn(&failures, "actuator", worker);
        let control = ControlLoop {
            shared: shared.clone(),
            actuator,
            wakes: Wakes::default(),
            in_flight: HashMap::new(),
            dry_run_done: HashSet::new(),
            init_seen: None,
            jobs_seen: None,
            backlog: VecDeque::new(),
            backlog_set: HashSet::new(),
        };
        let loop_cancel = cancel.clone();
        let aborts = vec![leader_task.abort_handle(), actuator_task.abort_handle()];
        let main = supervise::spawn(&failures, "control loop", async move {
            control.run(client, report_rx, leader, loop_cancel).await;
            // Decisions stop first; then in-flight patches drain; then the lease is released.
            actuator_cancel.cancel();
            let _ = actuator_task.await;
            leader_cancel.cancel();
            let _ = leader_task.await;
        });
        info!(%addr, mechanism = config.mechanism.as_str(), dry_run = config.dry_run, "initguard started");
        Ok(Guard {
            shared,
            addr,
            cancel,
            tasks: vec![main, server],
            aborts,
        })
    }

    /// Stop taking decisions, finish in-flight patches (bounded), release the lease.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }

    /// Die abruptly, as on SIGKILL: no draining, no lease release (failover tests).
    pub fn kill(self) {
        for task in &self.tasks {
            task.abort();
        }
        for task in &self.aborts {
            task.abort();
        }
        // Owner watchers only read; stop them too so nothing of this guard stays alive.
        self.cancel.cancel();
    }

    /// Run until SIGTERM/SIGINT or until a task panics, then shut down gracefully. Returns the
    /// panics (empty after a signal): the process must then fail, so that the kubelet or the
    /// Deployment restarts it.
    pub async fn run_until_signal(self) -> Vec<String> {
        let failures = self.shared.failures.clone();
        tokio::select! {
            _ = wait_for_signal() => info!("shutting down"),
            _ = failures.any() => error!("shutting down after a task panicked"),
        }
        self.shutdown().await;
        failures.list()
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the guard");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A bypass handed to the actuator and not yet seen done in the pod watch.
struct InFlight {
    uid: String,
    initializer: String,
    /// Count of `initializer` on the pod before the patch.
    count_before: usize,
    /// Set once the actuator reports success; the watch must then show it.
    written_at: Option<Instant>,
}

/// Per-pod wake-ups ordered by time.
#[derive(Default)]
struct Wakes {
    queue: BTreeSet<(SystemTime, PodKey)>,
    by_pod: HashMap<PodKey, SystemTime>,
}

impl Wakes {
    fn set(&mut self, key: &str, at: Option<SystemTime>) {
        if let Some(old) = self.by_pod.remove(key) {
            self.queue.remove(&(old, key.to_owned()));
        }
        if let Some(at) = at {
            self.queue.insert((at, key.to_owned()));
            self.by_pod.insert(key.to_owned(), at);
        }
    }

    /// Keeps the earlier of the current and the new wake-up.
    fn at_most(&mut self, key: &str, at: SystemTime) {
        if self.by_pod.get(key).is_none_or(|cur| at < *cur) {
            self.set(key, Some(at));
        }
    }

    fn next(&self) -> Option<SystemTime> {
        self.queue.first().map(|(t, _)| *t)
    }

    fn pop_due(&mut self, now: SystemTime) -> Vec<PodKey> {
        let mut due = Vec::new();
        while let Some((t, _)) = self.queue.first() {
            if *t > now {
                break;
            }
            if let Some((_, key)) = self.queue.pop_first() {
                self.by_pod.remove(&key);
                due.push(key);
            }
        }
        due
    }
}

struct ControlLoop {
    shared: Arc<Shared>,
    actuator: Actuator,
    wakes: Wakes,
    in_flight: HashMap<PodKey, InFlight>,
    /// (uid, initializer) already logged and counted in dry-run.
    dry_run_done: HashSet<(String, String)>,
    /// Waiting pods seen since the watch (re)started listing; None outside a relist.
    init_seen: Option<HashSet<PodKey>>,
    /// Jobs seen since the Jobs watch (re)started listing; None outside a relist.
    jobs_seen: Option<HashSet<String>>,
    /// Pods whose bypass did not fit the actuator queue, oldest first.
    backlog: VecDeque<PodKey>,
    backlog_set: HashSet<PodKey>,
}

impl ControlLoop {
    async fn run(
        mut self,
        client: kube::Client,
        mut reports: mpsc::UnboundedReceiver<Report>,
        mut leader: watch::Receiver<bool>,
        cancel: CancellationToken,
    ) {
        // Only informs the log; stops with the loop.
        let check = crate::jobs::check_cron_job_api(client.clone());
        let check_cancel = cancel.clone();
        supervise::spawn(&self.shared.failures, "cron job api check", async move {
            tokio::select! {
                _ = check => {}
                _ = check_cancel.cancelled() => {}
            }
        });
        let client_for_jobs = client.clone();
        let mut jobs = crate::jobs::watch_jobs(client.clone(), true);
        let api: Api<SlimPod> = Api::all(client);
        let mut pods = pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        let mut owner_changes = self.shared.owners.subscribe();
        // Beat well within the stall window, or an idle loop would look stalled.
        let beat = HEARTBEAT
            .min(self.shared.stall_after / 4)
            .max(Duration::from_millis(10));
        let mut heartbeat = tokio::time::interval(beat);
        loop {
            self.shared.progress();
            while self.shared.wedged.load(Ordering::Acquire) && !cancel.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let sleep = tokio::time::sleep_until(instant_of(self.wakes.next()));
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                Some(report) = reports.recv() => self.on_report(report),
                event = pods.next() => match event {
                    Some(Ok(event)) => self.on_pod_event(event),
                    Some(Err(e)) => {
                        self.shared.metrics.watch_restarted("pods");
                        warn!(error = %e, "pod watch failed; retrying with backoff");
                    }
                    None => {
                        warn!("pod watch ended");
                        break;
                    }
                },
                Some(event) = jobs.next() => match event {
                    Ok(event) => self.on_job_event(event),
                    Err(e) if crate::jobs::is_not_acceptable(&e) => {
                        info!("the server does not serve Job metadata alone; watching whole Jobs");
                        jobs = crate::jobs::watch_jobs(client_for_jobs.clone(), false);
                    }
                    Err(e) => {
                        self.shared.metrics.watch_restarted("jobs");
                        warn!(error = %e, "Job watch failed (pods of Jobs are grouped by their Job meanwhile); retrying with backoff");
                    }
                },
                Ok(()) = owner_changes.changed() => self.decide_all(),
                Ok(()) = leader.changed() => {
                    if *leader.borrow_and_update() {
                        self.decide_all();
                    }
                }
                _ = sleep => {
                    let due = self.wakes.pop_due(SystemTime::now());
                    for key in due {
                        self.decide(&key);
                    }
                }
                _ = heartbeat.tick() => self.expire_expectations(),
            }
        }
    }

    fn on_pod_event(&mut self, event: Event<SlimPod>) {
        let now = SystemTime::now();
        match event {
            Event::Init => self.init_seen = Some(HashSet::new()),
            Event::InitApply(pod) => {
                let key = pod.key();
                // Decided once at InitDone: deciding each pile as it grows is quadratic.
                self.record(&pod, now);
                if let Some(seen) = &mut self.init_seen {
                    seen.insert(key);
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.init_seen.take() {
                    let gone: Vec<PodKey> = {
                        let tracker = self.shared.tracker();
                        tracker
                            .pods()
                            .map(|(k, _)| k.clone())
                            .filter(|k| !seen.contains(k))
                            .collect()
                    };
                    for key in gone {
                        self.delete(&key, now);
                    }
                }
                // Every pod once, with the whole list known.
                self.shared.tracker().take_moved_earlier();
                self.decide_all();
                if !self.shared.pods_synced.swap(true, Ordering::AcqRel) {
                    info!(
                        waiting = self.shared.tracker().len(),
                        "initial pod list complete"
                    );
                }
            }
            Event::Apply(pod) => self.apply(&pod, now),
            Event::Delete(pod) => self.delete(&pod.key(), now),
        }
    }

    /// Take in which CronJob controls each Job. Pods that change pile are re-decided, and so
    /// are the other pods of a pile that became ready earlier; during a relist only once at its
    /// end, as for pods.
    fn on_job_event(&mut self, event: Event<ObjectMeta>) {
        match event {
            Event::Init => self.jobs_seen = Some(HashSet::new()),
            Event::InitApply(job) => {
                if let Some(uid) = job.uid.clone() {
                    self.shared.tracker().set_job_owner(&uid, cron_job_of(&job));
                    if let Some(seen) = &mut self.jobs_seen {
                        seen.insert(uid);
                    }
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.jobs_seen.take() {
                    let mut tracker = self.shared.tracker();
                    for uid in tracker.known_jobs() {
                        if !seen.contains(&uid) {
                            tracker.forget_job(&uid);
                        }
                    }
                }
                self.shared.tracker().take_moved_earlier();
                if self.shared.pods_synced.load(Ordering::Acquire) {
                    self.decide_all();
                }
            }
            Event::Apply(job) => {
                let Some(uid) = job.uid.as_deref() else {
                    return;
                };
                let moved = self.shared.tracker().set_job_owner(uid, cron_job_of(&job));
                for key in &moved {
                    self.decide(key);
                }
                self.decide_moved_earlier(&moved);
            }
            Event::Delete(job) => {
                if let Some(uid) = job.uid.as_deref() {
                    self.shared.tracker().forget_job(uid);
                }
            }
        }
    }

    /// Re-decide the pods of every controller whose pile became ready earlier, except `done`.
    fn decide_moved_earlier(&mut self, done: &[PodKey]) {
        let moved = self.shared.tracker().take_moved_earlier();
        if self.shared.config.pileup.action != crate::config::PileupAction::Bypass {
            return;
        }
        let done: HashSet<&PodKey> = done.iter().collect();
        for controller in moved {
            let siblings = self.shared.tracker().pods_of_controller(&controller);
            for sibling in siblings.iter().filter(|s| !done.contains(s)) {
                self.decide(sibling);
            }
        }
    }

    /// Take in a pod's state without deciding anything.
    fn record(&mut self, pod: &SlimPod, now: SystemTime) {
        let finished = self.shared.tracker().apply(pod, now);
        for f in finished {
            self.shared
                .metrics
                .observe_wait(&f.initializer, f.outcome, f.waited);
        }
        self.check_expectation(&pod.key(), pod);
    }

    /// Take in a pod's state and re-decide it. Its siblings are re-decided only when one of
    /// their piles became ready earlier: a later instant only makes their planned wake-ups
    /// early, and an early wake-up re-decides and re-plans, which is safe. So a growing pile
    /// costs O(1) decisions per event, not O(pile).
    fn apply(&mut self, pod: &SlimPod, now: SystemTime) {
        let key = pod.key();
        self.record(pod, now);
        self.decide(&key);
        self.decide_moved_earlier(&[key]);
    }

    fn delete(&mut self, key: &str, now: SystemTime) {
        let finished = self.shared.tracker().delete(key, now);
        for f in finished {
            self.shared
                .metrics
                .observe_wait(&f.initializer, f.outcome, f.waited);
        }
        self.in_flight.remove(key);
        self.wakes.set(key, None);
    }

    /// Drop the expectation once the watch shows the bypassed initializer gone (or the pod
    /// replaced).
    fn check_expectation(&mut self, key: &str, pod: &SlimPod) {
        let Some(f) = self.in_flight.get(key) else {
            return;
        };
        if f.written_at.is_none() {
            return;
        }
        let pending = pod.pending(self.shared.config.mechanism);
        let count = pending.iter().filter(|n| **n == f.initializer).count();
        if pod.metadata.uid.as_deref() != Some(f.uid.as_str()) || count < f.count_before {
            self.in_flight.remove(key);
        }
    }

    /// Whether the tracked pod already shows the in-flight bypass of `key` done (or is gone).
    fn removal_seen(&self, key: &str) -> bool {
        let Some(f) = self.in_flight.get(key) else {
            return false;
        };
        let tracker = self.shared.tracker();
        match tracker.get(key) {
            Some(pod) => {
                let count = pod.pending.iter().filter(|n| **n == f.initializer).count();
                pod.uid != f.uid || count < f.count_before
            }
            None => true,
        }
    }

    fn expire_expectations(&mut self) {
        let expired: Vec<PodKey> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.written_at.is_some_and(|t| t.elapsed() > EXPECTATION_TTL))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            warn!(pod = %key, "bypass not seen in the pod watch in time; re-deciding");
            self.in_flight.remove(&key);
            self.decide(&key);
        }
    }

    fn decide_all(&mut self) {
        let keys: Vec<PodKey> = self
            .shared
            .tracker()
            .pods()
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.decide(&key);
        }
    }

    /// Re-decide one pod: schedule its next wake-up and hand at most one bypass to the actuator.
    fn decide(&mut self, key: &str) {
        let now = SystemTime::now();
        let shared = self.shared.clone();
        let tracker = shared.tracker();
        let Some(pod) = tracker.get(key) else {
            self.wakes.set(key, None);
            return;
        };
        let env = Env {
            tracker: &tracker,
            owners: &shared.owners,
            now,
        };
        let outcome = policy::decide(&tracker.view(pod, now), &env, &shared.config, now);
        self.wakes.set(key, outcome.next_wake);
        if !shared.is_leader() || self.in_flight.contains_key(key) {
            return;
        }
        let decision = outcome.decisions.into_iter().find(|d| {
            !self
                .dry_run_done
                .contains(&(pod.uid.clone(), d.initializer.clone()))
        });
        let Some(d) = decision else { return };
        let owner = describe_owner(&shared, &d.initializer, now);
        let job = BypassJob {
            key: key.to_owned(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            resource_version: pod.resource_version.clone(),
            index: d.index,
            initializer: d.initializer.clone(),
            reason: d.reason,
            waited: d.waited,
            annotations_present: pod.annotations_present,
            previous_record: pod.bypassed_record.clone(),
            opt_in_label: opt_in_label(&shared.config, pod),
            owner,
        };
        let count_before = pod.pending.iter().filter(|n| **n == d.initializer).count();
        let uid = pod.uid.clone();
        drop(tracker);
        match self.actuator.try_submit(job) {
            Ok(()) => {
                self.in_flight.insert(
                    key.to_owned(),
                    InFlight {
                        uid,
                        initializer: d.initializer,
                        count_before,
                        written_at: None,
                    },
                );
            }
            Err(_) => {
                // Decided again as soon as the actuator reports progress (the next report frees
                // a queue slot), with a timer as a safety net.
                if self.backlog.is_empty() {
                    warn!(pod = %key, "actuator queue full; holding further bypasses until it drains");
                }
                if self.backlog_set.insert(key.to_owned()) {
                    self.backlog.push_back(key.to_owned());
                }
                self.wakes.at_most(key, now + Duration::from_secs(1));
            }
        }
    }

    /// Re-decide pods held back by a full actuator queue, in arrival order, while it takes them.
    fn drain_backlog(&mut self, slots: usize) {
        for _ in 0..slots {
            let Some(key) = self.backlog.pop_front() else {
                break;
            };
            self.backlog_set.remove(&key);
            self.decide(&key);
            if self.backlog_set.contains(&key) {
                // Still full: it went back to the end of the line; stop for now.
                break;
            }
        }
    }

    fn on_report(&mut self, report: Report) {
        let key = report.job().key.clone();
        // Every report means one job left the queue.
        self.drain_backlog(1);
        match report {
            Report::Bypassed { .. } => {
                if let Some(f) = self.in_flight.get_mut(&key) {
                    f.written_at = Some(Instant::now());
                }
                // The watch may have shown the removal before this report came (the Event is
                // published first); then no later event would clear the expectation.
                if self.removal_seen(&key) {
                    self.in_flight.remove(&key);
                    self.decide(&key);
                }
            }
            Report::DryRun { job } => {
                self.dry_run_done.insert((job.uid, job.initializer));
                self.in_flight.remove(&key);
                self.decide(&key);
            }
            Report::Stale { job, pod } => {
                self.in_flight.remove(&key);
                match pod {
                    // The pod changed under us: decide again on its new state.
                    Some(pod)
                        if pod.metadata.resource_version.as_deref()
                            != Some(job.resource_version.as_str()) =>
                    {
                        self.apply(&pod, SystemTime::now())
                    }
                    // Unchanged (the server rejects the write itself, e.g. annotations over
                    // their size limit) or not re-read.
                    _ => self
                        .wakes
                        .at_most(&key, SystemTime::now() + RETRY_STALE_AFTER),
                }
            }
            Report::Gone { job } => {
                // No pod of that name exists; the watch may lag or be down. Only this pod: a
                // new one of the same name (another uid) that the watch already shows stays.
                let same = self
                    .shared
                    .tracker()
                    .get(&key)
                    .is_some_and(|p| p.uid == job.uid);
                if same {
                    self.delete(&key, SystemTime::now());
                } else {
                    self.in_flight.remove(&key);
                    self.decide(&key);
                }
            }
            Report::Failed { .. } => {
                self.in_flight.remove(&key);
                self.wakes
                    .at_most(&key, SystemTime::now() + RETRY_FAILED_AFTER);
            }
            Report::Skipped { .. } => {
                self.in_flight.remove(&key);
                self.decide(&key);
            }
        }
        // Dry-run memory is only needed for pods still waiting.
        if self.dry_run_done.len() > 4 * self.shared.tracker().len() + 1024 {
            let tracker = self.shared.tracker();
            let live: HashSet<&str> = tracker.pods().map(|(_, p)| p.uid.as_str()).collect();
            self.dry_run_done
                .retain(|(uid, _)| live.contains(uid.as_str()));
        }
    }
}

/// The owner's state in words for Events and logs, e.g. "deployment kube-system/x down for 7s".
pub fn describe_owner(shared: &Shared, initializer: &str, now: SystemTime) -> String {
    let Some(spec) = shared
        .config
        .initializer(initializer)
        .and_then(|i| i.owner.as_ref())
    else {
        return "none configured".to_owned();
    };
    let what = format!("{} {}", spec.kind(), owner_target(spec));
    let for_ = |since: SystemTime| {
        humantime::format_duration(Duration::from_secs(
            now.duration_since(since).unwrap_or_default().as_secs(),
        ))
    };
    match shared.owners.state(initializer) {
        OwnerState::Unknown => format!("{what} unknown"),
        OwnerState::Up { since } => format!("{what} up for {}", for_(since)),
        OwnerState::Down { since } => format!("{what} down for {}", for_(since)),
    }
}

/// The opt-in label a bypass of `pod` relies on, as observed; None when its namespace opts it
/// in whatever its labels say.
fn opt_in_label(config: &Config, pod: &crate::tracker::TrackedPod) -> Option<(String, String)> {
    if config.opt_in.namespaces.contains(&pod.namespace) {
        return None;
    }
    let key = &config.opt_in.label;
    pod.labels.get(key).map(|v| (key.clone(), v.clone()))
}

/// The tokio instant for a wall-clock wake-up (far future when there is none).
fn instant_of(at: Option<SystemTime>) -> Instant {
    match at {
        Some(at) => {
            let delay = at.duration_since(SystemTime::now()).unwrap_or_default();
            // A millisecond of slack so the policy sees the deadline as reached.
            Instant::now() + delay + Duration::from_millis(1)
        }
        None => Instant::now() + Duration::from_secs(3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_keep_one_entry_per_pod_in_time_order() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut w = Wakes::default();
        w.set("a", Some(t0 + Duration::from_secs(5)));
        w.set("b", Some(t0 + Duration::from_secs(3)));
        w.set("a", Some(t0 + Duration::from_secs(1)));
        assert_eq!(w.next(), Some(t0 + Duration::from_secs(1)));
        w.at_most("b", t0 + Duration::from_secs(9));
        assert_eq!(w.by_pod["b"], t0 + Duration::from_secs(3));
        assert_eq!(
            w.pop_due(t0 + Duration::from_secs(3)),
            vec!["a".to_string(), "b".to_string()]
        );
        assert!(w.next().is_none());
        w.set("c", Some(t0));
        w.set("c", None);
        assert!(w.queue.is_empty() && w.by_pod.is_empty());
    }
}
