//! The webhook guard against the real API server: a real HTTPS admission webhook started by
//! the test (called by `clientConfig.url`: the test bed has no kube-proxy), `failurePolicy:
//! Fail`, owned by a Lease the test renews. Kill both: creates are rejected; after
//! `ownerDownGrace` the guard bypasses the entry, opted-in pods (and the exempt namespace's)
//! are created while other creates are still rejected; revive both: after `restoreGrace` the
//! entry is exactly as before. Judged by the API server's objects, the pods it admitted and
//! its audit log, never by the guard's counters.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use initguard_test_support::webhook::*;
use serde_json::{Value, json};

use crate::gates::config;
use crate::testbed::*;

const GRACE_S: u64 = 2;
const RESTORE_GRACE_S: u64 = 3;

fn guard_config(name: &str, system: &str, via: &str, dry_run: bool) -> String {
    config(&format!(
        "dryRun: {dry_run}\n\
         webhooks:\n\
         \x20 - name: validating/{name}/{ENTRY}\n\
         \x20   owner: {{ lease: {system}/policy-webhook }}\n\
         \x20   ownerDownGrace: {GRACE_S}s\n\
         \x20   restoreGrace: {RESTORE_GRACE_S}s\n\
         \x20   exemptNamespaces: [{system}]\n\
         \x20   bypassVia: {via}\n"
    ))
}

/// The guard for `bed`'s configuration, as `system:initguard`.
async fn start_guard(bed: &Bed, via: &str, dry_run: bool) -> GuardProcess {
    bed.tb
        .guard(
            &bed.prefix,
            "initguard",
            &guard_config(&bed.name, &bed.system, via, dry_run),
        )
        .await
}

pub(crate) async fn webhook_bypassed_via_match_conditions_and_restored(tb: Arc<Testbed>) {
    bypass_and_restore(tb, "whm", "auto", "matchConditions").await;
}

pub(crate) async fn webhook_bypassed_via_selectors_and_restored(tb: Arc<Testbed>) {
    bypass_and_restore(tb, "whs", "selectors", "selectors").await;
}

