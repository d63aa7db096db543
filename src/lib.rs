//! initguard: keeps pods from waiting forever on a failed initializer or scheduling gate.
//!
//! Data flows one way: watches feed the [`tracker`] and [`owners`], the pure [`policy`] decides,
//! the [`guard::actuator`] writes. ARCHITECTURE.md is the code map.

pub mod cli;
pub mod client;
pub mod config;
#[cfg(feature = "sim")]
pub mod demo;
pub mod deployed;
pub mod discovery;
pub mod environment;
pub mod guard;
pub mod inventory;
pub mod jobs;
pub mod metrics;
pub mod owners;
pub mod restore;
pub mod status;
pub mod supervise;
pub mod why;

pub use initguard_core::{bypass, node_stage, pod, policy, report, tracker, webhook};
