//! Liveness of the controllers behind the listed initializers (DESIGN.md "owner").
//!
//! One watcher or prober per distinct [`OwnerSpec`], however many initializers share it:
//!
//! * `deployment` — a watch on that one Deployment, in the most preferred group version the
//!   server serves (apps/v1 … extensions/v1beta1, found by discovery: [`crate::discovery`]);
//!   up while `status.availableReplicas >= 1`. A server serving none is an error in the log
//!   and in `/readyz` ([`Owners::problems`]).
//! * `lease` — a watch on that one Lease; up while `renewTime + leaseDurationSeconds` lies in
//!   the future. A lease expires without any event, so a timer is armed for the expiry instant.
//! * `pods` — a watch on the pods matching a label selector; up while one of them is Ready.
//! * `http` — a GET every `probeInterval`; up on a 2xx answer within [`PROBE_TIMEOUT`]. https
//!   is verified against the platform's trusted roots.
//!
//! Every owner starts [`OwnerState::Unknown`] and becomes `Up`/`Down` at its first observation
//! (initial list done, first probe answered). A watch error keeps the last known state: the
//! watcher relists with backoff and only a completed observation changes the state.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt::Write as _;
use std::future::pending;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, StatusCode, Uri, header};
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use kube::client::ConfigExt as _;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{Config, ObjectRef, OwnerSpec};
use crate::discovery::{ApiSurface, Problems, deployment_group_versions};
use crate::metrics::Metrics;
use crate::policy::OwnerState;

/// An http owner is down unless it answers 2xx within this time (connect included).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Floor for `probeInterval`, so a zero or tiny value cannot turn the prober into a busy loop.
const MIN_PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Liveness of every owner named in the config. Cheap to clone.
#[derive(Clone)]
pub struct Owners {
    inner: Arc<Inner>,
}

struct Inner {
    /// One entry per distinct owner spec.
    owners: Vec<Owner>,
    /// Initializer name → index into `owners`.
    by_initializer: HashMap<String, usize>,
    /// Bumped on every state change.
    changes: watch::Sender<u64>,
    metrics: Arc<Metrics>,
    /// Owners that cannot be watched at all (their API is not served).
    problems: Problems,
}

struct Owner {
    spec: OwnerSpec,
    /// Human form of the spec, e.g. `kube-system/sidecar-injector`.
    target: String,
    /// Initializers using this owner, in config order.
    initializers: Vec<String>,
    /// `initializers` joined with `,` for log lines.
    initializer_list: String,
    /// Shortest `probeInterval` of the initializers sharing this owner (http only).
    probe_interval: Duration,
    state: Mutex<OwnerState>,
    /// Set at the first observation, never cleared.
    synced: AtomicBool,
}

/// One initializer's owner and its state, for `/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReport {
    pub initializer: String,
    /// `deployment`, `lease`, `pods` or `http` (the `owner_kind` metric label).
    pub owner_kind: &'static str,
    /// The watched object, selector or URL (see [`owner_target`]).
    pub target: String,
    /// Serialized inline: `"state": "up", "since": …`.
    #[serde(flatten)]
    pub state: OwnerState,
}

/// How an owner is named in logs, `/readyz` and `/status`: `ns/name` for deployments and
/// leases, `ns/selector` for pods, the URL for http.
pub fn owner_target(spec: &OwnerSpec) -> String {
    match spec {
        OwnerSpec::Deployment(r) | OwnerSpec::Lease(r) => format!("{}/{}", r.namespace, r.name),
        OwnerSpec::Pods {
            namespace,
            selector,
        } => format!("{namespace}/{selector}"),
        OwnerSpec::Http { url } => url.clone(),
    }
}

/// A Deployment's owner is up while at least one replica is available.
pub fn deployment_up(deployment: &Deployment) -> bool {
    deployment
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .is_some_and(|n| n >= 1)
}

/// The instant a Lease expires: `renewTime + leaseDurationSeconds`. None when either is missing
/// or the duration is negative (such a lease is never up).
pub fn lease_expiry(lease: &Lease) -> Option<SystemTime> {
    let spec = lease.spec.as_ref()?;
    let renewed = SystemTime::from(spec.renew_time.as_ref()?.0);
    let seconds = u64::try_from(spec.lease_duration_seconds?).ok()?;
    renewed.checked_add(Duration::from_secs(seconds))
}

