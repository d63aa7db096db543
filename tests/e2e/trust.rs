//! Who may opt in (README "Configure": per-initializer `optIn` and `bypassOn`): a labelled
//! pod cannot opt itself past an `optIn: namespaces` gate, and `bypassOn` keeps the
//! deadline from acting. Judged from the server's record of removals; the refusal counter
//! only says when the guard has had its chance.

use std::time::{Duration, SystemTime};

use initguard::config::Mechanism;

use crate::harness::*;

/// A gate that enforces policy: tenants must not label themselves past it.
const QUOTA: &str = "quota.example.com";
const OPTED_NS: &str = "batch";

both_mechanisms!(
    a_labelled_pod_keeps_a_namespaces_only_gate_and_loses_the_others,
    bypass_on_owner_down_ignores_the_deadline_until_the_owner_dies,
);

fn refused(guard: &initguard::guard::Guard, initializer: &str, reason: &str) -> f64 {
    let text = guard.shared.metrics.render().unwrap_or_default();
    metric_sum(
        &text,
        "initguard_bypass_refused_total",
        &[("initializer", initializer), ("reason", reason)],
    )
}

/// `optIn: namespaces`: a labelled pod outside the opted-in namespaces keeps that gate past
/// its deadline (counted once as refused), while its other gate (`optIn: any`) is bypassed; a
/// pod in an opted-in namespace loses both.
async fn a_labelled_pod_keeps_a_namespaces_only_gate_and_loses_the_others(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    c.namespace(OPTED_NS).await;
    let config = config(
        mechanism,
        &format!(
            "optIn: {{ label: {OPT_IN}, namespaces: [{OPTED_NS}] }}\n\
             initializers:\n\
             \x20 - {{ name: {AUDIT}, deadline: 0s }}\n\
             \x20 - {{ name: {QUOTA}, deadline: 0s, optIn: namespaces }}\n"
        ),
    );
    let guard = c.guard(&config).await;
    // Legacy: the head first, so that the refused gate is in progress once AUDIT is gone.
    c.pod("default", "tenant", true, &[AUDIT, QUOTA]).await;
    c.pod(OPTED_NS, "batch-job", false, &[AUDIT, QUOTA]).await;

    until("the namespace's pod bypassed of both", || {
        c.pending(OPTED_NS, "batch-job").is_empty()
    })
    .await;
    eventually_async("the tenant's quota gate refused", || async {
        (refused(&guard, QUOTA, "opt_in") == 1.0).then_some(())
    })
    .await;
    // Past the refusal: a witness created after it, due at once, is bypassed, so the guard
    // had every chance to write the tenant's quota gate too; it stays, removed by nobody.
    c.pod(OPTED_NS, "witness", false, &[AUDIT]).await;
    until("the witness bypassed", || {
        c.pending(OPTED_NS, "witness").is_empty()
    })
    .await;
    assert_eq!(c.pending("default", "tenant"), vec![QUOTA.to_owned()]);
    let removed: Vec<String> = c
        .bypasses_of("default/tenant")
        .into_iter()
        .map(|r| r.initializer)
        .collect();
    assert_eq!(removed, vec![AUDIT.to_owned()]);
    let batch: Vec<String> = c
        .bypasses_of(&format!("{OPTED_NS}/batch-job"))
        .into_iter()
        .map(|r| r.initializer)
        .collect();
    assert_eq!(batch, vec![AUDIT.to_owned(), QUOTA.to_owned()]);
    assert_eq!(
        refused(&guard, QUOTA, "opt_in"),
        1.0,
        "counted more than once"
    );
    c.finish(guard).await;
}

