//! The webhook guard's loop (README "Admission webhooks"): one watch per listed
//! configuration (by `metadata.name`, so RBAC can name it), the owners' states in, the pure
//! [`crate::webhook::decide`] in the middle, and fenced JSON Patches out. Only the leader writes;
//! every replica keeps the metrics from what it observes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use futures::StreamExt;
use json_patch::Patch as JsonPatch;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::bypass::rfc3339_seconds;
use crate::config::{BypassVia, Config, OwnerSpec, WebhookConfig, WebhookKind};
use crate::discovery::Discovery;
use crate::guard::fence::Fence;
use crate::guard::write::{self, Refusal, Subject};
use crate::metrics::Metrics;
use crate::owners::Owners;
use crate::policy::Reason;
use crate::supervise::{self, Failures};
use crate::webhook::patch::{bypass_patch, forget_patch, go_json, restore_patch};
use crate::webhook::{
    Action, Added, Bypass, Configuration, FailurePolicy, Record, Situation, Via, decide,
    let_through,
};

/// After a write that failed for another reason than a changed object, decide again this
/// much later.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// `failurePolicy` of an entry that omits it: `Fail` in admissionregistration.k8s.io/v1,
/// `Ignore` in v1beta1.
pub(crate) fn default_failure_policy(resource: &ApiResource) -> FailurePolicy {
    if resource.version == "v1" {
        FailurePolicy::Fail
    } else {
        FailurePolicy::Ignore
    }
}

/// A listed configuration: which kind, which name.
pub type Key = (WebhookKind, String);

/// What a watch is about: a listed configuration, or a canary's namespace.
#[derive(Clone)]
enum Watched {
    Configuration(Key),
    Namespace(String),
}

/// One update from a watch by name: the object, or None once it is gone.
struct Update {
    watched: Watched,
    object: Option<Value>,
}

/// Everything the loop needs.
pub struct WebhookGuard {
    pub client: kube::Client,
    /// Which webhook configuration group versions are served (shared with the whole guard).
    pub discovery: Discovery,
    pub config: Arc<Config>,
    pub owners: Owners,
    pub metrics: Arc<Metrics>,
    pub fence: Fence,
    pub identity: String,
    /// Where `/status` reads each webhook's state.
    pub shared: Arc<crate::guard::shared::Shared>,
    /// The API server's clock, for the window of an `afterRestore` sweep.
    pub clock: crate::client::ServerClock,
    /// Where the sweeps' panics are recorded.
    pub failures: Failures,
    /// Evictions per controller, for `maxEvictionsPerHour`.
    pub evictions: crate::guard::after_restore::EvictionLog,
    /// The Eviction group/version, shared with the node stage.
    pub eviction: crate::guard::evict::EvictionVersion,
    /// Held by the running `afterRestore` sweep.
    pub sweeps: Arc<tokio::sync::Mutex<()>>,
}

/// The labels of each canary namespace (None: not read, or not found).
pub type Namespaces = HashMap<String, Option<BTreeMap<String, String>>>;

/// What the loop remembers per listed webhook.
#[derive(Default)]
struct Memory {
    /// Instants at which another writer was seen to have undone this webhook's bypass.
    undone: Vec<Instant>,
    /// The configuration resourceVersion at which the last undo was counted.
    undo_counted_at: Option<String>,
    /// Set while flapping: the loop no longer re-applies the bypass.
    flapping: bool,
    /// Dry-run: a bypass decision was logged and counted for the current outage.
    dry_run_decided: bool,
    /// The server dropped a matchConditions bypass once: `auto` means selectors from now on.
    selectors_only: bool,
    /// The last reason logged why the canary does not reach the entry.
    unreached: Option<String>,
    /// A write failed for another reason than a changed object: none before this instant,
    /// whatever else wakes the loop meanwhile (an owner's update, another configuration).
    write_held_until: Option<SystemTime>,
}

/// What `/readyz` names while the webhook guard cannot read discovery.
const DISCOVERY_READINESS: &str = "webhook guard";

