//! Leader election, so several masters act as one writer.
//!
//! The client-go algorithm: acquire or renew with optimistic concurrency (update with
//! resourceVersion, 409 loses), judge another holder's lease by when *we* last saw it change
//! (immune to clock skew), and step down when renewals fail for `renewDeadline`, which is
//! shorter than the lease duration, so a partitioned leader stops writing before anyone else
//! may take over. (kube-lease-manager keeps claiming leadership while its renewals fail and
//! relies on server-side apply; neither fits a guard that must never write twice.)
//!
//! The lock is whatever the server serves, found by discovery at start-up
//! ([`crate::discovery::lock_kind`]): a coordination.k8s.io/v1 Lease (1.14+), else a
//! coordination.k8s.io/v1beta1 Lease (1.12-1.13), else a ConfigMap carrying client-go's
//! `control-plane.alpha.kubernetes.io/leader` annotation (any version), so HA works on legacy
//! clusters too and existing tools can read who leads.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind, TypeMeta};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::config::LeaderElection;

use crate::discovery::{Discovery, LockKind, lock_kind};
use crate::metrics::Metrics;
use crate::supervise::Readiness;

/// The annotation client-go's ConfigMap and Endpoints locks keep their record in.
pub const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

/// What [`Readiness`] lists a failing election under.
const PROBLEM_KEY: &str = "leader election";

/// Timing derived from the lease duration with client-go's default ratios (15 s / 10 s / 2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Timing {
    /// Ratios of client-go's defaults applied to `lease_duration`.
    pub fn for_duration(lease_duration: Duration) -> Timing {
        Timing {
            lease_duration,
            renew_deadline: lease_duration * 2 / 3,
            retry_period: (lease_duration * 2 / 15).max(Duration::from_millis(100)),
        }
    }
}

/// client-go's `LeaderElectionRecord`, the JSON kept in the ConfigMap annotation (and the
/// fields of a Lease's spec). Times are written with microseconds, which Go's RFC 3339 parser
/// (and so client-go) reads as well as whole seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderRecord {
    #[serde(default)]
    pub holder_identity: String,
    #[serde(default)]
    pub lease_duration_seconds: i32,
    #[serde(default)]
    pub acquire_time: Option<MicroTime>,
    #[serde(default)]
    pub renew_time: Option<MicroTime>,
    #[serde(default)]
    pub leader_transitions: i32,
}

/// A unique identity for this replica: `$POD_NAME` or the host name, plus a random suffix.
pub fn identity() -> String {
    identity_from([
        std::env::var("POD_NAME").ok(),
        std::env::var("HOSTNAME").ok(),
        std::fs::read_to_string("/etc/hostname").ok(),
    ])
}

/// The first non-blank candidate (else `initguard`), `_`, 8 random lowercase alphanumerics.
fn identity_from(candidates: impl IntoIterator<Item = Option<String>>) -> String {
    let base = candidates
        .into_iter()
        .flatten()
        .map(|s| s.trim().to_owned())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "initguard".into());
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(8)
        .map(|c| char::from(c).to_ascii_lowercase())
        .collect();
    format!("{base}_{suffix}")
}

/// How the election ends: the guard's lifecycle says which once its writers have drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// Every write was answered: hand the lease back so another replica takes over at once.
    Release,
    /// A write may still be committed: stop renewing and let the lease expire on its own, so
    /// no other replica writes beside it.
    LeaveToExpire,
}

/// The election through `discovery`'s client, as a task for the caller to spawn (under
/// [`crate::supervise`]); it ends when `stop` says how (a dropped sender counts as
/// [`Departure::LeaveToExpire`]). The receiver
/// is `true` while this replica may write; with leader election disabled it is always `true`.
/// Why this replica cannot take part (no discovery, a lock it may not write) goes to
/// `readiness`, and so to `/readyz` and `/status`. `renewed` gets the instant at which each
/// successful acquire or renew round *started* (the earliest the lease record can say; others
/// count its duration from their later observation), and None on losing the lease: the
/// actuator fences writes with it.
pub fn elect(
    discovery: Discovery,
    config: &LeaderElection,
    identity: String,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    renewed: watch::Sender<Option<Instant>>,
    stop: oneshot::Receiver<Departure>,
) -> (watch::Receiver<bool>, BoxFuture<'static, ()>) {
    if !config.enabled {
        metrics.is_leader.set(1);
        let (tx, rx) = watch::channel(true);
        let task = Box::pin(async move {
            let _ = stop.await;
            drop(tx);
        });
        return (rx, task);
    }
    let (tx, rx) = watch::channel(false);
    let elector = Elector {
        client: discovery.client().clone(),
        discovery,
        namespace: config.namespace.clone(),
        lock: None,
        name: config.name.clone(),
        identity,
        timing: Timing::for_duration(config.lease_duration),
        observed: None,
        metrics,
        readiness,
        tx,
        renewed,
    };
    (rx, Box::pin(elector.run(stop)))
}

