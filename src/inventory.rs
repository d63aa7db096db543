//! `initguard webhooks`: a read-only audit of every admission webhook in the cluster — which
//! can brick it, which the guard covers — before one does (README "Commands"). Its YAML output
//! is a `webhooks:` section for the unguarded fail-closed entries that `check-config` accepts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use crate::config::{Config, WebhookKind};
use crate::webhook::{Configuration, FailurePolicy, Records};

/// Where the YAML output puts the canary of a webhook called by URL (which has no Service to
/// follow): a namespace to create and select, named in the output's comment.
pub const CANARY_NAMESPACE: &str = "initguard-canary";

/// A timeout this long or longer keeps every matching request waiting that long in an outage.
const LONG_TIMEOUT_SECONDS: i64 = 15;

/// One webhook entry as the audit sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// `KIND/CONFIGURATION/WEBHOOK`.
    pub name: String,
    pub failure_policy: &'static str,
    /// `service NS/NAME` or `url URL`.
    pub backend: String,
    /// For a Service backend: whether it exists, and its ready endpoints.
    pub service_present: Option<bool>,
    pub ready_endpoints: Option<usize>,
    pub risks: Vec<String>,
    pub guarded: bool,
    /// The backend's namespace, when the entry intercepts it (to exempt it).
    #[serde(skip)]
    own_namespace: Option<String>,
}

/// Something that can fail closed but that no webhook bypass can help.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NotGuardable {
    pub what: String,
    pub why: String,
}

/// The whole audit.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    pub entries: Vec<Entry>,
    /// Bypass records on entries the configuration does not list.
    pub orphaned_records: Vec<String>,
    pub not_guardable: Vec<NotGuardable>,
}

/// Why the audit cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("reading discovery: {0}")]
    Discovery(#[source] kube::Error),
    #[error("listing {what}: {source}")]
    List {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// Whether a `metav1.LabelSelector` (JSON; absent or `{}` selects everything) selects `labels`.
/// One the server would refuse (an unknown operator) is assumed to select: the worst case.
pub fn selects(selector: Option<&Value>, labels: &BTreeMap<String, String>) -> bool {
    crate::webhook::selects(selector.unwrap_or(&Value::Null), labels).unwrap_or(true)
}

/// Whether a rule list covers `resource` (plural) for `operation`.
fn covers(entry: &Value, resource: &str, operation: &str) -> bool {
    entry
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|rule| {
            let has = |field: &str, want: &str| {
                rule.get(field)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    // `*` and `*/*` cover every resource; `X/*` only X's subresources.
                    .any(|v| v == "*" || v == "*/*" || v == want)
            };
            has("resources", resource) && has("operations", operation)
        })
}

/// The risks of one entry: what it intercepts that an outage of its backend wedges.
fn risks(
    entry: &Value,
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
    own_namespace: Option<&str>,
) -> (Vec<String>, bool) {
    let selected = |ns: &str| {
        namespace_labels
            .get(ns)
            .is_some_and(|labels| selects(entry.get("namespaceSelector"), labels))
    };
    let mut risks = Vec::new();
    let mut own = false;
    if let Some(ns) = own_namespace
        && selected(ns)
        && covers(entry, "pods", "CREATE")
    {
        risks.push(format!(
            "intercepts its own backend's pods (namespace {ns})"
        ));
        own = true;
    }
    if selected("kube-system") {
        risks.push("intercepts kube-system".to_owned());
    }
    if covers(entry, "nodes", "UPDATE") || covers(entry, "nodes", "CREATE") {
        risks.push("intercepts Nodes".to_owned());
    }
    if covers(entry, "leases", "UPDATE") || covers(entry, "leases", "CREATE") {
        risks.push("intercepts Leases".to_owned());
    }
    // Any DELETE: namespace deletion and garbage collection delete every kind.
    let deletes = entry
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|rule| rule.get("operations").and_then(Value::as_array))
        .flatten()
        .any(|o| o == "*" || o == "DELETE");
    if deletes {
        risks.push("intercepts DELETE".to_owned());
    }
    if let Some(t) = entry.get("timeoutSeconds").and_then(Value::as_i64)
        && t >= LONG_TIMEOUT_SECONDS
    {
        risks.push(format!("timeout {t}s"));
    }
    (risks, own)
}

