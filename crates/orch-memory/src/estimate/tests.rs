//! Calibration of the memory model against the seeds' measurements (targets (a)–(i) of
//! docs/ESTIMATOR.md), plus the helpers the runners' tests share.

use super::allocator::alloc;
use super::seeds::{areal_a40_optimized, areal_default, diamonds};
use super::*;
use crate::overrides::Overrides;
use crate::shape::lookup;

pub fn hw(name: &str, gib: f64, gpus: u32, host: f64, expandable: bool) -> Hardware {
    Hardware {
        gpu_name: name.into(),
        gpu_mem_gib: gib,
        gpus_per_node: gpus,
        host_mem_gib: host,
        expandable_segments: expandable,
    }
}
pub fn h100(expandable: bool) -> Hardware {
    hw("NVIDIA H100 80GB HBM3", 79.18, 4, 512.0, expandable)
}
pub fn a40() -> Hardware {
    hw("NVIDIA A40", 44.42, 4, 512.0, false)
}

fn ov(pairs: &[(&str, &str)]) -> Overrides {
    let mut o = Overrides::new();
    let args: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    o.apply_hydra(&args);
    o
}

fn with(
    base: &[(&'static str, &'static str)],
    extra: &[(&'static str, &'static str)],
) -> Overrides {
    let mut v: Vec<(&str, &str)> = base.to_vec();
    v.extend_from_slice(extra);
    ov(&v)
}

pub fn verl(hw: Hardware, o: &Overrides) -> Estimate {
    estimate(&SimConfig {
        hw,
        workload: Workload::Verl(Box::new(VerlConfig::from_overrides(o))),
        resumed: false,
        arch: None,
    })
}

/// The training breakdown's GiB on lines whose label contains `label`.
fn train_gib(e: &Estimate, label: &str) -> f64 {
    e.train_items
        .iter()
        .filter(|i| i.label.contains(label))
        .map(|i| i.gib)
        .sum()
}

fn gpu_oom(e: &Estimate) -> &OomDetail {
    match &e.failure {
        Some(Failure {
            kind: FailKind::GpuOom(d),
            ..
        }) => d,
        other => panic!("expected a GPU OOM, got {other:?}"),
    }
}

#[test]
fn walk_reports_consistent_oom() {
    let events = vec![
        alloc(Site::Params, "a", 50.0, 1.0),
        alloc(Site::LogitsFp32, "big", 40.0, 40.0),
    ];
    let w = walk(79.18, &[], 2.5, 0.08, &events);
    let d = w.oom.expect("oom");
    assert_eq!(d.site, Site::LogitsFp32);
    assert!((d.tried_gib - 40.0).abs() < 1e-9);
    assert!(d.free_gib < d.tried_gib);
    assert!((d.allocated_gib - 50.0).abs() < 1e-6);
    assert!((d.process_gib + d.free_gib - 79.18).abs() < 1e-6);
    let fits = walk(79.18, &[], 2.5, 0.08, &events[..1]);
    assert!(fits.oom.is_none());
    assert!(fits.device_peak_gib <= 79.18);
}

/// A stranded block stays reserved: the next tensor that needs fresh memory reserves on top
/// of it, and nothing of it counts as allocated.
#[test]
fn walk_reserves_fresh_memory_beside_a_stranded_block() {
    let events = vec![
        alloc(Site::Params, "a", 10.0, 10.0),
        alloc(Site::Softmax, "transient", 8.0, 8.0),
        Event::Free { gib: 8.0 },
        Event::Strand { gib: 8.0 },
        alloc(Site::LogitsFp32, "next", 8.0, 8.0),
    ];
    let w = walk(f64::INFINITY, &[], 0.0, 0.0, &events);
    assert!((w.allocated_peak_gib - 18.0).abs() < 1e-9, "{w:?}");
    assert!((w.reserved_peak_gib - 26.0).abs() < 1e-9, "{w:?}");
    // Without it the freed block is reused.
    let reused = walk(
        f64::INFINITY,
        &[],
        0.0,
        0.0,
        &[&events[..3], &events[4..]].concat(),
    );
    assert!((reused.reserved_peak_gib - 18.0).abs() < 1e-9, "{reused:?}");
}

#[test]
fn absurd_sizes_replay_in_bounded_steps() {
    // A 1e30 GiB allocation in 1 MiB tensors, and tensors smaller than the floor: the walk
    // ends (CI killed a fuzz case that spun here) and still reports the OOM.
    let events = vec![alloc(Site::Activations, "huge", 1e30, 1e-6)];
    let w = walk(80.0, &[], 0.5, 0.08, &events);
    assert!(w.oom.is_some());
    let tiny = vec![alloc(Site::Activations, "tiny", 1e-9, 1e-12)];
    assert!(walk(80.0, &[], 0.5, 0.08, &tiny).oom.is_none());
}

#[test]
fn an_absurd_layer_count_estimates_without_one_event_per_layer() {
    let mut o = Overrides::new();
    for (k, v) in LLAMA_3_2_1B {
        o.set(k, v);
    }
    o.set("model.architecture.num_hidden_layers", "16000000");
    o.set("micro_batch_size", "1");
    o.set("max_seq_len", "128");
    let t = TorchrunConfig::from_overrides(&o, 1);
    let shape = t.shape.clone().expect("the architecture is stated");
    assert_eq!(shape.layers, 16_000_000);
    let events = super::torchrun::physics_events(&t, &shape);
    assert!(events.len() < 1000, "{} events", events.len());
    let e = estimate(&SimConfig {
        hw: h100(false),
        workload: Workload::Torchrun(t),
        resumed: false,
        arch: None,
    });
    assert!(!e.fits());
}

#[test]
fn calibration_a_diamonds_h100_ooms_in_update_actor() {
    let e = verl(h100(false), &ov(&diamonds()));
    let d = gpu_oom(&e);
    assert_eq!(e.failure.as_ref().unwrap().at, FailAt::Train { step: 1 });
    // Seed 002 failed in the update asking 17.66 GiB, a 4-byte tensor of ~31k tokens ×
    // 152,064, as the eager entropy makes under autocast. Today's default path (the compiled
    // entropy) fails in the same backward at a 2-byte one (k::VERL_LOSS_BWD_BYTES).
    assert!(
        (d.tried_gib - 17.66 / 2.0).abs() < 0.1,
        "tried {}",
        d.tried_gib
    );
    assert!(d.free_gib < d.tried_gib);
    assert!(e.train_peak_gib > 79.18);
}

#[test]
fn calibration_b_expandable_segments_still_ooms() {
    let e = verl(h100(true), &ov(&diamonds()));
    let d = gpu_oom(&e);
    assert!((8.0..=9.5).contains(&d.tried_gib), "tried {}", d.tried_gib);
    assert!(e.train_peak_gib > 79.18);
}

#[test]
fn calibration_c_micro_16_with_expandable_fits() {
    let o = with(
        &diamonds(),
        &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16")],
    );
    let e = verl(h100(true), &o);
    assert!(e.fits(), "{:?}", e.failure);
    assert!(e.train_peak_gib < 79.18);
    // The same with the template default use_kl_loss=True (the reference model in host RAM).
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
            ("actor_rollout_ref.actor.use_kl_loss", "True"),
        ],
    );
    assert!(verl(h100(true), &o).fits());
}

#[test]
fn calibration_d_seed_002_fix_fits() {
    let o = with(
        &diamonds(),
        &[
            ("data.train_batch_size", "512"),
            ("actor_rollout_ref.actor.ppo_mini_batch_size", "128"),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "True",
            ),
        ],
    );
    let e = verl(h100(false), &o);
    assert!(e.fits(), "{:?}", e.failure);
    // Seed 002 expects 40–60 GB per GPU after the fix. verl reloads params and optimizer
    // state for update_actor, so offload lowers the rollout phase, not the training peak.
    assert!(
        (40.0..=65.0).contains(&e.train_peak_gib),
        "peak {}",
        e.train_peak_gib
    );
    assert!(
        (30.0..=60.0).contains(&e.train_allocated_gib),
        "alloc {}",
        e.train_allocated_gib
    );
    assert!(e.rollout_peak_gib < 55.0, "rollout {}", e.rollout_peak_gib);
}

#[test]
fn calibration_e_a40_needs_more_steps() {
    // The seed-002 config fails on an A40 ...
    let e = verl(a40(), &ov(&diamonds()));
    assert!(!e.fits());
    // ... and halving micro alone is not enough ...
    for micro in ["16", "8"] {
        let o = with(
            &diamonds(),
            &[(
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
                micro,
            )],
        );
        assert!(!verl(a40(), &o).fits(), "micro {micro}");
    }
    // ... micro 4 + param/optimizer offload + gpu_memory_utilization 0.4 fits.
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4"),
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "True",
            ),
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.4"),
        ],
    );
    let e = verl(a40(), &o);
    assert!(e.fits(), "{:?}", e.failure);
    assert!(e.train_peak_gib < 44.42);
    // The A40 profile (TP 2, expandable segments) with a ref model fits at micro 4 too.
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4"),
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "True",
            ),
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.4"),
            ("actor_rollout_ref.rollout.tensor_model_parallel_size", "2"),
            ("actor_rollout_ref.actor.use_kl_loss", "True"),
        ],
    );
    let mut hw = a40();
    hw.expandable_segments = true;
    assert!(verl(hw, &o).fits());
}

#[test]
fn a40_micro_4_without_offload_fails_at_vllm_wake_up() {
    let o = with(
        &diamonds(),
        &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4")],
    );
    let e = verl(a40(), &o);
    match e.failure {
        Some(Failure {
            at: FailAt::Rollout { step: 2 },
            kind: FailKind::VllmWakeUp { .. },
        }) => {}
        other => panic!("expected a wake-up OOM at step 2, got {other:?}"),
    }
}

fn rtx4090() -> Hardware {
    hw("NVIDIA GeForce RTX 4090", 23.65, 4, 512.0, false)
}

#[test]
fn calibration_f_low_utilization_leaves_no_kv_cache() {
    let o = with(
        &diamonds(),
        &[("actor_rollout_ref.rollout.gpu_memory_utilization", "0.1")],
    );
    let e = verl(rtx4090(), &o);
    assert_eq!(e.failure.as_ref().unwrap().at, FailAt::Init);
    assert!(
        matches!(
            e.failure.as_ref().unwrap().kind,
            FailKind::VllmNoCacheBlocks { .. }
        ),
        "{:?}",
        e.failure
    );
    // Raising utilization (with the FSDP params offloaded so vLLM can have it) gets a KV
    // cache, but not one that holds a 32k-token sequence ...
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7"),
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
            ("actor_rollout_ref.rollout.max_model_len", "32768"),
        ],
    );
    let e = verl(rtx4090(), &o);
    let est = match &e.failure.as_ref().unwrap().kind {
        FailKind::VllmMaxLen {
            estimated_max_len,
            max_model_len,
            ..
        } => {
            assert_eq!(*max_model_len, 32768);
            *estimated_max_len
        }
        other => panic!("expected max-len failure, got {other:?}"),
    };
    assert!(est > 1536 && est < 32768, "estimated {est}");
    // ... and shrinking max_model_len gets vLLM started (training a 7B model on 24 GB cards
    // then fails for its own reasons, later).
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7"),
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
            ("actor_rollout_ref.rollout.max_model_len", "4096"),
        ],
    );
    let e = verl(rtx4090(), &o);
    assert_ne!(
        e.failure.as_ref().map(|f| f.at),
        Some(FailAt::Init),
        "{:?}",
        e.failure
    );
    // Raising utilization without offload collides with the resident FSDP params.
    let o = with(
        &diamonds(),
        &[("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7")],
    );
    assert!(matches!(
        verl(rtx4090(), &o).failure.unwrap().kind,
        FailKind::VllmFreeMemory { .. }
    ));
}

#[test]
fn calibration_g_offload_needs_host_memory() {
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "True",
            ),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
        ],
    );
    let mut small = h100(false);
    small.host_mem_gib = 48.0;
    let e = verl(small, &o);
    assert!(
        matches!(e.failure.as_ref().unwrap().kind, FailKind::HostOom { .. }),
        "{:?}",
        e.failure
    );
    // Optimizer offload alone hits the limit after the first update.
    let o = with(
        &diamonds(),
        &[
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "True",
            ),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
        ],
    );
    let mut small = h100(false);
    small.host_mem_gib = 48.0;
    let e = verl(small, &o);
    assert_eq!(
        e.failure.as_ref().unwrap().at,
        FailAt::AfterUpdate { step: 1 }
    );
    // Plenty of host memory: fits.
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "True",
            ),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
        ],
    );
    assert!(verl(h100(false), &o).fits());
}

#[test]
fn verl_gpu_shortage_and_free_cache_engine() {
    let o = with(&diamonds(), &[("trainer.n_gpus_per_node", "8")]);
    assert!(matches!(
        verl(h100(false), &o).failure.unwrap().kind,
        FailKind::NotEnoughGpus {
            available: 4,
            required: 8
        }
    ));
    // vLLM keeping its memory through training makes micro 16 OOM on 80 GB.
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
            ("actor_rollout_ref.rollout.free_cache_engine", "False"),
        ],
    );
    assert!(matches!(
        verl(h100(true), &o).failure.unwrap().kind,
        FailKind::GpuOom(_)
    ));
}

pub fn areal(hw: Hardware, o: &Overrides) -> Estimate {
    estimate(&SimConfig {
        hw,
        workload: Workload::Areal(ArealConfig::from_overrides(o)),
        resumed: false,
        arch: None,
    })
}

#[test]
fn calibration_h_areal_a40() {
    for gpus in [1, 4] {
        let mut hw = a40();
        hw.gpus_per_node = gpus;
        let e = areal(hw.clone(), &ov(&areal_default()));
        let d = gpu_oom(&e);
        assert_eq!(d.other_processes_gib.len(), 1, "SGLang shares the GPU");
        // Seed 000: "Process 2963820 has 36.34 GiB memory in use" (SGLang) and the trainer
        // "has 8.05 GiB memory in use".
        assert!(
            (d.other_processes_gib[0] - 36.34).abs() < 0.05,
            "{}",
            d.other_processes_gib[0]
        );
        assert!(
            (7.0..=8.5).contains(&d.process_gib),
            "trainer {}",
            d.process_gib
        );
        assert!(
            d.tried_gib < 1.0,
            "a small tensor, like seed 000's 48 MiB: {}",
            d.tried_gib
        );
        assert!(d.free_gib < d.tried_gib);
        let e = areal(hw.clone(), &ov(&areal_a40_optimized()));
        assert!(e.fits(), "gpus {gpus}: {:?}", e.failure);
        assert!(e.train_peak_gib < 44.42);
    }
    // With the trainer sharded over 4 GPUs the A40 config lands near seed 000's ~28 GB (the
    // seed's own guess, not a reading); since revision 3 the backward's logits gradient (one
    // bf16 [4096, 151936] tensor held, a second in flight: 2.3 GiB) is in it.
    let e = areal(a40(), &ov(&areal_a40_optimized()));
    assert!(
        (26.0..=35.0).contains(&e.train_peak_gib),
        "peak {}",
        e.train_peak_gib
    );
}

#[test]
fn areal_sglang_fraction_too_small() {
    let mut o = ov(&areal_a40_optimized());
    o.set("sglang.mem_fraction_static", "0.05");
    let e = areal(a40(), &o);
    assert!(matches!(
        e.failure.unwrap().kind,
        FailKind::SglangNotEnough { .. }
    ));
}

