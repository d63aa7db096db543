//! Server-side printing: `meta.k8s.io/v1 Table` responses for clients (kubectl) that ask
//! with `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, with the columns the real
//! printers use.

use serde_json::{Value, json};

use super::kinds::SCHEDULING_GATED;
use super::resources::{ResourceInfo, Storage};

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parse the `includeObject` parameter (default `Metadata`).
    pub(crate) fn parse(v: Option<&str>) -> IncludeObject {
        match v {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

fn column(name: &str, kind: &str, format: &str, description: &str, priority: u32) -> Value {
    json!({ "name": name, "type": kind, "format": format, "description": description, "priority": priority })
}

fn name_column() -> Value {
    column(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        0,
    )
}

fn age_column(title: &str) -> Value {
    column(
        title,
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.",
        0,
    )
}

/// Column definitions for a resource.
pub(crate) fn columns(res: &ResourceInfo) -> Vec<Value> {
    match res.storage {
        Storage::Pods => vec![
            name_column(),
            column(
                "Ready",
                "string",
                "",
                "The aggregate readiness state of this pod for accepting traffic.",
                0,
            ),
            column(
                "Status",
                "string",
                "",
                "The aggregate status of the containers in this pod.",
                0,
            ),
            column(
                "Restarts",
                "string",
                "",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                0,
            ),
            age_column("Age"),
            column(
                "IP",
                "string",
                "",
                "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
                1,
            ),
            column(
                "Node",
                "string",
                "",
                "NodeName is a request to schedule this pod onto a specific node.",
                1,
            ),
            column(
                "Nominated Node",
                "string",
                "",
                "nominatedNodeName is set only when this pod preempts other pods on the node.",
                1,
            ),
            column(
                "Readiness Gates",
                "string",
                "",
                "If specified, all readiness gates will be evaluated for pod readiness.",
                1,
            ),
        ],
        Storage::Deployments => vec![
            name_column(),
            column(
                "Ready",
                "string",
                "",
                "Number of the pod with ready state",
                0,
            ),
            column(
                "Up-to-date",
                "string",
                "",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                0,
            ),
            column(
                "Available",
                "string",
                "",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                0,
            ),
            age_column("Age"),
        ],
        Storage::Namespaces => vec![
            name_column(),
            column("Status", "string", "", "The status of the namespace", 0),
            age_column("Age"),
        ],
        Storage::Leases => vec![
            name_column(),
            column("Holder", "string", "", "The holder of the lease.", 0),
            age_column("Age"),
        ],
        // pkg/printers/internalversion: eventColumnDefinitions.
        Storage::Events => vec![
            column(
                "Last Seen",
                "string",
                "",
                "The time at which the most recent occurrence of this event was recorded.",
                0,
            ),
            column(
                "Type",
                "string",
                "",
                "Type of this event (Normal, Warning), new types could be added in the future",
                0,
            ),
            column(
                "Reason",
                "string",
                "",
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                0,
            ),
            column(
                "Object",
                "string",
                "",
                "The object that this event is about.",
                0,
            ),
            column(
                "Subobject",
                "string",
                "",
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
                1,
            ),
            column(
                "Source",
                "string",
                "",
                "The component reporting this event. Should be a short machine understandable string.",
                1,
            ),
            column(
                "Message",
                "string",
                "",
                "A human-readable description of the status of this operation.",
                0,
            ),
            column(
                "First Seen",
                "string",
                "",
                "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
                1,
            ),
            column(
                "Count",
                "string",
                "",
                "The number of times this event has occurred.",
                1,
            ),
            column(
                "Name",
                "string",
                "name",
                "Name must be unique within a namespace.",
                1,
            ),
        ],
        Storage::ConfigMaps => vec![
            name_column(),
            column("Data", "string", "", "Number of data entries.", 0),
            age_column("Age"),
        ],
        Storage::Jobs | Storage::CronJobs | Storage::DaemonSets => {
            vec![name_column(), age_column("Age")]
        }
        Storage::Endpoints => vec![
            name_column(),
            column(
                "Endpoints",
                "string",
                "",
                "Endpoints is the list of endpoints that implement the service.",
                0,
            ),
            age_column("Age"),
        ],
        Storage::ValidatingWebhookConfigurations | Storage::MutatingWebhookConfigurations => vec![
            name_column(),
            column(
                "Webhooks",
                "integer",
                "",
                "Webhooks indicates the number of webhooks registered in this configuration",
                0,
            ),
            age_column("Age"),
        ],
    }
}

/// The cells of one object's row (`obj` in `res`'s representation).
pub(crate) fn cells(res: &ResourceInfo, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let name = obj["metadata"]["name"].clone();
    let age = age(obj, now);
    match res.storage {
        Storage::Pods => pod_cells(obj, name, age),
        Storage::Deployments => {
            let s = &obj["status"];
            let n = |v: &Value| v.as_i64().unwrap_or(0);
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    n(&s["readyReplicas"]),
                    n(&obj["spec"]["replicas"])
                )),
                json!(n(&s["updatedReplicas"])),
                json!(n(&s["availableReplicas"])),
                json!(age),
            ]
        }
        Storage::Namespaces => vec![
            name,
            json!(obj["status"]["phase"].as_str().unwrap_or("Active")),
            json!(age),
        ],
        Storage::Leases => vec![
            name,
            json!(obj["spec"]["holderIdentity"].as_str().unwrap_or("")),
            json!(age),
        ],
        Storage::Events => event_cells(obj, name, now),
        Storage::ConfigMaps => vec![
            name,
            json!(obj["data"].as_object().map_or(0, |d| d.len())),
            json!(age),
        ],
        Storage::Jobs | Storage::CronJobs | Storage::DaemonSets => vec![name, json!(age)],
        Storage::Endpoints => vec![name, json!(endpoints_cell(obj)), json!(age)],
        Storage::ValidatingWebhookConfigurations | Storage::MutatingWebhookConfigurations => vec![
            name,
            json!(obj["webhooks"].as_array().map_or(0, Vec::len)),
            json!(age),
        ],
    }
}

