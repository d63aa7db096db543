//! The HTTP side: accepting connections (and cutting them all on restart), authentication by
//! bearer token, routing Kubernetes API paths to verbs, content negotiation (JSON, Table,
//! PartialObjectMetadata), fault injection, RBAC, the request log and the legacy blocking
//! create. (The simulated scheduler is `scheduler.rs`.)

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::discovery;
use super::kinds::{self, WriteCtx};
use super::ops::{self, Filter, Writer};
use super::patch::{self, PatchType};
use super::rbac::{self, Attributes};
use super::record::RequestRecord;
use super::resources::{self, ResourceInfo, Storage};
use super::selectors::{self, FieldSelector};
use super::shared::{Repr, RespBody, ServerState, go_duration, http_date};
use super::status::{ApiError, success_status};
use super::store::Key;
use super::table::{self, IncludeObject};
use super::watch::{self, WatchRequest};

/// Largest request body accepted (the API server's limit).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// Watch duration when the client sets no `timeoutSeconds`.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// A running accept loop.
pub(crate) struct Listener {
    token: CancellationToken,
    task: JoinHandle<()>,
}

impl Listener {
    /// Accept connections on `listener` until stopped.
    pub(crate) fn spawn(listener: TcpListener, shared: Arc<ServerState>) -> Listener {
        let token = CancellationToken::new();
        let task = tokio::spawn(accept_loop(listener, shared, token.clone()));
        Listener { token, task }
    }

    /// Close the listening socket and cut every connection, watches included.
    pub(crate) async fn stop(self) {
        self.token.cancel();
        let _ = self.task.await;
    }

    /// Signal [`Listener::stop`] without waiting (for `Drop`).
    pub(crate) fn cancel(&self) {
        self.token.cancel();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<ServerState>, token: CancellationToken) {
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, shared.clone(), token.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "simulated API server: accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<ServerState>, token: CancellationToken) {
    let _ = stream.set_nodelay(true);
    let conn_token = token.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let token = conn_token.clone();
        async move { Ok::<_, Infallible>(handle(shared, token, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = conn => {}
        _ = token.cancelled() => {}
    }
}

fn full(status: StatusCode, content_type: &str, body: Bytes) -> Response<RespBody> {
    let mut resp = Response::new(BodyExt::boxed_unsync(Full::new(body)));
    *resp.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

fn json_response(status: u16, v: &Value) -> Response<RespBody> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    full(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        "application/json",
        Bytes::from(body),
    )
}

fn error_response(e: &ApiError) -> Response<RespBody> {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(s) = e.retry_after
        && let Ok(v) = header::HeaderValue::from_str(&s.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// The user a bearer token `user:NAME` names; no token is `system:anonymous`.
fn authenticate(headers: &HeaderMap) -> Result<String, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok("system:anonymous".to_string());
    };
    let text = value.to_str().map_err(|_| ApiError::unauthorized())?;
    let token = text
        .strip_prefix("Bearer ")
        .ok_or_else(ApiError::unauthorized)?;
    match token.trim().strip_prefix("user:") {
        Some(user) if !user.is_empty() => Ok(user.to_string()),
        _ => Err(ApiError::unauthorized()),
    }
}

/// A request for an API resource.
#[derive(Debug, Clone)]
struct ResourceRoute {
    res: &'static ResourceInfo,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    watch_path: bool,
}

#[derive(Debug)]
enum Route {
    Version,
    CoreVersions,
    Groups,
    Group(String),
    ResourceList(String, String),
    Health,
    OpenApiIndex,
    OpenApi(String),
    Resource(ResourceRoute),
    NotFound,
}

fn route(path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["healthz"] | ["livez"] | ["readyz"] => return Route::Health,
        ["api"] => return Route::CoreVersions,
        ["apis"] => return Route::Groups,
        ["apis", g] => return Route::Group((*g).to_string()),
        ["openapi", "v3"] => return Route::OpenApiIndex,
        ["openapi", "v3", rest @ ..] => return Route::OpenApi(rest.join("/")),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    if rest.is_empty() {
        return Route::ResourceList(group.to_string(), version.to_string());
    }
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let resource = |plural: &str| resources::lookup(group, version, plural);
    let own = |s: &&str| (*s).to_string();
    let parsed = match rest {
        // A namespace object and its subresources.
        ["namespaces", name, sub @ ("status" | "finalize")] => {
            resource("namespaces").map(|res| (res, None, Some(own(name)), Some(own(sub))))
        }
        ["namespaces", ns, plural, tail @ ..] if tail.len() <= 2 => {
            resource(plural).filter(|r| r.namespaced).map(|res| {
                (
                    res,
                    Some(own(ns)),
                    tail.first().map(own),
                    tail.get(1).map(own),
                )
            })
        }
        [plural] => resource(plural).map(|res| (res, None, None, None)),
        [plural, name] => resource(plural)
            .filter(|r| !r.namespaced)
            .map(|res| (res, None, Some(own(name)), None)),
        [plural, name, sub] => resource(plural)
            .filter(|r| !r.namespaced)
            .map(|res| (res, None, Some(own(name)), Some(own(sub)))),
        _ => None,
    };
    match parsed {
        Some((res, namespace, name, subresource))
            if subresource.as_deref().is_none_or(|s| {
                res.subresources.contains(&s) || (res.storage == Storage::Pods && s == "eviction")
            }) =>
        {
            Route::Resource(ResourceRoute {
                res,
                namespace,
                name,
                subresource,
                watch_path,
            })
        }
        _ => Route::NotFound,
    }
}

fn negotiate(accept: Option<&str>) -> Result<Repr, ApiError> {
    let Some(accept) = accept.map(str::trim).filter(|a| !a.is_empty()) else {
        return Ok(Repr::Json);
    };
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        if !matches!(media.as_str(), "application/json" | "*/*" | "application/*") {
            continue;
        }
        let params: HashMap<String, String> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let version = match params.get("v").map(String::as_str) {
            Some("v1") | None => "v1",
            Some("v1beta1") => "v1beta1",
            Some(_) => continue,
        };
        let meta_group = params.get("g").is_none_or(|g| g == "meta.k8s.io");
        match params.get("as").map(String::as_str) {
            None => return Ok(Repr::Json),
            Some("Table") if meta_group => return Ok(Repr::Table(version)),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") if meta_group => {
                return Ok(Repr::Meta(version));
            }
            Some(_) => continue,
        }
    }
    Err(ApiError::not_acceptable(accept))
}

/// Serializes an object without `kind` and `apiVersion`, as list items are.
struct Item<'a>(&'a Value);

