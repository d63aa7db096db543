//! The node stage against the simulated server: a node agent (a DaemonSet's pod on the one
//! node) missing as pods start makes their `istio-validation` step fail for good
//! (`Sim::fail_init_container`), and the guard recreates (evicts) only the opted-in ones, only
//! once the agent is back for `repairAfter`, one per controller, recording each in Events;
//! judged by the server's request log and object history.

use std::time::{Duration, SystemTime};

use initguard::config::Mechanism;
use kube_sim::{ChangeType, Rbac};
use serde_json::{Value, json};

use crate::harness::*;

const STEP: &str = "istio-validation";

fn config(extra: &str) -> std::sync::Arc<initguard::config::Config> {
    config_for(Mechanism::SchedulingGates, extra)
}

fn config_for(mechanism: Mechanism, extra: &str) -> std::sync::Arc<initguard::config::Config> {
    crate::harness::config(
        mechanism,
        &format!(
            "initContainers:\n  - name: {STEP}\n    owner: {{ daemonset: istio-system/istio-cni-node }}\n    \
             failedExitCodes: [126]\n    action: recreate\n    repairAfter: 1s\n{extra}"
        ),
    )
}

/// The shipped RBAC with `deploy/rbac-node-stage.yaml` (both of its roles).
fn node_stage_rbac(mechanism: Mechanism) -> Rbac {
    let mut rbac = shipped_rbac(mechanism);
    let stage = Rbac::from_yaml_str(&deploy_file("rbac-node-stage.yaml"), GUARD_USER)
        .unwrap_or_else(|e| panic!("deploy/rbac-node-stage.yaml: {e}"));
    rbac.merge(stage);
    rbac
}

async fn world() -> (Cluster, String) {
    world_for(Mechanism::SchedulingGates).await
}

/// The DaemonSet's group version on the server being simulated: apps/v1beta2 on the 1.8
/// profile (no apps/v1 yet), else apps/v1.
fn daemonset_api_version() -> &'static str {
    if kube_version() == Some(kube_sim::KubeVersion::V1_8) {
        "apps/v1beta2"
    } else {
        "apps/v1"
    }
}

async fn world_for(mechanism: Mechanism) -> (Cluster, String) {
    let c = Cluster::start(mechanism).await;
    c.sim
        .enforce_rbac_policy(GUARD_USER, node_stage_rbac(mechanism));
    c.namespace("istio-system").await;
    c.namespace("apps").await;
    let ds = c
        .admin_post(
            &format!(
                "/apis/{}/namespaces/istio-system/daemonsets",
                daemonset_api_version()
            ),
            &json!({"apiVersion": daemonset_api_version(), "kind": "DaemonSet",
                "metadata": {"name": "istio-cni-node", "namespace": "istio-system"},
                "spec": {"selector": {"matchLabels": {"k8s-app": "istio-cni-node"}},
                    "template": {"metadata": {"labels": {"k8s-app": "istio-cni-node"}},
                        "spec": {"containers": [{"name": "install-cni", "image": "cni"}]}}}}),
        )
        .await;
    let uid = ds["metadata"]["uid"].as_str().expect("a uid").to_owned();
    (c, uid)
}

/// The agent's pod on the node (the sim's kubelet makes it Ready), started only once the
/// server's clock has moved three whole seconds past now: its timestamps have one-second
/// granularity, and the rule recreates only pods bound (rounded up) before the agent's Ready
/// transition (rounded down), so pods bound in the same second are reported, never recreated.
async fn agent(c: &Cluster, ds_uid: &str) -> String {
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let pod = c
        .admin_post(
            "/api/v1/namespaces/istio-system/pods",
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "istio-cni-node-", "namespace": "istio-system",
                    "labels": {"k8s-app": "istio-cni-node"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                        "name": "istio-cni-node", "uid": ds_uid, "controller": true}]},
                "spec": {"containers": [{"name": "install-cni", "image": "cni"}]}}),
        )
        .await;
    pod["metadata"]["name"].as_str().expect("a name").to_owned()
}

