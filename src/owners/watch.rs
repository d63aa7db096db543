//! The watchers and probers behind [`Owners`](super::Owners): one task per distinct owner, a
//! kube-rs watcher for deployments, leases and pods, a GET loop for http owners. Each feeds
//! what it observes to its owner's `Handle`.

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::future::pending;
use std::path::PathBuf;
use std::pin::pin;
use std::time::{Duration, Instant};

use crate::discovery::Discovery;
use bytes::Bytes;
use futures::StreamExt;
use http::{Request, StatusCode, Uri, header};
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::client::ConfigExt as _;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Resource};
use kube_common::{ApiSurface, deployment_group_versions, lease_group_versions};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{CANARY_LABEL, Canary, CanaryResource, Config, ObjectRef, OwnerSpec};
use crate::supervise::{self, Failures};

use super::model::owner_target;
use super::model::{
    CoreEndpointsModel, EndpointsModel, Model, Observed, PodsModel, ServedDeploymentModel,
    ServedLeaseModel, ServicePresence, fold, judge, observation, webhook_service,
};
use super::state::Handle;

/// An http owner is down unless it answers 2xx within this time (connect included).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Floor for `probeInterval`, so a zero or tiny value cannot turn the prober into a busy loop.
const MIN_PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Start the watcher or prober of `spec` as a supervised task.
pub(super) fn start(task: Task, client: &kube::Client, spec: &OwnerSpec, failures: &Failures) {
    match spec {
        OwnerSpec::Deployment(r) => {
            supervise::spawn(
                failures,
                "owner watch",
                task.watch_deployment(client.clone(), r.clone()),
            );
        }
        OwnerSpec::Lease(r) => {
            supervise::spawn(
                failures,
                "owner watch",
                task.watch_lease(client.clone(), r.clone()),
            );
        }
        OwnerSpec::Service(r) => {
            supervise::spawn(
                failures,
                "owner watch",
                task.watch_service(client.clone(), r.clone()),
            );
        }
        OwnerSpec::WebhookService(r) => {
            supervise::spawn(
                failures,
                "owner watch",
                task.watch_webhook_service(client.clone(), r.clone()),
            );
        }
        OwnerSpec::Pods {
            namespace,
            selector,
        } => {
            supervise::spawn(
                failures,
                "owner watch",
                task.watch::<Pod, PodsModel>(
                    Api::namespaced(client.clone(), namespace),
                    watcher::Config::default().labels(selector),
                    "pods",
                ),
            );
        }
        OwnerSpec::Apiserver(canary) => {
            supervise::spawn(
                failures,
                "owner probe",
                task.canary(client.clone(), canary.clone()),
            );
        }
        OwnerSpec::Http {
            url,
            ca_file,
            cert_file,
            key_file,
        } => {
            let tls = ProbeTls {
                ca_file: ca_file.clone(),
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            };
            supervise::spawn(failures, "owner probe", task.probe(url.clone(), tls));
        }
    }
}

