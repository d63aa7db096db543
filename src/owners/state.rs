//! The owners' shared state: one entry per distinct owner, its up / down / unknown state with
//! `since` and a detail, the metrics and log line of each change, and subscribers notified of
//! it. Written only through a [`Handle`] held by that owner's watcher or prober.

use std::collections::HashMap;
use std::future::pending;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::{Config, OwnerSpec};

use crate::metrics::Metrics;
use crate::policy::OwnerState;
use crate::supervise::Readiness;

use super::model::{Observed, OwnerReport, owner_target, round_ms};

/// Liveness of every owner named in the config. Cheap to clone.
#[derive(Clone)]
pub struct Owners {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// One entry per distinct owner spec.
    pub(super) owners: Vec<Owner>,
    /// Initializer name → index into `owners`.
    pub(super) by_initializer: HashMap<String, usize>,
    /// Bumped on every state change.
    pub(super) changes: watch::Sender<u64>,
    pub(super) metrics: Arc<Metrics>,
    /// Owners that cannot be watched at all (their API is not served).
    pub(super) readiness: Readiness,
}

pub(super) struct Owner {
    pub(super) spec: OwnerSpec,
    /// Human form of the spec, e.g. `kube-system/sidecar-injector`.
    pub(super) target: String,
    /// Initializers using this owner, in config order.
    pub(super) initializers: Vec<String>,
    /// `initializers` joined with `,` for log lines.
    pub(super) initializer_list: String,
    /// Shortest `probeInterval` of the initializers sharing this owner (http only).
    pub(super) probe_interval: Duration,
    pub(super) state: Mutex<Current>,
    /// Set at the first observation, never cleared.
    pub(super) synced: AtomicBool,
}

/// An owner's state and what was last observed about it.
pub(super) struct Current {
    pub(super) state: OwnerState,
    /// E.g. `2 available replicas`, `not found`, `watch failing: …`.
    pub(super) detail: String,
}

impl Owners {
    /// Group the listed initializers by owner; every state starts Unknown.
    pub(crate) fn new(config: &Config, metrics: Arc<Metrics>, readiness: Readiness) -> Owners {
        let mut owners: Vec<Owner> = Vec::new();
        let mut by_spec: HashMap<&OwnerSpec, usize> = HashMap::new();
        let mut by_initializer = HashMap::new();
        // Listed webhooks share the table under their `KIND/CONFIGURATION/WEBHOOK` name,
        // which no initializer name can be (at most one `/`).
        let users = config
            .initializers
            .iter()
            .filter_map(|i| Some((i.name.clone(), i.owner.as_ref()?, i.probe_interval)))
            .chain(
                config
                    .webhooks
                    .iter()
                    .filter_map(|w| Some((w.id.to_string(), w.owner.as_ref()?, w.probe_interval))),
            );
        for (name, spec, probe_interval) in users {
            let index = *by_spec.entry(spec).or_insert_with(|| {
                owners.push(Owner {
                    spec: spec.clone(),
                    target: owner_target(spec),
                    initializers: Vec::new(),
                    initializer_list: String::new(),
                    probe_interval,
                    state: Mutex::new(Current {
                        state: OwnerState::Unknown,
                        detail: "not observed yet".to_owned(),
                    }),
                    synced: AtomicBool::new(false),
                });
                owners.len() - 1
            });
            let owner = &mut owners[index];
            owner.initializers.push(name.clone());
            owner.probe_interval = owner.probe_interval.min(probe_interval);
            by_initializer.insert(name, index);
        }
        for owner in &mut owners {
            owner.initializer_list = owner.initializers.join(",");
        }
        Owners {
            inner: Arc::new(Inner {
                owners,
                by_initializer,
                changes: watch::channel(0).0,
                metrics,
                readiness,
            }),
        }
    }

    /// Current state of the owner of `initializer` (or of a listed webhook, by its
    /// `KIND/CONFIGURATION/WEBHOOK` name): Unknown if it has none or it has not been observed
    /// yet.
    pub fn state(&self, initializer: &str) -> OwnerState {
        match self.inner.by_initializer.get(initializer) {
            Some(&index) => self.inner.owners[index].current().0,
            None => OwnerState::Unknown,
        }
    }

    /// A receiver whose value is bumped whenever any owner state changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Owners not observed yet (initial list or first probe pending), as `KIND TARGET`, e.g.
    /// `lease kueue-system/x`.
    pub fn not_synced(&self) -> Vec<String> {
        self.inner
            .owners
            .iter()
            .filter(|o| !o.synced.load(Ordering::Acquire))
            .map(|o| format!("{} {}", o.spec.kind(), o.target))
            .collect()
    }

    /// Whether the owner of `initializer` has been observed at least once (true when it has
    /// none): before that, unknown means only "not looked at yet".
    pub fn observed(&self, initializer: &str) -> bool {
        self.inner
            .by_initializer
            .get(initializer)
            .is_none_or(|&index| self.inner.owners[index].synced.load(Ordering::Acquire))
    }

