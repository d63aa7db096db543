//! e. Two initializers per pod, one dead owner: the guard removes both in one JSON Patch, as a
//! bare client sending one patch per pod would (metainit's single patch on legacy servers).
//! On a real Kubernetes 1.13 server (legacy initializers, put on every pod by an
//! InitializerConfiguration) and the current one (two scheduling gates), each beside the
//! simulator's matching profile. Clients per round, alternating: the guard with
//! `events: perPatch`, the guard with `events: off`, the bare client. Judged by the servers'
//! records only: requests per pod, the span and the per-pod reaction, the server's CPU.

use super::*;

/// The two initializers of every pod, in pending order; both owned by the pod `app=OWNER`.
const FIRST: &str = "first.example.com";
const SECOND: &str = "second.example.com";

/// Which client removes the initializers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    /// `initguard run`, with or without its Event per patch.
    Guard { events: bool },
    /// One patch per pod removing both, built from one list before the clock starts.
    Bare,
    /// The bare client while a watch on every pod (uninitialized ones included) is open by
    /// the same identity and drained: what any watching controller costs the server.
    BareWatch,
}

impl Client {
    const ALL: [Client; 4] = [
        Client::Guard { events: true },
        Client::Guard { events: false },
        Client::Bare,
        Client::BareWatch,
    ];

    /// Steady arrivals: the bare client there is the metainit-like watcher.
    const STEADY: [Client; 3] = [
        Client::Guard { events: true },
        Client::Guard { events: false },
        Client::Bare,
    ];

    /// One letter for namespace names.
    fn short(self) -> &'static str {
        match self {
            Client::Guard { events: true } => "g",
            Client::Guard { events: false } => "q",
            Client::Bare => "b",
            Client::BareWatch => "w",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Client::Guard { events: true } => "guard, events: perPatch",
            Client::Guard { events: false } => "guard, events: off",
            Client::Bare => "bare client",
            Client::BareWatch => "bare client + pod watch",
        }
    }
}

/// A server of this section: which one, and what its pods wait on.
pub(crate) struct Bed {
    pub server: Server,
    pub label: String,
    pub mechanism: Mechanism,
}

/// One burst: everything the server recorded about it.
pub(crate) struct Run {
    server: String,
    pods: usize,
    client: Client,
    /// Trigger → the last pod's initializing patch committed.
    span: Duration,
    /// Trigger → each pod's initializing patch.
    latencies: Vec<Duration>,
    /// Successful pod patches by the client.
    patches: usize,
    /// Events created by the client, counted after it stopped.
    events: usize,
    /// Every other write by the client in the namespace.
    other_writes: usize,
    server_cpu: Duration,
    /// The guard process, or this process for the bare clients.
    client_cpu: Duration,
}

/// The simulator with the 1.13 profile, putting both initializers on every new pod as an
/// InitializerConfiguration does.
pub(crate) async fn start_legacy_sim() -> Result<Bed> {
    let server = start_sim_with(SimOptions {
        mechanism: Mechanism::Initializers,
        kube_version: Some(kube_sim::KubeVersion::V1_13),
        legacy_initializers: vec![FIRST.to_owned(), SECOND.to_owned()],
        ..SimOptions::default()
    })
    .await?;
    Ok(Bed {
        server,
        label: "simulator, 1.13 profile".into(),
        mechanism: Mechanism::Initializers,
    })
}

/// The real 1.13 test bed with an InitializerConfiguration putting both initializers on
/// every new pod, once a probe pod shows it in effect (the admission plugin reads
/// configurations asynchronously).
pub(crate) async fn start_legacy_real() -> Result<Bed> {
    let tb = Testbed::up_version(env!("CARGO_BIN_EXE_initguard"), testbed::Version::Legacy)
        .map_err(|e| anyhow!(e))?;
    let version = testbed::Version::Legacy
        .pinned()
        .unwrap_or_else(|_| "?".into());
    let server = Server::Real {
        tb,
        audit_offset: 0,
    };
    let admin = client_of(&server.admin_kubeconfig()).await?;
    initializer_configuration(&admin, "bench-two", &[FIRST, SECOND]).await?;
    Ok(Bed {
        server,
        label: format!("real {version}"),
        mechanism: Mechanism::Initializers,
    })
}

/// An InitializerConfiguration `name` putting `initializers` (in order) on every new pod,
/// once a probe pod shows it in effect (the admission plugin reads configurations
/// asynchronously).
pub(crate) async fn initializer_configuration(
    admin: &kube::Client,
    name: &str,
    initializers: &[&str],
) -> Result<()> {
    let rules: Vec<Value> = initializers
        .iter()
        .map(|i| {
            json!({
                "name": i,
                "rules": [{ "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
            })
        })
        .collect();
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": { "name": name },
        "initializers": rules,
    });
    raw(
        admin,
        http::Method::POST,
        "/apis/admissionregistration.k8s.io/v1alpha1/initializerconfigurations",
        Some(configuration),
    )
    .await?;
    let mut attempt = 0;
    wait_for(
        "the InitializerConfiguration to take effect",
        Duration::from_secs(60),
        async || {
            attempt += 1;
            let probe = format!("{name}-probe-{attempt}");
            let created = raw(
                admin,
                http::Method::POST,
                "/api/v1/namespaces/default/pods?includeUninitialized=true",
                Some(pod_body(&probe, Mechanism::Initializers, false)),
            )
            .await?;
            raw(
                admin,
                http::Method::DELETE,
                &format!("/api/v1/namespaces/default/pods/{probe}?gracePeriodSeconds=0"),
                None,
            )
            .await?;
            Ok((pending(&created, Mechanism::Initializers) == initializers).then_some(()))
        },
    )
    .await
}

