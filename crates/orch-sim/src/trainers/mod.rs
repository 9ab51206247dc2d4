//! The simulated trainers, one module each, and the one table that registers them.
//!
//! A trainer's module holds everything the simulator knows of it: how its command line is
//! read, the steps a run goes through, and its real-format failure outputs (the consts of its
//! `messages` module over `outputs/<trainer>/*.txt`, and `site_frames`, its traceback frames
//! by allocation site). [`ALL`] is the only place that names them; `orch sim-train` looks a
//! trainer up there by the name `orch_memory`'s [`Trainer`] parses.

use orch_memory::estimate::Trainer;

use crate::Ctx;

pub(crate) mod areal;
mod rl_swarm;
mod torchrun;
mod verl;

/// A step of a simulated run: go on with its result, or end the run with this exit code.
pub(crate) type Step<T> = Result<T, i32>;

/// One simulated trainer: which trainer's estimate it prints around, and its runner.
pub(crate) struct SimTrainer {
    /// The trainer it stands in for.
    pub trainer: Trainer,
    /// Runs the trainer's own command line; returns the process's exit code.
    pub run: fn(&mut Ctx, &[String]) -> i32,
}

/// Every simulated trainer, in the order `orch sim-train`'s usage error lists them.
pub(crate) const ALL: &[SimTrainer] = &[
    SimTrainer {
        trainer: Trainer::Verl,
        run: verl::run,
    },
    SimTrainer {
        trainer: Trainer::Areal,
        run: areal::run,
    },
    SimTrainer {
        trainer: Trainer::Torchrun,
        run: torchrun::run,
    },
    SimTrainer {
        trainer: Trainer::RlSwarm,
        run: rl_swarm::run,
    },
];

/// Whose calibration residuals a trainer without rows of its own draws its truth from
/// ([`crate::truth`]).
pub(crate) const RESIDUALS_FALLBACK: Trainer = Trainer::Verl;

/// The simulated trainer named `name` (any spelling [`Trainer::parse`] takes).
pub(crate) fn find(name: &str) -> Option<&'static SimTrainer> {
    let t = Trainer::parse(name)?;
    ALL.iter().find(|s| s.trainer == t)
}

/// The simulated trainers' names as a usage error lists them: `a, b, c or d`.
pub(crate) fn names() -> String {
    let names: Vec<&str> = ALL.iter().map(|s| s.trainer.name()).collect();
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use orch_memory::estimate::Site;

    use super::*;

    #[test]
    fn every_trainer_is_registered_once_and_listed() {
        assert_eq!(names(), "verl, areal, torchrun or rl-swarm");
        for s in ALL {
            assert_eq!(find(s.trainer.name()).map(|f| f.trainer), Some(s.trainer));
        }
        assert!(find("rl_swarm").is_some() && find("deepspeed").is_none());
    }

    #[test]
    fn frames_exist_for_every_site() {
        for site in [
            Site::Params,
            Site::RefParams,
            Site::Grads,
            Site::Optim,
            Site::Gather,
            Site::Activations,
            Site::Recompute,
            Site::LogitsBf16,
            Site::LogitsFp32,
            Site::Softmax,
            Site::Attention,
            Site::Static,
        ] {
            let all = [
                verl::site_frames(site),
                areal::site_frames(site),
                torchrun::site_frames(site),
                rl_swarm::site_frames(site, false),
                rl_swarm::site_frames(site, true),
            ];
            for f in all {
                let lines: Vec<&str> = f.lines().collect();
                assert!(
                    lines.len() >= 2 && lines.len().is_multiple_of(2),
                    "{site:?}"
                );
                for pair in lines.chunks(2) {
                    assert!(pair[0].starts_with("  File \""), "{site:?}: {}", pair[0]);
                    assert!(pair[1].starts_with("    "), "{site:?}: {}", pair[1]);
                }
            }
        }
    }
}
