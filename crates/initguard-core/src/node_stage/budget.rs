//! The node stage's recreation budget, per top-level controller. The API server does not
//! consult PodDisruptionBudgets for a Pending pod, so this is the budget: one pod at a time
//! (the next once a replacement was seen and none created since the last recreation is
//! still uninitialized, or the patience after it has passed) and at most `maxPerHour` in any
//! hour. Rebuilt after a restart or failover from the guard's own `InitContainerRecreated`
//! Events, never from memory alone.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime};

use super::Hold;

/// The window `maxPerHour` counts over.
pub const HOUR: Duration = Duration::from_secs(3600);

/// How long the guard waits for the replacement of a recreated pod when the step has no
/// `deadline` to wait for instead.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
struct Ledger {
    /// Recreations in the last hour, oldest first.
    recent: VecDeque<SystemTime>,
    /// When the evicted pod's deletion was requested (API server clock, whole seconds:
    /// `deletionTimestamp` less the grace period): its controller creates the replacement at
    /// or after it. None until the watch shows it.
    cutoff: Option<SystemTime>,
    /// A pod created at or after the cutoff was seen.
    replacement_seen: bool,
    /// Pods created after the last recreation that are not initialized yet.
    uninitialized: HashSet<String>,
}

/// Recreations per controller (keyed by the controller's uid).
#[derive(Debug, Default)]
pub struct Budget {
    ledgers: HashMap<String, Ledger>,
}

impl Budget {
    /// Rebuild from the guard's own records (each: the controller's uid and when it
    /// recreated one of its pods, on this process's clock and never earlier than the truth).
    pub fn rebuild(records: impl IntoIterator<Item = (String, SystemTime)>) -> Budget {
        let mut budget = Budget::default();
        for (controller, at) in records {
            budget.recreated(&controller, at);
        }
        budget
    }

    /// Whether `controller` has a recreation on record (its pods' changes may change its hold).
    pub fn tracks(&self, controller: &str) -> bool {
        self.ledgers.contains_key(controller)
    }

    /// One pod of `controller` was evicted at `at`.
    pub fn recreated(&mut self, controller: &str, at: SystemTime) {
        let ledger = self.ledgers.entry(controller.to_owned()).or_default();
        // In order, even if the clock stepped back.
        let index = ledger.recent.partition_point(|t| *t <= at);
        ledger.recent.insert(index, at);
        ledger.cutoff = None;
        ledger.replacement_seen = false;
        ledger.uninitialized.clear();
    }

    /// The watch shows the pod the guard evicted from `controller` being deleted, requested
    /// at `at` (on the API server's clock like the replacement's `creationTimestamp`); the
    /// earliest such time counts.
    pub fn deleting(&mut self, controller: &str, at: SystemTime) {
        if let Some(ledger) = self.ledgers.get_mut(controller) {
            ledger.cutoff = Some(ledger.cutoff.map_or(at, |c| c.min(at)));
        }
    }

    /// A pod of `controller` created at `created` (`creationTimestamp`) was seen,
    /// initialized or not, being deleted or not (then it is no replacement).
    pub fn pod_seen(
        &mut self,
        controller: &str,
        pod: &str,
        created: SystemTime,
        initialized: bool,
        deleting: bool,
    ) {
        let Some(ledger) = self.ledgers.get_mut(controller) else {
            return;
        };
        if deleting {
            // It will not initialize; its controller makes another.
            ledger.uninitialized.remove(pod);
            return;
        }
        // Same clock, same granularity: the replacement is created in the second of the
        // deletion or later.
        if ledger.cutoff.is_none_or(|cutoff| created < cutoff) {
            return;
        }
        ledger.replacement_seen = true;
        if initialized {
            ledger.uninitialized.remove(pod);
        } else {
            ledger.uninitialized.insert(pod.to_owned());
        }
    }

    /// A pod of `controller` was deleted.
    pub fn pod_gone(&mut self, controller: &str, pod: &str) {
        if let Some(ledger) = self.ledgers.get_mut(controller) {
            ledger.uninitialized.remove(pod);
        }
    }

    /// Why `controller` may not have another pod recreated at `now`, None when it may.
    /// `patience`: how long after a recreation the guard waits for its replacement at most.
    pub fn hold(
        &self,
        controller: &str,
        now: SystemTime,
        patience: Duration,
        max_per_hour: u32,
    ) -> Option<Hold> {
        let ledger = self.ledgers.get(controller)?;
        // Recreations inside the hour ending now (a record in the future counts too).
        let inside: Vec<SystemTime> = ledger
            .recent
            .iter()
            .copied()
            .filter(|at| at.checked_add(HOUR).is_none_or(|end| end > now))
            .collect();
        let max = usize::try_from(max_per_hour).unwrap_or(usize::MAX);
        if inside.len() >= max.max(1) {
            // The hold lifts when enough of them have left the hour.
            let leaving = inside[inside.len() - max.max(1)];
            return Some(Hold::HourlyCap {
                until: leaving.checked_add(HOUR).unwrap_or(leaving),
            });
        }
        let last = *ledger.recent.back()?;
        let settled = ledger.replacement_seen && ledger.uninitialized.is_empty();
        let until = last.checked_add(patience).unwrap_or(last);
        (!settled && until > now).then_some(Hold::OneAtATime { until })
    }

