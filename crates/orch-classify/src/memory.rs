//! The numbers a memory failure prints, read from the line that decided the verdict.
//!
//! A planner that knows only "gpu_oom" can halve something and hope; one that knows the job
//! asked for 17.68 GiB with 3.12 GiB free on a 79.18 GiB card, or that another process held
//! 36 GiB of it, can tell what would fit. Each reader here takes one segment (the deciding
//! line, whole — not the capped evidence text) and fills what its format states:
//!
//! - **torch** (`torch.OutOfMemoryError` / `RuntimeError: CUDA out of memory`, CUDA or HIP):
//!   the request, the card's capacity and free memory, this process's use, what PyTorch has
//!   allocated and reserved-but-unallocated, and every `Process N has X GiB memory in use`
//!   (another program on the card). Both the current message and the pre-2.1
//!   `(GPU 0; X total capacity; Y already allocated; Z free; W reserved in total)` one, which
//!   torch_npu (Ascend) still prints as `NPU out of memory ... (NPU 0; X total capacity; Y
//!   already allocated; Y current active; Z free; W reserved in total by PyTorch)`.
//! - **vLLM**: the start-up check `Free memory on device (F/T GiB) on startup is less than
//!   desired GPU memory utilization (U, D GiB)`, KV-cache shortfalls (`max seq len (N) is
//!   larger than the maximum number of tokens that can be stored in KV cache (M)`, `X GiB KV
//!   cache is needed, which is larger than the available KV cache memory (Y GiB)`) and
//!   `the estimated maximum model length is N`.
//! - **SGLang**: `mem_fraction_static=F` in its "Not enough memory" message.
//! - torch's **bounded allocation** (`Allocation on device 0 would exceed allowed memory`):
//!   allocated, request, device limit and free, when the report is on one line.
//! - **XLA** (JAX): the request of `RESOURCE_EXHAUSTED: Out of memory while trying to allocate
//!   N bytes`.
//! - **Host**: Ray's memory monitor (`was 237.99GB / 250.53GB (0.95), which exceeds the
//!   memory usage threshold of 0.95`) and the kernel's `Killed process N (...) anon-rss:NkB`.
//!
//! Formats: `shared/reference/failure-signatures.md` (sections a, b, c, d), each with its
//! source. Sizes are stored in GiB (2^30 bytes) as printed, so 17.68 GiB stays 17.68; Ray
//! prints decimal GB (10^9 bytes) and the kernel kB (1024 bytes), converted here.

use std::sync::OnceLock;

use regex::bytes::{Captures, Regex};
use serde::{Deserialize, Serialize};

/// See [`MemoryFacts::request_is_absurd`]: seven halvings of the batch would not make it fit, and no
/// ladder halves that often.
pub const ABSURD_REQUEST: f64 = 100.0;

/// Where in a training step the failure happened, as far as the log shows it (traceback
/// frames, Ray task names). Two levels: the RL stage, and the step of the optimisation loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The rollout engine starting: weights loaded, KV cache sized (vLLM profiling,
    /// SGLang's memory pool).
    RolloutStartup,
    /// Rollout generation.
    Generation,
    /// Log-probabilities of the actor or the reference model.
    LogProb,
    /// The critic's values (verl's `compute_values`: a no-grad forward of the critic).
    Values,
    /// The critic's update (verl's `update_critic`).
    CriticUpdate,
    /// The policy (actor) update.
    ActorUpdate,
}

/// The step of the optimisation loop a failure happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Forward,
    Backward,
    OptimizerStep,
}

/// Another program holding memory on the card, as torch names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessUse {
    pub pid: u32,
    pub gib: f64,
}

