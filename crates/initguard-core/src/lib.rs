//! initguard's pure decision core: everything that decides, and nothing that does.
//!
//! No API client, async runtime, HTTP server, file system or clock of its own: times arrive as
//! arguments, files through [`config::ReadFile`], the API server's clock through
//! [`tracker::LocalTime`]. The `initguard` crate feeds it from watches and carries out what it
//! decides. ARCHITECTURE.md is the code map.

#![warn(missing_docs)]

pub mod bypass;
pub mod config;
pub mod node_stage;
pub mod owners;
pub mod pod;
pub mod policy;
pub mod report;
pub mod tracker;
pub mod webhook;
