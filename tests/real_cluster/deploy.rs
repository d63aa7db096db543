//! The install paths against the real API server: every manifest in deploy/, the kustomize
//! base and the Helm chart (default values and every optional object on) pass
//! `kubectl apply --dry-run=server` with the Prometheus Operator's CRDs installed, so that
//! PodMonitor and PrometheusRule are checked by their real schemas; `helm lint` passes; and
//! `helm install` creates every object it renders, as the server then lists them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use serde_yaml::Value as Yaml;

use crate::testbed::*;

const RELEASE: &str = "chart-test";
const NAMESPACE: &str = "initguard-chart";
/// An image repository that is not the chart's placeholder (which fails rendering).
pub(crate) const IMAGE: [&str; 2] = ["--set", "image.repository=registry.test/initguard"];

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn chart() -> PathBuf {
    repo().join("charts/initguard")
}

fn all_on_values() -> PathBuf {
    chart().join("ci/all-on-values.yaml")
}

/// Runs `program args`, failing the scenario with its output when it fails.
pub(crate) fn run(what: &str, program: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write as _;
    let mut child = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", program.display()));
    if let Some(text) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{what}: cannot write stdin: {e}"));
    }
    drop(child.stdin.take());
    let out: Output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A kubeconfig (written as `<file>.kubeconfig` in the test bed's folder) that authenticates
/// as the ServiceAccount `namespace/sa` with a TokenRequest token.
pub(crate) fn token_kubeconfig(tb: &Testbed, namespace: &str, sa: &str, file: &str) -> PathBuf {
    let token = tb.kubectl(&["create", "token", sa, "-n", namespace]);
    let kubeconfig = std::fs::read_to_string(tb.kubeconfig("admin"))
        .expect("admin kubeconfig")
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("token:") {
                format!("    token: {}", token.trim())
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = tb.dir.join(format!("{file}.kubeconfig"));
    std::fs::write(&path, kubeconfig).expect("write the kubeconfig");
    path
}

/// Plays the kubelet for one container of `pod` (the test bed runs none): its command line as
/// a host process, with a TokenRequest token of the pod's ServiceAccount in `$KUBECONFIG` (as
/// the in-cluster config would be) and every path in `mounts` (in the pod, on the host)
/// replaced in its arguments.
pub(crate) fn run_container(
    tb: &Testbed,
    pod: &serde_json::Value,
    container: &serde_json::Value,
    mounts: &[(&str, &Path)],
) -> Output {
    let namespace = pod["metadata"]["namespace"].as_str().expect("a namespace");
    let sa = pod["spec"]["serviceAccountName"]
        .as_str()
        .expect("a ServiceAccount");
    let pod_name = pod["metadata"]["name"].as_str().expect("a pod name");
    let name = container["name"].as_str().expect("a container name");
    let kubeconfig_path = token_kubeconfig(tb, namespace, sa, &format!("{pod_name}-{name}"));
    assert_eq!(
        container["command"],
        serde_json::json!(["/initguard"]),
        "{name} runs the guard's binary"
    );
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("the container's args")
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap_or_default();
            mounts
                .iter()
                .find(|(inside, _)| *inside == a)
                .map_or_else(|| a.to_owned(), |(_, host)| host.display().to_string())
        })
        .collect();
    Command::new(env!("CARGO_BIN_EXE_initguard"))
        .args(&args)
        .env("KUBECONFIG", &kubeconfig_path)
        .output()
        .unwrap_or_else(|e| panic!("{pod_name}/{name} ({args:?}): {e}"))
}

/// The release's rendered config.yaml (its ConfigMap), written to a host file.
pub(crate) fn release_config(tb: &Testbed, release: &str, namespace: &str) -> PathBuf {
    let rendered = tb.kubectl(&[
        "get",
        "configmap",
        &format!("{release}-initguard"),
        "-n",
        namespace,
        "-o",
        "jsonpath={.data.config\\.yaml}",
    ]);
    let path = tb.dir.join(format!("{release}-config.yaml"));
    std::fs::write(&path, rendered).expect("write the release's config");
    path
}

