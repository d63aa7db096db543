//! The guard on a real API server (tests/testbed/: etcd, kube-apiserver, controller-manager,
//! scheduler of the pinned Kubernetes version) beside the simulated one, every figure measured
//! on both in one run (see benches/README.md):
//!
//! a. Burst: N opted-in pods gated by one gate whose owner (a pod selector) goes down; the time
//!    for `initguard run` to remove every gate, divided by the time a bare client needs to send
//!    the same JSON Patches with the same concurrency to the same server. Runs alternate.
//! b. Trigger → gate removed per pod, from the burst runs of 1,000 pods.
//! c. `initguard run` against a large cluster: time to ready and RSS.
//! d. Idle API requests per minute.
//! e. (`--two`, section 8 of the report) Two initializers per pod, one dead owner: one patch
//!    each, on a real 1.13 server and the current one, beside the simulator (`real/two.rs`).
//! f. (`--pile`, section 9 of the report) Section 1's pileup on the real 1.13 server: a 60 s
//!    initializer outage under the real job controller, without and with the guard
//!    (`real/pile.rs`).
//!
//! Times are the servers' own: the audit log (`stageTimestamp` of ResponseComplete) of the
//! real server, the request log of the simulator. Prints Markdown on stdout, progress on
//! stderr. Usage: `cargo bench --bench real -- [--quick] [--two [--legacy-only]] [--pile]
//! [--sizes N,N] [--runs N,N] [--scale-pods N] [--idle-seconds N]`. Without a built test bed it fails with the command
//! that builds it.

use initguard_test_support::testbed;

use std::collections::BTreeMap;
use std::io::{BufRead as _, Seek as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt, stream};
use initguard::bypass::{BypassTarget, Removal, bypass_patch};
use initguard::config::{DEFAULT_MAX_IN_FLIGHT, Mechanism};
use initguard::policy::Reason;
use initguard_test_support::cpu::process_cpu_time;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_sim::{Sim, SimOptions};
use serde_json::{Value, json};

use testbed::{OPT_IN, Testbed};

#[path = "real/pile.rs"]
mod pile;
#[path = "real/pile_gates.rs"]
mod pile_gates;
#[path = "real/two.rs"]
mod two;

/// The gate of every burst pod; its owner is the pod labelled `app=OWNER`.
const GATE: &str = "burst.example.com";
/// The gate of the waiting pods of the scale scenario: a deadline of an hour, no owner.
const SLOW_GATE: &str = "slow.example.com";
const OWNER: &str = "bench-owner";
/// No such scheduler runs: pods stay unbound, so deleting them needs no kubelet, and the
/// scheduler's own writes do not load the server during a burst.
const NO_SCHEDULER: &str = "initguard-bench-none";
/// The simulator's user for the guard and the bare client (it does not enforce RBAC).
const SIM_GUARD_USER: &str = "system:serviceaccount:kube-system:initguard";
const SEED_CONCURRENCY: usize = 32;

struct Args {
    sizes: Vec<usize>,
    /// Rounds per size (one value: every size).
    runs: Vec<usize>,
    scale_pods: usize,
    idle_seconds: u64,
    /// Section e only (`--two`); without the current server's gates (`--legacy-only`).
    two: bool,
    legacy_only: bool,
    /// Pods per steady-arrival run of section e (0: none).
    steady_pods: usize,
    /// Section e without the simulator.
    real_only: bool,
    /// Section e on the current servers only.
    gates_only: bool,
    /// Section f only (`--pile`): the pileup on the real 1.13 server, with `jobs` Jobs.
    pile: bool,
    /// Section g only (`--pile-gates`): the gated pileup on the current server with a real
    /// node, with `jobs` Jobs.
    pile_gates: bool,
    jobs: usize,
}

