//! Liveness of the controllers behind the listed initializers (README "What it guarantees").
//!
//! One watcher or prober per distinct [`OwnerSpec`], however many initializers share it:
//!
//! * `deployment` — a watch on that one Deployment, in the most preferred group version the
//!   server serves (apps/v1 … extensions/v1beta1, found by discovery: [`crate::discovery`]);
//!   up while `status.availableReplicas >= 1`. A server serving none is an error in the log
//!   and in `/readyz` ([`Owners::problems`]).
//! * `lease` — a watch on that one Lease; up while the lease was renewed within its
//!   `leaseDurationSeconds` as observed on this process's monotonic clock (see `LeaseModel`).
//!   A lease expires without any event, so a timer is armed for the expiry instant.
//! * `pods` — a watch on the pods matching a label selector; up while one of them is Ready.
//! * `http` — a GET every `probeInterval`; up on a 2xx answer within [`PROBE_TIMEOUT`]. https
//!   is verified against the owner's `caFile` when given, else the platform's trusted roots,
//!   and presents `certFile`/`keyFile` when given. A certificate is never accepted unchecked.
//!
//! States (README "What it guarantees": never early): every owner starts [`OwnerState::Unknown`]. It becomes
//! `Up` or `Down` once an object was read (initial list done, first probe answered); `Down`
//! means the object reports failure, even on first sight, or was deleted after it was seen.
//! An object that was never read (missing since start — a config typo —, forbidden, API
//! unreachable) stays `Unknown`, which never triggers `owner_down`. A watch error keeps the
//! last state: the watcher relists with backoff and only a completed observation changes it.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt::Write as _;
use std::future::pending;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

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
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{Config, ObjectRef, OwnerSpec};
use crate::discovery::{ApiSurface, Problems, deployment_group_versions};
use crate::metrics::Metrics;
use crate::policy::OwnerState;
use crate::supervise::{self, Failures};

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
    state: Mutex<Current>,
    /// Set at the first observation, never cleared.
    synced: AtomicBool,
}

/// An owner's state and what was last observed about it.
struct Current {
    state: OwnerState,
    /// E.g. `2 available replicas`, `not found`, `watch failing: …`.
    detail: String,
}

/// What a watcher or prober concluded from one observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    Up,
    /// The object was read and reports failure, or was deleted after it was seen.
    Down,
    /// Nothing was read: the object does not exist and never did while we watched.
    Unknown,
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
    /// What was last observed, e.g. `1 of 2 matching pods Ready`; for an unknown owner why
    /// (`not observed yet`, `deployment not found`, `watch failing: …`).
    pub detail: String,
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
        OwnerSpec::Http { url, .. } => url.clone(),
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

/// What a Lease says: who holds it, when the holder last renewed it (by the holder's clock, so
/// only ever compared for change, never with ours) and how long a renewal counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// None when absent or empty.
    pub holder: Option<String>,
    pub renew_time: Option<SystemTime>,
    /// None when absent, zero or negative (such a lease is never up).
    pub duration: Option<Duration>,
}

