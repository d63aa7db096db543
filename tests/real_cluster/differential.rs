//! One scripted list of requests sent to the simulated API server and to the real
//! kube-apiserver of the test bed, their answers normalized (status code, `Status` reason, the
//! fields the guard, the demo and kubectl users rely on) and compared. A difference fails the
//! test unless tests/real_cluster/differences.md lists it (by step) with why it does not
//! matter; a listed difference that is gone fails too, so the table stays true.

use initguard_sim::SimClients as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use http::{Method, Request};
use initguard_test_support::differential::{self, list_view, status_view};
use kube::client::Body;
use kube_sim::{Sim, SimOptions};
use serde_json::{Value, json};

use crate::testbed::*;

const NS: &str = "differential";
/// Created by `kubectl create namespace`.
const KUBECTL_NS: &str = "differential-kubectl";
const GATE_A: &str = "a.example.com";
const GATE_B: &str = "b.example.com";

/// One server under comparison: a raw client (no retries) and kubectl for it.
struct Server {
    client: kube::Client,
    kubeconfig: std::path::PathBuf,
    /// The real server's test bed, whose etcd can be compacted; None for the simulator, whose
    /// short change window (`SimOptions::history_window`) stands for compaction.
    etcd: Option<Arc<Testbed>>,
}

impl Server {
    /// `method path` with an optional body of `content_type`: (status, JSON body or Null).
    async fn call(&self, method: Method, path: &str, body: Option<(&str, Value)>) -> (u16, Value) {
        differential::call(&self.client, method, path, body).await
    }

    /// Send `request`: (status, body).
    async fn send(&self, request: Request<Body>) -> (u16, bytes::Bytes) {
        differential::send(&self.client, request).await
    }

