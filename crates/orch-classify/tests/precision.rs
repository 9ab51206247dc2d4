//! Precision of the classifier on adversarial logs (`tests/fixtures/adversarial/`): an
//! error *mention* (config values, quoted strings, tips, help text, echoed commands and
//! their output, warnings) never decides a class; real failures in awkward formats (rank
//! and glog prefixes, Ray wrapping, torchrun's Root Cause block, interleaved ranks, ANSI
//! colour) do; and when a different fatal exception ends the process after a memory
//! failure, that exception decides, while teardown noise after a memory failure does not.

use std::path::{Path, PathBuf};

use orch_classify::{FailureClass, Scanner, classify_bytes, classify_path};

use FailureClass::*;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/adversarial")
}

/// (fixture, class, evidence line, substring the evidence text must contain).
const EXPECTED: &[(&str, FailureClass, u64, &str)] = &[
    // ---- a real failure, then its launcher's re-raise (AReaL's JobException is teardown)
    (
        "areal-oom-then-launcher-job-exception.log",
        GpuOom,
        30,
        "Tried to allocate 87.50 MiB",
    ),
    // ---- mentions that must not decide
    ("argparse-help-oom-text.log", None, 0, ""),
    // Issue 20's new signatures (Ray's named OOM, Errno 12, job-control Killed, THCudaCheck,
    // srun node failure, CUDA faults, SGLang/vLLM KV reports, MemoryError, DataLoader
    // kills) in tips, config values, echoes, warnings, source lines and their benign forms.
    ("issue20-new-signatures-mentioned-clean.log", None, 0, ""),
    // fairseq catches the OOM (WARNING), says it recovers, and trains on to the end.
    (
        "fairseq-recovered-oom-then-training-continues.log",
        None,
        0,
        "",
    ),
    ("clean-exit-oom-tip.log", None, 0, ""),
    ("json-event-oom-message-clean.log", None, 0, ""),
    ("markdown-cat-oom-troubleshooting.log", None, 0, ""),
    ("user-warning-out-of-memory.log", None, 0, ""),
    ("yaml-dump-oom-hints-clean-exit.log", None, 0, ""),
    (
        "config-notes-oom-then-file-not-found.log",
        Error,
        17,
        "FileNotFoundError: [Errno 2] Failed to open local file",
    ),
    (
        "library-tip-oom-then-value-error.log",
        Error,
        10,
        "ValueError: Unknown reward manager: dapo_v2",
    ),
    (
        "grep-count-oom-then-value-error.log",
        Error,
        14,
        "ValueError: invalid literal for int()",
    ),
    (
        "quoted-oom-in-value-error.log",
        Error,
        4,
        "ValueError: unknown retry trigger 'torch.OutOfMemoryError",
    ),
    (
        "wandb-run-name-oom-then-import-error.log",
        Error,
        9,
        "ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda",
    ),
    // ---- a memory failure, then a different fatal exception ends the process
    (
        "caught-oom-traceback-then-file-not-found.log",
        Error,
        18,
        "FileNotFoundError: [Errno 2] No such file or directory",
    ),
    (
        "ray-oom-then-driver-key-error.log",
        Error,
        11,
        "KeyError: 'token_level_scores'",
    ),
    (
        "oom-caught-by-retry-then-module-not-found.log",
        Error,
        10,
        "ModuleNotFoundError: No module named 'verl.utils.rollout_skip'",
    ),
    (
        "torchrun-root-cause-error-file-value-error.log",
        Error,
        25,
        "ValueError: micro_batch_size (6) must be a power of two",
    ),
    // ---- real failures in awkward formats
    (
        "rank-prefixed-oom-then-nccl-teardown.log",
        GpuOom,
        10,
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.68 GiB",
    ),
    (
        "torchrun-root-cause-error-file-oom.log",
        GpuOom,
        31,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ),
    (
        "ray-task-error-driver-only-oom.log",
        GpuOom,
        14,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.68 GiB",
    ),
    (
        "oom-then-actor-died-and-hydra.log",
        GpuOom,
        4,
        "(WorkerDict pid=231424) torch.OutOfMemoryError: CUDA out of memory",
    ),
    (
        "multi-rank-interleaved-oom.log",
        GpuOom,
        8,
        "[rank5]: torch.OutOfMemoryError: CUDA out of memory",
    ),
    (
        "oom-then-exception-ignored-in-del.log",
        GpuOom,
        4,
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory",
    ),
    (
        "signal-exception-after-oom.log",
        GpuOom,
        4,
        "[rank2]: torch.OutOfMemoryError: CUDA out of memory",
    ),
    (
        "config-dump-then-real-oom.log",
        GpuOom,
        9,
        "(WorkerDict pid=231424) torch.OutOfMemoryError: CUDA out of memory",
    ),
    (
        "srun-label-oom.log",
        GpuOom,
        6,
        "3: torch.OutOfMemoryError: CUDA out of memory",
    ),
    (
        "ansi-coloured-ray-oom.log",
        GpuOom,
        5,
        "(WorkerDict pid=231424) torch.OutOfMemoryError: CUDA out of memory",
    ),
    (
        "python-logging-error-oom-message.log",
        GpuOom,
        3,
        "ERROR:__main__:CUDA out of memory. Tried to allocate 30.29 GiB",
    ),
    (
        "accelerator-error-oom-glog.log",
        GpuOom,
        5,
        "torch.AcceleratorError: CUDA error: out of memory",
    ),
    (
        "nccl-warn-cuda-oom-rank-prefixed.log",
        GpuOom,
        2,
        "NCCL WARN Cuda failure 2 'out of memory'",
    ),
    (
        "vllm-compose-logger-kv-cache.log",
        KvCache,
        // vLLM's INFO report of zero GPU blocks is its own line format and comes first.
        1,
        "# GPU blocks: 0, # CPU blocks: 256",
    ),
    (
        "vllm-kv-cache-then-ray-task-error-value-error.log",
        KvCache,
        1,
        "KV cache is needed, which is larger than the available KV cache memory (1.25 GiB)",
    ),
    (
        "sglang-timestamp-decode-oom-then-sigquit.log",
        KvCache,
        3,
        "[2026-01-05 06:12:41] Decode out of memory. Try to lower your batch size.",
    ),
    (
        "host-oom-then-dataloader-killed.log",
        HostOom,
        1,
        "Memory cgroup out of memory: Killed process 771342 (pt_data_worker)",
    ),
    (
        "raylet-memory-pressure-error-header.log",
        HostOom,
        1,
        "1 Workers (tasks / actors) killed due to memory pressure (OOM)",
    ),
    (
        "slurm-oom-kill-after-quoted-gpu-oom.log",
        HostOom,
        5,
        "slurmstepd: error: Detected 1 oom_kill event in StepId=18835145.batch",
    ),
    (
        "slurm-timeout-after-oom-mention.log",
        Timeout,
        5,
        "*** JOB 494583 ON gpu-a07 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
    ),
];

