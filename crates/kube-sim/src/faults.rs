//! Fault injection, switchable at run time from any thread.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

#[derive(Debug, Default)]
struct FaultState {
    error_rate: f64,
    error_statuses: Vec<u16>,
    latency: Duration,
    gone_next_watch: bool,
    exempt: HashSet<String>,
    hidden_groups: HashSet<String>,
    partitioned: HashSet<String>,
    /// (user, resource, verb: every verb when None) whose requests are held open unanswered.
    stalled: HashSet<(String, String, Option<String>)>,
    /// (user, resource) whose writes are committed only this long after they arrive.
    delayed: Vec<(String, String, Duration)>,
    /// Writes that arrived under [`Faults::delay_writes`] so far.
    delayed_arrivals: u64,
    /// Requests held by [`Faults::stall`] or [`Faults::stall_verb`] so far.
    stalled_arrivals: u64,
    /// (user, verb, resource, status): the next matching request gets that status, once each.
    fail_next: Vec<(String, String, String, u16)>,
}

/// Faults the simulated API server injects into requests. Exempt users (for example the
/// simulated controllers) never see any of them.
#[derive(Debug)]
pub struct Faults {
    state: Mutex<FaultState>,
    drops: watch::Sender<u64>,
    /// Bumped whenever a stall is lifted.
    unstalls: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            state: Mutex::new(FaultState::default()),
            drops: watch::Sender::new(0),
            unstalls: watch::Sender::new(0),
        }
    }
}

