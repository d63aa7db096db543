//! Reading pending initializer names and building the bypass JSON Patch, per mechanism.
//!
//! A bypass is one atomic JSON Patch (DESIGN.md "What a bypass writes"): it `test`s that the pod
//! is still the one decided about and that the initializer still sits at the decided index, then
//! removes exactly that entry and appends a record to the `initguard.io/bypassed` annotation.

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

/// `at` as RFC 3339 in UTC with whole seconds; clamped to jiff's range instead of failing.
fn rfc3339_seconds(at: SystemTime) -> String {
    let timestamp = jiff::Timestamp::try_from(at).unwrap_or(if at < SystemTime::UNIX_EPOCH {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    // Whole seconds: truncating the fraction keeps the record short and stable.
    let seconds = jiff::Timestamp::from_second(timestamp.as_second()).unwrap_or(timestamp);
    seconds.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// One parsed record of [`BYPASSED_ANNOTATION`]. Fields are kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BypassRecord {
    pub initializer: String,
    pub reason: String,
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
    /// Index of the initializer in the pending list.
    pub index: usize,
    /// Name expected at `index`.
    pub initializer: &'a str,
    /// Whether `metadata.annotations` exists (as a map).
    pub annotations_present: bool,
    /// Current value of [`BYPASSED_ANNOTATION`], if set.
    pub previous_record: Option<&'a str>,
}

/// The single atomic JSON Patch that removes `target.initializer` at `target.index` and records
/// the bypass. Any failed `test` means the pod changed: re-read and re-decide.
pub fn bypass_patch(
    mechanism: Mechanism,
    target: &BypassTarget<'_>,
    reason: Reason,
    at: SystemTime,
) -> Patch {
    let entry = pending_entry(mechanism, target.index, None);
    let entry_name = pending_entry(mechanism, target.index, Some("name"));
    let record = record_entry(target.initializer, reason, at);
    let mut ops = vec![
        test(pointer(&["metadata", "uid"]), Value::from(target.uid)),
        test(entry_name, Value::from(target.initializer)),
        PatchOperation::Remove(RemoveOperation { path: entry }),
    ];
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
            // Only the guard's leader writes this key, so adding it cannot clobber anyone else.
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
