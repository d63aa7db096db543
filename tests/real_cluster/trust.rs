//! Who may opt in (README "Threat model"), against the real API server:
//! per-initializer `optIn: namespaces | none`, `bypassOn`, `optIn.namespaces` /
//! `optIn.namespaceSelector`, and a webhook with `optIn: namespaces`. Judged by the objects the
//! server stores and its audit log (who patched what, when), never by the guard's counters.
//!
//! A gate that must NOT be bypassed is shown kept without a wall-clock bound: a sibling due at
//! the same instant or earlier is bypassed first (the causal sync point), then the audit log
//! must hold no guard write naming the kept gate.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use initguard_test_support::webhook::*;
use serde_json::{Value, json};

use crate::gates::{assert_no_denied, bypass_annotation, cleanup, guard_patches};
use crate::testbed::*;

/// A gate that enforces policy (`optIn: namespaces`): a tenant's own label must not pass it.
const QUOTA: &str = "quota.example.com";
/// A gate that may never be bypassed (`optIn: none`).
const POLICY: &str = "policy.example.com";
/// A deadline-only gate with every default (`optIn: any`, every trigger): the sibling whose
/// bypass is the sync point.
const AUDIT: &str = "audit.example.com";
/// The deadline of every gate here: the kept gate and its sibling are due at the same instant.
const DEADLINE: &str = "2s";
/// `optIn.namespaceSelector` of the selector scenarios: `KEY=VALUE`.
const TEAM: (&str, &str) = ("team", "platform");

/// A guard config without leader election: `optIn: { label: OPT_IN<opt_in> }`, then `rest`.
/// ([`crate::gates::config`] fixes the `optIn` map, which these scenarios extend.)
fn trust_config(opt_in: &str, rest: &str) -> String {
    format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN}{opt_in} }}\n\
         leaderElection: {{ enabled: false }}\nunlistedInitializers: ignore\n{rest}"
    )
}

/// Every write of the guard to pod `ns/name` whose request names `gate`. A bypass patch
/// `test`s each initializer it removes by name and records it in the annotation, so a write
/// that removed `gate` names it.
fn writes_naming(tb: &Testbed, ns: &str, name: &str, gate: &str) -> Vec<Audit> {
    tb.pod_writes_by(GUARD_USER, ns)
        .into_iter()
        .filter(|a| a.name == name && a.request.to_string().contains(gate))
        .collect()
}

/// Gates a guard patch removed: each `remove` of `/spec/schedulingGates/N` with the name its
/// `test` of `/spec/schedulingGates/N/name` expects.
fn removed(write: &Audit) -> Vec<String> {
    let ops = write.request.as_array().cloned().unwrap_or_default();
    let path = |op: &Value| op["path"].as_str().unwrap_or_default().to_owned();
    ops.iter()
        .filter(|op| op["op"] == "remove" && path(op).starts_with("/spec/schedulingGates/"))
        .filter_map(|remove| {
            let named = format!("{}/name", path(remove));
            ops.iter()
                .find(|op| op["op"] == "test" && path(op) == named)
                .and_then(|test| test["value"].as_str().map(str::to_owned))
        })
        .collect()
}

/// Order, not time: a labelled pod created now with the deadline-only [`AUDIT`] gate is
/// bypassed only after the guard's pod watch delivered every earlier pod event (in order) and
/// the deadline passed since, so a write the guard meant to make on an earlier pod, even on
/// re-deciding after its own patch, would have reached the server by then.
async fn settle(tb: &Testbed, ns: &str, name: &str) {
    tb.gated_pod(ns, name, true, &[AUDIT]);
    eventually(format!("{ns}/{name} (the sync point) bypassed"), || {
        tb.gates(ns, name).is_empty().then_some(())
    })
    .await;
}

