//! On a test bed with a real node (`tests/testbed/up --node`: containerd, runc, a CNI bridge
//! and a kubelet of the bed's version): initguard run where users run it, as the kubelet's
//! static pod, judged by the API server's record and its audit log. The node bed needs root
//! and the node's Debian packages (.ci/run installs them); without them the target skips, or
//! fails with `CI` set. After `down`, the runner compares the host with a snapshot taken
//! before `up` (`host::down_leaves_the_host_as_it_was`).
//!
//! One node bed serves every scenario (node beds never run concurrently: the kubelet's
//! device-plugin socket and the static pod's host ports are fixed), scenarios one after
//! another, as in tests/real_cluster.rs.

use initguard_test_support::{testbed, wait};

#[path = "real_node/chart.rs"]
mod chart;
#[path = "real_node/image.rs"]
mod image;
#[path = "real_node/node_stage.rs"]
mod node_stage;
#[path = "real_node/pods.rs"]
mod pods;
#[path = "real_node/static_pod.rs"]
mod static_pod;
#[path = "real_node/webhook_backend.rs"]
mod webhook_backend;

use std::process::ExitCode;

use initguard_test_support::rbac::Request;
use initguard_test_support::runner::{self, Scenario};

/// Every scenario, in run order.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("image::the_initguard_image_is_the_dockerfiles", |tb| {
        Box::pin(image::the_initguard_image_is_the_dockerfiles(tb))
    }),
    ("pods::a_job_pod_runs_to_completion_with_its_token", |tb| {
        Box::pin(pods::a_job_pod_runs_to_completion_with_its_token(tb))
    }),
    ("pods::a_pod_turns_ready_through_its_probe", |tb| {
        Box::pin(pods::a_pod_turns_ready_through_its_probe(tb))
    }),
    (
        "static_pod::the_kubelet_runs_it_and_it_bypasses_a_gate",
        |tb| Box::pin(static_pod::the_kubelet_runs_it_and_it_bypasses_a_gate(tb)),
    ),
    (
        "static_pod::it_survives_restarts_and_hands_over_the_lease",
        |tb| {
            Box::pin(static_pod::it_survives_restarts_and_hands_over_the_lease(
                tb,
            ))
        },
    ),
    ("chart::the_chart_upgrades_tests_and_is_scraped", |tb| {
        Box::pin(chart::the_chart_upgrades_tests_and_is_scraped(tb))
    }),
    (
        "chart::uninstall_restores_a_bypassed_webhook_from_a_real_hook_pod",
        |tb| Box::pin(chart::uninstall_restores_a_bypassed_webhook_from_a_real_hook_pod(tb)),
    ),
    (
        "webhook_backend::a_webhook_deployment_killed_unready_and_frozen",
        |tb| Box::pin(webhook_backend::a_webhook_deployment_killed_unready_and_frozen(tb)),
    ),
    (
        "node_stage::recreates_opted_in_pods_once_their_agent_is_back",
        |tb| Box::pin(node_stage::recreates_opted_in_pods_once_their_agent_is_back(tb)),
    ),
    (
        "node_stage::the_chart_installed_guard_does_the_same",
        |tb| Box::pin(node_stage::the_chart_installed_guard_does_the_same(tb)),
    ),
];

/// No scenario here makes the server refuse the guard on purpose.
fn refused_on_purpose(_: &Request) -> bool {
    false
}

fn main() -> ExitCode {
    runner::run_node(
        "real_node",
        testbed::Version::Current,
        SCENARIOS,
        env!("CARGO_BIN_EXE_initguard"),
        refused_on_purpose,
    )
}
