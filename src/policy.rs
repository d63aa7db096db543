//! The decision rule of DESIGN.md as a pure function of (pod, owners' states, pileups, config, now).
//! No I/O, no clock of its own.
//!
//! CONTRACT (owned by the policy helper; the guard, /status and `initguard status` rely on these
//! public types and on `decide`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::{Config, Mechanism};

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
    /// The guard will not act on this initializer; `why` says why
    /// ("not opted in", "unlisted initializer", "not head of the list").
    Never { why: &'static str },
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

/// Decide what to do about `pod` at `now`.
pub fn decide(
    pod: &PodView<'_>,
    env: &impl Environment,
    config: &Config,
    now: SystemTime,
) -> Outcome {
    let _ = (pod, env, config, now, Mechanism::SchedulingGates);
    unimplemented!("policy helper implements this")
}