#[test]
fn areal_backends_parse() {
    assert_eq!(parse_backend("sglang:d4p1t1"), Some((4, 1, 1)));
    assert_eq!(parse_backend("fsdp:d2p1t2"), Some((2, 1, 2)));
    assert_eq!(parse_backend("sglang.d1p1t1"), Some((1, 1, 1)));
    assert_eq!(parse_backend("d8"), Some((8, 1, 1)));
    assert_eq!(parse_backend("fsdp"), None);
    let o = ov(&[("allocation_mode", "sglang.d1p1t1+d1p1t1")]);
    let a = ArealConfig::from_overrides(&o);
    assert_eq!((a.gen_dp, a.gen_tp, a.train_dp), (1, 1, 1));
    let mut hw = a40();
    hw.gpus_per_node = 2;
    assert!(!areal_colocated(&hw, &a));
    hw.gpus_per_node = 1;
    assert!(areal_colocated(&hw, &a));
}

/// AReaL's launchers give the rollout and the trainer GPUs of the whole cluster: `sglang:d8+d8`
/// over 2 nodes of 8 (examples/scaffolding/gsm8k_rlvr_scaffolding_2nodes.yaml at v1.0.4) puts
/// no SGLang server on the trainer's GPUs, the same string on one node of 8 does.
#[test]
fn areal_two_nodes_are_not_colocated() {
    let two = ov(&[
        ("allocation_mode", "sglang:d8+d8"),
        ("cluster.n_nodes", "2"),
        ("cluster.n_gpus_per_node", "8"),
    ]);
    let a = ArealConfig::from_overrides(&two);
    assert_eq!((a.n_nodes, a.train_world()), (2, 8));
    let mut hw = h100(false);
    hw.gpus_per_node = 8;
    assert!(!areal_colocated(&hw, &a));
    let e = areal(hw.clone(), &two);
    assert!(e.fits(), "{:?}", e.failure);
    assert!(
        !e.train_items.iter().any(|i| i.label.starts_with("SGLang")),
        "no SGLang on the trainer's GPUs"
    );
    let one = ov(&[
        ("allocation_mode", "sglang:d8+d8"),
        ("cluster.n_nodes", "1"),
    ]);
    assert!(areal_colocated(&hw, &ArealConfig::from_overrides(&one)));
    assert!(areal(hw, &one).train_peak_gib > e.train_peak_gib + 60.0);
}

/// `fsdp:d2t2` and `fsdp:d2c2` take 4 GPUs (`world_size = dp × tp × pp × cp`,
/// docs/en/reference/alloc_mode.md at v1.0.4); tensor parallelism divides the weights and the
/// logits' vocabulary, context parallelism the micro-batch's tokens.
#[test]
fn areal_trainer_tensor_and_context_parallel() {
    for (backend, d, t, c) in [
        ("fsdp:d2t2", 2, 2, 1),
        ("fsdp:d2c2", 2, 1, 2),
        ("fsdp:d4", 4, 1, 1),
    ] {
        let a = ArealConfig::from_overrides(&ov(&[("actor.backend", backend)]));
        assert_eq!(
            (a.train_dp, a.train_tp, a.train_cp, a.train_world()),
            (d, t, c, 4),
            "{backend}"
        );
    }
    let legacy = ArealConfig::from_overrides(&ov(&[("allocation_mode", "sglang:d2t2+fsdp:d2c2")]));
    assert_eq!(
        (
            legacy.gen_dp,
            legacy.gen_tp,
            legacy.train_cp,
            legacy.train_world()
        ),
        (2, 2, 2, 4)
    );
    let mut hw = h100(false);
    hw.gpus_per_node = 8;
    let base = [
        ("actor.path", "Qwen/Qwen2.5-7B-Instruct"),
        ("actor.mb_spec.max_tokens_per_mb", "32768"),
        ("gconfig.max_new_tokens", "30000"),
    ];
    let peak = |backend: &'static str| {
        let e = areal(hw.clone(), &with(&base, &[("actor.backend", backend)]));
        assert!(!areal_colocated(
            &hw,
            &ArealConfig::from_overrides(&with(&base, &[("actor.backend", backend)]))
        ));
        e.train_peak_gib
    };
    let (d2, d2t2, d2c2) = (peak("fsdp:d2"), peak("fsdp:d2t2"), peak("fsdp:d2c2"));
    assert!(
        d2t2 < d2 - 10.0,
        "t2 halves the shard and the logits: {d2t2} vs {d2}"
    );
    assert!(d2c2 < d2 - 10.0, "c2 halves the tokens: {d2c2} vs {d2}");
}

/// The reference model exists only with `actor.kl_ctl > 0` (areal/trainer/rl_trainer.py:179
/// at v1.0.4): gsm8k_grpo.yaml's 0.0 builds none; 0.1 adds its bf16 shard on the trainer's
/// GPUs, `ref.offload` takes it off.
#[test]
fn areal_reference_model_only_with_kl() {
    let mut hw = h100(false);
    hw.gpus_per_node = 8;
    let base = [("actor.path", "Qwen/Qwen2.5-7B-Instruct")];
    let none = areal(hw.clone(), &ov(&base)).train_peak_gib;
    let kl = areal(hw.clone(), &with(&base, &[("actor.kl_ctl", "0.1")])).train_peak_gib;
    let off = areal(
        hw.clone(),
        &with(&base, &[("actor.kl_ctl", "0.1"), ("ref.offload", "true")]),
    )
    .train_peak_gib;
    // Qwen2.5-7B: 7.6e9 params × 2 B / 4 GPUs ≈ 3.5 GiB.
    assert!((3.0..4.5).contains(&(kl - none)), "{none} → {kl}");
    assert!((off - none).abs() < 1e-9);
}

/// AReaL's LoRA (`actor.use_lora`, examples/math/gsm8k_grpo_lora.yaml): only the adapters
/// have gradients and AdamW state; the weights stay bf16 and whole.
#[test]
fn areal_lora_trains_only_the_adapters() {
    let mut hw = h100(false);
    hw.gpus_per_node = 8;
    let base = [("actor.path", "Qwen/Qwen2.5-7B-Instruct")];
    let full = areal(hw.clone(), &ov(&base));
    let lora = areal(hw.clone(), &with(&base, &[("actor.use_lora", "true")]));
    let listed = areal(
        hw,
        &with(
            &base,
            &[
                ("actor.use_lora", "true"),
                ("actor.target_modules", "[all-linear]"),
            ],
        ),
    );
    // 7.6e9 × 2 B / 4 GPUs each for grads and 2 × for AdamW: 10.6 GiB gone; the adapters'
    // (80.7 M at the default rank 32, bf16 as AReaL keeps them) are 0.1 GiB of grads and
    // moments together.
    assert!(full.train_peak_gib - lora.train_peak_gib > 10.0);
    let adapters = train_gib(&lora, "LoRA adapters'");
    assert!(
        (adapters - 6.0 * 80_740_352.0 / 4.0 / GIB).abs() < 1e-9,
        "{adapters}"
    );
    assert_eq!(lora.train_peak_gib, listed.train_peak_gib);
    assert!(lora.notes.iter().any(|n| n.starts_with("LoRA rank 32")));
}

