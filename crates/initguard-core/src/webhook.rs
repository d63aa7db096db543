//! The admission-webhook guard's decision core (README "Admission webhooks"): what a listed
//! webhook configuration holds, what the guard recorded on it, and what to do next. **No I/O,
//! no clock of its own**: instants and owner states come in as arguments, like
//! [`crate::policy`].
//!
//! A webhook with `failurePolicy: Fail` whose owner has been down for `ownerDownGrace` is
//! bypassed for opted-in objects only; once the owner has been up for `restoreGrace`, exactly
//! what was added is removed. What was added lives in the configuration's
//! [`RECORD_ANNOTATION`], so a restarted guard (or a person) can undo it. The JSON Patches
//! that do both are built by [`patch`].

pub mod after;
pub mod patch;

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{
    CANARY_LABEL, Canary, Operation, OptIn, OptInMode, Requester, WebhookConfig, WebhookKind,
};
use crate::policy::OwnerState;
use kube_common::selector::{Requirement, SelectorOp};

/// Annotation on a webhook configuration: JSON, one [`Bypass`] per bypassed entry name.
pub const RECORD_ANNOTATION: &str = "initguard.io/bypassed-webhooks";

/// Name of the `matchConditions` entry a bypass adds.
pub const MATCH_CONDITION_NAME: &str = "initguard-bypass";

/// Label every namespace carries from Kubernetes 1.21 on; the selector path exempts
/// namespaces by it.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Most `matchConditions` an entry may have: the API server refuses more (`validation.go`), so
/// an entry that has them all is bypassed through selectors.
pub const MAX_MATCH_CONDITIONS: usize = 64;

