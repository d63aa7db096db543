//! Configuration schema (README "Configure"), parsing with located errors, and validation.
//!
//! [`Config::from_yaml_with`] parses text; the `initguard` crate's `config::load` reads a file
//! and gives [`ReadFile`] the file system.
//!
//! Pipeline: size and character checks → a yaml-rust2 event pass ([`kube_common::yaml`]: key positions,
//! duplicate keys, extra documents, nesting limit) → serde_yaml into the raw types (`raw`,
//! unknown keys rejected) → `resolve` (defaults and every semantic rule, all problems
//! collected). Every problem is reported as `FILE:LINE:COL: message`.
//!
//! An empty file (or one holding only comments or `null`) is rejected: it is far more often a
//! wrong mount or an empty ConfigMap key than a wish for defaults; `{}` selects every default.

mod error;
mod raw;
mod resolve;
mod types;

use std::fmt::{self, Write as _};
use std::time::Duration;

use kube_common::yaml;

pub use error::{ConfigError, InvalidValue, LocatedError, MAX_REPORTED_ERRORS};
pub use kube_common::Mechanism;
pub use kube_common::names;
pub use kube_common::selector::{LabelSelector, Requirement, SelectorError, SelectorOp};
pub use resolve::{
    DEFAULT_DEADLINE, DEFAULT_FLAP_UNDOS, DEFAULT_FLAP_WINDOW, DEFAULT_LEASE_DURATION,
    DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE, DEFAULT_LISTEN, DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_RECREATIONS_PER_HOUR, DEFAULT_OPT_IN_LABEL, DEFAULT_OWNER_DOWN_GRACE,
    DEFAULT_PILEUP_MIN_WAIT, DEFAULT_PILEUP_THRESHOLD, DEFAULT_PROBE_INTERVAL,
    DEFAULT_REPAIR_AFTER, DEFAULT_RESTORE_GRACE, DEFAULT_UNLISTED_ALERT_AFTER, Elsewhere,
    MAX_DURATION, MAX_IN_FLIGHT_LIMIT, ReadFile, parse_object_ref, parse_webhook_id,
    validate_http_url, webhook_namespace_requirement,
};
pub use types::{
    AfterRestore, BypassVia, CANARY_LABEL, Canary, CanaryResource, Config, Defaults, EventsMode,
    Evictions, Flapping, InitContainerConfig, InitializerConfig, LeaderElection, ObjectRef,
    Operation, OptIn, OptInMode, OwnerSpec, Pileup, PileupAction, RecreateBudget, Requester,
    ServingCert, StepAction, StepOwner, Trigger, UnlistedPolicy, WebhookConfig, WebhookId,
    WebhookKind,
};

/// The warning of a config whose `initContainers` name an owner other than `daemonset`
/// (README "The node stage"): such owners are not watched for init steps yet, so they stay
/// unknown and the step is only reported: it must not look guarded when it is not.
pub const NODE_STAGE_CLUSTER_OWNERS: &str = "initContainers: owners other than daemonset are \
    not watched for init steps yet: they stay unknown, so those steps are reported and never \
    recreated";

