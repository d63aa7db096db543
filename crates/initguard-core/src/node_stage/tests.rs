//! The node stage's rule: examples, then the invariants as properties.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use super::*;
use crate::config::{Evictions, ObjectRef, OptInMode};

const LABEL: &str = "initguard.io/bypass";

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
}

fn config() -> Config {
    let mut c = Config::from_yaml_with("{}", "test.yaml", &crate::config::Elsewhere)
        .expect("an empty config is valid");
    c.opt_in.namespaces = vec!["opted".into()];
    c
}

fn step(action: StepAction) -> InitContainerConfig {
    InitContainerConfig {
        name: "istio-validation".into(),
        owner: Some(StepOwner::DaemonSet(ObjectRef {
            namespace: "istio-system".into(),
            name: "istio-cni-node".into(),
        })),
        deadline: Some(Duration::from_secs(300)),
        failed_exit_codes: vec![126],
        action,
        repair_after: Duration::from_secs(10),
        opt_in: OptInMode::Any,
    }
}

fn labels(opted: bool) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    if opted {
        l.insert(LABEL.to_owned(), String::new());
    }
    l
}

fn view<'a>(labels: &'a BTreeMap<String, String>) -> StepView<'a> {
    StepView {
        namespace: "apps",
        labels,
        namespace_selected: false,
        bound: at(0),
        failed: Some(126),
        restarts: true,
        pod_restart_policy: RestartPolicy::Always,
        deleting: false,
        recreator: Recreator::Workload,
    }
}

#[test]
fn recreates_an_opted_in_pod_once_its_agent_is_back_for_repair_after() {
    let l = labels(true);
    let pod = view(&l);
    let s = step(StepAction::Recreate);
    let c = config();
    let up = OwnerState::Up { since: at(30) };
    let held = decide(&pod, &s, up, Some(at(30)), None, &c, at(39));
    assert_eq!(held.plan, StepPlan::Held(Hold::RepairAfter { at: at(40) }));
    assert_eq!(held.next_wake, Some(at(40)));
    assert_eq!(held.trigger, Some(StepTrigger::Failed { code: 126 }));
    assert_eq!(
        decide(&pod, &s, up, Some(at(30)), None, &c, at(40)).plan,
        StepPlan::Recreate
    );
    // An up-period whose start is not known (up when the guard first looked) reports.
    assert_eq!(
        decide(&pod, &s, up, None, None, &c, at(40)).plan,
        StepPlan::Report {
            why: StepPlan::NEVER_FAILED_WHILE_UP
        }
    );
    // While down or unknown: held, with nothing to wake for but an event.
    let down = decide(
        &pod,
        &s,
        OwnerState::Down { since: at(5) },
        None,
        None,
        &c,
        at(40),
    );
    assert_eq!(down.plan, StepPlan::Held(Hold::OwnerDown { since: at(5) }));
    assert_eq!(down.next_wake, None);
    let unknown = decide(&pod, &s, OwnerState::Unknown, None, None, &c, at(40));
    assert_eq!(unknown.plan, StepPlan::Held(Hold::OwnerUnknown));
}

#[test]
fn a_pod_bound_while_its_agent_was_up_is_reported_never_recreated() {
    let l = labels(true);
    let mut pod = view(&l);
    pod.bound = at(30);
    let out = decide(
        &pod,
        &step(StepAction::Recreate),
        OwnerState::Up { since: at(40) },
        Some(at(30)),
        None,
        &config(),
        at(1000),
    );
    assert_eq!(
        out.plan,
        StepPlan::Report {
            why: StepPlan::NEVER_FAILED_WHILE_UP
        }
    );
}

