//! initguard's simulated world, on kube-sim's API server: the simulated controllers (the
//! initializers' owners and the pods' creators), scenarios that script them, the narrated
//! `initguard demo` and the `initguard sim` command. kube-sim is the server alone; this crate
//! is what speaks to it as a cluster's controllers would.
//!
//! It does not depend on the guard: `initguard demo` hands it the guard as a
//! [`demo::GuardStarter`], so the product crate reaches this one through its optional `sim`
//! feature and the shipped build contains none of it.

pub mod cli;
pub mod clients;
pub mod controllers;
pub mod demo;
pub mod scenario;

pub use clients::{SimClients, client_for};
