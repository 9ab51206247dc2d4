#!/usr/bin/env python3
"""Measure what a verl actor's update and old-log-prob pass hold on one GPU, on real shapes.

Not a test: a measurement for `crates/orch-memory/calibration/measured/`, run by hand on a GPU
machine (see the README there). It prints one JSON object per line and writes the same lines
to `--out`.

What it runs, each step as verl's code does it (volcengine/verl at b178a3cd5):

- The actor: a Qwen2 model of a shape from `models/qwen2.5.yaml` (random weights), created in
  fp32 (`fsdp_workers.py` L324-326: fp32 for the actor), wrapped by FSDP2 as verl's
  `strategy=fsdp2` does (`apply_fsdp2`, `fsdp_utils.py` L507-537: every decoder layer, then
  the root; `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32, cast_forward_inputs=True)`,
  `fsdp_workers.py` L544-545), on a world of one GPU, so each rank's shard is the whole model.
  `torch.optim.AdamW` (`verl/workers/config/optimizer.py` `build_optimizer`), gradient
  checkpointing with `use_reentrant=False` when asked.
- A micro-batch of `tokens` packed tokens, `input_ids` of shape (1, tokens) without padding
  (`use_remove_padding`, `dp_actor.py` `_forward_micro_batch` L227-271). verl passes
  `position_ids` for flash-attn's varlen kernel; this image has no flash-attn kernels, so
  attention is SDPA's causal kernel over the packed row (its memory is linear in the tokens,
  as flash-attn's is).
- The loss's tensors (`dp_actor.py` L271-299): the bf16 logits, `div_(temperature)` in place,
  log-probs from flash-attn's Triton `cross_entropy_loss` (`verl/utils/torch_functional.py`
  L33-38, L72-105: verl takes it whenever flash-attn imports; `inplace_backward` unless the
  entropy is computed), the entropy `logsumexp(l) - sum(softmax(l) * l)` (L224-238), compiled
  with `torch.compile(dynamic=True)` unless `use_torch_compile=False` (L83-89).
- The update (`update_policy` L502-660): `zero_grad`, forward, loss, `backward`, clip, `step`,
  `zero_grad`. The old-log-prob pass (`compute_log_prob` L418-495, entropy always computed for
  the actor's pass: `fsdp_workers.py` L1009-1012): the same forward under `no_grad`.

Each phase starts from `empty_cache()` and `reset_peak_memory_stats()`, so its peaks are its
own (the estimator models each phase's own fragmentation). A `sequence` record runs the pass
and then the update without `empty_cache` between them, as verl does inside one step.

Also: the loss alone (`probe` records), over a bf16 `[tokens, hidden] @ [hidden, vocab]`
product, for verl's variants and AReaL's chunked, compiled log-softmax (`areal/utils/
functional.py` at 04ab6018c L20-40, L43-81: 1024-token chunks of
`log_softmax(logits.float() / temperature)`), to read bytes per token and vocabulary entry.

flash-attn's file is loaded from `--flash-attn-ce` (Dao-AILab/flash-attention
`flash_attn/ops/triton/cross_entropy.py`, unchanged); without it the log-probs fall back to
verl's `logprobs_from_logits_v2`-like path and the records say so.
"""

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import time
import traceback

import torch
import yaml

GIB = 1024**3
VOCAB_DEFAULT = 151936


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="models/qwen2.5.yaml")
    p.add_argument("--out", required=True)
    p.add_argument("--flash-attn-ce", default=None)
    p.add_argument(
        "--plan",
        default="full",
        help="full | extra (accumulation, padded, critic) | padded (other shares) | tiny",
    )
    p.add_argument("--only", default=None, help="comma-separated sizes to run")
    return p.parse_args()


class Recorder:
    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")

    def __call__(self, **rec):
        line = json.dumps(rec, sort_keys=True)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def device():
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def fresh():
    """Start a phase: drop cached blocks and the peak counters."""
    sync()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def allocated():
    return torch.cuda.memory_allocated() / GIB if torch.cuda.is_available() else 0.0


