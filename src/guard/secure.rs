//! The HTTPS listener (`secureListen`), as kube-scheduler and kube-controller-manager serve
//! theirs: `/metrics` and `/status` only for a bearer token that the API server authenticates
//! (TokenReview) and authorizes (SubjectAccessReview, `get` on the non-resource URL);
//! `/healthz` and `/readyz` open, for the kubelet's HTTPS probes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::ServingCert;
use crate::metrics::{Metrics, TlsReload};

/// How long a verdict is reused: the delegated authentication and authorization caches of
/// kube-scheduler and kube-controller-manager keep theirs 10 s too. A scrape every 15-30 s
/// then costs the API server about one TokenReview and one SubjectAccessReview.
pub const VERDICT_TTL: Duration = Duration::from_secs(10);
/// Most cached verdicts; a flood of distinct tokens cannot grow memory past this.
const MAX_CACHED: usize = 1024;
/// Bound on each review request: a slow API server fails the scrape, it does not hang it.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the HTTPS listener cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read tls.{key} {path}: {source}")]
    Read {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tls.certFile {path}: no usable PEM certificate: {reason}")]
    Certificate { path: PathBuf, reason: String },
    #[error("tls.keyFile {path}: no usable PEM private key: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("cannot generate a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("the certificate and key do not make a TLS server configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// How often the PEM files are read again for a renewed certificate. A Secret volume changes
/// within the kubelet's sync period (about a minute) and cert-manager renews a third of the
/// lifetime before expiry, so ten seconds more is nothing; reading two small files is cheap.
pub const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// The HTTPS listener's TLS: what to serve now and, for PEM files, how to keep it current.
pub struct ServingTls {
    /// The configuration to start with.
    pub config: rustls::ServerConfig,
    /// Set for PEM files: the renewal watcher, starting from what was read for `config`.
    pub reload: Option<Reload>,
}

/// The PEM files' contents as read: a renewal is a change of either.
struct Pem {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// The rustls configuration of the HTTPS listener: the given PEM files, or a self-signed
/// certificate generated now (the key never touches the disk).
pub fn server_config(cert: &ServingCert) -> Result<ServingTls, TlsError> {
    match cert {
        ServingCert::Files {
            cert_file,
            key_file,
        } => {
            let pem = read_pem(cert_file, key_file)?;
            let reload = Reload::new(cert_file, key_file, &pem);
            let config = reload.config_of(&pem)?;
            Ok(ServingTls {
                config,
                reload: Some(reload),
            })
        }
        ServingCert::SelfSigned => {
            let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
            if let Some(host) = hostname() {
                names.push(host);
            }
            let generated = rcgen::generate_simple_self_signed(names)?;
            let key = PrivatePkcs8KeyDer::from(generated.signing_key.serialize_der());
            Ok(ServingTls {
                config: build(vec![generated.cert.der().clone()], key.into())?,
                reload: None,
            })
        }
    }
}

fn read_pem(cert_file: &PathBuf, key_file: &PathBuf) -> Result<Pem, TlsError> {
    let read = |key: &'static str, path: &PathBuf| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            key,
            path: path.clone(),
            source,
        })
    };
    Ok(Pem {
        cert: read("certFile", cert_file)?,
        key: read("keyFile", key_file)?,
    })
}

