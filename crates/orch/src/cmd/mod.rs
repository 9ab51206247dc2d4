//! Subcommand glue: turn parsed arguments into calls on the library, print results.
//! Data goes to stdout, messages to stderr.

/// `println!` that returns the write's error instead of panicking: a closed stdout (`orch
/// history RUN | head -1`) ends the command, and `main` turns a broken pipe into exit 0.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)?
    }};
}

mod backend;
mod catalog;
mod classify;
mod estimate;
mod evidence;
mod machine;
mod report;
mod runs;
mod shell;
mod submit;
#[cfg(feature = "sim")]
mod truth;

use std::path::PathBuf;

use crate::cli::{Cli, Command};
use orch_core::config::Catalog;
use orch_core::ledger::Ledger;

/// Run one subcommand; returns the exit code.
pub async fn run(cli: Cli) -> anyhow::Result<u8> {
    let g = &cli.global;
    let project = g.config_dir.clone().unwrap_or_else(|| PathBuf::from("."));
    // The project's datasets (`datasets/*.yaml`) for the commands that estimate memory.
    if matches!(
        cli.command,
        Command::Submit(_)
            | Command::Resume(_)
            | Command::Estimate(_)
            | Command::Ladder(_)
            | Command::Report(_)
    ) {
        orch_memory::datasets::load_project_dir(&project.join("datasets"))
            .map_err(|e| orch_core::error::UsageError(e.to_string()))?;
        // And its model families (`models/*.yaml`), ahead of the built-in ones; a file there
        // that names no family (a repository's own model configs) is skipped.
        let skipped = orch_memory::ModelTable::load_project_dir(&project.join("models"))
            .map_err(|e| orch_core::error::UsageError(e.to_string()))?;
        if g.verbose > 0 {
            for file in skipped {
                eprintln!("orch: {file} names no `family:`: not a model family, skipped");
            }
        }
    }
    let catalog = Catalog::new(project);
    let ledger = Ledger::new(g.runs_dir.clone());
    match cli.command {
        Command::Submit(args) => submit::submit(&catalog, &ledger, args, g.quiet).await,
        Command::Resume(args) => submit::resume(&catalog, &ledger, args, g.quiet).await,
        Command::Render(args) => catalog::render(&catalog, args),
        Command::Classify(args) => classify::classify(args, g.verbose > 0),
        Command::Status(args) => runs::status(&ledger, args),
        Command::History(args) => runs::history(&ledger, args),
        Command::Logs(args) => runs::logs(&ledger, args).await,
        Command::Report(args) => report::report(&catalog, &ledger, args),
        Command::Cancel(args) => runs::cancel(&ledger, args).await,
        Command::Profiles(args) => catalog::profiles(&catalog, args),
        Command::Experiments(args) => catalog::experiments(&catalog, args),
        Command::Ladder(args) => catalog::ladder(&catalog, args),
        Command::Estimate(args) => estimate::estimate(&catalog, &ledger, args),
        Command::Evidence(args) => evidence::evidence(&ledger, args),
        Command::Completions(args) => shell::completions(args),
        Command::Man => shell::man(),
        #[cfg(feature = "sim")]
        Command::SimTrain(_) => unreachable!("handled before the runtime starts"),
    }
}
