//! f. (`--pile`, section 9 of the report) Section 1's pileup headline on the real Kubernetes
//! 1.13 server: the initializer's owner (the seeds' own library,
//! tests/real_cluster_legacy/initializer.py, which also renews the Lease the guard watches) is
//! killed at t = 0 and revived at t = 60 s; N Jobs of the real job controller (parallelism 1,
//! pods opted in) are created at t = 0, while an InitializerConfiguration puts the initializer
//! on every pod. Three runs one after another (an InitializerConfiguration is cluster-wide):
//! no guard; the guard with `deadline: 1s`; the guard with only the owner check
//! (`deadline: 1h`, `ownerDownGrace: 1s`). Sampled every second from one list with
//! `includeUninitialized`; creates, their time-outs, the guard's patches and the scheduler's
//! bindings come from the audit log. No kubelet runs, so a pod bound by the scheduler is the
//! nearest thing to a running one.

use super::*;

use initguard_test_support::testbed::Initializer;

/// The initializer of every pod, and of the InitializerConfiguration.
const INIT: &str = "sidecar.example.com";
/// The Lease the initializer renews, in each run's namespace.
const LEASE: &str = "sidecar-owner";
/// The owner is revived this long after it was killed.
const OUTAGE: Duration = Duration::from_secs(60);
/// The owner's Lease duration (LEASE_SECONDS of tests/real_cluster_legacy/initializer.py).
const OWNER_LEASE: Duration = Duration::from_secs(5);
/// The guarded runs' deadline and grace.
const DEADLINE: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(1);
/// What the goal allows beyond them: waits count from `creationTimestamp`, whole seconds.
const SLACK: Duration = Duration::from_secs(1);
/// After the revival, how long the Jobs may take to have a bound pod each.
const SETTLE: Duration = Duration::from_secs(120);

/// Which run (section g's too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    NoGuard,
    Deadline,
    OwnerDown,
}

impl Mode {
    pub(crate) const ALL: [Mode; 3] = [Mode::NoGuard, Mode::Deadline, Mode::OwnerDown];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::NoGuard => "no guard",
            Mode::Deadline => "initguard, deadline 1 s",
            Mode::OwnerDown => "initguard, owner-down only (grace 1 s)",
        }
    }

    pub(crate) fn short(self) -> &'static str {
        match self {
            Mode::NoGuard => "none",
            Mode::Deadline => "deadline",
            Mode::OwnerDown => "owner",
        }
    }

    /// The goal's bound on a Job's first pod, stored → bound (None: no guard, no goal).
    fn bound(self) -> Option<Duration> {
        match self {
            Mode::NoGuard => None,
            Mode::Deadline => Some(DEADLINE + SLACK),
            Mode::OwnerDown => Some(OWNER_LEASE + GRACE + SLACK),
        }
    }

    fn guard_config(self, ns: &str) -> Option<String> {
        let initializer = match self {
            Mode::NoGuard => return None,
            Mode::Deadline => format!("{{ name: {INIT}, deadline: {}s }}", DEADLINE.as_secs()),
            Mode::OwnerDown => format!(
                "{{ name: {INIT}, deadline: 1h, ownerDownGrace: {}s, owner: {{ lease: {ns}/{LEASE} }} }}",
                GRACE.as_secs()
            ),
        };
        Some(format!(
            "mechanism: initializers\noptIn: {{ label: {OPT_IN} }}\n\
             leaderElection: {{ enabled: false }}\nunlistedInitializers: ignore\n\
             initializers:\n  - {initializer}\n"
        ))
    }
}

/// One second of a run: the maxima of what the lists in it showed.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// Stored pods still waiting on [`INIT`].
    waiting: usize,
    /// The largest number of waiting pods of one Job.
    pile: usize,
    /// Jobs without a bound, initialized pod.
    starved: usize,
}

/// One run, from its samples and the audit log.
struct Run {
    mode: Mode,
    /// One sample per second from t = 0.
    samples: Vec<Sample>,
    /// When the owner came back (seconds from t = 0).
    revived: usize,
    /// Pods the job controller created (stored: 201, 202 or a time-out after storing).
    created: usize,
    /// Creates answered with a time-out (504).
    timeouts: usize,
    /// The guard's successful pod patches.
    bypasses: usize,
    /// Per Job: its first pod stored (`creationTimestamp`, whole seconds) → its first pod
    /// bound by the scheduler (None: never).
    to_pod: Vec<Option<Duration>>,
    /// Per Job: the Job's creation → its first pod bound; includes the job controller's own
    /// queue (its workers wait on blocked creates).
    job_to_pod: Vec<Option<Duration>>,
}

