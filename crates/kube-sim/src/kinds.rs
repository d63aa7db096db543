//! What the API server does per kind on create and update: defaulting, status reset,
//! immutability, scheduling-gate and legacy-initializer rules, the events.k8s.io view of
//! core events.

use serde_json::{Map, Value, json};

use super::resources::{ResourceInfo, Storage};
use super::status::{ApiError, FieldError};
use kube_common::Mechanism;

/// Reason of the PodScheduled condition of a gated pod.
pub(crate) const SCHEDULING_GATED: &str = "SchedulingGated";
/// Message of the PodScheduled condition of a gated pod.
pub(crate) const SCHEDULING_GATED_MESSAGE: &str =
    "Scheduling is blocked due to non-empty scheduling gates";

/// Server-side facts a write needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteCtx<'a> {
    pub mechanism: Mechanism,
    /// Names appended to `metadata.initializers.pending` of new pods (Initializers mode).
    pub legacy_initializers: &'a [String],
    /// RFC 3339 "now".
    pub now: &'a str,
    /// [`crate::SimOptions::drop_match_conditions`].
    pub drop_match_conditions: bool,
}

/// Whether an object still has legacy initializers (pending or a failure result): such
/// objects are hidden from lists and watches without `includeUninitialized=true` (a GET by
/// name shows them).
pub(crate) fn is_uninitialized(obj: &Value) -> bool {
    let init = &obj["metadata"]["initializers"];
    !init.is_null()
}

/// The failure `metadata.initializers.result`, if set.
pub(crate) fn initialization_result(obj: &Value) -> Option<&Value> {
    let r = &obj["metadata"]["initializers"]["result"];
    (!r.is_null()).then_some(r)
}

/// Names in `spec.schedulingGates`.
pub(crate) fn gate_names(pod: &Value) -> Vec<String> {
    names_in(&pod["spec"]["schedulingGates"])
}

/// Names in `metadata.initializers.pending`.
pub(crate) fn pending_initializer_names(obj: &Value) -> Vec<String> {
    names_in(&obj["metadata"]["initializers"]["pending"])
}