/// A webhook configuration as read from the API server: the fields the guard needs, the
/// entries kept as raw JSON so that nothing it does not know is lost.
#[derive(Debug, Clone, PartialEq)]
pub struct Configuration {
    /// Validating or mutating.
    pub kind: WebhookKind,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.resourceVersion` as read.
    pub resource_version: String,
    /// Whether it carries [`NO_BYPASS_ANNOTATION`].
    pub paused: bool,
    /// Whether `metadata.annotations` exists (a patch adds the map or a key to it).
    pub annotations_present: bool,
    /// The raw value of [`RECORD_ANNOTATION`], if any.
    pub record_text: Option<String>,
    /// Entries in API order.
    pub entries: Vec<Value>,
    /// `failurePolicy` when an entry omits it: `Fail` in admissionregistration.k8s.io/v1,
    /// `Ignore` in v1beta1.
    pub default_failure_policy: FailurePolicy,
}

/// Why a configuration object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The named metadata field is missing or not a string.
    #[error("{0} is missing or not a string")]
    Field(&'static str),
    /// `webhooks` is not a list.
    #[error("webhooks is not a list")]
    Webhooks,
    /// The [`RECORD_ANNOTATION`] value is not a string.
    #[error("annotation {RECORD_ANNOTATION} is not a string")]
    Annotation,
}

/// `failurePolicy` of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FailurePolicy {
    /// `Fail`: a failed call rejects the request.
    Fail,
    /// `Ignore`: a failed call admits the request.
    Ignore,
}

impl Configuration {
    /// Reads a configuration object (JSON as the API server returns it).
    pub fn decode(
        kind: WebhookKind,
        object: &Value,
        default_failure_policy: FailurePolicy,
    ) -> Result<Configuration, DecodeError> {
        let meta = object.get("metadata");
        let text = |field: &'static str| {
            meta.and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(DecodeError::Field(field))
        };
        let annotations = meta.and_then(|m| m.get("annotations"));
        let record_text = match annotations.and_then(|a| a.get(RECORD_ANNOTATION)) {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(DecodeError::Annotation),
        };
        let entries = match object.get("webhooks") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list.clone(),
            Some(_) => return Err(DecodeError::Webhooks),
        };
        Ok(Configuration {
            kind,
            name: text("name")?,
            resource_version: text("resourceVersion")?,
            paused: annotations.is_some_and(|a| a.get(NO_BYPASS_ANNOTATION).is_some()),
            annotations_present: annotations.is_some_and(Value::is_object),
            record_text,
            entries,
            default_failure_policy,
        })
    }

    /// Index of the entry named `webhook`.
    pub fn index_of(&self, webhook: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.get("name").and_then(Value::as_str) == Some(webhook))
    }

    /// The entry's failure policy (the API's default when it omits it).
    pub fn failure_policy(&self, index: usize) -> FailurePolicy {
        match self.entries[index]
            .get("failurePolicy")
            .and_then(Value::as_str)
        {
            Some("Fail") => FailurePolicy::Fail,
            Some("Ignore") => FailurePolicy::Ignore,
            _ => self.default_failure_policy,
        }
    }

    /// The entry's `clientConfig.service` as `namespace/name`, if it calls a Service.
    pub fn service(&self, index: usize) -> Option<(String, String)> {
        let service = self.entries[index].get("clientConfig")?.get("service")?;
        let namespace = service.get("namespace")?.as_str()?;
        let name = service.get("name")?.as_str()?;
        Some((namespace.to_owned(), name.to_owned()))
    }

    /// What the guard recorded: a malformed annotation reads as its error, so the guard never
    /// writes over a record it cannot read.
    pub fn records(&self) -> Result<Records, serde_json::Error> {
        match &self.record_text {
            None => Ok(Records::new()),
            Some(text) => serde_json::from_str(text),
        }
    }
}

/// The record annotation's value: entry name → what was added, or a tombstone.
pub type Records = BTreeMap<String, Record>;

/// One entry's record: a bypass in force, or the tombstone of one restored on demand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Record {
    /// A bypass in force.
    Bypass(Bypass),
    /// The tombstone of a bypass restored on demand.
    Restored(Tombstone),
}

impl Record {
    /// The bypass in force, if this is one.
    pub fn bypass(&self) -> Option<&Bypass> {
        match self {
            Record::Bypass(b) => Some(b),
            Record::Restored(_) => None,
        }
    }

    /// The tombstone, if this is one.
    pub fn tombstone(&self) -> Option<&Restored> {
        match self {
            Record::Bypass(_) => None,
            Record::Restored(t) => Some(&t.restored),
        }
    }
}

/// `{"restored": {...}}`: left by `initguard restore` (or the chart's uninstall hook). Until
/// the entry's owner has been seen up, the guard does not bypass the entry again: a restarting
/// or still-running guard never undoes a person's restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tombstone {
    /// When, by whom and in which owner state it was restored.
    pub restored: Restored,
}

/// When, by whom and in which owner state a bypass was restored on demand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Restored {
    /// RFC 3339, UTC.
    pub at: String,
    /// `cli` or `uninstall`.
    pub by: String,
    /// The owner's state as the restorer knew it (`unknown` for the CLI, which does not watch
    /// owners).
    pub owner_state: String,
}

/// `KIND/CONFIGURATION/WEBHOOK` of each entry of configuration `name` that `records` holds a
/// bypass for although `listed` does not name it: no guard will ever restore it.
pub fn orphaned_bypasses(
    listed: &[WebhookConfig],
    kind: WebhookKind,
    name: &str,
    records: &Records,
) -> Vec<String> {
    records
        .iter()
        .filter(|(_, record)| record.bypass().is_some())
        .filter(|(entry, _)| {
            !listed
                .iter()
                .any(|w| w.id.kind == kind && w.id.configuration == name && &w.id.webhook == *entry)
        })
        .map(|(entry, _)| format!("{}/{name}/{entry}", kind.as_str()))
        .collect()
}

/// The annotation on a configuration that pauses the guard for it: no new bypass of any of
/// its entries while it is there (restores still happen).
pub const NO_BYPASS_ANNOTATION: &str = "initguard.io/no-bypass";

/// One bypass in force, as recorded on the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bypass {
    /// When it was made (RFC 3339, UTC).
    pub since: String,
    /// Why: `owner_down`.
    pub reason: String,
    /// The owner that was down, e.g. `lease policy-system/policy-webhook`.
    pub owner: String,
    /// Exactly what was added to the entry.
    pub added: Added,
}

/// What a bypass added to one entry; a restore removes exactly these values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Added {
    /// Appended to `matchConditions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_condition: Option<Value>,
    /// Appended to `objectSelector.matchExpressions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_selector: Option<Value>,
    /// Appended to `namespaceSelector.matchExpressions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<Value>,
    /// Also appended to `namespaceSelector.matchExpressions`: the negation of
    /// `optIn.namespaceSelector` (matchConditions cannot see namespace labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_requirement: Option<Value>,
}

