//! The memory numbers and phase read from real-format fixture logs (`tests/fixtures/`): what
//! a planner gets to work with after each kind of memory failure.

use std::path::Path;

use orch_classify::{FailureClass, MemoryFacts, Stage, Step, classify_path};

fn facts(name: &str) -> (FailureClass, MemoryFacts) {
    facts_in("tests/fixtures", name)
}

/// The class and numbers of a log under `dir` (relative to the crate).
fn facts_in(dir: &str, name: &str) -> (FailureClass, MemoryFacts) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(name);
    let v = classify_path(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (v.class, v.memory.unwrap_or_default())
}

fn gib(v: Option<f64>) -> f64 {
    (v.expect("a figure") * 100.0).round() / 100.0
}

#[test]
fn verl_actor_update_oom_in_a_ray_worker() {
    let (class, f) = facts("verl-gpu-oom-ray-wrapped.log");
    assert_eq!(class, FailureClass::GpuOom);
    assert_eq!(gib(f.tried_to_allocate_gib), 17.66);
    assert_eq!(gib(f.capacity_gib), 79.14);
    assert_eq!(gib(f.free_gib), 4.97);
    assert_eq!(gib(f.allocated_gib), 70.77);
    assert_eq!(gib(f.reserved_unallocated_gib), 2.12);
    // torch listed the worker itself as "Process 231424": the `(WorkerDict pid=231424)`
    // prefix says it is this process, not another program on the card.
    assert_eq!(gib(f.process_in_use_gib), 74.16);
    assert!(f.other_processes.is_empty());
    assert_eq!(f.device, Some(3));
    assert_eq!(f.stage, Some(Stage::ActorUpdate));
    assert_eq!(f.step, Some(Step::Backward));
}

/// A real log of orch's own (examples/torchrun/train.py on an H100, torch 2.11): the
/// figures the planner calibrated on, and the loss's upcast of the logits as the step.
#[test]
fn torchrun_oom_on_a_real_h100() {
    let (class, f) = facts("torchrun-h100-oom-orch-driven.log");
    assert_eq!(class, FailureClass::GpuOom);
    assert_eq!(gib(f.tried_to_allocate_gib), 18.55);
    assert_eq!(gib(f.capacity_gib), 79.18);
    assert_eq!(gib(f.free_gib), 17.38);
    assert_eq!(gib(f.process_in_use_gib), 61.79);
    assert_eq!(gib(f.allocated_gib), 60.97);
    assert_eq!(gib(f.reserved_unallocated_gib), 0.15);
    assert!(f.other_processes.is_empty());
}

#[test]
fn vllm_start_up_check_names_free_and_desired_memory() {
    let (class, f) = facts("vllm-startup-free-memory.log");
    assert_eq!(class, FailureClass::GpuOom);
    assert_eq!(gib(f.free_gib), 19.77);
    assert_eq!(gib(f.capacity_gib), 22.05);
    assert_eq!(f.desired_utilization, Some(0.9));
    assert_eq!(gib(f.desired_gib), 19.84);
}

#[test]
fn vllm_kv_cache_shortfalls() {
    let (class, f) = facts("vllm-v1-kv-cache-max-seq-len.log");
    assert_eq!(class, FailureClass::KvCache);
    assert_eq!(f.max_seq_len, Some(262_144));
    assert_eq!(gib(f.kv_cache_needed_gib), 24.0);
    assert_eq!(gib(f.kv_cache_available_gib), 8.04);
    assert_eq!(f.estimated_max_model_len, Some(87_840));
    assert_eq!(f.stage, Some(Stage::RolloutStartup));

    let (class, f) = facts("vllm-v0-max-seq-len-llamafactory.log");
    assert_eq!(class, FailureClass::KvCache);
    assert_eq!((f.max_seq_len, f.kv_cache_tokens), (Some(4096), Some(3664)));
}

#[test]
fn legacy_and_rocm_torch_messages() {
    let (_, f) = facts("tqdm-carriage-return.log");
    assert_eq!(gib(f.tried_to_allocate_gib), 2.0);
    assert_eq!(gib(f.reserved_unallocated_gib), 1.81);
    let (class, f) = facts("hip-oom-rocm.log");
    assert_eq!(class, FailureClass::GpuOom);
    // A request larger than the whole card: no configuration of the allocator helps.
    assert!(f.tried_to_allocate_gib > f.capacity_gib);
}