/// A workload pod of ReplicaSet `rs`, with the step, opted in or not.
async fn workload(c: &Cluster, name: &str, rs: &str, opted_in: bool) {
    let mut labels = json!({"app": name});
    if opted_in {
        labels[OPT_IN] = json!("");
    }
    c.admin_post(
        "/api/v1/namespaces/apps/pods",
        &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "apps", "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": rs, "uid": format!("{rs}-uid"), "controller": true}]},
            "spec": {"initContainers": [{"name": STEP, "image": "proxyv2"}],
                "containers": [{"name": "app", "image": "app"}]}}),
    )
    .await;
}

/// The guard's evictions, as the server recorded them: (pod, time, answer).
fn evictions(c: &Cluster) -> Vec<(String, SystemTime, u16)> {
    c.sim
        .requests()
        .into_iter()
        .filter(|r| r.user == GUARD_USER && r.resource == "pods/eviction")
        .map(|r| (r.name.unwrap_or_default(), r.time, r.status))
        .collect()
}

/// The guard's Events of `reason` about `kind` objects named `name`.
fn events(c: &Cluster, reason: &str, kind: &str, name: &str) -> Vec<Value> {
    c.sim
        .list_objects("events")
        .into_iter()
        .filter(|e| {
            e["reason"] == reason
                && e["involvedObject"]["kind"] == kind
                && e["involvedObject"]["name"] == name
        })
        .collect()
}

/// When the server first committed pod `name` with condition `kind` True.
fn condition_true_at(c: &Cluster, name: &str, kind: &str) -> Option<SystemTime> {
    c.sim
        .object_history()
        .into_iter()
        .find(|ch| {
            ch.name == name
                && ch.after.as_ref().is_some_and(|p| {
                    p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == kind && c["status"] == "True")
                    })
                })
        })
        .map(|ch| ch.time)
}

// On every version profile: DaemonSets discovered in apps/v1, or apps/v1beta2 on 1.8; the
// Eviction in policy/v1 or policy/v1beta1 as `/api/v1` lists it.
both_mechanisms!(recreates_only_opted_in_pods_once_their_agent_is_back_for_repair_after);