const USAGE: &str =
    "usage: real [--quick] [--two [--legacy-only]] [--pile [--jobs N]] [--pile-gates [--jobs N]] [--sizes N,N] [--runs N,N] [--scale-pods N] [--idle-seconds N]
  defaults: --sizes 1000,10000 --runs 9,5 --scale-pods 50000 --idle-seconds 60
  --pile    only section f: the pileup of a 60 s initializer outage on the real 1.13 server,
            without the guard, with a deadline, with the owner check (--jobs N Jobs, default 50)
  --pile-gates  only section g: the same with scheduling gates on the current server and a
            real node (tests/testbed/up --node, as root): Jobs run to completion on the kubelet
            (--jobs N ≤ 100, default 50)
  --two     only section e: two initializers per pod, one dead owner, on the 1.13 test bed
            (legacy initializers) and the current one (gates), each beside the simulator
            (--legacy-only: the 1.13 servers only; --gates-only: the current ones only;
            --real-only: no simulator; --steady-pods N
            per steady-arrival run, default 2000; --no-steady: none; --no-burst: steady only)
  (--runs: rounds per size, in --sizes order; one value for every size. Short bursts are
   noisier, so the small size gets more rounds.)
  --quick   --sizes 1000 --runs 3 --scale-pods 5000 --idle-seconds 20";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        sizes: vec![1_000, 10_000],
        runs: vec![9, 5],
        scale_pods: 50_000,
        idle_seconds: 60,
        two: false,
        legacy_only: false,
        steady_pods: 2_000,
        real_only: false,
        gates_only: false,
        pile: false,
        pile_gates: false,
        jobs: 50,
    };
    let mut it = std::env::args().skip(1);
    // Applied after parsing, so that a later --sizes or --quick cannot bring bursts back.
    let mut no_burst = false;
    let number = |name: &str, v: Option<String>| -> Result<usize, String> {
        v.and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{name} needs a positive number"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => {
                args.sizes = vec![1_000];
                args.runs = vec![3];
                args.scale_pods = 5_000;
                args.idle_seconds = 20;
            }
            "--sizes" => {
                let v = it.next().ok_or("--sizes needs a value")?;
                args.sizes = v
                    .split(',')
                    .map(|s| number("--sizes", Some(s.to_owned())))
                    .collect::<Result<_, _>>()?;
            }
            "--runs" => {
                let v = it.next().ok_or("--runs needs a value")?;
                args.runs = v
                    .split(',')
                    .map(|s| number("--runs", Some(s.to_owned())))
                    .collect::<Result<_, _>>()?;
            }
            "--two" => args.two = true,
            "--legacy-only" => args.legacy_only = true,
            "--steady-pods" => args.steady_pods = number("--steady-pods", it.next())?,
            "--no-steady" => args.steady_pods = 0,
            "--no-burst" => no_burst = true,
            "--real-only" => args.real_only = true,
            "--gates-only" => args.gates_only = true,
            "--pile" => args.pile = true,
            "--pile-gates" => args.pile_gates = true,
            "--jobs" => args.jobs = number("--jobs", it.next())?,
            "--scale-pods" => args.scale_pods = number("--scale-pods", it.next())?,
            "--idle-seconds" => args.idle_seconds = number("--idle-seconds", it.next())? as u64,
            // cargo bench passes --bench.
            "--bench" => {}
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if no_burst {
        if !args.two {
            return Err(format!(
                "--no-burst is for --two (steady arrivals)\n{USAGE}"
            ));
        }
        args.sizes = Vec::new();
        args.runs = vec![1];
    }
    if args.runs.len() != 1 && args.runs.len() != args.sizes.len() {
        return Err(format!(
            "--runs takes one value or one per size ({} sizes)\n{USAGE}",
            args.sizes.len()
        ));
    }
    Ok(args)
}

