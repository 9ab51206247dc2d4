//! Simulated rl-swarm node: `python -m rgym_exp.runner.swarm_launcher --config-path DIR
//! --config-name rg-swarm.yaml key=value ...` (Gensyn's RL Swarm, genrl 0.1.11's GRPO trainer
//! on one GPU).
//!
//! A run reads the config as Hydra composes it — the `--config-path`/`--config-name` file when
//! it can be read here, else rl-swarm's defaults, then the overrides — and estimates (`plan`),
//! prints the node's start-up log (`start_up`, where a model too big for the card fails in
//! `model.to(device)`), then plays rounds: generation, then one training step (`rounds`).
//! A round that hits the estimate's failure prints Hydra's banner and the Python traceback down
//! to the failing allocation (`fail_exit`) and ends the run with exit 1.
//!
//! Upstream genrl 0.1.11 (`genrl/game/game_manager.py`) catches what `trainer.train` raises
//! (a bare `except:` → INFO "Error occurred during training, continuing...", lines 149-153,
//! the exception itself never printed) and logs what a generation raises (`run_game`'s
//! `get_logger().exception("Exception occurred during game run.", stack_info=True)`, lines
//! 181-186) before `run_game` returns and the process exits 0: a real node neither stops nor
//! exits non-zero on an OOM. By default the simulator ends the run as an uncaught exception
//! would; with `ORCH_SIM_SWALLOW=1` it swallows as genrl does (`swallowed_round`), and orch
//! answers it through the lines `templates/rl-swarm/template.yaml` declares (`swallowed:`).

use std::path::PathBuf;

use crate::args::{Overrides, take_flag};
use crate::outputs::Vars;
use crate::report::{self, OwnProcess};
use crate::{Ctx, TAG, metric};
use orch_memory::estimate::Site;
use orch_memory::estimate::{
    self as memory, FailAt, FailKind, Failure, RlSwarmConfig, SimConfig, Workload,
};

/// The logger every rgym/genrl line goes through (`genrl.logging_utils.global_defs.get_logger`),
/// in Hydra's job-logging format.
const LOGGER: &str = "genrl.logging_utils.global_defs";

/// One node: its configuration as the launcher composed it, the estimate, the rounds to play.
struct Run {
    o: Overrides,
    r: RlSwarmConfig,
    est: memory::Estimate,
    max_round: u64,
}

use super::Step;

/// Simulate the node with the launcher's own `args`; the exit code.
pub(crate) fn run(ctx: &mut Ctx, args: &[String]) -> i32 {
    let steps = |ctx: &mut Ctx| -> Step<i32> {
        let r = plan(ctx, args)?;
        start_up(ctx, &r)?;
        rounds(ctx, &r)
    };
    steps(ctx).unwrap_or_else(|code| code)
}

/// The config Hydra composes: `--config-path`/`--config-name` (`-cp`/`-cn`), then the
/// overrides. The file is rl-swarm's own, in its checkout; where it cannot be read here the
/// keys not overridden take rl-swarm's defaults (the estimator's), with a note.
fn read_config(args: &[String]) -> (Overrides, Vec<String>) {
    let mut a = args.to_vec();
    let dir = take_flag(&mut a, "config-path").or_else(|| take_flag(&mut a, "cp"));
    let name = take_flag(&mut a, "config-name").or_else(|| take_flag(&mut a, "cn"));
    let mut o = Overrides::new();
    let mut notes = Vec::new();
    if let (Some(dir), Some(name)) = (&dir, &name) {
        let file = if name.ends_with(".yaml") {
            name.clone()
        } else {
            format!("{name}.yaml")
        };
        let path = PathBuf::from(dir).join(file);
        if o.merge_yaml_file(&path).is_err() {
            notes.push(format!(
                "{} is not readable here; keys not overridden take rl-swarm's rg-swarm.yaml defaults",
                path.display()
            ));
        }
    } else {
        notes.push("no --config-path/--config-name; using rg-swarm.yaml's defaults".into());
    }
    o.apply_hydra(&a);
    (o, notes)
}