impl Serialize for Item<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(m) = self.0 else {
            return self.0.serialize(s);
        };
        let mut map = s.serialize_map(None)?;
        for (k, v) in m {
            if k != "kind" && k != "apiVersion" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// The opaque `continue` token: list version and the key of the last item served.
fn encode_continue(rv: u64, key: &Key) -> String {
    let doc = json!({ "v": "meta.k8s.io/v1", "rv": rv, "start": [key.0, key.1] });
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&doc).unwrap_or_default())
}

fn decode_continue(token: &str) -> Result<(u64, Key), ApiError> {
    let bad = || ApiError::bad_request("continue key is not valid: invalid continue token");
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if doc["v"] != "meta.k8s.io/v1" {
        return Err(bad());
    }
    let rv = doc["rv"].as_u64().ok_or_else(bad)?;
    let ns = doc["start"][0].as_str().ok_or_else(bad)?;
    let name = doc["start"][1].as_str().ok_or_else(bad)?;
    Ok((rv, (ns.to_string(), name.to_string())))
}

/// Everything a handler needs about one request.
struct Ctx {
    shared: Arc<ServerState>,
    token: CancellationToken,
    user: String,
    query: HashMap<String, String>,
    repr: Repr,
    content_type: Option<String>,
}

impl Ctx {
    fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.q(k), Some("true" | "1"))
    }

    fn dry_run(&self) -> Result<bool, ApiError> {
        match self.q("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
            ))),
        }
    }

    fn filter(&self, res: &ResourceInfo) -> Result<Filter, ApiError> {
        let labels = selectors::parse_labels(self.q("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.0))?;
        let fields =
            FieldSelector::parse(self.q("fieldSelector").unwrap_or(""), res.selectable_fields)
                .map_err(|e| ApiError::bad_request(e.0))?;
        Ok(Filter {
            labels,
            fields,
            include_uninitialized: self.flag("includeUninitialized"),
        })
    }

    fn render(&self, res: &ResourceInfo, obj: &Value) -> Value {
        self.repr
            .render(res, obj, IncludeObject::parse(self.q("includeObject")))
    }

    fn writer<'a>(&'a self, legacy: &'a [String], now: &'a str) -> Result<Writer<'a>, ApiError> {
        Ok(Writer {
            user: &self.user,
            dry_run: self.dry_run()?,
            ctx: WriteCtx {
                mechanism: self.shared.options.mechanism,
                legacy_initializers: legacy,
                now,
                drop_match_conditions: self.shared.options.drop_match_conditions,
            },
        })
    }
}

