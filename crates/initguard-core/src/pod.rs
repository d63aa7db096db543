//! A slim pod: only what the guard reads, decoded straight from the API's JSON.
//!
//! The guard may watch tens of thousands of pods; decoding full `k8s_openapi` Pods would parse
//! and keep managedFields, specs and statuses it never looks at.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

use crate::bypass::BYPASSED_ANNOTATION;
use crate::config::Mechanism;
use crate::node_stage::{InitProgress, InitStep, RestartPolicy, StepStatus};
use crate::policy::ControllerRef;

/// The parts of a Pod the guard needs; the API treats it as a Pod.
#[derive(Debug, Clone, Default, PartialEq, kube::Resource)]
#[resource(inherit = k8s_openapi::api::core::v1::Pod)]
pub struct SlimPod {
    /// name, namespace, uid, resourceVersion, labels, creationTimestamp, deletionTimestamp,
    /// deletionGracePeriodSeconds and the controlling ownerReference only.
    pub metadata: ObjectMeta,
    /// `spec.schedulingGates[].name`, in order.
    pub scheduling_gates: Vec<String>,
    /// `metadata.initializers.pending[].name`, in order.
    pub initializers: Vec<String>,
    /// Whether `metadata.annotations` exists (decides how the bypass patch records itself).
    pub annotations_present: bool,
    /// Current value of the `initguard.io/bypassed` annotation.
    pub bypassed_record: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
    /// The node stage's facts, only for a bound pod with init containers whose `Initialized`
    /// condition is not True (boxed: most pods have none).
    pub init: Option<Box<InitProgress>>,
    /// The `Initialized` condition is True.
    pub initialized: bool,
    /// `spec.nodeName` (empty while unscheduled).
    pub node_name: String,
    /// The `Ready` condition is True.
    pub ready: bool,
    /// When the `Ready` condition turned True (its `lastTransitionTime`), while it is True:
    /// when a node agent's up-period began.
    pub ready_since: Option<SystemTime>,
}

impl SlimPod {
    /// Pending initializer names for `mechanism`.
    pub fn pending(&self, mechanism: Mechanism) -> &[String] {
        match mechanism {
            Mechanism::SchedulingGates => &self.scheduling_gates,
            Mechanism::Initializers => &self.initializers,
        }
    }

    /// The controlling owner (ownerReference with `controller: true`).
    pub fn controller(&self) -> Option<ControllerRef> {
        self.metadata
            .owner_references
            .as_deref()?
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| ControllerRef {
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
            })
    }

    /// `metadata.creationTimestamp` as SystemTime.
    pub fn created(&self) -> Option<SystemTime> {
        self.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| SystemTime::from(t.0))
    }

    /// When the pod's deletion was requested, to the second: a graceful delete sets
    /// `deletionTimestamp` to the request's time plus the grace period
    /// (`deletionGracePeriodSeconds`, whole seconds both), so anything created because of the
    /// deletion (a replacement) carries a `creationTimestamp` at or after this, not
    /// necessarily after `deletionTimestamp`. A later, shorter delete keeps the difference,
    /// or (newer servers, where it would fall in the past) sets both to now: then this is
    /// later than the request, which is why callers keep the earliest they saw.
    pub fn deletion_requested(&self) -> Option<SystemTime> {
        let at = SystemTime::from(self.metadata.deletion_timestamp.as_ref()?.0);
        let grace = self
            .metadata
            .deletion_grace_period_seconds
            .and_then(|g| u64::try_from(g).ok())
            .unwrap_or(0);
        Some(at.checked_sub(Duration::from_secs(grace)).unwrap_or(at))
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPod {
    #[serde(default, deserialize_with = "null_default")]
    metadata: RawMeta,
    #[serde(default, deserialize_with = "null_default")]
    spec: RawSpec,
    #[serde(default, deserialize_with = "null_default")]
    status: RawStatus,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    labels: BTreeMap<String, String>,
    annotations: Option<Annotations>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default, deserialize_with = "null_default")]
    owner_references: Vec<OwnerReference>,
    #[serde(default, deserialize_with = "null_default")]
    initializers: RawInitializers,
}