impl LeaseRecord {
    /// The fields of `lease` that judge its liveness.
    pub fn of(lease: &Lease) -> LeaseRecord {
        let spec = lease.spec.as_ref();
        LeaseRecord {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew_time: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| SystemTime::from(t.0)),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|n| u64::try_from(n).ok())
                .filter(|n| *n > 0)
                .map(Duration::from_secs),
        }
    }

    /// Whether the holder renewed (or a new holder took over) between `self` and `next`.
    fn renewed_in(&self, next: &LeaseRecord) -> bool {
        self.holder != next.holder || self.renew_time != next.renew_time
    }
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
    /// fires, and a panic in one is recorded in `failures`. Must be called inside a Tokio
    /// runtime.
    pub fn spawn(
        client: kube::Client,
        config: &Config,
        metrics: Arc<Metrics>,
        failures: &Failures,
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
                    supervise::spawn(
                        failures,
                        "owner watch",
                        task.watch_deployment(client.clone(), r.clone()),
                    );
                }
                OwnerSpec::Lease(r) => {
                    supervise::spawn(
                        failures,
                        "owner watch",
                        task.watch::<Lease, LeaseModel>(
                            named_api(&client, r),
                            name_selector(r),
                            "leases",
                        ),
                    );
                }
                OwnerSpec::Pods {
                    namespace,
                    selector,
                } => {
                    supervise::spawn(
                        failures,
                        "owner watch",
                        task.watch::<Pod, PodsModel>(
                            Api::namespaced(client.clone(), namespace),
                            watcher::Config::default().labels(selector),
                            "pods",
                        ),
                    );
                }
                OwnerSpec::Http {
                    url,
                    ca_file,
                    cert_file,
                    key_file,
                } => {
                    let tls = ProbeTls {
                        ca_file: ca_file.clone(),
                        cert_file: cert_file.clone(),
                        key_file: key_file.clone(),
                    };
                    supervise::spawn(failures, "owner probe", task.probe(url.clone(), tls));
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
                    state: Mutex::new(Current {
                        state: OwnerState::Unknown,
                        detail: "not observed yet".to_owned(),
                    }),
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
            Some(&index) => self.inner.owners[index].current().0,
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

    /// Owners in state unknown, as `KIND TARGET: unknown (DETAIL)`, for `/readyz`: they are
    /// worth a look (a typo, missing RBAC) but never stop the guard from being ready.
    pub fn unknown(&self) -> Vec<String> {
        self.inner
            .owners
            .iter()
            .filter_map(|o| {
                let (state, detail) = o.current();
                (state == OwnerState::Unknown)
                    .then(|| format!("{} {}: unknown ({detail})", o.spec.kind(), o.target))
            })
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
            let (state, detail) = owner.current();
            reports.extend(owner.initializers.iter().map(|name| OwnerReport {
                initializer: name.clone(),
                owner_kind: owner.spec.kind(),
                target: owner.target.clone(),
                state,
                detail: detail.clone(),
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
    fn current(&self) -> (OwnerState, String) {
        let current = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (current.state, current.detail.clone())
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

    /// Record an observation; on a change of state set the metrics of every initializer using
    /// this owner, log one line and notify subscribers. `detail` says what was observed.
    fn observe(&self, observed: Observed, detail: String) {
        let owner = self.owner();
        let now = SystemTime::now();
        let previous = {
            let mut current = owner.state.lock().unwrap_or_else(PoisonError::into_inner);
            let previous = current.state;
            let same = matches!(
                (previous, observed),
                (OwnerState::Up { .. }, Observed::Up)
                    | (OwnerState::Down { .. }, Observed::Down)
                    | (OwnerState::Unknown, Observed::Unknown)
            );
            // An unknown owner's reason is news (first "not found" after "not observed yet");
            // a live owner's changing detail (replica counts) is not.
            let news = !same || (observed == Observed::Unknown && current.detail != detail);
            current.detail = detail.clone();
            if !same {
                current.state = match observed {
                    Observed::Up => OwnerState::Up { since: now },
                    Observed::Down => OwnerState::Down { since: now },
                    Observed::Unknown => OwnerState::Unknown,
                };
            }
            let first = !owner.synced.swap(true, Ordering::AcqRel);
            if !news && !first {
                return;
            }
            previous
        };
        let kind = owner.spec.kind();
        for name in &owner.initializers {
            let label = self.inner.metrics.initializer_label(name);
            let up = match observed {
                Observed::Up => Some(true),
                Observed::Down => Some(false),
                Observed::Unknown => None,
            };
            self.inner.metrics.set_owner_up(label, kind, up);
            self.inner
                .metrics
                .set_owner_state(label, kind, observed.as_str());
        }
        match observed {
            Observed::Up => info!(
                initializers = %owner.initializer_list,
                owner_kind = kind,
                owner = %owner.target,
                state = "up",
                detail = %detail,
                "owner is up"
            ),
            Observed::Down => {
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
            Observed::Unknown => warn!(
                initializers = %owner.initializer_list,
                owner_kind = kind,
                owner = %owner.target,
                state = "unknown",
                detail = %detail,
                "owner is unknown: never triggers owner_down, the deadline still applies; \
                 check the owner's name in the config and the guard's RBAC"
            ),
        }
        self.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// While the owner is unknown, remember why (e.g. its watch failing: forbidden) for
    /// `/readyz` and `/status`. A known state is kept as it is.
    fn unknown_because(&self, detail: String) {
        let mut current = self
            .owner()
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if current.state == OwnerState::Unknown {
            current.detail = detail;
        }
    }
}

impl Observed {
    /// Value of the `state` label of `initguard_owner_state`.
    pub fn as_str(self) -> &'static str {
        match self {
            Observed::Up => "up",
            Observed::Down => "down",
            Observed::Unknown => "unknown",
        }
    }
}

/// For `initguard check-config --kubeconfig`: one line per listed owner that does not exist
/// (a Deployment or Lease not found, a pods selector matching no pod) or that could not be
/// checked (e.g. forbidden), config order, each owner once. http owners are not checked: the
/// guard probes them from where it runs, which the machine running check-config may not reach.
pub async fn missing_owners(client: &kube::Client, config: &Config) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut lines = Vec::new();
    for init in &config.initializers {
        let Some(spec) = &init.owner else { continue };
        if !seen.insert(spec) {
            continue;
        }
        let what = format!("{} {}", spec.kind(), owner_target(spec));
        let found = match spec {
            // In whichever group the server serves, as the guard will watch it.
            OwnerSpec::Deployment(r) => match ApiSurface::read(client).await {
                Ok(surface) => match surface.deployments() {
                    Some(resource) => Api::<DynamicObject>::namespaced_with(
                        client.clone(),
                        &r.namespace,
                        &resource,
                    )
                    .get_opt(&r.name)
                    .await
                    .map(|d| d.is_some()),
                    None => {
                        lines.push(format!(
                            "owner {what} (of {}) cannot be watched: the API server serves no \
                             Deployment API ({})",
                            init.name,
                            deployment_group_versions()
                        ));
                        continue;
                    }
                },
                Err(e) => Err(e),
            },
            OwnerSpec::Lease(r) => named_api::<Lease>(client, r)
                .get_opt(&r.name)
                .await
                .map(|l| l.is_some()),
            OwnerSpec::Pods {
                namespace,
                selector,
            } => Api::<Pod>::namespaced(client.clone(), namespace)
                .list_metadata(&kube::api::ListParams::default().labels(selector).limit(1))
                .await
                .map(|pods| !pods.items.is_empty()),
            OwnerSpec::Http { .. } => continue,
        };
        let used_by = &init.name;
        match found {
            Ok(true) => {}
            Ok(false) if matches!(spec, OwnerSpec::Pods { .. }) => lines.push(format!(
                "owner {what} (of {used_by}): no pod matches the selector; the owner stays \
                 unknown until one appears"
            )),
            Ok(false) => lines.push(format!(
                "owner {what} (of {used_by}) does not exist; it stays unknown (never \
                 owner_down) until it appears: check the name"
            )),
            Err(e) => lines.push(format!(
                "owner {what} (of {used_by}) could not be checked: {}",
                error_chain(&e)
            )),
        }
    }
    lines
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
    /// Fold in an object as listed or watched at `now` (this process's monotonic clock).
    fn apply(&mut self, object: K, now: Instant);
    fn delete(&mut self, object: K);
    /// Carry over from the model a relist replaces what must survive it (when a lease was
    /// last seen renewed): a relist is not a renewal.
    fn inherit(&mut self, _previous: &Self) {}
    /// What the objects held say at `now`, and the next instant the answer changes without
    /// any event.
    fn evaluate(&self, now: Instant) -> Evaluation;
}

struct Evaluation {
    /// Up or Down when an object is held; Unknown when there is none.
    verdict: Observed,
    detail: String,
    next_change: Option<Instant>,
}

impl Evaluation {
    fn new(verdict: Observed, detail: impl Into<String>) -> Evaluation {
        Evaluation {
            verdict,
            detail: detail.into(),
            next_change: None,
        }
    }
}

/// The owner's state from a model's evaluation and whether an object was ever seen: no object
/// is unknown while none was ever read (a typo must not bypass anything), down once one was
/// (it was deleted). `seen` is updated.
fn judge(evaluation: Evaluation, seen: &mut bool, what: &str) -> (Observed, String) {
    match evaluation.verdict {
        Observed::Unknown if *seen => (
            Observed::Down,
            format!("{what} deleted after it was seen ({})", evaluation.detail),
        ),
        Observed::Unknown => (Observed::Unknown, evaluation.detail),
        verdict => {
            *seen = true;
            (verdict, evaluation.detail)
        }
    }
}

/// The one Deployment, None when it does not exist.
#[derive(Default)]
struct DeploymentModel(Option<DeploymentSummary>);

struct DeploymentSummary {
    up: bool,
    available: i32,
}

impl Model<Deployment> for DeploymentModel {
    fn apply(&mut self, object: Deployment, _: Instant) {
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

    fn evaluate(&self, _: Instant) -> Evaluation {
        match &self.0 {
            None => Evaluation::new(Observed::Unknown, "deployment not found"),
            Some(d) => Evaluation::new(
                if d.up { Observed::Up } else { Observed::Down },
                format!("{} available replicas", d.available),
            ),
        }
    }
}

/// The one Lease, None when it does not exist.
///
/// Judged as client-go's leader election judges a lock it does not hold: the holder's
/// `renewTime` is never compared with our clock (the clocks may disagree by minutes); what
/// counts is when *this process* saw the record change — a new `renewTime` or a new holder —
/// on its own monotonic clock. A lease is up until `leaseDurationSeconds` after that; on first
/// sight (after a restart) it gets the benefit of one full duration, as in client-go
/// (k8s.io/client-go/tools/leaderelection/leaderelection.go: `observedTime` is set whenever the
/// observed record differs, and a lock is expired once `observedTime + LeaseDuration` passed).
#[derive(Default)]
struct LeaseModel(Option<LeaseSummary>);

struct LeaseSummary {
    record: LeaseRecord,
    /// When we last saw `record` renewed (or first saw it).
    observed: Instant,
}

impl Model<Lease> for LeaseModel {
    fn apply(&mut self, object: Lease, now: Instant) {
        let record = LeaseRecord::of(&object);
        let observed = match &self.0 {
            Some(known) if !known.record.renewed_in(&record) => known.observed,
            _ => now,
        };
        self.0 = Some(LeaseSummary { record, observed });
    }

    fn delete(&mut self, _: Lease) {
        self.0 = None;
    }

    fn inherit(&mut self, previous: &Self) {
        if let (Some(lease), Some(known)) = (&mut self.0, &previous.0)
            && !known.record.renewed_in(&lease.record)
        {
            lease.observed = known.observed;
        }
    }

    fn evaluate(&self, now: Instant) -> Evaluation {
        let Some(lease) = &self.0 else {
            return Evaluation::new(Observed::Unknown, "lease not found");
        };
        let record = &lease.record;
        let Some(holder) = &record.holder else {
            return Evaluation::new(Observed::Down, "lease has no holder");
        };
        let (Some(_), Some(duration)) = (record.renew_time, record.duration) else {
            return Evaluation::new(
                Observed::Down,
                format!("lease held by {holder:?} lacks renewTime or leaseDurationSeconds"),
            );
        };
        let since = round_ms(now.saturating_duration_since(lease.observed));
        match lease.observed.checked_add(duration) {
            Some(expiry) if expiry > now => Evaluation {
                verdict: Observed::Up,
                detail: format!(
                    "lease held by {holder:?}, renewal seen {} ago, duration {}",
                    humantime::format_duration(since),
                    humantime::format_duration(duration)
                ),
                next_change: Some(expiry),
            },
            _ => Evaluation::new(
                Observed::Down,
                format!(
                    "lease held by {holder:?} not renewed for {} (duration {})",
                    humantime::format_duration(since),
                    humantime::format_duration(duration)
                ),
            ),
        }
    }
}

/// Matching pods by name: whether each is Ready.
#[derive(Default)]
struct PodsModel(HashMap<String, bool>);

impl Model<Pod> for PodsModel {
    fn apply(&mut self, object: Pod, _: Instant) {
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

    fn evaluate(&self, _: Instant) -> Evaluation {
        if self.0.is_empty() {
            return Evaluation::new(Observed::Unknown, "no matching pod");
        }
        let ready = self.0.values().filter(|r| **r).count();
        Evaluation::new(
            if ready >= 1 {
                Observed::Up
            } else {
                Observed::Down
            },
            format!("{ready} of {} matching pods Ready", self.0.len()),
        )
    }
}

/// TLS settings of an https owner (`caFile`, `certFile`, `keyFile`).
struct ProbeTls {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

impl ProbeTls {
    /// kube's rustls setup: verification against `caFile` (re-read about once a minute, for CA
    /// rotation) when given, else the platform's roots; the client certificate when given.
    /// `accept_invalid_certs` stays false: no certificate is ever accepted unchecked.
    fn kube_config(&self, uri: &Uri) -> Result<kube::Config, String> {
        let mut config = kube::Config::new(uri.clone());
        if let Some(ca) = &self.ca_file {
            let pem =
                std::fs::read(ca).map_err(|e| format!("reading caFile {}: {e}", ca.display()))?;
            let mut roots = Vec::new();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("caFile {}: {e}", ca.display()))?;
                roots.push(cert.to_vec());
            }
            if roots.is_empty() {
                return Err(format!("caFile {}: no PEM certificate", ca.display()));
            }
            config.root_cert = Some(roots);
            config.root_cert_file = Some(ca.clone());
        }
        config.auth_info.client_certificate =
            self.cert_file.as_ref().map(|p| p.display().to_string());
        config.auth_info.client_key = self.key_file.as_ref().map(|p| p.display().to_string());
        config.accept_invalid_certs = false;
        Ok(config)
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
    fn apply(&mut self, object: DynamicObject, now: Instant) {
        let name = object.metadata.name.clone().unwrap_or_default();
        match as_apps_v1(object) {
            Some(d) => self.0.apply(d, now),
            None => {
                warn!(deployment = %name, "cannot decode the owner deployment; ignoring this version of it")
            }
        }
    }

    fn delete(&mut self, object: DynamicObject) {
        self.0.delete(as_apps_v1(object).unwrap_or_default());
    }

    fn evaluate(&self, now: Instant) -> Evaluation {
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
        // Whether an object was ever read: from then on its absence means it was deleted.
        let mut seen = false;
        let what = self.handle.owner().spec.kind();
        let mut wake: Option<Instant> = None;
        loop {
            let timer = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => pending().await,
                }
            };
            let changed = tokio::select! {
                () = self.cancel.cancelled() => return,
                () = timer => true,
                event = events.next() => match event {
                    Some(Ok(event)) => apply_event(event, &mut live, &mut relist, Instant::now()),
                    Some(Err(err)) => {
                        self.handle.inner.metrics.watch_restarted(resource);
                        let owner = self.handle.owner();
                        let error = error_chain(&err);
                        warn!(
                            initializers = %owner.initializer_list,
                            owner_kind = owner.spec.kind(),
                            owner = %owner.target,
                            error = %error,
                            "owner watch failed; keeping the last known state and retrying"
                        );
                        self.handle.unknown_because(format!("watch failing: {error}"));
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
                let evaluation = model.evaluate(Instant::now());
                wake = evaluation.next_change;
                let (observed, detail) = judge(evaluation, &mut seen, what);
                self.handle.observe(observed, detail);
            }
        }
    }

    /// Probe `url` every `probeInterval` until cancelled.
    async fn probe(self, url: String, tls: ProbeTls) {
        let uri = match parse_probe_url(&url) {
            Ok(uri) => uri,
            Err(reason) => return self.cannot_probe(&url, &reason),
        };
        let builder = HttpClient::builder(TokioExecutor::new());
        if uri.scheme_str() == Some("https") {
            let connector = tls
                .kube_config(&uri)
                .and_then(|c| c.rustls_https_connector().map_err(|e| error_chain(&e)));
            match connector {
                Ok(connector) => self.probe_loop(builder.build(connector), uri).await,
                Err(reason) => self.cannot_probe(&url, &reason),
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
                    self.handle.observe(Observed::Up, format!("HTTP {status}"))
                }
                Ok(status) => self
                    .handle
                    .observe(Observed::Down, format!("HTTP {status}")),
                Err(reason) => self.handle.observe(Observed::Down, reason),
            }
        }
    }
}

/// Fold one watcher event, received at `now`, into the model; true when `live` changed. Before
/// the first complete list `live` is None and stays so until `InitDone`; a relist is collected
/// in `relist` and replaces `live` at once, so objects gone meanwhile disappear with it.
fn apply_event<K, M: Model<K>>(
    event: Event<K>,
    live: &mut Option<M>,
    relist: &mut Option<M>,
    now: Instant,
) -> bool {
    match event {
        Event::Init => {
            *relist = Some(M::default());
            false
        }
        Event::InitApply(object) => {
            relist.get_or_insert_default().apply(object, now);
            false
        }
        Event::InitDone => {
            let mut fresh = relist.take().unwrap_or_default();
            if let Some(previous) = live {
                fresh.inherit(previous);
            }
            *live = Some(fresh);
            true
        }
        Event::Apply(object) => live.as_mut().map(|m| m.apply(object, now)).is_some(),
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
        Ok(Err(err)) => Err(match rejected_certificate(&err) {
            Some(why) => format!(
                "the server's TLS certificate was rejected ({why}); check the owner's caFile"
            ),
            None => error_chain(&err),
        }),
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(PROBE_TIMEOUT)
        )),
    }
}

/// Why the server's certificate was refused, when that is what failed. rustls's error sits
/// inside an `io::Error` (possibly wrapped in another), whose `source()` skips what it wraps,
/// so wrapped errors are looked into as well as sources.
fn rejected_certificate(err: &(dyn StdError + 'static)) -> Option<String> {
    let mut pending: Vec<&(dyn StdError + 'static)> = vec![err];
    // Bounded: error chains are short; never loop on a pathological one.
    for _ in 0..32 {
        let e = pending.pop()?;
        if let Some(rustls::Error::InvalidCertificate(why)) = e.downcast_ref::<rustls::Error>() {
            return Some(format!("{why:?}"));
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            pending.push(inner);
        }
        if let Some(source) = e.source() {
            pending.push(source);
        }
    }
    None
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

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn held(holder: &str, renew: &str, duration: i64) -> Lease {
        lease(json!({
            "holderIdentity": holder,
            "renewTime": renew,
            "leaseDurationSeconds": duration,
        }))
    }

    #[test]
    fn lease_record_reads_holder_renewal_and_duration() {
        let full = LeaseRecord::of(&held("a", "2024-05-01T10:00:00.250000Z", 15));
        assert_eq!(full.holder.as_deref(), Some("a"));
        assert_eq!(full.renew_time, Some(at("2024-05-01T10:00:00.25Z")));
        assert_eq!(full.duration, Some(secs(15)));
        let no_renew = LeaseRecord::of(&lease(
            json!({"holderIdentity": "a", "leaseDurationSeconds": 15}),
        ));
        assert_eq!(no_renew.renew_time, None);
        assert_eq!(
            LeaseRecord::of(&held("", "2024-05-01T10:00:00Z", 15)).holder,
            None
        );
        assert_eq!(
            LeaseRecord::of(&held("a", "2024-05-01T10:00:00Z", -1)).duration,
            None
        );
        assert_eq!(
            LeaseRecord::of(&held("a", "2024-05-01T10:00:00Z", 0)).duration,
            None
        );
        let empty = LeaseRecord::of(&lease(json!(null)));
        assert_eq!(
            (empty.holder, empty.renew_time, empty.duration),
            (None, None, None)
        );
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

    /// Judged on our clock: the holder's renewTime may be an hour off either way; only its
    /// changes count, and first sight gets one full duration.
    #[test]
    fn lease_model_judges_renewals_on_our_clock() {
        let t0 = Instant::now();
        let mut model = LeaseModel::default();
        let missing = model.evaluate(t0);
        assert_eq!(missing.verdict, Observed::Unknown);
        assert_eq!(missing.next_change, None);

        // renewTime far in the past by our wall clock: still up for a duration from now.
        model.apply(held("a", "2001-01-01T00:00:00.000000Z", 10), t0);
        let live = model.evaluate(t0 + secs(9));
        assert_eq!(live.verdict, Observed::Up, "{}", live.detail);
        assert_eq!(live.next_change, Some(t0 + secs(10)));
        // The same record again (a resync, another field changing) is not a renewal.
        model.apply(held("a", "2001-01-01T00:00:00.000000Z", 10), t0 + secs(5));
        let expired = model.evaluate(t0 + secs(10));
        assert_eq!(
            expired.verdict,
            Observed::Down,
            "expiry instant itself is down"
        );
        assert_eq!(expired.next_change, None);

        // A renewal seen at t0+12, even to a time far in the future, restarts the duration.
        model.apply(held("a", "2099-01-01T00:00:00.000000Z", 10), t0 + secs(12));
        assert_eq!(model.evaluate(t0 + secs(21)).verdict, Observed::Up);
        assert_eq!(model.evaluate(t0 + secs(22)).verdict, Observed::Down);
        // So does a new holder with the same renewTime.
        model.apply(held("b", "2099-01-01T00:00:00.000000Z", 10), t0 + secs(30));
        assert_eq!(model.evaluate(t0 + secs(39)).verdict, Observed::Up);

        model.apply(lease(json!({"holderIdentity": "a"})), t0 + secs(31));
        assert_eq!(model.evaluate(t0 + secs(31)).verdict, Observed::Down);
        model.apply(held("", "2099-01-01T00:00:01.000000Z", 10), t0 + secs(32));
        assert_eq!(
            model.evaluate(t0 + secs(32)).verdict,
            Observed::Down,
            "no holder"
        );
        model.apply(held("a", "2099-01-01T00:00:02.000000Z", 10), t0 + secs(33));
        assert_eq!(model.evaluate(t0 + secs(33)).verdict, Observed::Up);
        model.delete(lease(json!(null)));
        assert_eq!(model.evaluate(t0 + secs(33)).verdict, Observed::Unknown);
    }

    /// A relist is not a renewal: an unchanged lease keeps the instant it was last seen renewed.
    #[test]
    fn lease_relist_keeps_when_the_renewal_was_seen() {
        let t0 = Instant::now();
        let record = || held("a", "2024-05-01T10:00:00.000000Z", 10);
        let mut live: Option<LeaseModel> = None;
        let mut relist = None;
        apply_event(Event::Init, &mut live, &mut relist, t0);
        apply_event(Event::InitApply(record()), &mut live, &mut relist, t0);
        apply_event(Event::InitDone, &mut live, &mut relist, t0);
        for event in [Event::Init, Event::InitApply(record()), Event::InitDone] {
            apply_event(event, &mut live, &mut relist, t0 + secs(8));
        }
        let model = live.as_ref().unwrap();
        assert_eq!(model.evaluate(t0 + secs(10)).verdict, Observed::Down);
        // A relist that shows a renewal restarts it.
        let renewed = held("a", "2024-05-01T10:00:09.000000Z", 10);
        for event in [Event::Init, Event::InitApply(renewed), Event::InitDone] {
            apply_event(event, &mut live, &mut relist, t0 + secs(11));
        }
        assert_eq!(
            live.as_ref().unwrap().evaluate(t0 + secs(20)).verdict,
            Observed::Up
        );
    }

    #[test]
    fn pods_model_is_up_while_any_pod_is_ready() {
        let now = Instant::now();
        let mut model = PodsModel::default();
        assert_eq!(model.evaluate(now).verdict, Observed::Unknown, "no pod");
        model.apply(pod("a", "False", false), now);
        assert_eq!(model.evaluate(now).verdict, Observed::Down);
        model.apply(pod("b", "True", false), now);
        assert_eq!(model.evaluate(now).verdict, Observed::Up);
        model.apply(pod("b", "True", true), now);
        assert_eq!(
            model.evaluate(now).verdict,
            Observed::Down,
            "a terminating pod does not count"
        );
        model.apply(pod("a", "True", false), now);
        assert_eq!(model.evaluate(now).verdict, Observed::Up);
        model.delete(pod("a", "True", false));
        assert_eq!(model.evaluate(now).verdict, Observed::Down);
        assert_eq!(model.0.len(), 1);
    }

    #[test]
    fn a_relist_replaces_what_was_known_at_once() {
        let now = Instant::now();
        let up = |live: &Option<PodsModel>| live.as_ref().unwrap().evaluate(now).verdict;
        let mut live: Option<PodsModel> = None;
        let mut relist = None;
        assert!(!apply_event(Event::Init, &mut live, &mut relist, now));
        assert!(!apply_event(
            Event::InitApply(pod("a", "True", false)),
            &mut live,
            &mut relist,
            now
        ));
        assert!(live.is_none(), "nothing is known before the list completes");
        assert!(apply_event(Event::InitDone, &mut live, &mut relist, now));
        assert_eq!(up(&live), Observed::Up);

        // A relist in which pod a is gone: the old view holds until the relist is complete.
        assert!(!apply_event(Event::Init, &mut live, &mut relist, now));
        assert!(!apply_event(
            Event::InitApply(pod("b", "False", false)),
            &mut live,
            &mut relist,
            now
        ));
        assert_eq!(up(&live), Observed::Up);
        assert!(apply_event(Event::InitDone, &mut live, &mut relist, now));
        assert_eq!(up(&live), Observed::Down);
        assert_eq!(live.as_ref().unwrap().0.keys().collect::<Vec<_>>(), ["b"]);

        assert!(apply_event(
            Event::Apply(pod("b", "True", false)),
            &mut live,
            &mut relist,
            now
        ));
        assert_eq!(up(&live), Observed::Up);
        assert!(apply_event(
            Event::Delete(pod("b", "True", false)),
            &mut live,
            &mut relist,
            now
        ));
        assert_eq!(up(&live), Observed::Unknown, "the model holds no pod");
    }

    #[test]
    fn deployment_model_holds_the_one_deployment() {
        let now = Instant::now();
        let mut model = DeploymentModel::default();
        assert_eq!(model.evaluate(now).verdict, Observed::Unknown);
        model.apply(deployment(json!({"availableReplicas": 2})), now);
        assert_eq!(model.evaluate(now).verdict, Observed::Up);
        model.apply(deployment(json!({"availableReplicas": 0})), now);
        assert_eq!(model.evaluate(now).verdict, Observed::Down);
        model.apply(deployment(json!({"availableReplicas": 1})), now);
        model.delete(deployment(json!(null)));
        assert_eq!(model.evaluate(now).verdict, Observed::Unknown);
    }

    /// Nothing held: unknown until something was seen, down (deleted) after.
    #[test]
    fn absence_is_unknown_until_seen_and_down_after() {
        let eval = |verdict| Evaluation::new(verdict, "x");
        let mut seen = false;
        assert_eq!(
            judge(eval(Observed::Unknown), &mut seen, "lease").0,
            Observed::Unknown
        );
        assert!(!seen);
        assert_eq!(
            judge(eval(Observed::Down), &mut seen, "lease").0,
            Observed::Down
        );
        assert!(seen, "an object reporting failure was read");
        let (state, detail) = judge(eval(Observed::Unknown), &mut seen, "lease");
        assert_eq!(state, Observed::Down);
        assert!(detail.contains("deleted"), "{detail}");
        assert_eq!(
            judge(eval(Observed::Up), &mut seen, "lease").0,
            Observed::Up
        );
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

        let owner_state = |name: &str, state: &str| {
            owners
                .inner
                .metrics
                .owner_state
                .get_metric_with_label_values(&[name, "deployment", state])
                .unwrap()
                .get()
        };
        assert_eq!(owner_state("a.example.com", "unknown"), 1);
        assert_eq!(owner_state("a.example.com", "up"), 0);

        // A list that finds nothing: still unknown, now with a reason, and synced.
        handle.observe(Observed::Unknown, "deployment not found".to_owned());
        assert_eq!(owners.state("a.example.com"), OwnerState::Unknown);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert_eq!(
            owners.unknown(),
            [
                "deployment kube-system/injector: unknown (deployment not found)",
                "lease kueue-system/leader: unknown (not observed yet)",
                "http http://127.0.0.1:1/healthz: unknown (not observed yet)",
            ]
        );
        assert_eq!(owners.not_synced().len(), 2);
        assert_eq!(owner_state("a.example.com", "unknown"), 1);

        let before = SystemTime::now();
        handle.observe(Observed::Up, "1 available replicas".to_owned());
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
        assert_eq!(
            (
                owner_state("b.example.com", "up"),
                owner_state("b.example.com", "unknown")
            ),
            (1, 0)
        );

        handle.observe(Observed::Up, "2 available replicas".to_owned());
        assert_eq!(
            owners.state("a.example.com"),
            OwnerState::Up { since: up_since }
        );
        assert!(!changes.has_changed().unwrap(), "no change, no wake-up");
        assert_eq!(owners.snapshot()[0].detail, "2 available replicas");

        handle.observe(Observed::Down, "0 available replicas".to_owned());
        let OwnerState::Down { since } = owners.state("b.example.com") else {
            panic!("not down: {:?}", owners.state("b.example.com"));
        };
        assert!(since >= up_since);
        assert!(changes.has_changed().unwrap());
        assert_eq!(
            (owner_up("a.example.com"), owner_up("b.example.com")),
            (0, 0)
        );
        assert_eq!(
            (
                owner_state("a.example.com", "down"),
                owner_state("a.example.com", "up")
            ),
            (1, 0)
        );
    }
}
