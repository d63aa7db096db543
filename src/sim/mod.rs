//! Simulated Kubernetes API server: a test double for a real cluster.
//!
//! [`Sim`] serves the real Kubernetes HTTP API (JSON only) on 127.0.0.1 so that kube-rs and
//! kubectl talk to it unchanged: namespaces, pods (+status), configmaps, deployments (+status;
//! apps/v1, apps/v1beta2, apps/v1beta1, extensions/v1beta1), leases (coordination.k8s.io/v1
//! and v1beta1), core/v1 and events.k8s.io/v1 events; get, list (selectors, pagination), watch
//! (bookmarks, 410 Gone), create, update, patch (JSON, merge, strategic), delete; discovery and
//! Table output for kubectl. [`SimOptions::kube_version`] narrows this to what one Kubernetes
//! version served ([`version`] has the table and its sources). It implements the two pending-initializer
//! mechanisms initguard deals with: scheduling gates (removal only, gated pods stay Pending
//! `SchedulingGated`, a simulated scheduler runs ungated pods) and legacy initializers
//! (uninitialized pods hidden without `includeUninitialized=true`, a CREATE blocks until
//! initialized or times out with 504 while the pod stays stored). Faults can be injected
//! ([`Faults`]), every request is logged ([`RequestRecord`]), every change recorded
//! ([`ObjectChange`]), and RBAC can be enforced per user ([`Rbac`]).
//!
//! Users are identified by bearer token: `user:NAME` is user `NAME`, no token is
//! `system:anonymous`. It is never meant for production use.
//!
//! Known simplifications, each harmless for kube-rs and kubectl:
//! * list continuations read the current state after the last key served (as an expired
//!   snapshot would) while reporting the first page's resourceVersion;
//! * deletion is immediate (no `deletionTimestamp`, no graceful termination, no
//!   finalizers); deleting a namespace deletes its objects at once;
//! * strategic merge patch knows the merge keys of the built-in lists it stores; server-side
//!   apply is answered 415; request bodies are JSON, and protobuf only for a Namespace (what
//!   `kubectl create namespace` sends); `fieldValidation` is accepted and not enforced;
//! * validation covers names, containers, scheduling gates, pod spec immutability and
//!   initializers, not every field of every kind;
//! * a failed legacy initialization (`metadata.initializers.result`) deletes the pod and the
//!   waiting CREATE gets the result's status;
//! * a JSON Patch that cannot be applied answers 422 `Invalid` whose message ends with the
//!   patch library's error (`testing value /path failed`); with a legacy
//!   [`SimOptions::kube_version`] it answers 500 with the old library's words (`Testing
//!   value /path failed`, `Unable to access invalid index: N`), as 1.7–1.13 servers did.

pub mod cli;
pub mod controllers;
pub(crate) mod discovery;
pub mod faults;
pub(crate) mod kinds;
pub(crate) mod ops;
pub(crate) mod patch;
pub(crate) mod protobuf;
pub mod rbac;
pub(crate) mod resources;
pub mod scenario;
pub mod selectors;
pub(crate) mod server;
pub(crate) mod status;
pub(crate) mod store;
pub(crate) mod table;
pub mod version;
pub(crate) mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tokio::net::TcpListener;

pub use faults::Faults;
pub use rbac::{PolicyRule, Rbac, RbacError};
pub use store::ChangeType;
pub use version::{KubeVersion, UnsupportedVersion};

use crate::config::Mechanism;
use server::{Listener, Shared};

/// How to run a [`Sim`].
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
    /// at run time with [`Sim::set_legacy_initializers`].
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
    /// Changes kept for [`Sim::object_history`] (default 1 000 000; 0 keeps none).
    pub change_log_limit: usize,
    /// Requests kept for [`Sim::requests`] (default 100 000; counts are always kept).
    pub request_log_limit: usize,
    /// How far the server's clock is from this process's (default zero): applied to every
    /// time it generates (`creationTimestamp`, condition and scheduling times, the `Date`
    /// header of every response). [`RequestRecord::time`] and [`ObjectChange::time`] stay on
    /// this process's clock.
    pub clock_offset: jiff::SignedDuration,
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
        }
    }
}

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

/// One request the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub time: SystemTime,
    /// Authenticated user (`system:anonymous` without a token; empty when authentication
    /// failed).
    pub user: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for
    /// non-resource paths (discovery) the lowercase HTTP method.
    pub verb: String,
    /// `pods`, `pods/status`, `deployments`, `leases`, `events`, `namespaces`…; empty for
    /// non-resource paths.
    pub resource: String,
    /// API group of the resource ("" for core).
    pub api_group: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// HTTP status answered.
    pub status: u16,
    pub content_type: Option<String>,
    /// Request body of writes (for patch inspection).
    pub body: Option<String>,
    pub path: String,
    pub query: Option<String>,
}