/// Who a bypass lets past a webhook ([`let_through`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LetThrough {
    /// Objects carrying this label key (`optIn: any`).
    pub label: Option<String>,
    /// Objects in these namespaces (opted in, or exempt).
    pub namespaces: Vec<String>,
    /// Objects in namespaces this `matchExpressions` requirement excludes from the webhook:
    /// the negation of `optIn.namespaceSelector`.
    pub namespace_requirement: Option<Value>,
    /// Requests of these requesters (`exemptRequesters`).
    pub requesters: Vec<Requester>,
    /// Requests of these operations (`exemptOperations`).
    pub operations: Vec<Operation>,
    /// The cluster's own critical path ([`CRITICAL_PATH`]).
    pub critical_path: bool,
}

/// `exemptCriticalPath: true`: what keeps a cluster running while a webhook that intercepts
/// it is down. DELETE; anything in kube-system; Node and Lease writes by kubelets
/// (`group:system:nodes`); bindings, pod status and Events by the scheduler; and, by
/// kube-system ServiceAccounts or a controller manager without per-controller credentials,
/// writes to leases, endpoints, endpointslices, events, nodes (and nodes/status) and
/// serviceaccounts/token. It never lets a pod CREATE through outside kube-system. Total: every
/// field that may be absent is guarded by `has()` (an erroring condition fails closed), and
/// no optional syntax, which 1.28 rejects.
pub const CRITICAL_PATH: &str = "request.operation == 'DELETE' \
|| (has(request.namespace) && request.namespace == 'kube-system') \
|| (has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups \
&& ((request.resource.group == '' && request.resource.resource == 'nodes') \
|| (request.resource.group == 'coordination.k8s.io' && request.resource.resource == 'leases'))) \
|| (has(request.userInfo.username) && request.userInfo.username == 'system:kube-scheduler' \
&& ((request.resource.group == '' && request.resource.resource == 'pods' \
&& has(request.subResource) && request.subResource in ['binding', 'status']) \
|| request.resource.resource == 'events')) \
|| (has(request.userInfo.username) \
&& (request.userInfo.username.startsWith('system:serviceaccount:kube-system:') \
|| request.userInfo.username == 'system:kube-controller-manager') \
&& (request.resource.resource in ['leases', 'endpoints', 'endpointslices', 'events', 'nodes'] \
|| (request.resource.resource == 'serviceaccounts' && has(request.subResource) \
&& request.subResource == 'token')))";

/// How a bypass is made this time (`bypassVia: auto` resolves to one of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Append a `matchConditions` CEL expression.
    MatchConditions,
    /// Append `objectSelector` / `namespaceSelector` requirements.
    Selectors,
}

/// Where each added value sits in the entry.
const MATCH_CONDITIONS: &str = "matchConditions";
const OBJECT_SELECTOR: &str = "objectSelector";
const NAMESPACE_SELECTOR: &str = "namespaceSelector";
const MATCH_EXPRESSIONS: &str = "matchExpressions";

impl Added {
    /// What a bypass of a webhook adds to let `through` pass it.
    pub fn new(via: Via, through: &LetThrough) -> Added {
        let label = through.label.as_deref();
        let namespaces = through.namespaces.as_slice();
        let added = match via {
            Via::MatchConditions => Added {
                match_condition: Some(serde_json::json!({
                    "name": MATCH_CONDITION_NAME,
                    "expression": cel_expression(through),
                })),
                object_selector: None,
                namespace_selector: None,
                namespace_requirement: None,
            },
            Via::Selectors => Added {
                match_condition: None,
                object_selector: label.map(|label| {
                    serde_json::json!({
                        "key": label,
                        "operator": "DoesNotExist",
                    })
                }),
                namespace_selector: (!namespaces.is_empty()).then(|| {
                    serde_json::json!({
                        "key": NAMESPACE_NAME_LABEL,
                        "operator": "NotIn",
                        "values": namespaces,
                    })
                }),
                namespace_requirement: None,
            },
        };
        Added {
            namespace_requirement: through.namespace_requirement.clone(),
            ..added
        }
    }

    /// `entry` without what this bypass added (one occurrence of each value), as it was
    /// before the bypass: what the canary is judged against while the bypass is in place.
    pub fn removed_from(&self, entry: &Value) -> Value {
        let mut out = entry.clone();
        for (path, value) in self.parts() {
            let mut list = out.get_mut(path[0]);
            if !path[1].is_empty() {
                list = list.and_then(|v| v.get_mut(path[1]));
            }
            if let Some(list) = list.and_then(Value::as_array_mut)
                && let Some(at) = list.iter().position(|v| v == value)
            {
                list.remove(at);
            }
        }
        out
    }

