//! What differs between Kubernetes versions: the guard finds the Deployment API and the leader
//! lock by discovery, says so when something it needs is missing, and the legacy servers'
//! `initialize` verb and failed-patch answers are what the simulator serves.

use initguard::config::Mechanism;
use initguard::guard::Guard;
use initguard::guard::leader::{LEADER_ANNOTATION, LeaderRecord};
use initguard_sim::SimClients as _;
use kube_sim::{KubeVersion, Rbac};
use serde_json::{Value, json};

use crate::harness::*;

/// On 1.8 (no apps/v1) the owner Deployment is watched in apps/v1beta2, the most preferred
/// group version served, and judged as usual. (Regression: the guard only knew apps/v1, got
/// 404 and never observed the owner.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_owner_is_read_from_the_group_the_server_serves() {
    on_version(KubeVersion::V1_8, async {
        let c = Cluster::start(Mechanism::Initializers).await;
        let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
        let config = config(
            Mechanism::Initializers,
            &format!("initializers:\n{}", owned(SIDECAR, "20s")),
        );
        let guard = c.guard(&config).await;
        wait_owner(&guard, SIDECAR, false).await;
        let paths: Vec<String> = c
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.user == GUARD_USER && r.resource == "deployments")
            .map(|r| r.path)
            .collect();
        assert!(!paths.is_empty());
        assert!(
            paths.iter().all(|p| p.starts_with("/apis/apps/v1beta2/")),
            "{paths:#?}"
        );
        c.finish(guard).await;
    })
    .await;
}

/// A server serving no Deployment API at all: the owner cannot be watched, and /readyz says so
/// (503 with the reason) instead of staying silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_deployment_api_fails_readiness_with_the_reason() {
    let c = Cluster::start(Mechanism::SchedulingGates).await;
    c.sim.faults().hide_groups(&["apps", "extensions"]);
    let config = config(
        Mechanism::SchedulingGates,
        &format!("initializers:\n{}", owned(SIDECAR, "20s")),
    );
    let guard = Guard::start(c.guard_client(), config).await.unwrap();
    let body = eventually_async("/readyz naming the missing Deployment API", || async {
        let (status, body) = http_get(guard.addr, "/readyz").await;
        (status == 503 && body.contains("no Deployment API")).then_some(body)
    })
    .await;
    assert!(body.contains("apps/v1, apps/v1beta2"), "{body}");
    let (_, status) = http_get(guard.addr, "/status").await;
    let status: Value = serde_json::from_str(&status).unwrap();
    assert!(
        status["notReady"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap_or_default().contains("no Deployment API")),
        "{status:#}"
    );
    guard.shutdown().await;
}

/// Leader election on 1.11 (no Lease API): two replicas elect exactly one leader on the
/// ConfigMap lock, whose annotation reads as client-go's LeaderElectionRecord naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_replicas_elect_one_leader_on_a_configmap() {
    on_version(KubeVersion::V1_11, async {
        let c = Cluster::start(Mechanism::Initializers).await;
        let config = config(
            Mechanism::Initializers,
            "leaderElection: { enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 3s }\n",
        );
        let replicas = [
            c.guard_named(&config, "guard-a").await,
            c.guard_named(&config, "guard-b").await,
        ];
        let leader = eventually("exactly one leader", || {
            let leading: Vec<&Guard> = replicas.iter().filter(|g| g.shared.is_leader()).collect();
            (leading.len() == 1).then(|| leading[0].shared.identity.clone())
        })
        .await;
        let configmap = c
            .sim
            .get_object("configmaps", Some("kube-system"), "initguard")
            .expect("the ConfigMap lock kube-system/initguard");
        let text = configmap["metadata"]["annotations"][LEADER_ANNOTATION]
            .as_str()
            .unwrap_or_else(|| panic!("no {LEADER_ANNOTATION} annotation: {configmap:#}"));
        // client-go's field names and types (Go time strings parse as RFC 3339).
        let raw: Value = serde_json::from_str(text).unwrap();
        assert_eq!(raw["holderIdentity"], json!(leader), "{raw:#}");
        assert_eq!(raw["leaseDurationSeconds"], 3, "{raw:#}");
        assert!(raw["leaderTransitions"].is_i64(), "{raw:#}");
        for key in ["acquireTime", "renewTime"] {
            raw[key]
                .as_str()
                .unwrap_or_default()
                .parse::<jiff::Timestamp>()
                .unwrap_or_else(|e| panic!("{key}: {e} in {raw:#}"));
        }
        let record: LeaderRecord = serde_json::from_str(text).unwrap();
        assert_eq!(record.holder_identity, leader);
        // No Lease API was tried: discovery said there is none.
        let lease_requests: Vec<_> = c
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.user == GUARD_USER && r.api_group == "coordination.k8s.io")
            .collect();
        assert_eq!(lease_requests, vec![]);
        let [a, b] = replicas;
        a.shutdown().await;
        c.finish(b).await;
    })
    .await;
}

