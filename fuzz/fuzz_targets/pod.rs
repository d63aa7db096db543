//! Pod JSON from a hostile or broken API server: see fuzz/checks/pod.rs for the oracle.
#![no_main]

#[path = "../checks/pod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
