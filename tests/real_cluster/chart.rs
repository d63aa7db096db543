//! The chart's values do what values.yaml says, judged from what `helm template` renders (the
//! chart's unit tests): the placeholder image, anti-affinity modes, the PodDisruptionBudget,
//! the priority class, both scrape paths and their auth, the alerts' job, disabled alerts and
//! extra labels, the pod's extra settings, commonLabels and the NetworkPolicy. Each assertion
//! reads the rendered object, so a broken template fails it. The renders that create objects
//! pass `kubectl apply --dry-run=server` with the real CRDs.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use serde_yaml::Value as Yaml;

use crate::deploy::{IMAGE, chart, run, run_container};
use crate::testbed::*;

const RELEASE: &str = "unit";
const NAMESPACE: &str = "initguard-chart-unit";

/// `helm template` with `args` after the chart: every rendered document, or the error text.
fn template(helm: &Path, namespace: &str, args: &[&str]) -> Result<Vec<Yaml>, String> {
    let chart = chart();
    let out = Command::new(helm)
        .args(["template", RELEASE])
        .arg(&chart)
        .args(["--namespace", namespace])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm.display()));
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok(serde_yaml::Deserializer::from_str(&text)
        .map(|de| serde::Deserialize::deserialize(de).expect("rendered YAML parses"))
        .filter(|doc: &Yaml| doc["kind"].is_string())
        .collect())
}

/// The render with the test image and `args`, which must succeed.
fn render(helm: &Path, args: &[&str]) -> Vec<Yaml> {
    let args = [&IMAGE[..], args].concat();
    template(helm, NAMESPACE, &args)
        .unwrap_or_else(|e| panic!("helm template {args:?} failed: {e}"))
}

/// The render with `args` must fail, naming `why`.
fn refused(helm: &Path, args: &[&str], why: &str) {
    match template(helm, NAMESPACE, args) {
        Ok(docs) => panic!(
            "helm template {args:?} rendered {} objects; expected it to fail with {why:?}",
            docs.len()
        ),
        Err(e) => assert!(e.contains(why), "helm template {args:?}: {e}"),
    }
}

fn kinds(docs: &[Yaml], kind: &str) -> Vec<Yaml> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .cloned()
        .collect()
}

fn one(docs: &[Yaml], kind: &str) -> Yaml {
    let found = kinds(docs, kind);
    assert_eq!(found.len(), 1, "one {kind} rendered: {found:?}");
    found.into_iter().next().expect("one")
}

fn pod_spec(docs: &[Yaml]) -> Yaml {
    one(docs, "Deployment")["spec"]["template"]["spec"].clone()
}

/// Every `job="..."` matcher value in the PrometheusRule's expressions, and its alert names.
fn rule_jobs_and_alerts(rule: &Yaml) -> (Vec<String>, Vec<String>) {
    let mut jobs = Vec::new();
    let mut alerts = Vec::new();
    for group in rule["spec"]["groups"].as_sequence().into_iter().flatten() {
        for r in group["rules"].as_sequence().into_iter().flatten() {
            if let Some(alert) = r["alert"].as_str() {
                alerts.push(alert.to_owned());
            }
            let expr = r["expr"].as_str().unwrap_or_default();
            for part in expr.split("job=\"").skip(1) {
                jobs.push(part.split('"').next().unwrap_or_default().to_owned());
            }
        }
    }
    (jobs, alerts)
}