/// The simulator serving scheduling gates.
pub(crate) async fn start_gates_sim() -> Result<Bed> {
    Ok(Bed {
        server: start_sim().await?,
        label: "simulator, gates".into(),
        mechanism: Mechanism::SchedulingGates,
    })
}

/// The current test bed (scheduling gates).
pub(crate) fn start_gates_real() -> Result<Bed> {
    let tb = Testbed::up(env!("CARGO_BIN_EXE_initguard")).map_err(|e| anyhow!(e))?;
    let version = testbed::Version::Current
        .pinned()
        .unwrap_or_else(|_| "?".into());
    Ok(Bed {
        server: Server::Real {
            tb,
            audit_offset: 0,
        },
        label: format!("real {version}"),
        mechanism: Mechanism::SchedulingGates,
    })
}

/// One request with a JSON body and answer; an error for anything but 2xx.
pub(crate) async fn raw(
    client: &kube::Client,
    method: http::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value> {
    let (content_type, body) = match body {
        Some(b) if method == http::Method::PATCH => ("application/json-patch+json", b),
        Some(b) => ("application/json", b),
        None => ("application/json", Value::Null),
    };
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body)?
    };
    let request = http::Request::builder()
        .method(method.clone())
        .uri(path)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(bytes)
        .with_context(|| format!("building {method} {path}"))?;
    client
        .request::<Value>(request)
        .await
        .with_context(|| format!("{method} {path}"))
}

/// A pod of the burst (or the owner pod). Gates: both gates in the spec; legacy: none, the
/// server's initializer configuration adds them.
fn pod_body(name: &str, mechanism: Mechanism, opted_in: bool) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": "bench" } },
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } },
            }],
        },
    });
    if opted_in {
        pod["metadata"]["labels"][OPT_IN] = json!("true");
    }
    if mechanism == Mechanism::SchedulingGates && opted_in {
        pod["spec"]["schedulingGates"] = json!([{ "name": FIRST }, { "name": SECOND }]);
    }
    pod
}

pub(crate) fn pending(pod: &Value, mechanism: Mechanism) -> Vec<String> {
    initguard::bypass::pending_names(mechanism, pod)
}

/// Waits until the server lists `pods` pods in `ns` (beside any gone owner) and none waits.
/// A list of every pod is not free: call it only after a measured window.
async fn all_initialized(
    admin: &kube::Client,
    ns: &str,
    pods: usize,
    mechanism: Mechanism,
) -> Result<()> {
    wait_for(
        &format!("every pod of {ns} initialized"),
        Duration::from_secs(120),
        async || {
            let list = raw(admin, http::Method::GET, &pods_path(ns, mechanism), None).await?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let waiting = items
                .iter()
                .filter(|p| !pending(p, mechanism).is_empty())
                .count();
            Ok((items.len() >= pods && waiting == 0).then_some(()))
        },
    )
    .await
}

/// The pods path of `ns`; on legacy servers it includes uninitialized pods, and a create
/// answers 202 at once instead of waiting for the initializers.
fn pods_path(ns: &str, mechanism: Mechanism) -> String {
    match mechanism {
        Mechanism::Initializers => {
            format!("/api/v1/namespaces/{ns}/pods?includeUninitialized=true")
        }
        Mechanism::SchedulingGates => format!("/api/v1/namespaces/{ns}/pods"),
    }
}

/// The owner pod, initialized by the admin (as its initializers would) and marked Ready
/// through the status subresource (the test bed runs no kubelet).
async fn owner(admin: &kube::Client, ns: &str, mechanism: Mechanism) -> Result<()> {
    let mut body = pod_body(OWNER, mechanism, false);
    body["metadata"]["labels"] = json!({ "app": OWNER });
    let created = raw(
        admin,
        http::Method::POST,
        &pods_path(ns, mechanism),
        Some(body),
    )
    .await?;
    let path = format!("/api/v1/namespaces/{ns}/pods/{OWNER}");
    let waiting = pending(&created, mechanism);
    if !waiting.is_empty() {
        let list = "/metadata/initializers/pending";
        let removes: Vec<Value> = (0..waiting.len())
            .rev()
            .map(|i| json!({ "op": "remove", "path": format!("{list}/{i}") }))
            .collect();
        raw(admin, http::Method::PATCH, &path, Some(json!(removes))).await?;
    }
    mark_owner_ready(admin, ns).await
}

