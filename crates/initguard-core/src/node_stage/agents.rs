//! A `daemonset` owner, per node: up on node N while a pod controlled by that DaemonSet runs
//! there, is Ready and is not being deleted (a rollout with `maxUnavailable: 1` really
//! removes the agent). Each node has its own state and `since`, the first sight of the
//! change; a DaemonSet never seen is unknown on every node.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::policy::OwnerState;

/// One pod that may be an agent: a pod in the DaemonSet's namespace with a DaemonSet as its
/// controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPod {
    /// The pod's `metadata.uid`.
    pub uid: String,
    /// `spec.nodeName` (empty while unscheduled).
    pub node: String,
    /// The controller reference's uid (not its apiVersion, which differs on old servers).
    pub controller_uid: String,
    /// Ready, running and not being deleted.
    pub serving: bool,
    /// Its `Ready` condition's True transition, on this process's clock and never later
    /// than the truth: when its up-period began, for "bound before the agent came back".
    pub ready_since: Option<SystemTime>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeState {
    up: bool,
    /// First sight of the change (what `repairAfter` counts from: never early).
    since: SystemTime,
    /// While up: when the up-period began, a lower bound; None when not known.
    began: Option<SystemTime>,
}

/// What the guard knows about one DaemonSet's agents.
#[derive(Debug, Default)]
pub struct DaemonSetAgents {
    /// The DaemonSet's uid while it exists.
    daemonset: Option<String>,
    /// When the DaemonSet's current existence (or absence, once seen) began: a node with no
    /// state of its own is down since then.
    baseline: Option<SystemTime>,
    /// Candidate agent pods by uid (pods may arrive before their DaemonSet).
    pods: HashMap<String, AgentPod>,
    /// Nodes whose state changed at least once since the baseline.
    nodes: HashMap<String, NodeState>,
}

impl DaemonSetAgents {
    /// The DaemonSet was read (listed or watched) with `uid`.
    pub fn daemonset_applied(&mut self, uid: &str, now: SystemTime) {
        if self.daemonset.as_deref() == Some(uid) {
            return;
        }
        self.daemonset = Some(uid.to_owned());
        self.rebase(now);
    }

    /// The DaemonSet was deleted, or a read did not find it: down on every node from `now`
    /// once it was seen; never seen, it stays unknown (a typo must not recreate anything).
    pub fn daemonset_gone(&mut self, now: SystemTime) {
        if self.daemonset.take().is_some() {
            self.rebase(now);
        }
    }

    /// A candidate pod was added or changed.
    pub fn pod_applied(&mut self, pod: AgentPod, now: SystemTime) {
        let old_node = self
            .pods
            .insert(pod.uid.clone(), pod.clone())
            .map(|p| p.node);
        if let Some(old) = old_node.filter(|old| *old != pod.node) {
            self.refresh(&old, now, true);
        }
        self.refresh(&pod.node, now, true);
    }

    /// A candidate pod was deleted.
    pub fn pod_deleted(&mut self, uid: &str, now: SystemTime) {
        if let Some(pod) = self.pods.remove(uid) {
            self.refresh(&pod.node, now, true);
        }
    }

    /// A relist of the candidate pods replaces what was held: nodes whose answer did not
    /// change keep their `since`.
    pub fn pods_relisted(&mut self, pods: impl IntoIterator<Item = AgentPod>, now: SystemTime) {
        let old: Vec<String> = self.pods.values().map(|p| p.node.clone()).collect();
        self.pods = pods.into_iter().map(|p| (p.uid.clone(), p)).collect();
        let fresh: Vec<String> = self.pods.values().map(|p| p.node.clone()).collect();
        // A relist follows a watch gap: an up-period that began in it has no known start.
        for node in old.iter().chain(&fresh) {
            self.refresh(node, now, false);
        }
    }

    /// The agent's state on `node`.
    pub fn state(&self, node: &str) -> OwnerState {
        let Some(baseline) = self.baseline else {
            return OwnerState::Unknown;
        };
        match self.nodes.get(node) {
            Some(NodeState {
                up: true, since, ..
            }) => OwnerState::Up { since: *since },
            Some(NodeState {
                up: false, since, ..
            }) => OwnerState::Down { since: *since },
            None => OwnerState::Down { since: baseline },
        }
    }

    /// While the agent is up on `node`: when its up-period began, a lower bound (the earliest
    /// Ready transition of the pods that brought it up, or the first sight of a change the
    /// guard watched happen); None when not known (it was up when the guard first looked
    /// and no Ready time says since when).
    pub fn began(&self, node: &str) -> Option<SystemTime> {
        self.nodes.get(node).filter(|n| n.up).and_then(|n| n.began)
    }

