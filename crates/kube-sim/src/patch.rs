//! PATCH bodies: JSON Patch (RFC 6902), JSON merge patch (RFC 7386) and the parts of
//! strategic merge patch that built-in types need (merge keys for the usual lists and the
//! `$patch`, `$retainKeys`, `$setElementOrder` and `$deleteFromPrimitiveList` directives).

use serde_json::{Map, Value};

use super::status::ApiError;

/// The patch formats served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    Json,
    Merge,
    Strategic,
}

const ACCEPTED: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

impl PatchType {
    /// The patch type for a `Content-Type` header; 415 for anything else, including
    /// server-side apply (`application/apply-patch+yaml`), which is not simulated.
    pub(crate) fn from_content_type(content_type: Option<&str>) -> Result<PatchType, ApiError> {
        let media = content_type
            .and_then(|c| c.split(';').next())
            .map(|m| m.trim().to_ascii_lowercase());
        match media.as_deref() {
            Some("application/json-patch+json") => Ok(PatchType::Json),
            Some("application/merge-patch+json") => Ok(PatchType::Merge),
            Some("application/strategic-merge-patch+json") => Ok(PatchType::Strategic),
            _ => Err(ApiError::unsupported_media_type(ACCEPTED)),
        }
    }
}

/// Most operations accepted in one JSON patch (the API server's limit).
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Apply `body` to `doc`. Malformed bodies are 400; a JSON patch that cannot be applied
/// (failed `test`, missing path) is 422.
pub(crate) fn apply(patch_type: PatchType, doc: &mut Value, body: &[u8]) -> Result<(), ApiError> {
    match patch_type {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
                return Err(ApiError::too_large(format!(
                    "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                    ops.0.len()
                )));
            }
            let mut work = doc.clone();
            json_patch::patch(&mut work, &ops.0)
                .map_err(|e| ApiError::patch_unprocessable(&describe_patch_error(&ops, &e)))?;
            *doc = work;
            Ok(())
        }
        PatchType::Merge => {
            let patch = parse_object(body)?;
            json_patch::merge(doc, &patch);
            Ok(())
        }
        PatchType::Strategic => {
            let patch = parse_object(body)?;
            strategic_merge(doc, &patch);
            Ok(())
        }
    }
}

fn parse_object(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: the patch must be a JSON object",
        ));
    }
    Ok(v)
}

/// The wording of the Go json-patch library the API server uses: a failed `test` reads
/// `testing value /path failed: test failed`.
fn describe_patch_error(ops: &json_patch::Patch, e: &json_patch::PatchError) -> String {
    match ops.0.get(e.operation) {
        Some(json_patch::PatchOperation::Test(t))
            if matches!(e.kind, json_patch::PatchErrorKind::TestFailed) =>
        {
            format!("testing value {} failed: test failed", t.path)
        }
        Some(op) => {
            let name = match op {
                json_patch::PatchOperation::Add(_) => "add",
                json_patch::PatchOperation::Remove(_) => "remove",
                json_patch::PatchOperation::Replace(_) => "replace",
                json_patch::PatchOperation::Move(_) => "move",
                json_patch::PatchOperation::Copy(_) => "copy",
                json_patch::PatchOperation::Test(_) => "test",
            };
            format!(
                "{name} operation does not apply: doc is missing path: \"{}\": {}",
                e.path, e.kind
            )
        }
        None => e.to_string(),
    }
}

/// The answer of a 1.7-1.13 server to a JSON Patch that could not be applied: 500 with the
/// words of the evanphx/json-patch version it vendored (kubernetes/kubernetes#68202) instead
/// of 422. Other errors pass unchanged.
pub(crate) fn legacy_error(e: ApiError) -> ApiError {
    const PREFIX: &str = "the server rejected our request due to an error in our request: ";
    let Some(modern) = e.message.strip_prefix(PREFIX).filter(|_| e.code == 422) else {
        return e;
    };
    ApiError::internal_unwrapped(legacy_message(modern))
}

