//! The node stage's memory per bound pod: what the guard keeps for a pod, by what the pod waits
//! on, measured with a counting global allocator (requested bytes; the system allocator adds
//! its own per-chunk overhead). Each population of `--pods` pods (10,000: a real node holds
//! 110, a large cluster's nodes together tens of thousands) is decoded as the pod watch decodes
//! it, folded into a fresh `StageTracker` and dropped; what stays alive is the stage's state.
//! Pods are shaped as a kubelet reports them (the same statuses the simulator's scripted
//! kubelet step and the real node's kubelet write). Prints a Markdown section on stdout.
//!
//! Usage: `cargo bench --bench node_stage -- [--pods N]`

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use initguard::config::{Config, Elsewhere};
use initguard::node_stage::stage::StageTracker;
use initguard::pod::SlimPod;
use initguard_test_support::alloc::{Counting, live};
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const USAGE: &str = "usage: node_stage [--pods N]   (default: 10000 pods per population)";

/// Two listed steps: a CNI validator tied to its node agent, and a native sidecar with a
/// deadline; `migrate` is an unlisted step.
const CONFIG: &str = "initContainers:\n\
  - { name: istio-validation, owner: { daemonset: istio-system/istio-cni-node }, \
      failedExitCodes: [126], action: recreate }\n\
  - { name: proxy, deadline: 5m }\n";

fn parse_args() -> Result<usize, String> {
    let mut pods = 10_000;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--pods" => {
                let v = it.next().ok_or("--pods needs a value")?;
                pods = v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("--pods: expected a positive whole number, got {v:?}")
                })?;
            }
            // `cargo bench` passes --bench to harness-less benchmarks.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(pods)
}

/// What a population's pods wait on.
#[derive(Clone, Copy)]
enum Population {
    /// Running, no init containers (most pods of a cluster).
    Plain,
    /// Init containers all done: `Initialized` True.
    Initialized,
    /// Waiting on an init container no entry lists (counted under `other` only).
    Unlisted,
    /// Stuck on the listed CNI validator (exit 126, `Init:CrashLoopBackOff`).
    StuckListed,
    /// Waiting on the listed native sidecar, running but not started.
    SidecarNotStarted,
}

impl Population {
    const ALL: [Population; 5] = [
        Population::Plain,
        Population::Initialized,
        Population::Unlisted,
        Population::StuckListed,
        Population::SidecarNotStarted,
    ];

    fn describe(self) -> &'static str {
        match self {
            Population::Plain => "running, no init containers",
            Population::Initialized => "init containers done (Initialized)",
            Population::Unlisted => "waiting on an unlisted init container",
            Population::StuckListed => "stuck on a listed step (exit 126)",
            Population::SidecarNotStarted => "waiting on a listed sidecar (not started)",
        }
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Pod `i` of `population`, as the API server returns it: names, uids, nodes and times vary.
fn pod(population: Population, i: usize, bound: SystemTime) -> Value {
    let name = format!("web-7c9d8f6b5-{i:05}");
    let node = format!("node-{:03}", i % 100);
    let init = json!([
        {"name": "istio-validation", "image": "docker.io/istio/proxyv2:1.24.0"},
        {"name": "proxy", "image": "docker.io/istio/proxyv2:1.24.0", "restartPolicy": "Always"},
        {"name": "migrate", "image": "registry.example.com/migrate:3"},
    ]);
    let terminated_ok = json!({"terminated": {"exitCode": 0, "reason": "Completed",
        "startedAt": rfc3339(bound), "finishedAt": rfc3339(bound)}});
    let (init_containers, statuses, initialized, phase) = match population {
        Population::Plain => (Value::Null, Value::Null, "True", "Running"),
        Population::Initialized => (
            init.clone(),
            json!([
                {"name": "istio-validation", "ready": true, "restartCount": 0, "state": terminated_ok},
                {"name": "proxy", "ready": true, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": rfc3339(bound)}}},
                {"name": "migrate", "ready": true, "restartCount": 0, "state": terminated_ok},
            ]),
            "True",
            "Running",
        ),
        Population::Unlisted => (
            init.clone(),
            json!([
                {"name": "istio-validation", "ready": true, "restartCount": 0, "state": terminated_ok},
                {"name": "proxy", "ready": true, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": rfc3339(bound)}}},
                {"name": "migrate", "ready": false, "restartCount": 0,
                    "state": {"running": {"startedAt": rfc3339(bound)}}},
            ]),
            "False",
            "Pending",
        ),
        Population::StuckListed => (
            init.clone(),
            json!([
                {"name": "istio-validation", "ready": false, "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff",
                        "message": "back-off 1m20s restarting failed container"}},
                    "lastState": {"terminated": {"exitCode": 126, "reason": "Error",
                        "startedAt": rfc3339(bound), "finishedAt": rfc3339(bound)}}},
                {"name": "proxy", "ready": false, "started": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}}},
                {"name": "migrate", "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}}},
            ]),
            "False",
            "Pending",
        ),
        Population::SidecarNotStarted => (
            init.clone(),
            json!([
                {"name": "istio-validation", "ready": true, "restartCount": 0, "state": terminated_ok},
                {"name": "proxy", "ready": false, "started": false, "restartCount": 0,
                    "state": {"running": {"startedAt": rfc3339(bound)}}},
                {"name": "migrate", "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}}},
            ]),
            "False",
            "Pending",
        ),
    };
    let mut spec = json!({
        "nodeName": node,
        "restartPolicy": "Always",
        "containers": [{"name": "app", "image": "registry.example.com/web:2.4.1"}],
    });
    if !init_containers.is_null() {
        spec["initContainers"] = init_containers;
    }
    let mut status = json!({
        "phase": phase,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(bound)},
            {"type": "Initialized", "status": initialized, "lastTransitionTime": rfc3339(bound)},
        ],
    });
    if !statuses.is_null() {
        status["initContainerStatuses"] = statuses;
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": format!("team-{}", i % 40),
            "uid": format!("6f1c2b4e-{i:08}-4d1a-9e2f-7a3b5c6d8e9f"),
            "resourceVersion": format!("{}", 1_000_000 + i),
            "creationTimestamp": rfc3339(bound),
            "labels": {"app": "web", "pod-template-hash": "7c9d8f6b5", "initguard.io/bypass": ""},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7c9d8f6b5", "uid": format!("rs-{}", i % 200), "controller": true}],
        },
        "spec": spec,
        "status": status,
    })
}

