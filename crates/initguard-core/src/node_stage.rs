//! The node stage (README "The node stage"): a bound pod's init containers and native
//! sidecars, each of which may wait on an agent on the pod's own node. When the agent was
//! missing as the pod's sandbox was created, the step fails for good for that pod; recreating
//! the pod is the only heal, and only once the agent is back.
//!
//! Pure, like the rest of the core: what a pod's steps say ([`InitProgress`], decoded by
//! `pod.rs`), which step is current ([`current_step`]), the agent's state per node
//! ([`agents`]), the recreation budget ([`budget`]) and the rule ([`decide`]). Times come in
//! as arguments, on this process's clock.

pub mod agents;
pub mod budget;
pub mod stage;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::{Config, InitContainerConfig, StepAction, StepOwner};
use crate::policy::{OwnerState, admitted};

/// A pod's (or a container's) `restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum RestartPolicy {
    /// Restart whatever the exit code (for an init container: a native sidecar).
    Always,
    /// Restart after a non-zero exit.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// As the API writes it; None for anything else (an absent field).
    pub fn parse(text: &str) -> Option<RestartPolicy> {
        match text {
            "Always" => Some(RestartPolicy::Always),
            "OnFailure" => Some(RestartPolicy::OnFailure),
            "Never" => Some(RestartPolicy::Never),
            _ => None,
        }
    }
}

/// What a bound, not yet initialized pod's init containers say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProgress {
    /// `spec.nodeName`.
    pub node: String,
    /// The `PodScheduled` condition's True transition (API server clock, whole seconds): set
    /// when a binding placed the pod; a pod created with `spec.nodeName` may have none.
    pub scheduled_at: Option<SystemTime>,
    /// The pod's `restartPolicy` (the server's default, Always, when absent).
    pub restart_policy: RestartPolicy,
    /// `spec.initContainers`, in order, each with its status when the kubelet reported one.
    pub steps: Vec<InitStep>,
}

/// One init container and its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitStep {
    /// The container's name.
    pub name: String,
    /// The container's own `restartPolicy`: `Always` makes it a native sidecar (1.28+);
    /// `Never`/`OnFailure` override the pod's (container restart rules, 1.35+).
    pub restart_policy: Option<RestartPolicy>,
    /// `status.initContainerStatuses[]` of that name.
    pub status: Option<StepStatus>,
}

impl InitStep {
    /// A restartable init container: done once it has started, not once it exits.
    pub fn is_sidecar(&self) -> bool {
        self.restart_policy == Some(RestartPolicy::Always)
    }

    /// Whether the kubelet has run this step at all (it starts steps in order, so a later
    /// step that ran means this one is done).
    fn ran(&self) -> bool {
        // A step in CrashLoopBackOff is waiting, with its last run in lastState.
        self.status.as_ref().is_some_and(|s| {
            s.running
                || s.started
                || s.exit_code.is_some()
                || s.last_exit_code.is_some()
                || s.restarts > 0
        })
    }

    /// Done by its own status: exited 0 (run to completion), or started (a sidecar).
    fn done(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            if self.is_sidecar() {
                s.started
            } else {
                s.exit_code == Some(0)
            }
        })
    }
}

/// An init container's status as the kubelet reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepStatus {
    /// `started: true` (a sidecar's startup probe passed, or it runs and has none).
    pub started: bool,
    /// `state.running` is set.
    pub running: bool,
    /// `state.terminated.exitCode`.
    pub exit_code: Option<i32>,
    /// `lastState.terminated.exitCode`: the previous run's, after a restart.
    pub last_exit_code: Option<i32>,
    /// `restartCount`.
    pub restarts: u32,
}

/// The step a pod is waiting on: the first init container not yet done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Current<'a> {
    /// Its index in `spec.initContainers`.
    pub index: usize,
    /// The step itself.
    pub step: &'a InitStep,
}

