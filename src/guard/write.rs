//! The one write path of both writers (the pod actuator and the webhook guard): what an
//! answer means ([`classify`]), the Warning Event each change is recorded with ([`event`])
//! and the backoff between tries. Writes themselves pass the [`super::fence::Fence`].

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};
use rand::Rng;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::fence::Fence;
use crate::metrics::{EventOutcome, Metrics};

const BACKOFF_BASE: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What a refused write means for the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The object changed since it was read (409, or a JSON Patch `test` that failed): read
    /// it again and decide again. Never a blind retry.
    Changed,
    /// No such object (404).
    Gone,
    /// Worth trying again after a backoff: 429, 5xx, no answer, a transport failure.
    Transient(String),
    /// Refused for a reason a fresh read does not fix (403, a validation 422, any other 4xx):
    /// counted as an error and backed off, never re-sent at once.
    Refused(String),
}

/// The message of a JSON Patch that could not be applied on servers from 1.14 on
/// (`NewGenericServerResponse(422, …)`; some servers append the patch library's words).
const PATCH_NOT_APPLIED: &str = "the server rejected our request due to an error in our request";

/// Sort an API error into what to do next. A 422 means "changed" only with the wording of a
/// JSON Patch that could not be applied: a failed `test`, a tested path that is gone, an
/// index past the end of a list that shrank. Servers before the 422 mapping (1.7 to about 1.10;
/// the real 1.13 answers 422) answered those 500 with the patch library's words instead
/// (kubernetes/kubernetes#68202: "Testing value /resourceVersion failed").
pub fn classify(error: &kube::Error) -> Refusal {
    let kube::Error::Api(status) = error else {
        return Refusal::Transient(error.to_string());
    };
    let code = status.code;
    let what = format!("{code} {}: {}", status.reason, status.message);
    match code {
        404 => Refusal::Gone,
        409 => Refusal::Changed,
        422 if patch_not_applied(&status.message) => Refusal::Changed,
        500 if patch_library_words(&status.message) => Refusal::Changed,
        429 | 500..=599 => Refusal::Transient(what),
        _ => Refusal::Refused(what),
    }
}

/// The 422 of a JSON Patch that did not apply: the server's generic sentence, alone or
/// followed by the patch library's words, or those words alone.
fn patch_not_applied(message: &str) -> bool {
    message == PATCH_NOT_APPLIED
        || message
            .strip_prefix(PATCH_NOT_APPLIED)
            .is_some_and(|rest| rest.starts_with(": "))
        || patch_library_words(message)
}

/// evanphx/json-patch's wording for a document that no longer matches the patch.
fn patch_library_words(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("testing value")
        || m.contains("test operation does not apply")
        || m.contains("unable to access invalid index")
}

/// Full jitter: uniform in [0, min(max, base·2^attempt)], at least 10 ms.
pub fn backoff(attempt: u32) -> Duration {
    let cap = BACKOFF_BASE
        .saturating_mul(1 << attempt.min(16))
        .min(BACKOFF_MAX);
    let ms = rand::rng().random_range(0..=cap.as_millis() as u64);
    Duration::from_millis(ms.max(10))
}

/// What a Warning Event is about.
#[derive(Debug, Clone)]
pub struct Subject {
    pub api_version: String,
    pub kind: String,
    /// None for a cluster-scoped object: its Event goes to `default`.
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
}

/// The namespace of Events about cluster-scoped objects, as kubectl and client-go use it.
const CLUSTER_EVENTS: &str = "default";

