//! What the guard saves and what it costs, on the simulated API server (see benches/README.md).
//!
//! 1. Pileup: a dead initializer owner with and without the guard, both mechanisms.
//! 2. Reaction latency: thousands of pods whose deadline expires, or whose owner goes down, at
//!    the same instant.
//! 3. Cost at scale: `initguard run` as a child process against 50,000 pods with churn: RSS,
//!    CPU, time to ready, API requests by verb, idle traffic.
//!
//! Prints Markdown on stdout (progress on stderr). Usage:
//! `cargo bench --bench guard -- [--quick] [--only pileup,latency,cost] [--pileup-seconds N] …`

use initguard_sim::SimClients as _;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use futures::{TryStreamExt, stream};
use initguard::config::{DEFAULT_OPT_IN_LABEL, Mechanism};
use initguard::guard::Guard;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_sim::{ChangeType, ObjectChange, Sim, SimOptions};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The user the guard talks to the simulated API server as.
const GUARD_USER: &str = "system:serviceaccount:kube-system:initguard";
/// The user that seeds pods and flips owner Deployments.
const ADMIN: &str = "admin";
/// Namespace of every benchmark workload.
const NS: &str = "bench";
/// Concurrent CREATEs while seeding pods.
const SEED_CONCURRENCY: usize = 32;

/// Warnings logged by in-process guards, and how many of them were "actuator queue full".
static WARNINGS: AtomicU64 = AtomicU64::new(0);
static QUEUE_FULL: AtomicU64 = AtomicU64::new(0);

/// Counts the WARN lines the in-process guards log instead of printing them.
struct WarningCounter;

impl std::io::Write for WarningCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let lines = text.matches('\n').count().max(1) as u64;
        WARNINGS.fetch_add(lines, Ordering::Relaxed);
        QUEUE_FULL.fetch_add(
            text.matches("actuator queue full").count() as u64,
            Ordering::Relaxed,
        );
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    Pileup,
    Latency,
    Cost,
}

#[derive(Debug, Clone)]
struct Args {
    only: BTreeSet<Scenario>,
    pileup_seconds: u64,
    recovery_seconds: u64,
    controllers: usize,
    latency_pods: Vec<usize>,
    cost_pods: usize,
    cost_waiting: usize,
    churn_seconds: u64,
    churn_rate: u64,
    quiet_seconds: u64,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            only: [Scenario::Pileup, Scenario::Latency, Scenario::Cost].into(),
            pileup_seconds: 60,
            recovery_seconds: 6,
            controllers: 50,
            latency_pods: vec![1_000, 10_000],
            cost_pods: 50_000,
            cost_waiting: 5_000,
            churn_seconds: 60,
            churn_rate: 100,
            quiet_seconds: 10,
        }
    }
}

const USAGE: &str = "\
usage: guard [--quick] [--only pileup,latency,cost] [--pileup-seconds N] [--recovery-seconds N]
             [--controllers N] [--latency-pods N,N] [--cost-pods N] [--cost-waiting N]
             [--churn-seconds N] [--churn-rate N] [--quiet-seconds N]
  --quick   short runs: pileup 15 s, latency 1000 and 2000 pods, 10000 pods with 10 s churn";

fn parse_args() -> Result<Args, String> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let number = |name: &str, v: String| -> Result<u64, String> {
            v.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: expected a positive whole number, got {v:?}"))
        };
        match arg.as_str() {
            "--quick" => {
                args.pileup_seconds = 15;
                args.recovery_seconds = 4;
                args.latency_pods = vec![1_000, 2_000];
                args.cost_pods = 10_000;
                args.cost_waiting = 1_000;
                args.churn_seconds = 10;
                args.quiet_seconds = 5;
            }
            "--only" => {
                let v = value("--only")?;
                args.only = v
                    .split(',')
                    .map(|s| match s.trim() {
                        "pileup" => Ok(Scenario::Pileup),
                        "latency" => Ok(Scenario::Latency),
                        "cost" => Ok(Scenario::Cost),
                        other => Err(format!(
                            "--only: unknown scenario {other:?} (pileup, latency, cost)"
                        )),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--pileup-seconds" => args.pileup_seconds = number(&arg, value(&arg)?)?,
            "--recovery-seconds" => args.recovery_seconds = number(&arg, value(&arg)?)?,
            "--controllers" => args.controllers = number(&arg, value(&arg)?)? as usize,
            "--latency-pods" => {
                args.latency_pods = value(&arg)?
                    .split(',')
                    .map(|s| number("--latency-pods", s.trim().to_string()).map(|n| n as usize))
                    .collect::<Result<_, _>>()?;
            }
            "--cost-pods" => args.cost_pods = number(&arg, value(&arg)?)? as usize,
            "--cost-waiting" => args.cost_waiting = number(&arg, value(&arg)?)? as usize,
            "--churn-seconds" => args.churn_seconds = number(&arg, value(&arg)?)?,
            "--churn-rate" => args.churn_rate = number(&arg, value(&arg)?)?,
            "--quiet-seconds" => args.quiet_seconds = number(&arg, value(&arg)?)?,
            // `cargo bench` passes --bench to harness-less benchmarks.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.cost_waiting >= args.cost_pods {
        return Err("--cost-waiting must be smaller than --cost-pods".to_string());
    }
    Ok(args)
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // In-process guards log through this; only warnings are kept, as counts.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(|| WarningCounter)
        .try_init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let mut failed = false;
    for scenario in args.only.clone() {
        let result = runtime.block_on(async {
            match scenario {
                Scenario::Pileup => pileup::run(&args).await,
                Scenario::Latency => latency::run(&args).await,
                Scenario::Cost => cost::run(&args).await,
            }
        });
        if let Err(e) = result {
            eprintln!("error: {scenario:?} benchmark failed: {e:#}");
            println!("\n**{scenario:?} benchmark failed:** {e:#}\n");
            failed = true;
        }
    }
    print_goal_summary();
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// `_machine: …_`: cores, memory, crate version, date and load, printed with every table.
fn machine_line() -> String {
    initguard_test_support::bench::machine_line(env!("CARGO_PKG_VERSION"))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

/// `12.3 ms` below a second, `4.56 s` above.
fn fmt_d(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// CPU time read from /proc, which counts in 10 ms clock ticks.
fn fmt_cpu(d: Duration) -> String {
    if d.is_zero() {
        "< 10 ms (under one clock tick)".to_string()
    } else {
        fmt_d(d)
    }
}

/// Nearest-rank percentile of an ascending slice.
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// One goal checked by a scenario, for the summary printed at the end.
struct Goal {
    what: String,
    measured: String,
    goal: String,
    met: bool,
}

static GOALS: std::sync::Mutex<Vec<Goal>> = std::sync::Mutex::new(Vec::new());

fn record_goal(what: String, measured: String, goal: String, met: bool) {
    GOALS.lock().unwrap_or_else(|e| e.into_inner()).push(Goal {
        what,
        measured,
        goal,
        met,
    });
}

fn print_goal_summary() {
    let goals = GOALS.lock().unwrap_or_else(|e| e.into_inner());
    if goals.is_empty() {
        return;
    }
    let missed = goals.iter().filter(|g| !g.met).count();
    println!("## Summary of goals\n");
    println!(
        "{} of {} goals met{}.\n",
        goals.len() - missed,
        goals.len(),
        if missed > 0 {
            "; why the others are missed: the profiling notes below"
        } else {
            ""
        }
    );
    println!("| scenario | measured | goal | verdict |");
    println!("| --- | --- | --- | --- |");
    for g in goals.iter() {
        println!(
            "| {} | {} | {} | {} |",
            g.what,
            g.measured,
            g.goal,
            verdict(g.met)
        );
    }
    println!();
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**MISSED**" }
}

/// `t - since`, or zero when `t` is earlier.
fn after(t: SystemTime, since: SystemTime) -> Duration {
    t.duration_since(since).unwrap_or_default()
}

/// `metadata.creationTimestamp` of a stored object.
fn created_at(obj: &Value) -> Option<SystemTime> {
    obj.pointer("/metadata/creationTimestamp")?
        .as_str()?
        .parse::<jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

fn gates_of(obj: &Value) -> Vec<String> {
    obj.pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .map(|gates| {
            gates
                .iter()
                .filter_map(|g| g.get("name")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn is_running(obj: &Value) -> bool {
    obj.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
}

/// Process CPU time (user + system) of `pid` from /proc (clock ticks of 1/100 s, Linux USER_HZ).
fn cpu_time(pid: &str) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat format"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| anyhow!("no CPU field {i} in /proc/{pid}/stat"))
    };
    // `rest` starts at field 3 (state), so field n is at index n - 3.
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

/// CPU time of this process's threads whose name starts with `prefix`.
fn threads_cpu(prefix: &str) -> Result<Duration> {
    let mut total = Duration::ZERO;
    for entry in std::fs::read_dir("/proc/self/task").context("reading /proc/self/task")? {
        let tid = entry?.file_name().to_string_lossy().into_owned();
        let comm =
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
        if comm.starts_with(prefix) {
            // A thread that ended meanwhile simply stops counting.
            total += cpu_time(&format!("self/task/{tid}")).unwrap_or_default();
        }
    }
    Ok(total)
}

/// A `kB` field of /proc/PID/status (VmRSS, VmHWM) in bytes.
fn proc_status_bytes(pid: &str, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| anyhow!("no {field} in /proc/{pid}/status"))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
}

/// Waits until `check` holds, polling every 20 ms, or fails after `timeout`.
async fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() >= deadline {
            bail!("{what}: not reached after {}", fmt_d(timeout));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn create_namespace(sim: &Sim, name: &str) -> Result<()> {
    sim.ensure_namespace(ADMIN, name)
        .await
        .with_context(|| format!("creating namespace {name}"))
}

/// Creates (if needed) a Deployment and sets `status.availableReplicas`: a static owner whose
/// health the benchmark controls.
async fn set_owner_deployment(
    sim: &Sim,
    namespace: &str,
    name: &str,
    available: i32,
) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(sim.client(ADMIN), namespace);
    if api.get_opt(name).await?.is_none() {
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": namespace },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": name } },
                "template": {
                    "metadata": { "labels": { "app": name } },
                    "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] }
                }
            }
        }))?;
        api.create(&PostParams::default(), &deployment)
            .await
            .with_context(|| format!("creating deployment {namespace}/{name}"))?;
    }
    let status = json!({ "status": {
        "replicas": 1, "readyReplicas": available, "availableReplicas": available,
        "unavailableReplicas": 1 - available, "observedGeneration": 1,
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("setting status of deployment {namespace}/{name}"))?;
    Ok(())
}

/// A small pod as a Job would create it: labels, optional gates, one container.
fn bench_pod(name: &str, gates: &[&str], opted_in: bool) -> Result<Pod> {
    let mut labels = json!({ "app": "bench", "pod-template-hash": "5d8f7c9b6" });
    if opted_in {
        labels[DEFAULT_OPT_IN_LABEL] = json!("true");
    }
    let mut spec = json!({
        "containers": [{
            "name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } }
        }],
        "restartPolicy": "Never",
    });
    if !gates.is_empty() {
        spec["schedulingGates"] = gates.iter().map(|g| json!({ "name": g })).collect();
    }
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": NS, "labels": labels },
        "spec": spec,
    }))?)
}

