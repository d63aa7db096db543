//! Simulated controllers that talk to the simulated API server only over HTTP, like real ones.
//!
//! * [`GateOwner`]: the controller behind one initializer (legacy initializer or scheduling
//!   gate). It removes only its own name, and is backed by a Deployment status, a Lease and
//!   optionally an owner pod, so every owner kind the guard knows can be observed. It can be
//!   killed and revived.
//! * [`Creator`]: Job-, ReplicaSet- and CronJob-like pod creators. The Job-like one retries a
//!   timed-out CREATE like the Kubernetes 1.7 Job controller did, which reproduces the pile of
//!   uninitialized pods of kubernetes/kubernetes#48893.
//! * [`pile_report`]: samples the pile from the server's store.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Debug;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSchedulingGate, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, MicroTime, ObjectMeta, OwnerReference,
};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use rand::Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use kube_common::Mechanism;

/// Errors starting a simulated controller.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The kube client could not be built from the given configuration.
    #[error("cannot build a client for simulated controller {controller}: {source}")]
    Client {
        controller: String,
        #[source]
        source: kube::Error,
    },
}

/// The label value creators put on pods for the opt-in label key.
pub const OPT_IN_VALUE: &str = "true";

/// Longest pause between retries of a failed request.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------------
// Lifecycle shared by every controller
// ---------------------------------------------------------------------------------------------

/// Alive/dead switch, tunable latency and stop signal of one controller.
struct Lifecycle {
    alive: watch::Sender<bool>,
    latency: watch::Sender<Duration>,
    cancel: CancellationToken,
}

impl Lifecycle {
    fn new(alive: bool, latency: Duration) -> Arc<Self> {
        Arc::new(Lifecycle {
            alive: watch::Sender::new(alive),
            latency: watch::Sender::new(latency),
            cancel: CancellationToken::new(),
        })
    }

    fn latency(&self) -> Duration {
        *self.latency.borrow()
    }

    /// Waits until the controller is in state `alive`; false when it is being stopped.
    async fn wait_until(&self, alive: bool) -> bool {
        let mut rx = self.alive.subscribe();
        tokio::select! {
            _ = self.cancel.cancelled() => false,
            res = rx.wait_for(|a| *a == alive) => res.is_ok(),
        }
    }

    /// Sleeps for `d`; false when the controller is being stopped meanwhile.
    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.cancel.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    /// Runs `work` while the controller is alive: it is dropped (all its requests and tasks
    /// with it) when the controller is killed and started afresh on revival, so a revived
    /// controller lists again and processes its backlog. Returns when stopped.
    async fn run_while_alive<F, Fut>(&self, mut work: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ()>,
    {
        loop {
            if !self.wait_until(true).await {
                return;
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.wait_until(false) => {}
                _ = work() => {
                    // The work ended on its own (a stream closed): start over after a pause.
                    if !self.sleep(Duration::from_millis(200)).await {
                        return;
                    }
                }
            }
        }
    }
}

/// Handle to a running simulated controller: kill, revive, tune, stop. Dropping the handle
/// stops the controller too.
pub struct ControllerHandle<S> {
    name: String,
    lifecycle: Arc<Lifecycle>,
    stats: Arc<S>,
    tasks: Vec<JoinHandle<()>>,
}

impl<S> ControllerHandle<S> {
    /// The controller's name (an initializer name, or `Kind/namespace/name` for creators).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops all work, like a crashed process: watches close, pending actions are dropped,
    /// heartbeats stop and the backing objects report it down.
    pub fn kill(&self) {
        self.lifecycle.alive.send_replace(false);
    }

    /// Starts working again: lists everything afresh and processes the backlog.
    pub fn revive(&self) {
        self.lifecycle.alive.send_replace(true);
    }

    /// Whether the controller is currently alive.
    pub fn is_alive(&self) -> bool {
        *self.lifecycle.alive.borrow()
    }

    /// How long the controller waits before acting on something it observed.
    pub fn set_latency(&self, latency: Duration) {
        self.lifecycle.latency.send_replace(latency);
    }

    /// The current latency.
    pub fn latency(&self) -> Duration {
        self.lifecycle.latency()
    }

    /// Counters of what the controller did.
    pub fn stats(&self) -> &S {
        &self.stats
    }

    /// A shared reference to the counters, usable after the handle is gone.
    pub fn stats_arc(&self) -> Arc<S> {
        Arc::clone(&self.stats)
    }

    /// Stops the controller and waits for its tasks to end.
    pub async fn stop(mut self) {
        self.lifecycle.cancel.cancel();
        for task in self.tasks.drain(..) {
            if let Err(e) = task.await
                && e.is_panic()
            {
                tracing::error!(controller = %self.name, "simulated controller task panicked");
            }
        }
    }
}

impl<S> Drop for ControllerHandle<S> {
    fn drop(&mut self) {
        self.lifecycle.cancel.cancel();
    }
}

impl<S> Debug for ControllerHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerHandle")
            .field("name", &self.name)
            .field("alive", &self.is_alive())
            .field("latency", &self.latency())
            .finish()
    }
}

fn backoff_after(failures: u32) -> Duration {
    let ms = 100u64.saturating_mul(1 << failures.min(5));
    Duration::from_millis(ms).min(MAX_RETRY_BACKOFF)
}

fn api_status(err: &kube::Error) -> Option<&kube::core::Status> {
    match err {
        kube::Error::Api(status) => Some(status),
        _ => None,
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    api_status(err).is_some_and(|s| s.is_not_found())
}

fn is_already_exists(err: &kube::Error) -> bool {
    api_status(err).is_some_and(|s| s.is_already_exists() || s.code == 409)
}

/// A write whose preconditions no longer hold: failed `test` (422; 500 "Testing value" on old
/// servers) or a stale update (409). The object changed: re-read and re-decide.
fn is_precondition_failure(err: &kube::Error) -> bool {
    api_status(err).is_some_and(|s| {
        s.code == 409 || s.code == 422 || (s.code == 500 && s.message.contains("Testing value"))
    })
}

/// A CREATE that the server gave up waiting on (legacy initializers: 504, reason Timeout).
/// The pod may well be stored.
fn is_create_timeout(err: &kube::Error) -> bool {
    api_status(err).is_some_and(|s| s.code == 504 || s.reason == "Timeout")
}

// ---------------------------------------------------------------------------------------------
// Pods as raw JSON
// ---------------------------------------------------------------------------------------------

/// A pod kept as raw JSON, so fields that k8s-openapi no longer models
/// (`metadata.initializers`) survive a round trip. Only `metadata` is parsed.
#[derive(Clone, Debug)]
pub struct JsonPod {
    metadata: ObjectMeta,
    raw: Value,
}

impl JsonPod {
    /// The whole object as the server sent it.
    pub fn raw(&self) -> &Value {
        &self.raw
    }
}

impl<'de> Deserialize<'de> for JsonPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        let metadata = match raw.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m).map_err(serde::de::Error::custom)?,
            None => ObjectMeta::default(),
        };
        Ok(JsonPod { metadata, raw })
    }
}

