//! Which leader lock the server allows. Which group versions a server serves is read by
//! [`kube_common::ApiSurface`]; only what a configured owner or the leader lock needs is
//! required, and each user of it reports what it misses itself
//! ([`crate::supervise::Readiness`]).

use kube_common::ApiSurface;

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
