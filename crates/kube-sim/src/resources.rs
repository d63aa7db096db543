//! The resources the simulated API server serves, with their discovery facts.

use super::version::KubeVersion;

/// Where objects of a resource are stored. Two API resources may share a storage:
/// `events` (core/v1) and `events.events.k8s.io` (events.k8s.io/v1) are two views of the
/// same objects, as on a real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Storage {
    Namespaces,
    Pods,
    Events,
    Deployments,
    Leases,
    ConfigMaps,
    Jobs,
    CronJobs,
    ValidatingWebhookConfigurations,
    MutatingWebhookConfigurations,
    Endpoints,
    DaemonSets,
}

impl Storage {
    /// Every storage, in a fixed order (used to index arrays).
    pub(crate) const ALL: [Storage; 12] = [
        Storage::Namespaces,
        Storage::Pods,
        Storage::Events,
        Storage::Deployments,
        Storage::Leases,
        Storage::ConfigMaps,
        Storage::Jobs,
        Storage::CronJobs,
        Storage::ValidatingWebhookConfigurations,
        Storage::MutatingWebhookConfigurations,
        Storage::Endpoints,
        Storage::DaemonSets,
    ];

    /// Position in [`Storage::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The resource whose representation is the stored one.
    pub(crate) fn canonical(self) -> &'static ResourceInfo {
        match self {
            Storage::Namespaces => &RESOURCES[0],
            Storage::Pods => &RESOURCES[1],
            Storage::Events => &RESOURCES[2],
            Storage::Deployments => &RESOURCES[3],
            Storage::Leases => &RESOURCES[4],
            Storage::ConfigMaps => &RESOURCES[5],
            Storage::Jobs => &RESOURCES[6],
            Storage::CronJobs => &RESOURCES[7],
            Storage::ValidatingWebhookConfigurations => &RESOURCES[8],
            Storage::MutatingWebhookConfigurations => &RESOURCES[9],
            Storage::Endpoints => &RESOURCES[10],
            Storage::DaemonSets => &RESOURCES[11],
        }
    }
}

/// Discovery facts and behaviour switches for one API resource.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ResourceInfo {
    /// API group, "" for core.
    pub group: &'static str,
    pub version: &'static str,
    /// Plural resource name as in URLs (`pods`).
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Subresources served (`status`).
    pub subresources: &'static [&'static str],
    pub storage: Storage,
    /// Fields usable in a field selector besides `metadata.name` and `metadata.namespace`.
    pub selectable_fields: &'static [&'static str],
}

impl ResourceInfo {
    /// `v1` or `group/version`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods`, `deployments.apps`: the form used in error messages.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether this resource is the stored representation of its storage.
    pub(crate) fn is_canonical(&self) -> bool {
        std::ptr::eq(self, self.storage.canonical())
    }

    /// Whether `status` is a subresource (then the main resource ignores status changes).
    pub(crate) fn has_status(&self) -> bool {
        self.subresources.contains(&"status")
    }
}

