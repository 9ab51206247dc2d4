//! orch's engine: everything between a command line and a finished run.
//!
//! Configuration ([`config`]) is layered into a [`plan`], rendered to scripts ([`render`]),
//! submitted through a [`backend`], driven as a state machine ([`run`]) by the watcher
//! ([`watch`]) and recorded in the [`ledger`]; each
//! failure is classified (the `orch-classify` crate) and answered by the [`planner`]. See
//! docs/ARCHITECTURE.md for the whole map.

pub mod atomic;
pub mod backend;
pub mod config;
pub mod error;
pub mod estimate;
pub mod evidence_store;
pub mod gpus;
pub mod host;
pub mod ledger;
pub mod notify;
pub mod outcome;
pub mod plan;
pub mod planner;
pub mod render;
pub mod reporter;
pub mod run;
pub mod watch;