/// The fork's fast config on one A100 80GB PCIe, SGLang and the trainer on the card
/// (calibration/areal.yaml, runpod-0.5b-fast-a100-80g-pcie).
fn areal_fast_a100() -> Vec<(&'static str, &'static str)> {
    vec![
        ("actor.path", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("allocation_mode", "sglang.d1p1t1+d1p1t1"),
        ("cluster.n_gpus_per_node", "1"),
        ("train_dataset.batch_size", "8"),
        ("actor.mb_spec.max_tokens_per_mb", "5120"),
        ("gconfig.n_samples", "2"),
        ("gconfig.max_new_tokens", "256"),
        ("train_dataset.max_length", "512"),
        ("sglang.mem_fraction_static", "0.8"),
        ("rollout.max_concurrent_rollouts", "32"),
        ("actor.gradient_checkpointing", "false"),
    ]
}

/// `loss.backward()` makes the logits' gradient, bf16 `[tokens, vocab]` (the chunked
/// log-softmax slices the logits; a slice's backward is a tensor of the whole input), and the
/// fork's A100 run fails there in its second step asking 1.38-1.43 GiB after an update that
/// ran: the estimate allocates it, one held and one in flight, and fails in the same place.
#[test]
fn areal_backward_allocates_the_logits_gradient() {
    let hw = hw("NVIDIA A100 80GB PCIe", 79.25, 1, 512.0, false);
    let o = ov(&areal_fast_a100());
    let vocab = crate::shape::lookup("Qwen/Qwen2.5-0.5B-Instruct").vocab as f64;
    let want = 5120.0 * vocab * 2.0 / GIB;
    assert!((1.4..1.5).contains(&want), "{want}");
    let e = areal(hw.clone(), &o);
    let grad: Vec<f64> = e
        .train_items
        .iter()
        .filter(|i| i.label.starts_with("logits gradient bf16"))
        .map(|i| i.gib)
        .collect();
    assert_eq!(grad.len(), 2, "held and in flight: {:?}", e.train_items);
    assert!(grad.iter().all(|g| (g - want).abs() < 1e-9), "{grad:?}");
    // The run fails in step 2; the estimate fails in step 1 at the same tensor: with the
    // trainer's measured non-PyTorch memory (k::AREAL_TRAINER_NONTORCH_GIB) its step-1 update
    // (11.7 GiB allocated) is above what the log shows it reserved (9.76 GiB), an over-count
    // the rows do not yet place (calibration/README.md, AReaL's section).
    assert!(e.failure.is_some(), "the A100 run failed");
    let d = gpu_oom(&e);
    assert!(d.label.starts_with("logits gradient bf16"), "{}", d.label);
    assert!((d.tried_gib - want).abs() < 1e-9);
    // Under 1024 tokens one chunk takes the whole micro-batch: no second tensor.
    let small = with(
        &areal_fast_a100(),
        &[
            ("actor.mb_spec.max_tokens_per_mb", "1024"),
            ("train_dataset.max_length", "512"),
            ("gconfig.max_new_tokens", "256"),
        ],
    );
    let e = areal(hw, &small);
    let n = e
        .train_items
        .iter()
        .filter(|i| i.label.starts_with("logits gradient bf16"))
        .count();
    assert_eq!(n, 1, "{:?}", e.train_items);
}

/// `actor.compute_logp` (the engine's forward under `no_grad`) is a phase of its own before
/// the update: the fork's RTX 5090 launches fail there first, at the `lm_head`'s logits, and
/// the estimate says so; without the pass (`recompute_logprob` and the decoupled loss off)
/// the failure is the update's.
#[test]
fn areal_oom_in_the_log_prob_pass_is_labelled() {
    let hw = hw("NVIDIA GeForce RTX 5090", 31.36, 1, 512.0, false);
    let base = with(
        &areal_fast_a100(),
        &[
            ("gconfig.n_samples", "4"),
            ("gconfig.max_new_tokens", "1024"),
            ("train_dataset.max_length", "2048"),
        ],
    );
    let e = areal(hw.clone(), &base);
    assert_eq!(
        e.failure.as_ref().map(|f| f.at),
        Some(FailAt::Train { step: 1 })
    );
    let d = gpu_oom(&e);
    assert!(
        d.label.starts_with("old-log-prob pass (compute_logp): "),
        "{}",
        d.label
    );
    let mut off = base.clone();
    off.set("actor.recompute_logprob", "false");
    off.set("actor.use_decoupled_loss", "false");
    let e = areal(hw, &off);
    assert!(!gpu_oom(&e).label.contains("compute_logp"));
}

pub fn torchrun(hw: Hardware, micro: u64, seq: u64, ckpt: bool) -> Estimate {
    let mut o = Overrides::new();
    o.set("model.params_m", "512");
    o.set("model.n_layers", "8");
    o.set("micro_batch_size", &micro.to_string());
    o.set("max_seq_len", &seq.to_string());
    o.set(
        "gradient_checkpointing",
        if ckpt { "true" } else { "false" },
    );
    o.set("precision", "bf16");
    estimate(&SimConfig {
        hw,
        workload: Workload::Torchrun(TorchrunConfig::from_overrides(&o, 4)),
        resumed: false,
        arch: None,
    })
}

#[test]
fn calibration_i_torchrun_seed_003() {
    // micro 1 × 1024: ~35 GB.
    let e = torchrun(a40(), 1, 1024, true);
    assert!(e.fits());
    assert!(
        (34.0..=36.0).contains(&e.train_peak_gib),
        "peak {}",
        e.train_peak_gib
    );
    // micro 2 × 1024: 38–40 GB, fits on 44.4.
    let e = torchrun(a40(), 2, 1024, true);
    assert!(e.fits());
    assert!(
        (38.0..=40.0).contains(&e.train_peak_gib),
        "peak {}",
        e.train_peak_gib
    );
    // micro 8 × 2048: tried to allocate 51+ GB.
    let e = torchrun(a40(), 8, 2048, true);
    let d = gpu_oom(&e);
    assert!(
        (51.0..=52.0).contains(&d.tried_gib),
        "tried {}",
        d.tried_gib
    );
    // Seed 003's "risky" settings: micro 4 × 1024 and micro 2 × 1536 OOM on a 44 GiB card.
    assert!(!torchrun(a40(), 4, 1024, true).fits());
    assert!(!torchrun(a40(), 2, 1536, true).fits());
    // Without checkpointing micro 1 × 1024 no longer fits.
    assert!(!torchrun(a40(), 1, 1024, false).fits());
}

#[test]
fn torchrun_ladder_converges_on_a40() {
    let mut hw = a40();
    hw.expandable_segments = true;
    for micro in [8, 4, 2] {
        assert!(
            !torchrun(hw.clone(), micro, 2048, true).fits(),
            "micro {micro}"
        );
    }
    assert!(torchrun(hw, 1, 2048, true).fits());
}

#[test]
fn verl_micro_resolution() {
    let o = ov(&[
        ("trainer.n_gpus_per_node", "4"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size", "64"),
    ]);
    assert_eq!(VerlConfig::from_overrides(&o).micro_batch_per_gpu, 16);
    let o = ov(&[
        ("trainer.n_gpus_per_node", "4"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "32"),
        ("actor_rollout_ref.rollout.n", "4"),
    ]);
    let v = VerlConfig::from_overrides(&o);
    assert_eq!(v.micro_batch_per_gpu, 32);
    assert_eq!(v.notes.len(), 1);
    // Reference defaults.
    let v = VerlConfig::from_overrides(&Overrides::new());
    assert_eq!(v.tensor_parallel, 2);
    assert_eq!(v.gpu_memory_utilization, 0.5);
    assert!(v.free_cache_engine && v.gradient_checkpointing && v.use_remove_padding);
    assert_eq!(v.max_model_len(), 1024);
}

/// Llama 3.2 1B's `config.json` keys, as a torchrun training config would carry them under
/// `model.architecture`.
const LLAMA_3_2_1B: [(&str, &str); 8] = [
    ("model.architecture.model_type", "llama"),
    ("model.architecture.hidden_size", "2048"),
    ("model.architecture.num_hidden_layers", "16"),
    ("model.architecture.num_attention_heads", "32"),
    ("model.architecture.num_key_value_heads", "8"),
    ("model.architecture.intermediate_size", "8192"),
    ("model.architecture.vocab_size", "128256"),
    ("model.architecture.tie_word_embeddings", "true"),
];

/// torchrun on one GPU of `hw` with the training config `o`.
fn torchrun_on(hw: Hardware, o: &Overrides) -> Estimate {
    estimate(&SimConfig {
        hw,
        workload: Workload::Torchrun(TorchrunConfig::from_overrides(o, 1)),
        resumed: false,
        arch: None,
    })
}

/// torchrun on one GPU with Llama 3.2 1B's architecture stated in the config.
fn torchrun_llama(gpus: u32, micro: u64, seq: u64, ckpt: bool, precision: &str) -> Estimate {
    let mut pairs: Vec<(String, String)> = LLAMA_3_2_1B
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    pairs.push(("micro_batch_size".into(), micro.to_string()));
    pairs.push(("max_seq_len".into(), seq.to_string()));
    pairs.push(("gradient_checkpointing".into(), ckpt.to_string()));
    pairs.push(("precision".into(), precision.into()));
    let args: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut o = Overrides::new();
    o.apply_hydra(&args);
    estimate(&SimConfig {
        hw: h100(false),
        workload: Workload::Torchrun(TorchrunConfig::from_overrides(&o, gpus)),
        resumed: false,
        arch: None,
    })
}

#[test]
fn torchrun_reads_the_architecture_from_its_config() {
    let e = torchrun_llama(1, 1, 128, false, "bf16");
    let arch = e.arch.as_ref().expect("the config states the architecture");
    // Llama 3.2 1B's published parameter count.
    assert_eq!(arch.params, 1_235_814_400.0);
    // train.py's own keys: a Llama shape from d_model / n_layers / d_ffn.
    let o = ov(&[
        ("model.d_model", "1024"),
        ("model.n_layers", "8"),
        ("model.d_ffn", "2816"),
    ]);
    let t = TorchrunConfig::from_overrides(&o, 1);
    let shape = t.shape.expect("a Llama shape");
    assert_eq!((shape.hidden, shape.layers, shape.vocab), (1024, 8, 32_000));
    // A config with a size only keeps seed 003's fit.
    let o = ov(&[("model.params_m", "512")]);
    assert!(TorchrunConfig::from_overrides(&o, 1).shape.is_none());
}

/// Mixed-precision AdamW holds 16 B/param of model state (fp32 weights 4, grads 4, m and v 8)
/// plus autocast's 2 B/param copies while they are alive: the "18 bytes per parameter" of the
/// Hugging Face model-memory anatomy. With a tiny batch that is the whole peak.
#[test]
fn torchrun_model_states_are_18_bytes_per_parameter() {
    let e = torchrun_llama(1, 1, 16, false, "bf16");
    let p = e.arch.as_ref().unwrap().params;
    let per_param = e.train_allocated_gib * GIB / p;
    assert!((16.0..=18.5).contains(&per_param), "{per_param} B/param");
    // DDP adds its gradient buckets (4 B/param).
    let ddp = torchrun_llama(4, 1, 16, false, "bf16");
    let extra = (ddp.train_allocated_gib - e.train_allocated_gib) * GIB / p;
    assert!((3.9..=4.1).contains(&extra), "{extra} B/param");
}

/// Activations from the architecture: linear in tokens, checkpointing keeps a layer's input
/// per layer plus one layer, fp32 doubles the low-precision tensors.
#[test]
fn torchrun_activations_follow_the_architecture() {
    let act = |micro, ckpt, prec| {
        let e = torchrun_llama(1, micro, 2048, ckpt, prec);
        let base = torchrun_llama(1, 1, 16, ckpt, prec);
        e.train_allocated_gib - base.train_allocated_gib
    };
    let (m4, m8) = (act(4, false, "bf16"), act(8, false, "bf16"));
    assert!((m8 / m4 - 2.0).abs() < 0.1, "{m4} → {m8}");
    // Per token per layer 24·h + 4·kv + 8·i bytes: 16 layers × 8192 tokens × 115 KiB ≈ 14.4
    // GiB, plus the fp32 logits and loss (8192 × 128256 × 14 B ≈ 13.7 GiB at the loss).
    assert!((25.0..=33.0).contains(&m4), "micro 4 × 2048: {m4:.2} GiB");
    let ckpt = act(4, true, "bf16");
    assert!(ckpt < 0.6 * m4, "checkpointing {ckpt:.2} vs {m4:.2}");
    assert!(
        act(4, false, "fp32") > 1.2 * m4,
        "fp32 {:.2}",
        act(4, false, "fp32")
    );
    // The fp32 logits are the largest single tensor: what a torch OOM at the loss asks for.
    let e = torchrun_llama(1, 16, 4096, true, "bf16");
    match &e.failure {
        Some(Failure {
            kind: FailKind::GpuOom(d),
            ..
        }) => {
            let logits = 16.0 * 4096.0 * 128_256.0 * 4.0 / GIB;
            assert!((d.tried_gib - logits).abs() < 0.01, "tried {}", d.tried_gib);
        }
        other => panic!("micro 16 × 4096 on 79 GiB: expected an OOM, got {other:?}"),
    }
}

/// The caching allocator's reserve at the loss: one fp32 `tokens × vocab` block stranded on
/// top of the fragmentation share; with expandable segments a share of it beside their
/// generic slack.
#[test]
fn torchrun_reserve_holds_one_stranded_fp32_logits_block() {
    let e = torchrun_llama(1, 4, 2048, true, "bf16");
    let logits = 4.0 * 2048.0 * 128_256.0 * 4.0 / GIB;
    let stranded = |e: &Estimate| {
        e.train_items
            .iter()
            .find(|i| i.label.contains("stranded"))
            .map(|i| i.gib)
    };
    assert!((stranded(&e).unwrap() - logits).abs() < 1e-9);
    let slack = e.train_reserved_gib - e.train_allocated_gib;
    assert!(slack > logits, "{slack} GiB reserved beyond allocated");
    let mut o = Overrides::new();
    let mut args: Vec<String> = LLAMA_3_2_1B
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    args.extend(
        [
            "micro_batch_size=4",
            "max_seq_len=2048",
            "gradient_checkpointing=true",
        ]
        .map(String::from),
    );
    o.apply_hydra(&args);
    let expandable = torchrun_on(h100(true), &o);
    // A share of the block stays stranded beside the generic 2 %: the slack follows the
    // logits, not the step's total.
    let share = k::TR_EXPANDABLE_STRANDED_SHARE * logits;
    assert!((stranded(&expandable).unwrap() - share).abs() < 1e-9);
    let (reserved, allocated) = (
        expandable.train_reserved_gib,
        expandable.train_allocated_gib,
    );
    assert!(
        reserved > allocated * (1.0 + k::FRAG_EXPANDABLE)
            && reserved <= allocated * (1.0 + k::FRAG_EXPANDABLE) + share + 1e-9,
        "{reserved} GiB reserved for {allocated} allocated"
    );
    assert!(expandable.train_reserved_gib < e.train_reserved_gib - logits * 0.5);
}

/// With expandable segments the slack follows the largest transient block, the logits: at the
/// same tokens a 32k-vocabulary model holds a smaller share above what it allocates than a
/// 152k one (a flat percentage of the step, fitted on one logits-heavy row, put every other
/// shape 9–10 % high: issue 42).
#[test]
fn torchrun_expandable_slack_follows_the_logits_not_the_step() {
    let slack_share = |vocab: &str| {
        let mut args: Vec<String> = LLAMA_3_2_1B
            .iter()
            .filter(|(k, _)| !k.ends_with("vocab_size"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        args.push(format!("model.architecture.vocab_size={vocab}"));
        args.extend(["micro_batch_size=4", "max_seq_len=2048"].map(String::from));
        let mut o = Overrides::new();
        o.apply_hydra(&args);
        let e = torchrun_on(h100(true), &o);
        e.train_reserved_gib / e.train_allocated_gib - 1.0
    };
    let (small, large) = (slack_share("32000"), slack_share("151936"));
    assert!(
        small < large && small < 0.05,
        "slack {small:.3} (32k vocabulary) vs {large:.3} (152k)"
    );
}

/// Gradient accumulation keeps every gradient resident while the next micro-batch runs its
/// forward and backward; an untied input embedding has a gradient of its own.
#[test]
fn torchrun_accumulation_and_untied_embeddings_hold_their_gradients() {
    let with = |extra: &[(&str, &str)]| {
        let mut args: Vec<String> = LLAMA_3_2_1B
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        args.extend(["micro_batch_size=4", "max_seq_len=2048"].map(String::from));
        args.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        let mut o = Overrides::new();
        o.apply_hydra(&args);
        estimate(&SimConfig {
            hw: h100(false),
            workload: Workload::Torchrun(TorchrunConfig::from_overrides(&o, 1)),
            resumed: false,
            arch: None,
        })
    };
    let one = with(&[]);
    let p = one.arch.as_ref().unwrap().params;
    let accum = with(&[("gradient_accumulation_steps", "8")]);
    let more = (accum.train_allocated_gib - one.train_allocated_gib) * GIB / p;
    assert!(
        (1.0..=4.1).contains(&more),
        "+{more} B/param with accumulation"
    );
    let untied = with(&[("model.architecture.tie_word_embeddings", "false")]);
    let untied_p = untied.arch.as_ref().unwrap().params;
    assert!(untied_p > p);
    assert!(untied.train_allocated_gib > one.train_allocated_gib);
}

/// verl ≥ 0.4 computes the entropy in the update only with `calculate_entropy` or a non-zero
/// `entropy_coeff`. Compiled (its default) it changes nothing of the update's peak; eager it
/// does (both measured on one H100, `calibration/measured/`).
#[test]
fn verl_entropy_pass_only_when_the_update_computes_it() {
    let base: Vec<(&'static str, &'static str)> = diamonds()
        .into_iter()
        .filter(|(k, _)| !k.ends_with("entropy_coeff"))
        .collect();
    let off = verl(h100(false), &with(&base, &[]));
    let coeff = verl(
        h100(false),
        &with(&base, &[("actor_rollout_ref.actor.entropy_coeff", "0.001")]),
    );
    let forced = verl(
        h100(false),
        &with(
            &base,
            &[
                ("actor_rollout_ref.actor.entropy_coeff", "0"),
                ("actor_rollout_ref.actor.calculate_entropy", "True"),
            ],
        ),
    );
    let logits = |e: &Estimate| -> f64 {
        e.train_items
            .iter()
            .filter(|i| i.label.contains("logits") || i.label.contains("softmax"))
            .map(|i| i.gib)
            .sum()
    };
    // 31.2k tokens × 152,064: the bf16 logits and the backward through them, 10 B in all
    // (k::VERL_LOSS_BWD_BYTES). The compiled entropy (verl's default on the padding-free
    // path) adds nothing to it (measured, calibration/measured/); the eager one, in the loss,
    // peaks at 14 B.
    let unit = 31_205.0 * 152_064.0 / GIB;
    assert!(
        (logits(&off) / unit - 10.0).abs() < 0.01,
        "{}",
        logits(&off) / unit
    );
    assert_eq!(logits(&coeff), logits(&off));
    assert_eq!(logits(&coeff), logits(&forced));
    let eager = verl(
        h100(false),
        &with(
            &base,
            &[
                ("actor_rollout_ref.actor.entropy_coeff", "0.001"),
                ("actor_rollout_ref.actor.use_torch_compile", "False"),
            ],
        ),
    );
    assert!(
        eager.train_peak_gib - off.train_peak_gib > 3.9 * unit,
        "{} {}",
        eager.train_peak_gib,
        off.train_peak_gib
    );
    assert!(eager.failure.is_some());
}

/// The loss's tensors of a verl estimate (logits, entropy, fused working sets), GiB.
fn loss_gib(e: &Estimate) -> f64 {
    e.train_items
        .iter()
        .filter(|i| {
            ["logits", "softmax", "entropy", "fused"]
                .iter()
                .any(|w| i.label.contains(w))
        })
        .map(|i| i.gib)
        .sum()
}

/// Seed 002's diamonds (31.2k tokens of Qwen2.5-7B per micro-batch, entropy in the loss) with
/// `extra` on top.
fn diamonds_with(extra: &[(&'static str, &'static str)]) -> Estimate {
    verl(h100(false), &with(&diamonds(), extra))
}

/// verl's fused kernels compute log-probs and entropy from the hidden states a chunk at a
/// time: the 44 GiB of bf16 logits, fp32 copy and softmax of seed 002's micro-batch become one
/// 512-token chunk's backward (28 B × 512 × 152,064 = 2.03 GiB), and the seed fits.
#[test]
fn verl_fused_kernels_hold_one_chunk_instead_of_the_logits() {
    let plain = diamonds_with(&[]);
    let fused = diamonds_with(&[("actor_rollout_ref.model.use_fused_kernels", "True")]);
    assert!(
        (loss_gib(&plain) - 44.2).abs() < 0.1,
        "{}",
        loss_gib(&plain)
    );
    assert!(
        (loss_gib(&fused) - 2.03).abs() < 0.01,
        "{}",
        loss_gib(&fused)
    );
    assert!(
        !fused
            .train_items
            .iter()
            .any(|i| i.label.contains("lm_head")),
        "{:?}",
        fused.train_items
    );
    // The peak falls by the logits less the chunk, give or take the allocator's slack.
    let saved = plain.train_peak_gib - fused.train_peak_gib;
    let expected = loss_gib(&plain) - loss_gib(&fused);
    assert!(
        saved > 0.9 * expected && saved < 1.15 * expected,
        "{saved} vs {expected}"
    );
    assert!(plain.failure.is_some());
    assert!(fused.failure.is_none(), "{:?}", fused.failure);
    // Without the entropy in the loss the backward's chunk needs 20 B, not 28.
    let logged = diamonds_with(&[
        ("actor_rollout_ref.model.use_fused_kernels", "True"),
        ("actor_rollout_ref.actor.entropy_coeff", "0"),
        ("actor_rollout_ref.actor.calculate_entropy", "True"),
    ]);
    assert!((loss_gib(&logged) / loss_gib(&fused) - 20.0 / 28.0).abs() < 1e-9);
}

/// The actor's own key wins over the model's (verl's `actor.use_fused_kernels` defaults to the
/// model's); the triton backend holds per-token statistics and one bf16 vocabulary split.
#[test]
fn verl_fused_kernels_keys_and_backends() {
    let v = |extra: &[(&'static str, &'static str)]| {
        VerlConfig::from_overrides(&with(&diamonds(), extra)).fused_kernels
    };
    assert_eq!(v(&[]), None);
    assert_eq!(
        v(&[("actor_rollout_ref.actor.use_fused_kernels", "true")]),
        Some(FusedKernels::Torch { chunk_tokens: 512 })
    );
    assert_eq!(
        v(&[
            ("actor_rollout_ref.model.use_fused_kernels", "true"),
            ("actor_rollout_ref.actor.use_fused_kernels", "false"),
        ]),
        None
    );
    let triton = &[
        ("actor_rollout_ref.model.use_fused_kernels", "true"),
        (
            "actor_rollout_ref.model.fused_kernel_options.impl_backend",
            "triton",
        ),
    ];
    assert_eq!(
        v(triton),
        Some(FusedKernels::Triton {
            stat_split: 1024,
            dlogits_split: 9504
        })
    );
    let e = diamonds_with(triton);
    // 31.2k tokens × 9504 × 2 B of d_logits; 3 × 149 splits × 4 B of statistics.
    let tokens = e.tokens_per_micro;
    let expected = (2.0 * 9504.0 + 12.0 * 149.0) * tokens / GIB;
    assert!((loss_gib(&e) - expected).abs() < 1e-9, "{}", loss_gib(&e));
    assert!(loss_gib(&e) < loss_gib(&diamonds_with(&triton[..1])));
}

/// `entropy_from_logits_with_chunking`, compiled as verl runs it by default, keeps no fp32
/// tensor for the backward: the whole entropy's fp32 copy and softmax (8 B per entry) become
/// one 2048-token chunk in flight, and the backward's bf16 gradients (log-probs and, in the
/// loss, entropy) come on top of the bf16 logits. Eager (`use_torch_compile=False`), every
/// chunk's fp32 copy and softmax are kept for the backward, in chunk-sized tensors (the OOM
/// asks for one chunk, not 17.66 GiB), unless `entropy_checkpointing` runs it without autograd
/// and the entropy is only logged.
#[test]
fn verl_entropy_chunking_and_checkpointing() {
    const CHUNKING: (&str, &str) = (
        "actor_rollout_ref.actor.entropy_from_logits_with_chunking",
        "True",
    );
    const EAGER: (&str, &str) = ("actor_rollout_ref.actor.use_torch_compile", "False");
    const CKPT: (&str, &str) = ("actor_rollout_ref.actor.entropy_checkpointing", "True");
    const LOGGED: [(&str, &str); 2] = [
        ("actor_rollout_ref.actor.entropy_coeff", "0"),
        ("actor_rollout_ref.actor.calculate_entropy", "True"),
    ];
    let plain = diamonds_with(&[]);
    let u = plain.tokens_per_micro * 152_064.0 / GIB;
    let c = 2048.0 * 152_064.0 / GIB;
    assert!((loss_gib(&plain) - 10.0 * u).abs() < 1e-9);

    // Compiled: bf16 logits, one chunk's 12 B in flight, both bf16 gradients, and the rest of
    // the backward's measured 10 B (k::VERL_LOSS_BWD_BYTES): no lower than the whole entropy,
    // which compiled keeps nothing either (calibration/measured/).
    let chunked = diamonds_with(&[CHUNKING]);
    assert!((loss_gib(&chunked) - (10.0 * u + 12.0 * c)).abs() < 1e-9);
    assert!((chunked.train_peak_gib - plain.train_peak_gib).abs() < 1e-9);
    assert_eq!(
        loss_gib(&diamonds_with(&[CHUNKING, CKPT])),
        loss_gib(&chunked)
    );
    // Only logged: no entropy gradient, the same backward.
    let logged = diamonds_with(&[CHUNKING, LOGGED[0], LOGGED[1]]);
    assert!((loss_gib(&logged) - (10.0 * u + 12.0 * c)).abs() < 1e-9);

    // Eager: every chunk's fp32 copy and softmax held, one chunk's product in flight.
    let eager = diamonds_with(&[CHUNKING, EAGER]);
    assert!((loss_gib(&eager) - (14.0 * u + 4.0 * c)).abs() < 1e-9);
    // The whole entropy's update fails at one of the backward's bf16 tensors.
    assert!((gpu_oom(&plain).tried_gib - 2.0 * u).abs() < 0.01);
    assert!(gpu_oom(&eager).tried_gib <= 4.0 * c + 1e-9);
    // Checkpointed, the backward recomputes them when the entropy is in the loss...
    assert_eq!(
        loss_gib(&diamonds_with(&[CHUNKING, EAGER, CKPT])),
        loss_gib(&eager)
    );
    // ...and never when it is only logged.
    let eager_logged_ckpt = diamonds_with(&[CHUNKING, EAGER, CKPT, LOGGED[0], LOGGED[1]]);
    assert_eq!(loss_gib(&eager_logged_ckpt), loss_gib(&logged));

    // Whole, the checkpointed entropy's tensors are still made at once in the forward.
    let whole_ckpt = diamonds_with(&[CKPT, LOGGED[0], LOGGED[1]]);
    assert_eq!(whole_ckpt.train_peak_gib, plain.train_peak_gib);
}

/// verl's defaults for the new keys change nothing: written out, they predict what leaving them
/// out does.
#[test]
fn verl_fused_and_entropy_defaults_are_verls() {
    let defaults = diamonds_with(&[
        ("actor_rollout_ref.model.use_fused_kernels", "False"),
        ("actor_rollout_ref.actor.use_fused_kernels", "False"),
        (
            "actor_rollout_ref.model.fused_kernel_options.impl_backend",
            "torch",
        ),
        (
            "actor_rollout_ref.actor.entropy_from_logits_with_chunking",
            "False",
        ),
        ("actor_rollout_ref.actor.entropy_checkpointing", "False"),
        ("actor_rollout_ref.actor.use_torch_compile", "True"),
    ]);
    let plain = diamonds_with(&[]);
    assert_eq!(defaults.train_items, plain.train_items);
    assert_eq!(defaults.train_peak_gib, plain.train_peak_gib);
    let v = VerlConfig::from_overrides(&with(&diamonds(), &[]));
    assert_eq!(
        (
            v.fused_kernels,
            v.entropy_chunk_tokens,
            v.entropy_checkpointing
        ),
        (None, None, false)
    );
}

/// Dynamic batching packs at most `ppo_max_token_len_per_gpu × sp` tokens for a
/// sequence-parallel group, so no GPU holds more than the budget; a fixed micro-batch is split
/// over the group.
#[test]
fn verl_ulysses_splits_a_fixed_micro_batch_but_not_the_token_budget() {
    let sp = |extra: &[(&'static str, &'static str)]| {
        verl(h100(false), &with(&diamonds(), extra)).tokens_per_micro
    };
    let dynamic = [
        ("actor_rollout_ref.actor.use_dynamic_bsz", "True"),
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "24000"),
    ];
    let mut dynamic_sp = dynamic.to_vec();
    dynamic_sp.push((
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        "4",
    ));
    for t in [sp(&dynamic), sp(&dynamic_sp)] {
        assert!(t <= 24000.0 && t > 0.9 * 24000.0, "{t}");
    }
    let fixed = sp(&[]);
    let fixed_sp = sp(&[(
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        "4",
    )]);
    assert!((fixed / fixed_sp - 4.0).abs() < 1e-9, "{fixed} {fixed_sp}");
}

/// verl balances a rank's mini-batch over `ceil(tokens / budget)` micro-batches
/// (`rearrange_micro_batches`): a mini-batch a little over one budget is two micro-batches of
/// half of it each, not one full budget and a remainder; one under the budget is one
/// micro-batch of all of it.
#[test]
fn verl_dynamic_micro_batches_share_the_mini_batch_evenly() {
    let tokens = |extra: &[(&'static str, &'static str)]| {
        verl(h100(false), &with(&diamonds(), extra)).tokens_per_micro
    };
    // diamonds: 256 prompts × n 5 / 4 GPUs = 320 sequences of 1536 tokens, 0.635 of them real.
    let real = 320.0 * 1536.0 * k::REMOVE_PADDING_FILL;
    let budget = |b: &'static str| {
        tokens(&[
            ("actor_rollout_ref.actor.use_dynamic_bsz", "True"),
            ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", b),
        ])
    };
    // Just under the rank's real tokens: two micro-batches of half.
    assert!((budget("300000") - real / 2.0).abs() < 1e-6);
    // Over it: the whole mini-batch at once.
    assert!((budget("400000") - real).abs() < 1e-6);
}

/// A PPO critic (verl's default `gae` estimator, or `critic.enable`) keeps its fp32 params and
/// AdamW state on the shared GPUs through the actor's update: 12 B per critic parameter over
/// the GPUs, unless offloaded; GRPO has none.
#[test]
fn verl_ppo_critic_stays_resident_through_the_actor_update() {
    let critic = |extra: &[(&'static str, &'static str)]| -> f64 {
        verl(h100(false), &with(&diamonds(), extra))
            .train_items
            .iter()
            .filter(|i| i.label.contains("critic"))
            .map(|i| i.gib)
            .sum()
    };
    let gae = [("algorithm.adv_estimator", "gae")];
    // Qwen2.5-7B's value model: 7.07e9 × 12 B / 4 GPUs.
    assert!(
        (critic(&gae) - QWEN25_7B_CRITIC_PARAMS * 12.0 / 4.0 / GIB).abs() < 0.01,
        "{}",
        critic(&gae)
    );
    assert_eq!(critic(&[]), 0.0);
    assert_eq!(critic(&[("critic.enable", "True")]), critic(&gae));
    assert_eq!(
        critic(&[
            ("algorithm.adv_estimator", "gae"),
            ("critic.enable", "False")
        ]),
        0.0
    );
    let offloaded = critic(&[
        ("algorithm.adv_estimator", "gae"),
        ("critic.model.fsdp_config.param_offload", "True"),
        ("critic.model.fsdp_config.optimizer_offload", "True"),
    ]);
    assert_eq!(offloaded, 0.0);
}

/// Qwen2.5-7B's critic as verl loads it (`AutoModelForTokenClassification`, one label): the
/// causal LM's 7.62e9 parameters less its untied LM head (152,064 × 3,584), plus a value head
/// of 3,584.
const QWEN25_7B_CRITIC_PARAMS: f64 = 7_615_616_512.0 - 152_064.0 * 3_584.0 + 3_584.0;

/// A PPO critic with tiny micro-batches and nothing of the actor's beside it (both offloaded):
/// what its own phases hold is its state.
const LONE_CRITIC: &[(&str, &str)] = &[
    ("algorithm.adv_estimator", "gae"),
    ("critic.ppo_micro_batch_size_per_gpu", "1"),
    ("critic.forward_micro_batch_size_per_gpu", "1"),
    ("data.max_prompt_length", "64"),
    ("data.max_response_length", "64"),
    ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
    (
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "True",
    ),
];

/// `critic.model.fsdp_config.model_dtype: bf16` halves the critic's resident params and
/// AdamW state (verl loads the critic in that dtype, `fsdp_workers.py` L1289 at b178a3cd5), in
/// the breakdown's labels too; its own update and values pass hold half as much of it; offloaded,
/// its host RAM halves too.
#[test]
fn a_bf16_critic_halves_its_state() {
    let critic = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = vec![("algorithm.adv_estimator", "gae")];
        pairs.extend_from_slice(extra);
        let e = verl(h100(false), &with(&diamonds(), &pairs));
        let gib: f64 = e
            .train_items
            .iter()
            .filter(|i| i.label.contains("critic"))
            .map(|i| i.gib)
            .sum();
        (gib, e)
    };
    let (fp32, _) = critic(&[]);
    let (bf16, e) = critic(&[("critic.model.fsdp_config.model_dtype", "bf16")]);
    assert!(
        fp32 > 0.0 && (bf16 / fp32 - 0.5).abs() < 1e-9,
        "{fp32} {bf16}"
    );
    assert!(
        e.train_items
            .iter()
            .any(|i| i.label.contains("critic params + AdamW bf16")),
        "{:?}",
        e.train_items
    );
    // The critic's own phases: with the actor offloaded and tiny micro-batches, what they
    // hold is the critic's state (params, grads, m, v, sqrt(v) in the update; its params in
    // the values pass), so bf16 halves their peaks but for the context and gathered layers.
    let phases = |dtype: &'static str| {
        let mut pairs = LONE_CRITIC.to_vec();
        pairs.push(("critic.model.fsdp_config.model_dtype", dtype));
        let v = VerlConfig::from_overrides(&with(&diamonds(), &pairs));
        let arch = lookup(&v.model_path);
        crate::estimate::trainers::verl::phase_peaks(&h100(false), &v, &arch)
    };
    let (f32_peaks, bf16_peaks) = (phases("fp32"), phases("bf16"));
    for phase in ["critic_update", "values"] {
        let at = |peaks: &[(&str, f64, f64)]| {
            peaks
                .iter()
                .find(|p| p.0 == phase)
                .map(|p| p.1)
                .unwrap_or_else(|| panic!("no {phase} in {peaks:?}"))
        };
        let (a, b) = (at(&f32_peaks), at(&bf16_peaks));
        assert!(b < 0.6 * a, "{phase}: fp32 {a}, bf16 {b}");
    }
    // Offloaded, in host RAM: the bf16 critic adds half what the fp32 one does.
    let host = |dtype: &'static str, offload: &'static str| {
        verl(
            h100(false),
            &with(
                &diamonds(),
                &[
                    ("algorithm.adv_estimator", "gae"),
                    ("critic.model.fsdp_config.model_dtype", dtype),
                    ("critic.model.fsdp_config.param_offload", offload),
                    ("critic.model.fsdp_config.optimizer_offload", offload),
                ],
            ),
        )
        .host_peak_gib
    };
    let on_host = |dtype| host(dtype, "True") - host(dtype, "False");
    // Qwen2.5-7B's params, m and v in fp32 on the one node: 12 B a parameter.
    let twelve_bytes = QWEN25_7B_CRITIC_PARAMS * 12.0 / GIB;
    assert!(
        (on_host("fp32") - twelve_bytes).abs() < 0.01,
        "{} {twelve_bytes}",
        on_host("fp32")
    );
    assert!(
        (on_host("bf16") / on_host("fp32") - 0.5).abs() < 1e-6,
        "{} {}",
        on_host("bf16"),
        on_host("fp32")
    );
    let (odd, e) = critic(&[("critic.model.fsdp_config.model_dtype", "int4")]);
    assert_eq!(odd, fp32);
    assert!(
        e.notes
            .iter()
            .any(|n| n.contains("the critic is sized in fp32")),
        "{:?}",
        e.notes
    );
}

