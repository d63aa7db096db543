//! Legacy initializers (Kubernetes 1.7–1.13): hidden uninitialized pods, the blocking
//! CREATE that times out with 504 while the pod stays stored, initialization making the pod
//! visible.

use initguard_sim::SimClients as _;
use std::time::Duration;

use futures::StreamExt;
use initguard::config::Mechanism;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use kube_sim::{Sim, SimOptions};
use serde_json::json;

use crate::common::{ADMIN, api_error, namespace, pod, raw_client, sim_with};

const INIT: &str = "sidecar.example.com";

async fn legacy_sim(create_timeout: Duration) -> Sim {
    sim_with(SimOptions {
        mechanism: Mechanism::Initializers,
        legacy_initializers: vec![INIT.to_string(), "audit.example.com".to_string()],
        create_timeout,
        ..SimOptions::default()
    })
    .await
}

/// A client that sees uninitialized pods, as the guard builds it.
fn guard_client(sim: &Sim) -> Client {
    let mut config = sim.kube_config("system:initguard");
    config.default_retry = false;
    initguard::client::build(config, Mechanism::Initializers).unwrap()
}

#[tokio::test]
async fn uninitialized_pods_are_hidden_from_lists_without_include_uninitialized() {
    let sim = legacy_sim(Duration::from_secs(30)).await;
    let admin = sim.client(ADMIN);
    namespace(&admin, "legacy").await;
    // A create with includeUninitialized=true answers at once instead of waiting.
    let req = http::Request::post("/api/v1/namespaces/legacy/pods?includeUninitialized=true")
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&pod("hidden", &[], &[])).unwrap())
        .unwrap();
    let created: serde_json::Value = admin.request(req).await.unwrap();
    assert_eq!(
        created["metadata"]["initializers"],
        json!({"pending": [{"name": INIT}, {"name": "audit.example.com"}]})
    );

    // Lists hide it; a GET by name shows it, as the real 1.13 server does
    // (tests/real_cluster_legacy/differential.rs).
    let plain: Api<Pod> = Api::namespaced(admin.clone(), "legacy");
    assert_eq!(plain.get("hidden").await.unwrap().name_any(), "hidden");
    assert!(
        plain
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let all: Api<Pod> = Api::all(admin.clone());
    assert!(
        all.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let guard: Api<Pod> = Api::namespaced(guard_client(&sim), "legacy");
    assert_eq!(guard.get("hidden").await.unwrap().name_any(), "hidden");
    assert_eq!(
        guard
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert!(sim.get_object("pods", Some("legacy"), "hidden").is_some());

    // Patches work on uninitialized pods; the pod is still hidden while one remains.
    let remove_head: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/initializers/pending/0/name", "value": INIT},
        {"op": "remove", "path": "/metadata/initializers/pending/0"},
    ]))
    .unwrap();
    guard
        .patch(
            "hidden",
            &PatchParams::default(),
            &Patch::<()>::Json(remove_head),
        )
        .await
        .unwrap();
    assert!(
        plain
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let removed: Vec<String> = sim
        .object_history()
        .into_iter()
        .filter(|c| c.name == "hidden")
        .flat_map(|c| c.removed_initializers())
        .collect();
    assert_eq!(removed, [INIT]);

    // Pods created already initialized (empty pending list) are visible at once.
    let mut pre = serde_json::to_value(pod("pre", &[], &[])).unwrap();
    pre["metadata"]["initializers"] = json!({"pending": []});
    let req = http::Request::post("/api/v1/namespaces/legacy/pods")
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&pre).unwrap())
        .unwrap();
    let p: serde_json::Value = admin.request(req).await.unwrap();
    assert!(p["metadata"]["initializers"].is_null());
    plain.get("pre").await.unwrap();
}