#[test]
fn host_memory_from_the_kernel_and_a_forward_pass_oom() {
    let (class, f) = facts("kernel-oom-killer.log");
    assert_eq!(class, FailureClass::HostOom);
    assert!(f.host_used_gib.is_some_and(|g| g > 100.0));
    let (_, f) = facts("oom-rank3-then-nccl-watchdog.log");
    assert_eq!(f.step, Some(Step::Forward));
    assert_eq!(gib(f.process_in_use_gib), 78.12);
}

#[test]
fn failures_that_are_not_about_memory_carry_no_numbers() {
    for name in [
        "import-error.log",
        "slurm-timeout-old-format.log",
        "nccl-watchdog-timeout.log",
        "clean-success.log",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        assert_eq!(classify_path(&path).unwrap().memory, None, "{name}");
    }
}

/// The numbers read from real logs of the corpus (`tests/corpus/`, sources in its
/// `sources.tsv`), in the decorations the frameworks print them with.
fn corpus_facts(name: &str) -> (FailureClass, MemoryFacts) {
    facts_in("tests/corpus", name)
}

#[test]
fn real_logs_carry_their_numbers() {
    // pytest's FAILED summary: request, capacity, free, and nine processes (eight others).
    let (class, f) = corpus_facts("pytest-failed-summary-torch-oom.log");
    assert_eq!(class, FailureClass::GpuOom);
    assert_eq!(gib(f.tried_to_allocate_gib), 0.02);
    assert_eq!(gib(f.capacity_gib), 23.69);
    assert_eq!(gib(f.free_gib), 0.02);
    assert_eq!(f.other_processes.len(), 8, "{f:?}");

    // The old format on a 6 GiB card, no exception name at all.
    let (class, f) = corpus_facts("torch-bare-oom-message-6gib.log");
    assert_eq!(class, FailureClass::GpuOom);
    assert_eq!(gib(f.tried_to_allocate_gib), 2.26);
    assert_eq!(gib(f.capacity_gib), 6.0);
    assert_eq!(gib(f.free_gib), 3.03);

    // ComfyUI's banner before a HIP OOM.
    let (_, f) = corpus_facts("comfy-hip-oom-exception-during-processing.log");
    assert_eq!(gib(f.tried_to_allocate_gib), 35.31);
    assert_eq!(gib(f.capacity_gib), 19.94);

    // vLLM's V0 KV shortfall as the engine logged it, without an exception name.
    let (class, f) = corpus_facts("vllm-v0-max-seq-len-no-prefix.log");
    assert_eq!(class, FailureClass::KvCache);
    assert_eq!(
        (f.max_seq_len, f.kv_cache_tokens),
        (Some(29_000), Some(23_648))
    );

    // vLLM V1 behind an EngineCore prefix: need, available, and the length that fits.
    let (class, f) = corpus_facts("vllm-v1-enginecore-kv-cache-pp.log");
    assert_eq!(class, FailureClass::KvCache);
    assert_eq!(gib(f.kv_cache_needed_gib), 24.0);
    assert_eq!(gib(f.kv_cache_available_gib), 3.18);
    assert_eq!(f.estimated_max_model_len, Some(34_736));

    // vLLM's start-up check behind CI timestamps and an ERROR header.
    let (class, f) = corpus_facts("vllm-startup-free-memory-caret-ansi.log");
    assert_eq!(class, FailureClass::GpuOom);
    assert_eq!(gib(f.free_gib), 1.53);
    assert_eq!(gib(f.capacity_gib), 22.05);
    assert_eq!(f.desired_utilization, Some(0.9));

    // A vLLM worker's torch OOM naming the process that holds the card.
    let (_, f) = corpus_facts("vllm-worker-torch-oom-error-header.log");
    assert_eq!(gib(f.tried_to_allocate_gib), 1.74);
    assert_eq!(f.device, Some(1));
}