/// Wait until `ns/name` has lost `sibling`, then assert it still holds exactly `kept` and that
/// no guard write ever named `kept`.
async fn sibling_bypassed_and_kept(tb: &Testbed, ns: &str, name: &str, sibling: &str, kept: &str) {
    eventually(format!("{ns}/{name} loses {sibling}"), || {
        (!tb.gates(ns, name).iter().any(|g| g == sibling)).then_some(())
    })
    .await;
    assert_eq!(
        tb.gates(ns, name),
        [kept],
        "{ns}/{name}: {kept} was removed with {sibling}"
    );
    let touched = writes_naming(tb, ns, name, kept);
    assert!(
        touched.is_empty(),
        "guard writes naming {kept}: {touched:#?}"
    );
}

/// The one guard write to `ns/name`: a successful patch removing exactly `gate`.
fn single_write(tb: &Testbed, ns: &str, name: &str, gate: &str) -> Audit {
    let writes: Vec<Audit> = tb
        .pod_writes_by(GUARD_USER, ns)
        .into_iter()
        .filter(|a| a.name == name)
        .collect();
    assert_eq!(writes.len(), 1, "{ns}/{name}: {writes:#?}");
    let w = writes[0].clone();
    assert!(
        w.verb == "patch" && w.ok() && removed(&w) == [gate],
        "{ns}/{name}: {w:#?}"
    );
    w
}

/// What an operator adds along with `optIn.namespaceSelector`: deploy/rbac-namespace-selector.yaml
/// (applied unless the test bed already has it) and, where the shipped admission policies are
/// installed, the selector's key in their `namespaceSelectorKeys` param (without it the
/// self-fence refuses a webhook bypass's requirement on that key). Undone as found.
struct NamespaceSelection {
    applied_rbac: bool,
    /// The param's previous value, when the params ConfigMap exists.
    previous_keys: Option<Value>,
}

const NAMESPACE_RBAC: &str = "initguard-namespace-selector";

impl NamespaceSelection {
    async fn set_up(tb: &Testbed) -> NamespaceSelection {
        let present = !tb
            .kubectl(&[
                "get",
                "clusterrolebinding",
                NAMESPACE_RBAC,
                "--ignore-not-found",
                "-o",
                "name",
            ])
            .trim()
            .is_empty();
        if !present {
            let file = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/deploy/rbac-namespace-selector.yaml"
            );
            tb.kubectl(&["apply", "-f", file]);
        }
        let previous_keys = tb
            .get("configmap", "kube-system", crate::policies::PARAMS)
            .map(|params| {
                let previous = params["data"]["namespaceSelectorKeys"].clone();
                set_selector_keys(tb, &json!(TEAM.0));
                previous
            });
        // The authorizer learns new bindings from its informers: a guard started before that
        // would be refused its Namespace list (a 403 that assert_no_denied reports).
        eventually("the guard allowed to watch Namespaces", || {
            let out = tb.kubectl_with("initguard", &["auth", "can-i", "watch", "namespaces"], None);
            (String::from_utf8_lossy(&out.stdout).trim() == "yes").then_some(())
        })
        .await;
        NamespaceSelection {
            applied_rbac: !present,
            previous_keys,
        }
    }

    fn undo(self, tb: &Testbed) {
        if let Some(previous) = &self.previous_keys {
            set_selector_keys(tb, previous);
        }
        if self.applied_rbac {
            for kind in ["clusterrolebinding", "clusterrole"] {
                tb.kubectl(&["delete", kind, NAMESPACE_RBAC, "--ignore-not-found"]);
            }
        }
    }
}

/// Set (or, with null, remove) the policies' `namespaceSelectorKeys` param.
fn set_selector_keys(tb: &Testbed, keys: &Value) {
    crate::policies::set_params(tb, json!({ "namespaceSelectorKeys": keys }));
}

