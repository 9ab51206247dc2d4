//! How fast a configuration trains, relative to other configurations that train the same
//! thing: tokens per GPU-second, as a fraction of an ideal step with none of the costs below.
//!
//! Only ratios between candidates matter (the planner ranks them), so each knob is one factor
//! on the step time, documented with where its size comes from (docs/PLANNER.md has the table):
//!
//! - full activation checkpointing recomputes each layer's forward ([`RECOMPUTE_TIME`]);
//! - a small micro-batch leaves the GPU's matrix units idle: efficiency saturates with tokens
//!   per micro-batch × hidden size ([`HALF_SATURATION_TOKEN_WIDTH`]);
//! - a peak close to capacity makes the caching allocator free and retry ([`PRESSURE_TIME`]);
//! - parameter offload moves the weights over PCIe every phase, optimizer offload the AdamW
//!   state once a step ([`PARAM_OFFLOAD_TIME`] > [`OPTIMIZER_OFFLOAD_TIME`]);
//! - a smaller rollout-engine share (vLLM `gpu_memory_utilization`, SGLang
//!   `mem_fraction_static`) leaves less KV cache, fewer sequences in flight and a slower
//!   rollout ([`ROLLOUT_CONCURRENCY_EXPONENT`]), which is [`ROLLOUT_SHARE`] of an RL step —
//!   up to what the engine would run at once anyway (the trainer's `Rollout::demand_tokens`:
//!   verl's `max_num_seqs` caps it);
//! - a rollout engine split over more GPUs (tensor parallelism) leaves more KV cache per GPU
//!   but synchronises every layer, and the same GPUs run fewer engines
//!   ([`ROLLOUT_TP_EFFICIENCY`]);
//! - more GPUs shorten the step but lose a little per GPU to communication
//!   ([`SCALING_PER_DOUBLING`]); the figure is per GPU because GPU-hours are what a run costs.

use orch_memory::estimate::GIB;

use crate::estimate::PlanEstimate;

/// Step time with full activation checkpointing: one more forward per step. A forward is a
/// third of forward + backward FLOPs (+33 %; Chen et al. 2016; Korthikanti et al. 2022 measure
/// 36–39 % on GPT-3 shapes). Fitted with [`HALF_SATURATION_TOKEN_WIDTH`] to the measured H100
/// grid of `data/throughput/h100-train-py.jsonl` (train.py, Qwen2.5-0.5B/1.5B shapes: 1.13–1.62
/// measured, best fit 1.35); it was 1.25, the middle of the 20–30 % people report for LLM
/// fine-tuning (verl's performance-tuning guide; seed 003).
pub const RECOMPUTE_TIME: f64 = 1.35;

/// Tokens per micro-batch × hidden size at which a GPU reaches half its peak throughput:
/// efficiency = n / (n + this). Small micro-batches leave the matrix units idle and pay the
/// per-micro-step launches, all-reduce hooks and optimizer bookkeeping on few tokens. Fitted to
/// the H100 grid measured with examples/torchrun/train.py (`data/throughput/h100-train-py.jsonl`:
/// for a 0.5B model at 2048 tokens, micro batch 1 ran at 24 % of micro batch 8's tokens/s, 2 at
/// 51 %, 4 at 85 %): pairwise ratios within a factor e^0.15 (the test below). It was 524,288,
/// fitted to the shape of published curves, which put micro batch 1 at 81 % there.
/// It ranks micro-batch sizes; measured tokens/s replace it where there are some.
pub const HALF_SATURATION_TOKEN_WIDTH: f64 = 10_000_000.0;

/// A peak above this fraction of the card makes torch's caching allocator release cached
/// blocks and retry (`num_alloc_retries` in `torch.cuda.memory_stats`).
pub const PRESSURE_FRACTION: f64 = 0.95;

/// Step time under that pressure: `cudaFree`/`cudaMalloc` round trips synchronise the device.
pub const PRESSURE_TIME: f64 = 1.05;

/// Training-phase time with FSDP parameter offload: the weights cross PCIe before every
/// forward and backward (ZeRO-Offload, Ren et al. 2021; verl's docs list it among the slowest
/// memory savers).
pub const PARAM_OFFLOAD_TIME: f64 = 1.20;

/// Training-phase time with optimizer-state offload: the AdamW state crosses PCIe once a
/// step and the update runs on the CPU (ZeRO-Offload's CPU Adam).
pub const OPTIMIZER_OFFLOAD_TIME: f64 = 1.10;

/// Share of an RL step spent generating (verl and AReaL step timings: generation is 40–60 %
/// of a GRPO step at these lengths).
pub const ROLLOUT_SHARE: f64 = 0.5;

/// Rollout time ∝ (fraction of the batch the KV cache holds at once)^-this. Decoding is
/// memory-bound, so halving the sequences in flight nearly doubles the time; not quite, as
/// larger batches become compute-bound.
pub const ROLLOUT_CONCURRENCY_EXPONENT: f64 = 0.8;