#[derive(Deserialize, Default)]
struct RawInitializers {
    #[serde(default, deserialize_with = "null_default")]
    pending: Vec<Entry>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawSpec {
    #[serde(default, deserialize_with = "null_default")]
    scheduling_gates: Vec<Entry>,
    #[serde(default, deserialize_with = "lenient_string")]
    node_name: String,
    #[serde(default, deserialize_with = "lenient_string")]
    restart_policy: String,
    #[serde(default, deserialize_with = "lenient_list")]
    init_containers: Vec<Lenient<RawInitContainer>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStatus {
    phase: Option<String>,
    #[serde(default, deserialize_with = "lenient_list")]
    conditions: Vec<Lenient<RawCondition>>,
    #[serde(default, deserialize_with = "lenient_list")]
    init_container_statuses: Vec<Lenient<RawContainerStatus>>,
}

/// A list entry of the expected shape, or anything else (kept as absent rather than failing
/// the whole pod, as for pending entries).
enum Lenient<T> {
    Valid(T),
    Other,
}

/// A list the node stage reads: anything but a list reads as empty, and each entry of the
/// wrong shape (a field of the wrong type anywhere in it) as [`Lenient::Other`], so that a
/// malformed status never loses the pod, whose gates still count.
fn lenient_list<'de, D, T>(d: D) -> Result<Vec<Lenient<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Array(entries) => entries
            .into_iter()
            .map(|e| serde_json::from_value(e).map_or(Lenient::Other, Lenient::Valid))
            .collect(),
        _ => Vec::new(),
    })
}

impl<T> Lenient<T> {
    fn valid(self) -> Option<T> {
        match self {
            Lenient::Valid(t) => Some(t),
            Lenient::Other => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawInitContainer {
    #[serde(default, deserialize_with = "lenient_string")]
    name: String,
    #[serde(default, deserialize_with = "lenient_string")]
    restart_policy: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCondition {
    #[serde(default, rename = "type", deserialize_with = "lenient_string")]
    type_: String,
    #[serde(default, deserialize_with = "lenient_string")]
    status: String,
    #[serde(default, deserialize_with = "lenient_time")]
    last_transition_time: Option<Time>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawContainerStatus {
    #[serde(default, deserialize_with = "lenient_string")]
    name: String,
    #[serde(default)]
    started: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    state: RawState,
    #[serde(default, deserialize_with = "null_default")]
    last_state: RawState,
    #[serde(default)]
    restart_count: Option<i64>,
}

#[derive(Deserialize, Default)]
struct RawState {
    #[serde(default)]
    running: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    terminated: Option<RawTerminated>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTerminated {
    exit_code: i64,
}

impl RawState {
    fn exit_code(&self) -> Option<i32> {
        self.terminated
            .as_ref()
            .and_then(|t| i32::try_from(t.exit_code).ok())
    }
}

fn lenient_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    Ok(serde_json::from_value(serde_json::Value::deserialize(d)?).ok())
}

/// Whether the pod's `Initialized` condition is True.
fn initialized(status: &RawStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| matches!(c, Lenient::Valid(c) if c.type_ == "Initialized" && c.status == "True"))
}

/// The node-stage facts of a pod as read: None unless it is bound, has init containers and
/// its `Initialized` condition is not True.
fn init_progress(spec: &mut RawSpec, status: &mut RawStatus) -> Option<Box<InitProgress>> {
    if initialized(status) {
        return None;
    }
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .filter_map(|c| match c {
                Lenient::Valid(c) if c.type_ == kind => Some(c),
                _ => None,
            })
            .next()
    };
    if spec.node_name.is_empty() || spec.init_containers.is_empty() {
        return None;
    }
    let scheduled_at = condition("PodScheduled")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| SystemTime::from(t.0));
    let mut statuses: Vec<RawContainerStatus> = std::mem::take(&mut status.init_container_statuses)
        .into_iter()
        .filter_map(Lenient::valid)
        .collect();
    let steps = std::mem::take(&mut spec.init_containers)
        .into_iter()
        .map(|c| {
            let c = c.valid();
            let name = c.as_ref().map(|c| c.name.clone()).unwrap_or_default();
            let own = c
                .as_ref()
                .and_then(|c| RestartPolicy::parse(&c.restart_policy));
            let status = statuses
                .iter()
                .position(|s| !name.is_empty() && s.name == name)
                .map(|i| statuses.swap_remove(i))
                .map(|s| StepStatus {
                    started: s.started == Some(true),
                    running: s.state.running.is_some(),
                    exit_code: s.state.exit_code(),
                    last_exit_code: s.last_state.exit_code(),
                    restarts: s
                        .restart_count
                        .and_then(|n| u32::try_from(n).ok())
                        .unwrap_or(0),
                });
            InitStep {
                name,
                restart_policy: own,
                status,
            }
        })
        .collect();
    Some(Box::new(InitProgress {
        node: std::mem::take(&mut spec.node_name),
        scheduled_at,
        // The API server defaults it to Always.
        restart_policy: RestartPolicy::parse(&spec.restart_policy).unwrap_or(RestartPolicy::Always),
        steps,
    }))
}

/// `{name: ...}` entries; an entry without a string name is kept as "" so indices stay aligned
/// with the API object (the patch tests name-at-index).
#[derive(Deserialize)]
struct Named {
    #[serde(default, deserialize_with = "lenient_string")]
    name: String,
}

/// A pending-list entry of any shape: one that is not even an object (null, a scalar) reads as
/// an entry without a name rather than failing the whole pod, and with it a whole list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Entry {
    Named(Named),
    Other(serde::de::IgnoredAny),
}

impl Entry {
    fn name(self) -> String {
        match self {
            Entry::Named(n) => n.name,
            Entry::Other(_) => String::new(),
        }
    }
}

/// Keeps only our annotation out of a possibly large map.
struct Annotations(Option<String>);

impl<'de> Deserialize<'de> for Annotations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Annotations;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Annotations, A::Error> {
                let mut ours = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == BYPASSED_ANNOTATION {
                        ours = map.next_value::<Option<String>>()?;
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(Annotations(ours))
            }
        }
        d.deserialize_map(V)
    }
}

