//! The scheduling-gates scenarios against the real API server, with the `initguard` binary
//! running as the `system:initguard` user: judged by the pods the server stores, its audit log
//! and `kubectl describe`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::testbed::*;

/// Config for a guard without leader election, opt-in by [`OPT_IN`], then `rest`.
pub(crate) fn config(rest: &str) -> String {
    format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: false }}\nunlistedInitializers: ignore\n{rest}"
    )
}

/// Every guard request of this scenario in the audit log was allowed: the shipped RBAC
/// suffices.
pub(crate) fn assert_no_denied(tb: &Testbed) {
    let denied: Vec<Audit> = tb
        .scenario_audit()
        .into_iter()
        .filter(|a| (a.user == GUARD_USER || a.user == GUARD_USER_2) && a.code == 403)
        .collect();
    // The privilege scenario provokes 403s on purpose, on secrets and pod deletes only; the
    // policies scenarios provoke the self-fence's and a site policy's in their own objects.
    let provoked = |a: &Audit| {
        [
            crate::policies::FENCE_PROBES,
            crate::policies::PROVOKED_REFUSALS,
        ]
        .contains(&a.namespace.as_str())
            || a.name == crate::policies::FENCE_HOOK
    };
    let unexpected: Vec<&Audit> = denied
        .iter()
        .filter(|a| !(a.resource == "secrets" || (a.resource == "pods" && a.verb == "delete")))
        .filter(|a| !provoked(a))
        .collect();
    assert!(
        unexpected.is_empty(),
        "requests of the guard denied: {unexpected:#?}"
    );
}

/// Remove the namespace's pods, so that no later guard sees them.
pub(crate) fn cleanup(tb: &Testbed, ns: &str) {
    tb.kubectl(&[
        "delete",
        "pods",
        "--all",
        "-n",
        ns,
        "--force",
        "--grace-period=0",
        "--wait=false",
    ]);
}

/// Guard patches of each pod of `ns`: name → audit events.
pub(crate) fn guard_patches(tb: &Testbed, user: &str, ns: &str) -> BTreeMap<String, Vec<Audit>> {
    let mut out: BTreeMap<String, Vec<Audit>> = BTreeMap::new();
    for a in tb.pod_writes_by(user, ns) {
        out.entry(a.name.clone()).or_default().push(a);
    }
    out
}