#[tokio::test]
async fn blocking_create_times_out_with_504_and_keeps_the_pod() {
    let sim = legacy_sim(Duration::from_millis(500)).await;
    let admin = raw_client(&sim, ADMIN);
    namespace(&admin, "pile").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "pile");
    let started = tokio::time::Instant::now();
    let e = api_error(
        pods.create(&PostParams::default(), &pod("slow", &[], &[]))
            .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
    assert_eq!(e.message, "Timeout: request did not complete within 500ms");
    assert!(started.elapsed() >= Duration::from_millis(500));
    let stored = sim
        .get_object("pods", Some("pile"), "slow")
        .expect("the pod stays stored");
    assert_eq!(
        stored["metadata"]["initializers"]["pending"][0]["name"],
        INIT
    );
    // A retry of the same name now conflicts, the root of the pileup with generateName.
    assert_eq!(
        api_error(
            pods.create(&PostParams::default(), &pod("slow", &[], &[]))
                .await
        )
        .code,
        409
    );
}

#[tokio::test]
async fn initialization_unblocks_create_and_shows_the_pod() {
    let sim = legacy_sim(Duration::from_secs(10)).await;
    let admin = raw_client(&sim, ADMIN);
    namespace(&admin, "init").await;
    let plain: Api<Pod> = Api::namespaced(admin.clone(), "init");
    let guard: Api<Pod> = Api::namespaced(guard_client(&sim), "init");
    let rv = sim.resource_version().to_string();
    let wp = WatchParams::default().disable_bookmarks();
    let mut ordinary = plain.watch(&wp, &rv).await.unwrap().boxed();
    let mut uninit = guard.watch(&wp, &rv).await.unwrap().boxed();

    let creator = {
        let plain = plain.clone();
        tokio::spawn(async move {
            plain
                .create(&PostParams::default(), &pod("waits", &[], &[]))
                .await
        })
    };
    let first = tokio::time::timeout(crate::wait::PATIENCE, uninit.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(first, WatchEvent::Added(ref p) if p.name_any() == "waits"),
        "{first:?}"
    );

    // The initializers remove themselves.
    guard
        .patch(
            "waits",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"initializers": {"pending": []}}})),
        )
        .await
        .unwrap();
    let created = tokio::time::timeout(crate::wait::PATIENCE, creator)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        created.name_any(),
        "waits",
        "the create answers once the pod is initialized"
    );
    assert!(
        sim.get_object("pods", Some("init"), "waits").unwrap()["metadata"]["initializers"]
            .is_null()
    );

    let seen = tokio::time::timeout(crate::wait::PATIENCE, ordinary.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match seen {
        WatchEvent::Added(p) => assert_eq!(p.name_any(), "waits"),
        other => panic!("ordinary watchers see the initialized pod ADDED, got {other:?}"),
    }
    let next = tokio::time::timeout(crate::wait::PATIENCE, uninit.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(next, WatchEvent::Modified(_)), "{next:?}");
    assert_eq!(plain.get("waits").await.unwrap().name_any(), "waits");
    // Once initialized, the scheduler runs it.
    crate::common::eventually_async("waits running", || {
        let plain = plain.clone();
        async move {
            let p = plain.get("waits").await.ok()?;
            (p.status?.phase.as_deref() == Some("Running")).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn failed_initialization_deletes_the_pod() {
    let sim = legacy_sim(Duration::from_secs(10)).await;
    let admin = raw_client(&sim, ADMIN);
    namespace(&admin, "fail").await;
    let plain: Api<Pod> = Api::namespaced(admin.clone(), "fail");
    let guard: Api<Pod> = Api::namespaced(guard_client(&sim), "fail");
    let creator = {
        let plain = plain.clone();
        tokio::spawn(async move {
            plain
                .create(&PostParams::default(), &pod("doomed", &[], &[]))
                .await
        })
    };
    crate::common::eventually_async("doomed stored", || {
        let sim = sim.clone();
        async move { sim.get_object("pods", Some("fail"), "doomed").map(|_| ()) }
    })
    .await;
    let result = json!({"metadata": {"initializers": {"result": {"status": "Failure", "code": 403, "reason": "Forbidden", "message": "denied by sidecar"}}}});
    guard
        .patch("doomed", &PatchParams::default(), &Patch::Merge(result))
        .await
        .unwrap();
    let e = api_error(
        tokio::time::timeout(crate::wait::PATIENCE, creator)
            .await
            .unwrap()
            .unwrap(),
    );
    assert_eq!((e.code, e.message.as_str()), (403, "denied by sidecar"));
    assert!(sim.get_object("pods", Some("fail"), "doomed").is_none());
}