/// One committed change of a stored object.
#[derive(Debug, Clone)]
pub struct ObjectChange {
    pub resource_version: u64,
    /// Plural resource name of the stored form: `pods`, `deployments`, `leases`, `events`,
    /// `namespaces`.
    pub resource: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    pub change_type: ChangeType,
    /// Who made the change (`system:kube-scheduler` and `system:node:sim-node-1` for the
    /// simulated scheduler and kubelet).
    pub user: String,
    pub time: SystemTime,
    /// State before the change (None for a creation).
    pub before: Option<Arc<Value>>,
    /// State after the change (None for a deletion).
    pub after: Option<Arc<Value>>,
}

impl ObjectChange {
    /// Initializer names (scheduling gates and legacy pending initializers) present before
    /// and absent after this change; for a deletion, none.
    pub fn removed_initializers(&self) -> Vec<String> {
        let (Some(before), Some(after)) = (&self.before, &self.after) else {
            return Vec::new();
        };
        let gone = |f: fn(&Value) -> Vec<String>| {
            let now = f(after);
            f(before).into_iter().filter(move |n| !now.contains(n))
        };
        gone(kinds::gate_names)
            .chain(gone(kinds::pending_initializer_names))
            .collect()
    }
}

struct Inner {
    shared: Arc<Shared>,
    listener: Mutex<Option<Listener>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(l) = self
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            l.cancel();
        }
    }
}

/// A running simulated API server; clones share it. It stops when the last clone is
/// dropped or on [`Sim::shutdown`].
#[derive(Clone)]
pub struct Sim {
    inner: Arc<Inner>,
}

