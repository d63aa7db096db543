//! Jobs as the guard sees them: only which CronJob controls each Job, so that the pods of a
//! CronJob's Jobs form one pile (README "What it guarantees": never early). A real CronJob creates a
//! Job per run and each Job its pods, so grouping by a pod's direct controller would see a
//! pile of one-pod Jobs as many piles of one.

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::Deserialize;
use tracing::info;

use crate::policy::ControllerRef;

/// The parts of a Job the guard needs: its metadata. Decodes a whole Job as well as a
/// `PartialObjectMetadata`, so it reads whatever representation the server sends.
// batch/v1 Jobs are served by every version the guard supports (1.7+): "batch/v1 Job" is GA
// since Kubernetes 1.2 (kubernetes.io/docs/concepts/workloads/controllers/job).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, kube::Resource)]
#[resource(inherit = k8s_openapi::api::batch::v1::Job)]
pub struct SlimJob {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

impl SlimJob {
    /// The CronJob controlling this Job, if its controller is one.
    pub fn cron_job(&self) -> Option<ControllerRef> {
        cron_job_of(&self.metadata)
    }
}

/// The CronJob controlling the Job with this metadata, if its controller is one.
pub fn cron_job_of(metadata: &ObjectMeta) -> Option<ControllerRef> {
    metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .filter(|o| o.kind == "CronJob")
        .map(|o| ControllerRef {
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        })
}

/// Events of the Jobs watch: each Job's metadata.
pub type JobEvents = BoxStream<'static, Result<Event<ObjectMeta>, watcher::Error>>;

/// Watch all Jobs' metadata, with the watcher's default backoff. `metadata_only` asks for
/// `meta.k8s.io/v1` `PartialObjectMetadata`; servers of Kubernetes 1.14 and before send whole
/// objects instead (client-go `metadata` package docs), which decode as well. Otherwise whole
/// Jobs are asked for and only their metadata is kept.
pub fn watch_jobs(client: kube::Client, metadata_only: bool) -> JobEvents {
    let config = watcher::Config::default();
    if metadata_only {
        let api: Api<PartialObjectMeta<SlimJob>> = Api::all(client);
        watcher::watcher(api, config)
            .default_backoff()
            .map_ok(|e| map_event(e, |j| j.metadata))
            .boxed()
    } else {
        let api: Api<SlimJob> = Api::all(client);
        watcher::watcher(api, config)
            .default_backoff()
            .map_ok(|e| map_event(e, |j| j.metadata))
            .boxed()
    }
}

/// Whether the server refused the metadata-only representation (406 Not Acceptable): a
/// server before 1.15 that does not fall back to whole objects.
pub fn is_not_acceptable(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 406,
        watcher::Error::WatchError(s) => s.code == 406,
        _ => false,
    }
}

fn map_event<A, B>(event: Event<A>, f: impl Fn(A) -> B) -> Event<B> {
    match event {
        Event::Apply(a) => Event::Apply(f(a)),
        Event::Delete(a) => Event::Delete(f(a)),
        Event::Init => Event::Init,
        Event::InitApply(a) => Event::InitApply(f(a)),
        Event::InitDone => Event::InitDone,
    }
}

/// Group versions that serve CronJobs: `batch/v1` from Kubernetes 1.21 (kubernetes/kubernetes
/// PR 98965 "Promote CronJobs to batch/v1"), `batch/v1beta1` from 1.8 until its removal in
/// 1.25 (KEP kubernetes/enhancements#19: beta 1.8, stable API 1.21), `batch/v2alpha1` on 1.7
/// when enabled.
const CRON_JOB_VERSIONS: [&str; 3] = ["batch/v1", "batch/v1beta1", "batch/v2alpha1"];

/// Whether discovery lists a CronJob resource; logs once at info when it does not, since
/// then the pods of Jobs are grouped by their Job.
pub async fn check_cron_job_api(client: kube::Client) -> bool {
    for version in CRON_JOB_VERSIONS {
        if let Ok(list) = client.list_api_group_resources(version).await
            && list.resources.iter().any(|r| r.name == "cronjobs")
        {
            return true;
        }
    }
    info!("the server serves no CronJob API; pods of Jobs are grouped by their Job");
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_cron_job_from_whole_objects_and_metadata_only() {
        let owner = json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
            "uid": "cj", "controller": true}]);
        let whole: SlimJob =
            serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "nightly-1", "uid": "j", "ownerReferences": owner},
            "spec": {"template": {}}, "status": {"active": 1}}))
            .unwrap();
        let meta: SlimJob = serde_json::from_value(json!({"apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": {"name": "nightly-1", "uid": "j", "ownerReferences": owner}}))
        .unwrap();
        assert_eq!(whole, meta);
        assert_eq!(whole.cron_job().map(|c| c.uid), Some("cj".into()));
        let plain: SlimJob = serde_json::from_value(json!({"metadata": {"uid": "j"}})).unwrap();
        assert_eq!(plain.cron_job(), None);
    }

    #[test]
    fn only_a_406_switches_to_whole_objects() {
        let status = |code: u16| -> kube::Error {
            let s: kube::core::Status =
                serde_json::from_value(json!({"code": code, "reason": "x", "message": "m"}))
                    .unwrap();
            kube::Error::Api(Box::new(s))
        };
        assert!(is_not_acceptable(&watcher::Error::InitialListFailed(
            status(406)
        )));
        assert!(!is_not_acceptable(&watcher::Error::InitialListFailed(
            status(403)
        )));
        assert!(!is_not_acceptable(&watcher::Error::NoResourceVersion));
    }
}
