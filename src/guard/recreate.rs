//! The node stage's writer (README "The node stage"): decides again about each pod the
//! [`StageTracker`](crate::node_stage::stage::StageTracker) marks, and at each instant a
//! decision names; explains each stuck pod once (a log line and a Normal
//! `InitContainerWaiting` Event with a deterministic name); and, on the leader, recreates
//! what the rule says through the shared Eviction writer ([`super::evict`]), one eviction per
//! controller in flight, each recorded with Warning `InitContainerRecreated` Events on the pod
//! and its controller. The budget is rebuilt from those Events whenever this replica starts
//! leading, and nothing is evicted before it is.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue;
use tracing::{info, warn};

use super::evict::{self, Evicted, EvictionVersion, Target};
use super::fence::Fence;
use super::node_stage::cluster_unknown;
use super::shared::Shared;
use super::write::{self, Subject};
use crate::config::EventsMode;
use crate::node_stage::{StepPlan, explain, listed};
use crate::policy::ControllerRef;
use crate::tracker::PodKey;

/// The reason of the Normal Event each stuck pod and step gets once.
pub const WAITING_REASON: &str = "InitContainerWaiting";
/// The reason of the Warning Events of each recreation (on the pod and its controller), and
/// the records the budget is rebuilt from.
pub const RECREATED_REASON: &str = "InitContainerRecreated";

/// How long after a refused eviction the pod is decided about again.
const REFUSED_RETRY: Duration = Duration::from_secs(60);
/// How long an eviction refused with 429 is retried before it counts as refused.
const EVICTION_PATIENCE: Duration = Duration::from_secs(60);
/// Pause between two failed reads of the Events the budget is rebuilt from.
const REBUILD_RETRY: Duration = Duration::from_secs(5);

/// The node stage's writer; see the module's documentation.
pub struct Recreator {
    pub shared: Arc<Shared>,
    pub client: kube::Client,
    pub fence: Fence,
    pub eviction: EvictionVersion,
}

/// One eviction's end, as its task reports it.
struct Done {
    key: PodKey,
    target: Target,
    controller: ControllerRef,
    step: String,
    outcome: Evicted,
}

/// What finishes in the writer's task set.
enum Finished {
    Evicted(Done),
    /// The budget's records were read: each controller's uid and the record's server time.
    Rebuilt {
        generation: u64,
        records: Vec<(String, SystemTime)>,
    },
    Other,
}

/// The writer's memory of what it did, all keyed so that it stays bounded by waiting pods.
#[derive(Default)]
struct Memory {
    /// Controllers with an eviction in flight, with the pods held back behind it (decided
    /// again once it ends).
    in_flight: HashMap<String, HashSet<PodKey>>,
    /// Per waiting pod: its uid and step once it was explained.
    explained: HashMap<PodKey, (String, String)>,
    /// Per waiting pod: its uid once a dry run said it would be recreated.
    dry_run_done: HashMap<PodKey, String>,
    /// Whether the budget was rebuilt since this replica started leading.
    budget_ready: bool,
    /// Counts leadership gains: a rebuild of an earlier one is ignored.
    generation: u64,
    wakes: HashMap<PodKey, delay_queue::Key>,
}

