//! The verbs over the store: create, update, patch, delete, get and paginated list, with the
//! generic metadata rules of the API server (names, generateName, resourceVersion
//! preconditions, immutable fields, no-op updates). Callers hold the store lock for the whole
//! call, so every verb is atomic.

use std::sync::Arc;

use serde_json::{Value, json};

use super::kinds::{self, WriteCtx};
use super::patch::{self, PatchType};
use super::resources::{ResourceInfo, Storage};
use kube_common::names::{validate_dns1123_label, validate_dns1123_subdomain};

use super::selectors::{FieldSelector, LabelSelector, labels_match};
use super::status::{ApiError, FieldError};
use super::store::{Change, Key, Store};

/// What a write did.
#[derive(Debug)]
pub(crate) struct WriteOutcome {
    /// The stored form after the write (for a deletion: the last state before it).
    pub object: Arc<Value>,
    /// Committed changes, in order (empty for a no-op or a dry run).
    pub changes: Vec<Arc<Change>>,
}

/// Who writes, and whether for real.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Writer<'a> {
    pub user: &'a str,
    pub dry_run: bool,
    pub ctx: WriteCtx<'a>,
}

pub(crate) fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj["metadata"][key].as_str().unwrap_or_default()
}

/// Checks common to create and update bodies; returns the body in stored form.
fn check_body(res: &ResourceInfo, body: Value, namespace: Option<&str>) -> Result<Value, ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body of the request must be a {} object",
            res.kind
        )));
    }
    if let Some(v) = body["apiVersion"].as_str()
        && v != res.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({})",
            res.api_version()
        )));
    }
    if let Some(k) = body["kind"].as_str()
        && k != res.kind
    {
        return Err(ApiError::bad_request(format!(
            "{k} in version \"{}\" cannot be handled as a {}: the kind in the data does not match the URL",
            res.version, res.kind
        )));
    }
    for map in ["labels", "annotations"] {
        let m = &body["metadata"][map];
        if !m.is_null()
            && !m
                .as_object()
                .is_some_and(|o| o.values().all(Value::is_string))
        {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: metadata.{map} must map strings to strings",
                res.kind, res.version, res.kind
            )));
        }
    }
    if let Some(ns) = namespace
        && let Some(body_ns) = body["metadata"]["namespace"].as_str()
        && !body_ns.is_empty()
        && body_ns != ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut obj = kinds::to_storage(res, body);
    let canonical = res.storage.canonical();
    obj["kind"] = json!(canonical.kind);
    obj["apiVersion"] = json!(canonical.api_version());
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    match namespace {
        Some(ns) => obj["metadata"]["namespace"] = json!(ns),
        None => {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("namespace");
            }
        }
    }
    Ok(obj)
}

fn validate_name(res: &ResourceInfo, name: &str) -> Option<FieldError> {
    if res.storage == Storage::Namespaces {
        let ok = validate_dns1123_label(name).is_ok();
        (!ok).then(|| {
            FieldError::invalid(
                "metadata.name",
                json!(name),
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            )
        })
    } else {
        validate_dns1123_subdomain(name).is_err().then(|| {
            FieldError::invalid(
                "metadata.name",
                json!(name),
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        })
    }
}

/// Five characters the way `generateName` suffixes are made (no vowels, no confusables).
fn name_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// A random RFC 4122 version 4 UUID.
pub(crate) fn new_uid() -> String {
    use rand::Rng;
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// POST to a collection.
pub(crate) fn create(
    store: &mut Store,
    res: &ResourceInfo,
    namespace: Option<&str>,
    body: Value,
    w: Writer<'_>,
) -> Result<WriteOutcome, ApiError> {
    let mut obj = check_body(res, body, namespace)?;
    if !meta_str(&obj, "resourceVersion").is_empty() {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let mut name = meta_str(&obj, "name").to_string();
    if name.is_empty() {
        let prefix = meta_str(&obj, "generateName").to_string();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                res,
                "",
                &[FieldError::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            ));
        }
        name = format!("{prefix}{}", name_suffix());
        obj["metadata"]["name"] = json!(name);
    }
    if let Some(e) = validate_name(res, &name) {
        return Err(ApiError::invalid(res, &name, &[e]));
    }
    if let Some(ns) = namespace
        && store.get(Storage::Namespaces, "", ns).is_none()
    {
        return Err(ApiError::not_found(Storage::Namespaces.canonical(), ns));
    }
    if store
        .get(res.storage, namespace.unwrap_or_default(), &name)
        .is_some()
    {
        return Err(ApiError::already_exists(res, &name));
    }
    let meta = &mut obj["metadata"];
    meta["uid"] = json!(new_uid());
    meta["creationTimestamp"] = json!(w.ctx.now);
    if let Some(m) = meta.as_object_mut() {
        for k in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
            "managedFields",
        ] {
            m.remove(k);
        }
    }
    kinds::prepare_create(res, &mut obj, &w.ctx)?;
    if w.dry_run {
        return Ok(WriteOutcome {
            object: Arc::new(obj),
            changes: Vec::new(),
        });
    }
    let change = store.put(res.storage, obj, w.user);
    Ok(WriteOutcome {
        object: change.object.clone(),
        changes: vec![change],
    })
}

