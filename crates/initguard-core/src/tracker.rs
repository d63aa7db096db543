//! The waiting pods: per initializer, per controlling owner, and how each wait ended.
//!
//! Pure bookkeeping fed by the pod watch; no I/O, and `now` is passed in. The API server's
//! clock, which brings a `creationTimestamp` into this process's, comes through [`LocalTime`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::bypass::parse_records;
use crate::config::{Config, Mechanism};
use crate::pod::SlimPod;
use crate::policy::{ControllerRef, PodView};

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The initializer's owner removed it.
    Initialized,
    /// initguard removed it.
    Bypassed,
    /// The pod went away while waiting.
    Deleted,
}

impl WaitEnd {
    /// The `outcome` label of `initguard_wait_duration_seconds`.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitEnd::Initialized => "initialized",
            WaitEnd::Bypassed => "bypassed",
            WaitEnd::Deleted => "deleted",
        }
    }
}

/// The API server's clock as this process knows it (the `initguard` crate's `ServerClock`
/// reads it from responses' `Date` headers).
pub trait LocalTime: std::fmt::Debug + Send + Sync {
    /// `server_time` (e.g. a `creationTimestamp`) in this process's wall clock at `now`: never
    /// earlier than the true local time of that event. None before the server's clock is known.
    fn to_local(&self, server_time: SystemTime, now: SystemTime) -> Option<SystemTime>;
}

/// `namespace/name`.
pub type PodKey = String;

/// One pod that waits on at least one initializer.
#[derive(Debug, Clone)]
pub struct TrackedPod {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` as last read.
    pub resource_version: String,
    /// The pod's labels as last read.
    pub labels: BTreeMap<String, String>,
    /// Whether its namespace matches `optIn.namespaceSelector`, as last observed.
    pub namespace_selected: bool,
    /// `creationTimestamp`, on the API server's clock.
    pub created: SystemTime,
    /// When this tracker first saw the pod (this process's clock).
    pub first_seen: SystemTime,
    /// The controller the pod's pile is grouped under: its controlling owner, or the CronJob
    /// controlling that owner when the owner is a Job.
    pub controller: Option<ControllerRef>,
    /// The Job between the pod and `controller` when `controller` is its CronJob.
    pub via: Option<ControllerRef>,
    /// Pending initializer names in API order.
    pub pending: Vec<String>,
    /// When the current head became the head (legacy), or was first observed as the head.
    pub head_since: SystemTime,
    /// Whether `metadata.annotations` exists (as a map).
    pub annotations_present: bool,
    /// The value of [`crate::bypass::BYPASSED_ANNOTATION`], if set.
    pub bypassed_record: Option<String>,
    /// Whether its label or namespace opts it in, before any initializer's own `optIn`.
    pub opted_in: bool,
}

impl TrackedPod {
    /// The policy's view of this pod.
    pub fn view(&self) -> PodView<'_> {
        PodView {
            namespace: &self.namespace,
            name: &self.name,
            uid: &self.uid,
            labels: &self.labels,
            namespace_selected: self.namespace_selected,
            created: self.created,
            controller: self.controller.as_ref(),
            pending: &self.pending,
            head_since: Some(self.head_since),
        }
    }
}

/// A wait that ended, for `initguard_wait_duration_seconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The initializer the pod waited on.
    pub initializer: String,
    /// How the wait ended.
    pub outcome: WaitEnd,
    /// How long it lasted (zero for a legacy entry that never became the head).
    pub waited: Duration,
}

/// Aggregates for the gauges, computed at `now`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Aggregates {
    /// (initializer, opted_in) → waiting pods.
    pub waiting: BTreeMap<(String, bool), u64>,
    /// initializer → longest current wait.
    pub oldest_wait: BTreeMap<String, Duration>,
    /// initializer → most pods waiting on it that share one controller.
    pub pile_max: BTreeMap<String, u32>,
    /// initializer → controllers with at least `pileup.threshold` pods that have each waited
    /// `pileup.minWait` (README "What it guarantees": never early).
    pub pileups: BTreeMap<String, u32>,
}

/// Every waiting pod the guard knows of.
#[derive(Debug)]
pub struct Tracker {
    config: Arc<Config>,
    pods: HashMap<PodKey, TrackedPod>,
    /// (controller uid, initializer) → pods of that controller waiting on it.
    piles: HashMap<(String, String), u32>,
    /// controller uid → its waiting pods (to re-decide a whole pile at once).
    by_controller: HashMap<String, HashSet<PodKey>>,
    /// (controller uid, initializer) → wait starts of the pods whose wait for it is in
    /// progress (gates: all; legacy: the head only), ordered.
    starts: HashMap<PileKey, BTreeSet<(SystemTime, PodKey)>>,
    /// (controller uid, initializer) → the `pileup.threshold`-th entry of `starts`, kept up to
    /// date in O(log n) per change so that deciding a pod stays O(1) in the pile's size.
    kth: HashMap<PileKey, (SystemTime, PodKey)>,
    /// Controllers one of whose piles became ready earlier since the last
    /// [`Tracker::take_moved_earlier`]: their other pods may have to act sooner than planned.
    moved_earlier: HashSet<String>,
    /// The API server's clock, to bring `creationTimestamp` into ours; None: trust ours.
    clock: Option<Box<dyn LocalTime>>,
    /// Job uid → the CronJob controlling it, from the Jobs watch.
    job_owners: HashMap<String, ControllerRef>,
    /// Job uid → tracked pods whose controlling owner is that Job (to regroup them when the
    /// Job's CronJob becomes known).
    by_job: HashMap<String, HashSet<PodKey>>,
    /// Deleted Jobs whose `job_owners` entry stays until their last tracked pod leaves.
    gone_jobs: HashSet<String>,
    /// Namespaces whose labels match `optIn.namespaceSelector`, from the Namespace watch.
    selected_namespaces: HashSet<String>,
}

/// (controller uid, initializer).
type PileKey = (String, String);

impl Tracker {
    /// An empty tracker.
    pub fn new(config: Arc<Config>) -> Tracker {
        Tracker {
            config,
            pods: HashMap::new(),
            piles: HashMap::new(),
            by_controller: HashMap::new(),
            starts: HashMap::new(),
            kth: HashMap::new(),
            moved_earlier: HashSet::new(),
            clock: None,
            job_owners: HashMap::new(),
            by_job: HashMap::new(),
            gone_jobs: HashSet::new(),
            selected_namespaces: HashSet::new(),
        }
    }

