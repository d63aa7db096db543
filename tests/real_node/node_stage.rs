//! The node stage on the real node: a node agent (a DaemonSet) missing as pods start makes
//! their init step fail for good, as a CNI validator's does, and the guard recreates only the
//! opted-in pods that a controller re-creates, only once the agent has been back for
//! `repairAfter`, one per controller at a time; judged by the API server's record and its
//! audit log (the kubelet's own status writes, the guard's evictions).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::chart;
use crate::pods::{POLL, namespace, node_name};
use crate::testbed::*;
use crate::wait::eventually_every;

/// The agent's DaemonSet.
const AGENT: &str = "agent";
/// The init step every workload runs, and the exit code it fails with.
const STEP: &str = "net-check";
const EXIT: i64 = 126;
/// How long the agent must be back before the guard recreates.
const REPAIR_AFTER_SECONDS: i64 = 3;
/// Pod templates' grace period: evicted pods go quickly.
const GRACE: i64 = 1;

/// One run of the outage: its namespaces, and who the guard is in the audit log.
pub(crate) struct Case {
    pub(crate) tb: Arc<Testbed>,
    /// The agent's namespace.
    pub(crate) agent_ns: &'static str,
    /// The workloads' namespace.
    pub(crate) ns: &'static str,
    /// The guard's user.
    pub(crate) user: String,
}

/// The `initContainers` entries (flow YAML), for the guard's config and the chart's values.
pub(crate) fn steps(agent_ns: &str) -> String {
    format!(
        "[{{ name: {STEP}, owner: {{ daemonset: {agent_ns}/{AGENT} }}, \
         failedExitCodes: [{EXIT}], action: recreate, repairAfter: {REPAIR_AFTER_SECONDS}s }}, \
         {{ name: {SIDECAR_STEP}, deadline: {SIDECAR_DEADLINE_SECONDS}s }}]"
    )
}

fn config(agent_ns: &str) -> String {
    format!(
        "mechanism: schedulingGates\n\
         optIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: false }}\n\
         unlistedInitializers: ignore\n\
         dryRun: false\n\
         initContainers: {}\n",
        steps(agent_ns)
    )
}

/// A native sidecar (a restartable init container) whose startup probe never passes, listed
/// with a deadline only: reported at it, never acted on.
const SIDECAR_STEP: &str = "proxy";
const SIDECAR_DEADLINE_SECONDS: i64 = 4;

fn sidecar_deployment(c: &Case) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "sidecar", "namespace": c.ns },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "sidecar" } },
            "template": {
                "metadata": { "labels": { "app": "sidecar", OPT_IN: "true" } },
                "spec": {
                    "terminationGracePeriodSeconds": GRACE,
                    "initContainers": [{
                        "name": SIDECAR_STEP,
                        "image": "initguard.test/busybox:1",
                        "imagePullPolicy": "IfNotPresent",
                        "restartPolicy": "Always",
                        "command": ["sh", "-c", "exec sleep 3600"],
                        "startupProbe": {
                            "exec": { "command": ["false"] },
                            "periodSeconds": 1,
                            "failureThreshold": 10000,
                        },
                    }],
                    "containers": [{
                        "name": "main",
                        "image": "initguard.test/busybox:1",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", "exec sleep 3600"],
                    }],
                },
            },
        },
    })
}

/// The host directory the agent marks itself up in (a hostPath both sides mount; inside the
/// bed's own directory, so `down` takes it away).
fn agent_dir(c: &Case) -> std::path::PathBuf {
    c.tb.dir.join(c.agent_ns)
}

fn host_path(c: &Case) -> Value {
    json!({ "path": agent_dir(c).display().to_string(), "type": "DirectoryOrCreate" })
}