/// Resolve the configuration, estimate, print the banner.
fn plan(ctx: &mut Ctx, args: &[String]) -> Step<Run> {
    let (o, notes) = read_config(args);
    let model_name = std::env::var("MODEL_NAME").ok();
    let mut r = RlSwarmConfig::from_overrides(&o, ctx.env.hw.gpu_mem_gib, model_name.as_deref());
    r.notes.extend(notes);
    let cfg = SimConfig {
        hw: ctx.env.hw.clone(),
        workload: Workload::RlSwarm(r.clone()),
        resumed: false,
        arch: None,
    };
    let est = memory::estimate(&cfg);
    ctx.banner(
        "rl-swarm, genrl or torch",
        &est,
        Some(format!(
            "{}, dtype {}, gradient checkpointing {}, {} own + {} transplanted prompts × {} generations of ≤ {} tokens, gradient_accumulation_steps {}",
            r.model,
            r.dtype_name(),
            r.gradient_checkpointing,
            r.num_train_samples,
            r.num_transplant_trees,
            r.num_generations,
            r.max_new_tokens,
            r.gradient_accumulation_steps
        )),
    );
    let est = ctx.real(&cfg, est);
    let max_round = o.u64_or("training.max_round", 1_000_000);
    Ok(Run {
        o,
        r,
        est,
        max_round,
    })
}

/// One line of the node's log, as Hydra's job logging formats it.
fn log(ctx: &mut Ctx, level: &str, msg: &str) {
    let line = format!(
        "[{}][{LOGGER}][{level}] - {msg}",
        report::Stamp::now().ray()
    );
    ctx.out(line);
}

/// The node's name, as `get_name_from_peer_id` makes one from its peer id.
fn animal(ctx: &Ctx) -> String {
    const ADJ: [&str; 8] = [
        "agile",
        "bristly",
        "darting",
        "gentle",
        "nimble",
        "scurrying",
        "sleek",
        "stocky",
    ];
    const ANIMALS: [&str; 8] = [
        "badger", "crane", "gecko", "hedgehog", "jackal", "marmot", "raven", "tapir",
    ];
    let pick = |salt: &str, n: usize| ((ctx.ids.unit(salt) * n as f64) as usize).min(n - 1);
    format!(
        "{} {} {}",
        ADJ[pick("adj1", ADJ.len())],
        ADJ[pick("adj2", ADJ.len())],
        ANIMALS[pick("animal", ANIMALS.len())]
    )
}

/// The launcher's start-up: the model load (where a model too big for the card fails), the
/// data manager, the swarm's greeting.
fn start_up(ctx: &mut Ctx, r: &Run) -> Step<()> {
    ctx.sleep(ctx.env.step_seconds);
    if let Some(f) = &r.est.failure
        && f.at == FailAt::Init
    {
        return Err(fail_exit(ctx, r, f));
    }
    let samples = r.r.num_train_samples;
    log(
        ctx,
        "INFO",
        "Reasoning Gym Data Manager initialized with config: rgym_exp/src/datasets.yaml",
    );
    log(ctx, "INFO", "Loaded composite dataset with 1000 samples");
    log(
        ctx,
        "INFO",
        &format!("Train samples: {samples}, Eval samples: 0"),
    );
    let peer = format!("Qm{}", ctx.ids.hex("peer", 44));
    let name = animal(ctx);
    log(ctx, "INFO", &format!("🐱 Hello 🐈 [{name}] 🦮 [{peer}]!"));
    log(ctx, "INFO", &format!("Using Model: {}", r.r.model));
    Ok(())
}

