//! Configuration: the shipped example files, `initguard check-config`, one test per validation
//! rule (message and exact line:column), a corpus of malformed and hostile files, and a fuzz of
//! the parser.
//!
//! The fuzz runs 256 cases per property by default. For a longer run:
//! `PROPTEST_CASES=50000 cargo test --release --test config fuzz`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use initguard::config::{Config, ConfigError, Mechanism, OwnerSpec, UnlistedPolicy};

/// Label used for errors of in-memory configurations.
const FILE: &str = "config.yaml";

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn parse(yaml: &str) -> Result<Config, ConfigError> {
    initguard::config::from_yaml_str(yaml, FILE)
}

fn accepted(yaml: &str) -> Config {
    parse(yaml).unwrap_or_else(|e| panic!("rejected:\n{yaml}\n---\n{e}"))
}

/// Every problem reported for `yaml`, as displayed.
fn rejected(yaml: &str) -> Vec<String> {
    match parse(yaml) {
        Ok(c) => panic!("accepted:\n{yaml}\n---\n{c:?}"),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

/// Asserts that `yaml` yields exactly one problem, at `line:column`, whose message starts with
/// `message`.
#[track_caller]
fn assert_rejected(yaml: &str, at: &str, message: &str) {
    let errors = rejected(yaml);
    let expected = format!("{FILE}:{at}: {message}");
    assert!(
        errors.len() == 1 && errors[0].starts_with(&expected),
        "expected one error starting with\n  {expected}\ngot\n  {}\nfor\n{yaml}",
        errors.join("\n  ")
    );
}

/// `^[^:]+:\d+:\d+: ` without a regex engine.
fn is_located(line: &str) -> bool {
    let mut parts = line.splitn(4, ':');
    let digits =
        |s: Option<&str>| s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    let file = parts.next().is_some_and(|f| !f.is_empty());
    let (line_no, column) = (parts.next(), parts.next());
    file && digits(line_no) && digits(column) && parts.next().is_some_and(|r| r.starts_with(' '))
}

use initguard_test_support::cpu::thread_cpu_time;

fn check_config(path: &Path, extra: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_initguard"))
        .arg("check-config")
        .arg(path)
        .args(extra)
        .output()
        .unwrap();
    (output, start.elapsed())
}

mod examples {
    use super::*;

    fn load(name: &str) -> Config {
        let path = manifest_path(name);
        initguard::config::load(&path).unwrap_or_else(|e| panic!("{name}:\n{e}"))
    }

    #[test]
    fn example_yaml_resolves_every_owner_kind() {
        let c = load("config/example.yaml");
        assert_eq!(c.mechanism, Mechanism::SchedulingGates);
        assert_eq!(c.opt_in.label, "initguard.io/bypass");
        let kinds: Vec<_> = c
            .initializers
            .iter()
            .map(|i| i.owner.as_ref().map(OwnerSpec::kind))
            .collect();
        assert_eq!(
            kinds,
            [
                Some("deployment"),
                Some("lease"),
                Some("pods"),
                Some("service"),
                Some("http"),
                None
            ]
        );
        let kueue = c.initializer("kueue.x-k8s.io/admission").unwrap();
        assert_eq!(kueue.deadline, Duration::from_secs(600));
        assert_eq!(kueue.owner_down_grace, Duration::from_secs(30));
        // Inherited from defaults.
        let quota = c.initializer("quota.example.com").unwrap();
        assert_eq!(quota.deadline, Duration::from_secs(20));
        assert_eq!(quota.probe_interval, Duration::from_secs(2));
        assert_eq!(
            c.initializer("legacy.example.com").unwrap().probe_interval,
            Duration::from_secs(5)
        );
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    }

    #[test]
    fn example_yaml_lists_the_istio_validation_step_of_the_node_stage() {
        use initguard::config::{ObjectRef, StepAction, StepOwner};
        let c = load("config/example.yaml");
        let [istio] = c.init_containers.as_slice() else {
            panic!("{:?}", c.init_containers)
        };
        assert_eq!(istio.name, "istio-validation");
        assert_eq!(
            istio.owner,
            Some(StepOwner::DaemonSet(ObjectRef {
                namespace: "istio-system".to_owned(),
                name: "istio-cni-node".to_owned(),
            }))
        );
        assert_eq!(istio.deadline, Some(Duration::from_secs(300)));
        assert_eq!(istio.failed_exit_codes, [126]);
        assert_eq!(istio.action, StepAction::Recreate);
        // The file shows the defaults of the rest.
        let defaults = initguard::config::from_yaml_str("{}", "defaults").unwrap();
        assert_eq!(istio.repair_after, initguard::config::DEFAULT_REPAIR_AFTER);
        assert_eq!(c.recreate, defaults.recreate);
        assert_eq!(c.evictions, defaults.evictions);
        assert_eq!(
            c.defaults.unlisted_alert_after,
            defaults.defaults.unlisted_alert_after
        );
    }

    #[test]
    fn legacy_initializers_yaml_keeps_deadlines_below_the_create_timeout() {
        let c = load("config/legacy-initializers.yaml");
        assert_eq!(c.mechanism, Mechanism::Initializers);
        assert!(!c.initializers.is_empty());
        for i in &c.initializers {
            assert!(i.deadline < Duration::from_secs(30), "{}", i.name);
        }
        assert!(c.defaults.deadline < Duration::from_secs(30));
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        // A fresh batch is never a pile: bypass only after minWait.
        assert_eq!(c.pileup.action, initguard::config::PileupAction::Bypass);
        assert_eq!(c.pileup.min_wait, Duration::from_secs(10));
    }

    #[test]
    fn metainit_compat_yaml_bypasses_everything_labeled_at_once() {
        let c = load("config/metainit-compat.yaml");
        assert_eq!(c.mechanism, Mechanism::Initializers);
        assert_eq!(c.opt_in.label, "k8s.opsani.io/initializer");
        assert_eq!(c.unlisted_initializers, UnlistedPolicy::Deadline);
        assert_eq!(
            c.deadline_for("any.initializer.example"),
            Some(Duration::ZERO)
        );
        let labels = [("k8s.opsani.io/initializer".to_owned(), String::new())].into();
        assert!(c.is_opted_in("default", false, &labels));
        assert!(!c.is_opted_in("default", false, &Default::default()));
    }
}

mod cli {
    use super::*;

    const EXAMPLES: [&str; 3] = [
        "config/example.yaml",
        "config/legacy-initializers.yaml",
        "config/metainit-compat.yaml",
    ];

    #[test]
    fn check_config_accepts_each_example_with_a_summary() {
        for name in EXAMPLES {
            let (out, _) = check_config(&manifest_path(name), &[]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(stdout.starts_with("mechanism: "), "{name}:\n{stdout}");
            for topic in [
                "opt-in: ",
                "initializers: ",
                "pileup: ",
                "leader election: ",
                "listen: ",
            ] {
                assert!(stdout.contains(topic), "{name} lacks {topic}:\n{stdout}");
            }
        }
        let (out, _) = check_config(&manifest_path("config/example.yaml"), &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(
            "  sidecar.example.com: deadline 15s, grace 5s, owner deployment kube-system/sidecar-injector\n"
        ));
        assert!(stdout.contains("  audit.example.com: deadline 1m, no owner (deadline only)\n"));
        assert!(
            stdout.contains(
                "  istio-validation: owner daemonset istio-system/istio-cni-node (on the pod's \
                 node), deadline 5m, failedExitCodes 126, action recreate (repairAfter 10s)\n"
            ),
            "{stdout}"
        );
    }

    #[test]
    fn check_config_json_prints_resolved_values() {
        for name in EXAMPLES {
            let (out, _) = check_config(&manifest_path(name), &["--output", "json"]);
            assert_eq!(out.status.code(), Some(0), "{name}");
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(json["mechanism"].is_string(), "{name}: {json}");
            assert_eq!(json["maxInFlight"], 16, "{name}");
            assert_eq!(json["listen"], "0.0.0.0:9777", "{name}");
        }
        let (out, _) = check_config(&manifest_path("config/example.yaml"), &["--output", "json"]);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["defaults"]["deadline"], "20s");
        let quota = &json["initializers"][2];
        assert_eq!(quota["name"], "quota.example.com");
        // Resolved from defaults, though the file does not set it on the entry.
        assert_eq!(quota["deadline"], "20s");
        assert_eq!(quota["ownerDownGrace"], "5s");
        assert_eq!(quota["owner"]["pods"]["namespace"], "quota-system");
        assert_eq!(json["initializers"][1]["deadline"], "10m");
        assert_eq!(
            json["initializers"][3]["owner"]["service"]["name"],
            "mesh-injector"
        );
        assert_eq!(json["initializers"][5]["owner"], serde_json::Value::Null);
        assert_eq!(json["leaderElection"]["leaseDuration"], "15s");
        assert_eq!(json["pileup"]["action"], "alert");
        assert_eq!(json["unlistedInitializers"], "ignore");
    }

    #[test]
    fn check_config_exits_2_with_located_errors_on_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.yaml");
        std::fs::write(
            &path,
            "initializers:\n  - name: kueue.x-k8s.io/admission\n    owner:\n      lease: kueue\n\
             listen: nowhere\n",
        )
        .unwrap();
        let (out, _) = check_config(&path, &[]);
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        let file = path.display();
        assert_eq!(
            lines,
            [
                format!(
                    "{file}:4:14: initializers[0].owner.lease: expected \"namespace/name\", got \"kueue\""
                ),
                format!(
                    "{file}:5:9: listen: expected an IP address and port such as \"0.0.0.0:9777\" or \"[::]:9777\", got \"nowhere\""
                ),
            ]
        );
    }

    #[test]
    fn check_config_exits_2_on_a_missing_file() {
        let (out, _) = check_config(Path::new("/nonexistent/initguard.yaml"), &[]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with(
                "/nonexistent/initguard.yaml: cannot read the configuration: No such file or directory"
            ),
            "{stderr}"
        );
    }
}

/// One test per rule: the message and the exact position.
mod rules {
    use super::*;

    #[test]
    fn empty_map_means_every_default() {
        let c = accepted("{}\n");
        assert_eq!(c.mechanism, Mechanism::SchedulingGates);
        assert_eq!(c.opt_in.label, "initguard.io/bypass");
        assert!(c.opt_in.namespaces.is_empty());
        assert_eq!(c.defaults.deadline, Duration::from_secs(20));
        assert_eq!(c.defaults.owner_down_grace, Duration::from_secs(5));
        assert_eq!(c.defaults.probe_interval, Duration::from_secs(2));
        assert!(c.initializers.is_empty());
        assert_eq!(c.unlisted_initializers, UnlistedPolicy::Ignore);
        assert_eq!(c.pileup.threshold, 3);
        assert_eq!(c.pileup.action, initguard::config::PileupAction::Alert);
        assert_eq!(c.pileup.min_wait, Duration::from_secs(10));
        assert!(c.leader_election.enabled);
        assert_eq!(c.leader_election.namespace, "kube-system");
        assert_eq!(c.leader_election.name, "initguard");
        assert_eq!(c.leader_election.lease_duration, Duration::from_secs(15));
        assert_eq!(c.listen.to_string(), "0.0.0.0:9777");
        assert!(!c.dry_run);
        assert_eq!(c.max_in_flight, 16);
        // The node stage: nothing listed, its budget, evictions anywhere but kube-system.
        assert!(c.init_containers.is_empty());
        assert_eq!(c.recreate.max_per_hour, 10);
        assert!(c.evictions.namespaces.is_empty());
        assert!(c.evictions.allows("default") && !c.evictions.allows("kube-system"));
        assert_eq!(c.defaults.unlisted_alert_after, Duration::from_secs(3600));
        assert_eq!(initguard::config::DEFAULT_MAX_RECREATIONS_PER_HOUR, 10);
        assert_eq!(
            initguard::config::DEFAULT_UNLISTED_ALERT_AFTER,
            Duration::from_secs(3600)
        );
        // Sections present but empty resolve the same way.
        let sections =
            accepted("optIn: {}\ndefaults: {}\ninitializers: []\npileup: {}\nleaderElection: {}\n");
        assert_eq!(sections, c);
        let node_stage = accepted("initContainers: []\nrecreate: {}\nevictions: {}\n");
        assert_eq!(node_stage, c);
        assert_eq!(accepted("evictions: { namespaces: [] }\n"), c);
    }

    /// An `initContainers` entry with only a name: report only, no trigger of its own yet.
    #[test]
    fn an_init_container_entry_defaults_to_report_without_deadline_or_codes() {
        use initguard::config::{OptInMode, StepAction};
        // defaults.deadline is for initializers: an image still pulling is not stuck.
        let c =
            accepted("defaults: { deadline: 7s }\ninitContainers:\n  - name: istio-validation\n");
        let step = &c.init_containers[0];
        assert_eq!(step.name, "istio-validation");
        assert_eq!(step.owner, None);
        assert_eq!(step.deadline, None);
        assert!(step.failed_exit_codes.is_empty());
        assert_eq!(step.action, StepAction::Report);
        assert_eq!(step.repair_after, Duration::from_secs(10));
        assert_eq!(step.repair_after, initguard::config::DEFAULT_REPAIR_AFTER);
        assert_eq!(step.opt_in, OptInMode::Any);
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    }

    #[test]
    fn an_init_container_entry_takes_every_key() {
        use initguard::config::{ObjectRef, OptInMode, StepAction, StepOwner};
        let c = accepted(
            "initContainers:\n  - name: istio-validation\n    owner: { daemonset: \
             istio-system/istio-cni-node }\n    deadline: 5m\n    failedExitCodes: [126, 1, 126, 255]\n    \
             action: recreate\n    repairAfter: 0s\n    optIn: namespaces\n  - name: linkerd-init\n    \
             owner: { deployment: linkerd/linkerd-destination }\n    failedExitCodes: [95]\n",
        );
        let istio = &c.init_containers[0];
        assert_eq!(
            istio.owner,
            Some(StepOwner::DaemonSet(ObjectRef {
                namespace: "istio-system".to_owned(),
                name: "istio-cni-node".to_owned(),
            }))
        );
        assert_eq!(istio.deadline, Some(Duration::from_secs(300)));
        // Sorted, each once.
        assert_eq!(istio.failed_exit_codes, [1, 126, 255]);
        assert_eq!(istio.action, StepAction::Recreate);
        assert_eq!(istio.repair_after, Duration::ZERO);
        assert_eq!(istio.opt_in, OptInMode::Namespaces);
        // Every other kind is judged cluster-wide, as for initializers.
        let linkerd = &c.init_containers[1];
        assert_eq!(
            linkerd.owner,
            Some(StepOwner::Cluster(OwnerSpec::Deployment(ObjectRef {
                namespace: "linkerd".to_owned(),
                name: "linkerd-destination".to_owned(),
            })))
        );
        assert_eq!(linkerd.failed_exit_codes, [95]);
        assert_eq!(linkerd.action, StepAction::Report);
        let pods = accepted(
            "initContainers:\n  - name: a\n    owner: { pods: { namespace: cni, selector: app=cni } }\n",
        );
        assert!(
            matches!(&pods.init_containers[0].owner, Some(StepOwner::Cluster(OwnerSpec::Pods { namespace, .. })) if namespace == "cni"),
            "{:?}",
            pods.init_containers[0].owner
        );
    }

    #[test]
    fn init_container_names_are_container_names() {
        assert_rejected(
            "initContainers:\n  - deadline: 5m\n",
            "2:5",
            "initContainers[0]: expected a name key (the init container's name in the pod spec)",
        );
        assert_rejected(
            "initContainers:\n  - name: \"\"\n",
            "2:11",
            "initContainers[0].name: expected a container name: expected a DNS-1123 label such as \
             \"kube-system\", got an empty string",
        );
        // A gate's name is not a container's.
        assert_rejected(
            "initContainers:\n  - name: istio.io/validation\n",
            "2:11",
            "initContainers[0].name: expected a container name: expected a DNS-1123 label \
             (lowercase letters, digits and '-'",
        );
        assert_rejected(
            "initContainers:\n  - name: Istio-Validation\n",
            "2:11",
            "initContainers[0].name: expected a container name: expected a DNS-1123 label",
        );
        assert_rejected(
            &format!("initContainers:\n  - name: {}\n", "a".repeat(64)),
            "2:11",
            "initContainers[0].name: expected a container name: expected a DNS-1123 label of at \
             most 63 characters, got 64 characters",
        );
        accepted(&format!("initContainers:\n  - name: {}\n", "a".repeat(63)));
    }

    #[test]
    fn init_container_names_must_be_unique() {
        assert_rejected(
            "initContainers:\n  - name: istio-validation\n  - name: linkerd-init\n  - name: \
             istio-validation\n",
            "4:11",
            "initContainers[2].name: duplicate init container \"istio-validation\": already listed \
             at initContainers[0], line 2; expected each name once",
        );
        // Init containers and initializers are named apart.
        accepted("initializers:\n  - name: a\ninitContainers:\n  - name: a\n");
    }

    #[test]
    fn an_init_container_deadline_is_positive() {
        assert_rejected(
            "initContainers:\n  - name: a\n    deadline: 0s\n",
            "3:15",
            "initContainers[0].deadline: expected a duration greater than 0s, got 0s: the \
             deadline counts from the pod's binding, so 0s would report every pod with this init \
             container at once (omit deadline for none)",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    deadline: 2y\n",
            "3:15",
            "initContainers[0].deadline: expected a duration of at most 1y",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    deadline: 5\n",
            "3:15",
            "initContainers[0].deadline: expected a duration with a unit",
        );
        assert_eq!(
            accepted("initContainers:\n  - name: a\n    deadline: 1ms\n").init_containers[0]
                .deadline,
            Some(Duration::from_millis(1))
        );
    }

    #[test]
    fn failed_exit_codes_are_1_to_255() {
        assert_rejected(
            "initContainers:\n  - name: a\n    failedExitCodes: [126, 0]\n",
            "3:28",
            "initContainers[0].failedExitCodes[1]: expected an exit code from 1 to 255, got 0 \
             (0 is success)",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    failedExitCodes: [256]\n",
            "3:23",
            "initContainers[0].failedExitCodes[0]: expected an exit code from 1 to 255, got 256 \
             (a container's exit code is 0-255)",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    failedExitCodes: [1, -1]\n",
            "3:26",
            "initContainers[0].failedExitCodes[1]: expected an exit code from 1 to 255, got -1",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    failedExitCodes:\n      - 126\n      - 4294967422\n",
            "5:9",
            "initContainers[0].failedExitCodes[1]: expected an exit code from 1 to 255, got \
             4294967422",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    failedExitCodes: [\"126\"]\n",
            "3:23",
            "initContainers[0].failedExitCodes[0]: invalid type: string \"126\"",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    failedExitCodes: 126\n",
            "3:22",
            "initContainers[0].failedExitCodes: invalid type: integer `126`, expected a sequence",
        );
        let c = accepted("initContainers:\n  - name: a\n    failedExitCodes: [255, 1]\n");
        assert_eq!(c.init_containers[0].failed_exit_codes, [1, 255]);
    }

    #[test]
    fn recreate_needs_a_deadline_or_exit_codes() {
        let step =
            |keys: &str| format!("initContainers:\n  - name: a\n    action: recreate\n{keys}");
        let message = "initContainers[0].action: expected a deadline or failedExitCodes with \
                       action: recreate: without either nothing could ever trigger a recreate";
        assert_rejected(&step(""), "3:13", message);
        assert_rejected(&step("    failedExitCodes: []\n"), "3:13", message);
        accepted(&step("    deadline: 5m\n"));
        accepted(&step("    failedExitCodes: [126]\n"));
        // Reporting needs no trigger: the step is still counted and timed.
        accepted("initContainers:\n  - name: a\n    action: report\n");
        assert_rejected(
            "initContainers:\n  - name: a\n    action: restart\n",
            "3:13",
            "initContainers[0].action: unknown variant `restart`, expected `report` or `recreate`",
        );
    }

    #[test]
    fn init_container_owners_are_a_daemonset_or_a_cluster_wide_kind() {
        assert_rejected(
            "initContainers:\n  - name: a\n    owner: { daemonset: istio-cni-node }\n",
            "3:25",
            "initContainers[0].owner.daemonset: expected \"namespace/name\", got \"istio-cni-node\"",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    owner: { daemonset: Istio/cni }\n",
            "3:25",
            "initContainers[0].owner.daemonset: expected \"namespace/name\", got \"Istio/cni\": \
             namespace:",
        );
        // A canary judges a webhook's calls; an init step's agent is not one.
        assert_rejected(
            "initContainers:\n  - name: a\n    owner: { apiserver: { namespace: canary } }\n",
            "3:14",
            "initContainers[0].owner.apiserver: expected another owner kind: an apiserver owner \
             (a dry-run canary) judges a webhook's calls, and is for webhooks only",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    owner: {}\n",
            "3:5",
            "initContainers[0].owner: expected exactly one of daemonset, deployment, lease, \
             service, pods or http, got none (omit owner for none: the deadline and \
             failedExitCodes only)",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    owner: { daemonset: a/b, lease: a/b }\n",
            "3:5",
            "initContainers[0].owner: expected exactly one of daemonset, deployment, lease, \
             service, pods or http, got daemonset and lease",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    owner: { statefulset: a/b }\n",
            "3:14",
            "initContainers[0].owner: unknown field `statefulset`, expected one of `deployment`, \
             `lease`, `service`, `pods`, `http`, `apiserver`, `daemonset`",
        );
    }

    #[test]
    fn daemonset_owners_are_for_init_containers_only() {
        let message = "expected another owner kind: a daemonset owner is judged on each pod's own \
                       node, and only initContainers entries take one";
        assert_rejected(
            "initializers:\n  - name: cni.example.com\n    owner: { daemonset: kube-system/cni }\n",
            "3:14",
            &format!("initializers[0].owner.daemonset: {message}"),
        );
        assert_rejected(
            "webhooks:\n  - name: validating/policy/check.policy.example.com\n    owner: { \
             daemonset: policy/agent }\n",
            "3:14",
            &format!("webhooks[0].owner.daemonset: {message}"),
        );
        // Still exactly one kind: both problems are said.
        let errors = rejected(
            "initializers:\n  - name: cni.example.com\n    owner: { deployment: a/b, daemonset: \
             a/b }\n",
        );
        assert_eq!(
            errors,
            [
                format!(
                    "{FILE}:3:5: initializers[0].owner: expected exactly one of deployment, lease, \
                     service, pods, http or apiserver, got daemonset and deployment"
                ),
                format!("{FILE}:3:31: initializers[0].owner.daemonset: {message}"),
            ]
        );
    }

    #[test]
    fn init_container_repair_after_and_opt_in_are_checked() {
        assert_rejected(
            "initContainers:\n  - name: a\n    repairAfter: 2y\n",
            "3:18",
            "initContainers[0].repairAfter: expected a duration of at most 1y",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    repairAfter: -1s\n",
            "3:18",
            "initContainers[0].repairAfter: expected a duration with a unit",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    optIn: label\n",
            "3:12",
            "initContainers[0].optIn: unknown variant `label`, expected one of `any`, \
             `namespaces`, `none`",
        );
        assert_rejected(
            "initContainers:\n  - name: a\n    restartPolicy: Always\n",
            "3:5",
            "initContainers[0]: unknown field `restartPolicy`, expected one of `name`, `owner`, \
             `deadline`, `failedExitCodes`, `action`, `repairAfter`, `optIn`",
        );
        assert_eq!(
            accepted("initContainers:\n  - name: a\n    optIn: none\n").init_containers[0].opt_in,
            initguard::config::OptInMode::None
        );
    }

    #[test]
    fn recreate_max_per_hour_is_1_to_1000() {
        assert_rejected(
            "recreate: { maxPerHour: 0 }\n",
            "1:25",
            "recreate.maxPerHour: expected a whole number from 1 to 1000, got 0",
        );
        assert_rejected(
            "recreate:\n  maxPerHour: 1001\n",
            "2:15",
            "recreate.maxPerHour: expected a whole number from 1 to 1000, got 1001",
        );
        assert_rejected(
            "recreate:\n  maxPerHour: -1\n",
            "2:15",
            "recreate.maxPerHour: expected a whole number of at least 1, got -1",
        );
        assert_rejected(
            "recreate: { perHour: 3 }\n",
            "1:13",
            "recreate: unknown field `perHour`, expected `maxPerHour`",
        );
        assert_eq!(
            accepted("recreate: { maxPerHour: 1 }\n")
                .recreate
                .max_per_hour,
            1
        );
        assert_eq!(
            accepted("recreate: { maxPerHour: 1000 }\n")
                .recreate
                .max_per_hour,
            1000
        );
    }

    #[test]
    fn eviction_namespaces_are_dns_labels() {
        assert_rejected(
            "evictions:\n  namespaces: [apps, Kube_System]\n",
            "2:22",
            "evictions.namespaces[1]: expected a DNS-1123 label",
        );
        assert_rejected(
            "evictions: { namespace: [apps] }\n",
            "1:14",
            "evictions: unknown field `namespace`, expected `namespaces`",
        );
        let c = accepted("evictions: { namespaces: [apps, kube-system] }\n");
        assert_eq!(c.evictions.namespaces, ["apps", "kube-system"]);
        // Listed, kube-system is allowed; unlisted namespaces no longer are.
        assert!(c.evictions.allows("kube-system") && !c.evictions.allows("default"));
    }

    #[test]
    fn unlisted_alert_after_is_a_positive_duration() {
        assert_rejected(
            "defaults:\n  unlistedAlertAfter: 0s\n",
            "2:23",
            "defaults.unlistedAlertAfter: expected a duration greater than 0s, got 0s",
        );
        assert_rejected(
            "defaults:\n  unlistedAlertAfter: 1h30\n",
            "2:23",
            "defaults.unlistedAlertAfter: expected a duration with a unit",
        );
        assert_eq!(
            accepted("defaults: { unlistedAlertAfter: 30m }\n")
                .defaults
                .unlisted_alert_after,
            Duration::from_secs(1800)
        );
    }

    #[test]
    fn the_summary_lists_init_containers_and_warns_about_a_recreate_that_never_acts() {
        let c = accepted(
            "initContainers:\n  - name: istio-validation\n    owner: { daemonset: \
             istio-system/istio-cni-node }\n    deadline: 5m\n    failedExitCodes: [126]\n    \
             action: recreate\n  - name: wait-for-db\n    optIn: none\nrecreate: { maxPerHour: 4 }\n\
             evictions: { namespaces: [apps] }\n",
        );
        let summary = c.summary();
        for line in [
            "defaults: deadline 20s, ownerDownGrace 5s, probeInterval 2s, unlistedAlertAfter 1h\n",
            "init containers: 2\n",
            "  istio-validation: owner daemonset istio-system/istio-cni-node (on the pod's node), \
             deadline 5m, failedExitCodes 126, action recreate (repairAfter 10s)\n",
            "  wait-for-db: no owner, action report, optIn none\n",
            "recreate: at most 4 per top-level controller per hour, by eviction in apps\n",
        ] {
            assert!(summary.contains(line), "missing {line:?} in\n{summary}");
        }
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        // Nothing recreates: no budget line.
        let report = accepted("initContainers:\n  - name: a\n");
        assert!(
            !report.summary().contains("recreate:"),
            "{}",
            report.summary()
        );

        let never = accepted(
            "initContainers:\n  - name: istio-validation\n    owner: { daemonset: a/b }\n    \
             failedExitCodes: [126]\n    action: recreate\n    optIn: none\n",
        );
        assert_eq!(
            never.warnings(),
            [
                "initContainers istio-validation: action recreate with optIn: none never recreates \
              a pod, it only reports; say action: report, or optIn any or namespaces"
            ]
        );
        assert!(
            never.summary().contains(
                "\nwarning: initContainers istio-validation: action recreate with optIn: none"
            ),
            "{}",
            never.summary()
        );
        let blind =
            accepted("initContainers:\n  - name: a\n    deadline: 5m\n    action: recreate\n");
        let warnings = blind.warnings();
        assert!(
            warnings.len() == 1
                && warnings[0].starts_with("initContainers a: action recreate without an owner"),
            "{warnings:?}"
        );
        // Owners other than daemonset are not watched for init steps: said, not hidden.
        let cluster = accepted(
            "initContainers:\n  - name: a\n    owner: { deployment: ns/agent }\n    \
             deadline: 5m\n",
        );
        assert_eq!(
            cluster.warnings(),
            [initguard::config::NODE_STAGE_CLUSTER_OWNERS]
        );
    }

    #[test]
    fn a_webhooks_flapping_window_and_undos_default_and_are_checked() {
        let webhook = |flapping: &str| {
            format!("webhooks:\n  - name: validating/policy/check.policy.example.com\n{flapping}")
        };
        let c = accepted(&webhook(""));
        assert_eq!(c.webhooks[0].flapping.undos, 3);
        assert_eq!(c.webhooks[0].flapping.window, Duration::from_secs(600));
        let c = accepted(&webhook("    flapping: { undos: 2, window: 3s }\n"));
        assert_eq!(c.webhooks[0].flapping.undos, 2);
        assert_eq!(c.webhooks[0].flapping.window, Duration::from_secs(3));
        let summary = c.summary();
        assert!(
            summary.contains(", flapping after 2 undos in 3s, "),
            "{summary}"
        );
        let c = accepted(&webhook("    flapping: { window: 1m }\n"));
        assert_eq!(c.webhooks[0].flapping.undos, 3);
        assert_eq!(c.webhooks[0].flapping.window, Duration::from_secs(60));
        assert_rejected(
            &webhook("    flapping: { undos: 0 }\n"),
            "3:24",
            "webhooks[0].flapping.undos: expected a whole number from 1 to 100, got 0",
        );
        assert_rejected(
            &webhook("    flapping: { window: 500ms }\n"),
            "3:25",
            "webhooks[0].flapping.window: expected a window of at least 1s, got 500ms",
        );
        assert_rejected(
            &webhook("    flapping: { window: 0s }\n"),
            "3:25",
            "webhooks[0].flapping.window: expected a window of at least 1s, got 0s",
        );
        assert_rejected(
            &webhook("    flapping: { undo: 2 }\n"),
            "3:17",
            "webhooks[0].flapping: unknown field `undo`, expected `undos` or `window`",
        );
    }

    #[test]
    fn initializer_overrides_fall_back_to_defaults() {
        let c = accepted(
            "defaults: { deadline: 7s, ownerDownGrace: 3s, probeInterval: 1s }\n\
             initializers:\n  - name: a.example.com\n  - name: b.example.com\n    deadline: 0s\n    \
             ownerDownGrace: 0s\n    probeInterval: 250ms\n",
        );
        let a = c.initializer("a.example.com").unwrap();
        assert_eq!(
            (a.deadline, a.owner_down_grace, a.probe_interval),
            (
                Duration::from_secs(7),
                Duration::from_secs(3),
                Duration::from_secs(1)
            )
        );
        let b = c.initializer("b.example.com").unwrap();
        assert_eq!(
            (b.deadline, b.owner_down_grace, b.probe_interval),
            (Duration::ZERO, Duration::ZERO, Duration::from_millis(250))
        );
        assert_eq!(c.deadline_for("b.example.com"), Some(Duration::ZERO));
        assert_eq!(c.deadline_for("unlisted.example.com"), None);
    }

    #[test]
    fn empty_file_is_rejected_with_a_hint() {
        for text in ["", "\n\n", "# comment only\n", "~\n", "null\n", "---\n"] {
            assert_rejected(text, "1:1", "the file holds no configuration");
            assert!(rejected(text)[0].contains("write `{}`"));
        }
    }

    #[test]
    fn opt_in_label_must_be_a_qualified_name() {
        assert_rejected(
            "optIn:\n  label: initguard.io/by pass\n",
            "2:10",
            "optIn.label: expected a label key: invalid qualified name: the name part must",
        );
        assert_rejected(
            "optIn:\n  label: Initguard.IO/bypass\n",
            "2:10",
            "optIn.label: expected a label key: the prefix of qualified name \"Initguard.IO/bypass\" is invalid",
        );
        assert_rejected(
            "optIn: { label: \"a/b/c\" }\n",
            "1:17",
            "optIn.label: expected a label key: expected a qualified name with at most one '/'",
        );
        assert_rejected(
            &format!("optIn:\n  label: x/{}\n", "n".repeat(64)),
            "2:10",
            "optIn.label: expected a label key: invalid qualified name: the name part must be at most 63",
        );
    }

    #[test]
    fn opt_in_namespaces_must_be_dns_labels() {
        assert_rejected(
            "optIn:\n  namespaces:\n    - batch\n    - Batch\n",
            "4:7",
            "optIn.namespaces[1]: expected a DNS-1123 label",
        );
        assert_rejected(
            "optIn: { namespaces: [ok, \"-bad\"] }\n",
            "1:27",
            "optIn.namespaces[1]: expected a DNS-1123 label",
        );
    }

    #[test]
    fn pods_selector_must_be_a_label_selector() {
        assert_rejected(
            "initializers:\n  - name: quota.example.com\n    owner:\n      pods:\n        \
             namespace: quota-system\n        selector: \"app notin (a b)\"\n",
            "6:19",
            "initializers[0].owner.pods.selector: expected a label selector such as \"app=quota\" \
             or \"tier in (a,b),!canary\", got \"app notin (a b)\": unable to parse requirement: \
             found 'b', expected: ',', ')' or identifier (at character 13)",
        );
        assert_rejected(
            "initializers:\n  - name: q.example.com\n    owner: { pods: { namespace: q, selector: \"app=-x\" } }\n",
            "3:46",
            "initializers[0].owner.pods.selector: expected a label selector",
        );
        assert_rejected(
            "initializers:\n  - name: q.example.com\n    owner: { pods: { namespace: q, selector: \" \" } }\n",
            "3:46",
            "initializers[0].owner.pods.selector: expected a non-empty label selector",
        );
    }

    #[test]
    fn pods_owner_needs_namespace_and_selector() {
        assert_rejected(
            "initializers:\n  - name: q.example.com\n    owner:\n      pods:\n        selector: app=q\n",
            "4:7",
            "initializers[0].owner.pods: expected a namespace key",
        );
        assert_rejected(
            "initializers:\n  - name: q.example.com\n    owner:\n      pods: { namespace: Q, selector: app=q }\n",
            "4:26",
            "initializers[0].owner.pods.namespace: expected a DNS-1123 label",
        );
    }

    #[test]
    fn initializer_names_must_be_unique() {
        assert_rejected(
            "initializers:\n  - name: a.example.com\n  - name: b.example.com\n  - name: a.example.com\n",
            "4:11",
            "initializers[2].name: duplicate initializer \"a.example.com\": already listed at \
             initializers[0], line 2",
        );
    }

    #[test]
    fn initializer_names_must_not_be_empty_or_missing() {
        assert_rejected(
            "initializers:\n  - name: \"\"\n",
            "2:11",
            "initializers[0].name: expected a non-empty initializer name",
        );
        assert_rejected(
            "initializers:\n  - name: a.example.com\n  - deadline: 5s\n",
            "3:5",
            "initializers[1]: expected a name key",
        );
        assert_rejected(
            "initializers:\n  - name:\n    deadline: 5s\n",
            "2:5",
            "initializers[0]: expected a name key",
        );
    }

    #[test]
    fn initializer_names_must_be_qualified_name_like() {
        assert_rejected(
            "initializers:\n  - name: \"sidecar example.com\"\n",
            "2:11",
            "initializers[0].name: expected an initializer name of letters, digits",
        );
        assert_rejected(
            "initializers:\n  - name: a=b\n",
            "2:11",
            "initializers[0].name: expected an initializer name of letters, digits",
        );
        assert_rejected(
            &format!("initializers:\n  - name: {}\n", "a".repeat(317)),
            "2:11",
            "initializers[0].name: expected an initializer name of at most 316 characters, got 317",
        );
        accepted(&format!("initializers:\n  - name: {}\n", "a".repeat(316)));
    }

    #[test]
    fn object_refs_must_be_namespace_slash_name() {
        assert_rejected(
            "mechanism: schedulingGates\ninitializers:\n  - name: sidecar.example.com\n    owner:\n      \
             deployment: kube-system/sidecar-injector\n  - name: kueue.x-k8s.io/admission\n    owner:\n       \
             lease: kueue\n",
            "8:15",
            "initializers[1].owner.lease: expected \"namespace/name\", got \"kueue\"",
        );
        assert_rejected(
            "initializers:\n  - name: s.example.com\n    owner: { deployment: a/b/c }\n",
            "3:26",
            "initializers[0].owner.deployment: expected \"namespace/name\", got \"a/b/c\"",
        );
        assert_rejected(
            "initializers:\n  - name: s.example.com\n    owner: { deployment: Kube/x }\n",
            "3:26",
            "initializers[0].owner.deployment: expected \"namespace/name\", got \"Kube/x\": namespace:",
        );
        assert_rejected(
            "initializers:\n  - name: s.example.com\n    owner: { lease: kube-system/Leader_1 }\n",
            "3:21",
            "initializers[0].owner.lease: expected \"namespace/name\", got \"kube-system/Leader_1\": name:",
        );
    }

    #[test]
    fn owner_must_have_exactly_one_kind() {
        assert_rejected(
            "initializers:\n  - name: s.example.com\n    owner: {}\n",
            "3:5",
            "initializers[0].owner: expected exactly one of deployment, lease, service, pods, http or apiserver, got none",
        );
        assert_rejected(
            "initializers:\n  - name: s.example.com\n    owner:\n      deployment: a/b\n      http: http://x/\n",
            "3:5",
            "initializers[0].owner: expected exactly one of deployment, lease, service, pods, http or apiserver, got \
             deployment and http",
        );
    }

    #[test]
    fn http_owners_need_an_http_url_with_a_host() {
        let yaml = |url: &str| {
            format!("initializers:\n  - name: l.example.com\n    owner:\n      http: \"{url}\"\n")
        };
        assert_rejected(
            &yaml("ftp://10.0.0.5/healthz"),
            "4:13",
            "initializers[0].owner.http: expected an http:// or https:// URL with a host, such as \
             \"http://10.0.0.5:8080/healthz\", got scheme \"ftp\"",
        );
        assert_rejected(
            &yaml("http://"),
            "4:13",
            "initializers[0].owner.http: expected an http://",
        );
        assert_rejected(
            &yaml("10.0.0.5:8080/healthz"),
            "4:13",
            "initializers[0].owner.http: expected an http://",
        );
        accepted(&yaml("https://[::1]:8443/readyz"));
    }

    #[test]
    fn listen_must_be_a_socket_address() {
        assert_rejected(
            "dryRun: true\nlisten: localhost:9777\n",
            "2:9",
            "listen: expected an IP address and port such as \"0.0.0.0:9777\" or \"[::]:9777\", got \
             \"localhost:9777\"",
        );
        assert_rejected(
            "listen: 0.0.0.0:70000\n",
            "1:9",
            "listen: expected an IP address and port",
        );
        assert_rejected(
            "listen: 9777\n",
            "1:9",
            "listen: expected an IP address and port",
        );
        assert_eq!(
            accepted("listen: \"[::]:9000\"\n").listen.to_string(),
            "[::]:9000"
        );
    }

    #[test]
    fn deadline_is_a_non_negative_duration_with_a_unit() {
        assert_rejected(
            "defaults:\n  deadline: -5s\n",
            "2:13",
            "defaults.deadline: expected a duration with a unit such as \"20s\", \"1m30s\" or \"0s\", got \"-5s\"",
        );
        assert_rejected(
            "initializers:\n  - name: a.example.com\n    deadline: 20\n",
            "3:15",
            "initializers[0].deadline: expected a duration with a unit such as \"20s\", \"1m30s\" or \"0s\", got \"20\"",
        );
        assert_rejected(
            "defaults:\n  deadline: 2 fortnights\n",
            "2:13",
            "defaults.deadline: expected a duration with a unit",
        );
        assert_rejected(
            "defaults:\n  deadline: 99999999999999999999999s\n",
            "2:13",
            "defaults.deadline: expected a duration with a unit",
        );
        assert_rejected(
            "defaults:\n  deadline: 400d\n",
            "2:13",
            "defaults.deadline: expected a duration of at most 1y",
        );
        assert_rejected(
            "defaults:\n  deadline: [5s]\n",
            "2:13",
            "defaults.deadline: invalid type: sequence, expected a duration with a unit",
        );
        // 0s is the old metainit behaviour: bypass at once.
        assert_eq!(
            accepted("defaults: { deadline: 0s }\n").defaults.deadline,
            Duration::ZERO
        );
    }

    #[test]
    fn owner_down_grace_is_a_non_negative_duration() {
        assert_rejected(
            "defaults:\n  ownerDownGrace: -1s\n",
            "2:19",
            "defaults.ownerDownGrace: expected a duration with a unit",
        );
        assert_rejected(
            "initializers:\n  - name: a.example.com\n    ownerDownGrace: 2y\n",
            "3:21",
            "initializers[0].ownerDownGrace: expected a duration of at most 1y, got 2years",
        );
        assert_eq!(
            accepted("defaults: { ownerDownGrace: 0s }\n")
                .defaults
                .owner_down_grace,
            Duration::ZERO
        );
    }

    #[test]
    fn probe_interval_must_be_positive() {
        assert_rejected(
            "defaults:\n  probeInterval: 0s\n",
            "2:18",
            "defaults.probeInterval: expected a duration greater than 0s, got 0s",
        );
        assert_rejected(
            "initializers:\n  - name: a.example.com\n    probeInterval: 0ms\n",
            "3:20",
            "initializers[0].probeInterval: expected a duration greater than 0s, got 0s",
        );
    }

    #[test]
    fn lease_duration_is_whole_seconds_of_at_least_one() {
        assert_rejected(
            "leaderElection:\n  leaseDuration: 500ms\n",
            "2:18",
            "leaderElection.leaseDuration: expected a whole number of seconds of at least 1s, got 500ms",
        );
        assert_rejected(
            "leaderElection: { leaseDuration: 1500ms }\n",
            "1:34",
            "leaderElection.leaseDuration: expected a whole number of seconds of at least 1s, got 1s 500ms",
        );
        assert_eq!(
            accepted("leaderElection: { leaseDuration: 1s }\n")
                .leader_election
                .lease_duration,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn pileup_threshold_is_at_least_one() {
        assert_rejected(
            "pileup:\n  threshold: 0\n",
            "2:14",
            "pileup.threshold: expected a whole number from 1 to 4294967295, got 0",
        );
        assert_rejected(
            "pileup:\n  threshold: -2\n",
            "2:14",
            "pileup.threshold: expected a whole number of at least 1, got -2",
        );
        assert_rejected(
            "pileup:\n  threshold: 4294967296\n",
            "2:14",
            "pileup.threshold: expected a whole number from 1 to 4294967295, got 4294967296",
        );
        assert_rejected(
            "pileup:\n  threshold: 123456789012345678901234567890\n",
            "2:14",
            "pileup.threshold: expected a whole number",
        );
        assert_rejected(
            "pileup:\n  threshold: \"3\"\n",
            "2:14",
            "pileup.threshold: invalid type: string \"3\", expected a whole number",
        );
    }

    #[test]
    fn pileup_min_wait_is_a_located_duration() {
        assert_eq!(
            accepted("pileup: { minWait: 2500ms }\n").pileup.min_wait,
            Duration::from_millis(2500)
        );
        assert_eq!(
            accepted("pileup: { threshold: 4 }\n").pileup.min_wait,
            Duration::from_secs(10)
        );
        assert_rejected(
            "pileup:\n  minWait: 10\n",
            "2:12",
            "pileup.minWait: expected a duration with a unit such as \"20s\"",
        );
        assert_rejected(
            "pileup:\n  action: bypass\n  minWait: 2y\n",
            "3:12",
            "pileup.minWait: expected a duration of at most 1y",
        );
        let zero = accepted("pileup: { action: bypass, minWait: 0s }\n");
        assert!(
            zero.warnings()
                .iter()
                .any(|w| w.contains("pileup.minWait is 0s")),
            "{:?}",
            zero.warnings()
        );
        let legacy =
            accepted("mechanism: initializers\npileup: { action: bypass, minWait: 30s }\n");
        assert!(
            legacy
                .warnings()
                .iter()
                .any(|w| w.contains("pileup.minWait 30s is not below")),
            "{:?}",
            legacy.warnings()
        );
    }

    #[test]
    fn max_in_flight_is_between_1_and_1024() {
        assert_rejected(
            "maxInFlight: 0\n",
            "1:14",
            "maxInFlight: expected a whole number from 1 to 1024, got 0",
        );
        assert_rejected(
            "maxInFlight: 1025\n",
            "1:14",
            "maxInFlight: expected a whole number from 1 to 1024, got 1025",
        );
        assert_eq!(accepted("maxInFlight: 1024\n").max_in_flight, 1024);
    }

    #[test]
    fn leader_election_lease_must_be_a_valid_object_name() {
        assert_rejected(
            "leaderElection:\n  namespace: Kube_System\n",
            "2:14",
            "leaderElection.namespace: expected a DNS-1123 label",
        );
        assert_rejected(
            "leaderElection:\n  name: Initguard\n",
            "2:9",
            "leaderElection.name: expected a DNS-1123 subdomain",
        );
    }

    /// Helm renders values as YAML 1.1: `events: off` arrives as `events: false`.
    #[test]
    fn events_is_per_patch_or_off_and_helm_s_boolean_means_the_same() {
        use initguard::config::EventsMode;
        assert_eq!(accepted("{}").events, EventsMode::PerPatch);
        assert_eq!(accepted("events: perPatch\n").events, EventsMode::PerPatch);
        assert_eq!(accepted("events: off\n").events, EventsMode::Off);
        assert_eq!(accepted("events: false\n").events, EventsMode::Off);
        assert_eq!(accepted("events: true\n").events, EventsMode::PerPatch);
    }

    /// `waitingEvents`: on by default, off with `events: off`; `on`/`off` and Helm's booleans;
    /// asking for them with Events off is an error, not silently ignored.
    #[test]
    fn waiting_events_are_on_unless_off_and_never_on_without_events() {
        assert!(accepted("{}").waiting_events);
        assert!(!accepted("events: off\n").waiting_events);
        assert!(!accepted("waitingEvents: off\n").waiting_events);
        assert!(!accepted("waitingEvents: false\n").waiting_events);
        assert!(accepted("waitingEvents: on\n").waiting_events);
        assert!(accepted("waitingEvents: true\n").waiting_events);
        assert!(!accepted("events: off\nwaitingEvents: off\n").waiting_events);
        assert_rejected(
            "events: off\nwaitingEvents: on\n",
            "2:16",
            "waitingEvents: expected off (or no waitingEvents) with events: off, got on",
        );
        assert_rejected(
            "waitingEvents: sometimes\n",
            "1:16",
            "waitingEvents: unknown variant `sometimes`, expected `on` or `off`",
        );
    }

    #[test]
    fn enums_name_their_choices() {
        assert_rejected(
            "mechanism: webhooks\n",
            "1:12",
            "mechanism: unknown variant `webhooks`, expected `schedulingGates` or `initializers`",
        );
        assert_rejected(
            "unlistedInitializers: bypass\n",
            "1:23",
            "unlistedInitializers: unknown variant `bypass`, expected `ignore` or `deadline`",
        );
        assert_rejected(
            "pileup:\n  action: delete\n",
            "2:11",
            "pileup.action: unknown variant `delete`, expected `alert` or `bypass`",
        );
        assert_rejected(
            "events: always\n",
            "1:9",
            "events: unknown variant `always`, expected `perPatch` or `off`",
        );
        assert_rejected(
            "dryRun: yes\n",
            "1:9",
            "dryRun: invalid type: string \"yes\", expected a boolean",
        );
    }

    #[test]
    fn unknown_keys_are_rejected_at_every_level() {
        let cases = [
            (
                "mechanisms: initializers\n",
                "1:1",
                "unknown field `mechanisms`, expected one of `mechanism`",
            ),
            (
                "optIn:\n  labels: x\n",
                "2:3",
                "optIn: unknown field `labels`, expected one of `label`, `namespaces`, `namespaceSelector`",
            ),
            (
                "defaults:\n  timeout: 1s\n",
                "2:3",
                "defaults: unknown field `timeout`",
            ),
            (
                "initializers:\n  - name: a.b.c\n    dealine: 1s\n",
                "3:5",
                "initializers[0]: unknown field `dealine`",
            ),
            (
                "initializers:\n  - name: a.b.c\n    owner:\n      statefulset: a/b\n",
                "4:7",
                "initializers[0].owner: unknown field `statefulset`, expected one of `deployment`, `lease`, `service`, `pods`, `http`",
            ),
            (
                "initializers:\n  - name: a.b.c\n    owner:\n      pods:\n        labels: x\n",
                "5:9",
                "initializers[0].owner.pods: unknown field `labels`",
            ),
            (
                "pileup:\n  window: 1m\n",
                "2:3",
                "pileup: unknown field `window`",
            ),
            (
                "leaderElection:\n  renewDeadline: 1s\n",
                "2:3",
                "leaderElection: unknown field `renewDeadline`",
            ),
        ];
        for (yaml, at, message) in cases {
            assert_rejected(yaml, at, message);
        }
    }

    #[test]
    fn duplicate_keys_are_located_at_the_second_occurrence() {
        assert_rejected(
            "mechanism: initializers\ndryRun: true\nmechanism: schedulingGates\n",
            "3:1",
            "mechanism: duplicate key, first set at line 1 column 1",
        );
        assert_rejected(
            "initializers:\n  - name: a.example.com\n    owner: { lease: a/b, lease: c/d }\n",
            "3:26",
            "initializers[0].owner.lease: duplicate key, first set at line 3 column 14",
        );
    }

    #[test]
    fn a_second_document_is_rejected() {
        assert_rejected(
            "mechanism: initializers\n---\nmechanism: schedulingGates\n",
            "2:1",
            "expected a single YAML document, found a second one",
        );
    }

    #[test]
    fn yaml_syntax_errors_are_located() {
        assert_rejected(
            "optIn:\n\tlabel: x\n",
            "2:2",
            "invalid YAML: tabs disallowed within this context (block indentation) (YAML indentation must use spaces)",
        );
        assert_rejected(
            "optIn:\n  label: \"x\n",
            "2:10",
            "invalid YAML: while scanning a quoted scalar, found unexpected end of stream",
        );
        assert_rejected(
            &format!("initializers: {}\n", "[".repeat(400)),
            "1:270",
            "invalid YAML: collections nested more than 100 levels deep",
        );
        assert_rejected(
            "a: \u{7}\n",
            "1:4",
            "the control character U+0007 is not allowed in YAML",
        );
        assert_rejected(
            "mechanism: initializers\u{2028}dryRun: true\n",
            "1:24",
            "the line separator U+2028 is not allowed",
        );
    }

    #[test]
    fn every_validation_problem_is_reported_in_file_order() {
        let errors = rejected(
            "listen: nowhere\noptIn:\n  label: \"bad key\"\ninitializers:\n  - name: \"\"\n  - name: \
             a.example.com\n    owner: { lease: x }\npileup: { threshold: 0 }\n",
        );
        let positions: Vec<&str> = errors
            .iter()
            .map(|e| e.split(": ").next().unwrap())
            .collect();
        assert_eq!(
            positions,
            [
                "config.yaml:1:9",
                "config.yaml:3:10",
                "config.yaml:5:11",
                "config.yaml:7:21",
                "config.yaml:8:22"
            ],
            "{errors:#?}"
        );
    }

    #[test]
    fn the_error_list_is_capped() {
        let mut yaml = String::from("initializers:\n");
        for i in 0..80 {
            yaml.push_str(&format!("  - name: \"bad name {i}\"\n"));
        }
        let errors = rejected(&yaml);
        assert_eq!(errors.len(), initguard::config::MAX_REPORTED_ERRORS + 1);
        assert!(
            errors
                .last()
                .unwrap()
                .starts_with("config.yaml:52:11: 30 more problems not shown")
        );
    }

    #[test]
    fn crlf_bom_and_aliases_are_understood() {
        let c = accepted(
            "\u{feff}initializers:\r\n  - name: a.example.com\r\n    owner: &injector { deployment: \
             kube-system/injector }\r\n  - name: b.example.com\r\n    owner: *injector\r\n",
        );
        assert_eq!(c.initializers[0].owner, c.initializers[1].owner);
        assert_rejected(
            "\u{feff}optIn:\r\n  label: \"bad key\"\r\n",
            "2:10",
            "optIn.label: expected a label key",
        );
    }

    #[test]
    fn summary_names_every_setting() {
        let c = accepted(
            "mechanism: initializers\noptIn: { namespaces: [a, b] }\ninitializers:\n  - name: x.example.com\n    \
             deadline: 45s\n    owner: { pods: { namespace: q, selector: \"app in (x, y)\" } }\n  - name: \
             h.example.com\n    owner: { http: \"http://127.0.0.1:1/h\" }\nleaderElection: { enabled: false }\n\
             dryRun: true\n",
        );
        let summary = c.summary();
        for line in [
            "mechanism: initializers\n",
            "opt-in: pods labeled initguard.io/bypass; namespaces: a, b\n",
            "  x.example.com: deadline 45s, grace 5s, owner pods q app in (x, y)\n",
            "  h.example.com: deadline 20s, grace 5s, probe every 2s, owner http http://127.0.0.1:1/h\n",
            "leader election: disabled\n",
            "dryRun: true\n",
            "warning: x.example.com: deadline 45s is not below the ~30s create timeout",
        ] {
            assert!(summary.contains(line), "missing {line:?} in\n{summary}");
        }
    }

    #[test]
    fn files_are_read_with_size_and_encoding_checks() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.yaml");
        let mut text = String::from("mechanism: initializers\n");
        while text.len() <= initguard::config::MAX_CONFIG_BYTES {
            text.push_str("# padding padding padding padding padding padding padding padding\n");
        }
        std::fs::write(&big, &text).unwrap();
        let e = initguard::config::load(&big).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}:1:1: the file is {} bytes; a configuration may be at most 1 MiB",
                big.display(),
                text.len()
            )),
            "{e}"
        );
        let e = initguard::config::from_yaml_str(&text, FILE)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("config.yaml:1:1: the text is"), "{e}");

        let latin1 = dir.path().join("latin1.yaml");
        std::fs::write(&latin1, b"optIn:\n  label: caf\xe9/x\n").unwrap();
        let e = initguard::config::load(&latin1).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}:2:13: invalid UTF-8 (byte 0xE9 at offset 19); the configuration must be UTF-8 text",
                latin1.display()
            )
        );

        let e = initguard::config::load(dir.path()).unwrap_err().to_string();
        assert!(
            e.ends_with(": cannot read the configuration: it is a directory, expected a YAML file")
                && !e.contains(":0:0"),
            "{e}"
        );
    }
}

