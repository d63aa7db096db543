//! The pods the node stage follows: bound, not yet initialized, waiting on a listed step.
//! Pure bookkeeping fed by the pod watch, like [`crate::tracker`]: only what decisions need
//! is kept per pod, and pods waiting on an unlisted step are only counted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::agents::{AgentPod, DaemonSetAgents};
use super::budget::{Budget, DEFAULT_PATIENCE, HOUR};
use super::{
    InitContainerConfig, Recreator, RestartPolicy, StepOutcome, StepView, current_step, decide,
    failed_code, listed, restarts,
};
use crate::config::{Config, ObjectRef, StepOwner};
use crate::pod::SlimPod;
use crate::policy::{ControllerRef, OwnerState};
use crate::tracker::{LocalTime, PodKey};

/// The `container` label of pods waiting on an unlisted step.
pub const OTHER: &str = "other";

/// A pod the guard is evicting: the watch may report its deletion before the eviction's
/// answer arrives, so what it shows is kept until then.
#[derive(Debug, Clone, Default)]
struct Recreating {
    /// The re-creating controller's uid.
    controller: Option<String>,
    /// When the pod's deletion was requested ([`SlimPod::deletion_requested`]), the earliest
    /// seen (a later, shorter delete can make the time derived from the object later).
    cutoff: Option<SystemTime>,
    /// The server accepted the eviction.
    confirmed: bool,
    /// The watch reported the pod gone.
    gone: bool,
}

/// One pod waiting on a listed step.
#[derive(Debug, Clone)]
pub struct StagePod {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid (evictions are preconditioned on it).
    pub uid: String,
    /// The opt-in label, when the pod carries it (no other label is kept).
    pub labels: BTreeMap<String, String>,
    /// `spec.nodeName`.
    pub node: String,
    /// When it was bound, on this process's clock, never earlier than the truth.
    pub bound: SystemTime,
    /// `creationTimestamp` (the budget's "created after the recreation").
    pub created: SystemTime,
    /// The controlling owner.
    pub controller: Option<ControllerRef>,
    /// What re-creates it (by the controller's kind and API group).
    pub recreator: Recreator,
    /// The pod's `restartPolicy`.
    pub restart_policy: RestartPolicy,
    /// Being deleted.
    pub deleting: bool,
    /// Steps before this index were seen done.
    pub done_before: usize,
    /// The listed step it waits on.
    pub step: Arc<str>,
    /// A listed exit code that step exited with (kept once seen: `lastState` moves on).
    pub failed: Option<i32>,
    /// Whether the kubelet restarts the step.
    pub restarts: bool,
    /// Restarts of the step so far.
    pub step_restarts: u32,
}

/// How a pod's wait on a listed step ended (`initguard_init_wait_duration_seconds`'s
/// `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageEnd {
    /// The step finished (the pod moved on, or turned Initialized).
    Initialized,
    /// initguard evicted it.
    Recreated,
    /// It went away otherwise.
    Deleted,
    /// It failed (phase Failed: its stuck step does not restart).
    Failed,
}

impl StageEnd {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            StageEnd::Initialized => "initialized",
            StageEnd::Recreated => "recreated",
            StageEnd::Deleted => "deleted",
            StageEnd::Failed => "failed",
        }
    }
}

/// A finished wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The step waited on.
    pub step: Arc<str>,
    /// For how long.
    pub waited: Duration,
    /// How it ended.
    pub end: StageEnd,
}

/// A listed exit code seen for the first time on a pod's step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The step.
    pub step: Arc<str>,
    /// The exit code.
    pub code: i32,
    /// The pod failed with it (its stuck step does not restart): reported, never recreated.
    pub for_good: bool,
}

/// What changed for one pod in [`StageTracker::apply`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Its wait on a step ended.
    pub ended: Option<Ended>,
    /// It now waits on a listed step (to be decided).
    pub waiting: bool,
    /// A listed exit code was seen for the first time on its step.
    pub newly_failed: Option<Failure>,
}

/// Per listed step (or [`OTHER`]): waiting pods, opted-in or not, and the oldest wait.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCounts {
    /// Waiting pods that opted in (by label or namespace).
    pub opted_in: usize,
    /// Waiting pods that did not.
    pub not_opted_in: usize,
    /// The longest wait (listed steps only).
    #[serde(with = "humantime_serde")]
    pub oldest: Option<Duration>,
    /// Nodes where the step's owner is down and a pod waits.
    pub owner_down_nodes: usize,
}

/// The node stage's pods, agents and budget.
#[derive(Debug)]
pub struct StageTracker {
    config: Arc<Config>,
    clock: Option<Box<dyn LocalTime>>,
    pods: HashMap<PodKey, StagePod>,
    /// Hashes of the keys of pods waiting on an unlisted step: a count, not state.
    other: HashSet<u64>,
    /// Hashes of the keys of Failed pods whose failure was reported.
    failed_reported: HashSet<u64>,
    /// Pods the guard is evicting or evicted whose deletion the watch has not reported yet
    /// (or whose eviction was not confirmed yet).
    recreating: HashMap<PodKey, Recreating>,
    /// Controllers whose budget changed: their waiting pods are decided again.
    dirty_controllers: HashSet<String>,
    /// Pods listed since a relist began; None outside one.
    relist: Option<HashSet<PodKey>>,
    /// Agent pods listed since a relist began, per DaemonSet.
    agent_relist: HashMap<ObjectRef, Vec<AgentPod>>,
    agents: HashMap<ObjectRef, DaemonSetAgents>,
    budget: Budget,
    /// Pods to decide about again (see [`StageTracker::take_dirty`]).
    dirty: HashSet<PodKey>,
    /// Nodes whose agents changed: every pod waiting there is decided again.
    dirty_nodes: HashSet<String>,
    /// Every pod is decided again (a DaemonSet changed, a relist ended).
    all_dirty: bool,
}

impl StageTracker {
    /// Nothing followed yet; one agent model per DaemonSet the config names.
    pub fn new(config: Arc<Config>) -> StageTracker {
        let agents = config
            .init_containers
            .iter()
            .filter_map(super::daemonset_owner)
            .map(|ds| (ds.clone(), DaemonSetAgents::default()))
            .collect();
        StageTracker {
            config,
            clock: None,
            pods: HashMap::new(),
            other: HashSet::new(),
            failed_reported: HashSet::new(),
            recreating: HashMap::new(),
            dirty_controllers: HashSet::new(),
            relist: None,
            agent_relist: HashMap::new(),
            agents,
            budget: Budget::default(),
            dirty: HashSet::new(),
            dirty_nodes: HashSet::new(),
            all_dirty: false,
        }
    }

    /// Bring `PodScheduled` times into this process's clock through the API server's.
    pub fn with_clock(mut self, clock: impl LocalTime + 'static) -> StageTracker {
        self.clock = Some(Box::new(clock));
        self
    }

