//! Discovery documents (`/version`, `/api`, `/apis`, resource lists) in the legacy
//! (unaggregated) format, which kubectl and kube-rs fall back to when the server answers
//! aggregated-discovery requests with plain JSON.

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::resources::{RESOURCE_VERBS, RESOURCES, STATUS_VERBS, group_versions};
use crate::config::Mechanism;

/// `/version`: a 1.33 server for scheduling gates, a 1.13 one (the last with initializers)
/// for legacy initializers.
pub fn version(mechanism: Mechanism) -> Value {
    let (minor, git) = match mechanism {
        Mechanism::SchedulingGates => ("33", "v1.33.0-initguard-sim"),
        Mechanism::Initializers => ("13", "v1.13.12-initguard-sim"),
    };
    json!({
        "major": "1",
        "minor": minor,
        "gitVersion": git,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions(addr: SocketAddr) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": addr.to_string() }],
    })
}

fn group_doc(group: &str) -> Value {
    let versions: Vec<Value> = group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({ "groupVersion": format!("{g}/{v}"), "version": v }))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`.
pub fn group_list() -> Value {
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in group_versions() {
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups.iter().map(|g| group_doc(g)).collect::<Vec<_>>(),
    })
}

/// `/apis/GROUP`, if served.
pub fn group(group: &str) -> Option<Value> {
    group_versions()
        .iter()
        .any(|(g, _)| *g == group && !g.is_empty())
        .then(|| {
            let mut doc = group_doc(group);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

/// `/api/v1` or `/apis/GROUP/VERSION`, if served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let served: Vec<_> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for r in served {
        let mut doc = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": RESOURCE_VERBS,
        });
        if !r.short_names.is_empty() {
            doc["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            doc["categories"] = json!(r.categories);
        }
        resources.push(doc);
        for sub in r.subresources {
            resources.push(json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": STATUS_VERBS,
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_list_every_served_resource() {
        let core = resource_list("", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "namespaces",
                "namespaces/status",
                "pods",
                "pods/status",
                "events"
            ]
        );
        assert_eq!(core["resources"][2]["shortNames"][0], "po");
        assert!(resource_list("apps", "v1").is_some());
        assert!(resource_list("batch", "v1").is_none());
        let groups = group_list();
        assert_eq!(groups["groups"].as_array().unwrap().len(), 3);
        assert_eq!(
            group("apps").unwrap()["preferredVersion"]["groupVersion"],
            "apps/v1"
        );
        assert!(group("").is_none());
    }
}
