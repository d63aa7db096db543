//! Against a real control plane (tests/testbed/: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler of one pinned Kubernetes version, fake Nodes): least privilege under the real
//! RBAC authorizer, the scheduling-gates scenarios with the `initguard` binary running as its
//! own identities, two replicas on a real Lease, real Job, ReplicaSet and CronJob controllers
//! creating gated pods, and owners of each kind (Deployment, Lease, pod selector). Judged by the
//! API server's objects and its audit log, never by the guard's own counters.
//!
//! One test bed serves every scenario (starting one takes tens of seconds), so this target has
//! its own runner (`harness = false`): scenarios run one after another, each in its own
//! namespace, and `down` always runs at the end (and from a watchdog if this process dies).
//! Arguments are read as libtest reads them (`harness_args`): filters by substring, `--skip`,
//! `--exact`, `--list`; an unknown flag is an error.
//!
//! Without a built test bed the target skips with a message, unless `CI` is set: then it fails.

use initguard_test_support::{testbed, wait};

#[path = "real_cluster/after_restore.rs"]
mod after_restore;
#[path = "real_cluster/cel.rs"]
mod cel;
#[path = "real_cluster/chart.rs"]
mod chart;
#[path = "real_cluster/controllers.rs"]
mod controllers;
#[path = "real_cluster/deploy.rs"]
mod deploy;
#[path = "real_cluster/differential.rs"]
mod differential;
#[path = "real_cluster/faults.rs"]
mod faults;
#[path = "real_cluster/gates.rs"]
mod gates;
#[path = "real_cluster/jobs.rs"]
mod jobs;
#[path = "real_cluster/policies.rs"]
mod policies;
#[path = "real_cluster/privilege.rs"]
mod privilege;
#[path = "real_cluster/replicas.rs"]
mod replicas;
#[path = "real_cluster/secure.rs"]
mod secure;
#[path = "real_cluster/trust.rs"]
mod trust;
#[path = "real_cluster/webhooks.rs"]
mod webhooks;
#[path = "real_cluster/writes.rs"]
mod writes;

use std::process::ExitCode;

use initguard_test_support::rbac::Request;
use initguard_test_support::runner::{self, Scenario};

