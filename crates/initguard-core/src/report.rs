//! The status report: every waiting pod with what the guard plans for each initializer. One
//! shape for `/status` (served by a running guard) and `initguard status` (a one-shot read), so
//! neither depends on the other. Pure: the caller passes the owners' states as an
//! [`Environment`] and the instant being decided.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::Config;
use crate::owners::OwnerReport;
use crate::policy::{self, ControllerRef, Environment, InitializerPlan};
use crate::tracker::Tracker;

/// Owners and waiting pods with the plan for each: what `initguard status` prints, and what
/// `/status` serves inside a [`StatusReport`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `initializers` or `schedulingGates`.
    pub mechanism: &'static str,
    /// Each initializer's owner and its state, in config order.
    pub owners: Vec<OwnerReport>,
    /// The longest-waiting pods, oldest first.
    pub waiting_pods: Vec<PodStatus>,
    /// Listed admission webhooks, in config order.
    pub webhooks: Vec<crate::webhook::WebhookStatus>,
    /// Bound pods waiting on a listed init container (the node stage), longest first.
    pub init_containers: Vec<InitWaitStatus>,
}

/// One pod waiting on a listed init container, with what the guard decides about it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitWaitStatus {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The init container it waits on.
    pub container: String,
    /// The node it is bound to.
    pub node: String,
    /// Whether it opted in for that step.
    pub opted_in: bool,
    /// The decision: how long it waited, the trigger, the plan, the next wake.
    #[serde(flatten)]
    pub outcome: crate::node_stage::StepOutcome,
    /// The decision in words (`why`'s and the Events' sentence).
    pub explanation: String,
}

/// `/status` body: the [`Report`] (its keys inline) and this replica's state.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// This replica's leader-election identity.
    pub identity: String,
    /// Whether this replica holds the Lease.
    pub leader: bool,
    /// `--dry-run`: decisions are logged, never written.
    pub dry_run: bool,
    /// What `/readyz` answers.
    pub ready: bool,
    /// Why not ready, one reason per dependency still initializing.
    pub not_ready: Vec<String>,
    /// Every waiting pod, however many `waitingPods` lists.
    pub waiting_pods_total: usize,
    /// The report, its keys inline.
    #[serde(flatten)]
    pub report: Report,
}

/// One waiting pod in `/status` and `initguard status`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Whether the opt-in rule selects it.
    pub opted_in: bool,
    /// The pile's controller: the controlling owner, or the CronJob of the controlling Job.
    pub controller: Option<ControllerRef>,
    /// The Job between the pod and `controller` when `controller` is its CronJob.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<ControllerRef>,
    /// `creationTimestamp`.
    #[serde(with = "humantime_serde")]
    pub created: SystemTime,
    /// Each pending initializer's wait and planned action.
    pub initializers: Vec<InitializerPlan>,
}

/// The `limit` longest-waiting pods (oldest first) with what the guard plans for each.
pub fn pod_statuses(
    tracker: &Tracker,
    env: &impl Environment,
    config: &Config,
    now: SystemTime,
    limit: usize,
) -> Vec<PodStatus> {
    let mut pods: Vec<_> = tracker.pods().map(|(_, p)| p).collect();
    pods.sort_by(|a, b| {
        (a.created, &a.namespace, &a.name).cmp(&(b.created, &b.namespace, &b.name))
    });
    pods.iter()
        .take(limit)
        .map(|p| PodStatus {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            opted_in: p.opted_in,
            controller: p.controller.clone(),
            via: p.via.clone(),
            created: p.created,
            initializers: rounded(policy::decide(&tracker.view(p, now), env, config, now).plans),
        })
        .collect()
}

/// Waits to the millisecond: nanoseconds are noise to a reader.
pub fn rounded(mut plans: Vec<InitializerPlan>) -> Vec<InitializerPlan> {
    for plan in &mut plans {
        plan.waited = plan
            .waited
            .map(|w| Duration::from_millis(w.as_millis() as u64));
    }
    plans
}
