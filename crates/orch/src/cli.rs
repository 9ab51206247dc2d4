//! Command-line interface: clap derive, one `Args` struct per subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use orch_core::backend::{self, KINDS, Kind};
use orch_core::plan::SetArg;

/// Render, submit, watch and rescue GPU training jobs: on an out-of-memory failure orch steps
/// down to a more conservative configuration and resubmits, with a record of every attempt.
#[derive(Debug, Parser)]
#[command(name = "orch", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Project directory whose experiments/, profiles/, ladders/ and templates/ override the built-in ones, and whose models/ and datasets/ are read before them
    #[arg(long, global = true, env = "ORCH_CONFIG_DIR", value_name = "DIR")]
    pub config_dir: Option<PathBuf>,

    /// Where run records are kept
    #[arg(
        long,
        global = true,
        env = "ORCH_RUNS_DIR",
        value_name = "DIR",
        default_value = ".orch/runs"
    )]
    pub runs_dir: PathBuf,

    /// Print only results and errors: no progress lines or events
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// Print orch's own diagnostics to stderr (-v: debug, -vv: trace); ORCH_LOG=debug or a
    /// tracing filter such as ORCH_LOG=orch_core::backend=trace does the same
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Submit experiments and watch them, stepping down and resubmitting after failures
    Submit(SubmitArgs),
    /// Pick up runs where they stopped (orch killed, laptop asleep) and drive them to their end
    Resume(ResumeArgs),
    /// Render an experiment's job files without submitting anything
    Render(RenderArgs),
    /// Classify failed jobs' logs (gpu_oom, kv_cache, host_oom, timeout, ...)
    Classify(ClassifyArgs),
    /// List runs and their states
    Status(StatusArgs),
    /// Show every attempt of a run: step, changes, job id, outcome and evidence
    History(HistoryArgs),
    /// Print (or follow) an attempt's log
    Logs(LogsArgs),
    /// Write one self-contained HTML page on runs or a sweep: attempts on a timeline, memory
    /// against the card, what changed and why, what it cost
    Report(ReportArgs),
    /// Cancel a run's live attempt
    Cancel(CancelArgs),
    /// List hardware profiles
    Profiles(ListArgs),
    /// List experiments (sweeps with their members)
    Experiments(ListArgs),
    /// Show an experiment's ladder: each step, what it answers and what it changes
    Ladder(LadderArgs),
    /// Estimate an experiment's GPU and host memory on a profile, before submitting anything
    Estimate(EstimateArgs),
    /// List what earlier attempts measured, per trainer, model and card (the evidence store)
    Evidence(EvidenceArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(CompletionsArgs),
    /// Print orch's man page (roff) on stdout
    Man,
    /// Simulated trainer used by rendered scripts when no GPU is present (see docs/SIMULATOR.md)
    #[cfg(feature = "sim")]
    #[command(hide = true)]
    SimTrain(SimTrainArgs),
}

/// How to pick an experiment's configuration.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Configuration")]
pub struct ConfigArgs {
    /// Hardware profile (default: the experiment's own)
    #[arg(long, short = 'p', value_name = "PROFILE")]
    pub profile: Option<String>,

    /// Override an experiment field (model, seed, ...), a trainer key, `resources.KEY`, `env.NAME` or `vars.NAME`
    #[arg(long = "set", short = 's', value_name = "KEY=VALUE")]
    pub sets: Vec<SetArg>,
}

/// `--backend`: the backends the registry lists ([`orch_core::backend::KINDS`]), each with its
/// help line, read as the backend's [`Kind`].
fn backend_kind() -> impl clap::builder::TypedValueParser<Value = &'static Kind> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        KINDS
            .iter()
            .map(|k| PossibleValue::new(k.name).help(k.about)),
    )
    .map(|name| backend::kind(&name).expect("a listed backend"))
}

/// What `submit` does with a configuration predicted not to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Preflight {
    /// Submit the best predicted fitting configuration instead, and say why
    On,
    /// Say that it is predicted not to fit, and submit it as written
    Warn,
    /// Submit as written without estimating
    Off,
}

