//! What the simulated job really needs: the estimate (`exact`, the default) or the estimate
//! times an error drawn from the calibration set's residuals (`calibrated`).
//!
//! With `exact` truth the simulator decides with the estimator the planner uses, so a planner
//! that trusts the estimate can never be caught out: recovery measured that way is true by
//! construction. `ORCH_SIM_TRUTH=calibrated` gives the simulator a truth of its own. Each
//! calibration row (`crates/orch-memory/calibration/residuals.yaml`) says how far the real peak
//! of a public configuration can be from orch's prediction: a range of `real / predicted`.
//! For a configuration (the trainer's memory-relevant settings, the card, the model) and a
//! seed (`ORCH_SIM_TRUTH_SEED`, default 0) the simulator picks one row and one point in its
//! range, both from a hash, so the same configuration always gets the same factor and a rerun
//! is reproducible. A trainer without residuals of its own draws from verl's, and says so.
//!
//! How the factor is applied: every GPU figure of the estimate is the estimate's times the
//! factor, and the card stays the card. That is the estimate on a card `factor` times smaller,
//! with its figures scaled back up (so the failure found, and the numbers in its message —
//! tried, free, in use, capacity — are those of the real card); engine fractions
//! (`gpu_memory_utilization`, `mem_fraction_static`) stay fractions of the real card. Host
//! RAM is not scaled.

use orch_memory::calibration::{Residual, residuals};
use orch_memory::estimate::{Estimate, FailKind, SimConfig, estimate};

use crate::report::{fnv1a, splitmix};
use crate::trainers::RESIDUALS_FALLBACK;

/// Which truth the simulator runs by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Truth {
    /// The estimate is the truth (orch's estimator decides, as the planner's does).
    Exact,
    /// The estimate times a factor drawn from the calibration residuals with this seed.
    Calibrated {
        /// `ORCH_SIM_TRUTH_SEED`.
        seed: u64,
    },
}

impl Truth {
    /// From `ORCH_SIM_TRUTH` (`exact` | `calibrated`) and `ORCH_SIM_TRUTH_SEED`; unknown
    /// values are an error the banner names.
    pub fn from_vars(truth: Option<&str>, seed: Option<&str>) -> Result<Self, String> {
        let seed = match seed.map(str::trim).filter(|s| !s.is_empty()) {
            None => 0,
            Some(s) => s
                .parse()
                .map_err(|_| format!("ORCH_SIM_TRUTH_SEED={s:?} is not a number"))?,
        };
        match truth.map(|t| t.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("exact") => Ok(Self::Exact),
            Some("calibrated") => Ok(Self::Calibrated { seed }),
            Some(other) => Err(format!(
                "ORCH_SIM_TRUTH={other:?} is neither exact nor calibrated"
            )),
        }
    }
}

/// The factor drawn for one configuration, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Drawn {
    /// real peak / estimated peak.
    pub factor: f64,
    /// The seed it was drawn with.
    pub seed: u64,
    /// Whose residuals it was drawn from (the trainer's own, or verl's).
    pub from: String,
    /// The row drawn.
    pub row: Residual,
}

impl Drawn {
    /// The banner line.
    pub fn describe(&self) -> String {
        format!(
            "truth: estimate × {:.3} (seed {}, drawn from {}'s calibration residuals: row {}, {:.3}–{:.3})",
            self.factor, self.seed, self.from, self.row.id, self.row.lo, self.row.hi
        )
    }
}

