//! What the API server serves, read from discovery (`/apis`) instead of assumed: initguard
//! supports Kubernetes 1.7-1.13 (legacy initializers) as well as current versions, which serve
//! different group versions of the same kinds.
//!
//! * Deployments: `apps/v1` from 1.9; 1.8 serves `apps/v1beta2`; 1.7 `apps/v1beta1`; 1.7-1.15
//!   also `extensions/v1beta1` ("Workloads API changes in versions 1.8 and 1.9",
//!   kubernetes.io/docs/reference/workloads-18-19).
//! * Leases: `coordination.k8s.io/v1` from 1.14, `coordination.k8s.io/v1beta1` 1.12-1.21
//!   (KEP-0009 node heartbeats); older servers have none, and the leader lock falls back to a
//!   ConfigMap.
//!
//! Only what a configured owner or the leader lock needs is required; each user of this
//! module reports what it misses itself ([`Problems`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::core::{ApiResource, GroupVersionKind};

/// Deployment group versions, most preferred first.
pub const DEPLOYMENT_GROUP_VERSIONS: [(&str, &str); 4] = [
    ("apps", "v1"),
    ("apps", "v1beta2"),
    ("apps", "v1beta1"),
    ("extensions", "v1beta1"),
];

/// The group versions a server serves (the core group `""`/`v1` is always served).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiSurface {
    /// Group → versions served.
    groups: BTreeMap<String, Vec<String>>,
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

impl ApiSurface {
    /// Read `/apis` (one request).
    pub async fn read(client: &kube::Client) -> Result<ApiSurface, kube::Error> {
        let list = client.list_api_groups().await?;
        Ok(ApiSurface::from_group_versions(
            list.groups.iter().flat_map(|g| {
                g.versions
                    .iter()
                    .map(move |v| (g.name.clone(), v.version.clone()))
            }),
        ))
    }

    /// A surface serving exactly these (group, version) pairs besides core/v1.
    pub fn from_group_versions(
        pairs: impl IntoIterator<Item = (impl Into<String>, impl Into<String>)>,
    ) -> ApiSurface {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (g, v) in pairs {
            groups.entry(g.into()).or_default().push(v.into());
        }
        ApiSurface { groups }
    }

    /// Whether `group/version` is served (`""`/`v1` always is).
    pub fn serves(&self, group: &str, version: &str) -> bool {
        (group.is_empty() && version == "v1")
            || self
                .groups
                .get(group)
                .is_some_and(|vs| vs.iter().any(|v| v == version))
    }

    /// The most preferred Deployment group version served, if any.
    pub fn deployments(&self) -> Option<ApiResource> {
        DEPLOYMENT_GROUP_VERSIONS
            .iter()
            .find(|(g, v)| self.serves(g, v))
            .map(|(g, v)| {
                ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk(g, v, "Deployment"),
                    "deployments",
                )
            })
    }

    /// The leader lock to use: a v1 Lease, else a v1beta1 Lease, else a ConfigMap.
    pub fn lock(&self) -> LockKind {
        if self.serves("coordination.k8s.io", "v1") {
            LockKind::LeaseV1
        } else if self.serves("coordination.k8s.io", "v1beta1") {
            LockKind::LeaseV1beta1
        } else {
            LockKind::ConfigMap
        }
    }
}

/// `DEPLOYMENT_GROUP_VERSIONS` in words, for error messages.
pub fn deployment_group_versions() -> String {
    DEPLOYMENT_GROUP_VERSIONS
        .iter()
        .map(|(g, v)| format!("{g}/{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reasons this replica cannot do part of its job (a needed API missing, the leader election
/// failing), keyed by what they are about. Each is listed by `/readyz` (then 503) and
/// `/status`; the component that found it clears it when it is solved. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Problems(Arc<Mutex<BTreeMap<String, String>>>);

impl Problems {
    /// Record (`Some`) or clear (`None`) the problem of `about`. Returns whether it changed.
    pub fn set(&self, about: &str, problem: Option<String>) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match problem {
            Some(p) => map.insert(about.to_owned(), p.clone()).as_ref() != Some(&p),
            None => map.remove(about).is_some(),
        }
    }

    /// Every problem as `ABOUT: PROBLEM`, sorted.
    pub fn list(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(about, p)| format!("{about}: {p}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployments_come_from_the_most_preferred_group_served() {
        let v18 = ApiSurface::from_group_versions([
            ("apps", "v1beta2"),
            ("apps", "v1beta1"),
            ("extensions", "v1beta1"),
        ]);
        let d = v18.deployments().unwrap();
        assert_eq!((d.group.as_str(), d.version.as_str()), ("apps", "v1beta2"));
        assert_eq!(d.plural, "deployments");
        assert_eq!(d.api_version, "apps/v1beta2");
        let v17 = ApiSurface::from_group_versions([("extensions", "v1beta1")]);
        assert_eq!(v17.deployments().unwrap().api_version, "extensions/v1beta1");
        let current = ApiSurface::from_group_versions([("apps", "v1")]);
        assert_eq!(current.deployments().unwrap().api_version, "apps/v1");
        assert!(ApiSurface::default().deployments().is_none());
    }

    #[test]
    fn the_lock_falls_back_from_lease_v1_to_v1beta1_to_configmap() {
        let both = ApiSurface::from_group_versions([
            ("coordination.k8s.io", "v1"),
            ("coordination.k8s.io", "v1beta1"),
        ]);
        assert_eq!(both.lock(), LockKind::LeaseV1);
        let v113 = ApiSurface::from_group_versions([("coordination.k8s.io", "v1beta1")]);
        assert_eq!(v113.lock(), LockKind::LeaseV1beta1);
        assert_eq!(ApiSurface::default().lock(), LockKind::ConfigMap);
        assert!(ApiSurface::default().serves("", "v1"));
    }

    #[test]
    fn problems_are_set_listed_and_cleared() {
        let p = Problems::default();
        assert!(p.set("leader election", Some("forbidden".into())));
        assert!(!p.set("leader election", Some("forbidden".into())));
        assert_eq!(p.list(), ["leader election: forbidden"]);
        assert!(p.set("leader election", None));
        assert!(p.list().is_empty());
    }
}