    /// The pod's wait on a listed step, if it has one.
    pub fn get(&self, key: &str) -> Option<&StagePod> {
        self.pods.get(key)
    }

    /// The agent model of DaemonSet `ds`, when a listed step names it. Every waiting pod is
    /// decided again afterwards: a DaemonSet's change may change every node's state.
    pub fn agents_mut(&mut self, ds: &ObjectRef) -> Option<&mut DaemonSetAgents> {
        let agents = self.agents.get_mut(ds)?;
        self.all_dirty = true;
        Some(agents)
    }

    /// The pods to decide about again since the last call, in no order: each pod whose
    /// update left it waiting, every pod on a node whose agents changed, every pod after a
    /// DaemonSet changed or a relist ended, every pod of a controller whose budget changed.
    /// A pod whose wait ended is named once more (it no longer decides anything: its writer's
    /// memory of it goes).
    pub fn take_dirty(&mut self) -> Vec<PodKey> {
        let all = std::mem::take(&mut self.all_dirty);
        let mut dirty = std::mem::take(&mut self.dirty);
        let nodes = std::mem::take(&mut self.dirty_nodes);
        let controllers = std::mem::take(&mut self.dirty_controllers);
        if all || !nodes.is_empty() || !controllers.is_empty() {
            dirty.extend(
                self.pods
                    .iter()
                    .filter(|(_, p)| {
                        all || nodes.contains(&p.node)
                            || p.controller
                                .as_ref()
                                .is_some_and(|c| controllers.contains(&c.uid))
                    })
                    .map(|(k, _)| k.clone()),
            );
        }
        dirty.into_iter().collect()
    }

    /// Rebuild the recreation budget from the guard's own records (a restart or a new
    /// leader): each the re-creating controller's uid and when the record was made, on the
    /// API server's clock. Converted so that no record is placed earlier than it happened
    /// (a record counts towards the hour for at least as long as it should); `now` when the
    /// server's clock is not known yet.
    pub fn rebuild_budget(
        &mut self,
        records: impl IntoIterator<Item = (String, SystemTime)>,
        now: SystemTime,
    ) {
        let converted: Vec<(String, SystemTime)> = records
            .into_iter()
            .map(|(controller, at)| {
                let local = match &self.clock {
                    None => Some(at),
                    Some(clock) => clock.to_local(at, now),
                };
                (controller, local.unwrap_or(now))
            })
            .collect();
        self.budget = Budget::rebuild(converted);
        self.all_dirty = true;
    }

