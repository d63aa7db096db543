//! Simulated controllers, scenario files and `initguard sim`, against the simulated API
//! server over real HTTP. No guard runs here: these tests show the failure the guard exists
//! for (the pileup) and that the controllers behave like real ones.

use initguard_sim::SimClients as _;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use initguard_test_support::wait;
use wait::eventually_async;

use initguard::config::Mechanism;
use initguard_sim::controllers::{
    Creator, CreatorKind, CreatorOptions, GateOwner, GateOwnerOptions, pending_names, pile_report,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube_sim::{ChangeType, Sim, SimOptions};
use serde_json::Value;

const ADMIN: &str = "system:admin";

async fn start_sim(mechanism: Mechanism, legacy: &[&str], create_timeout: Duration) -> Sim {
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Sim::start(SimOptions {
        listen,
        mechanism,
        legacy_initializers: legacy.iter().map(|s| s.to_string()).collect(),
        create_timeout,
        schedule_delay: Duration::from_millis(50),
        ..SimOptions::default()
    })
    .await
    .unwrap()
}

fn pod(name: &str, gates: &[&str]) -> Pod {
    initguard_test_support::pod::gated(name, &[], gates)
}

/// The stored pod as the server keeps it (uninitialized pods included).
fn stored_pod(sim: &Sim, namespace: &str, name: &str) -> Option<Value> {
    sim.get_object("pods", Some(namespace), name)
}

fn owner(initializer: &str, mechanism: Mechanism) -> GateOwnerOptions {
    let mut opts = GateOwnerOptions::new(initializer, mechanism);
    opts.heartbeat = Duration::from_millis(100);
    opts
}

/// (a) Legacy initializers, dead owner, Job-like creator with a 2 s create timeout: the Job
/// controller cannot see its uninitialized pods and re-creates them after every 504, so the
/// pile of stored uninitialized pods grows without bound (kubernetes/kubernetes#48893).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_job_pileup_grows_with_a_dead_initializer() {
    let init = "sidecar.example.com";
    let sim = start_sim(Mechanism::Initializers, &[init], Duration::from_secs(2)).await;
    let mut dead = owner(init, Mechanism::Initializers);
    dead.alive = false;
    let owner = GateOwner::start(sim.kube_config("sidecar-injector"), dead).unwrap();

    let mut job = CreatorOptions::job("default", "backfill", 2);
    job.kind = CreatorKind::Job {
        parallelism: 2,
        retry_backoff: Duration::from_millis(250),
    };
    job.opt_in_label = Some("initguard.io/bypass".to_string());
    let key = job.controller_key();
    let start = Instant::now();
    let creator = Creator::start(sim.kube_config("job-controller"), job).unwrap();

    tokio::time::sleep(Duration::from_secs(5)).await;
    let early = pile_report(&sim, Mechanism::Initializers);
    tokio::time::sleep(Duration::from_secs(15).saturating_sub(start.elapsed())).await;
    let late = pile_report(&sim, Mechanism::Initializers);

    let early_pile = early.per_controller.get(&key).copied().unwrap_or(0);
    let late_pile = late.per_controller.get(&key).copied().unwrap_or(0);
    assert!(early_pile >= 2, "early pile {early:?}");
    assert!(late_pile > 5, "pile after 15 s: {late:?}");
    assert!(
        late_pile > early_pile,
        "pile did not grow: {early:?} → {late:?}"
    );
    assert_eq!(late.largest_pile, late_pile);
    assert_eq!(late.controllers_without_running_pod, vec![key.clone()]);

    // The creator never saw one of its pods and kept creating; every timed-out pod is kept.
    let stats = creator.stats();
    assert_eq!(stats.visible_pods(), 0);
    assert!(
        stats.create_timeouts() as usize >= late_pile - 2,
        "{stats:?}"
    );
    assert!(stats.creates_issued() as usize >= late_pile);

    // An ordinary client (kubectl, the Job controller) sees none of them.
    let ordinary: Api<Pod> = Api::namespaced(sim.client(ADMIN), "default");
    assert!(
        ordinary
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Every stored pod is owned by the Job and waits on the dead initializer.
    for pod in sim.list_objects("pods") {
        assert_eq!(pending_names(&pod, Mechanism::Initializers), vec![init]);
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "Job");
        assert_eq!(pod["metadata"]["labels"]["initguard.io/bypass"], "true");
    }
    // The owner that started dead shows as down: no available replica, an expired Lease.
    let admin = sim.client(ADMIN);
    let deployment = Api::<Deployment>::namespaced(admin.clone(), "kube-system")
        .get("sidecar-example-com")
        .await
        .unwrap();
    assert_eq!(deployment.status.unwrap().available_replicas, Some(0));
    let lease = Api::<Lease>::namespaced(admin, "kube-system")
        .get("sidecar-example-com")
        .await
        .unwrap()
        .spec
        .unwrap();
    let expires = lease.renew_time.unwrap().0
        + std::time::Duration::from_secs(lease.lease_duration_seconds.unwrap() as u64);
    assert!(expires < k8s_openapi::jiff::Timestamp::now());
    creator.stop().await;
    owner.stop().await;
    sim.shutdown().await;
}