/// Read every webhook configuration, Namespace, Service, EndpointSlice, CRD and APIService
/// it needs, and judge each entry against `config` (None: nothing is guarded).
pub async fn gather(
    client: &kube::Client,
    config: Option<&Config>,
) -> Result<Inventory, InventoryError> {
    let surface = kube_common::ApiSurface::read(client)
        .await
        .map_err(InventoryError::Discovery)?;
    let list = |what: &'static str| move |source| InventoryError::List { what, source };
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace_labels: BTreeMap<String, BTreeMap<String, String>> = namespaces
        .list_metadata(&ListParams::default())
        .await
        .map_err(list("namespaces"))?
        .items
        .into_iter()
        .map(|n| {
            let name = n.metadata.name.unwrap_or_default();
            let mut labels = n.metadata.labels.unwrap_or_default();
            // Set by the server on 1.21+; assumed on older ones.
            labels
                .entry("kubernetes.io/metadata.name".to_owned())
                .or_insert_with(|| name.clone());
            (name, labels.into_iter().collect())
        })
        .collect();
    let listed: BTreeSet<String> = config
        .map(|c| c.webhooks.iter().map(|w| w.id.to_string()).collect())
        .unwrap_or_default();
    let mut inventory = Inventory::default();
    for kind in [WebhookKind::Validating, WebhookKind::Mutating] {
        let Some(resource) = surface.webhook_configurations(kind.object_kind(), kind.resource())
        else {
            continue;
        };
        let policy = crate::guard::webhooks::default_failure_policy(&resource);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let objects = api
            .list(&ListParams::default())
            .await
            .map_err(list("webhook configurations"))?;
        for object in objects.items {
            let Ok(value) = serde_json::to_value(&object) else {
                continue;
            };
            let Ok(configuration) = Configuration::decode(kind, &value, policy) else {
                continue;
            };
            let records: Records = configuration.records().unwrap_or_default();
            // Without a configuration nothing is listed: every bypass is left behind.
            inventory
                .orphaned_records
                .extend(crate::webhook::orphaned_bypasses(
                    config.map_or(&[][..], |c| &c.webhooks),
                    kind,
                    &configuration.name,
                    &records,
                ));
            for (index, entry) in configuration.entries.iter().enumerate() {
                let webhook = entry
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let name = format!("{}/{}/{webhook}", kind.as_str(), configuration.name);
                let service = configuration.service(index);
                let (service_present, ready_endpoints) = match &service {
                    Some((ns, svc)) => backend_state(client, ns, svc).await,
                    None => (None, None),
                };
                let backend = match (&service, entry.pointer("/clientConfig/url")) {
                    (Some((ns, svc)), _) => format!("service {ns}/{svc}"),
                    (None, Some(url)) => format!("url {}", url.as_str().unwrap_or_default()),
                    (None, None) => "none".to_owned(),
                };
                let own = service.as_ref().map(|(ns, _)| ns.as_str());
                let (risks, intercepts_own) = risks(entry, &namespace_labels, own);
                inventory.entries.push(Entry {
                    guarded: listed.contains(&name),
                    name,
                    failure_policy: match configuration.failure_policy(index) {
                        FailurePolicy::Fail => "Fail",
                        FailurePolicy::Ignore => "Ignore",
                    },
                    backend,
                    service_present,
                    ready_endpoints,
                    risks,
                    own_namespace: intercepts_own.then(|| own.unwrap_or_default().to_owned()),
                });
            }
        }
    }
    not_guardable(client, &mut inventory).await;
    Ok(inventory)
}

/// Whether Service `ns/name` exists and how many ready endpoints its slices list (None when
/// unreadable).
async fn backend_state(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> (Option<bool>, Option<usize>) {
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), ns);
    let present = services
        .get_metadata_opt(name)
        .await
        .ok()
        .map(|s| s.is_some());
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), ns);
    let ready = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await
        .ok()
        .map(|l| {
            l.items
                .iter()
                .map(|s| crate::owners::slice_endpoints(s).0)
                .sum()
        });
    (present, ready)
}

/// CRD conversion webhooks and unavailable APIServices: they fail requests too, and no webhook
/// bypass helps. Unreadable lists are skipped (the audit is best effort there).
async fn not_guardable(client: &kube::Client, inventory: &mut Inventory) {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
        },
    );
    if let Ok(list) = crds.list(&ListParams::default()).await {
        for crd in list.items {
            if crd
                .data
                .pointer("/spec/conversion/strategy")
                .and_then(Value::as_str)
                == Some("Webhook")
            {
                inventory.not_guardable.push(NotGuardable {
                    what: format!("crd {}", crd.metadata.name.unwrap_or_default()),
                    why: "conversion webhook: every read and write of its resource fails while \
                          it is down"
                        .to_owned(),
                });
            }
        }
    }
    let services: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: "apiregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "apiregistration.k8s.io/v1".into(),
            kind: "APIService".into(),
            plural: "apiservices".into(),
        },
    );
    if let Ok(list) = services.list(&ListParams::default()).await {
        for service in list.items {
            let unavailable = service
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Available" && c["status"] == "False");
            if unavailable {
                inventory.not_guardable.push(NotGuardable {
                    what: format!("apiservice {}", service.metadata.name.unwrap_or_default()),
                    why: "unavailable: discovery and its group fail".to_owned(),
                });
            }
        }
    }
}