/// Bypass the listed entry `via` (config value) and expect the bypass to be written as
/// `written` (`matchConditions` or `selectors`), then restore it.
pub(crate) async fn bypass_and_restore(tb: Arc<Testbed>, prefix: &str, via: &str, written: &str) {
    let mut bed = Bed::new(tb.clone(), prefix).await;
    let (apps, system, name) = (bed.apps.clone(), bed.system.clone(), bed.name.clone());
    let started = bed.started;
    // Exactly the listed configuration: any other is forbidden to the guard.
    let other = tb.kubectl_with(
        "initguard",
        &[
            "auth",
            "can-i",
            "patch",
            "validatingwebhookconfigurations/someone-elses",
        ],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&other.stdout).trim(), "no");
    let baseline = bed.baseline.clone();

    let guard = start_guard(&bed, via, false).await;
    // Up: creates go through the webhook.
    create_pod(&tb, &apps, "before", false).unwrap_or_else(|e| panic!("webhook up: {e}"));
    assert!(
        bed.server.calls.load(Ordering::SeqCst) >= 2,
        "both entries called"
    );

    let last_renewal = bed.kill_owner().await;
    let rejected = create_pod(&tb, &apps, "rejected", true)
        .expect_err("the webhook is down and fails closed: creates are rejected");
    assert!(rejected.contains("failed calling webhook"), "{rejected}");

    // The guard bypasses the entry: an opted-in pod is admitted.
    let mut attempt = 0;
    eventually("an opted-in pod admitted while the webhook is down", || {
        attempt += 1;
        create_pod(&tb, &apps, &format!("opted-in-{attempt}"), true).ok()
    })
    .await;
    let plain = create_pod(&tb, &apps, "plain", false)
        .expect_err("a pod that did not opt in still goes to the dead webhook");
    assert!(
        plain.contains(ENTRY),
        "rejected by the listed entry: {plain}"
    );
    let bypassed = get_configuration(&tb, &name);
    assert_eq!(
        bypassed["webhooks"][0], baseline["webhooks"][0],
        "the unlisted entry is not touched"
    );
    let entry = &bypassed["webhooks"][1];
    assert_eq!(
        entry["failurePolicy"], "Fail",
        "failurePolicy never changes"
    );
    let record: Value = serde_json::from_str(
        bypassed["metadata"]["annotations"][RECORD]
            .as_str()
            .unwrap_or_else(|| panic!("no {RECORD} annotation: {bypassed:#}")),
    )
    .unwrap_or_else(|e| panic!("{RECORD} is JSON: {e}"));
    assert_eq!(record[ENTRY]["reason"], "owner_down", "{record:#}");
    match written {
        "matchConditions" => {
            let condition = &entry["matchConditions"][0];
            assert_eq!(condition["name"], "initguard-bypass", "{entry:#}");
            assert_eq!(record[ENTRY]["added"]["matchCondition"], *condition);
        }
        _ => {
            assert_eq!(entry.get("matchConditions"), None, "{entry:#}");
            let object = &entry["objectSelector"]["matchExpressions"][0];
            assert_eq!(
                *object,
                json!({ "key": OPT_IN, "operator": "DoesNotExist" })
            );
            let namespace = &entry["namespaceSelector"];
            assert_eq!(namespace["matchLabels"], json!({ "webhook-test": prefix }));
            assert_eq!(
                namespace["matchExpressions"][0],
                json!({ "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                        "values": [system] })
            );
        }
    }
    // Everything but the listed entry and the record is as it was.
    let strip = |c: &Value| {
        let mut c = c.clone();
        c["webhooks"][1] = Value::Null;
        c["metadata"] = Value::Null;
        c
    };
    assert_eq!(strip(&bypassed), strip(&baseline));

    // The write came after the owner's lease ran out plus the grace (server's clock).
    let writes = configuration_writes(&tb, started);
    let first = writes
        .iter()
        .find(|a| a.verb == "patch" && a.ok() && a.name == name)
        .unwrap_or_else(|| panic!("no patch by {GUARD_USER}: {writes:#?}"));
    let written = timestamp(&first.received);
    let earliest =
        last_renewal + jiff::SignedDuration::from_secs((OWNER_LEASE_SECONDS + GRACE_S) as i64);
    assert!(
        written >= earliest,
        "bypassed at {written}, before the lease ran out plus the grace ({earliest})"
    );
    assert!(
        writes.iter().all(|a| a.name == name),
        "the guard wrote only the listed configuration: {writes:#?}"
    );
    // /status shows it: state, since and what was added, as the record on the server says.
    let (code, body) = curl(&format!("http://127.0.0.1:{}/status", guard.port));
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let shown = &status["webhooks"][0];
    assert_eq!(
        shown["webhook"],
        format!("validating/{name}/{ENTRY}"),
        "{status:#}"
    );
    assert_eq!(shown["state"], "bypassed", "{status:#}");
    assert_eq!(shown["owner"]["state"], "down", "{status:#}");
    assert_eq!(shown["bypassedSince"], record[ENTRY]["since"], "{status:#}");
    assert_eq!(shown["added"], record[ENTRY]["added"], "{status:#}");
    // So does the one-shot `initguard status`, from its own read of the configuration.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, guard_config(&name, &system, via, false))
        .unwrap_or_else(|e| panic!("writing the status config: {e}"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
        .arg("status")
        .arg("--config")
        .arg(&config_path)
        .arg("--kubeconfig")
        .arg(tb.kubeconfig("initguard"))
        .args(["--output", "json"])
        .output()
        .unwrap_or_else(|e| panic!("initguard status: {e}"));
    assert!(
        out.status.success(),
        "initguard status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("initguard status JSON: {e}"));
    let one_shot = &report["webhooks"][0];
    assert_eq!(one_shot["state"], "bypassed", "{report:#}");
    assert_eq!(one_shot["added"], record[ENTRY]["added"], "{report:#}");
    // The exempt namespace (the webhook's own) can create its pods.
    create_pod(&tb, &system, "webhook-pod", false)
        .unwrap_or_else(|e| panic!("the exempt namespace is not sent to the webhook: {e}"));
    let events = tb.list("events", "default", None);
    assert!(
        events.iter().any(|e| e["reason"] == "WebhookBypassed"
            && e["involvedObject"]["name"] == json!(name)),
        "a WebhookBypassed Event on the configuration"
    );

    // Revive: after restoreGrace the entry is exactly as before.
    bed.revive_owner();
    let revived = bed.last_lease_write();
    eventually(
        "the entry restored exactly after the owner came back",
        || {
            let now = get_configuration(&tb, &name);
            let restored = now["webhooks"] == baseline["webhooks"]
                && now["metadata"]["annotations"].get(RECORD).is_none();
            restored.then_some(())
        },
    )
    .await;
    let restore = configuration_writes(&tb, started)
        .into_iter()
        .rfind(|a| a.verb == "patch" && a.ok() && a.name == name)
        .unwrap_or_else(|| panic!("no restore patch"));
    let restored_at = timestamp(&restore.received);
    assert!(
        restored_at >= revived + jiff::SignedDuration::from_secs(RESTORE_GRACE_S as i64),
        "restored at {restored_at}, less than restoreGrace after the owner came back ({revived})"
    );
    let calls = bed.server.calls.load(Ordering::SeqCst);
    create_pod(&tb, &apps, "after", false).unwrap_or_else(|e| panic!("webhook back: {e}"));
    assert!(
        bed.server.calls.load(Ordering::SeqCst) > calls,
        "called again"
    );

    guard.stop();
    bed.cleanup();
}

pub(crate) async fn webhook_dry_run_writes_nothing(tb: Arc<Testbed>) {
    let mut bed = Bed::new(tb.clone(), "whd").await;
    let guard = start_guard(&bed, "auto", true).await;
    bed.kill_owner().await;
    eventually("the dry-run decision in the guard's log", || {
        guard
            .log_text()
            .contains("dry-run: would bypass webhook")
            .then_some(())
    })
    .await;
    create_pod(&tb, &bed.apps, "still-rejected", true)
        .expect_err("dry-run: the webhook is still called and still fails");
    let writes = configuration_writes(&tb, bed.started);
    assert!(writes.is_empty(), "dry-run wrote: {writes:#?}");
    assert_eq!(
        get_configuration(&tb, &bed.name)["webhooks"],
        bed.baseline["webhooks"]
    );
    guard.stop();
    bed.cleanup();
}

/// The self-deadlock at the API level: the webhook's own namespace matches the webhook, so
/// while it is down its Deployment's ReplicaSet cannot create pods (the backend can never
/// come back). With the guard exempting that namespace, the real ReplicaSet controller
/// creates them; when the owner is back, the exemption is removed.
pub(crate) async fn webhook_own_pods_created_through_the_exemption(tb: Arc<Testbed>) {
    let mut bed = Bed::new(tb.clone(), "whx").await;
    bed.kill_owner().await;
    tb.apply(&json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "policy-webhook", "namespace": bed.system },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "policy-webhook" } },
            "template": {
                "metadata": { "labels": { "app": "policy-webhook" } },
                "spec": { "containers": [{ "name": "webhook", "image": "registry.k8s.io/pause:3.10" }] },
            },
        },
    }));
    // Without the guard the ReplicaSet's creates are rejected by the dead webhook.
    let system = bed.system.clone();
    let rejected = |tb: &Testbed| {
        tb.audit().into_iter().any(|a| {
            a.resource == "pods"
                && a.subresource.is_empty()
                && a.verb == "create"
                && a.namespace == system
                && a.user.contains("replicaset-controller")
                && !a.ok()
        })
    };
    eventually(
        "the ReplicaSet's pod creates rejected by the dead webhook",
        || rejected(&tb).then_some(()),
    )
    .await;
    assert!(
        tb.list("pods", &bed.system, Some("app=policy-webhook"))
            .is_empty()
    );

    let guard = start_guard(&bed, "auto", false).await;
    eventually(
        "the ReplicaSet controller's pods created through the exemption",
        || {
            (tb.list("pods", &bed.system, Some("app=policy-webhook"))
                .len()
                == 2)
                .then_some(())
        },
    )
    .await;
    let created: Vec<Audit> = tb
        .audit()
        .into_iter()
        .filter(|a| {
            a.resource == "pods"
                && a.subresource.is_empty()
                && a.verb == "create"
                && a.namespace == bed.system
                && a.ok()
        })
        .collect();
    assert!(
        created
            .iter()
            .all(|a| a.user.contains("replicaset-controller")),
        "created by the real ReplicaSet controller: {created:#?}"
    );
    // Caused by the bypass: no pod was admitted before the guard's patch.
    let patched = configuration_writes(&tb, bed.started)
        .into_iter()
        .find(|a| a.verb == "patch" && a.ok() && a.name == bed.name)
        .unwrap_or_else(|| panic!("no bypass patch"));
    assert!(created.iter().all(|a| a.received > patched.received));
    // A pod of the apps namespace that did not opt in is still rejected.
    create_pod(&tb, &bed.apps, "plain", false).expect_err("not exempt, not opted in");

    bed.revive_owner();
    let baseline_entry = bed.baseline["webhooks"][1].clone();
    eventually("the exemption removed once the owner is back", || {
        (bed.entry() == baseline_entry).then_some(())
    })
    .await;
    guard.stop();
    tb.kubectl(&["delete", "deployment", "policy-webhook", "-n", &bed.system]);
    bed.cleanup();
}