/// A pod counts for its owner while it has condition `Ready=True` and is not being deleted.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

impl Owners {
    /// Start one watcher or prober per distinct owner in `config`; they stop when `cancel`
    /// fires. Must be called inside a Tokio runtime.
    pub fn spawn(
        client: kube::Client,
        config: &Config,
        metrics: Arc<Metrics>,
        cancel: CancellationToken,
    ) -> Owners {
        let owners = Owners::new(config, metrics);
        for index in 0..owners.inner.owners.len() {
            let handle = Handle {
                inner: owners.inner.clone(),
                index,
            };
            let task = Task {
                handle,
                cancel: cancel.clone(),
            };
            match &owners.inner.owners[index].spec {
                OwnerSpec::Deployment(r) => {
                    tokio::spawn(task.watch_deployment(client.clone(), r.clone()));
                }
                OwnerSpec::Lease(r) => {
                    tokio::spawn(task.watch::<Lease, LeaseModel>(
                        named_api(&client, r),
                        name_selector(r),
                        "leases",
                    ));
                }
                OwnerSpec::Pods {
                    namespace,
                    selector,
                } => {
                    tokio::spawn(task.watch::<Pod, PodsModel>(
                        Api::namespaced(client.clone(), namespace),
                        watcher::Config::default().labels(selector),
                        "pods",
                    ));
                }
                OwnerSpec::Http { url } => {
                    tokio::spawn(task.probe(url.clone()));
                }
            }
        }
        owners
    }

    /// Group the listed initializers by owner; every state starts Unknown.
    fn new(config: &Config, metrics: Arc<Metrics>) -> Owners {
        let mut owners: Vec<Owner> = Vec::new();
        let mut by_spec: HashMap<&OwnerSpec, usize> = HashMap::new();
        let mut by_initializer = HashMap::new();
        for init in &config.initializers {
            let Some(spec) = &init.owner else { continue };
            let index = *by_spec.entry(spec).or_insert_with(|| {
                owners.push(Owner {
                    spec: spec.clone(),
                    target: owner_target(spec),
                    initializers: Vec::new(),
                    initializer_list: String::new(),
                    probe_interval: init.probe_interval,
                    state: Mutex::new(OwnerState::Unknown),
                    synced: AtomicBool::new(false),
                });
                owners.len() - 1
            });
            let owner = &mut owners[index];
            owner.initializers.push(init.name.clone());
            owner.probe_interval = owner.probe_interval.min(init.probe_interval);
            by_initializer.insert(init.name.clone(), index);
        }
        for owner in &mut owners {
            owner.initializer_list = owner.initializers.join(",");
        }
        Owners {
            inner: Arc::new(Inner {
                owners,
                by_initializer,
                changes: watch::channel(0).0,
                metrics,
                problems: Problems::default(),
            }),
        }
    }

    /// Current state of the owner of `initializer` (Unknown if it has none or it has not been
    /// observed yet).
    pub fn state(&self, initializer: &str) -> OwnerState {
        match self.inner.by_initializer.get(initializer) {
            Some(&index) => self.inner.owners[index].state(),
            None => OwnerState::Unknown,
        }
    }

    /// A receiver whose value is bumped whenever any owner state changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Owners not observed yet (initial list or first probe pending), as `KIND TARGET`, e.g.
    /// `lease kueue-system/x`.
    pub fn not_synced(&self) -> Vec<String> {
        self.inner
            .owners
            .iter()
            .filter(|o| !o.synced.load(Ordering::Acquire))
            .map(|o| format!("{} {}", o.spec.kind(), o.target))
            .collect()
    }

    /// Owners that cannot be observed because the server lacks their API, as `KIND TARGET:
    /// REASON`; each makes `/readyz` fail.
    pub fn problems(&self) -> Vec<String> {
        self.inner.problems.list()
    }

    /// Resolves once every owner has been observed at least once.
    pub async fn wait_synced(&self) {
        let mut changes = self.subscribe();
        while !self.not_synced().is_empty() {
            if changes.changed().await.is_err() {
                // Unreachable while `self` holds the sender; never spin if it were.
                pending::<()>().await;
            }
        }
    }

