//! The data the classifier's generality rests on, each row tested:
//!
//! * `data/vocabulary.tsv`: every memory, timeout, preemption, node-loss and collective-timeout
//!   message the runtimes orch's users meet can print, read from their sources (each row names
//!   the file and version). Each row, alone on a line, must classify as its class: a message
//!   no rule finds alone fails here, before a user's run meets it.
//! * `data/decorations.tsv`: every launcher's and logger's decoration. Behind each, a real
//!   failure still classifies, a config line is still a mention, and `explain_decorations`
//!   names the row.

use orch_classify::decorations::rows;
use orch_classify::{FailureClass, classify_bytes, corpus::parse_class, explain_decorations};

const VOCABULARY: &str = include_str!("../data/vocabulary.tsv");

#[test]
fn every_message_of_the_vocabulary_classifies_alone_on_a_line() {
    let mut lines = VOCABULARY.lines();
    assert_eq!(lines.next(), Some("class\tline\truntime\tsource\tversion"));
    let mut misses = Vec::new();
    let mut n = 0;
    for (i, row) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let c: Vec<&str> = row.split('\t').collect();
        assert_eq!(c.len(), 5, "vocabulary.tsv line {}: {row:?}", i + 2);
        assert!(
            !c[3].trim().is_empty(),
            "line {}: a row names its source",
            i + 2
        );
        let want = parse_class(c[0]).unwrap_or_else(|| panic!("line {}: class {:?}", i + 2, c[0]));
        let got = classify_bytes(format!("{}\n", c[1]).as_bytes()).class;
        n += 1;
        if got != want {
            misses.push(format!(
                "line {}: {} -> {}: {}",
                i + 2,
                c[0],
                got.as_str(),
                c[1]
            ));
        }
    }
    assert!(n >= 100, "{n} rows");
    assert!(
        misses.is_empty(),
        "{} of {n} rows not found alone:\n{}",
        misses.len(),
        misses.join("\n")
    );
}

/// A decoration's example with `body` in place of its `…` (or after it).
fn decorate(example: &str, body: &str) -> String {
    match example.split_once('…') {
        Some((a, b)) => format!("{a}{body}{b}\n"),
        None => format!("{example}{body}\n"),
    }
}

#[test]
fn a_failure_behind_every_decoration_still_classifies() {
    let failure = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
    let rows = rows().expect("decorations.tsv");
    assert!(rows.len() >= 30);
    for d in &rows {
        let line = decorate(&d.example, failure);
        let v = classify_bytes(line.as_bytes());
        assert_eq!(
            v.class,
            FailureClass::GpuOom,
            "{} ({}): {line:?}",
            d.name,
            d.launcher
        );
        let (peeled, body) = explain_decorations(line.trim_end().as_bytes());
        assert!(
            peeled.iter().any(|(name, _)| *name == d.name),
            "{}: peeled {peeled:?}",
            d.name
        );
        assert!(
            body.starts_with("torch.OutOfMemoryError"),
            "{}: body {body:?}",
            d.name
        );
    }
}

#[test]
fn a_config_line_behind_every_decoration_is_still_a_mention() {
    for config in [
        "oom_hint: lower the batch when CUDA out of memory",
        "notes: \"torch.OutOfMemoryError: CUDA out of memory\"",
        "+ grep -c 'CUDA out of memory' slurm-1.out",
    ] {
        for d in rows().expect("decorations.tsv") {
            let line = decorate(&d.example, config);
            let v = classify_bytes(line.as_bytes());
            assert_eq!(
                v.class,
                FailureClass::None,
                "{} ({}): {line:?}",
                d.name,
                d.launcher
            );
        }
    }
}

