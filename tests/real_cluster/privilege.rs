//! Least privilege under the real RBAC authorizer: the guard's identities get exactly what
//! deploy/rbac.yaml grants (compared with a committed `kubectl auth can-i --list`), and are
//! refused what they must not do.

use std::sync::Arc;

use crate::testbed::{GUARD_USER, GUARD_USER_2, Testbed, expectation};

/// The guard's identities: kubeconfig name and user.
const IDENTITIES: [(&str, &str); 2] = [("initguard", GUARD_USER), ("initguard-2", GUARD_USER_2)];

/// `kubectl auth can-i --list` for both identities, in namespace default (what the
/// ClusterRole grants) and kube-system (plus the leader-election Role), matches
/// tests/real_cluster/can-i/IDENTITY-NAMESPACE.txt. The ServiceAccount also gets the
/// discovery rules every ServiceAccount gets (service-account-issuer-discovery). On a
/// difference the answer is written beside the build (`CARGO_TARGET_TMPDIR`), and the failure
/// prints the `cp` that accepts it after review: blessing is a command, never a test mode.
pub(crate) async fn can_i_list_matches_expectation(tb: Arc<Testbed>) {
    let mut differ = Vec::new();
    for namespace in ["default", "kube-system"] {
        for (kubeconfig, user) in IDENTITIES {
            let name = format!("can-i/{kubeconfig}-{namespace}.txt");
            let file = expectation(&name);
            let out = tb.kubectl_with(
                kubeconfig,
                &["auth", "can-i", "--list", "-n", namespace],
                None,
            );
            assert!(
                out.status.success(),
                "can-i --list as {user}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let got = normalize(&String::from_utf8_lossy(&out.stdout));
            let want = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
            if got != want {
                let answer = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(&name);
                if let Some(dir) = answer.parent() {
                    std::fs::create_dir_all(dir)
                        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
                }
                std::fs::write(&answer, &got)
                    .unwrap_or_else(|e| panic!("cannot write {}: {e}", answer.display()));
                differ.push(format!(
                    "`kubectl auth can-i --list -n {namespace}` as {user} differs from {}:\n\
                     --- expected\n{want}--- got\n{got}\
                     after review, accept it with: cp {} {}",
                    file.display(),
                    answer.display(),
                    file.display()
                ));
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n\n"));
}

/// The header, then the rules sorted, columns separated by single spaces: the comparison does
/// not depend on padding or order.
fn normalize(text: &str) -> String {
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() > 1 {
        lines[1..].sort();
    }
    lines.into_iter().map(|l| l + "\n").collect()
}

/// Forbidden under the real authorizer, both asked (`can-i`) and tried (a real request that the
/// server answers 403, seen in its audit log): reading Secrets, deleting or creating pods,
/// writing a Lease other than its own.
pub(crate) async fn forbidden_secrets_and_pod_deletes(tb: Arc<Testbed>) {
    let ns = "privilege";
    tb.namespace(ns);
    tb.gated_pod(ns, "victim", true, &["sidecar.example.com"]);
    for (kubeconfig, user) in IDENTITIES {
        let can = |args: &[&str]| -> bool {
            let mut full = vec!["auth", "can-i"];
            full.extend_from_slice(args);
            let out = tb.kubectl_with(kubeconfig, &full, None);
            match String::from_utf8_lossy(&out.stdout).trim() {
                "yes" => true,
                "no" => false,
                other => panic!("can-i {args:?} as {user}: {other:?} {:?}", out.stderr),
            }
        };
        for args in [
            &["get", "secrets", "-A"][..],
            &["list", "secrets", "-n", "kube-system"],
            &["watch", "secrets", "-A"],
            &["delete", "pods", "-n", ns],
            &["create", "pods", "-n", ns],
            &["update", "pods", "-n", ns],
            &["update", "leases/other", "-n", "kube-system"],
            &["update", "deployments", "-n", ns],
            &["get", "jobs.batch", "-n", ns],
            &["get", "nodes"],
            // One core/v1 Event per bypass: Events are only created, never patched.
            &["patch", "events", "-n", ns],
            &["create", "events.events.k8s.io", "-n", ns],
        ] {
            assert!(!can(args), "{user} may {args:?}");
        }
        // The sanity side: what the guard needs is granted.
        for args in [
            &["patch", "pods", "-n", ns][..],
            &["watch", "pods", "-A"],
            &["create", "events", "-n", ns],
            &["watch", "jobs.batch", "-A"],
            &["update", "leases/initguard", "-n", "kube-system"],
        ] {
            assert!(can(args), "{user} may not {args:?}");
        }
        // Tried for real: refused by the server.
        for args in [
            &["get", "secrets", "-n", "kube-system"][..],
            &["delete", "pod", "victim", "-n", ns, "--wait=false"],
        ] {
            let out = tb.kubectl_with(kubeconfig, args, None);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && err.contains("Forbidden"),
                "{user} {args:?}: {err}"
            );
        }
        let audit = tb.audit();
        for (resource, verb) in [("secrets", "list"), ("pods", "delete")] {
            assert!(
                audit.iter().any(|a| a.user == user
                    && a.resource == resource
                    && a.verb == verb
                    && a.code == 403),
                "no 403 for {verb} {resource} by {user} in the audit log"
            );
        }
    }
    assert!(!tb.gates(ns, "victim").is_empty(), "the pod was changed");
}
