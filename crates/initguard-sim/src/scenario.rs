//! Scenario files: a simulated cluster's settings, its controllers and a timeline of actions.
//!
//! ```yaml
//! mechanism: initializers
//! createTimeout: 2s
//! initializers: [sidecar.example.com]     # legacy: appended to every new pod by the server
//! owners:
//!   - initializer: sidecar.example.com
//!     deployment: sidecar-injector        # in kube-system unless `namespace` says otherwise
//! creators:
//!   - { kind: job, namespace: default, name: backfill, replicas: 2, optIn: true }
//! timeline:
//!   - { at: 5s, kill: sidecar.example.com }
//!   - { at: 30s, revive: sidecar.example.com }
//! ```
//!
//! Parsing rejects unknown keys and bad values with `FILE:LINE:COL: message`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::SimClients as _;
use crate::controllers::{
    ControllerError, Creator, CreatorHandle, CreatorKind, CreatorOptions, GateOwner,
    GateOwnerHandle, GateOwnerOptions, dns_name,
};
use kube_common::Mechanism;
use kube_sim::Sim;

/// The label key creators put on pods with `optIn: true`, unless the scenario says otherwise.
pub const DEFAULT_OPT_IN_LABEL: &str = "initguard.io/bypass";

// ---------------------------------------------------------------------------------------------
// File format
// ---------------------------------------------------------------------------------------------

/// A scenario as written in the file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub mechanism: Mechanism,
    /// How long a CREATE waits for initialization (legacy) before 504.
    #[serde(default, with = "humantime_serde")]
    pub create_timeout: Option<Duration>,
    /// Delay before an ungated, initialized pod is scheduled and runs.
    #[serde(default, with = "humantime_serde")]
    pub schedule_delay: Option<Duration>,
    /// Namespaces created at start.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Legacy mechanism: initializer names the server appends to every new pod.
    #[serde(default)]
    pub initializers: Vec<String>,
    /// Label key set on pods of creators with `optIn: true`.
    #[serde(default)]
    pub opt_in_label: Option<String>,
    /// Keep the controllers out of injected faults, so faults hit only the guard.
    #[serde(default = "yes")]
    pub exempt_controllers: bool,
    #[serde(default)]
    pub owners: Vec<OwnerEntry>,
    #[serde(default)]
    pub creators: Vec<CreatorEntry>,
    #[serde(default)]
    pub timeline: Vec<TimelineEntry>,
}

fn yes() -> bool {
    true
}

/// The controller behind one initializer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnerEntry {
    pub initializer: String,
    /// Namespace of its Deployment, Lease and owner pod (default `kube-system`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Deployment name (default: derived from the initializer name).
    #[serde(default)]
    pub deployment: Option<String>,
    /// Lease name (default: derived from the initializer name).
    #[serde(default)]
    pub lease: Option<String>,
    /// Labels of one owner pod that is Ready while the owner is alive (default: none).
    #[serde(default)]
    pub owner_pods: BTreeMap<String, String>,
    #[serde(default, with = "humantime_serde")]
    pub latency: Option<Duration>,
    /// Whether it starts alive (default true).
    #[serde(default = "yes")]
    pub alive: bool,
    /// `leaseDurationSeconds` written on the Lease (default 10s).
    #[serde(default, with = "humantime_serde")]
    pub lease_duration: Option<Duration>,
}

/// Which workload controller a creator imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CreatorKindName {
    Job,
    Replicaset,
    Cronjob,
}

/// One pod creator.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreatorEntry {
    pub kind: CreatorKindName,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    pub name: String,
    /// Scheduling gates put on every new pod (mechanism `schedulingGates` only).
    #[serde(default)]
    pub gates: Vec<String>,
    /// Whether pods carry the opt-in label.
    #[serde(default)]
    pub opt_in: bool,
    /// Job parallelism or ReplicaSet replicas (default 1).
    #[serde(default)]
    pub replicas: Option<u32>,
    /// CronJob period (required for cronjob).
    #[serde(default, with = "humantime_serde")]
    pub period: Option<Duration>,
    /// Job: pause before retrying after a failed or timed-out CREATE (default 500ms).
    #[serde(default, with = "humantime_serde")]
    pub retry_backoff: Option<Duration>,
    /// ReplicaSet: how long an unobserved CREATE is expected (default createTimeout + 5s).
    #[serde(default, with = "humantime_serde")]
    pub expectation_ttl: Option<Duration>,
    /// Whether it starts alive (default true).
    #[serde(default = "yes")]
    pub alive: bool,
    /// Started this long after the scenario begins rather than at once (a workload that
    /// arrives mid-run).
    #[serde(default, with = "humantime_serde")]
    pub start_at: Option<Duration>,
    /// How often it compares what it wants with what it sees (default 250ms).
    #[serde(default, with = "humantime_serde")]
    pub sync_period: Option<Duration>,
}

