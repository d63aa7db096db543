//! `initguard run`: the running guard. [`Guard::start`] wires the watches, owners, leader
//! election, actuator and HTTP endpoints around one control loop (ARCHITECTURE.md, "guard").
//!
//! * [`control`]: the loop that owns every decision;
//! * [`wakes`]: per-pod wake-ups at the times the policy names;
//! * [`shared`]: the state the loop and the endpoints share;
//! * [`actuator`]: the one writer; [`leader`]: the election that fences it;
//! * [`server`]: `/metrics`, `/healthz`, `/readyz`, `/status`; [`secure`]: the HTTPS listener;
//! * [`webhooks`]: the admission-webhook guard, fenced by the same election.

pub mod actuator;
mod control;
pub mod leader;
pub mod secure;
pub mod server;
pub mod shared;
mod wakes;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::client::Connection;
use crate::config::Config;
use crate::discovery::Problems;
use crate::metrics::{Metrics, MetricsError};
use crate::owners::Owners;
use crate::supervise::{self, Failures};
use crate::tracker::Tracker;
use actuator::Actuator;
use control::ControlLoop;
use shared::Shared;

/// A control loop silent for this long is reported unhealthy by /healthz.
pub const STALL_AFTER: Duration = Duration::from_secs(20);

/// Errors that stop the guard.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("secureListen {addr}: {source}")]
    Tls {
        addr: SocketAddr,
        source: secure::TlsError,
    },
}

/// A running guard.
pub struct Guard {
    pub shared: Arc<Shared>,
    /// Where the HTTP endpoints listen.
    pub addr: SocketAddr,
    /// Where the HTTPS endpoints listen, when `secureListen` is set.
    pub secure_addr: Option<SocketAddr>,
    cancel: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Leader election and actuator, aborted by [`Guard::kill`].
    aborts: Vec<tokio::task::AbortHandle>,
}

impl Guard {
    /// Start everything: owners, leader election, actuator, pod watch, control loop, HTTP.
    /// Pass a [`Connection`] from [`crate::client::connect`] so that waits are measured
    /// against the API server's clock; a bare client counts waits from first sight.
    pub async fn start(
        client: impl Into<Connection>,
        config: Arc<Config>,
    ) -> Result<Guard, RunError> {
        Self::start_with(client, config, leader::identity(), STALL_AFTER).await
    }