/// Every number a memory failure stated. All optional: each format states some of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryFacts {
    /// torch: the allocation that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried_to_allocate_gib: Option<f64>,
    /// The device index torch names (`GPU 0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// The card's total memory as the driver reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_gib: Option<f64>,
    /// Free on the card when the allocation failed (vLLM: at start-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_gib: Option<f64>,
    /// torch: everything this process holds on the card, PyTorch's or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_in_use_gib: Option<f64>,
    /// torch: memory handed out by PyTorch's caching allocator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_gib: Option<f64>,
    /// torch: reserved by the caching allocator but not handed out (fragmentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_unallocated_gib: Option<f64>,
    /// Other programs on the card (`Process N has X GiB memory in use`), without the failing
    /// process itself: torch lists every process when it cannot tell which one it is (in a
    /// container), so the entry whose pid the line's `(Actor pid=N)` prefix names, or else
    /// the smallest entry that holds all PyTorch reserved, is taken as this process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_processes: Vec<ProcessUse>,
    /// vLLM start-up: the utilization asked for (`gpu_memory_utilization`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_utilization: Option<f64>,
    /// vLLM start-up: utilization × capacity, the memory it wanted free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_gib: Option<f64>,
    /// vLLM: KV cache one max-length sequence needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_needed_gib: Option<f64>,
    /// vLLM: KV cache memory left after weights and activations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_available_gib: Option<f64>,
    /// vLLM: the configured max sequence length (`max_model_len`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seq_len: Option<u64>,
    /// vLLM: tokens the KV cache can hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<u64>,
    /// vLLM: the longest sequence that would fit (`estimated maximum model length is N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_max_model_len: Option<u64>,
    /// SGLang: `mem_fraction_static` in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_fraction_static: Option<f64>,
    /// Host memory in use when the host ran out (Ray's monitor; the kernel's victim RSS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_used_gib: Option<f64>,
    /// Host memory in total (Ray's monitor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_total_gib: Option<f64>,
    /// Host memory the job asked the scheduler for (Slurm `--mem`), when the scheduler ended
    /// it for exceeding it (`OUT_OF_MEMORY`, a cgroup kill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_requested_gib: Option<f64>,
    /// The host allocation that failed (torch's CPU allocator: `you tried to allocate N
    /// bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tried_to_allocate_gib: Option<f64>,
    /// RL stage the failure happened in, where the log shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    /// Step of the optimisation loop, where the log shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Step>,
}

impl MemoryFacts {
    /// The request is more than [`ABSURD_REQUEST`] times the card's capacity: a size computed
    /// wrong (torch asked for 37,631 GiB on an 80 GiB card), not memory pressure.
    pub fn request_is_absurd(&self) -> bool {
        matches!((self.tried_to_allocate_gib, self.capacity_gib),
            (Some(t), Some(c)) if c > 0.0 && t > ABSURD_REQUEST * c)
    }

    /// Nothing was read.
    pub fn is_empty(&self) -> bool {
        *self == MemoryFacts::default()
    }

