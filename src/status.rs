//! `initguard status`: a one-shot, read-only report of waiting pods, their waits, their owners'
//! states and what the guard would do now.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use tokio_util::sync::CancellationToken;

use crate::client::Connection;
use crate::config::Config;
use crate::environment::Env;
use crate::metrics::{Metrics, MetricsError};
use crate::node_stage::stage::StageTracker;
use crate::owners::Owners;
use crate::pod::SlimPod;
use crate::policy::{OwnerState, Plan};
use crate::report::{Report, pod_statuses};
use crate::supervise::{Failures, Readiness};
use crate::tracker::Tracker;

/// How long to wait for owners' initial observation before reporting them unknown.
const OWNER_SYNC_TIMEOUT: Duration = Duration::from_secs(5);
const PAGE: u32 = 500;

/// Errors of the one-shot report.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("cannot connect to the API server: {0}")]
    Connect(#[from] ConnectError),
    #[error("listing pods: {0}")]
    List(#[source] kube::Error),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
}

/// Errors building a client.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error(
        "no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a cluster: {0}"
    )]
    Infer(#[from] kube::config::InferConfigError),
    #[error("building the client: {0}")]
    Client(#[from] kube::Error),
}

/// A client from `--kubeconfig`, else `$KUBECONFIG`/`~/.kube/config`, else in-cluster.
pub async fn connect(
    kubeconfig: Option<&Path>,
    config: &Config,
) -> Result<Connection, ConnectError> {
    connect_for(kubeconfig, config.mechanism).await
}

/// A client as [`connect`] builds it, for `mechanism` without a configuration (`why`).
pub async fn connect_for(
    kubeconfig: Option<&Path>,
    mechanism: crate::config::Mechanism,
) -> Result<Connection, ConnectError> {
    let kube_config = match kubeconfig {
        Some(path) => {
            let err = |source| ConnectError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(err)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(err)?
        }
        None => kube::Config::infer().await?,
    };
    Ok(crate::client::connect(kube_config, mechanism)?)
}

/// Gather the report from the cluster `client` talks to.
pub async fn gather(
    connection: impl Into<Connection>,
    config: Arc<Config>,
) -> Result<Report, StatusError> {
    Ok(gather_from(connection.into(), config, None).await?.0)
}

/// The report restricted to one pod already read (`why`): its plan, the owners its pending
/// initializers wait on, and what could not be read (said, not guessed). Only those owners are
/// read; neither other pods nor webhooks, so it needs no rights beyond the pod's namespace and
/// its owners.
pub async fn gather_pod(
    connection: impl Into<Connection>,
    config: &Config,
    pod: &SlimPod,
) -> Result<(Report, Vec<String>), StatusError> {
    let pending = pod.pending(config.mechanism);
    let mut mine = config.clone();
    mine.initializers.retain(|i| pending.contains(&i.name));
    mine.webhooks.clear();
    gather_from(connection.into(), Arc::new(mine), Some(pod)).await
}

async fn gather_from(
    connection: Connection,
    config: Arc<Config>,
    one: Option<&SlimPod>,
) -> Result<(Report, Vec<String>), StatusError> {
    let mut unread = Vec::new();
    let Connection { client, clock } = connection;
    let discovery = crate::discovery::Discovery::new(client.clone());
    // One read of the listed webhook configurations serves their status and the owners of
    // those without one (their Service, as in the running guard).
    let all = one.is_none();
    let configurations =
        crate::guard::webhooks::read_configurations(&client, &discovery, &config, |_| all).await;
    let derived = crate::guard::webhooks::service_owners(&config, &configurations);
    let config = if derived.is_empty() {
        config
    } else {
        let mut resolved = (*config).clone();
        for (index, owner) in derived {
            resolved.webhooks[index].owner = Some(owner);
        }
        Arc::new(resolved)
    };
    let cancel = CancellationToken::new();
    let _stop = cancel.clone().drop_guard();
    let metrics = Arc::new(Metrics::new(&config)?);
    // A one-shot report: a panicked owner watcher is logged and its owner stays unknown.
    let owners = Owners::spawn(
        client.clone(),
        &discovery,
        &config,
        metrics,
        &Failures::default(),
        &Readiness::default(),
        cancel.child_token(),
    );
    let _ = tokio::time::timeout(OWNER_SYNC_TIMEOUT, owners.wait_synced()).await;

    let clock_for_stage = clock.clone();
    let mut tracker = Tracker::new(config.clone()).with_clock(clock);
    let now = SystemTime::now();
    if config.opt_in.selector.is_some() {
        // Which namespaces optIn.namespaceSelector opts in; unreadable: none (never early).
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let read = match one.and_then(|pod| pod.metadata.namespace.as_deref()) {
            Some(namespace) => namespaces.get(namespace).await.map(|ns| vec![ns]),
            None => namespaces
                .list(&ListParams::default())
                .await
                .map(|list| list.items),
        };
        match read {
            Ok(list) => {
                for ns in list {
                    let labels = ns.metadata.labels.unwrap_or_default();
                    let name = ns.metadata.name.unwrap_or_default();
                    tracker.set_namespace_selected(&name, config.selects_namespace(&labels));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e,
                    "cannot read Namespaces: no pod counts as opted in by optIn.namespaceSelector");
                unread.push(format!(
                    "whether optIn.namespaceSelector opts the namespace in: cannot read it ({e}); \
                     counted as not"
                ));
            }
        }
    }
    // The node stage: its DaemonSets read once, their agents and the waiting pods from the
    // same pods (for one pod: its DaemonSets' pods on its node).
    let mut stage = StageTracker::new(config.clone()).with_clock(clock_for_stage);
    read_daemonsets(&client, &discovery, &config, &mut stage, now, &mut unread).await;
    match one {
        Some(pod) => {
            if let Some(node) = pod.init.as_ref().map(|p| p.node.clone()) {
                read_agents(&client, &config, &node, &mut stage, now, &mut unread).await;
            }
            tracker.apply(pod, now);
            stage.apply(pod, now);
        }
        None => {
            let api: Api<SlimPod> = Api::all(client.clone());
            let mut params = ListParams::default().limit(PAGE);
            loop {
                let page = api.list(&params).await.map_err(StatusError::List)?;
                for pod in &page.items {
                    tracker.apply(pod, now);
                    if !config.init_containers.is_empty() {
                        stage.apply(pod, now);
                    }
                }
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
        }
    }
    // A one-shot report has no history of when each legacy head became the head.
    tracker.assume_heads_since_creation(now);
    let env = Env {
        tracker: &tracker,
        owners: &owners,
        now,
    };
    let waiting_pods = pod_statuses(&tracker, &env, &config, now, usize::MAX);
    let webhooks = crate::guard::webhooks::statuses(&config, &configurations, &owners);
    let init_containers = stage.statuses(
        &|ns| tracker.namespace_selected(ns),
        &crate::node_stage::cluster_owners_unknown,
        now,
        usize::MAX,
    );
    let report = Report {
        mechanism: config.mechanism.as_str(),
        owners: owners.snapshot(),
        waiting_pods,
        webhooks,
        init_containers,
    };
    Ok((report, unread))
}

/// Each DaemonSet the node stage names, read once: found (its uid) or not found (down on
/// every node); unreadable ones stay unknown and are said in `unread`.
async fn read_daemonsets(
    client: &kube::Client,
    discovery: &crate::discovery::Discovery,
    config: &Config,
    stage: &mut StageTracker,
    now: SystemTime,
    unread: &mut Vec<String>,
) {
    let listed = crate::node_stage::daemonset_owners(config);
    if listed.is_empty() {
        return;
    }
    // In the group version the server serves them, as the running guard reads them.
    let resource = match discovery.surface().await {
        Ok(surface) => surface.daemonsets(),
        Err(e) => {
            unread.push(format!(
                "cannot read discovery ({}); the node stage's daemonset owners count as unknown",
                crate::owners::error_chain(&e)
            ));
            return;
        }
    };
    let Some(resource) = resource else {
        unread.push(format!(
            "no DaemonSet API served ({}); the node stage's daemonset owners count as unknown",
            kube_common::daemonset_group_versions()
        ));
        return;
    };
    for (ds, _) in listed {
        // Listed by name, as the running guard watches it (its RBAC: list and watch only).
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), &ds.namespace, &resource);
        let params = ListParams::default().fields(&format!("metadata.name={}", ds.name));
        let read = api.list(&params).await;
        let Some(agents) = stage.agents_mut(ds) else {
            continue;
        };
        match read.map(|list| list.items.into_iter().next()) {
            Ok(Some(found)) => {
                agents.daemonset_applied(found.metadata.uid.as_deref().unwrap_or_default(), now)
            }
            Ok(None) => agents.daemonset_gone(now),
            Err(e) => unread.push(format!(
                "DaemonSet {}/{}: cannot read it ({e}); its steps' owner counts as unknown",
                ds.namespace, ds.name
            )),
        }
    }
}

