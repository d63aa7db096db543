//! deploy/admission-policies.yaml and the chart's copy, enforced by the real API server, with
//! real identities: a tenant ServiceAccount with a TokenRequest token, the guard's own
//! ServiceAccount, and impersonation only where a group is needed. Every refusal is shown to
//! come from the policy (its name is in the server's answer); every change tried is one the
//! server would otherwise accept.
//!
//! tests/testbed/up installs the policies and enforces the self-fence for every scenario;
//! the opt-in and namespace-label policies are enforced here and put back to
//! [Warn, Audit] afterwards.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::deploy::{chart, repo, run};
use crate::gates;
use crate::testbed::*;

/// The policies' params ConfigMap in kube-system (deploy/admission-policies.yaml).
pub(crate) const PARAMS: &str = "initguard-admission-policies";
/// Groups of deploy/admission-policies.yaml's params.
const SHIPPED_GROUPS: &str = "system:masters";
/// A group the opt-in scenario adds to the params for the length of the scenario.
const TEST_GROUP: &str = "initguard-test:opt-in";
const MARKER: &str = "initguard.io/opt-in-allowed";

/// The namespace in which [`a_refused_bypass_is_backed_off_not_looped`] provokes refusals of
/// the guard on purpose (`gates::assert_no_denied` leaves it out).
pub(crate) const PROVOKED_REFUSALS: &str = "pol-refused";
/// Where [`self_fence_confines_the_guard_to_a_bypass`] tries what the fence refuses.
pub(crate) const FENCE_PROBES: &str = "pol-fence";
/// The webhook configuration it tries them on.
pub(crate) const FENCE_HOOK: &str = "pol-fence-hook";

/// Sets a shipped binding's validationActions.
fn enforce(tb: &Testbed, policy: &str, actions: &[&str]) {
    let patch = json!({ "spec": { "validationActions": actions } }).to_string();
    tb.kubectl(&[
        "patch",
        "validatingadmissionpolicybinding",
        policy,
        "--type",
        "merge",
        "-p",
        &patch,
    ]);
}

/// Merge `data` into the params (a null value removes that key).
pub(crate) fn set_params(tb: &Testbed, data: Value) {
    let patch = json!({ "data": data }).to_string();
    tb.kubectl(&[
        "patch",
        "configmap",
        PARAMS,
        "-n",
        "kube-system",
        "--type",
        "merge",
        "-p",
        &patch,
    ]);
}

/// Puts the shipped state back however the scenario ends.
struct Restore<'a>(&'a Testbed);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        for policy in ["initguard-opt-in", "initguard-namespace-labels"] {
            enforce(self.0, policy, &["Warn", "Audit"]);
        }
        set_params(
            self.0,
            json!({ "optInGroups": SHIPPED_GROUPS, "namespaceSelectorKeys": "" }),
        );
    }
}

