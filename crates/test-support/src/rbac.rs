//! Least privilege, judged by the API server: what the guard's identities asked for (the audit
//! log) against what the shipped RBAC manifests grant. Every request the server authorized must
//! be covered by a shipped rule or by a grant an operator adds per install; every shipped rule
//! must have been used by some scenario, or be listed in `tests/real_cluster/rbac-unused.md`
//! with the reason it is never used on that version.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use serde_json::Value;

use crate::testbed::{Audit, GUARD_USER, GUARD_USER_2, Version};

/// The exceptions file, relative to the repository.
pub const EXCEPTIONS: &str = "tests/real_cluster/rbac-unused.md";

/// One verb of one rule: what RBAC compares a request with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// The manifest's file name under `deploy/`, or `per install` for an operator's grant.
    pub source: String,
    /// `""` for the core group.
    pub group: String,
    /// `pods`, or `pods/status` for a subresource.
    pub resource: String,
    pub verb: String,
    /// The Role's namespace; `None` for a ClusterRole.
    pub namespace: Option<String>,
    /// `resourceNames`; empty for any name.
    pub names: Vec<String>,
}

impl Grant {
    /// Whether RBAC lets this grant authorize `request`.
    fn covers(&self, request: &Request) -> bool {
        (self.group == request.group || self.group == "*")
            && (self.resource == request.resource || self.resource == "*")
            && (self.verb == request.verb || self.verb == "*")
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == request.namespace)
            // RBAC cannot limit create or deletecollection by name (a create's name is in its
            // body, which the audit log records but the authorizer does not see); list and
            // watch by name go through a `metadata.name` field selector, which it does.
            && (self.names.is_empty()
                || (!matches!(request.verb.as_str(), "create" | "deletecollection")
                    && !request.name.is_empty()
                    && self.names.contains(&request.name)))
    }

    /// How narrow the grant is: named objects in one namespace are narrower than any object in
    /// one namespace, which is narrower than every namespace.
    fn narrowness(&self) -> (bool, bool) {
        (!self.names.is_empty(), self.namespace.is_some())
    }

    /// `group/resource verb`, the way the exceptions file names a grant.
    fn key(&self) -> String {
        key_of(&self.group, &self.resource, &self.verb)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}", self.key(), self.source)?;
        if let Some(ns) = &self.namespace {
            write!(f, ", namespace {ns}")?;
        }
        if !self.names.is_empty() {
            write!(f, ", names {:?}", self.names)?;
        }
        write!(f, ")")
    }
}

/// One resource request of the guard, as the audit log recorded it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub group: String,
    /// With `/subresource` when there is one.
    pub resource: String,
    pub verb: String,
    pub namespace: String,
    pub name: String,
}

impl Request {
    fn of(a: &Audit) -> Request {
        Request {
            group: a.group.clone(),
            resource: if a.subresource.is_empty() {
                a.resource.clone()
            } else {
                format!("{}/{}", a.resource, a.subresource)
            },
            verb: a.verb.clone(),
            namespace: a.namespace.clone(),
            name: a.name.clone(),
        }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{}",
            self.verb,
            group_name(&self.group),
            self.resource
        )?;
        if !self.namespace.is_empty() {
            write!(f, " in {}", self.namespace)?;
        }
        if !self.name.is_empty() {
            write!(f, " named {}", self.name)?;
        }
        Ok(())
    }
}

/// The manifests the test bed applies for the guard on `version` (tests/testbed/up).
pub fn shipped_manifests(version: Version) -> &'static [&'static str] {
    match version {
        Version::Legacy => &["rbac.yaml", "rbac-legacy-initializers.yaml"],
        Version::Current | Version::GatesBeta => &["rbac.yaml"],
    }
}

/// The manifests whose every grant must be used on `version`, or listed as never used there:
/// deploy/rbac.yaml on the current version (the run with every scenario), the legacy grants on
/// 1.13. The 1.27 run holds only the scenarios that differ by version, so it judges only that
/// what the guard used was granted.
pub fn judged_for_use(version: Version) -> &'static [&'static str] {
    match version {
        Version::Current => &["rbac.yaml"],
        Version::Legacy => &["rbac-legacy-initializers.yaml"],
        Version::GatesBeta => &[],
    }
}