def peaks():
    if not torch.cuda.is_available():
        return 0.0, 0.0
    sync()
    return (
        torch.cuda.max_memory_allocated() / GIB,
        torch.cuda.max_memory_reserved() / GIB,
    )


def load_flash_ce(path):
    if not path:
        return None
    spec = importlib.util.spec_from_file_location("flash_attn_cross_entropy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cross_entropy_loss


def make_logprobs(flash_ce):
    def logprobs(logits, labels, inplace_backward):
        if flash_ce is not None:
            losses, _ = flash_ce(logits, labels, inplace_backward=inplace_backward)
            return -losses
        # verl's fallback without flash-attn: a log-softmax per row, gathered.
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)

    return logprobs


def entropy_from_logits(logits):
    pd = torch.nn.functional.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)


def areal_chunk(logits, labels, temperature):
    lp = torch.nn.functional.log_softmax(logits.float() / temperature, dim=-1)
    ent = -torch.sum(lp.exp() * lp, dim=-1)
    return lp.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1), ent


def areal_chunk_nogather_entropy(logits, labels, temperature):
    lp = torch.nn.functional.log_softmax(logits.float() / temperature, dim=-1)
    return lp.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)


class Fns:
    def __init__(self, flash_ce):
        self.logprobs = make_logprobs(flash_ce)
        self.has_flash = flash_ce is not None
        self.entropy_eager = entropy_from_logits
        self.entropy_compiled = torch.compile(entropy_from_logits, dynamic=True)
        self.areal_entropy = torch.compile(areal_chunk)
        self.areal_logprobs = torch.compile(areal_chunk_nogather_entropy)

    def entropy(self, compiled):
        return self.entropy_compiled if compiled else self.entropy_eager


def areal_loss(fns, logits, labels, entropy, chunk=1024):
    lps, ents = [], []
    for i in range(0, logits.shape[0], chunk):
        sl, lb = logits[i : i + chunk], labels[i : i + chunk]
        if entropy:
            lp, ent = fns.areal_entropy(sl, lb, 1.0)
            ents.append(ent)
        else:
            lp = fns.areal_logprobs(sl, lb, 1.0)
        lps.append(lp)
    return torch.cat(lps), (torch.cat(ents) if entropy else None)


# ---------------------------------------------------------------------------------------------
# The loss alone.


def probe(rec, fns, tokens, hidden, vocab, variant, grad):
    """bf16 h @ W^T as lm_head makes the logits, then one loss variant."""
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(0)
    h = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16, generator=gen)
    h.requires_grad_(grad)
    w = torch.randn(vocab, hidden, device=dev, dtype=torch.bfloat16, generator=gen) * 0.02
    labels = torch.randint(0, vocab, (tokens,), device=dev, generator=gen)
    adv = torch.randn(tokens, device=dev, generator=gen)
    fresh()
    base = allocated()
    t0 = time.time()
    verl = variant.startswith("verl")
    with torch.set_grad_enabled(grad):
        with verl_autocast() if verl else contextlib.nullcontext():
            logits = h @ w.t()
            logits.div_(1.0)
            ent = None
            if verl:
                entropy = variant != "verl-no-entropy"
                lp = fns.logprobs(logits, labels, inplace_backward=not entropy or not grad)
                if entropy:
                    ent = fns.entropy(variant == "verl-entropy-compiled")(logits)
            else:
                lp, ent = areal_loss(fns, logits, labels, entropy=variant == "areal-entropy")
        loss = -(lp * adv).mean()
        if ent is not None and variant.startswith("verl"):
            # AReaL logs the entropy detached (areal/engine/ppo/actor.py L335-336).
            loss = loss - 0.001 * ent.mean()
        held = allocated() - base
        fwd_alloc, _ = peaks()
        if grad:
            loss.backward()
    del logits, lp, ent, loss
    alloc_peak, res_peak = peaks()
    unit = tokens * vocab / GIB
    rec(
        kind="probe",
        variant=variant,
        grad=grad,
        tokens=tokens,
        hidden=hidden,
        vocab=vocab,
        logits_bf16_gib=round(2 * unit, 4),
        held_after_forward_gib=round(held, 4),
        forward_peak_over_base_gib=round(fwd_alloc - base, 4),
        peak_over_base_gib=round(alloc_peak - base, 4),
        reserved_peak_over_base_gib=round(res_peak - base, 4),
        held_bytes_per_entry=round(held / unit, 3),
        peak_bytes_per_entry=round((alloc_peak - base) / unit, 3),
        seconds=round(time.time() - t0, 2),
    )


