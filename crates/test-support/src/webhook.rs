//! Admission webhooks for the real-cluster tests and benchmarks: a real HTTPS webhook server on
//! 127.0.0.1 (the test bed has no kube-proxy, so configurations call it by URL), the
//! configuration the scenarios guard, and the RBAC an operator grants for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::routing::post;
use base64::Engine as _;
use serde_json::{Value, json};

use crate::testbed::{Audit, GUARD_USER, OPT_IN, OwnerLease, Testbed, free_port, timestamp};

/// The listed entry of [`configuration`].
pub const ENTRY: &str = "pods.policy.example.com";
/// The entry the guard must leave alone.
pub const UNLISTED_ENTRY: &str = "other.policy.example.com";
/// What the `/mutate` path adds to every object it admits (an annotation, `"true"`).
pub const INJECTED: &str = "example.com/injected";
/// The record annotation the guard writes.
pub const RECORD: &str = "initguard.io/bypassed-webhooks";

/// An HTTPS admission webhook that allows everything (`/validate`), or allows it and adds
/// [`INJECTED`] (`/mutate`), on a fixed port so it can come back.
pub struct WebhookServer {
    /// Where it listens (fixed, so that it can come back).
    pub addr: SocketAddr,
    /// Requests answered so far.
    pub calls: Arc<AtomicUsize>,
    /// The `request` of every AdmissionReview answered, in arrival order.
    pub reviews: Arc<std::sync::Mutex<Vec<Value>>>,
    /// While set, connections are accepted but no request is answered (a frozen process).
    frozen: Arc<std::sync::atomic::AtomicBool>,
    ca_pem: String,
    tls: Arc<rustls::ServerConfig>,
    handle: Option<axum_server::Handle<SocketAddr>>,
}