fn check(name: &str, v: &orch_classify::Verdict) -> Result<(), String> {
    let &(_, class, line, text) = EXPECTED
        .iter()
        .find(|e| e.0 == name)
        .ok_or_else(|| format!("{name}: no expectation"))?;
    if v.class != class {
        return Err(format!(
            "{name}: class {:?}, want {class:?} ({:?})",
            v.class, v.evidence
        ));
    }
    match (&v.evidence, class) {
        (Option::None, FailureClass::None) => Ok(()),
        (Some(ev), _) if ev.line == line && ev.text.contains(text) => Ok(()),
        (ev, _) => Err(format!(
            "{name}: evidence {ev:?}, want line {line} containing {text:?}"
        )),
    }
}

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_adversarial_fixture_classifies_as_expected() {
    let mut failures = Vec::new();
    for (name, _) in fixtures() {
        let v = classify_path(&dir().join(&name)).unwrap();
        if let Err(e) = check(&name, &v) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_expectation_has_its_fixture_and_there_are_enough() {
    let names: Vec<String> = fixtures().into_iter().map(|(n, _)| n).collect();
    for (name, ..) in EXPECTED {
        assert!(names.iter().any(|n| n == name), "missing fixture {name}");
    }
    assert!(
        EXPECTED.len() >= 30,
        "{} adversarial fixtures",
        EXPECTED.len()
    );
}

#[test]
fn chunking_never_changes_the_verdict() {
    for (name, bytes) in fixtures() {
        let whole = classify_bytes(&bytes);
        for size in [1usize, 7, 64, 4093] {
            let mut s = Scanner::new();
            for c in bytes.chunks(size) {
                s.feed(c);
            }
            assert_eq!(s.verdict(), whole, "{name}, chunk size {size}");
        }
    }
}

fn class_of(s: &str) -> FailureClass {
    classify_bytes(s.as_bytes()).class
}

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.";

#[test]
fn mentions_never_decide() {
    for l in [
        r#"notes: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.68 GiB""#,
        "  oom_hint: lower ppo_micro_batch_size_per_gpu on CUDA out of memory",
        "- name: CUDA out of memory",
        "max_retries_on=CUDA out of memory",
        "to avoid torch.OutOfMemoryError: CUDA out of memory, lower the micro batch",
        "$ grep -c 'CUDA out of memory' slurm.out",
        "> grep -c 'CUDA out of memory' slurm.out",
        "train.log:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "  --oom-retries N   retry after CUDA out of memory (default: 2)",
        "/x/memory.py:44: UserWarning: CUDA out of memory could occur",
        "WARNING 03-14 14:33:45 [runner.py:1] CUDA out of memory during capture; skipping",
        "INFO:__main__:recovered from CUDA out of memory",
        "(TaskRunner pid=1) print: `torch.OutOfMemoryError: CUDA out of memory`",
        "KeyError: 'CUDA out of memory'",
        "note: 'Detected 1 oom_kill event in StepId=1.0'",
        "hint: No available memory for the cache blocks means raise gpu_memory_utilization",
    ] {
        assert_eq!(class_of(&format!("{l}\n")), None, "{l:?}");
    }
}

#[test]
fn reporting_positions_decide() {
    for l in [
        OOM,
        "(WorkerDict pid=1) [rank3]: torch.OutOfMemoryError: CUDA out of memory.",
        "  7: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "ERROR 11-18 18:07:28 engine.py:366] CUDA out of memory while profiling",
        "E1122 12:00:00.123456 12 alloc.cc:12] CUDA error: out of memory",
        "[2026-01-05 06:12:41 TP0] RuntimeError: CUDA error: out of memory",
        "RuntimeError: worker 3 failed: CUDA out of memory. Tried to allocate 1.00 GiB",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::W.f() (pid=1) CUDA out of memory",
        "RuntimeError: the worker's allocator failed: CUDA error: out of memory",
    ] {
        let v = classify_bytes(format!("{l}\n").as_bytes());
        assert_eq!(v.class, GpuOom, "{l:?}");
    }
}

fn tb(prefix: &str, exc: &str) -> String {
    format!(
        "{prefix}Traceback (most recent call last):\n{prefix}  File \"x.py\", line 1, in f\n{prefix}    g()\n{prefix}{exc}\n"
    )
}

#[test]
fn the_last_exception_decides_after_a_memory_failure() {
    let oom = tb("", OOM);
    // A different fatal exception later: error, with its line as evidence.
    let s = oom.clone() + &tb("", "FileNotFoundError: [Errno 2] No such file: 'a.parquet'");
    let v = classify_bytes(s.as_bytes());
    assert_eq!(v.class, Error);
    assert_eq!(v.evidence.unwrap().line, 8);
    // Teardown after the OOM: the OOM stands.
    for teardown in [
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::W.f() (pid=1)",
        "RuntimeError: Engine core initialization failed. See root cause above.",
        "RuntimeError: DataLoader worker (pid 7) is killed by signal: Killed.",
        "KeyboardInterrupt",
    ] {
        let s = oom.clone() + &tb("[rank0]: ", teardown);
        assert_eq!(class_of(&s), GpuOom, "{teardown}");
    }
    // The OOM after a different exception: the OOM ends the process.
    let s = tb("", "ValueError: retrying") + &oom;
    assert_eq!(class_of(&s), GpuOom);
    // Swallowed exceptions end nothing.
    let s = oom.clone()
        + "Exception ignored in: <function X.__del__ at 0x1>\n"
        + &tb("", "AttributeError: 'X' has no attribute 'y'");
    assert_eq!(class_of(&s), GpuOom);
    // A Slurm banner after the process output still outranks everything.
    let s = oom.clone()
        + &tb("", "ValueError: late")
        + "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***\n";
    assert_eq!(class_of(&s), Timeout);
}