impl Args {
    /// Rounds for the `i`th size.
    fn rounds(&self, i: usize) -> usize {
        self.runs.get(i).or(self.runs.first()).copied().unwrap_or(5)
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if (args.pile || (args.two && !args.gates_only))
        && let Some(why) = testbed::not_built_version(testbed::Version::Legacy)
    {
        eprintln!("real: the 1.13 test bed is not built: {why}");
        return ExitCode::FAILURE;
    }
    if let Some(why) = testbed::not_built() {
        eprintln!("real: the test bed is not built: {why}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("real: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("real: {e:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The two servers
// ---------------------------------------------------------------------------------------------

/// One request as the server recorded it.
#[derive(Debug, Clone)]
struct Req {
    user: String,
    verb: String,
    /// `pods`, `pods/status`, `events`, `leases`…
    resource: String,
    namespace: String,
    name: String,
    code: u16,
    /// When the request arrived (`requestReceivedTimestamp`).
    received: SystemTime,
    /// Real server: the audit log's `stageTimestamp` of ResponseComplete. Simulator: when the
    /// request arrived (it answers in-process within microseconds).
    done: SystemTime,
}

enum Server {
    Sim {
        sim: Sim,
        dir: tempfile::TempDir,
    },
    Real {
        tb: Testbed,
        /// Bytes of the audit log already read.
        audit_offset: u64,
    },
}

impl Server {
    fn label(&self) -> &'static str {
        match self {
            Server::Sim { .. } => "simulator",
            Server::Real { .. } => "real",
        }
    }

    fn guard_user(&self) -> &'static str {
        match self {
            Server::Sim { .. } => SIM_GUARD_USER,
            Server::Real { .. } => testbed::GUARD_USER,
        }
    }

    fn dir(&self) -> &Path {
        match self {
            Server::Sim { dir, .. } => dir.path(),
            Server::Real { tb, .. } => &tb.dir,
        }
    }

    fn guard_kubeconfig(&self) -> PathBuf {
        match self {
            Server::Sim { dir, .. } => dir.path().join("initguard.kubeconfig"),
            Server::Real { tb, .. } => tb.kubeconfig("initguard"),
        }
    }

    fn admin_kubeconfig(&self) -> PathBuf {
        match self {
            Server::Sim { dir, .. } => dir.path().join("admin.kubeconfig"),
            Server::Real { tb, .. } => tb.kubeconfig("admin"),
        }
    }

    /// Processes that serve the API: the simulator is this process; the real server is
    /// kube-apiserver and etcd.
    fn server_pids(&self) -> Vec<u32> {
        match self {
            Server::Sim { .. } => vec![std::process::id()],
            Server::Real { tb, .. } => ["kube-apiserver", "etcd"]
                .iter()
                .filter_map(|c| std::fs::read_to_string(tb.dir.join(format!("pids/{c}.pid"))).ok())
                .filter_map(|p| p.trim().parse().ok())
                .collect(),
        }
    }

    fn server_cpu(&self) -> Duration {
        self.server_pids().into_iter().map(process_cpu_time).sum()
    }

    /// Requests the server recorded since the last call.
    fn take_requests(&mut self) -> Result<Vec<Req>> {
        match self {
            Server::Sim { sim, .. } => {
                let out = sim
                    .take_requests()
                    .into_iter()
                    .map(|r| Req {
                        user: r.user,
                        verb: r.verb,
                        resource: r.resource,
                        namespace: r.namespace.unwrap_or_default(),
                        name: r.name.unwrap_or_default(),
                        code: r.status,
                        received: r.time,
                        done: r.time,
                    })
                    .collect();
                Ok(out)
            }
            Server::Real { tb, audit_offset } => {
                let path = tb.dir.join("audit.log");
                let mut file = std::fs::File::open(&path)
                    .with_context(|| format!("opening {}", path.display()))?;
                file.seek(std::io::SeekFrom::Start(*audit_offset))?;
                let mut reader = std::io::BufReader::new(file);
                let mut out = Vec::new();
                let mut line = String::new();
                loop {
                    line.clear();
                    let n = reader.read_line(&mut line)?;
                    // A line still being written is read next time.
                    if n == 0 || !line.ends_with('\n') {
                        break;
                    }
                    *audit_offset += n as u64;
                    let v: Value = serde_json::from_str(&line)
                        .with_context(|| format!("audit line {line:?}"))?;
                    if v["stage"] != "ResponseComplete" {
                        continue;
                    }
                    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
                    let time = |p: &str| -> Result<SystemTime> {
                        let t: jiff::Timestamp = s(p)
                            .parse()
                            .with_context(|| format!("audit {p} in {line:?}"))?;
                        Ok(SystemTime::from(t))
                    };
                    let mut resource = s("/objectRef/resource").to_owned();
                    if !s("/objectRef/subresource").is_empty() {
                        resource = format!("{resource}/{}", s("/objectRef/subresource"));
                    }
                    out.push(Req {
                        user: s("/user/username").to_owned(),
                        verb: s("/verb").to_owned(),
                        resource,
                        namespace: s("/objectRef/namespace").to_owned(),
                        name: s("/objectRef/name").to_owned(),
                        code: v
                            .pointer("/responseStatus/code")
                            .and_then(Value::as_u64)
                            .unwrap_or(0) as u16,
                        received: time("/requestReceivedTimestamp")?,
                        done: time("/stageTimestamp")?,
                    });
                }
                Ok(out)
            }
        }
    }
}

/// The client configuration of the kubeconfig at `path`.
async fn config_of(path: &Path) -> Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("kubeconfig {}", path.display()))
}

async fn client_of(path: &Path) -> Result<kube::Client> {
    let mut config = config_of(path).await?;
    // Seeding 50,000 pods takes longer than the default read timeout allows per list.
    config.read_timeout = Some(Duration::from_secs(300));
    kube::Client::try_from(config).context("building a client")
}

async fn start_sim() -> Result<Server> {
    start_sim_with(SimOptions {
        mechanism: Mechanism::SchedulingGates,
        ..SimOptions::default()
    })
    .await
}

/// The simulator with `options`, its logs sized for the benchmark, and the kubeconfigs of the
/// guard and the admin in a fresh directory.
async fn start_sim_with(options: SimOptions) -> Result<Server> {
    let sim = Sim::start(SimOptions {
        request_log_limit: 2_000_000,
        change_log_limit: 10_000,
        ..options
    })
    .await?;
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    sim.write_kubeconfig(&dir.path().join("initguard.kubeconfig"), SIM_GUARD_USER)?;
    sim.write_kubeconfig(&dir.path().join("admin.kubeconfig"), "admin")?;
    std::fs::create_dir_all(dir.path().join("logs"))?;
    Ok(Server::Sim { sim, dir })
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn fmt_d(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

fn after(t: SystemTime, since: SystemTime) -> Duration {
    t.duration_since(since).unwrap_or_default()
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn vm_hwm(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| anyhow!("no VmHWM in /proc/{pid}/status"))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Polls `check` every 200 ms until it yields, failing after `timeout` with `what`.
async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn bench_pod(name: &str, gate: Option<&str>, opted_in: bool) -> Result<Pod> {
    let mut labels = json!({ "app": "bench" });
    if opted_in {
        labels[OPT_IN] = json!("true");
    }
    let gates: Vec<Value> = gate.iter().map(|g| json!({ "name": g })).collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "schedulingGates": gates,
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } },
            }],
        },
    }))?)
}

