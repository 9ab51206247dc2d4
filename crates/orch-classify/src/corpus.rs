//! Scoring the classifier on a corpus of real logs: a directory of verbatim excerpts, each
//! listed in the directory's `sources.tsv` with its URL, framework, label and why.
//!
//! Each excerpt is classified the way `orch classify` does it ([`classify_path`]) and scored
//! twice: the exact class, and the *action* it leads the planner to
//! (`orch-core/src/planner/mod.rs::next`):
//!
//! * **recover** — `gpu_oom`, `kv_cache`, `host_oom`: the memory ladder answers them;
//! * **resubmit** — `timeout`, `preempted`, `node_fail`, `hang`, `nccl_timeout`: the same
//!   configuration again from the last checkpoint;
//! * **give up** — `error`, and `none` (a failed job whose log names nothing is `error`).
//!
//! A *memory false alarm* is a case labelled with a non-memory class classified as a memory
//! class (orch would shrink a job for nothing). *Memory recall* is counted apart for the
//! device (`gpu_oom`, `kv_cache`) and the host (`host_oom`): each miss is a run orch gives
//! up on. `cargo run -p orch-classify --example score -- DIR...` prints these tables; the
//! corpus tests hold floors on them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::{FailureClass, Policy, Verdict, classify_path};

/// The header `sources.tsv` must start with.
pub const HEADER: &str = "file\turl\tframework\tlabel\twhy";

/// One row of `sources.tsv`.
#[derive(Debug, Clone)]
pub struct Case {
    pub file: String,
    pub url: String,
    pub framework: String,
    pub label: FailureClass,
}

/// What the planner does with a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Act {
    Recover,
    Resubmit,
    GiveUp,
}

/// The planner's action for a class (its [`Policy`]).
pub fn act(c: FailureClass) -> Act {
    match c.policy() {
        Policy::Memory => Act::Recover,
        Policy::Resubmit | Policy::RetryOnce => Act::Resubmit,
        Policy::GiveUp | Policy::Nothing => Act::GiveUp,
    }
}

/// A class the memory ladder answers.
pub fn is_memory(c: FailureClass) -> bool {
    c.is_memory()
}

/// Every class, for parsing a label.
const CLASSES: [FailureClass; 10] = [
    FailureClass::GpuOom,
    FailureClass::KvCache,
    FailureClass::HostOom,
    FailureClass::Timeout,
    FailureClass::Preempted,
    FailureClass::NodeFail,
    FailureClass::NcclTimeout,
    FailureClass::Hang,
    FailureClass::Error,
    FailureClass::None,
];

/// A class from its wire name (`gpu_oom`, ...).
pub fn parse_class(s: &str) -> Option<FailureClass> {
    CLASSES.into_iter().find(|c| c.as_str() == s)
}

/// The rows of `dir/sources.tsv`, checked against the `.log` files in `dir`: every file has
/// exactly one row, every row a file, a URL and a reason. Errors name the row.
pub fn load(dir: &Path) -> Result<Vec<Case>, String> {
    let path = dir.join("sources.tsv");
    let table = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = table.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("{}: the header must be {HEADER:?}", path.display()));
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("{} line {}", path.display(), i + 2);
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() != 5 {
            return Err(format!("{at}: {} columns, want 5", cols.len()));
        }
        if !cols[1].starts_with("https://github.com/") {
            return Err(format!(
                "{at}: {}: a row without a URL is not evidence",
                cols[0]
            ));
        }
        if cols[4].trim().is_empty() {
            return Err(format!("{at}: {}: say why", cols[0]));
        }
        let label =
            parse_class(cols[3]).ok_or_else(|| format!("{at}: unknown label {:?}", cols[3]))?;
        rows.push(Case {
            file: cols[0].to_string(),
            url: cols[1].to_string(),
            framework: cols[2].to_string(),
            label,
        });
    }
    let mut listed: Vec<&str> = rows.iter().map(|c| c.file.as_str()).collect();
    listed.sort_unstable();
    if let Some(w) = listed.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("{}: {} is listed twice", path.display(), w[0]));
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    on_disk.sort_unstable();
    if on_disk != listed {
        let missing: Vec<_> = listed
            .iter()
            .filter(|f| !on_disk.iter().any(|d| d == *f))
            .collect();
        let unlisted: Vec<_> = on_disk
            .iter()
            .filter(|d| !listed.contains(&d.as_str()))
            .collect();
        return Err(format!(
            "{}: rows without a file {missing:?}, files without a row {unlisted:?}",
            dir.display()
        ));
    }
    Ok(rows)
}

/// One case's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: Case,
    /// The verdict under the score's reading (see [`Reading`]).
    pub verdict: Verdict,
}

/// Which reading of a log is scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// The log alone, as for a job whose end is not known (`orch classify`).
    Strict,
    /// As orch reads a finished job: a case labelled with a failure is a job the scheduler says
    /// failed ([`Verdict::given_failure`]); a case labelled `none` is one that succeeded.
    Scheduler,
}