    /// Owners in state unknown, as `KIND TARGET: unknown (DETAIL)`, for `/readyz`: they are
    /// worth a look (a typo, missing RBAC) but never stop the guard from being ready.
    pub fn unknown(&self) -> Vec<String> {
        self.inner
            .owners
            .iter()
            .filter_map(|o| {
                let (state, detail) = o.current();
                (state == OwnerState::Unknown)
                    .then(|| format!("{} {}: unknown ({detail})", o.spec.kind(), o.target))
            })
            .collect()
    }

    /// Resolves once every owner has been observed at least once.
    pub async fn wait_synced(&self) {
        let mut changes = self.subscribe();
        while !self.not_synced().is_empty() {
            if changes.changed().await.is_err() {
                // Unreachable while `self` holds the sender; never spin if it were.
                pending::<()>().await;
            }
        }
    }

    /// Per initializer with an owner (config order): its owner and the owner's state.
    pub fn snapshot(&self) -> Vec<OwnerReport> {
        let mut reports = Vec::with_capacity(self.inner.by_initializer.len());
        for owner in &self.inner.owners {
            let (state, detail) = owner.current();
            reports.extend(owner.initializers.iter().map(|name| OwnerReport {
                initializer: name.clone(),
                owner_kind: owner.spec.kind(),
                target: owner.target.clone(),
                state,
                detail: detail.clone(),
            }));
        }
        reports
    }
}

impl std::fmt::Debug for Owners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.snapshot()).finish()
    }
}

impl Owner {
    fn current(&self) -> (OwnerState, String) {
        let current = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (current.state, current.detail.clone())
    }
}

/// Write access to one owner's state, held by its watcher or prober.
pub(super) struct Handle {
    pub(super) inner: Arc<Inner>,
    pub(super) index: usize,
}

impl Handle {
    pub(super) fn owner(&self) -> &Owner {
        &self.inner.owners[self.index]
    }

