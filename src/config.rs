//! Configuration schema (README "Configure"), parsing with located errors, and validation.
//!
//! CONTRACT (owned by the config helper; other modules rely on these public types and methods):
//! `Config::from_yaml_str(text, file_label)`, `Config::load(path)`, the resolved types below,
//! `Config::initializer(name)`, `Config::deadline_for(name)`, `Config::is_opted_in(ns, labels)`,
//! [`LabelSelector`] and the Kubernetes name checks in [`names`].
//!
//! Pipeline: size and character checks → a yaml-rust2 event pass (`locate`: key positions,
//! duplicate keys, extra documents, nesting limit) → serde_yaml into the raw types (`raw`,
//! unknown keys rejected) → `resolve` (defaults and every semantic rule, all problems
//! collected). Every problem is reported as `FILE:LINE:COL: message`.
//!
//! An empty file (or one holding only comments or `null`) is rejected: it is far more often a
//! wrong mount or an empty ConfigMap key than a wish for defaults; `{}` selects every default.

mod locate;
pub mod names;
mod raw;
mod resolve;
mod selector;

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use resolve::{
    DEFAULT_DEADLINE, DEFAULT_LEASE_DURATION, DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE,
    DEFAULT_LISTEN, DEFAULT_MAX_IN_FLIGHT, DEFAULT_OPT_IN_LABEL, DEFAULT_OWNER_DOWN_GRACE,
    DEFAULT_PILEUP_MIN_WAIT, DEFAULT_PILEUP_THRESHOLD, DEFAULT_PROBE_INTERVAL, MAX_DURATION,
    MAX_IN_FLIGHT_LIMIT, parse_object_ref, validate_http_url,
};
pub use selector::{LabelSelector, Requirement, SelectorError, SelectorOp};

/// Largest configuration file accepted, checked before any parsing.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;
/// Most problems reported for one file; the rest are summarized in one line.
pub const MAX_REPORTED_ERRORS: usize = 50;
/// Legacy API servers time a blocked pod CREATE out after about this long.
pub const LEGACY_CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where pending initializers live on a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mechanism {
    /// `spec.schedulingGates[].name` (Kubernetes >= 1.27).
    SchedulingGates,
    /// `metadata.initializers.pending[].name` (Kubernetes 1.7-1.13).
    Initializers,
}

impl Mechanism {
    /// The name used in config, CLI and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::SchedulingGates => "schedulingGates",
            Mechanism::Initializers => "initializers",
        }
    }
}

/// The validated configuration with every default filled in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    pub mechanism: Mechanism,
    pub opt_in: OptIn,
    pub defaults: Defaults,
    /// Listed initializers; each has its deadline resolved (own or default).
    pub initializers: Vec<InitializerConfig>,
    pub unlisted_initializers: UnlistedPolicy,
    pub pileup: Pileup,
    pub leader_election: LeaderElection,
    pub listen: SocketAddr,
    pub dry_run: bool,
    /// Most bypass patches in flight at once (default 16).
    pub max_in_flight: usize,
}

/// Which pods may be modified.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OptIn {
    /// Presence of this label key opts a pod in; the value is ignored.
    pub label: String,
    /// Every pod in these namespaces is opted in.
    pub namespaces: Vec<String>,
}

/// Defaults for initializers that do not set their own values.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Defaults {
    #[serde(with = "humantime_serde")]
    pub deadline: Duration,
    #[serde(with = "humantime_serde")]
    pub owner_down_grace: Duration,
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
}

/// One listed initializer (legacy initializer or scheduling gate name).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializerConfig {
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
}

/// How to tell whether an initializer's controller is alive.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum OwnerSpec {
    /// Up while `status.availableReplicas >= 1`.
    Deployment(ObjectRef),
    /// Up while `renewTime + leaseDurationSeconds` is in the future.
    Lease(ObjectRef),
    /// Up while at least one matching pod is Ready.
    Pods { namespace: String, selector: String },
    /// Up while GET answers 2xx within 1 s. For https, the server certificate is verified
    /// against `ca_file` when given (else the platform's roots), and `cert_file`/`key_file`
    /// (both or neither) are presented as the client certificate.
    Http {
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
            OwnerSpec::Pods { .. } => "pods",
            OwnerSpec::Http { .. } => "http",
        }
    }
}

/// `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
}