/// The pods of the node stage's DaemonSets on `node` (for `why` of one pod).
async fn read_agents(
    client: &kube::Client,
    config: &Config,
    node: &str,
    stage: &mut StageTracker,
    now: SystemTime,
    unread: &mut Vec<String>,
) {
    let namespaces: std::collections::BTreeSet<&str> = crate::node_stage::daemonset_owners(config)
        .into_iter()
        .map(|(ds, _)| ds.namespace.as_str())
        .collect();
    for namespace in namespaces {
        let api: Api<SlimPod> = Api::namespaced(client.clone(), namespace);
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        match api.list(&params).await {
            Ok(list) => {
                for pod in &list.items {
                    stage.apply(pod, now);
                }
            }
            Err(e) => unread.push(format!(
                "the agents in {namespace} on node {node}: cannot list them ({e}); the step's \
                 owner counts as down there"
            )),
        }
    }
}

/// The report as a human table.
pub fn render_table(report: &Report, now: SystemTime) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "mechanism: {}", report.mechanism);
    if report.owners.is_empty() {
        let _ = writeln!(out, "owners: none configured");
    } else {
        let _ = writeln!(out, "\nOWNER OF\tKIND\tTARGET\tSTATE");
        for o in &report.owners {
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}",
                o.initializer,
                o.owner_kind,
                o.target,
                state_words(o.state, &o.detail, now)
            );
        }
    }
    if !report.webhooks.is_empty() {
        let _ = writeln!(out, "\nWEBHOOK\tSTATE\tOWNER\tSINCE");
        for w in &report.webhooks {
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}",
                w.webhook,
                w.state,
                state_words(w.owner, "not observed", now),
                w.bypassed_since.as_deref().unwrap_or("-")
            );
        }
    }
    let _ = writeln!(out, "\n{} waiting pod(s)", report.waiting_pods.len());
    if report.waiting_pods.is_empty() {
        render_init(&mut out, report);
        return align(&out);
    }
    let _ = writeln!(out, "NAMESPACE\tPOD\tOPTED-IN\tINITIALIZER\tWAITED\tPLAN");
    for p in &report.waiting_pods {
        for i in &p.initializers {
            let waited = i.waited.map_or_else(|| "-".to_owned(), short);
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}",
                p.namespace,
                p.name,
                if p.opted_in { "yes" } else { "no" },
                i.initializer,
                waited,
                plan_words(&i.plan, now)
            );
        }
    }
    render_init(&mut out, report);
    align(&out)
}

