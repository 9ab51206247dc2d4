//! The calibration set, scored: every row estimated with the real estimator, the table
//! printed (`cargo test -p orch-memory calibration -- --nocapture`), the band measured on the
//! tuning rows and checked against `bands.yaml`, the held-out rows scored with that band.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{Band, Residual, bands, excess, residuals};
use crate::estimate::trainers::verl::resident_at_rollout_init_gib;
use crate::estimate::vllm::Vllm;
use crate::estimate::{
    ArealConfig, Estimate, FailKind, Hardware, SimConfig, Trainer, VerlConfig, Workload, estimate,
};
use crate::overrides::Overrides;
use crate::shape::{Arch, lookup};

/// The goal (issue 21): every real figure the evidence carries within this share of the
/// prediction.
const GOAL: f64 = 0.10;

/// The least error a residual leaves open where a row's evidence bounds one side only: the
/// verl update's and passes' peaks measured on one H100 (`calibration/measured/`) are within
/// 2.5 % of the estimate allocated and within 13 % reserved at the update, 5 % between the two.
const OPEN_SIDE_FLOOR: f64 = 0.05;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    id: String,
    source: String,
    evidence: String,
    model: String,
    #[serde(default)]
    shape_of: Option<String>,
    card: String,
    card_gib: f64,
    card_source: String,
    outcome: Outcome,
    #[serde(default)]
    figure: Option<Figure>,
    #[serde(default)]
    assumed: Option<String>,
    #[serde(default)]
    logged: Option<Logged>,
    /// The highest device reading the run's own log printed (AReaL's `device memory
    /// used/total (GB)`, torch's `mem_get_info` in GiB: everything on the card, other
    /// processes' included), scored against the predicted peak ([`GOAL`]).
    #[serde(default)]
    reading: Option<Reading>,
    /// An OOM report the estimator predicts to fit, and why (README.md, "known_miss"): the test
    /// fails when an unmarked OOM row is predicted to fit, and when a marked one no longer is.
    #[serde(default)]
    known_miss: Option<String>,
    /// The OOM report is the rollout engine refusing to start (vLLM's "No available memory
    /// for the cache blocks" or "To serve at least one request …"): its KV cache, not a peak
    /// beyond the card. The estimate must fail the same way, and the row bounds nothing of
    /// the peak (its residual is the open side both ways).
    #[serde(default)]
    engine_start_failure: bool,
    /// vLLM's own figures in that refusal ("(X GiB KV cache is needed, which is larger than
    /// the available KV cache memory (Y GiB)"): the estimate's must print the same, to the
    /// message's two decimals.
    #[serde(default)]
    engine_kv: Option<EngineKv>,
    /// The trainer's release the row ran (what `pip show` would print for it, as an
    /// experiment's `trainer_version:` states it): required of verl's rows, where releases
    /// size training differently (expandable segments from 0.6 on).
    #[serde(default)]
    trainer_version: Option<crate::estimate::TrainerVersion>,
    /// Where the release is read from (a version file at the source's commit, a report's
    /// words, the release current at its date).
    #[serde(default)]
    trainer_version_source: Option<String>,
    overrides: BTreeMap<String, serde_yaml::Value>,
}

/// A real logged peak: verl's `perf/max_memory_allocated_gb` / `perf/max_memory_reserved_gb`
/// (`torch.cuda.max_memory_allocated()` / `max_memory_reserved()` in GiB, read at the end of
/// `update_actor`, never reset by verl: the high-water mark of the worker process so far).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Logged {
    /// `perf/max_memory_allocated_gb`, the highest value the run logged.
    allocated_gib: f64,
    /// `perf/max_memory_reserved_gb`, the highest value the run logged.
    reserved_gib: f64,
    /// The log the figures are read from (a URL at a commit).
    log: String,
    /// The exact metrics excerpt (the step that logged the figures first).
    line: String,
    /// vLLM runs in sleep mode (`CuMemAllocator`): its weights and KV cache are allocated
    /// through a torch memory pool in the same process, so torch's counters keep them, asleep
    /// or not (README.md, "What a logged peak measures").
    vllm_pool_counted: bool,
    /// The run's vLLM is the V1 engine before vllm-project/vllm#19312, which sized its KV cache after subtracting
    /// what verl's FSDP models already held in the process (`resident_at_rollout_init_gib`):
    /// the log shows `vllm.v1.worker.gpu_worker` and verl at that commit pins `vllm<=0.8.3`.
    /// Without it (V0, or later V1 releases) the pool is `Vllm::profile`'s.
    #[serde(default)]
    vllm_v1_kv_after_trainer: bool,
}

