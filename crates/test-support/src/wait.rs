//! Waiting in tests.
//!
//! A wait ends as soon as its condition holds, so it costs nothing when the guarantee holds. It
//! fails with its message after [`PATIENCE`], which is long enough that only a broken guarantee,
//! never a loaded machine, reaches it: how *fast* things happen is measured by the benchmarks,
//! not asserted by tests.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// How long a test waits for something that must happen before it fails.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// How often the in-memory checks of simulator tests are polled.
const POLL: Duration = Duration::from_millis(25);

/// Poll `check` until it returns `Some`; fail with "timed out … waiting for `what`" after
/// [`PATIENCE`].
pub async fn eventually<T>(what: impl Display, mut check: impl FnMut() -> Option<T>) -> T {
    eventually_async(what, || std::future::ready(check())).await
}

/// Like [`eventually`] for a boolean condition.
pub async fn until(what: impl Display, mut check: impl FnMut() -> bool) {
    eventually(what, || check().then_some(())).await
}

/// Like [`eventually`] for an asynchronous check (HTTP requests, API calls).
pub async fn eventually_async<T, F, Fut>(what: impl Display, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_every(POLL, what, check).await
}

/// Like [`eventually_async`], polling every `poll`: checks that spawn kubectl or call a real
/// server are polled less often than in-memory ones.
pub async fn eventually_every<T, F, Fut>(poll: Duration, what: impl Display, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for {what}"
        );
        tokio::time::sleep(poll).await;
    }
}