fn check_identity(
    res: &ResourceInfo,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let body_name = meta_str(new, "name");
    if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let uid = meta_str(new, "uid");
    if !uid.is_empty() && uid != meta_str(old, "uid") {
        return Err(ApiError::conflict(
            res,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(old, "uid")
            ),
        ));
    }
    let rv = meta_str(new, "resourceVersion");
    if !rv.is_empty() && rv != meta_str(old, "resourceVersion") {
        return Err(ApiError::stale(res, name));
    }
    Ok(())
}

fn existing(
    store: &Store,
    res: &ResourceInfo,
    namespace: Option<&str>,
    name: &str,
) -> Result<Arc<Value>, ApiError> {
    store
        .get(res.storage, namespace.unwrap_or_default(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(res, name))
}

/// PUT of an object or its status.
pub(crate) fn update(
    store: &mut Store,
    res: &ResourceInfo,
    subresource: Option<&str>,
    namespace: Option<&str>,
    name: &str,
    body: Value,
    w: Writer<'_>,
) -> Result<WriteOutcome, ApiError> {
    let new = check_body(res, body, namespace)?;
    let old = existing(store, res, namespace, name)?;
    check_identity(res, name, &old, &new)?;
    finish_update(store, res, subresource, old, new, w)
}

/// PATCH of an object or its status.
#[allow(clippy::too_many_arguments)]
pub(crate) fn patch(
    store: &mut Store,
    res: &ResourceInfo,
    subresource: Option<&str>,
    namespace: Option<&str>,
    name: &str,
    patch_type: PatchType,
    body: &[u8],
    w: Writer<'_>,
) -> Result<WriteOutcome, ApiError> {
    let old = existing(store, res, namespace, name)?;
    let mut doc = kinds::from_storage(res, &old);
    patch::apply(patch_type, &mut doc, body)?;
    let new = check_body(res, doc, namespace)?;
    check_identity(res, name, &old, &new)?;
    finish_update(store, res, subresource, old, new, w)
}

fn finish_update(
    store: &mut Store,
    res: &ResourceInfo,
    subresource: Option<&str>,
    old: Arc<Value>,
    mut new: Value,
    w: Writer<'_>,
) -> Result<WriteOutcome, ApiError> {
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "name",
        "namespace",
    ] {
        new["metadata"][k] = old["metadata"][k].clone();
    }
    if let Some(m) = new["metadata"].as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    kinds::prepare_update(res, subresource, &old, &mut new, &w.ctx)?;
    if new == *old {
        return Ok(WriteOutcome {
            object: old,
            changes: Vec::new(),
        });
    }
    if w.dry_run {
        return Ok(WriteOutcome {
            object: Arc::new(new),
            changes: Vec::new(),
        });
    }
    let failed = (res.storage == Storage::Pods)
        .then(|| kinds::initialization_result(&new).cloned())
        .flatten();
    let namespace = meta_str(&old, "namespace").to_string();
    let name = meta_str(&old, "name").to_string();
    let change = store.put(res.storage, new, w.user);
    let mut changes = vec![change.clone()];
    if let Some(result) = failed {
        // A failure result ends initialization: the object is deleted and its waiting
        // creator gets the result.
        store.note_failed_initialization(meta_str(&old, "uid"), result);
        if let Some(d) = store.remove(res.storage, &namespace, &name, w.user) {
            changes.push(d);
        }
    }
    Ok(WriteOutcome {
        object: change.object.clone(),
        changes,
    })
}

/// Namespaces that may not be deleted.
const UNDELETABLE: &[&str] = &["default", "kube-system", "kube-public"];

