//! Kubernetes version profiles: which group versions the simulated server serves, and how a
//! legacy server answers, for `initguard sim --kube-version V` and [`crate::options::SimOptions`].
//!
//! | version | mechanism | Deployments | Lease | events.k8s.io/v1 | failed JSON Patch |
//! |---|---|---|---|---|---|
//! | 1.8  | initializers | apps/v1beta2, apps/v1beta1, extensions/v1beta1 | none | no | 500 |
//! | 1.11 | initializers | apps/v1, apps/v1beta2, apps/v1beta1, extensions/v1beta1 | none | no | 422 |
//! | 1.13 | initializers | apps/v1, apps/v1beta2, apps/v1beta1, extensions/v1beta1 | coordination.k8s.io/v1beta1 | no | 422 |
//! | 1.33 | scheduling gates | apps/v1 | coordination.k8s.io/v1 | yes | 422 |
//!
//! The 1.13 profile is checked against a real Kubernetes v1.13.12 API server
//! (tests/real_cluster_legacy/differential.rs, differences tabled in
//! tests/real_cluster_legacy/differences.md); the 1.8 and 1.11 rows come from the sources
//! cited below.
//!
//! Sources:
//! * apps/v1beta2 appeared in 1.8 and apps/v1 in 1.9; extensions/v1beta1 and apps/v1beta1
//!   kept serving Deployments until 1.16 ("Workloads API changes in versions 1.8 and 1.9",
//!   kubernetes.io/docs/reference/workloads-18-19).
//! * coordination.k8s.io/v1beta1 Lease: added in 1.12 for node heartbeats (KEP-0009;
//!   k8s.io/kubernetes/pkg/registry/coordination exists from v1.12.0), coordination.k8s.io/v1
//!   in 1.14, v1beta1 removed in 1.22.
//! * events.k8s.io/v1: 1.19. (events.k8s.io/v1beta1, 1.8-1.24, is not modelled: the guard
//!   writes core/v1 Events.)
//! * A failed JSON Patch `test` answered 500 with the patch library's text ("Testing value
//!   /resourceVersion failed") until the server mapped patch failures to 422 Invalid
//!   (kubernetes/kubernetes#68202, #68838): the patch handler of k8s.io/kubernetes v1.8.15
//!   returns the library's error as is, those of v1.11.10, v1.12.10 and v1.13.12 wrap it in
//!   `NewGenericServerResponse(422, …)` (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
//!   patch.go), and the real 1.13.12 server answers 422 Invalid.
//! * A create whose answer is still uninitialized (`?includeUninitialized=true`) is answered
//!   202 Accepted, not 201 (handlers/create.go of v1.8.15 and v1.13.12: "If the object is
//!   partially initialized, always indicate it via StatusAccepted"); a GET by name shows an
//!   uninitialized object (only lists and watches hide it).
//! * The Initializers admission plugin (1.7-1.13) refuses an update of an uninitialized
//!   object unless the user may `initialize` that resource
//!   (plugin/pkg/admission/initialization: "user must have permission to initialize
//!   resources").

use kube_common::Mechanism;

/// A Kubernetes version the simulator can impersonate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KubeVersion {
    /// 1.8: initializers; Deployments only in beta groups.
    V1_8,
    /// 1.11: initializers; apps/v1; no Lease API.
    V1_11,
    /// 1.13: the last version with initializers; coordination.k8s.io/v1beta1 Leases.
    V1_13,
    /// 1.33: scheduling gates; everything current.
    V1_33,
}

/// A `--kube-version` the simulator has no profile for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported Kubernetes version {0:?}: the simulator serves 1.8, 1.11, 1.13 and 1.33")]
pub struct UnsupportedVersion(pub String);

impl KubeVersion {
    /// Every profile, oldest first.
    pub const ALL: [KubeVersion; 4] = [
        KubeVersion::V1_8,
        KubeVersion::V1_11,
        KubeVersion::V1_13,
        KubeVersion::V1_33,
    ];

    /// The legacy (initializers) profiles.
    pub const LEGACY: [KubeVersion; 3] =
        [KubeVersion::V1_8, KubeVersion::V1_11, KubeVersion::V1_13];

