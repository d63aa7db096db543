//! After a mutating webhook's bypass is restored (`afterRestore`, README "After restore"):
//! which pods were admitted without it, and what to do with each. **No I/O, no clock**: pods,
//! namespaces and instants come in as arguments.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::{LetThrough, intercepts_creates, own_match_conditions, selects};
use crate::config::AfterRestore;

/// Annotation on a pod admitted while a webhook was bypassed: `KIND/CONFIGURATION/WEBHOOK@SINCE`.
/// Add-only (the self-fence refuses any change to it): what was found is recorded once.
pub const ADMITTED_WITHOUT_ANNOTATION: &str = "initguard.io/admitted-without";

/// How far past the restore the bypass window reaches: the API server applies a configuration
/// change when its own watch delivers it, so a create just after the restore may still have
/// passed the bypass. (The start needs no margin: a create before the bypass reached the
/// webhook, and the record's instant is rounded down, which only widens the window.)
pub const PROPAGATION_MARGIN: Duration = Duration::from_secs(5);

/// Evictions per controller are counted over this window (`maxEvictionsPerHour`).
pub const CAP_WINDOW: Duration = Duration::from_secs(3600);

/// A pod, as the sweep needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's `metadata.uid`.
    pub uid: String,
    /// The pod's labels.
    pub labels: BTreeMap<String, String>,
    /// `creationTimestamp`, on the API server's clock.
    pub created: Option<SystemTime>,
    /// The controlling owner (`ownerReferences[].controller`).
    pub controller: Option<Controller>,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// It has a `deletionTimestamp`.
    pub deleting: bool,
    /// The value of [`ADMITTED_WITHOUT_ANNOTATION`], if set.
    pub admitted_without: Option<String>,
}

/// A pod's controlling owner.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Controller {
    /// The controller's kind, e.g. `ReplicaSet`.
    pub kind: String,
    /// The controller's name.
    pub name: String,
    /// The controller's `metadata.uid`.
    pub uid: String,
}

/// The bypass window on the API server's clock, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// When the bypass was made.
    pub from: SystemTime,
    /// The restore plus [`PROPAGATION_MARGIN`].
    pub to: SystemTime,
}

impl Window {
    /// The window of a bypass that lasted `lasted` and was restored at `restored` (the API
    /// server's clock), reaching [`PROPAGATION_MARGIN`] past the restore.
    pub fn of(restored: SystemTime, lasted: Duration) -> Window {
        let to = restored + PROPAGATION_MARGIN;
        let from = restored
            .checked_sub(lasted)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Window { from, to }
    }

    fn contains(&self, at: SystemTime) -> bool {
        self.from <= at && at <= self.to
    }
}

/// Pods created within `window` that `entry` intercepts (CREATE of pods, its `objectSelector`
/// and `namespaceSelector`) and that `through` let past it while it was bypassed: the opt-in
/// label, a let-through namespace, a namespace its namespace requirement leaves out, or
/// kube-system under the critical path. A pod whose namespace is not in `namespaces` is left
/// out: never act on what cannot be judged. Requester exemptions cannot be told after the
/// fact and are not counted; a pod being deleted is left out.
pub fn admitted_without<'a>(
    pods: &'a [PodFacts],
    window: Window,
    entry: &Value,
    through: &LetThrough,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<&'a PodFacts> {
    if !intercepts_creates(entry, "pods") {
        return Vec::new();
    }
    pods.iter()
        .filter(|p| !p.deleting && p.created.is_some_and(|t| window.contains(t)))
        .filter(|p| {
            let Some(ns_labels) = namespaces.get(&p.namespace) else {
                return false;
            };
            selects(&entry["objectSelector"], &p.labels).unwrap_or(false)
                && selects(&entry["namespaceSelector"], ns_labels).unwrap_or(false)
                && let_through(p, ns_labels, through)
        })
        .collect()
}

