//! The node stage's reader half (README "The node stage"): it feeds the core's
//! [`StageTracker`] from the pod watch the control loop already runs and from one watch per
//! DaemonSet a listed step names, counts what it reports, and tells the node stage's writer
//! ([`super::recreate`]) that there are pods to decide about again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::shared::Shared;
use crate::config::ObjectRef;
use crate::discovery::Discovery;
use crate::node_stage::daemonset_owners;
use crate::node_stage::stage::{Applied, Ended, OTHER};
use crate::pod::SlimPod;

/// One event of the watch of one listed DaemonSet (read in whichever group version the
/// server serves them: only its uid is read).
pub(super) type DaemonSetEvent = (ObjectRef, Result<Event<DynamicObject>, watcher::Error>);

/// What `/readyz` is told about while DaemonSets cannot be watched.
const READINESS: &str = "daemonsets";

/// One watch per DaemonSet listed steps name, merged, in the group version discovery gives
/// (apps/v1, apps/v1beta2 in 1.8, extensions/v1beta1 in 1.7); pending forever when none is
/// named. A server that serves none is said in the log and in `/readyz`, and the steps'
/// owners stay unknown (never down: nothing is recreated).
pub(super) fn watch_daemonsets(
    client: &kube::Client,
    discovery: Discovery,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) -> BoxStream<'static, DaemonSetEvent> {
    let listed: Vec<ObjectRef> = daemonset_owners(&shared.config)
        .into_iter()
        .map(|(ds, _)| ds.clone())
        .collect();
    if listed.is_empty() {
        return futures::stream::pending().boxed();
    }
    let client = client.clone();
    let resource = async move {
        let surface = discovery
            .surface_until(&cancel, |e| {
                let why = format!(
                    "cannot read discovery for the node stage's DaemonSets ({}); their owners \
                     stay unknown until it is read",
                    crate::owners::error_chain(e)
                );
                warn!("{why}; retrying");
                shared.metrics.watch_restarted("daemonsets");
                shared.readiness.set(READINESS, Some(why));
            })
            .await?;
        let found = surface.daemonsets();
        let reason = found.is_none().then(|| {
            format!(
                "no DaemonSet API served ({}): the node stage's daemonset owners stay unknown",
                kube_common::daemonset_group_versions()
            )
        });
        if let Some(reason) = &reason {
            error!("{reason}");
        }
        shared.readiness.set(READINESS, reason);
        found
    };
    futures::stream::once(resource)
        .flat_map(move |found| match found {
            Some(resource) => {
                let streams = listed.clone().into_iter().map(|ds| {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), &ds.namespace, &resource);
                    let config =
                        watcher::Config::default().fields(&format!("metadata.name={}", ds.name));
                    watcher::watcher(api, config)
                        .default_backoff()
                        .map(move |e| (ds.clone(), e))
                        .boxed()
                });
                futures::stream::select_all(streams).boxed()
            }
            None => futures::stream::pending().boxed(),
        })
        .boxed()
}

/// The DaemonSets being relisted, each with whether the relist found it.
#[derive(Default)]
pub(super) struct DaemonSetRelists(HashMap<ObjectRef, bool>);

/// Fold one DaemonSet watch event into the agent models.
pub(super) fn on_daemonset_event(
    shared: &Shared,
    relists: &mut DaemonSetRelists,
    (ds, event): DaemonSetEvent,
) {
    let now = SystemTime::now();
    let event = match event {
        Ok(event) => event,
        Err(e) => {
            shared.metrics.watch_restarted("daemonsets");
            warn!(daemonset = %format!("{}/{}", ds.namespace, ds.name), error = %e,
                "DaemonSet watch failed; retrying with backoff");
            return;
        }
    };
    let mut stage = shared.stage();
    let Some(agents) = stage.agents_mut(&ds) else {
        return;
    };
    shared.stage_changed.notify_one();
    match event {
        Event::Init => {
            relists.0.insert(ds, false);
        }
        Event::InitApply(object) | Event::Apply(object) => {
            if let Some(uid) = object.metadata.uid.as_deref() {
                agents.daemonset_applied(uid, now);
                if let Some(found) = relists.0.get_mut(&ds) {
                    *found = true;
                }
            }
        }
        Event::InitDone => {
            // Listed and not found: gone (or never there: then it stays unknown).
            if relists.0.remove(&ds) == Some(false) {
                agents.daemonset_gone(now);
            }
        }
        Event::Delete(_) => agents.daemonset_gone(now),
    }
}

/// Whether any step is listed: without one the stage keeps nothing, not even counts.
fn active(shared: &Shared) -> bool {
    !shared.config.init_containers.is_empty()
}