#[test]
fn the_deadline_counts_from_the_binding_and_wakes_then() {
    let l = labels(true);
    let mut pod = view(&l);
    pod.failed = None;
    let s = step(StepAction::Recreate);
    let up = OwnerState::Up { since: at(1) };
    let early = decide(&pod, &s, up, Some(at(1)), None, &config(), at(299));
    assert_eq!(early.plan, StepPlan::Waiting);
    assert_eq!(early.trigger, None);
    assert_eq!(early.next_wake, Some(at(300)));
    assert_eq!(early.waited, Duration::from_secs(299));
    let due = decide(&pod, &s, up, Some(at(1)), None, &config(), at(300));
    assert_eq!(due.trigger, Some(StepTrigger::Deadline));
    assert_eq!(due.plan, StepPlan::Recreate);
    // No deadline and no listed exit: never stuck.
    let mut none = s.clone();
    none.deadline = None;
    let out = decide(&pod, &none, up, Some(at(1)), None, &config(), at(1_000_000));
    assert_eq!((out.plan, out.next_wake), (StepPlan::Waiting, None));
}

#[test]
fn every_permanent_reason_reports() {
    let c = config();
    let s = step(StepAction::Recreate);
    let up = OwnerState::Up { since: at(5) };
    let opted = labels(true);
    let plain = labels(false);
    let cases: Vec<(StepView<'_>, InitContainerConfig, &str)> = vec![
        (view(&plain), s.clone(), StepPlan::NEVER_NOT_OPTED_IN),
        (
            view(&opted),
            step(StepAction::Report),
            StepPlan::NEVER_REPORT,
        ),
        (
            StepView {
                recreator: Recreator::None,
                ..view(&opted)
            },
            s.clone(),
            StepPlan::NEVER_NO_RECREATOR,
        ),
        (
            StepView {
                recreator: Recreator::Job,
                pod_restart_policy: RestartPolicy::Never,
                ..view(&opted)
            },
            s.clone(),
            StepPlan::NEVER_JOB_NEVER,
        ),
        (
            StepView {
                restarts: false,
                ..view(&opted)
            },
            s.clone(),
            StepPlan::NEVER_NO_RESTART,
        ),
        (
            StepView {
                deleting: true,
                ..view(&opted)
            },
            s.clone(),
            StepPlan::NEVER_DELETING,
        ),
        (
            StepView {
                namespace: "kube-system",
                ..view(&opted)
            },
            s.clone(),
            StepPlan::NEVER_NAMESPACE,
        ),
        (
            view(&opted),
            InitContainerConfig {
                opt_in: OptInMode::None,
                ..s.clone()
            },
            crate::policy::Plan::NEVER_OPT_IN_NONE,
        ),
    ];
    for (pod, s, why) in cases {
        let out = decide(&pod, &s, up, Some(at(5)), None, &c, at(100));
        assert_eq!(out.plan, StepPlan::Report { why }, "{why}");
    }
    // A Job's pod with OnFailure is recreated.
    let pod = StepView {
        recreator: Recreator::Job,
        pod_restart_policy: RestartPolicy::OnFailure,
        ..view(&opted)
    };
    assert_eq!(
        decide(&pod, &s, up, Some(at(5)), None, &c, at(100)).plan,
        StepPlan::Recreate
    );
    // evictions.namespaces narrows where.
    let mut narrow = config();
    narrow.evictions = Evictions {
        namespaces: vec!["other".into()],
    };
    assert_eq!(
        decide(&view(&opted), &s, up, Some(at(5)), None, &narrow, at(100)).plan,
        StepPlan::Report {
            why: StepPlan::NEVER_NAMESPACE
        }
    );
}

#[test]
fn the_budget_holds_after_the_owner_allows() {
    let l = labels(true);
    let hold = Hold::OneAtATime { until: at(500) };
    let out = decide(
        &view(&l),
        &step(StepAction::Recreate),
        OwnerState::Up { since: at(5) },
        Some(at(5)),
        Some(hold.clone()),
        &config(),
        at(100),
    );
    assert_eq!(out.plan, StepPlan::Held(hold));
    assert_eq!(out.next_wake, Some(at(500)));
}

#[test]
fn a_step_without_an_owner_needs_only_its_trigger() {
    let l = labels(true);
    let mut s = step(StepAction::Recreate);
    s.owner = None;
    let out = decide(
        &view(&l),
        &s,
        OwnerState::Unknown,
        None,
        None,
        &config(),
        at(1),
    );
    assert_eq!(out.plan, StepPlan::Recreate);
}