/// Whether the bypass `through` let `pod` (in a namespace labelled `ns_labels`) past.
fn let_through(pod: &PodFacts, ns_labels: &BTreeMap<String, String>, through: &LetThrough) -> bool {
    through
        .operations
        .contains(&crate::config::Operation::Create)
        || through
            .label
            .as_ref()
            .is_some_and(|l| pod.labels.contains_key(l))
        || through.namespaces.contains(&pod.namespace)
        || (through.critical_path && pod.namespace == "kube-system")
        || through.namespace_requirement.as_ref().is_some_and(|r| {
            // The requirement keeps the namespaces the webhook still saw.
            !selects(&json!({ "matchExpressions": [r] }), ns_labels).unwrap_or(true)
        })
}

/// What to do with one pod admitted without the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Treatment {
    /// Annotate and record an Event only, for this reason.
    Report(&'static str),
    /// Annotate, record an Event, and evict it (one at a time per controller).
    Evict,
}

/// The rule for one pod: `report` reports; `evict` evicts only what a controller re-creates
/// and can spare. Pods without a controller, of Jobs (an eviction counts against
/// `backoffLimit`), of controllers with fewer than 2 ready replicas (unless
/// `evict_singletons`), and of entries with their own matchConditions (which cannot be
/// evaluated after the fact) are reported only.
pub fn treatment(
    mode: AfterRestore,
    pod: &PodFacts,
    ready_replicas: usize,
    evict_singletons: bool,
    entry: &Value,
) -> Treatment {
    if mode != AfterRestore::Evict {
        return Treatment::Report("afterRestore: report");
    }
    if own_match_conditions(entry) > 0 {
        return Treatment::Report(
            "the entry has its own matchConditions, which cannot be evaluated after the fact",
        );
    }
    match &pod.controller {
        None => Treatment::Report("no controller would re-create it"),
        Some(c) if c.kind == "Job" => {
            Treatment::Report("a Job's pod: an eviction would count against its backoffLimit")
        }
        // Workflow engines, mirror pods of static pods (owned by their Node) and the like do
        // not re-create an evicted pod.
        Some(c) if !RECREATING_CONTROLLERS.contains(&c.kind.as_str()) => Treatment::Report(
            "its controller is not one known to re-create an evicted pod (ReplicaSet, \
             StatefulSet, DaemonSet, ReplicationController)",
        ),
        Some(_) if ready_replicas < 2 && !evict_singletons => Treatment::Report(
            "its controller has fewer than 2 ready replicas (evictSingletons: false)",
        ),
        Some(_) => Treatment::Evict,
    }
}

/// The controller kinds that re-create an evicted pod.
pub const RECREATING_CONTROLLERS: [&str; 4] = [
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "ReplicationController",
];

/// Ready pods of the controller `uid`, not being deleted, other than `except`.
pub fn ready_replicas(pods: &[PodFacts], uid: &str, except: Option<&str>) -> usize {
    pods.iter()
        .filter(|p| {
            p.ready
                && !p.deleting
                && p.controller.as_ref().is_some_and(|c| c.uid == uid)
                && except != Some(p.uid.as_str())
        })
        .count()
}

/// Whether one more eviction fits in the cap, given the instants of the evictions so far.
pub fn within_cap(evicted_at: &[Instant], now: Instant, cap: u32) -> bool {
    let recent = evicted_at
        .iter()
        .filter(|t| now.saturating_duration_since(**t) < CAP_WINDOW)
        .count();
    recent < usize::try_from(cap).unwrap_or(usize::MAX)
}