impl Serialize for JsonPod {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

impl Resource for JsonPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "pods".into()
    }
    /// The parsed metadata; `raw` is not updated by changes made through `meta_mut`.
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Names pending on a pod, in order: `spec.schedulingGates[].name` or
/// `metadata.initializers.pending[].name`.
pub fn pending_names(pod: &Value, mechanism: Mechanism) -> Vec<&str> {
    let list = match mechanism {
        Mechanism::SchedulingGates => pod.pointer("/spec/schedulingGates"),
        Mechanism::Initializers => pod.pointer("/metadata/initializers/pending"),
    };
    list.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// The JSON Patch a careful owner sends to remove its own `name` from `pod`: it tests the pod
/// UID and the name at its index, then removes that entry. None when there is nothing for
/// `name` to do: not pending, or (legacy) pending but not yet at the head of the list.
pub fn removal_patch(pod: &Value, mechanism: Mechanism, name: &str) -> Option<json_patch::Patch> {
    let uid = pod.pointer("/metadata/uid")?.as_str()?;
    let pending = pending_names(pod, mechanism);
    let (list, index) = match mechanism {
        Mechanism::SchedulingGates => (
            "/spec/schedulingGates",
            pending.iter().position(|n| *n == name)?,
        ),
        Mechanism::Initializers => {
            if pending.first() != Some(&name) {
                return None;
            }
            ("/metadata/initializers/pending", 0)
        }
    };
    let ops = json!([
        { "op": "test", "path": "/metadata/uid", "value": uid },
        { "op": "test", "path": format!("{list}/{index}/name"), "value": name },
        { "op": "remove", "path": format!("{list}/{index}") },
    ]);
    serde_json::from_value(ops).ok()
}

// ---------------------------------------------------------------------------------------------
// Gate / initializer owner
// ---------------------------------------------------------------------------------------------

/// Settings of one [`GateOwner`].
#[derive(Debug, Clone)]
pub struct GateOwnerOptions {
    /// The initializer (legacy initializer or scheduling gate name) this controller owns.
    pub initializer: String,
    pub mechanism: Mechanism,
    /// Namespace of the backing Deployment, Lease and owner pod.
    pub namespace: String,
    /// Deployment whose `status.availableReplicas` is 1 while alive, 0 while dead.
    pub deployment: Option<String>,
    /// Lease renewed while alive.
    pub lease: Option<String>,
    /// Labels of the one owner pod that is Ready while alive; empty: no owner pod.
    pub owner_pod_labels: BTreeMap<String, String>,
    /// Delay between observing a pod that waits on this initializer and removing it.
    pub latency: Duration,
    /// Whether the controller starts alive.
    pub alive: bool,
    /// `spec.leaseDurationSeconds` written on the Lease (whole seconds, at least 1).
    pub lease_duration: Duration,
    /// How often the Lease is renewed and the backing objects are checked.
    pub heartbeat: Duration,
}

impl GateOwnerOptions {
    /// Defaults for `initializer`: in `kube-system`, backed by a Deployment and a Lease named
    /// after the initializer, no owner pod, no latency, alive, 10 s lease renewed every second.
    pub fn new(initializer: impl Into<String>, mechanism: Mechanism) -> Self {
        let initializer = initializer.into();
        let object_name = dns_name(&initializer);
        GateOwnerOptions {
            initializer,
            mechanism,
            namespace: "kube-system".to_string(),
            deployment: Some(object_name.clone()),
            lease: Some(object_name),
            owner_pod_labels: BTreeMap::new(),
            latency: Duration::ZERO,
            alive: true,
            lease_duration: Duration::from_secs(10),
            heartbeat: Duration::from_secs(1),
        }
    }

    /// The name of the owner pod, if any.
    pub fn owner_pod_name(&self) -> Option<String> {
        if self.owner_pod_labels.is_empty() {
            return None;
        }
        let base = self
            .deployment
            .clone()
            .unwrap_or_else(|| dns_name(&self.initializer));
        Some(format!("{base}-0"))
    }
}

/// A valid object name derived from an initializer name (`kueue.x-k8s.io/admission` →
/// `kueue-x-k8s-io-admission`).
pub fn dns_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_matches('-');
    let mut s: String = trimmed.chars().take(63).collect();
    while s.ends_with('-') {
        s.pop();
    }
    if s.is_empty() { "owner".to_string() } else { s }
}

/// What a [`GateOwner`] has done.
#[derive(Debug, Default)]
pub struct OwnerStats {
    removed: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
}

