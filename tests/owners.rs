//! Owners' liveness end to end: http probes against a local axum server, and watches against
//! the simulated API server.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use initguard::config::Config;
use initguard::metrics::Metrics;
use initguard::owners::Owners;
use initguard::policy::OwnerState;
use tokio_util::sync::CancellationToken;

/// Longest any expected state change may take in these tests.
const PATIENCE: Duration = Duration::from_secs(5);

fn config(yaml: &str) -> Config {
    Config::from_yaml_str(yaml, "test.yaml").unwrap()
}

/// Wait until `pred` holds for the state of `initializer`'s owner; panics after [`PATIENCE`].
async fn wait_state(
    owners: &Owners,
    initializer: &str,
    pred: impl Fn(OwnerState) -> bool,
) -> OwnerState {
    let mut changes = owners.subscribe();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let state = owners.state(initializer);
        if pred(state) {
            return state;
        }
        if tokio::time::timeout_at(deadline, changes.changed())
            .await
            .is_err()
        {
            panic!("{initializer}: still {state:?} after {PATIENCE:?}");
        }
    }
}

fn is_up(state: OwnerState) -> bool {
    matches!(state, OwnerState::Up { .. })
}

fn is_down(state: OwnerState) -> bool {
    matches!(state, OwnerState::Down { .. })
}

fn since(state: OwnerState) -> SystemTime {
    match state {
        OwnerState::Up { since } | OwnerState::Down { since } => since,
        OwnerState::Unknown => panic!("no since in Unknown"),
    }
}