impl WebhookGuard {
    /// Watch every listed configuration and act until `cancel` fires. Watches are supervised
    /// tasks registered in `failures`.
    pub async fn run(self, cancel: CancellationToken) {
        let failures = self.failures.clone();
        if self.config.webhooks.is_empty() {
            return;
        }
        // Without discovery nothing can be watched: retry, and say so in /readyz meanwhile.
        let read = self.discovery.surface_until(&cancel, |e| {
            warn!(error = %e, "cannot read the served APIs; the webhook guard retries");
            self.shared.readiness.set(
                DISCOVERY_READINESS,
                Some(format!("cannot read the served APIs: {e}")),
            );
        });
        let Some(surface) = read.await.cloned() else {
            return;
        };
        self.shared.readiness.set(DISCOVERY_READINESS, None);
        let (tx, mut rx) = mpsc::channel::<Update>(64);
        let mut resources: HashMap<Key, (ApiResource, FailurePolicy)> = HashMap::new();
        let keys: HashSet<Key> = self
            .config
            .webhooks
            .iter()
            .map(|w| (w.id.kind, w.id.configuration.clone()))
            .collect();
        for key in keys {
            let Some(resource) =
                surface.webhook_configurations(key.0.object_kind(), key.0.resource())
            else {
                error!(configuration = %key.1, kind = key.0.object_kind(),
                    "the API server serves no admissionregistration.k8s.io v1 or v1beta1; \
                     this configuration is not guarded");
                continue;
            };
            let default_policy = default_failure_policy(&resource);
            resources.insert(key.clone(), (resource.clone(), default_policy));
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            supervise::spawn(
                &failures,
                "webhook configuration watch",
                watch_named(api, Watched::Configuration(key), tx.clone(), cancel.clone()),
            );
        }
        // Canary namespaces are watched too: a namespaceSelector is judged on current labels.
        let mut namespaces = Namespaces::new();
        for listed in &self.config.webhooks {
            if let Some(OwnerSpec::Apiserver(canary)) = &listed.owner
                && !namespaces.contains_key(&canary.namespace)
            {
                namespaces.insert(canary.namespace.clone(), None);
                let api: Api<DynamicObject> = Api::all_with(
                    self.client.clone(),
                    &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
                );
                supervise::spawn(
                    &failures,
                    "canary namespace watch",
                    watch_named(
                        api,
                        Watched::Namespace(canary.namespace.clone()),
                        tx.clone(),
                        cancel.clone(),
                    ),
                );
            }
        }
        drop(tx);

        let mut objects: HashMap<Key, Configuration> = HashMap::new();
        // Versions the guard wrote over itself, each ignored once when its watch event comes.
        let mut superseded: HashSet<(Key, String)> = HashSet::new();
        let mut memory: HashMap<String, Memory> = HashMap::new();
        let mut owner_changes = self.owners.subscribe();
        let mut leadership = self.fence.leadership();
        let mut wake: Option<SystemTime> = None;
        loop {
            let sleep = wake.map(|at| at.duration_since(SystemTime::now()).unwrap_or_default());
            tokio::select! {
                _ = cancel.cancelled() => return,
                update = rx.recv() => match update {
                    None => return,
                    Some(Update { watched: Watched::Namespace(name), object }) => {
                        let labels = object.map(|o| {
                            serde_json::from_value(o["metadata"]["labels"].clone())
                                .unwrap_or_default()
                        });
                        namespaces.insert(name, labels);
                    }
                    Some(Update { watched: Watched::Configuration(key), object }) => {
                        let Some((_, default_policy)) = resources.get(&key) else { continue };
                        match object {
                            None => { objects.remove(&key); }
                            Some(object) => match Configuration::decode(key.0, &object, *default_policy) {
                                Ok(c) if superseded.remove(&(key.clone(), c.resource_version.clone())) => {
                                    debug!(configuration = %key.1, version = %c.resource_version,
                                        "a version the guard already wrote over; ignoring it");
                                }
                                Ok(c) => { objects.insert(key, c); }
                                Err(e) => warn!(configuration = %key.1, error = %e,
                                    "cannot read the webhook configuration; ignoring this version"),
                            },
                        }
                    }
                },
                r = owner_changes.changed() => if r.is_err() { return },
                r = leadership.changed() => if r.is_err() { return },
                _ = async { match sleep { Some(d) => tokio::time::sleep(d).await, None => std::future::pending().await } } => {}
            }
            wake = None;
            for listed in &self.config.webhooks {
                let key = (listed.id.kind, listed.id.configuration.clone());
                let Some((resource, _)) = resources.get(&key) else {
                    continue;
                };
                let remembered = memory.entry(listed.id.to_string()).or_default();
                let next = self
                    .step(
                        listed,
                        resource,
                        objects.get(&key),
                        &namespaces,
                        remembered,
                        &cancel,
                    )
                    .await;
                superseded.extend(next.superseded.into_iter().map(|v| (key.clone(), v)));
                if let Some(refreshed) = next.refreshed {
                    objects.insert(key, refreshed);
                }
                wake = earliest(wake, next.wake);
            }
        }
    }

