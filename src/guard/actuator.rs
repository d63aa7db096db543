//! The pod writer: removes every initializer decided for a pod with one atomic JSON Patch and
//! records a core/v1 Event for that patch; after them, and rate-limited, the
//! `InitializerWaiting` Events of pods that wait long.
//!
//! Concurrency is bounded; a failed `test` (the pod changed under us) is never retried blindly:
//! the pod is re-read and handed back for a fresh decision. Transient API failures are retried
//! with jittered exponential backoff; a refusal (403, a validation 422) is counted and backed
//! off by the control loop. Every write passes the [`Fence`] (only the leader, only within its
//! lease) and answers are sorted by the one classifier of [`super::write`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::{Api, Patch, PatchParams};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::fence::Fence;
use super::waiting::{WAITING_EVENT_REASON, Waiting, waiting_event};
use super::write::{self, Refusal, Subject};
use crate::bypass::{BypassTarget, Removal, bypass_patch};
use crate::config::{Config, EventsMode};
use crate::metrics::{EventOutcome, Metrics};
use crate::pod::SlimPod;
use crate::policy::Reason;
use crate::tracker::PodKey;

/// Attempts per bypass before it counts as an error.
const MAX_ATTEMPTS: u32 = 6;

/// One decided bypass of a pod (one patch) with everything the patch and the Event need.
#[derive(Debug, Clone)]
pub struct Bypass {
    pub key: PodKey,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// Every initializer the patch removes, in pending order; never empty.
    pub removals: Vec<Removed>,
    pub annotations_present: bool,
    pub previous_record: Option<String>,
    /// The opt-in label (key, value) as observed when deciding; None when the namespace opts
    /// the pod in. The patch tests it, so a pod opted out meanwhile is never touched.
    pub opt_in_label: Option<(String, String)>,
}

/// One initializer a bypass removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// Its index in the pending list as read.
    pub index: usize,
    pub initializer: String,
    pub reason: Reason,
    pub waited: Duration,
    /// The owner's state in words, for the Event and the log line.
    pub owner: String,
}

/// What became of a bypass; the control loop learns from every one.
#[derive(Debug)]
pub enum Reply {
    /// The initializer is gone; `pod` is the patched pod as the API returned it.
    Bypassed { bypass: Bypass, pod: Box<SlimPod> },
    /// Dry-run: logged and counted, nothing written.
    DryRun { bypass: Bypass },
    /// The pod changed under us; `pod` is a fresh read (None: the re-read failed). Re-decide.
    Stale {
        bypass: Bypass,
        pod: Option<Box<SlimPod>>,
    },
    /// No pod of that name exists any more. Forget it at once rather than waiting for the
    /// watch (which may be down) to say so.
    Gone { bypass: Bypass },
    /// Refused, or failed after retries; counted in bypass errors, tried again later.
    Failed { bypass: Bypass, error: String },
    /// Not written because this replica is not (or no longer) the leader, or shutting down.
    Skipped { bypass: Bypass },
}

impl Reply {
    /// The bypass this reply is about.
    pub fn bypass(&self) -> &Bypass {
        match self {
            Reply::Bypassed { bypass, .. }
            | Reply::DryRun { bypass }
            | Reply::Stale { bypass, .. }
            | Reply::Gone { bypass }
            | Reply::Failed { bypass, .. }
            | Reply::Skipped { bypass } => bypass,
        }
    }
}

/// Handle to submit bypasses and `InitializerWaiting` Events.
#[derive(Clone)]
pub struct Actuator {
    tx: mpsc::Sender<Bypass>,
    waiting: mpsc::Sender<Waiting>,
    metrics: Arc<Metrics>,
}

/// Bypasses waiting for a free slot; the control loop holds the rest in line until one frees.
pub const QUEUE: usize = 4096;
/// Events of written patches kept until the burst is over; beyond this they are dropped (and
/// counted), so a long burst cannot grow memory without bound.
const MAX_UNRECORDED: usize = 50_000;
/// `InitializerWaiting` Events are written at most this often: they explain, and must never
/// compete with what unblocks pods.
const WAITING_EVENT_EVERY: Duration = Duration::from_millis(100);

