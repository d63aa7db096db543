//! What a node bed may change on the host, read independently of `tests/testbed/down`'s own
//! list: every sysctl under vm, kernel and net (but those that change by themselves), the
//! iptables rules of every table, the network links, the mount points, the entries of the
//! directories the kubelet and containerd write to, the cgroups, and the processes of a
//! container runtime or kubelet. [`Snapshot::diff`] of a snapshot taken before `up --node` and
//! one after `down` must be empty.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The host as far as a node bed can change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `/proc/sys` path (dotted) → value.
    sysctls: BTreeMap<String, String>,
    /// What [`Snapshot::diff`] compares, one set per aspect.
    sets: BTreeMap<&'static str, BTreeSet<String>>,
}

/// The directories whose entries are compared (their direct children).
const DIRS: &[&str] = &[
    "/var/lib",
    "/var/log",
    "/run",
    "/etc",
    "/opt",
    "/sys/fs/cgroup",
];

/// Executables of processes that belong to a container runtime or node agent.
const RUNTIME: &[&str] = &[
    "containerd",
    "containerd-shim",
    "containerd-shim-runc-v2",
    "runc",
    "kubelet",
    "pause",
    "busybox",
    "initguard",
];

impl Snapshot {
    /// Read the host now. Sysctls that differ between two reads a moment apart (counters,
    /// random values) are left out, so a diff shows only what something set.
    pub fn take() -> Result<Snapshot, String> {
        let first = sysctls()?;
        let second = sysctls()?;
        let sysctls = first
            .into_iter()
            .filter(|(k, v)| second.get(k) == Some(v))
            .filter(|(k, _)| !volatile(k))
            .collect();
        let mut sets = BTreeMap::new();
        sets.insert("iptables", iptables()?);
        sets.insert("links", links()?);
        sets.insert("mounts", mounts()?);
        sets.insert("paths", paths());
        sets.insert("cgroups", cgroups());
        sets.insert("processes", processes());
        Ok(Snapshot { sysctls, sets })
    }

    /// What `after` has that this snapshot had not, and the reverse, one line each; empty when
    /// the host is as it was. A sysctl missing in either (left out as volatile) is not compared.
    pub fn diff(&self, after: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in &self.sysctls {
            if let Some(w) = after.sysctls.get(k).filter(|w| *w != v) {
                out.push(format!("sysctl {k}: {v} before, {w} after"));
            }
        }
        for (aspect, before) in &self.sets {
            let empty = BTreeSet::new();
            let now = after.sets.get(aspect).unwrap_or(&empty);
            for gone in before.difference(now) {
                out.push(format!("{aspect}: gone: {gone}"));
            }
            for new in now.difference(before) {
                out.push(format!("{aspect}: new: {new}"));
            }
        }
        out
    }
}

/// Sysctls that the kernel itself changes as it runs, whatever a test did.
fn volatile(key: &str) -> bool {
    key.starts_with("kernel.random.")
        || key.starts_with("kernel.ns_last_pid")
        || key.starts_with("kernel.pty.nr")
        || key.starts_with("net.netfilter.nf_conntrack_count")
        || key.contains(".neigh.")
        || key.starts_with("fs.")
}

fn sysctls() -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for top in [
        "vm",
        "kernel",
        "net/ipv4",
        "net/bridge",
        "net/netfilter",
        "net/core",
    ] {
        walk(&Path::new("/proc/sys").join(top), &mut out);
    }
    if out.is_empty() {
        return Err("no sysctl readable under /proc/sys".to_owned());
    }
    Ok(out)
}

fn walk(path: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let p = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&p, out),
            Ok(t) if t.is_file() => {
                // Write-only entries (vm.drop_caches, ...) cannot be read: not compared.
                if let Ok(value) = std::fs::read_to_string(&p) {
                    let key = p
                        .strip_prefix("/proc/sys")
                        .unwrap_or(&p)
                        .to_string_lossy()
                        .replace('/', ".");
                    out.insert(key, value.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            }
            _ => {}
        }
    }
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every chain and rule of every table, without packet counters or the dump's comments.
fn iptables() -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    for table in ["filter", "nat", "mangle", "raw"] {
        for line in run("iptables-save", &["-t", table])?.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            // ":CHAIN POLICY [packets:bytes]": the counters change with traffic.
            let line = match line.rfind(" [") {
                Some(i) if line.starts_with(':') => &line[..i],
                _ => line,
            };
            out.insert(format!("{table} {line}"));
        }
    }
    Ok(out)
}

fn links() -> Result<BTreeSet<String>, String> {
    Ok(run("ip", &["-o", "link", "show"])?
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_owned())
        .collect())
}

fn mounts() -> Result<BTreeSet<String>, String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(str::to_owned)
        .collect())
}

fn paths() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for dir in DIRS {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                out.insert(entry.path().display().to_string());
            }
        }
    }
    out
}

/// Every cgroup directory two levels deep in every hierarchy (the kubelet's root and its
/// `kubepods` live there).
fn cgroups() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
        for h in hierarchies.flatten() {
            if let Ok(groups) = std::fs::read_dir(h.path()) {
                for g in groups.flatten().filter(|g| g.path().is_dir()) {
                    out.insert(g.path().display().to_string());
                    if let Ok(sub) = std::fs::read_dir(g.path()) {
                        for s in sub.flatten().filter(|s| s.path().is_dir()) {
                            out.insert(s.path().display().to_string());
                        }
                    }
                }
            }
        }
    }
    out
}

/// Processes whose executable is a container runtime's, a kubelet's (the bed's binary called
/// `kubelet`) or a container's from the bed's images, as "pid exe".
fn processes() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(exe) = std::fs::read_link(entry.path().join("exe")) else {
            continue;
        };
        let argv0 = std::fs::read(entry.path().join("cmdline"))
            .ok()
            .and_then(|c| c.split(|b| *b == 0).next().map(|a| a.to_vec()))
            .map(|a| String::from_utf8_lossy(&a).into_owned())
            .unwrap_or_default();
        let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_owned();
        let exe_base = base(&exe.to_string_lossy());
        if RUNTIME.contains(&exe_base.as_str()) || base(&argv0) == "kubelet" {
            out.insert(format!("{name} {} ({argv0})", exe.display()));
        }
    }
    out
}

/// Whether `program` is an executable file in a directory of `PATH`.
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}