    /// Fold in a pod as listed or watched at `now`.
    pub fn apply(&mut self, pod: &SlimPod, now: SystemTime) -> Applied {
        self.observe_agent(pod, now);
        let key = pod.key();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let created = pod.created().unwrap_or(now);
        let controller = pod.controller();
        let deletion = pod.deletion_requested();
        if let (Some(at), Some(r)) = (deletion, self.recreating.get_mut(&key)) {
            r.cutoff = Some(r.cutoff.map_or(at, |c| c.min(at)));
            if let (true, Some(c)) = (r.confirmed, &r.controller) {
                self.budget.deleting(c, at);
            }
        }
        if let Some(c) = &controller {
            // Only Initialized counts: an unscheduled or gated replacement is not there yet;
            // a pod being deleted is no replacement (nor the evicted pod itself).
            self.budget
                .pod_seen(&c.uid, uid, created, pod.initialized, deletion.is_some());
            if self.budget.tracks(&c.uid) {
                self.dirty_controllers.insert(c.uid.clone());
            }
        }
        let key_hash = hash(&key);
        self.other.remove(&key_hash);
        if let Some(relist) = &mut self.relist {
            relist.insert(key.clone());
        }
        let mut applied = Applied::default();
        let mut previous = self.pods.remove(&key);
        if previous.is_some() {
            // Decided again, or (when it stops waiting) forgotten by the writer.
            self.dirty.insert(key.clone());
        }
        if let Some(old) = previous.take_if(|p| p.uid != uid) {
            // A new pod under the same name (a StatefulSet's): the old one went unseen.
            applied.ended = Some(self.gone(&key, &old, now));
            self.failed_reported.remove(&key_hash);
        }
        let failed_phase = pod.phase.as_deref() == Some("Failed");
        if failed_phase && deletion.is_some() {
            // A Pending pod being deleted turns Failed before it goes (kubelet, 1.27+): an
            // eviction, not a failure.
            if let Some(p) = previous {
                applied.ended = Some(self.gone(&key, &p, now));
            }
            return applied;
        }
        let end = if failed_phase {
            StageEnd::Failed
        } else {
            StageEnd::Initialized
        };
        let waiting_on = pod.init.as_deref().and_then(|progress| {
            let done_before = previous.as_ref().map_or(0, |p| p.done_before);
            let current = current_step(progress, done_before)?;
            Some((progress, current))
        });
        let Some((progress, current)) = waiting_on else {
            applied.ended = applied.ended.or(previous.map(|p| self.ended(&p, end, now)));
            return applied;
        };
        let Some(config) = listed(&self.config, &current.step.name) else {
            applied.ended = applied.ended.or(previous.map(|p| self.ended(&p, end, now)));
            if !failed_phase {
                self.other.insert(key_hash);
            }
            return applied;
        };
        let step: Arc<str> = previous
            .as_ref()
            .filter(|p| *p.step == *config.name)
            .map_or_else(|| Arc::from(config.name.as_str()), |p| p.step.clone());
        let same_step = previous
            .as_ref()
            // A pod's init containers cannot change: the index names the step.
            .filter(|p| p.done_before == current.index);
        if let Some(p) = previous.as_ref().filter(|_| same_step.is_none()) {
            applied.ended = Some(self.ended(p, StageEnd::Initialized, now));
        }
        let seen = failed_code(current.step, &config.failed_exit_codes);
        let latched = same_step.and_then(|p| p.failed);
        if latched.is_none() {
            applied.newly_failed = seen.map(|code| Failure {
                step: step.clone(),
                code,
                for_good: failed_phase,
            });
        }
        if failed_phase {
            // The stuck step does not restart: the pod failed for good, reported once.
            if !self.failed_reported.insert(key_hash) {
                applied.newly_failed = None;
            }
            applied.ended = applied
                .ended
                .or(previous.map(|p| self.ended(&p, StageEnd::Failed, now)));
            return applied;
        }
        let failed = latched.or(seen);
        // One clock for every step of the pod.
        let bound = previous.as_ref().map_or_else(
            || self.bound(progress.scheduled_at, pod.created(), now),
            |p| p.bound,
        );
        let label = &self.config.opt_in.label;
        let labels = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get_key_value(label))
            .map(|(k, v)| (k.clone(), v.clone()))
            .into_iter()
            .collect();
        let recreator = recreator_of(pod);
        self.pods.insert(
            key,
            StagePod {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: uid.to_owned(),
                labels,
                node: progress.node.clone(),
                bound,
                created,
                controller,
                recreator,
                restart_policy: progress.restart_policy,
                deleting: deletion.is_some(),
                done_before: current.index,
                step,
                failed,
                restarts: restarts(progress, current.step),
                step_restarts: current.step.status.map_or(0, |s| s.restarts),
            },
        );
        applied.waiting = true;
        self.dirty.insert(pod.key());
        applied
    }

    /// The pod was deleted (the watch's last state of it).
    pub fn delete(&mut self, pod: &SlimPod, now: SystemTime) -> Option<Ended> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        for (ds, agents) in &mut self.agents {
            if ds.namespace == namespace {
                agents.pod_deleted(uid, now);
                self.dirty_nodes.insert(pod.node_name.clone());
            }
        }
        let key = pod.key();
        let key_hash = hash(&key);
        self.other.remove(&key_hash);
        self.failed_reported.remove(&key_hash);
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Some(c) = pod.controller() {
            self.budget.pod_gone(&c.uid, uid);
        }
        match self.pods.remove(&key) {
            Some(p) if p.uid == uid || uid.is_empty() => Some(self.gone(&key, &p, now)),
            // The name's newer pod stays.
            Some(p) => {
                self.pods.insert(key, p);
                None
            }
            None => {
                self.recreating.remove(&key);
                None
            }
        }
    }

    /// A relist of pods begins: pods it does not list are gone at [`Self::relist_done`].
    pub fn relist_started(&mut self) {
        self.relist = Some(HashSet::new());
        self.agent_relist = self
            .agents
            .keys()
            .map(|ds| (ds.clone(), Vec::new()))
            .collect();
    }

    /// The relist is complete: pods it did not list went away unseen.
    pub fn relist_done(&mut self, now: SystemTime) -> Vec<Ended> {
        let Some(seen) = self.relist.take() else {
            return Vec::new();
        };
        self.all_dirty = true;
        for (ds, pods) in std::mem::take(&mut self.agent_relist) {
            if let Some(agents) = self.agents.get_mut(&ds) {
                agents.pods_relisted(pods, now);
            }
        }
        let hashes: HashSet<u64> = seen.iter().map(|k| hash(k)).collect();
        self.other.retain(|h| hashes.contains(h));
        self.failed_reported.retain(|h| hashes.contains(h));
        // An eviction not answered yet keeps its record: its answer counts it.
        self.recreating
            .retain(|k, r| seen.contains(k) || !r.confirmed);
        let gone: Vec<PodKey> = self
            .pods
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        gone.into_iter()
            .filter_map(|key| {
                let pod = self.pods.remove(&key)?;
                if let Some(c) = &pod.controller {
                    self.budget.pod_gone(&c.uid, &pod.uid);
                }
                Some(self.gone(&key, &pod, now))
            })
            .collect()
    }

    /// A pod controlled by a DaemonSet, in the namespace of a DaemonSet a step names, is a
    /// candidate agent of it (its controller's uid decides).
    fn observe_agent(&mut self, pod: &SlimPod, now: SystemTime) {
        let Some(controller) = pod.controller().filter(|c| c.kind == "DaemonSet") else {
            return;
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let agent = AgentPod {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: pod.node_name.clone(),
            controller_uid: controller.uid,
            serving: pod.ready && pod.metadata.deletion_timestamp.is_none(),
            ready_since: pod.ready_since.map(|t| self.lower_bound(t, now)),
        };
        for (ds, agents) in &mut self.agents {
            if ds.namespace != namespace {
                continue;
            }
            self.dirty_nodes.insert(agent.node.clone());
            match self
                .agent_relist
                .get_mut(ds)
                .filter(|_| self.relist.is_some())
            {
                Some(listed) => listed.push(agent.clone()),
                None => agents.pod_applied(agent.clone(), now),
            }
        }
    }

    /// A server time on this process's clock, no later than the truth: converted through the
    /// server's clock (whose reading is good to its `Date` header's second) less that second,
    /// and never after `now`, when it was seen.
    fn lower_bound(&self, server_time: SystemTime, now: SystemTime) -> SystemTime {
        let local = match &self.clock {
            None => Some(server_time),
            Some(clock) => clock.to_local(server_time, now),
        };
        local
            .and_then(|t| t.checked_sub(Duration::from_secs(1)))
            .unwrap_or(server_time)
            .min(now)
    }

    /// `pod` went away: its wait ends as recreated when the guard evicted it, else deleted.
    fn gone(&mut self, key: &str, pod: &StagePod, now: SystemTime) -> Ended {
        // Named once more by `take_dirty`, so the writer forgets what it kept for the pod.
        self.dirty.insert(key.to_owned());
        let end = match self.recreating.get_mut(key) {
            Some(r) if r.confirmed => {
                self.recreating.remove(key);
                StageEnd::Recreated
            }
            // Kept for the eviction's answer.
            Some(r) => {
                r.gone = true;
                StageEnd::Recreated
            }
            None => StageEnd::Deleted,
        };
        if let Some(c) = &pod.controller {
            self.budget.pod_gone(&c.uid, &pod.uid);
            if self.budget.tracks(&c.uid) {
                self.dirty_controllers.insert(c.uid.clone());
            }
        }
        self.ended(pod, end, now)
    }

    /// The guard is about to evict the pod `key`: what the watch shows of its deletion from
    /// now on is kept for [`Self::recreated`].
    pub fn evicting(&mut self, key: &str) {
        if let Some(pod) = self.pods.get(key) {
            self.recreating.insert(
                key.to_owned(),
                Recreating {
                    controller: pod.controller.as_ref().map(|c| c.uid.clone()),
                    ..Recreating::default()
                },
            );
        }
    }

    /// The eviction of `key` did not happen (refused, gone first, not sent).
    pub fn eviction_failed(&mut self, key: &str) {
        self.recreating.remove(key);
    }

    /// The server accepted the eviction of the pod `key` at `now`: counted against its
    /// controller's budget, and its wait ends as recreated once the watch reports it gone.
    pub fn recreated(&mut self, key: &str, now: SystemTime) {
        self.budget.forget_before(now);
        let record = match self.recreating.remove(key) {
            Some(r) => r,
            None => match self.pods.get(key) {
                Some(pod) => Recreating {
                    controller: pod.controller.as_ref().map(|c| c.uid.clone()),
                    ..Recreating::default()
                },
                None => return,
            },
        };
        if let Some(c) = &record.controller {
            self.budget.recreated(c, now);
            if let Some(cutoff) = record.cutoff {
                self.budget.deleting(c, cutoff);
            }
            // Only a controller's latest eviction sets its cutoff: an earlier evicted pod
            // still terminating would make pods created after its own eviction (its
            // replacement, initialized already) count as this one's.
            for earlier in self.recreating.values_mut() {
                if earlier.controller.as_deref() == Some(c.as_str()) {
                    earlier.controller = None;
                }
            }
            self.dirty_controllers.insert(c.clone());
        }
        if !record.gone {
            self.recreating.insert(
                key.to_owned(),
                Recreating {
                    confirmed: true,
                    ..record
                },
            );
        }
    }

    /// The state of `step`'s owner for a pod on `node`, and when its up-period began (see
    /// [`decide`]): a DaemonSet's on that node; a cluster-wide owner's from `cluster`;
    /// Unknown without an owner.
    pub fn owner_state(
        &self,
        step: &InitContainerConfig,
        node: &str,
        cluster: &Cluster<'_>,
    ) -> (OwnerState, Option<SystemTime>) {
        match &step.owner {
            Some(StepOwner::DaemonSet(ds)) => self
                .agents
                .get(ds)
                .map_or((OwnerState::Unknown, None), |a| {
                    (a.state(node), a.began(node))
                }),
            Some(StepOwner::Cluster(_)) => cluster(&step.name),
            None => (OwnerState::Unknown, None),
        }
    }

    /// Decide about the pod `key` at `now` (None when it does not wait on a listed step).
    /// `namespace_selected`: whether its namespace matches `optIn.namespaceSelector`.
    pub fn decide(
        &self,
        key: &str,
        namespace_selected: bool,
        cluster: &Cluster<'_>,
        now: SystemTime,
    ) -> Option<StepOutcome> {
        let pod = self.pods.get(key)?;
        let step = listed(&self.config, &pod.step)?;
        let (owner, began) = self.owner_state(step, &pod.node, cluster);
        // Capped at the hour the budget's records cover.
        let patience = step.deadline.unwrap_or(DEFAULT_PATIENCE).min(HOUR);
        let budget = pod.controller.as_ref().and_then(|c| {
            self.budget
                .hold(&c.uid, now, patience, self.config.recreate.max_per_hour)
        });
        let view = StepView {
            namespace: &pod.namespace,
            labels: &pod.labels,
            namespace_selected,
            bound: pod.bound,
            failed: pod.failed,
            restarts: pod.restarts,
            pod_restart_policy: pod.restart_policy,
            deleting: pod.deleting,
            recreator: pod.recreator,
        };
        Some(decide(&view, step, owner, began, budget, &self.config, now))
    }

    /// Every pod waiting on a listed step, longest wait first, at most `limit`, with the
    /// decision and its words at `now` (for `/status`, `initguard status` and `why`).
    pub fn statuses(
        &self,
        namespace_selected: &dyn Fn(&str) -> bool,
        cluster: &Cluster<'_>,
        now: SystemTime,
        limit: usize,
    ) -> Vec<crate::report::InitWaitStatus> {
        let mut pods: Vec<(&PodKey, &StagePod)> = self.pods.iter().collect();
        // Longest first; then by key, so equal waits list in a stable order.
        pods.sort_by(|a, b| a.1.bound.cmp(&b.1.bound).then_with(|| a.0.cmp(b.0)));
        pods.into_iter()
            .filter_map(|(key, pod)| {
                let selected = namespace_selected(&pod.namespace);
                let outcome = self.decide(key, selected, cluster, now)?;
                let step = listed(&self.config, &pod.step)?;
                let (owner, _) = self.owner_state(step, &pod.node, cluster);
                Some(crate::report::InitWaitStatus {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    container: step.name.clone(),
                    node: pod.node.clone(),
                    opted_in: self
                        .config
                        .is_opted_in(&pod.namespace, selected, &pod.labels),
                    explanation: super::explain(step, &pod.node, owner, &outcome),
                    outcome,
                })
            })
            .take(limit)
            .collect()
    }

    /// Counts per listed step and [`OTHER`] at `now`.
    pub fn counts(
        &self,
        namespace_selected: &dyn Fn(&str) -> bool,
        cluster: &Cluster<'_>,
        now: SystemTime,
    ) -> BTreeMap<String, StepCounts> {
        let mut counts: BTreeMap<String, StepCounts> = self
            .config
            .init_containers
            .iter()
            .map(|c| (c.name.clone(), StepCounts::default()))
            .collect();
        let mut down: HashMap<&str, HashSet<&str>> = HashMap::new();
        for pod in self.pods.values() {
            let Some(step) = listed(&self.config, &pod.step) else {
                continue;
            };
            let entry = counts.entry(step.name.clone()).or_default();
            let opted = self.config.is_opted_in(
                &pod.namespace,
                namespace_selected(&pod.namespace),
                &pod.labels,
            );
            if opted {
                entry.opted_in += 1;
            } else {
                entry.not_opted_in += 1;
            }
            let waited = now.duration_since(pod.bound).unwrap_or(Duration::ZERO);
            entry.oldest = entry.oldest.max(Some(waited));
            if matches!(
                self.owner_state(step, &pod.node, cluster).0,
                OwnerState::Down { .. }
            ) {
                down.entry(&step.name).or_default().insert(&pod.node);
            }
        }
        for (step, nodes) in down {
            if let Some(entry) = counts.get_mut(step) {
                entry.owner_down_nodes = nodes.len();
            }
        }
        counts.entry(OTHER.to_owned()).or_default().not_opted_in = self.other.len();
        counts
    }

    /// How many pods wait on an unlisted step.
    pub fn other_count(&self) -> usize {
        self.other.len()
    }

    fn ended(&self, pod: &StagePod, end: StageEnd, now: SystemTime) -> Ended {
        Ended {
            step: pod.step.clone(),
            waited: now.duration_since(pod.bound).unwrap_or(Duration::ZERO),
            end,
        }
    }

    /// When a pod was bound, on this process's clock: the `PodScheduled` transition, never
    /// before the pod's creation (a kubelet writes it on the node's clock for a pod created
    /// bound), in whole seconds, so the next second: never early; through the server's
    /// clock. Without one, `now`.
    fn bound(
        &self,
        scheduled: Option<SystemTime>,
        created: Option<SystemTime>,
        now: SystemTime,
    ) -> SystemTime {
        let Some(at) = scheduled
            .map(|t| created.map_or(t, |c| t.max(c)))
            .and_then(|t| t.checked_add(Duration::from_secs(1)))
        else {
            return now;
        };
        match &self.clock {
            None => at,
            Some(clock) => clock.to_local(at, now).unwrap_or(now),
        }
        // Never later than the first sight: it was bound by then.
        .min(now)
    }
}