/// A JSON Patch, as the audit log recorded it, that removes only the gate `gate` at `index`
/// and tests, before any change, the pod's `uid`, its opt-in label ([`OPT_IN`] = `true`) and
/// the gate's name at that index; and records the bypass in `initguard.io/bypassed`.
pub(crate) fn assert_guarded_removal(
    patch: &serde_json::Value,
    uid: &str,
    index: usize,
    gate: &str,
) {
    let ops = patch
        .as_array()
        .unwrap_or_else(|| panic!("not a JSON Patch: {patch}"));
    let op = |o: &serde_json::Value| {
        (
            o["op"].as_str().unwrap_or_default().to_owned(),
            o["path"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let first_change = ops
        .iter()
        .position(|o| o["op"] != "test")
        .unwrap_or_else(|| panic!("the patch changes nothing: {patch}"));
    let tests = &ops[..first_change];
    let tested = |path: &str, value: &serde_json::Value| {
        tests
            .iter()
            .any(|o| o["path"] == path && o["value"] == *value)
    };
    let label = format!(
        "/metadata/labels/{}",
        OPT_IN.replace('~', "~0").replace('/', "~1")
    );
    let entry = format!("/spec/schedulingGates/{index}");
    for (path, value) in [
        ("/metadata/uid".to_owned(), serde_json::json!(uid)),
        (label, serde_json::json!("true")),
        (format!("{entry}/name"), serde_json::json!(gate)),
    ] {
        assert!(
            tested(&path, &value),
            "no test of {path} = {value} before the change: {patch}"
        );
    }
    let removes: Vec<String> = ops
        .iter()
        .map(op)
        .filter(|(o, _)| o == "remove")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(removes, std::slice::from_ref(&entry), "removals of {patch}");
    let gate_paths: Vec<String> = ops
        .iter()
        .map(op)
        .map(|(_, p)| p)
        .filter(|p| {
            p.starts_with("/spec/schedulingGates")
                && *p != entry
                && !p.starts_with(&format!("{entry}/"))
        })
        .collect();
    assert!(
        gate_paths.is_empty(),
        "other gates touched: {gate_paths:?} in {patch}"
    );
    let recorded = ops[first_change..].iter().any(|o| {
        matches!(o["op"].as_str(), Some("add" | "replace"))
            && o["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/metadata/annotations"))
            && o["value"]
                .to_string()
                .contains(&format!("{gate}=deadline@"))
    });
    assert!(recorded, "no bypass record written: {patch}");
}

/// The `initguard.io/bypassed` annotation of a pod.
pub(crate) fn bypass_annotation(tb: &Testbed, ns: &str, name: &str) -> String {
    tb.get("pod", ns, name)
        .and_then(|p| {
            p["metadata"]["annotations"]["initguard.io/bypassed"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// A labeled pod with two gates, the listed one's owner up but never removing it: at the
/// deadline exactly that gate goes, in one patch by the guard's user, never before the deadline;
/// an unlabeled pod with the same gates is never written; `kubectl describe pod` shows the
/// annotation and the `InitializerBypassed` Event.
pub(crate) async fn deadline_bypass_removes_only_the_failed_gate(tb: Arc<Testbed>) {
    let ns = "gates-deadline";
    tb.namespace(ns);
    let _owner = OwnerDeployment::start(&tb, ns, "sidecar-injector").await;
    let deadline = Duration::from_secs(3);
    let guard = tb
        .guard(
            "deadline",
            "initguard",
            &config(&format!(
                "initializers:\n  - {{ name: {SIDECAR}, deadline: 3s, \
                 owner: {{ deployment: {ns}/sidecar-injector }} }}\n"
            )),
        )
        .await;
    tb.gated_pod(ns, "labeled", true, &[SIDECAR, UNLISTED]);
    tb.gated_pod(ns, "unlabeled", false, &[SIDECAR, UNLISTED]);
    eventually("labeled loses the sidecar gate", || {
        (tb.gates(ns, "labeled") == [UNLISTED]).then_some(())
    })
    .await;
    // Order, not time: a labeled pod created now is bypassed only after unlabeled's deadline
    // has long passed, so had the guard meant to write unlabeled, it would have by then.
    tb.gated_pod(ns, "later", true, &[SIDECAR]);
    eventually("later loses its gate", || {
        tb.gates(ns, "later").is_empty().then_some(())
    })
    .await;

    assert_eq!(tb.gates(ns, "unlabeled"), [SIDECAR, UNLISTED]);
    let annotation = bypass_annotation(&tb, ns, "labeled");
    assert!(
        annotation.contains(&format!("{SIDECAR}=deadline@")) && !annotation.contains(UNLISTED),
        "annotation {annotation:?}"
    );
    let patches = guard_patches(&tb, GUARD_USER, ns);
    assert_eq!(
        patches.keys().collect::<Vec<_>>(),
        ["labeled", "later"],
        "pods the guard wrote: {patches:#?}"
    );
    for (name, writes) in &patches {
        assert_eq!(writes.len(), 1, "{name}: {writes:#?}");
        let w = &writes[0];
        assert_eq!(
            (w.verb.as_str(), w.code, w.subresource.as_str()),
            ("patch", 200, ""),
            "{w:?}"
        );
        // Never early: the patch reached the server at least `deadline` after the pod's
        // creationTimestamp (whole seconds, so compare in whole seconds).
        let pod = tb.get("pod", ns, name).unwrap_or_default();
        let created = pod["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default();
        let created: jiff::Timestamp = created.parse().unwrap_or_else(|e| panic!("{created}: {e}"));
        let received: jiff::Timestamp = w.received.parse().unwrap_or_else(|e| panic!("{w:?}: {e}"));
        assert!(
            received.as_second() >= created.as_second() + deadline.as_secs() as i64,
            "{name} patched at {received}, created {created}"
        );
    }
    // The patch as the server received it (the audit log's requestObject): it removes exactly
    // the sidecar gate, and tests the pod's uid, its opt-in label and the gate's name first.
    for name in ["labeled", "later"] {
        let uid = tb
            .get("pod", ns, name)
            .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("{name} has no uid"));
        assert_guarded_removal(&patches[name][0].request, &uid, 0, SIDECAR);
    }

    let events: Vec<_> = tb
        .list("events", ns, None)
        .into_iter()
        .filter(|e| {
            e["reason"] == "InitializerBypassed" && e["involvedObject"]["name"] == "labeled"
        })
        .collect();
    assert_eq!(events.len(), 1, "{events:#?}");
    let describe = tb.kubectl(&["describe", "pod", "labeled", "-n", ns]);
    assert!(
        describe.contains("initguard.io/bypassed") && describe.contains("InitializerBypassed"),
        "kubectl describe pod labeled:\n{describe}"
    );
    assert_no_denied(&tb);
    guard.stop();
    cleanup(&tb, ns);
}

/// The owner Deployment's pod stops being Ready (its "controller" crashed): once the
/// Deployment has no available replica for `ownerDownGrace`, every labeled pod waiting on its
/// gates loses them (reason owner_down), after the crash and never before, both gates of one
/// pod in one PATCH; a gate of another owner between them stays. The scheduler then binds the
/// pods whose gates are all gone.
pub(crate) async fn killed_owner_is_bypassed_and_pods_get_bound(tb: Arc<Testbed>) {
    let ns = "gates-owner";
    tb.namespace(ns);
    let owner = OwnerDeployment::start(&tb, ns, "sidecar-injector").await;
    let guard = tb
        .guard(
            "owner",
            "initguard",
            &config(&format!(
                "defaults: {{ ownerDownGrace: 2s }}\ninitializers:\n  - {{ name: {SIDECAR}, \
                 deadline: 10m, owner: {{ deployment: {ns}/sidecar-injector }} }}\n  \
                 - {{ name: {SECOND}, deadline: 10m, owner: {{ deployment: \
                 {ns}/sidecar-injector }} }}\n{WITNESS_ENTRY}"
            )),
        )
        .await;
    let names = ["a", "b", "c"];
    for n in names {
        tb.gated_pod(ns, n, true, &[SIDECAR, SECOND]);
    }
    tb.gated_pod(ns, "mixed", true, &[SIDECAR, UNLISTED, SECOND]);
    assert_no_pod_write_once_seen(&tb, ns, "the owner was up").await;
    let killed_at = owner.kill(&tb).await;
    for n in names {
        bypassed_and_bound(&tb, ns, n).await;
        let annotation = bypass_annotation(&tb, ns, n);
        assert!(
            annotation.contains(&format!("{SIDECAR}=owner_down@"))
                && annotation.contains(&format!("{SECOND}=owner_down@")),
            "{n}: {annotation:?}"
        );
    }
    eventually("mixed keeps only the gate of another owner", || {
        (tb.gates(ns, "mixed") == [UNLISTED]).then_some(())
    })
    .await;
    let patches = guard_patches(&tb, GUARD_USER, ns);
    // One PATCH removed both gates of `mixed`, highest index first, each tested where it was.
    let mixed = &patches["mixed"];
    assert_eq!(mixed.len(), 1, "{mixed:#?}");
    let ops: Vec<(String, String)> = mixed[0]
        .request
        .as_array()
        .into_iter()
        .flatten()
        .filter(|op| {
            op["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/spec/schedulingGates"))
        })
        .map(|op| {
            (
                op["op"].as_str().unwrap_or("").to_owned(),
                op["path"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let op = |o: &str, p: &str| (o.to_owned(), p.to_owned());
    assert_eq!(
        ops,
        [
            op("test", "/spec/schedulingGates/0/name"),
            op("test", "/spec/schedulingGates/2/name"),
            op("remove", "/spec/schedulingGates/2"),
            op("remove", "/spec/schedulingGates/0"),
        ],
        "{:#?}",
        mixed[0].request
    );
    let audit = tb.audit();
    for n in names {
        let writes = &patches[n];
        // Both gates of one owner: one PATCH, as a bare client would send.
        assert_eq!(writes.len(), 1, "{n}: {writes:#?}");
        assert!(writes[0].ok(), "{:?}", writes[0]);
        // Never before ownerDownGrace (2 s) after the crash, on the server's clock: the
        // Deployment can only have become unavailable after its pod stopped being Ready.
        assert!(
            timestamp(&writes[0].received)
                >= timestamp(&killed_at) + std::time::Duration::from_secs(2),
            "{n} patched at {}, before the crash ({killed_at}) plus ownerDownGrace",
            writes[0].received
        );
        // Bound by the scheduler after the bypass.
        let binding = audit
            .iter()
            .find(|a| a.name == n && a.namespace == ns && a.subresource == "binding" && a.ok())
            .unwrap_or_else(|| panic!("no binding of {n} in the audit log"));
        assert_eq!(binding.user, "system:kube-scheduler");
        // Received times only: a ResponseComplete stage may be stamped after the client
        // already acted on the response.
        assert!(
            binding.received > writes[0].received,
            "{n} bound before the bypass"
        );
    }
    assert_no_denied(&tb);
    guard.stop();
    cleanup(&tb, ns);
}

/// A Lease owner whose holder's clock is a minute ahead, then a minute behind: the guard
/// judges renewals by when it saw them, so it bypasses no sooner than the lease duration plus
/// `ownerDownGrace` after the last renewal the server recorded, and not half the skew later (a
/// guard that read the holder's `renewTime` would bypass at once behind, while the holder
/// renews, and a minute late ahead). Judged by the audit log alone.
pub(crate) async fn a_skewed_lease_holder_is_judged_by_its_renewals(tb: Arc<Testbed>) {
    for (skew, name) in [(60i64, "ahead"), (-60, "behind")] {
        let ns = format!("gates-skew-{name}");
        tb.namespace(&ns);
        let mut lease = OwnerLease::start_skewed(
            &tb,
            &ns,
            "gate-controller",
            jiff::SignedDuration::from_secs(skew),
        );
        let guard = tb
            .guard(
                &format!("skew-{name}"),
                "initguard",
                &config(&format!(
                    "defaults: {{ ownerDownGrace: 1s }}\ninitializers:\n  - {{ name: {SIDECAR}, \
                     deadline: 10m, owner: {{ lease: {ns}/gate-controller }} }}\n{WITNESS_ENTRY}"
                )),
            )
            .await;
        tb.gated_pod(&ns, "p", true, &[SIDECAR]);
        assert_no_pod_write_once_seen(&tb, &ns, "its owner renewed").await;
        // Renewed for two lease durations with the guard watching: never down meanwhile.
        tokio::time::sleep(Duration::from_secs(2 * OWNER_LEASE_SECONDS)).await;
        let early = tb.pod_writes_by(GUARD_USER, &ns);
        assert!(
            early.is_empty(),
            "clock {name}: bypassed while the holder renewed: {early:#?}"
        );
        let last = lease.kill(&tb);
        bypassed_and_bound(&tb, &ns, "p").await;
        let writes = guard_patches(&tb, GUARD_USER, &ns);
        let bypass = writes["p"]
            .iter()
            .find(|a| a.ok())
            .unwrap_or_else(|| panic!("clock {name}: no allowed bypass: {writes:#?}"));
        let at = timestamp(&bypass.received);
        let ran_out = last + Duration::from_secs(OWNER_LEASE_SECONDS + 1);
        assert!(
            at >= ran_out,
            "clock {name}: bypassed at {at}, before the last renewal ({last}) plus the lease \
             duration and ownerDownGrace"
        );
        let too_late = ran_out + Duration::from_secs(skew.unsigned_abs() / 2);
        assert!(
            at < too_late,
            "clock {name}: bypassed at {at}, {:?} after the lease ran out ({ran_out})",
            at.duration_since(ran_out)
        );
        assert_no_denied(&tb);
        guard.stop();
        cleanup(&tb, &ns);
    }
}

/// `dryRun: true`: the guard decides (its own counter is only the sync point) but the server
/// sees no write from it, judged once it has stopped: no pod patch, no Event; the gates stay.
pub(crate) async fn dry_run_writes_nothing(tb: Arc<Testbed>) {
    let ns = "gates-dryrun";
    tb.namespace(ns);
    let gate = "deadline.example.com";
    let guard = tb
        .guard(
            "dryrun",
            "initguard",
            &config(&format!(
                "dryRun: true\ninitializers:\n  - {{ name: {gate}, deadline: 1s }}\n"
            )),
        )
        .await;
    tb.gated_pod(ns, "p1", true, &[gate]);
    tb.gated_pod(ns, "p2", true, &[gate]);
    eventually("the dry-run guard to decide twice", || {
        (metric_sum(
            &guard.metrics(),
            "initguard_bypasses_total",
            &[("initializer", gate)],
        ) >= 2.0)
            .then_some(())
    })
    .await;
    // Stopped before the judge reads: a graceful stop drains what the guard was writing, so
    // a write decided with the two decisions is in the audit log by then.
    guard.stop();
    let writes: Vec<Audit> = tb
        .audit()
        .into_iter()
        .filter(|a| a.user == GUARD_USER && a.is_write() && a.namespace == ns)
        .collect();
    assert!(writes.is_empty(), "the dry-run guard wrote: {writes:#?}");
    assert_eq!(tb.gates(ns, "p1"), [gate]);
    assert_eq!(tb.gates(ns, "p2"), [gate]);
    cleanup(&tb, ns);
}

/// `optIn.namespaces`: an unlabeled pod in a listed namespace is bypassed at its deadline, one
/// in another namespace never; the guard is restarted (a new process) while the pod waits, and
/// the bypass still comes exactly once and never before creation + deadline.
pub(crate) async fn namespace_opt_in_survives_a_restart(tb: Arc<Testbed>) {
    let (listed, other) = ("gates-nsoptin", "gates-other");
    tb.namespace(listed);
    tb.namespace(other);
    let gate = "deadline.example.com";
    let deadline = Duration::from_secs(4);
    let config = format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN}, namespaces: [{listed}] }}\n\
         leaderElection: {{ enabled: false }}\n\
         initializers:\n  - {{ name: {gate}, deadline: 4s }}\n"
    );
    let first = tb.guard("restart-1", "initguard", &config).await;
    tb.gated_pod(listed, "p", false, &[gate]);
    tb.gated_pod(other, "q", false, &[gate]);
    eventually("the first guard to see 2 waiting pods", || {
        (initguard_test_support::metrics::series(&first.metrics(), "initguard_waiting_pods", &[])
            .is_some_and(|n| n >= 2.0)
            || !tb.pod_writes_by(GUARD_USER, listed).is_empty())
        .then_some(())
    })
    .await;
    first.stop();
    let second = tb.guard("restart-2", "initguard", &config).await;
    eventually("p loses its gate", || {
        tb.gates(listed, "p").is_empty().then_some(())
    })
    .await;
    // Order, not time: a labeled pod in the other namespace created now is bypassed only after
    // q's deadline has long passed.
    tb.gated_pod(other, "later", true, &[gate]);
    eventually("later loses its gate", || {
        tb.gates(other, "later").is_empty().then_some(())
    })
    .await;
    second.stop();

    let writes = tb.pod_writes_by(GUARD_USER, listed);
    assert_eq!(writes.len(), 1, "{writes:#?}");
    assert!(writes[0].ok() && writes[0].name == "p", "{:?}", writes[0]);
    let pod = tb.get("pod", listed, "p").unwrap_or_default();
    let created = pod["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default();
    let created: jiff::Timestamp = created.parse().unwrap_or_else(|e| panic!("{created}: {e}"));
    let received: jiff::Timestamp = writes[0]
        .received
        .parse()
        .unwrap_or_else(|e| panic!("{:?}: {e}", writes[0]));
    assert!(
        received.as_second() >= created.as_second() + deadline.as_secs() as i64,
        "p patched at {received}, created {created}"
    );
    let other_writes: Vec<String> = tb
        .pod_writes_by(GUARD_USER, other)
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(other_writes, ["later"]);
    assert_eq!(tb.gates(other, "q"), [gate]);
    assert_no_denied(&tb);
    cleanup(&tb, listed);
    cleanup(&tb, other);
}

/// A pod that has waited half its gate's deadline is told why where users look: one Normal
/// `InitializerWaiting` Event per pod and gate, readable with `kubectl describe`, written once
/// by the guard's identity (the audit log), also after a guard restart.
pub(crate) async fn waiting_pod_is_explained_in_kubectl_describe(tb: Arc<Testbed>) {
    let ns = "gates-waiting";
    tb.namespace(ns);
    let gate = "slow.example.com";
    let guard_config = config(&format!(
        "initializers:\n  - {{ name: {gate}, deadline: 1h, owner: {{ deployment: {ns}/absent }} }}\n"
    ));
    let guard = tb.guard("waiting", "initguard", &guard_config).await;
    tb.gated_pod(ns, "tenant", false, &[gate]);
    let described = eventually(
        "kubectl describe to show the InitializerWaiting Event",
        || {
            let out = tb.kubectl(&["describe", "pod", "tenant", "-n", ns]);
            out.contains("InitializerWaiting").then_some(out)
        },
    )
    .await;
    // The owner was never seen: unknown, explained at once; the pod never opted in.
    let described = described.split_whitespace().collect::<Vec<_>>().join(" ");
    for says in [
        "Normal InitializerWaiting".to_owned(),
        format!("on scheduling gate {gate}; owner: deployment {ns}/absent unknown"),
        "has not opted in; add the label initguard.io/bypass".to_owned(),
    ] {
        assert!(
            described.contains(&says),
            "kubectl describe lacks {says:?}:\n{described}"
        );
    }
    guard.stop();
    // A restarted guard offers it again and the server answers 409: still one Event.
    let restarted = tb.guard("waiting", "initguard", &guard_config).await;
    eventually(
        "the restarted guard's second offer, refused as a duplicate",
        || {
            tb.audit()
                .into_iter()
                .filter(|a| {
                    a.user == GUARD_USER
                        && a.verb == "create"
                        && a.resource == "events"
                        && a.namespace == ns
                })
                .nth(1)
                .filter(|a| a.code == 409)
        },
    )
    .await;
    restarted.stop();
    let events = tb.list("events", ns, None);
    let waiting: Vec<_> = events
        .iter()
        .filter(|e| e["reason"] == "InitializerWaiting")
        .collect();
    assert_eq!(waiting.len(), 1, "{waiting:#?}");
    assert_eq!(waiting[0]["type"], "Normal");
    assert_eq!(tb.gates(ns, "tenant"), [gate], "explained, not bypassed");

    // The tenant's own view: `kubectl initguard why`, found by kubectl on the PATH as a plugin,
    // with read-only rights in this namespace only (and one identity without Event reads).
    let plugins = tb.dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin folder");
    let plugin = plugins.join(initguard::cli::KUBECTL_PLUGIN);
    if !plugin.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_initguard"), &plugin)
            .expect("link the plugin");
    }
    for (who, resources) in [("viewer", "pods,events"), ("pod-reader", "pods")] {
        tb.kubectl(&["create", "serviceaccount", who, "-n", ns]);
        tb.kubectl(&[
            "create",
            "role",
            who,
            "--verb=get,list",
            &format!("--resource={resources}"),
            "-n",
            ns,
        ]);
        tb.kubectl(&[
            "create",
            "rolebinding",
            who,
            &format!("--role={who}"),
            &format!("--serviceaccount={ns}:{who}"),
            "-n",
            ns,
        ]);
    }
    let path = format!(
        "{}:{}",
        plugins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let plugin_run = |who: &str, args: &[&str]| {
        let kubeconfig = crate::deploy::token_kubeconfig(&tb, ns, who, &format!("why-{who}"));
        let out = std::process::Command::new(tb.kubectl_path())
            .args(["initguard", "why"])
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .expect("kubectl runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, said, err) = plugin_run("viewer", &["tenant", "-n", ns]);
    assert_eq!(code, Some(0), "{said}{err}");
    for says in [
        format!("pod {ns}/tenant waits on 1 scheduling gate(s): {gate}"),
        "InitializerWaiting  Waiting".to_owned(),
        "has not opted in; add the label initguard.io/bypass".to_owned(),
    ] {
        assert!(
            said.contains(&says),
            "kubectl initguard why lacks {says:?}:\n{said}"
        );
    }
    // Polite where it may not read: another namespace's pods, or this one's Events.
    let (code, said, err) = plugin_run("viewer", &["tenant", "-n", "default"]);
    assert!(
        code == Some(1) && err.contains("you may not read pods in namespace default"),
        "{said}{err}"
    );
    let (code, said, err) = plugin_run("pod-reader", &["tenant", "-n", ns]);
    assert!(
        code == Some(0)
            && said.contains(&format!("waits on 1 scheduling gate(s): {gate}"))
            && said.contains(&format!("you may not list Events in namespace {ns}")),
        "{said}{err}"
    );
    // A tenant may not read the guard's configuration: said, and the rest still explained.
    assert!(
        said.contains("initguard's configuration: you may not list ConfigMaps in all namespaces")
            && said.contains("pass --config FILE or --config-map NAMESPACE/NAME"),
        "{said}"
    );
    // An operator who may read it (a ConfigMap, as the chart deploys it) and the owner's
    // Deployments also sees the plan and the owner's state, computed from the real server.
    tb.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(
            &serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": "guard-config", "namespace": ns },
                "data": { "config.yaml": guard_config },
            })
            .to_string(),
        ),
    );
    let operator = "operator";
    tb.kubectl(&["create", "serviceaccount", operator, "-n", ns]);
    tb.kubectl(&[
        "create",
        "role",
        operator,
        "--verb=get,list,watch",
        "--resource=pods,events,configmaps,deployments.apps",
        "-n",
        ns,
    ]);
    tb.kubectl(&[
        "create",
        "rolebinding",
        operator,
        &format!("--role={operator}"),
        &format!("--serviceaccount={ns}:{operator}"),
        "-n",
        ns,
    ]);
    let (code, said, err) = plugin_run(
        operator,
        &[
            "tenant",
            "-n",
            ns,
            "--config-map",
            &format!("{ns}/guard-config"),
        ],
    );
    assert_eq!(code, Some(0), "{said}{err}");
    for says in [
        format!("initguard's configuration (ConfigMap {ns}/guard-config):"),
        "the pod is not opted in: initguard never changes it".to_owned(),
        format!("{gate}: waited "),
        format!("owner deployment {ns}/absent: unknown (deployment not found)"),
    ] {
        assert!(
            said.contains(&says),
            "kubectl initguard why lacks {says:?}:\n{said}"
        );
    }
    cleanup(&tb, ns);
}