/// The guard made Lease requests, every one to coordination.k8s.io/v1beta1.
fn assert_leases_read_in_v1beta1(c: &Cluster) {
    let paths: Vec<String> = c
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.user == GUARD_USER && r.resource == "leases")
        .map(|r| r.path)
        .collect();
    assert!(!paths.is_empty(), "no Lease request of the guard");
    assert!(
        paths
            .iter()
            .all(|p| p.starts_with("/apis/coordination.k8s.io/v1beta1/")),
        "{paths:#?}"
    );
}

/// On 1.13 the lock is a coordination.k8s.io/v1beta1 Lease (1.12-1.13 serve no v1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_uses_v1beta1_leases_on_1_13() {
    on_version(KubeVersion::V1_13, async {
        let c = Cluster::start(Mechanism::Initializers).await;
        let config = config(
            Mechanism::Initializers,
            "leaderElection: { enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 3s }\n",
        );
        let guard = c.guard_named(&config, "guard-a").await;
        until("the only replica to lead", || guard.shared.is_leader()).await;
        let lease = c
            .sim
            .get_object("leases", Some("kube-system"), "initguard")
            .expect("the Lease kube-system/initguard");
        assert_eq!(lease["spec"]["holderIdentity"], "guard-a");
        assert_leases_read_in_v1beta1(&c);
        c.finish(guard).await;
    })
    .await;
}

/// A replica whose RBAC lacks the ConfigMap lock cannot take part in the election: it never
/// leads and says why in /readyz (503) and /status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_that_cannot_lock_says_so() {
    on_version(KubeVersion::V1_11, async {
        let c = Cluster::start(Mechanism::Initializers).await;
        // deploy/rbac.yaml alone: no rbac-legacy-initializers.yaml, so no ConfigMap Role.
        c.sim
            .enforce_rbac_policy(GUARD_USER, shipped_rbac(Mechanism::SchedulingGates));
        let config = config(
            Mechanism::Initializers,
            "leaderElection: { enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 3s }\n",
        );
        let guard = Guard::start(c.guard_client(), config).await.unwrap();
        let body = eventually_async("/readyz naming the leader election", || async {
            let (status, body) = http_get(guard.addr, "/readyz").await;
            (status == 503 && body.contains("leader election")).then_some(body)
        })
        .await;
        assert!(body.contains("ConfigMap") && body.contains("403"), "{body}");
        let (_, status) = http_get(guard.addr, "/status").await;
        let status: Value = serde_json::from_str(&status).unwrap();
        assert_eq!(status["leader"], false);
        assert!(
            status["notReady"].to_string().contains("leader election"),
            "{status:#}"
        );
        guard.shutdown().await;
    })
    .await;
}

/// deploy/rbac.yaml with the guard's own Lease rule changed by `edit` (which must apply).
fn rbac_with_lease_rule(edit: (&str, &str)) -> kube_sim::Rbac {
    let text = deploy_file("rbac.yaml");
    assert!(
        text.contains(edit.0),
        "deploy/rbac.yaml no longer has {:?}",
        edit.0
    );
    kube_sim::Rbac::from_yaml_str(&text.replace(edit.0, edit.1), GUARD_USER).unwrap()
}

