//! The chart as users install it, on the real node: the previous chart version installed, then
//! upgraded to the chart in the tree (the pods roll), the Deployment Available through its own
//! readiness probe, `helm test`'s pod run by the kubelet, the PodMonitor's target scraped as
//! it describes, `kubectl initguard why` from a user's machine, and `helm uninstall` running
//! the restore hook as a real pod that leaves no webhook bypassed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};

use initguard_test_support::webhook::{RECORD, dry_run_pod, get_configuration};

use crate::pods::{POLL, namespace, node_name};
use crate::testbed::*;
use crate::wait::eventually_every;

/// The chart's image values for the bed's image (tests/testbed/node.sh builds it).
pub(crate) const IMAGE_VALUES: &str = "image: { repository: initguard.test/initguard, tag: dev }\n";

/// How long helm waits for a release's pods (`--wait`), hooks and tests.
pub(crate) const HELM_TIMEOUT: &str = "3m";

pub(crate) fn chart() -> PathBuf {
    repo().join("charts/initguard")
}

/// helm as the bed's admin: `args`, failing with its output unless it succeeds.
pub(crate) fn helm(tb: &Testbed, args: &[&str]) -> String {
    let out = helm_output(tb, args);
    assert!(
        out.status.success(),
        "helm {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn helm_output(tb: &Testbed, args: &[&str]) -> Output {
    let admin = tb.kubeconfig("admin");
    let child = Command::new(tb.bin.join("helm"))
        .arg("--kubeconfig")
        .arg(&admin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run helm: {e}"));
    // helm's own --timeout bounds its waits; this bounds helm.
    initguard_test_support::process::output_within(
        child,
        std::time::Duration::from_secs(300),
        &format!("helm {args:?}"),
    )
}

/// `helm uninstall --wait`: its hooks run and its objects are gone when it returns.
pub(crate) fn uninstall(tb: &Testbed, release: &str, ns: &str) {
    helm(
        tb,
        &[
            "uninstall",
            release,
            "--namespace",
            ns,
            "--wait",
            "--timeout",
            HELM_TIMEOUT,
        ],
    );
}

pub(crate) fn write(tb: &Testbed, name: &str, text: &str) -> PathBuf {
    let path = tb.dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

pub(crate) fn path_str(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", path.display()))
}

/// The Prometheus Operator's CRDs (tests/testbed/build keeps them beside the binaries).
fn install_crds(tb: &Testbed) {
    let crds = tb
        .bin
        .parent()
        .map(|cache| cache.join("crds"))
        .unwrap_or_default();
    assert!(crds.is_dir(), "no CRDs in {}", crds.display());
    tb.kubectl(&["apply", "--server-side", "-f", path_str(&crds)]);
    tb.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/podmonitors.monitoring.coreos.com",
    ]);
}

/// The release's Deployment once Available (the server's condition), with its pods: all
/// Ready on the real node.
pub(crate) async fn available(tb: &Testbed, ns: &str, deployment: &str) -> Vec<Value> {
    eventually_every(
        POLL,
        format!("Deployment {ns}/{deployment} Available"),
        || async {
            let d = tb.get("deployment", ns, deployment)?;
            let available = d["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True");
            let want = d["spec"]["replicas"].as_i64()?;
            let settled = d["status"]["updatedReplicas"].as_i64() == Some(want)
                && d["status"]["readyReplicas"].as_i64() == Some(want)
                && d["status"]["replicas"].as_i64() == Some(want);
            if !(available
                && settled
                && d["status"]["observedGeneration"] == d["metadata"]["generation"])
            {
                return None;
            }
            let pods: Vec<Value> = tb
                .list("pods", ns, Some("app.kubernetes.io/component=controller"))
                .into_iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            (pods.len() as i64 == want).then_some(pods)
        },
    )
    .await
}

fn uids(pods: &[Value]) -> Vec<String> {
    pods.iter()
        .map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `curl` of `url` with `headers`: (HTTP status, body). The guard's certificate is its own
/// (self-signed), as the PodMonitor's `insecureSkipVerify` says.
fn curl(url: &str, headers: &[String]) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--max-time", "20", "-w", "\n%{http_code}"]);
    for h in headers {
        cmd.arg("-H").arg(h);
    }
    let out = cmd
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// The PodMonitor's target on each of `pods`, scraped as the Prometheus Operator would
/// configure Prometheus from it: the named port of the pod, its path and scheme, the token of
/// the Secret its `authorization` names. 200 with the guard's series; 401 without the token.
fn scrape_as_the_pod_monitor_says(tb: &Testbed, ns: &str, name: &str, pods: &[Value]) {
    let monitor = tb
        .get("podmonitor", ns, name)
        .unwrap_or_else(|| panic!("no PodMonitor {ns}/{name}"));
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let (port_name, path, scheme) = (
        endpoint["port"].as_str().unwrap_or_default(),
        endpoint["path"].as_str().unwrap_or("/metrics"),
        endpoint["scheme"].as_str().unwrap_or("http"),
    );
    let credentials = &endpoint["authorization"]["credentials"];
    let secret = tb
        .get(
            "secret",
            ns,
            credentials["name"].as_str().unwrap_or_default(),
        )
        .unwrap_or_else(|| panic!("the Secret of {endpoint:#}"));
    let token = secret["data"][credentials["key"].as_str().unwrap_or_default()]
        .as_str()
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_else(|| panic!("no token in {secret:#}"));
    for pod in pods {
        let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
        let port = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().into_iter().flatten())
            .find(|p| p["name"] == port_name)
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("no port {port_name} in {pod:#}"));
        let url = format!("{scheme}://{ip}:{port}{path}");
        let (code, body) = curl(&url, &[format!("Authorization: Bearer {}", token.trim())]);
        assert_eq!(code, 200, "{url}: {body}");
        assert!(body.contains("initguard_"), "{url}: {body}");
        let (code, _) = curl(&url, &[]);
        assert_eq!(code, 401, "{url} without a token");
    }
}