/// The step `progress` waits on, given that the first `done_before` steps were already seen
/// done (a sidecar that started and later restarted stays done). None when every step is
/// done (the pod is about to turn `Initialized`).
pub fn current_step(progress: &InitProgress, done_before: usize) -> Option<Current<'_>> {
    // A step is done by its own status, or because a later one ran: the kubelet starts
    // steps one by one, each after the previous one is done.
    let last_ran = progress.steps.iter().rposition(InitStep::ran);
    progress
        .steps
        .iter()
        .enumerate()
        .find(|(i, step)| {
            *i >= done_before && !step.done() && last_ran.is_none_or(|last| *i >= last)
        })
        .map(|(index, step)| Current { index, step })
}

/// Whether the kubelet restarts `step` after it fails: by its own `restartPolicy` when it
/// has one, else the pod's (an init container restarts unless the pod's is `Never`).
pub fn restarts(progress: &InitProgress, step: &InitStep) -> bool {
    step.restart_policy.unwrap_or(progress.restart_policy) != RestartPolicy::Never
}

/// A listed exit code of `step` in its current or last terminated state.
pub fn failed_code(step: &InitStep, listed: &[i32]) -> Option<i32> {
    let status = step.status.as_ref()?;
    [status.exit_code, status.last_exit_code]
        .into_iter()
        .flatten()
        .find(|code| listed.contains(code))
}

/// What may re-create a pod once it is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Recreator {
    /// A ReplicaSet, StatefulSet, DaemonSet or ReplicationController.
    Workload,
    /// A Job; recreating its pods is safe only with `restartPolicy: OnFailure`.
    Job,
    /// No controller, or one that is not known to re-create pods.
    None,
}

impl Recreator {
    /// From the pod's controlling owner's kind.
    pub fn of(kind: Option<&str>) -> Recreator {
        match kind {
            Some("ReplicaSet" | "StatefulSet" | "DaemonSet" | "ReplicationController") => {
                Recreator::Workload
            }
            Some("Job") => Recreator::Job,
            _ => Recreator::None,
        }
    }
}

/// What the rule reads about one pod waiting on a listed step.
#[derive(Debug, Clone, Copy)]
pub struct StepView<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's labels (the opt-in label among them).
    pub labels: &'a BTreeMap<String, String>,
    /// Whether the pod's namespace matches `optIn.namespaceSelector`, as last observed.
    pub namespace_selected: bool,
    /// When the pod was bound, on this process's clock and never earlier than the truth.
    pub bound: SystemTime,
    /// A listed exit code the step has exited with, if any.
    pub failed: Option<i32>,
    /// Whether the kubelet restarts the step after a failure ([`restarts`]).
    pub restarts: bool,
    /// The pod's `restartPolicy`.
    pub pod_restart_policy: RestartPolicy,
    /// The pod is being deleted.
    pub deleting: bool,
    /// What re-creates the pod.
    pub recreator: Recreator,
}

/// What made a step count as stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "trigger")]
pub enum StepTrigger {
    /// The step exited with a listed code.
    Failed {
        /// The exit code.
        code: i32,
    },
    /// The pod has waited the step's `deadline` since it was bound.
    Deadline,
}

impl StepTrigger {
    /// The `reason` written in Events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            StepTrigger::Failed { .. } => "failed",
            StepTrigger::Deadline => "deadline",
        }
    }
}

/// Why a stuck pod is not recreated yet, though it may be later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "hold")]
pub enum Hold {
    /// The step's owner is down (on the pod's node, for a DaemonSet): the new pod would fail
    /// the same way.
    OwnerDown {
        /// Since when, as observed.
        #[serde(with = "humantime_serde")]
        since: SystemTime,
    },
    /// The step's owner was never observed.
    OwnerUnknown,
    /// The owner is up, but not yet for `repairAfter`.
    RepairAfter {
        /// When it will have been.
        #[serde(with = "humantime_serde")]
        at: SystemTime,
    },
    /// Another pod of the same controller was recreated and its replacement has not
    /// initialized yet.
    OneAtATime {
        /// When the guard stops waiting for that replacement.
        #[serde(with = "humantime_serde")]
        until: SystemTime,
    },
    /// The controller had `recreate.maxPerHour` recreations in the last hour.
    HourlyCap {
        /// When the oldest of them leaves the hour.
        #[serde(with = "humantime_serde")]
        until: SystemTime,
    },
}