    /// The numbers in one line, for people: `tried 17.68 GiB · free 3.92 of 79.18 GiB ·
    /// allocated 68.68 · reserved-unallocated 4.08 · phase actor_update/backward`; another
    /// program on the card is named first, since nothing orch changes in this job frees it.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let g = |v: f64| format!("{v:.2}");
        if !self.other_processes.is_empty() {
            let holders: Vec<String> = self
                .other_processes
                .iter()
                .map(|p| format!("process {} holds {} GiB", p.pid, g(p.gib)))
                .collect();
            parts.push(format!(
                "other programs on the card: {}",
                holders.join(", ")
            ));
        }
        if let Some(t) = self.tried_to_allocate_gib {
            parts.push(format!("tried {} GiB", g(t)));
        }
        match (self.free_gib, self.capacity_gib) {
            (Some(f), Some(c)) => parts.push(format!("free {} of {} GiB", g(f), g(c))),
            (None, Some(c)) => parts.push(format!("capacity {} GiB", g(c))),
            (Some(f), None) => parts.push(format!("free {} GiB", g(f))),
            (None, None) => {}
        }
        if let Some(a) = self.allocated_gib {
            parts.push(format!("allocated {}", g(a)));
        }
        if let Some(r) = self.reserved_unallocated_gib {
            parts.push(format!("reserved-unallocated {}", g(r)));
        }
        if let (Some(u), Some(d)) = (self.desired_utilization, self.desired_gib) {
            parts.push(format!("utilization {u} wants {} GiB", g(d)));
        }
        if let (Some(n), Some(a)) = (self.kv_cache_needed_gib, self.kv_cache_available_gib) {
            parts.push(format!("KV cache needs {} GiB, has {}", g(n), g(a)));
        }
        if let (Some(m), Some(t)) = (self.max_seq_len, self.kv_cache_tokens) {
            parts.push(format!("max seq len {m} > {t} KV tokens"));
        }
        if let Some(n) = self.estimated_max_model_len {
            parts.push(format!("fits max_model_len {n}"));
        }
        if let Some(f) = self.mem_fraction_static {
            parts.push(format!("mem_fraction_static {f}"));
        }
        match (self.host_used_gib, self.host_total_gib) {
            (Some(u), Some(t)) => parts.push(format!("host {} of {} GiB", g(u), g(t))),
            (Some(u), None) => parts.push(format!("host {} GiB in use", g(u))),
            _ => {}
        }
        if let Some(t) = self.host_tried_to_allocate_gib {
            parts.push(format!("host allocation of {} GiB failed", g(t)));
        }
        if let Some(r) = self.host_requested_gib {
            parts.push(format!("exceeded the {} GiB asked of the scheduler", g(r)));
        }
        let phase: Vec<&str> = [
            self.stage.map(|s| match s {
                Stage::RolloutStartup => "rollout_startup",
                Stage::Generation => "generation",
                Stage::LogProb => "log_prob",
                Stage::Values => "values",
                Stage::CriticUpdate => "critic_update",
                Stage::ActorUpdate => "actor_update",
            }),
            self.step.map(|s| match s {
                Step::Forward => "forward",
                Step::Backward => "backward",
                Step::OptimizerStep => "optimizer_step",
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !phase.is_empty() {
            parts.push(format!("phase {}", phase.join("/")));
        }
        parts.join(" · ")
    }

    /// Memory other programs hold on the card, in GiB (0 when torch named none).
    pub fn others_gib(&self) -> f64 {
        self.other_processes.iter().map(|p| p.gib).sum()
    }
}

/// Bytes per unit as these programs print them.
fn unit_gib(unit: &[u8]) -> Option<f64> {
    const GIB: f64 = (1u64 << 30) as f64;
    Some(match unit {
        b"bytes" | b"B" => 1.0 / GIB,
        b"KiB" => 1024.0 / GIB,
        b"MiB" => (1u64 << 20) as f64 / GIB,
        b"GiB" => 1.0,
        b"TiB" => 1024.0,
        b"kB" | b"KB" => 1e3 / GIB,
        b"MB" => 1e6 / GIB,
        b"GB" => 1e9 / GIB,
        b"TB" => 1e12 / GIB,
        _ => return None,
    })
}

/// A size as torch prints it: a number then a unit (`17.68 GiB`, `0 bytes`).
const SIZE: &str = r"([0-9]+(?:\.[0-9]+)?) ?(bytes|KiB|MiB|GiB|TiB|B)";
/// [`SIZE`] where the figure is not read (no capture groups).
const SIZE_NC: &str = r"[0-9]+(?:\.[0-9]+)? ?(?:bytes|KiB|MiB|GiB|TiB|B)";

fn num(c: &Captures, i: usize) -> Option<f64> {
    std::str::from_utf8(c.get(i)?.as_bytes()).ok()?.parse().ok()
}

fn int(c: &Captures, i: usize) -> Option<u64> {
    std::str::from_utf8(c.get(i)?.as_bytes()).ok()?.parse().ok()
}

/// The size in capture groups `i` (number) and `i + 1` (unit), in GiB.
fn size(c: &Captures, i: usize) -> Option<f64> {
    Some(num(c, i)? * unit_gib(c.get(i + 1)?.as_bytes())?)
}

struct Readers {
    tried: Regex,
    capacity_free: Regex,
    this_process: Regex,
    other_process: Regex,
    actor_pid: Regex,
    allocated: Regex,
    reserved_unallocated: Regex,
    legacy: Regex,
    vllm_startup: Regex,
    vllm_kv_tokens: Regex,
    vllm_kv_memory: Regex,
    vllm_estimated: Regex,
    sglang_fraction: Regex,
    ray_monitor: Regex,
    kernel_kill: Regex,
    cpu_alloc: Regex,
    xla_tried: Regex,
    limit: Regex,
}

fn readers() -> &'static Readers {
    static R: OnceLock<Readers> = OnceLock::new();
    R.get_or_init(|| {
        let re = |p: String| Regex::new(&p).expect("memory reader regex");
        Readers {
            tried: re(format!(r"Tried to allocate {SIZE}")),
            // "capacty" is how torch 2.1 spelled it.
            // Intel's XPU build of torch may leave the free figure out (`GPU 0 has a total
            // capacity of 13.74 GiB. Of the allocated memory ...`).
            capacity_free: re(format!(
                r"GPU ([0-9]+) has a total capac(?:i)?ty of {SIZE}(?: of which {SIZE} is free)?"
            )),
            this_process: re(format!(r"this process has {SIZE} memory in use")),
            other_process: re(format!(r"Process ([0-9]+) has {SIZE} memory in use")),
            actor_pid: re(r"^\s*\([\w.:\- ]*pid=([0-9]+)".to_string()),
            allocated: re(format!(r"Of the allocated memory {SIZE} is allocated by PyTorch")),
            reserved_unallocated: re(format!(r"{SIZE} is reserved by PyTorch but unallocated")),
            // torch_npu (Ascend) keeps this format with `NPU` and a `current active` figure.
            legacy: re(format!(
                r"\((?:GPU|NPU) ([0-9]+); {SIZE} total capacity; {SIZE} already allocated;(?: {SIZE_NC} current active;)? {SIZE} free;(?: {SIZE_NC} allowed;)?(?: {SIZE} reserved in total by PyTorch)?"
            )),
            vllm_startup: re(
                r"Free memory on device(?: \S+)? \(([0-9.]+)/([0-9.]+) GiB\) on startup is less than desired GPU memory utilization \(([0-9.]+), ([0-9.]+) GiB\)"
                    .to_string(),
            ),
            vllm_kv_tokens: re(
                r"max seq len \(([0-9]+)\) is larger than the maximum number of tokens that can be stored in KV cache \(([0-9]+)\)"
                    .to_string(),
            ),
            vllm_kv_memory: re(format!(
                r"max seq len \(([0-9]+)\), \({SIZE} KV cache is needed, which is larger than the available KV cache memory \({SIZE}\)"
            )),
            vllm_estimated: re(r"estimated maximum model length is ([0-9]+)".to_string()),
            sglang_fraction: re(r"mem_fraction_static=([0-9.]+)".to_string()),
            // Ray's monitor since 2.2, and the raylet's own kill line before it (`Used memory
            // (23.63GB) / total capacity (33.28GB)`).
            ray_monitor: re(
                r"was running was ([0-9.]+)GB / ([0-9.]+)GB \([0-9.]+\), which exceeds the memory usage threshold|Used memory \(([0-9.]+)GB\) / total capacity \(([0-9.]+)GB\)"
                    .to_string(),
            ),
            kernel_kill: re(r"Killed process [0-9]+ \([^)]*\) total-vm:[0-9]+kB, anon-rss:([0-9]+)kB".to_string()),
            // torch's CPU allocator: `DefaultCPUAllocator: can't allocate memory: you tried to
            // allocate 278528000 bytes` (and `not enough memory: you tried to allocate 1GB`).
            cpu_alloc: re(
                r"DefaultCPUAllocator: [^:]*: you tried to allocate ([0-9]+(?:\.[0-9]+)?) ?(bytes|KB|MB|GB|TB)"
                    .to_string(),
            ),
            // XLA's allocator (JAX): `RESOURCE_EXHAUSTED: Out of memory while trying to
            // allocate 4770354232 bytes.`
            // torch's bounded-allocation report (`Allocation on device 0 would exceed allowed
            // memory. (out of memory)`), when its figures are on the same line: `Currently
            // allocated : A Requested : R Device limit : L Free (according to CUDA): F`.
            limit: re(format!(
                r"Currently allocated\s*: {SIZE}\s+Requested\s*: {SIZE}\s+Device limit\s*: {SIZE}\s+Free \(according to CUDA\): {SIZE}(?:\s+PyTorch limit \(set by user-supplied memory fraction\)\s*: {SIZE})?"
            )),
            xla_tried: re(
                r"(?:RESOURCE_EXHAUSTED|Resource exhausted): (?:Out of memory while trying to allocate ([0-9]+) bytes|Failed to allocate request for [^(]*\(([0-9]+)B\))"
                    .to_string(),
            ),
        }
    })
}

/// Read every number `seg` (one log line or `\r`-segment) states about memory.
pub fn read(seg: &[u8]) -> MemoryFacts {
    let r = readers();
    let mut f = MemoryFacts::default();
    read_torch(r, seg, &mut f);
    read_vllm(r, seg, &mut f);
    if let Some(c) = r.sglang_fraction.captures(seg) {
        f.mem_fraction_static = num(&c, 1);
    }
    if let Some(c) = r.ray_monitor.captures(seg) {
        let gb = |i: usize| num(&c, i).map(|gb| gb * 1e9 / (1u64 << 30) as f64);
        f.host_used_gib = gb(1).or_else(|| gb(3));
        f.host_total_gib = gb(2).or_else(|| gb(4));
    }
    if let Some(c) = r.cpu_alloc.captures(seg) {
        let scale = match c.get(2).map(|m| m.as_bytes()) {
            Some(b"bytes") => 1.0,
            Some(b"KB") => 1e3,
            Some(b"MB") => 1e6,
            Some(b"GB") => 1e9,
            _ => 1e12,
        };
        f.host_tried_to_allocate_gib = num(&c, 1).map(|n| n * scale / (1u64 << 30) as f64);
    }
    if let Some(c) = r.limit.captures(seg) {
        f.allocated_gib = size(&c, 1);
        f.tried_to_allocate_gib = size(&c, 3);
        // A memory fraction below the device is the process's card.
        f.capacity_gib = match (size(&c, 5), size(&c, 9)) {
            (Some(device), Some(limit)) => Some(device.min(limit)),
            (device, _) => device,
        };
        f.free_gib = size(&c, 7);
    }
    if let Some(c) = r.xla_tried.captures(seg) {
        f.tried_to_allocate_gib = num(&c, 1)
            .or_else(|| num(&c, 2))
            .map(|b| b / (1u64 << 30) as f64);
    }
    if let Some(c) = r.kernel_kill.captures(seg) {
        f.host_used_gib = num(&c, 1).map(|kb| kb * 1024.0 / (1u64 << 30) as f64);
    }
    f
}

fn read_torch(r: &Readers, seg: &[u8], f: &mut MemoryFacts) {
    if let Some(c) = r.tried.captures(seg) {
        f.tried_to_allocate_gib = size(&c, 1);
    }
    if let Some(c) = r.capacity_free.captures(seg) {
        f.device = int(&c, 1).and_then(|d| u32::try_from(d).ok());
        f.capacity_gib = size(&c, 2);
        f.free_gib = size(&c, 4);
    }
    if let Some(c) = r.this_process.captures(seg) {
        f.process_in_use_gib = size(&c, 1);
    }
    for c in r.other_process.captures_iter(seg) {
        if let (Some(pid), Some(gib)) = (int(&c, 1), size(&c, 2)) {
            f.other_processes.push(ProcessUse {
                pid: u32::try_from(pid).unwrap_or(u32::MAX),
                gib,
            });
        }
    }
    if let Some(c) = r.allocated.captures(seg) {
        f.allocated_gib = size(&c, 1);
    }
    if let Some(c) = r.reserved_unallocated.captures(seg) {
        f.reserved_unallocated_gib = size(&c, 1);
    }
    separate_this_process(r, seg, f);
    if let Some(c) = r.legacy.captures(seg) {
        f.device = int(&c, 1).and_then(|d| u32::try_from(d).ok());
        f.capacity_gib = size(&c, 2);
        f.allocated_gib = size(&c, 4);
        f.free_gib = size(&c, 6);
        // Old torch states the reserved total; what is reserved but not allocated is the
        // fragmentation the current message names directly.
        if let (Some(reserved), Some(allocated)) = (size(&c, 8), f.allocated_gib) {
            f.reserved_unallocated_gib =
                Some(((reserved - allocated).max(0.0) * 100.0).round() / 100.0);
        }
    }
}

/// Take the failing process out of torch's process list (see [`MemoryFacts::other_processes`]).
fn separate_this_process(r: &Readers, seg: &[u8], f: &mut MemoryFacts) {
    if f.other_processes.is_empty() || f.process_in_use_gib.is_some() {
        return;
    }
    let by_pid = r
        .actor_pid
        .captures(seg)
        .and_then(|c| int(&c, 1))
        .and_then(|pid| {
            f.other_processes
                .iter()
                .position(|p| u64::from(p.pid) == pid)
        });
    let held = f.allocated_gib.unwrap_or(0.0) + f.reserved_unallocated_gib.unwrap_or(0.0);
    let by_size = || {
        f.allocated_gib?;
        f.other_processes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.gib + 0.01 >= held)
            .min_by(|a, b| a.1.gib.total_cmp(&b.1.gib))
            .map(|(i, _)| i)
    };
    if let Some(i) = by_pid.or_else(by_size) {
        f.process_in_use_gib = Some(f.other_processes.remove(i).gib);
    }
}

