//! The trainers' output as data: `outputs/` holds every message and traceback the simulator
//! prints on failure, written as the real log reads it (frame paths included), with `{name}`
//! where a pid, an actor id, a time stamp or a number goes. The files are embedded with
//! `include_str!` and filled in here, so the wording can be read (and checked against the real
//! trainers' source and logs) as text.
//!
//! # Theory of operation
//!
//! `outputs/*.txt` are single messages (torch's OOM, vLLM's and SGLang's start-up errors, Ray's
//! memory monitor) that [`render`] fills in place. `outputs/{verl,areal,torchrun}/*.txt` are
//! whole failure outputs, one per failure kind (and torch elastic's launch banner; `rl_swarm/` too), and `outputs/frames/*.txt` the traceback frames
//! from a training step down to a failing allocation, one file per allocation site
//! ([`site_frames`], [`torchrun_site_frames`], [`rl_swarm_site_frames`]). [`Vars::lines`] renders a whole output into
//! the lines a runner writes: a line holding a *block* placeholder (a frames file, or another
//! rendered output) is repeated once per line of the block with the text around the placeholder
//! kept, so `[rank0]: {site_frames}` prefixes every frame; any other placeholder is filled in
//! place, so a multi-line value such as Ray's message stays one write, as Ray prints it.

use orch_memory::estimate::Site;

/// torch's caching-allocator OOM (`c10/cuda/CUDACachingAllocator.cpp`), without the class.
pub const TORCH_OOM: &str = include_str!("../outputs/torch_oom.txt");
/// vLLM `check_enough_kv_cache_memory`, no blocks at all.
pub const VLLM_NO_CACHE_BLOCKS: &str = include_str!("../outputs/vllm_no_cache_blocks.txt");
/// vLLM V1 `check_enough_kv_cache_memory`, KV cache below one max-length request.
pub const VLLM_MAX_LEN: &str = include_str!("../outputs/vllm_max_len.txt");
/// vLLM `gpu_worker.py` start-up check.
pub const VLLM_FREE_MEMORY: &str = include_str!("../outputs/vllm_free_memory.txt");
/// SGLang `init_memory_pool`.
pub const SGLANG_NOT_ENOUGH: &str = include_str!("../outputs/sglang_not_enough.txt");
/// Ray's memory-monitor kill message (`ray.exceptions.OutOfMemoryError`).
pub const RAY_HOST_OOM: &str = include_str!("../outputs/ray_host_oom.txt");
/// torch elastic's `ChildFailedError` summary when a rank died (`torchrun`'s own exit).
pub const TORCH_ELASTIC_FAILED: &str = include_str!("../outputs/torch_elastic_failed.txt");

/// verl's failure outputs: the worker's error, Hydra's banner, the driver's Ray-wrapped
/// traceback down to the worker's exception.
pub mod verl {
    /// torch OOM in `update_actor` (`{site_frames}`: a `frames/verl_*.txt`).
    pub const GPU_OOM: &str = include_str!("../outputs/verl/gpu_oom.txt");
    /// vLLM's wake-up (`cumem_allocator.cpp`) OOM in `generate_sequences`.
    pub const VLLM_WAKE_UP: &str = include_str!("../outputs/verl/vllm_wake_up.txt");
    /// vLLM's free-memory check in `init_device` at start-up.
    pub const VLLM_INIT_DEVICE: &str = include_str!("../outputs/verl/vllm_init_device.txt");
    /// vLLM's KV-cache checks in `_initialize_kv_caches` at start-up.
    pub const VLLM_KV_CACHE: &str = include_str!("../outputs/verl/vllm_kv_cache.txt");
    /// Ray's memory monitor kills a worker in `init_model`.
    pub const HOST_OOM_INIT: &str = include_str!("../outputs/verl/host_oom_init.txt");
    /// Ray's memory monitor kills a worker in `update_actor`.
    pub const HOST_OOM_UPDATE: &str = include_str!("../outputs/verl/host_oom_update.txt");
    /// `_check_resource_available`: more GPUs requested than the node has.
    pub const NOT_ENOUGH_GPUS: &str = include_str!("../outputs/verl/not_enough_gpus.txt");
}

/// AReaL's failure outputs: the failing process's own output, torch elastic's summary where
/// the trainer died, and the local launcher's `JobException`.
pub mod areal {
    /// The launcher stops the other processes and raises `JobException` (`{job}` failed).
    pub const LAUNCHER_FAILED: &str = include_str!("../outputs/areal/launcher_failed.txt");
    /// SGLang's scheduler fails to allocate its KV pool.
    pub const SGLANG_NOT_ENOUGH: &str = include_str!("../outputs/areal/sglang_not_enough.txt");
    /// torch OOM in the trainer's `train_batch` (`{site_frames}`: a `frames/areal_*.txt`).
    pub const GPU_OOM: &str = include_str!("../outputs/areal/gpu_oom.txt");
    /// The kernel's OOM killer takes the trainer; torch elastic reports the SIGKILL.
    pub const HOST_OOM: &str = include_str!("../outputs/areal/host_oom.txt");
    /// `--config` names a file that cannot be read.
    pub const CONFIG_MISSING: &str = include_str!("../outputs/areal/config_missing.txt");
}

