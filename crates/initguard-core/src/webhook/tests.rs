//! The webhook guard's invariants, checked by applying the patches with an independent JSON
//! Patch implementation (`json_patch::patch`, as the API server would) and comparing objects.

use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::patch::{bypass_patch, forget_patch, restore_patch};
use super::*;
use crate::config::{BypassVia, WebhookId};

const LABEL: &str = "initguard.io/bypass";

/// The canary clause every bypass condition starts with.
const CANARY: &str = "(object != null && has(object.metadata) && has(object.metadata.labels) && 'initguard.io/canary' in object.metadata.labels)";

fn t(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
}

fn listed(name: &str) -> WebhookConfig {
    WebhookConfig {
        id: WebhookId {
            kind: WebhookKind::Validating,
            configuration: "policy".to_owned(),
            webhook: name.to_owned(),
        },
        owner: None,
        owner_down_grace: Duration::from_secs(10),
        restore_grace: Duration::from_secs(30),
        exempt_namespaces: vec!["policy-system".to_owned()],
        bypass_via: BypassVia::Auto,
        opt_in: OptInMode::Any,
        exempt_requesters: Vec::new(),
        exempt_operations: Vec::new(),
        exempt_critical_path: false,
        probe_interval: Duration::from_secs(2),
        after_restore: crate::config::AfterRestore::Ignore,
        max_wait: Duration::from_secs(300),
        evict_singletons: false,
        max_evictions_per_hour: 10,
        flapping: crate::config::Flapping {
            undos: crate::config::DEFAULT_FLAP_UNDOS,
            window: crate::config::DEFAULT_FLAP_WINDOW,
        },
    }
}

/// Who passes: the label and `namespaces` only.
fn passing(label: Option<&str>, namespaces: &[String]) -> LetThrough {
    LetThrough {
        label: label.map(str::to_owned),
        namespaces: namespaces.to_vec(),
        ..LetThrough::default()
    }
}

fn decode(object: &Value) -> Configuration {
    Configuration::decode(WebhookKind::Validating, object, FailurePolicy::Fail)
        .expect("test objects decode")
}

fn apply(object: &Value, patch: &json_patch::Patch) -> Result<Value, json_patch::PatchError> {
    let mut out = object.clone();
    json_patch::patch(&mut out, patch)?;
    Ok(out)
}

fn bypass_of(via: Via, namespaces: &[String]) -> Bypass {
    through(via, namespaces, None)
}

/// A bypass letting through the label, `namespaces` and, when given, the namespaces that a
/// `matchExpressions` requirement excludes.
fn through(via: Via, namespaces: &[String], requirement: Option<Value>) -> Bypass {
    let through = LetThrough {
        namespace_requirement: requirement,
        ..passing(Some(LABEL), namespaces)
    };
    Bypass {
        since: "2027-01-15T08:00:00Z".to_owned(),
        reason: "owner_down".to_owned(),
        owner: "lease policy-system/policy".to_owned(),
        added: Added::new(via, &through),
    }
}

/// Empty lists and maps dropped, as the API server's `omitempty` drops them.
fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !matches!(v, Value::Array(a) if a.is_empty()))
                .filter(|(_, v)| !matches!(v, Value::Object(m) if m.is_empty()))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn arb_requirement() -> impl Strategy<Value = Value> {
    (
        "[a-z]{1,4}",
        prop::sample::select(vec!["Exists", "DoesNotExist"]),
    )
        .prop_map(|(key, op)| json!({ "key": key, "operator": op }))
}

fn arb_selector() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(json!({}))),
        Just(Some(json!({ "matchLabels": { "team": "a" } }))),
        prop::collection::vec(arb_requirement(), 0..3)
            .prop_map(|list| Some(json!({ "matchExpressions": list }))),
    ]
}

/// One entry named `name`: random failure policy, conditions, selectors, unknown fields.
fn arb_entry(name: String) -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop::sample::select(vec!["Fail", "Ignore"])),
        prop::option::of(prop::collection::vec("[a-z]{1,5}", 0..3)),
        arb_selector(),
        arb_selector(),
        any::<bool>(),
    )
        .prop_map(move |(policy, conditions, object, namespace, extra)| {
            let mut entry = json!({
                "name": name,
                "clientConfig": { "url": "https://127.0.0.1:9443/validate" },
                "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            });
            let map = entry.as_object_mut().expect("an object literal");
            if let Some(p) = policy {
                map.insert("failurePolicy".into(), json!(p));
            }
            if let Some(names) = conditions {
                let list: Vec<Value> = names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| json!({ "name": format!("{n}{i}"), "expression": "true" }))
                    .collect();
                map.insert("matchConditions".into(), Value::Array(list));
            }
            if let Some(s) = object {
                map.insert("objectSelector".into(), s);
            }
            if let Some(s) = namespace {
                map.insert("namespaceSelector".into(), s);
            }
            if extra {
                map.insert("timeoutSeconds".into(), json!(7));
            }
            entry
        })
}

