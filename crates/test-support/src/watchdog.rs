//! The suite's hard per-test timeout, outside the process under test (`test-watchdog`, the
//! cargo runner `tests/all` sets): a test whose own runtime is starved cannot time itself out,
//! so a separate process reads the test binary's output, knows which tests run since when,
//! and kills a binary whose test has run past the limit — after printing the test's name, a
//! thread dump and the binary's last lines.
//!
//! Not cargo-nextest: its process per test would start a test bed per real-cluster scenario,
//! where one bed serves a whole target. The runner here keeps libtest's one process per
//! binary and reads what libtest already prints:
//!
//! * run in parallel (the default), libtest names a test only when it ends, or once it has run
//!   for 60 s (`test NAME has been running for over 60 seconds`): its start is dated then;
//! * run one at a time (`--test-threads=1`), it prints `test NAME ... ` as the test starts;
//! * the real-cluster runner ([`crate::runner`]) prints `test NAME ... started` before each
//!   scenario.
//!
//! A binary that prints nothing for the quiet limit with no test known to run (a hang outside
//! any test, such as a test bed that never comes up) is killed the same way.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The per-test limit unless `INITGUARD_TEST_TIMEOUT` (seconds) says otherwise: above the
/// real-cluster runner's own 300 s per scenario, so that its report comes first.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(900);

/// How long a binary may print nothing while no test is known to run, unless
/// `INITGUARD_TEST_QUIET_TIMEOUT` (seconds) says otherwise.
pub const QUIET_TIMEOUT: Duration = Duration::from_secs(1200);

/// The marker `tests/all` sums up: one line per test the watchdog stopped.
pub const TIMED_OUT: &str = "TIMED OUT";

/// Which tests of one binary are running, and since when, read from its standard output.
#[derive(Debug, Default)]
pub struct Running {
    started: BTreeMap<String, Instant>,
    /// The test a one-at-a-time run announced last: it ends when the next one starts.
    current: Option<String>,
    /// The line read so far, up to its newline.
    partial: Vec<u8>,
}

impl Running {
    /// Take in `bytes` of the binary's standard output, read at `now`.
    pub fn feed(&mut self, bytes: &[u8], now: Instant) {
        for &b in bytes {
            if b == b'\n' {
                let line = String::from_utf8_lossy(&self.partial).into_owned();
                self.partial.clear();
                self.line(line.trim_end_matches('\r'), now);
            } else {
                self.partial.push(b);
            }
        }
        // A one-at-a-time run names its test on a line it ends only with the result.
        if let Some(name) = std::str::from_utf8(&self.partial)
            .ok()
            .and_then(|p| p.strip_prefix("test "))
            .and_then(|p| p.strip_suffix(" ... "))
            .map(str::to_owned)
        {
            self.start(name, now);
        }
    }

    fn line(&mut self, line: &str, now: Instant) {
        if line.starts_with("test result: ") {
            self.started.clear();
            self.current = None;
            return;
        }
        let Some(rest) = line.strip_prefix("test ") else {
            return;
        };
        if let Some((name, secs)) = rest
            .strip_suffix(" seconds")
            .and_then(|r| r.split_once(" has been running for over "))
        {
            let ran = secs.parse().map(Duration::from_secs).unwrap_or_default();
            let since = now.checked_sub(ran).unwrap_or(now);
            self.started.entry(name.to_owned()).or_insert(since);
            return;
        }
        let Some((name, status)) = rest.split_once(" ... ") else {
            return;
        };
        if status == "started" {
            self.start(name.to_owned(), now);
        } else if !status.is_empty() {
            self.started.remove(name);
            if self.current.as_deref() == Some(name) {
                self.current = None;
            }
        }
    }

    fn start(&mut self, name: String, now: Instant) {
        if self.current.as_ref() == Some(&name) {
            return;
        }
        if let Some(previous) = self.current.take() {
            self.started.remove(&previous);
        }
        self.started.entry(name.clone()).or_insert(now);
        self.current = Some(name);
    }

    /// The tests known to run, longest first, with how long each has run at `now`.
    pub fn running(&self, now: Instant) -> Vec<(String, Duration)> {
        let mut running: Vec<(String, Duration)> = self
            .started
            .iter()
            .map(|(name, since)| (name.clone(), now.saturating_duration_since(*since)))
            .collect();
        running.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        running
    }

