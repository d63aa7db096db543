//! Raw → resolved conversion: the one place where defaults are filled in, and where every
//! semantic rule is checked. All problems are collected, each located through the [`Layout`].

use std::collections::HashMap;
use std::fmt::Display;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{InvalidValue, LocatedError};
use super::raw::{
    Count, HumanDuration, RawConfig, RawDefaults, RawEvents, RawEvictions, RawFlapping, RawHttp,
    RawInitContainer, RawInitializer, RawLeaderElection, RawOptIn, RawOwner, RawPileup,
    RawRecreate, RawSwitch, RawTls, RawWebhook,
};
use super::types::{
    AfterRestore, BypassVia, Canary, CanaryResource, Config, Defaults, EventsMode, Evictions,
    Flapping, InitContainerConfig, InitializerConfig, LeaderElection, ObjectRef, OptIn, OptInMode,
    OwnerSpec, Pileup, PileupAction, RecreateBudget, Requester, ServingCert, StepAction, StepOwner,
    Trigger, UnlistedPolicy, WebhookConfig, WebhookId, WebhookKind,
};
use kube_common::Mechanism;
use kube_common::names::{
    validate_dns1123_label, validate_dns1123_subdomain, validate_initializer_name,
    validate_qualified_name,
};
use kube_common::selector::LabelSelector;
use kube_common::yaml::Layout;

/// Default opt-in label key.
pub const DEFAULT_OPT_IN_LABEL: &str = "initguard.io/bypass";
/// Default `defaults.deadline`.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(20);
/// Default `defaults.ownerDownGrace`.
pub const DEFAULT_OWNER_DOWN_GRACE: Duration = Duration::from_secs(5);
/// Default `defaults.probeInterval`.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// Default `pileup.threshold`.
pub const DEFAULT_PILEUP_THRESHOLD: u32 = 3;
/// Default `pileup.minWait`: well below the ~30 s create timeout of legacy API servers, well
/// above the latency of a healthy initializer owner (a fresh batch is not a pile).
pub const DEFAULT_PILEUP_MIN_WAIT: Duration = Duration::from_secs(10);
/// Default leader election Lease namespace.
pub const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";
/// Default leader election Lease name.
pub const DEFAULT_LEASE_NAME: &str = "initguard";
/// Default `leaderElection.leaseDuration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default `listen`.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:9777";
/// Default `restoreGrace` of a listed webhook.
pub const DEFAULT_RESTORE_GRACE: Duration = Duration::from_secs(30);
/// Default `maxInFlight`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 16;
/// Default `defaults.unlistedAlertAfter`: a pod waiting this long on an unlisted initializer
/// alerts.
pub const DEFAULT_UNLISTED_ALERT_AFTER: Duration = Duration::from_secs(3600);
/// Default `repairAfter` of an `initContainers` entry: how long the owner on the pod's node
/// must have been up before a recreate.
pub const DEFAULT_REPAIR_AFTER: Duration = Duration::from_secs(10);
/// Default `recreate.maxPerHour`: recreations per top-level controller per hour.
pub const DEFAULT_MAX_RECREATIONS_PER_HOUR: u32 = 10;
/// Largest `recreate.maxPerHour`, as for a webhook's `maxEvictionsPerHour`.
const MAX_RECREATIONS_PER_HOUR_LIMIT: u32 = 1000;
/// The exit codes `failedExitCodes` may list: a container's exit code is 0-255, and 0 is
/// success.
const EXIT_CODES: std::ops::RangeInclusive<i64> = 1..=255;
/// Largest `maxInFlight`.
pub const MAX_IN_FLIGHT_LIMIT: usize = 1024;
/// Longest accepted duration: one year as humantime counts it (`1y` = 365.25 days). Anything longer is almost surely a typo, and bounding it keeps
/// `timestamp + duration` arithmetic far from overflow everywhere downstream.
pub const MAX_DURATION: Duration = Duration::from_secs(31_557_600);

/// Reads the files a configuration names (TLS certificates and keys), so that the core
/// checks them without touching the file system itself.
pub trait ReadFile {
    /// The whole content of the file at `path`; `None` when the files are on the guard's
    /// machine, not the reader's ([`Elsewhere`]): the path is then kept unchecked.
    fn read(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>>;
}

/// The files of a configuration read from the cluster (the chart's ConfigMap) are mounted in
/// the guard's pod, not on the machine of the one reading it: their contents are not checked
/// here, and the guard checks them when it starts.
pub struct Elsewhere;

impl ReadFile for Elsewhere {
    fn read(&self, _path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        Ok(None)
    }
}

/// Collects located problems.
pub(super) struct Findings<'a> {
    file: &'a str,
    layout: &'a Layout,
    /// Where the TLS files the configuration names are read from.
    files: &'a dyn ReadFile,
    pub list: Vec<LocatedError>,
}