    /// `GET path` of a watch (which must end by itself, `timeoutSeconds`): (status, one JSON
    /// value per line of the body).
    async fn watch(&self, path: &str) -> (u16, Vec<Value>) {
        let request = Request::builder()
            .method(Method::GET)
            .uri(path)
            .body(Body::from(Vec::new()))
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let (status, raw) = tokio::time::timeout(crate::wait::PATIENCE, self.send(request))
            .await
            .unwrap_or_else(|_| panic!("the watch GET {path} did not end"));
        let events = String::from_utf8_lossy(&raw)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("watch line {l:?}: {e}")))
            .collect();
        (status, events)
    }

    /// kubectl (of the test bed's version) against this server: (exit code, stdout + stderr).
    /// Asynchronous: the simulator answers from this runtime, which a blocking wait could
    /// starve.
    async fn kubectl(&self, tb: &Testbed, args: &[&str]) -> (i32, String) {
        let run = tokio::process::Command::new(tb.kubectl_path())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(crate::wait::PATIENCE, run)
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish"))
            .unwrap_or_else(|e| panic!("cannot run kubectl {args:?}: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), text)
    }
}

/// What the comparison looks at in a pod: its gates, the scheduling-gated condition, labels.
fn pod_view(status: u16, pod: &Value) -> Value {
    let gated = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodScheduled")
        .map(|c| json!({ "status": c["status"], "reason": c["reason"] }))
        .unwrap_or(Value::Null);
    json!({
        "code": status,
        "schedulingGates": pod["spec"].get("schedulingGates").cloned().unwrap_or(json!("<absent>")),
        "podScheduled": gated,
        "labels": pod["metadata"]["labels"],
    })
}

/// Run the script against `server`: step name -> normalized answer.
async fn script(tb: &Testbed, server: &Server) -> BTreeMap<&'static str, Value> {
    let mut out = BTreeMap::new();
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let pod = |name: &str, labels: Value, gates: &[&str]| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "labels": labels },
            "spec": {
                "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
                "schedulingGates": gates.iter().map(|g| json!({ "name": g })).collect::<Vec<_>>(),
            },
        })
    };
    const JSON: &str = "application/json";
    const JSON_PATCH: &str = "application/json-patch+json";
    const MERGE: &str = "application/merge-patch+json";

    let (s, b) = server
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some((
                JSON,
                json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NS } }),
            )),
        )
        .await;
    out.insert(
        "create a namespace",
        json!({ "code": s, "kind": b["kind"] }),
    );

    let (s, b) = server
        .call(
            Method::POST,
            &pods,
            Some((JSON, pod("gated", json!({ "app": "x" }), &[GATE_A, GATE_B]))),
        )
        .await;
    out.insert("create a gated pod", pod_view(s, &b));
    let (s, b) = server
        .call(
            Method::POST,
            &pods,
            Some((JSON, pod("plain", json!({ "app": "y" }), &[]))),
        )
        .await;
    out.insert(
        "create an ungated pod",
        json!({ "code": s, "kind": b["kind"] }),
    );
    let (s, b) = server
        .call(
            Method::POST,
            &pods,
            Some((JSON, pod("gated", json!({}), &[GATE_A]))),
        )
        .await;
    out.insert("create an existing pod", status_view(s, &b));

    let (s, b) = server
        .call(Method::GET, &format!("{pods}/gated"), None)
        .await;
    out.insert("get the gated pod", pod_view(s, &b));
    let resource_version = b["metadata"]["resourceVersion"].clone();
    let (s, b) = server
        .call(Method::GET, &format!("{pods}/missing"), None)
        .await;
    out.insert("get a missing pod", status_view(s, &b));

    let (s, b) = server
        .call(Method::GET, &format!("{pods}?labelSelector=app%3Dx"), None)
        .await;
    out.insert("list by label", list_view(s, &b));
    let (s, b) = server
        .call(
            Method::GET,
            &format!("{pods}?fieldSelector=metadata.name%3Dplain"),
            None,
        )
        .await;
    out.insert("list by field", list_view(s, &b));
    let (s, b) = server
        .call(
            Method::GET,
            &format!("{pods}?labelSelector=app%3D%3D%3D"),
            None,
        )
        .await;
    out.insert("list by a bad selector", status_view(s, &b));

    // The guard's bypass: remove the first gate if it is `name`.
    let gated = format!("{pods}/gated");
    let patch = |content_type: &'static str, body: Value| {
        server.call(Method::PATCH, &gated, Some((content_type, body)))
    };
    let bypass = |name: &str| {
        json!([
            { "op": "test", "path": "/spec/schedulingGates/0/name", "value": name },
            { "op": "remove", "path": "/spec/schedulingGates/0" },
        ])
    };
    let (s, b) = patch(JSON_PATCH, bypass(GATE_B)).await;
    out.insert("json patch with a failed test", status_view(s, &b));
    let (s, b) = patch(JSON_PATCH, bypass(GATE_A)).await;
    out.insert("json patch removing one gate", pod_view(s, &b));
    let (s, b) = patch(MERGE, json!({ "metadata": { "labels": { "team": "t" } } })).await;
    out.insert("merge patch of a label", pod_view(s, &b));
    let add = json!([{ "op": "add", "path": "/spec/schedulingGates/-", "value": { "name": "c.example.com" } }]);
    let (s, b) = patch(JSON_PATCH, add).await;
    out.insert("adding a gate after creation", status_view(s, &b));

    // An update from a stale read.
    let mut stale = pod("gated", json!({ "app": "x" }), &[GATE_B]);
    stale["metadata"]["resourceVersion"] = resource_version;
    let (s, b) = server.call(Method::PUT, &gated, Some((JSON, stale))).await;
    out.insert("update with a stale resourceVersion", status_view(s, &b));

    let (s, b) = patch(JSON_PATCH, bypass(GATE_B)).await;
    out.insert("json patch removing the last gate", pod_view(s, &b));

    // A watch from a list's resourceVersion replays what changed after it, in order; bookmarks
    // (whether one comes within the timeout is the server's choice) carry only a version.
    let (s, b) = server.call(Method::GET, &pods, None).await;
    let listed = b["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (created, _) = server
        .call(
            Method::POST,
            &pods,
            Some((JSON, pod("watched", json!({ "app": "w" }), &[GATE_A]))),
        )
        .await;
    // The scheduler marks a gated pod SchedulingGated by a write of its own; wait for it, so
    // that the deletion comes after it on both servers.
    let watched = format!("{pods}/watched");
    crate::wait::eventually_async(
        "the scheduler to mark pod watched SchedulingGated",
        || async {
            let (_, pod) = server.call(Method::GET, &watched, None).await;
            pod_view(200, &pod)["podScheduled"]["reason"]
                .as_str()
                .is_some_and(|r| r == "SchedulingGated")
                .then_some(())
        },
    )
    .await;
    let (deleted, _) = server.call(Method::DELETE, &watched, None).await;
    let (w, events) = server
        .watch(&format!(
            "{pods}?watch=true&resourceVersion={listed}&allowWatchBookmarks=true&timeoutSeconds=2\
             &fieldSelector=metadata.name%3Dwatched"
        ))
        .await;
    let changes: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] != "BOOKMARK")
        .map(|e| json!([e["type"], e["object"]["metadata"]["name"]]))
        .collect();
    let bookmarks_bare = events.iter().filter(|e| e["type"] == "BOOKMARK").all(|e| {
        e["object"]["kind"] == "Pod"
            && e["object"]["metadata"]["resourceVersion"].is_string()
            && e["object"]["metadata"]["name"].is_null()
    });
    out.insert(
        "watch from a listed resourceVersion",
        json!({ "list": s, "create": created, "delete": deleted, "watch": w,
                "changes": changes, "bookmarks carry only a version": bookmarks_bare }),
    );
    // A version compacted away: the watch answers with one ERROR event, a 410 Expired, which
    // tells clients to list again. Events, because kube-apiserver keeps no watch cache for
    // them (DefaultWatchCacheSizes): the watch reaches etcd, as one does once a watch cache's
    // window has moved on (the pods cache of a young test bed still holds revision 1).
    if let Some(tb) = &server.etcd {
        let (_, b) = server.call(Method::GET, &pods, None).await;
        let now = b["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a pod list without a resourceVersion: {b}"));
        tb.compact_etcd(now);
    }
    let (w, events) = server
        .watch(&format!(
            "/api/v1/namespaces/{NS}/events?watch=true&resourceVersion=1&timeoutSeconds=2"
        ))
        .await;
    let errors: Vec<Value> = events
        .iter()
        .map(|e| json!([e["type"], e["object"]["code"], e["object"]["reason"]]))
        .collect();
    out.insert(
        "watch from a compacted resourceVersion",
        json!({ "watch": w, "events": errors }),
    );

    // Admission webhook configurations, as the webhook guard reads and patches them: what the
    // server defaults (the bypass patch adds to a list or creates it), the JSON Patch `test`,
    // and the structural checks of matchConditions.
    let configs = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let config = format!("{configs}/differential-policy");
    let entry_view = |s: u16, b: &Value| {
        let e = &b["webhooks"][0];
        json!({
            "code": s, "kind": b["kind"],
            "failurePolicy": e["failurePolicy"], "matchPolicy": e["matchPolicy"],
            "objectSelector": e["objectSelector"], "namespaceSelector": e["namespaceSelector"],
            "timeoutSeconds": e["timeoutSeconds"], "scope": e["rules"][0]["scope"],
            "sideEffects": e["sideEffects"], "matchConditions": e["matchConditions"],
            "annotations": b["metadata"]["annotations"],
        })
    };
    let invalid_view = |s: u16, b: &Value| {
        let causes: Vec<Value> = b["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!([c["reason"], c["field"]]))
            .collect();
        json!({ "code": s, "reason": b["reason"], "kind": b["kind"], "causes": causes })
    };
    let (s, b) = server
        .call(
            Method::POST,
            configs,
            Some((
                JSON,
                json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "metadata": { "name": "differential-policy" },
                    "webhooks": [{
                        "name": "pods.differential.example.com",
                        "clientConfig": { "url": "https://127.0.0.1:1/validate" },
                        "rules": [{ "operations": ["CREATE"], "apiGroups": [""],
                                    "apiVersions": ["v1"], "resources": ["pods"] }],
                        // No namespace has it: the entry never intercepts anything.
                        "namespaceSelector": { "matchLabels": { "differential-none": "x" } },
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "matchConditions": [{ "name": "own", "expression": "true" }],
                    }],
                }),
            )),
        )
        .await;
    out.insert("create a webhook configuration", entry_view(s, &b));
    let version = b["metadata"]["resourceVersion"].clone();
    let (s, b) = server
        .call(
            Method::GET,
            &format!("{configs}?fieldSelector=metadata.name%3Ddifferential-policy"),
            None,
        )
        .await;
    out.insert("list a webhook configuration by name", list_view(s, &b));
    let patch_config = |body: Value| server.call(Method::PATCH, &config, Some((JSON_PATCH, body)));
    let condition =
        |name: &str, expression: &str| json!({ "name": name, "expression": expression });
    let (s, b) = patch_config(json!([
        { "op": "test", "path": "/metadata/resourceVersion", "value": version },
        { "op": "test", "path": "/webhooks/0/name", "value": "pods.differential.example.com" },
        { "op": "add", "path": "/webhooks/0/matchConditions/-",
          "value": condition("initguard-bypass", "request.operation != 'DELETE'") },
        { "op": "add", "path": "/metadata/annotations",
          "value": { "initguard.io/bypassed-webhooks": "{}" } },
    ]))
    .await;
    out.insert("json patch of a webhook entry", entry_view(s, &b));
    let (s, b) = patch_config(json!([
        { "op": "test", "path": "/metadata/resourceVersion", "value": version },
        { "op": "remove", "path": "/webhooks/0/matchConditions/1" },
    ]))
    .await;
    out.insert(
        "json patch of a webhook entry with a stale resourceVersion",
        status_view(s, &b),
    );
    for (step, value) in [
        ("a duplicate matchCondition name", condition("own", "true")),
        ("an empty matchCondition name", condition("", "true")),
        ("an empty matchCondition expression", condition("other", "")),
    ] {
        let (s, b) = patch_config(json!([
            { "op": "add", "path": "/webhooks/0/matchConditions/-", "value": value },
        ]))
        .await;
        out.insert(step, invalid_view(s, &b));
    }
    let many: Vec<Value> = (0..65)
        .map(|i| condition(&format!("c{i}"), "true"))
        .collect();
    let (s, b) = patch_config(json!([
        { "op": "replace", "path": "/webhooks/0/matchConditions", "value": many },
    ]))
    .await;
    out.insert("65 matchConditions", invalid_view(s, &b));
    // A restore removes what the bypass added: emptied lists are not stored.
    let (s, b) = patch_config(json!([
        { "op": "remove", "path": "/webhooks/0/matchConditions/1" },
        { "op": "remove", "path": "/webhooks/0/matchConditions/0" },
        { "op": "add", "path": "/webhooks/0/objectSelector/matchExpressions", "value": [] },
    ]))
    .await;
    out.insert(
        "emptying matchConditions and matchExpressions",
        entry_view(s, &b),
    );
    let (s, b) = server.call(Method::DELETE, &config, None).await;
    out.insert(
        "delete a webhook configuration",
        json!({ "code": s, "kind": b["kind"] }),
    );

    // Discovery of the groups the guard uses.
    let (s, b) = server.call(Method::GET, "/apis", None).await;
    let served: BTreeSet<String> = b["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["versions"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v["groupVersion"].as_str().map(str::to_owned))
        .collect();
    let wanted = ["apps/v1", "batch/v1", "coordination.k8s.io/v1"];
    out.insert(
        "discovery of the guard's groups",
        json!({ "code": s, "served": wanted.iter().filter(|g| served.contains(**g)).collect::<Vec<_>>() }),
    );
    let (s, b) = server.call(Method::GET, "/api", None).await;
    out.insert(
        "core discovery",
        json!({ "code": s, "versions": b["versions"] }),
    );

    // What a kubectl user sees.
    let (code, text) = server
        .kubectl(tb, &["create", "namespace", KUBECTL_NS])
        .await;
    out.insert(
        "kubectl create namespace",
        json!({ "exit": code, "out": text.trim() }),
    );
    let (code, text) = server
        .kubectl(tb, &["get", "pods", "-n", NS, "-o", "name"])
        .await;
    out.insert(
        "kubectl get pods -o name",
        json!({ "exit": code, "out": text.trim() }),
    );
    let (code, text) = server.kubectl(tb, &["get", "pods", "-n", NS]).await;
    let header = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>();
    out.insert(
        "kubectl get pods (columns)",
        json!({ "exit": code, "columns": header }),
    );
    let (code, text) = server
        .kubectl(tb, &["describe", "pod", "gated", "-n", NS])
        .await;
    let fields: Vec<&str> = ["Name:", "Namespace:", "Labels:", "Status:", "Conditions:"]
        .into_iter()
        .filter(|f| text.contains(*f))
        .collect();
    out.insert(
        "kubectl describe pod (fields)",
        json!({ "exit": code, "fields": fields }),
    );

    // kubectl apply: created, then configured (client-side apply: a strategic merge patch
    // computed against the last-applied annotation).
    for (step, team) in [
        ("kubectl apply (create)", "a"),
        ("kubectl apply (configure)", "b"),
    ] {
        let manifest = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "applied", "namespace": NS, "labels": { "team": team } },
            "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
        });
        let path = server
            .kubeconfig
            .with_extension(format!("applied-{team}.json"));
        std::fs::write(&path, manifest.to_string())
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        let file = path.to_string_lossy().into_owned();
        let (code, text) = server.kubectl(tb, &["apply", "-f", &file]).await;
        let (s, pod) = server
            .call(Method::GET, &format!("{pods}/applied"), None)
            .await;
        out.insert(
            step,
            json!({ "exit": code, "out": text.trim(), "get": s, "labels": pod["metadata"]["labels"] }),
        );
    }

    // The guard's Events as an operator lists them.
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": { "name": "gated.bypass" },
        "involvedObject": { "apiVersion": "v1", "kind": "Pod", "name": "gated", "namespace": NS },
        "reason": "InitializerBypassed", "type": "Warning", "message": "initguard removed a.example.com",
        "count": 1, "firstTimestamp": now, "lastTimestamp": now,
        "source": { "component": "initguard" },
        "reportingComponent": "initguard", "reportingInstance": "system:initguard",
    });
    let (s, _) = server
        .call(
            Method::POST,
            &format!("/api/v1/namespaces/{NS}/events"),
            Some((JSON, event)),
        )
        .await;
    for (step, wide) in [
        ("kubectl get events", false),
        ("kubectl get events -o wide", true),
    ] {
        let mut args = vec!["get", "events", "-n", NS];
        if wide {
            args.extend(["-o", "wide"]);
        }
        let (code, text) = server.kubectl(tb, &args).await;
        let header: Vec<&str> = text
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        // The real scheduler adds Events of its own. Ages differ by when each server ran the
        // script: compare the rest of the guard's row.
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.contains("InitializerBypassed"))
            .unwrap_or("")
            .split_whitespace()
            .filter(|cell| !is_age(cell))
            .collect();
        out.insert(
            step,
            json!({ "create": s, "exit": code, "columns": header, "row": row }),
        );
    }
    out
}