/// For `initguard check-config --kubeconfig`: one line per listed owner that does not exist
/// (a Deployment or Lease not found, a pods selector matching no pod) or that could not be
/// checked (e.g. forbidden), config order, each owner once. http owners are not checked: the
/// guard probes them from where it runs, which the machine running check-config may not reach.
pub async fn missing_owners(discovery: &Discovery, config: &Config) -> Vec<String> {
    let client = discovery.client();
    let mut seen = std::collections::HashSet::new();
    let mut lines = Vec::new();
    let users = config
        .initializers
        .iter()
        .filter_map(|i| Some((i.name.clone(), i.owner.as_ref()?)))
        .chain(
            config
                .webhooks
                .iter()
                .filter_map(|w| Some((w.id.to_string(), w.owner.as_ref()?))),
        );
    // Discovery only when a Deployment, Lease or Service owner needs it (shared with the other
    // checks of check-config, so `/apis` is read once).
    let mut surface: Option<&ApiSurface> = None;
    for (used_by, spec) in users {
        if !seen.insert(spec) {
            continue;
        }
        let what = format!("{} {}", spec.kind(), owner_target(spec));
        if matches!(
            spec,
            OwnerSpec::Deployment(_) | OwnerSpec::Lease(_) | OwnerSpec::Service(_)
        ) && surface.is_none()
        {
            match discovery.surface().await {
                Ok(read) => surface = Some(read),
                Err(e) => {
                    lines.push(format!(
                        "owner {what} (of {used_by}) could not be checked: {}",
                        error_chain(&e)
                    ));
                    continue;
                }
            }
        }
        let found = match spec {
            // In whichever group version the server serves, as the guard will watch it (the
            // surface was read above for these kinds).
            OwnerSpec::Deployment(r) | OwnerSpec::Lease(r) => {
                let (pick, api, versions): (fn(&ApiSurface) -> Option<ApiResource>, _, _) =
                    match spec {
                        OwnerSpec::Deployment(_) => (
                            ApiSurface::deployments,
                            "Deployment",
                            deployment_group_versions(),
                        ),
                        _ => (ApiSurface::leases, "Lease", lease_group_versions()),
                    };
                match surface.and_then(pick) {
                    Some(resource) => Api::<DynamicObject>::namespaced_with(
                        client.clone(),
                        &r.namespace,
                        &resource,
                    )
                    .get_metadata_opt(&r.name)
                    .await
                    .map(|o| o.is_some()),
                    None => {
                        lines.push(format!(
                            "owner {what} (of {used_by}) cannot be watched: the API server serves \
                             no {api} API ({versions})"
                        ));
                        continue;
                    }
                }
            }
            OwnerSpec::WebhookService(r) => named_api::<Service>(client, r)
                .get_metadata_opt(&r.name)
                .await
                .map(|s| s.is_some()),
            // Where the guard will read the endpoints: EndpointSlices, or core/v1 Endpoints
            // before 1.21.
            OwnerSpec::Service(r) => match surface.map(ApiSurface::service_endpoints) {
                Some(resource) if resource.kind == "EndpointSlice" => {
                    named_api::<EndpointSlice>(client, r)
                        .list_metadata(&kube::api::ListParams {
                            label_selector: Some(format!("{SERVICE_NAME_LABEL}={}", r.name)),
                            limit: Some(1),
                            ..Default::default()
                        })
                        .await
                        .map(|slices| !slices.items.is_empty())
                }
                // A list by name: the rule deploy/README.md gives is list and watch.
                _ => named_api::<Endpoints>(client, r)
                    .list_metadata(&kube::api::ListParams {
                        field_selector: Some(format!("metadata.name={}", r.name)),
                        limit: Some(1),
                        ..Default::default()
                    })
                    .await
                    .map(|endpoints| !endpoints.items.is_empty()),
            },
            OwnerSpec::Pods {
                namespace,
                selector,
            } => Api::<Pod>::namespaced(client.clone(), namespace)
                .list_metadata(&kube::api::ListParams::default().labels(selector).limit(1))
                .await
                .map(|pods| !pods.items.is_empty()),
            // Probed by the guard itself: a dry run here would say nothing about its path.
            OwnerSpec::Http { .. } | OwnerSpec::Apiserver(_) => continue,
        };
        match found {
            Ok(true) => {}
            Ok(false) if matches!(spec, OwnerSpec::Pods { .. }) => lines.push(format!(
                "owner {what} (of {used_by}): no pod matches the selector; the owner stays \
                 unknown until one appears"
            )),
            Ok(false) => lines.push(format!(
                "owner {what} (of {used_by}) does not exist; it stays unknown (never \
                 owner_down) until it appears: check the name"
            )),
            Err(e) => lines.push(format!(
                "owner {what} (of {used_by}) could not be checked: {}",
                error_chain(&e)
            )),
        }
    }
    lines
}

fn named_api<K>(client: &kube::Client, r: &ObjectRef) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    Api::namespaced(client.clone(), &r.namespace)
}

/// Label that ties an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The EndpointSlices of one Service.
fn service_slices(r: &ObjectRef) -> watcher::Config {
    watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={}", r.name))
}

/// Watch exactly one object by name.
fn name_selector(r: &ObjectRef) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={}", r.name))
}