/// The previous chart version (tests/fixtures/charts), installed with the bed's image and
/// waited for; then `helm upgrade` to the chart in the tree with a PodMonitor and one more
/// initializer in the config: new pods replace every old one (the config's checksum is in
/// the pod template; the same values would render the same pods, and nothing would roll) and
/// the Deployment is Available through the pods' own readiness probe.
/// `helm test` passes: its pod ran on the node (check-config, then `status` in-cluster, with
/// the release's ServiceAccount token through 10.0.0.1:443). The PodMonitor's target answers
/// an authorized scrape over HTTPS. `kubectl initguard why` (the shipped binary as a kubectl
/// plugin) explains a gated pod against the installed release. `helm uninstall` completes.
pub(crate) async fn the_chart_upgrades_tests_and_is_scraped(tb: Arc<Testbed>) {
    let (release, ns) = ("node", "chart-node");
    let deployment = format!("{release}-initguard");
    install_crds(&tb);
    let old_values = write(
        &tb,
        "chart-node-old.yaml",
        &format!("{IMAGE_VALUES}replicaCount: 2\n"),
    );
    let previous = repo().join("tests/fixtures/charts/initguard-0.1.0.tgz");
    helm(
        &tb,
        &[
            "install",
            release,
            path_str(&previous),
            "--namespace",
            ns,
            "--create-namespace",
            "-f",
            path_str(&old_values),
            "--wait",
            "--timeout",
            HELM_TIMEOUT,
        ],
    );
    let before = available(&tb, ns, &deployment).await;
    for pod in &before {
        assert_eq!(pod["spec"]["nodeName"], json!(node_name(&tb)), "{pod:#}");
    }

    let values = write(
        &tb,
        "chart-node.yaml",
        &format!(
            "{IMAGE_VALUES}replicaCount: 2\nmetrics: {{ podMonitor: {{ enabled: true }} }}\n\
             config:\n  initializers:\n    - {{ name: example.com/warden, deadline: 1m }}\n"
        ),
    );
    helm(
        &tb,
        &[
            "upgrade",
            release,
            path_str(&chart()),
            "--namespace",
            ns,
            "-f",
            path_str(&values),
            "--wait",
            "--timeout",
            HELM_TIMEOUT,
        ],
    );
    let after = available(&tb, ns, &deployment).await;
    let old = uids(&before);
    assert!(
        uids(&after).iter().all(|u| !old.contains(u)),
        "the upgrade rolled no pod: before {old:?}, after {:?}",
        uids(&after)
    );
    let chart_label = tb
        .get("deployment", ns, &deployment)
        .map(|d| d["metadata"]["labels"]["helm.sh/chart"].clone())
        .unwrap_or_default();
    assert_ne!(
        chart_label,
        json!("initguard-0.1.0"),
        "still the previous chart"
    );

    // helm test: its pod, run by the kubelet, succeeds; the audit log shows its `status`
    // reading the cluster with the pod's own bound token (the token names the pod).
    let out = helm(
        &tb,
        &[
            "test",
            release,
            "--namespace",
            ns,
            "--timeout",
            HELM_TIMEOUT,
        ],
    );
    assert!(out.contains("Succeeded"), "helm test: {out}");
    let sa = format!("system:serviceaccount:{ns}:{deployment}");
    let test_pod = format!("{deployment}-test");
    let reads: Vec<Audit> = tb
        .scenario_audit()
        .into_iter()
        .filter(|a| a.user == sa && a.pod == test_pod && a.verb == "list" && a.ok())
        .collect();
    assert!(
        !reads.is_empty(),
        "no read by helm test's pod {test_pod} as {sa} in the audit log"
    );

    scrape_as_the_pod_monitor_says(&tb, ns, &deployment, &after);

    // kubectl initguard why, from a user's machine: the shipped binary as the plugin.
    let tenant = "chart-node-tenant";
    namespace(&tb, tenant).await;
    tb.gated_pod(tenant, "held", false, &["example.com/unlisted"]);
    let plugins = tb.dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap_or_else(|e| panic!("{}: {e}", plugins.display()));
    let plugin = plugins.join("kubectl-initguard");
    if !plugin.exists() {
        std::os::unix::fs::symlink(repo().join("target/dist/initguard"), &plugin)
            .unwrap_or_else(|e| panic!("{}: {e}", plugin.display()));
    }
    let path = format!(
        "{}:{}",
        plugins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let why = Command::new(tb.kubectl_path())
        .args(["initguard", "why", "held", "-n", tenant])
        .env("KUBECONFIG", tb.kubeconfig("admin"))
        .env("PATH", path)
        .output()
        .unwrap_or_else(|e| panic!("kubectl initguard why: {e}"));
    let text = String::from_utf8_lossy(&why.stdout);
    assert!(
        why.status.success() && text.contains("example.com/unlisted"),
        "kubectl initguard why ({}): {text}{}",
        why.status,
        String::from_utf8_lossy(&why.stderr)
    );
    assert!(
        text.contains(&format!("{ns}/{deployment}")),
        "why did not read the installed release's configuration: {text}"
    );

    uninstall(&tb, release, ns);
    tb.kubectl(&["delete", "namespace", tenant, ns, "--wait=false"]);
}

/// The chart's own replica, on the node, bypasses a listed webhook whose Service has no ready
/// endpoint (an opted-in pod is admitted again, one not opted in still refused); then
/// `helm uninstall` runs the pre-delete restore hook, whose Job's pod the kubelet runs: the
/// webhook's entries are exactly as before the bypass (the server's record), the bypass record
/// says it was restored by the uninstall, and the audit log shows the restoring write made with the hook pod's own token.
pub(crate) async fn uninstall_restores_a_bypassed_webhook_from_a_real_hook_pod(tb: Arc<Testbed>) {
    let (release, ns, system, tenant) = (
        "restore",
        "chart-restore",
        "chart-restore-system",
        "chart-restore-tenant",
    );
    let name = "chart-restore-policy";
    let entry = "pods.policy.example.com";
    for n in [system, tenant] {
        namespace(&tb, n).await;
    }
    // A Service with no pods behind it: the webhook's default owner, down.
    tb.apply(&json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "policy", "namespace": system },
        "spec": { "selector": { "app": "policy" }, "ports": [{ "port": 443, "targetPort": 8443 }] },
    }));
    let ca =
        std::fs::read(tb.dir.join("pki/ca.crt")).unwrap_or_else(|e| panic!("the bed's CA: {e}"));
    tb.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": name },
        "webhooks": [{
            "name": entry,
            "clientConfig": {
                "service": { "namespace": system, "name": "policy", "path": "/validate", "port": 443 },
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
            },
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
            "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": tenant } },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    }));
    let before = get_configuration(&tb, name)["webhooks"].clone();
    let refused = dry_run_pod(&tb, tenant, true).expect_err("a dead Fail webhook refuses");
    assert!(refused.contains("failed calling webhook"), "{refused}");

    let values = write(
        &tb,
        "chart-restore.yaml",
        &format!(
            "{IMAGE_VALUES}replicaCount: 1\n\
             config:\n  dryRun: false\n  webhooks:\n    - {{ name: validating/{name}/{entry}, ownerDownGrace: 1s }}\n"
        ),
    );
    helm(
        &tb,
        &[
            "install",
            release,
            path_str(&chart()),
            "--namespace",
            ns,
            "--create-namespace",
            "-f",
            path_str(&values),
            "--wait",
            "--timeout",
            HELM_TIMEOUT,
        ],
    );
    available(&tb, ns, &format!("{release}-initguard")).await;
    eventually_every(
        POLL,
        format!("{name}/{entry} bypassed for opted-in pods"),
        || async { dry_run_pod(&tb, tenant, true).ok() },
    )
    .await;
    let still = dry_run_pod(&tb, tenant, false).expect_err("not opted in: still refused");
    assert!(still.contains("failed calling webhook"), "{still}");
    let bypassed = get_configuration(&tb, name);
    assert_ne!(
        bypassed["webhooks"], before,
        "no bypass in the configuration"
    );
    assert!(
        bypassed["metadata"]["annotations"][RECORD].is_string(),
        "{bypassed:#}"
    );

    uninstall(&tb, release, ns);
    let after = get_configuration(&tb, name);
    assert_eq!(after["webhooks"], before, "not restored exactly: {after:#}");
    let record: Value = after["metadata"]["annotations"][RECORD]
        .as_str()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_else(|| panic!("no bypass record: {after:#}"));
    assert_eq!(
        record[entry]["restored"]["by"],
        json!("uninstall"),
        "{record:#}"
    );
    let sa = format!("system:serviceaccount:{ns}:{release}-initguard");
    let hook = format!("{release}-initguard-restore-");
    let restoring: Vec<Audit> = tb
        .scenario_audit()
        .into_iter()
        .filter(|a| {
            a.resource == "validatingwebhookconfigurations"
                && a.name == name
                && a.is_write()
                && a.ok()
        })
        .collect();
    let last = restoring
        .last()
        .unwrap_or_else(|| panic!("no write of {name}"));
    assert!(
        last.user == sa && last.pod.starts_with(&hook),
        "the last write of {name} is not the hook pod's ({hook}*, as {sa}): {last:#?}"
    );
    assert_eq!(
        dry_run_pod(&tb, tenant, true).map_err(|e| e.contains("failed calling webhook")),
        Err(true)
    );
    tb.kubectl(&["delete", "validatingwebhookconfiguration", name]);
    tb.kubectl(&["delete", "namespace", tenant, system, ns, "--wait=false"]);
}