/// Reports `pod` finished with `phase` through `pods/status`, as its kubelet would.
pub(crate) fn finish_pod(tb: &Testbed, namespace: &str, pod: &str, phase: &str) {
    patch_pod_status(
        tb,
        namespace,
        pod,
        &serde_json::json!({ "status": { "phase": phase } }),
    );
}

/// (kind, namespace, name) of every object in a multi-document YAML text.
fn objects(text: &str) -> Vec<(String, Option<String>, String)> {
    let mut out = Vec::new();
    for de in serde_yaml::Deserializer::from_str(text) {
        let doc: Yaml = serde::Deserialize::deserialize(de).expect("rendered YAML parses");
        let (Some(kind), Some(name)) = (doc["kind"].as_str(), doc["metadata"]["name"].as_str())
        else {
            continue;
        };
        let namespace = doc["metadata"]["namespace"].as_str().map(str::to_owned);
        out.push((kind.to_owned(), namespace, name.to_owned()));
    }
    out
}

/// `kubectl apply --dry-run=server` of a rendered chart in the chart's namespace.
fn server_dry_run(kubectl: &Path, admin: &str, rendered: &str) {
    run(
        "kubectl apply --dry-run=server (helm template)",
        kubectl,
        &[
            "--kubeconfig",
            admin,
            "apply",
            "--dry-run=server",
            "--namespace",
            NAMESPACE,
            "-f",
            "-",
        ],
        Some(rendered),
    );
}

/// The Prometheus Operator's CRDs that the chart's objects use, established (idempotent).
pub(crate) fn install_crds(tb: &Testbed) {
    let crds = tb
        .bin
        .parent()
        .map(|cache| cache.join("crds"))
        .unwrap_or_default();
    assert!(
        crds.is_dir(),
        "tests/testbed/build did not provide the CRDs in {}",
        crds.display()
    );
    tb.kubectl(&[
        "apply",
        "--server-side",
        "-f",
        crds.to_str().expect("UTF-8 path"),
    ]);
    for crd in ["podmonitors", "prometheusrules", "servicemonitors"] {
        tb.kubectl(&[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            &format!("crd/{crd}.monitoring.coreos.com"),
        ]);
    }
}

