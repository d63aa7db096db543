//! The control loop: it owns every decision. It re-decides a pod on its own events, on owner
//! state changes, on leadership changes and at the pod's next wake-up (a timer keyed by the
//! policy's answer, not a fixed tick). Only one bypass per pod is in flight at a time, and a
//! bypass stays "expected" until the pod watch shows it, so a stale event can never trigger a
//! second write.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::actuator::{Actuator, Bypass, Removed, Reply};
use super::node_stage;
use super::shared::Shared;
use super::waiting::{StillWaiting, Waiting};
use super::wakes::Wakes;
use crate::config::Config;
use crate::environment::Env;
use crate::jobs::cron_job_of;
use crate::pod::SlimPod;
use crate::policy;
use crate::supervise::{self, Init};
use crate::tracker::PodKey;

/// How often the loop proves it is alive even when nothing happens.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// An expected bypass not seen in the pod watch by then is forgotten (the watch may be down);
/// the pod is re-decided and any new patch still tests the pod's current state.
const EXPECTATION_TTL: Duration = Duration::from_secs(30);
/// After a bypass failed for good, try that pod again after this long.
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(15);
/// Most initializers one patch removes; more due at once go in the next patch, decided when
/// the pod watch shows this one. Each adds a record to the pod's annotation, which the API
/// server caps (256 KiB for all annotations), so a lax server's thousands of entries never
/// make one patch that can only be refused.
const MAX_REMOVALS_PER_PATCH: usize = 64;
/// After a write that found no pod, or that the API server rejected although the pod had not
/// changed, decide again only after this pause: at once would repeat it in a tight loop.
const RETRY_STALE_AFTER: Duration = Duration::from_secs(2);

/// A bypass handed to the actuator and not yet seen done in the pod watch.
struct InFlight {
    uid: String,
    /// Each initializer the patch removes, with its count on the pod before the patch.
    removing: Vec<(String, usize)>,
    /// Set once the actuator reports success; the watch must then show it.
    written_at: Option<Instant>,
}

pub(super) struct ControlLoop {
    shared: Arc<Shared>,
    actuator: Actuator,
    wakes: Wakes,
    in_flight: HashMap<PodKey, InFlight>,
    remembered: Remembered,
    /// Waiting pods seen since the watch (re)started listing; None outside a relist.
    init_seen: Option<HashSet<PodKey>>,
    /// Jobs seen since the Jobs watch (re)started listing; None outside a relist.
    jobs_seen: Option<HashSet<String>>,
    /// Pods whose bypass did not fit the actuator queue, oldest first.
    backlog: VecDeque<PodKey>,
    backlog_set: HashSet<PodKey>,
    /// Readiness owed until the first pod list completes; None afterwards.
    pods_listed: Option<Init>,
    /// Readiness owed until the first Namespace list completes (`optIn.namespaceSelector`).
    namespaces_listed: Option<Init>,
    /// Namespaces seen since the Namespace watch (re)started listing; None outside a relist.
    namespaces_seen: Option<HashSet<String>>,
}

impl ControlLoop {
    pub(super) fn new(
        shared: Arc<Shared>,
        actuator: Actuator,
        pods_listed: Init,
        namespaces_listed: Option<Init>,
    ) -> ControlLoop {
        ControlLoop {
            shared,
            actuator,
            wakes: Wakes::default(),
            in_flight: HashMap::new(),
            remembered: Remembered::default(),
            init_seen: None,
            jobs_seen: None,
            backlog: VecDeque::new(),
            backlog_set: HashSet::new(),
            pods_listed: Some(pods_listed),
            namespaces_listed,
            namespaces_seen: None,
        }
    }