/// DELETE of one object, honouring `DeleteOptions.preconditions`.
pub(crate) fn delete(
    store: &mut Store,
    res: &ResourceInfo,
    namespace: Option<&str>,
    name: &str,
    options: &Value,
    w: Writer<'_>,
) -> Result<WriteOutcome, ApiError> {
    let old = existing(store, res, namespace, name)?;
    let pre = &options["preconditions"];
    if let Some(uid) = pre["uid"].as_str()
        && uid != meta_str(&old, "uid")
    {
        return Err(ApiError::conflict(
            res,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&old, "uid")
            ),
        ));
    }
    if let Some(rv) = pre["resourceVersion"].as_str()
        && rv != meta_str(&old, "resourceVersion")
    {
        return Err(ApiError::conflict(
            res,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta_str(&old, "resourceVersion")
            ),
        ));
    }
    if res.storage == Storage::Namespaces && UNDELETABLE.contains(&name) {
        return Err(ApiError::forbidden(
            "namespaces",
            "",
            Some(name),
            "this namespace may not be deleted",
        ));
    }
    if w.dry_run {
        return Ok(WriteOutcome {
            object: old,
            changes: Vec::new(),
        });
    }
    let mut changes = Vec::new();
    if res.storage == Storage::Namespaces {
        // The namespace controller empties a deleted namespace; done at once here.
        for storage in Storage::ALL {
            if !storage.canonical().namespaced {
                continue;
            }
            let keys: Vec<Key> = store
                .scan(storage, Some(name), None)
                .map(|(k, _)| k.clone())
                .collect();
            for (ns, n) in keys {
                changes.extend(store.remove(storage, &ns, &n, w.user));
            }
        }
    }
    changes.extend(store.remove(res.storage, namespace.unwrap_or_default(), name, w.user));
    Ok(WriteOutcome {
        object: old,
        changes,
    })
}

/// An Eviction of pod `name` (`pods/eviction`), honouring the body's `deleteOptions`
/// preconditions. No PodDisruptionBudgets are simulated (a real server skips them for
/// Pending pods from 1.19, the only pods the guard evicts). A bound pod is deleted the way a
/// real server and its kubelet do it: marked with a `deletionTimestamp` first, then removed
/// (the kubelet's confirmation, at once here), so watchers see both changes.
pub(crate) fn evict(
    store: &mut Store,
    res: &ResourceInfo,
    namespace: Option<&str>,
    name: &str,
    options: &Value,
    w: Writer<'_>,
) -> Result<WriteOutcome, ApiError> {
    let old = existing(store, res, namespace, name)?;
    let bound = !old["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty();
    let uid_holds = options["preconditions"]["uid"]
        .as_str()
        .is_none_or(|uid| uid == meta_str(&old, "uid"));
    let mut changes = Vec::new();
    if bound && uid_holds && !w.dry_run && old["metadata"]["deletionTimestamp"].is_null() {
        let mut marked = (*old).clone();
        marked["metadata"]["deletionTimestamp"] = json!(w.ctx.now);
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        let rv = options["preconditions"]["resourceVersion"].as_str();
        if rv.is_none_or(|rv| rv == meta_str(&old, "resourceVersion")) {
            changes.push(store.put(res.storage, marked, w.user));
            // The resourceVersion precondition held for the object the caller read.
            let mut options = options.clone();
            if let Some(pre) = options["preconditions"].as_object_mut() {
                pre.remove("resourceVersion");
            }
            let mut outcome = delete(store, res, namespace, name, &options, w)?;
            changes.append(&mut outcome.changes);
            outcome.changes = changes;
            return Ok(outcome);
        }
    }
    delete(store, res, namespace, name, options, w)
}

/// What a list or watch selects.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// Show objects with pending legacy initializers.
    pub include_uninitialized: bool,
}

impl Filter {
    /// Whether `obj` (stored form) is selected.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        (self.include_uninitialized || !kinds::is_uninitialized(obj))
            && labels_match(&self.labels, obj)
            && (self.fields.is_empty() || self.fields.matches_object(obj))
    }
}

/// One page of a list.
#[derive(Debug)]
pub(crate) struct Page {
    pub items: Vec<Arc<Value>>,
    /// Key of the last item when more remain.
    pub next: Option<Key>,
    /// Items left after this page (only computed without selectors, as real servers do).
    pub remaining: Option<u64>,
}

