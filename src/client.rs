//! Building the kube-rs client for a mechanism.
//!
//! Legacy initializers hide uninitialized pods from GET/LIST/WATCH unless the request says
//! `includeUninitialized=true`, a parameter kube-rs does not know. Rather than hand-rolling a
//! watcher, a request layer adds it, so `kube::runtime::watcher` keeps all of its
//! resourceVersion, bookmark and 410 handling.

use http::{Method, Request, Uri};
use kube::client::{Body, ClientBuilder};
use tower::util::MapRequestLayer;

use crate::config::Mechanism;

/// A client for `config` that sees every pod the mechanism needs to see.
pub fn build(config: kube::Config, mechanism: Mechanism) -> Result<kube::Client, kube::Error> {
    let builder = ClientBuilder::try_from(config)?;
    Ok(match mechanism {
        Mechanism::SchedulingGates => builder.build(),
        Mechanism::Initializers => builder
            .with_layer(&MapRequestLayer::new(include_uninitialized))
            .build(),
    })
}

/// Adds `includeUninitialized=true` to GET requests for pods (get, list, watch).
pub fn include_uninitialized(mut req: Request<Body>) -> Request<Body> {
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
        let req = Request::get(uri).body(Body::empty()).unwrap();
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
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            include_uninitialized(patch).uri().to_string(),
            "/api/v1/namespaces/a/pods/p"
        );
    }
}