    /// `(list path inside the entry, value)` for each added value.
    pub fn parts(&self) -> Vec<([&'static str; 2], &Value)> {
        let mut parts = Vec::new();
        if let Some(v) = &self.match_condition {
            parts.push(([MATCH_CONDITIONS, ""], v));
        }
        if let Some(v) = &self.object_selector {
            parts.push(([OBJECT_SELECTOR, MATCH_EXPRESSIONS], v));
        }
        if let Some(v) = &self.namespace_selector {
            parts.push(([NAMESPACE_SELECTOR, MATCH_EXPRESSIONS], v));
        }
        if let Some(v) = &self.namespace_requirement {
            parts.push(([NAMESPACE_SELECTOR, MATCH_EXPRESSIONS], v));
        }
        parts
    }

    /// Whether every added value is still in `entry`, unchanged.
    pub fn present_in(&self, entry: &Value) -> bool {
        self.parts()
            .iter()
            .all(|(path, value)| position_in(entry, *path, value).is_some())
    }

    /// Whether the bypass used `matchConditions`.
    pub fn via(&self) -> Via {
        if self.match_condition.is_some() {
            Via::MatchConditions
        } else {
            Via::Selectors
        }
    }
}

/// The list at `path` inside `entry` (`["matchConditions", ""]` or
/// `["objectSelector", "matchExpressions"]`).
pub(crate) fn list_at<'a>(entry: &'a Value, path: [&str; 2]) -> Option<&'a Vec<Value>> {
    let mut value = entry.get(path[0])?;
    if !path[1].is_empty() {
        value = value.get(path[1])?;
    }
    value.as_array()
}

/// Index of `value` in the list at `path`, compared as JSON.
pub(crate) fn position_in(entry: &Value, path: [&str; 2], value: &Value) -> Option<usize> {
    list_at(entry, path)?.iter().position(|v| v == value)
}