fn read_vllm(r: &Readers, seg: &[u8], f: &mut MemoryFacts) {
    if let Some(c) = r.vllm_startup.captures(seg) {
        f.free_gib = num(&c, 1);
        f.capacity_gib = num(&c, 2);
        f.desired_utilization = num(&c, 3);
        f.desired_gib = num(&c, 4);
    }
    if let Some(c) = r.vllm_kv_tokens.captures(seg) {
        f.max_seq_len = int(&c, 1);
        f.kv_cache_tokens = int(&c, 2);
    }
    if let Some(c) = r.vllm_kv_memory.captures(seg) {
        f.max_seq_len = int(&c, 1);
        f.kv_cache_needed_gib = size(&c, 2);
        f.kv_cache_available_gib = size(&c, 4);
    }
    if let Some(c) = r.vllm_estimated.captures(seg) {
        f.estimated_max_model_len = int(&c, 1);
    }
}

/// The stage and step a traceback frame (`File "...", line N, in NAME`), its source line,
/// or a Ray task name (`ray::WorkerDict.actor_rollout_update_actor()`) points at.
///
/// Names from verl's workers (`fsdp_workers.py`, `megatron_workers.py`), vLLM's and SGLang's
/// engine start-up, and torch's autograd and optimizers.
pub(crate) fn stage_of(line: &[u8]) -> Option<Stage> {
    const STAGES: &[(&str, Stage)] = &[
        ("update_actor", Stage::ActorUpdate),
        ("update_policy", Stage::ActorUpdate),
        ("compute_ref_log_prob", Stage::LogProb),
        ("compute_log_prob", Stage::LogProb),
        ("compute_values", Stage::Values),
        ("update_critic", Stage::CriticUpdate),
        ("generate_sequences", Stage::Generation),
        // SGLang mapping its released memory back before a rollout (verl's
        // `rollout_mode`; sgl-project/sglang#14092's log).
        ("resume_memory_occupation", Stage::Generation),
        ("determine_num_available_blocks", Stage::RolloutStartup),
        ("_initialize_kv_caches", Stage::RolloutStartup),
        ("determine_available_memory", Stage::RolloutStartup),
        ("init_memory_pool", Stage::RolloutStartup),
        ("profile_run", Stage::RolloutStartup),
        ("_build_rollout", Stage::RolloutStartup),
    ];
    STAGES
        .iter()
        .find(|(name, _)| memchr::memmem::find(line, name.as_bytes()).is_some())
        .map(|&(_, s)| s)
}