/// TLS settings of an https owner (`caFile`, `certFile`, `keyFile`).
pub(super) struct ProbeTls {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

impl ProbeTls {
    /// kube's rustls setup: verification against `caFile` (re-read about once a minute, for CA
    /// rotation) when given, else the platform's roots; the client certificate when given.
    /// `accept_invalid_certs` stays false: no certificate is ever accepted unchecked.
    fn kube_config(&self, uri: &Uri) -> Result<kube::Config, ProbeError> {
        let mut config = kube::Config::new(uri.clone());
        if let Some(ca) = &self.ca_file {
            let pem = std::fs::read(ca).map_err(|source| ProbeError::ReadCa {
                path: ca.clone(),
                source,
            })?;
            let mut roots = Vec::new();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|source| ProbeError::Pem {
                    path: ca.clone(),
                    source,
                })?;
                roots.push(cert.to_vec());
            }
            if roots.is_empty() {
                return Err(ProbeError::NoCa(ca.clone()));
            }
            config.root_cert = Some(roots);
            config.root_cert_file = Some(ca.clone());
        }
        config.auth_info.client_certificate =
            self.cert_file.as_ref().map(|p| p.display().to_string());
        config.auth_info.client_key = self.key_file.as_ref().map(|p| p.display().to_string());
        config.accept_invalid_certs = false;
        Ok(config)
    }
}

/// One owner's watcher or prober.
pub(super) struct Task {
    pub(super) handle: Handle,
    pub(super) discovery: Discovery,
    pub(super) cancel: CancellationToken,
}

impl Task {
    /// Wait for the guard's discovery (retrying while the API server cannot answer) and return the most
    /// preferred group version of the owner's kind that is served (`pick`). Without any, log an
    /// error, list the problem for `/readyz` and return None: the owner stays unobserved.
    async fn served(
        &self,
        pick: fn(&ApiSurface) -> Option<ApiResource>,
        (api, versions): (&str, &str),
        resource: &str,
    ) -> Option<ApiResource> {
        let owner = self.handle.owner();
        let kind = owner.spec.kind();
        let surface = self
            .discovery
            .surface_until(&self.cancel, |e| {
                // The watch cannot start without it: counted like a failed watch.
                self.handle.inner.metrics.watch_restarted(resource);
                warn!(owner = %owner.target, owner_kind = kind, error = %error_chain(e),
                    "cannot read API discovery for the owner; retrying");
            })
            .await?;
        let Some(resource) = pick(surface) else {
            let problem = format!(
                "the API server serves no {api} API ({versions}), so this owner cannot be watched"
            );
            error!(initializers = %owner.initializer_list, owner = %owner.target, %problem,
                "owner cannot be watched");
            self.handle
                .inner
                .readiness
                .set(&format!("owner {kind} {}", owner.target), Some(problem));
            return None;
        };
        info!(owner = %owner.target, owner_kind = kind, api_version = %resource.api_version,
            "watching owner");
        Some(resource)
    }

    /// Watch the Deployment `r` in the most preferred group version served.
    async fn watch_deployment(self, client: kube::Client, r: ObjectRef) {
        let versions = deployment_group_versions();
        let Some(resource) = self
            .served(
                ApiSurface::deployments,
                ("Deployment", &versions),
                "deployments",
            )
            .await
        else {
            return;
        };
        let api = Api::namespaced_with(client, &r.namespace, &resource);
        self.watch::<DynamicObject, ServedDeploymentModel>(api, name_selector(&r), "deployments")
            .await
    }

    /// Where a Service's endpoints are read ([`ApiSurface::service_endpoints`]), once the
    /// guard's discovery is read; None when cancelled first.
    async fn service_endpoints(&self) -> Option<ApiResource> {
        self.served(
            |surface| Some(surface.service_endpoints()),
            ("EndpointSlice", "discovery.k8s.io/v1"),
            "endpointslices",
        )
        .await
    }

    /// Watch the endpoints of Service `r`: its EndpointSlices (discovery.k8s.io/v1, 1.21+), or
    /// on an older server its core/v1 Endpoints, the one object named after the Service.
    async fn watch_service(self, client: kube::Client, r: ObjectRef) {
        let Some(resource) = self.service_endpoints().await else {
            return;
        };
        if resource.kind == "EndpointSlice" {
            self.watch::<EndpointSlice, EndpointsModel>(
                named_api(&client, &r),
                service_slices(&r),
                "endpointslices",
            )
            .await
        } else {
            self.watch::<Endpoints, CoreEndpointsModel>(
                named_api(&client, &r),
                name_selector(&r),
                "endpoints",
            )
            .await
        }
    }