impl Actuator {
    /// The actuator and its worker task, for the caller to spawn as a writer (see
    /// the guard's lifecycle); replies go to `replies`. On `cancel` it hands back what it has not
    /// started, finishes what it has, records their Events and returns.
    pub fn new(
        client: kube::Client,
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        fence: Fence,
        identity: String,
        replies: mpsc::UnboundedSender<Reply>,
        cancel: CancellationToken,
    ) -> (Actuator, impl Future<Output = ()> + Send + 'static) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (waiting, waiting_rx) = mpsc::channel(QUEUE);
        let worker = Worker {
            client,
            config,
            metrics: metrics.clone(),
            fence,
            identity: Arc::from(identity),
            replies,
        };
        (
            Actuator {
                tx,
                waiting,
                metrics,
            },
            worker.run(rx, waiting_rx, cancel),
        )
    }

    /// Queue an `InitializerWaiting` Event; false (and counted dropped) when the queue is
    /// full, so that the caller offers it again later.
    pub fn notify(&self, waiting: Waiting) -> bool {
        let queued = self.waiting.try_send(waiting).is_ok();
        if !queued {
            self.metrics
                .event(WAITING_EVENT_REASON, EventOutcome::Dropped);
        }
        queued
    }

    /// Queue a bypass; gives it back when the queue is full or the actuator stopped.
    pub fn try_submit(&self, bypass: Bypass) -> Result<(), Box<Bypass>> {
        self.tx.try_send(bypass).map_err(|e| match e {
            mpsc::error::TrySendError::Full(b) | mpsc::error::TrySendError::Closed(b) => {
                Box::new(b)
            }
        })
    }

