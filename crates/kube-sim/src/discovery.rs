//! Discovery documents (`/version`, `/api`, `/apis`, resource lists) in the legacy
//! (unaggregated) format, which kubectl and kube-rs fall back to when the server answers
//! aggregated-discovery requests with plain JSON.

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::resources::{RESOURCE_VERBS, RESOURCES, STATUS_VERBS, Storage, group_versions, served};
use super::version::KubeVersion;
use kube_common::Mechanism;

/// `/version`: the profile's version; without one a 1.33 server for scheduling gates, a 1.13
/// one (the last with initializers) for legacy initializers.
pub(crate) fn version(mechanism: Mechanism, kube: Option<KubeVersion>) -> Value {
    let kube = kube.unwrap_or(match mechanism {
        Mechanism::SchedulingGates => KubeVersion::V1_33,
        Mechanism::Initializers => KubeVersion::V1_13,
    });
    let (minor, git) = (kube.minor(), kube.git_version());
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
pub(crate) fn core_versions(addr: SocketAddr) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": addr.to_string() }],
    })
}

fn group_doc(group: &str, kube: Option<KubeVersion>) -> Value {
    let versions: Vec<Value> = group_versions(kube)
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
pub(crate) fn group_list(kube: Option<KubeVersion>) -> Value {
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in group_versions(kube) {
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups.iter().map(|g| group_doc(g, kube)).collect::<Vec<_>>(),
    })
}

/// `/apis/GROUP`, if served.
pub(crate) fn group(group: &str, kube: Option<KubeVersion>) -> Option<Value> {
    group_versions(kube)
        .iter()
        .any(|(g, _)| *g == group && !g.is_empty())
        .then(|| {
            let mut doc = group_doc(group, kube);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

/// `/api/v1` or `/apis/GROUP/VERSION`, if served.
/// The group/version of Evictions a server of `kube` takes: policy/v1 from 1.22
/// (kubernetes/kubernetes#100724), policy/v1beta1 before.
pub(crate) fn eviction_version(kube: Option<KubeVersion>) -> &'static str {
    match kube {
        None | Some(KubeVersion::V1_33) => "v1",
        Some(_) => "v1beta1",
    }
}

/// `/api/v1`'s `pods/eviction` entry. 1.7's APIResource has no `group`/`version` fields
/// (they came for subresources later): the 1.8 profile names none, so clients must fall
/// back to policy/v1beta1.
fn eviction_resource(kube: Option<KubeVersion>) -> Value {
    let mut entry = json!({
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": true,
        "kind": "Eviction",
        "verbs": ["create"],
    });
    if kube != Some(KubeVersion::V1_8) {
        entry["group"] = json!("policy");
        entry["version"] = json!(eviction_version(kube));
    }
    entry
}

pub(crate) fn resource_list(
    group: &str,
    version: &str,
    kube: Option<KubeVersion>,
) -> Option<Value> {
    let served: Vec<_> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version && served(kube, group, version))
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
        if r.storage == Storage::Pods {
            resources.push(eviction_resource(kube));
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

/// The OpenAPI v3 path of a group version: `api/v1`, `apis/apps/v1`.
fn openapi_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of per-group-version documents.
pub(crate) fn openapi_v3_index(kube: Option<KubeVersion>) -> Value {
    let paths: serde_json::Map<String, Value> = group_versions(kube)
        .into_iter()
        .map(|(g, v)| {
            let path = openapi_path(g, v);
            let url = format!("/openapi/v3/{path}?hash={}", OPENAPI_HASH);
            (path, json!({ "serverRelativeURL": url }))
        })
        .collect();
    json!({ "paths": paths })
}

/// Changes whenever the documents below do (clients cache by it).
const OPENAPI_HASH: &str = "initguard-sim-1";

/// `/openapi/v3/api/v1`, `/openapi/v3/apis/GROUP/VERSION`: a minimal document that lists
/// the write operations with their group-version-kind and `fieldValidation` parameter, which
/// is what kubectl reads to decide that the server validates fields itself. Schemas are not
/// included; `fieldValidation` is accepted and not enforced.
pub(crate) fn openapi_v3_document(path: &str, kube: Option<KubeVersion>) -> Option<Value> {
    let (group, version) = group_versions(kube)
        .into_iter()
        .find(|(g, v)| openapi_path(g, v) == path)?;
    let mut paths = serde_json::Map::new();
    let field_validation = json!({
        "name": "fieldValidation",
        "in": "query",
        "description": "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields.",
        "schema": { "type": "string", "uniqueItems": true },
    });
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let gvk = json!({ "group": r.group, "version": r.version, "kind": r.kind });
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", r.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [field_validation],
                "responses": { "200": { "description": "OK" } },
            })
        };
        let base = format!("/{}", openapi_path(group, version));
        let collection = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{base}/{}", r.plural)
        };
        paths.insert(collection.clone(), json!({ "post": op("post") }));
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({ "put": op("put"), "patch": op("patch") }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": "v1.33.0" },
        "paths": paths,
        "components": {},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_list_every_served_resource() {
        let core = resource_list("", "v1", None).unwrap();
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
                "pods/eviction",
                "events",
                "configmaps",
                "endpoints"
            ]
        );
        assert_eq!(core["resources"][2]["shortNames"][0], "po");
        assert!(resource_list("apps", "v1", None).is_some());
        let batch = resource_list("batch", "v1", None).unwrap();
        assert_eq!(batch["resources"][0]["name"], "jobs");
        assert_eq!(batch["resources"][2]["name"], "cronjobs");
        assert!(resource_list("batch", "v2alpha1", None).is_none());
        let groups = group_list(None);
        assert_eq!(groups["groups"].as_array().unwrap().len(), 6);
        assert_eq!(
            group("apps", None).unwrap()["preferredVersion"]["groupVersion"],
            "apps/v1"
        );
        assert!(group("", None).is_none());
        let index = openapi_v3_index(None);
        assert!(index["paths"]["apis/apps/v1"]["serverRelativeURL"].is_string());
        let doc = openapi_v3_document("api/v1", None).unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Pod");
        assert!(openapi_v3_document("apis/batch/v2alpha1", None).is_none());
    }

    #[test]
    fn version_profiles_serve_their_group_versions() {
        let v18 = Some(KubeVersion::V1_8);
        assert_eq!(version(Mechanism::Initializers, v18)["minor"], "8");
        assert!(resource_list("apps", "v1", v18).is_none());
        assert_eq!(
            group("apps", v18).unwrap()["preferredVersion"]["groupVersion"],
            "apps/v1beta2"
        );
        assert!(resource_list("extensions", "v1beta1", v18).is_some());
        assert!(group("coordination.k8s.io", v18).is_none());
        let v113 = Some(KubeVersion::V1_13);
        assert_eq!(
            group("coordination.k8s.io", v113).unwrap()["preferredVersion"]["groupVersion"],
            "coordination.k8s.io/v1beta1"
        );
        assert!(group("events.k8s.io", v113).is_none());
        // admissionregistration.k8s.io/v1 from 1.16 on: not on the legacy profiles.
        assert!(group("admissionregistration.k8s.io", v113).is_none());
        let names: Vec<String> = group_list(Some(KubeVersion::V1_33))["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "apps",
                "coordination.k8s.io",
                "batch",
                "admissionregistration.k8s.io",
                "events.k8s.io"
            ]
        );
    }
}
