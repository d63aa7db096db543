//! The object store: objects by storage and key, one global resourceVersion counter, a
//! bounded window of recent changes for watches and a (separately bounded) change log for
//! test assertions.
//!
//! Every committed write bumps the counter by exactly one and records exactly one change, so
//! the change with resourceVersion `rv` sits at a computable index of the window: watchers
//! resume from any version still in the window in O(1) and see changes in order.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use bytes::Bytes;
use serde_json::{Value, json};

use super::resources::Storage;

/// `(namespace, name)`; the namespace is "" for cluster-scoped objects.
pub(crate) type Key = (String, String);

/// The kind of a committed change, as watch events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub change_type: ChangeType,
    pub storage: Storage,
    pub namespace: String,
    pub name: String,
    /// The object after the change; for a deletion its last state carrying the deletion's
    /// resourceVersion (what a DELETED watch event shows).
    pub object: Arc<Value>,
    /// The object before the change (none for a creation).
    pub prev: Option<Arc<Value>>,
    /// Who made the change.
    pub user: String,
    pub time: SystemTime,
    json: OnceLock<Bytes>,
}

impl Change {
    /// `object` serialized once and shared by every watcher that sends it unchanged.
    pub(crate) fn object_json(&self) -> &Bytes {
        self.json
            .get_or_init(|| Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default()))
    }
}

/// The in-memory store. Not synchronized: the server wraps it in a mutex.
#[derive(Debug)]
pub(crate) struct Store {
    rv: u64,
    objects: Vec<BTreeMap<Key, Arc<Value>>>,
    window: VecDeque<Arc<Change>>,
    window_limit: usize,
    log: VecDeque<Arc<Change>>,
    log_limit: usize,
    /// `metadata.initializers.result` of pods deleted because initialization failed, by uid,
    /// for the creator still waiting on them.
    failed_initializations: HashMap<String, Value>,
}

impl Store {
    /// An empty store keeping `window_limit` changes for watches and `log_limit` for
    /// [`Store::changes`].
    pub(crate) fn new(window_limit: usize, log_limit: usize) -> Store {
        Store {
            rv: 0,
            objects: Storage::ALL.iter().map(|_| BTreeMap::new()).collect(),
            window: VecDeque::new(),
            window_limit: window_limit.max(1),
            log: VecDeque::new(),
            log_limit,
            failed_initializations: HashMap::new(),
        }
    }

    /// The latest resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// The object stored under `key`.
    pub(crate) fn get(&self, storage: Storage, namespace: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects[storage.index()].get(&(namespace.to_string(), name.to_string()))
    }

    /// Objects of a storage in key order, starting after `after` (exclusive), restricted to
    /// one namespace when given.
    pub(crate) fn scan<'a>(
        &'a self,
        storage: Storage,
        namespace: Option<&'a str>,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<Value>)> + 'a {
        let map = &self.objects[storage.index()];
        let lower = match (after, namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        map.range((lower, Bound::Unbounded))
            .take_while(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns))
    }

    /// Store `obj` (ADDED if the key is new, else MODIFIED), assigning the next
    /// resourceVersion to `metadata.resourceVersion`.
    pub(crate) fn put(&mut self, storage: Storage, mut obj: Value, user: &str) -> Arc<Change> {
        self.rv += 1;
        let rv = self.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let namespace = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let object = Arc::new(obj);
        let prev =
            self.objects[storage.index()].insert((namespace.clone(), name.clone()), object.clone());
        let change_type = if prev.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.record(Change {
            rv,
            change_type,
            storage,
            namespace,
            name,
            object,
            prev,
            user: user.to_string(),
            time: SystemTime::now(),
            json: OnceLock::new(),
        })
    }

    /// Delete the object under `key`, if any.
    pub(crate) fn remove(
        &mut self,
        storage: Storage,
        namespace: &str,
        name: &str,
        user: &str,
    ) -> Option<Arc<Change>> {
        let prev =
            self.objects[storage.index()].remove(&(namespace.to_string(), name.to_string()))?;
        self.rv += 1;
        let rv = self.rv;
        let mut last = (*prev).clone();
        last["metadata"]["resourceVersion"] = json!(rv.to_string());
        Some(self.record(Change {
            rv,
            change_type: ChangeType::Deleted,
            storage,
            namespace: namespace.to_string(),
            name: name.to_string(),
            object: Arc::new(last),
            prev: Some(prev),
            user: user.to_string(),
            time: SystemTime::now(),
            json: OnceLock::new(),
        }))
    }