async fn create_namespace(admin: &kube::Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Creates `pods` in `ns` with [`SEED_CONCURRENCY`] requests in flight.
async fn seed(admin: &kube::Client, ns: &str, pods: Vec<Pod>) -> Result<Duration> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let start = Instant::now();
    stream::iter(pods.into_iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(SEED_CONCURRENCY, |pod| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &pod)
                    .await
                    .with_context(|| format!("creating pod {:?}", pod.metadata.name))?;
                Ok(())
            }
        })
        .await?;
    Ok(start.elapsed())
}

/// Deletes every pod of `ns` and waits until none is left.
async fn clear_namespace(admin: &kube::Client, ns: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    api.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await
    .with_context(|| format!("deleting the pods of {ns}"))?;
    wait_for(
        &format!("the pods of {ns} to be gone"),
        Duration::from_secs(600),
        async || {
            Ok(api
                .list(&ListParams::default().limit(1))
                .await?
                .items
                .is_empty()
                .then_some(()))
        },
    )
    .await
}

/// An owner pod marked Ready through the status subresource (the test bed runs no kubelet).
async fn ready_owner(admin: &kube::Client, ns: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": OWNER, "labels": { "app": OWNER } },
        "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
    }))?;
    api.create(&PostParams::default(), &pod)
        .await
        .context("creating the owner pod")?;
    mark_owner_ready(admin, ns).await
}

/// The owner pod of `ns` marked Ready through the status subresource.
async fn mark_owner_ready(admin: &kube::Client, ns: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = json!({ "status": {
        "phase": "Running",
        "conditions": [
            { "type": "Ready", "status": "True", "lastTransitionTime": now },
            { "type": "ContainersReady", "status": "True", "lastTransitionTime": now },
        ],
    }});
    api.patch_status(OWNER, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .context("marking the owner pod Ready")?;
    Ok(())
}

/// `initguard run` as a child process; SIGKILLed on drop.
struct GuardChild {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl GuardChild {
    fn spawn(server: &Server, name: &str, config: &str) -> Result<GuardChild> {
        let port = testbed::free_port();
        let path = server.dir().join(format!("{name}.config.yaml"));
        std::fs::write(&path, format!("listen: 127.0.0.1:{port}\n{config}"))
            .with_context(|| format!("writing {}", path.display()))?;
        let log = server.dir().join(format!("logs/{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_initguard"))
            .arg("run")
            .arg("--config")
            .arg(&path)
            .arg("--kubeconfig")
            .arg(server.guard_kubeconfig())
            .env("POD_NAME", name)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting initguard run")?;
        Ok(GuardChild { child, port, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn get(&self, path: &str) -> Result<(u16, String)> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        initguard_test_support::http::try_get(addr, path, Duration::from_secs(5))
            .await
            .map_err(|e| anyhow!(e))
    }

    /// Waits for /readyz 200; how long it took since `since`.
    async fn ready(&mut self, since: Instant) -> Result<Duration> {
        let timeout = Duration::from_secs(600);
        loop {
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                bail!("initguard run exited ({status}) before it was ready:\n{log}");
            }
            if let Ok((200, _)) = self.get("/readyz").await {
                return Ok(since.elapsed());
            }
            if since.elapsed() > timeout {
                bail!("initguard run not ready within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Result<f64> {
        let (status, body) = self.get("/metrics").await?;
        if status != 200 {
            bail!("/metrics answered {status}");
        }
        Ok(initguard_test_support::metrics::sum(&body, name, labels))
    }

    fn stop(mut self) -> Result<()> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if log.contains("panicked") {
            bail!("initguard run panicked:\n{log}");
        }
        Ok(())
    }
}

impl Drop for GuardChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// a + b: burst
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Guard,
    Bare,
    /// The bare client while a watch on every pod is open by the same identity (drained,
    /// nothing done with it): what the server spends feeding any watching controller.
    BareWatch,
}

struct Burst {
    server: &'static str,
    pods: usize,
    run: usize,
    mode: Mode,
    /// Trigger (guard: the owner pod's deletion received; bare: just before its first
    /// request) → the last gate-removing patch committed.
    span: Duration,
    /// Trigger → each gate removed (guard runs only).
    latencies: Vec<Duration>,
    patches: usize,
    events: usize,
    client_cpu: Duration,
    server_cpu: Duration,
}

fn guard_config(ns: &str) -> String {
    format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: false }}\nunlistedInitializers: ignore\n\
         initializers:\n\
         \x20 - name: {GATE}\n    deadline: 1h\n    ownerDownGrace: 0s\n\
         \x20   owner: {{ pods: {{ namespace: {ns}, selector: app={OWNER} }} }}\n"
    )
}

/// The successful `verb resource` requests of `user` in `ns`.
fn succeeded<'a>(
    seen: &'a [Req],
    user: &'a str,
    verb: &'a str,
    resource: &'a str,
    ns: &'a str,
) -> impl Iterator<Item = &'a Req> {
    seen.iter().filter(move |r| {
        r.user == user
            && r.verb == verb
            && r.resource == resource
            && r.namespace == ns
            && (200..300).contains(&r.code)
    })
}

