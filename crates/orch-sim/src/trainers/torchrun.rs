//! Simulated `torchrun --nproc_per_node=N train.py --config FILE [--output_dir D]
//! [--resume_from D/step_N]` (a plain DDP training script with a YAML config, seed 003).
//!
//! A run reads the config and estimates (`plan`), prints torch elastic's banner and rank 0's
//! start-up (`start_up`), then trains and saves a checkpoint per step (`train`). A step that
//! hits the estimate's failure prints the real failure output (`fail_exit`) and ends the run
//! with its exit code.

use std::path::{Path, PathBuf};

use crate::args::{Overrides, take_flag};
use crate::outputs::Vars;
use crate::report::{self, OwnProcess};
use crate::{Ctx, TAG, metric, step_from_path, write_file};
use orch_memory::estimate::Site;
use orch_memory::estimate::{
    self as memory, FailKind, Failure, SimConfig, TorchrunConfig, Workload,
};

const SCRIPT: &str = "training/train.py";

/// One torchrun job: the script's configuration, its estimate, where it checkpoints, and the
/// elastic agent's and rank 0's pids.
struct Run {
    targs: TorchrunArgs,
    t: TorchrunConfig,
    est: memory::Estimate,
    nproc: u32,
    output_dir: PathBuf,
    /// The step resumed after (0: from scratch) and the last step to train.
    start: u64,
    total: u64,
    /// Why `--resume_from` was ignored, if it was.
    resume_note: Option<String>,
    agent: u32,
    rank0: u32,
}

use super::Step;

/// Simulate torchrun with the trainer's own `args`; the exit code.
pub(crate) fn run(ctx: &mut Ctx, args: &[String]) -> i32 {
    let steps = |ctx: &mut Ctx| -> Step<i32> {
        let r = plan(ctx, args)?;
        start_up(ctx, &r)?;
        train(ctx, &r)
    };
    steps(ctx).unwrap_or_else(|code| code)
}

/// `--config` (the script exits when it cannot be read), then the `key=value` overrides.
fn read_config(ctx: &mut Ctx, targs: &TorchrunArgs) -> Step<(Overrides, Vec<String>)> {
    let mut o = Overrides::new();
    let mut notes = Vec::new();
    match &targs.config {
        Some(path) => {
            if let Err(e) = o.merge_yaml_file(path) {
                let vars = Vars::new()
                    .set("path", path.display())
                    .set("error", format!("{e:#}"));
                ctx.err_template(messages::CONFIG_MISSING, &vars);
                return Err(ctx.finish(1, "simulated torchrun: config file unreadable"));
            }
        }
        None => notes.push("no --config given; using the script's defaults".to_string()),
    }
    o.apply_hydra(&targs.overrides);
    Ok((o, notes))
}

/// Resolve the configuration and the resume point, estimate, print the banner.
fn plan(ctx: &mut Ctx, args: &[String]) -> Step<Run> {
    let targs = parse_torchrun(args);
    let (o, notes) = read_config(ctx, &targs)?;
    let nproc = targs
        .nproc_per_node
        .unwrap_or(ctx.env.hw.gpus_per_node)
        .max(1);
    let mut t = TorchrunConfig::from_overrides(&o, nproc);
    t.notes.extend(notes);
    let output_dir = PathBuf::from(
        targs
            .output_dir
            .clone()
            .or_else(|| o.get("output_dir"))
            .unwrap_or_else(|| "outputs".into()),
    );
    let mut start = 0;
    let mut resume_note = None;
    if let Some(p) = &targs.resume_from {
        match step_from_path(p).filter(|_| Path::new(p).is_dir()) {
            Some(n) => start = n,
            None => resume_note = Some(format!("checkpoint {p} not found; starting from scratch")),
        }
    }
    let cfg = SimConfig {
        hw: ctx.env.hw.clone(),
        workload: Workload::Torchrun(t.clone()),
        resumed: start > 0,
        arch: None,
    };
    // Under the exact truth the job needs the estimate times ORCH_SIM_MEMORY_SCALE: on a card
    // 1/k the size, every figure k times over (the allocator's walk is linear in its sizes).
    // The calibrated truth ([`Ctx::real`]) draws its own factor instead.
    let k = ctx.env.memory_scale;
    let mut est = if k != 1.0 {
        let mut hw = cfg.hw.clone();
        hw.gpu_mem_gib /= k;
        memory::estimate(&SimConfig { hw, ..cfg.clone() })
    } else {
        memory::estimate(&cfg)
    };
    if k != 1.0 {
        scale_memory(&mut est, k);
    }
    ctx.banner(
        "torch",
        &est,
        Some(format!(
            "{} M parameters, {} layers, micro_batch_size {} × max_seq_len {}, gradient_checkpointing {}, precision {}",
            t.params_m, t.n_layers, t.micro_batch_size, t.max_seq_len, t.gradient_checkpointing, t.precision.name()
        )),
    );
    let est = ctx.real(&cfg, est);
    Ok(Run {
        targs,
        t,
        est,
        nproc,
        output_dir,
        start,
        total: ctx.env.steps,
        resume_note,
        agent: ctx.ids.pid("torchrun-agent"),
        rank0: ctx.ids.pid("rank0"),
    })
}

