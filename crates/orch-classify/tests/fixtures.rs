//! Tests for `orch_classify`: every fixture log's class, evidence line and evidence text;
//! chunking invariance; line numbering across chunk boundaries; over-long lines;
//! precedence and trap behaviour on small inline streams.

use std::path::{Path, PathBuf};

use orch_classify::{
    FailureClass, LINE_CAP, Scanner, Verdict, classify_bytes, classify_path, grep_patterns,
};

use FailureClass::*;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// (fixture, class, evidence line, substring the evidence text must contain).
/// `None` class => no evidence (line 0, substring "").
const EXPECTED: &[(&str, FailureClass, u64, &str)] = &[
    // ---- GPU OOM
    (
        "verl-gpu-oom-ray-wrapped.log",
        GpuOom,
        80,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.66 GiB",
    ),
    (
        "oom-rank3-then-nccl-watchdog.log",
        GpuOom,
        17,
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory",
    ),
    (
        "torch-legacy-runtimeerror-oom.log",
        GpuOom,
        10,
        "RuntimeError: CUDA out of memory. Tried to allocate 1024.00 KiB",
    ),
    ("hip-oom-rocm.log", GpuOom, 6, "HIP out of memory"),
    (
        "nccl-cuda-failure-oom.log",
        GpuOom,
        4,
        "NCCL WARN Cuda failure 'out of memory'",
    ),
    (
        "non-utf8-bytes.log",
        GpuOom,
        9,
        "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)` on gpu-n\u{fffd}ron-03",
    ),
    (
        "tqdm-carriage-return.log",
        GpuOom,
        8,
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 39.59 GiB",
    ),
    (
        "vllm-wake-up-cumem-oom.log",
        GpuOom,
        36,
        "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
    ),
    (
        "vllm-sampler-warmup-oom.log",
        GpuOom,
        8,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB",
    ),
    // Deviation from the reference: these two are gpu_oom, not kv_cache.
    (
        "vllm-startup-free-memory.log",
        GpuOom,
        9,
        "on startup is less than desired GPU memory utilization (0.9, 19.84 GiB)",
    ),
    (
        "vllm-memory-profiling-assert.log",
        GpuOom,
        8,
        "AssertionError: Error in memory profiling",
    ),
    // ---- KV cache
    (
        "vllm-v1-kv-cache-max-seq-len.log",
        KvCache,
        20,
        "24.00 GiB KV cache is needed, which is larger than the available KV cache memory",
    ),
    (
        "vllm-v0-no-cache-blocks.log",
        KvCache,
        7,
        "No available memory for the cache blocks",
    ),
    (
        "vllm-v0-max-seq-len-llamafactory.log",
        KvCache,
        15,
        "larger than the maximum number of tokens that can be stored in KV cache (3664)",
    ),
    (
        "sglang-not-enough-memory.log",
        KvCache,
        12,
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),
    (
        "sglang-decode-out-of-memory.log",
        KvCache,
        5,
        "Decode out of memory. Try to lower your batch size.",
    ),
    // ---- host OOM
    (
        "slurm-cgroup-oom-batch-step.log",
        HostOom,
        7,
        "Detected 1 oom_kill event in StepId=18835145.batch",
    ),
    (
        "slurm-cgroup-oom-old-wording.log",
        HostOom,
        5,
        "Detected 1 oom-kill event(s) in step 3495064.0 cgroup",
    ),
    (
        "slurm-jobacct-exceeded-limit.log",
        HostOom,
        4,
        "exceeded memory limit (52917772 > 20971520), being killed",
    ),
    (
        "ray-host-oom.log",
        HostOom,
        35,
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    ),
    (
        "kernel-oom-killer.log",
        HostOom,
        3,
        "Memory cgroup out of memory: Killed process 771342 (python3)",
    ),
    (
        "torchrun-sigkill-weak.log",
        HostOom,
        7,
        "failed (exitcode: -9) local_rank: 0 (pid: 14750)",
    ),
    // ---- Slurm banners
    (
        "slurm-timeout-then-nccl.log",
        Timeout,
        40,
        "*** JOB 494583 ON gpu-a07 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
    ),
    (
        "slurm-timeout-old-format.log",
        Timeout,
        9,
        "*** JOB 830329 CANCELLED AT 2018-08-06T17:21:44 DUE TO TIME LIMIT on n447 ***",
    ),
    ("slurm-preemption.log", Preempted, 35, "DUE TO PREEMPTION"),
    ("slurm-requeue.log", Preempted, 7, "DUE TO JOB REQUEUE"),
    (
        "slurm-node-failure.log",
        NodeFail,
        21,
        "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS",
    ),
    // ---- NCCL
    (
        "nccl-watchdog-timeout.log",
        NcclTimeout,
        27,
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1",
    ),
    // ---- error
    (
        "import-error.log",
        Error,
        9,
        "ModuleNotFoundError: No module named 'vllm'",
    ),
    // `python3 -m` of a package that is not installed: the error is in parentheses.
    (
        "python-m-missing-module.log",
        Error,
        2,
        "(ModuleNotFoundError: No module named 'verl')",
    ),
    (
        "areal-sglang-import-error.log",
        Error,
        8,
        "ImportError: cannot import name 'sgl_per_token_group_quant_fp8'",
    ),
    (
        "illegal-memory-access.log",
        Error,
        35,
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ),
    (
        "verl-config-divisible-assert.log",
        Error,
        17,
        "must be divisible by minimal possible batch size (48)",
    ),
    (
        "sglang-capture-cuda-graph-failed.log",
        Error,
        10,
        "Exception: Capture cuda graph failed: Ninja build failed.",
    ),
    (
        "slurm-scancel-user.log",
        Error,
        8,
        "*** JOB 1479012 ON sh-2-3 CANCELLED AT 2015-02-04T06:33:25 ***",
    ),
    (
        "ray-actor-died-generic.log",
        Error,
        56,
        "ray.exceptions.ActorDiedError: The actor died unexpectedly",
    ),
    (
        "generic-traceback-file-not-found.log",
        Error,
        10,
        "FileNotFoundError: Unable to find '/storage/datasets/gsm8k/train.parquet'",
    ),
    // ---- traps and clean runs
    ("clean-success.log", None, 0, ""),
    ("set-x-echo-trap.log", None, 0, ""),
    ("verl-config-dump-trap.log", None, 0, ""),
    ("vllm-recompute-preemption-warning.log", None, 0, ""),
    ("sglang-recovered-warnings.log", None, 0, ""),
    ("slurm-exceeded-step-memory-at-some-point.log", None, 0, ""),
    ("bash-killed-only.log", None, 0, ""),
];