    /// Watch the Lease `r` in the most preferred group version served (v1beta1 on 1.12-1.13).
    async fn watch_lease(self, client: kube::Client, r: ObjectRef) {
        let versions = lease_group_versions();
        let Some(resource) = self
            .served(ApiSurface::leases, ("Lease", &versions), "leases")
            .await
        else {
            return;
        };
        let api = Api::namespaced_with(client, &r.namespace, &resource);
        self.watch::<DynamicObject, ServedLeaseModel>(api, name_selector(&r), "leases")
            .await
    }

    /// Follow the objects of `api` selected by `config` and judge them with `M`.
    async fn watch<K, M>(self, api: Api<K>, config: watcher::Config, resource: &'static str)
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
        M: Model<K>,
    {
        let mut events = pin!(watcher::watcher(api, config).default_backoff());
        // None until the first initial list is complete: before that nothing is known.
        let mut live: Option<M> = None;
        // Objects of a (re)list in progress; replaces `live` atomically when it completes.
        let mut relist: Option<M> = None;
        // Whether an object was ever read: from then on its absence means it was deleted.
        let mut seen = false;
        let what = self.handle.owner().spec.kind();
        let mut wake: Option<Instant> = None;
        loop {
            let timer = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => pending().await,
                }
            };
            let changed = tokio::select! {
                () = self.cancel.cancelled() => return,
                () = timer => true,
                event = events.next() => match event {
                    Some(Ok(event)) => fold(observation(event), &mut live, &mut relist, Instant::now()),
                    Some(Err(err)) => {
                        self.watch_failed(resource, &err);
                        false
                    }
                    None => {
                        // The watcher retries forever; an end means the runtime is going away.
                        error!(owner = %self.handle.owner().target, "owner watch ended");
                        return;
                    }
                },
            };
            if changed && let Some(model) = &live {
                let evaluation = model.evaluate(Instant::now());
                wake = evaluation.next_change;
                let (observed, detail) = judge(evaluation, &mut seen, what);
                self.handle.observe(observed, detail);
            }
        }
    }

    /// A failed watch: counted, logged, and the owner unknown until it recovers.
    fn watch_failed(&self, resource: &str, err: &watcher::Error) {
        self.handle.inner.metrics.watch_restarted(resource);
        let owner = self.handle.owner();
        let error = error_chain(err);
        warn!(
            initializers = %owner.initializer_list,
            owner_kind = owner.spec.kind(),
            owner = %owner.target,
            error = %error,
            "owner watch failed; keeping the last known state and retrying"
        );
        self.handle
            .unknown_because(format!("watch failing: {error}"));
    }

    /// A webhook's default owner: the Service by name (metadata only: its presence is all that
    /// counts) and its endpoints (EndpointSlices, or core/v1 Endpoints on a server before
    /// 1.21), one verdict from both once both are listed.
    async fn watch_webhook_service(self, client: kube::Client, r: ObjectRef) {
        let Some(resource) = self.service_endpoints().await else {
            return;
        };
        if resource.kind == "EndpointSlice" {
            let slices = watcher::watcher(named_api(&client, &r), service_slices(&r));
            self.follow_webhook_service::<EndpointSlice, EndpointsModel>(
                client,
                r,
                slices,
                ("EndpointSlice", "endpointslices"),
            )
            .await
        } else {
            let endpoints = watcher::watcher(named_api(&client, &r), name_selector(&r));
            self.follow_webhook_service::<Endpoints, CoreEndpointsModel>(
                client,
                r,
                endpoints,
                ("Endpoints", "endpoints"),
            )
            .await
        }
    }

    /// [`Task::watch_webhook_service`] with the Service's `endpoints` watched as `E`, judged
    /// by `M`; `what` names their kind and resource.
    async fn follow_webhook_service<E, M>(
        self,
        client: kube::Client,
        r: ObjectRef,
        endpoints: impl futures::Stream<Item = watcher::Result<watcher::Event<E>>> + Send,
        (what, resource): (&'static str, &'static str),
    ) where
        E: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
        M: Model<E>,
    {
        enum Change<S, E> {
            Service(S),
            Slice(E),
        }
        let services = watcher::watcher(
            named_api::<PartialObjectMeta<Service>>(&client, &r),
            name_selector(&r),
        )
        .default_backoff()
        .map(Change::Service);
        let slices = endpoints.default_backoff().map(Change::Slice);
        let mut events = pin!(futures::stream::select(services, slices));
        let (mut service, mut service_relist) = (None::<ServicePresence>, None);
        let (mut endpoints, mut endpoints_relist) = (None::<M>, None);
        let mut seen = false;
        let target = self.handle.owner().target.clone();
        loop {
            let changed = tokio::select! {
                () = self.cancel.cancelled() => return,
                event = events.next() => match event {
                    Some(Change::Service(Ok(e))) => {
                        fold(observation(e), &mut service, &mut service_relist, Instant::now())
                    }
                    Some(Change::Slice(Ok(e))) => {
                        fold(observation(e), &mut endpoints, &mut endpoints_relist, Instant::now())
                    }
                    // Without the right to read Services (RBAC from before this owner read
                    // them), judge by the endpoints alone, as before.
                    Some(Change::Service(Err(err))) if forbidden(&err) => {
                        let first = service.is_none();
                        if first {
                            warn!(owner = %target, error = %error_chain(&err),
                                "cannot read the webhook's Service: a missing one will not count \
                                 as down; grant get, list, watch on services (deploy/README.md)");
                            service = Some(ServicePresence::assumed());
                        }
                        first
                    }
                    Some(Change::Service(Err(err))) => {
                        self.watch_failed("services", &err);
                        false
                    }
                    Some(Change::Slice(Err(err))) => {
                        self.watch_failed(resource, &err);
                        false
                    }
                    None => {
                        error!(owner = %target, "owner watch ended");
                        return;
                    }
                },
            };
            if changed && let (Some(s), Some(e)) = (&service, &endpoints) {
                let evaluation = webhook_service(s, e, &target, Instant::now());
                let (observed, detail) = judge(evaluation, &mut seen, what);
                self.handle.observe(observed, detail);
            }
        }
    }

    /// Send `canary`'s dry-run create every interval until cancelled, and judge the webhook
    /// by the answer ([`canary_verdict`]).
    async fn canary(self, client: kube::Client, canary: Canary) {
        let resource = match canary.resource {
            CanaryResource::Pods => ApiResource::erase::<Pod>(&()),
            CanaryResource::Configmaps => {
                ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
            }
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client, &canary.namespace, &resource);
        let object = canary_object(&canary, &resource);
        let params = kube::api::PostParams {
            dry_run: true,
            field_manager: Some("initguard-canary".to_owned()),
        };
        let mut ticks = tokio::time::interval(canary.interval.max(MIN_PROBE_INTERVAL));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let answer = tokio::select! {
                () = self.cancel.cancelled() => return,
                _ = ticks.tick() => tokio::select! {
                    () = self.cancel.cancelled() => return,
                    // Longer than any webhook's timeoutSeconds (at most 30 s): the API server
                    // answers first, with the webhook's failure.
                    a = tokio::time::timeout(CANARY_TIMEOUT, api.create(&params, &object)) => a,
                },
            };
            let (observed, detail) = match answer {
                Ok(result) => canary_verdict(&canary.webhook, result.map(|_| ())),
                Err(_) => (
                    Observed::Unknown,
                    format!("no answer from the API server within {CANARY_TIMEOUT:?}"),
                ),
            };
            self.handle
                .inner
                .metrics
                .owner_probed("apiserver", observed.as_str());
            self.handle.observe(observed, detail);
        }
    }

    /// Probe `url` every `probeInterval` until cancelled.
    async fn probe(self, url: String, tls: ProbeTls) {
        let uri = match parse_probe_url(&url) {
            Ok(uri) => uri,
            Err(reason) => return self.cannot_probe(&url, &reason),
        };
        let builder = HttpClient::builder(TokioExecutor::new());
        if uri.scheme_str() == Some("https") {
            let connector = tls.kube_config(&uri).and_then(|c| {
                c.rustls_https_connector()
                    .map_err(|e| ProbeError::Tls(error_chain(&e)))
            });
            match connector {
                Ok(connector) => self.probe_loop(builder.build(connector), uri).await,
                Err(reason) => self.cannot_probe(&url, &reason),
            }
        } else {
            self.probe_loop(builder.build_http(), uri).await;
        }
    }

    /// Config validation should have refused such a URL; never judge an owner we cannot ask.
    fn cannot_probe(&self, url: &str, reason: &ProbeError) {
        error!(
            initializers = %self.handle.owner().initializer_list,
            url,
            %reason,
            "http owner cannot be probed; its state stays unknown"
        );
    }

    async fn probe_loop<C>(self, client: HttpClient<C, Empty<Bytes>>, uri: Uri)
    where
        C: Connect + Clone + Send + Sync + 'static,
    {
        let interval = self.handle.owner().probe_interval.max(MIN_PROBE_INTERVAL);
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let result = tokio::select! {
                () = self.cancel.cancelled() => return,
                _ = ticks.tick() => tokio::select! {
                    () = self.cancel.cancelled() => return,
                    result = probe_once(&client, &uri) => result,
                },
            };
            match result {
                Ok(status) if status.is_success() => {
                    self.handle.inner.metrics.owner_probed("http", "up");
                    self.handle.observe(Observed::Up, format!("HTTP {status}"))
                }
                Ok(status) => {
                    self.handle.inner.metrics.owner_probed("http", "down");
                    self.handle
                        .observe(Observed::Down, format!("HTTP {status}"))
                }
                Err(reason) => {
                    self.handle.inner.metrics.owner_probed("http", "down");
                    self.handle.observe(Observed::Down, reason.to_string())
                }
            }
        }
    }
}

