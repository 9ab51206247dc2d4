//! `orch completions SHELL` and `orch man`: generated from the clap definitions, so they never
//! drift from the commands they describe.

use std::io::Write as _;

use clap::CommandFactory;
use orch_core::error::code;

use crate::cli::{Cli, CompletionsArgs};

/// Print the completion script for `args.shell` on stdout.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<u8> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "orch", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(code::OK)
}

/// Print the man page (roff) on stdout.
pub fn man() -> anyhow::Result<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut out)?;
    std::io::stdout().write_all(&out)?;
    Ok(code::OK)
}
