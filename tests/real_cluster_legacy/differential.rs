//! One script of legacy requests sent to the simulator's 1.13 profile and to the real 1.13
//! kube-apiserver, answers normalized and compared: the initializer flow (the create of an
//! uninitialized pod, what lists show, a failed `test`, removing the head, the last), and
//! which APIs 1.13 serves. A difference fails the test unless
//! tests/real_cluster_legacy/differences.md lists it with why it does not matter; a listed
//! difference that is gone fails too.

use initguard_sim::SimClients as _;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use http::Method;
use kube_common::Mechanism;
use kube_sim::{KubeVersion, Sim, SimOptions};
use serde_json::{Value, json};

use initguard_test_support::differential::{assert_same_or_tabled, list_view, status_view};

use crate::legacy::*;
use crate::testbed::*;

const NS: &str = "legacy-differential";
const A: &str = "a.example.com";
const B: &str = "b.example.com";
const JSON: &str = "application/json";
const JSON_PATCH: &str = "application/json-patch+json";

/// What the comparison looks at in a pod answer: the code, the pending list, the result.
fn pod_view(status: u16, pod: &Value) -> Value {
    if pod["kind"] == "Status" {
        return status_view(status, pod);
    }
    json!({
        "code": status,
        "initializers": pod["metadata"].get("initializers").map(|_| json!({
            "pending": pending_names(pod),
            "result": pod["metadata"]["initializers"]["result"],
        })).unwrap_or(json!("<absent>")),
    })
}

/// Run the script against `client`: step name -> normalized answer.
async fn script(client: &kube::Client) -> BTreeMap<&'static str, Value> {
    let mut out = BTreeMap::new();
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "p" },
        "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
    });

    let (s, b) = send(
        client,
        Method::POST,
        "/api/v1/namespaces",
        Some((
            JSON,
            json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NS },
            }),
        )),
    )
    .await;
    out.insert("create the namespace", status_view(s, &b));

    let (s, b) = send(
        client,
        Method::POST,
        &format!("{pods}?includeUninitialized=true"),
        Some((JSON, pod)),
    )
    .await;
    out.insert(
        "create an uninitialized pod (includeUninitialized)",
        pod_view(s, &b),
    );

    let (s, b) = send(client, Method::GET, &pods, None).await;
    out.insert("a plain list hides it", list_view(s, &b));
    let (s, b) = send(
        client,
        Method::GET,
        &format!("{pods}?includeUninitialized=true"),
        None,
    )
    .await;
    out.insert(
        "a list with includeUninitialized shows it",
        list_view(s, &b),
    );
    let (s, b) = send(client, Method::GET, &format!("{pods}/p"), None).await;
    out.insert("a get by name", pod_view(s, &b));

    let one = format!("{pods}/p?includeUninitialized=true");
    let patch = |ops: Value| send(client, Method::PATCH, &one, Some((JSON_PATCH, ops)));
    let remove_head_if = |name: &str| {
        json!([
            { "op": "test", "path": "/metadata/initializers/pending/0/name", "value": name },
            { "op": "remove", "path": "/metadata/initializers/pending/0" },
        ])
    };
    let (s, b) = patch(remove_head_if(B)).await;
    out.insert("a JSON Patch whose test fails", status_view(s, &b));
    let (s, b) =
        patch(json!([{ "op": "remove", "path": "/metadata/initializers/pending/5" }])).await;
    out.insert("a JSON Patch removing past the end", status_view(s, &b));
    let (s, b) = patch(remove_head_if(A)).await;
    out.insert("removing the head", pod_view(s, &b));
    let (s, b) = send(client, Method::GET, &pods, None).await;
    out.insert("a plain list still hides it", list_view(s, &b));
    let (s, b) = patch(remove_head_if(B)).await;
    out.insert("removing the last", pod_view(s, &b));
    let (s, b) = send(client, Method::GET, &pods, None).await;
    out.insert("a plain list shows it once initialized", list_view(s, &b));

    // Which APIs 1.13 serves.
    for (step, path) in [
        ("the core group", "/api/v1"),
        ("coordination.k8s.io/v1", "/apis/coordination.k8s.io/v1"),
        (
            "coordination.k8s.io/v1beta1",
            "/apis/coordination.k8s.io/v1beta1",
        ),
        ("apps/v1", "/apis/apps/v1"),
        ("events.k8s.io/v1", "/apis/events.k8s.io/v1"),
        (
            "admissionregistration.k8s.io/v1",
            "/apis/admissionregistration.k8s.io/v1",
        ),
        ("discovery.k8s.io/v1", "/apis/discovery.k8s.io/v1"),
    ] {
        let (s, _) = send(client, Method::GET, path, None).await;
        out.insert(step, json!({ "code": s }));
    }
    let (s, b) = send(client, Method::GET, "/apis/coordination.k8s.io", None).await;
    out.insert(
        "coordination.k8s.io's preferred version",
        json!({ "code": s, "preferred": b["preferredVersion"]["groupVersion"] }),
    );
    let lease = |api_version: &str| {
        json!({
            "apiVersion": api_version, "kind": "Lease",
            "metadata": { "name": "l" },
            "spec": { "holderIdentity": "x", "leaseDurationSeconds": 5 },
        })
    };
    let (s, b) = send(
        client,
        Method::POST,
        &format!("/apis/coordination.k8s.io/v1beta1/namespaces/{NS}/leases"),
        Some((JSON, lease("coordination.k8s.io/v1beta1"))),
    )
    .await;
    out.insert("create a v1beta1 Lease", status_view(s, &b));
    let (s, b) = send(
        client,
        Method::POST,
        &format!("/api/v1/namespaces/{NS}/events"),
        Some((
            JSON,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": { "name": "e" },
                "involvedObject": { "kind": "Pod", "namespace": NS, "name": "p" },
                "reason": "Test", "message": "m", "type": "Normal",
            }),
        )),
    )
    .await;
    out.insert("create a core/v1 Event", status_view(s, &b));
    out
}

pub(crate) async fn sim_1_13_profile_answers_as_the_real_1_13_server(tb: Arc<Testbed>) {
    let sim = Sim::start(SimOptions {
        mechanism: Mechanism::Initializers,
        kube_version: Some(KubeVersion::V1_13),
        legacy_initializers: vec![A.to_owned(), B.to_owned()],
        ..SimOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("the simulator does not start: {e}"));
    let mut sim_config = sim.kube_config("system:admin");
    sim_config.default_retry = false;
    let sim_client =
        kube::Client::try_from(sim_config).unwrap_or_else(|e| panic!("sim client: {e}"));
    let config_object = InitializerConfiguration::create(&tb, "legacy-differential", &[A, B]).await;

    let from_sim = script(&sim_client).await;
    let from_real = script(&tb.admin_client().await).await;
    sim.shutdown().await;
    drop(config_object);
    tb.kubectl(&["delete", "namespace", NS, "--wait=false"]);

    let table =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_cluster_legacy/differences.md");
    assert_same_or_tabled("legacy differential", &from_sim, &from_real, &table);
}
