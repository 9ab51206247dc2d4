//! Simulated `python3 -m verl.trainer.main_ppo key=value ...` (GRPO/PPO with vLLM rollout and
//! an FSDP actor on Ray).
//!
//! A run goes through verl's steps in order: resolve the Hydra overrides and estimate
//! (`plan`), the TaskRunner's start-up (`start_task_runner`), the workers' FSDP and vLLM
//! initialisation (`init_workers`), the checkpoint it resumes from (`load_checkpoint`), then
//! one rollout + update + checkpoint per step (`train`). A step that hits the estimate's
//! failure prints the real failure output (`failure::fail_exit`) and ends the run with its
//! exit code.

use std::path::{Path, PathBuf};

use crate::args::Overrides;
use crate::report;
use crate::{Ctx, TAG, metric, step_from_path, write_file};
use orch_memory::estimate::Site;
use orch_memory::estimate::{
    self as memory, FailAt, FailKind, Failure, GIB, RolloutEngine, SimConfig, VerlConfig, Workload,
};
use orch_memory::shape::Arch;

mod failure;
use failure::fail_exit;

const TRACKER: &str = "latest_checkpointed_iteration.txt";

/// Seed verl's interpolated defaults so `${trainer.project_name}` etc. resolve.
fn overrides(args: &[String]) -> Overrides {
    let mut o = Overrides::new();
    o.set("trainer.project_name", "verl_examples");
    o.set("trainer.experiment_name", "gsm8k");
    o.set(
        "trainer.default_local_dir",
        "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
    );
    o.apply_hydra(args);
    o
}

/// The step to resume after, per `trainer.resume_mode` (verl `_load_checkpoint`).
fn resume_step(o: &Overrides, dir: &Path) -> Option<(u64, PathBuf)> {
    match o.str_or("trainer.resume_mode", "auto").as_str() {
        "disable" => None,
        "resume_path" => {
            let p = o.get("trainer.resume_from_path")?;
            let n = step_from_path(&p)?;
            Path::new(&p).is_dir().then(|| (n, PathBuf::from(p)))
        }
        _ => {
            let text = std::fs::read_to_string(dir.join(TRACKER)).ok()?;
            let n: u64 = text.trim().parse().ok()?;
            let folder = dir.join(format!("global_step_{n}"));
            folder.is_dir().then_some((n, folder))
        }
    }
}

/// One verl run: the resolved configuration, its estimate, where it checkpoints, and the Ray
/// processes' pids.
struct Run {
    o: Overrides,
    v: VerlConfig,
    est: memory::Estimate,
    arch: Arch,
    dir: PathBuf,
    /// The checkpoint resumed from: its step and folder.
    resume: Option<(u64, PathBuf)>,
    /// The step resumed after (0: from scratch) and the last step to train.
    start: u64,
    total: u64,
    taskrunner: u32,
    worker: u32,
    engine: u32,
}

impl Run {
    /// A line from the TaskRunner actor, as Ray prefixes it.
    fn tr(&self, line: &str) -> String {
        format!("(TaskRunner pid={}) {line}", self.taskrunner)
    }
    /// A line from the WorkerDict actor, as Ray prefixes it.
    fn wd(&self, line: &str) -> String {
        format!("(WorkerDict pid={}) {line}", self.worker)
    }
    /// A line from the SGLang server verl starts (`rollout.name: sglang`), as Ray prefixes it.
    fn sg(&self, line: &str) -> String {
        let st = report::Stamp::now().sglang();
        format!("(SGLangHttpServer pid={}) [{st} TP0] {line}", self.engine)
    }
    /// The estimate's failure, if it happens at `at`.
    fn fails_at(&self, at: impl Fn(&Failure) -> bool) -> Option<&Failure> {
        self.est.failure.as_ref().filter(|f| at(f))
    }
}

use crate::trainers::Step;

/// Simulate verl with the trainer's own `args`; the exit code.
pub(crate) fn run(ctx: &mut Ctx, args: &[String]) -> i32 {
    let r = plan(ctx, args);
    let steps = |ctx: &mut Ctx| -> Step<i32> {
        start_task_runner(ctx, &r)?;
        init_workers(ctx, &r)?;
        load_checkpoint(ctx, &r)?;
        train(ctx, &r)
    };
    steps(ctx).unwrap_or_else(|code| code)
}