fn default_namespace() -> String {
    "default".to_string()
}

/// One timeline entry: an offset from the start and exactly one action.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimelineEntry {
    #[serde(with = "humantime_serde")]
    pub at: Duration,
    /// Kill a controller: an owner's initializer name or a creator's `kind/namespace/name`.
    #[serde(default)]
    pub kill: Option<String>,
    /// Revive a controller (same naming as `kill`).
    #[serde(default)]
    pub revive: Option<String>,
    #[serde(default)]
    pub set_latency: Option<SetLatency>,
    #[serde(default)]
    pub faults: Option<FaultsSpec>,
    /// `restart: true` restarts the API server (watches and connections drop).
    #[serde(default)]
    pub restart: Option<bool>,
}

/// `setLatency: { initializer: NAME, latency: 2s }`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetLatency {
    /// An owner's initializer name or a creator's `kind/namespace/name`.
    pub initializer: String,
    #[serde(with = "humantime_serde")]
    pub latency: Duration,
}

/// Faults to inject from this point on (or once, for `dropWatches` and `forceGone`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultsSpec {
    /// Close every open watch now.
    #[serde(default)]
    pub drop_watches: bool,
    /// Fraction of requests answered with an error status, 0 to 1 (0 stops).
    #[serde(default)]
    pub error_rate: Option<f64>,
    /// Statuses drawn from for `errorRate` (default 500 and 503).
    #[serde(default)]
    pub error_statuses: Option<Vec<u16>>,
    /// Added to every request.
    #[serde(default, with = "humantime_serde")]
    pub latency: Option<Duration>,
    /// The next watch is answered with 410 Gone.
    #[serde(default)]
    pub force_gone: bool,
    /// Turn every fault off first.
    #[serde(default)]
    pub clear: bool,
}

/// Statuses injected when a scenario sets `errorRate` without `errorStatuses`.
pub const DEFAULT_ERROR_STATUSES: [u16; 2] = [500, 503];

/// One thing a timeline entry does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Kill(String),
    Revive(String),
    SetLatency { target: String, latency: Duration },
    Faults(FaultsSpec),
    Restart,
}

/// One step of a running scenario, at its offset from the start.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Start `creators[i]` (one with `startAt`).
    StartCreator(usize),
    /// A timeline action.
    Action(Action),
}

impl TimelineEntry {
    /// The entry's action; validation guarantees there is exactly one.
    pub fn action(&self) -> Option<Action> {
        if let Some(t) = &self.kill {
            Some(Action::Kill(t.clone()))
        } else if let Some(t) = &self.revive {
            Some(Action::Revive(t.clone()))
        } else if let Some(s) = &self.set_latency {
            Some(Action::SetLatency {
                target: s.initializer.clone(),
                latency: s.latency,
            })
        } else if let Some(f) = &self.faults {
            Some(Action::Faults(f.clone()))
        } else if self.restart == Some(true) {
            Some(Action::Restart)
        } else {
            None
        }
    }

    fn action_count(&self) -> usize {
        [
            self.kill.is_some(),
            self.revive.is_some(),
            self.set_latency.is_some(),
            self.faults.is_some(),
            self.restart.is_some(),
        ]
        .into_iter()
        .filter(|b| *b)
        .count()
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// One located problem in a scenario file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ScenarioProblem {
    pub file: String,
    /// 1-based; 0 when the position is unknown (then `message` names the key path).
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Errors loading or running a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid scenario; Display prints one `FILE:LINE:COL: message` per line.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<ScenarioProblem>),
    #[error(transparent)]
    Controller(#[from] ControllerError),
    #[error("scenario action at {at:?} failed: {message}")]
    Action { at: Duration, message: String },
}

// ---------------------------------------------------------------------------------------------
// Parsing and validation
// ---------------------------------------------------------------------------------------------

impl Scenario {
    /// Reads and validates the scenario at `path`.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Scenario::from_yaml_str(&text, &path.display().to_string())
    }

