//! RBAC enforcement for one user, from rules or from deploy/rbac.yaml.

use initguard_sim::SimClients as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use kube_sim::{PolicyRule, Rbac};

use crate::common::{ADMIN, api_error, namespace, pod, sim};

#[tokio::test]
async fn rules_limit_one_user_only() {
    let sim = sim().await;
    let admin = sim.client(ADMIN);
    namespace(&admin, "ns").await;
    Api::<Pod>::namespaced(admin.clone(), "ns")
        .create(&PostParams::default(), &pod("x", &[], &["g"]))
        .await
        .unwrap();
    sim.enforce_rbac(
        "system:initguard",
        vec![PolicyRule::new(
            &[""],
            &["pods"],
            &["get", "list", "watch", "patch"],
        )],
    );
    let guard: Api<Pod> = Api::namespaced(sim.client("system:initguard"), "ns");
    guard.get("x").await.unwrap();
    guard.list(&ListParams::default()).await.unwrap();
    guard
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    let e = api_error(guard.delete("x", &DeleteParams::default()).await);
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "pods \"x\" is forbidden: User \"system:initguard\" cannot delete resource \"pods\" in API group \"\" in the namespace \"ns\""
    );
    let e = api_error(
        guard
            .patch_status("x", &PatchParams::default(), &Patch::Merge(json!({})))
            .await,
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("cannot patch resource \"pods/status\""),
        "{}",
        e.message
    );
    // Other users are unaffected; lifting enforcement restores access.
    Api::<Pod>::namespaced(admin.clone(), "ns")
        .get("x")
        .await
        .unwrap();
    sim.stop_enforcing_rbac("system:initguard");
    guard.delete("x", &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn deploy_rbac_manifest_is_enforced() {
    let sim = sim().await;
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/rbac.yaml")).unwrap();
    let user = "system:initguard";
    sim.enforce_rbac_policy(user, Rbac::from_yaml_str(&manifest, user).unwrap());
    let client = sim.client(user);
    let pods: Api<Pod> = Api::all(client.clone());
    pods.list(&ListParams::default()).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let own: Lease = serde_json::from_value(
        json!({"metadata": {"name": "initguard"}, "spec": {"holderIdentity": "me"}}),
    )
    .unwrap();
    leases.create(&PostParams::default(), &own).await.unwrap();
    leases.get("initguard").await.unwrap();
    let other: Lease = serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    leases.create(&PostParams::default(), &other).await.unwrap();
    let e = api_error(leases.delete("other", &DeleteParams::default()).await);
    assert_eq!(e.code, 403);
    let e = api_error(
        Api::<Lease>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &own)
            .await,
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("in the namespace \"default\""),
        "{}",
        e.message
    );
    let e = api_error(
        Api::<Pod>::namespaced(client, "kube-system")
            .delete("any", &DeleteParams::default())
            .await,
    );
    assert_eq!(e.code, 403);
}
