//! The scheduling-gates and webhook scenarios that depend on the server's version, on the
//! oldest release with scheduling gates on by default: Kubernetes 1.27 (tests/testbed/
//! `--version v1.27.16`), where `spec.schedulingGates` is beta (KEP-3521: alpha 1.26, beta
//! 1.27, GA 1.30) and webhook `matchConditions` are alpha and switched off (KEP-3716: alpha
//! 1.27, beta 1.28). They exercise the guard's discovery on an older surface, the gate path on
//! a beta API, and the webhook guard's read-back of a dropped matchCondition and its fallback
//! to selectors, which no current server runs.
//!
//! The scenarios are those of `real_cluster` (same files), on this version's test bed; same
//! runner (`harness = false`, libtest's arguments, skip without a built test bed unless `CI`).

use initguard_test_support::testbed;

// This target runs some of the scenarios these files hold (and uses what they share).
#[allow(dead_code)]
#[path = "real_cluster/deploy.rs"]
mod deploy;
#[allow(dead_code)]
#[path = "real_cluster/gates.rs"]
mod gates;
#[allow(dead_code)]
#[path = "real_cluster/policies.rs"]
mod policies;
#[allow(dead_code)]
#[path = "real_cluster/webhooks.rs"]
mod webhooks;

use std::process::ExitCode;
use std::sync::Arc;

use initguard_test_support::runner::{self, Scenario};
use testbed::Testbed;

/// `via: auto` on a server whose matchConditions are switched off: the server drops the
/// condition the guard writes, the guard reads that back and bypasses with selectors instead,
/// and restores exactly.
async fn webhook_auto_bypass_falls_back_to_selectors_where_match_conditions_are_off(
    tb: Arc<Testbed>,
) {
    let started = jiff::Timestamp::now();
    webhooks::bypass_and_restore(tb.clone(), "wha", "auto", "selectors").await;
    // The guard did try the condition first, and the server accepted and dropped it: the
    // audit log holds a successful patch adding a matchCondition, then the selectors.
    let patches: Vec<String> = initguard_test_support::webhook::configuration_writes(&tb, started)
        .into_iter()
        .filter(|a| a.verb == "patch" && a.ok())
        .map(|a| a.request.to_string())
        .collect();
    let tried = patches.iter().position(|p| p.contains("matchConditions"));
    let fell_back = patches.iter().position(|p| p.contains("objectSelector"));
    assert!(
        matches!((tried, fell_back), (Some(t), Some(f)) if t < f),
        "a matchConditions patch, then a selectors one: {patches:#?}"
    );
}

/// Every scenario, in run order.
const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "gates::deadline_bypass_removes_only_the_failed_gate",
        |tb| Box::pin(gates::deadline_bypass_removes_only_the_failed_gate(tb)),
    ),
    ("gates::killed_owner_is_bypassed_and_pods_get_bound", |tb| {
        Box::pin(gates::killed_owner_is_bypassed_and_pods_get_bound(tb))
    }),
    (
        "webhooks::webhook_bypassed_via_selectors_and_restored",
        |tb| Box::pin(webhooks::webhook_bypassed_via_selectors_and_restored(tb)),
    ),
    (
        "webhook_auto_bypass_falls_back_to_selectors_where_match_conditions_are_off",
        |tb| {
            Box::pin(webhook_auto_bypass_falls_back_to_selectors_where_match_conditions_are_off(tb))
        },
    ),
];

fn main() -> ExitCode {
    runner::run(
        "real_cluster_gates_beta",
        testbed::Version::GatesBeta,
        SCENARIOS,
        env!("CARGO_BIN_EXE_initguard"),
        |_| false,
    )
}