/// What the guard does about a pod waiting on a listed step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum StepPlan {
    /// Not stuck (yet): no trigger holds.
    Waiting,
    /// Stuck and only reported; `why` is one of the `StepPlan::NEVER_*` texts.
    Report {
        /// Why it is never recreated.
        why: &'static str,
    },
    /// Stuck; recreated once the hold lifts.
    Held(Hold),
    /// Recreate (evict) now.
    Recreate,
}

impl StepPlan {
    /// The step's `action` is `report`.
    pub const NEVER_REPORT: &'static str = "action: report";
    /// Neither the pod's label nor its namespace opted it in.
    pub const NEVER_NOT_OPTED_IN: &'static str = crate::policy::Plan::NEVER_NOT_OPTED_IN;
    /// The step's kubelet does not restart it: the pod fails at once, nothing is stuck.
    pub const NEVER_NO_RESTART: &'static str =
        "the stuck container does not restart (restartPolicy: Never)";
    /// No controller would re-create the pod.
    pub const NEVER_NO_RECREATOR: &'static str =
        "no ReplicaSet, StatefulSet, DaemonSet or ReplicationController would re-create it";
    /// A Job that does not restart the stuck container.
    pub const NEVER_JOB_NEVER: &'static str = "a Job's pod with restartPolicy: Never (a podFailurePolicy rule keeps the outage off backoffLimit)";
    /// The pod was bound while the owner was already up: its agent is up but the step failed.
    pub const NEVER_FAILED_WHILE_UP: &'static str = "bound while its owner was already up (an agent that is up but broken is not healed by recreating)";
    /// `evictions.namespaces` leaves the pod's namespace out.
    pub const NEVER_NAMESPACE: &'static str = "evictions are not allowed in this namespace";
    /// The pod is already being deleted.
    pub const NEVER_DELETING: &'static str = "already being deleted";
}

/// Result of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepOutcome {
    /// How long the pod has waited since it was bound.
    #[serde(with = "humantime_serde")]
    pub waited: Duration,
    /// The trigger that holds, if any.
    pub trigger: Option<StepTrigger>,
    /// What the guard does.
    pub plan: StepPlan,
    /// The earliest instant after `now` at which the outcome can change without an event.
    #[serde(with = "humantime_serde")]
    pub next_wake: Option<SystemTime>,
}

/// Decide what to do about a pod waiting on the listed step `step`, at `now`.
///
/// `owner` is the step's owner's state (on the pod's node for a DaemonSet; Unknown without
/// an owner is not read: a step without one has no owner condition), and `began` when its
/// current up-period began, a lower bound (the agent pod's Ready transition); None when
/// not known (an owner already up when the guard first looked), which counts as long before
/// any pod was bound: reported, never recreated. `owner`'s `since` is the guard's first
/// sight, which `repairAfter` counts from (never early). `budget` is the
/// controller's hold from [`budget::Budget::hold`], None when it allows a recreation.
/// Recreates only an opted-in pod, past a trigger, whose owner has been up for `repairAfter`
/// and came up after the pod was bound, with a controller that re-creates it, within the
/// budget; every other case reports or holds.
pub fn decide(
    pod: &StepView<'_>,
    step: &InitContainerConfig,
    owner: OwnerState,
    began: Option<SystemTime>,
    budget: Option<Hold>,
    config: &Config,
    now: SystemTime,
) -> StepOutcome {
    // A bind time in the future (clock skew) counts as no wait at all.
    let waited = now.duration_since(pod.bound).unwrap_or(Duration::ZERO);
    let due = step.deadline.and_then(|d| pod.bound.checked_add(d));
    let trigger = match (pod.failed, due) {
        (Some(code), _) => Some(StepTrigger::Failed { code }),
        (None, Some(at)) if at <= now => Some(StepTrigger::Deadline),
        _ => None,
    };
    let mut outcome = StepOutcome {
        waited,
        trigger,
        plan: StepPlan::Waiting,
        next_wake: None,
    };
    if trigger.is_none() {
        outcome.next_wake = due.filter(|at| *at > now);
        return outcome;
    }
    if let Some(why) = never(pod, step, config) {
        outcome.plan = StepPlan::Report { why };
        return outcome;
    }
    let owner_hold = match (&step.owner, owner) {
        (None, _) => None,
        (Some(_), OwnerState::Unknown) => Some(Hold::OwnerUnknown),
        (Some(_), OwnerState::Down { since }) => Some(Hold::OwnerDown { since }),
        (Some(_), OwnerState::Up { .. }) if began.is_none_or(|b| pod.bound >= b) => {
            // The pod's sandbox was created while the owner was up (or may have been).
            outcome.plan = StepPlan::Report {
                why: StepPlan::NEVER_FAILED_WHILE_UP,
            };
            return outcome;
        }
        (Some(_), OwnerState::Up { since }) => match since.checked_add(step.repair_after) {
            Some(at) if at <= now => None,
            Some(at) => Some(Hold::RepairAfter { at }),
            // Beyond representable time: never.
            None => Some(Hold::OwnerUnknown),
        },
    };
    outcome.plan = match owner_hold.or(budget) {
        Some(hold) => {
            outcome.next_wake = match &hold {
                Hold::RepairAfter { at } => Some(*at),
                Hold::OneAtATime { until } | Hold::HourlyCap { until } => Some(*until),
                Hold::OwnerDown { .. } | Hold::OwnerUnknown => None,
            }
            .filter(|at| *at > now);
            StepPlan::Held(hold)
        }
        None => StepPlan::Recreate,
    };
    outcome
}