/// The annotation's value: which webhook, bypassed since when.
pub fn annotation_value(webhook: &str, since: &str) -> String {
    format!("{webhook}@{since}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn pod(name: &str, ns: &str, created: u64, labels: &[(&str, &str)]) -> PodFacts {
        PodFacts {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            uid: format!("uid-{name}"),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            created: Some(t(created)),
            controller: Some(Controller {
                kind: "ReplicaSet".to_owned(),
                name: "web".to_owned(),
                uid: "rs".to_owned(),
            }),
            ready: true,
            deleting: false,
            admitted_without: None,
        }
    }

    fn entry() -> Value {
        json!({
            "name": "inject.example.com",
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["pods"] }],
            "namespaceSelector": { "matchLabels": { "inject": "on" } },
            "objectSelector": { "matchExpressions": [
                { "key": "app", "operator": "Exists" } ] },
        })
    }

    fn namespaces() -> BTreeMap<String, BTreeMap<String, String>> {
        [
            ("apps", vec![("inject", "on")]),
            ("exempt", vec![("inject", "on")]),
            ("elsewhere", vec![]),
            ("selected", vec![("inject", "on"), ("team", "a")]),
        ]
        .into_iter()
        .map(|(n, l)| {
            (
                n.to_owned(),
                l.into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            )
        })
        .collect()
    }

    fn through() -> LetThrough {
        LetThrough {
            label: Some("initguard.io/bypass".to_owned()),
            namespaces: vec!["exempt".to_owned()],
            namespace_requirement: Some(json!({ "key": "team", "operator": "NotIn",
                                                "values": ["a"] })),
            ..LetThrough::default()
        }
    }

    #[test]
    fn only_pods_let_through_inside_the_window_and_intercepted_are_found() {
        let opted = [("app", "web"), ("initguard.io/bypass", "true")];
        let plain = [("app", "web")];
        let pods = vec![
            pod("opted-in", "apps", 100, &opted),
            pod("before", "apps", 49, &opted),
            pod("after", "apps", 206, &opted),
            pod("just-after-the-restore", "apps", 204, &opted),
            pod("not-opted-in", "apps", 100, &plain),
            pod("exempt-namespace", "exempt", 100, &plain),
            pod("selected-namespace", "selected", 100, &plain),
            pod("not-selected-by-the-entry", "elsewhere", 100, &opted),
            pod(
                "no-app-label",
                "apps",
                100,
                &[("initguard.io/bypass", "true")],
            ),
            pod("unknown-namespace", "gone", 100, &opted),
            PodFacts {
                deleting: true,
                ..pod("deleting", "apps", 100, &opted)
            },
        ];
        // Bypassed from t(50) to t(200).
        let window = Window::of(t(200), Duration::from_secs(150));
        assert_eq!(
            (window.from, window.to),
            (t(50), t(200) + PROPAGATION_MARGIN)
        );
        let found: Vec<&str> = admitted_without(&pods, window, &entry(), &through(), &namespaces())
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            found,
            [
                "opted-in",
                "just-after-the-restore",
                "exempt-namespace",
                "selected-namespace"
            ]
        );
        let mut validating_updates = entry();
        validating_updates["rules"][0]["operations"] = json!(["UPDATE"]);
        assert!(
            admitted_without(
                &pods,
                window,
                &validating_updates,
                &through(),
                &namespaces()
            )
            .is_empty()
        );
        // exemptOperations: [CREATE] let every create through.
        let creates = LetThrough {
            operations: vec![crate::config::Operation::Create],
            ..LetThrough::default()
        };
        let every: Vec<&str> = admitted_without(&pods, window, &entry(), &creates, &namespaces())
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            every,
            [
                "opted-in",
                "just-after-the-restore",
                "not-opted-in",
                "exempt-namespace",
                "selected-namespace"
            ]
        );
        let critical = LetThrough {
            critical_path: true,
            ..LetThrough::default()
        };
        let mut ns = namespaces();
        ns.insert("kube-system".to_owned(), ns["apps"].clone());
        let system = vec![pod("system", "kube-system", 100, &plain)];
        assert_eq!(
            admitted_without(&system, window, &entry(), &critical, &ns).len(),
            1
        );
    }

    #[test]
    fn only_what_a_controller_recreates_and_can_spare_is_evicted() {
        let p = pod("a", "apps", 100, &[]);
        let e = entry();
        assert_eq!(
            treatment(AfterRestore::Evict, &p, 3, false, &e),
            Treatment::Evict
        );
        assert!(matches!(
            treatment(AfterRestore::Report, &p, 3, false, &e),
            Treatment::Report(_)
        ));
        assert!(matches!(
            treatment(AfterRestore::Evict, &p, 1, false, &e),
            Treatment::Report(why) if why.contains("fewer than 2")
        ));
        assert_eq!(
            treatment(AfterRestore::Evict, &p, 1, true, &e),
            Treatment::Evict
        );
        let bare = PodFacts {
            controller: None,
            ..p.clone()
        };
        assert!(matches!(
            treatment(AfterRestore::Evict, &bare, 3, true, &e),
            Treatment::Report(_)
        ));
        let job = PodFacts {
            controller: Some(Controller {
                kind: "Job".to_owned(),
                name: "j".to_owned(),
                uid: "j".to_owned(),
            }),
            ..p.clone()
        };
        assert!(matches!(
            treatment(AfterRestore::Evict, &job, 3, true, &e),
            Treatment::Report(why) if why.contains("backoffLimit")
        ));
        for kind in ["Workflow", "Node", "PipelineRun"] {
            let other = PodFacts {
                controller: Some(Controller {
                    kind: kind.to_owned(),
                    name: "x".to_owned(),
                    uid: "x".to_owned(),
                }),
                ..p.clone()
            };
            assert!(
                matches!(
                    treatment(AfterRestore::Evict, &other, 3, true, &e),
                    Treatment::Report(why) if why.contains("re-create")
                ),
                "{kind}"
            );
        }
        for kind in RECREATING_CONTROLLERS {
            let pod = PodFacts {
                controller: Some(Controller {
                    kind: kind.to_owned(),
                    name: "x".to_owned(),
                    uid: "x".to_owned(),
                }),
                ..p.clone()
            };
            assert_eq!(
                treatment(AfterRestore::Evict, &pod, 2, false, &e),
                Treatment::Evict
            );
        }
        let mut own = entry();
        own["matchConditions"] = json!([{ "name": "own", "expression": "true" }]);
        assert!(matches!(
            treatment(AfterRestore::Evict, &p, 3, true, &own),
            Treatment::Report(why) if why.contains("matchConditions")
        ));
        own["matchConditions"] = json!([{ "name": super::super::MATCH_CONDITION_NAME,
                                          "expression": "true" }]);
        assert_eq!(
            treatment(AfterRestore::Evict, &p, 3, false, &own),
            Treatment::Evict
        );
    }

    #[test]
    fn ready_replicas_count_the_controllers_ready_pods_but_the_evicted_one() {
        let mut pods: Vec<PodFacts> = (0..3)
            .map(|i| pod(&format!("p{i}"), "apps", 100, &[]))
            .collect();
        pods[2].ready = false;
        let mut other = pod("other", "apps", 100, &[]);
        other.controller.as_mut().expect("a controller").uid = "other".to_owned();
        pods.push(other);
        assert_eq!(ready_replicas(&pods, "rs", None), 2);
        assert_eq!(ready_replicas(&pods, "rs", Some("uid-p0")), 1);
        pods[1].deleting = true;
        assert_eq!(ready_replicas(&pods, "rs", None), 1);
    }

    #[test]
    fn the_cap_counts_the_last_hour_only() {
        let now = Instant::now() + Duration::from_secs(7200);
        let old = now - Duration::from_secs(3601);
        let recent = now - Duration::from_secs(60);
        assert!(within_cap(&[old, old, recent], now, 2));
        assert!(!within_cap(&[recent, recent], now, 2));
        assert!(within_cap(&[], now, 1));
    }
}