/// torchrun's outputs (a plain DDP script, `training/train.py`): torch elastic's banner and
/// the failures.
pub mod torchrun {
    /// torch elastic's warning banner at launch (`OMP_NUM_THREADS`).
    pub const ELASTIC_BANNER: &str = include_str!("../outputs/torchrun/elastic_banner.txt");
    /// torch OOM in rank 0 (`{site_frames}`: a `frames/torchrun_*.txt`).
    pub const GPU_OOM: &str = include_str!("../outputs/torchrun/gpu_oom.txt");
    /// The kernel's OOM killer takes rank 0; torch elastic reports the SIGKILL.
    pub const HOST_OOM: &str = include_str!("../outputs/torchrun/host_oom.txt");
    /// `--config` names a file that cannot be read.
    pub const CONFIG_MISSING: &str = include_str!("../outputs/torchrun/config_missing.txt");
}

/// rl-swarm's failure outputs: Hydra's banner (the launcher sets `HYDRA_FULL_ERROR=1`) and the
/// whole Python traceback from `swarm_launcher.py`.
pub mod rl_swarm {
    /// torch OOM in a round (`{site_frames}`: a `frames/rl_swarm_*.txt`).
    pub const GPU_OOM: &str = include_str!("../outputs/rl_swarm/gpu_oom.txt");
    /// torch OOM while genrl moves the model to the GPU, re-raised by Hydra's `instantiate`.
    pub const GPU_OOM_INIT: &str = include_str!("../outputs/rl_swarm/gpu_oom_init.txt");
    /// What genrl 0.1.11's `run_game` logs with `get_logger().exception(..., stack_info=True)`
    /// below its `Exception occurred during game run.` line when a round raises (a generation
    /// OOM), before it returns and the process exits 0.
    pub const GAME_RUN_EXCEPTION: &str = include_str!("../outputs/rl_swarm/game_run_exception.txt");
}

/// Which trainer's code sits above the HF model / torch frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    /// Frames start in `ActorRolloutRefWorker.update_actor` (`verl/workers/fsdp_workers.py`).
    Verl,
    /// Frames start in `FSDPEngine.train_batch` (`areal/engine/fsdp_engine.py`).
    Areal,
}

/// The frames from a training micro-batch down to the failing allocation, by allocation site:
/// the contents of one `outputs/frames/{verl,areal}_*.txt`.
pub fn site_frames(site: Site, fw: Framework) -> &'static str {
    match (fw, site) {
        (Framework::Verl, Site::Softmax) => include_str!("../outputs/frames/verl_softmax.txt"),
        (Framework::Verl, Site::Activations | Site::Attention | Site::Gather) => {
            include_str!("../outputs/frames/verl_forward.txt")
        }
        (Framework::Verl, Site::LogitsBf16) => {
            include_str!("../outputs/frames/verl_logits_bf16.txt")
        }
        (Framework::Verl, Site::LogitsFp32) => {
            include_str!("../outputs/frames/verl_logits_fp32.txt")
        }
        (Framework::Verl, Site::Recompute | Site::Grads) => {
            include_str!("../outputs/frames/verl_backward.txt")
        }
        (Framework::Verl, Site::Optim) => include_str!("../outputs/frames/verl_optim.txt"),
        (Framework::Verl, Site::Params | Site::RefParams | Site::Static) => {
            include_str!("../outputs/frames/verl_load_params.txt")
        }
        (Framework::Areal, Site::Softmax) => include_str!("../outputs/frames/areal_softmax.txt"),
        (Framework::Areal, Site::Activations | Site::Attention | Site::Gather) => {
            include_str!("../outputs/frames/areal_forward.txt")
        }
        (Framework::Areal, Site::LogitsBf16 | Site::LogitsFp32) => {
            include_str!("../outputs/frames/areal_logits.txt")
        }
        (Framework::Areal, Site::Recompute | Site::Grads) => {
            include_str!("../outputs/frames/areal_backward.txt")
        }
        (Framework::Areal, Site::Optim) => include_str!("../outputs/frames/areal_optim.txt"),
        (Framework::Areal, Site::Params | Site::RefParams | Site::Static) => {
            include_str!("../outputs/frames/areal_params.txt")
        }
    }
}