/// Rounds 1 ..= `ORCH_SIM_STEPS`: generation and a training step each (where a failure
/// hits), then the swarm's next round. The run's exit code.
fn rounds(ctx: &mut Ctx, r: &Run) -> Step<i32> {
    let total = ctx.env.steps;
    let step_s = ctx.env.step_seconds;
    for round in 1..=total {
        if ctx.maybe_hang(round) {
            return Ok(124);
        }
        log(
            ctx,
            "INFO",
            &format!("Starting round: {round}/{}.", r.max_round),
        );
        ctx.sleep(step_s * 0.5);
        let failure = r.est.failure.as_ref().filter(|f| f.at.step() <= round);
        if let Some(f) = failure {
            if !(ctx.env.swallow && matches!(f.kind, FailKind::GpuOom(_))) {
                return Err(fail_exit(ctx, r, f));
            }
            if swallowed_round(ctx, f, round)? {
                continue;
            }
        }
        ctx.sleep(step_s * 0.5);
        ctx.out(format!(
            "{TAG} round {round}: trained on {} sequences; reward {:.3}; peak {:.1} GiB",
            r.r.train_sequences(),
            metric(&ctx.ids, "reward", round, 0.15, 0.6),
            r.est.train_peak_gib.max(r.est.rollout_peak_gib)
        ));
        log(ctx, "INFO", &format!("🐝 Joining round: {}", round + 1));
    }
    Ok(ctx.finish(
        0,
        &format!("simulated rl-swarm finished: rounds 1..{total} completed"),
    ))
}

/// `ORCH_SIM_SWALLOW`: a round that hits a GPU OOM the way genrl 0.1.11 handles it. A training
/// OOM: the INFO line and on to the next round, which fails the same way (returns true: the
/// round is over). A generation OOM: `run_game`'s ERROR line, the traceback and the logging
/// module's stack, then the process exits 0 (`Err(0)`).
fn swallowed_round(ctx: &mut Ctx, f: &Failure, round: u64) -> Step<bool> {
    let FailKind::GpuOom(d) = &f.kind else {
        return Ok(false);
    };
    if let FailAt::Rollout { .. } = f.at {
        log(ctx, "ERROR", "Exception occurred during game run.");
        let vars = Vars::new()
            .set(
                "oom",
                report::torch_oom_message(d, &[], OwnProcess::ThisProcess),
            )
            .block("site_frames", site_frames(d.site, true));
        for line in vars.lines(messages::GAME_RUN_EXCEPTION) {
            ctx.out(line);
        }
        let what = format!(
            "simulated rl-swarm failure swallowed as genrl does (ORCH_SIM_SWALLOW): {}; run_game returned",
            crate::describe(f)
        );
        return Err(ctx.finish(0, &what));
    }
    ctx.sleep(ctx.env.step_seconds * 0.5);
    log(ctx, "INFO", "Error occurred during training, continuing...");
    ctx.out(format!(
        "{TAG} simulated genrl swallowed {} (ORCH_SIM_SWALLOW); the round trained nothing",
        crate::describe(f)
    ));
    log(ctx, "INFO", &format!("🐝 Joining round: {}", round + 1));
    Ok(true)
}

/// Print the real failure output for `f` and return the exit code: Hydra's banner and the
/// traceback (`outputs/rl_swarm/*.txt`) for a GPU OOM; the kernel's kill for host memory.
fn fail_exit(ctx: &mut Ctx, r: &Run, f: &Failure) -> i32 {
    let what = format!("simulated rl-swarm failure: {}", crate::describe(f));
    match &f.kind {
        FailKind::GpuOom(d) => {
            let given: Vec<String> = r.o.given.iter().map(|g| format!("'{g}'")).collect();
            let vars = Vars::new()
                .set("overrides", given.join(", "))
                .set(
                    "oom",
                    report::torch_oom_message(d, &[], OwnProcess::ThisProcess),
                )
                .block(
                    "site_frames",
                    site_frames(d.site, matches!(f.at, FailAt::Rollout { .. })),
                );
            let template = if f.at == FailAt::Init {
                messages::GPU_OOM_INIT
            } else {
                messages::GPU_OOM
            };
            ctx.err_template(template, &vars);
            ctx.finish(1, &what)
        }
        FailKind::HostOom { .. } => {
            // The kernel's OOM killer takes the Python process; bash reports the signal.
            ctx.err("Killed");
            ctx.finish(137, &what)
        }
        other => unreachable!("not an rl-swarm failure: {other:?}"),
    }
}