/// A pod as listed or watched.
pub(super) fn applied(shared: &Shared, pod: &SlimPod, now: SystemTime) {
    if !active(shared) {
        return;
    }
    let outcome = shared.stage().apply(pod, now);
    report(shared, &pod.key(), outcome);
    shared.stage_changed.notify_one();
}

/// A pod the watch reports deleted.
pub(super) fn deleted(shared: &Shared, pod: &SlimPod, now: SystemTime) {
    if !active(shared) {
        return;
    }
    let ended = shared.stage().delete(pod, now);
    if let Some(ended) = ended {
        observe(shared, &ended);
    }
    shared.stage_changed.notify_one();
}

/// A pod relist begins.
pub(super) fn relist_started(shared: &Shared) {
    if !active(shared) {
        return;
    }
    shared.stage().relist_started();
}

/// The pod relist is complete: waits of pods it did not list end.
pub(super) fn relist_done(shared: &Shared, now: SystemTime) {
    if !active(shared) {
        return;
    }
    let gone = shared.stage().relist_done(now);
    for ended in &gone {
        observe(shared, ended);
    }
    shared.stage_changed.notify_one();
}

fn observe(shared: &Shared, ended: &Ended) {
    shared
        .metrics
        .init_wait_duration_seconds
        .with_label_values(&[&*ended.step, ended.end.as_str()])
        .observe(ended.waited.as_secs_f64());
}

/// Count what one pod's update says (the writer decides and explains).
fn report(shared: &Shared, key: &str, applied: Applied) {
    if let Some(ended) = &applied.ended {
        observe(shared, ended);
    }
    if let Some(failure) = &applied.newly_failed {
        shared
            .metrics
            .init_failures_total
            .with_label_values(&[&*failure.step, &failure.code.to_string()])
            .inc();
        if failure.for_good {
            info!(pod = %key, container = %failure.step, exit_code = failure.code,
                "init container failed for good (the pod does not restart it): reported");
        }
    }
}

/// Owners of other kinds for init steps are not watched yet: unknown, never down.
pub(super) use crate::node_stage::cluster_owners_unknown as cluster_unknown;