/// Creates `pods` opted-in pods with [`SEED_CONCURRENCY`] requests in flight.
async fn seed_two(admin: &kube::Client, ns: &str, pods: usize, mechanism: Mechanism) -> Result<()> {
    let path = pods_path(ns, mechanism);
    stream::iter((0..pods).map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(SEED_CONCURRENCY, |i| {
            let body = pod_body(&format!("p-{i:05}"), mechanism, true);
            let path = path.clone();
            async move {
                let created = raw(admin, http::Method::POST, &path, Some(body)).await?;
                let waiting = pending(&created, mechanism);
                if waiting != [FIRST, SECOND] {
                    bail!("pod p-{i:05} was created waiting for {waiting:?}");
                }
                Ok(())
            }
        })
        .await
}

fn guard_config(ns: &str, mechanism: Mechanism, events: bool) -> String {
    let owned = |name: &str| {
        format!(
            "  - name: {name}\n    deadline: 1h\n    ownerDownGrace: 0s\n\
             \x20   owner: {{ pods: {{ namespace: {ns}, selector: app={OWNER} }} }}\n"
        )
    };
    format!(
        "mechanism: {}\noptIn: {{ label: {OPT_IN} }}\nleaderElection: {{ enabled: false }}\n\
         unlistedInitializers: ignore\nevents: {}\ninitializers:\n{}{}",
        mechanism.as_str(),
        if events { "perPatch" } else { "off" },
        owned(FIRST),
        owned(SECOND)
    )
}

pub(crate) async fn burst_two(
    bed: &mut Bed,
    pods: usize,
    run: usize,
    client: Client,
) -> Result<Run> {
    let mechanism = bed.mechanism;
    let server = &mut bed.server;
    let admin = client_of(&server.admin_kubeconfig()).await?;
    let ns = format!("two-{pods}-{run}-{}", client.short());
    create_namespace(&admin, &ns).await?;
    owner(&admin, &ns, mechanism).await?;
    seed_two(&admin, &ns, pods, mechanism).await?;
    let user = server.guard_user().to_owned();
    let mut guard = None;
    let mut bare_patches = Vec::new();
    let mut watching = None;
    if client == Client::BareWatch {
        let (task, synced) = drained_watch(server, mechanism).await?;
        tokio::time::timeout(Duration::from_secs(300), synced)
            .await
            .context("the pod watch did not finish its initial list")?
            .context("the pod watch ended")?;
        watching = Some(task);
    }
    match client {
        Client::Guard { events } => {
            let mut child = GuardChild::spawn(server, &ns, &guard_config(&ns, mechanism, events))?;
            child.ready(Instant::now()).await?;
            // Sync points only (the judge is the server's record).
            wait_for(
                "the guard to track every pod and see the owner up",
                Duration::from_secs(300),
                async || {
                    let waiting = child
                        .metric("initguard_waiting_pods", &[("initializer", FIRST)])
                        .await?;
                    let up = child
                        .metric("initguard_owner_up", &[("initializer", SECOND)])
                        .await?;
                    Ok((waiting >= pods as f64 && up == 1.0).then_some(()))
                },
            )
            .await?;
            guard = Some(child);
        }
        Client::Bare | Client::BareWatch => {
            let list = raw(&admin, http::Method::GET, &pods_path(&ns, mechanism), None).await?;
            for pod in list["items"].as_array().into_iter().flatten() {
                let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                if name == OWNER {
                    continue;
                }
                let s = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or_default();
                let target = BypassTarget {
                    uid: s("/metadata/uid"),
                    resource_version: s("/metadata/resourceVersion"),
                    annotations_present: pod["metadata"]["annotations"].is_object(),
                    previous_record: None,
                    opt_in_label: Some((OPT_IN, "true")),
                };
                let removals = [
                    Removal {
                        index: 0,
                        initializer: FIRST,
                        reason: Reason::OwnerDown,
                    },
                    Removal {
                        index: 1,
                        initializer: SECOND,
                        reason: Reason::OwnerDown,
                    },
                ];
                let patch = bypass_patch(mechanism, &target, &removals, SystemTime::now());
                bare_patches.push((name.to_owned(), patch));
            }
            if bare_patches.len() != pods {
                bail!("listed {} pods of {pods}", bare_patches.len());
            }
        }
    }
    server.take_requests()?;
    let server_cpu0 = server.server_cpu();
    let client_pid = guard.as_ref().map_or(std::process::id(), GuardChild::pid);
    let client_cpu0 = process_cpu_time(client_pid);
    let started = SystemTime::now();
    match client {
        Client::Guard { .. } => {
            let api: Api<Pod> = Api::namespaced(admin.clone(), &ns);
            api.delete(OWNER, &DeleteParams::default().grace_period(0))
                .await
                .context("deleting the owner pod")?;
        }
        Client::Bare | Client::BareWatch => send_bare(server, &ns, bare_patches).await?,
    }
    if let Some(child) = &guard {
        // A sync point only, and a cheap one: polling the server (a list of every pod) during
        // the burst would load it while the guard writes, which the bare client's burst is
        // spared. The judge is the server's record below.
        wait_for(
            &format!("the guard to count {pods} bypasses of {SECOND}"),
            Duration::from_secs(600),
            async || {
                let done = child
                    .metric("initguard_bypasses_total", &[("initializer", SECOND)])
                    .await?;
                Ok((done >= pods as f64).then_some(()))
            },
        )
        .await?;
    }
    let mut seen = Vec::new();
    let patched = |seen: &[Req]| last_patches(seen, &user, &ns);
    // The audit log is written as requests complete: wait until it holds every pod's patch.
    let recorded = wait_for(
        &format!("the patches of {ns} in the server's record"),
        Duration::from_secs(120),
        async || {
            seen.extend(server.take_requests()?);
            Ok((patched(&seen).len() >= pods).then_some(()))
        },
    )
    .await;
    if let Err(e) = recorded {
        let mut tally: BTreeMap<String, usize> = BTreeMap::new();
        for r in seen.iter().filter(|r| r.namespace == ns) {
            *tally
                .entry(format!("{} {} {} {}", r.user, r.verb, r.resource, r.code))
                .or_default() += 1;
        }
        let log = guard
            .as_ref()
            .map(|g| std::fs::read_to_string(&g.log).unwrap_or_default())
            .unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        bail!(
            "{e}: {} pods patched; requests in {ns}: {tally:#?}\nguard log, newest first:\n{}",
            patched(&seen).len(),
            tail.join("\n")
        );
    }
    if client == (Client::Guard { events: true }) {
        // The Events trail the patches; the server's CPU counts them too.
        await_events(server, &mut seen, &user, &ns, pods).await?;
    }
    let server_cpu = server.server_cpu().saturating_sub(server_cpu0);
    let client_cpu = process_cpu_time(client_pid).saturating_sub(client_cpu0);
    // Every pod initialized, by the server's own list (after the window: a list of every pod
    // is not free).
    all_initialized(&admin, &ns, pods, mechanism).await?;
    if let Some(child) = guard.take() {
        // Stopping drains: an Event it still held is written before it exits.
        child.stop()?;
    }
    if let Some(task) = watching.take() {
        task.abort();
    }
    seen.extend(server.take_requests()?);
    let trigger = match client {
        Client::Guard { .. } => seen
            .iter()
            .find(|r| {
                r.verb == "delete" && r.resource == "pods" && r.name == OWNER && r.namespace == ns
            })
            .map(|r| r.received)
            .ok_or_else(|| anyhow!("the owner pod's deletion is not in the server's record"))?,
        Client::Bare | Client::BareWatch => started,
    };
    // Everything the client asked in the window, for the progress log.
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for r in seen.iter().filter(|r| r.user == user) {
        *tally
            .entry(format!("{} {} {}", r.verb, r.resource, r.code))
            .or_default() += 1;
    }
    eprintln!("    {} requests by {user}: {tally:?}", client.label());
    let mut latencies: Vec<Duration> = patched(&seen)
        .values()
        .map(|done| after(*done, trigger))
        .collect();
    latencies.sort();
    let writes = Writes::of(&seen, &user, &ns);
    clear_namespace(&admin, &ns).await?;
    Ok(Run {
        server: bed.label.clone(),
        pods,
        client,
        span: latencies.last().copied().unwrap_or_default(),
        latencies,
        patches: writes.patches,
        events: writes.events,
        other_writes: writes.other,
        server_cpu,
        client_cpu,
    })
}

/// Waits until the server's record holds `pods` Event creates by `user` in `ns` (the Events
/// trail the patches), adding what it reads to `seen`.
async fn await_events(
    server: &mut Server,
    seen: &mut Vec<Req>,
    user: &str,
    ns: &str,
    pods: usize,
) -> Result<()> {
    wait_for(
        &format!("{pods} Events in {ns}"),
        Duration::from_secs(120),
        async || {
            seen.extend(server.take_requests()?);
            Ok((succeeded(seen, user, "create", "events", ns).count() >= pods).then_some(()))
        },
    )
    .await
}

/// When each pod's last successful patch by `user` in `ns` committed.
fn last_patches(seen: &[Req], user: &str, ns: &str) -> BTreeMap<String, SystemTime> {
    let mut last = BTreeMap::new();
    for r in succeeded(seen, user, "patch", "pods", ns) {
        let t = last.entry(r.name.clone()).or_insert(r.done);
        *t = (*t).max(r.done);
    }
    last
}

/// A client's writes in a namespace, by the server's record.
struct Writes {
    /// Successful pod patches.
    patches: usize,
    /// Event creates.
    events: usize,
    /// Every other write.
    other: usize,
}

impl Writes {
    fn of(seen: &[Req], user: &str, ns: &str) -> Writes {
        let writes: Vec<&Req> = seen
            .iter()
            .filter(|r| {
                r.user == user
                    && r.namespace == ns
                    && !matches!(r.verb.as_str(), "get" | "list" | "watch")
            })
            .collect();
        let patches = writes
            .iter()
            .filter(|r| r.verb == "patch" && r.resource == "pods" && (200..300).contains(&r.code))
            .count();
        let events = writes
            .iter()
            .filter(|r| r.verb == "create" && r.resource == "events")
            .count();
        Writes {
            patches,
            events,
            other: writes.len() - patches - events,
        }
    }
}

/// A watch on every pod as the guard's identity through the guard's own client stack
/// (uninitialized pods included on legacy servers), drained; the receiver fires once its
/// initial list is done.
async fn drained_watch(
    server: &Server,
    mechanism: Mechanism,
) -> Result<(
    tokio::task::JoinHandle<()>,
    tokio::sync::oneshot::Receiver<()>,
)> {
    let config = config_of(&server.guard_kubeconfig()).await?;
    let client = initguard::client::build(config, mechanism)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut tx = Some(tx);
    let stream = kube::runtime::watcher(
        Api::<initguard::pod::SlimPod>::all(client),
        Default::default(),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(kube::runtime::watcher::Event::InitDone) = event
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    Ok((task, rx))
}

/// Section e of the report.
pub(crate) fn report(sizes: &[usize], runs: &[Run]) {
    println!("## 8. Two initializers per pod, one dead owner: one patch each");
    println!();
    println!(
        "_`cargo bench --bench real -- --two` (benches/real/two.rs); {} cores; load average {}_",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    println!();
    println!(
        "Every pod waits on `{FIRST}` then `{SECOND}`, both owned by one pod (`owner: {{ pods: \
         … }}`, `ownerDownGrace: 0s`): on legacy servers an InitializerConfiguration (the \
         simulator's `legacy_initializers`) puts them on every pod created with \
         `?includeUninitialized=true` (202 at once), on current servers they are two \
         scheduling gates. Each round seeds N pods and runs, in turn, `initguard run` with \
         `events: perPatch`, with `events: off`, and a bare client that lists once and sends \
         one JSON Patch per pod removing both (metainit's single patch; \
         `initguard::bypass::bypass_patch` with both removals) with {DEFAULT_MAX_IN_FLIGHT} in \
         flight as the guard's identity, and the same bare client while a watch on every pod \
         (uninitialized ones included, through the guard's client stack) is open by the same \
         identity and drained: the part of the gap that any watching controller costs the \
         server (metainit itself watches). Trigger: the owner pod's deletion received by the \
         server (bare client: just before its first request). Span: trigger → the last pod's \
         patch committed (`stageTimestamp` in the audit log; the simulator's request log). \
         Requests per pod: writes by the client's identity in the namespace, from the same \
         record. Server CPU: kube-apiserver + etcd (the simulator: this whole process) from the \
         trigger until the last Event."
    );
    println!();
    println!(
        "| server | pods | rounds | perPatch span, median | off span | bare span | bare + watch span | perPatch / bare, median (min–max) | off / bare | goal ≤ 1.1 | off / (bare + watch) | patches / pod (guard) | Events / pod | other writes | p50 / p99 (perPatch) | p50 / p99 (bare) | server CPU / pod: perPatch, off, bare, bare + watch |"
    );
    println!(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let servers = in_order(runs.iter().map(|r| r.server.as_str()));
    for server in servers {
        for &pods in sizes {
            let of = |client: Client| -> Vec<&Run> {
                runs.iter()
                    .filter(|r| r.server == server && r.pods == pods && r.client == client)
                    .collect()
            };
            let [loud, quiet, bare, watch] = Client::ALL.map(of);
            if bare.is_empty() {
                continue;
            }
            let span = |rs: &[&Run]| {
                let mut s: Vec<f64> = rs.iter().map(|r| r.span.as_secs_f64()).collect();
                fmt_d(Duration::from_secs_f64(median(&mut s)))
            };
            let ratios_to = |a: &[&Run], base: &[&Run]| {
                let mut r: Vec<f64> = a
                    .iter()
                    .zip(base)
                    .map(|(a, b)| a.span.as_secs_f64() / b.span.as_secs_f64().max(1e-9))
                    .collect();
                r.sort_by(f64::total_cmp);
                let m = median(&mut r.clone());
                (
                    m,
                    r.first().copied().unwrap_or(f64::NAN),
                    r.last().copied().unwrap_or(f64::NAN),
                )
            };
            let (lm, llo, lhi) = ratios_to(&loud, &bare);
            let (qm, _, _) = ratios_to(&quiet, &bare);
            let (wm, _, _) = ratios_to(&quiet, &watch);
            let per_pod = |rs: &[&Run], f: fn(&Run) -> usize| {
                let total: usize = rs.iter().map(|r| f(r)).sum();
                total as f64 / (pods * rs.len()).max(1) as f64
            };
            let guard_runs: Vec<&Run> = loud.iter().chain(&quiet).copied().collect();
            let pooled = |rs: &[&Run]| {
                let mut all: Vec<Duration> = rs
                    .iter()
                    .flat_map(|r| r.latencies.iter().copied())
                    .collect();
                all.sort();
                format!(
                    "{} / {}",
                    fmt_d(percentile(&all, 0.5)),
                    fmt_d(percentile(&all, 0.99))
                )
            };
            let cpu = |rs: &[&Run]| {
                let mut v: Vec<f64> = rs
                    .iter()
                    .map(|r| r.server_cpu.as_secs_f64() * 1e6 / pods as f64)
                    .collect();
                format!("{:.0} µs", median(&mut v))
            };
            println!(
                "| {server} | {pods} | {} | {} | {} | {} | {} | **{lm:.2} ({llo:.2}–{lhi:.2})** | {qm:.2} | {} | {wm:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {}, {}, {}, {} |",
                bare.len(),
                span(&loud),
                span(&quiet),
                span(&bare),
                span(&watch),
                if lm <= 1.1 && qm <= 1.1 {
                    "met"
                } else {
                    "**MISSED**"
                },
                per_pod(&guard_runs, |r| r.patches),
                per_pod(&loud, |r| r.events),
                per_pod(&guard_runs, |r| r.other_writes),
                pooled(&loud),
                pooled(&bare),
                cpu(&loud),
                cpu(&quiet),
                cpu(&bare),
                cpu(&watch),
            );
        }
    }
    println!();
    println!("### Every run");
    println!();
    println!(
        "| server | pods | client | span | patches | Events | other writes | server CPU / pod | client CPU / pod |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in runs {
        let per = |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6 / r.pods.max(1) as f64);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.server,
            r.pods,
            r.client.label(),
            fmt_d(r.span),
            r.patches,
            r.events,
            r.other_writes,
            per(r.server_cpu),
            per(r.client_cpu)
        );
    }
    println!();
}

/// The distinct `labels`, in the order they first appear.
fn in_order<'a>(labels: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for label in labels {
        if !out.contains(&label) {
            out.push(label);
        }
    }
    out
}

