//! What the legacy scenarios share: raw requests (uninitialized objects are visible only with
//! `?includeUninitialized=true`, which kube-rs does not send), a pending list, an
//! InitializerConfiguration and the guard's config (the real initializer process is
//! `testbed::Initializer`, which the pileup benchmark shares).

use http::Method;
use serde_json::{Value, json};

use crate::testbed::*;

/// `method path` as the admin, with an optional JSON-ish body of `content_type`: (status, body
/// as JSON or Null).
pub(crate) async fn raw(
    tb: &Testbed,
    method: Method,
    path: &str,
    body: Option<(&str, Value)>,
) -> (u16, Value) {
    let client = tb.admin_client().await;
    send(&client, method, path, body).await
}

/// [`raw`] with a given client.
pub(crate) use initguard_test_support::differential::call as send;

/// Create pod `name` with `labels` in `namespace` as the admin, stored uninitialized
/// (`?includeUninitialized=true`: 202, the create does not wait for the initializers).
pub(crate) async fn create_uninitialized_pod(
    tb: &Testbed,
    namespace: &str,
    name: &str,
    labels: Value,
) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
            "automountServiceAccountToken": false,
        },
    });
    let path = format!("/api/v1/namespaces/{namespace}/pods?includeUninitialized=true");
    let (status, answer) = raw(tb, Method::POST, &path, Some(("application/json", pod))).await;
    assert_eq!(status, 202, "POST {path}: {answer}");
}

/// Names in `metadata.initializers.pending` of a pod object (empty when initialized).
pub(crate) fn pending_names(pod: &Value) -> Vec<String> {
    pod["metadata"]["initializers"]["pending"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|i| i["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The pods of `namespace` matching `selector`, uninitialized ones included.
pub(crate) async fn pods(tb: &Testbed, namespace: &str, selector: &str) -> Vec<Value> {
    let path = format!(
        "/api/v1/namespaces/{namespace}/pods?includeUninitialized=true&labelSelector={selector}"
    );
    let (status, list) = raw(tb, Method::GET, &path, None).await;
    assert_eq!(status, 200, "GET {path}: {list}");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The names of the pods a plain list shows (initialized ones only, on 1.13).
pub(crate) async fn plain_pod_names(tb: &Testbed, namespace: &str, selector: &str) -> Vec<String> {
    let path = format!("/api/v1/namespaces/{namespace}/pods?labelSelector={selector}");
    let (status, list) = raw(tb, Method::GET, &path, None).await;
    assert_eq!(status, 200, "GET {path}: {list}");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// An InitializerConfiguration `name` putting `initializers` (in order) on every pod created
/// while it exists; deleted on drop (pods created by controllers block until initialized).
pub(crate) struct InitializerConfiguration {
    tb: std::sync::Arc<Testbed>,
    name: String,
}

impl InitializerConfiguration {
    pub(crate) async fn create(
        tb: &std::sync::Arc<Testbed>,
        name: &str,
        initializers: &[&str],
    ) -> InitializerConfiguration {
        let body = json!({
            "apiVersion": "admissionregistration.k8s.io/v1alpha1",
            "kind": "InitializerConfiguration",
            "metadata": { "name": name },
            "initializers": initializers.iter().map(|i| json!({
                "name": i,
                "rules": [{ "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
            })).collect::<Vec<_>>(),
        });
        let (status, answer) = raw(
            tb,
            Method::POST,
            "/apis/admissionregistration.k8s.io/v1alpha1/initializerconfigurations",
            Some(("application/json", body)),
        )
        .await;
        assert_eq!(
            status, 201,
            "create InitializerConfiguration {name}: {answer}"
        );
        // The admission plugin reads configurations asynchronously: wait until a probe pod
        // gets exactly these initializers (and none of a configuration deleted before).
        let want: Vec<String> = initializers.iter().map(|i| (*i).to_owned()).collect();
        let client = tb.admin_client().await;
        let mut seen = Vec::new();
        for attempt in 0..300 {
            let probe = format!("initializer-probe-{name}-{attempt}");
            let path = "/api/v1/namespaces/default/pods?includeUninitialized=true";
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": { "name": probe },
                "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
            });
            let (status, created) =
                send(&client, Method::POST, path, Some(("application/json", pod))).await;
            assert!(
                status == 201 || status == 202,
                "POST {path}: {status} {created}"
            );
            seen = pending_names(&created);
            let delete = format!("/api/v1/namespaces/default/pods/{probe}?gracePeriodSeconds=0");
            let (status, answer) = send(&client, Method::DELETE, &delete, None).await;
            assert_eq!(status, 200, "DELETE {delete}: {answer}");
            if seen == want {
                return InitializerConfiguration {
                    tb: tb.clone(),
                    name: name.to_owned(),
                };
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        panic!("InitializerConfiguration {name} never took effect: a probe pod got {seen:?}");
    }
}

impl Drop for InitializerConfiguration {
    fn drop(&mut self) {
        let out = self.tb.kubectl_with(
            "admin",
            &[
                "delete",
                "initializerconfiguration",
                &self.name,
                "--ignore-not-found",
            ],
            None,
        );
        if !out.status.success() {
            eprintln!(
                "cannot delete InitializerConfiguration {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The guard's config for initializers: `rest` holds `initializers:` and anything else.
pub(crate) fn config(rest: &str) -> String {
    format!(
        "mechanism: initializers\noptIn: {{ label: {OPT_IN} }}\n\
         unlistedInitializers: ignore\n{rest}"
    )
}

/// The guard's JSON Patches of pods in `namespace` (successful ones), oldest first.
pub(crate) fn guard_patches(tb: &Testbed, user: &str, namespace: &str) -> Vec<Audit> {
    let mut patches: Vec<Audit> = tb
        .pod_writes_by(user, namespace)
        .into_iter()
        .filter(|a| a.verb == "patch" && a.ok())
        .collect();
    patches.sort_by(|a, b| a.received.cmp(&b.received));
    patches
}

/// The operations of an audited JSON Patch.
pub(crate) fn operations(patch: &Audit) -> Vec<Value> {
    patch.request.as_array().cloned().unwrap_or_default()
}