/// The agent: Ready while it runs; it marks the node configured while it runs and unmarks it
/// as it stops.
fn agent(c: &Case) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": { "name": AGENT, "namespace": c.agent_ns },
        "spec": {
            "selector": { "matchLabels": { "app": AGENT } },
            "template": {
                "metadata": { "labels": { "app": AGENT } },
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "agent",
                        "image": "initguard.test/busybox:1",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c",
                            "trap 'rm -f /agent/up; exit 0' TERM; touch /agent/up; \
                             while :; do sleep 1; done"],
                        "readinessProbe": {
                            "exec": { "command": ["test", "-f", "/agent/up"] },
                            "periodSeconds": 1,
                        },
                        "volumeMounts": [{ "name": "agent", "mountPath": "/agent" }],
                    }],
                    "volumes": [{ "name": "agent", "hostPath": host_path(c) }],
                },
            },
        },
    })
}

/// A pod template whose init step decides once, at its first run in the pod's sandbox,
/// whether the agent had configured the node (the verdict is kept in an emptyDir, which
/// outlives container restarts): a pod started while the agent was missing fails for good.
/// `broken`: the step fails whatever the agent does (an agent up but broken).
fn template(c: &Case, app: &str, opted_in: bool, restart: &str, broken: bool, main: &str) -> Value {
    let mut labels = json!({ "app": app });
    if opted_in {
        labels[OPT_IN] = json!("true");
    }
    let check = if broken {
        format!("echo broken; exit {EXIT}")
    } else {
        format!(
            "v=/verdict/v; [ -f $v ] || {{ if [ -f /agent/up ]; then echo ok; else echo missing; fi >$v; }}; \
             grep -qx ok $v || {{ echo the agent was missing as this pod started; exit {EXIT}; }}"
        )
    };
    json!({
        "metadata": { "labels": labels },
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": GRACE,
            "initContainers": [{
                "name": STEP,
                "image": "initguard.test/busybox:1",
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", check],
                "volumeMounts": [
                    { "name": "agent", "mountPath": "/agent", "readOnly": true },
                    { "name": "verdict", "mountPath": "/verdict" },
                ],
            }],
            "containers": [{
                "name": "main",
                "image": "initguard.test/busybox:1",
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", main],
            }],
            "volumes": [
                { "name": "agent", "hostPath": host_path(c) },
                { "name": "verdict", "emptyDir": {} },
            ],
        },
    })
}

fn deployment(c: &Case, name: &str, replicas: u32, opted_in: bool, broken: bool) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name, "namespace": c.ns },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": template(c, name, opted_in, "Always", broken, "exec sleep 3600"),
        },
    })
}

fn job(c: &Case, name: &str, restart: &str, backoff_limit: u32) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name, "namespace": c.ns },
        "spec": {
            "backoffLimit": backoff_limit,
            "template": template(c, name, true, restart, false, "true"),
        },
    })
}