/// The CEL condition under which the webhook is still called: none of `through` applies (the
/// object does not carry the opt-in label, the request is not in one of its namespaces, nor of
/// an exempt requester or operation, nor on the critical path). Total, like [`CRITICAL_PATH`]:
/// absent fields are guarded with `has()`. Label keys, namespace and requester names are
/// validated (no quotes or backslashes), so single-quoted literals are safe.
pub fn cel_expression(through: &LetThrough) -> String {
    let quoted = |items: &mut dyn Iterator<Item = &str>| {
        items
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let username = |test: String| format!("(has(request.userInfo.username) && {test})");
    let mut terms = Vec::new();
    if let Some(label) = &through.label {
        terms.push(format!(
            "(object != null && has(object.metadata) && has(object.metadata.labels) && \
             '{label}' in object.metadata.labels)"
        ));
    }
    if !through.namespaces.is_empty() {
        let list = quoted(&mut through.namespaces.iter().map(String::as_str));
        terms.push(format!(
            "(has(request.namespace) && request.namespace in [{list}])"
        ));
    }
    for requester in &through.requesters {
        terms.push(match requester {
            Requester::Group(g) => {
                format!("(has(request.userInfo.groups) && '{g}' in request.userInfo.groups)")
            }
            Requester::User(u) => username(format!("request.userInfo.username == '{u}'")),
            Requester::ServiceAccount {
                namespace,
                name: Some(name),
            } => username(format!(
                "request.userInfo.username == 'system:serviceaccount:{namespace}:{name}'"
            )),
            Requester::ServiceAccount {
                namespace,
                name: None,
            } => username(format!(
                "request.userInfo.username.startsWith('system:serviceaccount:{namespace}:')"
            )),
        });
    }
    if !through.operations.is_empty() {
        let list = quoted(&mut through.operations.iter().map(|o| o.as_str()));
        terms.push(format!("request.operation in [{list}]"));
    }
    if through.critical_path {
        terms.push(format!("({CRITICAL_PATH})"));
    }
    // A canary (an apiserver owner's dry run) always reaches the webhook.
    let canary = format!(
        "(object != null && has(object.metadata) && has(object.metadata.labels) && \
         '{}' in object.metadata.labels)",
        crate::config::CANARY_LABEL
    );
    match terms.as_slice() {
        // Nothing to let through here (only a namespace requirement does): always call it.
        [] => "true".to_owned(),
        [one] if one.starts_with('(') => format!("{canary} || !{one}"),
        _ => format!("{canary} || !({})", terms.join(" || ")),
    }
}

/// Who passes `listed` while it is bypassed: objects with the opt-in label (`optIn: any`),
/// objects in opted-in namespaces, listed or selected (`any`, `namespaces`), and always those
/// in its `exemptNamespaces`. None when that is nobody: then it is never bypassed.
pub fn let_through(listed: &WebhookConfig, opt_in: &OptIn) -> Option<LetThrough> {
    let opted = listed.opt_in != OptInMode::None;
    let label = (listed.opt_in == OptInMode::Any).then(|| opt_in.label.clone());
    let mut namespaces = if opted {
        opt_in.namespaces.clone()
    } else {
        Vec::new()
    };
    namespaces.extend(listed.exempt_namespaces.iter().cloned());
    namespaces.sort();
    namespaces.dedup();
    // The configuration is refused unless the selector is one negatable requirement.
    let namespace_requirement = opt_in
        .selector
        .as_ref()
        .filter(|_| opted)
        .and_then(|s| crate::config::webhook_namespace_requirement(s).ok())
        .map(negation);
    // Like exemptNamespaces, these break deadlocks: every optIn mode keeps them.
    let through = LetThrough {
        label,
        namespaces,
        namespace_requirement,
        requesters: listed.exempt_requesters.clone(),
        operations: listed.exempt_operations.clone(),
        critical_path: listed.exempt_critical_path,
    };
    (through.label.is_some()
        || !through.namespaces.is_empty()
        || through.namespace_requirement.is_some()
        || !through.requesters.is_empty()
        || !through.operations.is_empty()
        || through.critical_path)
        .then_some(through)
}

/// The `matchExpressions` requirement that excludes from a webhook the namespaces `selected`
/// matches: its negation (`=`/`in` → `NotIn`, `!=`/`notin` → `In`, `key` → `DoesNotExist`,
/// `!key` → `Exists`).
pub fn negation(selected: &Requirement) -> Value {
    let (operator, values) = match selected.op {
        SelectorOp::Equals | SelectorOp::In => ("NotIn", true),
        SelectorOp::NotEquals | SelectorOp::NotIn => ("In", true),
        SelectorOp::Exists => ("DoesNotExist", false),
        // GreaterThan and LessThan are refused by the configuration.
        SelectorOp::DoesNotExist | SelectorOp::GreaterThan | SelectorOp::LessThan => {
            ("Exists", false)
        }
    };
    let mut requirement = serde_json::json!({ "key": selected.key, "operator": operator });
    if values {
        requirement["values"] = serde_json::json!(selected.values);
    }
    requirement
}

/// What the loop knows about one listed webhook at `now`.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    /// The webhook as listed in initguard's configuration.
    pub config: &'a WebhookConfig,
    /// The configuration and the entry's index in it; None when either is absent.
    pub entry: Option<(&'a Configuration, usize)>,
    /// This entry's record, if the guard bypassed it.
    pub record: Option<&'a Bypass>,
    /// A tombstone of a restore on demand stands in for the record: no new bypass until the
    /// owner is seen up.
    pub tombstone: bool,
    /// The configuration carries [`NO_BYPASS_ANNOTATION`]: no new bypass.
    pub paused: bool,
    /// The owner's state as last observed.
    pub owner: OwnerState,
    /// Bypasses undone by another writer within the webhook's `flapping.window` before `now`.
    pub undone_recently: usize,
    /// Already found flapping while the owner stayed down: it stays so (no re-apply) until the
    /// owner is seen up, however old the undos become.
    pub flapping: bool,
    /// Whether a bypass would let anything through ([`let_through`]); never bypassed if not.
    pub lets_through: bool,
    /// The instant this describes.
    pub now: SystemTime,
}

/// What to do about one listed webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing now; look again at this instant (or on the next change).
    Wait(Option<SystemTime>),
    /// Keep opted-in objects away from the entry.
    Bypass,
    /// The owner is back: remove exactly what the record says was added.
    Restore,
    /// The record's values are no longer in the entry while the owner is up: someone else
    /// changed it. Leave the entry alone, drop the record, alert.
    Conflict,
    /// A bypass was undone by someone else `flapping.undos` times within `flapping.window`:
    /// stop re-applying it, alert.
    Flapping,
    /// The owner is up after a restore on demand: drop the tombstone, so the next outage is
    /// handled again.
    ForgetTombstone,
}

