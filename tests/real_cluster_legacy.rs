//! Against a real Kubernetes 1.13 control plane (tests/testbed/ `--version v1.13.12`: the
//! Initializers admission plugin, admissionregistration.k8s.io/v1alpha1, the 1.13
//! controller-manager and scheduler): the legacy pod-initializer claims that the simulator's
//! 1.13 profile otherwise judges alone. A real initializer written on the seeds' own library
//! (`ai2-kubernetes-initializer`) is the owner the guard watches; the verdicts come from the
//! API server's objects and its audit log.
//!
//! Same runner as `real_cluster` (`harness = false`, libtest's arguments, skip without a built
//! test bed unless `CI` is set).

use initguard_test_support::testbed;

#[path = "real_cluster_legacy/compat.rs"]
mod compat;
#[path = "real_cluster_legacy/differential.rs"]
mod differential;
#[path = "real_cluster_legacy/legacy.rs"]
mod legacy;
#[path = "real_cluster_legacy/owner.rs"]
mod owner;
#[path = "real_cluster_legacy/privilege.rs"]
mod privilege;
#[path = "real_cluster_legacy/replicas.rs"]
mod replicas;
#[path = "real_cluster_legacy/service_owner.rs"]
mod service_owner;

use std::process::ExitCode;

use initguard_test_support::runner::{self, Scenario};

/// Every scenario, in run order.
const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "owner::real_initializer_down_then_back_only_the_failed_head_only_opted_in",
        |tb| {
            Box::pin(owner::real_initializer_down_then_back_only_the_failed_head_only_opted_in(tb))
        },
    ),
    (
        "replicas::two_replicas_on_a_v1beta1_lease_one_leader_failover",
        |tb| Box::pin(replicas::two_replicas_on_a_v1beta1_lease_one_leader_failover(tb)),
    ),
    (
        "privilege::the_initialize_grant_is_what_lets_the_guard_initialize",
        |tb| Box::pin(privilege::the_initialize_grant_is_what_lets_the_guard_initialize(tb)),
    ),
    (
        "service_owner::service_owner_is_read_from_core_endpoints",
        |tb| Box::pin(service_owner::service_owner_is_read_from_core_endpoints(tb)),
    ),
    (
        "compat::metainit_compat_initializes_each_pod_with_one_patch",
        |tb| {
            Box::pin(compat::metainit_compat_initializes_each_pod_with_one_patch(
                tb,
            ))
        },
    ),
    (
        "differential::sim_1_13_profile_answers_as_the_real_1_13_server",
        |tb| Box::pin(differential::sim_1_13_profile_answers_as_the_real_1_13_server(tb)),
    ),
];

fn main() -> ExitCode {
    runner::run(
        "real_cluster_legacy",
        testbed::Version::Legacy,
        SCENARIOS,
        env!("CARGO_BIN_EXE_initguard"),
        privilege::refused_on_purpose,
    )
}
