//! Watches: ordering, selectors, bookmarks, 410 Gone, and kube-rs watchers surviving
//! dropped watches, forced 410s and server restarts.

use initguard_sim::SimClients as _;
use std::collections::BTreeSet;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use kube_sim::SimOptions;
use serde_json::json;

use crate::common::{ADMIN, eventually_async, namespace, pod, sim, sim_with};

async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Pod>>> + Unpin),
) -> WatchEvent<Pod> {
    tokio::time::timeout(crate::wait::PATIENCE, stream.next())
        .await
        .expect("an event within the patience")
        .expect("stream open")
        .expect("event decodes")
}

/// The next event that is not a bookmark.
async fn next_change(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Pod>>> + Unpin),
) -> (String, String, u64) {
    loop {
        let (kind, p) = match next_event(stream).await {
            WatchEvent::Added(p) => ("ADDED", p),
            WatchEvent::Modified(p) => ("MODIFIED", p),
            WatchEvent::Deleted(p) => ("DELETED", p),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        let rv = p.resource_version().unwrap().parse().unwrap();
        return (kind.to_string(), p.name_any(), rv);
    }
}

#[tokio::test]
async fn watch_order_selectors_and_resume() {
    let sim = sim_with(SimOptions {
        schedule_delay: Duration::from_secs(3600),
        ..SimOptions::default()
    })
    .await;
    let client = sim.client(ADMIN);
    namespace(&client, "w").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "w");
    let a = pods
        .create(&PostParams::default(), &pod("a", &[("app", "w")], &[]))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("other", &[("app", "x")], &[]))
        .await
        .unwrap();

    let wp = WatchParams::default().labels("app=w").disable_bookmarks();
    let mut stream = pods.watch(&wp, "0").await.unwrap().boxed();
    assert_eq!(
        next_change(&mut stream).await.0,
        "ADDED",
        "current state first"
    );

    let pp = PatchParams::default();
    pods.create(&PostParams::default(), &pod("b", &[("app", "w")], &[]))
        .await
        .unwrap();
    pods.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();
    pods.patch(
        "other",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();
    pods.patch(
        "b",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .unwrap();
    pods.patch(
        "other",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "w"}}})),
    )
    .await
    .unwrap();
    pods.delete("a", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(next_change(&mut stream).await);
    }
    let kinds: Vec<(&str, &str)> = seen
        .iter()
        .map(|(k, n, _)| (k.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("ADDED", "b"),
            ("MODIFIED", "a"),
            ("DELETED", "b"),
            ("ADDED", "other"),
            ("DELETED", "a")
        ],
        "objects leaving the selection are DELETED, entering it ADDED"
    );
    assert!(
        seen.windows(2).all(|w| w[0].2 < w[1].2),
        "resourceVersions increase: {seen:?}"
    );

    // Resuming from a's creation replays what followed, in the same order.
    let from = a.resource_version().unwrap();
    let mut resumed = pods.watch(&wp, &from).await.unwrap().boxed();
    for expected in &seen {
        assert_eq!(&next_change(&mut resumed).await, expected);
    }
}

#[tokio::test]
async fn bookmarks_and_timeout() {
    let sim = sim().await;
    let client = sim.client(ADMIN);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let start = sim.resource_version();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(2), &start.to_string())
        .await
        .unwrap()
        .boxed();
    // The bookmark is the first event, before the timeout ends the stream.
    match next_event(&mut stream).await {
        WatchEvent::Bookmark(b) => {
            assert!(b.metadata.resource_version.parse::<u64>().unwrap() >= start);
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // timeoutSeconds=2 ends the stream.
    let end = tokio::time::timeout(crate::wait::PATIENCE, async {
        while let Some(e) = stream.next().await {
            e.unwrap();
        }
    })
    .await;
    assert!(end.is_ok(), "the watch ended after timeoutSeconds");
}

#[tokio::test]
async fn compacted_version_is_gone() {
    let sim = sim_with(SimOptions {
        history_window: 5,
        ..SimOptions::default()
    })
    .await;
    let client = sim.client(ADMIN);
    namespace(&client, "old").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "old");
    for i in 0..10 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}"), &[], &["g"]))
            .await
            .unwrap();
    }
    let mut stream = pods
        .watch(&WatchParams::default(), "2")
        .await
        .unwrap()
        .boxed();
    match next_event(&mut stream).await {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version: 2"),
                "{}",
                e.message
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(
        stream.next().await.is_none(),
        "the stream ends after the error"
    );
}