    /// Forget recreations that left the hour before `now`, and controllers with none left.
    pub fn forget_before(&mut self, now: SystemTime) {
        self.ledgers.retain(|_, ledger| {
            while ledger
                .recent
                .front()
                .is_some_and(|at| at.checked_add(HOUR).is_some_and(|end| end <= now))
            {
                ledger.recent.pop_front();
            }
            !ledger.recent.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    const P: Duration = Duration::from_secs(60);

    #[test]
    fn a_controller_never_recreated_is_free() {
        let b = Budget::default();
        assert_eq!(b.hold("rs", at(0), P, 10), None);
    }

    #[test]
    fn one_at_a_time_until_the_replacement_initialized_or_patience() {
        let mut b = Budget::default();
        b.recreated("rs", at(10));
        // Nothing seen yet: held, however quiet it looks.
        assert_eq!(
            b.hold("rs", at(11), P, 10),
            Some(Hold::OneAtATime { until: at(70) })
        );
        // Before the deletion is seen, no pod counts as the replacement.
        b.pod_seen("rs", "early", at(12), true, false);
        assert!(b.hold("rs", at(12), P, 10).is_some());
        // When the evicted pod's deletion was requested (server clock): a pod created in
        // that second is the replacement; one created before is not, nor one being deleted
        // (the evicted pod itself).
        b.deleting("rs", at(11));
        b.pod_seen("rs", "old", at(10), true, false);
        b.pod_seen("rs", "evicted", at(11), true, true);
        assert!(b.hold("rs", at(12), P, 10).is_some());
        b.pod_seen("rs", "new", at(11), false, false);
        assert!(b.hold("rs", at(13), P, 10).is_some());
        b.pod_seen("rs", "new", at(12), true, false);
        assert_eq!(b.hold("rs", at(14), P, 10), None);
        // Patience ends the wait for a replacement that never initializes.
        b.recreated("rs", at(20));
        b.deleting("rs", at(20));
        b.pod_seen("rs", "new2", at(21), false, false);
        assert!(b.hold("rs", at(79), P, 10).is_some());
        assert_eq!(b.hold("rs", at(80), P, 10), None);
        // A replacement deleted uninitialized no longer holds.
        b.recreated("rs", at(100));
        b.deleting("rs", at(100));
        b.pod_seen("rs", "new3", at(101), false, false);
        b.pod_gone("rs", "new3");
        assert_eq!(b.hold("rs", at(102), P, 10), None);
        // Controllers are independent.
        assert_eq!(b.hold("other", at(102), P, 10), None);
    }

    #[test]
    fn the_hourly_cap_counts_a_sliding_hour() {
        let mut b = Budget::default();
        for s in [0, 100, 200] {
            b.recreated("rs", at(s));
            b.deleting("rs", at(s));
            b.pod_seen("rs", &format!("p{s}"), at(s + 1), true, false);
        }
        assert_eq!(
            b.hold("rs", at(300), P, 3),
            Some(Hold::HourlyCap { until: at(3600) })
        );
        assert_eq!(
            b.hold("rs", at(3599), P, 3),
            Some(Hold::HourlyCap { until: at(3600) })
        );
        assert_eq!(b.hold("rs", at(3600), P, 3), None);
        assert_eq!(b.hold("rs", at(300), P, 4), None);
    }

    #[test]
    fn a_rebuild_from_records_out_of_order_holds_as_the_original() {
        let b = Budget::rebuild([
            ("rs".to_owned(), at(200)),
            ("rs".to_owned(), at(0)),
            ("rs".to_owned(), at(100)),
        ]);
        assert_eq!(
            b.hold("rs", at(300), P, 3),
            Some(Hold::HourlyCap { until: at(3600) })
        );
        // After a restart nothing is known of the replacement: one at a time from the latest.
        assert_eq!(
            b.hold("rs", at(201), P, 10),
            Some(Hold::OneAtATime { until: at(260) })
        );
    }

    #[test]
    fn records_stay_in_order_when_the_clock_steps_back() {
        let mut b = Budget::default();
        b.recreated("rs", at(100));
        b.recreated("rs", at(50));
        // The latest (100) is the one a replacement is awaited for.
        assert_eq!(
            b.hold("rs", at(101), P, 10),
            Some(Hold::OneAtATime { until: at(160) })
        );
        assert_eq!(
            b.hold("rs", at(101), P, 2),
            Some(Hold::HourlyCap { until: at(3650) })
        );
    }

    #[test]
    fn forgetting_keeps_what_is_inside_the_hour() {
        let mut b = Budget::default();
        b.recreated("a", at(0));
        b.recreated("b", at(1000));
        b.forget_before(at(3600));
        assert_eq!(b.ledgers.len(), 1);
        assert!(!b.ledgers.contains_key("a"));
        assert!(b.hold("b", at(1001), P, 1).is_some());
    }
}