async fn burst(server: &mut Server, pods: usize, run: usize, mode: Mode) -> Result<Burst> {
    let admin = client_of(&server.admin_kubeconfig()).await?;
    let ns = format!(
        "burst-{pods}-{run}-{}",
        match mode {
            Mode::Guard => "g",
            Mode::Bare => "b",
            Mode::BareWatch => "w",
        }
    );
    create_namespace(&admin, &ns).await?;
    ready_owner(&admin, &ns).await?;
    let seeded: Vec<Pod> = (0..pods)
        .map(|i| bench_pod(&format!("p-{i:05}"), Some(GATE), true))
        .collect::<Result<_>>()?;
    let seed_time = seed(&admin, &ns, seeded).await?;
    eprintln!(
        "  {} {pods} pods run {run} {mode:?}: seeded in {}",
        server.label(),
        fmt_d(seed_time)
    );
    let user = server.guard_user().to_owned();
    let mut guard = None;
    let api: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let mut bare_patches = Vec::new();
    let mut watching = None;
    if mode == Mode::BareWatch {
        let client = client_of(&server.guard_kubeconfig()).await?;
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let mut synced_tx = Some(synced_tx);
        let stream = kube::runtime::watcher(Api::<Pod>::all(client), Default::default());
        watching = Some(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(kube::runtime::watcher::Event::InitDone) = event
                    && let Some(tx) = synced_tx.take()
                {
                    let _ = tx.send(());
                }
            }
        }));
        tokio::time::timeout(Duration::from_secs(300), synced)
            .await
            .context("the pod watch did not finish its initial list")?
            .context("the pod watch ended")?;
    }
    if mode == Mode::Guard {
        let mut child = GuardChild::spawn(server, &ns, &guard_config(&ns))?;
        child.ready(Instant::now()).await?;
        // Sync points only (the judge is the server's record): every pod tracked, owner up.
        wait_for(
            "the guard to track every pod and see its owner up",
            Duration::from_secs(300),
            async || {
                let waiting = child.metric("initguard_waiting_pods", &[]).await?;
                let up = child
                    .metric("initguard_owner_up", &[("initializer", GATE)])
                    .await?;
                Ok((waiting >= pods as f64 && up == 1.0).then_some(()))
            },
        )
        .await?;
        guard = Some(child);
    } else {
        // The bare client builds the same patches from one list, before the clock starts.
        for pod in api.list(&ListParams::default()).await?.items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if name == OWNER {
                continue;
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let rv = pod.metadata.resource_version.clone().unwrap_or_default();
            let target = BypassTarget {
                uid: &uid,
                resource_version: &rv,
                annotations_present: pod.metadata.annotations.is_some(),
                previous_record: None,
                opt_in_label: Some((OPT_IN, "true")),
            };
            let removal = Removal {
                index: 0,
                initializer: GATE,
                reason: Reason::OwnerDown,
            };
            let patch = bypass_patch(
                Mechanism::SchedulingGates,
                &target,
                &[removal],
                SystemTime::now(),
            );
            bare_patches.push((name, patch));
        }
    }
    server.take_requests()?;
    let server_cpu0 = server.server_cpu();
    let client_pid = guard.as_ref().map_or(std::process::id(), GuardChild::pid);
    let client_cpu0 = process_cpu_time(client_pid);

    let started = SystemTime::now();
    match mode {
        Mode::Guard => {
            api.delete(OWNER, &DeleteParams::default().grace_period(0))
                .await
                .context("deleting the owner pod")?;
        }
        Mode::Bare | Mode::BareWatch => send_bare(server, &ns, bare_patches).await?,
    }
    let mut seen = Vec::new();
    let count = |seen: &[Req], verb: &str, resource: &str| {
        succeeded(seen, &user, verb, resource, &ns).count()
    };
    wait_for(
        &format!("{pods} gate-removing patches by {user} in {ns}"),
        Duration::from_secs(600),
        async || {
            seen.extend(server.take_requests()?);
            Ok((count(&seen, "patch", "pods") >= pods).then_some(()))
        },
    )
    .await?;
    if let Some(child) = &guard {
        // The Events trail the patches; count them too.
        let waited = wait_for(
            &format!("{pods} Events in {ns}"),
            Duration::from_secs(120),
            async || {
                seen.extend(server.take_requests()?);
                Ok((count(&seen, "create", "events") >= pods).then_some(()))
            },
        )
        .await;
        if let Err(e) = waited {
            let mut tally: BTreeMap<String, usize> = BTreeMap::new();
            for r in &seen {
                *tally
                    .entry(format!(
                        "{} {} {} {} {}",
                        r.user, r.verb, r.resource, r.namespace, r.code
                    ))
                    .or_default() += 1;
            }
            let log = std::fs::read_to_string(&child.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            bail!(
                "{e}: requests seen: {tally:#?}\nguard log (last lines, newest first):\n{}",
                tail.join("\n")
            );
        }
    }
    let client_cpu = process_cpu_time(client_pid).saturating_sub(client_cpu0);
    let server_cpu = server.server_cpu().saturating_sub(server_cpu0);
    if let Some(child) = guard.take() {
        child.stop()?;
    }
    if let Some(task) = watching {
        task.abort();
    }

    let trigger = match mode {
        Mode::Guard => seen
            .iter()
            .find(|r| {
                r.verb == "delete" && r.resource == "pods" && r.name == OWNER && r.namespace == ns
            })
            // When it arrived: its ResponseComplete may be stamped after the watch event
            // already went out (and the guard acted on it).
            .map(|r| r.received)
            .ok_or_else(|| anyhow!("the owner pod's deletion is not in the server's record"))?,
        Mode::Bare | Mode::BareWatch => started,
    };
    let mut latencies: Vec<Duration> = succeeded(&seen, &user, "patch", "pods", &ns)
        .map(|r| after(r.done, trigger))
        .collect();
    latencies.sort();
    let span = latencies.last().copied().unwrap_or_default();
    let events = count(&seen, "create", "events");
    clear_namespace(&admin, &ns).await?;
    Ok(Burst {
        server: server.label(),
        pods,
        run,
        mode,
        span,
        patches: latencies.len(),
        latencies: if mode == Mode::Guard {
            latencies
        } else {
            Vec::new()
        },
        events,
        client_cpu,
        server_cpu,
    })
}

