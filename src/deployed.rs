//! Where the read-only commands (`status`, `why`, also as `kubectl initguard`) find the guard's
//! configuration: a file given with `--config`, a ConfigMap given with `--config-map`, the file
//! the guard's pod mounts when run inside it, else the chart's ConfigMap, found by the chart's
//! name label. A reader on a laptop thus needs no copy of the configuration, only the right to
//! read it.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

use crate::config::{Config, ConfigError, Elsewhere, ObjectRef, OwnerSpec};

/// The label the chart puts on its objects (with the default `nameOverride`).
pub const CHART_SELECTOR: &str = "app.kubernetes.io/name=initguard";
/// The ConfigMap key the chart renders the configuration into.
pub const CONFIG_KEY: &str = "config.yaml";

/// Where the configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file on this machine.
    File(PathBuf),
    /// A ConfigMap's `config.yaml`.
    ConfigMap(ObjectRef),
    /// The one ConfigMap labelled [`CHART_SELECTOR`] that holds `config.yaml`.
    Find,
}

impl Source {
    /// `--config`, else `--config-map`, else `in_pod` when it exists (inside the guard's pod),
    /// else the chart's ConfigMap.
    pub fn from_args(file: Option<PathBuf>, config_map: Option<ObjectRef>, in_pod: &Path) -> Self {
        match (file, config_map) {
            (Some(file), _) => Source::File(file),
            (None, Some(object)) => Source::ConfigMap(object),
            (None, None) if in_pod.is_file() => Source::File(in_pod.to_owned()),
            (None, None) => Source::Find,
        }
    }
}

/// A configuration and where it was read.
#[derive(Debug)]
pub struct Deployed {
    pub config: Config,
    /// The file, or `ConfigMap NAMESPACE/NAME`.
    pub from: String,
    /// What was left out of a configuration read from the cluster, for the reader.
    pub left_out: Vec<String>,
}

const ASK: &str = "pass --config FILE or --config-map NAMESPACE/NAME";

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DeployedError {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("you may not {verb} ConfigMaps {scope} ({reason}); {ASK}")]
    Forbidden {
        verb: &'static str,
        scope: String,
        reason: String,
    },
    #[error("no ConfigMap {0}; {ASK}")]
    NotFound(String),
    #[error("ConfigMap {0} has no key {CONFIG_KEY}")]
    NoKey(String),
    #[error(
        "no ConfigMap labelled {CHART_SELECTOR} holds {CONFIG_KEY} (is the chart installed, \
         with another nameOverride?); {ASK}"
    )]
    NoneFound,
    #[error("{} ConfigMaps labelled {CHART_SELECTOR} hold {CONFIG_KEY} ({}); pass --config-map \
             NAMESPACE/NAME", .0.len(), .0.join(", "))]
    Several(Vec<String>),
    #[error("reading ConfigMap {what}: {source}")]
    Read { what: String, source: kube::Error },
    #[error(transparent)]
    Connect(#[from] crate::status::ConnectError),
}

/// [`read`] with a client of `kubeconfig` (as `status` and `why` resolve it) that sends no
/// legacy parameters: ConfigMaps read the same on every version.
pub async fn connect_and_read(
    kubeconfig: Option<&Path>,
    source: &Source,
) -> Result<Deployed, DeployedError> {
    let connection =
        crate::status::connect_for(kubeconfig, crate::config::Mechanism::SchedulingGates).await?;
    read(&connection.client, source).await
}

