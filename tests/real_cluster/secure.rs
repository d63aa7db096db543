//! `secureListen` against the real API server: the guard's HTTPS `/metrics` and `/status`
//! answer 401 without an accepted token, 403 to a token whose user may not `get` the path, and
//! 200 to a scraper bound to deploy/rbac.yaml's `initguard-metrics-reader` role. Judged by the
//! HTTP status curl sees and by the reviews in the API server's audit log.

use std::process::Command;
use std::sync::Arc;

use crate::gates::config;
use crate::testbed::*;

/// The ClusterRole in deploy/rbac.yaml that a scraper is bound to.
const READER_ROLE: &str = "initguard-metrics-reader";

/// `curl -k` over HTTPS with an optional bearer token: (status, body); 0 when nothing answered.
fn curl_https(url: &str, token: Option<&str>, ca: Option<&std::path::Path>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "--max-time", "10", "-w", "\n%{http_code}"]);
    match ca {
        Some(ca) => cmd.arg("--cacert").arg(ca),
        None => cmd.arg("-k"),
    };
    if let Some(token) = token {
        cmd.arg("-H").arg(format!("Authorization: Bearer {token}"));
    }
    let out = cmd
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

pub(crate) async fn secure_endpoints_authenticate_and_authorize(tb: Arc<Testbed>) {
    let ns = "secure-metrics";
    tb.namespace(ns);
    tb.kubectl(&["-n", ns, "create", "serviceaccount", "scraper"]);
    tb.kubectl(&["-n", ns, "create", "serviceaccount", "stranger"]);
    tb.kubectl(&[
        "create",
        "clusterrolebinding",
        "secure-metrics-scraper",
        &format!("--clusterrole={READER_ROLE}"),
        &format!("--serviceaccount={ns}:scraper"),
    ]);
    let scraper = tb.kubectl(&["-n", ns, "create", "token", "scraper"]);
    let stranger = tb.kubectl(&["-n", ns, "create", "token", "stranger"]);
    let (scraper, stranger) = (scraper.trim(), stranger.trim());

    let port = free_port();
    let guard = tb
        .guard(
            "secure",
            "initguard",
            &config(&format!("secureListen: 127.0.0.1:{port}\n")),
        )
        .await;
    let https = |path: &str| format!("https://127.0.0.1:{port}{path}");

    for path in ["/metrics", "/status"] {
        let (code, body) = curl_https(&https(path), None, None);
        assert_eq!(code, 401, "{path} without a token: {body}");
        let (code, body) = curl_https(&https(path), Some("not-a-token"), None);
        assert_eq!(code, 401, "{path} with a token the server rejects: {body}");
        let (code, body) = curl_https(&https(path), Some(stranger), None);
        assert_eq!(code, 403, "{path} as a user without the role: {body}");
        assert!(
            body.contains(&format!("system:serviceaccount:{ns}:stranger")),
            "the 403 names the user: {body}"
        );
        let (code, body) = curl_https(&https(path), Some(scraper), None);
        assert_eq!(code, 200, "{path} as the scraper: {body}");
    }
    let (_, metrics) = curl_https(&https("/metrics"), Some(scraper), None);
    assert!(metrics.contains("initguard_build_info"), "{metrics}");
    // Probes need no token, on either listener.
    for path in ["/healthz", "/readyz"] {
        let (code, body) = curl_https(&https(path), None, None);
        assert_eq!(code, 200, "HTTPS {path} without a token: {body}");
        let (code, body) = curl(&format!("http://127.0.0.1:{}{path}", guard.port));
        assert_eq!(code, 200, "HTTP {path}: {body}");
    }
    // With secureListen set, the plain listener no longer serves the data.
    for path in ["/metrics", "/status"] {
        let (code, _) = curl(&format!("http://127.0.0.1:{}{path}", guard.port));
        assert_eq!(code, 404, "plain HTTP {path} must not be served");
    }

    // The server's record: the guard asked, as itself, and the API server answered.
    let audit = tb.audit();
    for resource in ["tokenreviews", "subjectaccessreviews"] {
        let asked: Vec<&Audit> = audit
            .iter()
            .filter(|a| a.user == GUARD_USER && a.resource == resource && a.verb == "create")
            .collect();
        assert!(!asked.is_empty(), "no {resource} created by {GUARD_USER}");
        assert!(
            asked.iter().all(|a| a.ok()),
            "{resource} denied to the guard (deploy/rbac.yaml): {asked:#?}"
        );
    }
    // Only authenticated callers cost an access review: the stranger and the scraper, per path.
    let reviewed_users: std::collections::BTreeSet<String> = audit
        .iter()
        .filter(|a| a.user == GUARD_USER && a.resource == "subjectaccessreviews")
        .filter_map(|a| a.request["spec"]["user"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        reviewed_users,
        [
            format!("system:serviceaccount:{ns}:scraper"),
            format!("system:serviceaccount:{ns}:stranger"),
        ]
        .into_iter()
        .collect(),
        "SubjectAccessReviews were for exactly the authenticated callers"
    );
    guard.stop();

    // Given certificate files are what the listener serves: curl verifies against them.
    let dir = tb.dir.join("secure-tls");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {dir:?}: {e}"));
    let generated = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
        .unwrap_or_else(|e| panic!("cannot generate a test certificate: {e}"));
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, generated.cert.pem()).unwrap_or_else(|e| panic!("{cert:?}: {e}"));
    std::fs::write(&key, generated.signing_key.serialize_pem())
        .unwrap_or_else(|e| panic!("{key:?}: {e}"));
    let port = free_port();
    let guard = tb
        .guard(
            "secure-files",
            "initguard",
            &config(&format!(
                "secureListen: 127.0.0.1:{port}\ntls: {{ certFile: {}, keyFile: {} }}\n",
                cert.display(),
                key.display()
            )),
        )
        .await;
    let (code, body) = curl_https(
        &format!("https://127.0.0.1:{port}/healthz"),
        None,
        Some(&cert),
    );
    assert_eq!(code, 200, "curl --cacert the given certificate: {body}");
    guard.stop();
    tb.kubectl(&["delete", "clusterrolebinding", "secure-metrics-scraper"]);
}
