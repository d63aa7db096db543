//! The real kubectl (the test bed's) against the simulator (skipped with a message when it is
//! not built, failed with CI set).

use initguard_sim::SimClients as _;
use std::path::PathBuf;
use std::process::Stdio;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::common::{ADMIN, namespace, pod, sim};

/// The test bed's kubectl, with a kubeconfig for the simulator in a temporary directory.
struct Kubectl {
    path: PathBuf,
    dir: tempfile::TempDir,
}

/// kubectl for `sim`, or None when kubectl is missing.
fn setup(sim: &kube_sim::Sim) -> Option<Kubectl> {
    let kubectl = match initguard_test_support::tools::kubectl() {
        Ok(path) => path,
        Err(why) => {
            initguard_test_support::tools::missing("sim::kubectl", "kubectl", &why);
            return None;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    sim.write_kubeconfig(&dir.path().join("config"), ADMIN)
        .unwrap();
    Some(Kubectl { path: kubectl, dir })
}

fn kubectl(Kubectl { path, dir }: &Kubectl) -> Command {
    let mut c = Command::new(path);
    c.arg("--kubeconfig")
        .arg(dir.path().join("config"))
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .env("HOME", dir.path())
        .kill_on_drop(true);
    c
}

async fn run(dir: &Kubectl, args: &[&str]) -> (bool, String, String) {
    let out = kubectl(dir).args(args).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("$ kubectl {}\n{stdout}{stderr}", args.join(" "));
    (out.status.success(), stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_label_annotate_patch_delete() {
    let sim = sim().await;
    let Some(dir) = setup(&sim) else { return };
    let client = sim.client(ADMIN);
    namespace(&client, "k").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "k");
    pods.create(
        &PostParams::default(),
        &pod("gated", &[], &["example.com/gate"]),
    )
    .await
    .unwrap();
    pods.create(&PostParams::default(), &pod("plain", &[], &[]))
        .await
        .unwrap();

    let (ok, out, _) = run(&dir, &["get", "pods", "-A", "-o", "json"]).await;
    assert!(ok);
    let list: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gated", "plain"]);

    let (ok, out, _) = run(&dir, &["get", "pods", "-n", "k"]).await;
    assert!(ok);
    let gated_line = out
        .lines()
        .find(|l| l.starts_with("gated"))
        .expect("a row for the gated pod");
    assert!(gated_line.contains("SchedulingGated"), "{out}");
    assert!(out.lines().next().unwrap().contains("STATUS"), "{out}");

    let (ok, _, _) = run(&dir, &["label", "pod", "plain", "-n", "k", "tier=web"]).await;
    assert!(ok);
    let (ok, _, _) = run(&dir, &["annotate", "pod", "plain", "-n", "k", "note=hello"]).await;
    assert!(ok);
    let p = pods.get("plain").await.unwrap();
    assert_eq!(p.metadata.labels.unwrap()["tier"], "web");
    assert_eq!(p.metadata.annotations.unwrap()["note"], "hello");
    let (ok, out, _) = run(
        &dir,
        &["get", "pods", "-n", "k", "-l", "tier=web", "-o", "name"],
    )
    .await;
    assert!(ok);
    assert_eq!(out.trim(), "pod/plain");

    let failing = r#"[{"op":"test","path":"/metadata/labels/tier","value":"db"},{"op":"remove","path":"/metadata/labels/tier"}]"#;
    let (ok, _, err) = run(
        &dir,
        &[
            "patch",
            "pod",
            "plain",
            "-n",
            "k",
            "--type=json",
            "-p",
            failing,
        ],
    )
    .await;
    assert!(!ok, "a failing test must reject the patch");
    assert!(err.contains("testing value"), "{err}");
    let passing = r#"[{"op":"test","path":"/metadata/labels/tier","value":"web"},{"op":"remove","path":"/metadata/labels/tier"}]"#;
    let (ok, _, _) = run(
        &dir,
        &[
            "patch",
            "pod",
            "plain",
            "-n",
            "k",
            "--type=json",
            "-p",
            passing,
        ],
    )
    .await;
    assert!(ok);
    assert!(
        !pods
            .get("plain")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("tier")
    );

    let (ok, out, _) = run(&dir, &["delete", "pod", "plain", "-n", "k"]).await;
    assert!(ok);
    assert!(out.contains("pod \"plain\" deleted"), "{out}");
    assert!(pods.get_opt("plain").await.unwrap().is_none());
    let manifest = dir.dir.path().join("pod.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: from-file\n  namespace: k\nspec:\n  containers:\n  - name: c\n    image: busybox\n").unwrap();
    let (ok, _, _) = run(&dir, &["create", "-f", manifest.to_str().unwrap()]).await;
    assert!(ok);
    let (ok, _, _) = run(&dir, &["describe", "pod", "from-file", "-n", "k"]).await;
    assert!(ok);
    let (ok, _, _) = run(&dir, &["get", "deploy,leases,ns,events", "-A"]).await;
    assert!(ok);
    assert!(
        sim.requests().iter().all(|r| r.status < 500),
        "kubectl never gets a server error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_prints_new_pods() {
    let sim = sim().await;
    let Some(dir) = setup(&sim) else { return };
    let client = sim.client(ADMIN);
    namespace(&client, "w").await;
    let mut child = kubectl(&dir)
        .args(["get", "pods", "-n", "w", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Wait for the watch to be open before creating the pod.
    crate::common::eventually_async("the kubectl watch to open", || {
        let sim = sim.clone();
        async move {
            sim.counts()
                .contains_key(&("watch".to_string(), "pods".to_string()))
                .then_some(())
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client, "w");
    pods.create(&PostParams::default(), &pod("watched", &[], &["g"]))
        .await
        .unwrap();
    let line = tokio::time::timeout(crate::wait::PATIENCE, async {
        loop {
            let l = lines.next_line().await.unwrap().expect("kubectl output");
            eprintln!("kubectl -w: {l}");
            if l.contains("watched") {
                return l;
            }
        }
    })
    .await
    .expect("kubectl printed the new pod");
    assert!(line.contains("ADDED"), "{line}");
    child.kill().await.unwrap();
}