/// The lock object in the group version chosen by discovery.
struct Lock {
    kind: LockKind,
    api: Api<DynamicObject>,
}

impl Lock {
    fn new(client: kube::Client, namespace: &str, kind: LockKind) -> Lock {
        let (group, version, kind_name, plural) = match kind {
            LockKind::LeaseV1 => ("coordination.k8s.io", "v1", "Lease", "leases"),
            LockKind::LeaseV1beta1 => ("coordination.k8s.io", "v1beta1", "Lease", "leases"),
            LockKind::ConfigMap => ("", "v1", "ConfigMap", "configmaps"),
        };
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind_name),
            plural,
        );
        Lock {
            kind,
            api: Api::namespaced_with(client, namespace, &resource),
        }
    }

    /// The record an object holds (an empty one when it holds none or an unreadable one,
    /// which the next write replaces, as client-go does).
    fn record(&self, object: &DynamicObject) -> LeaderRecord {
        match self.kind {
            LockKind::ConfigMap => object
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LEADER_ANNOTATION))
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default(),
            LockKind::LeaseV1 | LockKind::LeaseV1beta1 => {
                let spec = &object.data["spec"];
                let time = |key: &str| serde_json::from_value(spec[key].clone()).ok();
                LeaderRecord {
                    holder_identity: spec["holderIdentity"].as_str().unwrap_or("").to_owned(),
                    lease_duration_seconds: spec["leaseDurationSeconds"]
                        .as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .unwrap_or(0),
                    acquire_time: time("acquireTime"),
                    renew_time: time("renewTime"),
                    leader_transitions: spec["leaseTransitions"]
                        .as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .unwrap_or(0),
                }
            }
        }
    }

    /// `object` (or a new object named `name`) holding `record`.
    fn with_record(&self, mut object: DynamicObject, record: &LeaderRecord) -> DynamicObject {
        match self.kind {
            LockKind::ConfigMap => {
                // Serializing plain strings and numbers cannot fail.
                let text = serde_json::to_string(record).unwrap_or_default();
                object
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(LEADER_ANNOTATION.to_owned(), text);
            }
            LockKind::LeaseV1 | LockKind::LeaseV1beta1 => {
                let holder =
                    (!record.holder_identity.is_empty()).then(|| record.holder_identity.clone());
                object.data["spec"] = json!({
                    "holderIdentity": holder,
                    "leaseDurationSeconds": record.lease_duration_seconds,
                    "acquireTime": record.acquire_time,
                    "renewTime": record.renew_time,
                    "leaseTransitions": record.leader_transitions,
                });
            }
        }
        object
    }

    fn empty(&self, name: &str) -> DynamicObject {
        let (api_version, kind) = match self.kind {
            LockKind::LeaseV1 => ("coordination.k8s.io/v1", "Lease"),
            LockKind::LeaseV1beta1 => ("coordination.k8s.io/v1beta1", "Lease"),
            LockKind::ConfigMap => ("v1", "ConfigMap"),
        };
        DynamicObject {
            types: Some(TypeMeta {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            }),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            data: Value::Object(Default::default()),
        }
    }

    async fn get(&self, name: &str) -> Result<Option<DynamicObject>, kube::Error> {
        self.api.get_opt(name).await
    }

    /// Create `name` holding `record`; false when someone else created it first.
    async fn create(&self, name: &str, record: &LeaderRecord) -> Result<bool, kube::Error> {
        let object = self.with_record(self.empty(name), record);
        match self.api.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Replace `object` (guarded by its resourceVersion) to hold `record`; false on conflict.
    async fn update(
        &self,
        name: &str,
        object: DynamicObject,
        record: &LeaderRecord,
    ) -> Result<bool, kube::Error> {
        let object = self.with_record(object, record);
        match self
            .api
            .replace(name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

struct Elector {
    client: kube::Client,
    discovery: Discovery,
    namespace: String,
    /// Chosen by discovery on the first round.
    lock: Option<Lock>,
    name: String,
    identity: String,
    timing: Timing,
    /// Last seen (holder, renewTime) of the record and when we saw it change.
    observed: Option<(String, Option<MicroTime>, Instant)>,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    tx: watch::Sender<bool>,
    /// Start of the last successful round while leading (write fencing).
    renewed: watch::Sender<Option<Instant>>,
}

impl Elector {
    async fn run(mut self, mut stop: oneshot::Receiver<Departure>) {
        let mut last_renew: Option<Instant> = None;
        // Since when rounds have failed without a success in between.
        let mut failing_since: Option<Instant> = None;
        let mut first = true;
        let departure = loop {
            let leading = *self.tx.borrow();
            let wait = if leading {
                self.timing.retry_period
            } else {
                jitter(self.timing.retry_period)
            };
            // The first round runs at once so a free lease is taken without delay.
            if !std::mem::take(&mut first) {
                tokio::select! {
                    d = &mut stop => break d.unwrap_or(Departure::LeaveToExpire),
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            let started = Instant::now();
            let attempt = tokio::select! {
                d = &mut stop => break d.unwrap_or(Departure::LeaveToExpire),
                r = tokio::time::timeout(self.timing.retry_period.max(Duration::from_secs(1)), self.try_acquire_or_renew()) => r,
            };
            match attempt {
                Ok(Ok(held)) => {
                    failing_since = None;
                    if self.readiness.set(PROBLEM_KEY, None) {
                        info!(lease = %self.name, "leader election works again");
                    }
                    if held {
                        last_renew = Some(Instant::now());
                        self.renewed.send_replace(Some(started));
                        if !leading {
                            info!(lease = %self.name, identity = %self.identity, "became leader");
                            self.set(true);
                        }
                    } else {
                        last_renew = None;
                        if leading {
                            warn!(lease = %self.name, "lost the lease to another replica; writes stopped");
                            self.set(false);
                        }
                    }
                }
                Ok(Err(_)) | Err(_) => {
                    let (error, permanent) = match &attempt {
                        Ok(Err(kube::Error::Api(s))) => (
                            format!("{} {}: {}", s.code, s.reason, s.message),
                            matches!(s.code, 401 | 403 | 404),
                        ),
                        Ok(Err(e)) => (e.to_string(), false),
                        _ => ("timed out".to_owned(), false),
                    };
                    debug!(lease = %self.name, %error, "leader election round failed");
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    // A denied or missing lock fails at once; anything else once it has
                    // lasted a whole lease duration (a blip is not worth a 503).
                    if (permanent || since.elapsed() >= self.timing.lease_duration)
                        && self.readiness.set(
                            PROBLEM_KEY,
                            Some(format!(
                                "cannot take part in the election on {}: {error}",
                                self.lock_name()
                            )),
                        )
                    {
                        warn!(lease = %self.name, lock = %self.lock_name(), %error,
                            "this replica cannot take part in the leader election");
                    }
                    if leading
                        && last_renew.is_none_or(|t| t.elapsed() >= self.timing.renew_deadline)
                    {
                        warn!(lease = %self.name, %error, "could not renew the lease within the renew deadline; writes stopped");
                        self.set(false);
                        last_renew = None;
                    }
                }
            }
        };
        if !*self.tx.borrow() {
            return;
        }
        self.set(false);
        if departure == Departure::LeaveToExpire {
            error!(lease = %self.name, expires_in = ?self.timing.lease_duration,
                "not releasing the lease: a write may still be committed; it expires on its own");
            return;
        }
        match tokio::time::timeout(Duration::from_secs(2), self.release()).await {
            Ok(Ok(())) => info!(lease = %self.name, "released the lease"),
            Ok(Err(e)) => warn!(lease = %self.name, error = %e, "could not release the lease"),
            Err(_) => warn!(lease = %self.name, "releasing the lease timed out"),
        }
    }

    fn set(&self, leading: bool) {
        if !leading {
            self.renewed.send_replace(None);
        }
        self.metrics.is_leader.set(i64::from(leading));
        self.tx.send_replace(leading);
    }

    /// `kube-system/initguard (v1 ConfigMap)`, for logs and problems.
    fn lock_name(&self) -> String {
        match &self.lock {
            Some(l) => format!("{}/{} ({})", self.namespace, self.name, l.kind.describe()),
            None => format!("{}/{}", self.namespace, self.name),
        }
    }

    /// Choose the lock from discovery, the first time.
    async fn ensure_lock(&mut self) -> Result<(), kube::Error> {
        if self.lock.is_none() {
            let kind = lock_kind(self.discovery.surface().await?);
            if kind == LockKind::LeaseV1 {
                info!(lease = %self.name, lock = kind.describe(), "leader election lock chosen");
            } else {
                warn!(lease = %self.name, lock = kind.describe(),
                    "coordination.k8s.io/v1 Leases are not served; leader election falls back to this lock");
            }
            self.lock = Some(Lock::new(self.client.clone(), &self.namespace, kind));
        }
        Ok(())
    }

    /// One round: true when we hold the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let duration_secs =
            i32::try_from(self.timing.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let name = self.name.clone();
        let identity = self.identity.clone();
        self.ensure_lock().await?;
        let Some(lock) = &self.lock else {
            return Ok(false);
        };
        let Some(object) = lock.get(&name).await? else {
            let record = LeaderRecord {
                holder_identity: identity,
                lease_duration_seconds: duration_secs,
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                leader_transitions: 0,
            };
            return lock.create(&name, &record).await;
        };
        let current = lock.record(&object);
        let holder = current.holder_identity.clone();
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(h, r, _)| (h, r) != (&current.holder_identity, &current.renew_time));
        if changed {
            self.observed = Some((holder.clone(), current.renew_time.clone(), Instant::now()));
        }
        let seen_at = self.observed.as_ref().map_or_else(Instant::now, |o| o.2);
        let theirs =
            Duration::from_secs(u64::try_from(current.lease_duration_seconds).unwrap_or(0));
        let ours = holder == self.identity;
        if !holder.is_empty() && !ours && seen_at.elapsed() < theirs {
            debug!(lease = %self.name, holder = %holder, "lease held by another replica");
            return Ok(false);
        }
        let mut record = current;
        if !ours {
            record.acquire_time = Some(now.clone());
            record.leader_transitions += 1;
        }
        record.holder_identity = self.identity.clone();
        record.renew_time = Some(now);
        record.lease_duration_seconds = duration_secs;
        lock.update(&name, object, &record).await
    }

    /// Give the lease up so another replica takes over at once rather than after expiry.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(lock) = &self.lock else {
            return Ok(());
        };
        let Some(object) = lock.get(&self.name).await? else {
            return Ok(());
        };
        let mut record = lock.record(&object);
        if record.holder_identity != self.identity {
            return Ok(());
        }
        record.holder_identity = String::new();
        record.lease_duration_seconds = 1;
        record.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        lock.update(&self.name, object, &record).await.map(|_| ())
    }
}

/// client-go's JitterFactor 1.2: wait between 1× and 2.2× the period.
fn jitter(period: Duration) -> Duration {
    period.mul_f64(1.0 + rand::rng().random_range(0.0..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_keeps_client_go_ratios() {
        let t = Timing::for_duration(Duration::from_secs(15));
        assert_eq!(t.renew_deadline, Duration::from_secs(10));
        assert_eq!(t.retry_period, Duration::from_secs(2));
        assert!(t.renew_deadline < t.lease_duration);
    }

    #[test]
    fn records_read_and_write_client_go_json() {
        // As client-go's ConfigMap lock writes it: whole-second times.
        let written = r#"{"holderIdentity":"master-1_x","leaseDurationSeconds":15,"acquireTime":"2019-05-01T10:00:00Z","renewTime":"2019-05-01T10:02:30Z","leaderTransitions":3}"#;
        let record: LeaderRecord = serde_json::from_str(written).unwrap();
        assert_eq!(record.holder_identity, "master-1_x");
        assert_eq!(record.lease_duration_seconds, 15);
        assert_eq!(record.leader_transitions, 3);
        assert_eq!(
            record.renew_time.as_ref().unwrap().0,
            "2019-05-01T10:02:30Z".parse::<jiff::Timestamp>().unwrap()
        );
        let back: serde_json::Value = serde_json::to_value(&record).unwrap();
        for key in [
            "holderIdentity",
            "leaseDurationSeconds",
            "acquireTime",
            "renewTime",
            "leaderTransitions",
        ] {
            assert!(!back[key].is_null(), "{key} missing in {back}");
        }
    }

    #[test]
    fn identities_are_unique() {
        assert_ne!(identity(), identity());
    }

    #[test]
    fn identity_is_the_first_name_given_and_a_suffix() {
        let suffix = |id: &str, base: &str| {
            let rest = id
                .strip_prefix(base)
                .and_then(|r| r.strip_prefix('_'))
                .unwrap_or_else(|| panic!("{id:?} does not start with {base}_"));
            assert_eq!(rest.len(), 8, "{id:?}");
            assert!(
                rest.chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()),
                "{id:?}"
            );
        };
        let pod = || Some("initguard-master-1".to_owned());
        suffix(
            &identity_from([pod(), Some("host".into())]),
            "initguard-master-1",
        );
        suffix(
            &identity_from([None, Some(" \n".into()), Some("master-1\n".into())]),
            "master-1",
        );
        suffix(&identity_from([None, Some(String::new())]), "initguard");
    }
}
