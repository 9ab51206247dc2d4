#!/usr/bin/env python3
"""A small, real causal-LM training script for orch's `torchrun-yaml` template.

    torchrun --nproc_per_node=N examples/torchrun/train.py \
        --config train_config.yaml --output_dir DIR [--resume_from DIR/step_K]

It reads the training config orch renders (micro_batch_size, gradient_accumulation_steps,
max_seq_len, gradient_checkpointing, precision, lr, weight_decay, warmup_steps, max_steps,
save_every, seed, data.train_path, model.*), builds a randomly initialised model with
`transformers` from the architecture (no download: `model.architecture` holds config.json
keys, or `model.config` names a config.json or model directory; else a Llama-style shape from
`model.d_model`, `model.n_layers`, `model.n_heads`, `model.d_ffn`, `model.vocab_size`), and
trains it with AdamW under DDP (one process per GPU) on random tokens or a file of uint16
token ids. Every step prints one line orch's users (and its estimator checks) can read:

    step 12 loss 10.3712 tokens/s 48213 peak_allocated_gib 31.42 peak_reserved_gib 33.10

and the last line is `train-summary {json}` with the run's peak memory and median
throughput. A configuration that does not fit dies with torch's own
`torch.OutOfMemoryError` traceback, which is what orch classifies.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time

import torch
import torch.distributed as dist
import yaml


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the rendered train_config.yaml")
    p.add_argument("--output_dir", required=True, help="where step_N checkpoints go")
    p.add_argument("--resume_from", help="a step_N checkpoint directory to continue from")
    p.add_argument("--max_steps", type=int, help="override the config's max_steps")
    return p.parse_args()


def load_config(path):
    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    # orch renders dotted keys (model.n_layers) as nested mappings; accept both.
    def get(key, default=None):
        node = cfg
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return cfg.get(key, default)
            node = node[part]
        return node

    return cfg, get


def read_settings(get):
    """Every training setting main() reads, converted as it uses them: one place, so that a
    value of the wrong kind fails here, before any GPU work (orch's test suite calls this on
    every rendered train_config.yaml)."""
    precision = str(get("precision", "bf16"))
    if precision not in ("bf16", "fp16", "fp32"):
        raise ValueError(f"precision must be bf16, fp16 or fp32, got {precision!r}")
    return {
        "seed": int(get("seed", 0)),
        "precision": precision,
        "micro": int(get("micro_batch_size", 1)),
        "accum": int(get("gradient_accumulation_steps", 1)),
        "seq": int(get("max_seq_len", 1024)),
        "max_steps": int(get("max_steps", 100)),
        "save_every": int(get("save_every", 1000)),
        "lr": float(get("lr", 3e-4)),
        "warmup_steps": int(get("warmup_steps", 0)),
        "weight_decay": float(get("weight_decay", 0.1)),
        "gradient_checkpointing": bool(get("gradient_checkpointing", False)),
        "train_path": get("data.train_path"),
    }


def model_config(get):
    from transformers import AutoConfig, LlamaConfig

    arch = get("model.architecture")
    if isinstance(arch, dict):
        keys = dict(arch)
        model_type = keys.pop("model_type", "llama")
        return AutoConfig.for_model(model_type, **keys)
    path = get("model.config")
    if path:
        path = os.path.expanduser(str(path))
        return AutoConfig.from_pretrained(path, local_files_only=True)
    d_model = int(get("model.d_model", 1024))
    return LlamaConfig(
        hidden_size=d_model,
        num_hidden_layers=int(get("model.n_layers", 8)),
        num_attention_heads=int(get("model.n_heads", max(1, d_model // 64))),
        num_key_value_heads=int(get("model.n_kv_heads", get("model.n_heads", max(1, d_model // 64)))),
        intermediate_size=int(get("model.d_ffn", 4 * d_model)),
        vocab_size=int(get("model.vocab_size", 32000)),
        max_position_embeddings=int(get("max_seq_len", 1024)),
        tie_word_embeddings=bool(get("model.tie_word_embeddings", False)),
    )


def setup_distributed():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return world, rank, device


class Batches:
    """Micro batches of `seq` tokens: random ids, or windows of a uint16 token file."""

    def __init__(self, path, vocab, micro, seq, seed, rank):
        self.vocab, self.micro, self.seq = vocab, micro, seq
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank)
        self.tokens = None
        if path and os.path.isfile(os.path.expanduser(str(path))):
            import numpy as np

            self.tokens = np.memmap(os.path.expanduser(str(path)), dtype=np.uint16, mode="r")

    def next(self, device):
        if self.tokens is None or len(self.tokens) <= self.seq + 1:
            x = torch.randint(0, self.vocab, (self.micro, self.seq + 1), generator=self.gen)
        else:
            starts = torch.randint(0, len(self.tokens) - self.seq - 1, (self.micro,), generator=self.gen)
            x = torch.stack(
                [torch.from_numpy(self.tokens[s : s + self.seq + 1].astype("int64")) for s in starts.tolist()]
            )
            x = x.clamp_(max=self.vocab - 1)
        x = x.to(device, non_blocking=True)
        return x[:, :-1], x[:, 1:]


def lr_at(step, base, warmup, total):
    if step < warmup:
        return base * (step + 1) / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def save(output_dir, step, model, optimizer, rank):
    if rank != 0:
        return
    target = os.path.join(output_dir, f"step_{step}")
    tmp = target + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    torch.save(
        {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
        os.path.join(tmp, "state.pt"),
    )
    if os.path.exists(target):
        shutil.rmtree(target)
    os.replace(tmp, target)
    print(f"saved checkpoint {target}", flush=True)


def main():
    args = parse_args()
    cfg, get = load_config(args.config)
    world, rank, device = setup_distributed()
    settings = read_settings(get)
    seed = settings["seed"]
    torch.manual_seed(seed)

    precision = settings["precision"]
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    micro = settings["micro"]
    accum = settings["accum"]
    seq = settings["seq"]
    max_steps = args.max_steps or settings["max_steps"]
    save_every = settings["save_every"]

    config = model_config(get)
    from transformers import AutoModelForCausalLM

    # fp32 master weights and AdamW state; the forward runs under autocast (mixed precision).
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).to(device)
    if settings["gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    params = sum(p.numel() for p in model.parameters())
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index]) if world > 1 else model
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=settings["lr"],
        weight_decay=settings["weight_decay"],
        fused=device.type == "cuda",
    )
    scaler = torch.amp.GradScaler(enabled=precision == "fp16")

    start = 0
    if args.resume_from:
        state = torch.load(os.path.join(args.resume_from, "state.pt"), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        if rank == 0:
            print(f"resumed from {args.resume_from} at step {start}", flush=True)

    if rank == 0:
        print(
            f"model {config.model_type}: {params / 1e6:.1f}M params, {config.num_hidden_layers} layers, "
            f"hidden {config.hidden_size}; micro {micro} x accum {accum} x {world} GPU(s) x {seq} tokens; "
            f"precision {precision}; checkpointing {bool(get('gradient_checkpointing', False))}",
            flush=True,
        )
    batches = Batches(settings["train_path"], config.vocab_size, micro, seq, seed, rank)
    rates = []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for step in range(start, max_steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, settings["lr"], settings["warmup_steps"], max_steps)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        total_loss = 0.0
        for i in range(accum):
            x, y = batches.next(device)
            # Only the last micro batch of a step synchronises gradients across ranks.
            sync = ddp.no_sync() if (world > 1 and i < accum - 1) else _null()
            with sync:
                with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                    logits = ddp(input_ids=x).logits
                # The loss in fp32: the logits upcast is the "vocabulary x tokens x 4 bytes"
                # tensor the estimator counts.
                loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
                scaler.scale(loss / accum).backward()
            total_loss += loss.item() / accum
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - began
        tokens = micro * accum * seq * world
        rate = tokens / elapsed
        if step > start:  # the first step pays for allocator warm-up and kernel selection
            rates.append(rate)
        peak_alloc = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
        peak_res = torch.cuda.max_memory_reserved(device) / 2**30 if device.type == "cuda" else 0.0
        if rank == 0:
            print(
                f"step {step + 1} loss {total_loss:.4f} tokens/s {rate:.0f} "
                f"peak_allocated_gib {peak_alloc:.2f} peak_reserved_gib {peak_res:.2f}",
                flush=True,
            )
        if (step + 1) % save_every == 0 or step + 1 == max_steps:
            save(args.output_dir, step + 1, model, optimizer, rank)
    if rank == 0:
        summary = {
            "params": params,
            "micro_batch_size": micro,
            "gradient_accumulation_steps": accum,
            "max_seq_len": seq,
            "gpus": world,
            "gradient_checkpointing": bool(get("gradient_checkpointing", False)),
            "precision": precision,
            "peak_allocated_gib": round(peak_alloc, 3),
            "peak_reserved_gib": round(peak_res, 3),
            "tokens_per_s": round(statistics.median(rates), 1) if rates else None,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        }
        print("train-summary " + json.dumps(summary), flush=True)
    if world > 1:
        dist.destroy_process_group()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