fn status(started: bool, running: bool, exit: Option<i32>, last: Option<i32>) -> StepStatus {
    StepStatus {
        started,
        running,
        exit_code: exit,
        last_exit_code: last,
        restarts: 0,
    }
}

fn init(name: &str, sidecar: bool, s: Option<StepStatus>) -> InitStep {
    InitStep {
        name: name.into(),
        restart_policy: sidecar.then_some(RestartPolicy::Always),
        status: s,
    }
}

fn progress(steps: Vec<InitStep>) -> InitProgress {
    InitProgress {
        node: "n1".into(),
        scheduled_at: None,
        restart_policy: RestartPolicy::Always,
        steps,
    }
}

#[test]
fn the_current_step_is_the_first_not_done() {
    let p = progress(vec![
        init("a", false, Some(status(false, false, Some(0), None))),
        init("proxy", true, Some(status(false, true, None, None))),
        init("b", false, None),
    ]);
    // A running sidecar that has not started is still waiting.
    assert_eq!(current_step(&p, 0).map(|c| c.index), Some(1));
    let p = progress(vec![
        init("a", false, Some(status(false, false, Some(0), None))),
        init("proxy", true, Some(status(true, true, None, None))),
        init("b", false, Some(status(false, false, Some(126), Some(126)))),
    ]);
    let cur = current_step(&p, 0).expect("b waits");
    assert_eq!((cur.index, cur.step.name.as_str()), (2, "b"));
    assert_eq!(failed_code(cur.step, &[126]), Some(126));
    assert_eq!(failed_code(cur.step, &[95]), None);
    // A sidecar seen started earlier stays done after a restart reset `started`.
    let p = progress(vec![
        init("proxy", true, Some(status(false, false, Some(1), None))),
        init("b", false, None),
    ]);
    assert_eq!(current_step(&p, 0).map(|c| c.index), Some(0));
    assert_eq!(current_step(&p, 1).map(|c| c.index), Some(1));
    // A later step that ran makes the earlier ones done, whatever their status says.
    let p = progress(vec![
        init("a", false, Some(status(false, false, Some(1), None))),
        init("b", false, Some(status(false, true, None, None))),
    ]);
    assert_eq!(current_step(&p, 0).map(|c| c.index), Some(1));
    // A sidecar that restarted (started false again) before a step in CrashLoopBackOff: the
    // later step has run, by its last state or by its restarts alone.
    for (last, restarts) in [(Some(126), 0), (None, 2)] {
        let mut crashing = status(false, false, None, last);
        crashing.restarts = restarts;
        let p = progress(vec![
            init("proxy", true, Some(status(false, true, None, None))),
            init("b", false, Some(crashing)),
        ]);
        assert_eq!(
            current_step(&p, 0).map(|c| c.index),
            Some(1),
            "{last:?} {restarts}"
        );
    }
    // Every step done.
    let p = progress(vec![init(
        "a",
        false,
        Some(status(false, false, Some(0), None)),
    )]);
    assert_eq!(current_step(&p, 0), None);
}

#[test]
fn a_step_restarts_unless_its_pod_or_itself_says_never() {
    let mut p = progress(vec![init("a", false, None)]);
    assert!(restarts(&p, &p.steps[0].clone()));
    p.restart_policy = RestartPolicy::Never;
    assert!(!restarts(&p, &p.steps[0].clone()));
    let own = InitStep {
        restart_policy: Some(RestartPolicy::OnFailure),
        ..p.steps[0].clone()
    };
    assert!(restarts(&p, &own));
    p.restart_policy = RestartPolicy::OnFailure;
    let never = InitStep {
        restart_policy: Some(RestartPolicy::Never),
        ..own
    };
    assert!(!restarts(&p, &never));
}

