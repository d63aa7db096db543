//! Kubernetes facts that both initguard and its simulated API server (`kube-sim`) speak, kept
//! in one place so the two never disagree: the two ways a pod waits for initialization, the
//! group versions each Kubernetes version serves, the `includeUninitialized` parameter of
//! legacy servers, name syntax, label selectors, and where a YAML key path is in its text. It
//! knows nothing of the guard's policy or of the simulator. See ARCHITECTURE.md.

#![warn(missing_docs)]

pub mod api_surface;
pub mod mechanism;
pub mod names;
pub mod selector;
pub mod yaml;

pub use api_surface::{
    ApiSurface, DAEMONSET_GROUP_VERSIONS, DEPLOYMENT_GROUP_VERSIONS, LEASE_GROUP_VERSIONS,
    daemonset_group_versions, deployment_group_versions, lease_group_versions,
};
pub use mechanism::{Mechanism, include_uninitialized};