async fn handle(
    shared: Arc<ServerState>,
    token: CancellationToken,
    req: Request<Incoming>,
) -> Response<RespBody> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().map(str::to_string);
    let mut record = RequestRecord {
        time: SystemTime::now(),
        user: String::new(),
        verb: parts.method.as_str().to_ascii_lowercase(),
        resource: String::new(),
        api_group: String::new(),
        namespace: None,
        name: None,
        status: 0,
        watch_error: None,
        content_type: parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body: None,
        path: path.clone(),
        query: raw_query.clone(),
    };
    let resp = match authenticate(&parts.headers) {
        Err(e) => error_response(&e),
        // Cut off: the request never reaches the server (not executed, not logged).
        Ok(user) if shared.faults.is_partitioned(&user) => {
            return error_response(&ApiError::injected(503));
        }
        Ok(user) => {
            record.user = user.clone();
            let query: HashMap<String, String> = raw_query
                .as_deref()
                .map(|q| {
                    url::form_urlencoded::parse(q.as_bytes())
                        .into_owned()
                        .collect()
                })
                .unwrap_or_default();
            let accept = parts
                .headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let kube = shared.options.kube_version;
            let route = match route(&path) {
                // Group versions this server's Kubernetes version does not serve.
                Route::Resource(rr)
                    if !resources::served(kube, rr.res.group, rr.res.version)
                        || shared.faults.hides(rr.res.group) =>
                {
                    Route::NotFound
                }
                other => other,
            };
            match route {
                Route::Resource(rr) => {
                    resource_request(
                        &shared,
                        token,
                        user,
                        query,
                        accept,
                        &parts.method,
                        rr,
                        body,
                        &mut record,
                    )
                    .await
                }
                Route::NotFound => error_response(&ApiError::no_route()),
                other => {
                    if parts.method != Method::GET {
                        error_response(&ApiError::method_not_allowed(parts.method.as_str()))
                    } else {
                        non_resource(&shared, other)
                    }
                }
            }
        }
    };
    let mut resp = resp;
    // Every response says what time it is on the server's clock, as real API servers do.
    if let Some(date) = http_date(shared.options.clock_offset) {
        resp.headers_mut().insert(header::DATE, date);
    }
    record.status = resp.status().as_u16();
    record.watch_error = resp.extensions().get::<WatchGone>().map(|_| 410);
    shared.record(record);
    resp
}