/// Where a remote backend works.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Remote host")]
pub struct HostArgs {
    /// Run on this host over SSH: a Host from ~/.ssh/config, or user@host:port
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,

    /// Trust a host key not yet in ~/.ssh/known_hosts (added there); a changed key is always refused
    #[arg(long)]
    pub accept_new_host_key: bool,

    /// Runs directory on the host (relative to its home)
    #[arg(long, value_name = "DIR", default_value = ".orch/runs")]
    pub remote_dir: String,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Experiments to run (a sweep's name runs every member)
    #[arg(required = true, value_name = "EXPERIMENT")]
    pub experiments: Vec<String>,

    #[command(flatten)]
    pub config: ConfigArgs,

    /// Where jobs run
    #[arg(long, value_parser = backend_kind(), help_heading = "Running")]
    pub backend: Option<&'static Kind>,

    #[command(flatten)]
    pub host: HostArgs,

    /// Most attempts per run, first one included, 1–100 [default: the experiment's, else 5]
    #[arg(
        long,
        value_name = "N",
        help_heading = "Running",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(orch_core::config::MAX_ATTEMPTS))
    )]
    pub max_attempts: Option<u32>,

    /// Run orch's simulated trainer instead of the real one (default when there is no GPU here)
    #[arg(long, overrides_with = "no_simulate", help_heading = "Running")]
    pub simulate: bool,

    /// Run the real trainer even when no GPU is visible
    #[arg(long, help_heading = "Running")]
    pub no_simulate: bool,

    /// Before the first submission, estimate the memory; when the configuration as written is
    /// predicted not to fit, `on` submits the best predicted fitting one instead (and says
    /// so), `warn` only says so, `off` does not estimate
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value = "on",
        env = "ORCH_PREFLIGHT",
        help_heading = "Running"
    )]
    pub preflight: Preflight,

    /// Let a running attempt move to a faster configuration that trains the same thing when
    /// its measured peak leaves room and the time saved outweighs a restart (the default on
    /// the local and SSH backends; on Slurm a restart waits in the queue again)
    #[arg(long, overrides_with = "no_climb", help_heading = "Running")]
    pub climb: bool,

    /// Keep every attempt on the configuration it started with
    #[arg(long, help_heading = "Running")]
    pub no_climb: bool,

    #[command(flatten)]
    pub watch: WatchArgs,

    /// Shell command told (JSON on stdin and in $1) when a run steps down, resumes, fails or ends
    #[arg(
        long,
        value_name = "CMD",
        env = "ORCH_ON_EVENT",
        help_heading = "Running"
    )]
    pub on_event: Option<String>,
}

/// How `submit` and `resume` watch runs.
#[derive(Debug, Args)]
#[command(next_help_heading = "Watching")]
pub struct WatchArgs {
    /// Seconds between state polls when nothing changes, 0.05–3600 [default: 0.25 local, 30 slurm]
    #[arg(long, value_name = "SECONDS", value_parser = poll_seconds)]
    pub poll_interval: Option<f64>,

    /// Print the result as one JSON object per run on stdout
    #[arg(long)]
    pub json: bool,