/// (b) Scheduling gates, dead gate owner, CronJob-like creator: one more gated pod per period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_cronjob_pile_grows_by_one_per_period() {
    let gate = "kueue.x-k8s.io/admission";
    let sim = start_sim(Mechanism::SchedulingGates, &[], Duration::from_secs(30)).await;
    let mut dead = owner(gate, Mechanism::SchedulingGates);
    dead.alive = false;
    let owner = GateOwner::start(sim.kube_config("kueue"), dead).unwrap();

    let period = Duration::from_millis(500);
    let mut cron = CreatorOptions::cron_job("default", "nightly", period);
    cron.gates = vec![gate.to_string()];
    let key = cron.controller_key();
    let start = Instant::now();
    let creator = Creator::start(sim.kube_config("cronjob-controller"), cron).unwrap();

    // The pile grows (none of its pods is ever removed) ...
    let count = || {
        pile_report(&sim, Mechanism::SchedulingGates)
            .per_controller
            .get(&key)
            .copied()
            .unwrap_or(0)
    };
    crate::wait::until("a pile of 6 gated pods", || count() >= 6).await;
    // ... by one per period at most (load can only slow the creator down). Read in this
    // order while the creator goes on: the pile, then the store's own record of creations
    // (the request log is written only after each answer, so it may lag the store), then
    // the clock.
    let waiting = count();
    let created = sim
        .object_history()
        .iter()
        .filter(|c| {
            c.user == "cronjob-controller"
                && c.resource == "pods"
                && c.change_type == ChangeType::Added
        })
        .count();
    let elapsed = start.elapsed();
    let most = (elapsed.as_secs_f64() / period.as_secs_f64()).floor() as usize + 1;
    assert!(
        created <= most,
        "{created} pods created in {elapsed:?}, more than one per {period:?}"
    );
    assert!(waiting <= created, "{waiting} waiting of {created} created");
    // They all stay Pending, SchedulingGated.
    for pod in sim.list_objects("pods") {
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["status"]["conditions"][0]["reason"], "SchedulingGated");
    }
    creator.stop().await;
    owner.stop().await;
    sim.shutdown().await;
}

/// (c) A healthy gate owner removes only its own gate; the pod is scheduled once no gate is
/// left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_gate_owner_removes_only_its_own_gate() {
    let sim = start_sim(Mechanism::SchedulingGates, &[], Duration::from_secs(30)).await;
    let mut opts = owner("a.example.com", Mechanism::SchedulingGates);
    opts.latency = Duration::from_millis(100);
    let owner = GateOwner::start(sim.kube_config("a-owner"), opts).unwrap();
    let pods: Api<Pod> = Api::namespaced(sim.client(ADMIN), "default");
    pods.create(
        &PostParams::default(),
        &pod("two-gates", &["b.example.com", "a.example.com"]),
    )
    .await
    .unwrap();
    pods.create(&PostParams::default(), &pod("one-gate", &["a.example.com"]))
        .await
        .unwrap();

    eventually_async("one-gate scheduled", || async {
        let p = stored_pod(&sim, "default", "one-gate")?;
        let scheduled = p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        (pending_names(&p, Mechanism::SchedulingGates).is_empty() && scheduled).then_some(())
    })
    .await;
    eventually_async("a removed from two-gates", || async {
        let p = stored_pod(&sim, "default", "two-gates")?;
        (pending_names(&p, Mechanism::SchedulingGates) == ["b.example.com"]).then_some(())
    })
    .await;
    // The other gate is not its business: the pod stays gated.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let p = stored_pod(&sim, "default", "two-gates").unwrap();
    assert_eq!(
        pending_names(&p, Mechanism::SchedulingGates),
        ["b.example.com"]
    );
    assert_eq!(p["status"]["phase"], "Pending");
    // Every removal was one gate, its own, written by the owner.
    let removals: Vec<(String, Vec<String>)> = sim
        .object_history()
        .into_iter()
        .map(|c| (c.user.clone(), c.removed_initializers()))
        .filter(|(_, removed)| !removed.is_empty())
        .collect();
    assert_eq!(removals.len(), 2, "{removals:?}");
    for (user, removed) in &removals {
        assert_eq!(user, "a-owner");
        assert_eq!(removed, &["a.example.com"]);
    }
    assert_eq!(owner.stats().removed(), 2);
    owner.stop().await;
    sim.shutdown().await;
}