/// Creates `pods` with [`SEED_CONCURRENCY`] requests in flight; returns how long it took.
async fn seed(sim: &Sim, pods: Vec<Pod>) -> Result<Duration> {
    let api: Api<Pod> = Api::namespaced(sim.client(ADMIN), NS);
    let start = Instant::now();
    stream::iter(pods.into_iter().map(Ok))
        .try_for_each_concurrent(SEED_CONCURRENCY, |pod| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &pod)
                    .await
                    .map(drop)
                    .context("seeding a pod")
            }
        })
        .await?;
    Ok(start.elapsed())
}

/// Waits until the store stops changing for 500 ms (the simulated scheduler has run every pod).
async fn settle(sim: &Sim) {
    let mut last = sim.resource_version();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = sim.resource_version();
        if now == last {
            return;
        }
        last = now;
    }
}

/// Starts an in-process guard for `yaml` as [`GUARD_USER`] and waits until it is ready.
async fn start_guard(sim: &Sim, mechanism: Mechanism, yaml: &str) -> Result<Guard> {
    let config = initguard::config::from_yaml_str(yaml, "<benchmark config>")
        .map_err(|e| anyhow!("benchmark guard config is invalid:\n{e}"))?;
    let client = initguard::client::connect(sim.kube_config(GUARD_USER), mechanism)
        .context("building the guard's client")?;
    let guard = Guard::start(client, Arc::new(config))
        .await
        .context("starting the guard")?;
    let shared = guard.shared.clone();
    wait_for("guard /readyz", Duration::from_secs(60), || {
        shared.not_ready().is_empty()
    })
    .await?;
    Ok(guard)
}