    /// Per initializer with an owner (config order): its owner and the owner's state.
    pub fn snapshot(&self) -> Vec<OwnerReport> {
        let mut reports = Vec::with_capacity(self.inner.by_initializer.len());
        for owner in &self.inner.owners {
            let state = owner.state();
            reports.extend(owner.initializers.iter().map(|name| OwnerReport {
                initializer: name.clone(),
                owner_kind: owner.spec.kind(),
                target: owner.target.clone(),
                state,
            }));
        }
        reports
    }
}

impl std::fmt::Debug for Owners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.snapshot()).finish()
    }
}

impl Owner {
    fn state(&self) -> OwnerState {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Write access to one owner's state, held by its watcher or prober.
struct Handle {
    inner: Arc<Inner>,
    index: usize,
}

impl Handle {
    fn owner(&self) -> &Owner {
        &self.inner.owners[self.index]
    }

    /// Record an observation; on a change of state set the metric of every initializer using
    /// this owner, log one line and notify subscribers. `detail` says what was observed.
    fn observe(&self, up: bool, detail: impl FnOnce() -> String) {
        let owner = self.owner();
        let now = SystemTime::now();
        let previous = {
            let mut state = owner.state.lock().unwrap_or_else(PoisonError::into_inner);
            let previous = *state;
            match (previous, up) {
                (OwnerState::Up { .. }, true) | (OwnerState::Down { .. }, false) => return,
                _ => {}
            }
            *state = if up {
                OwnerState::Up { since: now }
            } else {
                OwnerState::Down { since: now }
            };
            previous
        };
        owner.synced.store(true, Ordering::Release);
        let kind = owner.spec.kind();
        for name in &owner.initializers {
            let label = self.inner.metrics.initializer_label(name);
            self.inner.metrics.set_owner_up(label, kind, Some(up));
        }
        let detail = detail();
        if up {
            info!(
                initializers = %owner.initializer_list,
                owner_kind = kind,
                owner = %owner.target,
                state = "up",
                detail = %detail,
                "owner is up"
            );
        } else {
            let up_for = match previous {
                OwnerState::Up { since } => {
                    let d = round_ms(now.duration_since(since).unwrap_or_default());
                    Some(tracing::field::display(humantime::format_duration(d)))
                }
                _ => None,
            };
            warn!(
                initializers = %owner.initializer_list,
                owner_kind = kind,
                owner = %owner.target,
                state = "down",
                detail = %detail,
                up_for,
                "owner is down"
            );
        }
        self.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Drop sub-millisecond noise from durations shown to people.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn named_api<K>(client: &kube::Client, r: &ObjectRef) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    Api::namespaced(client.clone(), &r.namespace)
}

/// Watch exactly one object by name.
fn name_selector(r: &ObjectRef) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={}", r.name))
}

/// What a watcher remembers about the watched objects (a summary, never whole objects).
trait Model<K>: Default {
    fn apply(&mut self, object: K);
    fn delete(&mut self, object: K);
    /// Whether the owner is up at `now`, what was observed, and the next instant the answer
    /// changes without any event.
    fn evaluate(&self, now: SystemTime) -> Evaluation;
}

struct Evaluation {
    up: bool,
    detail: String,
    next_change: Option<SystemTime>,
}

/// The one Deployment, None when it does not exist.
#[derive(Default)]
struct DeploymentModel(Option<DeploymentSummary>);

struct DeploymentSummary {
    up: bool,
    available: i32,
}

impl Model<Deployment> for DeploymentModel {
    fn apply(&mut self, object: Deployment) {
        self.0 = Some(DeploymentSummary {
            up: deployment_up(&object),
            available: object
                .status
                .and_then(|s| s.available_replicas)
                .unwrap_or(0),
        });
    }

    fn delete(&mut self, _: Deployment) {
        self.0 = None;
    }

    fn evaluate(&self, _: SystemTime) -> Evaluation {
        match &self.0 {
            None => Evaluation {
                up: false,
                detail: "deployment not found".to_owned(),
                next_change: None,
            },
            Some(d) => Evaluation {
                up: d.up,
                detail: format!("{} available replicas", d.available),
                next_change: None,
            },
        }
    }
}

/// The one Lease, None when it does not exist.
#[derive(Default)]
struct LeaseModel(Option<LeaseSummary>);

struct LeaseSummary {
    holder: Option<String>,
    expiry: Option<SystemTime>,
}

impl Model<Lease> for LeaseModel {
    fn apply(&mut self, object: Lease) {
        self.0 = Some(LeaseSummary {
            expiry: lease_expiry(&object),
            holder: object.spec.and_then(|s| s.holder_identity),
        });
    }

    fn delete(&mut self, _: Lease) {
        self.0 = None;
    }

    fn evaluate(&self, now: SystemTime) -> Evaluation {
        let Some(lease) = &self.0 else {
            return Evaluation {
                up: false,
                detail: "lease not found".to_owned(),
                next_change: None,
            };
        };
        let holder = lease.holder.as_deref().unwrap_or("");
        match lease.expiry {
            None => Evaluation {
                up: false,
                detail: format!("lease held by {holder:?} lacks renewTime or leaseDurationSeconds"),
                next_change: None,
            },
            Some(expiry) if expiry > now => Evaluation {
                up: true,
                detail: format!(
                    "lease held by {holder:?} until {}",
                    humantime::format_rfc3339_millis(expiry)
                ),
                next_change: Some(expiry),
            },
            Some(expiry) => Evaluation {
                up: false,
                detail: format!(
                    "lease held by {holder:?} expired at {}",
                    humantime::format_rfc3339_millis(expiry)
                ),
                next_change: None,
            },
        }
    }
}

/// Matching pods by name: whether each is Ready.
#[derive(Default)]
struct PodsModel(HashMap<String, bool>);

impl Model<Pod> for PodsModel {
    fn apply(&mut self, object: Pod) {
        let ready = pod_ready(&object);
        if let Some(name) = object.metadata.name {
            self.0.insert(name, ready);
        }
    }

    fn delete(&mut self, object: Pod) {
        if let Some(name) = &object.metadata.name {
            self.0.remove(name);
        }
    }

    fn evaluate(&self, _: SystemTime) -> Evaluation {
        let ready = self.0.values().filter(|r| **r).count();
        Evaluation {
            up: ready >= 1,
            detail: format!("{ready} of {} matching pods Ready", self.0.len()),
            next_change: None,
        }
    }
}

/// A Deployment of whichever group version the server serves, judged as apps/v1: the field
/// read (`status.availableReplicas`) is the same in apps/v1beta1, apps/v1beta2 and
/// extensions/v1beta1.
#[derive(Default)]
struct ServedDeploymentModel(DeploymentModel);

/// `object` decoded as an apps/v1 Deployment (None when it is not one).
fn as_apps_v1(object: DynamicObject) -> Option<Deployment> {
    let mut value = serde_json::to_value(object).ok()?;
    value["apiVersion"] = serde_json::json!("apps/v1");
    value["kind"] = serde_json::json!("Deployment");
    serde_json::from_value(value).ok()
}

impl Model<DynamicObject> for ServedDeploymentModel {
    fn apply(&mut self, object: DynamicObject) {
        let name = object.metadata.name.clone().unwrap_or_default();
        match as_apps_v1(object) {
            Some(d) => self.0.apply(d),
            None => {
                warn!(deployment = %name, "cannot decode the owner deployment; ignoring this version of it")
            }
        }
    }

    fn delete(&mut self, object: DynamicObject) {
        self.0.delete(as_apps_v1(object).unwrap_or_default());
    }

    fn evaluate(&self, now: SystemTime) -> Evaluation {
        self.0.evaluate(now)
    }
}

/// How long to wait before reading discovery again after it failed.
const DISCOVERY_RETRY: Duration = Duration::from_secs(2);

/// One owner's watcher or prober.
struct Task {
    handle: Handle,
    cancel: CancellationToken,
}

impl Task {
    /// Read discovery (retrying while the API server cannot answer), then watch the Deployment
    /// `r` in the most preferred group version served. Without any, log an error, list the
    /// problem for `/readyz` and leave the owner unobserved.
    async fn watch_deployment(self, client: kube::Client, r: ObjectRef) {
        let surface = loop {
            let attempt = tokio::select! {
                () = self.cancel.cancelled() => return,
                a = ApiSurface::read(&client) => a,
            };
            match attempt {
                Ok(surface) => break surface,
                Err(e) => {
                    // The watch cannot start without it: counted like a failed watch.
                    self.handle.inner.metrics.watch_restarted("deployments");
                    warn!(owner = %self.handle.owner().target, error = %error_chain(&e),
                        "cannot read API discovery for the owner deployment; retrying");
                    tokio::select! {
                        () = self.cancel.cancelled() => return,
                        () = tokio::time::sleep(DISCOVERY_RETRY) => {}
                    }
                }
            }
        };
        let owner = self.handle.owner();
        let Some(resource) = surface.deployments() else {
            let problem = format!(
                "the API server serves no Deployment API ({}), so this owner cannot be watched",
                deployment_group_versions()
            );
            error!(initializers = %owner.initializer_list, owner = %owner.target, %problem,
                "owner deployment cannot be watched");
            self.handle.inner.problems.set(
                &format!("{} {}", owner.spec.kind(), owner.target),
                Some(problem),
            );
            return;
        };
        info!(owner = %owner.target, api_version = %resource.api_version, "watching owner deployment");
        let api = Api::namespaced_with(client, &r.namespace, &resource);
        self.watch::<DynamicObject, ServedDeploymentModel>(api, name_selector(&r), "deployments")
            .await
    }

    /// Follow the objects of `api` selected by `config` and judge them with `M`.
    async fn watch<K, M>(self, api: Api<K>, config: watcher::Config, resource: &'static str)
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
        M: Model<K>,
    {
        let mut events = pin!(watcher::watcher(api, config).default_backoff());
        // None until the first initial list is complete: before that nothing is known.
        let mut live: Option<M> = None;
        // Objects of a (re)list in progress; replaces `live` atomically when it completes.
        let mut relist: Option<M> = None;
        let mut wake: Option<SystemTime> = None;
        loop {
            let timer = async {
                match wake {
                    Some(at) => {
                        tokio::time::sleep(at.duration_since(SystemTime::now()).unwrap_or_default())
                            .await
                    }
                    None => pending().await,
                }
            };
            let changed = tokio::select! {
                () = self.cancel.cancelled() => return,
                () = timer => true,
                event = events.next() => match event {
                    Some(Ok(event)) => apply_event(event, &mut live, &mut relist),
                    Some(Err(err)) => {
                        self.handle.inner.metrics.watch_restarted(resource);
                        let owner = self.handle.owner();
                        warn!(
                            initializers = %owner.initializer_list,
                            owner_kind = owner.spec.kind(),
                            owner = %owner.target,
                            error = %error_chain(&err),
                            "owner watch failed; keeping the last known state and retrying"
                        );
                        false
                    }
                    None => {
                        // The watcher retries forever; an end means the runtime is going away.
                        error!(owner = %self.handle.owner().target, "owner watch ended");
                        return;
                    }
                },
            };
            if changed && let Some(model) = &live {
                let evaluation = model.evaluate(SystemTime::now());
                wake = evaluation.next_change;
                self.handle.observe(evaluation.up, || evaluation.detail);
            }
        }
    }

    /// Probe `url` every `probeInterval` until cancelled.
    async fn probe(self, url: String) {
        let uri = match parse_probe_url(&url) {
            Ok(uri) => uri,
            Err(reason) => return self.cannot_probe(&url, &reason),
        };
        let builder = HttpClient::builder(TokioExecutor::new());
        if uri.scheme_str() == Some("https") {
            // kube's rustls setup with no CA of its own verifies against the platform's roots.
            match kube::Config::new(uri.clone()).rustls_https_connector() {
                Ok(connector) => self.probe_loop(builder.build(connector), uri).await,
                Err(err) => self.cannot_probe(&url, &error_chain(&err)),
            }
        } else {
            self.probe_loop(builder.build_http(), uri).await;
        }
    }

    /// Config validation should have refused such a URL; never judge an owner we cannot ask.
    fn cannot_probe(&self, url: &str, reason: &str) {
        error!(
            initializers = %self.handle.owner().initializer_list,
            url,
            reason,
            "http owner cannot be probed; its state stays unknown"
        );
    }

    async fn probe_loop<C>(self, client: HttpClient<C, Empty<Bytes>>, uri: Uri)
    where
        C: Connect + Clone + Send + Sync + 'static,
    {
        let interval = self.handle.owner().probe_interval.max(MIN_PROBE_INTERVAL);
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let result = tokio::select! {
                () = self.cancel.cancelled() => return,
                _ = ticks.tick() => tokio::select! {
                    () = self.cancel.cancelled() => return,
                    result = probe_once(&client, &uri) => result,
                },
            };
            match result {
                Ok(status) if status.is_success() => {
                    self.handle.observe(true, || format!("HTTP {status}"))
                }
                Ok(status) => self.handle.observe(false, || format!("HTTP {status}")),
                Err(reason) => self.handle.observe(false, || reason),
            }
        }
    }
}

/// Fold one watcher event into the model; true when `live` changed. Before the first
/// complete list `live` is None and stays so until `InitDone`; a relist is collected in
/// `relist` and replaces `live` at once, so objects gone meanwhile disappear with it.
fn apply_event<K, M: Model<K>>(
    event: Event<K>,
    live: &mut Option<M>,
    relist: &mut Option<M>,
) -> bool {
    match event {
        Event::Init => {
            *relist = Some(M::default());
            false
        }
        Event::InitApply(object) => {
            relist.get_or_insert_default().apply(object);
            false
        }
        Event::InitDone => {
            *live = Some(relist.take().unwrap_or_default());
            true
        }
        Event::Apply(object) => live.as_mut().map(|m| m.apply(object)).is_some(),
        Event::Delete(object) => live.as_mut().map(|m| m.delete(object)).is_some(),
    }
}

/// An `http://` or `https://` URL with a host.
fn parse_probe_url(url: &str) -> Result<Uri, String> {
    let uri: Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some_and(|h| !h.is_empty()) => Ok(uri),
        Some("http" | "https") => Err("URL has no host".to_owned()),
        _ => Err("only http:// and https:// URLs can be probed".to_owned()),
    }
}

/// One GET; the status if it answered within [`PROBE_TIMEOUT`], else why not.
async fn probe_once<C>(
    client: &HttpClient<C, Empty<Bytes>>,
    uri: &Uri,
) -> Result<StatusCode, String>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let request = Request::get(uri.clone())
        .header(
            header::USER_AGENT,
            concat!("initguard/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::new())
        .map_err(|e| format!("building request: {e}"))?;
    match tokio::time::timeout(PROBE_TIMEOUT, client.request(request)).await {
        // The body is not needed; dropping it closes the connection.
        Ok(Ok(response)) => Ok(response.status()),
        Ok(Err(err)) => Err(error_chain(&err)),
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(PROBE_TIMEOUT)
        )),
    }
}

