//! Building the kube-rs client for a mechanism.
//!
//! Legacy initializers hide uninitialized pods from GET/LIST/WATCH unless the request says
//! `includeUninitialized=true`, a parameter kube-rs does not know. Rather than hand-rolling a
//! watcher, a request layer adds it, so `kube::runtime::watcher` keeps all of its
//! resourceVersion, bookmark and 410 handling.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, DynBody};
use tokio::time::Instant;
use tower::BoxError;
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};
use tower::util::{MapRequestLayer, MapResponseLayer};

use kube_common::{Mechanism, include_uninitialized};

/// A client for `config` that sees every pod the mechanism needs to see.
///
/// kube's default retry layer re-sends any request answered 429, 503 or 504, up to 15 times
/// with backoff growing to minutes: a bypass patch could then land long after this replica lost
/// the lease. Only reads are retried here; the actuator retries writes itself, each within the
/// leader's fence.
pub fn build(config: kube::Config, mechanism: Mechanism) -> Result<kube::Client, kube::Error> {
    Ok(build_clocked(config, mechanism)?.0)
}

/// A client and the API server's clock as its responses show it.
#[derive(Clone)]
pub struct Connection {
    pub client: kube::Client,
    pub clock: ServerClock,
}

impl From<kube::Client> for Connection {
    /// A client whose responses are not observed: its clock never gets a sample, so waits
    /// count conservatively from the first sight of each pod.
    fn from(client: kube::Client) -> Connection {
        Connection {
            client,
            clock: ServerClock::default(),
        }
    }
}

/// As [`build`], and the API server's clock as read from the `Date` header of every response.
pub fn connect(config: kube::Config, mechanism: Mechanism) -> Result<Connection, kube::Error> {
    let (client, clock) = build_clocked(config, mechanism)?;
    Ok(Connection { client, clock })
}

fn build_clocked(
    mut config: kube::Config,
    mechanism: Mechanism,
) -> Result<(kube::Client, ServerClock), kube::Error> {
    config.default_retry = false;
    let clock = ServerClock::default();
    let observer = clock.clone();
    let builder = ClientBuilder::try_from(config)?
        .with_layer(&MapResponseLayer::new(
            move |response: Response<Box<DynBody>>| {
                observer.observe_response(&response);
                response
            },
        ))
        // Retry needs a cloneable inner service; kube's client buffers the same way.
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(ReadsOnly(RetryPolicy::server_retry())));
    let client = match mechanism {
        Mechanism::SchedulingGates => builder.build(),
        Mechanism::Initializers => builder
            .with_layer(&MapRequestLayer::new(include_uninitialized))
            .build(),
    };
    Ok((client, clock))
}

/// Samples of the API server's clock older than this only count while none is newer, so a
/// server clock stepped back is not overestimated for long.
const CLOCK_WINDOW: Duration = Duration::from_secs(30);

/// A lower bound of the API server's clock, from the `Date` header of its responses.
///
/// A `Date` is truncated to the second and generated before the response left the server, so
/// `Date + (time since it was received)` never exceeds the server's clock, whatever the two
/// clocks say. Elapsed time is counted on this process's monotonic clock, so a step of the
/// local wall clock changes nothing. The bound is the largest over the samples of the last 30 s
/// (or the newest one when none is that recent). Waits measured from `creationTimestamp` (the
/// server's clock) against it are never overestimated: a guard whose clock runs ahead never
/// bypasses early; the cost is up to about a second of extra wait.
#[derive(Debug, Clone, Default)]
pub struct ServerClock {
    inner: Arc<Mutex<ClockSamples>>,
}

#[derive(Debug, Default)]
struct ClockSamples {
    /// Fixed origin of the monotonic clock for the keys below.
    origin: Option<Instant>,
    /// (received, Date − (received − origin)), keys strictly decreasing from the front: the
    /// front is the best sample of the window (a sliding-window maximum).
    samples: VecDeque<(Instant, SystemTime)>,
}

impl ServerClock {
    /// Take in a response's `Date` header, received now.
    pub fn observe_response<B>(&self, response: &Response<B>) {
        let date = response
            .headers()
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_http_date);
        if let Some(date) = date {
            self.observe(date, Instant::now());
        }
    }

    /// Take in a server `date` received at `received`.
    pub fn observe(&self, date: SystemTime, received: Instant) {
        let mut s = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let origin = *s.origin.get_or_insert(received);
        let Some(key) = date.checked_sub(received.saturating_duration_since(origin)) else {
            return;
        };
        while s.samples.back().is_some_and(|(_, k)| *k <= key) {
            s.samples.pop_back();
        }
        s.samples.push_back((received, key));
        // Keep the front within the window, but never drop the newest sample.
        while s.samples.len() > 1
            && s.samples
                .front()
                .is_some_and(|(t, _)| received.saturating_duration_since(*t) > CLOCK_WINDOW)
        {
            s.samples.pop_front();
        }
    }

    /// A lower bound of the server's clock at the monotonic instant `at`; None before any
    /// sample.
    pub fn server_now(&self, at: Instant) -> Option<SystemTime> {
        let s = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let origin = s.origin?;
        // Samples only ever leave from the front when a newer one arrived: the front is the
        // best still in the window (an expired front with newer samples is skipped here).
        let best = s
            .samples
            .iter()
            .find(|(t, _)| at.saturating_duration_since(*t) <= CLOCK_WINDOW)
            .or(s.samples.back())?;
        best.1.checked_add(at.saturating_duration_since(origin))
    }

    /// `server_time` (e.g. a `creationTimestamp`) in this process's wall clock, at the local
    /// instant (`now`, `at`): never earlier than the true local time of that event. None
    /// before any sample.
    pub fn to_local_at(
        &self,
        server_time: SystemTime,
        now: SystemTime,
        at: Instant,
    ) -> Option<SystemTime> {
        let server_now = self.server_now(at)?;
        match server_now.duration_since(now) {
            // The server's clock is ahead of ours by at least `ahead`.
            Ok(ahead) => server_time.checked_sub(ahead),
            Err(behind) => server_time.checked_add(behind.duration()),
        }
    }
}

