//! When this replica may write, and what it still has in flight.
//!
//! A client-side timeout cannot cancel a write the server already took: every write has a
//! timeout below `leaseDuration − renewDeadline`, and none starts once the time since the last
//! successful renew plus that timeout would pass `renewDeadline` (after which the replica
//! steps down, and another may take over once `leaseDuration` has passed since it saw that
//! renew).
//!
//! Every write holds a [`Permit`] while it is in flight, so shutdown can wait for all of them
//! ([`Fence::drain`]) before the lease is released. A write that got no answer (timed out, or
//! dropped half-way by an abort) may still be committed by the server at any later time:
//! releasing the lease would then let the next leader write beside it, so the fence remembers
//! it and shutdown leaves the lease to expire instead.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

use crate::config::LeaderElection;
use crate::guard::leader::Timing;

/// The gate every write of this replica passes (cheap to clone: clones share the writes in
/// flight).
#[derive(Debug, Clone)]
pub struct Fence {
    /// `true` while this replica leads (always with leader election off).
    leader: watch::Receiver<bool>,
    /// Start of the last successful lease renew (None: not leading); None when leader
    /// election is off, where nothing is fenced.
    renewed: Option<watch::Receiver<Option<Instant>>>,
    renew_deadline: Duration,
    /// Client-side timeout of every write.
    write_timeout: Duration,
    writes: Arc<Writes>,
}

/// The writes in flight, shared by every clone of one fence.
#[derive(Debug, Default)]
struct Writes {
    /// One token per permit; closed by [`Fence::drain`], after which no permit is given.
    tracker: TaskTracker,
    /// Closed along with `tracker`: wakes writers waiting in [`Fence::admit`].
    closed: CancellationToken,
    /// Writes that got no answer and may still be committed, in words.
    unsettled: Mutex<Vec<String>>,
}

/// How the writes of a fence ended at shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drained {
    /// Every write was answered: releasing the lease is safe.
    Settled,
    /// Some writes may still be committed (no answer, or still in flight at the deadline):
    /// the lease must be left to expire.
    Unsettled(Vec<String>),
}

/// A write may not start: this replica does not lead (or no longer), or is shutting down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not leading, or shutting down")]
pub struct NotAdmitted;

/// A write sent under a [`Permit`] got no answer within the fence's write timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no answer within the write timeout of {0:?}")]
pub struct NoAnswer(pub Duration);

impl Fence {
    /// The fence for `config`, fed by the elector's leadership and renew instants.
    pub fn new(
        config: &LeaderElection,
        leader: watch::Receiver<bool>,
        renewed: watch::Receiver<Option<Instant>>,
    ) -> Fence {
        let timing = Timing::for_duration(config.lease_duration);
        Fence {
            leader,
            renewed: config.enabled.then_some(renewed),
            renew_deadline: timing.renew_deadline,
            write_timeout: write_timeout(timing),
            writes: Arc::default(),
        }
    }

    /// The client-side timeout of every write.
    pub fn write_timeout(&self) -> Duration {
        self.write_timeout
    }

