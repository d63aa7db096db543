//! Configuration text: any bytes, valid or not, must load or be rejected with located errors,
//! never panic, and a configuration that loads must summarize and serialize.
#![no_main]

use initguard::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_yaml_str(text, "fuzz.yaml") {
        Ok(config) => {
            let _ = config.summary();
            serde_json::to_string(&config).expect("a loaded configuration serializes");
        }
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an error without a message");
        }
    }
});