/// The bare client: `patches` sent as the guard's identity, [`DEFAULT_MAX_IN_FLIGHT`] at once.
async fn send_bare(
    server: &Server,
    ns: &str,
    patches: Vec<(String, json_patch::Patch)>,
) -> Result<()> {
    let client = client_of(&server.guard_kubeconfig()).await?;
    let bare: Api<Pod> = Api::namespaced(client, ns);
    stream::iter(patches)
        .map(|(name, patch)| {
            let bare = bare.clone();
            async move {
                bare.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
                    .await
                    .with_context(|| format!("bare patch of {name}"))
            }
        })
        .buffer_unordered(DEFAULT_MAX_IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// c + d: scale and idle traffic
// ---------------------------------------------------------------------------------------------

struct Scale {
    pods: usize,
    seed_time: Duration,
    ready: Duration,
    rss_ready: u64,
    rss_end: u64,
    idle: Duration,
    idle_cpu: Duration,
    /// verb resource → requests by the guard in the idle window.
    idle_requests: BTreeMap<String, usize>,
}

async fn scale(server: &mut Server, pods: usize, idle: Duration) -> Result<Scale> {
    let admin = client_of(&server.admin_kubeconfig()).await?;
    let ns = "scale";
    create_namespace(&admin, ns).await?;
    let waiting = pods / 10;
    let seeded: Vec<Pod> = (0..pods)
        .map(|i| {
            if i < waiting {
                bench_pod(&format!("w-{i:05}"), Some(SLOW_GATE), true)
            } else {
                bench_pod(&format!("o-{i:05}"), None, false)
            }
        })
        .collect::<Result<_>>()?;
    let seed_time = seed(&admin, ns, seeded).await?;
    eprintln!(
        "  {} scale: {pods} pods seeded in {}",
        server.label(),
        fmt_d(seed_time)
    );
    let config = format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\nunlistedInitializers: ignore\n\
         initializers:\n  - name: {SLOW_GATE}\n    deadline: 1h\n\
         leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, leaseDuration: 15s }}\n"
    );
    let spawned = Instant::now();
    let mut child = GuardChild::spawn(server, "scale", &config)?;
    let ready = child.ready(spawned).await?;
    let rss_ready = vm_hwm(child.pid())?;
    wait_for(
        "the guard to lead and track the waiting pods",
        Duration::from_secs(120),
        async || {
            let leader = child.metric("initguard_is_leader", &[]).await?;
            let tracked = child.metric("initguard_waiting_pods", &[]).await?;
            Ok((leader == 1.0 && tracked >= waiting as f64).then_some(()))
        },
    )
    .await?;
    server.take_requests()?;
    let cpu0 = process_cpu_time(child.pid());
    let window = Instant::now();
    tokio::time::sleep(idle).await;
    let idle_cpu = process_cpu_time(child.pid()).saturating_sub(cpu0);
    let idle_elapsed = window.elapsed();
    let user = server.guard_user();
    let mut idle_requests = BTreeMap::new();
    for r in server
        .take_requests()?
        .into_iter()
        .filter(|r| r.user == user)
    {
        *idle_requests
            .entry(format!("{} {}", r.verb, r.resource))
            .or_insert(0) += 1;
    }
    let rss_end = vm_hwm(child.pid())?;
    child.stop()?;
    // The last phase: the servers go down next, nothing to clean.
    Ok(Scale {
        pods,
        seed_time,
        ready,
        rss_ready,
        rss_end,
        idle: idle_elapsed,
        idle_cpu,
        idle_requests,
    })
}

// ---------------------------------------------------------------------------------------------
// The run and its report
// ---------------------------------------------------------------------------------------------

