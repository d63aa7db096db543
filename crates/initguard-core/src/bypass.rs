//! Reading pending initializer names and building the bypass JSON Patch, per mechanism.
//!
//! A bypass is one atomic JSON Patch (README "What it guarantees": only the failed initializers):
//! it `test`s that the pod is still the one decided about, that it is still opted in by the label
//! value decided on, and that each initializer due still sits at its decided index, then removes
//! exactly those entries and appends one record each to the `initguard.io/bypassed` annotation.

use std::time::SystemTime;

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
};
use serde::Serialize;
use serde_json::Value;

use crate::config::Mechanism;
use crate::policy::Reason;

/// Annotation listing every bypass performed on a pod, `NAME=REASON@RFC3339` entries joined by `,`.
pub const BYPASSED_ANNOTATION: &str = "initguard.io/bypassed";

/// Separator between records in [`BYPASSED_ANNOTATION`].
const RECORD_SEPARATOR: char = ',';

/// Unescaped JSON pointer tokens of the pending list for `mechanism`.
fn pending_list_tokens(mechanism: Mechanism) -> &'static [&'static str] {
    match mechanism {
        Mechanism::SchedulingGates => &["spec", "schedulingGates"],
        Mechanism::Initializers => &["metadata", "initializers", "pending"],
    }
}

/// Pointer of the pending entry at `index`, optionally to one of its fields.
fn pending_entry(mechanism: Mechanism, index: usize, field: Option<&str>) -> PointerBuf {
    let mut path = pointer(pending_list_tokens(mechanism));
    path.push_back(index);
    if let Some(field) = field {
        path.push_back(field);
    }
    path
}

/// The pending list of a raw pod, if it has one.
fn pending_list(mechanism: Mechanism, pod: &Value) -> Option<&Vec<Value>> {
    pending_list_tokens(mechanism)
        .iter()
        .try_fold(pod, |value, token| value.get(token))?
        .as_array()
}

