//! Helpers shared by initguard's test targets: one place, a dev-dependency of the guard crate,
//! so no test target carries its own copy.

pub mod alloc;
pub mod bench;
pub mod cpu;
pub mod differential;
pub mod harness_args;
pub mod host;
pub mod http;
pub mod metrics;
pub mod pki;
pub mod pod;
pub mod process;
pub mod promql;
pub mod rbac;
pub mod runner;
pub mod testbed;
pub mod tools;
pub mod wait;
pub mod watchdog;
pub mod webhook;
