//! Failure classification: from a job's log bytes (and, later, the scheduler's verdict)
//! to one [`FailureClass`] with the line that proves it.
//!
//! # Theory of operation
//!
//! The log is consumed as a byte stream ([`Scanner::feed`]), in chunks that may split
//! lines anywhere; old bytes are never revisited. Nearly every byte of a training log is
//! noise (progress bars, metrics), so the scanner is built around *not* looking at lines:
//!
//! 1. **Candidate search over whole regions.** Every signature in the rule table
//!    (`rules.rs`) names one or more case-sensitive *needles*, literals that any match
//!    must contain (`"f memor"`, `"CANCELLED AT"`, `"kill event"`, ...).
//!    All needles (the fewer the faster — rules share them: `f memor` serves every `... out of
//!    memory` message), sorted, are split over leftmost-first `aho-corasick` packed searchers
//!    of at most 64 each (Teddy slows down as its buckets fill), each a SIMD Teddy search that
//!    confirms the literal and reports which needle matched; a candidate is the leftmost hit
//!    of any, each searcher's next hit cached while a region is scanned. Teddy fingerprints a needle by its first bytes, so
//!    needles start where the text is rare (`ceeded`, not `memory limit`, whose `mem` is in
//!    every memory report; each choice measured on the two bench logs). It runs
//!    over the complete-lines part of each chunk in one go; no per-line work happens for
//!    lines without a needle.
//! 2. **Map a hit back to its line.** `memrchr`/`memchr` find the enclosing `\n`s; the
//!    line number is maintained lazily by SIMD-counting `\n` only between hits (and once
//!    over the remainder of a chunk). Lines without a needle cost nothing else.
//! 3. **Reporting position or mention** (`normalise.rs`, then `position.rs`). A line may
//!    hold several `\r`-separated segments (tqdm rewrites its bar with `\r`). Each segment
//!    holding a needle is normalised: stripped, repeatedly and in any order, of the decorations
//!    launchers and loggers put before what they report — a table, `data/decorations.tsv`
//!    ([`decorations`]), whose rows are either recognised by code (the common ones below) or
//!    regexes (pdsh's `host: `, mpirun's `[1,0]<stderr>:`, kubectl's `[pod/x/c] `, level tags
//!    of any case, syslog and dmesg headers, escaped colour codes, a quoted paste, JSON error
//!    bodies). The common ones, recognised by code: ANSI, Ray's
//!    `(WorkerDict pid=..)`, `[rank3]:`, glog `[E314 ..ProcessGroupNCCL.cpp:607]`,
//!    timestamps, vLLM/SGLang/Python-logging headers with their level (Hydra's
//!    `[time][logger.name][LEVEL] - ` too), `srun -l` labels,
//!    upper-case stream labels like `SUBPROCESS: `, ComfyUI's `!!! ... !!!` banner).
//!    A needle selects nothing when the body is a *mention*: an echoed command (`+ `,
//!    `$ `), a `key: value` / `key=value` / `--flag` config or help line (unless an error word
//!    and its colon stand in it: `bash: fork: retry: Cannot allocate memory`), or when the
//!    needle sits inside quotes (a quote opened right after `error ` / `error: ` holds a
//!    re-raised error and does not count, nor does the quote of an exception repr such as
//!    Hydra's `OutOfMemoryError('CUDA out of memory ...')` anywhere on the line but after
//!    `raise`, nor C++'s `throwing an instance of '...'`); on a warning/info-level line no
//!    *message* rule counts.
//!    These checks are byte-level and come before any regex, so trap lines cost little.
//! 4. **Confirm on the segment.** Each remaining needle selects the rules that use it and
//!    their precise regex (plus an optional `unless` trap regex) runs on that segment only.
//!    A rule of kind *message* (the words of an error message: `CUDA out of memory`, `No
//!    available memory for the cache blocks`, ...) decides only where a report starts —
//!    the body starts with an exception name (`torch.OutOfMemoryError: `,
//!    `ray.exceptions.RayTaskError(X): `) or an error word (`error:`, `failed`), an
//!    error-level header introduced the line, the match opens the body, or it follows an
//!    error word and its colon, an error-level tag or an exception's repr mid-line (`Server
//!    error: CUDA out of memory`, `[TM][ERROR] CUDA runtime error: out of memory`). A rule of kind
//!    *lead* (a wrapper naming its cause's class: `RayTaskError(OutOfMemoryError)`) decides
//!    only where it opens the body. A rule of kind
//!    *format* (Slurm banners, cgroup events, NCCL watchdog, torchrun's exit report) is
//!    its own line format and decides unless the line is a mention.
//!    Segment-level traps skip `set -x` echoes (line starts with `+`s and a space),
//!    `#` comment lines (a dumped yaml config), SGLang `ServerArgs(...)` dumps and verl
//!    `pprint` config dumps. Some rules *claim* their segment (Hydra's override list,
//!    SGLang's CUDA-graph advice): when they match, nothing else on that segment counts.
//! 5. **Record the first hit per precedence slot** (see below), as [`Evidence`]: 1-based
//!    line number and the segment's text (lossy UTF-8, ANSI colour stripped, trimmed,
//!    capped at ~400 chars, windowed around the match for very long segments). Once a
//!    slot holds its hit, the rules feeding it are skipped for the rest of the stream,
//!    so a log that repeats one failure line a million times stays cheap.
//! 6. **Python tracebacks and the terminal exception** (`terminal.rs`). A `Traceback
//!    (most recent call last)` header starts a small follower that walks the next lines
//!    (only while active), learns the frame prefix (Ray's `(WorkerDict pid=..)`, vLLM's
//!    logger header, torchrun's Root Cause indentation, or none), skips interleaved output
//!    of other processes and records the final `SomeError: message` line as a weak
//!    `error` (the first one) and as the *terminal* exception (the last one). Ray's
//!    `RayTaskError(X): ...` is followed on to the worker's own exception line below it.
//!    Tracebacks after `Exception ignored in` / atexit / logging-error reports are
//!    swallowed exceptions and end nothing. The terminal exception is *memory* (a memory
//!    rule matches it), *teardown* (NCCL / c10d errors, `ChildFailedError`,
//!    `ActorDiedError`, `RayTaskError(..)`, `KeyboardInterrupt`, `SignalException`, broken
//!    pipes, DataLoader workers killed, wrapper lines) or *other*.
//!
//! **Swallowed failures** are not the scanner's: a line such as genrl's `Error occurred during
//! training, continuing...` ends a run only for the trainer whose template declares it, so
//! [`SwallowWatch`] counts a template's [`SwallowRule`]s beside the scanner and
//! [`swallow::answer`] turns a log's verdict into the failure to answer (see [`swallow`]).
//!
//! Throughput: see `scripts/bench-classify.sh` (a realistic and an adversarial 1 GB log,
//! against `grep -E -f`, `rg -f`, `rg -F -f` of the needles, and `cat`).
//!
//! **Memory numbers.** A hit in a memory slot (`kv_cache`, `host_oom`, `gpu_oom`) also reads
//! the numbers its whole line states — torch's request, capacity, free, allocated,
//! reserved-but-unallocated and other processes; vLLM's start-up and KV-cache figures;
//! SGLang's `mem_fraction_static`; host use — into [`MemoryFacts`] (see [`memory`]), with the
//! stage and step that the traceback it ends names (`update_actor`, `backward`, ...).
//! Tracebacks note their phase only from their own frame lines, so this costs nothing on
//! lines without a needle.
//!
//! Memory is bounded: the partial last line is kept up to [`LINE_CAP`] bytes. A longer
//! line (e.g. megabytes of `\r` progress bar) is scanned in pieces as it grows, keeping a
//! 4 KiB overlap so a signature straddling a piece boundary is still seen; it keeps its
//! line number. Everything else is one `Option<Evidence>` per slot.
//!
//! # Precedence (highest first)
//!
//! | slot | class | what |
//! |---|---|---|
//! | 1 | `timeout` | Slurm `*** JOB/STEP .. CANCELLED AT .. DUE TO TIME LIMIT ***` (old + new formats); other schedulers' limits: PBS walltime, LSF `TERM_RUNLIMIT`, `JobState=TIMEOUT`, a sacct row, Kubernetes `DeadlineExceeded`, Flux's `exception type="timeout"`, submitit's `timed-out and not checkpointable`, Modal's function timeout, a CI runner's job or step limit, AWS Lambda's `Task timed out`, gitlab-runner's job limit; salloc's revoked allocation, Torque's and Grid Engine's walltime kills, qacct's `enforced h_rt limit`, OpenPBS's `Exit_status = -29`, CRAB's and HTCondor's wall-clock limits, dstack's `max duration exceeded` |
//! | 2 | `preempted` | Slurm `DUE TO PREEMPTION`, `DUE TO JOB REQUEUE`; a GCP machine reclaimed (the metadata server's notice, a line ending `termination is imminent`); `JobState=PREEMPTED`, LSF `TERM_PREEMPT`, PBS's `job preempted`, Kubernetes `Preempted by`, SkyPilot's `cluster is preempted`, a spot instance reclaimed or its interruption notice received, submitit's `this job is preempted`, the kubelet's `Preempted in order to admit critical pod`, a spot VM preempted during run time (Cromwell), dstack's `INTERRUPTED_BY_NO_CAPACITY`, HTCondor's `Job was evicted.`, Kueue's `Preempted to accommodate a workload`, GCE's `compute.instances.preempted` operation, a described `state: PREEMPTED` (not vLLM's preempted sequence groups) |
//! | 3 | `node_fail` | Slurm `DUE TO NODE FAILURE`, `UNCORRECTABLE MEMORY ERROR AT`; srun/salloc `error: Node failure on`; the NVIDIA driver's `NVRM: Xid` of a lost GPU (48, 62, 74, 79, 95, 119, 120, 154; `GPU has fallen off the bus`, also without its Xid); `NODE_FAIL`, PBS's execution node down / MOM unreachable, Ray's dead node, `GPU is lost`, uncorrectable ECC or hardware errors, an NPU's lost heartbeat, nvidia-smi's `Unable to determine the device handle`, an InfiniBand adapter's `local catastrophic error`; Slurm's `BOOT_FAIL`, PBS's sister node asking the job to die, HTCondor's expired job lease, Kubernetes' `NodeNotReady` and node-condition evictions (not of the job's own making), DCGM's Xids of a lost GPU and double-bit ECC counts |
//! | 4 | `kv_cache` | vLLM no cache blocks / max seq len vs KV cache (also as the engine logs it, without an exception name); SGLang `Not enough memory ... --mem-fraction-static`, `Prefill/Decode out of memory`, `alloc_req_slots runs out of memory`, a CUDA-graph capture out of memory; the engine's own empty-KV reports (SGLang's negative profiled `max_total_tokens`, vLLM's `# GPU blocks: 0` and negative `Available KV cache memory`); TGI's prefill budget; a KV-cache allocator's refusal (vllm.rs) |
//! | 5 | `host_oom` | Slurm cgroup `oom_kill`/`oom-kill` events, `Out Of Memory` task, jobacct limit kill; Ray's memory monitor (any line of its report); raylet `N>0 Workers killed due to memory pressure`, the pre-2.2 raylet's `System memory low at node ... killing`; the kernel OOM killer in all its wordings, Flux's memory cgroup kill; Kubernetes `OOMKilled` and memory eviction; PBS/Torque, LSF, HTCondor memory kills, `OUT_OF_MEMORY`; `Cannot allocate memory` (errno 12, fork, mmap), `DefaultCPUAllocator: not enough memory` / `can't allocate memory`, numpy's and Rust's allocation failures, the JVM's `OutOfMemoryError` (heap, GC overhead, metaspace, direct buffers), Go's `fatal error: out of memory`, V8's `JavaScript heap out of memory`, .NET's `System.OutOfMemoryException`, Arrow's `ArrowMemoryError`, a traceback ending in Python's `MemoryError` (frames or none; not one whose message names a device allocator); systemd's OOM-killed unit, WMCore's `maxPSS` kill, Grid Engine's `h_vmem`, HTCondor's cgroup memory limit, OpenPBS's `Exit_status = -27/-26`, AWS Batch's `Container killed due to memory usage`, Ray < 1.2's `RayOutOfMemoryError`, PaddlePaddle's host allocator |
//! | 6 | `gpu_oom` | torch CUDA/HIP/NPU/XPU/HPU/MPS OOM (all formats), `CUDA error: out of memory` and the runtimes' other words for it (`CUDA runtime error ...: out of memory`, `cudaMalloc failed: out of memory`, the error enums), cuBLAS/cuDNN alloc, NCCL `Cuda failure 'out of memory'` and `Failed to CUDA calloc`, `THCudaCheck ... error=2 : out of memory`, `CUresult`/`cudaError error: 2 (out of memory)`, XLA/TPU and TensorFlow allocation failures, Gaudi's `PT_DEVMEM`, Paddle's `Out of memory error on GPU`, vLLM startup free-memory / memory-profiling errors, sampler warm-up OOM; the device runtimes' own error names anywhere on a reporting line (`cudaErrorMemoryAllocation`, `CUDA_ERROR_OUT_OF_MEMORY`, HIP, Level Zero, Vulkan, OpenCL, Metal), reporters wrapping the runtime's `out of memory` (CTranslate2), RAPIDS' RMM, the AWS Neuron runtime's allocator, TensorFlow's BFC allocator giving up, CUDA.jl's `Out of GPU memory` |
//! | 7 | `gpu_oom` (weak) | the class alone: Ray's `RayTaskError(OutOfMemoryError)` (torch's text in a worker's log or cut off), a traceback ending in `torch.cuda.OutOfMemoryError` with no message, or in TensorFlow's `ResourceExhaustedError` whose message names nothing else |
//! | 8 | `host_oom` (weak) | bare SIGKILL: `Signal 9 (SIGKILL) received by PID`, `exitcode: -9`, an exit status 137 (not a hint explaining one), `return code = -9`, the launcher shell's job-control `line N: PID Killed  cmd`, `DataLoader worker (pid N) is killed by signal: Killed`, an interactive shell's bare `Killed`, `exit code -9`, a Go program's child ended by `signal: killed` (AWS Lambda's runtime, Ollama's runner), glibc's Chinese `已杀死`, pinned host memory refused (`cudaHostAlloc`), Python's `MemoryError` opening a line, `torch.multiprocessing`'s `process N terminated with signal SIGKILL`; C++'s `terminate called after throwing an instance of 'std::bad_alloc'`; YARN's container and Dask's worker killed over their memory (which the job may survive) |
//! | 9 | `nccl_timeout` | NCCL (and HCCL, XCCL) watchdog collective timeout, `Timeout at NCCL work`, Gloo's `Timed out waiting ..ms for recv operation`, the heartbeat monitor's `Terminating the process after attempting to dump debug info`, another rank's `Received a dump signal due to a collective timeout`, torchelastic's `RendezvousTimeoutError`, c10d's TCPStore `waiting for clients` and a stuck watchdog; TensorFlow's collective `StartAbort DEADLINE_EXCEEDED`, the JAX/TF coordination service's `heartbeat timeout`, Ascend CANN's stream and task timeouts and HCCL's notify timeout (only reachable when no OOM of any kind was seen) |
//! | 10 | `error` | import errors, CUDA faults that are not OOM (`CUDA error: X` and C++'s `CUDA Error: X`: misaligned address, unspecified launch failure, device-side assert; a kernel's own `block: [..], thread: [..] Assertion `..` failed` line; NCCL's `Cuda failure N 'X'`; an illegal memory access; `CUDACachingAllocator` internal asserts), native crashes (`Fatal Python error`, `terminate called after throwing`, `THCudaCheck FAIL`), config validation (`must be divisible by`), `Capture cuda graph failed` (other than out of memory), a torch OOM asking for over 100 times the card, plain `scancel` banner |
//! | 11 | `error` (weak) | wrappers: Ray `ActorDiedError`, `Engine core initialization failed`, `Scheduler hit an exception`, sigquit, Hydra `Error executing job with overrides`, torchrun `ChildFailedError`; final exception line of any Python traceback |
//! | – | `none` | nothing recognised |
//!
//! **The terminal error decides.** A memory hit (slots 4–8) is superseded when the
//! terminal exception is *other* and comes after it: a caught/retried OOM followed by a
//! `FileNotFoundError` that ends the process is `error`, with that exception (or a
//! slot-10 hit) as evidence. Teardown after an OOM (NCCL watchdog, `ChildFailedError`,
//! Ray `ActorDiedError`, `RayTaskError(OutOfMemoryError)`, Hydra) leaves the OOM standing.
//! Slurm banners (slots 1–3) are never superseded. When a weak `error` wins and the
//! terminal exception is *other*, it is the evidence rather than an earlier wrapper.
//! Mentions (step 3) never reach any slot.
//!
//! **A failed job's reading** ([`Verdict::given_failure`]). When the log names no failure in a
//! reporting position (or only a generic wrapper), the last few segments whose memory rules
//! did not decide are kept, and judged loosely only when a verdict is asked for: a memory
//! failure's words there, outside quotes and not on a warning line, within 10 lines of the
//! end and after any other exception that ended the process, make the reading for a job the
//! scheduler says failed (`certainty: likely`). A successful job keeps the strict reading.
//! A torch OOM whose request is more than 100 times the card's capacity is a size computed
//! wrong, so `error`.
//!
//! Within a slot the earliest line wins. A class's strong slot beats its weak slot even
//! when the weak hit came first (e.g. a specific `ImportError` beats an earlier Ray
//! `ActorDiedError`).
//!
//! Bare SIGKILL (slot 8) is any `kill -9` (scancel, Slurm's kill after the time-limit
//! grace, `ray stop --force`), so it ranks below GPU OOM and only explains a failure when
//! no device OOM was seen; it still ranks above an NCCL timeout (a rank killed by the
//! OOM killer leaves its peers hanging in collectives) and above generic errors. The shell's
//! job-control line (`./run_rl_swarm.sh: line 649:  9746 Killed  python ...`) is such a
//! report, and so is an interactive shell's bare `Killed` (every real log in the corpus that
//! ends in it, 12 of them, is the OOM killer's); srun's `task 1: Killed` of a rank it stopped
//! after another failed is not read, even for a failed job.

