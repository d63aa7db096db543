//! What an API server serves, read from discovery (`/apis`) instead of assumed: Kubernetes
//! 1.7-1.13 (legacy initializers) and current versions serve different group versions of the
//! same kinds.
//!
//! * Deployments: `apps/v1` from 1.9; 1.8 serves `apps/v1beta2`; 1.7 `apps/v1beta1`; 1.7-1.15
//!   also `extensions/v1beta1` ("Workloads API changes in versions 1.8 and 1.9",
//!   kubernetes.io/docs/reference/workloads-18-19).
//! * Leases: `coordination.k8s.io/v1` from 1.14, `coordination.k8s.io/v1beta1` 1.12-1.21
//!   (KEP-0009 node heartbeats); older servers have none.

use std::collections::BTreeMap;

use kube::core::{ApiResource, GroupVersionKind};

/// Deployment group versions, most preferred first.
pub const DEPLOYMENT_GROUP_VERSIONS: [(&str, &str); 4] = [
    ("apps", "v1"),
    ("apps", "v1beta2"),
    ("apps", "v1beta1"),
    ("extensions", "v1beta1"),
];

/// DaemonSet group versions, most preferred first: `apps/v1` from 1.9, `apps/v1beta2` in 1.8,
/// `extensions/v1beta1` 1.7-1.15 (apps/v1beta1 never served DaemonSets; same source as the
/// module comment's).
pub const DAEMONSET_GROUP_VERSIONS: [(&str, &str); 3] = [
    ("apps", "v1"),
    ("apps", "v1beta2"),
    ("extensions", "v1beta1"),
];

/// Lease group versions, most preferred first (see the module comment).
pub const LEASE_GROUP_VERSIONS: [(&str, &str); 2] = [
    ("coordination.k8s.io", "v1"),
    ("coordination.k8s.io", "v1beta1"),
];

/// The group versions a server serves (the core group `""`/`v1` is always served).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiSurface {
    /// Group → versions served.
    groups: BTreeMap<String, Vec<String>>,
}

impl ApiSurface {
    /// Read `/apis` (one request).
    #[cfg(feature = "client")]
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
        self.preferred(&DEPLOYMENT_GROUP_VERSIONS, "Deployment", "deployments")
    }

    /// The most preferred DaemonSet group version served, if any.
    pub fn daemonsets(&self) -> Option<ApiResource> {
        self.preferred(&DAEMONSET_GROUP_VERSIONS, "DaemonSet", "daemonsets")
    }

    /// The most preferred Lease group version served, if any (none before 1.12).
    pub fn leases(&self) -> Option<ApiResource> {
        self.preferred(&LEASE_GROUP_VERSIONS, "Lease", "leases")
    }

    /// discovery.k8s.io/v1 EndpointSlices, if served (1.21+; before that the guard reads
    /// core/v1 Endpoints: [`ApiSurface::service_endpoints`]).
    pub fn endpoint_slices(&self) -> Option<ApiResource> {
        self.preferred(
            &[("discovery.k8s.io", "v1")],
            "EndpointSlice",
            "endpointslices",
        )
    }

    /// Where a Service's endpoints are read: discovery.k8s.io/v1 EndpointSlices when served
    /// (1.21+), else core/v1 Endpoints, which every version serves (deprecated from 1.33, still
    /// served).
    pub fn service_endpoints(&self) -> ApiResource {
        self.endpoint_slices().unwrap_or_else(|| {
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Endpoints"),
                "endpoints",
            )
        })
    }

    fn preferred(&self, order: &[(&str, &str)], kind: &str, plural: &str) -> Option<ApiResource> {
        order.iter().find(|(g, v)| self.serves(g, v)).map(|(g, v)| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural)
        })
    }
}