fn check(
    name: &str,
    v: &Verdict,
    class: FailureClass,
    line: u64,
    needle: &str,
) -> Result<(), String> {
    if v.class != class {
        return Err(format!(
            "{name}: class {:?}, want {class:?} (evidence {:?})",
            v.class, v.evidence
        ));
    }
    match (&v.evidence, class) {
        (Option::None, FailureClass::None) => Ok(()),
        (Some(ev), FailureClass::None) => Err(format!("{name}: class none but evidence {ev:?}")),
        (Option::None, _) => Err(format!("{name}: no evidence")),
        (Some(ev), _) => {
            if ev.line != line {
                return Err(format!(
                    "{name}: evidence line {}, want {line}: {:?}",
                    ev.line, ev.text
                ));
            }
            if !ev.text.contains(needle) {
                return Err(format!("{name}: evidence {:?} lacks {needle:?}", ev.text));
            }
            if ev.text != ev.text.trim() || ev.text.contains('\x1b') || ev.text.contains('\r') {
                return Err(format!("{name}: evidence not cleaned: {:?}", ev.text));
            }
            if ev.text.chars().count() > 402 {
                return Err(format!(
                    "{name}: evidence too long ({} chars)",
                    ev.text.chars().count()
                ));
            }
            Ok(())
        }
    }
}

fn read_fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_fixture_classifies_as_expected() {
    let mut failures = Vec::new();
    for &(name, class, line, needle) in EXPECTED {
        let v = classify_path(&fixtures_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Err(e) = check(name, &v, class, line, needle) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixture(s) misclassified:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_fixture_file_has_an_expectation() {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !EXPECTED.iter().any(|(e, ..)| e == n))
        .collect();
    assert!(
        missing.is_empty(),
        "fixtures without expectations: {missing:?}"
    );
    assert!(names.len() >= 25, "only {} fixtures", names.len());
}

#[test]
fn tqdm_evidence_is_only_the_matching_segment() {
    let v = classify_path(&fixtures_dir().join("tqdm-carriage-return.log")).unwrap();
    let text = v.evidence.unwrap().text;
    assert!(
        text.starts_with("RuntimeError: CUDA out of memory"),
        "{text:?}"
    );
    assert!(
        !text.contains("Epoch 3"),
        "progress-bar segments leaked into evidence: {text:?}"
    );
}

/// Tiny deterministic PRNG (xorshift64*) so chunking tests are reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn feed_in_chunks(bytes: &[u8], mut size: impl FnMut() -> usize) -> Verdict {
    let mut s = Scanner::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = size().clamp(1, rest.len());
        s.feed(&rest[..n]);
        rest = &rest[n..];
    }
    s.verdict()
}