    /// Take in whether `namespace`'s labels match `optIn.namespaceSelector`. Returns the
    /// waiting pods of that namespace when that changed (they are to be decided again).
    pub fn set_namespace_selected(&mut self, namespace: &str, selected: bool) -> Vec<PodKey> {
        let changed = if selected {
            self.selected_namespaces.insert(namespace.to_owned())
        } else {
            self.selected_namespaces.remove(namespace)
        };
        if !changed {
            return Vec::new();
        }
        let mut moved = Vec::new();
        for (key, pod) in self
            .pods
            .iter_mut()
            .filter(|(_, p)| p.namespace == namespace)
        {
            pod.namespace_selected = selected;
            pod.opted_in = self
                .config
                .is_opted_in(&pod.namespace, selected, &pod.labels);
            moved.push(key.clone());
        }
        moved
    }

    /// The namespaces currently selected (to forget those a relist no longer shows).
    pub fn selected_namespaces(&self) -> Vec<String> {
        self.selected_namespaces.iter().cloned().collect()
    }

    /// Whether `namespace`'s labels, as last observed, match `optIn.namespaceSelector`.
    pub fn namespace_selected(&self, namespace: &str) -> bool {
        self.selected_namespaces.contains(namespace)
    }

    /// Measure waits from `creationTimestamp` against `clock` (the API server's clock), so
    /// that clock skew never makes a wait look longer than it is.
    pub fn with_clock(mut self, clock: impl LocalTime + 'static) -> Tracker {
        self.clock = Some(Box::new(clock));
        self
    }

    /// When `pod` was created, on this process's clock at `now`: never earlier than the truth,
    /// so the wait since then is never overestimated.
    /// With a server clock but no sample of it yet, the later of `creationTimestamp` and the
    /// first sight of the pod (conservative); without a server clock, `creationTimestamp`.
    pub fn created_local(&self, pod: &TrackedPod, now: SystemTime) -> SystemTime {
        match &self.clock {
            None => pod.created,
            Some(clock) => clock
                .to_local(pod.created, now)
                .unwrap_or_else(|| pod.created.max(pod.first_seen)),
        }
    }

    /// For a one-shot report, which has no history of when each legacy head became the head
    /// (a running guard starts that clock at its own first sight, never early): count every
    /// head's wait from the pod's creation, the time its CREATE has been waiting. Exact when
    /// the head is the pod's first initializer; otherwise an upper bound of the head's wait.
    pub fn assume_heads_since_creation(&mut self, now: SystemTime) {
        let created: Vec<(PodKey, SystemTime)> = self
            .pods
            .iter()
            .map(|(k, p)| (k.clone(), self.created_local(p, now)))
            .collect();
        for (key, at) in created {
            if let Some(pod) = self.pods.get_mut(&key) {
                pod.head_since = at;
            }
        }
    }

