//! `initguard restore`: undo recorded webhook bypasses now, whatever the owners' state, exactly
//! as the guard's own restore does (the same patch, the same conflict rule), and leave a
//! tombstone so that no running or restarting guard bypasses the entry again before its owner
//! has been seen up (README "Admission webhooks", "Restore on demand"). The chart's pre-delete hook
//! runs it, so that an uninstall leaves nothing bypassed.

use std::fmt;

use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use serde::Serialize;

use crate::config::{Config, WebhookConfig, WebhookId, WebhookKind};
use crate::discovery::Discovery;
use crate::guard::webhooks::{default_failure_policy, patch_request};
use crate::guard::write::{self, Refusal};
use crate::webhook::patch::restore_with_tombstone;
use crate::webhook::{Configuration, Record, Restored};

/// Attempts per entry when the configuration changes between the read and the write.
const ATTEMPTS: usize = 5;

/// Who asks for the restore, as the tombstone records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RestoredBy {
    /// A person, from the command line.
    Cli,
    /// The chart's pre-delete hook.
    Uninstall,
}

impl RestoredBy {
    fn as_str(self) -> &'static str {
        match self {
            RestoredBy::Cli => "cli",
            RestoredBy::Uninstall => "uninstall",
        }
    }
}

/// What `initguard restore` is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Only these listed webhooks (empty: every listed one).
    pub webhooks: Vec<WebhookId>,
    pub dry_run: bool,
    pub by: RestoredBy,
}

/// What became of one listed webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome", content = "detail")]
pub enum Outcome {
    /// Its bypass was removed exactly; a tombstone was left.
    Restored,
    /// `--dry-run`: it would be.
    WouldRestore,
    /// No bypass is recorded for it (never bypassed, already restored, or a tombstone).
    NotBypassed,
    /// A recorded value is no longer in the entry: someone changed it; left as it is.
    Conflict,
    /// The configuration or the entry does not exist.
    NotFound,
    /// Reading or writing failed.
    Failed(String),
}

impl Outcome {
    /// Whether a recorded bypass is still in place afterwards (or may be).
    fn remains(&self) -> bool {
        match self {
            Outcome::Restored | Outcome::NotBypassed | Outcome::NotFound => false,
            Outcome::WouldRestore | Outcome::Conflict | Outcome::Failed(_) => true,
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub webhook: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = &self.webhook;
        match &self.outcome {
            Outcome::Restored => write!(f, "{w}: restored (tombstone left)"),
            Outcome::WouldRestore => write!(f, "{w}: would restore (dry run)"),
            Outcome::NotBypassed => write!(f, "{w}: no bypass recorded"),
            Outcome::Conflict => write!(
                f,
                "{w}: conflict: what the bypass added is no longer in the entry (changed by \
                 someone else); left as it is, with its record"
            ),
            Outcome::NotFound => write!(f, "{w}: configuration or entry not found"),
            Outcome::Failed(e) => write!(f, "{w}: failed: {e}"),
        }
    }
}

/// Why `initguard restore` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("--webhook {0} is not listed in the configuration")]
    NotListed(String),
    #[error("reading the API server's discovery: {0}")]
    Discovery(#[source] kube::Error),
}

/// The exit status: 0 when no recorded bypass remains, or with `conflicts_ok` when only
/// conflicts remain; 1 otherwise.
pub fn succeeded(lines: &[Line], dry_run: bool, conflicts_ok: bool) -> bool {
    // A dry run only reports.
    dry_run
        || lines
            .iter()
            .all(|l| !l.outcome.remains() || (conflicts_ok && l.outcome == Outcome::Conflict))
}

/// Restore every listed webhook of `config` named in `options` (all when none is).
pub async fn restore(
    client: &kube::Client,
    config: &Config,
    options: &Options,
) -> Result<Vec<Line>, RestoreError> {
    for id in &options.webhooks {
        if !config.webhooks.iter().any(|w| &w.id == id) {
            return Err(RestoreError::NotListed(id.to_string()));
        }
    }
    let surface = kube_common::ApiSurface::read(client)
        .await
        .map_err(RestoreError::Discovery)?;
    let mut lines = Vec::new();
    for listed in config
        .webhooks
        .iter()
        .filter(|w| options.webhooks.is_empty() || options.webhooks.contains(&w.id))
    {
        let kind = listed.id.kind;
        let outcome = match surface.webhook_configurations(kind.object_kind(), kind.resource()) {
            None => Outcome::Failed(format!(
                "the API server serves no admissionregistration.k8s.io {}",
                kind.resource()
            )),
            Some(resource) => restore_one(client, &resource, listed, options).await,
        };
        lines.push(Line {
            webhook: listed.id.to_string(),
            outcome,
        });
    }
    Ok(lines)
}

async fn restore_one(
    client: &kube::Client,
    resource: &ApiResource,
    listed: &WebhookConfig,
    options: &Options,
) -> Outcome {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let policy = default_failure_policy(resource);
    let name = &listed.id.configuration;
    for _ in 0..ATTEMPTS {
        let object = match api.get_opt(name).await {
            Ok(Some(object)) => object,
            Ok(None) => return Outcome::NotFound,
            Err(e) => return Outcome::Failed(format!("reading {name}: {e}")),
        };
        let configuration = match serde_json::to_value(object)
            .map_err(|e| e.to_string())
            .and_then(|v| {
                Configuration::decode(listed.id.kind, &v, policy).map_err(|e| e.to_string())
            }) {
            Ok(c) => c,
            Err(e) => return Outcome::Failed(format!("decoding {name}: {e}")),
        };
        let Some(index) = configuration.index_of(&listed.id.webhook) else {
            return Outcome::NotFound;
        };
        let records = match configuration.records() {
            Ok(r) => r,
            Err(e) => return Outcome::Failed(format!("the record annotation is not valid: {e}")),
        };
        if records
            .get(&listed.id.webhook)
            .and_then(Record::bypass)
            .is_none()
        {
            return Outcome::NotBypassed;
        }
        let tombstone = Restored {
            at: jiff::Timestamp::now()
                .round(jiff::Unit::Second)
                .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string()),
            by: options.by.as_str().to_owned(),
            // The command does not watch owners.
            owner_state: "unknown".to_owned(),
        };
        let Some(patch) = restore_with_tombstone(
            &configuration,
            index,
            &listed.id.webhook,
            &records,
            tombstone,
        ) else {
            return Outcome::Conflict;
        };
        if options.dry_run {
            return Outcome::WouldRestore;
        }
        let request = match patch_request(resource, name, &patch) {
            Ok(r) => r,
            Err(e) => return Outcome::Failed(format!("building the patch: {e}")),
        };
        match client.request::<DynamicObject>(request).await {
            Ok(_) => return Outcome::Restored,
            // Changed since the read (the guard, or someone else): read and decide again.
            Err(e) if matches!(write::classify(&e), Refusal::Changed) => {}
            Err(e) => return Outcome::Failed(format!("patching {name}: {e}")),
        }
    }
    Outcome::Failed(format!(
        "{name} kept changing between read and write ({ATTEMPTS} attempts)"
    ))
}

