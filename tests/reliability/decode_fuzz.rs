//! Property tests of the pod decoder (`initguard::pod::SlimPod`), the first code every byte from
//! the API server goes through: it must never panic, text and value decoding must agree, fields
//! the guard does not read must not matter, and pending entries of any shape must keep their
//! index (the bypass patch tests the name at it).
//!
//! 10,000 cases per property by default; `PROPTEST_CASES=200000 cargo test --release --test
//! reliability decode_fuzz` runs longer. `cargo fuzz` targets for the same decoder live in
//! `fuzz/` (see the README's "Reliability and security").

use initguard::config::Mechanism;
use initguard::pod::SlimPod;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}

/// Object keys: mostly the ones the decoder looks for, so that random documents reach deep.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "metadata", "spec", "status", "name", "namespace", "uid", "resourceVersion",
            "labels", "annotations", "initializers", "pending", "schedulingGates",
            "creationTimestamp", "deletionTimestamp", "ownerReferences", "controller",
            "kind", "apiVersion", "phase", "initguard.io/bypassed", "initguard.io/bypass",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,12}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,16}".prop_map(Value::from),
        Just(json!("2026-11-21T10:00:00Z")),
        Just(json!("initguard.io/bypass")),
    ]
}

/// Any JSON value, nested up to 5 levels.
fn any_json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A pod as a v1.33 API server returns it, with every field the guard reads and a lot it
/// does not.
fn real_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "nightly-29154810-7x2kq", "generateName": "nightly-29154810-",
            "namespace": "batch", "uid": "3f9c2a6e-8d41-4b6f-9a53-1c2e7d9b0a41",
            "resourceVersion": "48213", "creationTimestamp": "2026-11-21T15:03:50Z",
            "labels": { "batch.kubernetes.io/job-name": "nightly-29154810", "initguard.io/bypass": "" },
            "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "initguard.io/bypassed": "a.example.com=deadline@2026-11-21T15:04:05Z" },
            "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "nightly-29154810",
                "uid": "9d1b6f0e-2c7a-4e3b-8f5d-6a4c3b2e1f00", "controller": true, "blockOwnerDeletion": true }],
            "managedFields": [{ "manager": "kube-controller-manager", "operation": "Update",
                "apiVersion": "v1", "time": "2026-11-21T15:03:50Z", "fieldsType": "FieldsV1",
                "fieldsV1": { "f:metadata": { "f:labels": { ".": {} } } } }],
            "initializers": { "pending": [{ "name": "i1.example.com" }] },
        },
        "spec": {
            "containers": [{ "name": "main", "image": "busybox:1.36", "args": ["sleep", "1"],
                "resources": {}, "terminationMessagePath": "/dev/termination-log" }],
            "restartPolicy": "Never", "schedulerName": "default-scheduler",
            "schedulingGates": [{ "name": "kueue.x-k8s.io/admission" }, { "name": "sidecar.example.com" }],
            "tolerations": [{ "key": "node.kubernetes.io/not-ready", "operator": "Exists" }],
        },
        "status": { "phase": "Pending", "qosClass": "BestEffort",
            "conditions": [{ "type": "PodScheduled", "status": "False", "reason": "SchedulingGated" }] },
    })
}

/// A pod bound to a node and stuck in its init containers, as the kubelet reports it.
fn bound_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "web-7d9f-x2", "namespace": "apps", "uid": "u-1",
            "creationTimestamp": "2026-11-21T15:03:50Z" },
        "spec": { "nodeName": "node-3", "restartPolicy": "Always",
            "initContainers": [{ "name": "istio-validation", "image": "proxyv2" },
                { "name": "istio-proxy", "restartPolicy": "Always" }],
            "containers": [{ "name": "main" }] },
        "status": { "phase": "Pending",
            "conditions": [{ "type": "PodScheduled", "status": "True",
                    "lastTransitionTime": "2026-11-21T15:03:51Z" },
                { "type": "Initialized", "status": "False" }, { "type": "Ready", "status": "False" }],
            "initContainerStatuses": [{ "name": "istio-validation", "ready": false, "restartCount": 3,
                "started": false, "state": { "waiting": { "reason": "CrashLoopBackOff" } },
                "lastState": { "terminated": { "exitCode": 126, "reason": "Error" } } },
                { "name": "istio-proxy", "started": false,
                  "state": { "waiting": { "reason": "PodInitializing" } } }] },
    })
}

/// JSON pointers of fields the guard never reads in [`real_pod`].
const IGNORED: &[&str] = &[
    "/apiVersion",
    "/kind",
    "/metadata/generateName",
    "/metadata/managedFields",
    "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration",
    "/spec/containers",
    "/spec/schedulerName",
    "/spec/tolerations",
    "/status/qosClass",
];

/// Fields the guard reads for the node stage and for node agents, leniently: replaced by
/// anything, they never make the pod undecodable (its gates still count).
const LENIENT: &[&str] = &["/spec/restartPolicy", "/status/conditions"];