    fn serving_on(&self, node: &str) -> bool {
        let Some(ds) = self.daemonset.as_deref() else {
            return false;
        };
        !node.is_empty()
            && self
                .pods
                .values()
                .any(|p| p.serving && p.node == node && p.controller_uid == ds)
    }

    /// The DaemonSet changed identity: every node's state starts again from `now`.
    fn rebase(&mut self, now: SystemTime) {
        self.baseline = Some(now);
        self.nodes.clear();
        let nodes: Vec<String> = self.pods.values().map(|p| p.node.clone()).collect();
        for node in nodes {
            self.refresh(&node, now, false);
        }
    }

    /// Recompute `node`; `watched`: the change was seen as it happened (not found by a first
    /// look or a relist), so its first sight bounds when an up-period began.
    fn refresh(&mut self, node: &str, now: SystemTime, watched: bool) {
        if self.baseline.is_none() {
            return;
        }
        let up = self.serving_on(node);
        let was_up = self.nodes.get(node).is_some_and(|n| n.up);
        if up != was_up {
            let began = up
                .then(|| {
                    let ready = self.ready_since_on(node);
                    if watched {
                        Some(ready.map_or(now, |r| r.min(now)))
                    } else {
                        ready
                    }
                })
                .flatten();
            self.nodes.insert(
                node.to_owned(),
                NodeState {
                    up,
                    since: now,
                    began,
                },
            );
        }
    }

