//! The server's state shared by every connection and kept across restarts: the store, the
//! request log, RBAC, faults, and the response body type both the server and its watches use.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http_body_util::combinators::UnsyncBoxBody;
use serde_json::{Value, json};
use tokio::sync::watch as tokio_watch;

use super::faults::Faults;
use super::kinds::{self, WriteCtx};
use super::ops::{self, Writer};
use super::options::SimOptions;
use super::rbac::Rbac;
use super::record::RequestRecord;
use super::resources::{ResourceInfo, Storage};
use super::scheduler;
use super::store::{Change, Store};
use super::table::{self, IncludeObject};

/// Response body type of every handler.
pub(crate) type RespBody = UnsyncBoxBody<Bytes, Infallible>;

/// How a response presents objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repr {
    Json,
    /// `meta.k8s.io` Table of this version (`v1`, `v1beta1`).
    Table(&'static str),
    /// `meta.k8s.io` PartialObjectMetadata(List) of this version.
    Meta(&'static str),
}

impl Repr {
    /// `obj` (stored form) as a response or watch event presents it.
    pub(crate) fn render(self, res: &ResourceInfo, obj: &Value, include: IncludeObject) -> Value {
        let shown = kinds::from_storage(res, obj);
        match self {
            Repr::Json => shown,
            Repr::Meta(v) => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": format!("meta.k8s.io/{v}"),
                "metadata": shown["metadata"],
            }),
            Repr::Table(v) => table::table(
                res,
                std::slice::from_ref(&shown),
                json!({ "resourceVersion": shown["metadata"]["resourceVersion"] }),
                include,
                v,
                true,
            ),
        }
    }
}

/// State shared by all connections, kept across restarts.
pub(crate) struct ServerState {
    pub options: SimOptions,
    pub addr: SocketAddr,
    store: Mutex<Store>,
    /// The latest committed resourceVersion; wakes watchers and waiting creators.
    pub changed: tokio_watch::Sender<u64>,
    legacy_initializers: RwLock<Vec<String>>,
    /// Init containers that fail for pods started now, with their exit code
    /// ([`crate::Sim::fail_init_container`]).
    failing_init: RwLock<std::collections::BTreeMap<String, i32>>,
    pub faults: Faults,
    log: Mutex<RequestLog>,
    pub(crate) rbac: RwLock<HashMap<String, Rbac>>,
    pod_ips: AtomicU64,
}

#[derive(Default)]
struct RequestLog {
    records: VecDeque<RequestRecord>,
    counts: BTreeMap<(String, String), u64>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Now as RFC 3339 UTC with seconds, as `metav1.Time` serializes, on a clock `offset` from
/// this process's (see `SimOptions::clock_offset`).
pub(crate) fn now_rfc3339_skewed(offset: jiff::SignedDuration) -> String {
    let now = jiff::Timestamp::now();
    now.checked_add(offset)
        .unwrap_or(now)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The `Date` header value of a response sent now, on the server's (skewed) clock.
pub(crate) fn http_date(offset: jiff::SignedDuration) -> Option<header::HeaderValue> {
    let now = jiff::Timestamp::now();
    let text = jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&now.checked_add(offset).unwrap_or(now))
        .ok()?;
    header::HeaderValue::from_str(&text).ok()
}

/// Go's `time.Duration` formatting for the durations used in messages.
pub(crate) fn go_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let secs = d.as_secs();
    let frac = d.subsec_millis();
    let s = if frac == 0 {
        format!("{}s", secs % 60)
    } else {
        let text = format!("{}.{frac:03}", secs % 60);
        format!("{}s", text.trim_end_matches('0'))
    };
    match (secs / 3600, (secs % 3600) / 60) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

impl ServerState {
    /// Now on the server's clock, as `metav1.Time` serializes.
    pub(crate) fn now_rfc3339(&self) -> String {
        now_rfc3339_skewed(self.options.clock_offset)
    }