/// The numbers the second holdout's memory failures state (`tests/corpus/holdout2/`).
#[test]
fn second_holdout_logs_carry_their_numbers() {
    let h = |name: &str| facts_in("tests/corpus/holdout2", name);
    // A wrapper naming its cause's repr: torch's numbers inside the quotes.
    let (class, f) = h("vllm-mq-engine-dead-oom-repr.log");
    assert_eq!(class, FailureClass::GpuOom);
    assert_eq!(gib(f.tried_to_allocate_gib), 0.13);
    assert_eq!(gib(f.capacity_gib), 79.33);
    assert_eq!(gib(f.free_gib), 0.02);
    assert_eq!(gib(f.allocated_gib), 69.59);
    // A message cut after the capacity: what it states.
    let (_, f) = h("trl-grpo-rank0-adamw-oom-cut.log");
    assert_eq!(gib(f.tried_to_allocate_gib), 0.13);
    assert_eq!(gib(f.capacity_gib), 94.99);
    assert_eq!(gib(f.free_gib), 0.09);
    // The raylet's kill line before Ray 2.2: the host's use and size.
    let (class, f) = h("ray-raylet-system-memory-low-killing.log");
    assert_eq!(class, FailureClass::HostOom);
    assert_eq!(gib(f.host_used_gib), 22.01);
    assert_eq!(gib(f.host_total_gib), 30.99);
    // torch's CPU allocator: what the failed request asked for.
    let (class, f) = h("deeplog-cpu-allocator-errno12-bare.log");
    assert_eq!(class, FailureClass::HostOom);
    assert_eq!(gib(f.host_tried_to_allocate_gib), 0.26);
    assert_eq!(f.host_requested_gib, None);
}

/// `classify_path` reads the file: one that another process truncates under it ends the scan
/// early; it does not kill the process with SIGBUS (as a memory map of it would).
#[test]
fn a_log_truncated_while_it_is_classified_is_survived() {
    use std::io::Write as _;
    let dir = tempfile_dir();
    let path = dir.join("stderr.log");
    let line = b"step 1: loss 0.25 | lr 1e-5 | throughput 1234 tok/s\n";
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for _ in 0..(16 << 20) / line.len() {
            f.write_all(line).unwrap();
        }
        f.write_all(b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
            .unwrap();
    }
    for _ in 0..3 {
        let p = path.clone();
        let truncate = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(5));
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(4096)
                .unwrap();
        });
        let v = orch_classify::classify_path(&path).expect("read");
        truncate.join().unwrap();
        // Whatever it saw before the cut: never a crash, and never a class the bytes lack.
        assert!(
            matches!(
                v.class,
                orch_classify::FailureClass::None | orch_classify::FailureClass::GpuOom
            ),
            "{v:?}"
        );
        std::fs::write(&path, b"").unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        for _ in 0..(16 << 20) / line.len() {
            f.write_all(line).unwrap();
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("orch-classify-truncate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The OOM's numbers as a Ray worker prints them, then the driver's traceback down to the same
/// error (verl's shape: `(WorkerDict pid=…) torch.OutOfMemoryError: …` first): the numbers
/// take the phase that traceback names. An OOM line read before an earlier traceback ended
/// does not, nor does a traceback that ends in another error.
#[test]
fn a_worker_oom_line_takes_the_phase_of_the_traceback_after_it() {
    let oom = "(WorkerDict pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.";
    let traceback = |exc: &str| {
        format!(
            "Traceback (most recent call last):\n  File \"/verl/trainer/ppo/ray_trainer.py\", line 1231, in _compute_old_log_prob\n    old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)\n  File \"/verl/workers/fsdp_workers.py\", line 1012, in compute_log_prob\n    outputs = self.actor.compute_log_prob(data=data)\n{exc}\n"
        )
    };
    let stage = |log: &str| {
        orch_classify::classify_bytes(log.as_bytes())
            .memory
            .and_then(|m| m.stage)
    };
    let torch_exc = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.";
    assert_eq!(
        stage(&format!("{oom}\n{}", traceback(torch_exc))),
        Some(Stage::LogProb)
    );
    // An unrelated traceback ended between the OOM line and this one.
    let other = "Traceback (most recent call last):\n  File \"/x.py\", line 1, in main\n    f()\nValueError: no\n";
    assert_eq!(
        stage(&format!("{oom}\n{other}{}", traceback(torch_exc))),
        None
    );
    // A traceback that ends in another error says nothing of the OOM's phase.
    let v = orch_classify::classify_bytes(
        format!("{oom}\n{}", traceback("RuntimeError: NCCL error")).as_bytes(),
    );
    assert_eq!(v.class, FailureClass::GpuOom, "{v:?}");
    assert_eq!(v.memory.and_then(|m| m.stage), None);
}