    /// Decide about one listed webhook and act on it.
    async fn step(
        &self,
        listed: &WebhookConfig,
        resource: &ApiResource,
        configuration: Option<&Configuration>,
        namespaces: &Namespaces,
        memory: &mut Memory,
        cancel: &CancellationToken,
    ) -> Step {
        let name = listed.id.to_string();
        let now = SystemTime::now();
        let entry = configuration.and_then(|c| Some((c, c.index_of(&listed.id.webhook)?)));
        let records = configuration.map(Configuration::records).transpose();
        let mut owner = self.owners.state(&name);
        let in_force = records
            .as_ref()
            .ok()
            .and_then(|r| r.as_ref()?.get(&listed.id.webhook)?.bypass());
        let unreached = self.canary_problem(listed, entry, in_force, namespaces, memory);
        if unreached.is_some() {
            owner = crate::policy::OwnerState::Unknown;
        }
        self.shared
            .webhooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                name.clone(),
                crate::webhook::WebhookStatus {
                    canary_problem: unreached,
                    ..crate::webhook::status(listed, configuration, owner)
                },
            );
        let records = match records {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                // Never write over a record that cannot be read: a person must fix it.
                warn!(webhook = %name, error = %e,
                    "the {} annotation is not valid JSON; leaving the webhook alone",
                    crate::webhook::RECORD_ANNOTATION);
                return Step::default();
            }
        };
        let kept = records.get(&listed.id.webhook);
        let record = kept.and_then(Record::bypass);
        let tombstone = kept.and_then(Record::tombstone).is_some();
        let bypassed = match (record, entry) {
            (Some(r), Some((c, i))) => r.added.present_in(&c.entries[i]),
            _ => false,
        };
        self.metrics
            .webhook_bypassed
            .with_label_values(&[&name])
            .set(i64::from(bypassed));
        if !matches!(owner, crate::policy::OwnerState::Down { .. }) {
            memory.dry_run_decided = false;
            if memory.flapping {
                memory.flapping = false;
                memory.undone.clear();
                self.metrics
                    .webhook_flapping
                    .with_label_values(&[&name])
                    .set(0);
            }
        }
        // An undo by someone else: our record is there, our values are not, the owner is down.
        if let (Some(_), Some((c, _)), false, crate::policy::OwnerState::Down { .. }) =
            (record, entry, bypassed, owner)
            && memory.undo_counted_at.as_deref() != Some(c.resource_version.as_str())
        {
            memory.undo_counted_at = Some(c.resource_version.clone());
            memory.undone.push(Instant::now());
            warn!(webhook = %name, "another writer undid the bypass");
        }
        memory
            .undone
            .retain(|at| at.elapsed() < listed.flapping.window);
        let passes = let_through(listed, &self.config.opt_in);
        let action = decide(&Situation {
            config: listed,
            entry,
            record,
            tombstone,
            paused: configuration.is_some_and(|c| c.paused),
            owner,
            undone_recently: memory.undone.len(),
            flapping: memory.flapping,
            lets_through: passes.is_some(),
            now,
        });
        let Some((configuration, index)) = entry else {
            return Step::default();
        };
        let writes = matches!(
            action,
            Action::Bypass | Action::Restore | Action::Conflict | Action::ForgetTombstone
        );
        if let Some(at) = memory.write_held_until.filter(|at| writes && now < *at) {
            return Step {
                wake: Some(at),
                ..Step::default()
            };
        }
        let step = match action {
            Action::Wait(at) => Step {
                wake: at,
                ..Step::default()
            },
            Action::Flapping => {
                if !memory.flapping {
                    memory.flapping = true;
                    self.metrics
                        .webhook_flapping
                        .with_label_values(&[&name])
                        .set(1);
                    error!(webhook = %name, undone = memory.undone.len(),
                        "the bypass keeps being undone by another writer; not re-applying it");
                    self.event(listed, resource, "WebhookBypassFlapping", "Flapping", cancel, format!(
                        "initguard stopped re-applying its bypass of webhook {}: another writer \
                         undid it {} times within {}", listed.id.webhook, memory.undone.len(),
                        humantime::format_duration(listed.flapping.window))).await;
                }
                Step::default()
            }
            Action::Bypass if self.config.dry_run => {
                if !memory.dry_run_decided {
                    memory.dry_run_decided = true;
                    self.metrics
                        .webhook_bypasses_total
                        .with_label_values(&[&name, Reason::OwnerDown.as_str()])
                        .inc();
                    info!(webhook = %name, owner = %self.owner_text(listed, configuration, index),
                        "dry-run: would bypass webhook for opted-in objects");
                }
                Step::default()
            }
            Action::Restore | Action::Conflict if self.config.dry_run => Step::default(),
            Action::Bypass => {
                let Some(through) = passes else {
                    return Step::default();
                };
                let full = crate::webhook::own_match_conditions(&configuration.entries[index])
                    >= crate::webhook::MAX_MATCH_CONDITIONS;
                let via = match listed.bypass_via {
                    BypassVia::Selectors => Via::Selectors,
                    BypassVia::Auto if memory.selectors_only => Via::Selectors,
                    // The API server refuses a 65th condition: selectors are the only way.
                    BypassVia::Auto if full => {
                        warn!(webhook = %name, "the entry has the most matchConditions a server \
                            accepts; bypassing through selectors");
                        Via::Selectors
                    }
                    BypassVia::Auto => Via::MatchConditions,
                };
                if via == Via::Selectors && Added::new(via, &through).parts().is_empty() {
                    // Only exempt requesters, operations or the critical path would pass,
                    // which selectors cannot say: a bypass would let nothing through.
                    error!(webhook = %name, "cannot bypass: the API server keeps no \
                        matchConditions, and selectors cannot let through what this webhook \
                        exempts (requesters, operations, the critical path)");
                    return Step::default();
                }
                let plan = Plan {
                    listed,
                    resource,
                    index,
                    bypass: Bypass {
                        since: rfc3339_seconds(SystemTime::now()),
                        reason: Reason::OwnerDown.as_str().to_owned(),
                        owner: self.owner_text(listed, configuration, index),
                        added: Added::new(via, &through),
                    },
                    via,
                };
                self.bypass(plan, configuration, &records, memory, cancel)
                    .await
            }
            Action::Restore => {
                let Some(patch) = restore_patch(configuration, index, &listed.id.webhook, &records)
                else {
                    return Step::default();
                };
                let step = self.write(listed, resource, patch, cancel).await;
                if step.written().is_some_and(|c| {
                    c.records()
                        .is_ok_and(|r| !r.contains_key(&listed.id.webhook))
                }) {
                    self.metrics
                        .webhook_restores_total
                        .with_label_values(&[&name, "restored"])
                        .inc();
                    info!(webhook = %name, "owner back; bypass removed exactly");
                    self.event(listed, resource, "WebhookRestored", "Restore", cancel, format!(
                        "initguard removed its bypass of webhook {}: the owner has been up for {}",
                        listed.id.webhook, humantime::format_duration(listed.restore_grace))).await;
                    if let (Some(restored), Some(bypass)) = (step.written(), record) {
                        self.sweep(listed, restored, bypass, cancel);
                    }
                }
                step
            }
            Action::ForgetTombstone if self.config.dry_run => Step::default(),
            Action::ForgetTombstone => {
                let patch = forget_patch(configuration, &listed.id.webhook, &records);
                let step = self.write(listed, resource, patch, cancel).await;
                if step.written().is_some() {
                    info!(webhook = %name,
                        "owner up since the bypass was restored on demand; tombstone dropped");
                }
                step
            }
            Action::Conflict => {
                let patch = forget_patch(configuration, &listed.id.webhook, &records);
                let step = self.write(listed, resource, patch, cancel).await;
                if step.written().is_some() {
                    self.metrics
                        .webhook_restores_total
                        .with_label_values(&[&name, "conflict"])
                        .inc();
                    warn!(webhook = %name,
                        "the bypass was changed by someone else; left the entry alone");
                    self.event(
                        listed,
                        resource,
                        "WebhookRestoreConflict",
                        "Restore",
                        cancel,
                        format!(
                            "initguard did not restore webhook {}: what it added was changed by \
                         someone else; the entry is left as it is",
                            listed.id.webhook
                        ),
                    )
                    .await;
                }
                step
            }
        };
        if step.failed {
            memory.write_held_until = step.wake;
        }
        step
    }

    /// `afterRestore: report | evict`: look for the pods admitted while `bypass` was in place,
    /// in a task of its own (evictions wait for replacements).
    fn sweep(
        &self,
        listed: &WebhookConfig,
        restored: &Configuration,
        bypass: &Bypass,
        cancel: &CancellationToken,
    ) {
        if listed.after_restore == crate::config::AfterRestore::Ignore
            || listed.id.kind != WebhookKind::Mutating
        {
            return;
        }
        let (Some(index), Some(mut through)) = (
            restored.index_of(&listed.id.webhook),
            let_through(listed, &self.config.opt_in),
        ) else {
            return;
        };
        // Selectors say nothing about requesters, operations or the critical path: a bypass
        // made through them let only the label and the namespaces past.
        if bypass.added.via() == Via::Selectors {
            through.requesters.clear();
            through.operations.clear();
            through.critical_path = false;
        }
        let since = bypass
            .since
            .parse::<jiff::Timestamp>()
            .ok()
            .map(SystemTime::from);
        let Some(since_local) = since else {
            warn!(webhook = %listed.id, since = %bypass.since,
                "the bypass record's time cannot be read; pods admitted meanwhile are not looked for");
            return;
        };
        let now = SystemTime::now();
        let lasted = now.duration_since(since_local).unwrap_or_default();
        // Pods carry the server's creationTimestamp: the window is placed on its clock.
        let restored_at = self
            .clock
            .server_now(tokio::time::Instant::now())
            .unwrap_or(now);
        let sweep = crate::guard::after_restore::Sweep {
            client: self.client.clone(),
            listed: listed.clone(),
            entry: restored.entries[index].clone(),
            through,
            since: bypass.since.clone(),
            window: crate::webhook::after::Window::of(restored_at, lasted),
            fence: self.fence.clone(),
            identity: self.identity.clone(),
            metrics: self.metrics.clone(),
            evictions: self.evictions.clone(),
            eviction: self.eviction.clone(),
        };
        let one_at_a_time = self.sweeps.clone();
        let cancel = cancel.clone();
        // One sweep at a time: two would evict from one controller at once, and both would
        // see a pod unannotated.
        supervise::spawn(&self.failures, "after-restore sweep", async move {
            let _turn = one_at_a_time.lock().await;
            sweep.run(cancel).await;
        });
    }

    /// Why the canary of an `apiserver` owner does not reach the entry, logged when it
    /// changes; what cannot be checked is logged once.
    fn canary_problem(
        &self,
        listed: &WebhookConfig,
        entry: Option<(&Configuration, usize)>,
        in_force: Option<&Bypass>,
        namespaces: &Namespaces,
        memory: &mut Memory,
    ) -> Option<String> {
        let (Some(OwnerSpec::Apiserver(canary)), Some((c, index))) = (&listed.owner, entry) else {
            return None;
        };
        // Judged on the entry as it is without a bypass in place: what the bypass adds never
        // keeps the canary out, unless its namespace is opted in (below).
        let original = in_force.map_or_else(
            || c.entries[index].clone(),
            |b| b.added.removed_from(&c.entries[index]),
        );
        let labels = namespaces.get(&canary.namespace).and_then(Option::as_ref);
        let mut reach = crate::webhook::canary_reach(&original, canary, labels);
        if listed.opt_in != crate::config::OptInMode::None
            && let (Some(selector), Some(labels)) = (&self.config.opt_in.selector, labels)
            && selector.matches(labels)
        {
            reach.problems.push(format!(
                "the canary namespace {} is opted in by optIn.namespaceSelector, so a bypass lets \
                 the canary past the webhook: use a namespace it does not select",
                canary.namespace
            ));
        }
        let problem = (!reach.problems.is_empty()).then(|| reach.problems.join("; "));
        let text = problem.clone().or_else(|| {
            (!reach.warnings.is_empty()).then(|| format!("warning: {}", reach.warnings.join("; ")))
        });
        if text != memory.unreached {
            match (&problem, &text) {
                (Some(p), _) => error!(webhook = %listed.id, problem = %p,
                    "the canary does not reach this webhook; its owner counts as unknown"),
                (None, Some(w)) => {
                    warn!(webhook = %listed.id, %w, "the canary is not fully checked")
                }
                (None, None) => info!(webhook = %listed.id, "the canary reaches this webhook"),
            }
            memory.unreached = text;
        }
        problem
    }

    /// The owner as recorded: explicit, or the entry's Service.
    fn owner_text(&self, listed: &WebhookConfig, c: &Configuration, index: usize) -> String {
        match &listed.owner {
            Some(spec) => spec.to_string(),
            None => match c.service(index) {
                Some((ns, svc)) => format!("service {ns}/{svc}"),
                None => "none".to_owned(),
            },
        }
    }

    /// Write `plan` on `configuration`. A server that drops `matchConditions` silently (the
    /// feature off) gets the same bypass once more through selectors, and `auto` means
    /// selectors for this webhook from then on.
    async fn bypass(
        &self,
        mut plan: Plan<'_>,
        configuration: &Configuration,
        records: &crate::webhook::Records,
        memory: &mut Memory,
        cancel: &CancellationToken,
    ) -> Step {
        let name = plan.listed.id.to_string();
        let mut step = self
            .write(
                plan.listed,
                plan.resource,
                plan.patch(configuration, records),
                cancel,
            )
            .await;
        loop {
            // A refusal re-read the configuration: decided again on it, never taken for what
            // the server kept of this write.
            let Some(written) = step.written() else {
                return step;
            };
            let index = written.index_of(&plan.listed.id.webhook);
            let kept = index.is_some_and(|i| plan.bypass.added.present_in(&written.entries[i]));
            if kept {
                self.bypassed(&plan, cancel).await;
                return step;
            }
            let (Some(_), Via::MatchConditions) = (index, plan.via) else {
                warn!(webhook = %name, "the written entry does not hold the bypass; deciding again");
                return step;
            };
            let listed = plan.listed;
            let exemptions = !listed.exempt_requesters.is_empty()
                || !listed.exempt_operations.is_empty()
                || listed.exempt_critical_path;
            warn!(webhook = %name, exemptions_dropped = exemptions,
                "the API server did not keep matchConditions (feature off?); using selectors, \
                 which cannot let exempt requesters, operations or the critical path through");
            memory.selectors_only = true;
            plan = plan.through_selectors(&self.config.opt_in);
            if plan.bypass.added.parts().is_empty() {
                error!(webhook = %name, "cannot bypass with selectors: they would let nothing \
                    through (only exempt requesters, operations or the critical path would pass)");
                return step;
            }
            let records = written.records().unwrap_or_default();
            let patch = plan.patch(written, &records);
            let dropped = written.resource_version.clone();
            let mut superseded = std::mem::take(&mut step.superseded);
            superseded.push(dropped);
            step = self.write(plan.listed, plan.resource, patch, cancel).await;
            step.superseded.extend(superseded);
        }
    }

    /// Count, log and record a bypass the server kept.
    async fn bypassed(&self, plan: &Plan<'_>, cancel: &CancellationToken) {
        let (listed, name) = (plan.listed, plan.listed.id.to_string());
        self.metrics
            .webhook_bypasses_total
            .with_label_values(&[&name, Reason::OwnerDown.as_str()])
            .inc();
        self.metrics
            .webhook_bypassed
            .with_label_values(&[&name])
            .set(1);
        let via_text = match plan.via {
            Via::MatchConditions => "a matchConditions expression",
            Via::Selectors => "objectSelector/namespaceSelector requirements",
        };
        warn!(webhook = %name, owner = %plan.bypass.owner, via = via_text,
            "bypassed webhook for opted-in objects");
        let note = format!(
            "initguard bypassed webhook {} for opted-in objects ({via_text}): owner {} down for {}",
            listed.id.webhook,
            plan.bypass.owner,
            humantime::format_duration(listed.owner_down_grace)
        );
        self.event(
            listed,
            plan.resource,
            "WebhookBypassed",
            "Bypass",
            cancel,
            note,
        )
        .await;
    }

    /// Send one patch through the fence; the configuration as the server answered it, or,
    /// when the server refused it because the object changed, as re-read (never a blind
    /// retry). Any other refusal or failure is decided again after [`RETRY_AFTER`].
    async fn write(
        &self,
        listed: &WebhookConfig,
        resource: &ApiResource,
        patch: JsonPatch,
        cancel: &CancellationToken,
    ) -> Step {
        let name = listed.id.to_string();
        let later = Step {
            wake: Some(SystemTime::now() + RETRY_AFTER),
            failed: true,
            ..Step::default()
        };
        let request = match patch_request(resource, &listed.id.configuration, &patch) {
            Ok(r) => r,
            Err(e) => {
                error!(webhook = %name, error = %e, "cannot build the patch request");
                return Step::default();
            }
        };
        let Ok(permit) = self.fence.admit(cancel).await else {
            debug!(webhook = %name, "not leading; not writing");
            return Step::default();
        };
        let default_policy = default_failure_policy(resource);
        let decode = |object: DynamicObject| {
            serde_json::to_value(object)
                .ok()
                .and_then(|v| Configuration::decode(listed.id.kind, &v, default_policy).ok())
        };
        let sent = self.client.request::<DynamicObject>(request);
        let error = match permit.send("a webhook configuration PATCH", sent).await {
            Ok(Ok(object)) => {
                return Step {
                    refreshed: decode(object),
                    written: true,
                    ..Step::default()
                };
            }
            Ok(Err(e)) => e,
            Err(e) => {
                warn!(webhook = %name, error = %e, retry_in = ?RETRY_AFTER,
                    "writing the webhook configuration got no answer");
                return later;
            }
        };
        match write::classify(&error) {
            Refusal::Changed => {
                debug!(webhook = %name, %error, "the configuration changed since it was read; re-reading");
                let api: Api<DynamicObject> = Api::all_with(self.client.clone(), resource);
                match api.get_opt(&listed.id.configuration).await {
                    // Decide again on what the server holds now.
                    Ok(Some(object)) => Step {
                        wake: Some(SystemTime::now()),
                        refreshed: decode(object),
                        ..Step::default()
                    },
                    Ok(None) => Step::default(),
                    Err(e) => {
                        warn!(webhook = %name, error = %e, "re-reading the configuration failed");
                        later
                    }
                }
            }
            // The watch says so too, and the loop forgets it.
            Refusal::Gone => Step::default(),
            Refusal::Transient(e) | Refusal::Refused(e) => {
                warn!(webhook = %name, error = %e, retry_in = ?RETRY_AFTER,
                    "writing the webhook configuration failed");
                later
            }
        }
    }

    /// A Warning Event on the configuration (cluster-scoped: in `default`), through the fence.
    async fn event(
        &self,
        listed: &WebhookConfig,
        resource: &ApiResource,
        reason: &str,
        action: &str,
        cancel: &CancellationToken,
        note: String,
    ) {
        let configuration = Subject {
            api_version: resource.api_version.clone(),
            kind: listed.id.kind.object_kind().to_owned(),
            namespace: None,
            name: listed.id.configuration.clone(),
            uid: None,
        };
        write::warn_about(
            &self.client,
            &self.fence,
            &self.metrics,
            cancel,
            &self.identity,
            &configuration,
            reason,
            action,
            note,
        )
        .await;
    }
}