impl OwnerStats {
    /// Own initializers removed from pods.
    pub fn removed(&self) -> u64 {
        self.removed.load(Ordering::Relaxed)
    }
    /// Removals whose `test` failed or that hit a conflict (then re-read).
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
    /// Requests that failed otherwise (retried with backoff).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// Handle of a running [`GateOwner`].
pub type GateOwnerHandle = ControllerHandle<OwnerStats>;

/// The controller behind one initializer.
pub struct GateOwner;

impl GateOwner {
    /// Starts the owner with its own client built from `config` (for legacy initializers the
    /// client adds `includeUninitialized=true`, as real initializer controllers did).
    pub fn start(
        config: kube::Config,
        opts: GateOwnerOptions,
    ) -> Result<GateOwnerHandle, ControllerError> {
        let client = crate::client_for(config, opts.mechanism).map_err(|source| {
            ControllerError::Client {
                controller: opts.initializer.clone(),
                source,
            }
        })?;
        let lifecycle = Lifecycle::new(opts.alive, opts.latency);
        let stats = Arc::new(OwnerStats::default());
        let opts = Arc::new(opts);
        let worker = tokio::spawn(owner_worker(
            client.clone(),
            Arc::clone(&opts),
            Arc::clone(&lifecycle),
            Arc::clone(&stats),
        ));
        let heartbeat = tokio::spawn(owner_heartbeat(
            client,
            Arc::clone(&opts),
            Arc::clone(&lifecycle),
        ));
        Ok(ControllerHandle {
            name: opts.initializer.clone(),
            lifecycle,
            stats,
            tasks: vec![worker, heartbeat],
        })
    }
}

async fn owner_worker(
    client: Client,
    opts: Arc<GateOwnerOptions>,
    life: Arc<Lifecycle>,
    stats: Arc<OwnerStats>,
) {
    life.run_while_alive(|| watch_and_remove(client.clone(), &opts, &life, &stats))
        .await;
}

/// Watches all pods and removes this owner's initializer from each pod that waits on it.
async fn watch_and_remove(
    client: Client,
    opts: &Arc<GateOwnerOptions>,
    life: &Arc<Lifecycle>,
    stats: &Arc<OwnerStats>,
) {
    let pods: Api<JsonPod> = Api::all(client.clone());
    let mut events = pin!(watcher(pods, watcher::Config::default()).default_backoff());
    // One removal task per pod UID at a time; the task re-reads the pod before writing.
    let mut in_flight: HashSet<String> = HashSet::new();
    let mut tasks: JoinSet<String> = JoinSet::new();
    loop {
        tokio::select! {
            event = events.next() => match event {
                None => return,
                Some(Err(e)) => {
                    tracing::debug!(initializer = %opts.initializer, error = %e, "pod watch failed; retrying");
                }
                Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                    if removal_patch(pod.raw(), opts.mechanism, &opts.initializer).is_none() {
                        continue;
                    }
                    let (Some(uid), Some(ns)) = (pod.uid(), pod.namespace()) else { continue };
                    if in_flight.insert(uid.clone()) {
                        tasks.spawn(remove_own(
                            client.clone(),
                            Arc::clone(opts),
                            Arc::clone(life),
                            Arc::clone(stats),
                            ns,
                            pod.name_any(),
                            uid,
                        ));
                    }
                }
                Some(Ok(_)) => {}
            },
            Some(done) = tasks.join_next(), if !tasks.is_empty() => match done {
                Ok(uid) => { in_flight.remove(&uid); }
                Err(e) => tracing::error!(initializer = %opts.initializer, error = %e, "removal task failed"),
            },
        }
    }
}

/// After the owner's latency, removes its initializer from one pod, re-reading and re-deciding
/// whenever the pod changed underneath. Returns the pod UID.
async fn remove_own(
    client: Client,
    opts: Arc<GateOwnerOptions>,
    life: Arc<Lifecycle>,
    stats: Arc<OwnerStats>,
    namespace: String,
    name: String,
    uid: String,
) -> String {
    tokio::time::sleep(life.latency()).await;
    let pods: Api<JsonPod> = Api::namespaced(client, &namespace);
    let mut failures = 0u32;
    loop {
        let pod = match pods.get_opt(&name).await {
            Ok(Some(pod)) => pod,
            Ok(None) => return uid,
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(initializer = %opts.initializer, pod = %name, error = %e, "cannot read pod");
                failures += 1;
                tokio::time::sleep(backoff_after(failures)).await;
                continue;
            }
        };
        if pod.uid().as_deref() != Some(uid.as_str()) {
            return uid;
        }
        let Some(patch) = removal_patch(pod.raw(), opts.mechanism, &opts.initializer) else {
            return uid;
        };
        match pods
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => {
                stats.removed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(initializer = %opts.initializer, pod = %format!("{namespace}/{name}"), "initializer removed by its owner");
                return uid;
            }
            Err(e) if is_precondition_failure(&e) => {
                stats.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if is_not_found(&e) => return uid,
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(initializer = %opts.initializer, pod = %name, error = %e, "cannot remove initializer");
                failures += 1;
                tokio::time::sleep(backoff_after(failures)).await;
            }
        }
    }
}

/// Keeps the backing objects in line with the owner's state: Deployment status and owner pod
/// readiness follow alive/dead, and the Lease is renewed only while alive.
async fn owner_heartbeat(client: Client, opts: Arc<GateOwnerOptions>, life: Arc<Lifecycle>) {
    let mut alive_rx = life.alive.subscribe();
    let mut backing = Backing::new(client, &opts);
    loop {
        let alive = *alive_rx.borrow_and_update();
        tokio::select! {
            _ = life.cancel.cancelled() => return,
            _ = backing.reconcile(alive) => {}
        }
        tokio::select! {
            _ = life.cancel.cancelled() => return,
            changed = alive_rx.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(opts.heartbeat) => {}
        }
    }
}

/// The Deployment, Lease and owner pod behind one owner, with what was last written so a
/// steady state costs one Lease renewal per heartbeat.
struct Backing {
    opts: Arc<GateOwnerOptions>,
    holder: String,
    client: Client,
    /// The Deployment API in the group version the server serves (apps/v1 … extensions/v1beta1),
    /// found by discovery at the first write, as a controller built for that version would.
    deployments: Option<(Api<DynamicObject>, String)>,
    leases: Api<Lease>,
    pods: Api<Pod>,
    /// `Some(up)` once the Deployment status says `up`.
    deployment_written: Option<bool>,
    /// The Lease is known to exist (renewed by this owner, or left expired).
    lease_present: bool,
    /// `Some(ready)` once the owner pod's Ready condition says `ready`.
    pod_written: Option<bool>,
    /// A CREATE of the owner pod in flight (legacy initializers can block it).
    pod_create: Option<JoinHandle<Result<(), kube::Error>>>,
}

impl Drop for Backing {
    fn drop(&mut self) {
        if let Some(create) = &self.pod_create {
            create.abort();
        }
    }
}

