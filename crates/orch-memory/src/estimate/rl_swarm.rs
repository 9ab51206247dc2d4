//! rl-swarm: one node of Gensyn's swarm, genrl 0.1.11's `GRPOLanguageTrainerModule` on one
//! GPU (`rgym_exp/src/trainer.py` subclasses it; no Ray, no vLLM, no DDP). What it holds:
//!
//! - the model, cast whole to `training.dtype` (`model.to(device, dtype)`: no autocast, no
//!   fp32 master copy), so weights, gradients and `torch.optim.Adam`'s two moments all take
//!   its bytes per parameter — 16 B/param in float32, 8 in float16/bfloat16;
//! - a reference model of the same size only when `beta` ≠ 0 (genrl's default is 0.0);
//! - generation (`model.generate`, Hugging Face's KV cache) for the node's own
//!   `num_train_samples` prompts, once per completion;
//! - one training step per round over every sequence of the round: own and transplanted
//!   prompts × `num_generations`, each padded to the longest prompt plus the longest
//!   completion, the forward keeping each decoder layer's activations (or only its input with
//!   gradient checkpointing), the logits of the completion tokens, their log-softmax, then the
//!   backward trading activations for gradients; `zero_grad` frees the gradients after
//!   `optimizer.step()`.
//!
//! Round 1 allocates Adam's state after its backward (the optimizer step); from round 2 it is
//! resident before the forward. Both orders are replayed, and the generation phase of both
//! rounds: the first that does not fit is the failure.

use super::GIB;
use super::allocator::{Event, Site, alloc, walk};
use super::config::RlSwarmConfig;
use super::hardware::{Hardware, Trainer};
use super::host::host_limit;
use super::k;
use super::output::{Estimate, FailAt, FailKind, Failure, item, items_from_events, summed_items};
use super::torchrun::layer_blocks;
use crate::shape::{Arch, lookup};

/// Sizes of one node's configuration on one model, in GiB.
struct Sizes {
    /// Bytes per element (`training.dtype`).
    b: f64,
    /// The model's weights.
    weights: f64,
    /// Tokens in the training step (sequences × padded length).
    tokens: f64,
    /// One copy of the completion logits.
    logits: f64,
    /// The KV cache of one generation call.
    kv: f64,
}

impl Sizes {
    fn new(r: &RlSwarmConfig, a: &Arch) -> Self {
        let b = r.bytes_per_element();
        let completion = r.max_new_tokens as f64;
        let seqs = r.train_sequences() as f64;
        let per_token_kv = a.kv_bytes_per_token(1) / 2.0 * b;
        Sizes {
            b,
            weights: b * a.params / GIB,
            tokens: seqs * (k::RS_PROMPT_TOKENS + completion),
            logits: seqs * completion * a.vocab as f64 * b / GIB,
            kv: r.num_train_samples.max(1) as f64
                * (k::RS_PROMPT_TOKENS + completion)
                * per_token_kv
                / GIB,
        }
    }
}

/// What is resident between steps: the weights, a reference model, Adam's state from round 2
/// on, gradients held for accumulation.
fn resident(r: &RlSwarmConfig, a: &Arch, s: &Sizes, adam: bool) -> Vec<Event> {
    let chunk = s.b * a.largest_unit_params() / GIB;
    let dtype = r.dtype_name();
    let mut events = vec![alloc(
        Site::Params,
        format!("weights {dtype} ({} B/param)", s.b),
        s.weights,
        chunk,
    )];
    if r.beta != 0.0 {
        events.push(alloc(
            Site::RefParams,
            format!("reference model {dtype} (beta {})", r.beta),
            s.weights,
            chunk,
        ));
    }
    if adam {
        events.push(adam_state(r, a, s));
    }
    if r.gradient_accumulation_steps > 1 && adam {
        events.push(alloc(
            Site::Grads,
            format!(
                "gradients held between rounds (gradient_accumulation_steps {})",
                r.gradient_accumulation_steps
            ),
            s.weights,
            chunk,
        ));
    }
    events
}

fn adam_state(r: &RlSwarmConfig, a: &Arch, s: &Sizes) -> Event {
    alloc(
        Site::Optim,
        format!(
            "Adam exp_avg + exp_avg_sq {} ({} B/param)",
            r.dtype_name(),
            2.0 * s.b
        ),
        2.0 * s.weights,
        s.b * a.largest_unit_params() / GIB,
    )
}