/// A configuration of 1..5 entries, maybe with other annotations or an old record.
fn arb_configuration() -> impl Strategy<Value = (Value, usize)> {
    (1usize..5, any::<bool>(), any::<bool>())
        .prop_flat_map(|(n, other_annotation, other_record)| {
            let entries: Vec<_> = (0..n).map(|i| arb_entry(format!("w{i}.example.com"))).collect();
            (entries, 0..n, Just(other_annotation), Just(other_record))
        })
        .prop_map(|(entries, index, other_annotation, other_record)| {
            let mut metadata = json!({ "name": "policy", "resourceVersion": "41", "uid": "u-1" });
            let mut annotations = serde_json::Map::new();
            if other_annotation {
                annotations.insert("team".into(), json!("a"));
            }
            if other_record {
                // Another entry of this configuration is bypassed already.
                let mut records = Records::new();
                records.insert("elsewhere.example.com".into(), Record::Bypass(bypass_of(Via::Selectors, &[])));
                annotations.insert(RECORD_ANNOTATION.into(), json!(serde_json::to_string(&records).expect("serializes")));
            }
            if !annotations.is_empty() {
                metadata["annotations"] = Value::Object(annotations);
            }
            (json!({ "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": metadata, "webhooks": entries }), index)
        })
}

fn without_record(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(a) = out["metadata"]
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(RECORD_ANNOTATION);
    }
    out
}