pub mod corpus;
pub mod decorations;
mod engine;
pub mod measure;
pub mod memory;
mod normalise;
mod position;
pub mod prefilter;
mod rules;
mod scan;
pub mod storage;
pub mod swallow;
mod terminal;
mod text;

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use measure::{MeasureReader, Measured};
pub use memory::{MemoryFacts, ProcessUse, Stage, Step};
pub use normalise::explain as explain_decorations;
pub use scan::LINE_CAP;
pub use swallow::{SwallowRule, SwallowWatch, Swallowed};

/// The candidate search's literals (for `examples/prefilter-order.rs`).
pub fn prefilter_literals() -> Vec<&'static str> {
    engine::literals()
}

/// What went wrong with an attempt. Names are the wire names used in `--json` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    GpuOom,
    KvCache,
    HostOom,
    Timeout,
    Preempted,
    NodeFail,
    NcclTimeout,
    /// The job was RUNNING but its logs stopped growing for the hang timeout. Never produced
    /// by the scanner; the watcher decides it.
    Hang,
    Error,
    None,
}

/// What orch does about a failure class: one answer per class, matched exhaustively, so that
/// a new class does not compile until it has one (the planner, the climb, the evidence store
/// and the corpus's scoring all ask here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The configuration does not fit the card: a change of configuration answers it (the
    /// ladder's memory steps, the estimator's search).
    Memory,
    /// Not the configuration's doing: the same configuration again, from the last checkpoint.
    Resubmit,
    /// A collective that timed out: the ladder's step for it where there is one, else the same
    /// configuration once more from the last checkpoint.
    RetryOnce,
    /// A failure a configuration change will not fix: give up and say why.
    GiveUp,
    /// Nothing failed.
    Nothing,
}