impl WebhookServer {
    /// Start it with a fresh self-signed certificate for 127.0.0.1.
    pub async fn start() -> WebhookServer {
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("webhook key: {e}"));
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap_or_else(|e| panic!("webhook certificate params: {e}"));
        let cert = params
            .self_signed(&key)
            .unwrap_or_else(|e| panic!("webhook certificate: {e}"));
        WebhookServer::serving(
            SocketAddr::from(([127, 0, 0, 1], free_port())),
            vec![cert.der().clone()],
            key.serialize_der(),
            cert.pem(),
        )
        .unwrap_or_else(|e| panic!("webhook {e}"))
    }

    /// Serve on `addr` with the PEM certificate chain `cert_pem` and PKCS#8 key `key_pem` (as
    /// `openssl req -nodes` writes it): the backend of a webhook Deployment (the
    /// `test-webhook` binary), whose certificate the test signs for its Service's name.
    pub fn from_pem(
        addr: SocketAddr,
        cert_pem: &str,
        key_pem: &str,
    ) -> Result<WebhookServer, String> {
        let certs: Vec<rustls::pki_types::CertificateDer<'static>> =
            pem_blocks(cert_pem, "CERTIFICATE")?
                .into_iter()
                .map(rustls::pki_types::CertificateDer::from)
                .collect();
        let key = pem_blocks(key_pem, "PRIVATE KEY")?
            .into_iter()
            .next()
            .ok_or("no PRIVATE KEY block (PKCS#8) in the key")?;
        WebhookServer::serving(addr, certs, key, cert_pem.to_owned())
    }

    /// Serve on `addr` with the chain `certs` and PKCS#8 `key`; `ca_pem` is what a
    /// configuration trusts ([`WebhookServer::ca_bundle`]).
    fn serving(
        addr: SocketAddr,
        certs: Vec<rustls::pki_types::CertificateDer<'static>>,
        key: Vec<u8>,
        ca_pem: String,
    ) -> Result<WebhookServer, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_no_client_auth()
            .with_single_cert(certs, rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()))
            .map_err(|e| format!("TLS config: {e}"))?;
        let mut server = WebhookServer {
            addr,
            ca_pem,
            tls: Arc::new(tls),
            calls: Arc::new(AtomicUsize::new(0)),
            reviews: Arc::default(),
            frozen: Arc::default(),
            handle: None,
        };
        server.serve();
        Ok(server)
    }

    /// (Re)start serving on [`WebhookServer::addr`].
    pub fn serve(&mut self) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap_or_else(|e| panic!("socket: {e}"));
        socket
            .set_reuseaddr(true)
            .unwrap_or_else(|e| panic!("SO_REUSEADDR: {e}"));
        socket
            .bind(self.addr)
            .unwrap_or_else(|e| panic!("webhook bind {}: {e}", self.addr));
        let listener = socket
            .listen(64)
            .unwrap_or_else(|e| panic!("webhook listen: {e}"))
            .into_std()
            .unwrap_or_else(|e| panic!("webhook listener: {e}"));
        let answer = {
            let calls = self.calls.clone();
            let reviews = self.reviews.clone();
            let frozen = self.frozen.clone();
            move |review: Value, mutate: bool| {
                calls.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut held) = reviews.lock() {
                    held.push(review["request"].clone());
                }
                let uid = review["request"]["uid"].clone();
                let has_annotations =
                    review["request"]["object"]["metadata"]["annotations"].is_object();
                let frozen = frozen.clone();
                async move {
                    while frozen.load(Ordering::SeqCst) {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    let mut response = json!({ "uid": uid, "allowed": true });
                    if mutate {
                        let patch = if has_annotations {
                            json!([{ "op": "add",
                                     "path": format!("/metadata/annotations/{}",
                                                     INJECTED.replace('/', "~1")),
                                     "value": "true" }])
                        } else {
                            json!([{ "op": "add", "path": "/metadata/annotations",
                                     "value": { INJECTED: "true" } }])
                        };
                        response["patchType"] = json!("JSONPatch");
                        response["patch"] = json!(
                            base64::engine::general_purpose::STANDARD.encode(patch.to_string())
                        );
                    }
                    Json(json!({
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": response,
                    }))
                }
            }
        };
        let mutating = answer.clone();
        let app = axum::Router::new()
            .route(
                "/validate",
                post(move |Json(review): Json<Value>| answer(review, false)),
            )
            .route(
                "/mutate",
                post(move |Json(review): Json<Value>| mutating(review, true)),
            );
        let config = axum_server::tls_rustls::RustlsConfig::from_config(self.tls.clone());
        let handle = axum_server::Handle::new();
        self.handle = Some(handle.clone());
        // Its own thread and runtime: the scenario blocks its worker on kubectl, and a task
        // left in that worker's LIFO slot would never be served.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("webhook runtime: {e}"));
            runtime.block_on(async move {
                let server = axum_server::tls_rustls::from_tcp_rustls(listener, config)
                    .unwrap_or_else(|e| panic!("webhook server: {e}"));
                let _ = server.handle(handle).serve(app.into_make_service()).await;
            });
        });
    }

    /// Freeze as SIGSTOP would: the port still accepts, nothing is answered.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Answer again (held requests too).
    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// Die at once: the listener closes and open connections drop.
    pub async fn stop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown();
        }
        let addr = self.addr;
        crate::wait::until(format!("the webhook server on {addr} to stop"), || {
            std::net::TcpStream::connect(addr).is_err()
        })
        .await;
    }

    /// The `caBundle` of a configuration calling it.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown();
        }
    }
}

/// The DER bodies of the `-----BEGIN LABEL-----` blocks of `pem`, in order.
fn pem_blocks(pem: &str, label: &str) -> Result<Vec<Vec<u8>>, String> {
    let (begin, end) = (
        format!("-----BEGIN {label}-----"),
        format!("-----END {label}-----"),
    );
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(&begin) {
        let body = &rest[start + begin.len()..];
        let stop = body
            .find(&end)
            .ok_or_else(|| format!("{begin} without {end}"))?;
        let b64: String = body[..stop].split_whitespace().collect();
        out.push(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("{label} block: {e}"))?,
        );
        rest = &body[stop + end.len()..];
    }
    if out.is_empty() {
        return Err(format!("no {begin} block"));
    }
    Ok(out)
}

