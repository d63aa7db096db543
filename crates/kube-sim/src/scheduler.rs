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
pub(crate) fn schedule_pod(
    store: &mut Store,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
    now: &str,
    pod_ip: &str,
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

fn condition(kind: &str, now: &str) -> Value {
    json!({ "type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": now })
}
