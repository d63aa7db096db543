//! The one writer: removes a decided initializer with an atomic JSON Patch and records a core/v1
//! Event for it.
//!
//! Concurrency is bounded; a failed `test` (the pod changed under us) is never retried blindly:
//! the pod is re-read and handed back for a fresh decision. Transient API failures are retried
//! with jittered exponential backoff. Only the leader writes, and only within its fence: a
//! client-side timeout cannot cancel a write the server already committed, so every write has a
//! timeout below `leaseDuration − renewDeadline`, and none starts once the time since the last
//! successful renew plus that timeout would pass `renewDeadline` (after which the replica steps
//! down, and another may take over once `leaseDuration` has passed since it saw that renew).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::bypass::{BypassTarget, bypass_patch};
use crate::config::{Config, LeaderElection};
use crate::guard::leader::Timing;
use crate::metrics::Metrics;
use crate::pod::SlimPod;
use crate::policy::Reason;
use crate::tracker::PodKey;

/// Attempts per bypass before it counts as an error.
const MAX_ATTEMPTS: u32 = 6;
const BACKOFF_BASE: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long shutdown waits for patches already in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// One decided bypass with everything the patch and the Event need.
#[derive(Debug, Clone)]
pub struct BypassJob {
    pub key: PodKey,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub index: usize,
    pub initializer: String,
    pub reason: Reason,
    pub waited: Duration,
    pub annotations_present: bool,
    pub previous_record: Option<String>,
    /// The opt-in label (key, value) as observed when deciding; None when the namespace opts
    /// the pod in. The patch tests it, so a pod opted out meanwhile is never touched.
    pub opt_in_label: Option<(String, String)>,
    /// The owner's state in words, for the Event and the log line.
    pub owner: String,
}

/// What became of a job; the control loop learns from every one.
#[derive(Debug)]
pub enum JobResult {
    /// The initializer is gone; `pod` is the patched pod as the API returned it.
    Bypassed { job: BypassJob, pod: Box<SlimPod> },
    /// Dry-run: logged and counted, nothing written.
    DryRun { job: BypassJob },
    /// The pod changed under us; `pod` is a fresh read (None: it is gone, or the re-read
    /// failed). Re-decide.
    Stale {
        job: BypassJob,
        pod: Option<Box<SlimPod>>,
    },
    /// The API server answered 404: no pod of that name exists any more. Forget it at once
    /// rather than waiting for the watch (which may be down) to say so.
    Gone { job: BypassJob },
    /// Failed for good after retries (or forbidden); counted in bypass errors.
    Failed { job: BypassJob, error: String },
    /// Not written because this replica is not (or no longer) the leader, or shutting down.
    Skipped { job: BypassJob },
}

impl JobResult {
    /// The job this report is about.
    pub fn job(&self) -> &BypassJob {
        match self {
            JobResult::Bypassed { job, .. }
            | JobResult::DryRun { job }
            | JobResult::Stale { job, .. }
            | JobResult::Gone { job }
            | JobResult::Failed { job, .. }
            | JobResult::Skipped { job } => job,
        }
    }
}

/// When this replica may start a write (see the module docs).
#[derive(Debug, Clone)]
pub struct Fence {
    /// `true` while this replica leads (always with leader election off).
    leader: watch::Receiver<bool>,
    /// Start of the last successful lease renew (None: not leading); None when leader
    /// election is off, where nothing is fenced.
    renewed: Option<watch::Receiver<Option<Instant>>>,
    renew_deadline: Duration,
    /// Client-side timeout of every write.
    write_timeout: Duration,
}

impl Fence {
    /// The fence for `config`, fed by the elector's leadership and renew instants.
    pub fn new(
        config: &LeaderElection,
        leader: watch::Receiver<bool>,
        renewed: watch::Receiver<Option<Instant>>,
    ) -> Fence {
        let timing = Timing::for_duration(config.lease_duration);
        Fence {
            leader,
            renewed: config.enabled.then_some(renewed),
            renew_deadline: timing.renew_deadline,
            write_timeout: write_timeout(timing),
        }
    }

