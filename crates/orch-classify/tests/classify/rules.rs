//! Which class wins when a log has several signatures, what does not count (traps, quoted
//! signatures, recovered warnings), and the names and grep patterns other tools see.

use orch_classify::{FailureClass, classify_bytes, grep_patterns};

use FailureClass::*;

use crate::stream::OOM;

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
    // The launcher shell's job-control line names a SIGKILL (issue 20: rl-swarm's
    // `run_rl_swarm.sh: line 649:  9746 Killed  python -m ...` is the host OOM killer) ...
    let job_control = "/var/spool/slurmd/job1/slurm_script: line 4: 77 Killed  python3 x.py";
    assert_eq!(class_of(&lines(&[job_control, "Killed"])), HostOom);
    assert_eq!(
        class_of(&lines(&[
            "./run_rl_swarm.sh: line 266: 33498 Killed: 9               python -m x"
        ])),
        HostOom
    );
    assert_eq!(class_of(&lines(&[job_control, OOM])), GpuOom);
    // ... and so does an interactive shell's bare `Killed` (all 12 real logs in the corpus
    // that end in it are the host OOM killer's: issue 40, batches A, E, I and K), but the word
    // in prose is nothing.
    assert_eq!(class_of(&lines(&["Killed"])), HostOom);
    assert_eq!(class_of(&lines(&["Killed", OOM])), GpuOom);
    assert_eq!(
        class_of(&lines(&[
            "INFO: worker 3 Killed by the scheduler at line 4: 77"
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
fn hydra_instantiate_rethrowing_an_oom_is_the_oom() {
    // rl-swarm: the model does not fit while genrl moves it to the GPU in the trainer's
    // constructor; Hydra's `instantiate` re-raises it `from e`, so the process's last words are
    // the wrapper, and the OOM before it is the cause.
    let log = lines(&[
        "Error executing job with overrides: ['training.dtype=float32']",
        "Traceback (most recent call last):",
        "  File \"/usr/local/lib/python3.10/dist-packages/hydra/_internal/instantiate/_instantiate2.py\", line 92, in _call_target",
        "    return _target_(*args, **kwargs)",
        OOM,
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        "  File \"/usr/local/lib/python3.10/dist-packages/hydra/_internal/instantiate/_instantiate2.py\", line 97, in _call_target",
        "    raise InstantiationException(msg) from e",
        "hydra.errors.InstantiationException: Error in call to target 'rgym_exp.src.trainer.GRPOTrainerModule':",
        "OutOfMemoryError('CUDA out of memory. Tried to allocate 2.03 GiB.')",
        "full_key: game_manager.trainer",
    ]);
    assert_eq!(class_of(&log), GpuOom);
    assert_eq!(line_of(&log), 5);
    // A wrapped error that is not memory stays an error.
    let log = lines(&[
        "Traceback (most recent call last):",
        "  File \"x.py\", line 1, in <module>",
        "FileNotFoundError: [Errno 2] No such file or directory: 'rgym_exp/src/datasets.yaml'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        "  File \"y.py\", line 2, in <module>",
        "hydra.errors.InstantiationException: Error in call to target 'rgym_exp.src.data.ReasoningGymDataManager':",
    ]);
    assert_eq!(class_of(&log), Error);
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
        // torch_npu, torch's XPU build, the bounded allocator printed alone, XLA's allocators.
        "RuntimeError: NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total capacity; 10.24 GiB already allocated; 10.24 GiB current active; 19.52 MiB free; 10.65 GiB reserved in total by PyTorch)",
        "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 16.48 GiB of which 16.07 GiB is free.",
        "Allocation on device 0 would exceed allowed memory. (out of memory)",
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCTensorRandom.cu:25",
        "RuntimeError: CUDA error:out of memory",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes.",
        "RESOURCE_EXHAUSTED: Failed to allocate request for 176.00MiB (184549376B) on device ordinal 0",
    ] {
        assert_eq!(class_of(&format!("{l}\n")), GpuOom, "{l}");
    }
    // XLA's allocator warnings that are not a failure, and gRPC's exhausted resource.
    for l in [
        "2025-05-18 21:59:55.086788: W external/xla/xla/tsl/framework/bfc_allocator.cc:310] Allocator (GPU_0_bfc) ran out of memory trying to allocate 3.37GiB with freed_by_count=0. The caller indicates that this is not a failure, but this may mean that there could be performance gains if more memory were available.",
        "grpc: StatusCode.RESOURCE_EXHAUSTED: Received message larger than max (4194305 vs. 4194304)",
    ] {
        assert_eq!(class_of(&format!("{l}\n")), FailureClass::None, "{l}");
    }
    // NCCL's generic wrapper with a different CUDA failure is not an OOM: an error.
    assert_eq!(
        class_of("[rank7]: Cuda failure 1 'invalid argument'\n"),
        Error
    );
}

/// The shapes issue 20's second holdout taught (tests/corpus/holdout2), each with the contexts
/// that must not fire.
#[test]
fn second_holdout_shapes_and_their_traps() {
    let cases: &[(&str, FailureClass)] = &[
        // A kernel's device-side assert, glued after a tqdm bar; C++'s own `CUDA Error:`.
        (
            "  6%|▋ | 89/1398 [1:32:11<25:28:13, 70.05s/it]../aten/src/ATen/native/cuda/Indexing.cu:1284: indexSelectLargeIndex: block: [134,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
            Error,
        ),
        (
            "CUDA Error: misaligned address (716) /code/prefill.cuh: line 1918 at function cudaLaunchKernel",
            Error,
        ),
        ("CUDA Error: out of memory /code/alloc.cu: line 12", GpuOom),
        (
            "DESKTOP:1689:2800 [0] include/alloc.h:112 NCCL WARN Cuda failure 999 'unknown error'",
            Error,
        ),
        // Host allocation failures: C++'s bad_alloc, c10's older CPU allocator message.
        (
            "(pid=5135) terminate called after throwing an instance of 'std::bad_alloc'",
            HostOom,
        ),
        (
            "Traceback (most recent call last):\n  File \"a.py\", line 1, in f\nMemoryError: std::bad_alloc",
            HostOom,
        ),
        (
            "[enforce fail at CPUAllocator.cpp:64] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 278528000 bytes. Error code 12 (Cannot allocate memory)",
            HostOom,
        ),
        // The raylet's memory monitor before Ray 2.2.
        (
            "(raylet) [2022-08-29 15:18:33,592 E 30307 30344] (raylet) node_manager.cc:2963: System memory low at node with IP 172.17.0.2. Used memory (23.63GB) / total capacity (33.28GB) (0.709971) exceeds threshold 0.7, killing latest task with name a and actor ID b to avoid running out of memory.",
            HostOom,
        ),
        // torch's NCCL heartbeat monitor.
        (
            "[rank6]:[F429 14:03:49.385461578 ProcessGroupNCCL.cpp:1554] [PG ID 0 PG GUID 0(default_pg) Rank 6] Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
            NcclTimeout,
        ),
        // A wrapper naming its cause's repr mid-line (vLLM's MQEngineDeadError).
        (
            "ERROR 03-19 10:55:18 [serving_chat.py:677] vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not running. Inspect the stacktrace to find the original error: OutOfMemoryError('CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a total capacity of 79.33 GiB of which 16.00 MiB is free.').",
            GpuOom,
        ),
        // A glog CUDA check that failed with error 2 (Caffe).
        (
            "F1206 10:15:04.766489   447 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
            GpuOom,
        ),
        (
            "F1206 10:15:04.766489   447 syncedmem.cpp:56] Check failed: error == cudaSuccess (77 vs. 0)  an illegal memory access was encountered",
            Error,
        ),
        (
            "I1206 10:15:04.766489   447 note.cpp:5] Check failed: error == cudaSuccess (2 vs. 0)  out of memory is what a full card prints",
            None,
        ),
        // Traps.
        (
            "# a device assert reads: block: [0,0,0], thread: [0,0,0] Assertion `x` failed",
            None,
        ),
        ("  what_to_catch: std::bad_alloc", None),
        (
            "+ echo 'Terminating the process after attempting to dump debug info'",
            None,
        ),
        (
            "hint: DefaultCPUAllocator: can't allocate memory means the host is full",
            None,
        ),
        (
            "# System memory low at node with IP 1.2.3.4. Used memory (1GB), killing ",
            None,
        ),
        (
            "    raise OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')",
            None,
        ),
        (
            "print(\"the original error: OutOfMemoryError('CUDA out of memory')\")",
            None,
        ),
    ];
    for (l, class) in cases {
        assert_eq!(class_of(&format!("{l}\n")), *class, "{l}");
    }
    // A traceback printed without frames ends in its exception line.
    assert_eq!(
        class_of("Traceback (most recent call last):\nMemoryError: bad allocation\n"),
        HostOom
    );
    assert_eq!(
        class_of("Traceback (most recent call last):\nKeyError: 'x'\n"),
        Error
    );
    // Hydra's job-logging header: an ERROR line reports, an INFO line does not.
    assert_eq!(
        class_of(
            "[2025-07-01 12:00:00,123][__main__][ERROR] - CUDA out of memory. Tried to allocate 2.00 GiB\n"
        ),
        GpuOom
    );
    assert_eq!(
        class_of(
            "[2025-07-01 12:00:00,123][genrl.logging_utils.global_defs][INFO] - CUDA out of memory. Tried to allocate 2.00 GiB\n"
        ),
        None
    );
}

#[test]
fn ray_wrapped_out_of_memory_names_a_device_oom() {
    let wrapper = "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_ref_update_actor() (pid=118848, ip=10.130.71.7)";
    // verl's and EasyR1's usual shape: torch's own message is in a worker's log, or cut off.
    assert_eq!(
        class_of(&lines(&[wrapper])),
        GpuOom,
        "the wrapper names its cause"
    );
    // torch's message, when present, is the evidence (it carries the numbers).
    assert_eq!(class_of(&lines(&[wrapper, OOM])), GpuOom);
    assert_eq!(line_of(&lines(&[wrapper, OOM])), 2);
    // torch's class alone, its message cut off.
    // A traceback that ends in torch's class alone; Python's MemoryError likewise (host).
    let tb = |exc: &str| {
        lines(&[
            "Traceback (most recent call last):",
            "  File \"train.py\", line 377, in train_exp",
            "    self.loss.backward()",
            exc,
        ])
    };
    assert_eq!(class_of(&tb("torch.cuda.OutOfMemoryError")), GpuOom);
    assert_eq!(class_of(&tb("MemoryError: bad allocation")), HostOom);
    assert_eq!(
        class_of(&tb(
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."
        )),
        HostOom
    );
    // Mentions of the class are not reports.
    for l in [
        "[verl] tip: to avoid torch.cuda.OutOfMemoryError, lower ppo_micro_batch_size_per_gpu",
        "notes: 'ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict'",
        "WARNING 03-14 14:33:45 [worker.py:12] RayTaskError(OutOfMemoryError) caught; retrying",
        "ValueError: retry_on must be one of OutOfMemoryError, TimeoutError",
        "java.lang.OutOfMemoryError: Java heap space",
    ] {
        assert_ne!(class_of(&lines(&[l])), GpuOom, "{l}");
    }
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
        // A positive profiled value is SGLang capping the pool: a warning (the negative one is
        // an empty KV budget, issue 20, asserted below).
        "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value 561981. Use the profiled value instead.",
        "INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 1478, # CPU blocks: 2048",
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
        class_of(
            "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead.\n"
        ),
        KvCache
    );
    assert_eq!(
        class_of("INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 0, # CPU blocks: 256\n"),
        KvCache
    );
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
    // SGLang's CUDA-graph capture out of memory: its own advice is a lower
    // --mem-fraction-static, the kv_cache ladder's step (issue 40), not a smaller batch.
    assert_eq!(
        class_of(
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        ),
        KvCache
    );
    // Any other capture failure quotes its exception and the same advice: error.
    assert_eq!(
        class_of(
            "Exception: Capture cuda graph failed: Connection closed by peer [10.0.0.5]:29500\n"
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
        serde_json::json!({
            "class": "gpu_oom",
            "evidence": {"line": 1, "text": OOM, "rule": "gpu-oom-message"},
            "memory": {"tried_to_allocate_gib": 20.0 / 1024.0}
        })
    );
    // A verdict without memory numbers has no `memory` key (older records read the same).
    let v = classify_bytes(b"ImportError: cannot import name 'x'\n");
    assert!(serde_json::to_value(&v).unwrap().get("memory").is_none());
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
fn issue20_real_log_shapes_classify() {
    // One line each, in the form the frameworks print them (sources: tests/corpus/).
    let cases = [
        (
            "The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            KvCache,
        ),
        (
            "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`.",
            KvCache,
        ),
        (
            "INFO 06-12 08:12:23 gpu_executor.py:45] # cuda blocks: 0, # CPU blocks: 1024",
            KvCache,
        ),
        ("OSError: [Errno 12] Cannot allocate memory", HostOom),
        (
            "RuntimeError: [enforce fail at ..\\c10\\core\\CPUAllocator.cpp:75] data. DefaultCPUAllocator: not enough memory: you tried to allocate 17376997200 bytes. Buy new RAM!",
            HostOom,
        ),
        (
            "29.475s: flux-shell[0]: ERROR: oom: Memory cgroup out of memory: killed 1 task on picl7.",
            HostOom,
        ),
        (
            "RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed.",
            HostOom,
        ),
        (
            "[2023-07-04 17:31:27,755] [ERROR] [launch.py:321:sigkill_handler] ['python', 'x.py'] exits with return code = -9",
            HostOom,
        ),
        (
            "THCudaCheck FAIL file=/pytorch/THC/generic/THCStorage.c line=82 error=2 : out of memory",
            GpuOom,
        ),
        (
            "(SGLangHttpServer pid=250977) [torch_memory_saver.cpp] CUresult error: 2 (out of memory)  file=csrc/utils.h func=cu_mem_create line=194",
            GpuOom,
        ),
        (
            "SUBPROCESS: RuntimeError: CUDA error: out of memory",
            GpuOom,
        ),
        (
            "!!! Exception during processing !!! HIP out of memory. Tried to allocate 35.31 GiB. GPU 0 has a total capacity of 19.94 GiB of which 13.47 GiB is free.",
            GpuOom,
        ),
        (
            "OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.06 GiB is free.')",
            GpuOom,
        ),
        ("salloc: error: Node failure on worker-1", NodeFail),
        ("srun: error: Node failure on jean-zay-iam49", NodeFail),
        // (A C++ server's `CUDA Error: misaligned address (716) ...` is known by the
        // `terminate called after throwing` it prints next: needles are at most 64.)
        (
            "RuntimeError: CUDA error: unspecified launch failure",
            Error,
        ),
        (
            "RuntimeError: p.block != nullptr && p.block->ptr != nullptrINTERNAL ASSERT FAILED at \"../c10/cuda/CUDACachingAllocator.cpp\":991, please report a bug to PyTorch.",
            Error,
        ),
        (
            "terminate called after throwing an instance of 'c10::Error'",
            Error,
        ),
        // (Device asserts are known by the `RuntimeError: CUDA error: device-side assert
        // triggered` that follows them.)
        (
            "RuntimeError: CUDA error: device-side assert triggered",
            Error,
        ),
        (
            "(EngineCore pid=1) ERROR 07-15 21:01:01 [core.py:1240] RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered",
            Error,
        ),
    ];
    for (l, want) in cases {
        assert_eq!(class_of(&format!("{l}\n")), want, "{l}");
    }
    // The same words where they are not a report.
    for l in [
        "RuntimeError: unknown retry trigger 'CUDA error: misaligned address'",
        "notes: 'salloc: error: Node failure on worker-1'",
        "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value 561981. Use the profiled value instead.",
        "hint: OSError: [Errno 12] Cannot allocate memory means /dev/shm is too small",
        "    except MemoryError:",
    ] {
        assert_eq!(class_of(&format!("{l}\n")), None, "{l}");
    }
}

/// The third holdout's shapes (tests/corpus/holdout3), made into rules with their traps: the
/// driver's report of a lost GPU, a cloud machine reclaimed under the job, a paste that cut a
/// Ray wrapper's name.
#[test]
fn third_holdout_shapes_and_their_traps() {
    let cases: &[(&str, FailureClass)] = &[
        (
            "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",
            NodeFail,
        ),
        (
            "[ 8123.4] NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
            NodeFail,
        ),
        (
            "NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.",
            NodeFail,
        ),
        // The application's own faults are not the node's.
        (
            "NVRM: Xid (PCI:0000:06:00): 13, pid=42, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)",
            FailureClass::None,
        ),
        (
            "NVRM: Xid (PCI:0000:06:00): 31, pid=42, name=python, Ch 00000008, intr 10000000. MMU Fault",
            FailureClass::None,
        ),
        (
            "start-worker 2024/12/17 16:03:58 GCP Metadata Service says termination is imminent",
            Preempted,
        ),
        (
            "Dec 17 16:04:01 node7 kernel: [8123.456] NVRM: Xid (PCI:0000:06:00): 79, pid=0, GPU has fallen off the bus.",
            NodeFail,
        ),
        // Mentions: an echoed or commented line, a health check or a note quoting an Xid is
        // not the event.
        (
            "echo \"NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.\"",
            FailureClass::None,
        ),
        (
            "node health: last boot saw NVRM: Xid (PCI:0000:06:00): 119, GSP timeout",
            FailureClass::None,
        ),
        (
            "The Xid list: NVRM: Xid (PCI:x): 79 means the GPU fell off the bus",
            FailureClass::None,
        ),
    ];
    for (log, want) in cases {
        assert_eq!(class_of(&format!("{log}\n")), *want, "{log}");
    }
    // A watcher that announces itself, or docs about preemptible VMs, must not hide the
    // real failure after them (preemption outranks an OOM).
    for watcher in [
        "INFO 2025-01-01 00:00:00 Spot instance termination handler started",
        "Starting spot/termination-time watcher",
        "(TaskRunner pid=1) INFO: Spot instance termination notices will trigger a checkpoint",
        "WARNING: termination is imminent for preemptible VMs older than 24h (docs)",
    ] {
        assert_eq!(class_of(&lines(&[watcher, OOM])), GpuOom, "{watcher}");
    }
    // A traceback whose last line a paste cut inside Ray's wrapper is still an error.
    let cut = lines(&[
        "Traceback (most recent call last):",
        "  File \"/w/verl/trainer/main.py\", line 105, in main",
        "    ray.get(runner.run.remote(ppo_config))",
        "ray.exceptions.RayTaskError(ValueErr",
    ]);
    assert_eq!(class_of(&cut), Error);
}

/// TensorFlow's `ResourceExhaustedError` ends a traceback as an OOM only when its message says
/// no more than that or names one: the class is raised for a gRPC message over its limit too.
#[test]
fn resource_exhausted_is_an_oom_only_when_its_message_is_one() {
    let ending = |message: &str| {
        class_of(&lines(&[
            "Traceback (most recent call last):",
            "  File \"x.py\", line 1, in <module>",
            &format!("tensorflow.python.framework.errors_impl.ResourceExhaustedError: {message}"),
        ]))
    };
    assert_eq!(ending("2 root error(s) found."), GpuOom);
    assert_eq!(
        ending("OOM when allocating tensor with shape[8,1024,4096] and type float"),
        GpuOom
    );
    assert_eq!(
        ending("Received message larger than max (536870912 vs. 4194304)"),
        Error
    );
}