/// A ValidatingWebhookConfiguration `name` calling `server` for pod creates in namespaces
/// labelled `webhook-test=PREFIX`: the unlisted entry fails open, [`ENTRY`] fails closed.
pub fn configuration(name: &str, prefix: &str, server: &WebhookServer) -> Value {
    let entry = |entry: &str, policy: &str| {
        json!({
            "name": entry,
            "clientConfig": {
                "url": format!("https://{}/validate", server.addr),
                "caBundle": server.ca_bundle(),
            },
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["pods"] }],
            // Only this scenario's namespaces: nothing else on the test bed is affected.
            "namespaceSelector": { "matchLabels": { "webhook-test": prefix } },
            "failurePolicy": policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        })
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": name },
        // The unlisted entry fails open, so only the listed one decides whether a pod is
        // admitted while the server is down; the guard must leave it alone all the same.
        "webhooks": [entry(UNLISTED_ENTRY, "Ignore"), entry(ENTRY, "Fail")],
    })
}

/// The configuration as the server holds it.
pub fn get_configuration(tb: &Testbed, name: &str) -> Value {
    let text = tb.kubectl(&["get", "validatingwebhookconfiguration", name, "-o", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("configuration {name}: {e}: {text}"))
}

/// Create a pod as admin; Ok, or Err with kubectl's stderr.
pub fn create_pod(tb: &Testbed, ns: &str, name: &str, opted_in: bool) -> Result<(), String> {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": { "app": "webhook-test" } },
        "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
    });
    if opted_in {
        pod["metadata"]["labels"][OPT_IN] = json!("true");
    }
    let out = tb.kubectl_with("admin", &["create", "-f", "-"], Some(&pod.to_string()));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A server-side dry-run create of a pod in `ns` (admission runs and webhooks are called;
/// nothing is stored, so no kubelet or image is involved): Ok, or Err with the server's
/// refusal.
pub fn dry_run_pod(tb: &Testbed, ns: &str, opted_in: bool) -> Result<(), String> {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "probe", "namespace": ns },
        "spec": { "containers": [{ "name": "main", "image": "initguard.test/pause:1" }] },
    });
    if opted_in {
        pod["metadata"]["labels"] = json!({ OPT_IN: "true" });
    }
    let out = tb.kubectl_with(
        "admin",
        &["create", "--dry-run=server", "-f", "-"],
        Some(&pod.to_string()),
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The guard's writes to webhook configurations received since `since`, in the server's
/// order.
pub fn configuration_writes(tb: &Testbed, since: jiff::Timestamp) -> Vec<Audit> {
    let mut writes: Vec<Audit> = tb
        .audit()
        .into_iter()
        .filter(|a| {
            a.user == GUARD_USER
                && a.is_write()
                && a.resource.ends_with("webhookconfigurations")
                && timestamp(&a.received) >= since
        })
        .collect();
    writes.sort_by(|a, b| a.received.cmp(&b.received));
    writes
}

/// RBAC for exactly `name`, as deploy/README.md tells operators to generate it.
pub fn grant(tb: &Testbed, prefix: &str, name: &str) {
    grant_names(tb, prefix, &[name]);
}

/// RBAC for exactly the configurations `names`.
pub fn grant_names(tb: &Testbed, prefix: &str, names: &[&str]) {
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": { "name": format!("{prefix}-initguard-webhooks") },
        "rules": [{
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": names,
            "verbs": ["get", "list", "watch", "patch"],
        }],
    }));
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": format!("{prefix}-initguard-webhooks") },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": format!("{prefix}-initguard-webhooks") },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": GUARD_USER }],
    }));
}