impl initguard_core::tracker::LocalTime for ServerClock {
    fn to_local(&self, server_time: SystemTime, now: SystemTime) -> Option<SystemTime> {
        self.to_local_at(server_time, now, Instant::now())
    }
}

/// An HTTP `Date` (RFC 9110 IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`).
fn parse_http_date(text: &str) -> Option<SystemTime> {
    let parser = jiff::fmt::rfc2822::DateTimeParser::new();
    let timestamp = parser.parse_timestamp(text).ok()?;
    Some(SystemTime::from(timestamp))
}

/// kube's retry policy restricted to GET (get, list, watch): a write is never re-sent behind
/// the caller's back.
#[derive(Clone)]
struct ReadsOnly(RetryPolicy);

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for ReadsOnly {
    type Future = <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::Future;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if req.method() != Method::GET {
            return None;
        }
        self.0.retry(req, result)
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        if req.method() != Method::GET {
            return None;
        }
        <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::clone_request(
            &mut self.0,
            req,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    #[test]
    fn parses_http_dates() {
        assert_eq!(
            parse_http_date("Fri, 15 Jan 2027 08:00:05 GMT"),
            Some(at(5))
        );
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[test]
    fn server_clock_is_a_lower_bound_that_follows_the_monotonic_clock() {
        let clock = ServerClock::default();
        let t0 = Instant::now();
        assert_eq!(clock.server_now(t0), None);
        assert_eq!(clock.to_local_at(at(0), at(0), t0), None);
        // Server 60 s ahead.
        clock.observe(at(60), t0);
        let later = t0 + Duration::from_millis(2500);
        assert_eq!(
            clock.server_now(later),
            Some(at(60) + Duration::from_millis(2500))
        );
        // A better (larger) sample replaces a worse one.
        clock.observe(at(62), t0 + Duration::from_millis(1500));
        assert_eq!(clock.server_now(later), Some(at(63)));
        // A worse one does not lower the bound while the better one is in the window.
        clock.observe(at(62), t0 + Duration::from_millis(2000));
        assert_eq!(clock.server_now(later), Some(at(63)));
        // Local wall clock says at(3) at `later`: the server is 60 s ahead, so a pod created
        // at server time at(61) was created at local at(1) or later.
        assert_eq!(clock.to_local_at(at(61), at(3), later), Some(at(1)));
        // Server 60 s behind.
        let behind = ServerClock::default();
        behind.observe(at(0), t0);
        assert_eq!(behind.to_local_at(at(0), at(60), t0), Some(at(60)));
    }

    /// Only reads are retried: a PATCH, POST or PUT answered 429 or 503 goes back to the
    /// writer, whose classifier decides (a blind resend could repeat a write that landed).
    #[tokio::test]
    async fn only_reads_are_retried() {
        let busy = || -> Result<Response<()>, BoxError> {
            Ok(Response::builder()
                .status(429)
                .body(())
                .expect("a response"))
        };
        let request = |method: Method| {
            Request::builder()
                .method(method)
                .uri("/api/v1/namespaces/ns/pods/p")
                .body(Body::from(b"{}".to_vec()))
                .expect("a request")
        };
        let clone = |policy: &mut ReadsOnly, req: &Request<Body>| {
            <ReadsOnly as Policy<Request<Body>, Response<()>, BoxError>>::clone_request(policy, req)
        };
        for method in [Method::PATCH, Method::POST, Method::PUT, Method::DELETE] {
            let mut policy = ReadsOnly(RetryPolicy::server_retry());
            let mut req = request(method.clone());
            assert!(policy.retry(&mut req, &mut busy()).is_none(), "{method}");
            assert!(clone(&mut policy, &req).is_none(), "{method}");
        }
        let mut policy = ReadsOnly(RetryPolicy::server_retry());
        let mut get = request(Method::GET);
        assert!(policy.retry(&mut get, &mut busy()).is_some());
        assert!(clone(&mut policy, &get).is_some());
    }

    #[test]
    fn old_samples_leave_the_window_but_the_newest_stays() {
        let clock = ServerClock::default();
        let t0 = Instant::now();
        clock.observe(at(100), t0);
        // The server's clock was stepped back 50 s; 40 s later a new sample says so.
        let t1 = t0 + Duration::from_secs(40);
        clock.observe(at(90), t1);
        assert_eq!(clock.server_now(t1), Some(at(90)));
        // Much later, with no newer sample, the newest one still counts.
        let t2 = t1 + Duration::from_secs(100);
        assert_eq!(clock.server_now(t2), Some(at(190)));
    }
}
