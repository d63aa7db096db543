//! The validated configuration: every key resolved, every default filled in. Plain data; what
//! builds it is `resolve`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kube_common::Mechanism;
use kube_common::selector::LabelSelector;
use serde::{Deserialize, Serialize};

use super::error::InvalidValue;

/// The validated configuration with every default filled in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// `mechanism`: where pending initializers live on a pod (default `schedulingGates`).
    pub mechanism: Mechanism,
    /// `optIn`: which pods may be modified.
    pub opt_in: OptIn,
    /// `defaults`: values for initializers that do not set their own.
    pub defaults: Defaults,
    /// Listed initializers; each has its deadline resolved (own or default).
    pub initializers: Vec<InitializerConfig>,
    /// `unlistedInitializers`: what to do with initializers not listed (default `ignore`).
    pub unlisted_initializers: UnlistedPolicy,
    /// `pileup`: when one controller's waiting pods make a pile, and what to do about it.
    pub pileup: Pileup,
    /// `leaderElection`: the Lease whose holder alone modifies pods.
    pub leader_election: LeaderElection,
    /// `listen`: address of `/metrics`, `/healthz`, `/readyz` and `/status` (plain HTTP).
    pub listen: SocketAddr,
    /// The HTTPS listener, where `/metrics` and `/status` need a token that TokenReview
    /// authenticates and SubjectAccessReview allows. When set, `listen` serves only the
    /// health endpoints.
    pub secure_listen: Option<SocketAddr>,
    /// The HTTPS listener's certificate.
    pub tls: ServingCert,
    /// `dryRun`: log and count every decision without writing to the API server.
    pub dry_run: bool,
    /// Whether each bypass patch is recorded with a Warning Event on the pod.
    pub events: EventsMode,
    /// Whether a pod that has waited long gets one Normal `InitializerWaiting` Event per
    /// initializer saying why and what will happen (`waitingEvents`; off with `events: off`).
    pub waiting_events: bool,
    /// Most bypass patches in flight at once (default 16).
    pub max_in_flight: usize,
    /// Listed admission webhooks (README "Admission webhooks").
    pub webhooks: Vec<WebhookConfig>,
    /// `initContainers`: the node stage's listed init steps (README "The node stage").
    pub init_containers: Vec<InitContainerConfig>,
    /// `recreate`: how many stuck pods the node stage may recreate.
    pub recreate: RecreateBudget,
    /// `evictions`: where the guard may evict.
    pub evictions: Evictions,
}

/// One listed init container: a step of the node stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitContainerConfig {
    /// `name`: the init container's name in the pod spec (unique in the list).
    pub name: String,
    /// `owner`: the agent the step waits on; None: no owner (deadline and exit codes only).
    pub owner: Option<StepOwner>,
    /// `deadline`: report (or recreate) a pod this long after it was bound; None: never by
    /// time (`defaults.deadline` does not apply: an image still pulling is not stuck).
    #[serde(with = "humantime_serde")]
    pub deadline: Option<Duration>,
    /// `failedExitCodes`: exit codes of the step that mean "failed for good" (sorted, each
    /// once); empty: no exit code triggers.
    pub failed_exit_codes: Vec<i32>,
    /// `action`: report only (default), or recreate opted-in pods.
    pub action: StepAction,
    /// `repairAfter`: how long the owner on the pod's node must have been up before a recreate.
    #[serde(with = "humantime_serde")]
    pub repair_after: Duration,
    /// `optIn`: which pods may be recreated for this step.
    pub opt_in: OptInMode,
}

/// Who a node-stage step waits on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StepOwner {
    /// `daemonset: NS/NAME`: up on node N while a Ready pod controlled by that DaemonSet runs
    /// there and is not being deleted.
    #[serde(rename = "daemonset")]
    DaemonSet(ObjectRef),
    /// Any initializer owner kind, judged cluster-wide as for initializers.
    #[serde(untagged)]
    Cluster(OwnerSpec),
}

impl StepOwner {
    /// Value of the `owner_kind` metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            StepOwner::DaemonSet(_) => "daemonset",
            StepOwner::Cluster(spec) => spec.kind(),
        }
    }
}