    /// A receiver of leadership changes.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// Waits until this replica may start a write and returns its permit, or
    /// [`NotAdmitted`] once it no longer leads, the fence is drained, or `cancel` fires while
    /// it waits.
    /// Fenced out while still leading (renewals failing), it waits for a renew or for
    /// stepping down rather than handing the write back, which would only come back.
    pub async fn admit(&self, cancel: &CancellationToken) -> Result<Permit, NotAdmitted> {
        let mut leader = self.leader.clone();
        let mut renewed = self.renewed.clone();
        loop {
            // `cancel` only ends a wait: a write already decided when shutdown began is sent
            // (and drained) rather than dropped.
            if self.writes.closed.is_cancelled() {
                return Err(NotAdmitted);
            }
            if !*leader.borrow_and_update() {
                return Err(NotAdmitted);
            }
            let permitted = match &mut renewed {
                None => true,
                Some(renewed) => {
                    let last = *renewed.borrow_and_update();
                    last.is_some_and(|at| self.permits(at.elapsed()))
                }
            };
            if permitted {
                return Ok(Permit {
                    _token: self.writes.tracker.token(),
                    writes: self.writes.clone(),
                    timeout: self.write_timeout,
                });
            }
            let renew = async {
                match &mut renewed {
                    Some(r) => r.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = renew => if r.is_err() { return Err(NotAdmitted) },
                r = leader.changed() => if r.is_err() { return Err(NotAdmitted) },
                _ = cancel.cancelled() => return Err(NotAdmitted),
                _ = self.writes.closed.cancelled() => return Err(NotAdmitted),
            }
        }
    }

    /// Whether a write may start `since_renew` after the start of the last successful renew:
    /// even if it takes its whole timeout, it ends by the renew deadline.
    pub fn permits(&self, since_renew: Duration) -> bool {
        since_renew.saturating_add(self.write_timeout) <= self.renew_deadline
    }

    /// Admit no more writes, wait until every permit is given back or `deadline` passes, and
    /// say whether all of them were answered.
    pub async fn drain(&self, deadline: Instant) -> Drained {
        self.writes.closed.cancel();
        self.writes.tracker.close();
        let in_flight = self.writes.tracker.len();
        if tokio::time::timeout_at(deadline, self.writes.tracker.wait())
            .await
            .is_err()
        {
            self.writes.unsettle(format!(
                "{in_flight} write(s) still in flight at the shutdown deadline"
            ));
        }
        let unsettled = self
            .writes
            .unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if unsettled.is_empty() {
            Drained::Settled
        } else {
            Drained::Unsettled(unsettled)
        }
    }
}

impl Writes {
    fn unsettle(&self, what: String) {
        self.unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    }
}

/// Leave to start one write; held until it is answered.
#[derive(Debug)]
pub struct Permit {
    _token: TaskTrackerToken,
    writes: Arc<Writes>,
    timeout: Duration,
}

impl Permit {
    /// Send `write` (named `what` in logs) within the write timeout. Without an answer the
    /// write counts as unsettled, and so does a write whose future is dropped before its
    /// answer (an aborted task).
    pub async fn send<T>(self, what: &str, write: impl Future<Output = T>) -> Result<T, NoAnswer> {
        let mut pending = Pending {
            writes: &self.writes,
            what,
            answered: false,
        };
        let answer = tokio::time::timeout(self.timeout, write).await;
        pending.answered = answer.is_ok();
        answer.map_err(|_| NoAnswer(self.timeout))
    }
}

/// A write sent and not answered yet: dropped unanswered, it is remembered as unsettled.
struct Pending<'a> {
    writes: &'a Writes,
    what: &'a str,
    answered: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.writes.unsettle(format!(
                "{} got no answer and may still be committed",
                self.what
            ));
        }
    }
}