/// One Warning Event (core/v1, served by every Kubernetes version; events.k8s.io/v1 only
/// from 1.19), named like client-go's recorder names Events (`<object>.<hex nanoseconds>`)
/// plus a random suffix, so two changes of one object in the same instant get an Event each.
/// A fresh Event per change keeps each visible on its own: kube-runtime's Recorder folds a
/// repeat into the first Event's series, hiding the second initializer's name.
pub fn event(
    subject: &Subject,
    reason: &str,
    action: &str,
    note: String,
    identity: &str,
    now: jiff::Timestamp,
) -> Event {
    let suffix: u32 = rand::rng().random();
    let nanos = u64::try_from(now.as_nanosecond()).unwrap_or_default();
    let namespace = subject.namespace.as_deref().unwrap_or(CLUSTER_EVENTS);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{nanos:x}{suffix:08x}", subject.name)),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(subject.api_version.clone()),
            kind: Some(subject.kind.clone()),
            name: Some(subject.name.clone()),
            namespace: subject.namespace.clone(),
            uid: subject.uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_owned()),
        message: Some(truncate(note, 1024)),
        type_: Some("Warning".into()),
        action: Some(action.to_owned()),
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

/// Build the Warning Event about `subject` ([`event`], now) and write it ([`publish`]).
#[allow(clippy::too_many_arguments)]
pub async fn warn_about(
    client: &kube::Client,
    fence: &Fence,
    metrics: &Metrics,
    cancel: &CancellationToken,
    identity: &str,
    subject: &Subject,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = event(
        subject,
        reason,
        action,
        note,
        identity,
        jiff::Timestamp::now(),
    );
    publish(client, fence, metrics, cancel, event).await;
}

/// Write `event` through the fence. A lost Event never undoes or repeats the change it
/// records: failures are logged and counted in `initguard_events_total` only.
pub async fn publish(
    client: &kube::Client,
    fence: &Fence,
    metrics: &Metrics,
    cancel: &CancellationToken,
    event: Event,
) {
    let reason = event.reason.clone().unwrap_or_default();
    // Counted however this ends: an outcome below, or dropped if the write is abandoned
    // (its task aborted at the shutdown deadline).
    let mut unsettled = Unsettled {
        metrics,
        reason: &reason,
        settled: false,
    };
    let about = format!(
        "{}/{}",
        event.involved_object.namespace.as_deref().unwrap_or(""),
        event.involved_object.name.as_deref().unwrap_or("")
    );
    let Ok(permit) = fence.admit(cancel).await else {
        warn!(%about, reason, "not leading any more; event not recorded");
        unsettled.settle(EventOutcome::Dropped);
        return;
    };
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let params = PostParams::default();
    let outcome = match permit.send("an Event", api.create(&params, &event)).await {
        Ok(Ok(_)) => EventOutcome::Written,
        // Events named for what they record (InitializerWaiting) are written once.
        Ok(Err(kube::Error::Api(e))) if e.code == 409 => EventOutcome::Exists,
        Ok(Err(e)) => {
            warn!(%about, reason, error = %e, "could not record the event");
            EventOutcome::Failed
        }
        Err(e) => {
            warn!(%about, reason, error = %e, "recording the event timed out");
            EventOutcome::Failed
        }
    };
    unsettled.settle(outcome);
}

/// An Event write not yet counted in `initguard_events_total`; dropped unsettled, it counts as
/// dropped.
struct Unsettled<'a> {
    metrics: &'a Metrics,
    reason: &'a str,
    settled: bool,
}