/// The `initguard_owner_up` value for one initializer, None when the series is absent.
fn owner_up_metric(metrics: &Metrics, initializer: &str, kind: &str) -> Option<i64> {
    let text = metrics.render().unwrap();
    let prefix =
        format!("initguard_owner_up{{initializer=\"{initializer}\",owner_kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

/// A kube client for an API server that is not there.
fn unreachable_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

mod http {
    use std::sync::atomic::{AtomicU8, Ordering};

    use axum::Router;
    use axum::extract::State;
    use axum::http::StatusCode;
    use axum::routing::get;

    use super::*;

    const OK: u8 = 0;
    const FAIL: u8 = 1;
    const HANG: u8 = 2;

    /// A health endpoint answering 200, 500 or nothing for 3 s, as `mode` says.
    async fn health_server() -> (String, Arc<AtomicU8>) {
        let mode = Arc::new(AtomicU8::new(OK));
        let app = Router::new()
            .route(
                "/healthz",
                get(|State(mode): State<Arc<AtomicU8>>| async move {
                    match mode.load(Ordering::SeqCst) {
                        OK => StatusCode::OK,
                        FAIL => StatusCode::INTERNAL_SERVER_ERROR,
                        _ => {
                            tokio::time::sleep(Duration::from_secs(3)).await;
                            StatusCode::OK
                        }
                    }
                }),
            )
            .with_state(mode.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{addr}/healthz"), mode)
    }

    #[tokio::test]
    async fn follows_status_codes_and_timeouts() {
        let (url, mode) = health_server().await;
        let config = config(&format!(
            "initializers:\n  - name: legacy.example.com\n    probeInterval: 100ms\n    owner: {{ http: \"{url}\" }}\n"
        ));
        let metrics = Arc::new(Metrics::new(&config).unwrap());
        let cancel = CancellationToken::new();
        let owners = Owners::spawn(
            unreachable_client(),
            &config,
            metrics.clone(),
            cancel.clone(),
        );

        let up = wait_state(&owners, "legacy.example.com", is_up).await;
        assert!(owners.not_synced().is_empty());
        assert_eq!(
            owner_up_metric(&metrics, "legacy.example.com", "http"),
            Some(1)
        );

        mode.store(FAIL, Ordering::SeqCst);
        let down = wait_state(&owners, "legacy.example.com", is_down).await;
        assert!(since(down) > since(up));
        assert_eq!(
            owner_up_metric(&metrics, "legacy.example.com", "http"),
            Some(0)
        );

        mode.store(OK, Ordering::SeqCst);
        let up_again = wait_state(&owners, "legacy.example.com", is_up).await;
        assert!(since(up_again) > since(down));

        // A hang longer than the 1 s probe timeout is down; it takes about that long to tell.
        mode.store(HANG, Ordering::SeqCst);
        let hung = tokio::time::Instant::now();
        let down = wait_state(&owners, "legacy.example.com", is_down).await;
        let took = hung.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
            "timeout noticed after {took:?}"
        );
        assert!(since(down) > since(up_again));
        cancel.cancel();
    }

    #[tokio::test]
    async fn unreachable_endpoint_is_down_and_https_is_spoken() {
        // Nothing listens on port 1. The "https" server records the first byte it receives
        // (0x16 opens a TLS handshake) and hangs up, so the handshake fails.
        let tls = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let https = format!("https://{}/healthz", tls.local_addr().unwrap());
        let (first_byte, mut first_bytes) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            while let Ok((mut conn, _)) = tls.accept().await {
                let mut byte = [0u8; 1];
                if conn.read_exact(&mut byte).await.is_ok() {
                    let _ = first_byte.send(byte[0]);
                }
            }
        });
        let config = config(&format!(
            "initializers:
  - name: refused.example.com
    probeInterval: 100ms
    owner: {{ http: \"http://127.0.0.1:1/healthz\" }}
  - name: tls.example.com
    probeInterval: 100ms
    owner: {{ http: \"{https}\" }}
"
        ));
        let metrics = Arc::new(Metrics::new(&config).unwrap());
        let cancel = CancellationToken::new();
        let owners = Owners::spawn(unreachable_client(), &config, metrics, cancel.clone());
        wait_state(&owners, "refused.example.com", is_down).await;
        wait_state(&owners, "tls.example.com", is_down).await;
        assert_eq!(first_bytes.recv().await, Some(0x16), "a TLS ClientHello");
        cancel.cancel();
    }
}

mod unreachable_api {
    use super::*;

    #[tokio::test]
    async fn owners_stay_unknown_and_errors_are_counted() {
        let config = config(
            "initializers:
  - name: sidecar.example.com
    owner: { deployment: kube-system/sidecar-injector }
  - name: kueue.x-k8s.io/admission
    owner: { lease: kueue-system/leader }
  - name: quota.example.com
    owner: { pods: { namespace: quota-system, selector: app=quota } }
  - name: audit.example.com
",
        );
        let metrics = Arc::new(Metrics::new(&config).unwrap());
        let cancel = CancellationToken::new();
        let owners = Owners::spawn(
            unreachable_client(),
            &config,
            metrics.clone(),
            cancel.clone(),
        );

        // Every watcher fails its first list at once; give them time to fail a few times.
        let restarts = || {
            ["deployments", "leases", "pods"].map(|r| {
                metrics
                    .watch_restarts_total
                    .get_metric_with_label_values(&[r])
                    .unwrap()
                    .get()
            })
        };
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while restarts().contains(&0) {
            assert!(tokio::time::Instant::now() < deadline, "{:?}", restarts());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        for name in [
            "sidecar.example.com",
            "kueue.x-k8s.io/admission",
            "quota.example.com",
            "audit.example.com",
        ] {
            assert_eq!(owners.state(name), OwnerState::Unknown, "{name}");
            assert_eq!(owner_up_metric(&metrics, name, "deployment"), None);
        }
        assert_eq!(
            owners.not_synced(),
            [
                "deployment kube-system/sidecar-injector",
                "lease kueue-system/leader",
                "pods quota-system/app=quota",
            ]
        );
        let snapshot = owners.snapshot();
        assert_eq!(snapshot.len(), 3);
        assert!(snapshot.iter().all(|r| r.state == OwnerState::Unknown));
        cancel.cancel();
    }
}