impl Recreator {
    /// Run until `cancel` fires; then wait for the evictions in flight (each stops at the
    /// fence). Without listed steps it only waits.
    pub async fn run(self, cancel: CancellationToken) {
        if self.shared.config.init_containers.is_empty() {
            cancel.cancelled().await;
            return;
        }
        let mut memory = Memory::default();
        let mut queue: DelayQueue<PodKey> = DelayQueue::new();
        let mut tasks: JoinSet<Finished> = JoinSet::new();
        let mut leadership = self.fence.leadership();
        if *leadership.borrow_and_update() {
            self.start_rebuild(&mut memory, &mut tasks, &cancel);
        }
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = self.shared.stage_changed.notified() => {
                    let keys = self.shared.stage().take_dirty();
                    for key in keys {
                        self.consider(&key, &mut memory, &mut queue, &mut tasks, &cancel);
                    }
                }
                Some(expired) = queue.next(), if !queue.is_empty() => {
                    let key = expired.into_inner();
                    memory.wakes.remove(&key);
                    self.consider(&key, &mut memory, &mut queue, &mut tasks, &cancel);
                }
                Some(finished) = tasks.join_next(), if !tasks.is_empty() => match finished {
                    Ok(Finished::Evicted(done)) => {
                        self.settle(done, &mut memory, &mut queue, &mut tasks, &cancel);
                    }
                    Ok(Finished::Rebuilt { generation, records }) => {
                        if generation == memory.generation && self.shared.is_leader() {
                            info!(records = records.len(),
                                "node stage: recreation budget rebuilt from the guard's Events");
                            self.shared.stage().rebuild_budget(records, SystemTime::now());
                            memory.budget_ready = true;
                            self.shared.stage_changed.notify_one();
                        }
                    }
                    Ok(Finished::Other) => {}
                    Err(e) => warn!(error = %e, "a node stage write task failed"),
                },
                changed = leadership.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    memory.budget_ready = false;
                    if *leadership.borrow_and_update() {
                        self.start_rebuild(&mut memory, &mut tasks, &cancel);
                    }
                }
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Read the guard's `InitContainerRecreated` Events of the last hour (on controllers),
    /// retrying until it succeeds, this replica stops leading or `cancel` fires.
    fn start_rebuild(
        &self,
        memory: &mut Memory,
        tasks: &mut JoinSet<Finished>,
        cancel: &CancellationToken,
    ) {
        memory.generation += 1;
        let generation = memory.generation;
        let (client, cancel, leader) =
            (self.client.clone(), cancel.clone(), self.fence.leadership());
        tasks.spawn(async move {
            let api: Api<Event> = Api::all(client);
            let params = ListParams::default().fields(&format!("reason={RECREATED_REASON}"));
            loop {
                if !*leader.borrow() {
                    return Finished::Other;
                }
                let read = tokio::select! {
                    () = cancel.cancelled() => return Finished::Other,
                    read = api.list(&params) => read,
                };
                match read {
                    Ok(list) => {
                        let records = list.items.iter().filter_map(budget_record).collect();
                        return Finished::Rebuilt {
                            generation,
                            records,
                        };
                    }
                    Err(e) => warn!(error = %e,
                        "cannot list the guard's InitContainerRecreated Events; nothing is \
                         recreated until they are read"),
                }
                tokio::select! {
                    () = cancel.cancelled() => return Finished::Other,
                    () = tokio::time::sleep(REBUILD_RETRY) => {}
                }
            }
        });
    }

