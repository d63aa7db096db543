//! CRUD, conflicts, patches, selectors, pagination, subresources, scheduling gates, restart.

use initguard_sim::SimClients as _;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_sim::SimOptions;
use serde_json::json;

use crate::common::{
    ADMIN, api_error, eventually_async, namespace, pod, raw_client, sim, sim_with,
};

#[tokio::test]
async fn crud_generate_name_and_conflicts() {
    let sim = sim().await;
    let client = sim.client(ADMIN);
    namespace(&client, "crud").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "crud");

    let created = pods
        .create(&PostParams::default(), &pod("a", &[("app", "x")], &[]))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("crud"));
    assert_eq!(meta.uid.as_ref().unwrap().len(), 36);
    assert!(meta.creation_timestamp.is_some());
    let rv: u64 = meta.resource_version.as_ref().unwrap().parse().unwrap();
    assert!(rv > 0);
    assert_eq!(
        created.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );

    let again = api_error(
        pods.create(&PostParams::default(), &pod("a", &[], &[]))
            .await,
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(again.message, "pods \"a\" already exists");

    let mut generated = pod("", &[], &[]);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let g = pods
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(
        g.name_any().starts_with("gen-") && g.name_any().len() == 9,
        "{}",
        g.name_any()
    );

    let missing: Api<Pod> = Api::namespaced(client.clone(), "nowhere");
    let e = api_error(
        missing
            .create(&PostParams::default(), &pod("a", &[], &[]))
            .await,
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );

    // Update with the current resourceVersion works; the same body again is stale.
    let mut current = pods.get("a").await.unwrap();
    current.labels_mut().insert("v".into(), "2".into());
    let updated = pods
        .replace("a", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_ne!(updated.resource_version(), current.resource_version());
    current.labels_mut().insert("v".into(), "3".into());
    let stale = api_error(pods.replace("a", &PostParams::default(), &current).await);
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert!(
        stale.message.contains("the object has been modified"),
        "{}",
        stale.message
    );
    // Without a resourceVersion the update is unconditional.
    current.metadata.resource_version = None;
    let forced = pods
        .replace("a", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(forced.labels()["v"], "3");
    // The status of the main resource cannot be changed by an update.
    let mut faked = forced.clone();
    faked.status.as_mut().unwrap().phase = Some("Failed".into());
    let kept = pods
        .replace("a", &PostParams::default(), &faked)
        .await
        .unwrap();
    assert_ne!(kept.status.unwrap().phase.as_deref(), Some("Failed"));

    let deleted = pods.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(deleted.left().unwrap().name_any(), "a");
    let gone = api_error(pods.get("a").await);
    assert_eq!((gone.code, gone.reason.as_str()), (404, "NotFound"));
    assert_eq!(gone.message, "pods \"a\" not found");
    assert!(pods.get_opt("a").await.unwrap().is_none());

    // Every change is in the history, by user.
    let history = sim.object_history();
    let a: Vec<_> = history
        .iter()
        .filter(|c| c.name == "a" && c.resource == "pods")
        .collect();
    assert!(a.len() >= 4);
    assert!(
        a.iter()
            .all(|c| c.user == ADMIN || c.user.starts_with("system:"))
    );
    assert!(a.last().unwrap().after.is_none());
    assert!(sim.counts()[&("create".to_string(), "pods".to_string())] >= 4);
}

#[tokio::test]
async fn patches_json_merge_strategic() {
    let sim = sim().await;
    let client = sim.client(ADMIN);
    namespace(&client, "patch").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "patch");
    let p = pods
        .create(&PostParams::default(), &pod("p", &[("a", "1")], &[]))
        .await
        .unwrap();
    let uid = p.uid().unwrap();
    let pp = PatchParams::default();

    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/uid", "value": "not-the-uid"},
        {"op": "remove", "path": "/metadata/labels/a"},
    ]))
    .unwrap();
    let e = api_error(pods.patch("p", &pp, &Patch::<()>::Json(failing)).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.contains("testing value /metadata/uid failed"),
        "{}",
        e.message
    );
    assert_eq!(
        pods.get("p").await.unwrap().labels()["a"],
        "1",
        "a failed patch changes nothing"
    );

    let passing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "remove", "path": "/metadata/labels/a"},
    ]))
    .unwrap();
    let patched = pods
        .patch("p", &pp, &Patch::<()>::Json(passing))
        .await
        .unwrap();
    assert!(!patched.labels().contains_key("a"));

    // Malformed bodies are 400, whatever the patch type.
    let http = client.clone();
    let req = http::Request::patch("/api/v1/namespaces/patch/pods/p")
        .header("Content-Type", "application/json-patch+json")
        .body(b"{\"op\": \"remove\"".to_vec())
        .unwrap();
    let e = api_error(http.request::<Pod>(req).await);
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    let req = http::Request::patch("/api/v1/namespaces/patch/pods/p")
        .header("Content-Type", "application/apply-patch+yaml")
        .body(b"metadata: {}".to_vec())
        .unwrap();
    assert_eq!(api_error(http.request::<Pod>(req).await).code, 415);

    let merged = pods
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"m": "1"}, "annotations": {"n": "2"}}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.labels()["m"], "1");
    assert_eq!(merged.annotations()["n"], "2");
    let strategic = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(json!({"metadata": {"labels": {"m": null, "s": "3"}}})),
        )
        .await
        .unwrap();
    assert_eq!(strategic.labels().get("m"), None);
    assert_eq!(strategic.labels()["s"], "3");
    // A patch carrying a stale resourceVersion is a conflict.
    let e = api_error(
        pods.patch(
            "p",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}})),
        )
        .await,
    );
    assert_eq!(e.code, 409);
    // A no-op patch does not create a new version.
    let before = pods.get("p").await.unwrap().resource_version();
    let same = pods
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"s": "3"}}})),
        )
        .await
        .unwrap();
    assert_eq!(same.resource_version(), before);
    // The request log keeps patch bodies and content types for inspection.
    let rec = sim
        .requests()
        .into_iter()
        .rfind(|r| r.verb == "patch")
        .unwrap();
    assert_eq!(
        rec.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert!(rec.body.unwrap().contains("\"s\""));
}