/// What a node-stage trigger does.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum StepAction {
    /// Metrics, an Event, `why` and `/status`; nothing is written to the pod.
    #[default]
    Report,
    /// Recreate opted-in pods through the Eviction API once every condition holds.
    Recreate,
}

impl StepAction {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            StepAction::Report => "report",
            StepAction::Recreate => "recreate",
        }
    }
}

/// `recreate`: the node stage's budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecreateBudget {
    /// `maxPerHour`: most recreations per top-level controller in any hour (default 10).
    pub max_per_hour: u32,
}

/// `evictions`: where the guard may evict pods.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Evictions {
    /// `namespaces`: the only namespaces evictions may happen in; empty: every namespace but
    /// `kube-system`.
    pub namespaces: Vec<String>,
}

impl Evictions {
    /// Whether the guard may evict a pod in `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        if self.namespaces.is_empty() {
            namespace != "kube-system"
        } else {
            self.namespaces.iter().any(|n| n == namespace)
        }
    }
}

/// One listed admission webhook.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookConfig {
    /// `KIND/CONFIGURATION/WEBHOOK`.
    #[serde(rename = "name")]
    pub id: WebhookId,
    /// None: the ready endpoints of the webhook's `clientConfig.service`.
    pub owner: Option<OwnerSpec>,
    /// Resolved: own value or `defaults.ownerDownGrace`.
    #[serde(with = "humantime_serde")]
    pub owner_down_grace: Duration,
    /// How long the owner must be up again before the bypass is undone.
    #[serde(with = "humantime_serde")]
    pub restore_grace: Duration,
    /// Namespaces no longer sent to the webhook while it is bypassed (its own pods).
    pub exempt_namespaces: Vec<String>,
    /// `bypassVia`: how a bypass keeps opted-in objects away from the webhook.
    pub bypass_via: BypassVia,
    /// Which objects may opt in to pass this webhook while it is bypassed
    /// (`exemptNamespaces` always do).
    pub opt_in: OptInMode,
    /// Requesters let through while it is bypassed, under every `optIn` mode.
    pub exempt_requesters: Vec<Requester>,
    /// Operations let through while it is bypassed.
    pub exempt_operations: Vec<Operation>,
    /// The cluster's own critical path let through while it is bypassed
    /// (`webhook::CRITICAL_PATH`).
    pub exempt_critical_path: bool,
    /// Resolved: `defaults.probeInterval` (used by http owners).
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
    /// What happens to pods admitted while a mutating webhook was bypassed, once restored.
    pub after_restore: AfterRestore,
    /// `afterRestore: evict`: how long to wait for a replacement to be Ready (and to retry an
    /// eviction a PodDisruptionBudget refuses) before going on.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    /// `afterRestore: evict`: also evict pods of controllers with fewer than 2 ready replicas.
    pub evict_singletons: bool,
    /// `afterRestore: evict`: evictions per controller within any hour.
    pub max_evictions_per_hour: u32,
    /// When a bypass that others keep undoing counts as flapping.
    pub flapping: Flapping,
}

/// `flapping`: a bypass undone by another writer `undos` times within `window` is flapping:
/// the guard stops re-applying it and alerts (a webhook manager reconciling its configuration
/// would otherwise fight it forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Flapping {
    /// Undos by others within `window` that make the bypass flapping.
    pub undos: usize,
    /// How far back undos count.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

/// `afterRestore` of a mutating webhook.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AfterRestore {
    /// Nothing.
    #[default]
    Ignore,
    /// Annotate the pods admitted without the webhook and record a Warning Event.
    Report,
    /// Report, then evict them one at a time per controller, where that is safe.
    Evict,
}

/// Which configuration object a webhook entry lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum WebhookKind {
    /// A `ValidatingWebhookConfiguration`.
    Validating,
    /// A `MutatingWebhookConfiguration`.
    Mutating,
}

impl WebhookKind {
    /// `validating` or `mutating`, as in the webhook's name.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookKind::Validating => "validating",
            WebhookKind::Mutating => "mutating",
        }
    }

    /// The API kind of the configuration object.
    pub fn object_kind(self) -> &'static str {
        match self {
            WebhookKind::Validating => "ValidatingWebhookConfiguration",
            WebhookKind::Mutating => "MutatingWebhookConfiguration",
        }
    }

    /// The resource (plural) of the configuration object.
    pub fn resource(self) -> &'static str {
        match self {
            WebhookKind::Validating => "validatingwebhookconfigurations",
            WebhookKind::Mutating => "mutatingwebhookconfigurations",
        }
    }
}