fn names_in(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|g| g["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the simulated scheduler should place this pod: no gates, initialized, Pending.
pub(crate) fn wants_scheduling(pod: &Value) -> bool {
    gate_names(pod).is_empty()
        && !is_uninitialized(pod)
        && pod["status"]["phase"].as_str().unwrap_or("Pending") == "Pending"
}

/// Kind-specific preparation of a new object (metadata already filled in).
pub(crate) fn prepare_create(
    res: &ResourceInfo,
    obj: &mut Value,
    ctx: &WriteCtx<'_>,
) -> Result<(), ApiError> {
    match res.storage {
        Storage::Pods => pod_create(res, obj, ctx),
        Storage::Deployments => {
            obj["metadata"]["generation"] = json!(1);
            if obj["spec"]["replicas"].is_null() {
                obj["spec"]["replicas"] = json!(1);
            }
            obj["status"] = json!({});
            Ok(())
        }
        Storage::Namespaces => {
            namespace_defaults(obj);
            obj["status"] = json!({ "phase": "Active" });
            Ok(())
        }
        Storage::ValidatingWebhookConfigurations | Storage::MutatingWebhookConfigurations => {
            webhook_configuration(res, None, obj, ctx)
        }
        Storage::Events
        | Storage::Leases
        | Storage::ConfigMaps
        | Storage::Jobs
        | Storage::CronJobs
        | Storage::Endpoints
        | Storage::DaemonSets => Ok(()),
    }
}

/// Kind-specific preparation of an update (PUT or PATCH) of `old` into `new`, for the main
/// resource (`subresource == None`) or `status`.
pub(crate) fn prepare_update(
    res: &ResourceInfo,
    subresource: Option<&str>,
    old: &Value,
    new: &mut Value,
    ctx: &WriteCtx<'_>,
) -> Result<(), ApiError> {
    if subresource == Some("status") {
        let status = new["status"].take();
        let mut merged = old.clone();
        merged["status"] = status;
        if res.storage == Storage::Pods {
            // The pod status strategy keeps metadata changes except owner references.
            let owners = old["metadata"]["ownerReferences"].clone();
            let rv = new["metadata"]["resourceVersion"].clone();
            merged["metadata"] = new["metadata"].take();
            merged["metadata"]["initializers"] = old["metadata"]["initializers"].clone();
            strip_null(&mut merged["metadata"], "initializers");
            merged["metadata"]["ownerReferences"] = owners;
            strip_null(&mut merged["metadata"], "ownerReferences");
            merged["metadata"]["resourceVersion"] = rv;
        } else {
            merged["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"].clone();
        }
        *new = merged;
        return Ok(());
    }
    if res.has_status() {
        new["status"] = old["status"].clone();
        strip_null(new, "status");
    }
    match res.storage {
        Storage::Pods => pod_update(res, old, new, ctx),
        Storage::Deployments => {
            if new["spec"]["replicas"].is_null() {
                new["spec"]["replicas"] = json!(1);
            }
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            new["metadata"]["generation"] = if new["spec"] != old["spec"] {
                json!(generation + 1)
            } else {
                json!(generation)
            };
            Ok(())
        }
        Storage::Namespaces => {
            namespace_defaults(new);
            Ok(())
        }
        Storage::ValidatingWebhookConfigurations | Storage::MutatingWebhookConfigurations => {
            webhook_configuration(res, Some(old), new, ctx)
        }
        Storage::Events
        | Storage::Leases
        | Storage::ConfigMaps
        | Storage::Jobs
        | Storage::CronJobs
        | Storage::Endpoints
        | Storage::DaemonSets => Ok(()),
    }
}

/// Remove the `keys` of `object` that hold an empty list or map.
fn drop_empty(object: &mut Value, keys: &[&str]) {
    if let Some(fields) = object.as_object_mut() {
        fields.retain(|k, v| {
            !(keys.contains(&k.as_str())
                && (v.as_array().is_some_and(Vec::is_empty)
                    || v.as_object().is_some_and(Map::is_empty)))
        });
    }
}

/// Most `matchConditions` an entry may have (`validation.go`).
const MAX_MATCH_CONDITIONS: usize = 64;

/// admissionregistration.k8s.io/v1 defaults of every entry (on create and update alike), then
/// the structural checks of `matchConditions` the guard's bypass must pass: at most 64, names
/// present and unique, expressions present. (The real server also compiles each expression;
/// the simulator does not: tests/real_cluster/cel.rs uses the real one as the oracle.)
///
/// With the `AdmissionWebhookMatchConditions` feature off (1.27's default,
/// [`crate::SimOptions::drop_match_conditions`]), `matchConditions` are dropped silently unless
/// the stored object already uses them, as the real server's `dropDisabledFields` does.
fn webhook_configuration(
    res: &ResourceInfo,
    old: Option<&Value>,
    obj: &mut Value,
    ctx: &WriteCtx<'_>,
) -> Result<(), ApiError> {
    let mutating = res.storage == Storage::MutatingWebhookConfigurations;
    let in_use = |o: &Value| {
        o["webhooks"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| !e["matchConditions"].is_null()))
    };
    if ctx.drop_match_conditions && !old.is_some_and(in_use) {
        for entry in obj["webhooks"].as_array_mut().into_iter().flatten() {
            if let Some(entry) = entry.as_object_mut() {
                entry.remove("matchConditions");
            }
        }
    }
    let mut errs = Vec::new();
    let entries = obj["webhooks"]
        .as_array_mut()
        .map(Vec::as_mut_slice)
        .unwrap_or_default();
    for (i, entry) in entries.iter_mut().enumerate() {
        if !entry.is_object() {
            errs.push(FieldError::invalid(
                format!("webhooks[{i}]"),
                entry.clone(),
                "must be an object",
            ));
            continue;
        }
        for (k, v) in [
            ("failurePolicy", json!("Fail")),
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
            ("timeoutSeconds", json!(10)),
        ] {
            if entry[k].is_null() {
                entry[k] = v;
            }
        }
        // Go's `omitempty`: an emptied list is not stored (a restore that removes the last
        // condition or requirement leaves no empty list behind).
        drop_empty(entry, &["matchConditions"]);
        for selector in ["objectSelector", "namespaceSelector"] {
            drop_empty(&mut entry[selector], &["matchExpressions", "matchLabels"]);
        }
        if mutating && entry["reinvocationPolicy"].is_null() {
            entry["reinvocationPolicy"] = json!("Never");
        }
        if let Some(rules) = entry["rules"].as_array_mut() {
            for rule in rules {
                if rule["scope"].is_null() {
                    rule["scope"] = json!("*");
                }
            }
        }
        let Some(conditions) = entry["matchConditions"].as_array() else {
            continue;
        };
        let path = format!("webhooks[{i}].matchConditions");
        if conditions.len() > MAX_MATCH_CONDITIONS {
            errs.push(FieldError::too_many(
                path.clone(),
                conditions.len(),
                MAX_MATCH_CONDITIONS,
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (j, c) in conditions.iter().enumerate() {
            match c["name"].as_str() {
                None | Some("") => errs.push(FieldError::required(format!("{path}[{j}].name"), "")),
                Some(name) if !seen.insert(name) => {
                    errs.push(FieldError::duplicate(
                        format!("{path}[{j}].name"),
                        json!(name),
                    ));
                }
                Some(_) => {}
            }
            // The real server trims the expression first.
            if c["expression"].as_str().is_none_or(|e| e.trim().is_empty()) {
                errs.push(FieldError::required(format!("{path}[{j}].expression"), ""));
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Err(ApiError::invalid(res, &name, &errs))
    }
}

fn strip_null(obj: &mut Value, key: &str) {
    if obj[key].is_null()
        && let Some(m) = obj.as_object_mut()
    {
        m.remove(key);
    }
}

fn namespace_defaults(ns: &mut Value) {
    let name = ns["metadata"]["name"].clone();
    ns["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
    if ns["spec"]["finalizers"].is_null() {
        ns["spec"]["finalizers"] = json!(["kubernetes"]);
    }
}

/// The defaults the API server fills into a pod spec (applied on create and update alike,
/// so a client sending an undefaulted spec back does not change anything).
fn default_pod_spec(spec: &mut Value) {
    let Some(fields) = spec.as_object_mut() else {
        return;
    };
    // Go's `omitempty`: a real server stores no empty list of gates, so a pod whose last gate
    // was removed has no `schedulingGates` at all (found by tests/real_cluster/differential.rs).
    if fields
        .get("schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        fields.remove("schedulingGates");
    }
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
        ("priority", json!(0)),
    ] {
        if spec[k].is_null() {
            spec[k] = v;
        }
    }
    if let Some(containers) = spec["containers"].as_array_mut() {
        for c in containers {
            for (k, v) in [
                ("terminationMessagePath", json!("/dev/termination-log")),
                ("terminationMessagePolicy", json!("File")),
                ("resources", json!({})),
            ] {
                if c[k].is_null() {
                    c[k] = v;
                }
            }
            if c["imagePullPolicy"].is_null() {
                let image = c["image"].as_str().unwrap_or_default();
                let latest = image.ends_with(":latest")
                    || !image.rsplit('/').next().unwrap_or("").contains(':');
                c["imagePullPolicy"] = json!(if latest { "Always" } else { "IfNotPresent" });
            }
        }
    }
}

fn validate_containers(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match spec["containers"].as_array() {
        Some(cs) if !cs.is_empty() => {
            for (i, c) in cs.iter().enumerate() {
                if c["name"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        format!("spec.containers[{i}].name"),
                        "",
                    ));
                }
                if c["image"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        format!("spec.containers[{i}].image"),
                        "",
                    ));
                }
            }
        }
        _ => errs.push(FieldError::required("spec.containers", "")),
    }
    errs
}

fn pod_create(res: &ResourceInfo, pod: &mut Value, ctx: &WriteCtx<'_>) -> Result<(), ApiError> {
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut errs = validate_containers(&pod["spec"]);
    let gates = gate_names(pod);
    if !gates.is_empty()
        && pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
    {
        errs.push(FieldError::forbidden(
            "spec.nodeName",
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
    for (i, g) in gates.iter().enumerate() {
        if gates[..i].contains(g) {
            errs.push(FieldError {
                field: format!("spec.schedulingGates[{i}].name"),
                kind: super::status::FieldErrorKind::Invalid(json!(g)),
                detail: "Duplicate value".to_string(),
            });
        }
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid(res, &name, &errs));
    }
    default_pod_spec(&mut pod["spec"]);
    let mut status = json!({ "phase": "Pending", "qosClass": "BestEffort" });
    if !gates.is_empty() {
        status["conditions"] = json!([{
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": null,
            "lastTransitionTime": ctx.now,
            "reason": SCHEDULING_GATED,
            "message": SCHEDULING_GATED_MESSAGE,
        }]);
    }
    pod["status"] = status;
    match ctx.mechanism {
        Mechanism::Initializers => {
            if pod["metadata"]["initializers"].is_null() {
                if !ctx.legacy_initializers.is_empty() {
                    let pending: Vec<Value> = ctx
                        .legacy_initializers
                        .iter()
                        .map(|n| json!({ "name": n }))
                        .collect();
                    pod["metadata"]["initializers"] = json!({ "pending": pending });
                }
            } else {
                normalize_initializers(pod);
            }
        }
        Mechanism::SchedulingGates => drop_initializers(pod),
    }
    Ok(())
}

/// Drop `metadata.initializers` (unknown to servers after 1.13; emptied means initialized).
fn drop_initializers(obj: &mut Value) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("initializers");
    }
}

/// An empty pending list without a result means initialized: the field goes away.
fn normalize_initializers(obj: &mut Value) {
    let init = &obj["metadata"]["initializers"];
    let empty = init["pending"].as_array().is_none_or(Vec::is_empty);
    if init.is_null() || (empty && init["result"].is_null()) {
        drop_initializers(obj);
    }
}

fn pod_update(
    res: &ResourceInfo,
    old: &Value,
    new: &mut Value,
    ctx: &WriteCtx<'_>,
) -> Result<(), ApiError> {
    let name = old["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    default_pod_spec(&mut new["spec"]);
    let mut errs = Vec::new();
    let old_gates = gate_names(old);
    for (i, g) in gate_names(new).iter().enumerate() {
        if !old_gates.contains(g) {
            errs.push(FieldError::forbidden(
                format!("spec.schedulingGates[{i}].name"),
                format!("only deletion is allowed, but found new scheduling gate '{g}'"),
            ));
        }
    }
    if let Some(e) = spec_update_error(&old["spec"], &new["spec"], !old_gates.is_empty()) {
        errs.push(e);
    }
    match ctx.mechanism {
        Mechanism::Initializers => {
            if !is_uninitialized(old) && !new["metadata"]["initializers"].is_null() {
                let empty = new["metadata"]["initializers"]["pending"]
                    .as_array()
                    .is_none_or(Vec::is_empty);
                if !empty || !new["metadata"]["initializers"]["result"].is_null() {
                    errs.push(FieldError::forbidden(
                        "metadata.initializers",
                        "initializers may not be set once initialized",
                    ));
                }
            }
            normalize_initializers(new);
        }
        Mechanism::SchedulingGates => drop_initializers(new),
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid(res, &name, &errs));
    }
    Ok(())
}

/// Pod specs are immutable except container images, activeDeadlineSeconds, tolerations,
/// the removal of scheduling gates (checked by the caller) and, while gated, node selector
/// and affinity.
fn spec_update_error(old: &Value, new: &Value, gated: bool) -> Option<FieldError> {
    let mut munged = new.clone();
    for list in ["containers", "initContainers"] {
        if let (Some(n), Some(o)) = (
            munged.get_mut(list).and_then(Value::as_array_mut),
            old[list].as_array(),
        ) && n.len() == o.len()
        {
            for (nc, oc) in n.iter_mut().zip(o) {
                nc["image"] = oc["image"].clone();
            }
        }
    }
    let mut mutable = vec!["activeDeadlineSeconds", "tolerations", "schedulingGates"];
    if gated {
        mutable.extend(["nodeSelector", "affinity"]);
    }
    let mut reference = old.clone();
    if let (Some(m), Some(r)) = (munged.as_object_mut(), reference.as_object_mut()) {
        for k in mutable {
            m.remove(k);
            r.remove(k);
        }
    }
    (munged != reference).then(|| {
        FieldError::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        )
    })
}

/// core/v1 Event field ↔ events.k8s.io/v1 Event field.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("message", "note"),
    ("involvedObject", "regarding"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Convert an object received for `res` into its stored form.
pub(crate) fn to_storage(res: &ResourceInfo, mut obj: Value) -> Value {
    if !res.is_canonical() && res.storage == Storage::Events {
        rename(&mut obj, |(core, v1)| (v1, core));
    }
    if !res.is_canonical() {
        // Other views (apps/v1beta2 Deployments, v1beta1 Leases) differ from the stored
        // form in no field the simulator uses, only in apiVersion.
        obj["apiVersion"] = json!(res.storage.canonical().api_version());
    }
    obj
}

/// The stored object as `res` presents it.
pub(crate) fn from_storage(res: &ResourceInfo, obj: &Value) -> Value {
    let mut obj = obj.clone();
    if !res.is_canonical() && res.storage == Storage::Events {
        rename(&mut obj, |(core, v1)| (core, v1));
    }
    if !res.is_canonical() {
        obj["apiVersion"] = json!(res.api_version());
    }
    obj
}

fn rename(
    obj: &mut Value,
    dir: impl Fn((&'static str, &'static str)) -> (&'static str, &'static str),
) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let mut moved = Map::new();
    for pair in EVENT_FIELDS {
        let (from, to) = dir(*pair);
        if let Some(v) = m.remove(from) {
            moved.insert(to.to_string(), v);
        }
    }
    m.extend(moved);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{by_plural, lookup};

    fn ctx(mechanism: Mechanism, legacy: &[String]) -> WriteCtx<'_> {
        WriteCtx {
            mechanism,
            legacy_initializers: legacy,
            now: "2024-01-01T00:00:00Z",
            drop_match_conditions: false,
        }
    }

    fn pod(gates: &[&str]) -> Value {
        let gates: Vec<Value> = gates.iter().map(|g| json!({"name": g})).collect();
        json!({"metadata": {"name": "p", "namespace": "a"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulingGates": gates}})
    }

    #[test]
    fn gated_pod_is_pending_with_condition() {
        let pods = by_plural("pods").unwrap();
        let mut p = pod(&["g"]);
        prepare_create(pods, &mut p, &ctx(Mechanism::SchedulingGates, &[])).unwrap();
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(p["status"]["conditions"][0]["reason"], SCHEDULING_GATED);
        assert!(!wants_scheduling(&p));
        let mut u = pod(&[]);
        prepare_create(pods, &mut u, &ctx(Mechanism::SchedulingGates, &[])).unwrap();
        assert!(wants_scheduling(&u));
    }

    /// The feature gate off: a new configuration's matchConditions are dropped, and so are
    /// those an update adds; a stored object that already has them keeps them.
    #[test]
    fn match_conditions_are_dropped_with_the_feature_off() {
        let res = by_plural("validatingwebhookconfigurations").unwrap();
        let mut off = ctx(Mechanism::SchedulingGates, &[]);
        off.drop_match_conditions = true;
        let with = |conditions: bool| {
            let mut entry = json!({ "name": "check.example.com" });
            if conditions {
                entry["matchConditions"] = json!([{ "name": "c", "expression": "true" }]);
            }
            json!({ "metadata": { "name": "policy" }, "webhooks": [entry] })
        };
        let mut created = with(true);
        prepare_create(res, &mut created, &off).unwrap();
        assert!(
            created["webhooks"][0]["matchConditions"].is_null(),
            "{created}"
        );
        let mut added = with(true);
        prepare_update(res, None, &created, &mut added, &off).unwrap();
        assert!(added["webhooks"][0]["matchConditions"].is_null(), "{added}");
        let mut stored = with(true);
        prepare_create(res, &mut stored, &ctx(Mechanism::SchedulingGates, &[])).unwrap();
        let mut kept = with(true);
        prepare_update(res, None, &stored, &mut kept, &off).unwrap();
        assert_eq!(kept["webhooks"][0]["matchConditions"][0]["name"], "c");
        let mut on = with(true);
        prepare_create(res, &mut on, &ctx(Mechanism::SchedulingGates, &[])).unwrap();
        assert_eq!(on["webhooks"][0]["matchConditions"][0]["name"], "c");
    }

    #[test]
    fn gates_may_only_be_removed() {
        let pods = by_plural("pods").unwrap();
        let c = ctx(Mechanism::SchedulingGates, &[]);
        let mut old = pod(&["a", "b"]);
        prepare_create(pods, &mut old, &c).unwrap();
        let mut removed = old.clone();
        removed["spec"]["schedulingGates"] = json!([{"name": "b"}]);
        prepare_update(pods, None, &old, &mut removed, &c).unwrap();
        let mut renamed = old.clone();
        renamed["spec"]["schedulingGates"] = json!([{"name": "a"}, {"name": "x"}]);
        let e = prepare_update(pods, None, &old, &mut renamed, &c).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(e.message.contains("spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'x'"), "{}", e.message);
        let mut other = old.clone();
        other["spec"]["hostname"] = json!("h");
        assert_eq!(
            prepare_update(pods, None, &old, &mut other, &c)
                .unwrap_err()
                .code,
            422
        );
        let mut image = old.clone();
        image["spec"]["containers"][0]["image"] = json!("busybox:2");
        prepare_update(pods, None, &old, &mut image, &c).unwrap();
    }

    #[test]
    fn legacy_initializers_added_and_cleared() {
        let pods = by_plural("pods").unwrap();
        let names = vec!["a.example.com".to_string()];
        let c = ctx(Mechanism::Initializers, &names);
        let mut p = pod(&[]);
        prepare_create(pods, &mut p, &c).unwrap();
        assert_eq!(pending_initializer_names(&p), names);
        assert!(is_uninitialized(&p));
        assert!(!wants_scheduling(&p));
        let mut done = p.clone();
        done["metadata"]["initializers"]["pending"] = json!([]);
        prepare_update(pods, None, &p, &mut done, &c).unwrap();
        assert!(!is_uninitialized(&done));
        let mut again = done.clone();
        again["metadata"]["initializers"] = json!({"pending": [{"name": "b.example.com"}]});
        assert_eq!(
            prepare_update(pods, None, &done, &mut again, &c)
                .unwrap_err()
                .code,
            422
        );
        // created already initialized
        let mut pre = pod(&[]);
        pre["metadata"]["initializers"] = json!({"pending": []});
        prepare_create(pods, &mut pre, &c).unwrap();
        assert!(!is_uninitialized(&pre));
    }

    #[test]
    fn events_convert_between_groups() {
        let v1 = lookup("events.k8s.io", "v1", "events").unwrap();
        let stored = to_storage(
            v1,
            json!({"apiVersion": "events.k8s.io/v1", "note": "n", "regarding": {"name": "p"}, "reason": "R"}),
        );
        assert_eq!(stored["message"], "n");
        assert_eq!(stored["involvedObject"]["name"], "p");
        assert_eq!(stored["apiVersion"], "v1");
        let back = from_storage(v1, &stored);
        assert_eq!(back["note"], "n");
        assert_eq!(back["apiVersion"], "events.k8s.io/v1");
    }
}