/// `cargo bench --bench real -- --pile [--jobs N]`: the three runs and their report.
pub(crate) async fn run_pile(jobs: usize) -> Result<()> {
    eprintln!("real --pile: starting the 1.13 test bed");
    let tb = Testbed::up_version(env!("CARGO_BIN_EXE_initguard"), testbed::Version::Legacy)
        .map_err(|e| anyhow!(e))?;
    let version = testbed::Version::Legacy
        .pinned()
        .unwrap_or_else(|_| "?".into());
    let mut server = Server::Real {
        tb,
        audit_offset: 0,
    };
    let admin = client_of(&server.admin_kubeconfig()).await?;
    two::initializer_configuration(&admin, "bench-pile", &[INIT]).await?;
    let mut runs = Vec::new();
    for mode in Mode::ALL {
        let run = pile(&mut server, &admin, mode, jobs).await?;
        eprintln!(
            "  {}: max waiting {}, max pile {}, {} created, {} time-outs, {} bypasses",
            mode.label(),
            run.samples.iter().map(|s| s.waiting).max().unwrap_or(0),
            run.samples.iter().map(|s| s.pile).max().unwrap_or(0),
            run.created,
            run.timeouts,
            run.bypasses
        );
        runs.push(run);
    }
    report(&version, jobs, &runs);
    Ok(())
}

/// The Job `name` in `ns`: one opted-in pod at a time, never finishing (no kubelet).
fn job(name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name },
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 6,
            "template": {
                "metadata": { "labels": { "app": "pile", OPT_IN: "true" } },
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
                },
            },
        },
    })
}

/// The Job a pod belongs to, from its controller reference.
fn job_of(pod: &Value) -> Option<String> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["kind"] == "Job")
        .and_then(|r| r["name"].as_str().map(str::to_owned))
}