    /// The client-side timeout of every write.
    pub fn write_timeout(&self) -> Duration {
        self.write_timeout
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Waits until this replica may start a write (true), or it is no longer the leader or is
    /// shutting down (false). Fenced out while still leading (renewals failing), it waits for a
    /// renew or for stepping down rather than handing the job back, which would only come back.
    pub async fn admit(&self, cancel: &CancellationToken) -> bool {
        let Some(mut renewed) = self.renewed.clone() else {
            return self.is_leader();
        };
        let mut leader = self.leader.clone();
        loop {
            if !*leader.borrow_and_update() {
                return false;
            }
            let last = *renewed.borrow_and_update();
            if last.is_some_and(|at| self.permits(at.elapsed())) {
                return true;
            }
            tokio::select! {
                r = renewed.changed() => if r.is_err() { return false },
                r = leader.changed() => if r.is_err() { return false },
                _ = cancel.cancelled() => return false,
            }
        }
    }

    /// A receiver of leadership changes.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// Whether a write may start `since_renew` after the start of the last successful renew:
    /// even if it takes its whole timeout, it ends by the renew deadline.
    pub fn permits(&self, since_renew: Duration) -> bool {
        since_renew.saturating_add(self.write_timeout) <= self.renew_deadline
    }
}

/// Half of `leaseDuration − renewDeadline` (2.5 s for the default 15 s lease): strictly below
/// it, and leaving a renew round's worth of room before the renew deadline.
pub fn write_timeout(timing: Timing) -> Duration {
    timing.lease_duration.saturating_sub(timing.renew_deadline) / 2
}

/// Handle to submit jobs.
#[derive(Clone)]
pub struct Actuator {
    tx: mpsc::Sender<BypassJob>,
}

/// Queue of jobs waiting for a free slot.
const QUEUE: usize = 4096;

impl Actuator {
    /// The actuator and its worker task, for the caller to spawn (under
    /// [`crate::supervise`]); reports go to `reports`. It drains and stops when `cancel` fires.
    pub fn new(
        client: kube::Client,
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        fence: Fence,
        identity: String,
        reports: mpsc::UnboundedSender<JobResult>,
        cancel: CancellationToken,
    ) -> (Actuator, impl Future<Output = ()> + Send + 'static) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let worker = Worker {
            client,
            config,
            metrics,
            fence,
            identity: Arc::from(identity),
            reports,
        };
        (Actuator { tx }, worker.run(rx, cancel))
    }

    /// Queue a job; gives it back when the queue is full or the actuator stopped.
    pub fn try_submit(&self, job: BypassJob) -> Result<(), Box<BypassJob>> {
        self.tx.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(j) | mpsc::error::TrySendError::Closed(j) => {
                Box::new(j)
            }
        })
    }
}

#[derive(Clone)]
struct Worker {
    client: kube::Client,
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    fence: Fence,
    /// This replica's identity, named in each Event it writes.
    identity: Arc<str>,
    reports: mpsc::UnboundedSender<JobResult>,
}

enum Attempt {
    Done(Box<SlimPod>),
    Stale,
    Gone,
    Retry(String),
    Fatal(String),
}

