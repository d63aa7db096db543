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
