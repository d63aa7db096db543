//! The shared setup of the end-to-end tests: a simulated cluster enforcing the shipped RBAC for
//! the guard's user, pods, owners and guards, and readers of the server's request log and object
//! history.

use initguard_sim::SimClients as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use initguard::config::{Config, Mechanism};
use initguard::guard::Guard;
use initguard::policy::OwnerState;
use initguard_sim::controllers::{GateOwner, GateOwnerHandle, GateOwnerOptions, dns_name};
use initguard_test_support::pod;
use kube_sim::{ChangeType, KubeVersion, Rbac, RequestRecord, Sim, SimOptions};
use serde_json::{Value, json};

/// The guard's user, bound by `deploy/rbac.yaml`.
pub(crate) const GUARD_USER: &str = "system:initguard";
/// Unrestricted user for test setup.
pub(crate) const ADMIN: &str = "system:admin";
/// The opt-in label key used throughout.
pub(crate) const OPT_IN: &str = "initguard.io/bypass";
/// A listed initializer with a Deployment owner.
pub(crate) const SIDECAR: &str = "sidecar.example.com";
/// A second listed initializer with a Deployment owner.
pub(crate) const AUDIT: &str = "audit.example.com";
/// An initializer the config does not list (`unlistedInitializers: ignore`).
pub(crate) const UNLISTED: &str = "unlisted.example.com";

/// Both mechanisms, for scenarios that make sense on either: scheduling gates on a current
/// server, legacy initializers on each legacy version profile (1.8, 1.11, 1.13), each with the
/// API surface of that version ([`on_version`]).
macro_rules! both_mechanisms {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use initguard::config::Mechanism;
            use kube_sim::KubeVersion;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn scheduling_gates() {
                let run = super::$scenario(Mechanism::SchedulingGates);
                crate::harness::on_version(KubeVersion::V1_33, run).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn initializers_1_8() {
                let run = super::$scenario(Mechanism::Initializers);
                crate::harness::on_version(KubeVersion::V1_8, run).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn initializers_1_11() {
                let run = super::$scenario(Mechanism::Initializers);
                crate::harness::on_version(KubeVersion::V1_11, run).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn initializers_1_13() {
                let run = super::$scenario(Mechanism::Initializers);
                crate::harness::on_version(KubeVersion::V1_13, run).await;
            }
        }
    )*};
}
pub(crate) use both_mechanisms;