/// `bypassOn: [owner_down]`: the deadline passes without a bypass (one refusal, reason
/// trigger); once the owner dies, the gate is bypassed for that reason.
async fn bypass_on_owner_down_ignores_the_deadline_until_the_owner_dies(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    // Alive, but too slow to remove the gate itself within the test.
    let owner = c
        .owner(SIDECAR, |o| o.latency = Duration::from_secs(3600))
        .await;
    let config = config(
        mechanism,
        &format!(
            "initializers:\n\
             \x20 - {{ name: {SIDECAR}, deadline: 0s, ownerDownGrace: 500ms, bypassOn: [owner_down], \
             owner: {{ deployment: kube-system/{} }} }}\n",
            initguard_sim::controllers::dns_name(SIDECAR)
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, true).await;
    c.pod("default", "p", true, &[SIDECAR]).await;
    eventually_async("the deadline refused", || async {
        (refused(&guard, SIDECAR, "trigger") == 1.0).then_some(())
    })
    .await;
    let early = c.bypasses_of("default/p");
    assert!(early.is_empty(), "bypassed at the deadline: {early:?}");

    let killed = SystemTime::now();
    owner.kill();
    let bypass = eventually("the gate bypassed once the owner is down", || {
        c.bypasses_of("default/p").pop()
    })
    .await;
    assert_eq!(bypass.reason.as_deref(), Some("owner_down"), "{bypass:?}");
    assert_not_before(
        "bypass after the kill",
        killed,
        bypass.time,
        Duration::from_millis(500),
    );
    c.finish(guard).await;
}

/// `optIn.namespaceSelector`: pods in a namespace whose labels match are opted in, and a pod
/// already waiting in a namespace labelled later is decided again and bypassed then. The
/// guard's RBAC is the shipped one plus deploy/rbac-namespace-selector.yaml.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_opts_in_the_pods_of_matching_namespaces() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let mut rbac = shipped_rbac(Mechanism::SchedulingGates);
    rbac.merge(
        kube_sim::Rbac::from_yaml_str(&deploy_file("rbac-namespace-selector.yaml"), GUARD_USER)
            .expect("deploy/rbac-namespace-selector.yaml"),
    );
    c.sim.enforce_rbac_policy(GUARD_USER, rbac);
    let labelled = |name: &str, team: Option<&str>| {
        let mut ns = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name }
        });
        if let Some(team) = team {
            ns["metadata"]["labels"] = serde_json::json!({ "team": team });
        }
        ns
    };
    c.admin_post("/api/v1/namespaces", &labelled("selected", Some("batch")))
        .await;
    c.admin_post("/api/v1/namespaces", &labelled("later", Some("web")))
        .await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "optIn: {{ label: {OPT_IN}, namespaceSelector: \"team=batch\" }}\n\
             initializers:\n  - {{ name: {AUDIT}, deadline: 0s }}\n"
        ),
    );
    let guard = c.guard(&config).await;
    c.pod("selected", "p", false, &[AUDIT]).await;
    c.pod("later", "q", false, &[AUDIT]).await;
    until("the selected namespace's pod bypassed", || {
        c.pending("selected", "p").is_empty()
    })
    .await;
    // The other pod, once tracked (and so decided), is left alone: a witness in the selected
    // namespace created after it, due at once, is bypassed first.
    let shared = guard.shared.clone();
    until("the other pod tracked", || {
        shared.tracker().get("later/q").is_some()
    })
    .await;
    c.pod("selected", "witness", false, &[AUDIT]).await;
    until("the witness bypassed", || {
        c.pending("selected", "witness").is_empty()
    })
    .await;
    assert_eq!(
        c.guard_pod_patches("q"),
        vec![],
        "a pod outside the selection was patched"
    );
    assert_eq!(c.pending("later", "q"), vec![AUDIT.to_owned()]);
    let relabelled = std::time::SystemTime::now();
    c.admin_request(
        http::Method::PATCH,
        "/api/v1/namespaces/later",
        Some(&serde_json::json!({ "metadata": { "labels": { "team": "batch" } } })),
    )
    .await;
    let bypass = eventually("the relabelled namespace's pod bypassed", || {
        c.bypasses_of("later/q").pop()
    })
    .await;
    assert!(
        bypass.time >= relabelled,
        "bypassed before its namespace matched"
    );
    c.finish(guard).await;
}