/// The permanent reasons a stuck pod is only reported.
fn never(pod: &StepView<'_>, step: &InitContainerConfig, config: &Config) -> Option<&'static str> {
    if step.action == StepAction::Report {
        return Some(StepPlan::NEVER_REPORT);
    }
    if let Err(why) = admitted(
        config,
        pod.namespace,
        pod.namespace_selected,
        pod.labels,
        step.opt_in,
    ) {
        return Some(why);
    }
    if pod.deleting {
        return Some(StepPlan::NEVER_DELETING);
    }
    if !config.evictions.allows(pod.namespace) {
        return Some(StepPlan::NEVER_NAMESPACE);
    }
    match pod.recreator {
        Recreator::None => return Some(StepPlan::NEVER_NO_RECREATOR),
        // With OnFailure every restart of the stuck step already counts towards the Job's
        // backoffLimit; a recreate turns them into one failed pod.
        Recreator::Job if pod.pod_restart_policy != RestartPolicy::OnFailure => {
            return Some(StepPlan::NEVER_JOB_NEVER);
        }
        Recreator::Job | Recreator::Workload => {}
    }
    if !pod.restarts {
        return Some(StepPlan::NEVER_NO_RESTART);
    }
    None
}

/// The state of an init step's cluster-wide owner while such owners are not watched for init
/// steps: unknown, never down (so such steps are reported, never recreated).
pub fn cluster_owners_unknown(_step: &str) -> (OwnerState, Option<SystemTime>) {
    (OwnerState::Unknown, None)
}

/// The listed step `name`, if any.
pub fn listed<'a>(config: &'a Config, name: &str) -> Option<&'a InitContainerConfig> {
    config.init_containers.iter().find(|c| c.name == name)
}

/// The DaemonSet a listed step's owner names, if it is one.
pub fn daemonset_owner(step: &InitContainerConfig) -> Option<&crate::config::ObjectRef> {
    match &step.owner {
        Some(StepOwner::DaemonSet(ds)) => Some(ds),
        _ => None,
    }
}

/// Each DaemonSet the listed steps name, once, with the first step naming it, in the
/// config's order: what the guard watches, `status` reads and `check-config` checks.
pub fn daemonset_owners(config: &Config) -> Vec<(&crate::config::ObjectRef, &InitContainerConfig)> {
    let mut out: Vec<(&crate::config::ObjectRef, &InitContainerConfig)> = Vec::new();
    for step in &config.init_containers {
        if let Some(ds) = daemonset_owner(step)
            && !out.iter().any(|(seen, _)| *seen == ds)
        {
            out.push((ds, step));
        }
    }
    out
}