/// One generation call: the weights (and whatever is resident), Hugging Face's KV cache for
/// the node's own prompts, the last position's logits upcast to fp32 for sampling.
fn rollout_events(r: &RlSwarmConfig, a: &Arch, s: &Sizes, adam: bool) -> Vec<Event> {
    let mut events = resident(r, a, s, adam);
    let n = r.num_train_samples.max(1) as f64;
    events.push(alloc(
        Site::Activations,
        format!(
            "KV cache ({} prompts × {} tokens, {})",
            r.num_train_samples,
            k::RS_PROMPT_TOKENS + r.max_new_tokens as f64,
            r.dtype_name()
        ),
        s.kv,
        s.kv / a.layers.max(1) as f64,
    ));
    let sampling = n * a.vocab as f64 * 4.0 / GIB;
    events.push(alloc(
        Site::LogitsFp32,
        "next-token logits (fp32, sampling)",
        sampling,
        sampling,
    ));
    events
}

/// One decoder layer's saved activations for `tokens` tokens (GiB).
fn layer_activations(r: &RlSwarmConfig, a: &Arch, tokens: f64) -> f64 {
    let (bh, bkv, bi) = if r.bytes_per_element() < 4.0 {
        k::RS_LAYER_BYTES_HALF
    } else {
        k::TR_LAYER_BYTES_FP32
    };
    let kv = f64::from(a.kv_heads) * f64::from(a.head_dim);
    tokens * (bh * a.hidden as f64 + bkv * kv + bi * a.intermediate as f64) / GIB
}

/// The training step in the order torch allocates it. `steady`: round 2 on (Adam's state
/// resident first); else round 1 (Adam's state created by the optimizer step, last).
pub(crate) fn train_events(r: &RlSwarmConfig, a: &Arch, steady: bool) -> Vec<Event> {
    let s = Sizes::new(r, a);
    let g = |bytes: f64| bytes / GIB;
    let ckpt = r.gradient_checkpointing;
    let accumulating = r.gradient_accumulation_steps > 1 && steady;
    let mut events = resident(r, a, &s, steady);
    let per_layer = layer_activations(r, a, s.tokens);
    let stored = if ckpt {
        g(s.tokens * a.hidden as f64 * s.b)
    } else {
        per_layer
    };
    for n in layer_blocks(a.layers) {
        events.push(alloc(
            Site::Activations,
            if ckpt {
                "checkpointed layer inputs"
            } else {
                "activations, all layers (no checkpointing)"
            },
            stored * n,
            stored,
        ));
    }
    // `_get_per_token_logps`: the LM head's output for the completion tokens, its contiguous
    // slice divided by the temperature (the raw logits die), the log-softmax of
    // `cross_entropy` (kept for the backward); the scaled copy dies on return.
    let x = s.logits;
    events.push(alloc(
        Site::LogitsBf16,
        format!("completion logits ({})", r.dtype_name()),
        x,
        x,
    ));
    events.push(alloc(
        Site::LogitsFp32,
        "completion logits ÷ temperature (contiguous copy)",
        x,
        x,
    ));
    events.push(Event::Free { gib: x });
    events.push(alloc(
        Site::Softmax,
        "log-softmax of the completion logits",
        x,
        x,
    ));
    events.push(Event::Free { gib: x });
    if r.beta != 0.0 {
        events.push(alloc(
            Site::LogitsBf16,
            "reference model logits (no grad)",
            2.0 * x,
            x,
        ));
        events.push(Event::Free { gib: 2.0 * x });
    }
    // The backward: the log-softmax's gradient and the logits' gradient beside the saved
    // log-softmax, then the LM head's weight gradient.
    events.push(alloc(Site::Grads, "gradient of the log-softmax", x, x));
    events.push(alloc(Site::Grads, "gradient of the logits", x, x));
    let head = a.embed_params();
    if !accumulating {
        events.push(alloc(
            Site::Grads,
            format!("LM head gradient ({})", r.dtype_name()),
            g(s.b * head),
            g(s.b * head),
        ));
    }
    events.push(Event::Free { gib: 3.0 * x });
    if ckpt {
        events.push(alloc(
            Site::Recompute,
            "one layer recomputed in the backward",
            per_layer,
            per_layer / 4.0,
        ));
    }
    let layer = a.layer_params();
    for n in layer_blocks(a.layers) {
        events.push(Event::Free { gib: n * stored });
        if !accumulating {
            events.push(alloc(
                Site::Grads,
                format!("gradients ({})", r.dtype_name()),
                n * g(s.b * layer),
                g(s.b * layer),
            ));
        }
    }
    if !accumulating && !a.tied_embeddings {
        events.push(alloc(
            Site::Grads,
            format!("input embedding gradient ({})", r.dtype_name()),
            g(s.b * head),
            g(s.b * head),
        ));
    }
    if !steady {
        // Round 1: `optimizer.step()` creates Adam's state with every gradient resident.
        events.push(adam_state(r, a, &s));
    }
    events
}