#[test]
fn the_pod_failure_policy_hint_names_the_container_and_codes() {
    let hint = pod_failure_policy_hint(&step(StepAction::Recreate)).expect("codes listed");
    assert!(hint.contains("containerName: istio-validation"), "{hint}");
    assert!(hint.contains("values: [126]"), "{hint}");
    let mut s = step(StepAction::Recreate);
    s.failed_exit_codes.clear();
    assert_eq!(pod_failure_policy_hint(&s), None);
}

#[test]
fn explains_the_wait_the_owner_on_the_node_and_what_happens() {
    let s = step(StepAction::Recreate);
    let l = labels(true);
    let pod = view(&l);
    let down = OwnerState::Down { since: at(60) };
    let out = decide(&pod, &s, down, None, None, &config(), at(240));
    let words = explain(&s, "node-3", down, &out);
    assert_eq!(
        words,
        "waiting on init container istio-validation for 4m (it exited 126); its owner \
         istio-system/istio-cni-node is down on node-3 since 1970-01-12T13:47:40Z; will \
         recreate 10s after it is back"
    );
    let mut waiting = pod;
    waiting.failed = None;
    let out = decide(&waiting, &s, down, None, None, &config(), at(10));
    let words = explain(&s, "node-3", down, &out);
    assert!(
        words.ends_with("; stuck once bound 5m or if it exits 126"),
        "{words}"
    );
    let up = OwnerState::Up { since: at(0) };
    let out = decide(&pod, &s, up, Some(at(0)), None, &config(), at(10));
    assert!(
        explain(&s, "n", up, &out).ends_with(StepPlan::NEVER_FAILED_WHILE_UP),
        "bound at the same second the agent came up"
    );
}

#[test]
fn recreators_and_trigger_words_are_kubernetes_own() {
    for kind in [
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "ReplicationController",
    ] {
        assert_eq!(Recreator::of(Some(kind)), Recreator::Workload, "{kind}");
    }
    assert_eq!(Recreator::of(Some("Job")), Recreator::Job);
    assert_eq!(Recreator::of(Some("CronJob")), Recreator::None);
    assert_eq!(Recreator::of(None), Recreator::None);
    assert_eq!(StepTrigger::Failed { code: 126 }.as_str(), "failed");
    assert_eq!(StepTrigger::Deadline.as_str(), "deadline");
}

#[test]
fn a_hold_ending_now_is_no_wake_up() {
    let l = labels(true);
    let out = decide(
        &view(&l),
        &step(StepAction::Recreate),
        OwnerState::Up { since: at(5) },
        Some(at(5)),
        Some(Hold::HourlyCap { until: at(100) }),
        &config(),
        at(100),
    );
    assert_eq!(out.next_wake, None);
}

fn owner_state() -> impl Strategy<Value = OwnerState> {
    prop_oneof![
        Just(OwnerState::Unknown),
        (0u64..2000).prop_map(|s| OwnerState::Up { since: at(s) }),
        (0u64..2000).prop_map(|s| OwnerState::Down { since: at(s) }),
    ]
}

fn hold() -> impl Strategy<Value = Option<Hold>> {
    prop_oneof![
        Just(None),
        (0u64..3000).prop_map(|s| Some(Hold::OneAtATime { until: at(s) })),
        (0u64..3000).prop_map(|s| Some(Hold::HourlyCap { until: at(s) })),
    ]
}

fn recreator() -> impl Strategy<Value = Recreator> {
    prop_oneof![
        Just(Recreator::Workload),
        Just(Recreator::Job),
        Just(Recreator::None)
    ]
}

fn policy() -> impl Strategy<Value = RestartPolicy> {
    prop_oneof![
        Just(RestartPolicy::Always),
        Just(RestartPolicy::OnFailure),
        Just(RestartPolicy::Never)
    ]
}