proptest! {
    /// A bypass changes only the listed entry (never its failurePolicy) and the record; the
    /// record says exactly what was added, and a restore gives back the object as it was.
    #[test]
    fn a_bypass_touches_only_its_entry_and_a_restore_undoes_exactly_it(
        (object, index) in arb_configuration(),
        selectors in any::<bool>(),
        namespaces in prop::collection::vec("[a-z]{1,6}", 0..3),
        selected in prop::option::of("[a-z]{1,6}"),
    ) {
        let via = if selectors { Via::Selectors } else { Via::MatchConditions };
        let before = decode(&object);
        let name = format!("w{index}.example.com");
        let records = before.records().expect("generated records parse");
        // optIn.namespaceSelector `team=VALUE`: its negation shares namespaceSelector's list
        // with the namespace-name requirement.
        let requirement = selected.map(|v| json!({ "key": "team", "operator": "NotIn", "values": [v] }));
        let bypass = through(via, &namespaces, requirement);
        let bypassed = apply(&object, &bypass_patch(&before, index, &name, &records, &bypass))
            .expect("a bypass applies to the object it was built from");

        for (i, (old, new)) in object["webhooks"].as_array().unwrap().iter()
            .zip(bypassed["webhooks"].as_array().unwrap()).enumerate() {
            if i != index {
                prop_assert_eq!(old, new, "entry {} is not the listed one", i);
            }
            prop_assert_eq!(old.get("failurePolicy"), new.get("failurePolicy"));
        }
        prop_assert_eq!(&object["webhooks"].as_array().unwrap().len(), &bypassed["webhooks"].as_array().unwrap().len());
        let mut expected_meta = object["metadata"].clone();
        let mut got_meta = bypassed["metadata"].clone();
        for m in [&mut expected_meta, &mut got_meta] {
            if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
                a.remove(RECORD_ANNOTATION);
            }
        }
        prop_assert_eq!(normalized(&expected_meta), normalized(&got_meta));

        let after = decode(&bypassed);
        let recorded = after.records().expect("the record parses");
        prop_assert_eq!(recorded.get(&name).and_then(Record::bypass), Some(&bypass));
        for (other, b) in &records {
            prop_assert_eq!(recorded.get(other), Some(b), "another entry's record survives");
        }
        prop_assert!(bypass.added.present_in(&after.entries[index]));
        // Nothing else was added to the entry: removing the recorded values gives it back.
        let restore = restore_patch(&after, index, &name, &recorded)
            .expect("every added value is present");
        let restored = apply(&bypassed, &restore).expect("a restore applies");
        prop_assert_eq!(normalized(&without_record(&restored)), normalized(&without_record(&object)));
        prop_assert_eq!(decode(&restored).records().expect("parses"), records);
    }

    /// Every patch is refused by an object whose resourceVersion moved on.
    #[test]
    fn a_patch_against_a_newer_object_fails((object, index) in arb_configuration()) {
        let configuration = decode(&object);
        let name = format!("w{index}.example.com");
        let records = configuration.records().expect("parses");
        let mut newer = object.clone();
        newer["metadata"]["resourceVersion"] = json!("42");
        let bypass = bypass_of(Via::MatchConditions, &[]);
        let patch = bypass_patch(&configuration, index, &name, &records, &bypass);
        prop_assert!(apply(&newer, &patch).is_err());
        prop_assert!(apply(&newer, &forget_patch(&configuration, &name, &records)).is_err());
    }

    /// The decision rule's invariants, whatever the instants: never bypass with an owner that
    /// is unknown or up, never before the grace, never an entry that fails open, never restore
    /// before the restore grace or over someone else's change.
    #[test]
    fn the_rule_never_bypasses_early_or_wrongly(
        (object, index) in arb_configuration(),
        owner_kind in 0u8..3,
        since in 0u64..100,
        now in 0u64..200,
        recorded in any::<bool>(),
        still_present in any::<bool>(),
        undone in 0usize..5,
        lets_through in any::<bool>(),
        tombstone in any::<bool>(),
        paused in any::<bool>(),
    ) {
        let mut object = object;
        let name = format!("w{index}.example.com");
        let bypass = bypass_of(Via::MatchConditions, &[]);
        if recorded && still_present {
            object["webhooks"][index]["matchConditions"] = json!([bypass.added.match_condition.clone()]);
        }
        let configuration = decode(&object);
        let owner = match owner_kind {
            0 => OwnerState::Unknown,
            1 => OwnerState::Up { since: t(since) },
            _ => OwnerState::Down { since: t(since) },
        };
        let config = listed(&name);
        let record = recorded.then_some(&bypass);
        // A tombstone stands in the record's place.
        let tombstone = tombstone && !recorded;
        let situation = Situation {
            config: &config,
            entry: Some((&configuration, index)),
            record,
            tombstone,
            paused,
            owner,
            undone_recently: undone,
            flapping: false,
            lets_through,
            now: t(now),
        };
        match decide(&situation) {
            Action::Bypass => {
                let OwnerState::Down { since } = owner else {
                    return Err(TestCaseError::fail("bypass with an owner that is not down"));
                };
                prop_assert!(t(now) >= since + config.owner_down_grace, "bypassed early");
                prop_assert!(lets_through, "bypassed although it would let nothing through");
                prop_assert_eq!(configuration.failure_policy(index), FailurePolicy::Fail);
                prop_assert!(!record.is_some_and(|r| r.added.present_in(&configuration.entries[index])),
                    "bypassed twice");
                prop_assert!(record.is_none() || undone < crate::config::DEFAULT_FLAP_UNDOS);
                prop_assert!(!tombstone, "bypassed before the owner was seen up after a restore on demand");
                prop_assert!(!paused, "bypassed a paused configuration");
            }
            Action::ForgetTombstone => {
                prop_assert!(tombstone && record.is_none());
                prop_assert!(matches!(owner, OwnerState::Up { .. }), "tombstone dropped with an owner not up");
            }
            Action::Flapping => {
                prop_assert!(!paused && !tombstone);
                prop_assert!(matches!(owner, OwnerState::Down { .. }), "flapping with an owner not down");
                prop_assert!(record.is_some() && undone >= crate::config::DEFAULT_FLAP_UNDOS);
            }
            Action::Restore => {
                let OwnerState::Up { since } = owner else {
                    return Err(TestCaseError::fail("restore with an owner that is not up"));
                };
                prop_assert!(t(now) >= since + config.restore_grace, "restored early");
                prop_assert!(record.is_some_and(|r| r.added.present_in(&configuration.entries[index])));
            }
            Action::Conflict => {
                prop_assert!(matches!(owner, OwnerState::Up { .. }), "conflict with an owner not up");
                prop_assert!(record.is_some_and(|r| !r.added.present_in(&configuration.entries[index])));
            }
            Action::Wait(Some(at)) => prop_assert!(at > t(now), "a wake-up in the past"),
            Action::Wait(None) => {}
        }
    }
}

