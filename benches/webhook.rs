//! The webhook guard against the real API server (tests/testbed/), the figures of
//! benches/RESULTS.md section 7: a real HTTPS admission webhook with `failurePolicy: Fail`,
//! owned by a Lease (5 s) that stops being renewed when the webhook server dies.
//!
//! * death → admitted: from the webhook server's death to the first opted-in pod create the API
//!   server admits (a client retries as fast as kubectl goes), and the guard's own part of it:
//!   its patch's arrival minus the earliest instant it may bypass (last renewal + lease
//!   duration + `ownerDownGrace`, here 0 s);
//! * return → restored: from the owner's first renewal after the webhook is back to the restore
//!   patch, with `restoreGrace` 0 s;
//! * a frozen backend (the port accepts, nothing answers) whose Lease stays renewed: freeze →
//!   admitted with an `apiserver` (canary) owner, and the Lease owner, which never sees it.
//!
//! Times are the API server's (audit log `requestReceivedTimestamp`) except the death, taken on
//! the same machine's clock when the server has closed its port. Prints Markdown on stdout.
//! Usage: `cargo bench --bench webhook -- [--runs N]`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use initguard_test_support::testbed::{
    self, GUARD_USER, OPT_IN, OWNER_LEASE_SECONDS, Testbed, eventually, timestamp,
};
use initguard_test_support::webhook::{Bed, create_pod, get_configuration};

struct Measured {
    death_to_admitted: Duration,
    guard_bypass: Duration,
    return_to_restored: Duration,
}