/// Whether a watch failed because RBAC forbids it.
fn forbidden(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => {
            matches!(e, kube::Error::Api(s) if s.code == 403)
        }
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

/// How long a canary waits for the API server: longer than the 30 s maximum of a webhook's
/// `timeoutSeconds`.
const CANARY_TIMEOUT: Duration = Duration::from_secs(35);

/// The dry-run object: minimal, labelled [`CANARY_LABEL`] (which no bypass lets through) and
/// the configured labels; a pod meets the `restricted` Pod Security Standard.
fn canary_object(canary: &Canary, resource: &ApiResource) -> DynamicObject {
    let mut labels: serde_json::Map<String, serde_json::Value> = canary
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    labels.insert(CANARY_LABEL.to_owned(), "dry-run".into());
    let mut object = serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": { "generateName": "initguard-canary-", "labels": labels },
    });
    if canary.resource == CanaryResource::Pods {
        object["spec"] = serde_json::json!({
            "securityContext": { "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                 "seccompProfile": { "type": "RuntimeDefault" } },
            "containers": [{
                "name": "canary",
                "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": "1m", "memory": "4Mi" },
                               "limits": { "cpu": "1m", "memory": "4Mi" } },
                "securityContext": { "allowPrivilegeEscalation": false,
                                     "capabilities": { "drop": ["ALL"] },
                                     "readOnlyRootFilesystem": true },
            }],
        });
    }
    serde_json::from_value(object).unwrap_or_else(|_| DynamicObject::new("", resource))
}