# ---------------------------------------------------------------------------------------------
# The actor.


def qwen2_config(shape):
    from transformers import AutoConfig

    return AutoConfig.for_model(
        "qwen2",
        hidden_size=shape["hidden_size"],
        num_hidden_layers=shape["num_hidden_layers"],
        num_attention_heads=shape["num_attention_heads"],
        num_key_value_heads=shape["num_key_value_heads"],
        intermediate_size=shape["intermediate_size"],
        vocab_size=shape["vocab_size"],
        tie_word_embeddings=shape["tie_word_embeddings"],
        max_position_embeddings=131072,
        use_cache=False,
    )


def build_actor(shape):
    from transformers import AutoModelForCausalLM

    dev = device()
    torch.manual_seed(0)
    with dev:
        model = AutoModelForCausalLM.from_config(
            qwen2_config(shape), torch_dtype=torch.float32, attn_implementation="sdpa"
        )
    fsdp = False
    if torch.distributed.is_initialized():
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True
        )
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp, reshard_after_forward=True)
        fully_shard(model, mp_policy=mp, reshard_after_forward=True)
        fsdp = True
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.999), weight_decay=0.01)
    return model, opt, fsdp


def set_ckpt(model, on):
    if on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()


def batch(tokens, vocab, seed):
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(seed)
    ids = torch.randint(0, vocab, (1, tokens), device=dev, generator=gen)
    labels = torch.roll(ids, shifts=-1, dims=1).squeeze(0)
    adv = torch.randn(tokens, device=dev, generator=gen)
    return ids, labels, adv


def logits_of(model, ids):
    out = model(input_ids=ids, attention_mask=None, use_cache=False)
    logits = out.logits.squeeze(0)
    logits.div_(1.0)
    return logits


def verl_autocast():
    """`_forward_micro_batch` runs under `torch.autocast(dtype=param_dtype)`, bf16 (`dp_actor.py`
    L155 at b178a3cd5): the model, the log-probs and the entropy; the loss and the backward
    outside it. Autocast runs `softmax`, `logsumexp` and `sum` in fp32."""
    return torch.autocast(device_type=device().type, dtype=torch.bfloat16)


def old_log_prob_pass(model, fns, ids, labels, compiled):
    model.eval()
    try:
        with torch.no_grad(), verl_autocast():
            logits = logits_of(model, ids)
            lp = fns.logprobs(logits, labels, inplace_backward=True)
            ent = fns.entropy(compiled)(logits)
            del logits, lp, ent
    finally:
        model.train()