/// torch elastic's banner and rank 0's config lines; a start-up failure hits here, and a run
/// already at its last step ends here.
fn start_up(ctx: &mut Ctx, r: &Run) -> Step<()> {
    let vars = Vars::new()
        .set("glog", report::Stamp::now().glog())
        .set("agent", r.agent);
    ctx.err_template(messages::ELASTIC_BANNER, &vars);
    let t = &r.t;
    ctx.out(format!(
        "[rank0] config: micro_batch_size={} gradient_accumulation_steps={} max_seq_len={} gradient_checkpointing={} precision={} world_size={} global_batch={}",
        t.micro_batch_size,
        t.gradient_accumulation_steps,
        t.max_seq_len,
        t.gradient_checkpointing,
        t.precision.name(),
        r.nproc,
        t.micro_batch_size * t.gradient_accumulation_steps * r.nproc as u64
    ));
    ctx.out(format!("[rank0] model parameters: {:.1}M", t.params_m));
    if let Some(n) = &r.resume_note {
        ctx.out(format!("[rank0] warning: {n}"));
    }
    let (start, total) = (r.start, r.total);
    if start > 0 {
        let p = r.targs.resume_from.clone().unwrap_or_default();
        ctx.out(format!(
            "[rank0] Resuming from checkpoint {p} (step {start})"
        ));
    }
    ctx.sleep(ctx.env.step_seconds);
    if let Some(f) = &r.est.failure
        && f.at == memory::FailAt::Init
    {
        return Err(fail_exit(ctx, r, f));
    }
    if start >= total {
        ctx.out(format!(
            "[rank0] already at step {start} of {total}; nothing to do"
        ));
        return Err(ctx.finish(
            0,
            &format!("simulated torchrun: nothing left to do (step {start} of {total})"),
        ));
    }
    Ok(())
}

/// Steps `start + 1 ..= total`: the step (where a failure hits), its log line and checkpoint.
/// The run's exit code.
fn train(ctx: &mut Ctx, r: &Run) -> Step<i32> {
    let (start, total) = (r.start, r.total);
    let step_s = ctx.env.step_seconds;
    let mut last_rate = 0.0;
    for step in start + 1..=total {
        if ctx.maybe_hang(step) {
            return Ok(124);
        }
        ctx.sleep(step_s * 0.5);
        if let Some(f) = r
            .est
            .failure
            .as_ref()
            .filter(|f| f.at.step() == step - start)
        {
            return Err(fail_exit(ctx, r, f));
        }
        ctx.sleep(step_s * 0.5);
        let t = &r.t;
        let tokens =
            (t.micro_batch_size * t.max_seq_len * t.gradient_accumulation_steps * r.nproc as u64)
                as f64;
        let rate = if step_s > 0.0 {
            tokens / step_s
        } else {
            tokens
        };
        // examples/torchrun/train.py's step line (lines 256-260), which orch reads its
        // measured peaks and throughput from.
        ctx.out(format!(
            "step {step} loss {:.4} tokens/s {rate:.0} peak_allocated_gib {:.2} peak_reserved_gib {:.2}",
            metric(&ctx.ids, "loss", step, 3.2, 2.3),
            r.est.train_allocated_gib,
            r.est.train_reserved_gib,
        ));
        save_checkpoint(ctx, r, step);
        last_rate = rate;
    }
    // train.py's last line (lines 264-278), the script's own summary of the run.
    ctx.out(format!(
        "train-summary {{\"micro_batch_size\": {}, \"gradient_accumulation_steps\": {}, \"max_seq_len\": {}, \"gpus\": {}, \"peak_allocated_gib\": {:.3}, \"peak_reserved_gib\": {:.3}, \"tokens_per_s\": {:.1}, \"device\": \"simulated\"}}",
        r.t.micro_batch_size,
        r.t.gradient_accumulation_steps,
        r.t.max_seq_len,
        r.nproc,
        r.est.train_allocated_gib,
        r.est.train_reserved_gib,
        last_rate,
    ));
    ctx.out("[rank0] training complete");
    Ok(ctx.finish(
        0,
        &format!(
            "simulated torchrun finished: steps {}..{total} completed",
            start + 1
        ),
    ))
}