impl Worker {
    /// Patches run up to `maxInFlight` at once. The Event of each bypass is written once no
    /// bypass is waiting or in flight: during a burst, removing gates is what unblocks the
    /// cluster, and the Events would otherwise take half of the slots and of the API server.
    async fn run(self, mut rx: mpsc::Receiver<BypassJob>, cancel: CancellationToken) {
        let slots = self.config.max_in_flight.max(1);
        // A patch task yields its job when it bypassed, for the Event.
        let mut patches: JoinSet<Option<BypassJob>> = JoinSet::new();
        let mut events: JoinSet<()> = JoinSet::new();
        let mut unrecorded: VecDeque<BypassJob> = VecDeque::new();
        loop {
            while patches.is_empty() && rx.is_empty() && events.len() < slots {
                let Some(job) = unrecorded.pop_front() else {
                    break;
                };
                let worker = self.clone();
                events.spawn(async move { worker.record(&job).await });
            }
            let free = patches.len() + events.len() < slots;
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                Some(done) = patches.join_next(), if !patches.is_empty() => {
                    if let Ok(Some(job)) = done {
                        unrecorded.push_back(job);
                    }
                }
                Some(_) = events.join_next(), if !events.is_empty() => {}
                job = rx.recv(), if free => match job {
                    Some(job) => {
                        let worker = self.clone();
                        let cancel = cancel.clone();
                        patches.spawn(async move {
                            let report = worker.execute(job, &cancel).await;
                            let bypassed = match &report {
                                JobResult::Bypassed { job, .. } => Some(job.clone()),
                                _ => None,
                            };
                            worker.report(report);
                            bypassed
                        });
                    }
                    None => break,
                },
            }
        }
        // Queued but not started: hand back so nothing is lost silently.
        rx.close();
        while let Ok(job) = rx.try_recv() {
            self.report(JobResult::Skipped { job });
        }
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while let Some(done) = patches.join_next().await {
                if let Ok(Some(job)) = done {
                    unrecorded.push_back(job);
                }
            }
            for job in unrecorded.drain(..) {
                let worker = self.clone();
                events.spawn(async move { worker.record(&job).await });
            }
            while events.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(
                patches_in_flight = patches.len(),
                events_not_recorded = unrecorded.len() + events.len(),
                "shutdown: abandoning bypass patches and InitializerBypassed events still in flight"
            );
            patches.abort_all();
            events.abort_all();
        }
    }

    fn report(&self, report: JobResult) {
        // The loop may already be gone at shutdown; nothing to do then.
        let _ = self.reports.send(report);
    }

    async fn within_fence(&self, cancel: &CancellationToken) -> bool {
        self.fence.admit(cancel).await
    }

    async fn execute(&self, job: BypassJob, cancel: &CancellationToken) -> JobResult {
        if self.config.dry_run {
            info!(pod = %job.key, initializer = %job.initializer, reason = job.reason.as_str(),
                waited = ?job.waited, owner = %job.owner, "dry-run: would bypass initializer");
            self.metrics.bypassed(&job.initializer, job.reason);
            return JobResult::DryRun { job };
        }
        let api: Api<SlimPod> = Api::namespaced(self.client.clone(), &job.namespace);
        let mut attempt = 0;
        loop {
            // Shutdown between retries is seen by the backoff's select below; a first attempt
            // already started is sent (drained) rather than dropped.
            if !self.within_fence(cancel).await {
                return JobResult::Skipped { job };
            }
            attempt += 1;
            match self.attempt(&api, &job).await {
                Attempt::Done(pod) => {
                    self.metrics.bypassed(&job.initializer, job.reason);
                    info!(pod = %job.key, initializer = %job.initializer, reason = job.reason.as_str(),
                        waited = ?job.waited, owner = %job.owner, "bypassed initializer");
                    return JobResult::Bypassed { job, pod };
                }
                Attempt::Stale => {
                    debug!(pod = %job.key, initializer = %job.initializer, "pod changed; re-reading");
                    let pod = match api.get_opt(&job.name).await {
                        Ok(Some(pod)) => Some(Box::new(pod)),
                        Ok(None) => return JobResult::Gone { job },
                        Err(e) => {
                            warn!(pod = %job.key, error = %e, "re-reading pod after a conflict failed");
                            None
                        }
                    };
                    return JobResult::Stale { job, pod };
                }
                Attempt::Gone => {
                    debug!(pod = %job.key, "pod not found; forgetting it");
                    return JobResult::Gone { job };
                }
                Attempt::Fatal(error) => {
                    self.metrics.bypass_failed(&job.initializer);
                    warn!(pod = %job.key, initializer = %job.initializer, %error, "bypass failed");
                    return JobResult::Failed { job, error };
                }
                Attempt::Retry(error) if attempt >= MAX_ATTEMPTS => {
                    self.metrics.bypass_failed(&job.initializer);
                    warn!(pod = %job.key, initializer = %job.initializer, attempts = attempt, %error,
                        "bypass failed after retries");
                    return JobResult::Failed { job, error };
                }
                Attempt::Retry(error) => {
                    let delay = backoff(attempt);
                    debug!(pod = %job.key, %error, ?delay, "bypass patch failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = cancel.cancelled() => return JobResult::Skipped { job },
                    }
                }
            }
        }
    }

    async fn attempt(&self, api: &Api<SlimPod>, job: &BypassJob) -> Attempt {
        let target = BypassTarget {
            uid: &job.uid,
            resource_version: &job.resource_version,
            index: job.index,
            initializer: &job.initializer,
            annotations_present: job.annotations_present,
            previous_record: job.previous_record.as_deref(),
            opt_in_label: job
                .opt_in_label
                .as_ref()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        };
        let patch = bypass_patch(
            self.config.mechanism,
            &target,
            job.reason,
            SystemTime::now(),
        );
        let (params, patch) = (PatchParams::default(), Patch::Json::<()>(patch));
        let write = api.patch(&job.name, &params, &patch);
        // A write that timed out may still have been committed: retrying is safe because the
        // patch tests the annotation's previous state, which any committed bypass changed.
        match tokio::time::timeout(self.fence.write_timeout, write).await {
            Ok(Ok(pod)) => Attempt::Done(Box::new(pod)),
            Ok(Err(e)) => classify(e),
            Err(_) => Attempt::Retry(format!(
                "no answer within the write timeout of {:?}",
                self.fence.write_timeout
            )),
        }
    }

    /// [`Worker::publish_event`] within the write timeout.
    async fn record(&self, job: &BypassJob) {
        if tokio::time::timeout(self.fence.write_timeout, self.publish_event(job))
            .await
            .is_err()
        {
            warn!(pod = %job.key, "recording the InitializerBypassed event timed out");
        }
    }

    /// Write one core/v1 Event for this bypass. core/v1 Events are served by every Kubernetes
    /// version (events.k8s.io/v1 only from 1.19), and a fresh Event per bypass keeps each
    /// initializer's bypass visible on its own: kube-runtime's Recorder folds a repeat on the
    /// same pod into the first Event's series, hiding the second initializer's name.
    async fn publish_event(&self, job: &BypassJob) {
        let event = bypass_event(job, &self.identity, jiff::Timestamp::now());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &job.namespace);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            // The bypass itself succeeded; a lost Event must not undo or repeat it.
            warn!(pod = %job.key, error = %e, "could not record InitializerBypassed event");
        }
    }
}