    /// Cancel and resubmit (same step, resuming) a running job whose logs stop growing for this
    /// long (at least 1s)
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30m",
        env = "ORCH_HANG_TIMEOUT",
        value_parser = hang_duration
    )]
    pub hang_timeout: humantime::Duration,

    /// Return at once and leave no orch on this machine: on Slurm each attempt is followed by a
    /// small job that runs `orch resume`; elsewhere a background watcher carries the run on
    #[arg(long)]
    pub detach: bool,

    /// At most N jobs out at once (queued or running), the rest wait their turn in order
    /// [default: no limit; the CPU count on the local backend without GPUs; with GPUs, as
    /// many as there are free cards for]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_parallel: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// Run ids (or unique prefixes)
    #[arg(
        value_name = "RUN",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub runs: Vec<String>,

    /// Every run that has not ended
    #[arg(long)]
    pub all: bool,

    #[command(flatten)]
    pub watch: WatchArgs,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    pub experiment: String,

    #[command(flatten)]
    pub config: ConfigArgs,

    /// Render the configuration after the first N ladder steps (in ladder order)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub step: usize,

    /// Directory to write into [default: ./rendered/<experiment>]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Render the scripts to call the simulated trainer
    #[arg(long)]
    pub simulate: bool,

    /// Print what was written as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ClassifyArgs {
    /// Log files
    #[arg(value_name = "LOG", required_unless_present = "dump_patterns")]
    pub logs: Vec<PathBuf>,

    /// Print a JSON array: one {file, class, line, evidence} per log
    #[arg(long)]
    pub json: bool,

    /// Print the classifier's patterns as POSIX EREs, one per line (for benchmarks)
    #[arg(long, hide = true)]
    pub dump_patterns: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EvidenceArgs {
    /// Print JSON (one object per attempt, oldest first)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Run id (or a unique prefix)
    pub run: String,
    /// Print JSON (the same shape as `submit --json`)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Run id (or a unique prefix)
    pub run: String,
    /// Attempt number [default: the latest]
    #[arg(long, short = 'a')]
    pub attempt: Option<u32>,
    /// Keep printing as the log grows, until the attempt ends
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Print stderr.log instead of stdout.log
    #[arg(long)]
    pub stderr: bool,
    /// Print where the attempt's logs are (paths, sizes, host, job, outcome) as JSON instead
    /// of their contents
    #[arg(long, conflicts_with = "follow")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run ids (or unique prefixes), or an experiment or sweep name (its newest run, or each
    /// member's) [default: every run in the runs directory]
    pub runs: Vec<String>,
    /// Where to write the page (`-`: stdout) [default: report-<run or sweep>.html]
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Run id (or a unique prefix)
    pub run: String,
    /// Print the run's state after the cancellation as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LadderArgs {
    pub experiment: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print the ladder as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EstimateArgs {
    pub experiment: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Estimate the configuration an attempt ran (its `plan.yaml`, under
    /// `.orch/runs/RUN/attempts/N/`) instead of the experiment as written
    #[arg(long, value_name = "FILE")]
    pub plan_file: Option<std::path::PathBuf>,
    /// Print the estimate as JSON (the per-GPU peak is `gpu_peak_gib`)
    #[arg(long)]
    pub json: bool,
    /// With --json: also, by the simulated trainer's truth (`exact` or `calibrated`, as
    /// ORCH_SIM_TRUTH), what preflight would choose knowing the true peaks and the best the
    /// whole ladder allows, under `true_best` (`policy`, `best`)
    #[cfg(feature = "sim")]
    #[arg(long, value_name = "TRUTH", hide = true, requires = "json")]
    pub sim_truth: Option<String>,
    /// The seed of --sim-truth (as ORCH_SIM_TRUTH_SEED; default 0)
    #[cfg(feature = "sim")]
    #[arg(long, value_name = "SEED", hide = true, requires = "sim_truth")]
    pub sim_truth_seed: Option<String>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[cfg(feature = "sim")]
#[derive(Debug, Args)]
pub struct SimTrainArgs {
    /// The trainer to simulate, by its registered name (an unknown name lists them)
    pub trainer: String,
    /// The trainer's own arguments
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// `--poll-interval`: a finite number of seconds in a range a scheduler tolerates.
fn poll_seconds(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(0.05..=3600.0).contains(&secs) {
        return Err(format!(
            "{text} s is out of range: give 0.05 to 3600 seconds"
        ));
    }
    Ok(secs)
}

/// `--hang-timeout`: a duration of at least one second (0 would call every job hung).
fn hang_duration(text: &str) -> Result<humantime::Duration, String> {
    let d: humantime::Duration = text.parse().map_err(|e| format!("{e}"))?;
    if std::time::Duration::from(d) < std::time::Duration::from_secs(1) {
        return Err(format!(
            "`{text}` is too short: a job would be called hung between two log lines; give at least 1s"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