pub(crate) async fn manifests_kustomize_and_chart_install_on_the_real_server(tb: Arc<Testbed>) {
    let helm = tb.bin.join("helm");
    assert!(
        helm.exists(),
        "tests/testbed/build did not provide helm in {}",
        tb.bin.display()
    );
    let admin = tb.kubeconfig("admin");
    let admin = admin.to_str().expect("UTF-8 path");
    let kubectl = tb.kubectl_path();

    install_crds(&tb);

    // Every Kubernetes manifest in deploy/, as the server would take it.
    let mut checked = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy"))
        .expect("deploy/")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for file in entries {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if !name.ends_with(".yaml") || name == "kustomization.yaml" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        if objects(&text).is_empty() {
            continue; // the guard's config, a Prometheus scrape or rule file
        }
        run(
            &format!("kubectl apply --dry-run=server -f deploy/{name}"),
            &kubectl,
            &[
                "--kubeconfig",
                admin,
                "apply",
                "--dry-run=server",
                "-f",
                file.to_str().unwrap(),
            ],
            None,
        );
        checked.push(name);
    }
    for needed in [
        "rbac.yaml",
        "deployment.yaml",
        "static-pod.yaml",
        "podmonitor.yaml",
        "prometheus-rules.yaml",
    ] {
        assert!(
            checked.iter().any(|c| c == needed),
            "deploy/{needed} not checked"
        );
    }

    // The kustomize base.
    let kustomized = run(
        "kubectl kustomize deploy/",
        &kubectl,
        &["kustomize", repo().join("deploy").to_str().unwrap()],
        None,
    );
    assert!(
        objects(&kustomized)
            .iter()
            .any(|(k, _, _)| k == "Deployment"),
        "the kustomize base renders no Deployment"
    );
    run(
        "kubectl apply --dry-run=server -k deploy/",
        &kubectl,
        &[
            "--kubeconfig",
            admin,
            "apply",
            "--dry-run=server",
            "-f",
            "-",
        ],
        Some(&kustomized),
    );

    // The chart: lint and render with default values and with everything on.
    tb.namespace(NAMESPACE);
    let chart_dir = chart();
    let chart_path = chart_dir.to_str().unwrap();
    let values = all_on_values();
    let values = values.to_str().unwrap();
    for extra in [&IMAGE[..], &["-f", values][..]] {
        run(
            "helm lint",
            &helm,
            &[&["lint", "--strict", chart_path][..], extra].concat(),
            None,
        );
        let rendered = run(
            "helm template",
            &helm,
            &[
                &["template", RELEASE, chart_path, "--namespace", NAMESPACE][..],
                extra,
            ]
            .concat(),
            None,
        );
        // The config the chart renders is one the guard accepts. (With tlsSecretName set it
        // names PEM files that exist only in the pod, which check-config reads: so the
        // default values only.)
        if extra != IMAGE {
            server_dry_run(&kubectl, admin, &rendered);
            continue;
        }
        // Without optIn.namespaceSelector the guard may not read Namespaces.
        assert!(
            !rendered.contains("\"namespaces\""),
            "the default chart grants Namespace reads"
        );
        let config = serde_yaml::Deserializer::from_str(&rendered)
            .filter_map(|de| serde::Deserialize::deserialize(de).ok())
            .find_map(|doc: Yaml| {
                (doc["kind"].as_str() == Some("ConfigMap"))
                    .then(|| doc["data"]["config.yaml"].as_str().map(str::to_owned))
                    .flatten()
            })
            .expect("the chart renders a ConfigMap with config.yaml");
        let path = tb.dir.join("chart-config.yaml");
        std::fs::write(&path, &config).expect("write the rendered config");
        run(
            "initguard check-config (the chart's config)",
            Path::new(env!("CARGO_BIN_EXE_initguard")),
            &["check-config", path.to_str().unwrap()],
            None,
        );
        server_dry_run(&kubectl, admin, &rendered);
    }

    // helm install: every rendered object exists afterwards, as the server lists it.
    let notes = run(
        "helm install",
        &helm,
        &[
            "--kubeconfig",
            admin,
            "install",
            RELEASE,
            chart_path,
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "-f",
            values,
        ],
        None,
    );
    // NOTES.txt says what is configured and how to look, from these values.
    for said in [
        "DRY RUN is ON",
        "webhook validating/pod-policy/pods.policy.example.com",
        "label its pod template initguard.io/bypass=true",
        "a namespace whose labels match initguard.io/opt-in-allowed=true",
        &format!("kubectl -n {NAMESPACE} exec deploy/{RELEASE}-initguard -- /initguard status"),
        "The alerts select job=\"initguard\"",
        "(https://docs.example.com/initguard/README.md)",
    ] {
        assert!(notes.contains(said), "NOTES lack {said:?}:\n{notes}");
    }
    // In dry run nothing is written, InitializerWaiting Events included: not promised.
    assert!(
        !notes.contains("InitializerWaiting"),
        "NOTES promise Events in dry run:\n{notes}"
    );
    let manifest = run(
        "helm get manifest",
        &helm,
        &[
            "--kubeconfig",
            admin,
            "get",
            "manifest",
            RELEASE,
            "--namespace",
            NAMESPACE,
        ],
        None,
    );
    let installed = objects(&manifest);
    for kind in [
        "Deployment",
        "PodDisruptionBudget",
        "ConfigMap",
        "ClusterRole",
        "PodMonitor",
        "PrometheusRule",
        "Secret",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(
            installed.iter().any(|(k, _, _)| k == kind),
            "the chart with every option on renders no {kind}"
        );
    }
    for (kind, namespace, name) in &installed {
        let mut args = vec!["get", kind.as_str(), name.as_str(), "-o", "name"];
        if let Some(ns) = namespace {
            args.extend(["-n", ns.as_str()]);
        }
        let got = tb.kubectl(&args);
        assert!(
            got.trim().ends_with(&format!("/{name}")),
            "{kind} {name} rendered but not on the server: {got:?}"
        );
    }
    // optIn.namespaceSelector is set: the guard's ClusterRole may list and watch Namespaces
    // (the default render above has no such rule).
    let namespace_rules: Vec<String> = installed
        .iter()
        .filter(|(kind, _, _)| kind == "ClusterRole")
        .map(|(_, _, name)| tb.kubectl(&["get", "clusterrole", name.as_str(), "-o", "json"]))
        .filter(|role| role.contains("\"namespaces\""))
        .collect();
    assert_eq!(
        namespace_rules.len(),
        1,
        "one ClusterRole grants the Namespace watch: {namespace_rules:?}"
    );
    assert!(
        namespace_rules[0].contains("\"watch\"") && namespace_rules[0].contains("\"list\""),
        "{namespace_rules:?}"
    );
    // The grafana sidecar's label and the values-driven PrometheusRule label.
    let dashboard = tb.kubectl(&[
        "get",
        "configmap",
        "-n",
        NAMESPACE,
        "-l",
        "grafana_dashboard=1",
        "-o",
        "name",
    ]);
    assert!(
        !dashboard.trim().is_empty(),
        "no ConfigMap labelled grafana_dashboard=1"
    );
    let rules = tb.kubectl(&[
        "get",
        "prometheusrule",
        "-n",
        NAMESPACE,
        "-l",
        "release=kube-prometheus-stack",
        "-o",
        "jsonpath={.items[0].spec.groups[0].rules[0].annotations.runbook_url}",
    ]);
    assert!(
        rules.starts_with("https://docs.example.com/initguard/README.md#initguard"),
        "runbook_url from values: {rules:?}"
    );

    run(
        "helm uninstall",
        &helm,
        &[
            "--kubeconfig",
            admin,
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            // The restore hook's pod would never run here (no kubelet);
            // webhooks::webhook_bypass_is_restored_by_helm_uninstall runs it.
            "--no-hooks",
        ],
        None,
    );
    tb.kubectl(&["delete", "namespace", NAMESPACE, "--wait=false"]);
}