/// Per-GPU rollout throughput kept per doubling of the rollout engine's tensor-parallel size,
/// at the same KV cache per GPU: the GPUs run half as many engines, each synchronising its
/// layers over the GPUs it spans. verl's performance guide (docs/perf/perf_tuning.rst at
/// b178a3cd5, "Use a smaller tensor_parallel_size": more vLLM replicas, "Data parallelism (DP)
/// can yield higher throughput than tensor parallelism (TP)", citing HybridFlow §8.4); vLLM's
/// tuning guide ("may lead to excessive synchronization overhead"); vLLM of 2023 gained no
/// engine throughput at all from TP 2–8 (vllm-project/vllm#367, #1435: 0.5 per doubling); a
/// later serving comparison of TP 2 × 4 against TP 1 × 8 on one 8-GPU node, supporting
/// only, measured +51 % time per output token at TP 2, ≈ 0.66 of the per-GPU decode rate
/// (gitea.gahow.org/gahow/agentic-kvc, commit 42bcd3197). The KV-cache gain is counted apart
/// (the cache holds more of the rollout), so more TP still wins where the cache limits.
pub const ROLLOUT_TP_EFFICIENCY: f64 = 0.7;

/// Per-GPU throughput kept per doubling of data-parallel GPUs (gradient all-reduce, a
/// smaller batch per GPU): ring all-reduce overlapped with the backward costs a few percent.
pub const SCALING_PER_DOUBLING: f64 = 0.95;

/// A plan's predicted throughput and the factors it is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Throughput {
    /// Tokens per GPU-second relative to an ideal step (0–1).
    pub relative: f64,
    /// The costs that made it smaller, as `(what, step-time factor)`.
    pub costs: Vec<(String, f64)>,
}

/// Predict `e`'s throughput; `base_gpus` is the GPU count the experiment asked for (scaling
/// losses count from there), `capacity_gib` the card's memory available to the job.
pub fn predict(e: &PlanEstimate, base_gpus: u32, capacity_gib: f64) -> Throughput {
    let mut costs: Vec<(String, f64)> = Vec::new();
    let est = &e.estimate;
    let knobs = e.workload.knobs();
    let hidden = est
        .arch
        .as_ref()
        .map(|a| f64::from(a.hidden))
        .unwrap_or(knobs.hidden_without_shape);
    let mut train = train_time(&mut costs, est.tokens_per_micro, hidden);
    if knobs.gradient_checkpointing {
        train *= cost(&mut costs, "activation recompute", RECOMPUTE_TIME);
    }
    if knobs.param_offload {
        train *= cost(&mut costs, "parameter offload", PARAM_OFFLOAD_TIME);
    }
    if knobs.optimizer_offload {
        train *= cost(&mut costs, "optimizer offload", OPTIMIZER_OFFLOAD_TIME);
    }
    let rollout = knobs
        .rollout
        .map(|r| rollout_time(&mut costs, e, r.demand_tokens, r.tensor_parallel));
    let mut step = match rollout {
        Some(r) => ROLLOUT_SHARE * r + (1.0 - ROLLOUT_SHARE) * train,
        None => train,
    };
    // What other streams keep cached is freed under pressure before anything else.
    let peak = (est.train_reserved_gib - est.train_stream_cache_gib).max(est.rollout_peak_gib);
    if peak > PRESSURE_FRACTION * capacity_gib {
        step *= cost(
            &mut costs,
            "allocator pressure near capacity",
            PRESSURE_TIME,
        );
    }
    let doublings = (f64::from(est.gpus.max(1)) / f64::from(base_gpus.max(1))).log2();
    let scaling = SCALING_PER_DOUBLING.powf(doublings);
    if doublings > 0.0 {
        cost(&mut costs, "communication over more GPUs", 1.0 / scaling);
    }
    Throughput {
        relative: scaling / step,
        costs,
    }
}

/// Record a cost and return its factor.
fn cost(costs: &mut Vec<(String, f64)>, what: &str, factor: f64) -> f64 {
    costs.push((what.to_string(), factor));
    factor
}

/// The training phase's time for one token, from how full a micro-batch keeps the GPU.
fn train_time(costs: &mut Vec<(String, f64)>, tokens_per_micro: f64, hidden: f64) -> f64 {
    let work = tokens_per_micro.max(1.0) * hidden.max(1.0);
    let efficiency = work / (work + HALF_SATURATION_TOKEN_WIDTH);
    let time = 1.0 / efficiency;
    if time > 1.01 {
        cost(
            costs,
            &format!("{tokens_per_micro:.0} tokens per micro-batch"),
            time,
        );
    }
    time
}