def update(model, opt, fns, ids, labels, adv, coeff, compiled, marks):
    opt.zero_grad(set_to_none=True)
    with verl_autocast():
        logits = logits_of(model, ids)
        lp = fns.logprobs(logits, labels, inplace_backward=coeff == 0)
        ent = fns.entropy(compiled)(logits) if coeff != 0 else None
    loss = -(lp * adv).mean()
    if ent is not None:
        loss = loss - coeff * ent.mean()
        del ent
    marks["after_forward_gib"] = allocated()
    loss.backward()
    del logits, lp, loss
    marks["fwd_bwd_peak"] = peaks()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def actor_case(rec, fns, size, shape, model, opt, fsdp, case):
    tokens, ckpt, coeff, compiled = case["tokens"], case["ckpt"], case["coeff"], case["compiled"]
    set_ckpt(model, ckpt)
    ids, labels, adv = batch(tokens, shape["vocab_size"], seed=tokens)
    common = dict(
        size=size,
        tokens=tokens,
        gradient_checkpointing=ckpt,
        entropy_coeff=coeff,
        use_torch_compile=compiled,
        fsdp2=fsdp,
        flash_ce=fns.has_flash,
    )
    t0 = time.time()

    def phase(name, fields, run):
        measure(rec, dict(fields, kind="actor", phase=name), run, drop)

    def drop():
        opt.zero_grad(set_to_none=True)

    # The old-log-prob pass with compiled and with eager entropy.
    for pass_compiled in (True, False):
        phase(
            "old_log_prob",
            {**common, "use_torch_compile": pass_compiled},
            lambda m, c=pass_compiled: old_log_prob_pass(model, fns, ids, labels, c),
        )
    phase(
        "update",
        common,
        lambda m: update(model, opt, fns, ids, labels, adv, coeff, compiled, m),
    )

    # One step's order, without empty_cache between the pass and the update.
    def sequence(m):
        old_log_prob_pass(model, fns, ids, labels, compiled)
        update(model, opt, fns, ids, labels, adv, coeff, compiled, m)

    phase("sequence", common, sequence)
    rec(kind="timing", size=size, tokens=tokens, seconds=round(time.time() - t0, 2))


PLANS = {
    # size: list of cases; each case runs the old-log-prob pass (compiled and eager entropy),
    # the update, and the two in sequence.
    "full": {
        "0.5B": [
            dict(tokens=16384, ckpt=True, coeff=0.0, compiled=True),
            dict(tokens=16384, ckpt=False, coeff=0.0, compiled=True),
            dict(tokens=16384, ckpt=True, coeff=0.001, compiled=True),
            dict(tokens=16384, ckpt=True, coeff=0.001, compiled=False),
            dict(tokens=32768, ckpt=True, coeff=0.0, compiled=True),
        ],
        "1.5B": [
            dict(tokens=16384, ckpt=True, coeff=0.0, compiled=True),
            dict(tokens=16384, ckpt=False, coeff=0.0, compiled=True),
            dict(tokens=16384, ckpt=True, coeff=0.001, compiled=True),
            dict(tokens=32768, ckpt=True, coeff=0.0, compiled=True),
            # Past the card: the logits alone are 37 GiB; torch's message is the record.
            dict(tokens=131072, ckpt=True, coeff=0.001, compiled=False),
        ],
        "3B": [
            dict(tokens=16384, ckpt=True, coeff=0.0, compiled=True),
            dict(tokens=8192, ckpt=False, coeff=0.0, compiled=True),
            dict(tokens=16384, ckpt=True, coeff=0.001, compiled=True),
        ],
    },
    "tiny": {
        "0.5B": [
            dict(tokens=64, ckpt=True, coeff=0.0, compiled=True),
            dict(tokens=64, ckpt=False, coeff=0.001, compiled=False),
        ],
    },
}

PROBES = {
    "full": [(16384, 896, VOCAB_DEFAULT)],
    "tiny": [(64, 32, 1000)],
}
PROBE_VARIANTS = [
    ("verl-no-entropy", True),
    ("verl-entropy-compiled", True),
    ("verl-entropy-eager", True),
    ("verl-entropy-compiled", False),
    ("verl-entropy-eager", False),
    ("areal-entropy", True),
    ("areal-logprobs", True),
    ("areal-entropy", False),
]


def tiny_shape(shape):
    return dict(
        shape,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=1000,
    )


# ---------------------------------------------------------------------------------------------
# `--plan extra`: gradient accumulation, the padded path, the critic.