fn non_resource(shared: &ServerState, route: Route) -> Response<RespBody> {
    let kube = shared.options.kube_version;
    let doc = match route {
        Route::Version => Some(discovery::version(shared.options.mechanism, kube)),
        Route::CoreVersions => Some(discovery::core_versions(shared.addr)),
        Route::Groups => {
            let mut list = discovery::group_list(kube);
            if let Some(groups) = list["groups"].as_array_mut() {
                groups.retain(|g| !shared.faults.hides(g["name"].as_str().unwrap_or_default()));
            }
            Some(list)
        }
        Route::Group(g) if shared.faults.hides(&g) => None,
        Route::Group(g) => discovery::group(&g, kube),
        Route::ResourceList(g, _) if shared.faults.hides(&g) => None,
        Route::ResourceList(g, v) => discovery::resource_list(&g, &v, kube),
        Route::Health => {
            return full(
                StatusCode::OK,
                "text/plain; charset=utf-8",
                Bytes::from_static(b"ok"),
            );
        }
        Route::OpenApiIndex => Some(discovery::openapi_v3_index(kube)),
        Route::OpenApi(path) => discovery::openapi_v3_document(&path, kube),
        Route::Resource(_) | Route::NotFound => None,
    };
    match doc {
        Some(d) => json_response(200, &d),
        None => error_response(&ApiError::no_route()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

fn verb_of(
    method: &Method,
    rr: &ResourceRoute,
    query: &HashMap<String, String>,
) -> Result<Verb, ApiError> {
    let watch =
        rr.watch_path || matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let named = rr.name.is_some();
    let verb = match *method {
        Method::GET if watch => Verb::Watch,
        Method::GET if named => Verb::Get,
        Method::GET => Verb::List,
        Method::POST if !named => Verb::Create,
        Method::POST if rr.subresource.as_deref() == Some("eviction") => Verb::Create,
        Method::PUT if named => Verb::Update,
        Method::PATCH if named => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => return Err(ApiError::method_not_allowed(method.as_str())),
    };
    let eviction = rr.subresource.as_deref() == Some("eviction");
    if eviction != (verb == Verb::Create && named) {
        return Err(ApiError::method_not_allowed(method.as_str()));
    }
    if rr.subresource.is_some()
        && !eviction
        && !matches!(verb, Verb::Get | Verb::Update | Verb::Patch)
    {
        return Err(ApiError::method_not_allowed(method.as_str()));
    }
    if rr.watch_path && *method != Method::GET {
        return Err(ApiError::method_not_allowed(method.as_str()));
    }
    // Creating needs a namespace for namespaced resources.
    if matches!(verb, Verb::Create | Verb::DeleteCollection)
        && rr.res.namespaced
        && rr.namespace.is_none()
    {
        return Err(ApiError::method_not_allowed(method.as_str()));
    }
    Ok(verb)
}

#[allow(clippy::too_many_arguments)]
async fn resource_request(
    shared: &Arc<ServerState>,
    token: CancellationToken,
    user: String,
    query: HashMap<String, String>,
    accept: Option<String>,
    method: &Method,
    rr: ResourceRoute,
    body: Incoming,
    record: &mut RequestRecord,
) -> Response<RespBody> {
    record.resource = match &rr.subresource {
        Some(sub) => format!("{}/{sub}", rr.res.plural),
        None => rr.res.plural.to_string(),
    };
    record.api_group = rr.res.group.to_string();
    record.namespace = rr.namespace.clone();
    record.name = rr.name.clone();
    let verb = match verb_of(method, &rr, &query) {
        Ok(v) => v,
        Err(e) => return error_response(&e),
    };
    record.verb = verb.as_str().to_string();

    if let Some(delay) = shared.faults.latency_for(&user) {
        tokio::time::sleep(delay).await;
    }
    if shared
        .faults
        .held(&user, &record.verb, &record.resource)
        .await
    {
        return error_response(&ApiError::injected(503));
    }
    if let Some(code) = shared.faults.injected_error(&user) {
        return error_response(&ApiError::injected(code));
    }
    if let Some(code) = shared
        .faults
        .take_fail_next(&user, verb.as_str(), &record.resource)
    {
        return error_response(&ApiError::injected(code));
    }
    if let Some(e) = authorize(shared, &user, verb, &rr, &query) {
        return error_response(&e);
    }
    let repr = match negotiate(accept.as_deref()) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let ctx = Ctx {
        shared: shared.clone(),
        token,
        user,
        query,
        repr,
        content_type: record.content_type.clone(),
    };
    let body = if matches!(
        verb,
        Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
    ) {
        match Limited::new(body, MAX_BODY).collect().await {
            Ok(b) => {
                let bytes = b.to_bytes();
                if !bytes.is_empty() {
                    record.body = Some(String::from_utf8_lossy(&bytes).into_owned());
                }
                bytes
            }
            Err(e) => {
                return error_response(&ApiError::too_large(format!("request body rejected: {e}")));
            }
        }
    } else {
        Bytes::new()
    };
    if matches!(verb, Verb::Watch) {
        return watch(&ctx, &rr);
    }
    let delay = match verb {
        Verb::Get | Verb::List | Verb::Watch => None,
        _ => shared.faults.write_delay(&ctx.user, &record.resource),
    };
    let run = async move {
        match verb {
            Verb::Get => get(&ctx, &rr),
            Verb::List => list(&ctx, &rr),
            Verb::Watch => Ok(watch(&ctx, &rr)),
            Verb::Create if rr.subresource.is_some() => evict(&ctx, &rr, &body),
            Verb::Create => create(&ctx, &rr, &body).await,
            Verb::Update => update(&ctx, &rr, &body),
            Verb::Patch => patch(&ctx, &rr, &body),
            Verb::Delete => delete(&ctx, &rr, &body),
            Verb::DeleteCollection => delete_collection(&ctx, &rr, &body),
        }
    };
    let result = match delay {
        None => run.await,
        // Its own task: committed even if the client hangs up meanwhile, as on a real server.
        Some(delay) => tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            run.await
        })
        .await
        .unwrap_or_else(|e| Err(ApiError::internal_unwrapped(format!("delayed write: {e}")))),
    };
    match result {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

/// NAME when `selector` is exactly `metadata.name=NAME` (or `==`), the one field selector
/// RequestInfoFactory reads a name from.
fn exact_name(selector: &str) -> Option<&str> {
    let name = selector
        .strip_prefix("metadata.name==")
        .or_else(|| selector.strip_prefix("metadata.name="))?;
    (!name.is_empty() && !name.contains(',')).then_some(name)
}

fn authorize(
    shared: &ServerState,
    user: &str,
    verb: Verb,
    rr: &ResourceRoute,
    query: &HashMap<String, String>,
) -> Option<ApiError> {
    let map = shared.rbac.read().unwrap_or_else(PoisonError::into_inner);
    let rules = map.get(user)?;
    // A list or watch of one object by `fieldSelector=metadata.name=NAME` is authorized as a
    // request for NAME, as RequestInfoFactory does, so rules with resourceNames allow it.
    let selected = match (verb, &rr.name) {
        (Verb::List | Verb::Watch, None) => query.get("fieldSelector").and_then(|f| exact_name(f)),
        _ => None,
    };
    // Requests on a namespace object are authorized in that namespace, as RequestInfo does.
    let namespace = if rr.res.storage == Storage::Namespaces {
        rr.name.as_deref()
    } else {
        rr.namespace.as_deref()
    };
    let attrs = Attributes {
        verb: verb.as_str(),
        api_group: rr.res.group,
        resource: rr.res.plural,
        subresource: rr.subresource.as_deref(),
        namespace,
        name: rr.name.as_deref().or(selected),
    };
    if rules.allows(&attrs) {
        return None;
    }
    let label = match &rr.subresource {
        Some(sub) => format!("{}/{sub}", rr.res.qualified()),
        None => rr.res.qualified(),
    };
    Some(ApiError::forbidden(
        &label,
        rr.res.group,
        rr.name.as_deref(),
        &rbac::denial(user, &attrs),
    ))
}

fn parse_json(ctx: &Ctx, body: &[u8]) -> Result<Value, ApiError> {
    let media = ctx
        .content_type
        .as_deref()
        .and_then(|c| c.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase());
    if media.as_deref() == Some(super::protobuf::MEDIA_TYPE) {
        return super::protobuf::decode(body);
    }
    if media.as_deref().is_some_and(|m| m != "application/json") {
        return Err(ApiError::unsupported_media_type(&["application/json"]));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

fn get(ctx: &Ctx, rr: &ResourceRoute) -> Result<Response<RespBody>, ApiError> {
    let name = rr.name.as_deref().unwrap_or_default();
    // A GET by name shows an uninitialized object; only lists and watches hide it.
    let obj = ctx
        .shared
        .store()
        .get(
            rr.res.storage,
            rr.namespace.as_deref().unwrap_or_default(),
            name,
        )
        .cloned()
        .ok_or_else(|| ApiError::not_found(rr.res, name))?;
    Ok(json_response(200, &ctx.render(rr.res, &obj)))
}

fn list(ctx: &Ctx, rr: &ResourceRoute) -> Result<Response<RespBody>, ApiError> {
    let filter = ctx.filter(rr.res)?;
    let limit = match ctx.q("limit") {
        None | Some("") => None,
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?,
        ),
    };
    let rv_param = ctx.q("resourceVersion").filter(|v| !v.is_empty());
    if let Some(m) = ctx.q("resourceVersionMatch").filter(|m| !m.is_empty()) {
        if rv_param.is_none() {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if m != "NotOlderThan" && m != "Exact" {
            return Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
            )));
        }
    }
    if let Some(rv) = rv_param
        && rv.parse::<u64>().is_err()
    {
        return Err(ApiError::bad_request(format!(
            "invalid resource version: {rv}"
        )));
    }
    let continued = match ctx.q("continue").filter(|c| !c.is_empty()) {
        Some(c) => {
            if rv_param.is_some() {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            Some(decode_continue(c)?)
        }
        None => None,
    };
    let (page, rv) = {
        let store = ctx.shared.store();
        let rv = continued.as_ref().map_or(store.rv(), |(rv, _)| *rv);
        let page = ops::list(
            &store,
            rr.res,
            rr.namespace.as_deref(),
            &filter,
            limit,
            continued.as_ref().map(|(_, k)| k),
        );
        (page, rv)
    };
    let mut meta = json!({ "resourceVersion": rv.to_string() });
    if let Some(k) = &page.next {
        meta["continue"] = json!(encode_continue(rv, k));
        if let Some(n) = page.remaining {
            meta["remainingItemCount"] = json!(n);
        }
    }
    Ok(match ctx.repr {
        Repr::Table(v) => {
            let shown: Vec<Value> = page
                .items
                .iter()
                .map(|o| kinds::from_storage(rr.res, o))
                .collect();
            let t = table::table(
                rr.res,
                &shown,
                meta,
                IncludeObject::parse(ctx.q("includeObject")),
                v,
                true,
            );
            json_response(200, &t)
        }
        Repr::Meta(v) => {
            let items: Vec<Value> = page
                .items
                .iter()
                .map(|o| json!({ "kind": "PartialObjectMetadata", "apiVersion": format!("meta.k8s.io/{v}"), "metadata": o["metadata"] }))
                .collect();
            json_response(
                200,
                &json!({ "kind": "PartialObjectMetadataList", "apiVersion": format!("meta.k8s.io/{v}"), "metadata": meta, "items": items }),
            )
        }
        Repr::Json => full(
            StatusCode::OK,
            "application/json",
            list_body(rr.res, &page.items, &meta),
        ),
    })
}

/// A `<Kind>List` written item by item, items without kind and apiVersion.
fn list_body(res: &ResourceInfo, items: &[Arc<Value>], meta: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128 + items.len() * 1024);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":",
            res.kind,
            res.api_version()
        )
        .as_bytes(),
    );
    let _ = serde_json::to_writer(&mut out, meta);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if res.is_canonical() {
            let _ = serde_json::to_writer(&mut out, &Item(item));
        } else {
            let _ = serde_json::to_writer(&mut out, &Item(&kinds::from_storage(res, item)));
        }
    }
    out.extend_from_slice(b"]}");
    Bytes::from(out)
}

