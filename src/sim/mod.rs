//! Simulated Kubernetes API server and controllers: a test double for a real cluster.

pub mod resources;
pub mod selectors;
pub mod status;
pub mod store;