/// rl-swarm's estimate for `r` on `hw`; `known` is the model's shape when the caller resolved
/// it, else the model table's (or a stand-in of the name's size).
pub(crate) fn estimate_rl_swarm(
    hw: &Hardware,
    r: &RlSwarmConfig,
    known: Option<&Arch>,
) -> Estimate {
    let a = known.cloned().unwrap_or_else(|| lookup(&r.model));
    let s = Sizes::new(r, &a);
    let frag = hw.frag();
    let c = hw.gpu_mem_gib;
    let ctx = k::CUDA_CTX_GIB;
    let phases = [
        (
            FailAt::Rollout { step: 1 },
            rollout_events(r, &a, &s, false),
        ),
        (FailAt::Train { step: 1 }, train_events(r, &a, false)),
        (FailAt::Rollout { step: 2 }, rollout_events(r, &a, &s, true)),
        (FailAt::Train { step: 2 }, train_events(r, &a, true)),
    ];
    let mut failure = None;
    let mut train = None;
    let mut rollout_peak: f64 = 0.0;
    for (at, events) in &phases {
        let need = walk(f64::INFINITY, &[], ctx, frag, events);
        if matches!(at, FailAt::Train { .. }) {
            if train
                .as_ref()
                .is_none_or(|t: &super::allocator::Walk| need.device_peak_gib > t.device_peak_gib)
            {
                train = Some(need);
            }
        } else {
            rollout_peak = rollout_peak.max(need.device_peak_gib);
        }
        if failure.is_none()
            && let Some(oom) = walk(c, &[], ctx, frag, events).oom
        {
            // Weights that do not fit fail in `model.to(device)`, before any round.
            let at = if matches!(oom.site, Site::Params | Site::RefParams) {
                FailAt::Init
            } else {
                *at
            };
            failure = Some(Failure {
                at,
                kind: FailKind::GpuOom(oom),
            });
        }
    }
    let train = train.expect("two training walks");
    let mut train_items = vec![item("CUDA context (non-PyTorch)", ctx)];
    train_items.extend(summed_items(&phases[3].1));
    train_items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", frag * 100.0),
        train.reserved_peak_gib - train.allocated_peak_gib,
    ));
    let mut rollout_items = vec![item("CUDA context (non-PyTorch)", ctx)];
    rollout_items.extend(items_from_events(&phases[2].1));
    let host = k::RS_HOST_BASE_GIB + 4.0 * a.params / GIB;
    if host > host_limit(hw) {
        failure = Some(Failure {
            at: FailAt::Init,
            kind: FailKind::HostOom {
                used_gib: host.min(hw.host_mem_gib * 0.99),
                total_gib: hw.host_mem_gib,
                worker_gib: host,
                task: "swarm_launcher".into(),
            },
        });
    }
    let mut notes = r.notes.clone();
    notes.push(format!(
        "rl-swarm: {} ({:.2}B params) in {}, {} sequences of ≤ {} prompt + {} completion tokens per round",
        a.name,
        a.params / 1e9,
        r.dtype_name(),
        r.train_sequences(),
        k::RS_PROMPT_TOKENS,
        r.max_new_tokens
    ));
    Estimate {
        trainer: Trainer::RlSwarm,
        arch: Some(a),
        capacity_gib: c,
        gpus: 1,
        frag,
        tokens_per_micro: s.tokens,
        train_items,
        train_peak_gib: train.device_peak_gib,
        train_allocated_gib: train.allocated_peak_gib,
        train_reserved_gib: train.reserved_peak_gib,
        train_static: None,
        rollout_items,
        rollout_peak_gib: rollout_peak,
        kv_cache_gib: Some(s.kv),
        host_peak_gib: host,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::super::seeds::rl_swarm_seed_004;
    use super::super::tests::hw;
    use super::super::*;
    use super::train_events;
    use crate::overrides::Overrides;

    /// An RTX 4090 as the rtx4090 profile describes it (expandable segments on).
    fn rtx4090() -> Hardware {
        hw("NVIDIA GeForce RTX 4090", 23.65, 1, 120.0, true)
    }

    /// Seed 004's starting configuration with `extra` overrides on top.
    fn node(extra: &[(&str, &str)]) -> RlSwarmConfig {
        let mut args: Vec<String> = rl_swarm_seed_004()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        args.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        let mut o = Overrides::new();
        o.apply_hydra(&args);
        RlSwarmConfig::from_overrides(&o, 23.65, None)
    }

    fn est(r: RlSwarmConfig) -> Estimate {
        estimate(&SimConfig {
            hw: rtx4090(),
            workload: Workload::RlSwarm(r),
            resumed: false,
            arch: None,
        })
    }

    const FP16: (&str, &str) = ("training.dtype", "float16");
    const CKPT: (&str, &str) = (
        "++game_manager.trainer.config.enable_gradient_checkpointing",
        "true",
    );
    const FEWER: [(&str, &str); 2] = [
        ("game_manager.data_manager.num_train_samples", "1"),
        ("++training.gradient_accumulation_steps", "2"),
    ];
    const SMALLER: (&str, &str) = (
        "game_manager.trainer.models.0.pretrained_model_name_or_path",
        "Gensyn/Qwen2.5-0.5B-Instruct",
    );

    #[test]
    fn the_keys_read_as_rl_swarm_reads_them() {
        let r = node(&[]);
        assert_eq!(r.model, "Gensyn/Qwen2.5-1.5B-Instruct");
        assert_eq!(r.precision, Precision::Fp32);
        assert!(!r.gradient_checkpointing);
        assert_eq!(r.train_sequences(), 8);
        assert_eq!(r.samples_per_update(), 4);
        // The trainer's own keys interpolate the `training.*` ones; a value there wins.
        let mut o = Overrides::new();
        o.set("training.dtype", "float32");
        o.set("game_manager.trainer.config.dtype", "${training.dtype}");
        o.set("training.num_generations", "4");
        o.set(
            "game_manager.trainer.config.num_generations",
            "${training.num_generations}",
        );
        let r = RlSwarmConfig::from_overrides(&o, 23.65, None);
        assert_eq!((r.precision, r.num_generations), (Precision::Fp32, 4));
        // genrl's default: checkpointing on.
        assert!(r.gradient_checkpointing);
    }

    #[test]
    fn the_model_is_model_name_else_the_vram_rule() {
        let o = Overrides::new();
        let r = RlSwarmConfig::from_overrides(&o, 23.65, Some("Qwen/Qwen3-0.6B"));
        assert_eq!(r.model, "Qwen/Qwen3-0.6B");
        // Below 40 GiB the small pool, at 40 GiB and above the large one.
        assert_eq!(
            RlSwarmConfig::from_overrides(&o, 23.65, None).model,
            "Gensyn/Qwen2.5-0.5B-Instruct"
        );
        assert_eq!(
            RlSwarmConfig::from_overrides(&o, 44.42, None).model,
            "nvidia/AceInstruct-1.5B"
        );
        let mut pool = Overrides::new();
        pool.apply_hydra(&["default_small_model_pool=[Qwen/Qwen3-0.6B,x/y]".to_string()]);
        assert_eq!(
            RlSwarmConfig::from_overrides(&pool, 23.65, None).model,
            "Qwen/Qwen3-0.6B"
        );
    }

    #[test]
    fn float32_stores_16_bytes_per_parameter_and_float16_8() {
        let a = crate::shape::lookup("Gensyn/Qwen2.5-1.5B-Instruct");
        let states = |r: &RlSwarmConfig| -> f64 {
            train_events(r, &a, true)
                .into_iter()
                .take(2)
                .map(|e| match e {
                    Event::Alloc { gib, .. } => gib,
                    Event::Free { .. } => 0.0,
                })
                .sum::<f64>()
        };
        let fp32 = states(&node(&[]));
        let fp16 = states(&node(&[FP16]));
        // Weights + Adam's two moments: 12 B/param in fp32, 6 in fp16 (gradients come in the backward).
        assert!((fp32 - 12.0 * a.params / GIB).abs() < 1e-6, "{fp32}");
        assert!((fp16 - 6.0 * a.params / GIB).abs() < 1e-6, "{fp16}");
    }

    #[test]
    fn fp16_and_checkpointing_each_lower_the_estimate() {
        let base = est(node(&[]));
        let fp16 = est(node(&[FP16]));
        let ckpt = est(node(&[CKPT]));
        let both = est(node(&[FP16, CKPT]));
        assert!(fp16.train_peak_gib < base.train_peak_gib - 5.0);
        assert!(ckpt.train_peak_gib < base.train_peak_gib - 5.0);
        assert!(both.train_peak_gib < fp16.train_peak_gib);
        assert!(both.train_peak_gib < ckpt.train_peak_gib);
        // Fewer sequences per round lower the activations; a smaller model everything.
        let fewer = est(node(&[FP16, FEWER[0], FEWER[1]]));
        assert!(fewer.tokens_per_micro < fp16.tokens_per_micro);
        let smaller = est(node(&[SMALLER]));
        assert!(smaller.train_peak_gib < base.train_peak_gib / 2.0);
    }

    #[test]
    fn seed_004_as_first_run_does_not_fit_a_4090() {
        let e = est(node(&[]));
        assert!(e.train_peak_gib > 23.65, "{}", e.train_peak_gib);
        let f = e.failure.expect("an OOM");
        assert!(matches!(f.kind, FailKind::GpuOom(_)), "{f:?}");
        assert_eq!(f.at, FailAt::Train { step: 1 });
    }

    #[test]
    fn the_ladder_makes_it_fit() {
        // fp16 alone is not enough for eight 768-token sequences without checkpointing …
        assert!(!est(node(&[FP16])).fits());
        // … fp16 with checkpointing is (the ladder's first two steps), and so is the smaller
        // model in float32 with checkpointing.
        let e = est(node(&[FP16, CKPT]));
        assert!(e.fits(), "{:?}", e.failure);
        assert!(e.train_peak_gib < 0.9 * 23.65, "{}", e.train_peak_gib);
        assert!(est(node(&[CKPT, SMALLER])).fits());
    }

    #[test]
    fn a_model_too_big_for_the_card_fails_while_loading() {
        let e = est(node(&[(
            "game_manager.trainer.models.0.pretrained_model_name_or_path",
            "Qwen/Qwen2.5-7B-Instruct",
        )]));
        let f = e.failure.expect("fails");
        assert_eq!(f.at, FailAt::Init, "{f:?}");
    }

    #[test]
    fn a_reference_model_and_accumulation_cost_memory() {
        let base = est(node(&[FP16, CKPT]));
        let kl = est(node(&[
            FP16,
            CKPT,
            ("++game_manager.trainer.config.beta", "0.04"),
        ]));
        assert!(kl.train_peak_gib > base.train_peak_gib + 2.5);
        let held = est(node(&[
            FP16,
            CKPT,
            ("++training.gradient_accumulation_steps", "4"),
        ]));
        assert!(held.train_peak_gib > base.train_peak_gib);
    }

    /// The figures docs/ESTIMATOR.md quotes: `cargo test -p orch-memory rl_swarm::tests::figures -- --nocapture`.
    #[test]
    fn figures() {
        let rows: [(&str, Vec<(&str, &str)>); 9] = [
            ("as first run (fp32, no ckpt, 1.5B)", vec![]),
            ("+ fp16", vec![FP16]),
            ("+ fp16 + ckpt", vec![FP16, CKPT]),
            (
                "+ fp16 + ckpt + fewer samples",
                vec![FP16, CKPT, FEWER[0], FEWER[1]],
            ),
            (
                "+ fp16 + ckpt + fewer + 0.5B",
                vec![FP16, CKPT, FEWER[0], FEWER[1], SMALLER],
            ),
            ("ckpt alone", vec![CKPT]),
            ("fewer samples alone", vec![FEWER[0], FEWER[1]]),
            ("0.5B alone", vec![SMALLER]),
            ("fp32 + ckpt + 0.5B", vec![CKPT, SMALLER]),
        ];
        for (name, extra) in rows {
            let e = est(node(&extra));
            println!(
                "{name:40} train {:6.2} GiB  rollout {:6.2} GiB  {}",
                e.train_peak_gib,
                e.rollout_peak_gib,
                e.failure
                    .as_ref()
                    .map(|f| f.to_string())
                    .unwrap_or("fits".into())
            );
        }
    }
}
