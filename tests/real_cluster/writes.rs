//! The one write classifier against the real API server's own refusals: what it answers to a
//! JSON Patch whose `test` fails or whose path is gone (the object changed: re-read), to a
//! patch it refuses on validation (a refusal: counted and backed off, never re-sent at once),
//! and to a missing object.

use std::sync::Arc;

use initguard::guard::write::{Refusal, classify};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::testbed::Testbed;

/// The real server's answer to `patch` on `name`, which must be refused.
async fn refusal(api: &Api<Pod>, name: &str, patch: serde_json::Value) -> kube::Error {
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("a JSON Patch");
    match api
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => panic!("the server applied a patch it should have refused"),
        Err(e) => e,
    }
}

pub(crate) async fn the_classifier_reads_the_real_servers_refusals(tb: Arc<Testbed>) {
    let ns = "write-classes";
    tb.namespace(ns);
    tb.gated_pod(ns, "p", false, &["a.example.com", "b.example.com"]);
    let api: Api<Pod> = Api::namespaced(tb.admin_client().await, ns);

    // A `test` that fails, and a tested path that is gone: the pod changed.
    for (index, name) in [(0, "b.example.com"), (5, "a.example.com")] {
        let changed = refusal(
            &api,
            "p",
            json!([
                { "op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": name },
                { "op": "remove", "path": format!("/spec/schedulingGates/{index}") },
            ]),
        )
        .await;
        assert_eq!(classify(&changed), Refusal::Changed, "{changed:?}");
    }

    // Gates may only be removed after creation: a validation error, not a changed pod.
    let invalid = refusal(
        &api,
        "p",
        json!([{ "op": "add", "path": "/spec/schedulingGates/-", "value": { "name": "c.example.com" } }]),
    )
    .await;
    assert!(
        matches!(&invalid, kube::Error::Api(s) if s.code == 422),
        "{invalid:?}"
    );
    assert!(
        matches!(classify(&invalid), Refusal::Refused(_)),
        "{invalid:?}"
    );

    let missing = refusal(
        &api,
        "no-such-pod",
        json!([{ "op": "remove", "path": "/spec/schedulingGates/0" }]),
    )
    .await;
    assert_eq!(classify(&missing), Refusal::Gone, "{missing:?}");
    tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}