/// One bypass to write: the webhook, the record of what it adds, and how.
struct Plan<'a> {
    listed: &'a WebhookConfig,
    resource: &'a ApiResource,
    /// The entry's index in the configuration the patch is made for.
    index: usize,
    bypass: Bypass,
    via: Via,
}

impl Plan<'_> {
    /// The JSON Patch of this bypass on `configuration`, which holds `records`.
    fn patch(&self, configuration: &Configuration, records: &crate::webhook::Records) -> JsonPatch {
        bypass_patch(
            configuration,
            self.index,
            &self.listed.id.webhook,
            records,
            &self.bypass,
        )
    }

    /// The same bypass through selectors. The entry is where it was: the written patch tested
    /// the resourceVersion, so the server's answer is the configuration read plus this patch.
    fn through_selectors(self, opt_in: &crate::config::OptIn) -> Self {
        let through = let_through(self.listed, opt_in).unwrap_or_default();
        Plan {
            bypass: Bypass {
                added: Added::new(Via::Selectors, &through),
                ..self.bypass
            },
            via: Via::Selectors,
            ..self
        }
    }
}

/// The PATCH of one configuration with `patch` as the API server's Go code would encode it
/// ([`go_json`]: its `test`s compare raw bytes).
pub(crate) fn patch_request(
    resource: &ApiResource,
    name: &str,
    patch: &JsonPatch,
) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
    let url = format!(
        "/apis/{}/{}/{}",
        resource.group, resource.version, resource.plural
    );
    let mut request = kube::core::Request::new(url).patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(patch.clone()),
    )?;
    *request.body_mut() = go_json(patch);
    Ok(request)
}

