//! Leader election on a coordination.k8s.io/v1 Lease, so several masters act as one writer.
//!
//! The client-go algorithm: acquire or renew with optimistic concurrency (update with
//! resourceVersion, 409 loses), judge another holder's lease by when *we* last saw it change
//! (immune to clock skew), and step down when renewals fail for `renewDeadline`, which is
//! shorter than the lease duration, so a partitioned leader stops writing before anyone else
//! may take over. (kube-lease-manager keeps claiming leadership while its renewals fail and
//! relies on server-side apply; neither fits a guard that must never write twice.)

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::LeaderElection;
use crate::metrics::Metrics;

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

/// A unique identity for this replica: `$POD_NAME` or the host name, plus a random suffix.
pub fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "initguard".into());
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(8)
        .map(|c| char::from(c).to_ascii_lowercase())
        .collect();
    format!("{base}_{suffix}")
}

/// Start electing. The receiver is `true` while this replica may write. With leader election
/// disabled it is always `true`. `renewed` gets the instant at which each successful acquire or
/// renew round *started* (the earliest the lease record can say; others count its duration from
/// their later observation), and None on losing the lease: the actuator fences writes with it.
pub fn spawn(
    client: kube::Client,
    config: &LeaderElection,
    identity: String,
    metrics: Arc<Metrics>,
    renewed: watch::Sender<Option<Instant>>,
    cancel: CancellationToken,
) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    if !config.enabled {
        metrics.is_leader.set(1);
        let (tx, rx) = watch::channel(true);
        let handle = tokio::spawn(async move {
            cancel.cancelled().await;
            drop(tx);
        });
        return (rx, handle);
    }
    let (tx, rx) = watch::channel(false);
    let elector = Elector {
        api: Api::namespaced(client, &config.namespace),
        name: config.name.clone(),
        identity,
        timing: Timing::for_duration(config.lease_duration),
        observed: None,
        metrics,
        tx,
        renewed,
    };
    (rx, tokio::spawn(elector.run(cancel)))
}

struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    /// Last seen (holder, renewTime) of the record and when we saw it change.
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
    metrics: Arc<Metrics>,
    tx: watch::Sender<bool>,
    /// Start of the last successful round while leading (write fencing).
    renewed: watch::Sender<Option<Instant>>,
}

impl Elector {
    async fn run(mut self, cancel: CancellationToken) {
        let mut last_renew: Option<Instant> = None;
        let mut first = true;
        loop {
            let leading = *self.tx.borrow();
            let wait = if leading {
                self.timing.retry_period
            } else {
                jitter(self.timing.retry_period)
            };
            // The first round runs at once so a free lease is taken without delay.
            if !std::mem::take(&mut first) {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = cancel.cancelled() => break,
                r = tokio::time::timeout(self.timing.retry_period.max(Duration::from_secs(1)), self.try_acquire_or_renew()) => r,
            };
            match attempt {
                Ok(Ok(true)) => {
                    last_renew = Some(Instant::now());
                    self.renewed.send_replace(Some(started));
                    if !leading {
                        info!(lease = %self.name, identity = %self.identity, "became leader");
                        self.set(true);
                    }
                }
                Ok(Ok(false)) => {
                    last_renew = None;
                    if leading {
                        warn!(lease = %self.name, "lost the lease to another replica; writes stopped");
                        self.set(false);
                    }
                }
                Ok(Err(_)) | Err(_) => {
                    let error = match attempt {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".to_owned(),
                    };
                    debug!(lease = %self.name, %error, "leader election round failed");
                    if leading
                        && last_renew.is_none_or(|t| t.elapsed() >= self.timing.renew_deadline)
                    {
                        warn!(lease = %self.name, %error, "could not renew the lease within the renew deadline; writes stopped");
                        self.set(false);
                        last_renew = None;
                    }
                }
            }
        }
        if *self.tx.borrow() {
            self.set(false);
            match tokio::time::timeout(Duration::from_secs(2), self.release()).await {
                Ok(Ok(())) => info!(lease = %self.name, "released the lease"),
                Ok(Err(e)) => warn!(lease = %self.name, error = %e, "could not release the lease"),
                Err(_) => warn!(lease = %self.name, "releasing the lease timed out"),
            }
        }
    }

    fn set(&self, leading: bool) {
        if !leading {
            self.renewed.send_replace(None);
        }
        self.metrics.is_leader.set(i64::from(leading));
        self.tx.send_replace(leading);
    }

    /// One round: true when we hold the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let duration_secs =
            i32::try_from(self.timing.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (holder.clone(), spec.renew_time.clone());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(h, r, _)| (h, r) != (&record.0, &record.1));
        if changed {
            self.observed = Some((record.0, record.1, Instant::now()));
        }
        let seen_at = self.observed.as_ref().map_or_else(Instant::now, |o| o.2);
        let theirs = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        let ours = holder.as_deref() == Some(self.identity.as_str());
        if let Some(other) = holder.as_deref().filter(|_| !ours)
            && seen_at.elapsed() < theirs
        {
            debug!(lease = %self.name, holder = other, "lease held by another replica");
            return Ok(false);
        }
        if !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(duration_secs);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Give the lease up so another replica takes over at once rather than after expiry.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
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
    fn identities_are_unique() {
        assert_ne!(identity(), identity());
    }
}