/// For `check-config --kubeconfig`: one warning per bypass recorded on a configuration for an
/// entry the config does not list (a guard reconfigured, or uninstalled without its hook, left
/// it behind: no guard will ever restore it), and one when the configurations cannot be read.
pub async fn orphaned_records(discovery: &Discovery, config: &Config) -> Vec<String> {
    let client = discovery.client();
    let surface = match discovery.surface().await {
        Ok(s) => s,
        Err(e) => {
            return vec![format!(
                "cannot read discovery to look for bypass records: {e}"
            )];
        }
    };
    let mut lines = Vec::new();
    for kind in [WebhookKind::Validating, WebhookKind::Mutating] {
        let Some(resource) = surface.webhook_configurations(kind.object_kind(), kind.resource())
        else {
            continue;
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let list = match api.list_metadata(&kube::api::ListParams::default()).await {
            Ok(list) => list,
            Err(e) => {
                lines.push(format!(
                    "cannot list {} to look for bypass records left behind: {e}",
                    kind.resource()
                ));
                continue;
            }
        };
        for object in list.items {
            let name = object.metadata.name.unwrap_or_default();
            let Some(text) = object
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::webhook::RECORD_ANNOTATION))
            else {
                continue;
            };
            let Ok(records) = serde_json::from_str::<crate::webhook::Records>(text) else {
                lines.push(format!(
                    "{}/{name}: the {} annotation is not valid JSON",
                    kind.as_str(),
                    crate::webhook::RECORD_ANNOTATION
                ));
                continue;
            };
            for id in crate::webhook::orphaned_bypasses(&config.webhooks, kind, &name, &records) {
                lines.push(format!(
                    "{id} carries a bypass record but is not listed: no guard will restore it; \
                     list it and run `initguard restore --webhook {id}`"
                ));
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(outcome: Outcome) -> Line {
        Line {
            webhook: "validating/p/w.example.com".to_owned(),
            outcome,
        }
    }

    #[test]
    fn the_exit_status_says_whether_a_bypass_remains() {
        let done = [
            line(Outcome::Restored),
            line(Outcome::NotBypassed),
            line(Outcome::NotFound),
        ];
        assert!(succeeded(&done, false, false));
        let conflict = [line(Outcome::Restored), line(Outcome::Conflict)];
        assert!(!succeeded(&conflict, false, false));
        assert!(succeeded(&conflict, false, true), "--conflicts-ok");
        let failed = [line(Outcome::Failed("x".into()))];
        assert!(!succeeded(&failed, false, true), "a failure is never ok");
        // A dry run only reports, whatever it found.
        assert!(succeeded(&[line(Outcome::WouldRestore)], true, false));
        assert!(succeeded(&conflict, true, false));
    }
}
