//! `initguard run`: the running guard. [`Guard::start`] wires the watches, owners, leader
//! election, writers and HTTP endpoints around one control loop (ARCHITECTURE.md, "guard").
//!
//! * `lifecycle`: how the tasks start and stop (writers drain before the lease goes);
//! * `control`: the loop that takes every decision;
//! * `wakes`: per-pod wake-ups at the times the policy names;
//! * [`shared`]: the state the loop and the endpoints share;
//! * [`leader`]: the election; [`fence`]: when a write may start, and which are in flight;
//! * [`mod@write`]: the one write path (answers, Events, backoff) of both writers:
//!   [`actuator`] (pods) and [`webhooks`] (the admission-webhook guard);
//! * [`waiting`]: the `InitializerWaiting` Event of a pod that waits long;
//! * [`server`]: `/metrics`, `/healthz`, `/readyz`, `/status`; [`secure`]: the HTTPS listener.

pub mod actuator;
mod after_restore;
mod control;
pub mod evict;
pub mod fence;
pub mod leader;
mod lifecycle;
mod node_stage;
pub mod recreate;
pub mod secure;
pub mod server;
pub mod shared;
pub mod waiting;
mod wakes;
pub mod webhooks;
pub mod write;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::client::Connection;
use crate::config::Config;
use crate::discovery::Discovery;
use crate::metrics::{Metrics, MetricsError};
use crate::owners::Owners;
use crate::supervise::{Failures, Readiness};
use crate::tracker::Tracker;
use actuator::Actuator;
use control::ControlLoop;
use fence::Fence;
use lifecycle::Lifecycle;
pub use lifecycle::SHUTDOWN_DEADLINE;
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
    life: Lifecycle,
}

/// The listeners, bound before anything starts so that a taken port leaves nothing running.
struct Listeners {
    plain: tokio::net::TcpListener,
    addr: SocketAddr,
    secure: Option<(std::net::TcpListener, SocketAddr, secure::ServingTls)>,
}

impl Listeners {
    async fn bind(config: &Config) -> Result<Listeners, RunError> {
        let listen = |source| RunError::Listen {
            addr: config.listen,
            source,
        };
        let plain = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(listen)?;
        let addr = plain.local_addr().map_err(listen)?;
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
        Ok(Listeners {
            plain,
            addr,
            secure,
        })
    }
}