/// Today's json-patch wording → the old one: `Testing value /p failed`, `Unable to access
/// invalid index: N` (a list index past the end), `jsonpatch OP operation does not apply: is
/// missing path: /p`.
fn legacy_message(modern: &str) -> String {
    if let Some(path) = modern
        .strip_prefix("testing value ")
        .and_then(|rest| rest.strip_suffix(" failed: test failed"))
    {
        return format!("Testing value {path} failed");
    }
    if let Some((op, rest)) =
        modern.split_once(" operation does not apply: doc is missing path: \"")
        && let Some((path, _)) = rest.split_once('"')
    {
        if let Some(index) = path
            .rsplit('/')
            .next()
            .filter(|last| !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
        {
            return format!("Unable to access invalid index: {index}");
        }
        return format!("jsonpatch {op} operation does not apply: is missing path: {path}");
    }
    modern.to_owned()
}

/// How a list field merges under a strategic merge patch.
enum ListMerge {
    /// Elements are objects merged by this key.
    Key(&'static str),
    /// A set of scalars: patch values are appended when missing.
    Set,
    /// Replaced wholesale (the default, as in merge patch).
    Replace,
}

/// The patch strategies of the built-in fields this server stores.
fn list_merge(field: &str) -> ListMerge {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims"
        | "readinessGates" => ListMerge::Key(if field == "readinessGates" {
            "conditionType"
        } else {
            "name"
        }),
        "conditions" => ListMerge::Key("type"),
        "ownerReferences" => ListMerge::Key("uid"),
        "ports" => ListMerge::Key("containerPort"),
        "volumeMounts" => ListMerge::Key("mountPath"),
        "containerStatuses" | "initContainerStatuses" => ListMerge::Key("name"),
        "finalizers" => ListMerge::Set,
        _ => ListMerge::Replace,
    }
}

/// Apply a strategic merge patch object to `target`.
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    for (k, v) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(remove)) = (t.get_mut(field), v) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(o) if o.get("$patch").and_then(Value::as_str) == Some("delete") => {
                t.remove(k);
            }
            Value::Object(_) => {
                strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
            Value::Array(items) => {
                let entry = t.entry(k.clone()).or_insert(Value::Null);
                merge_list(entry, items, k);
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
}

fn merge_list(target: &mut Value, items: &[Value], field: &str) {
    let replace_all = items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    let strategy = if replace_all {
        ListMerge::Replace
    } else {
        list_merge(field)
    };
    match strategy {
        ListMerge::Replace => {
            let kept: Vec<Value> = items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(strip_directives)
                .collect();
            *target = Value::Array(kept);
        }
        ListMerge::Set => {
            if !target.is_array() {
                *target = Value::Array(Vec::new());
            }
            if let Value::Array(list) = target {
                for i in items {
                    if !list.contains(i) {
                        list.push(i.clone());
                    }
                }
            }
        }
        ListMerge::Key(key) => {
            if !target.is_array() {
                *target = Value::Array(Vec::new());
            }
            let Value::Array(list) = target else {
                return;
            };
            for item in items {
                let Some(id) = item.get(key) else {
                    list.push(strip_directives(item));
                    continue;
                };
                let pos = list.iter().position(|e| e.get(key) == Some(id));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        list.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => strategic_merge(&mut list[i], item),
                    (None, false) => list.push(strip_directives(item)),
                }
            }
        }
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_test_failure_is_422_with_testing_value() {
        let mut doc = json!({"metadata": {"uid": "a"}});
        let body = br#"[{"op":"test","path":"/metadata/uid","value":"b"},{"op":"remove","path":"/metadata/uid"}]"#;
        let e = apply(PatchType::Json, &mut doc, body).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message.contains("testing value /metadata/uid failed"),
            "{}",
            e.message
        );
        assert_eq!(
            doc["metadata"]["uid"], "a",
            "a failed patch changes nothing"
        );
        let e = apply(PatchType::Json, &mut doc, b"{not json").unwrap_err();
        assert_eq!(e.code, 400);
        let e = apply(
            PatchType::Json,
            &mut doc,
            br#"[{"op":"remove","path":"/nope"}]"#,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type(Some("application/merge-patch+json; charset=utf-8"))
                .unwrap(),
            PatchType::Merge
        );
        assert_eq!(
            PatchType::from_content_type(Some("application/apply-patch+yaml"))
                .unwrap_err()
                .code,
            415
        );
    }

    #[test]
    fn strategic_merge_by_keys_and_directives() {
        let mut doc = json!({
            "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
            "spec": {"schedulingGates": [{"name": "g1"}, {"name": "g2"}],
                     "containers": [{"name": "c", "image": "old"}],
                     "tolerations": [{"key": "t"}]},
        });
        let patch = json!({
            "metadata": {"labels": {"a": null, "c": "3"}, "finalizers": ["y"]},
            "spec": {
                "$setElementOrder/schedulingGates": [{"name": "g2"}],
                "schedulingGates": [{"name": "g1", "$patch": "delete"}],
                "containers": [{"name": "c", "image": "new"}],
                "tolerations": [{"key": "u"}],
            },
        });
        strategic_merge(&mut doc, &patch);
        assert_eq!(doc["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        assert_eq!(doc["metadata"]["finalizers"], json!(["x", "y"]));
        assert_eq!(doc["spec"]["schedulingGates"], json!([{"name": "g2"}]));
        assert_eq!(
            doc["spec"]["containers"],
            json!([{"name": "c", "image": "new"}])
        );
        assert_eq!(doc["spec"]["tolerations"], json!([{"key": "u"}]));
        strategic_merge(
            &mut doc,
            &json!({"spec": {"$retainKeys": ["containers"], "containers": [{"name": "d", "image": "i"}]}}),
        );
        assert_eq!(doc["spec"].as_object().unwrap().len(), 1);
        assert_eq!(doc["spec"]["containers"].as_array().unwrap().len(), 2);
    }
}