/// Resolve the overrides, find the checkpoint to resume from, estimate, print the banner.
fn plan(ctx: &mut Ctx, args: &[String]) -> Run {
    let o = overrides(args);
    let v = VerlConfig {
        version: ctx.env.trainer_version.clone(),
        ..VerlConfig::from_overrides(&o)
    };
    let dir = PathBuf::from(o.str_or("trainer.default_local_dir", ""));
    let resume = resume_step(&o, &dir);
    let start = resume.as_ref().map(|r| r.0).unwrap_or(0);
    let mut total = ctx.env.steps;
    if let Some(t) = o.u64_opt("trainer.total_training_steps") {
        total = total.min(t);
    }
    let cfg = SimConfig {
        hw: ctx.env.hw.clone(),
        workload: Workload::Verl(Box::new(v.clone())),
        resumed: start > 0,
        arch: None,
    };
    let est = memory::estimate(&cfg);
    let arch = est
        .arch
        .clone()
        .expect("verl estimates carry an architecture");
    ctx.banner(
        "verl/vLLM/torch",
        &est,
        Some(format!(
            "{} = {} ({:.2}B params, {} layers, hidden {}, vocab {})",
            v.model_path,
            arch.name,
            arch.params / 1e9,
            arch.layers,
            arch.hidden,
            arch.vocab
        )),
    );
    let est = ctx.real(&cfg, est);
    Run {
        o,
        v,
        est,
        arch,
        dir,
        resume,
        start,
        total,
        taskrunner: ctx.ids.pid("TaskRunner"),
        worker: ctx.ids.pid("WorkerDict"),
        engine: ctx.ids.pid("EngineCore"),
    }
}

/// The TaskRunner's start-up lines; the resource pool check fails here.
fn start_task_runner(ctx: &mut Ctx, r: &Run) -> Step<()> {
    ctx.out(r.tr(&format!(
        "TaskRunner hostname: {}, PID: {}",
        report::hostname(),
        r.taskrunner
    )));
    let given: Vec<String> = r.o.given.iter().map(|g| format!("'{g}'")).collect();
    ctx.out(r.tr(&format!("config overrides: [{}]", given.join(", "))));
    ctx.out(r.tr("Using dataset class: RLHFDataset"));
    let per_step = r.v.train_batch_size.max(1);
    ctx.out(r.tr(&format!(
        "Size of train dataloader: {}, Size of val dataloader: 1",
        (7473 / per_step).max(1)
    )));
    ctx.out(r.tr(&format!("Total training steps: {}", r.total)));
    ctx.sleep(ctx.env.step_seconds);
    let init_gpus =
        |f: &Failure| f.at == FailAt::Init && matches!(f.kind, FailKind::NotEnoughGpus { .. });
    if let Some(f) = r.fails_at(init_gpus) {
        return Err(fail_exit(ctx, r, f));
    }
    Ok(())
}

/// The actor's FSDP init, then vLLM's: host OOM (param offload) and vLLM's start-up errors
/// fail here.
fn init_workers(ctx: &mut Ctx, r: &Run) -> Step<()> {
    let p = r.arch.params;
    let world = r.v.n_gpus_per_node as f64 * r.v.nnodes as f64;
    ctx.out(r.wd(&format!(
        "Model config after override: {} ({} layers)",
        r.arch.name, r.arch.layers
    )));
    ctx.out(r.wd(&format!(
        "{} contains {:.2}B parameters",
        r.arch.name,
        p / 1e9
    )));
    let fsdp = 4.0 * p / world / GIB;
    ctx.out(r.wd(&format!(
        "After init from HF AutoModel, memory allocated (GB): {:.2}, memory reserved (GB): {:.2}, device memory used/total (GB): {:.2}/{:.2}",
        fsdp,
        fsdp * 1.02,
        fsdp * 1.02 + memory::k::CUDA_CTX_GIB,
        r.est.capacity_gib
    )));
    ctx.out(r.wd(&format!(
        "Actor use_remove_padding={}",
        py_bool(r.v.use_remove_padding)
    )));
    if r.v.param_offload {
        ctx.out(r.wd(
            "After offload actor model during init, memory allocated (GB): 0.00, memory reserved (GB): 0.00",
        ));
    }
    let init_host =
        |f: &Failure| f.at == FailAt::Init && matches!(f.kind, FailKind::HostOom { .. });
    if let Some(f) = r.fails_at(init_host) {
        return Err(fail_exit(ctx, r, f));
    }
    let weights = 2.0 * p / r.v.tensor_parallel as f64 / GIB;
    if r.v.rollout_engine == RolloutEngine::Sglang {
        return sglang_start_up(ctx, r, weights, fsdp);
    }
    let vl = report::Stamp::now().vllm();
    ctx.out(r.wd(&format!(
        "INFO {vl} [gpu_model_runner.py:2602] Model loading took {weights:.4} GiB and 4.21 seconds"
    )));
    if let Some(f) = r.fails_at(|f| f.at == FailAt::Init) {
        return Err(fail_exit(ctx, r, f));
    }
    vllm_ready_lines(ctx, r, &vl, fsdp);
    Ok(())
}