/// A device reading a run logged ([`Row::reading`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reading {
    /// GiB in use on the card at the highest reading.
    device_gib: f64,
    /// The exact excerpt, which holds the figure as printed.
    line: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Outcome {
    Fits,
    Oom,
}

/// vLLM's KV-cache figures in its start-up refusal.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EngineKv {
    needed_gib: f64,
    available_gib: f64,
}

/// A real figure: torch's OOM message proves the job needed at least `in use + tried`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Figure {
    needed_at_least_gib: f64,
    read: String,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("calibration")
}

fn rows(file: &str) -> Vec<Row> {
    let path = dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let rows: Vec<Row> = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    for r in &rows {
        // A row without a source is not evidence.
        assert!(
            r.source.starts_with("https://") || r.source.contains('@') || r.source.contains('/'),
            "{}: no source",
            r.id
        );
        assert!(
            !r.evidence.is_empty() && !r.card_source.is_empty(),
            "{}",
            r.id
        );
        if let Some(d) = &r.reading {
            assert!(
                d.line.contains(&format!("{:.2}/", d.device_gib)) && r.evidence.contains(&d.line),
                "{}: the reading {} is not in the excerpt, or the excerpt not in the evidence",
                r.id,
                d.device_gib
            );
        }
        if let Some(l) = &r.logged {
            // The figures are the excerpt's, as printed.
            assert!(l.log.starts_with("https://"), "{}: the log's URL", r.id);
            for (key, gib) in [
                ("max_memory_allocated_gb", l.allocated_gib),
                ("max_memory_reserved_gb", l.reserved_gib),
            ] {
                assert!(
                    l.line.contains(&format!("perf/{key}:{gib}"))
                        || l.line.contains(&format!("perf/{key}: {gib}")),
                    "{}: {key} {gib} is not in the excerpt",
                    r.id
                );
            }
        }
    }
    rows
}

fn scalar(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        other => serde_yaml::to_string(other)
            .expect("a scalar")
            .trim()
            .to_string(),
    }
}

/// The row's keys, as orch reads them (the model's key set from `model:`).
fn row_overrides(trainer: Trainer, r: &Row) -> Overrides {
    let mut o = Overrides::new();
    let model_key = match trainer {
        Trainer::Areal => "actor.path",
        _ => "actor_rollout_ref.model.path",
    };
    o.set(model_key, &r.model);
    for (k, v) in &r.overrides {
        o.set(k, &scalar(v));
    }
    o
}

fn row_arch(r: &Row) -> Arch {
    let arch = lookup(r.shape_of.as_deref().unwrap_or(&r.model));
    assert!(
        arch.known,
        "{}: the model's shape is not in orch's table",
        r.id
    );
    arch
}

/// The row's estimate, as `orch estimate` would make it for that card.
fn estimate_row(trainer: Trainer, r: &Row) -> Estimate {
    let o = row_overrides(trainer, r);
    let (workload, gpus_per_node) = match trainer {
        Trainer::Areal => {
            let a = ArealConfig::from_overrides(&o);
            let n = a.n_gpus_per_node;
            (Workload::Areal(a), n)
        }
        _ => {
            let v = VerlConfig {
                version: r.trainer_version.clone(),
                ..VerlConfig::from_overrides(&o)
            };
            let n = v.n_gpus_per_node;
            (Workload::Verl(Box::new(v)), n)
        }
    };
    let arch = row_arch(r);
    let hw = Hardware {
        gpu_name: r.card.clone(),
        gpu_mem_gib: r.card_gib,
        gpus_per_node,
        // Host RAM is not what the set is evidence of.
        host_mem_gib: 4096.0,
        expandable_segments: false,
    };
    estimate(&SimConfig {
        hw,
        workload,
        resumed: false,
        arch: Some(arch),
    })
}

