//! The real node (`tests/testbed/up --node`) on Kubernetes 1.27, the oldest modern version of
//! the test bed: a kubelet of that version runs pods on the same containerd, probes them and
//! serves exec through the API server. The node scenarios themselves run on the current
//! version (tests/real_node.rs).

use initguard_test_support::{testbed, wait};

#[path = "real_node/pods.rs"]
mod pods;

use std::process::ExitCode;

use initguard_test_support::rbac::Request;
use initguard_test_support::runner::{self, Scenario};

/// Every scenario, in run order.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("pods::a_job_pod_runs_to_completion_with_its_token", |tb| {
        Box::pin(pods::a_job_pod_runs_to_completion_with_its_token(tb))
    }),
    ("pods::a_pod_turns_ready_through_its_probe", |tb| {
        Box::pin(pods::a_pod_turns_ready_through_its_probe(tb))
    }),
];

/// No guard runs here.
fn refused_on_purpose(_: &Request) -> bool {
    false
}

fn main() -> ExitCode {
    runner::run_node(
        "real_node_gates_beta",
        testbed::Version::GatesBeta,
        SCENARIOS,
        env!("CARGO_BIN_EXE_initguard"),
        refused_on_purpose,
    )
}
