//! Owners' liveness end to end: http probes against a local axum server, and watches against
//! the simulated API server.

use initguard_sim::SimClients as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use initguard::config::Config;
use initguard::metrics::Metrics;
use initguard::owners::Owners;
use initguard::policy::OwnerState;
use tokio_util::sync::CancellationToken;

use initguard_test_support::wait;
use wait::PATIENCE;

fn config(yaml: &str) -> Config {
    initguard::config::from_yaml_str(yaml, "test.yaml").unwrap()
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

/// The `state` label whose `initguard_owner_state` series is 1 (exactly one must be).
fn owner_state_metric(metrics: &Metrics, initializer: &str, kind: &str) -> String {
    let text = metrics.render().unwrap();
    let prefix = format!(
        "initguard_owner_state{{initializer=\"{initializer}\",owner_kind=\"{kind}\",state=\""
    );
    let current: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter(|rest| rest.ends_with("} 1"))
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect();
    assert_eq!(current.len(), 1, "{text}");
    current[0].clone()
}

/// Wait until every owner has been observed once; panics after [`PATIENCE`].
async fn wait_synced(owners: &Owners) {
    tokio::time::timeout(PATIENCE, owners.wait_synced())
        .await
        .unwrap_or_else(|_| panic!("owners not synced: {:?}", owners.not_synced()));
}

/// Owners of `config` whose API client reaches nothing (probes of http owners still run),
/// with their metrics and the token that stops them.
fn spawn_unreachable(config: &Config) -> (Owners, Arc<Metrics>, CancellationToken) {
    let metrics = Arc::new(Metrics::new(config).unwrap());
    let cancel = CancellationToken::new();
    let owners = Owners::spawn(
        unreachable_client(),
        &initguard::discovery::Discovery::new(unreachable_client()),
        config,
        metrics.clone(),
        &initguard::supervise::Failures::default(),
        &initguard::supervise::Readiness::default(),
        cancel.clone(),
    );
    (owners, metrics, cancel)
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
            "initializers:
  - name: legacy.example.com
    probeInterval: 100ms
    owner: {{ http: \"{url}\" }}
"
        ));
        let (owners, metrics, cancel) = spawn_unreachable(&config);

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

        // A hang longer than the 1 s probe timeout is down, and not before the timeout ran
        // out (how much later depends on machine load).
        mode.store(HANG, Ordering::SeqCst);
        let hung = tokio::time::Instant::now();
        let down = wait_state(&owners, "legacy.example.com", is_down).await;
        let took = hung.elapsed();
        assert!(
            took >= Duration::from_millis(900),
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
        let (owners, _, cancel) = spawn_unreachable(&config);
        wait_state(&owners, "refused.example.com", is_down).await;
        wait_state(&owners, "tls.example.com", is_down).await;
        assert_eq!(first_bytes.recv().await, Some(0x16), "a TLS ClientHello");
        cancel.cancel();
    }
}

/// https owners with a private CA and client certificates, against `openssl s_server` on
/// 127.0.0.1 with certificates generated by the openssl CLI for each test.
mod https {
    use std::path::{Path, PathBuf};
    use std::process::Stdio;
    use std::sync::Mutex;

    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::process::{Child, Command};

    use super::*;
    use initguard_test_support::pki::{ca, leaf};

    /// `openssl s_server -www` on a fresh 127.0.0.1 port, requiring a client certificate
    /// signed by `ca`; killed when dropped.
    async fn tls_server(dir: &Path) -> (String, Child) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new("openssl")
            .args(["s_server", "-accept", &format!("127.0.0.1:{port}")])
            .args(["-cert", "server.pem", "-key", "server.key", "-www"])
            .args(["-Verify", "1", "-verify_return_error", "-CAfile", "ca.pem"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("openssl s_server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::time::timeout(PATIENCE, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("ACCEPT") {
                    return;
                }
            }
            panic!("s_server exited before accepting");
        })
        .await
        .expect("s_server to listen");
        // Keep draining its output so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (format!("https://127.0.0.1:{port}/"), child)
    }

    fn certificates() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ca(d, "ca");
        ca(d, "other-ca");
        leaf(
            d,
            "ca",
            "server",
            "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        leaf(
            d,
            "ca",
            "client",
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        );
        dir
    }

    /// Every log line of this test binary, from the global subscriber [`logs`] installs.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    /// The binary-wide log capture. A global subscriber, not a thread-local one: with
    /// `set_default`, a callsite first reached by another test thread (no subscriber) could
    /// cache "never interested" between our rebuild and our event, and the line was lost
    /// about one run in six. Tests tell their lines apart by names only they use.
    fn logs() -> Capture {
        static LOGS: std::sync::OnceLock<Capture> = std::sync::OnceLock::new();
        LOGS.get_or_init(|| {
            let logs = Capture::default();
            let writer = logs.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
            logs
        })
        .clone()
    }

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Capture {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    fn path(dir: &Path, file: &str) -> PathBuf {
        dir.join(file)
    }

    /// The right CA and a client certificate: up. The wrong CA, or the platform's roots for a
    /// private CA: down, logged as a rejected certificate. No client certificate where the
    /// server demands one: down.
    #[tokio::test]
    async fn probes_verify_the_ca_and_present_the_client_certificate() {
        let dir = certificates();
        let d = dir.path();
        let (url, _server) = tls_server(d).await;
        let file = |f: &str| path(d, f).display().to_string();
        let config = config(&format!(
            "defaults: {{ probeInterval: 300ms }}
initializers:
  - name: right.example.com
    owner: {{ http: {{ url: \"{url}\", caFile: \"{ca}\", certFile: \"{cert}\", keyFile: \"{key}\" }} }}
  - name: wrong.example.com
    owner: {{ http: {{ url: \"{url}\", caFile: \"{other}\", certFile: \"{cert}\", keyFile: \"{key}\" }} }}
  - name: platform.example.com
    owner: {{ http: \"{url}\" }}
  - name: anonymous.example.com
    owner: {{ http: {{ url: \"{url}\", caFile: \"{ca}\" }} }}
",
            ca = file("ca.pem"),
            other = file("other-ca.pem"),
            cert = file("client.pem"),
            key = file("client.key"),
        ));
        let logs = logs();

        let (owners, _, cancel) = spawn_unreachable(&config);
        wait_state(&owners, "right.example.com", is_up).await;
        wait_state(&owners, "wrong.example.com", is_down).await;
        wait_state(&owners, "platform.example.com", is_down).await;
        wait_state(&owners, "anonymous.example.com", is_down).await;
        cancel.cancel();

        let detail = |name: &str| {
            owners
                .snapshot()
                .into_iter()
                .find(|r| r.initializer == name)
                .unwrap()
                .detail
        };
        let wrong = detail("wrong.example.com");
        assert!(wrong.contains("certificate was rejected"), "{wrong}");
        let log = logs.text();
        let line = log
            .lines()
            .find(|l| l.contains("wrong.example.com") && l.contains("owner is down"))
            .unwrap_or_else(|| panic!("no down line for wrong.example.com:\n{log}"));
        assert!(line.contains("certificate was rejected"), "{line}");
        let anonymous = detail("anonymous.example.com");
        assert!(
            !anonymous.contains("certificate was rejected"),
            "{anonymous}"
        );
    }

    /// A TLS file that vanished after the config was checked: the prober cannot build its
    /// client, says so at error level naming the initializer and the file, and the owner stays
    /// unknown (never down: nobody was asked).
    #[tokio::test]
    async fn an_owner_that_cannot_be_probed_is_logged_and_stays_unknown() {
        let dir = certificates();
        let d = dir.path();
        let ca = path(d, "vanishing-ca.pem");
        std::fs::copy(path(d, "ca.pem"), &ca).unwrap();
        let config = config(&format!(
            "initializers:
  - name: vanished.example.com
    owner: {{ http: {{ url: \"https://127.0.0.1:9/healthz\", caFile: \"{}\" }} }}
",
            ca.display()
        ));
        std::fs::remove_file(&ca).unwrap();
        let logs = logs();
        let (owners, _, cancel) = spawn_unreachable(&config);
        let line = wait::eventually(
            "the cannot-be-probed error for vanished.example.com",
            || {
                logs.text()
                    .lines()
                    .find(|l| l.contains("vanished.example.com") && l.contains("cannot be probed"))
                    .map(str::to_owned)
            },
        )
        .await;
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains("vanishing-ca.pem"), "{line}");
        // The prober has given up for good (it logged and returned): no state can follow.
        assert_eq!(owners.state("vanished.example.com"), OwnerState::Unknown);
        cancel.cancel();
    }

    fn config_error(yaml: &str) -> String {
        initguard::config::from_yaml_str(yaml, "test.yaml")
            .map(|_| ())
            .unwrap_err()
            .to_string()
    }

    /// Bad or missing TLS files are located configuration errors, not an owner that can never
    /// be probed.
    #[test]
    fn tls_files_are_checked_with_their_location() {
        let dir = certificates();
        let d = dir.path();
        let file = |f: &str| path(d, f).display().to_string();
        std::fs::write(d.join("garbage.pem"), "not a certificate\n").unwrap();
        let entry =
            |owner: &str| format!("initializers:\n  - name: a.example.com\n    owner: {owner}\n");

        let missing = config_error(&entry(&format!(
            "{{ http: {{ url: \"https://10.0.0.5/\", caFile: \"{}\" }} }}",
            file("absent.pem")
        )));
        assert!(missing.contains("test.yaml:3:"), "{missing}");
        assert!(
            missing.contains("initializers[0].owner.http.caFile: cannot read"),
            "{missing}"
        );

        let garbage = config_error(&entry(&format!(
            "{{ http: {{ url: \"https://10.0.0.5/\", caFile: \"{}\" }} }}",
            file("garbage.pem")
        )));
        assert!(garbage.contains("no PEM CERTIFICATE block"), "{garbage}");

        let key_as_cert = config_error(&entry(&format!(
            "{{ http: {{ url: \"https://10.0.0.5/\", certFile: \"{}\", keyFile: \"{}\" }} }}",
            file("client.key"),
            file("client.key")
        )));
        assert!(key_as_cert.contains("http.certFile"), "{key_as_cert}");

        let half = config_error(&entry(&format!(
            "{{ http: {{ url: \"https://10.0.0.5/\", certFile: \"{}\" }} }}",
            file("client.pem")
        )));
        assert!(half.contains("both certFile and keyFile"), "{half}");

        let plain = config_error(&entry(&format!(
            "{{ http: {{ url: \"http://10.0.0.5/\", caFile: \"{}\" }} }}",
            file("ca.pem")
        )));
        assert!(
            plain.contains("only https:// URLs use TLS files"),
            "{plain}"
        );

        let unknown = config_error(&entry(
            "{ http: { url: \"https://10.0.0.5/\", insecure: true } }",
        ));
        assert!(unknown.contains("unknown field `insecure`"), "{unknown}");

        let no_url = config_error(&entry("{ http: { caFile: \"/x\" } }"));
        assert!(no_url.contains("expected a url key"), "{no_url}");

        let good = initguard::config::from_yaml_str(
            &entry(&format!(
                "{{ http: {{ url: \"https://10.0.0.5/\", caFile: \"{}\", certFile: \"{}\", keyFile: \"{}\" }} }}",
                file("ca.pem"),
                file("client.pem"),
                file("client.key")
            )),
            "test.yaml",
        )
        .unwrap();
        let summary = good.summary();
        assert!(summary.contains("caFile"), "{summary}");
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
        let (owners, metrics, cancel) = spawn_unreachable(&config);

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
        // Readiness waits on this: it must not resolve while owners were never observed
        // (failed lists are not observations). Nothing can sync them here, so any answer
        // within the window would be wrong; the window only bounds the test.
        assert!(
            tokio::time::timeout(Duration::from_millis(500), owners.wait_synced())
                .await
                .is_err(),
            "wait_synced resolved with owners never observed: {:?}",
            owners.not_synced()
        );
        cancel.cancel();
    }
}

mod sim {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use kube::Api;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    use kube_sim::{Sim, SimOptions};
    use serde_json::json;

    use super::*;

    /// A simulated cluster, the guard's owners watching it, and a client to change it.
    struct Harness {
        sim: Sim,
        owners: Owners,
        metrics: Arc<Metrics>,
        cancel: CancellationToken,
        client: kube::Client,
    }

    impl Drop for Harness {
        fn drop(&mut self) {
            self.cancel.cancel();
        }
    }

    async fn harness(yaml: &str, namespaces: &[&str]) -> Harness {
        let sim = Sim::start(SimOptions::default()).await.unwrap();
        let client = sim.client("tester");
        for ns in namespaces {
            let api: Api<Namespace> = Api::all(client.clone());
            let ns = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            match api.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("creating namespace: {e}"),
            }
        }
        let config = config(yaml);
        let metrics = Arc::new(Metrics::new(&config).unwrap());
        let cancel = CancellationToken::new();
        let owners = Owners::spawn(
            sim.client("initguard"),
            &initguard::discovery::Discovery::new(sim.client("initguard")),
            &config,
            metrics.clone(),
            &initguard::supervise::Failures::default(),
            &initguard::supervise::Readiness::default(),
            cancel.clone(),
        );
        Harness {
            sim,
            owners,
            metrics,
            cancel,
            client,
        }
    }

    impl Harness {
        /// The guard's requests with this verb on this resource.
        fn guard_requests(&self, verb: &str, resource: &str) -> usize {
            self.sim
                .requests()
                .iter()
                .filter(|r| r.user == "initguard" && r.verb == verb && r.resource == resource)
                .count()
        }

        fn restarts(&self, resource: &str) -> u64 {
            self.metrics
                .watch_restarts_total
                .get_metric_with_label_values(&[resource])
                .unwrap()
                .get()
        }
    }

    async fn create_deployment(api: &Api<Deployment>, name: &str) {
        let d = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]},
                },
            },
        }))
        .unwrap();
        api.create(&PostParams::default(), &d).await.unwrap();
    }

    async fn set_available(api: &Api<Deployment>, name: &str, available: i32) {
        let status = json!({"status": {"replicas": 1, "availableReplicas": available}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    const DEPLOYMENT_CONFIG: &str = "initializers:
  - name: sidecar.example.com
    owner: { deployment: kube-system/sidecar-injector }
";

    #[tokio::test]
    async fn deployment_flips_with_available_replicas() {
        let h = harness(DEPLOYMENT_CONFIG, &[]).await;
        let api: Api<Deployment> = Api::namespaced(h.client.clone(), "kube-system");
        // Another deployment in the namespace is none of its business.
        create_deployment(&api, "unrelated").await;
        set_available(&api, "unrelated", 1).await;

        // Missing after the initial list: unknown (never read), not down.
        wait_synced(&h.owners).await;
        assert_eq!(h.owners.state("sidecar.example.com"), OwnerState::Unknown);
        assert_eq!(h.owners.snapshot()[0].detail, "deployment not found");
        assert_eq!(
            owner_state_metric(&h.metrics, "sidecar.example.com", "deployment"),
            "unknown"
        );

        create_deployment(&api, "sidecar-injector").await;
        set_available(&api, "sidecar-injector", 1).await;
        let up = wait_state(&h.owners, "sidecar.example.com", is_up).await;
        assert_eq!(
            owner_up_metric(&h.metrics, "sidecar.example.com", "deployment"),
            Some(1)
        );

        set_available(&api, "sidecar-injector", 0).await;
        let down = wait_state(&h.owners, "sidecar.example.com", is_down).await;
        assert!(since(down) > since(up));
        assert_eq!(
            owner_up_metric(&h.metrics, "sidecar.example.com", "deployment"),
            Some(0)
        );

        set_available(&api, "sidecar-injector", 1).await;
        let up_again = wait_state(&h.owners, "sidecar.example.com", is_up).await;
        assert!(since(up_again) > since(down));

        // Deleted after it was seen: down.
        api.delete("sidecar-injector", &DeleteParams::default())
            .await
            .unwrap();
        wait_state(&h.owners, "sidecar.example.com", is_down).await;

        let snapshot = serde_json::to_value(h.owners.snapshot()).unwrap();
        assert_eq!(snapshot[0]["initializer"], "sidecar.example.com");
        assert_eq!(snapshot[0]["ownerKind"], "deployment");
        assert_eq!(snapshot[0]["target"], "kube-system/sidecar-injector");
        assert_eq!(snapshot[0]["state"], "down");
        assert!(
            snapshot[0]["detail"]
                .as_str()
                .unwrap()
                .contains("deleted after it was seen"),
            "{snapshot}"
        );
        assert_eq!(
            owner_state_metric(&h.metrics, "sidecar.example.com", "deployment"),
            "down"
        );
    }

    /// Leases are judged by when the guard saw them renewed, on its own clock: a holder whose
    /// clock is a minute behind or ahead of ours is up while it renews and down one duration
    /// after it stops, never early and never late by the skew. Judged against the server's
    /// record of the last renewal and the test's own observations of the state, never the
    /// module's own `since`: no observation after the last renewal sees it down before the
    /// lease ran out, and none sees it still up half the skew after (a guard that trusted the
    /// holder's `renewTime` would be down at once behind, and a minute late ahead).
    #[tokio::test]
    async fn lease_liveness_ignores_the_holders_clock() {
        const DURATION: Duration = Duration::from_secs(2);
        for (skew, name) in [(-60i64, "behind"), (60, "ahead")] {
            let h = harness(
                "initializers:
  - name: kueue.x-k8s.io/admission
    owner: { lease: kueue-system/leader }
",
                &["kueue-system"],
            )
            .await;
            let api: Api<Lease> = Api::namespaced(h.client.clone(), "kueue-system");
            let holder_now = || {
                let now = SystemTime::now();
                let t = if skew < 0 {
                    now - Duration::from_secs(skew.unsigned_abs())
                } else {
                    now + Duration::from_secs(skew.unsigned_abs())
                };
                humantime::format_rfc3339_micros(t).to_string()
            };
            let lease = serde_json::from_value(json!({
                "metadata": {"name": "leader"},
                "spec": {
                    "holderIdentity": "kueue-0",
                    "leaseDurationSeconds": DURATION.as_secs(),
                    "renewTime": holder_now(),
                },
            }))
            .unwrap();
            api.create(&PostParams::default(), &lease).await.unwrap();
            let up = wait_state(&h.owners, "kueue.x-k8s.io/admission", is_up).await;

            // Renew every 500 ms for 3 s (longer than the duration): never down meanwhile.
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let patch = json!({"spec": {"renewTime": holder_now()}});
                api.patch("leader", &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
                assert_eq!(
                    h.owners.state("kueue.x-k8s.io/admission"),
                    up,
                    "clock {name}: a renewing holder must stay up"
                );
            }
            let renewed = h
                .sim
                .requests()
                .iter()
                .rev()
                .find(|r| r.verb == "patch" && r.resource == "leases")
                .map(|r| r.time)
                .expect("the server recorded the renewals");
            let expiry = renewed + DURATION;
            let too_late = expiry + Duration::from_secs(skew.unsigned_abs() / 2);

            // Renewals stop. Observed every 10 ms until down: each observation is dated
            // after it is made, so a slow machine makes them sparse, never wrong.
            loop {
                let state = h.owners.state("kueue.x-k8s.io/admission");
                let seen = SystemTime::now();
                if is_down(state) {
                    assert!(
                        seen >= expiry,
                        "clock {name}: seen down {:?} before the lease ran out",
                        expiry.duration_since(seen).unwrap_or_default()
                    );
                    break;
                }
                assert!(
                    seen < too_late,
                    "clock {name}: still {state:?} {:?} after the last renewal the server \
                     recorded (the lease ran out {DURATION:?} after it)",
                    seen.duration_since(renewed).unwrap_or_default()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// A Lease deleted after it was seen is down at once, however long its duration.
    #[tokio::test]
    async fn deleted_lease_is_down_and_missing_lease_unknown() {
        let h = harness(
            "initializers:
  - name: kueue.x-k8s.io/admission
    owner: { lease: kueue-system/leader }
",
            &["kueue-system"],
        )
        .await;
        wait_synced(&h.owners).await;
        assert_eq!(
            h.owners.state("kueue.x-k8s.io/admission"),
            OwnerState::Unknown
        );
        assert_eq!(h.owners.snapshot()[0].detail, "lease not found");
        let api: Api<Lease> = Api::namespaced(h.client.clone(), "kueue-system");
        let lease = serde_json::from_value(json!({
            "metadata": {"name": "leader"},
            "spec": {
                "holderIdentity": "kueue-0",
                "leaseDurationSeconds": 3600,
                "renewTime": humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            },
        }))
        .unwrap();
        api.create(&PostParams::default(), &lease).await.unwrap();
        wait_state(&h.owners, "kueue.x-k8s.io/admission", is_up).await;
        api.delete("leader", &DeleteParams::default())
            .await
            .unwrap();
        wait_state(&h.owners, "kueue.x-k8s.io/admission", is_down).await;
    }

    #[tokio::test]
    async fn lease_goes_down_at_expiry_without_any_event() {
        let h = harness(
            "initializers:
  - name: kueue.x-k8s.io/admission
    owner: { lease: kueue-system/leader }
",
            &["kueue-system"],
        )
        .await;
        let api: Api<Lease> = Api::namespaced(h.client.clone(), "kueue-system");
        let micros = |t: SystemTime| humantime::format_rfc3339_micros(t).to_string();
        let lease = serde_json::from_value(json!({
            "metadata": {"name": "leader"},
            "spec": {
                "holderIdentity": "kueue-0",
                "leaseDurationSeconds": 1,
                "renewTime": micros(SystemTime::now()),
            },
        }))
        .unwrap();
        api.create(&PostParams::default(), &lease).await.unwrap();
        let up = wait_state(&h.owners, "kueue.x-k8s.io/admission", is_up).await;

        // Renew twice, half a duration apart: the owner stays up past the first expiry.
        let mut renewed = SystemTime::now();
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            renewed = SystemTime::now();
            let patch = json!({"spec": {"renewTime": micros(renewed)}});
            api.patch("leader", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
        assert_eq!(h.owners.state("kueue.x-k8s.io/admission"), up);
        let last_write = h.sim.resource_version();

        let down = wait_state(&h.owners, "kueue.x-k8s.io/admission", is_down).await;
        let expiry = renewed + Duration::from_secs(1);
        let late = since(down)
            .duration_since(expiry)
            .unwrap_or_else(|e| panic!("down {:?} before expiry", e.duration()));
        // On its own timer: nothing changed in the cluster and nobody asked the server
        // anything since the last renewal (no poll, no re-list). How late the timer fires is
        // the machine's speed, printed, not bounded.
        assert_eq!(
            h.sim.resource_version(),
            last_write,
            "nothing changed in the cluster"
        );
        let requests = h.sim.requests();
        let renewal = requests
            .iter()
            .rposition(|r| r.verb == "patch" && r.resource == "leases")
            .unwrap_or_else(|| panic!("no renewal in the request log: {requests:#?}"));
        assert_eq!(
            &requests[renewal + 1..],
            &[],
            "requests after the last renewal, before the lease was seen down"
        );
        eprintln!("lease seen down {late:?} after its expiry");
        assert_eq!(
            owner_up_metric(&h.metrics, "kueue.x-k8s.io/admission", "lease"),
            Some(0)
        );

        // A renewal brings it back.
        let patch =
            json!({"spec": {"renewTime": micros(SystemTime::now()), "leaseDurationSeconds": 30}});
        api.patch("leader", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        wait_state(&h.owners, "kueue.x-k8s.io/admission", is_up).await;

        // A lease without renewTime is down.
        let patch = json!({"spec": {"renewTime": null}});
        api.patch("leader", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        wait_state(&h.owners, "kueue.x-k8s.io/admission", is_down).await;
    }

    /// Wait until the pod is gone from the API (deletion may be graceful).
    async fn until_gone(api: &Api<Pod>, name: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while api.get_opt(name).await.unwrap().is_some() {
            assert!(tokio::time::Instant::now() < deadline, "{name} not deleted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn owner_pod(name: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "quota"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap()
    }

    async fn set_ready(api: &Api<Pod>, name: &str, ready: bool) {
        let status = if ready { "True" } else { "False" };
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn pods_owner_follows_the_ready_condition() {
        let h = harness(
            "initializers:
  - name: quota.example.com
    owner: { pods: { namespace: quota-system, selector: app=quota } }
",
            &["quota-system"],
        )
        .await;
        let api: Api<Pod> = Api::namespaced(h.client.clone(), "quota-system");
        // No matching pod yet: unknown. A Ready pod without the label does not count.
        let mut other = owner_pod("other");
        other.metadata.labels = None;
        api.create(&PostParams::default(), &other).await.unwrap();
        wait_synced(&h.owners).await;
        assert_eq!(h.owners.state("quota.example.com"), OwnerState::Unknown);

        // The simulated scheduler and kubelet make the pod Running and Ready.
        api.create(&PostParams::default(), &owner_pod("quota-0"))
            .await
            .unwrap();
        let up = wait_state(&h.owners, "quota.example.com", is_up).await;

        set_ready(&api, "quota-0", false).await;
        let down = wait_state(&h.owners, "quota.example.com", is_down).await;
        assert!(since(down) > since(up));

        // One Ready pod out of two is enough.
        api.create(&PostParams::default(), &owner_pod("quota-1"))
            .await
            .unwrap();
        let up = wait_state(&h.owners, "quota.example.com", is_up).await;
        // Each change judged once the module has seen it (its own count of Ready pods),
        // never after a pause.
        let seen = |detail: &'static str| {
            let owners = h.owners.clone();
            async move {
                wait::until(format!("the owner module to see {detail}"), || {
                    owners.snapshot()[0].detail.contains(detail)
                })
                .await
            }
        };
        set_ready(&api, "quota-0", true).await;
        seen("2 of 2 matching pods Ready").await;
        assert_eq!(h.owners.state("quota.example.com"), up);
        set_ready(&api, "quota-1", false).await;
        seen("1 of 2 matching pods Ready").await;
        assert_eq!(h.owners.state("quota.example.com"), up);

        // Only a non-Ready pod left: down; then every seen pod deleted: still down.
        api.delete("quota-0", &DeleteParams::default())
            .await
            .unwrap();
        let down = wait_state(&h.owners, "quota.example.com", is_down).await;
        api.delete("quota-1", &DeleteParams::default())
            .await
            .unwrap();
        until_gone(&api, "quota-1").await;
        seen("deleted after it was seen (no matching pod)").await;
        assert_eq!(h.owners.state("quota.example.com"), down);
    }

    /// `check-config --kubeconfig` on the node stage's `daemonset` owners: on how many nodes
    /// each has a Ready pod (a warning at none), and a DaemonSet that does not exist is an
    /// error (exit 1).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn check_config_counts_the_nodes_of_daemonset_owners() {
        let h = harness("initializers: []\n", &["istio-system", "linkerd-cni"]).await;
        let create = |ns: &'static str, body: serde_json::Value| {
            let client = h.client.clone();
            async move {
                let api: Api<k8s_openapi::api::apps::v1::DaemonSet> = Api::namespaced(client, ns);
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(body).unwrap(),
                )
                .await
                .unwrap()
            }
        };
        let ds = |name: &str| {
            json!({"metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
        };
        let istio = create("istio-system", ds("istio-cni-node")).await;
        create("linkerd-cni", ds("linkerd-cni")).await;
        // One Ready agent of istio-cni-node; a pod with its labels but another controller
        // does not count.
        let pods: Api<Pod> = Api::namespaced(h.client.clone(), "istio-system");
        for (name, uid) in [
            ("agent-0", istio.metadata.uid.clone().unwrap()),
            ("impostor", "someone-else".to_owned()),
        ] {
            let pod = json!({"metadata": {"name": name, "labels": {"app": "istio-cni-node"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "name": "istio-cni-node", "uid": uid, "controller": true}]},
                "spec": {"containers": [{"name": "c", "image": "i"}]}});
            pods.create(
                &PostParams::default(),
                &serde_json::from_value(pod).unwrap(),
            )
            .await
            .unwrap();
        }
        wait::eventually_async("the agent Ready", || async {
            pods.get("agent-0").await.ok().filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        h.sim.write_kubeconfig(&kubeconfig, "checker").unwrap();
        let run = |yaml: &str| {
            let config = dir.path().join("config.yaml");
            std::fs::write(&config, yaml).unwrap();
            let kubeconfig = kubeconfig.clone();
            async move {
                let out = tokio::time::timeout(
                    Duration::from_secs(30),
                    tokio::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
                        .arg("check-config")
                        .arg(&config)
                        .arg("--kubeconfig")
                        .arg(&kubeconfig)
                        .kill_on_drop(true)
                        .output(),
                )
                .await
                .expect("check-config to finish")
                .unwrap();
                (
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
            }
        };
        let (code, stdout, stderr) = run("initContainers:
  - name: istio-validation
    owner: { daemonset: istio-system/istio-cni-node }
  - name: linkerd-network-validator
    owner: { daemonset: linkerd-cni/linkerd-cni }
")
        .await;
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        assert!(
            stdout.contains(
                "note: owner daemonset istio-system/istio-cni-node (of init container \
                 istio-validation) has a Ready pod on 1 node(s)"
            ),
            "{stdout}"
        );
        assert!(
            stdout.contains(
                "warning: owner daemonset linkerd-cni/linkerd-cni (of init container \
                 linkerd-network-validator) has a Ready pod on no node"
            ),
            "{stdout}"
        );
        let (code, stdout, stderr) = run("initContainers:
  - name: istio-validation
    owner: { daemonset: istio-system/istio-cni-nod }
")
        .await;
        assert_eq!(code, Some(1), "{stdout}{stderr}");
        assert!(
            stderr.contains(
                "error: owner daemonset istio-system/istio-cni-nod (of init container \
                 istio-validation) does not exist"
            ),
            "{stderr}"
        );
    }

    /// `initguard check-config --kubeconfig` warns about listed owners missing from the
    /// cluster (exit 0: the configuration itself is valid), and fails with exit 1 when the
    /// cluster cannot be reached.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn check_config_reports_missing_owners() {
        let h = harness("initializers: []\n", &["kueue-system", "quota-system"]).await;
        let api: Api<Deployment> = Api::namespaced(h.client.clone(), "kube-system");
        create_deployment(&api, "sidecar-injector").await;
        let pods: Api<Pod> = Api::namespaced(h.client.clone(), "quota-system");
        pods.create(&PostParams::default(), &owner_pod("quota-0"))
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        // A user of its own, so its requests are told apart from the harness's watchers'.
        h.sim.write_kubeconfig(&kubeconfig, "checker").unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            "initializers:
  - name: sidecar.example.com
    owner: { deployment: kube-system/sidecar-injector }
  - name: typo.example.com
    owner: { deployment: kube-system/gate-ownr }
  - name: kueue.x-k8s.io/admission
    owner: { lease: kueue-system/leader }
  - name: quota.example.com
    owner: { pods: { namespace: quota-system, selector: app=quota } }
  - name: nobody.example.com
    owner: { pods: { namespace: quota-system, selector: app=nobody } }
  - name: legacy.example.com
    owner: { http: \"http://127.0.0.1:1/healthz\" }
webhooks:
  - name: validating/pod-policy/pods.policy.example.com
    owner: { apiserver: { namespace: quota-system } }
",
        )
        .unwrap();
        let run = |kubeconfig: std::path::PathBuf| {
            let config = config.clone();
            async move {
                tokio::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
                    .arg("check-config")
                    .arg(&config)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .kill_on_drop(true)
                    .output()
                    .await
                    .unwrap()
            }
        };
        let out = tokio::time::timeout(Duration::from_secs(30), run(kubeconfig))
            .await
            .expect("check-config to finish");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let warnings: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("warning: owner "))
            .collect();
        assert_eq!(warnings.len(), 3, "{stdout}");
        // The owners, the bypass records and the canary (of the listed webhook) share one read
        // of discovery.
        let discovery_reads = h
            .sim
            .requests()
            .iter()
            .filter(|r| r.user == "checker" && r.path == "/apis")
            .count();
        assert_eq!(
            discovery_reads, 1,
            "check-config read /apis {discovery_reads} times"
        );
        assert!(
            warnings[0]
                .contains("deployment kube-system/gate-ownr (of typo.example.com) does not exist"),
            "{stdout}"
        );
        assert!(
            warnings[1]
                .contains("lease kueue-system/leader (of kueue.x-k8s.io/admission) does not exist"),
            "{stdout}"
        );
        assert!(
            warnings[2]
                .contains("pods quota-system/app=nobody (of nobody.example.com): no pod matches"),
            "{stdout}"
        );

        let nowhere = dir.path().join("nowhere");
        std::fs::write(
            &nowhere,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"http://127.0.0.1:1\"}}]\n\
             users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n\
             current-context: c\n",
        )
        .unwrap();
        let out = tokio::time::timeout(Duration::from_secs(30), run(nowhere))
            .await
            .expect("check-config to finish");
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[tokio::test]
    async fn one_watch_per_distinct_owner() {
        let h = harness(
            "initializers:
  - name: a.example.com
    owner: { deployment: kube-system/sidecar-injector }
  - name: b.example.com
    owner: { deployment: kube-system/sidecar-injector }
  - name: c.example.com
    owner: { deployment: kube-system/other }
",
            &[],
        )
        .await;
        let api: Api<Deployment> = Api::namespaced(h.client.clone(), "kube-system");
        create_deployment(&api, "sidecar-injector").await;
        set_available(&api, "sidecar-injector", 1).await;
        let a = wait_state(&h.owners, "a.example.com", is_up).await;
        assert_eq!(h.owners.state("b.example.com"), a);
        assert_eq!(
            owner_up_metric(&h.metrics, "b.example.com", "deployment"),
            Some(1)
        );
        wait_synced(&h.owners).await;
        assert_eq!(h.owners.state("c.example.com"), OwnerState::Unknown);

        assert_eq!(h.guard_requests("list", "deployments"), 2);
        assert_eq!(h.guard_requests("watch", "deployments"), 2);
        let queries: Vec<String> = h
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.user == "initguard" && r.verb == "watch")
            .filter_map(|r| r.query)
            .collect();
        assert!(
            queries
                .iter()
                .any(|q| q.contains("metadata.name%3Dsidecar-injector")),
            "{queries:?}"
        );
        assert!(
            queries.iter().any(|q| q.contains("metadata.name%3Dother")),
            "{queries:?}"
        );
    }

    #[tokio::test]
    async fn watch_failures_keep_the_last_known_state() {
        let h = harness(DEPLOYMENT_CONFIG, &[]).await;
        let api: Api<Deployment> = Api::namespaced(h.client.clone(), "kube-system");
        create_deployment(&api, "sidecar-injector").await;
        set_available(&api, "sidecar-injector", 1).await;
        let up = wait_state(&h.owners, "sidecar.example.com", is_up).await;
        h.sim.faults().exempt_users(&["tester"]);

        // A clean end of the stream: the watcher resumes from its resourceVersion.
        let watches = h.guard_requests("watch", "deployments");
        h.sim.faults().drop_watches();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while h.guard_requests("watch", "deployments") == watches {
            assert!(tokio::time::Instant::now() < deadline, "no re-watch");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(h.owners.state("sidecar.example.com"), up);

        // The API failing: errors are counted, the state is kept.
        h.sim.faults().set_error_rate(1.0, &[500]);
        h.sim.faults().drop_watches();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while h.restarts("deployments") == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no watch error counted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(h.owners.state("sidecar.example.com"), up);
        assert_eq!(
            owner_up_metric(&h.metrics, "sidecar.example.com", "deployment"),
            Some(1)
        );

        // 410 Gone on the next watch: a full relist, still the same state.
        h.sim.faults().clear();
        h.sim.faults().force_gone_next_watch();
        h.sim.faults().drop_watches();
        let lists = h.guard_requests("list", "deployments");
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while h.guard_requests("list", "deployments") == lists {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no relist after 410"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(h.owners.state("sidecar.example.com"), up);

        // And the watch is live again.
        set_available(&api, "sidecar-injector", 0).await;
        wait_state(&h.owners, "sidecar.example.com", is_down).await;
    }
}
