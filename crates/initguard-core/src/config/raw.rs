//! The configuration file exactly as written: every key optional, unknown keys rejected.
//! Defaults are filled in by `resolve`, never here.

use std::fmt;
use std::time::Duration;

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use kube_common::Mechanism;

use super::types::{
    AfterRestore, BypassVia, CanaryResource, EventsMode, Operation, OptInMode, PileupAction,
    StepAction, Trigger, UnlistedPolicy,
};

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping of initguard settings (mechanism, optIn, defaults, initializers, ...)"
)]
#[schemars(rename = "Config")]
pub(super) struct RawConfig {
    pub mechanism: Option<Mechanism>,
    pub opt_in: Option<RawOptIn>,
    pub defaults: Option<RawDefaults>,
    pub initializers: Option<Vec<RawInitializer>>,
    pub unlisted_initializers: Option<UnlistedPolicy>,
    pub pileup: Option<RawPileup>,
    pub leader_election: Option<RawLeaderElection>,
    pub listen: Option<String>,
    pub secure_listen: Option<String>,
    pub tls: Option<RawTls>,
    pub dry_run: Option<bool>,
    pub events: Option<RawEvents>,
    pub waiting_events: Option<RawSwitch>,
    pub max_in_flight: Option<Count>,
    pub webhooks: Option<Vec<RawWebhook>>,
    pub init_containers: Option<Vec<RawInitContainer>>,
    pub recreate: Option<RawRecreate>,
    pub evictions: Option<RawEvictions>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "an init container entry: a mapping with keys name, owner, deadline, \
                 failedExitCodes, action, repairAfter and optIn"
)]
#[schemars(rename = "InitContainer")]
pub(super) struct RawInitContainer {
    pub name: Option<String>,
    pub owner: Option<RawOwner>,
    pub deadline: Option<HumanDuration>,
    // Any integer here, so that `resolve` names the entry and the allowed range.
    pub failed_exit_codes: Option<Vec<i64>>,
    pub action: Option<StepAction>,
    pub repair_after: Option<HumanDuration>,
    pub opt_in: Option<OptInMode>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with key maxPerHour"
)]
#[schemars(rename = "Recreate")]
pub(super) struct RawRecreate {
    pub max_per_hour: Option<Count>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with key namespaces"
)]
#[schemars(rename = "Evictions")]
pub(super) struct RawEvictions {
    pub namespaces: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a webhook entry: a mapping with keys name, owner, ownerDownGrace, restoreGrace, \
                 exemptNamespaces, exemptRequesters, exemptOperations, exemptCriticalPath, \
                 bypassVia, optIn, afterRestore, maxWait, evictSingletons and \
                 maxEvictionsPerHour"
)]
#[schemars(rename = "Webhook")]
pub(super) struct RawWebhook {
    pub name: Option<String>,
    pub owner: Option<RawOwner>,
    pub owner_down_grace: Option<HumanDuration>,
    pub restore_grace: Option<HumanDuration>,
    pub exempt_namespaces: Option<Vec<String>>,
    pub bypass_via: Option<BypassVia>,
    pub opt_in: Option<OptInMode>,
    pub exempt_requesters: Option<Vec<String>>,
    pub exempt_operations: Option<Vec<Operation>>,
    pub exempt_critical_path: Option<bool>,
    pub after_restore: Option<AfterRestore>,
    pub max_wait: Option<HumanDuration>,
    pub evict_singletons: Option<bool>,
    pub max_evictions_per_hour: Option<Count>,
    pub flapping: Option<RawFlapping>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys undos and window"
)]
#[schemars(rename = "Flapping")]
pub(super) struct RawFlapping {
    pub undos: Option<Count>,
    pub window: Option<HumanDuration>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys label, namespaces and namespaceSelector"
)]
#[schemars(rename = "OptIn")]
pub(super) struct RawOptIn {
    pub label: Option<String>,
    pub namespaces: Option<Vec<String>>,
    pub namespace_selector: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys deadline, ownerDownGrace, probeInterval and \
                 unlistedAlertAfter"
)]
#[schemars(rename = "Defaults")]
pub(super) struct RawDefaults {
    pub deadline: Option<HumanDuration>,
    pub owner_down_grace: Option<HumanDuration>,
    pub probe_interval: Option<HumanDuration>,
    pub unlisted_alert_after: Option<HumanDuration>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "an initializer entry: a mapping with keys name, deadline, ownerDownGrace, \
                 probeInterval, owner, optIn and bypassOn"
)]
#[schemars(rename = "Initializer")]
pub(super) struct RawInitializer {
    pub name: Option<String>,
    pub deadline: Option<HumanDuration>,
    pub owner_down_grace: Option<HumanDuration>,
    pub probe_interval: Option<HumanDuration>,
    pub owner: Option<RawOwner>,
    pub opt_in: Option<OptInMode>,
    pub bypass_on: Option<Vec<Trigger>>,
}

