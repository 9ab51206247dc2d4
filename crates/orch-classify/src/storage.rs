//! Whether a failure's line says a write to disk failed the way a full filesystem (or a full
//! quota) makes it fail. Such a job is classified `error` (no smaller batch helps, and the
//! trainers' lines do not always name the disk); this only lets orch say what to do about it.
//!
//! The signatures, each from a real log:
//! - `No space left on device` (`ENOSPC`, errno 28) and `Disk quota exceeded` (`EDQUOT`, errno
//!   122): the C library's own words, in Python's `OSError` and in shell tools.
//! - `PytorchStreamWriter failed writing file …: file write failed`: `torch.save` on a full
//!   disk (hiyouga/LlamaFactory#1223, a checkpoint save that died this way; pytorch/pytorch
//!   #76108, "my disk was full").
//! - `basic_ios::clear: iostream error`: `torch.save` of torch 2.11 on a full disk, orch's own run
//!   on an H100 whose 64 GiB disk train.py's checkpoints filled
//!   (crates/orch-core/data/gpu-runs/README.md, "Not kept").
//! - `write(): fd N failed with Input/output error` in torch's serialization: pytorch/pytorch
//!   #10577 ("The server's disc was saturated").

/// Lines of a failed write to storage, as the C library, Python and torch word them.
const SIGNATURES: &[&str] = &[
    "No space left on device",
    "Disk quota exceeded",
    "PytorchStreamWriter failed writing file",
    "basic_ios::clear: iostream error",
];

/// `line` reports a write to storage that failed as a full disk or quota makes it fail.
pub fn write_failed(line: &str) -> bool {
    SIGNATURES.iter().any(|s| line.contains(s))
        || line.contains("write(): fd ") && line.contains("failed with Input/output error")
}

#[cfg(test)]
mod tests {
    use super::write_failed;

    #[test]
    fn real_lines_of_full_disks_are_failed_writes() {
        for line in [
            // orch's H100 run (crates/orch-core/data/gpu-runs/README.md).
            "RuntimeError: basic_ios::clear: iostream error",
            // hiyouga/LlamaFactory#1223.
            "RuntimeError: [enforce fail at inline_container.cc:445] . PytorchStreamWriter failed writing file data/176: file write failed",
            // pytorch/pytorch#10577.
            "RuntimeError: write(): fd 29 failed with Input/output error",
            "OSError: [Errno 28] No space left on device",
            "OSError: [Errno 122] Disk quota exceeded: '/scratch/u/ckpt/step_400'",
        ] {
            assert!(write_failed(line), "{line}");
        }
    }

    #[test]
    fn other_failures_are_not() {
        for line in [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.55 GiB.",
            "ModuleNotFoundError: No module named 'verl'",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "OSError: [Errno 5] Input/output error",
            "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.parquet'",
        ] {
            assert!(!write_failed(line), "{line}");
        }
    }
}
