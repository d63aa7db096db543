//! How observations become an owner's state: a small model per owner kind folds the objects a
//! watch reports into a summary (never whole objects) and says up, down or unknown, and when
//! that changes without any event (a lease expiring). No I/O; instants come in as arguments,
//! and the `initguard` crate turns kube-runtime's watcher events into [`Observation`]s.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::config::OwnerSpec;
use crate::policy::OwnerState;

/// What a watcher or prober concluded from one observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The object was read and reports the owner alive.
    Up,
    /// The object was read and reports failure, or was deleted after it was seen.
    Down,
    /// Nothing was read: the object does not exist and never did while we watched.
    Unknown,
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
    /// `spec.renewTime`, on the holder's clock (only ever compared for change).
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

/// What a watcher remembers about the watched objects (a summary, never whole objects).
pub trait Model<K>: Default {
    /// Fold in an object as listed or watched at `now` (this process's monotonic clock).
    fn apply(&mut self, object: K, now: Instant);
    /// Forget an object the watch reports deleted.
    fn delete(&mut self, object: K);
    /// Carry over from the model a relist replaces what must survive it (when a lease was
    /// last seen renewed): a relist is not a renewal.
    fn inherit(&mut self, _previous: &Self) {}
    /// What the objects held say at `now`, and the next instant the answer changes without
    /// any event.
    fn evaluate(&self, now: Instant) -> Evaluation;
}

/// A model's verdict at one instant, with what it rests on.
#[derive(Debug)]
pub struct Evaluation {
    /// Up or Down when an object is held; Unknown when there is none.
    pub verdict: Observed,
    /// Why, in words for the log and status (e.g. `2 available replicas`).
    pub detail: String,
    /// The next instant the verdict changes without any event (a lease expiring); None
    /// when only an event can change it.
    pub next_change: Option<Instant>,
}

