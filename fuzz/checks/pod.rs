//! The oracle of the `pod` fuzz target, shared with its corpus replay in
//! tests/fuzz_replay.rs (so a change of the guard's API breaks `cargo test`, not only the fuzz
//! build). Pod JSON from a hostile or broken API server, through everything the guard does with it:
//! decoding, the tracker, the decision rule with every owner down and every pile over its
//! threshold, and the bypass patch. Oracle: whenever the patch's preconditions hold in the
//! document itself (same uid, each decided name at its decided index), applying the one patch to
//! the document succeeds, removes exactly those entries and records exactly those bypasses.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use initguard::bypass::{
    BYPASSED_ANNOTATION, BypassTarget, Removal, bypass_patch, parse_records, pending_pointer,
};
use initguard::config::names::validate_initializer_name;
use initguard::config::{Config, Mechanism};
use initguard::pod::SlimPod;
use initguard::policy::{self, ControllerRef, Environment, OwnerState};
use initguard::tracker::Tracker;
use serde_json::Value;

/// Every pod decided on by every rule: all initializers count (unlisted ones after 0 s), every
/// owner has been down forever, every pile is over its threshold.
static CONFIGS: LazyLock<Vec<Arc<Config>>> = LazyLock::new(|| {
    [Mechanism::SchedulingGates, Mechanism::Initializers]
        .into_iter()
        .map(|m| {
            let yaml = format!(
                "mechanism: {}\noptIn: {{ label: initguard.io/bypass }}\n\
                 defaults: {{ deadline: 0s }}\nunlistedInitializers: deadline\n\
                 pileup: {{ threshold: 1, action: bypass }}\nleaderElection: {{ enabled: false }}\n",
                m.as_str()
            );
            Arc::new(initguard::config::from_yaml_str(&yaml, "fuzz.yaml").expect("the fuzz config is valid"))
        })
        .collect()
});

struct AllDown;

impl Environment for AllDown {
    fn owner_state(&self, _: &str) -> OwnerState {
        OwnerState::Down {
            since: SystemTime::UNIX_EPOCH,
        }
    }
    fn pile_start(&self, _: &ControllerRef, _: &str, _: u32) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH)
    }
}

/// The raw entry list of the mechanism in the document.
fn entries(doc: &Value, mechanism: Mechanism) -> Option<&Vec<Value>> {
    match mechanism {
        Mechanism::SchedulingGates => doc.pointer("/spec/schedulingGates")?.as_array(),
        Mechanism::Initializers => doc.pointer("/metadata/initializers/pending")?.as_array(),
    }
}

/// Run `data` through the oracle; panics on a violation.
pub(crate) fn check(data: &[u8]) {
    let decoded = serde_json::from_slice::<SlimPod>(data);
    let (Ok(pod), Ok(doc)) = (decoded, serde_json::from_slice::<Value>(data)) else {
        return;
    };
    let now = SystemTime::now();
    for config in CONFIGS.iter() {
        let mechanism = config.mechanism;
        let mut tracker = Tracker::new(config.clone());
        let _ = tracker.apply(&pod, now);
        let _ = tracker.aggregates(now + Duration::from_secs(1));
        let Some(tracked) = tracker.get(&pod.key()) else {
            continue;
        };
        let outcome = policy::decide(&tracked.view(), &AllDown, config, now);
        if outcome.decisions.is_empty() {
            continue;
        }
        let target = BypassTarget {
            uid: &tracked.uid,
            resource_version: &tracked.resource_version,
            annotations_present: tracked.annotations_present,
            previous_record: tracked.bypassed_record.as_deref(),
            // The label precondition is the actuator's business; this oracle checks the rest.
            opt_in_label: None,
        };
        let removals: Vec<Removal> = outcome
            .decisions
            .iter()
            .map(|d| Removal {
                index: d.index,
                initializer: &d.initializer,
                reason: d.reason,
            })
            .collect();
        let patch = bypass_patch(mechanism, &target, &removals, now);
        let mut patched = doc.clone();
        let applied = json_patch::patch(&mut patched, &patch);
        let same_pod =
            doc.pointer("/metadata/uid").and_then(Value::as_str) == Some(tracked.uid.as_str());
        let names_at_indexes = outcome.decisions.iter().all(|d| {
            doc.pointer(&format!("{}/name", pending_pointer(mechanism, d.index)))
                .and_then(Value::as_str)
                == Some(d.initializer.as_str())
        });
        let annotations_ok = doc
            .pointer("/metadata/annotations")
            .is_some_and(Value::is_object)
            || doc
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                == Some(tracked.resource_version.as_str());
        if !(same_pod && names_at_indexes && annotations_ok) {
            continue;
        }
        assert!(applied.is_ok(), "{applied:?}: {patch:?} on {doc}");
        let expected: Vec<Value> = entries(&doc, mechanism)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !outcome.decisions.iter().any(|d| d.index == *i))
            .map(|(_, entry)| entry)
            .collect();
        let after = entries(&patched, mechanism).cloned().unwrap_or_default();
        assert_eq!(after, expected, "not exactly the decided entries removed");
        // Names outside the documented charset are never decided: their record would be
        // ambiguous (tests/reliability/bad_input.rs, record_of_an_odd_name).
        for d in &outcome.decisions {
            assert!(
                validate_initializer_name(&d.initializer).is_ok(),
                "decided on {:?}",
                d.initializer
            );
        }
        let record = patched
            .pointer(&format!(
                "/metadata/annotations/{}",
                BYPASSED_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let records = parse_records(record);
        let last: Vec<(String, String)> = records
            .iter()
            .skip(records.len().saturating_sub(outcome.decisions.len()))
            .map(|r| (r.initializer.clone(), r.reason.clone()))
            .collect();
        let decided: Vec<(String, String)> = outcome
            .decisions
            .iter()
            .map(|d| (d.initializer.clone(), d.reason.as_str().to_owned()))
            .collect();
        assert_eq!(last, decided, "record {record:?}");
    }
}