/// `KIND/CONFIGURATION/WEBHOOK`: one entry of one webhook configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WebhookId {
    /// Which kind of configuration object holds the entry.
    pub kind: WebhookKind,
    /// The configuration object's name.
    pub configuration: String,
    /// The entry's `name` within `webhooks`.
    pub webhook: String,
}

impl fmt::Display for WebhookId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.kind.as_str(),
            self.configuration,
            self.webhook
        )
    }
}

impl Serialize for WebhookId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The label every canary carries: a bypass never lets an object with it through, so the
/// canary always reaches the webhook.
pub const CANARY_LABEL: &str = "initguard.io/canary";

/// `owner: { apiserver: { namespace, resource, labels, interval } }` of a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    /// The entry whose calls the verdict reads (`failed calling webhook "NAME"`).
    #[serde(skip)]
    pub webhook: String,
    /// `namespace`: where the dry-run canary is created.
    pub namespace: String,
    /// `resource`: what the canary creates (default `pods`).
    pub resource: CanaryResource,
    /// Besides [`CANARY_LABEL`], so that the entry's objectSelector selects the canary.
    pub labels: BTreeMap<String, String>,
    /// `interval`: how often the canary is sent (default 10s, at least 1s).
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

/// What a canary creates (in dry run only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CanaryResource {
    /// A minimal pod, which meets the `restricted` Pod Security Standard.
    Pods,
    /// A minimal ConfigMap.
    Configmaps,
}

impl CanaryResource {
    /// The resource's plural name.
    pub fn as_str(self) -> &'static str {
        match self {
            CanaryResource::Pods => "pods",
            CanaryResource::Configmaps => "configmaps",
        }
    }
}

/// A requester a bypassed webhook lets through (`exemptRequesters`): `group:G`, `user:U`,
/// `serviceaccount:NS:NAME` or `serviceaccount:NS:*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Requester {
    /// `group:G`: requests by members of group G.
    Group(String),
    /// `user:U`: requests by user U.
    User(String),
    /// `name` None: every ServiceAccount of the namespace.
    ServiceAccount {
        /// The ServiceAccount's namespace.
        namespace: String,
        /// The ServiceAccount's name; None for `*`.
        name: Option<String>,
    },
}

impl Requester {
    /// Parse `group:G`, `user:U`, `serviceaccount:NS:NAME` or `serviceaccount:NS:*`. Names go
    /// into single-quoted CEL literals, so quotes, backslashes and control characters are
    /// refused.
    pub fn parse(text: &str) -> Result<Requester, InvalidValue> {
        let expected = "expected group:GROUP, user:USER, serviceaccount:NAMESPACE:NAME or \
                        serviceaccount:NAMESPACE:*";
        let plain = |what: &str, name: &str| -> Result<String, InvalidValue> {
            if name.is_empty() {
                Err(InvalidValue(format!(
                    "{expected}, got {text:?}: the {what} is empty"
                )))
            } else if let Some(c) = name
                .chars()
                .find(|c| matches!(c, '\'' | '\\') || c.is_control())
            {
                Err(InvalidValue(format!(
                    "{expected}, got {text:?}: the {what} holds {c:?} (quotes, backslashes and \
                     control characters cannot appear in the generated CEL)"
                )))
            } else {
                Ok(name.to_owned())
            }
        };
        match text.split_once(':') {
            Some(("group", group)) => Ok(Requester::Group(plain("group", group)?)),
            Some(("user", user)) => Ok(Requester::User(plain("user", user)?)),
            Some(("serviceaccount", rest)) => {
                let Some((namespace, name)) = rest.split_once(':') else {
                    return Err(InvalidValue(format!(
                        "{expected}, got {text:?}: no NAME (or *) after the namespace"
                    )));
                };
                kube_common::names::validate_dns1123_label(namespace).map_err(|e| {
                    InvalidValue(format!("{expected}, got {text:?}: namespace: {e}"))
                })?;
                let name = match name {
                    "*" => None,
                    name => {
                        kube_common::names::validate_dns1123_subdomain(name).map_err(|e| {
                            InvalidValue(format!("{expected}, got {text:?}: name: {e}"))
                        })?;
                        Some(name.to_owned())
                    }
                };
                Ok(Requester::ServiceAccount {
                    namespace: namespace.to_owned(),
                    name,
                })
            }
            _ => Err(InvalidValue(format!("{expected}, got {text:?}"))),
        }
    }
}

