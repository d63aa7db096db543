//! A `service` owner on the real 1.13 server, which serves no EndpointSlices: the guard reads
//! the Service's core/v1 Endpoints, with only the grant deploy/README.md gives for servers
//! before 1.21. While an address is ready no pod is touched (deadline 1h); once none is, the
//! opted-in pod is initialized after the grace (`owner_down`) and the other one is not, by the
//! audit log. The guard never asks for the EndpointSlices the server does not serve.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::legacy::*;
use crate::testbed::*;

const NS: &str = "legacy-service";
const INIT: &str = "mesh.example.com";
const SERVICE: &str = "mesh";
const GRACE: Duration = Duration::from_secs(1);
const GRANT: &str = "legacy-service-owner";

pub(crate) async fn service_owner_is_read_from_core_endpoints(tb: Arc<Testbed>) {
    tb.namespace(NS);
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": GRANT },
        "rules": [{ "apiGroups": [""], "resources": ["endpoints"], "verbs": ["list", "watch"] }],
    }));
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": GRANT },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": GRANT },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": GUARD_USER }],
    }));
    let endpoints = |ready: bool| {
        let address = json!([{ "ip": "10.0.0.7" }]);
        json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": { "name": SERVICE, "namespace": NS },
            "subsets": [if ready {
                json!({ "addresses": address, "ports": [{ "port": 443 }] })
            } else {
                json!({ "notReadyAddresses": address, "ports": [{ "port": 443 }] })
            }],
        })
    };
    let path = format!("/api/v1/namespaces/{NS}/endpoints");
    let (status, answer) = raw(
        &tb,
        Method::POST,
        &path,
        Some(("application/json", endpoints(true))),
    )
    .await;
    assert_eq!(status, 201, "POST {path}: {answer}");

    let config_object = InitializerConfiguration::create(&tb, "legacy-service", &[INIT]).await;
    let guard = tb
        .guard(
            "legacy-service",
            "initguard",
            &config(&format!(
                "leaderElection: {{ enabled: false }}\n\
                 initializers:\n  - {{ name: {INIT}, deadline: 1h, ownerDownGrace: 1s, \
                 owner: {{ service: {NS}/{SERVICE} }} }}\n"
            )),
        )
        .await;
    for (name, opted) in [("opted", true), ("plain", false)] {
        let mut labels = json!({ "app": "service-owner" });
        if opted {
            labels[OPT_IN] = json!("true");
        }
        create_uninitialized_pod(&tb, NS, name, labels).await;
    }
    // The guard has listed the Endpoints (it sees the owner up) before the address goes.
    eventually("the guard's list of the Service's Endpoints", || {
        tb.audit().into_iter().find(|a| {
            a.user == GUARD_USER
                && a.resource == "endpoints"
                && a.namespace == NS
                && a.verb == "list"
                && a.ok()
        })
    })
    .await;
    let path = format!("/api/v1/namespaces/{NS}/endpoints/{SERVICE}");
    let (status, answer) = raw(
        &tb,
        Method::PUT,
        &path,
        Some(("application/json", endpoints(false))),
    )
    .await;
    assert_eq!(status, 200, "PUT {path}: {answer}");
    let down = tb
        .audit()
        .into_iter()
        .find(|a| a.resource == "endpoints" && a.namespace == NS && a.verb == "update" && a.ok())
        .unwrap_or_else(|| panic!("no update of {path} in the audit log"));

    let patch = eventually("the guard initializes the opted-in pod", || {
        guard_patches(&tb, GUARD_USER, NS).into_iter().next()
    })
    .await;
    assert_eq!(patch.name, "opted", "only the opted-in pod: {patch:#?}");
    assert!(
        patch
            .request
            .to_string()
            .contains(&format!("{INIT}=owner_down@")),
        "the patch records owner_down: {:#?}",
        patch.request
    );
    // Never while the owner was up, nor before the grace, on the server's clock.
    let writes = tb.pod_writes_by(GUARD_USER, NS);
    assert!(
        writes.iter().all(|w| w.received > down.received),
        "a guard write before the last address went: {writes:#?}"
    );
    assert!(
        timestamp(&patch.received) >= timestamp(&down.received) + GRACE,
        "bypassed at {}, before the address went ({}) + grace {GRACE:?}",
        patch.received,
        down.received
    );
    let plain = pods(&tb, NS, "app=service-owner").await;
    let plain: Vec<_> = plain
        .iter()
        .filter(|p| p["metadata"]["name"] == "plain")
        .collect();
    assert_eq!(plain.len(), 1);
    assert_eq!(pending_names(plain[0]), [INIT], "the plain pod still waits");

    let asked: Vec<Audit> = tb
        .audit()
        .into_iter()
        .filter(|a| {
            a.user == GUARD_USER
                && (a.resource == "endpointslices"
                    || (a.code == 403 && (a.namespace == NS || a.resource == "endpoints")))
        })
        .collect();
    assert!(
        asked.is_empty(),
        "the guard asked for EndpointSlices, or was refused: {asked:#?}"
    );

    guard.stop();
    drop(config_object);
    // Gone before the namespace goes: the next scenario's guard must not find a waiting pod
    // in a terminating namespace and be refused its explanation.
    for name in ["opted", "plain"] {
        let path = format!("/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0");
        let (status, answer) = raw(&tb, Method::DELETE, &path, None).await;
        assert_eq!(status, 200, "DELETE {path}: {answer}");
    }
    tb.kubectl(&["delete", "namespace", NS, "--wait=false"]);
    tb.kubectl(&["delete", "clusterrolebinding", GRANT, "--ignore-not-found"]);
    tb.kubectl(&["delete", "clusterrole", GRANT, "--ignore-not-found"]);
}