/// A kubeconfig `NAME.kubeconfig` for `namespace/sa` with a token from the TokenRequest API.
fn service_account_kubeconfig(tb: &Testbed, namespace: &str, sa: &str) -> String {
    tb.kubectl(&["create", "serviceaccount", sa, "-n", namespace]);
    let token = tb.kubectl(&["create", "token", sa, "-n", namespace, "--duration", "2h"]);
    let admin = std::fs::read_to_string(tb.kubeconfig("admin")).expect("admin kubeconfig");
    let user = format!("system:serviceaccount:{namespace}:{sa}");
    let text: String = admin
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("token:") {
                format!("    token: {}", token.trim())
            } else {
                l.replace("system:admin", &user)
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let name = format!("{namespace}-{sa}");
    std::fs::write(tb.kubeconfig(&name), text).expect("write the tenant kubeconfig");
    // Whoami: the server sees the ServiceAccount, not the admin.
    let me = tb.kubectl_with(
        &name,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    assert_eq!(
        String::from_utf8_lossy(&me.stdout),
        user,
        "{}",
        String::from_utf8_lossy(&me.stderr)
    );
    name
}

/// Runs kubectl as `kubeconfig`: Ok(stdout + stderr) or Err(stderr).
fn kubectl_as(
    tb: &Testbed,
    kubeconfig: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, String> {
    let out = tb.kubectl_with(kubeconfig, args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(format!("{}{stderr}", String::from_utf8_lossy(&out.stdout)))
    } else {
        Err(stderr)
    }
}

/// `args` as `kubeconfig` must be refused by `policy` with a 403 whose message holds `words`.
fn refused_by(
    tb: &Testbed,
    kubeconfig: &str,
    policy: &str,
    words: &[&str],
    args: &[&str],
    stdin: Option<&str>,
) {
    let err = match kubectl_as(tb, kubeconfig, args, stdin) {
        Ok(out) => panic!("{args:?} as {kubeconfig} was allowed; {policy} should refuse it: {out}"),
        Err(e) => e,
    };
    assert!(
        // A 403 reads "is forbidden"; an evaluation error would be a 422 ("is invalid").
        err.contains(&format!(
            "is forbidden: ValidatingAdmissionPolicy '{policy}'"
        )),
        "{args:?} as {kubeconfig}: not a 403 of {policy}: {err}"
    );
    for w in words {
        assert!(
            err.contains(w),
            "{args:?}: the refusal does not name {w:?}: {err}"
        );
    }
}

fn allowed(tb: &Testbed, kubeconfig: &str, args: &[&str], stdin: Option<&str>) -> String {
    kubectl_as(tb, kubeconfig, args, stdin)
        .unwrap_or_else(|e| panic!("{args:?} as {kubeconfig} was refused: {e}"))
}

fn pod(namespace: &str, name: &str, labels: Value) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": namespace, "labels": labels },
        "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
    })
    .to_string()
}

fn workload(
    kind: &str,
    namespace: &str,
    name: &str,
    template_labels: Value,
    replicas: u32,
) -> String {
    let api = if kind == "Job" { "batch/v1" } else { "apps/v1" };
    let mut labels = template_labels;
    labels["app"] = json!(name);
    json!({
        "apiVersion": api, "kind": kind,
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": labels },
                "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
            },
        },
    })
    .to_string()
}

