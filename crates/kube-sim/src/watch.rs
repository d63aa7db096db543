//! Watch streams: newline-delimited JSON events over a chunked response.
//!
//! Watchers do not get copies of changes pushed to them. Each watch follows a cursor (the
//! last resourceVersion it has looked at) through the store's change window and is woken by
//! a version counter when something new is committed; an idle watch costs nothing per change
//! beyond a wake-up and a filter check, and an unchanged object is serialized once for all
//! watchers that send it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ops::Filter;
use super::resources::ResourceInfo;
use super::shared::{Repr, RespBody, ServerState};
use super::status::ApiError;
use super::store::{Change, ChangeType};
use super::table;

/// A parsed watch request.
#[derive(Debug, Clone)]
pub(crate) struct WatchRequest {
    pub res: &'static ResourceInfo,
    /// None: all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    pub filter: Filter,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Duration,
    pub repr: Repr,
    pub include_object: table::IncludeObject,
}

/// Changes read from the window per lock acquisition.
const BATCH: usize = 512;
/// Frames buffered per watch before the sender waits for the client.
const BUFFER: usize = 256;
/// Delay of the first bookmark, so clients learn a resumable version early.
const FIRST_BOOKMARK: Duration = Duration::from_millis(100);

/// A body streaming `frames`, ended when the sender is dropped.
pub(crate) fn stream_body(rx: mpsc::Receiver<Bytes>) -> RespBody {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    BodyExt::boxed_unsync(StreamBody::new(stream))
}

/// `{"type":"ERROR","object":<Status>}` as one frame.
pub(crate) fn error_frame(err: &ApiError) -> Bytes {
    let mut v = serde_json::to_vec(&json!({ "type": "ERROR", "object": err.to_status() }))
        .unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// The 410 for a version that left the window.
pub(crate) fn too_old(requested: u64, oldest: u64) -> ApiError {
    ApiError::expired(format!("too old resource version: {requested} ({oldest})"))
}

impl WatchRequest {
    fn in_scope(&self, change: &Change) -> bool {
        change.storage == self.res.storage
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| !self.res.namespaced || change.namespace == ns)
    }

    /// The event a change produces for this watcher: objects entering the selection are
    /// ADDED, leaving it DELETED (with the previous state at the new version).
    fn frame(&self, change: &Change) -> Option<Bytes> {
        if !self.in_scope(change) {
            return None;
        }
        let prev_ok = change
            .prev
            .as_deref()
            .is_some_and(|p| self.filter.matches(p));
        let cur_ok =
            change.change_type != ChangeType::Deleted && self.filter.matches(&change.object);
        match (change.change_type, prev_ok, cur_ok) {
            (ChangeType::Deleted, true, _) => Some(self.encode_change("DELETED", change)),
            (ChangeType::Deleted, false, _) => None,
            (_, true, true) => Some(self.encode_change("MODIFIED", change)),
            (_, false, true) => Some(self.encode_change("ADDED", change)),
            (_, true, false) => {
                let mut gone = change.prev.as_deref().cloned().unwrap_or(Value::Null);
                gone["metadata"]["resourceVersion"] = json!(change.rv.to_string());
                Some(self.encode("DELETED", &gone))
            }
            (_, false, false) => None,
        }
    }

    fn encode_change(&self, kind: &str, change: &Change) -> Bytes {
        if self.repr == Repr::Json && self.res.is_canonical() {
            let obj = change.object_json();
            let mut out = Vec::with_capacity(obj.len() + 32);
            out.extend_from_slice(b"{\"type\":\"");
            out.extend_from_slice(kind.as_bytes());
            out.extend_from_slice(b"\",\"object\":");
            out.extend_from_slice(obj);
            out.extend_from_slice(b"}\n");
            Bytes::from(out)
        } else {
            self.encode(kind, &change.object)
        }
    }

    /// An event for `obj` (stored form) in the requested representation.
    pub(crate) fn encode(&self, kind: &str, obj: &Value) -> Bytes {
        let object = self.repr.render(self.res, obj, self.include_object);
        let mut out =
            serde_json::to_vec(&json!({ "type": kind, "object": object })).unwrap_or_default();
        out.push(b'\n');
        Bytes::from(out)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut metadata = json!({ "resourceVersion": rv.to_string(), "creationTimestamp": null });
        if initial_end {
            metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let object = json!({
            "kind": self.res.kind,
            "apiVersion": self.res.api_version(),
            "metadata": metadata,
        });
        let mut out = serde_json::to_vec(&json!({ "type": "BOOKMARK", "object": object }))
            .unwrap_or_default();
        out.push(b'\n');
        Bytes::from(out)
    }
}

/// Start streaming: `initial` objects as ADDED, then changes after `start_rv`.
pub(crate) fn spawn(
    shared: Arc<ServerState>,
    req: WatchRequest,
    initial: Vec<Arc<Value>>,
    start_rv: u64,
    token: CancellationToken,
) -> RespBody {
    let (tx, rx) = mpsc::channel(BUFFER);
    // Subscribed before returning so a drop or commit right after the response starts is seen.
    let changed = shared.changed.subscribe();
    let drops = shared.faults.subscribe_drops();
    tokio::spawn(run(
        shared, req, initial, start_rv, token, tx, changed, drops,
    ));
    stream_body(rx)
}

#[allow(clippy::too_many_arguments)]
async fn run(
    shared: Arc<ServerState>,
    req: WatchRequest,
    initial: Vec<Arc<Value>>,
    start_rv: u64,
    token: CancellationToken,
    tx: mpsc::Sender<Bytes>,
    mut changed: tokio::sync::watch::Receiver<u64>,
    mut drops: tokio::sync::watch::Receiver<u64>,
) {
    let deadline = Instant::now() + req.timeout;
    let interval = shared
        .options
        .bookmark_interval
        .max(Duration::from_millis(10));
    let mut next_bookmark = Instant::now() + FIRST_BOOKMARK.min(interval);
    let drops_seen = drops.clone();
    let send = |frame: Bytes| {
        let tx = tx.clone();
        let token = token.clone();
        let mut drops = drops_seen.clone();
        async move {
            tokio::select! {
                r = tx.send(frame) => r.is_ok(),
                _ = token.cancelled() => false,
                _ = drops.changed() => false,
            }
        }
    };
    for obj in &initial {
        if !send(req.encode("ADDED", obj)).await {
            return;
        }
    }
    if req.send_initial_events && req.bookmarks && !send(req.bookmark(start_rv, true)).await {
        return;
    }
    let mut cursor = start_rv;
    loop {
        if Instant::now() >= deadline {
            return;
        }
        changed.borrow_and_update();
        let batch = shared.store().changes_after(cursor, BATCH);
        match batch {
            Err(oldest) => {
                let _ = send(error_frame(&too_old(cursor, oldest.saturating_sub(1)))).await;
                return;
            }
            Ok(changes) if !changes.is_empty() => {
                for c in &changes {
                    cursor = c.rv;
                    if let Some(frame) = req.frame(c)
                        && !send(frame).await
                    {
                        return;
                    }
                }
                continue;
            }
            Ok(_) => {}
        }
        tokio::select! {
            _ = token.cancelled() => return,
            _ = drops.changed() => return,
            _ = tx.closed() => return,
            _ = tokio::time::sleep_until(deadline) => return,
            r = changed.changed() => {
                if r.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(next_bookmark), if req.bookmarks => {
                if !send(req.bookmark(cursor, false)).await {
                    return;
                }
                next_bookmark = Instant::now() + interval;
            }
        }
    }
}
