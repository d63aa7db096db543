//! Owner states: an owner that was never read (a typo in the config, or one the guard may not
//! read) is unknown and never triggers `owner_down`; judged by the simulated server's request
//! log.

use initguard::config::Mechanism;
use initguard::guard::Guard;
use initguard::policy::OwnerState;
use kube_sim::Rbac;

use crate::harness::*;

both_mechanisms!(a_missing_owner_never_bypasses_before_the_deadline);
both_mechanisms!(a_forbidden_owner_never_bypasses_before_the_deadline);

/// The owner Deployment is dead, but the guard may not read Deployments (its RBAC was edited
/// wrongly): the owner is unknown, so a pod waiting on it is not bypassed with `owner_down`
/// (grace 1 s). A witness pod whose gate has a 2 s deadline and no owner, created after the
/// first pod was tracked, is bypassed: so the guard had every chance to act on the first pod
/// (a forbidden owner taken as down would have been bypassed within the grace) and did not.
async fn a_forbidden_owner_never_bypasses_before_the_deadline(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _dead = c.owner(SIDECAR, |o| o.alive = false).await;
    let text = deploy_file("rbac.yaml");
    let deployments = "resources: [\"deployments\"]";
    assert!(
        text.contains(deployments),
        "deploy/rbac.yaml no longer grants {deployments}"
    );
    // The shipped RBAC without its Deployment reads (plus the legacy `initialize` grant).
    let mut rbac = Rbac::from_yaml_str(
        &text.replace(deployments, "resources: [\"not-deployments\"]"),
        GUARD_USER,
    )
    .unwrap();
    if mechanism == Mechanism::Initializers {
        rbac.merge(
            Rbac::from_yaml_str(&deploy_file("rbac-legacy-initializers.yaml"), GUARD_USER).unwrap(),
        );
    }
    c.sim.enforce_rbac_policy(GUARD_USER, rbac);
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 1s }}\ninitializers:\n{}  - {{ name: {AUDIT}, deadline: 2s }}\n",
            owned(SIDECAR, "60s")
        ),
    );
    // Not `c.guard`, which binds the shipped RBAC.
    let guard = Guard::start(c.guard_client(), config).await.unwrap();
    c.pod("default", "forbidden", true, &[SIDECAR]).await;
    until("the forbidden owner's pod tracked", || {
        guard.shared.tracker().len() == 1
    })
    .await;
    c.pod("default", "witness", true, &[AUDIT]).await;
    until("the witness bypassed at its deadline", || {
        !c.bypasses_of("default/witness").is_empty()
    })
    .await;
    assert_eq!(guard.shared.owners.state(SIDECAR), OwnerState::Unknown);
    assert_eq!(
        c.guard_pod_patches("forbidden"),
        vec![],
        "the forbidden owner's pod was written"
    );
    assert_eq!(c.pending("default", "forbidden"), [SIDECAR]);
    // Never read, so nothing is known of it: no early InitializerWaiting about owner
    // trouble (at half its 60 s deadline one comes, long after this test).
    assert_eq!(
        c.waiting_events("forbidden"),
        Vec::<serde_json::Value>::new(),
        "a pod of an owner never read was told its owner is in trouble"
    );
    guard.shutdown().await;
}

/// Owner `deployment: kube-system/gate-ownr` (a typo: it does not exist), grace 1 s, deadline
/// 60 s: its pod is never patched. A witness pod of a really dead owner with the same grace,
/// created after the typo's pod was tracked, is bypassed: so the guard had every chance to act
/// on the typo's pod and did not. (Before the fix the missing Deployment counted as down and the
/// pod was bypassed with reason owner_down about a second after the guard started.)
async fn a_missing_owner_never_bypasses_before_the_deadline(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _dead = c.owner(AUDIT, |o| o.alive = false).await;
    let config = config(
        mechanism,
        &format!(
            "defaults: {{ ownerDownGrace: 1s }}\ninitializers:\n  - {{ name: {SIDECAR}, deadline: 60s, \
             owner: {{ deployment: kube-system/gate-ownr }} }}\n{}",
            owned(AUDIT, "60s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, AUDIT, false).await;
    assert_eq!(guard.shared.owners.state(SIDECAR), OwnerState::Unknown);

    c.pod("default", "typo", true, &[SIDECAR]).await;
    until("the typo's pod tracked", || {
        guard.shared.tracker().len() == 1
    })
    .await;
    for witness in ["witness-0", "witness-1"] {
        c.pod("default", witness, true, &[AUDIT]).await;
        until(format!("{witness} bypassed for its dead owner"), || {
            !c.bypasses_of(&format!("default/{witness}")).is_empty()
        })
        .await;
    }
    let witness = &c.bypasses_of("default/witness-0")[0];
    assert_eq!(witness.reason.as_deref(), Some("owner_down"), "{witness:?}");

    assert_eq!(
        c.guard_pod_patches("typo"),
        vec![],
        "the typo's pod was written"
    );
    assert_eq!(c.pending("default", "typo"), [SIDECAR]);
    assert_eq!(guard.shared.owners.state(SIDECAR), OwnerState::Unknown);
    // Read, and not found: an owner in trouble, which the waiting pod is told at once, not
    // at half its 60 s deadline as for an owner never read (the server's commit times).
    until("the typo's pod told why it waits", || {
        !c.waiting_events("typo").is_empty()
    })
    .await;
    let committed = |resource: &str, reason: Option<&str>| {
        c.sim
            .object_history()
            .into_iter()
            .find(|h| {
                h.resource == resource
                    && h.after.as_ref().is_some_and(|o| match reason {
                        Some(r) => o["reason"] == r && o["involvedObject"]["name"] == "typo",
                        None => o["metadata"]["name"] == "typo",
                    })
            })
            .map(|h| h.time)
            .unwrap_or_else(|| panic!("no {resource} about typo in the history"))
    };
    let told_after = committed("events", Some("InitializerWaiting"))
        .duration_since(committed("pods", None))
        .unwrap_or_default();
    assert!(
        told_after < std::time::Duration::from_secs(30),
        "told {told_after:?} after creation: at half the deadline, not for its owner"
    );
    let (status, body) = http_get(guard.addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("owner deployment kube-system/gate-ownr: unknown (deployment not found)"),
        "{body}"
    );
    c.finish(guard).await;
}
