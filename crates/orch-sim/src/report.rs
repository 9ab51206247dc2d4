//! Messages in the real trainers' formats: torch's caching-allocator OOM, vLLM's KV-cache
//! errors, SGLang's memory-pool error, Ray's memory monitor, verl/AReaL/torchrun tracebacks.
//!
//! Formats follow the verbatim lines collected in `failure-signatures.md` (torch
//! `c10/cuda/CUDACachingAllocator.cpp`, `vllm/v1/core/kv_cache_utils.py`,
//! `vllm/v1/worker/gpu_worker.py`, sglang `model_runner.py`, Ray's memory monitor).

use std::time::SystemTime;

use super::memory::{GIB, OomDetail, Site};
use super::outputs;

/// Deterministic process ids, actor ids and jitter, seeded from the command line.
#[derive(Debug, Clone, Copy)]
pub struct Ids {
    seed: u64,
}

fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Ids {
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
    pub fn now() -> Self {
        let s = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        Self {
            iso: s.trim_end_matches('Z').to_string(),
        }
    }
    fn part(&self, a: usize, b: usize) -> &str {
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
    /// AReaL (realhf logging): `20251121-04:38:12.123`.
    pub fn areal(&self) -> String {
        format!(
            "{}{}{}-{}",
            self.part(0, 4),
            self.part(5, 7),
            self.part(8, 10),
            self.part(11, 23)
        )
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

/// Ray's memory-monitor kill message (`ray.exceptions.OutOfMemoryError`), one string with
/// embedded newlines, as Ray prints it.
pub struct RayOom<'a> {
    pub ids: &'a Ids,
    pub task_name: &'a str,
    pub pid: u32,
    pub worker_gb: f64,
    pub used_gb: f64,
    pub total_gb: f64,
}

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

const PY: &str = "/usr/local/lib/python3.10/dist-packages";

/// One traceback frame: `  File "…", line N, in fn` + the source line.
pub fn frame(file: &str, line: u32, func: &str, src: &str) -> [String; 2] {
    let path = if file.starts_with('/') {
        file.to_string()
    } else {
        format!("{PY}/{file}")
    };
    [
        format!("  File \"{path}\", line {line}, in {func}"),
        format!("    {src}"),
    ]
}

fn frames(list: &[(&str, u32, &str, &str)]) -> Vec<String> {
    list.iter()
        .flat_map(|(f, l, func, src)| frame(f, *l, func, src))
        .collect()
}

/// Which trainer's code sits above the HF model / torch frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Verl,
    Areal,
}

fn is_forward(site: Site) -> bool {
    matches!(
        site,
        Site::Activations | Site::Attention | Site::Gather | Site::LogitsBf16 | Site::LogitsFp32
    )
}

/// Frames from a training micro-batch down to the failing allocation, by allocation site.
/// For verl they start inside `DataParallelPPOActor.update_policy`, for AReaL inside
/// `FSDPEngine.train_batch`.
pub fn torch_site_frames(site: Site, fw: Framework) -> Vec<String> {
    let module_call: [(&str, u32, &str, &str); 2] = [
        (
            "torch/nn/modules/module.py",
            1751,
            "_wrapped_call_impl",
            "return self._call_impl(*args, **kwargs)",
        ),
        (
            "torch/nn/modules/module.py",
            1762,
            "_call_impl",
            "return forward_call(*args, **kwargs)",
        ),
    ];
    let backward: [(&str, u32, &str, &str); 3] = [
        (
            "torch/_tensor.py",
            648,
            "backward",
            "torch.autograd.backward(",
        ),
        (
            "torch/autograd/__init__.py",
            353,
            "backward",
            "_engine_run_backward(",
        ),
        (
            "torch/autograd/graph.py",
            824,
            "_engine_run_backward",
            "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
        ),
    ];
    let optim: [(&str, u32, &str, &str); 3] = [
        (
            "torch/optim/optimizer.py",
            485,
            "wrapper",
            "out = func(*args, **kwargs)",
        ),
        (
            "torch/optim/adamw.py",
            209,
            "step",
            "has_complex = self._init_group(",
        ),
        (
            "torch/optim/adamw.py",
            152,
            "_init_group",
            "state[\"exp_avg_sq\"] = torch.zeros_like(",
        ),
    ];
    let mut v: Vec<(&str, u32, &str, &str)> = Vec::new();
    // Entry frames.
    match (fw, site) {
        (Framework::Verl, Site::Softmax) => {
            v.push((
                "verl/workers/actor/dp_actor.py",
                458,
                "update_policy",
                "entropy, log_prob = self._forward_micro_batch(",
            ));
            v.push(("verl/workers/actor/dp_actor.py", 225, "_forward_micro_batch", "entropy_rmpad = self.compute_entropy_from_logits(logits_rmpad)  # ((total_nnz / sp) + pad)"));
            v.push((
                "verl/utils/torch_functional.py",
                147,
                "entropy_from_logits",
                "pd = torch.nn.functional.softmax(logits, dim=-1)",
            ));
            v.push((
                "torch/nn/functional.py",
                2140,
                "softmax",
                "ret = input.softmax(dim)",
            ));
        }
        (Framework::Areal, Site::Softmax) => {
            v.push((
                "areal/engine/fsdp_engine.py",
                584,
                "train_batch",
                "loss = loss_fn(logits, padded_mb_input)",
            ));
            v.push((
                "areal/utils/functional.py",
                61,
                "gather_logprobs_entropy",
                "log_probs = torch.nn.functional.log_softmax(logits.float(), dim=-1)",
            ));
        }
        (Framework::Verl, s) if is_forward(s) => {
            v.push((
                "verl/workers/actor/dp_actor.py",
                458,
                "update_policy",
                "entropy, log_prob = self._forward_micro_batch(",
            ));
            v.push((
                "verl/workers/actor/dp_actor.py",
                170,
                "_forward_micro_batch",
                "output = self.actor_module(",
            ));
        }
        (Framework::Areal, s) if is_forward(s) => {
            v.push((
                "areal/engine/fsdp_engine.py",
                571,
                "train_batch",
                "outputs = self.model(**padded_mb_input)",
            ));
        }
        (Framework::Verl, Site::Recompute | Site::Grads) => {
            v.push((
                "verl/workers/actor/dp_actor.py",
                512,
                "update_policy",
                "loss.backward()",
            ));
        }
        (Framework::Areal, Site::Recompute | Site::Grads) => {
            v.push((
                "areal/engine/fsdp_engine.py",
                590,
                "train_batch",
                "loss.backward()",
            ));
        }
        (Framework::Verl, Site::Optim) => {
            v.push((
                "verl/workers/actor/dp_actor.py",
                533,
                "update_policy",
                "grad_norm = self._optimizer_step()",
            ));
            v.push((
                "verl/workers/actor/dp_actor.py",
                290,
                "_optimizer_step",
                "self.actor_optimizer.step()",
            ));
        }
        (Framework::Areal, Site::Optim) => {
            v.push((
                "areal/engine/fsdp_engine.py",
                603,
                "train_batch",
                "self.optimizer.step()",
            ));
        }
        (Framework::Verl, _) => {
            v.push((
                "verl/workers/fsdp_workers.py",
                842,
                "update_actor",
                "load_fsdp_model_to_gpu(self.actor_module_fsdp)",
            ));
            v.push((
                "verl/utils/fsdp_utils.py",
                151,
                "load_fsdp_model_to_gpu",
                "flat_param.data = flat_param.data.to(device_id, non_blocking=True)",
            ));
        }
        (Framework::Areal, _) => {
            v.push((
                "areal/engine/fsdp_engine.py",
                571,
                "train_batch",
                "outputs = self.model(**padded_mb_input)",
            ));
            v.extend(module_call);
            v.push((
                "torch/distributed/fsdp/_fully_shard/_fsdp_state.py",
                237,
                "_pre_forward",
                "args, kwargs = self._fsdp_param_group.pre_forward(module, args, kwargs)",
            ));
        }
    }
    // Library frames down to the allocation.
    match site {
        Site::LogitsFp32 | Site::LogitsBf16 => {
            v.extend(module_call);
            v.push((
                "transformers/models/qwen2/modeling_qwen2.py",
                463,
                "forward",
                "logits = self.lm_head(hidden_states[:, slice_indices, :])",
            ));
            if site == Site::LogitsFp32 && fw == Framework::Verl {
                v.push((
                    "transformers/models/qwen2/modeling_qwen2.py",
                    468,
                    "forward",
                    "logits = logits.float()",
                ));
            } else {
                v.extend(module_call);
                v.push((
                    "torch/nn/modules/linear.py",
                    125,
                    "forward",
                    "return F.linear(input, self.weight, self.bias)",
                ));
            }
        }
        Site::Activations | Site::Attention | Site::Gather => {
            v.extend(module_call);
            v.push((
                "transformers/models/qwen2/modeling_qwen2.py",
                397,
                "forward",
                "hidden_states = decoder_layer(",
            ));
            v.extend(module_call);
            v.push((
                "transformers/models/qwen2/modeling_qwen2.py",
                268,
                "forward",
                "hidden_states = self.mlp(hidden_states)",
            ));
            v.extend(module_call);
            v.push((
                "transformers/models/qwen2/modeling_qwen2.py",
                55,
                "forward",
                "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))",
            ));
        }
        Site::Recompute | Site::Grads => v.extend(backward),
        Site::Optim => v.extend(optim),
        _ => {}
    }
    frames(&v)
}

/// Frames of verl's driver down to `ray.get` of the TaskRunner.
pub fn verl_driver_frames() -> Vec<String> {
    frames(&[
        ("verl/trainer/main_ppo.py", 42, "main", "run_ppo(config)"),
        (
            "verl/trainer/main_ppo.py",
            96,
            "run_ppo",
            "ray.get(runner.run.remote(config))",
        ),
        (
            "ray/_private/auto_init_hook.py",
            22,
            "auto_init_wrapper",
            "return fn(*args, **kwargs)",
        ),
        (
            "ray/_private/client_mode_hook.py",
            104,
            "wrapper",
            "return func(*args, **kwargs)",
        ),
        (
            "ray/_private/worker.py",
            2858,
            "get",
            "values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
        ),
        (
            "ray/_private/worker.py",
            958,
            "get_objects",
            "raise value.as_instanceof_cause()",
        ),
    ])
}

/// `ray.exceptions.RayTaskError(Cls): ray::Name() (pid=…, ip=127.0.0.1, actor_id=…, repr=<…>)`.
pub fn ray_task_error(cls: &str, method: &str, pid: u32, ids: &Ids, repr: &str) -> String {
    format!(
        "ray.exceptions.RayTaskError({cls}): ray::{method}() (pid={pid}, ip=127.0.0.1, actor_id={}, repr=<{repr} object at {}>)",
        ids.hex(method, 32),
        ids.addr(method)
    )
}

/// torch elastic's summary after a rank failed (`torchrun` exit).
pub fn torchrun_child_failed(
    script: &str,
    stamp: &Stamp,
    host: &str,
    pid: u32,
    exitcode: i32,
) -> Vec<String> {
    let mut v = vec!["Traceback (most recent call last):".to_string()];
    v.extend(frames(&[
        ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
        (
            "torch/distributed/elastic/multiprocessing/errors/__init__.py",
            355,
            "wrapper",
            "return f(*args, **kwargs)",
        ),
        ("torch/distributed/run.py", 892, "main", "run(args)"),
        ("torch/distributed/run.py", 883, "run", "elastic_launch("),
        (
            "torch/distributed/launcher/api.py",
            139,
            "__call__",
            "return launch_agent(self._config, self._entrypoint, list(args))",
        ),
        (
            "torch/distributed/launcher/api.py",
            270,
            "launch_agent",
            "raise ChildFailedError(",
        ),
    ]));
    v.push("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ".into());
    v.push("============================================================".into());
    v.push(format!("{script} FAILED"));
    v.push("------------------------------------------------------------".into());
    v.push("Failures:".into());
    v.push("  <NO_OTHER_FAILURES>".into());
    v.push("------------------------------------------------------------".into());
    v.push("Root Cause (first observed failure):".into());
    v.push("[0]:".into());
    v.push(format!("  time      : {}", stamp.elastic()));
    v.push(format!("  host      : {host}"));
    v.push("  rank      : 0 (local_rank: 0)".into());
    v.push(format!("  exitcode  : {exitcode} (pid: {pid})"));
    v.push("  error_file: <N/A>".into());
    if exitcode == -9 {
        v.push(format!(
            "  traceback : Signal 9 (SIGKILL) received by PID {pid}"
        ));
    } else {
        v.push("  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html".into());
    }
    v.push("============================================================".into());
    v
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
        assert_eq!(s.areal(), "20251121-04:38:12.123");
        assert_eq!(s.elastic(), "2025-11-21_04:38:12");
        assert_eq!(s.ray(), "2025-11-21 04:38:12,123");
        assert_eq!(py_float(0.6), "0.6");
        assert_eq!(py_float(1.0), "1.0");
    }

    #[test]
    fn frames_exist_for_every_site() {
        for site in [
            Site::Params,
            Site::RefParams,
            Site::Grads,
            Site::Optim,
            Site::Gather,
            Site::Activations,
            Site::Recompute,
            Site::LogitsBf16,
            Site::LogitsFp32,
            Site::Softmax,
            Site::Attention,
            Site::Static,
        ] {
            for fw in [Framework::Verl, Framework::Areal] {
                let f = torch_site_frames(site, fw);
                assert!(f.len() >= 2 && f[0].starts_with("  File \""), "{site:?}");
            }
        }
    }
}