struct Row {
    population: Population,
    bytes_per_pod: f64,
    allocs_per_pod: f64,
    ns_per_pod: f64,
}

fn measure(config: &Arc<Config>, population: Population, n: usize) -> Result<Row, String> {
    let bound = SystemTime::now() - Duration::from_secs(600);
    let docs: Vec<String> = (0..n)
        .map(|i| pod(population, i, bound).to_string())
        .collect();
    let now = SystemTime::now();
    let before = live();
    let mut stage = StageTracker::new(config.clone());
    let start = Instant::now();
    for (i, doc) in docs.iter().enumerate() {
        let pod: SlimPod = serde_json::from_str(doc).map_err(|e| format!("pod {i}: {e}"))?;
        black_box(stage.apply(&pod, now));
    }
    // The writer drains what changed as it goes; only the stage's own state remains.
    black_box(stage.take_dirty());
    let elapsed = start.elapsed();
    let after = live();
    let row = Row {
        population,
        bytes_per_pod: (after.0 - before.0) as f64 / n as f64,
        allocs_per_pod: (after.1 - before.1) as f64 / n as f64,
        ns_per_pod: elapsed.as_nanos() as f64 / n as f64,
    };
    drop(black_box(stage));
    Ok(row)
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let pods = match parse_args() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("node_stage: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let config = match Config::from_yaml_with(CONFIG, "bench.yaml", &Elsewhere) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("node_stage: the benchmark's config: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut rows = Vec::new();
    for population in Population::ALL {
        eprintln!("node_stage: {} × {pods}", population.describe());
        match measure(&config, population, pods) {
            Ok(row) => rows.push(row),
            Err(e) => {
                eprintln!("node_stage: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("## 11. Node stage: memory per bound pod\n");
    println!(
        "{}\n",
        initguard_test_support::bench::machine_line(env!("CARGO_PKG_VERSION"))
    );
    println!(
        "{pods} pods per row, decoded as the pod watch decodes them and folded into a fresh \
         node-stage tracker (two listed steps); bytes the tracker keeps alive afterwards, \
         counted by the allocator (requested bytes), and the time to decode and fold each pod.\n"
    );
    println!("| pods | retained bytes/pod | live allocations/pod | ns/pod (decode + fold) |");
    println!("| --- | ---: | ---: | ---: |");
    for r in &rows {
        println!(
            "| {} | {:.1} | {:.2} | {:.0} |",
            r.population.describe(),
            r.bytes_per_pod,
            r.allocs_per_pod,
            r.ns_per_pod
        );
    }
    let row = |p: fn(&Population) -> bool| rows.iter().find(|r| p(&r.population));
    if let (Some(stuck), Some(unlisted)) = (
        row(|p| matches!(p, Population::StuckListed)),
        row(|p| matches!(p, Population::Unlisted)),
    ) {
        println!(
            "\nA node of 110 pods all stuck on a listed step: about {:.0} KiB. A pod the stage \
             does not follow keeps nothing; one waiting on an unlisted step keeps its hash, \
             counted under `other` ({:.0} bytes).",
            stuck.bytes_per_pod * 110.0 / 1024.0,
            unlisted.bytes_per_pod
        );
    }
    ExitCode::SUCCESS
}