/// (c) Legacy initializers are removed in order: an owner acts only when its name is the head
/// of `metadata.initializers.pending`; the blocked CREATE returns once the pod is initialized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_owner_acts_only_at_the_head() {
    let (first, second) = ("first.example.com", "second.example.com");
    let sim = start_sim(
        Mechanism::Initializers,
        &[first, second],
        Duration::from_secs(10),
    )
    .await;
    let mut first_opts = owner(first, Mechanism::Initializers);
    first_opts.alive = false;
    let first_owner = GateOwner::start(sim.kube_config("first-owner"), first_opts).unwrap();
    let second_owner = GateOwner::start(
        sim.kube_config("second-owner"),
        owner(second, Mechanism::Initializers),
    )
    .unwrap();

    let pods: Api<Pod> = Api::namespaced(sim.client(ADMIN), "default");
    let create = tokio::spawn({
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &pod("web", &[])).await }
    });
    eventually_async("pod stored", || async {
        stored_pod(&sim, "default", "web")
    })
    .await;
    // The second owner is alive but not at the head: nothing happens.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let p = stored_pod(&sim, "default", "web").unwrap();
    assert_eq!(pending_names(&p, Mechanism::Initializers), [first, second]);
    assert_eq!(second_owner.stats().removed(), 0);
    assert!(
        !create.is_finished(),
        "CREATE must block while uninitialized"
    );

    // The first owner comes back: it removes itself, then the second one does.
    first_owner.revive();
    let created = tokio::time::timeout(crate::wait::PATIENCE, create)
        .await
        .expect("CREATE returns once initialized")
        .unwrap()
        .expect("CREATE succeeds once initialized");
    assert_eq!(created.metadata.name.as_deref(), Some("web"));
    assert!(pods.get_opt("web").await.unwrap().is_some());
    // Each owner removed exactly its own name, the head first.
    let removals: Vec<(String, Vec<String>)> = sim
        .object_history()
        .into_iter()
        .filter(|c| c.name == "web")
        .map(|c| (c.user.clone(), c.removed_initializers()))
        .filter(|(_, removed)| !removed.is_empty())
        .collect();
    assert_eq!(
        removals,
        [
            ("first-owner".to_string(), vec![first.to_string()]),
            ("second-owner".to_string(), vec![second.to_string()]),
        ]
    );
    // The PATCH response may reach the owner after the CREATE returned.
    eventually_async("owner stats", || async {
        (first_owner.stats().removed() == 1 && second_owner.stats().removed() == 1).then_some(())
    })
    .await;
    first_owner.stop().await;
    second_owner.stop().await;
    sim.shutdown().await;
}

