#!/usr/bin/env bash
# Climbing back up, on the simulated trainer: a Qwen2.5-3B-shaped model pretrained with torchrun
# on 4 × H100 (micro batch 16 × 2048 tokens as written, which no card holds), where the
# simulated trainer needs K (default 0.7) of what orch estimates — the estimate is too
# pessimistic, as it is on real H100s for a config that overstates the model
# (docs/PLANNER.md "Climbing"). Three ways orch knows the shape:
#   known    the experiment's `architecture:` (config.json keys of Qwen2.5-3B)
#   partly   only the Llama-style keys (model.d_model, n_layers, n_heads, d_ffn, vocab_size:
#            no grouped-query attention, no tied embeddings)
#   unknown  ORCH_ARCHITECTURE=unknown (a stand-in shape of the model's size; no preflight)
# each run twice on one runs directory (first run, second run: the evidence store between
# them), before (`--no-climb`: the planner as it was, never moving up — this build, since the
# simulator on main has no ORCH_SIM_MEMORY_SCALE) and after (climbing on, the default on the
# local backend).
#
# Columns: attempts; memory failures; climbs; "kept": the best fitting configuration's
# predicted throughput over the run's, weighted by the steps each attempt trained (so 90 %
# means the run took 1/0.9 of the best configuration's training time, restarts not counted);
# "95 % at": the fraction of the run's steps trained before it ran at ≥ 95 % of the best
# ("-" if never); "wall": the run's wall time in seconds, restarts included; "time": the wall
# time with each step timed by the throughput model (the simulated step takes the same time in
# every configuration; start-ups, restarts and polls stay as measured). The best fitting
# configuration is what preflight would choose on a card of capacity / K (the truth), by the
# same throughput model.
#
#   scripts/bench-climb.sh
#
# Env: ORCH (binary; default target/release/orch, built unless NO_BUILD=1), K (the truth over
#      the estimate, default 0.7), STEPS (the run's length, default 100),
#      ORCH_SIM_STEP_SECONDS (default 0.25), SETTINGS (default "known partly unknown").
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-$ROOT/target/release/orch}
# The work happens in its own directory: a relative ORCH is taken from where the script started.
[[ $ORCH == /* || $ORCH != */* ]] || ORCH=$PWD/$ORCH
if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p orch)
fi
[[ -x $ORCH ]] || { echo "error: $ORCH not built" >&2; exit 1; }
K=${K:-0.7}
STEPS=${STEPS:-100}
export ORCH_SIM_STEP_SECONDS=${ORCH_SIM_STEP_SECONDS:-0.25}
SETTINGS=${SETTINGS:-known partly unknown}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-climb.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
mkdir -p experiments profiles
common="template: torchrun-yaml
profile: h100-80g
ladder: torchrun-yaml
model: Qwen/Qwen2.5-3B
train_files: data/train.bin
seed: 0"
run_keys="  micro_batch_size: 16
  gradient_accumulation_steps: 2
  max_seq_len: 2048
  gradient_checkpointing: false
  precision: bf16
  max_steps: $STEPS
  save_every: 1"
# Qwen2.5-3B's config.json values, as models/qwen2.5.yaml keeps them.
cat >experiments/known.yaml <<EOF
description: Qwen2.5-3B shape known
$common
architecture: {hidden_size: 2048, num_hidden_layers: 36, num_attention_heads: 16, num_key_value_heads: 2, intermediate_size: 11008, vocab_size: 151936, tie_word_embeddings: true}
overrides:
$run_keys
EOF
cat >experiments/partly.yaml <<EOF
description: Qwen2.5-3B's Llama-style keys only
$common
overrides:
  model.d_model: 2048
  model.n_layers: 36
  model.n_heads: 16
  model.d_ffn: 11008
  model.vocab_size: 151936
$run_keys
EOF
cp experiments/known.yaml experiments/unknown.yaml
sed -i 's/^description: .*/description: Qwen2.5-3B, architecture hidden from orch/' experiments/unknown.yaml
# The truth: the card as the estimate would need it to hold what the trainer holds.
sed "s/^  memory_gib: 79.18 .*/  memory_gib: $(python3 -c "print(round(79.18 / $K, 2))")/" \
    "$ROOT/profiles/h100-80g.yaml" >profiles/h100-truth.yaml

printf '%-8s %-7s %-7s %8s %6s %6s %6s %8s %6s %6s\n' shape mode run attempts failed climbs kept "95 % at" wall time
rows=$WORK/rows.tsv
: >"$rows"
for setting in $SETTINGS; do
    arch_env=()
    [[ $setting == unknown ]] && arch_env=(ORCH_ARCHITECTURE=unknown)
    for mode in before after; do
        flag=--climb
        [[ $mode == before ]] && flag=--no-climb
        runs=$WORK/runs-$setting-$mode
        for nth in first second; do
            start=$(date +%s.%N)
            env "${arch_env[@]}" ORCH_RUNS_DIR="$runs" ORCH_SIM_MEMORY_SCALE="$K" \
                "$ORCH" submit "$setting" --backend local --max-attempts 8 $flag \
                --set env.ORCH_SIM_STEPS="$STEPS" --set env.ORCH_SIM_PREEMPT_AT_STEP=0 --json \
                >"$WORK/run.json" 2>"$WORK/err" || true
            end=$(date +%s.%N)
            ORCH="$ORCH" WORK="$WORK" python3 - "$setting" "$mode" "$nth" "$start" "$end" "$rows" <<'PY'