/// Webhook configuration group versions, most preferred first: admissionregistration.k8s.io/v1
/// from 1.16; v1beta1 1.9-1.21 (removed in 1.22: "Deprecated API Migration Guide",
/// kubernetes.io/docs/reference/using-api/deprecation-guide).
pub const WEBHOOK_GROUP_VERSIONS: [(&str, &str); 2] = [
    ("admissionregistration.k8s.io", "v1"),
    ("admissionregistration.k8s.io", "v1beta1"),
];

impl ApiSurface {
    /// The most preferred webhook configuration group version served for `kind`
    /// (`ValidatingWebhookConfiguration` or `MutatingWebhookConfiguration`, plural
    /// `plural`), if any.
    pub fn webhook_configurations(&self, kind: &str, plural: &str) -> Option<ApiResource> {
        self.preferred(&WEBHOOK_GROUP_VERSIONS, kind, plural)
    }
}

/// `DEPLOYMENT_GROUP_VERSIONS` in words, for error messages.
pub fn deployment_group_versions() -> String {
    in_words(&DEPLOYMENT_GROUP_VERSIONS)
}

/// `DAEMONSET_GROUP_VERSIONS` in words, for error messages.
pub fn daemonset_group_versions() -> String {
    in_words(&DAEMONSET_GROUP_VERSIONS)
}

/// `LEASE_GROUP_VERSIONS` in words, for error messages.
pub fn lease_group_versions() -> String {
    in_words(&LEASE_GROUP_VERSIONS)
}

fn in_words(order: &[(&str, &str)]) -> String {
    order
        .iter()
        .map(|(g, v)| format!("{g}/{v}"))
        .collect::<Vec<_>>()
        .join(", ")
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
    fn daemonsets_are_apps_v1_from_1_9_apps_v1beta2_in_1_8_extensions_in_1_7() {
        // 1.8 serves apps/v1beta1 too, which never had DaemonSets.
        let v18 = ApiSurface::from_group_versions([
            ("apps", "v1beta2"),
            ("apps", "v1beta1"),
            ("extensions", "v1beta1"),
        ]);
        let d = v18.daemonsets().unwrap();
        assert_eq!(d.api_version, "apps/v1beta2");
        assert_eq!(
            (d.kind.as_str(), d.plural.as_str()),
            ("DaemonSet", "daemonsets")
        );
        let v17 = ApiSurface::from_group_versions([("apps", "v1beta1"), ("extensions", "v1beta1")]);
        assert_eq!(v17.daemonsets().unwrap().api_version, "extensions/v1beta1");
        let v113 = ApiSurface::from_group_versions([("apps", "v1"), ("extensions", "v1beta1")]);
        assert_eq!(v113.daemonsets().unwrap().api_version, "apps/v1");
        assert!(
            ApiSurface::from_group_versions([("apps", "v1beta1")])
                .daemonsets()
                .is_none()
        );
    }

    #[test]
    fn leases_are_v1_from_1_14_v1beta1_on_1_12_and_1_13_and_absent_before() {
        let both = ApiSurface::from_group_versions([
            ("coordination.k8s.io", "v1"),
            ("coordination.k8s.io", "v1beta1"),
        ]);
        assert_eq!(both.leases().unwrap().api_version, "coordination.k8s.io/v1");
        let v113 = ApiSurface::from_group_versions([("coordination.k8s.io", "v1beta1")]);
        let lease = v113.leases().unwrap();
        assert_eq!(lease.api_version, "coordination.k8s.io/v1beta1");
        assert_eq!(
            (lease.kind.as_str(), lease.plural.as_str()),
            ("Lease", "leases")
        );
        assert!(ApiSurface::default().leases().is_none());
        assert!(v113.endpoint_slices().is_none());
        assert_eq!(v113.service_endpoints().kind, "Endpoints");
        assert_eq!(v113.service_endpoints().api_version, "v1");
        let current = ApiSurface::from_group_versions([("discovery.k8s.io", "v1")]);
        assert_eq!(
            current.endpoint_slices().unwrap().api_version,
            "discovery.k8s.io/v1"
        );
        assert_eq!(current.service_endpoints().kind, "EndpointSlice");
    }
}