/// `ip:port` of every ready address, as `printEndpoints` shows them (`<none>` for none).
fn endpoints_cell(obj: &Value) -> String {
    let mut shown = Vec::new();
    for subset in obj["subsets"].as_array().into_iter().flatten() {
        for address in subset["addresses"].as_array().into_iter().flatten() {
            let ip = address["ip"].as_str().unwrap_or("");
            for port in subset["ports"].as_array().into_iter().flatten() {
                shown.push(format!("{ip}:{}", port["port"].as_i64().unwrap_or(0)));
            }
        }
    }
    if shown.is_empty() {
        "<none>".to_owned()
    } else {
        shown.join(",")
    }
}

/// `printEvent` with `Wide: true`, as the API server prints (the client hides priority-1
/// columns).
fn event_cells(event: &Value, name: Value, now: jiff::Timestamp) -> Vec<Value> {
    let since = |field: &Value| {
        field
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| human_duration(now.as_second() - t.as_second()))
    };
    let unknown = || "<unknown>".to_string();
    let first = since(&event["firstTimestamp"])
        .or_else(|| since(&event["eventTime"]))
        .unwrap_or_else(unknown);
    let mut last = since(&event["lastTimestamp"]).unwrap_or_else(|| first.clone());
    let mut count = event["count"].as_i64().unwrap_or(0);
    if event["series"].is_object() {
        last = since(&event["series"]["lastObservedTime"]).unwrap_or_else(unknown);
        count = event["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = &event["involvedObject"];
    let kind = involved["kind"].as_str().unwrap_or("").to_lowercase();
    let target = match involved["name"].as_str() {
        Some(n) if !n.is_empty() => format!("{kind}/{n}"),
        _ => kind,
    };
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let non_empty = |a: &Value, b: &Value| {
        let a = text(a);
        if a.is_empty() { text(b) } else { a }
    };
    let component = non_empty(&event["source"]["component"], &event["reportingComponent"]);
    let instance = non_empty(&event["source"]["host"], &event["reportingInstance"]);
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(text(&event["type"])),
        json!(text(&event["reason"])),
        json!(target),
        json!(text(&involved["fieldPath"])),
        json!(source),
        json!(text(&event["message"]).trim()),
        json!(first),
        json!(count),
        name,
    ]
}

fn pod_cells(pod: &Value, name: Value, age: String) -> Vec<Value> {
    let containers = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = statuses.iter().filter(|s| s["ready"] == true).count();
    let restarts: i64 = statuses
        .iter()
        .map(|s| s["restartCount"].as_i64().unwrap_or(0))
        .sum();
    let mut reason = pod["status"]["reason"]
        .as_str()
        .or(pod["status"]["phase"].as_str())
        .unwrap_or("Pending")
        .to_string();
    let gated = pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "PodScheduled" && c["reason"] == SCHEDULING_GATED)
    });
    if gated {
        reason = SCHEDULING_GATED.to_string();
    }
    for s in &statuses {
        if let Some(w) = s["state"]["waiting"]["reason"].as_str() {
            reason = w.to_string();
        }
    }
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        reason = "Terminating".to_string();
    }
    let or_none = |v: &Value| json!(v.as_str().filter(|s| !s.is_empty()).unwrap_or("<none>"));
    vec![
        name,
        json!(format!("{ready}/{containers}")),
        json!(reason),
        json!(restarts),
        json!(age),
        or_none(&pod["status"]["podIP"]),
        or_none(&pod["spec"]["nodeName"]),
        or_none(&pod["status"]["nominatedNodeName"]),
        json!("<none>"),
    ]
}

fn age(obj: &Value, now: jiff::Timestamp) -> String {
    obj["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| human_duration(now.as_second() - t.as_second()))
        .unwrap_or_else(|| "<unknown>".to_string())
}

/// `duration.HumanDuration` of apimachinery, over whole seconds.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{d}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// One table row.
pub(crate) fn row(
    res: &ResourceInfo,
    obj: &Value,
    include: IncludeObject,
    now: jiff::Timestamp,
) -> Value {
    let mut row = json!({ "cells": cells(res, obj, now) });
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            });
        }
        IncludeObject::Object => {
            let mut full = obj.clone();
            full["kind"] = json!(res.kind);
            full["apiVersion"] = json!(res.api_version());
            row["object"] = full;
        }
    }
    row
}

/// A Table for `objects`; `table_version` is `v1` or `v1beta1` as requested.
pub(crate) fn table(
    res: &ResourceInfo,
    objects: &[Value],
    list_meta: Value,
    include: IncludeObject,
    table_version: &str,
    with_headers: bool,
) -> Value {
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objects.iter().map(|o| row(res, o, include, now)).collect();
    let mut t = json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{table_version}"),
        "metadata": list_meta,
        "rows": rows,
    });
    if with_headers {
        t["columnDefinitions"] = json!(columns(res));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::by_plural;

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
    }

    #[test]
    fn gated_pods_print_scheduling_gated() {
        let pods = by_plural("pods").unwrap();
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
        });
        let now: jiff::Timestamp = "2024-01-01T00:00:07Z".parse().unwrap();
        let c = cells(pods, &pod, now);
        assert_eq!(
            c[..5],
            [
                json!("p"),
                json!("0/1"),
                json!("SchedulingGated"),
                json!(0),
                json!("7s")
            ]
        );
    }
}