fn name_of(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn uid_of(pod: &Value) -> String {
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The pods of `app` (the label every template carries).
fn pods(c: &Case, app: &str) -> Vec<Value> {
    c.tb.list("pods", c.ns, Some(&format!("app={app}")))
}

/// Whether `pod`'s step has terminated with [`EXIT`] (now or last time), as the kubelet
/// reported.
fn failed_with_exit(pod: &Value) -> bool {
    pod["status"]["initContainerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["name"] == STEP)
        .any(|s| {
            s["state"]["terminated"]["exitCode"].as_i64() == Some(EXIT)
                || s["lastState"]["terminated"]["exitCode"].as_i64() == Some(EXIT)
        })
}

fn condition(pod: &Value, kind: &str) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

/// The guard's Events of `reason` on `kind` `name` in `ns`.
fn events(tb: &Testbed, ns: &str, reason: &str, kind: &str, name: &str) -> Vec<Value> {
    tb.list("events", ns, None)
        .into_iter()
        .filter(|e| {
            e["reason"] == reason
                && e["involvedObject"]["kind"] == kind
                && e["involvedObject"]["name"] == name
        })
        .collect()
}

/// Wait for `pod` to be explained once by the guard (its `InitContainerWaiting` Event), and
/// return the Event's message.
async fn explained(c: &Case, pod: &str) -> String {
    let found = eventually_every(
        POLL,
        format!("an InitContainerWaiting Event on {pod}"),
        || async {
            let e = events(&c.tb, c.ns, "InitContainerWaiting", "Pod", pod);
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert_eq!(found.len(), 1, "explained once: {found:#?}");
    found[0]["message"].as_str().unwrap_or_default().to_owned()
}

/// The agent's pod on the node, once Ready; the server's Ready transition time.
async fn agent_ready(c: &Case) -> jiff::Timestamp {
    let node = node_name(&c.tb);
    eventually_every(POLL, "the agent's pod Ready on the node", || async {
        c.tb.list("pods", c.agent_ns, Some(&format!("app={AGENT}")))
            .into_iter()
            .filter(|p| p["spec"]["nodeName"] == node.as_str())
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .find_map(|p| {
                let ready = p["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Ready" && c["status"] == "True")?
                    .clone();
                Some(timestamp(ready["lastTransitionTime"].as_str()?))
            })
    })
    .await
}

/// The guard's evictions in the workloads' namespace, as the server recorded them.
fn evictions(c: &Case) -> Vec<Audit> {
    c.tb.scenario_audit()
        .into_iter()
        .filter(|a| a.user == c.user && a.subresource == "eviction" && a.namespace == c.ns)
        .collect()
}

/// [`outage`] with the guard's binary on the host, granted deploy/rbac-node-stage.yaml.
pub(crate) async fn recreates_opted_in_pods_once_their_agent_is_back(tb: Arc<Testbed>) {
    let case = Case {
        tb,
        agent_ns: "node-agent",
        ns: "node-stage",
        user: GUARD_USER.to_owned(),
    };
    outage(&case, Guard::Host).await;
}

/// The chart's release for [`the_chart_installed_guard_does_the_same`].
const CHART_RELEASE: (&str, &str) = ("stage", "chart-stage");

/// [`outage`] with the guard as the chart installs it, on the node: the chart renders the
/// DaemonSet watch and, with `evictions.namespaces`, the eviction Role from the config.
pub(crate) async fn the_chart_installed_guard_does_the_same(tb: Arc<Testbed>) {
    let (release, ns) = CHART_RELEASE;
    let case = Case {
        tb,
        agent_ns: "node-agent-chart",
        ns: "node-stage-chart",
        user: format!("system:serviceaccount:{ns}:{release}-initguard"),
    };
    outage(&case, Guard::Chart).await;
}

/// Who runs the guard in an [`outage`].
#[derive(Clone, Copy)]
pub(crate) enum Guard {
    /// The binary on the host, as `system:initguard`, with deploy/rbac-node-stage.yaml.
    Host,
    /// The chart in the tree, its pod on the node, as its ServiceAccount.
    Chart,
}

enum Running {
    Host(GuardProcess),
    Chart,
}

/// Start the guard of `guard` for `c`, until it is ready.
async fn start(c: &Case, guard: Guard) -> Running {
    match guard {
        Guard::Host => {
            c.tb.kubectl(&["apply", "-f", &rbac_node_stage()]);
            Running::Host(c.tb.guard(c.ns, "initguard", &config(c.agent_ns)).await)
        }
        Guard::Chart => {
            let (release, ns) = CHART_RELEASE;
            let values = chart::write(
                &c.tb,
                "chart-stage.yaml",
                &format!(
                    "{}replicaCount: 1
config:
  dryRun: false
  initContainers: {}
  \
                     evictions: {{ namespaces: [{}] }}
",
                    chart::IMAGE_VALUES,
                    steps(c.agent_ns),
                    c.ns
                ),
            );
            chart::helm(
                &c.tb,
                &[
                    "install",
                    release,
                    chart::path_str(&chart::chart()),
                    "--namespace",
                    ns,
                    "--create-namespace",
                    "-f",
                    chart::path_str(&values),
                    "--wait",
                    "--timeout",
                    chart::HELM_TIMEOUT,
                ],
            );
            chart::available(&c.tb, ns, &format!("{release}-initguard")).await;
            Running::Chart
        }
    }
}

/// Stop what [`start`] started, and take back what it granted.
fn stop(c: &Case, running: Running) {
    match running {
        Running::Host(guard) => {
            guard.stop();
            c.tb.kubectl(&["delete", "-f", &rbac_node_stage()]);
        }
        Running::Chart => {
            let (release, ns) = CHART_RELEASE;
            chart::uninstall(&c.tb, release, ns);
            c.tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
        }
    }
}

fn rbac_node_stage() -> String {
    repo()
        .join("deploy/rbac-node-stage.yaml")
        .display()
        .to_string()
}

/// An agent DaemonSet on the real node goes away; Deployments and Jobs started meanwhile
/// fail their step for good. Nothing is evicted while it is down; once it has been back for
/// `repairAfter` the opted-in pods of controllers that re-create them are evicted (through a
/// PodDisruptionBudget that allows no disruption: the server does not consult it for a
/// Pending pod), one at a time per controller, and their replacements initialize; the Job
/// with `OnFailure` completes. An unlabeled pod, a Job's `restartPolicy: Never` pod and a
/// pod that fails while the agent is up are never evicted. A native sidecar whose startup
/// probe never passes is reported at its deadline.
pub(crate) async fn outage(c: &Case, guard: Guard) {
    let tb = c.tb.clone();
    namespace(&tb, c.agent_ns).await;
    namespace(&tb, c.ns).await;
    tb.apply(&agent(c));
    agent_ready(c).await;
    let running = start(c, guard).await;

    // The agent goes away (a rollout, a crash: its pod is gone from the node).
    tb.kubectl(&[
        "patch",
        "daemonset",
        "-n",
        c.agent_ns,
        AGENT,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"nodeSelector":{"initguard.test/nowhere":"true"}}}}}"#,
    ]);
    eventually_every(
        POLL,
        "the agent's pod gone and its mark removed",
        || async {
            (c.tb
                .list("pods", c.agent_ns, Some(&format!("app={AGENT}")))
                .is_empty()
                && !agent_dir(c).join("up").exists())
            .then_some(())
        },
    )
    .await;

    // Workloads start while it is missing.
    tb.apply(&deployment(c, "web", 2, true, false));
    tb.apply(&json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": { "name": "web", "namespace": c.ns },
        "spec": { "minAvailable": 2, "selector": { "matchLabels": { "app": "web" } } },
    }));
    tb.apply(&deployment(c, "plain", 1, false, false));
    tb.apply(&job(c, "on-failure", "OnFailure", 20));
    tb.apply(&job(c, "never", "Never", 0));
    tb.apply(&sidecar_deployment(c));
    let stuck = |app: &'static str, n: usize| async move {
        eventually_every(
            POLL,
            format!("{n} pod(s) of {app} failing {STEP} with {EXIT}"),
            || async {
                let p = pods(c, app);
                (p.len() == n && p.iter().all(failed_with_exit)).then_some(p)
            },
        )
        .await
    };
    let web = stuck("web", 2).await;
    let plain = stuck("plain", 1).await;
    let on_failure = stuck("on-failure", 1).await;
    let never = stuck("never", 1).await;
    // The guard explains each restartable stuck pod while the agent is down...
    for pod in web.iter().chain(&plain).chain(&on_failure) {
        let message = explained(c, &name_of(pod)).await;
        assert!(
            message.contains(&format!("exited {EXIT}")) && message.contains("down"),
            "{}: {message}",
            name_of(pod)
        );
    }
    // The PodDisruptionBudget is in force (the disruption controller counted web's pods and
    // allows none) before anything could be evicted.
    eventually_every(
        POLL,
        "the PodDisruptionBudget observed, allowing none",
        || async {
            let pdb = tb.get("pdb", c.ns, "web")?;
            (pdb["status"]["observedGeneration"] == pdb["metadata"]["generation"]
                && pdb["status"]["expectedPods"] == json!(2)
                && pdb["status"]["disruptionsAllowed"] == json!(0))
            .then_some(())
        },
    )
    .await;
    // ...and evicts nothing.
    let early = evictions(c);
    assert!(
        early.is_empty(),
        "evicted while the agent was down: {early:#?}"
    );

    // The agent comes back.
    tb.kubectl(&[
        "patch",
        "daemonset",
        "-n",
        c.agent_ns,
        AGENT,
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]"#,
    ]);
    let back = agent_ready(c).await;
    // The guard has seen it back once it evicted something: a pod that fails from now on
    // started while the agent was up.
    eventually_every(POLL, "a first eviction", || async {
        evictions(c).iter().any(|a| a.code == 201).then_some(())
    })
    .await;
    tb.apply(&deployment(c, "late", 1, true, true));
    let late = stuck("late", 1).await;
    let message = explained(c, &name_of(&late[0])).await;
    assert!(
        message.contains("bound while its owner was already up"),
        "{message}"
    );

    // The sidecar runs but never starts: reported at its deadline, not before (the Event's
    // creation against the pod's binding, both on the server's clock).
    let sidecar = eventually_every(POLL, "the sidecar's pod running, not started", || async {
        pods(c, "sidecar").into_iter().find(|p| {
            p["status"]["initContainerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| {
                    s["name"] == SIDECAR_STEP
                        && !s["state"]["running"].is_null()
                        && s["started"] == json!(false)
                })
        })
    })
    .await;
    let sidecar_name = name_of(&sidecar);
    let message = explained(c, &sidecar_name).await;
    assert!(
        message.contains(&format!("waiting on init container {SIDECAR_STEP}"))
            && message.contains("past its deadline"),
        "{message}"
    );
    let bound = sidecar["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(timestamp)
        .unwrap_or_else(|| panic!("{sidecar_name} bound: {sidecar:#}"));
    let written = tb
        .scenario_audit()
        .into_iter()
        .find(|a| {
            a.user == c.user
                && a.resource == "events"
                && a.verb == "create"
                && a.request["reason"] == "InitContainerWaiting"
                && a.request["involvedObject"]["name"] == sidecar_name.as_str()
        })
        .unwrap_or_else(|| panic!("the guard's Event on {sidecar_name} in the audit log"));
    assert!(
        timestamp(&written.received)
            >= bound + jiff::SignedDuration::from_secs(SIDECAR_DEADLINE_SECONDS),
        "reported {sidecar_name} at {} before its deadline (bound {bound})",
        written.received
    );

    let originals: BTreeSet<String> = web.iter().map(uid_of).collect();
    let replaced = eventually_every(POLL, "web's pods replaced and initialized", || async {
        let now = pods(c, "web");
        (now.len() == 2
            && now.iter().all(|p| {
                !originals.contains(&uid_of(p))
                    && condition(p, "Initialized").as_deref() == Some("True")
            }))
        .then_some(now)
    })
    .await;
    eventually_every(POLL, "Job on-failure complete", || async {
        let job = tb.get("job", c.ns, "on-failure")?;
        (job["status"]["succeeded"].as_i64() == Some(1)).then_some(())
    })
    .await;
    for (kind, name) in [("ReplicaSet", None), ("Job", Some("on-failure"))] {
        let name = match name {
            Some(n) => n.to_owned(),
            None => web[0]["metadata"]["ownerReferences"][0]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        };
        let recorded = eventually_every(
            POLL,
            format!("InitContainerRecreated on {kind} {name}"),
            || async {
                let e = events(&tb, c.ns, "InitContainerRecreated", kind, &name);
                (!e.is_empty()).then_some(e)
            },
        )
        .await;
        assert_eq!(recorded[0]["type"], "Warning", "{recorded:#?}");
    }
    stop(c, running);

    // Exactly the opted-in pods of re-creating controllers, each once, each by its uid.
    let all = evictions(c);
    let evicted: Vec<&Audit> = all.iter().filter(|a| a.code == 201).collect();
    let want: BTreeSet<String> = web.iter().chain(&on_failure).map(name_of).collect();
    let names: BTreeSet<String> = evicted.iter().map(|a| a.name.clone()).collect();
    assert_eq!(names, want, "{all:#?}");
    assert_eq!(evicted.len(), want.len(), "each once: {evicted:#?}");
    let first_seen: Vec<&Value> = web.iter().chain(&on_failure).collect();
    for a in &all {
        let pod = first_seen.iter().find(|p| name_of(p) == a.name);
        assert_eq!(
            a.request["deleteOptions"]["preconditions"]["uid"].as_str(),
            pod.map(|p| uid_of(p)).as_deref(),
            "an Eviction without the pod's uid: {a:#?}"
        );
        // Never before the agent has been up for repairAfter (the server's Ready transition,
        // whole seconds, rounded down: never later than the truth).
        let at = timestamp(&a.received);
        assert!(
            at >= back + jiff::SignedDuration::from_secs(REPAIR_AFTER_SECONDS),
            "evicted {} at {at}, the agent Ready at {back}",
            a.name
        );
    }
    // Nothing else of the guard's hand on these pods: no other write, no eviction of the
    // unlabeled pod, the Never Job's pod or the pod that failed while the agent was up.
    let untouched: Vec<String> = plain
        .iter()
        .chain(&never)
        .chain(&late)
        .chain([&sidecar])
        .map(name_of)
        .collect();
    let writes: Vec<Audit> = tb
        .scenario_audit()
        .into_iter()
        .filter(|a| a.user == c.user && a.is_write() && a.resource == "pods" && a.namespace == c.ns)
        .collect();
    assert!(
        writes
            .iter()
            .all(|a| a.subresource == "eviction" && !untouched.contains(&a.name)),
        "{writes:#?}"
    );
    for pod in plain.iter().chain(&late) {
        assert!(
            tb.get("pod", c.ns, &name_of(pod))
                .is_some_and(|p| uid_of(&p) == uid_of(pod)),
            "{} is still there",
            name_of(pod)
        );
    }
    // The PodDisruptionBudget still allows no disruption (minAvailable = replicas).
    let pdb = tb.get("pdb", c.ns, "web").unwrap_or(Value::Null);
    assert_eq!(pdb["status"]["disruptionsAllowed"], json!(0), "{pdb:#}");

    // One at a time: web's second eviction came after the kubelet reported a replacement
    // created after the first one Initialized (its own status write, in the audit log).
    let audit = tb.scenario_audit();
    let mut web_evictions: Vec<&&Audit> = evicted
        .iter()
        .filter(|a| web.iter().any(|p| name_of(p) == a.name))
        .collect();
    web_evictions.sort_by(|a, b| a.received.cmp(&b.received));
    let [first, second] = web_evictions[..] else {
        panic!("two evictions of web: {web_evictions:#?}");
    };
    let replacements: Vec<String> = replaced.iter().map(name_of).collect();
    let initialized = audit
        .iter()
        .filter(|a| {
            a.user.starts_with("system:node:")
                && a.subresource == "status"
                && a.namespace == c.ns
                && replacements.contains(&a.name)
                && a.received > first.received
                && a.request["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Initialized" && c["status"] == "True")
                    })
        })
        .min_by(|a, b| a.received.cmp(&b.received));
    assert!(
        initialized.is_some_and(|a| a.received < second.received),
        "web's second eviction ({}) before a replacement initialized: {initialized:#?}",
        second.received
    );

    tb.kubectl(&["delete", "namespace", c.ns, "--wait=false"]);
    tb.kubectl(&["delete", "namespace", c.agent_ns, "--wait=false"]);
}