    /// Parses and validates YAML text; `file` labels error locations.
    pub fn from_yaml_str(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = serde_yaml::from_str(text).map_err(|e| {
            let (line, column) = e
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((0, 0));
            let mut message = e.to_string();
            let suffix = format!(" at line {line} column {column}");
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = stripped.to_string();
            }
            ScenarioError::Invalid(vec![ScenarioProblem {
                file: file.to_string(),
                line,
                column,
                message,
            }])
        })?;
        let problems = scenario.validate();
        if problems.is_empty() {
            return Ok(scenario);
        }
        // serde_yaml accepted the text, so the pass finds no syntax error; if it did, problems
        // are reported by key path without a position.
        let layout = kube_common::yaml::scan(text).unwrap_or_default();
        Err(ScenarioError::Invalid(
            problems
                .into_iter()
                .map(|(path, message)| {
                    let (line, column, message) = match layout.value(&path) {
                        Some(pos) => (pos.line, pos.column, message),
                        None => (0, 0, format!("{path}: {message}")),
                    };
                    ScenarioProblem {
                        file: file.to_string(),
                        line,
                        column,
                        message,
                    }
                })
                .collect(),
        ))
    }

    /// Every semantic problem as (key path, message).
    fn validate(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut problem = |path: String, message: String| problems.push((path, message));

        if self.create_timeout == Some(Duration::ZERO) {
            problem("createTimeout".into(), "must be greater than zero".into());
        }
        for (i, ns) in self.namespaces.iter().enumerate() {
            if let Err(m) = check_dns_label(ns) {
                problem(format!("namespaces[{i}]"), m);
            }
        }
        if self.mechanism == Mechanism::SchedulingGates && !self.initializers.is_empty() {
            problem(
                "initializers".into(),
                "only for mechanism initializers; with schedulingGates, creators put `gates` on their pods".into(),
            );
        }
        let mut seen = BTreeSet::new();
        for (i, name) in self.initializers.iter().enumerate() {
            if let Err(m) = check_initializer_name(name) {
                problem(format!("initializers[{i}]"), m);
            } else if !seen.insert(name.as_str()) {
                problem(
                    format!("initializers[{i}]"),
                    format!("duplicate initializer {name:?}"),
                );
            }
        }
        if let Some(label) = &self.opt_in_label
            && label.trim().is_empty()
        {
            problem("optInLabel".into(), "must not be empty".into());
        }

        let mut targets: BTreeSet<String> = BTreeSet::new();
        for (i, owner) in self.owners.iter().enumerate() {
            let at = |field: &str| format!("owners[{i}].{field}");
            if let Err(m) = check_initializer_name(&owner.initializer) {
                problem(at("initializer"), m);
            } else if !targets.insert(owner.initializer.clone()) {
                problem(
                    at("initializer"),
                    format!("duplicate owner for {:?}", owner.initializer),
                );
            }
            if let Some(ns) = &owner.namespace
                && let Err(m) = check_dns_label(ns)
            {
                problem(at("namespace"), m);
            }
            for (field, value) in [("deployment", &owner.deployment), ("lease", &owner.lease)] {
                if let Some(v) = value
                    && let Err(m) = check_dns_subdomain(v)
                {
                    problem(at(field), m);
                }
            }
            if owner
                .lease_duration
                .is_some_and(|d| d < Duration::from_secs(1))
            {
                problem(at("leaseDuration"), "must be at least 1s".into());
            }
        }

        for (i, creator) in self.creators.iter().enumerate() {
            let at = |field: &str| format!("creators[{i}].{field}");
            if let Err(m) = check_dns_label(&creator.namespace) {
                problem(at("namespace"), m);
            }
            if let Err(m) = check_dns_label(&creator.name) {
                problem(at("name"), m);
            }
            if self.mechanism == Mechanism::Initializers && !creator.gates.is_empty() {
                problem(
                    at("gates"),
                    "only for mechanism schedulingGates; legacy initializers come from the top-level `initializers` list".into(),
                );
            }
            for (j, gate) in creator.gates.iter().enumerate() {
                if let Err(m) = check_initializer_name(gate) {
                    problem(format!("creators[{i}].gates[{j}]"), m);
                }
            }
            if creator.replicas == Some(0) {
                problem(at("replicas"), "must be at least 1".into());
            }
            match creator.kind {
                CreatorKindName::Cronjob => {
                    match creator.period {
                        None => problem(at("kind"), "a cronjob needs a `period`".into()),
                        Some(p) if p.is_zero() => {
                            problem(at("period"), "must be greater than zero".into())
                        }
                        Some(_) => {}
                    }
                    if creator.replicas.is_some() {
                        problem(
                            at("replicas"),
                            "not used by a cronjob (one pod per period)".into(),
                        );
                    }
                }
                CreatorKindName::Job | CreatorKindName::Replicaset => {
                    if creator.period.is_some() {
                        problem(at("period"), "only for kind cronjob".into());
                    }
                }
            }
            if creator.retry_backoff.is_some() && creator.kind != CreatorKindName::Job {
                problem(at("retryBackoff"), "only for kind job".into());
            }
            if creator.expectation_ttl.is_some() && creator.kind != CreatorKindName::Replicaset {
                problem(at("expectationTtl"), "only for kind replicaset".into());
            }
            let key = self.creator_options(creator).controller_key();
            if !targets.insert(key.clone()) {
                problem(at("name"), format!("duplicate creator {key}"));
            }
        }

        for (i, entry) in self.timeline.iter().enumerate() {
            let at = |field: &str| format!("timeline[{i}].{field}");
            match entry.action_count() {
                1 => {}
                0 => problem(
                    format!("timeline[{i}]"),
                    "needs one action: kill, revive, setLatency, faults or restart".into(),
                ),
                _ => problem(
                    format!("timeline[{i}]"),
                    "has more than one action; use one entry per action".into(),
                ),
            }
            let known = |t: &str| targets.contains(&self.resolve_target(t));
            if let Some(t) = &entry.kill
                && !known(t)
            {
                problem(at("kill"), unknown_target(t));
            }
            if let Some(t) = &entry.revive
                && !known(t)
            {
                problem(at("revive"), unknown_target(t));
            }
            if let Some(s) = &entry.set_latency
                && !known(&s.initializer)
            {
                problem(
                    format!("timeline[{i}].setLatency.initializer"),
                    unknown_target(&s.initializer),
                );
            }
            if let Some(f) = &entry.faults {
                if !f.drop_watches && !f.force_gone && f.error_rate.is_none() && f.latency.is_none()
                {
                    problem(
                        at("faults"),
                        "names no fault: dropWatches, errorRate, latency or forceGone".into(),
                    );
                }
                if let Some(rate) = f.error_rate
                    && !(0.0..=1.0).contains(&rate)
                {
                    problem(
                        format!("timeline[{i}].faults.errorRate"),
                        "must be between 0 and 1".into(),
                    );
                }
            }
            if entry.restart == Some(false) {
                problem(at("restart"), "only `restart: true` is meaningful".into());
            }
        }
        problems
    }

    /// Everything the scenario does after its start, in time order (ties keep file order,
    /// creator starts first): delayed creator starts and timeline actions.
    pub fn steps(&self) -> Vec<(Duration, Step)> {
        let mut steps: Vec<(Duration, Step)> = self
            .creators
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.start_at.map(|at| (at, Step::StartCreator(i))))
            .collect();
        steps.extend(
            self.timeline
                .iter()
                .filter_map(|e| e.action().map(|a| (e.at, Step::Action(a)))),
        );
        steps.sort_by_key(|(at, _)| *at);
        steps
    }

    /// The same scenario with every duration multiplied by `factor` (to run it faster or
    /// slower), each rounded to a whole millisecond.
    pub fn scaled(&self, factor: f64) -> Scenario {
        let d =
            |d: Duration| Duration::from_millis((d.as_secs_f64() * factor * 1000.0).round() as u64);
        let o = |x: Option<Duration>| x.map(d);
        let mut s = self.clone();
        s.create_timeout = o(s.create_timeout);
        s.schedule_delay = o(s.schedule_delay);
        for owner in &mut s.owners {
            owner.latency = o(owner.latency);
            owner.lease_duration = o(owner.lease_duration);
        }
        for c in &mut s.creators {
            c.period = o(c.period);
            c.retry_backoff = o(c.retry_backoff);
            c.expectation_ttl = o(c.expectation_ttl);
            c.start_at = o(c.start_at);
            c.sync_period = o(c.sync_period);
        }
        for e in &mut s.timeline {
            e.at = d(e.at);
            if let Some(l) = &mut e.set_latency {
                l.latency = d(l.latency);
            }
            if let Some(f) = &mut e.faults {
                f.latency = o(f.latency);
            }
        }
        s
    }

    /// The server settings this scenario asks for, on top of `base` (listen address etc.).
    pub fn sim_options(&self, base: kube_sim::SimOptions) -> kube_sim::SimOptions {
        kube_sim::SimOptions {
            mechanism: self.mechanism,
            legacy_initializers: self.initializers.clone(),
            create_timeout: self.create_timeout.unwrap_or(base.create_timeout),
            schedule_delay: self.schedule_delay.unwrap_or(base.schedule_delay),
            ..base
        }
    }

    /// A timeline target as written (`sidecar.example.com`, `job/default/backfill`) → the key
    /// controllers are registered under (owner initializer, or `Job/default/backfill`).
    fn resolve_target(&self, target: &str) -> String {
        if self.owners.iter().any(|o| o.initializer == target) {
            return target.to_string();
        }
        let mut parts = target.splitn(3, '/');
        if let (Some(kind), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) {
            let kind = match kind.to_ascii_lowercase().as_str() {
                "job" => "Job",
                "replicaset" => "ReplicaSet",
                "cronjob" => "CronJob",
                _ => return target.to_string(),
            };
            return format!("{kind}/{ns}/{name}");
        }
        target.to_string()
    }

    fn owner_options(&self, owner: &OwnerEntry) -> GateOwnerOptions {
        let mut opts = GateOwnerOptions::new(owner.initializer.clone(), self.mechanism);
        if let Some(ns) = &owner.namespace {
            opts.namespace = ns.clone();
        }
        if let Some(d) = &owner.deployment {
            opts.deployment = Some(d.clone());
        }
        if let Some(l) = &owner.lease {
            opts.lease = Some(l.clone());
        }
        opts.owner_pod_labels = owner.owner_pods.clone();
        opts.latency = owner.latency.unwrap_or_default();
        opts.alive = owner.alive;
        if let Some(d) = owner.lease_duration {
            opts.lease_duration = d;
        }
        opts
    }

    /// The controller options of `creator`.
    pub fn creator_options(&self, creator: &CreatorEntry) -> CreatorOptions {
        let replicas = creator.replicas.unwrap_or(1);
        let mut opts = match creator.kind {
            CreatorKindName::Job => {
                CreatorOptions::job(&creator.namespace, &creator.name, replicas)
            }
            CreatorKindName::Replicaset => {
                CreatorOptions::replica_set(&creator.namespace, &creator.name, replicas)
            }
            CreatorKindName::Cronjob => CreatorOptions::cron_job(
                &creator.namespace,
                &creator.name,
                creator.period.unwrap_or(Duration::from_secs(60)),
            ),
        };
        match &mut opts.kind {
            CreatorKind::Job { retry_backoff, .. } => {
                if let Some(b) = creator.retry_backoff {
                    *retry_backoff = b;
                }
            }
            CreatorKind::ReplicaSet {
                expectation_ttl, ..
            } => {
                *expectation_ttl = creator.expectation_ttl.unwrap_or(
                    self.create_timeout.unwrap_or(Duration::from_secs(30)) + Duration::from_secs(5),
                );
            }
            CreatorKind::CronJob { .. } => {}
        }
        opts.gates = creator.gates.clone();
        opts.opt_in_label = creator.opt_in.then(|| {
            self.opt_in_label
                .clone()
                .unwrap_or_else(|| DEFAULT_OPT_IN_LABEL.to_string())
        });
        opts.alive = creator.alive;
        if let Some(period) = creator.sync_period {
            opts.sync_period = period;
        }
        opts
    }
}

