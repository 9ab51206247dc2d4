//! Redaction of what changes from run to run (run ids, times, job ids, pids, the test's own
//! directory) so that whole outputs can be snapshots; after nextest's `redact.rs`.
//!
//! A redacted value followed by two or more spaces is taken for a table cell: its label is
//! padded to the cell's width, so columns line up whatever the width of the value was.

use std::path::Path;
use std::sync::OnceLock;

use regex::{Captures, Regex};

/// Patterns for the values that change on every run, in the order they are applied.
fn rules() -> &'static [(Regex, &'static str)] {
    static RULES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    RULES.get_or_init(|| {
        [
            // A run id, diamonds-seed0-20261122-134852-c022: the experiment stays, its UTC
            // stamp and salt go.
            (
                r"\b([A-Za-z0-9._-]+?)-\d{8}-\d{6}-[0-9a-f]{4}\b",
                "${1}-[STAMP]",
            ),
            (
                r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z",
                "[TIME]",
            ),
            (r"\b\d+(?:\.\d+)?(?:ms|µs|us|ns|s)\b", "[DURATION]"),
            // Job ids: local pids, Slurm job ids.
            (r"\b(job )\d+\b", "${1}[JOB_ID]"),
            (r#"("job_id": ?)"\d+""#, r#"${1}"[JOB_ID]""#),
            (r"\b(pid[=:] ?)\d+\b", "${1}[PID]"),
            // What a run cost depends on how long its simulated jobs took.
            (r"\b\d+\.\d+( GPU-h)", "[GPU_H]${1}"),
            (
                r#"("(?:gpu_hours|total|succeeded|failed)": ?)\d+(?:\.\d+)?(?:e-?\d+)?"#,
                "${1}[GPU_H]",
            ),
            (r"\(\d+\.\d+( in failed)", "([GPU_H]${1}"),
            // Whether a short local job was seen running before it ended is a race.
            (
                r#"("running_since": ?)(?:null|"\[TIME\]")"#,
                "${1}[RUNNING_SINCE]",
            ),
            // The status table's GPU-H column, just before STARTED.
            (r"\b\d+\.\d{2}(\s{2,}\[TIME\])", "[GPU_H]${1}"),
            // An evidence line cut to a number of characters ends mid-word where it ends
            // depends on the width of the pid in it.
            (r"\w+…", "…"),
        ]
        .into_iter()
        .map(|(re, label)| (Regex::new(re).unwrap(), label))
        .collect()
    })
}

/// What to redact in one test's output: the patterns above, and values the test knows.
#[derive(Default)]
pub struct Redactions {
    values: Vec<(Regex, String)>,
}

impl Redactions {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace `value` (a whole word, wherever it stands) by `label`.
    pub fn value(mut self, value: &str, label: &str) -> Self {
        if value.is_empty() {
            return self;
        }
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let mut re = regex::escape(value);
        if value.starts_with(word) {
            re = format!(r"\b{re}");
        }
        if value.ends_with(word) {
            re = format!(r"{re}\b");
        }
        self.values.push((Regex::new(&re).unwrap(), label.into()));
        // Longest first, so that a value is not cut up by a shorter one inside it.
        self.values
            .sort_by_key(|(re, _)| std::cmp::Reverse(re.as_str().len()));
        self
    }

    /// Replace every `job_id` in `json` (at any depth) by `[JOB_ID]`, wherever it stands: a
    /// table column shows a job id with nothing around it to know it by.
    pub fn jobs(self, json: &serde_json::Value) -> Self {
        match json {
            serde_json::Value::Object(map) => map.iter().fold(self, |this, (key, value)| {
                match (key.as_str(), value.as_str()) {
                    ("job_id", Some(id)) => this.value(id, "[JOB_ID]"),
                    _ => this.jobs(value),
                }
            }),
            serde_json::Value::Array(list) => list.iter().fold(self, |this, v| this.jobs(v)),
            _ => self,
        }
    }

    /// Replace a directory, as given and as the file system resolves it, by `label`.
    pub fn path(self, dir: &Path, label: &str) -> Self {
        let this = self.value(&dir.display().to_string(), label);
        match std::fs::canonicalize(dir) {
            Ok(real) if real != dir => this.value(&real.display().to_string(), label),
            _ => this,
        }
    }

    /// A run's exit code, stdout and stderr, redacted, as a snapshot shows them.
    pub fn run(&self, run: &super::Run) -> String {
        self.apply(&format!("{run:?}"))
    }

    /// A JSON value pretty-printed and redacted.
    pub fn json(&self, json: &serde_json::Value) -> String {
        self.apply(&serde_json::to_string_pretty(json).unwrap())
    }

    pub fn apply(&self, text: &str) -> String {
        let mut text = text.to_string();
        for (re, label) in &self.values {
            text = replace(&text, re, label);
        }
        for (re, label) in rules() {
            text = replace(&text, re, label);
        }
        text
    }
}

/// Replace every match of `re` by `label` (with `${N}` groups), padding table cells.
fn replace(text: &str, re: &Regex, label: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for caps in re.captures_iter(text) {
        let m = caps.get(0).unwrap();
        if m.start() < rest {
            continue;
        }
        out.push_str(&text[rest..m.start()]);
        let mut new = String::new();
        Captures::expand(&caps, label, &mut new);
        let spaces = text[m.end()..].bytes().take_while(|&b| b == b' ').count();
        rest = m.end();
        if spaces >= 2 {
            let cell = text[m.start()..m.end()].chars().count() + spaces;
            let width = new.chars().count();
            new.push_str(&" ".repeat(cell.saturating_sub(width).max(1)));
            rest += spaces;
        }
        out.push_str(&new);
    }
    out.push_str(&text[rest..]);
    out
}

#[test]
fn redaction_keeps_table_columns_and_words() {
    let r = Redactions::new().value("/tmp/x", "[PROJECT]");
    assert_eq!(
        r.apply(
            "run a-b1-20261122-134852-c022   ok · job 12 · 2026-11-22T13:48:52Z · /tmp/x/y · /tmp/xy"
        ),
        "run a-b1-[STAMP]                ok · job [JOB_ID] · [TIME] · [PROJECT]/y · /tmp/xy"
    );
    let r = Redactions::new().jobs(&serde_json::json!([{"job_id": "4242"}]));
    assert_eq!(r.apply("4242     done 42420"), "[JOB_ID] done 42420");
    assert_eq!(r.apply("pid=77 sett…"), "pid=[PID] …");
}
