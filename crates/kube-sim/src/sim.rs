//! A running simulated API server and its handle.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;

use kube_common::Mechanism;

use crate::error::SimError;
use crate::faults::Faults;
use crate::options::SimOptions;
use crate::rbac::{PolicyRule, Rbac};
use crate::record::{ObjectChange, RequestRecord};
use crate::resources;
use crate::server::Listener;
use crate::shared::ServerState;
use crate::store::ChangeType;

struct Inner {
    shared: Arc<ServerState>,
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
        let shared = Arc::new(ServerState::new(options, addr));
        let listener = Listener::spawn(listener, shared.clone());
        Ok(Sim {
            inner: Arc::new(Inner {
                shared,
                listener: Mutex::new(Some(listener)),
            }),
        })
    }

    fn shared(&self) -> &Arc<ServerState> {
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
    /// A simulated node agent outage for one init step: pods that start (are bound and run)
    /// from now on fail init container `container` for good with `exit`, sitting in
    /// `Init:CrashLoopBackOff`, as a CNI validator's pods do when the node agent was missing
    /// at sandbox creation; None ends it for pods started afterwards (stuck pods stay stuck).
    pub fn fail_init_container(&self, container: &str, exit: Option<i32>) {
        self.shared().fail_init_container(container, exit)
    }

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
        self.shutdown().await;
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
