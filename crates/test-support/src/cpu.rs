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