/// The name the exceptions file gives `version`.
pub fn version_name(version: Version) -> &'static str {
    match version {
        Version::Current => "current",
        Version::GatesBeta => "gates-beta",
        Version::Legacy => "legacy",
    }
}

/// Every verb of every rule that `deploy/FILE` binds to one of the guard's identities (the
/// User [`GUARD_USER`], the ServiceAccount kube-system/initguard), where the binding puts it: a
/// ClusterRoleBinding everywhere, a RoleBinding in its namespace. Roles the file binds only to
/// others (the metrics readers), and built-in roles it binds but does not define
/// (`system:auth-delegator`: see the exceptions file), give nothing here.
pub fn grants_of(repo: &Path, file: &str) -> Result<Vec<Grant>, String> {
    let path = repo.join("deploy").join(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let object: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| format!("{}: not YAML: {e}", path.display()))?;
        objects.push(object);
    }
    let str_of = |v: &Value| v.as_str().unwrap_or("").to_owned();
    // (kind, namespace, name) → rules.
    let mut roles: std::collections::BTreeMap<(String, String, String), Vec<Value>> =
        std::collections::BTreeMap::new();
    for object in &objects {
        let kind = str_of(&object["kind"]);
        if !matches!(kind.as_str(), "Role" | "ClusterRole") {
            continue;
        }
        let namespace = str_of(&object["metadata"]["namespace"]);
        if kind == "Role" && namespace.is_empty() {
            return Err(format!(
                "{}: Role {} has no namespace",
                path.display(),
                object["metadata"]["name"]
            ));
        }
        let rules = object["rules"].as_array().cloned().unwrap_or_default();
        roles.insert(
            (kind, namespace, str_of(&object["metadata"]["name"])),
            rules,
        );
    }
    let guard_subject = |s: &Value| {
        (s["kind"] == "User" && s["name"] == GUARD_USER)
            || (s["kind"] == "ServiceAccount"
                && s["name"] == "initguard"
                && s["namespace"] == "kube-system")
    };
    let mut grants = Vec::new();
    for object in &objects {
        let kind = str_of(&object["kind"]);
        if !matches!(kind.as_str(), "RoleBinding" | "ClusterRoleBinding")
            || !object["subjects"]
                .as_array()
                .is_some_and(|s| s.iter().any(guard_subject))
        {
            continue;
        }
        let at = str_of(&object["metadata"]["namespace"]);
        let role_kind = str_of(&object["roleRef"]["kind"]);
        let role_ns = if role_kind == "Role" {
            at.clone()
        } else {
            String::new()
        };
        let key = (role_kind, role_ns, str_of(&object["roleRef"]["name"]));
        let Some(rules) = roles.get(&key) else {
            continue;
        };
        let namespace = (kind == "RoleBinding").then_some(at.as_str());
        for rule in rules {
            grants.extend(rule_grants(rule, file, namespace));
        }
    }
    Ok(grants)
}