def update_accumulated(model, opt, fns, micro_batches):
    """`update_policy` over several micro-batches of one mini-batch: the later ones meet the
    gradients the earlier ones accumulated; one `step` at the end."""
    opt.zero_grad(set_to_none=True)
    for ids, labels, adv in micro_batches:
        with verl_autocast():
            logits = logits_of(model, ids)
            lp = fns.logprobs(logits, labels, inplace_backward=True)
        loss = -(lp * adv).mean() / len(micro_batches)
        loss.backward()
        del logits, lp, loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def padded_batch(sequences, prompt, response, pad, vocab, seed):
    """verl's padded layout: prompts left-padded (`pad` tokens each here), responses after
    them; `attention_mask` and `position_ids` as verl's rollout makes them."""
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(seed)
    length = prompt + response
    ids = torch.randint(0, vocab, (sequences, length), device=dev, generator=gen)
    mask = torch.ones(sequences, length, dtype=torch.long, device=dev)
    mask[:, :pad] = 0
    pos = torch.clamp(torch.cumsum(mask, dim=-1) - 1, min=0)
    adv = torch.randn(sequences, response, device=dev, generator=gen)
    return ids, mask, pos, ids[:, prompt:], adv


def padded_logprobs(model, fns, b, response, calculate_entropy):
    """`_forward_micro_batch` without padding removal (`dp_actor.py` L345-372 at b178a3cd5):
    the whole padded logits, `div_` in place, the response's slice, log-probs (flash-attn's
    cross-entropy over the slice reshaped, in place), the eager entropy."""
    ids, mask, pos, responses, _ = b
    with verl_autocast():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
        logits = out.logits
        logits.div_(1.0)
        logits = logits[:, -response - 1 : -1, :]
        v = logits.shape[-1]
        lp = fns.logprobs(logits.reshape(-1, v), responses.reshape(-1), inplace_backward=True)
        ent = fns.entropy_eager(logits) if calculate_entropy else None
    return lp, ent


def padded_pass(model, fns, b, response):
    model.eval()
    try:
        with torch.no_grad():
            lp, ent = padded_logprobs(model, fns, b, response, True)
            del lp, ent
    finally:
        model.train()


def padded_update(model, opt, fns, b, response, marks, coeff=0.0):
    opt.zero_grad(set_to_none=True)
    lp, ent = padded_logprobs(model, fns, b, response, coeff != 0)
    loss = -(lp.view(b[4].shape) * b[4]).mean()
    if ent is not None:
        loss = loss - coeff * ent.mean()
        del ent
    marks["after_forward_gib"] = allocated()
    loss.backward()
    del lp, loss
    marks["fwd_bwd_peak"] = peaks()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def build_critic(shape):
    """verl's critic: `AutoModelForTokenClassification` with one label (`fsdp_workers.py`
    `_build_critic_model_optimizer`), fp32, FSDP2 as the actor."""
    from transformers import AutoModelForTokenClassification

    cfg = qwen2_config(shape)
    cfg.num_labels = 1
    torch.manual_seed(0)
    with device():
        model = AutoModelForTokenClassification.from_config(cfg, torch_dtype=torch.float32)
    if torch.distributed.is_initialized():
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True
        )
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp, reshard_after_forward=True)
        fully_shard(model, mp_policy=mp, reshard_after_forward=True)
    model.train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), weight_decay=0.01)
    return model, opt


def critic_update(model, opt, b, response, marks):
    """`update_critic` (`dp_critic.py` at b178a3cd5): padded forward under bf16 autocast, the
    values of the response, a squared-error loss, backward, clip, step, `zero_grad`."""
    ids, mask, pos, _, returns = b
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device().type, dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
        values = out.logits.squeeze(-1)[:, -response - 1 : -1]
        loss = ((values.float() - returns) ** 2).mean()
    marks["after_forward_gib"] = allocated()
    loss.backward()
    del out, values, loss
    marks["fwd_bwd_peak"] = peaks()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure(rec, fields, run, on_fail=None):
    """One phase from an empty cache: its peaks, or torch's message when it fails."""
    fresh()
    static = allocated()
    marks = {}
    try:
        t0 = time.time()
        run(marks)
        sync()
        seconds = time.time() - t0
    except torch.OutOfMemoryError as e:
        if on_fail:
            on_fail()
        print(traceback.format_exc(), file=sys.stderr, flush=True)
        rec(**fields, static_gib=round(static, 4), oom=str(e).strip())
        return
    except Exception as e:  # noqa: BLE001 - a measurement run records and goes on
        if on_fail:
            on_fail()
        print(traceback.format_exc(), file=sys.stderr, flush=True)
        rec(**fields, error=repr(e))
        return
    a, r = peaks()
    extra = {}
    if "fwd_bwd_peak" in marks:
        fa, fr = marks["fwd_bwd_peak"]
        extra = dict(
            after_forward_gib=round(marks["after_forward_gib"], 4),
            fwd_bwd_allocated_peak_gib=round(fa, 4),
            fwd_bwd_reserved_peak_gib=round(fr, 4),
        )
    rec(
        **fields,
        static_gib=round(static, 4),
        allocated_peak_gib=round(a, 4),
        reserved_peak_gib=round(r, 4),
        seconds=round(seconds, 3),
        **extra,
    )