/// A one-key map; parsed as a struct so that zero or several kinds get a clear error.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "an owner: a mapping with one of deployment, lease, service, pods, http, \
                 apiserver or daemonset"
)]
// "Exactly one kind" is left to the parser's message: a null kind beside another counts as
// absent there, which minProperties/maxProperties would refuse.
#[schemars(
    rename = "Owner",
    description = "Who removes the initializer, serves the webhook or runs the node agent an \
                   init container waits on: exactly one kind."
)]
pub(super) struct RawOwner {
    pub deployment: Option<String>,
    pub lease: Option<String>,
    pub service: Option<String>,
    pub pods: Option<RawPods>,
    pub http: Option<RawHttp>,
    pub apiserver: Option<RawCanary>,
    // Judged per node: only `initContainers` entries take it (`resolve` says so).
    pub daemonset: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys namespace, resource, labels and interval"
)]
#[schemars(rename = "ApiserverOwner")]
pub(super) struct RawCanary {
    pub namespace: Option<String>,
    pub resource: Option<CanaryResource>,
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    pub interval: Option<HumanDuration>,
}

/// `tls: { certFile, keyFile }` of the HTTPS listener; both empty or absent: self-signed.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys certFile and keyFile"
)]
#[schemars(rename = "Tls")]
pub(super) struct RawTls {
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

/// `http: "URL"`, or `http: { url, caFile, certFile, keyFile }` for https with a private CA
/// or a client certificate.
#[derive(Debug)]
pub(super) enum RawHttp {
    Url(String),
    Full(RawHttpOwner),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys url, caFile, certFile and keyFile"
)]
#[schemars(rename = "HttpOwner")]
pub(super) struct RawHttpOwner {
    pub url: Option<String>,
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

impl<'de> Deserialize<'de> for RawHttp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HttpVisitor;

        impl<'de> Visitor<'de> for HttpVisitor {
            type Value = RawHttp;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a URL such as \"http://10.0.0.5:8080/healthz\" or a mapping with keys url, \
                     caFile, certFile and keyFile",
                )
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<RawHttp, E> {
                Ok(RawHttp::Url(text.to_owned()))
            }

            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<RawHttp, A::Error> {
                RawHttpOwner::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawHttp::Full)
            }
        }

        deserializer.deserialize_any(HttpVisitor)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys namespace and selector"
)]
#[schemars(rename = "PodsOwner")]
pub(super) struct RawPods {
    pub namespace: Option<String>,
    pub selector: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys threshold, action and minWait"
)]
#[schemars(rename = "Pileup")]
pub(super) struct RawPileup {
    pub threshold: Option<Count>,
    pub action: Option<PileupAction>,
    pub min_wait: Option<HumanDuration>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a mapping with keys enabled, namespace, name and leaseDuration"
)]
#[schemars(rename = "LeaderElection")]
pub(super) struct RawLeaderElection {
    pub enabled: Option<bool>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub lease_duration: Option<HumanDuration>,
}

/// A humantime duration string (`20s`, `1m30s`, `0s`). Bare numbers are rejected: a unit is
/// always required, so `20` cannot silently mean 20 ns or 20 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit such as \"20s\", \"1m30s\" or \"0s\"")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<HumanDuration, E> {
                humantime::parse_duration(text.trim())
                    .map(HumanDuration)
                    .map_err(|e| {
                        E::custom(format!(
                            "expected a duration with a unit such as \"20s\", \"1m30s\" or \
                             \"0s\", got {text:?} ({e})"
                        ))
                    })
            }
        }

        deserializer.deserialize_str(DurationVisitor)
    }
}

