//! CPU time, for bounds on work done that machine load cannot break.

use std::time::Duration;

/// CPU time this thread has used. Costs that must stay small (parsing, deciding) are bounded
/// in CPU time, not wall-clock time, so a loaded machine cannot fail the bound; speed itself
/// belongs in benchmarks.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id is a constant libc knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// CPU time (user + system) process `pid` has used so far, from `/proc/PID/stat`.
pub fn process_cpu_time(pid: u32) -> Duration {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("{path}: no command name in {stat:?}"));
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .map(|&i| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{path}: bad utime/stime in {stat:?}"))
        })
        .sum();
    // SAFETY: sysconf with a constant name has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(per_second > 0, "sysconf(_SC_CLK_TCK) failed");
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}