#[tokio::test]
async fn label_and_field_selectors() {
    let sim = sim().await;
    let client = sim.client(ADMIN);
    namespace(&client, "sel").await;
    namespace(&client, "other").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "sel");
    for (name, labels, gates) in [
        ("web-1", vec![("app", "web"), ("tier", "front")], vec![]),
        ("web-2", vec![("app", "web")], vec!["g"]),
        ("db-1", vec![("app", "db"), ("tier", "back")], vec!["g"]),
        ("bare", vec![], vec![]),
    ] {
        pods.create(&PostParams::default(), &pod(name, &labels, &gates))
            .await
            .unwrap();
    }
    let others: Api<Pod> = Api::namespaced(client.clone(), "other");
    others
        .create(
            &PostParams::default(),
            &pod("web-9", &[("app", "web")], &[]),
        )
        .await
        .unwrap();

    let names = |lp: ListParams| {
        let pods = pods.clone();
        async move {
            let mut n: Vec<String> = pods
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .map(|p| p.name_any())
                .collect();
            n.sort();
            n
        }
    };
    assert_eq!(
        names(ListParams::default().labels("app=web")).await,
        ["web-1", "web-2"]
    );
    assert_eq!(
        names(ListParams::default().labels("app!=web")).await,
        ["bare", "db-1"]
    );
    assert_eq!(
        names(ListParams::default().labels("app in (web,db),tier")).await,
        ["db-1", "web-1"]
    );
    assert_eq!(
        names(ListParams::default().labels("app notin (web)")).await,
        ["bare", "db-1"]
    );
    assert_eq!(names(ListParams::default().labels("!app")).await, ["bare"]);
    assert_eq!(
        names(ListParams::default().fields("metadata.name=db-1")).await,
        ["db-1"]
    );
    assert_eq!(
        names(
            ListParams::default()
                .fields("metadata.name!=db-1,metadata.namespace=sel")
                .labels("app")
        )
        .await,
        ["web-1", "web-2"]
    );

    // Ungated pods get scheduled; field selectors on node and phase see it.
    eventually_async("two pods running", || {
        let pods = pods.clone();
        async move {
            let running = pods
                .list(&ListParams::default().fields("status.phase=Running"))
                .await
                .unwrap();
            (running.items.len() == 2).then_some(())
        }
    })
    .await;
    assert_eq!(
        names(ListParams::default().fields("spec.nodeName=sim-node-1")).await,
        ["bare", "web-1"]
    );
    assert_eq!(
        names(ListParams::default().fields("spec.nodeName=")).await,
        ["db-1", "web-2"]
    );
    assert_eq!(
        names(ListParams::default().fields("status.phase!=Running")).await,
        ["db-1", "web-2"]
    );

    let all: Api<Pod> = Api::all(client.clone());
    let everywhere = all
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(everywhere.items.len(), 3);

    let e = api_error(
        pods.list(&ListParams::default().fields("spec.unknown=x"))
            .await,
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "field label not supported: spec.unknown")
    );
    let e = api_error(pods.list(&ListParams::default().labels("app in web")).await);
    assert_eq!(e.code, 400);
    assert!(
        e.message.starts_with("unable to parse requirement"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn pagination_sees_every_pod_once() {
    let sim = sim_with(SimOptions {
        schedule_delay: Duration::from_secs(3600),
        ..SimOptions::default()
    })
    .await;
    let client = sim.client(ADMIN);
    namespace(&client, "many").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "many");
    let template = pod("x", &[], &[]);
    let mut tasks = futures::stream::FuturesUnordered::new();
    for i in 0..1200 {
        let pods = pods.clone();
        let mut p = template.clone();
        p.metadata.name = Some(format!("pod-{i:04}"));
        tasks.push(async move { pods.create(&PostParams::default(), &p).await.map(|_| ()) });
        if tasks.len() >= 32 {
            use futures::StreamExt;
            tasks.next().await.unwrap().unwrap();
        }
    }
    use futures::StreamExt;
    while let Some(r) = tasks.next().await {
        r.unwrap();
    }

    let mut seen = std::collections::BTreeSet::new();
    let mut pages = 0;
    let mut lp = ListParams::default().limit(500);
    let mut list_rv = None;
    loop {
        let page = pods.list(&lp).await.unwrap();
        pages += 1;
        if pages == 1 {
            assert_eq!(page.metadata.remaining_item_count, Some(700));
            list_rv = page.metadata.resource_version.clone();
        } else {
            assert_eq!(
                page.metadata.resource_version, list_rv,
                "continuations report the first page's version"
            );
        }
        for p in &page.items {
            assert!(seen.insert(p.name_any()), "{} seen twice", p.name_any());
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = ListParams::default().limit(500).continue_token(&c),
            None => break,
        }
    }
    assert_eq!((pages, seen.len()), (3, 1200));

    let http = client.clone();
    let req = http::Request::get("/api/v1/namespaces/many/pods?limit=5&continue=not-a-token")
        .body(vec![])
        .unwrap();
    assert_eq!(
        api_error(http.request::<serde_json::Value>(req).await).code,
        400
    );
    let req = http::Request::get("/api/v1/pods?resourceVersionMatch=NotOlderThan")
        .body(vec![])
        .unwrap();
    assert_eq!(
        api_error(http.request::<serde_json::Value>(req).await).code,
        400
    );
    // List items carry no kind/apiVersion, as on a real server.
    let req = http::Request::get("/api/v1/namespaces/many/pods?limit=1")
        .body(vec![])
        .unwrap();
    let raw: serde_json::Value = http.request(req).await.unwrap();
    assert_eq!(raw["kind"], "PodList");
    assert!(raw["items"][0].get("kind").is_none());
}

#[tokio::test]
async fn deployments_leases_events_and_status_subresources() {
    let sim = sim().await;
    let client = sim.client(ADMIN);
    namespace(&client, "apps").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "apps");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "owner"},
        "spec": {
            "selector": {"matchLabels": {"app": "owner"}},
            "template": {"metadata": {"labels": {"app": "owner"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }))
    .unwrap();
    let d = deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(1));

    let status = json!({"status": {"availableReplicas": 1, "readyReplicas": 1, "replicas": 1}});
    let s = deployments
        .patch_status("owner", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(s.status.as_ref().unwrap().available_replicas, Some(1));
    assert_eq!(
        s.metadata.generation,
        Some(1),
        "status writes keep the generation"
    );
    // The main resource ignores status and bumps the generation on spec changes.
    let scaled = deployments
        .patch(
            "owner",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"availableReplicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.metadata.generation, Some(2));
    assert_eq!(scaled.status.unwrap().available_replicas, Some(1));
    let e = api_error(deployments.get("missing").await);
    assert_eq!(e.message, "deployments.apps \"missing\" not found");

    let leases: Api<Lease> = Api::namespaced(client.clone(), "apps");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2024-01-01T00:00:00.000000Z"},
    }))
    .unwrap();
    let l = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut renewed = l.clone();
    renewed.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases
        .replace("leader", &PostParams::default(), &renewed)
        .await
        .unwrap();
    assert_eq!(
        api_error(
            leases
                .replace("leader", &PostParams::default(), &renewed)
                .await
        )
        .code,
        409
    );

    // events.k8s.io/v1 and core/v1 events are two views of the same objects.
    let events: Api<Event> = Api::namespaced(client.clone(), "apps");
    let ev: Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"},
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "reportingController": "initguard.io/guard",
        "reportingInstance": "guard-0",
        "action": "Bypass",
        "reason": "InitializerBypassed",
        "type": "Warning",
        "note": "removed a.example.com",
        "regarding": {"kind": "Pod", "namespace": "apps", "name": "p"},
    }))
    .unwrap();
    events.create(&PostParams::default(), &ev).await.unwrap();
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "apps");
    let c = core.get("e1").await.unwrap();
    assert_eq!(c.message.as_deref(), Some("removed a.example.com"));
    assert_eq!(c.involved_object.name.as_deref(), Some("p"));
    assert_eq!(c.reporting_component.as_deref(), Some("initguard.io/guard"));
    let by_reason = core
        .list(&ListParams::default().fields("reason=InitializerBypassed,involvedObject.name=p"))
        .await
        .unwrap();
    assert_eq!(by_reason.items.len(), 1);
    let back = events.get("e1").await.unwrap();
    assert_eq!(back.note.as_deref(), Some("removed a.example.com"));
    assert_eq!(sim.list_objects("events").len(), 1);
}

