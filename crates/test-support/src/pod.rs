//! A judge's own readers of a stored pod: the `initguard.io/bypassed` records and the pending
//! list, written from the formats README documents, never with the guard's parsers, so a bug
//! there cannot blind both the guard and its judge.

use kube_common::Mechanism;
use serde_json::Value;

/// The annotation holding the bypass records (README "Observe").
pub const BYPASSED: &str = "initguard.io/bypassed";

/// One `NAME=REASON@TIME` entry of the `initguard.io/bypassed` annotation. An entry of any
/// other shape is kept as a record whose reason says so (see [`Record::well_formed`]), so a
/// judge reports it instead of skipping it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The bypassed initializer; empty for a malformed entry.
    pub initializer: String,
    /// `deadline`, `owner_down`, `pileup`; `malformed entry "…"` for a malformed entry.
    pub reason: String,
    /// The RFC 3339 time as written; empty for a malformed entry.
    pub at: String,
}

impl Record {
    /// Whether the entry had the `NAME=REASON@TIME` shape.
    pub fn well_formed(&self) -> bool {
        !self.initializer.is_empty()
    }
}

/// The records of an annotation value, in order, malformed entries included.
pub fn records_in(annotation: &str) -> Vec<Record> {
    annotation
        .split(',')
        .map(|entry| {
            let entry = entry.trim();
            let parsed = entry.rsplit_once('@').and_then(|(head, at)| {
                let (name, reason) = head.split_once('=')?;
                (!name.is_empty() && !reason.is_empty() && !at.is_empty()).then(|| Record {
                    initializer: name.to_owned(),
                    reason: reason.to_owned(),
                    at: at.to_owned(),
                })
            });
            parsed.unwrap_or_else(|| Record {
                initializer: String::new(),
                reason: format!("malformed entry {entry:?}"),
                at: String::new(),
            })
        })
        .collect()
}

/// The bypass records of a stored pod, in order (none without the annotation).
pub fn records(pod: &Value) -> Vec<Record> {
    pod["metadata"]["annotations"][BYPASSED]
        .as_str()
        .map(records_in)
        .unwrap_or_default()
}

/// The names a stored pod still waits on, in order: `spec.schedulingGates[].name` or
/// `metadata.initializers.pending[].name`.
pub fn pending(mechanism: Mechanism, pod: &Value) -> Vec<String> {
    let list = match mechanism {
        Mechanism::SchedulingGates => pod.pointer("/spec/schedulingGates"),
        Mechanism::Initializers => pod.pointer("/metadata/initializers/pending"),
    };
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect()
}

/// A pod named `name` with one container, these labels (none: no label map) and scheduling
/// gates (none: no gate list), for the tests that create pods through a typed client.
pub fn gated(
    name: &str,
    labels: &[(&str, &str)],
    gates: &[&str],
) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Container, Pod, PodSchedulingGate, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.k8s.io/pause:3.9".into()),
                ..Default::default()
            }],
            scheduling_gates: (!gates.is_empty()).then(|| {
                gates
                    .iter()
                    .map(|g| PodSchedulingGate {
                        name: g.to_string(),
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records in order, a malformed entry kept (as a violation to report, never skipped),
    /// pending names of either mechanism.
    #[test]
    fn records_and_pending_lists_are_read_from_the_documented_formats() {
        let pod = serde_json::json!({
            "metadata": {
                "annotations": {
                    "initguard.io/bypassed":
                        "a.example.com=deadline@2026-01-01T00:00:00Z, b.example.com/x=owner_down@2026-01-01T00:00:05Z,junk"
                },
                "initializers": { "pending": [{ "name": "c.example.com" }] }
            },
            "spec": { "schedulingGates": [{ "name": "g1" }, { "name": "g2" }] }
        });
        let r = records(&pod);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(
            (
                r[0].initializer.as_str(),
                r[0].reason.as_str(),
                r[0].at.as_str()
            ),
            ("a.example.com", "deadline", "2026-01-01T00:00:00Z")
        );
        assert_eq!(r[1].initializer, "b.example.com/x");
        assert_eq!(r[1].reason, "owner_down");
        assert!(r[0].well_formed() && r[1].well_formed());
        assert!(!r[2].well_formed());
        assert!(r[2].reason.starts_with("malformed"), "{:?}", r[2]);
        assert!(records(&serde_json::json!({})).is_empty());
        for junk in ["x=y@", " =deadline@z", "=", "@", "name@time"] {
            assert!(!records_in(junk)[0].well_formed(), "{junk:?}");
        }
        assert_eq!(pending(Mechanism::SchedulingGates, &pod), ["g1", "g2"]);
        assert_eq!(pending(Mechanism::Initializers, &pod), ["c.example.com"]);
        assert!(pending(Mechanism::Initializers, &serde_json::json!({})).is_empty());
    }
}