/// With padding removed, a micro-batch holds the real tokens: the lengths an earlier attempt
/// logged when there are some, else the documented default share of the padded length.
#[test]
fn logged_sequence_lengths_replace_the_default_fill() {
    let mut o = Overrides::new();
    o.set("actor_rollout_ref.model.path", "Qwen/Qwen2.5-7B-Instruct");
    o.set("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8");
    o.set("data.max_prompt_length", "512");
    o.set("data.max_response_length", "1024");
    let run = |v: VerlConfig| {
        estimate(&SimConfig {
            hw: Hardware::h100_default(),
            workload: Workload::Verl(Box::new(v)),
            resumed: false,
            arch: None,
        })
    };
    let default = run(VerlConfig::from_overrides(&o));
    assert!((default.tokens_per_micro - 8.0 * 1536.0 * k::REMOVE_PADDING_FILL).abs() < 1.0);
    let logged = run(VerlConfig {
        observed_tokens_per_sequence: Some(768.0),
        ..VerlConfig::from_overrides(&o)
    });
    assert!((logged.tokens_per_micro - 8.0 * 768.0).abs() < 1.0);
    assert!(logged.train_peak_gib < default.train_peak_gib);
    // Never more than the padded length.
    let long = VerlConfig {
        observed_tokens_per_sequence: Some(5000.0),
        ..VerlConfig::from_overrides(&o)
    };
    assert_eq!(long.fill(), 1.0);
}

#[test]
fn torchrun_states_the_static_part_of_its_peak() {
    // The same step with an empty micro-batch: one figure for every micro batch, below each
    // peak, and what is left grows with the tokens — for the fit (a size only) and physics.
    let part = |e: &Estimate| {
        let fixed = e.train_static.expect("torchrun separates its static part");
        assert!(fixed.allocated_gib <= fixed.reserved_gib);
        (
            fixed.reserved_gib,
            e.train_reserved_gib - fixed.reserved_gib,
        )
    };
    let (s1, t1) = part(&torchrun(a40(), 1, 2048, true));
    let (s4, t4) = part(&torchrun(a40(), 4, 2048, true));
    assert!((s1 - s4).abs() < 1e-9 && s1 > 0.0, "{s1} {s4}");
    assert!(t1 > 0.0 && (t4 / t1 - 4.0).abs() < 0.2, "{t1} {t4}");
    let (s1, t1) = part(&torchrun_llama(2, 1, 512, false, "bf16"));
    let (s4, t4) = part(&torchrun_llama(2, 4, 512, false, "bf16"));
    assert!((s1 - s4).abs() < 1e-9 && s1 > 0.0, "{s1} {s4}");
    assert!(t4 > 3.0 * t1, "{t1} {t4}");
}