/// SGLang's start-up lines in verl (its weights, then its KV pool: the lines AReaL's simulated
/// server prints, `trainers/areal.rs`), and the switch back to the trainer.
fn sglang_start_up(ctx: &mut Ctx, r: &Run, weights: f64, fsdp: f64) -> Step<()> {
    let resident = if r.v.param_offload { 0.0 } else { fsdp };
    // What was free when SGLang started, as the estimate sized its pool from it (the pool is
    // the fraction of it less the weights): the worker's whole state then, critic and LoRA
    // included.
    let pool = r.est.kv_cache_gib.unwrap_or(0.0);
    let free_at_start = (pool + weights) / r.v.gpu_memory_utilization.max(1e-6);
    ctx.out(r.sg(&format!(
        "Load weight end. type={}ForCausalLM, dtype=torch.bfloat16, avail mem={:.2} GB, mem usage={weights:.2} GB.",
        if r.arch.name.starts_with("Llama") { "Llama" } else { "Qwen2" },
        free_at_start - weights
    )));
    if let Some(f) = r.fails_at(|f| f.at == FailAt::Init) {
        return Err(fail_exit(ctx, r, f));
    }
    let pool = pool.max(0.0);
    let tokens = (pool * GIB / r.arch.kv_bytes_per_token(r.v.tensor_parallel)).floor() as u64;
    ctx.out(r.sg(&format!(
        "KV Cache is allocated. #tokens: {tokens}, K size: {:.2} GB, V size: {:.2} GB",
        pool / 2.0,
        pool / 2.0
    )));
    trainer_mode_line(ctx, r, resident, memory::sglang::sglang_asleep_gib());
    Ok(())
}

/// verl's memory report after the switch back to the trainer: the resident FSDP state, with
/// the rollout engine's `asleep` memory on the device.
fn trainer_mode_line(ctx: &mut Ctx, r: &Run, resident: f64, asleep: f64) {
    ctx.out(r.wd(&format!(
        "After switch to trainer mode, memory allocated (GB): {:.2}, memory reserved (GB): {:.2}, device memory used/total (GB): {:.2}/{:.2}",
        resident,
        resident * 1.02,
        memory::k::CUDA_CTX_GIB + asleep + resident * 1.02,
        r.est.capacity_gib
    )));
}

/// vLLM's KV-cache lines and the switch back to the trainer after a successful start-up.
fn vllm_ready_lines(ctx: &mut Ctx, r: &Run, vl: &str, fsdp: f64) {
    let kv = r.est.kv_cache_gib.unwrap_or(0.0);
    let per_tok = r.arch.kv_bytes_per_token(r.v.tensor_parallel);
    let kv_tokens = (kv * GIB / per_tok).floor() as u64;
    ctx.out(r.wd(&format!(
        "INFO {vl} [gpu_worker.py:298] Available KV cache memory: {kv:.2} GiB"
    )));
    ctx.out(r.wd(&format!(
        "INFO {vl} [kv_cache_utils.py:1087] GPU KV cache size: {} tokens",
        thousands(kv_tokens)
    )));
    ctx.out(r.wd(&format!(
        "INFO {vl} [kv_cache_utils.py:1091] Maximum concurrency for {} tokens per request: {:.2}x",
        thousands(r.v.max_model_len()),
        kv_tokens as f64 / r.v.max_model_len() as f64
    )));
    let resident = if r.v.param_offload { 0.0 } else { fsdp };
    trainer_mode_line(ctx, r, resident, memory::k::VLLM_ASLEEP_GIB);
}

/// verl's `_load_checkpoint` lines; a run already at its last step ends here.
fn load_checkpoint(ctx: &mut Ctx, r: &Run) -> Step<()> {
    match &r.resume {
        None => {
            ctx.out(r.tr(&format!(
                "Checkpoint tracker file does not exist: {}",
                r.dir.join(TRACKER).display()
            )));
            ctx.out(r.tr("Training from scratch"));
        }
        Some((n, folder)) => {
            ctx.out(r.tr(&format!(
                "Load from checkpoint folder: {}",
                folder.display()
            )));
            ctx.out(r.tr(&format!("Setting global step to {n}")));
            ctx.out(r.tr(&format!("Resuming from {}", folder.display())));
        }
    }
    let (start, total) = (r.start, r.total);
    if start >= total {
        ctx.out(r.tr(&format!(
            "Training already finished at global step {start} of {total}"
        )));
        return Err(ctx.finish(
            0,
            &format!("simulated verl run: nothing left to do (step {start} of {total})"),
        ));
    }
    Ok(())
}

