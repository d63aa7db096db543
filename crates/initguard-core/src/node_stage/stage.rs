//! The pods the node stage follows: bound, not yet initialized, waiting on a listed step.
//! Pure bookkeeping fed by the pod watch, like [`crate::tracker`]: only what decisions need
//! is kept per pod, and pods waiting on an unlisted step are only counted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::agents::DaemonSetAgents;
use super::budget::{Budget, DEFAULT_PATIENCE};
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

/// What changed for one pod in [`StageTracker::apply`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Its wait on a step ended.
    pub ended: Option<Ended>,
    /// It now waits on a listed step (to be decided).
    pub waiting: bool,
    /// A listed exit code was seen for the first time on its step.
    pub newly_failed: Option<i32>,
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
    /// Hashes of the uids of pods waiting on an unlisted step: a count, not state.
    other: HashSet<u64>,
    /// Recreated pods whose deletion the watch has not reported yet.
    recreated: HashSet<PodKey>,
    agents: HashMap<ObjectRef, DaemonSetAgents>,
    budget: Budget,
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
            recreated: HashSet::new(),
            agents,
            budget: Budget::default(),
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

    /// Every followed pod.
    pub fn pods(&self) -> impl Iterator<Item = (&PodKey, &StagePod)> {
        self.pods.iter()
    }

    /// The agent model of DaemonSet `ds`, when a listed step names it.
    pub fn agents_mut(&mut self, ds: &ObjectRef) -> Option<&mut DaemonSetAgents> {
        self.agents.get_mut(ds)
    }

    /// The DaemonSets listed steps name.
    pub fn daemonsets(&self) -> impl Iterator<Item = &ObjectRef> {
        self.agents.keys()
    }

    /// The budget, to rebuild it from the guard's Events or record a recreation.
    pub fn budget_mut(&mut self) -> &mut Budget {
        &mut self.budget
    }

    /// Fold in a pod as listed or watched at `now`.
    pub fn apply(&mut self, pod: &SlimPod, now: SystemTime) -> Applied {
        let key = pod.key();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let created = pod.created().unwrap_or(now);
        let controller = pod.controller();
        if let Some(c) = &controller {
            // Only Initialized counts: an unscheduled or gated replacement is not there yet.
            self.budget.pod_seen(&c.uid, uid, created, pod.initialized);
        }
        let previous = self.pods.remove(&key).filter(|p| p.uid == uid);
        let other_hash = hash(uid);
        self.other.remove(&other_hash);
        let mut applied = Applied::default();
        let failed_phase = pod.phase.as_deref() == Some("Failed");
        let Some(progress) = pod.init.as_deref().filter(|_| !failed_phase) else {
            applied.ended = previous.map(|p| {
                self.ended(
                    &p,
                    if failed_phase {
                        StageEnd::Failed
                    } else {
                        StageEnd::Initialized
                    },
                    now,
                )
            });
            return applied;
        };
        let done_before = previous.as_ref().map_or(0, |p| p.done_before);
        let Some(current) = current_step(progress, done_before) else {
            applied.ended = previous.map(|p| self.ended(&p, StageEnd::Initialized, now));
            return applied;
        };
        let Some(config) = listed(&self.config, &current.step.name) else {
            applied.ended = previous.map(|p| self.ended(&p, StageEnd::Initialized, now));
            self.other.insert(other_hash);
            return applied;
        };
        let same_step = previous
            .as_ref()
            .filter(|p| *p.step == *config.name && p.done_before == current.index);
        if let Some(p) = previous.as_ref().filter(|_| same_step.is_none()) {
            applied.ended = Some(self.ended(p, StageEnd::Initialized, now));
        }
        let seen = failed_code(current.step, &config.failed_exit_codes);
        let failed = same_step.and_then(|p| p.failed).or(seen);
        if same_step.and_then(|p| p.failed).is_none() {
            applied.newly_failed = seen;
        }
        // One clock for every step of the pod.
        let bound = previous
            .as_ref()
            .map_or_else(|| self.bound(progress.scheduled_at, now), |p| p.bound);
        let label = &self.config.opt_in.label;
        let labels = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get_key_value(label))
            .map(|(k, v)| (k.clone(), v.clone()))
            .into_iter()
            .collect();
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
                restart_policy: progress.restart_policy,
                deleting: pod.metadata.deletion_timestamp.is_some(),
                done_before: current.index,
                step: Arc::from(config.name.as_str()),
                failed,
                restarts: restarts(progress, current.step),
                step_restarts: current.step.status.map_or(0, |s| s.restarts),
            },
        );
        applied.waiting = true;
        applied
    }

    /// The pod was deleted.
    pub fn delete(&mut self, key: &str, uid: &str, now: SystemTime) -> Option<Ended> {
        self.other.remove(&hash(uid));
        let end = if self.recreated.remove(key) {
            StageEnd::Recreated
        } else {
            StageEnd::Deleted
        };
        let pod = self.pods.remove(key)?;
        if let Some(c) = &pod.controller {
            self.budget.pod_gone(&c.uid, &pod.uid);
        }
        Some(self.ended(&pod, end, now))
    }

    /// The guard evicted the pod at `now`: counted against its controller's budget, and its
    /// wait ends as recreated once the watch reports it gone.
    pub fn recreated(&mut self, key: &str, now: SystemTime) {
        if let Some(pod) = self.pods.get(key) {
            if let Some(c) = &pod.controller {
                self.budget.recreated(&c.uid, now);
            }
            self.recreated.insert(key.to_owned());
        }
    }

    /// The state of `step`'s owner for a pod on `node`: a DaemonSet's on that node; a
    /// cluster-wide owner's from `cluster`; Unknown without an owner.
    pub fn owner_state(
        &self,
        step: &InitContainerConfig,
        node: &str,
        cluster: &dyn Fn(&str) -> OwnerState,
    ) -> OwnerState {
        match &step.owner {
            Some(StepOwner::DaemonSet(ds)) => self
                .agents
                .get(ds)
                .map_or(OwnerState::Unknown, |a| a.state(node)),
            Some(StepOwner::Cluster(_)) => cluster(&step.name),
            None => OwnerState::Unknown,
        }
    }

    /// Decide about the pod `key` at `now` (None when it does not wait on a listed step).
    /// `namespace_selected`: whether its namespace matches `optIn.namespaceSelector`.
    pub fn decide(
        &self,
        key: &str,
        namespace_selected: bool,
        cluster: &dyn Fn(&str) -> OwnerState,
        now: SystemTime,
    ) -> Option<StepOutcome> {
        let pod = self.pods.get(key)?;
        let step = listed(&self.config, &pod.step)?;
        let owner = self.owner_state(step, &pod.node, cluster);
        let budget = pod.controller.as_ref().and_then(|c| {
            self.budget.hold(
                &c.uid,
                now,
                step.deadline.unwrap_or(DEFAULT_PATIENCE),
                self.config.recreate.max_per_hour,
            )
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
            recreator: Recreator::of(pod.controller.as_ref().map(|c| c.kind.as_str())),
        };
        Some(decide(&view, step, owner, budget, &self.config, now))
    }

    /// Pods waiting on `step` on `node`.
    pub fn waiting_on(&self, step: &str, node: &str) -> Vec<PodKey> {
        self.pods
            .iter()
            .filter(|(_, p)| *p.step == *step && p.node == node)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Counts per listed step and [`OTHER`] at `now`.
    pub fn counts(
        &self,
        namespace_selected: &dyn Fn(&str) -> bool,
        cluster: &dyn Fn(&str) -> OwnerState,
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
                self.owner_state(step, &pod.node, cluster),
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

    /// When a pod was bound, on this process's clock: the `PodScheduled` transition (whole
    /// seconds, so the next second: never early) through the server's clock, else `now`.
    fn bound(&self, scheduled: Option<SystemTime>, now: SystemTime) -> SystemTime {
        let Some(at) = scheduled.and_then(|t| t.checked_add(Duration::from_secs(1))) else {
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

fn hash(uid: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    uid.hash(&mut h);
    h.finish()
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
            owner: Some(StepOwner::DaemonSet(ObjectRef {
                namespace: "istio-system".into(),
                name: "istio-cni-node".into(),
            })),
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
        let ds = ObjectRef {
            namespace: "istio-system".into(),
            name: "istio-cni-node".into(),
        };
        let a = t.agents_mut(&ds).expect("listed");
        a.daemonset_applied("ds-uid", at(0));
        a.pod_applied(
            AgentPod {
                uid: "agent".into(),
                node: "n1".into(),
                controller_uid: "ds-uid".into(),
                serving: true,
            },
            since,
        );
    }

    fn never_down(_: &str) -> OwnerState {
        OwnerState::Unknown
    }

    #[test]
    fn follows_a_failed_listed_step_and_recreates_once_the_agent_is_back() {
        let mut t = StageTracker::new(config());
        let applied = t.apply(&pod("a", "ua", "rs", at(0), failing()), at(5));
        assert!(applied.waiting);
        assert_eq!(applied.newly_failed, Some(126));
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
        let ended = t.delete("apps/a", "ua", at(33)).expect("was followed");
        assert_eq!(ended.end, StageEnd::Recreated);
        assert_eq!(ended.waited, Duration::from_secs(32));
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
        assert_eq!(t.delete("apps/a", "ua", at(11)), None);
        assert_eq!(t.other_count(), 0);
    }

    #[test]
    fn a_failed_pod_and_a_deleted_pod_end_their_waits() {
        let mut t = StageTracker::new(config());
        let mut p = pod("a", "ua", "rs", at(0), failing());
        t.apply(&p, at(1));
        p.phase = Some("Failed".into());
        let ended = t.apply(&p, at(4)).ended.expect("ended");
        assert_eq!(ended.end, StageEnd::Failed);
        t.apply(&pod("b", "ub", "rs", at(0), failing()), at(1));
        assert_eq!(
            t.delete("apps/b", "ub", at(2)).map(|e| e.end),
            Some(StageEnd::Deleted)
        );
    }

    #[test]
    fn counts_name_nodes_where_the_agent_is_down() {
        let mut t = StageTracker::new(config());
        t.apply(&pod("a", "ua", "rs", at(0), failing()), at(1));
        let ds = ObjectRef {
            namespace: "istio-system".into(),
            name: "istio-cni-node".into(),
        };
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
