//! Two replicas with their own identities on a real Lease; the leader is SIGKILLed mid-run.
//! Judged by the audit log: every gate removed exactly once, and each pod write came from the
//! replica that held the Lease at that time.

use std::sync::Arc;

use crate::gates::{assert_no_denied, cleanup};
use crate::testbed::*;

pub(crate) async fn leader_killed_every_gate_bypassed_once(tb: Arc<Testbed>) {
    let ns = "replicas";
    tb.namespace(ns);
    let gate = "deadline.example.com";
    let config = format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: true, namespace: kube-system, name: initguard, leaseDuration: 3s }}\n\
         initializers:\n  - {{ name: {gate}, deadline: 1s }}\n"
    );
    let Replicas {
        leader,
        survivor,
        leader_user,
        survivor_user,
    } = two_replicas(&tb, "replica", &config).await;

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

    assert_failover_written_once(
        &tb.audit(),
        ns,
        (&first, &second),
        (leader_user, survivor_user),
    );
    assert_no_denied(&tb);
    cleanup(&tb, ns);
}