    /// The policy's view of `pod` at `now`, its creation in this process's clock.
    pub fn view<'a>(&self, pod: &'a TrackedPod, now: SystemTime) -> PodView<'a> {
        PodView {
            created: self.created_local(pod, now),
            ..pod.view()
        }
    }

    fn threshold(&self) -> usize {
        self.config.pileup.threshold as usize
    }

    fn mechanism(&self) -> Mechanism {
        self.config.mechanism
    }

    /// Number of waiting pods.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no pod waits.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The tracked pod under `key`.
    pub fn get(&self, key: &str) -> Option<&TrackedPod> {
        self.pods.get(key)
    }

    /// All tracked pods.
    pub fn pods(&self) -> impl Iterator<Item = (&PodKey, &TrackedPod)> {
        self.pods.iter()
    }

    /// Pods sharing `key`'s controller (including `key`), for pileup re-evaluation.
    pub fn siblings(&self, key: &str) -> Vec<PodKey> {
        let Some(ctrl) = self.pods.get(key).and_then(|p| p.controller.as_ref()) else {
            return vec![key.to_owned()];
        };
        self.by_controller
            .get(&ctrl.uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Waiting pods grouped under the controller with this uid.
    pub fn pods_of_controller(&self, controller_uid: &str) -> Vec<PodKey> {
        self.by_controller
            .get(controller_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Pods of the controller with this uid waiting on `initializer`.
    pub fn pile_size(&self, controller_uid: &str, initializer: &str) -> u32 {
        self.piles
            .get(&(controller_uid.to_owned(), initializer.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// The `k`-th earliest wait start (from 1) among the pods of the controller with this uid
    /// whose wait for `initializer` is in progress; see `policy::Environment::pile_start`.
    /// O(1) for `k = pileup.threshold`.
    ///
    /// In this process's clock at `now`, like every wait: legacy starts (head times) are ours
    /// already; gate starts are creation times ordered on the API server's clock, so the k-th
    /// is at most the latest of the first k in ours (exact while the clock offset is one for
    /// all pods, which it is once a sample exists), and never earlier than the truth.
    pub fn pile_start(
        &self,
        controller_uid: &str,
        initializer: &str,
        k: u32,
        now: SystemTime,
    ) -> Option<SystemTime> {
        let key = (controller_uid.to_owned(), initializer.to_owned());
        let k = k as usize;
        match self.mechanism() {
            Mechanism::Initializers if k == self.threshold() => {
                self.kth.get(&key).map(|(at, _)| *at)
            }
            Mechanism::Initializers => {
                let index = k.checked_sub(1)?;
                self.starts.get(&key)?.iter().nth(index).map(|(at, _)| *at)
            }
            Mechanism::SchedulingGates => {
                let first = self.starts.get(&key)?.iter().take(k);
                let mut latest: Option<SystemTime> = None;
                let mut count = 0;
                for (_, pod) in first {
                    let at = self.created_local(self.pods.get(pod)?, now);
                    latest = Some(latest.map_or(at, |l| l.max(at)));
                    count += 1;
                }
                (k >= 1 && count == k).then_some(latest).flatten()
            }
        }
    }

    /// Controllers one of whose piles became ready earlier (or at all) since the last call.
    pub fn take_moved_earlier(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.moved_earlier)
    }

    /// The pile controller and the Job between it and the pod, for a pod whose controlling
    /// owner is `direct`: a Job controlled by a known CronJob is grouped under the CronJob.
    fn group(
        &self,
        direct: Option<ControllerRef>,
    ) -> (Option<ControllerRef>, Option<ControllerRef>) {
        match direct {
            Some(job) if job.kind == "Job" => match self.job_owners.get(&job.uid) {
                Some(cron_job) => (Some(cron_job.clone()), Some(job)),
                None => (Some(job), None),
            },
            other => (other, None),
        }
    }

    /// The Jobs watch saw Job `job_uid` controlled by `cron_job` (None: by nothing, or by
    /// something other than a CronJob). Moves that Job's tracked pods to their new pile, in
    /// time linear in their number; returns them, since each must be re-decided (its pile
    /// changed). Controllers whose pile became ready earlier are reported as by
    /// [`Tracker::apply`].
    pub fn set_job_owner(&mut self, job_uid: &str, cron_job: Option<ControllerRef>) -> Vec<PodKey> {
        self.gone_jobs.remove(job_uid);
        if self.job_owners.get(job_uid) == cron_job.as_ref() {
            return Vec::new();
        }
        match cron_job {
            Some(c) => self.job_owners.insert(job_uid.to_owned(), c),
            None => self.job_owners.remove(job_uid),
        };
        let keys: Vec<PodKey> = self
            .by_job
            .get(job_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for key in &keys {
            let Some(mut pod) = self.remove_entry(key) else {
                continue;
            };
            let direct = pod.via.take().or(pod.controller.take());
            (pod.controller, pod.via) = self.group(direct);
            // The pod was in none of its new piles: compare them without it and with it.
            let piles = self.pile_keys(&pod);
            let before: Vec<_> = piles.iter().map(|k| self.kth_at(k)).collect();
            self.insert_entry(key.clone(), pod);
            for (pile, before) in piles.into_iter().zip(before) {
                if let Some(after) = self.kth_at(&pile)
                    && before.is_none_or(|b| after < b)
                {
                    self.moved_earlier.insert(pile.0);
                }
            }
        }
        keys
    }

    /// The Jobs watch saw Job `job_uid` deleted. Its pods keep their pile while they are
    /// tracked (they are usually deleted with it); the entry goes with the last of them.
    pub fn forget_job(&mut self, job_uid: &str) {
        if self.by_job.contains_key(job_uid) {
            self.gone_jobs.insert(job_uid.to_owned());
        } else {
            self.job_owners.remove(job_uid);
        }
    }

    /// Uids of the Jobs known to be controlled by a CronJob.
    pub fn known_jobs(&self) -> Vec<String> {
        self.job_owners.keys().cloned().collect()
    }

    /// Take in the latest state of a pod (watch ADDED/MODIFIED, list item, re-read).
    pub fn apply(&mut self, pod: &SlimPod, now: SystemTime) -> Vec<Finished> {
        // Compare the piles this update touches before and after it, not at each step: the
        // remove-then-insert of an unchanged pod must not count as a move.
        let mut keys: Vec<PileKey> = Vec::new();
        if let Some(old) = self.pods.get(&pod.key()) {
            keys.extend(self.pile_keys(old));
        }
        if let (Some(c), _) = self.group(pod.controller()) {
            let pending = pod.pending(self.mechanism());
            let names = match self.mechanism() {
                Mechanism::SchedulingGates => dedup(pending),
                Mechanism::Initializers => pending.first().into_iter().collect(),
            };
            keys.extend(names.into_iter().map(|n| (c.uid.clone(), n.clone())));
        }
        let before: Vec<Option<SystemTime>> = keys.iter().map(|k| self.kth_at(k)).collect();
        let old_job = self.job_uid_of(&pod.key());
        let finished = self.apply_inner(pod, now);
        self.settle_job(old_job);
        for (key, before) in keys.into_iter().zip(before) {
            if let Some(after) = self.kth_at(&key)
                && before.is_none_or(|b| after < b)
            {
                self.moved_earlier.insert(key.0);
            }
        }
        finished
    }

    fn kth_at(&self, key: &PileKey) -> Option<SystemTime> {
        self.kth.get(key).map(|(at, _)| *at)
    }

    fn apply_inner(&mut self, pod: &SlimPod, now: SystemTime) -> Vec<Finished> {
        let key = pod.key();
        let pending = pod.pending(self.mechanism());
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let uid = pod.metadata.uid.clone().unwrap_or_default();

        let mut finished = Vec::new();
        let old = self.remove_entry(&key);
        let old = match old {
            Some(old) if old.uid != uid => {
                // Same name, new pod: the old one is gone.
                finished.extend(self.finish_all(&old, WaitEnd::Deleted, now));
                None
            }
            other => other,
        };

        if pending.is_empty() || terminating {
            if let Some(old) = old {
                let deleted = terminating && !pending.is_empty();
                let outcomes = (!deleted).then(|| WaitEnds::new(&old, pod));
                for name in dedup(&old.pending) {
                    let o = outcomes.as_ref().map_or(WaitEnd::Deleted, |o| o.of(name));
                    finished.push(self.finish(&old, name, o, now));
                }
            }
            return finished;
        }

        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let head_since = match &old {
            Some(old) if old.pending.first() == pending.first() => old.head_since,
            _ => now,
        };
        let first_seen = old.as_ref().map_or(now, |old| old.first_seen);
        if let Some(old) = old.as_ref().filter(|old| old.pending.as_slice() != pending) {
            // Names whose count went down ended their wait (duplicates are counted). Linear in
            // the pending list: a pod may carry tens of thousands of names.
            let (before, after) = (occurrences(&old.pending), occurrences(pending));
            let mut outcomes = None;
            for name in dedup(&old.pending) {
                let count = |m: &HashMap<&str, usize>| m.get(name.as_str()).copied().unwrap_or(0);
                if count(&after) < count(&before) {
                    let o = outcomes
                        .get_or_insert_with(|| WaitEnds::new(old, pod))
                        .of(name);
                    finished.push(self.finish(old, name, o, now));
                }
            }
        }
        let (controller, via) = self.group(pod.controller());
        let namespace_selected = self.selected_namespaces.contains(&namespace);
        let tracked = TrackedPod {
            opted_in: self
                .config
                .is_opted_in(&namespace, namespace_selected, &labels),
            namespace_selected,
            namespace,
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid,
            resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
            labels,
            created: pod.created().unwrap_or(now),
            first_seen,
            controller,
            via,
            pending: pending.to_vec(),
            head_since,
            annotations_present: pod.annotations_present,
            bypassed_record: pod.bypassed_record.clone(),
        };
        self.insert_entry(key, tracked);
        finished
    }

    /// The pod is gone (watch DELETED).
    pub fn delete(&mut self, key: &str, now: SystemTime) -> Vec<Finished> {
        let old_job = self.job_uid_of(key);
        let finished = match self.remove_entry(key) {
            Some(old) => self.finish_all(&old, WaitEnd::Deleted, now),
            None => Vec::new(),
        };
        self.settle_job(old_job);
        finished
    }

    /// The uid of the Job controlling the tracked pod `key`, if any.
    fn job_uid_of(&self, key: &str) -> Option<String> {
        self.pods.get(key).and_then(job_of).map(|j| j.uid.clone())
    }

    /// Drop a deleted Job's CronJob once none of its pods is tracked any more.
    fn settle_job(&mut self, job_uid: Option<String>) {
        if let Some(uid) = job_uid
            && !self.by_job.contains_key(&uid)
            && self.gone_jobs.remove(&uid)
        {
            self.job_owners.remove(&uid);
        }
    }

    /// Replace everything with a fresh list (watch restart); pods missing from it are gone.
    pub fn resync(&mut self, pods: &[SlimPod], now: SystemTime) -> Vec<Finished> {
        let listed: HashSet<String> = pods.iter().map(SlimPod::key).collect();
        let gone: Vec<PodKey> = self
            .pods
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        let mut finished = Vec::new();
        for key in gone {
            finished.extend(self.delete(&key, now));
        }
        for pod in pods {
            finished.extend(self.apply(pod, now));
        }
        finished
    }

    /// Gauges at `now`.
    pub fn aggregates(&self, now: SystemTime) -> Aggregates {
        let mut agg = Aggregates::default();
        for pod in self.pods.values() {
            let waited = self.waited(pod, now);
            // Linear in the pending list: a pod may carry tens of thousands of names.
            for name in dedup(&pod.pending) {
                *agg.waiting.entry((name.clone(), pod.opted_in)).or_default() += 1;
                let oldest = agg.oldest_wait.entry(name.clone()).or_default();
                *oldest = (*oldest).max(waited);
            }
        }
        for ((_, name), &count) in &self.piles {
            let max = agg.pile_max.entry(name.clone()).or_default();
            *max = (*max).max(count);
            agg.pileups.entry(name.clone()).or_default();
        }
        // A pile is `threshold` pods that have each waited minWait, not a fresh batch.
        for (uid, name) in self.kth.keys() {
            let Some(kth) = self.pile_start(uid, name, self.config.pileup.threshold, now) else {
                continue;
            };
            let waited = now.duration_since(kth).unwrap_or_default();
            if waited >= self.config.pileup.min_wait
                && let Some(piles) = agg.pileups.get_mut(name)
            {
                *piles += 1;
            }
        }
        agg
    }

    /// How long `pod` has waited on its initializers: since creation for scheduling gates; for
    /// legacy initializers since the current head became the head (the others cannot progress
    /// before it).
    pub fn waited(&self, pod: &TrackedPod, now: SystemTime) -> Duration {
        let start = match self.mechanism() {
            Mechanism::SchedulingGates => self.created_local(pod, now),
            Mechanism::Initializers => pod.head_since,
        };
        now.duration_since(start).unwrap_or_default()
    }

    /// The end of `pod`'s wait for `name`. A legacy entry that was not the head never started
    /// waiting (its clock starts when it becomes the head), so it ends at zero, as the policy
    /// and the Event of a patch that removes it with the head say.
    fn finish(&self, pod: &TrackedPod, name: &str, outcome: WaitEnd, now: SystemTime) -> Finished {
        let behind_the_head = self.mechanism() == Mechanism::Initializers
            && pod.pending.first().map(String::as_str) != Some(name);
        Finished {
            initializer: name.to_owned(),
            outcome,
            waited: if behind_the_head {
                Duration::ZERO
            } else {
                self.waited(pod, now)
            },
        }
    }

    fn finish_all(&self, pod: &TrackedPod, outcome: WaitEnd, now: SystemTime) -> Vec<Finished> {
        dedup(&pod.pending)
            .into_iter()
            .map(|n| self.finish(pod, n, outcome, now))
            .collect()
    }

    /// Names whose wait is in progress on `pod`: every gate; the legacy head only.
    fn in_progress<'p>(&self, pod: &'p TrackedPod) -> Vec<&'p String> {
        match self.mechanism() {
            Mechanism::SchedulingGates => dedup(&pod.pending),
            Mechanism::Initializers => pod.pending.first().into_iter().collect(),
        }
    }

    /// When `pod` started waiting for its in-progress initializers (as `policy` counts it).
    fn wait_start(&self, pod: &TrackedPod) -> SystemTime {
        match self.mechanism() {
            Mechanism::SchedulingGates => pod.created,
            Mechanism::Initializers => pod.head_since,
        }
    }

    /// The piles `pod` is part of.
    fn pile_keys(&self, pod: &TrackedPod) -> Vec<PileKey> {
        let Some(ctrl) = &pod.controller else {
            return Vec::new();
        };
        self.in_progress(pod)
            .into_iter()
            .map(|n| (ctrl.uid.clone(), n.clone()))
            .collect()
    }

    /// Add `entry` to a pile's ordered starts and keep its k-th entry current: it only
    /// changes when the pile reaches k entries or the new entry sorts before it.
    fn insert_start(&mut self, pile: PileKey, entry: (SystemTime, PodKey)) {
        let k = self.threshold();
        let set = self.starts.entry(pile.clone()).or_default();
        let earlier_than_kth = self.kth.get(&pile).is_some_and(|kth| entry < *kth);
        set.insert(entry);
        let new_kth = if set.len() < k {
            None
        } else if set.len() == k {
            set.last().cloned()
        } else if earlier_than_kth {
            // The old k-th is now (k+1)-th: its predecessor is the new k-th.
            let old = self.kth.get(&pile).cloned();
            old.and_then(|old| set.range(..old).next_back().cloned())
        } else {
            return;
        };
        match new_kth {
            Some(kth) => self.kth.insert(pile, kth),
            None => self.kth.remove(&pile),
        };
    }

    /// Remove `entry` from a pile's ordered starts; the k-th moves to its successor when an
    /// entry at or before it leaves.
    fn remove_start(&mut self, pile: &PileKey, entry: &(SystemTime, PodKey)) {
        let k = self.threshold();
        let Some(set) = self.starts.get_mut(pile) else {
            return;
        };
        if !set.remove(entry) {
            return;
        }
        let old = self.kth.get(pile).cloned();
        let new_kth = match old {
            _ if set.len() < k => None,
            Some(old) if *entry <= old => set
                .range((Bound::Excluded(old), Bound::Unbounded))
                .next()
                .cloned(),
            other => other,
        };
        if set.is_empty() {
            self.starts.remove(pile);
        }
        match new_kth {
            Some(kth) => self.kth.insert(pile.clone(), kth),
            None => self.kth.remove(pile),
        };
    }

    fn insert_entry(&mut self, key: PodKey, pod: TrackedPod) {
        let start = self.wait_start(&pod);
        for pile in self.pile_keys(&pod) {
            self.insert_start(pile, (start, key.clone()));
        }
        if let Some(ctrl) = &pod.controller {
            for name in dedup(&pod.pending) {
                *self
                    .piles
                    .entry((ctrl.uid.clone(), name.clone()))
                    .or_default() += 1;
            }
            self.by_controller
                .entry(ctrl.uid.clone())
                .or_default()
                .insert(key.clone());
        }
        if let Some(job) = job_of(&pod) {
            self.by_job
                .entry(job.uid.clone())
                .or_default()
                .insert(key.clone());
        }
        self.pods.insert(key, pod);
    }

    fn remove_entry(&mut self, key: &str) -> Option<TrackedPod> {
        let pod = self.pods.remove(key)?;
        let start = self.wait_start(&pod);
        for pile in self.pile_keys(&pod) {
            self.remove_start(&pile, &(start, key.to_owned()));
        }
        if let Some(ctrl) = &pod.controller {
            for name in dedup(&pod.pending) {
                let k = (ctrl.uid.clone(), name.clone());
                if let Some(n) = self.piles.get_mut(&k) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.piles.remove(&k);
                    }
                }
            }
            if let Some(set) = self.by_controller.get_mut(&ctrl.uid) {
                set.remove(key);
                if set.is_empty() {
                    self.by_controller.remove(&ctrl.uid);
                }
            }
        }
        if let Some(job) = job_of(&pod)
            && let Some(set) = self.by_job.get_mut(&job.uid)
        {
            set.remove(key);
            if set.is_empty() {
                self.by_job.remove(&job.uid);
            }
        }
        Some(pod)
    }
}

/// How the waits that one update ended came to an end. A removal is a bypass when the same
/// update added a bypass record for that name (the bypass patch removes and records
/// atomically), whichever replica wrote it. Each annotation is parsed once per update, not once
/// per name.
struct WaitEnds {
    before: HashMap<String, usize>,
    after: HashMap<String, usize>,
}

impl WaitEnds {
    fn new(old: &TrackedPod, new: &SlimPod) -> WaitEnds {
        WaitEnds {
            before: records_per_name(old.bypassed_record.as_deref()),
            after: records_per_name(new.bypassed_record.as_deref()),
        }
    }

    fn of(&self, name: &str) -> WaitEnd {
        let count = |records: &HashMap<String, usize>| records.get(name).copied().unwrap_or(0);
        if count(&self.after) > count(&self.before) {
            WaitEnd::Bypassed
        } else {
            WaitEnd::Initialized
        }
    }
}

/// Bypass records per initializer name in an annotation value.
fn records_per_name(annotation: Option<&str>) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for record in annotation.map(parse_records).unwrap_or_default() {
        *counts.entry(record.initializer).or_default() += 1;
    }
    counts
}

/// The Job controlling `pod` directly, if any.
fn job_of(pod: &TrackedPod) -> Option<&ControllerRef> {
    pod.via
        .as_ref()
        .or(pod.controller.as_ref().filter(|c| c.kind == "Job"))
}

/// How often each name occurs.
fn occurrences(names: &[String]) -> HashMap<&str, usize> {
    let mut counts = HashMap::new();
    for name in names {
        *counts.entry(name.as_str()).or_default() += 1;
    }
    counts
}

/// Distinct names in first-seen order.
fn dedup(names: &[String]) -> Vec<&String> {
    let mut seen = HashSet::new();
    names.iter().filter(|n| seen.insert(n.as_str())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(mechanism: Mechanism) -> Arc<Config> {
        let text = format!("mechanism: {}\n", mechanism.as_str());
        Arc::new(Config::from_yaml_str(&text, "test.yaml").unwrap())
    }

    fn pod(
        name: &str,
        uid: &str,
        job: Option<&str>,
        gates: &[&str],
        labels: serde_json::Value,
    ) -> SlimPod {
        let owners = job.map(|j| json!([{"apiVersion": "batch/v1", "kind": "Job", "name": j, "uid": j, "controller": true}]));
        let gates: Vec<_> = gates.iter().map(|g| json!({"name": g})).collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1",
                "creationTimestamp": "2026-11-21T10:00:00Z", "labels": labels, "ownerReferences": owners,
                "initializers": {"pending": gates.clone()}},
            "spec": {"schedulingGates": gates}
        }))
        .unwrap()
    }

    /// A server clock with no response seen yet.
    #[derive(Debug)]
    struct NoSample;

    impl LocalTime for NoSample {
        fn to_local(&self, _: SystemTime, _: SystemTime) -> Option<SystemTime> {
            None
        }
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::from(jiff::Timestamp::from_second(1_795_255_200).unwrap())
            + Duration::from_secs(secs)
    }

    /// Before any response has given the server's clock, a wait counts from the later of the
    /// `creationTimestamp` and the guard's first sight (never early whatever the skew); without
    /// a server clock at all, from the `creationTimestamp`.
    #[test]
    fn before_any_clock_sample_a_wait_counts_from_first_sight_if_later() {
        let l = json!({"initguard.io/bypass": "y"});
        let mut clocked = Tracker::new(config(Mechanism::SchedulingGates)).with_clock(NoSample);
        clocked.apply(&pod("seen-late", "u1", None, &["g"], l.clone()), t(100));
        let seen_late = clocked.get("ns/seen-late").unwrap();
        assert_eq!(clocked.created_local(seen_late, t(100)), t(100));
        // Created "after" it was seen (a server clock ahead): the creationTimestamp counts.
        let mut ahead = pod("ahead", "u2", None, &["g"], l.clone());
        ahead.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::try_from(t(60)).unwrap(),
            ));
        clocked.apply(&ahead, t(30));
        let ahead = clocked.get("ns/ahead").unwrap();
        assert_eq!(clocked.created_local(ahead, t(30)), t(60));
        let mut plain = Tracker::new(config(Mechanism::SchedulingGates));
        plain.apply(&pod("seen-late", "u1", None, &["g"], l), t(100));
        let seen_late = plain.get("ns/seen-late").unwrap();
        assert_eq!(plain.created_local(seen_late, t(100)), t(0));
    }

    #[test]
    fn tracks_piles_and_outcomes() {
        let mut tr = Tracker::new(config(Mechanism::SchedulingGates));
        let l = json!({"initguard.io/bypass": "y"});
        assert!(
            tr.apply(&pod("a", "ua", Some("j"), &["g1", "g2"], l.clone()), t(0))
                .is_empty()
        );
        assert!(
            tr.apply(&pod("b", "ub", Some("j"), &["g1"], json!({})), t(1))
                .is_empty()
        );
        assert_eq!(tr.pile_size("j", "g1"), 2);
        assert_eq!(tr.pile_size("j", "g2"), 1);
        assert_eq!(tr.siblings("ns/a").len(), 2);
        let mut bypassed = pod("a", "ua", Some("j"), &["g2"], l.clone());
        bypassed.bypassed_record = Some("g1=deadline@2026-11-21T10:00:30Z".into());
        let f = tr.apply(&bypassed, t(30));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].initializer, "g1");
        assert_eq!(f[0].outcome, WaitEnd::Bypassed);
        let f = tr.apply(&pod("a", "ua", Some("j"), &[], l), t(31));
        assert_eq!(f[0].outcome, WaitEnd::Initialized);
        assert!(tr.get("ns/a").is_none());
        let f = tr.delete("ns/b", t(40));
        assert_eq!(f[0].outcome, WaitEnd::Deleted);
        assert!(tr.is_empty());
        assert_eq!(tr.pile_size("j", "g1"), 0);
        assert!(tr.by_controller.is_empty() && tr.piles.is_empty());
    }

    #[test]
    fn aggregates_count_opt_in_and_oldest() {
        let mut tr = Tracker::new(config(Mechanism::SchedulingGates));
        for i in 0..4 {
            let labels = if i % 2 == 0 {
                json!({"initguard.io/bypass": ""})
            } else {
                json!({})
            };
            tr.apply(
                &pod(
                    &format!("p{i}"),
                    &format!("u{i}"),
                    Some("j"),
                    &["g"],
                    labels,
                ),
                t(i),
            );
        }
        let agg = tr.aggregates(t(100));
        assert_eq!(agg.waiting[&("g".to_string(), true)], 2);
        assert_eq!(agg.waiting[&("g".to_string(), false)], 2);
        // creationTimestamp is t(0) for all.
        assert_eq!(agg.oldest_wait["g"], Duration::from_secs(100));
        assert_eq!(agg.pile_max["g"], 4);
        assert_eq!(agg.pileups["g"], 1);
    }

    #[test]
    fn legacy_head_clock_starts_when_head_changes() {
        let mut tr = Tracker::new(config(Mechanism::Initializers));
        tr.apply(&pod("a", "ua", None, &["i1", "i2"], json!({})), t(5));
        assert_eq!(tr.get("ns/a").unwrap().head_since, t(5));
        tr.apply(&pod("a", "ua", None, &["i1", "i2"], json!({})), t(7));
        assert_eq!(tr.get("ns/a").unwrap().head_since, t(5));
        let f = tr.apply(&pod("a", "ua", None, &["i2"], json!({})), t(9));
        assert_eq!(f[0].waited, Duration::from_secs(4));
        assert_eq!(tr.get("ns/a").unwrap().head_since, t(9));
    }

    /// One patch removed the head and the entry behind it: the head waited since it became the
    /// head, the entry behind never started waiting (as the policy and the Event say).
    #[test]
    fn legacy_an_entry_removed_with_the_head_waited_zero() {
        let mut tr = Tracker::new(config(Mechanism::Initializers));
        tr.apply(&pod("a", "ua", None, &["i1", "i2", "i3"], json!({})), t(5));
        let mut patched = pod("a", "ua", None, &["i3"], json!({}));
        patched.bypassed_record =
            Some("i1=deadline@2026-11-21T10:00:30Z,i2=deadline@2026-11-21T10:00:30Z".into());
        let f = tr.apply(&patched, t(35));
        let ended: Vec<(&str, WaitEnd, Duration)> = f
            .iter()
            .map(|f| (f.initializer.as_str(), f.outcome, f.waited))
            .collect();
        assert_eq!(
            ended,
            [
                ("i1", WaitEnd::Bypassed, Duration::from_secs(30)),
                ("i2", WaitEnd::Bypassed, Duration::ZERO),
            ]
        );
        // Deleted while waiting: only the head's clock ran.
        let f = tr.delete("ns/a", t(40));
        assert_eq!(f[0].waited, Duration::from_secs(5));
    }

    #[test]
    fn recreated_pod_with_same_name_is_a_new_wait() {
        let mut tr = Tracker::new(config(Mechanism::SchedulingGates));
        tr.apply(&pod("a", "u1", None, &["g"], json!({})), t(0));
        let f = tr.apply(&pod("a", "u2", None, &["g"], json!({})), t(3));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].outcome, WaitEnd::Deleted);
        assert_eq!(tr.get("ns/a").unwrap().uid, "u2");
    }

    /// A pod of Job `job` created `created` seconds after `t(0)`, waiting on `gates`.
    fn created_pod(name: &str, job: &str, created: u64, gates: &[&str]) -> SlimPod {
        let mut p = pod(name, &format!("u-{name}"), Some(job), gates, json!({}));
        p.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(1_795_255_200 + created as i64).unwrap(),
        ));
        p
    }

    /// The k-th earliest wait start of a pile, counted from scratch.
    fn brute_kth(tr: &Tracker, job: &str, gate: &str, k: usize) -> Option<SystemTime> {
        let mut starts: Vec<SystemTime> = tr
            .pods()
            .map(|(_, p)| p)
            .filter(|p| p.controller.as_ref().is_some_and(|c| c.uid == job))
            .filter(|p| match tr.mechanism() {
                Mechanism::SchedulingGates => p.pending.iter().any(|g| g == gate),
                Mechanism::Initializers => p.pending.first().is_some_and(|g| g == gate),
            })
            .map(|p| tr.wait_start(p))
            .collect();
        starts.sort();
        starts.get(k - 1).copied()
    }

    #[test]
    fn pile_start_follows_every_change_and_reports_earlier_moves() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config as RunnerConfig, TestRunner};
        let ops = prop::collection::vec(
            (0usize..12, 0usize..2, 0u64..50, 0usize..4, any::<bool>()),
            1..80,
        );
        let mut runner = TestRunner::new(RunnerConfig::with_cases(200));
        runner
            .run(
                &(ops, any::<bool>(), 1u32..5),
                |(ops, legacy, threshold)| {
                    let mechanism = if legacy {
                        "initializers"
                    } else {
                        "schedulingGates"
                    };
                    let text =
                        format!("mechanism: {mechanism}\npileup: {{ threshold: {threshold} }}\n");
                    let mut tr = Tracker::new(Arc::new(Config::from_yaml_str(&text, "t").unwrap()));
                    let gate_sets: [&[&str]; 4] = [&["a"], &["b", "a"], &["a", "b"], &[]];
                    for (step, (pod_no, job_no, created, gates, delete)) in
                        ops.into_iter().enumerate()
                    {
                        let (name, job) = (format!("p{pod_no}"), ["j0", "j1"][job_no]);
                        let before: Vec<_> = ["j0", "j1"]
                            .iter()
                            .flat_map(|j| ["a", "b"].map(|g| (*j, g)))
                            .map(|(j, g)| ((j, g), tr.pile_start(j, g, threshold, t(0))))
                            .collect();
                        tr.take_moved_earlier();
                        let now = t(100 + step as u64);
                        if delete {
                            tr.delete(&format!("ns/{name}"), now);
                        } else {
                            tr.apply(&created_pod(&name, job, created, gate_sets[gates]), now);
                        }
                        let moved = tr.take_moved_earlier();
                        let mut earlier = HashSet::new();
                        for ((j, g), was) in before {
                            let is = tr.pile_start(j, g, threshold, t(0));
                            prop_assert_eq!(
                                is,
                                brute_kth(&tr, j, g, threshold as usize),
                                "{} {}",
                                j,
                                g
                            );
                            for k in 1..=threshold + 1 {
                                prop_assert_eq!(
                                    tr.pile_start(j, g, k, t(0)),
                                    brute_kth(&tr, j, g, k as usize)
                                );
                            }
                            if is.is_some_and(|is| was.is_none_or(|was| is < was)) {
                                earlier.insert(j.to_owned());
                            }
                        }
                        // Exactly the controllers with a pile that moved earlier: a report
                        // of an unmoved pile would re-decide its pods for nothing.
                        prop_assert_eq!(moved, earlier);
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn pileups_count_only_piles_whose_pods_each_waited_min_wait() {
        let text = "pileup: { threshold: 2, minWait: 10s }\n";
        let mut tr = Tracker::new(Arc::new(Config::from_yaml_str(text, "t").unwrap()));
        for (name, created) in [("a", 0), ("b", 5), ("c", 7)] {
            tr.apply(&created_pod(name, "j", created, &["g"]), t(8));
        }
        assert_eq!(tr.aggregates(t(14)).pileups["g"], 0);
        assert_eq!(tr.aggregates(t(14)).pile_max["g"], 3);
        assert_eq!(tr.aggregates(t(15)).pileups["g"], 1);
        tr.delete("ns/b", t(15));
        assert_eq!(tr.aggregates(t(16)).pileups["g"], 0);
        assert_eq!(tr.aggregates(t(17)).pileups["g"], 1);
    }

    fn cron_job() -> ControllerRef {
        ControllerRef {
            kind: "CronJob".into(),
            name: "nightly".into(),
            uid: "cj".into(),
        }
    }

    #[test]
    fn pods_of_a_cron_jobs_jobs_share_one_pile() {
        let text = "pileup: { threshold: 2, minWait: 10s }\n";
        let mut tr = Tracker::new(Arc::new(Config::from_yaml_str(text, "t").unwrap()));
        // One pod per Job, tracked before the Jobs' owner is known: two piles of one.
        tr.apply(&created_pod("a", "j1", 0, &["g"]), t(1));
        tr.apply(&created_pod("b", "j2", 1, &["g"]), t(2));
        assert_eq!((tr.pile_size("j1", "g"), tr.pile_size("j2", "g")), (1, 1));
        assert_eq!(tr.aggregates(t(60)).pileups["g"], 0);
        tr.take_moved_earlier();
        assert_eq!(tr.set_job_owner("j1", Some(cron_job())), vec!["ns/a"]);
        let mut moved = tr.set_job_owner("j2", Some(cron_job()));
        moved.sort();
        assert_eq!(moved, vec!["ns/b"]);
        // The CronJob's pile reached the threshold: its pods may act earlier.
        assert!(tr.take_moved_earlier().contains("cj"));
        assert_eq!(tr.pile_size("cj", "g"), 2);
        assert_eq!(tr.pile_size("j1", "g") + tr.pile_size("j2", "g"), 0);
        assert_eq!(tr.pile_start("cj", "g", 2, t(0)), Some(t(1)));
        assert_eq!(tr.aggregates(t(60)).pileups["g"], 1);
        assert_eq!(tr.aggregates(t(60)).pile_max["g"], 2);
        let a = tr.get("ns/a").unwrap();
        assert_eq!(a.controller, Some(cron_job()));
        assert_eq!(a.via.as_ref().map(|j| j.uid.as_str()), Some("j1"));
        // Seen again: no move.
        assert!(tr.set_job_owner("j1", Some(cron_job())).is_empty());
        // A pod of a known Job joins the CronJob's pile at once; updates keep it there.
        tr.apply(&created_pod("c", "j1", 2, &["g"]), t(3));
        tr.apply(&created_pod("c", "j1", 2, &["g"]), t(4));
        assert_eq!(tr.pile_size("cj", "g"), 3);
        assert_eq!(tr.siblings("ns/c").len(), 3);
        // A deleted Job keeps grouping its remaining pods until the last one leaves.
        tr.forget_job("j2");
        tr.apply(&created_pod("b", "j2", 1, &["g"]), t(5));
        assert_eq!(tr.pile_size("cj", "g"), 3);
        tr.delete("ns/b", t(6));
        assert!(!tr.known_jobs().contains(&"j2".to_string()));
        // Unowned again (orphaned): back to the Job's own pile.
        assert_eq!(tr.set_job_owner("j1", None).len(), 2);
        assert_eq!((tr.pile_size("cj", "g"), tr.pile_size("j1", "g")), (0, 2));
        assert!(tr.get("ns/a").unwrap().via.is_none());
        tr.delete("ns/a", t(7));
        tr.delete("ns/c", t(7));
        assert!(tr.by_job.is_empty() && tr.by_controller.is_empty() && tr.starts.is_empty());
    }

    #[test]
    fn wait_ends_are_labelled_as_the_metric_documents() {
        let labels: Vec<&str> = [WaitEnd::Initialized, WaitEnd::Bypassed, WaitEnd::Deleted]
            .into_iter()
            .map(WaitEnd::as_str)
            .collect();
        assert_eq!(labels, ["initialized", "bypassed", "deleted"]);
    }

    fn sorted(mut keys: Vec<String>) -> Vec<String> {
        keys.sort();
        keys
    }

    #[test]
    fn counts_and_lookups_follow_the_waiting_pods() {
        let mut tr = Tracker::new(config(Mechanism::SchedulingGates));
        assert_eq!((tr.len(), tr.is_empty()), (0, true));
        tr.apply(&pod("a", "ua", Some("j"), &["g"], json!({})), t(0));
        tr.apply(&pod("b", "ub", Some("j"), &["g"], json!({})), t(0));
        tr.apply(&pod("c", "uc", Some("k"), &["g"], json!({})), t(0));
        assert_eq!((tr.len(), tr.is_empty()), (3, false));
        assert_eq!(sorted(tr.pods_of_controller("j")), ["ns/a", "ns/b"]);
        assert_eq!(tr.pods_of_controller("k"), ["ns/c"]);
        assert!(tr.pods_of_controller("nobody").is_empty());
    }

    #[test]
    fn a_namespace_selection_change_re_decides_that_namespaces_pods() {
        let text = "optIn: { namespaceSelector: \"team=batch\" }\n";
        let mut tr = Tracker::new(Arc::new(Config::from_yaml_str(text, "t").unwrap()));
        tr.apply(&pod("a", "ua", None, &["g"], json!({})), t(0));
        let mut elsewhere = pod("b", "ub", None, &["g"], json!({}));
        elsewhere.metadata.namespace = Some("other".into());
        tr.apply(&elsewhere, t(0));
        assert!(!tr.get("ns/a").unwrap().opted_in);
        // Selected: only that namespace's pods change, and are returned to be decided again.
        assert_eq!(tr.set_namespace_selected("ns", true), ["ns/a"]);
        let a = tr.get("ns/a").unwrap();
        assert!(a.opted_in && a.namespace_selected);
        let b = tr.get("other/b").unwrap();
        assert!(!b.opted_in && !b.namespace_selected);
        assert_eq!(tr.selected_namespaces(), ["ns"]);
        // No change, nothing to decide again.
        assert!(tr.set_namespace_selected("ns", true).is_empty());
        // A pod first seen in a selected namespace is opted in from the start.
        tr.apply(&pod("c", "uc", None, &["g"], json!({})), t(1));
        assert!(tr.get("ns/c").unwrap().opted_in);
        assert_eq!(
            sorted(tr.set_namespace_selected("ns", false)),
            ["ns/a", "ns/c"]
        );
        assert!(!tr.get("ns/a").unwrap().opted_in);
        assert!(tr.selected_namespaces().is_empty());
    }

    /// A server clock `.0` ahead of this process's.
    #[derive(Debug)]
    struct Ahead(Duration);

    impl LocalTime for Ahead {
        fn to_local(&self, server_time: SystemTime, _: SystemTime) -> Option<SystemTime> {
            Some(server_time - self.0)
        }
    }

    #[test]
    fn views_and_one_shot_heads_use_the_local_creation_time() {
        let mut tr = Tracker::new(config(Mechanism::Initializers))
            .with_clock(Ahead(Duration::from_secs(10)));
        // Created at 20 on the server's clock, 10 on ours; first seen at 50.
        tr.apply(&created_pod("a", "j", 20, &["i"]), t(50));
        let a = tr.get("ns/a").unwrap();
        assert_eq!(a.head_since, t(50));
        assert_eq!(tr.view(a, t(50)).created, t(10));
        tr.assume_heads_since_creation(t(50));
        assert_eq!(tr.get("ns/a").unwrap().head_since, t(10));
    }

    /// `p` marked for deletion.
    fn terminating(mut p: SlimPod) -> SlimPod {
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::try_from(t(9)).unwrap(),
        ));
        p
    }

    #[test]
    fn deletion_while_waiting_ends_as_deleted_and_not_otherwise() {
        let outcome = |update: SlimPod| {
            let mut tr = Tracker::new(config(Mechanism::SchedulingGates));
            tr.apply(&pod("a", "ua", None, &["g"], json!({})), t(0));
            let ended: Vec<(String, WaitEnd)> = tr
                .apply(&update, t(10))
                .into_iter()
                .map(|f| (f.initializer, f.outcome))
                .collect();
            assert!(tr.is_empty());
            ended
        };
        let deleted = terminating(pod("a", "ua", None, &["g"], json!({})));
        assert_eq!(outcome(deleted), [("g".into(), WaitEnd::Deleted)]);
        // The gate was removed by the update that also marked the pod for deletion.
        let initialized = terminating(pod("a", "ua", None, &[], json!({})));
        assert_eq!(outcome(initialized), [("g".into(), WaitEnd::Initialized)]);
        let initialized = pod("a", "ua", None, &[], json!({}));
        assert_eq!(outcome(initialized), [("g".into(), WaitEnd::Initialized)]);
    }

    #[test]
    fn repeated_names_and_repeated_records_are_counted() {
        let mut tr = Tracker::new(config(Mechanism::SchedulingGates));
        let mut with_record = pod("a", "ua", None, &["g", "g", "h"], json!({}));
        with_record.bypassed_record = Some("g=deadline@2026-11-21T10:00:30Z".into());
        tr.apply(&with_record, t(0));
        // One of two `g`s removed: that wait ended; no new record, so by its owner.
        let mut one_g = pod("a", "ua", None, &["g", "h"], json!({}));
        one_g.bypassed_record = with_record.bypassed_record.clone();
        let f = tr.apply(&one_g, t(5));
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].initializer.as_str(), f[0].outcome),
            ("g", WaitEnd::Initialized)
        );
        // The last `g` removed with a second record for it: a bypass.
        let mut bypassed = pod("a", "ua", None, &["h"], json!({}));
        bypassed.bypassed_record =
            Some("g=deadline@2026-11-21T10:00:30Z,g=deadline@2026-11-21T10:01:30Z".into());
        let f = tr.apply(&bypassed, t(90));
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].initializer.as_str(), f[0].outcome),
            ("g", WaitEnd::Bypassed)
        );
    }

    #[test]
    fn jobs_joining_a_pile_report_it_only_when_it_moves_earlier() {
        let text = "pileup: { threshold: 2 }\n";
        let mut tr = Tracker::new(Arc::new(Config::from_yaml_str(text, "t").unwrap()));
        tr.apply(&created_pod("a", "j1", 5, &["g"]), t(10));
        tr.apply(&created_pod("b", "j1", 6, &["g"]), t(10));
        tr.apply(&created_pod("c", "j2", 9, &["g"]), t(10));
        tr.apply(&created_pod("d", "j3", 1, &["g"]), t(10));
        tr.set_job_owner("j1", Some(cron_job()));
        assert_eq!(tr.pile_start("cj", "g", 2, t(10)), Some(t(6)));
        tr.take_moved_earlier();
        // A later pod joins: the 2nd-earliest start stays at 6.
        assert_eq!(tr.set_job_owner("j2", Some(cron_job())), ["ns/c"]);
        assert_eq!(tr.pile_start("cj", "g", 2, t(10)), Some(t(6)));
        assert!(tr.take_moved_earlier().is_empty());
        // An earlier one joins: it moves to 5.
        assert_eq!(tr.set_job_owner("j3", Some(cron_job())), ["ns/d"]);
        assert_eq!(tr.pile_start("cj", "g", 2, t(10)), Some(t(5)));
        assert_eq!(tr.take_moved_earlier(), HashSet::from(["cj".to_owned()]));
        assert_eq!(sorted(tr.known_jobs()), ["j1", "j2", "j3"]);
        // A deleted Job is known until its last tracked pod leaves.
        tr.forget_job("j1");
        tr.delete("ns/a", t(11));
        assert_eq!(sorted(tr.known_jobs()), ["j1", "j2", "j3"]);
        assert_eq!(tr.get("ns/b").unwrap().controller, Some(cron_job()));
        tr.delete("ns/b", t(12));
        assert_eq!(sorted(tr.known_jobs()), ["j2", "j3"]);
        // A Job with no tracked pod is forgotten at once.
        tr.set_job_owner("j4", Some(cron_job()));
        tr.forget_job("j4");
        assert_eq!(sorted(tr.known_jobs()), ["j2", "j3"]);
    }

    #[test]
    fn resync_drops_pods_missing_from_the_list() {
        let mut tr = Tracker::new(config(Mechanism::SchedulingGates));
        tr.apply(&pod("a", "ua", None, &["g"], json!({})), t(0));
        tr.apply(&pod("b", "ub", None, &["g"], json!({})), t(0));
        let f = tr.resync(&[pod("b", "ub", None, &["g"], json!({}))], t(2));
        assert_eq!(f.len(), 1);
        assert_eq!(tr.len(), 1);
    }
}
