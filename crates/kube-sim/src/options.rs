//! How to run a [`Sim`](crate::sim::Sim).

use std::net::SocketAddr;
use std::time::Duration;

use kube_common::Mechanism;

use crate::version::KubeVersion;

/// How to run a [`crate::Sim`].
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Address to listen on; port 0 picks a free port (default `127.0.0.1:0`).
    pub listen: SocketAddr,
    /// Which pending-initializer mechanism the server implements (default scheduling gates).
    pub mechanism: Mechanism,
    /// The Kubernetes version whose API surface is served ([`KubeVersion`]: group versions
    /// in discovery, 500 on a failed JSON Patch and the `initialize` verb on legacy
    /// versions); must match `mechanism`. None (the default): every group version the
    /// simulator knows, current error codes.
    pub kube_version: Option<KubeVersion>,
    /// Initializers mode: names appended to `metadata.initializers.pending` of every pod
    /// created without `metadata.initializers`, like an InitializerConfiguration. Changeable
    /// at run time with [`crate::Sim::set_legacy_initializers`].
    pub legacy_initializers: Vec<String>,
    /// How long a legacy CREATE waits for initialization before answering 504 (default 30 s).
    pub create_timeout: Duration,
    /// Delay before an ungated, initialized pod is bound to `sim-node-1` and running
    /// (default 50 ms).
    pub schedule_delay: Duration,
    /// Changes kept for watches to resume from; older versions get 410 Gone (default 10 000).
    pub history_window: usize,
    /// Interval between BOOKMARK events on watches that allow them (default 1 s; the first
    /// comes after at most 100 ms).
    pub bookmark_interval: Duration,
    /// Changes kept for [`crate::Sim::object_history`] (default 1 000 000; 0 keeps none).
    pub change_log_limit: usize,
    /// Requests kept for [`crate::Sim::requests`] (default 100 000; counts are always kept).
    pub request_log_limit: usize,
    /// How far the server's clock is from this process's (default zero): applied to every
    /// time it generates (`creationTimestamp`, condition and scheduling times, the `Date`
    /// header of every response). [`crate::RequestRecord::time`] and [`crate::ObjectChange::time`] stay on
    /// this process's clock.
    pub clock_offset: jiff::SignedDuration,
    /// The `AdmissionWebhookMatchConditions` feature gate off, as on a 1.27 server by default:
    /// webhook configurations' `matchConditions` are dropped silently on write (unless the
    /// stored object already has some).
    pub drop_match_conditions: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            mechanism: Mechanism::SchedulingGates,
            kube_version: None,
            legacy_initializers: Vec::new(),
            create_timeout: Duration::from_secs(30),
            schedule_delay: Duration::from_millis(50),
            history_window: 10_000,
            bookmark_interval: Duration::from_secs(1),
            change_log_limit: 1_000_000,
            request_log_limit: 100_000,
            clock_offset: jiff::SignedDuration::ZERO,
            drop_match_conditions: false,
        }
    }
}