/// The decision rule for one listed webhook.
///
/// * Bypass only an entry that exists, fails closed (`failurePolicy: Fail`) and whose owner has
///   been down for at least `ownerDownGrace`; an unknown owner never counts as down.
/// * A bypass undone by another writer while the owner is still down is re-applied, unless it
///   was undone `flapping.undos` times within `flapping.window` (the webhook's config); once
///   flapping, never again while the owner stays down.
/// * Restore once the owner has been up for at least `restoreGrace`, and only while every
///   added value is still in the entry; otherwise it is a conflict.
/// * After a restore on demand (a tombstone), no bypass until the owner has been seen up (the
///   tombstone is then dropped) and is down again; a paused configuration gets no new bypass.
pub fn decide(s: &Situation<'_>) -> Action {
    let Some((configuration, index)) = s.entry else {
        // Nothing to bypass or restore; a record on a removed entry goes with the entry.
        return Action::Wait(None);
    };
    let entry = &configuration.entries[index];
    match (s.record, s.owner) {
        (Some(record), OwnerState::Up { since }) => {
            let at = since.checked_add(s.config.restore_grace);
            if at.is_none_or(|at| s.now < at) {
                return Action::Wait(at);
            }
            if record.added.present_in(entry) {
                Action::Restore
            } else {
                Action::Conflict
            }
        }
        (None, OwnerState::Up { .. }) if s.tombstone => Action::ForgetTombstone,
        (record, OwnerState::Down { since }) => {
            if record.is_some_and(|r| r.added.present_in(entry)) {
                return Action::Wait(None);
            }
            if s.tombstone || s.paused {
                return Action::Wait(None);
            }
            if configuration.failure_policy(index) != FailurePolicy::Fail || !s.lets_through {
                return Action::Wait(None);
            }
            let at = since.checked_add(s.config.owner_down_grace);
            if at.is_none_or(|at| s.now < at) {
                return Action::Wait(at);
            }
            if record.is_some() && (s.flapping || s.undone_recently >= s.config.flapping.undos) {
                return Action::Flapping;
            }
            Action::Bypass
        }
        (_, OwnerState::Unknown) | (None, OwnerState::Up { .. }) => Action::Wait(None),
    }
}

/// Whether a canary's dry-run create reaches an entry (README "Admission webhooks", the
/// `apiserver` owner). A canary the entry does not match is admitted without calling the
/// webhook, which would read as "up": the guard treats such an owner as unknown.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CanaryReach {
    /// Why the canary does not reach the entry.
    pub problems: Vec<String>,
    /// What could not be checked.
    pub warnings: Vec<String>,
}

/// [`CanaryReach`] of `canary` on `entry`: its rules must include CREATE on the canary's
/// resource in the core group v1, for namespaced objects; its `objectSelector` must select the
/// canary's labels and its `namespaceSelector` the canary namespace's labels (`None`: not
/// read, a warning). The entry's own `matchConditions` cannot be evaluated here: a warning.
pub fn canary_reach(
    entry: &Value,
    canary: &Canary,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> CanaryReach {
    let mut reach = CanaryReach::default();
    let resource = canary.resource.as_str();
    if !intercepts_creates(entry, resource) {
        reach.problems.push(format!(
            "its rules do not include CREATE on {resource} (core group, v1, namespaced), so the \
             canary never calls it"
        ));
    }
    let mut labels = canary.labels.clone();
    labels.insert(CANARY_LABEL.to_owned(), "dry-run".to_owned());
    match selects(&entry["objectSelector"], &labels) {
        Ok(true) => {}
        Ok(false) => reach.problems.push(format!(
            "its objectSelector does not select the canary's labels {labels:?} (set \
             owner.apiserver.labels)"
        )),
        Err(e) => reach
            .problems
            .push(format!("its objectSelector cannot be read: {e}")),
    }
    match namespace_labels.map(|l| selects(&entry["namespaceSelector"], l)) {
        None => reach.warnings.push(format!(
            "the labels of namespace {} could not be read: its namespaceSelector is not checked",
            canary.namespace
        )),
        Some(Ok(true)) => {}
        Some(Ok(false)) => reach.problems.push(format!(
            "its namespaceSelector does not select the canary namespace {}",
            canary.namespace
        )),
        Some(Err(e)) => reach
            .problems
            .push(format!("its namespaceSelector cannot be read: {e}")),
    }
    let own = own_match_conditions(entry);
    if own > 0 {
        reach.warnings.push(format!(
            "its own matchConditions ({own}) cannot be checked against the canary"
        ));
    }
    reach
}

/// Whether `entry`'s rules include CREATE of `resource` (core group, v1, namespaced).
pub(crate) fn intercepts_creates(entry: &Value, resource: &str) -> bool {
    let has = |rule: &Value, field: &str, wanted: &[&str]| {
        rule[field].as_array().is_some_and(|l| {
            l.iter()
                .any(|v| v.as_str().is_some_and(|v| wanted.contains(&v)))
        })
    };
    let rules = entry["rules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    rules.iter().any(|rule| {
        has(rule, "operations", &["CREATE", "*"])
            && has(rule, "apiGroups", &["", "*"])
            && has(rule, "apiVersions", &["v1", "*"])
            && has(rule, "resources", &[resource, "*", "*/*"])
            && rule["scope"]
                .as_str()
                .is_none_or(|s| s == "*" || s == "Namespaced")
    })
}