#[tokio::test]
async fn watcher_recovers_from_gone_drops_and_restarts() {
    let sim = sim_with(SimOptions {
        schedule_delay: Duration::from_secs(3600),
        ..SimOptions::default()
    })
    .await;
    let admin = sim.client(ADMIN);
    namespace(&admin, "rec").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "rec");
    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}"), &[], &["g"]))
            .await
            .unwrap();
    }
    let guard = sim.client("system:initguard");
    let watched: Api<Pod> = Api::namespaced(guard, "rec");
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(watched, watcher::Config::default()).default_backoff(),
    )
    .applied_objects();
    let driver = tokio::spawn(async move {
        let mut s = stream.boxed();
        while let Some(r) = s.next().await {
            let _ = r;
        }
    });
    let names = |want: &[&str]| {
        let reader = reader.clone();
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        async move {
            eventually_async(format!("the reflector to hold {want:?}"), || {
                let reader = reader.clone();
                let want = want.clone();
                async move {
                    let have: BTreeSet<String> =
                        reader.state().iter().map(|p| p.name_any()).collect();
                    (have == want).then_some(())
                }
            })
            .await
        }
    };
    names(&["p0", "p1", "p2"]).await;
    let count = |verb: &str| {
        sim.counts()
            .get(&(verb.to_string(), "pods".to_string()))
            .copied()
            .unwrap_or(0)
    };

    // A 410 on the next watch: the watcher relists.
    let lists = count("list");
    sim.faults().force_gone_next_watch();
    sim.faults().drop_watches();
    pods.create(&PostParams::default(), &pod("p3", &[], &["g"]))
        .await
        .unwrap();
    names(&["p0", "p1", "p2", "p3"]).await;
    assert!(count("list") > lists, "the watcher relisted after 410");
    // The request log tells that watch (answered 200, one ERROR event) from the others.
    let watches: Vec<Option<u16>> = sim
        .requests()
        .into_iter()
        .filter(|r| r.verb == "watch" && r.resource == "pods")
        .map(|r| r.watch_error)
        .collect();
    assert_eq!(
        watches.iter().filter(|e| e.is_some()).collect::<Vec<_>>(),
        [&Some(410)],
        "exactly the forced watch is marked 410 in {watches:?}"
    );

    // A dropped watch: the watcher watches again from where it was.
    let watches = count("watch");
    sim.faults().drop_watches();
    pods.create(&PostParams::default(), &pod("p4", &[], &["g"]))
        .await
        .unwrap();
    names(&["p0", "p1", "p2", "p3", "p4"]).await;
    assert!(count("watch") > watches);

    // A restart cuts every connection; state is kept and the watcher reconnects.
    sim.restart().await.unwrap();
    pods.delete("p0", &DeleteParams::default()).await.unwrap();
    pods.create(&PostParams::default(), &pod("p5", &[], &["g"]))
        .await
        .unwrap();
    names(&["p1", "p2", "p3", "p4", "p5"]).await;
    driver.abort();
}

#[tokio::test]
async fn streaming_list_and_many_watchers() {
    let sim = sim().await;
    let client = sim.client(ADMIN);
    namespace(&client, "many").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "many");
    pods.create(&PostParams::default(), &pod("first", &[], &["g"]))
        .await
        .unwrap();

    // kube-rs streaming lists (sendInitialEvents) end the initial state with a bookmark.
    let events = watcher(pods.clone(), watcher::Config::default().streaming_lists())
        .take(3)
        .try_collect::<Vec<_>>();
    let events = tokio::time::timeout(crate::wait::PATIENCE, events)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(events[0], watcher::Event::Init));
    assert!(matches!(&events[1], watcher::Event::InitApply(p) if p.name_any() == "first"));
    assert!(matches!(events[2], watcher::Event::InitDone));

    let rv = sim.resource_version().to_string();
    let mut streams = Vec::new();
    for _ in 0..200 {
        streams.push(
            pods.watch(&WatchParams::default().disable_bookmarks(), &rv)
                .await
                .unwrap()
                .boxed(),
        );
    }
    pods.create(&PostParams::default(), &pod("second", &[], &["g"]))
        .await
        .unwrap();
    for s in &mut streams {
        let (kind, name, _) = next_change(s).await;
        assert_eq!((kind.as_str(), name.as_str()), ("ADDED", "second"));
    }
}