/// Steps `start + 1 ..= total`: rollout (where vLLM's wake-up fails), update (where training
/// failures hit), the step line and a checkpoint. The run's exit code.
fn train(ctx: &mut Ctx, r: &Run) -> Step<i32> {
    let (start, total) = (r.start, r.total);
    let step_s = ctx.env.step_seconds;
    for step in start + 1..=total {
        if ctx.maybe_hang(step) {
            return Ok(124);
        }
        if let Some(code) = ctx.maybe_preempt(step, start) {
            return Ok(code);
        }
        let rel = step - start;
        ctx.sleep(step_s * 0.5);
        if let Some(f) = r.fails_at(|f| f.at == FailAt::Rollout { step: rel }) {
            return Err(fail_exit(ctx, r, f));
        }
        ctx.sleep(step_s * 0.5);
        let in_update = |f: &Failure| {
            f.at == FailAt::Train { step: rel } || f.at == FailAt::AfterUpdate { step: rel }
        };
        if let Some(f) = r.fails_at(in_update) {
            return Err(fail_exit(ctx, r, f));
        }
        let line = step_line(ctx, r, step, step_s);
        ctx.out(r.tr(&line));
        save_checkpoint(ctx, r, step);
    }
    ctx.out(r.tr(&format!(
        "Final validation metrics: {{'val-core/openai/gsm8k/reward/mean@1': {:.3}}}",
        metric(&ctx.ids, "val", total, 0.3, 0.8)
    )));
    Ok(ctx.finish(
        0,
        &format!(
            "simulated verl run finished: steps {}..{total} completed",
            start + 1
        ),
    ))
}