    /// Decide about one pod now: wake it again when the decision says, explain it once, and
    /// recreate it when the rule says so and this replica may.
    fn consider(
        &self,
        key: &str,
        memory: &mut Memory,
        queue: &mut DelayQueue<PodKey>,
        tasks: &mut JoinSet<Finished>,
        cancel: &CancellationToken,
    ) {
        let now = SystemTime::now();
        let shared = &self.shared;
        let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
        // One lock at a time: the tracker's, then the stage's.
        let selected = shared.tracker().namespace_selected(namespace);
        let decided = {
            let stage = shared.stage();
            stage.get(key).cloned().and_then(|pod| {
                let outcome = stage.decide(key, selected, &cluster_unknown, now)?;
                let step = listed(&shared.config, &pod.step)?.clone();
                let (owner, _) = stage.owner_state(&step, &pod.node, &cluster_unknown);
                Some((pod, step, owner, outcome))
            })
        };
        let Some((pod, step, owner, outcome)) = decided else {
            memory.explained.remove(key);
            memory.dry_run_done.remove(key);
            if let Some(k) = memory.wakes.remove(key) {
                queue.remove(&k);
            }
            return;
        };
        self.wake_at(key, outcome.next_wake, now, memory, queue);
        if outcome.trigger.is_none() {
            return;
        }
        let words = explain(&step, &pod.node, owner, &outcome);
        let explained = (pod.uid.clone(), step.name.clone());
        if memory.explained.get(key) != Some(&explained) {
            memory.explained.insert(key.to_owned(), explained);
            warn!(pod = %key, "{words}");
            if shared.is_leader()
                && self.events_on()
                && shared.config.waiting_events
                && !shared.config.dry_run
            {
                let event = self.waiting_event(&pod, &step.name, words.clone(), now);
                self.publish(tasks, cancel, event);
            }
        }
        if outcome.plan != StepPlan::Recreate {
            return;
        }
        let Some(controller) = pod.controller.clone() else {
            return;
        };
        if !shared.is_leader() {
            // Decided again when this replica starts leading (the budget's rebuild).
            return;
        }
        if let Some(held) = memory.in_flight.get_mut(&controller.uid) {
            held.insert(key.to_owned());
            return;
        }
        if shared.config.dry_run {
            if memory.dry_run_done.get(key) != Some(&pod.uid) {
                memory.dry_run_done.insert(key.to_owned(), pod.uid.clone());
                info!(pod = %key, container = %step.name, "dry-run: would recreate (evict) the pod");
                self.count(&step.name, "evicted");
            }
            return;
        }
        if !memory.budget_ready {
            // Decided again once the budget is read.
            return;
        }
        memory
            .in_flight
            .insert(controller.uid.clone(), HashSet::new());
        shared.stage().evicting(key);
        let target = Target {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        };
        let (client, fence, version, cancel) = (
            self.client.clone(),
            self.fence.clone(),
            self.eviction.clone(),
            cancel.clone(),
        );
        let (key, step_name) = (key.to_owned(), step.name.clone());
        info!(pod = %key, container = %step_name, waited = ?outcome.waited, "recreating: evicting the pod");
        tasks.spawn(async move {
            let outcome = match version.get(&client).await {
                Ok(v) => {
                    evict::evict(&client, &fence, &cancel, v, &target, EVICTION_PATIENCE).await
                }
                Err(e) => Evicted::Refused(format!("cannot read /api/v1 for pods/eviction: {e}")),
            };
            Finished::Evicted(Done {
                key,
                target,
                controller,
                step: step_name,
                outcome,
            })
        });
    }

    /// One eviction ended: counted, recorded in the budget and in Events, or decided again.
    fn settle(
        &self,
        done: Done,
        memory: &mut Memory,
        queue: &mut DelayQueue<PodKey>,
        tasks: &mut JoinSet<Finished>,
        cancel: &CancellationToken,
    ) {
        let held = memory
            .in_flight
            .remove(&done.controller.uid)
            .unwrap_or_default();
        let now = SystemTime::now();
        if done.outcome != Evicted::Yes {
            self.shared.stage().eviction_failed(&done.key);
        }
        match &done.outcome {
            Evicted::Yes => {
                self.count(&done.step, "evicted");
                self.shared.stage().recreated(&done.key, now);
                info!(pod = %done.key, container = %done.step, controller = %done.controller.name,
                    "recreated: evicted the pod");
                if self.events_on() {
                    for event in recreated_events(&done, &self.shared.identity, now) {
                        self.publish(tasks, cancel, event);
                    }
                }
            }
            Evicted::Gone => self.count(&done.step, "skipped"),
            Evicted::Refused(why) => {
                self.count(&done.step, "refused");
                warn!(pod = %done.key, container = %done.step, reason = %why,
                    "eviction refused; decided again later");
                self.wake_at(&done.key, Some(now + REFUSED_RETRY), now, memory, queue);
            }
            Evicted::NotLeading => {}
        }
        // Another pod of the controller may be next.
        for key in held {
            self.consider(&key, memory, queue, tasks, cancel);
        }
    }

