//! The oracle of the `config` fuzz target, shared with its corpus replay in
//! tests/fuzz_replay.rs. Configuration text: any bytes, valid or not, must load or be rejected with located errors,
//! never panic, and a configuration that loads must summarize and serialize.

/// Run `data` through the oracle; panics on a violation.
pub(crate) fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match initguard::config::from_yaml_str(text, "fuzz.yaml") {
        Ok(config) => {
            let _ = config.summary();
            serde_json::to_string(&config).expect("a loaded configuration serializes");
        }
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an error without a message");
        }
    }
}
