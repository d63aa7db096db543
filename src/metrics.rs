//! Prometheus metrics (README "Observe"): one registry, names and labels exactly as listed.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::config::Config;
use crate::policy::{Reason, RefusedBy};
use crate::tracker::WaitEnd;

/// Most distinct unlisted initializer names given their own label value; the rest are `other`.
pub const MAX_UNLISTED_LABELS: usize = 50;

/// Buckets for waits from 50 ms to 30 min.
const WAIT_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0,
    1800.0,
];

/// What became of one Event (`initguard_events_total`'s `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    /// The API server created it.
    Written,
    /// The API server refused it or did not answer in time.
    Failed,
    /// Never sent: this replica stopped leading, or the queue of Events was full.
    Dropped,
    /// Already there (409): an `InitializerWaiting` Event an earlier run or another replica
    /// wrote under the same name.
    Exists,
}

impl EventOutcome {
    /// Value of the `outcome` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            EventOutcome::Written => "written",
            EventOutcome::Failed => "failed",
            EventOutcome::Dropped => "dropped",
            EventOutcome::Exists => "exists",
        }
    }
}

/// What became of a renewed pair of TLS files (`initguard_tls_reloads_total`'s `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsReload {
    /// Served from the next handshake on.
    Loaded,
    /// Unreadable, or not a usable certificate and key: the previous certificate stays.
    Refused,
}

impl TlsReload {
    /// Value of the `outcome` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsReload::Loaded => "loaded",
            TlsReload::Refused => "refused",
        }
    }
}

/// Every metric the guard exports.
pub struct Metrics {
    registry: Registry,
    pub waiting_pods: IntGaugeVec,
    pub oldest_wait_seconds: GaugeVec,
    pub wait_duration_seconds: HistogramVec,
    pub bypasses_total: IntCounterVec,
    pub bypass_errors_total: IntCounterVec,
    pub bypass_refused_total: IntCounterVec,
    pub events_total: IntCounterVec,
    pub tls_reloads_total: IntCounterVec,
    pub owner_up: IntGaugeVec,
    pub owner_state: IntGaugeVec,
    pub pileup_max_waiting_pods: IntGaugeVec,
    pub pileups: IntGaugeVec,
    pub is_leader: IntGauge,
    pub watch_restarts_total: IntCounterVec,
    pub owner_probe_total: IntCounterVec,
    pub build_info: IntGaugeVec,
    pub deadline_seconds: GaugeVec,
    /// `defaults.unlistedAlertAfter`: the stuck alert's threshold for unlisted initializers.
    pub unlisted_alert_after_seconds: prometheus::Gauge,
    pub dry_run: IntGauge,
    pub webhook_bypassed: IntGaugeVec,
    pub webhook_bypasses_total: IntCounterVec,
    pub webhook_restores_total: IntCounterVec,
    pub webhook_flapping: IntGaugeVec,
    pub webhook_admitted_without_total: IntCounterVec,
    pub webhook_evictions_total: IntCounterVec,
    /// The node stage (README "The node stage").
    pub init_waiting_pods: IntGaugeVec,
    pub init_oldest_wait_seconds: GaugeVec,
    pub init_wait_duration_seconds: HistogramVec,
    pub init_failures_total: IntCounterVec,
    pub init_recreations_total: IntCounterVec,
    pub init_deadline_seconds: GaugeVec,
    pub owner_down_nodes: IntGaugeVec,
    listed: HashSet<String>,
    unlisted_seen: Mutex<HashSet<String>>,
}

/// Errors setting up the registry (duplicate or malformed metric definitions).
#[derive(Debug, thiserror::Error)]
#[error("registering metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