    /// The earliest Ready transition among the serving agents on `node`, when every one has
    /// one (a pod without could have turned Ready at any time).
    fn ready_since_on(&self, node: &str) -> Option<SystemTime> {
        let ds = self.daemonset.as_deref()?;
        self.pods
            .values()
            .filter(|p| p.serving && p.node == node && p.controller_uid == ds)
            .map(|p| p.ready_since)
            .try_fold(None::<SystemTime>, |min, t| {
                t.map(|t| Some(min.map_or(t, |m| m.min(t))))
            })
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    fn pod(uid: &str, node: &str, ds: &str, serving: bool) -> AgentPod {
        AgentPod {
            uid: uid.into(),
            node: node.into(),
            controller_uid: ds.into(),
            serving,
            ready_since: None,
        }
    }

    #[test]
    fn a_daemonset_never_seen_is_unknown_on_every_node_even_with_pods() {
        let mut a = DaemonSetAgents::default();
        a.pod_applied(pod("p1", "n1", "ds", true), at(0));
        assert_eq!(a.state("n1"), OwnerState::Unknown);
        assert_eq!(a.state("n2"), OwnerState::Unknown);
        // Seen later: the pod that was already there counts from then, and since when it
        // has been up is not known.
        a.daemonset_applied("ds", at(5));
        assert_eq!(a.state("n1"), OwnerState::Up { since: at(5) });
        assert_eq!(a.began("n1"), None);
        assert_eq!(a.state("n2"), OwnerState::Down { since: at(5) });
    }

    #[test]
    fn an_up_period_began_at_the_ready_transition_or_the_watched_change() {
        let mut a = DaemonSetAgents::default();
        let ready = |uid: &str, node: &str, t: u64| AgentPod {
            ready_since: Some(at(t)),
            ..pod(uid, node, "ds", true)
        };
        // Up at the guard's first look: the Ready time says since when.
        a.pod_applied(ready("p1", "n1", 2), at(3));
        a.daemonset_applied("ds", at(10));
        assert_eq!(a.state("n1"), OwnerState::Up { since: at(10) });
        assert_eq!(a.began("n1"), Some(at(2)));
        // Watched coming up without a Ready time: its first sight.
        a.pod_applied(pod("p2", "n2", "ds", true), at(20));
        assert_eq!(a.began("n2"), Some(at(20)));
        // A Ready time later than the sight (a skewed clock) is not trusted beyond the sight.
        a.pod_applied(ready("p3", "n3", 40), at(30));
        assert_eq!(a.began("n3"), Some(at(30)));
        // A relist finds a node up that was down: since when is not known.
        a.pod_deleted("p2", at(50));
        a.pods_relisted(
            [
                ready("p1", "n1", 2),
                ready("p3", "n3", 40),
                pod("p4", "n2", "ds", true),
            ],
            at(60),
        );
        assert_eq!(a.state("n2"), OwnerState::Up { since: at(60) });
        assert_eq!(a.began("n2"), None);
        assert_eq!(a.began("n1"), Some(at(2)));
        // Down: no up-period.
        a.pod_deleted("p1", at(70));
        assert_eq!(a.began("n1"), None);
    }

    #[test]
    fn each_node_has_its_own_state_and_since() {
        let mut a = DaemonSetAgents::default();
        a.daemonset_applied("ds", at(0));
        a.pod_applied(pod("p1", "n1", "ds", true), at(1));
        a.pod_applied(pod("p2", "n2", "ds", false), at(2));
        assert_eq!(a.state("n1"), OwnerState::Up { since: at(1) });
        assert_eq!(a.state("n2"), OwnerState::Down { since: at(0) });
        a.pod_applied(pod("p2", "n2", "ds", true), at(7));
        assert_eq!(a.state("n2"), OwnerState::Up { since: at(7) });
        // A change that keeps the answer keeps the since.
        a.pod_applied(pod("p3", "n1", "ds", true), at(8));
        a.pod_deleted("p1", at(9));
        assert_eq!(a.state("n1"), OwnerState::Up { since: at(1) });
        a.pod_applied(pod("p3", "n1", "ds", false), at(10));
        assert_eq!(a.state("n1"), OwnerState::Down { since: at(10) });
        assert_eq!(a.state("n2"), OwnerState::Up { since: at(7) });
    }

    #[test]
    fn only_pods_of_the_current_daemonset_uid_count() {
        let mut a = DaemonSetAgents::default();
        a.daemonset_applied("old", at(0));
        a.pod_applied(pod("p1", "n1", "old", true), at(1));
        a.pod_applied(pod("x", "n2", "other", true), at(1));
        assert!(matches!(a.state("n2"), OwnerState::Down { .. }));
        // Deleted and recreated under the same name: the old pods are not its agents.
        a.daemonset_gone(at(3));
        assert_eq!(a.state("n1"), OwnerState::Down { since: at(3) });
        a.daemonset_applied("new", at(4));
        assert_eq!(a.state("n1"), OwnerState::Down { since: at(4) });
        a.pod_applied(pod("p2", "n1", "new", true), at(6));
        assert_eq!(a.state("n1"), OwnerState::Up { since: at(6) });
    }

    #[test]
    fn an_unscheduled_agent_pod_is_on_no_node() {
        let mut a = DaemonSetAgents::default();
        a.daemonset_applied("ds", at(0));
        a.pod_applied(pod("p1", "", "ds", true), at(4));
        assert_eq!(a.state(""), OwnerState::Down { since: at(0) });
    }

    #[test]
    fn a_pod_moving_nodes_leaves_the_old_node_down() {
        let mut a = DaemonSetAgents::default();
        a.daemonset_applied("ds", at(0));
        a.pod_applied(pod("p1", "n1", "ds", true), at(1));
        a.pod_applied(pod("p1", "n2", "ds", true), at(2));
        assert_eq!(a.state("n1"), OwnerState::Down { since: at(2) });
        assert_eq!(a.state("n2"), OwnerState::Up { since: at(2) });
    }

    #[test]
    fn a_relist_keeps_unchanged_nodes_and_drops_vanished_pods() {
        let mut a = DaemonSetAgents::default();
        a.daemonset_applied("ds", at(0));
        a.pod_applied(pod("p1", "n1", "ds", true), at(1));
        a.pod_applied(pod("p2", "n2", "ds", true), at(1));
        a.pods_relisted([pod("p1", "n1", "ds", true)], at(5));
        assert_eq!(a.state("n1"), OwnerState::Up { since: at(1) });
        assert_eq!(a.state("n2"), OwnerState::Down { since: at(5) });
        // A second sight of the same DaemonSet changes nothing.
        a.daemonset_applied("ds", at(6));
        assert_eq!(a.state("n1"), OwnerState::Up { since: at(1) });
    }

    #[test]
    fn a_daemonset_never_found_is_unknown_and_one_deleted_is_down() {
        let mut a = DaemonSetAgents::default();
        a.daemonset_gone(at(2));
        assert_eq!(a.state("n1"), OwnerState::Unknown);
        a.daemonset_applied("ds", at(3));
        a.daemonset_gone(at(4));
        assert_eq!(a.state("n1"), OwnerState::Down { since: at(4) });
        // A second absence does not move the since.
        a.daemonset_gone(at(9));
        assert_eq!(a.state("n1"), OwnerState::Down { since: at(4) });
    }
}
