#!/usr/bin/env bash
# The `diamonds` sweep (5 members of 4-GPU jobs) on one machine with 8 A40s, as orch shares
# them: which job had which cards, from when to when, from `orch history RUN --json`.
# There is no GPU here: the cards are orch's stand-in nvidia-smi
# (crates/orch/tests/fixtures/nvidia-smi) and the jobs run the simulated trainer, which holds
# a lock per card it is given (a card given twice would fail with a CUDA OOM).
#
#   scripts/timeline-one-machine.sh [orch submit options...]   (e.g. --preflight=off)
#
# Env: ORCH (binary; default target/release/orch, built unless NO_BUILD=1),
#      ORCH_SIM_STEP_SECONDS (default 0.2), CARDS (default 8).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-$ROOT/target/release/orch}
if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p orch)
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/timeline.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/bin" "$WORK/project"
cp "$ROOT/crates/orch/tests/fixtures/nvidia-smi" "$WORK/bin/"
{
    echo "index,uuid,name,memory.total"
    for ((i = 0; i < ${CARDS:-8}; i++)); do echo "$i,GPU-5eed$i,NVIDIA A40,46068"; done
} >"$WORK/bin/gpus.csv"

cd "$WORK/project"
PATH="$WORK/bin:$PATH" ORCH_SIM_STEP_SECONDS=${ORCH_SIM_STEP_SECONDS:-0.2} ORCH_SIM_GPU_LOCKS="$WORK/locks" \
    "$ORCH" submit diamonds --backend local --simulate --json "$@" >"$WORK/runs.jsonl"
for run in $(jq -r .run "$WORK/runs.jsonl"); do
    "$ORCH" history "$run" --json
done | jq -rs '
  (map(.attempts[].started_at) | min) as $t0
  | def secs: sub("\\.(?<ms>[0-9]+)Z$"; "Z") as $s | ($s | fromdateiso8601) + ((capture("\\.(?<ms>[0-9]+)Z$").ms // "0") | tonumber / 1000);
  ["run", "attempt", "GPUs", "start s", "end s", "outcome"],
  (map(.experiment as $e | .attempts[] | {e: $e, a: .}) | sort_by(.a.started_at)[]
   | [.e, .a.attempt, (.a.devices | map(tostring) | join(",")),
      ((.a.started_at | secs) - ($t0 | secs) | . * 10 | round / 10),
      ((.a.ended_at | secs) - ($t0 | secs) | . * 10 | round / 10),
      .a.outcome])
  | @tsv' | column -t -s $'\t'