/// See [`stage_of`]; the step of the optimisation loop.
pub(crate) fn step_of(line: &[u8]) -> Option<Step> {
    let has = |n: &str| memchr::memmem::find(line, n.as_bytes()).is_some();
    if has("in backward") || has("_engine_run_backward") || has(".backward(") {
        Some(Step::Backward)
    } else if has("optimizer.step(")
        || has("/optim/")
        || has("in _single_tensor_adam")
        || has("in _multi_tensor_adam")
        || has("in _fused_adam")
    {
        Some(Step::OptimizerStep)
    } else if has("in forward") || has("in _forward") {
        Some(Step::Forward)
    } else {
        None
    }
}

/// Stage and step accumulated over the frames of one traceback.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Phase {
    pub(crate) stage: Option<Stage>,
    pub(crate) step: Option<Step>,
}

impl Phase {
    /// Take in one frame or source line of a traceback (outermost first).
    pub(crate) fn observe(&mut self, line: &[u8]) {
        // The innermost stage names the work (update_actor calls compute_log_prob in some
        // trainers only for its own forward; the deepest named stage is the one running).
        if let Some(s) = stage_of(line) {
            self.stage = Some(s);
        }
        // Backward outranks a forward seen inside it (activation recomputation runs the
        // forward again from within backward); the optimizer step comes after both.
        match (self.step, step_of(line)) {
            (_, None) => {}
            (Some(Step::Backward), Some(_)) => {}
            (_, Some(s)) => self.step = Some(s),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.stage.is_none() && self.step.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) {
        let a = a.unwrap_or_else(|| panic!("expected {b}, got nothing"));
        assert!((a - b).abs() < 0.005, "{a} != {b}");
    }

    #[test]
    fn torch_lists_the_process_itself_when_it_cannot_tell_which_it_is() {
        let f = read(
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.93 GiB. GPU 0 has a total capacity of 79.14 GiB of which 3.79 GiB is free. Process 13118 has 75.33 GiB memory in use. Of the allocated memory 73.96 GiB is allocated by PyTorch, with 34.50 MiB allocated in private pools (e.g., CUDA Graphs), and 639.99 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        );
        close(f.tried_to_allocate_gib, 4.93);
        close(f.capacity_gib, 79.14);
        close(f.free_gib, 3.79);
        assert_eq!(f.device, Some(0));
        close(f.allocated_gib, 73.96);
        close(f.reserved_unallocated_gib, 639.99 / 1024.0);
        // The only listed process holds everything PyTorch reserved: it is this one.
        close(f.process_in_use_gib, 75.33);
        assert!(f.other_processes.is_empty());
    }

    #[test]
    fn another_program_on_the_card_seed_000() {
        // Seed 000: an SGLang server and the trainer share one 44.42 GiB A40.
        let f = read(
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity of 44.42 GiB of which 27.50 MiB is free. Process 2963820 has 36.34 GiB memory in use. Process 2965022 has 8.05 GiB memory in use. Of the allocated memory 7.46 GiB is allocated by PyTorch, and 91.03 MiB is reserved by PyTorch but unallocated.",
        );
        close(f.process_in_use_gib, 8.05);
        assert_eq!(
            f.other_processes,
            vec![ProcessUse {
                pid: 2963820,
                gib: 36.34
            }]
        );
        close(Some(f.others_gib()), 36.34);
        // A Ray/vLLM `pid=` prefix names the process outright.
        let g = read(b"(WorkerDict pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. Process 9 has 30.00 GiB memory in use. Process 7 has 40.00 GiB memory in use.");
        close(g.process_in_use_gib, 40.0);
        assert_eq!(g.other_processes, vec![ProcessUse { pid: 9, gib: 30.0 }]);
    }

    #[test]
    fn torch_this_process_and_small_units() {
        let f = read(
            b"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated.",
        );
        close(f.tried_to_allocate_gib, 22.0 / 1024.0);
        close(f.free_gib, 11.06 / 1024.0);
        close(f.process_in_use_gib, 23.60);
        assert!(f.other_processes.is_empty());
        let zero = read(b"Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.");
        close(zero.allocated_gib, 0.0);
        close(zero.reserved_unallocated_gib, 0.0);
    }

    /// torch_npu's message (vllm-project/vllm-ascend#1987): the legacy format with `NPU` and a
    /// `current active` figure.
    #[test]
    fn torch_npu_legacy_format() {
        let f = read(
            b"RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; 58.92 GiB already allocated; 58.92 GiB current active; 1.66 GiB free; 58.95 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
        );
        close(f.tried_to_allocate_gib, 3.47);
        assert_eq!(f.device, Some(0));
        close(f.capacity_gib, 60.97);
        close(f.allocated_gib, 58.92);
        close(f.free_gib, 1.66);
        close(f.reserved_unallocated_gib, 0.03);
        // The first allocation: nothing held yet, and a memory fraction's `allowed` figure.
        let first = read(
            b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 1; 60.97 GiB total capacity; 0 bytes already allocated; 0 bytes current active; 60.10 GiB free; 30.00 GiB allowed; 0 bytes reserved in total by PyTorch)",
        );
        close(first.capacity_gib, 60.97);
        close(first.allocated_gib, 0.0);
        close(first.free_gib, 60.10);
        close(first.reserved_unallocated_gib, 0.0);
    }