impl Backing {
    fn new(client: Client, opts: &Arc<GateOwnerOptions>) -> Self {
        let suffix = random_suffix();
        Backing {
            opts: Arc::clone(opts),
            holder: format!("{}-{suffix}", dns_name(&opts.initializer)),
            client: client.clone(),
            deployments: None,
            leases: Api::namespaced(client.clone(), &opts.namespace),
            pods: Api::namespaced(client, &opts.namespace),
            deployment_written: None,
            lease_present: false,
            pod_written: None,
            pod_create: None,
        }
    }

    async fn reconcile(&mut self, alive: bool) {
        let opts = Arc::clone(&self.opts);
        if let Some(name) = &opts.deployment
            && self.deployment_written != Some(alive)
        {
            match self.write_deployment(name, alive).await {
                Ok(()) => self.deployment_written = Some(alive),
                Err(e) => {
                    tracing::debug!(initializer = %opts.initializer, error = %e, "cannot update owner deployment");
                }
            }
        }
        if let Some(name) = &opts.lease {
            if alive {
                match self.renew_lease(name).await {
                    Ok(()) => self.lease_present = true,
                    Err(e) => {
                        tracing::debug!(initializer = %opts.initializer, error = %e, "cannot renew owner lease");
                    }
                }
            } else if !self.lease_present {
                match self.ensure_expired_lease(name).await {
                    Ok(()) => self.lease_present = true,
                    Err(e) => {
                        tracing::debug!(initializer = %opts.initializer, error = %e, "cannot create owner lease");
                    }
                }
            }
        }
        if let Some(name) = opts.owner_pod_name() {
            self.reconcile_owner_pod(&name, alive).await;
        }
    }

    async fn write_deployment(&mut self, name: &str, alive: bool) -> Result<(), kube::Error> {
        if self.deployments.is_none() {
            let surface = kube_common::ApiSurface::read(&self.client).await?;
            let Some(resource) = surface.deployments() else {
                return Err(kube::Error::Discovery(
                    kube::error::DiscoveryError::MissingResource("deployments".to_owned()),
                ));
            };
            self.deployments = Some((
                Api::namespaced_with(self.client.clone(), &self.opts.namespace, &resource),
                resource.api_version,
            ));
        }
        let Some((deployments, api_version)) = &self.deployments else {
            return Ok(());
        };
        if deployments.get_opt(name).await?.is_none() {
            let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
            let deployment = Deployment {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(self.opts.namespace.clone()),
                    labels: Some(labels.clone()),
                    ..Default::default()
                },
                spec: Some(DeploymentSpec {
                    replicas: Some(1),
                    selector: LabelSelector {
                        match_labels: Some(labels.clone()),
                        ..Default::default()
                    },
                    template: pod_template(labels, &[]),
                    ..Default::default()
                }),
                status: None,
            };
            let mut object: DynamicObject = serde_json::from_value(
                serde_json::to_value(&deployment).map_err(kube::Error::SerdeError)?,
            )
            .map_err(kube::Error::SerdeError)?;
            if let Some(types) = &mut object.types {
                types.api_version.clone_from(api_version);
            }
            match deployments.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                Err(e) if is_already_exists(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let n = i32::from(alive);
        let status = json!({ "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": n,
            "availableReplicas": n,
            "unavailableReplicas": 1 - n,
        }});
        deployments
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.opts.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    async fn renew_lease(&self, name: &str) -> Result<(), kube::Error> {
        let now = k8s_openapi::jiff::Timestamp::now();
        let patch = json!({ "spec": {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_seconds(),
            "renewTime": MicroTime(now),
        }});
        match self
            .leases
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => self.create_lease(name, now).await,
            Err(e) => Err(e),
        }
    }

    /// A dead owner's Lease as the crashed process left it: renewed long enough ago to have
    /// expired. Created only when missing, so that an owner that starts dead is seen down
    /// rather than never seen.
    async fn ensure_expired_lease(&self, name: &str) -> Result<(), kube::Error> {
        if self.leases.get_opt(name).await?.is_some() {
            return Ok(());
        }
        let expired = self.opts.lease_duration.max(Duration::from_secs(1)) * 2;
        let renewed = k8s_openapi::jiff::Timestamp::now()
            .checked_sub(expired)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        self.create_lease(name, renewed).await
    }

    async fn create_lease(
        &self,
        name: &str,
        renewed: k8s_openapi::jiff::Timestamp,
    ) -> Result<(), kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.opts.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.holder.clone()),
                lease_duration_seconds: Some(self.lease_seconds()),
                acquire_time: Some(MicroTime(renewed)),
                renew_time: Some(MicroTime(renewed)),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        match self.leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(e) if is_already_exists(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn reconcile_owner_pod(&mut self, name: &str, alive: bool) {
        if let Some(create) = &self.pod_create {
            if !create.is_finished() {
                return;
            }
            if let Some(create) = self.pod_create.take()
                && let Ok(Err(e)) = create.await
                && !is_already_exists(&e)
                && !is_create_timeout(&e)
            {
                tracing::debug!(initializer = %self.opts.initializer, error = %e, "cannot create owner pod");
            }
        }
        if self.pod_written == Some(alive) {
            return;
        }
        match self.pods.get_opt(name).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                // Created in the background: under legacy initializers the CREATE blocks until
                // the pod is initialized (the owner's chicken-and-egg), which must not stall
                // the heartbeat.
                let pods = self.pods.clone();
                let pod = Pod {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(self.opts.namespace.clone()),
                        labels: Some(self.opts.owner_pod_labels.clone()),
                        ..Default::default()
                    },
                    spec: pod_template(BTreeMap::new(), &[]).spec,
                    status: None,
                };
                self.pod_create = Some(tokio::spawn(async move {
                    pods.create(&PostParams::default(), &pod).await.map(|_| ())
                }));
                return;
            }
            Err(e) => {
                tracing::debug!(initializer = %self.opts.initializer, error = %e, "cannot read owner pod");
                return;
            }
        }
        let ready = if alive { "True" } else { "False" };
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let condition = |kind: &str, status: &str| json!({ "type": kind, "status": status, "lastTransitionTime": now });
        let status = json!({ "status": {
            "phase": "Running",
            "conditions": [
                condition("PodScheduled", "True"),
                condition("Initialized", "True"),
                condition("ContainersReady", ready),
                condition("Ready", ready),
            ],
        }});
        match self
            .pods
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            Ok(_) => self.pod_written = Some(alive),
            Err(e) => {
                tracing::debug!(initializer = %self.opts.initializer, error = %e, "cannot update owner pod readiness");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pod creators
// ---------------------------------------------------------------------------------------------

/// Which kind of workload controller a [`Creator`] imitates.
#[derive(Debug, Clone, PartialEq)]
pub enum CreatorKind {
    /// Kubernetes 1.7 Job controller: keeps `parallelism` active pods; a failed or timed-out
    /// CREATE is retried after `retry_backoff`, although the timed-out pod stays stored.
    Job {
        parallelism: u32,
        retry_backoff: Duration,
    },
    /// ReplicaSet controller with expectations: a CREATE is expected to show up; no new
    /// CREATE for it until the pod is observed or the expectation expires.
    ReplicaSet {
        replicas: u32,
        expectation_ttl: Duration,
    },
    /// CronJob: one new Job every `period`, whatever happened to the earlier ones, and one
    /// pod owned by that Job (controller chain pod → Job → CronJob, as on a real cluster).
    CronJob { period: Duration },
}

impl CreatorKind {
    /// `Job`, `ReplicaSet` or `CronJob`.
    pub fn kind(&self) -> &'static str {
        match self {
            CreatorKind::Job { .. } => "Job",
            CreatorKind::ReplicaSet { .. } => "ReplicaSet",
            CreatorKind::CronJob { .. } => "CronJob",
        }
    }

    fn api_version(&self) -> &'static str {
        match self {
            CreatorKind::ReplicaSet { .. } => "apps/v1",
            CreatorKind::Job { .. } | CreatorKind::CronJob { .. } => "batch/v1",
        }
    }
}