/// Lines a review found the vocabulary and the normaliser could mistake for failures: tips,
/// config values, help text, warnings, structured logs, status reports that count nothing.
/// Neither reading (the log alone, or a job that failed) may call them memory, and none may
/// outrank a real OOM after it.
#[test]
fn tips_configs_and_warnings_are_not_failures() {
    let traps = [
        "retry_patterns: [CUDA error: out of memory, NCCL error: unhandled]",
        "skip_on: CUDA error: out of memory",
        // A value holding `: ` stays a config value unless a C++ function names itself there.
        "retry_on_errors: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        // A review's traps for this session's rules: prose a label opens, a sentence ending in
        // the words, a pytest skip reason, a fall-back, Spark's WARN of a retried task.
        "Known issue: Warp CUDA error 2: out of memory on 8 GB cards.",
        "Note: c10::OutOfMemoryError on 24 GB cards.",
        "hint: vk::Device::allocateMemory: ErrorOutOfDeviceMemory means you should lower -ngl",
        "Tip: reduce --batch-size if you run Out of GPU memory",
        "SKIPPED [1] tests/test_big.py:12: Out of GPU memory",
        "[Error] [carb.graphics-vulkan.plugin] Out of GPU memory allocating resource 'tex', falling back to host-visible memory",
        "24/07/09 16:43:34 WARN TaskSetManager: Lost task 3.0 com.nvidia.spark.rapids.jni.GpuRetryOOM: GPU OutOfMemory",
        "Note: a free(): invalid pointer at interpreter exit is harmless",
        // A runtime that fell back and went on.
        "/usr/lib/python3/site-packages/cupy/cuda/pinned_memory.py:12: UserWarning: out of memory to allocate 4096 bytes (total 0 bytes); falling back",
        "on_failure: failed: CUDA out of memory -> halve batch",
        "  --oom-pattern PAT  give up on error: CUDA out of memory",
        "Known issue: training may fail with error: CUDA out of memory on 24 GB cards.",
        "If training fails with error: CUDA out of memory, lower the batch",
        "Common failure: CUDA out of memory (see docs)",
        "llama3: CUDA out of memory is common on 24GB cards",
        "FAQ-3: CUDA out of memory?",
        "zero3: OOMKilled pods are retried",
        "stage3: Out of memory: Killed process 12 (python) is what the kernel prints",
        "2025-03-14 14:23:09,117 trial12: CUDA out of memory at bs=64, trying bs=32",
        "{\"msg\": \"CUDA out of memory, retrying with batch 4\", \"level\": \"warning\"}",
        "/usr/lib/python3/memory.py:330: UserWarning: to avoid CUDA out of memory, set max_split_size_mb",
        "Hint: lower --max-num-seqs when you hit CUDA out of memory",
        "[INFO] watching for OOMKilled containers",
        // A `key: <error sentence>` line reports only where the key is no advice.
        "tip: failed to allocate buffer for kv cache means the context is too long",
        "hint: Exception in main training loop: CUDA out of memory is fixed by a smaller batch",
        // A quote that opens before the words still quotes them.
        "grep -c 'CUDA out of memory' train.log",
        "echo \"Command 'python3' died with <Signals.SIGKILL: 9>\" >> notes.txt",
        "to avoid torch.OutOfMemoryError: lower the batch",
        // Source lines, handlers and notes that name a memory failure.
        "    raise DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")",
        "    } catch (const std::bad_alloc& e) {",
        "**Note**: CUDA out of memory is common with long prompts",
        "if the GPU fails to allocate memory, lower the batch",
        // srun's report of a rank it stopped after another failed (a SIGKILL it sent).
        "srun: error: n2: task 1: Killed",
        "[1/3] Killed",
        "OutOfMemoryError    : 3",
        // An error report whose later words are advice, not what failed.
        "error: unknown flag --foo; to avoid CUDA out of memory, lower the batch",
        "memory allocation of 18446744073709551615 bytes failed",
        // A review's: caught, advised, listed as a possible cause, negated, a metric, a changelog.
        "2024-01-01 10:00:00 WARN ImageCache: caught System.OutOfMemoryException while prefetching, cache disabled",
        "INFO Retried after System.OutOfMemoryException; succeeded",
        "Hint: if you see FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory, raise --max-old-space-size",
        "┌ Warning: Out of GPU memory trying to allocate 21.000 MiB; retrying after GC",
        "Training failed: exit status 1. Possible causes: CUDA error: out of memory or NCCL timeout",
        "Job failed: see log. Check for CUDA error: out of memory in the worker output",
        "Health check failed: disk full; no CUDA error: out of memory seen",
        "Validation failed: expected CUDA error: out of memory to be raised",
        "step 100 error: 0.0213 (CUDA error: out of memory count: 0)",
        "If the process exits with exit code -9, increase memory",
        "Subprocess exited with code -9 after timeout of 600s (killed by harness)",
        "[E]valuate  [Q]uit  CUDA error: out of memory",
        "Changelog: [1.2.0]CUDA error: out of memory is now retried automatically",
        "| 12 | 3%CUDA error: out of memory |",
        "Progress: 100%|##########| 10/10 [00:05<00:00]CUDA error: out of memory (recovered, retrying)",
        // Batches Q and R's vocabulary, quoted, advised or warned about.
        "# if the runner dies with signal: killed, raise the container's memory",
        "time=2025-03-12T12:14:22.015Z level=WARN msg=\"runner restarted\" error=\"llama runner process has terminated: signal: killed\"",
        "Hint: Job has exceeded maxPSS: 2000 MB means the request is too small",
        "W arena.cc:250] cudaHostAlloc failed, ret[2], out of memory; falling back to pageable memory",
        "note: A process of this unit has been killed by the OOM killer. is what systemd prints",
        "    except MemoryError:",
        "# Allocation type: scoped buffers are listed when XLA runs out of memory",
        "WARNING: a MemoryError in the data loader is retried",
        // The review's traps for batches Q–V's rules.
        "cudaHostAlloc failed, out of memory; falling back to pageable memory",
        "MemoryError: caught in prefetch thread, retrying with a smaller buffer",
        "INFO memory usage exceeded request_memory is the hold reason we use",
        "Epoch 3: 100%|██████████| 50/50 [00:10<00:00] Killed processes: 0",
    ];
    for t in traps {
        let v = classify_bytes(format!("{t}\nTraceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nKeyError: 'x'\n").as_bytes());
        for (reading, class) in [("strict", v.class), ("failed", v.given_failure().class)] {
            assert!(
                !matches!(
                    class,
                    FailureClass::GpuOom | FailureClass::KvCache | FailureClass::HostOom
                ),
                "{reading} reading of {t:?}: {}",
                class.as_str()
            );
        }
    }
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
    for t in [
        "Volatile Uncorrectable ECC error count .... 0",
        "NCCL INFO lost heartbeat timeout set to 600s",
        "INFO job ab12 is preempted? False",
        "a job is preempted at most 3 times",
        "memory of node 0 was reclaimed by the allocator",
        "Warning: spot instance interruption notice handling is enabled",
        "grpc error: DeadlineExceeded while polling the server, retrying",
        "INFO Request hit its timeout of 30s, retrying (1/5)",
        "INFO No spot interruption notice received, continuing",
        "from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError",
        "Retrying after RendezvousTimeoutError (attempt 1/3)",
        // Memory events a job survives: a later failure is the better evidence.
        "distributed.nanny - WARNING - Worker exceeded 95% memory budget. Restarting",
        "WARN TaskSetManager: Lost task 3.0: Container killed by YARN for exceeding memory limits. 7.2 GB of 4.2 GB virtual memory used.",
        // The review's traps for batches Q–V's scheduler rules: warnings and notes that name a
        // limit, a state or a count without it having happened.
        "WARNING: checkpoint upload retry: max duration exceeded, skipping upload",
        "2025-01-01 12:00:00 INFO grpc retry: max duration exceeded for call /svc.Foo/Bar",
        "[INFO] Saving a final checkpoint due to wall clock limit approaching (max_time=04:00:00)",
        "Ending run early due to walltime limits",
        "state: preempted requests are recomputed by the scheduler",
        "INFO checking for compute.instances.preempted events: none found",
        "INFO dcgm health watch: Detected 0 volatile double-bit ECC error(s) in GPU 3.",
        "[2025-01-01 10:00:00] ERROR cudaHostAlloc failed for 1073741824 bytes: out of memory",
        "W0101 12:00:00 HCCL_EXEC_TIMEOUT=1800: Stream synchronize timeout will trigger after 1800s",
        "The node was low on resource: ephemeral-storage. Container trainer was using 80Gi, request is 0, has larger consumption of ephemeral-storage.",
    ] {
        let v = classify_bytes(format!("{t}\n{oom}\n").as_bytes());
        assert_eq!(
            v.class,
            FailureClass::GpuOom,
            "{t:?} outranked the OOM after it"
        );
    }
}