impl FailureClass {
    /// The classes a change of configuration answers.
    pub const MEMORY: [FailureClass; 3] = [
        FailureClass::GpuOom,
        FailureClass::KvCache,
        FailureClass::HostOom,
    ];

    /// What orch does about this class.
    #[must_use]
    pub const fn policy(self) -> Policy {
        match self {
            FailureClass::GpuOom | FailureClass::KvCache | FailureClass::HostOom => Policy::Memory,
            FailureClass::Timeout
            | FailureClass::Preempted
            | FailureClass::NodeFail
            | FailureClass::Hang => Policy::Resubmit,
            FailureClass::NcclTimeout => Policy::RetryOnce,
            FailureClass::Error => Policy::GiveUp,
            FailureClass::None => Policy::Nothing,
        }
    }

    /// A class a change of configuration answers (see [`Policy::Memory`]).
    pub const fn is_memory(self) -> bool {
        matches!(self.policy(), Policy::Memory)
    }

    /// The wire name (same as serde's).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::GpuOom => "gpu_oom",
            FailureClass::KvCache => "kv_cache",
            FailureClass::HostOom => "host_oom",
            FailureClass::Timeout => "timeout",
            FailureClass::Preempted => "preempted",
            FailureClass::NodeFail => "node_fail",
            FailureClass::NcclTimeout => "nccl_timeout",
            FailureClass::Hang => "hang",
            FailureClass::Error => "error",
            FailureClass::None => "none",
        }
    }
}