/// Settings of one [`Creator`].
#[derive(Debug, Clone)]
pub struct CreatorOptions {
    pub kind: CreatorKind,
    pub namespace: String,
    /// Name of the Job, ReplicaSet or CronJob that owns the pods.
    pub name: String,
    /// Scheduling gates put on every new pod (scheduling-gates mode; legacy initializers come
    /// from the server).
    pub gates: Vec<String>,
    /// Label key set (to [`OPT_IN_VALUE`]) on every new pod, opting it in to the guard.
    pub opt_in_label: Option<String>,
    /// How often Job- and ReplicaSet-like creators compare wanted and visible pods.
    pub sync_period: Duration,
    /// Whether the creator starts alive.
    pub alive: bool,
}

impl CreatorOptions {
    fn with_kind(kind: CreatorKind, namespace: &str, name: &str) -> Self {
        CreatorOptions {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            gates: Vec::new(),
            opt_in_label: None,
            sync_period: Duration::from_millis(250),
            alive: true,
        }
    }

    /// A Job-like creator keeping `parallelism` pods, retrying failed creates after 500 ms.
    pub fn job(namespace: &str, name: &str, parallelism: u32) -> Self {
        Self::with_kind(
            CreatorKind::Job {
                parallelism,
                retry_backoff: Duration::from_millis(500),
            },
            namespace,
            name,
        )
    }

    /// A ReplicaSet-like creator whose expectations expire after 35 s (the 30 s create
    /// timeout plus 5 s).
    pub fn replica_set(namespace: &str, name: &str, replicas: u32) -> Self {
        Self::with_kind(
            CreatorKind::ReplicaSet {
                replicas,
                expectation_ttl: Duration::from_secs(35),
            },
            namespace,
            name,
        )
    }

    /// A CronJob-like creator making one pod every `period`.
    pub fn cron_job(namespace: &str, name: &str, period: Duration) -> Self {
        Self::with_kind(CreatorKind::CronJob { period }, namespace, name)
    }

    /// `Kind/namespace/name`, the key used in [`PileReport::per_controller`].
    pub fn controller_key(&self) -> String {
        format!("{}/{}/{}", self.kind.kind(), self.namespace, self.name)
    }

    /// The label key naming the controller on its pods (`job-name` as the Job controller sets).
    fn selector_key(&self) -> &'static str {
        match self.kind {
            CreatorKind::Job { .. } => "job-name",
            CreatorKind::ReplicaSet { .. } => "replicaset-name",
            CreatorKind::CronJob { .. } => "cronjob-name",
        }
    }

    /// Labels of every pod this creator makes.
    fn pod_labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(self.selector_key().to_string(), self.name.clone())]);
        if let Some(key) = &self.opt_in_label {
            labels.insert(key.clone(), OPT_IN_VALUE.to_string());
        }
        labels
    }

    /// The controller reference every pod of this creator carries. The simulated server does
    /// not serve Jobs, ReplicaSets or CronJobs, so the UID is derived from the key: stable across
    /// runs, distinct per controller.
    pub fn controller_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.kind.api_version().to_string(),
            kind: self.kind.kind().to_string(),
            name: self.name.clone(),
            uid: stable_uid(&self.controller_key()),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// The label selector the creator counts its pods with.
    fn selector(&self) -> String {
        format!("{}={}", self.selector_key(), self.name)
    }
}

/// What a [`Creator`] has done and sees.
#[derive(Debug, Default)]
pub struct CreatorStats {
    creates_issued: AtomicU64,
    create_timeouts: AtomicU64,
    create_failures: AtomicU64,
    visible_pods: AtomicU64,
}

impl CreatorStats {
    /// Pod CREATE requests sent.
    pub fn creates_issued(&self) -> u64 {
        self.creates_issued.load(Ordering::Relaxed)
    }
    /// CREATEs that ended in a server timeout (504): the pod is stored but was not seen.
    pub fn create_timeouts(&self) -> u64 {
        self.create_timeouts.load(Ordering::Relaxed)
    }
    /// CREATEs that failed otherwise.
    pub fn create_failures(&self) -> u64 {
        self.create_failures.load(Ordering::Relaxed)
    }
    /// Active pods the creator saw on its last sync, through an ordinary client (which does
    /// not show uninitialized pods).
    pub fn visible_pods(&self) -> u64 {
        self.visible_pods.load(Ordering::Relaxed)
    }
}

/// Handle of a running [`Creator`].
pub type CreatorHandle = ControllerHandle<CreatorStats>;