    /// torch's XPU build (intel/intel-extension-for-pytorch#851) states no free figure.
    #[test]
    fn torch_xpu_without_a_free_figure() {
        let f = read(
            b"torch.OutOfMemoryError: XPU out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 13.74 GiB. Of the allocated memory 10.10 GiB is allocated by PyTorch, and 3.47 GiB is reserved by PyTorch but unallocated. Please use `empty_cache` to release all unoccupied cached memory.",
        );
        close(f.tried_to_allocate_gib, 4.0);
        close(f.capacity_gib, 13.74);
        assert_eq!(f.free_gib, None);
        close(f.allocated_gib, 10.10);
        close(f.reserved_unallocated_gib, 3.47);
    }

    /// torch's bounded-allocation report on one line (continue-revolution/sd-webui-animatediff#320).
    #[test]
    fn torch_exceed_allowed_memory_on_one_line() {
        let f = read(
            b"OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory) Currently allocated : 12.20 GiB Requested : 1.88 GiB Device limit : 16.00 GiB Free (according to CUDA): 0 bytes PyTorch limit (set by user-supplied memory fraction) : 17179869184.00 GiB",
        );
        close(f.allocated_gib, 12.20);
        close(f.tried_to_allocate_gib, 1.88);
        close(f.capacity_gib, 16.0);
        close(f.free_gib, 0.0);
        let bounded = read(b"Allocation on device 0 would exceed allowed memory. (out of memory) Currently allocated : 9.00 GiB Requested : 2.00 GiB Device limit : 79.18 GiB Free (according to CUDA): 60.00 GiB PyTorch limit (set by user-supplied memory fraction) : 10.00 GiB");
        close(bounded.capacity_gib, 10.0);
    }

