//! The policy's view of the world outside one pod: owner states and pile starts, read from the
//! owners and the tracker. Used by the control loop and by the status report.

use std::time::SystemTime;

use crate::owners::Owners;
use crate::policy::{ControllerRef, Environment, OwnerState};
use crate::tracker::Tracker;

/// The policy's view of the world outside a pod.
pub struct Env<'a> {
    pub tracker: &'a Tracker,
    pub owners: &'a Owners,
    /// The instant being decided, which pile starts are expressed against.
    pub now: SystemTime,
}

impl Environment for Env<'_> {
    fn owner_state(&self, initializer: &str) -> OwnerState {
        self.owners.state(initializer)
    }
    fn owner_observed(&self, initializer: &str) -> bool {
        self.owners.observed(initializer)
    }
    fn pile_start(
        &self,
        controller: &ControllerRef,
        initializer: &str,
        k: u32,
    ) -> Option<SystemTime> {
        self.tracker
            .pile_start(&controller.uid, initializer, k, self.now)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::pod::SlimPod;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    /// 2026-11-21T10:00:00Z plus `s` seconds.
    fn created(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_255_200 + s)
    }

    fn gated(name: &str, job: &str, at: u64) -> SlimPod {
        let created_at = jiff::Timestamp::from_second(1_795_255_200 + at as i64)
            .expect("a timestamp")
            .to_string();
        serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": "ns", "uid": format!("u-{name}"),
                "resourceVersion": "1", "creationTimestamp": created_at,
                "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": job,
                                      "uid": job, "controller": true }] },
            "spec": { "schedulingGates": [{ "name": "g" }] },
        }))
        .expect("a pod")
    }

    /// The policy's pile start is the tracker's k-th start of that controller's pile for that
    /// gate, at the instant decided: each of k, the controller and the gate matters.
    #[test]
    fn pile_start_is_the_kth_start_of_that_controllers_pile() {
        let config = Arc::new(
            crate::config::from_yaml_str("pileup: { threshold: 2, minWait: 10s }\n", "t")
                .expect("a config"),
        );
        let mut tracker = Tracker::new(config.clone());
        // A gate's wait starts at the pod's creation (no server clock sample: as created).
        tracker.apply(&gated("b", "j", 20), t(1));
        tracker.apply(&gated("a", "j", 10), t(2));
        tracker.apply(&gated("c", "other", 30), t(3));
        let metrics = Arc::new(crate::metrics::Metrics::new(&config).expect("metrics"));
        let owners = Owners::new(&config, metrics, crate::supervise::Readiness::default());
        let env = Env {
            tracker: &tracker,
            owners: &owners,
            now: t(100),
        };
        let job = |uid: &str| ControllerRef {
            kind: "Job".to_owned(),
            name: uid.to_owned(),
            uid: uid.to_owned(),
        };
        assert_eq!(env.pile_start(&job("j"), "g", 1), Some(created(10)));
        assert_eq!(env.pile_start(&job("j"), "g", 2), Some(created(20)));
        assert_eq!(env.pile_start(&job("j"), "g", 3), None);
        assert_eq!(env.pile_start(&job("other"), "g", 1), Some(created(30)));
        assert_eq!(env.pile_start(&job("j"), "h", 1), None);
        assert_eq!(env.owner_state("g"), OwnerState::Unknown);
    }
}