/// The line that decided a classification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// 1-based line number (counting `\n`) in the scanned stream.
    pub line: u64,
    /// The matching line (or `\r`-separated segment), lossily decoded, trimmed, capped in length.
    pub text: String,
    /// The signature that decided (a rule of the classifier's table, `python-traceback` for a
    /// traceback's last exception line), for `orch classify -v`. Absent in ledgers written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// Result of scanning one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub class: FailureClass,
    pub evidence: Option<Evidence>,
    /// The numbers the deciding line states about memory (request, capacity, free, other
    /// processes, vLLM/SGLang sizing, host use) and the phase it happened in, for memory
    /// failures (`gpu_oom`, `kv_cache`, `host_oom`) whose log states any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryFacts>,
    /// Precedence of the deciding signature (lower wins), so that verdicts of several logs
    /// of one job can be compared the way the scanner ranks lines within one log (a bare
    /// SIGKILL is weaker evidence of host OOM than a cgroup kill). `u8::MAX` for `none`.
    #[serde(skip, default = "no_rank")]
    pub rank: u8,
    /// `likely` for the reading of a failed job that a line outside a reporting position
    /// decided ([`Verdict::given_failure`]); absent (`certain`) otherwise.
    #[serde(default, skip_serializing_if = "Certainty::is_certain")]
    pub certainty: Certainty,
    /// The reading for a job the scheduler says failed, where it differs from this one: the log
    /// names no failure (or only a generic wrapper) in a reporting position, but a memory
    /// failure's words stand near its end outside one (a line a launcher or paste decorated in
    /// a way the normaliser does not know, a message mid-line). A successful job keeps the
    /// strict reading.
    #[serde(skip)]
    pub if_failed: Option<Box<Verdict>>,
}