impl Evaluation {
    /// A verdict and its detail, with no change foreseen.
    pub fn new(verdict: Observed, detail: impl Into<String>) -> Evaluation {
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
pub fn judge(evaluation: Evaluation, seen: &mut bool, what: &str) -> (Observed, String) {
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
pub struct DeploymentModel(Option<DeploymentSummary>);

/// What [`DeploymentModel`] keeps of the Deployment.
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
pub struct LeaseModel(Option<LeaseSummary>);

/// What [`LeaseModel`] keeps of the Lease.
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
pub struct PodsModel(HashMap<String, bool>);

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

/// A Service's EndpointSlices by name: (ready endpoints, endpoints). An endpoint whose
/// `conditions.ready` is unset counts as ready, as the API documents ("nil should be
/// interpreted as true").
#[derive(Default)]
pub struct EndpointsModel(HashMap<String, (usize, usize)>);

/// Ready and all endpoints of one EndpointSlice.
pub fn slice_endpoints(slice: &EndpointSlice) -> (usize, usize) {
    let ready = slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .count();
    (ready, slice.endpoints.len())
}

impl Model<EndpointSlice> for EndpointsModel {
    fn apply(&mut self, object: EndpointSlice, _: Instant) {
        let counts = slice_endpoints(&object);
        if let Some(name) = object.metadata.name {
            self.0.insert(name, counts);
        }
    }

    fn delete(&mut self, object: EndpointSlice) {
        if let Some(name) = &object.metadata.name {
            self.0.remove(name);
        }
    }

    fn evaluate(&self, _: Instant) -> Evaluation {
        if self.0.is_empty() {
            return Evaluation::new(Observed::Unknown, "no EndpointSlice of the Service");
        }
        let (ready, all) = self
            .0
            .values()
            .fold((0, 0), |(r, a), (ready, all)| (r + ready, a + all));
        endpoints_verdict(ready, all)
    }
}

/// Up while at least one endpoint is ready.
fn endpoints_verdict(ready: usize, all: usize) -> Evaluation {
    Evaluation::new(
        if ready >= 1 {
            Observed::Up
        } else {
            Observed::Down
        },
        format!("{ready} of {all} endpoints ready"),
    )
}

/// A Service's core/v1 Endpoints, read where the server serves no EndpointSlices (before
/// 1.21): (ready addresses, all addresses) of the one object named after the Service.
#[derive(Default)]
pub struct CoreEndpointsModel(Option<(usize, usize)>);

/// Ready and all addresses of a core/v1 Endpoints object (`addresses` are the ready ones,
/// `notReadyAddresses` the others).
fn core_endpoints(endpoints: &Endpoints) -> (usize, usize) {
    endpoints
        .subsets
        .iter()
        .flatten()
        .fold((0, 0), |(ready, all), subset| {
            let up = subset.addresses.as_ref().map_or(0, Vec::len);
            let down = subset.not_ready_addresses.as_ref().map_or(0, Vec::len);
            (ready + up, all + up + down)
        })
}

impl Model<Endpoints> for CoreEndpointsModel {
    fn apply(&mut self, object: Endpoints, _: Instant) {
        self.0 = Some(core_endpoints(&object));
    }

    fn delete(&mut self, _: Endpoints) {
        self.0 = None;
    }

    fn evaluate(&self, _: Instant) -> Evaluation {
        match self.0 {
            None => Evaluation::new(Observed::Unknown, "no Endpoints of the Service"),
            Some((ready, all)) => endpoints_verdict(ready, all),
        }
    }
}

/// Whether the one Service watched by name exists.
#[derive(Default)]
pub struct ServicePresence(bool);

impl ServicePresence {
    /// Taken as present: the Service cannot be read, so the endpoints alone decide.
    pub fn assumed() -> ServicePresence {
        ServicePresence(true)
    }
}

impl<K> Model<K> for ServicePresence {
    fn apply(&mut self, _: K, _: Instant) {
        self.0 = true;
    }

    fn delete(&mut self, _: K) {
        self.0 = false;
    }

    fn evaluate(&self, _: Instant) -> Evaluation {
        if self.0 {
            Evaluation::new(Observed::Up, "Service found")
        } else {
            Evaluation::new(Observed::Unknown, "Service not found")
        }
    }
}

/// A webhook's default owner, from its Service `target` and that Service's endpoints
/// (EndpointSlices, or core/v1 Endpoints before 1.21): a Service read and not found is down,
/// since the API server fails every call to the webhook ("service not found"); otherwise the
/// ready endpoints decide.
pub fn webhook_service<K, M: Model<K>>(
    service: &ServicePresence,
    endpoints: &M,
    target: &str,
    now: Instant,
) -> Evaluation {
    if service.0 {
        endpoints.evaluate(now)
    } else {
        Evaluation::new(
            Observed::Down,
            format!("Service {target} not found: the API server fails every call to the webhook"),
        )
    }
}

/// One report of a watch, in the order the watch delivers them.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation<K> {
    /// A (re)list begins: what follows until [`Observation::RelistDone`] replaces the view.
    RelistStart,
    /// One object of the list.
    Listed(K),
    /// The list is complete.
    RelistDone,
    /// An object was added or changed.
    Applied(K),
    /// An object was deleted.
    Deleted(K),
}

/// Fold one observation, received at `now`, into the model; true when `live` changed. Before
/// the first complete list `live` is None and stays so until `RelistDone`; a relist is
/// collected in `relist` and replaces `live` at once, so objects gone meanwhile disappear with
/// it.
pub fn fold<K, M: Model<K>>(
    observation: Observation<K>,
    live: &mut Option<M>,
    relist: &mut Option<M>,
    now: Instant,
) -> bool {
    match observation {
        Observation::RelistStart => {
            *relist = Some(M::default());
            false
        }
        Observation::Listed(object) => {
            relist.get_or_insert_default().apply(object, now);
            false
        }
        Observation::RelistDone => {
            let mut fresh = relist.take().unwrap_or_default();
            if let Some(previous) = live {
                fresh.inherit(previous);
            }
            *live = Some(fresh);
            true
        }
        Observation::Applied(object) => live.as_mut().map(|m| m.apply(object, now)).is_some(),
        Observation::Deleted(object) => live.as_mut().map(|m| m.delete(object)).is_some(),
    }
}

/// Drop sub-millisecond noise from durations shown to people.
pub fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One initializer's owner and its state, for `/status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReport {
    /// The initializer (or listed webhook) this owner serves.
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
        OwnerSpec::Deployment(r)
        | OwnerSpec::Lease(r)
        | OwnerSpec::Service(r)
        | OwnerSpec::WebhookService(r) => {
            format!("{}/{}", r.namespace, r.name)
        }
        OwnerSpec::Pods {
            namespace,
            selector,
        } => format!("{namespace}/{selector}"),
        OwnerSpec::Http { url, .. } => url.clone(),
        OwnerSpec::Apiserver(c) => format!("{}/{} (dry run)", c.namespace, c.resource.as_str()),
    }
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