/// Seed 002's diamonds with verl ≥ 0.4's update (no entropy: `entropy_coeff` 0), a
/// micro-batch of 8 in the update and `log_prob` sequences in the old-log-prob pass's, its
/// entropy eager (`use_torch_compile` off: the whole entropy's fp32 tensors are made; compiled,
/// verl's default, they are not — [`verl_compiled_entropy_in_the_log_prob_pass_holds_no_fp32_copy`]).
fn diamonds_log_prob(log_prob: u64, extra: &[(&'static str, &'static str)]) -> Estimate {
    let mut keys = vec![
        ("actor_rollout_ref.actor.entropy_coeff", "0"),
        ("actor_rollout_ref.actor.use_torch_compile", "False"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8"),
    ];
    keys.extend_from_slice(extra);
    let mut o = with(&diamonds(), &keys);
    o.set(
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        &log_prob.to_string(),
    );
    verl(h100(false), &o)
}

/// The breakdown's lines of one phase (their labels name it), GiB.
fn phase_gib(e: &Estimate, phase: &str, what: &str) -> f64 {
    e.train_items
        .iter()
        .filter(|i| i.label.starts_with(phase) && i.label.contains(what))
        .map(|i| i.gib)
        .sum()
}

const OLD_LOG_PROB: &str = "old-log-prob pass (compute_log_prob)";
const REF_LOG_PROB: &str = "reference log-prob pass (compute_ref_log_prob)";

/// verl's old-log-prob pass has its own micro-batch and always computes the entropy
/// (`calculate_entropy=True`), under `no_grad`: at the update's micro-batch the update stays
/// the peak; at 4× it the pass's logits (32 × 1536 × 0.635 = 31.2k tokens × 152,064: 8.84 GiB
/// bf16, the fp32 copy and softmax twice that each) make it the step's peak, and at 8× the run
/// fails there, in step 1, where the update alone fits.
#[test]
fn verl_log_prob_micro_batch_2x_the_update_makes_that_pass_the_peak() {
    let same = diamonds_log_prob(8, &[]);
    assert!(same.notes.iter().all(|n| !n.contains(OLD_LOG_PROB)));
    assert!(phase_gib(&same, OLD_LOG_PROB, "") == 0.0);
    let two = diamonds_log_prob(16, &[]);
    assert!(
        (phase_gib(&two, OLD_LOG_PROB, "logits bf16") - 4.42).abs() < 0.05,
        "{:?}",
        two.train_items
    );
    assert!((phase_gib(&two, OLD_LOG_PROB, "(entropy, eager)") - 6.0 * 4.42).abs() < 0.1);
    assert!(two.notes.iter().any(|n| n.contains(OLD_LOG_PROB)));
    assert!(two.train_allocated_gib > same.train_allocated_gib + 5.0);
    // The update is what it was: the same micro-batch, the same tokens.
    assert_eq!(two.tokens_per_micro, same.tokens_per_micro);
    assert!(same.failure.is_none() && two.failure.is_none());
    let four = diamonds_log_prob(32, &[]);
    let d = gpu_oom(&four);
    assert!(d.label.starts_with(OLD_LOG_PROB), "{}", d.label);
    // It fails once AdamW's state is resident, in step 2.
    let f = four.failure.as_ref().unwrap();
    assert!(matches!(f.at, FailAt::Train { step: 2 }));
    assert!(
        f.to_string()
            .contains("step 2 allocating old-log-prob pass (compute_log_prob): "),
        "{f}"
    );
    // The deprecated global key is divided over the data-parallel ranks as verl does.
    let global = diamonds_with(&[
        ("actor_rollout_ref.actor.entropy_coeff", "0"),
        ("actor_rollout_ref.actor.use_torch_compile", "False"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8"),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size", "128"),
    ]);
    assert_eq!(global.failure, four.failure);
}

/// A pass that fits without AdamW state but not with it fails in step 2, after the first
/// update made the state (and the wake-up of step 2 fit), not in step 1.
#[test]
fn verl_log_prob_pass_meets_the_adamw_state_from_step_2() {
    let at = |m: u64| diamonds_log_prob(m, &[]).failure.map(|f| f.at);
    // A micro-batch whose pass needs more than the card only with the AdamW state.
    let m = (9..64)
        .find(|&m| at(m) == Some(FailAt::Train { step: 2 }))
        .expect("some log-prob micro-batch fails only from step 2");
    assert!(
        gpu_oom(&diamonds_log_prob(m, &[]))
            .label
            .starts_with(OLD_LOG_PROB)
    );
    // One sequence fewer fits.
    assert_eq!(at(m - 1), None);
}

/// Without a log-prob micro-batch (verl refuses to start then, unless it batches
/// dynamically) the pass is not estimated and the prediction is the update's, as before; with
/// dynamic batching the pass's budget is the update's (`log_prob_max_token_len_per_gpu`
/// follows `ppo_max_token_len_per_gpu`), over the whole step's batch.
#[test]
fn verl_log_prob_defaults_are_verls() {
    let none = diamonds_with(&[("actor_rollout_ref.actor.entropy_coeff", "0")]);
    assert!(none.notes.iter().any(|n| n.contains("not estimated")));
    assert!(none.train_items.iter().all(|i| !i.label.contains("pass (")));
    let o = with(
        &diamonds(),
        &[("actor_rollout_ref.actor.entropy_coeff", "0")],
    );
    let v = VerlConfig::from_overrides(&o);
    assert_eq!(v.log_prob.micro_per_gpu, None);
    assert!(!v.log_prob.use_dynamic_bsz);
    assert!(!v.needs_ref());
    let dynamic = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.entropy_coeff", "0"),
            ("actor_rollout_ref.actor.use_torch_compile", "False"),
            ("actor_rollout_ref.actor.use_dynamic_bsz", "True"),
            ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "16000"),
        ],
    );
    let v = VerlConfig::from_overrides(&dynamic);
    assert!(v.log_prob.use_dynamic_bsz && v.ref_log_prob.use_dynamic_bsz);
    assert_eq!(v.log_prob.max_token_len_per_gpu, 16000);
    assert_eq!(v.ref_log_prob.max_token_len_per_gpu, 16000);
    // A critic's forward follows its own update's budget, 32768.
    assert_eq!(v.critic_forward.max_token_len_per_gpu, 32768);
    assert!(!v.critic_use_remove_padding);
    // 1024 × 5 / 4 sequences × 975 real tokens (1.25M) in 79 balanced micro-batches of at
    // most 16,000: 15.8k tokens. On a 30 GiB card the pass, the step's first phase, fails at
    // its eager entropy's tensors, each 6 B per token and vocabulary entry.
    let mut small = h100(false);
    small.gpu_mem_gib = 30.0;
    let e = verl(small, &dynamic);
    let d = gpu_oom(&e);
    assert!(d.label.starts_with(OLD_LOG_PROB), "{}", d.label);
    let tokens = d.tried_gib * GIB / 6.0 / 152_064.0;
    assert!((15_700.0..=16_000.0).contains(&tokens), "{tokens}");
}

/// The reference model's pass runs only with a reference model: `use_kl_loss` or a KL
/// penalty in the reward; it computes no entropy.
#[test]
fn verl_ref_log_prob_pass_only_with_kl() {
    let ref_micro = (
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "256",
    );
    let no_kl = diamonds_log_prob(2, &[ref_micro]);
    let kl_loss = diamonds_log_prob(
        2,
        &[ref_micro, ("actor_rollout_ref.actor.use_kl_loss", "True")],
    );
    let kl_reward = diamonds_log_prob(2, &[ref_micro, ("algorithm.use_kl_in_reward", "True")]);
    let mentions = |e: &Estimate| {
        e.notes.iter().any(|n| n.contains(REF_LOG_PROB))
            || e.failure
                .as_ref()
                .is_some_and(|f| f.to_string().contains(REF_LOG_PROB))
    };
    assert!(!mentions(&no_kl), "{:?}", no_kl.notes);
    assert!(mentions(&kl_loss), "{:?}", kl_loss.notes);
    assert!(mentions(&kl_reward), "{:?}", kl_reward.notes);
    // 256 × 1536 × 0.635 tokens of bf16 logits, 70.7 GiB: no entropy tensors come first.
    let d = gpu_oom(&kl_loss);
    assert!(d.label.starts_with(REF_LOG_PROB), "{}", d.label);
    assert!(d.label.contains("logits bf16"), "{}", d.label);
    let logits = 256.0 * 1536.0 * k::REMOVE_PADDING_FILL * 152_064.0 * 2.0 / GIB;
    assert!((d.tried_gib - logits).abs() < 0.05, "{}", d.tried_gib);
    assert!(no_kl.failure.is_none(), "{:?}", no_kl.failure);
}

const CRITIC_UPDATE: &str = "critic update (update_critic)";

/// Seed 002's diamonds as PPO (a critic of the actor's model, offloaded between its calls so
/// that vLLM still wakes up) with `m` sequences in the critic's micro-batch.
fn diamonds_ppo(m: &'static str, extra: &[(&'static str, &'static str)]) -> Estimate {
    let mut keys = vec![
        ("algorithm.adv_estimator", "gae"),
        ("critic.model.fsdp_config.param_offload", "True"),
        ("critic.model.fsdp_config.optimizer_offload", "True"),
        ("critic.ppo_micro_batch_size_per_gpu", m),
    ];
    keys.extend_from_slice(extra);
    diamonds_log_prob(8, &keys)
}

/// The critic's update is a phase of its own (`dp_critic.py` `update_critic`), on padded
/// sequences unless `critic.model.use_remove_padding`: 64 sequences × 1536 tokens without
/// checkpointing fail there, at the first MLP tensor (98,304 × 18,944 bf16), named; with
/// padding removed the same micro-batch holds 0.635 of the tokens. At 2 sequences it fits,
/// and is still the step's peak: `update_critic` loads the offloaded critic's fp32 params,
/// gradients and AdamW state (7.07e9 × 16 B / 4 GPUs = 26.3 GiB: the value model, without the
/// LM head) beside the actor's resident 21.3 GiB.
#[test]
fn verl_critic_update_is_a_phase_on_padded_sequences() {
    let small = diamonds_ppo("2", &[]);
    assert!(small.failure.is_none(), "{:?}", small.failure);
    assert!(
        small
            .notes
            .iter()
            .any(|n| n.starts_with(&format!("the step's peak is the {CRITIC_UPDATE}"))),
        "{:?}",
        small.notes
    );
    let state: f64 = ["critic params", "critic AdamW", "critic grads"]
        .iter()
        .map(|w| phase_gib(&small, CRITIC_UPDATE, &format!(": {w}")))
        .sum();
    assert!(
        (state - QWEN25_7B_CRITIC_PARAMS * 16.0 / 4.0 / GIB).abs() < 0.05,
        "{state}"
    );
    let no_ckpt = ("critic.model.enable_gradient_checkpointing", "False");
    let padded = diamonds_ppo("64", &[no_ckpt]);
    let d = gpu_oom(&padded);
    assert!(d.label.starts_with(CRITIC_UPDATE), "{}", d.label);
    let mlp = |tokens: f64| tokens * 18_944.0 * 2.0 / GIB;
    assert!(
        (d.tried_gib - mlp(64.0 * 1536.0)).abs() < 0.01,
        "{}",
        d.tried_gib
    );
    let rmpad = diamonds_ppo(
        "64",
        &[no_ckpt, ("critic.model.use_remove_padding", "True")],
    );
    let d = gpu_oom(&rmpad);
    let real = 64.0 * 1536.0 * k::REMOVE_PADDING_FILL;
    assert!((d.tried_gib - mlp(real)).abs() < 0.01, "{}", d.tried_gib);
    // Without a micro-batch (and no dynamic batches) verl refuses to start: not estimated.
    let none = diamonds_log_prob(8, &[("algorithm.adv_estimator", "gae")]);
    assert!(
        none.notes
            .iter()
            .any(|n| n.contains(CRITIC_UPDATE) && n.contains("not estimated")),
        "{:?}",
        none.notes
    );
}

/// verl's precedence for the critic's micro-batches (`CriticWorker.__init__`): the deprecated
/// global `critic.ppo_micro_batch_size`, when set, overwrites both per-GPU sizes with the
/// global ones over the data-parallel ranks; else the forward's per-GPU size follows the
/// update's. The critic's mini-batch is the actor's unless given.
#[test]
fn verl_critic_micro_batches_follow_verls_precedence() {
    let v = |extra: &[(&'static str, &'static str)]| {
        VerlConfig::from_overrides(&with(&diamonds(), extra))
    };
    let global = v(&[
        ("critic.ppo_micro_batch_size", "64"),
        ("critic.forward_micro_batch_size_per_gpu", "2"),
        ("critic.ppo_micro_batch_size_per_gpu", "2"),
    ]);
    assert_eq!(global.critic_update.micro_per_gpu, Some(16));
    assert_eq!(global.critic_forward.micro_per_gpu, Some(16));
    let both_global = v(&[
        ("critic.ppo_micro_batch_size", "64"),
        ("critic.forward_micro_batch_size", "128"),
    ]);
    assert_eq!(both_global.critic_forward.micro_per_gpu, Some(32));
    let local = v(&[("critic.ppo_micro_batch_size_per_gpu", "4")]);
    assert_eq!(local.critic_update.micro_per_gpu, Some(4));
    assert_eq!(local.critic_forward.micro_per_gpu, Some(4));
    let forward = v(&[
        ("critic.ppo_micro_batch_size_per_gpu", "4"),
        ("critic.forward_micro_batch_size_per_gpu", "8"),
    ]);
    assert_eq!(forward.critic_forward.micro_per_gpu, Some(8));
    assert_eq!(local.critic_ppo_mini_batch_size, 256);
    assert_eq!(
        v(&[("critic.ppo_mini_batch_size", "32")]).critic_ppo_mini_batch_size,
        32
    );
    assert!(local.critic_gradient_checkpointing);
}

/// Without padding removal, dynamic batches are still balanced on real tokens
/// (`rearrange_micro_batches` counts the attention mask), and each micro-batch runs padded:
/// 320 sequences per GPU of 975 real tokens (312k) under a 100,000-token budget are 4
/// micro-batches of 80 padded sequences, not 5 of the padded length.
#[test]
fn verl_dynamic_batches_without_padding_removal_count_real_tokens() {
    let e = diamonds_with(&[
        ("actor_rollout_ref.model.use_remove_padding", "False"),
        ("actor_rollout_ref.actor.use_dynamic_bsz", "True"),
        (
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
            "100000",
        ),
    ]);
    assert!(
        (e.tokens_per_micro - 80.0 * 1536.0).abs() < 1.0,
        "{}",
        e.tokens_per_micro
    );
}