/// A replica that may read its Lease but not create it, or create it but not renew it, cannot
/// take part in the election: a 403 is an error to report at once in /readyz (503), not a
/// lost race (a 409) to wait out silently, nor a blip reported only once it has lasted a
/// lease (15 s here, a round every 2 s or more): /readyz names it by the second refused
/// request. The replica ends up not leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_denied_writing_its_lease_says_so() {
    let create_rule = "  - apiGroups: [\"coordination.k8s.io\"]\n    resources: [\"leases\"]\n    \
                       verbs: [\"create\"]\n";
    let cases = [
        ("create", (create_rule, "")),
        (
            "update",
            ("verbs: [\"get\", \"update\"]", "verbs: [\"get\"]"),
        ),
    ];
    for (denied, edit) in cases {
        let c = Cluster::start(Mechanism::SchedulingGates).await;
        c.sim
            .enforce_rbac_policy(GUARD_USER, rbac_with_lease_rule(edit));
        let config = config(
            Mechanism::SchedulingGates,
            "leaderElection: { enabled: true, namespace: kube-system, name: initguard, \
             leaseDuration: 15s }\n",
        );
        let refused = || {
            c.sim
                .requests()
                .into_iter()
                .filter(|r| r.user == GUARD_USER && r.resource == "leases" && r.status == 403)
                .map(|r| r.verb)
                .collect::<Vec<_>>()
        };
        let guard = Guard::start(c.guard_client(), config).await.unwrap();
        let (body, refused_then) = eventually_async(
            format!("/readyz naming the leader election ({denied} denied)"),
            || async {
                let (status, body) = http_get(guard.addr, "/readyz").await;
                (status == 503 && body.contains("leader election")).then(|| (body, refused()))
            },
        )
        .await;
        assert!(
            body.contains("403")
                && body.contains("kube-system/initguard (coordination.k8s.io/v1 Lease)"),
            "{denied} denied: {body}"
        );
        assert!(
            refused_then.len() <= 2 && refused_then.contains(&denied.to_owned()),
            "{denied} denied: /readyz named the problem after these refusals: {refused_then:?}"
        );
        let shared = guard.shared.clone();
        until(format!("the replica not to lead ({denied} denied)"), || {
            !shared.is_leader()
        })
        .await;
        guard.shutdown().await;
    }
}

/// 1.7-1.13 servers refuse any update of an uninitialized pod without the `initialize` verb:
/// under deploy/rbac.yaml alone the bypass is forbidden and nothing is removed; the shipped
/// legacy RBAC (the e2e suite's default) grants it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_bypass_needs_the_initialize_verb() {
    on_version(KubeVersion::V1_13, async {
        let c = Cluster::start(Mechanism::Initializers).await;
        c.sim
            .enforce_rbac_policy(GUARD_USER, shipped_rbac(Mechanism::SchedulingGates));
        let _owner = c.owner(SIDECAR, |o| o.alive = false).await;
        let config = config(
            Mechanism::Initializers,
            &format!(
                "defaults: {{ ownerDownGrace: 300ms }}\ninitializers:\n{}",
                owned(SIDECAR, "20s")
            ),
        );
        let guard = Guard::start(c.guard_client(), config.clone())
            .await
            .unwrap();
        wait_ready(&guard).await;
        wait_owner(&guard, SIDECAR, false).await;
        c.pod("default", "held", true, &[SIDECAR]).await;
        let denied = eventually("a forbidden bypass patch", || {
            c.guard_pod_patches("held")
                .into_iter()
                .find(|r| r.status == 403)
        })
        .await;
        assert_eq!(denied.verb, "patch");
        assert_eq!(c.pending("default", "held"), vec![SIDECAR.to_owned()]);
        assert!(c.bypasses_of("default/held").is_empty());
        guard.shutdown().await;

        // With the legacy RBAC as shipped, the same bypass goes through.
        c.sim
            .enforce_rbac_policy(GUARD_USER, shipped_rbac(Mechanism::Initializers));
        let guard = c.guard(&config).await;
        until("the bypass", || c.pending("default", "held").is_empty()).await;
        assert_eq!(c.bypasses_of("default/held").len(), 1);
        // (Not `finish`: the first guard's 403 is in the log on purpose.)
        guard.shutdown().await;
    })
    .await;
}

