//! Task supervision: what `/healthz` and `/readyz` say about the guard's tasks.
//!
//! A panic in any task is recorded ([`Failures`]), logged at error, fails `/healthz` and ends
//! `initguard run` with a non-zero exit. Without it the runtime would swallow the panic: an
//! owner watcher would freeze its owner's last state, a dead actuator would leave every bypass
//! queued forever, and the process would look healthy. What a task has not done yet (an
//! initial list) or cannot do (a missing API, a lock it may not write) is kept, with its
//! reason, in [`Readiness`].

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};

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

/// Why this replica is not ready, keyed by what each reason is about: initial work not done
/// yet ([`Readiness::pending`]) and conditions a task found ([`Readiness::set`]), such as a
/// needed API missing or the leader election failing. `/readyz` lists every reason (then 503)
/// and so does `/status`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<Mutex<BTreeMap<String, String>>>);

impl Readiness {
    /// Record (`Some`) or clear (`None`) the reason about `about`. Returns whether it changed.
    pub fn set(&self, about: &str, reason: Option<String>) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match reason {
            Some(r) => map.insert(about.to_owned(), r.clone()).as_ref() != Some(&r),
            None => map.remove(about).is_some(),
        }
    }

    /// Not ready about `about` until the returned handle is [`Init::done`]. A handle dropped
    /// without it (its task ended early) leaves the replica not ready.
    pub fn pending(&self, about: &str, reason: &str) -> Init {
        self.set(about, Some(reason.to_owned()));
        Init {
            readiness: self.clone(),
            about: about.to_owned(),
        }
    }

    /// Every reason as `ABOUT: REASON`, sorted (empty when ready).
    pub fn list(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(about, r)| format!("{about}: {r}"))
            .collect()
    }
}

/// Initial work a task owes before the replica is ready (see [`Readiness::pending`]).
#[derive(Debug)]
pub struct Init {
    readiness: Readiness,
    about: String,
}

impl Init {
    /// The work is done: its reason leaves the readiness list.
    pub fn done(self) {
        self.readiness.set(&self.about, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_set_listed_and_cleared() {
        let r = Readiness::default();
        assert!(r.list().is_empty());
        assert!(r.set("leader election", Some("403 Forbidden".into())));
        assert!(!r.set("leader election", Some("403 Forbidden".into())));
        assert!(r.set("leader election", Some("404 NotFound".into())));
        let pods = r.pending("pods", "initial list not complete");
        let lists = r.pending("jobs", "initial list not complete");
        assert_eq!(
            r.list(),
            [
                "jobs: initial list not complete",
                "leader election: 404 NotFound",
                "pods: initial list not complete"
            ]
        );
        pods.done();
        // Dropped without being done: still not ready about it.
        drop(lists);
        assert!(r.set("leader election", None));
        assert!(!r.set("leader election", None));
        assert_eq!(r.list(), ["jobs: initial list not complete"]);
    }

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
