//! The `orch` binary: parse arguments, run, exit with the code `orch::run` chose.

use std::process::ExitCode;

fn main() -> ExitCode {
    orch::main()
}