/// On 1.13 (no coordination.k8s.io/v1) a Lease owner is watched in v1beta1 and judged as
/// usual. (Regression found on the real 1.13 server: lease owners were watched in v1 only, got
/// 404 and stayed unknown forever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_owner_is_read_from_the_group_the_server_serves() {
    on_version(KubeVersion::V1_13, async {
        let c = Cluster::start(Mechanism::Initializers).await;
        let renewed = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
            .to_string();
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1beta1", "kind": "Lease",
            "metadata": { "name": "sidecar-leader", "namespace": "kube-system" },
            "spec": { "holderIdentity": "c-0", "leaseDurationSeconds": 60, "renewTime": renewed },
        });
        let request =
            http::Request::post("/apis/coordination.k8s.io/v1beta1/namespaces/kube-system/leases")
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(&lease).unwrap())
                .unwrap();
        c.sim
            .client(ADMIN)
            .request::<Value>(request)
            .await
            .expect("the owner Lease is created in v1beta1");
        let config = config(
            Mechanism::Initializers,
            &format!(
                "initializers:\n  - name: {SIDECAR}\n    deadline: 20s\n    \
                 owner: {{ lease: kube-system/sidecar-leader }}\n"
            ),
        );
        let guard = c.guard(&config).await;
        wait_owner(&guard, SIDECAR, true).await;
        assert_leases_read_in_v1beta1(&c);
        c.finish(guard).await;
    })
    .await;
}

