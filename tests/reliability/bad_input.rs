//! Bad input: hostile pods through the API, garbage on the pod watch, pods a PATCH cannot find.
//! The guard (the released binary) must skip or handle each, keep /healthz at 200, touch only
//! what it decided, and still bypass a normal opted-in pod at its deadline afterwards.

use initguard_sim::SimClients as _;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use initguard::bypass::BYPASSED_ANNOTATION;
use initguard::config::Mechanism;
use initguard_test_support::pod::{BYPASSED, pending, records_in};
use kube_sim::{ChangeType, Sim, SimOptions};
use serde_json::{Value, json};

use crate::fake_api::FakeApi;
use crate::support::*;
use initguard_test_support::cpu::{process_cpu_time, thread_cpu_time};

const NS: &str = "hostile";
/// The one listed initializer; everything else is unlisted and ignored.
const BIG: &str = "big.example.com";
/// How long the listed initializer may hold an opted-in pod.
const DEADLINE: Duration = Duration::from_secs(2);

fn config_yaml(mechanism: Mechanism, unlisted: &str) -> String {
    format!(
        "mechanism: {}\nlisten: 127.0.0.1:0\noptIn: {{ label: {OPT_IN} }}\n\
         defaults: {{ deadline: {}ms }}\nunlistedInitializers: {unlisted}\n\
         initializers:\n  - {{ name: {BIG}, deadline: {}ms }}\nleaderElection: {{ enabled: false }}\n",
        mechanism.as_str(),
        DEADLINE.as_millis(),
        DEADLINE.as_millis()
    )
}

/// Start the guard binary with `config` against the server of `kubeconfig`; wait until it
/// serves.
async fn guard(dir: &Path, config: &str, kubeconfig: &str) -> (GuardProcess, std::net::SocketAddr) {
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let kubeconfig_path = dir.join("kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig).unwrap();
    let mut process = GuardProcess::run(dir, "guard", &config_path, &kubeconfig_path, &[], &[]);
    let addr = process.wait_addr(Duration::from_secs(20)).await;
    (process, addr)
}

/// GET `path` and expect 200.
async fn get_ok(guard: &GuardProcess, addr: std::net::SocketAddr, path: &str) -> String {
    match http_get(addr, path, Duration::from_secs(5)).await {
        Ok((200, body)) => body,
        other => panic!("GET {path}: {other:?}\n{}", guard.log_text()),
    }
}

/// A pod for the simulated server: `gates` entries as given (not only names), labels as given.
fn sim_pod(name: &str, labels: Value, gates: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": NS, "labels": labels },
        "spec": {
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
            "schedulingGates": gates,
        },
    })
}

fn gate(name: &str) -> Value {
    json!({ "name": name })
}

fn opted() -> Value {
    json!({ OPT_IN: "true" })
}

/// Names that real API servers reject but a lax one stores; none of them may be touched.
fn odd_names() -> Vec<String> {
    vec![
        "ünïcødé.example.com/ゲート".into(),
        "x".repeat(1000),
        "a/b/c".into(),
        "tilde~0~1/x".into(),
        "quote\"name".into(),
        "back\\slash".into(),
        "new\nline".into(),
        "comma,equals=at@sign".into(),
        " spaced ".into(),
        String::new(),
    ]
}