/// The README's command listing what people wrote with the label.
fn readme_listing(tb: &Testbed) -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let block = readme
        .split("<!-- opt-in-listing -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- /opt-in-listing -->").next())
        .expect("README holds the opt-in-listing block");
    let script = block
        .lines()
        .filter(|l| !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n");
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("KUBECONFIG", tb.kubeconfig("admin"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                tb.bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "README listing failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `policy` refuses a dry run of `args` as `kubeconfig`: bindings take effect
/// when the server's informers see them.
async fn until_enforced(
    tb: &Testbed,
    kubeconfig: &str,
    policy: &str,
    args: &[&str],
    stdin: Option<&str>,
) {
    let mut dry: Vec<&str> = args.to_vec();
    dry.push("--dry-run=server");
    eventually(format!("{policy} to be enforced"), || {
        kubectl_as(tb, kubeconfig, &dry, stdin)
            .err()
            .filter(|e| e.contains(&format!("'{policy}'")))
    })
    .await;
}

pub(crate) async fn opt_in_label_is_an_administrators_decision(tb: Arc<Testbed>) {
    let _restore = Restore(&tb);
    let (plain, marked) = ("pol-tenant", "pol-marked");
    tb.namespace(plain);
    tb.namespace(marked);
    tb.kubectl(&["label", "namespace", marked, &format!("{MARKER}=true")]);
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "pol-tenant" },
        "rules": [
            { "apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "create", "update", "patch"] },
            { "apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": ["get", "list", "create", "update", "patch"] },
        ],
    }));
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": "pol-tenant" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pol-tenant" },
        "subjects": [{ "kind": "ServiceAccount", "name": "tenant", "namespace": plain }],
    }));
    let tenant = service_account_kubeconfig(&tb, plain, "tenant");
    let tenant_user = format!("system:serviceaccount:{plain}:tenant");
    set_params(&tb, json!({ "namespaceSelectorKeys": "team" }));

    // Shipped in [Warn, Audit]: the tenant's labelled ReplicaSet is written, with a warning.
    let legacy = workload("ReplicaSet", plain, "legacy", json!({ OPT_IN: "true" }), 1);
    let out = allowed(&tb, &tenant, &["create", "-f", "-"], Some(&legacy));
    assert!(
        out.contains("Warning") && out.contains("initguard-opt-in"),
        "no warning in audit mode: {out}"
    );

    enforce(&tb, "initguard-opt-in", &["Deny"]);
    enforce(&tb, "initguard-namespace-labels", &["Deny"]);
    let labelled = pod(plain, "labelled", json!({ OPT_IN: "true" }));
    until_enforced(
        &tb,
        &tenant,
        "initguard-opt-in",
        &["create", "-f", "-"],
        Some(&labelled),
    )
    .await;

    // Refused where the namespace has no marker: on a pod, on a pod's update, on a
    // Deployment's template at create and at update. The message names label and marker.
    let words = [OPT_IN, MARKER];
    refused_by(
        &tb,
        &tenant,
        "initguard-opt-in",
        &words,
        &["create", "-f", "-"],
        Some(&labelled),
    );
    allowed(
        &tb,
        &tenant,
        &["create", "-f", "-"],
        Some(&pod(plain, "plain", json!({ "app": "x" }))),
    );
    refused_by(
        &tb,
        &tenant,
        "initguard-opt-in",
        &words,
        &[
            "label",
            "pod",
            "plain",
            "-n",
            plain,
            &format!("{OPT_IN}=true"),
        ],
        None,
    );
    let deployment = workload("Deployment", plain, "web", json!({ OPT_IN: "true" }), 1);
    refused_by(
        &tb,
        &tenant,
        "initguard-opt-in",
        &words,
        &["create", "-f", "-"],
        Some(&deployment),
    );
    allowed(
        &tb,
        &tenant,
        &["create", "-f", "-"],
        Some(&workload("Deployment", plain, "web", json!({}), 1)),
    );
    let add_label =
        json!({ "spec": { "template": { "metadata": { "labels": { OPT_IN: "true" } } } } })
            .to_string();
    refused_by(
        &tb,
        &tenant,
        "initguard-opt-in",
        &words,
        &[
            "patch",
            "deployment",
            "web",
            "-n",
            plain,
            "--type",
            "merge",
            "-p",
            &add_label,
        ],
        None,
    );
    // Other changes to the same objects pass: the refusals are the label's.
    allowed(
        &tb,
        &tenant,
        &["label", "pod", "plain", "-n", plain, "tier=web"],
        None,
    );
    allowed(
        &tb,
        &tenant,
        &["annotate", "deployment", "web", "-n", plain, "note=fine"],
        None,
    );

    // The ReplicaSet that carried the label before enforcement keeps making pods: scaling it
    // does not touch the label, and its controller's pod creates are not judged again.
    allowed(
        &tb,
        &tenant,
        &[
            "patch",
            "replicaset",
            "legacy",
            "-n",
            plain,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":2}}"#,
        ],
        None,
    );
    eventually("the labelled ReplicaSet to create 2 pods", || {
        (tb.list("pods", plain, Some(&format!("app=legacy,{OPT_IN}")))
            .len()
            == 2)
            .then_some(())
    })
    .await;

    // With the marker, or as a member of an opt-in group, the tenant may set it.
    let tenant_marked = kubectl_as(
        &tb,
        &tenant,
        &["create", "-f", "-"],
        Some(&pod(marked, "labelled", json!({ OPT_IN: "true" }))),
    );
    assert!(
        tenant_marked.is_ok(),
        "refused in a marked namespace: {tenant_marked:?}"
    );
    set_params(
        &tb,
        json!({ "optInGroups": format!("{SHIPPED_GROUPS},{TEST_GROUP}") }),
    );
    let as_group = [
        "--as",
        tenant_user.as_str(),
        "--as-group",
        TEST_GROUP,
        "--as-group",
        "system:authenticated",
    ];
    let create_in_group = [&as_group[..], &["create", "-f", "-"]].concat();
    eventually("the params' new group to be honoured", || {
        kubectl_as(&tb, "admin", &create_in_group, Some(&labelled)).ok()
    })
    .await;

    // Namespace labels: the marker and the selector's key are refused, another label is not.
    for label in [format!("{MARKER}=true"), "team=platform".to_owned()] {
        refused_by(
            &tb,
            &tenant,
            "initguard-namespace-labels",
            &[label.split('=').next().unwrap()],
            &["label", "namespace", plain, &label],
            None,
        );
    }
    allowed(
        &tb,
        &tenant,
        &["label", "namespace", plain, "cost-center=42"],
        None,
    );
    let ns = json!({ "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": "pol-self-marked", "labels": { MARKER: "true" } } })
    .to_string();
    refused_by(
        &tb,
        &tenant,
        "initguard-namespace-labels",
        &[MARKER],
        &["create", "-f", "-"],
        Some(&ns),
    );
    let group_label = [
        &as_group[..],
        &["label", "namespace", plain, "team=platform"],
    ]
    .concat();
    allowed(&tb, "admin", &group_label, None);

    // The README's listing names what people wrote with the label, and no controller's pods.
    let listing = readme_listing(&tb);
    for line in [
        format!("{plain} ReplicaSet/legacy"),
        format!("{marked} Pod/labelled"),
        format!("{plain} Pod/labelled"),
    ] {
        assert!(
            listing.lines().any(|l| l == line),
            "README listing lacks {line:?}:\n{listing}"
        );
    }
    assert!(
        !listing.contains("Pod/legacy-"),
        "README listing shows controller pods:\n{listing}"
    );

    // Every refusal above is in the audit log as a 403 of the tenant; none of its allowed
    // writes was refused.
    let tenant_403: Vec<Audit> = tb
        .audit()
        .into_iter()
        .filter(|a| a.user == tenant_user && a.code == 403)
        .collect();
    assert!(tenant_403.len() >= 7, "audit log: {tenant_403:#?}");
    gates::cleanup(&tb, plain);
    gates::cleanup(&tb, marked);
}