/// Others' edits win: a writer that keeps undoing the bypass makes it flapping (the guard
/// stops re-applying it, Warning Event), and when the owner is back the entry as that writer
/// left it is not overwritten (a conflict, Warning Event), the record is dropped.
pub(crate) async fn webhook_edits_by_others_are_not_overwritten(tb: Arc<Testbed>) {
    let mut bed = Bed::new(tb.clone(), "whe").await;
    let guard = start_guard(&bed, "auto", false).await;
    bed.kill_owner().await;
    let bypassed = |bed: &Bed| {
        bed.entry()["matchConditions"]
            .as_array()
            .is_some_and(|l| l.iter().any(|c| c["name"] == "initguard-bypass"))
    };
    let mut last_undo = String::new();
    for round in 1..=3 {
        eventually(format!("bypass {round} in force"), || {
            bypassed(&bed).then_some(())
        })
        .await;
        // Another writer (a webhook manager) puts its own version back; the third time it
        // also changes the timeout.
        let mut patch = vec![json!({ "op": "remove", "path": "/webhooks/1/matchConditions" })];
        if round == 3 {
            patch
                .push(json!({ "op": "replace", "path": "/webhooks/1/timeoutSeconds", "value": 7 }));
        }
        tb.kubectl(&[
            "patch",
            "validatingwebhookconfiguration",
            &bed.name,
            "--type",
            "json",
            "-p",
            &Value::Array(patch).to_string(),
        ]);
        last_undo = tb
            .audit()
            .into_iter()
            .filter(|a| {
                a.resource == "validatingwebhookconfigurations"
                    && a.name == bed.name
                    && a.verb == "patch"
                    && a.user == "system:admin"
            })
            .map(|a| a.received)
            .max()
            .unwrap_or_default();
    }
    eventually("the flapping Event", || {
        (bed.events("WebhookBypassFlapping") == 1).then_some(())
    })
    .await;
    let after: Vec<Audit> = configuration_writes(&tb, bed.started)
        .into_iter()
        .filter(|a| a.name == bed.name && a.received > last_undo)
        .collect();
    assert!(
        after.is_empty(),
        "re-applied after the third undo: {after:#?}"
    );
    assert!(!bypassed(&bed));

    bed.revive_owner();
    eventually("the conflict Event once the owner is back", || {
        (bed.events("WebhookRestoreConflict") == 1).then_some(())
    })
    .await;
    eventually("the record dropped", || {
        let now = get_configuration(&tb, &bed.name);
        now["metadata"]["annotations"]
            .get(RECORD)
            .is_none()
            .then_some(())
    })
    .await;
    let entry = bed.entry();
    assert_eq!(
        entry["timeoutSeconds"], 7,
        "the other writer's change stays: {entry:#}"
    );
    assert_eq!(entry.get("matchConditions"), None);
    let mut expected = bed.baseline["webhooks"][1].clone();
    expected["timeoutSeconds"] = json!(7);
    assert_eq!(entry, expected, "nothing else changed");
    guard.stop();
    bed.cleanup();
}

/// Without an `owner`, a webhook that calls a Service is owned by the Service's ready
/// endpoints: read from the configuration at start, watched through EndpointSlices (which the
/// test writes, as the EndpointSlice controller would: the test bed runs no kubelet), up while
/// one endpoint is ready and down, so bypassed, once none is.
pub(crate) async fn webhook_default_owner_is_the_services_endpoints(tb: Arc<Testbed>) {
    let started = jiff::Timestamp::now();
    let (prefix, system) = ("whv", "whv-system");
    let name = "whv-policy";
    tb.namespace(system);
    tb.kubectl(&["label", "namespace", system, "webhook-test=whv"]);
    tb.kubectl(&[
        "-n",
        system,
        "create",
        "service",
        "clusterip",
        "policy-webhook",
        "--tcp=443:9443",
    ]);
    let slice = |ready: bool| {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": { "name": "policy-webhook-1", "namespace": system,
                          "labels": { "kubernetes.io/service-name": "policy-webhook" } },
            "addressType": "IPv4",
            "endpoints": [{ "addresses": ["10.0.0.99"], "conditions": { "ready": ready } }],
            "ports": [{ "name": "", "port": 9443, "protocol": "TCP" }],
        })
    };
    tb.apply(&slice(true));
    apply_service_webhook(&tb, name, prefix, system, "policy-webhook");
    grant(&tb, prefix, name);
    grant_service_owner_reads(&tb, prefix);
    let guard = tb
        .guard(
            prefix,
            "initguard",
            &config(&format!(
                "webhooks:\n\
                 \x20 - name: validating/{name}/{ENTRY}\n\
                 \x20   ownerDownGrace: 1s\n\
                 \x20   restoreGrace: 1s\n"
            )),
        )
        .await;
    let webhook = format!("validating/{name}/{ENTRY}");
    let owner_of = |state: &str| {
        let (code, body) = curl(&format!("http://127.0.0.1:{}/status", guard.port));
        let status: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let owner = status["owners"].as_array().and_then(|o| {
            o.iter()
                .find(|o| o["initializer"] == webhook.as_str())
                .cloned()
        });
        owner.filter(|o| code == 200 && o["ownerKind"] == "service" && o["state"] == state)
    };
    let up = eventually("the Service's endpoints seen ready", || owner_of("up")).await;
    assert_eq!(up["target"], format!("{system}/policy-webhook"), "{up:#}");

    tb.apply(&slice(false));
    eventually("the owner down once no endpoint is ready", || {
        owner_of("down")
    })
    .await;
    let record = eventually("the bypass record", || {
        let now = get_configuration(&tb, name);
        now["metadata"]["annotations"][RECORD]
            .as_str()
            .and_then(|r| serde_json::from_str::<Value>(r).ok())
    })
    .await;
    assert_eq!(
        record[ENTRY]["owner"],
        format!("service {system}/policy-webhook"),
        "{record:#}"
    );
    // Never early: every write of the configuration reached the server at least
    // ownerDownGrace (1 s) after the write that made the last endpoint unready (the guard
    // cannot have seen it before the server received it). Both times are the server's.
    let writes = configuration_writes(&tb, started);
    assert!(!writes.is_empty(), "the bypass is in the audit log");
    let at = |t: &str| -> jiff::Timestamp { t.parse().unwrap_or_else(|e| panic!("{t}: {e}")) };
    let slices: Vec<_> = tb
        .audit()
        .into_iter()
        .filter(|a| {
            a.resource == "endpointslices"
                && a.namespace == system
                && a.name == "policy-webhook-1"
                && a.is_write()
                && at(&a.received) >= started
        })
        .collect();
    let unready = slices.iter().rfind(|a| a.ok()).unwrap_or_else(|| {
        panic!("the unready EndpointSlice write is in the audit log: {slices:#?}")
    });
    assert!(
        slices.len() >= 2,
        "the ready and the unready write: {slices:#?}"
    );
    let grace = jiff::SignedDuration::from_secs(1);
    for w in &writes {
        assert!(
            at(&w.received) >= at(&unready.received) + grace,
            "written before ownerDownGrace had passed since the endpoint was unready at {}: {w:#?}",
            unready.received
        );
    }
    guard.stop();
    cleanup(&tb, prefix, name);
    revoke_service_owner_reads(&tb, prefix);
}

