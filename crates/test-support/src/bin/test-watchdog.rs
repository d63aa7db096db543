//! `test-watchdog BINARY [ARGS…]`: runs a test binary (as cargo's runner: `tests/all` sets
//! `CARGO_TARGET_<host>_RUNNER`) and kills it when one of its tests runs past
//! `INITGUARD_TEST_TIMEOUT` seconds, or when it prints nothing for
//! `INITGUARD_TEST_QUIET_TIMEOUT` seconds with no test known to run. Before the kill it prints
//! the test's name, a thread dump (gdb, else `/proc`) and the binary's last lines; after it,
//! whatever the binary started is given `INITGUARD_TEST_KILL_GRACE` seconds (60) to stop, and
//! is killed then. See `initguard_test_support::watchdog`.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use initguard_test_support::watchdog::{self, Running};

/// The binary's last lines printed with a timeout.
const TAIL_LINES: usize = 60;
/// How long the binary's pipes are still read after it exited.
const PIPE_DRAIN: Duration = Duration::from_secs(2);
/// How long the debugger may take for its dump.
const DUMP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long what the binary started may take to stop after it is killed (the test bed's own
/// watchdog runs `down` then), unless `INITGUARD_TEST_KILL_GRACE` (seconds) says otherwise.
const KILL_GRACE: Duration = Duration::from_secs(60);

enum Out {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Closed,
}

fn seconds_from_env(var: &str, default: Duration) -> Result<Duration, String> {
    match std::env::var(var) {
        Err(_) => Ok(default),
        Ok(v) => v
            .parse::<u64>()
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{var}={v:?}: expected a whole number of seconds above 0")),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(binary) = args.next() else {
        eprintln!("usage: test-watchdog BINARY [ARGS...]");
        return ExitCode::from(2);
    };
    let limits = (|| {
        Ok::<_, String>((
            seconds_from_env("INITGUARD_TEST_TIMEOUT", watchdog::TEST_TIMEOUT)?,
            seconds_from_env("INITGUARD_TEST_QUIET_TIMEOUT", watchdog::QUIET_TIMEOUT)?,
            seconds_from_env("INITGUARD_TEST_KILL_GRACE", KILL_GRACE)?,
        ))
    })();
    let (limit, quiet, grace) = match limits {
        Ok(l) => l,
        Err(e) => {
            eprintln!("test-watchdog: {e}");
            return ExitCode::from(2);
        }
    };
    let shown = binary.to_string_lossy().into_owned();
    let mut child = match Command::new(&binary)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("test-watchdog: cannot run {shown}: {e}");
            return ExitCode::from(2);
        }
    };
    let (tx, rx) = mpsc::channel();
    read_into(child.stdout.take().expect("piped"), Out::Stdout, tx.clone());
    read_into(child.stderr.take().expect("piped"), Out::Stderr, tx.clone());
    drop(tx);

    let mut running = Running::default();
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut last_output = Instant::now();
    let mut open = 2;
    // Set once the binary has exited: a process it left behind may hold its pipes open, and
    // cargo, like this runner, goes on when the binary exits (what is left is not waited for).
    let mut drain_until = None;
    while open > 0 && drain_until.is_none_or(|t| Instant::now() < t) {
        if drain_until.is_none() && matches!(child.try_wait(), Ok(Some(_))) {
            drain_until = Some(Instant::now() + PIPE_DRAIN);
        }
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(Out::Stdout(bytes)) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&bytes);
                let _ = out.flush();
                running.feed(&bytes, Instant::now());
                keep_tail(&mut tail, &bytes);
                last_output = Instant::now();
            }
            Ok(Out::Stderr(bytes)) => {
                let _ = std::io::stderr().write_all(&bytes);
                keep_tail(&mut tail, &bytes);
                last_output = Instant::now();
            }
            Ok(Out::Closed) => open -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let now = Instant::now();
        let why = if let Some((name, ran)) = running.overdue(now, limit) {
            Some(format!(
                "test {name} has run for {}s, past the limit of {}s (INITGUARD_TEST_TIMEOUT)",
                ran.as_secs(),
                limit.as_secs()
            ))
        } else if running.running(now).is_empty() && now - last_output > quiet {
            Some(format!(
                "no output for {}s and no test known to run (INITGUARD_TEST_QUIET_TIMEOUT)",
                quiet.as_secs()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            stop(
                &mut child,
                &shown,
                &why,
                &running.running(now),
                &tail,
                grace,
            );
            return ExitCode::from(101);
        }
    }
    match child.wait() {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
                (None, Some(sig)) => {
                    eprintln!("test-watchdog: {shown} was killed by signal {sig}");
                    ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))
                }
                (None, None) => ExitCode::FAILURE,
            }
        }
        Err(e) => {
            eprintln!("test-watchdog: cannot wait for {shown}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Send what `pipe` gives, chunk by chunk as it comes, then [`Out::Closed`].
fn read_into(
    mut pipe: impl Read + Send + 'static,
    wrap: fn(Vec<u8>) -> Out,
    tx: mpsc::Sender<Out>,
) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(wrap(buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = tx.send(Out::Closed);
    });
}

fn keep_tail(tail: &mut VecDeque<String>, bytes: &[u8]) {
    for line in String::from_utf8_lossy(bytes).lines() {
        tail.push_back(line.to_owned());
        if tail.len() > TAIL_LINES {
            tail.pop_front();
        }
    }
}

/// Report why, dump the threads, kill the binary and then whatever it started.
fn stop(
    child: &mut std::process::Child,
    shown: &str,
    why: &str,
    running: &[(String, Duration)],
    tail: &VecDeque<String>,
    grace: Duration,
) {
    let pid = child.id();
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n########## test-watchdog: {shown}: {why}");
    for (name, ran) in running {
        // One line per test still running, for tests/all's summary.
        let _ = writeln!(
            err,
            "{} test {name} (ran {}s)",
            watchdog::TIMED_OUT,
            ran.as_secs()
        );
    }
    if running.is_empty() {
        let _ = writeln!(
            err,
            "{} {shown} (no test known to run)",
            watchdog::TIMED_OUT
        );
    }
    let _ = writeln!(err, "########## thread dump of pid {pid}:");
    let _ = writeln!(err, "{}", thread_dump(pid));
    let _ = writeln!(err, "########## its last {} lines:", tail.len());
    for line in tail {
        let _ = writeln!(err, "  {line}");
    }
    let below = watchdog::descendants(pid);
    let _ = child.kill();
    let _ = child.wait();
    let deadline = Instant::now() + grace;
    while below.iter().any(|p| watchdog::alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    for p in below.iter().filter(|p| watchdog::alive(**p)) {
        let _ = writeln!(err, "test-watchdog: killing pid {p}, left by {shown}");
        // SAFETY: kill(2) on a pid read from /proc; no memory is touched.
        unsafe {
            libc::kill(*p as libc::pid_t, libc::SIGKILL);
        }
    }
    let _ = writeln!(err, "########## test-watchdog: {shown} killed");
}

/// gdb's backtrace of every thread, or the kernel's view of each when gdb cannot attach.
fn thread_dump(pid: u32) -> String {
    let gdb = Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-nx", "-q"])
        .args(["-ex", "set pagination off", "-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let why_not = match gdb {
        Err(e) => format!("gdb: {e}"),
        Ok(mut gdb) => {
            let mut text = String::new();
            let mut out = gdb.stdout.take().expect("piped");
            let reader = std::thread::spawn(move || {
                let _ = out.read_to_string(&mut text);
                text
            });
            let deadline = Instant::now() + DUMP_TIMEOUT;
            let done = loop {
                match gdb.try_wait() {
                    Ok(Some(status)) => break Ok(status),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    Ok(None) => {
                        let _ = gdb.kill();
                        let _ = gdb.wait();
                        break Err(format!("gdb took over {}s", DUMP_TIMEOUT.as_secs()));
                    }
                    Err(e) => break Err(format!("gdb: {e}")),
                }
            };
            let text = reader.join().unwrap_or_default();
            match done {
                Ok(status) if status.success() && text.contains("Thread ") => return text,
                Ok(status) => format!("gdb exited {status} without a backtrace"),
                Err(e) => e,
            }
        }
    };
    format!(
        "({why_not}; the kernel's view instead)\n{}",
        watchdog::proc_threads(pid)
    )
}
