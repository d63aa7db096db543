//! End to end: the guard runs in process against the simulated API server over real HTTP, with
//! simulated owners and pod creators, and the simulator enforcing the shipped RBAC
//! (`deploy/rbac.yaml`) for the guard's user. Assertions read the server's request log and
//! object history, never log text.

#[path = "e2e/harness.rs"]
mod harness;
use initguard_test_support::wait;

#[path = "e2e/bypass.rs"]
mod bypass;
#[path = "e2e/endpoints.rs"]
mod endpoints;
#[path = "e2e/lifecycle.rs"]
mod lifecycle;
#[path = "e2e/node_stage.rs"]
mod node_stage;
#[path = "e2e/pileup.rs"]
mod pileup;
#[path = "e2e/replicas.rs"]
mod replicas;
#[path = "e2e/safety.rs"]
mod safety;
#[path = "e2e/tls.rs"]
mod tls;
#[path = "e2e/trust.rs"]
mod trust;
#[path = "e2e/unknown_owners.rs"]
mod unknown_owners;
#[path = "e2e/versions.rs"]
mod versions;
#[path = "e2e/waiting.rs"]
mod waiting;
#[path = "e2e/webhooks.rs"]
mod webhooks;
#[path = "e2e/why.rs"]
mod why;
#[path = "e2e/writes.rs"]
mod writes;
