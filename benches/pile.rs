//! Deciding a large pile: many waiting pods under ONE controller.
//!
//! 1. In process, no network: the tracker and the policy over N waiting pods of one Job, as the
//!    control loop drives them during an initial list: today's path (take every pod in, then
//!    decide each once at the end of the list) against the former one (re-decide every pod of
//!    the controller on each pod event), which is quadratic.
//! 2. End to end: `N` gated, opted-in pods of one Job in the simulated API server, an in-process
//!    guard with `pileup: {action: bypass}`: time from start until /readyz (initial list taken
//!    in and every pod decided), next to the time one plain LIST of those pods takes.
//!
//! Prints Markdown on stdout. Usage: `cargo bench --bench pile -- [--pods N]` (default 10000).

use initguard_sim::SimClients as _;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow};
use futures::{TryStreamExt, stream};
use initguard::config::{Config, Mechanism};
use initguard::guard::Guard;
use initguard::pod::SlimPod;
use initguard::policy::{self, ControllerRef, Environment, OwnerState};
use initguard::tracker::Tracker;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube_sim::{Sim, SimOptions};
use serde_json::json;

const GATE: &str = "sidecar.example.com";
const NS: &str = "bench";
const JOB_UID: &str = "0b5c5d4e-0000-4000-8000-00000000b00c";
const GUARD_USER: &str = "system:serviceaccount:kube-system:initguard";
const ADMIN: &str = "admin";
/// The former path is quadratic: measure it on smaller piles only.
const FORMER_MAX_PODS: usize = 4000;

fn config_yaml(listen: &str) -> String {
    format!(
        "mechanism: schedulingGates\nlisten: {listen}\noptIn: {{ label: initguard.io/bypass }}\n\
         leaderElection: {{ enabled: false }}\n\
         pileup: {{ threshold: 3, action: bypass, minWait: 1h }}\n\
         initializers:\n  - {{ name: {GATE}, deadline: 2h }}\n"
    )
}

fn pod_json(i: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("backfill-{i:05}"), "namespace": NS, "uid": format!("uid-{i}"),
            "resourceVersion": "1", "creationTimestamp": "2026-11-21T10:00:00Z",
            "labels": { "job-name": "backfill", "initguard.io/bypass": "true" },
            "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "backfill",
                "uid": JOB_UID, "controller": true }],
        },
        "spec": {
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
            "schedulingGates": [{ "name": GATE }],
        },
    })
}

/// Owners up, piles from the tracker.
struct TrackerEnv<'a>(&'a Tracker);

impl Environment for TrackerEnv<'_> {
    fn owner_state(&self, _: &str) -> OwnerState {
        OwnerState::Up {
            since: SystemTime::UNIX_EPOCH,
        }
    }
    fn pile_start(&self, c: &ControllerRef, initializer: &str, k: u32) -> Option<SystemTime> {
        self.0.pile_start(&c.uid, initializer, k, SystemTime::now())
    }
}