#[test]
fn chunking_never_changes_the_verdict() {
    for &(name, class, line, needle) in EXPECTED {
        let bytes = read_fixture(name);
        let whole = classify_bytes(&bytes);
        check(name, &whole, class, line, needle).unwrap();
        let one = feed_in_chunks(&bytes, || 1);
        assert_eq!(one, whole, "{name}: 1-byte chunks");
        for seed in [1u64, 7, 42, 1234, 99_991] {
            let mut rng = Rng(seed);
            let v = feed_in_chunks(&bytes, || (rng.next() % 97) as usize + 1);
            assert_eq!(v, whole, "{name}: random small chunks, seed {seed}");
            let mut rng = Rng(seed);
            let v = feed_in_chunks(&bytes, || (rng.next() % 4096) as usize + 1);
            assert_eq!(v, whole, "{name}: random chunks up to 4 KiB, seed {seed}");
        }
    }
}

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.";

fn noise_lines(n: usize) -> String {
    (1..=n)
        .map(|i| format!("(TaskRunner pid=7) step:{i} - actor/pg_loss:0.0{i}\n"))
        .collect()
}

#[test]
fn line_numbers_across_chunk_boundaries() {
    let stream = format!("{}{OOM}\n{}", noise_lines(41), noise_lines(5));
    let bytes = stream.as_bytes();
    let oom_at = stream.find(OOM).unwrap();
    // Split points around and inside the evidence line and its neighbours' newlines.
    let splits = [
        oom_at - 1,                            // just before the preceding '\n'
        oom_at,                                // right after it: chunk 2 starts the line
        oom_at + 5,                            // inside "torch"
        oom_at + OOM.find("out").unwrap() + 1, // inside the needle
        oom_at + OOM.len(),                    // just before the line's own '\n'
        oom_at + OOM.len() + 1,                // right after it
    ];
    for split in splits {
        let mut s = Scanner::new();
        s.feed(&bytes[..split]);
        s.feed(&bytes[split..]);
        let v = s.verdict();
        assert_eq!(v.class, GpuOom, "split at {split}");
        assert_eq!(v.evidence.as_ref().unwrap().line, 42, "split at {split}");
        assert_eq!(v.evidence.unwrap().text, OOM, "split at {split}");
    }
    // Three-way split with an empty chunk in the middle.
    let mut s = Scanner::new();
    s.feed(&bytes[..oom_at + 3]);
    s.feed(b"");
    s.feed(&bytes[oom_at + 3..]);
    assert_eq!(s.verdict().evidence.unwrap().line, 42);
}

#[test]
fn crlf_and_bare_cr_do_not_count_as_lines() {
    let stream = format!("a\r\nb\r\nprogress 1\rprogress 2\r\n{OOM}\r\n");
    let v = classify_bytes(stream.as_bytes());
    assert_eq!(v.evidence.as_ref().unwrap().line, 4);
    assert_eq!(v.evidence.unwrap().text, OOM);
}

#[test]
fn trailing_partial_line_counts_and_verdict_is_repeatable() {
    let mut s = Scanner::new();
    s.feed(noise_lines(3).as_bytes());
    s.feed(b"RuntimeError: CUDA error: out of mem");
    assert_eq!(s.verdict().class, None, "needle not complete yet");
    s.feed(b"ory");
    let v = s.verdict();
    assert_eq!(v.class, GpuOom);
    assert_eq!(v.evidence.as_ref().unwrap().line, 4);
    assert_eq!(
        s.verdict(),
        v,
        "verdict() must not consume the partial line"
    );
    s.feed(b"\nnext line\n");
    assert_eq!(
        s.verdict(),
        v,
        "completing the line must not change the verdict"
    );
}