/// (d) Killing an owner takes its Deployment to 0 available replicas, stops its Lease renewals
/// and makes its owner pod not Ready; pods pile up behind it. Reviving brings all of that back
/// and processes the backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_revive_show_in_deployment_lease_and_owner_pod() {
    let gate = "quota.example.com";
    let sim = start_sim(Mechanism::SchedulingGates, &[], Duration::from_secs(30)).await;
    let admin = sim.client(ADMIN);
    sim.ensure_namespace(ADMIN, "quota-system")
        .await
        .expect("namespace quota-system");
    let mut opts = owner(gate, Mechanism::SchedulingGates);
    opts.namespace = "quota-system".to_string();
    opts.deployment = Some("quota-controller".to_string());
    opts.lease = Some("quota-leader".to_string());
    opts.owner_pod_labels = BTreeMap::from([("app".to_string(), "quota".to_string())]);
    opts.lease_duration = Duration::from_secs(1);
    let owner = GateOwner::start(sim.kube_config("quota-controller"), opts).unwrap();

    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "quota-system");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "quota-system");
    let owner_pods: Api<Pod> = Api::namespaced(admin.clone(), "quota-system");
    let available = || async {
        deployments
            .get_opt("quota-controller")
            .await
            .ok()
            .flatten()
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
    };
    let renew_time = || async {
        leases
            .get_opt("quota-leader")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.renew_time)
            .map(|t| t.0)
    };
    let owner_pod_ready = || async {
        let pods = owner_pods
            .list(&ListParams::default().labels("app=quota"))
            .await
            .ok()?;
        let pod = pods.items.first()?;
        let ready = pod
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")?;
        Some(ready.status == "True")
    };

    eventually_async("deployment available", || async {
        (available().await == Some(1)).then_some(())
    })
    .await;
    eventually_async("owner pod Ready", || async {
        (owner_pod_ready().await == Some(true)).then_some(())
    })
    .await;
    let first = eventually_async("lease", renew_time).await;
    eventually_async("lease renewed", || async {
        renew_time().await.filter(|t| *t > first)
    })
    .await;

    owner.kill();
    assert!(!owner.is_alive());
    eventually_async("deployment unavailable", || async {
        (available().await == Some(0)).then_some(())
    })
    .await;
    eventually_async("owner pod not Ready", || async {
        (owner_pod_ready().await == Some(false)).then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("job-{i}"), &[gate]))
            .await
            .unwrap();
    }
    let stopped_at = renew_time().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        renew_time().await,
        Some(stopped_at),
        "a dead owner renewed its lease"
    );
    assert_eq!(
        pile_report(&sim, Mechanism::SchedulingGates).stored_waiting_pods,
        3
    );

    owner.revive();
    eventually_async("deployment available again", || async {
        (available().await == Some(1)).then_some(())
    })
    .await;
    eventually_async("lease renewed again", || async {
        renew_time().await.filter(|t| *t > stopped_at)
    })
    .await;
    eventually_async("owner pod Ready again", || async {
        (owner_pod_ready().await == Some(true)).then_some(())
    })
    .await;
    eventually_async("backlog processed", || async {
        (pile_report(&sim, Mechanism::SchedulingGates).stored_waiting_pods == 0).then_some(())
    })
    .await;
    eventually_async("owner stats", || async {
        (owner.stats().removed() == 3).then_some(())
    })
    .await;
    owner.stop().await;
    sim.shutdown().await;
}

mod scenarios {
    use std::time::{Duration, Instant};

    use initguard::config::Mechanism;
    use initguard_sim::SimClients as _;
    use initguard_sim::controllers::pile_report;
    use initguard_sim::scenario::{Action, Scenario, ScenarioError, Step, run_scenario};
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    use kube::{Api, Client};
    use kube_sim::{Sim, SimOptions};
    use tokio_util::sync::CancellationToken;

    fn problems(text: &str) -> Vec<String> {
        match Scenario::from_yaml_str(text, "s.yaml") {
            Ok(s) => panic!("accepted: {s:?}"),
            Err(ScenarioError::Invalid(p)) => p.iter().map(ToString::to_string).collect(),
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    #[test]
    fn examples_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/config/scenarios");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
                assert!(!s.owners.is_empty() && !s.creators.is_empty(), "{path:?}");
                seen += 1;
            }
        }
        assert!(seen >= 2, "expected the example scenarios in {dir}");
        let legacy = Scenario::load(std::path::Path::new(&format!(
            "{dir}/legacy-job-pileup.yaml"
        )))
        .unwrap();
        assert_eq!(legacy.initializers, ["sidecar.example.com"]);
        assert!(legacy.timeline.iter().any(|e| matches!(
            e.action(),
            Some(Action::Revive(t)) if t == "sidecar.example.com"
        )));
    }

    /// A scenario drives the controllers and the server: the gate owner dies at 1 s and the
    /// CronJob pile grows; faults and a server restart hit everyone but the (exempt)
    /// controllers; the owner comes back at 2.5 s and the pile drains.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_scenario_follows_the_timeline() {
        let text = "
mechanism: schedulingGates
namespaces: [batch]
owners:
  - initializer: gate.example.com
creators:
  - { kind: cronjob, namespace: batch, name: tick, period: 200ms, gates: [gate.example.com], optIn: true }
timeline:
  - { at: 1s, kill: gate.example.com }
  - { at: 1500ms, faults: { errorRate: 1, errorStatuses: [500] } }
  - { at: 1600ms, restart: true }
  - { at: 2500ms, revive: gate.example.com }
