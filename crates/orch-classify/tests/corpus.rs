//! The classifier on real logs: every excerpt in `tests/corpus/` (and, scored apart, in
//! `tests/corpus/holdout/`) is a verbatim piece of a log someone pasted into a public issue
//! of a framework orch runs, listed with its URL, its label and why in the directory's
//! `sources.tsv`. Each is classified the way `orch classify` does it ([`classify_path`]) and
//! scored twice: the exact class, and the *action* it leads the planner to
//! (`orch-core/src/planner/mod.rs::next`):
//!
//! * **recover** — `gpu_oom`, `kv_cache`, `host_oom`: the memory ladder answers them;
//! * **resubmit** — `timeout`, `preempted`, `node_fail`, `hang`: the same configuration again
//!   from the last checkpoint; `nccl_timeout`: no default ladder step answers it, so it is
//!   retried once from the last checkpoint;
//! * **give up** — `error`, and `none` (a failed job whose log names nothing is `error`,
//!   `orch-core/src/outcome.rs::decide`).
//!
//! The test fails on any *memory false alarm* (a case labelled with a non-memory class
//! classified as a memory class: orch would shrink a job for nothing), when the tuned split
//! acts correctly on fewer than [`TUNED_FLOOR`] of its cases, or the holdout on fewer than
//! [`HOLDOUT_FLOOR`], or the second holdout (`holdout2/`) on fewer than [`HOLDOUT2_FLOOR`], or
//! the third (`holdout3/`) on fewer than [`HOLDOUT3_FLOOR`].
//! Each holdout was written in before the classifier was tuned for it and scored first as it
//! stood.
//!
//! To add a case: save the excerpt verbatim (strip only GitHub's quote markers and markdown
//! fences) as `<framework>-<short-shape>.log` and add its row to `sources.tsv`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use orch_classify::{FailureClass, classify_path};

/// Share of the tuned split that must be acted on correctly.
const TUNED_FLOOR: f64 = 0.95;
/// Share of the holdout that must be acted on correctly. It was 28/34 before issue 20's
/// changes and 32/34 (94.1 %) when first scored after tuning; a generic fix for one of its two
/// misses (a glog CUDA check failed with error 2, Caffe's `Check failed: error == cudaSuccess
/// (2 vs. 0)  out of memory`) made it 33/34 (97.1 %), so it no longer measures unseen shapes
/// alone. The miss: an interactive shell's bare `Killed`, which alone is no evidence.
const HOLDOUT_FLOOR: f64 = 0.97;

/// Share of the second holdout that must be acted on correctly. Its 27 excerpts were collected
/// for issue 20's last round and scored before any change made for them: 21/27 (77.8 %), 0
/// memory false alarms. After the changes that generalised (a kernel's device-side assert line,
/// C++ `CUDA Error:`, NCCL's non-memory `Cuda failure`, `std::bad_alloc`, c10's older CPU
/// allocator message, the pre-2.2 raylet kill line, NCCL's heartbeat monitor, a cause's
/// exception repr mid-line, a traceback without frames): 26/27 (96.3 %). The miss: a
/// terminal that wrapped the watchdog's timeout mid-word.
const HOLDOUT2_FLOOR: f64 = 0.96;

/// Share of the third holdout that must be acted on correctly. Its 22 excerpts (issue 21's
/// last session: verl, OpenRLHF, AReaL, RLinf, EasyR1, rl-swarm, vLLM, SGLang, Ray, Slurm, a
/// cloud worker, the NVIDIA driver) were collected by someone who had not read the classifier,
/// and scored before any change made for them: 20/22 (90.9 %), exact 19/22, 0 memory false
/// alarms. The misses: the driver's `Xid 79, GPU has fallen off the bus` (no node-failure
/// rule outside Slurm) and GCP's `termination is imminent` (no preemption rule outside
/// Slurm); and, with the right action, a paste that cut `RayTaskError(ValueErr`. After the
/// three generic rules: 22/22.
const HOLDOUT3_FLOOR: f64 = 0.95;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// One row of `sources.tsv`.
struct Case {
    file: String,
    url: String,
    label: FailureClass,
}

fn parse_class(s: &str) -> FailureClass {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .unwrap_or_else(|_| panic!("unknown class {s:?} in sources.tsv"))
}