async fn run(args: Args) -> Result<()> {
    if args.pile {
        return pile::run_pile(args.jobs).await;
    }
    if args.pile_gates {
        return pile_gates::run_pile_gates(args.jobs).await;
    }
    if args.two {
        let rounds: Vec<usize> = (0..args.sizes.len()).map(|i| args.rounds(i)).collect();
        let plan = two::Plan {
            sizes: args.sizes.clone(),
            rounds,
            legacy: !args.gates_only,
            gates: !args.legacy_only,
            simulator: !args.real_only,
            steady_pods: args.steady_pods,
        };
        return two::run_two(&plan).await;
    }
    eprintln!("real: starting the test bed (tests/testbed/up) and the simulator");
    let tb = Testbed::up(env!("CARGO_BIN_EXE_initguard")).map_err(|e| anyhow!(e))?;
    let version = testbed::Version::Current
        .pinned()
        .unwrap_or_else(|_| "?".into());
    let mut servers = [
        start_sim().await?,
        Server::Real {
            tb,
            audit_offset: 0,
        },
    ];
    let mut bursts = Vec::new();
    for (i, &pods) in args.sizes.iter().enumerate() {
        for run in 1..=args.rounds(i) {
            for server in servers.iter_mut() {
                for mode in [Mode::Guard, Mode::Bare, Mode::BareWatch] {
                    let b = burst(server, pods, run, mode).await?;
                    eprintln!(
                        "  {} {pods} run {run} {mode:?}: {} ({} patches, {} Events)",
                        b.server,
                        fmt_d(b.span),
                        b.patches,
                        b.events
                    );
                    bursts.push(b);
                }
            }
        }
    }
    // Printed now: a failure at scale must not lose them.
    report_bursts(&args, &version, &bursts);
    let mut scales = Vec::new();
    for server in servers.iter_mut() {
        scales.push((
            server.label(),
            scale(
                server,
                args.scale_pods,
                Duration::from_secs(args.idle_seconds),
            )
            .await?,
        ));
    }
    report_scale(&args, &scales);
    Ok(())
}

fn report_bursts(args: &Args, version: &str, bursts: &[Burst]) {
    println!("## 5. The real API server beside the simulator");
    println!();
    println!(
        "_`cargo bench --bench real` (benches/real.rs); Kubernetes {version} from tests/testbed/ \
         (etcd, kube-apiserver with audit log, controller-manager, scheduler); {} cores; load \
         average {}_",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    println!();
    println!(
        "Each burst seeds N opted-in pods gated by `{GATE}` whose owner is one pod \
         (`owner: {{ pods: … }}`, `ownerDownGrace: 0s`), starts `initguard run` (maxInFlight \
         {DEFAULT_MAX_IN_FLIGHT}, no leader election) and, once it tracks every pod, deletes \
         the owner pod. The bare client is a loop that sends the same JSON Patches \
         (`initguard::bypass::bypass_patch`, built from one list before its clock starts) \
         with {DEFAULT_MAX_IN_FLIGHT} in flight, as the guard's identity. Guard and bare runs \
         alternate on each server. Times are the server's: the audit log's `stageTimestamp` \
         of each request on the real server, the request log of the simulator. Span: trigger \
         (the owner pod's deletion received by the server; for the bare client, just before its first \
         request) → the last gate removed. The guard also writes one Event per bypass (after \
         the burst), which the bare client does not. A third client, bare + pod watch, is the \
         bare client while a watch on every pod is open by the same identity and drained: the \
         part of the gap that any watching controller costs the server."
    );
    println!();
    println!("### a. Time to remove every gate: guard / bare client");
    println!();
    println!(
        "| server | pods | runs | guard span, median (min–max) | bare span | bare + pod watch span | guard / bare, median (min–max) | goal ≤ 1.1 | (bare + watch) / bare | guard / (bare + watch) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |");
    for server in ["simulator", "real"] {
        for &pods in &args.sizes {
            let spans = |mode: Mode| -> Vec<Duration> {
                bursts
                    .iter()
                    .filter(|b| b.server == server && b.pods == pods && b.mode == mode)
                    .map(|b| b.span)
                    .collect()
            };
            let (guard, bare, watch) = (
                spans(Mode::Guard),
                spans(Mode::Bare),
                spans(Mode::BareWatch),
            );
            // Pairwise: the runs of one round ran back to back.
            let ratios = |a: &[Duration], b: &[Duration]| -> Vec<f64> {
                let mut r: Vec<f64> = a
                    .iter()
                    .zip(b)
                    .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64().max(1e-9))
                    .collect();
                r.sort_by(f64::total_cmp);
                r
            };
            let range = |v: &[Duration]| {
                let mut s: Vec<f64> = v.iter().map(Duration::as_secs_f64).collect();
                let m = median(&mut s);
                format!(
                    "{} ({}–{})",
                    fmt_d(Duration::from_secs_f64(m)),
                    fmt_d(Duration::from_secs_f64(s.first().copied().unwrap_or(0.0))),
                    fmt_d(Duration::from_secs_f64(s.last().copied().unwrap_or(0.0)))
                )
            };
            let with_range = |mut r: Vec<f64>| {
                let m = median(&mut r);
                (
                    m,
                    format!(
                        "{m:.2} ({:.2}–{:.2})",
                        r.first().copied().unwrap_or(f64::NAN),
                        r.last().copied().unwrap_or(f64::NAN)
                    ),
                )
            };
            let (m, guard_bare) = with_range(ratios(&guard, &bare));
            let (_, watch_bare) = with_range(ratios(&watch, &bare));
            let (_, guard_watch) = with_range(ratios(&guard, &watch));
            println!(
                "| {server} | {pods} | {} | {} | {} | {} | **{guard_bare}** | {} | {watch_bare} | {guard_watch} |",
                guard.len().min(bare.len()),
                range(&guard),
                range(&bare),
                range(&watch),
                if m <= 1.1 { "met" } else { "**MISSED**" }
            );
        }
    }
    println!();
    let small = args.sizes.iter().copied().min().unwrap_or(0);
    println!("### b. Trigger → gate removed, {small} pods (every guard run pooled)");
    println!();
    println!("| server | pods removed | p50 | p99 | max | trigger → first removal |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for server in ["simulator", "real"] {
        let mut all: Vec<Duration> = bursts
            .iter()
            .filter(|b| b.server == server && b.pods == small && b.mode == Mode::Guard)
            .flat_map(|b| b.latencies.iter().copied())
            .collect();
        all.sort();
        let first = bursts
            .iter()
            .filter(|b| b.server == server && b.pods == small && b.mode == Mode::Guard)
            .filter_map(|b| b.latencies.first().copied())
            .min()
            .unwrap_or_default();
        println!(
            "| {server} | {} | {} | {} | {} | {} |",
            all.len(),
            fmt_d(percentile(&all, 0.5)),
            fmt_d(percentile(&all, 0.99)),
            fmt_d(all.last().copied().unwrap_or_default()),
            fmt_d(first)
        );
    }
    println!();
    println!("### Every burst run");
    println!();
    println!(
        "Client CPU: the `initguard run` process, or this benchmark process for the bare client \
         (on the simulator that process also serves the API). Server CPU: kube-apiserver + etcd \
         (on the simulator, this whole process), from the trigger until the guard's last Event \
         is written: the guard's rows include its Events and its pod watch."
    );
    println!();
    println!(
        "| server | pods | run | client | span | patches | Events | client CPU / patch | server CPU / patch |"
    );
    println!("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for b in bursts {
        let per =
            |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6 / b.patches.max(1) as f64);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            b.server,
            b.pods,
            b.run,
            match b.mode {
                Mode::Guard => "guard",
                Mode::Bare => "bare",
                Mode::BareWatch => "bare + pod watch",
            },
            fmt_d(b.span),
            b.patches,
            b.events,
            per(b.client_cpu),
            per(b.server_cpu)
        );
    }
    println!();
}

