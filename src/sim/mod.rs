//! Simulated Kubernetes API server and controllers: a test double for a real cluster.

pub mod kinds;
pub mod ops;
pub mod patch;
pub mod resources;
pub mod selectors;
pub mod status;
pub mod store;