    /// XLA's request in bytes (patrickbryant1/AFProfile#8), in GiB, and StreamExecutor's
    /// (google-deepmind/jax_privacy#10); its BFC allocator's non-fatal warning states no
    /// request orch reads.
    #[test]
    fn xla_request_in_bytes() {
        let f = read(
            b"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4770354232 bytes.",
        );
        close(f.tried_to_allocate_gib, 4770354232.0 / (1u64 << 30) as f64);
        let s = read(b"RESOURCE_EXHAUSTED: Failed to allocate request for 176.00MiB (184549376B) on device ordinal 0");
        close(s.tried_to_allocate_gib, 176.0 / 1024.0);
        let warning = read(b"W external/xla/xla/tsl/framework/bfc_allocator.cc:310] Allocator (GPU_0_bfc) ran out of memory trying to allocate 3.37GiB with freed_by_count=0.");
        assert_eq!(warning.tried_to_allocate_gib, None);
    }

    #[test]
    fn torch_legacy_format_and_misspelling() {
        let f = read(
            b"RuntimeError: CUDA out of memory. Tried to allocate 2.87 GiB (GPU 0; 14.76 GiB total capacity; 8.77 GiB already allocated; 19.75 MiB free; 13.71 GiB reserved in total by PyTorch)",
        );
        close(f.tried_to_allocate_gib, 2.87);
        close(f.capacity_gib, 14.76);
        close(f.allocated_gib, 8.77);
        close(f.free_gib, 19.75 / 1024.0);
        close(f.reserved_unallocated_gib, 13.71 - 8.77);
        let old = read(b"Tried to allocate 55.57 GiB. GPU 0 has a total capacty of 12.00 GiB of which 9.02 GiB is free.");
        close(old.capacity_gib, 12.0);
    }

    #[test]
    fn vllm_startup_and_kv_cache() {
        let f = read(
            b"(EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization",
        );
        close(f.free_gib, 19.77);
        close(f.capacity_gib, 22.05);
        close(f.desired_utilization, 0.9);
        close(f.desired_gib, 19.84);
        let kv = read(
            b"ValueError: To serve at least one request with the models's max seq len (262144), (24.00 GiB KV cache is needed, which is larger than the available KV cache memory (8.04 GiB). Based on the available memory, the estimated maximum model length is 87840. Try increasing",
        );
        assert_eq!(kv.max_seq_len, Some(262144));
        close(kv.kv_cache_needed_gib, 24.0);
        close(kv.kv_cache_available_gib, 8.04);
        assert_eq!(kv.estimated_max_model_len, Some(87840));
        let tokens = read(b"ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3664).");
        assert_eq!(
            (tokens.max_seq_len, tokens.kv_cache_tokens),
            (Some(4096), Some(3664))
        );
    }