impl Sim {
    /// Bind and start serving. Must run inside a Tokio runtime.
    pub async fn start(options: SimOptions) -> Result<Sim, SimError> {
        if let Some(version) = options.kube_version
            && version.mechanism() != options.mechanism
        {
            return Err(SimError::VersionMechanism {
                version,
                mechanism: options.mechanism,
            });
        }
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| SimError::Bind {
                    addr: options.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: options.listen,
            source,
        })?;
        let shared = Arc::new(Shared::new(options, addr));
        let listener = Listener::spawn(listener, shared.clone());
        Ok(Sim {
            inner: Arc::new(Inner {
                shared,
                listener: Mutex::new(Some(listener)),
            }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The address served (fixed for the server's life, restarts included).
    pub fn addr(&self) -> SocketAddr {
        self.shared().addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The mechanism served.
    pub fn mechanism(&self) -> Mechanism {
        self.shared().options.mechanism
    }

    /// A kubeconfig whose current context reaches this server as `user` (bearer token
    /// `user:USER`), default namespace `default`.
    pub fn kubeconfig_yaml(&self, user: &str) -> String {
        // Rendering plain strings cannot fail; an empty document would be rejected by any
        // client, so it is not a silent fallback.
        serde_yaml::to_string(&self.kubeconfig_value(user)).unwrap_or_default()
    }

    fn kubeconfig_value(&self, user: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "initguard-sim", "cluster": { "server": self.url() } }],
            "users": [{ "name": user, "user": { "token": format!("user:{user}") } }],
            "contexts": [{
                "name": "initguard-sim",
                "context": { "cluster": "initguard-sim", "user": user, "namespace": "default" },
            }],
            "current-context": "initguard-sim",
            "preferences": {},
        })
    }

    /// Write [`Sim::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path, user: &str) -> Result<(), SimError> {
        let text = serde_yaml::to_string(&self.kubeconfig_value(user))?;
        std::fs::write(path, text).map_err(|source| SimError::WriteKubeconfig {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A kube-rs configuration reaching this server as `user` (kube's defaults otherwise,
    /// including its retry of 429/503/504 — set `default_retry = false` to see those raw).
    pub fn kube_config(&self, user: &str) -> kube::Config {
        let uri = http::Uri::builder()
            .scheme("http")
            .authority(self.addr().to_string())
            .path_and_query("/")
            .build()
            .expect("a socket address is always a valid URI authority");
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".to_string();
        config.auth_info.token = Some(format!("user:{user}").into());
        config
    }

    /// A plain kube-rs client for `user` (without the `includeUninitialized` layer; use
    /// `initguard::client::build(sim.kube_config(user), mechanism)` where legacy visibility
    /// matters). Call it inside a Tokio runtime, as kube clients spawn a task.
    pub fn client(&self, user: &str) -> kube::Client {
        let config = self.kube_config(user);
        match kube::Client::try_from(config.clone()) {
            Ok(c) => c,
            Err(e) => {
                // Only the TLS stack can fail here, and plain HTTP does not need it.
                tracing::warn!(error = %e, "kube client builder failed; using a bare HTTP client");
                plain_client(&config, user)
            }
        }
    }

    /// Fault injection switches.
    pub fn faults(&self) -> &Faults {
        &self.shared().faults
    }

    /// Requests answered so far (bounded by `request_log_limit`), oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared().requests()
    }

    /// Requests answered since the last take (or start), removed from the log at once: a
    /// request answered meanwhile is in this answer or the next, never lost.
    pub fn take_requests(&self) -> Vec<RequestRecord> {
        self.shared().take_requests()
    }

    /// Forget logged requests and counts.
    pub fn clear_requests(&self) {
        self.shared().clear_requests()
    }

    /// Requests answered by (verb, resource), e.g. `("patch", "pods")`.
    pub fn counts(&self) -> BTreeMap<(String, String), u64> {
        self.shared().counts()
    }

    /// Every committed change (bounded by `change_log_limit`), in resourceVersion order.
    pub fn object_history(&self) -> Vec<ObjectChange> {
        let changes = self.shared().store().changes();
        changes
            .into_iter()
            .map(|c| {
                let res = c.storage.canonical();
                let deleted = c.change_type == ChangeType::Deleted;
                ObjectChange {
                    resource_version: c.rv,
                    resource: res.plural.to_string(),
                    kind: res.kind.to_string(),
                    namespace: (!c.namespace.is_empty()).then(|| c.namespace.clone()),
                    name: c.name.clone(),
                    uid: c.object["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    change_type: c.change_type,
                    user: c.user.clone(),
                    time: c.time,
                    before: c.prev.clone(),
                    after: (!deleted).then(|| c.object.clone()),
                }
            })
            .collect()
    }

    /// The stored object (uninitialized ones included), in its stored form. `resource` is a
    /// plural (`pods`, `deployments`, `leases`, `events`, `namespaces`).
    pub fn get_object(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let res = resources::by_plural(resource)?;
        self.shared()
            .store()
            .get(res.storage, namespace.unwrap_or_default(), name)
            .map(|o| (**o).clone())
    }

    /// Every stored object of a resource, ordered by namespace and name.
    pub fn list_objects(&self, resource: &str) -> Vec<Value> {
        let Some(res) = resources::by_plural(resource) else {
            return Vec::new();
        };
        self.shared()
            .store()
            .scan(res.storage, None, None)
            .map(|(_, o)| (**o).clone())
            .collect()
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared().store().rv()
    }

    /// Replace the legacy initializers appended to new pods.
    pub fn set_legacy_initializers(&self, names: Vec<String>) {
        self.shared().set_legacy_initializers(names)
    }

    /// Enforce RBAC for `user`: only requests `rules` allow (cluster-wide) are served, others
    /// get 403. Other users are unaffected.
    pub fn enforce_rbac(&self, user: &str, rules: Vec<PolicyRule>) {
        self.shared()
            .set_rbac(user, Some(Rbac::cluster_wide(rules)));
    }

    /// Enforce RBAC for `user` with grants loaded by [`Rbac::from_yaml_str`].
    pub fn enforce_rbac_policy(&self, user: &str, rbac: Rbac) {
        self.shared().set_rbac(user, Some(rbac));
    }

    /// Stop enforcing RBAC for `user`.
    pub fn stop_enforcing_rbac(&self, user: &str) {
        self.shared().set_rbac(user, None);
    }

    /// Cut every connection (watches included), close the socket and listen again on the
    /// same port; stored state is kept.
    pub async fn restart(&self) -> Result<(), SimError> {
        self.restart_after(Duration::ZERO).await
    }

    /// Like [`Sim::restart`], staying unreachable for `downtime` first.
    pub async fn restart_after(&self, downtime: Duration) -> Result<(), SimError> {
        let old = self
            .inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(l) = old {
            l.stop().await;
        }
        tokio::time::sleep(downtime).await;
        let addr = self.addr();
        let mut attempt = 0;
        let listener = loop {
            match TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) if attempt < 50 && e.kind() == std::io::ErrorKind::AddrInUse => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(source) => return Err(SimError::Bind { addr, source }),
            }
        };
        let new = Listener::spawn(listener, self.shared().clone());
        *self
            .inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(new);
        Ok(())
    }

    /// Stop serving and cut every connection.
    pub async fn shutdown(&self) {
        let old = self
            .inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(l) = old {
            l.stop().await;
        }
    }
}

/// A kube client over bare HTTP with a static bearer token (no TLS stack needed).
fn plain_client(config: &kube::Config, user: &str) -> kube::Client {
    use hyper_util::client::legacy::Client as HyperClient;
    use hyper_util::rt::TokioExecutor;
    use kube::client::ConfigExt;
    use tower::ServiceBuilder;

    let token = http::HeaderValue::from_str(&format!("Bearer user:{user}")).ok();
    let http = HyperClient::builder(TokioExecutor::new()).build_http::<kube::client::Body>();
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .map_request(move |mut req: http::Request<kube::client::Body>| {
            if let Some(t) = &token {
                req.headers_mut()
                    .insert(http::header::AUTHORIZATION, t.clone());
            }
            req
        })
        .service(http);
    kube::Client::new(service, config.default_namespace.clone())
}
