//! Clients of the simulated server that see what legacy initializer controllers saw.

use kube_common::Mechanism;

/// A kube-rs client for `config` that, for legacy initializers, sends
/// `includeUninitialized=true` on pod reads, as real initializer controllers did.
pub fn client_for(config: kube::Config, mechanism: Mechanism) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(match mechanism {
        Mechanism::SchedulingGates => builder.build(),
        Mechanism::Initializers => builder
            .with_layer(&tower::util::MapRequestLayer::new(
                kube_common::include_uninitialized::<kube::client::Body>,
            ))
            .build(),
    })
}