/// An error and its sources, `outer: inner: root`.
fn error_chain(err: &dyn StdError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "ns"},
            "status": status,
        }))
        .unwrap()
    }

    fn lease(spec: serde_json::Value) -> Lease {
        serde_json::from_value(json!({"metadata": {"name": "l", "namespace": "ns"}, "spec": spec}))
            .unwrap()
    }

    fn pod(name: &str, ready: &str, deleting: bool) -> Pod {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "ns"},
            "status": {"conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": ready},
            ]},
        });
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2024-05-01T10:00:00Z");
        }
        serde_json::from_value(value).unwrap()
    }

    fn at(rfc3339: &str) -> SystemTime {
        humantime::parse_rfc3339(rfc3339).unwrap()
    }

    #[test]
    fn deployment_is_up_with_one_available_replica() {
        assert!(!deployment_up(&deployment(json!(null))));
        assert!(!deployment_up(&deployment(json!({"replicas": 2}))));
        assert!(!deployment_up(&deployment(json!({"availableReplicas": 0}))));
        assert!(deployment_up(&deployment(json!({"availableReplicas": 1}))));
        assert!(deployment_up(&deployment(
            json!({"replicas": 3, "availableReplicas": 3})
        )));
    }

    #[test]
    fn lease_expires_at_renew_time_plus_duration() {
        let full = lease(json!({
            "holderIdentity": "a",
            "renewTime": "2024-05-01T10:00:00.250000Z",
            "leaseDurationSeconds": 15,
        }));
        assert_eq!(lease_expiry(&full), Some(at("2024-05-01T10:00:15.25Z")));
        let no_renew = lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 15}));
        assert_eq!(lease_expiry(&no_renew), None);
        let no_duration = lease(json!({"renewTime": "2024-05-01T10:00:00.000000Z"}));
        assert_eq!(lease_expiry(&no_duration), None);
        let negative = lease(json!({
            "renewTime": "2024-05-01T10:00:00.000000Z",
            "leaseDurationSeconds": -1,
        }));
        assert_eq!(lease_expiry(&negative), None);
        assert_eq!(lease_expiry(&lease(json!(null))), None);
    }

    #[test]
    fn pod_counts_when_ready_and_not_deleting() {
        assert!(pod_ready(&pod("a", "True", false)));
        assert!(!pod_ready(&pod("a", "False", false)));
        assert!(!pod_ready(&pod("a", "Unknown", false)));
        assert!(!pod_ready(&pod("a", "True", true)));
        let pending: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "status": {}})).unwrap();
        assert!(!pod_ready(&pending));
    }

    #[test]
    fn lease_model_is_up_until_expiry_then_down() {
        let now = at("2024-05-01T10:00:05Z");
        let mut model = LeaseModel::default();
        let missing = model.evaluate(now);
        assert!(!missing.up);
        assert_eq!(missing.next_change, None);

        model.apply(lease(json!({
            "holderIdentity": "a",
            "renewTime": "2024-05-01T10:00:00.000000Z",
            "leaseDurationSeconds": 10,
        })));
        let live = model.evaluate(now);
        assert!(live.up, "{}", live.detail);
        assert_eq!(live.next_change, Some(at("2024-05-01T10:00:10Z")));
        let expired = model.evaluate(at("2024-05-01T10:00:10Z"));
        assert!(!expired.up, "expiry instant itself is down");
        assert_eq!(expired.next_change, None);

        model.apply(lease(json!({"holderIdentity": "a"})));
        assert!(!model.evaluate(now).up);
        model.delete(lease(json!(null)));
        assert!(!model.evaluate(now).up);
    }

    #[test]
    fn pods_model_is_up_while_any_pod_is_ready() {
        let now = SystemTime::now();
        let mut model = PodsModel::default();
        assert!(!model.evaluate(now).up);
        model.apply(pod("a", "False", false));
        assert!(!model.evaluate(now).up);
        model.apply(pod("b", "True", false));
        assert!(model.evaluate(now).up);
        model.apply(pod("b", "True", true));
        assert!(!model.evaluate(now).up, "a terminating pod does not count");
        model.apply(pod("a", "True", false));
        assert!(model.evaluate(now).up);
        model.delete(pod("a", "True", false));
        assert!(!model.evaluate(now).up);
        assert_eq!(model.0.len(), 1);
    }

    #[test]
    fn a_relist_replaces_what_was_known_at_once() {
        let now = SystemTime::now();
        let mut live: Option<PodsModel> = None;
        let mut relist = None;
        assert!(!apply_event(Event::Init, &mut live, &mut relist));
        assert!(!apply_event(
            Event::InitApply(pod("a", "True", false)),
            &mut live,
            &mut relist
        ));
        assert!(live.is_none(), "nothing is known before the list completes");
        assert!(apply_event(Event::InitDone, &mut live, &mut relist));
        assert!(live.as_ref().unwrap().evaluate(now).up);

        // A relist in which pod a is gone: the old view holds until the relist is complete.
        assert!(!apply_event(Event::Init, &mut live, &mut relist));
        assert!(!apply_event(
            Event::InitApply(pod("b", "False", false)),
            &mut live,
            &mut relist
        ));
        assert!(live.as_ref().unwrap().evaluate(now).up);
        assert!(apply_event(Event::InitDone, &mut live, &mut relist));
        let model = live.as_ref().unwrap();
        assert!(!model.evaluate(now).up);
        assert_eq!(model.0.keys().collect::<Vec<_>>(), ["b"]);

        assert!(apply_event(
            Event::Apply(pod("b", "True", false)),
            &mut live,
            &mut relist
        ));
        assert!(live.as_ref().unwrap().evaluate(now).up);
        assert!(apply_event(
            Event::Delete(pod("b", "True", false)),
            &mut live,
            &mut relist
        ));
        assert!(!live.as_ref().unwrap().evaluate(now).up);
    }

    #[test]
    fn deployment_model_is_down_when_missing() {
        let now = SystemTime::now();
        let mut model = DeploymentModel::default();
        assert!(!model.evaluate(now).up);
        model.apply(deployment(json!({"availableReplicas": 2})));
        assert!(model.evaluate(now).up);
        model.apply(deployment(json!({"availableReplicas": 0})));
        assert!(!model.evaluate(now).up);
        model.apply(deployment(json!({"availableReplicas": 1})));
        model.delete(deployment(json!(null)));
        assert!(!model.evaluate(now).up);
    }

    #[test]
    fn probe_urls_need_a_scheme_we_speak_and_a_host() {
        assert!(parse_probe_url("http://10.0.0.5:8080/healthz").is_ok());
        assert!(parse_probe_url("https://example.com/healthz").is_ok());
        assert!(parse_probe_url("ftp://example.com/").is_err());
        assert!(parse_probe_url("/healthz").is_err());
        assert!(parse_probe_url("not a url").is_err());
    }

    fn config() -> Config {
        Config::from_yaml_str(
            r#"
defaults: { probeInterval: 5s }
initializers:
  - name: a.example.com
    owner: { deployment: kube-system/injector }
  - name: b.example.com
    owner: { deployment: kube-system/injector }
  - name: c.example.com
    owner: { lease: kueue-system/leader }
  - name: d.example.com
  - name: e.example.com
    owner: { http: "http://127.0.0.1:1/healthz" }
  - name: f.example.com
    probeInterval: 1s
    owner: { http: "http://127.0.0.1:1/healthz" }
"#,
            "test.yaml",
        )
        .unwrap()
    }

    fn owners() -> Owners {
        let config = config();
        Owners::new(&config, Arc::new(Metrics::new(&config).unwrap()))
    }

    #[test]
    fn initializers_sharing_an_owner_share_one_entry() {
        let owners = owners();
        assert_eq!(owners.inner.owners.len(), 3);
        assert_eq!(
            owners.not_synced(),
            [
                "deployment kube-system/injector",
                "lease kueue-system/leader",
                "http http://127.0.0.1:1/healthz",
            ]
        );
        let http = &owners.inner.owners[2];
        assert_eq!(http.initializers, ["e.example.com", "f.example.com"]);
        assert_eq!(http.probe_interval, Duration::from_secs(1));

        let snapshot = owners.snapshot();
        let names: Vec<&str> = snapshot.iter().map(|r| r.initializer.as_str()).collect();
        assert_eq!(
            names,
            [
                "a.example.com",
                "b.example.com",
                "c.example.com",
                "e.example.com",
                "f.example.com"
            ]
        );
        assert!(snapshot.iter().all(|r| r.state == OwnerState::Unknown));
        assert_eq!(owners.state("d.example.com"), OwnerState::Unknown);
        assert_eq!(owners.state("unlisted"), OwnerState::Unknown);

        let json = serde_json::to_value(&snapshot[2]).unwrap();
        assert_eq!(json["ownerKind"], "lease");
        assert_eq!(json["target"], "kueue-system/leader");
        assert_eq!(json["state"], "unknown");
    }

    #[test]
    fn observations_change_state_only_on_transitions() {
        let owners = owners();
        let mut changes = owners.subscribe();
        let handle = Handle {
            inner: owners.inner.clone(),
            index: 0,
        };
        let owner_up = |name: &str| {
            owners
                .inner
                .metrics
                .owner_up
                .get_metric_with_label_values(&[name, "deployment"])
                .unwrap()
                .get()
        };

        let before = SystemTime::now();
        handle.observe(true, || "1 available replicas".to_owned());
        let OwnerState::Up { since: up_since } = owners.state("a.example.com") else {
            panic!("not up: {:?}", owners.state("a.example.com"));
        };
        assert!(up_since >= before);
        assert_eq!(owners.state("b.example.com"), owners.state("a.example.com"));
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert_eq!(
            (owner_up("a.example.com"), owner_up("b.example.com")),
            (1, 1)
        );
        assert_eq!(owners.not_synced().len(), 2);

        handle.observe(true, || "2 available replicas".to_owned());
        assert_eq!(
            owners.state("a.example.com"),
            OwnerState::Up { since: up_since }
        );
        assert!(!changes.has_changed().unwrap(), "no change, no wake-up");

        handle.observe(false, || "0 available replicas".to_owned());
        let OwnerState::Down { since } = owners.state("b.example.com") else {
            panic!("not down: {:?}", owners.state("b.example.com"));
        };
        assert!(since >= up_since);
        assert!(changes.has_changed().unwrap());
        assert_eq!(
            (owner_up("a.example.com"), owner_up("b.example.com")),
            (0, 0)
        );
    }
}