/// Set the node stage's gauges from the tracker at `now`.
pub(super) fn refresh_gauges(shared: &Shared, now: SystemTime) {
    let m = &shared.metrics;
    m.init_waiting_pods.reset();
    m.init_oldest_wait_seconds.reset();
    m.owner_down_nodes.reset();
    if !active(shared) {
        return;
    }
    let selected = shared.tracker().selected_namespaces();
    let selected: HashSet<String> = selected.into_iter().collect();
    let counts = shared
        .stage()
        .counts(&|ns| selected.contains(ns), &cluster_unknown, now);
    for (container, c) in counts {
        m.init_waiting_pods
            .with_label_values(&[container.as_str(), "true"])
            .set(i64::try_from(c.opted_in).unwrap_or(i64::MAX));
        m.init_waiting_pods
            .with_label_values(&[container.as_str(), "false"])
            .set(i64::try_from(c.not_opted_in).unwrap_or(i64::MAX));
        if container != OTHER {
            m.init_oldest_wait_seconds
                .with_label_values(&[container.as_str()])
                .set(c.oldest.map_or(0.0, |d| d.as_secs_f64()));
            m.owner_down_nodes
                .with_label_values(&[container.as_str()])
                .set(i64::try_from(c.owner_down_nodes).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use serde_json::json;
    use tokio::sync::watch;
    use tokio::time::Instant;

    use crate::config::Config;
    use crate::node_stage::stage::StageTracker;
    use crate::policy::OwnerState;
    use crate::tracker::Tracker;

    fn shared(yaml: &str) -> Shared {
        let config = Arc::new(
            Config::from_yaml_with(yaml, "test.yaml", &crate::config::Elsewhere)
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let metrics = Arc::new(crate::metrics::Metrics::new(&config).expect("metrics"));
        let readiness = crate::supervise::Readiness::default();
        Shared {
            config: config.clone(),
            metrics: metrics.clone(),
            owners: crate::owners::Owners::new(&config, metrics, readiness.clone()),
            identity: "test".into(),
            leader: watch::channel(true).1,
            readiness,
            tracker: Mutex::new(Tracker::new(config.clone())),
            stage: Mutex::new(StageTracker::new(config)),
            last_progress: Mutex::new(Instant::now()),
            stall_after: Duration::from_secs(60),
            loop_held: watch::channel(false).0,
            failures: crate::supervise::Failures::default(),
            scrape: Mutex::new(()),
            webhooks: Mutex::new(Default::default()),
            stage_changed: Default::default(),
        }
    }

    const CONFIG: &str = "
initContainers:
  - name: istio-validation
    owner: { daemonset: istio-system/istio-cni-node }
    failedExitCodes: [126]
";

    fn pod(uid: &str, exit: Option<i32>) -> SlimPod {
        let state = match exit {
            Some(_) => json!({"waiting": {"reason": "CrashLoopBackOff"}}),
            None => json!({"running": {}}),
        };
        let last = exit.map_or(json!({}), |code| json!({"terminated": {"exitCode": code}}));
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "apps", "uid": uid,
                "creationTimestamp": "2026-12-01T10:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "rs", "uid": "rs", "controller": true}]},
            "spec": {"nodeName": "n1", "initContainers": [{"name": "istio-validation"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True",
                 "lastTransitionTime": "2026-12-01T10:00:00Z"},
                {"type": "Initialized", "status": "False"}],
                "initContainerStatuses": [{"name": "istio-validation", "state": state,
                    "lastState": last, "restartCount": 1}]}
        }))
        .expect("a pod")
    }

    fn rendered(shared: &Shared) -> String {
        refresh_gauges(shared, SystemTime::now());
        shared.metrics.render().expect("renders")
    }

    fn has(text: &str, line: &str) -> bool {
        text.lines().any(|l| l == line)
    }

    #[test]
    fn the_pod_watch_feeds_the_metrics_of_the_node_stage() {
        let s = shared(CONFIG);
        let now = SystemTime::now();
        let text = rendered(&s);
        assert!(has(
            &text,
            r#"initguard_init_failures_total{container="istio-validation",exit_code="126"} 0"#
        ));
        assert!(has(
            &text,
            r#"initguard_watch_restarts_total{resource="daemonsets"} 0"#
        ));
        applied(&s, &pod("a", None), now);
        applied(&s, &pod("a", Some(126)), now);
        // Seen again: still once.
        applied(&s, &pod("a", Some(126)), now);
        applied(&s, &pod("b", None), now);
        let text = rendered(&s);
        assert!(
            has(
                &text,
                r#"initguard_init_failures_total{container="istio-validation",exit_code="126"} 1"#
            ),
            "{text}"
        );
        assert!(
            has(
                &text,
                r#"initguard_init_waiting_pods{container="istio-validation",opted_in="false"} 2"#
            ),
            "{text}"
        );
        assert!(
            has(
                &text,
                r#"initguard_init_waiting_pods{container="other",opted_in="false"} 0"#
            ),
            "{text}"
        );
        // The DaemonSet never seen: unknown, not down.
        assert!(
            has(
                &text,
                r#"initguard_owner_down_nodes{container="istio-validation"} 0"#
            ),
            "{text}"
        );
        let ds = ObjectRef {
            namespace: "istio-system".into(),
            name: "istio-cni-node".into(),
        };
        let mut relists = DaemonSetRelists::default();
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "extensions/v1beta1", "kind": "DaemonSet",
            "metadata": {"name": "istio-cni-node", "namespace": "istio-system", "uid": "ds"}
        }))
        .expect("a DaemonSet");
        on_daemonset_event(&s, &mut relists, (ds.clone(), Ok(Event::Init)));
        on_daemonset_event(&s, &mut relists, (ds.clone(), Ok(Event::InitApply(object))));
        on_daemonset_event(&s, &mut relists, (ds.clone(), Ok(Event::InitDone)));
        let text = rendered(&s);
        assert!(
            has(
                &text,
                r#"initguard_owner_down_nodes{container="istio-validation"} 1"#
            ),
            "{text}"
        );
        deleted(&s, &pod("a", Some(126)), now + Duration::from_secs(3));
        let text = rendered(&s);
        assert!(
            has(
                &text,
                r#"initguard_init_wait_duration_seconds_count{container="istio-validation",outcome="deleted"} 1"#
            ),
            "{text}"
        );
        assert!(
            has(
                &text,
                r#"initguard_init_waiting_pods{container="istio-validation",opted_in="false"} 1"#
            ),
            "{text}"
        );
        // A relist of the DaemonSet that does not find it: deleted meanwhile, down.
        on_daemonset_event(&s, &mut relists, (ds.clone(), Ok(Event::Init)));
        on_daemonset_event(&s, &mut relists, (ds.clone(), Ok(Event::InitDone)));
        let (state, _) = {
            let stage = s.stage();
            let step = s.config.init_containers[0].clone();
            stage.owner_state(&step, "n1", &cluster_unknown)
        };
        assert!(matches!(state, OwnerState::Down { .. }), "{state:?}");
    }

    #[test]
    fn without_init_containers_no_series_and_no_daemonset_watch() {
        let s = shared("{}");
        applied(&s, &pod("a", Some(126)), SystemTime::now());
        assert_eq!(s.stage().other_count(), 0, "not even counted");
        let text = rendered(&s);
        assert!(!text.contains("initguard_init_waiting_pods{"), "{text}");
        assert!(!text.contains(r#"resource="daemonsets""#), "{text}");
    }
}