/// rl-swarm's failure outputs: Hydra's banner (the launcher sets `HYDRA_FULL_ERROR=1`) and the
/// whole Python traceback from `swarm_launcher.py`.
pub(crate) mod messages {
    /// torch OOM in a round (`{site_frames}`: a `frames/rl_swarm_*.txt`).
    pub const GPU_OOM: &str = include_str!("../../outputs/rl_swarm/gpu_oom.txt");
    /// torch OOM while genrl moves the model to the GPU, re-raised by Hydra's `instantiate`.
    pub const GPU_OOM_INIT: &str = include_str!("../../outputs/rl_swarm/gpu_oom_init.txt");
    /// What genrl 0.1.11's `run_game` logs with `get_logger().exception(..., stack_info=True)`
    /// below its `Exception occurred during game run.` line when a round raises (a generation
    /// OOM), before it returns and the process exits 0.
    pub const GAME_RUN_EXCEPTION: &str =
        include_str!("../../outputs/rl_swarm/game_run_exception.txt");
}

/// The frames from genrl's `run_game_round` down to the failing allocation: the generation call
/// when the node `generating` (its KV cache, the sampling logits), else by site in the training
/// step — the forward, the logits' contiguous copy, the log-softmax, the backward, Adam's state.
pub(crate) fn site_frames(site: Site, generating: bool) -> &'static str {
    if generating {
        return include_str!("../../outputs/frames/rl_swarm_generate.txt");
    }
    match site {
        Site::Activations | Site::Attention | Site::LogitsBf16 => {
            include_str!("../../outputs/frames/rl_swarm_forward.txt")
        }
        Site::LogitsFp32 => include_str!("../../outputs/frames/rl_swarm_logits.txt"),
        Site::Softmax => include_str!("../../outputs/frames/rl_swarm_softmax.txt"),
        Site::Optim => include_str!("../../outputs/frames/rl_swarm_optim.txt"),
        _ => include_str!("../../outputs/frames/rl_swarm_backward.txt"),
    }
}

#[cfg(test)]
mod tests {
    use regex::Regex;

    use crate::testing::*;
    use orch_memory::estimate::rl_swarm_keys::MODEL as MODEL_KEY;

    fn rtx4090() -> crate::SimEnv {
        env(&[
            ("ORCH_SIM_GPU_NAME", "NVIDIA GeForce RTX 4090"),
            ("ORCH_SIM_GPU_MEM_GIB", "23.65"),
            ("ORCH_SIM_GPUS", "1"),
            ("ORCH_SIM_HOST_MEM_GIB", "120"),
            ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
        ])
    }

