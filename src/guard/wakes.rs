//! Per-pod wake-ups at the times the policy names (no fixed tick).

use std::collections::{BTreeSet, HashMap};
use std::time::SystemTime;

use crate::tracker::PodKey;

/// Per-pod wake-ups ordered by time.
#[derive(Default)]
pub(super) struct Wakes {
    queue: BTreeSet<(SystemTime, PodKey)>,
    by_pod: HashMap<PodKey, SystemTime>,
}

impl Wakes {
    pub(super) fn set(&mut self, key: &str, at: Option<SystemTime>) {
        if let Some(old) = self.by_pod.remove(key) {
            self.queue.remove(&(old, key.to_owned()));
        }
        if let Some(at) = at {
            self.queue.insert((at, key.to_owned()));
            self.by_pod.insert(key.to_owned(), at);
        }
    }

    /// Keeps the earlier of the current and the new wake-up.
    pub(super) fn at_most(&mut self, key: &str, at: SystemTime) {
        if self.by_pod.get(key).is_none_or(|cur| at < *cur) {
            self.set(key, Some(at));
        }
    }

    pub(super) fn next(&self) -> Option<SystemTime> {
        self.queue.first().map(|(t, _)| *t)
    }

    pub(super) fn pop_due(&mut self, now: SystemTime) -> Vec<PodKey> {
        let mut due = Vec::new();
        while let Some((t, _)) = self.queue.first() {
            if *t > now {
                break;
            }
            if let Some((_, key)) = self.queue.pop_first() {
                self.by_pod.remove(&key);
                due.push(key);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn wakes_keep_one_entry_per_pod_in_time_order() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut w = Wakes::default();
        w.set("a", Some(t0 + Duration::from_secs(5)));
        w.set("b", Some(t0 + Duration::from_secs(3)));
        w.set("a", Some(t0 + Duration::from_secs(1)));
        assert_eq!(w.next(), Some(t0 + Duration::from_secs(1)));
        w.at_most("b", t0 + Duration::from_secs(9));
        assert_eq!(w.by_pod["b"], t0 + Duration::from_secs(3));
        assert_eq!(
            w.pop_due(t0 + Duration::from_secs(3)),
            vec!["a".to_string(), "b".to_string()]
        );
        assert!(w.next().is_none());
        w.set("c", Some(t0));
        w.set("c", None);
        assert!(w.queue.is_empty() && w.by_pod.is_empty());
    }
}
