//! g. (`--pile-gates`, section 10 of the report) The pileup headline with scheduling gates on
//! the current server and a real node (`tests/testbed/up --node`): Jobs whose pods carry a
//! gate (in the Job's template, as a queueing controller's webhook would add it) run to
//! completion on the node's kubelet. The gate's owner (a Lease its controller renews) dies at
//! t = 0, when the Jobs are created; at t = 60 s the controller is back and removes every gate
//! left (the harness plays it). Three runs one after another: no guard; the guard with
//! `deadline: 1s`; the guard with only the owner check (`ownerDownGrace: 1s`). Times come from
//! what the server stores: each pod's `creationTimestamp` and its container's `startedAt` (the
//! kubelet's report), each Job's `creationTimestamp` and `completionTime`; the guard's patches
//! from the audit log.

use std::sync::Arc;

use super::*;

use initguard_test_support::testbed::OwnerLease;

// The same three runs as section f, told apart the same way.
use super::pile::Mode;

/// The gate of every Job's pods.
const PILE_GATE: &str = "queue.example.com/admission";
/// The gate's owner, renewed until t = 0, in each run's namespace.
const PILE_LEASE: &str = "queue-controller";
/// The controller is back this long after t = 0.
const PILE_OUTAGE: Duration = Duration::from_secs(60);
/// After the controller is back, how long the Jobs may take to complete.
const PILE_SETTLE: Duration = Duration::from_secs(180);

/// The guard's config for `mode` (None: no guard), on the gate of every Job's pods.
fn guard_config(mode: Mode, ns: &str) -> Option<String> {
    let gate = match mode {
        Mode::NoGuard => return None,
        Mode::Deadline => format!("{{ name: {PILE_GATE}, deadline: 1s }}"),
        Mode::OwnerDown => format!(
            "{{ name: {PILE_GATE}, deadline: 1h, ownerDownGrace: 1s, owner: {{ lease: {ns}/{PILE_LEASE} }} }}"
        ),
    };
    Some(format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: false }}\nunlistedInitializers: ignore\ndryRun: false\n\
         initializers:\n  - {gate}\n"
    ))
}

/// One run's figures.
struct Run {
    mode: Mode,
    /// Per second from t = 0: pods still gated, Jobs complete.
    samples: Vec<(usize, usize)>,
    /// Per Job: its pod stored → its container started (the kubelet's `startedAt`).
    to_running: Vec<Duration>,
    /// Per Job: created → `completionTime`.
    to_complete: Vec<Duration>,
    /// The guard's successful pod patches.
    bypasses: usize,
}

fn pile_job(name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name },
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {
                "metadata": { "labels": { "app": "pile", OPT_IN: "true" } },
                "spec": {
                    "restartPolicy": "Never",
                    "schedulingGates": [{ "name": PILE_GATE }],
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "main",
                        "image": "initguard.test/busybox:1",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["true"],
                    }],
                },
            },
        },
    })
}

fn ts(v: &Value) -> Option<jiff::Timestamp> {
    v.as_str()?.parse().ok()
}

fn span(from: jiff::Timestamp, to: jiff::Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or_default()
}

