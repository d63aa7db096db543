//! Simulated Kubernetes API server: a test double for a real cluster.
//!
//! [`Sim`] serves the real Kubernetes HTTP API (JSON only) on 127.0.0.1 so that kube-rs and
//! kubectl talk to it unchanged: namespaces, pods (+status), configmaps, deployments (+status;
//! apps/v1, apps/v1beta2, apps/v1beta1, extensions/v1beta1), leases (coordination.k8s.io/v1
//! and v1beta1), core/v1 and events.k8s.io/v1 events; get, list (selectors, pagination), watch
//! (bookmarks, 410 Gone), create, update, patch (JSON, merge, strategic), delete; discovery and
//! Table output for kubectl. [`SimOptions::kube_version`] narrows this to what one Kubernetes
//! version served ([`version`] has the table and its sources). It implements the two pending-initializer
//! mechanisms initguard deals with: scheduling gates (removal only, gated pods stay Pending
//! `SchedulingGated`, a simulated scheduler runs ungated pods) and legacy initializers
//! (uninitialized pods hidden from lists and watches without `includeUninitialized=true`,
//! answered 202 when still uninitialized, a CREATE blocks until
//! initialized or times out with 504 while the pod stays stored). Faults can be injected
//! ([`Faults`]), every request is logged ([`RequestRecord`]), every change recorded
//! ([`ObjectChange`]), and RBAC can be enforced per user ([`Rbac`]).
//!
//! Users are identified by bearer token: `user:NAME` is user `NAME`, no token is
//! `system:anonymous`. It is never meant for production use.
//!
//! It is the server alone, spoken to over HTTP: kube-rs clients of it, the simulated
//! controllers, scenarios, the demo and the `initguard sim` command are initguard-sim's.
//!
//! Known simplifications, each harmless for kube-rs and kubectl:
//! * list continuations read the current state after the last key served (as an expired
//!   snapshot would) while reporting the first page's resourceVersion;
//! * deletion is immediate (no `deletionTimestamp`, no graceful termination, no
//!   finalizers); deleting a namespace deletes its objects at once;
//! * strategic merge patch knows the merge keys of the built-in lists it stores; server-side
//!   apply is answered 415; request bodies are JSON, and protobuf only for a Namespace (what
//!   `kubectl create namespace` sends); `fieldValidation` is accepted and not enforced;
//! * validation covers names, containers, scheduling gates, pod spec immutability and
//!   initializers, not every field of every kind;
//! * a failed legacy initialization (`metadata.initializers.result`) deletes the pod and the
//!   waiting CREATE gets the result's status;
//! * a JSON Patch that cannot be applied answers 422 `Invalid` whose message ends with the
//!   patch library's error (`testing value /path failed`); with a legacy
//!   [`SimOptions::kube_version`] of 1.8 it answers 500 with the old library's words
//!   (`Testing value /path failed`, `Unable to access invalid index: N`), as servers before
//!   the 422 mapping did (1.11 and 1.13 answer 422, as the real 1.13 server does).

pub(crate) mod discovery;
pub mod error;
pub mod faults;
pub(crate) mod kinds;
pub(crate) mod ops;
pub mod options;
pub(crate) mod patch;
pub(crate) mod protobuf;
pub mod rbac;
pub mod record;
pub(crate) mod resources;
pub(crate) mod scheduler;
pub mod selectors;
pub(crate) mod server;
pub(crate) mod shared;
pub mod sim;
pub(crate) mod status;
pub(crate) mod store;
pub(crate) mod table;
pub mod version;
pub(crate) mod watch;

pub use error::SimError;
pub use faults::Faults;
pub use options::SimOptions;
pub use rbac::{PolicyRule, Rbac, RbacError};
pub use record::{ObjectChange, RequestRecord};
pub use sim::Sim;
pub use store::ChangeType;
pub use version::{KubeVersion, UnsupportedVersion};