/// A cluster-wide owner's state and when its up-period began, by step name.
pub type Cluster<'a> = dyn Fn(&str) -> (OwnerState, Option<SystemTime>) + 'a;

fn hash(key: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// What re-creates `pod`: its controller's kind, in Kubernetes' own API groups only (a
/// `Job` of another group, such as Volcano's, may react to an eviction otherwise).
fn recreator_of(pod: &SlimPod) -> Recreator {
    let controller = pod
        .metadata
        .owner_references
        .as_deref()
        .and_then(|refs| refs.iter().find(|o| o.controller == Some(true)));
    let Some(c) = controller else {
        return Recreator::None;
    };
    let group = c.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    match group {
        "" | "apps" | "extensions" | "batch" => Recreator::of(Some(&c.kind)),
        _ => Recreator::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_stage::agents::AgentPod;
    use crate::node_stage::{Hold, StepPlan};
    use serde_json::{Value, json};

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn rfc3339(t: SystemTime) -> String {
        jiff::Timestamp::try_from(t).expect("in range").to_string()
    }

    fn config() -> Arc<Config> {
        let mut c =
            Config::from_yaml_with("{}", "t.yaml", &crate::config::Elsewhere).expect("valid");
        // Built by hand: the parser of these keys has its own tests.
        c.init_containers = vec![InitContainerConfig {
            name: "istio-validation".into(),
            owner: Some(StepOwner::DaemonSet(istio_cni())),
            deadline: None,
            failed_exit_codes: vec![126],
            action: crate::config::StepAction::Recreate,
            repair_after: Duration::from_secs(10),
            opt_in: crate::config::OptInMode::Any,
        }];
        Arc::new(c)
    }

    /// A ReplicaSet's pod bound at `bound`, whose init containers have `statuses`.
    fn pod(name: &str, uid: &str, rs: &str, bound: SystemTime, statuses: Value) -> SlimPod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "apps", "uid": uid,
                "creationTimestamp": rfc3339(bound),
                "labels": {"initguard.io/bypass": "", "app": "web", "big": "x".repeat(1000)},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                    "uid": rs, "controller": true}]},
            "spec": {"nodeName": "n1", "initContainers": [
                {"name": "istio-validation"}, {"name": "proxy", "restartPolicy": "Always"},
                {"name": "migrate"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(bound)},
                {"type": "Initialized", "status": "False"}],
                "initContainerStatuses": statuses}
        }))
        .expect("a pod")
    }

    fn failing() -> Value {
        json!([{"name": "istio-validation", "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 126}}}])
    }

    fn agents_up(t: &mut StageTracker, since: SystemTime) {
        let ds = istio_cni();
        let a = t.agents_mut(&ds).expect("listed");
        a.daemonset_applied("ds-uid", at(0));
        a.pod_applied(
            AgentPod {
                uid: "agent".into(),
                node: "n1".into(),
                controller_uid: "ds-uid".into(),
                serving: true,
                ready_since: None,
            },
            since,
        );
    }

    /// The DaemonSet the listed step names.
    fn istio_cni() -> ObjectRef {
        ObjectRef {
            namespace: "istio-system".into(),
            name: "istio-cni-node".into(),
        }
    }

    fn never_down(_: &str) -> (OwnerState, Option<SystemTime>) {
        (OwnerState::Unknown, None)
    }

    fn agent_pod(uid: &str, node: &str, ready: bool) -> SlimPod {
        let ready = if ready { "True" } else { "False" };
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "istio-system", "uid": uid,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "name": "istio-cni-node", "uid": "ds-uid", "controller": true}]},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": rfc3339(at(0))}]}
        }))
        .expect("an agent pod")
    }

    fn sorted(mut keys: Vec<PodKey>) -> Vec<PodKey> {
        keys.sort();
        keys
    }

    #[test]
    fn what_changed_is_decided_again_and_only_that() {
        let mut t = StageTracker::new(config());
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        let mut on_n2 = pod("b", "ub", "rs", at(0), failing());
        if let Some(init) = on_n2.init.as_mut() {
            init.node = "n2".into();
        }
        t.apply(&on_n2, at(1));
        assert_eq!(sorted(t.take_dirty()), ["apps/a", "apps/b"]);
        assert!(t.take_dirty().is_empty(), "taken once");
        // An agent on n1 changes: the pods waiting on n1 only.
        t.apply(&agent_pod("agent", "n1", true), at(2));
        assert_eq!(t.take_dirty(), ["apps/a"]);
        t.delete(&agent_pod("agent", "n1", true), at(3));
        assert_eq!(t.take_dirty(), ["apps/a"]);
        // The DaemonSet itself: every pod.
        t.agents_mut(&istio_cni()).expect("listed");
        assert_eq!(sorted(t.take_dirty()), ["apps/a", "apps/b"]);
        // A pod that stops waiting is named once more (then it is gone for good).
        t.apply(&pod("c", "uc", "rs", at(0), failing()), at(4));
        t.delete(&pod("c", "uc", "rs", at(0), failing()), at(5));
        assert_eq!(t.take_dirty(), ["apps/c"]);
        assert!(t.get("apps/c").is_none());
        assert!(t.take_dirty().is_empty());
        // A relist's end: every pod.
        t.relist_started();
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(6));
        t.apply(&on_n2, at(6));
        t.take_dirty();
        t.relist_done(at(7));
        assert_eq!(sorted(t.take_dirty()), ["apps/a", "apps/b"]);
    }

    #[test]
    fn a_replacement_created_within_the_evicted_pods_grace_period_counts() {
        // The real server: a graceful eviction at 20.4 gives deletionTimestamp 21 with
        // deletionGracePeriodSeconds 1, and the ReplicaSet's replacement, created at 20.5,
        // creationTimestamp 20 (whole seconds both); a later, final delete by the kubelet
        // moves deletionTimestamp to 22 with grace 0.
        let mut t = StageTracker::new(config());
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        t.apply(&pod("b", "ub", "rs", at(0), failing()), at(1));
        agents_up(&mut t, at(2));
        t.evicting("apps/a");
        t.recreated("apps/a", at(20));
        let deleted = |deletion: u64, grace: i64| {
            let mut p = pod("a", "ua", "rs", at(0), failing());
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::try_from(at(deletion)).expect("in range"),
                ));
            p.metadata.deletion_grace_period_seconds = Some(grace);
            p
        };
        t.apply(&deleted(21, 1), at(21));
        t.apply(&deleted(22, 0), at(22));
        let mut replacement = pod("a2", "ua2", "rs", at(20), json!([]));
        replacement.initialized = true;
        replacement.init = None;
        t.apply(&replacement, at(23));
        assert_eq!(
            t.decide("apps/b", false, &never_down, at(23))
                .map(|o| o.plan),
            Some(StepPlan::Recreate),
            "the replacement created in the eviction's second, before its deletionTimestamp"
        );
        // A negative grace (a hostile object) counts as none.
        let mut odd = deleted(30, -5);
        odd.metadata.name = Some("odd".into());
        assert_eq!(odd.deletion_requested(), Some(at(30)));
    }

    #[test]
    fn an_earlier_evicted_pod_still_terminating_does_not_set_the_next_cutoff() {
        let mut t = StageTracker::new(config());
        for (name, uid) in [("a", "ua"), ("b", "ub")] {
            t.apply(&pod(name, uid, "rs", at(0), failing()), at(1));
        }
        agents_up(&mut t, at(2));
        let deleting = |name: &str, uid: &str, requested: u64| {
            let mut p = pod(name, uid, "rs", at(0), failing());
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::try_from(at(requested + 30)).expect("in range"),
                ));
            p.metadata.deletion_grace_period_seconds = Some(30);
            p
        };
        // a evicted at 20; its replacement a2 (created at 20) initializes.
        t.evicting("apps/a");
        t.recreated("apps/a", at(20));
        t.apply(&deleting("a", "ua", 20), at(20));
        let mut a2 = pod("a2", "ua2", "rs", at(20), json!([]));
        a2.initialized = true;
        a2.init = None;
        t.apply(&a2, at(21));
        assert_eq!(
            t.decide("apps/b", false, &never_down, at(22))
                .map(|o| o.plan),
            Some(StepPlan::Recreate)
        );
        // b evicted at 40; a, with its 30 s grace, is still terminating and updates again.
        t.evicting("apps/b");
        t.recreated("apps/b", at(40));
        t.apply(&deleting("b", "ub", 40), at(40));
        t.apply(&deleting("a", "ua", 20), at(41));
        t.apply(&a2, at(42));
        // a2 is a's replacement, not b's: the controller still waits for b's.
        t.apply(&pod("c", "uc", "rs", at(0), failing()), at(43));
        assert!(
            matches!(
                t.decide("apps/c", false, &never_down, at(43))
                    .map(|o| o.plan),
                Some(StepPlan::Held(Hold::OneAtATime { .. }))
            ),
            "held for b's replacement"
        );
        let mut b2 = pod("b2", "ub2", "rs", at(40), json!([]));
        b2.initialized = true;
        b2.init = None;
        t.apply(&b2, at(44));
        assert_eq!(
            t.decide("apps/c", false, &never_down, at(44))
                .map(|o| o.plan),
            Some(StepPlan::Recreate)
        );
    }

    #[test]
    fn a_deletion_seen_before_the_evictions_answer_still_counts_and_sets_the_cutoff() {
        let mut t = StageTracker::new(config());
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        t.apply(&pod("b", "ub", "rs", at(0), failing()), at(1));
        agents_up(&mut t, at(2));
        t.take_dirty();
        t.evicting("apps/a");
        // The watch is faster than the answer: marked, then gone.
        let mut marked = pod("a", "ua", "rs", at(0), failing());
        marked.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::try_from(at(20)).expect("in range"),
            ));
        t.apply(&marked, at(20));
        let ended = t.delete(&marked, at(21)).expect("was followed");
        assert_eq!(ended.end, StageEnd::Recreated);
        t.recreated("apps/a", at(22));
        // b: its controller's budget changed; a: gone, named once for the writer to forget.
        assert_eq!(
            sorted(t.take_dirty()),
            ["apps/a", "apps/b"],
            "its controller's budget changed"
        );
        let held = t
            .decide("apps/b", false, &never_down, at(23))
            .map(|o| o.plan);
        assert!(
            matches!(held, Some(StepPlan::Held(Hold::OneAtATime { .. }))),
            "{held:?}"
        );
        // A pod of rs created before the deletion is no replacement; one created after is.
        let mut before = pod("old", "uold", "rs", at(10), json!([]));
        before.initialized = true;
        before.init = None;
        t.apply(&before, at(24));
        assert!(matches!(
            t.decide("apps/b", false, &never_down, at(24))
                .map(|o| o.plan),
            Some(StepPlan::Held(Hold::OneAtATime { .. }))
        ));
        let mut replacement = pod("a2", "ua2", "rs", at(20), json!([]));
        replacement.initialized = true;
        replacement.init = None;
        t.apply(&replacement, at(25));
        assert_eq!(t.take_dirty(), ["apps/b"]);
        assert_eq!(
            t.decide("apps/b", false, &never_down, at(25))
                .map(|o| o.plan),
            Some(StepPlan::Recreate)
        );
        // Nothing is left behind for the evicted pod.
        assert!(t.recreating.is_empty(), "{:?}", t.recreating);
        // A failed eviction leaves no record and no budget.
        t.evicting("apps/b");
        t.eviction_failed("apps/b");
        assert!(t.recreating.is_empty());
    }

    #[test]
    fn the_budget_is_rebuilt_from_records_never_placed_early() {
        #[derive(Debug)]
        struct Ahead;
        // The server's clock runs 100 s ahead of this process's.
        impl LocalTime for Ahead {
            fn to_local(&self, server: SystemTime, _now: SystemTime) -> Option<SystemTime> {
                server.checked_sub(Duration::from_secs(100))
            }
        }
        let mut t = StageTracker::new(config()).with_clock(Ahead);
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        agents_up(&mut t, at(2));
        assert_eq!(
            t.decide("apps/a", false, &never_down, at(20))
                .map(|o| o.plan),
            Some(StepPlan::Recreate)
        );
        // A recreation of rs recorded at server time 115 happened at local 15: the next one
        // waits for its replacement (5 minutes without a deadline) from there.
        t.rebuild_budget([("rs".to_owned(), at(115))], at(20));
        assert_eq!(
            t.decide("apps/a", false, &never_down, at(20))
                .map(|o| o.plan),
            Some(StepPlan::Held(Hold::OneAtATime {
                until: at(15) + Duration::from_secs(300)
            }))
        );
        assert_eq!(t.take_dirty(), ["apps/a"], "decided again after a rebuild");
        // Another controller's records hold nothing here; a rebuild replaces, never adds.
        t.rebuild_budget([("other".to_owned(), at(115))], at(20));
        assert_eq!(
            t.decide("apps/a", false, &never_down, at(20))
                .map(|o| o.plan),
            Some(StepPlan::Recreate)
        );
        // Without the server's clock: placed at `now`, not earlier.
        #[derive(Debug)]
        struct Unknown;
        impl LocalTime for Unknown {
            fn to_local(&self, _: SystemTime, _: SystemTime) -> Option<SystemTime> {
                None
            }
        }
        let mut t = StageTracker::new(config()).with_clock(Unknown);
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        agents_up(&mut t, at(2));
        t.rebuild_budget([("rs".to_owned(), at(0))], at(20));
        assert_eq!(
            t.decide("apps/a", false, &never_down, at(21))
                .map(|o| o.plan),
            Some(StepPlan::Held(Hold::OneAtATime {
                until: at(20) + Duration::from_secs(300)
            }))
        );
    }

    #[test]
    fn follows_a_failed_listed_step_and_recreates_once_the_agent_is_back() {
        let mut t = StageTracker::new(config());
        let applied = t.apply(&pod("a", "ua", "rs", at(0), failing()), at(5));
        assert!(applied.waiting);
        assert_eq!(
            applied.newly_failed.map(|f| (f.code, f.for_good)),
            Some((126, false))
        );
        let p = t.get("apps/a").expect("followed");
        // Only the opt-in label is kept; the bind time is the next second (never early).
        assert_eq!(p.labels.len(), 1);
        assert_eq!(p.bound, at(1));
        // The DaemonSet not seen yet: unknown, held.
        let out = t
            .decide("apps/a", false, &never_down, at(6))
            .expect("decided");
        assert_eq!(out.plan, StepPlan::Held(Hold::OwnerUnknown));
        agents_up(&mut t, at(20));
        let out = t
            .decide("apps/a", false, &never_down, at(29))
            .expect("decided");
        assert_eq!(out.plan, StepPlan::Held(Hold::RepairAfter { at: at(30) }));
        let out = t
            .decide("apps/a", false, &never_down, at(30))
            .expect("decided");
        assert_eq!(out.plan, StepPlan::Recreate);
        // The same failure seen again is not new.
        let again = t.apply(&pod("a", "ua", "rs", at(0), failing()), at(31));
        assert_eq!(again.newly_failed, None);
        t.recreated("apps/a", at(31));
        // A sibling of the same ReplicaSet waits for the replacement.
        t.apply(&pod("b", "ub", "rs", at(0), failing()), at(31));
        let out = t
            .decide("apps/b", false, &never_down, at(32))
            .expect("decided");
        assert!(
            matches!(out.plan, StepPlan::Held(Hold::OneAtATime { .. })),
            "{out:?}"
        );
        // The evicted Pending pod turns Failed while it is deleted (kubelet, 1.27+): an
        // eviction, not a failure; when its deletion was requested is the replacement's
        // cutoff.
        let mut evicted = pod("a", "ua", "rs", at(0), failing());
        evicted.phase = Some("Failed".into());
        evicted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::try_from(at(40)).expect("in range"),
            ));
        let ended = t.apply(&evicted, at(33)).ended.expect("was followed");
        assert_eq!(ended.end, StageEnd::Recreated);
        assert_eq!(ended.waited, Duration::from_secs(32));
        assert_eq!(t.delete(&evicted, at(34)), None);
        // The replacement, bound after the agent came up, initializes: b's turn.
        let replacement = pod("a2", "ua2", "rs", at(40), json!([]));
        t.apply(&replacement, at(41));
        let out = t
            .decide("apps/b", false, &never_down, at(42))
            .expect("decided");
        assert!(matches!(out.plan, StepPlan::Held(Hold::OneAtATime { .. })));
        // Unscheduled (no node, so no steps decoded) is not initialized either.
        let mut unscheduled = replacement.clone();
        unscheduled.init = None;
        t.apply(&unscheduled, at(45));
        let out = t
            .decide("apps/b", false, &never_down, at(46))
            .expect("decided");
        assert!(matches!(out.plan, StepPlan::Held(Hold::OneAtATime { .. })));
        let mut done = unscheduled;
        done.initialized = true;
        t.apply(&done, at(50));
        let out = t
            .decide("apps/b", false, &never_down, at(51))
            .expect("decided");
        assert_eq!(out.plan, StepPlan::Recreate);
    }

    #[test]
    fn unlisted_steps_are_only_counted_and_moving_on_ends_the_wait() {
        let mut t = StageTracker::new(config());
        // The listed step done, the sidecar waiting: an unlisted step.
        let sidecar = json!([
            {"name": "istio-validation", "state": {"terminated": {"exitCode": 0}}},
            {"name": "proxy", "started": false, "state": {"running": {}}}]);
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        let applied = t.apply(&pod("a", "ua", "rs", at(0), sidecar.clone()), at(9));
        let ended = applied.ended.expect("moved on");
        assert_eq!(
            (ended.end, &*ended.step),
            (StageEnd::Initialized, "istio-validation")
        );
        assert!(!applied.waiting && t.get("apps/a").is_none());
        assert_eq!(t.other_count(), 1);
        let counts = t.counts(&|_| false, &never_down, at(10));
        assert_eq!(counts[OTHER].not_opted_in, 1);
        assert_eq!(counts["istio-validation"], StepCounts::default());
        // Deleted: no longer counted.
        assert_eq!(
            t.delete(&pod("a", "ua", "rs", at(0), sidecar), at(11)),
            None
        );
        assert_eq!(t.other_count(), 0);
    }

    #[test]
    fn a_failed_pod_and_a_deleted_pod_end_their_waits() {
        let mut t = StageTracker::new(config());
        let mut p = pod(
            "a",
            "ua",
            "rs",
            at(0),
            json!([{"name": "istio-validation",
            "state": {"running": {}}}]),
        );
        t.apply(&p, at(1));
        // restartPolicy: Never: the kubelet marks the pod Failed with the exit code.
        p = pod(
            "a",
            "ua",
            "rs",
            at(0),
            json!([{"name": "istio-validation",
            "state": {"terminated": {"exitCode": 126}}}]),
        );
        p.phase = Some("Failed".into());
        let applied = t.apply(&p, at(4));
        assert_eq!(applied.ended.map(|e| e.end), Some(StageEnd::Failed));
        assert_eq!(
            applied
                .newly_failed
                .map(|f| (f.code, f.for_good, f.step.to_string())),
            Some((126, true, "istio-validation".to_owned()))
        );
        assert!(t.get("apps/a").is_none());
        // Reported once, whatever updates and relists follow.
        assert_eq!(t.apply(&p, at(5)), Applied::default());
        t.relist_started();
        assert_eq!(t.apply(&p, at(6)), Applied::default());
        assert!(t.relist_done(at(6)).is_empty());
        let b = pod("b", "ub", "rs", at(0), failing());
        t.apply(&b, at(1));
        assert_eq!(t.delete(&b, at(2)).map(|e| e.end), Some(StageEnd::Deleted));
    }

    #[test]
    fn a_relist_ends_the_waits_of_pods_gone_meanwhile_and_recounts_other() {
        let mut t = StageTracker::new(config());
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        t.apply(&pod("b", "ub", "rs", at(0), failing()), at(1));
        let unlisted = json!([
            {"name": "istio-validation", "state": {"terminated": {"exitCode": 0}}},
            {"name": "proxy", "started": false, "state": {"running": {}}}]);
        t.apply(&pod("c", "uc", "rs", at(0), unlisted), at(1));
        assert_eq!(t.other_count(), 1);
        t.relist_started();
        t.apply(&pod("b", "ub", "rs", at(0), failing()), at(9));
        let gone = t.relist_done(at(9));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].end, StageEnd::Deleted);
        assert!(t.get("apps/a").is_none() && t.get("apps/b").is_some());
        assert_eq!(t.other_count(), 0);
    }

    #[test]
    fn a_new_pod_under_the_same_name_ends_the_old_wait_and_starts_its_own() {
        let mut t = StageTracker::new(config());
        t.apply(&pod("web-0", "u1", "sts", at(0), failing()), at(1));
        t.recreated("apps/web-0", at(2));
        let applied = t.apply(&pod("web-0", "u2", "sts", at(10), failing()), at(12));
        assert_eq!(applied.ended.map(|e| e.end), Some(StageEnd::Recreated));
        assert!(applied.waiting);
        let p = t.get("apps/web-0").expect("the new pod");
        assert_eq!((p.uid.as_str(), p.bound), ("u2", at(11)));
        // The old pod's late delete leaves the new one alone.
        assert_eq!(
            t.delete(&pod("web-0", "u1", "sts", at(0), failing()), at(13)),
            None
        );
        assert!(t.get("apps/web-0").is_some());
    }

    fn agent(uid: &str, node: &str, ready_at: Option<SystemTime>) -> SlimPod {
        let conditions = match ready_at {
            Some(t) => {
                json!([{"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(t)}])
            }
            None => json!([{"type": "Ready", "status": "False"}]),
        };
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "istio-system", "uid": uid,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "name": "istio-cni-node", "uid": "ds-uid", "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "cni"}]},
            "status": {"phase": "Running", "conditions": conditions}
        }))
        .expect("a pod")
    }

    #[test]
    fn the_pod_watch_feeds_the_agents_with_their_ready_times() {
        let mut t = StageTracker::new(config());
        let ds = istio_cni();
        t.agents_mut(&ds)
            .expect("listed")
            .daemonset_applied("ds-uid", at(0));
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        t.apply(&agent("cni-1", "n1", None), at(2));
        assert!(matches!(
            t.owner_state(&t.config.init_containers[0].clone(), "n1", &never_down)
                .0,
            OwnerState::Down { .. }
        ));
        t.apply(&agent("cni-1", "n1", Some(at(20))), at(22));
        let (state, began) = t.owner_state(&t.config.init_containers[0].clone(), "n1", &never_down);
        assert_eq!(state, OwnerState::Up { since: at(22) });
        // The Ready time less the clock's second, never after the sight.
        assert_eq!(began, Some(at(19)));
        let out = t
            .decide("apps/a", false, &never_down, at(32))
            .expect("decided");
        assert_eq!(out.plan, StepPlan::Recreate);
        // Deleted: down again.
        t.delete(&agent("cni-1", "n1", Some(at(20))), at(40));
        assert_eq!(
            t.owner_state(&t.config.init_containers[0].clone(), "n1", &never_down)
                .0,
            OwnerState::Down { since: at(40) }
        );
        // A relist finds it up again with no known start of the up-period.
        t.relist_started();
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(50));
        t.apply(&agent("cni-2", "n1", None), at(50));
        t.relist_done(at(50));
        let (state, _) = t.owner_state(&t.config.init_containers[0].clone(), "n1", &never_down);
        assert!(
            matches!(state, OwnerState::Down { .. }),
            "not Ready: {state:?}"
        );
    }

    #[test]
    fn counts_tell_opted_in_from_not_and_count_every_unlisted_pod() {
        let mut t = StageTracker::new(config());
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        let mut plain = pod("b", "ub", "rs", at(0), failing());
        plain.metadata.labels = None;
        t.apply(&plain, at(1));
        let unlisted = json!([
            {"name": "istio-validation", "state": {"terminated": {"exitCode": 0}}},
            {"name": "proxy", "started": false, "state": {"running": {}}}]);
        t.apply(&pod("c", "uc", "rs", at(0), unlisted.clone()), at(1));
        t.apply(&pod("d", "ud", "rs", at(0), unlisted), at(1));
        let counts = t.counts(&|_| false, &never_down, at(2));
        let c = &counts["istio-validation"];
        assert_eq!((c.opted_in, c.not_opted_in), (1, 1));
        assert_eq!(counts[OTHER].not_opted_in, 2);
    }

    #[test]
    fn wait_ends_are_named_as_the_metric_labels() {
        let words: Vec<&str> = [
            StageEnd::Initialized,
            StageEnd::Recreated,
            StageEnd::Deleted,
            StageEnd::Failed,
        ]
        .iter()
        .map(|e| e.as_str())
        .collect();
        assert_eq!(words, ["initialized", "recreated", "deleted", "failed"]);
    }

    #[test]
    fn only_kubernetes_own_controllers_recreate() {
        let mut t = StageTracker::new(config());
        let mut volcano = pod("v", "uv", "vj", at(0), failing());
        if let Some(refs) = volcano.metadata.owner_references.as_mut() {
            refs[0].api_version = "batch.volcano.sh/v1alpha1".into();
            refs[0].kind = "Job".into();
        }
        t.apply(&volcano, at(1));
        assert_eq!(t.get("apps/v").map(|p| p.recreator), Some(Recreator::None));
        t.apply(&pod("r", "ur", "rs", at(0), failing()), at(1));
        assert_eq!(
            t.get("apps/r").map(|p| p.recreator),
            Some(Recreator::Workload)
        );
    }

    #[test]
    fn a_binding_time_before_the_creation_counts_from_the_creation() {
        let mut t = StageTracker::new(config());
        let mut p = pod("a", "ua", "rs", at(100), failing());
        // A node clock behind the server's wrote PodScheduled before the pod existed.
        if let Some(init) = p.init.as_mut() {
            init.scheduled_at = Some(at(40));
        }
        t.apply(&p, at(200));
        assert_eq!(t.get("apps/a").map(|p| p.bound), Some(at(101)));
    }

    #[test]
    fn counts_name_nodes_where_the_agent_is_down() {
        let mut t = StageTracker::new(config());
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        let ds = istio_cni();
        t.agents_mut(&ds)
            .expect("listed")
            .daemonset_applied("ds-uid", at(0));
        let counts = t.counts(&|_| false, &never_down, at(100));
        let c = &counts["istio-validation"];
        assert_eq!((c.opted_in, c.owner_down_nodes), (1, 1));
        assert_eq!(c.oldest, Some(Duration::from_secs(99)));
        agents_up(&mut t, at(101));
        assert_eq!(
            t.counts(&|_| false, &never_down, at(102))["istio-validation"].owner_down_nodes,
            0
        );
    }

    #[test]
    fn a_pod_without_a_binding_time_counts_from_first_sight_kept_across_updates() {
        let mut t = StageTracker::new(config());
        let mut p = pod("a", "ua", "rs", at(0), failing());
        if let Some(init) = p.init.as_mut() {
            init.scheduled_at = None;
        }
        t.apply(&p, at(7));
        t.apply(&p, at(50));
        assert_eq!(t.get("apps/a").map(|p| p.bound), Some(at(7)));
    }
}