impl<'a> Findings<'a> {
    pub(super) fn new(file: &'a str, layout: &'a Layout, files: &'a dyn ReadFile) -> Findings<'a> {
        Findings {
            file,
            layout,
            files,
            list: Vec::new(),
        }
    }

    /// A problem with the value at `path`, pointed at the value.
    fn value(&mut self, path: &str, message: impl Display) {
        let pos = self.layout.value(path);
        self.push(pos, path, message);
    }

    /// A problem with the entry at `path`, pointed at its key.
    fn key(&mut self, path: &str, message: impl Display) {
        let pos = self.layout.key(path);
        self.push(pos, path, message);
    }

    fn push(&mut self, pos: Option<kube_common::yaml::Pos>, path: &str, message: impl Display) {
        // Without a position (the two parsers disagreed) the path alone must locate it.
        let (line, column) = pos.map_or((0, 0), |p| (p.line, p.column));
        self.list.push(LocatedError {
            file: self.file.to_owned(),
            line,
            column,
            message: format!("{path}: {message}"),
        });
    }
}

/// Lower bound a duration setting must respect.
#[derive(Clone, Copy)]
enum Minimum {
    /// 0 is meaningful (bypass at once, no grace).
    Zero,
    /// Must be greater than zero.
    Positive,
    /// At least one second, in whole seconds (Lease `leaseDurationSeconds` is an integer).
    WholeSeconds,
}

fn duration(
    problems: &mut Findings<'_>,
    path: &str,
    raw: Option<HumanDuration>,
    default: Duration,
    minimum: Minimum,
) -> Duration {
    let Some(HumanDuration(d)) = raw else {
        return default;
    };
    let shown = humantime::format_duration(d);
    if d > MAX_DURATION {
        problems.value(
            path,
            format!("expected a duration of at most 1y, got {shown}"),
        );
        return default;
    }
    match minimum {
        Minimum::Zero => {}
        Minimum::Positive if d.is_zero() => {
            problems.value(path, "expected a duration greater than 0s, got 0s");
        }
        Minimum::Positive => {}
        Minimum::WholeSeconds if d < Duration::from_secs(1) || d.subsec_nanos() != 0 => {
            problems.value(
                path,
                format!("expected a whole number of seconds of at least 1s, got {shown}"),
            );
        }
        Minimum::WholeSeconds => {}
    }
    d
}

/// `namespace/name`, with a DNS-1123 label namespace and a DNS-1123 subdomain name.
pub fn parse_object_ref(text: &str) -> Result<ObjectRef, InvalidValue> {
    let mut parts = text.split('/');
    let (Some(namespace), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(InvalidValue(format!(
            "expected \"namespace/name\", got {text:?}"
        )));
    };
    validate_dns1123_label(namespace).map_err(|e| {
        InvalidValue(format!(
            "expected \"namespace/name\", got {text:?}: namespace: {e}"
        ))
    })?;
    validate_dns1123_subdomain(name).map_err(|e| {
        InvalidValue(format!(
            "expected \"namespace/name\", got {text:?}: name: {e}"
        ))
    })?;
    Ok(ObjectRef {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// An `http://` or `https://` URL with a host.
pub fn validate_http_url(text: &str) -> Result<(), InvalidValue> {
    let expected = "expected an http:// or https:// URL with a host, such as \
                    \"http://10.0.0.5:8080/healthz\"";
    let url = url::Url::parse(text)
        .map_err(|e| InvalidValue(format!("{expected}, got {text:?} ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(InvalidValue(format!(
            "{expected}, got scheme {:?} in {text:?}",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(InvalidValue(format!(
            "{expected}, got {text:?} without a host"
        )));
    }
    Ok(())
}

fn count(
    problems: &mut Findings<'_>,
    path: &str,
    raw: Option<Count>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> u64 {
    match raw {
        None => default,
        Some(Count(n)) if range.contains(&n) => n,
        Some(Count(n)) => {
            problems.value(
                path,
                format!(
                    "expected a whole number from {} to {}, got {n}",
                    range.start(),
                    range.end()
                ),
            );
            default
        }
    }
}

/// `afterRestore: evict`: default `maxWait` for a replacement to be Ready.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(300);

/// `afterRestore: evict`: default `maxEvictionsPerHour` per controller.
const DEFAULT_MAX_EVICTIONS_PER_HOUR: u64 = 10;

/// `flapping`: default undos by others within the window that make a bypass flapping.
pub const DEFAULT_FLAP_UNDOS: usize = 3;
/// `flapping`: default window over which undos count.
pub const DEFAULT_FLAP_WINDOW: Duration = Duration::from_secs(600);

/// Default and floor of a canary's interval: each probe is a request to the API server.
const CANARY_INTERVAL: Duration = Duration::from_secs(10);
const CANARY_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Whose `owner:` is resolved: each takes its own kinds.
#[derive(Clone, Copy)]
enum OwnerOf<'a> {
    /// An `initializers` entry.
    Initializer,
    /// The `webhooks` entry of this webhook (its canary's label).
    Webhook(&'a str),
    /// An `initContainers` entry, the only one that takes a per-node `daemonset`.
    InitContainer,
}

/// `owner:` of an initializer or webhook: every kind but `daemonset`, which `owner` refuses
/// for them.
fn cluster_owner(
    problems: &mut Findings<'_>,
    path: &str,
    raw: RawOwner,
    of: OwnerOf<'_>,
) -> Option<OwnerSpec> {
    match owner(problems, path, raw, of)? {
        StepOwner::Cluster(spec) => Some(spec),
        StepOwner::DaemonSet(_) => None,
    }
}

/// `owner:` of an initializer, a webhook or an init container (`of`); exactly one kind.
fn owner(
    problems: &mut Findings<'_>,
    path: &str,
    raw: RawOwner,
    of: OwnerOf<'_>,
) -> Option<StepOwner> {
    let mut kinds = Vec::new();
    let mut specs = Vec::new();
    let webhook = match of {
        OwnerOf::Webhook(name) => Some(name),
        OwnerOf::Initializer | OwnerOf::InitContainer => None,
    };
    if let Some(raw) = raw.apiserver {
        kinds.push("apiserver");
        let p = format!("{path}.apiserver");
        let before = problems.list.len();
        if webhook.is_none() {
            problems.key(
                &p,
                "expected another owner kind: an apiserver owner (a dry-run canary) judges a \
                 webhook's calls, and is for webhooks only",
            );
        }
        let namespace = raw.namespace.unwrap_or_default();
        if namespace.is_empty() {
            problems.key(
                &p,
                "expected a namespace key (where the dry-run canary is created)",
            );
        } else if let Err(e) = validate_dns1123_label(&namespace) {
            problems.value(&format!("{p}.namespace"), e);
        }
        let labels = raw.labels.unwrap_or_default();
        for (key, value) in &labels {
            if let Err(e) = validate_qualified_name(key) {
                problems.value(&format!("{p}.labels"), format!("label key {key:?}: {e}"));
            } else if let Err(e) = kube_common::names::validate_label_value(value) {
                problems.value(&format!("{p}.labels"), format!("label {key}: {e}"));
            }
        }
        let interval = duration(
            problems,
            &format!("{p}.interval"),
            raw.interval,
            CANARY_INTERVAL,
            Minimum::Positive,
        )
        .max(CANARY_MIN_INTERVAL);
        if problems.list.len() == before {
            specs.push(OwnerSpec::Apiserver(Canary {
                webhook: webhook.unwrap_or_default().to_owned(),
                namespace,
                resource: raw.resource.unwrap_or(CanaryResource::Pods),
                labels,
                interval,
            }));
        }
    }
    let mut daemonset = None;
    if let Some(text) = raw.daemonset {
        kinds.push("daemonset");
        let p = format!("{path}.daemonset");
        if matches!(of, OwnerOf::InitContainer) {
            match parse_object_ref(&text) {
                Ok(r) => daemonset = Some(r),
                Err(e) => problems.value(&p, e),
            }
        } else {
            problems.key(
                &p,
                "expected another owner kind: a daemonset owner is judged on each pod's own \
                 node, and only initContainers entries take one",
            );
        }
    }
    // The kinds named by `namespace/name`.
    type Named = (&'static str, Option<String>, fn(ObjectRef) -> OwnerSpec);
    let named: [Named; 3] = [
        ("deployment", raw.deployment, OwnerSpec::Deployment),
        ("lease", raw.lease, OwnerSpec::Lease),
        ("service", raw.service, OwnerSpec::Service),
    ];
    for (kind, text, spec) in named {
        let Some(text) = text else { continue };
        kinds.push(kind);
        match parse_object_ref(&text) {
            Ok(r) => specs.push(spec(r)),
            Err(e) => problems.value(&format!("{path}.{kind}"), e),
        }
    }
    if let Some(pods) = raw.pods {
        kinds.push("pods");
        let p = format!("{path}.pods");
        let before = problems.list.len();
        let namespace = match pods.namespace {
            None => {
                problems.key(
                    &p,
                    "expected a namespace key (the namespace of the owner's pods)",
                );
                String::new()
            }
            Some(ns) => {
                if let Err(e) = validate_dns1123_label(&ns) {
                    problems.value(&format!("{p}.namespace"), e);
                }
                ns
            }
        };
        let selector = match pods.selector {
            None => {
                problems.key(
                    &p,
                    "expected a selector key (a label selector such as \"app=quota\")",
                );
                String::new()
            }
            Some(text) => {
                let sp = format!("{p}.selector");
                match LabelSelector::parse(&text) {
                    Ok(s) if s.is_empty() => problems.value(
                        &sp,
                        "expected a non-empty label selector such as \"app=quota\"; an empty \
                         one would count every pod in the namespace as the owner",
                    ),
                    Ok(_) => {}
                    Err(e) => problems.value(
                        &sp,
                        format!(
                            "expected a label selector such as \"app=quota\" or \
                             \"tier in (a,b),!canary\", got {text:?}: {e}"
                        ),
                    ),
                }
                text
            }
        };
        if problems.list.len() == before {
            specs.push(OwnerSpec::Pods {
                namespace,
                selector,
            });
        }
    }
    if let Some(http) = raw.http {
        kinds.push("http");
        if let Some(spec) = http_owner(problems, &format!("{path}.http"), http) {
            specs.push(spec);
        }
    }
    let (choices, default) = match of {
        OwnerOf::InitContainer => (
            "daemonset, deployment, lease, service, pods or http",
            "omit owner for none: the deadline and failedExitCodes only",
        ),
        OwnerOf::Initializer | OwnerOf::Webhook(_) => (
            "deployment, lease, service, pods, http or apiserver",
            "omit owner for the default: deadline only for an initializer, the Service's ready \
             endpoints for a webhook",
        ),
    };
    match kinds.len() {
        0 => {
            problems.key(
                path,
                format!("expected exactly one of {choices}, got none ({default})"),
            );
            None
        }
        1 => daemonset
            .map(StepOwner::DaemonSet)
            .or_else(|| specs.pop().map(StepOwner::Cluster)),
        _ => {
            problems.key(
                path,
                format!(
                    "expected exactly one of {choices}, got {}",
                    kinds.join(" and ")
                ),
            );
            None
        }
    }
}

/// `http: URL` or `http: { url, caFile, certFile, keyFile }`. The files are read now, so that
/// a missing or malformed one is a located error rather than an owner that can never be probed.
/// Relative paths are relative to the guard's working directory.
fn http_owner(problems: &mut Findings<'_>, path: &str, raw: RawHttp) -> Option<OwnerSpec> {
    let full = match raw {
        RawHttp::Url(url) => {
            return match validate_http_url(&url) {
                Ok(()) => Some(OwnerSpec::Http {
                    url,
                    ca_file: None,
                    cert_file: None,
                    key_file: None,
                }),
                Err(e) => {
                    problems.value(path, e);
                    None
                }
            };
        }
        RawHttp::Full(full) => full,
    };
    let before = problems.list.len();
    let url = match full.url {
        None => {
            problems.key(path, "expected a url key (the URL to probe)");
            None
        }
        Some(url) => match validate_http_url(&url) {
            Ok(()) => Some(url),
            Err(e) => {
                problems.value(&format!("{path}.url"), e);
                None
            }
        },
    };
    let is_https = url.as_deref().is_some_and(|u| {
        u.get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
    });
    let mut file = |key: &str, text: Option<String>, check: fn(&[u8]) -> Result<(), String>| {
        let text = text?;
        let p = format!("{path}.{key}");
        if url.is_some() && !is_https {
            problems.value(
                &p,
                "only https:// URLs use TLS files; the url is not https://",
            );
            return None;
        }
        if text.is_empty() {
            problems.value(&p, "expected the path of a PEM file, got an empty string");
            return None;
        }
        let read = problems
            .files
            .read(Path::new(&text))
            .map_err(|e| format!("cannot read {text:?}: {e}"))
            .and_then(|bytes| match bytes {
                Some(bytes) => check(&bytes).map_err(|e| format!("{text:?}: {e}")),
                None => Ok(()),
            });
        match read {
            Ok(()) => Some(PathBuf::from(text)),
            Err(e) => {
                problems.value(&p, e);
                None
            }
        }
    };
    let ca_file = file("caFile", full.ca_file, check_certificates);
    let cert_file = file("certFile", full.cert_file, check_certificates);
    let key_file = file("keyFile", full.key_file, check_private_key);
    if cert_file.is_some() != key_file.is_some() && problems.list.len() == before {
        problems.key(
            path,
            "expected both certFile and keyFile (a client certificate needs its key), or neither",
        );
    }
    if problems.list.len() != before {
        return None;
    }
    Some(OwnerSpec::Http {
        url: url?,
        ca_file,
        cert_file,
        key_file,
    })
}

/// `tls`: both files or neither (empty strings count as absent: self-signed). The files are
/// read and checked here, so a bad one fails `check-config`, not the running guard.
fn serving_cert(
    problems: &mut Findings<'_>,
    raw: Option<RawTls>,
    has_secure_listen: bool,
) -> ServingCert {
    let Some(raw) = raw else {
        return ServingCert::SelfSigned;
    };
    let given = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let (cert, key) = (given(raw.cert_file), given(raw.key_file));
    if (cert.is_some() || key.is_some()) && !has_secure_listen {
        problems.key(
            "tls",
            "tls is the certificate of secureListen, which is not set: set secureListen or \
             remove tls",
        );
        return ServingCert::SelfSigned;
    }
    let mut file = |key: &str, text: String, check: fn(&[u8]) -> Result<(), String>| {
        let read = problems
            .files
            .read(Path::new(&text))
            .map_err(|e| format!("cannot read {text:?}: {e}"))
            .and_then(|bytes| match bytes {
                Some(bytes) => check(&bytes).map_err(|e| format!("{text:?}: {e}")),
                None => Ok(()),
            });
        match read {
            Ok(()) => Some(PathBuf::from(text)),
            Err(e) => {
                problems.value(&format!("tls.{key}"), e);
                None
            }
        }
    };
    match (cert, key) {
        (None, None) => ServingCert::SelfSigned,
        (Some(cert), Some(key)) => {
            let cert_file = file("certFile", cert, check_certificates);
            let key_file = file("keyFile", key, check_private_key);
            match (cert_file, key_file) {
                (Some(cert_file), Some(key_file)) => ServingCert::Files {
                    cert_file,
                    key_file,
                },
                _ => ServingCert::SelfSigned,
            }
        }
        _ => {
            problems.key(
                "tls",
                "expected both certFile and keyFile (a certificate needs its key), or neither \
                 for a self-signed certificate",
            );
            ServingCert::SelfSigned
        }
    }
}

/// At least one PEM `CERTIFICATE` block, every one well formed.
fn check_certificates(pem: &[u8]) -> Result<(), String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| format!("not a valid PEM certificate file: {e}"))?;
        count += 1;
    }
    if count == 0 {
        return Err("no PEM CERTIFICATE block found".to_owned());
    }
    Ok(())
}

/// One PEM private key (PKCS#8, PKCS#1 or SEC1).
fn check_private_key(pem: &[u8]) -> Result<(), String> {
    use rustls_pki_types::PrivateKeyDer;
    use rustls_pki_types::pem::PemObject as _;
    PrivateKeyDer::from_pem_slice(pem)
        .map(drop)
        .map_err(|e| format!("no usable PEM private key: {e}"))
}

fn initializer(
    problems: &mut Findings<'_>,
    index: usize,
    raw: RawInitializer,
    defaults: &Defaults,
) -> InitializerConfig {
    let path = format!("initializers[{index}]");
    let name = match raw.name {
        None => {
            problems.key(
                &path,
                "expected a name key (the initializer or scheduling gate name)",
            );
            String::new()
        }
        Some(name) => {
            if let Err(e) = validate_initializer_name(&name) {
                problems.value(&format!("{path}.name"), e);
            }
            name
        }
    };
    InitializerConfig {
        name,
        deadline: duration(
            problems,
            &format!("{path}.deadline"),
            raw.deadline,
            defaults.deadline,
            Minimum::Zero,
        ),
        owner_down_grace: duration(
            problems,
            &format!("{path}.ownerDownGrace"),
            raw.owner_down_grace,
            defaults.owner_down_grace,
            Minimum::Zero,
        ),
        probe_interval: duration(
            problems,
            &format!("{path}.probeInterval"),
            raw.probe_interval,
            defaults.probe_interval,
            Minimum::Positive,
        ),
        owner: raw.owner.and_then(|o| {
            cluster_owner(problems, &format!("{path}.owner"), o, OwnerOf::Initializer)
        }),
        opt_in: raw.opt_in.unwrap_or_default(),
        bypass_on: bypass_on(problems, &format!("{path}.bypassOn"), raw.bypass_on),
    }
}

/// `bypassOn`: sorted, each trigger once; every trigger when absent. An empty list is an
/// error: an initializer that must never be bypassed says `optIn: none`.
fn bypass_on(problems: &mut Findings<'_>, path: &str, raw: Option<Vec<Trigger>>) -> Vec<Trigger> {
    let Some(mut triggers) = raw else {
        return Trigger::ALL.to_vec();
    };
    if triggers.is_empty() {
        problems.value(
            path,
            "expected at least one of deadline, owner_down, pileup (an initializer that must \
             never be bypassed takes optIn: none)",
        );
    }
    triggers.sort();
    triggers.dedup();
    triggers
}

/// `KIND/CONFIGURATION/WEBHOOK`: KIND `validating` or `mutating`, CONFIGURATION a DNS-1123
/// subdomain (an object name), WEBHOOK a DNS-1123 subdomain (the entry's name).
pub fn parse_webhook_id(text: &str) -> Result<WebhookId, InvalidValue> {
    let expected = "expected \"KIND/CONFIGURATION/WEBHOOK\" with KIND validating or mutating, \
                    such as \"validating/pod-policy/pods.policy.example.com\"";
    let mut parts = text.split('/');
    let (Some(kind), Some(configuration), Some(webhook), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(InvalidValue(format!("{expected}, got {text:?}")));
    };
    let kind = match kind {
        "validating" => WebhookKind::Validating,
        "mutating" => WebhookKind::Mutating,
        other => {
            return Err(InvalidValue(format!(
                "{expected}, got kind {other:?} in {text:?}"
            )));
        }
    };
    validate_dns1123_subdomain(configuration)
        .map_err(|e| InvalidValue(format!("{expected}, got {text:?}: configuration: {e}")))?;
    validate_dns1123_subdomain(webhook)
        .map_err(|e| InvalidValue(format!("{expected}, got {text:?}: webhook: {e}")))?;
    Ok(WebhookId {
        kind,
        configuration: configuration.to_owned(),
        webhook: webhook.to_owned(),
    })
}

fn webhook(
    problems: &mut Findings<'_>,
    index: usize,
    raw: RawWebhook,
    defaults: &Defaults,
) -> Option<WebhookConfig> {
    let path = format!("webhooks[{index}]");
    let before = problems.list.len();
    let id = match raw.name {
        None => {
            problems.key(
                &path,
                "expected a name key (KIND/CONFIGURATION/WEBHOOK, such as \
                 \"validating/pod-policy/pods.policy.example.com\")",
            );
            None
        }
        Some(name) => parse_webhook_id(&name)
            .map_err(|e| problems.value(&format!("{path}.name"), e))
            .ok(),
    };
    let exempt_namespaces = raw.exempt_namespaces.unwrap_or_default();
    for (i, ns) in exempt_namespaces.iter().enumerate() {
        if let Err(e) = validate_dns1123_label(ns) {
            problems.value(&format!("{path}.exemptNamespaces[{i}]"), e);
        }
    }
    let mut exempt_requesters = Vec::new();
    for (i, text) in raw.exempt_requesters.unwrap_or_default().iter().enumerate() {
        match Requester::parse(text) {
            Ok(r) => exempt_requesters.push(r),
            Err(e) => problems.value(&format!("{path}.exemptRequesters[{i}]"), e),
        }
    }
    let exempt_operations = raw.exempt_operations.unwrap_or_default();
    let exempt_critical_path = raw.exempt_critical_path.unwrap_or(false);
    let bypass_via = raw.bypass_via.unwrap_or(BypassVia::Auto);
    if bypass_via == BypassVia::Selectors {
        for (key, set) in [
            ("exemptRequesters", !exempt_requesters.is_empty()),
            ("exemptOperations", !exempt_operations.is_empty()),
            ("exemptCriticalPath", exempt_critical_path),
        ] {
            if set {
                problems.value(
                    &format!("{path}.{key}"),
                    "expected bypassVia auto: only a matchConditions expression (Kubernetes \
                     1.28+) can let requesters and operations through, selectors cannot",
                );
            }
        }
    }
    let entry = id.as_ref().map(|i| i.webhook.clone()).unwrap_or_default();
    let owner = raw.owner.and_then(|o| {
        cluster_owner(
            problems,
            &format!("{path}.owner"),
            o,
            OwnerOf::Webhook(&entry),
        )
    });
    // The canary must always reach the webhook, bypassed or not.
    if let Some(OwnerSpec::Apiserver(canary)) = &owner {
        let at = format!("{path}.owner.apiserver.namespace");
        if exempt_namespaces.contains(&canary.namespace) {
            problems.value(
                &at,
                format!(
                    "expected a namespace the bypass does not exempt, got {:?}, which is in \
                     exemptNamespaces",
                    canary.namespace
                ),
            );
        }
        if exempt_critical_path && canary.namespace == "kube-system" {
            problems.value(
                &at,
                "expected a namespace other than kube-system, which exemptCriticalPath lets \
                 through",
            );
        }
        if exempt_operations.contains(&super::types::Operation::Create) {
            problems.value(
                &format!("{path}.exemptOperations"),
                "expected no CREATE with an apiserver owner: its dry-run create must always \
                 reach the webhook",
            );
        }
    }
    let after_restore = raw.after_restore.unwrap_or_default();
    if after_restore != AfterRestore::Ignore
        && id
            .as_ref()
            .is_some_and(|i| i.kind == WebhookKind::Validating)
    {
        problems.value(
            &format!("{path}.afterRestore"),
            "expected ignore: a validating webhook changes nothing, so nothing is missing from \
             the objects admitted while it was bypassed (report and evict are for mutating \
             webhooks)",
        );
    }
    if after_restore != AfterRestore::Evict {
        for (key, set) in [
            ("maxWait", raw.max_wait.is_some()),
            ("evictSingletons", raw.evict_singletons.is_some()),
            ("maxEvictionsPerHour", raw.max_evictions_per_hour.is_some()),
        ] {
            if set {
                problems.value(
                    &format!("{path}.{key}"),
                    "expected afterRestore: evict, the only mode this key applies to",
                );
            }
        }
    }
    let max_wait = duration(
        problems,
        &format!("{path}.maxWait"),
        raw.max_wait,
        DEFAULT_MAX_WAIT,
        Minimum::Positive,
    );
    let max_evictions_per_hour = count(
        problems,
        &format!("{path}.maxEvictionsPerHour"),
        raw.max_evictions_per_hour,
        DEFAULT_MAX_EVICTIONS_PER_HOUR,
        1..=1000,
    );
    let flapping = flapping(problems, &path, raw.flapping);
    let resolved = WebhookConfig {
        id: id?,
        owner,
        owner_down_grace: duration(
            problems,
            &format!("{path}.ownerDownGrace"),
            raw.owner_down_grace,
            defaults.owner_down_grace,
            Minimum::Zero,
        ),
        restore_grace: duration(
            problems,
            &format!("{path}.restoreGrace"),
            raw.restore_grace,
            DEFAULT_RESTORE_GRACE,
            Minimum::Zero,
        ),
        exempt_namespaces,
        bypass_via,
        opt_in: raw.opt_in.unwrap_or_default(),
        exempt_requesters,
        exempt_operations,
        exempt_critical_path,
        probe_interval: defaults.probe_interval,
        after_restore,
        max_wait,
        evict_singletons: raw.evict_singletons.unwrap_or(false),
        max_evictions_per_hour: u32::try_from(max_evictions_per_hour).unwrap_or(u32::MAX),
        flapping,
    };
    (problems.list.len() == before).then_some(resolved)
}

/// `webhooks[i].flapping`: at least one undo, within a window of at least a second (undos are
/// observed through a watch; a shorter window could never hold two).
fn flapping(problems: &mut Findings<'_>, path: &str, raw: Option<RawFlapping>) -> Flapping {
    let (undos, window) = raw.map_or((None, None), |f| (f.undos, f.window));
    let undos = count(
        problems,
        &format!("{path}.flapping.undos"),
        undos,
        DEFAULT_FLAP_UNDOS as u64,
        1..=100,
    );
    let window_path = format!("{path}.flapping.window");
    let window = duration(
        problems,
        &window_path,
        window,
        DEFAULT_FLAP_WINDOW,
        Minimum::Zero,
    );
    if window < Duration::from_secs(1) {
        problems.value(
            &window_path,
            format!(
                "expected a window of at least 1s, got {}",
                humantime::format_duration(window)
            ),
        );
    }
    Flapping {
        // Bounded by the range above.
        undos: usize::try_from(undos).unwrap_or(DEFAULT_FLAP_UNDOS),
        window,
    }
}

/// The one requirement of `selector`, if listed webhooks can be bypassed for it: a bypass adds
/// its negation to the webhook's `namespaceSelector`, which only `matchExpressions` of
/// `In`, `NotIn`, `Exists` and `DoesNotExist` can say.
pub fn webhook_namespace_requirement(
    selector: &LabelSelector,
) -> Result<&kube_common::selector::Requirement, InvalidValue> {
    use kube_common::selector::SelectorOp;
    match selector.requirements() {
        [one] if !matches!(one.op, SelectorOp::GreaterThan | SelectorOp::LessThan) => Ok(one),
        [one] => Err(InvalidValue(format!(
            "expected a requirement a webhook's namespaceSelector can negate (=, !=, in, notin, \
             key, !key) while webhooks are listed, got {one}"
        ))),
        many => Err(InvalidValue(format!(
            "expected a single requirement while webhooks are listed (its negation is added to \
             each bypassed webhook's namespaceSelector, and the negation of several cannot be \
             said there), got {}",
            many.len()
        ))),
    }
}

/// Fill in defaults and check every rule, one section at a time. Returns the
/// configuration even when problems were found; the caller discards it then.
pub(super) fn resolve(raw: RawConfig, problems: &mut Findings<'_>) -> Config {
    let opt_in = opt_in(problems, raw.opt_in);
    let defaults = defaults(problems, raw.defaults);
    let initializers = initializers(problems, raw.initializers, &defaults);
    let pileup = pileup(problems, raw.pileup);
    let leader_election = leader_election(problems, raw.leader_election);
    let (listen, secure_listen, tls) = serving(problems, raw.listen, raw.secure_listen, raw.tls);
    let max_in_flight = count(
        problems,
        "maxInFlight",
        raw.max_in_flight,
        DEFAULT_MAX_IN_FLIGHT as u64,
        1..=MAX_IN_FLIGHT_LIMIT as u64,
    );
    let webhooks = webhooks(problems, raw.webhooks, &defaults, &opt_in);
    let (events, waiting_events) = events(problems, raw.events, raw.waiting_events);
    let init_containers = init_containers(problems, raw.init_containers);
    Config {
        mechanism: raw.mechanism.unwrap_or(Mechanism::SchedulingGates),
        opt_in,
        defaults,
        initializers,
        unlisted_initializers: raw.unlisted_initializers.unwrap_or(UnlistedPolicy::Ignore),
        pileup,
        leader_election,
        listen,
        secure_listen,
        tls,
        dry_run: raw.dry_run.unwrap_or(false),
        events,
        waiting_events,
        // Bounded by MAX_IN_FLIGHT_LIMIT above.
        max_in_flight: usize::try_from(max_in_flight).unwrap_or(DEFAULT_MAX_IN_FLIGHT),
        webhooks,
        init_containers,
        recreate: recreate(problems, raw.recreate),
        evictions: evictions(problems, raw.evictions),
    }
}

/// `optIn`: the label, the listed namespaces and the namespace selector.
fn opt_in(problems: &mut Findings<'_>, raw: Option<RawOptIn>) -> OptIn {
    raw.map_or_else(
        || OptIn {
            label: DEFAULT_OPT_IN_LABEL.to_owned(),
            namespaces: Vec::new(),
            namespace_selector: String::new(),
            selector: None,
        },
        |o| {
            let label = o.label.unwrap_or_else(|| DEFAULT_OPT_IN_LABEL.to_owned());
            if let Err(e) = validate_qualified_name(&label) {
                problems.value("optIn.label", format!("expected a label key: {e}"));
            }
            let namespaces = o.namespaces.unwrap_or_default();
            for (i, ns) in namespaces.iter().enumerate() {
                if let Err(e) = validate_dns1123_label(ns) {
                    problems.value(&format!("optIn.namespaces[{i}]"), e);
                }
            }
            let namespace_selector = o.namespace_selector.unwrap_or_default();
            let selector = match LabelSelector::parse(&namespace_selector) {
                Ok(s) if s.is_empty() => None,
                Ok(s) => Some(s),
                Err(e) => {
                    problems.value(
                        "optIn.namespaceSelector",
                        format!(
                            "expected a label selector such as \"initguard.io/opt-in=true\", \
                             got {namespace_selector:?}: {e}"
                        ),
                    );
                    None
                }
            };
            OptIn {
                label,
                namespaces,
                namespace_selector,
                selector,
            }
        },
    )
}

/// `defaults`: what an initializer or webhook without its own setting uses.
fn defaults(problems: &mut Findings<'_>, raw: Option<RawDefaults>) -> Defaults {
    let (deadline, grace, probe, unlisted_alert) = match raw {
        Some(d) => (
            d.deadline,
            d.owner_down_grace,
            d.probe_interval,
            d.unlisted_alert_after,
        ),
        None => (None, None, None, None),
    };
    Defaults {
        deadline: duration(
            problems,
            "defaults.deadline",
            deadline,
            DEFAULT_DEADLINE,
            Minimum::Zero,
        ),
        owner_down_grace: duration(
            problems,
            "defaults.ownerDownGrace",
            grace,
            DEFAULT_OWNER_DOWN_GRACE,
            Minimum::Zero,
        ),
        probe_interval: duration(
            problems,
            "defaults.probeInterval",
            probe,
            DEFAULT_PROBE_INTERVAL,
            Minimum::Positive,
        ),
        unlisted_alert_after: duration(
            problems,
            "defaults.unlistedAlertAfter",
            unlisted_alert,
            DEFAULT_UNLISTED_ALERT_AFTER,
            Minimum::Positive,
        ),
    }
}

/// `initializers`: each entry, and each name once.
fn initializers(
    problems: &mut Findings<'_>,
    raw: Option<Vec<RawInitializer>>,
    defaults: &Defaults,
) -> Vec<InitializerConfig> {
    let mut initializers = Vec::new();
    let mut first_index: HashMap<String, usize> = HashMap::new();
    for (i, raw_init) in raw.unwrap_or_default().into_iter().enumerate() {
        let init = initializer(problems, i, raw_init, defaults);
        once(
            problems,
            &mut first_index,
            ("initializers", "initializer"),
            i,
            &init.name,
        );
        initializers.push(init);
    }
    initializers
}

/// Reports `name`, entry `index` of the list `list` (entries called `what`), when an earlier
/// entry has it; records it otherwise. Empty names are reported elsewhere.
fn once(
    problems: &mut Findings<'_>,
    first_index: &mut HashMap<String, usize>,
    (list, what): (&str, &str),
    index: usize,
    name: &str,
) {
    if name.is_empty() {
        return;
    }
    match first_index.get(name) {
        Some(&first) => {
            let line = problems
                .layout
                .value(&format!("{list}[{first}].name"))
                .map_or(String::new(), |p| format!(", line {}", p.line));
            problems.value(
                &format!("{list}[{index}].name"),
                format!(
                    "duplicate {what} {name:?}: already listed at {list}[{first}]{line}; expected \
                     each name once"
                ),
            );
        }
        None => {
            first_index.insert(name.to_owned(), index);
        }
    }
}

/// `initContainers`: each entry of the node stage, and each name once.
fn init_containers(
    problems: &mut Findings<'_>,
    raw: Option<Vec<RawInitContainer>>,
) -> Vec<InitContainerConfig> {
    let mut steps = Vec::new();
    let mut first_index: HashMap<String, usize> = HashMap::new();
    for (i, raw_step) in raw.unwrap_or_default().into_iter().enumerate() {
        let step = init_container(problems, i, raw_step);
        once(
            problems,
            &mut first_index,
            ("initContainers", "init container"),
            i,
            &step.name,
        );
        steps.push(step);
    }
    steps
}

/// `initContainers[index]`. Unlike an initializer's, no key falls back to `defaults`: an init
/// step has no deadline unless it sets one (an image still pulling is not stuck).
fn init_container(
    problems: &mut Findings<'_>,
    index: usize,
    raw: RawInitContainer,
) -> InitContainerConfig {
    let path = format!("initContainers[{index}]");
    let name = match raw.name {
        None => {
            problems.key(
                &path,
                "expected a name key (the init container's name in the pod spec)",
            );
            String::new()
        }
        Some(name) => {
            // Container names are DNS-1123 labels (apimachinery's IsDNS1123Label).
            if let Err(e) = validate_dns1123_label(&name) {
                problems.value(
                    &format!("{path}.name"),
                    format!("expected a container name: {e}"),
                );
            }
            name
        }
    };
    let deadline = raw.deadline.map(|given| {
        let at = format!("{path}.deadline");
        if given.0.is_zero() {
            // Minimum::Positive, with the reason.
            problems.value(
                &at,
                "expected a duration greater than 0s, got 0s: the deadline counts from the \
                 pod's binding, so 0s would report every pod with this init container at once \
                 (omit deadline for none)",
            );
            return given.0;
        }
        duration(problems, &at, Some(given), given.0, Minimum::Positive)
    });
    let codes_given = raw
        .failed_exit_codes
        .as_ref()
        .is_some_and(|c| !c.is_empty());
    let mut failed_exit_codes = Vec::new();
    for (i, &code) in raw.failed_exit_codes.iter().flatten().enumerate() {
        match i32::try_from(code) {
            Ok(c) if EXIT_CODES.contains(&code) => failed_exit_codes.push(c),
            _ => {
                let why = if code == 0 {
                    "0 is success"
                } else {
                    "a container's exit code is 0-255"
                };
                problems.value(
                    &format!("{path}.failedExitCodes[{i}]"),
                    format!(
                        "expected an exit code from {} to {}, got {code} ({why})",
                        EXIT_CODES.start(),
                        EXIT_CODES.end()
                    ),
                );
            }
        }
    }
    failed_exit_codes.sort_unstable();
    failed_exit_codes.dedup();
    let action = raw.action.unwrap_or_default();
    if action == StepAction::Recreate && raw.deadline.is_none() && !codes_given {
        problems.value(
            &format!("{path}.action"),
            "expected a deadline or failedExitCodes with action: recreate: without either \
             nothing could ever trigger a recreate (say action: report, or set one of them)",
        );
    }
    InitContainerConfig {
        name,
        owner: raw.owner.and_then(|o| {
            owner(
                problems,
                &format!("{path}.owner"),
                o,
                OwnerOf::InitContainer,
            )
        }),
        deadline,
        failed_exit_codes,
        action,
        repair_after: duration(
            problems,
            &format!("{path}.repairAfter"),
            raw.repair_after,
            DEFAULT_REPAIR_AFTER,
            Minimum::Zero,
        ),
        opt_in: raw.opt_in.unwrap_or_default(),
    }
}

/// `recreate`: the node stage's budget per top-level controller.
fn recreate(problems: &mut Findings<'_>, raw: Option<RawRecreate>) -> RecreateBudget {
    let max = count(
        problems,
        "recreate.maxPerHour",
        raw.and_then(|r| r.max_per_hour),
        u64::from(DEFAULT_MAX_RECREATIONS_PER_HOUR),
        1..=u64::from(MAX_RECREATIONS_PER_HOUR_LIMIT),
    );
    RecreateBudget {
        // Bounded by the range above.
        max_per_hour: u32::try_from(max).unwrap_or(DEFAULT_MAX_RECREATIONS_PER_HOUR),
    }
}

/// `evictions`: the namespaces evictions are confined to (none listed: all but kube-system).
fn evictions(problems: &mut Findings<'_>, raw: Option<RawEvictions>) -> Evictions {
    let namespaces = raw.and_then(|e| e.namespaces).unwrap_or_default();
    for (i, ns) in namespaces.iter().enumerate() {
        if let Err(e) = validate_dns1123_label(ns) {
            problems.value(&format!("evictions.namespaces[{i}]"), e);
        }
    }
    Evictions { namespaces }
}

/// `pileup`: when a controller's stuck pods count as a pile, and what then.
fn pileup(problems: &mut Findings<'_>, raw: Option<RawPileup>) -> Pileup {
    match raw {
        None => Pileup {
            threshold: DEFAULT_PILEUP_THRESHOLD,
            action: PileupAction::Alert,
            min_wait: DEFAULT_PILEUP_MIN_WAIT,
        },
        Some(p) => Pileup {
            threshold: u32::try_from(count(
                problems,
                "pileup.threshold",
                p.threshold,
                u64::from(DEFAULT_PILEUP_THRESHOLD),
                1..=u64::from(u32::MAX),
            ))
            .unwrap_or(DEFAULT_PILEUP_THRESHOLD),
            action: p.action.unwrap_or(PileupAction::Alert),
            min_wait: duration(
                problems,
                "pileup.minWait",
                p.min_wait,
                DEFAULT_PILEUP_MIN_WAIT,
                Minimum::Zero,
            ),
        },
    }
}

/// `leaderElection`: the Lease and its duration.
fn leader_election(problems: &mut Findings<'_>, raw: Option<RawLeaderElection>) -> LeaderElection {
    {
        let (enabled, namespace, name, lease) = match raw {
            Some(l) => (l.enabled, l.namespace, l.name, l.lease_duration),
            None => (None, None, None, None),
        };
        let namespace = namespace.unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_owned());
        if let Err(e) = validate_dns1123_label(&namespace) {
            problems.value("leaderElection.namespace", e);
        }
        let name = name.unwrap_or_else(|| DEFAULT_LEASE_NAME.to_owned());
        if let Err(e) = validate_dns1123_subdomain(&name) {
            problems.value("leaderElection.name", e);
        }
        LeaderElection {
            enabled: enabled.unwrap_or(true),
            namespace,
            name,
            lease_duration: duration(
                problems,
                "leaderElection.leaseDuration",
                lease,
                DEFAULT_LEASE_DURATION,
                Minimum::WholeSeconds,
            ),
        }
    }
}

/// `listen`, `secureListen` and `tls`: the two ports and the serving certificate.
fn serving(
    problems: &mut Findings<'_>,
    listen: Option<String>,
    secure_listen: Option<String>,
    tls: Option<RawTls>,
) -> (SocketAddr, Option<SocketAddr>, ServingCert) {
    let has_secure_listen = secure_listen.is_some();
    let default_listen = SocketAddr::from(([0, 0, 0, 0], 9777));
    let listen = match listen {
        None => default_listen,
        Some(text) => text.trim().parse().unwrap_or_else(|_| {
            problems.value(
                "listen",
                format!(
                    "expected an IP address and port such as \"{DEFAULT_LISTEN}\" or \
                     \"[::]:9777\", got {text:?}"
                ),
            );
            default_listen
        }),
    };

    let secure_listen = secure_listen.and_then(|text| {
        let parsed = text.trim().parse::<SocketAddr>().ok();
        if parsed.is_none() {
            problems.value(
                "secureListen",
                format!("expected an IP address and port such as \"0.0.0.0:9778\", got {text:?}"),
            );
        }
        parsed
    });
    if let Some(secure) = secure_listen
        && secure == listen
    {
        problems.value(
            "secureListen",
            format!("must differ from listen ({listen}): one port serves one protocol"),
        );
    }
    let tls = serving_cert(problems, tls, has_secure_listen);
    (listen, secure_listen, tls)
}

/// `webhooks`: each entry, each webhook once, canaries the bypass cannot reach, and a
/// namespace selector a webhook's `namespaceSelector` can negate.
fn webhooks(
    problems: &mut Findings<'_>,
    raw: Option<Vec<RawWebhook>>,
    defaults: &Defaults,
    opt_in: &OptIn,
) -> Vec<WebhookConfig> {
    let mut webhooks: Vec<WebhookConfig> = Vec::new();
    let mut first_webhook: HashMap<WebhookId, usize> = HashMap::new();
    for (i, raw_webhook) in raw.unwrap_or_default().into_iter().enumerate() {
        let Some(resolved) = webhook(problems, i, raw_webhook, defaults) else {
            continue;
        };
        if let Some(OwnerSpec::Apiserver(canary)) = &resolved.owner
            && canary.labels.contains_key(&opt_in.label)
        {
            problems.value(
                &format!("webhooks[{i}].owner.apiserver.labels"),
                format!(
                    "expected labels without the opt-in label {:?}: a bypass would let the \
                     canary through, and it could never see the webhook fail",
                    opt_in.label
                ),
            );
        }
        if let Some(OwnerSpec::Apiserver(canary)) = &resolved.owner
            && resolved.opt_in != OptInMode::None
            && opt_in.namespaces.contains(&canary.namespace)
        {
            problems.value(
                &format!("webhooks[{i}].owner.apiserver.namespace"),
                format!(
                    "expected a namespace that is not opted in, got {:?}, which is in \
                     optIn.namespaces (the canary must always reach the webhook)",
                    canary.namespace
                ),
            );
        }
        if let Some(first) = first_webhook.get(&resolved.id) {
            problems.value(
                &format!("webhooks[{i}].name"),
                format!(
                    "duplicate webhook \"{}\": already listed at webhooks[{first}]; expected each \
                     webhook once",
                    resolved.id
                ),
            );
            continue;
        }
        first_webhook.insert(resolved.id.clone(), i);
        webhooks.push(resolved);
    }
    // A bypassed webhook lets a selected namespace through by the negation of the selector,
    // added to its namespaceSelector (matchConditions cannot see namespace labels): one
    // requirement that matchExpressions can hold, or none at all.
    if let Some(selector) = &opt_in.selector
        && webhooks.iter().any(|w| w.opt_in != OptInMode::None)
        && let Err(e) = webhook_namespace_requirement(selector)
    {
        problems.value("optIn.namespaceSelector", e);
    }
    webhooks
}

/// `events` and `waitingEvents`.
fn events(
    problems: &mut Findings<'_>,
    events: Option<RawEvents>,
    waiting_events: Option<RawSwitch>,
) -> (EventsMode, bool) {
    let events = events.map_or(EventsMode::PerPatch, |e| e.0);
    // On by default, off with `events: off`; asking for it with Events off is a contradiction.
    let waiting_events = match waiting_events.map(|w| w.0) {
        Some(true) if events == EventsMode::Off => {
            problems.value(
                "waitingEvents",
                "expected off (or no waitingEvents) with events: off, got on: waitingEvents are \
                 Events too",
            );
            false
        }
        Some(on) => on,
        None => events == EventsMode::PerPatch,
    };
    (events, waiting_events)
}
