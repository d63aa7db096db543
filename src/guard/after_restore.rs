//! `afterRestore` of a mutating webhook (README "After restore"): once the guard has restored
//! its bypass, find the pods admitted without the webhook ([`crate::webhook::after`]),
//! annotate each and record a Warning Event; with `evict`, evict them through the Eviction API,
//! one at a time per controller, each only once the previous one's replacement is Ready (or
//! `maxWait` passed). Every write passes the fence. A sweep cut short by a change of leader is
//! not resumed: the annotations show what was found, and an evicted pod is gone, so nothing is
//! evicted twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::WebhookConfig;
use crate::guard::evict::{self, Evicted, EvictionVersion, Target};
use crate::guard::fence::Fence;
use crate::guard::write::{self, Refusal, Subject};
use crate::metrics::Metrics;
use crate::webhook::LetThrough;
use crate::webhook::after::{
    ADMITTED_WITHOUT_ANNOTATION, Controller, PROPAGATION_MARGIN, PodFacts, Treatment, Window,
    admitted_without, annotation_value, ready_replicas, treatment, within_cap,
};

/// Evictions per controller uid, for `maxEvictionsPerHour`; kept across sweeps.
pub(super) type EvictionLog = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

/// One sweep after one restore.
pub(super) struct Sweep {
    pub client: kube::Client,
    pub listed: WebhookConfig,
    /// The entry as restored.
    pub entry: Value,
    /// Who the bypass let past the webhook.
    pub through: LetThrough,
    /// When the bypass was made, as recorded.
    pub since: String,
    pub window: Window,
    pub fence: Fence,
    pub identity: String,
    pub metrics: Arc<Metrics>,
    pub evictions: EvictionLog,
    /// The Eviction group/version, read once.
    pub eviction: EvictionVersion,
}

