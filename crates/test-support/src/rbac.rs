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
            // RBAC cannot limit create, list or watch of a collection by name.
            && (self.names.is_empty()
                || (!request.name.is_empty() && self.names.contains(&request.name)))
    }

    /// `group/resource verb`, the way the exceptions file names a grant.
    fn key(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{group}/{} {}", self.resource, self.verb)
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
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
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

/// Every verb of every rule of the Roles and ClusterRoles in `deploy/FILE`. ClusterRoles bound
/// only to readers of the guard (`initguard-metrics-reader`) are not the guard's own.
pub fn grants_of(repo: &Path, file: &str) -> Result<Vec<Grant>, String> {
    let path = repo.join("deploy").join(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut grants = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let object: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| format!("{}: not YAML: {e}", path.display()))?;
        let kind = object["kind"].as_str().unwrap_or("");
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        if !matches!(kind, "Role" | "ClusterRole") || name == "initguard-metrics-reader" {
            continue;
        }
        let namespace = (kind == "Role")
            .then(|| object["metadata"]["namespace"].as_str().map(str::to_owned))
            .flatten();
        for rule in object["rules"].as_array().into_iter().flatten() {
            grants.extend(rule_grants(rule, file, namespace.as_deref()));
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
    /// Rules an operator adds per install: what the guard may use beyond the shipped manifests.
    pub per_install: Vec<Grant>,
}

/// Read [`EXCEPTIONS`]: under `## Never used`, rows `| grant | versions | why |`; under
/// `## Granted outside the shipped roles`, rows `| grant | how | why |`. A grant is `group/resource verb`
/// (`core` for the core group); versions are comma-separated [`version_name`]s.
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
                for version in cells[1].split(',').map(str::trim) {
                    if !["current", "gates-beta", "legacy"].contains(&version) {
                        return Err(format!("{}: unknown version {version:?}", at()));
                    }
                    out.unused.insert((version.to_owned(), cells[0].to_owned()));
                }
            }
            "Granted outside the shipped roles" => {
                let (group, resource, verb) = key;
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
    /// Exceptions of this version that a request did use: the file is stale.
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
        let mut covered = false;
        for grant in grants.iter().filter(|g| g.covers(request)) {
            used.insert(grant.to_string());
            covered = true;
        }
        if !covered && !exceptions.per_install.iter().any(|g| g.covers(request)) {
            verdict.unexplained.insert(request.clone());
        }
    }
    let name = version_name(version);
    let judged = judged_for_use(version);
    for grant in grants
        .iter()
        .filter(|g| judged.contains(&g.source.as_str()))
    {
        let key = grant.key();
        let excused = exceptions.unused.contains(&(name.to_owned(), key.clone()));
        if used.contains(&grant.to_string()) {
            if excused {
                verdict.stale.insert(key);
            }
        } else if !excused {
            verdict.unused.insert(grant.to_string());
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
         listed as never used on this version, but used:{}",
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
        ];
        let mut exceptions = Exceptions::default();
        exceptions
            .unused
            .insert(("current".to_owned(), "core/nodes get".to_owned()));
        exceptions
            .unused
            .insert(("current".to_owned(), "core/pods patch".to_owned()));
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
        // secrets get is granted and never used; pods patch is listed as unused but was used.
        assert_eq!(
            verdict.unused.iter().cloned().collect::<Vec<_>>(),
            ["core/secrets get (rbac.yaml)"]
        );
        assert_eq!(
            verdict.stale.iter().cloned().collect::<Vec<_>>(),
            ["core/pods patch"]
        );
        assert!(!verdict.holds(&|_| true));
        // On 1.27 no manifest is judged for use: only what was asked for counts.
        let beta = judge(&log, &grants, &exceptions, Version::GatesBeta);
        assert!(beta.unused.is_empty() && beta.stale.is_empty());
        assert_eq!(beta.unexplained.len(), 2);
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
