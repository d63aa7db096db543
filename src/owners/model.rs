//! Owner models fed by kube-runtime: watcher events become [`Observation`]s, and Leases and
//! Deployments of whichever group version the server serves are decoded as the current one.

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use tracing::warn;

pub use initguard_core::owners::*;

/// A watcher event as the core's models take it.
pub(super) fn observation<K>(event: Event<K>) -> Observation<K> {
    match event {
        Event::Init => Observation::RelistStart,
        Event::InitApply(object) => Observation::Listed(object),
        Event::InitDone => Observation::RelistDone,
        Event::Apply(object) => Observation::Applied(object),
        Event::Delete(object) => Observation::Deleted(object),
    }
}

/// A Deployment of whichever group version the server serves, judged as apps/v1: the field
/// read (`status.availableReplicas`) is the same in apps/v1beta1, apps/v1beta2 and
/// extensions/v1beta1.
#[derive(Default)]
pub(super) struct ServedDeploymentModel(DeploymentModel);

/// `object` decoded as `K`, whichever group version it was served in (None when it does not
/// decode). The older versions the guard reads (apps/v1beta1-2 and extensions/v1beta1
/// Deployments, coordination.k8s.io/v1beta1 Leases) hold the fields it judges under the same
/// names, so only the type header is rewritten.
pub(super) fn as_current<K>(object: DynamicObject) -> Option<K>
where
    K: k8s_openapi::Resource + serde::de::DeserializeOwned,
{
    let mut value = serde_json::to_value(object).ok()?;
    value["apiVersion"] = serde_json::json!(K::API_VERSION);
    value["kind"] = serde_json::json!(K::KIND);
    serde_json::from_value(value).ok()
}

/// `object` decoded as an apps/v1 Deployment (None when it is not one).
pub(super) fn as_apps_v1(object: DynamicObject) -> Option<Deployment> {
    as_current(object)
}

/// A [`LeaseModel`] fed with Leases of whichever group version the server serves.
#[derive(Default)]
pub(super) struct ServedLeaseModel(LeaseModel);

impl Model<DynamicObject> for ServedLeaseModel {
    fn apply(&mut self, object: DynamicObject, now: Instant) {
        let name = object.metadata.name.clone().unwrap_or_default();
        match as_current::<Lease>(object) {
            Some(lease) => self.0.apply(lease, now),
            None => {
                warn!(lease = %name, "cannot decode the owner lease; ignoring this version of it")
            }
        }
    }

    fn delete(&mut self, object: DynamicObject) {
        self.0.delete(as_current(object).unwrap_or_default());
    }

    fn inherit(&mut self, previous: &Self) {
        self.0.inherit(&previous.0);
    }

    fn evaluate(&self, now: Instant) -> Evaluation {
        self.0.evaluate(now)
    }
}

impl Model<DynamicObject> for ServedDeploymentModel {
    fn apply(&mut self, object: DynamicObject, now: Instant) {
        let name = object.metadata.name.clone().unwrap_or_default();
        match as_apps_v1(object) {
            Some(d) => self.0.apply(d, now),
            None => {
                warn!(deployment = %name, "cannot decode the owner deployment; ignoring this version of it")
            }
        }
    }

    fn delete(&mut self, object: DynamicObject) {
        self.0.delete(as_apps_v1(object).unwrap_or_default());
    }

    fn evaluate(&self, now: Instant) -> Evaluation {
        self.0.evaluate(now)
    }
}
