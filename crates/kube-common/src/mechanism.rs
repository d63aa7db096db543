//! Where a pod's pending initializers live, and what a client must send to see such pods.

use http::{Method, Request, Uri};
use serde::{Deserialize, Serialize};

/// Where pending initializers live on a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Mechanism {
    /// `spec.schedulingGates[].name` (Kubernetes >= 1.27).
    SchedulingGates,
    /// `metadata.initializers.pending[].name` (Kubernetes 1.7-1.13).
    Initializers,
}

impl Mechanism {
    /// The name used in config, CLI and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::SchedulingGates => "schedulingGates",
            Mechanism::Initializers => "initializers",
        }
    }
}

/// Adds `includeUninitialized=true` to GET requests for pods (get, list, watch).
///
/// Legacy initializers hide uninitialized pods from reads unless the request says so, a
/// parameter kube-rs does not know; as a request layer it keeps kube's watcher (with its
/// resourceVersion, bookmark and 410 handling) usable.
pub fn include_uninitialized<B>(mut req: Request<B>) -> Request<B> {
    if req.method() == Method::GET && is_pod_read(req.uri().path()) {
        let uri = req.uri();
        let pq = match uri.query() {
            Some(q) if !q.is_empty() => format!("{}?{q}&includeUninitialized=true", uri.path()),
            _ => format!("{}?includeUninitialized=true", uri.path()),
        };
        let mut parts = uri.clone().into_parts();
        if let Ok(pq) = pq.parse() {
            parts.path_and_query = Some(pq);
            if let Ok(new) = Uri::from_parts(parts) {
                *req.uri_mut() = new;
            }
        }
    }
    req
}

/// `/api/v1/pods`, `/api/v1/namespaces/NS/pods` and `/api/v1/namespaces/NS/pods/NAME`
/// (not subresources such as `/log`).
fn is_pod_read(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return false;
    };
    let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    matches!(
        segs.as_slice(),
        ["pods"] | ["namespaces", _, "pods"] | ["namespaces", _, "pods", _]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> String {
        let req = Request::get(uri).body(()).unwrap();
        include_uninitialized(req).uri().to_string()
    }

    #[test]
    fn adds_parameter_to_pod_reads_only() {
        assert_eq!(
            get("/api/v1/pods?watch=true&resourceVersion=5"),
            "/api/v1/pods?watch=true&resourceVersion=5&includeUninitialized=true"
        );
        assert_eq!(
            get("/api/v1/namespaces/a/pods"),
            "/api/v1/namespaces/a/pods?includeUninitialized=true"
        );
        assert_eq!(
            get("/api/v1/namespaces/a/pods/p"),
            "/api/v1/namespaces/a/pods/p?includeUninitialized=true"
        );
        assert_eq!(
            get("/api/v1/namespaces/a/pods/p/log"),
            "/api/v1/namespaces/a/pods/p/log"
        );
        assert_eq!(
            get("/apis/apps/v1/deployments"),
            "/apis/apps/v1/deployments"
        );
        let patch = Request::patch("/api/v1/namespaces/a/pods/p")
            .body(())
            .unwrap();
        assert_eq!(
            include_uninitialized(patch).uri().to_string(),
            "/api/v1/namespaces/a/pods/p"
        );
    }
}