    /// An actuator whose queues hold `capacity` each, with no worker: the test takes what
    /// is queued from the receivers.
    #[cfg(test)]
    pub(crate) fn unattended(
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> (Actuator, mpsc::Receiver<Bypass>, mpsc::Receiver<Waiting>) {
        let (tx, rx) = mpsc::channel(capacity);
        let (waiting, waiting_rx) = mpsc::channel(capacity);
        let actuator = Actuator {
            tx,
            waiting,
            metrics,
        };
        (actuator, rx, waiting_rx)
    }

    /// Whether the bypass queue has a free slot.
    pub fn has_room(&self) -> bool {
        self.tx.capacity() > 0
    }

    /// Resolves once the bypass queue has a free slot; never, once the actuator stopped (the
    /// caller stops with it). With one submitter, the slot is still free when it looks.
    pub async fn room(&self) {
        match self.tx.reserve().await {
            // Only waited for: the caller submits through `try_submit`.
            Ok(permit) => drop(permit),
            Err(_) => std::future::pending().await,
        }
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
    replies: mpsc::UnboundedSender<Reply>,
}

/// One try of a patch.
enum Attempt {
    Done(Box<SlimPod>),
    NotAdmitted,
    Refused(Refusal),
}

impl Worker {
    /// Patches run up to `maxInFlight` at once. The Event of each bypass is written once no
    /// bypass is waiting or in flight: during a burst, removing gates is what unblocks the
    /// cluster, and the Events would otherwise take half of the slots and of the API server.
    async fn run(
        self,
        mut rx: mpsc::Receiver<Bypass>,
        mut waiting_rx: mpsc::Receiver<Waiting>,
        cancel: CancellationToken,
    ) {
        let slots = self.config.max_in_flight.max(1);
        // A patch task yields its bypass when it was written, for the Event.
        let mut patches: JoinSet<Option<Bypass>> = JoinSet::new();
        let mut events: JoinSet<()> = JoinSet::new();
        let mut unrecorded = Unrecorded::new(self.metrics.clone(), BYPASS_EVENT_REASON);
        let mut waiting = Unrecorded::new(self.metrics.clone(), WAITING_EVENT_REASON);
        let mut next_waiting = tokio::time::Instant::now();
        // Events are written also while draining: they end with the fence, not with `cancel`.
        let events_cancel = CancellationToken::new();
        loop {
            while patches.is_empty() && rx.is_empty() && events.len() < slots {
                let Some(bypass) = unrecorded.pop_front() else {
                    break;
                };
                let worker = self.clone();
                let cancel = events_cancel.clone();
                events.spawn(async move { worker.record(&bypass, &cancel).await });
            }
            // Last, one at a time: what waits is explained once nothing else is to be done.
            let idle = patches.is_empty() && rx.is_empty() && unrecorded.len() == 0;
            let explain = idle && events.len() < slots && waiting.len() > 0;
            if explain
                && tokio::time::Instant::now() >= next_waiting
                && let Some(w) = waiting.pop_front()
            {
                next_waiting = tokio::time::Instant::now() + WAITING_EVENT_EVERY;
                let worker = self.clone();
                let cancel = events_cancel.clone();
                events.spawn(async move { worker.explain(&w, &cancel).await });
            }
            let free = patches.len() + events.len() < slots;
            // Wake for the next one only when nothing else would (a finished write does).
            let explain_later = idle
                && events.len() < slots
                && waiting.len() > 0
                && tokio::time::Instant::now() < next_waiting;
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                Some(done) = patches.join_next(), if !patches.is_empty() => {
                    if let Some(bypass) = joined(done) {
                        self.keep_for_event(&mut unrecorded, bypass);
                    }
                }
                Some(done) = events.join_next(), if !events.is_empty() => joined(done),
                Some(w) = waiting_rx.recv() => {
                    if waiting.len() >= MAX_UNRECORDED {
                        self.metrics.event(WAITING_EVENT_REASON, EventOutcome::Dropped);
                    } else {
                        waiting.push_back(w);
                    }
                }
                _ = tokio::time::sleep_until(next_waiting), if explain_later => {}
                bypass = rx.recv(), if free => match bypass {
                    Some(bypass) => {
                        let worker = self.clone();
                        let cancel = cancel.clone();
                        patches.spawn(async move {
                            let reply = worker.execute(bypass, &cancel).await;
                            let written = match &reply {
                                Reply::Bypassed { bypass, .. } => Some(bypass.clone()),
                                _ => None,
                            };
                            worker.reply(reply);
                            written
                        });
                    }
                    None => break,
                },
            }
        }
        // Queued but not started: hand back so nothing is lost silently.
        rx.close();
        while let Ok(bypass) = rx.try_recv() {
            self.reply(Reply::Skipped { bypass });
        }
        // Explanations are not written on the way out: counted dropped (the next leader offers
        // them again), those still queued here by `waiting`'s own drop.
        waiting_rx.close();
        while waiting_rx.try_recv().is_ok() {
            self.metrics
                .event(WAITING_EVENT_REASON, EventOutcome::Dropped);
        }
        // Drain: what is in flight finishes (each write is bounded by the fence's timeout, and
        // the lifecycle's shutdown deadline bounds the whole), then the Events are written.
        while let Some(done) = patches.join_next().await {
            if let Some(bypass) = joined(done) {
                self.keep_for_event(&mut unrecorded, bypass);
            }
        }
        // Still within `maxInFlight`; what the shutdown deadline cuts off is counted dropped
        // (by `Unrecorded` for the queue, by `write::publish` for a write in flight).
        loop {
            while events.len() < slots {
                let Some(bypass) = unrecorded.pop_front() else {
                    break;
                };
                let worker = self.clone();
                let cancel = events_cancel.clone();
                events.spawn(async move { worker.record(&bypass, &cancel).await });
            }
            match events.join_next().await {
                Some(done) => joined(done),
                None => break,
            }
        }
    }

    /// Queue the Event of a written patch (`events: perPatch`), or drop and count it when
    /// the queue is full.
    fn keep_for_event(&self, unrecorded: &mut Unrecorded<Bypass>, bypass: Bypass) {
        if self.config.events == EventsMode::Off {
            return;
        }
        if unrecorded.len() >= MAX_UNRECORDED {
            self.metrics
                .event(BYPASS_EVENT_REASON, EventOutcome::Dropped);
            debug!(pod = %bypass.key, "too many Events waiting; this one is dropped");
            return;
        }
        unrecorded.push_back(bypass);
    }

    fn reply(&self, reply: Reply) {
        // The loop may already be gone at shutdown; nothing to do then.
        let _ = self.replies.send(reply);
    }

    async fn execute(&self, bypass: Bypass, cancel: &CancellationToken) -> Reply {
        if self.config.dry_run {
            for r in &bypass.removals {
                info!(pod = %bypass.key, initializer = %r.initializer, reason = r.reason.as_str(),
                    waited = ?r.waited, owner = %r.owner, "dry-run: would bypass initializer");
                self.metrics.bypassed(&r.initializer, r.reason);
            }
            return Reply::DryRun { bypass };
        }
        let api: Api<SlimPod> = Api::namespaced(self.client.clone(), &bypass.namespace);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match self.attempt(&api, &bypass, cancel).await {
                Attempt::NotAdmitted => return Reply::Skipped { bypass },
                Attempt::Done(pod) => {
                    for r in &bypass.removals {
                        self.metrics.bypassed(&r.initializer, r.reason);
                        info!(pod = %bypass.key, initializer = %r.initializer, reason = r.reason.as_str(),
                            waited = ?r.waited, owner = %r.owner, "bypassed initializer");
                    }
                    return Reply::Bypassed { bypass, pod };
                }
                Attempt::Refused(Refusal::Changed) => {
                    debug!(pod = %bypass.key, initializers = %bypass.names(), "pod changed; re-reading");
                    let pod = match api.get_opt(&bypass.name).await {
                        Ok(Some(pod)) => Some(Box::new(pod)),
                        Ok(None) => return Reply::Gone { bypass },
                        Err(e) => {
                            warn!(pod = %bypass.key, error = %e, "re-reading pod after a conflict failed");
                            None
                        }
                    };
                    return Reply::Stale { bypass, pod };
                }
                Attempt::Refused(Refusal::Gone) => {
                    debug!(pod = %bypass.key, "pod not found; forgetting it");
                    return Reply::Gone { bypass };
                }
                Attempt::Refused(Refusal::Refused(error)) => {
                    self.count_failed(&bypass);
                    warn!(pod = %bypass.key, initializers = %bypass.names(), %error, "bypass refused");
                    return Reply::Failed { bypass, error };
                }
                Attempt::Refused(Refusal::Transient(error)) => error,
            };
            if attempt >= MAX_ATTEMPTS {
                self.count_failed(&bypass);
                warn!(pod = %bypass.key, initializers = %bypass.names(), attempts = attempt, %error,
                    "bypass failed after retries");
                return Reply::Failed { bypass, error };
            }
            let delay = write::backoff(attempt);
            debug!(pod = %bypass.key, %error, ?delay, "bypass patch failed; retrying");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = cancel.cancelled() => return Reply::Skipped { bypass },
            }
        }
    }

    async fn attempt(
        &self,
        api: &Api<SlimPod>,
        bypass: &Bypass,
        cancel: &CancellationToken,
    ) -> Attempt {
        let Ok(permit) = self.fence.admit(cancel).await else {
            return Attempt::NotAdmitted;
        };
        let target = BypassTarget {
            uid: &bypass.uid,
            resource_version: &bypass.resource_version,
            annotations_present: bypass.annotations_present,
            previous_record: bypass.previous_record.as_deref(),
            opt_in_label: bypass
                .opt_in_label
                .as_ref()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        };
        let removals: Vec<Removal<'_>> = bypass
            .removals
            .iter()
            .map(|r| Removal {
                index: r.index,
                initializer: &r.initializer,
                reason: r.reason,
            })
            .collect();
        let patch = bypass_patch(self.config.mechanism, &target, &removals, SystemTime::now());
        let (params, patch) = (PatchParams::default(), Patch::Json::<()>(patch));
        let write = api.patch(&bypass.name, &params, &patch);
        // A write without answer may still be committed: retrying is safe because the patch
        // tests the annotation's previous state, which any committed bypass changed.
        match permit.send("a pod PATCH", write).await {
            Ok(Ok(pod)) => Attempt::Done(Box::new(pod)),
            Ok(Err(e)) => Attempt::Refused(write::classify(&e)),
            Err(e) => Attempt::Refused(Refusal::Transient(e.to_string())),
        }
    }

    /// The `InitializerBypassed` Warning Event of `bypass`, through the fence.
    async fn record(&self, bypass: &Bypass, cancel: &CancellationToken) {
        let event = bypass_event(bypass, &self.identity, jiff::Timestamp::now());
        write::publish(&self.client, &self.fence, &self.metrics, cancel, event).await;
    }

    /// The `InitializerWaiting` Event of a long-waiting pod, through the fence.
    async fn explain(&self, waiting: &Waiting, cancel: &CancellationToken) {
        if !waiting.still_waiting.holds() {
            debug!(pod = %waiting.key(), initializer = %waiting.notice.initializer,
                "no longer waiting; its explanation is not written");
            return;
        }
        let event = waiting_event(
            waiting,
            self.config.mechanism,
            &self.config.opt_in.label,
            &self.identity,
            jiff::Timestamp::now(),
        );
        debug!(pod = %waiting.key(), initializer = %waiting.notice.initializer, "explaining a long wait");
        write::publish(&self.client, &self.fence, &self.metrics, cancel, event).await;
    }

    /// One bypass error per initializer the failed patch would have removed.
    fn count_failed(&self, bypass: &Bypass) {
        for r in &bypass.removals {
            self.metrics.bypass_failed(&r.initializer);
        }
    }
}