    /// Record an observation; on a change of state set the metrics of every initializer using
    /// this owner, log one line and notify subscribers. `detail` says what was observed.
    pub(super) fn observe(&self, observed: Observed, detail: String) {
        let owner = self.owner();
        let now = SystemTime::now();
        let previous = {
            let mut current = owner.state.lock().unwrap_or_else(PoisonError::into_inner);
            let previous = current.state;
            let same = matches!(
                (previous, observed),
                (OwnerState::Up { .. }, Observed::Up)
                    | (OwnerState::Down { .. }, Observed::Down)
                    | (OwnerState::Unknown, Observed::Unknown)
            );
            // An unknown owner's reason is news (first "not found" after "not observed yet");
            // a live owner's changing detail (replica counts) is not.
            let news = !same || (observed == Observed::Unknown && current.detail != detail);
            current.detail = detail.clone();
            if !same {
                current.state = match observed {
                    Observed::Up => OwnerState::Up { since: now },
                    Observed::Down => OwnerState::Down { since: now },
                    Observed::Unknown => OwnerState::Unknown,
                };
            }
            let first = !owner.synced.swap(true, Ordering::AcqRel);
            if !news && !first {
                return;
            }
            previous
        };
        let kind = owner.spec.kind();
        for name in &owner.initializers {
            let label = self.inner.metrics.initializer_label(name);
            let up = match observed {
                Observed::Up => Some(true),
                Observed::Down => Some(false),
                Observed::Unknown => None,
            };
            self.inner.metrics.set_owner_up(label, kind, up);
            self.inner
                .metrics
                .set_owner_state(label, kind, observed.as_str());
        }
        match observed {
            Observed::Up => info!(
                initializers = %owner.initializer_list,
                owner_kind = kind,
                owner = %owner.target,
                state = "up",
                detail = %detail,
                "owner is up"
            ),
            Observed::Down => {
                let up_for = match previous {
                    OwnerState::Up { since } => {
                        let d = round_ms(now.duration_since(since).unwrap_or_default());
                        Some(tracing::field::display(humantime::format_duration(d)))
                    }
                    _ => None,
                };
                warn!(
                    initializers = %owner.initializer_list,
                    owner_kind = kind,
                    owner = %owner.target,
                    state = "down",
                    detail = %detail,
                    up_for,
                    "owner is down"
                );
            }
            Observed::Unknown => warn!(
                initializers = %owner.initializer_list,
                owner_kind = kind,
                owner = %owner.target,
                state = "unknown",
                detail = %detail,
                "owner is unknown: never triggers owner_down, the deadline still applies; \
                 check the owner's name in the config and the guard's RBAC"
            ),
        }
        self.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// While the owner is unknown, remember why (e.g. its watch failing: forbidden) for
    /// `/readyz` and `/status`. A known state is kept as it is.
    pub(super) fn unknown_because(&self, detail: String) {
        let mut current = self
            .owner()
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if current.state == OwnerState::Unknown {
            current.detail = detail;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        crate::config::from_yaml_str(
            r#"
defaults: { probeInterval: 5s }
initializers:
  - name: a.example.com
    owner: { deployment: kube-system/injector }
  - name: b.example.com
    owner: { deployment: kube-system/injector }
  - name: c.example.com
    owner: { lease: kueue-system/leader }
  - name: d.example.com
  - name: e.example.com
    owner: { http: "http://127.0.0.1:1/healthz" }
  - name: f.example.com
    probeInterval: 1s
    owner: { http: "http://127.0.0.1:1/healthz" }
"#,
            "test.yaml",
        )
        .unwrap()
    }

    fn owners() -> Owners {
        let config = config();
        Owners::new(
            &config,
            Arc::new(Metrics::new(&config).unwrap()),
            Readiness::default(),
        )
    }

    #[test]
    fn initializers_sharing_an_owner_share_one_entry() {
        let owners = owners();
        assert_eq!(owners.inner.owners.len(), 3);
        assert_eq!(
            owners.not_synced(),
            [
                "deployment kube-system/injector",
                "lease kueue-system/leader",
                "http http://127.0.0.1:1/healthz",
            ]
        );
        let http = &owners.inner.owners[2];
        assert_eq!(http.initializers, ["e.example.com", "f.example.com"]);
        assert_eq!(http.probe_interval, Duration::from_secs(1));

        let snapshot = owners.snapshot();
        let names: Vec<&str> = snapshot.iter().map(|r| r.initializer.as_str()).collect();
        assert_eq!(
            names,
            [
                "a.example.com",
                "b.example.com",
                "c.example.com",
                "e.example.com",
                "f.example.com"
            ]
        );
        assert!(snapshot.iter().all(|r| r.state == OwnerState::Unknown));
        assert_eq!(owners.state("d.example.com"), OwnerState::Unknown);
        assert_eq!(owners.state("unlisted"), OwnerState::Unknown);

        let json = serde_json::to_value(&snapshot[2]).unwrap();
        assert_eq!(json["ownerKind"], "lease");
        assert_eq!(json["target"], "kueue-system/leader");
        assert_eq!(json["state"], "unknown");
    }

    #[test]
    fn observations_change_state_only_on_transitions() {
        let owners = owners();
        let mut changes = owners.subscribe();
        let handle = Handle {
            inner: owners.inner.clone(),
            index: 0,
        };
        let owner_up = |name: &str| {
            owners
                .inner
                .metrics
                .owner_up
                .get_metric_with_label_values(&[name, "deployment"])
                .unwrap()
                .get()
        };

        let owner_state = |name: &str, state: &str| {
            owners
                .inner
                .metrics
                .owner_state
                .get_metric_with_label_values(&[name, "deployment", state])
                .unwrap()
                .get()
        };
        assert_eq!(owner_state("a.example.com", "unknown"), 1);
        assert_eq!(owner_state("a.example.com", "up"), 0);

        // A list that finds nothing: still unknown, now with a reason, and synced.
        handle.observe(Observed::Unknown, "deployment not found".to_owned());
        assert_eq!(owners.state("a.example.com"), OwnerState::Unknown);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert_eq!(
            owners.unknown(),
            [
                "deployment kube-system/injector: unknown (deployment not found)",
                "lease kueue-system/leader: unknown (not observed yet)",
                "http http://127.0.0.1:1/healthz: unknown (not observed yet)",
            ]
        );
        assert_eq!(owners.not_synced().len(), 2);
        assert_eq!(owner_state("a.example.com", "unknown"), 1);

        let before = SystemTime::now();
        handle.observe(Observed::Up, "1 available replicas".to_owned());
        let OwnerState::Up { since: up_since } = owners.state("a.example.com") else {
            panic!("not up: {:?}", owners.state("a.example.com"));
        };
        assert!(up_since >= before);
        assert_eq!(owners.state("b.example.com"), owners.state("a.example.com"));
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert_eq!(
            (owner_up("a.example.com"), owner_up("b.example.com")),
            (1, 1)
        );
        assert_eq!(owners.not_synced().len(), 2);
        assert_eq!(
            (
                owner_state("b.example.com", "up"),
                owner_state("b.example.com", "unknown")
            ),
            (1, 0)
        );

        handle.observe(Observed::Up, "2 available replicas".to_owned());
        assert_eq!(
            owners.state("a.example.com"),
            OwnerState::Up { since: up_since }
        );
        assert!(!changes.has_changed().unwrap(), "no change, no wake-up");
        assert_eq!(owners.snapshot()[0].detail, "2 available replicas");

        handle.observe(Observed::Down, "0 available replicas".to_owned());
        let OwnerState::Down { since } = owners.state("b.example.com") else {
            panic!("not down: {:?}", owners.state("b.example.com"));
        };
        assert!(since >= up_since);
        assert!(changes.has_changed().unwrap());
        assert_eq!(
            (owner_up("a.example.com"), owner_up("b.example.com")),
            (0, 0)
        );
        assert_eq!(
            (
                owner_state("a.example.com", "down"),
                owner_state("a.example.com", "up")
            ),
            (1, 0)
        );
    }
}