/// Hostile pods through the API: no labels, null metadata fields, 5,000 gates (opted in) and
/// 35,000 (not), odd and malformed gate entries, unknown fields, a 1 MiB annotation and a junk
/// bypass record. Only
/// the listed gate of opted-in pods is removed, at its index, after its deadline, recorded after
/// what was there; the guard keeps serving, its metrics stay bounded and well-formed, and a
/// normal pod created afterwards is bypassed on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_pods_through_the_api() {
    let sim = Sim::start(SimOptions {
        schedule_delay: Duration::from_millis(20),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    sim.enforce_rbac_policy(GUARD_USER, shipped_rbac(Mechanism::SchedulingGates));
    create_namespace(&sim, NS).await;
    let dir = tempfile::tempdir().unwrap();
    let (process, addr) = guard(
        dir.path(),
        &config_yaml(Mechanism::SchedulingGates, "ignore"),
        &sim.kubeconfig_yaml(GUARD_USER),
    )
    .await;

    let path = format!("/api/v1/namespaces/{NS}/pods");
    let mut odd: Vec<Value> = vec![json!({}), json!({ "name": 5 }), json!({ "name": null })];
    odd.extend(odd_names().iter().map(|n| gate(n)));
    odd.insert(5, gate(BIG));
    let mut many: Vec<Value> = (0..5000)
        .map(|i| gate(&format!("filler-{i}.example.com")))
        .collect();
    many.push(gate(BIG));
    let mut unknown = sim_pod(
        "unknown-fields",
        opted(),
        vec![json!({ "name": BIG, "frob": [1, {}] })],
    );
    unknown["frob"] = json!({ "nested": [null, 1.5, "x"] });
    unknown["metadata"]["frob"] = json!(true);
    unknown["spec"]["frob"] = json!("y");
    let mut nulls = sim_pod("nulls", opted(), vec![gate(BIG)]);
    for field in [
        "annotations",
        "ownerReferences",
        "finalizers",
        "generateName",
    ] {
        nulls["metadata"][field] = Value::Null;
    }
    let mut huge = sim_pod("huge-annotation", opted(), vec![gate(BIG)]);
    let junk_record = "garbage,=,@,,x=y@, =deadline@z";
    huge["metadata"]["annotations"] =
        json!({ "blob": "x".repeat(1 << 20), BYPASSED_ANNOTATION: junk_record });
    let mut no_labels = sim_pod("no-labels", Value::Null, vec![gate(BIG)]);
    no_labels["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    // About the most gates an object fits in etcd (1.4 MB), on a pod that is not opted in: anyone
    // who may create a pod anywhere can create it, so it must not slow the guard down. Names of
    // equal length that differ only at the end make every comparison of two of them cost.
    let mut most: Vec<Value> = (0..35_000)
        .map(|i| gate(&format!("most.example.com/gate-{i:05}")))
        .collect();
    most.push(gate(BIG));
    let pods = vec![
        no_labels,
        nulls,
        sim_pod("many-gates", opted(), many),
        sim_pod("odd-gates", opted(), odd),
        unknown,
        huge,
        {
            // With a bypass record as large as annotations may be, that nobody can parse.
            let mut pod = sim_pod("most-gates", json!({ "app": "x" }), most);
            pod["metadata"]["annotations"] = json!({ BYPASSED_ANNOTATION: "j".repeat(200 << 10) });
            pod
        },
    ];
    for pod in &pods {
        post(&sim, &path, pod).await;
    }
    // Duplicate gate names are rejected by the API (as by real servers), so never reach the guard.
    let dup = sim_pod("duplicates", opted(), vec![gate(BIG), gate(BIG)]);
    let rejected = sim
        .client(ADMIN)
        .request::<Value>(
            http::Request::post(&path)
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&dup).unwrap())
                .unwrap(),
        )
        .await;
    assert!(
        matches!(&rejected, Err(kube::Error::Api(s)) if s.code == 422),
        "{rejected:?}"
    );

    let bypassed = [
        "nulls",
        "many-gates",
        "odd-gates",
        "unknown-fields",
        "huge-annotation",
    ];
    let stored = |name: &str| sim.get_object("pods", Some(NS), name).unwrap();
    let gates_of = |name: &str| {
        stored(name)["spec"]["schedulingGates"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let waited = Instant::now();
    while bypassed
        .iter()
        .any(|n| gates_of(n).iter().any(|g| g["name"] == BIG))
    {
        assert!(
            waited.elapsed() < initguard_test_support::wait::PATIENCE,
            "the listed gate is still pending on {:?}\n{}",
            bypassed
                .iter()
                .filter(|n| gates_of(n).iter().any(|g| g["name"] == BIG))
                .collect::<Vec<_>>(),
            process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "hostile pods: all listed gates bypassed {:?} after creation",
        waited.elapsed()
    );

    // Exactly the listed entry went, at its index, after the deadline.
    for (pod, name) in pods.iter().zip([
        "no-labels",
        "nulls",
        "many-gates",
        "odd-gates",
        "unknown-fields",
        "huge-annotation",
        "most-gates",
    ]) {
        let before = pod["spec"]["schedulingGates"].as_array().unwrap().clone();
        let expected: Vec<Value> = if bypassed.contains(&name) {
            before
                .iter()
                .filter(|g| g["name"] != BIG)
                .cloned()
                .collect()
        } else {
            before.clone()
        };
        let after = gates_of(name);
        assert!(
            after == expected,
            "{name}: gates {} -> {} entries, expected {}",
            before.len(),
            after.len(),
            expected.len()
        );
    }
    let guard_changes: Vec<_> = sim
        .object_history()
        .into_iter()
        .filter(|c| c.user == GUARD_USER && c.resource == "pods")
        .collect();
    assert_eq!(
        guard_changes.len(),
        bypassed.len(),
        "one patch per opted-in pod: {guard_changes:#?}"
    );
    for c in &guard_changes {
        assert!(
            bypassed.contains(&c.name.as_str()),
            "guard changed {}",
            c.name
        );
        assert_eq!(c.change_type, ChangeType::Modified);
        let waited = secs_between(
            creation_timestamp(c.after.as_ref().unwrap()).unwrap(),
            c.time,
        );
        assert!(
            waited >= DEADLINE.as_secs_f64(),
            "{} bypassed after {waited:.3}s",
            c.name
        );
        let annotations = &c.after.as_ref().unwrap()["metadata"]["annotations"];
        let record = annotations[BYPASSED].as_str().unwrap();
        let records: Vec<_> = records_in(record)
            .into_iter()
            .filter(|r| r.well_formed())
            .collect();
        assert_eq!(records.len(), 1, "{}: {record:?}", c.name);
        assert_eq!(
            (records[0].initializer.as_str(), records[0].reason.as_str()),
            (BIG, "deadline")
        );
        if c.name == "huge-annotation" {
            assert!(
                record.starts_with(junk_record),
                "earlier record lost: {record:?}"
            );
            assert_eq!(annotations["blob"].as_str().map(str::len), Some(1 << 20));
        }
        if c.name == "unknown-fields" {
            assert_eq!(
                c.after.as_ref().unwrap()["spec"]["frob"],
                "y",
                "unknown fields kept"
            );
        }
    }
    let writes: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == GUARD_USER
                && r.resource == "pods"
                && r.verb != "get"
                && r.verb != "list"
                && r.verb != "watch"
        })
        .collect();
    assert_eq!(writes.len(), bypassed.len(), "{writes:#?}");
    assert!(
        sim.requests()
            .iter()
            .all(|r| r.user != GUARD_USER || r.status != 403)
    );

    // Still serving; metrics bounded (unlisted names beyond 50 are `other`) and well-formed.
    assert_eq!(get_ok(&process, addr, "/healthz").await.trim(), "ok");
    // Bounded in the guard's CPU time, which machine load does not inflate.
    let cpu_before = process_cpu_time(process.pid());
    let metrics = get_ok(&process, addr, "/metrics").await;
    let scrape = process_cpu_time(process.pid()) - cpu_before;
    let labels: BTreeSet<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("initguard_waiting_pods{"))
        .filter_map(|l| l.split("initializer=\"").nth(1)?.split('"').next())
        .collect();
    assert!(
        labels.len() <= 52,
        "{} initializer label values",
        labels.len()
    );
    assert!(labels.contains("other"), "{labels:?}");
    for line in metrics
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(
            value.parse::<f64>().is_ok(),
            "malformed metrics line {line:?}"
        );
    }
    let cpu_before = process_cpu_time(process.pid());
    let status: Value = serde_json::from_str(&get_ok(&process, addr, "/status").await).unwrap();
    let status_took = process_cpu_time(process.pid()) - cpu_before;
    assert!(status.is_object());
    println!(
        "hostile pods: /metrics cost the guard {scrape:?} of CPU ({} bytes), /status \
         {status_took:?}",
        metrics.len()
    );
    // Linear work per scrape takes milliseconds here; quadratic work in the pending list took
    // seconds, holding the lock the control loop needs. (CPU is counted in 10 ms ticks and
    // includes whatever else the guard did meanwhile: the bound is generous.)
    assert!(
        scrape < Duration::from_millis(500),
        "/metrics cost {scrape:?} of CPU with a 35,000-gate pod"
    );

    // Its owner removes the first gate, then all the others at once: each update must cost
    // the guard no more than the pod's size.
    let most = format!("{path}/most-gates");
    for patch in [
        json!([{ "op": "remove", "path": "/spec/schedulingGates/0" }]),
        json!([{ "op": "replace", "path": "/spec/schedulingGates", "value": [] }]),
    ] {
        let request = http::Request::patch(&most)
            .header("content-type", "application/json-patch+json")
            .body(serde_json::to_vec(&patch).unwrap())
            .unwrap();
        sim.client(ADMIN).request::<Value>(request).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let cpu_before = process_cpu_time(process.pid());
        get_ok(&process, addr, "/metrics").await;
        let took = process_cpu_time(process.pid()) - cpu_before;
        println!(
            "hostile pods: /metrics cost {took:?} of CPU after an update of the 35,000-gate pod"
        );
        assert!(
            took < Duration::from_millis(500),
            "/metrics cost {took:?} of CPU after an update of the 35,000-gate pod"
        );
    }

    // A normal pod afterwards is still bypassed at its deadline.
    post(&sim, &path, &sim_pod("normal", opted(), vec![gate(BIG)])).await;
    let normal = Instant::now();
    until("the normal pod to be bypassed", || {
        gates_of("normal").is_empty()
    })
    .await;
    assert!(
        normal.elapsed() + Duration::from_secs(1) >= DEADLINE,
        "bypassed early"
    );
    assert_eq!(get_ok(&process, addr, "/healthz").await.trim(), "ok");
    assert!(
        !process.log_text().contains("panicked"),
        "{}",
        process.log_text()
    );
}