/// A Job-, ReplicaSet- or CronJob-like pod creator.
pub struct Creator;

impl Creator {
    /// Starts the creator with an ordinary client built from `config`.
    pub fn start(
        config: kube::Config,
        opts: CreatorOptions,
    ) -> Result<CreatorHandle, ControllerError> {
        let name = opts.controller_key();
        // Like client-go, a CREATE is not retried: the creator must see the 504 itself.
        let mut config = config;
        config.default_retry = false;
        let client = Client::try_from(config).map_err(|source| ControllerError::Client {
            controller: name.clone(),
            source,
        })?;
        let lifecycle = Lifecycle::new(opts.alive, Duration::ZERO);
        let stats = Arc::new(CreatorStats::default());
        let task = tokio::spawn(creator_main(
            client,
            Arc::new(opts),
            Arc::clone(&lifecycle),
            Arc::clone(&stats),
        ));
        Ok(ControllerHandle {
            name,
            lifecycle,
            stats,
            tasks: vec![task],
        })
    }
}

async fn creator_main(
    client: Client,
    opts: Arc<CreatorOptions>,
    life: Arc<Lifecycle>,
    stats: Arc<CreatorStats>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &opts.namespace);
    let jobs: Api<Job> = Api::namespaced(client, &opts.namespace);
    let ctx = CreatorCtx {
        pods,
        jobs,
        owner: opts.controller_ref(),
        opts,
        stats,
    };
    match ctx.opts.kind.clone() {
        CreatorKind::Job {
            parallelism,
            retry_backoff,
        } => {
            life.run_while_alive(|| ctx.run_job(&life, parallelism, retry_backoff))
                .await
        }
        CreatorKind::ReplicaSet {
            replicas,
            expectation_ttl,
        } => {
            life.run_while_alive(|| ctx.run_replica_set(&life, replicas, expectation_ttl))
                .await
        }
        CreatorKind::CronJob { period } => {
            life.run_while_alive(|| ctx.run_cron_job(&life, period))
                .await
        }
    }
}

/// A UID in the usual 8-4-4-4-12 form, derived from `key` so it is the same on every run
/// (FNV-1a, two differently seeded 64-bit halves).
pub fn stable_uid(key: &str) -> String {
    fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
        bytes.iter().fold(seed, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }
    let hi = fnv1a(0xcbf2_9ce4_8422_2325, key.as_bytes());
    let lo = fnv1a(0x8422_2325_cbf2_9ce4, key.as_bytes());
    let hex = format!("{hi:016x}{lo:016x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A minimal pod template: one `pause` container, these labels and scheduling gates.
fn pod_template(labels: BTreeMap<String, String>, gates: &[String]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: (!labels.is_empty()).then_some(labels),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".to_string(),
                image: Some("registry.k8s.io/pause:3.10".to_string()),
                ..Default::default()
            }],
            restart_policy: Some("Never".to_string()),
            scheduling_gates: (!gates.is_empty()).then(|| {
                gates
                    .iter()
                    .map(|name| PodSchedulingGate { name: name.clone() })
                    .collect()
            }),
            ..Default::default()
        }),
    }
}

/// Kubernetes' generateName alphabet: no vowels, no look-alike digits.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

struct CreatorCtx {
    pods: Api<Pod>,
    jobs: Api<Job>,
    opts: Arc<CreatorOptions>,
    owner: OwnerReference,
    stats: Arc<CreatorStats>,
}

/// How one CREATE ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreateOutcome {
    Created,
    /// The server gave up waiting for initialization (504); the pod is stored, unseen.
    TimedOut,
    Failed,
}

impl CreatorCtx {
    fn new_pod(&self) -> Pod {
        self.new_pod_of(&self.opts.name, self.owner.clone())
    }

    /// A pod named after `prefix`, controlled by `owner`.
    fn new_pod_of(&self, prefix: &str, owner: OwnerReference) -> Pod {
        let name = format!("{prefix}-{}", random_suffix());
        let template = pod_template(self.opts.pod_labels(), &self.opts.gates);
        let mut metadata = template.metadata.unwrap_or_default();
        metadata.name = Some(name);
        metadata.namespace = Some(self.opts.namespace.clone());
        metadata.owner_references = Some(vec![owner]);
        Pod {
            metadata,
            spec: template.spec,
            status: None,
        }
    }

