//! The one Eviction writer, shared by `afterRestore: evict` and the node stage's `recreate`:
//! the group/version `/api/v1` discovery lists for `pods/eviction` ([`EvictionVersion`]), a
//! body preconditioned on the pod's uid, the fence, [`write::classify`] deciding what an
//! answer means, and 429s (a PodDisruptionBudget, API priority and fairness) retried with
//! backoff for a bounded time, then reported.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::fence::Fence;
use super::write::{self, Refusal};

/// Longest pause between two tries of an eviction refused with 429.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);

/// The Eviction group/version of servers whose `/api/v1` does not name one (before the
/// subresource's `group`/`version` fields, 1.10): policy/v1beta1, served from 1.5.
const LEGACY_EVICTION: &str = "policy/v1beta1";

/// Which `apiVersion` an Eviction body must carry: policy/v1 from 1.22, policy/v1beta1
/// before (1.21 serves policy/v1 PodDisruptionBudgets but only v1beta1 Evictions, so the
/// groups `/apis` lists do not tell). Read once from `/api/v1`; a failed read is not kept.
#[derive(Clone, Default)]
pub struct EvictionVersion(std::sync::Arc<OnceCell<String>>);

impl EvictionVersion {
    /// The version to send, reading `/api/v1` on first use.
    pub async fn get(&self, client: &kube::Client) -> Result<&str, kube::Error> {
        self.0
            .get_or_try_init(|| async {
                let resources = client.list_core_api_resources("v1").await?;
                Ok(eviction_api_version(&resources))
            })
            .await
            .map(String::as_str)
    }
}

/// The `apiVersion` of an Eviction from `/api/v1`'s resource list: the `pods/eviction`
/// entry's own group and version when it names them, else policy/v1beta1.
pub fn eviction_api_version(resources: &APIResourceList) -> String {
    resources
        .resources
        .iter()
        .find(|r| r.name == "pods/eviction")
        .and_then(|r| match (r.group.as_deref(), r.version.as_deref()) {
            (Some(g), Some(v)) if !g.is_empty() && !v.is_empty() => Some(format!("{g}/{v}")),
            _ => None,
        })
        .unwrap_or_else(|| LEGACY_EVICTION.to_owned())
}

/// The pod to evict.
#[derive(Debug, Clone)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    /// The precondition: a namesake created since is never evicted.
    pub uid: String,
}

/// How one eviction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evicted {
    /// The server accepted it: the pod is being deleted.
    Yes,
    /// Already gone, or replaced by a namesake (the uid precondition failed).
    Gone,
    /// Refused for good, or still refused with 429 after the patience: reported.
    Refused(String),
    /// This replica does not lead (or stopped): nothing was sent, or the answer is unknown.
    NotLeading,
}

/// The Eviction body: `deleteOptions` in camel case. kube-core 5's `Api::evict` sends
/// `delete_options`, which the API server ignores, so its uid precondition would never
/// reach it: hence written by hand.
pub fn body(api_version: &str, target: &Target) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "Eviction",
        "metadata": { "name": target.name, "namespace": target.namespace },
        "deleteOptions": { "preconditions": { "uid": target.uid } },
    })
}

/// What to do about an eviction's error answer: `None` to try again after a pause.
fn settle(error: &kube::Error) -> Option<Evicted> {
    match (error, write::classify(error)) {
        (kube::Error::Api(s), _) if s.code == 429 => None,
        (_, Refusal::Gone | Refusal::Changed) => Some(Evicted::Gone),
        (_, Refusal::Transient(_)) => None,
        (_, Refusal::Refused(why)) => Some(Evicted::Refused(why)),
    }
}

