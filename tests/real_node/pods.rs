//! Real pods on the real node: what every later scenario builds on.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::testbed::*;
use crate::wait::eventually_every;

/// How often these scenarios poll the server (each poll is a kubectl call).
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// A namespace whose `default` ServiceAccount exists (the ServiceAccount admission plugin
/// refuses pods before the controller made it).
pub(crate) async fn namespace(tb: &Testbed, ns: &str) {
    tb.namespace(ns);
    eventually_every(POLL, format!("ServiceAccount {ns}/default"), || async {
        tb.get("serviceaccount", ns, "default").map(|_| ())
    })
    .await;
}

/// A Job's pod runs on the node to completion: its projected ServiceAccount token and the
/// cluster's CA are mounted (the ServiceAccount admission plugin, the root-CA publisher), and
/// from the pod network the `kubernetes` Service's address (10.0.0.1:443) reaches the API
/// server (its HTTPS listener answers a plain-HTTP request with Go's own refusal). Its logs
/// come through the API server from the kubelet (the server's client certificate, the
/// kubelet's webhook authorization).
pub(crate) async fn a_job_pod_runs_to_completion_with_its_token(tb: Arc<Testbed>) {
    let ns = "node-pods";
    namespace(&tb, ns).await;
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let script = format!(
        "set -e; test -s {sa}/token; test -s {sa}/ca.crt; echo namespace=$(cat {sa}/namespace); \
         printf 'GET / HTTP/1.0\\r\\n\\r\\n' \
           | timeout 20 nc -w 5 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT"
    );
    tb.apply(&json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": "hello", "namespace": ns },
        "spec": {
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main",
                    "image": "initguard.test/busybox:1",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                }],
            }},
        },
    }));
    let job = eventually_every(POLL, "Job node-pods/hello to finish", || async {
        let job = tb.get("job", ns, "hello")?;
        let status = &job["status"];
        (status["succeeded"].as_i64() == Some(1) || status["failed"].as_i64().unwrap_or(0) > 0)
            .then_some(job)
    })
    .await;
    let pods = tb.list("pods", ns, Some("job-name=hello"));
    assert_eq!(
        job["status"]["succeeded"].as_i64(),
        Some(1),
        "the Job's pod failed: {job:#}\npods: {pods:#?}\nlogs: {}",
        tb.kubectl_with("admin", &["logs", "-n", ns, "job/hello"], None)
            .stdout
            .escape_ascii()
    );
    assert_eq!(pods.len(), 1, "{pods:#?}");
    let pod = &pods[0];
    assert_eq!(pod["spec"]["nodeName"], json!(node_name(&tb)), "{pod:#}");
    assert_eq!(pod["status"]["phase"], json!("Succeeded"), "{pod:#}");
    let logs = tb.kubectl(&["logs", "-n", ns, "job/hello"]);
    assert!(logs.contains(&format!("namespace={ns}")), "logs: {logs}");
    assert!(
        logs.contains("Client sent an HTTP request to an HTTPS server"),
        "the pod did not reach the API server through 10.0.0.1:443: {logs}"
    );
    tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// TESTBED_NODE of testbed.env: the real node's name.
pub(crate) fn node_name(tb: &Testbed) -> String {
    tb.env("TESTBED_NODE")
}

/// A pod turns Ready through its HTTP readiness probe (busybox's httpd, probed by the
/// kubelet over the pod network), and unready once the probed file is gone.
pub(crate) async fn a_pod_turns_ready_through_its_probe(tb: Arc<Testbed>) {
    let ns = "node-ready";
    namespace(&tb, ns).await;
    tb.apply(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "web", "namespace": ns },
        "spec": {
            "containers": [{
                "name": "main",
                "image": "initguard.test/busybox:1",
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "mkdir -p /www && echo ok >/www/ready && exec httpd -f -p 8080 -h /www"],
                "readinessProbe": {
                    "httpGet": { "path": "/ready", "port": 8080 },
                    "periodSeconds": 1,
                    "failureThreshold": 1,
                },
            }],
        },
    }));
    let ready = |want: &'static str| {
        let tb = tb.clone();
        move || {
            let tb = tb.clone();
            async move {
                let pod = tb.get("pod", ns, "web")?;
                pod["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == want)
                    .then_some(pod)
            }
        }
    };
    let pod = eventually_every(POLL, format!("{ns}/web Ready"), ready("True")).await;
    assert_eq!(pod["spec"]["nodeName"], json!(node_name(&tb)), "{pod:#}");
    tb.kubectl(&["exec", "-n", ns, "web", "--", "rm", "/www/ready"]);
    eventually_every(POLL, format!("{ns}/web unready"), ready("False")).await;
    tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}