import json, os, subprocess, sys
setting, mode, nth, start, end, rows = sys.argv[1:]
orch, work = os.environ["ORCH"], os.environ["WORK"]
try:
    run = json.load(open(os.path.join(work, "run.json")))
except Exception:
    print(f"{setting:<8} {mode:<7} {nth:<7} refused: {open(os.path.join(work, 'err')).read()[:200]}")
    sys.exit(0)
env = {k: v for k, v in os.environ.items() if k not in ("ORCH_ARCHITECTURE", "ORCH_RUNS_DIR")}
# An empty runs directory: the truth's figures, not calibrated by the bench's own runs.
env["ORCH_RUNS_DIR"] = os.path.join(work, "no-runs")

# What the simulated trainer runs: the real shape for "unknown" (orch only does not see it).
truth_of = {"unknown": "known"}.get(setting, setting)

def estimate(*extra):
    out = subprocess.run([orch, "estimate", truth_of, "--profile", "h100-truth", "--json", *extra],
                         capture_output=True, text=True, env=env, cwd=work)
    return json.loads(out.stdout) if out.returncode == 0 else {}

truth = estimate()
pre = truth.get("best") or truth.get("preflight")
best = pre["throughput"] if pre else truth.get("throughput")
atts = run["attempts"]
failed = sum(1 for a in atts if a["outcome"] in ("gpu_oom", "kv_cache", "host_oom"))
run_dir = os.path.dirname(run["checkpoint_dir"])
events = [json.loads(l) for l in open(os.path.join(run_dir, "events.jsonl")) if l.strip()]
climbs = sum(1 for e in events if str(e.get("decision", "")).startswith("climb "))
done, weighted, at95, trained = 0, 0.0, None, 0
for a in atts:
    steps = (a.get("measured") or {}).get("steps") or 0
    new = max(0, steps - done) if a["outcome"] in ("succeeded", "cancelled") else 0
    if new == 0:
        continue
    # The attempt's plan on the truth's card (orch estimate refuses a plan of another profile).
    text = open(os.path.join(run_dir, "attempts", str(a["attempt"]), "plan.yaml")).read()
    plan = os.path.join(work, "plan-on-truth.yaml")
    with open(plan, "w") as f:
        f.write(text.replace("\nprofile: h100-80g\n", "\nprofile: h100-truth\n")
                .replace(f"experiment: {setting}\n", f"experiment: {truth_of}\n"))
    thr = estimate("--plan-file", plan).get("throughput")
    if not thr or not best:
        continue
    if at95 is None and thr >= 0.95 * best:
        at95 = trained
    weighted += new / thr
    trained += new
    done = max(done, steps)
kept = (trained / best) / weighted if weighted and best else None
ok = run["state"] == "succeeded"
wall = float(end) - float(start)
# The simulated trainer's step takes T whatever the configuration; what is not steps in its
# wall time (start-ups, restarts, polls) is measured, the steps are timed by the throughput
# model: the best configuration's step is T, another's T × best / its throughput.
T = float(os.environ["ORCH_SIM_STEP_SECONDS"])
model_time = wall - trained * T + (T * best * weighted if weighted and best else 0.0)
k = f"{100 * kept:5.0f}%" if kept and ok else "     -"
a95 = f"{at95 / trained:7.0%}" if at95 is not None and trained else "      -"
print(f"{setting:<8} {mode:<7} {nth:<7} {len(atts):8d} {failed:6d} {climbs:6d} {k:>6} {a95:>8} {wall:6.1f} {model_time:6.1f}"
      + ("" if ok else f"  ({run['state']})"))
with open(rows, "a") as f:
    f.write("\t".join(map(str, [setting, mode, nth, len(atts), failed, climbs,
                                "" if kept is None else kept, "" if at95 is None else at95 / trained, wall, model_time])) + "\n")
PY
        done
    done
done
python3 - "$rows" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {(r[0], r[1], r[2]): r for r in rows}
print()
print("after vs before (time with steps timed by the throughput model):")
for (setting, mode, nth), r in sorted(by.items()):
    if mode != "after" or (setting, "before", nth) not in by:
        continue
    b = by[(setting, "before", nth)]
    print(f"  {setting:<8} {nth:<7} {float(b[9]):6.1f} s → {float(r[9]):6.1f} s ({float(r[9]) - float(b[9]):+.1f} s)")
PY