/// Every path (JSON pointer) inside `v`, the root included.
fn paths(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let token = k.replace('~', "~0").replace('/', "~1");
                paths(child, format!("{at}/{token}"), out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                paths(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

fn decode_both(v: &Value) -> Result<SlimPod, String> {
    let from_value = serde_json::from_value::<SlimPod>(v.clone()).map_err(|e| e.to_string());
    let from_text = serde_json::from_str::<SlimPod>(&v.to_string()).map_err(|e| e.to_string());
    assert_eq!(
        from_value.is_ok(),
        from_text.is_ok(),
        "value {from_value:?} vs text {from_text:?} for {v}"
    );
    if let (Ok(a), Ok(b)) = (&from_value, &from_text) {
        assert_eq!(a, b, "value and text decode differ for {v}");
    }
    from_value
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Arbitrary JSON: never a panic, and both decoding paths agree.
    #[test]
    fn arbitrary_json_never_panics(v in any_json()) {
        let _ = decode_both(&v);
    }

    /// A real pod with one field replaced by anything, removed, or an unknown one added: never a
    /// panic; when the field is one the guard does not read, the decoded pod is unchanged.
    #[test]
    fn mutated_real_pods(pick in any::<prop::sample::Index>(), action in 0..3u8, replacement in any_json()) {
        let original = real_pod();
        let expected = decode_both(&original).unwrap();
        let mut all = Vec::new();
        paths(&original, String::new(), &mut all);
        let path = pick.get(&all).clone();
        let mut pod = original.clone();
        match action {
            0 => {
                if let Some(slot) = pod.pointer_mut(&path) {
                    *slot = replacement;
                }
            }
            1 => {
                if let Some((parent, last)) = path.rsplit_once('/') {
                    match pod.pointer_mut(parent) {
                        Some(Value::Object(m)) => {
                            m.remove(&last.replace("~1", "/").replace("~0", "~"));
                        }
                        Some(Value::Array(a)) => {
                            if let Ok(i) = last.parse::<usize>()
                                && i < a.len()
                            {
                                a.remove(i);
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {
                if let Some(Value::Object(m)) = pod.pointer_mut(&path) {
                    m.insert("x-unknown-field".to_owned(), replacement);
                }
            }
        }
        let decoded = decode_both(&pod);
        let ignored = IGNORED.iter().any(|p| path == *p || path.starts_with(&format!("{p}/")))
            // Unknown keys are ignored everywhere but in the labels map (they are labels there).
            || (action == 2 && !path.ends_with("/labels"));
        if ignored {
            prop_assert_eq!(decoded.as_ref(), Ok(&expected), "changed at {}", path);
        }
        if LENIENT.iter().any(|p| path == *p || path.starts_with(&format!("{p}/"))) {
            prop_assert!(decoded.is_ok(), "a malformed {} lost the pod: {:?}", path, decoded);
        }
    }

    /// A bound pod's node-stage fields replaced by anything or removed: never a lost pod.
    #[test]
    fn mutated_init_statuses_never_lose_the_pod(pick in any::<prop::sample::Index>(), remove in any::<bool>(), replacement in any_json()) {
        let original = bound_pod();
        prop_assert!(decode_both(&original).is_ok_and(|p| p.init.is_some()));
        let mut all = Vec::new();
        paths(&original, String::new(), &mut all);
        all.retain(|p| ["/spec/nodeName", "/spec/restartPolicy", "/spec/initContainers", "/status/conditions", "/status/initContainerStatuses"]
            .iter()
            .any(|f| p == f || p.starts_with(&format!("{f}/"))));
        let path = pick.get(&all).clone();
        let mut pod = original.clone();
        let (parent, last) = path.rsplit_once('/').unwrap_or_default();
        match (remove, pod.pointer_mut(parent)) {
            (true, Some(Value::Object(m))) => {
                m.remove(last);
            }
            (true, Some(Value::Array(a))) => {
                if let Ok(i) = last.parse::<usize>() && i < a.len() {
                    a.remove(i);
                }
            }
            _ => {
                if let Some(slot) = pod.pointer_mut(&path) {
                    *slot = replacement;
                }
            }
        }
        let decoded = decode_both(&pod);
        prop_assert!(decoded.is_ok(), "a malformed {} lost the pod: {:?}", path, decoded);
    }

    /// Pending entries of any shape keep their place: names where an entry has a string name,
    /// "" elsewhere, never a failed pod.
    #[test]
    fn pending_entries_of_any_shape_keep_their_index(entries in prop::collection::vec(any_json(), 0..8)) {
        let names: Vec<String> = entries
            .iter()
            .map(|e| e.get("name").and_then(Value::as_str).unwrap_or_default().to_owned())
            .collect();
        for mechanism in [Mechanism::SchedulingGates, Mechanism::Initializers] {
            let mut pod = real_pod();
            match mechanism {
                Mechanism::SchedulingGates => pod["spec"]["schedulingGates"] = json!(entries),
                Mechanism::Initializers => pod["metadata"]["initializers"]["pending"] = json!(entries),
            }
            let decoded = decode_both(&pod);
            let decoded = decoded.as_ref().map(|p| p.pending(mechanism).to_vec());
            // Arrays are decoded as struct fields by position; only those may differ.
            let arrays = entries.iter().any(Value::is_array);
            if !arrays {
                prop_assert_eq!(decoded, Ok(names.clone()), "{:?}", mechanism);
            } else {
                prop_assert_eq!(decoded.map(|n| n.len()), Ok(names.len()), "{:?}", mechanism);
            }
        }
    }

    /// Truncated or corrupted bytes of a real pod: an error or a pod, never a panic.
    #[test]
    fn corrupted_bytes_never_panic(cut in any::<prop::sample::Index>(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)) {
        let mut bytes = real_pod().to_string().into_bytes();
        for (at, byte) in flips {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let end = cut.index(bytes.len() + 1);
        let _ = serde_json::from_slice::<SlimPod>(&bytes[..end]);
        let _ = serde_json::from_slice::<SlimPod>(&bytes);
    }
}