/// verl's old-log-prob pass computes the entropy with the `torch.compile`d
/// `entropy_from_logits` on the padding-free path (verl's defaults): under `no_grad` that is
/// row reductions over the bf16 logits, no copy or softmax of them. At 16× the update's
/// micro-batch (where eager code fails) the pass fits, the step's peak, holding the logits
/// (35.36 GiB) and per-token values only, where eager code makes 2 × 35.4 GiB more (measured on
/// one H100, `calibration/measured/`); without padding removal verl calls the eager function.
#[test]
fn verl_compiled_entropy_in_the_log_prob_pass_holds_no_fp32_copy() {
    let compiled = [("actor_rollout_ref.actor.use_torch_compile", "True")];
    let sixteen = diamonds_log_prob(128, &compiled);
    assert!(sixteen.failure.is_none(), "{:?}", sixteen.failure);
    assert!(
        (phase_gib(&sixteen, OLD_LOG_PROB, "logits bf16") - 35.36).abs() < 0.1,
        "{:?}",
        sixteen.train_items
    );
    assert_eq!(phase_gib(&sixteen, OLD_LOG_PROB, "(entropy, eager)"), 0.0);
    let per_token = phase_gib(&sixteen, OLD_LOG_PROB, "entropy per-token fp32");
    assert!(per_token > 0.0 && per_token < 0.02, "{per_token}");
    assert!(
        gpu_oom(&diamonds_log_prob(128, &[]))
            .label
            .starts_with(OLD_LOG_PROB)
    );
    // The padded path is eager whatever `use_torch_compile` says.
    let padded = diamonds_log_prob(
        128,
        &[
            compiled[0],
            ("actor_rollout_ref.model.use_remove_padding", "False"),
        ],
    );
    assert!(
        gpu_oom(&padded).label.contains("(entropy, eager)"),
        "{:?}",
        padded.failure
    );
}

/// verl's deprecated global micro-batch is divided over the data-parallel ranks, not every
/// GPU: `ppo_micro_batch_size //= world / sp` (`fsdp_workers.py` at 49b08e950, L148-150), as
/// verl's GRPO-LoRA recipe for 72B on 8 GPUs with Ulysses 2 sets it (176 → 44).
#[test]
fn verl_global_micro_batch_is_per_data_parallel_rank() {
    let o = ov(&[
        ("trainer.n_gpus_per_node", "8"),
        (
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
            "2",
        ),
        ("actor_rollout_ref.actor.ppo_micro_batch_size", "176"),
    ]);
    assert_eq!(VerlConfig::from_overrides(&o).micro_batch_per_gpu, 44);
}

/// LoRA on the demo's 7B × 4 (the diamonds seed's config with `lora_rank: 32`): gradients and
/// AdamW state are the adapters' (80.7 M parameters, 1 % of the model), the reference is the
/// actor without its adapters (no reference model in host RAM), vLLM keeps one adapter slot.
#[test]
fn verl_lora_trains_only_the_adapters() {
    let kl = ("actor_rollout_ref.actor.use_kl_loss", "true");
    let full = verl(h100(false), &with(&diamonds(), &[kl]));
    let lora = verl(
        h100(false),
        &with(
            &diamonds(),
            &[kl, ("actor_rollout_ref.model.lora_rank", "32")],
        ),
    );
    // 7.62 B fp32 over 4 GPUs: 7.1 GiB of gradients, 14.2 of AdamW; the adapters' are 1 %.
    assert!(train_gib(&full, "AdamW m+v fp32") > 14.0);
    assert_eq!(
        train_gib(&lora, "LoRA adapters' AdamW m+v fp32"),
        2.0 * train_gib(&lora, "LoRA adapters' grads")
    );
    assert!(
        (train_gib(&lora, "LoRA adapters' AdamW m+v fp32") - 8.0 * 80_740_352.0 / 4.0 / GIB).abs()
            < 1e-9
    );
    assert!(lora.train_peak_gib < full.train_peak_gib - 15.0);
    assert!(
        lora.rollout_items
            .iter()
            .any(|i| i.label.contains("adapters disabled"))
    );
    // Host RAM. The reference: fp32 (4P per node) without LoRA, none with it. With verl's
    // default `dummy` load format and layered_summon off, the first sync copies the whole
    // fp32 model to host RAM in each of the 4 GPU processes; with base weights loaded and
    // layered_summon on, it does not.
    let p = lookup("Qwen/Qwen2.5-7B-Instruct").params;
    let loaded = verl(
        h100(false),
        &with(
            &diamonds(),
            &[
                kl,
                ("actor_rollout_ref.model.lora_rank", "32"),
                ("actor_rollout_ref.rollout.load_format", "safetensors"),
                ("actor_rollout_ref.rollout.layered_summon", "true"),
            ],
        ),
    );
    let reference = full.host_peak_gib - loaded.host_peak_gib;
    assert!((reference - 4.0 * p / GIB).abs() < 1e-6, "{reference}");
    let copies = lora.host_peak_gib - loaded.host_peak_gib;
    assert!(
        (copies - 4.0 * 4.0 * (p + 80_740_352.0) / GIB).abs() < 1e-6,
        "{copies}"
    );
    assert!(
        lora.notes
            .iter()
            .any(|n| n.contains("first LoRA weight sync"))
    );
    assert!(
        !loaded
            .notes
            .iter()
            .any(|n| n.contains("first LoRA weight sync"))
    );
}

/// With LoRA the reference's pass is the actor's own `compute_log_prob`, which loads the
/// offloaded actor: its pass holds the actor's shard, the separate reference model's does not.
#[test]
fn verl_lora_reference_pass_loads_the_actor() {
    let hw = h100(false);
    let base = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.use_kl_loss", "true"),
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "true"),
            // AdamW's state in host RAM, so only the params differ between the two.
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "true",
            ),
            (
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                "16",
            ),
        ],
    );
    let arch = lookup("Qwen/Qwen2.5-7B-Instruct");
    let ref_pass = |o: &Overrides| {
        let v = VerlConfig::from_overrides(o);
        trainers::verl::phase_peaks(&hw, &v, &arch)
            .into_iter()
            .find(|p| p.0 == "ref_log_prob")
            .expect("a reference pass")
            .1
    };
    let mut lora = base.clone();
    lora.set("actor_rollout_ref.model.lora_rank", "32");
    let shard = 4.0 * (arch.params + 80_740_352.0) / 4.0 / GIB;
    let grown = ref_pass(&lora) - ref_pass(&base);
    assert!((grown - shard).abs() < 0.01, "{grown} vs {shard}");
}

/// The Megatron `model.lora` block does not make verl's FSDP actor a LoRA one.
#[test]
fn verl_megatron_lora_block_is_not_fsdp_lora() {
    let o = with(&diamonds(), &[("actor_rollout_ref.model.lora.rank", "32")]);
    let v = VerlConfig::from_overrides(&o);
    assert!(v.lora.is_none());
    assert!(
        v.notes.iter().any(|n| n.contains("Megatron")),
        "{:?}",
        v.notes
    );
}

/// With LoRA and `rollout.layered_summon` off, verl (FSDP1) gathers the whole fp32 model on
/// every GPU before each rollout: 72B on 8 × H100 cannot (271 GiB), one layer at a time it
/// can; FSDP2 gathers each adapter alone, and one GPU holds the whole model anyway.
#[test]
fn verl_lora_without_layered_summon_gathers_the_whole_model() {
    let recipe = [
        ("actor_rollout_ref.model.path", "Qwen/Qwen2.5-72B-Instruct"),
        ("algorithm.adv_estimator", "grpo"),
        ("trainer.n_gpus_per_node", "8"),
        ("data.train_batch_size", "176"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "176"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size", "176"),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size", "176"),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size", "176"),
        (
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
            "2",
        ),
        ("actor_rollout_ref.actor.use_kl_loss", "true"),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", "true"),
        (
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
            "true",
        ),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "8"),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.4"),
        ("actor_rollout_ref.rollout.n", "5"),
        ("actor_rollout_ref.rollout.max_num_batched_tokens", "1536"),
        ("data.max_prompt_length", "512"),
        ("data.max_response_length", "1024"),
        ("data.train_files", "data/gsm8k/train.parquet"),
        ("actor_rollout_ref.model.lora_rank", "32"),
        ("actor_rollout_ref.rollout.load_format", "safetensors"),
    ];
    let mut host = h100(false);
    host.gpus_per_node = 8;
    host.host_mem_gib = 2048.0;
    let layered = verl(
        host.clone(),
        &with(
            &recipe,
            &[("actor_rollout_ref.rollout.layered_summon", "true")],
        ),
    );
    assert!(layered.failure.is_none(), "{:?}", layered.failure);
    let whole = verl(host.clone(), &with(&recipe, &[]));
    let f = whole
        .failure
        .as_ref()
        .expect("the whole model does not fit");
    assert_eq!(f.at, FailAt::Train { step: 1 });
    let d = gpu_oom(&whole);
    assert!(d.label.contains("summon_full_params"), "{}", d.label);
    // Gathered a unit at a time, the whole model is 72.7 B × 4 bytes = 271 GiB on each GPU.
    assert!(whole.train_peak_gib > 271.0, "{}", whole.train_peak_gib);
    assert!(
        whole
            .notes
            .iter()
            .any(|n| n.contains("the step's peak is the LoRA weight sync"))
    );
    let fsdp2 = verl(
        host.clone(),
        &with(&recipe, &[("actor_rollout_ref.actor.strategy", "fsdp2")]),
    );
    assert!(fsdp2.failure.is_none(), "{:?}", fsdp2.failure);
    assert_eq!(fsdp2.train_peak_gib, layered.train_peak_gib);
    // One GPU: the model is whole already, nothing is gathered (7B, as verl's 1-GPU recipe).
    let one = |extra: &[(&'static str, &'static str)]| {
        let mut o: Vec<(&'static str, &'static str)> = recipe.to_vec();
        o.extend_from_slice(&[
            ("actor_rollout_ref.model.path", "Qwen/Qwen2.5-7B-Instruct"),
            ("trainer.n_gpus_per_node", "1"),
            (
                "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
                "1",
            ),
            ("actor_rollout_ref.rollout.tensor_model_parallel_size", "1"),
            ("data.train_batch_size", "16"),
            ("actor_rollout_ref.actor.ppo_mini_batch_size", "16"),
            ("actor_rollout_ref.actor.ppo_micro_batch_size", "16"),
            ("actor_rollout_ref.rollout.log_prob_micro_batch_size", "16"),
            ("actor_rollout_ref.ref.log_prob_micro_batch_size", "16"),
        ]);
        o.extend_from_slice(extra);
        verl(host.clone(), &ov(&o)).train_peak_gib
    };
    assert_eq!(
        one(&[]),
        one(&[("actor_rollout_ref.rollout.layered_summon", "true")])
    );
}

/// verl with SGLang as its rollout (`rollout.name: sglang`): SGLang's own arithmetic — the
/// memory free when it starts (`total`), free again after its weights load (`available`),
/// the pool `available - total × (1 - fraction)` — with verl's worker holding its state then;
/// CUDA graphs come on top; asleep, the context and graphs stay.
#[test]
fn verl_sglang_pool_is_sglangs_fraction_of_what_the_worker_leaves_free() {
    let sglang = with(&diamonds(), &[("actor_rollout_ref.rollout.name", "sglang")]);
    let s = verl(h100(false), &sglang);
    let v = verl(h100(false), &ov(&diamonds()));
    let cfg = VerlConfig::from_overrides(&sglang);
    let arch = lookup("Qwen/Qwen2.5-7B-Instruct");
    let held = super::trainers::verl::resident_at_rollout_init_gib(&cfg, &arch);
    let weights = 2.0 * arch.params / GIB;
    let total = 79.18 - held - k::SGLANG_CTX_GIB;
    let available = total - weights;
    let pool = available - total * (1.0 - 0.6);
    assert!((s.kv_cache_gib.unwrap() - pool).abs() < 1e-9, "{s:?}");
    // vLLM's peak is the resident state + 0.6 of the card; SGLang's is the resident state,
    // its context, weights and pool (0.6 of what was free) and its graphs.
    let steady_extra = v.rollout_peak_gib - 0.6 * 79.18 - held;
    let expected =
        held + steady_extra + k::SGLANG_CTX_GIB + weights + pool + k::SGLANG_OVERHEAD_GIB;
    assert!(
        (s.rollout_peak_gib - expected).abs() < 1e-9,
        "{} vs {expected}",
        s.rollout_peak_gib
    );
    let labels: Vec<&str> = s.rollout_items.iter().map(|i| i.label.as_str()).collect();
    assert!(
        labels.iter().any(|l| l.starts_with("SGLang KV pool")),
        "{labels:?}"
    );
    assert!(!labels.iter().any(|l| l.contains("vLLM")), "{labels:?}");
    assert!(
        (train_gib(&s, "SGLang asleep") - k::SGLANG_CTX_GIB - k::SGLANG_OVERHEAD_GIB).abs() < 1e-9
    );
}

#[test]
fn verl_sglang_without_room_for_its_pool_refuses_at_start_up() {
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.rollout.name", "sglang"),
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.2"),
        ],
    );
    let e = verl(h100(false), &o);
    match e.failure {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::SglangNotEnough { mem_fraction },
        }) => assert_eq!(mem_fraction, 0.2),
        other => panic!("expected SGLang to refuse at start-up, got {other:?}"),
    }
}

/// SGLang sized its pool before AdamW's state existed; at step 2 that state is resident, and
/// resuming the released pool no longer fits.
#[test]
fn verl_sglang_resume_fails_once_adamw_state_is_resident() {
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.rollout.name", "sglang"),
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.9"),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "2"),
        ],
    );
    let e = verl(h100(false), &o);
    match e.failure {
        Some(Failure {
            at: FailAt::Rollout { step: 2 },
            kind:
                FailKind::SglangResume {
                    needed_gib,
                    free_gib,
                },
        }) => assert!(needed_gib > free_gib),
        other => panic!("expected SGLang's resume to fail at step 2, got {other:?}"),
    }
    // Offloading the optimizer state keeps the memory SGLang was sized against.
    let offloaded = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.rollout.name", "sglang"),
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.9"),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "2"),
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "True",
            ),
        ],
    );
    let e = verl(h100(false), &offloaded);
    assert!(e.fits(), "{:?}", e.failure);
}

#[test]
fn verl_another_rollout_engine_is_estimated_as_vllm_and_says_so() {
    let o = with(&diamonds(), &[("actor_rollout_ref.rollout.name", "hf")]);
    let e = verl(h100(false), &o);
    assert!(
        e.notes.iter().any(|n| n.starts_with("rollout.name hf:")),
        "{:?}",
        e.notes
    );
    assert_eq!(
        e.rollout_peak_gib,
        verl(h100(false), &ov(&diamonds())).rollout_peak_gib
    );
}

/// SGLang's server is a process of its own on verl's GPUs: a training OOM lists it apart
/// (its context and CUDA graphs while asleep), and the workload says it is the job's own, so
/// the planner does not take it for another program on the card.
#[test]
fn verl_sglang_server_is_another_process_in_a_training_oom() {
    let o = with(&diamonds(), &[("actor_rollout_ref.rollout.name", "sglang")]);
    let e = verl(h100(false), &o);
    let d = gpu_oom(&e);
    let asleep = k::SGLANG_CTX_GIB + k::SGLANG_OVERHEAD_GIB;
    assert_eq!(d.other_processes_gib, vec![asleep]);
    let vllm = verl(h100(false), &ov(&diamonds()));
    assert!(gpu_oom(&vllm).other_processes_gib.is_empty());
    let w = Workload::Verl(Box::new(VerlConfig::from_overrides(&o)));
    assert!((w.own_engine_gib(79.18) - asleep).abs() < 1e-9);
    let w = Workload::Verl(Box::new(VerlConfig::from_overrides(&ov(&diamonds()))));
    assert_eq!(w.own_engine_gib(79.18), 0.0);
}

