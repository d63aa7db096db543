//! The real API server as the oracle of the CEL condition a webhook bypass adds
//! (`webhook::cel_expression`, with `exemptRequesters`, `exemptOperations` and
//! `exemptCriticalPath`): a recording webhook behind an entry carrying the generated
//! condition, and a corpus of real requests (CREATE, UPDATE, DELETE, CONNECT, subresources,
//! cluster-scoped objects, objects without labels, several identities by impersonation).
//! Exactly the requests the contract says are not exempt reach the webhook, and none fails:
//! an erroring condition would fail closed (`failurePolicy: Fail`) and show as a refusal.

use std::collections::BTreeSet;
use std::sync::Arc;

use initguard::config::{Operation, Requester};
use initguard::webhook::{LetThrough, MATCH_CONDITION_NAME, cel_expression};
use initguard_test_support::webhook::WebhookServer;
use serde_json::{Value, json};

use crate::testbed::*;

const NS: &str = "cel-a";
const EXEMPT_NS: &str = "cel-exempt";
const CONFIGURATION: &str = "cel-oracle";
const NODE: &str = "testbed-node-1";

/// One request of the corpus: who, what, and the kubectl arguments that make it.
struct Case {
    user: &'static str,
    groups: &'static [&'static str],
    operation: &'static str,
    resource: &'static str,
    subresource: &'static str,
    namespace: &'static str,
    name: String,
    labelled: bool,
    args: Vec<String>,
    stdin: Option<String>,
}

const ADMIN: &str = "system:admin";
const SCHEDULER: &str = "system:kube-scheduler";
const KUBE_SYSTEM_SA: &str = "system:serviceaccount:kube-system:job-controller";

/// The contract (README "Admission webhooks", "The cluster's own critical path"), written apart from the
/// CEL: whether the bypass lets `c` through.
fn exempt(c: &Case) -> bool {
    let in_group = |g: &str| c.groups.contains(&g);
    let critical = c.operation == "DELETE"
        || c.namespace == "kube-system"
        || (in_group("system:nodes") && matches!(c.resource, "nodes" | "leases"))
        || (c.user == SCHEDULER
            && ((c.resource == "pods" && matches!(c.subresource, "binding" | "status"))
                || c.resource == "events"))
        || ((c.user.starts_with("system:serviceaccount:kube-system:")
            || c.user == "system:kube-controller-manager")
            && (matches!(
                c.resource,
                "leases" | "endpoints" | "endpointslices" | "events" | "nodes"
            ) || (c.resource == "serviceaccounts" && c.subresource == "token")));
    critical
        || c.labelled
        || c.namespace == EXEMPT_NS
        || c.user == "cel-user"
        || in_group("cel-group")
        || c.user.starts_with("system:serviceaccount:cel-sa:")
        || c.operation == "CONNECT"
}

fn as_user(user: &'static str, groups: &'static [&'static str], rest: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    if user != ADMIN {
        args.push(format!("--as={user}"));
        for g in groups {
            args.push(format!("--as-group={g}"));
        }
    }
    args.extend(rest.iter().map(|s| (*s).to_owned()));
    args
}

fn configmap(ns: &str, name: &str, labelled: bool) -> String {
    let mut labels = json!({ "cel": "corpus" });
    if labelled {
        labels[OPT_IN] = json!("true");
    }
    json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": ns, "labels": labels } })
    .to_string()
}