    /// The launcher's arguments as templates/rl-swarm renders them, with `extra` overrides.
    fn args(extra: &[&str]) -> Vec<String> {
        let mut v = vec![
            "--config-path".to_string(),
            "/nonexistent/rl-swarm/rgym_exp/config".into(),
            "--config-name".into(),
            "rg-swarm.yaml".into(),
            format!("{MODEL_KEY}=Gensyn/Qwen2.5-1.5B-Instruct"),
            "training.dtype=float32".into(),
            "++game_manager.trainer.config.enable_gradient_checkpointing=false".into(),
            "game_manager.data_manager.num_train_samples=2".into(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    }

    #[test]
    fn seed_004_as_first_run_ooms_in_its_first_round() {
        let (code, cap) = run_capture("rl-swarm", &args(&[]), &rtx4090());
        assert_eq!(code, 1, "{}", cap.all());
        let err = cap.stderr();
        assert!(
            err.starts_with("[orch simulator] SIMULATED rl-swarm trainer"),
            "{err}"
        );
        assert!(
            err.contains("Error executing job with overrides: ['game_manager.trainer.models.0.pretrained_model_name_or_path=Gensyn/Qwen2.5-1.5B-Instruct', 'training.dtype=float32',"),
            "{err}"
        );
        let re = Regex::new(r"(?m)^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate \d+\.\d\d (GiB|MiB)\. GPU 0 has a total capacity of 23\.65 GiB").unwrap();
        assert!(re.is_match(&err), "{err}");
        assert!(err.contains("genrl/trainer/grpo_trainer.py\", line 380, in train"));
        // The node started and joined round 1 before it failed.
        assert!(
            cap.stdout()
                .contains("Using Model: Gensyn/Qwen2.5-1.5B-Instruct")
        );
        assert!(cap.stdout().contains("Starting round: 1/1000000."));
        assert!(!cap.stdout().contains("Joining round"));
    }

    #[test]
    fn swallowing_like_genrl_logs_each_training_oom_and_exits_0() {
        let mut e = rtx4090();
        e.swallow = true;
        let (code, cap) = run_capture("rl-swarm", &args(&[]), &e);
        assert_eq!(code, 0, "{}", cap.all());
        let out = cap.stdout();
        // Every round fails the same way and genrl's INFO line is all the log says of it.
        let re = Regex::new(
            r"(?m)^\[[0-9: ,-]+\]\[genrl\.logging_utils\.global_defs\]\[INFO\] - Error occurred during training, continuing\.\.\.$",
        )
        .unwrap();
        assert_eq!(re.find_iter(&out).count(), 4, "{out}");
        assert!(
            out.contains("(ORCH_SIM_SWALLOW); the round trained nothing"),
            "{out}"
        );
        assert!(!cap.all().contains("OutOfMemoryError"), "{}", cap.all());
        assert!(!out.contains("trained on"), "{out}");
    }

    #[test]
    fn fp16_with_checkpointing_plays_every_round() {
        let a = args(&[
            "training.dtype=float16",
            "++game_manager.trainer.config.enable_gradient_checkpointing=true",
        ]);
        let (code, cap) = run_capture("rl-swarm", &a, &rtx4090());
        assert_eq!(code, 0, "{}", cap.all());
        let out = cap.stdout();
        for round in 1..=4 {
            assert!(
                out.contains(&format!("Starting round: {round}/1000000.")),
                "{out}"
            );
            assert!(
                out.contains(&format!("🐝 Joining round: {}", round + 1)),
                "{out}"
            );
        }
        assert!(out.contains("simulated rl-swarm finished: rounds 1..4 completed; exit 0"));
        assert!(!cap.stderr().contains("OutOfMemoryError"));
    }

    #[test]
    fn a_model_too_big_for_the_card_fails_in_model_to() {
        let a = args(&[&format!("{MODEL_KEY}=Qwen/Qwen2.5-7B-Instruct")]);
        let (code, cap) = run_capture("rl-swarm", &a, &rtx4090());
        assert_eq!(code, 1);
        let err = cap.stderr();
        assert!(err.contains("in _initialize_model"), "{err}");
        assert!(err.contains(
            "hydra.errors.InstantiationException: Error in call to target 'rgym_exp.src.trainer.GRPOTrainerModule':"
        ));
        assert!(!cap.stdout().contains("Starting round"));
    }

    #[test]
    fn a_readable_config_file_is_read_under_the_overrides() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("rg-swarm.yaml"),
            "training:\n  dtype: float16\n  num_generations: 2\n  max_round: 7\ngame_manager:\n  trainer:\n    config:\n      dtype: ${training.dtype}\n  data_manager:\n    num_train_samples: 1\n",
        )
        .unwrap();
        let a = vec![
            "--config-path".to_string(),
            tmp.path().display().to_string(),
            "--config-name".into(),
            "rg-swarm".into(),
            format!("{MODEL_KEY}=Gensyn/Qwen2.5-0.5B-Instruct"),
        ];
        let (code, cap) = run_capture("rl-swarm", &a, &rtx4090());
        assert_eq!(code, 0, "{}", cap.all());
        let out = cap.stdout();
        assert!(out.contains("dtype float16"), "{out}");
        assert!(out.contains("Starting round: 1/7."), "{out}");
        assert!(out.contains("Train samples: 1, Eval samples: 0"), "{out}");
    }
}