/// What one step leaves behind.
#[derive(Default)]
struct Step {
    /// When to look again without any change.
    wake: Option<SystemTime>,
    /// The configuration as the server holds it after a write (or re-read after a refusal).
    refreshed: Option<Configuration>,
    /// Whether `refreshed` is the server's answer to this step's write, which therefore
    /// applied; a re-read after a 409 shows someone else's change, not what the server kept.
    written: bool,
    /// The write failed for another reason than a changed object: `wake` is the earliest
    /// instant to write again.
    failed: bool,
    /// Versions the guard wrote and then wrote over itself (a matchConditions bypass the server
    /// dropped, then the selector one): their watch events come after `refreshed` and must not
    /// replace it, or the guard would take its own first write for someone else's undo.
    superseded: Vec<String>,
}

impl Step {
    /// The configuration the server answered this step's write with, if the write applied.
    fn written(&self) -> Option<&Configuration> {
        self.refreshed.as_ref().filter(|_| self.written)
    }
}

fn earliest(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<SystemTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn watch_named(
    api: Api<DynamicObject>,
    watched: Watched,
    tx: mpsc::Sender<Update>,
    cancel: CancellationToken,
) {
    let name = match &watched {
        Watched::Configuration((_, name)) | Watched::Namespace(name) => name.clone(),
    };
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(watcher(
        api, config
    )));
    let mut seen_in_list = false;
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => return,
            event = stream.next() => event,
        };
        let object = match event {
            None => return,
            Some(Err(e)) => {
                warn!(%name, error = %e, "watch by name failed; retrying");
                continue;
            }
            Some(Ok(watcher::Event::Init)) => {
                seen_in_list = false;
                continue;
            }
            Some(Ok(watcher::Event::InitApply(object) | watcher::Event::Apply(object))) => {
                seen_in_list = true;
                serde_json::to_value(object).ok()
            }
            Some(Ok(watcher::Event::InitDone)) if !seen_in_list => None,
            Some(Ok(watcher::Event::InitDone)) => continue,
            Some(Ok(watcher::Event::Delete(_))) => None,
        };
        if tx
            .send(Update {
                watched: watched.clone(),
                object,
            })
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Each distinct configuration of the listed webhooks, read once (None: not served, not
/// found, unreadable, logged); for `initguard status` and the default owners.
pub type Configurations = BTreeMap<Key, Option<Configuration>>;

/// Read every configuration that a listed webhook matching `wanted` lives in.
pub async fn read_configurations(
    client: &kube::Client,
    discovery: &Discovery,
    config: &Config,
    wanted: impl Fn(&WebhookConfig) -> bool,
) -> Configurations {
    let mut read = Configurations::new();
    if !config.webhooks.iter().any(&wanted) {
        return read;
    }
    let surface = match discovery.surface().await {
        Ok(s) => Some(s),
        Err(e) => {
            error!(error = %e, "cannot read the served APIs to read the webhook configurations");
            None
        }
    };
    for listed in config.webhooks.iter().filter(|w| wanted(w)) {
        let key = (listed.id.kind, listed.id.configuration.clone());
        if read.contains_key(&key) {
            continue;
        }
        let resource = surface
            .as_ref()
            .and_then(|s| s.webhook_configurations(key.0.object_kind(), key.0.resource()));
        let configuration = match resource {
            None => None,
            Some(resource) => {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                match api.get_opt(&key.1).await {
                    Ok(o) => o.and_then(|o| serde_json::to_value(o).ok()).and_then(|v| {
                        Configuration::decode(key.0, &v, default_failure_policy(&resource)).ok()
                    }),
                    Err(e) => {
                        error!(webhook = %listed.id, error = %e, "cannot read the webhook configuration");
                        None
                    }
                }
            }
        };
        read.insert(key, configuration);
    }
    read
}

/// Read the labels of every canary namespace once, for [`canary_findings`] (the running guard
/// watches them).
async fn canary_namespaces(client: &kube::Client, config: &Config) -> Namespaces {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut namespaces = Namespaces::new();
    for listed in &config.webhooks {
        let Some(OwnerSpec::Apiserver(canary)) = &listed.owner else {
            continue;
        };
        if namespaces.contains_key(&canary.namespace) {
            continue;
        }
        let labels = match api.get_metadata_opt(&canary.namespace).await {
            Ok(Some(ns)) => Some(ns.metadata.labels.unwrap_or_default()),
            Ok(None) => {
                error!(namespace = %canary.namespace, "the canary namespace does not exist");
                None
            }
            Err(e) => {
                warn!(namespace = %canary.namespace, error = %e,
                    "cannot read the canary namespace; namespaceSelectors are not checked \
                     against it (grant get on that namespace)");
                None
            }
        };
        namespaces.insert(canary.namespace.clone(), labels);
    }
    namespaces
}

/// For `check-config --kubeconfig`: one warning per listed webhook whose canary does not reach
/// it, or cannot be fully checked ([`crate::webhook::canary_reach`]).
pub async fn canary_findings(discovery: &Discovery, config: &Config) -> Vec<String> {
    let client = discovery.client();
    let canary = |w: &WebhookConfig| matches!(w.owner, Some(OwnerSpec::Apiserver(_)));
    let read = read_configurations(client, discovery, config, canary).await;
    let namespaces = canary_namespaces(client, config).await;
    let mut lines = Vec::new();
    for listed in config.webhooks.iter().filter(|w| canary(w)) {
        let Some(OwnerSpec::Apiserver(c)) = &listed.owner else {
            continue;
        };
        let key = (listed.id.kind, listed.id.configuration.clone());
        let Some((configuration, index)) = read
            .get(&key)
            .and_then(Option::as_ref)
            .and_then(|r| Some((r, r.index_of(&listed.id.webhook)?)))
        else {
            lines.push(format!(
                "webhook {}: not found, so its canary cannot be checked",
                listed.id
            ));
            continue;
        };
        let reach = crate::webhook::canary_reach(
            &configuration.entries[index],
            c,
            namespaces.get(&c.namespace).and_then(Option::as_ref),
        );
        for problem in reach.problems {
            lines.push(format!(
                "webhook {}: the canary does not reach it, so its owner stays unknown: {problem}",
                listed.id
            ));
        }
        for warning in reach.warnings {
            lines.push(format!("webhook {}: canary: {warning}", listed.id));
        }
    }
    lines
}

/// For each listed webhook without an owner: its Service, from `read`, as a `service` owner.
/// A configuration or entry that cannot be read leaves the owner unset (unknown: never
/// bypassed), with an error in the log.
pub fn service_owners(config: &Config, read: &Configurations) -> Vec<(usize, OwnerSpec)> {
    let mut found = Vec::new();
    for (i, listed) in config.webhooks.iter().enumerate() {
        if listed.owner.is_some() {
            continue;
        }
        let key = (listed.id.kind, listed.id.configuration.clone());
        let service = read
            .get(&key)
            .and_then(Option::as_ref)
            .and_then(|c| c.service(c.index_of(&listed.id.webhook)?));
        match service {
            Some((namespace, name)) => {
                info!(webhook = %listed.id, service = %format!("{namespace}/{name}"),
                    "owner: the webhook's Service (down when it is missing) and its ready endpoints");
                found.push((
                    i,
                    OwnerSpec::WebhookService(crate::config::ObjectRef { namespace, name }),
                ));
            }
            None => error!(webhook = %listed.id,
                "no owner: the webhook is not found or is called by URL; set an owner in the \
                 config (it stays unknown and is never bypassed)"),
        }
    }
    found
}

/// [`service_owners`] from one read of the configurations of the webhooks without an owner
/// (no request at all when every webhook has one).
pub async fn default_owners(
    client: &kube::Client,
    discovery: &Discovery,
    config: &Config,
) -> Vec<(usize, OwnerSpec)> {
    let read = read_configurations(client, discovery, config, |w| w.owner.is_none()).await;
    service_owners(config, &read)
}

/// Each listed webhook's status from `read` (`initguard status`).
pub fn statuses(
    config: &Config,
    read: &Configurations,
    owners: &Owners,
) -> Vec<crate::webhook::WebhookStatus> {
    config
        .webhooks
        .iter()
        .map(|listed| {
            let key = (listed.id.kind, listed.id.configuration.clone());
            crate::webhook::status(
                listed,
                read.get(&key).and_then(Option::as_ref),
                owners.state(&listed.id.to_string()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resource(version: &str) -> ApiResource {
        ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: version.into(),
            api_version: format!("admissionregistration.k8s.io/{version}"),
            kind: "ValidatingWebhookConfiguration".into(),
            plural: "validatingwebhookconfigurations".into(),
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs)
    }

    #[test]
    fn the_loop_wakes_at_the_earliest_of_two_wakes() {
        assert_eq!(earliest(None, None), None);
        assert_eq!(earliest(Some(at(5)), None), Some(at(5)));
        assert_eq!(earliest(None, Some(at(7))), Some(at(7)));
        assert_eq!(earliest(Some(at(9)), Some(at(3))), Some(at(3)));
        assert_eq!(earliest(Some(at(3)), Some(at(9))), Some(at(3)));
    }

    #[test]
    fn an_omitted_failure_policy_is_fail_in_v1_and_ignore_in_v1beta1() {
        assert_eq!(default_failure_policy(&resource("v1")), FailurePolicy::Fail);
        assert_eq!(
            default_failure_policy(&resource("v1beta1")),
            FailurePolicy::Ignore
        );
    }

    #[test]
    fn the_patch_request_carries_the_go_encoding_to_the_named_configuration() {
        let patch: JsonPatch = serde_json::from_value(json!([
            { "op": "test", "path": "/metadata/uid", "value": "u-1" },
            { "op": "add", "path": "/webhooks/1/matchConditions/0",
              "value": { "name": "initguard-bypass", "expression": "a < b && c > d" } },
        ]))
        .unwrap();
        let request = patch_request(&resource("v1"), "pod-policy", &patch).unwrap();
        assert_eq!(request.method(), http::Method::PATCH);
        assert_eq!(
            request.uri().path(),
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/pod-policy"
        );
        assert_eq!(
            request.headers()[http::header::CONTENT_TYPE],
            "application/json-patch+json"
        );
        // The API server's `test`s compare Go's encoding: `&`, `<`, `>` escaped.
        let body = String::from_utf8(request.body().clone()).unwrap();
        assert!(
            body.contains(r#""expression":"a \u003c b \u0026\u0026 c \u003e d""#),
            "{body}"
        );
    }

    /// Three listed webhooks of one configuration: one with an owner, one calling a
    /// Service, one called by URL; and one of a configuration that was not found.
    #[test]
    fn an_ownerless_webhook_is_owned_by_its_service_and_one_called_by_url_by_nobody() {
        let config = crate::config::from_yaml_str(
            "mechanism: schedulingGates\n\
             optIn: { label: initguard.io/bypass }\n\
             webhooks:\n\
             \x20 - { name: validating/policy/owned.example.com, owner: { deployment: ns/d } }\n\
             \x20 - { name: validating/policy/service.example.com }\n\
             \x20 - { name: validating/policy/url.example.com }\n\
             \x20 - { name: validating/missing/gone.example.com }\n",
            "test.yaml",
        )
        .unwrap();
        let entry = |name: &str, client: Value| json!({ "name": name, "clientConfig": client, "failurePolicy": "Fail" });
        let object = json!({
            "metadata": { "name": "policy", "uid": "u", "resourceVersion": "1" },
            "webhooks": [
                entry("owned.example.com", json!({ "service": { "namespace": "a", "name": "x" } })),
                entry("service.example.com", json!({ "service": { "namespace": "policy-system", "name": "policy" } })),
                entry("url.example.com", json!({ "url": "https://policy.example.com/validate" })),
            ],
        });
        let read = Configurations::from([
            (
                (WebhookKind::Validating, "policy".to_owned()),
                Some(
                    Configuration::decode(WebhookKind::Validating, &object, FailurePolicy::Fail)
                        .unwrap(),
                ),
            ),
            ((WebhookKind::Validating, "missing".to_owned()), None),
        ]);
        let owners = service_owners(&config, &read);
        assert_eq!(
            owners,
            vec![(
                1,
                OwnerSpec::WebhookService(crate::config::ObjectRef {
                    namespace: "policy-system".into(),
                    name: "policy".into(),
                })
            )]
        );
    }
}
