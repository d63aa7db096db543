//! What the kernel says about a process, independent of anything the process reports itself.

/// Resident set size of process `pid` in KiB (`VmRSS` of `/proc/PID/status`); None when the
/// process is gone or the field is missing.
pub fn rss_kib(pid: u32) -> Option<u64> {
    rss_kib_of(&format!("/proc/{pid}/status"))
}

/// [`rss_kib`] of this process.
pub fn own_rss_kib() -> Option<u64> {
    rss_kib_of("/proc/self/status")
}

fn rss_kib_of(path: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Wait for `child`'s exit and output for at most `limit`; on expiry it is killed and this
/// panics naming `what`. A blocking wait for a child inside an async test cannot be cut short
/// by the test's own timeout: this one bounds itself.
pub fn output_within(
    mut child: std::process::Child,
    limit: std::time::Duration,
    what: &str,
) -> std::process::Output {
    use std::io::Read;
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                let err = err.join().unwrap_or_default();
                panic!(
                    "{what}: no exit within {limit:?}, killed; its stderr: {}",
                    String::from_utf8_lossy(&err)
                );
            }
            Err(e) => panic!("{what}: cannot wait: {e}"),
        }
    };
    std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_rss_is_read_and_nonzero() {
        let kib = super::own_rss_kib().expect("VmRSS of this process");
        assert!(kib > 0);
        assert_eq!(super::rss_kib(u32::MAX), None, "no such process");
    }

    #[test]
    fn output_within_returns_the_output_or_kills_a_child_that_overruns() {
        use std::process::{Command, Stdio};
        use std::time::Duration;
        let child = Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh runs");
        let out = super::output_within(child, Duration::from_secs(60), "sh");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");

        let child = Command::new("sleep")
            .arg("60")
            .stdout(Stdio::piped())
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        let r = std::panic::catch_unwind(|| {
            super::output_within(child, Duration::from_millis(200), "sleep 60")
        });
        let message = r.expect_err("an overrun panics");
        let message = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains("sleep 60: no exit within"), "{message}");
        assert!(
            !crate::watchdog::alive(pid),
            "the overrunning child is killed"
        );
    }
}