/// How many `matchConditions` of `entry` are its own (not the bypass's).
pub fn own_match_conditions(entry: &Value) -> usize {
    list_at(entry, ["matchConditions", ""]).map_or(0, |l| {
        l.iter()
            .filter(|c| c["name"].as_str() != Some(MATCH_CONDITION_NAME))
            .count()
    })
}

/// Whether a `LabelSelector` (JSON; absent or null selects everything) selects `labels`.
pub fn selects(
    selector: &Value,
    labels: &BTreeMap<String, String>,
) -> Result<bool, InvalidSelector> {
    use kube::core::SelectorExt;
    if selector.is_null() {
        return Ok(true);
    }
    let parsed: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
        serde_json::from_value(selector.clone())?;
    let selector = kube::core::Selector::try_from(parsed)?;
    Ok(selector.matches(labels))
}

/// A webhook's selector that the API server would not have stored; callers decide whether
/// such an entry counts as selecting.
#[derive(Debug, thiserror::Error)]
pub enum InvalidSelector {
    /// Not a `LabelSelector` at all.
    #[error("not a LabelSelector: {0}")]
    Shape(#[from] serde_json::Error),
    /// A `matchExpressions` entry with an unknown operator or values it does not take.
    #[error("{0}")]
    Expression(#[from] kube::core::ParseExpressionError),
}

/// One listed webhook in `/status` and `initguard status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookStatus {
    /// `KIND/CONFIGURATION/WEBHOOK`.
    pub webhook: String,
    /// `guarded`, `bypassed`, `not found` (no such configuration or entry), `fails open`
    /// (`failurePolicy: Ignore`: nothing to bypass) or `record unreadable`.
    pub state: &'static str,
    /// The owner's state (`"state": "down", "since": …`).
    pub owner: OwnerState,
    /// When the bypass in force was made (RFC 3339), from the record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bypassed_since: Option<String>,
    /// What the bypass in force added to the entry, from the record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added: Option<Added>,
    /// Why an `apiserver` owner's canary does not reach the entry ([`canary_reach`]): the
    /// owner then counts as unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary_problem: Option<String>,
}

/// The status of one listed webhook from what was read of its configuration.
pub fn status(
    config: &WebhookConfig,
    configuration: Option<&Configuration>,
    owner: OwnerState,
) -> WebhookStatus {
    let mut status = WebhookStatus {
        webhook: config.id.to_string(),
        state: "not found",
        owner,
        bypassed_since: None,
        added: None,
        canary_problem: None,
    };
    let Some((c, index)) = configuration.and_then(|c| Some((c, c.index_of(&config.id.webhook)?)))
    else {
        return status;
    };
    let Ok(records) = c.records() else {
        status.state = "record unreadable";
        return status;
    };
    match records.get(&config.id.webhook).and_then(Record::bypass) {
        Some(b) if b.added.present_in(&c.entries[index]) => {
            status.state = "bypassed";
            status.bypassed_since = Some(b.since.clone());
            status.added = Some(b.added.clone());
        }
        _ if c.failure_policy(index) == FailurePolicy::Ignore => status.state = "fails open",
        _ => status.state = "guarded",
    }
    status
}

#[cfg(test)]
mod tests;