/// Verbs advertised in discovery for every resource and subresource.
pub(crate) const RESOURCE_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Verbs advertised for a `status` subresource.
pub(crate) const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// Every served resource. The first twelve are the canonical ones, in [`Storage`] order; the
/// others are views of the same objects in other group versions. Which of them a server
/// serves depends on its Kubernetes version ([`super::version::KubeVersion::serves`]).
pub(crate) static RESOURCES: [ResourceInfo; 19] = [
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        subresources: &["status"],
        storage: Storage::Namespaces,
        selectable_fields: &["status.phase"],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::Pods,
        selectable_fields: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        subresources: &[],
        storage: Storage::Events,
        selectable_fields: EVENT_FIELDS,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::Deployments,
        selectable_fields: &[],
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &[],
        storage: Storage::Leases,
        selectable_fields: &[],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        categories: &[],
        subresources: &[],
        storage: Storage::ConfigMaps,
        selectable_fields: &[],
    },
    // Stored and listed only (no Job controller runs): the CronJob-like creator writes them so
    // that pods are owned by Jobs owned by a CronJob, as on a real cluster.
    ResourceInfo {
        group: "batch",
        version: "v1",
        plural: "jobs",
        singular: "job",
        kind: "Job",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::Jobs,
        selectable_fields: &["status.successful"],
    },
    ResourceInfo {
        group: "batch",
        version: "v1",
        plural: "cronjobs",
        singular: "cronjob",
        kind: "CronJob",
        namespaced: true,
        short_names: &["cj"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::CronJobs,
        selectable_fields: &[],
    },
    // Stored only: no admission runs in the simulator. The webhook guard reads and patches them.
    ResourceInfo {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "validatingwebhookconfigurations",
        singular: "validatingwebhookconfiguration",
        kind: "ValidatingWebhookConfiguration",
        namespaced: false,
        short_names: &[],
        categories: &["api-extensions"],
        subresources: &[],
        storage: Storage::ValidatingWebhookConfigurations,
        selectable_fields: &[],
    },
    ResourceInfo {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "mutatingwebhookconfigurations",
        singular: "mutatingwebhookconfiguration",
        kind: "MutatingWebhookConfiguration",
        namespaced: false,
        short_names: &[],
        categories: &["api-extensions"],
        subresources: &[],
        storage: Storage::MutatingWebhookConfigurations,
        selectable_fields: &[],
    },
    // Stored only (no endpoints controller): where a `service` owner is read on a server
    // without EndpointSlices (before 1.21). Every version serves core/v1 Endpoints.
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "endpoints",
        singular: "endpoints",
        kind: "Endpoints",
        namespaced: true,
        short_names: &["ep"],
        categories: &[],
        subresources: &[],
        storage: Storage::Endpoints,
        selectable_fields: &[],
    },
    // Stored only (no DaemonSet controller): the node stage's agents. Tests create the
    // DaemonSet and its pods, which the guard judges by the controller reference's uid.
    ResourceInfo {
        group: "apps",
        version: "v1",
        plural: "daemonsets",
        singular: "daemonset",
        kind: "DaemonSet",
        namespaced: true,
        short_names: &["ds"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::DaemonSets,
        selectable_fields: &[],
    },
    ResourceInfo {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        subresources: &[],
        storage: Storage::Events,
        selectable_fields: &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
    },
    ResourceInfo {
        group: "apps",
        version: "v1beta2",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::Deployments,
        selectable_fields: &[],
    },
    ResourceInfo {
        group: "apps",
        version: "v1beta1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::Deployments,
        selectable_fields: &[],
    },
    ResourceInfo {
        group: "extensions",
        version: "v1beta1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::Deployments,
        selectable_fields: &[],
    },
    // DaemonSets where 1.8 (apps/v1beta2) and 1.7-1.15 (extensions/v1beta1) served them;
    // apps/v1beta1 never did.
    ResourceInfo {
        group: "apps",
        version: "v1beta2",
        plural: "daemonsets",
        singular: "daemonset",
        kind: "DaemonSet",
        namespaced: true,
        short_names: &["ds"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::DaemonSets,
        selectable_fields: &[],
    },
    ResourceInfo {
        group: "extensions",
        version: "v1beta1",
        plural: "daemonsets",
        singular: "daemonset",
        kind: "DaemonSet",
        namespaced: true,
        short_names: &["ds"],
        categories: &["all"],
        subresources: &["status"],
        storage: Storage::DaemonSets,
        selectable_fields: &[],
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        version: "v1beta1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &[],
        storage: Storage::Leases,
        selectable_fields: &[],
    },
];

/// The resource served at `/api/v1/PLURAL` (group "") or `/apis/GROUP/VERSION/PLURAL`.
pub(crate) fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The canonical resource for a plural name as used by the public `Sim` accessors
/// (`pods`, `deployments`, `leases`, `events`, `namespaces`).
pub(crate) fn by_plural(plural: &str) -> Option<&'static ResourceInfo> {
    Storage::ALL
        .iter()
        .map(|s| s.canonical())
        .find(|r| r.plural == plural || r.qualified() == plural)
}

/// Whether a server of version `kube` serves `group/version` (without a version: every group
/// version the simulator knows).
pub(crate) fn served(kube: Option<KubeVersion>, group: &str, version: &str) -> bool {
    kube.is_none_or(|k| k.serves(group, version))
}

/// The group versions served by a server of version `kube`, in discovery order: ("", "v1")
/// first, then each group's preferred version before its others.
pub(crate) fn group_versions(kube: Option<KubeVersion>) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in &RESOURCES {
        if served(kube, r.group, r.version) && !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_resources_line_up_with_storage() {
        for s in Storage::ALL {
            assert_eq!(s.canonical().storage, s);
            assert!(s.canonical().is_canonical());
        }
        let ev = lookup("events.k8s.io", "v1", "events").unwrap();
        assert!(!ev.is_canonical());
        assert_eq!(ev.qualified(), "events.events.k8s.io");
        assert_eq!(by_plural("deployments").unwrap().api_version(), "apps/v1");
    }
}
