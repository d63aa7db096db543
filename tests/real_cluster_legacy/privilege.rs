//! deploy/rbac-legacy-initializers.yaml's `initialize` grant is exactly what lets the guard
//! initialize a pod on 1.13: without it the real Initializers admission plugin refuses the
//! bypass (403), which the guard counts and tries again only after a pause, never at once;
//! with it back, the same pod is initialized by the guard's next attempt.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::legacy::*;
use crate::testbed::*;

const NS: &str = "legacy-privilege";
const INIT: &str = "deadline.example.com";
const BINDING: &str = "initguard-legacy-initializers";

/// The guard's requests this scenario makes the server refuse: its bypass patches while the
/// `initialize` grant is withdrawn.
pub(crate) fn refused_on_purpose(request: &initguard_test_support::rbac::Request) -> bool {
    request.namespace == NS && request.resource == "pods" && request.verb == "patch"
}

pub(crate) async fn the_initialize_grant_is_what_lets_the_guard_initialize(tb: Arc<Testbed>) {
    tb.namespace(NS);
    let config_object = InitializerConfiguration::create(&tb, "legacy-privilege", &[INIT]).await;
    tb.kubectl(&["delete", "clusterrolebinding", BINDING]);
    let guard = tb
        .guard(
            "legacy-privilege",
            "initguard",
            &config(&format!(
                "leaderElection: {{ enabled: false }}\n\
                 initializers:\n  - {{ name: {INIT}, deadline: 1s }}\n"
            )),
        )
        .await;
    create_uninitialized_pod(&tb, NS, "p", json!({ OPT_IN: "true", "app": "privilege" })).await;

    let refused = eventually(
        "the guard's bypass refused for want of `initialize`",
        || {
            tb.pod_writes_by(GUARD_USER, NS)
                .into_iter()
                .find(|a| a.name == "p" && a.verb == "patch" && a.code == 403)
        },
    )
    .await;
    let writes = tb.pod_writes_by(GUARD_USER, NS);
    assert!(
        writes.iter().all(|a| a.code == 403),
        "no write lands without the grant: {writes:#?}"
    );
    let pod = pods(&tb, NS, "app=privilege").await;
    assert_eq!(pending_names(&pod[0]), [INIT], "still uninitialized");

    let rbac = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/rbac-legacy-initializers.yaml");
    tb.kubectl(&["apply", "-f", &rbac.to_string_lossy()]);
    let mut initialized = false;
    for _ in 0..450 {
        if plain_pod_names(&tb, NS, "app=privilege").await == ["p"] {
            initialized = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        initialized,
        "the guard initialized p once granted `initialize`"
    );
    let writes = tb.pod_writes_by(GUARD_USER, NS);
    let landed: Vec<&Audit> = writes.iter().filter(|a| a.ok()).collect();
    assert_eq!(landed.len(), 1, "one patch landed: {writes:#?}");
    // Refused is not retried at once: the next attempt waits for the pause (15 s), on the
    // server's clock.
    let retries: Vec<&Audit> = writes
        .iter()
        .filter(|a| a.received > refused.received)
        .collect();
    let next = retries
        .first()
        .unwrap_or_else(|| panic!("no retry: {writes:#?}"));
    assert!(
        timestamp(&next.received) >= timestamp(&refused.received) + Duration::from_secs(15),
        "a refused bypass was retried before the pause: {writes:#?}"
    );

    guard.stop();
    drop(config_object);
    tb.kubectl(&["delete", "namespace", NS, "--wait=false"]);
}