#[test]
fn verl_lora_with_sglang_says_verl_serves_no_adapters_there() {
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.rollout.name", "sglang"),
            ("actor_rollout_ref.model.lora_rank", "32"),
        ],
    );
    let e = verl(h100(false), &o);
    assert!(
        e.notes
            .iter()
            .any(|n| n.starts_with("LoRA with rollout.name sglang")),
        "{:?}",
        e.notes
    );
    let vllm = with(&diamonds(), &[("actor_rollout_ref.model.lora_rank", "32")]);
    assert!(
        !verl(h100(false), &vllm)
            .notes
            .iter()
            .any(|n| n.contains("rollout.name sglang"))
    );
}

/// verl's estimate for a stated release.
fn verl_release(hw: Hardware, o: &Overrides, release: Option<&str>) -> Estimate {
    estimate(&SimConfig {
        hw,
        workload: Workload::Verl(Box::new(VerlConfig {
            version: release.map(|r| r.parse().unwrap()),
            ..VerlConfig::from_overrides(o)
        })),
        resumed: false,
        arch: None,
    })
}

/// From verl 0.8 vLLM runs in processes of its own (verl#4280): a training OOM lists its
/// asleep engine apart, and the workload says it is the job's own, as SGLang's server; before
/// 0.8, or with the release not stated, its memory is the worker's and nothing is listed.
/// The card holds the same either way.
#[test]
fn verl_08_lists_its_vllm_apart_in_a_training_oom() {
    let o = ov(&diamonds());
    let own = |release: Option<&str>| {
        Workload::Verl(Box::new(VerlConfig {
            version: release.map(|r| r.parse().unwrap()),
            ..VerlConfig::from_overrides(&o)
        }))
        .own_engine_gib(79.18)
    };
    let new = verl_release(h100(false), &o, Some("0.8.0"));
    assert_eq!(gpu_oom(&new).other_processes_gib, vec![k::VLLM_ASLEEP_GIB]);
    assert_eq!(own(Some("0.8.0")), k::VLLM_ASLEEP_GIB);
    for old in [Some("0.7.0"), None] {
        let e = verl_release(h100(false), &o, old);
        assert!(gpu_oom(&e).other_processes_gib.is_empty(), "{old:?}");
        assert_eq!(own(old), 0.0, "{old:?}");
    }
    // The same device peak: only where torch's message puts the engine moves.
    let seven = verl_release(h100(false), &o, Some("0.7.0"));
    assert!((new.train_peak_gib - seven.train_peak_gib).abs() < 1e-9);
    assert!((new.rollout_peak_gib - seven.rollout_peak_gib).abs() < 1e-9);
    // Kept awake (free_cache_engine=False), its fraction of the card.
    let awake = with(
        &diamonds(),
        &[("actor_rollout_ref.rollout.free_cache_engine", "False")],
    );
    let w = Workload::Verl(Box::new(VerlConfig {
        version: Some("0.8.0".parse().unwrap()),
        ..VerlConfig::from_overrides(&awake)
    }));
    assert!((w.own_engine_gib(79.18) - 0.6 * 79.18).abs() < 1e-9);
}

/// verl 0.6 turns expandable segments on for training (`trainer_mode`), so its training is
/// sized with their slack whatever the environment says; an earlier release, or one not
/// stated, with the environment's; only an unstated one says so.
#[test]
fn verl_from_0_6_trains_with_expandable_segments() {
    let o = ov(&diamonds());
    let unstated = verl_release(h100(false), &o, None);
    let old = verl_release(h100(false), &o, Some("0.5.0"));
    let new = verl_release(h100(false), &o, Some("0.6.1"));
    let env_on = verl_release(h100(true), &o, None);
    assert_eq!(unstated.train_peak_gib, old.train_peak_gib);
    assert_eq!(new.train_peak_gib, env_on.train_peak_gib);
    assert!(new.train_peak_gib < old.train_peak_gib, "{new:?}");
    assert_eq!(new.frag, h100(true).frag());
    assert_eq!(old.frag, h100(false).frag());
    let says = |e: &Estimate| e.notes.iter().any(|n| n.contains("trainer_version:"));
    assert!(says(&unstated), "{:?}", unstated.notes);
    assert!(!says(&old) && !says(&new) && !says(&env_on));
}

/// Before 0.4 verl's update computed the entropy and backpropagated through it whatever
/// `entropy_coeff` said (issue 42: a pre-0.4 OOM was predicted to fit with the entropy off);
/// from 0.4 on, and with the release not stated, the keys decide.
#[test]
fn verl_before_0_4_always_has_the_entropy_in_its_update() {
    // diamonds states seed 002's `entropy_coeff: 0.001`; without it, 0.4's default. The
    // entropy eager (`use_torch_compile: False`), whose backward peaks above the loss's.
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4"),
            ("actor_rollout_ref.actor.entropy_coeff", "0"),
            ("actor_rollout_ref.actor.use_torch_compile", "False"),
        ],
    );
    let old = verl_release(h100(false), &o, Some("0.3.0.post1"));
    let new = verl_release(h100(false), &o, Some("0.4.1"));
    let unstated = verl_release(h100(false), &o, None);
    assert!(old.train_peak_gib > new.train_peak_gib, "{old:?}\n{new:?}");
    assert_eq!(new.train_peak_gib, unstated.train_peak_gib);
    assert!(
        old.notes
            .iter()
            .any(|n| n.contains("optional only from 0.4")),
        "{:?}",
        old.notes
    );
    assert!(
        !new.notes
            .iter()
            .any(|n| n.contains("optional only from 0.4"))
    );
    // With the entropy in the loss already, the release changes nothing.
    let on = with(
        &diamonds(),
        &[("actor_rollout_ref.actor.entropy_coeff", "0.001")],
    );
    assert_eq!(
        verl_release(h100(false), &on, Some("0.3.0")).train_peak_gib,
        verl_release(h100(false), &on, Some("0.4.1")).train_peak_gib
    );
}

/// With micro-batches packed to a token budget on a verl release before 0.6, torch's reserved
/// counter keeps one more set of the micro-batch's tensors (cached segments of another size);
/// the device peak an OOM is judged by does not move. A release not stated: no term. A release
/// from 0.6 on (expandable segments), or expandable segments from the environment: none either,
/// but FSDP's communication pools instead (revision 11).
#[test]
fn dynamic_batching_before_0_6_raises_the_reserved_counter_not_the_device_peak() {
    let dynamic = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.actor.use_dynamic_bsz", "True"),
            ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "8192"),
        ],
    );
    let slack = |e: &Estimate, hw: &Hardware| {
        e.train_reserved_gib - e.train_allocated_gib * (1.0 + hw.frag())
    };
    let old = verl_release(h100(false), &dynamic, Some("0.4.1"));
    // 8192 tokens × 152,064 × 10 B of logits through the backward alone is 11.6 GiB.
    assert!(slack(&old, &h100(false)) > 11.6, "{old:?}");
    assert!(old.train_reserved_gib > old.train_peak_gib, "{old:?}");
    // With expandable segments the counter holds FSDP's communication pools instead, whatever
    // the micro-batches' sizes (`comm_pools_gib`, asserted on its own below).
    let pools = fsdp_pools_gib("Qwen/Qwen2.5-7B-Instruct", 4.0);
    for (hw, release, term) in [
        (h100(false), None, 0.0),
        (h100(false), Some("0.6.0"), pools),
        (h100(true), Some("0.4.1"), pools),
    ] {
        let e = verl_release(hw.clone(), &dynamic, release);
        let train_hw = Hardware {
            expandable_segments: hw.expandable_segments || release == Some("0.6.0"),
            ..hw
        };
        assert!(
            (slack(&e, &train_hw) - term).abs() < 0.5,
            "{release:?}: {term} {e:?}"
        );
    }
    // The device peak is the same with the term as without it.
    let unstated = verl_release(h100(false), &dynamic, None);
    assert_eq!(old.train_peak_gib, unstated.train_peak_gib);
    // Fixed-size micro-batches keep no segments of another size.
    let fixed = verl_release(h100(false), &ov(&diamonds()), Some("0.4.1"));
    assert!(slack(&fixed, &h100(false)) < 0.5, "{fixed:?}");
}

/// FSDP's all-gather and reduce-scatter pools for `model` over `world` GPUs, by hand: the
/// root unit (the embeddings, both when untied, and the final norm) and two layers in bf16,
/// the root's gradient in fp32 with its shard.
fn fsdp_pools_gib(model: &str, world: f64) -> f64 {
    let a = lookup(model);
    let heads = if a.tied_embeddings { 1.0 } else { 2.0 };
    let root = heads * f64::from(a.vocab) * f64::from(a.hidden) + f64::from(a.hidden);
    (2.0 * (root + 2.0 * a.layer_params()) + 4.0 * root * (1.0 + 1.0 / world)) / GIB
}

/// verl 0.8's counter on LightningSearch-RL's tiny run (calibration/verl.yaml: 9.38 GiB
/// allocated, 13.56 reserved at any sequence length): the allocated peak is the optimizer step
/// and the counter adds FSDP's communication pools (2.9 GiB for Qwen3-4B over four GPUs) to the
/// compute stream's. The device peak does not hold them: the allocator frees what other
/// streams cache before it fails, so they fill only the room the card has left. On one GPU
/// there is nothing to gather or reduce; with LoRA only the gathers.
#[test]
fn verl_with_expandable_segments_counts_fsdps_communication_pools_in_the_reserved_counter() {
    let bf16 = (
        "actor_rollout_ref.actor.fsdp_config.model_dtype",
        "bfloat16",
    );
    let on = |card: Hardware, extra: &[(&'static str, &'static str)]| {
        verl_release(card, &tiny_qwen3_4b(extra), Some("0.8.0"))
    };
    let new = on(rtx5090(), &[bf16]);
    let pools = fsdp_pools_gib("Qwen/Qwen3-4B", 4.0);
    assert!((pools - 2.91).abs() < 0.02, "{pools}");
    let compute = new.train_allocated_gib * (1.0 + k::FRAG_EXPANDABLE);
    assert!(
        (new.train_reserved_gib - compute - pools).abs() < 0.05,
        "{new:?}"
    );
    assert!((new.train_stream_cache_gib - pools).abs() < 0.05, "{new:?}");
    assert!(
        (new.train_reserved_gib / 13.56 - 1.0).abs() < 0.10,
        "{new:?}"
    );
    // The device peak is the compute stream's and the process's others (verl 0.8's asleep
    // vLLM is a process of its own), without the pools.
    let beside = k::CUDA_CTX_GIB + k::VLLM_ASLEEP_GIB;
    assert!(
        (new.train_peak_gib - (new.train_reserved_gib - pools) - beside).abs() < 0.05,
        "{new:?}"
    );
    // A card with 1 GiB of room beside that peak holds 1 GiB of them.
    let tight = Hardware {
        gpu_mem_gib: new.train_peak_gib + 1.0,
        ..rtx5090()
    };
    // (vLLM's share of so small a card leaves it no KV cache: the counter is what is read.)
    let capped = on(tight, &[bf16]);
    assert!(
        (capped.train_reserved_gib - compute - 1.0).abs() < 0.05,
        "{capped:?}"
    );
    // LoRA: only the gathers (the root and two layers in bf16). (Layered, so that the weight
    // sync, which holds no pools, is not the counter's peak.)
    let lora = on(
        rtx5090(),
        &[
            bf16,
            ("actor_rollout_ref.model.lora_rank", "8"),
            ("actor_rollout_ref.rollout.layered_summon", "true"),
            ("actor_rollout_ref.rollout.load_format", "safetensors"),
        ],
    );
    let a = lookup("Qwen/Qwen3-4B");
    let gathers = 2.0 * (a.embed_params() + f64::from(a.hidden) + 2.0 * a.layer_params()) / GIB;
    assert!(
        (lora.train_stream_cache_gib - gathers).abs() < 0.05,
        "{gathers} {lora:?}"
    );
    // A release without expandable segments keeps its 8 % slack, pools in it.
    let old = verl_release(rtx5090(), &tiny_qwen3_4b(&[bf16]), Some("0.5.0"));
    assert!(
        old.train_reserved_gib < old.train_allocated_gib * (1.0 + k::FRAG) + 0.05,
        "{old:?}"
    );
    assert_eq!(old.train_stream_cache_gib, 0.0);
    // One GPU: no pools.
    let one = on(rtx5090(), &[bf16, ("trainer.n_gpus_per_node", "1")]);
    assert_eq!(one.train_stream_cache_gib, 0.0, "{one:?}");
}

/// A PPO critic's update holds its own FSDP root's pools, of the value model's shape: no LM
/// head, so an untied model's root is its embedding alone.
#[test]
fn a_critics_update_counts_the_value_models_pools() {
    let ppo = with(
        &diamonds(),
        &[
            ("algorithm.adv_estimator", "gae"),
            ("critic.ppo_micro_batch_size_per_gpu", "1"),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "1"),
            (
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                "1",
            ),
            (
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                "1",
            ),
        ],
    );
    let e = verl_release(h100(false), &ppo, Some("0.6.0"));
    let actor = fsdp_pools_gib("Qwen/Qwen2.5-7B-Instruct", 4.0);
    // The actor's pools (two embedding matrices in its root) are the larger; the counter is
    // the larger of the two updates' with theirs.
    assert!(
        e.train_stream_cache_gib > 0.0 && e.train_stream_cache_gib <= actor + 0.01,
        "{e:?}"
    );
    let a = lookup("Qwen/Qwen2.5-7B-Instruct");
    let root = a.embed_params() + f64::from(a.hidden);
    let critic = (2.0 * (root + 2.0 * a.layer_params()) + 4.0 * root * 1.25) / GIB;
    assert!(critic < actor - 2.0, "{critic} {actor}");
}

/// LightningSearch-RL's tiny GRPO of Qwen3-4B on 4 × RTX 5090 (calibration/verl-holdout.yaml).
fn tiny_qwen3_4b(extra: &[(&'static str, &'static str)]) -> Overrides {
    with(
        &[
            ("actor_rollout_ref.model.path", "Qwen/Qwen3-4B"),
            ("data.train_batch_size", "4"),
            ("data.max_prompt_length", "512"),
            ("data.max_response_length", "256"),
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.25"),
            ("actor_rollout_ref.rollout.max_model_len", "768"),
            ("actor_rollout_ref.rollout.max_num_batched_tokens", "1024"),
            (
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                "1",
            ),
            ("actor_rollout_ref.actor.ppo_mini_batch_size", "4"),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "1"),
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "True",
            ),
            ("algorithm.adv_estimator", "grpo"),
            ("trainer.n_gpus_per_node", "4"),
        ],
        extra,
    )
}

fn rtx5090() -> Hardware {
    hw("NVIDIA GeForce RTX 5090", 31.36, 4, 512.0, false)
}

