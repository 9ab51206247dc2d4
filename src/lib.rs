//! orch: render, submit, watch, classify and step down GPU training jobs.
//!
//! `main` parses the command line and hands each subcommand to [`cmd`]; everything else is a
//! module per concept (see docs/ARCHITECTURE.md).

pub mod backend;
pub mod classify;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod error;
pub mod ladder;
pub mod ledger;
pub mod notify;
pub mod outcome;
pub mod plan;
pub mod progress;
pub mod remote;
pub mod render;
pub mod sim;
pub mod ssh;
pub mod tail;
pub mod watch;

use std::process::ExitCode;

use clap::Parser;

/// Run orch with the process's arguments and return its exit code.
pub fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let cli::Command::SimTrain(args) = &cli.command {
        // The simulator is a plain synchronous program; it needs no runtime.
        return ExitCode::from(sim::main(&args.trainer, &args.args).clamp(0, 255) as u8);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(error::code::RUN_FAILED);
        }
    };
    match runtime.block_on(cmd::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            error::report(&err);
            ExitCode::from(error::exit_code(&err))
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
