//! A small RBAC authorizer: the rules granted to one user, checked like the real RBAC
//! authorizer does (API groups, resources incl. subresources, verbs, resource names, and the
//! namespace of RoleBindings).

use serde::Deserialize;
use serde_json::Value;

/// One RBAC policy rule (as in a Role or ClusterRole).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// `pods`, `pods/status`, `*`, `*/status`.
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    /// Empty: any name.
    #[serde(default)]
    pub resource_names: Vec<String>,
}

impl PolicyRule {
    /// A rule over `resources` of `api_groups` allowing `verbs`.
    pub fn new(api_groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            api_groups: own(api_groups),
            resources: own(resources),
            verbs: own(verbs),
            resource_names: Vec::new(),
        }
    }

    /// Restrict the rule to these object names.
    pub fn with_names(mut self, names: &[&str]) -> PolicyRule {
        self.resource_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    fn allows(&self, a: &Attributes<'_>) -> bool {
        let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
        let resource_ok = self.resources.iter().any(|r| {
            if r == "*" {
                return true;
            }
            match a.subresource {
                Some(sub) => *r == format!("{}/{sub}", a.resource) || *r == format!("*/{sub}"),
                None => r == a.resource,
            }
        });
        let name_ok = self.resource_names.is_empty()
            || a.name
                .is_some_and(|n| self.resource_names.iter().any(|x| x == n));
        any(&self.verbs, a.verb) && any(&self.api_groups, a.api_group) && resource_ok && name_ok
    }
}

/// What a request wants to do, in RBAC terms.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    pub verb: &'a str,
    pub api_group: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    /// For namespaced resources; for a namespace object, its own name.
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

/// Rules granted to one user, each cluster-wide or limited to a namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rbac {
    grants: Vec<(Option<String>, PolicyRule)>,
}

/// A problem in an RBAC manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("RBAC manifest: {0}")]
pub struct RbacError(pub String);

#[derive(Deserialize)]
struct RoleRef {
    kind: String,
    name: String,
}

#[derive(Deserialize)]
struct Subject {
    kind: String,
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

impl Rbac {
    /// `rules` granted in every namespace and at the cluster scope.
    pub fn cluster_wide(rules: Vec<PolicyRule>) -> Rbac {
        Rbac {
            grants: rules.into_iter().map(|r| (None, r)).collect(),
        }
    }

    /// `rules` granted within `namespace` only (as by a RoleBinding).
    pub fn namespaced(namespace: &str, rules: Vec<PolicyRule>) -> Rbac {
        Rbac {
            grants: rules
                .into_iter()
                .map(|r| (Some(namespace.to_string()), r))
                .collect(),
        }
    }

    /// Add the grants of `other`.
    pub fn merge(&mut self, other: Rbac) {
        self.grants.extend(other.grants);
    }

    /// The rules a multi-document manifest (Roles, ClusterRoles and their bindings; other
    /// kinds ignored) grants to `user`. Service accounts are users named
    /// `system:serviceaccount:NS:NAME`; groups `system:authenticated`,
    /// `system:serviceaccounts` and `system:serviceaccounts:NS` are understood.
    pub fn from_yaml_str(text: &str, user: &str) -> Result<Rbac, RbacError> {
        let mut docs = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(text) {
            let v = Value::deserialize(doc).map_err(|e| RbacError(e.to_string()))?;
            if v.is_null() {
                continue;
            }
            if v["kind"] == "List" {
                docs.extend(v["items"].as_array().cloned().unwrap_or_default());
            } else {
                docs.push(v);
            }
        }
        let rules_of =
            |kind: &str, name: &str, ns: Option<&str>| -> Result<Vec<PolicyRule>, RbacError> {
                let Some(role) = docs.iter().find(|d| {
                    d["kind"] == kind
                        && d["metadata"]["name"] == name
                        && (kind == "ClusterRole" || d["metadata"]["namespace"].as_str() == ns)
                }) else {
                    return Ok(Vec::new());
                };
                if role["rules"].is_null() {
                    return Ok(Vec::new());
                }
                serde_json::from_value(role["rules"].clone())
                    .map_err(|e| RbacError(format!("{kind} {name}: rules: {e}")))
            };
        let mut rbac = Rbac::default();
        for d in &docs {
            let kind = d["kind"].as_str().unwrap_or_default();
            if kind != "ClusterRoleBinding" && kind != "RoleBinding" {
                continue;
            }
            let name = d["metadata"]["name"].as_str().unwrap_or_default();
            let binding_ns = d["metadata"]["namespace"].as_str();
            if kind == "RoleBinding" && binding_ns.is_none() {
                return Err(RbacError(format!("RoleBinding {name} has no namespace")));
            }
            let role_ref: RoleRef = serde_json::from_value(d["roleRef"].clone())
                .map_err(|e| RbacError(format!("{kind} {name}: roleRef: {e}")))?;
            let subjects: Vec<Subject> =
                serde_json::from_value(d["subjects"].clone()).unwrap_or_default();
            if !subjects
                .iter()
                .any(|s| subject_matches(s, binding_ns, user))
            {
                continue;
            }
            let rules = rules_of(&role_ref.kind, &role_ref.name, binding_ns)?;
            let scope = if kind == "RoleBinding" {
                binding_ns.map(str::to_string)
            } else {
                None
            };
            rbac.grants
                .extend(rules.into_iter().map(|r| (scope.clone(), r)));
        }
        Ok(rbac)
    }

