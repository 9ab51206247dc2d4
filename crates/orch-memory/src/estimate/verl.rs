//! verl's per-GPU memory: an FSDP actor sharing each GPU with a sleeping vLLM engine (the hybrid
//! engine). Generation phase: FSDP state kept resident plus vLLM awake; training phase
//! (`update_actor`): params, optimizer state and grads reloaded, activations and logits, with
//! vLLM asleep. The first failure is found in the order the real run meets them.

use super::GIB;
use super::activations::activation_events;
use super::allocator::{Event, Site, Walk, alloc, walk};
use super::config::VerlConfig;
use super::hardware::{Hardware, Trainer};
use super::host::{VerlHost, host_limit};
use super::k;
use super::output::{Estimate, FailAt, FailKind, Failure, Item, item, items_from_events};
use super::vllm::Vllm;
use crate::shape::{Arch, lookup};

/// The FSDP actor's per-GPU state (GiB), sharded over every GPU of the job.
struct Actor {
    world: f64,
    /// fp32 parameters; grads are the same size, AdamW m+v twice it.
    params: f64,
    /// The bf16 reference model (only with `use_kl_loss`, unless offloaded).
    ref_gpu: f64,
    /// One FSDP unit of fp32 params: the chunk size of the params/grads/optimizer tensors.
    unit_fp32: f64,
    /// Tokens in one micro-batch on one GPU.
    tokens: f64,
    /// A PPO critic's fp32 params (unless offloaded), sharded like the actor's.
    critic_params: f64,
    /// Its AdamW state once it has stepped (unless offloaded). verl's critic update ends
    /// with `zero_grad()` (`dp_critic.py` `update_critic`), so its gradients are gone by the
    /// actor's update, which follows it in `ray_trainer.py`'s step.
    critic_adam: f64,
}

impl Actor {
    fn new(arch: &Arch, critic: &Arch, v: &VerlConfig) -> Self {
        let world = (f64::from(v.n_gpus_per_node) * f64::from(v.nnodes)).max(1.0);
        let p = arch.params;
        let fill = if v.use_remove_padding { v.fill() } else { 1.0 };
        // With dynamic batching verl packs a micro-batch to `ppo_max_token_len_per_gpu × sp`
        // real tokens for the whole sequence-parallel group (`dp_actor.py` `update_policy`:
        // `max_token_len = ppo_max_token_len_per_gpu * ulysses_sequence_parallel_size`, at
        // a31a8f251 and b178a3cd5), so each GPU holds the budget itself; a fixed micro-batch is
        // per data-parallel rank and split over the group.
        let tokens = if v.use_dynamic_bsz {
            v.ppo_max_token_len_per_gpu as f64
        } else {
            v.micro_batch_per_gpu as f64 * v.seq_len() as f64 * fill / v.ulysses_sp as f64
        };
        Self {
            world,
            params: 4.0 * p / world / GIB,
            ref_gpu: if v.use_kl_loss && !v.ref_param_offload {
                2.0 * p / world / GIB
            } else {
                0.0
            },
            unit_fp32: arch.largest_unit_params() * 4.0 / world / GIB,
            tokens,
            critic_params: if v.use_critic && !v.critic_param_offload {
                4.0 * critic.params / world / GIB
            } else {
                0.0
            },
            critic_adam: if v.use_critic && !v.critic_optimizer_offload {
                8.0 * critic.params / world / GIB
            } else {
                0.0
            },
        }
    }

    fn adam(&self) -> f64 {
        2.0 * self.params
    }
}

/// What stays on the GPU through the generation phase (verl offloads only what it is told to).
struct Resident {
    params: f64,
    adam: f64,
    /// At worker init: context + params + ref model.
    init: f64,
    /// From step 2 on: + AdamW state.
    steady: f64,
}

impl Resident {
    fn new(v: &VerlConfig, a: &Actor) -> Self {
        let params = if v.param_offload { 0.0 } else { a.params };
        let adam = if v.optimizer_offload { 0.0 } else { a.adam() };
        let init = k::CUDA_CTX_GIB + params + a.ref_gpu + a.critic_params;
        Self {
            params,
            adam,
            init,
            steady: init + adam + a.critic_adam,
        }
    }
}

fn offloaded(yes: bool) -> &'static str {
    if yes { "offloaded: 0" } else { "resident" }
}