/// As written in the config.
impl fmt::Display for Requester {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requester::Group(g) => write!(f, "group:{g}"),
            Requester::User(u) => write!(f, "user:{u}"),
            Requester::ServiceAccount { namespace, name } => {
                write!(
                    f,
                    "serviceaccount:{namespace}:{}",
                    name.as_deref().unwrap_or("*")
                )
            }
        }
    }
}

impl Serialize for Requester {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An admission operation (`exemptOperations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// Creating an object.
    Create,
    /// Updating an object.
    Update,
    /// Deleting an object or a collection.
    Delete,
    /// Connecting to a subresource (`exec`, `attach`, `portforward`, `proxy`).
    Connect,
}

impl Operation {
    /// As the API server names it in `request.operation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// How a bypass keeps opted-in objects away from a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BypassVia {
    /// A `matchConditions` CEL expression where the server keeps it, else selectors.
    Auto,
    /// `objectSelector` / `namespaceSelector` requirements.
    Selectors,
}

/// The certificate of the HTTPS listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ServingCert {
    /// Generated in memory at start-up (scrapers skip verification or pin nothing).
    SelfSigned,
    /// PEM files, read at start-up.
    Files {
        /// `tls.certFile`: the PEM certificate chain.
        cert_file: PathBuf,
        /// `tls.keyFile`: the PEM private key.
        key_file: PathBuf,
    },
}

/// Which pods may be modified.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OptIn {
    /// Presence of this label key opts a pod in; the value is ignored.
    pub label: String,
    /// Every pod in these namespaces is opted in.
    pub namespaces: Vec<String>,
    /// Every pod in a namespace whose labels match is opted in (as written; empty: off).
    pub namespace_selector: String,
    /// `namespace_selector` parsed; None when it is empty.
    #[serde(skip)]
    pub selector: Option<LabelSelector>,
}

/// Defaults for initializers that do not set their own values.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Defaults {
    /// `defaults.deadline`: bypass after a pod has waited this long; 0s bypasses at once.
    #[serde(with = "humantime_serde")]
    pub deadline: Duration,
    /// `defaults.ownerDownGrace`: bypass once the owner has been down this long without a break.
    #[serde(with = "humantime_serde")]
    pub owner_down_grace: Duration,
    /// `defaults.probeInterval`: how often http owners are probed.
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
    /// `defaults.unlistedAlertAfter`: a pod waiting this long on an initializer no entry lists
    /// alerts (`InitguardStuckInitialization`, through `initguard_unlisted_alert_after_seconds`;
    /// default 1h).
    #[serde(with = "humantime_serde")]
    pub unlisted_alert_after: Duration,
}

/// One listed initializer (legacy initializer or scheduling gate name).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializerConfig {
    /// `name`: the legacy initializer or scheduling gate name (unique in the list).
    pub name: String,
    /// Resolved: the initializer's own deadline or `defaults.deadline`.
    #[serde(with = "humantime_serde")]
    pub deadline: Duration,
    /// Resolved: own value or `defaults.ownerDownGrace`.
    #[serde(with = "humantime_serde")]
    pub owner_down_grace: Duration,
    /// Resolved: own value or `defaults.probeInterval` (used by http owners).
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
    /// None: deadline only.
    pub owner: Option<OwnerSpec>,
    /// Which pods may opt in to bypasses of this initializer.
    pub opt_in: OptInMode,
    /// What may trigger a bypass of this initializer (sorted, at least one).
    pub bypass_on: Vec<Trigger>,
}

/// Who may opt an object in, per initializer or webhook (README "Trust").
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum OptInMode {
    /// The object's own opt-in label, or an opted-in namespace.
    #[default]
    Any,
    /// Only an opted-in namespace: the object's own label is ignored.
    Namespaces,
    /// Never bypassed.
    None,
}