/// Returns (time, decisions made) for taking in `pods` and deciding them, the current way or
/// the former way.
fn in_process(config: &Arc<Config>, pods: &[SlimPod], former: bool) -> (Duration, usize) {
    let mut tracker = Tracker::new(config.clone());
    let now = SystemTime::now();
    let mut decided = 0usize;
    let start = Instant::now();
    let mut decide = |tracker: &Tracker, key: &str| {
        if let Some(pod) = tracker.get(key) {
            let out = policy::decide(&pod.view(), &TrackerEnv(tracker), config, now);
            std::hint::black_box(out);
            decided += 1;
        }
    };
    if former {
        for pod in pods {
            tracker.apply(pod, now);
            for sibling in tracker.siblings(&pod.key()) {
                decide(&tracker, &sibling);
            }
        }
    } else {
        for pod in pods {
            tracker.apply(pod, now);
        }
        tracker.take_moved_earlier();
        let keys: Vec<String> = tracker.pods().map(|(k, _)| k.clone()).collect();
        for key in keys {
            decide(&tracker, &key);
        }
    }
    (start.elapsed(), decided)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn end_to_end(n: usize) -> Result<(Duration, Duration, usize)> {
    let sim = Sim::start(SimOptions {
        mechanism: Mechanism::SchedulingGates,
        ..SimOptions::default()
    })
    .await
    .map_err(|e| anyhow!("starting the simulated API server: {e}"))?;
    let admin = sim.client(ADMIN);
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NS } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("creating the namespace")?;
    let api: Api<Pod> = Api::namespaced(admin, NS);
    stream::iter((0..n).map(Ok))
        .try_for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                let mut pod: Pod = serde_json::from_value(pod_json(i))?;
                pod.metadata.uid = None;
                pod.metadata.resource_version = None;
                pod.metadata.creation_timestamp = None;
                api.create(&PostParams::default(), &pod)
                    .await
                    .map(drop)
                    .context("seeding a pod")
            }
        })
        .await?;

    let guard_client =
        initguard::client::build(sim.kube_config(GUARD_USER), Mechanism::SchedulingGates)
            .context("building the guard's client")?;
    let list_start = Instant::now();
    let listed = Api::<SlimPod>::all(guard_client.clone())
        .list(&ListParams::default())
        .await
        .context("listing pods")?
        .items
        .len();
    let list = list_start.elapsed();

    let config = initguard::config::from_yaml_str(&config_yaml("127.0.0.1:0"), "<bench>")
        .map_err(|e| anyhow!("bench config: {e}"))?;
    let start = Instant::now();
    let guard = Guard::start(guard_client, Arc::new(config))
        .await
        .context("starting the guard")?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while !guard.shared.not_ready().is_empty() {
        if Instant::now() > deadline {
            return Err(anyhow!("guard not ready within 300 s"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ready = start.elapsed();
    let waiting = guard.shared.tracker().len();
    guard.shutdown().await;
    sim.shutdown().await;
    anyhow::ensure!(
        listed == n && waiting == n,
        "listed {listed}, tracked {waiting} of {n}"
    );
    Ok((list, ready, waiting))
}

fn parse_pods() -> Result<usize> {
    let mut args = std::env::args().skip(1);
    let mut pods = 10_000;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--pods" => {
                pods = args
                    .next()
                    .context("--pods needs a number")?
                    .parse()
                    .context("--pods needs a number")?
            }
            // `cargo bench` passes --bench.
            "--bench" => {}
            other => return Err(anyhow!("unknown argument {other}")),
        }
    }
    Ok(pods)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pile bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let n = parse_pods()?;
    let config = Arc::new(
        initguard::config::from_yaml_str(&config_yaml("127.0.0.1:0"), "<bench>")
            .map_err(|e| anyhow!("bench config: {e}"))?,
    );
    let pods: Vec<SlimPod> = (0..n)
        .map(|i| serde_json::from_value(pod_json(i)))
        .collect::<Result<_, _>>()?;

    println!("## Deciding one controller's pile of {n} waiting pods\n");
    println!(
        "### In process: tracker + policy, owners up, `pileup: {{threshold: 3, action: bypass, minWait: 1h}}`\n"
    );
    println!("| pods | path | time | decisions | per pod |");
    println!("| ---: | --- | ---: | ---: | ---: |");
    let mut sizes: Vec<usize> = [1000, 2000, 4000, n]
        .into_iter()
        .filter(|s| *s <= n)
        .collect();
    sizes.dedup();
    let mut rows: BTreeMap<(usize, bool), (Duration, usize)> = BTreeMap::new();
    for &size in &sizes {
        for former in [false, true] {
            if former && size > FORMER_MAX_PODS {
                continue;
            }
            let (time, decided) = in_process(&config, &pods[..size], former);
            rows.insert((size, former), (time, decided));
            let path = if former {
                "former: re-decide the controller's pods on each event"
            } else {
                "now: take the list in, decide each pod once"
            };
            println!(
                "| {size} | {path} | {} | {decided} | {:.2} µs |",
                ms(time),
                time.as_secs_f64() * 1e6 / size as f64
            );
        }
    }

    let runtime = tokio::runtime::Runtime::new()?;
    let (list, ready, waiting) = runtime.block_on(end_to_end(n))?;
    println!("\n### End to end: simulated API server, in-process guard\n");
    println!(
        "| pods of one Job | one LIST of them | guard start → ready (list + every pod decided) | tracked |"
    );
    println!("| ---: | ---: | ---: | ---: |");
    println!("| {n} | {} | {} | {waiting} |", ms(list), ms(ready));
    Ok(())
}