/// Changes to pods by the guard that removed an initializer: (time, pod uid, removed names).
fn guard_removals(history: &[ObjectChange]) -> Vec<(SystemTime, String, Vec<String>)> {
    history
        .iter()
        .filter(|c| c.resource == "pods" && c.user == GUARD_USER)
        .filter_map(|c| {
            let removed = c.removed_initializers();
            (!removed.is_empty()).then(|| (c.time, c.uid.clone(), removed))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Pileup
// ---------------------------------------------------------------------------------------------

mod pileup {
    use super::*;
    use initguard_sim::controllers::{
        Creator, CreatorHandle, CreatorOptions, GateOwner, GateOwnerOptions, dns_name, pile_report,
    };
    use initguard_sim::scenario::{creator_user, owner_user};

    /// The initializer whose owner dies.
    const INIT: &str = "sidecar.example.com";
    /// A real API server times a blocked CREATE out after ~30 s; compressed like the demo.
    const CREATE_TIMEOUT: Duration = Duration::from_secs(2);
    const DEADLINE: Duration = Duration::from_secs(1);
    const GRACE: Duration = Duration::from_secs(1);
    /// CronJob period (scheduling gates).
    const PERIOD: Duration = Duration::from_secs(2);
    const SAMPLES_PER_SECOND: u32 = 4;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Variant {
        NoGuard,
        Deadline,
        OwnerDown,
    }

    impl Variant {
        const ALL: [Variant; 3] = [Variant::NoGuard, Variant::Deadline, Variant::OwnerDown];

        fn title(self) -> &'static str {
            match self {
                Variant::NoGuard => "no guard",
                Variant::Deadline => "initguard, deadline 1 s",
                Variant::OwnerDown => "initguard, owner-down only (grace 1 s)",
            }
        }

        fn short(self) -> &'static str {
            match self {
                Variant::NoGuard => "no guard",
                Variant::Deadline => "deadline",
                Variant::OwnerDown => "owner-down",
            }
        }

        /// Time-to-pod bound the guard promises: deadline (or grace) + 1 s.
        fn bound(self) -> Option<Duration> {
            match self {
                Variant::NoGuard => None,
                Variant::Deadline => Some(DEADLINE + Duration::from_secs(1)),
                Variant::OwnerDown => Some(GRACE + Duration::from_secs(1)),
            }
        }

        fn config(self, mechanism: Mechanism) -> Option<String> {
            let entry = match self {
                Variant::NoGuard => return None,
                Variant::Deadline => format!("  - name: {INIT}\n    deadline: 1s\n"),
                Variant::OwnerDown => format!(
                    "  - name: {INIT}\n    deadline: 1h\n    ownerDownGrace: 1s\n    \
                     owner: {{ deployment: kube-system/{} }}\n",
                    dns_name(INIT)
                ),
            };
            Some(format!(
                "mechanism: {}\ninitializers:\n{entry}leaderElection: {{ enabled: false }}\n\
                 listen: 127.0.0.1:0\n",
                mechanism.as_str()
            ))
        }
    }

    /// Maxima over one second.
    #[derive(Default)]
    struct Sample {
        stored: usize,
        largest: usize,
        without_running: usize,
    }

    struct RunResult {
        variant: Variant,
        samples: Vec<Sample>,
        /// Integral over the outage of the controllers without a running pod.
        controller_seconds_without_pod: f64,
        /// Jobs: first pod stored → first pod Running; CronJobs: each pod created during the
        /// outage, stored → Running.
        time_to_pod: Vec<Duration>,
        never_ran: usize,
        pods_created: usize,
        create_timeouts: u64,
        bypasses: usize,
    }

    pub(crate) async fn run(args: &Args) -> Result<()> {
        println!("## 1. Pileup: a dead initializer owner, without and with initguard\n");
        println!(
            "The initializer `{INIT}`'s owner (a simulated controller backed by a Deployment \
             and a Lease) is killed at t = 0 and revived at t = {}s; {} opted-in creators \
             start at t = 0. Three runs side by side, concurrently in one process (one \
             simulated API server each): no guard; initguard with `deadline: 1s` and no owner; \
             initguard with only the owner check (`owner: {{deployment: …}}`, `deadline: 1h`, \
             `ownerDownGrace: 1s`). Sampled {SAMPLES_PER_SECOND} times a second with \
             `pile_report`; each row holds the maxima of its second, and the series shows every \
             5th second. Scheduling-gate waits count from `creationTimestamp`, which has whole \
             seconds, so a 1 s deadline lets a pod wait 0–1 s. Goal with initguard: never more \
             than 1 waiting pod per controller, and every pod running within deadline (or grace) + 1 s.\n",
            args.pileup_seconds, args.controllers,
        );
        for mechanism in [Mechanism::Initializers, Mechanism::SchedulingGates] {
            run_mechanism(args, mechanism).await?;
        }
        Ok(())
    }

    async fn run_mechanism(args: &Args, mechanism: Mechanism) -> Result<()> {
        let legacy = mechanism == Mechanism::Initializers;
        eprintln!(
            "pileup: {} — {} s outage, 3 runs in parallel",
            mechanism.as_str(),
            args.pileup_seconds
        );
        let mut tasks = Vec::new();
        for variant in Variant::ALL {
            let args = args.clone();
            tasks.push(tokio::spawn(async move {
                run_variant(&args, mechanism, variant).await
            }));
        }
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.context("pileup run panicked")??);
        }

        let (what, unit) = if legacy {
            (
                format!(
                    "legacy initializers, {} Job-like creators (parallelism 1, create timeout \
                     {}s, retry after 0.5 s)",
                    args.controllers,
                    CREATE_TIMEOUT.as_secs()
                ),
                "Jobs",
            )
        } else {
            (
                format!(
                    "scheduling gates, {} CronJob-like creators (one pod every {}s)",
                    args.controllers,
                    PERIOD.as_secs()
                ),
                "CronJobs",
            )
        };
        println!("### {}: {what}\n", mechanism.as_str());
        println!("{}\n", machine_line());
        println!(
            "Columns per run: stored pods still waiting on `{INIT}` / largest pile of one \
             controller / {unit} without a running pod.\n"
        );
        print!("| t (s) |");
        for r in &results {
            print!(" {} |", r.variant.short());
        }
        println!();
        print!("| ---: |");
        for _ in &results {
            print!(" ---: |");
        }
        println!();
        let total = args.pileup_seconds + args.recovery_seconds;
        for t in (0..=total).filter(|t| t % 5 == 0 || *t == args.pileup_seconds || *t == total) {
            let mark = if t == args.pileup_seconds {
                " (revive)"
            } else {
                ""
            };
            print!("| {t}{mark} |");
            for r in &results {
                match r.samples.get(t as usize) {
                    Some(s) => print!(" {} / {} / {} |", s.stored, s.largest, s.without_running),
                    None => print!(" – |"),
                }
            }
            println!();
        }
        println!();
        println!(
            "| run | max stored waiting | max pile per controller | {unit}·s without a running \
             pod (outage) | pods created | CREATE timeouts (504) | bypasses | time to pod p50 \
             | max | never ran | goal |"
        );
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
        for r in &results {
            let max_stored = r.samples.iter().map(|s| s.stored).max().unwrap_or(0);
            let max_pile = r.samples.iter().map(|s| s.largest).max().unwrap_or(0);
            let without = r.controller_seconds_without_pod;
            let p50 = percentile(&r.time_to_pod, 0.5);
            let max = r.time_to_pod.last().copied().unwrap_or_default();
            let goal = match r.variant.bound() {
                None => "–".to_string(),
                Some(bound) => {
                    let met = max_pile <= 1 && r.never_ran == 0 && max <= bound;
                    record_goal(
                        format!("pileup, {}, {}", mechanism.as_str(), r.variant.title()),
                        format!(
                            "largest pile {max_pile}, time to pod max {}, never ran {}",
                            fmt_d(max),
                            r.never_ran
                        ),
                        format!("pile ≤ 1, every pod running ≤ {}", fmt_d(bound)),
                        met,
                    );
                    let mut v = verdict(met).to_string();
                    if !met {
                        let mut why = Vec::new();
                        if max_pile > 1 {
                            why.push(format!("pile {max_pile} > 1"));
                        }
                        if max > bound {
                            why.push(format!("max {} > {}", fmt_d(max), fmt_d(bound)));
                        }
                        if r.never_ran > 0 {
                            why.push(format!("{} never ran", r.never_ran));
                        }
                        v.push_str(&format!(" ({})", why.join(", ")));
                    }
                    v
                }
            };
            println!(
                "| {} | {max_stored} | {max_pile} | {without:.0} | {} | {} | {} | {} | {} | {} | \
                 {goal} |",
                r.variant.title(),
                r.pods_created,
                if legacy {
                    r.create_timeouts.to_string()
                } else {
                    "–".to_string()
                },
                r.bypasses,
                fmt_d(p50),
                fmt_d(max),
                r.never_ran,
            );
        }
        println!();
        if legacy {
            println!(
                "Time to pod (Jobs): from the Job's first pod being stored to its first Running \
                 pod. Without the guard every retried CREATE leaves one more uninitialized pod \
                 behind, and on revival the owner initializes the whole pile: the Jobs end up \
                 with many running pods each.\n"
            );
        } else {
            println!(
                "Time to pod (CronJobs): for each pod created during the outage, from being \
                 stored to Running.\n"
            );
        }
        Ok(())
    }

    fn creator_options(mechanism: Mechanism, i: usize) -> CreatorOptions {
        let mut opts = match mechanism {
            Mechanism::Initializers => CreatorOptions::job(NS, &format!("job-{i:02}"), 1),
            Mechanism::SchedulingGates => {
                let mut o = CreatorOptions::cron_job(NS, &format!("cron-{i:02}"), PERIOD);
                o.gates = vec![INIT.to_string()];
                o
            }
        };
        opts.opt_in_label = Some(DEFAULT_OPT_IN_LABEL.to_string());
        opts.sync_period = Duration::from_millis(500);
        opts
    }

    async fn run_variant(args: &Args, mechanism: Mechanism, variant: Variant) -> Result<RunResult> {
        let legacy = mechanism == Mechanism::Initializers;
        let sim = Sim::start(SimOptions {
            mechanism,
            legacy_initializers: if legacy {
                vec![INIT.to_string()]
            } else {
                Vec::new()
            },
            create_timeout: CREATE_TIMEOUT,
            ..SimOptions::default()
        })
        .await?;
        create_namespace(&sim, NS).await?;
        let owner_opts = GateOwnerOptions::new(INIT, mechanism);
        let owner = GateOwner::start(sim.kube_config(&owner_user(&owner_opts)), owner_opts)?;
        let deployment = dns_name(INIT);
        wait_for(
            "owner deployment available",
            Duration::from_secs(15),
            || {
                sim.get_object("deployments", Some("kube-system"), &deployment)
                    .and_then(|d| d.pointer("/status/availableReplicas")?.as_i64())
                    == Some(1)
            },
        )
        .await?;
        let guard = match variant.config(mechanism) {
            Some(yaml) => Some(start_guard(&sim, mechanism, &yaml).await?),
            None => None,
        };

        let wall0 = SystemTime::now();
        let t0 = Instant::now();
        owner.kill();
        let creators: Vec<CreatorHandle> = (0..args.controllers)
            .map(|i| {
                let opts = creator_options(mechanism, i);
                Creator::start(sim.kube_config(&creator_user(&opts)), opts)
            })
            .collect::<Result<_, _>>()?;
        // Sampled several times a second (creators work in whole-second rhythms that a
        // once-a-second sample would alias with); reported as per-second maxima.
        let step = Duration::from_secs(1) / SAMPLES_PER_SECOND;
        let revive_at = args.pileup_seconds * u64::from(SAMPLES_PER_SECOND);
        let end = (args.pileup_seconds + args.recovery_seconds) * u64::from(SAMPLES_PER_SECOND);
        let mut samples: Vec<Sample> = Vec::new();
        let mut controller_seconds_without_pod = 0.0;
        for i in 0..=end {
            tokio::time::sleep_until(t0 + step * i as u32).await;
            if i == revive_at {
                owner.revive();
            }
            let report = pile_report(&sim, mechanism);
            let without = report.controllers_without_running_pod.len();
            if i < revive_at {
                controller_seconds_without_pod += without as f64 * step.as_secs_f64();
            }
            let second = (i / u64::from(SAMPLES_PER_SECOND)) as usize;
            if samples.len() <= second {
                samples.push(Sample::default());
            }
            let s = &mut samples[second];
            s.stored = s.stored.max(report.stored_waiting_pods);
            s.largest = s.largest.max(report.largest_pile);
            s.without_running = s.without_running.max(without);
        }
        let create_timeouts = creators.iter().map(|c| c.stats().create_timeouts()).sum();
        for c in creators {
            c.stop().await;
        }
        if let Some(g) = guard {
            g.shutdown().await;
        }
        owner.stop().await;
        let history = sim.object_history();
        sim.shutdown().await;

        let outage_end = wall0 + Duration::from_secs(args.pileup_seconds);
        let (mut time_to_pod, never_ran) = if legacy {
            per_job_time_to_pod(&history)
        } else {
            per_pod_time_to_pod(&history, wall0, outage_end)
        };
        time_to_pod.sort();
        let pods_created = history
            .iter()
            .filter(|c| {
                c.resource == "pods"
                    && c.change_type == ChangeType::Added
                    && c.namespace.as_deref() == Some(NS)
            })
            .count();
        Ok(RunResult {
            variant,
            samples,
            controller_seconds_without_pod,
            time_to_pod,
            never_ran,
            pods_created,
            create_timeouts,
            bypasses: guard_removals(&history).len(),
        })
    }

    fn controller_name(obj: &Value) -> Option<String> {
        obj.pointer("/metadata/ownerReferences")?
            .as_array()?
            .iter()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
            .get("name")?
            .as_str()
            .map(str::to_string)
    }

    /// Pods of the benchmark namespace: uid → (controller, stored at, first Running at).
    fn pod_timeline(
        history: &[ObjectChange],
    ) -> HashMap<String, (Option<String>, SystemTime, Option<SystemTime>)> {
        let mut pods: HashMap<String, (Option<String>, SystemTime, Option<SystemTime>)> =
            HashMap::new();
        for c in history {
            if c.resource != "pods" || c.namespace.as_deref() != Some(NS) {
                continue;
            }
            let Some(after) = &c.after else { continue };
            let entry = pods
                .entry(c.uid.clone())
                .or_insert_with(|| (controller_name(after), c.time, None));
            if entry.2.is_none() && is_running(after) {
                entry.2 = Some(c.time);
            }
        }
        pods
    }

    fn per_job_time_to_pod(history: &[ObjectChange]) -> (Vec<Duration>, usize) {
        let mut jobs: BTreeMap<String, (SystemTime, Option<SystemTime>)> = BTreeMap::new();
        for (controller, stored, running) in pod_timeline(history).into_values() {
            let Some(job) = controller else { continue };
            let e = jobs.entry(job).or_insert((stored, None));
            e.0 = e.0.min(stored);
            e.1 = match (e.1, running) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let mut times = Vec::new();
        let mut never = 0;
        for (stored, running) in jobs.into_values() {
            match running {
                Some(r) => times.push(after(r, stored)),
                None => never += 1,
            }
        }
        (times, never)
    }

    fn per_pod_time_to_pod(
        history: &[ObjectChange],
        from: SystemTime,
        until: SystemTime,
    ) -> (Vec<Duration>, usize) {
        let mut times = Vec::new();
        let mut never = 0;
        for (_, stored, running) in pod_timeline(history).into_values() {
            if stored < from || stored >= until {
                continue;
            }
            match running {
                Some(r) => times.push(after(r, stored)),
                None => never += 1,
            }
        }
        (times, never)
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Reaction latency
// ---------------------------------------------------------------------------------------------

mod latency {
    use super::*;

    const OWNER: &str = "bench-owner";
    /// Thread name prefix of the guard's runtime (at most 15 characters are kept by Linux).
    const GUARD_THREADS: &str = "guard-rt";
    const OWNED_GATE: &str = "owned.bench.example.com/ready";
    const GRACE: Duration = Duration::from_secs(1);
    /// Time the guard gets between the end of seeding and the shared deadline, to start and
    /// list everything.
    const STARTUP_MARGIN: Duration = Duration::from_secs(4);

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Trigger {
        Deadline,
        OwnerDown,
    }

    impl Trigger {
        fn title(self) -> &'static str {
            match self {
                Trigger::Deadline => "deadline",
                Trigger::OwnerDown => "owner down",
            }
        }
    }

    struct Measured {
        pods: usize,
        trigger: Trigger,
        max_in_flight: usize,
        /// Trigger instant → gate removed, per pod, ascending.
        latencies: Vec<Duration>,
        /// First trigger → last removal.
        all_done: Duration,
        removed: usize,
        seeded_in: Duration,
        ready_in: Duration,
        /// Whether the guard was ready (and tracking every pod) before the trigger.
        ready_before_trigger: bool,
        /// Deadline instants shared by the pods (ideally 1).
        distinct_triggers: usize,
        first_patch_after: Duration,
        patches: usize,
        patch_span: Duration,
        events: usize,
        other_requests: usize,
        /// Process CPU (simulator + guard + benchmark) over trigger → all done.
        cpu: Duration,
        /// CPU of the guard's own runtime threads over the same span.
        guard_cpu: Duration,
        /// Wall time over which `cpu` was counted.
        cpu_wall: Duration,
        /// Warnings the guard logged from the trigger on, and how many said the actuator's
        /// queue was full (that pod is decided again 1 s later).
        warnings: u64,
        queue_full: u64,
    }

    fn deadline_gate(i: u64) -> String {
        format!("deadline.bench.example.com/second-{i}")
    }

    pub(crate) async fn run(args: &Args) -> Result<()> {
        let mut results = Vec::new();
        for &pods in &args.latency_pods {
            for trigger in [Trigger::Deadline, Trigger::OwnerDown] {
                for max_in_flight in [16, 64] {
                    eprintln!(
                        "latency: {pods} pods, {}, maxInFlight {max_in_flight}",
                        trigger.title()
                    );
                    results.push(measure(pods, trigger, max_in_flight).await?);
                }
            }
        }
        println!("## 2. Reaction latency: many pods triggered at the same instant\n");
        println!("{}\n", machine_line());
        println!(
            "Opted-in pods gated by a listed gate are created first, then an in-process guard \
             starts and lists them. **Deadline**: pods created during second k of seeding \
             carry gate `second-k` whose deadline is D − k s, so every deadline expires at the \
             same instant (creation timestamps have whole seconds). **Owner down**: the gate's \
             owner Deployment goes to 0 available replicas; the trigger is that write plus \
             `ownerDownGrace` (1 s). Latency per pod = the simulator's commit time of the \
             guard's patch removing the gate − the pod's trigger instant. Goals: p99 ≤ 50 ms \
             at 1,000 pods; all 10,000 done ≤ 2 s.\n"
        );
        println!("| pods | trigger | maxInFlight | p50 | p99 | max | all done | removed | goal |");
        println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
        for m in &results {
            let p99 = percentile(&m.latencies, 0.99);
            let what = format!(
                "latency, {} pods, {}, maxInFlight {}",
                m.pods,
                m.trigger.title(),
                m.max_in_flight
            );
            let goal = if !m.ready_before_trigger {
                "invalid: guard not ready before the trigger".to_string()
            } else if m.removed < m.pods {
                record_goal(
                    what,
                    format!("{} of {} removed", m.removed, m.pods),
                    "every gate removed".to_string(),
                    false,
                );
                format!("**MISSED**: {} of {} removed", m.removed, m.pods)
            } else if m.pods == 1_000 {
                let met = p99 <= Duration::from_millis(50);
                record_goal(
                    what,
                    format!("p99 {}", fmt_d(p99)),
                    "p99 ≤ 50 ms".to_string(),
                    met,
                );
                format!("p99 ≤ 50 ms: {}", verdict(met))
            } else if m.pods == 10_000 {
                let met = m.all_done <= Duration::from_secs(2);
                record_goal(
                    what,
                    format!("all done in {}", fmt_d(m.all_done)),
                    "all ≤ 2 s".to_string(),
                    met,
                );
                format!("all ≤ 2 s: {}", verdict(met))
            } else {
                "–".to_string()
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {goal} |",
                m.pods,
                m.trigger.title(),
                m.max_in_flight,
                fmt_d(percentile(&m.latencies, 0.5)),
                fmt_d(p99),
                fmt_d(m.latencies.last().copied().unwrap_or_default()),
                fmt_d(m.all_done),
                m.removed,
            );
        }
        println!();
        println!(
            "Where the time goes, from the simulator's request log and CPU time. The guard runs \
             on its own runtime threads in this process; \"simulator\" is the rest of the \
             process (the simulated API server, its scheduler, the benchmark). CPU is counted \
             from just before the trigger until every gate is gone; busy cores = all CPU / that \
             span (the machine has {} cores, shared with other work: load average {}).\n",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            load_average(),
        );
        println!(
            "| pods | trigger | maxInFlight | trigger → first PATCH | PATCH span | PATCH/s | \
             Events created | other guard requests | queue-full warnings (all warnings) | guard CPU/bypass | simulator CPU/bypass | busy cores | seeded / guard \
             ready in | trigger instants |"
        );
        println!(
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: \
             | ---: | ---: |"
        );
        for m in &results {
            let rate = if m.patch_span.is_zero() {
                0.0
            } else {
                m.patches as f64 / m.patch_span.as_secs_f64()
            };
            let busy = m.cpu.as_secs_f64() / m.cpu_wall.as_secs_f64().max(0.001);
            let per =
                |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6 / m.removed.max(1) as f64);
            println!(
                "| {} | {} | {} | {} | {} | {rate:.0} | {} | {} | {} ({}) | {} | {} | {busy:.2} \
                 | {} / {} | {} |",
                m.pods,
                m.trigger.title(),
                m.max_in_flight,
                fmt_d(m.first_patch_after),
                fmt_d(m.patch_span),
                m.events,
                m.other_requests,
                m.queue_full,
                m.warnings,
                per(m.guard_cpu),
                per(m.cpu.saturating_sub(m.guard_cpu)),
                fmt_d(m.seeded_in),
                fmt_d(m.ready_in),
                m.distinct_triggers,
            );
        }
        println!();
        Ok(())
    }

    async fn measure(pods: usize, trigger: Trigger, max_in_flight: usize) -> Result<Measured> {
        let sim = Sim::start(SimOptions {
            request_log_limit: 1_000_000,
            ..SimOptions::default()
        })
        .await?;
        create_namespace(&sim, NS).await?;
        set_owner_deployment(&sim, "kube-system", OWNER, 1).await?;

        // Seed. Deadline runs pick each pod's gate from the second it is created in.
        let (seeded_in, gates_used) = match trigger {
            Trigger::OwnerDown => {
                let batch = (0..pods)
                    .map(|i| bench_pod(&format!("pod-{i:05}"), &[OWNED_GATE], true))
                    .collect::<Result<Vec<_>>>()?;
                (seed(&sim, batch).await?, 0)
            }
            Trigger::Deadline => seed_aligned(&sim, pods).await?,
        };

        let mut entries = String::new();
        let deadline_total = Duration::from_secs(gates_used) + STARTUP_MARGIN;
        match trigger {
            Trigger::OwnerDown => entries.push_str(&format!(
                "  - name: {OWNED_GATE}\n    deadline: 1h\n    ownerDownGrace: 1s\n    owner: \
                 {{ deployment: kube-system/{OWNER} }}\n"
            )),
            Trigger::Deadline => {
                for k in 0..gates_used {
                    let d = deadline_total - Duration::from_secs(k);
                    entries.push_str(&format!(
                        "  - name: {}\n    deadline: {}ms\n",
                        deadline_gate(k),
                        d.as_millis()
                    ));
                }
            }
        }
        let yaml = format!(
            "mechanism: schedulingGates\ninitializers:\n{entries}leaderElection: {{ enabled: \
             false }}\nlisten: 127.0.0.1:0\nmaxInFlight: {max_in_flight}\n"
        );
        // The guard gets its own runtime (named threads), so its CPU time can be told apart
        // from the simulator's.
        let guard_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(GUARD_THREADS)
            .enable_all()
            .build()
            .context("building the guard's runtime")?;
        let started = Instant::now();
        let guard = {
            let sim = sim.clone();
            guard_rt
                .spawn(async move { start_guard(&sim, Mechanism::SchedulingGates, &yaml).await })
                .await
                .context("guard start panicked")??
        };
        let shared = guard.shared.clone();
        wait_for("guard tracking every pod", Duration::from_secs(60), || {
            shared.tracker().len() == pods
        })
        .await?;
        let ready_in = started.elapsed();
        let ready_wall = SystemTime::now();

        // Triggers, per pod uid.
        let history = sim.object_history();
        let mut triggers: HashMap<String, SystemTime> = HashMap::new();
        let cpu_before;
        match trigger {
            Trigger::Deadline => {
                for c in history
                    .iter()
                    .filter(|c| c.resource == "pods" && c.change_type == ChangeType::Added)
                {
                    let Some(obj) = &c.after else { continue };
                    let (Some(created), Some(gate)) = (created_at(obj), gates_of(obj).pop()) else {
                        continue;
                    };
                    let Some(k) = gate
                        .rsplit_once("second-")
                        .and_then(|(_, k)| k.parse::<u64>().ok())
                    else {
                        continue;
                    };
                    let d = deadline_total - Duration::from_secs(k);
                    triggers.insert(c.uid.clone(), created + d);
                }
                let first = triggers.values().min().copied().unwrap_or(ready_wall);
                // Sample CPU just before the shared instant.
                let until =
                    after(first, SystemTime::now()).saturating_sub(Duration::from_millis(50));
                tokio::time::sleep(until).await;
                cpu_before = (
                    cpu_time("self")?,
                    threads_cpu(GUARD_THREADS)?,
                    Instant::now(),
                );
                WARNINGS.store(0, Ordering::Relaxed);
                QUEUE_FULL.store(0, Ordering::Relaxed);
            }
            Trigger::OwnerDown => {
                let before = SystemTime::now();
                set_owner_deployment(&sim, "kube-system", OWNER, 0).await?;
                let changed = sim
                    .object_history()
                    .iter()
                    .rev()
                    .find(|c| c.resource == "deployments" && c.name == OWNER && c.time >= before)
                    .map(|c| c.time)
                    .ok_or_else(|| anyhow!("owner deployment change not in the history"))?;
                for c in history
                    .iter()
                    .filter(|c| c.resource == "pods" && c.change_type == ChangeType::Added)
                {
                    triggers.insert(c.uid.clone(), changed + GRACE);
                }
                let until = after(changed + GRACE, SystemTime::now())
                    .saturating_sub(Duration::from_millis(50));
                tokio::time::sleep(until).await;
                cpu_before = (
                    cpu_time("self")?,
                    threads_cpu(GUARD_THREADS)?,
                    Instant::now(),
                );
                WARNINGS.store(0, Ordering::Relaxed);
                QUEUE_FULL.store(0, Ordering::Relaxed);
            }
        }
        let first_trigger = triggers
            .values()
            .min()
            .copied()
            .ok_or_else(|| anyhow!("no pods seeded"))?;
        let ready_before_trigger = ready_wall < first_trigger;
        let distinct: BTreeSet<SystemTime> = triggers.values().copied().collect();

        let done = wait_for("every gate removed", Duration::from_secs(60), || {
            shared.tracker().is_empty()
        })
        .await;
        let cpu = cpu_time("self")?.saturating_sub(cpu_before.0);
        let guard_cpu = threads_cpu(GUARD_THREADS)?.saturating_sub(cpu_before.1);
        let cpu_wall = cpu_before.2.elapsed();
        let warnings = WARNINGS.load(Ordering::Relaxed);
        let queue_full = QUEUE_FULL.load(Ordering::Relaxed);
        guard.shutdown().await;
        guard_rt.shutdown_background();
        let history = sim.object_history();
        let requests = sim.requests();
        sim.shutdown().await;
        if let Err(e) = done {
            eprintln!("latency: {e:#}");
        }

        let removals = guard_removals(&history);
        let mut latencies = Vec::new();
        let mut last_removal = first_trigger;
        let mut removed_uids = BTreeSet::new();
        for (time, uid, _) in &removals {
            if let Some(t) = triggers.get(uid)
                && removed_uids.insert(uid.clone())
            {
                latencies.push(after(*time, *t));
                last_removal = last_removal.max(*time);
            }
        }
        latencies.sort();
        let guard_requests: Vec<_> = requests
            .iter()
            .filter(|r| r.user == GUARD_USER && r.time >= first_trigger)
            .collect();
        let patch_times: Vec<SystemTime> = guard_requests
            .iter()
            .filter(|r| r.verb == "patch" && r.resource == "pods")
            .map(|r| r.time)
            .collect();
        let first_patch = patch_times.iter().min().copied().unwrap_or(first_trigger);
        let last_patch = patch_times.iter().max().copied().unwrap_or(first_trigger);
        let events = guard_requests
            .iter()
            .filter(|r| r.resource == "events" && r.verb == "create")
            .count();
        Ok(Measured {
            pods,
            trigger,
            max_in_flight,
            all_done: after(last_removal, first_trigger),
            removed: removed_uids.len(),
            latencies,
            seeded_in,
            ready_in,
            ready_before_trigger,
            distinct_triggers: distinct.len(),
            first_patch_after: after(first_patch, first_trigger),
            patches: patch_times.len(),
            patch_span: after(last_patch, first_patch),
            events,
            other_requests: guard_requests.len() - patch_times.len() - events,
            cpu,
            guard_cpu,
            cpu_wall,
            warnings,
            queue_full,
        })
    }

    /// Creates `n` pods, each gated by the gate of the second (since the start) it is created
    /// in. Requests pause in the last 150 ms of every second so that the server's whole-second
    /// creation timestamp matches the gate. Returns the time taken and the number of gates used.
    async fn seed_aligned(sim: &Sim, n: usize) -> Result<(Duration, u64)> {
        let api: Api<Pod> = Api::namespaced(sim.client(ADMIN), NS);
        // Start 10 ms into the next whole second.
        let now = SystemTime::now();
        let since_epoch = now.duration_since(SystemTime::UNIX_EPOCH)?;
        let s0 = SystemTime::UNIX_EPOCH + Duration::from_secs(since_epoch.as_secs() + 1);
        tokio::time::sleep(after(s0, now) + Duration::from_millis(10)).await;
        let started = Instant::now();
        let highest = Arc::new(AtomicU64::new(0));
        stream::iter((0..n).map(Ok))
            .try_for_each_concurrent(SEED_CONCURRENCY, |i| {
                let api = api.clone();
                let highest = highest.clone();
                async move {
                    let k = loop {
                        let offset = after(SystemTime::now(), s0);
                        let ms = offset.subsec_millis();
                        if ms < 850 {
                            break offset.as_secs();
                        }
                        tokio::time::sleep(Duration::from_millis(u64::from(1010 - ms))).await;
                    };
                    highest.fetch_max(k, Ordering::Relaxed);
                    let pod = bench_pod(&format!("pod-{i:05}"), &[&deadline_gate(k)], true)?;
                    api.create(&PostParams::default(), &pod)
                        .await
                        .map(drop)
                        .context("seeding a pod")
                }
            })
            .await?;
        Ok((started.elapsed(), highest.load(Ordering::Relaxed) + 1))
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Cost at scale
// ---------------------------------------------------------------------------------------------

mod cost {
    use super::*;
    use std::process::{Child, Command, Stdio};

    const OWNER: &str = "slow-owner";
    /// Gate of the waiting pods: its owner is healthy but never gets to them.
    const SLOW_GATE: &str = "slow.example.com";
    /// Second gate on a few waiting pods, expiring in the middle of the churn.
    const EXPIRING_GATE: &str = "expiring.example.com";
    const CHURN_USER: &str = "churn-bot";

    /// The guard child process; killed on drop if still running.
    struct GuardProcess {
        child: Child,
        pid: String,
    }

    impl GuardProcess {
        fn rss(&self) -> Result<u64> {
            proc_status_bytes(&self.pid, "VmRSS:")
        }
        fn peak_rss(&self) -> Result<u64> {
            proc_status_bytes(&self.pid, "VmHWM:")
        }
        fn cpu(&self) -> Result<Duration> {
            cpu_time(&self.pid)
        }
        fn alive(&mut self) -> bool {
            matches!(self.child.try_wait(), Ok(None))
        }
        /// SIGTERM, then SIGKILL after 10 s.
        async fn stop(mut self) {
            let _ = Command::new("kill").arg("-TERM").arg(&self.pid).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.alive() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    impl Drop for GuardProcess {
        fn drop(&mut self) {
            if matches!(self.child.try_wait(), Ok(None)) {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }

    /// One plain HTTP/1.1 GET to the guard's endpoints: (status, body).
    fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| anyhow!("malformed HTTP response from {addr}{path}"))?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }

    /// Sum of `initguard_bypasses_total` over its labels.
    fn bypasses_total(addr: SocketAddr) -> Result<u64> {
        let (status, body) = http_get(addr, "/metrics")?;
        if status != 200 {
            bail!("/metrics answered {status}");
        }
        Ok(body
            .lines()
            .filter(|l| l.starts_with("initguard_bypasses_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64)
    }

    fn free_port() -> Result<SocketAddr> {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        Ok(l.local_addr()?)
    }

    #[derive(Default)]
    struct Phase {
        requests: BTreeMap<String, u64>,
        cpu: Duration,
        wall: Duration,
    }

    pub(crate) async fn run(args: &Args) -> Result<()> {
        let total = args.cost_pods;
        let waiting = args.cost_waiting;
        let expiring = (waiting / 20).max(1);
        let ordinary = total - waiting;
        eprintln!("cost: seeding {total} pods");
        let sim = Sim::start(SimOptions {
            request_log_limit: 2_000_000,
            ..SimOptions::default()
        })
        .await?;
        create_namespace(&sim, NS).await?;
        set_owner_deployment(&sim, "kube-system", OWNER, 1).await?;
        let seeding_started = SystemTime::now();
        let mut pods = Vec::with_capacity(total);
        for i in 0..expiring {
            pods.push(bench_pod(
                &format!("exp-{i:05}"),
                &[SLOW_GATE, EXPIRING_GATE],
                true,
            )?);
        }
        for i in expiring..waiting {
            pods.push(bench_pod(&format!("wait-{i:05}"), &[SLOW_GATE], true)?);
        }
        for i in 0..ordinary {
            pods.push(bench_pod(&format!("ord-{i:05}"), &[], i % 2 == 0)?);
        }
        let seeded_in = seed(&sim, pods).await?;
        settle(&sim).await;
        eprintln!("cost: seeded in {}", fmt_d(seeded_in));

        // Expiring pods were created in the first second(s) of seeding; their deadline lands
        // in the middle of the churn.
        let from_creation = after(SystemTime::now(), seeding_started) + Duration::from_secs(1);
        let expiring_deadline =
            from_creation + Duration::from_secs(3) + Duration::from_secs(args.churn_seconds / 2);
        let dir = tempfile::tempdir().context("creating a temporary directory")?;
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig, GUARD_USER)?;
        let listen = free_port()?;
        let config_path = dir.path().join("config.yaml");
        let config = format!(
            "mechanism: schedulingGates\n\
             initializers:\n\
             \x20 - name: {SLOW_GATE}\n    deadline: 1h\n    owner: {{ deployment: kube-system/{OWNER} }}\n\
             \x20 - name: {EXPIRING_GATE}\n    deadline: {}s\n\
             leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, leaseDuration: 15s }}\n\
             listen: {listen}\n",
            expiring_deadline.as_secs()
        );
        std::fs::write(&config_path, &config)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let log_path = dir.path().join("guard.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;

        sim.clear_requests();
        let spawned_wall = SystemTime::now();
        let spawned = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_initguard"))
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--log-format")
            .arg("json")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting `initguard run`")?;
        let mut guard = GuardProcess {
            pid: child.id().to_string(),
            child,
        };
        let mut peak_sampled = 0u64;
        let ready_in = loop {
            if !guard.alive() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                bail!("initguard run exited before it was ready; log:\n{log}");
            }
            if let Ok(rss) = guard.rss() {
                peak_sampled = peak_sampled.max(rss);
            }
            if matches!(http_get(listen, "/readyz"), Ok((200, _))) {
                break spawned.elapsed();
            }
            if spawned.elapsed() > Duration::from_secs(120) {
                bail!("initguard run not ready after 120 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let ready_wall = SystemTime::now();
        let cpu_ready = guard.cpu()?;
        let rss_ready = guard.rss()?;
        eprintln!("cost: guard ready in {}", fmt_d(ready_in));

        // Churn: label updates on ordinary pods at a steady rate.
        let churn_api: Api<Pod> = Api::namespaced(sim.client(CHURN_USER), NS);
        let mut tick = tokio::time::interval(Duration::from_secs(1) / args.churn_rate as u32);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut tasks = tokio::task::JoinSet::new();
        let mut sent = 0u64;
        let churn_total = args.churn_seconds * args.churn_rate;
        let mut next_sample = Instant::now();
        while sent < churn_total {
            tick.tick().await;
            let api = churn_api.clone();
            let name = format!("ord-{:05}", (sent as usize * 7919) % ordinary);
            let patch = json!({ "metadata": { "labels": { "churn": sent.to_string() } } });
            tasks.spawn(async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(drop)
            });
            sent += 1;
            if Instant::now() >= next_sample {
                if let Ok(rss) = guard.rss() {
                    peak_sampled = peak_sampled.max(rss);
                }
                next_sample += Duration::from_secs(1);
            }
        }
        let mut churn_errors = 0;
        while let Some(r) = tasks.join_next().await {
            if !matches!(r, Ok(Ok(()))) {
                churn_errors += 1;
            }
        }

        // Every expiring gate must have been bypassed before the quiet window.
        let expected = expiring as u64;
        let wait_until = Instant::now() + Duration::from_secs(30);
        let mut bypassed = bypasses_total(listen)?;
        while bypassed < expected && Instant::now() < wait_until {
            tokio::time::sleep(Duration::from_millis(200)).await;
            bypassed = bypasses_total(listen)?;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        let quiet_from = SystemTime::now();
        let cpu_quiet_from = guard.cpu()?;
        tokio::time::sleep(Duration::from_secs(args.quiet_seconds)).await;
        let quiet_until = SystemTime::now();
        let cpu_quiet = guard.cpu()?.saturating_sub(cpu_quiet_from);
        let rss_end = guard.rss()?;
        let peak = guard.peak_rss()?.max(peak_sampled);
        let bypassed = bypasses_total(listen)?;
        let alive = guard.alive();
        guard.stop().await;
        let requests = sim.requests();
        let history = sim.object_history();
        let counts = sim.counts();
        sim.shutdown().await;
        if !alive {
            bail!("initguard run died during the benchmark");
        }
        let logged: u64 = counts.values().sum();
        let truncated = (requests.len() as u64) < logged;

        // Requests by the guard, per phase.
        let mut phases: [Phase; 3] = Default::default();
        phases[0].cpu = cpu_ready;
        phases[0].wall = ready_in;
        phases[1].cpu = cpu_quiet_from.saturating_sub(cpu_ready);
        phases[1].wall = after(quiet_from, ready_wall);
        phases[2].cpu = cpu_quiet;
        phases[2].wall = after(quiet_until, quiet_from);
        let mut quiet_other = 0u64;
        let mut quiet_lease = 0u64;
        let mut patches = 0u64;
        let mut pod_lists: Vec<SystemTime> = Vec::new();
        for r in requests.iter().filter(|r| r.user == GUARD_USER) {
            if r.verb == "list" && r.resource == "pods" && r.time < ready_wall {
                pod_lists.push(r.time);
            }
            let phase = if r.time < ready_wall {
                0
            } else if r.time < quiet_from {
                1
            } else if r.time < quiet_until {
                2
            } else {
                continue;
            };
            let key = if r.resource.is_empty() {
                format!("{} {}", r.verb, r.path)
            } else {
                format!("{} {}", r.verb, r.resource)
            };
            *phases[phase].requests.entry(key).or_default() += 1;
            if r.verb == "patch" && r.resource == "pods" {
                patches += 1;
            }
            if phase == 2 {
                if r.resource == "leases" && (r.verb == "get" || r.verb == "update") {
                    quiet_lease += 1;
                } else {
                    quiet_other += 1;
                }
            }
        }
        let removals = guard_removals(&history)
            .into_iter()
            .filter(|(t, _, _)| *t >= spawned_wall)
            .count() as u64;

        println!("## 3. Cost at scale: `initguard run` as a child process\n");
        println!("{}\n", machine_line());
        println!(
            "{total} pods in the simulated API server (in this process): {waiting} opted-in \
             pods gated by `{SLOW_GATE}`, whose owner Deployment is healthy but never removes \
             the gate (deadline 1h), {expiring} of them also gated by `{EXPIRING_GATE}` \
             (deadline {}s, expiring mid-churn); {ordinary} ordinary running pods. Seeded in \
             {} before the guard starts. Then {} label updates/s on ordinary pods for {} s, \
             then {} quiet seconds. The guard runs with leader election (Lease \
             kube-system/initguard, 15 s). RSS from /proc/PID/status, CPU from \
             /proc/PID/stat (utime + stime).\n",
            expiring_deadline.as_secs(),
            fmt_d(seeded_in),
            args.churn_rate,
            args.churn_seconds,
            args.quiet_seconds,
        );
        let ready_goal = ready_in <= Duration::from_secs(3);
        let rss_goal = peak <= 64 * 1_048_576;
        let quiet_goal = quiet_other == 0;
        let patch_goal = patches == bypassed && bypassed == removals && removals == expected;
        let what = |figure: &str| format!("cost, {total} pods: {figure}");
        record_goal(
            what("time to /readyz 200"),
            fmt_d(ready_in),
            "≤ 3 s".to_string(),
            ready_goal,
        );
        record_goal(
            what("peak RSS"),
            mib(peak),
            "≤ 64 MiB".to_string(),
            rss_goal,
        );
        record_goal(
            what("quiet-window requests other than lease get/update"),
            quiet_other.to_string(),
            "0".to_string(),
            quiet_goal,
        );
        record_goal(
            what("PATCH / bypasses / removals"),
            format!("{patches} / {bypassed} / {removals}"),
            format!("all equal to {expected}"),
            patch_goal,
        );
        println!("| figure | value | goal |");
        println!("| --- | ---: | --- |");
        println!(
            "| time to /readyz 200 (from spawn, lists {total} pods) | {} | ≤ 3 s: {} |",
            fmt_d(ready_in),
            verdict(ready_goal)
        );
        println!(
            "| peak RSS (VmHWM) | {} | ≤ 64 MiB: {} |",
            mib(peak),
            verdict(rss_goal)
        );
        if let (Some(first), Some(last)) = (pod_lists.iter().min(), pod_lists.iter().max()) {
            println!(
                "| initial pod list within that: {} pages, requested from {} to {} after spawn \
                 | {} | |",
                pod_lists.len(),
                fmt_d(after(*first, spawned_wall)),
                fmt_d(after(*last, spawned_wall)),
                fmt_d(after(*last, *first)),
            );
        }
        println!("| RSS when ready | {} | |", mib(rss_ready));
        println!("| RSS at the end | {} | |", mib(rss_end));
        println!("| CPU until ready | {} | |", fmt_cpu(phases[0].cpu));
        println!(
            "| CPU during churn + bypasses ({} wall, {} updates sent, {churn_errors} failed) | \
             {} ({:.1}% of one core) | |",
            fmt_d(phases[1].wall),
            churn_total,
            fmt_cpu(phases[1].cpu),
            100.0 * phases[1].cpu.as_secs_f64() / phases[1].wall.as_secs_f64().max(0.001),
        );
        println!(
            "| CPU in the quiet window ({} s) | {} | |",
            args.quiet_seconds,
            fmt_cpu(phases[2].cpu)
        );
        println!(
            "| requests in the quiet window other than lease get/update | {quiet_other} | 0: {} |",
            verdict(quiet_goal)
        );
        println!("| lease get/update in the quiet window | {quiet_lease} | |");
        println!(
            "| PATCH pods / bypasses (metric) / gate removals (store) | {patches} / {bypassed} / \
             {removals} | equal, = {expected}: {} |",
            verdict(patch_goal)
        );
        println!();
        println!(
            "Requests by the guard's user ({GUARD_USER}) per phase; watches count once, when \
             opened{}:\n",
            if truncated {
                " (the request log overflowed: counts are a lower bound)"
            } else {
                ""
            }
        );
        println!("| verb resource | until ready | churn + bypasses | quiet |");
        println!("| --- | ---: | ---: | ---: |");
        let keys: BTreeSet<&String> = phases.iter().flat_map(|p| p.requests.keys()).collect();
        for key in keys {
            let n = |i: usize| phases[i].requests.get(key).copied().unwrap_or(0);
            println!("| {key} | {} | {} | {} |", n(0), n(1), n(2));
        }
        println!(
            "| **total** | {} | {} | {} |",
            phases[0].requests.values().sum::<u64>(),
            phases[1].requests.values().sum::<u64>(),
            phases[2].requests.values().sum::<u64>()
        );
        println!();
        Ok(())
    }
}