fn build(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<rustls::ServerConfig, TlsError> {
    // Explicit provider: kube's TLS stack and ours both use ring, and no process-wide
    // default has to be installed first. A key that does not match the certificate is refused
    // here (rustls compares the public keys).
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    Ok(config)
}

/// Keeps the HTTPS listener's certificate current: a renewed pair of PEM files is served from
/// the next handshake on, without a restart. Files are compared by content, so an atomic
/// `..data` symlink swap of a Secret volume is seen like an in-place write; mount the
/// directory (a `subPath` or single-file mount misses a file replaced by a rename).
pub struct Reload {
    cert_file: PathBuf,
    key_file: PathBuf,
    /// SHA-256 of what is served: no copy of the private key is kept.
    loaded: Seen,
    /// An unusable read seen once: a renewal may be half-way (the two files are read one
    /// after the other), so it is refused only if the next look finds the same.
    suspect: Option<Seen>,
    /// The unusable read last refused, so that it is reported once, not every tick.
    refused: Option<Seen>,
}

/// A digest of one read of the files, or of why they could not be read.
type Seen = [u8; 32];

/// What one look at the files found.
#[derive(Debug)]
enum Look {
    /// Nothing to do: what is served, or an unusable read already reported or still settling.
    Nothing,
    /// A renewed pair: serve it.
    Renewed(Box<rustls::ServerConfig>),
    /// The same unusable read twice: report it; the previous certificate stays.
    Refused(String),
}

fn seen(read: Result<&Pem, &TlsError>) -> Seen {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    match read {
        Ok(pem) => {
            ctx.update(b"pem");
            ctx.update(&(pem.cert.len() as u64).to_be_bytes());
            ctx.update(&pem.cert);
            ctx.update(&pem.key);
        }
        Err(e) => {
            ctx.update(b"error");
            ctx.update(e.to_string().as_bytes());
        }
    }
    let mut out = [0; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

impl Reload {
    fn new(cert_file: &Path, key_file: &Path, pem: &Pem) -> Reload {
        Reload {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            loaded: seen(Ok(pem)),
            suspect: None,
            refused: None,
        }
    }

    fn config_of(&self, pem: &Pem) -> Result<rustls::ServerConfig, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&pem.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Certificate {
                path: self.cert_file.clone(),
                reason: e.to_string(),
            })?;
        if chain.is_empty() {
            return Err(TlsError::Certificate {
                path: self.cert_file.clone(),
                reason: "no CERTIFICATE block".to_owned(),
            });
        }
        let key = PrivateKeyDer::from_pem_slice(&pem.key).map_err(|e| TlsError::Key {
            path: self.key_file.clone(),
            reason: e.to_string(),
        })?;
        build(chain, key)
    }

    /// Decide on one read of the files.
    fn look(&mut self, read: Result<Pem, TlsError>) -> Look {
        let digest = seen(read.as_ref());
        if digest == self.loaded {
            (self.suspect, self.refused) = (None, None);
            return Look::Nothing;
        }
        let problem = match read.and_then(|pem| self.config_of(&pem)) {
            Ok(config) => {
                (self.loaded, self.suspect, self.refused) = (digest, None, None);
                return Look::Renewed(Box::new(config));
            }
            Err(e) => e.to_string(),
        };
        if self.refused == Some(digest) {
            return Look::Nothing;
        }
        if self.suspect != Some(digest) {
            self.suspect = Some(digest);
            return Look::Nothing;
        }
        (self.suspect, self.refused) = (None, Some(digest));
        Look::Refused(problem)
    }

    /// Reads the files every `every` until `cancel`, and swaps a changed pair into `served`
    /// once it makes a valid configuration. A read that does not (a missing file, a key of
    /// another certificate) on two looks in a row is logged and counted once; the previous
    /// certificate stays served until the files change again.
    pub async fn run(
        mut self,
        served: RustlsConfig,
        metrics: Arc<Metrics>,
        every: Duration,
        cancel: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.look(read_pem(&self.cert_file, &self.key_file)) {
                Look::Nothing => {}
                Look::Renewed(config) => {
                    served.reload_from_config(Arc::new(*config));
                    info!(cert_file = %self.cert_file.display(), "serving the renewed TLS certificate");
                    metrics.tls_reload(TlsReload::Loaded);
                }
                Look::Refused(problem) => {
                    warn!(error = %problem, "the TLS files changed but are not usable; serving the previous certificate");
                    metrics.tls_reload(TlsReload::Refused);
                }
            }
        }
    }
}

/// The node's name for the self-signed certificate (the static pod runs on the host network).
fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// What the API server said about one token asking for one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Authenticated as this user, and allowed.
    Allowed { user: String },
    /// Not a token the API server accepts (401).
    Unauthenticated,
    /// Authenticated, but not allowed to `get` the path (403).
    Forbidden { user: String, reason: String },
}