    fn wake_at(
        &self,
        key: &str,
        at: Option<SystemTime>,
        now: SystemTime,
        memory: &mut Memory,
        queue: &mut DelayQueue<PodKey>,
    ) {
        if let Some(k) = memory.wakes.remove(key) {
            queue.remove(&k);
        }
        if let Some(at) = at {
            // Wall-clock instants, slept on the monotonic clock: a step of the wall clock
            // only moves the wake, and every wake decides afresh (never early by its clock).
            let after = at.duration_since(now).unwrap_or(Duration::ZERO);
            let k = queue.insert(key.to_owned(), after + Duration::from_millis(1));
            memory.wakes.insert(key.to_owned(), k);
        }
    }

    fn count(&self, step: &str, outcome: &str) {
        self.shared
            .metrics
            .init_recreations_total
            .with_label_values(&[step, outcome])
            .inc();
    }

    fn events_on(&self) -> bool {
        self.shared.config.events != EventsMode::Off
    }

    fn waiting_event(
        &self,
        pod: &crate::node_stage::stage::StagePod,
        step: &str,
        words: String,
        now: SystemTime,
    ) -> Event {
        let subject = Subject {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some(pod.namespace.clone()),
            name: pod.name.clone(),
            uid: Some(pod.uid.clone()),
        };
        let mut event = write::event(
            &subject,
            WAITING_REASON,
            "Wait",
            words,
            &self.shared.identity,
            timestamp(now),
        );
        event.type_ = Some("Normal".into());
        event.metadata.name = Some(event_name(&pod.name, "init-waiting", &[&pod.uid, step]));
        event
    }

    fn publish(&self, tasks: &mut JoinSet<Finished>, cancel: &CancellationToken, event: Event) {
        let (client, fence, metrics, cancel) = (
            self.client.clone(),
            self.fence.clone(),
            self.shared.metrics.clone(),
            cancel.clone(),
        );
        tasks.spawn(async move {
            write::publish(&client, &fence, &metrics, &cancel, event).await;
            Finished::Other
        });
    }
}

fn timestamp(at: SystemTime) -> jiff::Timestamp {
    jiff::Timestamp::try_from(at).unwrap_or_else(|_| jiff::Timestamp::now())
}

/// A deterministic Event name (see [`super::waiting::deterministic_name`]), so a restarted
/// guard or a new leader gets 409 instead of writing a second one.
pub fn event_name(object: &str, what: &str, parts: &[&str]) -> String {
    super::waiting::deterministic_name(object, what, parts)
}

/// The `apiVersion` of a re-creating controller of `kind`, for its Event's reference.
fn controller_api_version(kind: &str) -> &'static str {
    match kind {
        "ReplicationController" => "v1",
        "Job" => "batch/v1",
        _ => "apps/v1",
    }
}

/// The Warning Events of one recreation: on the pod, and on its controller (the records the
/// budget is rebuilt from: the controller's uid, on the API server's clock).
fn recreated_events(done: &Done, identity: &str, now: SystemTime) -> [Event; 2] {
    let note = format!(
        "recreated (evicted) pod {} stuck on init container {}, so that {} {} re-creates it",
        done.target.name, done.step, done.controller.kind, done.controller.name
    );
    let on_pod = Subject {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: Some(done.target.namespace.clone()),
        name: done.target.name.clone(),
        uid: Some(done.target.uid.clone()),
    };
    let on_controller = Subject {
        api_version: controller_api_version(&done.controller.kind).into(),
        kind: done.controller.kind.clone(),
        namespace: Some(done.target.namespace.clone()),
        name: done.controller.name.clone(),
        uid: Some(done.controller.uid.clone()),
    };
    let at = timestamp(now);
    let mut pod_event = write::event(
        &on_pod,
        RECREATED_REASON,
        "Evict",
        note.clone(),
        identity,
        at,
    );
    pod_event.metadata.name = Some(event_name(
        &done.target.name,
        "init-recreated",
        &[&done.target.uid, &done.step],
    ));
    let mut controller_event = write::event(
        &on_controller,
        RECREATED_REASON,
        "Evict",
        note,
        identity,
        at,
    );
    controller_event.metadata.name = Some(event_name(
        &done.controller.name,
        "init-recreated",
        &[&done.controller.uid, &done.target.uid],
    ));
    [pod_event, controller_event]
}