fn mode() -> impl Strategy<Value = OptInMode> {
    prop_oneof![
        Just(OptInMode::Any),
        Just(OptInMode::Namespaces),
        Just(OptInMode::None)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Whatever the clocks and states: a recreate only for an opted-in pod, past a trigger,
    /// with its owner up for repairAfter since after the binding, a controller that
    /// re-creates it, and no budget hold.
    #[test]
    fn never_recreates_outside_the_rule(
        opted_label in any::<bool>(),
        namespace in prop_oneof![Just("apps"), Just("opted"), Just("kube-system")],
        selected in any::<bool>(),
        bound in 0u64..2000,
        now in 0u64..4000,
        failed in prop::option::of(prop_oneof![Just(126), Just(1)]),
        deadline in prop::option::of(0u64..1500),
        repair in 0u64..100,
        owned in any::<bool>(),
        owner in owner_state(),
        began in prop::option::of(0u64..2000),
        budget in hold(),
        restarts_step in any::<bool>(),
        pod_policy in policy(),
        deleting in any::<bool>(),
        rec in recreator(),
        opt_in in mode(),
        recreate in any::<bool>(),
    ) {
        let l = labels(opted_label);
        let c = config();
        let mut s = step(if recreate { StepAction::Recreate } else { StepAction::Report });
        s.deadline = deadline.map(Duration::from_secs);
        s.repair_after = Duration::from_secs(repair);
        s.opt_in = opt_in;
        if !owned {
            s.owner = None;
        }
        // A listed code is a trigger; any other exit code never is.
        let failed = failed.filter(|code| s.failed_exit_codes.contains(code));
        let pod = StepView {
            namespace,
            labels: &l,
            namespace_selected: selected,
            bound: at(bound),
            failed,
            restarts: restarts_step,
            pod_restart_policy: pod_policy,
            deleting,
            recreator: rec,
        };
        let now_t = at(now);
        let out = decide(&pod, &s, owner, began.map(at), budget.clone(), &c, now_t);
        if let Some(wake) = out.next_wake {
            prop_assert!(wake > now_t, "a wake-up in the past or now: {wake:?}");
        }
        if out.plan == StepPlan::Recreate {
            prop_assert!(recreate);
            prop_assert!(admitted(&c, namespace, selected, &l, opt_in).is_ok());
            // Never early: a listed exit, or the whole deadline since the binding.
            prop_assert!(failed.is_some() || deadline.is_some_and(|d| bound + d <= now));
            if owned {
                match owner {
                    OwnerState::Up { since } => {
                        let began = began.map(at);
                        prop_assert!(began.is_some_and(|b| at(bound) < b), "bound after the agent came up");
                        prop_assert!(since + Duration::from_secs(repair) <= now_t);
                    }
                    other => prop_assert!(false, "recreated with the owner {other:?}"),
                }
            }
            prop_assert!(budget.is_none());
            prop_assert!(!deleting && restarts_step && namespace != "kube-system");
            prop_assert!(
                rec == Recreator::Workload
                    || (rec == Recreator::Job && pod_policy == RestartPolicy::OnFailure)
            );
        }
        // No trigger: nothing but waiting.
        if out.trigger.is_none() {
            prop_assert_eq!(&out.plan, &StepPlan::Waiting);
        }
    }

    /// A sidecar that has started, and a step that exited 0, are never the current step.
    #[test]
    fn a_started_sidecar_or_a_finished_step_is_never_stuck(
        steps in prop::collection::vec(
            (
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                prop::option::of(0i32..3),
                prop::option::of(0i32..3),
                0u32..3,
            ),
            0..6,
        ),
        done_before in 0usize..7,
    ) {
        let p = progress(
            steps
                .iter()
                .enumerate()
                .map(|(i, (sidecar, started, running, exit, last, restarts))| {
                    let mut st = status(*started, *running, *exit, *last);
                    st.restarts = *restarts;
                    init(&format!("s{i}"), *sidecar, Some(st))
                })
                .collect(),
        );
        if let Some(cur) = current_step(&p, done_before) {
            prop_assert!(cur.index >= done_before);
            let st = cur.step.status.expect("every step has a status here");
            if cur.step.is_sidecar() {
                prop_assert!(!st.started, "a started sidecar is stuck");
            } else {
                prop_assert!(st.exit_code != Some(0), "a finished step is stuck");
            }
            // Nothing after the current step ran.
            prop_assert!(p.steps[cur.index + 1..].iter().all(|s| !s.ran()));
        }
    }
}