/// The table on stdout.
pub fn render_table(inventory: &Inventory) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "WEBHOOK\tFAILURE POLICY\tBACKEND\tSERVICE\tREADY\tGUARDED\tRISKS"
    );
    for e in &inventory.entries {
        let present = match e.service_present {
            Some(true) => "present",
            Some(false) => "MISSING",
            None => "-",
        };
        let ready = e
            .ready_endpoints
            .map_or_else(|| "-".to_owned(), |r| r.to_string());
        let risks = if e.risks.is_empty() {
            "-".to_owned()
        } else {
            e.risks.join("; ")
        };
        let guarded = if e.guarded { "yes" } else { "no" };
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{present}\t{ready}\t{guarded}\t{risks}",
            e.name, e.failure_policy, e.backend
        );
    }
    for id in &inventory.orphaned_records {
        let _ = writeln!(
            out,
            "left behind: {id} carries a bypass record but is not listed (run `initguard restore`)"
        );
    }
    for n in &inventory.not_guardable {
        let _ = writeln!(out, "not guardable: {}: {}", n.what, n.why);
    }
    out
}

/// A `webhooks:` section for the unguarded fail-closed entries: Service backends keep their
/// default owner (and exempt their own namespace when they intercept it); URL backends get an
/// `apiserver` canary in [`CANARY_NAMESPACE`].
pub fn render_yaml(inventory: &Inventory) -> String {
    let mut out = String::from(
        "# Unguarded fail-closed webhooks, from `initguard webhooks --output yaml`.\n",
    );
    let candidates: Vec<&Entry> = inventory
        .entries
        .iter()
        .filter(|e| !e.guarded && e.failure_policy == "Fail")
        .collect();
    if candidates.iter().any(|e| e.backend.starts_with("url ")) {
        let _ = writeln!(
            out,
            "# URL webhooks are judged by a dry-run canary in namespace {CANARY_NAMESPACE}: create it, \
             label it so that each webhook selects it, and grant the guard create on pods there."
        );
    }
    out.push_str("webhooks:");
    if candidates.is_empty() {
        out.push_str(" []\n");
        return out;
    }
    out.push('\n');
    for e in candidates {
        let _ = writeln!(out, "  - name: {}", e.name);
        if e.backend.starts_with("url ") {
            let _ = writeln!(
                out,
                "    owner: {{ apiserver: {{ namespace: {CANARY_NAMESPACE}, resource: pods }} }}"
            );
        }
        if let Some(ns) = &e.own_namespace {
            let _ = writeln!(out, "    exemptNamespaces: [{ns}]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn label_selectors_select_as_the_api_server_does() {
        let system = labels(&[("kubernetes.io/metadata.name", "kube-system")]);
        assert!(selects(None, &system));
        assert!(selects(Some(&json!({})), &system));
        let not_system = json!({ "matchExpressions": [
            { "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"] }] });
        assert!(!selects(Some(&not_system), &system));
        assert!(selects(
            Some(&not_system),
            &labels(&[("kubernetes.io/metadata.name", "apps")])
        ));
        let team = json!({ "matchLabels": { "team": "a" } });
        assert!(!selects(Some(&team), &system));
        assert!(selects(
            Some(&json!({ "matchExpressions": [{ "key": "x", "operator": "DoesNotExist" }] })),
            &system
        ));
    }

    #[test]
    fn risks_name_what_an_outage_wedges() {
        let namespaces: BTreeMap<String, BTreeMap<String, String>> = ["kube-system", "policy"]
            .iter()
            .map(|n| {
                (
                    (*n).to_owned(),
                    labels(&[("kubernetes.io/metadata.name", n)]),
                )
            })
            .collect();
        let everything = json!({
            "rules": [{ "operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"] }],
            "timeoutSeconds": 30,
        });
        let (found, own) = risks(&everything, &namespaces, Some("policy"));
        assert!(own);
        for risk in [
            "own backend",
            "kube-system",
            "Nodes",
            "Leases",
            "DELETE",
            "timeout 30s",
        ] {
            assert!(
                found.iter().any(|r| r.contains(risk)),
                "{risk} missing from {found:?}"
            );
        }
        let narrow = json!({
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"] }],
            "namespaceSelector": { "matchLabels": { "team": "a" } },
        });
        assert_eq!(
            risks(&narrow, &namespaces, Some("policy")),
            (Vec::new(), false)
        );
    }
}