/// Every rule of the rendered ClusterRole `NAME` as (apiGroup, resource, verb, resourceName or
/// "*"), and every Role's rules the same way.
fn rendered_rules(
    rendered: &str,
    kind: &str,
    name: &str,
) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for de in serde_yaml::Deserializer::from_str(rendered) {
        let doc: Yaml = serde::Deserialize::deserialize(de).expect("rendered YAML parses");
        if doc["kind"].as_str() != Some(kind) || doc["metadata"]["name"].as_str() != Some(name) {
            continue;
        }
        let list = |v: &Yaml| -> Vec<String> {
            v.as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        for rule in doc["rules"].as_sequence().into_iter().flatten() {
            let names = list(&rule["resourceNames"]);
            let names = if names.is_empty() {
                vec!["*".to_owned()]
            } else {
                names
            };
            for group in list(&rule["apiGroups"]) {
                for resource in list(&rule["resources"]) {
                    for verb in list(&rule["verbs"]) {
                        for n in &names {
                            out.insert((group.clone(), resource.clone(), verb.clone(), n.clone()));
                        }
                    }
                }
            }
        }
    }
    out
}

fn rule_set(list: &[(&str, &str, &[&str], &[&str])]) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for (group, resource, verbs, names) in list {
        let names: Vec<&str> = if names.is_empty() {
            vec!["*"]
        } else {
            names.to_vec()
        };
        for verb in *verbs {
            for n in &names {
                out.insert((
                    (*group).to_owned(),
                    (*resource).to_owned(),
                    (*verb).to_owned(),
                    (*n).to_owned(),
                ));
            }
        }
    }
    out
}