/// Legacy-only scenarios (no argument), run on each legacy version profile.
macro_rules! legacy_versions {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use kube_sim::KubeVersion;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v1_8() {
                crate::harness::on_version(KubeVersion::V1_8, super::$scenario()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v1_11() {
                crate::harness::on_version(KubeVersion::V1_11, super::$scenario()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v1_13() {
                crate::harness::on_version(KubeVersion::V1_13, super::$scenario()).await;
            }
        }
    )*};
}
pub(crate) use legacy_versions;

tokio::task_local! {
    /// The Kubernetes version the clusters of the running scenario impersonate.
    static KUBE_VERSION: KubeVersion;
}

/// Run `scenario` with every [`Cluster`] it starts serving the API surface of `version`
/// (discovery, group versions, error codes, the `initialize` verb), so one scenario runs
/// unchanged on several versions.
pub(crate) async fn on_version<F: Future>(version: KubeVersion, scenario: F) -> F::Output {
    KUBE_VERSION.scope(version, scenario).await
}

/// The status a failed JSON Patch `test` gets from the server being simulated: 422 Invalid,
/// or 500 on the 1.8 profile, as servers before the 422 mapping answered.
pub(crate) fn failed_test_status() -> u16 {
    if kube_version().is_some_and(|v| v.patch_failure_is_500()) {
        500
    } else {
        422
    }
}

/// The version set by [`on_version`] (None outside: every group version the simulator knows).
pub(crate) fn kube_version() -> Option<KubeVersion> {
    KUBE_VERSION.try_with(|v| *v).ok()
}

pub(crate) use crate::wait::{PATIENCE, eventually, eventually_async, until};

pub(crate) use initguard_test_support::http::get as http_get;
pub(crate) use initguard_test_support::metrics::{series as metric_series, sum as metric_sum};

/// The text of `deploy/<file>`.
pub(crate) fn deploy_file(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The RBAC the guard's user gets from the shipped manifests: `deploy/rbac.yaml`, plus
/// `deploy/rbac-legacy-initializers.yaml` on legacy clusters.
pub(crate) fn shipped_rbac(mechanism: Mechanism) -> Rbac {
    let load = |file: &str| {
        let rbac = Rbac::from_yaml_str(&deploy_file(file), GUARD_USER)
            .unwrap_or_else(|e| panic!("deploy/{file}: {e}"));
        assert_ne!(
            rbac,
            Rbac::default(),
            "deploy/{file} grants nothing to {GUARD_USER}"
        );
        rbac
    };
    let mut rbac = load("rbac.yaml");
    if mechanism == Mechanism::Initializers {
        rbac.merge(load("rbac-legacy-initializers.yaml"));
    }
    rbac
}

/// A configuration for `mechanism`: listening on a free port, opt-in label [`OPT_IN`] and leader
/// election off unless `rest` configures them, then `rest` (YAML top-level keys).
pub(crate) fn config(mechanism: Mechanism, rest: &str) -> Arc<Config> {
    let mut yaml = format!("mechanism: {}\nlisten: 127.0.0.1:0\n", mechanism.as_str());
    if !rest.contains("optIn") {
        yaml.push_str(&format!("optIn: {{ label: {OPT_IN} }}\n"));
    }
    if !rest.contains("leaderElection") {
        yaml.push_str("leaderElection: { enabled: false }\n");
    }
    yaml.push_str(rest);
    let config = initguard::config::from_yaml_str(&yaml, "e2e.yaml")
        .unwrap_or_else(|e| panic!("invalid test config:\n{e}\n---\n{yaml}"));
    Arc::new(config)
}

/// A config entry for `name` with this deadline, owned by the Deployment a [`GateOwner`] keeps.
pub(crate) fn owned(name: &str, deadline: &str) -> String {
    format!(
        "  - {{ name: {name}, deadline: {deadline}, owner: {{ deployment: kube-system/{} }} }}\n",
        dns_name(name)
    )
}

/// One initializer removed from one pod, from the object history.
#[derive(Debug, Clone)]
pub(crate) struct Removal {
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    pub initializer: String,
    /// Who removed it.
    pub user: String,
    pub time: SystemTime,
    /// The reason recorded in the bypass annotation for this initializer, if any.
    pub reason: Option<String>,
}

/// When a pod was created: its `creationTimestamp` (whole seconds) and the commit instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Created {
    pub timestamp: SystemTime,
    pub committed: SystemTime,
}

/// A simulated cluster: the API server enforcing the shipped RBAC for the guard's user.
pub(crate) struct Cluster {
    pub sim: Sim,
    pub mechanism: Mechanism,
    admin: kube::Client,
}

impl Cluster {
    /// A cluster for `mechanism` with default server options.
    pub(crate) async fn start(mechanism: Mechanism) -> Cluster {
        Cluster::start_with(mechanism, |_| {}).await
    }

    /// A cluster for `mechanism` with server options adjusted by `tweak`.
    pub(crate) async fn start_with(
        mechanism: Mechanism,
        tweak: impl FnOnce(&mut SimOptions),
    ) -> Cluster {
        let mut options = SimOptions {
            mechanism,
            kube_version: kube_version().filter(|v| v.mechanism() == mechanism),
            schedule_delay: Duration::from_millis(20),
            ..SimOptions::default()
        };
        tweak(&mut options);
        let sim = Sim::start(options).await.unwrap();
        sim.enforce_rbac_policy(GUARD_USER, shipped_rbac(mechanism));
        let admin = sim.client(ADMIN);
        Cluster {
            sim,
            mechanism,
            admin,
        }
    }

    /// Create a namespace.
    pub(crate) async fn namespace(&self, name: &str) {
        let body = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } });
        self.post("/api/v1/namespaces", &body).await;
    }

    /// Create `body` at `path` as the admin; panics on an error answer.
    pub(crate) async fn admin_post(&self, path: &str, body: &Value) -> Value {
        self.post(path, body).await
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
        let request = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body).unwrap())
            .unwrap();
        self.admin
            .request::<Value>(request)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// Create a pod waiting on `initializers` (scheduling gates or legacy pending
    /// initializers), labeled with the opt-in label when `opted_in`. Returns at once, also on
    /// legacy clusters (the CREATE says `includeUninitialized=true`).
    pub(crate) async fn pod(
        &self,
        namespace: &str,
        name: &str,
        opted_in: bool,
        initializers: &[&str],
    ) {
        self.pod_with(namespace, name, opted_in, initializers, |_| {})
            .await;
    }

    /// [`Cluster::pod`] with its manifest adjusted by `tweak` before the CREATE.
    pub(crate) async fn pod_with(
        &self,
        namespace: &str,
        name: &str,
        opted_in: bool,
        initializers: &[&str],
        tweak: impl FnOnce(&mut Value),
    ) {
        let entries: Vec<Value> = initializers.iter().map(|n| json!({ "name": n })).collect();
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": name, "labels": { "app": "e2e" } },
            "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
        });
        if opted_in {
            pod["metadata"]["labels"][OPT_IN] = json!("true");
        }
        match self.mechanism {
            Mechanism::SchedulingGates => pod["spec"]["schedulingGates"] = json!(entries),
            Mechanism::Initializers => {
                pod["metadata"]["initializers"] = json!({ "pending": entries });
            }
        }
        tweak(&mut pod);
        self.post(
            &format!("/api/v1/namespaces/{namespace}/pods?includeUninitialized=true"),
            &pod,
        )
        .await;
    }

    /// Start the owner of `initializer` as user `owner:<initializer>`, heartbeat 100 ms, then
    /// apply `tweak`. Returns once its Deployment shows whether it is alive, so a guard started
    /// afterwards observes it up (or down) from the start.
    pub(crate) async fn owner(
        &self,
        initializer: &str,
        tweak: impl FnOnce(&mut GateOwnerOptions),
    ) -> GateOwnerHandle {
        let mut options = GateOwnerOptions::new(initializer, self.mechanism);
        options.heartbeat = Duration::from_millis(100);
        tweak(&mut options);
        let (namespace, deployment) = (
            options.namespace.clone(),
            options.deployment.clone().unwrap(),
        );
        let available = i64::from(options.alive);
        let owner =
            GateOwner::start(self.sim.kube_config(&owner_user(initializer)), options).unwrap();
        until(
            format!("the deployment of {initializer} to be written"),
            || {
                self.sim
                    .get_object("deployments", Some(&namespace), &deployment)
                    .and_then(|d| d["status"]["availableReplicas"].as_i64())
                    == Some(available)
            },
        )
        .await;
        owner
    }

    /// A client of the guard's user, as `initguard run` builds it (with the server's clock).
    pub(crate) fn guard_client(&self) -> initguard::client::Connection {
        initguard::client::connect(self.sim.kube_config(GUARD_USER), self.mechanism).unwrap()
    }

    /// Start a guard as `user` (bound to the same shipped RBAC as [`GUARD_USER`]) with this
    /// leader-election identity, and wait until it is ready.
    pub(crate) async fn guard_as(&self, config: &Arc<Config>, identity: &str, user: &str) -> Guard {
        self.sim
            .enforce_rbac_policy(user, shipped_rbac(self.mechanism));
        let client =
            initguard::client::connect(self.sim.kube_config(user), self.mechanism).unwrap();
        let guard = Guard::start_with(
            client,
            config.clone(),
            identity.to_owned(),
            initguard::guard::STALL_AFTER,
        )
        .await
        .unwrap();
        wait_ready(&guard).await;
        guard
    }

    /// Send `method path` with a JSON body (if any) as the admin; panics on an error answer.
    pub(crate) async fn admin_request(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&Value>,
    ) {
        let mut request = http::Request::builder().method(method.clone()).uri(path);
        if body.is_some() {
            request = request.header(http::header::CONTENT_TYPE, "application/merge-patch+json");
        }
        let body = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        self.admin
            .request::<Value>(request.body(body).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    }

    /// Merge-patch the pod `namespace/name` as the admin (also while uninitialized).
    pub(crate) async fn merge_patch_pod(&self, namespace: &str, name: &str, patch: &Value) {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}?includeUninitialized=true");
        self.admin_request(http::Method::PATCH, &path, Some(patch))
            .await;
    }

    /// Delete the pod `namespace/name` as the admin (also while uninitialized).
    pub(crate) async fn delete_pod(&self, namespace: &str, name: &str) {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}?includeUninitialized=true");
        self.admin_request(http::Method::DELETE, &path, None).await;
    }

    /// Start a guard (leader election as configured) and wait until it is ready.
    pub(crate) async fn guard(&self, config: &Arc<Config>) -> Guard {
        self.guard_named(config, "e2e-guard").await
    }

    /// [`Cluster::guard`] with an explicit leader-election identity.
    pub(crate) async fn guard_named(&self, config: &Arc<Config>, identity: &str) -> Guard {
        let guard = Guard::start_with(
            self.guard_client(),
            config.clone(),
            identity.to_owned(),
            initguard::guard::STALL_AFTER,
        )
        .await
        .unwrap();
        wait_ready(&guard).await;
        guard
    }

    /// Check that no task of `guard` panicked, shut it down gracefully, then check that the
    /// shipped RBAC allowed every request a guard made (a denied watch or Event would
    /// otherwise go unnoticed).
    pub(crate) async fn finish(&self, guard: Guard) {
        self.finish_refused(guard, |_| false).await;
    }

    /// [`Cluster::finish`] where the test withheld a grant on purpose: requests `refused`
    /// names may be denied, any other denial fails.
    pub(crate) async fn finish_refused(
        &self,
        guard: Guard,
        refused: impl Fn(&RequestRecord) -> bool,
    ) {
        let panics = guard.shared.failures.list();
        assert!(panics.is_empty(), "guard tasks panicked: {panics:#?}");
        guard.shutdown().await;
        let denied: Vec<RequestRecord> = self
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.user.starts_with(GUARD_USER) && r.status == 403 && !refused(r))
            .collect();
        assert_eq!(
            denied,
            vec![],
            "requests of guards ({GUARD_USER}*) denied by the shipped RBAC"
        );
    }

    /// Writes (anything but get, list and watch) by the guard's user.
    pub(crate) fn guard_writes(&self) -> Vec<RequestRecord> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| {
                r.user == GUARD_USER && !matches!(r.verb.as_str(), "get" | "list" | "watch")
            })
            .collect()
    }

    /// Guard writes other than those about the pod `witness` (its PATCHes and the Events
    /// naming it).
    pub(crate) fn guard_writes_besides(&self, witness: &str) -> Vec<RequestRecord> {
        let about = |r: &RequestRecord| match r.resource.as_str() {
            "pods" => r.name.as_deref() == Some(witness),
            "events" => r
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .is_some_and(|e| {
                    e["involvedObject"]["name"] == witness || e["regarding"]["name"] == witness
                }),
            _ => false,
        };
        self.guard_writes()
            .into_iter()
            .filter(|r| !about(r))
            .collect()
    }

    /// PATCH requests by the guard's user on the pod `name`, whatever their answer.
    pub(crate) fn guard_pod_patches(&self, name: &str) -> Vec<RequestRecord> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| {
                r.user == GUARD_USER
                    && r.verb == "patch"
                    && r.resource == "pods"
                    && r.name.as_deref() == Some(name)
            })
            .collect()
    }

    /// Every initializer removed from any pod, in commit order.
    pub(crate) fn removals(&self) -> Vec<Removal> {
        let mut out = Vec::new();
        for change in self.sim.object_history() {
            if change.resource != "pods" {
                continue;
            }
            // The judge's own reader, not the guard's parser.
            let records = change
                .after
                .as_deref()
                .map(pod::records)
                .unwrap_or_default();
            for initializer in change.removed_initializers() {
                let reason = records
                    .iter()
                    .rev()
                    .find(|r| r.initializer == initializer)
                    .map(|r| r.reason.clone());
                out.push(Removal {
                    pod: format!(
                        "{}/{}",
                        change.namespace.as_deref().unwrap_or_default(),
                        change.name
                    ),
                    uid: change.uid.clone(),
                    initializer,
                    user: change.user.clone(),
                    time: change.time,
                    reason,
                });
            }
        }
        out
    }

    /// Removals of initializers from `namespace/name` by the guard's user.
    pub(crate) fn bypasses_of(&self, pod: &str) -> Vec<Removal> {
        self.removals()
            .into_iter()
            .filter(|r| r.pod == pod && r.user == GUARD_USER)
            .collect()
    }

    /// `InitializerBypassed` Events about the pod `name` (stored in core/v1 form).
    pub(crate) fn bypass_events(&self, name: &str) -> Vec<Value> {
        self.sim
            .list_objects("events")
            .into_iter()
            .filter(|e| e["reason"] == "InitializerBypassed" && e["involvedObject"]["name"] == name)
            .collect()
    }

    /// `InitializerWaiting` Events about the pod `name` (stored in core/v1 form).
    pub(crate) fn waiting_events(&self, name: &str) -> Vec<Value> {
        self.sim
            .list_objects("events")
            .into_iter()
            .filter(|e| e["reason"] == "InitializerWaiting" && e["involvedObject"]["name"] == name)
            .collect()
    }

    /// Initializers still pending on the stored pod (empty once initialized). Panics when the
    /// pod is gone: a deleted pod must never read as a bypassed one.
    pub(crate) fn pending(&self, namespace: &str, name: &str) -> Vec<String> {
        let stored = self
            .sim
            .get_object("pods", Some(namespace), name)
            .unwrap_or_else(|| {
                panic!("pod {namespace}/{name} is gone: its initializers cannot be read (deleted?)")
            });
        pod::pending(self.mechanism, &stored)
    }

    /// When `namespace/name` was created.
    pub(crate) fn created(&self, namespace: &str, name: &str) -> Created {
        let change = self
            .sim
            .object_history()
            .into_iter()
            .find(|c| {
                c.resource == "pods"
                    && c.change_type == ChangeType::Added
                    && c.namespace.as_deref() == Some(namespace)
                    && c.name == name
            })
            .unwrap_or_else(|| panic!("pod {namespace}/{name} was never created"));
        let stamp = change.after.as_ref().unwrap()["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap();
        Created {
            timestamp: SystemTime::from(stamp),
            committed: change.time,
        }
    }
}

