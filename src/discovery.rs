//! Which group versions the API server serves, read once for a whole run ([`Discovery`]), and
//! which leader lock that allows. Only what a configured owner, webhook or the leader lock
//! needs is required, and each user reports what it misses itself
//! ([`crate::supervise::Readiness`]).

use std::sync::Arc;

use kube_common::ApiSurface;
use tokio::sync::OnceCell;

/// The API server's discovery (`/apis`), read once and shared: the owners, the election and
/// the webhook guard all await the same read. A failed read is not kept, so the next caller
/// tries again. What is served is not expected to change while the guard runs (an upgrade
/// restarts the control plane, and the static pod or Deployment with it).
#[derive(Clone)]
pub struct Discovery {
    client: kube::Client,
    surface: Arc<OnceCell<ApiSurface>>,
}

impl Discovery {
    /// Nothing is read until the first [`Discovery::surface`].
    pub fn new(client: kube::Client) -> Discovery {
        Discovery {
            client,
            surface: Arc::default(),
        }
    }

    /// The client it reads with.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// What the server serves: the first call reads it, concurrent ones wait for that read.
    pub async fn surface(&self) -> Result<&ApiSurface, kube::Error> {
        self.surface
            .get_or_try_init(|| ApiSurface::read(&self.client))
            .await
    }
}

/// Which object the leader election locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// `coordination.k8s.io/v1` Lease (1.14+).
    LeaseV1,
    /// `coordination.k8s.io/v1beta1` Lease (1.12-1.13 among the legacy versions).
    LeaseV1beta1,
    /// A core/v1 ConfigMap with client-go's `control-plane.alpha.kubernetes.io/leader`
    /// annotation (every version).
    ConfigMap,
}

impl LockKind {
    /// `coordination.k8s.io/v1 Lease` and the like, for logs and `/status`.
    pub fn describe(self) -> &'static str {
        match self {
            LockKind::LeaseV1 => "coordination.k8s.io/v1 Lease",
            LockKind::LeaseV1beta1 => "coordination.k8s.io/v1beta1 Lease",
            LockKind::ConfigMap => "v1 ConfigMap",
        }
    }
}

/// The leader lock to use: a v1 Lease, else a v1beta1 Lease (1.12-1.13 among the legacy
/// versions), else a ConfigMap.
pub fn lock_kind(surface: &ApiSurface) -> LockKind {
    if surface.serves("coordination.k8s.io", "v1") {
        LockKind::LeaseV1
    } else if surface.serves("coordination.k8s.io", "v1beta1") {
        LockKind::LeaseV1beta1
    } else {
        LockKind::ConfigMap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_falls_back_from_lease_v1_to_v1beta1_to_configmap() {
        let both = ApiSurface::from_group_versions([
            ("coordination.k8s.io", "v1"),
            ("coordination.k8s.io", "v1beta1"),
        ]);
        assert_eq!(lock_kind(&both), LockKind::LeaseV1);
        let v113 = ApiSurface::from_group_versions([("coordination.k8s.io", "v1beta1")]);
        assert_eq!(lock_kind(&v113), LockKind::LeaseV1beta1);
        assert_eq!(lock_kind(&ApiSurface::default()), LockKind::ConfigMap);
        assert!(ApiSurface::default().serves("", "v1"));
    }
}