/// The node stage's block: each pod waiting on a listed init container, in words (one line
/// per pod: the sentence is the alignment's last column).
fn render_init(out: &mut String, report: &Report) {
    if report.init_containers.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{} pod(s) waiting on init containers",
        report.init_containers.len()
    );
    let _ = writeln!(out, "NAMESPACE\tPOD\tOPTED-IN\tNODE\tWHY");
    for p in &report.init_containers {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}",
            p.namespace,
            p.name,
            if p.opted_in { "yes" } else { "no" },
            p.node,
            p.explanation
        );
    }
}

pub(crate) fn state_words(state: OwnerState, detail: &str, now: SystemTime) -> String {
    let ago = |t: SystemTime| short(now.duration_since(t).unwrap_or_default());
    match state {
        // Why it is unknown (not found, forbidden…) is what the reader needs to act.
        OwnerState::Unknown => format!("unknown ({detail})"),
        OwnerState::Up { since } => format!("up for {}", ago(since)),
        OwnerState::Down { since } => format!("DOWN for {}", ago(since)),
    }
}

pub(crate) fn plan_words(plan: &Plan, now: SystemTime) -> String {
    match plan {
        Plan::Bypass { reason } => format!("bypass now ({})", reason.as_str()),
        Plan::BypassAt { at, reason } => {
            format!(
                "bypass in {} ({})",
                short(at.duration_since(now).unwrap_or_default()),
                reason.as_str()
            )
        }
        Plan::Never { why } => format!("none: {why}"),
    }
}

pub(crate) fn short(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// Aligns tab-separated columns in each block of lines.
fn align(text: &str) -> String {
    let mut out = String::new();
    for block in text.split("\n\n") {
        let rows: Vec<Vec<&str>> = block.lines().map(|l| l.split('\t').collect()).collect();
        let mut widths: BTreeMap<usize, usize> = BTreeMap::new();
        for row in rows.iter().filter(|r| r.len() > 1) {
            for (i, cell) in row.iter().enumerate() {
                let w = widths.entry(i).or_default();
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in &rows {
            let last = row.len().saturating_sub(1);
            for (i, cell) in row.iter().enumerate() {
                out.push_str(cell);
                if i < last {
                    let pad = widths.get(&i).copied().unwrap_or(0) - cell.chars().count() + 2;
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out.trim_end().to_owned() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_per_block() {
        let text = "title\n\nA\tBB\tC\nlonger\tx\ty\n";
        assert_eq!(align(text), "title\n\nA       BB  C\nlonger  x   y\n");
    }
}