/// A non-negative whole number; negative, fractional and oversized values get a clear error
/// here, range checks happen in `resolve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Count(pub u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;

        impl Visitor<'_> for CountVisitor {
            type Value = Count;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                u64::try_from(v).map(Count).map_err(|_| {
                    E::custom(format!("expected a whole number of at least 1, got {v}"))
                })
            }

            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Count, E> {
                u64::try_from(v).map(Count).map_err(|_| {
                    E::custom(format!(
                        "expected a whole number, got {v} which is too large"
                    ))
                })
            }

            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Count, E> {
                Err(E::custom(format!(
                    "expected a whole number of at least 1, got {v}"
                )))
            }
        }

        deserializer.deserialize_any(CountVisitor)
    }
}

/// `events`: `perPatch` or `off`. Helm renders values as YAML 1.1, where a bare `off` is the
/// boolean false (and `on` true), so `events: off` in a chart's values reaches the guard as
/// `false`: booleans are accepted too, false meaning off.
#[derive(Debug)]
pub(super) struct RawEvents(pub EventsMode);

impl<'de> Deserialize<'de> for RawEvents {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EventsVisitor;

        impl Visitor<'_> for EventsVisitor {
            type Value = RawEvents;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("perPatch or off")
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawEvents, E> {
                Ok(RawEvents(if v {
                    EventsMode::PerPatch
                } else {
                    EventsMode::Off
                }))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawEvents, E> {
                match v {
                    "perPatch" => Ok(RawEvents(EventsMode::PerPatch)),
                    "off" => Ok(RawEvents(EventsMode::Off)),
                    other => Err(E::unknown_variant(other, &["perPatch", "off"])),
                }
            }
        }

        deserializer.deserialize_any(EventsVisitor)
    }
}

/// `on` or `off` (`waitingEvents`). YAML 1.1, as Helm renders values, reads a bare `on` and
/// `off` as booleans, so booleans are accepted too.
#[derive(Debug)]
pub(super) struct RawSwitch(pub bool);

impl<'de> Deserialize<'de> for RawSwitch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SwitchVisitor;

        impl Visitor<'_> for SwitchVisitor {
            type Value = RawSwitch;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("on or off")
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawSwitch, E> {
                Ok(RawSwitch(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawSwitch, E> {
                match v {
                    "on" => Ok(RawSwitch(true)),
                    "off" => Ok(RawSwitch(false)),
                    other => Err(E::unknown_variant(other, &["on", "off"])),
                }
            }
        }

        deserializer.deserialize_any(SwitchVisitor)
    }
}

// The JSON Schema of what the hand-written visitors above accept (the config's schema is
// generated from these types: `config::json_schema`).

impl JsonSchema for RawHttp {
    fn schema_name() -> Cow<'static, str> {
        "HttpOwnerOrUrl".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A URL such as http://10.0.0.5:8080/healthz, or url, caFile, certFile and keyFile.",
            "anyOf": [{ "type": "string" }, generator.subschema_for::<RawHttpOwner>()]
        })
    }
}

impl JsonSchema for HumanDuration {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // Digits then a unit, repeated: "20s", "1m30s", "1h 5m"; a bare number has no unit.
        json_schema!({
            "type": "string",
            "pattern": "^\\s*([0-9]+\\s*[a-zA-Z\u{b5}]+\\s*)+$"
        })
    }
}

impl JsonSchema for Count {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Count".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "integer", "minimum": 0 })
    }
}

impl JsonSchema for RawEvents {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Events".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "perPatch or off (false, as YAML 1.1 reads a bare off, is off too).",
            "anyOf": [{ "enum": ["perPatch", "off"] }, { "type": "boolean" }]
        })
    }
}

impl JsonSchema for RawSwitch {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Switch".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "on or off (true and false, as YAML 1.1 reads a bare on and off, too).",
            "anyOf": [{ "enum": ["on", "off"] }, { "type": "boolean" }]
        })
    }
}