#[test]
fn line_longer_than_the_cap_still_classifies() {
    // A tqdm line that never ends: 3x the cap of `\r` segments, the OOM in the middle
    // (straddling the first cap boundary), more segments after, then normal lines.
    let seg = "Training:  45%|████▌     | 450/1000 [10:05<12:20,  1.35s/it]\r";
    let needle_at = OOM.find("CUDA out of memory").unwrap();
    // Put the OOM segment so that its needle straddles byte LINE_CAP of the line.
    let target = LINE_CAP - needle_at - 9;
    let mut long = String::new();
    while long.len() + seg.len() < target {
        long.push_str(seg);
    }
    long.push_str(&"x".repeat(target - long.len() - 1));
    long.push('\r');
    assert_eq!(long.len(), target);
    long.push_str(OOM);
    long.push('\r');
    while long.len() < 3 * LINE_CAP {
        long.push_str(seg);
    }
    let stream = format!("{}{long}\n{}", noise_lines(2), noise_lines(3));
    let bytes = stream.as_bytes();

    let whole = classify_bytes(bytes);
    assert_eq!(whole.class, GpuOom);
    let ev = whole.evidence.clone().unwrap();
    assert_eq!(ev.line, 3);
    assert_eq!(ev.text, OOM, "evidence is the matching \\r-segment only");

    for size in [1usize, 3, 1000, 4096, LINE_CAP - 1, LINE_CAP + 1] {
        assert_eq!(feed_in_chunks(bytes, || size), whole, "chunk size {size}");
    }

    // The line after the long one keeps counting correctly.
    let after = format!("{}{long}\n{OOM}\n", noise_lines(2)).replacen(OOM, "no oom here", 1);
    let v = feed_in_chunks(after.as_bytes(), || 777);
    assert_eq!(v.class, GpuOom);
    assert_eq!(v.evidence.unwrap().line, 4);
}

#[test]
fn needle_split_between_a_partial_line_and_a_big_chunk_of_the_same_line() {
    // Chunk 1 leaves an unterminated line ending in "...CUDA out"; chunk 2 continues that
    // line with " of memory" and far more than the cap before any newline.
    let head = format!(
        "{}{}RuntimeError: CUDA out",
        noise_lines(1),
        "y".repeat(LINE_CAP - 100)
    );
    let tail = format!(" of memory {}\nnext\n", "z".repeat(2 * LINE_CAP));
    let mut s = Scanner::new();
    s.feed(head.as_bytes());
    s.feed(tail.as_bytes());
    let v = s.verdict();
    assert_eq!(v.class, GpuOom);
    let ev = v.evidence.unwrap();
    assert_eq!(ev.line, 2);
    assert!(
        ev.text.contains("RuntimeError: CUDA out of memory"),
        "{:?}",
        ev.text
    );
}

#[test]
fn long_line_without_carriage_returns_gets_a_windowed_evidence() {
    let filler = "x".repeat(3 * LINE_CAP);
    let stream = format!("{filler} RuntimeError: CUDA out of memory {filler}\n");
    let v = feed_in_chunks(stream.as_bytes(), || 8191);
    assert_eq!(v.class, GpuOom);
    let ev = v.evidence.unwrap();
    assert_eq!(ev.line, 1);
    assert!(
        ev.text.contains("RuntimeError: CUDA out of memory"),
        "{:?}",
        ev.text
    );
    assert!(
        ev.text.chars().count() <= 402,
        "{} chars",
        ev.text.chars().count()
    );
}

fn class_of(s: &str) -> FailureClass {
    classify_bytes(s.as_bytes()).class
}

fn line_of(s: &str) -> u64 {
    classify_bytes(s.as_bytes())
        .evidence
        .expect("evidence")
        .line
}

const TIMEOUT: &str =
    "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***";
const PREEMPT: &str =
    "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO PREEMPTION ***";
const NODEFAIL: &str = "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***";
const KV: &str = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.";
const HOST: &str = "slurmstepd: error: Detected 1 oom_kill event in StepId=1.0. Some of the step tasks have been OOM Killed.";
const SIGKILL: &str = "  traceback : Signal 9 (SIGKILL) received by PID 14750";
const NCCL: &str = "[rank1]:[E314 14:33:45.1 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600009 milliseconds before timing out.";
const IMPORT: &str = "ModuleNotFoundError: No module named 'vllm'";
const ACTOR: &str =
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.";