/// One grant per (group, resource, verb) of `rule`.
fn rule_grants(rule: &Value, source: &str, namespace: Option<&str>) -> Vec<Grant> {
    let list = |key: &str| -> Vec<String> {
        rule[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let names = list("resourceNames");
    let mut grants = Vec::new();
    for group in list("apiGroups") {
        for resource in list("resources") {
            for verb in list("verbs") {
                grants.push(Grant {
                    source: source.to_owned(),
                    group: group.clone(),
                    resource: resource.clone(),
                    verb,
                    namespace: namespace.map(str::to_owned),
                    names: names.clone(),
                });
            }
        }
    }
    grants
}

/// The exceptions file's two tables: shipped grants never used on a version (`unused`), and
/// the grants an operator adds per install (`per_install`), as `group/resource verb` keys.
#[derive(Debug, Default)]
pub struct Exceptions {
    /// (version name, grant key).
    pub unused: BTreeSet<(String, String)>,
    /// Rows whose version is written `NAME?`: used in some runs of that version and not in
    /// others (a race a scenario provokes only sometimes), so never stale for being used.
    pub sometimes: BTreeSet<(String, String)>,
    /// Rules an operator adds per install: what the guard may use beyond the shipped manifests.
    pub per_install: Vec<Grant>,
}

/// Read [`EXCEPTIONS`]: under `## Never used`, rows `| grant | versions | why |`; under
/// `## Granted outside the shipped roles`, rows `| grant | how | why |`. A grant is `group/resource verb`
/// (`core` for the core group); versions are comma-separated [`version_name`]s, each with a
/// `?` when the grant is used in some runs of that version only.
pub fn exceptions(repo: &Path) -> Result<Exceptions, String> {
    let path = repo.join(EXCEPTIONS);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut out = Exceptions::default();
    let mut section = "";
    for (n, line) in text.lines().enumerate() {
        let at = || format!("{}:{}", path.display(), n + 1);
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim();
            continue;
        }
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = row
            .trim_end_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.len() != 3 {
            return Err(format!("{}: a row has three cells: {line:?}", at()));
        }
        // The header and the delimiter row.
        if cells[0] == "grant" || cells[0].starts_with('-') {
            continue;
        }
        if cells[2].is_empty() {
            return Err(format!("{}: {} says no reason", at(), cells[0]));
        }
        let key = parse_key(cells[0])
            .ok_or_else(|| format!("{}: {:?} is not `group/resource verb`", at(), cells[0]))?;
        match section {
            "Never used" => {
                for written in cells[1].split(',').map(str::trim) {
                    let version = written.trim_end_matches('?');
                    if !["current", "gates-beta", "legacy"].contains(&version) {
                        return Err(format!("{}: unknown version {version:?}", at()));
                    }
                    let row = (version.to_owned(), key_of(&key.0, &key.1, &key.2));
                    if written.ends_with('?') {
                        out.sometimes.insert(row.clone());
                    }
                    out.unused.insert(row);
                }
            }
            "Granted outside the shipped roles" => {
                let (group, resource, verb) = key.clone();
                out.per_install.push(Grant {
                    source: "per install".to_owned(),
                    group,
                    resource,
                    verb,
                    namespace: None,
                    names: Vec::new(),
                });
            }
            other => return Err(format!("{}: a table under unknown heading {other:?}", at())),
        }
    }
    Ok(out)
}

/// The exceptions file's name for API group `group`: `core` for the core group.
fn group_name(group: &str) -> &str {
    if group.is_empty() { "core" } else { group }
}

/// `group/resource verb`, the key of a grant in the exceptions file.
fn key_of(group: &str, resource: &str, verb: &str) -> String {
    format!("{}/{resource} {verb}", group_name(group))
}

/// `group/resource verb` → (group, resource, verb); `core` is the core group.
fn parse_key(key: &str) -> Option<(String, String, String)> {
    let (what, verb) = key.trim_matches('`').split_once(' ')?;
    let (group, resource) = what.split_once('/')?;
    let group = if group == "core" { "" } else { group };
    (!resource.is_empty() && !verb.contains(' '))
        .then(|| (group.to_owned(), resource.to_owned(), verb.to_owned()))
}

/// Whether the authorizer refused `a`: 403 with its wording (`User "…" cannot VERB …`), or
/// with no message at all (1.13 records none for some refusals: counted, to be safe). An
/// admission plugin's worded 403 (a terminating namespace, a policy) says nothing about RBAC.
fn refused_by_rbac(a: &Audit) -> bool {
    a.code == 403
        && (a.message.is_empty() || a.message.contains(&format!("User \"{}\" cannot ", a.user)))
}

/// The verdict of [`judge`].
#[derive(Debug, Default)]
pub struct Verdict {
    /// Authorized requests that no shipped or per-install grant covers.
    pub unexplained: BTreeSet<Request>,
    /// Requests the authorizer refused (403).
    pub refused: BTreeSet<Request>,
    /// Grants of [`judged_for_use`] that no authorized request used and the exceptions file
    /// does not list.
    pub unused: BTreeSet<String>,
    /// Exceptions of this version that a request did use, or that name no judged grant: the
    /// file is stale.
    pub stale: BTreeSet<String>,
}

impl Verdict {
    /// Whether the shipped manifests are exactly what the guard used.
    pub fn holds(&self, refused_on_purpose: &dyn Fn(&Request) -> bool) -> bool {
        self.unexplained.is_empty()
            && self.unused.is_empty()
            && self.stale.is_empty()
            && self.refused.iter().all(refused_on_purpose)
    }
}

/// Judge the guard's requests in `audit` (both identities) against `grants` (shipped),
/// `exceptions` and `version`.
pub fn judge(
    audit: &[Audit],
    grants: &[Grant],
    exceptions: &Exceptions,
    version: Version,
) -> Verdict {
    let requests: BTreeSet<(Request, bool)> = audit
        .iter()
        .filter(|a| {
            (a.user == GUARD_USER || a.user == GUARD_USER_2)
                && !a.resource.is_empty()
                // A test's own kubectl under the guard's identity (`auth can-i`) is not the guard.
                && !a.user_agent.starts_with("kubectl/")
        })
        .map(|a| (Request::of(a), refused_by_rbac(a)))
        .collect();
    let mut verdict = Verdict::default();
    let mut used = BTreeSet::new();
    for (request, refused) in &requests {
        if *refused {
            verdict.refused.insert(request.clone());
            continue;
        }
        // Only the narrowest grants that cover a request are credited with it, so that a rule
        // a broader one makes redundant shows as unused.
        let covering: Vec<&Grant> = grants.iter().filter(|g| g.covers(request)).collect();
        let narrowest = covering.iter().map(|g| g.narrowness()).max();
        for grant in covering
            .iter()
            .filter(|g| Some(g.narrowness()) == narrowest)
        {
            used.insert(grant.to_string());
        }
        if covering.is_empty() && !exceptions.per_install.iter().any(|g| g.covers(request)) {
            verdict.unexplained.insert(request.clone());
        }
    }
    let name = version_name(version);
    let judged = judged_for_use(version);
    // A row of this version that names no judged grant is stale too (a rule removed, a typo).
    let judged_keys: BTreeSet<String> = grants
        .iter()
        .filter(|g| judged.contains(&g.source.as_str()))
        .map(Grant::key)
        .collect();
    for (version, key) in &exceptions.unused {
        if version == name && !judged_keys.contains(key) {
            verdict
                .stale
                .insert(format!("{key} (no such grant is judged on {name})"));
        }
    }
    // A row names a key, which several grants may share (a broad rule and a named one): it
    // excuses those of them never used, and is stale when every one of them was used.
    let mut excuses_something: BTreeSet<String> = BTreeSet::new();
    for grant in grants
        .iter()
        .filter(|g| judged.contains(&g.source.as_str()))
    {
        if used.contains(&grant.to_string()) {
            continue;
        }
        let key = grant.key();
        if exceptions.unused.contains(&(name.to_owned(), key.clone())) {
            excuses_something.insert(key);
        } else {
            verdict.unused.insert(grant.to_string());
        }
    }
    for (version, key) in &exceptions.unused {
        if version == name
            && judged_keys.contains(key)
            && !excuses_something.contains(key)
            && !exceptions
                .sometimes
                .contains(&(version.clone(), key.clone()))
        {
            verdict.stale.insert(key.clone());
        }
    }
    verdict
}

/// Judge the test bed's whole audit log on `version`; panics with the verdict when the
/// manifests and the exceptions file are not exactly what the guard used.
pub fn assert_least_privilege(
    repo: &Path,
    audit: &[Audit],
    version: Version,
    refused_on_purpose: &dyn Fn(&Request) -> bool,
) {
    let mut grants = Vec::new();
    for file in shipped_manifests(version) {
        grants.extend(grants_of(repo, file).unwrap_or_else(|e| panic!("{e}")));
    }
    let exceptions = exceptions(repo).unwrap_or_else(|e| panic!("{e}"));
    let verdict = judge(audit, &grants, &exceptions, version);
    let list =
        |set: &BTreeSet<Request>| -> String { set.iter().map(|r| format!("\n  {r}")).collect() };
    let refused: BTreeSet<Request> = verdict
        .refused
        .iter()
        .filter(|r| !refused_on_purpose(r))
        .cloned()
        .collect();
    assert!(
        verdict.holds(refused_on_purpose),
        "least privilege on {} (deploy/{:?} and {EXCEPTIONS}):\n\
         authorized, but granted by no shipped manifest and by nothing the exceptions file lists:{}\n\
         refused (403) outside the scenarios that withdraw a grant on purpose:{}\n\
         shipped in deploy/{:?}, never used, and not listed as never used on this version:{}\n\
         listed as never used on this version, but used or not granted at all:{}",
        version_name(version),
        shipped_manifests(version),
        list(&verdict.unexplained),
        list(&refused),
        judged_for_use(version),
        verdict
            .unused
            .iter()
            .map(|g| format!("\n  {g}"))
            .collect::<String>(),
        verdict
            .stale
            .iter()
            .map(|g| format!("\n  {g}"))
            .collect::<String>(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit(user: &str, verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Audit {
        Audit::from(serde_json::json!({
            "verb": verb,
            "user": { "username": user },
            "objectRef": { "apiGroup": group, "resource": resource, "namespace": ns, "name": name },
            "responseStatus": { "code": 200 },
            "userAgent": "",
        }))
    }

    fn grant(source: &str, resource: &str, verb: &str, ns: Option<&str>, names: &[&str]) -> Grant {
        Grant {
            source: source.to_owned(),
            group: String::new(),
            resource: resource.to_owned(),
            verb: verb.to_owned(),
            namespace: ns.map(str::to_owned),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn the_judge_sees_ungranted_unused_stale_and_refused() {
        let grants = [
            grant("rbac.yaml", "pods", "patch", None, &[]),
            grant(
                "rbac.yaml",
                "configmaps",
                "update",
                Some("kube-system"),
                &["lock"],
            ),
            grant("rbac.yaml", "secrets", "get", None, &[]),
            grant("rbac.yaml", "nodes", "get", None, &[]),
            // A create cannot be limited by name.
            grant(
                "rbac.yaml",
                "configmaps",
                "create",
                Some("kube-system"),
                &["lock"],
            ),
            // A broad rule and a narrow one that it makes redundant: only the narrow one is
            // credited, so the broad one shows as unused.
            grant("rbac.yaml", "leases", "get", None, &[]),
            grant("rbac.yaml", "leases", "get", Some("kube-system"), &["mine"]),
        ];
        let mut exceptions = Exceptions::default();
        exceptions
            .unused
            .insert(("current".to_owned(), "core/nodes get".to_owned()));
        exceptions
            .unused
            .insert(("current".to_owned(), "core/pods patch".to_owned()));
        exceptions
            .unused
            .insert(("current".to_owned(), "core/ghosts get".to_owned()));
        // Shared by the broad leases rule (unused) and the named one (used): excuses the former.
        exceptions
            .unused
            .insert(("current".to_owned(), "core/leases get".to_owned()));
        let mut refused = audit(GUARD_USER, "list", "", "secrets", "kube-system", "");
        refused.code = 403;
        refused.message = format!("secrets is forbidden: User \"{GUARD_USER}\" cannot list");
        let mut terminating = audit(GUARD_USER, "patch", "", "pods", "gone", "p");
        terminating.code = 403;
        terminating.message = "unable to create new content in namespace gone".to_owned();
        // 1.13 records some refusals without a message: counted as refused.
        let mut silent = audit(GUARD_USER, "patch", "", "pods", "legacy", "p");
        silent.code = 403;
        let mut kubectl = audit(GUARD_USER, "delete", "", "pods", "a", "p");
        kubectl.user_agent = "kubectl/v1.36.3".to_owned();
        let log = [
            audit(GUARD_USER, "patch", "", "pods", "a", "p"),
            // The named Role: its name in its namespace only.
            audit(
                GUARD_USER_2,
                "update",
                "",
                "configmaps",
                "kube-system",
                "lock",
            ),
            audit(
                GUARD_USER,
                "update",
                "",
                "configmaps",
                "kube-system",
                "other",
            ),
            audit(GUARD_USER, "update", "", "configmaps", "default", "lock"),
            audit(
                GUARD_USER,
                "create",
                "",
                "configmaps",
                "kube-system",
                "lock",
            ),
            audit(GUARD_USER, "get", "", "leases", "kube-system", "mine"),
            // Someone else, and a test's own kubectl under the guard's name: not the guard.
            audit("system:admin", "delete", "", "nodes", "", "n"),
            kubectl,
            refused,
            terminating,
            silent,
        ];
        let verdict = judge(&log, &grants, &exceptions, Version::Current);
        let shown: Vec<String> = verdict.unexplained.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            shown,
            [
                "create core/configmaps in kube-system named lock",
                "update core/configmaps in default named lock",
                "update core/configmaps in kube-system named other",
            ]
        );
        assert_eq!(
            verdict
                .refused
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>(),
            [
                "patch core/pods in legacy named p",
                "list core/secrets in kube-system"
            ]
        );
        // secrets get is granted and never used, and so is the create nobody may use by name
        // (the lease rule the named one makes redundant is listed); pods patch is listed as
        // unused but was used, and ghosts get names no grant.
        assert_eq!(
            verdict.unused.iter().cloned().collect::<Vec<_>>(),
            [
                "core/configmaps create (rbac.yaml, namespace kube-system, names [\"lock\"])",
                "core/secrets get (rbac.yaml)",
            ]
        );
        assert_eq!(
            verdict.stale.iter().cloned().collect::<Vec<_>>(),
            [
                "core/ghosts get (no such grant is judged on current)",
                "core/pods patch"
            ]
        );
        assert!(!verdict.holds(&|_| true));
        // Without its row, the broad lease rule shows: the named one was credited instead.
        exceptions
            .unused
            .remove(&("current".to_owned(), "core/leases get".to_owned()));
        let unlisted = judge(&log, &grants, &exceptions, Version::Current);
        assert!(unlisted.unused.contains("core/leases get (rbac.yaml)"));
        assert!(!unlisted.unused.iter().any(|g| g.contains("mine")));
        // On 1.27 no manifest is judged for use: only what was asked for counts.
        let beta = judge(&log, &grants, &exceptions, Version::GatesBeta);
        assert!(beta.unused.is_empty() && beta.stale.is_empty());
        assert_eq!(beta.unexplained.len(), 3);
    }

    #[test]
    fn shipped_grants_follow_the_bindings_of_the_guards_identities() {
        let grants =
            grants_of(&crate::testbed::repo(), "rbac.yaml").unwrap_or_else(|e| panic!("{e}"));
        let find = |resource: &str, verb: &str| -> Vec<&Grant> {
            grants
                .iter()
                .filter(|g| g.resource == resource && g.verb == verb)
                .collect()
        };
        // The ClusterRole, bound by a ClusterRoleBinding: every namespace.
        assert!(find("pods", "patch").iter().all(|g| g.namespace.is_none()));
        assert_eq!(find("pods", "patch").len(), 1);
        // The leader-election Role, bound in kube-system: its namespace and name only.
        let update = find("leases", "update");
        assert_eq!(update.len(), 1, "{update:?}");
        assert_eq!(update[0].namespace.as_deref(), Some("kube-system"));
        assert_eq!(update[0].names, ["initguard"]);
        // The metrics readers' role is bound to others; auth-delegator is built in.
        assert!(
            grants
                .iter()
                .all(|g| !g.resource.is_empty() && g.resource != "tokenreviews")
        );
    }

    #[test]
    fn the_exceptions_file_parses_and_names_every_grant_as_group_resource_verb() {
        let parsed = exceptions(&crate::testbed::repo()).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            parsed
                .unused
                .contains(&("legacy".to_owned(), "core/pods initialize".to_owned()))
        );
        assert!(
            parsed
                .per_install
                .iter()
                .any(|g| g.group == "admissionregistration.k8s.io"
                    && g.resource == "validatingwebhookconfigurations"
                    && g.verb == "patch")
        );
        assert_eq!(
            parse_key("core/pods/eviction create"),
            Some(("".into(), "pods/eviction".into(), "create".into()))
        );
        assert_eq!(parse_key("pods create"), None);
        assert_eq!(parse_key("core/pods"), None);
    }
}
