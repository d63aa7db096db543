//! The state the control loop and the HTTP endpoints share.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::owners::{Owners, owner_target};
use crate::policy::OwnerState;
use crate::supervise::{Failures, Readiness};
use crate::tracker::Tracker;

/// State shared between the control loop and the HTTP endpoints.
pub struct Shared {
    pub config: Arc<Config>,
    pub metrics: Arc<Metrics>,
    pub owners: Owners,
    pub identity: String,
    pub(super) leader: watch::Receiver<bool>,
    /// Why this replica is not ready (initial lists, owners, the election), for `/readyz`.
    pub(super) readiness: Readiness,
    pub(super) tracker: Mutex<Tracker>,
    /// The node stage's pods, agents and budget (never locked together with `tracker`).
    pub(super) stage: Mutex<crate::node_stage::stage::StageTracker>,
    /// Told whenever the stage has pods to decide about again (the node stage's writer
    /// takes them from [`crate::node_stage::stage::StageTracker::take_dirty`]).
    pub(super) stage_changed: tokio::sync::Notify,
    pub(super) last_progress: Mutex<Instant>,
    pub(super) stall_after: Duration,
    /// While true the control loop waits before its next event, without blocking a thread
    /// (tests stall it through [`Shared::hold_control_loop`]).
    pub(super) loop_held: watch::Sender<bool>,
    /// Panics of the guard's tasks: any fails /healthz.
    pub failures: Failures,
    /// Serializes scrapes: each resets and refills the gauges before rendering.
    pub(crate) scrape: Mutex<()>,
    /// Listed webhooks as the webhook guard last saw them, by name.
    pub(crate) webhooks: Mutex<std::collections::BTreeMap<String, crate::webhook::WebhookStatus>>,
}

impl Shared {
    /// Each listed webhook (config order) as the webhook guard last saw it; one it has not
    /// looked at yet is `not found` with its owner's current state.
    pub fn webhook_statuses(&self) -> Vec<crate::webhook::WebhookStatus> {
        let seen = self
            .webhooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.config
            .webhooks
            .iter()
            .map(|w| {
                let name = w.id.to_string();
                seen.get(&name)
                    .cloned()
                    .unwrap_or_else(|| crate::webhook::status(w, None, self.owners.state(&name)))
            })
            .collect()
    }

    /// The waiting pods (held briefly: the control loop needs the same lock).
    pub fn tracker(&self) -> MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The node stage's bookkeeping (held briefly, and never with [`Shared::tracker`]).
    pub fn stage(&self) -> MutexGuard<'_, crate::node_stage::stage::StageTracker> {
        self.stage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this replica may write now.
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Whether no task has panicked and the control loop made progress within the stall
    /// window.
    pub fn healthy(&self) -> bool {
        self.failures.list().is_empty()
            && self
                .last_progress
                .lock()
                .map(|t| t.elapsed() < self.stall_after)
                .unwrap_or(false)
    }

    /// Why this replica is not ready (empty when ready): initial lists not complete, an
    /// owner whose API the server lacks, a failing election. Owners merely not observed yet
    /// are unknown, not missing (never `owner_down`); `/readyz` lists them in its 200 body.
    pub fn not_ready(&self) -> Vec<String> {
        self.readiness.list()
    }

    /// Stall the control loop until the returned hold is dropped: it stops before its next
    /// event and makes no progress meanwhile, as a loop stuck on a dependency would, while
    /// the runtime's threads stay free (a blocked worker thread can starve the timers of the
    /// very test that waits for the stall). Built with the simulator only: for tests.
    #[cfg(feature = "sim")]
    pub fn hold_control_loop(&self) -> LoopHold<'_> {
        self.loop_held.send_replace(true);
        LoopHold(&self.loop_held)
    }

    pub(super) fn progress(&self) {
        if let Ok(mut t) = self.last_progress.lock() {
            *t = Instant::now();
        }
    }
}

/// A stalled control loop ([`Shared::hold_control_loop`]): released when dropped.
#[cfg(feature = "sim")]
#[must_use = "the loop runs again as soon as the hold is dropped"]
pub struct LoopHold<'a>(&'a watch::Sender<bool>);

#[cfg(feature = "sim")]
impl Drop for LoopHold<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

/// The owner's state in words for Events and logs, e.g. "deployment kube-system/x down for 7s".
pub fn describe_owner(shared: &Shared, initializer: &str, now: SystemTime) -> String {
    let Some(spec) = shared
        .config
        .initializer(initializer)
        .and_then(|i| i.owner.as_ref())
    else {
        return "none configured".to_owned();
    };
    let what = format!("{} {}", spec.kind(), owner_target(spec));
    let for_ = |since: SystemTime| {
        humantime::format_duration(Duration::from_secs(
            now.duration_since(since).unwrap_or_default().as_secs(),
        ))
    };
    match shared.owners.state(initializer) {
        OwnerState::Unknown => format!("{what} unknown"),
        OwnerState::Up { since } => format!("{what} up for {}", for_(since)),
        OwnerState::Down { since } => format!("{what} down for {}", for_(since)),
    }
}