/// Every GPU memory figure of `est` times `k` ([`crate::SimEnv::memory_scale`]).
fn scale_memory(est: &mut memory::Estimate, k: f64) {
    est.capacity_gib *= k;
    est.train_peak_gib *= k;
    est.train_allocated_gib *= k;
    est.train_reserved_gib *= k;
    if let Some(fixed) = est.train_static.as_mut() {
        fixed.allocated_gib *= k;
        fixed.reserved_gib *= k;
    }
    for item in &mut est.train_items {
        item.gib *= k;
    }
    if let Some(Failure {
        kind: FailKind::GpuOom(d),
        ..
    }) = &mut est.failure
    {
        for x in [
            &mut d.tried_gib,
            &mut d.capacity_gib,
            &mut d.free_gib,
            &mut d.allocated_gib,
            &mut d.reserved_unallocated_gib,
            &mut d.process_gib,
        ] {
            *x *= k;
        }
    }
}

/// `OUTPUT_DIR/step_N/`, as the script saves it.
fn save_checkpoint(ctx: &mut Ctx, r: &Run, step: u64) {
    if ctx.env.node.is_some_and(|n| n.id > 0) {
        return; // rank 0 saves, on node 0
    }
    let dir = r.output_dir.join(format!("step_{step}"));
    let body = format!("{{\"simulated\": true, \"trainer\": \"torchrun\", \"step\": {step}}}\n");
    match write_file(&dir.join("orch_sim_checkpoint.json"), &body) {
        Ok(()) => ctx.out(format!("[rank0] saved checkpoint to {}", dir.display())),
        Err(e) => ctx.err(format!(
            "{TAG} warning: could not write checkpoint {}: {e}",
            dir.display()
        )),
    }
}

/// Print the real failure output for `f` (`outputs/torchrun/*.txt`) and return torchrun's exit
/// code.
fn fail_exit(ctx: &mut Ctx, r: &Run, f: &Failure) -> i32 {
    let (agent, rank0) = (r.agent, r.rank0);
    let st = report::Stamp::now();
    let child_failed = |exitcode| {
        Vars::new()
            .set("glog", st.glog())
            .set("agent", agent)
            .set("rank0", rank0)
            .block(
                "child_failed",
                report::elastic_failed(SCRIPT, &st, &report::hostname(), rank0, exitcode),
            )
    };
    let (template, vars) = match &f.kind {
        FailKind::GpuOom(d) => (
            messages::GPU_OOM,
            child_failed(1)
                .set("rank1", rank0 + 1)
                .set(
                    "oom",
                    report::torch_oom_message(d, &[], OwnProcess::ThisProcess),
                )
                .block("site_frames", site_frames(d.site)),
        ),
        FailKind::HostOom { .. } => (messages::HOST_OOM, child_failed(-9)),
        other => unreachable!("not a torchrun failure: {other:?}"),
    };
    ctx.err_template(template, &vars);
    ctx.finish(
        1,
        &format!("simulated torchrun failure: {}", crate::describe(f)),
    )
}

/// torchrun's outputs (a plain DDP script, `training/train.py`): torch elastic's banner and
/// the failures.
pub(crate) mod messages {
    /// torch elastic's warning banner at launch (`OMP_NUM_THREADS`).
    pub const ELASTIC_BANNER: &str = include_str!("../../outputs/torchrun/elastic_banner.txt");
    /// torch OOM in rank 0 (`{site_frames}`: a `frames/torchrun_*.txt`).
    pub const GPU_OOM: &str = include_str!("../../outputs/torchrun/gpu_oom.txt");
    /// The kernel's OOM killer takes rank 0; torch elastic reports the SIGKILL.
    pub const HOST_OOM: &str = include_str!("../../outputs/torchrun/host_oom.txt");
    /// `--config` names a file that cannot be read.
    pub const CONFIG_MISSING: &str = include_str!("../../outputs/torchrun/config_missing.txt");
}

/// The frames from torchrun's `train_step` down to the failing allocation, by site: the
/// attention scores or the MLP in the forward, the fp32 loss over the vocabulary, AdamW's
/// state, or else the backward.
pub(crate) fn site_frames(site: Site) -> &'static str {
    match site {
        Site::Attention => include_str!("../../outputs/frames/torchrun_attention.txt"),
        Site::Activations => include_str!("../../outputs/frames/torchrun_mlp.txt"),
        Site::Optim => include_str!("../../outputs/frames/torchrun_optim.txt"),
        Site::LogitsFp32 | Site::Softmax => include_str!("../../outputs/frames/torchrun_loss.txt"),
        _ => include_str!("../../outputs/frames/torchrun_backward.txt"),
    }
}