/// The user a test owner of `initializer` acts as.
pub(crate) fn owner_user(initializer: &str) -> String {
    format!("owner:{}", dns_name(initializer))
}

/// Wait until exactly one of the running `replicas` leads; its index.
pub(crate) async fn sole_leader(replicas: &[Option<Guard>]) -> usize {
    eventually("exactly one leader", || {
        let leading: Vec<usize> = replicas
            .iter()
            .enumerate()
            .filter(|(_, g)| g.as_ref().is_some_and(|g| g.shared.is_leader()))
            .map(|(i, _)| i)
            .collect();
        (leading.len() == 1).then(|| leading[0])
    })
    .await
}

/// Wait until the guard's initial lists are complete.
pub(crate) async fn wait_ready(guard: &Guard) {
    let shared = guard.shared.clone();
    // Ready, and every owner read at least once (tests then expect known states).
    let missing = || {
        let mut missing = shared.not_ready();
        missing.extend(shared.owners.not_synced());
        missing
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !missing().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for the guard to become ready: {:?}",
            missing()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Wait until the guard sees the owner of `initializer` up (or down).
pub(crate) async fn wait_owner(guard: &Guard, initializer: &str, up: bool) {
    let shared = guard.shared.clone();
    until(
        format!("the guard to see the owner of {initializer} up={up}"),
        || match shared.owners.state(initializer) {
            OwnerState::Up { .. } => up,
            OwnerState::Down { .. } => !up,
            OwnerState::Unknown => false,
        },
    )
    .await;
}

/// `later - earlier` (zero when `later` is not later).
pub(crate) fn since(earlier: SystemTime, later: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or_default()
}

/// Assert `later - earlier` is at least `min`.
pub(crate) fn assert_not_before(what: &str, earlier: SystemTime, later: SystemTime, min: Duration) {
    // Only the lower bound is a guarantee ("never early"); how soon after it an action comes
    // depends on machine load and is measured by the benchmarks, not asserted here.
    let signed = match later.duration_since(earlier) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    assert!(
        signed >= min.as_secs_f64(),
        "{what}: {signed:.3}s, expected at least {min:?}"
    );
}

/// The `webhooks:` section listing the entry of [`webhook_world`], owned by its Deployment,
/// with these `ownerDownGrace` and optional `restoreGrace`.
pub(crate) fn policy_webhook(
    configuration: &str,
    entry: &str,
    owner_down_grace: &str,
    restore_grace: Option<&str>,
) -> String {
    let mut yaml = format!(
        "webhooks:\n\
         \x20 - name: validating/{configuration}/{entry}\n\
         \x20   owner: {{ deployment: kube-system/policy }}\n\
         \x20   ownerDownGrace: {owner_down_grace}\n"
    );
    if let Some(grace) = restore_grace {
        yaml.push_str(&format!("    restoreGrace: {grace}\n"));
    }
    yaml
}

/// A bypass the simulator recorded at `written` (the guard's clock), on a server whose clock
/// runs `offset_secs` from it, was due at `due` on the server's clock: assert it came no
/// sooner, nor later than half the skew after (a bound that fails a guard counting on the
/// wrong clock at any machine load, while its own lateness, about a second, stays far below).
pub(crate) fn assert_on_time_under_skew(
    what: &str,
    written: std::time::SystemTime,
    offset_secs: i64,
    due: jiff::Timestamp,
) {
    let on_server_clock = jiff::Timestamp::try_from(written)
        .expect("a timestamp")
        .checked_add(jiff::SignedDuration::from_secs(offset_secs))
        .expect("a timestamp");
    assert!(
        on_server_clock >= due,
        "{what} bypassed at {on_server_clock} on the server's clock, before it was due ({due})"
    );
    let late_bound = due
        .checked_add(jiff::SignedDuration::from_secs(offset_secs.abs() / 2))
        .expect("a timestamp");
    assert!(
        on_server_clock <= late_bound,
        "{what} bypassed at {on_server_clock} on the server's clock, due {due}: later than \
         half the skew ({late_bound})"
    );
}

/// The shipped RBAC plus get, list, watch and patch on exactly the webhook configurations
/// `configurations` of `resource` (`validatingwebhookconfigurations` or
/// `mutatingwebhookconfigurations`; by name, as the chart grants them), to which a test adds
/// what its webhook's options need.
pub(crate) fn webhook_policy(resource: &str, configurations: &[&str]) -> Rbac {
    let mut rbac = shipped_rbac(Mechanism::SchedulingGates);
    rbac.merge(Rbac::cluster_wide(vec![
        kube_sim::PolicyRule::new(
            &["admissionregistration.k8s.io"],
            &[resource],
            &["get", "list", "watch", "patch"],
        )
        .with_names(configurations),
    ]));
    rbac
}

/// [`webhook_policy`] of the ValidatingWebhookConfigurations `configurations`, for the guard's
/// user.
pub(crate) fn webhook_rbac(c: &Cluster, configurations: &[&str]) {
    let rbac = webhook_policy("validatingwebhookconfigurations", configurations);
    c.sim.enforce_rbac_policy(GUARD_USER, rbac);
}

/// A listed webhook's world on `c`: the shipped RBAC plus get, list, watch and patch on exactly
/// the ValidatingWebhookConfiguration `configuration` (by name, as the chart grants it), its
/// owner the Deployment kube-system/policy (no status: not available), and that fail-closed
/// configuration with one entry `entry` carrying `conditions` as its own matchConditions.
/// Returns the configuration as the server stored it.
pub(crate) async fn webhook_world(
    c: &Cluster,
    configuration: &str,
    entry: &str,
    conditions: Vec<Value>,
) -> Value {
    webhook_rbac(c, &[configuration]);
    c.admin_post(
        "/apis/apps/v1/namespaces/kube-system/deployments",
        &json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "policy" },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": "policy" } },
                "template": {
                    "metadata": { "labels": { "app": "policy" } },
                    "spec": { "containers": [{ "name": "p", "image": "registry.k8s.io/pause:3.10" }] }
                }
            }
        }),
    )
    .await;
    let mut webhook = json!({
        "name": entry,
        "clientConfig": { "url": "https://127.0.0.1:1/validate" },
        "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["pods"] }],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if !conditions.is_empty() {
        webhook["matchConditions"] = Value::Array(conditions);
    }
    c.admin_post(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": { "name": configuration },
            "webhooks": [webhook],
        }),
    )
    .await
}