/// Marks a watch response whose stream is a single 410 Gone `ERROR` event.
#[derive(Clone, Copy)]
struct WatchGone;

fn watch(ctx: &Ctx, rr: &ResourceRoute) -> Response<RespBody> {
    match start_watch(ctx, rr) {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn start_watch(ctx: &Ctx, rr: &ResourceRoute) -> Result<Response<RespBody>, ApiError> {
    let mut filter = ctx.filter(rr.res)?;
    if let Some(name) = &rr.name {
        // A watch on a named path is a watch with a name field selector.
        let mut text = ctx.q("fieldSelector").unwrap_or("").to_string();
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(&format!("metadata.name={name}"));
        filter.fields = FieldSelector::parse(&text, rr.res.selectable_fields)
            .map_err(|e| ApiError::bad_request(e.0))?;
    }
    let from = match ctx.q("resourceVersion") {
        None | Some("") | Some("0") => None,
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {v}")))?,
        ),
    };
    // 0, like no value, means the server's own watch duration.
    let timeout = match ctx.q("timeoutSeconds") {
        None | Some("") | Some("0") => DEFAULT_WATCH_TIMEOUT,
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t}")))?,
        ),
    };
    let req = WatchRequest {
        res: rr.res,
        namespace: rr.namespace.clone(),
        filter,
        send_initial_events: ctx.flag("sendInitialEvents"),
        bookmarks: ctx.flag("allowWatchBookmarks"),
        timeout,
        repr: ctx.repr,
        include_object: IncludeObject::parse(ctx.q("includeObject")),
    };
    let content_type = match ctx.repr {
        Repr::Json => "application/json".to_string(),
        Repr::Table(v) => format!("application/json;as=Table;v={v};g=meta.k8s.io"),
        Repr::Meta(v) => format!("application/json;as=PartialObjectMetadata;v={v};g=meta.k8s.io"),
    };
    // Only ever a 410 Gone frame: marked for the request log.
    let single = |frame: Bytes| {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let _ = tx.try_send(frame);
        let mut resp = full_stream(&content_type, watch::stream_body(rx));
        resp.extensions_mut().insert(WatchGone);
        resp
    };
    if ctx.shared.faults.take_gone(&ctx.user) {
        let rv = ctx.shared.store().rv();
        return Ok(single(watch::error_frame(&watch::too_old(
            from.unwrap_or(0),
            rv,
        ))));
    }
    let (initial, start_rv) = {
        let store = ctx.shared.store();
        if let (Some(rv), Some(oldest)) = (from, store.oldest_resumable())
            && rv < oldest
        {
            return Ok(single(watch::error_frame(&watch::too_old(rv, oldest))));
        }
        let snapshot = from.is_none() || req.send_initial_events;
        let initial: Vec<Arc<Value>> = if snapshot {
            ops::list(
                &store,
                rr.res,
                rr.namespace.as_deref(),
                &req.filter,
                None,
                None,
            )
            .items
        } else {
            Vec::new()
        };
        let start = if snapshot {
            store.rv()
        } else {
            from.unwrap_or(0)
        };
        (initial, start)
    };
    let body = watch::spawn(
        ctx.shared.clone(),
        req,
        initial,
        start_rv,
        ctx.token.clone(),
    );
    Ok(full_stream(&content_type, body))
}