/// How sure a verdict is of its class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Certainty {
    /// A signature in reporting position decided (or nothing was found).
    #[default]
    Certain,
    /// The job failed and a memory failure's words near the end of its log decided, outside a
    /// reporting position.
    Likely,
}

impl Certainty {
    pub fn is_certain(&self) -> bool {
        *self == Certainty::Certain
    }
}

impl Verdict {
    /// The reading for a job the scheduler says failed (see [`Verdict::if_failed`]).
    pub fn given_failure(&self) -> &Verdict {
        self.if_failed.as_deref().unwrap_or(self)
    }
}

fn no_rank() -> u8 {
    u8::MAX
}

/// Incremental scanner: feed it bytes as they arrive; it never needs them again.
///
/// Memory is bounded by [`LINE_CAP`] (the partial last line) plus one piece of evidence
/// per precedence slot.
#[derive(Debug, Default, Clone)]
pub struct Scanner {
    core: scan::Core,
}

impl Scanner {
    /// A scanner positioned at line 1 of an empty stream.
    pub fn new() -> Self {
        Self::default()
    }
    /// Feed the next chunk of the stream (may split lines anywhere).
    pub fn feed(&mut self, chunk: &[u8]) {
        self.core.feed(chunk);
    }
    /// Verdict for everything fed so far (treats a trailing partial line as complete).
    pub fn verdict(&self) -> Verdict {
        self.core.verdict()
    }
}

