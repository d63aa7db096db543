//! initguard: keeps pods from waiting forever on a failed initializer or scheduling gate.
//!
//! Data flows one way: watches feed the [`tracker`] and [`owners`], the pure [`policy`] decides,
//! the [`actuator`] writes. See ARCHITECTURE.md.

pub mod actuator;
pub mod client;
pub mod config;
pub mod demo;
pub mod discovery;
pub mod jobs;
pub mod leader;
pub mod mechanism;
pub mod metrics;
pub mod owners;
pub mod pod;
pub mod policy;
pub mod run;
pub mod server;
pub mod sim;
pub mod status;
pub mod supervise;
pub mod tracker;