/// The rows of `dir/sources.tsv`, checked against the `.log` files in `dir`: every file has
/// exactly one row, every row a file and a URL.
fn cases(dir: &Path) -> Vec<Case> {
    let table = std::fs::read_to_string(dir.join("sources.tsv")).expect("sources.tsv");
    let mut lines = table.lines();
    assert_eq!(
        lines.next(),
        Some("file\turl\tframework\tlabel\twhy"),
        "sources.tsv header"
    );
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 5, "sources.tsv row {}: {line:?}", i + 2);
        assert!(
            cols[1].starts_with("https://github.com/"),
            "{}: a row without a URL is not evidence",
            cols[0]
        );
        assert!(!cols[4].trim().is_empty(), "{}: say why", cols[0]);
        rows.push(Case {
            file: cols[0].to_string(),
            url: cols[1].to_string(),
            label: parse_class(cols[3]),
        });
    }
    let mut listed: Vec<&str> = rows.iter().map(|c| c.file.as_str()).collect();
    listed.sort_unstable();
    let dup = listed.windows(2).find(|w| w[0] == w[1]);
    assert!(dup.is_none(), "listed twice: {dup:?}");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .expect("corpus dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".log"))
        .collect();
    on_disk.sort_unstable();
    assert_eq!(
        on_disk,
        listed,
        "{}: files vs sources.tsv rows",
        dir.display()
    );
    rows
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Act {
    Recover,
    Resubmit,
    GiveUp,
}

fn act(c: FailureClass) -> Act {
    use FailureClass::*;
    match c {
        GpuOom | KvCache | HostOom => Act::Recover,
        Timeout | Preempted | NodeFail | Hang | NcclTimeout => Act::Resubmit,
        Error | None => Act::GiveUp,
    }
}

fn is_memory(c: FailureClass) -> bool {
    act(c) == Act::Recover
}

/// The scores of one split.
struct Score {
    total: usize,
    exact: usize,
    acted: usize,
    false_alarms: Vec<String>,
    report: String,
}

impl Score {
    fn acted_share(&self) -> f64 {
        self.acted as f64 / self.total.max(1) as f64
    }
}

fn score(dir: &Path, name: &str) -> Score {
    let rows = cases(dir);
    // label -> (cases, exact, acted)
    let mut by_class: BTreeMap<&'static str, (usize, usize, usize)> = BTreeMap::new();
    let mut confusion = String::new();
    let mut false_alarms = Vec::new();
    let (mut exact, mut acted) = (0, 0);
    for case in &rows {
        let v =
            classify_path(&dir.join(&case.file)).unwrap_or_else(|e| panic!("{}: {e}", case.file));
        let ok_exact = v.class == case.label;
        let ok_act = act(v.class) == act(case.label);
        exact += usize::from(ok_exact);
        acted += usize::from(ok_act);
        let e = by_class.entry(case.label.as_str()).or_default();
        e.0 += 1;
        e.1 += usize::from(ok_exact);
        e.2 += usize::from(ok_act);
        if !ok_exact {
            let evidence = v.evidence.as_ref().map_or(String::new(), |e| {
                format!(" (line {}: {:.100})", e.line, e.text)
            });
            let _ = writeln!(
                confusion,
                "  {}{} {} -> {}{evidence}  [{}]",
                if ok_act { "~" } else { "✗" },
                if is_memory(v.class) && !is_memory(case.label) {
                    " FALSE ALARM"
                } else {
                    ""
                },
                case.label.as_str(),
                v.class.as_str(),
                case.file
            );
        }
        if is_memory(v.class) && !is_memory(case.label) {
            false_alarms.push(format!("{} ({})", case.file, case.url));
        }
    }
    let total = rows.len();
    let pct = |n: usize, of: usize| 100.0 * n as f64 / of.max(1) as f64;
    let mut report = format!(
        "{name}: {total} cases; acted on correctly {acted}/{total} = {:.1} %; exact class {exact}/{total} = {:.1} %; memory false alarms {}\n",
        pct(acted, total),
        pct(exact, total),
        false_alarms.len()
    );
    for (class, (n, ex, ac)) in &by_class {
        let _ = writeln!(
            report,
            "  {class:<13} {n:>3} cases  exact {ex:>3} ({:>5.1} %)  acted {ac:>3} ({:>5.1} %)",
            pct(*ex, *n),
            pct(*ac, *n)
        );
    }
    if !confusion.is_empty() {
        report.push_str("  confusion (✗ wrong action, ~ right action, other class):\n");
        report.push_str(&confusion);
    }
    Score {
        total,
        exact,
        acted,
        false_alarms,
        report,
    }
}

fn check(s: &Score, floor: f64) {
    eprintln!("{}", s.report);
    assert!(
        s.false_alarms.is_empty(),
        "memory false alarms: {:?}",
        s.false_alarms
    );
    assert!(
        s.acted_share() >= floor,
        "acted on correctly {}/{} < {:.0} %",
        s.acted,
        s.total,
        floor * 100.0
    );
    assert!(s.exact <= s.acted);
}

#[test]
fn tuned_split() {
    let s = score(&corpus_dir(), "corpus (tuned)");
    check(&s, TUNED_FLOOR);
}

#[test]
fn holdout_split() {
    let s = score(&corpus_dir().join("holdout"), "corpus (holdout)");
    check(&s, HOLDOUT_FLOOR);
}

#[test]
fn second_holdout_split() {
    let s = score(&corpus_dir().join("holdout2"), "corpus (second holdout)");
    check(&s, HOLDOUT2_FLOOR);
}

#[test]
fn third_holdout_split() {
    let s = score(&corpus_dir().join("holdout3"), "corpus (third holdout)");
    check(&s, HOLDOUT3_FLOOR);
}