/// The rollout phase's time, from the share of `demand` tokens the KV cache holds at once.
fn rollout_time(costs: &mut Vec<(String, f64)>, e: &PlanEstimate, demand: f64, tp: u32) -> f64 {
    let split = tensor_parallel_time(costs, tp);
    let (Some(kv_gib), Some(arch)) = (e.estimate.kv_cache_gib, e.estimate.arch.as_ref()) else {
        return split;
    };
    let per_token = arch.kv_bytes_per_token(tp.max(1));
    if per_token <= 0.0 || demand <= 0.0 {
        return split;
    }
    let held = (kv_gib.max(0.0) * GIB / per_token / demand).clamp(1e-3, 1.0);
    let time = held.powf(-ROLLOUT_CONCURRENCY_EXPONENT);
    if time > 1.01 {
        cost(
            costs,
            &format!(
                "KV cache holds {:.0} % of the rollout at once",
                held * 100.0
            ),
            time,
        );
    }
    time * split
}

/// The rollout's time for splitting each engine over `tp` GPUs ([`ROLLOUT_TP_EFFICIENCY`] per
/// doubling from one), whether or not the KV cache's share is known.
fn tensor_parallel_time(costs: &mut Vec<(String, f64)>, tp: u32) -> f64 {
    let doublings = f64::from(tp.max(1)).log2();
    if doublings <= 0.0 {
        return 1.0;
    }
    cost(
        costs,
        &format!("rollout engines split over {tp} GPUs (tensor parallel)"),
        ROLLOUT_TP_EFFICIENCY.powf(-doublings),
    )
}

#[cfg(test)]
mod grid_tests {
    use super::*;

    /// The rollout's split over TP GPUs: nothing at 1, [`ROLLOUT_TP_EFFICIENCY`] per doubling,
    /// listed as a cost (`rollout_time` applies it on every path, the KV share known or not).
    #[test]
    fn tensor_parallelism_costs_per_doubling() {
        let mut costs = Vec::new();
        assert_eq!(tensor_parallel_time(&mut costs, 1), 1.0);
        assert!(costs.is_empty());
        let four = tensor_parallel_time(&mut costs, 4);
        assert!((four - 1.0 / (0.7 * 0.7)).abs() < 1e-12, "{four}");
        assert_eq!(costs.len(), 1, "{costs:?}");
    }

    /// examples/torchrun/train.py on one H100 (data/throughput/README.md).
    const GRID: &str = include_str!("../../data/throughput/h100-train-py.jsonl");

    /// Root-mean-square of ln(predicted ratio / measured ratio) over every pair of
    /// configurations of one model that ran, with `width` and `recompute` as the constants.
    fn error(width: f64, recompute: f64) -> f64 {
        let rows: Vec<serde_json::Value> = GRID
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            // The grid itself: not the row run with an allocator setting (a memory row).
            .filter(|r: &serde_json::Value| r["outcome"] == "ok" && r["alloc_conf"].is_null())
            .collect();
        let hidden = |m: &str| match m {
            "qwen2.5-0.5b" => 896.0,
            "qwen2.5-1.5b" => 1536.0,
            other => panic!("no hidden size for {other}"),
        };
        let speed = |r: &serde_json::Value| {
            let work = r["micro_batch_size"].as_f64().unwrap()
                * r["max_seq_len"].as_f64().unwrap()
                * hidden(r["model"].as_str().unwrap());
            let time = (work + width) / work;
            1.0 / if r["gradient_checkpointing"] == true {
                time * recompute
            } else {
                time
            }
        };
        let (mut sum, mut n) = (0.0, 0);
        for (i, a) in rows.iter().enumerate() {
            for b in rows.iter().skip(i + 1).filter(|b| b["model"] == a["model"]) {
                let measured =
                    a["tokens_per_s"].as_f64().unwrap() / b["tokens_per_s"].as_f64().unwrap();
                sum += ((speed(a) / speed(b)) / measured).ln().powi(2);
                n += 1;
            }
        }
        assert!(n >= 20, "{n} pairs");
        (sum / f64::from(n)).sqrt()
    }

    #[test]
    fn the_model_ranks_the_measured_h100_grid() {
        let now = error(HALF_SATURATION_TOKEN_WIDTH, RECOMPUTE_TIME);
        // Within e^0.2 ≈ 1.22 of every measured ratio, on the root-mean-square.
        assert!(now < 0.2, "{now}");
        // The constants sit at the grid's optimum: a factor 2 either way, or the recompute
        // cost 0.1 off, fits worse; the earlier constants were off by a factor ~2.
        for (w, r) in [
            (HALF_SATURATION_TOKEN_WIDTH * 2.0, RECOMPUTE_TIME),
            (HALF_SATURATION_TOKEN_WIDTH / 2.0, RECOMPUTE_TIME),
            (HALF_SATURATION_TOKEN_WIDTH, RECOMPUTE_TIME + 0.1),
            (HALF_SATURATION_TOKEN_WIDTH, RECOMPUTE_TIME - 0.1),
        ] {
            assert!(error(w, r) > now, "{w} {r}: {} <= {now}", error(w, r));
        }
        assert!(error(524_288.0, 1.25) > 0.6);
    }
}