/// For a Job's pod with `restartPolicy: Never`: the `podFailurePolicy` rule that keeps an
/// agent outage off the Job's `backoffLimit` (1.26+), for `why`.
pub fn pod_failure_policy_hint(step: &InitContainerConfig) -> Option<String> {
    (!step.failed_exit_codes.is_empty()).then(|| {
        let codes: Vec<String> = step.failed_exit_codes.iter().map(i32::to_string).collect();
        format!(
            "podFailurePolicy: {{rules: [{{action: Ignore, onExitCodes: {{containerName: {}, \
             operator: In, values: [{}]}}}}]}}",
            step.name,
            codes.join(", ")
        )
    })
}

/// The node stage in words, for `why`, `/status` and the `InitContainerWaiting` Event:
/// "waiting on init container istio-validation for 4m; its owner
/// istio-system/istio-cni-node is down on node-3 since 2026-12-01T12:01:00Z; will recreate
/// 10s after it is back".
pub fn explain(
    step: &InitContainerConfig,
    node: &str,
    owner: OwnerState,
    outcome: &StepOutcome,
) -> String {
    let waited = humantime::format_duration(Duration::from_secs(outcome.waited.as_secs()));
    let mut words = format!("waiting on init container {} for {waited}", step.name);
    if let Some(trigger) = outcome.trigger {
        words.push_str(&match trigger {
            StepTrigger::Failed { code } => format!(" (it exited {code})"),
            StepTrigger::Deadline => " (past its deadline)".to_owned(),
        });
    }
    if let Some(owner_spec) = &step.owner {
        let who = match owner_spec {
            StepOwner::DaemonSet(ds) => format!("{}/{}", ds.namespace, ds.name),
            StepOwner::Cluster(spec) => crate::owners::owner_target(spec),
        };
        let on = match owner_spec {
            StepOwner::DaemonSet(_) => format!(" on {node}"),
            StepOwner::Cluster(_) => String::new(),
        };
        words.push_str(&match owner {
            OwnerState::Unknown => format!("; its owner {who} was never seen{on}"),
            OwnerState::Up { since } => format!("; its owner {who} is up{on} since {}", at(since)),
            OwnerState::Down { since } => {
                format!("; its owner {who} is down{on} since {}", at(since))
            }
        });
    }
    let repair = humantime::format_duration(step.repair_after);
    words.push_str(&match &outcome.plan {
        StepPlan::Waiting => {
            let codes: Vec<String> = step.failed_exit_codes.iter().map(i32::to_string).collect();
            match (step.deadline, codes.is_empty()) {
                (Some(d), true) => format!("; stuck once bound {}", humantime::format_duration(d)),
                (Some(d), false) => format!(
                    "; stuck once bound {} or if it exits {}",
                    humantime::format_duration(d),
                    codes.join(" or ")
                ),
                (None, false) => format!("; stuck if it exits {}", codes.join(" or ")),
                (None, true) => {
                    "; never counted as stuck (no deadline, no failedExitCodes)".to_owned()
                }
            }
        }
        StepPlan::Report { why } => format!("; reported, never recreated: {why}"),
        StepPlan::Recreate => "; recreating now".to_owned(),
        StepPlan::Held(Hold::OwnerDown { .. } | Hold::OwnerUnknown) => {
            format!("; will recreate {repair} after it is back")
        }
        StepPlan::Held(Hold::RepairAfter { at: when }) => {
            format!("; will recreate at {}", at(*when))
        }
        StepPlan::Held(Hold::OneAtATime { until }) => format!(
            "; will recreate once the last recreated pod of its controller has initialized \
             (at the latest {})",
            at(*until)
        ),
        StepPlan::Held(Hold::HourlyCap { until }) => format!(
            "; its controller had recreate.maxPerHour recreations this hour: not before {}",
            at(*until)
        ),
    });
    words
}

fn at(t: SystemTime) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(t)
}