/// Every scenario, in run order.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("privilege::can_i_list_matches_expectation", |tb| {
        Box::pin(privilege::can_i_list_matches_expectation(tb))
    }),
    ("privilege::forbidden_secrets_and_pod_deletes", |tb| {
        Box::pin(privilege::forbidden_secrets_and_pod_deletes(tb))
    }),
    (
        "gates::deadline_bypass_removes_only_the_failed_gate",
        |tb| Box::pin(gates::deadline_bypass_removes_only_the_failed_gate(tb)),
    ),
    ("gates::killed_owner_is_bypassed_and_pods_get_bound", |tb| {
        Box::pin(gates::killed_owner_is_bypassed_and_pods_get_bound(tb))
    }),
    (
        "gates::a_skewed_lease_holder_is_judged_by_its_renewals",
        |tb| Box::pin(gates::a_skewed_lease_holder_is_judged_by_its_renewals(tb)),
    ),
    ("gates::namespace_opt_in_survives_a_restart", |tb| {
        Box::pin(gates::namespace_opt_in_survives_a_restart(tb))
    }),
    (
        "gates::waiting_pod_is_explained_in_kubectl_describe",
        |tb| Box::pin(gates::waiting_pod_is_explained_in_kubectl_describe(tb)),
    ),
    ("gates::dry_run_writes_nothing", |tb| {
        Box::pin(gates::dry_run_writes_nothing(tb))
    }),
    (
        "trust::namespaces_only_gate_kept_for_a_label_and_bypassed_in_a_listed_namespace",
        |tb| {
            Box::pin(
                trust::namespaces_only_gate_kept_for_a_label_and_bypassed_in_a_listed_namespace(tb),
            )
        },
    ),
    (
        "trust::namespaces_only_gate_bypassed_in_a_selected_namespace",
        |tb| Box::pin(trust::namespaces_only_gate_bypassed_in_a_selected_namespace(tb)),
    ),
    ("trust::opt_in_none_gate_never_bypassed", |tb| {
        Box::pin(trust::opt_in_none_gate_never_bypassed(tb))
    }),
    (
        "trust::bypass_on_owner_down_waits_past_the_deadline_for_the_owner",
        |tb| Box::pin(trust::bypass_on_owner_down_waits_past_the_deadline_for_the_owner(tb)),
    ),
    (
        "trust::namespaces_only_webhook_bypassed_via_match_conditions",
        |tb| Box::pin(trust::namespaces_only_webhook_bypassed_via_match_conditions(tb)),
    ),
    (
        "trust::namespaces_only_webhook_bypassed_via_selectors",
        |tb| Box::pin(trust::namespaces_only_webhook_bypassed_via_selectors(tb)),
    ),
    ("replicas::leader_killed_every_gate_bypassed_once", |tb| {
        Box::pin(replicas::leader_killed_every_gate_bypassed_once(tb))
    }),
    ("jobs::parallel_job_healthy_then_owner_down", |tb| {
        Box::pin(jobs::parallel_job_healthy_then_owner_down(tb))
    }),
    (
        "controllers::deployment_pods_bypassed_once_the_lease_owner_stops",
        |tb| Box::pin(controllers::deployment_pods_bypassed_once_the_lease_owner_stops(tb)),
    ),
    ("controllers::cron_job_pile_is_bypassed_as_one", |tb| {
        Box::pin(controllers::cron_job_pile_is_bypassed_as_one(tb))
    }),
    ("chart::chart_values_render_as_documented", |tb| {
        Box::pin(chart::chart_values_render_as_documented(tb))
    }),
    (
        "chart::chart_schema_refuses_typos_before_anything_is_created",
        |tb| Box::pin(chart::chart_schema_refuses_typos_before_anything_is_created(tb)),
    ),
    (
        "chart::chart_helm_test_checks_the_config_and_reads_status",
        |tb| {
            Box::pin(chart::chart_helm_test_checks_the_config_and_reads_status(
                tb,
            ))
        },
    ),
    ("chart::chart_upgrades_from_the_previous_version", |tb| {
        Box::pin(chart::chart_upgrades_from_the_previous_version(tb))
    }),
    (
        "deploy::chart_webhook_rbac_is_exactly_what_the_webhooks_need",
        |tb| Box::pin(deploy::chart_webhook_rbac_is_exactly_what_the_webhooks_need(tb)),
    ),
    (
        "deploy::manifests_kustomize_and_chart_install_on_the_real_server",
        |tb| Box::pin(deploy::manifests_kustomize_and_chart_install_on_the_real_server(tb)),
    ),
    (
        "secure::secure_endpoints_authenticate_and_authorize",
        |tb| Box::pin(secure::secure_endpoints_authenticate_and_authorize(tb)),
    ),
    (
        "webhooks::webhook_bypassed_via_match_conditions_and_restored",
        |tb| Box::pin(webhooks::webhook_bypassed_via_match_conditions_and_restored(tb)),
    ),
    (
        "webhooks::webhook_bypassed_via_selectors_and_restored",
        |tb| Box::pin(webhooks::webhook_bypassed_via_selectors_and_restored(tb)),
    ),
    ("webhooks::webhook_dry_run_writes_nothing", |tb| {
        Box::pin(webhooks::webhook_dry_run_writes_nothing(tb))
    }),
    (
        "webhooks::webhook_own_pods_created_through_the_exemption",
        |tb| Box::pin(webhooks::webhook_own_pods_created_through_the_exemption(tb)),
    ),
    (
        "webhooks::webhook_default_owner_is_the_services_endpoints",
        |tb| {
            Box::pin(webhooks::webhook_default_owner_is_the_services_endpoints(
                tb,
            ))
        },
    ),
    (
        "webhooks::webhook_whose_service_is_gone_is_bypassed_by_a_guard_started_after",
        |tb| {
            Box::pin(
                webhooks::webhook_whose_service_is_gone_is_bypassed_by_a_guard_started_after(tb),
            )
        },
    ),
    (
        "webhooks::webhook_bypass_lets_the_critical_path_through",
        |tb| Box::pin(webhooks::webhook_bypass_lets_the_critical_path_through(tb)),
    ),
    (
        "webhooks::webhook_bypass_is_restored_by_helm_uninstall",
        |tb| Box::pin(webhooks::webhook_bypass_is_restored_by_helm_uninstall(tb)),
    ),
    (
        "webhooks::webhook_canary_sees_a_backend_that_is_up_but_does_not_answer",
        |tb| Box::pin(webhooks::webhook_canary_sees_a_backend_that_is_up_but_does_not_answer(tb)),
    ),
    (
        "after_restore::webhook_after_restore_evicts_one_at_a_time_what_can_be_spared",
        |tb| {
            Box::pin(
                after_restore::webhook_after_restore_evicts_one_at_a_time_what_can_be_spared(tb),
            )
        },
    ),
    (
        "webhooks::webhooks_audit_lists_risks_and_its_yaml_passes_check_config",
        |tb| Box::pin(webhooks::webhooks_audit_lists_risks_and_its_yaml_passes_check_config(tb)),
    ),
    (
        "webhooks::webhook_edits_by_others_are_not_overwritten",
        |tb| Box::pin(webhooks::webhook_edits_by_others_are_not_overwritten(tb)),
    ),
    (
        "policies::opt_in_label_is_an_administrators_decision",
        |tb| Box::pin(policies::opt_in_label_is_an_administrators_decision(tb)),
    ),
    (
        "policies::self_fence_confines_the_guard_to_a_bypass",
        |tb| Box::pin(policies::self_fence_confines_the_guard_to_a_bypass(tb)),
    ),
    (
        "policies::a_refused_bypass_is_backed_off_not_looped",
        |tb| Box::pin(policies::a_refused_bypass_is_backed_off_not_looped(tb)),
    ),
    (
        "policies::chart_rolls_out_under_its_own_enforced_policies",
        |tb| {
            Box::pin(policies::chart_rolls_out_under_its_own_enforced_policies(
                tb,
            ))
        },
    ),
    (
        "cel::generated_condition_lets_through_exactly_the_exempt_requests",
        |tb| Box::pin(cel::generated_condition_lets_through_exactly_the_exempt_requests(tb)),
    ),
    (
        "writes::the_classifier_reads_the_real_servers_refusals",
        |tb| Box::pin(writes::the_classifier_reads_the_real_servers_refusals(tb)),
    ),
    ("differential::sim_answers_as_the_real_server", |tb| {
        Box::pin(differential::sim_answers_as_the_real_server(tb))
    }),
    // Last: it leaves 5,000 pods for the namespace controller to delete.
    (
        "faults::control_plane_crashes_mid_burst_and_while_a_webhook_is_bypassed",
        |tb| Box::pin(faults::control_plane_crashes_mid_burst_and_while_a_webhook_is_bypassed(tb)),
    ),
];

/// The guard's requests that scenarios make RBAC refuse on purpose: the canary's dry runs
/// before their Role exists.
fn refused_on_purpose(r: &Request) -> bool {
    r.namespace == webhooks::CANARY_NAMESPACE && r.verb == "create" && r.resource == "pods"
}

fn main() -> ExitCode {
    runner::run(
        "real_cluster",
        testbed::Version::Current,
        SCENARIOS,
        env!("CARGO_BIN_EXE_initguard"),
        refused_on_purpose,
    )
}