/// Why no verdict could be had: the API server did not answer the reviews.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("TokenReview failed: {0}")]
    TokenReview(kube::Error),
    #[error("SubjectAccessReview failed: {0}")]
    AccessReview(kube::Error),
    #[error("the API server did not answer the {0} within {REVIEW_TIMEOUT:?}")]
    Timeout(&'static str),
}

/// Delegated authentication and authorization: the API server decides, a short cache spares
/// it a review per scrape.
pub struct Delegated {
    client: kube::Client,
    cache: Mutex<Verdicts>,
}

impl Delegated {
    /// Reviews through `client`, which needs `create` on `tokenreviews` and
    /// `subjectaccessreviews` (deploy/rbac.yaml).
    pub fn new(client: kube::Client) -> Delegated {
        Delegated {
            client,
            cache: Mutex::new(Verdicts::new(VERDICT_TTL, MAX_CACHED)),
        }
    }

    /// The verdict for `token` asking to `get` `path`, from the cache or the API server.
    /// Errors are never cached: the next request asks again.
    pub async fn verdict(&self, token: &str, path: &str) -> Result<Verdict, ReviewError> {
        let key = Verdicts::key(token, path);
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key, Instant::now());
        if let Some(cached) = cached {
            return Ok(cached);
        }
        let verdict = self.review(token, path).await?;
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(
            key,
            verdict.clone(),
            Instant::now(),
        );
        Ok(verdict)
    }

    async fn review(&self, token: &str, path: &str) -> Result<Verdict, ReviewError> {
        let tokens: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = tokio::time::timeout(
            REVIEW_TIMEOUT,
            tokens.create(&PostParams::default(), &review),
        )
        .await
        .map_err(|_| ReviewError::Timeout("TokenReview"))?
        .map_err(ReviewError::TokenReview)?;
        let status = reviewed.status.unwrap_or_default();
        let user = match status.user {
            Some(user) if status.authenticated == Some(true) => user,
            _ => {
                debug!(
                    error = status.error.as_deref().unwrap_or(""),
                    "token not authenticated"
                );
                return Ok(Verdict::Unauthenticated);
            }
        };
        let name = user.username.clone().unwrap_or_default();
        let access: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let reviewed = tokio::time::timeout(
            REVIEW_TIMEOUT,
            access.create(&PostParams::default(), &review),
        )
        .await
        .map_err(|_| ReviewError::Timeout("SubjectAccessReview"))?
        .map_err(ReviewError::AccessReview)?;
        let status = reviewed.status.unwrap_or_default();
        if status.allowed && status.denied != Some(true) {
            Ok(Verdict::Allowed { user: name })
        } else {
            Ok(Verdict::Forbidden {
                user: name,
                reason: status.reason.unwrap_or_default(),
            })
        }
    }
}

/// Cached verdicts by (SHA-256 of the token, path): a token is never kept, so a memory dump
/// of the guard yields no credential. Entries expire by age; at `max` entries the expired
/// ones go, then the oldest, so a flood of distinct tokens cannot grow memory.
#[derive(Debug)]
struct Verdicts {
    ttl: Duration,
    max: usize,
    entries: HashMap<VerdictKey, (Instant, Verdict)>,
}

/// The cache key of one token asking for one path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct VerdictKey {
    token_sha256: [u8; 32],
    path: String,
}

impl Verdicts {
    fn new(ttl: Duration, max: usize) -> Verdicts {
        Verdicts {
            ttl,
            max: max.max(1),
            entries: HashMap::new(),
        }
    }

    fn key(token: &str, path: &str) -> VerdictKey {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut token_sha256 = [0; 32];
        token_sha256.copy_from_slice(digest.as_ref());
        VerdictKey {
            token_sha256,
            path: path.to_owned(),
        }
    }