fn json_of(tb: &Testbed, args: &[&str]) -> Result<Value> {
    let out = tb.kubectl_with("admin", args, None);
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// `cargo bench --bench real -- --pile-gates [--jobs N]` (N ≤ 100: one running pod per Job
/// on a node of 110).
pub(crate) async fn run_pile_gates(jobs: usize) -> Result<()> {
    if jobs > 100 {
        bail!("--jobs {jobs}: the real node takes 110 pods; at most 100 Jobs");
    }
    if let Some(why) = testbed::node_missing() {
        bail!("a node bed cannot run here: {why}");
    }
    eprintln!("real --pile-gates: starting the test bed with a real node");
    let tb = Arc::new(
        Testbed::up_node(env!("CARGO_BIN_EXE_initguard"), testbed::Version::Current)
            .map_err(|e| anyhow!(e))?,
    );
    let version = testbed::Version::Current
        .pinned()
        .unwrap_or_else(|_| "?".into());
    let mut runs = Vec::new();
    for mode in Mode::ALL {
        let run = pile_gates(&tb, mode, jobs).await?;
        eprintln!(
            "  {}: {} bypasses, slowest to running {}",
            mode.label(),
            run.bypasses,
            run.to_running
                .iter()
                .max()
                .map_or("–".to_owned(), |d| fmt_d(*d))
        );
        runs.push(run);
    }
    report(&version, jobs, &runs);
    Ok(())
}

async fn pile_gates(tb: &Arc<Testbed>, mode: Mode, jobs: usize) -> Result<Run> {
    let ns = format!("pileg-{}", mode.short());
    tb.kubectl(&["create", "namespace", &ns]);
    wait_for(
        "the namespace's default ServiceAccount",
        Duration::from_secs(60),
        async || Ok(tb.get("serviceaccount", &ns, "default").map(|_| ())),
    )
    .await?;
    let mut owner = OwnerLease::start(tb, &ns, PILE_LEASE);
    let guard = match guard_config(mode, &ns) {
        Some(config) => Some(
            tb.guard(&format!("pileg-{}", mode.short()), "initguard", &config)
                .await,
        ),
        None => None,
    };
    let audit_from = jiff::Timestamp::now();

    // t = 0: the controller dies, the Jobs arrive.
    owner.kill(tb);
    let start = Instant::now();
    for i in 0..jobs {
        let job = pile_job(&format!("job-{i:02}"));
        tb.kubectl_stdin(&["create", "-n", &ns, "-f", "-"], Some(&job.to_string()));
    }
    let mut samples = Vec::new();
    let mut revived = false;
    loop {
        let elapsed = start.elapsed();
        let pods = json_of(tb, &["get", "pods", "-n", &ns, "-o", "json"])?;
        let gated: Vec<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["spec"]["schedulingGates"]
                    .as_array()
                    .is_some_and(|g| !g.is_empty())
            })
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        let list = json_of(tb, &["get", "jobs", "-n", &ns, "-o", "json"])?;
        let complete = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|j| j["status"]["completionTime"].is_string())
            .count();
        let second = elapsed.as_secs() as usize;
        if samples.len() <= second {
            samples.resize(second + 1, (0, 0));
        }
        samples[second] = (gated.len(), complete);
        if !revived && elapsed >= PILE_OUTAGE {
            // The controller is back: it admits every pod still gated.
            for pod in &gated {
                tb.kubectl(&[
                    "patch",
                    "pod",
                    pod,
                    "-n",
                    &ns,
                    "--type=json",
                    "-p",
                    r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
                ]);
            }
            revived = true;
        }
        if complete == jobs {
            break;
        }
        if elapsed > PILE_OUTAGE + PILE_SETTLE {
            bail!(
                "{}: {complete} of {jobs} Jobs complete {PILE_SETTLE:?} after the controller came back",
                mode.label()
            );
        }
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(start.elapsed() - elapsed)).await;
    }
    if let Some(guard) = guard {
        guard.stop();
    }
    let pods = json_of(tb, &["get", "pods", "-n", &ns, "-o", "json"])?;
    let to_running = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let created = ts(&p["metadata"]["creationTimestamp"])?;
            let started =
                ts(&p["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"])?;
            Some(span(created, started))
        })
        .collect();
    let list = json_of(tb, &["get", "jobs", "-n", &ns, "-o", "json"])?;
    let to_complete = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| {
            Some(span(
                ts(&j["metadata"]["creationTimestamp"])?,
                ts(&j["status"]["completionTime"])?,
            ))
        })
        .collect();
    let bypasses = tb
        .audit()
        .into_iter()
        .filter(|a| {
            a.user == testbed::GUARD_USER
                && a.namespace == ns
                && a.resource == "pods"
                && a.verb == "patch"
                && a.ok()
                && testbed::timestamp(&a.received) >= audit_from
        })
        .count();
    tb.kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    Ok(Run {
        mode,
        samples,
        to_running,
        to_complete,
        bypasses,
    })
}

fn report(version: &str, jobs: usize, runs: &[Run]) {
    println!("## 10. Pileup with scheduling gates on the current server and a real node");
    println!();
    println!(
        "_`cargo bench --bench real -- --pile-gates` (benches/real/pile_gates.rs); Kubernetes \
         {version} from tests/testbed/ with `--node` (a kubelet of that version, containerd); {} \
         cores; load average {}_",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!();
    println!(
        "{jobs} Jobs (parallelism 1, pods opted in, the gate `{PILE_GATE}` in the template, a \
         container that exits at once) are created at t = 0, when the gate's controller dies; \
         at t = {} s it is back and removes every gate left. Columns per run: pods still gated \
         / Jobs complete.",
        PILE_OUTAGE.as_secs()
    );
    println!();
    let header: Vec<&str> = runs.iter().map(|r| r.mode.label()).collect();
    println!("| t (s) | {} |", header.join(" | "));
    println!("| ---: |{}", " ---: |".repeat(runs.len()));
    let longest = runs.iter().map(|r| r.samples.len()).max().unwrap_or(0);
    for t in (0..longest).filter(|t| t % 5 == 0 || *t + 1 == longest) {
        let cells: Vec<String> = runs
            .iter()
            .map(|r| {
                r.samples
                    .get(t)
                    .map_or("–".to_owned(), |(g, c)| format!("{g} / {c}"))
            })
            .collect();
        println!("| {t} | {} |", cells.join(" | "));
    }
    println!();
    println!("| run | bypasses | pod stored → running p50 | max | Job → complete p50 | max |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let spread = |d: &[Duration]| {
        let mut d = d.to_vec();
        d.sort();
        (
            d.get(d.len() / 2).map_or("–".to_owned(), |x| fmt_d(*x)),
            d.last().map_or("–".to_owned(), |x| fmt_d(*x)),
        )
    };
    for r in runs {
        let (run_p50, run_max) = spread(&r.to_running);
        let (done_p50, done_max) = spread(&r.to_complete);
        println!(
            "| {} | {} | {run_p50} | {run_max} | {done_p50} | {done_max} |",
            r.mode.label(),
            r.bypasses
        );
    }
    println!();
    println!(
        "Stored → running: a pod's `creationTimestamp` to its container's `startedAt` as the \
         kubelet reported it (whole seconds both). Job → complete: the Job's \
         `creationTimestamp` to its `completionTime` (the job controller's)."
    );
}
