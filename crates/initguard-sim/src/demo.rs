//! `initguard demo`: the guard's main job on an embedded, simulated cluster, narrated.
//!
//! Everything runs in this process on 127.0.0.1: the simulated API server ([`kube_sim`]), the
//! owners of two initializers and a few pod creators ([`crate::controllers`]), and the
//! guard itself (handed in as a [`GuardStarter`]) with an embedded configuration. The same scripted
//! outage runs twice, first without the guard and then with it. The narration is derived from
//! the simulator's object history and the guard's owner view (never from log output), and the
//! demo ends with a side-by-side table of what happened.

pub mod plot;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::{self, Display, Write as _};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use tokio::time::{Instant, MissedTickBehavior};

use crate::SimClients as _;
use crate::controllers::{
    ControllerError, CreatorKind, CreatorOptions, GateOwnerOptions, dns_name, pile_report,
};
use crate::scenario::{Action, Scenario, ScenarioControllers, ScenarioError, Step, owner_user};
use initguard_core::bypass::{BYPASSED_ANNOTATION, parse_records};
use initguard_core::config::{Config, ConfigError, DEFAULT_OPT_IN_LABEL, Mechanism, ReadFile};
use initguard_core::policy::{OwnerState, Reason};
use kube_sim::{ChangeType, Sim, SimError, SimOptions};

/// The initializer whose owner dies during the demo.
pub const SIDECAR: &str = "sidecar.example.com";
/// The initializer whose owner stays healthy; the guard must never remove it.
pub const QUOTA: &str = "quota.example.com";
/// Namespace of the demo's workloads.
pub const NAMESPACE: &str = "demo";
/// The user the guard talks to the simulated API server as.
pub const GUARD_USER: &str = "system:initguard";
/// Where the guard's endpoints listen unless that port is taken (then a free port is used).
pub const PREFERRED_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9777));
/// The user of the kubeconfig written by `--serve`.
pub const KUBECONFIG_USER: &str = "admin";

/// Namespace of the owners' Deployments and Leases.
const OWNER_NAMESPACE: &str = "kube-system";

/// The scenarios the demo runs (`crate::scenario` files; `initguard sim --scenario` runs
/// them alone). Their timeline: workloads arriving, the sidecar owner dead from 5 s to 14 s.
const GATES_SCENARIO: &str = include_str!("../../../config/scenarios/demo-gates.yaml");
const INITIALIZERS_SCENARIO: &str =
    include_str!("../../../config/scenarios/demo-initializers.yaml");
/// How long each run is narrated, in seconds (multiplied by the time scale).
const RUN_LENGTH: f64 = 20.0;
/// Longer than the sidecar deadline, so the first pods of the outage are released by their
/// deadline and later ones by the owner's liveness.
const OWNER_DOWN_GRACE: f64 = 3.0;
const SAMPLE_EVERY: f64 = 2.0;
const TICK: f64 = 0.1;
/// Bypass lines printed per tick before the rest are summed up in one line.
const BYPASS_LINES_PER_TICK: usize = 4;
/// How long the simulated owners and the guard get to come up (not scaled).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(15);

/// How to run the demo.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoOptions {
    /// Which pending-initializer mechanism the simulated cluster implements.
    pub mechanism: Mechanism,
    /// After the scripted runs, keep the simulated cluster with the guard running until
    /// SIGINT/SIGTERM.
    pub serve: bool,
    /// Multiplies every duration of the scenario (1.0 = the ~20 s runs of the README; tests use
    /// less). Between 0.05 and 10.
    pub time_scale: f64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            mechanism: Mechanism::SchedulingGates,
            serve: false,
            time_scale: 1.0,
        }
    }
}

