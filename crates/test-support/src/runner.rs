//! The runner of the real-cluster targets (`harness = false`): one test bed of one version
//! for every chosen scenario, scenarios one after another, each with a timeout, `down` at the
//! end (and from a watchdog should the process die). Arguments are read as libtest reads them
//! ([`crate::harness_args`]). When every scenario ran and passed, the audit log of the whole
//! run judges the shipped RBAC manifests ([`crate::rbac`]).

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::rbac::{self, Request};
use crate::testbed::{self, Testbed, Version};

/// One scenario: it runs on the shared test bed and panics on failure.
pub type Scenario = fn(Arc<Testbed>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The least-privilege judge's name in the run's report; it runs after every scenario passed.
const JUDGE: &str = "least_privilege::shipped_rbac_is_exactly_what_the_guard_used";

/// Seconds after a restarted kube-apiserver is healthy during which its refusals are not
/// judged: its authorizer may still be syncing.
const AUTHORIZER_SYNC: i64 = 5;

/// Longest a scenario may run before it fails as hung.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(300);

/// Run the `scenarios` that the command line chooses on a test bed of `version`, with
/// `guard_bin` as the `initguard` binary under test. `target` names the test target in
/// messages. Without a built test bed the scenarios skip, unless `CI` is set: then it fails.
/// `refused_on_purpose` names the guard's requests that a scenario makes the server refuse
/// (403) by withdrawing a grant; any other refusal fails the least-privilege judge.
pub fn run(
    target: &str,
    version: Version,
    scenarios: &[(&str, Scenario)],
    guard_bin: &str,
    refused_on_purpose: fn(&Request) -> bool,
) -> ExitCode {
    run_bed(
        target,
        version,
        false,
        scenarios,
        guard_bin,
        refused_on_purpose,
    )
}

/// The host check's name in a node run's report: it runs after `down`.
const HOST_CHECK: &str = "host::down_leaves_the_host_as_it_was";

/// [`run`] on a test bed with a real node (`tests/testbed/up --node`): it needs root and the
/// node's Debian packages (a missing one skips, or fails with `CI` set). After `down`, the
/// host is compared with a snapshot taken before `up` ([`crate::host`]): anything the node
/// bed left behind fails the run. The least-privilege judge does not run: it needs the whole
/// suite's use of the shipped RBAC, which `real_cluster`'s run gives.
pub fn run_node(
    target: &str,
    version: Version,
    scenarios: &[(&str, Scenario)],
    guard_bin: &str,
    refused_on_purpose: fn(&Request) -> bool,
) -> ExitCode {
    run_bed(
        target,
        version,
        true,
        scenarios,
        guard_bin,
        refused_on_purpose,
    )
}

fn run_bed(
    target: &str,
    version: Version,
    node: bool,
    scenarios: &[(&str, Scenario)],
    guard_bin: &str,
    refused_on_purpose: fn(&Request) -> bool,
) -> ExitCode {
    let args = match crate::harness_args::HarnessArgs::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{target}: {e}");
            return ExitCode::from(2);
        }
    };
    let chosen: Vec<&(&str, Scenario)> = scenarios
        .iter()
        .filter(|(name, _)| args.chooses(name))
        .collect();
    // The judge needs the audit log of every scenario (of real_cluster: a node run uses too
    // little of the guard's grants to judge them).
    let every = chosen.len() == scenarios.len();
    let judge = every && !node;
    if args.list {
        for (name, _) in &chosen {
            println!("{name}: test");
        }
        if judge {
            println!("{JUDGE}: test");
        }
        if node {
            println!("{HOST_CHECK}: test");
        }
        return ExitCode::SUCCESS;
    }
    if chosen.is_empty() {
        println!("{target}: no scenario matches {args:?}");
        return ExitCode::SUCCESS;
    }
    let missing = testbed::not_built_version(version).or_else(|| {
        node.then(testbed::node_missing)
            .flatten()
            .map(|why| format!("a node bed cannot run here: {why}"))
    });
    if let Some(why) = missing {
        if std::env::var_os("CI").is_some() {
            eprintln!("{target}: FAILED: CI is set and the test bed is not built: {why}");
            return ExitCode::FAILURE;
        }
        for (name, _) in &chosen {
            println!("SKIPPED {target}::{name}: test bed not built ({why})");
        }
        return ExitCode::SUCCESS;
    }

    println!("\nrunning {} {target} scenarios", chosen.len());
    let before = if node {
        match crate::host::Snapshot::take() {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("{target}: FAILED to read the host before the test bed: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let started = Instant::now();
    let up = if node {
        Testbed::up_node(guard_bin, version)
    } else {
        Testbed::up_version(guard_bin, version)
    };
    let tb = match up {
        Ok(tb) => Arc::new(tb),
        Err(e) => {
            eprintln!("{target}: FAILED to start the test bed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("test bed up in {:.1}s", started.elapsed().as_secs_f64());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{target}: cannot build a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = Vec::new();
    for (name, scenario) in chosen {
        // For the suite's watchdog (crate::watchdog), which kills a scenario that hangs past
        // its limit even where this runtime's own timeout cannot fire.
        println!("test {name} ... started");
        tb.begin_scenario();
        let t = Instant::now();
        let result = runtime.block_on(async {
            // A panic inside a scenario is caught by its task; a hang by the timeout.
            let task = tokio::spawn(tokio::time::timeout(SCENARIO_TIMEOUT, scenario(tb.clone())));
            match task.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(_)) => Err(format!("hung for over {SCENARIO_TIMEOUT:?}")),
                Err(e) if e.is_panic() => Err("panicked (message above)".to_owned()),
                Err(e) => Err(format!("task failed: {e}")),
            }
        });
        let secs = t.elapsed().as_secs_f64();
        match result {
            Ok(()) => println!("test {name} ... ok ({secs:.1}s)"),
            Err(e) => {
                println!("test {name} ... FAILED ({secs:.1}s): {e}");
                failed.push(*name);
            }
        }
    }
    if node {
        // Not a skip: this target never runs the judge (run_node).
    } else if !every {
        // tests/all sums up the SKIPPED lines: a filtered run leaves the judge out.
        println!(
            "test {JUDGE} ... SKIPPED {target}::{JUDGE}: it judges the audit log of every \
             scenario, and the filter chose some"
        );
    } else if !failed.is_empty() {
        println!("test {JUDGE} ... not run: a scenario failed");
    } else {
        // A restarted kube-apiserver answers before its RBAC authorizer has synced and
        // refuses meanwhile: its 403s until a few seconds after it is healthy again say
        // nothing about the manifests.
        let restarts = tb.apiserver_restarts();
        let syncing = |a: &testbed::Audit| {
            let t = testbed::timestamp(&a.received);
            restarts.iter().any(|(killed, healthy)| {
                *killed <= t && t <= *healthy + jiff::SignedDuration::from_secs(AUTHORIZER_SYNC)
            })
        };
        let audit: Vec<testbed::Audit> = tb
            .audit()
            .into_iter()
            .filter(|a| !(a.code == 403 && syncing(a)))
            .collect();
        let judged = std::panic::catch_unwind(|| {
            rbac::assert_least_privilege(&testbed::repo(), &audit, version, &refused_on_purpose)
        });
        match judged {
            Ok(()) => println!("test {JUDGE} ... ok"),
            Err(_) => {
                println!("test {JUDGE} ... FAILED (message above)");
                failed.push(JUDGE);
            }
        }
    }
    // Dropping the runtime drops every task and so every other handle on the test bed; the
    // last handle runs `down`.
    drop(runtime);
    tb.failed.store(!failed.is_empty(), Ordering::Relaxed);
    drop(tb);
    if let Some(before) = before {
        match crate::host::Snapshot::take() {
            Ok(after) => {
                let diff = before.diff(&after);
                if diff.is_empty() {
                    println!("test {HOST_CHECK} ... ok");
                } else {
                    println!(
                        "test {HOST_CHECK} ... FAILED: the host differs after down:\n  {}",
                        diff.join("\n  ")
                    );
                    failed.push(HOST_CHECK);
                }
            }
            Err(e) => {
                println!("test {HOST_CHECK} ... FAILED: cannot read the host after down: {e}");
                failed.push(HOST_CHECK);
            }
        }
    }
    println!(
        "\n{target}: {} failed of the chosen scenarios, {:.1}s in all{}",
        failed.len(),
        started.elapsed().as_secs_f64(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(": {failed:?}")
        }
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