/// One budget record from an Event: the guard's own `InitContainerRecreated` on a controller,
/// with the controller's uid and the Event's creation on the API server's clock.
fn budget_record(event: &Event) -> Option<(String, SystemTime)> {
    let ours = event.reporting_component.as_deref() == Some("initguard")
        || event.source.as_ref().and_then(|s| s.component.as_deref()) == Some("initguard");
    let about = &event.involved_object;
    if !ours
        || event.reason.as_deref() != Some(RECREATED_REASON)
        || about.kind.as_deref() == Some("Pod")
    {
        return None;
    }
    let uid = about.uid.clone().filter(|u| !u.is_empty())?;
    let created = event.metadata.creation_timestamp.as_ref()?;
    Some((uid, SystemTime::from(created.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn done() -> Done {
        Done {
            key: "apps/web-1".into(),
            target: Target {
                namespace: "apps".into(),
                name: "web-1".into(),
                uid: "pod-uid".into(),
            },
            controller: ControllerRef {
                kind: "ReplicaSet".into(),
                name: "web".into(),
                uid: "rs-uid".into(),
            },
            step: "istio-validation".into(),
            outcome: Evicted::Yes,
        }
    }

    #[test]
    fn event_names_are_deterministic_and_valid() {
        let a = event_name("web-1", "init-waiting", &["u1", "istio-validation"]);
        assert_eq!(
            a,
            event_name("web-1", "init-waiting", &["u1", "istio-validation"])
        );
        assert_ne!(
            a,
            event_name("web-1", "init-waiting", &["u2", "istio-validation"])
        );
        assert_ne!(a, event_name("web-1", "init-waiting", &["u1", "other"]));
        assert!(a.starts_with("web-1.initguard-init-waiting."), "{a}");
        let long = event_name(&format!("{}-", "p".repeat(300)), "init-recreated", &["u"]);
        assert!(long.len() <= 253, "{}", long.len());
        assert!(!long.contains("-.initguard"), "{long}");
    }

    #[test]
    fn a_recreation_is_recorded_on_the_pod_and_on_its_controller_and_read_back() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let [pod, controller] = recreated_events(&done(), "guard-0", now);
        assert_eq!(pod.involved_object.kind.as_deref(), Some("Pod"));
        assert_eq!(pod.involved_object.uid.as_deref(), Some("pod-uid"));
        assert_eq!(pod.type_.as_deref(), Some("Warning"));
        assert_eq!(
            controller.involved_object.kind.as_deref(),
            Some("ReplicaSet")
        );
        assert_eq!(
            controller.involved_object.api_version.as_deref(),
            Some("apps/v1")
        );
        assert_eq!(controller.involved_object.uid.as_deref(), Some("rs-uid"));
        assert_eq!(controller.reason.as_deref(), Some(RECREATED_REASON));
        // Each name is the same whoever writes it.
        let [again, _] = recreated_events(&done(), "guard-1", now + Duration::from_secs(5));
        assert_eq!(pod.metadata.name, again.metadata.name);
        // As the server stores them: the controller's is a budget record, the pod's is not.
        let stored = |mut e: Event| {
            e.metadata.creation_timestamp = Some(Time(timestamp(now)));
            e
        };
        assert_eq!(budget_record(&stored(pod)), None);
        let controller = stored(controller);
        assert_eq!(budget_record(&controller), Some(("rs-uid".into(), now)));
        // Someone else's Event of that reason is not.
        let mut forged = controller.clone();
        forged.reporting_component = Some("someone".into());
        forged.source = None;
        assert_eq!(budget_record(&forged), None);
        let mut other = controller;
        other.reason = Some(WAITING_REASON.into());
        assert_eq!(budget_record(&other), None);
    }
}