fn null_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        _ => String::new(),
    })
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut raw = RawPod::deserialize(d)?;
        let initialized = initialized(&raw.status);
        let ready_since = raw.status.conditions.iter().find_map(|c| match c {
            Lenient::Valid(c) if c.type_ == "Ready" && c.status == "True" => Some(
                c.last_transition_time
                    .as_ref()
                    .map(|t| SystemTime::from(t.0)),
            ),
            _ => None,
        });
        let node_name = raw.spec.node_name.clone();
        let init = init_progress(&mut raw.spec, &mut raw.status);
        let m = raw.metadata;
        let controller: Vec<OwnerReference> = m
            .owner_references
            .into_iter()
            .filter(|o| o.controller == Some(true))
            .take(1)
            .collect();
        Ok(SlimPod {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                labels: (!m.labels.is_empty()).then_some(m.labels),
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                owner_references: (!controller.is_empty()).then_some(controller),
                ..ObjectMeta::default()
            },
            scheduling_gates: raw
                .spec
                .scheduling_gates
                .into_iter()
                .map(Entry::name)
                .collect(),
            initializers: m
                .initializers
                .pending
                .into_iter()
                .map(Entry::name)
                .collect(),
            annotations_present: m.annotations.is_some(),
            bypassed_record: m.annotations.and_then(|a| a.0),
            phase: raw.status.phase,
            init,
            initialized,
            node_name,
            ready: ready_since.is_some(),
            ready_since: ready_since.flatten(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_only_what_the_guard_reads() {
        let pod: SlimPod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "creationTimestamp": "2026-11-21T10:00:00Z",
                "labels": {"initguard.io/bypass": "", "app": "x"},
                "annotations": {"big": "x".repeat(10_000), "initguard.io/bypassed": "a=deadline@2026-11-21T10:00:20Z"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "nu"},
                    {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "ju", "controller": true}
                ],
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                "initializers": {"pending": [{"name": "i1"}, {"name": "i2"}]}
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulingGates": [{"name": "g1"}, {}]},
            "status": {"phase": "Pending"}
        }))
        .unwrap();
        assert_eq!(pod.key(), "ns/p");
        assert_eq!(pod.scheduling_gates, vec!["g1".to_string(), String::new()]);
        assert_eq!(pod.initializers, vec!["i1".to_string(), "i2".to_string()]);
        assert_eq!(pod.controller().unwrap().kind, "Job");
        assert!(pod.annotations_present);
        assert_eq!(
            pod.bypassed_record.as_deref(),
            Some("a=deadline@2026-11-21T10:00:20Z")
        );
        assert_eq!(pod.metadata.labels.as_ref().unwrap().len(), 2);
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(pod.phase.as_deref(), Some("Pending"));
        assert!(pod.created().is_some());
    }

    #[test]
    fn tolerates_nulls_and_missing_fields() {
        let pod: SlimPod = serde_json::from_value(
            json!({"metadata": {"name": "p", "labels": null, "annotations": null,
            "ownerReferences": null, "initializers": null}, "spec": null, "status": null}),
        )
        .unwrap();
        assert!(pod.scheduling_gates.is_empty() && pod.initializers.is_empty());
        assert!(!pod.annotations_present);
        let pod: SlimPod = serde_json::from_value(json!({"spec": {"schedulingGates":
            [null, 7, "g", [], {"name": null}, {"name": "g1"}]}}))
        .unwrap();
        assert_eq!(pod.scheduling_gates, ["", "", "", "", "", "g1"]);
        let pod: SlimPod = serde_json::from_value(json!({})).unwrap();
        assert_eq!(pod.key(), "/");
        assert!(serde_json::from_str::<SlimPod>("{\"metadata\": ").is_err());
    }

    fn bound_pod(initialized: &str) -> serde_json::Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "nodeName": "node-3",
                "restartPolicy": "OnFailure",
                "initContainers": [
                    {"name": "istio-validation", "image": "x"},
                    {"name": "proxy", "restartPolicy": "Always"},
                    7,
                    {"name": "last", "restartPolicy": "Never"}
                ],
                "containers": [{"name": "c"}]
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"},
                    {"type": "Initialized", "status": initialized},
                    null
                ],
                "initContainerStatuses": [
                    {"name": "proxy", "started": false, "state": {"waiting": {"reason": "PodInitializing"}}},
                    {"name": "istio-validation", "started": false, "restartCount": 4,
                     "state": {"terminated": {"exitCode": 126}},
                     "lastState": {"terminated": {"exitCode": 126, "reason": "Error"}}},
                    "junk"
                ]
            }
        })
    }

    #[test]
    fn decodes_the_init_steps_of_a_bound_uninitialized_pod() {
        let pod: SlimPod = serde_json::from_value(bound_pod("False")).unwrap();
        let init = pod.init.expect("bound and not initialized");
        assert_eq!(init.node, "node-3");
        assert_eq!(init.restart_policy, RestartPolicy::OnFailure);
        assert_eq!(
            init.scheduled_at,
            Some(SystemTime::from(
                "2026-12-01T10:00:00Z".parse::<jiff::Timestamp>().unwrap()
            ))
        );
        let names: Vec<&str> = init.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["istio-validation", "proxy", "", "last"]);
        let first = init.steps[0].status.expect("reported");
        assert_eq!(
            (
                first.exit_code,
                first.last_exit_code,
                first.restarts,
                first.started
            ),
            (Some(126), Some(126), 4, false)
        );
        assert!(init.steps[1].is_sidecar() && !init.steps[0].is_sidecar());
        assert_eq!(init.steps[3].restart_policy, Some(RestartPolicy::Never));
        assert!(init.steps[1].status.is_some_and(|s| !s.running));
        assert!(init.steps[2].status.is_none() && init.steps[3].status.is_none());
        assert_eq!(pod.node_name, "node-3");
        assert!(!pod.ready && pod.ready_since.is_none());
    }

    #[test]
    fn reads_when_a_ready_pod_turned_ready() {
        let mut p = bound_pod("True");
        p["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
            "lastTransitionTime": "2026-12-01T10:00:05Z"}]);
        let pod: SlimPod = serde_json::from_value(p.clone()).unwrap();
        assert!(pod.ready);
        assert_eq!(
            pod.ready_since,
            Some(SystemTime::from(
                "2026-12-01T10:00:05Z".parse::<jiff::Timestamp>().unwrap()
            ))
        );
        p["status"]["conditions"][0]["status"] = json!("False");
        let pod: SlimPod = serde_json::from_value(p).unwrap();
        assert!(!pod.ready && pod.ready_since.is_none());
    }

    #[test]
    fn keeps_no_init_steps_once_initialized_or_while_unbound() {
        let pod: SlimPod = serde_json::from_value(bound_pod("True")).unwrap();
        assert!(pod.init.is_none() && pod.initialized);
        assert!(
            !serde_json::from_value::<SlimPod>(bound_pod("False"))
                .unwrap()
                .initialized
        );
        let mut unbound = bound_pod("False");
        unbound["spec"]["nodeName"] = json!(null);
        let pod: SlimPod = serde_json::from_value(unbound).unwrap();
        assert!(pod.init.is_none());
        let mut none = bound_pod("False");
        none["spec"]["initContainers"] = json!([]);
        assert!(
            serde_json::from_value::<SlimPod>(none)
                .unwrap()
                .init
                .is_none()
        );
        // No restartPolicy: the server's default; no PodScheduled time: none.
        let mut bare = bound_pod("False");
        bare["spec"]["restartPolicy"] = json!(null);
        bare["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True",
            "lastTransitionTime": "not a time"}]);
        let init = serde_json::from_value::<SlimPod>(bare)
            .unwrap()
            .init
            .unwrap();
        assert_eq!(init.restart_policy, RestartPolicy::Always);
        assert_eq!(init.scheduled_at, None);
    }
}