    #[test]
    fn sglang_ray_and_kernel() {
        let s = read(b"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.8");
        close(s.mem_fraction_static, 0.8);
        let ray = read(b"Memory on the node (IP: 10.0.0.1, ID: abc) where the task (task ID: x, name=WorkerDict.generate_sequences, pid=1, memory used=2.0GB) was running was 237.99GB / 250.53GB (0.949929), which exceeds the memory usage threshold of 0.95.");
        close(ray.host_used_gib, 237.99e9 / (1u64 << 30) as f64);
        close(ray.host_total_gib, 250.53e9 / (1u64 << 30) as f64);
        let k = read(b"Memory cgroup out of memory: Killed process 4242 (python) total-vm:123456kB, anon-rss:104857600kB, file-rss:0kB");
        close(k.host_used_gib, 100.0);
    }

    #[test]
    fn the_summary_puts_other_programs_first() {
        let f = read(
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity of 44.42 GiB of which 27.50 MiB is free. Process 2963820 has 36.34 GiB memory in use. Process 2965022 has 8.05 GiB memory in use. Of the allocated memory 7.46 GiB is allocated by PyTorch, and 91.03 MiB is reserved by PyTorch but unallocated.",
        );
        assert_eq!(
            f.summary(),
            "other programs on the card: process 2963820 holds 36.34 GiB · tried 0.05 GiB · \
             free 0.03 of 44.42 GiB · allocated 7.46 · reserved-unallocated 0.09"
        );
        let mut p = f.clone();
        p.other_processes.clear();
        p.stage = Some(Stage::ActorUpdate);
        p.step = Some(Step::Backward);
        assert!(
            p.summary().ends_with("phase actor_update/backward"),
            "{}",
            p.summary()
        );
        assert_eq!(MemoryFacts::default().summary(), "");
    }

    #[test]
    fn a_line_with_no_numbers_reads_nothing() {
        assert!(read(b"torch.OutOfMemoryError: CUDA out of memory.").is_empty());
        assert!(read(b"").is_empty());
    }

    #[test]
    fn phase_from_frames() {
        let mut p = Phase::default();
        for l in [
            &b"  File \"/verl/workers/fsdp_workers.py\", line 545, in update_actor"[..],
            b"  File \"/verl/workers/actor/dp_actor.py\", line 400, in update_policy",
            b"    loss.backward()",
            b"  File \"/torch/utils/checkpoint.py\", line 300, in recompute_fn",
            b"  File \"/transformers/models/qwen2/modeling_qwen2.py\", line 80, in forward",
        ] {
            p.observe(l);
        }
        assert_eq!(p.stage, Some(Stage::ActorUpdate));
        assert_eq!(p.step, Some(Step::Backward));
        let mut q = Phase::default();
        q.observe(b"(WorkerDict pid=1)   File \"/vllm/worker/worker.py\", line 10, in determine_num_available_blocks");
        assert_eq!(q.stage, Some(Stage::RolloutStartup));
        assert_eq!(q.step, None);
        let mut o = Phase::default();
        o.observe(b"  File \"/torch/optim/adamw.py\", line 200, in step");
        assert_eq!(o.step, Some(Step::OptimizerStep));
        // verl's critic (`fsdp_workers.py` `CriticWorker.update_critic` / `compute_values`,
        // `dp_critic.py` at b178a3cd5; Ray names the task `WorkerDict.critic_update_critic`).
        let mut c = Phase::default();
        for l in [
            &b"ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.critic_update_critic() (pid=1, ip=127.0.0.1)"[..],
            b"  File \"/verl/workers/critic/dp_critic.py\", line 247, in update_critic",
            b"    loss.backward()",
        ] {
            c.observe(l);
        }
        assert_eq!(
            (c.stage, c.step),
            (Some(Stage::CriticUpdate), Some(Step::Backward))
        );
        let mut v = Phase::default();
        v.observe(b"  File \"/verl/workers/critic/dp_critic.py\", line 178, in compute_values");
        assert_eq!(v.stage, Some(Stage::Values));
        // SGLang's resume before a rollout (sgl-project/sglang#14092, verl with SGLang).
        let mut g = Phase::default();
        g.observe(b"(WorkerDict pid=209740) WARNING:2025-11-28 16:00:45,396:Async request to resume_memory_occupation timed out (attempt 1)");
        assert_eq!(g.stage, Some(Stage::Generation));
    }
}