/// A cell of kubectl's ages (`4s`, `2m5s`, `<unknown>`).
fn is_age(cell: &str) -> bool {
    cell == "<unknown>"
        || (!cell.is_empty()
            && cell
                .chars()
                .all(|c| c.is_ascii_digit() || "smhdy".contains(c))
            && cell.starts_with(|c: char| c.is_ascii_digit()))
}

pub(crate) async fn sim_answers_as_the_real_server(tb: Arc<Testbed>) {
    // A short change window, so that resourceVersion 1 is compacted away as on the real server.
    let sim = Sim::start(SimOptions {
        history_window: 8,
        ..SimOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("the simulator does not start: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("no temporary directory: {e}"));
    let sim_kubeconfig = dir.path().join("sim.kubeconfig");
    sim.write_kubeconfig(&sim_kubeconfig, "system:admin")
        .unwrap_or_else(|e| panic!("cannot write the simulator's kubeconfig: {e}"));
    let mut sim_config = sim.kube_config("system:admin");
    sim_config.default_retry = false;
    let simulated = Server {
        client: kube::Client::try_from(sim_config).unwrap_or_else(|e| panic!("sim client: {e}")),
        kubeconfig: sim_kubeconfig,
        etcd: None,
    };
    let real = Server {
        client: tb.admin_client().await,
        kubeconfig: tb.kubeconfig("admin"),
        etcd: Some(Arc::clone(&tb)),
    };

    let from_sim = script(&tb, &simulated).await;
    let from_real = script(&tb, &real).await;
    sim.shutdown().await;
    tb.kubectl(&["delete", "namespace", NS, KUBECTL_NS, "--wait=false"]);

    let table = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_cluster/differences.md");
    differential::assert_same_or_tabled("differential", &from_sim, &from_real, &table);
}
