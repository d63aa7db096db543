//! HTTP endpoints: `/metrics`, `/healthz`, `/readyz`, `/status`. Served by every replica, on
//! `listen` and, when set, on `secureListen` (HTTPS, see [`secure`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::secure;
use super::shared::Shared;
use crate::environment::Env;
use crate::report::{Report, StatusReport, pod_statuses};

/// Most pods listed by /status unless `?limit=` says otherwise.
const DEFAULT_STATUS_LIMIT: usize = 1000;

/// Serve plain HTTP until `cancel` fires.
pub async fn serve(listener: tokio::net::TcpListener, app: Router, cancel: CancellationToken) {
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(cancel.cancelled_owned())
        .await
    {
        warn!(error = %e, "HTTP server stopped");
    }
}

/// Serve HTTPS until `cancel` fires, with whatever certificate `config` holds at each handshake.
pub async fn serve_tls(
    listener: std::net::TcpListener,
    config: axum_server::tls_rustls::RustlsConfig,
    app: Router,
    cancel: CancellationToken,
) {
    let server = match axum_server::tls_rustls::from_tcp_rustls(listener, config) {
        Ok(server) => server,
        Err(e) => {
            warn!(error = %e, "HTTPS server cannot start");
            return;
        }
    };
    let handle = axum_server::Handle::new();
    let stop = handle.clone();
    tokio::spawn(async move {
        cancel.cancelled().await;
        stop.graceful_shutdown(Some(SHUTDOWN_GRACE));
    });
    if let Err(e) = server.handle(handle).serve(app.into_make_service()).await {
        warn!(error = %e, "HTTPS server stopped");
    }
}

/// Longest an open HTTPS connection may delay shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Every route, unauthenticated: the plain listener when no `secureListen` is set.
pub fn router(shared: Arc<Shared>) -> Router {
    health_router(shared.clone()).merge(data_router(shared))
}

/// `/healthz` and `/readyz` alone: the plain listener when `secureListen` is set.
pub fn health_router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(shared)
}

/// The HTTPS listener's routes: health open, `/metrics` and `/status` behind delegated
/// authentication and authorization.
pub fn secure_router(shared: Arc<Shared>, delegated: Arc<secure::Delegated>) -> Router {
    let protected = data_router(shared.clone()).route_layer(axum::middleware::from_fn_with_state(
        delegated,
        secure::require_token,
    ));
    health_router(shared).merge(protected)
}

fn data_router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .with_state(shared)
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let rendered = {
        let _one_at_a_time = shared.scrape.lock().unwrap_or_else(|e| e.into_inner());
        refresh_gauges(&shared, SystemTime::now());
        shared.metrics.render()
    };
    match rendered {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let panics = shared.failures.list();
    if !panics.is_empty() {
        let mut body = panics.join("\n");
        body.push('\n');
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    } else if shared.healthy() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "control loop made no progress recently\n",
        )
            .into_response()
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let missing = shared.not_ready();
    if missing.is_empty() {
        // Unknown owners do not make the guard unready (they never trigger owner_down), but
        // whoever looks should see them: a typo or a missing permission shows here.
        let mut body = "ok\n".to_owned();
        for owner in shared.owners.unknown() {
            body.push_str("owner ");
            body.push_str(&owner);
            body.push('\n');
        }
        (StatusCode::OK, body).into_response()
    } else {
        let mut body = missing.join("\n");
        body.push('\n');
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

/// Query of /status.
#[derive(Debug, Deserialize)]
struct StatusQuery {
    limit: Option<usize>,
}

async fn status(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<StatusQuery>,
) -> Json<StatusReport> {
    let limit = q.limit.unwrap_or(DEFAULT_STATUS_LIMIT);
    let now = SystemTime::now();
    let (total, waiting_pods) = {
        let tracker = shared.tracker();
        let env = Env {
            tracker: &tracker,
            owners: &shared.owners,
            now,
        };
        let listed = pod_statuses(&tracker, &env, &shared.config, now, limit);
        (tracker.len(), listed)
    };
    // One lock at a time: the tracker's (which namespaces are selected), then the stage's.
    let selected: std::collections::HashSet<String> =
        shared.tracker().selected_namespaces().into_iter().collect();
    let init_containers = shared.stage().statuses(
        &|ns| selected.contains(ns),
        &super::node_stage::cluster_unknown,
        now,
        limit,
    );
    let not_ready = shared.not_ready();
    Json(StatusReport {
        identity: shared.identity.clone(),
        leader: shared.is_leader(),
        dry_run: shared.config.dry_run,
        ready: not_ready.is_empty(),
        not_ready,
        waiting_pods_total: total,
        report: Report {
            mechanism: shared.config.mechanism.as_str(),
            owners: shared.owners.snapshot(),
            waiting_pods,
            webhooks: shared.webhook_statuses(),
            init_containers,
        },
    })
}

/// Set the gauges that depend on the waiting pods and the clock.
pub fn refresh_gauges(shared: &Shared, now: SystemTime) {
    super::node_stage::refresh_gauges(shared, now);
    let agg = shared.tracker().aggregates(now);
    let m = &shared.metrics;
    m.waiting_pods.reset();
    m.oldest_wait_seconds.reset();
    m.pileup_max_waiting_pods.reset();
    m.pileups.reset();
    // Listed initializers always have series, so boards show 0 rather than nothing.
    for i in &shared.config.initializers {
        for opted in ["true", "false"] {
            m.waiting_pods
                .with_label_values(&[i.name.as_str(), opted])
                .set(0);
        }
        m.oldest_wait_seconds
            .with_label_values(&[i.name.as_str()])
            .set(0.0);
        m.pileup_max_waiting_pods
            .with_label_values(&[i.name.as_str()])
            .set(0);
        m.pileups.with_label_values(&[i.name.as_str()]).set(0);
    }
    for ((name, opted), count) in &agg.waiting {
        let label = m.initializer_label(name);
        let opted = if *opted { "true" } else { "false" };
        m.waiting_pods
            .with_label_values(&[label, opted])
            .add(*count as i64);
    }
    for (name, wait) in &agg.oldest_wait {
        let g = m
            .oldest_wait_seconds
            .with_label_values(&[m.initializer_label(name)]);
        g.set(g.get().max(wait.as_secs_f64()));
    }
    for (name, max) in &agg.pile_max {
        let g = m
            .pileup_max_waiting_pods
            .with_label_values(&[m.initializer_label(name)]);
        g.set(g.get().max(i64::from(*max)));
    }
    for (name, n) in &agg.pileups {
        m.pileups
            .with_label_values(&[m.initializer_label(name)])
            .add(i64::from(*n));
    }
}