    async fn create(
        pods: Api<Pod>,
        pod: Pod,
        stats: Arc<CreatorStats>,
        key: String,
    ) -> CreateOutcome {
        stats.creates_issued.fetch_add(1, Ordering::Relaxed);
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => CreateOutcome::Created,
            Err(e) if is_create_timeout(&e) => {
                stats.create_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(controller = %key, pod = %pod.name_any(), "pod create timed out");
                CreateOutcome::TimedOut
            }
            Err(e) => {
                stats.create_failures.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(controller = %key, pod = %pod.name_any(), error = %e, "pod create failed");
                CreateOutcome::Failed
            }
        }
    }

    /// Names of the active pods this creator's ordinary client can see.
    async fn visible(&self) -> Result<BTreeSet<String>, kube::Error> {
        let list = self
            .pods
            .list(&ListParams::default().labels(&self.opts.selector()))
            .await?;
        let names: BTreeSet<String> = list
            .items
            .iter()
            .filter(|p| is_active(p) && is_controlled_by(p, &self.owner.uid))
            .map(|p| p.name_any())
            .collect();
        self.stats
            .visible_pods
            .store(names.len() as u64, Ordering::Relaxed);
        Ok(names)
    }

    /// The 1.7 Job controller: create the missing pods, wait for every CREATE, and on any
    /// failure (a 504 included) requeue after a short backoff and count again. Pods whose
    /// CREATE timed out are invisible to it, so it creates them again and again.
    async fn run_job(&self, life: &Lifecycle, parallelism: u32, retry_backoff: Duration) {
        let mut list_failures = 0u32;
        loop {
            let visible = match self.visible().await {
                Ok(v) => {
                    list_failures = 0;
                    v
                }
                Err(e) => {
                    list_failures += 1;
                    tracing::debug!(controller = %self.opts.controller_key(), error = %e, "cannot list pods");
                    tokio::time::sleep(backoff_after(list_failures)).await;
                    continue;
                }
            };
            let missing = (parallelism as usize).saturating_sub(visible.len());
            if missing == 0 {
                tokio::time::sleep(self.opts.sync_period).await;
                continue;
            }
            tokio::time::sleep(life.latency()).await;
            let mut creates = JoinSet::new();
            for _ in 0..missing {
                creates.spawn(Self::create(
                    self.pods.clone(),
                    self.new_pod(),
                    Arc::clone(&self.stats),
                    self.opts.controller_key(),
                ));
            }
            let outcomes = creates.join_all().await;
            if outcomes.iter().any(|o| *o != CreateOutcome::Created) {
                tokio::time::sleep(retry_backoff).await;
            }
        }
    }

    /// The ReplicaSet controller with expectations: every CREATE is expected to show up; a
    /// timed-out one stays expected until it is observed or `ttl` passes, then it is forgotten
    /// and the pod created again.
    async fn run_replica_set(&self, life: &Lifecycle, replicas: u32, ttl: Duration) {
        // Pod name → when the expectation lapses.
        let mut expected: BTreeMap<String, Instant> = BTreeMap::new();
        let mut list_failures = 0u32;
        loop {
            let visible = match self.visible().await {
                Ok(v) => {
                    list_failures = 0;
                    v
                }
                Err(e) => {
                    list_failures += 1;
                    tracing::debug!(controller = %self.opts.controller_key(), error = %e, "cannot list pods");
                    tokio::time::sleep(backoff_after(list_failures)).await;
                    continue;
                }
            };
            let now = Instant::now();
            expected.retain(|name, until| !visible.contains(name) && *until > now);
            let missing = (replicas as usize).saturating_sub(visible.len() + expected.len());
            if missing == 0 {
                tokio::time::sleep(self.opts.sync_period).await;
                continue;
            }
            tokio::time::sleep(life.latency()).await;
            let mut creates = JoinSet::new();
            for _ in 0..missing {
                let pod = self.new_pod();
                let name = pod.name_any();
                expected.insert(name.clone(), Instant::now() + ttl);
                let create = Self::create(
                    self.pods.clone(),
                    pod,
                    Arc::clone(&self.stats),
                    self.opts.controller_key(),
                );
                creates.spawn(async move { (name, create.await) });
            }
            for (name, outcome) in creates.join_all().await {
                // A definite failure stored nothing: stop expecting it. A timeout may have
                // stored the pod: keep expecting it until the TTL.
                if outcome == CreateOutcome::Failed {
                    expected.remove(&name);
                }
            }
            tokio::time::sleep(self.opts.sync_period).await;
        }
    }

    /// The CronJob: one pod per period, regardless of earlier runs. CREATEs run in the
    /// background so one blocked by legacy initializers does not delay the schedule.
    async fn run_cron_job(&self, life: &Lifecycle, period: Duration) {
        let mut ticker = tokio::time::interval(period.max(Duration::from_millis(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut creates = JoinSet::new();
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    tokio::time::sleep(life.latency()).await;
                    // The Job first: its pod's controller reference needs the Job's uid.
                    let job = match self.create_job().await {
                        Ok(job) => job,
                        Err(e) => {
                            self.stats.create_failures.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(controller = %self.opts.controller_key(), error = %e, "Job create failed");
                            continue;
                        }
                    };
                    let pods = self.pods.clone();
                    let pod = self.new_pod_of(&job.name, job.reference);
                    let stats = Arc::clone(&self.stats);
                    let key = self.opts.controller_key();
                    creates.spawn(Self::create(pods, pod, stats, key));
                }
                Some(_) = creates.join_next(), if !creates.is_empty() => {}
            }
        }
    }
}

/// A Job the CronJob-like creator made.
struct CreatedJob {
    name: String,
    /// The controller reference its pod carries.
    reference: OwnerReference,
}

impl CreatorCtx {
    /// Create the next Job of the CronJob (controlled by it; the simulated server runs no Job
    /// controller, the creator makes the Job's pod itself).
    async fn create_job(&self) -> Result<CreatedJob, kube::Error> {
        let name = format!("{}-{}", self.opts.name, random_suffix());
        let job = Job {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(self.opts.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    self.opts.selector_key().to_string(),
                    self.opts.name.clone(),
                )])),
                owner_references: Some(vec![self.owner.clone()]),
                ..Default::default()
            },
            spec: None,
            status: None,
        };
        let job = self.jobs.create(&PostParams::default(), &job).await?;
        let name = job.name_any();
        Ok(CreatedJob {
            reference: OwnerReference {
                api_version: "batch/v1".to_string(),
                kind: "Job".to_string(),
                name: name.clone(),
                uid: job.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            name,
        })
    }
}

fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn is_controlled_by(pod: &Pod, uid: &str) -> bool {
    pod.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

// ---------------------------------------------------------------------------------------------
// The pile
// ---------------------------------------------------------------------------------------------

/// A sample of the pods that wait on initializers, grouped by controlling owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PileReport {
    /// Stored pods with at least one pending initializer (uninitialized ones included).
    pub stored_waiting_pods: usize,
    /// `Kind/namespace/name` of the controlling owner → its waiting pods (pods without a
    /// controller are not part of any pile).
    pub per_controller: BTreeMap<String, usize>,
    /// The most waiting pods sharing one controller.
    pub largest_pile: usize,
    /// Controllers with waiting pods but no Running pod: their work is not being done.
    pub controllers_without_running_pod: Vec<String>,
}

/// Samples the pile from the server's store.
/// Pods of a Job controlled by a CronJob count toward the CronJob's pile.
pub fn pile_report(sim: &kube_sim::Sim, mechanism: Mechanism) -> PileReport {
    let jobs: BTreeMap<String, String> = sim
        .list_objects("jobs")
        .iter()
        .filter_map(|job| {
            let uid = job.pointer("/metadata/uid")?.as_str()?;
            let key = controller_key(job).filter(|k| k.starts_with("CronJob/"))?;
            Some((uid.to_string(), key))
        })
        .collect();
    pile_report_with(sim.list_objects("pods"), &jobs, mechanism)
}

