//! Configuration text of any bytes: see fuzz/checks/config.rs for the oracle.
#![no_main]

#[path = "../checks/config.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