/// What section e runs.
pub(crate) struct Plan {
    pub sizes: Vec<usize>,
    /// Rounds per size.
    pub rounds: Vec<usize>,
    /// The 1.13 servers (legacy initializers).
    pub legacy: bool,
    /// The current servers (two gates).
    pub gates: bool,
    /// Also the simulator beside each real server.
    pub simulator: bool,
    /// Pods per steady-arrival run (0: none).
    pub steady_pods: usize,
}

pub(crate) async fn run_two(plan: &Plan) -> Result<()> {
    let mut runs = Vec::new();
    let mut steadies = Vec::new();
    let mut beds: Vec<Bed> = Vec::new();
    if plan.legacy && plan.simulator {
        beds.push(start_legacy_sim().await?);
    }
    if plan.legacy {
        eprintln!("real --two: starting the 1.13 test bed");
        beds.push(start_legacy_real().await?);
    }
    for bed in beds.iter_mut() {
        if plan.steady_pods > 0 {
            steady_all(bed, plan.steady_pods, &mut steadies).await?;
        }
        burst_all(bed, &plan.sizes, &plan.rounds, &mut runs).await?;
    }
    // One real test bed at a time: the 1.13 one goes down before the current one starts.
    drop(beds);
    // Steady arrivals run on the legacy beds only: without bursts the current ones have
    // nothing to do.
    if plan.gates && !plan.sizes.is_empty() {
        let mut beds = Vec::new();
        if plan.simulator {
            beds.push(start_gates_sim().await?);
        }
        beds.push(start_gates_real()?);
        for bed in beds.iter_mut() {
            burst_all(bed, &plan.sizes, &plan.rounds, &mut runs).await?;
        }
    }
    if !runs.is_empty() {
        report(&plan.sizes, &runs);
    }
    if !steadies.is_empty() {
        report_steady(&steadies);
    }
    Ok(())
}