/// A create of `resource` (`kind`) `name` in `ns` as `user`.
#[allow(clippy::too_many_arguments)]
fn create(
    user: &'static str,
    groups: &'static [&'static str],
    resource: &'static str,
    ns: &'static str,
    name: &str,
    labelled: bool,
    object: String,
) -> Case {
    Case {
        user,
        groups,
        operation: "CREATE",
        resource,
        subresource: "",
        namespace: ns,
        name: name.to_owned(),
        labelled,
        args: as_user(user, groups, &["create", "-f", "-"]),
        stdin: Some(object),
    }
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let nodes: &[&str] = &["system:nodes", "system:authenticated"];
    let none: &[&str] = &["system:authenticated"];
    // ConfigMaps: labels, namespaces, requesters.
    for (user, groups, name, ns, labelled) in [
        (ADMIN, none, "cel-plain", NS, false),
        (ADMIN, none, "cel-labelled", NS, true),
        (ADMIN, none, "cel-kube-system", "kube-system", false),
        (ADMIN, none, "cel-exempt-ns", EXEMPT_NS, false),
        ("cel-user", none, "cel-by-user", NS, false),
        (
            "someone",
            &["cel-group", "system:authenticated"][..],
            "cel-by-group",
            NS,
            false,
        ),
        (
            "system:serviceaccount:cel-sa:builder",
            none,
            "cel-by-sa",
            NS,
            false,
        ),
        (
            "system:serviceaccount:other:builder",
            none,
            "cel-by-other-sa",
            NS,
            false,
        ),
        (KUBE_SYSTEM_SA, none, "cel-by-kube-system-sa", NS, false),
    ] {
        cases.push(create(
            user,
            groups,
            "configmaps",
            ns,
            name,
            labelled,
            configmap(ns, name, labelled),
        ));
    }
    // Updates, with and without the label; a DELETE (no object: the label test must not fail).
    for (name, labelled) in [("cel-plain", false), ("cel-labelled", true)] {
        cases.push(Case {
            user: ADMIN,
            groups: none,
            operation: "UPDATE",
            resource: "configmaps",
            subresource: "",
            namespace: NS,
            name: name.to_owned(),
            labelled,
            args: as_user(
                ADMIN,
                none,
                &["annotate", "configmap", name, "-n", NS, "touched=yes"],
            ),
            stdin: None,
        });
    }
    cases.push(Case {
        user: ADMIN,
        groups: none,
        operation: "DELETE",
        resource: "configmaps",
        subresource: "",
        namespace: NS,
        name: "cel-plain".to_owned(),
        labelled: false,
        args: as_user(ADMIN, none, &["delete", "configmap", "cel-plain", "-n", NS]),
        stdin: None,
    });
    // Pods: a CREATE by the scheduler is never exempt; its binding and status writes are. (A
    // scheduler name of their own: the real scheduler leaves them to the corpus's binding.)
    let pod = |name: &str| {
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name, "namespace": NS },
                "spec": { "schedulerName": "cel-oracle",
                          "containers": [{ "name": "c", "image": "registry.k8s.io/pause:3.10" }] } })
        .to_string()
    };
    cases.push(create(
        SCHEDULER,
        none,
        "pods",
        NS,
        "cel-pod",
        false,
        pod("cel-pod"),
    ));
    cases.push(create(
        ADMIN,
        none,
        "pods",
        NS,
        "cel-pod-2",
        false,
        pod("cel-pod-2"),
    ));
    let binding = |name: &str| {
        json!({ "apiVersion": "v1", "kind": "Binding", "metadata": { "name": name, "namespace": NS },
                "target": { "apiVersion": "v1", "kind": "Node", "name": NODE } })
        .to_string()
    };
    cases.push(Case {
        user: SCHEDULER,
        groups: none,
        operation: "CREATE",
        resource: "pods",
        subresource: "binding",
        namespace: NS,
        name: "cel-pod".to_owned(),
        labelled: false,
        args: as_user(
            SCHEDULER,
            none,
            &[
                "create",
                "--raw",
                &format!("/api/v1/namespaces/{NS}/pods/cel-pod/binding"),
                "-f",
                "-",
            ],
        ),
        stdin: Some(binding("cel-pod")),
    });
    for (user, name) in [(SCHEDULER, "cel-pod"), ("cel-nobody", "cel-pod-2")] {
        cases.push(Case {
            user,
            groups: none,
            operation: "UPDATE",
            resource: "pods",
            subresource: "status",
            namespace: NS,
            name: name.to_owned(),
            labelled: false,
            args: as_user(
                user,
                none,
                &[
                    "patch",
                    "pod",
                    name,
                    "-n",
                    NS,
                    "--subresource",
                    "status",
                    "--type",
                    "merge",
                    "-p",
                    r#"{"status":{"conditions":[{"type":"CelProbe","status":"True"}]}}"#,
                ],
            ),
            stdin: None,
        });
    }
    // CONNECT (pods/proxy): exempt by operation; the object has no metadata at all.
    cases.push(Case {
        user: ADMIN,
        groups: none,
        operation: "CONNECT",
        resource: "pods",
        subresource: "proxy",
        namespace: NS,
        name: "cel-pod".to_owned(),
        labelled: false,
        args: as_user(
            ADMIN,
            none,
            &[
                "get",
                "--raw",
                &format!("/api/v1/namespaces/{NS}/pods/cel-pod/proxy/"),
            ],
        ),
        stdin: None,
    });
    // Cluster-scoped: a Node, and its status, by a kubelet and by someone else.
    for (user, groups) in [("system:node:testbed-node-1", nodes), ("cel-nobody", none)] {
        cases.push(Case {
            user,
            groups,
            operation: "UPDATE",
            resource: "nodes",
            subresource: "",
            namespace: "",
            name: NODE.to_owned(),
            labelled: false,
            args: as_user(
                user,
                groups,
                &[
                    "label",
                    "node",
                    NODE,
                    "--overwrite",
                    &format!("cel-by={}", user.replace(':', "-")),
                ],
            ),
            stdin: None,
        });
        cases.push(Case {
            user,
            groups,
            operation: "UPDATE",
            resource: "nodes",
            subresource: "status",
            namespace: "",
            name: NODE.to_owned(),
            labelled: false,
            args: as_user(user, groups, &[
                "patch", "node", NODE, "--subresource", "status", "--type", "merge",
                "-p", r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"cel oracle"}]}}"#,
            ]),
            stdin: None,
        });
    }
    // Leases and Events: the kubelet's, the scheduler's, kube-system controllers', others'.
    let lease = |name: &str| {
        json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": { "name": name, "namespace": NS } })
        .to_string()
    };
    cases.push(create(
        "system:node:testbed-node-1",
        nodes,
        "leases",
        NS,
        "cel-lease-node",
        false,
        lease("cel-lease-node"),
    ));
    cases.push(create(
        KUBE_SYSTEM_SA,
        none,
        "leases",
        NS,
        "cel-lease-sa",
        false,
        lease("cel-lease-sa"),
    ));
    cases.push(create(
        ADMIN,
        none,
        "leases",
        NS,
        "cel-lease-admin",
        false,
        lease("cel-lease-admin"),
    ));
    let event = |name: &str| {
        json!({ "apiVersion": "v1", "kind": "Event", "metadata": { "name": name, "namespace": NS },
                "involvedObject": { "kind": "Pod", "name": "cel-pod", "namespace": NS },
                "reason": "Probe", "message": "cel oracle", "type": "Normal" })
        .to_string()
    };
    for (user, name) in [
        (SCHEDULER, "cel-event-scheduler"),
        (KUBE_SYSTEM_SA, "cel-event-sa"),
        ("cel-nobody", "cel-event-nobody"),
    ] {
        cases.push(create(user, none, "events", NS, name, false, event(name)));
    }
    // Tokens: a kube-system controller's TokenRequest is exempt, the admin's is not.
    for user in [KUBE_SYSTEM_SA, ADMIN] {
        cases.push(Case {
            user,
            groups: none,
            operation: "CREATE",
            resource: "serviceaccounts",
            subresource: "token",
            namespace: NS,
            name: "default".to_owned(),
            labelled: false,
            args: as_user(user, none, &["create", "token", "default", "-n", NS]),
            stdin: None,
        });
    }
    cases
}