#[test]
fn an_owner_down_for_the_grace_bypasses_and_up_for_the_restore_grace_restores() {
    let object = json!({
        "metadata": { "name": "policy", "resourceVersion": "7" },
        "webhooks": [{ "name": "w0.example.com", "failurePolicy": "Fail" }],
    });
    let configuration = decode(&object);
    let config = listed("w0.example.com");
    let down = OwnerState::Down { since: t(0) };
    let at = |owner, now, record| {
        decide(&Situation {
            config: &config,
            entry: Some((&configuration, 0)),
            record,
            tombstone: false,
            paused: false,
            owner,
            undone_recently: 0,
            flapping: false,
            lets_through: true,
            now: t(now),
        })
    };
    assert_eq!(at(down, 9, None), Action::Wait(Some(t(10))));
    assert_eq!(at(down, 10, None), Action::Bypass);
    assert_eq!(at(OwnerState::Unknown, 1000, None), Action::Wait(None));
    let bypass = bypass_of(Via::Selectors, &[]);
    // The record's values are not in this entry: someone removed them.
    assert_eq!(at(down, 10, Some(&bypass)), Action::Bypass);
    let up = OwnerState::Up { since: t(100) };
    assert_eq!(at(up, 129, Some(&bypass)), Action::Wait(Some(t(130))));
    assert_eq!(at(up, 130, Some(&bypass)), Action::Conflict);
    let mut with = object.clone();
    with["webhooks"][0]["objectSelector"] =
        json!({ "matchExpressions": [bypass.added.object_selector] });
    let configuration = decode(&with);
    let restore = decide(&Situation {
        config: &config,
        entry: Some((&configuration, 0)),
        record: Some(&bypass),
        tombstone: false,
        paused: false,
        owner: up,
        undone_recently: 0,
        flapping: false,
        lets_through: true,
        now: t(130),
    });
    assert_eq!(restore, Action::Restore);
}

#[test]
fn the_third_undone_bypass_in_the_window_is_flapping() {
    let object = json!({
        "metadata": { "name": "policy", "resourceVersion": "7" },
        "webhooks": [{ "name": "w0.example.com" }],
    });
    let configuration = decode(&object);
    let config = listed("w0.example.com");
    let bypass = bypass_of(Via::MatchConditions, &[]);
    let with = |undone, flapping| {
        decide(&Situation {
            config: &config,
            entry: Some((&configuration, 0)),
            record: Some(&bypass),
            tombstone: false,
            paused: false,
            owner: OwnerState::Down { since: t(0) },
            undone_recently: undone,
            flapping,
            lets_through: true,
            now: t(60),
        })
    };
    assert_eq!(
        with(crate::config::DEFAULT_FLAP_UNDOS - 1, false),
        Action::Bypass
    );
    assert_eq!(
        with(crate::config::DEFAULT_FLAP_UNDOS, false),
        Action::Flapping
    );
    // Once flapping, the undos aging out of the window do not bring the bypass back.
    assert_eq!(with(0, true), Action::Flapping);
}

#[test]
fn v1beta1_entries_without_a_policy_fail_open_and_are_left_alone() {
    let object = json!({
        "metadata": { "name": "policy", "resourceVersion": "7" },
        "webhooks": [{ "name": "w0.example.com" }],
    });
    let configuration =
        Configuration::decode(WebhookKind::Validating, &object, FailurePolicy::Ignore)
            .expect("decodes");
    let config = listed("w0.example.com");
    let action = decide(&Situation {
        config: &config,
        entry: Some((&configuration, 0)),
        record: None,
        tombstone: false,
        paused: false,
        owner: OwnerState::Down { since: t(0) },
        undone_recently: 0,
        flapping: false,
        lets_through: true,
        now: t(1000),
    });
    assert_eq!(action, Action::Wait(None));
}

#[test]
fn the_condition_keeps_calling_the_webhook_for_everything_not_opted_in() {
    assert_eq!(
        cel_expression(&passing(Some(LABEL), &[])),
        format!(
            "{CANARY} || !(object != null && has(object.metadata) && has(object.metadata.labels) && 'initguard.io/bypass' in object.metadata.labels)"
        )
    );
    assert_eq!(
        cel_expression(&passing(Some(LABEL), &["a".to_owned(), "b".to_owned()])),
        format!(
            "{CANARY} || !((object != null && has(object.metadata) && has(object.metadata.labels) && 'initguard.io/bypass' in object.metadata.labels) || (has(request.namespace) && request.namespace in ['a', 'b']))"
        )
    );
}

