//! The simulated scheduler and kubelet: a pod that became schedulable (no scheduling gate,
//! initialized) is bound to the one node, then marked running and ready. The server's state
//! (`shared.rs`) calls it `schedule_delay` after the commit that made the pod schedulable.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::kinds;
use crate::ops::{meta_str, new_uid};
use crate::resources::Storage;
use crate::store::{Change, Store};

/// Node every pod is scheduled to.
pub(crate) const SIM_NODE: &str = "sim-node-1";

/// Apply a pod's schedulable transition: the first commit binds it to the node (scheduler),
/// the second marks it running and ready (kubelet). Returns the changes made.
///
/// A pod with an init container `failing` names instead stays Pending and not initialized,
/// that step in `Init:CrashLoopBackOff` with the listed exit code as its last state, as when
/// the node agent the step needs was missing as the pod's sandbox was created (the kubelet
/// re-runs the step in the same sandbox: it keeps failing whatever happens later). Init
/// containers before it succeeded; none after it ran.
#[allow(clippy::too_many_arguments)]
pub(crate) fn schedule_pod(
    store: &mut Store,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
    now: &str,
    pod_ip: &str,
    failing: &std::collections::BTreeMap<String, i32>,
) -> Vec<Arc<Change>> {
    let Some(pod) = store.get(Storage::Pods, namespace, name).cloned() else {
        return Vec::new();
    };
    if meta_str(&pod, "uid") != uid || !kinds::wants_scheduling(&pod) {
        return Vec::new();
    }
    let mut changes = Vec::new();
    let mut bound = (*pod).clone();
    if bound["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        bound["spec"]["nodeName"] = json!(node);
    }
    let mut conditions: Vec<Value> = bound["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions.push(condition("PodScheduled", now));
    bound["status"]["conditions"] = json!(conditions);
    changes.push(store.put(Storage::Pods, bound.clone(), "system:kube-scheduler"));
    if let Some(stuck) = stuck_status(&bound, failing, now, pod_ip) {
        let mut stuck_pod = bound;
        stuck_pod["status"] = stuck;
        changes.push(store.put(Storage::Pods, stuck_pod, &format!("system:node:{node}")));
        return changes;
    }
    let mut running = bound;
    let statuses: Vec<Value> = running["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    json!({
                        "name": c["name"],
                        "image": c["image"],
                        "imageID": "",
                        "containerID": format!("containerd://{}", new_uid().replace('-', "")),
                        "ready": true,
                        "started": true,
                        "restartCount": 0,
                        "state": { "running": { "startedAt": now } },
                        "lastState": {},
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    running["status"] = json!({
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers", now),
            condition("Initialized", now),
            condition("Ready", now),
            condition("ContainersReady", now),
            condition("PodScheduled", now),
        ],
        "hostIP": "10.0.0.1",
        "hostIPs": [{ "ip": "10.0.0.1" }],
        "podIP": pod_ip,
        "podIPs": [{ "ip": pod_ip }],
        "startTime": now,
        "containerStatuses": statuses,
        "qosClass": "BestEffort",
    });
    changes.push(store.put(Storage::Pods, running, &format!("system:node:{node}")));
    changes
}

/// The status of a pod stuck on the first of its init containers that `failing` names.
fn stuck_status(
    pod: &Value,
    failing: &std::collections::BTreeMap<String, i32>,
    now: &str,
    pod_ip: &str,
) -> Option<Value> {
    let inits = pod["spec"]["initContainers"].as_array()?;
    let at = inits
        .iter()
        .position(|c| c["name"].as_str().is_some_and(|n| failing.contains_key(n)))?;
    let statuses: Vec<Value> = inits
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let base = json!({"name": c["name"], "image": c["image"], "imageID": "",
                "ready": false, "started": false});
            let mut s = base;
            if i < at {
                s["restartCount"] = json!(0);
                s["state"] = json!({"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": now, "finishedAt": now}});
                s["lastState"] = json!({});
            } else if i == at {
                let code = c["name"].as_str().and_then(|n| failing.get(n)).copied();
                s["restartCount"] = json!(3);
                s["state"] = json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": "back-off restarting failed container"}});
                s["lastState"] = json!({"terminated": {"exitCode": code, "reason": "Error",
                    "startedAt": now, "finishedAt": now}});
            } else {
                s["restartCount"] = json!(0);
                s["state"] = json!({"waiting": {"reason": "PodInitializing"}});
                s["lastState"] = json!({});
            }
            s
        })
        .collect();
    let not = |kind: &str| {
        json!({"type": kind, "status": "False", "lastProbeTime": null,
            "lastTransitionTime": now, "reason": "ContainersNotInitialized"})
    };
    Some(json!({
        "phase": "Pending",
        "conditions": [
            condition("PodReadyToStartContainers", now),
            not("Initialized"),
            not("Ready"),
            not("ContainersReady"),
            condition("PodScheduled", now),
        ],
        "hostIP": "10.0.0.1",
        "podIP": pod_ip,
        "startTime": now,
        "initContainerStatuses": statuses,
        "qosClass": "BestEffort",
    }))
}

fn condition(kind: &str, now: &str) -> Value {
    json!({ "type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": now })
}
