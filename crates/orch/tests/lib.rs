//! orch's first tier of integration tests: the binary end to end on the local backend and the
//! simulated trainer, rendered-script snapshots and CLI errors. Needs nothing but a build:
//! plain `cargo test` runs it on a fresh clone, as any user.
//!
//! The suites that need a live Slurm cluster or an sshd are in `services.rs`, built only with
//! the `services` feature (`scripts/test.sh` starts the services and turns it on).

// Each test binary uses its own part of the shared helpers.
#[allow(dead_code)]
mod support;

mod bounded_input;
mod cli;
mod damaged_member;
mod estimate;
mod evidence_store;
mod local_loop;
mod old_runs;
mod one_machine;
mod reliability;
mod report_page;
mod rl_swarm;
mod script_injection;
mod snapshots;
mod trainers;