#[test]
fn exempt_requesters_operations_and_the_critical_path_join_the_condition_guarded() {
    let through = LetThrough {
        requesters: [
            "group:system:nodes",
            "user:alice@example.com",
            "serviceaccount:ci:deployer",
            "serviceaccount:ops:*",
        ]
        .iter()
        .map(|r| crate::config::Requester::parse(r).unwrap())
        .collect(),
        operations: vec![
            crate::config::Operation::Delete,
            crate::config::Operation::Connect,
        ],
        critical_path: true,
        ..LetThrough::default()
    };
    let expression = cel_expression(&through);
    for term in [
        "(has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups)",
        "(has(request.userInfo.username) && request.userInfo.username == 'alice@example.com')",
        "(has(request.userInfo.username) && request.userInfo.username == 'system:serviceaccount:ci:deployer')",
        "(has(request.userInfo.username) && request.userInfo.username.startsWith('system:serviceaccount:ops:'))",
        "request.operation in ['DELETE', 'CONNECT']",
        CRITICAL_PATH,
    ] {
        assert!(
            expression.contains(term),
            "{term} missing from {expression}"
        );
    }
    assert!(
        expression.starts_with(&format!("{CANARY} || !(")),
        "{expression}"
    );
    // No optional syntax, which 1.28 rejects.
    assert!(
        !expression.contains(".?") && !expression.contains("[?"),
        "{expression}"
    );
    // Someone with only the critical path still passes: a bypass is made.
    let mut config = listed("w0.example.com");
    config.opt_in = OptInMode::None;
    config.exempt_namespaces.clear();
    config.exempt_critical_path = true;
    let opt_in = OptIn {
        label: LABEL.to_owned(),
        namespaces: Vec::new(),
        namespace_selector: String::new(),
        selector: None,
    };
    let through = let_through(&config, &opt_in).expect("the critical path passes");
    assert!(through.critical_path && through.label.is_none());
}

#[test]
fn opt_in_modes_decide_who_passes_a_bypassed_webhook() {
    let mut opt_in = OptIn {
        label: LABEL.to_owned(),
        namespaces: vec!["batch".to_owned()],
        namespace_selector: String::new(),
        selector: None,
    };
    let mut config = listed("w0.example.com");
    let both = vec!["batch".to_owned(), "policy-system".to_owned()];
    let passes = |label: Option<&str>, namespaces: &[String], requirement: Option<Value>| {
        Some(LetThrough {
            namespace_requirement: requirement,
            ..passing(label, namespaces)
        })
    };
    assert_eq!(
        let_through(&config, &opt_in),
        passes(Some(LABEL), &both, None)
    );
    // namespaces: the label is ignored; none: only the exempt namespaces (the backend's own).
    config.opt_in = OptInMode::Namespaces;
    assert_eq!(let_through(&config, &opt_in), passes(None, &both, None));
    config.opt_in = OptInMode::None;
    let exempt = vec!["policy-system".to_owned()];
    assert_eq!(let_through(&config, &opt_in), passes(None, &exempt, None));
    config.exempt_namespaces.clear();
    assert_eq!(
        let_through(&config, &opt_in),
        None,
        "nobody passes: never bypassed"
    );
    // A namespace selector adds its negation, except under optIn: none.
    opt_in.selector = Some(kube_common::selector::LabelSelector::parse("team in (a,b)").unwrap());
    assert_eq!(let_through(&config, &opt_in), None);
    config.opt_in = OptInMode::Namespaces;
    let negated = json!({ "key": "team", "operator": "NotIn", "values": ["a", "b"] });
    assert_eq!(
        let_through(&config, &opt_in),
        passes(None, &["batch".to_owned()], Some(negated.clone()))
    );
    // Without the label, neither the condition nor the selectors mention it.
    let namespaces = ["batch".to_owned()];
    assert_eq!(
        cel_expression(&passing(None, &namespaces)),
        format!("{CANARY} || !(has(request.namespace) && request.namespace in ['batch'])")
    );
    let through = LetThrough {
        namespace_requirement: Some(negated.clone()),
        ..passing(None, &namespaces)
    };
    let added = Added::new(Via::Selectors, &through);
    assert_eq!(added.object_selector, None);
    assert!(added.namespace_selector.is_some());
    assert_eq!(added.namespace_requirement, Some(negated.clone()));
    let added = Added::new(Via::MatchConditions, &through);
    assert!(
        !added.match_condition.unwrap()["expression"]
            .as_str()
            .unwrap()
            .contains(LABEL)
    );
    // matchConditions cannot see namespace labels: the requirement goes beside them.
    assert_eq!(added.namespace_requirement, Some(negated));
}