/// The frames from torchrun's `train_step` down to the failing allocation, by site: the
/// attention scores or the MLP in the forward, the fp32 loss over the vocabulary, AdamW's
/// state, or else the backward.
pub fn torchrun_site_frames(site: Site) -> &'static str {
    match site {
        Site::Attention => include_str!("../outputs/frames/torchrun_attention.txt"),
        Site::Activations => include_str!("../outputs/frames/torchrun_mlp.txt"),
        Site::Optim => include_str!("../outputs/frames/torchrun_optim.txt"),
        Site::LogitsFp32 | Site::Softmax => include_str!("../outputs/frames/torchrun_loss.txt"),
        _ => include_str!("../outputs/frames/torchrun_backward.txt"),
    }
}

/// The frames from genrl's `run_game_round` down to the failing allocation: the generation call
/// when the node `generating` (its KV cache, the sampling logits), else by site in the training
/// step — the forward, the logits' contiguous copy, the log-softmax, the backward, Adam's state.
pub fn rl_swarm_site_frames(site: Site, generating: bool) -> &'static str {
    if generating {
        return include_str!("../outputs/frames/rl_swarm_generate.txt");
    }
    match site {
        Site::Activations | Site::Attention | Site::LogitsBf16 => {
            include_str!("../outputs/frames/rl_swarm_forward.txt")
        }
        Site::LogitsFp32 => include_str!("../outputs/frames/rl_swarm_logits.txt"),
        Site::Softmax => include_str!("../outputs/frames/rl_swarm_softmax.txt"),
        Site::Optim => include_str!("../outputs/frames/rl_swarm_optim.txt"),
        _ => include_str!("../outputs/frames/rl_swarm_backward.txt"),
    }
}

/// Fill `{name}` placeholders from `vars` in one pass (values are never scanned again). A
/// brace not followed by a known name and `}` is text, like the `{}` real logs print.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (close, *v))
        });
        match value {
            Some((close, v)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The values for one whole-output template: inline values and line blocks (see the module
/// docs for how each is filled).
#[derive(Debug, Clone, Default)]
pub struct Vars {
    values: Vec<(&'static str, String)>,
    blocks: Vec<(&'static str, String)>,
}

impl Vars {
    /// No values yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `{name}` is `value`, in place (a multi-line value stays within its line's write).
    pub fn set(mut self, name: &'static str, value: impl ToString) -> Self {
        self.values.push((name, value.to_string()));
        self
    }

    /// A line holding `{name}` is repeated once per line of `text` (none when it is empty).
    pub fn block(mut self, name: &'static str, text: impl Into<String>) -> Self {
        self.blocks.push((name, text.into()));
        self
    }

    /// The lines of `template` filled in, one per write.
    pub fn lines(&self, template: &str) -> Vec<String> {
        let vars: Vec<(&str, &str)> = self.values.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut out = Vec::new();
        for line in template.lines() {
            let block = self.blocks.iter().find_map(|(name, text)| {
                let placeholder = format!("{{{name}}}");
                line.find(&placeholder)
                    .map(|at| (at, at + placeholder.len(), text))
            });
            match block {
                Some((start, end, text)) => {
                    let before = render(&line[..start], &vars);
                    let after = render(&line[end..], &vars);
                    out.extend(text.lines().map(|l| format!("{before}{l}{after}")));
                }
                None => out.push(render(line, &vars)),
            }
        }
        out
    }

    /// [`Vars::lines`] joined with newlines (to use as another template's block).
    pub fn text(&self, template: &str) -> String {
        self.lines(template).join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_fill_once_and_other_braces_stay() {
        assert_eq!(
            render("a {x} b {} c {y}{x}", &[("x", "{y}"), ("y", "2")]),
            "a {y} b {} c 2{y}"
        );
    }

    #[test]
    fn blocks_repeat_their_line_and_values_stay_in_theirs() {
        let vars = Vars::new()
            .set("pid", 7)
            .set("msg", "two\nlines")
            .block("frames", "  f1\n  f2\n")
            .block("none", "");
        assert_eq!(
            vars.lines("[{pid}]: {frames} ({pid})\n{none}\nError: {msg}\n\nend {}\n"),
            vec![
                "[7]:   f1 (7)",
                "[7]:   f2 (7)",
                "Error: two\nlines",
                "",
                "end {}"
            ]
        );
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
            let all = [
                site_frames(site, Framework::Verl),
                site_frames(site, Framework::Areal),
                torchrun_site_frames(site),
                rl_swarm_site_frames(site, false),
                rl_swarm_site_frames(site, true),
            ];
            for f in all {
                let lines: Vec<&str> = f.lines().collect();
                assert!(
                    lines.len() >= 2 && lines.len().is_multiple_of(2),
                    "{site:?}"
                );
                for pair in lines.chunks(2) {
                    assert!(pair[0].starts_with("  File \""), "{site:?}: {}", pair[0]);
                    assert!(pair[1].starts_with("    "), "{site:?}: {}", pair[1]);
                }
            }
        }
    }
}