#[tokio::test]
async fn scheduling_gates_can_only_be_removed() {
    let sim = sim().await;
    let client = sim.client(ADMIN);
    namespace(&client, "gates").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "gates");
    let p = pods
        .create(
            &PostParams::default(),
            &pod("g", &[], &["a.example.com", "b.example.com"]),
        )
        .await
        .unwrap();
    let status = p.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let cond = &status.conditions.unwrap()[0];
    assert_eq!(
        (cond.type_.as_str(), cond.status.as_str()),
        ("PodScheduled", "False")
    );
    assert_eq!(cond.reason.as_deref(), Some("SchedulingGated"));
    assert_eq!(
        cond.message.as_deref(),
        Some("Scheduling is blocked due to non-empty scheduling gates")
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        pods.get("g")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .is_none(),
        "gated pods are not scheduled"
    );

    let pp = PatchParams::default();
    let add = json!({"spec": {"schedulingGates": [{"name": "a.example.com"}, {"name": "b.example.com"}, {"name": "c.example.com"}]}});
    let e = api_error(pods.patch("g", &pp, &Patch::Merge(&add)).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "Pod \"g\" is invalid: spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found new scheduling gate 'c.example.com'"
    );
    let rename: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/schedulingGates/0/name", "value": "z.example.com"},
    ]))
    .unwrap();
    assert_eq!(
        api_error(pods.patch("g", &pp, &Patch::<()>::Json(rename)).await).code,
        422
    );
    let other = json!({"spec": {"hostname": "changed"}});
    assert_eq!(
        api_error(pods.patch("g", &pp, &Patch::Merge(&other)).await).code,
        422
    );

    // Removing one gate leaves the pod gated; removing the last one lets it run.
    let remove_first: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "a.example.com"},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]))
    .unwrap();
    pods.patch("g", &pp, &Patch::<()>::Json(remove_first))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        pods.get("g")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .is_none()
    );
    let removed = sim
        .object_history()
        .into_iter()
        .filter(|c| c.name == "g")
        .flat_map(|c| c.removed_initializers())
        .collect::<Vec<_>>();
    assert_eq!(removed, ["a.example.com"]);
    pods.patch(
        "g",
        &pp,
        &Patch::Strategic(
            json!({"spec": {"schedulingGates": [{"name": "b.example.com", "$patch": "delete"}]}}),
        ),
    )
    .await
    .unwrap();
    let running = eventually_async("g running", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("g").await.unwrap();
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        }
    })
    .await;
    let spec = running.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("sim-node-1"));
    // As a real server stores it: no empty list of gates, no field at all.
    assert_eq!(spec.scheduling_gates, None);
    let conds = running.status.unwrap().conditions.unwrap();
    for t in ["PodScheduled", "Ready"] {
        assert!(
            conds.iter().any(|c| c.type_ == t && c.status == "True"),
            "{t}"
        );
    }
    let schedulers: Vec<String> = sim
        .object_history()
        .into_iter()
        .filter(|c| c.name == "g")
        .map(|c| c.user)
        .collect();
    assert!(schedulers.contains(&"system:kube-scheduler".to_string()));
}