impl OptInMode {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            OptInMode::Any => "any",
            OptInMode::Namespaces => "namespaces",
            OptInMode::None => "none",
        }
    }
}

/// What may trigger a bypass: the reasons of the decision rule.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The pod has waited the initializer's `deadline`.
    Deadline,
    /// The initializer's owner has been down for `ownerDownGrace`.
    OwnerDown,
    /// The pod is part of a pile and `pileup.action` is `bypass`.
    Pileup,
}

impl Trigger {
    /// Every trigger: the default `bypassOn`.
    pub const ALL: [Trigger; 3] = [Trigger::Deadline, Trigger::OwnerDown, Trigger::Pileup];

    /// As written in the config (and as the bypass reason).
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Deadline => "deadline",
            Trigger::OwnerDown => "owner_down",
            Trigger::Pileup => "pileup",
        }
    }
}

/// How to tell whether an initializer's controller is alive.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum OwnerSpec {
    /// Up while `status.availableReplicas >= 1`.
    Deployment(ObjectRef),
    /// Up while `renewTime + leaseDurationSeconds` is in the future.
    Lease(ObjectRef),
    /// Up while one of the Service's EndpointSlices (its core/v1 Endpoints on servers before
    /// 1.21) lists a ready endpoint.
    Service(ObjectRef),
    /// A webhook's default owner, its `clientConfig.service`: as `Service`, and down when the
    /// Service is read and not found (the API server then fails every call to the webhook, as
    /// after an uninstall that left the configuration behind). Never written in a config.
    #[serde(rename = "service")]
    WebhookService(ObjectRef),
    /// Up while at least one matching pod is Ready.
    Pods {
        /// `namespace`: where the pods run.
        namespace: String,
        /// `selector`: a label selector in Kubernetes syntax (`app=quota,tier in (controller)`).
        selector: String,
    },
    /// A canary for a webhook: a server-side dry-run create through the API server every
    /// `interval`, judged by how the webhook's call went.
    Apiserver(Canary),
    /// Up while GET answers 2xx within 1 s. For https, the server certificate is verified
    /// against `ca_file` when given (else the platform's roots), and `cert_file`/`key_file`
    /// (both or neither) are presented as the client certificate.
    Http {
        /// The URL probed with GET (`http` or `https`).
        url: String,
        /// PEM CA bundle (`caFile`).
        #[serde(rename = "caFile", skip_serializing_if = "Option::is_none")]
        ca_file: Option<PathBuf>,
        /// PEM client certificate chain (`certFile`).
        #[serde(rename = "certFile", skip_serializing_if = "Option::is_none")]
        cert_file: Option<PathBuf>,
        /// PEM private key of the client certificate (`keyFile`).
        #[serde(rename = "keyFile", skip_serializing_if = "Option::is_none")]
        key_file: Option<PathBuf>,
    },
}

impl OwnerSpec {
    /// Value of the `owner_kind` metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            OwnerSpec::Deployment(_) => "deployment",
            OwnerSpec::Lease(_) => "lease",
            OwnerSpec::Service(_) | OwnerSpec::WebhookService(_) => "service",
            OwnerSpec::Pods { .. } => "pods",
            OwnerSpec::Http { .. } => "http",
            OwnerSpec::Apiserver(_) => "apiserver",
        }
    }
}

/// `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ObjectRef {
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

/// Events about bypassed pods (`events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EventsMode {
    /// One Warning Event per bypass patch, naming every initializer it removed (the default).
    PerPatch,
    /// None: the `initguard.io/bypassed` record, the log and the metrics remain.
    Off,
}

/// What to do with initializers not listed in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum UnlistedPolicy {
    /// Never bypass them (they still appear in metrics).
    Ignore,
    /// Bypass them after `defaults.deadline`.
    Deadline,
}

/// `pileup`: when one controller's pods waiting on one initializer make a pile.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pileup {
    /// `pileup.threshold`: how many pods of one controller make a pile (default 3).
    pub threshold: u32,
    /// `pileup.action`: what to do about a pile (default `alert`).
    pub action: PileupAction,
    /// A pod counts toward a pile only once it has itself waited this long (README "What it guarantees": never early):
    /// a healthy owner's fresh batch is not a pile.
    #[serde(with = "humantime_serde")]
    pub min_wait: Duration,
}