/// The generation-phase breakdown: resident FSDP state plus vLLM awake.
fn rollout_items(v: &VerlConfig, a: &Actor, res: &Resident, vllm: &Vllm) -> Vec<Item> {
    let mut items = vec![
        item("CUDA context + NCCL (non-PyTorch)", k::CUDA_CTX_GIB),
        item(
            format!(
                "actor params fp32, FSDP 1/{} ({})",
                a.world,
                offloaded(v.param_offload)
            ),
            res.params,
        ),
        item(
            format!(
                "AdamW m+v fp32 from step 2 ({})",
                offloaded(v.optimizer_offload)
            ),
            res.adam,
        ),
        item("ref params bf16 (use_kl_loss)", a.ref_gpu),
        item(
            format!("vLLM weights bf16 / TP {}", v.tensor_parallel),
            vllm.weights_gib,
        ),
        item(
            "vLLM activation workspace + CUDA graphs",
            vllm.workspace_gib,
        ),
        item(
            format!("vLLM KV cache ({:.0} tokens)", vllm.kv_tokens()),
            vllm.kv_gib.max(0.0),
        ),
    ];
    if v.use_critic {
        items.push(item("critic params fp32 (PPO)", a.critic_params));
        items.push(item(
            "critic AdamW m+v fp32 from step 2 (PPO)",
            a.critic_adam,
        ));
    }
    items
}

/// `update_actor`'s allocations in order. Offload does not lower them: verl reloads params and
/// optimizer state to the GPU before the update (`load_fsdp_model_to_gpu`).
fn train_events(arch: &Arch, v: &VerlConfig, a: &Actor) -> Vec<Event> {
    let layer_bf16 = arch.layer_params() * 2.0 / GIB;
    let mut events = vec![
        alloc(
            Site::Static,
            "critic params + AdamW fp32, resident (PPO)",
            a.critic_params + a.critic_adam,
            a.unit_fp32,
        ),
        alloc(
            Site::Params,
            format!("actor params fp32 (FSDP 1/{})", a.world),
            a.params,
            a.unit_fp32,
        ),
        alloc(
            Site::RefParams,
            "ref params bf16",
            a.ref_gpu,
            a.unit_fp32 / 2.0,
        ),
        alloc(Site::Optim, "AdamW m+v fp32", a.adam(), a.unit_fp32),
        alloc(Site::Grads, "grads fp32", a.params, a.unit_fp32),
        alloc(
            Site::Gather,
            "FSDP all-gather buffers (2 layers bf16)",
            2.0 * layer_bf16,
            layer_bf16,
        ),
    ];
    events.extend(activation_events(arch, a.tokens, v.gradient_checkpointing));
    // The loss: the logits as `lm_head` returns them, bf16 (transformers ≥ 4.46 keeps the
    // model's dtype when no labels are passed; flash-attn's cross-entropy kernel, verl's
    // `logprobs_from_logits`, writes its gradient in place). The entropy pass, when the update
    // computes it, adds an fp32 working copy and the fp32 softmax: the 17.66 GiB request of
    // seed 002 (`k::VERL_LOGITS_BYTES`). Each one tensor, the largest allocations.
    let logits_unit = a.tokens * arch.vocab as f64 / GIB;
    events.push(alloc(
        Site::LogitsBf16,
        "logits bf16 (lm_head)",
        2.0 * logits_unit,
        2.0 * logits_unit,
    ));
    if v.entropy {
        events.push(alloc(
            Site::LogitsFp32,
            "logits fp32 (entropy)",
            4.0 * logits_unit,
            4.0 * logits_unit,
        ));
        let softmax = (k::VERL_LOGITS_BYTES - 6.0) * logits_unit;
        events.push(alloc(
            Site::Softmax,
            "softmax fp32 (entropy)",
            softmax,
            softmax,
        ));
    }
    events
}

/// The training-phase breakdown: non-PyTorch memory, the allocations, the allocator's slack.
fn train_items(
    v: &VerlConfig,
    hw: &Hardware,
    nontorch_vllm: f64,
    events: &[Event],
    demand: &Walk,
) -> Vec<Item> {
    let c = hw.gpu_mem_gib;
    let mut items = vec![
        item("CUDA context + NCCL (non-PyTorch)", k::CUDA_CTX_GIB),
        item(
            if v.free_cache_engine {
                "vLLM asleep (free_cache_engine=True)".to_string()
            } else {
                format!(
                    "vLLM memory held (free_cache_engine=False): {} × {c}",
                    v.gpu_memory_utilization
                )
            },
            nontorch_vllm,
        ),
    ];
    items.extend(items_from_events(events));
    items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", hw.frag() * 100.0),
        demand.reserved_peak_gib - demand.allocated_peak_gib,
    ));
    items
}

/// Host RAM above Ray's threshold, as its memory monitor reports it.
fn host_oom(hw: &Hardware, v: &VerlConfig, host: &VerlHost, total: f64, task: &str) -> FailKind {
    FailKind::HostOom {
        used_gib: total.min(hw.host_mem_gib * 0.99),
        total_gib: hw.host_mem_gib,
        worker_gib: host.worker_gib(v, total),
        task: task.into(),
    }
}