/// A canary's verdict on `webhook` from the API server's answer to its dry-run create: down when
/// the server failed calling the webhook; up when the create was admitted or the webhook
/// itself denied it (it answered); unknown, with the answer as the detail, on anything else
/// (RBAC, Pod Security, another webhook or plugin, a webhook without dry-run support).
pub(super) fn canary_verdict(webhook: &str, answer: Result<(), kube::Error>) -> (Observed, String) {
    let message = match answer {
        Ok(()) => return (Observed::Up, "dry-run create admitted".to_owned()),
        Err(kube::Error::Api(status)) => status.message,
        Err(e) => {
            return (
                Observed::Unknown,
                format!("canary failed: {}", error_chain(&e)),
            );
        }
    };
    let quoted = format!("\"{webhook}\"");
    if message.contains(&format!("failed calling webhook {quoted}")) {
        (Observed::Down, message)
    } else if message.contains(&format!(
        "admission webhook {quoted} does not support dry run"
    )) {
        (Observed::Unknown, message)
    } else if message.contains(&format!("admission webhook {quoted} denied the request")) {
        (Observed::Up, format!("the webhook answered: {message}"))
    } else {
        (Observed::Unknown, message)
    }
}

/// Why an http owner could not be asked, or gave no answer; the owner's detail in `/status`.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("invalid URL: {0}")]
    Url(#[from] http::uri::InvalidUri),
    #[error("URL has no host")]
    NoHost,
    #[error("only http:// and https:// URLs can be probed")]
    Scheme,
    #[error("reading caFile {}: {source}", path.display())]
    ReadCa {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("caFile {}: {source}", path.display())]
    Pem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("caFile {}: no PEM certificate", .0.display())]
    NoCa(PathBuf),
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("building request: {0}")]
    Request(#[from] http::Error),
    #[error("the server's TLS certificate was rejected ({0}); check the owner's caFile")]
    Rejected(String),
    /// The transport's error chain, outermost first.
    #[error("{0}")]
    Transport(String),
    #[error("no answer within {}", humantime::format_duration(PROBE_TIMEOUT))]
    Timeout,
}