/// Namespaces `system` and `prefix` (called for) and a fail-closed configuration `name` whose
/// entry calls Service `system/uninstalled`, which does not exist (as after an uninstall that
/// left the configuration behind); its `webhooks` as the server holds them.
fn dangling_service_webhook(tb: &Testbed, prefix: &str, system: &str, name: &str) -> Value {
    tb.namespace(system);
    tb.namespace(prefix);
    tb.kubectl(&[
        "label",
        "namespace",
        prefix,
        &format!("webhook-test={prefix}"),
    ]);
    apply_service_webhook(tb, name, prefix, system, "uninstalled");
    get_configuration(tb, name)["webhooks"].clone()
}

/// A fail-closed configuration `name` whose one entry calls Service `system/service` for pod
/// creates in namespaces labelled `webhook-test=PREFIX`.
fn apply_service_webhook(tb: &Testbed, name: &str, prefix: &str, system: &str, service: &str) {
    tb.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": name },
        "webhooks": [{
            "name": ENTRY,
            "clientConfig": { "service": { "namespace": system, "name": service,
                                           "path": "/validate" } },
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["pods"] }],
            "namespaceSelector": { "matchLabels": { "webhook-test": prefix } },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    }));
}

/// `initguard check-config FILE --kubeconfig admin` of `text` (written to the test bed's
/// directory as `file`) exits 0 and prints a warning line for which `wanted` holds.
fn check_config_warns(tb: &Testbed, file: &str, text: &str, wanted: impl Fn(&str) -> bool) {
    let path = tb.dir.join(file);
    std::fs::write(&path, text).expect("write the config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
        .arg("check-config")
        .arg(&path)
        .arg("--kubeconfig")
        .arg(tb.kubeconfig("admin"))
        .output()
        .expect("check-config runs");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && printed
                .lines()
                .any(|l| l.starts_with("warning: ") && wanted(l)),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The chart's rules for default (Service) owners: EndpointSlices, and the Services themselves.
fn grant_service_owner_reads(tb: &Testbed, prefix: &str) {
    let role = format!("{prefix}-service-owner");
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": role },
        "rules": [
            { "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"] },
            { "apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"] },
        ],
    }));
    tb.kubectl(&[
        "create",
        "clusterrolebinding",
        &role,
        &format!("--clusterrole={role}"),
        &format!("--user={GUARD_USER}"),
    ]);
}

fn revoke_service_owner_reads(tb: &Testbed, prefix: &str) {
    for kind in ["clusterrolebinding", "clusterrole"] {
        tb.kubectl(&[
            "delete",
            kind,
            &format!("{prefix}-service-owner"),
            "--ignore-not-found",
        ]);
    }
}

/// Where the canary scenario's dry runs go; they are refused (403) on purpose until its Role
/// exists.
pub(crate) const CANARY_NAMESPACE: &str = "whk-canary";