impl Faults {
    fn state(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// End every open watch stream now (cleanly, as when an API server closes idle watches);
    /// clients are expected to re-watch from their last resourceVersion.
    pub fn drop_watches(&self) {
        self.drops.send_modify(|n| *n += 1);
    }

    /// Answer `fraction` (0.0–1.0) of requests with one of `statuses`, picked at random, as
    /// `Status` bodies (429 carries `Retry-After: 1`). `set_error_rate(0.0, &[])` stops.
    /// Discovery requests are not affected.
    pub fn set_error_rate(&self, fraction: f64, statuses: &[u16]) {
        let mut s = self.state();
        s.error_rate = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        s.error_statuses = statuses.to_vec();
    }

    /// Delay every request by `latency` before handling it (zero stops).
    pub fn set_latency(&self, latency: Duration) {
        self.state().latency = latency;
    }

    /// Answer the next watch request with a 410 Gone (an `ERROR` event with reason
    /// `Expired`), as when the requested resourceVersion was compacted.
    pub fn force_gone_next_watch(&self) {
        self.state().gone_next_watch = true;
    }

    /// Serve these API groups to nobody, as a server without them: left out of discovery and
    /// answered 404 (replaces the previous set; empty serves them again).
    pub fn hide_groups(&self, groups: &[&str]) {
        self.state().hidden_groups = groups.iter().map(|g| g.to_string()).collect();
    }

    /// Cut `user` off from the API server, as a network partition between one client and the
    /// server behind a load balancer: every request of that user is answered 503 by "the load
    /// balancer" and never reaches the server (it is not executed and not in the request
    /// log), and open watch streams end (everyone's: clients re-watch) so that user's do not
    /// keep flowing. Exemptions do not apply. Lasts until [`Faults::heal_user`].
    pub fn partition_user(&self, user: &str) {
        self.state().partitioned.insert(user.to_owned());
        self.drop_watches();
    }

    /// End the partition of `user`.
    pub fn heal_user(&self, user: &str) {
        self.state().partitioned.remove(user);
    }

    /// Whether `user` is cut off by [`Faults::partition_user`].
    pub(crate) fn is_partitioned(&self, user: &str) -> bool {
        self.state().partitioned.contains(user)
    }

    /// Hold every request of `user` on `resource` (`leases`, `pods`…) open without an answer,
    /// as a request lost behind a proxy that keeps the connection: only the client's own
    /// timeout ends it. Other users and resources are served. Lasts until
    /// [`Faults::unstall`], when requests still held are answered 503, never handled.
    pub fn stall(&self, user: &str, resource: &str) {
        self.state()
            .stalled
            .insert((user.to_owned(), resource.to_owned(), None));
    }

    /// [`Faults::stall`] of the `verb` requests only (`watch`, `get`…): e.g. a client's watch
    /// of an object held while its reads and writes of it are served, as when a watch cache
    /// lags behind etcd.
    pub fn stall_verb(&self, user: &str, verb: &str, resource: &str) {
        self.state()
            .stalled
            .insert((user.to_owned(), resource.to_owned(), Some(verb.to_owned())));
    }

    /// How many requests a stall has held so far (released or still held): the witness that a
    /// client's request reached the stall.
    pub fn stalled_requests(&self) -> u64 {
        self.state().stalled_arrivals
    }

    /// End [`Faults::stall`] and [`Faults::stall_verb`] of `user` on `resource`.
    pub fn unstall(&self, user: &str, resource: &str) {
        self.state()
            .stalled
            .retain(|(u, r, _)| u != user || r != resource);
        self.unstalls.send_modify(|n| *n += 1);
    }

    /// Whether this `verb` request of `user` on `resource` was stalled: then it returns only
    /// once the stall is lifted, and the request must not be handled.
    pub(crate) async fn held(&self, user: &str, verb: &str, resource: &str) -> bool {
        // Every request passes here: no allocation or subscription unless it is stalled.
        let stalled = || {
            self.state().stalled.iter().any(|(u, r, v)| {
                u == user && r == resource && v.as_deref().is_none_or(|v| v == verb)
            })
        };
        if !stalled() {
            return false;
        }
        self.state().stalled_arrivals += 1;
        // Subscribed before looking again, so an unstall in between is not missed.
        let mut lifted = self.unstalls.subscribe();
        while stalled() {
            if lifted.changed().await.is_err() {
                break;
            }
        }
        true
    }

    /// Commit every write (create, update, patch, delete) of `user` on `resource` only `delay`
    /// after it arrived, as a slow etcd or admission chain does; like a real server, the
    /// server commits it even when the client has given up waiting meanwhile. Lasts until
    /// [`Faults::clear`].
    pub fn delay_writes(&self, user: &str, resource: &str, delay: Duration) {
        self.state()
            .delayed
            .push((user.to_owned(), resource.to_owned(), delay));
    }

    /// How many writes have arrived under [`Faults::delay_writes`] (committed or still held).
    pub fn delayed_writes(&self) -> u64 {
        self.state().delayed_arrivals
    }

    /// The delay of a write of `user` on `resource` ([`Faults::delay_writes`]), if any; counts
    /// the write as arrived.
    pub(crate) fn write_delay(&self, user: &str, resource: &str) -> Option<Duration> {
        let mut s = self.state();
        let delay = s
            .delayed
            .iter()
            .find(|(u, r, _)| u == user && r == resource)
            .map(|(_, _, d)| *d)?;
        s.delayed_arrivals += 1;
        Some(delay)
    }

    /// Users never affected by faults (replaces the previous set).
    pub fn exempt_users(&self, users: &[&str]) {
        self.state().exempt = users.iter().map(|u| u.to_string()).collect();
    }

    /// Answer the next `verb` request on `resource` (e.g. `patch`, `pods`) by `user` with
    /// `status`, once, without handling it (as an API server's optimistic concurrency check
    /// answers 409). Several calls queue in order.
    pub fn fail_next(&self, user: &str, verb: &str, resource: &str, status: u16) {
        self.state().fail_next.push((
            user.to_owned(),
            verb.to_owned(),
            resource.to_owned(),
            status,
        ));
    }

    /// Turn every fault off (exemptions are kept).
    pub fn clear(&self) {
        let mut s = self.state();
        s.error_rate = 0.0;
        s.error_statuses.clear();
        s.latency = Duration::ZERO;
        s.gone_next_watch = false;
        s.hidden_groups.clear();
        s.fail_next.clear();
        s.stalled.clear();
        s.delayed.clear();
        drop(s);
        self.unstalls.send_modify(|n| *n += 1);
    }

    /// Whether `group` is hidden by [`Faults::hide_groups`].
    pub(crate) fn hides(&self, group: &str) -> bool {
        self.state().hidden_groups.contains(group)
    }

    /// The latency to inject for `user`, if any.
    pub(crate) fn latency_for(&self, user: &str) -> Option<Duration> {
        let s = self.state();
        (!s.latency.is_zero() && !s.exempt.contains(user)).then_some(s.latency)
    }

    /// The status code to answer instead of handling the request, if one is drawn.
    pub(crate) fn injected_error(&self, user: &str) -> Option<u16> {
        use rand::Rng;
        let s = self.state();
        if s.error_rate <= 0.0 || s.error_statuses.is_empty() || s.exempt.contains(user) {
            return None;
        }
        let mut rng = rand::rng();
        if rng.random::<f64>() >= s.error_rate {
            return None;
        }
        Some(s.error_statuses[rng.random_range(0..s.error_statuses.len())])
    }

    /// The status a [`Faults::fail_next`] entry gives this request, consuming the entry.
    pub(crate) fn take_fail_next(&self, user: &str, verb: &str, resource: &str) -> Option<u16> {
        let mut s = self.state();
        let i = s
            .fail_next
            .iter()
            .position(|(u, v, r, _)| u == user && v == verb && r == resource)?;
        Some(s.fail_next.remove(i).3)
    }

    /// Whether this watch request by `user` must be answered with 410 (consumes the flag).
    pub(crate) fn take_gone(&self, user: &str) -> bool {
        let mut s = self.state();
        if s.gone_next_watch && !s.exempt.contains(user) {
            s.gone_next_watch = false;
            true
        } else {
            false
        }
    }

    /// Notified on every [`Faults::drop_watches`].
    pub(crate) fn subscribe_drops(&self) -> watch::Receiver<u64> {
        self.drops.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exempt_users_see_no_faults() {
        let f = Faults::default();
        f.set_error_rate(1.0, &[503]);
        f.set_latency(Duration::from_millis(5));
        f.exempt_users(&["ctrl"]);
        assert_eq!(f.injected_error("u"), Some(503));
        assert_eq!(f.injected_error("ctrl"), None);
        assert_eq!(f.latency_for("u"), Some(Duration::from_millis(5)));
        assert_eq!(f.latency_for("ctrl"), None);
        f.force_gone_next_watch();
        assert!(!f.take_gone("ctrl"));
        assert!(f.take_gone("u"));
        assert!(!f.take_gone("u"));
        f.clear();
        assert_eq!(f.injected_error("u"), None);
        let rx = f.subscribe_drops();
        f.drop_watches();
        assert!(rx.has_changed().unwrap());
    }

    #[test]
    fn fail_next_answers_one_matching_request() {
        let f = Faults::default();
        f.fail_next("u", "patch", "pods", 409);
        assert_eq!(f.take_fail_next("other", "patch", "pods"), None);
        assert_eq!(f.take_fail_next("u", "get", "pods"), None);
        assert_eq!(f.take_fail_next("u", "patch", "pods"), Some(409));
        assert_eq!(f.take_fail_next("u", "patch", "pods"), None, "once");
    }

    #[tokio::test]
    async fn stall_holds_one_user_and_resource_until_lifted() {
        let f = std::sync::Arc::new(Faults::default());
        f.stall("a", "leases");
        // Others are not held.
        let others = tokio::time::timeout(Duration::from_secs(5), async {
            (
                f.held("a", "get", "pods").await,
                f.held("b", "get", "leases").await,
            )
        })
        .await
        .expect("requests that are not stalled waited");
        assert_eq!(others, (false, false));
        let held = tokio::spawn({
            let f = f.clone();
            async move { f.held("a", "get", "leases").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!held.is_finished(), "a stalled request went on");
        f.unstall("a", "leases");
        let held = tokio::time::timeout(Duration::from_secs(5), held)
            .await
            .expect("the stalled request was not released by unstall")
            .unwrap();
        assert!(held, "a released request must be answered, not handled");
    }

    #[tokio::test]
    async fn stall_verb_holds_only_that_verb() {
        let f = std::sync::Arc::new(Faults::default());
        f.stall_verb("a", "watch", "leases");
        let others = tokio::time::timeout(Duration::from_secs(5), async {
            (
                f.held("a", "get", "leases").await,
                f.held("a", "patch", "leases").await,
                f.held("a", "watch", "pods").await,
            )
        })
        .await
        .expect("requests of other verbs or resources waited");
        assert_eq!(others, (false, false, false));
        let held = tokio::spawn({
            let f = f.clone();
            async move { f.held("a", "watch", "leases").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!held.is_finished(), "a stalled watch went on");
        assert_eq!(f.stalled_requests(), 1);
        f.unstall("a", "leases");
        let held = tokio::time::timeout(Duration::from_secs(5), held)
            .await
            .expect("the stalled watch was not released by unstall")
            .unwrap();
        assert!(held);
    }

    #[test]
    fn partition_is_per_user_and_heals() {
        let f = Faults::default();
        let rx = f.subscribe_drops();
        f.exempt_users(&["a"]);
        f.partition_user("a");
        assert!(f.is_partitioned("a"));
        assert!(!f.is_partitioned("b"));
        assert!(rx.has_changed().unwrap(), "open watches end");
        f.heal_user("a");
        assert!(!f.is_partitioned("a"));
    }
}