pub(crate) async fn generated_condition_lets_through_exactly_the_exempt_requests(tb: Arc<Testbed>) {
    for ns in [NS, EXEMPT_NS, "cel-sa", "other"] {
        tb.namespace(ns);
    }
    eventually("the default ServiceAccount of cel-a", || {
        tb.get("serviceaccount", NS, "default")
    })
    .await;
    // Every identity of the corpus may make its request: only admission decides.
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "cel-oracle" },
        "rules": [
            { "apiGroups": ["", "coordination.k8s.io"], "resources": [
                "configmaps", "pods", "pods/binding", "pods/status", "pods/proxy", "nodes",
                "nodes/status", "leases", "events", "serviceaccounts/token"],
              "verbs": ["get", "list", "create", "update", "patch", "delete"] },
        ],
    }));
    let subjects: Vec<Value> = [
        "cel-user",
        "someone",
        SCHEDULER,
        "cel-nobody",
        "system:node:testbed-node-1",
    ]
    .iter()
    .map(|u| json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u }))
    .chain(
        [
            "system:serviceaccount:cel-sa:builder",
            "system:serviceaccount:other:builder",
            KUBE_SYSTEM_SA,
        ]
        .iter()
        .map(|u| {
            let mut parts = u.rsplitn(2, ':');
            let name = parts.next().unwrap_or_default();
            let ns = parts
                .next()
                .and_then(|p| p.rsplit(':').next())
                .unwrap_or_default();
            json!({ "kind": "ServiceAccount", "name": name, "namespace": ns })
        }),
    )
    .collect();
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": "cel-oracle" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cel-oracle" },
        "subjects": subjects,
    }));

    let through = LetThrough {
        label: Some(OPT_IN.to_owned()),
        namespaces: vec![EXEMPT_NS.to_owned()],
        requesters: [
            "user:cel-user",
            "group:cel-group",
            "serviceaccount:cel-sa:*",
        ]
        .iter()
        .map(|r| Requester::parse(r).expect("valid requester"))
        .collect(),
        operations: vec![Operation::Connect],
        critical_path: true,
        ..LetThrough::default()
    };
    let expression = cel_expression(&through);
    let server = WebhookServer::start().await;
    let rule = |group: &str, resources: &[&str], operations: &[&str]| {
        json!({ "apiGroups": [group], "apiVersions": ["v1"], "operations": operations,
                "resources": resources, "scope": "*" })
    };
    let names = [NS, EXEMPT_NS, "kube-system"];
    tb.kubectl_stdin(&["create", "-f", "-"], Some(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": CONFIGURATION },
        "webhooks": [{
            "name": "cel.oracle.example.com",
            "clientConfig": { "url": format!("https://{}/validate", server.addr), "caBundle": server.ca_bundle() },
            "rules": [
                rule("", &["configmaps", "pods", "pods/binding", "pods/status", "pods/proxy", "nodes", "nodes/status", "events", "serviceaccounts/token"], &["*"]),
                rule("coordination.k8s.io", &["leases"], &["*"]),
            ],
            "namespaceSelector": { "matchExpressions": [{ "key": "kubernetes.io/metadata.name", "operator": "In", "values": names }] },
            "matchConditions": [{ "name": MATCH_CONDITION_NAME, "expression": expression }],
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    }).to_string()));
    // The configuration takes effect when the server's informer sees it: a probe that is not
    // exempt reaches the webhook first.
    eventually("the oracle webhook to be called", || {
        let _ = tb.kubectl_with(
            "admin",
            &["create", "configmap", "cel-probe", "-n", NS],
            None,
        );
        let _ = tb.kubectl_with(
            "admin",
            &[
                "delete",
                "configmap",
                "cel-probe",
                "-n",
                NS,
                "--ignore-not-found",
            ],
            None,
        );
        server
            .reviews
            .lock()
            .ok()
            .filter(|r| !r.is_empty())
            .map(|_| ())
    })
    .await;

    let cases = corpus();
    let key = |op: &str, resource: &str, sub: &str, ns: &str, name: &str, user: &str| {
        format!("{op} {resource}/{sub} {ns}/{name} by {user}")
    };
    for case in &cases {
        let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        let out = tb.kubectl_with("admin", &args, case.stdin.as_deref());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let what = key(
            case.operation,
            case.resource,
            case.subresource,
            case.namespace,
            &case.name,
            case.user,
        );
        if case.operation == "CONNECT" {
            // Nothing serves the proxied pod (no kubelet); only admission must not refuse it.
            assert!(
                !stderr.contains("admission") && !stderr.contains("webhook"),
                "{what}: {stderr}"
            );
        } else {
            assert!(
                out.status.success(),
                "{what} failed (an erroring condition fails closed): {stderr}"
            );
        }
    }
    // The webhook answers synchronously: every review of the corpus has arrived.
    let seen: BTreeSet<String> = server
        .reviews
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let s = |p: &str| {
                r.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            key(
                &s("/operation"),
                &s("/resource/resource"),
                &s("/subResource"),
                &s("/namespace"),
                &s("/name"),
                &s("/userInfo/username"),
            )
        })
        .collect();
    let mut wrong = Vec::new();
    for case in &cases {
        let what = key(
            case.operation,
            case.resource,
            case.subresource,
            case.namespace,
            &case.name,
            case.user,
        );
        let reached = seen.contains(&what);
        if reached == exempt(case) {
            wrong.push(format!(
                "{what}: {}",
                if reached {
                    "reached the webhook, but is exempt"
                } else {
                    "was let through, but is not exempt"
                }
            ));
        }
    }
    let reaching = cases.iter().filter(|c| !exempt(c)).count();
    assert!(
        reaching >= 8 && cases.len() - reaching >= 15,
        "the corpus lost its balance"
    );
    assert!(
        wrong.is_empty(),
        "the generated condition disagrees with the contract:\n{}\nseen: {seen:#?}",
        wrong.join("\n")
    );

    tb.kubectl(&["delete", "validatingwebhookconfiguration", CONFIGURATION]);
    tb.kubectl(&["delete", "clusterrolebinding,clusterrole", "cel-oracle"]);
    tb.kubectl(&["label", "node", NODE, "cel-by-"]);
    tb.kubectl(&[
        "delete",
        "configmap",
        "cel-kube-system",
        "-n",
        "kube-system",
        "--ignore-not-found",
    ]);
    for ns in [NS, EXEMPT_NS, "cel-sa", "other"] {
        tb.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }
}
