//! The fuzz targets' oracles (fuzz/checks/) replayed over their committed inputs on every
//! `cargo test`: the seeds, the regressions (inputs that once broke the guard or probe a
//! known-hard case) and, for the configuration, every shipped and corpus config. This keeps the
//! oracles compiling against the guard's current API and the known crashes fixed without a
//! nightly toolchain; coverage-guided runs stay a manual `cargo +nightly fuzz run` (README).

use std::path::{Path, PathBuf};

#[path = "../fuzz/checks/config.rs"]
mod config_check;
#[path = "../fuzz/checks/pod.rs"]
mod pod_check;

/// Regular files directly in each of `dirs` (relative to the repository), sorted.
fn inputs(dirs: &[&str]) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in dirs {
        let dir = root.join(dir);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
                .path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Run `check` over every input, naming the input that fails.
fn replay(dirs: &[&str], min: usize, check: fn(&[u8])) {
    let files = inputs(dirs);
    // A replay of nothing would pass whatever the oracle says.
    assert!(
        files.len() >= min,
        "expected at least {min} inputs in {dirs:?}, found {}",
        files.len()
    );
    for file in &files {
        let data =
            std::fs::read(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "the oracle failed on {}", file.display());
    }
    println!("replayed {} inputs from {dirs:?}", files.len());
}

#[test]
fn pod_oracle_holds_on_every_committed_input() {
    replay(
        &["fuzz/seeds/pod", "fuzz/regressions/pod"],
        6,
        pod_check::check,
    );
}

#[test]
fn config_oracle_holds_on_every_committed_input() {
    replay(&["config", "tests/config_corpus"], 70, config_check::check);
}