/// Steady arrivals at 100 pods/s, five alternating rounds of every client.
async fn steady_all(bed: &mut Bed, pods: usize, out: &mut Vec<Steady>) -> Result<()> {
    const RATE: u32 = 100;
    for round in 1..=5 {
        for client in Client::STEADY {
            let s = steady(bed, pods, RATE, round, client).await?;
            eprintln!(
                "  {} steady {RATE}/s round {round} {}: p99 {} ({} patches, {} Events)",
                s.server,
                client.label(),
                fmt_d(percentile(&s.reactions, 0.99)),
                s.patches,
                s.events
            );
            out.push(s);
        }
    }
    Ok(())
}

async fn burst_all(
    bed: &mut Bed,
    sizes: &[usize],
    rounds: &[usize],
    runs: &mut Vec<Run>,
) -> Result<()> {
    for (i, &pods) in sizes.iter().enumerate() {
        let n = rounds.get(i).or(rounds.first()).copied().unwrap_or(5);
        for round in 1..=n {
            for client in Client::ALL {
                let r = burst_two(bed, pods, round, client).await?;
                eprintln!(
                    "  {} {pods} round {round} {}: {} ({} patches, {} Events, {} other writes; \
                     first patch after {}, p50 {})",
                    r.server,
                    client.label(),
                    fmt_d(r.span),
                    r.patches,
                    r.events,
                    r.other_writes,
                    fmt_d(r.latencies.first().copied().unwrap_or_default()),
                    fmt_d(percentile(&r.latencies, 0.5)),
                );
                runs.push(r);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Steady arrivals: pods created at a fixed rate, each initialized as soon as it is seen
// ---------------------------------------------------------------------------------------------

/// One steady run: per-pod reaction, create sent → initializing patch committed.
pub(crate) struct Steady {
    server: String,
    client: Client,
    pods: usize,
    rate: u32,
    reactions: Vec<Duration>,
    patches: usize,
    events: usize,
    other_writes: usize,
    server_cpu: Duration,
}

/// The compat-style config: both initializers at deadline 0, no owner (as
/// config/metainit-compat.yaml does for every initializer).
fn steady_config(mechanism: Mechanism, events: bool) -> String {
    format!(
        "mechanism: {}\noptIn: {{ label: {OPT_IN} }}\nleaderElection: {{ enabled: false }}\n\
         unlistedInitializers: ignore\nevents: {}\ninitializers:\n\
         \x20 - {{ name: {FIRST}, deadline: 0s }}\n  - {{ name: {SECOND}, deadline: 0s }}\n",
        mechanism.as_str(),
        if events { "perPatch" } else { "off" },
    )
}

/// A metainit-like client: a watch on the namespace's pods (uninitialized ones included) and
/// one patch per waiting pod removing everything pending, `DEFAULT_MAX_IN_FLIGHT` at once.
async fn bare_watcher(
    client: kube::Client,
    ns: String,
    mechanism: Mechanism,
    synced: tokio::sync::oneshot::Sender<()>,
) -> Result<()> {
    let api: Api<initguard::pod::SlimPod> = Api::namespaced(client, &ns);
    // A long-running controller's connections are open: warm as many as it sends at once,
    // so no reaction pays for a TLS handshake.
    let one = ListParams::default().limit(1);
    stream::iter(0..DEFAULT_MAX_IN_FLIGHT)
        .map(|_| api.list(&one))
        .buffer_unordered(DEFAULT_MAX_IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await
        .context("warming the bare watcher's connections")?;
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_IN_FLIGHT));
    let mut sent = std::collections::HashSet::new();
    let mut synced = Some(synced);
    let stream = kube::runtime::watcher(api.clone(), Default::default());
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let pod = match event? {
            kube::runtime::watcher::Event::InitDone => {
                if let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
                continue;
            }
            kube::runtime::watcher::Event::Apply(pod)
            | kube::runtime::watcher::Event::InitApply(pod) => pod,
            _ => continue,
        };
        let pending = pod.pending(mechanism).to_vec();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if pending.is_empty() || !sent.insert(uid.clone()) {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let rv = pod.metadata.resource_version.clone().unwrap_or_default();
        let target = BypassTarget {
            uid: &uid,
            resource_version: &rv,
            annotations_present: pod.annotations_present,
            previous_record: pod.bypassed_record.as_deref(),
            opt_in_label: Some((OPT_IN, "true")),
        };
        let removals: Vec<Removal> = pending
            .iter()
            .enumerate()
            .map(|(index, initializer)| Removal {
                index,
                initializer,
                reason: Reason::Deadline,
            })
            .collect();
        let patch = bypass_patch(mechanism, &target, &removals, SystemTime::now());
        let permit = slots.clone().acquire_owned().await?;
        let api = api.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = api
                .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
            {
                eprintln!("  bare watcher: patch of {name}: {e}");
            }
        });
    }
    Ok(())
}

pub(crate) async fn steady(
    bed: &mut Bed,
    pods: usize,
    rate: u32,
    round: usize,
    client: Client,
) -> Result<Steady> {
    let mechanism = bed.mechanism;
    let server = &mut bed.server;
    let admin = client_of(&server.admin_kubeconfig()).await?;
    let ns = format!("steady-{round}-{}", client.short());
    create_namespace(&admin, &ns).await?;
    let user = server.guard_user().to_owned();
    let mut guard = None;
    let mut watcher = None;
    match client {
        Client::Guard { events } => {
            let mut child = GuardChild::spawn(server, &ns, &steady_config(mechanism, events))?;
            child.ready(Instant::now()).await?;
            guard = Some(child);
        }
        // The metainit-like client watches by construction.
        Client::Bare | Client::BareWatch => {
            let config = config_of(&server.guard_kubeconfig()).await?;
            let (tx, synced) = tokio::sync::oneshot::channel();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let ns = ns.clone();
            // A runtime of its own (as the guard is a process of its own), so the arrivals
            // this process drives never delay its reactions; its client is built there too.
            let thread = std::thread::spawn(move || -> Result<()> {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .context("the bare watcher's runtime")?;
                runtime.block_on(async move {
                    // The guard's own client stack: includeUninitialized on pod reads.
                    let client = initguard::client::build(config, mechanism)?;
                    tokio::select! {
                        done = bare_watcher(client, ns, mechanism, tx) => done,
                        _ = stopped => Ok(()),
                    }
                })
            });
            watcher = Some((stop, thread));
            tokio::time::timeout(Duration::from_secs(60), synced)
                .await
                .context("the bare watcher did not list")?
                .context("the bare watcher ended")?;
        }
    }
    server.take_requests()?;
    let server_cpu0 = server.server_cpu();
    // Arrivals at a fixed rate, each create on its own task, so a slow answer delays no
    // later arrival; each pod's send time on this process's clock (the audit log's too).
    let path = pods_path(&ns, mechanism);
    let mut sent: BTreeMap<String, SystemTime> = BTreeMap::new();
    let mut creates = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..pods {
        tick.tick().await;
        let name = format!("s-{i:05}");
        sent.insert(name.clone(), SystemTime::now());
        let admin = admin.clone();
        let path = path.clone();
        let body = pod_body(&name, mechanism, true);
        creates.spawn(async move { raw(&admin, http::Method::POST, &path, Some(body)).await });
    }
    while let Some(done) = creates.join_next().await {
        done.context("a create task")??;
    }
    let mut seen = Vec::new();
    let patched = |seen: &[Req]| last_patches(seen, &user, &ns);
    wait_for(
        &format!("the patches of {ns} in the server's record"),
        Duration::from_secs(120),
        async || {
            seen.extend(server.take_requests()?);
            Ok((patched(&seen).len() >= pods).then_some(()))
        },
    )
    .await?;
    if client == (Client::Guard { events: true }) {
        await_events(server, &mut seen, &user, &ns, pods).await?;
    }
    let server_cpu = server.server_cpu().saturating_sub(server_cpu0);
    // By the server's own list, after the window (a list of every pod is not free).
    all_initialized(&admin, &ns, pods, mechanism).await?;
    if let Some(child) = guard.take() {
        child.stop()?;
    }
    if let Some((stop, thread)) = watcher.take() {
        let _ = stop.send(());
        thread
            .join()
            .map_err(|_| anyhow!("the bare watcher panicked"))??;
    }
    seen.extend(server.take_requests()?);
    let mut reactions: Vec<Duration> = patched(&seen)
        .iter()
        .filter_map(|(name, done)| Some(after(*done, *sent.get(name)?)))
        .collect();
    reactions.sort();
    let writes = Writes::of(&seen, &user, &ns);
    clear_namespace(&admin, &ns).await?;
    Ok(Steady {
        server: bed.label.clone(),
        client,
        pods,
        rate,
        reactions,
        patches: writes.patches,
        events: writes.events,
        other_writes: writes.other,
        server_cpu,
    })
}

/// Section e, steady arrivals.
pub(crate) fn report_steady(runs: &[Steady]) {
    println!("### Steady arrivals: reaction per pod");
    println!();
    println!(
        "Pods created at a fixed rate (each create on its own task) with both initializers, \
         and a client that removes them as soon as it sees the pod: the guard with both at \
         `deadline: 0s` (as `config/metainit-compat.yaml` treats every initializer), or a bare \
         metainit-like client (a watch on the namespace's pods and one patch per pod removing \
         everything pending, {DEFAULT_MAX_IN_FLIGHT} in flight, on a runtime and client of \
         its own so that the arrivals this process drives never delay it). Reaction: the create sent (this \
         process's clock, the machine the audit log is written on) → the pod's patch committed \
         in the server's record. Rounds alternate the clients."
    );
    println!();
    println!(
        "| server | rate | pods / run | client | runs | reaction p50 | p99 | max | p99 / bare p99 | goal ≤ 1.2 | patches / pod | Events / pod | other writes | server CPU / pod |"
    );
    println!(
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
    );
    let servers = in_order(runs.iter().map(|r| r.server.as_str()));
    for server in servers {
        let pooled = |client: Client| {
            let rs: Vec<&Steady> = runs
                .iter()
                .filter(|r| r.server == server && r.client == client)
                .collect();
            let mut all: Vec<Duration> = rs
                .iter()
                .flat_map(|r| r.reactions.iter().copied())
                .collect();
            all.sort();
            (rs, all)
        };
        let (_, bare_all) = pooled(Client::Bare);
        let bare_p99 = percentile(&bare_all, 0.99);
        for client in Client::STEADY {
            let (rs, all) = pooled(client);
            let Some(first) = rs.first() else { continue };
            let pods: usize = rs.iter().map(|r| r.pods).sum();
            let p99 = percentile(&all, 0.99);
            let ratio = p99.as_secs_f64() / bare_p99.as_secs_f64().max(1e-9);
            let sum = |f: fn(&Steady) -> usize| {
                rs.iter().map(|r| f(r)).sum::<usize>() as f64 / pods.max(1) as f64
            };
            let cpu: Duration = rs.iter().map(|r| r.server_cpu).sum();
            println!(
                "| {server} | {}/s | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.0} µs |",
                first.rate,
                first.pods,
                client.label(),
                rs.len(),
                fmt_d(percentile(&all, 0.5)),
                fmt_d(p99),
                fmt_d(all.last().copied().unwrap_or_default()),
                if client == Client::Bare {
                    "—".to_owned()
                } else {
                    format!("**{ratio:.2}**")
                },
                match client {
                    Client::Bare => "—",
                    _ if ratio <= 1.2 => "met",
                    _ => "**MISSED**",
                },
                sum(|r| r.patches),
                sum(|r| r.events),
                sum(|r| r.other_writes),
                cpu.as_secs_f64() * 1e6 / pods.max(1) as f64
            );
        }
    }
    println!();
}