impl Outcome {
    pub fn exact(&self) -> bool {
        self.verdict.class == self.case.label
    }
    pub fn acted(&self) -> bool {
        act(self.verdict.class) == act(self.case.label)
    }
    pub fn false_alarm(&self) -> bool {
        is_memory(self.verdict.class) && !is_memory(self.case.label)
    }
}

/// The scores of one corpus directory.
#[derive(Debug, Clone)]
pub struct Score {
    pub name: String,
    pub outcomes: Vec<Outcome>,
}

/// `n` of `of`, as a count and a share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub n: usize,
    pub of: usize,
}

impl Share {
    pub fn ratio(self) -> f64 {
        self.n as f64 / self.of.max(1) as f64
    }
}

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} ({:.1} %)", self.n, self.of, 100.0 * self.ratio())
    }
}

impl Score {
    fn share(&self, of: impl Fn(&Outcome) -> bool, n: impl Fn(&Outcome) -> bool) -> Share {
        let pool: Vec<_> = self.outcomes.iter().filter(|o| of(o)).collect();
        Share {
            n: pool.iter().filter(|o| n(o)).count(),
            of: pool.len(),
        }
    }
    pub fn acted(&self) -> Share {
        self.share(|_| true, Outcome::acted)
    }
    pub fn exact(&self) -> Share {
        self.share(|_| true, Outcome::exact)
    }
    /// Device-memory cases (`gpu_oom`, `kv_cache`) classified as a memory class.
    pub fn device_recall(&self) -> Share {
        self.share(
            |o| matches!(o.case.label, FailureClass::GpuOom | FailureClass::KvCache),
            |o| is_memory(o.verdict.class),
        )
    }
    /// Host-memory cases (`host_oom`) classified as a memory class.
    pub fn host_recall(&self) -> Share {
        self.share(
            |o| o.case.label == FailureClass::HostOom,
            |o| is_memory(o.verdict.class),
        )
    }
    pub fn false_alarms(&self) -> Vec<&Outcome> {
        self.outcomes.iter().filter(|o| o.false_alarm()).collect()
    }

    /// A table a person reads: the totals, each label's, and every case not classified
    /// exactly (✗ wrong action, ~ right action but another class).
    pub fn report(&self) -> String {
        let mut s = format!(
            "{}: {} cases; acted on correctly {}; exact {}; memory recall device {}, host {}; memory false alarms {}\n",
            self.name,
            self.outcomes.len(),
            self.acted(),
            self.exact(),
            self.device_recall(),
            self.host_recall(),
            self.false_alarms().len()
        );
        let mut by_label: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
        for o in &self.outcomes {
            let e = by_label.entry(o.case.label.as_str()).or_default();
            e.0 += 1;
            e.1 += usize::from(o.exact());
            e.2 += usize::from(o.acted());
        }
        for (label, (n, ex, ac)) in &by_label {
            let _ = writeln!(
                s,
                "  {label:<13} {n:>3} cases  exact {ex:>3}  acted {ac:>3}"
            );
        }
        let misses: Vec<_> = self.outcomes.iter().filter(|o| !o.exact()).collect();
        if !misses.is_empty() {
            s.push_str("  not exact (✗ wrong action, ~ right action, other class):\n");
        }
        for o in misses {
            let evidence = o.verdict.evidence.as_ref().map_or(String::new(), |e| {
                let text: String = e.text.chars().take(100).collect();
                format!(" (line {}: {text})", e.line)
            });
            let _ = writeln!(
                s,
                "  {}{} {} -> {}{evidence}  [{}]",
                if o.acted() { "~" } else { "✗" },
                if o.false_alarm() { " FALSE ALARM" } else { "" },
                o.case.label.as_str(),
                o.verdict.class.as_str(),
                o.case.file
            );
        }
        s
    }
}

/// Classify every case of `dir` and score it under `name`, with the strict reading.
pub fn score(dir: &Path, name: &str) -> Result<Score, String> {
    score_as(dir, name, Reading::Strict)
}

/// Classify every case of `dir` and score it under `name` with `reading`.
pub fn score_as(dir: &Path, name: &str, reading: Reading) -> Result<Score, String> {
    let mut outcomes = Vec::new();
    for case in load(dir)? {
        let path = dir.join(&case.file);
        let mut verdict = classify_path(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if reading == Reading::Scheduler && case.label != FailureClass::None {
            verdict = verdict.given_failure().clone();
        }
        outcomes.push(Outcome { case, verdict });
    }
    Ok(Score {
        name: name.to_string(),
        outcomes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `FailureClass::MEMORY` is exactly the classes whose policy is memory.
    #[test]
    fn the_memory_list_is_the_memory_policy() {
        let by_policy: Vec<FailureClass> = CLASSES.into_iter().filter(|c| c.is_memory()).collect();
        assert_eq!(by_policy, FailureClass::MEMORY.to_vec());
    }
}