/// An uninstall that removed the webhook's Service but left its Fail configuration behind:
/// the API server rejects every create ("service not found"). A guard started only then never
/// saw the Service, and still judges the default owner down: after the grace the entry is
/// bypassed, opted-in pods are admitted and others are still rejected. `initguard restore`
/// then puts the entry back exactly while the Service is still missing and leaves a tombstone:
/// the running guard does not bypass again until the owner has been up (the tombstone goes)
/// and down again.
pub(crate) async fn webhook_whose_service_is_gone_is_bypassed_by_a_guard_started_after(
    tb: Arc<Testbed>,
) {
    let started = jiff::Timestamp::now();
    let (prefix, system) = ("whg", "whg-system");
    let name = "whg-policy";
    let before = dangling_service_webhook(&tb, prefix, system, name);
    // The outage, as the API server reports it.
    let refused = eventually("the dangling webhook to reject a create", || {
        create_pod(&tb, prefix, "before", false).err()
    })
    .await;
    assert!(
        refused.contains("failed calling webhook") && refused.contains("not found"),
        "{refused}"
    );
    grant(&tb, prefix, name);
    grant_service_owner_reads(&tb, prefix);
    let guard = tb
        .guard(
            prefix,
            "initguard",
            &config(&format!(
                "webhooks:\n\
                 \x20 - name: validating/{name}/{ENTRY}\n\
                 \x20   ownerDownGrace: 1s\n"
            )),
        )
        .await;
    let webhook = format!("validating/{name}/{ENTRY}");
    let down = eventually("the default owner down: its Service is missing", || {
        let (code, body) = curl(&format!("http://127.0.0.1:{}/status", guard.port));
        let status: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        status["owners"].as_array().and_then(|o| {
            o.iter()
                .find(|o| o["initializer"] == webhook.as_str() && o["state"] == "down")
                .filter(|_| code == 200)
                .cloned()
        })
    })
    .await;
    assert!(
        down["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("Service {system}/uninstalled not found"))),
        "{down:#}"
    );
    eventually("an opted-in create admitted through the bypass", || {
        create_pod(&tb, prefix, "opted-in", true).ok()
    })
    .await;
    let still = create_pod(&tb, prefix, "not-opted-in", false)
        .expect_err("a pod that did not opt in passed the bypassed webhook");
    assert!(still.contains("failed calling webhook"), "{still}");
    // Only the bypass's own elements were added.
    let writes = configuration_writes(&tb, started);
    assert!(
        !writes.is_empty() && writes.iter().all(|w| w.user == GUARD_USER && w.ok()),
        "{writes:#?}"
    );
    let after = get_configuration(&tb, name)["webhooks"].clone();
    assert_eq!(after[0]["clientConfig"], before[0]["clientConfig"]);
    assert_eq!(after[0]["failurePolicy"], before[0]["failurePolicy"]);

    // `initguard restore` while the Service is still missing: the entry exactly as before,
    // and a tombstone in place of the record.
    let config_path = tb.dir.join(format!("{prefix}-restore.yaml"));
    std::fs::write(
        &config_path,
        config(&format!("webhooks:\n  - name: validating/{name}/{ENTRY}\n")),
    )
    .expect("write the restore config");
    let restore = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
            .arg("restore")
            .arg("--config")
            .arg(&config_path)
            .arg("--kubeconfig")
            .arg(tb.kubeconfig("initguard"))
            .args(extra)
            .output()
            .expect("initguard restore runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, printed) = restore(&["--dry-run"]);
    assert_eq!(code, Some(0), "{printed}");
    assert!(printed.contains("would restore"), "{printed}");
    assert_ne!(
        get_configuration(&tb, name)["webhooks"],
        before,
        "a dry run wrote"
    );
    let (code, printed) = restore(&[]);
    assert_eq!(code, Some(0), "{printed}");
    assert!(printed.contains("restored"), "{printed}");
    let restored_at = jiff::Timestamp::now();
    let restored = get_configuration(&tb, name);
    assert_eq!(restored["webhooks"], before, "restored exactly");
    let record: Value = serde_json::from_str(
        restored["metadata"]["annotations"][RECORD]
            .as_str()
            .expect("the record annotation holds the tombstone"),
    )
    .expect("the record is JSON");
    assert_eq!(record[ENTRY]["restored"]["by"], "cli", "{record:#}");
    let refused = create_pod(&tb, prefix, "after-restore", true)
        .expect_err("the restored webhook rejects again, opted in or not");
    assert!(refused.contains("failed calling webhook"), "{refused}");
    // Again: nothing left to restore.
    let (code, printed) = restore(&[]);
    assert_eq!(
        (code, printed.contains("no bypass recorded")),
        (Some(0), true),
        "{printed}"
    );

    // The running guard leaves it alone while the owner stays down (its grace is 1 s).
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let writes_after = |since: jiff::Timestamp| -> Vec<Audit> {
        configuration_writes(&tb, since)
            .into_iter()
            .filter(|w| w.user == GUARD_USER)
            .collect()
    };
    assert!(
        writes_after(restored_at).is_empty(),
        "the guard bypassed again before the owner was seen up: {:#?}",
        writes_after(restored_at)
    );
    // The owner comes up (the Service and a ready endpoint): the tombstone goes; down again
    // (the Service removed): bypassed again, in that order.
    tb.kubectl(&[
        "-n",
        system,
        "create",
        "service",
        "clusterip",
        "uninstalled",
        "--tcp=443:9443",
    ]);
    tb.apply(&json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "name": "uninstalled-1", "namespace": system,
                      "labels": { "kubernetes.io/service-name": "uninstalled" } },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": ["10.0.0.98"], "conditions": { "ready": true } }],
        "ports": [{ "name": "", "port": 9443, "protocol": "TCP" }],
    }));
    eventually("the tombstone dropped once the owner is seen up", || {
        let now = get_configuration(&tb, name);
        now["metadata"]["annotations"][RECORD]
            .is_null()
            .then_some(())
    })
    .await;
    let up_seen = jiff::Timestamp::now();
    tb.kubectl(&["-n", system, "delete", "service", "uninstalled"]);
    tb.kubectl(&["-n", system, "delete", "endpointslice", "uninstalled-1"]);
    eventually("bypassed again after the owner went down again", || {
        create_pod(&tb, prefix, "opted-in-again", true).ok()
    })
    .await;
    let rebypass = writes_after(up_seen);
    assert!(
        !rebypass.is_empty() && rebypass.iter().all(Audit::ok),
        "{rebypass:#?}"
    );
    guard.stop();
    // Leave nothing bypassed: the owner is still down, so the guard would keep it.
    let (code, printed) = restore(&[]);
    assert_eq!(code, Some(0), "{printed}");
    cleanup(&tb, prefix, name);
    revoke_service_owner_reads(&tb, prefix);
    tb.kubectl(&["delete", "namespace", system, "--wait=false"]);
}

/// A webhook that intercepts the cluster's own requests (Nodes, kube-system, DELETEs), bypassed
/// with `exemptCriticalPath`: while its backend is dead, a kubelet's Node write, a DELETE and a
/// kube-system write are admitted, while an admin's Node write and a ReplicaSet's pod that did
/// not opt in are still rejected; the entry is restored exactly afterwards.
pub(crate) async fn webhook_bypass_lets_the_critical_path_through(tb: Arc<Testbed>) {
    let prefix = "whc";
    let mut bed = Bed::new(tb.clone(), prefix).await;
    let (apps, system, name) = (bed.apps.clone(), bed.system.clone(), bed.name.clone());
    // The listed entry also intercepts Nodes, DELETEs and kube-system.
    let broaden = json!([
        { "op": "replace", "path": "/webhooks/1/rules", "value": [
            { "operations": ["CREATE", "DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
              "resources": ["pods", "configmaps"] },
            { "operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
              "resources": ["nodes"] },
        ] },
        { "op": "replace", "path": "/webhooks/1/namespaceSelector", "value": {
            "matchExpressions": [{ "key": "kubernetes.io/metadata.name", "operator": "In",
                                   "values": [apps, system, "kube-system"] }] } },
    ])
    .to_string();
    tb.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        &name,
        "--type",
        "json",
        "-p",
        &broaden,
    ]);
    let baseline = get_configuration(&tb, &name);
    let guard = tb
        .guard(
            prefix,
            "initguard",
            &config(&format!(
                "webhooks:\n\
                 \x20 - name: validating/{name}/{ENTRY}\n\
                 \x20   owner: {{ lease: {system}/policy-webhook }}\n\
                 \x20   ownerDownGrace: {GRACE_S}s\n\
                 \x20   restoreGrace: {RESTORE_GRACE_S}s\n\
                 \x20   exemptNamespaces: [{system}]\n\
                 \x20   exemptCriticalPath: true\n"
            )),
        )
        .await;
    create_pod(&tb, &apps, "victim", false).unwrap_or_else(|e| panic!("webhook up: {e}"));
    let node = "testbed-node-2";
    let label_node = |as_kubelet: bool, value: &str| {
        let mut args = vec!["label", "node", node, "--overwrite"];
        let label = format!("whc={value}");
        args.push(&label);
        let who = ["--as=system:node:testbed-node-2", "--as-group=system:nodes"];
        if as_kubelet {
            args.extend(who);
        }
        let out = tb.kubectl_with("admin", &args, None);
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
    };
    bed.kill_owner().await;
    let refused = label_node(true, "down").expect_err("the dead webhook rejects Node writes");
    assert!(refused.contains("failed calling webhook"), "{refused}");

    let mut attempt = 0;
    eventually("an opted-in pod admitted while the webhook is down", || {
        attempt += 1;
        create_pod(&tb, &apps, &format!("opted-in-{attempt}"), true).ok()
    })
    .await;
    // The critical path passes the dead webhook.
    label_node(true, "kubelet").unwrap_or_else(|e| panic!("a kubelet's Node write: {e}"));
    tb.kubectl(&["delete", "pod", "victim", "-n", &apps, "--wait=false"]);
    tb.kubectl(&["create", "configmap", "whc-probe", "-n", "kube-system"]);
    // What is not on it still goes to the dead webhook.
    let admin_node = label_node(false, "admin").expect_err("an admin's Node write is not exempt");
    assert!(admin_node.contains(ENTRY), "{admin_node}");
    let rs_created = jiff::Timestamp::now();
    tb.apply(&json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": { "name": "tenant", "namespace": apps },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "tenant" } },
                  "template": { "metadata": { "labels": { "app": "tenant" } },
                                "spec": { "containers": [{ "name": "c", "image": "registry.k8s.io/pause:3.10" }] } } },
    }));
    let rejected = eventually(
        "the ReplicaSet's pod create rejected by the dead webhook",
        || {
            tb.audit().into_iter().find(|a| {
                a.user == "system:serviceaccount:kube-system:replicaset-controller"
                    && a.resource == "pods"
                    && a.verb == "create"
                    && a.namespace == apps
                    && timestamp(&a.received) >= rs_created
            })
        },
    )
    .await;
    assert!(
        !rejected.ok(),
        "a ReplicaSet's pod that did not opt in was admitted: {rejected:#?}"
    );
    assert!(tb.list("pods", &apps, Some("app=tenant")).is_empty());

    // Restored exactly once the owner is back.
    bed.revive_owner();
    eventually(
        "the entry restored exactly after the owner came back",
        || {
            let now = get_configuration(&tb, &name);
            (now["webhooks"] == baseline["webhooks"]).then_some(())
        },
    )
    .await;
    guard.stop();
    tb.kubectl(&["label", "node", node, "whc-"]);
    tb.kubectl(&["delete", "configmap", "whc-probe", "-n", "kube-system"]);
    tb.kubectl(&["delete", "replicaset", "tenant", "-n", &apps]);
    bed.cleanup();
}

