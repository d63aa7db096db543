//! Injected faults: server errors, throttling, latency, exempt users.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use crate::common::{ADMIN, api_error, raw_client, sim};

#[tokio::test]
async fn error_rate_latency_and_exemptions() {
    let sim = sim().await;
    let guard: Api<Pod> = Api::namespaced(raw_client(&sim, "system:initguard"), "default");
    let controller: Api<Pod> = Api::namespaced(raw_client(&sim, "sim:controller"), "default");
    sim.faults().exempt_users(&["sim:controller"]);

    sim.faults().set_error_rate(1.0, &[500, 503]);
    for _ in 0..10 {
        let e = api_error(guard.list(&ListParams::default()).await);
        assert!(matches!(e.code, 500 | 503), "{e:?}");
        assert_eq!(e.status, Some(kube::core::response::StatusSummary::Failure));
        controller
            .list(&ListParams::default())
            .await
            .expect("exempt users see no faults");
    }
    let answered: Vec<u16> = sim
        .requests()
        .iter()
        .filter(|r| r.user == "system:initguard")
        .map(|r| r.status)
        .collect();
    assert_eq!(answered.len(), 10);
    assert!(answered.iter().all(|s| *s >= 500));

    // 429 carries Retry-After, which kube's default retry policy honours.
    sim.faults().set_error_rate(1.0, &[429]);
    let e = api_error(guard.list(&ListParams::default()).await);
    assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));

    // A partial rate lets some requests through.
    sim.faults().set_error_rate(0.5, &[500]);
    let mut ok = 0;
    for _ in 0..60 {
        ok += usize::from(guard.list(&ListParams::default()).await.is_ok());
    }
    assert!(
        (5..=55).contains(&ok),
        "{ok} of 60 succeeded at a 50% error rate"
    );

    sim.faults().set_error_rate(0.0, &[]);
    sim.faults().set_latency(Duration::from_millis(200));
    let t = tokio::time::Instant::now();
    guard.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(200));
    // Order, not speed: with a latency no test waits out, the exempt user's request completes
    // while the delayed one is still pending.
    sim.faults().set_latency(Duration::from_secs(3600));
    let delayed = tokio::spawn({
        let guard = guard.clone();
        async move { guard.list(&ListParams::default()).await }
    });
    tokio::time::timeout(
        Duration::from_secs(60),
        controller.list(&ListParams::default()),
    )
    .await
    .expect("the exempt user's list did not complete within 60 s")
    .unwrap();
    assert!(
        !delayed.is_finished(),
        "the delayed request finished before the exempt one"
    );
    delayed.abort();
    sim.faults().clear();
    let _ = ADMIN;
}