impl Metrics {
    /// A fresh registry with every metric, process metrics, build info and configured deadlines.
    pub fn new(config: &Config) -> Result<Metrics, MetricsError> {
        let registry = Registry::new();
        let m = Metrics {
            waiting_pods: IntGaugeVec::new(
                Opts::new("initguard_waiting_pods", "Pods waiting on an initializer."),
                &["initializer", "opted_in"],
            )?,
            oldest_wait_seconds: GaugeVec::new(
                Opts::new(
                    "initguard_oldest_wait_seconds",
                    "Longest current wait on an initializer, in seconds.",
                ),
                &["initializer"],
            )?,
            wait_duration_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "initguard_wait_duration_seconds",
                    "How long pods waited on an initializer, by how the wait ended.",
                )
                .buckets(WAIT_BUCKETS.to_vec()),
                &["initializer", "outcome"],
            )?,
            bypasses_total: IntCounterVec::new(
                Opts::new(
                    "initguard_bypasses_total",
                    "Initializers removed by initguard.",
                ),
                &["initializer", "reason"],
            )?,
            bypass_errors_total: IntCounterVec::new(
                Opts::new(
                    "initguard_bypass_errors_total",
                    "Bypass attempts that failed for good (after retries) or were refused by the \
                     API server.",
                ),
                &["initializer"],
            )?,
            bypass_refused_total: IntCounterVec::new(
                Opts::new(
                    "initguard_bypass_refused_total",
                    "Pods not bypassed although a trigger held, because of the initializer's \
                     optIn (reason opt_in) or bypassOn (reason trigger); once per pod and \
                     initializer.",
                ),
                &["initializer", "reason"],
            )?,
            events_total: IntCounterVec::new(
                Opts::new(
                    "initguard_events_total",
                    "Events initguard wrote (written), that the API server refused or did not \
                     answer (failed), or that it gave up before sending (dropped: no longer \
                     leading, or more waiting than it keeps); exists: an InitializerWaiting \
                     Event already written by an earlier run or another replica.",
                ),
                &["reason", "outcome"],
            )?,
            tls_reloads_total: IntCounterVec::new(
                Opts::new(
                    "initguard_tls_reloads_total",
                    "Changes of the secureListen certificate files: served from the next \
                     handshake on (loaded), or unusable, the previous certificate kept (refused).",
                ),
                &["outcome"],
            )?,
            owner_up: IntGaugeVec::new(
                Opts::new(
                    "initguard_owner_up",
                    "1 while the initializer's owner is up, 0 while down; absent while unknown.",
                ),
                &["initializer", "owner_kind"],
            )?,
            owner_state: IntGaugeVec::new(
                Opts::new(
                    "initguard_owner_state",
                    "1 for the current state (up, down or unknown) of the initializer's owner.",
                ),
                &["initializer", "owner_kind", "state"],
            )?,
            pileup_max_waiting_pods: IntGaugeVec::new(
                Opts::new(
                    "initguard_pileup_max_waiting_pods",
                    "Most pods sharing one controller that wait on the initializer.",
                ),
                &["initializer"],
            )?,
            pileups: IntGaugeVec::new(
                Opts::new(
                    "initguard_pileups",
                    "Controllers with at least pileup.threshold pods that have each waited pileup.minWait on the initializer.",
                ),
                &["initializer"],
            )?,
            is_leader: IntGauge::new(
                "initguard_is_leader",
                "1 while this replica leads and may write.",
            )?,
            watch_restarts_total: IntCounterVec::new(
                Opts::new(
                    "initguard_watch_restarts_total",
                    "Watch streams restarted after an error.",
                ),
                &["resource"],
            )?,
            owner_probe_total: IntCounterVec::new(
                Opts::new(
                    "initguard_owner_probe_total",
                    "Probes of http owners and dry-run canaries of apiserver owners, by verdict.",
                ),
                &["owner_kind", "outcome"],
            )?,
            build_info: IntGaugeVec::new(
                Opts::new(
                    "initguard_build_info",
                    "Always 1; labels name the build and mechanism.",
                ),
                &["version", "mechanism"],
            )?,
            deadline_seconds: GaugeVec::new(
                Opts::new(
                    "initguard_deadline_seconds",
                    "Configured deadline of each listed initializer.",
                ),
                &["initializer"],
            )?,
            unlisted_alert_after_seconds: prometheus::Gauge::new(
                "initguard_unlisted_alert_after_seconds",
                "defaults.unlistedAlertAfter: how long a pod may wait on an unlisted initializer \
                 before the stuck alert fires, in seconds.",
            )?,
            dry_run: IntGauge::new(
                "initguard_dry_run",
                "1 when decisions are only logged, not written.",
            )?,
            webhook_bypassed: IntGaugeVec::new(
                Opts::new(
                    "initguard_webhook_bypassed",
                    "1 while the listed admission webhook is bypassed for opted-in objects.",
                ),
                &["webhook"],
            )?,
            webhook_bypasses_total: IntCounterVec::new(
                Opts::new(
                    "initguard_webhook_bypasses_total",
                    "Bypasses of a listed admission webhook (dry-run: decisions).",
                ),
                &["webhook", "reason"],
            )?,
            webhook_restores_total: IntCounterVec::new(
                Opts::new(
                    "initguard_webhook_restores_total",
                    "Ends of a webhook bypass: restored exactly, or left alone because someone \
                     else changed the entry (conflict).",
                ),
                &["webhook", "outcome"],
            )?,
            webhook_admitted_without_total: IntCounterVec::new(
                Opts::new(
                    "initguard_webhook_admitted_without_total",
                    "Pods found after a restore to have been admitted while the mutating webhook \
                     was bypassed (afterRestore: report or evict).",
                ),
                &["webhook"],
            )?,
            webhook_evictions_total: IntCounterVec::new(
                Opts::new(
                    "initguard_webhook_evictions_total",
                    "afterRestore: evict: pods evicted, refused (a PodDisruptionBudget past \
                     maxWait, or another refusal), or skipped (the hourly cap, or gone).",
                ),
                &["webhook", "outcome"],
            )?,
            webhook_flapping: IntGaugeVec::new(
                Opts::new(
                    "initguard_webhook_flapping",
                    "1 while another writer keeps undoing the webhook's bypass and initguard \
                     has stopped re-applying it.",
                ),
                &["webhook"],
            )?,
            init_waiting_pods: IntGaugeVec::new(
                Opts::new(
                    "initguard_init_waiting_pods",
                    "Bound pods waiting on an init container (a listed one, or other).",
                ),
                &["container", "opted_in"],
            )?,
            init_oldest_wait_seconds: GaugeVec::new(
                Opts::new(
                    "initguard_init_oldest_wait_seconds",
                    "Longest current wait on a listed init container since the pod was bound, \
                     in seconds.",
                ),
                &["container"],
            )?,
            init_wait_duration_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "initguard_init_wait_duration_seconds",
                    "How long pods waited on a listed init container, by how the wait ended.",
                )
                .buckets(WAIT_BUCKETS.to_vec()),
                &["container", "outcome"],
            )?,
            init_failures_total: IntCounterVec::new(
                Opts::new(
                    "initguard_init_failures_total",
                    "Pods whose listed init container exited with one of its failedExitCodes, \
                     once per pod and container.",
                ),
                &["container", "exit_code"],
            )?,
            init_recreations_total: IntCounterVec::new(
                Opts::new(
                    "initguard_init_recreations_total",
                    "Recreations (evictions) of pods stuck on a listed init container, by \
                     outcome: evicted, refused (by the server, past the retries) or skipped \
                     (the pod was gone or replaced first).",
                ),
                &["container", "outcome"],
            )?,
            init_deadline_seconds: GaugeVec::new(
                Opts::new(
                    "initguard_init_deadline_seconds",
                    "The configured deadline of each listed init container that has one, in \
                     seconds (the alert on stuck init containers follows it).",
                ),
                &["container"],
            )?,
            owner_down_nodes: IntGaugeVec::new(
                Opts::new(
                    "initguard_owner_down_nodes",
                    "Nodes where a listed init container's owner is down and a pod waits on it.",
                ),
                &["container"],
            )?,
            listed: config.initializers.iter().map(|i| i.name.clone()).collect(),
            unlisted_seen: Mutex::new(HashSet::new()),
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.waiting_pods.clone()))?;
        r.register(Box::new(m.oldest_wait_seconds.clone()))?;
        r.register(Box::new(m.wait_duration_seconds.clone()))?;
        r.register(Box::new(m.bypasses_total.clone()))?;
        r.register(Box::new(m.bypass_errors_total.clone()))?;
        r.register(Box::new(m.bypass_refused_total.clone()))?;
        r.register(Box::new(m.events_total.clone()))?;
        r.register(Box::new(m.tls_reloads_total.clone()))?;
        r.register(Box::new(m.owner_up.clone()))?;
        r.register(Box::new(m.owner_state.clone()))?;
        r.register(Box::new(m.pileup_max_waiting_pods.clone()))?;
        r.register(Box::new(m.pileups.clone()))?;
        r.register(Box::new(m.is_leader.clone()))?;
        r.register(Box::new(m.watch_restarts_total.clone()))?;
        r.register(Box::new(m.owner_probe_total.clone()))?;
        r.register(Box::new(m.build_info.clone()))?;
        r.register(Box::new(m.deadline_seconds.clone()))?;
        r.register(Box::new(m.dry_run.clone()))?;
        r.register(Box::new(m.unlisted_alert_after_seconds.clone()))?;
        r.register(Box::new(m.webhook_bypassed.clone()))?;
        r.register(Box::new(m.webhook_bypasses_total.clone()))?;
        r.register(Box::new(m.webhook_restores_total.clone()))?;
        r.register(Box::new(m.webhook_flapping.clone()))?;
        r.register(Box::new(m.webhook_admitted_without_total.clone()))?;
        r.register(Box::new(m.webhook_evictions_total.clone()))?;
        r.register(Box::new(m.init_waiting_pods.clone()))?;
        r.register(Box::new(m.init_oldest_wait_seconds.clone()))?;
        r.register(Box::new(m.init_wait_duration_seconds.clone()))?;
        r.register(Box::new(m.init_failures_total.clone()))?;
        r.register(Box::new(m.init_recreations_total.clone()))?;
        r.register(Box::new(m.init_deadline_seconds.clone()))?;
        r.register(Box::new(m.owner_down_nodes.clone()))?;
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;

        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), config.mechanism.as_str()])
            .set(1);
        for i in &config.initializers {
            m.deadline_seconds
                .with_label_values(&[&i.name])
                .set(i.deadline.as_secs_f64());
            // Pre-create series so dashboards show zeros rather than gaps.
            for reason in [Reason::Deadline, Reason::OwnerDown, Reason::Pileup] {
                m.bypasses_total
                    .with_label_values(&[&i.name, reason.as_str()]);
            }
            m.bypass_errors_total.with_label_values(&[&i.name]);
            for refused in [RefusedBy::OptIn, RefusedBy::Trigger] {
                m.bypass_refused_total
                    .with_label_values(&[&i.name, refused.as_str()]);
            }
            // Every owner starts unknown, and an alert needs the series from the start.
            if let Some(owner) = &i.owner {
                m.set_owner_state(&i.name, owner.kind(), "unknown");
            }
        }
        if config.events == crate::config::EventsMode::PerPatch {
            for outcome in [
                EventOutcome::Written,
                EventOutcome::Failed,
                EventOutcome::Dropped,
            ] {
                m.events_total
                    .with_label_values(&["InitializerBypassed", outcome.as_str()]);
            }
        }
        if config.waiting_events {
            for outcome in [
                EventOutcome::Written,
                EventOutcome::Failed,
                EventOutcome::Dropped,
                EventOutcome::Exists,
            ] {
                m.events_total
                    .with_label_values(&["InitializerWaiting", outcome.as_str()]);
            }
        }
        // Zero also without tls files (nothing reloads then), so the board shows no gap.
        for outcome in [TlsReload::Loaded, TlsReload::Refused] {
            m.tls_reloads_total.with_label_values(&[outcome.as_str()]);
        }
        // Restart counters exist from the start, so a healthy guard shows 0 rather than no data.
        m.watch_restarts_total.with_label_values(&["pods"]);
        if config.opt_in.selector.is_some() {
            m.watch_restarts_total.with_label_values(&["namespaces"]);
        }
        for owner in config.initializers.iter().filter_map(|i| i.owner.as_ref()) {
            match owner {
                crate::config::OwnerSpec::Deployment(_) => {
                    m.watch_restarts_total.with_label_values(&["deployments"])
                }
                crate::config::OwnerSpec::Lease(_) => {
                    m.watch_restarts_total.with_label_values(&["leases"])
                }
                crate::config::OwnerSpec::Service(_) => m
                    .watch_restarts_total
                    .with_label_values(&["endpointslices"]),
                crate::config::OwnerSpec::WebhookService(_) => {
                    m.watch_restarts_total
                        .with_label_values(&["endpointslices"]);
                    m.watch_restarts_total.with_label_values(&["services"])
                }
                crate::config::OwnerSpec::Pods { .. }
                | crate::config::OwnerSpec::Http { .. }
                | crate::config::OwnerSpec::Apiserver(_) => {
                    continue;
                }
            };
        }
        for w in &config.webhooks {
            let name = w.id.to_string();
            m.webhook_bypassed.with_label_values(&[&name]).set(0);
            m.webhook_flapping.with_label_values(&[&name]).set(0);
            m.webhook_bypasses_total
                .with_label_values(&[&name, Reason::OwnerDown.as_str()]);
            for outcome in ["restored", "conflict"] {
                m.webhook_restores_total
                    .with_label_values(&[&name, outcome]);
            }
            if w.after_restore != crate::config::AfterRestore::Ignore {
                m.webhook_admitted_without_total.with_label_values(&[&name]);
            }
            if w.after_restore == crate::config::AfterRestore::Evict {
                for outcome in ["evicted", "refused", "skipped"] {
                    m.webhook_evictions_total
                        .with_label_values(&[&name, outcome]);
                }
            }
            if let Some(owner) = &w.owner {
                m.set_owner_state(&name, owner.kind(), "unknown");
            }
        }
        for step in &config.init_containers {
            for code in &step.failed_exit_codes {
                m.init_failures_total
                    .with_label_values(&[step.name.as_str(), &code.to_string()]);
            }
            // Every wait end at zero, so boards show 0 rather than nothing.
            for end in ["initialized", "recreated", "deleted", "failed"] {
                m.init_wait_duration_seconds
                    .with_label_values(&[step.name.as_str(), end]);
            }
            if let Some(deadline) = step.deadline {
                m.init_deadline_seconds
                    .with_label_values(&[step.name.as_str()])
                    .set(deadline.as_secs_f64());
            }
            if step.action == crate::config::StepAction::Recreate {
                for outcome in ["evicted", "refused", "skipped"] {
                    m.init_recreations_total
                        .with_label_values(&[step.name.as_str(), outcome]);
                }
            }
        }
        if config
            .init_containers
            .iter()
            .any(|s| crate::node_stage::daemonset_owner(s).is_some())
        {
            m.watch_restarts_total.with_label_values(&["daemonsets"]);
        }
        m.dry_run.set(i64::from(config.dry_run));
        m.unlisted_alert_after_seconds
            .set(config.defaults.unlisted_alert_after.as_secs_f64());
        Ok(m)
    }

    /// The label value for an initializer name: listed names as they are, the first
    /// [`MAX_UNLISTED_LABELS`] unlisted names as they are, later ones `other`.
    pub fn initializer_label<'a>(&self, name: &'a str) -> &'a str {
        if self.listed.contains(name) {
            return name;
        }
        let mut seen = self.unlisted_seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(name) {
            return name;
        }
        if seen.len() < MAX_UNLISTED_LABELS {
            seen.insert(name.to_owned());
            return name;
        }
        "other"
    }

    /// Record a finished wait.
    pub fn observe_wait(&self, initializer: &str, outcome: WaitEnd, waited: Duration) {
        let label = self.initializer_label(initializer);
        self.wait_duration_seconds
            .with_label_values(&[label, outcome.as_str()])
            .observe(waited.as_secs_f64());
    }

    /// Record a bypass written (or decided, in dry-run).
    pub fn bypassed(&self, initializer: &str, reason: Reason) {
        let label = self.initializer_label(initializer);
        self.bypasses_total
            .with_label_values(&[label, reason.as_str()])
            .inc();
    }

    /// Record a bypass refused by the initializer's own keys (once per pod and initializer).
    pub fn bypass_refused(&self, initializer: &str, by: RefusedBy) {
        let label = self.initializer_label(initializer);
        self.bypass_refused_total
            .with_label_values(&[label, by.as_str()])
            .inc();
    }

    /// Count a renewed pair of TLS files by what became of it.
    pub fn tls_reload(&self, outcome: TlsReload) {
        self.tls_reloads_total
            .with_label_values(&[outcome.as_str()])
            .inc();
    }

    /// Count one Event of `reason` by what became of it.
    pub fn event(&self, reason: &str, outcome: EventOutcome) {
        self.events_total
            .with_label_values(&[reason, outcome.as_str()])
            .inc();
    }

    /// Record a bypass that failed for good.
    pub fn bypass_failed(&self, initializer: &str) {
        let label = self.initializer_label(initializer);
        self.bypass_errors_total.with_label_values(&[label]).inc();
    }

    /// Record a watch stream restart for `resource` (pods, deployments, leases).
    pub fn watch_restarted(&self, resource: &str) {
        self.watch_restarts_total
            .with_label_values(&[resource])
            .inc();
    }

    /// Count one probe of an `owner_kind` (http, apiserver) owner with its `outcome`
    /// (up, down, unknown).
    pub fn owner_probed(&self, owner_kind: &str, outcome: &str) {
        self.owner_probe_total
            .with_label_values(&[owner_kind, outcome])
            .inc();
    }

    /// Set `initguard_owner_up`; `None` (unknown) removes the series.
    pub fn set_owner_up(&self, initializer: &str, owner_kind: &str, up: Option<bool>) {
        match up {
            Some(up) => self
                .owner_up
                .with_label_values(&[initializer, owner_kind])
                .set(i64::from(up)),
            None => {
                let _ = self
                    .owner_up
                    .remove_label_values(&[initializer, owner_kind]);
            }
        }
    }

    /// Set `initguard_owner_state`: 1 for `state`, 0 for the other two.
    pub fn set_owner_state(&self, initializer: &str, owner_kind: &str, state: &str) {
        for s in ["up", "down", "unknown"] {
            self.owner_state
                .with_label_values(&[initializer, owner_kind, s])
                .set(i64::from(s == state));
        }
    }

    /// Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, MetricsError> {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}