    pub(super) async fn run(
        mut self,
        client: kube::Client,
        discovery: crate::discovery::Discovery,
        mut replies: mpsc::UnboundedReceiver<Reply>,
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
        // Only with optIn.namespaceSelector (and only then does the RBAC allow it). Whole
        // Namespaces: small objects, and served in full by every version.
        let mut namespaces = if self.shared.config.opt_in.selector.is_some() {
            let api: Api<Namespace> = Api::all(client_for_jobs.clone());
            watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed()
        } else {
            futures::stream::pending().boxed()
        };
        let mut daemonsets = node_stage::watch_daemonsets(
            &client_for_jobs,
            discovery,
            self.shared.clone(),
            cancel.clone(),
        );
        let mut daemonset_relists = node_stage::DaemonSetRelists::default();
        let mut owner_changes = self.shared.owners.subscribe();
        // Beat well within the stall window, or an idle loop would look stalled.
        let beat = HEARTBEAT
            .min(self.shared.stall_after / 4)
            .max(Duration::from_millis(10));
        let mut heartbeat = tokio::time::interval(beat);
        // A handle of its own, so that waiting for room borrows nothing of the loop.
        let room = self.actuator.clone();
        let mut held = self.shared.loop_held.subscribe();
        loop {
            self.shared.progress();
            if *held.borrow_and_update() {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = held.wait_for(|held| !held) => {}
                }
            }
            let sleep = tokio::time::sleep_until(instant_of(self.wakes.next()));
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                // Held (tests): before any event that is ready with it.
                Ok(()) = held.changed() => continue,
                Some(reply) = replies.recv() => self.on_reply(reply),
                // The line is older than any event below: it goes first.
                () = room.room(), if !self.backlog.is_empty() => self.drain_backlog(),
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
                Some(event) = namespaces.next() => match event {
                    Ok(event) => self.on_namespace_event(event),
                    Err(e) => {
                        self.shared.metrics.watch_restarted("namespaces");
                        warn!(error = %e, "Namespace watch failed; retrying with backoff");
                    }
                },
                Some(event) = daemonsets.next() => {
                    node_stage::on_daemonset_event(&self.shared, &mut daemonset_relists, event);
                }
                Ok(()) = owner_changes.changed() => self.decide_all(),
                Ok(()) = leader.changed() => {
                    if *leader.borrow_and_update() {
                        // A new term offers every owed explanation again: one this replica
                        // queued before and lost (dropped, or cut off) is written now, and
                        // one already written answers 409.
                        self.remembered.notified.clear();
                        self.decide_all();
                    }
                }
                _ = sleep => {
                    let due = self.wakes.pop_due(SystemTime::now());
                    for key in due {
                        self.decide(&key);
                    }
                }
                _ = heartbeat.tick() => {
                    self.expire_expectations();
                    self.remembered.forget_gone(&self.shared.tracker());
                }
            }
        }
    }

    fn on_pod_event(&mut self, event: Event<SlimPod>) {
        let now = SystemTime::now();
        match event {
            Event::Init => {
                self.init_seen = Some(HashSet::new());
                node_stage::relist_started(&self.shared);
            }
            Event::InitApply(pod) => {
                node_stage::applied(&self.shared, &pod, now);
                let key = pod.key();
                // Decided once at InitDone: deciding each pile as it grows is quadratic.
                self.record(&pod, now);
                if let Some(seen) = &mut self.init_seen {
                    seen.insert(key);
                }
            }
            Event::InitDone => {
                node_stage::relist_done(&self.shared, now);
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
                if let Some(listed) = self.pods_listed.take() {
                    listed.done();
                    info!(
                        waiting = self.shared.tracker().len(),
                        "initial pod list complete"
                    );
                }
            }
            Event::Apply(pod) => {
                node_stage::applied(&self.shared, &pod, now);
                self.apply(&pod, now);
            }
            Event::Delete(pod) => {
                node_stage::deleted(&self.shared, &pod, now);
                self.delete(&pod.key(), now);
            }
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
                if self.pods_listed.is_none() {
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

    /// Take in whether a namespace's labels match `optIn.namespaceSelector`; its waiting pods
    /// are decided again when that changes.
    fn on_namespace_event(&mut self, event: Event<Namespace>) {
        let selected = |ns: &Namespace| {
            let labels = ns.metadata.labels.clone().unwrap_or_default();
            self.shared.config.selects_namespace(&labels)
        };
        let mut moved = Vec::new();
        match event {
            Event::Init => self.namespaces_seen = Some(HashSet::new()),
            Event::InitApply(ns) | Event::Apply(ns) => {
                let name = ns.metadata.name.clone().unwrap_or_default();
                let is = selected(&ns);
                moved = self.shared.tracker().set_namespace_selected(&name, is);
                if let Some(seen) = &mut self.namespaces_seen {
                    seen.insert(name);
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.namespaces_seen.take() {
                    let mut tracker = self.shared.tracker();
                    for name in tracker.selected_namespaces() {
                        if !seen.contains(&name) {
                            moved.extend(tracker.set_namespace_selected(&name, false));
                        }
                    }
                }
                if let Some(listed) = self.namespaces_listed.take() {
                    listed.done();
                    info!("initial Namespace list complete");
                }
            }
            Event::Delete(ns) => {
                let name = ns.metadata.name.clone().unwrap_or_default();
                moved = self.shared.tracker().set_namespace_selected(&name, false);
            }
        }
        for key in moved {
            self.decide(&key);
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
        if pod.metadata.uid.as_deref() != Some(f.uid.as_str()) || f.done_in(pending) {
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
            Some(pod) => pod.uid != f.uid || f.done_in(&pod.pending),
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
        let mut keys: Vec<PodKey> = self
            .shared
            .tracker()
            .pods()
            .map(|(k, _)| k.clone())
            .collect();
        // In key order (namespace/name, etcd's key order), not the map's: a burst then writes
        // neighbouring keys in turn, as a client walking a list does.
        keys.sort_unstable();
        for key in keys {
            self.decide(&key);
        }
    }

    /// Re-decide one pod: schedule its next wake-up and hand at most one bypass (one patch,
    /// removing everything due now) to the actuator.
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
        let mut wake = outcome.next_wake;
        // Why it waits, where users look: the leader explains each long wait once (its Event
        // is named for the pod and initializer, so a restart or a new leader cannot repeat it).
        let config = &shared.config;
        if shared.is_leader() && config.waiting_events && !config.dry_run {
            let (notices, later) = policy::waiting_notices(&outcome, &env, config, now);
            if let Some(at) = later {
                wake = policy::sooner(wake, at);
            }
            for notice in notices {
                let id = (pod.uid.clone(), notice.initializer.clone());
                if self.remembered.notified.contains(&id) {
                    continue;
                }
                let still_waiting = {
                    let (shared, key, uid) = (shared.clone(), key.to_owned(), pod.uid.clone());
                    let initializer = notice.initializer.clone();
                    StillWaiting::new(move || {
                        shared
                            .tracker()
                            .get(&key)
                            .is_some_and(|p| p.uid == uid && p.pending.contains(&initializer))
                    })
                };
                let queued = self.actuator.notify(Waiting {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    uid: pod.uid.clone(),
                    owner: super::shared::describe_owner(&shared, &notice.initializer, now),
                    notice,
                    still_waiting,
                });
                // Not queued (full): offered again when the pod is next decided.
                if queued {
                    self.remembered.notified.insert(id);
                }
            }
        }
        self.wakes.set(key, wake);
        // Counted by the leader only, as bypasses are: summed over replicas, once per pod.
        for refusal in outcome.refusals.iter().filter(|_| shared.is_leader()) {
            if self
                .remembered
                .refusals_counted
                .insert((pod.uid.clone(), refusal.initializer.clone()))
            {
                info!(pod = %key, initializer = %refusal.initializer, reason = refusal.reason.as_str(),
                    refused_by = refusal.refused_by.as_str(), "not bypassed: refused by the initializer's optIn or bypassOn");
                shared
                    .metrics
                    .bypass_refused(&refusal.initializer, refusal.refused_by);
            }
        }
        if !shared.is_leader() || self.in_flight.contains_key(key) {
            return;
        }
        // Everything due now goes in one patch (legacy: the due prefix, which the policy gives
        // in order); in dry-run, what was already logged is not logged again.
        let removals: Vec<Removed> = outcome
            .decisions
            .into_iter()
            .filter(|d| {
                !self
                    .remembered
                    .dry_run_done
                    .contains(&(pod.uid.clone(), d.initializer.clone()))
            })
            .take(MAX_REMOVALS_PER_PATCH)
            .map(|d| Removed {
                owner: super::shared::describe_owner(&shared, &d.initializer, now),
                index: d.index,
                initializer: d.initializer,
                reason: d.reason,
                waited: d.waited,
            })
            .collect();
        if removals.is_empty() {
            return;
        }
        let removing = removals
            .iter()
            .map(|r| {
                let count = pod.pending.iter().filter(|n| **n == r.initializer).count();
                (r.initializer.clone(), count)
            })
            .collect();
        let bypass = Bypass {
            key: key.to_owned(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            resource_version: pod.resource_version.clone(),
            removals,
            annotations_present: pod.annotations_present,
            previous_record: pod.bypassed_record.clone(),
            opt_in_label: opt_in_label(&shared.config, pod),
        };
        let uid = pod.uid.clone();
        drop(tracker);
        match self.actuator.try_submit(bypass) {
            Ok(()) => {
                // Had it been in line, this decision overtook it: that place is stale now
                // (`drain_backlog` skips it).
                self.backlog_set.remove(key);
                self.in_flight.insert(
                    key.to_owned(),
                    InFlight {
                        uid,
                        removing,
                        written_at: None,
                    },
                );
            }
            Err(_) => {
                // Decided again, in arrival order, as soon as the queue has room (the loop
                // waits for it).
                if self.backlog_set.is_empty() {
                    warn!(pod = %key, "actuator queue full; holding further bypasses until it drains");
                }
                if self.backlog_set.insert(key.to_owned()) {
                    self.backlog.push_back(key.to_owned());
                }
            }
        }
    }

    /// Re-decide pods held back by a full actuator queue, in arrival order, while it has room.
    /// A pod no longer due (or gone), or submitted since, leaves the line without taking a
    /// slot.
    fn drain_backlog(&mut self) {
        while self.actuator.has_room() {
            let Some(key) = self.backlog.pop_front() else {
                break;
            };
            if !self.backlog_set.remove(&key) {
                // Submitted since: deciding it again here would skip the pause after a failed
                // or refused write.
                continue;
            }
            self.decide(&key);
            if self.backlog_set.contains(&key) {
                // Refused after all (the actuator stopped): it went back to the end of the
                // line; stop for now.
                break;
            }
        }
    }

    fn on_reply(&mut self, reply: Reply) {
        let key = reply.bypass().key.clone();
        match reply {
            Reply::Bypassed { .. } => {
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
            Reply::DryRun { bypass } => {
                for r in bypass.removals {
                    self.remembered
                        .dry_run_done
                        .insert((bypass.uid.clone(), r.initializer));
                }
                self.in_flight.remove(&key);
                self.decide(&key);
            }
            Reply::Stale { bypass, pod } => {
                self.in_flight.remove(&key);
                match pod {
                    // The pod changed under us: decide again on its new state.
                    Some(pod)
                        if pod.metadata.resource_version.as_deref()
                            != Some(bypass.resource_version.as_str()) =>
                    {
                        self.apply(&pod, SystemTime::now())
                    }
                    // Unchanged since the decision (the tracker lagged behind the pod) or not
                    // re-read: decide again shortly, not at once.
                    _ => self
                        .wakes
                        .at_most(&key, SystemTime::now() + RETRY_STALE_AFTER),
                }
            }
            Reply::Gone { bypass } => {
                // No pod of that name exists; the watch may lag or be down. Only this pod: a
                // new one of the same name (another uid) that the watch already shows stays.
                let same = self
                    .shared
                    .tracker()
                    .get(&key)
                    .is_some_and(|p| p.uid == bypass.uid);
                if same {
                    self.delete(&key, SystemTime::now());
                } else {
                    self.in_flight.remove(&key);
                    self.decide(&key);
                }
            }
            Reply::Failed { .. } => {
                self.in_flight.remove(&key);
                self.wakes
                    .at_most(&key, SystemTime::now() + RETRY_FAILED_AFTER);
            }
            Reply::Skipped { .. } => {
                self.in_flight.remove(&key);
                self.decide(&key);
            }
        }
    }
}

impl InFlight {
    /// Whether `pending` shows the patch applied: every initializer it removes is pending
    /// fewer times than before (the patch is atomic, so a watch event shows all or none).
    fn done_in<S: AsRef<str>>(&self, pending: &[S]) -> bool {
        self.removing
            .iter()
            .all(|(name, before)| pending.iter().filter(|n| n.as_ref() == name).count() < *before)
    }
}

/// What the loop remembers per (pod uid, initializer), needed only while that pod waits.
#[derive(Default)]
struct Remembered {
    /// (uid, initializer) already logged and counted in dry-run.
    dry_run_done: HashSet<(String, String)>,
    /// (uid, initializer) whose refused bypass is already counted.
    refusals_counted: HashSet<(String, String)>,
    /// (uid, initializer) whose `InitializerWaiting` Event this replica already queued.
    notified: HashSet<(String, String)>,
}

impl Remembered {
    /// Forget the pods `tracker` no longer holds, once there are enough to pay for the pass
    /// ([`forget_gone`]).
    fn forget_gone(&mut self, tracker: &crate::tracker::Tracker) {
        forget_gone(
            [
                &mut self.dry_run_done,
                &mut self.refusals_counted,
                &mut self.notified,
            ],
            tracker.len(),
            || tracker.pods().map(|(_, p)| p.uid.as_str()).collect(),
        );
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

/// Keep only the (uid, initializer) pairs of pods still waiting (`live`, read only then), once
/// the memories together hold more than 4 per waiting pod plus 1,024: memory stays
/// proportional to what waits, and each pass is paid for by the insertions since the last.
fn forget_gone<'a>(
    memories: [&mut HashSet<(String, String)>; 3],
    waiting: usize,
    live: impl FnOnce() -> HashSet<&'a str>,
) {
    let remembered: usize = memories.iter().map(|m| m.len()).sum();
    if remembered <= 4 * waiting + 1024 {
        return;
    }
    let live = live();
    for memory in memories {
        memory.retain(|(uid, _)| live.contains(uid.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_flight(removing: &[(&str, usize)]) -> InFlight {
        InFlight {
            uid: "u".into(),
            removing: removing
                .iter()
                .map(|(n, k)| ((*n).to_owned(), *k))
                .collect(),
            written_at: None,
        }
    }

    #[test]
    fn a_patch_is_seen_done_once_each_removed_initializer_is_pending_fewer_times() {
        let one = in_flight(&[("a", 1)]);
        assert!(!one.done_in(&["a", "b"]));
        assert!(one.done_in(&["b"]));
        assert!(one.done_in::<&str>(&[]));
        // A name pending twice (legacy) loses one occurrence.
        let twice = in_flight(&[("a", 2)]);
        assert!(!twice.done_in(&["a", "a"]));
        assert!(twice.done_in(&["a"]));
        // Atomic: all removals or none.
        let both = in_flight(&[("a", 1), ("b", 1)]);
        assert!(!both.done_in(&["b"]));
        assert!(both.done_in(&["c"]));
    }

    fn tracked(namespace: &str, labels: &[(&str, &str)]) -> crate::tracker::TrackedPod {
        crate::tracker::TrackedPod {
            namespace: namespace.into(),
            name: "p".into(),
            uid: "u".into(),
            resource_version: "1".into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            namespace_selected: false,
            created: SystemTime::UNIX_EPOCH,
            first_seen: SystemTime::UNIX_EPOCH,
            controller: None,
            via: None,
            pending: vec!["g".into()],
            head_since: SystemTime::UNIX_EPOCH,
            annotations_present: false,
            bypassed_record: None,
            opted_in: true,
        }
    }

    #[test]
    fn the_opt_in_label_is_tested_unless_the_namespace_opts_the_pod_in() {
        let config = crate::config::from_yaml_str(
            "mechanism: schedulingGates\n\
             optIn: { label: initguard.io/bypass, namespaces: [batch] }\n",
            "test.yaml",
        )
        .unwrap();
        let label = ("initguard.io/bypass", "true");
        assert_eq!(
            opt_in_label(&config, &tracked("team-a", &[label, ("app", "web")])),
            Some(("initguard.io/bypass".to_owned(), "true".to_owned()))
        );
        assert_eq!(
            opt_in_label(&config, &tracked("team-a", &[("app", "web")])),
            None
        );
        assert_eq!(opt_in_label(&config, &tracked("batch", &[label])), None);
    }

    #[test]
    fn a_wake_is_due_at_its_instant_plus_a_millisecond_and_none_is_an_hour_away() {
        let hour = Duration::from_secs(3600);
        let before = Instant::now();
        let past = instant_of(Some(SystemTime::now() - hour));
        assert!(past >= before + Duration::from_millis(1));
        assert!(past <= Instant::now() + Duration::from_millis(1));
        let before = Instant::now();
        let later = instant_of(Some(SystemTime::now() + 2 * hour));
        assert!(later > before + hour, "two hours ahead stays ahead");
        let none = instant_of(None);
        assert!(none >= before + hour);
    }

    /// A loop as the leader, for gate `g` (deadline 1 s, no owner), whose actuator queue holds
    /// `capacity` bypasses and has no worker: the test takes them from the receiver.
    fn loop_with_queue(capacity: usize) -> (ControlLoop, mpsc::Receiver<Bypass>) {
        let config = crate::config::from_yaml_str(
            "mechanism: schedulingGates\n\
             optIn: { label: initguard.io/bypass }\n\
             initializers: [{ name: g, deadline: 1s }]\n",
            "test.yaml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let config = Arc::new(config);
        let metrics = Arc::new(crate::metrics::Metrics::new(&config).unwrap());
        let readiness = crate::supervise::Readiness::default();
        let (_, leader) = watch::channel(true);
        let shared = Arc::new(Shared {
            config: config.clone(),
            metrics: metrics.clone(),
            owners: crate::owners::Owners::new(&config, metrics.clone(), readiness.clone()),
            identity: "test".into(),
            leader,
            readiness: readiness.clone(),
            tracker: std::sync::Mutex::new(crate::tracker::Tracker::new(config.clone())),
            stage: std::sync::Mutex::new(crate::node_stage::stage::StageTracker::new(config)),
            last_progress: std::sync::Mutex::new(Instant::now()),
            stall_after: Duration::from_secs(60),
            loop_held: tokio::sync::watch::channel(false).0,
            failures: crate::supervise::Failures::default(),
            scrape: std::sync::Mutex::new(()),
            webhooks: std::sync::Mutex::new(Default::default()),
            stage_changed: Default::default(),
        });
        let (actuator, queue, _) = Actuator::unattended(capacity, metrics);
        let pods_listed = readiness.pending("pods", "listing");
        let control = ControlLoop::new(shared, actuator, pods_listed, None);
        (control, queue)
    }

    /// An opted-in pod gated by `g`, created an hour ago: due at once.
    fn due_pod(name: &str) -> SlimPod {
        let created = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "namespace": "default",
                "name": name,
                "uid": format!("uid-{name}"),
                "resourceVersion": "1",
                "creationTimestamp": created.to_string(),
                "labels": { "initguard.io/bypass": "true" },
            },
            "spec": { "schedulingGates": [{ "name": "g" }] },
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The pods queued so far, by name, in queue order.
    fn queued(queue: &mut mpsc::Receiver<Bypass>) -> Vec<String> {
        std::iter::from_fn(|| queue.try_recv().ok())
            .map(|b| b.name)
            .collect()
    }

    /// Pods the full queue refused wait in arrival order and go in as soon as there is room;
    /// waiting for room, or draining without it, changes neither the line nor the queue.
    #[test]
    fn pods_a_full_queue_refused_go_in_arrival_order_once_it_has_room() {
        let (mut control, mut queue) = loop_with_queue(1);
        for name in ["a", "b", "c"] {
            control.apply(&due_pod(name), SystemTime::now());
        }
        control.drain_backlog();
        assert_eq!(queued(&mut queue), ["a"]);
        // The queue has room now: the first in line goes, then the next.
        control.drain_backlog();
        assert_eq!(queued(&mut queue), ["b"]);
        control.drain_backlog();
        assert_eq!(queued(&mut queue), ["c"]);
        control.drain_backlog();
        assert_eq!(queued(&mut queue), Vec::<String>::new());
        assert!(control.backlog.is_empty() && control.backlog_set.is_empty());
    }

    /// A pod deleted while in line passes its turn, and the slot freed for it, to the next.
    #[test]
    fn a_pod_gone_from_the_line_leaves_its_slot_to_the_next() {
        let (mut control, mut queue) = loop_with_queue(1);
        for name in ["a", "b", "c"] {
            control.apply(&due_pod(name), SystemTime::now());
        }
        control.delete("default/b", SystemTime::now());
        assert_eq!(queued(&mut queue), ["a"]);
        control.drain_backlog();
        assert_eq!(queued(&mut queue), ["c"]);
    }

    /// A pod submitted by another decision while in line keeps no place there: after its
    /// write failed, it waits out the pause rather than going in again when the line moves.
    #[test]
    fn a_pod_submitted_while_in_line_is_not_submitted_again_by_the_line() {
        let (mut control, mut queue) = loop_with_queue(1);
        for name in ["a", "b"] {
            control.apply(&due_pod(name), SystemTime::now());
        }
        assert_eq!(queued(&mut queue), ["a"]);
        control.decide("default/b");
        let b = queue
            .try_recv()
            .unwrap_or_else(|e| panic!("b not submitted: {e}"));
        control.on_reply(Reply::Failed {
            bypass: b,
            error: "refused".into(),
        });
        control.drain_backlog();
        assert_eq!(queued(&mut queue), Vec::<String>::new());
        assert!(control.backlog_set.is_empty());
    }

    /// `room` resolves only while the queue has a free slot, and never once the actuator
    /// stopped (the loop would spin on it).
    #[test]
    fn room_is_awaited_only_while_the_queue_is_full_and_never_after_it_stopped() {
        use futures::FutureExt;
        let (mut control, mut queue) = loop_with_queue(1);
        assert_eq!(control.actuator.room().now_or_never(), Some(()));
        assert!(control.actuator.has_room());
        control.apply(&due_pod("a"), SystemTime::now());
        assert_eq!(control.actuator.room().now_or_never(), None);
        assert!(!control.actuator.has_room());
        assert_eq!(queued(&mut queue), ["a"]);
        assert_eq!(control.actuator.room().now_or_never(), Some(()));
        drop(queue);
        assert_eq!(control.actuator.room().now_or_never(), None);
    }

    /// `n` pairs of pods named `{prefix}{i}`, each with its own uid.
    fn pairs(prefix: &str, n: usize) -> HashSet<(String, String)> {
        (0..n)
            .map(|i| (format!("{prefix}{i}"), "g".to_owned()))
            .collect()
    }

    /// The loop's memories, past the bound, keep only the pods the tracker still holds: one
    /// waiting pod stays in each, and 1,100 pairs of gone pods go.
    #[test]
    fn the_memories_keep_only_the_pods_the_tracker_holds() {
        let config = crate::config::from_yaml_str("mechanism: schedulingGates\n", "test.yaml")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut tracker = crate::tracker::Tracker::new(Arc::new(config));
        tracker.apply(&due_pod("waiting"), SystemTime::now());
        assert_eq!(tracker.len(), 1);
        let live = HashSet::from([("uid-waiting".to_owned(), "g".to_owned())]);
        let mut remembered = Remembered {
            dry_run_done: pairs("gone-a-", 400),
            refusals_counted: pairs("gone-b-", 400),
            notified: pairs("gone-c-", 300),
        };
        for memory in [
            &mut remembered.dry_run_done,
            &mut remembered.refusals_counted,
            &mut remembered.notified,
        ] {
            memory.extend(live.iter().cloned());
        }
        remembered.forget_gone(&tracker);
        assert_eq!(remembered.dry_run_done, live);
        assert_eq!(remembered.refusals_counted, live);
        assert_eq!(remembered.notified, live);
    }

    /// A pass over three memories of `sizes` pairs of gone pods, with `waiting` pods waiting,
    /// two of them also remembered (in the first): the sizes after it, and whether the live
    /// set was read.
    fn after_pass(sizes: [usize; 3], waiting: usize) -> ([usize; 3], bool) {
        let [mut a, mut b, mut c] = sizes.map(|n| pairs("gone-", n));
        // The live pods are remembered too, in the first memory.
        a.extend(pairs("live-", 2));
        let live: HashSet<&str> = ["live-0", "live-1"].into();
        let mut read = false;
        forget_gone([&mut a, &mut b, &mut c], waiting, || {
            read = true;
            live.clone()
        });
        ([a.len(), b.len(), c.len()], read)
    }

    /// Up to 4 pairs per waiting pod plus 1,024, summed over the three memories, nothing is
    /// forgotten (and the live set not even read); one more and every pair of a pod no
    /// longer waiting goes, from each memory, and the live ones stay.
    #[test]
    fn memories_of_gone_pods_are_forgotten_only_past_four_per_waiting_pod_plus_1024() {
        // 10 waiting pods: a bound of 1,064, the 2 live pairs among them.
        assert_eq!(after_pass([1062, 0, 0], 10), ([1064, 0, 0], false));
        assert_eq!(after_pass([354, 354, 354], 10), ([356, 354, 354], false));
        assert_eq!(after_pass([355, 354, 354], 10), ([2, 0, 0], true));
        assert_eq!(after_pass([0, 1063, 0], 10), ([2, 0, 0], true));
        // Nothing waiting: 1,024.
        assert_eq!(after_pass([0, 0, 1022], 0), ([2, 0, 1022], false));
        assert_eq!(after_pass([0, 0, 1023], 0), ([2, 0, 0], true));
        // 1,000 waiting: 5,024.
        assert_eq!(after_pass([5022, 0, 0], 1000), ([5024, 0, 0], false));
        assert_eq!(after_pass([5023, 0, 0], 1000), ([2, 0, 0], true));
    }
}
