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

#[cfg(test)]
mod tests {
    #[test]
    fn own_rss_is_read_and_nonzero() {
        let kib = super::own_rss_kib().expect("VmRSS of this process");
        assert!(kib > 0);
        assert_eq!(super::rss_kib(u32::MAX), None, "no such process");
    }
}