impl Sweep {
    /// Report every pod found, then evict what may be evicted; stops when `cancel` fires or
    /// this replica stops leading.
    pub(super) async fn run(self, cancel: CancellationToken) {
        let webhook = self.listed.id.to_string();
        // A create the API server admitted through the bypass just before it applied the
        // restore may not exist yet: list once the margin has passed.
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(PROPAGATION_MARGIN) => {}
        }
        let (pods, namespaces) = match self.read().await {
            Ok(read) => read,
            Err(e) => {
                warn!(%webhook, error = %e,
                    "cannot list pods and namespaces; pods admitted while the webhook was \
                     bypassed are not reported");
                return;
            }
        };
        let found = admitted_without(&pods, self.window, &self.entry, &self.through, &namespaces);
        info!(%webhook, pods = found.len(), "pods admitted while the webhook was bypassed");
        let mut to_evict: BTreeMap<Controller, Vec<PodFacts>> = BTreeMap::new();
        for pod in found {
            let ready = pod
                .controller
                .as_ref()
                .map_or(0, |c| ready_replicas(&pods, &c.uid, None));
            let treatment = treatment(
                self.listed.after_restore,
                pod,
                ready,
                self.listed.evict_singletons,
                &self.entry,
            );
            if !self.report(pod, &treatment, &cancel).await {
                return;
            }
            if let (Treatment::Evict, Some(c)) = (&treatment, &pod.controller) {
                to_evict.entry(c.clone()).or_default().push(pod.clone());
            }
        }
        // Controllers in parallel; within one, one pod at a time.
        let groups = to_evict
            .into_iter()
            .map(|(controller, pods)| self.evict_one_by_one(controller, pods, &cancel));
        futures::future::join_all(groups).await;
    }

    /// Every pod, and every namespace's labels.
    async fn read(
        &self,
    ) -> Result<(Vec<PodFacts>, BTreeMap<String, BTreeMap<String, String>>), kube::Error> {
        let namespaces = Api::<Namespace>::all(self.client.clone())
            .list_metadata(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
            .collect();
        let pods = Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(facts)
            .collect();
        Ok((pods, namespaces))
    }

    /// Annotate `pod` (unless it already carries the annotation: it is add-only) and record a
    /// Warning Event. False when this replica no longer leads.
    async fn report(
        &self,
        pod: &PodFacts,
        treatment: &Treatment,
        cancel: &CancellationToken,
    ) -> bool {
        let webhook = self.listed.id.to_string();
        if pod.admitted_without.is_none() {
            let Ok(permit) = self.fence.admit(cancel).await else {
                return false;
            };
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
            // The uid makes it this pod and no namesake created since.
            let patch = json!({ "metadata": { "uid": pod.uid, "annotations": {
                ADMITTED_WITHOUT_ANNOTATION: annotation_value(&webhook, &self.since) } } });
            let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
            let sent = api.patch(&pod.name, &params, &patch);
            match permit.send("a pod annotation PATCH", sent).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) if matches!(write::classify(&e), Refusal::Gone) => return true,
                Ok(Err(e)) => {
                    warn!(%webhook, pod = %pod.name, namespace = %pod.namespace, error = %e,
                        "could not annotate a pod admitted without the webhook");
                }
                Err(e) => warn!(%webhook, pod = %pod.name, error = %e, "annotating timed out"),
            }
        }
        self.metrics
            .webhook_admitted_without_total
            .with_label_values(&[&webhook])
            .inc();
        let next = match treatment {
            Treatment::Report(why) => format!("reported only: {why}"),
            Treatment::Evict => {
                "it will be evicted, one pod of its controller at a time".to_owned()
            }
        };
        self.event(
            pod,
            "AdmittedWithoutWebhook",
            "Report",
            format!(
                "created while initguard bypassed mutating webhook {webhook} (since {}): it may \
                 lack what that webhook adds; {next}",
                self.since
            ),
            cancel,
        )
        .await;
        true
    }

    /// Evict `pods` of `controller` in creation order, each once the previous one's
    /// replacement is Ready or `maxWait` passed.
    async fn evict_one_by_one(
        &self,
        controller: Controller,
        mut pods: Vec<PodFacts>,
        cancel: &CancellationToken,
    ) {
        let webhook = self.listed.id.to_string();
        pods.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
        for pod in pods {
            let count = |outcome: &str| {
                self.metrics
                    .webhook_evictions_total
                    .with_label_values(&[&webhook, outcome])
                    .inc();
            };
            let capped = {
                let log = self
                    .evictions
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let done = log
                    .get(&controller.uid)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                !within_cap(done, Instant::now(), self.listed.max_evictions_per_hour)
            };
            if capped {
                count("skipped");
                self.event(
                    &pod,
                    "EvictionSkipped",
                    "Evict",
                    format!(
                        "not evicted: {} {} reached maxEvictionsPerHour ({})",
                        controller.kind, controller.name, self.listed.max_evictions_per_hour
                    ),
                    cancel,
                )
                .await;
                continue;
            }
            // Judge again on what the server holds now.
            let current = match self.namespace_pods(&pod.namespace).await {
                Ok(p) => p,
                Err(e) => {
                    warn!(%webhook, pod = %pod.name, error = %e, "cannot list pods; not evicting");
                    count("skipped");
                    continue;
                }
            };
            let Some(now) = current.iter().find(|p| p.uid == pod.uid && !p.deleting) else {
                count("skipped");
                continue;
            };
            let ready_before = ready_replicas(&current, &controller.uid, None);
            if let Treatment::Report(why) = treatment(
                self.listed.after_restore,
                now,
                ready_before,
                self.listed.evict_singletons,
                &self.entry,
            ) {
                count("skipped");
                self.event(
                    &pod,
                    "EvictionSkipped",
                    "Evict",
                    format!("not evicted: {why}"),
                    cancel,
                )
                .await;
                continue;
            }
            match self.evict(&pod, cancel).await {
                Evicted::Yes => {
                    count("evicted");
                    self.evictions
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(controller.uid.clone())
                        .or_default()
                        .push(Instant::now());
                    info!(%webhook, pod = %pod.name, namespace = %pod.namespace,
                        "evicted a pod admitted without the webhook");
                    self.event(&pod, "EvictedAfterRestore", "Evict", format!(
                        "evicted so that {} {} re-creates it through mutating webhook {webhook}",
                        controller.kind, controller.name), cancel).await;
                    self.await_replacement(&pod, &controller, ready_before, cancel)
                        .await;
                }
                Evicted::Gone => count("skipped"),
                Evicted::Refused(why) => {
                    count("refused");
                    warn!(%webhook, pod = %pod.name, namespace = %pod.namespace, reason = %why,
                        "eviction refused; reported only");
                    self.event(
                        &pod,
                        "EvictionRefused",
                        "Evict",
                        format!("not evicted: {why}; it still lacks what the webhook adds"),
                        cancel,
                    )
                    .await;
                }
                Evicted::NotLeading => return,
            }
        }
    }

    /// One eviction through the shared writer ([`evict::evict`]), retried while a
    /// PodDisruptionBudget refuses it (429), for at most `maxWait`.
    async fn evict(&self, pod: &PodFacts, cancel: &CancellationToken) -> Evicted {
        let version = match self.eviction.get(&self.client).await {
            Ok(v) => v,
            Err(e) => {
                return Evicted::Refused(format!("cannot read /api/v1 for pods/eviction: {e}"));
            }
        };
        let target = Target {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        };
        evict::evict(
            &self.client,
            &self.fence,
            cancel,
            version,
            &target,
            self.listed.max_wait,
        )
        .await
    }

    /// Wait, by watching the namespace's pods, until `controller` has `ready_before` ready pods
    /// again without `evicted`, or `maxWait` passed.
    async fn await_replacement(
        &self,
        evicted: &PodFacts,
        controller: &Controller,
        ready_before: usize,
        cancel: &CancellationToken,
    ) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &evicted.namespace);
        let mut events = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(watcher(
            api,
            watcher::Config::default()
        )));
        let mut seen: HashMap<String, PodFacts> = HashMap::new();
        let mut listing: HashMap<String, PodFacts> = HashMap::new();
        let replaced = async {
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Init) => listing.clear(),
                    Ok(watcher::Event::InitApply(p)) => {
                        if let Some(f) = facts(&p) {
                            listing.insert(f.uid.clone(), f);
                        }
                    }
                    Ok(watcher::Event::InitDone) => seen = std::mem::take(&mut listing),
                    Ok(watcher::Event::Apply(p)) => {
                        if let Some(f) = facts(&p) {
                            seen.insert(f.uid.clone(), f);
                        }
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        if let Some(f) = facts(&p) {
                            seen.remove(&f.uid);
                        }
                    }
                    Err(e) => warn!(error = %e, "pod watch failed while waiting for a replacement"),
                }
                let pods: Vec<PodFacts> = seen.values().cloned().collect();
                if ready_replicas(&pods, &controller.uid, Some(&evicted.uid)) >= ready_before {
                    return;
                }
            }
        };
        tokio::select! {
            () = cancel.cancelled() => {}
            r = tokio::time::timeout(self.listed.max_wait, replaced) => if r.is_err() {
                warn!(webhook = %self.listed.id, controller = %controller.name,
                    max_wait = %humantime::format_duration(self.listed.max_wait),
                    "no Ready replacement within maxWait; going on");
            },
        }
    }

    async fn namespace_pods(&self, namespace: &str) -> Result<Vec<PodFacts>, kube::Error> {
        Ok(Api::<Pod>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(facts)
            .collect())
    }

    async fn event(
        &self,
        pod: &PodFacts,
        reason: &str,
        action: &str,
        note: String,
        cancel: &CancellationToken,
    ) {
        let subject = Subject {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            namespace: Some(pod.namespace.clone()),
            name: pod.name.clone(),
            uid: Some(pod.uid.clone()),
        };
        write::warn_about(
            &self.client,
            &self.fence,
            &self.metrics,
            cancel,
            &self.identity,
            &subject,
            reason,
            action,
            note,
        )
        .await;
    }
}

/// What the sweep reads of a pod.
fn facts(pod: &Pod) -> Option<PodFacts> {
    let meta = &pod.metadata;
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| Controller {
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        });
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Some(PodFacts {
        namespace: meta.namespace.clone()?,
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        labels: meta.labels.clone().unwrap_or_default(),
        created: meta.creation_timestamp.as_ref().map(|t| {
            std::time::SystemTime::UNIX_EPOCH
                + Duration::from_nanos(u64::try_from(t.0.as_nanosecond()).unwrap_or_default())
        }),
        controller,
        ready,
        deleting: meta.deletion_timestamp.is_some(),
        admitted_without: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ADMITTED_WITHOUT_ANNOTATION).cloned()),
    })
}