async fn recreates_only_opted_in_pods_once_their_agent_is_back_for_repair_after(
    mechanism: Mechanism,
) {
    let (c, ds_uid) = world_for(mechanism).await;
    let guard = c.guard(&config_for(mechanism, "")).await;
    // The agent is missing as the pods start: their step fails for good.
    c.sim.fail_init_container(STEP, Some(126));
    workload(&c, "web-a", "web", true).await;
    workload(&c, "api-a", "api", true).await;
    workload(&c, "batch-a", "batch", false).await;
    // Each is explained once, on the pod, where users look (the server's record).
    for pod in ["web-a", "api-a", "batch-a"] {
        eventually_async(
            format!("an InitContainerWaiting Event on {pod}"),
            || async { (events(&c, "InitContainerWaiting", "Pod", pod).len() == 1).then_some(()) },
        )
        .await;
    }
    let explained = events(&c, "InitContainerWaiting", "Pod", "web-a");
    assert_eq!(explained[0]["type"], "Normal");
    let message = explained[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("exited 126") && message.contains("down"),
        "{message}"
    );
    // Nothing is evicted while the agent is down.
    assert_eq!(evictions(&c), []);

    // The agent comes back (pods started from now on would succeed).
    c.sim.fail_init_container(STEP, None);
    let agent = agent(&c, &ds_uid).await;
    let evicted = eventually_async("both opted-in pods evicted", || async {
        let e = evictions(&c);
        let done: Vec<_> = e.iter().filter(|(_, _, s)| *s == 201).collect();
        (done.len() >= 2).then_some(e)
    })
    .await;
    let back = condition_true_at(&c, &agent, "Ready").expect("the agent Ready");
    let mut names: Vec<&str> = evicted.iter().map(|(n, _, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["api-a", "web-a"], "{evicted:?}");
    for (pod, at, _) in &evicted {
        // Never before the agent has been up for repairAfter (the server's own clock).
        assert_not_before(
            &format!("evicting {pod}"),
            back,
            *at,
            Duration::from_secs(1),
        );
    }
    // The pods are gone, by the guard's hand, and the unlabeled one is still there.
    for pod in ["web-a", "api-a"] {
        assert!(
            c.sim.get_object("pods", Some("apps"), pod).is_none(),
            "{pod}"
        );
        let deleted = c.sim.object_history().into_iter().any(|ch| {
            ch.name == pod && ch.change_type == ChangeType::Deleted && ch.user == GUARD_USER
        });
        assert!(deleted, "{pod} deleted by the guard's eviction");
    }
    // Recorded on the pod and on its controller (written after the eviction's answer).
    for (kind, name) in [
        ("Pod", "web-a"),
        ("Pod", "api-a"),
        ("ReplicaSet", "web"),
        ("ReplicaSet", "api"),
    ] {
        let recorded = eventually_async(
            format!("InitContainerRecreated on {kind} {name}"),
            || async {
                let e = events(&c, "InitContainerRecreated", kind, name);
                (!e.is_empty()).then_some(e)
            },
        )
        .await;
        assert_eq!(recorded.len(), 1, "{kind} {name}: {recorded:?}");
        assert_eq!(recorded[0]["type"], "Warning");
        if kind == "ReplicaSet" {
            assert_eq!(recorded[0]["involvedObject"]["uid"], format!("{name}-uid"));
        }
    }
    assert!(c.sim.get_object("pods", Some("apps"), "batch-a").is_some());
    assert!(evictions(&c).iter().all(|(n, _, _)| n != "batch-a"));
    // The DaemonSet was read where this server serves it, and nowhere else.
    let paths: std::collections::BTreeSet<String> = c
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.user == GUARD_USER && r.resource == "daemonsets")
        .map(|r| r.path)
        .collect();
    let want = format!(
        "/apis/{}/namespaces/istio-system/daemonsets",
        daemonset_api_version()
    );
    assert!(
        !paths.is_empty() && paths.iter().all(|p| *p == want),
        "{paths:?}"
    );
    c.finish(guard).await;
}

