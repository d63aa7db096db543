//! Owner states: an owner that was never read (a typo in the config) is unknown and never
//! triggers `owner_down`; judged by the simulated server's request log.

use initguard::config::Mechanism;
use initguard::policy::OwnerState;

use crate::harness::*;

both_mechanisms!(a_missing_owner_never_bypasses_before_the_deadline);

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
    let (status, body) = http_get(guard.addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("owner deployment kube-system/gate-ownr: unknown (deployment not found)"),
        "{body}"
    );
    c.finish(guard).await;
}
