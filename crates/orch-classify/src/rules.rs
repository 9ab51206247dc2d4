//! The signature table: every failure line the classifier recognises, the literal
//! needles that find it cheaply, the precise regex that confirms it, and a POSIX ERE
//! approximation for `grep -E` comparisons.
//!
//! Sources for every pattern are in `shared/reference/failure-signatures.md` (sections
//! a–e, candidate regexes in g) and, for the shapes issue 20 added, in the real-log corpus
//! (`tests/corpus/sources.tsv`); traps (section f) are handled by `unless` regexes, by
//! `claims`, and by the segment-level skips in [`super::scan`].

use super::FailureClass;

/// Precedence slot of a hit. Order of the variants IS the precedence (highest first);
/// each [`FailureClass`] occupies one or two adjacent slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Slot {
    /// Slurm `*** JOB .. CANCELLED AT .. DUE TO TIME LIMIT ***`.
    Timeout,
    /// Slurm `DUE TO PREEMPTION` / `DUE TO JOB REQUEUE`; a cloud machine reclaimed.
    Preempted,
    /// Slurm `DUE TO NODE FAILURE`, `UNCORRECTABLE MEMORY ERROR`; the driver's lost GPU.
    NodeFail,
    /// vLLM / SGLang KV-cache sizing failures.
    KvCache,
    /// Confirmed host-RAM OOM: cgroup oom_kill, Ray memory monitor, kernel OOM killer.
    HostOom,
    /// Device-memory OOM (torch/CUDA/HIP/cuBLAS/NCCL, vLLM startup over-subscription).
    GpuOom,
    /// A device OOM named only by its exception class: Ray's `RayTaskError(OutOfMemoryError)`
    /// wrapper, or `torch.cuda.OutOfMemoryError` with its message cut off. Below [`Slot::GpuOom`]
    /// so that the line with torch's numbers is the evidence whenever the log has it.
    GpuOomWeak,
    /// Bare SIGKILL evidence (`Signal 9 (SIGKILL)`, `exitcode: -9`, exit code 137):
    /// host_oom only when nothing stronger than an NCCL timeout / error was seen.
    HostOomWeak,
    /// NCCL watchdog collective timeout.
    NcclTimeout,
    /// Specific fatal errors: import errors, illegal memory access, config
    /// validation, CUDA-graph capture, user `scancel` banner.
    Error,
    /// Generic fatal wrappers (Ray actor death, Hydra, engine-init wrappers) and the
    /// final exception line of a Python traceback.
    ErrorWeak,
}

/// A set of rules (bit `i`: `RULES[i]`): a needle's rules, a slot's, those already done.
pub(crate) type Mask = u128;

/// The indexes of the rules in `mask`, lowest first.
pub(crate) fn rules_in(mut mask: Mask) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            i
        })
    })
}

/// Number of [`Slot`] variants.
pub(crate) const SLOTS: usize = 11;

impl Slot {
    /// All slots, precedence order.
    pub(crate) const ALL: [Slot; SLOTS] = [
        Slot::Timeout,
        Slot::Preempted,
        Slot::NodeFail,
        Slot::KvCache,
        Slot::HostOom,
        Slot::GpuOom,
        Slot::GpuOomWeak,
        Slot::HostOomWeak,
        Slot::NcclTimeout,
        Slot::Error,
        Slot::ErrorWeak,
    ];

    /// Slots of memory failures, whose lines state numbers worth reading.
    pub(crate) fn is_memory(self) -> bool {
        matches!(
            self,
            Slot::KvCache | Slot::HostOom | Slot::GpuOom | Slot::GpuOomWeak | Slot::HostOomWeak
        )
    }

    /// The class this slot reports as.
    pub(crate) fn class(self) -> FailureClass {
        match self {
            Slot::Timeout => FailureClass::Timeout,
            Slot::Preempted => FailureClass::Preempted,
            Slot::NodeFail => FailureClass::NodeFail,
            Slot::KvCache => FailureClass::KvCache,
            Slot::HostOom | Slot::HostOomWeak => FailureClass::HostOom,
            Slot::GpuOom | Slot::GpuOomWeak => FailureClass::GpuOom,
            Slot::NcclTimeout => FailureClass::NcclTimeout,
            Slot::Error | Slot::ErrorWeak => FailureClass::Error,
        }
    }
}

/// The rank ([`super::Verdict::rank`]) of a class's strong slot: for a verdict that no line of
/// the scanner made (a swallowed failure a template declares).
pub(crate) fn rank_of(class: FailureClass) -> u8 {
    Slot::ALL
        .iter()
        .find(|s| s.class() == class)
        .map_or(u8::MAX, |s| *s as u8)
}

/// What a confirmed rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Record a hit in this slot.
    Hit(Slot),
    /// A Python `Traceback (most recent call last):` header: start following the
    /// traceback to its final exception line, which is recorded as [`Slot::ErrorWeak`].
    TracebackStart,
    /// Python swallowed an exception; the next traceback does not end the process.
    IgnoredTracebackNext,
    /// A runner stopping the job's processes itself, or an exit status that is no kill's: a
    /// later [`TEARDOWN_VOIDS`] hit is that teardown's, not a memory kill.
    Teardown,
}

/// The rule whose hit a [`Action::Teardown`] line before it voids: an exit status of 137
/// (SIGKILL) is the kernel's OOM kill only when nothing else ended the job first. A runner
/// that kills the rest of a job after one process failed (Determined's `killing container`
/// after a trial's `exit code 1`, Horovod's and mpirun's teardown) prints 137 for the
/// processes it killed.
pub(crate) const TEARDOWN_VOIDS: &str = "exit-code-137";

/// The rules that name a crash of the process itself (CPython's fatal error, a C++ exception
/// escaping, a kernel fault, a device-side assert, a corrupted heap): a silent death in the same
/// log ([`Slot::HostOomWeak`]: a kernel restarted, a SIGKILL, an exit 137) is then the crash's,
/// not the OOM killer's, wherever the two stand. Other errors do not explain it away: a
/// rank's import error beside another rank's SIGKILL leaves the SIGKILL the cause.
pub(crate) const CRASHES: [&str; 4] = [
    "native-crash",
    "cuda-fault",
    "cuda-kernel-assert",
    "heap-corruption",
];

/// Where a signature's words may stand to decide a class (see [`super::position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A line format of its own (Slurm banners, cgroup events, NCCL watchdog, torchrun's
    /// exit report): decides unless the line is a mention (echo, comment, config line,
    /// inside quotes).
    Format,
    /// The text of an error message, which tips, configs and help text quote: decides
    /// only in a reporting position (after an exception name or error word, on an
    /// error-level logger line, or at the start of the line's body).
    Message,
    /// The name a report starts with (an exception class alone, a wrapper naming its cause):
    /// decides only at the start of the line's body, never on a warning/info-level line.
    Lead,
    /// A name only a runtime's own error report prints (`cudaErrorMemoryAllocation`,
    /// `CUDA_ERROR_OUT_OF_MEMORY`, `java.lang.OutOfMemoryError: Java heap space`): decides
    /// anywhere on a line that is not a mention, whatever wrapper text reporters put before
    /// it, but never on a warning/info-level line.
    Name,
}

/// One recognised signature.
#[derive(Debug)]
pub(crate) struct Rule {
    /// Short identifier (tests, debugging).
    pub name: &'static str,
    pub action: Action,
    pub kind: Kind,
    /// Case-sensitive literals; every match of `pattern` contains at least one of them.
    pub needles: &'static [&'static str],
    /// Precise Rust regex, run on the `\r`-segment that contains a needle.
    pub pattern: &'static str,
    /// If this also matches the segment, the rule does not fire (trap exclusion).
    pub unless: Option<&'static str>,
    /// A match suppresses every other rule on the same segment (wrapper lines that
    /// quote arbitrary text: Hydra overrides, CUDA-graph capture advice).
    pub claims: bool,
    /// POSIX ERE approximation of `pattern` (for `grep -E`).
    pub ere: &'static str,
    /// Literals one of which the segment must hold before `pattern` runs (none: no check):
    /// rules that share a broad needle (`f memor`) skip their regex on the lines of the
    /// others for the price of a SIMD substring search.
    pub requires: &'static [&'static str],
}

const fn hit(
    name: &'static str,
    slot: Slot,
    needles: &'static [&'static str],
    pattern: &'static str,
    ere: &'static str,
) -> Rule {
    Rule {
        name,
        action: Action::Hit(slot),
        kind: Kind::Format,
        needles,
        pattern,
        unless: None,
        claims: false,
        ere,
        requires: &[],
    }
}

/// A [`Kind::Message`] signature: the text of an error message.
const fn msg(
    name: &'static str,
    slot: Slot,
    needles: &'static [&'static str],
    pattern: &'static str,
    ere: &'static str,
) -> Rule {
    Rule {
        kind: Kind::Message,
        ..hit(name, slot, needles, pattern, ere)
    }
}

// Slurm banner prefix shared by the banner rules (new format `*** JOB 1 ON n CANCELLED AT t
// DUE TO ...`, old format without `ON n`, srun `*** STEP 1.0 ...`).
macro_rules! banner {
    ($tail:literal) => {
        concat!(r"\*\*\* (?:JOB|STEP) \S+ (?:ON \S+ )?", $tail)
    };
}
macro_rules! banner_ere {
    ($tail:literal) => {
        concat!(r"\*\*\* (JOB|STEP) [^ ]+ (ON [^ ]+ )?", $tail)
    };
}