def warm_actor(fns, shape):
    """An actor with checkpointing on after one update (AdamW's state made, the entropy
    compiled): the steady state the extra plans measure from."""
    model, opt, fsdp = build_actor(shape)
    set_ckpt(model, True)
    ids, labels, adv = batch(4096, shape["vocab_size"], seed=1)
    update(model, opt, fns, ids, labels, adv, 0.001, True, {})
    del ids, labels, adv
    return model, opt, fsdp


def padded_cases(rec, fns, sizes, size="1.5B"):
    """`--plan padded`: the padded path at another response share (a quarter), and the padded
    update with the eager entropy in the loss."""
    shape = sizes[size]
    vocab = shape["vocab_size"]
    model, opt, fsdp = warm_actor(fns, shape)
    common = dict(kind="actor", size=size, gradient_checkpointing=True, use_torch_compile=False,
                  fsdp2=fsdp, flash_ce=fns.has_flash, padded=True)
    drop = lambda: opt.zero_grad(set_to_none=True)  # noqa: E731
    for sequences, prompt, response, coeff in ((16, 768, 256, 0.0), (32, 768, 256, 0.0),
                                               (16, 512, 512, 0.001)):
        b = padded_batch(sequences, prompt, response, 128, vocab, seed=sequences + response)
        fields = dict(common, tokens=sequences * (prompt + response), sequences=sequences,
                      prompt=prompt, response=response, pad=128, entropy_coeff=coeff)
        if coeff == 0.0:
            measure(rec, dict(fields, phase="old_log_prob"),
                    lambda m, b=b, r=response: padded_pass(model, fns, b, r), drop)
        measure(rec, dict(fields, phase="update"),
                lambda m, b=b, r=response, c=coeff: padded_update(model, opt, fns, b, r, m, c),
                drop)
        del b
    del model, opt
    fresh()


def extra_cases(rec, fns, sizes, size="1.5B"):
    shape = sizes[size]
    vocab = shape["vocab_size"]
    model, opt, fsdp = warm_actor(fns, shape)
    common = dict(kind="actor", size=size, gradient_checkpointing=True, entropy_coeff=0.0,
                  use_torch_compile=True, fsdp2=fsdp, flash_ce=fns.has_flash)
    drop = lambda: opt.zero_grad(set_to_none=True)  # noqa: E731
    # Accumulation: two micro-batches of 16,384 packed tokens in one mini-batch.
    micro = [batch(16384, vocab, seed=s) for s in (2, 3)]
    measure(
        rec,
        dict(common, phase="update", tokens=16384, micro_batches=2),
        lambda m: update_accumulated(model, opt, fns, micro),
        drop,
    )
    del micro
    # The padded path: sequences of 512 + 512 tokens, 128 of each prompt padding.
    for sequences in (16, 32):
        b = padded_batch(sequences, 512, 512, 128, vocab, seed=sequences)
        fields = dict(common, tokens=sequences * 1024, padded=True, sequences=sequences,
                      prompt=512, response=512, pad=128)
        measure(rec, dict(fields, phase="old_log_prob", use_torch_compile=False),
                lambda m, b=b: padded_pass(model, fns, b, 512), drop)
        measure(rec, dict(fields, phase="update"),
                lambda m, b=b: padded_update(model, opt, fns, b, 512, m), drop)
        del b
    del model, opt
    fresh()
    # The critic, padded (critic.model.use_remove_padding's default): 512 + 1024 tokens.
    critic, copt = build_critic(shape)
    warm = padded_batch(4, 512, 1024, 128, vocab, seed=5)
    critic_update(critic, copt, warm, 1024, {})
    del warm
    for sequences in (20, 40):
        b = padded_batch(sequences, 512, 1024, 128, vocab, seed=sequences)
        measure(
            rec,
            dict(kind="critic", phase="critic_update", size=size, tokens=sequences * 1536,
                 padded=True, sequences=sequences, prompt=512, response=1024, pad=128,
                 gradient_checkpointing=True, fsdp2=fsdp),
            lambda m, b=b: critic_update(critic, copt, b, 1024, m),
            lambda: copt.zero_grad(set_to_none=True),
        )
        del b
    del critic, copt
    fresh()