fn report_scale(args: &Args, scales: &[(&str, Scale)]) {
    println!(
        "### c, d. `initguard run` against {} pods: time to ready, RSS, idle traffic",
        args.scale_pods
    );
    println!();
    println!(
        "{} pods in one namespace, one in ten opted in and gated by `{SLOW_GATE}` (deadline 1h), \
         the rest ordinary; the guard runs with leader election. Ready: spawn → /readyz 200. \
         Idle: a window of {} s after it leads and tracks every waiting pod; requests by the \
         guard's user from the server's record, watches counted when opened.",
        args.scale_pods, args.idle_seconds
    );
    println!();
    let (sim, real) = (&scales[0].1, &scales[1].1);
    println!("| figure | simulator | real |");
    println!("| --- | ---: | ---: |");
    println!(
        "| pods seeded in (32 creates in flight) | {} | {} |",
        fmt_d(sim.seed_time),
        fmt_d(real.seed_time)
    );
    println!(
        "| time to ready | {} | {} |",
        fmt_d(sim.ready),
        fmt_d(real.ready)
    );
    println!(
        "| RSS when ready (VmHWM) | {} | {} |",
        mib(sim.rss_ready),
        mib(real.rss_ready)
    );
    println!(
        "| peak RSS at the end | {} | {} |",
        mib(sim.rss_end),
        mib(real.rss_end)
    );
    println!(
        "| CPU in the idle window | {} | {} |",
        fmt_d(sim.idle_cpu),
        fmt_d(real.idle_cpu)
    );
    let per_minute = |s: &Scale, n: usize| n as f64 * 60.0 / s.idle.as_secs_f64();
    let keys: std::collections::BTreeSet<&String> = sim
        .idle_requests
        .keys()
        .chain(real.idle_requests.keys())
        .collect();
    for key in keys {
        let n = |s: &Scale| s.idle_requests.get(key).copied().unwrap_or(0);
        println!(
            "| idle requests/min: {key} | {:.1} | {:.1} |",
            per_minute(sim, n(sim)),
            per_minute(real, n(real))
        );
    }
    let total = |s: &Scale| s.idle_requests.values().sum::<usize>();
    println!(
        "| **idle requests/min, all** | **{:.1}** | **{:.1}** |",
        per_minute(sim, total(sim)),
        per_minute(real, total(real))
    );
    let _ = (sim.pods, real.pods);
}