    /// An EndpointSlice of Service `svc` whose endpoints have these `ready` conditions
    /// (None: the condition is unset).
    fn slice(name: &str, ready: &[Option<bool>]) -> EndpointSlice {
        let endpoints: Vec<serde_json::Value> = ready
            .iter()
            .map(|r| match r {
                Some(r) => json!({"addresses": ["10.0.0.1"], "conditions": {"ready": r}}),
                None => json!({"addresses": ["10.0.0.1"]}),
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns",
                         "labels": {"kubernetes.io/service-name": "svc"}},
            "addressType": "IPv4",
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    #[test]
    fn a_webhooks_default_owner_is_down_while_its_service_is_missing_and_else_its_endpoints() {
        let now = Instant::now();
        let meta = || k8s_openapi::api::core::v1::Service::default();
        let mut service = ServicePresence::default();
        let mut slices = EndpointsModel::default();
        let mut seen = false;
        // Never seen, and read as absent: down, unlike an owner named in the config.
        let (state, detail) = judge(
            webhook_service(&service, &slices, "ns/svc", now),
            &mut seen,
            "EndpointSlice",
        );
        assert_eq!(state, Observed::Down);
        assert!(detail.contains("Service ns/svc not found"), "{detail}");
        // Present: the endpoints decide, ready or not.
        Model::apply(&mut service, meta(), now);
        slices.apply(slice("a", &[Some(true)]), now);
        let verdict = |service: &ServicePresence, slices: &EndpointsModel, seen: &mut bool| {
            judge(
                webhook_service(service, slices, "ns/svc", now),
                seen,
                "EndpointSlice",
            )
            .0
        };
        assert_eq!(verdict(&service, &slices, &mut seen), Observed::Up);
        slices.apply(slice("a", &[Some(false)]), now);
        assert_eq!(verdict(&service, &slices, &mut seen), Observed::Down);
        slices.apply(slice("a", &[Some(true)]), now);
        // Deleted again: down whatever the slices still say.
        Model::delete(&mut service, meta());
        assert_eq!(verdict(&service, &slices, &mut seen), Observed::Down);
    }

    #[test]
    fn a_service_is_up_while_an_endpoint_is_ready_down_with_none_unknown_before_any_slice() {
        let now = Instant::now();
        let mut seen = false;
        let mut model = EndpointsModel::default();
        let (state, detail) = judge(model.evaluate(now), &mut seen, "EndpointSlice");
        assert_eq!(state, Observed::Unknown, "{detail}");
        model.apply(slice("a", &[Some(false), Some(false)]), now);
        let (state, detail) = judge(model.evaluate(now), &mut seen, "EndpointSlice");
        assert_eq!(
            (state, detail.as_str()),
            (Observed::Down, "0 of 2 endpoints ready")
        );
        // An unset condition counts as ready, as the API documents.
        model.apply(slice("b", &[None]), now);
        let (state, detail) = judge(model.evaluate(now), &mut seen, "EndpointSlice");
        assert_eq!(
            (state, detail.as_str()),
            (Observed::Up, "1 of 3 endpoints ready")
        );
        model.delete(slice("b", &[]));
        assert_eq!(
            judge(model.evaluate(now), &mut seen, "EndpointSlice").0,
            Observed::Down
        );
        // Every slice gone after one was seen: down, not unknown.
        model.delete(slice("a", &[]));
        assert_eq!(
            judge(model.evaluate(now), &mut seen, "EndpointSlice").0,
            Observed::Down
        );
        assert_eq!(
            slice_endpoints(&slice("c", &[Some(true), None, Some(false)])),
            (2, 3)
        );
    }

    /// core/v1 Endpoints named after Service `svc`: `ready` addresses and `not_ready` ones,
    /// split over two subsets as the endpoints controller does for two ports.
    fn core(ready: usize, not_ready: usize) -> Endpoints {
        let ips = |n: usize| -> Vec<serde_json::Value> {
            (0..n)
                .map(|i| json!({"ip": format!("10.0.0.{i}")}))
                .collect()
        };
        serde_json::from_value(json!({
            "metadata": {"name": "svc", "namespace": "ns"},
            "subsets": [
                {"addresses": ips(ready), "ports": [{"port": 443}]},
                {"notReadyAddresses": ips(not_ready), "ports": [{"port": 8443}]},
            ],
        }))
        .unwrap()
    }

    #[test]
    fn before_endpoint_slices_a_service_is_judged_by_its_core_endpoints() {
        let now = Instant::now();
        let mut seen = false;
        let mut model = CoreEndpointsModel::default();
        let (state, detail) = judge(model.evaluate(now), &mut seen, "Endpoints");
        assert_eq!(
            (state, detail.as_str()),
            (Observed::Unknown, "no Endpoints of the Service")
        );
        model.apply(core(0, 2), now);
        let (state, detail) = judge(model.evaluate(now), &mut seen, "Endpoints");
        assert_eq!(
            (state, detail.as_str()),
            (Observed::Down, "0 of 2 endpoints ready")
        );
        model.apply(core(1, 2), now);
        let (state, detail) = judge(model.evaluate(now), &mut seen, "Endpoints");
        assert_eq!(
            (state, detail.as_str()),
            (Observed::Up, "1 of 3 endpoints ready")
        );
        // An object with no subsets at all (no pod behind the Service yet) has none ready.
        model.apply(
            serde_json::from_value(json!({"metadata": {"name": "svc"}})).unwrap(),
            now,
        );
        assert_eq!(
            judge(model.evaluate(now), &mut seen, "Endpoints").0,
            Observed::Down
        );
        // Deleted after it was seen: down, not unknown.
        model.apply(core(1, 0), now);
        model.delete(core(0, 0));
        assert_eq!(
            judge(model.evaluate(now), &mut seen, "Endpoints").0,
            Observed::Down
        );
        // A webhook's default owner on such a server: the Service, then these endpoints.
        let mut service = ServicePresence::default();
        model.apply(core(1, 0), now);
        assert_eq!(
            webhook_service(&service, &model, "ns/svc", now).verdict,
            Observed::Down
        );
        Model::apply(
            &mut service,
            k8s_openapi::api::core::v1::Service::default(),
            now,
        );
        assert_eq!(
            webhook_service(&service, &model, "ns/svc", now).verdict,
            Observed::Up
        );
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
        fold(Observation::RelistStart, &mut live, &mut relist, t0);
        fold(Observation::Listed(record()), &mut live, &mut relist, t0);
        fold(Observation::RelistDone, &mut live, &mut relist, t0);
        for event in [
            Observation::RelistStart,
            Observation::Listed(record()),
            Observation::RelistDone,
        ] {
            fold(event, &mut live, &mut relist, t0 + secs(8));
        }
        let model = live.as_ref().unwrap();
        assert_eq!(model.evaluate(t0 + secs(10)).verdict, Observed::Down);
        // A relist that shows a renewal restarts it.
        let renewed = held("a", "2024-05-01T10:00:09.000000Z", 10);
        for event in [
            Observation::RelistStart,
            Observation::Listed(renewed),
            Observation::RelistDone,
        ] {
            fold(event, &mut live, &mut relist, t0 + secs(11));
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
        assert!(!fold(Observation::RelistStart, &mut live, &mut relist, now));
        assert!(!fold(
            Observation::Listed(pod("a", "True", false)),
            &mut live,
            &mut relist,
            now
        ));
        assert!(live.is_none(), "nothing is known before the list completes");
        assert!(fold(Observation::RelistDone, &mut live, &mut relist, now));
        assert_eq!(up(&live), Observed::Up);

        // A relist in which pod a is gone: the old view holds until the relist is complete.
        assert!(!fold(Observation::RelistStart, &mut live, &mut relist, now));
        assert!(!fold(
            Observation::Listed(pod("b", "False", false)),
            &mut live,
            &mut relist,
            now
        ));
        assert_eq!(up(&live), Observed::Up);
        assert!(fold(Observation::RelistDone, &mut live, &mut relist, now));
        assert_eq!(up(&live), Observed::Down);
        assert_eq!(live.as_ref().unwrap().0.keys().collect::<Vec<_>>(), ["b"]);

        assert!(fold(
            Observation::Applied(pod("b", "True", false)),
            &mut live,
            &mut relist,
            now
        ));
        assert_eq!(up(&live), Observed::Up);
        assert!(fold(
            Observation::Deleted(pod("b", "True", false)),
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
    /// A watched Lease or Deployment deleted after it was seen: the model holds nothing, and
    /// the owner is judged down (never unknown, which would hide the outage).
    #[test]
    fn a_deleted_lease_or_deployment_owner_is_down() {
        fn follow<K, M: Model<K>>(object: impl Fn() -> K) -> (Observed, String) {
            let now = Instant::now();
            let (mut live, mut relist): (Option<M>, Option<M>) = (None, None);
            let mut seen = false;
            fold(Observation::RelistStart, &mut live, &mut relist, now);
            fold(Observation::Listed(object()), &mut live, &mut relist, now);
            fold(Observation::RelistDone, &mut live, &mut relist, now);
            let model = live.as_ref().expect("listed");
            let (first, _) = judge(model.evaluate(now), &mut seen, "owner");
            assert_eq!(first, Observed::Up);
            assert!(fold(
                Observation::Deleted(object()),
                &mut live,
                &mut relist,
                now
            ));
            let model = live.as_ref().expect("still listed");
            judge(model.evaluate(now), &mut seen, "owner")
        }
        let lease = || held("a", "2024-05-01T10:00:00.000000Z", 10);
        let (state, detail) = follow::<Lease, LeaseModel>(lease);
        assert_eq!(state, Observed::Down, "{detail}");
        assert!(detail.contains("deleted"), "{detail}");
        let available = || deployment(json!({"availableReplicas": 1}));
        let (state, detail) = follow::<Deployment, DeploymentModel>(available);
        assert_eq!(state, Observed::Down, "{detail}");
        assert!(detail.contains("deleted"), "{detail}");
    }

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
}