";
        let scenario = Scenario::from_yaml_str(text, "t.yaml").unwrap();
        let sim = Sim::start(scenario.sim_options(SimOptions::default()))
            .await
            .unwrap();
        let cancel = CancellationToken::new();
        let start = Instant::now();
        let run = tokio::spawn({
            let sim = sim.clone();
            let cancel = cancel.clone();
            async move { run_scenario(&sim, &scenario, cancel).await }
        });
        let pile = || pile_report(&sim, Mechanism::SchedulingGates).stored_waiting_pods;

        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(pile() <= 2, "a live owner keeps the pile small: {}", pile());
        tokio::time::sleep(Duration::from_millis(2300).saturating_sub(start.elapsed())).await;
        assert!(
            pile() >= 3,
            "the pile grows while the owner is dead: {}",
            pile()
        );

        // Faults hit a client that is not exempt.
        let mut config = sim.kube_config("someone");
        config.default_retry = false;
        let pods: Api<Pod> = Api::namespaced(Client::try_from(config).unwrap(), "batch");
        match pods.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 500),
            other => panic!("expected an injected 500, got {other:?}"),
        }

        crate::wait::until("the revived owner to drain the pile", || pile() <= 1).await;
        let all = sim.list_objects("pods");
        assert!(
            all.len() >= 10,
            "the creator kept going: {} pods",
            all.len()
        );
        assert!(
            all.iter()
                .all(|p| p["metadata"]["labels"]["initguard.io/bypass"] == "true")
        );
        cancel.cancel();
        run.await.unwrap().unwrap();
        sim.shutdown().await;
    }

    /// Creators with `startAt` are steps of the timeline, ordered with its actions, and
    /// `scaled` multiplies every offset and period.
    #[test]
    fn delayed_creators_are_steps_and_scaling_multiplies_durations() {
        let text = "
mechanism: schedulingGates
owners: [{ initializer: gate.example.com }]
creators:
  - { kind: job, name: now, replicas: 1 }
  - { kind: cronjob, name: later, period: 1s, startAt: 3s, syncPeriod: 100ms }
timeline:
  - { at: 2s, kill: gate.example.com }
  - { at: 4s, revive: gate.example.com }
";
        let scenario = Scenario::from_yaml_str(text, "t.yaml").unwrap();
        let steps = scenario.steps();
        let at: Vec<u128> = steps.iter().map(|(at, _)| at.as_millis()).collect();
        assert_eq!(at, [2000, 3000, 4000]);
        assert_eq!(steps[1].1, Step::StartCreator(1));
        assert!(matches!(&steps[0].1, Step::Action(Action::Kill(t)) if t == "gate.example.com"));
        let half = scenario.scaled(0.5);
        let at: Vec<u128> = half.steps().iter().map(|(at, _)| at.as_millis()).collect();
        assert_eq!(at, [1000, 1500, 2000]);
        assert_eq!(half.creators[1].period, Some(Duration::from_millis(500)));
        assert_eq!(
            half.creator_options(&half.creators[1]).sync_period,
            Duration::from_millis(50)
        );
    }

    /// A creator with `startAt` writes nothing before it, by the server's record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delayed_creator_creates_nothing_before_its_start() {
        let text = "
mechanism: schedulingGates
namespaces: [batch]
owners: [{ initializer: gate.example.com }]
creators:
  - { kind: job, namespace: batch, name: early, replicas: 1 }
  - { kind: job, namespace: batch, name: late, replicas: 1, startAt: 1s }
