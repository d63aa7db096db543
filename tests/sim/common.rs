//! Helpers shared by the simulator tests.

use initguard_sim::SimClients as _;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use kube_sim::{Sim, SimOptions};

/// The identity most tests act as.
pub(crate) const ADMIN: &str = "system:admin";

/// A server with fast scheduling.
pub(crate) async fn sim() -> Sim {
    sim_with(SimOptions::default()).await
}

/// A server with these options (schedule delay 20 ms unless set otherwise).
pub(crate) async fn sim_with(options: SimOptions) -> Sim {
    Sim::start(options).await.expect("simulator starts")
}

/// A client that does not retry 429/503/504, so tests see the server's answers raw.
pub(crate) fn raw_client(sim: &Sim, user: &str) -> Client {
    let mut config = sim.kube_config(user);
    config.default_retry = false;
    Client::try_from(config).expect("client")
}

/// A pod with one container, these labels and scheduling gates.
pub(crate) fn pod(name: &str, labels: &[(&str, &str)], gates: &[&str]) -> Pod {
    initguard_test_support::pod::gated(name, labels, gates)
}

/// Create a namespace.
pub(crate) async fn namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

/// The API error of a failed call.
pub(crate) fn api_error<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub(crate) use crate::wait::eventually_async;