/// The factor for a configuration whose exact estimate is `est`, under `seed`: a row of the
/// trainer's residuals (verl's where it has none) and a point in its range, both hashed from
/// the seed and the configuration. The configuration is named by what its estimate says of it
/// (trainer, model, card, GPUs, tokens per micro-batch, both phases' peaks): the simulator,
/// which reads the trainer's arguments, and `orch estimate`, which reads the plan, derive the
/// same estimate and therefore draw the same factor, whatever run or attempt directory it is.
pub fn draw(est: &Estimate, seed: u64) -> Drawn {
    let all = residuals();
    let own = est.trainer.name();
    let (from, rows) = match all.get(own) {
        Some(rows) if !rows.is_empty() => (own.to_string(), rows.clone()),
        _ => (
            RESIDUALS_FALLBACK.name().to_string(),
            all.get(RESIDUALS_FALLBACK.name())
                .cloned()
                .expect("calibration/residuals.yaml has the fallback trainer's rows"),
        ),
    };
    let key = format!(
        "{own}|{}|{:.2}|{}|{:.0}|{:.2}|{:.2}",
        est.arch.as_ref().map_or("", |a| a.name.as_str()),
        est.capacity_gib,
        est.gpus,
        est.tokens_per_micro,
        est.train_peak_gib,
        est.rollout_peak_gib
    );
    let h = splitmix(fnv1a(key.as_bytes(), splitmix(seed)));
    let row = rows[(h % rows.len() as u64) as usize].clone();
    let u = (splitmix(h ^ 0x5bd1_e995) >> 11) as f64 / (1u64 << 53) as f64;
    let factor = ((row.lo + u * (row.hi - row.lo)) * 1000.0).round() / 1000.0;
    Drawn {
        factor,
        seed,
        from,
        row,
    }
}

/// The factor `truth` gives the configuration whose exact estimate is `est` (1 when exact).
pub fn factor(est: &Estimate, truth: Truth) -> f64 {
    match truth {
        Truth::Exact => 1.0,
        Truth::Calibrated { seed } => draw(est, seed).factor,
    }
}

/// What the job really needs under `truth`: the estimate itself, or the estimate with every
/// GPU figure times the drawn factor (and the failure the real card then meets).
/// `exact` is `estimate(cfg)`.
pub fn real(cfg: &SimConfig, exact: Estimate, truth: Truth) -> (Estimate, Option<Drawn>) {
    let Truth::Calibrated { seed } = truth else {
        return (exact, None);
    };
    let drawn = draw(&exact, seed);
    let f = drawn.factor;
    let mut smaller = cfg.clone();
    smaller.hw.gpu_mem_gib = cfg.hw.gpu_mem_gib / f;
    (scaled(estimate(&smaller), f), Some(drawn))
}

