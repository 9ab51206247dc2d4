//! The memory model's constants, each with where it comes from (a seed write-up, a paper, a
//! model config or the trainers' source); docs/ESTIMATOR.md explains how they combine.

/// CUDA context, cuBLAS workspaces and NCCL buffers of one training process (non-PyTorch).
pub const CUDA_CTX_GIB: f64 = 1.0;
/// AReaL's FSDP trainer process outside PyTorch's pool (CUDA context, cuBLAS, NCCL, the
/// compiled log-softmax's kernels), read off torch's OOM messages in the fork's logs as
/// "this process has" less allocated less reserved-but-unallocated: 1.74-1.75 GiB in all nine
/// RTX 5090 messages (examples/cloud_gsm8k/loggs.txt at 4f29b777c, logs_rtx5090_r_3hour_failure
/// .txt at ad43beb92, logs_5090_3hour_failure.txt at d38072f39) and 2.07-2.08 GiB in all nine
/// A100 80GB PCIe ones (train_logs/logs_a100pcie_error_async.txt at 7ae509ab1), AReaL
/// v0.3.4 on one GPU. The smaller, so no card seen is over-predicted; [`CUDA_CTX_GIB`] stays
/// the other trainers'.
pub const AREAL_TRAINER_NONTORCH_GIB: f64 = 1.74;
/// What vLLM keeps on the GPU while asleep (`free_cache_engine=True`): CUDA-graph pools,
/// sampler buffers.
pub const VLLM_ASLEEP_GIB: f64 = 1.5;
/// Reserved-but-unallocated share of the caching allocator (fragmentation).
pub const FRAG: f64 = 0.08;
/// The same with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (verl's training phases
/// from 0.6 on, RL Swarm). Not measured: verl 0.8's two runs with both counters hold 45 % more
/// reserved than allocated (`calibration/gaps.yaml`), torchrun on an H100 8.8 % on a
/// logits-heavy row ([`TR_EXPANDABLE_STRANDED_SHARE`]); raised to 9 %, one held-out verl recipe known to run is
/// predicted over its card (skypilot-grpo-7b-2xh100), so verl keeps 2 % until a verl run is
/// measured.
pub const FRAG_EXPANDABLE: f64 = 0.02;
/// torchrun with `expandable_segments:True`: the share of [`TR_STRANDED_LOGITS_BLOCKS`]'s
/// fp32 logits-sized block that stays stranded, beside [`FRAG_EXPANDABLE`]. Expandable
/// segments grow one mapping instead of cutting new segments, so less is stranded, but the
/// holes the freed logits leave inside the mapping stay mapped until `empty_cache`: the slack
/// follows the largest transient block, not the step's total. Measured:
/// `examples/torchrun/train.py` driven by orch on one H100 (Qwen2.5-0.5B, micro 8 × 2048
/// tokens, no checkpointing; `crates/orch-core/data/throughput/h100-train-py.jsonl`, its last
/// row) held 71.00 GiB reserved for 65.245 allocated, 5.76 GiB of slack against a 9.27 GiB
/// fp32 logits block: the row alone gives a share of 0.74. One row, one shape (no second
/// expandable-segments run has been measured, so no leave-one-out error exists): half a
/// block holds the row within 5 % (−3.2 %) and errs toward the generic 2 % the estimator had
/// before the row. A share rather than a percentage of the step, because a flat percentage
/// fitted on this logits-heavy row (`TR_FRAG_EXPANDABLE = 0.10`, until 2026-12-07) put every
/// model with a smaller vocabulary or more weights 9–10 % high (issue 42). Measure a second
/// shape before moving it.
pub const TR_EXPANDABLE_STRANDED_SHARE: f64 = 0.5;
/// Share of `micro × (prompt + response)` that is real tokens once verl removes padding
/// (`use_remove_padding=True`). Calibrated on seed 002: "Tried to allocate 17.66 GiB" for
/// micro 32 × 1536 tokens of Qwen2.5-7B (152,064 vocab) is 31.2k tokens = 0.635 of 49,152.
pub const REMOVE_PADDING_FILL: f64 = 0.635;
/// verl actor logits bytes per token per vocab entry at the loss when the update computes the
/// entropy: bf16 `lm_head` output (2), an fp32 copy (4) and the fp32 softmax (4) — seed 002's
/// "Tried to allocate 17.66 GiB" after 74.21 GiB in use. Without the entropy only the bf16
/// logits (2) stay: transformers ≥ 4.46 no longer upcasts them (the `logits.float()` of 4.45's
/// `Qwen2ForCausalLM.forward`, "TODO: remove the float() operation in v4.46"), and verl's
/// `logprobs_from_logits` (flash-attn's `cross_entropy_loss`, `inplace_backward=True`,
/// `verl/utils/torch_functional.py` at b178a3cd5) writes the gradient into the logits.
pub const VERL_LOGITS_BYTES: f64 = 10.0;
/// verl's update on today's stack (bf16 logits), per token per vocab entry, logits included:
/// the most the backward through the loss holds at once. `_forward_micro_batch` divides the
/// logits by the temperature in place on a view (`output.logits.squeeze(0).div_(temperature)`,
/// `dp_actor.py` at b178a3cd5, L258-259), so autograd's `CopySlices` makes the base's gradient,
/// a clone of the view's and the division's own (three bf16 tensors) beside the cross-entropy's
/// gradient, written into the logits: 2 + 8. Measured on one H100
/// (`calibration/measured/h100-verl-actor.jsonl`): every update without the entropy, and every
/// one with the compiled entropy (whose backward peaks earlier and lower), peaks exactly
/// 8.00 B per entry above what it held after the forward, on 0.5B, 1.5B and 3B shapes at 16k
/// and 32k tokens.
pub const VERL_LOSS_BWD_BYTES: f64 = 10.0;
/// The same with the eager entropy in the loss (`use_torch_compile=False`, or padding kept).
/// `_forward_micro_batch` runs under bf16 autocast (`dp_actor.py` L155), which computes
/// `logsumexp`, `softmax` and the `sum` in fp32: the forward keeps an fp32 copy and the fp32
/// softmax (the 10 B of [`VERL_LOGITS_BYTES`], logits included, measured 10.0), and the
/// backward peaks at 28.0 B per entry (measured, `calibration/measured/`).
pub const VERL_LOSS_BWD_EAGER_ENTROPY_BYTES: f64 = 28.0;
/// The same without padding removal, per padded entry: the whole logits are divided in place
/// (not a view) and only the response's slice is kept, a copy; the backward makes the slice's
/// gradient back into a zero tensor of the whole logits and the division's gradient. Measured
/// on one H100 (`calibration/measured/h100-verl-extra.jsonl`, Qwen2.5-1.5B, 16 and 32
/// sequences of 512 + 512 tokens): 4.4 and 4.1 B; the same peaks to the byte with 768 + 256
/// (`h100-verl-padded.jsonl`): the share of the response does not change it.
pub const VERL_LOSS_BWD_PADDED_BYTES: f64 = 4.0;
/// verl's no-grad log-prob pass with the eager entropy, logits included: under bf16 autocast
/// `logsumexp` upcasts the logits (an fp32 copy, 4), `softmax` makes fp32 (4) and `pd * logits`
/// promotes to fp32 (4), beside the bf16 logits (2). Measured on one H100: 14.0 B per entry
/// (`calibration/measured/h100-verl-actor.jsonl`, 0.5B–3B, 8k–16k tokens).
pub const VERL_NOGRAD_EAGER_ENTROPY_BYTES: f64 = 14.0;
/// verl `entropy_from_logits_with_chunking`, per token per vocab entry of the one chunk in
/// flight when the backward keeps none of it (compiled, or checkpointed): its `.float()` copy
/// (4), softmax (4) and `softmax * logits` (4) as eager code makes them
/// (`verl/utils/torch_functional.py` at b178a3cd5, L258-262); compiled code fuses some away,
/// so this bounds it from above.
pub const VERL_ENTROPY_CHUNK_BYTES: f64 = 12.0;
/// verl fused kernels, torch backend: the most one chunk's backward holds at once, per token
/// per vocab entry (`_fused_linear_for_ppo_bwd`, `verl/utils/experimental/torch_functional.py`
/// at b178a3cd5, L40-72): the fp32 logits (4), `probs` (4), `one_hot_input` (4), `one_hot_input
/// - probs` (4) and its product with `dlog_probs` (4).
pub const VERL_FUSED_TORCH_BWD_BYTES: f64 = 20.0;
/// The same when the entropy is a term of the loss (`dentropy` given): `dlogits` (4) stays
/// while `log_probs` (4), `log_probs + entropy` and the products (4 + 4, two at a time) are
/// made, 28 B in all.
pub const VERL_FUSED_TORCH_BWD_ENTROPY_BYTES: f64 = 8.0;
/// AReaL: bf16 logits (2) and the fp32 buffer of the compiled, fused log-softmax (4), one
/// 1024-token chunk of it at a time: the compiled chunks keep nothing for the backward
/// (measured on one H100, `calibration/measured/`).
pub const AREAL_LOGITS_BYTES: f64 = 6.0;
/// A no-grad forward (verl's log-prob and values passes, under `torch.no_grad()`) keeps no
/// activations: each decoder layer's tensors are freed as the layer returns. Its working set,
/// per token, is at most the hidden-sized bf16 tensors alive at once — the residual stream,
/// the normed input and the sub-layer's output (3 × 2 bytes per hidden unit) — and, in the
/// gated MLP (`down_proj(act_fn(gate_proj(x)) * up_proj(x))`, Hugging Face's Llama/Qwen2
/// `MLP.forward`), `act_fn(gate)`, `up` and their product (3 × 2 bytes per MLP unit; `gate`
/// itself is freed once `act_fn` returns). Counted from the code, not measured.
pub const NOGRAD_LAYER_BYTES: (f64, f64) = (6.0, 6.0);
/// Activations per token per hidden unit per layer without checkpointing, bf16
/// (Korthikanti et al. 2022, `sbh(34 + 5as/h)` with flash attention dropping the `5as/h`).
/// Only torchrun's size-only fallback uses it now ([`ACT_LAYER_BYTES_BF16`] counts a known
/// layer).
pub const ACT_BYTES_FULL: f64 = 34.0;
/// What one Hugging Face decoder layer (Llama/Qwen2: RMSNorm, attention through SDPA or
/// flash-attn, gated MLP) saves for its backward per token in bf16, as `(per hidden unit, per
/// K/V unit, per MLP unit)`. Each RMSNorm upcasts (`hidden_states.to(torch.float32)`): its fp32
/// input (4), the bf16 cast of the normalized value (2) and the weighted output (2), twice per
/// layer → 16; attention's rotated queries and its output (2 + 2) → 20; rotated keys and values
/// (2 + 2) per K/V unit; the MLP's gate, up, SiLU(gate) and their product (4 × 2) → 8. Measured
/// on one H100 (`calibration/measured/h100-verl-actor.jsonl`, Qwen2.5-0.5B without
/// checkpointing, FSDP2 bf16): 57,696 B per token and layer where this counts 57,344 (−0.6 %).
/// It replaces Korthikanti et al.'s `34·h` ([`ACT_BYTES_FULL`]), which assumes a 4h MLP: Qwen2.5's
/// MLP is 5.3–5.8 h, so `34·h` counted half of what a layer keeps.
pub const ACT_LAYER_BYTES_BF16: (f64, f64, f64) = (20.0, 4.0, 8.0);
/// A mixture of experts' layer, per token, beyond what [`ACT_LAYER_BYTES_BF16`] counts with the
/// top-k experts' widths as its MLP units: `(per routed copy and hidden unit, per routed copy,
/// per expert)`. Hugging Face's eager expert loop (transformers 4.54–4.57, which verl's CI pins;
/// `modeling_qwen3_moe.py` `Qwen3MoeSparseMoeBlock.forward`, the same in Mixtral and
/// Qwen2-MoE) keeps, for each of a token's top-k copies, the gathered expert input, the
/// `down_proj` output and the weighted output `index_add_` saves (3 × 2 bytes per hidden unit),
/// its int64 top-k index, `torch.where`'s indices, the routing weight and
/// `norm_topk_prob`'s division (30 bytes); and per expert the fp32 softmax of the router's
/// logits (4 bytes). Counted with autograd's saved-tensor hooks on CPU by
/// `scripts/moe-saved-bytes.py` (torch 2.8, transformers 4.57.1, small shapes: 10,940 bytes per
/// token, the formula to the byte; `calibration/measured/moe-saved-bytes-cpu.txt`).
/// transformers 5's grouped-matmul experts keep one hidden copy fewer; the larger is used.
pub const MOE_SAVED_BYTES_BF16: (f64, f64, f64) = (6.0, 30.0, 4.0);
/// A mixture of experts' block in a no-grad forward (log-probs), per token, as `(per routed
/// copy and expert, per expert, per routed copy, per hidden unit)`: Hugging Face's eager loop
/// (transformers 4.5x) holds, for the whole loop, the int64 `one_hot` expert mask
/// (`k × E × 8` bytes), the bf16 router logits (2 per expert), the top-k indices and weights
/// (int64, fp32 and bf16: 14 per copy) and the bf16 output it adds into (2 per hidden unit).
pub const MOE_NOGRAD_BYTES: (f64, f64, f64, f64) = (8.0, 2.0, 14.0, 2.0);
/// Beside [`MOE_NOGRAD_BYTES`], the expert running, on its `k / E` share of the tokens: four
/// hidden-sized bf16 tensors (its gathered input, `down_proj`'s output, the weighted output,
/// the previous expert's output still referenced: 8 bytes per hidden unit) and its gated
/// MLP's (8 bytes per expert unit). With [`MOE_NOGRAD_BYTES`], 13 % under the live peak
/// `scripts/moe-saved-bytes.py` measured at its small shape (the busiest expert holds more
/// than the mean share); the test holds it within 20 %. transformers 5's grouped-matmul
/// experts hold all `k × T` rows at once instead (`8kh` per token): not modelled.
pub const MOE_NOGRAD_EXPERT_BYTES: (f64, f64) = (8.0, 8.0);
/// vLLM's fused-MoE chunk: `VLLM_FUSED_MOE_CHUNK_SIZE`'s default, 32768 tokens in vLLM 0.11
/// (`vllm/envs.py`; 16384 in 0.12): its caches hold at most this many batched tokens.
pub const VLLM_FUSED_MOE_CHUNK: f64 = 32768.0;
/// With gradient checkpointing: each layer keeps its bf16 input only.
pub const ACT_BYTES_CKPT: f64 = 2.0;
/// vLLM's non-KV memory besides weights: CUDA graphs, sampler, allocator slack.
pub const VLLM_WORKSPACE_BASE_GIB: f64 = 0.5;
/// The same with `enforce_eager` (no CUDA graphs). vLLM 0.12 under verl 0.8 on an RTX 5090
/// (31.36 GiB), Qwen3-4B (7.49 GiB of bf16 weights), `gpu_memory_utilization` 0.25,
/// `max_num_batched_tokens` 1536, eager: "the available KV cache memory (0.10 GiB)"
/// (0904wang/LightningSearch-RL at de038e0745c4,
/// docs/experiments/phase5m-env-transition-grpo-4gpu-failed-kvcache-2026-06-16.md), so
/// 7.84 − 7.49 − 0.085 (the batched tokens' activations, [`VLLM_WORKSPACE_HIDDEN_BUFFERS`])
/// − 0.10 = 0.16 GiB; 0.15–0.17 within the message's rounding. The same runs at 1024 and 768
/// batched tokens started (`calibration/verl-holdout.yaml`, `lightningsearch-*`).
pub const VLLM_WORKSPACE_BASE_EAGER_GIB: f64 = 0.16;
/// vLLM's profiled peak activation per batched token: bf16 gate+up MLP outputs (2 × inter
/// / TP) and four hidden-sized buffers, × 2 bytes.
pub const VLLM_WORKSPACE_HIDDEN_BUFFERS: f64 = 4.0;
/// SGLang memory outside `mem_fraction_static × capacity` (CUDA graphs, context).
/// Seed 000: 36.34 GiB in use at 0.8 × 44.42 GiB = 35.54 GiB.
pub const SGLANG_OVERHEAD_GIB: f64 = 0.80;
/// SGLang's CUDA context, inside the static fraction (its KV pool is what is left).
pub const SGLANG_CTX_GIB: f64 = 0.5;
/// Host RAM of the job besides offloaded state: Ray head, raylet, dataloaders.
pub const HOST_BASE_GIB: f64 = 6.0;
/// Host RAM per GPU worker process (torch + CUDA + vLLM libraries, pinned buffers).
pub const HOST_PER_GPU_GIB: f64 = 3.0;
/// Ray's memory monitor kills a worker above this share of node memory.
pub const RAY_MEMORY_THRESHOLD: f64 = 0.95;
/// torchrun model: seed 003's model size, the reference point of the fit.
pub const TR_REF_PARAMS_M: f64 = 512.0;
/// torchrun: resident bytes per parameter a plain DDP + AdamW job needs (fp32 weights 4,
/// grads 4, AdamW m+v 8, DDP gradient buckets 4).
pub const TR_THEORY_BYTES_PER_PARAM: f64 = 20.0;
/// torchrun: total static (non-activation) memory of seed 003's 512M model, fitted so that
/// micro 1 × 1024 tokens peaks at ~35 GB as the seed measured.
pub const TR_STATIC_GIB_AT_REF: f64 = 27.6;
/// torchrun: stored activations per 1024 tokens of one sample (checkpointing on, bf16), at
/// 512M params; fitted so micro 2 × 1024 lands at 38–40 GB (seed 003).
pub const TR_ACT_GIB_PER_1K_TOKENS: f64 = 2.4;
/// torchrun: the transient attention-score tensor of one sample at 1024 tokens (grows with
/// seq²); fitted so micro 8 × 2048 "tried to allocate 51+ GB" (seed 003).
pub const TR_ATTN_GIB_PER_SAMPLE_AT_1K: f64 = 1.6;
/// torchrun: layers when the config does not say (seed 003's model has 8).
pub const TR_LAYERS_DEFAULT: u32 = 8;
/// torchrun: host RAM per rank (dataloader workers, pinned memory).
pub const TR_HOST_PER_RANK_GIB: f64 = 2.5;
/// torchrun with a known architecture: saved activations of one Hugging Face decoder layer
/// (Llama/Qwen/Mistral: RMSNorm, Q/K/V/O with RoPE, SDPA, gated MLP) per token under autocast
/// with fp32 master weights, as bytes per (hidden unit, K/V unit, MLP unit), counted from what
/// each op saves for its backward. Hidden: the layer's fp32 input (4), per RMSNorm its fp32
/// normalised output (4) and the bf16 cast the projection saves (2), twice; Q after RoPE (2),
/// the attention output (2), the fp32 residual after attention (4) → 24. K after RoPE and V,
/// which SDPA saves (2 + 2) → 4 (torch ≥ 2.5 runs grouped-query attention without repeating
/// K/V; the older `repeat_kv` path would save 4 per hidden unit instead). MLP: gate, up,
/// SiLU(gate) and their product (4 × 2) → 8. SDPA's flash / memory-efficient kernels keep no
/// `s × s` scores: the `5as/h` term of Korthikanti et al. 2022 is gone. Their `34·h` for a
/// bf16 GPT layer with a 4h GeLU MLP is the same count in another layout.
pub const TR_LAYER_BYTES_AMP: (f64, f64, f64) = (24.0, 4.0, 8.0);
/// The same in fp32 (no autocast): every tensor 4 bytes, and each RMSNorm's weighted output
/// is saved by the projection itself instead of a cast copy.
pub const TR_LAYER_BYTES_FP32: (f64, f64, f64) = (32.0, 8.0, 16.0);
/// torchrun with checkpointing (non-reentrant, per decoder layer): each layer keeps its input,
/// the fp32 residual stream (fp32 master weights keep it fp32 under autocast).
pub const TR_CKPT_INPUT_BYTES: f64 = 4.0;
/// torchrun with a known architecture: fp32 `tokens × vocab` blocks the caching allocator
/// keeps stranded at the loss, beyond [`FRAG`]. The fp32 logits, their log-softmax and its
/// gradient are by far the largest tensors of a step, and each is freed again within it. torch's
/// allocator (`c10/cuda/CUDACachingAllocator.cpp`, torch 2.5: `get_free_block`,
/// `should_split`, `release_blocks`) serves a request from the smallest cached block that
/// holds it, splits a large-pool block whenever more than 1 MiB (`kSmallSize`) would be left
/// (`max_split_size_mb` unset), and gives a segment back to the device only when no piece of
/// it is in use. Once those
/// blocks are freed they are the largest cached blocks, so the smaller tensors allocated
/// meanwhile (the bf16 gradient of the logits, the gradients `zero_grad(set_to_none=True)`
/// re-creates, AdamW's state in the first step) are split out of them; the next micro-batch's
/// fp32 logits no longer fit there and get a fresh segment. Not fitted: one whole block. A
/// one-constant fit to the 11 measured peaks of the H100 grid (`h100-train-py.jsonl`) gives
/// 0.87 on the 0.5B rows alone (worst 1.5B row then −4.9 %) and 1.16 on the 1.5B rows alone
/// (worst 0.5B row +6.7 %); at 1.0 every row is within 5.1 % (docs/ESTIMATOR.md).
pub const TR_STRANDED_LOGITS_BLOCKS: f64 = 1.0;
/// DDP's gradient bucket size (`bucket_cap_mb=25`, torch's default), in GiB.
pub const TR_DDP_BUCKET_GIB: f64 = 25.0 / 1024.0;
/// rl-swarm (genrl 0.1.11 `GRPOLanguageTrainerModule`): the prompt length every training
/// sequence is padded to. genrl tokenizes a round's prompts with `padding=True`, so a batch is
/// as long as its longest prompt: reasoning-gym's composite set (`rgym_exp/src/datasets.yaml`)
/// mixes short arithmetic questions with `arc_1d` puzzles (three worked examples of up to 30
/// cells each) under the default system prompt. Not measured with a tokenizer: a round that
/// draws an `arc_1d` item pads to a few hundred tokens, and 512 covers it.
pub const RS_PROMPT_TOKENS: f64 = 512.0;
/// rl-swarm: saved activations per token of one Hugging Face decoder layer when the whole
/// model is cast to fp16/bf16 (`training.dtype`; genrl calls `model.to(dtype)`, no autocast), as
/// bytes per (hidden unit, K/V unit, MLP unit): the fp32 count ([`TR_LAYER_BYTES_FP32`]'s
/// elements) at 2 bytes — (16, 4, 8) — plus what each RMSNorm keeps of its fp32 upcast
/// (`hidden_states.to(torch.float32)`, saved by `pow` and the multiply: 4 per hidden unit, two
/// norms) → (24, 4, 8).
pub const RS_LAYER_BYTES_HALF: (f64, f64, f64) = (24.0, 4.0, 8.0);
/// rl-swarm: `omega_gpu_resolver.gpu_model_choice_resolver` takes a model from the large pool
/// when the first GPU has at least this much memory (GiB, as torch reports it), else from the
/// small pool.
pub const RS_LARGE_POOL_MIN_VRAM_GIB: f64 = 40.0;
/// rl-swarm: host RAM of the node besides the model: Python with torch and transformers, the
/// hivemind DHT daemon (`p2pd`), reasoning-gym's generators and the Hydra/web3 clients.
pub const RS_HOST_BASE_GIB: f64 = 4.0;