/// Pending initializer names of a raw pod (as the API server returns it), in API order.
///
/// A missing or malformed list reads as empty; entries without a string `name` are skipped. The
/// API server never stores such entries, and a patch built from a shifted index fails its `test`.
pub fn pending_names(mechanism: Mechanism, pod: &Value) -> Vec<String> {
    pending_list(mechanism, pod)
        .map(|list| {
            list.iter()
                .filter_map(|entry| entry.get("name")?.as_str())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// JSON pointer of the pending entry at `index`, e.g. `/spec/schedulingGates/3`.
pub fn pending_pointer(mechanism: Mechanism, index: usize) -> String {
    pending_entry(mechanism, index, None).to_string()
}

/// One record of [`BYPASSED_ANNOTATION`]: `NAME=REASON@RFC3339`, UTC with seconds precision.
pub fn record_entry(initializer: &str, reason: Reason, at: SystemTime) -> String {
    format!("{initializer}={}@{}", reason.as_str(), rfc3339_seconds(at))
}

/// `at` as RFC 3339 in UTC with whole seconds. Clocks outside 1970..=9999 are clamped to that
/// range so a record is always well-formed.
pub fn rfc3339_seconds(at: SystemTime) -> String {
    let timestamp = if at < SystemTime::UNIX_EPOCH {
        jiff::Timestamp::UNIX_EPOCH
    } else {
        jiff::Timestamp::try_from(at).unwrap_or(jiff::Timestamp::MAX)
    };
    // Whole seconds: truncating the fraction keeps the record short and stable.
    let seconds = jiff::Timestamp::from_second(timestamp.as_second()).unwrap_or(timestamp);
    seconds.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// One parsed record of [`BYPASSED_ANNOTATION`]. Fields are kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BypassRecord {
    /// The bypassed initializer's name.
    pub initializer: String,
    /// Why it was bypassed: `deadline`, `owner_down` or `pileup`.
    pub reason: String,
    /// When, as RFC 3339 in UTC.
    pub at: String,
}

/// The records of an [`BYPASSED_ANNOTATION`] value, in order; malformed entries are skipped.
pub fn parse_records(annotation: &str) -> Vec<BypassRecord> {
    annotation
        .split(RECORD_SEPARATOR)
        .filter_map(|entry| {
            let (head, at) = entry.trim().rsplit_once('@')?;
            let (initializer, reason) = head.split_once('=')?;
            if initializer.is_empty() || reason.is_empty() || at.is_empty() {
                return None;
            }
            Some(BypassRecord {
                initializer: initializer.to_string(),
                reason: reason.to_string(),
                at: at.to_string(),
            })
        })
        .collect()
}

/// The pod state a bypass patch is built against (as last read).
#[derive(Debug, Clone, Copy)]
pub struct BypassTarget<'a> {
    /// `metadata.uid`: a recreated pod with the same name must not be touched.
    pub uid: &'a str,
    /// `metadata.resourceVersion`: guards creating the annotations map.
    pub resource_version: &'a str,
    /// Whether `metadata.annotations` exists (as a map).
    pub annotations_present: bool,
    /// Current value of [`BYPASSED_ANNOTATION`], if set.
    pub previous_record: Option<&'a str>,
    /// The opt-in label (key, observed value) the decision relied on; None when the pod's
    /// namespace opts it in (the label does not matter then).
    pub opt_in_label: Option<(&'a str, &'a str)>,
}

/// One pending entry a bypass removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removal<'a> {
    /// Index of the entry in the pending list as read.
    pub index: usize,
    /// Name expected at `index`.
    pub initializer: &'a str,
    /// Why it is removed (recorded in [`BYPASSED_ANNOTATION`]).
    pub reason: Reason,
}

/// The single atomic JSON Patch that removes every entry of `removals` (each at its index, as
/// read) and records each in [`BYPASSED_ANNOTATION`], in pending order. Entries are removed
/// highest index first, so every index stays valid while the patch applies. Any failed `test`
/// means the pod changed: re-read and re-decide.
///
/// `removals` must be non-empty (an empty list yields a patch that removes nothing); an index
/// given twice is removed once.
pub fn bypass_patch(
    mechanism: Mechanism,
    target: &BypassTarget<'_>,
    removals: &[Removal<'_>],
    at: SystemTime,
) -> Patch {
    let mut removals = removals.to_vec();
    removals.sort_by_key(|r| r.index);
    // One entry is removed once: a second removal of an index would remove the untested entry
    // that moved into its place.
    removals.dedup_by_key(|r| r.index);
    let record = removals
        .iter()
        .map(|r| record_entry(r.initializer, r.reason, at))
        .collect::<Vec<_>>()
        .join(&RECORD_SEPARATOR.to_string());
    let mut ops = vec![test(pointer(&["metadata", "uid"]), Value::from(target.uid))];
    if let Some((key, value)) = target.opt_in_label {
        // Removed or changed since the read (opted out): the patch fails and the pod is re-read.
        ops.push(test(
            pointer(&["metadata", "labels", key]),
            Value::from(value),
        ));
    }
    // Every name is tested where it was read before anything moves.
    for r in &removals {
        ops.push(test(
            pending_entry(mechanism, r.index, Some("name")),
            Value::from(r.initializer),
        ));
    }
    for r in removals.iter().rev() {
        ops.push(PatchOperation::Remove(RemoveOperation {
            path: pending_entry(mechanism, r.index, None),
        }));
    }
    let annotation = pointer(&["metadata", "annotations", BYPASSED_ANNOTATION]);
    match target.previous_record {
        Some(previous) => {
            // Appending must not lose a record written since the read: test the exact old value.
            let value = if previous.trim().is_empty() {
                record
            } else {
                format!("{previous}{RECORD_SEPARATOR}{record}")
            };
            ops.push(test(annotation.clone(), Value::from(previous)));
            ops.push(PatchOperation::Replace(ReplaceOperation {
                path: annotation,
                value: Value::from(value),
            }));
        }
        None if target.annotations_present => {
            // JSON Patch cannot test that a key is absent, and `add` would overwrite a record
            // written since the read (by a replica that still thought it led, or anyone): pin
            // the resourceVersion so the patch fails instead, and the caller re-reads.
            ops.push(test(
                pointer(&["metadata", "resourceVersion"]),
                Value::from(target.resource_version),
            ));
            ops.push(PatchOperation::Add(AddOperation {
                path: annotation,
                value: Value::from(record),
            }));
        }
        None => {
            // `add /metadata/annotations {...}` replaces the whole map: if someone created the map
            // since the read, their annotations would be lost. Pin the resourceVersion so the
            // patch fails instead, and the caller re-reads.
            ops.push(test(
                pointer(&["metadata", "resourceVersion"]),
                Value::from(target.resource_version),
            ));
            ops.push(PatchOperation::Add(AddOperation {
                path: pointer(&["metadata", "annotations"]),
                value: serde_json::json!({ BYPASSED_ANNOTATION: record }),
            }));
        }
    }
    Patch(ops)
}

/// A pointer from unescaped tokens (`/` and `~` in a token are escaped as `~1` and `~0`).
fn pointer<S: AsRef<str>>(tokens: &[S]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().map(AsRef::as_ref))
}

fn test(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path, value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use json_patch::PatchErrorKind;
    use serde_json::json;
    use std::time::Duration;

    const UID: &str = "3f9c2a6e-8d41-4b6f-9a53-1c2e7d9b0a41";
    const RV: &str = "48213";
    const KEY_POINTER: &str = "/metadata/annotations/initguard.io~1bypassed";
    const OPT_IN: &str = "initguard.io/bypass";

    /// 2026-11-21T15:04:05.250Z.
    fn at() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_273_445_250)
    }

    /// A gated Job pod as a v1.33 API server returns it.
    fn gated_pod(gates: &[&str]) -> Value {
        let gates: Vec<Value> = gates.iter().map(|g| json!({ "name": g })).collect();
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "nightly-29154810-7x2kq",
                "generateName": "nightly-29154810-",
                "namespace": "batch",
                "uid": UID,
                "resourceVersion": RV,
                "creationTimestamp": "2026-11-21T15:03:50Z",
                "labels": {
                    "batch.kubernetes.io/controller-uid": "9d1b6f0e-2c7a-4e3b-8f5d-6a4c3b2e1f00",
                    "batch.kubernetes.io/job-name": "nightly-29154810",
                    "initguard.io/bypass": ""
                },
                "ownerReferences": [{
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "nightly-29154810",
                    "uid": "9d1b6f0e-2c7a-4e3b-8f5d-6a4c3b2e1f00",
                    "controller": true,
                    "blockOwnerDeletion": true
                }],
                "managedFields": [{
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-21T15:03:50Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": { "f:generateName": {}, "f:labels": { ".": {} } },
                        "f:spec": { "f:schedulingGates": { ".": {} } }
                    }
                }]
            },
            "spec": {
                "containers": [{
                    "name": "main",
                    "image": "registry.k8s.io/busybox:1.36",
                    "command": ["sh", "-c", "echo done"],
                    "resources": { "requests": { "cpu": "100m" } },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent"
                }],
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst",
                "serviceAccountName": "default",
                "securityContext": {},
                "schedulerName": "default-scheduler",
                "tolerations": [{
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300
                }],
                "priority": 0,
                "enableServiceLinks": true,
                "preemptionPolicy": "PreemptLowerPriority",
                "schedulingGates": gates
            },
            "status": {
                "phase": "Pending",
                "conditions": [{
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": null,
                    "lastTransitionTime": "2026-11-21T15:03:50Z",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates"
                }],
                "qosClass": "Burstable"
            }
        })
    }

    /// An uninitialized pod as a 1.9 API server returns it with `includeUninitialized=true`.
    fn legacy_pod(pending: &[&str]) -> Value {
        let pending: Vec<Value> = pending.iter().map(|p| json!({ "name": p })).collect();
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-6d4cf56db6-xk2vb",
                "generateName": "web-6d4cf56db6-",
                "namespace": "default",
                "selfLink": "/api/v1/namespaces/default/pods/web-6d4cf56db6-xk2vb",
                "uid": UID,
                "resourceVersion": RV,
                "creationTimestamp": "2026-11-21T15:03:50Z",
                "labels": { "app": "web", "pod-template-hash": "2807912862" },
                "ownerReferences": [{
                    "apiVersion": "extensions/v1beta1",
                    "kind": "ReplicaSet",
                    "name": "web-6d4cf56db6",
                    "uid": "5b7f0d2c-8e1a-11e8-9c3a-080027f5e0a1",
                    "controller": true,
                    "blockOwnerDeletion": true
                }],
                "initializers": { "pending": pending }
            },
            "spec": {
                "containers": [{
                    "name": "nginx",
                    "image": "nginx:1.13",
                    "ports": [{ "containerPort": 80, "protocol": "TCP" }],
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent"
                }],
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst",
                "serviceAccountName": "default",
                "securityContext": {},
                "schedulerName": "default-scheduler"
            },
            "status": { "phase": "Pending", "qosClass": "BestEffort" }
        })
    }

    fn pod(mechanism: Mechanism, pending: &[&str]) -> Value {
        match mechanism {
            Mechanism::SchedulingGates => gated_pod(pending),
            Mechanism::Initializers => legacy_pod(pending),
        }
    }

    const BOTH: [Mechanism; 2] = [Mechanism::SchedulingGates, Mechanism::Initializers];

    fn with_annotations(mut pod: Value, annotations: Value) -> Value {
        pod["metadata"]["annotations"] = annotations;
        pod
    }

    /// One removal and the pod state it is built against.
    #[derive(Debug, Clone, Copy)]
    struct Case<'a> {
        target: BypassTarget<'a>,
        removal: Removal<'a>,
    }

    /// The case as the guard would build it from `pod`, removing `initializer` at `index` on
    /// the deadline.
    fn target<'a>(pod: &'a Value, index: usize, initializer: &'a str) -> Case<'a> {
        Case {
            target: pod_target(pod),
            removal: Removal {
                index,
                initializer,
                reason: Reason::Deadline,
            },
        }
    }

    /// The pod state as the guard would read it from `pod`.
    fn pod_target(pod: &Value) -> BypassTarget<'_> {
        let annotations = pod["metadata"].get("annotations");
        BypassTarget {
            uid: pod["metadata"]["uid"].as_str().unwrap(),
            resource_version: pod["metadata"]["resourceVersion"].as_str().unwrap(),
            annotations_present: annotations.is_some_and(Value::is_object),
            previous_record: annotations
                .and_then(|a| a.get(BYPASSED_ANNOTATION))
                .and_then(Value::as_str),
            opt_in_label: pod["metadata"]["labels"]
                .get(OPT_IN)
                .and_then(Value::as_str)
                .map(|v| (OPT_IN, v)),
        }
    }

    /// `pod` with pending entry `index` removed and the annotation set to `record`.
    fn expected(mechanism: Mechanism, pod: &Value, index: usize, record: &str) -> Value {
        let mut after = pod.clone();
        let list = match mechanism {
            Mechanism::SchedulingGates => &mut after["spec"]["schedulingGates"],
            Mechanism::Initializers => &mut after["metadata"]["initializers"]["pending"],
        };
        list.as_array_mut().unwrap().remove(index);
        let metadata = after["metadata"].as_object_mut().unwrap();
        let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
        annotations[BYPASSED_ANNOTATION] = Value::from(record);
        after
    }

    fn apply(
        mechanism: Mechanism,
        pod: &Value,
        case: &Case<'_>,
    ) -> Result<Value, json_patch::PatchError> {
        let patch = bypass_patch(mechanism, &case.target, &[case.removal], at());
        let mut doc = pod.clone();
        let result = json_patch::patch(&mut doc, &patch);
        // A failed patch must leave the document untouched, like the API server does.
        if result.is_err() {
            assert_eq!(&doc, pod);
        }
        result.map(|()| doc)
    }

    fn assert_test_failed(result: Result<Value, json_patch::PatchError>) {
        match result {
            Err(e) => assert!(matches!(e.kind, PatchErrorKind::TestFailed), "{e}"),
            Ok(doc) => panic!("patch applied: {doc}"),
        }
    }

    // Reading.

    #[test]
    fn pending_names_reads_both_mechanisms_in_order() {
        let names = [
            "kueue.x-k8s.io/admission",
            "sidecar.example.com",
            "kueue.x-k8s.io/admission",
        ];
        for mechanism in BOTH {
            assert_eq!(pending_names(mechanism, &pod(mechanism, &names)), names);
        }
        // Each mechanism reads only its own list.
        let gated = gated_pod(&["a.example.com"]);
        assert!(pending_names(Mechanism::Initializers, &gated).is_empty());
        let legacy = legacy_pod(&["a.example.com"]);
        assert!(pending_names(Mechanism::SchedulingGates, &legacy).is_empty());
    }

    #[test]
    fn pending_names_tolerates_odd_shapes() {
        let odd = [
            json!(null),
            json!([]),
            json!("pod"),
            json!({}),
            json!({ "spec": null, "metadata": null }),
            json!({ "spec": { "schedulingGates": null }, "metadata": { "initializers": null } }),
            json!({ "spec": { "schedulingGates": {} }, "metadata": { "initializers": { "pending": "x" } } }),
            json!({ "spec": { "schedulingGates": [] }, "metadata": { "initializers": { "pending": [] } } }),
        ];
        for doc in &odd {
            for mechanism in BOTH {
                assert!(pending_names(mechanism, doc).is_empty(), "{doc}");
            }
        }
        let entries = json!([{ "name": "a" }, {}, { "name": 7 }, null, "b", { "name": null }, { "name": "c", "extra": 1 }]);
        let doc = json!({ "spec": { "schedulingGates": entries }, "metadata": { "initializers": { "pending": entries } } });
        for mechanism in BOTH {
            assert_eq!(pending_names(mechanism, &doc), ["a", "c"]);
        }
    }

    #[test]
    fn pending_pointer_per_mechanism() {
        assert_eq!(
            pending_pointer(Mechanism::SchedulingGates, 3),
            "/spec/schedulingGates/3"
        );
        assert_eq!(
            pending_pointer(Mechanism::Initializers, 0),
            "/metadata/initializers/pending/0"
        );
    }

    // Records.

    #[test]
    fn record_entry_is_name_reason_and_utc_seconds() {
        assert_eq!(
            record_entry("kueue.x-k8s.io/admission", Reason::OwnerDown, at()),
            "kueue.x-k8s.io/admission=owner_down@2026-11-21T15:04:05Z"
        );
        assert_eq!(
            record_entry("a.example.com", Reason::Pileup, SystemTime::UNIX_EPOCH),
            "a.example.com=pileup@1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn record_entry_clamps_extreme_clocks_to_valid_rfc3339() {
        let years = |n: u64| Duration::from_secs(86_400 * 365 * n);
        assert_eq!(
            record_entry(
                "a",
                Reason::Deadline,
                SystemTime::UNIX_EPOCH - years(20_000)
            ),
            "a=deadline@1970-01-01T00:00:00Z"
        );
        let after = record_entry(
            "a",
            Reason::Deadline,
            SystemTime::UNIX_EPOCH + years(20_000),
        );
        assert!(after.starts_with("a=deadline@9999-12-"), "{after}");
        assert_eq!(
            after.len(),
            "a=deadline@9999-12-30T22:00:00Z".len(),
            "{after}"
        );
    }

    #[test]
    fn parse_records_round_trips_and_skips_junk() {
        let first = record_entry("kueue.x-k8s.io/admission", Reason::OwnerDown, at());
        let second = record_entry("sidecar.example.com", Reason::Deadline, at());
        let annotation = format!("{first},junk,, =deadline@x,a=@x,a=b@, {second} ,no-at=deadline");
        assert_eq!(
            parse_records(&annotation),
            vec![
                BypassRecord {
                    initializer: "kueue.x-k8s.io/admission".to_string(),
                    reason: "owner_down".to_string(),
                    at: "2026-11-21T15:04:05Z".to_string(),
                },
                BypassRecord {
                    initializer: "sidecar.example.com".to_string(),
                    reason: "deadline".to_string(),
                    at: "2026-11-21T15:04:05Z".to_string(),
                },
            ]
        );
        assert!(parse_records("").is_empty());
        assert!(parse_records(",,,").is_empty());
    }

    // The patch itself.

    #[test]
    fn patch_is_the_documented_sequence_of_operations() {
        let pod = gated_pod(&["a.example.com", "kueue.x-k8s.io/admission"]);
        let case = target(&pod, 1, "kueue.x-k8s.io/admission");
        let removal = Removal {
            reason: Reason::OwnerDown,
            ..case.removal
        };
        let patch = bypass_patch(Mechanism::SchedulingGates, &case.target, &[removal], at());
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                { "op": "test", "path": "/metadata/uid", "value": UID },
                { "op": "test", "path": "/metadata/labels/initguard.io~1bypass", "value": "" },
                { "op": "test", "path": "/spec/schedulingGates/1/name", "value": "kueue.x-k8s.io/admission" },
                { "op": "remove", "path": "/spec/schedulingGates/1" },
                { "op": "test", "path": "/metadata/resourceVersion", "value": RV },
                { "op": "add", "path": "/metadata/annotations", "value": {
                    "initguard.io/bypassed": "kueue.x-k8s.io/admission=owner_down@2026-11-21T15:04:05Z"
                } }
            ])
        );
        let annotated = with_annotations(pod.clone(), json!({ "team": "batch" }));
        let case = self::target(&annotated, 0, "a.example.com");
        let patch = bypass_patch(Mechanism::Initializers, &case.target, &[case.removal], at());
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            ops,
            json!([
                { "op": "test", "path": "/metadata/uid", "value": UID },
                { "op": "test", "path": "/metadata/labels/initguard.io~1bypass", "value": "" },
                { "op": "test", "path": "/metadata/initializers/pending/0/name", "value": "a.example.com" },
                { "op": "remove", "path": "/metadata/initializers/pending/0" },
                { "op": "test", "path": "/metadata/resourceVersion", "value": RV },
                { "op": "add", "path": KEY_POINTER, "value": "a.example.com=deadline@2026-11-21T15:04:05Z" }
            ])
        );
    }

    #[test]
    fn bypass_removes_exactly_that_entry_and_creates_the_annotations_map() {
        for mechanism in BOTH {
            let pod = pod(
                mechanism,
                &["a.example.com", "b.example.com", "c.example.com"],
            );
            let after = apply(mechanism, &pod, &target(&pod, 1, "b.example.com")).unwrap();
            assert_eq!(
                after,
                expected(
                    mechanism,
                    &pod,
                    1,
                    "b.example.com=deadline@2026-11-21T15:04:05Z"
                )
            );
            assert_eq!(
                pending_names(mechanism, &after),
                ["a.example.com", "c.example.com"]
            );
        }
    }

    #[test]
    fn bypass_adds_the_key_to_an_existing_annotations_map() {
        for mechanism in BOTH {
            let pod = with_annotations(
                pod(mechanism, &["a.example.com"]),
                json!({ "kubernetes.io/psp": "restricted", "team": "batch" }),
            );
            let after = apply(mechanism, &pod, &target(&pod, 0, "a.example.com")).unwrap();
            assert_eq!(
                after,
                expected(
                    mechanism,
                    &pod,
                    0,
                    "a.example.com=deadline@2026-11-21T15:04:05Z"
                )
            );
            assert_eq!(after["metadata"]["annotations"]["team"], "batch");
            assert!(pending_names(mechanism, &after).is_empty());
        }
    }

    #[test]
    fn bypass_appends_to_a_previous_record() {
        let old = "x.example.com=owner_down@2026-11-21T14:00:00Z";
        for mechanism in BOTH {
            let pod = with_annotations(
                pod(mechanism, &["a.example.com", "b.example.com"]),
                json!({ BYPASSED_ANNOTATION: old, "team": "batch" }),
            );
            let after = apply(mechanism, &pod, &target(&pod, 0, "a.example.com")).unwrap();
            let record = format!("{old},a.example.com=deadline@2026-11-21T15:04:05Z");
            assert_eq!(after, expected(mechanism, &pod, 0, &record));
            assert_eq!(parse_records(&record).len(), 2);
        }
    }

    #[test]
    fn bypass_replaces_an_empty_previous_record_without_a_leading_separator() {
        let pod = with_annotations(
            gated_pod(&["a.example.com"]),
            json!({ BYPASSED_ANNOTATION: "" }),
        );
        let after = apply(
            Mechanism::SchedulingGates,
            &pod,
            &target(&pod, 0, "a.example.com"),
        )
        .unwrap();
        assert_eq!(
            after,
            expected(
                Mechanism::SchedulingGates,
                &pod,
                0,
                "a.example.com=deadline@2026-11-21T15:04:05Z"
            )
        );
    }

    #[test]
    fn bypass_fails_when_the_index_no_longer_holds_that_name() {
        for mechanism in BOTH {
            let read = pod(
                mechanism,
                &["a.example.com", "b.example.com", "c.example.com"],
            );
            let target = target(&read, 1, "b.example.com");
            // Its owner removed b meanwhile: index 1 now holds c.
            let now = pod(mechanism, &["a.example.com", "c.example.com"]);
            assert_test_failed(apply(mechanism, &now, &target));
            // The list shrank below the index.
            let shorter = pod(mechanism, &["a.example.com"]);
            assert!(apply(mechanism, &shorter, &target).is_err());
            let done = pod(mechanism, &[]);
            assert!(apply(mechanism, &done, &target).is_err());
        }
    }

    #[test]
    fn bypass_fails_on_a_recreated_pod_with_another_uid() {
        for mechanism in BOTH {
            let read = pod(mechanism, &["a.example.com"]);
            let target = target(&read, 0, "a.example.com");
            let mut recreated = read.clone();
            recreated["metadata"]["uid"] = json!("7e0c1b2a-0000-4000-8000-000000000002");
            assert_test_failed(apply(mechanism, &recreated, &target));
        }
    }

    #[test]
    fn bypass_fails_when_the_previous_record_changed() {
        let read = with_annotations(
            gated_pod(&["a.example.com", "b.example.com"]),
            json!({ BYPASSED_ANNOTATION: "x.example.com=deadline@2026-11-21T14:00:00Z" }),
        );
        let target = target(&read, 0, "a.example.com");
        let mut now = read.clone();
        now["metadata"]["annotations"][BYPASSED_ANNOTATION] = json!(
            "x.example.com=deadline@2026-11-21T14:00:00Z,b.example.com=pileup@2026-11-21T15:00:00Z"
        );
        assert_test_failed(apply(Mechanism::SchedulingGates, &now, &target));
        let mut removed = read.clone();
        removed["metadata"]["annotations"] = json!({});
        assert!(apply(Mechanism::SchedulingGates, &removed, &target).is_err());
    }

    #[test]
    fn bypass_fails_when_the_pod_changed_before_the_annotations_map_is_created() {
        for mechanism in BOTH {
            let read = pod(mechanism, &["a.example.com"]);
            let target = target(&read, 0, "a.example.com");
            // Someone added their own annotation meanwhile; replacing the map would drop it.
            let mut now =
                with_annotations(read.clone(), json!({ "owner.example.com/seen": "true" }));
            now["metadata"]["resourceVersion"] = json!("48214");
            assert_test_failed(apply(mechanism, &now, &target));
        }
    }

    #[test]
    fn bypass_fails_when_the_opt_in_label_was_removed_or_changed() {
        for mechanism in BOTH {
            let mut read = pod(mechanism, &["a.example.com"]);
            read["metadata"]["labels"][OPT_IN] = json!("yes");
            let target = target(&read, 0, "a.example.com");
            let mut removed = read.clone();
            removed["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove(OPT_IN);
            assert!(apply(mechanism, &removed, &target).is_err());
            let mut changed = read.clone();
            changed["metadata"]["labels"][OPT_IN] = json!("no");
            assert_test_failed(apply(mechanism, &changed, &target));
            // Opted in by namespace: the label is not tested.
            let by_namespace = Case {
                target: BypassTarget {
                    opt_in_label: None,
                    ..target.target
                },
                ..target
            };
            assert!(apply(mechanism, &removed, &by_namespace).is_ok());
        }
    }

    #[test]
    fn bypass_fails_when_the_key_was_added_to_an_existing_map_since_the_read() {
        for mechanism in BOTH {
            let read = with_annotations(
                pod(mechanism, &["a.example.com"]),
                json!({ "team": "batch" }),
            );
            let target = target(&read, 0, "a.example.com");
            // Another writer recorded a bypass meanwhile: `add` would overwrite it.
            let mut now = read.clone();
            now["metadata"]["annotations"][BYPASSED_ANNOTATION] =
                json!("b.example.com=deadline@2026-11-21T15:00:00Z");
            now["metadata"]["resourceVersion"] = json!("48214");
            assert_test_failed(apply(mechanism, &now, &target));
        }
    }

    /// RFC 6902 `test`, `remove`, `add` and `replace`, written here from the RFC so that the
    /// patch is judged by something other than the crate that built it. Atomic: an error
    /// leaves nothing applied.
    fn rfc6902(doc: &Value, ops: &Value) -> Result<Value, String> {
        fn tokens(path: &str) -> Vec<String> {
            path.split('/')
                .skip(1)
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect()
        }
        fn parent<'d>(doc: &'d mut Value, path: &[String]) -> Result<&'d mut Value, String> {
            path.iter().try_fold(doc, |node, token| match node {
                Value::Object(map) => map.get_mut(token).ok_or(format!("no member {token}")),
                Value::Array(list) => token
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| list.get_mut(i))
                    .ok_or(format!("no element {token}")),
                _ => Err(format!("{token} inside a scalar")),
            })
        }
        let mut work = doc.clone();
        for op in ops.as_array().ok_or("not a list")? {
            let path = tokens(op["path"].as_str().ok_or("no path")?);
            let (last, up) = path.split_last().ok_or("the root")?;
            let container = parent(&mut work, up)?;
            match (op["op"].as_str(), container) {
                (Some("test"), node) => {
                    let found = parent(node, std::slice::from_ref(last))?;
                    if *found != op["value"] {
                        return Err(format!("test of {last} failed"));
                    }
                }
                (Some("remove"), Value::Object(map)) => {
                    map.remove(last).ok_or("remove of a missing member")?;
                }
                (Some("remove"), Value::Array(list)) => {
                    let i: usize = last.parse().map_err(|_| "bad index")?;
                    if i >= list.len() {
                        return Err("remove past the end".into());
                    }
                    list.remove(i);
                }
                (Some("add" | "replace"), Value::Object(map)) => {
                    if op["op"] == "replace" && !map.contains_key(last) {
                        return Err("replace of a missing member".into());
                    }
                    map.insert(last.clone(), op["value"].clone());
                }
                (op, _) => return Err(format!("{op:?} not supported here")),
            }
        }
        Ok(work)
    }

    #[test]
    fn the_independent_applier_agrees_with_the_rfc_on_a_failed_test() {
        let doc = json!({ "a": [1, 2], "b": "x" });
        let ops = json!([
            { "op": "remove", "path": "/a/0" },
            { "op": "test", "path": "/b", "value": "y" }
        ]);
        assert!(rfc6902(&doc, &ops).is_err());
        let ops = json!([
            { "op": "remove", "path": "/a/0" },
            { "op": "test", "path": "/b", "value": "x" },
            { "op": "add", "path": "/c~1d", "value": 1 }
        ]);
        assert_eq!(
            rfc6902(&doc, &ops).unwrap(),
            json!({ "a": [2], "b": "x", "c/d": 1 })
        );
    }

    #[test]
    fn one_patch_tests_every_name_then_removes_highest_index_first() {
        let names = [
            "a.example.com",
            "b.example.com",
            "c.example.com",
            "d.example.com",
        ];
        for mechanism in BOTH {
            let pod = pod(mechanism, &names);
            let list = pending_pointer(mechanism, 0);
            let list = list.trim_end_matches("/0");
            // Handed over in any order; recorded in pending order.
            let removals = [
                Removal {
                    index: 2,
                    initializer: "c.example.com",
                    reason: Reason::Deadline,
                },
                Removal {
                    index: 0,
                    initializer: "a.example.com",
                    reason: Reason::OwnerDown,
                },
            ];
            let target = BypassTarget {
                opt_in_label: None,
                ..pod_target(&pod)
            };
            let patch = bypass_patch(mechanism, &target, &removals, at());
            let ops = serde_json::to_value(&patch).unwrap();
            assert_eq!(
                ops,
                json!([
                    { "op": "test", "path": "/metadata/uid", "value": UID },
                    { "op": "test", "path": format!("{list}/0/name"), "value": "a.example.com" },
                    { "op": "test", "path": format!("{list}/2/name"), "value": "c.example.com" },
                    { "op": "remove", "path": format!("{list}/2") },
                    { "op": "remove", "path": format!("{list}/0") },
                    { "op": "test", "path": "/metadata/resourceVersion", "value": RV },
                    { "op": "add", "path": "/metadata/annotations", "value": {
                        BYPASSED_ANNOTATION: "a.example.com=owner_down@2026-11-21T15:04:05Z,\
                                              c.example.com=deadline@2026-11-21T15:04:05Z"
                    } }
                ]),
                "{mechanism:?}"
            );
            let after = rfc6902(&pod, &ops).unwrap();
            assert_eq!(
                pending_names(mechanism, &after),
                ["b.example.com", "d.example.com"]
            );
            // One entry moved since the read: nothing is removed.
            let moved = self::pod(
                mechanism,
                &["a.example.com", "c.example.com", "b.example.com"],
            );
            assert!(rfc6902(&moved, &ops).is_err());
            assert!(json_patch::patch(&mut moved.clone(), &patch).is_err());
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Annotations {
            Absent,
            WithoutKey,
            WithRecord(String),
        }

        fn annotations() -> impl Strategy<Value = Annotations> {
            prop_oneof![
                Just(Annotations::Absent),
                Just(Annotations::WithoutKey),
                "[a-z.]{1,12}=(deadline|owner_down|pileup)@2026-11-21T1[0-9]:00:00Z"
                    .prop_map(Annotations::WithRecord),
            ]
        }

        /// A pod pending `names` with these annotations.
        fn annotated(mechanism: Mechanism, names: &[String], annotations: &Annotations) -> Value {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let base = pod(mechanism, &refs);
            match annotations {
                Annotations::Absent => base,
                Annotations::WithoutKey => with_annotations(base, json!({ "team": "batch" })),
                Annotations::WithRecord(r) => {
                    with_annotations(base, json!({ BYPASSED_ANNOTATION: r }))
                }
            }
        }

        fn case() -> impl Strategy<Value = (Mechanism, Vec<String>, usize, Annotations, u64)> {
            let names =
                prop::collection::vec("[a-z]{1,6}(\\.[a-z]{1,6}){0,2}(/[a-z~]{1,6})?", 1..8);
            (
                prop_oneof![
                    Just(Mechanism::SchedulingGates),
                    Just(Mechanism::Initializers)
                ],
                names,
                annotations(),
                0u64..4_000_000_000,
            )
                .prop_flat_map(|(mechanism, names, annotations, secs)| {
                    let len = names.len();
                    (
                        Just(mechanism),
                        Just(names),
                        0..len,
                        Just(annotations),
                        Just(secs),
                    )
                })
        }

        proptest! {
            #[test]
            fn patch_removes_exactly_the_entry_and_records_it(
                (mechanism, names, index, annotations, secs) in case()
            ) {
                let before = annotated(mechanism, &names, &annotations);
                let when = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
                let reason = Reason::Pileup;
                let removal = Removal { index, initializer: &names[index], reason };
                let patch = bypass_patch(mechanism, &pod_target(&before), &[removal], when);
                let mut after = before.clone();
                json_patch::patch(&mut after, &patch).unwrap();

                let entry = record_entry(&names[index], reason, when);
                let record = match &annotations {
                    Annotations::WithRecord(old) => format!("{old},{entry}"),
                    _ => entry.clone(),
                };
                prop_assert_eq!(&after, &expected(mechanism, &before, index, &record));
                let mut remaining = names.clone();
                remaining.remove(index);
                prop_assert_eq!(pending_names(mechanism, &after), remaining);
                let records = parse_records(&record);
                prop_assert_eq!(records.last().map(|r| r.initializer.as_str()), Some(names[index].as_str()));
                prop_assert_eq!(records.last().map(|r| r.reason.as_str()), Some("pileup"));
            }

            /// Any set of entries in one patch: the independent applier leaves every other
            /// entry in order and records exactly the removed ones, in pending order.
            #[test]
            fn one_patch_removes_exactly_the_chosen_entries(
                (mechanism, names, _, annotations, secs) in case(),
                chosen in prop::collection::vec(any::<bool>(), 8),
                reasons in prop::collection::vec(
                    prop::sample::select(vec![Reason::Deadline, Reason::OwnerDown, Reason::Pileup]), 8),
                shuffle in any::<prop::sample::Index>(),
            ) {
                let before = annotated(mechanism, &names, &annotations);
                let mut removals: Vec<Removal> = names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| chosen[*i])
                    .map(|(index, name)| Removal { index, initializer: name, reason: reasons[index] })
                    .collect();
                prop_assume!(!removals.is_empty());
                // The order handed over does not matter.
                let turn = shuffle.index(removals.len());
                removals.rotate_left(turn);
                let when = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
                let patch = bypass_patch(mechanism, &pod_target(&before), &removals, when);
                let after = rfc6902(&before, &serde_json::to_value(&patch).unwrap())
                    .map_err(TestCaseError::fail)?;

                let kept: Vec<String> = names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !chosen[*i])
                    .map(|(_, n)| n.clone())
                    .collect();
                prop_assert_eq!(pending_names(mechanism, &after), kept);
                let entries: Vec<String> = names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| chosen[*i])
                    .map(|(i, n)| record_entry(n, reasons[i], when))
                    .collect();
                let entries = entries.join(",");
                let record = match &annotations {
                    Annotations::WithRecord(old) => format!("{old},{entries}"),
                    _ => entries,
                };
                prop_assert_eq!(
                    after["metadata"]["annotations"][BYPASSED_ANNOTATION].as_str(),
                    Some(record.as_str())
                );
                // Nothing else changed.
                let mut rest = after.clone();
                let mut expected = before.clone();
                for doc in [&mut rest, &mut expected] {
                    doc["spec"]["schedulingGates"] = Value::Null;
                    doc["metadata"]["initializers"] = Value::Null;
                    if let Some(a) = doc["metadata"].get_mut("annotations").and_then(Value::as_object_mut) {
                        a.remove(BYPASSED_ANNOTATION);
                    }
                }
                if matches!(annotations, Annotations::Absent) {
                    expected["metadata"]["annotations"] = json!({});
                }
                prop_assert_eq!(rest, expected);
                // The crate that built it agrees.
                let mut same = before.clone();
                json_patch::patch(&mut same, &patch).unwrap();
                prop_assert_eq!(same, after);
            }
        }
    }
}