/// `optIn: namespaces` on one gate, `optIn.namespaces` listing one namespace. A labelled pod
/// in another namespace with that gate and an `optIn: any` sibling, both due at once, loses
/// only the sibling: the pod's own label does not pass the gate. An unlabelled pod in the
/// listed namespace, created later, loses both (so the kept gate was due, and bypassable).
pub(crate) async fn namespaces_only_gate_kept_for_a_label_and_bypassed_in_a_listed_namespace(
    tb: Arc<Testbed>,
) {
    let (tenant_ns, listed) = ("trust-label", "trust-listed");
    tb.namespace(tenant_ns);
    tb.namespace(listed);
    let guard = tb
        .guard(
            "trust-listed",
            "initguard",
            &trust_config(
                &format!(", namespaces: [{listed}]"),
                &format!(
                    "initializers:\n\
                     \x20 - {{ name: {QUOTA}, deadline: {DEADLINE}, optIn: namespaces }}\n\
                     \x20 - {{ name: {AUDIT}, deadline: {DEADLINE} }}\n"
                ),
            ),
        )
        .await;
    tb.gated_pod(tenant_ns, "tenant", true, &[QUOTA, AUDIT]);
    tb.gated_pod(listed, "batch", false, &[QUOTA, AUDIT]);
    // Created after the tenant's pod with the same deadlines: its QUOTA is due no earlier
    // (creationTimestamp has whole seconds).
    eventually("the listed namespace's pod loses both gates", || {
        tb.gates(listed, "batch").is_empty().then_some(())
    })
    .await;
    sibling_bypassed_and_kept(&tb, tenant_ns, "tenant", AUDIT, QUOTA).await;
    settle(&tb, tenant_ns, "later").await;

    assert_eq!(tb.gates(tenant_ns, "tenant"), [QUOTA]);
    let touched = writes_naming(&tb, tenant_ns, "tenant", QUOTA);
    assert!(
        touched.is_empty(),
        "guard writes naming {QUOTA}: {touched:#?}"
    );
    single_write(&tb, tenant_ns, "tenant", AUDIT);
    let annotation = bypass_annotation(&tb, tenant_ns, "tenant");
    assert!(
        annotation.contains(&format!("{AUDIT}=deadline@")) && !annotation.contains(QUOTA),
        "tenant: {annotation:?}"
    );
    // Both gates of the listed namespace's pod, each once.
    let writes = tb.pod_writes_by(GUARD_USER, listed);
    assert!(
        writes.iter().all(|w| w.name == "batch" && w.ok()),
        "{writes:#?}"
    );
    let mut gates: Vec<String> = writes.iter().flat_map(removed).collect();
    gates.sort();
    assert_eq!(gates, [AUDIT, QUOTA], "{writes:#?}");
    let annotation = bypass_annotation(&tb, listed, "batch");
    assert!(
        annotation.contains(&format!("{QUOTA}=deadline@"))
            && annotation.contains(&format!("{AUDIT}=deadline@")),
        "batch: {annotation:?}"
    );
    assert_no_denied(&tb);
    guard.stop();
    cleanup(&tb, tenant_ns);
    cleanup(&tb, listed);
}