    /// Whether the request is allowed.
    pub fn allows(&self, a: &Attributes<'_>) -> bool {
        self.grants.iter().any(|(scope, rule)| {
            scope.as_deref().is_none_or(|ns| a.namespace == Some(ns)) && rule.allows(a)
        })
    }
}

fn subject_matches(s: &Subject, binding_ns: Option<&str>, user: &str) -> bool {
    let sa = user.strip_prefix("system:serviceaccount:");
    match s.kind.as_str() {
        "User" => s.name == user,
        "ServiceAccount" => {
            let ns = s.namespace.as_deref().or(binding_ns).unwrap_or_default();
            sa == Some(&format!("{ns}:{}", s.name))
        }
        "Group" => match s.name.as_str() {
            "system:authenticated" => user != "system:anonymous",
            "system:unauthenticated" => user == "system:anonymous",
            "system:serviceaccounts" => sa.is_some(),
            g => g
                .strip_prefix("system:serviceaccounts:")
                .is_some_and(|ns| sa.is_some_and(|rest| rest.split(':').next() == Some(ns))),
        },
        _ => false,
    }
}

/// The authorizer's reason for a denial, as in its 403 message.
pub fn denial(user: &str, a: &Attributes<'_>) -> String {
    let resource = match a.subresource {
        Some(sub) => format!("{}/{sub}", a.resource),
        None => a.resource.to_string(),
    };
    let scope = match a.namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_string(),
    };
    format!(
        "User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        a.verb, a.api_group
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: { name: initguard, namespace: kube-system }
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: { name: initguard }
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch", "patch"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: { name: initguard }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: initguard }
subjects:
  - { kind: ServiceAccount, name: initguard, namespace: kube-system }
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: leases, namespace: kube-system }
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "update"]
    resourceNames: ["initguard"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: leases, namespace: kube-system }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: leases }
subjects:
  - { kind: User, name: "system:initguard" }
  - { kind: ServiceAccount, name: initguard }
"#;

    fn attrs<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        ns: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Attributes<'a> {
        Attributes {
            verb,
            api_group: group,
            resource,
            subresource: None,
            namespace: ns,
            name,
        }
    }

    #[test]
    fn bindings_grant_rules_to_their_subjects() {
        let sa =
            Rbac::from_yaml_str(MANIFEST, "system:serviceaccount:kube-system:initguard").unwrap();
        assert!(sa.allows(&attrs("patch", "", "pods", Some("a"), Some("p"))));
        assert!(!sa.allows(&attrs("delete", "", "pods", Some("a"), Some("p"))));
        let status = Attributes {
            subresource: Some("status"),
            ..attrs("patch", "", "pods", Some("a"), Some("p"))
        };
        assert!(!sa.allows(&status));
        assert!(sa.allows(&attrs(
            "update",
            "coordination.k8s.io",
            "leases",
            Some("kube-system"),
            Some("initguard")
        )));
        assert!(!sa.allows(&attrs(
            "update",
            "coordination.k8s.io",
            "leases",
            Some("default"),
            Some("initguard")
        )));
        assert!(!sa.allows(&attrs(
            "update",
            "coordination.k8s.io",
            "leases",
            Some("kube-system"),
            Some("other")
        )));
        assert!(!sa.allows(&attrs(
            "create",
            "coordination.k8s.io",
            "leases",
            Some("kube-system"),
            None
        )));

        let user = Rbac::from_yaml_str(MANIFEST, "system:initguard").unwrap();
        assert!(!user.allows(&attrs("get", "", "pods", Some("a"), Some("p"))));
        assert!(user.allows(&attrs(
            "get",
            "coordination.k8s.io",
            "leases",
            Some("kube-system"),
            Some("initguard")
        )));
        assert_eq!(
            denial(
                "system:initguard",
                &attrs("delete", "", "pods", Some("ns"), Some("x"))
            ),
            "User \"system:initguard\" cannot delete resource \"pods\" in API group \"\" in the namespace \"ns\""
        );
    }

    #[test]
    fn subresources_and_wildcards() {
        let r = Rbac::cluster_wide(vec![PolicyRule::new(&[""], &["pods/status"], &["*"])]);
        let mut a = attrs("patch", "", "pods", Some("a"), Some("p"));
        assert!(!r.allows(&a));
        a.subresource = Some("status");
        assert!(r.allows(&a));
        assert!(
            Rbac::from_yaml_str("kind: ClusterRole\nmetadata: {name: x}\nrules: 3", "u").is_ok()
        );
    }
}