/// Classify an in-memory log.
pub fn classify_bytes(bytes: &[u8]) -> Verdict {
    let mut s = Scanner::new();
    s.feed(bytes);
    s.verdict()
}

/// Read size used by [`classify_path`] and [`classify_reader`]: small enough that the chunk
/// just copied is still in the CPU's cache when the scanner reads it (measured on a 256 MB
/// realistic log: 2 MiB reads scanned at about half the speed of a memory map, 64–128 KiB
/// reads at the map's speed).
const READ_CHUNK: usize = 128 * 1024;

/// Classify a log file, read in [`READ_CHUNK`]s. It is read, never memory-mapped: a log that
/// another process truncates while it is scanned (a job restarted into the same file, log
/// rotation) then ends the scan early instead of killing this process with `SIGBUS`.
pub fn classify_path(path: &Path) -> std::io::Result<Verdict> {
    classify_reader(std::fs::File::open(path)?)
}

/// Classify everything a reader yields, streaming it through a [`Scanner`].
pub fn classify_reader(mut r: impl Read) -> std::io::Result<Verdict> {
    // The buffer starts on a page boundary, as the page cache's pages do: the kernel's copy
    // into a buffer 16 bytes past one (where the allocator puts a large block) ran at a third
    // of the speed (4K aliasing; measured on the 2-core VM, 0.15 s vs 0.04 s of system time
    // per 256 MB).
    const PAGE: usize = 4096;
    let mut storage = vec![0u8; READ_CHUNK + PAGE];
    let start = storage.as_ptr().align_offset(PAGE).min(PAGE);
    let buf = &mut storage[start..start + READ_CHUNK];
    let mut s = Scanner::new();
    loop {
        let n = match r.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        s.feed(&buf[..n]);
    }
    Ok(s.verdict())
}

/// POSIX-ERE (`grep -E`) versions of the positive signatures, one per rule, for a
/// `grep -E -f` comparison benchmark.
///
/// Approximations: ERE has no look-around and no `\b`/`\d`/`\s`, so word boundaries
/// become `([^0-9]|$)` or are dropped, and the trap logic (`unless` exclusions, `set -x`
/// and config-dump skips, segment claiming, non-zero raylet counts) is not expressible
/// — grep matches a superset of what the scanner reports. The traceback rule is given
/// as its header line (grep cannot follow a traceback to its exception line).
pub fn grep_patterns() -> Vec<(FailureClass, String)> {
    rules::RULES
        .iter()
        .filter_map(|r| {
            let class = match r.action {
                rules::Action::Hit(slot) => slot.class(),
                rules::Action::TracebackStart | rules::Action::IgnoredTracebackNext => {
                    FailureClass::Error
                }
                // Only changes what a later line means.
                rules::Action::Teardown => return None,
            };
            Some((class, r.ere.to_string()))
        })
        .collect()
}