fn server_dry_run(tb: &Testbed, docs: &[Yaml]) {
    let text = docs
        .iter()
        .map(|d| serde_yaml::to_string(d).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n");
    let admin = tb.kubeconfig("admin");
    run(
        "kubectl apply --dry-run=server (chart unit render)",
        &tb.kubectl_path(),
        &[
            "--kubeconfig",
            admin.to_str().expect("UTF-8 path"),
            "apply",
            "--dry-run=server",
            "--namespace",
            NAMESPACE,
            "-f",
            "-",
        ],
        Some(&text),
    );
}

pub(crate) async fn chart_values_render_as_documented(tb: Arc<Testbed>) {
    let helm = tb.bin.join("helm");
    assert!(helm.exists(), "tests/testbed/build did not provide helm");
    let helm = helm.as_path();

    // The placeholder image fails rendering unless acknowledged.
    refused(helm, &[], "image.repository is the placeholder");
    let docs = template(helm, NAMESPACE, &["--set", "image.allowPlaceholder=true"])
        .expect("the placeholder renders when acknowledged");
    assert_eq!(
        pod_spec(&docs)["containers"][0]["image"].as_str(),
        Some("registry.example.com/initguard:0.1.0")
    );

    // Anti-affinity: soft by default, hard, none; `affinity` replaces it; anything else fails.
    let anti = |args: &[&str]| pod_spec(&render(helm, args))["affinity"].clone();
    let soft = anti(&[]);
    let term = &soft["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        term["podAffinityTerm"]["topologyKey"].as_str(),
        Some("kubernetes.io/hostname")
    );
    assert_eq!(
        term["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"]
            .as_str(),
        Some(RELEASE)
    );
    assert!(soft["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"].is_null());
    let hard = anti(&["--set", "antiAffinity=hard"]);
    assert_eq!(
        hard["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
            .as_str(),
        Some("kubernetes.io/hostname"),
        "{hard:?}"
    );
    assert!(hard["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"].is_null());
    assert!(anti(&["--set", "antiAffinity=none"]).is_null());
    let own = anti(&[
        "--set",
        "antiAffinity=hard",
        "--set-json",
        r#"affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]}]}}}"#,
    ]);
    assert!(
        own["podAntiAffinity"].is_null() && own["nodeAffinity"].is_mapping(),
        "{own:?}"
    );
    refused(
        helm,
        &[&IMAGE[..], &["--set", "antiAffinity=sometimes"]].concat(),
        "at '/antiAffinity': value must be one of 'soft', 'hard', 'none'",
    );
    // The template refuses it too where the schema is skipped.
    refused(
        helm,
        &[
            &IMAGE[..],
            &[
                "--set",
                "antiAffinity=sometimes",
                "--skip-schema-validation",
            ],
        ]
        .concat(),
        "antiAffinity: \"sometimes\" is not one of soft, hard, none",
    );
    let spread = pod_spec(&render(
        helm,
        &[
            "--set-json",
            r#"topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"initguard"}}}]"#,
        ],
    ));
    assert_eq!(
        spread["topologySpreadConstraints"][0]["topologyKey"].as_str(),
        Some("topology.kubernetes.io/zone")
    );

    // A PodDisruptionBudget only where a replica can be spared.
    assert_eq!(kinds(&render(helm, &[]), "PodDisruptionBudget").len(), 1);
    assert!(
        kinds(
            &render(helm, &["--set", "replicaCount=1"]),
            "PodDisruptionBudget"
        )
        .is_empty()
    );

    // system-cluster-critical only in kube-system, unless set.
    let priority = |namespace: &str, args: &[&str]| {
        let docs = template(helm, namespace, &[&IMAGE[..], args].concat()).expect("renders");
        pod_spec(&docs)["priorityClassName"]
            .as_str()
            .map(str::to_owned)
    };
    assert_eq!(
        priority("kube-system", &[]).as_deref(),
        Some("system-cluster-critical")
    );
    assert_eq!(priority(NAMESPACE, &[]), None);
    assert_eq!(
        priority(NAMESPACE, &["--set", "priorityClassName=platform"]).as_deref(),
        Some("platform")
    );

    // Scraping: the PodMonitor authenticates with a Secret key through `authorization`; the
    // ServiceMonitor with Prometheus' own token file, and only with a reader named; not both.
    let docs = render(
        helm,
        &[
            "--set",
            "metrics.podMonitor.enabled=true",
            "--set",
            "metrics.podMonitor.namespace=monitoring",
        ],
    );
    // The token Secret and its ServiceAccount sit beside the PodMonitor, where the operator
    // reads the Secret, and the reader binding names them there.
    for kind in ["PodMonitor", "Secret"] {
        assert_eq!(
            one(&docs, kind)["metadata"]["namespace"].as_str(),
            Some("monitoring"),
            "{kind}"
        );
    }
    let scraper = kinds(&docs, "ServiceAccount")
        .into_iter()
        .find(|a| a["metadata"]["name"].as_str() == Some("unit-initguard-scraper"))
        .expect("the scraper's ServiceAccount");
    assert_eq!(
        scraper["metadata"]["namespace"].as_str(),
        Some("monitoring")
    );
    let binding = kinds(&docs, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"].as_str() == Some("unit-initguard-metrics-reader"))
        .expect("the metrics reader binding");
    assert_eq!(
        binding["subjects"][0]["namespace"].as_str(),
        Some("monitoring")
    );
    let endpoint = &one(&docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["authorization"]["type"].as_str(), Some("Bearer"));
    let secret = endpoint["authorization"]["credentials"]["name"].as_str();
    assert!(endpoint["bearerTokenSecret"].is_null(), "{endpoint:?}");
    let token = one(&docs, "Secret");
    assert_eq!(token["metadata"]["name"].as_str(), secret);
    assert_eq!(
        token["type"].as_str(),
        Some("kubernetes.io/service-account-token")
    );
    assert!(kinds(&docs, "ServiceMonitor").is_empty() && kinds(&docs, "Service").is_empty());
    refused(
        helm,
        &[
            &IMAGE[..],
            &["--set", "metrics.serviceMonitor.enabled=true"],
        ]
        .concat(),
        "list that ServiceAccount in metrics.readers",
    );
    let reader = r#"metrics.readers=[{"namespace":"monitoring","name":"prometheus-k8s"}]"#;
    refused(
        helm,
        &[
            &IMAGE[..],
            &[
                "--set",
                "metrics.serviceMonitor.enabled=true",
                "--set",
                "metrics.podMonitor.enabled=true",
                "--set-json",
                reader,
            ],
        ]
        .concat(),
        "are both enabled",
    );
    let docs = render(
        helm,
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set-json",
            reader,
            "--set",
            "prometheusRule.enabled=true",
            "--set-json",
            r#"metrics.serviceMonitor.labels={"release":"kube-prometheus-stack"}"#,
        ],
    );
    let monitor = one(&docs, "ServiceMonitor");
    let service = one(&docs, "Service");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["bearerTokenFile"].as_str(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/token")
    );
    assert_eq!(endpoint["port"], service["spec"]["ports"][0]["name"]);
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("the ServiceMonitor selects by labels")
    {
        assert_eq!(
            &service["metadata"]["labels"][key], value,
            "the ServiceMonitor selects the Service: {key:?}"
        );
    }
    assert_eq!(service["spec"]["selector"], pod_spec_labels_selector(&docs));
    let monitor_job = service["metadata"]["labels"]
        [monitor["spec"]["jobLabel"].as_str().expect("jobLabel")]
    .as_str()
    .expect("the job label's value")
    .to_owned();
    let (jobs, _) = rule_jobs_and_alerts(&one(&docs, "PrometheusRule"));
    assert!(
        !jobs.is_empty() && jobs.iter().all(|j| *j == monitor_job),
        "{jobs:?}"
    );
    let readers = kinds(&docs, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"].as_str() == Some("unit-initguard-metrics-reader"))
        .expect("Prometheus' ServiceAccount is bound to the metrics reader");
    assert_eq!(
        readers["subjects"][0]["name"].as_str(),
        Some("prometheus-k8s")
    );
    tb.namespace(NAMESPACE);
    crate::deploy::install_crds(&tb);
    server_dry_run(&tb, &docs);

    // The alerts' job follows nameOverride through the PodMonitor's job label; without a chart
    // monitor it must be named; alerts can be disabled and labelled.
    let docs = render(
        helm,
        &[
            "--set",
            "nameOverride=guard",
            "--set",
            "metrics.podMonitor.enabled=true",
            "--set",
            "prometheusRule.enabled=true",
        ],
    );
    let pod_labels = &one(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"];
    let job_label = one(&docs, "PodMonitor")["spec"]["jobLabel"]
        .as_str()
        .expect("jobLabel")
        .to_owned();
    assert_eq!(pod_labels[job_label.as_str()].as_str(), Some("guard"));
    let guard_rule = one(&docs, "PrometheusRule");
    let text = serde_yaml::to_string(&guard_rule).expect("YAML");
    assert!(
        text.contains("initguard_pileup_max_waiting_pods{job=\"guard\""),
        "the pileup annotation's query follows the job: {text}"
    );
    let (jobs, all_alerts) = rule_jobs_and_alerts(&guard_rule);
    assert!(
        !jobs.is_empty() && jobs.iter().all(|j| j == "guard"),
        "{jobs:?}"
    );
    refused(
        helm,
        &[&IMAGE[..], &["--set", "prometheusRule.enabled=true"]].concat(),
        "prometheusRule.job: no chart monitor is enabled",
    );
    let docs = render(
        helm,
        &[
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.job=kubernetes-pods",
            "--set",
            "prometheusRule.disabled.InitguardPileup=true",
            "--set",
            "prometheusRule.additionalRuleLabels.team=platform",
            "--set",
            "prometheusRule.additionalRuleLabels.severity=page",
            "--set",
            "prometheusRule.additionalRuleAnnotations.dashboard=https://grafana.example.com/d/initguard",
        ],
    );
    let rule = one(&docs, "PrometheusRule");
    // The job follows into the annotations' words too.
    let text = serde_yaml::to_string(&rule).expect("YAML");
    assert!(
        !text.contains("job=\"initguard\"") && !text.contains("job \"initguard\""),
        "{text}"
    );
    assert!(text.contains("in job \"kubernetes-pods\""), "{text}");
    let (jobs, alerts) = rule_jobs_and_alerts(&rule);
    assert!(
        !jobs.is_empty() && jobs.iter().all(|j| j == "kubernetes-pods"),
        "{jobs:?}"
    );
    assert!(all_alerts.iter().any(|a| a == "InitguardPileup"));
    assert_eq!(
        alerts,
        all_alerts
            .iter()
            .filter(|a| *a != "InitguardPileup")
            .cloned()
            .collect::<Vec<_>>()
    );
    for group in rule["spec"]["groups"].as_sequence().into_iter().flatten() {
        for r in group["rules"].as_sequence().into_iter().flatten() {
            if r["alert"].is_string() {
                assert_eq!(r["labels"]["team"].as_str(), Some("platform"), "{r:?}");
                // An extra label replaces the alert's own (routing by severity).
                assert_eq!(r["labels"]["severity"].as_str(), Some("page"), "{r:?}");
                assert!(r["annotations"]["dashboard"].is_string(), "{r:?}");
                assert!(
                    r["annotations"]["summary"].is_string(),
                    "own annotations kept: {r:?}"
                );
            }
        }
    }

    // The node stage's DaemonSet owners add the DaemonSet watch to the ClusterRole, and only
    // they do.
    let daemonsets = |args: &[&str]| {
        kinds(&render(helm, args), "ClusterRole")
            .into_iter()
            .filter(|r| r["metadata"]["name"].as_str() == Some("unit-initguard"))
            .flat_map(|r| r["rules"].as_sequence().cloned().unwrap_or_default())
            .any(|rule| {
                rule["resources"]
                    .as_sequence()
                    .is_some_and(|rs| rs.iter().any(|r| r.as_str() == Some("daemonsets")))
            })
    };
    assert!(!daemonsets(&[]));
    assert!(!daemonsets(&[
        "--set-json",
        r#"config.initContainers=[{"name":"wait","deadline":"5m"}]"#
    ]));
    assert!(daemonsets(&[
        "--set-json",
        r#"config.initContainers=[{"name":"istio-validation","owner":{"daemonset":"istio-system/istio-cni-node"},"failedExitCodes":[126]}]"#
    ]));

    // `action: recreate` adds evictions (cluster-wide, or Roles in evictions.namespaces) and
    // the Event list the budget is rebuilt from; `report` adds neither.
    let grants_of = |docs: &[serde_yaml::Value], kind: &str| -> Vec<(String, String, String)> {
        kinds(docs, kind)
            .into_iter()
            .filter(|r| {
                r["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("unit-initguard"))
            })
            .flat_map(|r| {
                let ns = r["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
                r["rules"]
                    .as_sequence()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .flat_map(move |rule| {
                        let ns = ns.clone();
                        let verbs: Vec<String> = rule["verbs"]
                            .as_sequence()
                            .into_iter()
                            .flatten()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect();
                        rule["resources"]
                            .as_sequence()
                            .cloned()
                            .unwrap_or_default()
                            .into_iter()
                            .filter_map(|r| r.as_str().map(str::to_owned))
                            .map(move |r| (ns.clone(), r, verbs.join(",")))
                            .collect::<Vec<_>>()
                    })
            })
            .collect()
    };
    let step = |action: &str| {
        format!(
            r#"config.initContainers=[{{"name":"istio-validation","owner":{{"daemonset":"istio-system/istio-cni-node"}},"failedExitCodes":[126],"action":"{action}"}}]"#
        )
    };
    let evicts = |g: &[(String, String, String)]| {
        g.iter()
            .filter(|(_, r, v)| r == "pods/eviction" && v == "create")
            .map(|(ns, _, _)| ns.clone())
            .collect::<Vec<_>>()
    };
    let lists_events = |g: &[(String, String, String)]| {
        g.iter()
            .any(|(_, r, v)| r == "events" && v.split(',').any(|v| v == "list"))
    };
    let report = render(helm, &["--set-json", &step("report")]);
    assert!(evicts(&grants_of(&report, "ClusterRole")).is_empty());
    assert!(evicts(&grants_of(&report, "Role")).is_empty());
    assert!(!lists_events(&grants_of(&report, "ClusterRole")));
    let anywhere = render(helm, &["--set-json", &step("recreate")]);
    assert_eq!(evicts(&grants_of(&anywhere, "ClusterRole")), [""]);
    assert!(lists_events(&grants_of(&anywhere, "ClusterRole")));
    let confined = render(
        helm,
        &[
            "--set-json",
            &step("recreate"),
            "--set-json",
            r#"config.evictions={"namespaces":["apps","web"]}"#,
        ],
    );
    assert!(evicts(&grants_of(&confined, "ClusterRole")).is_empty());
    assert_eq!(evicts(&grants_of(&confined, "Role")), ["apps", "web"]);
    let bindings: Vec<String> = kinds(&confined, "RoleBinding")
        .into_iter()
        .filter(|b| b["roleRef"]["name"].as_str() == Some("unit-initguard-evict"))
        .filter_map(|b| b["metadata"]["namespace"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(bindings, ["apps", "web"]);

    // The pod's extra settings, as written; a securityContext key removed with null.
    let docs = render(
        helm,
        &[
            "--set-json",
            r#"extraEnv=[{"name":"RUST_LOG","value":"initguard=debug"}]"#,
            "--set-json",
            r#"extraArgs=["--dry-run"]"#,
            "--set-json",
            r#"extraVolumes=[{"name":"owner-ca","configMap":{"name":"owner-ca"}}]"#,
            "--set-json",
            r#"extraVolumeMounts=[{"name":"owner-ca","mountPath":"/etc/initguard/owner-ca","readOnly":true}]"#,
            "--set",
            "podSecurityContext.runAsUser=null",
            "--set",
            "securityContext.runAsUser=null",
            "--set-json",
            r#"commonLabels={"cost-center":"platform"}"#,
            "--set-json",
            r#"podLabels={"team":"platform"}"#,
            "--set",
            "networkPolicy.enabled=true",
            "--set-json",
            r#"networkPolicy.from=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
        ],
    );
    let spec = pod_spec(&docs);
    let container = &spec["containers"][0];
    let env: Vec<&str> = container["env"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(env, ["POD_NAME", "RUST_LOG"]);
    assert_eq!(
        container["args"]
            .as_sequence()
            .and_then(|a| a.last())
            .and_then(Yaml::as_str),
        Some("--dry-run")
    );
    let mounted = container["volumeMounts"]
        .as_sequence()
        .into_iter()
        .flatten()
        .any(|m| m["name"].as_str() == Some("owner-ca"));
    let volume = spec["volumes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .any(|v| v["name"].as_str() == Some("owner-ca"));
    assert!(mounted && volume, "{spec:?}");
    assert!(spec["securityContext"]["runAsUser"].is_null(), "{spec:?}");
    assert_eq!(
        spec["securityContext"]["runAsNonRoot"].as_bool(),
        Some(true)
    );
    assert!(container["securityContext"]["runAsUser"].is_null());
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    assert_eq!(
        one(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"]["team"].as_str(),
        Some("platform")
    );
    for doc in &docs {
        assert_eq!(
            doc["metadata"]["labels"]["cost-center"].as_str(),
            Some("platform"),
            "commonLabels on every object: {} {}",
            doc["kind"].as_str().unwrap_or_default(),
            doc["metadata"]["name"].as_str().unwrap_or_default()
        );
    }
    let policy = one(&docs, "NetworkPolicy");
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_yaml::from_str::<Yaml>("[Ingress]").unwrap()
    );
    assert_eq!(
        policy["spec"]["ingress"][0]["ports"][0]["port"].as_str(),
        container["ports"][0]["name"].as_str()
    );
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]
            ["kubernetes.io/metadata.name"]
            .as_str(),
        Some("monitoring")
    );
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        pod_spec_labels_selector(&docs)
    );
    server_dry_run(&tb, &docs);
    tb.kubectl(&["delete", "namespace", NAMESPACE, "--wait=false"]);
}

/// values.schema.json refuses a typo before anything is created: a misspelt value, every
/// corpus file that the guard refuses for an unknown key (as `config`), and a key the chart
/// sets itself; it accepts every shipped configuration.
pub(crate) async fn chart_schema_refuses_typos_before_anything_is_created(tb: Arc<Testbed>) {
    let helm = tb.bin.join("helm");
    let helm = helm.as_path();
    let with_config = |name: &str, config: Yaml| {
        let mut values = serde_yaml::Mapping::new();
        values.insert("config".into(), config);
        let path = tb.dir.join(format!("schema-{name}.yaml"));
        std::fs::write(&path, serde_yaml::to_string(&values).expect("YAML"))
            .expect("write the values file");
        path
    };

    // Every corpus file refused for an unknown key is refused by the schema too.
    let corpus = crate::deploy::repo().join("tests/config_corpus");
    let mut files: Vec<_> = std::fs::read_dir(&corpus)
        .expect("tests/config_corpus")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut unknown = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not UTF-8: refused before any key is read
        };
        let Err(error) = initguard::config::from_yaml_str(&text, "corpus") else {
            panic!("{} is accepted by the guard", file.display());
        };
        if !error.to_string().contains("unknown field") {
            continue;
        }
        let Ok(config) = serde_yaml::from_str::<Yaml>(&text) else {
            continue; // e.g. an alias bomb: YAML that no values file can carry either
        };
        let name = file
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or("corpus");
        let values = with_config(name, config);
        refused(
            helm,
            &[&IMAGE[..], &["-f", values.to_str().expect("UTF-8 path")]].concat(),
            "not allowed",
        );
        unknown.push(name.to_owned());
    }
    assert!(
        unknown.len() >= 8,
        "the corpus's unknown-key files were found: {unknown:?}"
    );

    // The shipped configurations pass, less the keys the chart sets.
    for file in [
        "config/example.yaml",
        "config/metainit-compat.yaml",
        "deploy/config.yaml",
    ] {
        let mut config: Yaml = serde_yaml::from_str(
            &std::fs::read_to_string(crate::deploy::repo().join(file)).expect(file),
        )
        .expect("a shipped config parses");
        for key in ["listen", "secureListen", "tls", "leaderElection"] {
            config.as_mapping_mut().expect("a mapping").remove(key);
        }
        let values = with_config(file.replace('/', "-").as_str(), config);
        render(helm, &["-f", values.to_str().expect("UTF-8 path")]);
    }
    refused(
        helm,
        &[&IMAGE[..], &["--set", "config.listen=0.0.0.0:9777"]].concat(),
        "additional properties 'listen' not allowed",
    );

    // `helm install` with a misspelt value fails on the schema and creates nothing: no
    // namespace, no release, no cluster-scoped object.
    let namespace = "initguard-chart-typo";
    let admin = tb.kubeconfig("admin");
    let out = Command::new(helm)
        .args(["--kubeconfig", admin.to_str().expect("UTF-8 path")])
        .args(["install", "typo"])
        .arg(chart())
        .args(["--namespace", namespace, "--create-namespace"])
        .args(IMAGE)
        .args(["--set", "replicaCout=1"])
        .output()
        .expect("helm runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("at '': additional properties 'replicaCout' not allowed"),
        "helm install with a typo: {stderr}"
    );
    let left = tb.kubectl(&[
        "get",
        "namespaces,clusterroles,clusterrolebindings",
        "-o",
        "name",
    ]);
    assert!(
        !left.contains(namespace) && !left.contains("typo-initguard"),
        "a refused install left objects: {left}"
    );
}

/// The Deployment's selector (matchLabels).
fn pod_spec_labels_selector(docs: &[Yaml]) -> Yaml {
    one(docs, "Deployment")["spec"]["selector"]["matchLabels"].clone()
}

/// `helm test` runs the chart's test pod: `check-config` on the rendered configuration, then
/// `status` with the guard's own ServiceAccount. The test bed has no kubelet, so the test runs
/// each container's command as a host process with the pod's token and reports the pod's
/// phase through `pods/status`; helm judges the rest.
pub(crate) async fn chart_helm_test_checks_the_config_and_reads_status(tb: Arc<Testbed>) {
    let helm = tb.bin.join("helm");
    let (release, namespace) = ("htest", "initguard-chart-htest");
    let admin = tb.kubeconfig("admin");
    let admin = admin.to_str().expect("UTF-8 path");
    let chart = chart();
    let gate = "gates.example.com/warden";
    run(
        "helm install",
        &helm,
        &[
            &["--kubeconfig", admin, "install", release],
            &[chart.to_str().expect("UTF-8 path")][..],
            &["--namespace", namespace, "--create-namespace", "--set", "replicaCount=1"],
            &IMAGE[..],
            &[
                "--set-json",
                &format!(
                    r#"config.initializers=[{{"name":"{gate}","deadline":"1m","owner":{{"deployment":"kube-system/warden"}}}}]"#
                ),
            ],
        ]
        .concat(),
        None,
    );
    let test = Command::new(&helm)
        .args(["--kubeconfig", admin, "test", release])
        .args(["--namespace", namespace, "--timeout", "3m"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("helm test starts");
    let pod = crate::wait::eventually("the chart's test pod", || {
        tb.list("pods", namespace, Some("app.kubernetes.io/component=test"))
            .into_iter()
            .next()
    })
    .await;
    let pod_name = pod["metadata"]["name"].as_str().expect("a name").to_owned();
    let config = crate::deploy::release_config(&tb, release, namespace);
    let mounts = [("/etc/initguard/config.yaml", config.as_path())];
    // The init container first, as the kubelet runs them.
    let check = run_container(&tb, &pod, &pod["spec"]["initContainers"][0], &mounts);
    let checked = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(
        check.status.success() && checked.contains(gate),
        "check-config in the test pod: {checked}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let status = run_container(&tb, &pod, &pod["spec"]["containers"][0], &mounts);
    let printed = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.status.success()
            && printed.contains("mechanism: schedulingGates")
            && printed.contains(gate),
        "status with the guard's ServiceAccount: {printed}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    crate::deploy::finish_pod(&tb, namespace, &pod_name, "Succeeded");
    let done = test.wait_with_output().expect("helm test ends");
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success() && said.contains("Phase:          Succeeded"),
        "helm test: {said}{}",
        String::from_utf8_lossy(&done.stderr)
    );
    uninstall(&tb, &helm, admin, release, namespace);
}

/// `helm upgrade` from the previous chart version (tests/fixtures/charts: the package a user
/// would have installed) to the chart in the tree, with the values the release was installed
/// with, succeeds: no immutable field changes, the schema accepts the old values. Judged from
/// the server's objects: the release's Deployment is the new chart's with the values kept, and
/// the leader-election Role lost the `patch` verb that 0.2.0 dropped.
pub(crate) async fn chart_upgrades_from_the_previous_version(tb: Arc<Testbed>) {
    let helm = tb.bin.join("helm");
    let (release, namespace) = ("upgrade", "initguard-chart-upgrade");
    let admin = tb.kubeconfig("admin");
    let admin = admin.to_str().expect("UTF-8 path");
    let previous = crate::deploy::repo().join("tests/fixtures/charts/initguard-0.1.0.tgz");
    let values = tb.dir.join("upgrade-values.yaml");
    std::fs::write(
        &values,
        "image: { repository: registry.test/initguard }\n\
         replicaCount: 2\n\
         config:\n  dryRun: false\n  initializers:\n    - name: gates.example.com/warden\n      \
         deadline: 1m\n      owner: { deployment: kube-system/warden }\n\
         metrics: { service: { enabled: true } }\n",
    )
    .expect("write the values");
    let values = values.to_str().expect("UTF-8 path");
    let leader_verbs = || {
        tb.get(
            "role",
            namespace,
            &format!("{release}-initguard-leader-election"),
        )
        .and_then(|role| {
            // The rule on the guard's own Lease (the other one creates it).
            role["rules"]
                .as_array()?
                .iter()
                .find(|r| r.get("resourceNames").is_some())
                .map(|r| r["verbs"].clone())
        })
    };
    let deployment = || {
        tb.get("deployment", namespace, &format!("{release}-initguard"))
            .expect("the release's Deployment")
    };
    let helm_args = |verb: &str, chart: &str| -> Vec<String> {
        [
            "--kubeconfig",
            admin,
            verb,
            release,
            chart,
            "--namespace",
            namespace,
            "-f",
            values,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let args = helm_args("install", previous.to_str().expect("UTF-8 path"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(
        "helm install of the previous version",
        &helm,
        &[&args[..], &["--create-namespace"]].concat(),
        None,
    );
    let before = deployment();
    assert_eq!(
        before["metadata"]["labels"]["helm.sh/chart"], "initguard-0.1.0",
        "the fixture is the previous version"
    );
    assert_eq!(
        leader_verbs(),
        Some(serde_json::json!(["get", "update", "patch"])),
        "the previous version's leader Role"
    );

    let current = chart();
    let args = helm_args("upgrade", current.to_str().expect("UTF-8 path"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run("helm upgrade to the chart in the tree", &helm, &args, None);
    let after = deployment();
    let version = std::fs::read_to_string(current.join("Chart.yaml"))
        .expect("Chart.yaml")
        .lines()
        .find_map(|l| l.strip_prefix("version: ").map(str::to_owned))
        .expect("Chart.yaml has a version");
    assert_ne!(version, "0.1.0", "the tree's chart is a later version");
    assert_eq!(
        after["metadata"]["labels"]["helm.sh/chart"],
        format!("initguard-{version}").as_str(),
        "the Deployment is the new chart's"
    );
    assert_eq!(after["spec"]["replicas"], 2, "the values were kept");
    assert_eq!(
        leader_verbs(),
        Some(serde_json::json!(["get", "update"])),
        "the upgrade applied the new leader Role"
    );
    let history = run(
        "helm history",
        &helm,
        &[
            "--kubeconfig",
            admin,
            "history",
            release,
            "--namespace",
            namespace,
            "--output",
            "json",
        ],
        None,
    );
    let history: serde_json::Value = serde_json::from_str(&history).expect("helm history JSON");
    assert_eq!(history[1]["status"], "deployed", "{history:#}");
    assert_eq!(history[1]["chart"], format!("initguard-{version}").as_str());
    uninstall(&tb, &helm, admin, release, namespace);
}

/// `helm uninstall --wait` of a release of the chart's tests, then its namespace.
fn uninstall(tb: &Testbed, helm: &Path, admin: &str, release: &str, namespace: &str) {
    let args = ["--kubeconfig", admin, "uninstall", release];
    run(
        "helm uninstall",
        helm,
        &[&args[..], &["--namespace", namespace, "--wait"]].concat(),
        None,
    );
    tb.kubectl(&["delete", "namespace", namespace, "--wait=false"]);
}
