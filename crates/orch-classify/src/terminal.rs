//! The process's last words: which exception ended it, and whether that exception is a
//! failure of its own or the teardown that follows an earlier memory failure.
//!
//! Every followed traceback's final exception line (except those Python reports as
//! swallowed: `Exception ignored in`, atexit, logging errors) replaces the previous one,
//! so after the stream the last one is known. It is one of three kinds:
//!
//! * **memory** — the line itself reports a memory failure (a memory rule matches it in
//!   reporting position): `torch.OutOfMemoryError: CUDA out of memory ...`,
//!   `ValueError: No available memory for the cache blocks`.
//! * **teardown** — what other ranks, launchers and drivers raise after some process died:
//!   NCCL / c10d errors (`DistBackendError`, `RuntimeError: NCCL communicator was aborted`),
//!   torchrun's `ChildFailedError`, AReaL's launcher `JobException`, Hydra's
//!   `InstantiationException` (it wraps the target's exception), Ray's `ActorDiedError` / `RayActorError` and the
//!   `RayTaskError(X)` wrapper, `KeyboardInterrupt` / `SystemExit`, broken pipes and reset
//!   connections, and any line a weak-error (wrapper) rule matches (`Engine core
//!   initialization failed`).
//! * **other** — anything else (`FileNotFoundError`, `ValueError` from config,
//!   `ImportError`, ...): a different failure. When it comes after the evidence of a
//!   memory failure, the memory failure is not what killed the job (see `State::verdict`).

use super::Evidence;
use super::engine::Engine;
use super::position;
use super::rules::Slot;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExcKind {
    Memory,
    Teardown,
    Other,
}

/// The last exception line that ended a followed traceback.
#[derive(Debug, Clone)]
pub(crate) struct Terminal {
    pub kind: ExcKind,
    pub evidence: Evidence,
}

/// Exception names (last dotted component) raised as a consequence of another process
/// dying, never a cause of their own.
const TEARDOWN_NAMES: &[&[u8]] = &[
    b"ChildFailedError",
    // AReaL's launcher (`realhf.scheduler.client.JobException: Job … JobState.FAILED`)
    // re-raises a worker's death; the worker's own error came before it.
    b"JobException",
    // Hydra's `instantiate` re-raises what a target's constructor raised (`raise
    // InstantiationException(msg) from e`): a model that does not fit the GPU in an rl-swarm
    // trainer's `__init__` ends the job as this, after the OOM's own traceback.
    b"InstantiationException",
    b"DistBackendError",
    b"DistNetworkError",
    b"DistStoreError",
    b"DistError",
    b"ActorDiedError",
    b"RayActorError",
    b"ActorUnavailableError",
    b"WorkerCrashedError",
    b"NodeDiedError",
    b"OwnerDiedError",
    b"ObjectLostError",
    b"RaySystemError",
    b"KeyboardInterrupt",
    b"SystemExit",
    b"SignalException",
    b"BrokenPipeError",
    b"ConnectionResetError",
    b"ConnectionAbortedError",
    b"EOFError",
    b"CancelledError",
];

/// Message fragments of generic exceptions (`RuntimeError: ...`) raised by teardown.
const TEARDOWN_MESSAGES: &[&[u8]] = &[
    b"NCCL",
    b"ProcessGroup",
    b"DataLoader worker",
    b"Connection closed by peer",
    b"Connection reset by peer",
    b"killed by signal",
    // verl's HTTP client to its rollout server (SGLang) giving up after its retries
    // (`http_server_engine.py` `_make_async_request`, L718 at b178a3cd5): the server did
    // not answer, for a reason logged before (sgl-project/sglang#14092: a resume out of
    // memory).
    b"Failed to complete async request to ",
    b"Failed to complete request to ",
];

/// `ray.exceptions.RayTaskError(X): ...` (Ray's re-raise of a task's exception).
pub(crate) fn is_ray_task_error(rest: &[u8]) -> bool {
    let n = position::exception_name_len(rest).unwrap_or(0);
    let name = &rest[..n];
    name.starts_with(b"RayTaskError(") || position::contains(name, b".RayTaskError(")
}

/// The slot of an exception whose class alone is a memory failure: torch's
/// `OutOfMemoryError` (any module but Ray's, whose own `OutOfMemoryError` is its memory
/// monitor's, read from its message), Python's `MemoryError` and TensorFlow's
/// `ResourceExhaustedError`.
pub(crate) fn memory_class_slot(rest: &[u8]) -> Option<Slot> {
    let n = position::exception_name_len(rest)?;
    let name = &rest[..n];
    let last = name.rsplit(|&c| c == b'.').next().unwrap_or(name);
    match last {
        b"OutOfMemoryError" if !name.starts_with(b"ray.") => Some(Slot::GpuOomWeak),
        b"MemoryError" => Some(Slot::HostOom),
        // Apache Arrow's allocator refusing a buffer (`pyarrow.lib.ArrowMemoryError: realloc of
        // size 2172846080 failed`; Arrow's `Status::OutOfMemory`).
        b"ArrowMemoryError" => Some(Slot::HostOom),
        // TensorFlow's class for an allocation refused (`errors_impl.ResourceExhaustedError`),
        // when its message says no more than that (empty, cut, `2 root error(s) found.` with
        // the op's words on the lines after) or names an OOM: the class is also raised for a
        // gRPC message over its size limit or a quota.
        b"ResourceExhaustedError" if tf_oom_message(&rest[n..]) => Some(Slot::GpuOomWeak),
        _ => None,
    }
}

/// The message of a TensorFlow `ResourceExhaustedError` that an OOM leaves: nothing, the
/// multi-error header (`2 root error(s) found.`), or words that name it (`OOM when allocating
/// tensor`, `out of memory`).
fn tf_oom_message(message: &[u8]) -> bool {
    let m = message
        .strip_prefix(b":")
        .unwrap_or(message)
        .trim_ascii()
        .to_ascii_lowercase();
    let digits = m.iter().take_while(|c| c.is_ascii_digit()).count();
    m.is_empty()
        || (digits > 0 && m[digits..].starts_with(b" root error(s) found"))
        || position::contains(&m, b"oom when allocating")
        || position::contains(&m, b"out of memory")
}

/// Classify an exception line: `l` is the whole line, `rest` the part after the
/// traceback's prefix (starting at the exception name).
pub(crate) fn kind_of(eng: &Engine, l: &[u8], rest: &[u8]) -> ExcKind {
    if eng.matches_any(l, eng.memory_rules) || memory_class_slot(rest).is_some() {
        return ExcKind::Memory;
    }
    let n = position::exception_name_len(rest).unwrap_or(0);
    let name = &rest[..n];
    let base = name.split(|&c| c == b'(').next().unwrap_or(name);
    let last = base.rsplit(|&c| c == b'.').next().unwrap_or(base);
    let message = &rest[n..];
    let teardown = is_ray_task_error(rest)
        || TEARDOWN_NAMES.contains(&last)
        || TEARDOWN_MESSAGES
            .iter()
            .any(|m| position::contains(message, m))
        || eng.matches_any(l, eng.weak_rules);
    if teardown {
        ExcKind::Teardown
    } else {
        ExcKind::Other
    }
}