/// Events not written yet (of written patches, or of waiting pods). Those still here when the
/// worker is dropped (the shutdown deadline aborted it, or it stopped) are counted as dropped.
struct Unrecorded<T> {
    queue: VecDeque<T>,
    metrics: Arc<Metrics>,
    reason: &'static str,
}

impl<T> Unrecorded<T> {
    fn new(metrics: Arc<Metrics>, reason: &'static str) -> Unrecorded<T> {
        Unrecorded {
            queue: VecDeque::new(),
            metrics,
            reason,
        }
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn push_back(&mut self, item: T) {
        self.queue.push_back(item);
    }

    fn pop_front(&mut self) -> Option<T> {
        self.queue.pop_front()
    }
}

impl<T> Drop for Unrecorded<T> {
    fn drop(&mut self) {
        for _ in self.queue.drain(..) {
            self.metrics.event(self.reason, EventOutcome::Dropped);
        }
    }
}

/// What a write task returned. A panic in it is passed on to the worker, so that
/// [`crate::supervise`] records it (a swallowed panic would leave a pod's bypass in flight
/// forever); tasks are aborted only when the worker itself is.
fn joined<T: Default>(done: Result<T, tokio::task::JoinError>) -> T {
    match done {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => T::default(),
    }
}

impl Bypass {
    /// The names this patch removes, comma-separated, for log lines.
    pub fn names(&self) -> String {
        let names: Vec<&str> = self
            .removals
            .iter()
            .map(|r| r.initializer.as_str())
            .collect();
        names.join(",")
    }
}

/// The longest Event message written (`write::event` cuts there).
const EVENT_NOTE_MAX: usize = 1024;
/// Ends a message whose details did not all fit.
const MORE: &str = " | … (every record is in the pod's initguard.io/bypassed annotation)";

/// The reason of the Warning Event each bypass patch is recorded with.
pub const BYPASS_EVENT_REASON: &str = "InitializerBypassed";

/// The Warning Event `InitializerBypassed` for one bypass patch, naming every initializer it
/// removed with its reason, wait and owner.
fn bypass_event(
    bypass: &Bypass,
    identity: &str,
    now: jiff::Timestamp,
) -> k8s_openapi::api::core::v1::Event {
    let one = |r: &Removed| {
        format!(
            "{} ({}) after waiting {}; owner: {}",
            r.initializer,
            r.reason.as_str(),
            humantime::format_duration(Duration::from_secs(r.waited.as_secs())),
            r.owner
        )
    };
    let note = match bypass.removals.as_slice() {
        [r] => format!("initguard removed initializer {}", one(r)),
        all => {
            // Every name first, so that a long list keeps them all within the Event's size;
            // then each one's reason, wait and owner while they fit.
            let names: Vec<&str> = all.iter().map(|r| r.initializer.as_str()).collect();
            let mut note = format!(
                "initguard removed {} initializers in one patch: {}. ",
                all.len(),
                names.join(", ")
            );
            for (i, r) in all.iter().enumerate() {
                let each = format!("{}{}", if i > 0 { " | " } else { "" }, one(r));
                if note.len() + each.len() > EVENT_NOTE_MAX - MORE.len() {
                    note.push_str(MORE);
                    break;
                }
                note.push_str(&each);
            }
            note
        }
    };
    let pod = Subject {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: Some(bypass.namespace.clone()),
        name: bypass.name.clone(),
        uid: Some(bypass.uid.clone()),
    };
    write::event(&pod, BYPASS_EVENT_REASON, "Bypass", note, identity, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bypass of pod team-a/web-1 removing `removals`.
    fn bypass_of(removals: Vec<Removed>) -> Bypass {
        Bypass {
            key: "team-a/web-1".into(),
            namespace: "team-a".into(),
            name: "web-1".into(),
            uid: "uid-1".into(),
            resource_version: "7".into(),
            removals,
            annotations_present: false,
            previous_record: None,
            opt_in_label: None,
        }
    }

    #[test]
    fn the_event_names_the_pod_the_bypass_and_this_replica() {
        let bypass = bypass_of(vec![Removed {
            index: 0,
            initializer: "sidecar.example.com".into(),
            reason: Reason::OwnerDown,
            waited: Duration::from_millis(95_700),
            owner: "deployment kube-system/sidecar down".into(),
        }]);
        let now: jiff::Timestamp = "2026-11-25T10:00:00.5Z".parse().unwrap();
        let event = bypass_event(&bypass, "master-1_ab12cd34", now);
        let reference = &event.involved_object;
        assert_eq!(
            (
                reference.kind.as_deref(),
                reference.namespace.as_deref(),
                reference.name.as_deref(),
                reference.uid.as_deref()
            ),
            (Some("Pod"), Some("team-a"), Some("web-1"), Some("uid-1"))
        );
        assert_eq!(event.reason.as_deref(), Some("InitializerBypassed"));
        assert_eq!(event.action.as_deref(), Some("Bypass"));
        assert_eq!(
            event.reporting_instance.as_deref(),
            Some("master-1_ab12cd34")
        );
        assert_eq!(
            event.message.as_deref(),
            Some(
                "initguard removed initializer sidecar.example.com (owner_down) after waiting \
                 1m 35s; owner: deployment kube-system/sidecar down"
            )
        );
    }

    #[test]
    fn one_event_names_every_initializer_of_the_patch() {
        let removed = |initializer: &str, reason, secs, owner: &str| Removed {
            index: 0,
            initializer: initializer.into(),
            reason,
            waited: Duration::from_secs(secs),
            owner: owner.into(),
        };
        let bypass = bypass_of(vec![
            removed(
                "a.example.com",
                Reason::OwnerDown,
                95,
                "lease kube-system/a down",
            ),
            removed("b.example.com", Reason::Deadline, 0, "none"),
        ]);
        let now: jiff::Timestamp = "2026-11-25T10:00:00.5Z".parse().unwrap();
        let event = bypass_event(&bypass, "master-1_ab12cd34", now);
        assert_eq!(
            event.message.as_deref(),
            Some(
                "initguard removed 2 initializers in one patch: a.example.com, b.example.com. \
                 a.example.com (owner_down) after waiting 1m 35s; owner: lease kube-system/a \
                 down | b.example.com (deadline) after waiting 0s; owner: none"
            )
        );
        assert_eq!(bypass.names(), "a.example.com,b.example.com");

        // Many at once: every name stays, the details stop where the Event ends.
        let many = Bypass {
            removals: (0..40)
                .map(|i| {
                    removed(
                        &format!("init-{i:02}.example.com"),
                        Reason::Deadline,
                        0,
                        "none",
                    )
                })
                .collect(),
            ..bypass
        };
        let event = bypass_event(&many, "master-1_ab12cd34", now);
        let message = event.message.unwrap_or_default();
        assert!(message.len() <= EVENT_NOTE_MAX, "{}", message.len());
        assert!(message.ends_with(MORE), "{message}");
        for i in 0..40 {
            assert!(
                message.contains(&format!("init-{i:02}.example.com")),
                "{message}"
            );
        }
    }

    /// Events still queued when the worker is dropped (the shutdown deadline aborted it) are
    /// counted as dropped; none are counted twice.
    #[test]
    fn events_left_unwritten_count_as_dropped() {
        let config = crate::config::from_yaml_str("{}", "test.yaml").unwrap();
        let metrics = Arc::new(Metrics::new(&config).unwrap());
        let dropped = || {
            metrics
                .events_total
                .with_label_values(&[BYPASS_EVENT_REASON, "dropped"])
                .get()
        };
        let bypass = bypass_of(Vec::new());
        let mut queue = Unrecorded::new(metrics.clone(), BYPASS_EVENT_REASON);
        for _ in 0..3 {
            queue.push_back(bypass.clone());
        }
        assert!(queue.pop_front().is_some());
        assert_eq!(dropped(), 0);
        drop(queue);
        assert_eq!(dropped(), 2);
    }
}
