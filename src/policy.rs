//! The decision rule of DESIGN.md as a pure function of (pod, owners' states, pileups, config, now).
//! No I/O, no clock of its own.
//!
//! CONTRACT (owned by the policy helper; the guard, /status and `initguard status` rely on these
//! public types and on `decide`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::{Config, Mechanism, PileupAction};

/// The pod's controlling owner (ownerReference with `controller: true`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ControllerRef {
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// What the policy needs to know about one waiting pod.
#[derive(Debug, Clone, Copy)]
pub struct PodView<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub created: SystemTime,
    pub controller: Option<&'a ControllerRef>,
    /// Pending initializer names in API order.
    pub pending: &'a [String],
    /// Legacy mechanism only: when the current head (`pending[0]`) became the head, or was first
    /// observed as the head after a guard restart. Ignored for scheduling gates.
    pub head_since: Option<SystemTime>,
}

/// Liveness of an initializer's owner as last observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum OwnerState {
    /// Never observed yet (or the initializer has no owner): counts as up, never triggers a bypass.
    Unknown,
    Up {
        since: SystemTime,
    },
    Down {
        since: SystemTime,
    },
}

/// Everything outside the pod that the rule reads.
pub trait Environment {
    /// State of the owner of initializer `name` (Unknown when it has none).
    fn owner_state(&self, initializer: &str) -> OwnerState;
    /// How many pods that share `controller` wait on `initializer` (including this pod).
    fn pile_size(&self, controller: &ControllerRef, initializer: &str) -> u32;
}

/// Why an initializer is bypassed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Deadline,
    OwnerDown,
    Pileup,
}

impl Reason {
    /// Value of the `reason` metric label and of the annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Deadline => "deadline",
            Reason::OwnerDown => "owner_down",
            Reason::Pileup => "pileup",
        }
    }
}

/// Remove `initializer`, found at `index` of the pending list, now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub initializer: String,
    pub index: usize,
    pub reason: Reason,
    #[serde(with = "humantime_serde")]
    pub waited: Duration,
}

/// What the guard would do about one pending initializer (for /status and `initguard status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum Plan {
    /// Bypass now.
    Bypass { reason: Reason },
    /// Bypass at `at` unless the pod is initialized first.
    BypassAt {
        #[serde(with = "humantime_serde")]
        at: SystemTime,
        reason: Reason,
    },
    /// The guard will not act on this initializer; `why` says why (one of the `Plan::NEVER_*`
    /// texts).
    Never { why: &'static str },
}

impl Plan {
    /// The pod does not carry the opt-in label and is not in an opted-in namespace.
    pub const NEVER_NOT_OPTED_IN: &'static str = "not opted in";
    /// Not listed in the config and `unlistedInitializers: ignore`.
    pub const NEVER_UNLISTED: &'static str = "unlisted initializer";
    /// Legacy mechanism: only the head of the pending list is in progress.
    pub const NEVER_NOT_HEAD: &'static str = "not head of the list";
    /// The same name is pending at an earlier index; that entry is decided first.
    pub const NEVER_DUPLICATE: &'static str = "duplicate of an earlier entry";
    /// The deadline lies beyond the representable time and the owner is not going down.
    pub const NEVER_OUT_OF_RANGE: &'static str = "deadline out of range";
}

/// Per pending initializer: its wait so far and the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InitializerPlan {
    pub initializer: String,
    pub index: usize,
    /// None when its clock does not run (legacy non-head).
    #[serde(with = "humantime_serde")]
    pub waited: Option<Duration>,
    pub plan: Plan,
}

/// Result of `decide`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Outcome {
    /// Bypasses to perform now (at most one per initializer).
    pub decisions: Vec<Decision>,
    /// The earliest instant > now at which the outcome can change without any new event;
    /// None when only an event can change it.
    #[serde(with = "humantime_serde")]
    pub next_wake: Option<SystemTime>,
    /// One entry per pending initializer, in pending order.
    pub plans: Vec<InitializerPlan>,
}

/// Whether the guard may ever modify `pod` (opt-in label key present or opted-in namespace).
pub fn opted_in(pod: &PodView<'_>, config: &Config) -> bool {
    config.is_opted_in(pod.namespace, pod.labels)
}

