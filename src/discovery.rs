//! Which group versions the API server serves, read once for a whole run ([`Discovery`]), and
//! which leader lock that allows. Only what a configured owner, webhook or the leader lock
//! needs is required; the owners, the election and the webhook guard each report in
//! [`crate::supervise::Readiness`] what they cannot do without it.

use std::sync::Arc;
use std::time::Duration;

use kube_common::ApiSurface;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

/// Longest one read of `/apis` may take: a read that hangs (a half-open connection) would
/// otherwise hold every reader waiting on it. It then fails, is not kept, and the next caller
/// reads again.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a reader that needs discovery waits before asking again after a failed read.
pub const RETRY_EVERY: Duration = Duration::from_secs(2);

/// A read of `/apis` that got no answer within [`READ_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
#[error("the API server did not answer GET /apis within {0:?}")]
pub struct Unanswered(Duration);

/// The API server's discovery (`/apis`), read once and shared: the owners, the election and
/// the webhook guard all await the same read. A failed read is not kept, so the next caller
/// tries again. What is served is read once at start, as each reader did before it was
/// shared: a server that starts serving a new API version is seen after a restart.
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
            .get_or_try_init(|| async {
                match tokio::time::timeout(READ_TIMEOUT, ApiSurface::read(&self.client)).await {
                    Ok(read) => read,
                    Err(_) => Err(kube::Error::Service(Box::new(Unanswered(READ_TIMEOUT)))),
                }
            })
            .await
    }

    /// [`Discovery::surface`], asked again every [`RETRY_EVERY`] after `failed` has seen the
    /// error, until it is read or `cancel` fires (None).
    pub async fn surface_until(
        &self,
        cancel: &CancellationToken,
        mut failed: impl FnMut(&kube::Error),
    ) -> Option<&ApiSurface> {
        loop {
            let read = tokio::select! {
                () = cancel.cancelled() => return None,
                read = self.surface() => read,
            };
            match read {
                Ok(surface) => return Some(surface),
                Err(e) => failed(&e),
            }
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = tokio::time::sleep(RETRY_EVERY) => {}
            }
        }
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