/// The guard's real ServiceAccount identity inside the self-fence: a bypass's own writes
/// pass; a label, image, toleration or other annotation on a pod, a webhook's clientConfig,
/// rules or failurePolicy, and a create that is not a dry run are refused with a 403.
pub(crate) async fn self_fence_confines_the_guard_to_a_bypass(tb: Arc<Testbed>) {
    let ns = FENCE_PROBES;
    let guard = "initguard-2"; // system:serviceaccount:kube-system:initguard
    tb.namespace(ns);
    tb.gated_pod(
        ns,
        "held",
        true,
        &["a.example.com/gate", "b.example.com/gate"],
    );
    let label_change = json!({ "metadata": { "labels": { "app": "changed" } } }).to_string();
    until_enforced(
        &tb,
        guard,
        "initguard-self-fence",
        &[
            "patch",
            "pod",
            "held",
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            &label_change,
        ],
        None,
    )
    .await;

    let fence = "initguard-self-fence";
    let json_patch = |ops: Value| ops.to_string();
    for (what, patch) in [
        (
            "a label",
            json_patch(
                json!([{ "op": "replace", "path": "/metadata/labels/app", "value": "changed" }]),
            ),
        ),
        (
            "the image",
            json_patch(
                json!([{ "op": "replace", "path": "/spec/containers/0/image", "value": "registry.k8s.io/pause:3.9" }]),
            ),
        ),
        (
            "a toleration",
            json_patch(
                json!([{ "op": "add", "path": "/spec/tolerations", "value": [{ "key": "k", "operator": "Exists" }] }]),
            ),
        ),
        (
            "another annotation",
            json_patch(
                json!([{ "op": "add", "path": "/metadata/annotations", "value": { "note": "x" } }]),
            ),
        ),
    ] {
        eprintln!("self-fence: the guard changes {what}");
        refused_by(
            &tb,
            guard,
            fence,
            &[],
            &[
                "patch", "pod", "held", "-n", ns, "--type", "json", "-p", &patch,
            ],
            None,
        );
    }
    // What a bypass writes passes: one gate removed, the record added.
    let bypass = json_patch(json!([
        { "op": "test", "path": "/spec/schedulingGates/0/name", "value": "a.example.com/gate" },
        { "op": "remove", "path": "/spec/schedulingGates/0" },
        { "op": "add", "path": "/metadata/annotations", "value": { "initguard.io/bypassed": "a.example.com/gate=deadline@2026-11-26T00:00:00Z" } },
    ]));
    allowed(
        &tb,
        guard,
        &[
            "patch", "pod", "held", "-n", ns, "--type", "json", "-p", &bypass,
        ],
        None,
    );
    assert_eq!(tb.gates(ns, "held"), ["b.example.com/gate"]);

    // A webhook configuration the guard may patch (as the chart grants for listed ones).
    // Created, not applied: no last-applied annotation, so the record is the only one.
    let created = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": "pol-fence-hook" },
        "webhooks": [{
            "name": "pods.pol-fence.example.com",
            "clientConfig": { "url": "https://127.0.0.1:1/validate" },
            "rules": [{ "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"] }],
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "namespaceSelector": { "matchLabels": { "pol-fence-hook": "on" } },
        }],
    });
    tb.kubectl_stdin(&["create", "-f", "-"], Some(&created.to_string()));
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "pol-fence-hook" },
        "rules": [{ "apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
            "resourceNames": ["pol-fence-hook"], "verbs": ["get", "patch"] }],
    }));
    tb.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": "pol-fence-hook" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pol-fence-hook" },
        "subjects": [{ "kind": "ServiceAccount", "name": "initguard", "namespace": "kube-system" }],
    }));
    let hook = [
        "patch",
        "validatingwebhookconfiguration",
        "pol-fence-hook",
        "--type",
        "json",
        "-p",
    ];
    for (what, patch) in [
        (
            "clientConfig",
            json!([{ "op": "replace", "path": "/webhooks/0/clientConfig/url", "value": "https://127.0.0.1:2/elsewhere" }]),
        ),
        (
            "rules",
            json!([{ "op": "replace", "path": "/webhooks/0/rules/0/operations", "value": ["UPDATE"] }]),
        ),
        (
            "failurePolicy",
            json!([{ "op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore" }]),
        ),
        (
            "a foreign matchCondition",
            json!([{ "op": "add", "path": "/webhooks/0/matchConditions", "value": [{ "name": "other", "expression": "false" }] }]),
        ),
    ] {
        eprintln!("self-fence: the guard changes the webhook's {what}");
        let patch = patch.to_string();
        let args = [&hook[..], &[patch.as_str()]].concat();
        // RBAC allows it (resourceNames): only the policy refuses.
        refused_by(&tb, guard, fence, &[], &args, None);
    }
    let own = json!([
        { "op": "add", "path": "/webhooks/0/matchConditions", "value": [{ "name": "initguard-bypass", "expression": "true" }] },
        { "op": "add", "path": "/metadata/annotations", "value": { "initguard.io/bypassed-webhooks": "{}" } },
    ])
    .to_string();
    allowed(&tb, guard, &[&hook[..], &[own.as_str()]].concat(), None);

    // Creates: RBAC grown to ConfigMaps (as a careless edit might); only dry runs pass.
    tb.kubectl(&[
        "create",
        "role",
        "pol-fence-create",
        "-n",
        ns,
        "--verb=create,get,update,patch,delete",
        "--resource=configmaps",
    ]);
    tb.kubectl(&[
        "create",
        "rolebinding",
        "pol-fence-create",
        "-n",
        ns,
        "--role=pol-fence-create",
        "--serviceaccount=kube-system:initguard",
    ]);
    eventually("the grown RBAC to let a dry run through", || {
        kubectl_as(
            &tb,
            guard,
            &[
                "create",
                "configmap",
                "planted",
                "-n",
                ns,
                "--dry-run=server",
            ],
            None,
        )
        .ok()
    })
    .await;
    refused_by(
        &tb,
        guard,
        fence,
        &["configmaps"],
        &["create", "configmap", "planted", "-n", ns],
        None,
    );
    assert!(tb.get("configmap", ns, "planted").is_none());
    // Updates and deletes of what it has no business with: refused too.
    tb.kubectl(&["create", "configmap", "victim", "-n", ns]);
    refused_by(
        &tb,
        guard,
        fence,
        &["update configmaps"],
        &["label", "configmap", "victim", "-n", ns, "planted=yes"],
        None,
    );
    refused_by(
        &tb,
        guard,
        fence,
        &["delete configmaps"],
        &["delete", "configmap", "victim", "-n", ns],
        None,
    );
    // Nor may it drop a pod's bypass record.
    let drop_record =
        json!([{ "op": "remove", "path": "/metadata/annotations/initguard.io~1bypassed" }])
            .to_string();
    refused_by(
        &tb,
        guard,
        fence,
        &[],
        &[
            "patch",
            "pod",
            "held",
            "-n",
            ns,
            "--type",
            "json",
            "-p",
            &drop_record,
        ],
        None,
    );

    // What the guard creates for real passes: a Warning Event and its own Lease; another
    // Lease, which its Role would allow, does not.
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": { "name": "held.fence-probe", "namespace": ns },
        "involvedObject": { "apiVersion": "v1", "kind": "Pod", "name": "held", "namespace": ns },
        "reason": "InitializerBypassed", "message": "probe", "type": "Warning",
    })
    .to_string();
    allowed(&tb, guard, &["create", "-f", "-"], Some(&event));
    let lease = |name: &str| {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": name, "namespace": "kube-system" },
        })
        .to_string()
    };
    tb.kubectl(&[
        "delete",
        "lease",
        "initguard",
        "-n",
        "kube-system",
        "--ignore-not-found",
    ]);
    allowed(
        &tb,
        guard,
        &["create", "-f", "-"],
        Some(&lease("initguard")),
    );
    refused_by(
        &tb,
        guard,
        fence,
        &["leases"],
        &["create", "-f", "-"],
        Some(&lease("kube-scheduler-2")),
    );
    tb.kubectl(&["delete", "lease", "initguard", "-n", "kube-system"]);

    tb.kubectl(&["delete", "validatingwebhookconfiguration", "pol-fence-hook"]);
    tb.kubectl(&["delete", "clusterrolebinding,clusterrole", "pol-fence-hook"]);
    gates::cleanup(&tb, ns);
}

