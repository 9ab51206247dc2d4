//! Errors a user sees, and the one place that maps them to exit codes.
//!
//! Library code returns typed errors ([`ConfigError`], [`RenderError`], [`UsageError`]);
//! subcommand glue wraps them in `anyhow` with context, and the binary prints the chain once.
//! [`exit_code`] finds these types anywhere in that chain: bad input exits 2, anything else 1.
//! This module imports nothing else of orch, so every other module may use it.

use std::path::PathBuf;

/// Exit codes, shared by every subcommand.
pub mod code {
    /// The run (or command) succeeded.
    pub const OK: u8 = 0;
    /// A run failed: the job failed and the ladder is exhausted or attempts ran out.
    pub const RUN_FAILED: u8 = 1;
    /// Bad input: configuration, arguments, validation. Nothing was submitted.
    pub const USAGE: u8 = 2;
    /// The run was cancelled.
    pub const CANCELLED: u8 = 3;
    /// Some runs could not be read and were skipped (each named, with its path and what is
    /// wrong); the others were handled.
    pub const SKIPPED: u8 = 4;
    /// Interrupted by a signal (Ctrl-C).
    pub const INTERRUPTED: u8 = 130;
}

/// A configuration problem: a file that does not parse, a name that does not exist,
/// a value a rule refuses. Always names where the problem is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A YAML file did not parse or did not match its schema.
    #[error("{origin}{}: {message}", location.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
    Parse {
        origin: String,
        location: Option<(usize, usize)>,
        message: String,
    },
    /// A name (experiment, profile, ladder, template) that is not defined anywhere.
    #[error("unknown {kind} `{name}`{}\n  known {kind}s: {}", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default(), known.join(", "))]
    Unknown {
        kind: &'static str,
        name: String,
        known: Vec<String>,
        suggestion: Option<String>,
    },
    /// The configuration is well-formed but would be refused by the trainer or the scheduler.
    #[error("invalid configuration for `{experiment}`:\n{}", problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        experiment: String,
        problems: Vec<String>,
    },
    /// Anything else about a specific file.
    #[error("{origin}: {message}")]
    Other { origin: String, message: String },
    /// A configuration file that exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ConfigError {
    /// One problem with `experiment`'s configuration.
    pub fn invalid(experiment: &str, problem: String) -> Self {
        ConfigError::Invalid {
            experiment: experiment.to_string(),
            problems: vec![problem],
        }
    }
}

/// A template that could not be rendered: which file, which line, and minijinja's reason.
#[derive(Debug, thiserror::Error)]
#[error("template {name}{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
pub struct RenderError {
    /// The template's name: its repository-relative path, or its path on disk.
    pub name: String,
    /// The 1-based line, when minijinja knows it.
    pub line: Option<usize>,
    pub message: String,
}

/// Marks an error as bad input (exit code 2) rather than a failed run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Exit code for an error that ended a command: [`code::USAGE`] when any cause is bad input
/// (nothing was submitted), else [`code::RUN_FAILED`].
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.is::<ConfigError>() || cause.is::<UsageError>() || cause.is::<RenderError>() {
            return code::USAGE;
        }
    }
    code::RUN_FAILED
}

/// The closest of `known` to `name`, if it is close enough to be a likely typo.
pub fn suggest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<String> {
    known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_string())
}