/// [`pile_report`] over any set of pod objects (raw JSON, as stored).
pub fn pile_report_from<I>(pods: I, mechanism: Mechanism) -> PileReport
where
    I: IntoIterator,
    I::Item: std::borrow::Borrow<Value>,
{
    pile_report_with(pods, &BTreeMap::new(), mechanism)
}

/// [`pile_report_from`], counting the pods of the Jobs in `cron_jobs` (Job uid → CronJob key)
/// toward their CronJob.
fn pile_report_with<I>(
    pods: I,
    cron_jobs: &BTreeMap<String, String>,
    mechanism: Mechanism,
) -> PileReport
where
    I: IntoIterator,
    I::Item: std::borrow::Borrow<Value>,
{
    let mut report = PileReport::default();
    let mut running: BTreeSet<String> = BTreeSet::new();
    for pod in pods {
        let pod: &Value = pod.borrow();
        let waiting = !pending_names(pod, mechanism).is_empty();
        let controller = controller_uid(pod)
            .and_then(|uid| cron_jobs.get(uid).cloned())
            .or_else(|| controller_key(pod));
        if waiting {
            report.stored_waiting_pods += 1;
            if let Some(key) = &controller {
                *report.per_controller.entry(key.clone()).or_default() += 1;
            }
        } else if pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
            && let Some(key) = controller
        {
            running.insert(key);
        }
    }
    report.largest_pile = report.per_controller.values().copied().max().unwrap_or(0);
    report.controllers_without_running_pod = report
        .per_controller
        .keys()
        .filter(|k| !running.contains(*k))
        .cloned()
        .collect();
    report
}

/// The uid in the object's controlling owner reference.
fn controller_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// `Kind/namespace/name` of the pod's controlling owner reference.
fn controller_key(pod: &Value) -> Option<String> {
    let namespace = pod.pointer("/metadata/namespace").and_then(Value::as_str)?;
    let refs = pod.pointer("/metadata/ownerReferences")?.as_array()?;
    let owner = refs
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
    let kind = owner.get("kind").and_then(Value::as_str)?;
    let name = owner.get("name").and_then(Value::as_str)?;
    Some(format!("{kind}/{namespace}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gated(uid: &str, gates: &[&str]) -> Value {
        json!({
            "metadata": { "name": "p", "namespace": "default", "uid": uid },
            "spec": { "schedulingGates": gates.iter().map(|g| json!({"name": g})).collect::<Vec<_>>() },
        })
    }

    fn legacy(uid: &str, pending: &[&str]) -> Value {
        json!({
            "metadata": {
                "name": "p", "namespace": "default", "uid": uid,
                "initializers": { "pending": pending.iter().map(|g| json!({"name": g})).collect::<Vec<_>>() },
            },
        })
    }

    #[test]
    fn gate_removal_targets_only_its_own_index() {
        let pod = gated("u1", &["a.example.com", "b.example.com"]);
        let patch = removal_patch(&pod, Mechanism::SchedulingGates, "b.example.com").unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                { "op": "test", "path": "/metadata/uid", "value": "u1" },
                { "op": "test", "path": "/spec/schedulingGates/1/name", "value": "b.example.com" },
                { "op": "remove", "path": "/spec/schedulingGates/1" },
            ])
        );
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(
            pending_names(&patched, Mechanism::SchedulingGates),
            vec!["a.example.com"]
        );
        assert!(removal_patch(&pod, Mechanism::SchedulingGates, "c.example.com").is_none());
    }

    #[test]
    fn legacy_removal_only_at_head() {
        let pod = legacy("u2", &["a.example.com", "b.example.com"]);
        assert!(removal_patch(&pod, Mechanism::Initializers, "b.example.com").is_none());
        let patch = removal_patch(&pod, Mechanism::Initializers, "a.example.com").unwrap();
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(
            pending_names(&patched, Mechanism::Initializers),
            vec!["b.example.com"]
        );
        // The same patch against a changed pod fails its test instead of removing the wrong one.
        let changed = legacy("u2", &["b.example.com"]);
        assert!(json_patch::patch(&mut changed.clone(), &patch).is_err());
    }

    #[test]
    fn stable_uids_are_stable_and_distinct() {
        let a = stable_uid("Job/default/a");
        assert_eq!(a, stable_uid("Job/default/a"));
        assert_ne!(a, stable_uid("Job/default/b"));
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
    }

    #[test]
    fn dns_names_are_valid() {
        assert_eq!(
            dns_name("kueue.x-k8s.io/admission"),
            "kueue-x-k8s-io-admission"
        );
        assert_eq!(dns_name("Sidecar.Example.COM"), "sidecar-example-com");
        assert_eq!(dns_name("//"), "owner");
        assert!(dns_name(&"a.".repeat(80)).len() <= 63);
    }

    #[test]
    fn pile_report_groups_by_controller() {
        let pod = |name: &str, kind: &str, owner: &str, gates: &[&str], phase: &str| {
            json!({
                "metadata": {
                    "name": name, "namespace": "ns", "uid": name,
                    "ownerReferences": [{ "apiVersion": "batch/v1", "kind": kind, "name": owner, "uid": "x", "controller": true }],
                },
                "spec": { "schedulingGates": gates.iter().map(|g| json!({"name": g})).collect::<Vec<_>>() },
                "status": { "phase": phase },
            })
        };
        let pods = [
            pod("a", "Job", "j", &["g"], "Pending"),
            pod("b", "Job", "j", &["g"], "Pending"),
            pod("c", "CronJob", "c", &["g"], "Pending"),
            pod("d", "CronJob", "c", &[], "Running"),
            json!({ "metadata": { "name": "e", "namespace": "ns" }, "spec": { "schedulingGates": [{ "name": "g" }] } }),
        ];
        let report = pile_report_from(pods.iter(), Mechanism::SchedulingGates);
        assert_eq!(report.stored_waiting_pods, 4);
        assert_eq!(
            report.per_controller,
            BTreeMap::from([("CronJob/ns/c".to_string(), 1), ("Job/ns/j".to_string(), 2)])
        );
        assert_eq!(report.largest_pile, 2);
        assert_eq!(
            report.controllers_without_running_pod,
            vec!["Job/ns/j".to_string()]
        );
        assert_eq!(
            pile_report_from(pods.iter(), Mechanism::Initializers),
            PileReport::default()
        );
    }
}