/// The Warning Event `InitializerBypassed` for one bypass, named like client-go's recorder
/// names Events (`<pod>.<hex nanoseconds>`), plus a random suffix so two bypasses of one pod
/// within the same instant still get an Event each.
fn bypass_event(job: &BypassJob, identity: &str, now: jiff::Timestamp) -> Event {
    let note = format!(
        "initguard removed initializer {} ({}) after waiting {}; owner: {}",
        job.initializer,
        job.reason.as_str(),
        humantime::format_duration(Duration::from_secs(job.waited.as_secs())),
        job.owner
    );
    let suffix: u32 = rand::rng().random();
    let nanos = u64::try_from(now.as_nanosecond()).unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{nanos:x}{suffix:08x}", job.name)),
            namespace: Some(job.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(job.name.clone()),
            namespace: Some(job.namespace.clone()),
            uid: Some(job.uid.clone()),
            ..ObjectReference::default()
        },
        reason: Some("InitializerBypassed".into()),
        message: Some(truncate(note, 1024)),
        type_: Some("Warning".into()),
        action: Some("Bypass".into()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        source: Some(EventSource {
            component: Some("initguard".into()),
            host: None,
        }),
        reporting_component: Some("initguard".into()),
        reporting_instance: Some(truncate(identity.to_owned(), 128)),
        ..Event::default()
    }
}