/// Objects of `res` in key order, after `after`, at most `limit`.
pub(crate) fn list(
    store: &Store,
    res: &ResourceInfo,
    namespace: Option<&str>,
    filter: &Filter,
    limit: Option<usize>,
    after: Option<&Key>,
) -> Page {
    // A name selector inside one namespace is a point read.
    if let (Some(ns), Some(name)) = (namespace, filter.fields.equals("metadata.name")) {
        let items: Vec<Arc<Value>> = store
            .get(res.storage, ns, name)
            .filter(|o| filter.matches(o))
            .filter(|_| after.is_none())
            .cloned()
            .into_iter()
            .collect();
        return Page {
            items,
            next: None,
            remaining: None,
        };
    }
    let ns_scope = if res.namespaced { namespace } else { None };
    let mut iter = store
        .scan(res.storage, ns_scope, after)
        .filter(|(_, o)| filter.matches(o));
    let mut items = Vec::new();
    let mut last: Option<Key> = None;
    let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    for (k, o) in iter.by_ref() {
        items.push(o.clone());
        last = Some(k.clone());
        if items.len() >= limit {
            break;
        }
    }
    if items.len() < limit {
        return Page {
            items,
            next: None,
            remaining: None,
        };
    }
    // Counting what is left costs a scan; only unfiltered lists report it, as real servers
    // do, and filtered ones just look for one more match.
    let unfiltered = filter.labels.is_empty() && filter.fields.is_empty();
    let (more, remaining) = if unfiltered {
        let rest = iter.count() as u64;
        (rest > 0, Some(rest))
    } else {
        (iter.next().is_some(), None)
    };
    Page {
        items,
        next: if more { last } else { None },
        remaining: if more { remaining } else { None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::by_plural;
    use kube_common::Mechanism;

    fn writer() -> Writer<'static> {
        Writer {
            user: "tester",
            dry_run: false,
            ctx: WriteCtx {
                mechanism: Mechanism::SchedulingGates,
                legacy_initializers: &[],
                now: "2024-01-01T00:00:00Z",
                drop_match_conditions: false,
            },
        }
    }

    fn store_with_ns() -> Store {
        let mut s = Store::new(100, 100);
        let ns = by_plural("namespaces").unwrap();
        create(
            &mut s,
            ns,
            None,
            json!({"metadata": {"name": "a"}}),
            writer(),
        )
        .unwrap();
        s
    }

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn create_update_conflicts() {
        let mut s = store_with_ns();
        let pods = by_plural("pods").unwrap();
        let p = create(&mut s, pods, Some("a"), pod("p"), writer()).unwrap();
        assert_eq!(p.object["metadata"]["namespace"], "a");
        let e = create(&mut s, pods, Some("a"), pod("p"), writer()).unwrap_err();
        assert_eq!((e.code, e.reason), (409, "AlreadyExists"));
        let e = create(&mut s, pods, Some("missing"), pod("p"), writer()).unwrap_err();
        assert_eq!(e.code, 404);
        let g = create(&mut s, pods, Some("a"), json!({"metadata": {"generateName": "x-"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}), writer()).unwrap();
        assert!(
            g.object["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("x-")
        );

        let mut stale = (*p.object).clone();
        stale["metadata"]["labels"] = json!({"a": "b"});
        let u = update(&mut s, pods, None, Some("a"), "p", stale.clone(), writer()).unwrap();
        assert_eq!(u.changes.len(), 1);
        let e = update(&mut s, pods, None, Some("a"), "p", stale, writer()).unwrap_err();
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        // no-op patches do not bump the version
        let n = patch(
            &mut s,
            pods,
            None,
            Some("a"),
            "p",
            PatchType::Merge,
            br#"{"metadata":{"labels":{"a":"b"}}}"#,
            writer(),
        )
        .unwrap();
        assert!(n.changes.is_empty());
        assert_eq!(
            n.object["metadata"]["resourceVersion"],
            u.object["metadata"]["resourceVersion"]
        );
    }

    #[test]
    fn pagination_visits_everything_once() {
        let mut s = store_with_ns();
        let pods = by_plural("pods").unwrap();
        for i in 0..25 {
            create(&mut s, pods, Some("a"), pod(&format!("p{i:02}")), writer()).unwrap();
        }
        let f = Filter::default();
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = list(&s, pods, None, &f, Some(10), after.as_ref());
            seen.extend(
                page.items
                    .iter()
                    .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
            );
            match page.next {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        assert_eq!(seen.len(), 25);
        let first = list(&s, pods, None, &f, Some(10), None);
        assert_eq!(first.remaining, Some(15));
        let exact = list(&s, pods, None, &f, Some(25), None);
        assert!(exact.next.is_none());
    }

    #[test]
    fn namespace_delete_cascades() {
        let mut s = store_with_ns();
        let pods = by_plural("pods").unwrap();
        let nss = by_plural("namespaces").unwrap();
        create(&mut s, pods, Some("a"), pod("p"), writer()).unwrap();
        let d = delete(&mut s, nss, None, "a", &Value::Null, writer()).unwrap();
        assert_eq!(d.changes.len(), 2);
        assert!(s.get(Storage::Pods, "a", "p").is_none());
        create(
            &mut s,
            nss,
            None,
            json!({"metadata": {"name": "default"}}),
            writer(),
        )
        .unwrap();
        assert_eq!(
            delete(&mut s, nss, None, "default", &Value::Null, writer())
                .unwrap_err()
                .code,
            403
        );
    }
}
