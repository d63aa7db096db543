//! Tools a test needs from the machine (kubectl, promtool, Prometheus, kubernetes-validate):
//! a missing one skips the test locally, with a `SKIPPED` line that `tests/all` sums up, and
//! fails it when `CI` is set (`.ci/run` installs every such tool).

/// Report that `test` cannot run because `tool` is missing (`install` says how to get it):
/// panics when `CI` is set, else prints the skip notice. The caller then returns.
pub fn missing(test: &str, tool: &str, install: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: CI is set but {tool} is not installed ({install})"
    );
    // stdout, so that `cargo test -- --show-output` shows it for a passing test.
    println!(
        "SKIPPED {test}: {tool} is not installed ({install}); set CI=1 to make this a failure"
    );
}

/// The current test bed's kubectl (`tests/testbed/build` builds it with the control plane, so
/// the suite never depends on one the machine happens to have), or why it is not there.
pub fn kubectl() -> Result<std::path::PathBuf, String> {
    use crate::testbed::{Version, repo};
    let pinned = Version::Current.pinned()?;
    let path = repo().join(format!("tests/testbed/.cache/{pinned}/bin/kubectl"));
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: run tests/testbed/build (the README's test command builds it)",
            path.display()
        ))
    }
}