#[test]
fn the_negation_of_a_selected_namespace_excludes_exactly_it() {
    use kube_common::selector::LabelSelector;
    for (selector, operator) in [
        ("team=a", "NotIn"),
        ("team in (a,b)", "NotIn"),
        ("team!=a", "In"),
        ("team notin (a)", "In"),
        ("team", "DoesNotExist"),
        ("!team", "Exists"),
    ] {
        let parsed = LabelSelector::parse(selector).unwrap();
        let requirement = &parsed.requirements()[0];
        let negated = negation(requirement);
        assert_eq!(negated["operator"], operator, "{selector}");
        // Judged by the selector's own matcher: every label set matches exactly one of them.
        let as_selector = match operator {
            "NotIn" => format!("team notin ({})", join(&negated)),
            "In" => format!("team in ({})", join(&negated)),
            "DoesNotExist" => "!team".to_owned(),
            _ => "team".to_owned(),
        };
        let negated = LabelSelector::parse(&as_selector).unwrap();
        for labels in [
            vec![],
            vec![("team", "a")],
            vec![("team", "b")],
            vec![("team", "c")],
        ] {
            let labels: std::collections::BTreeMap<String, String> = labels
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            assert_ne!(
                parsed.matches(&labels),
                negated.matches(&labels),
                "{selector} {labels:?}"
            );
        }
    }
}