/// `optIn.namespaceSelector: team=platform` with an `optIn: namespaces` gate, the guard's RBAC
/// the shipped one plus deploy/rbac-namespace-selector.yaml ([`NamespaceSelection`]): an
/// unlabelled pod in a namespace labelled `team=platform` is bypassed; earlier pods, one
/// labelled in a `team=web` namespace and one in an unlabelled namespace, are never written.
/// Labelling the latter namespace `team=platform` afterwards gets its waiting pod bypassed,
/// after the label and not before (the guard watches Namespaces).
pub(crate) async fn namespaces_only_gate_bypassed_in_a_selected_namespace(tb: Arc<Testbed>) {
    let (selected, other, relabelled) = ("trust-selected", "trust-unselected", "trust-relabelled");
    let (key, value) = TEAM;
    for ns in [selected, other, relabelled] {
        tb.namespace(ns);
    }
    tb.kubectl(&["label", "namespace", selected, &format!("{key}={value}")]);
    tb.kubectl(&["label", "namespace", other, &format!("{key}=web")]);
    let selection = NamespaceSelection::set_up(&tb).await;
    let guard = tb
        .guard(
            "trust-selected",
            "initguard",
            &trust_config(
                &format!(", namespaceSelector: \"{key}={value}\""),
                &format!(
                    "initializers:\n\
                     \x20 - {{ name: {QUOTA}, deadline: {DEADLINE}, optIn: namespaces }}\n"
                ),
            ),
        )
        .await;
    tb.gated_pod(other, "tenant", true, &[QUOTA]);
    tb.gated_pod(relabelled, "waiting", false, &[QUOTA]);
    // Created last, same deadline: due no earlier than both.
    tb.gated_pod(selected, "p", false, &[QUOTA]);
    eventually("the selected namespace's pod bypassed", || {
        tb.gates(selected, "p").is_empty().then_some(())
    })
    .await;
    for (ns, name) in [(other, "tenant"), (relabelled, "waiting")] {
        let writes = tb.pod_writes_by(GUARD_USER, ns);
        assert!(writes.is_empty(), "the guard wrote in {ns}: {writes:#?}");
        assert_eq!(tb.gates(ns, name), [QUOTA], "{ns}/{name}");
    }
    single_write(&tb, selected, "p", QUOTA);
    let annotation = bypass_annotation(&tb, selected, "p");
    assert!(
        annotation.contains(&format!("{QUOTA}=deadline@")),
        "p: {annotation:?}"
    );

    tb.kubectl(&["label", "namespace", relabelled, &format!("{key}={value}")]);
    let labelled_at = tb
        .audit()
        .into_iter()
        .filter(|a| a.resource == "namespaces" && a.name == relabelled && a.user == "system:admin")
        .filter(|a| a.verb == "patch" && a.ok())
        .map(|a| a.received)
        .max()
        .unwrap_or_else(|| panic!("no label patch of namespace {relabelled} in the audit log"));
    eventually("the relabelled namespace's pod bypassed", || {
        tb.gates(relabelled, "waiting").is_empty().then_some(())
    })
    .await;
    let w = single_write(&tb, relabelled, "waiting", QUOTA);
    assert!(
        w.received > labelled_at,
        "bypassed at {} before its namespace was labelled ({labelled_at})",
        w.received
    );
    // Order, not time: a pod of the selected namespace created now is bypassed only after the
    // guard saw everything before it; the `team=web` namespace's labelled pod stays.
    tb.gated_pod(selected, "later", false, &[QUOTA]);
    eventually("later bypassed", || {
        tb.gates(selected, "later").is_empty().then_some(())
    })
    .await;
    let writes = tb.pod_writes_by(GUARD_USER, other);
    assert!(writes.is_empty(), "the guard wrote in {other}: {writes:#?}");
    assert_eq!(tb.gates(other, "tenant"), [QUOTA]);
    // The Namespace list and watch were allowed by the shipped file.
    assert_no_denied(&tb);
    guard.stop();
    for ns in [selected, other, relabelled] {
        cleanup(&tb, ns);
    }
    selection.undo(&tb);
}