    fn record(&mut self, change: Change) -> Arc<Change> {
        let change = Arc::new(change);
        self.window.push_back(change.clone());
        while self.window.len() > self.window_limit {
            self.window.pop_front();
        }
        if self.log_limit > 0 {
            self.log.push_back(change.clone());
            while self.log.len() > self.log_limit {
                self.log.pop_front();
            }
        }
        change
    }

    /// Up to `max` changes after resourceVersion `after`, oldest first; `Err(oldest)` when
    /// changes after `after` have already left the window (the watcher must relist).
    pub(crate) fn changes_after(&self, after: u64, max: usize) -> Result<Vec<Arc<Change>>, u64> {
        let Some(first) = self.window.front().map(|c| c.rv) else {
            return Ok(Vec::new());
        };
        if after + 1 < first {
            return Err(first);
        }
        let start = usize::try_from(after + 1 - first).unwrap_or(usize::MAX);
        Ok(self.window.iter().skip(start).take(max).cloned().collect())
    }

    /// Oldest resourceVersion a watch may resume from (`None` before any change).
    pub(crate) fn oldest_resumable(&self) -> Option<u64> {
        self.window.front().map(|c| c.rv.saturating_sub(1))
    }

    /// The change log, oldest first.
    pub(crate) fn changes(&self) -> Vec<Arc<Change>> {
        self.log.iter().cloned().collect()
    }

    /// Remember why initialization of the pod with `uid` failed.
    pub(crate) fn note_failed_initialization(&mut self, uid: &str, result: Value) {
        if self.failed_initializations.len() >= 10_000 {
            self.failed_initializations.clear();
        }
        self.failed_initializations.insert(uid.to_string(), result);
    }

    /// Why initialization of the pod with `uid` failed, if it did.
    pub(crate) fn failed_initialization(&self, uid: &str) -> Option<&Value> {
        self.failed_initializations.get(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}})
    }

    #[test]
    fn versions_are_global_and_changes_resumable() {
        let mut s = Store::new(3, 100);
        let a = s.put(Storage::Pods, pod("a", "p1"), "u");
        assert_eq!(a.rv, 1);
        assert_eq!(a.change_type, ChangeType::Added);
        assert_eq!(a.object["metadata"]["resourceVersion"], "1");
        let b = s.put(Storage::Pods, pod("a", "p1"), "u");
        assert_eq!(b.change_type, ChangeType::Modified);
        assert!(b.prev.is_some());
        s.put(Storage::Leases, pod("a", "l"), "u");
        let d = s.remove(Storage::Pods, "a", "p1", "u").unwrap();
        assert_eq!(d.rv, 4);
        assert_eq!(d.object["metadata"]["resourceVersion"], "4");
        assert_eq!(d.prev.as_ref().unwrap()["metadata"]["resourceVersion"], "2");
        // window holds rv 2..=4: resuming after 1 works, after 0 is gone
        let after1: Vec<u64> = s
            .changes_after(1, 10)
            .unwrap()
            .iter()
            .map(|c| c.rv)
            .collect();
        assert_eq!(after1, vec![2, 3, 4]);
        assert_eq!(s.changes_after(0, 10).unwrap_err(), 2);
        assert!(s.changes_after(4, 10).unwrap().is_empty());
        assert_eq!(s.changes().len(), 4);
        assert_eq!(s.oldest_resumable(), Some(1));
    }

    #[test]
    fn scan_is_ordered_and_scoped() {
        let mut s = Store::new(10, 10);
        for (ns, n) in [("b", "2"), ("a", "1"), ("b", "1"), ("c", "1")] {
            s.put(Storage::Pods, pod(ns, n), "u");
        }
        let all: Vec<_> = s
            .scan(Storage::Pods, None, None)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(all[0], ("a".into(), "1".into()));
        assert_eq!(all.len(), 4);
        let b: Vec<_> = s
            .scan(Storage::Pods, Some("b"), None)
            .map(|(k, _)| k.1.clone())
            .collect();
        assert_eq!(b, vec!["1", "2"]);
        let after: Vec<_> = s
            .scan(Storage::Pods, Some("b"), Some(&("b".into(), "1".into())))
            .map(|(k, _)| k.1.clone())
            .collect();
        assert_eq!(after, vec!["2"]);
    }
}