fn full_stream(content_type: &str, body: RespBody) -> Response<RespBody> {
    let mut resp = Response::new(body);
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

async fn create(
    ctx: &Ctx,
    rr: &ResourceRoute,
    body: &[u8],
) -> Result<Response<RespBody>, ApiError> {
    let obj = parse_json(ctx, body)?;
    let legacy = ctx.shared.legacy_initializers();
    let now = ctx.shared.now_rfc3339();
    let w = ctx.writer(&legacy, &now)?;
    let outcome = {
        let mut store = ctx.shared.store();
        ops::create(&mut store, rr.res, rr.namespace.as_deref(), obj, w)?
    };
    ctx.shared.after_commit(&outcome.changes);
    let mut object = outcome.object;
    if kinds::is_uninitialized(&object) && !ctx.flag("includeUninitialized") && !w.dry_run {
        object = wait_initialized(ctx, rr.res, &object).await?;
    }
    // Still uninitialized (includeUninitialized, dry-run): 202 Accepted, as legacy servers said.
    let code = if kinds::is_uninitialized(&object) {
        202
    } else {
        201
    };
    Ok(json_response(code, &ctx.render(rr.res, &object)))
}

/// A legacy CREATE returns only once the object is initialized; on timeout the client gets
/// 504 while the object stays stored (the behaviour behind kubernetes/kubernetes#48893).
async fn wait_initialized(
    ctx: &Ctx,
    res: &ResourceInfo,
    created: &Value,
) -> Result<Arc<Value>, ApiError> {
    let ns = created["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = created["metadata"]["name"].as_str().unwrap_or_default();
    let uid = created["metadata"]["uid"].as_str().unwrap_or_default();
    let timeout = ctx.shared.options.create_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changed = ctx.shared.changed.subscribe();
    loop {
        changed.borrow_and_update();
        {
            let store = ctx.shared.store();
            match store.get(res.storage, ns, name) {
                Some(o) if o["metadata"]["uid"] == uid => {
                    if !kinds::is_uninitialized(o) {
                        return Ok(o.clone());
                    }
                }
                _ => {
                    return Err(match store.failed_initialization(uid) {
                        Some(result) => ApiError::from_status_value(result),
                        None => ApiError::internal("object deleted while waiting for creation"),
                    });
                }
            }
        }
        tokio::select! {
            r = changed.changed() => {
                if r.is_err() {
                    return Err(ApiError::internal("server shutting down"));
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                return Err(ApiError::timeout(format!("request did not complete within {}", go_duration(timeout))));
            }
            _ = ctx.token.cancelled() => {
                return Err(ApiError::internal("server shutting down"));
            }
        }
    }
}

fn update(ctx: &Ctx, rr: &ResourceRoute, body: &[u8]) -> Result<Response<RespBody>, ApiError> {
    let obj = parse_json(ctx, body)?;
    check_initialize(ctx, rr)?;
    let legacy = ctx.shared.legacy_initializers();
    let now = ctx.shared.now_rfc3339();
    let w = ctx.writer(&legacy, &now)?;
    let outcome = {
        let mut store = ctx.shared.store();
        ops::update(
            &mut store,
            rr.res,
            rr.subresource.as_deref(),
            rr.namespace.as_deref(),
            rr.name.as_deref().unwrap_or_default(),
            obj,
            w,
        )?
    };
    ctx.shared.after_commit(&outcome.changes);
    Ok(json_response(200, &ctx.render(rr.res, &outcome.object)))
}

fn patch(ctx: &Ctx, rr: &ResourceRoute, body: &[u8]) -> Result<Response<RespBody>, ApiError> {
    let patch_type = PatchType::from_content_type(ctx.content_type.as_deref())?;
    check_initialize(ctx, rr)?;
    let legacy_errors = ctx
        .shared
        .options
        .kube_version
        .is_some_and(|k| k.patch_failure_is_500());
    let legacy = ctx.shared.legacy_initializers();
    let now = ctx.shared.now_rfc3339();
    let w = ctx.writer(&legacy, &now)?;
    let outcome = {
        let mut store = ctx.shared.store();
        ops::patch(
            &mut store,
            rr.res,
            rr.subresource.as_deref(),
            rr.namespace.as_deref(),
            rr.name.as_deref().unwrap_or_default(),
            patch_type,
            body,
            w,
        )
        .map_err(|e| {
            if legacy_errors {
                patch::legacy_error(e)
            } else {
                e
            }
        })?
    };
    ctx.shared.after_commit(&outcome.changes);
    Ok(json_response(200, &ctx.render(rr.res, &outcome.object)))
}

/// The Initializers admission plugin of 1.7-1.13: an update of an uninitialized object needs
/// the `initialize` verb on its resource besides `update`/`patch` (enforced for users with
/// RBAC, on legacy [`super::options::SimOptions::kube_version`]s).
fn check_initialize(ctx: &Ctx, rr: &ResourceRoute) -> Result<(), ApiError> {
    let shared = &ctx.shared;
    if !shared.options.kube_version.is_some_and(|k| k.is_legacy())
        || rr.subresource.is_some()
        || rr.res.storage != Storage::Pods
    {
        return Ok(());
    }
    let map = shared.rbac.read().unwrap_or_else(PoisonError::into_inner);
    let Some(rules) = map.get(&ctx.user) else {
        return Ok(());
    };
    let name = rr.name.as_deref().unwrap_or_default();
    let uninitialized = shared
        .store()
        .get(
            rr.res.storage,
            rr.namespace.as_deref().unwrap_or_default(),
            name,
        )
        .is_some_and(|o| kinds::is_uninitialized(o));
    if !uninitialized {
        return Ok(());
    }
    let attrs = Attributes {
        verb: "initialize",
        api_group: rr.res.group,
        resource: rr.res.plural,
        subresource: None,
        namespace: rr.namespace.as_deref(),
        name: rr.name.as_deref(),
    };
    if rules.allows(&attrs) {
        return Ok(());
    }
    Err(ApiError::forbidden(
        &rr.res.qualified(),
        rr.res.group,
        rr.name.as_deref(),
        &format!(
            "user must have permission to initialize resources: {}",
            rbac::denial(&ctx.user, &attrs)
        ),
    ))
}

fn delete_options(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))
}

/// Resources whose DELETE answers the deleted object rather than a Status.
fn returns_deleted_object(res: &ResourceInfo) -> bool {
    matches!(res.storage, Storage::Pods | Storage::Namespaces)
}

fn delete(ctx: &Ctx, rr: &ResourceRoute, body: &[u8]) -> Result<Response<RespBody>, ApiError> {
    let options = delete_options(body)?;
    let name = rr.name.as_deref().unwrap_or_default();
    let legacy = ctx.shared.legacy_initializers();
    let now = ctx.shared.now_rfc3339();
    let w = ctx.writer(&legacy, &now)?;
    let outcome = {
        let mut store = ctx.shared.store();
        ops::delete(
            &mut store,
            rr.res,
            rr.namespace.as_deref(),
            name,
            &options,
            w,
        )?
    };
    ctx.shared.after_commit(&outcome.changes);
    if returns_deleted_object(rr.res) {
        Ok(json_response(200, &ctx.render(rr.res, &outcome.object)))
    } else {
        let uid = outcome.object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default();
        Ok(json_response(200, &success_status(rr.res, name, uid)))
    }
}

/// POST `pods/NAME/eviction`: an Eviction body of a group/version the server takes, naming
/// the pod; its `deleteOptions` go to the delete. Answers 201 with a Success Status.
fn evict(ctx: &Ctx, rr: &ResourceRoute, body: &[u8]) -> Result<Response<RespBody>, ApiError> {
    let eviction: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding Eviction: {e}")))?;
    let name = rr.name.as_deref().unwrap_or_default();
    let taken = match discovery::eviction_version(ctx.shared.options.kube_version) {
        "v1" => &["policy/v1", "policy/v1beta1"][..],
        _ => &["policy/v1beta1"][..],
    };
    let api_version = eviction["apiVersion"].as_str().unwrap_or_default();
    if eviction["kind"] != "Eviction" || !taken.contains(&api_version) {
        return Err(ApiError::bad_request(format!(
            "no kind \"{}\" is registered for version \"{api_version}\"",
            eviction["kind"].as_str().unwrap_or_default()
        )));
    }
    if eviction["metadata"]["name"].as_str() != Some(name) {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object: {name}"
        )));
    }
    let legacy = ctx.shared.legacy_initializers();
    let now = ctx.shared.now_rfc3339();
    let w = ctx.writer(&legacy, &now)?;
    let outcome = {
        let mut store = ctx.shared.store();
        ops::evict(
            &mut store,
            rr.res,
            rr.namespace.as_deref(),
            name,
            &eviction["deleteOptions"],
            w,
        )?
    };
    ctx.shared.after_commit(&outcome.changes);
    let mut status = success_status(rr.res, name, "");
    status["code"] = serde_json::json!(201);
    Ok(json_response(201, &status))
}