/// `pileup.action`: what to do about a pile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PileupAction {
    /// Only report it (`initguard_pileups`).
    Alert,
    /// Also remove the initializer from the pile's pods that have each waited `minWait`.
    Bypass,
}

/// `leaderElection`: run several replicas; only the holder of the Lease modifies pods.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElection {
    /// `leaderElection.enabled`: elect a leader (default true); when false, every replica acts.
    pub enabled: bool,
    /// `leaderElection.namespace`: the Lease's namespace (default `kube-system`).
    pub namespace: String,
    /// `leaderElection.name`: the Lease's name (default `initguard`).
    pub name: String,
    /// `leaderElection.leaseDuration`: the Lease's duration, whole seconds (default 15s).
    #[serde(with = "humantime_serde")]
    pub lease_duration: Duration,
}

impl Config {
    /// The listed initializer with this name.
    pub fn initializer(&self, name: &str) -> Option<&InitializerConfig> {
        self.initializers.iter().find(|i| i.name == name)
    }

    /// Deadline for `name`, or None when the guard must never act on it
    /// (unlisted and `unlistedInitializers: ignore`).
    pub fn deadline_for(&self, name: &str) -> Option<Duration> {
        match self.initializer(name) {
            Some(i) => Some(i.deadline),
            None => match self.unlisted_initializers {
                UnlistedPolicy::Ignore => None,
                UnlistedPolicy::Deadline => Some(self.defaults.deadline),
            },
        }
    }

    /// The listed webhook with this id.
    pub fn webhook(&self, id: &WebhookId) -> Option<&WebhookConfig> {
        self.webhooks.iter().find(|w| &w.id == id)
    }

    /// Whether a pod with these labels in this namespace opted in by the global rule (its
    /// label or its namespace), before any initializer's own `optIn` mode. `selected`: whether
    /// the namespace's labels, as last observed, match `optIn.namespaceSelector`.
    pub fn is_opted_in(
        &self,
        namespace: &str,
        selected: bool,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        labels.contains_key(&self.opt_in.label) || self.namespace_opted_in(namespace, selected)
    }

    /// Whether every pod in `namespace` opted in: listed in `optIn.namespaces`, or `selected`
    /// by `optIn.namespaceSelector` (ignored when none is set).
    pub fn namespace_opted_in(&self, namespace: &str, selected: bool) -> bool {
        self.opt_in.namespaces.iter().any(|n| n == namespace)
            || (selected && self.opt_in.selector.is_some())
    }

    /// Whether `optIn.namespaceSelector` matches a namespace with these labels.
    pub fn selects_namespace(&self, labels: &BTreeMap<String, String>) -> bool {
        self.opt_in
            .selector
            .as_ref()
            .is_some_and(|s| s.matches(labels))
    }

    /// The `optIn` mode of `initializer` (`any` for an unlisted one).
    pub fn opt_in_mode(&self, initializer: &str) -> OptInMode {
        self.initializer(initializer)
            .map_or(OptInMode::Any, |i| i.opt_in)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `deployment kube-system/sidecar-injector`, `pods quota-system app=quota`, ...
impl fmt::Display for OwnerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnerSpec::Deployment(r)
            | OwnerSpec::Lease(r)
            | OwnerSpec::Service(r)
            | OwnerSpec::WebhookService(r) => {
                write!(f, "{} {r}", self.kind())
            }
            OwnerSpec::Pods {
                namespace,
                selector,
            } => write!(f, "pods {namespace} {selector}"),
            OwnerSpec::Apiserver(c) => write!(
                f,
                "apiserver dry-run {} in {} every {}",
                c.resource.as_str(),
                c.namespace,
                humantime::format_duration(c.interval)
            ),
            OwnerSpec::Http {
                url,
                ca_file,
                cert_file,
                ..
            } => {
                write!(f, "http {url}")?;
                if let Some(ca) = ca_file {
                    write!(f, " (caFile {})", ca.display())?;
                }
                if let Some(cert) = cert_file {
                    write!(f, " (certFile {})", cert.display())?;
                }
                Ok(())
            }
        }
    }
}
