//! A minimal Kubernetes API server for what conformant ones never send: garbage and truncated
//! watch frames; "ghost" pods that the list and watch show but a GET or PATCH cannot find (a pod
//! deleted while the guard's watch is stuck); and pods whose every PATCH is rejected as invalid
//! although they do not change (as a real server rejects annotations over their 256 KiB
//! limit). It serves just what a guard without owners
//! and without leader election calls: list and watch of pods (with replay from a
//! resourceVersion), get and JSON-patch of one pod, and Event creation.

use std::collections::{BTreeMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// One PATCH the server answered.
#[derive(Debug, Clone)]
pub(crate) struct PatchSeen {
    /// `namespace/name`.
    pub pod: String,
    pub status: u16,
    pub body: String,
}

#[derive(Default)]
struct Inner {
    rv: u64,
    pods: BTreeMap<String, Value>,
    /// Listed and watched, but 404 on GET and PATCH.
    ghosts: HashSet<String>,
    /// Every PATCH answered 422 Invalid, the pod unchanged.
    rejects: HashSet<String>,
    /// (resourceVersion, watch line) of every change, for replay.
    changes: Vec<(u64, String)>,
    patches: Vec<PatchSeen>,
    watch_requests: u32,
    /// Lines sent at the start of the first watch, each followed by a good event.
    garbage: Vec<String>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    live: broadcast::Sender<(u64, String)>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Store `pod` under a new resourceVersion and announce it.
    fn store(&self, mut pod: Value, kind: &str) {
        let mut s = self.lock();
        s.rv += 1;
        let rv = s.rv;
        pod["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = key_of(&pod);
        let line = json!({ "type": kind, "object": pod }).to_string();
        s.pods.insert(key, pod);
        s.changes.push((rv, line.clone()));
        let _ = self.live.send((rv, line));
    }
}

/// A running fake API server; stops on drop.
pub(crate) struct FakeApi {
    pub addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl FakeApi {
    /// Serve `pods` (stored in order, each with its own resourceVersion). `ghosts` and
    /// `rejects` are keys (`namespace/name`): ghosts answer 404 to GET and PATCH, rejects 422 to
    /// PATCH. `garbage` lines open the first watch, each followed by a good event (so that the
    /// client's backoff resets as on a live cluster).
    pub(crate) async fn start(
        pods: Vec<Value>,
        ghosts: &[&str],
        rejects: &[&str],
        garbage: Vec<String>,
    ) -> FakeApi {
        let (live, _) = broadcast::channel(1024);
        let shared = Shared {
            inner: Arc::new(Mutex::new(Inner {
                ghosts: ghosts.iter().map(|g| g.to_string()).collect(),
                rejects: rejects.iter().map(|g| g.to_string()).collect(),
                garbage,
                ..Inner::default()
            })),
            live,
        };
        for pod in pods {
            shared.store(pod, "ADDED");
        }
        let app = Router::new()
            .route("/api/v1/pods", get(pods_list_or_watch))
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(pod_get).patch(pod_patch),
            )
            .route(
                "/apis/events.k8s.io/v1/namespaces/{ns}/events",
                post(event_create),
            )
            .route("/api/v1/namespaces/{ns}/events", post(event_create))
            .fallback(|| async { status(404, "NotFound", "not served by the fake API server") })
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeApi { addr, shared, task }
    }

    /// Add a pod (an ADDED event on open watches).
    pub(crate) fn add_pod(&self, pod: Value) {
        self.shared.store(pod, "ADDED");
    }

    /// Every PATCH answered so far.
    pub(crate) fn patches(&self) -> Vec<PatchSeen> {
        self.shared.lock().patches.clone()
    }

    /// The stored pod `namespace/name`.
    pub(crate) fn pod(&self, key: &str) -> Option<Value> {
        self.shared.lock().pods.get(key).cloned()
    }

    /// A kubeconfig reaching this server with bearer `token`.
    pub(crate) fn kubeconfig(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             users:\n- name: guard\n  user:\n    token: {token}\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: guard\ncurrent-context: fake\n",
            self.addr
        )
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn key_of(pod: &Value) -> String {
    format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
        pod["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn query_param<'a>(query: &'a Option<String>, key: &str) -> Option<&'a str> {
    query
        .as_deref()?
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

async fn pods_list_or_watch(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Response {
    if matches!(query_param(&query, "watch"), Some("true" | "1")) {
        return watch(shared, &query);
    }
    let s = shared.lock();
    let items: Vec<&Value> = s.pods.values().collect();
    json_response(
        StatusCode::OK,
        &json!({
            "kind": "PodList", "apiVersion": "v1",
            "metadata": { "resourceVersion": s.rv.to_string() },
            "items": items,
        }),
    )
}

fn watch(shared: Shared, query: &Option<String>) -> Response {
    let since: u64 = query_param(query, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut s = shared.lock();
    s.watch_requests += 1;
    let mut opening: Vec<String> = Vec::new();
    if s.watch_requests == 1 {
        for (i, line) in s.garbage.iter().enumerate() {
            let noise = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": { "name": format!("noise-{i}"), "namespace": "noise",
                    "uid": format!("uid-noise-{i}"), "resourceVersion": s.rv.to_string() },
            });
            opening.push(line.clone());
            opening.push(json!({ "type": "MODIFIED", "object": noise }).to_string());
        }
    }
    opening.extend(
        s.changes
            .iter()
            .filter(|(rv, _)| *rv > since)
            .map(|(_, line)| line.clone()),
    );
    let replayed_to = s.rv;
    // Subscribed under the lock: nothing stored after the replay can be missed.
    let live = futures::stream::unfold(shared.live.subscribe(), move |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok((rv, line)) if rv > replayed_to => return Some((line, rx)),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    drop(s);
    let lines = futures::stream::iter(opening)
        .chain(live)
        .map(|line| Ok::<_, Infallible>(Bytes::from(format!("{line}\n"))));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from_stream(lines))
        .unwrap_or_else(|_| status(500, "InternalError", "cannot build the watch response"))
}

async fn pod_get(
    State(shared): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let key = format!("{ns}/{name}");
    let s = shared.lock();
    match s.pods.get(&key) {
        Some(pod) if !s.ghosts.contains(&key) => json_response(StatusCode::OK, pod),
        _ => status(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

async fn pod_patch(
    State(shared): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let key = format!("{ns}/{name}");
    let text = String::from_utf8_lossy(&body).into_owned();
    let (code, response, stored) = {
        let s = shared.lock();
        match s.pods.get(&key) {
            Some(_) if s.rejects.contains(&key) => (
                422,
                Some(status(
                    422,
                    "Invalid",
                    "metadata.annotations: Too long: must have at most 262144 bytes",
                )),
                None,
            ),
            Some(pod) if !s.ghosts.contains(&key) => {
                let mut patched = pod.clone();
                match serde_json::from_str::<json_patch::Patch>(&text)
                    .map_err(|e| e.to_string())
                    .and_then(|p| json_patch::patch(&mut patched, &p).map_err(|e| e.to_string()))
                {
                    Ok(()) => (200, None, Some(patched)),
                    Err(e) => (422, Some(status(422, "Invalid", &e)), None),
                }
            }
            _ => (
                404,
                Some(status(
                    404,
                    "NotFound",
                    &format!("pods \"{name}\" not found"),
                )),
                None,
            ),
        }
    };
    shared.lock().patches.push(PatchSeen {
        pod: key.clone(),
        status: code,
        body: text,
    });
    match (response, stored) {
        (Some(r), _) => r,
        (None, Some(pod)) => {
            shared.store(pod, "MODIFIED");
            let stored = shared.lock().pods.get(&key).cloned().unwrap_or_default();
            json_response(StatusCode::OK, &stored)
        }
        (None, None) => status(500, "InternalError", "unreachable"),
    }
}

async fn event_create(body: Bytes) -> Response {
    let event: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({}));
    json_response(StatusCode::CREATED, &event)
}
