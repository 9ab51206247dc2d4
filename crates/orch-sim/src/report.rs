//! Filling in the real trainers' messages: torch's caching-allocator OOM, vLLM's KV-cache
//! errors, SGLang's memory-pool error, Ray's memory monitor and torch elastic's summary (their
//! text is `outputs/`, see [`crate::outputs`]), with torch's size format, the trainers' time
//! stamps, and deterministic pids and Ray ids ([`Ids`]).
//!
//! Formats follow the verbatim lines collected in `failure-signatures.md` (torch
//! `c10/cuda/CUDACachingAllocator.cpp`, `vllm/v1/core/kv_cache_utils.py`,
//! `vllm/v1/worker/gpu_worker.py`, sglang `model_runner.py`, Ray's memory monitor).

use std::time::SystemTime;

use super::outputs::{self, Vars};
use orch_memory::estimate::{GIB, OomDetail};

/// Deterministic process ids, actor ids and jitter, seeded from the command line.
#[derive(Debug, Clone, Copy)]
pub struct Ids {
    seed: u64,
}

pub(crate) fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Ids {
    /// Seeded from the trainer and its arguments, so reruns print the same ids.
    pub fn new(trainer: &str, args: &[String]) -> Self {
        let mut h = fnv1a(trainer.as_bytes(), 0xcbf2_9ce4_8422_2325);
        for a in args {
            h = fnv1a(a.as_bytes(), h);
            h = fnv1a(&[0], h);
        }
        Self { seed: h }
    }

    fn raw(&self, salt: &str) -> u64 {
        splitmix(fnv1a(salt.as_bytes(), self.seed))
    }

    /// A plausible Linux pid.
    pub fn pid(&self, salt: &str) -> u32 {
        10_000 + (self.raw(salt) % 3_990_000) as u32
    }

    /// `len` lowercase hex digits (Ray actor / node / worker ids).
    pub fn hex(&self, salt: &str, len: usize) -> String {
        let mut s = String::new();
        let mut i = 0u64;
        while s.len() < len {
            s.push_str(&format!("{:016x}", self.raw(&format!("{salt}#{i}"))));
            i += 1;
        }
        s.truncate(len);
        s
    }

    /// Uniform in [0, 1).
    pub fn unit(&self, salt: &str) -> f64 {
        (self.raw(salt) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A Python `repr` address, e.g. `0x7f3a2c1e45d0`.
    pub fn addr(&self, salt: &str) -> String {
        format!("0x7f{:010x}", self.raw(salt) & 0xff_ffff_fff0)
    }
}

/// Wall-clock timestamps in the styles the trainers log.
#[derive(Debug, Clone)]
pub struct Stamp {
    /// `YYYY-MM-DDTHH:MM:SS.mmm` (UTC).
    iso: String,
}

impl Stamp {
    /// The current wall-clock time.
    pub fn now() -> Self {
        let s = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        Self {
            iso: s.trim_end_matches('Z').to_string(),
        }
    }
    /// The characters `a..b` of the ISO form (`00` where it is short).
    pub(crate) fn part(&self, a: usize, b: usize) -> &str {
        self.iso.get(a..b).unwrap_or("00")
    }
    /// vLLM: `11-21 04:38:12`.
    pub fn vllm(&self) -> String {
        format!(
            "{}-{} {}",
            self.part(5, 7),
            self.part(8, 10),
            self.part(11, 19)
        )
    }
    /// SGLang: `2025-11-21 04:38:12`.
    pub fn sglang(&self) -> String {
        format!("{} {}", self.part(0, 10), self.part(11, 19))
    }
    /// torch elastic summary: `2025-11-21_04:38:12`.
    pub fn elastic(&self) -> String {
        format!("{}_{}", self.part(0, 10), self.part(11, 19))
    }
    /// glog prefix used by torch elastic / Ray: `1121 04:38:12.123000`.
    pub fn glog(&self) -> String {
        format!(
            "{}{} {}000",
            self.part(5, 7),
            self.part(8, 10),
            self.part(11, 23)
        )
    }
    /// Ray raylet: `2025-11-21 04:38:12,123`.
    pub fn ray(&self) -> String {
        format!(
            "{} {},{}",
            self.part(0, 10),
            self.part(11, 19),
            self.part(20, 23)
        )
    }
}

/// torch's `format_size` (c10/cuda/CUDACachingAllocator.cpp).
pub fn format_size(bytes: f64) -> String {
    let b = bytes.max(0.0);
    if b <= 1024.0 {
        format!("{} bytes", b.round() as u64)
    } else if b <= 1_048_576.0 {
        format!("{:.2} KiB", b / 1024.0)
    } else if b <= 1_073_741_824.0 {
        format!("{:.2} MiB", b / 1_048_576.0)
    } else {
        format!("{:.2} GiB", b / 1_073_741_824.0)
    }
}

/// [`format_size`] of `g` GiB.
pub fn gib(g: f64) -> String {
    format_size(g * GIB)
}

/// How the failing process is named in the OOM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnProcess {
    /// `Including non-PyTorch memory, this process has X memory in use.` (NVML sees our pid).
    ThisProcess,
    /// `Process N has X memory in use.` (container pid namespaces: NVML's pid is not ours).
    Pid(u32),
}

/// The body of torch's OOM exception (without the `torch.OutOfMemoryError: ` class prefix).
pub fn torch_oom_message(d: &OomDetail, other_pids: &[u32], own: OwnProcess) -> String {
    let mut procs = String::new();
    for (i, g) in d.other_processes_gib.iter().enumerate() {
        let pid = other_pids.get(i).copied().unwrap_or(1000 + i as u32);
        procs.push_str(&format!("Process {pid} has {} memory in use. ", gib(*g)));
    }
    match own {
        OwnProcess::ThisProcess => procs.push_str(&format!(
            "Including non-PyTorch memory, this process has {} memory in use. ",
            gib(d.process_gib)
        )),
        OwnProcess::Pid(p) => procs.push_str(&format!(
            "Process {p} has {} memory in use. ",
            gib(d.process_gib)
        )),
    }
    outputs::render(
        outputs::TORCH_OOM,
        &[
            ("tried", &gib(d.tried_gib)),
            ("capacity", &gib(d.capacity_gib)),
            ("free", &gib(d.free_gib)),
            ("processes", &procs),
            ("allocated", &gib(d.allocated_gib)),
            ("unallocated", &gib(d.reserved_unallocated_gib)),
        ],
    )
}

/// vLLM `check_enough_kv_cache_memory`, no blocks at all.
pub fn vllm_no_cache_blocks() -> String {
    outputs::VLLM_NO_CACHE_BLOCKS.to_string()
}

/// vLLM V1 `check_enough_kv_cache_memory`, KV cache smaller than one max-length request.
pub fn vllm_max_len(
    max_model_len: u64,
    needed_gib: f64,
    available_gib: f64,
    estimated: u64,
) -> String {
    outputs::render(
        outputs::VLLM_MAX_LEN,
        &[
            ("max_model_len", &max_model_len.to_string()),
            ("needed", &format!("{needed_gib:.2}")),
            ("available", &format!("{available_gib:.2}")),
            ("estimated", &estimated.to_string()),
        ],
    )
}

/// vLLM `gpu_worker.py` startup check.
pub fn vllm_free_memory(free: f64, total: f64, util: f64, requested: f64) -> String {
    outputs::render(
        outputs::VLLM_FREE_MEMORY,
        &[
            ("free", &format!("{free:.2}")),
            ("total", &format!("{total:.2}")),
            ("util", &py_float(util)),
            ("requested", &format!("{requested:.2}")),
        ],
    )
}

/// SGLang `init_memory_pool`.
pub fn sglang_not_enough() -> String {
    outputs::SGLANG_NOT_ENOUGH.to_string()
}

/// Python's `repr` of a float (`0.6`, `1.0`).
pub fn py_float(x: f64) -> String {
    let s = format!("{x}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// What Ray's memory-monitor kill message (`ray.exceptions.OutOfMemoryError`) names; the
/// message is one string with embedded newlines, as Ray prints it.
pub struct RayOom<'a> {
    /// For the node, actor and worker ids.
    pub ids: &'a Ids,
    /// The killed task (`WorkerDict.actor_rollout_ref_update_actor`).
    pub task_name: &'a str,
    /// The killed worker's pid.
    pub pid: u32,
    /// Its memory (GB).
    pub worker_gb: f64,
    /// The node's memory in use (GB).
    pub used_gb: f64,
    /// The node's memory (GB).
    pub total_gb: f64,
}

/// Ray's memory-monitor message for `r` (`outputs/ray_host_oom.txt`).
pub fn ray_host_oom(r: &RayOom) -> String {
    let worker_gb = format!("{:.2}", r.worker_gb);
    outputs::render(
        outputs::RAY_HOST_OOM,
        &[
            ("node", &r.ids.hex("node", 56)),
            ("actor", &r.ids.hex("actor-oom", 32)),
            ("task", r.task_name),
            ("pid", &r.pid.to_string()),
            ("worker_gb", &worker_gb),
            ("used_gb", &format!("{:.2}", r.used_gb)),
            ("total_gb", &format!("{:.2}", r.total_gb)),
            ("ratio", &format!("{:.6}", r.used_gb / r.total_gb)),
            ("worker", &r.ids.hex("worker", 56)),
        ],
    )
}

/// The actor id and `repr` address Ray prints for `ray::{method}()` in a `RayTaskError`.
pub fn ray_actor(ids: &Ids, method: &str) -> (String, String) {
    (ids.hex(method, 32), ids.addr(method))
}

/// torch elastic's summary after rank 0 (`pid`) ended with `exitcode` (`torchrun`'s own exit,
/// `outputs/torch_elastic_failed.txt`); -9 is the kernel's OOM killer.
pub fn elastic_failed(script: &str, stamp: &Stamp, host: &str, pid: u32, exitcode: i32) -> String {
    let traceback = if exitcode == -9 {
        format!("Signal 9 (SIGKILL) received by PID {pid}")
    } else {
        "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html".to_string()
    };
    Vars::new()
        .set("script", script)
        .set("time", stamp.elastic())
        .set("host", host)
        .set("exitcode", exitcode)
        .set("pid", pid)
        .set("traceback", traceback)
        .text(outputs::TORCH_ELASTIC_FAILED)
}

/// This machine's host name (for torch elastic's summary).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use regex::Regex;

    use super::*;
    use orch_memory::estimate::Site;

    /// The classifier regexes from failure-signatures.md §g.
    const GPU_OOM: &str = r"(CUDA|HIP) out of memory|(CUDA|HIP) error: out of memory|CUDA Error: out of memory at|cudaErrorMemoryAllocation|hipErrorOutOfMemory|HIP_ERROR_OutOfMemory|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure (2 )?'out of memory'";
    const KV: &str = r"No available memory for the cache blocks|larger than the maximum number of tokens that can be stored in KV cache|KV cache is needed, which is larger than the available KV cache memory|estimated maximum model length is \d+|on startup is less than desired GPU memory utilization|Error in memory profiling|Not enough memory\. Please try to increase --mem-fraction-static|(Prefill|Decode) out of memory\. Try to lower your batch size";
    const HOST: &str = r"Task was killed due to the node running low on memory|killed due to memory pressure \(OOM\)";

    fn detail() -> OomDetail {
        OomDetail {
            site: Site::Softmax,
            label: "softmax".into(),
            tried_gib: 17.6779,
            capacity_gib: 79.18,
            free_gib: 7.75,
            allocated_gib: 65.14,
            reserved_unallocated_gib: 3.8,
            process_gib: 71.43,
            other_processes_gib: vec![],
        }
    }

    #[test]
    fn torch_sizes_format_like_torch() {
        assert_eq!(format_size(512.0), "512 bytes");
        assert_eq!(format_size(2048.0), "2.00 KiB");
        assert_eq!(format_size(48.0 * 1_048_576.0), "48.00 MiB");
        assert_eq!(format_size(17.66 * GIB), "17.66 GiB");
        assert_eq!(gib(0.02685546875), "27.50 MiB");
    }

    #[test]
    fn torch_oom_matches_the_real_format() {
        let msg = format!(
            "torch.OutOfMemoryError: {}",
            torch_oom_message(&detail(), &[], OwnProcess::ThisProcess)
        );
        let re = Regex::new(
            r"^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate \d+\.\d\d (GiB|MiB)\. GPU 0 has a total capacity of \d+\.\d\d GiB of which \d+\.\d\d (GiB|MiB) is free\. Including non-PyTorch memory, this process has \d+\.\d\d GiB memory in use\. Of the allocated memory \d+\.\d\d GiB is allocated by PyTorch, and \d+\.\d\d (GiB|MiB) is reserved by PyTorch but unallocated\. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation\.  See documentation for Memory Management  \(https://pytorch\.org/docs/stable/notes/cuda\.html#environment-variables\)$",
        )
        .unwrap();
        assert!(re.is_match(&msg), "{msg}");
        assert!(
            msg.contains("Tried to allocate 17.68 GiB. GPU 0 has a total capacity of 79.18 GiB")
        );
        assert!(Regex::new(GPU_OOM).unwrap().is_match(&msg));
    }

    #[test]
    fn torch_oom_lists_other_processes_like_seed_000() {
        let mut d = detail();
        d.other_processes_gib = vec![36.34];
        d.process_gib = 8.05;
        d.tried_gib = 48.0 / 1024.0;
        d.free_gib = 27.5 / 1024.0;
        let msg = torch_oom_message(&d, &[2963820], OwnProcess::Pid(2965022));
        assert!(msg.contains(
            "Tried to allocate 48.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 27.50 MiB is free. Process 2963820 has 36.34 GiB memory in use. Process 2965022 has 8.05 GiB memory in use. Of the allocated memory"
        ), "{msg}");
    }

    #[test]
    fn vllm_messages_match_the_real_formats() {
        let kv = Regex::new(KV).unwrap();
        let m = vllm_no_cache_blocks();
        assert!(m.starts_with(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
        ));
        assert!(kv.is_match(&m));
        let m = vllm_max_len(32768, 1.75, 1.07, 20076);
        assert!(m.starts_with("To serve at least one request with the model's max seq len (32768), (1.75 GiB KV cache is needed, which is larger than the available KV cache memory (1.07 GiB). Based on the available memory, the estimated maximum model length is 20076. Try increasing"), "{m}");
        let est = Regex::new(r"estimated maximum model length is (\d+)").unwrap();
        assert_eq!(&est.captures(&m).unwrap()[1], "20076");
        let m = vllm_free_memory(15.55, 23.65, 0.7, 16.555);
        assert_eq!(
            m,
            "Free memory on device cuda:0 (15.55/23.65 GiB) on startup is less than desired GPU memory utilization (0.7, 16.55 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
        );
        assert!(kv.is_match(&m));
        assert!(kv.is_match(&sglang_not_enough()));
    }

    #[test]
    fn ray_host_oom_matches_the_real_format() {
        let ids = Ids::new("verl", &[]);
        let m = ray_host_oom(&RayOom {
            ids: &ids,
            task_name: "WorkerDict.actor_rollout_ref_init_model",
            pid: 1234,
            worker_gb: 10.09,
            used_gb: 46.37,
            total_gb: 48.0,
        });
        let first = format!(
            "ray.exceptions.OutOfMemoryError: {}",
            m.lines().next().unwrap()
        );
        assert_eq!(
            first,
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."
        );
        let re = Regex::new(r"Memory on the node \(IP: 127\.0\.0\.1, ID: [0-9a-f]{56}\) where the task \(actor ID: [0-9a-f]{32}, name=WorkerDict\.actor_rollout_ref_init_model, pid=1234, memory used=10\.09GB\) was running was 46\.37GB / 48\.00GB \(0\.96\d+\), which exceeds the memory usage threshold of 0\.95\.").unwrap();
        assert!(re.is_match(&m), "{m}");
        assert!(Regex::new(HOST).unwrap().is_match(&m));
    }

    #[test]
    fn ids_are_deterministic() {
        let a = Ids::new("verl", &["x=1".to_string()]);
        let b = Ids::new("verl", &["x=1".to_string()]);
        let c = Ids::new("verl", &["x=2".to_string()]);
        assert_eq!(a.pid("w"), b.pid("w"));
        assert_ne!(a.hex("n", 32), c.hex("n", 32));
        assert_eq!(a.hex("n", 56).len(), 56);
        assert!((0.0..1.0).contains(&a.unit("u")));
    }

    #[test]
    fn stamps_have_the_trainer_shapes() {
        let s = Stamp {
            iso: "2025-11-21T04:38:12.123".into(),
        };
        assert_eq!(s.vllm(), "11-21 04:38:12");
        assert_eq!(s.sglang(), "2025-11-21 04:38:12");
        assert_eq!(crate::trainers::areal::stamp(&s), "20251121-04:38:12.123");
        assert_eq!(s.elastic(), "2025-11-21_04:38:12");
        assert_eq!(s.ray(), "2025-11-21 04:38:12,123");
        assert_eq!(py_float(0.6), "0.6");
        assert_eq!(py_float(1.0), "1.0");
    }
}