/// Malformed and hostile files: each must exit 2 with a located first line, quickly, without a
/// panic.
mod corpus {
    use super::*;

    /// CPU-time cap against super-linear parsing, far above the few milliseconds these take.
    const LIMIT: Duration = Duration::from_secs(1);
    /// Wall-clock cap for the CLI, which runs in its own process: it only catches a hang, so it
    /// is generous enough for any machine load.
    const CLI_HANG: Duration = Duration::from_secs(60);

    /// Every file in tests/config_corpus/ and a fragment its errors must contain.
    const EXPECTED: &[(&str, &str)] = &[
        (
            "01-root-is-a-sequence.yaml",
            "expected a mapping of initguard settings",
        ),
        (
            "02-root-is-a-scalar.yaml",
            "expected a mapping of initguard settings",
        ),
        ("03-unknown-top-level-key.yaml", "unknown field `mechanizm`"),
        (
            "04-unknown-opt-in-key.yaml",
            "optIn: unknown field `labels`",
        ),
        (
            "05-unknown-defaults-key.yaml",
            "defaults: unknown field `timeout`",
        ),
        (
            "06-unknown-initializer-key.yaml",
            "initializers[0]: unknown field `dealine`",
        ),
        (
            "07-unknown-owner-kind.yaml",
            "owner: unknown field `statefulset`",
        ),
        ("08-unknown-pods-key.yaml", "pods: unknown field `labels`"),
        (
            "09-unknown-pileup-key.yaml",
            "pileup: unknown field `window`",
        ),
        (
            "10-unknown-leader-election-key.yaml",
            "unknown field `renewDeadline`",
        ),
        ("11-alias-bomb.yaml", "unknown field `a`"),
        (
            "12-alias-bomb-in-known-key.yaml",
            "initializers[0]: invalid type: sequence",
        ),
        (
            "13-duplicate-top-level-key.yaml",
            ":3:1: mechanism: duplicate key",
        ),
        (
            "14-duplicate-nested-key.yaml",
            ":4:5: initializers[0].deadline: duplicate key",
        ),
        (
            "15-duplicate-initializer-name.yaml",
            "duplicate initializer \"sidecar.example.com\"",
        ),
        (
            "16-empty-initializer-name.yaml",
            "expected a non-empty initializer name",
        ),
        (
            "17-missing-initializer-name.yaml",
            "initializers[0]: expected a name key",
        ),
        (
            "18-initializer-name-with-space.yaml",
            "initializers[0].name: expected an initializer name",
        ),
        ("19-bad-duration-unit.yaml", "unknown time unit \"parsecs\""),
        ("20-duration-without-unit.yaml", "time unit needed"),
        ("21-negative-duration.yaml", "got \"-5s\""),
        ("22-overflowing-duration.yaml", "number is too large"),
        (
            "23-duration-too-long.yaml",
            "expected a duration of at most 1y",
        ),
        (
            "24-zero-probe-interval.yaml",
            "expected a duration greater than 0s",
        ),
        (
            "25-short-lease-duration.yaml",
            "whole number of seconds of at least 1s",
        ),
        (
            "26-negative-threshold.yaml",
            "expected a whole number of at least 1, got -3",
        ),
        ("27-overflowing-threshold.yaml", "which is too large"),
        (
            "28-zero-threshold.yaml",
            "expected a whole number from 1 to 4294967295, got 0",
        ),
        (
            "29-max-in-flight-too-large.yaml",
            "expected a whole number from 1 to 1024",
        ),
        (
            "30-fractional-max-in-flight.yaml",
            "invalid type: floating point `1.5`",
        ),
        (
            "31-bad-label-key-uppercase-prefix.yaml",
            "optIn.label: expected a label key",
        ),
        ("32-bad-label-key-two-slashes.yaml", "at most one '/'"),
        (
            "33-bad-opt-in-namespace.yaml",
            "optIn.namespaces[1]: expected a DNS-1123 label",
        ),
        (
            "34-bad-selector-unclosed.yaml",
            "unable to parse requirement: found 'end of string', expected: ',', ')' or identifier (at character 13)",
        ),
        (
            "35-empty-selector.yaml",
            "expected a non-empty label selector",
        ),
        (
            "36-bad-selector-key.yaml",
            "unable to parse requirement: key: Invalid value",
        ),
        ("37-url-bad-scheme.yaml", "got scheme \"ftp\""),
        (
            "38-url-without-host.yaml",
            "owner.http: expected an http:// or https:// URL",
        ),
        ("39-url-unparsable.yaml", "relative URL without a base"),
        (
            "40-listen-hostname.yaml",
            "listen: expected an IP address and port",
        ),
        ("41-listen-port-overflow.yaml", "got \"0.0.0.0:70000\""),
        (
            "42-object-ref-without-namespace.yaml",
            "expected \"namespace/name\", got \"kueue\"",
        ),
        (
            "43-object-ref-two-slashes.yaml",
            "expected \"namespace/name\"",
        ),
        ("44-owner-two-kinds.yaml", "got deployment and lease"),
        ("45-owner-no-kind.yaml", "got none"),
        (
            "46-tab-indentation.yaml",
            "YAML indentation must use spaces",
        ),
        ("47-invalid-utf8.yaml", ":2:23: invalid UTF-8 (byte 0xFF"),
        ("48-empty.yaml", ":1:1: the file holds no configuration"),
        ("49-comments-only.yaml", "the file holds no configuration"),
        ("50-null-document.yaml", "the file holds no configuration"),
        (
            "51-two-documents.yaml",
            ":2:1: expected a single YAML document",
        ),
        ("52-bad-mechanism.yaml", "unknown variant `webhooks`"),
        ("53-bad-unlisted-policy.yaml", "unknown variant `bypass`"),
        ("54-bad-pileup-action.yaml", "unknown variant `delete`"),
        ("55-boolean-as-yes.yaml", "expected a boolean"),
        (
            "56-deep-flow-nesting.yaml",
            "nested more than 100 levels deep",
        ),
        ("57-control-character.yaml", "control character U+0007"),
        ("58-unclosed-quote.yaml", "found unexpected end of stream"),
        ("59-unknown-anchor.yaml", "unknown anchor"),
        (
            "60-bad-leader-election-namespace.yaml",
            "leaderElection.namespace",
        ),
        (
            "61-initializers-not-a-list.yaml",
            "initializers: invalid type: map, expected a sequence",
        ),
        ("62-nul-byte.yaml", "control character U+0000"),
        ("63-line-separator.yaml", "line separator U+2028"),
        ("64-bad-indentation.yaml", "did not find expected key"),
        (
            "65-complex-key.yaml",
            "invalid type: sequence, expected field identifier",
        ),
        ("66-merge-key.yaml", "unknown field `<<`"),
        ("67-utf16.yaml", ":1:1: invalid UTF-8 (byte 0xFF"),
        ("68-listen-port-only.yaml", "got \"9777\""),
        (
            "69-initializer-entry-is-a-string.yaml",
            "expected an initializer entry",
        ),
        (
            "70-bad-lease-name.yaml",
            "leaderElection.name: expected a DNS-1123 subdomain",
        ),
        (
            "71-deep-block-nesting.yaml",
            ":2:199: invalid YAML: collections nested more than 100",
        ),
        ("72-many-errors.yaml", "30 more problems not shown"),
        ("73-empty-label.yaml", "got an empty string"),
        ("74-pods-without-selector.yaml", "expected a selector key"),
        (
            "75-initializer-overrides-out-of-range.yaml",
            "initializers[0].probeInterval",
        ),
        (
            "76-secure-listen-port-only.yaml",
            "secureListen: expected an IP address and port",
        ),
        (
            "77-secure-listen-same-as-listen.yaml",
            ":2:15: secureListen: must differ from listen",
        ),
        (
            "78-tls-without-secure-listen.yaml",
            "secureListen, which is not set",
        ),
        (
            "79-tls-cert-without-key.yaml",
            "expected both certFile and keyFile",
        ),
        (
            "80-tls-missing-files.yaml",
            ":3:13: tls.certFile: cannot read \"/nonexistent/tls.crt\"",
        ),
        ("81-tls-unknown-key.yaml", "tls: unknown field `cert`"),
        (
            "82-webhook-bad-kind.yaml",
            ":2:11: webhooks[0].name: expected \"KIND/CONFIGURATION/WEBHOOK\" with KIND validating or mutating",
        ),
        (
            "83-webhook-duplicate.yaml",
            ":3:11: webhooks[1].name: duplicate webhook \"validating/pod-policy/pods.policy.example.com\": already listed at webhooks[0]",
        ),
        (
            "84-webhook-unknown-key.yaml",
            "unknown field `failurePolicy`",
        ),
        ("85-webhook-bad-bypass-via.yaml", "unknown variant `labels`"),
        (
            "86-webhook-bad-exempt-namespace.yaml",
            ":4:24: webhooks[0].exemptNamespaces[0]",
        ),
        (
            "87-webhook-without-name.yaml",
            ":2:5: webhooks[0]: expected a name key",
        ),
        (
            "88-initializer-bad-opt-in.yaml",
            ":3:12: initializers[0].optIn: unknown variant `tenants`, expected one of `any`, `namespaces`, `none`",
        ),
        (
            "89-initializer-empty-bypass-on.yaml",
            ":3:5: initializers[0].bypassOn: expected at least one of deadline, owner_down, pileup",
        ),
        (
            "90-initializer-bad-bypass-on.yaml",
            "unknown variant `ownerDown`, expected one of `deadline`, `owner_down`, `pileup`",
        ),
        (
            "91-webhook-bad-opt-in.yaml",
            ":3:12: webhooks[0].optIn: unknown variant `label`",
        ),
        (
            "92-webhook-namespace-selector-two-requirements.yaml",
            ":2:22: optIn.namespaceSelector: expected a single requirement while webhooks are listed",
        ),
        (
            "93-bad-namespace-selector.yaml",
            ":2:22: optIn.namespaceSelector: expected a label selector",
        ),
        (
            "94-webhook-bad-requester.yaml",
            ":3:46: webhooks[0].exemptRequesters[1]: expected group:GROUP, user:USER, \
             serviceaccount:NAMESPACE:NAME or serviceaccount:NAMESPACE:*, got \"team:ops\"",
        ),
        (
            "95-webhook-requester-with-quote.yaml",
            ":3:24: webhooks[0].exemptRequesters[0]: expected group:GROUP",
        ),
        (
            "96-webhook-requester-bad-namespace.yaml",
            ":3:24: webhooks[0].exemptRequesters[0]: expected group:GROUP",
        ),
        (
            "97-webhook-bad-operation.yaml",
            ":3:32: webhooks[0].exemptOperations[1]: unknown variant `PATCH`",
        ),
        (
            "98-webhook-critical-path-with-selectors.yaml",
            ":4:25: webhooks[0].exemptCriticalPath: expected bypassVia auto",
        ),
        (
            "99-initializer-apiserver-owner.yaml",
            ":3:14: initializers[0].owner.apiserver: expected another owner kind",
        ),
        (
            "99a-webhook-canary-in-exempt-namespace.yaml",
            ":4:38: webhooks[0].owner.apiserver.namespace: expected a namespace the bypass does \
             not exempt",
        ),
        (
            "99b-webhook-canary-bad-resource.yaml",
            ":3:56: webhooks[0].owner.apiserver.resource: unknown variant `secrets`",
        ),
        (
            "99c-webhook-after-restore-on-validating.yaml",
            ":3:19: webhooks[0].afterRestore: expected ignore: a validating webhook changes \
             nothing",
        ),
        (
            "99d-webhook-max-wait-without-evict.yaml",
            ":4:14: webhooks[0].maxWait: expected afterRestore: evict",
        ),
        (
            "99e-webhook-after-restore-bad-mode.yaml",
            ":3:19: webhooks[0].afterRestore: unknown variant `reroll`",
        ),
    ];

