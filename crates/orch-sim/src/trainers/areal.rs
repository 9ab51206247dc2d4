//! Simulated `python3 -m areal.launcher.local ENTRY --config FILE key=value ...` (AReaL GRPO:
//! an SGLang server plus an FSDP trainer launched with torchrun, colocated when the node has
//! too few GPUs for both).
//!
//! A run goes through the launcher's steps in order: read the configuration (`plan`), start
//! the SGLang server (`start_server`), start the trainer (`start_trainer`), then train and
//! save a recover checkpoint per step (`train`). A step that hits the estimate's failure
//! prints the real failure output (`fail_exit`) and ends the run with its exit code.

use std::path::{Path, PathBuf};

use crate::args::{Overrides, take_flag};
use crate::outputs::Vars;
use crate::report::{self, OwnProcess};
use crate::{Ctx, TAG, metric, write_file};
use orch_memory::estimate::Site;
use orch_memory::estimate::{
    self as memory, ArealConfig, FailAt, FailKind, Failure, GIB, SimConfig, Workload,
    areal_colocated,
};
use orch_memory::shape::Arch;

const ENTRY: &str = "examples/math/gsm8k_grpo.py";

/// One AReaL run: where it writes, what it estimates, and its processes' ids.
struct Run {
    entry: String,
    a: ArealConfig,
    est: memory::Estimate,
    arch: Arch,
    exp: String,
    trial: String,
    fileroot: String,
    run_name: String,
    recover_dir: PathBuf,
    /// The global step recovered from (0: a fresh run) and the last step to train.
    start: u64,
    total: u64,
    server_pid: u32,
    trainer_pid: u32,
    torchrun_pid: u32,
    port: u32,
}

use super::Step;

