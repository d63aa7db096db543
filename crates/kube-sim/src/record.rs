//! What the server records: every request answered and every committed change.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::kinds;
use crate::store::ChangeType;

/// One request the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub time: SystemTime,
    /// Authenticated user (`system:anonymous` without a token; empty when authentication
    /// failed).
    pub user: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for
    /// non-resource paths (discovery) the lowercase HTTP method.
    pub verb: String,
    /// `pods`, `pods/status`, `deployments`, `leases`, `events`, `namespaces`…; empty for
    /// non-resource paths.
    pub resource: String,
    /// API group of the resource ("" for core).
    pub api_group: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// HTTP status answered.
    pub status: u16,
    /// A watch answered 200 whose stream is one `ERROR` event (410 Gone: a forced or expired
    /// resource version) carries that code here: it delivered no change, and the client lists.
    pub watch_error: Option<u16>,
    pub content_type: Option<String>,
    /// Request body of writes (for patch inspection).
    pub body: Option<String>,
    pub path: String,
    pub query: Option<String>,
}

/// One committed change of a stored object.
#[derive(Debug, Clone)]
pub struct ObjectChange {
    pub resource_version: u64,
    /// Plural resource name of the stored form: `pods`, `deployments`, `leases`, `events`,
    /// `namespaces`.
    pub resource: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    pub change_type: ChangeType,
    /// Who made the change (`system:kube-scheduler` and `system:node:sim-node-1` for the
    /// simulated scheduler and kubelet).
    pub user: String,
    pub time: SystemTime,
    /// State before the change (None for a creation).
    pub before: Option<Arc<Value>>,
    /// State after the change (None for a deletion).
    pub after: Option<Arc<Value>>,
}

impl ObjectChange {
    /// Initializer names (scheduling gates and legacy pending initializers) present before
    /// and absent after this change, once per occurrence removed; for a deletion, none.
    pub fn removed_initializers(&self) -> Vec<String> {
        let (Some(before), Some(after)) = (&self.before, &self.after) else {
            return Vec::new();
        };
        // As multisets: a legacy pending list may name one initializer more than once, and
        // removing one of them is a removal.
        let gone = |f: fn(&Value) -> Vec<String>| {
            let mut now = f(after);
            f(before)
                .into_iter()
                .filter(move |n| match now.iter().position(|m| m == n) {
                    Some(at) => {
                        now.remove(at);
                        false
                    }
                    None => true,
                })
        };
        gone(kinds::gate_names)
            .chain(gone(kinds::pending_initializer_names))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(pending: &[&str]) -> Option<Arc<Value>> {
        let entries: Vec<Value> = pending
            .iter()
            .map(|n| serde_json::json!({ "name": n }))
            .collect();
        Some(Arc::new(
            serde_json::json!({ "metadata": { "initializers": { "pending": entries } } }),
        ))
    }

    fn change(before: &[&str], after: &[&str]) -> ObjectChange {
        ObjectChange {
            resource_version: 1,
            resource: "pods".into(),
            kind: "Pod".into(),
            namespace: Some("default".into()),
            name: "p".into(),
            uid: "u".into(),
            change_type: ChangeType::Modified,
            user: "u".into(),
            time: SystemTime::UNIX_EPOCH,
            before: pod(before),
            after: pod(after),
        }
    }

    #[test]
    fn a_removed_occurrence_of_a_repeated_initializer_counts() {
        assert_eq!(
            change(&["a", "b", "a"], &["b", "a"]).removed_initializers(),
            ["a"]
        );
        assert_eq!(change(&["b", "a"], &[]).removed_initializers(), ["b", "a"]);
        assert_eq!(change(&["a", "a"], &[]).removed_initializers(), ["a", "a"]);
        assert!(
            change(&["a", "b"], &["a", "b"])
                .removed_initializers()
                .is_empty()
        );
        // A deletion removes none.
        let mut deleted = change(&["a"], &[]);
        deleted.after = None;
        assert!(deleted.removed_initializers().is_empty());
    }
}
