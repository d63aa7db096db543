//! The JSON Patches that bypass and restore one webhook entry.
//!
//! Every patch `test`s the configuration's resourceVersion (optimistic concurrency: the API
//! server refuses it if anything changed since it was read) and the entry's name at its
//! index, touches nothing of the configuration but that one entry and the record annotation,
//! and never `failurePolicy`. A restore removes each recorded value at the index where it is
//! found, `test`ing it first.

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
};
use serde_json::Value;

use super::{
    Bypass, Configuration, RECORD_ANNOTATION, Record, Records, Restored, Tombstone, list_at,
    position_in,
};

fn test(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path, value })
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn entry_pointer(index: usize, tokens: &[&str]) -> PointerBuf {
    let mut path = pointer(&["webhooks"]);
    path.push_back(index);
    for token in tokens.iter().filter(|t| !t.is_empty()) {
        path.push_back(*token);
    }
    path
}

/// `test` of the resourceVersion and of the entry's name at `index`.
fn preconditions(
    configuration: &Configuration,
    index: usize,
    webhook: &str,
) -> Vec<PatchOperation> {
    vec![
        test(
            pointer(&["metadata", "resourceVersion"]),
            Value::String(configuration.resource_version.clone()),
        ),
        test(
            entry_pointer(index, &["name"]),
            Value::String(webhook.to_owned()),
        ),
    ]
}

/// Writes `records` as the annotation's new value (removing the key when empty), after a
/// `test` of the value it replaces.
fn record_ops(configuration: &Configuration, records: &Records) -> Vec<PatchOperation> {
    let annotation = pointer(&["metadata", "annotations", RECORD_ANNOTATION]);
    let mut ops = Vec::new();
    if let Some(old) = &configuration.record_text {
        ops.push(test(annotation.clone(), Value::String(old.clone())));
    }
    if records.is_empty() {
        if configuration.record_text.is_some() {
            ops.push(PatchOperation::Remove(RemoveOperation { path: annotation }));
        }
        return ops;
    }
    // A BTreeMap of strings and JSON values always serializes.
    let text = Value::String(serde_json::to_string(records).unwrap_or_default());
    if configuration.record_text.is_some() {
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: annotation,
            value: text,
        }));
    } else if configuration.annotations_present {
        ops.push(add(annotation, text));
    } else {
        ops.push(add(
            pointer(&["metadata", "annotations"]),
            serde_json::json!({ RECORD_ANNOTATION: text }),
        ));
    }
    ops
}

/// Adds `bypass.added` to entry `index` (named `webhook`) and records it under that name in
/// `records` (the configuration's current records, read with [`Configuration::records`]).
pub fn bypass_patch(
    configuration: &Configuration,
    index: usize,
    webhook: &str,
    records: &Records,
    bypass: &Bypass,
) -> Patch {
    let entry = &configuration.entries[index];
    let mut ops = preconditions(configuration, index, webhook);
    // Lists this patch creates: a later value for the same list is appended to it.
    let mut created: Vec<[&str; 2]> = Vec::new();
    for (path, value) in bypass.added.parts() {
        if list_at(entry, path).is_some() || created.contains(&path) {
            let mut at = entry_pointer(index, &path);
            at.push_back("-");
            ops.push(add(at, value.clone()));
        } else if path[1].is_empty() || entry.get(path[0]).is_none_or(Value::is_null) {
            // No list (or no selector): create it holding just this value.
            let holder = if path[1].is_empty() {
                Value::Array(vec![value.clone()])
            } else {
                serde_json::json!({ path[1]: [value] })
            };
            ops.push(add(entry_pointer(index, &[path[0]]), holder));
            created.push(path);
        } else {
            // A selector without matchExpressions (e.g. only matchLabels, or `{}`).
            ops.push(add(
                entry_pointer(index, &path),
                Value::Array(vec![value.clone()]),
            ));
            created.push(path);
        }
    }
    let mut next = records.clone();
    next.insert(webhook.to_owned(), Record::Bypass(bypass.clone()));
    ops.extend(record_ops(configuration, &next));
    Patch(ops)
}

/// Removes exactly what `records[webhook]` says was added to entry `index`, and the record.
/// None when an added value is no longer in the entry (someone changed it: a conflict).
pub fn restore_patch(
    configuration: &Configuration,
    index: usize,
    webhook: &str,
    records: &Records,
) -> Option<Patch> {
    restore_leaving(configuration, index, webhook, records, None)
}

/// As [`restore_patch`], leaving `tombstone` in place of the record (`initguard restore`).
pub fn restore_with_tombstone(
    configuration: &Configuration,
    index: usize,
    webhook: &str,
    records: &Records,
    tombstone: Restored,
) -> Option<Patch> {
    restore_leaving(configuration, index, webhook, records, Some(tombstone))
}

fn restore_leaving(
    configuration: &Configuration,
    index: usize,
    webhook: &str,
    records: &Records,
    tombstone: Option<Restored>,
) -> Option<Patch> {
    let bypass = records.get(webhook)?.bypass()?;
    let entry = &configuration.entries[index];
    let mut ops = preconditions(configuration, index, webhook);
    let mut found = Vec::new();
    for (path, value) in bypass.added.parts() {
        found.push((position_in(entry, path, value)?, path, value));
    }
    // Highest position first: removing an element moves the later ones of its list.
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    for (at, path, value) in found {
        let mut pointer = entry_pointer(index, &path);
        pointer.push_back(at);
        ops.push(test(pointer.clone(), value.clone()));
        ops.push(PatchOperation::Remove(RemoveOperation { path: pointer }));
    }
    let mut next = records.clone();
    match tombstone {
        Some(restored) => {
            next.insert(webhook.to_owned(), Record::Restored(Tombstone { restored }));
        }
        None => {
            next.remove(webhook);
        }
    }
    ops.extend(record_ops(configuration, &next));
    Some(Patch(ops))
}

/// Drops `webhook`'s record and leaves every entry alone (a conflict, or an entry that is
/// gone).
pub fn forget_patch(configuration: &Configuration, webhook: &str, records: &Records) -> Patch {
    let mut ops = vec![test(
        pointer(&["metadata", "resourceVersion"]),
        Value::String(configuration.resource_version.clone()),
    )];
    let mut next = records.clone();
    next.remove(webhook);
    ops.extend(record_ops(configuration, &next));
    Patch(ops)
}

/// `patch` as the bytes to send: JSON with `&`, `<`, `>`, U+2028 and U+2029 escaped as Go's
/// `encoding/json` escapes them.
///
/// Why: the API server's JSON Patch library (evanphx/json-patch) compares a `test` value with
/// the stored one as compacted raw bytes at the leaves, and the stored object is encoded by
/// Go, which writes `&` as `\u0026`. A `test` of a string holding `&&` (a CEL expression, or
/// the record holding one) sent as serde_json writes it would never match. These characters
/// only occur inside JSON strings, so replacing them in the serialized text is exact.
pub fn go_json(patch: &Patch) -> Vec<u8> {
    // A Patch of JSON values always serializes.
    let text = serde_json::to_string(patch).unwrap_or_default();
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("\\u0026"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}