#[tokio::test]
async fn restart_keeps_state_and_port() {
    let sim = sim().await;
    let client = raw_client(&sim, ADMIN);
    namespace(&client, "r").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "r");
    pods.create(&PostParams::default(), &pod("p", &[], &["g"]))
        .await
        .unwrap();
    let addr = sim.addr();
    sim.restart_after(Duration::from_millis(200)).await.unwrap();
    assert_eq!(sim.addr(), addr);
    let p = eventually_async("p readable after the restart", || {
        let pods = pods.clone();
        async move { pods.get("p").await.ok() }
    })
    .await;
    assert_eq!(p.name_any(), "p");
    sim.shutdown().await;
    assert!(
        pods.get("p").await.is_err(),
        "nothing answers after shutdown"
    );
}

#[tokio::test]
async fn dry_run_delete_collection_and_metadata_lists() {
    let sim = sim().await;
    let client = sim.client(ADMIN);
    namespace(&client, "dc").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "dc");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let p = pods.create(&dry, &pod("dry", &[], &["g"])).await.unwrap();
    assert!(
        p.uid().is_some(),
        "a dry run answers the object it would store"
    );
    assert!(sim.get_object("pods", Some("dc"), "dry").is_none());

    for (name, app) in [("a", "x"), ("b", "x"), ("c", "y")] {
        pods.create(&PostParams::default(), &pod(name, &[("app", app)], &["g"]))
            .await
            .unwrap();
    }
    let meta = pods
        .list_metadata(&ListParams::default().labels("app=x"))
        .await
        .unwrap();
    let names: Vec<String> = meta.items.iter().map(|m| m.name_any()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(
        meta.items[0].types.as_ref().unwrap().kind,
        "PartialObjectMetadata"
    );

    let deleted = pods
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=x"),
        )
        .await
        .unwrap();
    let gone: Vec<String> = deleted
        .left()
        .unwrap()
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(gone, ["a", "b"]);
    let left: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(left, ["c"]);
}