    /// The verdict cached for `key`, unless it is older than the TTL at `now`.
    fn get(&mut self, key: &VerdictKey, now: Instant) -> Option<Verdict> {
        match self.entries.get(key) {
            Some((at, verdict)) if now.saturating_duration_since(*at) < self.ttl => {
                Some(verdict.clone())
            }
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: VerdictKey, verdict: Verdict, now: Instant) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.max {
            let ttl = self.ttl;
            self.entries
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
            while self.entries.len() >= self.max {
                let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (now, verdict));
    }
}

/// Middleware for the protected routes: 401 without an accepted bearer token, 403 without
/// permission, 503 when the API server cannot be asked.
pub async fn require_token(
    State(delegated): State<Arc<Delegated>>,
    request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    let Some(token) = token else {
        return unauthorized("a bearer token is required");
    };
    let path = request.uri().path().to_owned();
    match delegated.verdict(token, &path).await {
        Ok(Verdict::Allowed { .. }) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => unauthorized("the bearer token was not accepted"),
        Ok(Verdict::Forbidden { user, reason }) => {
            debug!(%user, %path, %reason, "forbidden");
            // The API server's own wording for a denied non-resource URL.
            let mut body = format!("forbidden: User \"{user}\" cannot get path \"{path}\"");
            if !reason.is_empty() {
                body.push_str(": ");
                body.push_str(&reason);
            }
            body.push('\n');
            (StatusCode::FORBIDDEN, body).into_response()
        }
        Err(e) => {
            warn!(error = %e, %path, "cannot check a caller's token");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot check the token with the API server: {e}\n"),
            )
                .into_response()
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` header (scheme case-insensitive, RFC 7235).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unauthorized(why: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        format!("Unauthorized: {why}\n"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_cache_keeps_no_token_expires_by_age_and_stays_bounded() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(10);
        let mut cache = Verdicts::new(ttl, 3);
        let allowed = Verdict::Allowed {
            user: "prometheus".into(),
        };
        let token = "eyJhbGciOiJSUzI1NiJ9.secret-token";
        cache.insert(Verdicts::key(token, "/metrics"), allowed.clone(), t0);
        assert!(
            !format!("{cache:?}").contains("secret-token"),
            "the cache holds the raw token"
        );
        // Same token and path: cached until the TTL; another path or token is another entry.
        let key = Verdicts::key(token, "/metrics");
        assert_eq!(
            cache.get(&key, t0 + ttl - Duration::from_millis(1)),
            Some(allowed.clone())
        );
        assert_eq!(cache.get(&Verdicts::key(token, "/status"), t0), None);
        assert_eq!(cache.get(&Verdicts::key("other", "/metrics"), t0), None);
        assert_eq!(
            cache.get(&key, t0 + ttl),
            None,
            "an expired verdict was reused"
        );
        assert!(cache.entries.is_empty(), "an expired verdict was kept");

        // Full: expired entries go first, then the oldest.
        for (i, token) in ["a", "b", "c"].iter().enumerate() {
            cache.insert(
                Verdicts::key(token, "/metrics"),
                allowed.clone(),
                t0 + Duration::from_secs(i as u64),
            );
        }
        cache.insert(
            Verdicts::key("d", "/metrics"),
            allowed.clone(),
            t0 + Duration::from_secs(3),
        );
        assert_eq!(cache.entries.len(), 3);
        let at = t0 + Duration::from_secs(3);
        assert_eq!(
            cache.get(&Verdicts::key("a", "/metrics"), at),
            None,
            "the oldest was kept"
        );
        for token in ["b", "c", "d"] {
            assert!(
                cache.get(&Verdicts::key(token, "/metrics"), at).is_some(),
                "{token}"
            );
        }
        // At t0 + 11 s, "b" (t0 + 1 s) has expired: it goes, the rest stay.
        let later = t0 + Duration::from_secs(11);
        cache.insert(Verdicts::key("e", "/metrics"), allowed.clone(), later);
        assert_eq!(cache.entries.len(), 3);
        assert!(cache.get(&Verdicts::key("c", "/metrics"), later).is_some());
        assert!(cache.get(&Verdicts::key("d", "/metrics"), later).is_some());
    }

    #[test]
    fn bearer_takes_only_a_nonempty_bearer_token() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn a_self_signed_certificate_makes_a_server_config() {
        let config = server_config(&ServingCert::SelfSigned);
        assert!(config.is_ok(), "{:?}", config.err());
    }

    #[test]
    fn missing_files_name_the_key_and_the_path() {
        let err = server_config(&ServingCert::Files {
            cert_file: "/nonexistent/cert.pem".into(),
            key_file: "/nonexistent/key.pem".into(),
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.starts_with("cannot read tls.certFile /nonexistent/cert.pem:"),
            "{err}"
        );
    }

    /// A self-signed certificate and its key, as PEM.
    fn pair() -> (String, String) {
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        (generated.cert.pem(), generated.signing_key.serialize_pem())
    }

    /// A `Reload` of `cert.pem`/`key.pem` in a fresh directory holding `first`, and a writer
    /// of the next pair.
    fn watched(first: &(String, String)) -> (tempfile::TempDir, Reload, impl Fn(&str, &str)) {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let write = {
            let (cert, key) = (cert.clone(), key.clone());
            move |c: &str, k: &str| {
                std::fs::write(&cert, c).unwrap();
                std::fs::write(&key, k).unwrap();
            }
        };
        write(&first.0, &first.1);
        let tls = server_config(&ServingCert::Files {
            cert_file: cert,
            key_file: key,
        })
        .unwrap();
        (dir, tls.reload.unwrap(), write)
    }

    fn look(reload: &mut Reload) -> &'static str {
        match reload.look(read_pem(&reload.cert_file, &reload.key_file)) {
            Look::Nothing => "nothing",
            Look::Renewed(_) => "renewed",
            Look::Refused(_) => "refused",
        }
    }

    #[test]
    fn a_renewed_pair_is_taken_once() {
        let (a, b) = (pair(), pair());
        let (_dir, mut reload, write) = watched(&a);
        assert_eq!(look(&mut reload), "nothing", "unchanged files");
        write(&b.0, &b.1);
        assert_eq!(look(&mut reload), "renewed");
        assert_eq!(look(&mut reload), "nothing", "already served");
        write(&a.0, &a.1);
        assert_eq!(look(&mut reload), "renewed", "back to the first pair");
    }

    #[test]
    fn an_unusable_pair_is_refused_on_the_second_look_and_reported_once() {
        let (a, b) = (pair(), pair());
        let (_dir, mut reload, write) = watched(&a);
        // b's certificate with a's key: rustls refuses the mismatch.
        write(&b.0, &a.1);
        assert_eq!(look(&mut reload), "nothing", "may be a renewal half-way");
        assert_eq!(look(&mut reload), "refused");
        for _ in 0..3 {
            assert_eq!(look(&mut reload), "nothing", "reported once");
        }
        write(&b.0, &b.1);
        assert_eq!(look(&mut reload), "renewed");
    }

    #[test]
    fn a_renewal_caught_half_way_is_never_refused() {
        let (a, b) = (pair(), pair());
        let (_dir, mut reload, write) = watched(&a);
        write(&b.0, &a.1);
        assert_eq!(look(&mut reload), "nothing");
        write(&b.0, &b.1);
        assert_eq!(look(&mut reload), "renewed");
    }

    #[test]
    fn a_missing_file_is_refused_once_and_again_after_it_came_back() {
        let a = pair();
        let (dir, mut reload, write) = watched(&a);
        std::fs::remove_file(dir.path().join("key.pem")).unwrap();
        assert_eq!(look(&mut reload), "nothing");
        assert_eq!(look(&mut reload), "refused");
        assert_eq!(look(&mut reload), "nothing");
        write(&a.0, &a.1);
        assert_eq!(look(&mut reload), "nothing", "what is served is back");
        std::fs::remove_file(dir.path().join("key.pem")).unwrap();
        assert_eq!(look(&mut reload), "nothing");
        assert_eq!(
            look(&mut reload),
            "refused",
            "a new episode is reported again"
        );
    }
}
