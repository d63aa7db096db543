//! Two replicas with their own identities on a real Lease; the leader is SIGKILLed mid-run.
//! Judged by the audit log: every gate removed exactly once, and each pod write came from the
//! replica that held the Lease at that time.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::gates::{assert_no_denied, cleanup};
use crate::testbed::*;

pub async fn leader_killed_every_gate_bypassed_once(tb: Arc<Testbed>) {
    let ns = "replicas";
    tb.namespace(ns);
    let gate = "deadline.example.com";
    let config = format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, leaseDuration: 3s }}\n\
         initializers:\n  - {{ name: {gate}, deadline: 1s }}\n"
    );
    let a = tb.guard("replica-a", "initguard", &config).await;
    let b = tb.guard("replica-b", "initguard-2", &config).await;
    let holder = eventually("a holder of Lease kube-system/initguard", || {
        let lease = tb.get("lease", "kube-system", "initguard")?;
        lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
    })
    .await;
    let (leader, survivor, leader_user, survivor_user) = if holder.starts_with("replica-a_") {
        (a, b, GUARD_USER, GUARD_USER_2)
    } else {
        assert!(holder.starts_with("replica-b_"), "holder {holder:?}");
        (b, a, GUARD_USER_2, GUARD_USER)
    };

    let first: Vec<String> = (0..5).map(|i| format!("first-{i}")).collect();
    let second: Vec<String> = (0..5).map(|i| format!("second-{i}")).collect();
    for n in &first {
        tb.gated_pod(ns, n, true, &[gate]);
    }
    for n in &first {
        eventually(format!("{n} bypassed"), || {
            tb.gates(ns, n).is_empty().then_some(())
        })
        .await;
    }
    leader.kill();
    for n in &second {
        tb.gated_pod(ns, n, true, &[gate]);
    }
    for n in &second {
        eventually(format!("{n} bypassed after the failover"), || {
            tb.gates(ns, n).is_empty().then_some(())
        })
        .await;
    }
    survivor.stop();

    let audit = tb.audit();
    let pod_writes = guard_pod_writes_by_lease_holders(&audit, ("kube-system", "initguard"), ns);
    for w in &pod_writes {
        assert!(w.ok() && w.verb == "patch", "{w:#?}");
    }
    for n in first.iter().chain(&second) {
        let writes: Vec<&&Audit> = pod_writes.iter().filter(|w| &w.name == n).collect();
        assert_eq!(
            writes.len(),
            1,
            "{n} written {} times: {writes:#?}",
            writes.len()
        );
    }
    let users = |names: &[String]| -> BTreeSet<&str> {
        pod_writes
            .iter()
            .filter(|w| names.contains(&w.name))
            .map(|w| w.user.as_str())
            .collect()
    };
    assert_eq!(users(&first), BTreeSet::from([leader_user]));
    assert_eq!(users(&second), BTreeSet::from([survivor_user]));
    assert_no_denied(&tb);
    cleanup(&tb, ns);
}
