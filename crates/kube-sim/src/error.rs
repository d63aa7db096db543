//! Errors of the simulator's own operations.

use std::net::SocketAddr;
use std::path::PathBuf;

use kube_common::Mechanism;

use crate::rbac::RbacError;
use crate::version::KubeVersion;

/// Errors of the simulator's own operations (API errors go to clients as `Status` bodies).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("simulated API server cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write kubeconfig {path}: {source}")]
    WriteKubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot render kubeconfig: {0}")]
    RenderKubeconfig(#[from] serde_yaml::Error),
    #[error(transparent)]
    Rbac(#[from] RbacError),
    #[error("Kubernetes {version} implements {served}, not {asked}", version = .version.as_str(), served = .version.mechanism().as_str(), asked = .mechanism.as_str())]
    VersionMechanism {
        version: KubeVersion,
        mechanism: Mechanism,
    },
}