fn unknown_target(target: &str) -> String {
    format!(
        "unknown controller {target:?}: name an owner's initializer or a creator as kind/namespace/name"
    )
}

/// RFC 1123 label: what namespaces and most object names must be.
fn check_dns_label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a valid name: lowercase letters, digits and '-', at most 63, starting and ending alphanumeric"
        ))
    }
}

/// RFC 1123 subdomain: what Deployment and Lease names must be.
fn check_dns_subdomain(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a valid name: dot-separated parts of lowercase letters, digits and '-', starting and ending alphanumeric, at most 253"
        ))
    }
}

/// Initializer and gate names: non-empty, no whitespace, at most 316 characters
/// (a qualified name with a DNS subdomain prefix).
fn check_initializer_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        Err("initializer name must not be empty".to_string())
    } else if s.chars().any(char::is_whitespace) {
        Err(format!(
            "{s:?} is not a valid initializer name: contains whitespace"
        ))
    } else if s.len() > 316 {
        Err(format!("initializer name {s:?} is too long"))
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/// The user name a scenario's owner talks to the server as.
pub fn owner_user(opts: &GateOwnerOptions) -> String {
    let name = opts
        .deployment
        .clone()
        .unwrap_or_else(|| dns_name(&opts.initializer));
    format!("system:serviceaccount:{}:{name}", opts.namespace)
}

/// The user name a scenario's creator talks to the server as.
pub fn creator_user(opts: &CreatorOptions) -> String {
    format!(
        "system:serviceaccount:kube-system:{}-controller",
        opts.kind.kind().to_ascii_lowercase()
    )
}

/// The controllers of a running scenario.
#[derive(Debug, Default)]
pub struct ScenarioControllers {
    /// By initializer name.
    pub owners: BTreeMap<String, GateOwnerHandle>,
    /// By `Kind/namespace/name`.
    pub creators: BTreeMap<String, CreatorHandle>,
}

impl ScenarioControllers {
    /// Creates the scenario's namespaces and starts its controllers against `sim`. With
    /// `exemptControllers` (the default) the controllers' users become the server's set of
    /// fault-exempt users, replacing any earlier set.
    pub async fn start(sim: &Sim, scenario: &Scenario) -> Result<Self, ScenarioError> {
        create_namespaces(sim, scenario).await?;
        let mut controllers = ScenarioControllers::default();
        let mut users = Vec::new();
        for owner in &scenario.owners {
            let opts = scenario.owner_options(owner);
            let user = owner_user(&opts);
            let handle = GateOwner::start(sim.kube_config(&user), opts)?;
            users.push(user);
            controllers.owners.insert(owner.initializer.clone(), handle);
        }
        for creator in &scenario.creators {
            // Delayed creators are exempt from the start, like the others.
            users.push(creator_user(&scenario.creator_options(creator)));
            if creator.start_at.is_none() {
                controllers.start_creator(sim, scenario, creator)?;
            }
        }
        if scenario.exempt_controllers {
            let users: Vec<&str> = users.iter().map(String::as_str).collect();
            sim.faults().exempt_users(&users);
        }
        Ok(controllers)
    }

    /// Starts `creator` (an entry of `scenario`).
    pub fn start_creator(
        &mut self,
        sim: &Sim,
        scenario: &Scenario,
        creator: &CreatorEntry,
    ) -> Result<(), ScenarioError> {
        let opts = scenario.creator_options(creator);
        let user = creator_user(&opts);
        let key = opts.controller_key();
        let handle = Creator::start(sim.kube_config(&user), opts)?;
        self.creators.insert(key, handle);
        Ok(())
    }

    /// Carries out one step of `scenario`.
    pub async fn step(
        &mut self,
        sim: &Sim,
        scenario: &Scenario,
        step: &Step,
    ) -> Result<(), String> {
        match step {
            Step::StartCreator(i) => {
                let creator = scenario
                    .creators
                    .get(*i)
                    .ok_or_else(|| format!("no creator number {i}"))?;
                self.start_creator(sim, scenario, creator)
                    .map_err(|e| e.to_string())
            }
            Step::Action(action) => self.apply(sim, scenario, action).await,
        }
    }

    /// Carries out one action of `scenario` (which resolves target names).
    pub async fn apply(
        &self,
        sim: &Sim,
        scenario: &Scenario,
        action: &Action,
    ) -> Result<(), String> {
        match action {
            Action::Kill(target) => self.with_target(scenario, target, |c| c.kill()),
            Action::Revive(target) => self.with_target(scenario, target, |c| c.revive()),
            Action::SetLatency { target, latency } => {
                self.with_target(scenario, target, |c| c.set_latency(*latency))
            }
            Action::Faults(f) => {
                let faults = sim.faults();
                if f.clear {
                    faults.clear();
                }
                if let Some(rate) = f.error_rate {
                    let statuses = f
                        .error_statuses
                        .clone()
                        .unwrap_or_else(|| DEFAULT_ERROR_STATUSES.to_vec());
                    faults.set_error_rate(rate, &statuses);
                }
                if let Some(latency) = f.latency {
                    faults.set_latency(latency);
                }
                if f.force_gone {
                    faults.force_gone_next_watch();
                }
                if f.drop_watches {
                    faults.drop_watches();
                }
                Ok(())
            }
            Action::Restart => sim.restart().await.map_err(|e| e.to_string()),
        }
    }

    fn with_target(
        &self,
        scenario: &Scenario,
        target: &str,
        f: impl Fn(&dyn Switchable),
    ) -> Result<(), String> {
        let key = scenario.resolve_target(target);
        if let Some(owner) = self.owners.get(&key) {
            f(owner);
            Ok(())
        } else if let Some(creator) = self.creators.get(&key) {
            f(creator);
            Ok(())
        } else {
            Err(unknown_target(target))
        }
    }

    /// Stops every controller and waits for them.
    pub async fn stop(self) {
        for (_, owner) in self.owners {
            owner.stop().await;
        }
        for (_, creator) in self.creators {
            creator.stop().await;
        }
    }
}

/// What timeline actions can do to any controller.
trait Switchable {
    fn kill(&self);
    fn revive(&self);
    fn set_latency(&self, latency: Duration);
}

impl<S> Switchable for crate::controllers::ControllerHandle<S> {
    fn kill(&self) {
        crate::controllers::ControllerHandle::kill(self)
    }
    fn revive(&self) {
        crate::controllers::ControllerHandle::revive(self)
    }
    fn set_latency(&self, latency: Duration) {
        crate::controllers::ControllerHandle::set_latency(self, latency)
    }
}

async fn create_namespaces(sim: &Sim, scenario: &Scenario) -> Result<(), ScenarioError> {
    let mut wanted: BTreeSet<&str> = scenario.namespaces.iter().map(String::as_str).collect();
    wanted.extend(scenario.creators.iter().map(|c| c.namespace.as_str()));
    let owner_namespaces: Vec<String> = scenario
        .owners
        .iter()
        .map(|o| scenario.owner_options(o).namespace)
        .collect();
    wanted.extend(owner_namespaces.iter().map(String::as_str));
    for name in wanted {
        sim.ensure_namespace("system:admin", name)
            .await
            .map_err(|e| ScenarioError::Action {
                at: Duration::ZERO,
                message: format!("cannot create namespace {name}: {e}"),
            })?;
    }
    Ok(())
}

/// Runs `scenario` against `sim` (which should have been started with
/// [`Scenario::sim_options`]): starts its controllers, carries out the timeline at its offsets
/// from now, then keeps everything running until `cancel` fires, and stops the controllers.
pub async fn run_scenario(
    sim: &Sim,
    scenario: &Scenario,
    cancel: CancellationToken,
) -> Result<(), ScenarioError> {
    let mut controllers = ScenarioControllers::start(sim, scenario).await?;
    let start = tokio::time::Instant::now();
    let mut result = Ok(());
    for (at, step) in scenario.steps() {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep_until(start + at) => {}
        }
        tracing::info!(?at, ?step, "scenario step");
        if let Err(message) = controllers.step(sim, scenario, &step).await {
            result = Err(ScenarioError::Action { at, message });
            break;
        }
    }
    if result.is_ok() {
        cancel.cancelled().await;
    }
    controllers.stop().await;
    result
}