/// A policy's 403 on a bypass is counted and backed off: one PATCH per retry interval and
/// one error count each, never a loop. A test policy refuses the guard's updates of one
/// pod, as a site's own policy might.
pub(crate) async fn a_refused_bypass_is_backed_off_not_looped(tb: Arc<Testbed>) {
    let ns = PROVOKED_REFUSALS;
    tb.namespace(ns);
    tb.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": "pol-refuse-guard" },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{ "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"] }] },
            "matchConditions": [{ "name": "guard-in-ns", "expression": format!("request.namespace == '{ns}' && request.userInfo.username.startsWith('system:') && request.userInfo.username.endsWith('initguard')") }],
            "validations": [{ "expression": "false", "reason": "Forbidden", "message": "pol-refuse-guard: a site policy refuses this bypass" }],
        },
    }));
    tb.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": { "name": "pol-refuse-guard" },
        "spec": { "policyName": "pol-refuse-guard", "validationActions": ["Deny"] },
    }));
    tb.gated_pod(ns, "refused", true, &["a.example.com/gate"]);
    let probe =
        json!({ "metadata": { "annotations": { "initguard.io/bypassed": "x" } } }).to_string();
    // Probed as the other guard identity: GUARD_USER_2's PATCHes are then the guard's alone.
    until_enforced(
        &tb,
        "initguard",
        "pol-refuse-guard",
        &[
            "patch", "pod", "refused", "-n", ns, "--type", "merge", "-p", &probe,
        ],
        None,
    )
    .await;

    let guard = tb
        .guard(
            "pol-refused",
            "initguard-2",
            &gates::config("initializers:\n  - { name: a.example.com/gate, deadline: 1s }\n"),
        )
        .await;
    // Three refused PATCHes: each one retry interval after the one before, at least.
    let patches = || -> Vec<Audit> {
        tb.pod_writes_by(GUARD_USER_2, ns)
            .into_iter()
            .filter(|a| a.verb == "patch")
            .collect()
    };
    let seen = eventually("three refused bypass PATCHes", || {
        let p = patches();
        (p.len() >= 3).then_some(p)
    })
    .await;
    assert!(seen.iter().all(|a| a.code == 403), "{seen:#?}");
    for pair in seen.windows(2) {
        let gap = timestamp(&pair[1].received).duration_since(timestamp(&pair[0].received));
        // The guard retries a refused bypass 15 s later (RETRY_FAILED_AFTER); a loop would
        // patch again at once. 1 s covers timer and timestamp granularity.
        assert!(
            gap >= jiff::SignedDuration::from_secs(14),
            "a refused bypass was retried after {gap:?}: {pair:#?}"
        );
    }
    // One error count per refused PATCH (the server's record is the count).
    let metrics = guard.metrics();
    let errors = metric_sum(
        &metrics,
        "initguard_bypass_errors_total",
        &[("initializer", "a.example.com/gate")],
    );
    let refused_now = patches().len();
    assert!(
        (errors as usize) <= refused_now && (errors as usize) + 1 >= refused_now,
        "{errors} errors counted for {refused_now} refused PATCHes"
    );
    assert_eq!(tb.gates(ns, "refused"), ["a.example.com/gate"]);
    guard.stop();
    tb.kubectl(&[
        "delete",
        "validatingadmissionpolicybinding,validatingadmissionpolicy",
        "pol-refuse-guard",
    ]);
    gates::cleanup(&tb, ns);
}