/// An `http://` or `https://` URL with a host.
fn parse_probe_url(url: &str) -> Result<Uri, ProbeError> {
    let uri: Uri = url.parse()?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some_and(|h| !h.is_empty()) => Ok(uri),
        Some("http" | "https") => Err(ProbeError::NoHost),
        _ => Err(ProbeError::Scheme),
    }
}

/// One GET; the status if it answered within [`PROBE_TIMEOUT`], else why not.
async fn probe_once<C>(
    client: &HttpClient<C, Empty<Bytes>>,
    uri: &Uri,
) -> Result<StatusCode, ProbeError>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let request = Request::get(uri.clone())
        .header(
            header::USER_AGENT,
            concat!("initguard/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::new())?;
    match tokio::time::timeout(PROBE_TIMEOUT, client.request(request)).await {
        // The body is not needed; dropping it closes the connection.
        Ok(Ok(response)) => Ok(response.status()),
        Ok(Err(err)) => Err(match rejected_certificate(&err) {
            Some(why) => ProbeError::Rejected(why),
            None => ProbeError::Transport(error_chain(&err)),
        }),
        Err(_) => Err(ProbeError::Timeout),
    }
}

/// Why the server's certificate was refused, when that is what failed. rustls's error sits
/// inside an `io::Error` (possibly wrapped in another), whose `source()` skips what it wraps,
/// so wrapped errors are looked into as well as sources.
fn rejected_certificate(err: &(dyn StdError + 'static)) -> Option<String> {
    let mut pending: Vec<&(dyn StdError + 'static)> = vec![err];
    // Bounded: error chains are short; never loop on a pathological one.
    for _ in 0..32 {
        let e = pending.pop()?;
        if let Some(rustls::Error::InvalidCertificate(why)) = e.downcast_ref::<rustls::Error>() {
            return Some(format!("{why:?}"));
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            pending.push(inner);
        }
        if let Some(source) = e.source() {
            pending.push(source);
        }
    }
    None
}

/// An error and its sources, `outer: inner: root`.
pub(crate) fn error_chain(err: &dyn StdError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(message: &str) -> Result<(), kube::Error> {
        let s: kube::core::Status = serde_json::from_value(
            serde_json::json!({"code": 500, "reason": "InternalError", "message": message}),
        )
        .unwrap();
        Err(kube::Error::Api(Box::new(s)))
    }

    #[test]
    fn a_canary_is_down_only_when_the_server_failed_calling_its_own_webhook() {
        let w = "pods.policy.example.com";
        let verdict = |answer| canary_verdict(w, answer).0;
        assert_eq!(verdict(Ok(())), Observed::Up);
        assert_eq!(
            verdict(refused(&format!(
                "Internal error occurred: failed calling webhook \"{w}\": failed to call \
                 webhook: Post \"https://policy.svc:443/validate\": context deadline exceeded"
            ))),
            Observed::Down
        );
        assert_eq!(
            verdict(refused(&format!(
                "admission webhook \"{w}\" denied the request: no"
            ))),
            Observed::Up,
            "the webhook answered"
        );
        assert_eq!(
            verdict(refused(&format!(
                "admission webhook \"{w}\" does not support dry run"
            ))),
            Observed::Unknown
        );
        // Another webhook's failure, RBAC, Pod Security: says nothing about this one.
        for other in [
            "Internal error occurred: failed calling webhook \"other.example.com\": timeout",
            "pods is forbidden: User \"system:initguard\" cannot create resource \"pods\"",
            "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\"",
        ] {
            assert_eq!(verdict(refused(other)), Observed::Unknown, "{other}");
        }
    }

    #[test]
    fn probe_urls_need_a_scheme_we_speak_and_a_host() {
        assert!(parse_probe_url("http://10.0.0.5:8080/healthz").is_ok());
        assert!(parse_probe_url("https://example.com/healthz").is_ok());
        assert!(parse_probe_url("ftp://example.com/").is_err());
        assert!(parse_probe_url("/healthz").is_err());
        assert!(parse_probe_url("not a url").is_err());
        // A scheme we speak but no host: the host check, not the scheme check, refuses it.
        assert_eq!(
            parse_probe_url("http://:8080/healthz")
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("URL has no host")
        );
        assert_eq!(
            parse_probe_url("ftp://example.com/")
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("only http:// and https:// URLs can be probed")
        );
    }
}

/// What `check-config --kubeconfig` finds about the node stage's `daemonset` owners.
#[derive(Debug, Default)]
pub struct DaemonSetFindings {
    /// A listed DaemonSet that does not exist (or cannot be read): the config's mistake.
    pub errors: Vec<String>,
    /// A DaemonSet with a Ready pod on no node: every step waiting on it is held.
    pub warnings: Vec<String>,
    /// On how many nodes each has a Ready pod now.
    pub notes: Vec<String>,
}

/// Read each DaemonSet an `initContainers` entry names (in the group version discovery gives)
/// and count the nodes where a pod it controls (by uid) is Ready and not being deleted, as the
/// running guard judges it.
pub async fn daemonset_owners(client: &kube::Client, config: &Config) -> DaemonSetFindings {
    let mut findings = DaemonSetFindings::default();
    let listed = crate::node_stage::daemonset_owners(config);
    if listed.is_empty() {
        return findings;
    }
    // In the group version the server serves them, as the running guard reads them.
    let resource = match ApiSurface::read(client).await {
        Ok(surface) => surface.daemonsets(),
        Err(e) => {
            findings.errors.push(format!(
                "cannot read discovery for the node stage's DaemonSets: {}",
                error_chain(&e)
            ));
            return findings;
        }
    };
    let Some(resource) = resource else {
        findings.errors.push(format!(
            "the server serves no DaemonSet API ({}): every daemonset owner stays unknown",
            kube_common::daemonset_group_versions()
        ));
        return findings;
    };
    for (ds, step) in listed {
        let what = format!(
            "owner daemonset {}/{} (of init container {})",
            ds.namespace, ds.name, step.name
        );
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), &ds.namespace, &resource);
        let found = match api.get_opt(&ds.name).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                findings.errors.push(format!(
                    "{what} does not exist: the step's owner stays unknown and its pods are \
                     never recreated"
                ));
                continue;
            }
            Err(e) => {
                findings
                    .errors
                    .push(format!("{what} could not be read: {}", error_chain(&e)));
                continue;
            }
        };
        let uid = found.metadata.uid.clone().unwrap_or_default();
        // spec.selector.matchLabels: the same in every group version.
        let selector = found.data["spec"]["selector"]["matchLabels"]
            .as_object()
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ds.namespace);
        let params = kube::api::ListParams::default().labels(&selector);
        let listed = match pods.list(&params).await {
            Ok(listed) => listed,
            Err(e) => {
                findings.warnings.push(format!(
                    "{what}: its pods could not be listed: {}",
                    error_chain(&e)
                ));
                continue;
            }
        };
        let nodes: std::collections::BTreeSet<String> = listed
            .items
            .iter()
            .filter(|p| serves(p, &uid))
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        match nodes.len() {
            0 => findings.warnings.push(format!(
                "{what} has a Ready pod on no node: it is down everywhere, and every pod \
                 waiting on the step is held"
            )),
            n => findings
                .notes
                .push(format!("{what} has a Ready pod on {n} node(s)")),
        }
    }
    findings
}

/// Whether `pod` is an agent of the DaemonSet `uid` now: controlled by it, Ready, and not
/// being deleted.
fn serves(pod: &Pod, uid: &str) -> bool {
    let controlled = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    controlled && ready && pod.metadata.deletion_timestamp.is_none()
}
