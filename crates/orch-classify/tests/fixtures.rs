//! Tests for `orch_classify`: every fixture log's class, evidence line and evidence text (the
//! expectations table, here); chunking invariance, line numbering across chunk boundaries and
//! over-long lines (`stream`); precedence, traps and the wire format on small inline streams
//! (`rules`).

use std::path::{Path, PathBuf};

use orch_classify::{FailureClass, Verdict, classify_path, grep_patterns};

use FailureClass::*;

// The topics, in tests/classify/ (tests/fixtures/ holds the logs).
#[path = "classify/rules.rs"]
mod rules;
#[path = "classify/stream.rs"]
mod stream;

pub(crate) fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// (fixture, class, evidence line, substring the evidence text must contain).
/// `None` class => no evidence (line 0, substring "").
pub(crate) const EXPECTED: &[(&str, FailureClass, u64, &str)] = &[
    // ---- GPU OOM
    // orch's simulated verl + SGLang resume failure (crates/orch-sim/outputs/verl/
    // sglang_resume.txt): sgl-project/sglang#14092's lines, then verl's RuntimeError after its
    // three attempts, which is the consequence, not the cause.
    (
        "verl-sglang-resume-oom-then-retries-exhausted.log",
        GpuOom,
        1,
        "CUresult error: 2 (out of memory)",
    ),
    // A real log: orch driving examples/torchrun/train.py on an H100 (torch 2.11), attempt 1's
    // stderr as written (crates/orch-core/data/gpu-runs/README.md).
    (
        "torchrun-h100-oom-orch-driven.log",
        GpuOom,
        9,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.55 GiB",
    ),
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
        // The engine's own report of zero blocks comes first (issue 20: it decides even when
        // the engine dies before raising).
        6,
        "# GPU blocks: 0, # CPU blocks: 2048",
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
    // The job-control line of the batch script names a SIGKILL (weak host OOM, issue 20).
    (
        "bash-killed-only.log",
        HostOom,
        4,
        "slurm_script: line 31: 771342 Killed",
    ),
];

pub(crate) fn check(
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

pub(crate) fn read_fixture(name: &str) -> Vec<u8> {
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