impl Unsettled<'_> {
    fn settle(&mut self, outcome: EventOutcome) {
        self.metrics.event(self.reason, outcome);
        self.settled = true;
    }
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.metrics.event(self.reason, EventOutcome::Dropped);
        }
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate(mut s: String, max: usize) -> String {
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
    fn a_changed_object_only_with_a_conflict_or_a_patch_that_did_not_apply() {
        let changed = [
            (409, "Conflict", "the object has been modified"),
            (422, "Invalid", PATCH_NOT_APPLIED),
            (
                422,
                "Invalid",
                "the server rejected our request due to an error in our request: testing value /metadata/resourceVersion failed: test failed",
            ),
            (
                500,
                "InternalError",
                "Testing value /spec/schedulingGates/0/name failed",
            ),
            (
                500,
                "InternalError",
                "jsonpatch test operation does not apply: is missing path: /metadata/initializers/pending/1/name",
            ),
            (500, "InternalError", "Unable to access invalid index: 1"),
        ];
        for (code, reason, message) in changed {
            assert_eq!(
                classify(&status(code, reason, message)),
                Refusal::Changed,
                "{message}"
            );
        }
        assert_eq!(classify(&status(404, "NotFound", "")), Refusal::Gone);
        for (code, reason, message) in [
            (500, "InternalError", "etcd timeout"),
            (429, "TooManyRequests", ""),
            (503, "ServiceUnavailable", ""),
        ] {
            assert!(
                matches!(
                    classify(&status(code, reason, message)),
                    Refusal::Transient(_)
                ),
                "{code} {message}"
            );
        }
        for (code, reason, message) in [
            (403, "Forbidden", "no"),
            (
                422,
                "Invalid",
                "Pod \"web-1\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes",
            ),
            // The generic sentence with something else glued on is not a patch failure.
            (
                422,
                "Invalid",
                "the server rejected our request due to an error in our requests",
            ),
            (400, "BadRequest", "the server could not decode the patch"),
        ] {
            let refusal = classify(&status(code, reason, message));
            assert_eq!(
                refusal,
                Refusal::Refused(format!("{code} {reason}: {message}")),
                "{message}"
            );
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
    fn the_event_names_its_object_the_change_and_this_replica() {
        let pod = Subject {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("team-a".into()),
            name: "web-1".into(),
            uid: Some("uid-1".into()),
        };
        let now: jiff::Timestamp = "2026-11-25T10:00:00.5Z".parse().unwrap();
        let note = "initguard removed initializer sidecar.example.com".to_owned();
        let event = event(
            &pod,
            "InitializerBypassed",
            "Bypass",
            note.clone(),
            "master-1_ab12cd34",
            now,
        );
        let event = serde_json::to_value(event).unwrap();
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
                "message": note,
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
        // Two changes of one object in the same instant get an Event each.
        let again = super::event(&pod, "InitializerBypassed", "Bypass", note, "x", now);
        assert_ne!(again.metadata.name.as_deref(), Some(name.as_str()));
        // A cluster-scoped object's Event lives in `default`, without a namespace in its
        // reference.
        let configuration = Subject {
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: "ValidatingWebhookConfiguration".into(),
            namespace: None,
            name: "policy".into(),
            uid: None,
        };
        let e = super::event(
            &configuration,
            "WebhookBypassed",
            "Bypass",
            "x".repeat(2000),
            "r",
            now,
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.involved_object.namespace, None);
        assert_eq!(e.message.map(|m| m.len()), Some(1024));
    }

    #[test]
    fn truncates_on_char_boundary() {
        assert_eq!(truncate("ééé".into(), 3), "é");
        assert_eq!(truncate("ééé".into(), 4), "éé");
        assert_eq!(truncate("abc".into(), 3), "abc");
        assert_eq!(truncate("abc".into(), 2), "ab");
    }

    /// An Event write abandoned before its answer (its task aborted) counts as dropped; one
    /// that settled counts once, as what it became.
    #[test]
    fn an_abandoned_event_write_counts_as_dropped_once() {
        let config = crate::config::from_yaml_str("{}", "test.yaml").unwrap();
        let metrics = Metrics::new(&config).unwrap();
        let count = |outcome: &str| {
            metrics
                .events_total
                .with_label_values(&["InitializerBypassed", outcome])
                .get()
        };
        drop(Unsettled {
            metrics: &metrics,
            reason: "InitializerBypassed",
            settled: false,
        });
        let mut written = Unsettled {
            metrics: &metrics,
            reason: "InitializerBypassed",
            settled: false,
        };
        written.settle(EventOutcome::Written);
        drop(written);
        assert_eq!((count("dropped"), count("written")), (1, 1));
    }
}