/// `global_step_N/actor/` and the tracker file, as verl's `_save_checkpoint` leaves them.
fn save_checkpoint(ctx: &mut Ctx, r: &Run, step: u64) {
    let folder = r.dir.join(format!("global_step_{step}"));
    let marker = folder.join("actor").join("orch_sim_checkpoint.json");
    let body = format!("{{\"simulated\": true, \"trainer\": \"verl\", \"global_step\": {step}}}\n");
    match write_file(&marker, &body)
        .and_then(|_| write_file(&r.dir.join(TRACKER), &format!("{step}")))
    {
        Ok(()) => ctx.out(r.tr(&format!("local_global_step_folder: {}", folder.display()))),
        Err(e) => ctx.err(format!(
            "{TAG} warning: could not write checkpoint {}: {e}",
            folder.display()
        )),
    }
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The step's mean prompt and response lengths as printed (one decimal). The rollouts hold what
/// the memory truth packs: prompt + response = the estimate's `fill()` share of the padded
/// length, `real`, on every step (the real tokens orch reads back from verl's two means). The
/// prompts vary a little from batch to batch (`prompt`), the responses take the rest. Both are
/// rounded as printed first, so the printed means add up to one figure on every step, whichever
/// step orch reads last.
fn lengths(real: f64, prompt: f64) -> (f64, f64) {
    let tenth = |x: f64| (x * 10.0).round() / 10.0;
    let prompt = tenth(prompt);
    (prompt, tenth(real) - prompt)
}

fn step_line(ctx: &Ctx, r: &Run, step: u64, step_s: f64) -> String {
    let ids = &ctx.ids;
    let seq = r.v.seq_len() as f64;
    let prompt_mean = r.v.fill() * r.v.max_prompt_length as f64;
    let (prompt, resp) = lengths(
        r.v.fill() * seq,
        metric(ids, "prompt", step, prompt_mean * 1.03, prompt_mean * 0.97),
    );
    let gpus = r.v.n_gpus_per_node as f64 * r.v.nnodes as f64;
    let tokens_per_gpu = seq * 0.6 * r.v.train_batch_size as f64 * r.v.rollout_n as f64 / gpus;
    format!(
        "step:{step} - global_seqlen/mean:{:.1} - actor/entropy:{:.3} - actor/pg_loss:{:.4} - actor/pg_clipfrac:{:.4} - actor/ppo_kl:{:.5} - actor/grad_norm:{:.3} - perf/mfu/actor:0.000 - perf/max_memory_allocated_gb:{:.2} - perf/max_memory_reserved_gb:{:.2} - perf/cpu_memory_used_gb:{:.2} - actor/lr:{} - critic/score/mean:{:.3} - critic/rewards/mean:{:.3} - response_length/mean:{:.1} - prompt_length/mean:{:.1} - timing_s/gen:{:.3} - timing_s/update_actor:{:.3} - timing_s/step:{:.3} - perf/total_num_tokens:{:.0} - perf/time_per_step:{:.3} - perf/throughput:{:.1}",
        tokens_per_gpu,
        metric(ids, "entropy", step, 0.62, 0.38),
        metric(ids, "pg_loss", step, 0.012, -0.004),
        metric(ids, "clip", step, 0.002, 0.001),
        metric(ids, "kl", step, 0.0004, 0.0011),
        metric(ids, "grad", step, 0.31, 0.18),
        r.est.train_allocated_gib,
        r.est.train_reserved_gib,
        r.est.host_peak_gib,
        r.o.str_or("actor_rollout_ref.actor.optim.lr", "1e-06"),
        metric(ids, "score", step, 0.21, 0.64),
        metric(ids, "reward", step, 0.21, 0.64),
        resp,
        prompt,
        step_s * 0.5,
        step_s * 0.5,
        step_s,
        tokens_per_gpu * gpus,
        step_s,
        // verl/trainer/ppo/metric_utils.py:302: tokens per second per GPU.
        if step_s > 0.0 {
            tokens_per_gpu / step_s
        } else {
            tokens_per_gpu
        },
    )
}

/// verl's failure outputs: the worker's error, Hydra's banner, the driver's Ray-wrapped
/// traceback down to the worker's exception.
pub(crate) mod messages {
    /// torch OOM in `update_actor` (`{site_frames}`: a `frames/verl_*.txt`).
    pub const GPU_OOM: &str = include_str!("../../../outputs/verl/gpu_oom.txt");
    /// vLLM's wake-up (`cumem_allocator.cpp`) OOM in `generate_sequences`.
    pub const VLLM_WAKE_UP: &str = include_str!("../../../outputs/verl/vllm_wake_up.txt");
    /// vLLM's free-memory check in `init_device` at start-up.
    pub const VLLM_INIT_DEVICE: &str = include_str!("../../../outputs/verl/vllm_init_device.txt");
    /// vLLM's KV-cache checks in `_initialize_kv_caches` at start-up.
    pub const VLLM_KV_CACHE: &str = include_str!("../../../outputs/verl/vllm_kv_cache.txt");
    /// Ray's memory monitor kills a worker in `init_model`.
    pub const HOST_OOM_INIT: &str = include_str!("../../../outputs/verl/host_oom_init.txt");
    /// Ray's memory monitor kills a worker in `update_actor`.
    pub const HOST_OOM_UPDATE: &str = include_str!("../../../outputs/verl/host_oom_update.txt");
    /// `_check_resource_available`: more GPUs requested than the node has.
    pub const NOT_ENOUGH_GPUS: &str = include_str!("../../../outputs/verl/not_enough_gpus.txt");
    /// SGLang (`rollout.name: sglang`) resuming its memory before a rollout, out of memory:
    /// the lines of https://github.com/sgl-project/sglang/issues/14092 (verl with SGLang,
    /// torch_memory_saver's `cu_mem_create`), pids and time replaced, then verl's three
    /// attempts and its `RuntimeError` through `rollout_mode` (`http_server_engine.py`
    /// L704-718, `sglang_rollout.py` L171, `fsdp_workers.py` L736 and L957 at b178a3cd5).
    pub const SGLANG_RESUME: &str = include_str!("../../../outputs/verl/sglang_resume.txt");
    /// SGLang's scheduler at start-up with no room for its KV pool (`init_memory_pool`, as in
    /// AReaL's `outputs/areal/sglang_not_enough.txt`), under the Ray actor verl runs it in.
    pub const SGLANG_NOT_ENOUGH: &str = include_str!("../../../outputs/verl/sglang_not_enough.txt");
}

/// The frames from `ActorRolloutRefWorker.update_actor` (`verl/workers/fsdp_workers.py`)
/// down to the failing allocation, by allocation site: one `outputs/frames/verl_*.txt`.
pub(crate) fn site_frames(site: Site) -> &'static str {
    match site {
        Site::Softmax => include_str!("../../../outputs/frames/verl_softmax.txt"),
        Site::Activations | Site::Attention | Site::Gather => {
            include_str!("../../../outputs/frames/verl_forward.txt")
        }
        Site::LogitsBf16 => {
            include_str!("../../../outputs/frames/verl_logits_bf16.txt")
        }
        Site::LogitsFp32 => {
            include_str!("../../../outputs/frames/verl_logits_fp32.txt")
        }
        Site::Recompute | Site::Grads => {
            include_str!("../../../outputs/frames/verl_backward.txt")
        }
        Site::Optim => include_str!("../../../outputs/frames/verl_optim.txt"),
        Site::Params | Site::RefParams | Site::Static => {
            include_str!("../../../outputs/frames/verl_load_params.txt")
        }
    }
}