/// The chart with the policies enforced and no opt-in group: its own Deployment, whose pods
/// carry the label, still rolls out, because the release namespace counts as marked; the
/// same change elsewhere is refused by the chart's policy.
pub(crate) async fn chart_rolls_out_under_its_own_enforced_policies(tb: Arc<Testbed>) {
    let (release, ns, elsewhere) = ("guarded", "pol-chart", "pol-chart-elsewhere");
    let helm = tb.bin.join("helm");
    let admin = tb.kubeconfig("admin");
    let admin = admin.to_str().expect("UTF-8 path");
    let chart_dir = chart();
    tb.namespace(elsewhere);
    run(
        "helm install (policies enforced)",
        &helm,
        &[
            "--kubeconfig",
            admin,
            "install",
            release,
            chart_dir.to_str().unwrap(),
            "--namespace",
            ns,
            "--create-namespace",
            "--set",
            "admissionPolicies.mode=deny",
            "--set-json",
            "admissionPolicies.optInGroups=[]",
            "--set",
            "replicaCount=2",
            crate::deploy::IMAGE[0],
            crate::deploy::IMAGE[1],
        ],
        None,
    );
    struct Uninstall<'a>(&'a Path, &'a str, &'a str, &'a str);
    impl Drop for Uninstall<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new(self.0)
                .args([
                    "--kubeconfig",
                    self.1,
                    "uninstall",
                    self.2,
                    "--namespace",
                    self.3,
                    "--wait",
                ])
                .status();
        }
    }
    let _uninstall = Uninstall(&helm, admin, release, ns);
    let policy = "guarded-initguard-opt-in";
    let labelled = workload("Deployment", elsewhere, "web", json!({ OPT_IN: "true" }), 1);
    // The admin is in no opt-in group of this release: refused outside the release namespace.
    until_enforced(
        &tb,
        "admin",
        policy,
        &["create", "-f", "-"],
        Some(&labelled),
    )
    .await;
    refused_by(
        &tb,
        "admin",
        policy,
        &[OPT_IN, MARKER],
        &["create", "-f", "-"],
        Some(&labelled),
    );

    // Both replicas of the install are bound (the replicaset controller is not judged).
    let bound = |selector: &str| {
        tb.list("pods", ns, Some(selector))
            .iter()
            .filter(|p| p["spec"]["nodeName"].as_str().is_some())
            .count()
    };
    eventually(
        "both replicas of the chart's Deployment to be bound",
        || (bound(&format!("{OPT_IN}=true")) == 2).then_some(()),
    )
    .await;
    // In the release namespace, changing the label of the chart's own Deployment passes, and
    // its new ReplicaSet's pod is created and bound (the surge pod: no kubelet makes the old
    // ones Ready, and anti-affinity leaves one free node).
    let deployment = "guarded-initguard";
    let relabel =
        json!({ "spec": { "template": { "metadata": { "labels": { OPT_IN: "rollout" } } } } })
            .to_string();
    allowed(
        &tb,
        "admin",
        &[
            "patch",
            "deployment",
            deployment,
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            &relabel,
        ],
        None,
    );
    eventually(
        "a pod of the relabelled chart Deployment to be bound",
        || (bound(&format!("{OPT_IN}=rollout")) >= 1).then_some(()),
    )
    .await;
    tb.kubectl(&["delete", "namespace", elsewhere, "--wait=false"]);
}