fn join(requirement: &Value) -> String {
    requirement["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn a_malformed_record_is_an_error_not_an_empty_record() {
    let object = json!({
        "metadata": { "name": "policy", "resourceVersion": "7",
            "annotations": { RECORD_ANNOTATION: "{not json" } },
        "webhooks": [],
    });
    assert!(decode(&object).records().is_err());
    let bad = json!({ "metadata": { "name": "policy" }, "webhooks": [] });
    assert_eq!(
        Configuration::decode(WebhookKind::Validating, &bad, FailurePolicy::Fail),
        Err(DecodeError::Field("resourceVersion"))
    );
}

#[test]
fn patches_are_sent_with_go_escaping_so_the_servers_byte_compare_matches() {
    let condition = json!({ "name": "c", "expression": "a && b < c > d \u{2028}" });
    let patch = json_patch::Patch(vec![json_patch::PatchOperation::Test(
        json_patch::TestOperation {
            path: json_patch::jsonptr::PointerBuf::from_tokens(["x"]),
            value: condition.clone(),
        },
    )]);
    let sent = String::from_utf8(super::patch::go_json(&patch)).expect("UTF-8");
    assert!(
        sent.contains(r#"a \u0026\u0026 b \u003c c \u003e d \u2028"#),
        "{sent}"
    );
    assert!(!sent.contains('&') && !sent.contains('<') && !sent.contains('>'));
    // Still the same patch once parsed.
    let parsed: json_patch::Patch = serde_json::from_str(&sent).expect("valid JSON");
    assert_eq!(parsed, patch);
}

#[test]
fn a_restore_on_demand_holds_until_the_owner_is_seen_up_and_down_again() {
    let object = json!({
        "metadata": { "name": "policy", "resourceVersion": "7" },
        "webhooks": [{ "name": "w0.example.com", "failurePolicy": "Fail" }],
    });
    let configuration = decode(&object);
    let config = listed("w0.example.com");
    let decide_with = |tombstone: bool, paused: bool, owner: OwnerState| {
        decide(&Situation {
            config: &config,
            entry: Some((&configuration, 0)),
            record: None,
            tombstone,
            paused,
            owner,
            undone_recently: 0,
            flapping: false,
            lets_through: true,
            now: t(1000),
        })
    };
    let down = OwnerState::Down { since: t(0) };
    let up = OwnerState::Up { since: t(999) };
    // Restored by a person while the owner is still down: not bypassed again.
    assert_eq!(decide_with(true, false, down), Action::Wait(None));
    // Seen up (at once, no grace): the tombstone goes; down again: bypassed as usual.
    assert_eq!(decide_with(true, false, up), Action::ForgetTombstone);
    assert_eq!(decide_with(false, false, down), Action::Bypass);
    // A paused configuration: never a new bypass.
    assert_eq!(decide_with(false, true, down), Action::Wait(None));
    // Tombstones read back as such, bypass records as bypasses.
    let tomb: Records = serde_json::from_str(
        r#"{"w0.example.com":{"restored":{"at":"2026-11-26T00:00:00Z","by":"cli","ownerState":"unknown"}}}"#,
    )
    .expect("a tombstone parses");
    assert!(
        tomb["w0.example.com"].tombstone().is_some() && tomb["w0.example.com"].bypass().is_none()
    );
    let bypass: Records =
        serde_json::from_value(json!({ "w0.example.com": bypass_of(Via::MatchConditions, &[]) }))
            .expect("a bypass parses");
    assert!(bypass["w0.example.com"].bypass().is_some());
}

fn canary(labels: &[(&str, &str)]) -> Canary {
    Canary {
        webhook: "pods.policy.example.com".to_owned(),
        namespace: "canary".to_owned(),
        resource: crate::config::CanaryResource::Pods,
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        interval: Duration::from_secs(10),
    }
}

fn pods_entry() -> Value {
    json!({
        "name": "pods.policy.example.com",
        "rules": [{ "operations": ["CREATE", "UPDATE"], "apiGroups": [""],
                    "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced" }],
        "namespaceSelector": { "matchLabels": { "team": "a" } },
        "objectSelector": { "matchExpressions": [
            { "key": "app", "operator": "In", "values": ["web"] } ] },
    })
}

fn namespace(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn a_canary_reaches_only_an_entry_whose_rules_and_selectors_select_it() {
    let ns = namespace(&[("team", "a")]);
    let ok = canary(&[("app", "web")]);
    assert_eq!(
        canary_reach(&pods_entry(), &ok, Some(&ns)),
        CanaryReach::default()
    );
    // Each way the create would be admitted without calling the webhook.
    let unreached = |entry: &Value, c: &Canary, ns: &BTreeMap<String, String>, why: &str| {
        let reach = canary_reach(entry, c, Some(ns));
        assert!(
            reach.problems.len() == 1 && reach.problems[0].contains(why),
            "{why}: {reach:?}"
        );
    };
    unreached(&pods_entry(), &canary(&[]), &ns, "objectSelector");
    unreached(&pods_entry(), &ok, &namespace(&[]), "namespaceSelector");
    for (field, value) in [
        ("operations", json!(["UPDATE", "DELETE"])),
        ("apiGroups", json!(["apps"])),
        ("apiVersions", json!(["v1beta1"])),
        ("resources", json!(["pods/status", "pods/*"])),
        ("scope", json!("Cluster")),
    ] {
        let mut entry = pods_entry();
        entry["rules"][0][field] = value;
        unreached(&entry, &ok, &ns, "CREATE on pods");
    }
    let mut configmaps = ok.clone();
    configmaps.resource = crate::config::CanaryResource::Configmaps;
    unreached(&pods_entry(), &configmaps, &ns, "CREATE on configmaps");
    let mut entry = pods_entry();
    entry["rules"] = json!([]);
    unreached(&entry, &ok, &ns, "CREATE on pods");
    entry["objectSelector"] = json!({ "matchExpressions": [
        { "key": "app", "operator": "Sideways", "values": [] } ] });
    let reach = canary_reach(&entry, &ok, Some(&ns));
    assert!(
        reach.problems.iter().any(|p| p.contains("cannot be read")),
        "{reach:?}"
    );
    // Wildcards, and no selectors at all, reach it.
    let wide = json!({ "rules": [{ "operations": ["*"], "apiGroups": ["*"],
        "apiVersions": ["*"], "resources": ["*/*"] }] });
    assert_eq!(
        canary_reach(&wide, &canary(&[]), Some(&namespace(&[]))),
        CanaryReach::default()
    );
}

#[test]
fn what_cannot_be_checked_is_a_warning_and_the_bypass_condition_is_not_the_entrys_own() {
    let ok = canary(&[("app", "web")]);
    let reach = canary_reach(&pods_entry(), &ok, None);
    assert!(reach.problems.is_empty(), "{reach:?}");
    assert!(
        reach.warnings.len() == 1 && reach.warnings[0].contains("namespace canary"),
        "{reach:?}"
    );
    let ns = namespace(&[("team", "a")]);
    let mut entry = pods_entry();
    entry["matchConditions"] = json!([{ "name": MATCH_CONDITION_NAME, "expression": "true" }]);
    assert_eq!(canary_reach(&entry, &ok, Some(&ns)), CanaryReach::default());
    entry["matchConditions"]
        .as_array_mut()
        .expect("a list")
        .push(json!({ "name": "own", "expression": "true" }));
    let reach = canary_reach(&entry, &ok, Some(&ns));
    assert!(reach.problems.is_empty(), "{reach:?}");
    assert!(
        reach.warnings.len() == 1 && reach.warnings[0].contains("matchConditions (1)"),
        "{reach:?}"
    );
}

proptest! {
    /// Whatever a bypass adds (either path, any exempt namespaces other than the canary's),
    /// the canary still reaches the entry: it is how the guard sees the webhook come back.
    #[test]
    fn a_bypass_never_stops_the_canary_reaching_the_entry(
        selectors in any::<bool>(),
        exempt in proptest::collection::vec("[a-z]{1,6}", 0..3),
    ) {
        let exempt: Vec<String> = exempt.into_iter().filter(|n| n != "canary").collect();
        let object = json!({
            "metadata": { "name": "policy", "resourceVersion": "1" },
            "webhooks": [pods_entry()],
        });
        let via = if selectors { Via::Selectors } else { Via::MatchConditions };
        let patch = bypass_patch(
            &decode(&object),
            0,
            "pods.policy.example.com",
            &Records::new(),
            &bypass_of(via, &exempt),
        );
        let bypassed = apply(&object, &patch).expect("the bypass applies");
        let ns = namespace(&[("team", "a"), (NAMESPACE_NAME_LABEL, "canary")]);
        let reach = canary_reach(&bypassed["webhooks"][0], &canary(&[("app", "web")]), Some(&ns));
        prop_assert!(reach.problems.is_empty(), "{:?}", reach);
        prop_assert!(reach.warnings.is_empty(), "{:?}", reach);
    }

    /// What a bypass added, removed again from the bypassed entry, leaves the entry it was
    /// (up to an emptied list the bypass created): the canary is judged on that.
    #[test]
    fn removing_what_a_bypass_added_gives_back_the_entry(
        selectors in any::<bool>(),
        exempt in proptest::collection::vec("[a-z]{1,6}", 0..3),
        with_requirement in any::<bool>(),
    ) {
        let object = json!({
            "metadata": { "name": "policy", "resourceVersion": "1" },
            "webhooks": [pods_entry()],
        });
        let via = if selectors { Via::Selectors } else { Via::MatchConditions };
        let requirement = with_requirement
            .then(|| json!({ "key": "team", "operator": "NotIn", "values": ["a"] }));
        let bypass = through(via, &exempt, requirement);
        let patch = bypass_patch(&decode(&object), 0, "pods.policy.example.com", &Records::new(), &bypass);
        let bypassed = apply(&object, &patch).expect("the bypass applies");
        let back = bypass.added.removed_from(&bypassed["webhooks"][0]);
        prop_assert_eq!(normalized(&back), normalized(&pods_entry()));
    }
}

/// A canary namespace that `optIn.namespaceSelector` selects is kept away from the webhook by a
/// bypass: judged on the live entry the canary no longer reaches it, judged on the entry
/// without the bypass it does (the guard reports the opt-in as its own problem).
#[test]
fn a_bypass_for_an_opted_in_canary_namespace_is_judged_without_the_bypass() {
    let object = json!({
        "metadata": { "name": "policy", "resourceVersion": "1" },
        "webhooks": [pods_entry()],
    });
    let requirement = json!({ "key": "team", "operator": "NotIn", "values": ["a"] });
    let bypass = through(Via::Selectors, &[], Some(requirement));
    let patch = bypass_patch(
        &decode(&object),
        0,
        "pods.policy.example.com",
        &Records::new(),
        &bypass,
    );
    let bypassed = apply(&object, &patch).expect("the bypass applies");
    let ns = namespace(&[("team", "a")]);
    let ok = canary(&[("app", "web")]);
    assert!(
        !canary_reach(&bypassed["webhooks"][0], &ok, Some(&ns))
            .problems
            .is_empty()
    );
    let back = bypass.added.removed_from(&bypassed["webhooks"][0]);
    assert_eq!(canary_reach(&back, &ok, Some(&ns)), CanaryReach::default());
}