    /// Fresh state with the default namespaces.
    pub(crate) fn new(options: SimOptions, addr: SocketAddr) -> ServerState {
        let mut store = Store::new(options.history_window, options.change_log_limit);
        let now = now_rfc3339_skewed(options.clock_offset);
        let ns = Storage::Namespaces.canonical();
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let w = Writer {
                user: "system:apiserver",
                dry_run: false,
                ctx: WriteCtx {
                    mechanism: options.mechanism,
                    legacy_initializers: &[],
                    now: &now,
                    drop_match_conditions: options.drop_match_conditions,
                },
            };
            // Creating a fixed, valid namespace in an empty store cannot fail.
            let _ = ops::create(&mut store, ns, None, json!({"metadata": {"name": name}}), w);
        }
        let rv = store.rv();
        ServerState {
            legacy_initializers: RwLock::new(options.legacy_initializers.clone()),
            failing_init: RwLock::default(),
            options,
            addr,
            store: Mutex::new(store),
            changed: tokio_watch::Sender::new(rv),
            faults: Faults::default(),
            log: Mutex::new(RequestLog::default()),
            rbac: RwLock::new(HashMap::new()),
            pod_ips: AtomicU64::new(0),
        }
    }

    /// The store, locked.
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// Names appended to new pods' pending initializers.
    pub(crate) fn legacy_initializers(&self) -> Vec<String> {
        self.legacy_initializers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replace the names appended to new pods' pending initializers.
    /// Pods started from now on fail `container` with `exit` (None: it succeeds again).
    pub(crate) fn fail_init_container(&self, container: &str, exit: Option<i32>) {
        let mut failing = self
            .failing_init
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match exit {
            Some(code) => failing.insert(container.to_owned(), code),
            None => failing.remove(container),
        };
    }

    pub(crate) fn set_legacy_initializers(&self, names: Vec<String>) {
        *self
            .legacy_initializers
            .write()
            .unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// Enforce `rules` for `user` (None: stop enforcing).
    pub(crate) fn set_rbac(&self, user: &str, rules: Option<Rbac>) {
        let mut map = self.rbac.write().unwrap_or_else(PoisonError::into_inner);
        match rules {
            Some(r) => {
                map.insert(user.to_string(), r);
            }
            None => {
                map.remove(user);
            }
        }
    }

    /// Logged requests, oldest first.
    pub(crate) fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.log).records.iter().cloned().collect()
    }

    /// Requests logged so far, removed from the log in the same step (none is lost between
    /// reading and clearing); counts are kept.
    pub(crate) fn take_requests(&self) -> Vec<RequestRecord> {
        lock(&self.log).records.drain(..).collect()
    }

    /// Forget logged requests and counts.
    pub(crate) fn clear_requests(&self) {
        let mut log = lock(&self.log);
        log.records.clear();
        log.counts.clear();
    }

    /// Requests by (verb, resource).
    pub(crate) fn counts(&self) -> BTreeMap<(String, String), u64> {
        lock(&self.log).counts.clone()
    }

    pub(crate) fn record(&self, r: RequestRecord) {
        let mut log = lock(&self.log);
        *log.counts
            .entry((r.verb.clone(), r.resource.clone()))
            .or_default() += 1;
        if self.options.request_log_limit > 0 {
            log.records.push_back(r);
            while log.records.len() > self.options.request_log_limit {
                log.records.pop_front();
            }
        }
    }

    /// Wake watchers and start the scheduler for pods that became schedulable.
    pub(crate) fn after_commit(self: &Arc<Self>, changes: &[Arc<Change>]) {
        let Some(last) = changes.last() else {
            return;
        };
        self.changed.send_replace(last.rv);
        for c in changes {
            if c.storage != Storage::Pods || c.change_type == super::store::ChangeType::Deleted {
                continue;
            }
            let now_wants = kinds::wants_scheduling(&c.object);
            let before = c.prev.as_deref().is_some_and(kinds::wants_scheduling);
            if now_wants && !before {
                self.schedule_later(c);
            }
        }
    }

    /// Binds the pod of `c` (just made schedulable) after the configured delay, unless it
    /// changed meanwhile.
    fn schedule_later(self: &Arc<Self>, c: &Change) {
        let weak = Arc::downgrade(self);
        let (ns, name) = (c.namespace.clone(), c.name.clone());
        let uid = c.object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let delay = self.options.schedule_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let n = shared.pod_ips.fetch_add(1, Ordering::Relaxed);
            let ip = format!("10.244.{}.{}", (n / 250) % 250, n % 250 + 2);
            let failing = shared
                .failing_init
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let changes = {
                let mut store = shared.store();
                scheduler::schedule_pod(
                    &mut store,
                    &ns,
                    &name,
                    &uid,
                    scheduler::SIM_NODE,
                    &shared.now_rfc3339(),
                    &ip,
                    &failing,
                )
            };
            shared.after_commit(&changes);
        });
    }
}
