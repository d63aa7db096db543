//! `initguard why` and `status` read the guard's configuration where the chart put it (a
//! ConfigMap labelled `app.kubernetes.io/name=initguard`), without a copy on the reader's
//! machine: the binary runs as a process against the simulated server, as a user would run it.

use std::path::Path;

use initguard::config::Mechanism;
use serde_json::json;

use crate::harness::*;

/// `initguard ARGS --kubeconfig KUBECONFIG`: exit code, stdout, stderr.
async fn initguard(kubeconfig: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .expect("the initguard binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `initguard why waiting -n default EXTRA`.
async fn why(kubeconfig: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let args = [&["why", "waiting", "-n", "default"][..], extra].concat();
    initguard(kubeconfig, &args).await
}

/// The guard's configuration as the chart renders it, TLS files included: they exist only in
/// the guard's pod.
fn chart_config(deadline: &str) -> String {
    format!(
        "mechanism: initializers\nlisten: 127.0.0.1:9777\nsecureListen: 0.0.0.0:9778\n\
         tls: {{ certFile: /etc/initguard/tls/tls.crt, keyFile: /etc/initguard/tls/tls.key }}\n\
         optIn: {{ label: {OPT_IN} }}\n\
         initializers:\n  - {{ name: {SIDECAR}, deadline: {deadline}, \
         owner: {{ deployment: kube-system/sidecar-owner }} }}\n"
    )
}

fn config_map(namespace: &str, name: &str, text: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "app.kubernetes.io/name": "initguard" },
        },
        "data": { "config.yaml": text },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_and_status_read_the_charts_config_map() {
    let c = Cluster::start(Mechanism::Initializers).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    c.sim.write_kubeconfig(&kubeconfig, ADMIN).unwrap();
    c.namespace("ops").await;
    c.admin_post(
        "/api/v1/namespaces/ops/configmaps",
        &config_map("ops", "guard", &chart_config("1h")),
    )
    .await;
    c.pod("default", "waiting", true, &[SIDECAR, AUDIT]).await;

    // No --mechanism: the configuration's (legacy) is what finds an initializing pod at all.
    let (code, said, err) = why(&kubeconfig, &[]).await;
    assert_eq!(code, Some(0), "{said}{err}");
    for says in [
        format!("pod default/waiting waits on 2 initializer(s): {SIDECAR}, {AUDIT}"),
        "initguard's configuration (ConfigMap ops/guard):".to_owned(),
        "the pod is opted in".to_owned(),
        format!("{SIDECAR}: waited "),
        "bypass in ".to_owned(),
        "owner deployment kube-system/sidecar-owner: unknown".to_owned(),
        format!("{AUDIT}: waited -; none: "),
    ] {
        assert!(said.contains(&says), "why lacks {says:?}:\n{said}");
    }
    // `status` without --config reads the same ConfigMap.
    let (code, said, err) = initguard(&kubeconfig, &["status", "--output", "json"]).await;
    assert_eq!(code, Some(0), "{said}{err}");
    let report: serde_json::Value = serde_json::from_str(&said).expect("status JSON");
    assert_eq!(report["mechanism"], "initializers", "{report:#}");
    assert_eq!(report["waitingPods"][0]["name"], "waiting", "{report:#}");
    assert_eq!(
        report["owners"][0]["target"], "kube-system/sidecar-owner",
        "{report:#}"
    );

    // Two charts' ConfigMaps: which one is the reader's to say.
    c.namespace("other").await;
    c.admin_post(
        "/api/v1/namespaces/other/configmaps",
        &config_map("other", "guard", &chart_config("0s")),
    )
    .await;
    let (code, said, err) = why(&kubeconfig, &["--mechanism", "initializers"]).await;
    assert_eq!(code, Some(0), "the pod is still explained: {said}{err}");
    assert!(
        said.contains(
            "initguard's configuration: 2 ConfigMaps labelled app.kubernetes.io/name=initguard \
             hold config.yaml (ops/guard, other/guard); pass --config-map NAMESPACE/NAME"
        ),
        "{said}"
    );
    let (code, said, err) = initguard(&kubeconfig, &["status"]).await;
    assert!(
        code == Some(1) && err.contains("2 ConfigMaps labelled"),
        "{said}{err}"
    );
    // Named, the other one: deadline 0s, so the plan is a bypass now.
    let (code, said, err) = why(&kubeconfig, &["--config-map", "other/guard"]).await;
    assert_eq!(code, Some(0), "{said}{err}");
    assert!(
        said.contains("(ConfigMap other/guard)") && said.contains("bypass now"),
        "{said}"
    );
    // A ConfigMap that is not there is said; the pod is still explained.
    let (code, said, err) = why(&kubeconfig, &["--config-map", "ops/absent"]).await;
    assert!(
        code == Some(0) && said.contains("initguard's configuration: no ConfigMap ops/absent"),
        "{said}{err}"
    );
}