/// What to do with initializers not listed in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum UnlistedPolicy {
    Ignore,
    Deadline,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pileup {
    pub threshold: u32,
    pub action: PileupAction,
    /// A pod counts toward a pile only once it has itself waited this long (README "What it guarantees": never early):
    /// a healthy owner's fresh batch is not a pile.
    #[serde(with = "humantime_serde")]
    pub min_wait: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PileupAction {
    Alert,
    Bypass,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElection {
    pub enabled: bool,
    pub namespace: String,
    pub name: String,
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

    /// Whether a pod with these labels in this namespace opted in.
    pub fn is_opted_in(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        labels.contains_key(&self.opt_in.label)
            || self.opt_in.namespaces.iter().any(|n| n == namespace)
    }
}

/// All problems found in one configuration file; Display prints one `FILE:LINE:COL: message`
/// per line.
#[derive(Debug, thiserror::Error)]
#[error("{}", .errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError {
    pub errors: Vec<LocatedError>,
}

/// One located problem.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct LocatedError {
    pub file: String,
    /// 1-based; 0 when only the key path is known (then `message` names the path).
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl LocatedError {
    fn new(file: &str, line: usize, column: usize, message: impl Into<String>) -> LocatedError {
        LocatedError {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }
}

impl ConfigError {
    fn single(file: &str, line: usize, column: usize, message: impl Into<String>) -> ConfigError {
        ConfigError {
            errors: vec![LocatedError::new(file, line, column, message)],
        }
    }

    /// Sort by position (unlocated last) and cap the list at [`MAX_REPORTED_ERRORS`].
    /// `unlisted` counts further problems the caller found but did not keep.
    fn from_problems(file: &str, mut errors: Vec<LocatedError>, unlisted: usize) -> ConfigError {
        errors.sort_by_key(|e| (e.line == 0, e.line, e.column));
        if errors.len() > MAX_REPORTED_ERRORS {
            let hidden = errors.len() - MAX_REPORTED_ERRORS + unlisted;
            let first_hidden = &errors[MAX_REPORTED_ERRORS];
            let (line, column) = (first_hidden.line, first_hidden.column);
            errors.truncate(MAX_REPORTED_ERRORS);
            errors.push(LocatedError::new(
                file,
                line,
                column,
                format!("{hidden} more problems not shown; fix the ones above first"),
            ));
        }
        ConfigError { errors }
    }
}

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
    layout: &locate::Layout,
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

impl Config {
    /// Read and validate the file at `path`. Files over [`MAX_CONFIG_BYTES`] are refused before
    /// they are read in full; the text must be UTF-8.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let unreadable = |e: std::io::Error| {
            ConfigError::single(&file, 0, 0, format!("cannot read the configuration: {e}"))
        };
        let too_large = |size: u64| {
            ConfigError::single(
                &file,
                1,
                1,
                format!(
                    "the file is {size} bytes; a configuration may be at most 1 MiB \
                     ({MAX_CONFIG_BYTES} bytes)"
                ),
            )
        };
        let metadata = std::fs::metadata(path).map_err(unreadable)?;
        if metadata.is_dir() {
            return Err(ConfigError::single(
                &file,
                0,
                0,
                "cannot read the configuration: it is a directory, expected a YAML file",
            ));
        }
        let limit = MAX_CONFIG_BYTES as u64;
        if metadata.len() > limit {
            return Err(too_large(metadata.len()));
        }
        // Reading one byte past the limit catches files that grow and special files.
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
            .map_err(unreadable)?;
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(too_large(bytes.len() as u64));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let (line, column) = position_of(&String::from_utf8_lossy(&bytes[..at]), at);
            ConfigError::single(
                &file,
                line,
                column,
                format!(
                    "invalid UTF-8 (byte 0x{:02X} at offset {at}); the configuration must be \
                     UTF-8 text",
                    bytes.get(at).copied().unwrap_or(0)
                ),
            )
        })?;
        Config::from_yaml_str(&text, &file)
    }

    /// Parse and validate YAML text; `file` labels error locations.
    pub fn from_yaml_str(text: &str, file: &str) -> Result<Config, ConfigError> {
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
        let layout = locate::scan(text).map_err(|e| {
            // yaml-rust2 caps flow nesting at 255 on its own; report one limit.
            let mut message = if e.message == "recursion limit exceeded" {
                format!(
                    "invalid YAML: collections nested more than {} levels deep",
                    locate::MAX_DEPTH
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
        let mut problems = resolve::Problems::new(file, &layout);
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
        writeln!(
            out,
            "defaults: deadline {}, ownerDownGrace {}, probeInterval {}",
            d(self.defaults.deadline),
            d(self.defaults.owner_down_grace),
            d(self.defaults.probe_interval)
        )?;
        writeln!(out, "initializers: {}", self.initializers.len())?;
        for i in &self.initializers {
            write!(out, "  {}: deadline {}", i.name, d(i.deadline))?;
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
        writeln!(out, "dryRun: {}", self.dry_run)?;
        writeln!(out, "maxInFlight: {}", self.max_in_flight)?;
        for w in self.warnings() {
            writeln!(out, "warning: {w}")?;
        }
        Ok(())
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
            OwnerSpec::Deployment(r) | OwnerSpec::Lease(r) => write!(f, "{} {r}", self.kind()),
            OwnerSpec::Pods {
                namespace,
                selector,
            } => write!(f, "pods {namespace} {selector}"),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let layout = locate::scan(&text).unwrap();
        let e = serde_yaml::from_str::<serde_yaml::Value>(&text).unwrap_err();
        let located = serde_problem(&e, &text, "bomb.yaml", &layout).to_string();
        assert!(
            located.starts_with("bomb.yaml:2:8: repetition limit exceeded: aliases expand"),
            "{located}"
        );
    }

    #[test]
    fn the_position_pass_does_not_expand_aliases() {
        let layout = locate::scan(&alias_bomb()).unwrap();
        assert_eq!(layout.first_alias, Some(locate::Pos { line: 2, column: 8 }));
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
}