fn delete_collection(
    ctx: &Ctx,
    rr: &ResourceRoute,
    body: &[u8],
) -> Result<Response<RespBody>, ApiError> {
    let options = delete_options(body)?;
    let filter = ctx.filter(rr.res)?;
    let legacy = ctx.shared.legacy_initializers();
    let now = ctx.shared.now_rfc3339();
    let w = ctx.writer(&legacy, &now)?;
    let (deleted, changes, rv) = {
        let mut store = ctx.shared.store();
        let page = ops::list(&store, rr.res, rr.namespace.as_deref(), &filter, None, None);
        let mut deleted = Vec::new();
        let mut changes = Vec::new();
        for obj in page.items {
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match ops::delete(
                &mut store,
                rr.res,
                rr.namespace.as_deref(),
                &name,
                &options,
                w,
            ) {
                Ok(o) => {
                    changes.extend(o.changes);
                    deleted.push(o.object);
                }
                // Already gone or protected: skipped, as the collection delete does.
                Err(_) => continue,
            }
        }
        (deleted, changes, store.rv())
    };
    ctx.shared.after_commit(&changes);
    Ok(full(
        StatusCode::OK,
        "application/json",
        list_body(
            rr.res,
            &deleted,
            &json!({ "resourceVersion": rv.to_string() }),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let r = |p: &str| match route(p) {
            Route::Resource(rr) => Some((
                rr.res.plural,
                rr.namespace,
                rr.name,
                rr.subresource,
                rr.watch_path,
            )),
            _ => None,
        };
        assert_eq!(r("/api/v1/pods"), Some(("pods", None, None, None, false)));
        assert_eq!(
            r("/api/v1/namespaces/a/pods/p/status"),
            Some((
                "pods",
                Some("a".into()),
                Some("p".into()),
                Some("status".into()),
                false
            ))
        );
        assert_eq!(
            r("/api/v1/watch/namespaces/a/pods"),
            Some(("pods", Some("a".into()), None, None, true))
        );
        assert_eq!(
            r("/api/v1/namespaces/a"),
            Some(("namespaces", None, Some("a".into()), None, false))
        );
        assert_eq!(
            r("/api/v1/namespaces/a/status"),
            Some((
                "namespaces",
                None,
                Some("a".into()),
                Some("status".into()),
                false
            ))
        );
        assert_eq!(
            r("/apis/apps/v1/namespaces/a/deployments/d"),
            Some((
                "deployments",
                Some("a".into()),
                Some("d".into()),
                None,
                false
            ))
        );
        assert_eq!(r("/api/v1/pods/p"), None);
        assert_eq!(r("/api/v1/namespaces/a/pods/p/log"), None);
        assert_eq!(r("/api/v1/namespaces/a/nodes"), None);
        assert!(matches!(route("/apis/apps/v1"), Route::ResourceList(..)));
        assert!(matches!(route("/openapi/v2"), Route::NotFound));
    }

    #[test]
    fn content_negotiation() {
        assert_eq!(negotiate(None).unwrap(), Repr::Json);
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")).unwrap(),
            Repr::Table("v1")
        );
        assert_eq!(
            negotiate(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            ))
            .unwrap(),
            Repr::Meta("v1")
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf, */*")).unwrap(),
            Repr::Json
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"))
                .unwrap_err()
                .code,
            406
        );
    }

    #[test]
    fn continue_tokens_round_trip() {
        let key = ("ns".to_string(), "pod-1".to_string());
        let t = encode_continue(42, &key);
        assert_eq!(decode_continue(&t).unwrap(), (42, key));
        assert_eq!(decode_continue("garbage!").unwrap_err().code, 400);
        // URL-safe and unpadded, as the real server's (a token travels in a query string).
        assert!(!t.contains(['+', '/', '=']), "{t}");
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
    }

    #[test]
    fn bearer_tokens_name_users() {
        let mut h = HeaderMap::new();
        assert_eq!(authenticate(&h).unwrap(), "system:anonymous");
        h.insert(
            header::AUTHORIZATION,
            "Bearer user:system:initguard".parse().unwrap(),
        );
        assert_eq!(authenticate(&h).unwrap(), "system:initguard");
        h.insert(header::AUTHORIZATION, "Bearer other".parse().unwrap());
        assert_eq!(authenticate(&h).unwrap_err().code, 401);
    }
}
