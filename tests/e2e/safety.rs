//! The guard when it must not or cannot write: dry-run, and RBAC without `patch`.

use initguard::config::Mechanism;
use kube_sim::{PolicyRule, Rbac};

use crate::harness::*;

both_mechanisms!(dry_run_counts_once_and_writes_nothing);

/// Dry-run: decisions are counted in `initguard_bypasses_total`, once per pod and initializer
/// however long the pods keep waiting, and nothing is written.
async fn dry_run_counts_once_and_writes_nothing(mechanism: Mechanism) {
    let c = Cluster::start(mechanism).await;
    let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
    let config = config(
        mechanism,
        &format!(
            "dryRun: true\ndefaults: {{ ownerDownGrace: 500ms }}\ninitializers:\n{}  - {{ name: {AUDIT}, deadline: 1s }}\n",
            owned(SIDECAR, "1s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, false).await;
    let names: Vec<String> = (0..3).map(|i| format!("dry-{i}")).collect();
    for name in &names {
        c.pod("default", name, true, &[SIDECAR]).await;
    }
    let counted = |text: &str| {
        metric_sum(
            text,
            "initguard_bypasses_total",
            &[("initializer", SIDECAR)],
        )
    };
    eventually_async("3 dry-run bypasses counted", || async {
        let (_, text) = http_get(guard.addr, "/metrics").await;
        (counted(&text) == 3.0).then_some(())
    })
    .await;
    // Owner down and deadline keep holding as time passes: still counted once. The witness,
    // created after the three were counted, with no owner, is counted a deadline later: the
    // three stayed due all that time.
    c.pod("default", "witness", true, &[AUDIT]).await;
    eventually_async("the witness's dry-run bypass counted", || async {
        let (_, text) = http_get(guard.addr, "/metrics").await;
        let witness = metric_sum(&text, "initguard_bypasses_total", &[("initializer", AUDIT)]);
        (witness == 1.0).then_some(())
    })
    .await;
    let (_, text) = http_get(guard.addr, "/metrics").await;
    assert_eq!(counted(&text), 3.0, "{text}");
    assert_eq!(metric_sum(&text, "initguard_dry_run", &[]), 1.0);
    assert_eq!(c.guard_writes(), vec![], "dry-run wrote to the API");
    for name in &names {
        assert_eq!(c.pending("default", name), vec![SIDECAR.to_owned()]);
    }
    c.finish(guard).await;
}

/// The guard's user may only read pods: every bypass is answered 403, counted in
/// `initguard_bypass_errors_total`, and the guard keeps running and deciding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_bypass_is_counted_and_survived() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    c.sim.enforce_rbac_policy(
        GUARD_USER,
        Rbac::cluster_wide(vec![PolicyRule::new(
            &[""],
            &["pods"],
            &["get", "list", "watch"],
        )]),
    );
    let config = config(
        Mechanism::SchedulingGates,
        &format!("initializers:\n  - {{ name: {AUDIT}, deadline: 500ms }}\n"),
    );
    let guard = c.guard(&config).await;
    let errors = || {
        let text = guard.shared.metrics.render().unwrap();
        metric_sum(
            &text,
            "initguard_bypass_errors_total",
            &[("initializer", AUDIT)],
        )
    };

    c.pod("default", "denied-0", true, &[AUDIT]).await;
    until("a bypass error counted", || errors() >= 1.0).await;
    let patches = c.guard_pod_patches("denied-0");
    assert!(!patches.is_empty());
    assert!(patches.iter().all(|p| p.status == 403), "{patches:#?}");

    // Still alive and deciding: a new pod is tracked and tried too.
    let (status, _) = http_get(guard.addr, "/healthz").await;
    assert_eq!(status, 200);
    c.pod("default", "denied-1", true, &[AUDIT]).await;
    // Synced on the server's record of the try, not on the guard's own counter.
    until("the guard's bypass of denied-1 tried", || {
        !c.guard_pod_patches("denied-1").is_empty()
    })
    .await;
    let patches = c.guard_pod_patches("denied-1");
    assert!(patches.iter().all(|p| p.status == 403), "{patches:#?}");
    until("the second bypass error counted", || errors() >= 2.0).await;
    for name in ["denied-0", "denied-1"] {
        assert_eq!(c.pending("default", name), vec![AUDIT.to_owned()]);
    }
    assert!(
        c.guard_writes().iter().all(|w| w.status == 403),
        "{:#?}",
        c.guard_writes()
    );
    let (status, _) = http_get(guard.addr, "/healthz").await;
    assert_eq!(status, 200);
    guard.shutdown().await;
}