/// The signature table. Order within a slot does not matter (the earliest line wins).
pub(crate) static RULES: &[Rule] = &[
    // ---------------------------------------------------------------- Slurm banners
    hit(
        "slurm-time-limit",
        Slot::Timeout,
        &["CANCELLED AT"],
        banner!(r"CANCELLED AT \S+ DUE TO TIME LIMIT"),
        banner_ere!("CANCELLED AT [^ ]+ DUE TO TIME LIMIT"),
    ),
    // Flux's job eventlog: the time limit ends the allocation with an exception of type
    // `timeout` (`job-exception` event, `note="resource allocation expired"`;
    // flux-core `src/modules/job-manager`), shown by `flux job eventlog` / `flux job attach`.
    hit(
        "flux-timeout-exception",
        Slot::Timeout,
        &["severity=0"],
        r#"\bexception(?: \S+)? type=(?:"timeout"|timeout) severity=0\b"#,
        r#"exception( [^ ]+)? type=("timeout"|timeout) severity=0"#,
    ),
    // submitit's own words when the scheduler's time limit ends a job it cannot requeue
    // (`core/job_environment.py`, `checkpoint_and_try_requeue`: `Job not requeued because:
    // timed-out and not checkpointable.` / `timed-out too many times.`; its log's `Job has
    // timed out. Ran 120 minutes out of requested 120 minutes.`), and a serverless function
    // past its limit (Modal's `FunctionTimeoutError: Task's current input ... hit its timeout
    // of 300s`, raised for `GENERIC_STATUS_TIMEOUT` in the client's
    // `modal/_utils/function_utils.py`).
    hit(
        "runner-time-limit",
        Slot::Timeout,
        &[
            "requeued because: timed-out",
            "Job has timed out. Ran",
            "hit its timeout of",
        ],
        r"Job not requeued because: timed-out (?:and not checkpointable|too many times)|\bJob has timed out\. Ran \d+ minutes out of requested \d+ minutes|\bTask's current input \S+ hit its timeout of \d+(?:\.\d+)?s\b",
        r"Job not requeued because: timed-out (and not checkpointable|too many times)|Job has timed out\. Ran [0-9]+ minutes out of requested [0-9]+ minutes|Task's current input [^ ]+ hit its timeout of [0-9.]+s",
    ),
    // A CI runner's time limit on the job or the step that ran the training or the GPU tests
    // (GitHub Actions' runner: `The job running on runner X has exceeded the maximum execution
    // time of 360 minutes.`, newer `The job has exceeded the maximum execution time of 6h0m0s`;
    // a step's `The action 'Test' has timed out after 360 minutes.`).
    hit(
        "ci-time-limit",
        Slot::Timeout,
        &["maximum execution time of", "has timed out after"],
        r"\bhas exceeded the maximum execution time of \d+(?: minutes|h\d+m\d+s|m\d+s)|\bThe action '[^']*' has timed out after \d+ minutes",
        r"has exceeded the maximum execution time of [0-9]+( minutes|h[0-9]+m[0-9]+s|m[0-9]+s)|The action '[^']*' has timed out after [0-9]+ minutes",
    ),
    // Serverless and CI limits: AWS Lambda's runtime (`Task timed out after 30.03 seconds`),
    // gitlab-runner's job limit (`ERROR: Job failed: execution took longer than 1h0m0s
    // seconds`).
    hit(
        "platform-time-limit",
        Slot::Timeout,
        &["Task timed out after ", "execution took longer than "],
        r"\bTask timed out after \d+(?:\.\d+)? seconds\b|\bJob failed: execution took longer than \S+ seconds\b",
        r"Task timed out after [0-9.]+ seconds|Job failed: execution took longer than [^ ]+ seconds",
    ),
    hit(
        "slurm-preemption",
        Slot::Preempted,
        &["CANCELLED AT"],
        banner!(r"CANCELLED AT \S+ DUE TO (?:PREEMPTION|JOB REQUEUE)"),
        banner_ere!("CANCELLED AT [^ ]+ DUE TO (PREEMPTION|JOB REQUEUE)"),
    ),
    hit(
        "slurm-node-failure",
        Slot::NodeFail,
        &["CANCELLED AT"],
        banner!(r"CANCELLED AT \S+ DUE TO NODE FAILURE"),
        banner_ere!("CANCELLED AT [^ ]+ DUE TO NODE FAILURE"),
    ),
    hit(
        "slurm-uncorrectable-memory",
        Slot::NodeFail,
        &["UNCORRECTABLE MEMORY ERROR"],
        banner!(r"UNCORRECTABLE MEMORY ERROR AT"),
        banner_ere!("UNCORRECTABLE MEMORY ERROR AT"),
    ),
    // A plain `CANCELLED AT <time> ***` is a user/admin scancel. The watcher knows
    // whether it asked for the cancel; from the log alone it is a fatal `error`.
    hit(
        "slurm-cancelled",
        Slot::Error,
        &["CANCELLED AT"],
        banner!(r"CANCELLED AT \S+ \*\*\*"),
        banner_ere!(r"CANCELLED AT [^ ]+ \*\*\*"),
    ),
    // ------------------------------------------------------------------- KV cache
    // An engine's KV-cache allocator refusing its plan (vllm.rs, candle-based:
    // `KVCache allocation failed: Insufficient GPU memory for KVCache allocation.`,
    // `vllm_rs::utils::kvcache_allocator`).
    msg(
        "kv-cache-allocation-failed",
        Slot::KvCache,
        &["ache allocation"],
        r"\bInsufficient GPU memory for KV ?[Cc]ache allocation|\bKV ?[Cc]ache allocation failed\b",
        r"Insufficient GPU memory for KV ?[Cc]ache allocation|KV ?[Cc]ache allocation failed",
    ),
    // Engines outside vLLM/SGLang whose KV cache did not fit beside the weights: ExLlamaV2's
    // auto-split loader (`exllamav2/model.py`, `load_autosplit_gen`: `Insufficient VRAM for
    // model and cache`) and llama.cpp's KV allocation (`src/llama-kv-cache.cpp`: `throw
    // std::runtime_error("failed to allocate buffer for kv cache")`, reported behind the
    // context's own `failed to initialize the context: `).
    msg(
        "exllama-autosplit-no-vram",
        Slot::KvCache,
        &["Insufficient VRAM for model and cache"],
        r"Insufficient VRAM for model and cache",
        r"Insufficient VRAM for model and cache",
    ),
    hit(
        "llamacpp-kv-alloc-failed",
        Slot::KvCache,
        &["failed to allocate buffer for kv cache"],
        r"failed to allocate buffer for kv cache",
        r"failed to allocate buffer for kv cache",
    ),
    msg(
        "vllm-no-cache-blocks",
        Slot::KvCache,
        &["No available memory for the cache blocks"],
        r"No available memory for the cache blocks",
        r"No available memory for the cache blocks",
    ),
    // The engine's whole sentence, which only its report prints: it decides wherever it stands
    // on a reporting line (Xinference logs it after a logger header of its own).
    Rule {
        kind: Kind::Name,
        ..msg(
            "vllm-v0-max-seq-len",
            Slot::KvCache,
            &["tokens that can be stored in KV cache"],
            // The optional head makes the match start where the engine's message starts, so the
            // line vLLM logs without an exception name is in reporting position.
            r"(?:The model's max seq len \(\d+\) is )?larger than the maximum number of tokens that can be stored in KV cache",
            r"larger than the maximum number of tokens that can be stored in KV cache",
        )
    },
    // llama.cpp's server (and its forks) with a batch its KV cache cannot hold: `failed to
    // decode the batch: KV cache is full - try increasing it via the context size`
    // (`tools/server/server.cpp`).
    msg(
        "llama-server-kv-full",
        Slot::KvCache,
        &["KV cache is full"],
        r"KV cache is full - try increasing it via the context size",
        r"KV cache is full - try increasing it via the context size",
    ),
    msg(
        "vllm-v1-max-seq-len",
        Slot::KvCache,
        &["KV cache is needed, which is larger"],
        r"KV cache is needed, which is larger than the available KV cache memory",
        r"KV cache is needed, which is larger than the available KV cache memory",
    ),
    // The same message's head (vLLM's own "models's"), for when the message is wrapped
    // before its figures, as a document quoting it wraps it (tests/corpus,
    // vllm012-kv-max-seq-len-wrapped.log): the exception line alone names the failure.
    msg(
        "vllm-v1-max-seq-len-head",
        Slot::KvCache,
        &["To serve at least one request with the model"],
        r"To serve at least one request with the models?'s max seq len \(\d+\)",
        r"To serve at least one request with the models?'s max seq len \([0-9]+\)",
    ),
    // Huawei's MindIE (vLLM's counterpart on Ascend) failing its warm-up for the prefill budget:
    // `Warmup failed, because of ... out of memory when `maxInputTokenLen` set to 8192. Please
    // try to decrease `maxPrefillTokens` in config.json` — the engine's token budget, not the
    // model's weights, is what a smaller setting answers.
    msg(
        "mindie-prefill-budget",
        Slot::KvCache,
        &["out of memory when "],
        r"\bWarmup failed, because of .*\bout of memory when .*\bdecrease .?maxPrefillTokens",
        r"Warmup failed, because of .*out of memory when .*decrease .?maxPrefillTokens",
    ),
    msg(
        "sglang-mem-fraction-static",
        Slot::KvCache,
        &["Not enough memory. Please try"],
        r"Not enough memory\. Please try to increase --mem-fraction-static",
        r"Not enough memory\. Please try to increase --mem-fraction-static",
    ),
    Rule {
        requires: &[
            "Prefill out of memory",
            "Decode out of memory",
            "alloc_req_slots",
        ],
        ..msg(
            "sglang-token-pool",
            Slot::KvCache,
            &["f memor"],
            r"(?:Prefill|Decode) out of memory\. (?:Try to lower your batch size|This should never happen)|alloc_req_slots runs out of memory",
            r"(Prefill|Decode) out of memory\. (Try to lower your batch size|This should never happen)|alloc_req_slots runs out of memory",
        )
    },
    // The engine's own log of an empty KV budget, with no exception after it when the engine
    // dies first: SGLang's negative profiled token count, vLLM's zero block count (V0 prints
    // it right after `the rest of the memory reserved for KV Cache is -1.05GiB`). Only the
    // negative / zero forms: a positive profiled value is a warning.
    hit(
        "engine-no-kv-room",
        Slot::KvCache,
        &["ofiled valu", "blocks: 0", "KV cache memory: -"],
        r"is larger than the profiled value -\d|# (?:GPU|cuda) blocks: 0\b|Available KV cache memory: -\d",
        r"is larger than the profiled value -[0-9]|# (GPU|cuda) blocks: 0([^0-9]|$)|Available KV cache memory: -[0-9]",
    ),
    // TensorRT-LLM's PyTorch executor naming the component that did not fit its memory
    // (`tensorrt_llm/_torch/pyexecutor`: `Executor creation failed due to insufficient GPU
    // memory.`, then `The following component could not be created: KV cache`).
    msg(
        "trtllm-kv-cache-component",
        Slot::KvCache,
        &["could not be created: KV cache"],
        r"\bThe following component could not be created: KV cache\b",
        r"The following component could not be created: KV cache",
    ),
    // Text Generation Inference's warm-up: the prefill token budget does not fit
    // (`server/text_generation_server/models/flash_causal_lm.py`: `Not enough memory to handle
    // 4096 prefill tokens. You need to decrease --max-batch-prefill-tokens`).
    msg(
        "tgi-prefill-tokens",
        Slot::KvCache,
        &["Not enough memory to handle"],
        r"Not enough memory to handle \d+ (?:prefill )?tokens",
        r"Not enough memory to handle [0-9]+ (prefill )?tokens",
    ),
    // ------------------------------------------------------------ host OOM (strong)
    // Python's `MemoryError` opening a line (alone, or with its message): the last line of a
    // traceback whose header was cut (a paste that starts at the frames), or what `PyErr_Print`
    // writes before an extension gives up (a pyo3 panic `Python API call failed` follows it). Weak: PaddlePaddle raises its device's
    // `ResourceExhaustedError` as a `MemoryError:` too, its message (`Out of memory error on
    // GPU 0`) a few lines later.
    Rule {
        kind: Kind::Lead,
        unless: Some(r"(?i)\b(?:caught|retry|retrying|retried|continuing)\b"),
        ..hit(
            "python-memoryerror-alone",
            Slot::HostOomWeak,
            &["MemoryError"],
            r"(?:builtins\.)?MemoryError(?::.*)?$",
            r"^ *(builtins\.)?MemoryError(:.*)?$",
        )
    },
    // A process that asked the host for memory and got none: `OSError: [Errno 12]`, torch's CPU
    // allocator (`not enough memory`, and c10's older `can't allocate memory: you tried to
    // allocate N bytes. Error code 12`, and its oldest enforce on `posix_memalign`, which Rust's
    // tch prints: `[enforce fail at CPUAllocator.cpp:56] posix_memalign(...) == 0. 12 vs 0`),
    // and Windows' commit limit, in any language (`OSError: [WinError 1455] The paging file is
    // too small for this operation to complete`, `页面文件太小`: the code is the same).
    // (Python's bare `MemoryError` is known where its traceback ends.)
    Rule {
        // A size of 16 digits or more (`memory allocation of 18446744073709551615 bytes
        // failed`: usize::MAX) is an overflow, a bug, not a machine out of memory.
        unless: Some(r"memory allocation of \d{16,} bytes"),
        ..msg(
            "host-alloc-failed",
            Slot::HostOom,
            &[
                "Cannot allocate memory",
                "DefaultCPUAllocator: ",
                "Unable to allocate ",
                "memory allocation of ",
                "enforce fail at CPUAllocator.cpp",
                "WinError 1455",
            ],
            r"memory allocation of \d+ bytes failed|\[Errno 12\] Cannot allocate memory|(?:fork|mmap|malloc|clone)(?:\(\))?(?: failed)?: (?:retry: )?Cannot allocate memory|DefaultCPUAllocator: (?:not enough memory|can't allocate memory)|Unable to allocate [\d.]+ [KMGTP]i?B for an array with shape|\[enforce fail at CPUAllocator\.cpp:\d+\] posix_memalign\(|\[WinError 1455\]",
            r"memory allocation of [0-9]+ bytes failed|\[Errno 12\] Cannot allocate memory|(fork|mmap|malloc|clone)(\(\))?( failed)?: (retry: )?Cannot allocate memory|DefaultCPUAllocator: (not enough memory|can't allocate memory)|Unable to allocate [0-9.]+ [KMGTP]i?B for an array with shape|\[enforce fail at CPUAllocator\.cpp:[0-9]+\] posix_memalign\(|\[WinError 1455\]",
        )
    },
    // Apache Arrow's allocator refusing a buffer, anywhere on a reporting line
    // (`pyarrow.lib.ArrowMemoryError: malloc of size 64 failed`, `arrow/memory_pool.cc`): also
    // where its traceback's header was cut, or a pool worker's traceback follows it.
    Rule {
        kind: Kind::Name,
        unless: Some(r"(?i)\b(?:except|caught|retry|retrying)\b"),
        ..hit(
            "arrow-host-alloc",
            Slot::HostOom,
            &["ArrowMemoryError"],
            r"\bArrowMemoryError: (?:malloc|realloc|calloc) of size \d+ failed\b",
            r"ArrowMemoryError: (malloc|realloc|calloc) of size [0-9]+ failed",
        )
    },
    // Host memory as the other runtimes beside a training job print its exhaustion: Go's
    // runtime (`runtime/malloc.go`, `mem_windows.go`: `fatal error: out of memory`, also after
    // `runtime: VirtualAlloc of N bytes failed with errno=1455`, Windows' commit limit), V8 under
    // Node.js (`heap.cc`: `... Allocation failed - JavaScript heap out of memory`), .NET
    // (`System.OutOfMemoryException`). A child process that a Go program saw die of SIGKILL
    // (`os/exec`'s `ExitError` reads `signal: killed`, wrapped by its caller: AWS Lambda's
    // `Runtime exited with error: signal: killed` at its memory size, Ollama's `llama runner
    // process has terminated: signal: killed`): weak, any SIGKILL reads the same.
    Rule {
        kind: Kind::Name,
        // Not a program that caught it and went on, nor advice quoting it.
        unless: Some(
            r"(?i)\b(?:if|hint|tip|caught|catch|retry|retried|retrying|continuing|handled)\b",
        ),
        ..hit(
            "runtime-host-oom",
            Slot::HostOom,
            &[
                "fatal error: out of memory",
                "fatal error: runtime: out of memory",
                "JavaScript heap out of memory",
                "System.OutOfMemoryException",
            ],
            r"^\s*fatal error: (?:runtime: )?out of memory\s*$|Allocation failed - JavaScript heap out of memory|\bSystem\.OutOfMemoryException\b",
            r"^ *fatal error: (runtime: )?out of memory *$|Allocation failed - JavaScript heap out of memory|System\.OutOfMemoryException",
        )
    },
    msg(
        "go-child-sigkilled",
        Slot::HostOomWeak,
        &["signal: killed"],
        r"\b(?:exited with error|terminated|exit status|failed|error): signal: killed\b",
        r"(exited with error|terminated|exit status|failed|error): signal: killed",
    ),
    hit(
        "slurm-oom-kill-event",
        Slot::HostOom,
        &["kill event"],
        r"Detected \d+ oom[-_]kill event",
        r"Detected [0-9]+ oom[-_]kill event",
    ),
    hit(
        "slurm-oom-killed",
        Slot::HostOom,
        // Printed on the `Detected N oom_kill event` line, and alone by some versions.
        &["kill event", "OOM Killed"],
        r"Some of the step tasks have been OOM Killed",
        r"Some of the step tasks have been OOM Killed",
    ),
    hit(
        "slurm-cgroup-oom-handler",
        Slot::HostOom,
        // Printed on the `Detected N oom-kill event(s)` line, and wrapped onto a line of its own.
        &["kill event", "out-of-memory handler"],
        r"cgroup out-of-memory handler",
        r"cgroup out-of-memory handler",
    ),
    hit(
        "slurm-jobacct-limit",
        Slot::HostOom,
        &["ceeded"],
        r"exceeded memory limit \(\d+ > \d+\), being killed",
        r"exceeded memory limit \([0-9]+ > [0-9]+\), being killed",
    ),
    Rule {
        name: "slurm-exceeded-limit",
        kind: Kind::Format,
        action: Action::Hit(Slot::HostOom),
        needles: &["ceeded"],
        pattern: r"(?:(?:srun|slurmstepd[-\w]*): (?:error: )?|^)Exceeded (?:job|step) memory limit",
        // Trap f4: printed on jobs that completed fine.
        unless: Some(r"memory limit at some point"),
        claims: false,
        ere: r"(srun|slurmstepd[-[:alnum:]_]*): (error: )?Exceeded (job|step) memory limit",
        requires: &[],
    },
    hit(
        "srun-task-out-of-memory",
        Slot::HostOom,
        &[": Out Of Memory"],
        r": tasks? [\d,\-\[\]]+: Out Of Memory",
        r": tasks? [][0-9,-]+: Out Of Memory",
    ),
    hit(
        "ray-memory-monitor",
        Slot::HostOom,
        &["node running low on memory"],
        r"Task was killed due to the node running low on memory",
        r"Task was killed due to the node running low on memory",
    ),
    // The raylet summary also prints `0 Workers ... killed due to memory pressure (OOM),
    // 2 Workers crashed due to other reasons`, so the count must be non-zero.
    hit(
        "raylet-memory-pressure",
        Slot::HostOom,
        &["killed due to memory pressure"],
        r"\b[1-9]\d* Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)",
        r"[1-9][0-9]* Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)",
    ),
    // The raylet's memory monitor before Ray 2.2 reported each kill on its own line
    // (`node_manager.cc:2963: System memory low at node with IP ... exceeds threshold 0.7,
    // killing latest task with name ...`).
    // Its line ends `to avoid running out of memory.`: on the `f memor` needle.
    Rule {
        requires: &["System memory low at node"],
        ..hit(
            "raylet-memory-low-kill",
            Slot::HostOom,
            &["f memor", "System memory low at node"],
            r"System memory low at node with IP \S+\. Used memory .*, killing ",
            r"System memory low at node with IP [^ ]+\. Used memory .*, killing ",
        )
    },
    // The kernel's report, and Flux's relay of the cgroup's (`Memory cgroup out of memory:
    // killed 1 task`).
    hit(
        "kernel-oom-killer",
        Slot::HostOom,
        &[
            "of memory: Kill",
            "cgroup out of memory",
            "oom-kill",
            "oom_reaper",
            "Killed process",
            "killed as a result of limit",
            "memory.oom.group",
            "oom_kill_allocating_task",
        ],
        r"[Oo]ut of memory(?: \(oom_kill_allocating_task\))?: Kill(?:ed)? process \d+|[Mm]emory cgroup out of memory: [Kk]ill|\binvoked oom-killer: |\boom-kill:constraint=|\boom_reaper: reaped process \d+|\bKilled process \d+ \([^)]*\),? (?:UID \d+,? )?total-vm:|\bkilled as a result of limit of |are going to be killed due to memory\.oom\.group",
        r"[Oo]ut of memory( \(oom_kill_allocating_task\))?: Kill(ed)? process [0-9]+|[Mm]emory cgroup out of memory: [Kk]ill|invoked oom-killer: |oom-kill:constraint=|oom_reaper: reaped process [0-9]+|Killed process [0-9]+ \([^)]*\),? (UID [0-9]+,? )?total-vm:|killed as a result of limit of |are going to be killed due to memory\.oom\.group",
    ),
    // The user-space OOM killers of workstations and desktops: systemd-oomd (Ubuntu runs it by
    // default; `src/oom/oomd.c`: `Killed %s due to memory pressure for %s being %lu.%02lu%% >
    // %lu.%02lu%% for > %s with reclaim activity`, and the swap form `Killed %s due to memory
    // used (%s) / total (%s) and swap used ...`) and earlyoom (`main.c`: `low memory! at or
    // below SIGTERM limits: ...`, `kill.c`: `sending SIGTERM to process %d uid %d "%s":
    // badness ...`). The kernel logs nothing for either. And systemd's own account of a unit
    // whose process an OOM killer took (`src/core/unit.c`: `A process of this unit has been
    // killed by the OOM killer.`; the service's result, `Failed with result 'oom-kill'.`), what
    // `journalctl -u` shows for a training job run as a service.
    hit(
        "userspace-oom-killer",
        Slot::HostOom,
        &[
            "due to memory pressure for ",
            "due to memory used (",
            "low memory! at or below ",
            "to process ",
            "by the OOM killer",
            "with result 'oom-kill'",
        ],
        r#"\bKilled \S+ due to memory (?:pressure for \S+ being [\d.]+% > [\d.]+%|used \()|low memory! at or below SIG(?:TERM|KILL) limits|sending SIG(?:TERM|KILL) to process \d+ uid \d+ "[^"]*": (?:badness|oom_score)|: A process of this unit has been killed by the OOM killer\.|: Failed with result 'oom-kill'"#,
        r#"Killed [^ ]+ due to memory (pressure for [^ ]+ being [0-9.]+% > [0-9.]+%|used \()|low memory! at or below SIG(TERM|KILL) limits|sending SIG(TERM|KILL) to process [0-9]+ uid [0-9]+ "[^"]*": (badness|oom_score)|: A process of this unit has been killed by the OOM killer\.|: Failed with result 'oom-kill'"#,
    ),
    // Ray's memory monitor report, any line of it: `ray job submit` keeps only the last
    // 20,000 characters of a job's log, so its first line is often gone (ray
    // `src/ray/common/memory_monitor.cc`, `src/ray/raylet/node_manager.cc`, `worker_killing_policy`:
    // `Memory on the node (IP: ..) where the task (..) was running was 29.49GB / 30.89GB (0.95),
    // which exceeds the memory usage threshold of 0.95. Ray killed this worker ..`, `Top 10
    // memory users:`, `Refer to the documentation on how to address the out of memory issue:
    // ..`, `Consider provisioning more memory on this node ..`), and the exception Ray before
    // 1.2 raised from its `memory_monitor.py` (`ray.memory_monitor.RayOutOfMemoryError: More
    // than 95% of the memory on node .. is used`).
    Rule {
        requires: &[
            "RayOutOfMemoryError",
            "usage threshold",
            "memory users:",
            "address the out of memory issue",
            "provisioning more memory",
            "Memory on the node (IP: ",
        ],
        ..hit(
            "ray-memory-monitor-report",
            Slot::HostOom,
            &[
                "usage threshold",
                "memory users:",
                "f memor",
                "provisioning more memory",
                "Memory on the node (IP: ",
                "RayOutOfMemoryError",
            ],
            r"\bRayOutOfMemoryError: More than [\d.]+% of the memory on node|^Memory on the node \(IP: \S+, ID: \w+\) where the (?:task|lease|actor)|which exceeds the memory usage threshold of [\d.]+|\bTop \d+ memory users:|Refer to the documentation on how to address the out of memory issue|Consider provisioning more memory on this node",
            r"RayOutOfMemoryError: More than [0-9.]+% of the memory on node|^Memory on the node \(IP: [^ ]+, ID: [[:alnum:]]+\) where the (task|lease|actor)|which exceeds the memory usage threshold of [0-9.]+|Top [0-9]+ memory users:|Refer to the documentation on how to address the out of memory issue|Consider provisioning more memory on this node",
        )
    },
    // Kubernetes: a container killed for its memory limit (`Reason: OOMKilled` in `kubectl
    // describe`, the `OOMKilled` status of `kubectl get pods`, `reason: OOMKilled` in yaml),
    // and the kubelet evicting a pod from a node short of memory (kubernetes
    // `pkg/kubelet/eviction/helpers.go`: `The node was low on resource: memory.`).
    hit(
        "k8s-memory",
        Slot::HostOom,
        &["OOMKilled", "low on resource: memory"],
        r#"\b[Rr]eason:\s*"?OOMKilled\b|\s\d+/\d+\s+OOMKilled\s|\bOOMKilled \(exit code 137\)|The node was low on resource: memory\.(?: (?:Threshold|Container)|\s*$)"#,
        r#"[Rr]eason: *"?OOMKilled|[0-9]+/[0-9]+ +OOMKilled |OOMKilled \(exit code 137\)|The node was low on resource: memory\.( (Threshold|Container)|[[:space:]]*$)"#,
    ),
    // Batch schedulers' memory kills: PBS (`=>> PBS: job killed: mem 38427376kb exceeded limit
    // 33554432kb`, vmem/pmem; Torque's `job 1 exceeded MEM usage hard limit (2528 > 1126)` and
    // `Job exceeded a memory resource limit (vmem, pvmem, etc.). Job was aborted`), LSF
    // (`TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.`), HTCondor's hold for
    // memory (`put on hold by SYSTEM_PERIODIC_HOLD due to memory usage`, `Job has gone over
    // memory limit of 2048 megabytes`), and Slurm's job state (`JobState=OUT_OF_MEMORY` in
    // scontrol, `OUT_OF_MEMORY` / its 10-column cut `OUT_OF_ME+` in sacct and seff), and the
    // grid's job wrappers (CMS WMCore's `PerformanceMonitor.py`: `Job has exceeded maxPSS: 16000
    // MB`, maxRSS, maxVSize, before it kills the step); from the schedulers' sources: any PBS
    // memory kind (`=>> PBS: job killed: vmem 137438953472 exceeded limit ...`, `pvmem exceeded
    // limit`), OpenPBS's `Exit_status = -27` / `-26` (`JOB_EXEC_KILL_MEM`, `_VMEM`), Grid
    // Engine's execd (`job 4242 exceeds job hard limit "h_vmem" of queue ...`), HTCondor's
    // starter (`Job has gone over cgroup memory limit of 16384 megabytes`, `Worker node is out
    // of memory`), and AWS Batch's / ECS's stopped reason
    // (`OutOfMemoryError: Container killed due to memory usage`).
    hit(
        "scheduler-memory-kill",
        Slot::HostOom,
        &[
            "ceeded",
            "TERM_",
            "OUT_OF_ME",
            "over memory limit",
            "due to memory usage",
            "job hard limit",
            "cgroup memory limit",
            "Exit_status",
            "Worker node is out of memory",
            "OutOfMemoryError: Container killed",
        ],
        r#"\bJob has exceeded max(?:PSS|RSS|VSize): \d+|PBS: job killed: p?v?mem\b.*\bexceeded limit|\bExit_status ?= ?-2[67]\b|\bexceeds job hard limit "h_(?:vmem|rss|data)"|\bgone over cgroup memory limit\b|\bWorker node is out of memory\b|OutOfMemoryError: Container killed due to memory usage|PBS: job killed: [pv]?mem (?:job total )?\d+ ?[kmgt]?b exceeded limit|\bexceeded MEM usage hard limit|Job exceeded a memory resource limit|\bTERM_MEMLIMIT\b|put on hold by \w+ due to memory usage|gone over memory limit|\bOUT_OF_ME(?:MORY\b|\+)"#,
        r#"Job has exceeded max(PSS|RSS|VSize): [0-9]+|PBS: job killed: p?v?mem([^[:alnum:]_].*)?exceeded limit|Exit_status ?= ?-2[67]([^0-9]|$)|exceeds job hard limit "h_(vmem|rss|data)"|gone over cgroup memory limit|Worker node is out of memory|OutOfMemoryError: Container killed due to memory usage|PBS: job killed: [pv]?mem (job total )?[0-9]+ ?[kmgt]?b exceeded limit|exceeded MEM usage hard limit|Job exceeded a memory resource limit|TERM_MEMLIMIT|put on hold by [[:alnum:]_]+ due to memory usage|gone over memory limit|(^|[^[:alnum:]_])OUT_OF_ME(MORY|\+)"#,
    ),
    // PaddlePaddle's host allocator refused (`system_allocator.cc`: `Expected
    // posix_memalign(&p, alignment, size) == 0, but received posix_memalign(&p, alignment,
    // size):12 != 0:0.` in 1.x, `Fail to alloc memory of 524288000 size, error code is 12.` in
    // 2.x: ENOMEM).
    hit(
        "paddle-host-alloc",
        Slot::HostOom,
        &["posix_memalign", "Fail to alloc memory of"],
        r"\bposix_memalign\(&p, alignment, size\):12 != 0|\bFail to alloc memory of \d+ size, error code is 12\b",
        r"posix_memalign\(&p, alignment, size\):12 != 0|Fail to alloc memory of [0-9]+ size, error code is 12",
    ),
    // MindSpore's device memory pool refusing a kernel's buffers (`Malloc for kernel output
    // failed, Memory isn't enough, node:Default/Cast-op446`; `Device(id:0) memory isn't enough
    // and alloc failed`).
    hit(
        "mindspore-device-alloc",
        Slot::GpuOom,
        &["emory isn't enough"],
        r"\bMalloc for kernel (?:input|output|workspace) failed, Memory isn't enough\b|\bmemory isn't enough and alloc failed\b",
        r"Malloc for kernel (input|output|workspace) failed, Memory isn't enough|memory isn't enough and alloc failed",
    ),
    // Page-locked host memory refused: CUDA's `cudaHostAlloc` / `cudaMallocHost` returning
    // `cudaErrorMemoryAllocation` (MindSpore's MindData arena: `cudaHostAlloc failed, ret[2],
    // out of memory`). The pinned pages are host RAM, not the device's. Weak: a container's
    // `RLIMIT_MEMLOCK` refuses them the same way, and libraries fall back to pageable memory.
    Rule {
        unless: Some(r"(?i)\bfall(?:s|ing)? back\b|\bpageable\b|\bretry"),
        ..msg(
            "pinned-host-alloc",
            Slot::HostOomWeak,
            &["cudaHostAlloc", "cudaMallocHost"],
            r"\bcuda(?:HostAlloc|MallocHost)\b[^\n]{0,40}\bout of memory",
            r"cuda(HostAlloc|MallocHost)[^[:cntrl:]]{0,40}out of memory",
        )
    },
    // Hadoop YARN's NodeManager killing a container over its memory limit
    // (`ContainersMonitorImpl`: `Container [pid=..,containerID=..] is running beyond physical
    // memory limits. Current usage: ...`, 3.x: `is running 1723304448B beyond the 'VIRTUAL'
    // memory limit`), and Spark's reading of it (`YarnAllocator.memLimitExceededLogMessage`:
    // `Container killed by YARN for exceeding memory limits`). Line formats of their own:
    // they report on INFO and WARN lines. Weak: Spark reschedules the task and often goes on,
    // so a later failure of the job is the better evidence.
    hit(
        "yarn-container-memory-kill",
        Slot::HostOomWeak,
        &["memory limit"],
        r"Container killed by YARN for exceeding (?:physical |virtual )?memory limits|\bis running (?:\d+B )?beyond (?:the '(?:PHYSICAL|VIRTUAL)' memory limit|(?:physical|virtual) memory limits)",
        r"Container killed by YARN for exceeding (physical |virtual )?memory limits|is running ([0-9]+B )?beyond (the '(PHYSICAL|VIRTUAL)' memory limit|(physical|virtual) memory limits)",
    ),
    // Dask's nanny restarting a worker over its memory budget (`distributed/nanny.py`:
    // `Worker exceeded 95% memory budget. Restarting`; 2022.x on, `worker_memory.py`: `Worker
    // tcp://.. (pid=..) exceeded 95% memory budget. Restarting...`), a WARNING line. Weak: the
    // nanny restarts the worker and the computation may go on.
    Rule {
        requires: &["memory budget"],
        ..hit(
            "dask-worker-memory-budget",
            Slot::HostOomWeak,
            &["exceeded "],
            r"\bWorker (?:\S+ \(pid=\d+\) )?exceeded \d+% memory budget\. Restarting",
            r"Worker ([^ ]+ \(pid=[0-9]+\) )?exceeded [0-9]+% memory budget\. Restarting",
        )
    },
    // The JVM's heap and native limits (Spark executors, Hadoop tasks, Elasticsearch beside a
    // training job): HotSpot's `OutOfMemoryError` messages (`universe.cpp`: `Java heap space`,
    // `GC overhead limit exceeded`, `Metaspace`, `Compressed class space`, `Requested array size
    // exceeds VM limit`; `java.nio.Bits`: `Direct buffer memory`, `Cannot reserve N bytes of
    // direct buffer memory`). One that names a device allocator (Spark RAPIDS: `Could not
    // allocate native memory: std::bad_alloc: out_of_memory: RMM failure`) is the device's.
    Rule {
        unless: Some(r"RMM failure|\bCUDA\b|\bGPU\b|[Dd]evice memory"),
        ..Rule {
            kind: Kind::Name,
            ..hit(
                "jvm-out-of-memory",
                Slot::HostOom,
                &["java.lang.OutOfMemoryError: "],
                r"\bjava\.lang\.OutOfMemoryError: (?:Java heap space|GC overhead limit exceeded|Metaspace|Compressed class space|Requested array size exceeds VM limit|Direct buffer memory|Cannot reserve \d+ bytes of direct buffer memory)",
                r"java\.lang\.OutOfMemoryError: (Java heap space|GC overhead limit exceeded|Metaspace|Compressed class space|Requested array size exceeds VM limit|Direct buffer memory|Cannot reserve [0-9]+ bytes of direct buffer memory)",
            )
        }
    },
    // -------------------------------------------------------------------- GPU OOM
    // torch's message (all formats; CUDA, HIP, and the NPU of torch_npu on Ascend, where verl
    // and vLLM-Ascend run, and Intel's XPU; `Allocation on device 0 would exceed allowed
    // memory. (out of memory)` where a memory fraction or the async allocator bounds the
    // process; torch 0.x's `cuda runtime error (2) : out of memory`), the driver's `CUDA
    // error: out of memory`, and a glog `CHECK_EQ(error, cudaSuccess)` that failed with
    // error 2 (Caffe's `Check failed: error == cudaSuccess (2 vs. 0)  out of memory`, on a
    // fatal `F` line). Reporters that wrap the runtime's own error string (`cudaGetErrorString`
    // of cudaErrorMemoryAllocation is `out of memory`) between the device and it: CTranslate2's
    // `CUDA failed with error out of memory` (`src/cuda/utils.h`, `CUDA_CHECK`), SPECFEM's
    // `CUDA error !!!!! <out of memory> !!!!!`. The runtimes' error enums are
    // `device-oom-error-name`'s. One rule: the lines that hold `f memor` run one regex.
    msg(
        "gpu-oom-message",
        Slot::GpuOom,
        &["f memor"],
        r"(?:CUDA|HIP|NPU|XPU|HPU|DPCPP|MLU|MUSA):? (?:(?:driver|runtime) )?(?:(?:[Ee]rror|ERROR|failed|FAILED)(?: with error| \d+| in [^:]*\))?[\s:!<(\[]*)?out of memory|MPS backend out of memory|Out of memory error on (?:GPU|XPU|NPU|MLU) \d+|cuda runtime error \(2\) : out of memory|Allocation on device \d+ would exceed allowed memory\. \(out of memory\)|cudaMalloc(?:Async|Managed)? failed: out of memory|cudaSuccess \(2 vs\. 0\)\s+out of memory",
        r"(CUDA|HIP|NPU|XPU|HPU|DPCPP|MLU|MUSA):? ((driver|runtime) )?(([Ee]rror|ERROR|failed|FAILED)( with error| [0-9]+| in [^:]*\))?[[:space:]:!<(\[]*)?out of memory|MPS backend out of memory|Out of memory error on (GPU|XPU|NPU|MLU) [0-9]+|cuda runtime error \(2\) : out of memory|Allocation on device [0-9]+ would exceed allowed memory\. \(out of memory\)|cudaMalloc(Async|Managed)? failed: out of memory|cudaSuccess \(2 vs\. 0\)[[:space:]]+out of memory",
    ),
    // The device runtimes' own names for a failed device allocation, which only their error
    // reports print, whatever a reporter writes around them: the CUDA runtime's
    // `cudaErrorMemoryAllocation` (xgboost: `Memory allocation error on worker 0:
    // std::bad_alloc: cudaErrorMemoryAllocation: out of memory`), the driver's
    // `CUDA_ERROR_OUT_OF_MEMORY` (NVHPC's OpenACC runtime: `call to cuMemAlloc returned error
    // 2 (CUDA_ERROR_OUT_OF_MEMORY)`), HIP's `hipErrorOutOfMemory` / `HIP_ERROR_OutOfMemory`,
    // Level Zero / Unified Runtime / SYCL PI's and Vulkan's `*_OUT_OF_DEVICE_MEMORY`, OpenCL's
    // `CL_MEM_OBJECT_ALLOCATION_FAILURE`, Metal's `kIOGPUCommandBufferCallbackErrorOutOfMemory`
    // (`cuda_runtime_api.h`, `cuda.h`, `hip_runtime_api.h`, `ze_api.h`, `ur_api.h`,
    // `vulkan_core.h`, `cl.h`); Vulkan's C++ binding names the same result
    // `vk::Result::eErrorOutOfDeviceMemory` and prints it `ErrorOutOfDeviceMemory`
    // (`vulkan.hpp`'s `to_string`: llama.cpp's ggml-vulkan, `vk::Device::allocateMemory:
    // ErrorOutOfDeviceMemory`) or without its prefix (Omniverse's Vulkan plugin under Isaac
    // Lab: `VkResult: ERROR_OUT_OF_DEVICE_MEMORY`), and ncnn logs the raw result (`vkAllocateMemory failed -2`,
    // `src/allocator.cpp`; -2 is `VK_ERROR_OUT_OF_DEVICE_MEMORY`); libtorch's C++ class for a
    // device allocator's failure, which C++ programs on libtorch die with (`terminate called
    // after throwing an instance of 'c10::OutOfMemoryError'`, `c10/util/Exception.h`).
    Rule {
        name: "device-oom-error-name",
        kind: Kind::Name,
        action: Action::Hit(Slot::GpuOom),
        needles: &[
            "_OutOfMemory",
            "ErrorOutOf",
            "ErrorMemoryAllocation",
            "vkAllocateMemory failed -2",
            "OUT_OF_ME",
            "OUT_OF_DEVICE_MEMORY",
            "CL_MEM_OBJECT_ALLOCATION_FAILURE",
            "c10::OutOfMemoryError",
        ],
        pattern: r"\bcudaErrorMemoryAllocation\b|\bhipErrorOutOfMemory\b|\bHIP_ERROR_OutOfMemory\b|\bCUDA_ERROR_OUT_OF_MEMORY\b|\b(?:UR_RESULT_ERROR|ZE_RESULT_ERROR|PI_ERROR|VK_ERROR)_OUT_OF_DEVICE_MEMORY\b|\bCL_MEM_OBJECT_ALLOCATION_FAILURE\b|\bkIOGPUCommandBufferCallbackErrorOutOfMemory\b|\be?ErrorOutOfDeviceMemory\b|\bvkAllocateMemory failed -2\b|\bc10::OutOfMemoryError\b|\bERROR_OUT_OF_DEVICE_MEMORY\b",
        unless: None,
        claims: false,
        ere: r"cudaErrorMemoryAllocation|hipErrorOutOfMemory|HIP_ERROR_OutOfMemory|CUDA_ERROR_OUT_OF_MEMORY|(UR_RESULT_ERROR|ZE_RESULT_ERROR|PI_ERROR|VK_ERROR)_OUT_OF_DEVICE_MEMORY|CL_MEM_OBJECT_ALLOCATION_FAILURE|kIOGPUCommandBufferCallbackErrorOutOfMemory|(^|[^[:alnum:]_])e?ErrorOutOfDeviceMemory([^[:alnum:]_]|$)|vkAllocateMemory failed -2([^0-9]|$)|c10::OutOfMemoryError|(^|[^[:alnum:]_])ERROR_OUT_OF_DEVICE_MEMORY([^[:alnum:]_]|$)",
        requires: &[],
    },
    // RAPIDS Memory Manager, the device allocator of cuDF, cuML, XGBoost and Spark RAPIDS:
    // `rmm::out_of_memory`'s what() (`std::bad_alloc: out_of_memory: RMM failure at:FILE:LINE:
    // ...`, `out_of_memory: CUDA error at: ...`) and the pool's and arena's `RMM_FAIL("Maximum
    // pool size exceeded", ...)` (`include/rmm/detail/error.hpp`,
    // `mr/device/pool_memory_resource.hpp`, `mr/device/detail/arena.hpp`).
    Rule {
        name: "rmm-out-of-memory",
        kind: Kind::Name,
        action: Action::Hit(Slot::GpuOom),
        needles: &["out_of_memory", "pool size exceeded"],
        pattern: r"\bout_of_memory: (?:RMM failure|CUDA error) at:|\brmm::out_of_memory\b|RMM failure at:\S* Maximum pool size exceeded",
        unless: None,
        claims: false,
        ere: r"out_of_memory: (RMM failure|CUDA error) at:|rmm::out_of_memory|RMM failure at:[^ ]* Maximum pool size exceeded",
        requires: &[],
    },
    // Julia's CUDA.jl (and CuArrays before it): `ERROR: LoadError: Out of GPU memory trying to
    // allocate 21.000 MiB`, what `OutOfGPUMemoryError`'s `showerror` prints (`src/pool.jl`);
    // without a size (an API call that returned `CUDA_ERROR_OUT_OF_MEMORY`), the line ends
    // there: `ERROR: Out of GPU memory`. Omniverse's graphics plugins (Isaac Sim and Lab) say the
    // same before what they were allocating: `Out of GPU memory allocating resource '...'`.
    Rule {
        kind: Kind::Name,
        // Not Julia's logger warning or informing that it retried (`┌ Warning:`, `[ Info:`).
        unless: Some(
            r"(?i)(?:┌|\[) (?:Warning|Info|Debug):|\b(?:caught|retry|retrying|halving|fall(?:ing)? ?back)\b",
        ),
        ..hit(
            "out-of-gpu-memory",
            Slot::GpuOom,
            &["Out of GPU memory"],
            r"\bOut of GPU memory(?: trying to allocate [\d.]+ [KMGT]i?B| allocating\b)",
            r"Out of GPU memory( trying to allocate [0-9.]+ [KMGT]i?B| allocating)",
        )
    },
    // ... and the sizeless form only where a report starts (`ERROR: Out of GPU memory`), not
    // at the end of a sentence about it (`a tip if you run Out of GPU memory`).
    Rule {
        kind: Kind::Lead,
        unless: Some(r"(?i)\b(?:caught|retry|retrying|fall(?:ing)? ?back)\b"),
        ..hit(
            "out-of-gpu-memory-alone",
            Slot::GpuOom,
            &["Out of GPU memory"],
            r"Out of GPU memory\.?\s*$",
            r"Out of GPU memory\.?[[:space:]]*$",
        )
    },
    // The other runtimes' device allocators, in their own words: CuPy's `OutOfMemoryError`
    // (`cupy/cuda/memory.pyx`: `out of memory to allocate N bytes (total N bytes)` before v7,
    // `Out of memory allocating N bytes (allocated so far: N bytes).` since; Chainer's trainer
    // prints it after `Exception in main training loop: `), DirectML's (torch-directml:
    // `Could not allocate tensor with N bytes. There is not enough GPU video memory
    // available!`), OpenVINO's GPU plugin (`[GPU] out of GPU resources`, thrown from
    // `src/plugins/intel_gpu/src/runtime/ocl/ocl_engine.cpp`).
    Rule {
        kind: Kind::Name,
        unless: Some(r"(?i)\b(?:caught|retry|retrying|fall(?:ing)? ?back)\b"),
        ..hit(
            "other-device-allocators",
            Slot::GpuOom,
            &[
                "out of memory to allocate ",
                "Out of memory allocating ",
                "GPU video memory",
                "out of GPU resources",
            ],
            r"\bout of memory to allocate \d+ bytes \(total \d+ bytes\)|\bOut of memory allocating [\d,]+ bytes \(allocated so far: [\d,]+ bytes\)|\bnot enough GPU video memory available\b|\[GPU\] out of GPU resources\b",
            r"out of memory to allocate [0-9]+ bytes \(total [0-9]+ bytes\)|Out of memory allocating [0-9,]+ bytes \(allocated so far: [0-9,]+ bytes\)|not enough GPU video memory available|\[GPU\] out of GPU resources",
        )
    },
    // wgpu's device error, opening its line under the failed call (behind any decoration) (`wgpu-core`'s
    // `DeviceError::OutOfMemory`: `Not enough memory left.`; burn and other Rust trainers on
    // wgpu panic with it: `Caused by: In Device::create_buffer ... Not enough memory left`).
    Rule {
        kind: Kind::Lead,
        ..hit(
            "wgpu-out-of-memory",
            Slot::GpuOom,
            &["Not enough memory left"],
            r"Not enough memory left\.?\s*$",
            r"Not enough memory left\.?[[:space:]]*$",
        )
    },
    // More runtimes' own words for a device allocation that failed: NVIDIA Warp's CUDA check
    // (`warp/native/warp.cu`: `Warp CUDA error 2: out of memory (in function
    // wp_alloc_device_async, ...)`, 2 being `cudaErrorMemoryAllocation`), TensorFlow 2's eager
    // `ResourceExhaustedError: failed to allocate memory`, and the RAPIDS Accelerator for
    // Spark's retry exceptions when a retry could not save the task
    // (`com.nvidia.spark.rapids.jni.SplitAndRetryOOM: GPU OutOfMemory`; spark-rapids-jni's
    // `RmmSpark`).
    Rule {
        kind: Kind::Name,
        // Not a retry, nor TensorFlow's allocator on the host (`/job:localhost/.../CPU:0`).
        unless: Some(r"(?i)\b(?:retrying|will retry|caught)\b|\bCPU:\d"),
        ..hit(
            "more-device-allocators",
            Slot::GpuOom,
            &[
                "error 2: out of memory",
                "ailed to allocate",
                "OOM: GPU OutOfMemory",
            ],
            r"\bWarp CUDA error 2: out of memory\b|\bResourceExhaustedError: failed to allocate memory\b|\b(?:Gpu)?(?:SplitAndRetry|Retry)OOM: GPU OutOfMemory\b",
            r"Warp CUDA error 2: out of memory|ResourceExhaustedError: failed to allocate memory|(Gpu)?(SplitAndRetry|Retry)OOM: GPU OutOfMemory",
        )
    },
    // TensorFlow's BFC allocator dumping its chunks, which it does only for a request it
    // failed and will not retry (`bfc_allocator.cc`, `DumpMemoryLog`: `Sum Total of in-use
    // chunks: 287.95MiB`): weak, for a log cut before the failure's own line (DeePMD-kit).
    hit(
        "tf-bfc-dump",
        Slot::GpuOomWeak,
        &["Sum Total of in-use chunks"],
        r"bfc_allocator\.cc:\d+\] Sum Total of in-use chunks: ",
        r"bfc_allocator\.cc:[0-9]+\] Sum Total of in-use chunks: ",
    ),
    // TensorRT's builder out of device memory (`Error Code 1: Cuda Runtime (out of memory)`,
    // `defaultAllocator.cpp`). Weak: it logs the same while autotuning tactics, skips the
    // tactic and may still build the engine, so anything specific after it decides.
    msg(
        "tensorrt-cuda-runtime-oom",
        Slot::GpuOomWeak,
        &["f memor"],
        r"Error Code \d+: Cuda Runtime \(out of memory\)",
        r"Error Code [0-9]+: Cuda Runtime \(out of memory\)",
    ),
    // The CUDA libraries' own allocation failures (cuBLAS, cuDNN, cuSPARSE, cuSOLVER): a
    // status name of their own, so a line format.
    hit(
        "cuda-library-alloc-failed",
        Slot::GpuOom,
        &["_STATUS_ALLOC_FAILED"],
        r"CU(?:BLAS|DNN|SPARSE|SOLVER)_STATUS_ALLOC_FAILED",
        r"CU(BLAS|DNN|SPARSE|SOLVER)_STATUS_ALLOC_FAILED",
    ),
    // The AWS Neuron runtime's device allocator (Trainium, Inferentia): `TDRV:log_dev_mem
    // Failed to allocate 13.107MB (usage: dma rings) on ND 0:NC 1, current utilization: ...`,
    // `TDRV:tensor_allocate Failed to allocate 180355072 bytes on DEVICE for tensor ...` (the
    // Neuron runtime's `nrt` log, NeuronDevice `ND`, NeuronCore `NC`), and its DMA memory
    // allocator's `TDRV:dmem_alloc_internal Failed to alloc DEVICE memory: 10485760`; the
    // status its API returns for it, as transformers-neuronx raises it
    // (`nrt_tensor_allocate status=4 message="Allocation Failure"`: `NRT_RESOURCE`, 4, in
    // `nrt/nrt_status.h`). Ascend's runtime names the same failure by its error code
    // (`Memory_Allocation_Failure(EL0004): Failed to allocate memory.`, CANN's error-code
    // table), Graphcore's Poplar by its exception's name (`'poplar_stream_memory_allocation_error':
    // ... Out of memory`; `graph_memory_allocation_error` for a graph that does not fit its tiles).
    hit(
        "neuron-device-alloc-failed",
        Slot::GpuOom,
        &[
            "Failed to allocate ",
            "Failed to alloc DEVICE memory",
            "nrt_tensor_allocate status=",
            "Memory_Allocation_Failure(EL0004)",
            // Poplar's error name stands in quotes: the message after them is the needle.
            "Out of memory",
        ],
        r#"\bFailed to allocate [\d.]+ ?[KMGT]?B (?:\(usage: [^)]*\) )?on ND \d+:NC \d+|\bFailed to allocate \d+ bytes on DEVICE for tensor\b|\bFailed to alloc DEVICE memory: \d+|\bnrt_tensor_allocate status=4 message="Allocation Failure"|\bMemory_Allocation_Failure\(EL0004\)|(?:'|\b)poplar(?:_|::)(?:stream|graph)_memory_allocation_error'?: .*\bOut of memory\b"#,
        r#"Failed to allocate [0-9.]+ ?[KMGT]?B (\(usage: [^)]*\) )?on ND [0-9]+:NC [0-9]+|Failed to allocate [0-9]+ bytes on DEVICE for tensor|Failed to alloc DEVICE memory: [0-9]+|nrt_tensor_allocate status=4 message="Allocation Failure"|Memory_Allocation_Failure\(EL0004\)|'?poplar(_|::)(stream|graph)_memory_allocation_error'?: .*Out of memory"#,
    ),
    // TensorFlow's BFC allocator giving up on a request (`bfc_allocator.cc`: `Allocator
    // (GPU_0_bfc) ran out of memory trying to allocate 2.62GiB (rounded to 2816000000)requested
    // by op ...`, then `Current allocation summary follows.`; TF 1.x: `Ran out of memory trying
    // to allocate 39.81MiB.  See logs for memory state.` after the allocator's stats): a
    // warning-level glog line, and the op fails with it. Not the same words followed by `The caller indicates that this is
    // not a failure`, which TF prints when it retries with less.
    Rule {
        unless: Some(r"not a failure"),
        ..hit(
            "tf-bfc-gave-up",
            Slot::GpuOom,
            &[
                "ran out of memory trying to allocate",
                "Ran out of memory trying to allocate",
            ],
            r"\bAllocator \(GPU_\d+_bfc\) ran out of memory trying to allocate [\d.]+[KMGT]?i?B \(rounded to \d+\)|Ran out of memory trying to allocate [\d.]+[KMGT]?i?B\.\W*\s*See logs for memory state",
            r"Allocator \(GPU_[0-9]+_bfc\) ran out of memory trying to allocate [0-9.]+[KMGT]?i?B \(rounded to [0-9]+\)|Ran out of memory trying to allocate [0-9.]+[KMGT]?i?B\.[^[:alnum:]]* *See logs for memory state",
        )
    },
    // XLA's allocator (JAX, PyTorch/XLA) refusing a buffer: `XlaRuntimeError:
    // RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes.` (older jaxlib:
    // `Resource exhausted: ...`), and StreamExecutor's device allocator's `Failed to allocate
    // request for 176.00MiB (184549376B) on device ordinal 0`.
    // The BFC warning `ran out of memory trying to allocate ... The caller indicates that this
    // is not a failure` is not it, nor gRPC's `RESOURCE_EXHAUSTED` of an oversized message.
    // Its out-of-memory form shares the `f memor` needle (a needle of its own starting `Re`
    // made Teddy's fingerprints loose: the realistic bench log took 25 % longer).
    Rule {
        requires: &["RESOURCE_EXHAUSTED: ", "Resource exhausted: "],
        ..msg(
            "xla-resource-exhausted",
            Slot::GpuOom,
            &["f memor", "_EXHAUSTED: Failed", "exhausted: Failed"],
            r"(?:RESOURCE_EXHAUSTED|Resource exhausted): (?:.*\bRan out of memory in memory space \w+|Out of memory while trying to allocate \d+ bytes|Failed to allocate request for)",
            r"(RESOURCE_EXHAUSTED|Resource exhausted): (.*Ran out of memory in memory space [[:alnum:]_]+|Out of memory while trying to allocate [0-9]+ bytes|Failed to allocate request for)",
        )
    },
    // Driver-level OOM reports that are their own line format: NCCL's `Cuda failure 'out of
    // memory'` (a needle inside its quotes would be a mention), torch 0.x's `THCudaCheck FAIL
    // ... error=2 : out of memory`, the torch_memory_saver's `CUresult error: 2 (out of
    // memory)` (verl resuming SGLang's memory).
    hit(
        "driver-oom",
        Slot::GpuOom,
        // NCCL's form shares its needle with `cuda-kernel-assert`'s other NCCL failures.
        &[
            "Cuda failure ",
            "THCudaCheck FAIL",
            "CUresult error",
            "cudaError error",
            "Failed to CUDA ",
        ],
        r"Cuda failure (?:2 )?'out of memory'|THCudaCheck FAIL .*error=2 : out of memory|(?:CUresult|cudaError) error: 2 \(out of memory\)|Failed to CUDA (?:calloc|malloc|host alloc) \d+ bytes",
        r"Cuda failure (2 )?'out of memory'|THCudaCheck FAIL .*error=2 : out of memory|(CUresult|cudaError) error: 2 \(out of memory\)|Failed to CUDA (calloc|malloc|host alloc) [0-9]+ bytes",
    ),
    // XLA's report of what filled a TPU's memory, printed only with its out-of-memory error
    // (`Largest program allocations in hbm:`, then per buffer `Allocation type: HLO temp`,
    // `scoped`, `parameter`): weak, the error itself names the device.
    hit(
        "xla-allocation-report",
        Slot::GpuOomWeak,
        &["Largest program allocations in ", "Allocation type: "],
        r"^\s*Largest program allocations in (?:hbm|vmem|sram)\b|^\s*Allocation type: (?:HLO temp|scoped|parameter|output)\s*$",
        r"^ *Largest program allocations in (hbm|vmem|sram)|^ *Allocation type: (HLO temp|scoped|parameter|output) *$",
    ),
    // Other runtimes' device-memory failures, each its own line format: TensorFlow's `OOM when
    // allocating tensor with shape[..]`, the TPU runtime's `Attempting to reserve 3.95G at the
    // bottom of memory. That was not possible.`, Gaudi's `MODULE:PT_DEVMEM Allocation failed for
    // size::469762048` and `MODULE:PT_SYNHELPER workspace Allocation of size ::N failed` (older
    // releases: `MODULE:SYNHELPER workspace ...`), Intel's XPU runtime (`Allocation is out of
    // device memory on current platform.`) and Level Zero's and Unified Runtime's error names
    // (`ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY`, `UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY`).
    // A device allocator that names itself failing (NVIDIA PhysX's `PxgCudaDeviceMemoryAllocator
    // fail to allocate memory 100663296 bytes!!`) and Tenstorrent's bank allocator (`Out of
    // Memory: Not enough space to allocate 71999488 B DRAM buffer`,
    // `tt_metal/impl/allocator/bank_manager.cpp`). Not ggml's `failed to allocate CUDA0 buffer`:
    // llama.cpp retries without pipeline parallelism after it, and the server goes on.
    hit(
        "device-allocator-failed",
        Slot::GpuOom,
        &[
            "ail to allocate",
            "ails to allocate",
            "ailed to allocate",
            "Not enough space to allocate",
        ],
        r"\w*(?:Cuda|CUDA|Gpu|GPU|Device|Hip|HIP)\w*:? fail(?:s|ed)? to allocate\b|Out of Memory: Not enough space to allocate \d+ B (?:DRAM|L1)",
        r"[[:alnum:]_]*(Cuda|CUDA|Gpu|GPU|Device|Hip|HIP)[[:alnum:]_]*:? fail(s|ed)? to allocate|Out of Memory: Not enough space to allocate [0-9]+ B (DRAM|L1)",
    ),
    hit(
        "accelerator-oom-report",
        Slot::GpuOom,
        &[
            "OOM when allocating",
            "That was not possible",
            "MODULE:",
            "out of device memory on current platform",
            "ERROR_OUT_OF_DEVICE_MEMORY",
        ],
        r"OOM when allocating tensor|Attempting to (?:reserve|allocate) \S+(?: at the bottom of memory)?\. That was not possible|MODULE:\w+ .*Allocation (?:failed|of size :*\d+ failed)|Allocation is out of device memory on current platform|\b(?:ZE|UR)_RESULT_ERROR_OUT_OF_DEVICE_MEMORY\b",
        r"OOM when allocating tensor|Attempting to (reserve|allocate) [^ ]+( at the bottom of memory)?\. That was not possible|MODULE:[[:alnum:]_]+ .*Allocation (failed|of size :*[0-9]+ failed)|Allocation is out of device memory on current platform|(ZE|UR)_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
    ),
    // DEVIATION from the reference (which files these under kv_cache): the GPU is
    // over-subscribed by someone else, the remedy is to LOWER utilisation.
    msg(
        "vllm-startup-free-memory",
        Slot::GpuOom,
        &["less than desired GPU memory utilization"],
        r"on startup is less than desired GPU memory utilization",
        r"on startup is less than desired GPU memory utilization",
    ),
    msg(
        "vllm-memory-profiling",
        Slot::GpuOom,
        &["Error in memory profiling"],
        r"Error in memory profiling",
        r"Error in memory profiling",
    ),
    // A device OOM known only by its exception class: Ray's wrapper names the worker's
    // exception (`RayTaskError(OutOfMemoryError)`) when the worker's own lines are in another
    // file or cut off. (A traceback ending in the class alone, `torch.cuda.OutOfMemoryError`,
    // is known by the traceback follower; a needle `MemoryError` would hit every torch OOM
    // line twice.)
    Rule {
        name: "named-gpu-oom",
        kind: Kind::Lead,
        action: Action::Hit(Slot::GpuOomWeak),
        needles: &["OutOfMemoryError)"],
        pattern: r"(?:[\w.]+\.)?RayTaskError\((?:[\w.]+\.)?OutOfMemoryError\)",
        unless: None,
        claims: false,
        ere: r"RayTaskError\(([[:alnum:]_.]+\.)?OutOfMemoryError\)",
        requires: &[],
    },
    // torch's device OOM class reporting at the start of a line, whatever its message says:
    // DataParallel's re-raise (`torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in replica
    // 0 on device 0.`, `torch/_utils.py` `ExceptionWrapper.reraise`) or a message cut by a
    // paste, where no traceback header survived for the traceback follower (a logger that
    // aligns its fields pads the name before the colon: `torch.cuda.OutOfMemoryError    :`).
    // Not Ray's class of the same name (its memory monitor's, read from its message).
    Rule {
        name: "named-gpu-oom-exception",
        kind: Kind::Lead,
        action: Action::Hit(Slot::GpuOomWeak),
        needles: &["OutOfMemoryError"],
        pattern: r"(?:torch\.(?:cuda\.|xpu\.|mps\.)?)?OutOfMemoryError(?:: | {1,8}: [^\d\s])",
        unless: None,
        claims: false,
        ere: r"(torch\.(cuda\.|xpu\.|mps\.)?)?OutOfMemoryError(: | {1,8}: [^0-9[:space:]])",
        requires: &[],
    },
    // ------------------------------------------------------------- host OOM (weak)
    // SIGKILL as the launcher saw it: bash/zsh job control (`./run.sh: line 649:  9746 Killed
    // python ...`, `Killed: 9`), a DataLoader worker killed by `Killed` (torch's; PaddlePaddle's
    // `DataLoader process (pid 2730) exited is killed by signal: Killed.`) or by a bus error
    // (torch: the shared memory under its tensors ran out, `/dev/shm` being RAM; its worker's own
    // `Unexpected bus error encountered in worker. This might be caused by insufficient shared
    // memory (shm).`, `torch/csrc/DataLoader.cpp`), DeepSpeed's `return
    // code = -9`, CPython's `subprocess.CalledProcessError` for a child killed by SIGKILL
    // (`Command '...' died with <Signals.SIGKILL: 9>.`, `Lib/subprocess.py`, `__str__`, since
    // 3.6; matched from `Command` so that the quotes of the command's list are not taken for
    // a quoted mention), `torch.multiprocessing.spawn`'s `ProcessExitedException` (`process 1
    // terminated with signal SIGKILL`, `torch/multiprocessing/spawn.py`). Any kill -9 reads the
    // same, hence weak.
    hit(
        "sigkill-report",
        Slot::HostOomWeak,
        &[
            " Killed",
            "eturn code",
            "<Signals.SIGKILL: 9>",
            "with signal SIGKILL",
            "signal: Bus error",
            "insufficient shared memory",
        ],
        r": line \d+: +\d+ Killed(?:: ?9)?(?:\s|$)|DataLoader (?:worker|process) \(pids? [\d, ]+\) (?:exited )?is killed by signal: (?:Killed|Bus error)|Unexpected bus error encountered in worker\. This might be caused by insufficient shared memory|return code (?:is |= )?-9\b|(?:Command '.*' )?died with <Signals\.SIGKILL: 9>|\bprocess \d+ terminated with signal SIGKILL\b",
        r": line [0-9]+: +[0-9]+ Killed(: ?9)?([[:space:]]|$)|DataLoader (worker|process) \(pids? [0-9, ]+\) (exited )?is killed by signal: (Killed|Bus error)|Unexpected bus error encountered in worker\. This might be caused by insufficient shared memory|return code (is |= )?-9([^0-9]|$)|died with <Signals\.SIGKILL: 9>|process [0-9]+ terminated with signal SIGKILL",
    ),
    // An interactive shell's report of its foreground job killed by SIGKILL: the line
    // `Killed` alone (bash `jobs.c`, the signal's `strsignal` text; under a Chinese locale
    // glibc's translation `已杀死`, `po/zh_CN.po`), which is what a terminal shows when the
    // kernel's OOM killer takes the training process. Weak: any kill -9 reads the same.
    Rule {
        name: "bare-killed",
        kind: Kind::Lead,
        action: Action::Hit(Slot::HostOomWeak),
        needles: &["Killed", "已杀死"],
        pattern: r"(?:Killed(?:: ?9)?|已杀死)\s*$",
        unless: None,
        claims: false,
        ere: r"^[[:space:]]*(Killed(: ?9)?|已杀死)[[:space:]]*$",
        requires: &[],
    },
    // The shell's `Killed` printed straight after a progress bar that had no newline yet
    // (`padding:  65% 2207000/3382137 [03:08<01:16, 15381.54 examples/s]Killed`): tqdm rewrites
    // its line with `\r`, so the process killed mid-bar leaves the word glued to the bar's end.
    // Jupyter's restarter finding its kernel dead (jupyter_client's `restarter.py`:
    // `KernelRestarter: restarting kernel (1/5)`): the kernel's process died without a word,
    // which on a notebook is most often the OOM killer; weak, like a bare SIGKILL.
    hit(
        "jupyter-kernel-restarted",
        Slot::HostOomWeak,
        &["KernelRestarter: restarting kernel"],
        r"\bKernelRestarter: restarting kernel \(\d+/\d+\)",
        r"KernelRestarter: restarting kernel \([0-9]+/[0-9]+\)",
    ),
    hit(
        "killed-after-progress-bar",
        Slot::HostOomWeak,
        &["]Killed"],
        r"\d+/\d+ \[[^\]]*\]Killed(?:: ?9)?\s*$",
        r"[0-9]+/[0-9]+ \[[^]]*\]Killed(: ?9)?[[:space:]]*$",
    ),
    // C++'s `operator new` found no host memory: `terminate called after throwing an instance
    // of 'std::bad_alloc'` (on `native-crash`'s needle: no needle of its own). Weak: an absurd
    // size from a bug reads the same. (Python's `MemoryError: std::bad_alloc` ends a traceback
    // in `MemoryError`, which the traceback follower knows.)
    // The exception's own `what()` opening a line (glog's `Exception in thread 7` then
    // `std::bad_alloc`; `what():  std::bad_alloc`).
    Rule {
        name: "cpp-bad-alloc-what",
        kind: Kind::Lead,
        action: Action::Hit(Slot::HostOomWeak),
        needles: &["std::bad_alloc"],
        pattern: r"(?:what\(\):\s+)?std::bad_alloc\b",
        unless: None,
        claims: false,
        ere: r"(what\(\):[[:space:]]+)?std::bad_alloc",
        requires: &[],
    },
    hit(
        "cpp-bad-alloc",
        Slot::HostOomWeak,
        &["after throwing"],
        r"after throwing an instance of 'std::bad_alloc'",
        r"after throwing an instance of 'std::bad_alloc'",
    ),
    hit(
        "torchrun-sigkill",
        Slot::HostOomWeak,
        &["Signal 9 (SIGKILL)"],
        r"Signal 9 \(SIGKILL\) received by PID",
        r"Signal 9 \(SIGKILL\) received by PID",
    ),
    hit(
        "torchrun-exitcode-9",
        Slot::HostOomWeak,
        &["exitcode"],
        r"exitcode\s*:?\s*-9\b",
        r"exitcode[[:space:]]*:?[[:space:]]*-9([^0-9]|$)",
    ),
    // Any exit status 137 (128 + SIGKILL): Docker's and Kubernetes' (`Exit Code: 137`) too; and
    // -9, how Python's `subprocess` reports a child killed by SIGKILL (`Training failed with
    // exit code -9`). Not a hint explaining what 137 usually means.
    Rule {
        unless: Some(
            r"(?i)\b(?:typically|usually|means|may|might|hint|if|when|timeout|timed out|time limit|harness)\b",
        ),
        ..hit(
            "exit-code-137",
            Slot::HostOomWeak,
            &[
                "xit code",
                "xit Code",
                "xit status",
                "xit Status",
                "exited with code",
            ],
            r"(?:[Ee]xit (?:[Cc]ode|[Ss]tatus)|exited with code)\s*[:=]?\s*(?:137|-9)\b",
            r"[Ee]xit(ed with)? ([Cc]ode|[Ss]tatus) *[:=]? *(137|-9)([^0-9]|$)",
        )
    },
    // What ends a job before a runner's teardown kills the rest (see [`TEARDOWN_VOIDS`]): a
    // runner that runs the job's processes in containers saying it kills them, or that one of
    // them failed with a status other than 0 and 137 (Determined: `killing container id: ...`,
    // `container failed with non-zero exit code:  (exit code 1)`). Only a runner's own report of
    // a member: any earlier `exit code 1` (a pip build, a probe) says nothing about a later kill.
    Rule {
        kind: Kind::Format,
        action: Action::Teardown,
        unless: Some(r"(?i)\b(?:typically|usually|means|may|might|hint|if|when)\b"),
        ..hit(
            "runner-teardown",
            Slot::HostOomWeak,
            &[
                "killing container",
                "container failed with non-zero exit code",
            ],
            r"\bkilling container\b|\bcontainer failed with non-zero exit code:?\s*\(exit code (?:1[0-2]\d|13[0-689]|1[4-9]\d|2[0-5]\d|[1-9]\d?)\)",
            r"killing container|container failed with non-zero exit code:?[[:space:]]*\(exit code (1[0-2][0-9]|13[0-689]|1[4-9][0-9]|2[0-5][0-9]|[1-9][0-9]?)\)",
        )
    },
    // ---------------------------------------------------------------- NCCL timeout
    hit(
        "nccl-watchdog-timeout",
        Slot::NcclTimeout,
        &["Watchdog caught collective operation timeout"],
        r"Watchdog caught collective operation timeout",
        r"Watchdog caught collective operation timeout",
    ),
    // Also the c10 exception's own trailer when its message was cut (`Exception raised from
    // checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618`): only the
    // watchdog's timeout check raises from there.
    hit(
        "nccl-work-timed-out",
        Slot::NcclTimeout,
        &[
            "milliseconds before timing out",
            "Timeout at NCCL work",
            "operation to complete",
            "from checkTimeout at",
        ],
        r"Work[A-Z]*CCL\(SeqNum=\d+.*ran for \d+ milliseconds before timing out|Timeout at NCCL work: \d+|Timed out waiting \d+ms for (?:recv|send) operation to complete|^Exception raised from checkTimeout at \S*ProcessGroupNCCL\.cpp",
        r"Work[A-Z]*CCL\(SeqNum=[0-9]+.*ran for [0-9]+ milliseconds before timing out|Timeout at NCCL work: [0-9]+|Timed out waiting [0-9]+ms for (recv|send) operation to complete|^Exception raised from checkTimeout at [^ ]*ProcessGroupNCCL\.cpp",
    ),
    // Another rank's watchdog caught the timeout and told this one through the store: torch's
    // `ProcessGroupNCCL::getNCCLWatchdogTimeoutErrorMsg` (`Received a dump signal due to a
    // collective timeout from rank 13 and we will try our best to dump the debug info`), what
    // every rank but the one that timed out prints.
    hit(
        "nccl-timeout-dump-signal",
        Slot::NcclTimeout,
        &["dump signal due to a collective timeout"],
        r"Received a dump signal due to a collective timeout from",
        r"Received a dump signal due to a collective timeout from",
    ),
    // torchelastic's rendezvous gave up waiting for the other nodes
    // (`torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError`, also in the JSON error
    // file its `error_handler` prints): the collective of a job's start.
    Rule {
        kind: Kind::Name,
        // Not code that names the class (`from ... import`, `except`), nor a retry.
        unless: Some(r"\b(?:import|except|[Rr]etry(?:ing)?)\b"),
        ..hit(
            "rendezvous-timeout",
            Slot::NcclTimeout,
            &["RendezvousTimeoutError"],
            r#"\bRendezvousTimeoutError(?::|"|\s*$)"#,
            r#"RendezvousTimeoutError(:|"|[[:space:]]*$)"#,
        )
    },
    // torch's NCCL heartbeat monitor ends a process whose watchdog hung on a collective (or
    // after a collective timeout): `Terminating the process after attempting to dump debug
    // info, due to ProcessGroupNCCL watchdog hang`.
    hit(
        "nccl-heartbeat-terminate",
        Slot::NcclTimeout,
        &["dump debug info"],
        r"Terminating the process after attempting to dump debug info",
        r"Terminating the process after attempting to dump debug info",
    ),
    hit(
        "nccl-ops-failed",
        Slot::NcclTimeout,
        &[
            "operations have failed or timed out",
            "taking the entire process down",
        ],
        r"Some [HNX]CCL operations have failed or timed out|To avoid data inconsistency, we are taking the entire process down",
        r"Some [HNX]CCL operations have failed or timed out|To avoid data inconsistency, we are taking the entire process down",
    ),
    // torch's own store and watchdog stuck on the others: c10d's TCPStore waiting at startup
    // (`DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.`,
    // `TCPStore.cpp`) and `ProcessGroupNCCL's watchdog got stuck for 480 seconds without making
    // progress in monitoring enqueued collectives` (`ProcessGroupNCCL.cpp`, its heartbeat
    // monitor). Other runtimes' collectives that timed out: TensorFlow's collective executor aborting
    // (`base_collective_executor.cc`: `BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED`),
    // the coordination service of JAX and TF multi-host jobs marking a task dead (tsl
    // `coordination_service.cc`: `Task /job:jax_worker/replica:0/task:37 heartbeat timeout.
    // This indicates that the remote task has failed, got preempted, or crashed unexpectedly`),
    // and Ascend's runtime waiting on a stream that HCCL never completes (CANN: `EE1002 ...
    // Stream synchronize timeout`, `rtDeviceSynchronize execute failed, reason=[task timeout]`,
    // HCCL's `EI0002 ... The wait execution of the Notify register times out`, and `EI0006:
    // ... Getting socket times out. Reason: Remote Rank did not send the data in time`).
    hit(
        "runtime-collective-timeout",
        Slot::NcclTimeout,
        &[
            "waiting for clients",
            "watchdog got stuck",
            "StartAbort DEADLINE_EXCEEDED",
            "heartbeat timeout. This indicates",
            "Stream synchronize timeout",
            "reason=[task timeout]",
            "reason=[stream sync timeout]",
            "Notify register times out",
            "Getting socket times out",
        ],
        r"\bTimed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined|\bProcessGroupNCCL's watchdog got stuck for \d+ seconds without making progress|\bStartAbort DEADLINE_EXCEEDED\b|\bheartbeat timeout\. This indicates that the remote task has failed|\bEE1002: .*\bStream synchronize timeout\b|execute failed, reason=\[(?:task|stream sync) timeout\]|The wait execution of the Notify register times out|\bEI0006: .*\bGetting socket times out\b",
        r"Timed out after [0-9]+ seconds waiting for clients\. [0-9]+/[0-9]+ clients joined|ProcessGroupNCCL's watchdog got stuck for [0-9]+ seconds without making progress|StartAbort DEADLINE_EXCEEDED|heartbeat timeout\. This indicates that the remote task has failed|EE1002: .*Stream synchronize timeout|execute failed, reason=\[(task|stream sync) timeout\]|The wait execution of the Notify register times out|EI0006: .*Getting socket times out",
    ),
    // Slurm's client side of a node failure (`srun: error: Node failure on cn12`, salloc's).
    hit(
        "slurm-client-node-failure",
        Slot::NodeFail,
        &["Node failure on "],
        r"(?:srun|salloc|sbatch|yhrun)\b[^:]*: error: Node failure on \S+",
        r"(srun|salloc|sbatch|yhrun)[^:]*: error: Node failure on [^ ]+",
    ),
    // The NVIDIA driver's report of a GPU the node has lost (kernel log lines a job's wrapper
    // or a site's prolog/epilog dumps, `NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off
    // the bus.`; NVIDIA's Xid catalogue: 48 double-bit ECC, 62 and 119/120 the GPU's own
    // controllers halted or timed out, 74 NVLink, 79 off the bus, 95 uncontained ECC). The
    // Xids an application causes (13, 31, 43: its own faults) are not the node's. `NVRM:`
    // must start the kernel's message (the line, or after dmesg's `[ secs]` or syslog's
    // `kernel:`): a health check or a note quoting an Xid is not the event.
    hit(
        "nvidia-xid-gpu-lost",
        Slot::NodeFail,
        &["NVRM: "],
        r"(?:^|kernel:\s+|\]\s+)NVRM: (?:Xid \([^)]*\): (?:48|62|74|79|95|119|120|154)\b|GPU \S+: GPU has fallen off the bus)",
        r"(^|kernel: +|\] +)NVRM: (Xid \([^)]*\): (48|62|74|79|95|119|120|154)([^0-9]|$)|GPU [^ ]+: GPU has fallen off the bus)",
    ),
    // Other schedulers' and platforms' time limits: PBS (`=>> PBS: job killed: walltime 36059
    // exceeded limit 36000`, Moab's `job exceeded wallclock limit`), LSF (`TERM_RUNLIMIT: job
    // killed after reaching LSF run time limit.`), Slurm's job state (`JobState=TIMEOUT` in
    // scontrol, `State: TIMEOUT` in seff, a sacct row), Kubernetes' `activeDeadlineSeconds`
    // (`DeadlineExceeded`), HTCondor's hold (`The job exceeded allowed execute duration of
    // 2+00:00:00`) and CMS CRAB's post-job (`Not retrying job due to wall clock limit (job
    // automatically killed on the worker node)`); and from the schedulers' sources: salloc
    // (`Job 4242 has exceeded its time limit and its allocation has been revoked.`), Torque's
    // mail (`Job exceeded its walltime limit. Job was aborted`), Grid Engine's execd (`job 4242.1
    // exceeded hard wallclock time - initiate terminate method`) and qacct (`failed 37 : qmaster
    // enforced h_rt limit`), OpenPBS's `Exit_status = -29` (`JOB_EXEC_KILL_WALLTIME`), dstack's
    // `max duration exceeded`.
    hit(
        "scheduler-time-limit",
        Slot::Timeout,
        &[
            "due to wall clock limit",
            "enforced h_rt",
            "Exit_status",
            "ceeded",
            "TERM_",
            "JobState=",
            "State: TIMEOUT",
            "DeadlineExceeded",
            "active longer than specified deadline",
            "TIMEOUT ",
        ],
        r"PBS: job killed: walltime \d+ exceeded limit|\bexceeded (?:wall ?clock|walltime) limit|\bNot retrying job due to wall clock limit\b|\bhas exceeded its time limit and its allocation has been revoked|\bJob exceeded its walltime limit\b|\bexceeded hard wallclock time\b|\bqmaster enforced h_rt limit\b|\bExit_status ?= ?-29\b|(?:^|:\s*)max duration exceeded\s*$|\bexceeded allowed execute duration of|\bTERM_RUNLIMIT\b|\bJobState=TIMEOUT\b|\bState: TIMEOUT\b|\bDeadlineExceeded\b.*\bdeadline\b|Job was active longer than specified deadline|^\s*\d+(?:_\d+)?(?:\.\w+)?\s.* TIMEOUT +\d+:\d+\s*$",
        r"PBS: job killed: walltime [0-9]+ exceeded limit|exceeded (wall ?clock|walltime) limit|Not retrying job due to wall clock limit|has exceeded its time limit and its allocation has been revoked|Job exceeded its walltime limit|exceeded hard wallclock time|qmaster enforced h_rt limit|Exit_status ?= ?-29([^0-9]|$)|(^|: *)max duration exceeded *$|exceeded allowed execute duration of|TERM_RUNLIMIT|JobState=TIMEOUT|State: TIMEOUT|DeadlineExceeded.*deadline|Job was active longer than specified deadline|^ *[0-9]+(_[0-9]+)?(\.[[:alnum:]_]+)? .* TIMEOUT +[0-9]+:[0-9]+ *$",
    ),
    // A cloud's notice that a spot machine is being taken back (EC2's Spot Instance interruption
    // notice, read from the instance metadata's `spot/instance-action`; runners print it as
    // `Spot interruption payload received: {"action":"terminate",...}`): the notice received,
    // not a setting that mentions it.
    Rule {
        // Not a runner saying that none came (`No spot interruption notice received`).
        unless: Some(
            r"\b(?:[Nn]o|[Nn]ot|[Ww]ithout)\b[^.]{0,40}[Ss]pot (?:[Ii]nstance )?[Ii]nterruption",
        ),
        ..hit(
            "spot-interruption-notice",
            Slot::Preempted,
            &["nterruption"],
            r#"\b[Ss]pot (?:[Ii]nstance )?[Ii]nterruption (?:[Nn]otice|[Ww]arning|payload) (?:received|detected)|\b[Rr]eceived (?:an? )?(?:EC2 )?[Ss]pot (?:[Ii]nstance )?[Ii]nterruption\b|"detail-type":\s*"EC2 Spot Instance Interruption Warning""#,
            r#"[Ss]pot ([Ii]nstance )?[Ii]nterruption ([Nn]otice|[Ww]arning|payload) (received|detected)|[Rr]eceived (an? )?(EC2 )?[Ss]pot ([Ii]nstance )?[Ii]nterruption|"detail-type": *"EC2 Spot Instance Interruption Warning""#,
        )
    },
    // Preemption as schedulers and clouds report it: Slurm's state (`JobState=PREEMPTED`, a sacct
    // row), LSF (`TERM_PREEMPT`), PBS/Moab (`job preempted`), Kubernetes (`Preempted by pod ..`),
    // SkyPilot (`The cluster is preempted.`, `Cluster is preempted or failed (status: INIT).
    // Recovering...`), a cloud VM (`Instance was preempted`, `spot instance interrupted`); from
    // their sources: HTCondor's user log (`004 (4242.000.000) 2025-01-02 03:04:05 Job was
    // evicted.`), Kueue (`Preempted to accommodate a workload`), GCE's operation
    // (`operationType: compute.instances.preempted`), a node's or TPU's described state (`state: PREEMPTED`,
    // Azure Batch's `"state": "preempted"`).
    // Not vLLM's `Sequence group 5 is preempted by PreemptionMode.RECOMPUTE` (a scheduling
    // decision inside the engine).
    Rule {
        unless: Some(r"PreemptionMode|[Ss]equence group|requests? (?:was|were|is|are) preempted"),
        ..hit(
            "scheduler-preempted",
            Slot::Preempted,
            &[
                "TERM_",
                "JobState=",
                "preempted",
                "Preempted by",
                "State: PREEMPTED",
                "PREEMPTED",
                "Job was evicted",
                "Preempted to accommodate",
            ],
            r#"\bJobState=PREEMPTED\b|\bState: PREEMPTED\b|\bTERM_PREEMPT\b|\b[Jj]ob \S+ (?:was|has been|got) preempted\b|^\s*[Jj]ob preempted\b|\bPreempted by (?:pod|a pod|\S+/\S+)|\b[Cc]luster (?:\S+ )?is preempted(?:\.| or failed)|\b(?:[Ii]nstance|VM|[Ss]pot (?:instance|VM)s?) \S+ (?:was|has been|got) preempted\b|^\s*\d+(?:_\d+)?(?:\.\w+)?\s.* PREEMPTED +\d+:\d+\s*$|^\d{3} \(\d+\.\d+\.\d+\) .*\bJob was evicted\.|\bPreempted to accommodate a workload\b|\boperationType:\s*"?compute\.instances\.preempted\b|^\s*"?state"?:\s*"?(?:PREEMPTED|preempted)"?,?\s*$"#,
            r#"JobState=PREEMPTED|State: PREEMPTED|TERM_PREEMPT|[Jj]ob [^ ]+ (was|has been|got) preempted|^ *[Jj]ob preempted|Preempted by (pod|a pod|[^ ]+/[^ ]+)|[Cc]luster ([^ ]+ )?is preempted(\.| or failed)|([Ii]nstance|VM|[Ss]pot (instance|VM)s?) [^ ]+ (was|has been|got) preempted|^ *[0-9]+(_[0-9]+)?(\.[[:alnum:]_]+)? .* PREEMPTED +[0-9]+:[0-9]+ *$|^[0-9]{3} \([0-9]+\.[0-9]+\.[0-9]+\) .*Job was evicted\.|Preempted to accommodate a workload|operationType: *"?compute\.instances\.preempted|^ *"?state"?: *"?(PREEMPTED|preempted)"?,? *$"#,
        )
    },
    // A spot VM taken back as a workflow engine words it (Cromwell on GCP Batch: `A Spot VM for
    // the job was preempted during run time`), and dstack's termination reason for a run whose
    // spot capacity went away (`INTERRUPTED_BY_NO_CAPACITY`, `JobTerminationReason`).
    hit(
        "spot-vm-preempted",
        Slot::Preempted,
        &["preempted during run time", "INTERRUPTED_BY_NO_CAPACITY"],
        r"\b(?:[Ss]pot|[Pp]reemptible) (?:VM|[Ii]nstance) for the job was preempted during run time\b|\bINTERRUPTED_BY_NO_CAPACITY\b",
        r"([Ss]pot|[Pp]reemptible) (VM|[Ii]nstance) for the job was preempted during run time|INTERRUPTED_BY_NO_CAPACITY",
    ),
    // submitit's signal handler on a preempted job (`Caught signal SIGUSR1 on learnfair4096:
    // this job is preempted.`, `core/job_environment.py`), and the kubelet evicting a pod for a
    // critical one (`Preempted in order to admit critical pod`, `pkg/kubelet/preemption`).
    hit(
        "runner-preempted",
        Slot::Preempted,
        &[
            "this job is preempted",
            "Preempted in order to admit critical ",
        ],
        r"\bCaught signal SIG\w+ on \S+: this job is preempted\b|\bPreempted in order to admit critical [Pp]od\b",
        r"Caught signal SIG[[:alnum:]]+ on [^ ]+: this job is preempted|Preempted in order to admit critical [Pp]od",
    ),
    // An InfiniBand adapter's fatal event as NCCL reports it (`transport/net_ib.cu`: `NET/IB :
    // Got async event : local catastrophic error`, IBV_EVENT_DEVICE_FATAL): the node's network
    // card is gone.
    hit(
        "ib-catastrophic-error",
        Slot::NodeFail,
        &["catastrophic error"],
        r"\bGot async event : local catastrophic error\b",
        r"Got async event : local catastrophic error",
    ),
    // A node or device lost, as other schedulers and runtimes say it: Slurm's state
    // (`JobState=NODE_FAIL`, a sacct row), PBS (`Job requeued, execution node n1 down`, Torque's
    // `unable to run job, MOM rejected/timeout`, `Server could not connect to MOM`), Ray's dead
    // node (`The node with node id .. has been marked dead because the detector has missed too
    // many heartbeats`), a GPU that is gone (`GPU has fallen off the bus` without its Xid,
    // nvidia-smi's `GPU is lost` and `Unable to determine the device handle for GPU
    // 0000:81:00.0: Unknown Error` (NVML cannot reach the card), the NVIDIA driver's and CUDA's
    // uncorrectable ECC errors, an
    // AMD GPU's `uncorrectable hardware error`, Xid 154's `Node Reboot Required`), an Ascend NPU's
    // `lost heartbeat`; Ray's actor whose node died (`python/ray/exceptions.py`: `The actor is
    // dead because its node has died. Node Id: ...`); Open MPI's launcher losing a node's daemon
    // (`help-errmgr-base.txt`: `ORTE has lost communication with its daemon located on node:`,
    // `... with a remote daemon`; PRTE since 5.0); the NVIDIA driver failing to bring a GPU up (`NVRM: RmInitAdapter
    // failed!`, in the kernel log: the card cannot be used until the node is looked at); from
    // the sources: Slurm's `BOOT_FAIL` state, PBS's sister node
    // (`=>> PBS: job killed: node 1 (gpu-018) requested job die, code 15059`), HTCondor's lost
    // execute machine (`Job disconnected too long: JobLeaseDuration (2400 seconds) expired`),
    // the Kubernetes node controller (`Node gpu-017 status is now: NodeNotReady`), DCGM's health
    // watch (`Detected XID 79 for GPU 0` for the Xids that lose the GPU, `GPU 3 has fallen off
    // the bus`, `Detected 2 volatile double-bit ECC error(s) in GPU 3.`). Not the amdgpu
    // driver's hung ring (`*ERROR* ring gfx_0.0.0 timeout`): a kernel of the job's own hangs it
    // too (`holdout4/rocm-navi21-ring-timeout-...`: a bad embedding input).
    hit(
        "node-or-device-lost",
        Slot::NodeFail,
        &[
            "BOOT_FAIL",
            "requested job die",
            "JobLeaseDuration",
            // The node controller's event (`Node X status is now: NodeNotReady`).
            "Node ",
            "Detected XID",
            "double-bit ECC",
            "NODE_FAIL",
            "execution node",
            "to MOM",
            "MOM rejected",
            "has been marked dead",
            "is dead because its node has died",
            "has lost communication with",
            "fallen off the bus",
            "GPU is lost",
            "ncorrectable ECC error encountered",
            "ncorrectable NVLink error",
            "ncorrectable hardware error(",
            "Node Reboot Required",
            "lost heartbeat",
            "device handle for GPU",
            "NVRM: ",
        ],
        r"\bUnable to determine the device handle for GPU \S+: Unknown Error|\b(?:NODE|BOOT)_FAIL\b|Job (?:requeued|deleted), execution node \S+ down|MOM rejected|could not connect to MOM|has been marked dead because the detector has missed too many heartbeats|\bThe actor is dead because its node has died\b|\b(?:ORTE|PRTE) has lost communication with (?:its|a remote) daemon\b|GPU (?:\S+ )?has fallen off the bus|\brequested job die, code \d+|\bJobLeaseDuration \(\d+ seconds\) expired|\bNode \S+ status is now: NodeNotReady\b|\bDetected XID (?:48|62|64|74|79|95|119|120|154) for GPU\b|\bDetected [1-9]\d* volatile double-bit ECC error|GPU is lost|[Uu]ncorrectable (?:ECC error encountered|NVLink error detected)|uncorrectable hardware error\(|Node Reboot Required|[Dd]evice\[?[0-9]+\]? lost heartbeat|reason=lost heartbeat|\bNVRM: RmInitAdapter failed!",
        r"Unable to determine the device handle for GPU [^ ]+: Unknown Error|(NODE|BOOT)_FAIL|Job (requeued|deleted), execution node [^ ]+ down|MOM rejected|could not connect to MOM|has been marked dead because the detector has missed too many heartbeats|The actor is dead because its node has died|(ORTE|PRTE) has lost communication with (its|a remote) daemon|GPU ([^ ]+ )?has fallen off the bus|requested job die, code [0-9]+|JobLeaseDuration \([0-9]+ seconds\) expired|Node [^ ]+ status is now: NodeNotReady|Detected XID (48|62|64|74|79|95|119|120|154) for GPU|Detected [1-9][0-9]* volatile double-bit ECC error|GPU is lost|[Uu]ncorrectable (ECC error encountered|NVLink error detected)|uncorrectable hardware error\(|Node Reboot Required|[Dd]evice\[?[0-9]+\]? lost heartbeat|reason=lost heartbeat|NVRM: RmInitAdapter failed!",
    ),
    // The kubelet evicting a pod from a node short of something other than memory
    // (`pkg/kubelet/eviction/helpers.go`: `The node had condition: [DiskPressure]. `, `The node
    // was low on resource: ephemeral-storage. `): the node, not the job, is the trouble.
    // Not when the kubelet names the job's own container as the largest consumer (`Container
    // trainer was using 80Gi, request is 0, has larger consumption of ephemeral-storage.`):
    // then the job filled the disk, and the same configuration would again.
    Rule {
        unless: Some(r"has larger consumption of"),
        ..hit(
            "k8s-node-pressure-eviction",
            Slot::NodeFail,
            &[
                "The node had condition: [",
                "low on resource: ephemeral-storage",
            ],
            r"The node had condition: \[(?:DiskPressure|PIDPressure)\]|The node was low on resource: ephemeral-storage\.",
            r"The node had condition: \[(DiskPressure|PIDPressure)\]|The node was low on resource: ephemeral-storage\.",
        )
    },
    // A GCP machine reclaimed under the job (spot / preemptible): the metadata server's
    // notice as workers relay it, the line ending `termination is imminent` (Taskcluster's
    // `GCP Metadata Service says termination is imminent`). Not a watcher announcing itself,
    // nor docs that mention termination.
    hit(
        "cloud-spot-reclaimed",
        Slot::Preempted,
        &["imminent"],
        r"\bsays termination is imminent\b|\btermination is imminent\.?\s*$",
        r"says termination is imminent|termination is imminent\.? *$",
    ),
    // --------------------------------------------------------------- error (specific)
    hit(
        "python-import-error",
        Slot::Error,
        &["ModuleNotFoundError: ", "ImportError: "],
        r#"(?:^|[\s:>\]\)('"])(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError): "#,
        r"(ModuleNotFoundError|ImportError): ",
    ),
    // A CUDA fault that is not a lack of memory (kernel bug, bad index, broken device,
    // allocator bug): `CUDA error: X` for any X but `out of memory` (misaligned address,
    // unspecified launch failure, device-side assert, ...), an illegal memory access however
    // it is reported, an internal assert of the caching allocator.
    // C++ code's own `CUDA Error: misaligned address (716) file: line N` counts the same.
    msg(
        "cuda-fault",
        Slot::Error,
        &[
            "CUDA error: ",
            "CUDA Error: ",
            "illegal memory access",
            "INTERNAL ASSERT FAILED",
        ],
        r"CUDA [Ee]rror: (?:[^o]|o[^u])|an illegal memory access was encountered|INTERNAL ASSERT FAILED",
        r"CUDA [Ee]rror: ([^o]|o[^u])|an illegal memory access was encountered|INTERNAL ASSERT FAILED",
    ),
    // A kernel's device-side assert as the CUDA runtime prints it, one line per failing thread
    // (`Indexing.cu:1284: indexSelectLargeIndex: block: [134,0,0], thread: [0,0,0] Assertion
    // `srcIndex < srcSelectDimSize` failed.`), often glued after a progress bar: a bad index,
    // not capacity. And NCCL's report of a CUDA call that failed for another reason than
    // memory (`NCCL WARN Cuda failure 999 'unknown error'`).
    // (`ssertion `` rather than `Assertion `` or `] Assertion ``: Teddy fingerprints a needle by
    // its first bytes, and these were the cheapest of the forms measured with callgrind on the
    // bench logs: the realistic log's count fell 20 % against `Assertion ``.)
    hit(
        "cuda-kernel-assert",
        Slot::Error,
        &["ssertion `", "Cuda failure "],
        r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `.+` failed|Cuda failure (?:\d+ )?'(?:[^o]|o[^u])",
        r"block: \[[0-9]+,[0-9]+,[0-9]+\], thread: \[[0-9]+,[0-9]+,[0-9]+\] Assertion `.+` failed|Cuda failure ([0-9]+ )?'([^o]|o[^u])",
    ),
    // Native crashes that are line formats of their own: CPython's fatal error, a C++
    // exception escaping (`terminate called after throwing`), torch 0.x's `THCudaCheck FAIL`.
    // Not a `std::bad_alloc` escaping: that is the host's memory (`cpp-bad-alloc`), which a
    // crash hit would otherwise explain away.
    Rule {
        unless: Some(r"std::bad_alloc"),
        ..hit(
            "native-crash",
            Slot::Error,
            &["Fatal Python error: ", "after throwing", "THCudaCheck FAIL"],
            r"Fatal Python error: |terminate called after throwing|THCudaCheck FAIL",
            r"Fatal Python error: |terminate called after throwing|THCudaCheck FAIL",
        )
    },
    // A heap corrupted under the allocator: tcmalloc's `Attempt to free invalid pointer`
    // (`src/tcmalloc.cc`), glibc's `free(): invalid pointer` (`malloc/malloc.c`,
    // `malloc_printerr`). The process aborts; like any specific fatal error, it explains a
    // silent death in the same log (a notebook kernel restarted, an exit 137), which is then
    // not read as the OOM killer's.
    Rule {
        unless: Some(r"(?i)\b(?:harmless|note|if|when|may|might|ignore|ignored)\b"),
        ..hit(
            "heap-corruption",
            Slot::Error,
            &["nvalid pointer"],
            r"\bAttempt to free invalid pointer\b|\bfree\(\): invalid pointer\b",
            r"Attempt to free invalid pointer|free\(\): invalid pointer",
        )
    },
    msg(
        "config-divisible",
        Slot::Error,
        &["be divisible by"],
        r"(?:must|should) be divisible by",
        r"(must|should) be divisible by",
    ),
    msg(
        "verl-max-token-len",
        Slot::Error,
        &["must be greater than the sequence length"],
        r"must be greater than the sequence length",
        r"must be greater than the sequence length",
    ),
    // SGLang's CUDA-graph capture ran out of device memory (`Capture cuda graph failed: CUDA out of
    // memory. ..`): its own advice is a lower `--mem-fraction-static` (the KV pool gives room to
    // the graphs), which is the kv_cache ladder's step. Claims the line, and is listed before the
    // rule for the capture's other failures, which claims it too.
    Rule {
        name: "sglang-capture-cuda-graph-oom",
        kind: Kind::Message,
        action: Action::Hit(Slot::KvCache),
        needles: &["Capture cuda graph failed"],
        pattern: r"Capture cuda graph failed: .*\bout of memory",
        unless: None,
        claims: true,
        ere: r"Capture cuda graph failed: .*out of memory",
        requires: &[],
    },
    // Its advice text mentions --mem-fraction-static and `{e}` may quote another error (a lost
    // gloo connection): the line itself is an `error`, nothing else on it counts.
    Rule {
        name: "sglang-capture-cuda-graph",
        kind: Kind::Message,
        action: Action::Hit(Slot::Error),
        needles: &["Capture cuda graph failed"],
        pattern: r"Capture cuda graph failed",
        unless: None,
        claims: true,
        ere: r"Capture cuda graph failed",
        requires: &[],
    },
    // ---------------------------------------------------------------- error (weak)
    hit(
        "ray-actor-died",
        Slot::ErrorWeak,
        &["ActorDiedError", "RayActorError"],
        r"\b(?:ActorDiedError|RayActorError)\b",
        r"(ActorDiedError|RayActorError)",
    ),
    hit(
        "vllm-engine-core-init",
        Slot::ErrorWeak,
        &["Engine core initialization failed"],
        r"Engine core initialization failed",
        r"Engine core initialization failed",
    ),
    hit(
        "sglang-scheduler-exception",
        Slot::ErrorWeak,
        &["Scheduler hit an exception"],
        r"Scheduler hit an exception",
        r"Scheduler hit an exception",
    ),
    hit(
        "sglang-sigquit",
        Slot::ErrorWeak,
        &["Received sigquit from a child"],
        r"Received sigquit from a child process",
        r"Received sigquit from a child process",
    ),
    hit(
        "torchrun-child-failed",
        Slot::ErrorWeak,
        &["ChildFailedError"],
        r"\bChildFailedError\b",
        r"ChildFailedError",
    ),
    hit(
        "slurm-failed-banner",
        Slot::ErrorWeak,
        &["FAILED (non-zero exit code"],
        r"FAILED \(non-zero exit code",
        r"FAILED \(non-zero exit code",
    ),
    // Hydra's last words for any verl failure; its override list may contain anything
    // (experiment names with "oom", memory knobs), so it claims the line.
    Rule {
        name: "hydra-error-executing-job",
        kind: Kind::Format,
        action: Action::Hit(Slot::ErrorWeak),
        needles: &["Error executing job with overrides"],
        pattern: r"Error executing job with overrides",
        unless: None,
        claims: true,
        ere: r"Error executing job with overrides",
        requires: &[],
    },
    Rule {
        name: "python-traceback",
        kind: Kind::Format,
        action: Action::TracebackStart,
        needles: &["(most recent call last)"],
        pattern: r"Traceback \(most recent call last\)",
        unless: None,
        claims: false,
        ere: r"Traceback \(most recent call last\)",
        requires: &[],
    },
    // Python's report of an exception it swallowed (`__del__`, `atexit` handlers, logging
    // errors): the traceback that follows does not end the process.
    Rule {
        name: "python-ignored-exception",
        kind: Kind::Format,
        action: Action::IgnoredTracebackNext,
        needles: &[
            "Exception ignored in",
            "Error in atexit._run_exitfuncs",
            "--- Logging error ---",
        ],
        pattern: r"Exception ignored in|Error in atexit\._run_exitfuncs|--- Logging error ---",
        unless: None,
        claims: false,
        ere: r"Exception ignored in|Error in atexit\._run_exitfuncs|--- Logging error ---",
        requires: &[],
    },
];