/// Why the demo could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("time scale must be a finite number between 0.05 and 10, got {0}")]
    TimeScale(f64),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
    #[error("the embedded demo scenario is invalid:\n{0}")]
    Scenario(#[from] ScenarioError),
    #[error("scenario step failed: {0}")]
    Step(String),
    #[error("the embedded demo configuration is invalid:\n{0}")]
    Config(#[from] ConfigError),
    #[error("cannot start the guard: {0}")]
    Guard(#[from] StartError),
    #[error("{what} not ready after {}: {detail}", humantime::format_duration(*.waited))]
    NotReady {
        what: &'static str,
        waited: Duration,
        detail: String,
    },
    #[error("cannot prepare {path}: {source}")]
    TempDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the demo's output: {0}")]
    Output(#[source] std::io::Error),
    #[error("the guard broke one of its promises: {0}")]
    Broken(String),
}

/// The demo's configuration names no TLS or CA file; one added by mistake is refused.
struct NoFiles;

impl ReadFile for NoFiles {
    fn read(&self, path: &std::path::Path) -> std::io::Result<Option<Vec<u8>>> {
        Err(std::io::Error::other(format!(
            "the demo's configuration names no files ({})",
            path.display()
        )))
    }
}

/// Starts the guard for the demo's second run. The guard is the product crate's, which depends
/// on this one: `initguard demo` hands it in, so this crate needs no part of it.
pub trait GuardStarter: Send + Sync {
    /// Starts the guard with `config` as a client of `kube` (the simulated server, as the
    /// guard's user), for `mechanism`.
    fn start(
        &self,
        kube: kube::Config,
        config: Config,
    ) -> BoxFuture<'_, Result<Box<dyn RunningGuard>, StartError>>;

    /// Resolves on the signal that stops the guard (`--serve` waits for it).
    fn stop_signal(&self) -> BoxFuture<'static, ()>;
}

/// A guard the demo started.
pub trait RunningGuard: Send + Sync {
    /// Where it serves /metrics and /status.
    fn addr(&self) -> SocketAddr;
    /// What it has not finished starting (initial reads, owners not yet observed); empty when
    /// ready.
    fn not_ready(&self) -> Vec<String>;
    /// Its view of the owner of `initializer`.
    fn owner_state(&self, initializer: &str) -> OwnerState;
    /// Stops it, waiting for its writes to drain.
    fn shutdown(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Why the guard did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Its `listen` address was taken.
    #[error("cannot listen: {0}")]
    Listen(String),
    #[error("{0}")]
    Other(String),
}

/// What one run (without or with the guard) did, measured from the simulator's records.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStats {
    pub with_guard: bool,
    pub pods_created: usize,
    /// Pods whose every initializer was removed by its owner.
    pub initialized_by_owners: usize,
    /// Pods fully initialized after the guard removed at least one initializer.
    pub initialized_after_bypass: usize,
    /// Bypasses written by the guard, by reason (`deadline`, `owner_down`, `pileup`).
    pub bypasses: BTreeMap<String, usize>,
    /// Bypasses of the initializer whose owner never failed (must be 0).
    pub healthy_initializer_bypasses: usize,
    /// Pods still waiting on an initializer when the run ended.
    pub still_waiting: usize,
    /// Most pods of one controller waiting at the same time (sampled every tick).
    pub largest_pile: usize,
    /// `Kind/namespace/name` of the controller that had [`RunStats::largest_pile`].
    pub largest_pile_controller: Option<String>,
    /// (seconds into the scenario's timeline, pods stored and waiting on an initializer),
    /// sampled every tick: the pile over time that `initguard demo --plot` draws.
    pub waiting_over_time: Vec<(f64, usize)>,
    /// Longest time an opted-in pod waited for initialization (until the end if it still does).
    /// Waits are measured as the guard measures them: from `creationTimestamp` (whole seconds)
    /// for scheduling gates, from creation for legacy initializers.
    #[serde(with = "humantime_serde")]
    pub longest_wait_opted_in: Duration,
    /// Longest time a pod without the opt-in label waited.
    #[serde(with = "humantime_serde")]
    pub longest_wait_unlabeled: Duration,
    /// Pod CREATEs that the API server timed out (legacy initializers: 504, pod kept).
    pub create_timeouts: u64,
    /// Pods created without the opt-in label.
    pub unlabeled_pods: usize,
    /// Pods without the opt-in label that the guard wrote to (must be 0).
    pub unlabeled_pods_written_by_guard: usize,
}

impl RunStats {
    /// Every bypass, whatever its reason.
    pub fn total_bypasses(&self) -> usize {
        self.bypasses.values().sum()
    }

    /// Bypasses with `reason`.
    pub fn bypasses_for(&self, reason: Reason) -> usize {
        self.bypasses.get(reason.as_str()).copied().unwrap_or(0)
    }
}

/// The outcome of [`run`]: the same scenario without and with the guard.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DemoSummary {
    pub mechanism: Mechanism,
    pub without_guard: RunStats,
    pub with_guard: RunStats,
    /// `http://ADDR` where the guard served /metrics and /status during the second run.
    pub guard_url: String,
    /// The sidecar owner's outage on the scenario's timeline (seconds: killed, revived or the
    /// end of the run).
    pub outage: Option<(f64, f64)>,
}

/// Run the demo with the guard `guard` starts, narrating on stdout.
pub async fn run(opts: DemoOptions, guard: &dyn GuardStarter) -> Result<DemoSummary, DemoError> {
    run_with_output(opts, guard, Box::new(std::io::stdout())).await
}

/// [`run`], narrating on `out`.
pub async fn run_with_output(
    opts: DemoOptions,
    guard: &dyn GuardStarter,
    out: Box<dyn Write + Send>,
) -> Result<DemoSummary, DemoError> {
    if !(opts.time_scale.is_finite() && (0.05..=10.0).contains(&opts.time_scale)) {
        return Err(DemoError::TimeScale(opts.time_scale));
    }
    let clock = Clock {
        scale: opts.time_scale,
    };
    let mut n = Narrator::new(out);
    // Held until the guard starts, so that a second demo running meanwhile picks another port.
    let (reservation, listen) = reserve_listen_port();
    let config_text = config_yaml(opts.mechanism, listen, clock);
    let config = Config::from_yaml_with(&config_text, "<embedded demo config>", &NoFiles)?;
    let scenario = scenario(opts.mechanism, clock)?;
    intro(&mut n, &scenario, clock, &config_text, listen);

    n.line("");
    n.line("── Run 1 of 2: without the guard ──────────────────────────────────────────");
    let (without_guard, cluster) = run_once(&mut n, &scenario, clock, None).await?;
    cluster.stop().await;

    n.line("");
    n.line("── Run 2 of 2: the same timeline with the guard ───────────────────────────");
    let guard_setup = GuardSetup {
        config,
        reservation,
        starter: guard,
    };
    let (with_guard, cluster) = run_once(&mut n, &scenario, clock, Some(guard_setup)).await?;
    let guard_url = cluster
        .guard
        .as_ref()
        .map(|g| format!("http://{}", g.addr()))
        .unwrap_or_default();
    let summary = DemoSummary {
        mechanism: opts.mechanism,
        without_guard,
        with_guard,
        guard_url,
        outage: outage(&scenario, clock),
    };

    n.line("");
    n.line("── Result ─────────────────────────────────────────────────────────────────");
    n.line(render_table(&summary));
    n.line(conclusion(&summary, revived_at(&scenario, SIDECAR)));

    let broken = broken_promises(&summary.with_guard);
    if !broken.is_empty() {
        cluster.stop().await;
        return Err(DemoError::Broken(broken.join("; ")));
    }
    if opts.serve {
        serve(&mut n, cluster, &summary.guard_url, guard).await?;
    } else {
        cluster.stop().await;
    }
    n.finish()?;
    Ok(summary)
}

/// What the guard must never do, violated in `stats` (empty when all is well).
fn broken_promises(stats: &RunStats) -> Vec<String> {
    let mut broken = Vec::new();
    if stats.unlabeled_pods_written_by_guard > 0 {
        broken.push(format!(
            "it wrote to {} pods without the opt-in label",
            stats.unlabeled_pods_written_by_guard
        ));
    }
    if stats.healthy_initializer_bypasses > 0 {
        broken.push(format!(
            "it removed {QUOTA}, whose owner was healthy, {} times",
            stats.healthy_initializer_bypasses
        ));
    }
    broken
}

// ---------------------------------------------------------------------------------------------
// Scenario
// ---------------------------------------------------------------------------------------------

/// Scenario durations, multiplied by the time scale.
#[derive(Debug, Clone, Copy)]
struct Clock {
    scale: f64,
}

impl Clock {
    /// `secs` scenario seconds, rounded to whole milliseconds (so configs print cleanly).
    fn d(self, secs: f64) -> Duration {
        Duration::from_millis((secs * self.scale * 1000.0).round() as u64)
    }

    fn text(self, secs: f64) -> String {
        seconds(self.d(secs))
    }
}

/// `1 pod`, `2 pods`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A duration as `1.5s`.
fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// Deadlines of (sidecar, quota). Legacy deadlines stay below the create timeout: a CREATE
/// that times out leaves a pod behind and the creator retries.
fn deadlines(mechanism: Mechanism) -> (f64, f64) {
    match mechanism {
        Mechanism::SchedulingGates => (2.0, 4.0),
        Mechanism::Initializers => (1.5, 1.5),
    }
}

/// The guard's embedded configuration, as an operator would write it.
fn config_yaml(mechanism: Mechanism, listen: SocketAddr, clock: Clock) -> String {
    let d = |secs: f64| humantime::format_duration(clock.d(secs)).to_string();
    let (sidecar, quota) = deadlines(mechanism);
    format!(
        "mechanism: {mechanism}\n\
         optIn:\n  label: {label}\n\
         defaults:\n  ownerDownGrace: {grace}\n\
         initializers:\n\
         \x20 - name: {SIDECAR}\n    deadline: {sidecar}\n    owner: {{ deployment: {OWNER_NAMESPACE}/{sidecar_owner} }}\n\
         \x20 - name: {QUOTA}\n    deadline: {quota}\n    owner: {{ lease: {OWNER_NAMESPACE}/{quota_owner} }}\n\
         pileup: {{ threshold: 3, action: alert }}\n\
         leaderElection: {{ enabled: false }}\n\
         listen: {listen}\n",
        mechanism = mechanism.as_str(),
        label = DEFAULT_OPT_IN_LABEL,
        grace = d(OWNER_DOWN_GRACE),
        sidecar = d(sidecar),
        quota = d(quota),
        sidecar_owner = dns_name(SIDECAR),
        quota_owner = dns_name(QUOTA),
    )
}

/// The demo's scenario for `mechanism`, every duration multiplied by the time scale.
fn scenario(mechanism: Mechanism, clock: Clock) -> Result<Scenario, DemoError> {
    let (text, file) = match mechanism {
        Mechanism::SchedulingGates => (GATES_SCENARIO, "config/scenarios/demo-gates.yaml"),
        Mechanism::Initializers => (
            INITIALIZERS_SCENARIO,
            "config/scenarios/demo-initializers.yaml",
        ),
    };
    Ok(Scenario::from_yaml_str(text, file)?.scaled(clock.scale))
}

/// The scenario's create timeout (legacy initializers), as the server applies it.
fn create_timeout(scenario: &Scenario) -> Duration {
    scenario.sim_options(SimOptions::default()).create_timeout
}

/// The sidecar owner's outage, unscaled: from its kill to its revival (or the end of the run).
fn outage(scenario: &Scenario, clock: Clock) -> Option<(f64, f64)> {
    let killed = scenario.steps().into_iter().find_map(|(at, step)| {
        matches!(&step, Step::Action(Action::Kill(t)) if t == SIDECAR).then_some(at)
    })?;
    let revived = revived_at(scenario, SIDECAR).unwrap_or(clock.d(RUN_LENGTH));
    Some((
        killed.as_secs_f64() / clock.scale,
        revived.as_secs_f64() / clock.scale,
    ))
}

/// When the scenario revives `target`, if it does.
fn revived_at(scenario: &Scenario, target: &str) -> Option<Duration> {
    scenario.steps().into_iter().find_map(|(at, step)| {
        matches!(&step, Step::Action(Action::Revive(t)) if t == target).then_some(at)
    })
}

/// One creator in words, e.g. `Job demo/job-a runs 2 pods (labeled …: opted in)`.
fn describe_creator(opts: &CreatorOptions) -> String {
    let what = match &opts.kind {
        CreatorKind::Job { parallelism, .. } => format!("runs {parallelism} pods"),
        CreatorKind::CronJob { period } => format!("starts one pod every {}", seconds(*period)),
        CreatorKind::ReplicaSet { replicas, .. } => format!("wants {replicas} pods"),
    };
    let label = match &opts.opt_in_label {
        Some(key) => format!("labeled {key}: opted in"),
        None => "no opt-in label: the guard must never touch them".to_string(),
    };
    format!(
        "{} {}/{} {what} ({label})",
        opts.kind.kind(),
        opts.namespace,
        opts.name
    )
}

/// A step as the intro lists it.
fn step_summary(scenario: &Scenario, step: &Step) -> String {
    match step {
        Step::StartCreator(i) => scenario.creators.get(*i).map_or_else(String::new, |c| {
            describe_creator(&scenario.creator_options(c))
        }),
        Step::Action(Action::Kill(t)) => format!("the {t} owner dies"),
        Step::Action(Action::Revive(t)) => format!("the {t} owner comes back"),
        Step::Action(other) => format!("{other:?}"),
    }
}

fn intro(n: &mut Narrator, scenario: &Scenario, clock: Clock, config: &str, listen: SocketAddr) {
    let mechanism = scenario.mechanism;
    let how = match mechanism {
        Mechanism::SchedulingGates => "scheduling gates (Kubernetes >= 1.27)",
        Mechanism::Initializers => "legacy pod initializers (Kubernetes 1.7-1.13)",
    };
    n.line(format_args!(
        "initguard demo: {how}, on a simulated API server at 127.0.0.1 (no real cluster)."
    ));
    n.line("");
    n.line(format_args!(
        "Every pod waits on two initializers: {SIDECAR} (owner: Deployment \
         {OWNER_NAMESPACE}/{}) and {QUOTA} (owner: Lease {OWNER_NAMESPACE}/{}).",
        dns_name(SIDECAR),
        dns_name(QUOTA)
    ));
    if mechanism == Mechanism::Initializers {
        n.line(format_args!(
            "The API server appends both to every new pod and blocks its CREATE until they are \
             removed or {} pass (then 504, pod kept).",
            seconds(create_timeout(scenario))
        ));
        n.line(
            "  A real API server waits ~30s; the demo compresses it to fit in a minute, and its \
             deadlines stay below it.",
        );
    } else {
        n.line(
            "Creators put both as scheduling gates; a gated pod stays Pending (SchedulingGated).",
        );
    }
    n.line("");
    n.line("The same timeline runs twice, first without the guard, then with it:");
    for (at, step) in scenario.steps() {
        let what = step_summary(scenario, &step);
        n.line(format_args!("  t={:<6} {what}", seconds(at)));
    }
    n.line(format_args!(
        "  t={:<6} end of the run; {QUOTA}'s owner stays healthy throughout",
        clock.text(RUN_LENGTH)
    ));
    n.line("");
    n.line("The guard runs with this configuration:");
    for line in config.lines() {
        n.line(format_args!("  {line}"));
    }
    n.line("");
    if listen.port() == 0 {
        n.line("During run 2 the guard serves /metrics and /status on a port printed then.");
    } else {
        n.line(format_args!(
            "During run 2 the guard serves http://{listen}/metrics and http://{listen}/status."
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------------------------------

/// What the second run needs to start the guard.
struct GuardSetup<'a> {
    config: Config,
    /// The guard's port, held until the guard binds it.
    reservation: Option<TcpListener>,
    starter: &'a dyn GuardStarter,
}

/// Everything one run started.
struct Cluster {
    sim: Sim,
    scenario: Scenario,
    /// Each creator of the scenario with its controller key, resolved once.
    creators: Vec<(String, CreatorOptions)>,
    /// The server's create timeout (legacy initializers).
    create_timeout: Duration,
    controllers: ScenarioControllers,
    guard: Option<Box<dyn RunningGuard>>,
}

impl Cluster {
    /// Stop the guard first (so it sees no teardown), then the controllers, then the server.
    async fn stop(self) {
        if let Some(guard) = self.guard {
            guard.shutdown().await;
        }
        self.controllers.stop().await;
        self.sim.shutdown().await;
    }
}

/// Binds the preferred guard port (or a free one) to keep it until the guard starts.
fn reserve_listen_port() -> (Option<TcpListener>, SocketAddr) {
    let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    for addr in [PREFERRED_LISTEN, any] {
        if let Ok(listener) = TcpListener::bind(addr)
            && let Ok(bound) = listener.local_addr()
        {
            return (Some(listener), bound);
        }
    }
    // Nothing could be bound: let the guard pick a port itself.
    (None, any)
}

async fn run_once(
    n: &mut Narrator,
    scenario: &Scenario,
    clock: Clock,
    guard: Option<GuardSetup<'_>>,
) -> Result<(RunStats, Cluster), DemoError> {
    let sim = Sim::start(scenario.sim_options(SimOptions::default())).await?;
    let controllers = match ScenarioControllers::start(&sim, scenario).await {
        Ok(c) => c,
        Err(e) => {
            sim.shutdown().await;
            return Err(e.into());
        }
    };
    let mechanism = scenario.mechanism;
    let mut cluster = Cluster {
        sim,
        scenario: scenario.clone(),
        creators: scenario
            .creators
            .iter()
            .map(|c| {
                let opts = scenario.creator_options(c);
                (opts.controller_key(), opts)
            })
            .collect(),
        create_timeout: create_timeout(scenario),
        controllers,
        guard: None,
    };
    let result = async {
        wait_for_owners(&cluster.sim).await?;
        if let Some(setup) = guard {
            let guard = start_guard(n, &cluster.sim, setup).await?;
            cluster.guard = Some(guard);
        }
        drive(n, &mut cluster, mechanism, clock).await
    }
    .await;
    match result {
        Ok(stats) => Ok((stats, cluster)),
        Err(e) => {
            cluster.stop().await;
            Err(e)
        }
    }
}

/// Waits until both owners have published their Deployment status and Lease, so the guard
/// observes them healthy from the start.
async fn wait_for_owners(sim: &Sim) -> Result<(), DemoError> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        let missing: Vec<String> = [SIDECAR, QUOTA]
            .iter()
            .flat_map(|initializer| {
                let name = dns_name(initializer);
                let available = sim
                    .get_object("deployments", Some(OWNER_NAMESPACE), &name)
                    .and_then(|d| d.pointer("/status/availableReplicas")?.as_i64())
                    .unwrap_or(0);
                let lease = sim
                    .get_object("leases", Some(OWNER_NAMESPACE), &name)
                    .is_some_and(|l| l.pointer("/spec/renewTime").is_some());
                let mut missing = Vec::new();
                if available < 1 {
                    missing.push(format!("deployment {OWNER_NAMESPACE}/{name}"));
                }
                if !lease {
                    missing.push(format!("lease {OWNER_NAMESPACE}/{name}"));
                }
                missing
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DemoError::NotReady {
                what: "the simulated owners",
                waited: STARTUP_TIMEOUT,
                detail: format!("not published yet: {}", missing.join(", ")),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start_guard(
    n: &mut Narrator,
    sim: &Sim,
    setup: GuardSetup<'_>,
) -> Result<Box<dyn RunningGuard>, DemoError> {
    let mut config = setup.config;
    let announced = config.listen;
    drop(setup.reservation);
    let kube = sim.kube_config(GUARD_USER);
    let guard = match setup.starter.start(kube.clone(), config.clone()).await {
        Ok(guard) => guard,
        Err(StartError::Listen(_)) => {
            // Taken in the instant between releasing the reservation and binding it.
            config.listen = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
            setup.starter.start(kube, config).await?
        }
        Err(e) => return Err(e.into()),
    };
    if guard.addr() != announced {
        n.line(format_args!(
            "(the guard serves http://{}/metrics and /status, not {announced} as announced)",
            guard.addr()
        ));
    }
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        // The narration starts once every owner has been read at least once.
        let missing = guard.not_ready();
        if missing.is_empty() {
            return Ok(guard);
        }
        if Instant::now() >= deadline {
            guard.shutdown().await;
            return Err(DemoError::NotReady {
                what: "the guard",
                waited: STARTUP_TIMEOUT,
                detail: missing.join("; "),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Carries out the timeline, narrating, and measures the run.
async fn drive(
    n: &mut Narrator,
    cluster: &mut Cluster,
    mechanism: Mechanism,
    clock: Clock,
) -> Result<RunStats, DemoError> {
    // Start on a whole second: creationTimestamp keeps whole seconds, so work started on the
    // timeline's whole seconds then has exact timestamps and the narrated waits read naturally.
    let into_second = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    tokio::time::sleep(Duration::from_nanos(u64::from(
        1_000_000_000u32.saturating_sub(into_second),
    )))
    .await;
    let wall_start = SystemTime::now();
    let start = Instant::now();
    let steps = cluster.scenario.steps();
    let mut next_step = 0;
    let mut observer = Observer::new(mechanism, wall_start, clock);
    let mut next_sample = clock.d(SAMPLE_EVERY);
    let end = clock.d(RUN_LENGTH);
    let mut ticker = tokio::time::interval(clock.d(TICK).max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let elapsed = start.elapsed();
        let mut lines: Vec<(Duration, String)> = Vec::new();
        while let Some((at, step)) = steps.get(next_step)
            && *at <= elapsed
        {
            next_step += 1;
            let line = apply(cluster, step, mechanism, &mut observer).await?;
            // Stamped on the wall clock, like the simulator's changes it is sorted with.
            lines.push((observer.since_start(SystemTime::now()), line));
        }
        lines.extend(observer.observe(&cluster.sim));
        if let Some(guard) = &cluster.guard {
            lines.extend(observer.guard_view(guard.as_ref()));
        }
        lines.extend(observer.creator_timeouts(cluster));
        let pile = pile_report(&cluster.sim, mechanism);
        observer.sample_pile(&pile, elapsed);
        if elapsed >= next_sample {
            next_sample += clock.d(SAMPLE_EVERY);
            let at = observer.since_start(SystemTime::now());
            lines.push((at, observer.sample_line(&pile)));
        }
        lines.sort_by_key(|(t, _)| *t);
        for (t, line) in lines {
            n.at(t, line);
        }
        if elapsed >= end {
            break;
        }
    }
    // Changes committed since the last tick still count.
    for (t, line) in observer.observe(&cluster.sim) {
        n.at(t, line);
    }
    let timeouts = cluster
        .controllers
        .creators
        .values()
        .map(|c| c.stats().create_timeouts())
        .sum();
    let stats = observer.stats(cluster.guard.is_some(), timeouts, SystemTime::now());
    n.at(
        observer.since_start(SystemTime::now()),
        format_args!(
            "end of run: {} created, {} still waiting",
            count(stats.pods_created, "pod"),
            stats.still_waiting
        ),
    );
    Ok(stats)
}

/// Carries out one step of the scenario; returns its narration.
async fn apply(
    cluster: &mut Cluster,
    step: &Step,
    mechanism: Mechanism,
    observer: &mut Observer,
) -> Result<String, DemoError> {
    cluster
        .controllers
        .step(&cluster.sim, &cluster.scenario, step)
        .await
        .map_err(DemoError::Step)?;
    Ok(match step {
        Step::Action(Action::Kill(target)) if target == SIDECAR => {
            let consequence = match mechanism {
                Mechanism::SchedulingGates => {
                    "new pods keep its gate and stay Pending (SchedulingGated)"
                }
                Mechanism::Initializers => {
                    "new pods stay uninitialized (hidden from ordinary clients) and their CREATE \
                     blocks until it times out"
                }
            };
            format!(
                "{SIDECAR} owner killed: deployment {OWNER_NAMESPACE}/{} → 0 available, lease \
                 no longer renewed\n{consequence}",
                dns_name(SIDECAR)
            )
        }
        Step::Action(Action::Revive(target)) if target == SIDECAR => {
            observer.revived = true;
            format!(
                "{SIDECAR} owner revived: it lists every pod again and works through its backlog"
            )
        }
        other => step_summary(&cluster.scenario, other),
    })
}

// ---------------------------------------------------------------------------------------------
// Observation
// ---------------------------------------------------------------------------------------------

/// One pod as seen through the simulator's object history.
#[derive(Debug)]
struct PodTrack {
    /// `namespace/name`.
    key: String,
    /// Where the guard's wait clock starts: `creationTimestamp` (whole seconds, as Kubernetes
    /// keeps it) for scheduling gates; the precise creation for legacy initializers, whose clock
    /// starts when the guard first sees the initializer at the head of the list.
    guard_clock_start: SystemTime,
    opted_in: bool,
    pending: Vec<String>,
    initialized_at: Option<SystemTime>,
    deleted: bool,
    bypassed: bool,
    guard_wrote: bool,
}

/// A bypass found in the object history.
#[derive(Debug)]
struct BypassSeen {
    at: SystemTime,
    pod: String,
    initializer: String,
    reason: String,
    /// The wait as the guard measures it (see [`PodTrack::guard_clock_start`]).
    waited: Duration,
    opted_in: bool,
}

/// Follows the simulator's object history and the guard's owner view, turning them into
/// narration and numbers.
struct Observer {
    mechanism: Mechanism,
    wall_start: SystemTime,
    clock: Clock,
    /// The user the sidecar owner writes as (its removals after the revival are counted).
    sidecar_owner: String,
    last_rv: u64,
    /// When the last of those removals was committed.
    last_catch_up: SystemTime,
    pods: HashMap<String, PodTrack>,
    bypasses: Vec<BypassSeen>,
    largest_pile: usize,
    largest_pile_controller: Option<String>,
    /// (timeline seconds, pods waiting), every tick.
    waiting_over_time: Vec<(f64, usize)>,
    /// Whether the sidecar owner has been revived.
    revived: bool,
    /// Sidecar removals by its owner since the revival.
    caught_up_removals: usize,
    caught_up_reported: bool,
    /// Last owner state the guard reported for the sidecar initializer ("up", "down").
    guard_owner_view: Option<&'static str>,
    /// Creators whose first CREATE timeout was narrated.
    timeouts_reported: HashSet<String>,
}

impl Observer {
    fn new(mechanism: Mechanism, wall_start: SystemTime, clock: Clock) -> Self {
        Observer {
            mechanism,
            wall_start,
            clock,
            sidecar_owner: owner_user(&GateOwnerOptions::new(SIDECAR, mechanism)),
            last_rv: 0,
            last_catch_up: wall_start,
            pods: HashMap::new(),
            bypasses: Vec::new(),
            largest_pile: 0,
            largest_pile_controller: None,
            waiting_over_time: Vec::new(),
            revived: false,
            caught_up_removals: 0,
            caught_up_reported: false,
            guard_owner_view: None,
            timeouts_reported: HashSet::new(),
        }
    }

    fn since_start(&self, t: SystemTime) -> Duration {
        t.duration_since(self.wall_start).unwrap_or_default()
    }

    /// Processes pod changes committed since the last call.
    fn observe(&mut self, sim: &Sim) -> Vec<(Duration, String)> {
        let mut bypass_lines: Vec<(Duration, String)> = Vec::new();
        let mut other_lines: Vec<(Duration, String)> = Vec::new();
        let mut new_bypasses = 0usize;
        let wall_start = self.wall_start;
        let since = |t: SystemTime| t.duration_since(wall_start).unwrap_or_default();
        for change in sim.object_history() {
            if change.resource_version <= self.last_rv {
                continue;
            }
            self.last_rv = change.resource_version;
            if change.resource != "pods" {
                continue;
            }
            let key = format!(
                "{}/{}",
                change.namespace.as_deref().unwrap_or_default(),
                change.name
            );
            match change.change_type {
                ChangeType::Added => {
                    let Some(after) = &change.after else { continue };
                    let pending = initguard_core::bypass::pending_names(self.mechanism, after);
                    let guard_clock_start = match self.mechanism {
                        Mechanism::SchedulingGates => creation_timestamp(after),
                        Mechanism::Initializers => None,
                    };
                    let track = PodTrack {
                        key,
                        guard_clock_start: guard_clock_start.unwrap_or(change.time),
                        opted_in: has_label(after, DEFAULT_OPT_IN_LABEL),
                        initialized_at: pending.is_empty().then_some(change.time),
                        pending,
                        deleted: false,
                        bypassed: false,
                        guard_wrote: false,
                    };
                    self.pods.insert(change.uid.clone(), track);
                }
                ChangeType::Modified => {
                    let Some(after) = &change.after else { continue };
                    let Some(track) = self.pods.get_mut(&change.uid) else {
                        continue;
                    };
                    track.pending = initguard_core::bypass::pending_names(self.mechanism, after);
                    if track.pending.is_empty() && track.initialized_at.is_none() {
                        track.initialized_at = Some(change.time);
                    }
                    let removed = change.removed_initializers();
                    if change.user == GUARD_USER {
                        track.guard_wrote = true;
                        for initializer in removed {
                            track.bypassed = true;
                            let seen = BypassSeen {
                                at: change.time,
                                pod: track.key.clone(),
                                reason: bypass_reason(after, &initializer),
                                initializer,
                                // As the guard measures it, so a deadline reads as configured.
                                waited: change
                                    .time
                                    .duration_since(track.guard_clock_start)
                                    .unwrap_or_default(),
                                opted_in: track.opted_in,
                            };
                            new_bypasses += 1;
                            if bypass_lines.len() < BYPASS_LINES_PER_TICK {
                                bypass_lines.push((since(seen.at), seen.narrate()));
                            }
                            self.bypasses.push(seen);
                        }
                        if !track.opted_in {
                            other_lines.push((
                                since(change.time),
                                format!(
                                    "guard: WROTE TO {}, a pod without the opt-in label",
                                    track.key
                                ),
                            ));
                        }
                    } else if self.revived
                        && change.user == self.sidecar_owner
                        && removed.iter().any(|r| r == SIDECAR)
                    {
                        self.caught_up_removals += 1;
                        self.last_catch_up = change.time;
                    }
                }
                ChangeType::Deleted => {
                    if let Some(track) = self.pods.get_mut(&change.uid) {
                        track.deleted = true;
                    }
                }
            }
        }
        if new_bypasses > bypass_lines.len()
            && let Some((t, _)) = bypass_lines.last()
        {
            let t = *t;
            bypass_lines.truncate(BYPASS_LINES_PER_TICK - 1);
            bypass_lines.push((
                t,
                format!(
                    "guard: … and {} more bypasses",
                    new_bypasses - bypass_lines.len()
                ),
            ));
        }
        if self.revived && !self.caught_up_reported && self.caught_up_removals > 0 {
            let still = self
                .pods
                .values()
                .filter(|p| !p.deleted && p.pending.iter().any(|i| i == SIDECAR))
                .count();
            if still == 0 {
                self.caught_up_reported = true;
                other_lines.push((
                    self.since_start(self.last_catch_up),
                    format!(
                        "{SIDECAR} owner caught up: removed its initializer from {} that were \
                         waiting for it",
                        count(self.caught_up_removals, "pod")
                    ),
                ));
            }
        }
        bypass_lines.extend(other_lines);
        bypass_lines
    }

    /// Narrates changes in the guard's view of the sidecar owner.
    fn guard_view(&mut self, guard: &dyn RunningGuard) -> Option<(Duration, String)> {
        let (view, since) = match guard.owner_state(SIDECAR) {
            OwnerState::Unknown => return None,
            OwnerState::Up { since } => ("up", since),
            OwnerState::Down { since } => ("down", since),
        };
        let previous = self.guard_owner_view.replace(view);
        if previous.is_none() || previous == Some(view) {
            return None;
        }
        let at = self.since_start(since);
        Some(if view == "down" {
            (
                at,
                format!(
                    "guard: sees the {SIDECAR} owner down (0 available replicas)\nopted-in pods \
                     waiting on it are released at their {} deadline, or at once when the owner \
                     has been down for {} (ownerDownGrace)",
                    self.clock.text(deadlines(self.mechanism).0),
                    self.clock.text(OWNER_DOWN_GRACE)
                ),
            )
        } else {
            (
                at,
                format!("guard: sees the {SIDECAR} owner up again and leaves the work to it"),
            )
        })
    }

    /// Narrates each creator's first CREATE timeout (legacy initializers).
    fn creator_timeouts(&mut self, cluster: &Cluster) -> Vec<(Duration, String)> {
        let now = self.since_start(SystemTime::now());
        let mut lines = Vec::new();
        for (key, opts) in &cluster.creators {
            let Some(handle) = cluster.controllers.creators.get(key) else {
                continue;
            };
            if handle.stats().create_timeouts() == 0
                || !self.timeouts_reported.insert(handle.name().to_string())
            {
                continue;
            }
            let next = match opts.kind {
                CreatorKind::Job { .. } => "the Job controller cannot see it and creates another",
                CreatorKind::CronJob { .. } => "the next scheduled run adds one more anyway",
                CreatorKind::ReplicaSet { .. } => {
                    "the ReplicaSet waits on its expectations before creating again"
                }
            };
            lines.push((
                now,
                format!(
                    "API server: CREATE of a {} {}/{} pod timed out after {} (504)\nthe \
                     pod stays stored, uninitialized and hidden; {next}",
                    opts.kind.kind(),
                    opts.namespace,
                    opts.name,
                    seconds(cluster.create_timeout)
                ),
            ));
        }
        lines
    }

    fn sample_pile(&mut self, pile: &crate::controllers::PileReport, elapsed: Duration) {
        // On the scenario's own timeline, whatever the time scale.
        let at = elapsed.as_secs_f64() / self.clock.scale;
        self.waiting_over_time.push((at, pile.stored_waiting_pods));
        if let Some((controller, size)) = largest(pile)
            && size > self.largest_pile
        {
            self.largest_pile = size;
            self.largest_pile_controller = Some(controller.to_string());
        }
    }

    fn sample_line(&self, pile: &crate::controllers::PileReport) -> String {
        let mut line = match largest(pile) {
            Some((controller, size)) => format!(
                "sample: {} waiting, largest pile {size} ({})",
                count(pile.stored_waiting_pods, "pod"),
                controller_display(controller)
            ),
            None => "sample: no pods waiting".to_string(),
        };
        let _ = write!(line, ", bypasses so far {}", self.bypasses.len());
        line
    }

    fn stats(&self, with_guard: bool, create_timeouts: u64, now: SystemTime) -> RunStats {
        let mut stats = RunStats {
            with_guard,
            create_timeouts,
            largest_pile: self.largest_pile,
            largest_pile_controller: self.largest_pile_controller.clone(),
            waiting_over_time: self.waiting_over_time.clone(),
            ..RunStats::default()
        };
        for pod in self.pods.values() {
            stats.pods_created += 1;
            if !pod.opted_in {
                stats.unlabeled_pods += 1;
                if pod.guard_wrote {
                    stats.unlabeled_pods_written_by_guard += 1;
                }
            }
            if pod.deleted {
                continue;
            }
            match pod.initialized_at {
                Some(_) if pod.bypassed => stats.initialized_after_bypass += 1,
                Some(_) => stats.initialized_by_owners += 1,
                None => stats.still_waiting += 1,
            }
            let waited = pod
                .initialized_at
                .unwrap_or(now)
                .duration_since(pod.guard_clock_start)
                .unwrap_or_default();
            let longest = if pod.opted_in {
                &mut stats.longest_wait_opted_in
            } else {
                &mut stats.longest_wait_unlabeled
            };
            *longest = (*longest).max(waited);
        }
        for b in &self.bypasses {
            *stats.bypasses.entry(b.reason.clone()).or_default() += 1;
            if b.initializer == QUOTA {
                stats.healthy_initializer_bypasses += 1;
            }
        }
        stats
    }
}

impl BypassSeen {
    fn narrate(&self) -> String {
        let note = if self.opted_in {
            ""
        } else {
            " — A POD WITHOUT THE OPT-IN LABEL"
        };
        format!(
            "guard: bypassed {} on {} ({} after {}){note}",
            self.initializer,
            self.pod,
            self.reason,
            seconds(self.waited)
        )
    }
}

/// The controller with the most waiting pods (the first by name on a tie).
fn largest(pile: &crate::controllers::PileReport) -> Option<(&str, usize)> {
    pile.per_controller
        .iter()
        .fold(None, |best: Option<(&str, usize)>, (k, v)| match best {
            Some((_, size)) if size >= *v => best,
            _ => Some((k.as_str(), *v)),
        })
}

/// `Kind/namespace/name` → `Kind namespace/name`.
fn controller_display(key: &str) -> String {
    key.replacen('/', " ", 1)
}

/// `metadata.creationTimestamp` of a raw pod.
fn creation_timestamp(pod: &Value) -> Option<SystemTime> {
    let text = pod.get("metadata")?.get("creationTimestamp")?.as_str()?;
    let at: jiff::Timestamp = text.parse().ok()?;
    Some(SystemTime::from(at))
}

fn has_label(pod: &Value, key: &str) -> bool {
    pod.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.get(key))
        .is_some()
}

/// The reason the guard recorded for removing `initializer`, from the bypass annotation.
fn bypass_reason(pod: &Value, initializer: &str) -> String {
    pod.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(BYPASSED_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|text| {
            parse_records(text)
                .into_iter()
                .rev()
                .find(|r| r.initializer == initializer)
        })
        .map_or_else(|| "unrecorded".to_string(), |r| r.reason)
}

// ---------------------------------------------------------------------------------------------
// Result
// ---------------------------------------------------------------------------------------------

const LABEL_WIDTH: usize = 46;
const COLUMN_WIDTH: usize = 22;

/// The side-by-side table: one row per measure, columns without and with the guard.
pub fn render_table(summary: &DemoSummary) -> String {
    let (a, b) = (&summary.without_guard, &summary.with_guard);
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&RunStats) -> String| {
        rows.push((label.to_string(), f(a), f(b)));
    };
    row("pods created", &|s| s.pods_created.to_string());
    row("initialized by their owners alone", &|s| {
        s.initialized_by_owners.to_string()
    });
    row("initialized after a guard bypass", &|s| {
        s.initialized_after_bypass.to_string()
    });
    row("guard bypasses", &|s| s.total_bypasses().to_string());
    for reason in [Reason::OwnerDown, Reason::Deadline, Reason::Pileup] {
        row(&format!("  reason {}", reason.as_str()), &|s| {
            s.bypasses_for(reason).to_string()
        });
    }
    row(&format!("bypasses of the healthy {QUOTA}"), &|s| {
        s.healthy_initializer_bypasses.to_string()
    });
    row("still waiting at the end", &|s| s.still_waiting.to_string());
    row("largest pile (waiting pods of one controller)", &|s| {
        s.largest_pile.to_string()
    });
    row("  held by", &|s| {
        s.largest_pile_controller
            .as_deref()
            .map_or_else(|| "-".to_string(), controller_display)
    });
    row("longest wait, opted-in pods", &|s| {
        seconds(s.longest_wait_opted_in)
    });
    row("longest wait, unlabeled pods", &|s| {
        seconds(s.longest_wait_unlabeled)
    });
    if summary.mechanism == Mechanism::Initializers {
        row("pod CREATEs timed out (504)", &|s| {
            s.create_timeouts.to_string()
        });
    }
    row("unlabeled pods written by the guard", &|s| {
        s.unlabeled_pods_written_by_guard.to_string()
    });

    let mut out = format!(
        "{:<LABEL_WIDTH$}{:>COLUMN_WIDTH$}{:>COLUMN_WIDTH$}\n",
        "", "without guard", "with guard"
    );
    for (label, without, with) in rows {
        let _ = writeln!(
            out,
            "{label:<LABEL_WIDTH$}{without:>COLUMN_WIDTH$}{with:>COLUMN_WIDTH$}"
        );
    }
    out
}

/// Three lines saying what the table shows.
fn conclusion(summary: &DemoSummary, revived_at: Option<Duration>) -> String {
    let (a, b) = (&summary.without_guard, &summary.with_guard);
    let held = |s: &RunStats| {
        s.largest_pile_controller
            .as_deref()
            .map_or_else(|| "no controller".to_string(), controller_display)
    };
    let mut out = format!(
        "Without the guard: {} of {} piled up and opted-in pods waited up to {}, only because \
         the owner came back at t={}; had it stayed dead, they would wait forever.",
        count(a.largest_pile, "pod"),
        held(a),
        seconds(a.longest_wait_opted_in),
        revived_at.map_or_else(|| "?".to_string(), seconds)
    );
    if summary.mechanism == Mechanism::Initializers {
        let _ = write!(
            out,
            " {} timed out, each leaving a hidden pod behind.",
            count(a.create_timeouts as usize, "pod CREATE")
        );
    }
    let reasons: Vec<String> = b
        .bypasses
        .iter()
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect();
    let reasons = if reasons.is_empty() {
        "none".to_string()
    } else {
        reasons.join(", ")
    };
    let _ = write!(
        out,
        "\nWith the guard: opted-in pods waited at most {} and the largest pile was {} ({}); it \
         removed only {SIDECAR} (bypasses: {reasons}), never the healthy {QUOTA}.",
        seconds(b.longest_wait_opted_in),
        b.largest_pile,
        held(b),
    );
    let unlabeled = count(b.unlabeled_pods, "unlabeled pod");
    if b.unlabeled_pods_written_by_guard == 0 {
        let _ = write!(
            out,
            "\nThe guard wrote to none of the {unlabeled}: they waited for their owner as before \
             ({} without, {} with the guard).",
            seconds(a.longest_wait_unlabeled),
            seconds(b.longest_wait_unlabeled),
        );
    } else {
        let _ = write!(
            out,
            "\nBUT the guard wrote to {} of the {unlabeled}: that is a bug.",
            b.unlabeled_pods_written_by_guard
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// --serve
// ---------------------------------------------------------------------------------------------

async fn serve(
    n: &mut Narrator,
    cluster: Cluster,
    guard_url: &str,
    starter: &dyn GuardStarter,
) -> Result<(), DemoError> {
    let dir = std::env::temp_dir().join(format!("initguard-demo-{}", std::process::id()));
    if let Err(source) = std::fs::create_dir_all(&dir) {
        cluster.stop().await;
        return Err(DemoError::TempDir { path: dir, source });
    }
    let kubeconfig = dir.join("kubeconfig");
    if let Err(e) = cluster.sim.write_kubeconfig(&kubeconfig, KUBECONFIG_USER) {
        cluster.stop().await;
        return Err(e.into());
    }
    let k = kubeconfig.display();
    n.line("");
    n.line("── Serving until Ctrl-C ───────────────────────────────────────────────────");
    n.line(format_args!(
        "The simulated cluster of run 2 keeps running with the guard ({} at {}):",
        cluster.sim.mechanism().as_str(),
        cluster.sim.url()
    ));
    // kubectl's custom-columns paths need the dots inside label and annotation keys escaped.
    let label = DEFAULT_OPT_IN_LABEL.replace('.', "\\.");
    let annotation = BYPASSED_ANNOTATION.replace('.', "\\.");
    n.line(format_args!("  kubectl --kubeconfig {k} get pods -A"));
    n.line(format_args!(
        "  kubectl --kubeconfig {k} get pods -n {NAMESPACE} -o custom-columns='NAME:.metadata.name,\
         PHASE:.status.phase,OPT-IN:.metadata.labels.{label},BYPASSED:.metadata.annotations.{annotation}'"
    ));
    n.line(format_args!(
        "  curl -s {guard_url}/metrics | grep ^initguard_"
    ));
    n.line(format_args!("  curl -s {guard_url}/status"));
    if cluster.sim.mechanism() == Mechanism::Initializers {
        n.line("  (kubectl lists only initialized pods: uninitialized ones are hidden, as on a 1.7 API server)");
    }
    starter.stop_signal().await;
    n.line("Stopping.");
    cluster.stop().await;
    // Best effort: the kubeconfig only pointed at the server that just stopped.
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

/// Writes the narration; the first write error is kept and reported at the end, so a closed
/// stdout does not abort the scenario half-way.
struct Narrator {
    out: Box<dyn Write + Send>,
    error: Option<std::io::Error>,
}

impl Narrator {
    fn new(out: Box<dyn Write + Send>) -> Self {
        Narrator { out, error: None }
    }

    fn line(&mut self, text: impl Display) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = writeln!(self.out, "{text}").and_then(|()| self.out.flush()) {
            self.error = Some(e);
        }
    }

    /// A line stamped with the time since the start of the run.
    fn at(&mut self, t: Duration, text: impl Display) {
        self.line(Stamped(t, text));
    }

    fn finish(self) -> Result<(), DemoError> {
        match self.error {
            Some(e) => Err(DemoError::Output(e)),
            None => Ok(()),
        }
    }
}

struct Stamped<T>(Duration, T);

/// `[ 5.0s] text`; further lines of the text are indented under its first.
impl<T: Display> Display for Stamped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.1.to_string();
        let mut lines = text.lines();
        write!(
            f,
            "[{:>4.1}s] {}",
            self.0.as_secs_f64(),
            lines.next().unwrap_or_default()
        )?;
        for line in lines {
            write!(f, "\n{:8}{line}", "")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::PileReport;
    use serde_json::json;

    #[test]
    fn embedded_config_is_valid_and_keeps_the_story_true_at_every_scale() {
        for mechanism in [Mechanism::SchedulingGates, Mechanism::Initializers] {
            for scale in [0.05, 0.5, 1.0, 10.0] {
                let clock = Clock { scale };
                let text = config_yaml(mechanism, PREFERRED_LISTEN, clock);
                let config = Config::from_yaml_with(&text, "demo", &NoFiles).unwrap();
                assert!(config.warnings().is_empty(), "{:?}", config.warnings());
                assert_eq!(config.mechanism, mechanism);
                assert!(!config.leader_election.enabled);
                let grace = clock.d(OWNER_DOWN_GRACE);
                let sidecar = config.initializer(SIDECAR).unwrap();
                assert_eq!(sidecar.owner_down_grace, grace);
                // The first pods of the outage reach their deadline before the owner counts as
                // down, so both reasons appear.
                assert!(sidecar.deadline < grace, "{text}");
                if mechanism == Mechanism::Initializers {
                    for i in &config.initializers {
                        let timeout = create_timeout(&scenario(mechanism, clock).unwrap());
                        assert!(i.deadline < timeout, "{text}");
                    }
                }
            }
        }
    }

    #[test]
    fn bypass_reason_is_the_latest_record_of_that_initializer() {
        let pod = json!({ "metadata": { "annotations": { BYPASSED_ANNOTATION:
            "a.example.com=pileup@2026-01-01T00:00:00Z,\
             sidecar.example.com=deadline@2026-01-01T00:00:01Z,\
             sidecar.example.com=owner_down@2026-01-01T00:00:02Z" } } });
        assert_eq!(bypass_reason(&pod, SIDECAR), "owner_down");
        assert_eq!(bypass_reason(&pod, "a.example.com"), "pileup");
        assert_eq!(bypass_reason(&pod, QUOTA), "unrecorded");
        assert_eq!(bypass_reason(&json!({}), SIDECAR), "unrecorded");
    }

    #[test]
    fn creation_timestamp_parses_whole_seconds() {
        let pod = json!({ "metadata": { "creationTimestamp": "1970-01-01T00:01:40Z" } });
        assert_eq!(
            creation_timestamp(&pod),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(100))
        );
        assert_eq!(creation_timestamp(&json!({ "metadata": {} })), None);
    }

    #[test]
    fn stamped_lines_indent_their_continuations() {
        let text = Stamped(Duration::from_millis(5040), "first\nsecond").to_string();
        assert_eq!(text, "[ 5.0s] first\n        second");
        let text = Stamped(Duration::from_millis(14_000), "one").to_string();
        assert_eq!(text, "[14.0s] one");
    }

    #[test]
    fn largest_pile_prefers_the_first_controller_on_a_tie() {
        let pile = PileReport {
            per_controller: BTreeMap::from([
                ("CronJob/demo/b".to_string(), 2),
                ("Job/demo/a".to_string(), 2),
                ("Job/demo/c".to_string(), 1),
            ]),
            ..PileReport::default()
        };
        assert_eq!(largest(&pile), Some(("CronJob/demo/b", 2)));
        assert_eq!(largest(&PileReport::default()), None);
        assert_eq!(controller_display("CronJob/demo/b"), "CronJob demo/b");
    }

    #[test]
    fn the_scenarios_put_the_outage_inside_the_run() {
        for mechanism in [Mechanism::SchedulingGates, Mechanism::Initializers] {
            let scenario = scenario(mechanism, Clock { scale: 1.0 }).unwrap();
            assert_eq!(scenario.mechanism, mechanism);
            let steps = scenario.steps();
            let kill = steps
                .iter()
                .find_map(|(at, s)| {
                    matches!(s, Step::Action(Action::Kill(t)) if t == SIDECAR).then_some(*at)
                })
                .unwrap();
            let revive = revived_at(&scenario, SIDECAR).unwrap();
            let run = Duration::from_secs_f64(RUN_LENGTH);
            assert!(Duration::ZERO < kill && kill < revive && revive < run);
            // Some opted-in and some unlabeled work starts while the owner is dead.
            let during = |opted_in: bool| {
                scenario.creators.iter().any(|c| {
                    c.opt_in == opted_in && c.start_at.is_some_and(|at| kill < at && at < revive)
                })
            };
            assert!(during(true) && during(false));
            // Every creator starts on the narrated timeline, none before it.
            assert!(scenario.creators.iter().all(|c| c.start_at.is_some()));
        }
    }

    #[test]
    fn table_has_a_timeout_row_only_for_legacy_initializers() {
        let stats = RunStats {
            bypasses: BTreeMap::from([("owner_down".to_string(), 3), ("deadline".to_string(), 1)]),
            largest_pile: 7,
            largest_pile_controller: Some("Job/demo/job-b".to_string()),
            ..RunStats::default()
        };
        let mut summary = DemoSummary {
            mechanism: Mechanism::SchedulingGates,
            without_guard: RunStats::default(),
            with_guard: stats,
            guard_url: String::new(),
            outage: None,
        };
        let table = render_table(&summary);
        let row = |label: &str| {
            table
                .lines()
                .find(|l| l.starts_with(label))
                .map(|l| l.split_whitespace().rev().take(2).collect::<Vec<_>>())
        };
        assert_eq!(row("guard bypasses"), Some(vec!["4", "0"]));
        assert_eq!(row("  reason deadline"), Some(vec!["1", "0"]));
        assert_eq!(row("largest pile"), Some(vec!["7", "0"]));
        assert!(table.contains("Job demo/job-b"));
        assert_eq!(row("pod CREATEs timed out"), None);
        summary.mechanism = Mechanism::Initializers;
        assert!(render_table(&summary).contains("pod CREATEs timed out (504)"));
    }
}
