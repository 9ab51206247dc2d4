#!/usr/bin/env bash
# Measure examples/torchrun/train.py's tokens/s and peak memory on one GPU over a grid of
# micro batch × gradient checkpointing at a fixed global batch (16 sequences of 2048 tokens per
# optimizer step), for Qwen2.5 shapes (config.json values from models/qwen2.5.yaml). One JSON
# line per configuration (train.py's own `train-summary`, or the OOM) to $OUT/grid.jsonl.
#   OUT=dir tools/throughput-grid/run.sh
set -uo pipefail
OUT=${OUT:-.}
STEPS=${STEPS:-7}
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/device.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' >>"$OUT/device.txt"
declare -A SHAPE=(
  [qwen2.5-0.5b]='{hidden_size: 896, num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, intermediate_size: 4864, vocab_size: 151936, tie_word_embeddings: true, model_type: qwen2}'
  [qwen2.5-1.5b]='{hidden_size: 1536, num_hidden_layers: 28, num_attention_heads: 12, num_key_value_heads: 2, intermediate_size: 8960, vocab_size: 151936, tie_word_embeddings: true, model_type: qwen2}'
)
for model in qwen2.5-0.5b qwen2.5-1.5b; do
  micros="1 2 4 8 16"
  [[ $model == qwen2.5-1.5b ]] && micros="1 4 16"
  for gc in false true; do
    for micro in $micros; do
      cfg=/dev/shm/grid.yaml
      cat >"$cfg" <<YAML
model:
  architecture: ${SHAPE[$model]}
micro_batch_size: $micro
gradient_accumulation_steps: $((16 / micro))
max_seq_len: 2048
gradient_checkpointing: $gc
precision: bf16
max_steps: $STEPS
save_every: 100000
warmup_steps: 1
YAML
      rm -rf /dev/shm/grid-out
      start=$(date +%s.%N)
      log=$(timeout 120 python3 examples/torchrun/train.py --config "$cfg" --output_dir /dev/shm/grid-out 2>&1)
      rc=$?
      end=$(date +%s.%N)
      summary=$(grep '^train-summary ' <<<"$log" | tail -1 | cut -d' ' -f2-)
      oom=$(grep -c 'OutOfMemoryError' <<<"$log")
      python3 - "$model" "$gc" "$micro" "$rc" "$oom" "$start" "$end" "${summary:-null}" >>"$OUT/grid.jsonl" <<'PY'
import json, sys
model, gc, micro, rc, oom, start, end, summary = sys.argv[1:]
print(json.dumps({"model": model, "gradient_checkpointing": gc == "true", "micro_batch_size": int(micro),
                  "exit": int(rc), "oom": int(oom) > 0, "wall_s": round(float(end) - float(start), 1),
                  "summary": json.loads(summary)}))
PY
      tail -1 "$OUT/grid.jsonl"
      grep -m3 -i 'error' <<<"$log" | head -3
    done
  done
done
rm -rf /dev/shm/grid-out /dev/shm/grid.yaml
