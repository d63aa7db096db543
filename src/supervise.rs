//! Task supervision: a panic in any of the guard's tasks is recorded, logged at error, fails
//! `/healthz` and ends `initguard run` with a non-zero exit. Without it the runtime would swallow
//! the panic: an owner watcher would freeze its owner's last state, a dead actuator would leave
//! every bypass queued forever, and the process would look healthy.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::error;

/// The panics of a guard's tasks, shared by every task it spawns.
#[derive(Clone, Default)]
pub struct Failures {
    failed: Arc<Mutex<Vec<String>>>,
    any: CancellationToken,
}

impl Failures {
    /// Record that `task` panicked with `payload`.
    fn record(&self, task: &str, payload: &(dyn Any + Send)) {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text panic payload".to_owned());
        error!(task, panic = %message, "a guard task panicked; the guard is unhealthy and stops");
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("task {task} panicked: {message}"));
        self.any.cancel();
    }

    /// One line per task that panicked, in order (empty while all is well).
    pub fn list(&self) -> Vec<String> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Resolves once any task has panicked.
    pub async fn any(&self) {
        self.any.cancelled().await;
    }
}

/// Spawn `future` as the task `name`; a panic in it is recorded in `failures`.
pub fn spawn<F>(failures: &Failures, name: &'static str, future: F) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let failures = failures.clone();
    tokio::spawn(async move {
        // Unwind safety: after a panic the guard only reports and stops; no state of the
        // panicked task is used again.
        if let Err(payload) = AssertUnwindSafe(future).catch_unwind().await {
            failures.record(name, payload.as_ref());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_the_panic_of_a_task_and_wakes_waiters() {
        let failures = Failures::default();
        assert!(failures.list().is_empty());
        let quiet = spawn(&failures, "quiet", async {});
        quiet.await.unwrap();
        assert!(failures.list().is_empty());
        let waiter = tokio::spawn({
            let failures = failures.clone();
            async move { failures.any().await }
        });
        let task = spawn(&failures, "doomed", async { panic!("boom {}", 7) });
        // The panic is caught inside: the task itself ends normally.
        task.await.unwrap();
        waiter.await.unwrap();
        assert_eq!(failures.list(), ["task doomed panicked: boom 7"]);
        spawn(&failures, "static", async { panic!("plain") })
            .await
            .unwrap();
        assert_eq!(
            failures.list(),
            [
                "task doomed panicked: boom 7",
                "task static panicked: plain"
            ]
        );
    }
}