async fn pile(server: &mut Server, admin: &kube::Client, mode: Mode, jobs: usize) -> Result<Run> {
    let ns = format!("pile-{}", mode.short());
    eprintln!("  {}: namespace {ns}", mode.label());
    create_namespace(admin, &ns).await?;
    // ServiceAccount admission refuses pods until the namespace's default account exists.
    exists(
        admin,
        "the namespace's default ServiceAccount",
        &format!("/api/v1/namespaces/{ns}/serviceaccounts/default"),
    )
    .await?;
    let Server::Real { tb, .. } = &*server else {
        bail!("the pileup runs on the real server only");
    };
    let owner = Initializer::start(tb, INIT, &ns, LEASE);
    // The owner is up: its Lease is renewed.
    exists(
        admin,
        "the owner's Lease",
        &format!("/apis/coordination.k8s.io/v1beta1/namespaces/{ns}/leases/{LEASE}"),
    )
    .await?;
    let guard = match mode.guard_config(&ns) {
        Some(config) => {
            let mut guard = GuardChild::spawn(server, &format!("pile-{}", mode.short()), &config)?;
            guard.ready(Instant::now()).await?;
            Some(guard)
        }
        None => None,
    };
    server.take_requests()?;

    // t = 0: the owner dies, the Jobs arrive.
    drop(owner);
    let start = Instant::now();
    let jobs_path = format!("/apis/batch/v1/namespaces/{ns}/jobs");
    stream::iter((0..jobs).map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(SEED_CONCURRENCY, |i| {
            let path = jobs_path.clone();
            async move {
                two::raw(
                    admin,
                    http::Method::POST,
                    &path,
                    Some(job(&format!("job-{i:02}"))),
                )
                .await
                .map(|_| ())
            }
        })
        .await?;

    let mut samples: Vec<Sample> = Vec::new();
    let mut first_stored: BTreeMap<String, SystemTime> = BTreeMap::new();
    let mut revived = None;
    let mut owner = None;
    let pods_path = format!("/api/v1/namespaces/{ns}/pods?includeUninitialized=true");
    loop {
        let elapsed = start.elapsed();
        if revived.is_none() && elapsed >= OUTAGE {
            let Server::Real { tb, .. } = &*server else {
                unreachable!("checked above")
            };
            owner = Some(Initializer::start(tb, INIT, &ns, LEASE));
            revived = Some(samples.len());
        }
        let list = two::raw(admin, http::Method::GET, &pods_path, None).await?;
        let sample = sample_of(&list, jobs, &mut first_stored);
        let second = elapsed.as_secs() as usize;
        if samples.len() <= second {
            samples.resize(second + 1, Sample::default());
        }
        let slot = &mut samples[second];
        slot.waiting = slot.waiting.max(sample.waiting);
        slot.pile = slot.pile.max(sample.pile);
        slot.starved = slot.starved.max(sample.starved);
        if revived.is_some() && sample.waiting == 0 && sample.starved == 0 {
            break;
        }
        if elapsed > OUTAGE + SETTLE {
            bail!(
                "{}: {} Jobs still without a bound pod and {} pods waiting {SETTLE:?} after the \
                 owner came back",
                mode.label(),
                sample.starved,
                sample.waiting
            );
        }
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(start.elapsed() - elapsed)).await;
    }
    if let Some(guard) = guard {
        guard.stop()?;
    }
    drop(owner);
    let requests = server.take_requests()?;
    let pod_creates: Vec<&Req> = requests
        .iter()
        .filter(|r| {
            r.namespace == ns
                && r.resource == "pods"
                && r.verb == "create"
                && r.user != "system:admin"
        })
        .collect();
    let job_created: BTreeMap<&str, SystemTime> = requests
        .iter()
        .filter(|r| r.namespace == ns && r.resource == "jobs" && r.verb == "create")
        .map(|r| (r.name.as_str(), r.received))
        .collect();
    // Pod names are `JOB-xxxxx`; a binding names its pod.
    let mut first_bound: BTreeMap<&str, SystemTime> = BTreeMap::new();
    for r in requests.iter().filter(|r| {
        r.namespace == ns && r.resource == "pods/binding" && (200..300).contains(&r.code)
    }) {
        if let Some((job, _)) = r.name.rsplit_once('-') {
            let at = first_bound.entry(job).or_insert(r.done);
            *at = (*at).min(r.done);
        }
    }
    let job_to_pod = job_created
        .iter()
        .map(|(job, created)| first_bound.get(job).map(|bound| after(*bound, *created)))
        .collect();
    let to_pod = job_created
        .keys()
        .map(|job| {
            let bound = first_bound.get(job)?;
            let stored = first_stored.get(*job)?;
            Some(after(*bound, *stored))
        })
        .collect();
    let run = Run {
        mode,
        samples,
        revived: revived.unwrap_or(0),
        created: pod_creates.len(),
        timeouts: pod_creates.iter().filter(|r| r.code == 504).count(),
        bypasses: requests
            .iter()
            .filter(|r| {
                r.user == testbed::GUARD_USER
                    && r.namespace == ns
                    && r.resource == "pods"
                    && r.verb == "patch"
                    && (200..300).contains(&r.code)
            })
            .count(),
        to_pod,
        job_to_pod,
    };
    two::raw(
        admin,
        http::Method::DELETE,
        &format!("/api/v1/namespaces/{ns}"),
        None,
    )
    .await?;
    Ok(run)
}

/// Waits up to a minute for a GET of `path` to succeed: `what` exists.
async fn exists(admin: &kube::Client, what: &str, path: &str) -> Result<()> {
    wait_for(what, Duration::from_secs(60), async || {
        Ok(two::raw(admin, http::Method::GET, path, None)
            .await
            .ok()
            .map(|_| ()))
    })
    .await
}

/// What one list of the namespace's pods shows; each Job's earliest pod `creationTimestamp`
/// is kept in `first_stored`.
fn sample_of(list: &Value, jobs: usize, first_stored: &mut BTreeMap<String, SystemTime>) -> Sample {
    let mut per_job: BTreeMap<String, usize> = BTreeMap::new();
    let mut served: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut waiting = 0;
    for pod in list["items"].as_array().into_iter().flatten() {
        let Some(job) = job_of(pod) else { continue };
        if let Some(created) = pod["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        {
            let at = first_stored
                .entry(job.clone())
                .or_insert(SystemTime::from(created));
            *at = (*at).min(SystemTime::from(created));
        }
        if two::pending(pod, Mechanism::Initializers)
            .iter()
            .any(|i| i == INIT)
        {
            waiting += 1;
            *per_job.entry(job).or_default() += 1;
        } else if pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
        {
            served.insert(job);
        }
    }
    Sample {
        waiting,
        pile: per_job.values().copied().max().unwrap_or(0),
        starved: jobs.saturating_sub(served.len()),
    }
}