def main():
    args = parse_args()
    rec = Recorder(args.out)
    with open(args.models, encoding="utf-8") as f:
        sizes = yaml.safe_load(f)["sizes"]
    import transformers

    info = dict(
        kind="env",
        torch=torch.__version__,
        transformers=transformers.__version__,
        python=sys.version.split()[0],
        autocast="bf16 around each forward, log-probs and entropy (dp_actor.py L155)",
    )
    if torch.cuda.is_available():
        prop = torch.cuda.get_device_properties(0)
        info.update(gpu=prop.name, total_memory_gib=round(prop.total_memory / GIB, 4))
    rec(**info)
    if torch.cuda.is_available():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        torch.distributed.init_process_group("nccl", rank=0, world_size=1)
        torch.cuda.set_device(0)
    flash_ce = load_flash_ce(args.flash_attn_ce)
    fns = Fns(flash_ce)
    if args.plan in ("extra", "padded"):
        (extra_cases if args.plan == "extra" else padded_cases)(rec, fns, sizes)
        rec(kind="done")
        return

    for tokens, hidden, vocab in PROBES[args.plan]:
        for variant, grad in PROBE_VARIANTS:
            try:
                probe(rec, fns, tokens, hidden, vocab, variant, grad)
            except Exception as e:  # noqa: BLE001 - record and go on
                print(traceback.format_exc(), file=sys.stderr, flush=True)
                rec(kind="probe", variant=variant, grad=grad, error=repr(e))

    only = set(args.only.split(",")) if args.only else None
    for size, cases in PLANS[args.plan].items():
        if only and size not in only:
            continue
        shape = sizes[size] if args.plan == "full" else tiny_shape(sizes[size])
        t0 = time.time()
        try:
            model, opt, fsdp = build_actor(shape)
            params = sum(p.numel() for p in model.parameters())
            # A first update makes AdamW's state (the steady state every later step meets)
            # and compiles the entropy.
            ids, labels, adv = batch(min(cases[0]["tokens"], 4096), shape["vocab_size"], seed=1)
            set_ckpt(model, True)
            update(model, opt, fns, ids, labels, adv, 0.001, True, {})
            old_log_prob_pass(model, fns, ids, labels, True)
            del ids, labels, adv
        except Exception as e:  # noqa: BLE001 - record and go on to the next size
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            rec(kind="model", size=size, error=repr(e))
            continue
        rec(kind="model", size=size, params=params, build_seconds=round(time.time() - t0, 2))
        for case in cases:
            try:
                actor_case(rec, fns, size, shape, model, opt, fsdp, case)
            except Exception as e:  # noqa: BLE001 - record and go on to the next case
                print(traceback.format_exc(), file=sys.stderr, flush=True)
                rec(kind="actor", size=size, case=case, error=repr(e))
        del model, opt
        fresh()
    rec(kind="done")


if __name__ == "__main__":
    main()
