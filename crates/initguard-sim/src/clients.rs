//! kube-rs clients of the simulated server: kube-sim speaks HTTP only, this is where kube meets
//! it.

use std::future::Future;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use kube_common::Mechanism;
use kube_sim::Sim;

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

/// kube-rs access to a [`Sim`].
pub trait SimClients {
    /// A kube-rs configuration reaching this server as `user` (kube's defaults otherwise,
    /// including its retry of 429/503/504 — set `default_retry = false` to see those raw).
    fn kube_config(&self, user: &str) -> kube::Config;

    /// A plain kube-rs client for `user` (without the `includeUninitialized` layer; use
    /// [`client_for`]`(sim.kube_config(user), mechanism)` where legacy visibility matters).
    /// Call it inside a Tokio runtime, as kube clients spawn a task.
    fn client(&self, user: &str) -> kube::Client;

    /// Create namespace `name` through the API, as `user`; one that exists already is fine.
    fn ensure_namespace(
        &self,
        user: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

impl SimClients for Sim {
    fn kube_config(&self, user: &str) -> kube::Config {
        let uri = http::Uri::builder()
            .scheme("http")
            .authority(self.addr().to_string())
            .path_and_query("/")
            .build()
            .expect("a socket address is always a valid URI authority");
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".to_string();
        config.auth_info.token = Some(format!("user:{user}").into());
        config
    }

    fn client(&self, user: &str) -> kube::Client {
        let config = self.kube_config(user);
        match kube::Client::try_from(config.clone()) {
            Ok(c) => c,
            Err(e) => {
                // Only the TLS stack can fail here, and plain HTTP does not need it.
                tracing::warn!(error = %e, "kube client builder failed; using a bare HTTP client");
                plain_client(&config, user)
            }
        }
    }

    fn ensure_namespace(
        &self,
        user: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send {
        let api: Api<Namespace> = Api::all(self.client(user));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        async move {
            match api.create(&PostParams::default(), &ns).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
    }
}

/// A kube client over bare HTTP with a static bearer token (no TLS stack needed).
fn plain_client(config: &kube::Config, user: &str) -> kube::Client {
    use hyper_util::client::legacy::Client as HyperClient;
    use hyper_util::rt::TokioExecutor;
    use kube::client::ConfigExt;
    use tower::ServiceBuilder;

    let token = http::HeaderValue::from_str(&format!("Bearer user:{user}")).ok();
    let http = HyperClient::builder(TokioExecutor::new()).build_http::<kube::client::Body>();
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .map_request(move |mut req: http::Request<kube::client::Body>| {
            if let Some(t) = &token {
                req.headers_mut()
                    .insert(http::header::AUTHORIZATION, t.clone());
            }
            req
        })
        .service(http);
    kube::Client::new(service, config.default_namespace.clone())
}