    /// As [`Guard::start`] with an explicit identity and stall window (tests).
    pub async fn start_with(
        client: impl Into<Connection>,
        config: Arc<Config>,
        identity: String,
        stall_after: Duration,
    ) -> Result<Guard, RunError> {
        let Connection { client, clock } = client.into();
        // Fail before any task starts, so a taken port leaves nothing running.
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| RunError::Listen {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| RunError::Listen {
            addr: config.listen,
            source,
        })?;
        let secure = match config.secure_listen {
            None => None,
            Some(addr) => {
                let tls = secure::server_config(&config.tls)
                    .map_err(|source| RunError::Tls { addr, source })?;
                let listener = std::net::TcpListener::bind(addr)
                    .map_err(|source| RunError::Listen { addr, source })?;
                let bound = listener
                    .local_addr()
                    .map_err(|source| RunError::Listen { addr, source })?;
                Some((listener, bound, tls))
            }
        };
        let secure_addr = secure.as_ref().map(|(_, bound, _)| *bound);
        // Listed webhooks without an owner are owned by their Service, read once here.
        let config = {
            let derived = webhooks::default_owners(&client, &config).await;
            if derived.is_empty() {
                config
            } else {
                let mut resolved = (*config).clone();
                for (index, owner) in derived {
                    resolved.webhooks[index].owner = Some(owner);
                }
                Arc::new(resolved)
            }
        };
        let cancel = CancellationToken::new();
        let metrics = Arc::new(Metrics::new(&config)?);
        let failures = Failures::default();
        let owners = Owners::spawn(
            client.clone(),
            &config,
            metrics.clone(),
            &failures,
            cancel.child_token(),
        );
        // Not a child of `cancel`: the lease is released only after in-flight patches drain.
        let leader_cancel = CancellationToken::new();
        let problems = Problems::default();
        let (renewed, renewed_rx) = watch::channel(None);
        let (leader, election) = leader::elect(
            client.clone(),
            &config.leader_election,
            identity.clone(),
            metrics.clone(),
            problems.clone(),
            renewed,
            leader_cancel.clone(),
        );
        let leader_task = supervise::spawn(&failures, "leader election", election);
        let fence = actuator::Fence::new(&config.leader_election, leader.clone(), renewed_rx);

        let shared = Arc::new(Shared {
            config: config.clone(),
            metrics: metrics.clone(),
            owners: owners.clone(),
            identity: identity.clone(),
            leader: leader.clone(),
            problems,
            tracker: Mutex::new(Tracker::new(config.clone()).with_clock(clock)),
            pods_synced: AtomicBool::new(false),
            last_progress: Mutex::new(Instant::now()),
            wedged: AtomicBool::new(false),
            stall_after,
            failures: failures.clone(),
            scrape: Mutex::new(()),
            webhooks: Mutex::new(Default::default()),
        });
        let mut tasks = Vec::new();
        let plain = match secure {
            None => server::router(shared.clone()),
            Some((listener, _, tls)) => {
                let delegated = Arc::new(secure::Delegated::new(client.clone()));
                let app = server::secure_router(shared.clone(), delegated);
                tasks.push(supervise::spawn(
                    &failures,
                    "https server",
                    server::serve_tls(listener, tls, app, cancel.child_token()),
                ));
                server::health_router(shared.clone())
            }
        };
        tasks.push(supervise::spawn(
            &failures,
            "http server",
            server::serve(listener, plain, cancel.child_token()),
        ));

        let webhook_guard = webhooks::WebhookGuard {
            client: client.clone(),
            config: config.clone(),
            owners: owners.clone(),
            metrics: metrics.clone(),
            fence: fence.clone(),
            identity: identity.clone(),
            shared: shared.clone(),
        };
        tasks.push(supervise::spawn(
            &failures,
            "webhook guard",
            webhook_guard.run(failures.clone(), cancel.child_token()),
        ));

        let (report_tx, report_rx) = mpsc::unbounded_channel();
        let actuator_cancel = CancellationToken::new();
        let (actuator, worker) = Actuator::new(
            client.clone(),
            config.clone(),
            metrics,
            fence,
            identity,
            report_tx,
            actuator_cancel.clone(),
        );
        let actuator_task = supervise::spawn(&failures, "actuator", worker);
        let control = ControlLoop::new(shared.clone(), actuator);
        let loop_cancel = cancel.clone();
        let aborts = vec![leader_task.abort_handle(), actuator_task.abort_handle()];
        let main = supervise::spawn(&failures, "control loop", async move {
            control.run(client, report_rx, leader, loop_cancel).await;
            // Decisions stop first; then in-flight patches drain; then the lease is released.
            actuator_cancel.cancel();
            let _ = actuator_task.await;
            leader_cancel.cancel();
            let _ = leader_task.await;
        });
        tasks.insert(0, main);
        info!(%addr, secure_addr = ?secure_addr, mechanism = config.mechanism.as_str(), dry_run = config.dry_run, "initguard started");
        Ok(Guard {
            shared,
            addr,
            secure_addr,
            cancel,
            tasks,
            aborts,
        })
    }

    /// Stop taking decisions, finish in-flight patches (bounded), release the lease.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }

    /// Die abruptly, as on SIGKILL: no draining, no lease release (failover tests).
    pub fn kill(self) {
        for task in &self.tasks {
            task.abort();
        }
        for task in &self.aborts {
            task.abort();
        }
        // Owner watchers only read; stop them too so nothing of this guard stays alive.
        self.cancel.cancel();
    }

    /// Run until SIGTERM/SIGINT or until a task panics, then shut down gracefully. Returns the
    /// panics (empty after a signal): the process must then fail, so that the kubelet or the
    /// Deployment restarts it.
    pub async fn run_until_signal(self) -> Vec<String> {
        let failures = self.shared.failures.clone();
        tokio::select! {
            _ = wait_for_signal() => info!("shutting down"),
            _ = failures.any() => error!("shutting down after a task panicked"),
        }
        self.shutdown().await;
        failures.list()
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the guard");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
