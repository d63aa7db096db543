//! The simulated API server over real HTTP on 127.0.0.1, driven by kube-rs (`Api`,
//! `runtime::watcher`) and by the real kubectl, unchanged.

#[path = "sim/common.rs"]
mod common;
use initguard_test_support::wait;

#[path = "sim/api.rs"]
mod api;
#[path = "sim/faults.rs"]
mod faults;
#[path = "sim/kubectl.rs"]
mod kubectl;
#[path = "sim/legacy.rs"]
mod legacy;
#[path = "sim/rbac.rs"]
mod rbac;
#[path = "sim/watch.rs"]
mod watch;
