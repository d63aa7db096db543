//! Liveness of the controllers behind the listed initializers (README "What it guarantees").
//!
//! One watcher or prober per distinct [`crate::config::OwnerSpec`], however many initializers share it:
//!
//! * `deployment` — a watch on that one Deployment, in the most preferred group version the
//!   server serves (apps/v1 … extensions/v1beta1, found by discovery: [`crate::discovery`]);
//!   up while `status.availableReplicas >= 1`. A server serving none is an error in the log
//!   and in `/readyz` (the [`Readiness`] given to [`Owners::spawn`]).
//! * `lease` — a watch on that one Lease; up while the lease was renewed within its
//!   `leaseDurationSeconds` as observed on this process's monotonic clock (see `LeaseModel`).
//!   A lease expires without any event, so a timer is armed for the expiry instant.
//! * `pods` — a watch on the pods matching a label selector; up while one of them is Ready.
//! * `http` — a GET every `probeInterval`; up on a 2xx answer within [`PROBE_TIMEOUT`]. https
//!   is verified against the owner's `caFile` when given, else the platform's trusted roots,
//!   and presents `certFile`/`keyFile` when given. A certificate is never accepted unchecked.
//!
//! States (README "What it guarantees": never early): every owner starts [`crate::policy::OwnerState::Unknown`]. It becomes
//! `Up` or `Down` once an object was read (initial list done, first probe answered); `Down`
//! means the object reports failure, even on first sight, or was deleted after it was seen.
//! An object that was never read (missing since start — a config typo —, forbidden, API
//! unreachable) stays `Unknown`, which never triggers `owner_down`. A watch error keeps the
//! last state: the watcher relists with backoff and only a completed observation changes it.

mod model;
mod state;
mod watch;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::discovery::Discovery;
use crate::metrics::Metrics;
use crate::supervise::{Failures, Readiness};

pub use model::{
    LeaseRecord, Observed, OwnerReport, deployment_up, owner_target, pod_ready, slice_endpoints,
};
pub use state::Owners;
pub(crate) use watch::error_chain;
pub use watch::{DaemonSetFindings, PROBE_TIMEOUT, daemonset_owners, missing_owners};

use state::Handle;
use watch::Task;

impl Owners {
    /// Start one watcher or prober per distinct owner in `config`; they stop when `cancel`
    /// fires, a panic in one is recorded in `failures`, and an owner that cannot be watched
    /// at all is listed in `readiness`. Must be called inside a Tokio
    /// runtime.
    pub fn spawn(
        client: kube::Client,
        discovery: &Discovery,
        config: &Config,
        metrics: Arc<Metrics>,
        failures: &Failures,
        readiness: &Readiness,
        cancel: CancellationToken,
    ) -> Owners {
        let owners = Owners::new(config, metrics, readiness.clone());
        for index in 0..owners.inner.owners.len() {
            let handle = Handle {
                inner: owners.inner.clone(),
                index,
            };
            let task = Task {
                handle,
                discovery: discovery.clone(),
                cancel: cancel.clone(),
            };
            watch::start(task, &client, &owners.inner.owners[index].spec, failures);
        }
        owners
    }
}
