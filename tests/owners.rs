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
            "initializers:
  - name: legacy.example.com
    probeInterval: 100ms
    owner: {{ http: \"{url}\" }}
"
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
            took >= Duration::from_millis(900) && took < Duration::from_millis(2900),
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

mod sim {
    use initguard::sim::{Sim, SimOptions};
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use kube::Api;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
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
            &config,
            metrics.clone(),
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

        // Missing after the initial list: down.
        let missing = wait_state(&h.owners, "sidecar.example.com", is_down).await;
        assert!(h.owners.not_synced().is_empty());

        create_deployment(&api, "sidecar-injector").await;
        set_available(&api, "sidecar-injector", 1).await;
        let up = wait_state(&h.owners, "sidecar.example.com", is_up).await;
        assert!(since(up) > since(missing));
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

        api.delete("sidecar-injector", &DeleteParams::default())
            .await
            .unwrap();
        wait_state(&h.owners, "sidecar.example.com", is_down).await;

        let snapshot = serde_json::to_value(h.owners.snapshot()).unwrap();
        assert_eq!(snapshot[0]["initializer"], "sidecar.example.com");
        assert_eq!(snapshot[0]["ownerKind"], "deployment");
        assert_eq!(snapshot[0]["target"], "kube-system/sidecar-injector");
        assert_eq!(snapshot[0]["state"], "down");
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
        assert!(
            late < Duration::from_millis(750),
            "down {late:?} after expiry"
        );
        assert_eq!(
            h.sim.resource_version(),
            last_write,
            "nothing changed in the cluster"
        );
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
        // No matching pod yet: down. A Ready pod without the label does not count.
        let mut other = owner_pod("other");
        other.metadata.labels = None;
        api.create(&PostParams::default(), &other).await.unwrap();
        let none = wait_state(&h.owners, "quota.example.com", is_down).await;

        // The simulated scheduler and kubelet make the pod Running and Ready.
        api.create(&PostParams::default(), &owner_pod("quota-0"))
            .await
            .unwrap();
        let up = wait_state(&h.owners, "quota.example.com", is_up).await;
        assert!(since(up) > since(none));

        set_ready(&api, "quota-0", false).await;
        let down = wait_state(&h.owners, "quota.example.com", is_down).await;
        assert!(since(down) > since(up));

        // One Ready pod out of two is enough.
        api.create(&PostParams::default(), &owner_pod("quota-1"))
            .await
            .unwrap();
        let up = wait_state(&h.owners, "quota.example.com", is_up).await;
        set_ready(&api, "quota-0", true).await;
        set_ready(&api, "quota-1", false).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(h.owners.state("quota.example.com"), up);

        api.delete("quota-0", &DeleteParams::default())
            .await
            .unwrap();
        wait_state(&h.owners, "quota.example.com", is_down).await;
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
        wait_state(&h.owners, "c.example.com", is_down).await;

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