    /// Parses `1.8`, `v1.11`, `1.13.12` and the like.
    pub fn parse(text: &str) -> Result<KubeVersion, UnsupportedVersion> {
        let trimmed = text.trim().trim_start_matches('v');
        let mut parts = trimmed.split('.');
        let major = parts.next();
        let minor = parts.next();
        match (major, minor) {
            (Some("1"), Some("8")) => Ok(KubeVersion::V1_8),
            (Some("1"), Some("11")) => Ok(KubeVersion::V1_11),
            (Some("1"), Some("13")) => Ok(KubeVersion::V1_13),
            (Some("1"), Some("33")) => Ok(KubeVersion::V1_33),
            _ => Err(UnsupportedVersion(text.to_owned())),
        }
    }

    /// `1.8`, `1.11`, `1.13`, `1.33`.
    pub fn as_str(self) -> &'static str {
        match self {
            KubeVersion::V1_8 => "1.8",
            KubeVersion::V1_11 => "1.11",
            KubeVersion::V1_13 => "1.13",
            KubeVersion::V1_33 => "1.33",
        }
    }

    /// The minor version number.
    pub fn minor(self) -> &'static str {
        self.as_str().trim_start_matches("1.")
    }

    /// `gitVersion` in `/version`.
    pub fn git_version(self) -> &'static str {
        match self {
            KubeVersion::V1_8 => "v1.8.15-initguard-sim",
            KubeVersion::V1_11 => "v1.11.10-initguard-sim",
            KubeVersion::V1_13 => "v1.13.12-initguard-sim",
            KubeVersion::V1_33 => "v1.33.0-initguard-sim",
        }
    }

    /// The pending-initializer mechanism of this version (initializers existed in 1.7-1.13).
    pub fn mechanism(self) -> Mechanism {
        if self.is_legacy() {
            Mechanism::Initializers
        } else {
            Mechanism::SchedulingGates
        }
    }

    /// Whether this is a 1.7-1.13 server (initializers, the `initialize` verb).
    pub fn is_legacy(self) -> bool {
        self != KubeVersion::V1_33
    }

    /// Whether a JSON Patch that cannot be applied is answered 500 with the patch library's
    /// words (before the 422 mapping; see the module comment).
    pub fn patch_failure_is_500(self) -> bool {
        self == KubeVersion::V1_8
    }

    /// Whether this version serves `group/version` (`""` for core).
    pub fn serves(self, group: &str, version: &str) -> bool {
        use KubeVersion::*;
        match (group, version) {
            ("", "v1") => true,
            ("apps", "v1") => self != V1_8,
            ("apps", "v1beta2") | ("apps", "v1beta1") | ("extensions", "v1beta1") => {
                self.is_legacy()
            }
            ("coordination.k8s.io", "v1beta1") => self == V1_13,
            // admissionregistration.k8s.io/v1 is served from 1.16 (v1beta1, 1.9–1.21, is not
            // simulated).
            // discovery.k8s.io/v1 (EndpointSlices): 1.21.
            ("coordination.k8s.io", "v1")
            | ("events.k8s.io", "v1")
            | ("admissionregistration.k8s.io", "v1")
            | ("discovery.k8s.io", "v1") => self == V1_33,
            // A group version this table does not list yet (one added to the simulator
            // later, e.g. batch) is served by every profile until its history is added here.
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_supported_versions_only() {
        assert_eq!(KubeVersion::parse("1.8"), Ok(KubeVersion::V1_8));
        assert_eq!(KubeVersion::parse("v1.11"), Ok(KubeVersion::V1_11));
        assert_eq!(KubeVersion::parse("1.13.12"), Ok(KubeVersion::V1_13));
        assert_eq!(KubeVersion::parse("1.33"), Ok(KubeVersion::V1_33));
        let e = KubeVersion::parse("1.9").unwrap_err();
        assert!(e.to_string().contains("1.8, 1.11, 1.13 and 1.33"), "{e}");
        assert!(KubeVersion::parse("").is_err());
        assert!(KubeVersion::parse("2.8").is_err());
    }

    #[test]
    fn served_groups_follow_the_release_history() {
        use KubeVersion::*;
        assert!(!V1_8.serves("apps", "v1") && V1_8.serves("apps", "v1beta2"));
        assert!(V1_11.serves("apps", "v1") && !V1_11.serves("coordination.k8s.io", "v1beta1"));
        assert!(V1_13.serves("coordination.k8s.io", "v1beta1"));
        for v in KubeVersion::LEGACY {
            assert!(!v.serves("coordination.k8s.io", "v1"));
            assert!(!v.serves("events.k8s.io", "v1"));
            assert_eq!(v.mechanism(), Mechanism::Initializers);
        }
        assert!(!V1_33.serves("extensions", "v1beta1"));
        assert_eq!(V1_33.mechanism(), Mechanism::SchedulingGates);
    }
}