/// Parsed torchrun-script command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TorchrunArgs {
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    /// `--output_dir D`.
    pub output_dir: Option<String>,
    /// `--resume_from D/step_N`.
    pub resume_from: Option<String>,
    /// `--nproc_per_node` if the caller passed torchrun's own flag through.
    pub nproc_per_node: Option<u32>,
    /// `key=value` overrides after the flags (some scripts accept them).
    pub overrides: Vec<String>,
}

/// Split a torchrun script's command line into its flags and overrides.
pub(crate) fn parse_torchrun(args: &[String]) -> TorchrunArgs {
    let mut a: Vec<String> = args.to_vec();
    let config = take_flag(&mut a, "config").map(PathBuf::from);
    let output_dir = take_flag(&mut a, "output_dir");
    let resume_from = take_flag(&mut a, "resume_from");
    let nproc_per_node = take_flag(&mut a, "nproc_per_node").and_then(|v| v.parse().ok());
    let overrides = a
        .into_iter()
        .filter(|s| !s.starts_with('-') && s.contains('='))
        .collect();
    TorchrunArgs {
        config,
        output_dir,
        resume_from,
        nproc_per_node,
        overrides,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use regex::Regex;

    use super::parse_torchrun;
    use crate::testing::*;

    fn config(dir: &std::path::Path, micro: u32, seq: u32) -> std::path::PathBuf {
        let p = dir.join(format!("train_{micro}_{seq}.yaml"));
        std::fs::write(
            &p,
            format!(
                "model:\n  params_m: 512\n  n_layers: 8\n  d_ffn: 1536\nmicro_batch_size: {micro}\ngradient_accumulation_steps: 8\nmax_seq_len: {seq}\ngradient_checkpointing: true\nprecision: bf16\n"
            ),
        )
        .unwrap();
        p
    }

    /// train.py's command line: the config and the output directory.
    fn argv(cfg: &std::path::Path, out: &std::path::Path) -> Vec<String> {
        vec![
            "--config".to_string(),
            cfg.display().to_string(),
            "--output_dir".into(),
            out.display().to_string(),
        ]
    }

    #[test]
    fn aggressive_settings_fail_like_seed_003() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path(), 8, 2048);
        let out = tmp.path().join("out");
        let a = argv(&cfg, &out);
        let (code, cap) = run_capture("torchrun", &a, &a40_env("4", &[]));
        assert_eq!(code, 1);
        let re = Regex::new(r"(?m)^\[rank0\]: torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate (\d+\.\d\d) GiB\. GPU 0 has a total capacity of 44\.42 GiB").unwrap();
        let tried: f64 = re.captures(&cap.stderr()).expect("OOM")[1].parse().unwrap();
        assert!(tried >= 51.0, "{tried}");
        assert!(cap.stderr().contains("training/train.py FAILED"));
        assert!(cap.stderr().contains("  exitcode  : 1 (pid: "));
    }

    #[test]
    fn micro_2_completes_and_resumes() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path(), 2, 1024);
        let out = tmp.path().join("out");
        let a = argv(&cfg, &out);
        let (code, cap) = run_capture("torchrun", &a, &a40_env("4", &[]));
        assert_eq!(code, 0, "{}", cap.all());
        let re =
            Regex::new(r"(?m)^step (\d+) loss \d+\.\d+ tokens/s \d+ peak_allocated_gib \d+\.\d+ peak_reserved_gib (\d+\.\d+)$").unwrap();
        let got: Vec<(u64, f64)> = re
            .captures_iter(&cap.stdout())
            .map(|c| (c[1].parse().unwrap(), c[2].parse().unwrap()))
            .collect();
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert!((38.0..=40.0).contains(&got[0].1), "{got:?}");
        assert!(out.join("step_4").is_dir());
        let mut b = a.clone();
        b.extend([
            "--resume_from".to_string(),
            out.join("step_4").display().to_string(),
        ]);
        let (code, cap) = run_capture("torchrun", &b, &a40_env("4", &[("ORCH_SIM_STEPS", "6")]));
        assert_eq!(code, 0);
        assert!(cap.stdout().contains("Resuming from checkpoint"));
        let steps: Vec<u64> = re
            .captures_iter(&cap.stdout())
            .map(|c| c[1].parse().unwrap())
            .collect();
        assert_eq!(steps, vec![5, 6]);
    }

    #[test]
    fn torchrun_flags() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let t = parse_torchrun(&strings(&[
            "--config",
            "cfg.yaml",
            "--output_dir=out",
            "--resume-from",
            "out/step_5",
            "--nproc_per_node=4",
        ]));
        assert_eq!(t.config, Some(PathBuf::from("cfg.yaml")));
        assert_eq!(t.output_dir.as_deref(), Some("out"));
        assert_eq!(t.resume_from.as_deref(), Some("out/step_5"));
        assert_eq!(t.nproc_per_node, Some(4));
    }
}