fn recover_info(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("recover_info.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("global_step")?.as_u64()
}

/// AReaL's realhf log time stamp.
fn ts() -> String {
    stamp(&report::Stamp::now())
}

/// SGLang's log prefix, with the TP rank for the scheduler's lines.
fn sg(tp: bool) -> String {
    let st = report::Stamp::now().sglang();
    if tp {
        format!("[{st} TP0]")
    } else {
        format!("[{st}]")
    }
}

/// GPU indices `0..n` as `CUDA_VISIBLE_DEVICES` lists them.
fn gpu_list(n: u32) -> String {
    (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

/// Simulate AReaL with the trainer's own `args`; the exit code.
pub(crate) fn run(ctx: &mut Ctx, args: &[String]) -> i32 {
    let steps = |ctx: &mut Ctx| -> Step<i32> {
        let r = plan(ctx, args)?;
        let tokens = start_server(ctx, &r)?;
        start_trainer(ctx, &r)?;
        train(ctx, &r, tokens)
    };
    steps(ctx).unwrap_or_else(|code| code)
}

/// The launcher's defaults, then `--config FILE`, then the overrides; the entry script is the
/// first positional `.py`.
fn read_config(ctx: &mut Ctx, args: &[String]) -> Step<(Overrides, String)> {
    let mut rest: Vec<String> = args.to_vec();
    let config = take_flag(&mut rest, "config");
    let mut o = Overrides::new();
    o.set("experiment_name", "gsm8k-grpo");
    o.set("trial_name", "trial0");
    o.set("cluster.fileroot", "/tmp/areal/experiments");
    o.set("recover.mode", "disabled");
    if let Some(path) = &config
        && let Err(e) = o.merge_yaml_file(Path::new(path))
    {
        let vars = Vars::new().set("path", path).set("error", format!("{e:#}"));
        ctx.err_template(messages::CONFIG_MISSING, &vars);
        return Err(ctx.finish(1, "simulated AReaL: config file unreadable"));
    }
    let positional = o.apply_hydra(&rest);
    let entry = positional
        .iter()
        .find(|p| p.ends_with(".py"))
        .cloned()
        .unwrap_or_else(|| ENTRY.to_string());
    Ok((o, entry))
}

/// Resolve the configuration, find the recover point, estimate, and print the banner and the
/// launcher's first line.
fn plan(ctx: &mut Ctx, args: &[String]) -> Step<Run> {
    let (o, entry) = read_config(ctx, args)?;
    let a = ArealConfig::from_overrides(&o);
    let exp = o.str_or("experiment_name", "gsm8k-grpo");
    let trial = o.str_or("trial_name", "trial0");
    let fileroot = o.str_or("cluster.fileroot", "/tmp/areal/experiments");
    let recover_dir = Path::new(&fileroot)
        .join("checkpoints")
        .join(&ctx.env.user)
        .join(&exp)
        .join(&trial)
        .join("recover_checkpoint");
    let mode = o.str_or("recover.mode", "disabled");
    let start = if matches!(mode.as_str(), "auto" | "resume" | "fault") {
        recover_info(&recover_dir).unwrap_or(0)
    } else {
        0
    };
    let cfg = SimConfig {
        hw: ctx.env.hw.clone(),
        workload: Workload::Areal(a.clone()),
        resumed: start > 0,
        arch: None,
    };
    let est = memory::estimate(&cfg);
    let arch = est
        .arch
        .clone()
        .expect("AReaL estimates carry an architecture");
    ctx.banner(
        "AReaL/SGLang/torch",
        &est,
        Some(format!(
            "{} = {} ({:.2}B params, {} layers, hidden {}, vocab {})",
            a.model_path,
            arch.name,
            arch.params / 1e9,
            arch.layers,
            arch.hidden,
            arch.vocab
        )),
    );
    let est = ctx.real(&cfg, est);
    let r = Run {
        run_name: format!("{exp}_{trial}"),
        recover_dir,
        server_pid: ctx.ids.pid("sglang"),
        trainer_pid: ctx.ids.pid("trainer"),
        torchrun_pid: ctx.ids.pid("torchrun"),
        port: 10_000 + (ctx.ids.unit("port") * 40_000.0) as u32,
        entry,
        a,
        est,
        arch,
        exp,
        trial,
        fileroot,
        start,
        total: ctx.env.steps,
    };
    ctx.out(format!(
        "{} Local Scheduler INFO: LocalLauncher: experiment_name={}, trial_name={}, fileroot={}, run_id=0, is_recover_run={}",
        ts(),
        r.exp,
        r.trial,
        r.fileroot,
        if start > 0 { "True" } else { "False" }
    ));
    Ok(r)
}

/// The GPUs the SGLang server runs on.
fn server_gpus(ctx: &Ctx, r: &Run) -> u32 {
    r.a.gen_dp
        .saturating_mul(r.a.gen_tp)
        .min(ctx.env.hw.gpus_per_node)
        .max(1)
}

/// Launch the SGLang server and print its start-up up to "ready to roll"; the KV pool's size
/// in tokens.
fn start_server(ctx: &mut Ctx, r: &Run) -> Step<u64> {
    ctx.out(format!(
        "{} Local Scheduler INFO: Starting local process with command: CUDA_VISIBLE_DEVICES={} stdbuf -oL python3 -m areal.launcher.sglang_server {} 2>&1 | tee -a {}/logs/{}/{}/{}/llm_server.log",
        ts(),
        gpu_list(server_gpus(ctx, r)),
        r.entry,
        r.fileroot,
        ctx.env.user,
        r.exp,
        r.trial
    ));
    let c = r.est.capacity_gib;
    let weights = 2.0 * r.arch.params / r.a.gen_tp as f64 / GIB;
    ctx.out(format!(
        "{} server_args=ServerArgs(model_path='{}', tokenizer_path='{}', dtype='bfloat16', mem_fraction_static={}, max_running_requests=None, context_length=32768, tp_size={}, random_seed=1, skip_tokenizer_init=True, port={})",
        sg(false),
        r.a.model_path,
        r.a.model_path,
        report::py_float(r.a.mem_fraction_static),
        r.a.gen_tp,
        r.port
    ));
    let avail0 = c - memory::k::SGLANG_CTX_GIB;
    ctx.out(format!(
        "{} Load weight begin. avail mem={avail0:.2} GB",
        sg(true)
    ));
    ctx.out(format!(
        "{} Load weight end. type={}ForCausalLM, dtype=torch.bfloat16, avail mem={:.2} GB, mem usage={weights:.2} GB.",
        sg(true),
        if r.arch.name.starts_with("Llama") { "Llama" } else { "Qwen2" },
        avail0 - weights
    ));
    ctx.sleep(ctx.env.step_seconds * 0.5);
    if let Some(
        f @ Failure {
            kind: FailKind::SglangNotEnough { .. },
            ..
        },
    ) = &r.est.failure
    {
        return Err(fail_exit(ctx, r, f));
    }
    let pool = r.est.kv_cache_gib.unwrap_or(0.0).max(0.0);
    let per_tok = r.arch.kv_bytes_per_token(r.a.gen_tp);
    let tokens = (pool * GIB / per_tok).floor() as u64;
    server_ready_lines(ctx, r, tokens, pool);
    Ok(tokens)
}

/// SGLang's lines from the KV pool to "ready to roll", and the launcher's note of the address.
fn server_ready_lines(ctx: &mut Ctx, r: &Run, tokens: u64, pool: f64) {
    let c = r.est.capacity_gib;
    ctx.out(format!(
        "{} KV Cache is allocated. #tokens: {tokens}, K size: {:.2} GB, V size: {:.2} GB",
        sg(true),
        pool / 2.0,
        pool / 2.0
    ));
    let after_pool = c - r.a.mem_fraction_static * c;
    let after_graphs = after_pool - memory::k::SGLANG_OVERHEAD_GIB;
    ctx.out(format!(
        "{} Memory pool end. avail mem={after_pool:.2} GB",
        sg(true)
    ));
    ctx.out(format!(
        "{} Capture cuda graph begin. This can take up to several minutes. avail mem={after_pool:.2} GB",
        sg(true)
    ));
    ctx.out(format!(
        "{} Capture cuda graph end. Time elapsed: 2.41 s. mem usage={:.2} GB. avail mem={after_graphs:.2} GB.",
        sg(true),
        memory::k::SGLANG_OVERHEAD_GIB,
    ));
    ctx.out(format!(
        "{} max_total_num_tokens={tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests={}, context_len=32768, available_gpu_mem={after_graphs:.2} GB",
        sg(true),
        (tokens / 512).clamp(1, 4096),
    ));
    ctx.out(format!(
        "{} The server is fired up and ready to roll!",
        sg(false)
    ));
    ctx.out(format!(
        "{} Local Scheduler INFO: LLM inference server launched at: AREAL_LLM_SERVER_ADDRS=localhost:{}",
        ts(),
        r.port
    ));
}

/// Launch the trainer with torchrun; it fails here on a start-up failure, else prints the
/// recover point.
fn start_trainer(ctx: &mut Ctx, r: &Run) -> Step<()> {
    let dp = r.a.train_dp.min(ctx.env.hw.gpus_per_node).max(1);
    ctx.out(format!(
        "{} Local Scheduler INFO: Starting local process with command: stdbuf -oL torchrun --nnodes 1 --nproc-per-node {dp} --master-addr localhost --master-port {} {} 2>&1 | tee -a {}/logs/{}/{}/{}/trainer.log",
        ts(),
        r.port + 1,
        r.entry,
        r.fileroot,
        ctx.env.user,
        r.exp,
        r.trial
    ));
    if areal_colocated(&ctx.env.hw, &r.a) {
        ctx.out(format!(
            "{} Local Scheduler INFO: trainer and llm_server share GPU(s) {}",
            ts(),
            gpu_list(dp.min(server_gpus(ctx, r)))
        ));
    }
    ctx.sleep(ctx.env.step_seconds * 0.5);
    ctx.out(format!(
        "{} [FSDP Engine Rank 0] INFO: Model creation and loading time: 3.12",
        ts()
    ));
    ctx.out(format!(
        "{} [FSDP Engine Rank 0] INFO: Create optimizer time: 0.02",
        ts()
    ));
    if let Some(
        f @ Failure {
            at: FailAt::Init, ..
        },
    ) = &r.est.failure
    {
        return Err(fail_exit(ctx, r, f));
    }
    if r.start > 0 {
        ctx.out(format!(
            "{} RecoverHandler INFO: Loading recover info from {}",
            ts(),
            r.recover_dir.display()
        ));
        ctx.out(format!(
            "{} RecoverHandler INFO: Recover info loaded. Resuming from global_step_{} (epoch 0, epoch_step {}).",
            ts(),
            r.start,
            r.start
        ));
    }
    Ok(())
}

/// Steps `start + 1 ..= total`: a decode line, the update (where a training failure hits),
/// the stats, and a recover checkpoint. The run's exit code.
fn train(ctx: &mut Ctx, r: &Run, tokens: u64) -> Step<i32> {
    let (start, total) = (r.start, r.total);
    if start >= total {
        return Ok(ctx.finish(
            0,
            &format!("simulated AReaL run: nothing left to do (step {start} of {total})"),
        ));
    }
    let step_s = ctx.env.step_seconds;
    let seqs = r.a.batch_size.saturating_mul(r.a.n_samples);
    for step in start + 1..=total {
        if ctx.maybe_hang(step) {
            return Ok(124);
        }
        let running = r.a.max_concurrent_rollouts.min(seqs);
        let used = running.saturating_mul((r.a.max_new_tokens / 2).saturating_add(128));
        ctx.out(format!(
            "{} Decode batch. #running-req: {running}, #token: {used}, token usage: {:.2}, cuda graph: True, gen throughput (token/s): {:.2}, #queue-req: {},",
            sg(true),
            used as f64 / tokens.max(1) as f64,
            1800.0 + 900.0 * ctx.ids.unit(&format!("tput{step}")),
            seqs.saturating_sub(running)
        ));
        ctx.sleep(step_s * 0.5);
        let rel = step - start;
        if let Some(f) = r
            .est
            .failure
            .as_ref()
            .filter(|f| f.at == FailAt::Train { step: rel })
        {
            return Err(fail_exit(ctx, r, f));
        }
        ctx.sleep(step_s * 0.5);
        step_done(ctx, r, step, seqs);
    }
    Ok(ctx.finish(
        0,
        &format!(
            "simulated AReaL run finished: steps {}..{total} completed",
            start + 1
        ),
    ))
}

/// A completed step's trainer and stats lines, and its recover checkpoint.
fn step_done(ctx: &mut Ctx, r: &Run, step: u64, seqs: u64) {
    let total = r.total;
    ctx.out(format!(
        "{} [Trainer Rank 0] INFO: Epoch 1/1 Step {step}/{total} Train step {step}/{total} done.",
        ts()
    ));
    ctx.out(format!(
        "{} StatsLogger INFO: Stats ({step}/{total}): ppo_actor/task_reward/avg={:.4}, ppo_actor/update/actor_loss/avg={:.5}, ppo_actor/update/grad_norm={:.4}, rollout/n_seqs={seqs}, timeperf/train_step={:.3}",
        ts(),
        metric(&ctx.ids, "reward", step, 0.25, 0.7),
        metric(&ctx.ids, "loss", step, 0.01, -0.003),
        metric(&ctx.ids, "grad", step, 0.4, 0.2),
        ctx.env.step_seconds * 0.5,
    ));
    // AReaL's `DeviceRuntimeInfo.log` (areal/api/io_struct.py:406-417, v1.0.4), as its FSDP
    // engine prints it before offloading the model after an update
    // (areal/engine/fsdp_engine.py:910): what the update left allocated and reserved.
    ctx.out(format!(
        "{} FSDPEngine INFO: Memory-Usage before offload model: memory allocated (GB): {:.2}, memory reserved (GB): {:.2}, device memory used/total (GB): {:.2}/{:.2}",
        ts(),
        r.est.train_allocated_gib,
        r.est.train_reserved_gib,
        r.est.train_peak_gib.min(r.est.capacity_gib),
        r.est.capacity_gib,
    ));
    let body = format!(
        "{{\"simulated\": true, \"trainer\": \"areal\", \"global_step\": {step}, \"epoch\": 0, \"epoch_step\": {step}}}\n"
    );
    match write_file(&r.recover_dir.join("recover_info.json"), &body) {
        Ok(()) => ctx.out(format!(
            "{} RecoverHandler INFO: Saved recover checkpoint at global_step_{step} to {}",
            ts(),
            r.recover_dir.display()
        )),
        Err(e) => ctx.err(format!(
            "{TAG} warning: could not write {}: {e}",
            r.recover_dir.display()
        )),
    }
}

/// The launcher's `JobException` after `job` ("trainer" or "llm_server") failed.
fn launcher_failed(r: &Run, job: &str) -> String {
    Vars::new()
        .set("areal_time", stamp(&report::Stamp::now()))
        .set("server_pid", r.server_pid)
        .set("torchrun_pid", r.torchrun_pid)
        .set("run_name", &r.run_name)
        .set("job", job)
        .text(messages::LAUNCHER_FAILED)
}

/// torch elastic's report that the trainer ended with `exitcode`, and what the launcher adds.
fn trainer_failed(r: &Run, exitcode: i32) -> Vars {
    let st = report::Stamp::now();
    Vars::new()
        .set("glog", st.glog())
        .set("torchrun_pid", r.torchrun_pid)
        .set("trainer_pid", r.trainer_pid)
        .block(
            "child_failed",
            report::elastic_failed(&r.entry, &st, &report::hostname(), r.trainer_pid, exitcode),
        )
        .block("launcher_failed", launcher_failed(r, "trainer"))
}

/// Print the real failure output for `f` (`outputs/areal/*.txt`) and return AReaL's exit code.
fn fail_exit(ctx: &mut Ctx, r: &Run, f: &Failure) -> i32 {
    let (template, vars) = match &f.kind {
        FailKind::SglangNotEnough { .. } => (
            messages::SGLANG_NOT_ENOUGH,
            Vars::new()
                .set("sglang_time", report::Stamp::now().sglang())
                .set("message", report::sglang_not_enough())
                .block("launcher_failed", launcher_failed(r, "llm_server")),
        ),
        FailKind::GpuOom(d) => (
            messages::GPU_OOM,
            trainer_failed(r, 1)
                .set("entry", &r.entry)
                .set(
                    "oom",
                    report::torch_oom_message(d, &[r.server_pid], OwnProcess::Pid(r.trainer_pid)),
                )
                .block("site_frames", site_frames(d.site)),
        ),
        // The kernel's OOM killer takes the trainer; torch elastic reports the SIGKILL.
        FailKind::HostOom { .. } => (messages::HOST_OOM, trainer_failed(r, -9)),
        other => unreachable!("not an AReaL failure: {other:?}"),
    };
    ctx.err_template(template, &vars);
    ctx.finish(
        1,
        &format!("simulated AReaL failure: {}", crate::describe(f)),
    )
}

/// AReaL's failure outputs: the failing process's own output, torch elastic's summary where
/// the trainer died, and the local launcher's `JobException`.
pub(crate) mod messages {
    /// The launcher stops the other processes and raises `JobException` (`{job}` failed).
    pub const LAUNCHER_FAILED: &str = include_str!("../../outputs/areal/launcher_failed.txt");
    /// SGLang's scheduler fails to allocate its KV pool.
    pub const SGLANG_NOT_ENOUGH: &str = include_str!("../../outputs/areal/sglang_not_enough.txt");
    /// torch OOM in the trainer's `train_batch` (`{site_frames}`: a `frames/areal_*.txt`).
    pub const GPU_OOM: &str = include_str!("../../outputs/areal/gpu_oom.txt");
    /// The kernel's OOM killer takes the trainer; torch elastic reports the SIGKILL.
    pub const HOST_OOM: &str = include_str!("../../outputs/areal/host_oom.txt");
    /// `--config` names a file that cannot be read.
    pub const CONFIG_MISSING: &str = include_str!("../../outputs/areal/config_missing.txt");
}

/// The frames from `FSDPEngine.train_batch` (`areal/engine/fsdp_engine.py`) down to the
/// failing allocation, by allocation site: one `outputs/frames/areal_*.txt`.
pub(crate) fn site_frames(site: Site) -> &'static str {
    match site {
        Site::Softmax => include_str!("../../outputs/frames/areal_softmax.txt"),
        Site::Activations | Site::Attention | Site::Gather => {
            include_str!("../../outputs/frames/areal_forward.txt")
        }
        Site::LogitsBf16 | Site::LogitsFp32 => {
            include_str!("../../outputs/frames/areal_logits.txt")
        }
        Site::Recompute | Site::Grads => {
            include_str!("../../outputs/frames/areal_backward.txt")
        }
        Site::Optim => include_str!("../../outputs/frames/areal_optim.txt"),
        Site::Params | Site::RefParams | Site::Static => {
            include_str!("../../outputs/frames/areal_params.txt")
        }
    }
}

/// AReaL's time stamp (realhf logging): `20251121-04:38:12.123`.
pub(crate) fn stamp(s: &report::Stamp) -> String {
    format!(
        "{}{}{}-{}",
        s.part(0, 4),
        s.part(5, 7),
        s.part(8, 10),
        s.part(11, 23)
    )
}

#[cfg(test)]
mod tests {
    use regex::Regex;

    use crate::testing::*;

    fn args(fileroot: &std::path::Path, pairs: &[(&str, &str)]) -> Vec<String> {
        let mut v: Vec<String> = vec!["trial_name=trial0".into()];
        v.extend(pairs.iter().map(|(k, val)| format!("{k}={val}")));
        v.push(format!("cluster.fileroot={}", fileroot.display()));
        v.push("recover.mode=auto".into());
        v
    }

    #[test]
    fn default_config_on_a40_fails_like_seed_000() {
        let tmp = tempfile::tempdir().unwrap();
        let a = args(tmp.path(), &orch_memory::estimate::seeds::areal_default());
        let (code, cap) = run_capture("areal", &a, &a40_env("1", &[]));
        assert_eq!(code, 1, "{}", cap.all());
        let err = cap.stderr();
        let re = Regex::new(r"(?m)^\[rank0\]: torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate \d+\.\d\d MiB\. GPU 0 has a total capacity of 44\.42 GiB of which \d+\.\d\d MiB is free\. Process \d+ has (\d+\.\d\d) GiB memory in use\. Process \d+ has (\d+\.\d\d) GiB memory in use\. Of the allocated memory").unwrap();
        let c = re.captures(&err).expect("seed-000-style OOM");
        let sglang: f64 = c[1].parse().unwrap();
        let trainer: f64 = c[2].parse().unwrap();
        assert!((sglang - 36.34).abs() < 0.05, "{sglang}");
        assert!((7.0..=8.5).contains(&trainer), "{trainer}");
        assert!(err.contains("realhf.scheduler.client.JobException: Job gsm8k-grpo_trial0:trainer JobState.FAILED at node local"));
        assert!(err.contains("torch.distributed.elastic.multiprocessing.errors.ChildFailedError"));
        // The harmless server_args dump comes before.
        assert!(cap.stdout().contains("mem_fraction_static=0.8"));
    }

    #[test]
    fn a40_config_completes_and_recovers() {
        let tmp = tempfile::tempdir().unwrap();
        let a = args(
            tmp.path(),
            &orch_memory::estimate::seeds::areal_a40_optimized(),
        );
        let env = a40_env("1", &[("USER", "alice")]);
        let (code, cap) = run_capture("areal", &a, &env);
        assert_eq!(code, 0, "{}", cap.all());
        let done = Regex::new(r"Epoch 1/1 Step (\d+)/4 Train step \d+/4 done\.").unwrap();
        let steps: Vec<u64> = done
            .captures_iter(&cap.stdout())
            .map(|c| c[1].parse().unwrap())
            .collect();
        assert_eq!(steps, vec![1, 2, 3, 4]);
        let info = tmp
            .path()
            .join("checkpoints/alice/gsm8k-grpo/trial0/recover_checkpoint/recover_info.json");
        assert!(info.is_file());
        let env = a40_env("1", &[("USER", "alice"), ("ORCH_SIM_STEPS", "5")]);
        let (code, cap) = run_capture("areal", &a, &env);
        assert_eq!(code, 0);
        assert!(cap.stdout().contains("Resuming from global_step_4"));
        let steps: Vec<u64> = done
            .captures_iter(&cap.stdout())
            .map(|c| c[1].parse().unwrap())
            .collect();
        assert!(steps.is_empty(), "total is 5 now: {steps:?}");
        let done5 = Regex::new(r"Step 5/5 Train step 5/5 done\.").unwrap();
        assert!(done5.is_match(&cap.stdout()));
    }

    #[test]
    fn tiny_fraction_fails_in_sglang() {
        let tmp = tempfile::tempdir().unwrap();
        let mut pairs = orch_memory::estimate::seeds::areal_a40_optimized();
        pairs.push(("sglang.mem_fraction_static", "0.05"));
        let (code, cap) = run_capture("areal", &args(tmp.path(), &pairs), &a40_env("1", &[]));
        assert_eq!(code, 1);
        assert!(cap.stderr().contains(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
        ));
        assert!(
            cap.stderr()
                .contains("Job gsm8k-grpo_trial0:llm_server JobState.FAILED")
        );
    }

    #[test]
    fn config_file_is_read_then_overridden() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = tmp.path().join("cfg.yaml");
        std::fs::write(
            &cfg,
            "experiment_name: demo\nactor:\n  path: Qwen/Qwen2.5-1.5B-Instruct\n  gradient_checkpointing: true\n  mb_spec:\n    max_tokens_per_mb: 4096\nsglang:\n  mem_fraction_static: 0.8\ngconfig:\n  max_new_tokens: 256\n",
        )
        .unwrap();
        let mut a = vec![
            "examples/x/train.py".to_string(),
            "--config".into(),
            cfg.display().to_string(),
            "sglang.mem_fraction_static=0.5".into(),
        ];
        a.push(format!("cluster.fileroot={}", tmp.path().display()));
        let (code, cap) = run_capture("areal", &a, &a40_env("1", &[]));
        assert_eq!(code, 0, "{}", cap.all());
        assert!(cap.stdout().contains("mem_fraction_static=0.5"));
        assert!(cap.stdout().contains("experiment_name=demo"));
        let missing = vec!["--config".to_string(), "/nonexistent/cfg.yaml".into()];
        let (code, cap) = run_capture("areal", &missing, &a40_env("1", &[]));
        assert_eq!(code, 1);
        assert!(cap.stderr().contains("FileNotFoundError"));
    }
}