/// Sorts an API error into what to do next.
fn classify(e: kube::Error) -> Attempt {
    match e {
        kube::Error::Api(status) => {
            let code = status.code;
            let msg = status.message.clone();
            match code {
                404 => Attempt::Gone,
                409 | 422 => Attempt::Stale,
                // Servers before JSON Patch failures became 422 (1.7-1.13) answered 500 with
                // the patch library's words: a failed `test`, a tested path that is gone, or
                // an index past the end of a list that shrank. Each means the pod changed.
                // (kubernetes/kubernetes#68202: "Testing value /resourceVersion failed", 500.)
                500 if changed_pod_message(&msg) => Attempt::Stale,
                429 | 500..=599 => Attempt::Retry(format!("{code} {}: {msg}", status.reason)),
                _ => Attempt::Fatal(format!("{code} {}: {msg}", status.reason)),
            }
        }
        other => Attempt::Retry(other.to_string()),
    }
}

/// Whether a 500 answer's message is evanphx/json-patch's wording for a document that no
/// longer matches the patch, as 1.7-1.13 API servers passed it through.
fn changed_pod_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("testing value")
        || m.contains("test operation does not apply")
        || m.contains("unable to access invalid index")
}

/// Full jitter: uniform in [0, min(max, base·2^attempt)].
fn backoff(attempt: u32) -> Duration {
    let cap = BACKOFF_BASE
        .saturating_mul(1 << attempt.min(16))
        .min(BACKOFF_MAX);
    let ms = rand::rng().random_range(0..=cap.as_millis() as u64);
    Duration::from_millis(ms.max(10))
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        let s: kube::core::Status = serde_json::from_value(
            serde_json::json!({"code": code, "reason": reason, "message": message}),
        )
        .unwrap();
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn classifies_api_errors() {
        assert!(matches!(
            classify(status(404, "NotFound", "")),
            Attempt::Gone
        ));
        assert!(matches!(
            classify(status(409, "Conflict", "")),
            Attempt::Stale
        ));
        assert!(matches!(
            classify(status(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request"
            )),
            Attempt::Stale
        ));
        assert!(matches!(
            classify(status(
                500,
                "InternalError",
                "Testing value /spec/schedulingGates/0/name failed"
            )),
            Attempt::Stale
        ));
        for message in [
            "jsonpatch test operation does not apply: is missing path: /metadata/initializers/pending/1/name",
            "Unable to access invalid index: 1",
        ] {
            assert!(
                matches!(
                    classify(status(500, "InternalError", message)),
                    Attempt::Stale
                ),
                "{message}"
            );
        }
        assert!(matches!(
            classify(status(500, "InternalError", "etcd timeout")),
            Attempt::Retry(_)
        ));
        assert!(matches!(
            classify(status(429, "TooManyRequests", "")),
            Attempt::Retry(_)
        ));
        assert!(matches!(
            classify(status(503, "ServiceUnavailable", "")),
            Attempt::Retry(_)
        ));
        assert!(matches!(
            classify(status(403, "Forbidden", "no")),
            Attempt::Fatal(_)
        ));
    }

    #[test]
    fn fence_bounds_every_write_within_the_lease() {
        for secs in [1, 3, 15, 60, 137] {
            let timing = Timing::for_duration(Duration::from_secs(secs));
            let (_tx, rx) = watch::channel(None);
            let (_leading, leader) = watch::channel(true);
            let config = LeaderElection {
                enabled: true,
                namespace: "kube-system".into(),
                name: "initguard".into(),
                lease_duration: timing.lease_duration,
            };
            let fence = Fence::new(&config, leader, rx);
            // Below leaseDuration − renewDeadline, so a write cannot outlive the lease.
            assert!(!fence.write_timeout().is_zero());
            assert!(fence.write_timeout() < timing.lease_duration - timing.renew_deadline);
            assert!(fence.permits(Duration::ZERO));
            let last_start = timing.renew_deadline - fence.write_timeout();
            assert!(fence.permits(last_start));
            assert!(!fence.permits(last_start + Duration::from_millis(1)));
            assert!(!fence.permits(timing.renew_deadline));
        }
    }

    #[test]
    fn backoff_is_bounded() {
        for attempt in 0..40 {
            assert!(backoff(attempt) <= BACKOFF_MAX);
        }
    }

    #[test]
    fn backoff_grows_with_the_attempt_up_to_the_cap() {
        // The largest of 200 draws, uniform in [0, cap]: below cap/2 with probability 2^-200.
        let largest = |attempt| (0..200).map(|_| backoff(attempt)).max().unwrap();
        assert!(largest(0) <= BACKOFF_BASE);
        assert!(largest(0) > BACKOFF_BASE / 2);
        assert!(largest(2) <= BACKOFF_BASE * 4);
        assert!(largest(2) > BACKOFF_BASE * 2);
        assert!(largest(10) > BACKOFF_MAX / 2);
    }

    #[test]
    fn the_event_names_the_pod_the_bypass_and_this_replica() {
        let job = BypassJob {
            key: "team-a/web-1".into(),
            namespace: "team-a".into(),
            name: "web-1".into(),
            uid: "uid-1".into(),
            resource_version: "7".into(),
            index: 0,
            initializer: "sidecar.example.com".into(),
            reason: Reason::OwnerDown,
            waited: Duration::from_millis(95_700),
            annotations_present: false,
            previous_record: None,
            opt_in_label: None,
            owner: "deployment kube-system/sidecar down".into(),
        };
        let now: jiff::Timestamp = "2026-11-25T10:00:00.5Z".parse().unwrap();
        let event = serde_json::to_value(bypass_event(&job, "master-1_ab12cd34", now)).unwrap();
        let name = event["metadata"]["name"].as_str().unwrap().to_owned();
        let nanos = format!("{:x}", now.as_nanosecond());
        assert!(name.starts_with(&format!("web-1.{nanos}")), "{name}");
        assert_eq!(name.len(), "web-1.".len() + nanos.len() + 8, "{name}");
        assert_eq!(
            event,
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": { "name": name, "namespace": "team-a" },
                "involvedObject": {
                    "apiVersion": "v1", "kind": "Pod", "name": "web-1",
                    "namespace": "team-a", "uid": "uid-1"
                },
                "reason": "InitializerBypassed",
                "message": "initguard removed initializer sidecar.example.com (owner_down) \
                            after waiting 1m 35s; owner: deployment kube-system/sidecar down",
                "type": "Warning",
                "action": "Bypass",
                "count": 1,
                // metav1.Time has whole seconds.
                "firstTimestamp": "2026-11-25T10:00:00Z",
                "lastTimestamp": "2026-11-25T10:00:00Z",
                "source": { "component": "initguard" },
                "reportingComponent": "initguard",
                "reportingInstance": "master-1_ab12cd34",
            })
        );
        // Two bypasses of one pod in the same instant get an Event each.
        let again = bypass_event(&job, "master-1_ab12cd34", now);
        assert_ne!(again.metadata.name.as_deref(), Some(name.as_str()));
    }

    #[test]
    fn truncates_on_char_boundary() {
        assert_eq!(truncate("ééé".into(), 3), "é");
        assert_eq!(truncate("ééé".into(), 4), "éé");
        assert_eq!(truncate("abc".into(), 3), "abc");
        assert_eq!(truncate("abc".into(), 2), "ab");
    }
}
