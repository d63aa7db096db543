//! Reliability and security: the guard under faults and restarts, fed bad input, and held to
//! least privilege.
//!
//! * `soak`: the released binary, as child processes (two replicas with leader election for
//!   scheduling gates, one for legacy initializers), against the simulated API server while
//!   requests fail, watches drop, the server restarts, owners die and come back and the guards
//!   are SIGKILLed. Invariants are read from the server's request log and object history.
//!   `INITGUARD_SOAK_SECONDS` (default 60) sets the length, `INITGUARD_SOAK_SEED` replays the
//!   chaos schedule of an earlier run.
//! * `bad_input`: hostile pods through the API and garbage on the pod watch; the guard keeps
//!   serving and still bypasses a normal pod afterwards.
//! * `decode_fuzz`: property tests of the pod decoder on arbitrary and mutated JSON
//!   (`PROPTEST_CASES` raises the case count).
//! * `security`: the shipped RBAC suffices (zero 403s), and no bearer token or other kubeconfig
//!   secret reaches logs, `/status` or `/metrics`.

#[path = "reliability/fake_api.rs"]
mod fake_api;
#[path = "reliability/support.rs"]
mod support;
use initguard_test_support::wait;

#[path = "reliability/bad_input.rs"]
mod bad_input;
#[path = "reliability/decode_fuzz.rs"]
mod decode_fuzz;
#[path = "reliability/security.rs"]
mod security;
#[path = "reliability/soak.rs"]
mod soak;