/// Delete the configuration and the RBAC of [`grant`].
pub fn cleanup(tb: &Testbed, prefix: &str, name: &str) {
    let role = format!("{prefix}-initguard-webhooks");
    tb.kubectl(&[
        "delete",
        "validatingwebhookconfiguration",
        name,
        "--ignore-not-found",
    ]);
    tb.kubectl(&["delete", "clusterrolebinding", &role, "--ignore-not-found"]);
    tb.kubectl(&["delete", "clusterrole", &role, "--ignore-not-found"]);
}

/// Everything a scenario with one guarded configuration needs, and its clean-up.
pub struct Bed {
    pub tb: Arc<Testbed>,
    pub prefix: String,
    /// A namespace the webhook is called for.
    pub apps: String,
    /// The webhook's own namespace (also called for), where its owner Lease lives.
    pub system: String,
    /// The configuration's name.
    pub name: String,
    pub server: WebhookServer,
    /// `SYSTEM/policy-webhook`, renewed every second until killed.
    pub lease: OwnerLease,
    /// The configuration as the server held it before the guard started.
    pub baseline: Value,
    /// When the scenario started (this machine's clock, which the API server shares).
    pub started: jiff::Timestamp,
}

impl Bed {
    /// Namespaces `PREFIX-apps` and `PREFIX-system`, the webhook server, its Lease, the
    /// configuration `PREFIX-policy` and the guard's RBAC for it.
    pub async fn new(tb: Arc<Testbed>, prefix: &str) -> Bed {
        let prefix = prefix.to_owned();
        let started = jiff::Timestamp::now();
        let (apps, system) = (format!("{prefix}-apps"), format!("{prefix}-system"));
        let name = format!("{prefix}-policy");
        for ns in [&apps, &system] {
            tb.namespace(ns);
            tb.kubectl(&["label", "namespace", ns, &format!("webhook-test={prefix}")]);
        }
        let server = WebhookServer::start().await;
        let lease = OwnerLease::start(&tb, &system, "policy-webhook");
        tb.apply(&configuration(&name, &prefix, &server));
        grant(&tb, &prefix, &name);
        let baseline = get_configuration(&tb, &name);
        Bed {
            tb,
            prefix,
            apps,
            system,
            name,
            server,
            lease,
            baseline,
            started,
        }
    }

    /// The webhook server dies and its Lease stops being renewed; the last renewal as the
    /// API server received it.
    pub async fn kill_owner(&mut self) -> jiff::Timestamp {
        self.server.stop().await;
        self.lease.kill(&self.tb)
    }

    /// The server and the Lease come back.
    pub fn revive_owner(&mut self) {
        self.server.serve();
        self.lease = OwnerLease::start(&self.tb, &self.system, "policy-webhook");
    }

    /// When the API server last accepted a write of the owner Lease (after
    /// [`Bed::revive_owner`]: the instant the owner was back), from its audit log.
    pub fn last_lease_write(&self) -> jiff::Timestamp {
        self.tb
            .audit()
            .into_iter()
            .filter(|a| {
                a.resource == "leases"
                    && a.name == "policy-webhook"
                    && a.namespace == self.system
                    && a.is_write()
                    && a.ok()
            })
            .map(|a| a.received)
            .max()
            .map(|t| timestamp(&t))
            .unwrap_or_else(|| panic!("no write of lease {}/policy-webhook", self.system))
    }

    /// The listed entry as the server holds it now.
    pub fn entry(&self) -> Value {
        get_configuration(&self.tb, &self.name)["webhooks"][1].clone()
    }

    /// Events with `reason` on the configuration.
    pub fn events(&self, reason: &str) -> usize {
        self.tb
            .list("events", "default", None)
            .iter()
            .filter(|e| e["reason"] == reason && e["involvedObject"]["name"] == json!(self.name))
            .count()
    }

    /// Delete the configuration and its RBAC.
    pub fn cleanup(self) {
        cleanup(&self.tb, &self.prefix, &self.name);
    }
}