fn main() -> ExitCode {
    let mut runs = 5;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) if n > 0 => runs = n,
                _ => {
                    eprintln!("webhook: --runs takes a number of at least 1");
                    return ExitCode::from(2);
                }
            },
            // cargo bench passes --bench.
            "--bench" => {}
            other => {
                eprintln!("webhook: unknown argument {other:?}; usage: --runs N");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(why) = testbed::not_built() {
        eprintln!("webhook: the test bed is not built: {why}");
        return ExitCode::FAILURE;
    }
    let tb = match Testbed::up(env!("CARGO_BIN_EXE_initguard")) {
        Ok(tb) => Arc::new(tb),
        Err(e) => {
            eprintln!("webhook: cannot start the test bed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("webhook: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("## 7. Admission webhooks: a dead backend, against the real API server\n");
    println!(
        "Lease {OWNER_LEASE_SECONDS} s, `ownerDownGrace: 0s`, `restoreGrace: 0s`; {runs} runs per \
         bypass path.\n"
    );
    println!(
        "| bypassVia | death → opted-in pod admitted | of which the guard (after the lease ran out) | owner back → restored |"
    );
    println!("| --- | --- | --- | --- |");
    for via in ["auto", "selectors"] {
        let mut all = Vec::new();
        for run in 0..runs {
            let measured = runtime.block_on(measure(tb.clone(), via, run));
            eprintln!(
                "webhook: {via} run {run}: {:?} / {:?} / {:?}",
                measured.death_to_admitted, measured.guard_bypass, measured.return_to_restored
            );
            all.push(measured);
        }
        let summary = |f: fn(&Measured) -> Duration| {
            let mut v: Vec<Duration> = all.iter().map(f).collect();
            v.sort();
            format!(
                "median {} (min {}, max {})",
                ms(v[v.len() / 2]),
                ms(v[0]),
                ms(v[v.len() - 1])
            )
        };
        println!(
            "| {via} | {} | {} | {} |",
            summary(|m| m.death_to_admitted),
            summary(|m| m.guard_bypass),
            summary(|m| m.return_to_restored)
        );
    }
    println!(
        "\n### A backend that is Ready but does not answer (frozen: its port accepts, nothing \
         replies)\n"
    );
    println!(
        "The owner beside it stays up: a Lease renewed as Ready endpoints would be. Canary every \
         1 s, the entry's `timeoutSeconds` 5 s, `ownerDownGrace: 0s`; {runs} runs.\n"
    );
    println!("| owner | freeze → bypass PATCH | freeze → opted-in pod admitted |");
    println!("| --- | --- | --- |");
    let (mut bypassed, mut admitted) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let took = runtime.block_on(frozen(tb.clone(), Owner::Canary, run));
        eprintln!("webhook: frozen, canary, run {run}: {took:?}");
        if let Some((b, a)) = took {
            bypassed.push(b);
            admitted.push(a);
        }
    }
    let summary = |mut v: Vec<Duration>| {
        v.sort();
        match (v.first(), v.last()) {
            (Some(min), Some(max)) => format!(
                "median {} (min {}, max {})",
                ms(v[v.len() / 2]),
                ms(*min),
                ms(*max)
            ),
            _ => "never".to_owned(),
        }
    };
    println!(
        "| `apiserver` (canary) | {} | {} |",
        summary(bypassed),
        summary(admitted)
    );
    let never = format!(
        "never: not within {} s, the owner stays up",
        FROZEN_WATCH.as_secs()
    );
    match runtime.block_on(frozen(tb.clone(), Owner::Renewed, 0)) {
        Some((b, a)) => println!(
            "| `lease` (renewed; endpoints alike) | {} (unexpected) | {} (unexpected) |",
            ms(b),
            ms(a)
        ),
        None => println!("| `lease` (renewed; endpoints alike) | {never} | {never} |"),
    }
    drop(runtime);
    ExitCode::SUCCESS
}

/// How long the renewed owner's run watches for a bypass that must not come.
const FROZEN_WATCH: Duration = Duration::from_secs(30);

#[derive(Clone, Copy)]
enum Owner {
    Canary,
    Renewed,
}

/// Freeze the backend while its Lease keeps being renewed; with `Owner::Canary` the guard's
/// owner is a canary, with `Owner::Renewed` the Lease. The times from the freeze to the bypass
/// PATCH and to the first opted-in create the API server admits (audit log), or None when no
/// create is admitted within [`FROZEN_WATCH`]. (A create sent before the bypass waits for the
/// webhook's timeout: the second figure includes the client's own wait.)
async fn frozen(tb: Arc<Testbed>, owner: Owner, run: usize) -> Option<(Duration, Duration)> {
    let prefix = format!(
        "bf{}{run}",
        match owner {
            Owner::Canary => "c",
            Owner::Renewed => "l",
        }
    );
    let bed = Bed::new(tb.clone(), &prefix).await;
    let (apps, system, name) = (bed.apps.clone(), bed.system.clone(), bed.name.clone());
    let canary_ns = format!("{prefix}-canary");
    tb.namespace(&canary_ns);
    tb.kubectl(&[
        "label",
        "namespace",
        &canary_ns,
        &format!("webhook-test={prefix}"),
    ]);
    tb.kubectl(&[
        "create",
        "role",
        "canary",
        "-n",
        &canary_ns,
        "--verb=create",
        "--resource=pods",
    ]);
    tb.kubectl(&[
        "create",
        "rolebinding",
        "canary",
        "-n",
        &canary_ns,
        "--role=canary",
        &format!("--user={GUARD_USER}"),
    ]);
    let owner_line = match owner {
        Owner::Canary => {
            format!("{{ apiserver: {{ namespace: {canary_ns}, resource: pods, interval: 1s }} }}")
        }
        Owner::Renewed => format!("{{ lease: {system}/policy-webhook }}"),
    };
    let config = format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: false }}\n\
         webhooks:\n\
         \x20 - name: validating/{name}/pods.policy.example.com\n\
         \x20   owner: {owner_line}\n\
         \x20   ownerDownGrace: 0s\n\
         \x20   restoreGrace: 0s\n"
    );
    let guard = tb.guard(&prefix, "initguard", &config).await;
    // Up first, as seen by the guard: a canary admitted.
    if let Owner::Canary = owner {
        eventually("the canary to reach the webhook", || {
            tb.audit()
                .iter()
                .any(|a| a.user == GUARD_USER && a.namespace == canary_ns && a.ok())
                .then_some(())
        })
        .await;
    }
    bed.server.freeze();
    let frozen_at = jiff::Timestamp::now();
    let started = std::time::Instant::now();
    let mut attempt = 0;
    let admitted = loop {
        attempt += 1;
        let pod = format!("p-{attempt}");
        if create_pod(&tb, &apps, &pod, true).is_ok() {
            break Some(pod);
        }
        if started.elapsed() > FROZEN_WATCH {
            break None;
        }
    };
    let took = admitted.map(|pod| {
        let audit = tb.audit();
        let bypass = audit
            .iter()
            .find(|a| a.user == GUARD_USER && a.verb == "patch" && a.name == name && a.ok())
            .map(|a| timestamp(&a.received))
            .unwrap_or_else(|| panic!("no bypass patch"));
        let at = audit
            .iter()
            .find(|a| {
                a.resource == "pods"
                    && a.verb == "create"
                    && a.namespace == apps
                    && a.ok()
                    && a.request["metadata"]["name"] == pod.as_str()
            })
            .map(|a| timestamp(&a.received))
            .unwrap_or_else(|| panic!("no admitted create of {pod} in the audit log"));
        (between(frozen_at, bypass), between(frozen_at, at))
    });
    bed.server.thaw();
    guard.stop();
    tb.kubectl(&["delete", "namespace", &canary_ns, "--wait=false"]);
    bed.cleanup();
    took
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn between(from: jiff::Timestamp, to: jiff::Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or_default()
}