    /// The first test past `limit` at `now`, if any.
    pub fn overdue(&self, now: Instant, limit: Duration) -> Option<(String, Duration)> {
        self.running(now).into_iter().find(|(_, ran)| *ran > limit)
    }
}

/// The process ids below `root` (children, theirs, …), read from `/proc`: taken before the
/// root is killed, so that orphans re-parented to init are still known.
pub fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// The parent of `pid` (`/proc/PID/stat`'s fourth field, after the parenthesised name, which
/// may itself hold spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Whether `pid` still exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next())
        })
        .flatten()
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// Each thread of `pid` with its name, state and kernel wait channel, from `/proc`: the dump
/// when no debugger can attach.
pub fn proc_threads(pid: u32) -> String {
    let mut out = String::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten();
    for task in tasks {
        let path = task.path();
        let read = |f: &str| {
            std::fs::read_to_string(path.join(f))
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|e| format!("({e})"))
        };
        let state = read("stat")
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next().map(str::to_owned))
            .unwrap_or_default();
        out.push_str(&format!(
            "thread {} {:?}: state {state}, waiting in {}\n",
            task.file_name().to_string_lossy(),
            read("comm"),
            read("wchan"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, secs: u64) -> Instant {
        base + Duration::from_secs(secs)
    }

    #[test]
    fn a_parallel_test_is_dated_from_libtests_warning_and_ends_with_its_result() {
        let t0 = Instant::now();
        let mut r = Running::default();
        r.feed(b"\nrunning 3 tests\ntest a::fast ... ok\n", at(t0, 1));
        assert!(
            r.running(at(t0, 1)).is_empty(),
            "a finished test is not running"
        );
        r.feed(
            b"test a::slow has been running for over 60 seconds\n",
            at(t0, 60),
        );
        assert_eq!(
            r.running(at(t0, 100)),
            [("a::slow".to_owned(), Duration::from_secs(100))],
            "dated 60 s before the warning"
        );
        assert_eq!(r.overdue(at(t0, 100), Duration::from_secs(120)), None);
        assert_eq!(
            r.overdue(at(t0, 121), Duration::from_secs(120)),
            Some(("a::slow".to_owned(), Duration::from_secs(121)))
        );
        r.feed(b"test a::slow ... FAILED\n", at(t0, 122));
        assert!(r.running(at(t0, 122)).is_empty());
    }

    #[test]
    fn a_one_at_a_time_test_starts_on_its_unfinished_line() {
        let t0 = Instant::now();
        let mut r = Running::default();
        r.feed(b"test x::first ... ", t0);
        assert_eq!(
            r.running(at(t0, 5)),
            [("x::first".into(), Duration::from_secs(5))]
        );
        // Captured output off (--nocapture): the result comes on a line of its own.
        r.feed(b"some output\nok\ntest x::second ... ", at(t0, 7));
        assert_eq!(
            r.running(at(t0, 8)),
            [("x::second".into(), Duration::from_secs(1))],
            "the next test's start ends the one before"
        );
        r.feed(b"ok\n\ntest result: ok. 2 passed\n", at(t0, 9));
        assert!(r.running(at(t0, 9)).is_empty());
    }

    #[test]
    fn the_real_cluster_runner_announces_each_scenario() {
        let t0 = Instant::now();
        let mut r = Running::default();
        r.feed(b"test gates::one ... started\n", t0);
        assert_eq!(r.running(at(t0, 2)).len(), 1);
        r.feed(b"test gates::one ... ok (3.1s)\n", at(t0, 3));
        r.feed(b"test gates::two ... started\r\n", at(t0, 4));
        r.feed(b"test gates::two ... FAILED (1.0s): hung\n", at(t0, 5));
        r.feed(b"test judge ... not run: a scenario failed\n", at(t0, 5));
        assert!(r.running(at(t0, 6)).is_empty());
    }

    #[test]
    fn other_lines_that_start_with_test_change_nothing() {
        let t0 = Instant::now();
        let mut r = Running::default();
        r.feed(b"test bed up in 6.1s\ntest ... \ntesting\n", t0);
        assert!(r.running(at(t0, 1)).is_empty());
    }

    #[test]
    fn descendants_of_this_process_include_a_child_and_alive_sees_it_end() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        assert!(descendants(std::process::id()).contains(&pid));
        assert!(alive(pid));
        child.kill().expect("kill");
        child.wait().expect("reaped");
        assert!(!alive(pid));
        assert!(!descendants(std::process::id()).contains(&pid));
        assert!(proc_threads(std::process::id()).contains("state "));
    }
}