/// Evict `target` with `api_version`, each try through the fence, retrying 429s and
/// transient failures with a growing pause for at most `patience`.
pub async fn evict(
    client: &kube::Client,
    fence: &Fence,
    cancel: &CancellationToken,
    api_version: &str,
    target: &Target,
    patience: Duration,
) -> Evicted {
    let body = body(api_version, target).to_string().into_bytes();
    let path = format!(
        "/api/v1/namespaces/{}/pods/{}/eviction",
        target.namespace, target.name
    );
    let started = Instant::now();
    let mut attempt: u32 = 0;
    loop {
        let request = http::Request::post(&path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        let request = match request {
            Ok(r) => r,
            Err(e) => return Evicted::Refused(format!("building the eviction: {e}")),
        };
        let Ok(permit) = fence.admit(cancel).await else {
            return Evicted::NotLeading;
        };
        let sent = client.request::<Value>(request);
        let error = match permit.send("an Eviction", sent).await {
            Err(e) => return Evicted::Refused(format!("no answer: {e}")),
            Ok(Ok(_)) => return Evicted::Yes,
            Ok(Err(e)) => e,
        };
        if let Some(end) = settle(&error) {
            return end;
        }
        if started.elapsed() >= patience {
            return Evicted::Refused(format!(
                "still refused after {} (a PodDisruptionBudget, or the API server's flow \
                 control): {error}",
                humantime::format_duration(patience)
            ));
        }
        attempt += 1;
        let pause = Duration::from_secs(1 << attempt.min(4)).min(MAX_RETRY_PAUSE);
        tokio::select! {
            () = cancel.cancelled() => return Evicted::NotLeading,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn list(entries: Value) -> APIResourceList {
        serde_json::from_value(json!({"groupVersion": "v1", "resources": entries}))
            .expect("a resource list")
    }

    fn entry(name: &str, group: Option<&str>, version: Option<&str>) -> Value {
        let mut e = json!({"name": name, "namespaced": true, "kind": "Eviction",
            "singularName": "", "verbs": ["create"]});
        if let Some(g) = group {
            e["group"] = json!(g);
        }
        if let Some(v) = version {
            e["version"] = json!(v);
        }
        e
    }

    #[test]
    fn the_version_is_the_one_api_v1_names_for_pods_eviction() {
        // 1.22 on.
        let v1 = list(json!([
            entry("pods", None, None),
            entry("pods/eviction", Some("policy"), Some("v1"))
        ]));
        assert_eq!(eviction_api_version(&v1), "policy/v1");
        // 1.21: policy/v1 is served (PDBs), Evictions only in v1beta1.
        let v121 = list(json!([entry(
            "pods/eviction",
            Some("policy"),
            Some("v1beta1")
        )]));
        assert_eq!(eviction_api_version(&v121), "policy/v1beta1");
        // Servers that name no group for subresources, or list no eviction at all.
        let old = list(json!([entry("pods/eviction", None, None)]));
        assert_eq!(eviction_api_version(&old), "policy/v1beta1");
        let empty = list(json!([entry("pods/eviction", Some(""), Some(""))]));
        assert_eq!(eviction_api_version(&empty), "policy/v1beta1");
        assert_eq!(eviction_api_version(&list(json!([]))), "policy/v1beta1");
        // Another subresource's group is not taken.
        let other = list(json!([entry("pods/binding", Some("x"), Some("v9"))]));
        assert_eq!(eviction_api_version(&other), "policy/v1beta1");
    }

    #[test]
    fn the_body_carries_the_uid_precondition_in_camel_case() {
        let target = Target {
            namespace: "apps".into(),
            name: "web-1".into(),
            uid: "u-1".into(),
        };
        let b = body("policy/v1", &target);
        assert_eq!(b["apiVersion"], "policy/v1");
        assert_eq!(b["kind"], "Eviction");
        assert_eq!(b["metadata"]["name"], "web-1");
        assert_eq!(b["metadata"]["namespace"], "apps");
        assert_eq!(b["deleteOptions"]["preconditions"]["uid"], "u-1");
        assert!(b.get("delete_options").is_none());
    }

    fn api(code: u16, message: &str) -> kube::Error {
        let s: Status =
            serde_json::from_value(json!({"code": code, "reason": "R", "message": message}))
                .expect("a status");
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn answers_are_settled_by_the_classifier_and_429_is_retried() {
        assert_eq!(settle(&api(429, "Cannot evict pod")), None);
        assert_eq!(settle(&api(503, "unavailable")), None);
        assert_eq!(settle(&api(404, "not found")), Some(Evicted::Gone));
        assert_eq!(
            settle(&api(409, "Precondition failed: UID")),
            Some(Evicted::Gone)
        );
        assert!(matches!(
            settle(&api(403, "forbidden")),
            Some(Evicted::Refused(why)) if why.starts_with("403")
        ));
    }
}