/// The chart's webhook RBAC is exactly what the listed webhooks need: the listed
/// configurations by name; EndpointSlices and Services for default owners only; the canary
/// namespace by name and a dry-run create Role there for an `apiserver` owner; Namespace lists
/// for `afterRestore: report | evict` and Evictions for `evict` only.
pub(crate) async fn chart_webhook_rbac_is_exactly_what_the_webhooks_need(tb: Arc<Testbed>) {
    let helm = tb.bin.join("helm");
    let chart_dir = chart();
    let chart_path = chart_dir.to_str().expect("UTF-8 path");
    // The chart rendered with `config.KEY` set to `value` (nothing set when `value` is null).
    let render_with = |key: &str, value: serde_json::Value| {
        let set = format!("config.{key}={value}");
        let mut args = vec!["template", RELEASE, chart_path, "--namespace", NAMESPACE];
        args.extend(IMAGE);
        if !value.is_null() {
            args.extend(["--set-json", set.as_str()]);
        }
        run(&format!("helm template ({key})"), &helm, &args, None)
    };
    let render = |webhooks: serde_json::Value| render_with("webhooks", webhooks);
    let role = format!("{RELEASE}-initguard-webhooks");
    let patching: &[&str] = &["get", "list", "watch", "patch"];

    let rendered = render(serde_json::json!([
        { "name": "validating/pod-policy/pods.policy.example.com" },
    ]));
    assert_eq!(
        rendered_rules(&rendered, "ClusterRole", &role),
        rule_set(&[
            (
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                patching,
                &["pod-policy"]
            ),
            (
                "discovery.k8s.io",
                "endpointslices",
                &["list", "watch"],
                &[]
            ),
            ("", "services", &["get", "list", "watch"], &[]),
        ]),
        "{rendered}"
    );

    let rendered = render(serde_json::json!([
        { "name": "mutating/injector/inject.example.com",
          "owner": { "apiserver": { "namespace": "canary" } },
          "afterRestore": "evict" },
        { "name": "mutating/other/other.example.com",
          "owner": { "lease": "other-system/other" },
          "afterRestore": "report" },
    ]));
    assert_eq!(
        rendered_rules(&rendered, "ClusterRole", &role),
        rule_set(&[
            (
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                patching,
                &["injector", "other"]
            ),
            ("", "namespaces", &["list"], &[]),
            ("", "pods/eviction", &["create"], &[]),
            ("", "namespaces", &["get", "list", "watch"], &["canary"]),
        ]),
        "{rendered}"
    );
    assert_eq!(
        rendered_rules(&rendered, "Role", &format!("{RELEASE}-initguard-canary-0")),
        rule_set(&[("", "pods", &["create"], &[])]),
        "{rendered}"
    );

    let rendered = render(serde_json::json!([
        { "name": "mutating/other/other.example.com",
          "owner": { "lease": "other-system/other" },
          "afterRestore": "report" },
    ]));
    assert_eq!(
        rendered_rules(&rendered, "ClusterRole", &role),
        rule_set(&[
            (
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                patching,
                &["other"]
            ),
            ("", "namespaces", &["list"], &[]),
        ]),
        "{rendered}"
    );
    // A `service` owner of an initializer needs EndpointSlices in the main ClusterRole.
    let main_role = format!("{RELEASE}-initguard");
    let endpointslices = (
        "discovery.k8s.io".to_owned(),
        "endpointslices".to_owned(),
        "list".to_owned(),
        "*".to_owned(),
    );
    let plain = render_with("initializers", serde_json::Value::Null);
    assert!(
        !rendered_rules(&plain, "ClusterRole", &main_role).contains(&endpointslices),
        "{plain}"
    );
    let initializers = serde_json::json!([
        { "name": "mesh.example.com", "owner": { "service": "mesh-system/mesh" } },
    ]);
    let with_service = render_with("initializers", initializers);
    assert!(
        rendered_rules(&with_service, "ClusterRole", &main_role).contains(&endpointslices),
        "{with_service}"
    );
}