/// The first failure in the order a verl run meets them: Ray's GPU check, worker init (host
/// RAM, vLLM's start-up checks), then per step vLLM's wake-up (before training on a resumed
/// run, whose optimizer state is loaded up front), `update_actor`, the optimizer offload after
/// it, and the wake-up of step 2 with AdamW state now resident.
fn first_failure(
    hw: &Hardware,
    v: &VerlConfig,
    resumed: bool,
    res: &Resident,
    vllm: &Vllm,
    host: &VerlHost,
    real: &Walk,
) -> Option<Failure> {
    let c = hw.gpu_mem_gib;
    let requested = vllm.requested_gib;
    let limit = host_limit(hw);
    let init = |kind| {
        Some(Failure {
            at: FailAt::Init,
            kind,
        })
    };
    let wake_step = if resumed { 1 } else { 2 };
    let wake_fails = v.free_cache_engine && res.steady + requested > c;
    let wake_up = || {
        Some(Failure {
            at: FailAt::Rollout { step: wake_step },
            kind: FailKind::VllmWakeUp {
                needed_gib: requested,
                free_gib: c - res.steady,
            },
        })
    };
    if v.n_gpus_per_node > hw.gpus_per_node {
        init(FailKind::NotEnoughGpus {
            available: hw.gpus_per_node.saturating_mul(v.nnodes),
            required: v.n_gpus_per_node.saturating_mul(v.nnodes),
        })
    } else if host.init_gib > limit {
        let task = "WorkerDict.actor_rollout_ref_init_model";
        init(host_oom(hw, v, host, host.init_gib, task))
    } else if c - res.init < requested {
        init(FailKind::VllmFreeMemory {
            free_gib: c - res.init,
            total_gib: c,
            util: v.gpu_memory_utilization,
            requested_gib: requested,
        })
    } else if vllm.kv_gib <= 0.0 {
        init(FailKind::VllmNoCacheBlocks {
            available_gib: vllm.kv_gib,
        })
    } else if vllm.kv_gib < vllm.kv_needed_gib {
        init(FailKind::VllmMaxLen {
            max_model_len: vllm.max_model_len,
            needed_gib: vllm.kv_needed_gib,
            available_gib: vllm.kv_gib,
            estimated_max_len: vllm.estimated_max_len(),
        })
    } else if resumed && wake_fails {
        wake_up()
    } else if let Some(oom) = real.oom.clone() {
        Some(Failure {
            at: FailAt::Train { step: 1 },
            kind: FailKind::GpuOom(oom),
        })
    } else if host.steady_gib > limit {
        let task = "WorkerDict.actor_rollout_ref_update_actor";
        Some(Failure {
            at: FailAt::AfterUpdate { step: 1 },
            kind: host_oom(hw, v, host, host.steady_gib, task),
        })
    } else if wake_fails {
        wake_up()
    } else {
        None
    }
}

/// verl's estimate. `resumed`: the run continues from a checkpoint, so the optimizer state is
/// loaded before the first rollout.
pub(crate) fn estimate_verl(
    hw: &Hardware,
    v: &VerlConfig,
    resumed: bool,
    known: Option<&Arch>,
) -> Estimate {
    let arch = known.cloned().unwrap_or_else(|| lookup(&v.model_path));
    let c = hw.gpu_mem_gib;
    let frag = hw.frag();
    let mut notes = v.notes.clone();
    if !arch.known {
        notes.push(format!(
            "model {:?} not in the table: {}",
            v.model_path, arch.name
        ));
    }
    let critic = v
        .critic_model_path
        .as_deref()
        .map_or_else(|| arch.clone(), lookup);
    let actor = Actor::new(&arch, &critic, v);
    let vllm = Vllm::profile(&arch, v, c);
    let res = Resident::new(v, &actor);
    let rollout_items = rollout_items(v, &actor, &res, &vllm);

    // Training phase (update_actor), steady state. vLLM is asleep, or keeps everything it
    // took when verl is told not to free its cache.
    let nontorch_vllm = if v.free_cache_engine {
        k::VLLM_ASLEEP_GIB
    } else {
        vllm.requested_gib
    };
    let nontorch = k::CUDA_CTX_GIB + nontorch_vllm;
    let events = train_events(&arch, v, &actor);
    let demand = walk(f64::INFINITY, &[], nontorch, frag, &events);
    let real = walk(c, &[], nontorch, frag, &events);
    let train_items = train_items(v, hw, nontorch_vllm, &events, &demand);
    let host = VerlHost::new(v, arch.params);
    let failure = first_failure(hw, v, resumed, &res, &vllm, &host, &real);

    Estimate {
        trainer: Trainer::Verl,
        capacity_gib: c,
        gpus: v.n_gpus_per_node,
        frag,
        tokens_per_micro: actor.tokens,
        train_items,
        train_peak_gib: demand.device_peak_gib,
        train_allocated_gib: demand.allocated_peak_gib,
        train_reserved_gib: demand.reserved_peak_gib,
        train_static: None,
        rollout_items,
        rollout_peak_gib: res.steady + vllm.requested_gib,
        kv_cache_gib: Some(vllm.kv_gib),
        host_peak_gib: host.steady_gib,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
        arch: Some(arch),
    }
}
