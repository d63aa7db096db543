//! The shipped `config/metainit-compat.yaml` on the real 1.13 server: every pending initializer
//! of a labelled pod goes in one JSON Patch (the audit log holds each request), which the real
//! server applies and initializes the pod; one Event per patch names all of them; a pod without
//! the label keeps them all. With `events: off` the same patches land and no Event is written,
//! not even while the guard drains at shutdown.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::legacy::*;
use crate::testbed::*;

const NS: &str = "legacy-compat";
const INITS: [&str; 3] = ["one.example.com", "two.example.com", "three.example.com"];
/// The label k8s-metainit looked for, as the shipped compat config keeps it.
const LABEL: &str = "k8s.opsani.io/initializer";

/// The shipped file, without its `listen` (the test bed sets a fresh port).
fn shipped_config() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/metainit-compat.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with("listen:")).collect();
    kept.join("\n") + "\n"
}

async fn create_pod(tb: &Testbed, name: &str, labelled: bool) {
    let mut labels = json!({ "app": "compat" });
    if labelled {
        labels[LABEL] = json!("");
    }
    create_uninitialized_pod(tb, NS, name, labels).await;
}

/// Every pod in `names` shows up in a plain list (on 1.13: initialized).
async fn all_initialized(tb: &Testbed, names: &[String]) {
    let mut want = names.to_vec();
    want.sort();
    let mut last = Vec::new();
    for _ in 0..450 {
        let mut seen = plain_pod_names(tb, NS, "app=compat").await;
        seen.retain(|n| want.contains(n));
        seen.sort();
        if seen == want {
            return;
        }
        last = seen;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("after 90 s only {last:?} of {want:?} are initialized");
}

/// The guard's Event creates in the namespace, by the pod each is about.
fn guard_events(tb: &Testbed) -> Vec<(String, String)> {
    tb.audit()
        .into_iter()
        .filter(|a| {
            a.user == GUARD_USER
                && a.resource == "events"
                && a.verb == "create"
                && a.namespace == NS
        })
        .map(|a| {
            let about = a.request["involvedObject"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let message = a.request["message"].as_str().unwrap_or_default().to_owned();
            (about, message)
        })
        .collect()
}

/// Each of `names` got exactly one successful guard PATCH, which tested every initializer at
/// its index and removed them highest index first.
fn assert_one_patch_each(tb: &Testbed, names: &[String]) {
    let patches = guard_patches(tb, GUARD_USER, NS);
    for name in names {
        let mine: Vec<&Audit> = patches.iter().filter(|a| &a.name == name).collect();
        assert_eq!(mine.len(), 1, "one patch initialized {name}: {mine:#?}");
        let ops = operations(mine[0]);
        let on_list = |op: &Value| {
            op["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/metadata/initializers/pending/"))
        };
        let steps: Vec<(String, String, Value)> = ops
            .iter()
            .filter(|op| on_list(op))
            .map(|op| {
                (
                    op["op"].as_str().unwrap_or_default().to_owned(),
                    op["path"].as_str().unwrap_or_default().to_owned(),
                    op.get("value").cloned().unwrap_or(Value::Null),
                )
            })
            .collect();
        let list = "/metadata/initializers/pending";
        let test = |i: usize| {
            (
                "test".to_owned(),
                format!("{list}/{i}/name"),
                json!(INITS[i]),
            )
        };
        let remove = |i: usize| ("remove".to_owned(), format!("{list}/{i}"), Value::Null);
        assert_eq!(
            steps,
            [test(0), test(1), test(2), remove(2), remove(1), remove(0)],
            "{name}: {ops:#?}"
        );
    }
    // No failed write either: nothing was sent twice.
    let failed: Vec<Audit> = tb
        .pod_writes_by(GUARD_USER, NS)
        .into_iter()
        .filter(|a| !a.ok())
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

pub(crate) async fn metainit_compat_initializes_each_pod_with_one_patch(tb: Arc<Testbed>) {
    tb.namespace(NS);
    let config_object = InitializerConfiguration::create(&tb, "legacy-compat", &INITS).await;
    let shipped = shipped_config();
    let guard = tb.guard("legacy-compat", "initguard", &shipped).await;
    let labelled: Vec<String> = (0..4).map(|i| format!("p{i}")).collect();
    for name in &labelled {
        create_pod(&tb, name, true).await;
    }
    create_pod(&tb, "bystander", false).await;
    all_initialized(&tb, &labelled).await;
    // Stopping drains: every Event the guard holds is written before it exits.
    guard.stop();
    assert_one_patch_each(&tb, &labelled);
    let events = guard_events(&tb);
    for name in &labelled {
        let about: Vec<&String> = events
            .iter()
            .filter(|(pod, _)| pod == name)
            .map(|(_, message)| message)
            .collect();
        assert_eq!(about.len(), 1, "one Event about {name}: {events:#?}");
        for init in INITS {
            assert!(
                about[0].contains(&format!("{init} (deadline) after waiting")),
                "{name}: {about:?}"
            );
        }
    }
    // Not labelled: never written, all three still pending.
    let bystander = pods(&tb, NS, "app=compat")
        .await
        .into_iter()
        .find(|p| p["metadata"]["name"] == "bystander")
        .unwrap_or_else(|| panic!("bystander is gone"));
    assert_eq!(pending_names(&bystander), INITS);
    assert!(
        tb.pod_writes_by(GUARD_USER, NS)
            .iter()
            .all(|a| a.name != "bystander"),
        "the guard wrote a pod without the label"
    );

    // events: off.
    let quiet = shipped.replace("events: perPatch", "events: off");
    assert_ne!(quiet, shipped, "the shipped compat config sets events");
    let events_before = guard_events(&tb).len();
    let guard = tb.guard("legacy-compat-quiet", "initguard", &quiet).await;
    let more: Vec<String> = (0..2).map(|i| format!("q{i}")).collect();
    for name in &more {
        create_pod(&tb, name, true).await;
    }
    all_initialized(&tb, &more).await;
    guard.stop();
    assert_one_patch_each(&tb, &more);
    assert_eq!(
        guard_events(&tb).len(),
        events_before,
        "events: off wrote an Event"
    );

    drop(config_object);
    tb.kubectl(&["delete", "namespace", NS, "--wait=false"]);
}
