//! orch's integration tests: one binary (see STYLE.md), one module per area.

mod support;

mod classify;
mod cli;
mod crash;
mod local_loop;
mod remote;
mod slurm;
mod snapshots;
mod ssh;
