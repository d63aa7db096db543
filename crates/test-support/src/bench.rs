//! What benchmarks print with every table.

/// `_machine: …_`: cores, memory, the crate version given, date and load average.
pub fn machine_line(version: &str) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string());
    format!(
        "_machine: {cores} cores, {:.1} GiB memory; initguard {version}; {}; load average {load}_",
        mem_kib as f64 / 1_048_576.0,
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
    )
}