/// Every GPU figure of `e` times `f` (host figures as they are).
fn scaled(mut e: Estimate, f: f64) -> Estimate {
    e.capacity_gib *= f;
    for it in e.train_items.iter_mut().chain(e.rollout_items.iter_mut()) {
        it.gib *= f;
    }
    e.train_peak_gib *= f;
    e.train_allocated_gib *= f;
    e.train_reserved_gib *= f;
    if let Some(fixed) = e.train_static.as_mut() {
        fixed.allocated_gib *= f;
        fixed.reserved_gib *= f;
    }
    e.rollout_peak_gib *= f;
    e.kv_cache_gib = e.kv_cache_gib.map(|k| k * f);
    if let Some(fail) = e.failure.as_mut() {
        match &mut fail.kind {
            FailKind::GpuOom(d) => {
                d.tried_gib *= f;
                d.capacity_gib *= f;
                d.free_gib *= f;
                d.allocated_gib *= f;
                d.reserved_unallocated_gib *= f;
                d.process_gib *= f;
                for o in &mut d.other_processes_gib {
                    *o *= f;
                }
            }
            FailKind::VllmFreeMemory {
                free_gib,
                total_gib,
                requested_gib,
                ..
            } => {
                *free_gib *= f;
                *total_gib *= f;
                *requested_gib *= f;
            }
            FailKind::VllmNoCacheBlocks { available_gib } => *available_gib *= f,
            FailKind::VllmMaxLen {
                needed_gib,
                available_gib,
                ..
            } => {
                *needed_gib *= f;
                *available_gib *= f;
            }
            FailKind::VllmWakeUp {
                needed_gib,
                free_gib,
            }
            | FailKind::SglangResume {
                needed_gib,
                free_gib,
            } => {
                *needed_gib *= f;
                *free_gib *= f;
            }
            FailKind::SglangNotEnough { .. }
            | FailKind::HostOom { .. }
            | FailKind::NotEnoughGpus { .. } => {}
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{h100_env, run_capture};
    use orch_memory::estimate::{Hardware, TorchrunConfig, Workload};
    use orch_memory::overrides::Overrides;

    fn torchrun(micro: u64) -> SimConfig {
        let mut o = Overrides::new();
        o.set("micro_batch_size", &micro.to_string());
        o.set("max_seq_len", "2048");
        o.set("model.params_m", "512");
        o.set("model.n_layers", "24");
        SimConfig {
            hw: Hardware::h100_default(),
            workload: Workload::Torchrun(TorchrunConfig::with_shape(&o, 4, None)),
            resumed: false,
            arch: None,
        }
    }

    #[test]
    fn the_variable_picks_the_truth() {
        assert_eq!(Truth::from_vars(None, None), Ok(Truth::Exact));
        assert_eq!(Truth::from_vars(Some("exact"), Some("3")), Ok(Truth::Exact));
        assert_eq!(
            Truth::from_vars(Some("Calibrated"), Some("7")),
            Ok(Truth::Calibrated { seed: 7 })
        );
        assert!(Truth::from_vars(Some("oracle"), None).is_err());
        assert!(Truth::from_vars(Some("calibrated"), Some("x")).is_err());
    }

    #[test]
    fn a_draw_is_reproducible_and_inside_its_row() {
        let cfg = torchrun(8);
        let a = draw(&estimate(&cfg), 0);
        assert_eq!(a, draw(&estimate(&cfg), 0));
        assert!(a.row.lo <= a.factor && a.factor <= a.row.hi, "{a:?}");
        assert_eq!(a.from, "verl", "torchrun has no rows of its own yet");
        // Over many configurations and seeds the factors spread over the residuals' ranges.
        let factors: Vec<f64> = (0..40)
            .map(|i| draw(&estimate(&torchrun(1 + i % 8)), i / 8).factor)
            .collect();
        let (lo, hi) = factors
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), f| (l.min(*f), h.max(*f)));
        assert!(lo < 0.97 && hi > 1.03, "{lo}..{hi}");
    }

    #[test]
    fn exact_is_the_estimate_and_calibrated_scales_every_gpu_figure() {
        let cfg = torchrun(8);
        let exact = estimate(&cfg);
        assert_eq!(real(&cfg, exact.clone(), Truth::Exact).0, exact);
        let (scaled, drawn) = real(&cfg, exact.clone(), Truth::Calibrated { seed: 0 });
        let f = drawn.expect("a draw").factor;
        assert!((scaled.capacity_gib - exact.capacity_gib).abs() < 1e-9);
        assert!((scaled.train_peak_gib / exact.train_peak_gib - f).abs() < 0.02);
        assert_eq!(scaled.host_limit_gib, exact.host_limit_gib);
    }

    #[test]
    fn a_failure_under_the_truth_reports_the_real_card() {
        // A configuration that does not fit, on either truth: the OOM message's capacity is
        // the card's, its tried/free/allocated figures add up on it.
        let cfg = torchrun(64);
        let (real, _) = real(&cfg, estimate(&cfg), Truth::Calibrated { seed: 1 });
        let Some(FailKind::GpuOom(d)) = real.failure.map(|f| f.kind) else {
            panic!("micro-batch 64 fits an H100")
        };
        assert!((d.capacity_gib - 79.18).abs() < 1e-6);
        assert!(d.free_gib < d.tried_gib);
        assert!(d.allocated_gib <= d.capacity_gib);
    }

    #[test]
    fn the_banner_says_which_truth_and_what_it_draws() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("train_config.yaml");
        std::fs::write(
            &config,
            "micro_batch_size: 4\nmax_seq_len: 2048\nmodel: {params_m: 512, n_layers: 24}\n",
        )
        .unwrap();
        let args: Vec<String> = ["--config", config.to_str().unwrap()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let quiet = [("ORCH_SIM_STEP_SECONDS", "0")];
        let (_, cap) = run_capture("torchrun", &args, &h100_env(&quiet));
        assert!(!cap.stdout().contains("truth:"), "{}", cap.stdout());
        let calibrated = h100_env(&[quiet[0], ("ORCH_SIM_TRUTH", "calibrated")]);
        let (_, cap) = run_capture("torchrun", &args, &calibrated);
        let out = cap.stdout();
        assert!(
            out.contains("[orch simulator] truth: estimate × ")
                && out.contains("(seed 0, drawn from verl's calibration residuals: row ")
                && out.contains("[orch simulator] really: training peak "),
            "{out}"
        );
    }
}