/// A `service` owner on a server without discovery.k8s.io/v1 (1.13) is read from the
/// Service's core/v1 Endpoints, with only the `endpoints` grant deploy/README.md gives for such
/// servers: up while an address is ready, down once none is, and never a request for
/// EndpointSlices the server does not serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_owner_before_endpoint_slices_is_read_from_core_endpoints() {
    on_version(KubeVersion::V1_13, async {
        let c = Cluster::start(Mechanism::Initializers).await;
        let mut rbac = shipped_rbac(Mechanism::Initializers);
        rbac.merge(
            Rbac::from_yaml_str(
                &format!(
                    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n\
                     metadata: {{ name: service-owners }}\n\
                     rules:\n  - {{ apiGroups: [\"\"], resources: [endpoints], verbs: [list, watch] }}\n\
                     ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
                     metadata: {{ name: service-owners }}\n\
                     roleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: service-owners }}\n\
                     subjects: [{{ apiGroup: rbac.authorization.k8s.io, kind: User, name: \"{GUARD_USER}\" }}]\n"
                ),
                GUARD_USER,
            )
            .unwrap(),
        );
        c.sim.enforce_rbac_policy(GUARD_USER, rbac);
        let endpoints = |ready: &str, not_ready: &str| {
            json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": { "name": "sidecar", "namespace": "kube-system" },
                "subsets": [{
                    "addresses": if ready.is_empty() { json!([]) } else { json!([{ "ip": ready }]) },
                    "notReadyAddresses":
                        if not_ready.is_empty() { json!([]) } else { json!([{ "ip": not_ready }]) },
                    "ports": [{ "port": 443 }],
                }],
            })
        };
        c.admin_post(
            "/api/v1/namespaces/kube-system/endpoints",
            &endpoints("10.0.0.1", ""),
        )
        .await;
        let config = config(
            Mechanism::Initializers,
            &format!(
                "initializers:\n  - name: {SIDECAR}\n    deadline: 1h\n    \
                 ownerDownGrace: 1s\n    owner: {{ service: kube-system/sidecar }}\n"
            ),
        );
        let guard = c.guard(&config).await;
        wait_owner(&guard, SIDECAR, true).await;
        c.admin_request(
            http::Method::PATCH,
            "/api/v1/namespaces/kube-system/endpoints/sidecar",
            Some(&json!({ "subsets": endpoints("", "10.0.0.1")["subsets"] })),
        )
        .await;
        wait_owner(&guard, SIDECAR, false).await;
        let requests: Vec<_> = c
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.user == GUARD_USER)
            .collect();
        assert!(
            requests.iter().any(|r| r.resource == "endpoints"
                && r.path.starts_with("/api/v1/namespaces/kube-system/endpoints")),
            "the guard read core/v1 Endpoints"
        );
        assert!(
            requests
                .iter()
                .all(|r| r.resource != "endpointslices" && r.status != 403),
            "the guard asked for EndpointSlices the server does not serve, or was refused: \
             {requests:#?}"
        );
        // check-config --kubeconfig, as the guard with the same grant, looks where the guard
        // reads: the existing Endpoints pass, a missing one is named.
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        c.sim.write_kubeconfig(&kubeconfig, GUARD_USER).unwrap();
        let file = dir.path().join("config.yaml");
        std::fs::write(
            &file,
            format!(
                "mechanism: initializers\ninitializers:\n\
                 \x20 - {{ name: {SIDECAR}, owner: {{ service: kube-system/sidecar }} }}\n\
                 \x20 - {{ name: other.example.com, owner: {{ service: kube-system/nope }} }}\n"
            ),
        )
        .unwrap();
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_initguard"))
            .arg("check-config")
            .arg(&file)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let warnings: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("warning: owner "))
            .collect();
        assert!(
            out.status.success()
                && warnings.len() == 1
                && warnings[0].contains("service kube-system/nope (of other.example.com) does not exist"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        c.finish(guard).await;
    })
    .await;
}

/// What a legacy server answers to a JSON Patch that no longer applies (which the guard treats
/// as "the pod changed"): 500 with the old patch library's words on 1.8, 422 Invalid on 1.11
/// and 1.13 (as the real 1.13 server answers: tests/real_cluster_legacy/differential.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_servers_answer_a_failed_patch_as_their_version_did() {
    for version in KubeVersion::LEGACY {
        let c = on_version(version, Cluster::start(Mechanism::Initializers)).await;
        c.pod("default", "p", false, &[SIDECAR]).await;
        let admin = c.sim.client(ADMIN);
        let patch = |ops: Value| {
            let request = http::Request::patch("/api/v1/namespaces/default/pods/p")
                .header(http::header::CONTENT_TYPE, "application/json-patch+json")
                .body(serde_json::to_vec(&ops).unwrap())
                .unwrap();
            let admin = admin.clone();
            async move { admin.request::<Value>(request).await }
        };
        for (ops, message) in [
            (
                json!([{ "op": "test", "path": "/metadata/initializers/pending/0/name", "value": "other.example.com" }]),
                "Testing value /metadata/initializers/pending/0/name failed",
            ),
            (
                json!([{ "op": "test", "path": "/metadata/initializers/pending/3/name", "value": SIDECAR }]),
                "jsonpatch test operation does not apply: is missing path: /metadata/initializers/pending/3/name",
            ),
            (
                json!([{ "op": "remove", "path": "/metadata/initializers/pending/3" }]),
                "Unable to access invalid index: 3",
            ),
        ] {
            match patch(ops).await {
                Err(kube::Error::Api(s)) if version == KubeVersion::V1_8 => {
                    assert_eq!(s.code, 500, "{version:?}: {s:?}");
                    assert_eq!(s.message, message, "{version:?}");
                }
                Err(kube::Error::Api(s)) => {
                    assert_eq!(
                        (s.code, s.reason.as_str()),
                        (422, "Invalid"),
                        "{version:?}: {s:?}"
                    );
                }
                other => panic!("{version:?}: {other:?}"),
            }
        }
    }
}