    fn corpus_dir() -> PathBuf {
        manifest_path("tests/config_corpus")
    }

    #[track_caller]
    fn assert_rejected_by_cli(path: &Path, fragment: &str) {
        let (out, elapsed) = check_config(path, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = path.display();
        assert!(elapsed < CLI_HANG, "{name} took {elapsed:?}");
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(
            is_located(first),
            "{name}: first line not located: {first:?}"
        );
        assert!(stderr.lines().all(is_located), "{name}: {stderr}");
        assert!(
            stderr.contains(fragment),
            "{name}: expected {fragment:?} in\n{stderr}"
        );
    }

    #[test]
    fn the_table_lists_every_corpus_file() {
        let mut on_disk: Vec<String> = std::fs::read_dir(corpus_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let listed: Vec<String> = EXPECTED.iter().map(|(f, _)| (*f).to_owned()).collect();
        assert_eq!(on_disk, listed);
        assert!(listed.len() >= 40);
    }

    #[test]
    fn check_config_rejects_every_corpus_file() {
        for (file, fragment) in EXPECTED {
            assert_rejected_by_cli(&corpus_dir().join(file), fragment);
        }
    }

    #[test]
    fn the_library_rejects_every_corpus_file_quickly() {
        for (file, _) in EXPECTED {
            let path = corpus_dir().join(file);
            let start = thread_cpu_time();
            let result = initguard::config::load(&path);
            let cpu = thread_cpu_time() - start;
            assert!(cpu < LIMIT, "{file} took {cpu:?} of CPU");
            let e = result.expect_err(file);
            assert!(!e.errors.is_empty());
            assert!(
                e.errors.iter().all(|e| e.line >= 1 && e.column >= 1),
                "{file}: {e}"
            );
        }
    }

    #[test]
    fn check_config_rejects_a_file_over_one_mib() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("too-large.yaml");
        let mut text = String::from("initializers:\n");
        while text.len() <= initguard::config::MAX_CONFIG_BYTES {
            text.push_str("  - name: padding.example.com\n");
        }
        std::fs::write(&path, text).unwrap();
        assert_rejected_by_cli(&path, "a configuration may be at most 1 MiB");
    }

    /// Inputs just under the size limit in shapes that stress YAML parsers: all must finish
    /// well within the cap, accepted or not.
    #[test]
    fn large_pathological_inputs_finish_quickly() {
        let budget = initguard::config::MAX_CONFIG_BYTES - 64;
        let fill = |head: &str, unit: &str, tail: &str| {
            let mut s = head.to_owned();
            while s.len() + unit.len() + tail.len() < budget {
                s.push_str(unit);
            }
            s.push_str(tail);
            s
        };
        let cases = [
            ("deep flow nesting", fill("initializers: ", "[", "")),
            ("deep flow maps", fill("optIn: ", "{a: ", "")),
            ("deep block sequences", fill("initializers:\n", "- ", "x\n")),
            (
                "long flow list",
                fill("optIn:\n  namespaces: [", "ns-a, ", "ns-b]\n"),
            ),
            (
                "long block list",
                fill("optIn:\n  namespaces:\n", "    - ns-a\n", ""),
            ),
            (
                "many aliases",
                fill(
                    "optIn:\n  namespaces: &n [a]\ninitializers: [",
                    "*n, ",
                    "*n]\n",
                ),
            ),
            ("many duplicate keys", fill("", "dryRun: true\n", "")),
            (
                "many initializers",
                fill("initializers:\n", "  - { name: \"x y\" }\n", ""),
            ),
            ("one huge scalar", fill("optIn:\n  label: ", "a", "\n")),
            (
                "huge quoted escapes",
                fill("optIn:\n  label: \"", "\\u00e9", "\"\n"),
            ),
            ("huge comment", fill("# ", "comment ", "\n{}\n")),
            ("many complex keys", fill("", "? [a, b]\n: c\n", "")),
            ("deep anchors", fill("optIn:\n  label: ", "&a ", "x\n")),
        ];
        for (name, text) in cases {
            assert!(text.len() <= initguard::config::MAX_CONFIG_BYTES, "{name}");
            let start = thread_cpu_time();
            let result = initguard::config::from_yaml_str(&text, FILE);
            let cpu = thread_cpu_time() - start;
            assert!(cpu < LIMIT, "{name} took {cpu:?} of CPU");
            if let Err(e) = result {
                assert!(e.errors.iter().all(|e| e.line >= 1), "{name}: {e}");
            }
        }
    }
}

/// The parser never panics, and every rejection is located.
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn example() -> String {
        std::fs::read_to_string(manifest_path("config/example.yaml")).unwrap()
    }