/// `helm uninstall` leaves no webhook bypassed: the chart's pre-delete hook Job restores it;
/// an entry whose bypass someone else edited meanwhile is reported as a conflict, left as it
/// is, and the uninstall still completes.
/// The test bed runs no kubelet, so the test plays the kubelet's part for the hook's pod: it
/// runs the pod's own command line as a host process, with a TokenRequest token of the pod's
/// ServiceAccount and the release's rendered config, then reports the pod Succeeded through
/// `pods/status`; the real Job controller and helm do the rest.
pub(crate) async fn webhook_bypass_is_restored_by_helm_uninstall(tb: Arc<Testbed>) {
    let (prefix, system, release_ns) = ("whu", "whu-system", "whu-release");
    let name = "whu-policy";
    let release = "whu";
    let before = dangling_service_webhook(&tb, prefix, system, name);
    // A second configuration on the same Service, whose bypass someone edits afterwards.
    let edited_name = "whu-edited";
    apply_service_webhook(&tb, edited_name, prefix, system, "uninstalled");
    // A guard bypasses both (the release's own replicas never run here), then stops.
    grant_names(&tb, prefix, &[name, edited_name]);
    grant_service_owner_reads(&tb, prefix);
    let webhook = format!("validating/{name}/{ENTRY}");
    let edited_webhook = format!("validating/{edited_name}/{ENTRY}");
    let guard = tb
        .guard(
            prefix,
            "initguard",
            &config(&format!(
                "webhooks:\n  - {{ name: {webhook}, ownerDownGrace: 1s }}\n  \
                 - {{ name: {edited_webhook}, ownerDownGrace: 1s }}\n"
            )),
        )
        .await;
    eventually("both bypassed", || {
        create_pod(&tb, prefix, "opted-in", true).ok()
    })
    .await;
    guard.stop();
    // Someone changes what the bypass added: the restore must leave that entry alone.
    let conditions = get_configuration(&tb, edited_name)["webhooks"][0]["matchConditions"].clone();
    let index = conditions
        .as_array()
        .and_then(|c| c.iter().position(|c| c["name"] == "initguard-bypass"))
        .unwrap_or_else(|| panic!("the bypass condition: {conditions:#}"));
    tb.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        edited_name,
        "--type=json",
        "-p",
        &json!([{ "op": "replace",
                  "path": format!("/webhooks/0/matchConditions/{index}/expression"),
                  "value": "true" }])
        .to_string(),
    ]);
    let edited = get_configuration(&tb, edited_name);
    cleanup_rbac_only(&tb, prefix);
    revoke_service_owner_reads(&tb, prefix);
    // A config that no longer lists it: check-config says the record is left behind.
    check_config_warns(&tb, "whu-unlisted.yaml", &config(""), |l| {
        l.contains(&format!(
            "{webhook} carries a bypass record but is not listed"
        ))
    });

    let helm = tb.bin.join("helm");
    let admin = tb.kubeconfig("admin");
    let admin = admin.to_str().expect("UTF-8 path");
    let chart = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("charts/initguard");
    let webhooks = json!([{ "name": webhook }, { "name": edited_webhook }]).to_string();
    crate::deploy::run(
        "helm install",
        &helm,
        &[
            "--kubeconfig",
            admin,
            "install",
            release,
            chart.to_str().expect("UTF-8 path"),
            "--namespace",
            release_ns,
            "--create-namespace",
            "--set-json",
            &format!("config.webhooks={webhooks}"),
            "--set",
            "config.dryRun=false",
            "--set",
            "replicaCount=1",
            "--set",
            "admissionPolicies.enabled=false",
            crate::deploy::IMAGE[0],
            crate::deploy::IMAGE[1],
        ],
        None,
    );
    let uninstall = std::process::Command::new(&helm)
        .args([
            "--kubeconfig",
            admin,
            "uninstall",
            release,
            "--namespace",
            release_ns,
            "--wait",
            "--timeout",
            "3m",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("helm uninstall starts");
    let pod = eventually("the restore hook's pod", || {
        tb.list(
            "pods",
            release_ns,
            Some("app.kubernetes.io/component=restore"),
        )
        .into_iter()
        .next()
    })
    .await;
    let pod_name = pod["metadata"]["name"]
        .as_str()
        .expect("pod name")
        .to_owned();
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        pod["metadata"]["labels"][OPT_IN], "true",
        "the hook pod is opted in"
    );
    // The pod's identity and configuration, as the kubelet would mount them.
    let config_path = crate::deploy::release_config(&tb, release, release_ns);
    assert_eq!(container["args"][0], "restore", "{container:#}");
    let out = crate::deploy::run_container(
        &tb,
        &pod,
        container,
        &[("/etc/initguard/config.yaml", &config_path)],
    );
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success()
            && printed.contains(&format!("{webhook}: restored"))
            && printed.contains(&format!("{edited_webhook}: conflict")),
        "the hook's command: {printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    crate::deploy::finish_pod(&tb, release_ns, &pod_name, "Succeeded");
    let done = uninstall.wait_with_output().expect("helm uninstall ends");
    assert!(
        done.status.success(),
        "helm uninstall: {}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    let status = std::process::Command::new(&helm)
        .args([
            "--kubeconfig",
            admin,
            "status",
            release,
            "--namespace",
            release_ns,
        ])
        .output()
        .expect("helm status runs");
    assert!(!status.status.success(), "the release is still there");
    let after = get_configuration(&tb, name);
    assert_eq!(after["webhooks"], before, "restored exactly by the hook");
    let record: Value = serde_json::from_str(
        after["metadata"]["annotations"][RECORD]
            .as_str()
            .expect("the tombstone"),
    )
    .expect("JSON");
    assert_eq!(record[ENTRY]["restored"]["by"], "uninstall", "{record:#}");
    // The conflicting edit and its record were left exactly as they were.
    let left = get_configuration(&tb, edited_name);
    assert_eq!(
        left["webhooks"], edited["webhooks"],
        "the edited entry was touched"
    );
    assert_eq!(
        left["metadata"]["annotations"][RECORD], edited["metadata"]["annotations"][RECORD],
        "the record of the conflicting entry changed"
    );
    tb.kubectl(&[
        "delete",
        "validatingwebhookconfiguration",
        name,
        edited_name,
    ]);
    for ns in [system, release_ns] {
        tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }
}

/// The RBAC of [`grant`] alone (the configuration stays).
fn cleanup_rbac_only(tb: &Testbed, prefix: &str) {
    let role = format!("{prefix}-initguard-webhooks");
    tb.kubectl(&["delete", "clusterrolebinding", &role, "--ignore-not-found"]);
    tb.kubectl(&["delete", "clusterrole", &role, "--ignore-not-found"]);
}

/// A backend that is up but does not answer (frozen: its port accepts, nothing replies) while
/// its Lease is renewed: only the `apiserver` owner sees it. A canary the entry's
/// namespaceSelector does not select leaves the owner unknown (and check-config warns) until the
/// namespace is labelled. Refused by RBAC or by LimitRanger, the canary says unknown, never up;
/// it meets the restricted Pod Security Standard. Granted, it is up; frozen, the audit log shows failing dry-run canaries
/// before the bypass PATCH; thawed, the entry is restored exactly. Canaries reach the webhook
/// as dry runs and nothing is stored.
pub(crate) async fn webhook_canary_sees_a_backend_that_is_up_but_does_not_answer(tb: Arc<Testbed>) {
    let prefix = "whk";
    let bed = Bed::new(tb.clone(), prefix).await;
    let (apps, system, name) = (bed.apps.clone(), bed.system.clone(), bed.name.clone());
    let canary_ns = CANARY_NAMESPACE.to_owned();
    tb.namespace(&canary_ns);
    // The canary must meet the restricted Pod Security Standard to be admitted at all.
    tb.kubectl(&[
        "label",
        "namespace",
        &canary_ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    // The guard watches the canary namespace by name to judge the entry's namespaceSelector.
    let namespace_reader = format!("{prefix}-canary-namespace");
    tb.kubectl(&[
        "create",
        "clusterrole",
        &namespace_reader,
        "--verb=get,list,watch",
        "--resource=namespaces",
        &format!("--resource-name={canary_ns}"),
    ]);
    tb.kubectl(&[
        "create",
        "clusterrolebinding",
        &namespace_reader,
        &format!("--clusterrole={namespace_reader}"),
        &format!("--user={GUARD_USER}"),
    ]);
    let baseline = get_configuration(&tb, &name);
    let webhook = format!("validating/{name}/{ENTRY}");
    let config_text = config(&format!(
        "webhooks:\n\
         \x20 - name: {webhook}\n\
         \x20   owner: {{ apiserver: {{ namespace: {canary_ns}, resource: pods, interval: 1s }} }}\n\
         \x20   ownerDownGrace: {GRACE_S}s\n\
         \x20   restoreGrace: {RESTORE_GRACE_S}s\n\
         \x20   exemptNamespaces: [{system}]\n"
    ));
    let guard = tb.guard(prefix, "initguard", &config_text).await;
    let canary_problem = || {
        let (code, body) = curl(&format!("http://127.0.0.1:{}/status", guard.port));
        let status: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        status["webhooks"]
            .as_array()
            .and_then(|w| w.iter().find(|w| w["webhook"] == webhook.as_str()))
            .filter(|_| code == 200)
            .map(|w| w["canaryProblem"].as_str().map(str::to_owned))
    };
    // The entry's namespaceSelector does not select the unlabelled canary namespace: a canary
    // would be admitted without calling the webhook, so the owner is unknown, not up.
    let problem = eventually("the canary does not reach the entry", || {
        canary_problem().flatten()
    })
    .await;
    assert!(problem.contains("namespaceSelector"), "{problem}");
    check_config_warns(&tb, "whk-config.yaml", &config_text, |l| {
        l.contains(&webhook)
            && l.contains("the canary does not reach it")
            && l.contains("namespaceSelector")
    });
    tb.kubectl(&[
        "label",
        "namespace",
        &canary_ns,
        &format!("webhook-test={prefix}"),
    ]);
    eventually("the labelled namespace reaches the entry", || {
        canary_problem().filter(Option::is_none)
    })
    .await;
    let owner = |state: &str| {
        let (code, body) = curl(&format!("http://127.0.0.1:{}/status", guard.port));
        let status: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        status["owners"].as_array().and_then(|o| {
            o.iter()
                .find(|o| o["initializer"] == webhook.as_str() && o["state"] == state)
                .filter(|_| code == 200)
                .cloned()
        })
    };
    // Without RBAC the dry run is refused: that says nothing about the webhook.
    let unknown = eventually("the canary refused by RBAC, the owner unknown", || {
        owner("unknown").filter(|o| {
            o["detail"]
                .as_str()
                .is_some_and(|d| d.contains("forbidden"))
        })
    })
    .await;
    assert_eq!(unknown["ownerKind"], "apiserver", "{unknown:#}");
    tb.kubectl(&[
        "create",
        "role",
        "whk-canary",
        "-n",
        &canary_ns,
        "--verb=create",
        "--resource=pods",
    ]);
    tb.kubectl(&[
        "create",
        "rolebinding",
        "whk-canary",
        "-n",
        &canary_ns,
        "--role=whk-canary",
        &format!("--user={GUARD_USER}"),
    ]);
    eventually("the canary admitted, the owner up", || owner("up")).await;
    // Another admission plugin's refusal says nothing about the webhook either.
    tb.apply(&json!({
        "apiVersion": "v1", "kind": "LimitRange",
        "metadata": { "name": "tiny", "namespace": canary_ns },
        "spec": { "limits": [{ "type": "Container", "max": { "memory": "1Mi" } }] },
    }));
    let refused = eventually(
        "the canary refused by LimitRanger, the owner unknown",
        || owner("unknown"),
    )
    .await;
    assert!(
        refused["detail"]
            .as_str()
            .is_some_and(|d| d.contains("maximum memory usage")),
        "{refused:#}"
    );
    tb.kubectl(&["delete", "limitrange", "tiny", "-n", &canary_ns]);
    eventually("the owner up again", || owner("up")).await;

    let frozen_at = jiff::Timestamp::now();
    bed.server.freeze();
    let mut attempt = 0;
    eventually("an opted-in pod admitted through the bypass", || {
        attempt += 1;
        create_pod(&tb, &apps, &format!("opted-in-{attempt}"), true).ok()
    })
    .await;
    let audit = tb.audit();
    let canaries: Vec<&Audit> = audit
        .iter()
        .filter(|a| {
            a.user == GUARD_USER
                && a.resource == "pods"
                && a.verb == "create"
                && a.namespace == canary_ns
                && timestamp(&a.received) >= frozen_at
        })
        .collect();
    assert!(
        canaries.iter().all(|a| a.uri.contains("dryRun=All")),
        "a canary that is not a dry run: {canaries:#?}"
    );
    let first_failed = canaries
        .iter()
        .filter(|a| !a.ok())
        .map(|a| a.received.clone())
        .min()
        .unwrap_or_else(|| panic!("no failing canary in the audit log: {canaries:#?}"));
    let bypass = configuration_writes(&tb, frozen_at)
        .into_iter()
        .find(|w| w.name == name && w.ok())
        .expect("the bypass PATCH");
    assert!(
        first_failed < bypass.received,
        "bypassed at {} before any canary failed ({first_failed})",
        bypass.received
    );
    let refused = create_pod(&tb, &apps, "plain", false)
        .expect_err("a pod that did not opt in still waits on the frozen webhook");
    assert!(refused.contains("failed calling webhook"), "{refused}");
    // The bypass never lets the canary through: it keeps reaching the (frozen) webhook.

    let thawed = jiff::Timestamp::now();
    bed.server.thaw();
    eventually(
        "the entry restored exactly once the canary sees the webhook answer",
        || (get_configuration(&tb, &name)["webhooks"] == baseline["webhooks"]).then_some(()),
    )
    .await;
    let restore = configuration_writes(&tb, thawed)
        .into_iter()
        .find(|w| w.ok())
        .expect("the restore PATCH");
    assert!(
        timestamp(&restore.received)
            >= thawed + jiff::SignedDuration::from_secs(RESTORE_GRACE_S as i64),
        "restored before restoreGrace"
    );
    let dry_runs = bed
        .server
        .reviews
        .lock()
        .map(|r| {
            r.iter()
                .filter(|r| r["namespace"] == canary_ns.as_str() && r["dryRun"] == true)
                .count()
        })
        .unwrap_or(0);
    assert!(dry_runs >= 1, "no canary reached the webhook as a dry run");
    assert!(
        tb.list("pods", &canary_ns, None).is_empty(),
        "a canary was stored"
    );
    guard.stop();
    tb.kubectl(&["delete", "namespace", &canary_ns, "--wait=false"]);
    tb.kubectl(&["delete", "clusterrolebinding", &namespace_reader]);
    tb.kubectl(&["delete", "clusterrole", &namespace_reader]);
    bed.cleanup();
}

/// `initguard webhooks` on the real server: a fail-closed entry whose Service is gone and that
/// intercepts its own namespace, kube-system, Nodes, Leases and DELETEs is listed with those
/// risks, unguarded; a URL entry too. Its YAML passes `check-config` and exempts the backend's
/// own namespace, with a canary owner for the URL entry. (A `false` matchCondition keeps both
/// entries from ever being called: the audit judges rules and selectors.)
pub(crate) async fn webhooks_audit_lists_risks_and_its_yaml_passes_check_config(tb: Arc<Testbed>) {
    let (system, name) = ("wha-system", "wha-policy");
    tb.namespace(system);
    let entry = |webhook: &str, client: Value| {
        json!({
            "name": webhook,
            "clientConfig": client,
            "rules": [
                { "operations": ["CREATE", "DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] },
                { "operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"] },
                { "operations": ["UPDATE"], "apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "resources": ["leases"] },
            ],
            "matchConditions": [{ "name": "never", "expression": "false" }],
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 30,
        })
    };
    tb.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": name },
        "webhooks": [
            entry("svc.audit.example.com", json!({ "service": { "namespace": system, "name": "gone", "path": "/v" } })),
            entry("url.audit.example.com", json!({ "url": "https://127.0.0.1:1/v" })),
        ],
    }));
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
            .args(args)
            .arg("--kubeconfig")
            .arg(tb.kubeconfig("admin"))
            .output()
            .expect("initguard runs");
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let table = run(&["webhooks"]);
    let line = |webhook: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("validating/{name}/{webhook}\t")))
            .unwrap_or_else(|| panic!("{webhook} not listed:\n{table}"))
            .to_owned()
    };
    let svc = line("svc.audit.example.com");
    for expected in [
        "\tFail\t",
        &format!("service {system}/gone"),
        "\tMISSING\t",
        "\tno\t",
        &format!("intercepts its own backend's pods (namespace {system})"),
        "intercepts kube-system",
        "intercepts Nodes",
        "intercepts Leases",
        "intercepts DELETE",
        "timeout 30s",
    ] {
        assert!(svc.contains(expected), "{expected:?} missing from {svc:?}");
    }
    assert!(line("url.audit.example.com").contains("url https://127.0.0.1:1/v"));
    let yaml = run(&["webhooks", "--output", "yaml"]);
    assert!(
        yaml.contains(&format!("exemptNamespaces: [{system}]")),
        "{yaml}"
    );
    assert!(
        yaml.contains("owner: { apiserver: { namespace: initguard-canary"),
        "{yaml}"
    );
    let path = tb.dir.join("wha-webhooks.yaml");
    std::fs::write(&path, &yaml).expect("write the YAML");
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("check-config runs");
    assert!(
        checked.status.success(),
        "the audit's YAML fails check-config: {}\n{yaml}",
        String::from_utf8_lossy(&checked.stderr)
    );
    tb.kubectl(&["delete", "validatingwebhookconfiguration", name]);
    tb.kubectl(&["delete", "namespace", system, "--wait=false"]);
}