/// Legacy initializers may repeat a name (nothing validates that): the first occurrence is
/// decided, each patch removes exactly one entry at its index, and the pod initializes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_duplicate_initializers() {
    let sim = Sim::start(SimOptions {
        mechanism: Mechanism::Initializers,
        schedule_delay: Duration::from_millis(20),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    sim.enforce_rbac_policy(GUARD_USER, shipped_rbac(Mechanism::Initializers));
    create_namespace(&sim, NS).await;
    let dir = tempfile::tempdir().unwrap();
    let (process, _addr) = guard(
        dir.path(),
        &config_yaml(Mechanism::Initializers, "ignore"),
        &sim.kubeconfig_yaml(GUARD_USER),
    )
    .await;
    let mut pod = sim_pod("dup", opted(), vec![]);
    pod["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulingGates");
    pod["metadata"]["initializers"] = json!({ "pending": [gate(BIG), gate(BIG)] });
    post(
        &sim,
        &format!("/api/v1/namespaces/{NS}/pods?includeUninitialized=true"),
        &pod,
    )
    .await;
    let pending = || {
        sim.get_object("pods", Some(NS), "dup")
            .map(|p| pending(Mechanism::Initializers, &p))
            .unwrap_or_default()
    };
    let waited = Instant::now();
    while !pending().is_empty() {
        assert!(
            waited.elapsed() < initguard_test_support::wait::PATIENCE,
            "still pending {:?}\n{}",
            pending(),
            process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let changes: Vec<_> = sim
        .object_history()
        .into_iter()
        .filter(|c| c.user == GUARD_USER && c.resource == "pods")
        .collect();
    assert_eq!(changes.len(), 2, "{changes:#?}");
    for c in &changes {
        let before = initguard_test_support::pod::pending(
            Mechanism::Initializers,
            c.before.as_ref().unwrap(),
        );
        let after = initguard_test_support::pod::pending(
            Mechanism::Initializers,
            c.after.as_ref().unwrap(),
        );
        assert_eq!(before.len(), after.len() + 1, "one entry per patch");
    }
    let first = secs_between(
        creation_timestamp(changes[0].after.as_ref().unwrap()).unwrap(),
        changes[0].time,
    );
    assert!(
        first >= DEADLINE.as_secs_f64(),
        "first bypass after {first:.3}s"
    );
}

/// Garbage and truncated watch frames, undecodable events, pods with missing or null metadata
/// and malformed gate entries; a ghost pod (listed and watched, but 404 to PATCH and GET, as
/// when it was deleted while the watch is stuck); a pod whose every PATCH is rejected as invalid
/// although it does not change. The guard logs and counts each bad frame, keeps serving, does
/// not hammer the API server, and still bypasses a normal pod created afterwards at its
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_watch_frames_and_unwritable_pods() {
    let old = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
    let gated = |name: &str, labels: Value| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": NS, "uid": format!("uid-{name}"),
                "creationTimestamp": old.to_string(), "labels": labels },
            "spec": { "schedulingGates": [gate(BIG)] },
            "status": { "phase": "Pending" },
        })
    };
    let mut nulls = gated("nulls", Value::Null);
    for field in ["annotations", "ownerReferences", "uid", "creationTimestamp"] {
        nulls["metadata"][field] = Value::Null;
    }
    nulls["spec"]["schedulingGates"] = json!([null, 7, {}, { "name": null }, gate(BIG)]);
    let mut nameless = gated("nameless", opted());
    nameless["metadata"].as_object_mut().unwrap().remove("name");
    nameless["metadata"]["namespace"] = json!("elsewhere");
    let pods = vec![
        gated("ghost", opted()),
        gated("rejected", opted()),
        nulls,
        nameless,
        json!({ "kind": "Pod", "spec": { "schedulingGates": [gate(BIG)] } }),
        json!({ "kind": "Pod", "metadata": null, "spec": null, "status": null }),
    ];
    // Five of these fail to decode; the truncated line and the empty one are skipped silently
    // by the client.
    let garbage = vec![
        "this is not json".to_owned(),
        r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"cut"#.to_owned(),
        "[1,2,3]".to_owned(),
        r#"{"type":"ADDED","object":"not an object"}"#.to_owned(),
        r#"{"type":"FROBNICATED","object":{}}"#.to_owned(),
        String::new(),
        "\u{0}\u{1}\u{7f}".to_owned(),
    ];
    let (ghost, rejected) = (format!("{NS}/ghost"), format!("{NS}/rejected"));
    let api = FakeApi::start(pods, &[&ghost], &[&rejected], garbage).await;
    let dir = tempfile::tempdir().unwrap();
    let (process, addr) = guard(
        dir.path(),
        &config_yaml(Mechanism::SchedulingGates, "ignore"),
        &api.kubeconfig("fake-token"),
    )
    .await;
    let started = Instant::now();
    loop {
        let metrics = get_ok(&process, addr, "/metrics").await;
        if metric_sum(
            &metrics,
            "initguard_watch_restarts_total",
            &[("resource", "pods")],
        ) >= 5.0
        {
            break;
        }
        assert!(
            started.elapsed() < initguard_test_support::wait::PATIENCE,
            "the five bad frames were not all counted:\n{metrics}\n{}",
            process.log_text()
        );
        assert_eq!(get_ok(&process, addr, "/healthz").await.trim(), "ok");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let created = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let mut late = gated("late", opted());
    late["metadata"]["creationTimestamp"] = json!(created.to_string());
    api.add_pod(late);
    let late_key = format!("{NS}/late");
    let late_patched = || {
        api.patches()
            .into_iter()
            .find(|p| p.pod == late_key && p.status == 200)
    };
    // Bypassed at all after the bad frames (a hang is caught by the patience); never early is
    // asserted below, and lateness is bounded by the skew tests and measured by benchmarks.
    while late_patched().is_none() {
        assert!(
            SystemTime::now()
                < SystemTime::from(created) + DEADLINE + initguard_test_support::wait::PATIENCE,
            "the normal pod was not bypassed after its deadline; patches {:?}\n{}",
            api.patches()
                .iter()
                .map(|p| (&p.pod, p.status))
                .collect::<Vec<_>>(),
            process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waited = SystemTime::now()
        .duration_since(SystemTime::from(created))
        .unwrap();
    assert!(waited >= DEADLINE, "bypassed after {waited:?}");
    let patch: Value = serde_json::from_str(&late_patched().unwrap().body).unwrap();
    assert!(
        patch.to_string().contains("/spec/schedulingGates/0"),
        "{patch}"
    );
    let late_pod = api.pod(&late_key).unwrap();
    assert_eq!(late_pod["spec"]["schedulingGates"], json!([]));

    // Unwritable pods: tried, but not in a tight loop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let patches = api.patches();
    for key in [&ghost, &rejected] {
        let n = patches.iter().filter(|p| &p.pod == key).count();
        assert!(n >= 1, "{key} was never tried");
        assert!(
            n as f64 <= 2.0 + elapsed / 2.0,
            "{n} PATCHes of {key} in {elapsed:.1}s: the guard repeats a failing write without pause"
        );
        println!("unwritable pods: {n} PATCHes of {key} in {elapsed:.1}s");
    }
    // Only opted-in pods are written (the nameless one cannot even be addressed).
    let written: BTreeSet<&str> = patches.iter().map(|p| p.pod.as_str()).collect();
    let expected = BTreeSet::from([ghost.as_str(), rejected.as_str(), late_key.as_str()]);
    assert_eq!(written, expected);
    let log = process.log_text();
    assert_eq!(
        log.matches("pod watch failed").count(),
        5,
        "one log line per bad frame:\n{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(get_ok(&process, addr, "/healthz").await.trim(), "ok");
    assert_eq!(get_ok(&process, addr, "/readyz").await.trim(), "ok");
}

/// Owners unknown, no piles: only deadlines decide.
struct NoOwners;

impl initguard::policy::Environment for NoOwners {
    fn owner_state(&self, _: &str) -> initguard::policy::OwnerState {
        initguard::policy::OwnerState::Unknown
    }
    fn pile_start(
        &self,
        _: &initguard::policy::ControllerRef,
        _: &str,
        _: u32,
    ) -> Option<std::time::SystemTime> {
        None
    }
}

/// A configuration with `unlistedInitializers: deadline` bypassing everything at once.
fn bypass_everything(mechanism: Mechanism) -> initguard::config::Config {
    let yaml = format!(
        "mechanism: {}\noptIn: {{ label: {OPT_IN} }}\ndefaults: {{ deadline: 0s }}\n\
         unlistedInitializers: deadline\nleaderElection: {{ enabled: false }}\n",
        mechanism.as_str()
    );
    initguard::config::from_yaml_str(&yaml, "test.yaml").unwrap()
}

/// Deciding is linear in the pending list: an opted-in pod with 35,000 gates (it fits in etcd)
/// once cost about a second per decision (a `contains` over the earlier entries), with the
/// tracker lock held, on every event, owner change, leadership change and /status request.
#[test]
fn decide_is_linear_in_the_pending_list() {
    let config = bypass_everything(Mechanism::SchedulingGates);
    let pending: Vec<String> = (0..35_000)
        .map(|i| format!("most.example.com/gate-{i:05}"))
        .collect();
    let labels = [(OPT_IN.to_owned(), String::new())].into();
    let now = SystemTime::now();
    let pod = initguard::policy::PodView {
        namespace: NS,
        name: "most-gates",
        uid: "u",
        labels: &labels,
        namespace_selected: false,
        created: now,
        controller: None,
        pending: &pending,
        head_since: Some(now),
    };
    let start = thread_cpu_time();
    let outcome = initguard::policy::decide(&pod, &NoOwners, &config, now);
    let cpu = thread_cpu_time() - start;
    assert_eq!(outcome.decisions.len(), pending.len());
    // Linear takes a few milliseconds of CPU; quadratic about a second.
    assert!(
        cpu < Duration::from_millis(250),
        "decide took {cpu:?} of CPU"
    );
}

/// With `unlistedInitializers: deadline` the guard bypasses unlisted names, and records them
/// as `NAME=REASON@TIME` joined by `,`. A name containing `,`, `=` or `@` (which conformant API
/// servers reject, lax ones store) would yield a record that parses as another initializer, so
/// names outside the documented charset are never bypassed; every record of what is bypassed
/// names exactly what was removed.
#[test]
fn record_of_an_odd_name() {
    let config = bypass_everything(Mechanism::SchedulingGates);
    let name = "comma,equals=at@sign";
    let doc = json!({
        "metadata": { "name": "p", "namespace": NS, "uid": "u", "resourceVersion": "1",
            "creationTimestamp": "2026-11-21T10:00:00Z", "labels": { OPT_IN: "" },
            "annotations": {} },
        "spec": { "schedulingGates": [gate(name), gate("plain.example.com")] },
    });
    let pod: initguard::pod::SlimPod = serde_json::from_value(doc.clone()).unwrap();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let now = SystemTime::now();
    let view = initguard::policy::PodView {
        namespace: NS,
        name: "p",
        uid: "u",
        labels: &labels,
        namespace_selected: false,
        created: pod.created().unwrap(),
        controller: None,
        pending: &pod.scheduling_gates,
        head_since: Some(now),
    };
    let outcome = initguard::policy::decide(&view, &NoOwners, &config, now);
    assert_eq!(
        outcome.plans[0].plan,
        initguard::policy::Plan::Never {
            why: initguard::policy::Plan::NEVER_INVALID_NAME
        }
    );
    let decided: Vec<&str> = outcome
        .decisions
        .iter()
        .map(|d| d.initializer.as_str())
        .collect();
    assert_eq!(decided, ["plain.example.com"]);
    for d in outcome.decisions {
        let target = initguard::bypass::BypassTarget {
            uid: "u",
            resource_version: "1",
            annotations_present: true,
            previous_record: None,
            opt_in_label: Some((OPT_IN, "")),
        };
        let removal = initguard::bypass::Removal {
            index: d.index,
            initializer: &d.initializer,
            reason: d.reason,
        };
        let patch =
            initguard::bypass::bypass_patch(Mechanism::SchedulingGates, &target, &[removal], now);
        let mut patched = doc.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        let record = patched["metadata"]["annotations"][BYPASSED]
            .as_str()
            .unwrap();
        let names: Vec<String> = records_in(record)
            .into_iter()
            .map(|r| r.initializer)
            .collect();
        assert_eq!(
            names,
            std::slice::from_ref(&d.initializer),
            "record {record:?} of a bypass of {:?}",
            d.initializer
        );
    }
}