fn report(version: &str, jobs: usize, runs: &[Run]) {
    println!(
        "## 9. Pileup on the real 1.13 server: a dead initializer owner, without and with initguard"
    );
    println!();
    println!(
        "_`cargo bench --bench real -- --pile` (benches/real/pile.rs); Kubernetes {version} \
         from tests/testbed/ (the Initializers admission plugin, the real job controller and \
         scheduler, no kubelet); {} cores; load average {}_",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!();
    println!(
        "The owner of `{INIT}` (the seeds' own initializer library, renewing the Lease the \
         guard watches) is killed at t = 0 and revived at t = {}s; {jobs} Jobs (parallelism 1, \
         pods opted in) are created at t = 0. Runs one after another. Columns per run: stored \
         pods still waiting on `{INIT}` / largest pile of one Job / Jobs without a bound pod \
         (no kubelet runs: bound is the nearest thing to running).",
        OUTAGE.as_secs()
    );
    println!();
    let header: Vec<&str> = runs.iter().map(|r| r.mode.label()).collect();
    println!("| t (s) | {} |", header.join(" | "));
    println!("| ---: |{}", " ---: |".repeat(runs.len()));
    let longest = runs.iter().map(|r| r.samples.len()).max().unwrap_or(0);
    let revived = runs.iter().map(|r| r.revived).max().unwrap_or(0);
    for t in (0..longest).filter(|t| t % 5 == 0 || *t + 1 == longest) {
        let cells: Vec<String> = runs
            .iter()
            .map(|r| match r.samples.get(t) {
                Some(s) => format!("{} / {} / {}", s.waiting, s.pile, s.starved),
                None => "–".to_owned(),
            })
            .collect();
        let mark = if t == revived { " (revive)" } else { "" };
        println!("| {t}{mark} | {} |", cells.join(" | "));
    }
    println!();
    println!(
        "| run | max stored waiting | max pile per Job | Jobs·s without a bound pod (outage) | \
         pods created | CREATE time-outs (504) | bypasses | time to pod p50 | max | Job → pod \
         p50 | max | never bound |"
    );
    println!(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let spread = |durations: &[Option<Duration>]| -> (String, String) {
        let mut known: Vec<Duration> = durations.iter().flatten().copied().collect();
        known.sort();
        (
            known
                .get(known.len() / 2)
                .map_or("–".to_owned(), |d| fmt_d(*d)),
            known.last().map_or("–".to_owned(), |d| fmt_d(*d)),
        )
    };
    for r in runs {
        let outage: usize = r.samples.iter().take(r.revived).map(|s| s.starved).sum();
        let never = r.job_to_pod.iter().filter(|d| d.is_none()).count();
        let (p50, max) = spread(&r.to_pod);
        let (job_p50, job_max) = spread(&r.job_to_pod);
        println!(
            "| {} | {} | {} | {outage} | {} | {} | {} | {p50} | {max} | {job_p50} | {job_max} | \
             {never} |",
            r.mode.label(),
            r.samples.iter().map(|s| s.waiting).max().unwrap_or(0),
            r.samples.iter().map(|s| s.pile).max().unwrap_or(0),
            r.created,
            r.timeouts,
            r.bypasses,
        );
    }
    println!();
    let verdicts: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            let bound = r.mode.bound()?;
            let pile = r.samples.iter().map(|s| s.pile).max().unwrap_or(0);
            let slowest = r.to_pod.iter().flatten().max().copied();
            let never = r.to_pod.iter().any(Option::is_none);
            let met = pile <= 1 && !never && slowest.is_some_and(|d| d <= bound);
            Some(format!(
                "{}: {} (largest pile {pile}, time to pod max {} ≤ {})",
                r.mode.label(),
                if met { "met" } else { "**MISSED**" },
                slowest.map_or("never".to_owned(), fmt_d),
                fmt_d(bound)
            ))
        })
        .collect();
    println!(
        "**Goal with initguard: at most 1 waiting pod per Job, and each Job's first pod bound \
         within the deadline (or the owner's Lease, {} s, plus the grace) + {} s of being \
         stored.** {}.",
        OWNER_LEASE.as_secs(),
        SLACK.as_secs(),
        verdicts.join("; ")
    );
    println!();
    println!(
        "Time to pod: from the Job's first pod stored (its `creationTimestamp`, whole seconds, \
         which is also what the guard counts waits from) to its first pod bound by the \
         scheduler (audit log). Job → pod: from the Job's creation, which adds the job \
         controller's own queue: its workers wait on creates that block until the pod is \
         initialized. Pods created: every pod create the job controller sent (a create that \
         times out still stores its pod)."
    );
}
