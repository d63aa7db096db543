//! The guard's one lifecycle: how its tasks start and, above all, how they stop.
//!
//! Tasks are of three sorts. *Tasks* (watches, the control loop, the HTTP servers) stop when
//! the shutdown begins. *Writers* (the pod actuator, the webhook guard, anything that writes
//! through the [`Fence`]) finish what they have in flight first. The *elector* stops last:
//! it hands the lease back only once every writer has drained and every write was answered;
//! otherwise (a write without answer, or writers still busy at the shutdown deadline) the
//! process leaves without releasing it, and the lease expires on its own. Releasing it with a
//! write in flight would let the next leader write beside that write.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::fence::{Drained, Fence};
use super::leader::Departure;
use crate::supervise::{self, Failures};

/// How long a graceful shutdown may take in all, below the 30 s of Kubernetes' default
/// `terminationGracePeriodSeconds`, so the kubelet never kills a guard that is still draining.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(20);

/// Every task of one guard, and the order in which they stop.
pub(super) struct Lifecycle {
    failures: Failures,
    /// Stops tasks and tells writers to drain.
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    writers: Vec<(&'static str, JoinHandle<()>)>,
    elector: Option<Elector>,
}

/// The running election and how to end it.
struct Elector {
    task: JoinHandle<()>,
    stop: oneshot::Sender<Departure>,
    /// The writes it fences.
    fence: Fence,
}

impl Lifecycle {
    pub(super) fn new(failures: Failures) -> Lifecycle {
        Lifecycle {
            failures,
            cancel: CancellationToken::new(),
            tasks: Vec::new(),
            writers: Vec::new(),
            elector: None,
        }
    }

    /// A token that fires when the shutdown begins.
    pub(super) fn token(&self) -> CancellationToken {
        self.cancel.child_token()
    }

    /// Run `future` until the shutdown begins (it should end on [`Lifecycle::token`]).
    pub(super) fn spawn(
        &mut self,
        name: &'static str,
        future: impl Future<Output = ()> + Send + 'static,
    ) {
        self.tasks
            .push(supervise::spawn(&self.failures, name, future));
    }

    /// Run the writer `future`: on [`Lifecycle::token`] it finishes its writes in flight and
    /// returns; the lease is released only after it has.
    pub(super) fn spawn_writer(
        &mut self,
        name: &'static str,
        future: impl Future<Output = ()> + Send + 'static,
    ) {
        self.writers
            .push((name, supervise::spawn(&self.failures, name, future)));
    }

    /// Run the election `future`, which ends when told how through `stop`, and fences writes
    /// with `fence`.
    pub(super) fn spawn_elector(
        &mut self,
        future: impl Future<Output = ()> + Send + 'static,
        stop: oneshot::Sender<Departure>,
        fence: Fence,
    ) {
        let task = supervise::spawn(&self.failures, "leader election", future);
        self.elector = Some(Elector { task, stop, fence });
    }

    /// Stop everything within `deadline`: tasks stop, writers drain, then the lease is
    /// released if every write was answered, else left to expire.
    pub(super) async fn shutdown(self, deadline: Duration) {
        let deadline = Instant::now() + deadline;
        self.cancel.cancel();
        let mut busy = Vec::new();
        for (name, mut writer) in self.writers {
            if tokio::time::timeout_at(deadline, &mut writer)
                .await
                .is_err()
            {
                // Its writes in flight are dropped unanswered: the fence counts them unsettled.
                warn!(
                    writer = name,
                    "still draining at the shutdown deadline; stopped"
                );
                writer.abort();
                busy.push(writer);
            }
        }
        let stopped = busy.len();
        for writer in busy {
            let _ = writer.await;
        }
        if let Some(Elector { task, stop, fence }) = self.elector {
            let departure = match fence.drain(deadline).await {
                Drained::Settled if stopped == 0 => Departure::Release,
                Drained::Settled => {
                    error!(
                        writers = stopped,
                        "writers stopped at the shutdown deadline; leaving the lease to expire"
                    );
                    Departure::LeaveToExpire
                }
                Drained::Unsettled(writes) => {
                    error!(
                        ?writes,
                        "writes may still be committed; leaving the lease to expire"
                    );
                    Departure::LeaveToExpire
                }
            };
            let _ = stop.send(departure);
            let _ = task.await;
        }
        for task in self.tasks {
            let _ = task.await;
        }
        info!("stopped");
    }

    /// Stop at once, as on SIGKILL: nothing drains, the lease is not released.
    pub(super) fn kill(self) {
        for (_, writer) in &self.writers {
            writer.abort();
        }
        if let Some(elector) = &self.elector {
            elector.task.abort();
        }
        for task in &self.tasks {
            task.abort();
        }
        // Anything spawned by the tasks themselves (owner watchers) stops on the token.
        self.cancel.cancel();
    }
}
