//! Whether a failure's line reports a write that a full disk, a full quota or full shared
//! memory (`/dev/shm`) failed, and what to do about it. The hint does not depend on the class
//! (such a job is an `error`: no smaller batch helps); it only lets orch say where space ran
//! out, as the trainers' own lines do not always say it.
//!
//! The signatures and where each was seen:
//! - `torch.save` on a full disk: `basic_ios::clear: iostream error` (torch 2.11, orch's own
//!   run on an H100 whose 64 GiB disk train.py's checkpoints filled:
//!   crates/orch-core/data/gpu-runs/README.md, "Not kept", the attempt's evidence at
//!   stderr.log:7); `PytorchStreamWriter failed writing file … file write failed`
//!   (hiyouga/LlamaFactory#1223; pytorch/pytorch#76108, "my disk was full"); and the chained
//!   exception after it, `[enforce fail at inline_container.cc:N] . unexpected pos N vs M`
//!   (verl-project/verl#3346, pytorch/pytorch#121833, pytorch/pytorch#156955 with /tmp full).
//! - Shared memory (a tmpfs in RAM; Docker's default is 64 MB): NCCL's `failed to extend
//!   /dev/shm/nccl-…: No space left on device` and `posix_fallocate failed` (NVIDIA/nccl#290,
//!   #525), torch's `unable to write to file </torch_…>: No space left on device (28)`
//!   (ultralytics/ultralytics#1238, idiap/ESLAM#20).
//! - The C library's words for a full filesystem (`ENOSPC`, errno 28) and a used-up quota
//!   (`EDQUOT`, errno 122), in Python's `OSError` and shell tools. A bare
//!   `OSError: [Errno 28] No space left on device` may be either the disk or shared memory:
//!   DataLoader workers' semaphores live in /dev/shm (NVIDIA/Megatron-LM#878).

/// Where a write found no space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// `torch.save` died mid-write, as it does on a full disk or quota.
    Checkpoint,
    /// Shared memory (`/dev/shm`), not the disk.
    SharedMemory,
    /// A quota (of space or of files).
    Quota,
    /// No space, without saying where: the disk or shared memory.
    NoSpace,
}

impl Full {
    /// What to do, in one line.
    pub fn hint(self) -> &'static str {
        match self {
            Full::Checkpoint => {
                "torch.save failed mid-write, as it does on a full disk or quota: free space where the checkpoints go (or move them), then submit again"
            }
            Full::SharedMemory => {
                "shared memory (/dev/shm) ran out, not the disk: give the job a larger /dev/shm (docker --shm-size), fewer DataLoader workers, or NCCL_SHM_DISABLE=1, then submit again"
            }
            Full::Quota => {
                "a disk quota (of space or of files) is used up: free some (checkpoints, caches) or write elsewhere, then submit again"
            }
            Full::NoSpace => {
                "a write found no space left: the filesystem the job writes to (checkpoints, caches, /tmp) or /dev/shm (DataLoader workers, NCCL) is full; free space, then submit again"
            }
        }
    }
}

/// Where `line` says a write found no space, if it says so.
pub fn full(line: &str) -> Option<Full> {
    let shared = [
        "/dev/shm",
        "</torch_",
        "shared memory",
        "posix_fallocate",
        "nccl-",
    ];
    if line.contains("No space left on device") || line.contains("posix_fallocate failed") {
        return Some(if shared.iter().any(|s| line.contains(s)) {
            Full::SharedMemory
        } else {
            Full::NoSpace
        });
    }
    if line.contains("Disk quota exceeded") {
        return Some(Full::Quota);
    }
    let torch_save = line.contains("basic_ios::clear: iostream error")
        || line.contains("PytorchStreamWriter failed writing")
        || (line.contains("inline_container.cc") && line.contains("unexpected pos "));
    torch_save.then_some(Full::Checkpoint)
}

#[cfg(test)]
mod tests {
    use super::{Full, full};

    #[test]
    fn real_lines_say_where_space_ran_out() {
        for (line, want) in [
            // orch's H100 run (crates/orch-core/data/gpu-runs/README.md).
            (
                "RuntimeError: basic_ios::clear: iostream error",
                Full::Checkpoint,
            ),
            // hiyouga/LlamaFactory#1223.
            (
                "RuntimeError: [enforce fail at inline_container.cc:445] . PytorchStreamWriter failed writing file data/176: file write failed",
                Full::Checkpoint,
            ),
            // verl-project/verl#3346's chained form.
            (
                "RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 2387758464 vs 2387758376",
                Full::Checkpoint,
            ),
            // NVIDIA/nccl#290.
            (
                "misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-WU88OE to 9637892 bytes, error: No space left on device (28)",
                Full::SharedMemory,
            ),
            (
                "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
                Full::SharedMemory,
            ),
            // ultralytics/ultralytics#1238.
            (
                "RuntimeError: unable to write to file </torch_31911_952036340_6686>: No space left on device (28)",
                Full::SharedMemory,
            ),
            // NVIDIA/Megatron-LM#878 (DataLoader semaphores in /dev/shm): where is not said.
            ("OSError: [Errno 28] No space left on device", Full::NoSpace),
            (
                "OSError: [Errno 122] Disk quota exceeded: '/scratch/u/ckpt/step_400'",
                Full::Quota,
            ),
        ] {
            assert_eq!(full(line), Some(want), "{line}");
        }
    }

    #[test]
    fn other_failures_say_nothing_of_space() {
        for line in [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.55 GiB.",
            "ModuleNotFoundError: No module named 'verl'",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            // An I/O error is a failing or network filesystem, not a full one.
            "OSError: [Errno 5] Input/output error",
            "RuntimeError: write(): fd 29 failed with Input/output error",
            "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.parquet'",
        ] {
            assert_eq!(full(line), None, "{line}");
        }
    }
}
