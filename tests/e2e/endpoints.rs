//! The HTTP endpoints of a running guard: `/healthz`, `/readyz`, `/status`, `/metrics`.

use std::time::Duration;

use initguard::config::Mechanism;
use initguard::guard::Guard;
use initguard_sim::controllers::dns_name;
use kube_sim::{PolicyRule, Rbac};
use serde_json::Value;

use crate::harness::*;

/// `/healthz` follows the control loop: 503 once it has been stuck longer than the stall
/// window, 200 again (and staying so while idle) once it runs. The loop is stalled through its
/// test hold, which parks it before its next event without blocking a thread: a test that
/// blocks a runtime worker on a lock can starve the runtime's timers, its own timeout included
/// (this test once hung CI that way). A pod event arrives while it is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_a_stuck_control_loop() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    c.namespace("team-a").await;
    let config = config(Mechanism::SchedulingGates, "");
    let stall_after = Duration::from_secs(1);
    let guard = Guard::start_with(c.guard_client(), config, "e2e".into(), stall_after)
        .await
        .unwrap();
    wait_ready(&guard).await;
    let healthz = || async { http_get(guard.addr, "/healthz").await.0 };
    assert_eq!(healthz().await, 200);

    let hold = guard.shared.hold_control_loop();
    c.pod("team-a", "stuck-1", true, &[SIDECAR]).await;
    eventually_async("/healthz 503 while the loop is held", || async {
        (healthz().await == 503).then_some(())
    })
    .await;
    assert!(
        guard.shared.tracker().get("team-a/stuck-1").is_none(),
        "a held loop took in the pod event"
    );
    drop(hold);
    until("the held pod event taken in once released", || {
        guard.shared.tracker().get("team-a/stuck-1").is_some()
    })
    .await;
    eventually_async("/healthz 200 again", || async {
        (healthz().await == 200).then_some(())
    })
    .await;
    // An idle loop is a healthy loop: after twice the stall window without any event,
    // /healthz answers 200. Eventually, not at once: a beat that the machine's load delays
    // may show a 503 meanwhile, while a loop that only moves on events stays at 503.
    let before = c.sim.resource_version();
    tokio::time::sleep(stall_after * 2).await;
    eventually_async(
        "/healthz 200 from a loop idle for twice its stall window",
        || async { (healthz().await == 200).then_some(()) },
    )
    .await;
    assert_eq!(
        c.sim.resource_version(),
        before,
        "nothing happened in the cluster meanwhile"
    );
    c.finish(guard).await;
}

/// A panic in any task of the guard fails `/healthz`, which names the task and the panic, and
/// ends `run_until_signal` with the panics (`initguard run` then exits 1, so that the kubelet
/// restarts it) instead of leaving a half-dead guard that looks healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_panic_fails_healthz_and_stops_the_guard() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let guard = c.guard(&config(Mechanism::SchedulingGates, "")).await;
    let addr = guard.addr;
    assert_eq!(http_get(addr, "/healthz").await.0, 200);

    initguard::supervise::spawn(&guard.shared.failures, "injected", async {
        panic!("injected fault")
    });
    let body = eventually_async("/healthz 503 naming the panic", || async {
        let (status, body) = http_get(addr, "/healthz").await;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(body, "task injected panicked: injected fault\n");
    let panics = tokio::time::timeout(PATIENCE, guard.run_until_signal())
        .await
        .expect("the guard to stop after the panic, without a signal");
    assert_eq!(panics, ["task injected panicked: injected fault"]);
}

/// `/readyz` is 200 once the pods are listed, even while an owner cannot be read (its
/// Deployment is forbidden: unknown, which never triggers a bypass), and its body names that
/// owner and why until the guard may read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_lists_unknown_owners() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let _owner = c.owner(SIDECAR, |_| {}).await;
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
        &format!("initializers:\n{}", owned(SIDECAR, "20s")),
    );
    let guard = Guard::start(c.guard_client(), config).await.unwrap();
    let unknown = format!(
        "owner deployment kube-system/{}: unknown (",
        dns_name(SIDECAR)
    );
    let body = eventually_async(
        "ready, the owner listed as unknown because forbidden",
        || async {
            let (status, body) = http_get(guard.addr, "/readyz").await;
            (status == 200 && body.contains("forbidden")).then_some(body)
        },
    )
    .await;
    assert!(body.starts_with("ok\n"), "{body}");
    assert!(body.contains(&unknown), "{body}");

    c.sim
        .enforce_rbac_policy(GUARD_USER, shipped_rbac(Mechanism::SchedulingGates));
    eventually_async("/readyz without unknown owners", || async {
        let (status, body) = http_get(guard.addr, "/readyz").await;
        (status == 200 && body == "ok\n").then_some(())
    })
    .await;
    guard.shutdown().await;
}