/// Largest configuration file accepted, checked before any parsing.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;
/// Legacy API servers time a blocked pod CREATE out after about this long.
pub const LEGACY_CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// 1-based line and column (in characters) of byte offset `at` in `text`.
fn position_of(text: &str, at: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..at.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// Characters YAML forbids, and line separators on which the two YAML parsers used here would
/// disagree about line numbers. Keeps one more problem than is ever shown and counts the rest.
fn character_problems(text: &str, file: &str) -> (Vec<LocatedError>, usize) {
    let mut problems = Vec::new();
    let mut unlisted = 0;
    let (mut line, mut column) = (1usize, 1usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let message = match c {
            '\t' | '\n' | '\r' => None,
            '\u{2028}' | '\u{2029}' | '\u{85}' => Some(format!(
                "the line separator U+{:04X} is not allowed; end lines with a newline",
                u32::from(c)
            )),
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => Some(format!(
                "the control character U+{:04X} is not allowed in YAML",
                u32::from(c)
            )),
            _ => None,
        };
        if let Some(message) = message {
            if problems.len() <= MAX_REPORTED_ERRORS {
                problems.push(LocatedError::new(file, line, column, message));
            } else {
                unlisted += 1;
            }
        }
        let breaks = c == '\n' || (c == '\r' && chars.peek() != Some(&'\n'));
        if breaks {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (problems, unlisted)
}

/// Turn a serde_yaml error into a located one, without the "at line L column C" it embeds.
fn serde_problem(
    e: &serde_yaml::Error,
    text: &str,
    file: &str,
    layout: &yaml::Layout,
) -> ConfigError {
    let mut message = e.to_string();
    let (line, column) = match e.location() {
        Some(loc) => {
            let suffix = format!(" at line {} column {}", loc.line(), loc.column());
            if let Some(i) = message.find(&suffix) {
                message.replace_range(i..i + suffix.len(), "");
            }
            let at = text
                .lines()
                .nth(loc.line().saturating_sub(1))
                .and_then(|l| l.chars().nth(loc.column().saturating_sub(1)));
            if at == Some('\t') {
                message.push_str(" (a tab: YAML indentation must use spaces)");
            }
            (loc.line(), loc.column())
        }
        None if message.contains("repetition limit") => {
            message = format!(
                "{message}: aliases expand to too many nodes (a YAML alias bomb?); write the \
                 values out instead"
            );
            layout.first_alias.map_or((0, 0), |p| (p.line, p.column))
        }
        None => (0, 0),
    };
    ConfigError::single(file, line, column, message)
}

/// The JSON Schema (draft 2020-12) of the configuration file, generated from the types it is
/// parsed into: every key, its type and its enumerated values; unknown keys are refused.
/// The schema cannot say everything `Config::from_yaml_with` checks (names, selectors, ranges,
/// files), so passing it is necessary, not sufficient. The chart's values.schema.json and
/// config/initguard.schema.json are made from it (tests/deploy.rs checks they are current).
pub fn json_schema() -> serde_json::Value {
    schemars::schema_for!(raw::RawConfig).to_value()
}

impl Config {
    /// As [`Config::from_yaml_with`], for the bytes of a file, which must be UTF-8 text.
    pub fn from_yaml_bytes(
        bytes: Vec<u8>,
        file: &str,
        files: &dyn ReadFile,
    ) -> Result<Config, ConfigError> {
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let (line, column) = position_of(&String::from_utf8_lossy(&bytes[..at]), at);
            ConfigError::single(
                file,
                line,
                column,
                format!(
                    "invalid UTF-8 (byte 0x{:02X} at offset {at}); the configuration must be \
                     UTF-8 text",
                    bytes.get(at).copied().unwrap_or(0)
                ),
            )
        })?;
        Config::from_yaml_with(&text, file, files)
    }

    /// Parse and validate YAML text; `file` labels error locations, `files` reads the TLS
    /// files it names (which are checked here, so a bad one fails `check-config`).
    pub fn from_yaml_with(
        text: &str,
        file: &str,
        files: &dyn ReadFile,
    ) -> Result<Config, ConfigError> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::single(
                file,
                1,
                1,
                format!(
                    "the text is {} bytes; a configuration may be at most 1 MiB \
                     ({MAX_CONFIG_BYTES} bytes)",
                    text.len()
                ),
            ));
        }
        // yaml-rust2 does not skip a byte-order mark; editors do not show one either.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let (bad_chars, unlisted) = character_problems(text, file);
        if !bad_chars.is_empty() {
            return Err(ConfigError::from_problems(file, bad_chars, unlisted));
        }
        // The event pass runs first: it refuses flow nesting deeper than 255 levels, which
        // libyaml (inside serde_yaml) would otherwise scan in quadratic time.
        let layout = yaml::scan(text).map_err(|e| {
            // yaml-rust2 caps flow nesting at 255 on its own; report one limit.
            let mut message = if e.message == "recursion limit exceeded" {
                format!(
                    "invalid YAML: collections nested more than {} levels deep",
                    yaml::MAX_DEPTH
                )
            } else {
                format!("invalid YAML: {}", e.message)
            };
            if message.contains("tab") {
                message.push_str(" (YAML indentation must use spaces)");
            }
            ConfigError::single(file, e.pos.line, e.pos.column, message)
        })?;
        if let Some(pos) = layout.extra_document {
            return Err(ConfigError::single(
                file,
                pos.line,
                pos.column,
                "expected a single YAML document, found a second one (remove the extra `---` \
                 or `...`)",
            ));
        }
        if layout.empty {
            return Err(ConfigError::single(
                file,
                1,
                1,
                "the file holds no configuration (it is empty, only comments, or null); write \
                 `{}` to run with every default",
            ));
        }
        if !layout.duplicates.is_empty() {
            let errors = layout
                .duplicates
                .iter()
                .map(|d| {
                    LocatedError::new(
                        file,
                        d.second.line,
                        d.second.column,
                        format!(
                            "{}: duplicate key, first set at line {} column {}; expected each \
                             key once per mapping",
                            d.path, d.first.line, d.first.column
                        ),
                    )
                })
                .collect();
            return Err(ConfigError::from_problems(file, errors, 0));
        }
        let raw: raw::RawConfig =
            serde_yaml::from_str(text).map_err(|e| serde_problem(&e, text, file, &layout))?;
        let mut problems = resolve::Findings::new(file, &layout, files);
        let config = resolve::resolve(raw, &mut problems);
        if problems.list.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::from_problems(file, problems.list, 0))
        }
    }

    /// Advice about valid but risky settings, shown by `check-config`.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.mechanism == Mechanism::Initializers {
            let mut long: Vec<(&str, Duration)> = self
                .initializers
                .iter()
                .map(|i| (i.name.as_str(), i.deadline))
                .collect();
            if self.unlisted_initializers == UnlistedPolicy::Deadline {
                long.push(("unlisted initializers", self.defaults.deadline));
            }
            for i in &self.initializers {
                if names::validate_dns1123_subdomain(&i.name).is_err()
                    || i.name.split('.').count() < 3
                {
                    warnings.push(format!(
                        "{}: Kubernetes 1.8+ accepts only initializer names that are domains with \
                         at least three dot-separated segments, such as \"sidecar.example.com\"",
                        i.name
                    ));
                }
            }
            if self.pileup.action == PileupAction::Bypass
                && self.pileup.min_wait >= LEGACY_CREATE_TIMEOUT
            {
                warnings.push(format!(
                    "pileup.minWait {} is not below the ~30s create timeout of legacy API \
                     servers; creators will time out and retry before a pile is bypassed",
                    humantime::format_duration(self.pileup.min_wait)
                ));
            }
            for (name, deadline) in long {
                if deadline >= LEGACY_CREATE_TIMEOUT {
                    warnings.push(format!(
                        "{name}: deadline {} is not below the ~30s create timeout of legacy API \
                         servers; creators will time out and retry, piling up pods",
                        humantime::format_duration(deadline)
                    ));
                }
            }
        }
        if self.mechanism == Mechanism::Initializers && !self.webhooks.is_empty() {
            warnings.push(
                "webhooks: the webhook guard needs Kubernetes 1.15+ (objectSelector); servers \
                 with legacy initializers (1.7-1.13) cannot be guarded this way"
                    .to_owned(),
            );
        }
        if self
            .init_containers
            .iter()
            .any(|s| matches!(s.owner, Some(StepOwner::Cluster(_))))
        {
            warnings.push(NODE_STAGE_CLUSTER_OWNERS.to_owned());
        }
        for step in &self.init_containers {
            if step.action != StepAction::Recreate {
                continue;
            }
            if step.opt_in == OptInMode::None {
                warnings.push(format!(
                    "initContainers {}: action recreate with optIn: none never recreates a pod, \
                     it only reports; say action: report, or optIn any or namespaces",
                    step.name
                ));
            }
            if step.owner.is_none() && step.opt_in != OptInMode::None {
                warnings.push(format!(
                    "initContainers {}: action recreate without an owner recreates a pod as \
                     soon as a trigger holds, even while the node agent the step waits on is \
                     still down (the new pod would fail the same way); name it, e.g. owner: {{ \
                     daemonset: NAMESPACE/NAME }}",
                    step.name
                ));
            }
        }
        if self.pileup.action == PileupAction::Bypass && self.pileup.min_wait.is_zero() {
            warnings.push(
                "pileup.minWait is 0s: a healthy owner's batch of pileup.threshold pods \
                 (a parallel Job, a scale-up) counts as a pile and is bypassed at once"
                    .to_owned(),
            );
        }
        warnings
    }

    /// Short human summary for `initguard check-config`: every resolved value, one topic per
    /// line, ending in a newline.
    pub fn summary(&self) -> String {
        let d = humantime::format_duration;
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_summary(&mut out, &d);
        out
    }

    fn write_summary(
        &self,
        out: &mut String,
        d: &dyn Fn(Duration) -> humantime::FormattedDuration,
    ) -> fmt::Result {
        writeln!(out, "mechanism: {}", self.mechanism.as_str())?;
        let namespaces = if self.opt_in.namespaces.is_empty() {
            "none".to_owned()
        } else {
            self.opt_in.namespaces.join(", ")
        };
        writeln!(
            out,
            "opt-in: pods labeled {}; namespaces: {namespaces}",
            self.opt_in.label
        )?;
        if self.opt_in.selector.is_some() {
            writeln!(
                out,
                "opt-in: namespaces labeled {} (a Namespace watch)",
                self.opt_in.namespace_selector
            )?;
        }
        writeln!(
            out,
            "defaults: deadline {}, ownerDownGrace {}, probeInterval {}, unlistedAlertAfter {}",
            d(self.defaults.deadline),
            d(self.defaults.owner_down_grace),
            d(self.defaults.probe_interval),
            d(self.defaults.unlisted_alert_after)
        )?;
        writeln!(out, "initializers: {}", self.initializers.len())?;
        for i in &self.initializers {
            write!(out, "  {}: deadline {}", i.name, d(i.deadline))?;
            if i.opt_in != types::OptInMode::Any {
                write!(out, ", optIn {}", i.opt_in.as_str())?;
            }
            if i.bypass_on != types::Trigger::ALL {
                let on: Vec<&str> = i.bypass_on.iter().map(|t| t.as_str()).collect();
                write!(out, ", bypassOn {}", on.join(","))?;
            }
            match &i.owner {
                None => writeln!(out, ", no owner (deadline only)")?,
                Some(owner @ OwnerSpec::Http { .. }) => writeln!(
                    out,
                    ", grace {}, probe every {}, owner {owner}",
                    d(i.owner_down_grace),
                    d(i.probe_interval)
                )?,
                Some(owner) => writeln!(out, ", grace {}, owner {owner}", d(i.owner_down_grace))?,
            }
        }
        let unlisted = match self.unlisted_initializers {
            UnlistedPolicy::Ignore => "ignore (never bypassed)".to_owned(),
            UnlistedPolicy::Deadline => {
                format!("deadline (bypassed after {})", d(self.defaults.deadline))
            }
        };
        writeln!(out, "unlisted initializers: {unlisted}")?;
        self.write_node_stage(out, d)?;
        let action = match self.pileup.action {
            PileupAction::Alert => "alert",
            PileupAction::Bypass => "bypass",
        };
        writeln!(
            out,
            "pileup: threshold {} pods per controller each waiting at least {}, action {action}",
            self.pileup.threshold,
            d(self.pileup.min_wait)
        )?;
        let le = &self.leader_election;
        if le.enabled {
            writeln!(
                out,
                "leader election: enabled, lease {}/{}, duration {}",
                le.namespace,
                le.name,
                d(le.lease_duration)
            )?;
        } else {
            writeln!(out, "leader election: disabled")?;
        }
        writeln!(out, "listen: {}", self.listen)?;
        if let Some(secure) = self.secure_listen {
            let cert = match &self.tls {
                ServingCert::SelfSigned => "a self-signed certificate".to_owned(),
                ServingCert::Files { cert_file, .. } => cert_file.display().to_string(),
            };
            writeln!(
                out,
                "secureListen: {secure} (HTTPS, {cert}; /metrics and /status need a token)"
            )?;
        }
        writeln!(out, "dryRun: {}", self.dry_run)?;
        let events = match self.events {
            EventsMode::PerPatch => "perPatch (one Warning Event per bypass patch)",
            EventsMode::Off => "off (no Events about bypassed pods)",
        };
        writeln!(out, "events: {events}")?;
        let waiting = if self.waiting_events {
            "on (one Normal InitializerWaiting Event per long-waiting pod and initializer)"
        } else {
            "off"
        };
        writeln!(out, "waitingEvents: {waiting}")?;
        writeln!(out, "maxInFlight: {}", self.max_in_flight)?;
        if !self.webhooks.is_empty() {
            writeln!(out, "webhooks: {}", self.webhooks.len())?;
            for w in &self.webhooks {
                let owner = w.owner.as_ref().map_or_else(
                    || "owner the ready endpoints of its Service".to_owned(),
                    |o| format!("owner {o}"),
                );
                let via = match w.bypass_via {
                    types::BypassVia::Auto => "auto",
                    types::BypassVia::Selectors => "selectors",
                };
                let exempt = if w.exempt_namespaces.is_empty() {
                    String::new()
                } else {
                    format!(", exempt {}", w.exempt_namespaces.join(","))
                };
                let opt_in = match w.opt_in {
                    types::OptInMode::Any => String::new(),
                    mode => format!(", optIn {}", mode.as_str()),
                };
                let mut lets = Vec::new();
                if w.exempt_critical_path {
                    lets.push("the critical path".to_owned());
                }
                lets.extend(w.exempt_requesters.iter().map(ToString::to_string));
                lets.extend(w.exempt_operations.iter().map(|o| o.as_str().to_owned()));
                let lets = if lets.is_empty() {
                    String::new()
                } else {
                    format!(", lets through {}", lets.join(","))
                };
                let flapping = if w.flapping.undos == DEFAULT_FLAP_UNDOS
                    && w.flapping.window == DEFAULT_FLAP_WINDOW
                {
                    String::new()
                } else {
                    format!(
                        ", flapping after {} undos in {}",
                        w.flapping.undos,
                        d(w.flapping.window)
                    )
                };
                writeln!(
                    out,
                    "  {}: grace {}, restore after {}, via {via}{exempt}{lets}{opt_in}{flapping}, \
                     {owner}",
                    w.id,
                    d(w.owner_down_grace),
                    d(w.restore_grace)
                )?;
            }
        }
        for w in self.warnings() {
            writeln!(out, "warning: {w}")?;
        }
        Ok(())
    }

    /// The node stage's lines of the summary: every listed step, then the budget and where
    /// evictions may happen once something recreates.
    fn write_node_stage(
        &self,
        out: &mut String,
        d: &dyn Fn(Duration) -> humantime::FormattedDuration,
    ) -> fmt::Result {
        writeln!(out, "init containers: {}", self.init_containers.len())?;
        for step in &self.init_containers {
            let owner = match &step.owner {
                None => "no owner".to_owned(),
                Some(StepOwner::DaemonSet(r)) => format!("owner daemonset {r} (on the pod's node)"),
                Some(StepOwner::Cluster(spec)) => format!("owner {spec}"),
            };
            write!(out, "  {}: {owner}", step.name)?;
            if let Some(deadline) = step.deadline {
                write!(out, ", deadline {}", d(deadline))?;
            }
            if !step.failed_exit_codes.is_empty() {
                let codes: Vec<String> = step
                    .failed_exit_codes
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                write!(out, ", failedExitCodes {}", codes.join(","))?;
            }
            write!(out, ", action {}", step.action.as_str())?;
            if step.action == StepAction::Recreate {
                write!(out, " (repairAfter {})", d(step.repair_after))?;
            }
            if step.opt_in != OptInMode::Any {
                write!(out, ", optIn {}", step.opt_in.as_str())?;
            }
            writeln!(out)?;
        }
        if self
            .init_containers
            .iter()
            .any(|s| s.action == StepAction::Recreate)
        {
            let where_ = if self.evictions.namespaces.is_empty() {
                "every namespace but kube-system".to_owned()
            } else {
                self.evictions.namespaces.join(", ")
            };
            writeln!(
                out,
                "recreate: at most {} per top-level controller per hour, by eviction in {where_}",
                self.recreate.max_per_hour
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secure_listen_takes_given_pem_files_or_is_self_signed() {
        let dir = tempfile::tempdir().unwrap();
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
        let text = format!(
            "secureListen: 127.0.0.1:9778\ntls: {{ certFile: {}, keyFile: {} }}\n",
            cert.display(),
            key.display()
        );
        let config = Config::from_yaml_str(&text, "t.yaml").unwrap();
        assert_eq!(
            config.secure_listen,
            Some("127.0.0.1:9778".parse().unwrap())
        );
        assert_eq!(
            config.tls,
            ServingCert::Files {
                cert_file: cert.clone(),
                key_file: key.clone()
            }
        );
        // Empty strings, as config/example.yaml may write them, mean self-signed.
        let text = "secureListen: 127.0.0.1:9778\ntls: { certFile: \"\", keyFile: \"\" }\n";
        let config = Config::from_yaml_str(text, "t.yaml").unwrap();
        assert_eq!(config.tls, ServingCert::SelfSigned);
        assert_eq!(
            Config::from_yaml_str("{}", "t.yaml").unwrap().secure_listen,
            None
        );
        // A key file that holds a certificate is caught before the guard starts.
        let text = format!(
            "secureListen: 127.0.0.1:9778\ntls: {{ certFile: {}, keyFile: {} }}\n",
            cert.display(),
            cert.display()
        );
        let err = Config::from_yaml_str(&text, "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tls.keyFile") && err.contains("no usable PEM private key"),
            "{err}"
        );
    }

    #[test]
    fn files_elsewhere_keep_their_paths_unchecked_and_everything_else_checked() {
        let text = "secureListen: 0.0.0.0:9778\n\
                    tls: { certFile: /etc/initguard/tls/tls.crt, keyFile: /etc/initguard/tls/tls.key }\n\
                    initializers:\n\
                    - name: a\n\
                    \x20 owner: { http: { url: https://owner:8443/, caFile: /etc/ca.pem } }\n";
        let err = Config::from_yaml_str(text, "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot read"), "on this machine: {err}");
        let config = Config::from_yaml_with(text, "cluster", &Elsewhere).unwrap();
        assert_eq!(
            config.tls,
            ServingCert::Files {
                cert_file: "/etc/initguard/tls/tls.crt".into(),
                key_file: "/etc/initguard/tls/tls.key".into(),
            }
        );
        assert!(
            matches!(&config.initializers[0].owner, Some(OwnerSpec::Http { ca_file: Some(f), .. }) if f == std::path::Path::new("/etc/ca.pem")),
            "{:?}",
            config.initializers[0].owner
        );
        // Only the contents go unchecked: a half-given pair is still refused.
        let err = Config::from_yaml_with(
            "secureListen: 0.0.0.0:9778\ntls: { certFile: /x.crt }\n",
            "cluster",
            &Elsewhere,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("both certFile and keyFile"), "{err}");
    }

    /// The classic "billion laughs": nine levels of nine aliases each.
    fn alias_bomb() -> String {
        let mut text = String::from("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        let mut previous = 'a';
        for name in 'b'..='i' {
            let refs = vec![format!("*{previous}"); 9].join(", ");
            text.push_str(&format!("{name}: &{name} [{refs}]\n"));
            previous = name;
        }
        text
    }

    #[test]
    fn serde_yaml_stops_an_alias_bomb_and_it_is_located_at_the_first_alias() {
        let text = alias_bomb();
        // The expansion limit is what stops it; tests/config.rs bounds the parse's CPU time.
        let layout = yaml::scan(&text).unwrap();
        let e = serde_yaml::from_str::<serde_yaml::Value>(&text).unwrap_err();
        let located = serde_problem(&e, &text, "bomb.yaml", &layout).to_string();
        assert!(
            located.starts_with("bomb.yaml:2:8: repetition limit exceeded: aliases expand"),
            "{located}"
        );
    }

    #[test]
    fn the_position_pass_does_not_expand_aliases() {
        let layout = yaml::scan(&alias_bomb()).unwrap();
        assert_eq!(layout.first_alias, Some(yaml::Pos { line: 2, column: 8 }));
        // 9 keys with 9 entries each, plus the root.
        assert_eq!(layout.node_count(), 9 + 9 * 9 + 1);
    }

    #[test]
    fn a_flood_of_control_characters_is_counted_not_stored() {
        let text = format!("a: \"{}\"\n", "\u{1}".repeat(100_000));
        let e = Config::from_yaml_str(&text, "c.yaml").unwrap_err();
        assert_eq!(e.errors.len(), MAX_REPORTED_ERRORS + 1);
        assert_eq!(
            e.errors[MAX_REPORTED_ERRORS].to_string(),
            "c.yaml:1:55: 99950 more problems not shown; fix the ones above first"
        );
    }

    /// The parser for tests of every module; their files are on disk.
    impl Config {
        pub(crate) fn from_yaml_str(text: &str, file: &str) -> Result<Config, ConfigError> {
            struct Disk;
            impl ReadFile for Disk {
                fn read(&self, path: &std::path::Path) -> std::io::Result<Option<Vec<u8>>> {
                    std::fs::read(path).map(Some)
                }
            }
            Config::from_yaml_with(text, file, &Disk)
        }
    }
}