#[cfg(test)]
mod tests {
    use regex::Regex;

    use crate::testing::*;

    fn args(pairs: &[(&str, &str)]) -> Vec<String> {
        pairs.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    fn diamonds(dir: &std::path::Path, extra: &[(&str, &str)]) -> Vec<String> {
        let mut v = args(&orch_memory::estimate::seeds::diamonds());
        v.push(format!("trainer.default_local_dir={}", dir.display()));
        v.extend(args(extra));
        v
    }

    #[test]
    fn the_printed_lengths_add_up_to_one_figure_whatever_the_prompt() {
        let printed = |x: f64| format!("{x:.1}").parse::<f64>().unwrap();
        let sums: Vec<String> = (0..200)
            .map(|i| {
                let (p, r) = super::lengths(975.35, 300.0 + f64::from(i) * 0.037);
                format!("{:.1}", printed(p) + printed(r))
            })
            .collect();
        assert!(sums.iter().all(|s| s == "975.4"), "{sums:?}");
    }

    #[test]
    fn diamonds_on_h100_fails_like_seed_002() {
        let tmp = tempfile::tempdir().unwrap();
        let (code, cap) = run_capture("verl", &diamonds(tmp.path(), &[]), &h100_env(&[]));
        assert_eq!(code, 1);
        let out = cap.stdout();
        let err = cap.stderr();
        // Banner first, on both streams.
        assert!(
            cap.lines[0]
                .1
                .starts_with("[orch simulator] SIMULATED verl trainer")
        );
        assert!(out.starts_with("[orch simulator] SIMULATED verl trainer"));
        assert!(err.starts_with("[orch simulator] SIMULATED verl trainer"));
        let oom = Regex::new(r"(?m)^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate (\d+\.\d\d) GiB\. GPU 0 has a total capacity of 79\.18 GiB of which \d+\.\d\d (GiB|MiB) is free\. Including non-PyTorch memory, this process has \d+\.\d\d GiB memory in use\. Of the allocated memory \d+\.\d\d GiB is allocated by PyTorch, and \d+\.\d\d (GiB|MiB) is reserved by PyTorch but unallocated\.").unwrap();
        let caps = oom.captures(&err).expect("torch OOM line");
        // Seed 002's stack asked 17.66 GiB, a 4-byte tensor of its logits; today's default
        // path fails in the same backward at a 2-byte one (orch-memory's k::VERL_LOSS_BWD_BYTES).
        let tried: f64 = caps[1].parse().unwrap();
        assert!((8.0..=9.5).contains(&tried), "tried {tried}");
        assert!(Regex::new(r"(?m)^ray\.exceptions\.RayTaskError\(OutOfMemoryError\): ray::WorkerDict\.actor_rollout_ref_update_actor\(\) \(pid=\d+, ip=127\.0\.0\.1, actor_id=[0-9a-f]{32}, repr=<verl\.single_controller\.ray\.base\.WorkerDict object at 0x[0-9a-f]+>\)$").unwrap().is_match(&err));
        let echoed = err
            .lines()
            .find(|l| l.starts_with("Error executing job with overrides: ['"))
            .expect("Hydra's echo of the overrides");
        assert!(echoed.contains("'actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct'"));
        // No step completed, no checkpoint.
        assert!(!out.contains("step:1 -"));
        assert!(!tmp.path().join("global_step_1").exists());
        // Realistic delay before the failure.
        assert!(cap.slept >= 0.9, "slept {}", cap.slept);
    }

    /// An OOM in a pass before the update prints that pass's traceback: the driver's call, Ray's
    /// task and the worker's frames name `compute_log_prob` (verl at b178a3cd5), and what
    /// orch's classifier reads of it is the log-prob stage.
    #[test]
    fn an_oom_in_the_old_log_prob_pass_names_that_pass() {
        let tmp = tempfile::tempdir().unwrap();
        let a = diamonds(
            tmp.path(),
            &[
                ("actor_rollout_ref.actor.entropy_coeff", "0"),
                ("actor_rollout_ref.actor.use_torch_compile", "False"),
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8"),
                (
                    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                    "64",
                ),
            ],
        );
        let (err, stage) = failed_run(&a);
        assert!(
            err.contains("    old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)\n"),
            "{err}"
        );
        assert!(err.contains("ray::WorkerDict.actor_rollout_ref_compute_log_prob() (pid="));
        assert!(err.contains("verl/workers/fsdp_workers.py\", line 1012, in compute_log_prob\n"));
        assert!(err.contains("verl/workers/actor/dp_actor.py\", line 472, in compute_log_prob\n"));
        assert!(
            !err.contains("update_actor") && !err.contains("update_policy"),
            "{err}"
        );
        assert_eq!(stage, Some(orch_classify::memory::Stage::LogProb));
    }

    /// A run that fails (exit 1): its stderr, and the stage orch's classifier reads of it.
    fn failed_run(args: &[String]) -> (String, Option<orch_classify::memory::Stage>) {
        let (code, cap) = run_capture("verl", args, &h100_env(&[]));
        assert_eq!(code, 1);
        let err = cap.stderr();
        let stage = orch_classify::classify_bytes(err.as_bytes())
            .memory
            .and_then(|m| m.stage);
        (err, stage)
    }

    /// The same for the critic's update: its task, call and files are the critic's.
    #[test]
    fn an_oom_in_the_critic_update_names_the_critic() {
        let tmp = tempfile::tempdir().unwrap();
        let a = diamonds(
            tmp.path(),
            &[
                ("algorithm.adv_estimator", "gae"),
                ("actor_rollout_ref.actor.entropy_coeff", "0"),
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8"),
                (
                    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                    "8",
                ),
                ("critic.model.fsdp_config.param_offload", "True"),
                ("critic.model.fsdp_config.optimizer_offload", "True"),
                ("critic.model.enable_gradient_checkpointing", "False"),
                ("critic.ppo_micro_batch_size_per_gpu", "64"),
            ],
        );
        let (err, stage) = failed_run(&a);
        assert!(
            err.contains("    critic_output = self.critic_wg.update_critic(batch)\n"),
            "{err}"
        );
        assert!(err.contains("ray::WorkerDict.critic_update_critic() (pid="));
        assert!(err.contains("verl/workers/critic/dp_critic.py\", line 230, in update_critic\n"));
        assert!(err.contains("output = self.critic_module("), "{err}");
        assert!(
            !err.contains("dp_actor.py") && !err.contains("update_actor"),
            "{err}"
        );
        assert_eq!(stage, Some(orch_classify::memory::Stage::CriticUpdate));
    }

    #[test]
    fn micro_16_with_expandable_segments_completes_and_checkpoints() {
        let tmp = tempfile::tempdir().unwrap();
        let a = diamonds(
            tmp.path(),
            &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16")],
        );
        let env = h100_env(&[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")]);
        let (code, cap) = run_capture("verl", &a, &env);
        assert_eq!(code, 0, "{}", cap.all());
        let out = cap.stdout();
        let step = Regex::new(r"(?m)^\(TaskRunner pid=\d+\) step:(\d+) - .*actor/pg_loss:-?\d+\.\d+ - .*perf/max_memory_allocated_gb:(\d+\.\d+) - .*timing_s/step:\d+\.\d+ - .*perf/throughput:\d+\.\d+$").unwrap();
        let steps: Vec<u64> = step
            .captures_iter(&out)
            .map(|c| c[1].parse().unwrap())
            .collect();
        assert_eq!(steps, vec![1, 2, 3, 4]);
        assert!(!cap.stderr().contains("out of memory"));
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("latest_checkpointed_iteration.txt")).unwrap(),
            "4"
        );
        assert!(tmp.path().join("global_step_4/actor").is_dir());
        assert!(out.contains("Training from scratch"));
        assert!(
            (cap.slept - 2.5).abs() < 1e-9,
            "4 steps × 0.5 s + start-up: {}",
            cap.slept
        );

        // Resume: the next attempt continues after global_step_4 ... with more steps to go.
        let env = h100_env(&[
            ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
            ("ORCH_SIM_STEPS", "6"),
        ]);
        let (code, cap) = run_capture("verl", &a, &env);
        assert_eq!(code, 0);
        let out = cap.stdout();
        assert!(
            Regex::new(r"Resuming from .*global_step_4")
                .unwrap()
                .is_match(&out),
            "{out}"
        );
        let steps: Vec<u64> = step
            .captures_iter(&out)
            .map(|c| c[1].parse().unwrap())
            .collect();
        assert_eq!(steps, vec![5, 6]);

        // resume_mode=disable starts over.
        let mut a2 = a.clone();
        a2.push("trainer.resume_mode=disable".into());
        let (_, cap) = run_capture("verl", &a2, &env);
        assert!(cap.stdout().contains("step:1 -"));
    }

    #[test]
    fn kv_cache_failures_use_vllm_formats() {
        let tmp = tempfile::tempdir().unwrap();
        let env = env(&[
            ("ORCH_SIM_GPU_NAME", "NVIDIA GeForce RTX 4090"),
            ("ORCH_SIM_GPU_MEM_GIB", "23.65"),
            ("ORCH_SIM_GPUS", "4"),
            ("ORCH_SIM_HOST_MEM_GIB", "256"),
        ]);
        let a = diamonds(
            tmp.path(),
            &[("actor_rollout_ref.rollout.gpu_memory_utilization", "0.1")],
        );
        let (code, cap) = run_capture("verl", &a, &env);
        assert_eq!(code, 1);
        let re = Regex::new(r"(?m)^\(EngineCore_DP0 pid=\d+\) ERROR \d\d-\d\d \d\d:\d\d:\d\d \[core\.py:708\] ValueError: No available memory for the cache blocks\. Try increasing `gpu_memory_utilization` when initializing the engine\.").unwrap();
        assert!(re.is_match(&cap.stderr()), "{}", cap.stderr());
        assert!(
            cap.stderr()
                .contains("RuntimeError: Engine core initialization failed. See root cause above.")
        );

        let a = diamonds(
            tmp.path(),
            &[
                ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                ("actor_rollout_ref.rollout.max_model_len", "32768"),
            ],
        );
        let (code, cap) = run_capture("verl", &a, &env);
        assert_eq!(code, 1);
        let re = Regex::new(r"ValueError: To serve at least one request with the model's max seq len \(32768\), \(\d+\.\d\d GiB KV cache is needed, which is larger than the available KV cache memory \(\d+\.\d\d GiB\)\. Based on the available memory, the estimated maximum model length is (\d+)\.").unwrap();
        let est: u64 = re.captures(&cap.stderr()).expect("max-len message")[1]
            .parse()
            .unwrap();
        assert!(est > 1536 && est < 32768);
    }

    #[test]
    fn host_oom_uses_rays_format() {
        let tmp = tempfile::tempdir().unwrap();
        let env = h100_env(&[("ORCH_SIM_HOST_MEM_GIB", "48")]);
        let a = diamonds(
            tmp.path(),
            &[
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
            ],
        );
        let (code, cap) = run_capture("verl", &a, &env);
        assert_eq!(code, 1);
        let err = cap.stderr();
        assert!(err.contains("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\nMemory on the node (IP: 127.0.0.1, ID: "));
        assert!(err.contains("which exceeds the memory usage threshold of 0.95."));
        assert!(err.contains("1 Workers (tasks / actors) killed due to memory pressure (OOM)"));
    }

    #[test]
    fn wake_up_failure_happens_after_a_step() {
        let tmp = tempfile::tempdir().unwrap();
        let env = a40_env("4", &[]);
        let a = diamonds(
            tmp.path(),
            &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4")],
        );
        let (code, cap) = run_capture("verl", &a, &env);
        assert_eq!(code, 1);
        assert!(cap.stdout().contains("step:1 -"));
        assert!(!cap.stdout().contains("step:2 -"));
        assert!(cap.stderr().contains(
            "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"
        ));
        // The completed step left a checkpoint; the resumed attempt fails at its first rollout.
        assert!(tmp.path().join("global_step_1").is_dir());
        let (code, cap) = run_capture("verl", &a, &env);
        assert_eq!(code, 1);
        assert!(!cap.stdout().contains("step:2 -"));
        assert!(cap.stdout().contains("Resuming from"));
    }

    #[test]
    fn hang_stops_progress() {
        let tmp = tempfile::tempdir().unwrap();
        let a = diamonds(
            tmp.path(),
            &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16")],
        );
        let env = h100_env(&[("ORCH_SIM_HANG_AT_STEP", "3")]);
        let (_, cap) = run_capture("verl", &a, &env);
        assert!(cap.hung);
        assert!(cap.stdout().contains("step:2 -"));
        assert!(!cap.stdout().contains("step:3 -"));
    }

    #[test]
    fn too_many_gpus_is_a_config_error() {
        let tmp = tempfile::tempdir().unwrap();
        let a = diamonds(tmp.path(), &[("trainer.n_gpus_per_node", "8")]);
        let (code, cap) = run_capture("verl", &a, &h100_env(&[]));
        assert_eq!(code, 1);
        assert!(
            cap.stderr()
                .contains("ValueError: Total available GPUs 4 is less than total desired GPUs 8.")
        );
    }
}