/// Decide what to do about `pod` at `now`.
///
/// Applies the rule of DESIGN.md to every pending initializer: owner down past its grace, then
/// deadline, then pileup (first that holds wins). At most one decision per initializer name: a
/// name pending twice is decided at its first index only. `next_wake` only covers initializers
/// not decided now, because performing a decision removes the initializer; a failed write is
/// followed by a re-read and a new `decide`.
pub fn decide(
    pod: &PodView<'_>,
    env: &impl Environment,
    config: &Config,
    now: SystemTime,
) -> Outcome {
    let opted_in = opted_in(pod, config);
    let start = wait_start(pod, config.mechanism, now);
    let mut outcome = Outcome::default();
    for (index, name) in pod.pending.iter().enumerate() {
        // Legacy: only the head is in progress; the other clocks do not run yet.
        let in_progress = config.mechanism == Mechanism::SchedulingGates || index == 0;
        // A start in the future (clock skew) counts as no wait at all.
        let waited = in_progress.then(|| now.duration_since(start).unwrap_or(Duration::ZERO));
        let plan = match waited {
            _ if !opted_in => Plan::Never {
                why: Plan::NEVER_NOT_OPTED_IN,
            },
            None => Plan::Never {
                why: Plan::NEVER_NOT_HEAD,
            },
            Some(_) if pod.pending[..index].contains(name) => Plan::Never {
                why: Plan::NEVER_DUPLICATE,
            },
            Some(waited) => {
                let plan = plan_initializer(pod, name, start, waited, env, config, now);
                if let Plan::Bypass { reason } = plan {
                    outcome.decisions.push(Decision {
                        initializer: name.clone(),
                        index,
                        reason,
                        waited,
                    });
                }
                plan
            }
        };
        if let Plan::BypassAt { at, .. } = plan {
            outcome.next_wake = Some(outcome.next_wake.map_or(at, |w| w.min(at)));
        }
        outcome.plans.push(InitializerPlan {
            initializer: name.clone(),
            index,
            waited,
            plan,
        });
    }
    outcome
}

/// When the pod started waiting for its in-progress initializers.
fn wait_start(pod: &PodView<'_>, mechanism: Mechanism, now: SystemTime) -> SystemTime {
    match mechanism {
        // Restart-safe: the API server keeps the creation time.
        Mechanism::SchedulingGates => pod.created,
        // Never early: without a recorded head time the clock starts at this observation.
        Mechanism::Initializers => pod.head_since.unwrap_or(now),
    }
}

/// The plan for the first occurrence of an in-progress initializer on an opted-in pod.
fn plan_initializer(
    pod: &PodView<'_>,
    name: &str,
    start: SystemTime,
    waited: Duration,
    env: &impl Environment,
    config: &Config,
    now: SystemTime,
) -> Plan {
    let Some(deadline) = config.deadline_for(name) else {
        return Plan::Never {
            why: Plan::NEVER_UNLISTED,
        };
    };
    let grace = config
        .initializer(name)
        .map_or(config.defaults.owner_down_grace, |i| i.owner_down_grace);

    // Instants (> now) at which a time-based rule will hold, in precedence order.
    let mut upcoming: Vec<(SystemTime, Reason)> = Vec::with_capacity(2);

    if let OwnerState::Down { since } = env.owner_state(name) {
        // An instant beyond the representable time never comes.
        if let Some(at) = since.checked_add(grace) {
            if now >= at {
                return Plan::Bypass {
                    reason: Reason::OwnerDown,
                };
            }
            upcoming.push((at, Reason::OwnerDown));
        }
    }

    if waited >= deadline {
        return Plan::Bypass {
            reason: Reason::Deadline,
        };
    }
    // waited < deadline means now < start + deadline, so this instant is in the future.
    if let Some(at) = start.checked_add(deadline) {
        upcoming.push((at, Reason::Deadline));
    }

    if config.pileup.action == PileupAction::Bypass
        && let Some(controller) = pod.controller
        && env.pile_size(controller, name) >= config.pileup.threshold
    {
        return Plan::Bypass {
            reason: Reason::Pileup,
        };
    }

    // Earliest instant first; on a tie the rule with precedence (pushed first) wins.
    upcoming
        .into_iter()
        .reduce(|best, next| if next.0 < best.0 { next } else { best })
        .map_or(
            Plan::Never {
                why: Plan::NEVER_OUT_OF_RANGE,
            },
            |(at, reason)| Plan::BypassAt { at, reason },
        )
}