/// `actor.fsdp_config.model_dtype: bfloat16` halves the actor's parameters, gradients and
/// AdamW state (in the breakdown's labels too); in host RAM as well when offloaded.
#[test]
fn a_bf16_actor_halves_its_parameters_gradients_and_adamw_state() {
    let fp32 = verl(rtx5090(), &tiny_qwen3_4b(&[]));
    let bf16 = verl(
        rtx5090(),
        &tiny_qwen3_4b(&[(
            "actor_rollout_ref.actor.fsdp_config.model_dtype",
            "bfloat16",
        )]),
    );
    for (label, ratio) in [("actor params", 0.5), ("AdamW m+v", 0.5), ("grads", 0.5)] {
        let (a, b) = (train_gib(&fp32, label), train_gib(&bf16, label));
        assert!(a > 0.0 && (b / a - ratio).abs() < 1e-9, "{label}: {a} {b}");
    }
    assert!(
        train_gib(&bf16, "params bf16") > 0.0,
        "{:?}",
        bf16.train_items
    );
    assert!(bf16.host_peak_gib < fp32.host_peak_gib);
    let fp16 = verl(
        rtx5090(),
        &tiny_qwen3_4b(&[("actor_rollout_ref.actor.fsdp_config.model_dtype", "float16")]),
    );
    assert_eq!(
        train_gib(&fp16, "params fp16"),
        train_gib(&bf16, "params bf16")
    );
    // A name verl's PrecisionType would not take is sized as fp32, and said.
    let odd = verl(
        rtx5090(),
        &tiny_qwen3_4b(&[("actor_rollout_ref.actor.fsdp_config.model_dtype", "int8")]),
    );
    assert_eq!(
        train_gib(&odd, "actor params fp32"),
        train_gib(&fp32, "actor params fp32")
    );
    assert!(
        odd.notes
            .iter()
            .any(|n| n.contains("\"int8\" is not a dtype")),
        "{:?}",
        odd.notes
    );
}

/// After the backward, AdamW's foreach step makes sqrt(v) beside the parameters, gradients, m
/// and v: with a micro-batch this small that is the update's allocated peak, five shards of
/// the bf16 actor (LightningSearch-RL logged 9.38 GiB allocated).
#[test]
fn the_optimizer_steps_sqrt_v_is_the_peak_of_a_small_update() {
    let o = tiny_qwen3_4b(&[(
        "actor_rollout_ref.actor.fsdp_config.model_dtype",
        "bfloat16",
    )]);
    let e = verl(rtx5090(), &o);
    let shard = train_gib(&e, "actor params bf16");
    assert!((shard - 1.87).abs() < 0.02, "{shard}");
    assert!(train_gib(&e, "AdamW step: sqrt(v) bf16") > 0.0);
    assert!(
        (e.train_allocated_gib - 5.0 * shard).abs() < 0.1,
        "{} {shard}",
        e.train_allocated_gib
    );
}

/// vLLM captures CUDA graphs unless `enforce_eager`: verl's default was `True` until v0.6.0;
/// a release not stated gets graphs (the larger workspace); an explicit value wins.
#[test]
fn vllm_is_eager_by_the_releases_default_unless_told() {
    let o = tiny_qwen3_4b(&[]);
    let kv = |release: Option<&str>, o: &Overrides| {
        verl_release(rtx5090(), o, release).kv_cache_gib.unwrap()
    };
    let (old, new, unstated) = (kv(Some("0.5.0"), &o), kv(Some("0.6.0"), &o), kv(None, &o));
    assert_eq!(new, unstated);
    let graphs = k::VLLM_WORKSPACE_BASE_GIB - k::VLLM_WORKSPACE_BASE_EAGER_GIB;
    assert!((old - new - graphs).abs() < 1e-9, "{old} {new}");
    let eager = tiny_qwen3_4b(&[("actor_rollout_ref.rollout.enforce_eager", "True")]);
    assert_eq!(kv(Some("0.8.0"), &eager), old);
    let graphs_on = tiny_qwen3_4b(&[("actor_rollout_ref.rollout.enforce_eager", "False")]);
    assert_eq!(kv(Some("0.5.0"), &graphs_on), new);
}

/// Where the optimizer step is the update's peak (a small token budget, a 7B model on two
/// GPUs), the reserved counter's term for changing micro-batches is still the micro-batch's
/// own tensors, not the gradients and sqrt(v) the step holds.
#[test]
fn the_dynamic_batching_term_is_the_micro_batch_not_the_optimizer_step() {
    let small_budget = |dynamic: &'static str| {
        with(
            &diamonds(),
            &[
                ("trainer.n_gpus_per_node", "2"),
                ("actor_rollout_ref.actor.use_dynamic_bsz", dynamic),
                ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "2048"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
            ],
        )
    };
    let e = verl_release(h100(false), &small_budget("True"), Some("0.4.1"));
    let slack = e.train_reserved_gib - e.train_allocated_gib * (1.0 + h100(false).frag());
    // 2048 tokens × 152,064 × 10 B of the loss is 2.9 GiB, the layers' activations less; the
    // gradients alone are 14.2 GiB.
    let grads = train_gib(&e, "grads fp32");
    assert!(grads > 14.0, "{grads}");
    assert!(slack > 2.9 && slack < 6.0, "{slack}: {e:?}");
}

/// `0.5.0.dev` is what verl's main printed across both changes the estimate keys on, so it is
/// sized as a release not stated, and the estimate says how to state it.
#[test]
fn verl_main_between_0_5_and_0_6_is_sized_as_not_stated() {
    let o = ov(&diamonds());
    let dev = verl_release(h100(false), &o, Some("0.5.0.dev"));
    let unstated = verl_release(h100(false), &o, None);
    let old = verl_release(h100(false), &o, Some("0.5.0"));
    assert_eq!(dev.train_peak_gib, unstated.train_peak_gib);
    assert_eq!(dev.kv_cache_gib, unstated.kv_cache_gib);
    assert_ne!(dev.kv_cache_gib, old.kv_cache_gib, "0.5.0 is eager");
    assert!(
        dev.notes
            .iter()
            .any(|n| n.contains("main between v0.5.0 and v0.6.0") && n.contains("\"0.6\"")),
        "{:?}",
        dev.notes
    );
}

/// The critic's update ends in the same AdamW step as the actor's: with a tiny micro-batch
/// its peak is the critic's params, grads, m, v and sqrt(v), 20 B a parameter over the GPUs.
#[test]
fn the_critics_update_ends_in_adamws_step_too() {
    let o = with(&diamonds(), LONE_CRITIC);
    let v = VerlConfig::from_overrides(&o);
    let arch = lookup(&v.model_path);
    let peaks = crate::estimate::trainers::verl::phase_peaks(&h100(false), &v, &arch);
    let (_, allocated, _) = peaks
        .iter()
        .find(|p| p.0 == "critic_update")
        .copied()
        .expect("a critic update");
    let shard = 4.0 * QWEN25_7B_CRITIC_PARAMS / 4.0 / crate::estimate::GIB;
    assert!(allocated >= 5.0 * shard, "{allocated} {shard}");
    assert_eq!(
        arch.params, 7_615_616_512.0,
        "the actor's model, with its LM head"
    );
}

/// A mixture of experts under vLLM, against the one public profile of one: verl-recipe's
/// `qat/README.md` (verl-project/verl-recipe at 48ea0a797f, "Experiment 3", BF16 column:
/// Qwen3-30B-A3B-Base on a B300, vLLM TP 1, `gpu_memory_utilization` 0.90,
/// `max_num_batched_tokens` 32768) reads "Weight | 56.88 GiB", "Peak Activation | 2.64 GiB",
/// "Non-torch Memory | 0.14 GiB". The weights are all 128 experts'; the fused-MoE caches are
/// most of the activation peak (the dense formula's 2 × 6144 MLP units per token would give
/// 0.75 GiB where the caches alone hold 1.38).
#[test]
fn vllm_profiles_a_mixture_of_experts_as_verl_recipe_measured_it() {
    use super::vllm::Vllm;
    let arch = lookup("Qwen/Qwen3-30B-A3B-Base");
    let o = ov(&[
        ("actor_rollout_ref.model.path", "Qwen/Qwen3-30B-A3B-Base"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "1"),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.9"),
        ("actor_rollout_ref.rollout.max_num_batched_tokens", "32768"),
        ("actor_rollout_ref.rollout.enforce_eager", "False"),
    ]);
    let v = Vllm::profile(&arch, &VerlConfig::from_overrides(&o), 267.7);
    assert!(
        (v.weights_gib / 56.88 - 1.0).abs() < 0.001,
        "{}",
        v.weights_gib
    );
    // The measured activation peak and non-torch memory (2.78 GiB) against the workspace,
    // which also holds CUDA graphs and the sampler: within 0.5 GiB.
    assert!((v.workspace_gib - 2.78).abs() < 0.5, "{}", v.workspace_gib);
    let caches = 32768.0 * 8.0 * (2048.0 + 768.0) * 2.0 / GIB;
    assert!(
        v.workspace_gib > caches + k::VLLM_WORKSPACE_BASE_GIB,
        "{v:?}"
    );
    // Split over tensor parallelism, every rank holds a quarter of every expert:
    // vllm-project/vllm#17469 (vLLM 0.8.5, Qwen/Qwen3-30B-A3B on 4 × A10, TP 4) logs
    // "Model loading took 14.2474 GiB" on each of its four workers.
    let tp4 = ov(&[
        ("actor_rollout_ref.model.path", "Qwen/Qwen3-30B-A3B"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "4"),
    ]);
    let v = Vllm::profile(&arch, &VerlConfig::from_overrides(&tp4), 22.07);
    assert!(
        (v.weights_gib / 14.2474 - 1.0).abs() < 0.005,
        "{}",
        v.weights_gib
    );
}

/// A mixture of experts' layer keeps what Hugging Face's eager expert loop saves for the
/// backward, as `scripts/moe-saved-bytes.py` counted it with autograd's saved-tensor hooks
/// (transformers 4.57.1, torch 2.8, CPU, bf16, h 256, I 128, E 16, k 4, shared expert 512;
/// its output is `calibration/measured/moe-saved-bytes-cpu.txt`): the MoE block's
/// `2h + 6kh + 8kI + 30k + 4E + 4` bytes per token with `norm_topk_prob` (Qwen3-MoE, Mixtral),
/// and Qwen2-MoE's shared expert's `8·Is + 2h` more. The block's input is the `2h` the dense
/// count already holds. Its no-grad forward runs one expert at a time beside the int64
/// expert mask, a fraction of what the training forward keeps.
#[test]
fn a_mixture_of_experts_layer_keeps_what_the_eager_expert_loop_saves() {
    use super::activations::{layer_bytes, moe_nograd_block_bytes, nograd_layer_bytes};
    let measured = include_str!("../../calibration/measured/moe-saved-bytes-cpu.txt");
    let saved = |block: &str| -> f64 {
        let line = measured
            .lines()
            .find(|l| l.starts_with(&format!("== {block}")))
            .unwrap_or_else(|| panic!("{block} in the measured file"));
        let n = line.split("bytes/token = ").nth(1).unwrap();
        n.split_whitespace().next().unwrap().parse().unwrap()
    };
    let (per_copy_unit, per_copy, per_expert) = k::MOE_SAVED_BYTES_BF16;
    let per_unit = k::ACT_LAYER_BYTES_BF16.2;
    let block = |h: f64, i: f64, e: f64, k: f64, shared: f64| {
        let shared = if shared > 0.0 {
            per_unit * shared + 2.0 * h
        } else {
            0.0
        };
        2.0 * h
            + k * (per_copy_unit * h + per_copy)
            + per_unit * k * i
            + per_expert * e
            + 4.0
            + shared
    };
    for name in ["Qwen3MoeSparseMoeBlock", "MixtralSparseMoeBlock"] {
        assert_eq!(saved(name), block(256.0, 128.0, 16.0, 4.0, 0.0), "{name}");
    }
    // Qwen2-MoE does not renormalise its top-k (20 bytes fewer than counted).
    let qwen2 = saved("Qwen2MoeSparseMoeBlock");
    assert!(
        (block(256.0, 128.0, 16.0, 4.0, 512.0) / qwen2 - 1.0).abs() < 0.005,
        "{qwen2}"
    );
    // Qwen3-30B-A3B: the attention's and norms' count (20h + 4·kv) plus the block less its
    // input.
    let moe = lookup("Qwen/Qwen3-30B-A3B-Base");
    let attention = 20.0 * 2048.0 + 4.0 * 4.0 * 128.0;
    let qwen3 = block(2048.0, 768.0, 128.0, 8.0, 0.0) - 2.0 * 2048.0;
    assert!((layer_bytes(&moe) - (attention + qwen3)).abs() <= 4.0);
    let nograd = nograd_layer_bytes(&moe);
    assert!(nograd < layer_bytes(&moe) / 5.0, "{nograd}");
    // The no-grad peak of the block the script measured at its small shape, against the
    // block's count (its input left out; Qwen2-MoE's shared expert runs after the loop, on
    // every token, counted as a dense MLP of its width).
    let peak = |block: &str| -> f64 {
        let at = measured.find(&format!("== {block}")).unwrap();
        let line = measured[at..]
            .lines()
            .find(|l| l.contains("no_grad live peak"))
            .unwrap();
        line.rsplit("= ").next().unwrap().trim().parse().unwrap()
    };
    let small = |shared: u64| {
        let a = crate::arch::Architecture {
            hidden_size: 256,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: None,
            head_dim: None,
            intermediate_size: 128,
            vocab_size: 1000,
            tie_word_embeddings: false,
            model_type: None,
            attention_bias: None,
            moe: crate::arch::MoeKeys {
                num_experts: Some(16),
                num_experts_per_tok: Some(4),
                moe_intermediate_size: Some(128),
                shared_expert_intermediate_size: Some(shared),
                ..Default::default()
            },
        };
        let arch = crate::shape::Arch::from_architecture("small", &a, true);
        moe_nograd_block_bytes(&arch) + k::NOGRAD_LAYER_BYTES.1 * shared as f64
    };
    for (block, shared) in [
        ("Qwen3MoeSparseMoeBlock", 0),
        ("MixtralSparseMoeBlock", 0),
        ("Qwen2MoeSparseMoeBlock", 512),
    ] {
        let (counted, measured) = (small(shared), peak(block));
        assert!(
            (counted / measured - 1.0).abs() < 0.2,
            "{block}: {counted} of {measured}"
        );
    }
}

/// LoRA on a mixture of experts: PEFT adapts every expert's projections (they are
/// `nn.Linear`s in transformers 4.x), vLLM's adapter slot only the attention's (its fused-MoE
/// experts take none in the releases verl runs), so the rollout does not carry 128 experts'
/// adapters.
#[test]
fn lora_on_a_mixture_of_experts_trains_every_expert_and_vllm_slots_none() {
    use super::lora::Lora;
    let moe = lookup("Qwen/Qwen3-30B-A3B-Base");
    let all = Lora::new(32, Some("all-linear"), None);
    let attention_only = Lora::new(32, Some("[q_proj,k_proj,v_proj,o_proj]"), None);
    assert!(all.params(&moe) > 20.0 * attention_only.params(&moe));
    // The slot is every projection vLLM wraps whatever the adapter targets: the attention's
    // four (q 2048 + 4096, k and v 2048 + 512, o 4096 + 2048 units) at rank 32 in 48 layers.
    let attention = 2.0 * (2048.0 + 4096.0) + 2.0 * (2048.0 + 512.0);
    assert_eq!(all.vllm_slot_params(&moe), 32.0 * attention * 48.0);
}

/// vLLM's expert parallelism is not modelled, and the estimate says so.
#[test]
fn expert_parallelism_in_the_rollout_is_named_as_not_modelled() {
    let o = with(
        &diamonds(),
        &[
            ("actor_rollout_ref.model.path", "Qwen/Qwen3-30B-A3B-Base"),
            ("actor_rollout_ref.rollout.tensor_model_parallel_size", "4"),
            ("actor_rollout_ref.rollout.expert_parallel_size", "4"),
        ],
    );
    let e = verl(h100(false), &o);
    assert!(
        e.notes.iter().any(|n| n.contains("expert_parallel_size 4")),
        "{:?}",
        e.notes
    );
    let without = verl(h100(false), &with(&diamonds(), &[]));
    assert!(!without.notes.iter().any(|n| n.contains("expert_parallel")));
}