/// Reads the configuration from `source`. The TLS and CA files a ConfigMap's configuration
/// names are in the guard's pod: their paths are kept, their contents unchecked.
pub async fn read(client: &kube::Client, source: &Source) -> Result<Deployed, DeployedError> {
    let (namespace, name, data) = match source {
        Source::File(path) => {
            return Ok(Deployed {
                config: crate::config::load(path)?,
                from: path.display().to_string(),
                left_out: Vec::new(),
            });
        }
        Source::ConfigMap(object) => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &object.namespace);
            let what = object.to_string();
            match api.get_opt(&object.name).await {
                Ok(Some(map)) => (object.namespace.clone(), object.name.clone(), map.data),
                Ok(None) => return Err(DeployedError::NotFound(what)),
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    return Err(DeployedError::Forbidden {
                        verb: "get",
                        scope: format!("in namespace {}", object.namespace),
                        reason: e.message,
                    });
                }
                Err(source) => return Err(DeployedError::Read { what, source }),
            }
        }
        Source::Find => {
            let api: Api<ConfigMap> = Api::all(client.clone());
            let list = match api
                .list(&ListParams::default().labels(CHART_SELECTOR))
                .await
            {
                Ok(list) => list,
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    return Err(DeployedError::Forbidden {
                        verb: "list",
                        scope: "in all namespaces".to_owned(),
                        reason: e.message,
                    });
                }
                Err(source) => {
                    return Err(DeployedError::Read {
                        what: format!("labelled {CHART_SELECTOR}"),
                        source,
                    });
                }
            };
            let mut found: Vec<ConfigMap> = list
                .items
                .into_iter()
                .filter(|m| m.data.as_ref().is_some_and(|d| d.contains_key(CONFIG_KEY)))
                .collect();
            match found.len() {
                0 => return Err(DeployedError::NoneFound),
                1 => {
                    let map = found.remove(0);
                    (
                        map.metadata.namespace.unwrap_or_default(),
                        map.metadata.name.unwrap_or_default(),
                        map.data,
                    )
                }
                _ => {
                    let mut names: Vec<String> = found
                        .iter()
                        .map(|m| {
                            format!(
                                "{}/{}",
                                m.metadata.namespace.as_deref().unwrap_or_default(),
                                m.metadata.name.as_deref().unwrap_or_default()
                            )
                        })
                        .collect();
                    names.sort();
                    return Err(DeployedError::Several(names));
                }
            }
        }
    };
    let from = format!("ConfigMap {namespace}/{name}");
    let text = data
        .as_ref()
        .and_then(|d| d.get(CONFIG_KEY))
        .ok_or_else(|| DeployedError::NoKey(format!("{namespace}/{name}")))?;
    let mut config = Config::from_yaml_with(text, &format!("{from} {CONFIG_KEY}"), &Elsewhere)?;
    let left_out = without_http_owners(&mut config);
    Ok(Deployed {
        config,
        from,
        left_out,
    })
}

/// http owners of a configuration read from the cluster are the guard pod's to probe: from
/// here the network differs, and their TLS files would be this machine's (whoever may write a
/// labelled ConfigMap must not make a reader present its own client certificate somewhere).
/// An initializer keeps its deadline and loses the owner (unknown here); a webhook whose owner
/// is http is left out.
fn without_http_owners(config: &mut Config) -> Vec<String> {
    let mut left_out = Vec::new();
    for entry in &mut config.initializers {
        if let Some(OwnerSpec::Http { url, .. }) = &entry.owner {
            left_out.push(format!(
                "the owner of {} (http {url}) is probed from the guard's pod only, not from here: \
                 the guard's /status says its state",
                entry.name
            ));
            entry.owner = None;
        }
    }
    config.webhooks.retain(|webhook| match &webhook.owner {
        Some(OwnerSpec::Http { url, .. }) => {
            left_out.push(format!(
                "webhook {} is left out: its owner (http {url}) is probed from the guard's pod only",
                webhook.id
            ));
            false
        }
        _ => true,
    });
    left_out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_from_the_cluster_probes_no_http_owner_from_here() {
        let text = "initializers:\n\
                    - { name: a, owner: { http: { url: https://a.example:8443/, caFile: /ca.pem } } }\n\
                    - { name: b, owner: { deployment: ops/b } }\n";
        let mut config = Config::from_yaml_with(text, "cluster", &Elsewhere).unwrap();
        let left_out = without_http_owners(&mut config);
        assert_eq!(
            config.initializers[0].owner, None,
            "a keeps its deadline only"
        );
        assert!(matches!(
            config.initializers[1].owner,
            Some(OwnerSpec::Deployment(_))
        ));
        assert_eq!(left_out.len(), 1);
        assert!(
            left_out[0].contains("owner of a (http https://a.example:8443/)"),
            "{left_out:?}"
        );
    }

    #[test]
    fn flags_win_then_the_pods_file_then_the_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let mounted = dir.path().join("config.yaml");
        let object = ObjectRef {
            namespace: "ops".into(),
            name: "guard".into(),
        };
        let given = PathBuf::from("mine.yaml");
        assert_eq!(
            Source::from_args(Some(given.clone()), Some(object.clone()), &mounted),
            Source::File(given)
        );
        assert_eq!(
            Source::from_args(None, Some(object.clone()), &mounted),
            Source::ConfigMap(object)
        );
        assert_eq!(Source::from_args(None, None, &mounted), Source::Find);
        std::fs::write(&mounted, "{}").unwrap();
        assert_eq!(
            Source::from_args(None, None, &mounted),
            Source::File(mounted.clone())
        );
        // A directory is not the pod's file.
        assert_eq!(Source::from_args(None, None, dir.path()), Source::Find);
    }
}