/// `optIn: none`: a pod that opted in both ways (labelled, in a listed namespace) keeps the
/// gate past its deadline and with its owner down from the start, while its `optIn: any`
/// sibling, due no earlier, is bypassed.
pub(crate) async fn opt_in_none_gate_never_bypassed(tb: Arc<Testbed>) {
    let ns = "trust-none";
    tb.namespace(ns);
    // Down before the guard starts: down on first sight, so owner_down is due a grace after
    // the guard's start, before the pod is even created.
    let owner = OwnerDeployment::start(&tb, ns, "policy-controller").await;
    owner.kill(&tb).await;
    let guard = tb
        .guard(
            "trust-none",
            "initguard",
            &trust_config(
                &format!(", namespaces: [{ns}]"),
                &format!(
                    "initializers:\n\
                     \x20 - {{ name: {POLICY}, deadline: {DEADLINE}, ownerDownGrace: 1s, \
                     optIn: none, owner: {{ deployment: {ns}/policy-controller }} }}\n\
                     \x20 - {{ name: {AUDIT}, deadline: {DEADLINE} }}\n"
                ),
            ),
        )
        .await;
    tb.gated_pod(ns, "p", true, &[POLICY, AUDIT]);
    sibling_bypassed_and_kept(&tb, ns, "p", AUDIT, POLICY).await;
    settle(&tb, ns, "later").await;

    assert_eq!(tb.gates(ns, "p"), [POLICY]);
    let touched = writes_naming(&tb, ns, "p", POLICY);
    assert!(
        touched.is_empty(),
        "guard writes naming {POLICY}: {touched:#?}"
    );
    single_write(&tb, ns, "p", AUDIT);
    let annotation = bypass_annotation(&tb, ns, "p");
    assert!(
        annotation.contains(&format!("{AUDIT}=deadline@")) && !annotation.contains(POLICY),
        "p: {annotation:?}"
    );
    let patched: Vec<String> = guard_patches(&tb, GUARD_USER, ns).into_keys().collect();
    assert_eq!(patched, ["later", "p"], "pods the guard wrote");
    assert_no_denied(&tb);
    guard.stop();
    tb.kubectl(&["delete", "deployment", "policy-controller", "-n", ns]);
    cleanup(&tb, ns);
}

/// `bypassOn: [owner_down]`: at the deadline the gate stays while its sibling (every trigger,
/// same deadline) goes; once its owner Deployment has no available replica, it is bypassed
/// for owner_down, by a patch the server received after the owner died.
pub(crate) async fn bypass_on_owner_down_waits_past_the_deadline_for_the_owner(tb: Arc<Testbed>) {
    let ns = "trust-bypass-on";
    tb.namespace(ns);
    let owner = OwnerDeployment::start(&tb, ns, "quota-controller").await;
    let guard = tb
        .guard(
            "trust-bypass-on",
            "initguard",
            &trust_config(
                "",
                &format!(
                    "initializers:\n\
                     \x20 - {{ name: {QUOTA}, deadline: {DEADLINE}, ownerDownGrace: 1s, \
                     bypassOn: [owner_down], owner: {{ deployment: {ns}/quota-controller }} }}\n\
                     \x20 - {{ name: {AUDIT}, deadline: {DEADLINE} }}\n"
                ),
            ),
        )
        .await;
    tb.gated_pod(ns, "p", true, &[QUOTA, AUDIT]);
    sibling_bypassed_and_kept(&tb, ns, "p", AUDIT, QUOTA).await;
    settle(&tb, ns, "later").await;
    assert_eq!(tb.gates(ns, "p"), [QUOTA], "bypassed at the deadline");
    let touched = writes_naming(&tb, ns, "p", QUOTA);
    assert!(
        touched.is_empty(),
        "guard writes naming {QUOTA}: {touched:#?}"
    );

    let killed_at = owner.kill(&tb).await;
    eventually("p loses its gate once the owner is down", || {
        tb.gates(ns, "p").is_empty().then_some(())
    })
    .await;
    let annotation = bypass_annotation(&tb, ns, "p");
    assert!(
        annotation.contains(&format!("{QUOTA}=owner_down@"))
            && annotation.contains(&format!("{AUDIT}=deadline@")),
        "p: {annotation:?}"
    );
    let patches = guard_patches(&tb, GUARD_USER, ns);
    let writes = &patches["p"];
    assert_eq!(writes.len(), 2, "p: {writes:#?}");
    assert!(writes.iter().all(Audit::ok), "{writes:#?}");
    let naming: Vec<&Audit> = writes
        .iter()
        .filter(|a| removed(a).contains(&QUOTA.to_owned()))
        .collect();
    assert_eq!(naming.len(), 1, "writes removing {QUOTA}: {writes:#?}");
    assert!(
        naming[0].received > killed_at,
        "{QUOTA} bypassed at {}, before the owner died ({killed_at})",
        naming[0].received
    );
    assert_no_denied(&tb);
    guard.stop();
    tb.kubectl(&["delete", "deployment", "quota-controller", "-n", ns]);
    cleanup(&tb, ns);
}