    #[track_caller]
    fn check(text: &str) {
        let start = thread_cpu_time();
        match initguard::config::from_yaml_str(text, FILE) {
            Ok(c) => {
                let _ = c.summary();
                serde_json::to_string(&c).unwrap();
            }
            Err(e) => {
                assert!(!e.errors.is_empty());
                for error in &e.errors {
                    assert!(!error.message.is_empty());
                    assert!(
                        error.line >= 1 && error.column >= 1,
                        "unlocated: {error}\n{text:?}"
                    );
                }
            }
        }
        let cpu = thread_cpu_time() - start;
        assert!(cpu < Duration::from_secs(1), "{cpu:?} of CPU for {text:?}");
    }

    /// An edit of the valid example: replace a char range with a fragment of YAML-ish text.
    #[derive(Debug, Clone)]
    struct Edit {
        at: usize,
        remove: usize,
        insert: String,
    }

    fn edit() -> impl Strategy<Value = Edit> {
        (
            any::<usize>(),
            0usize..24,
            prop_oneof![
                "[ \n\t:,\\-\\[\\]{}&*!|>'\"#%@`?.~0-9a-zA-Z/]{0,12}",
                Just("\n  - ".to_owned()),
                Just(": ".to_owned()),
                Just("\t".to_owned()),
                Just("&a ".to_owned()),
                Just("*a".to_owned()),
                Just("---\n".to_owned()),
                Just("-1".to_owned()),
                Just("99999999999999999999999".to_owned()),
                Just("\u{feff}".to_owned()),
                Just("é".to_owned()),
            ],
        )
            .prop_map(|(at, remove, insert)| Edit { at, remove, insert })
    }

    fn apply(text: &str, edits: &[Edit]) -> String {
        let mut chars: Vec<char> = text.chars().collect();
        for e in edits {
            let at = e.at % (chars.len() + 1);
            let end = (at + e.remove).min(chars.len());
            chars.splice(at..end, e.insert.chars());
        }
        chars.into_iter().collect()
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            check(&text);
        }

        #[test]
        fn yaml_like_text_never_panics(text in "[ \n\t:,\\-\\[\\]{}&*!|>'\"#%@`?.~0-9a-z]{0,300}") {
            check(&text);
        }

        #[test]
        fn mutated_example_never_panics(edits in proptest::collection::vec(edit(), 1..6)) {
            check(&apply(&example(), &edits));
        }
    }

    #[test]
    fn line_swaps_and_deletions_of_the_example_never_panic() {
        let text = example();
        let lines: Vec<&str> = text.lines().collect();
        for i in 0..lines.len() {
            let mut without = lines.clone();
            without.remove(i);
            check(&without.join("\n"));
            if i + 1 < lines.len() {
                let mut swapped = lines.clone();
                swapped.swap(i, i + 1);
                check(&swapped.join("\n"));
            }
        }
    }
}