/// Half of `leaseDuration − renewDeadline` (2.5 s for the default 15 s lease): strictly below
/// it, and leaving a renew round's worth of room before the renew deadline.
pub fn write_timeout(timing: Timing) -> Duration {
    timing.lease_duration.saturating_sub(timing.renew_deadline) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(
        leading: bool,
        secs: u64,
    ) -> (Fence, watch::Sender<bool>, watch::Sender<Option<Instant>>) {
        let (renew_tx, renew_rx) = watch::channel(Some(Instant::now()));
        let (leader_tx, leader_rx) = watch::channel(leading);
        let config = LeaderElection {
            enabled: true,
            namespace: "kube-system".into(),
            name: "initguard".into(),
            lease_duration: Duration::from_secs(secs),
        };
        (
            Fence::new(&config, leader_rx, renew_rx),
            leader_tx,
            renew_tx,
        )
    }

    #[test]
    fn fence_bounds_every_write_within_the_lease() {
        for secs in [1, 3, 15, 60, 137] {
            let timing = Timing::for_duration(Duration::from_secs(secs));
            let (fence, _leader, _renew) = fence(true, secs);
            // Below leaseDuration − renewDeadline, so a write cannot outlive the lease.
            assert!(!fence.write_timeout().is_zero());
            assert!(fence.write_timeout() < timing.lease_duration - timing.renew_deadline);
            // Exactly half the margin, as documented (2.5 s for a 15 s lease).
            assert_eq!(
                fence.write_timeout(),
                (timing.lease_duration - timing.renew_deadline) / 2
            );
            assert!(fence.permits(Duration::ZERO));
            let last_start = timing.renew_deadline - fence.write_timeout();
            assert!(fence.permits(last_start));
            assert!(!fence.permits(last_start + Duration::from_millis(1)));
            assert!(!fence.permits(timing.renew_deadline));
        }
    }

    #[test]
    fn the_default_lease_gives_a_two_and_a_half_second_write_timeout() {
        let (fence, _leader, _renew) = fence(true, 15);
        assert_eq!(fence.write_timeout(), Duration::from_millis(2500));
    }

    #[tokio::test(start_paused = true)]
    async fn answered_writes_drain_settled() {
        let (fence, _leader, _renew) = fence(true, 15);
        let cancel = CancellationToken::new();
        let permit = fence.admit(&cancel).await.unwrap();
        let answered = tokio::spawn(async move {
            permit
                .send("patch", tokio::time::sleep(Duration::from_secs(1)))
                .await
        });
        // The drain waits for the write in flight, then finds it answered.
        let drained = fence.drain(Instant::now() + Duration::from_secs(30)).await;
        assert_eq!(answered.await.unwrap(), Ok(()));
        assert_eq!(drained, Drained::Settled);
        // Drained: no further write starts.
        assert_eq!(fence.admit(&cancel).await.unwrap_err(), NotAdmitted);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_without_answer_is_unsettled() {
        let (fence, _leader, _renew) = fence(true, 15);
        let cancel = CancellationToken::new();
        let permit = fence.admit(&cancel).await.unwrap();
        let sent = permit
            .send("PATCH of pod a/b", std::future::pending::<()>())
            .await;
        assert_eq!(sent, Err(NoAnswer(fence.write_timeout())));
        let Drained::Unsettled(why) = fence.drain(Instant::now()).await else {
            panic!("a write without answer was taken as settled");
        };
        assert_eq!(
            why,
            ["PATCH of pod a/b got no answer and may still be committed"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_aborted_write_is_unsettled_and_a_stuck_one_stops_at_the_deadline() {
        let (fence, _leader, _renew) = fence(true, 15);
        let cancel = CancellationToken::new();
        let permit = fence.admit(&cancel).await.unwrap();
        let aborted =
            tokio::spawn(async move { permit.send("PATCH x", std::future::pending::<()>()).await });
        tokio::task::yield_now().await;
        aborted.abort();
        let _ = aborted.await;
        // A permit held by a writer that never sends keeps the drain waiting until the deadline.
        let held = fence.admit(&cancel).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let drained = fence.drain(deadline).await;
        assert_eq!(Instant::now(), deadline);
        assert_eq!(
            drained,
            Drained::Unsettled(vec![
                "PATCH x got no answer and may still be committed".to_owned(),
                "1 write(s) still in flight at the shutdown deadline".to_owned(),
            ])
        );
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_leader_is_admitted_and_a_fenced_out_writer_waits_for_a_renew() {
        let (fence, leader, renew) = fence(false, 15);
        let cancel = CancellationToken::new();
        assert_eq!(fence.admit(&cancel).await.unwrap_err(), NotAdmitted);
        leader.send_replace(true);
        // The last renew is too old: wait for the next one.
        renew.send_replace(Some(Instant::now() - Duration::from_secs(9)));
        let waiting = tokio::spawn({
            let fence = fence.clone();
            let cancel = cancel.clone();
            async move { fence.admit(&cancel).await.map(drop) }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished());
        renew.send_replace(Some(Instant::now()));
        assert_eq!(waiting.await.unwrap(), Ok(()));
        // Stepping down while waiting ends the wait without a permit.
        renew.send_replace(None);
        let waiting = tokio::spawn({
            let fence = fence.clone();
            let cancel = cancel.clone();
            async move { fence.admit(&cancel).await.map(drop) }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        leader.send_replace(false);
        assert_eq!(waiting.await.unwrap(), Err(NotAdmitted));
    }
}
