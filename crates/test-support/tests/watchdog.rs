//! `test-watchdog` on a real libtest binary: this one, whose `hangs_on_purpose` hangs (with
//! a child process of its own) when the test below asks it to.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use initguard_test_support::wait::PATIENCE;
use initguard_test_support::watchdog;

const HANG: &str = "INITGUARD_WATCHDOG_SELF_TEST_PIDFILE";
const LEAVE: &str = "INITGUARD_WATCHDOG_SELF_TEST_LEFT_PIDFILE";

/// Hangs forever when `HANG` names a file (where it writes the pid of a child it started);
/// passes at once otherwise, so that a run with `--include-ignored` is not held up.
#[test]
#[ignore = "hangs on purpose: the watchdog's test runs it"]
fn hangs_on_purpose() {
    let Some(pidfile) = std::env::var_os(HANG) else {
        return;
    };
    let mut child = Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("sleep runs");
    std::fs::write(pidfile, child.id().to_string()).expect("pid file written");
    // Never returns: the watchdog kills this process, then the sleep.
    let _ = child.wait();
    loop {
        std::thread::park();
    }
}

/// Passes, leaving behind a process that holds this binary's standard output open, when
/// `LEAVE` names a file (where it writes that process's pid).
#[test]
#[ignore = "leaves a process behind on purpose: the watchdog's test runs it"]
fn leaves_a_process_on_its_stdout() {
    let Some(pidfile) = std::env::var_os(LEAVE) else {
        return;
    };
    let child = Command::new("sleep")
        .arg("600")
        .stdout(Stdio::inherit())
        .spawn()
        .expect("sleep runs");
    std::fs::write(pidfile, child.id().to_string()).expect("pid file written");
    std::mem::forget(child);
}

/// Passes at once: the watchdog must pass a passing run through unchanged.
#[test]
fn passes_at_once() {}

/// Run `test-watchdog` on this binary with `args`; its exit code, stdout and stderr. The run
/// has its own limit, so that a watchdog that never acts fails this test instead of hanging it.
fn watched(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_test-watchdog"))
        .arg(std::env::current_exe().expect("this test binary"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("test-watchdog runs");
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).expect("stdout read");
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).expect("stderr read");
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("test-watchdog waited for") {
            break status;
        }
        if started.elapsed() > PATIENCE * 2 {
            let _ = child.kill();
            panic!("test-watchdog still running after {:?}", PATIENCE * 2);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (
        status.code(),
        out.join().expect("stdout"),
        err.join().expect("stderr"),
    )
}

#[test]
fn a_hung_test_is_killed_with_its_name_a_thread_dump_and_its_children() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("child.pid");
    let pidfile_str = pidfile.to_str().expect("utf-8 path");
    let (code, out, err) = watched(
        &[
            "hangs_on_purpose",
            "--exact",
            "--include-ignored",
            "--test-threads=1",
        ],
        &[
            (HANG, pidfile_str),
            ("INITGUARD_TEST_TIMEOUT", "2"),
            ("INITGUARD_TEST_KILL_GRACE", "1"),
        ],
    );
    assert_eq!(code, Some(101), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("test hangs_on_purpose ... "),
        "libtest's output passed through: {out}"
    );
    assert!(
        err.contains(&format!(
            "{} test hangs_on_purpose (ran ",
            watchdog::TIMED_OUT
        )),
        "{err}"
    );
    assert!(err.contains("past the limit of 2s"), "{err}");
    // gdb names the parked test thread; without gdb the kernel's view names it too.
    assert!(
        err.contains("hangs_on_purpose") && err.contains("thread dump of pid"),
        "{err}"
    );
    assert!(
        err.contains("Thread ") || err.contains("the kernel's view"),
        "a dump: {err}"
    );
    let child: u32 = std::fs::read_to_string(&pidfile)
        .expect("the hung test wrote its child's pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(
        !watchdog::alive(child),
        "the hung test's child process {child} is left running"
    );
}

#[test]
fn a_passing_run_passes_through_with_its_exit_code() {
    let (code, out, err) = watched(&["passes_at_once", "--exact"], &[]);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("test passes_at_once ... ok"), "{out}");
    assert!(out.contains("test result: ok. 1 passed"), "{out}");
    assert!(!err.contains(watchdog::TIMED_OUT), "{err}");
}

#[test]
fn a_bad_limit_is_refused_with_its_name() {
    let (code, _, err) = watched(
        &["passes_at_once", "--exact"],
        &[("INITGUARD_TEST_TIMEOUT", "soon")],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("INITGUARD_TEST_TIMEOUT=\"soon\""), "{err}");
}

/// A binary that exits while a process it left holds its pipes is done when it exits, as
/// cargo sees it, not when the pipes close: the watchdog returns its exit code, without waiting
/// (the quiet limit, 20 minutes, would otherwise end this test's own limit first).
#[test]
fn a_binary_is_done_when_it_exits_whatever_holds_its_pipes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("left.pid");
    let (code, out, err) = watched(
        &[
            "leaves_a_process_on_its_stdout",
            "--exact",
            "--include-ignored",
        ],
        &[(LEAVE, pidfile.to_str().expect("utf-8 path"))],
    );
    let left: Option<i32> = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|p| p.trim().parse().ok());
    if let Some(pid) = left {
        // SAFETY: kill(2) of the process this test's binary left; no memory is touched.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(left.is_some(), "the test left no process: {out}");
    assert!(out.contains("test result: ok. 1 passed"), "{out}");
}