async fn measure(tb: Arc<Testbed>, via: &str, run: usize) -> Measured {
    let prefix = format!("bw{}{run}", if via == "auto" { "m" } else { "s" });
    let mut bed = Bed::new(tb.clone(), &prefix).await;
    let (apps, system, name) = (bed.apps.clone(), bed.system.clone(), bed.name.clone());
    let config = format!(
        "mechanism: schedulingGates\noptIn: {{ label: {OPT_IN} }}\n\
         leaderElection: {{ enabled: false }}\n\
         webhooks:\n\
         \x20 - name: validating/{name}/pods.policy.example.com\n\
         \x20   owner: {{ lease: {system}/policy-webhook }}\n\
         \x20   ownerDownGrace: 0s\n\
         \x20   restoreGrace: 0s\n\
         \x20   bypassVia: {via}\n"
    );
    let guard = tb.guard(&prefix, "initguard", &config).await;

    bed.server.stop().await;
    let death = jiff::Timestamp::now();
    let last_renewal = bed.lease.kill(&tb);
    let mut attempt = 0;
    let admitted_name = eventually("an opted-in pod admitted", || {
        attempt += 1;
        let pod = format!("p-{attempt}");
        create_pod(&tb, &apps, &pod, true).ok().map(|()| pod)
    })
    .await;
    let audit = tb.audit();
    let admitted = audit
        .iter()
        .find(|a| {
            a.resource == "pods"
                && a.verb == "create"
                && a.namespace == apps
                && a.ok()
                && a.request["metadata"]["name"] == admitted_name.as_str()
        })
        .map(|a| timestamp(&a.received))
        .unwrap_or_else(|| panic!("no admitted create of {admitted_name} in the audit log"));
    let bypass = audit
        .iter()
        .find(|a| a.user == GUARD_USER && a.verb == "patch" && a.name == name && a.ok())
        .map(|a| timestamp(&a.received))
        .unwrap_or_else(|| panic!("no bypass patch"));
    let may_bypass = last_renewal + jiff::SignedDuration::from_secs(OWNER_LEASE_SECONDS as i64);

    bed.revive_owner();
    eventually("the configuration restored", || {
        let now = get_configuration(&tb, &name);
        now["metadata"]["annotations"]
            .get("initguard.io/bypassed-webhooks")
            .is_none()
            .then_some(())
    })
    .await;
    let audit = tb.audit();
    let back = audit
        .iter()
        .filter(|a| a.resource == "leases" && a.namespace == system && a.is_write() && a.ok())
        .map(|a| timestamp(&a.received))
        .filter(|t| *t > bypass)
        .min()
        .unwrap_or_else(|| panic!("no renewal after the revival"));
    let restored = audit
        .iter()
        .filter(|a| a.user == GUARD_USER && a.verb == "patch" && a.name == name && a.ok())
        .map(|a| timestamp(&a.received))
        .max()
        .unwrap_or_else(|| panic!("no restore patch"));
    guard.stop();
    bed.cleanup();
    Measured {
        death_to_admitted: between(death, admitted),
        guard_bypass: between(may_bypass, bypass),
        return_to_restored: between(back, restored),
    }
}