";
        let scenario = Scenario::from_yaml_str(text, "t.yaml").unwrap();
        let sim = Sim::start(scenario.sim_options(SimOptions::default()))
            .await
            .unwrap();
        let cancel = CancellationToken::new();
        let started = std::time::SystemTime::now();
        let run = tokio::spawn({
            let sim = sim.clone();
            let cancel = cancel.clone();
            async move { run_scenario(&sim, &scenario, cancel).await }
        });
        let created_by = |prefix: &str| {
            sim.object_history()
                .into_iter()
                .filter(|c| {
                    c.resource == "pods" && c.before.is_none() && c.name.starts_with(prefix)
                })
                .map(|c| c.time)
                .min()
        };
        crate::wait::until("both jobs to create a pod", || {
            created_by("early-").is_some() && created_by("late-").is_some()
        })
        .await;
        let late = created_by("late-").unwrap();
        assert!(
            late.duration_since(started).unwrap_or_default() >= Duration::from_secs(1),
            "the late job created a pod {:?} after the start",
            late.duration_since(started)
        );
        cancel.cancel();
        run.await.unwrap().unwrap();
        sim.shutdown().await;
    }

    #[test]
    fn syntax_and_type_errors_are_located() {
        assert_eq!(
            problems("mechanism: schedulingGates\nowners:\n  - initializer: a\n    latncy: 1s\n"),
            [
                "s.yaml:4:5: owners[0]: unknown field `latncy`, expected one of `initializer`, `namespace`, `deployment`, `lease`, `ownerPods`, `latency`, `alive`, `leaseDuration`"
            ]
        );
        let bad_duration = problems("mechanism: initializers\ncreateTimeout: soon\n");
        assert_eq!(bad_duration.len(), 1);
        assert!(
            bad_duration[0].starts_with("s.yaml:2:16: "),
            "{bad_duration:?}"
        );
        let bad_mechanism = problems("mechanism: webhooks\n");
        assert!(
            bad_mechanism[0].starts_with("s.yaml:1:12: "),
            "{bad_mechanism:?}"
        );
    }

    #[test]
    fn semantic_errors_are_located() {
        let text = "\
mechanism: initializers
initializers: [a.example.com]
owners:
  - initializer: a.example.com
creators:
  - kind: job
    name: backfill
    gates: [a.example.com]
  - kind: cronjob
    name: nightly
timeline:
  - at: 1s
    kill: nobody.example.com
  - at: 2s
    revive: a.example.com
    restart: true
  - at: 3s
    kill: job/default/backfill
  - at: 4s
    faults: { errorRate: 2 }
";
        assert_eq!(
            problems(text),
            [
                "s.yaml:8:5: only for mechanism schedulingGates; legacy initializers come from the top-level `initializers` list",
                "s.yaml:9:11: a cronjob needs a `period`",
                "s.yaml:13:11: unknown controller \"nobody.example.com\": name an owner's initializer or a creator as kind/namespace/name",
                "s.yaml:14:5: has more than one action; use one entry per action",
                "s.yaml:20:26: must be between 0 and 1",
            ]
        );
    }
}

mod binary {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// (f) `initguard sim` with a scenario writes a kubeconfig kubectl can use, runs the
    /// scenario's controllers, and stops cleanly on SIGTERM.
    #[test]
    fn sim_serves_kubectl_and_exits_on_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("sim.kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_initguard"))
            .args(["sim", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .arg("--scenario")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/config/scenarios/gates-cronjob.yaml"
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut announced = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let done = line.starts_with("try: kubectl");
            announced.push(line);
            if done {
                break;
            }
        }
        let text = announced.join("\n");
        assert!(
            text.contains(&format!("kubeconfig: {}", kubeconfig.display())),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "kubectl --kubeconfig {} get pods -A",
                kubeconfig.display()
            )),
            "{text}"
        );
        let written = std::fs::read_to_string(&kubeconfig).unwrap();
        assert!(written.contains("server: http://127.0.0.1:"), "{written}");

        match initguard_test_support::tools::kubectl() {
            Ok(kubectl) => {
                // The scenario's CronJob makes its first pod at once; kubectl lists it.
                let start = Instant::now();
                loop {
                    let out = Command::new(&kubectl)
                        .arg("--kubeconfig")
                        .arg(&kubeconfig)
                        .args(["get", "pods", "-A"])
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "kubectl failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let table = String::from_utf8_lossy(&out.stdout);
                    if table.contains("nightly-report-") {
                        break;
                    }
                    assert!(
                        start.elapsed() < crate::wait::PATIENCE,
                        "no scenario pod listed: {table}"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            Err(why) => initguard_test_support::tools::missing(
                "sim_serves_kubectl_and_exits_on_sigterm (its kubectl check)",
                "kubectl",
                &why,
            ),
        }

        let term = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > crate::wait::PATIENCE {
                let _ = child.kill();
                panic!("initguard sim did not exit after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "exit status {status:?}");
    }

    /// A bad scenario is a configuration error: exit 2 with a located message, nothing served.
    #[test]
    fn bad_scenario_exits_2_with_location() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, "mechanism: schedulingGates\ntimeline:\n  - at: 1s\n").unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_initguard"))
            .args(["sim", "--listen", "127.0.0.1:0", "--scenario"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{}:3:5: needs one action", path.display())),
            "{stderr}"
        );
    }
}
