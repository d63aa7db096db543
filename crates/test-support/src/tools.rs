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