const WEBHOOK_GRACE_S: u64 = 2;
const WEBHOOK_RESTORE_GRACE_S: u64 = 3;

pub(crate) async fn namespaces_only_webhook_bypassed_via_match_conditions(tb: Arc<Testbed>) {
    namespaces_only_webhook(tb, "wtm", "auto").await;
}

pub(crate) async fn namespaces_only_webhook_bypassed_via_selectors(tb: Arc<Testbed>) {
    namespaces_only_webhook(tb, "wts", "selectors").await;
}

/// A webhook with `optIn: namespaces` under `optIn.namespaceSelector: team=platform` (no
/// exempt namespaces, [`NamespaceSelection`] set up), owner a Lease: once the owner is down,
/// the entry the server stores gains exactly the negated requirement in its
/// `namespaceSelector` and nothing that lets labelled objects through: an unlabelled pod of the
/// selected namespace is admitted while a labelled pod elsewhere is still sent to the dead
/// webhook. Once the owner is back, the entry is restored exactly.
async fn namespaces_only_webhook(tb: Arc<Testbed>, prefix: &str, via: &str) {
    let selection = NamespaceSelection::set_up(&tb).await;
    let mut bed = Bed::new(tb.clone(), prefix).await;
    let (key, value) = TEAM;
    let platform = format!("{prefix}-platform");
    tb.namespace(&platform);
    tb.kubectl(&[
        "label",
        "namespace",
        &platform,
        &format!("webhook-test={prefix}"),
        &format!("{key}={value}"),
    ]);
    let (apps, system, name) = (bed.apps.clone(), bed.system.clone(), bed.name.clone());
    let baseline = bed.baseline.clone();
    let guard = tb
        .guard(
            prefix,
            "initguard",
            &trust_config(
                &format!(", namespaceSelector: \"{key}={value}\""),
                &format!(
                    "webhooks:\n\
                     \x20 - name: validating/{name}/{ENTRY}\n\
                     \x20   owner: {{ lease: {system}/policy-webhook }}\n\
                     \x20   ownerDownGrace: {WEBHOOK_GRACE_S}s\n\
                     \x20   restoreGrace: {WEBHOOK_RESTORE_GRACE_S}s\n\
                     \x20   bypassVia: {via}\n\
                     \x20   optIn: namespaces\n"
                ),
            ),
        )
        .await;
    create_pod(&tb, &platform, "before", false).unwrap_or_else(|e| panic!("webhook up: {e}"));

    let last_renewal = bed.kill_owner().await;
    create_pod(&tb, &platform, "rejected", false)
        .expect_err("the webhook is down and fails closed: creates are rejected");
    let mut attempt = 0;
    eventually(
        "an unlabelled pod of the selected namespace admitted while the webhook is down",
        || {
            // A refused bypass is retried with backoff: say so now rather than time out.
            let refused: Vec<Audit> = configuration_writes(&tb, bed.started)
                .into_iter()
                .filter(|a| a.code == 403)
                .collect();
            assert!(refused.is_empty(), "the bypass was refused: {refused:#?}");
            attempt += 1;
            create_pod(&tb, &platform, &format!("selected-{attempt}"), false).ok()
        },
    )
    .await;
    // The guarantee: with the bypass in force, the opt-in label passes nothing.
    let labelled = create_pod(&tb, &apps, "labelled", true)
        .expect_err("a labelled pod outside the selected namespaces still goes to the webhook");
    assert!(
        labelled.contains(ENTRY),
        "rejected by the listed entry: {labelled}"
    );
    create_pod(&tb, &apps, "plain", false).expect_err("not selected, not exempt");

    let negation = json!({ "key": key, "operator": "NotIn", "values": [value] });
    let bypassed = get_configuration(&tb, &name);
    assert_eq!(
        bypassed["webhooks"][0], baseline["webhooks"][0],
        "the unlisted entry is not touched"
    );
    let entry = bypassed["webhooks"][1].clone();
    let was = &baseline["webhooks"][1];
    assert_eq!(
        entry["namespaceSelector"]["matchExpressions"],
        json!([negation]),
        "{entry:#}"
    );
    assert_eq!(
        entry["objectSelector"], was["objectSelector"],
        "no opt-in label requirement: {entry:#}"
    );
    // `auto` may add a condition, but one that lets nothing through by its label.
    let conditions = entry["matchConditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in &conditions {
        assert_eq!(c["name"], "initguard-bypass", "{entry:#}");
        assert!(
            !c["expression"]
                .as_str()
                .unwrap_or_default()
                .contains(OPT_IN),
            "a condition that reads the opt-in label: {entry:#}"
        );
    }
    if via == "selectors" {
        assert!(conditions.is_empty(), "{entry:#}");
    }
    // Nothing else changed in the entry.
    let mut rest = entry.clone();
    if let Some(selector) = rest["namespaceSelector"].as_object_mut() {
        selector.remove("matchExpressions");
    }
    if was.get("matchConditions").is_none()
        && let Some(e) = rest.as_object_mut()
    {
        e.remove("matchConditions");
    }
    assert_eq!(rest, *was, "the entry gained more than the requirement");
    let record: Value = serde_json::from_str(
        bypassed["metadata"]["annotations"][RECORD]
            .as_str()
            .unwrap_or_else(|| panic!("no {RECORD} annotation: {bypassed:#}")),
    )
    .unwrap_or_else(|e| panic!("{RECORD} is JSON: {e}"));
    let added = &record[ENTRY]["added"];
    assert_eq!(added["namespaceRequirement"], negation, "{record:#}");
    for absent in ["objectSelector", "namespaceSelector"] {
        assert_eq!(added.get(absent), None, "{record:#}");
    }
    // Written after the lease ran out plus the grace (server's clock), and only this
    // configuration.
    let writes = configuration_writes(&tb, bed.started);
    assert!(
        writes.iter().all(|a| a.name == name),
        "the guard wrote only the listed configuration: {writes:#?}"
    );
    let first = writes
        .iter()
        .find(|a| a.verb == "patch" && a.ok())
        .unwrap_or_else(|| panic!("no bypass patch by {GUARD_USER}: {writes:#?}"));
    let earliest = last_renewal
        + jiff::SignedDuration::from_secs((OWNER_LEASE_SECONDS + WEBHOOK_GRACE_S) as i64);
    let written = timestamp(&first.received);
    assert!(
        written >= earliest,
        "bypassed at {written}, before the lease ran out plus the grace ({earliest})"
    );

    bed.revive_owner();
    let revived = bed.last_lease_write();
    eventually("the entry restored exactly once the owner is back", || {
        let now = get_configuration(&tb, &name);
        (now["webhooks"] == baseline["webhooks"]
            && now["metadata"]["annotations"].get(RECORD).is_none())
        .then_some(())
    })
    .await;
    let restore = configuration_writes(&tb, bed.started)
        .into_iter()
        .rfind(|a| a.verb == "patch" && a.ok())
        .unwrap_or_else(|| panic!("no restore patch"));
    let restored_at = timestamp(&restore.received);
    assert!(
        restored_at >= revived + jiff::SignedDuration::from_secs(WEBHOOK_RESTORE_GRACE_S as i64),
        "restored at {restored_at}, less than restoreGrace after the owner came back ({revived})"
    );
    // The selected namespace's creates go to the webhook again.
    let calls = bed.server.calls.load(Ordering::SeqCst);
    create_pod(&tb, &platform, "after", false).unwrap_or_else(|e| panic!("webhook back: {e}"));
    assert!(
        bed.server.calls.load(Ordering::SeqCst) > calls,
        "the selected namespace is sent to the webhook again"
    );
    assert_no_denied(&tb);
    guard.stop();
    bed.cleanup();
    for ns in [&apps, &system, &platform] {
        cleanup(&tb, ns);
    }
    selection.undo(&tb);
}