#[tokio::test]
async fn a_pod_that_fails_while_its_agent_is_up_is_reported_never_recreated() {
    let (c, ds_uid) = world().await;
    let agent = agent(&c, &ds_uid).await;
    eventually_async("the agent Ready", || async {
        c.sim
            .get_object("pods", Some("istio-system"), &agent)
            .filter(|p| p["status"]["phase"] == "Running")
    })
    .await;
    let guard = c.guard(&config("")).await;
    // The agent is up but broken: a pod bound now fails anyway.
    c.sim.fail_init_container(STEP, Some(126));
    workload(&c, "web-a", "web", true).await;
    eventually_async("web-a explained", || async {
        (events(&c, "InitContainerWaiting", "Pod", "web-a").len() == 1).then_some(())
    })
    .await;
    let message = events(&c, "InitContainerWaiting", "Pod", "web-a")[0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("bound while its owner was already up"),
        "{message}"
    );
    // `/status` and the one-shot `status` say the same about it.
    let (code, body) = http_get(guard.addr, "/status").await;
    assert_eq!(code, 200, "{body}");
    let served: Value = serde_json::from_str(&body).expect("JSON");
    let listed = served["initContainers"].as_array().expect("initContainers");
    assert_eq!(listed.len(), 1, "{body}");
    assert_eq!(listed[0]["name"], "web-a");
    assert_eq!(listed[0]["container"], STEP);
    assert_eq!(listed[0]["optedIn"], true);
    assert_eq!(listed[0]["trigger"]["trigger"], "failed", "{body}");
    assert_eq!(listed[0]["plan"]["action"], "report", "{body}");
    assert!(
        listed[0]["explanation"]
            .as_str()
            .is_some_and(|e| e.contains("bound while its owner was already up")),
        "{body}"
    );
    let report = initguard::status::gather(c.guard_client(), config(""))
        .await
        .expect("a one-shot report");
    assert_eq!(report.init_containers.len(), 1, "{report:?}");
    assert_eq!(report.init_containers[0].name, "web-a");
    assert!(
        report.init_containers[0]
            .explanation
            .contains("bound while its owner was already up"),
        "{report:?}"
    );
    let table = initguard::status::render_table(&report, SystemTime::now());
    assert!(
        table.contains("1 pod(s) waiting on init containers"),
        "{table}"
    );
    // Decided again (a change of the pod), and a witness stuck the same way after it: each
    // explained, neither evicted (an agent that is up but broken is not healed by recreating).
    c.merge_patch_pod(
        "apps",
        "web-a",
        &json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await;
    workload(&c, "witness", "witness", true).await;
    eventually_async("witness explained", || async {
        (events(&c, "InitContainerWaiting", "Pod", "witness").len() == 1).then_some(())
    })
    .await;
    assert_eq!(evictions(&c), []);
    assert!(c.sim.get_object("pods", Some("apps"), "web-a").is_some());
    c.finish(guard).await;
}

#[tokio::test]
async fn one_pod_per_controller_at_a_time_the_next_once_a_replacement_initialized() {
    let (c, ds_uid) = world().await;
    let guard = c.guard(&config("")).await;
    c.sim.fail_init_container(STEP, Some(126));
    workload(&c, "web-1", "web", true).await;
    workload(&c, "web-2", "web", true).await;
    for pod in ["web-1", "web-2"] {
        eventually_async(format!("{pod} explained"), || async {
            (events(&c, "InitContainerWaiting", "Pod", pod).len() == 1).then_some(())
        })
        .await;
    }
    c.sim.fail_init_container(STEP, None);
    agent(&c, &ds_uid).await;
    let first = eventually_async("one pod of web evicted", || async {
        let done: Vec<_> = evictions(&c)
            .into_iter()
            .filter(|(_, _, s)| *s == 201)
            .collect();
        (done.len() == 1).then(|| done[0].clone())
    })
    .await;
    // The test plays the ReplicaSet: a replacement, started with the agent up, initializes,
    // and only then is the other pod evicted.
    workload(&c, "web-3", "web", true).await;
    let second = eventually_async("the other pod of web evicted", || async {
        let done: Vec<_> = evictions(&c)
            .into_iter()
            .filter(|(_, _, s)| *s == 201)
            .collect();
        (done.len() == 2).then(|| done[1].clone())
    })
    .await;
    let mut both = [first.0.as_str(), second.0.as_str()];
    both.sort_unstable();
    assert_eq!(both, ["web-1", "web-2"]);
    let replaced = condition_true_at(&c, "web-3", "Initialized").expect("web-3 initialized");
    assert_not_before("the second eviction", replaced, second.1, Duration::ZERO);
    assert!(c.sim.get_object("pods", Some("apps"), "web-3").is_some());
    c.finish(guard).await;
}

#[tokio::test]
async fn a_dry_run_evicts_nothing_and_writes_nothing() {
    let (c, ds_uid) = world().await;
    let guard = c.guard(&config("dryRun: true\n")).await;
    c.sim.fail_init_container(STEP, Some(126));
    workload(&c, "web-1", "web", true).await;
    eventually_async("web-1 stuck", || async {
        c.sim.get_object("pods", Some("apps"), "web-1").filter(|p| {
            p["status"]["initContainerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 126
        })
    })
    .await;
    c.sim.fail_init_container(STEP, None);
    agent(&c, &ds_uid).await;
    // Dry run logs and counts only: its count is the sync point; the server's record is the
    // judge (no eviction, no Event, the pod still there).
    eventually_async("the dry run's decision counted", || async {
        let (_, text) = http_get(guard.addr, "/metrics").await;
        (metric_sum(
            &text,
            "initguard_init_recreations_total",
            &[("container", STEP), ("outcome", "evicted")],
        ) == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(evictions(&c), []);
    assert!(events(&c, "InitContainerWaiting", "Pod", "web-1").is_empty());
    assert!(events(&c, "InitContainerRecreated", "Pod", "web-1").is_empty());
    assert!(c.sim.get_object("pods", Some("apps"), "web-1").is_some());
    c.finish(guard).await;
}