/// `config` with the owner of each listed webhook that has none: its Service, read once.
async fn resolve(client: &kube::Client, discovery: &Discovery, config: Arc<Config>) -> Arc<Config> {
    let derived = webhooks::default_owners(client, discovery, &config).await;
    if derived.is_empty() {
        return config;
    }
    let mut resolved = (*config).clone();
    for (index, owner) in derived {
        resolved.webhooks[index].owner = Some(owner);
    }
    Arc::new(resolved)
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

    /// As [`Guard::start`] with an explicit identity and stall window (tests). Starts in the
    /// order bind → resolve → readers (owners, election) → writers (actuator, webhook guard,
    /// the control loop that feeds them) → servers.
    pub async fn start_with(
        client: impl Into<Connection>,
        config: Arc<Config>,
        identity: String,
        stall_after: Duration,
    ) -> Result<Guard, RunError> {
        let Connection { client, clock } = client.into();
        let listeners = Listeners::bind(&config).await?;
        // One read of discovery for every reader and writer.
        let discovery = Discovery::new(client.clone());
        let config = resolve(&client, &discovery, config).await;
        let metrics = Arc::new(Metrics::new(&config)?);
        let failures = Failures::default();
        let readiness = Readiness::default();
        let mut life = Lifecycle::new(failures.clone());

        // Readers: owners and the election (whose leadership fences every write).
        let owners = Owners::spawn(
            client.clone(),
            &discovery,
            &config,
            metrics.clone(),
            &failures,
            &readiness,
            life.token(),
        );
        let (renewed, renewed_rx) = watch::channel(None);
        let (stop_elector, stop) = oneshot::channel();
        let (leader, election) = leader::elect(
            discovery.clone(),
            &config.leader_election,
            identity.clone(),
            metrics.clone(),
            readiness.clone(),
            renewed,
            stop,
        );
        let fence = Fence::new(&config.leader_election, leader.clone(), renewed_rx);
        life.spawn_elector(election, stop_elector, fence.clone());

        let shared = Arc::new(Shared {
            config: config.clone(),
            metrics: metrics.clone(),
            owners: owners.clone(),
            identity: identity.clone(),
            leader: leader.clone(),
            readiness: readiness.clone(),
            tracker: Mutex::new(Tracker::new(config.clone()).with_clock(clock.clone())),
            stage: Mutex::new(
                crate::node_stage::stage::StageTracker::new(config.clone())
                    .with_clock(clock.clone()),
            ),
            last_progress: Mutex::new(Instant::now()),
            stall_after,
            loop_held: watch::channel(false).0,
            failures: failures.clone(),
            scrape: Mutex::new(()),
            webhooks: Mutex::new(Default::default()),
            stage_changed: Default::default(),
        });

        // Writers, and the loop that decides for the actuator.
        let webhook_clock = clock;
        let eviction = evict::EvictionVersion::default();
        let stage_discovery = discovery.clone();
        let webhook_guard = webhooks::WebhookGuard {
            client: client.clone(),
            discovery,
            config: config.clone(),
            owners,
            metrics: metrics.clone(),
            fence: fence.clone(),
            identity: identity.clone(),
            shared: shared.clone(),
            clock: webhook_clock,
            failures: failures.clone(),
            evictions: Default::default(),
            eviction: eviction.clone(),
            sweeps: Default::default(),
        };
        life.spawn_writer("webhook guard", webhook_guard.run(life.token()));
        let recreator = recreate::Recreator {
            shared: shared.clone(),
            client: client.clone(),
            fence: fence.clone(),
            eviction,
        };
        life.spawn_writer("node stage", recreator.run(life.token()));
        let (replies_tx, replies) = mpsc::unbounded_channel();
        let (actuator, worker) = Actuator::new(
            client.clone(),
            config.clone(),
            metrics,
            fence,
            identity,
            replies_tx,
            life.token(),
        );
        life.spawn_writer("actuator", worker);
        let pods_listed = readiness.pending("pods", "initial list not complete");
        let namespaces_listed = config
            .opt_in
            .selector
            .is_some()
            .then(|| readiness.pending("namespaces", "initial list not complete"));
        let control = ControlLoop::new(shared.clone(), actuator, pods_listed, namespaces_listed);
        life.spawn(
            "control loop",
            control.run(
                client.clone(),
                stage_discovery,
                replies,
                leader,
                life.token(),
            ),
        );

        // Servers, on every replica.
        let (addr, secure_addr) = (
            listeners.addr,
            listeners.secure.as_ref().map(|(_, bound, _)| *bound),
        );
        let plain = match listeners.secure {
            None => server::router(shared.clone()),
            Some((listener, _, tls)) => {
                let delegated = Arc::new(secure::Delegated::new(client.clone()));
                let app = server::secure_router(shared.clone(), delegated);
                let served = RustlsConfig::from_config(Arc::new(tls.config));
                if let Some(reload) = tls.reload {
                    life.spawn(
                        "tls reload",
                        reload.run(
                            served.clone(),
                            shared.metrics.clone(),
                            secure::RELOAD_EVERY,
                            life.token(),
                        ),
                    );
                }
                life.spawn(
                    "https server",
                    server::serve_tls(listener, served, app, life.token()),
                );
                server::health_router(shared.clone())
            }
        };
        life.spawn(
            "http server",
            server::serve(listeners.plain, plain, life.token()),
        );
        info!(%addr, secure_addr = ?secure_addr, mechanism = config.mechanism.as_str(), dry_run = config.dry_run, "initguard started");
        Ok(Guard {
            shared,
            addr,
            secure_addr,
            life,
        })
    }

    /// Stop taking decisions, let the writers finish what is in flight, then release the
    /// lease, all within [`SHUTDOWN_DEADLINE`].
    pub async fn shutdown(self) {
        self.life.shutdown(SHUTDOWN_DEADLINE).await;
    }

    /// Die abruptly, as on SIGKILL: no draining, no lease release (failover tests).
    pub fn kill(self) {
        self.life.kill();
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
