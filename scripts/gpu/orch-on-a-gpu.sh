#!/usr/bin/env bash
# orch itself driving examples/torchrun/train.py on a real GPU: real OOMs, real recovery.
#
# Not a test: a measurement run by hand on a GPU machine (see
# crates/orch-core/data/gpu-runs/README.md, where its output is kept). From the repository's
# root, with a release build of orch:
#
#   ORCH=target/release/orch OUT=/tmp/out scripts/gpu/orch-on-a-gpu.sh
#
# It writes a project directory with experiments of Qwen2.5 shapes on one GPU and runs, each
# on the local backend with the real trainer (--no-simulate):
#   1. recover  Qwen2.5-0.5B, micro 16 x 2048 tokens without checkpointing, preflight off: torch
#               cannot fit it; orch classifies torch's OutOfMemoryError, plans and resubmits.
#   2. preflight  the same experiment with preflight on: orch changes it before submitting.
#   3. climb    Qwen2.5-0.5B from micro 1 x accumulation 16 (a quarter of the card), climbing on:
#               orch reads the measured peaks per step. The ladder only lowers memory from the
#               plan as written, so this run has nothing to climb to (what the 2026-11-27 run
#               showed); a climb needs a run that stepped down first.
#   4. preflight-1.5b  Qwen2.5-1.5B, micro 16 without checkpointing, preflight on.
# Each run's stdout, `orch history --json` and its record (attempt logs, rendered files; not the
# checkpoints) are packed in $OUT/<name>.tgz; `orch estimate --json` of each experiment is in
# $OUT/estimate-<experiment>.json. MODE=--simulate tries the script without a GPU.
set -uo pipefail

ORCH=${ORCH:-target/release/orch}
ORCH=$(realpath "$ORCH")
OUT=${OUT:?set OUT to a directory for the results}
ROOT=$(pwd)
RUNS=${RUNS:-/tmp/orch-gpu-runs}
PROJECT=$(mktemp -d /tmp/orch-gpu-project.XXXXXX)
mkdir -p "$OUT" "$RUNS" "$PROJECT/experiments"

{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "total_memory_gib", round(torch.cuda.get_device_properties(0).total_memory / 2**30, 4))'
    "$ORCH" --version
    git -C "$ROOT" rev-parse HEAD 2>/dev/null || true
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# torchrun comes with torch; where only `python3 -m torch.distributed.run` is there, say so.
if ! command -v torchrun >/dev/null; then
    mkdir -p "$PROJECT/bin"
    printf '#!/bin/sh\nexec python3 -m torch.distributed.run "$@"\n' >"$PROJECT/bin/torchrun"
    chmod +x "$PROJECT/bin/torchrun"
    export PATH="$PROJECT/bin:$PATH"
    echo "torchrun: not on PATH, using python3 -m torch.distributed.run" >>"$OUT/env.txt"
fi

qwen05='{model_type: qwen2, hidden_size: 896, num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, intermediate_size: 4864, vocab_size: 151936, tie_word_embeddings: true}'
qwen15='{model_type: qwen2, hidden_size: 1536, num_hidden_layers: 28, num_attention_heads: 12, num_key_value_heads: 2, intermediate_size: 8960, vocab_size: 151936, tie_word_embeddings: true}'

# experiment NAME MODEL ARCH MICRO ACCUM MAX_STEPS SAVE_EVERY
experiment() {
    cat >"$PROJECT/experiments/$1.yaml" <<EOF
description: $2's shape under examples/torchrun/train.py on one GPU, micro $4 x accumulation $5 x 2048 tokens, no checkpointing
template: torchrun-yaml
profile: h100-80g
ladder: torchrun-yaml
model: $2
seed: 0
architecture: $3
resources:
  gpus: 1
vars:
  entry: $ROOT/examples/torchrun/train.py
overrides:
  micro_batch_size: $4
  gradient_accumulation_steps: $5
  max_seq_len: 2048
  gradient_checkpointing: false
  precision: bf16
  max_steps: $6
  save_every: $7
EOF
}
experiment qwen05b-micro16 Qwen/Qwen2.5-0.5B "$qwen05" 16 1 8 8
experiment qwen05b-micro1 Qwen/Qwen2.5-0.5B "$qwen05" 1 16 60 10
experiment qwen15b-micro16 Qwen/Qwen2.5-1.5B "$qwen15" 16 1 8 8
for exp in qwen05b-micro16 qwen05b-micro1 qwen15b-micro16; do
    (cd "$PROJECT" && "$ORCH" estimate "$exp" --json) >"$OUT/estimate-$exp.json" 2>&1
done

# run NAME EXPERIMENT LIMIT_S ORCH_ARGS...
run() {
    local name=$1 exp=$2 limit=$3
    shift 3
    mkdir -p "$OUT/$name"
    echo "=== $name: orch submit $exp $*"
    local began=$SECONDS
    (cd "$PROJECT" && timeout "$limit" "$ORCH" submit "$exp" --backend local "${MODE:---no-simulate}" \
        --runs-dir "$RUNS/$name" "$@") >"$OUT/$name/stdout.txt" 2>&1
    echo "rc $? in $((SECONDS - began)) s" >>"$OUT/$name/stdout.txt"
    cat "$OUT/$name/stdout.txt"
    for dir in "$RUNS/$name"/*/; do
        (cd "$PROJECT" && "$ORCH" history --runs-dir "$RUNS/$name" --json "$(basename "$dir")") \
            >"$OUT/$name/history-$(basename "$dir").json" 2>&1
    done
    # The record without checkpoints (train.py keeps every one; a 0.5B model's is 6 GB), packed
    # in one file per run; then the checkpoints go, so the next run has the disk.
    (cd "$RUNS/$name" && find . -type f ! -path '*/step_*' ! -name '*.pt' -size -4M \
        -exec cp --parents {} "$OUT/$name/" \;)
    tar -C "$OUT" -czf "$OUT/$name.tgz" "$name" && rm -rf "${OUT:?}/$name" "${RUNS:?}/$name"
}

run recover qwen05b-micro16 120 --preflight=off --no-climb --max-attempts 4
run climb qwen05b-micro1 150 --preflight=on --climb --max-attempts 4
run preflight qwen05b-micro16 60 --preflight=on --no-climb --max-attempts 3
run preflight-1.5b qwen15b-micro16 60 --preflight=on --no-climb --max-attempts 3
rm -rf "$RUNS" "$PROJECT"