fn lines(ls: &[&str]) -> String {
    ls.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn precedence_between_classes() {
    // Each pair: the higher-precedence line comes LAST, so "earliest wins" would fail.
    let ladder = [
        TIMEOUT, PREEMPT, NODEFAIL, KV, HOST, OOM, SIGKILL, NCCL, IMPORT, ACTOR,
    ];
    let classes = [
        Timeout,
        Preempted,
        NodeFail,
        KvCache,
        HostOom,
        GpuOom,
        HostOom,
        NcclTimeout,
        Error,
        Error,
    ];
    for hi in 0..ladder.len() {
        for lo in hi + 1..ladder.len() {
            let s = lines(&[ladder[lo], ladder[hi]]);
            let v = classify_bytes(s.as_bytes());
            assert_eq!(
                v.class, classes[hi],
                "{:?} should beat {:?}",
                ladder[hi], ladder[lo]
            );
            assert_eq!(
                v.evidence.unwrap().line,
                2,
                "{:?} vs {:?}",
                ladder[hi],
                ladder[lo]
            );
        }
    }
}

#[test]
fn earliest_line_of_the_winning_slot_is_the_evidence() {
    let s = lines(&[
        "noise",
        OOM,
        "noise",
        "RuntimeError: CUDA error: out of memory",
        OOM,
    ]);
    let v = classify_bytes(s.as_bytes());
    assert_eq!(v.class, GpuOom);
    assert_eq!(v.evidence.unwrap().line, 2);
    // The NCCL noise before the OOM does not win either.
    assert_eq!(line_of(&lines(&[NCCL, NCCL, OOM])), 3);
}

#[test]
fn weak_sigkill_is_host_oom_only_without_device_oom() {
    assert_eq!(class_of(&lines(&[SIGKILL])), HostOom);
    assert_eq!(
        class_of(&lines(&["  exitcode  : -9 (pid: 14750)"])),
        HostOom
    );
    assert_eq!(
        class_of(&lines(&[
            "srun: error: n1: task 0: Exited with exit code 137"
        ])),
        HostOom
    );
    assert_eq!(class_of(&lines(&["  exitcode  : -6 (pid: 14750)"])), None);
    assert_eq!(class_of(&lines(&["  exitcode  : -91 (pid: 14750)"])), None);
    assert_eq!(class_of(&lines(&[SIGKILL, OOM])), GpuOom);
    // A confirmed host OOM line is preferred as evidence over an earlier bare SIGKILL.
    assert_eq!(line_of(&lines(&[SIGKILL, HOST])), 2);
    // A bare bash `Killed` is nothing.
    assert_eq!(
        class_of(&lines(&[
            "/var/spool/slurmd/job1/slurm_script: line 4: 77 Killed  python3 x.py",
            "Killed"
        ])),
        None
    );
}

#[test]
fn specific_error_beats_earlier_wrapper() {
    let s = lines(&[ACTOR, "Error executing job with overrides: ['a=1']", IMPORT]);
    let v = classify_bytes(s.as_bytes());
    assert_eq!(v.class, Error);
    assert_eq!(v.evidence.unwrap().line, 3);
}

#[test]
fn slurm_banner_variants() {
    assert_eq!(
        class_of(
            "slurmstepd: *** JOB 830329 CANCELLED AT 2018-08-06T17:21:44 DUE TO TIME LIMIT on n447 ***\n"
        ),
        Timeout
    );
    assert_eq!(
        class_of("srun: *** STEP 12.0 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***\n"),
        Timeout
    );
    assert_eq!(
        class_of(
            "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO JOB REQUEUE ***\n"
        ),
        Preempted
    );
    assert_eq!(
        class_of(
            "slurmstepd: error: *** JOB 7 ON n1 UNCORRECTABLE MEMORY ERROR AT 2024-01-01T00:00:00 ***\n"
        ),
        NodeFail
    );
    assert_eq!(
        class_of("slurmstepd: *** JOB 1479012 CANCELLED AT 2015-02-04T06:33:25 *** on sh-2-3\n"),
        Error
    );
    // Not a banner: prose mentioning a time limit.
    assert_eq!(
        class_of("note: job was CANCELLED AT the user's request due to time limit\n"),
        None
    );
}

#[test]
fn torch_message_variants_are_gpu_oom() {
    for l in [
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 55.57 GiB. GPU 0 has a total capacty of 12.00 GiB of which 9.02 GiB is free.",
        "...CUDA out of memory. Tried to allocate 30.29 GiB. GPU 0 has a total capacity of 10.74 GiB",
        "torch.AcceleratorError: CUDA error: out of memory",
        "CUDA error: out of memorySearch for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "include/alloc.h:320 (ncclCuMemAlloc) NCCL WARN Cuda failure 2 'out of memory'",
        "failed to allocate 890.06M (933298432 bytes) from device: HIP_ERROR_OutOfMemory",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try lowering `max_num_seqs`",
    ] {
        assert_eq!(class_of(&format!("{l}\n")), GpuOom, "{l}");
    }
    // NCCL's generic wrapper with a different CUDA failure is not an OOM.
    assert_eq!(
        class_of("[rank7]: Cuda failure 1 'invalid argument'\n"),
        None
    );
}

#[test]
fn ray_wrapped_out_of_memory_needs_the_inner_message() {
    let wrapper = "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_ref_update_actor() (pid=118848, ip=10.130.71.7)";
    assert_eq!(
        class_of(&lines(&[wrapper])),
        None,
        "the wrapper alone says nothing"
    );
    assert_eq!(class_of(&lines(&[wrapper, OOM])), GpuOom);
    assert_eq!(
        class_of(&lines(&[
            wrapper,
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."
        ])),
        HostOom
    );
}

#[test]
fn traps_do_not_classify() {
    let traps = [
        // set -x echoes, one or more '+'.
        "+ grep -q 'CUDA out of memory' slurm.out",
        "+++ echo 'Detected 1 oom_kill event in StepId=1.0'",
        // config dumps
        "[2025-03-29 18:18:34] server_args=ServerArgs(model_path='m', mem_fraction_static=0.717, served_model_name='CUDA out of memory repro')",
        "(TaskRunner pid=2841)  'trainer': {'experiment_name': 'Not enough memory. Please try to increase --mem-fraction-static',",
        "\x1b[36m(TaskRunner pid=2841)\x1b[0m  'trainer': {'experiment_name': 'HIP out of memory'}}",
        "    # layered summon can save memory (prevent OOM); CUDA out of memory otherwise",
        // recovered warnings
        "WARNING 05-09 00:49:33 scheduler.py:1057 Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.",
        "[2026-09-13 16:06:07] KV cache pool is full. Retract requests. #retracted_reqs: 1",
        "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead.",
        "(WorkerDict pid=1) Setting the sleep level to 1 may cause a memory overflow.",
        // Ray's generic list of possible causes
        "Some common causes include: (1) the process was killed by the OOM killer due to high memory usage, (2) ray stop --force was called",
        "(raylet) node_manager.cc:3099: 0 Workers (tasks / actors) killed due to memory pressure (OOM), 1 Workers crashed due to other reasons",
        // Slurm's end-of-job accounting note
        "slurmstepd: Exceeded step memory limit at some point.",
        "slurmstepd: error: Exceeded job memory limit at some point.",
        // the allocator advice alone
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        // an ImportError *repr* inside a warning
        "WARNING 05-21 10:02:14 [utils.py:88] Failed to import from vllm._C with ImportError('libcudart.so.12')",
    ];
    for t in traps {
        let v = classify_bytes(format!("{t}\n").as_bytes());
        assert_eq!(v.class, None, "trap classified: {t:?} -> {v:?}");
    }
    // ...while the un-trapped forms of the same signatures do classify.
    assert_eq!(
        class_of("srun: error: udc-ba26-19: task 0: Out Of Memory\n"),
        HostOom
    );
    assert_eq!(
        class_of("srun: error: Exceeded job memory limit\n"),
        HostOom
    );
    assert_eq!(
        class_of(
            "(raylet) node_manager.cc:3099: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed\n"
        ),
        HostOom
    );
    assert_eq!(
        class_of("+5 CUDA out of memory\n"),
        GpuOom,
        "'+' not followed by a space is not set -x"
    );
}

#[test]
fn claiming_lines_hide_quoted_signatures() {
    // SGLang quotes the underlying exception and mem-fraction advice: error, not gpu_oom.
    assert_eq!(
        class_of(
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        ),
        Error
    );
    // Hydra quotes the overrides verbatim.
    assert_eq!(
        class_of(
            "Error executing job with overrides: ['trainer.experiment_name=repro No available memory for the cache blocks']\n"
        ),
        Error
    );
}

#[test]
fn traceback_final_exception_line_is_weak_error() {
    let s = "\
(TaskRunner pid=9) Traceback (most recent call last):
(WorkerDict pid=10) INFO unrelated interleaved line
(TaskRunner pid=9)   File \"/x.py\", line 3, in <module>
(TaskRunner pid=9)     main()
(WorkerDict pid=10) KeyError: 'not ours'
(TaskRunner pid=9) ValueError: bad reward function spec
";
    let v = classify_bytes(s.as_bytes());
    assert_eq!(v.class, Error);
    let ev = v.evidence.unwrap();
    assert_eq!(ev.line, 6, "{ev:?}");
    assert!(ev.text.ends_with("ValueError: bad reward function spec"));
    // Only a header and frames, no exception line (log cut off): nothing.
    assert_eq!(
        class_of("Traceback (most recent call last):\n  File \"x.py\", line 1\n    f()\n"),
        None
    );
    // "During handling..." is not an exception line; the chained one is.
    let chained = "Traceback (most recent call last):\n  File \"a.py\", line 1\n    g()\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"b.py\", line 2\n    h()\nOSError: disk full\n";
    assert_eq!(line_of(chained), 9);
}

#[test]
fn ansi_colour_is_stripped_from_evidence() {
    let s = "\x1b[36m(WorkerDict pid=231424)\x1b[0m \x1b[31mtorch.OutOfMemoryError: CUDA out of memory.\x1b[0m Tried to allocate 2.00 GiB\n";
    let v = classify_bytes(s.as_bytes());
    assert_eq!(v.class, GpuOom);
    assert_eq!(
        v.evidence.unwrap().text,
        "(WorkerDict pid=231424) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    );
}

#[test]
fn wire_names_are_stable() {
    let all = [
        (GpuOom, "gpu_oom"),
        (KvCache, "kv_cache"),
        (HostOom, "host_oom"),
        (Timeout, "timeout"),
        (Preempted, "preempted"),
        (NodeFail, "node_fail"),
        (NcclTimeout, "nccl_timeout"),
        (Error, "error"),
        (None, "none"),
    ];
    for (c, name) in all {
        assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{name}\""));
        assert_eq!(c.as_str(), name);
    }
    let v = classify_bytes(format!("{OOM}\n").as_bytes());
    assert_eq!(
        serde_json::to_value(&v).unwrap(),
        serde_json::json!({"class": "gpu_oom", "evidence": {"line": 1, "text": OOM}})
    );
}