/// `/status` lists the waiting pods with each initializer's plan, and the owners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_waiting_pods_with_plans() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let _owner = c
        .owner(SIDECAR, |o| o.latency = Duration::from_secs(60))
        .await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!("initializers:\n{}", owned(SIDECAR, "30s")),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, true).await;
    c.pod("default", "labeled", true, &[SIDECAR, UNLISTED])
        .await;
    c.pod("default", "plain", false, &[SIDECAR]).await;
    until("both pods tracked", || guard.shared.tracker().len() == 2).await;

    let (status, body) = http_get(guard.addr, "/status").await;
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["leader"], true, "{report:#}");
    assert_eq!(report["ready"], true, "{report:#}");
    assert_eq!(report["mechanism"], "schedulingGates");
    assert_eq!(report["waitingPodsTotal"], 2);
    let owner = &report["owners"][0];
    assert_eq!(owner["initializer"], SIDECAR, "{report:#}");
    assert_eq!(owner["ownerKind"], "deployment");
    assert_eq!(owner["state"], "up");

    let pod = |name: &str| -> Value {
        report["waitingPods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {report:#}"))
            .clone()
    };
    let labeled = pod("labeled");
    assert_eq!(labeled["optedIn"], true);
    let plans = &labeled["initializers"];
    assert_eq!(plans[0]["initializer"], SIDECAR, "{labeled:#}");
    assert_eq!(plans[0]["plan"]["action"], "bypassAt", "{labeled:#}");
    assert_eq!(plans[0]["plan"]["reason"], "deadline", "{labeled:#}");
    assert_eq!(plans[1]["initializer"], UNLISTED);
    assert_eq!(plans[1]["plan"]["action"], "never", "{labeled:#}");
    assert_eq!(plans[1]["plan"]["why"], "unlisted initializer");
    let plain = pod("plain");
    assert_eq!(plain["optedIn"], false);
    assert_eq!(
        plain["initializers"][0]["plan"]["why"], "not opted in",
        "{plain:#}"
    );
    c.finish(guard).await;
}

/// `/metrics` serves every metric README "Observe" names once each has something to report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_have_the_documented_names() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let _owner = c.owner(SIDECAR, |_| {}).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "initializers:\n{}  - {{ name: {AUDIT}, deadline: 0s }}\n",
            owned(SIDECAR, "20s")
        ),
    );
    let guard = c.guard(&config).await;
    wait_owner(&guard, SIDECAR, true).await;
    // A wait that ends initialized, one that ends bypassed, and a watch restart.
    c.pod("default", "by-owner", true, &[SIDECAR]).await;
    c.pod("default", "by-guard", true, &[AUDIT]).await;
    until("both pods initialized", || {
        c.pending("default", "by-owner").is_empty() && c.pending("default", "by-guard").is_empty()
    })
    .await;
    // The guard must have seen both waits end before its watch is broken; otherwise the
    // relist may be its first sight of an already initialized pod, which ends no wait.
    let shared = guard.shared.clone();
    until("the guard to see both waits end", || {
        shared.tracker().is_empty()
    })
    .await;
    c.sim.faults().exempt_users(&[&owner_user(SIDECAR), ADMIN]);
    c.sim.faults().force_gone_next_watch();
    c.sim.faults().drop_watches();
    let text = eventually_async("a watch restart counted", || async {
        let (_, text) = http_get(guard.addr, "/metrics").await;
        (metric_sum(&text, "initguard_watch_restarts_total", &[]) >= 1.0).then_some(text)
    })
    .await;

    for name in [
        "initguard_waiting_pods",
        "initguard_oldest_wait_seconds",
        "initguard_wait_duration_seconds",
        "initguard_bypasses_total",
        "initguard_bypass_errors_total",
        "initguard_bypass_refused_total",
        "initguard_owner_up",
        "initguard_pileup_max_waiting_pods",
        "initguard_pileups",
        "initguard_is_leader",
        "initguard_watch_restarts_total",
        "initguard_build_info",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# TYPE {name} "))),
            "{name} missing from /metrics:\n{text}"
        );
    }
    let bypassed = [("initializer", AUDIT), ("reason", "deadline")];
    assert_eq!(
        metric_sum(&text, "initguard_bypasses_total", &bypassed),
        1.0
    );
    let initialized = [("initializer", SIDECAR), ("outcome", "initialized")];
    assert_eq!(
        metric_sum(&text, "initguard_wait_duration_seconds_count", &initialized),
        1.0
    );
    let owner_up = [("initializer", SIDECAR), ("owner_kind", "deployment")];
    assert_eq!(metric_sum(&text, "initguard_owner_up", &owner_up), 1.0);
    assert_eq!(metric_sum(&text, "initguard_is_leader", &[]), 1.0);
    assert_eq!(
        metric_sum(
            &text,
            "initguard_build_info",
            &[("mechanism", "schedulingGates")]
        ),
        1.0
    );
    c.finish(guard).await;
}

/// A gate nobody configured is measured whatever `unlistedInitializers` says (`ignore` here:
/// it is never bypassed), so `InitguardStuckInitialization` can fire on it at
/// `defaults.unlistedAlertAfter`, which the guard exports for the rule to read.
#[tokio::test]
async fn an_unlisted_gate_is_measured_and_its_alert_threshold_exported() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let config = config(
        Mechanism::SchedulingGates,
        "initializers: []\ndefaults: { unlistedAlertAfter: 2h }\n",
    );
    let guard = c.guard(&config).await;
    c.pod("default", "forgotten", true, &[UNLISTED]).await;
    let unlisted = [("initializer", UNLISTED)];
    let text = eventually_async("the unlisted gate's wait measured", || async {
        let (_, text) = http_get(guard.addr, "/metrics").await;
        (metric_series(&text, "initguard_oldest_wait_seconds", &unlisted).is_some_and(|w| w > 0.0))
            .then_some(text)
    })
    .await;
    assert_eq!(
        metric_sum(
            &text,
            "initguard_waiting_pods",
            &[("initializer", UNLISTED), ("opted_in", "true")]
        ),
        1.0
    );
    assert_eq!(
        metric_sum(&text, "initguard_unlisted_alert_after_seconds", &[]),
        7200.0
    );
    // Measured, never bypassed.
    assert_eq!(c.pending("default", "forgotten"), vec![UNLISTED.to_owned()]);
    c.finish(guard).await;
}
