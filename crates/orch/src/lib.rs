//! orch: render, submit, watch, classify and step down GPU training jobs.
//!
//! The binary's glue: [`cli`] parses the command line, [`cmd`] runs each subcommand on the
//! library crates (`orch-core`, `orch-classify`, `orch-ssh`, `orch-sim`); see
//! docs/ARCHITECTURE.md.

pub mod cli;
pub mod cmd;
pub mod progress;
pub mod report;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// Run orch with the process's arguments and return its exit code.
pub fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    #[cfg(feature = "sim")]
    if let cli::Command::SimTrain(args) = &cli.command {
        // The simulator is a plain synchronous program; it needs no runtime.
        return ExitCode::from(orch_sim::main(&args.trainer, &args.args).clamp(0, 255) as u8);
    }
    init_diagnostics(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report(&anyhow::anyhow!("cannot start the async runtime: {e}"));
            return ExitCode::from(orch_core::error::code::RUN_FAILED);
        }
    };
    match runtime.block_on(cmd::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            report(&err);
            ExitCode::from(orch_core::error::exit_code(&err))
        }
    }
}

/// Route the library crates' `tracing` diagnostics to stderr. Off unless asked for: what a
/// user needs to see goes through the progress/output layer, not through here. `ORCH_LOG`
/// takes a `tracing` filter (`debug`, `orch_core::backend=trace`); `-v`/`-vv` are shorthands.
fn init_diagnostics(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("ORCH_LOG") {
        Ok(spec) if !spec.is_empty() => EnvFilter::new(spec),
        _ => EnvFilter::new(match verbose {
            0 => "off",
            1 => "orch=debug,orch_core=debug,orch_ssh=debug,orch_classify=debug",
            _ => "orch=trace,orch_core=trace,orch_ssh=trace,orch_classify=trace",
        }),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .init();
}

/// Print an error and its causes once, to stderr. A failed write is ignored: there is nowhere
/// left to say anything, and the exit code still tells.
fn report(err: &anyhow::Error) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "error: {err}");
    for cause in err.chain().skip(1) {
        let _ = writeln!(stderr, "  caused by: {cause}");
    }
}

/// Writing to a closed pipe (`orch status | head`) is how a reader says it has seen enough.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