/// POST an Eviction of `name` in `ns` with `api_version` and a uid precondition.
async fn evict(
    client: &kube::Client,
    ns: &str,
    name: &str,
    api_version: &str,
    uid: &str,
    dry_run: bool,
) -> Result<serde_json::Value, kube::Error> {
    let body = json!({"apiVersion": api_version, "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
        "deleteOptions": {"preconditions": {"uid": uid}}});
    let query = if dry_run { "?dryRun=All" } else { "" };
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{ns}/pods/{name}/eviction{query}"
    ))
    .header("content-type", "application/json")
    .body(body.to_string().into_bytes())
    .expect("a request");
    client.request::<serde_json::Value>(request).await
}

#[tokio::test]
async fn evictions_honour_the_uid_precondition_dry_run_and_the_servers_version() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let sim = sim().await;
    let client = sim.client(ADMIN);
    namespace(&client, "ev").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ev");
    let mut bound = pod("bound", &[], &[]);
    bound.spec.as_mut().expect("spec").node_name = Some("n1".into());
    let uid = pods
        .create(&PostParams::default(), &bound)
        .await
        .unwrap()
        .uid()
        .unwrap();
    // Discovery names the version the server takes.
    let core = client.list_core_api_resources("v1").await.unwrap();
    let entry = core
        .resources
        .iter()
        .find(|r| r.name == "pods/eviction")
        .expect("pods/eviction listed");
    assert_eq!(
        (entry.group.as_deref(), entry.version.as_deref()),
        (Some("policy"), Some("v1"))
    );
    assert_eq!(entry.verbs, ["create"]);
    // A namesake's uid: refused with 409, nothing deleted.
    let e = api_error(evict(&client, "ev", "bound", "policy/v1", "other", false).await);
    assert_eq!(e.code, 409, "{e:?}");
    assert!(e.message.contains("Precondition failed: UID"), "{e:?}");
    // A dry run deletes nothing.
    evict(&client, "ev", "bound", "policy/v1", &uid, true)
        .await
        .unwrap();
    assert!(sim.get_object("pods", Some("ev"), "bound").is_some());
    // Not an Eviction, or another pod's name: 400.
    let e = api_error(evict(&client, "ev", "bound", "policy/v2", &uid, false).await);
    assert_eq!(e.code, 400, "{e:?}");
    let events = watcher::watcher(pods.clone(), watcher::Config::default());
    let mut events = std::pin::pin!(events);
    while !matches!(events.next().await, Some(Ok(watcher::Event::InitDone))) {}
    let done = evict(&client, "ev", "bound", "policy/v1", &uid, false)
        .await
        .unwrap();
    assert_eq!(done["status"], "Success");
    // A bound pod is marked for deletion, then removed (the kubelet's confirmation).
    match events.next().await {
        Some(Ok(watcher::Event::Apply(p))) => {
            assert!(p.metadata.deletion_timestamp.is_some(), "{p:?}");
        }
        other => panic!("expected the pod marked for deletion, got {other:?}"),
    }
    assert!(matches!(
        events.next().await,
        Some(Ok(watcher::Event::Delete(_)))
    ));
    let e = api_error(evict(&client, "ev", "bound", "policy/v1", &uid, false).await);
    assert_eq!(e.code, 404, "{e:?}");
    let record = sim
        .requests()
        .into_iter()
        .filter(|r| r.resource == "pods/eviction")
        .map(|r| r.verb)
        .collect::<Vec<_>>();
    assert!(
        record.iter().all(|v| v == "create") && record.len() == 5,
        "{record:?}"
    );

    // Before 1.22: policy/v1beta1 only; the 1.8 profile's discovery names no group.
    for (version, named) in [
        (kube_sim::KubeVersion::V1_13, true),
        (kube_sim::KubeVersion::V1_8, false),
    ] {
        let old = sim_with(SimOptions {
            kube_version: Some(version),
            mechanism: kube_common::Mechanism::Initializers,
            ..SimOptions::default()
        })
        .await;
        let client = old.client(ADMIN);
        let core = client.list_core_api_resources("v1").await.unwrap();
        let entry = core
            .resources
            .iter()
            .find(|r| r.name == "pods/eviction")
            .expect("pods/eviction listed");
        let expected = named.then_some("v1beta1");
        assert_eq!(entry.version.as_deref(), expected, "{version:?}");
        namespace(&client, "ev").await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "ev");
        let uid = pods
            .create(&PostParams::default(), &pod("p", &[], &[]))
            .await
            .unwrap()
            .uid()
            .unwrap();
        let e = api_error(evict(&client, "ev", "p", "policy/v1", &uid, false).await);
        assert_eq!(e.code, 400, "{version:?}: {e:?}");
        evict(&client, "ev", "p", "policy/v1beta1", &uid, false)
            .await
            .unwrap();
        assert!(old.get_object("pods", Some("ev"), "p").is_none());
    }
}