fn peak(e: &Estimate) -> f64 {
    e.train_peak_gib.max(e.rollout_peak_gib)
}

struct Scored {
    id: String,
    outcome: Outcome,
    engine_start_failure: bool,
    known_miss: bool,
    estimate: Estimate,
    card_gib: f64,
    figure_gib: Option<f64>,
    logged: Option<LoggedScore>,
}

/// A logged peak beside what orch predicts of the same counters.
#[derive(Debug, Clone, Copy)]
struct LoggedScore {
    allocated_gib: f64,
    reserved_gib: f64,
    predicted_allocated_gib: f64,
    predicted_reserved_gib: f64,
    /// vLLM's weights and KV cache in the counters (0 when its pool is not counted).
    pool_gib: f64,
}

impl LoggedScore {
    /// (figure, logged, predicted, prediction's error as a share of the logged figure).
    fn figures(&self) -> [(&'static str, f64, f64, f64); 2] {
        let err = |logged: f64, predicted: f64| predicted / logged - 1.0;
        [
            (
                "allocated",
                self.allocated_gib,
                self.predicted_allocated_gib,
                err(self.allocated_gib, self.predicted_allocated_gib),
            ),
            (
                "reserved",
                self.reserved_gib,
                self.predicted_reserved_gib,
                err(self.reserved_gib, self.predicted_reserved_gib),
            ),
        ]
    }
}

/// What orch predicts of torch's peak counters in verl's worker process: the training phase's
/// own allocations (`train_allocated_gib`, `train_reserved_gib`: the largest over the step's
/// passes — old log-probs, reference, values, the actor update) plus, when vLLM sleeps through its own pool, the
/// weights and KV cache vLLM allocated through it (`Vllm::profile`: what is left of
/// `gpu_memory_utilization × card` after its profile run's workspace), which the counters keep
/// while vLLM is asleep. README.md, "What a logged peak measures".
fn predicted_counters(trainer: Trainer, r: &Row, e: &Estimate, l: &Logged) -> (f64, f64, f64) {
    let pool = match trainer {
        Trainer::Verl if l.vllm_pool_counted => {
            let v = VerlConfig::from_overrides(&row_overrides(trainer, r));
            let arch = row_arch(r);
            let vllm = Vllm::profile(&arch, &v, r.card_gib);
            let held = if l.vllm_v1_kv_after_trainer {
                resident_at_rollout_init_gib(&v, &arch)
            } else {
                0.0
            };
            vllm.weights_gib + (vllm.kv_gib - held).max(0.0)
        }
        _ => 0.0,
    };
    (
        e.train_allocated_gib + pool,
        e.train_reserved_gib + pool,
        pool,
    )
}

/// The logged figures outside the goal: (row, figure, error).
fn goal_misses(set: &[Scored]) -> Vec<(String, &'static str, f64)> {
    set.iter()
        .filter_map(|s| s.logged.map(|l| (s.id.clone(), l)))
        .flat_map(|(id, l)| {
            l.figures()
                .into_iter()
                .filter(|f| f.3.abs() > GOAL)
                .map(move |f| (id.clone(), f.0, f.3))
        })
        .collect()
}

/// What the row allows of `real peak / predicted peak`, the open side closed by the band.
/// What row `s` allows of real / predicted peak: its evidence bounds one side, and `open`
/// (the trainer's band, at least [`OPEN_SIDE_FLOOR`]: see [`open_side`]) the side the
/// evidence leaves open.
fn residual(s: &Scored, open: f64) -> Residual {
    let p = peak(&s.estimate);
    let (edge_lo, edge_hi) = (1.0 - open, 1.0 + open);
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    if let Some(l) = s.logged {
        // The reserved counter's peak is the pool vLLM allocated (mapped while it is awake,
        // unmapped while it sleeps) plus the default pool's segments, which are on the device:
        // the device held at least the latter plus what torch does not count, and at most the
        // whole counter plus that. The band closes what the counters leave open.
        let uncounted = s.estimate.train_peak_gib - s.estimate.train_reserved_gib;
        let at_least = (l.reserved_gib - l.pool_gib + uncounted) / p;
        let mut at_most = ((l.reserved_gib + uncounted) / p).min(edge_hi);
        if s.outcome == Outcome::Fits {
            at_most = at_most.min(s.card_gib / p);
        }
        let lo = r3(at_least.max(edge_lo));
        return Residual {
            id: s.id.clone(),
            lo,
            hi: r3(at_most).max(lo),
            bound: format!(
                "logged: max_memory_reserved {:.2} GiB with vLLM's pool of {:.2} in it, predicted peak {p:.2}",
                l.reserved_gib, l.pool_gib
            ),
        };
    }
    match s.outcome {
        Outcome::Fits => {
            let hi = r3((s.card_gib / p).min(edge_hi));
            Residual {
                id: s.id.clone(),
                lo: r3(edge_lo).min(hi),
                hi,
                bound: format!(
                    "ran: real ≤ the card's {:.2} GiB, predicted {p:.2}",
                    s.card_gib
                ),
            }
        }
        Outcome::Oom if s.engine_start_failure => Residual {
            id: s.id.clone(),
            lo: r3(edge_lo),
            hi: r3(edge_hi),
            bound: format!(
                "the rollout engine refused to start (its KV cache): nothing of the peak, predicted {p:.2}"
            ),
        },
        Outcome::Oom => {
            let (need, what) = match s.figure_gib {
                Some(f) => (f, "torch's figure"),
                None => (s.card_gib, "the card's"),
            };
            // An OOM the estimate under-predicts says the truth is at least that much more:
            // the band does not cap it.
            let lo = r3((need / p).max(edge_lo));
            Residual {
                id: s.id.clone(),
                lo,
                hi: r3(edge_hi).max(lo),
                bound: format!("out of memory: real ≥ {what} {need:.2} GiB, predicted {p:.2}"),
            }
        }
    }
}

/// `residuals.yaml` as the rows derive it (one trainer's part).
/// The side of a residual a row's evidence leaves open: the trainer's band, and no less than
/// [`OPEN_SIDE_FLOOR`]. A band of 0 (no row known to run is predicted over its card) bounds no
/// error on either side.
fn open_side(band: &Band) -> f64 {
    band.over().max(OPEN_SIDE_FLOOR)
}

fn residuals_yaml(trainer: &str, rows: &[Residual]) -> String {
    let mut out = format!("{trainer}:\n");
    for r in rows {
        out += &format!(
            "  - {{id: {}, lo: {:.3}, hi: {:.3}, bound: \"{}\"}}\n",
            r.id, r.lo, r.hi, r.bound
        );
    }
    out
}

const RESIDUALS_HEADER: &str = "\
# What each calibration row allows of real peak / predicted peak (crates/orch-memory/src/calibration.rs).
# Derived from the rows by `cargo test -p orch-memory calibration`, which fails when this file
# disagrees (ORCH_CALIBRATION_BLESS=1 rewrites it). A row that ran bounds the ratio from above,
# an OOM report from below; the open side is the trainer's band (bands.yaml), used both ways,
# and no less than 5 % (OPEN_SIDE_FLOOR in the test: what the H100 measurement supports).
# The simulator's calibrated truth (ORCH_SIM_TRUTH=calibrated) draws from these ranges.
";

fn verdict_right(s: &Scored, band: &Band) -> bool {
    band.admits(&s.estimate) == (s.outcome == Outcome::Fits)
}

fn score(trainer: Trainer, file: &str) -> Vec<Scored> {
    rows(file)
        .into_iter()
        .map(|r| {
            if trainer == Trainer::Verl {
                assert!(
                    r.trainer_version.is_some()
                        && r.trainer_version_source.as_ref().is_some_and(|s| !s.is_empty()),
                    "{}: verl's release and where it is read from (trainer_version, trainer_version_source)",
                    r.id
                );
            }
            let e = estimate_row(trainer, &r);
            let failure = e
                .failure
                .as_ref()
                .map_or("fits".to_string(), |f| f.to_string());
            let figure = r.figure.as_ref().map_or("-".to_string(), |f| {
                format!(
                    "≥ {:.2} GiB ({}; predicted {:+.1} %)",
                    f.needed_at_least_gib,
                    f.read,
                    (peak(&e) / f.needed_at_least_gib - 1.0) * 100.0
                )
            });
            let logged = r.logged.as_ref().map(|l| {
                let (a, res, pool) = predicted_counters(trainer, &r, &e, l);
                LoggedScore {
                    allocated_gib: l.allocated_gib,
                    reserved_gib: l.reserved_gib,
                    predicted_allocated_gib: a,
                    predicted_reserved_gib: res,
                    pool_gib: pool,
                }
            });
            let logged_text = logged.map_or("-".to_string(), |l| {
                l.figures()
                    .iter()
                    .map(|(what, real, predicted, err)| {
                        format!(
                            "{what} logged {real:.2}, predicted {predicted:.2} ({:+.1} %){}",
                            err * 100.0,
                            if err.abs() > GOAL { " OUTSIDE 10 %" } else { "" }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            let nodes = r
                .overrides
                .get("trainer.nnodes")
                .or_else(|| r.overrides.get("cluster.n_nodes"))
                .map_or("1".into(), scalar);
            println!(
                "| {} | {} on {nodes} × {} × {} ({:.2} GiB) | {:?} | {} | {} | {:.1} GiB ({:+.0} % of the card): {} |{}",
                r.id,
                r.model,
                e.gpus,
                r.card,
                r.card_gib,
                r.outcome,
                figure,
                logged_text,
                peak(&e),
                (peak(&e) / r.card_gib - 1.0) * 100.0,
                failure,
                r.assumed
                    .as_ref()
                    .map_or(String::new(), |a| format!(" assumed: {a}")),
            );
            if std::env::var_os("ORCH_CALIBRATION_BREAKDOWN").is_some() {
                for i in &e.train_items {
                    println!("      {:>7.2}  {}", i.gib, i.label);
                }
            }
            if let Some(f) = &r.figure {
                // Predicted peaks within 10 % of every real figure (a lower bound: not below it).
                assert!(
                    peak(&e) >= 0.9 * f.needed_at_least_gib,
                    "{}: predicted {:.2} GiB, the job needed at least {:.2}",
                    r.id,
                    peak(&e),
                    f.needed_at_least_gib
                );
            }
            if let Some(why) = &r.known_miss {
                assert!(
                    r.outcome == Outcome::Oom && !why.trim().is_empty(),
                    "{}: known_miss is for an OOM report, with why",
                    r.id
                );
            }
            if r.engine_start_failure {
                let engine = matches!(
                    e.failure.as_ref().map(|f| &f.kind),
                    Some(
                        FailKind::VllmNoCacheBlocks { .. }
                            | FailKind::VllmMaxLen { .. }
                            | FailKind::SglangNotEnough { .. }
                    )
                );
                assert!(
                    r.outcome == Outcome::Oom && engine,
                    "{}: an engine's start-up failure, predicted {:?}",
                    r.id,
                    e.failure
                );
            }
            if let Some(kv) = &r.engine_kv {
                let printed = match e.failure.as_ref().map(|f| &f.kind) {
                    Some(FailKind::VllmMaxLen {
                        needed_gib,
                        available_gib,
                        ..
                    }) => Some((*needed_gib, *available_gib)),
                    _ => None,
                };
                let r2 = |x: f64| (x * 100.0).round() / 100.0;
                assert_eq!(
                    printed.map(|(n, a)| (r2(n), r2(a))),
                    Some((kv.needed_gib, kv.available_gib)),
                    "{}: vLLM's figures",
                    r.id
                );
            }
            Scored {
                known_miss: r.known_miss.is_some(),
                engine_start_failure: r.engine_start_failure,
                id: r.id,
                outcome: r.outcome,
                estimate: e,
                card_gib: r.card_gib,
                figure_gib: r.figure.as_ref().map(|f| f.needed_at_least_gib),
                logged,
            }
        })
        .collect()
}

/// A logged figure the estimator misses by more than the goal, as `gaps.yaml` lists it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Gap {
    id: String,
    figure: String,
    error_pct: f64,
    why: String,
}

/// The gaps `gaps.yaml` lists for `trainer`.
fn listed_gaps(trainer: &str) -> Vec<Gap> {
    let path = dir().join("gaps.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut all: BTreeMap<String, Vec<Gap>> =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    all.remove(trainer).unwrap_or_default()
}

/// The logged figures outside the goal are exactly the ones `gaps.yaml` lists, with the error
/// it states (to 0.1 %): a gap that opens, closes or moves fails here until the file says so.
fn assert_gaps_listed(trainer: &str, set: &[Scored]) {
    let measured = goal_misses(set);
    let listed = listed_gaps(trainer);
    for g in &listed {
        assert!(!g.why.trim().is_empty(), "gaps.yaml: {} says not why", g.id);
    }
    let as_yaml = |m: &[(String, &'static str, f64)]| {
        m.iter()
            .map(|(id, figure, err)| {
                format!(
                    "  - {{id: {id}, figure: {figure}, error_pct: {:.1}}}",
                    err * 100.0
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let same = measured.len() == listed.len()
        && measured.iter().zip(&listed).all(|((id, figure, err), g)| {
            *id == g.id && *figure == g.figure && (err * 100.0 - g.error_pct).abs() < 0.051
        });
    println!(
        "logged figures outside the goal (±{:.0} %): {}",
        GOAL * 100.0,
        measured.len()
    );
    assert!(
        same,
        "calibration/gaps.yaml does not list the logged figures outside the goal; they are:\n{}",
        as_yaml(&measured)
    );
}

/// The band the tuning rows support: the largest over-prediction a known-good row shows.
fn measured_over_pct(tuning: &[Scored]) -> u32 {
    let worst = tuning
        .iter()
        .filter(|s| s.outcome == Outcome::Fits)
        .filter_map(|s| excess(&s.estimate))
        .fold(0.0_f64, f64::max);
    (worst * 100.0 - 1e-9).ceil().max(0.0) as u32
}

/// The trainers the set calibrates: (trainer, tuning rows, held-out rows).
const SETS: [(Trainer, &str, Option<&str>); 2] = [
    (Trainer::Verl, "verl.yaml", Some("verl-holdout.yaml")),
    (Trainer::Areal, "areal.yaml", Some("areal-holdout.yaml")),
];

/// One trainer's set, scored: every row, the band the tuning rows measure (with its verdicts on
/// the tuning and held-out rows) and the residuals the rows derive under it. A public OOM report
/// predicted to fit fails here unless the row marks it (`known_miss`), and a marked row that the
/// estimator now predicts to fail fails too, until the mark goes.
fn calibrate(
    trainer: Trainer,
    tuning_file: &str,
    holdout_file: Option<&str>,
) -> (Vec<Scored>, Band, Vec<Residual>) {
    println!("tuning rows (calibration/{tuning_file}):");
    let tuning = score(trainer, tuning_file);
    let holdout = holdout_file.map_or_else(Vec::new, |f| {
        println!("held-out rows (calibration/{f}):");
        score(trainer, f)
    });
    for s in tuning.iter().chain(&holdout) {
        if s.outcome == Outcome::Oom {
            assert!(
                s.estimate.failure.is_some() || s.known_miss,
                "{}: a public OOM report, predicted to fit",
                s.id
            );
            assert!(
                !(s.known_miss && s.estimate.failure.is_some()),
                "{}: marked known_miss, now predicted to fail: remove the mark",
                s.id
            );
        }
    }
    let mut measured = Band {
        over_pct: measured_over_pct(&tuning),
        configurations: (tuning.len() + holdout.len()) as u32,
        tuning_right: 0,
        tuning_rows: tuning.len() as u32,
        holdout_right: 0,
        holdout_rows: holdout.len() as u32,
    };
    let right = |set: &[Scored]| set.iter().filter(|s| verdict_right(s, &measured)).count() as u32;
    for s in tuning.iter().chain(&holdout) {
        if !verdict_right(s, &measured) {
            println!("wrong with the band: {}", s.id);
        }
    }
    (measured.tuning_right, measured.holdout_right) = (right(&tuning), right(&holdout));
    println!("measured: {}", measured.describe(trainer));
    let derived: Vec<Residual> = tuning
        .iter()
        .chain(&holdout)
        .map(|s| residual(s, open_side(&measured)))
        .collect();
    let all: Vec<Scored> = tuning.into_iter().chain(holdout).collect();
    (all, measured, derived)
}

/// The trainer's set against what ships: its band in `bands.yaml`, its residuals in
/// `residuals.yaml`, its logged gaps in `gaps.yaml`.
fn check_shipped(trainer: Trainer) -> Vec<Scored> {
    let (_, tuning_file, holdout_file) = SETS
        .iter()
        .find(|(t, _, _)| *t == trainer)
        .expect("a calibrated trainer");
    let (all, measured, derived) = calibrate(trainer, tuning_file, *holdout_file);
    assert_eq!(
        bands().get(trainer.name()),
        Some(&measured),
        "calibration/bands.yaml disagrees with what the set measures"
    );
    assert_eq!(residuals().get(trainer.name()), Some(&derived));
    assert_gaps_listed(trainer.name(), &all);
    all
}

#[test]
fn verl_calibration_matches_the_shipped_band() {
    let all = check_shipped(Trainer::Verl);
    assert!(
        all.iter().filter(|s| s.logged.is_some()).count() >= 4,
        "the set's logged peaks"
    );
}

/// AReaL's rows are scored like verl's: configurations that ran and OOM reports with torch's
/// figures (a fork's single-GPU runs, SGLang and the trainer on one card) measure its band.
#[test]
fn areal_calibration_matches_the_shipped_band() {
    let all = check_shipped(Trainer::Areal);
    assert!(
        all.iter().any(|s| s.outcome == Outcome::Oom),
        "an AReaL band needs rows that bound the error from the failing side"
    );
}

/// `residuals.yaml`, every trainer's part, as the rows derive it (ORCH_CALIBRATION_BLESS=1
/// rewrites it).
#[test]
fn residuals_file_matches_the_rows() {
    let mut text = RESIDUALS_HEADER.to_string();
    for (trainer, tuning, holdout) in SETS {
        let (_, _, derived) = calibrate(trainer, tuning, holdout);
        text += &residuals_yaml(trainer.name(), &derived);
    }
    let path = dir().join("residuals.yaml");
    if std::env::var_os("ORCH_CALIBRATION_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    print!("{text}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "calibration/residuals.yaml disagrees with the rows (ORCH_CALIBRATION_BLESS=1 rewrites it)"
    );
}

#[test]
fn every_trainer_with_a_band_has_rows() {
    for name in bands().keys() {
        assert!(dir().join(format!("{name}.yaml")).is_file(), "{name}");
        assert!(Trainer::parse(name).is_some(), "{name}");
    }
}

/// Every device reading a row carries is predicted within the goal (±10 %): the issue counts
/// them among the real figures (the reading is sampled, so a peak between two readings is
/// above it; the estimate must not be below it by more than the goal, nor above it by more).
#[test]
fn device_readings_are_predicted_within_the_goal() {
    let mut read = 0;
    for (trainer, tuning, holdout) in SETS {
        for file in std::iter::once(tuning).chain(holdout) {
            for r in rows(file) {
                let Some(d) = &r.reading else { continue };
                read += 1;
                let predicted = peak(&estimate_row(trainer, &r));
                let err = predicted / d.device_gib - 1.0;
                println!(
                    "| {} | {} | reading {:.2} | predicted {predicted:.2} ({:+.1} %) |",
                    r.id,
                    trainer.name(),
                    d.device_gib,
                    100.0 * err
                );
                assert!(err.abs() <= GOAL, "{}: {:+.1} %", r.id, 100.0 * err);
            }
        }
    }
    assert!(read >= 3, "the set's device readings: {read}");
}