#[test]
fn grep_patterns_are_posix_ere_and_cover_every_class() {
    let pats = grep_patterns();
    for (class, p) in &pats {
        for perlism in [r"\d", r"\s", r"\S", r"\w", r"\b", "(?", "*?", "+?"] {
            assert!(
                !p.contains(perlism),
                "{class:?} pattern {p:?} uses {perlism:?}"
            );
        }
        assert!(!p.is_empty() && !p.contains('\n'));
    }
    for c in [
        GpuOom,
        KvCache,
        HostOom,
        Timeout,
        Preempted,
        NodeFail,
        NcclTimeout,
        Error,
    ] {
        assert!(
            pats.iter().any(|(pc, _)| *pc == c),
            "no grep pattern for {c:?}"
        );
    }
    assert!(!pats.iter().any(|(pc, _)| *pc == None));
}

#[test]
fn grep_patterns_find_every_positive_fixture_line() {
    // The ERE approximations are supersets of the scanner's rules: every evidence line of
    // a positive fixture must be matched by some pattern (checked with the regex crate,
    // whose syntax is a superset of the ERE subset used).
    let res: Vec<regex::Regex> = grep_patterns()
        .iter()
        .map(|(_, p)| regex::Regex::new(&p.replace("[][0-9,-]", r"[\]\[0-9,-]")).unwrap())
        .collect();
    for &(name, class, line, _) in EXPECTED {
        // `None` has no evidence; a bare traceback's exception line is found by following
        // the traceback, which grep cannot do.
        if class == None || name == "generic-traceback-file-not-found.log" {
            continue;
        }
        let bytes = read_fixture(name);
        let text = String::from_utf8_lossy(&bytes);
        let l = text.split('\n').nth(line as usize - 1).unwrap();
        assert!(
            res.iter().any(|r| r.is_match(l)),
            "{name}: no grep pattern matches line {line}: {l:?}"
        );
    }
}
