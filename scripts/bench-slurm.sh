#!/usr/bin/env bash
# Scheduler calls per watcher tick with 1, 10 and 50 runs on the test cluster, and the time from
# a job's failure to the sbatch of its next attempt. Needs the test cluster (scripts/slurm-up.sh).
#
# Between polls the watcher reads the live jobs' exit files once a second, so a failure is
# answered within about a second at any poll interval, and the controller is asked once per
# interval (the squeue and sacct+scontrol columns count every call of the whole run).
#
#   scripts/bench-slurm.sh [RUNS...]        default: 1 10 50 200
#   POLL=2 scripts/bench-slurm.sh 10         poll interval in seconds (default: orch's, 30 s)
set -euo pipefail
cd "$(dirname "$0")/.."
POLL="${POLL:-}"
COUNTS=("$@")
[ ${#COUNTS[@]} -gt 0 ] || COUNTS=(1 10 50 200)
scontrol ping | grep -q "is UP" || { echo "the test cluster is not up: run scripts/slurm-up.sh" >&2; exit 1; }
cargo build --release --quiet
ORCH="$PWD/target/release/orch"
work=$(mktemp -d /tmp/orch-bench-slurm.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Each run: Qwen2.5-1.5B on one simulated H100 fails once (gpu_oom) and succeeds after one step
# (the demo's simulated preemption is off: a job killed by a signal waits for the next poll);
# one GPU per job lets the test cluster's 8 H100 GRES run 8 jobs at a time.

# Wrappers that log every Slurm call with a timestamp.
mkdir -p "$work/bin"
for tool in sbatch squeue sacct scontrol scancel; do
    real=$(command -v "$tool")
    cat > "$work/bin/$tool" <<WRAP
#!/bin/sh
printf '%s %s %s\n' "\$(date +%s.%N)" "$tool" "\$*" >> "$work/calls.log"
exec "$real" "\$@"
WRAP
    chmod +x "$work/bin/$tool"
done

printf '%-6s %-9s %-7s %-8s %-12s %-20s %-22s %s\n' runs attempts ticks squeue sacct+sctrl "max squeue/tick" "max sacct+sctrl/tick" "failure→next sbatch (s): median / max"
for n in "${COUNTS[@]}"; do
    proj="$work/p$n"
    mkdir -p "$proj/experiments"
    values=$(seq -s, 0 $((n - 1)))
    sed -e "s/^  values: .*/  values: [$values]/" experiments/diamonds.yaml > "$proj/experiments/bench.yaml"
    : > "$work/calls.log"
    : > "$work/ticks.log"
    (cd "$proj" && PATH="$work/bin:$PATH" ORCH_SIMULATE=1 ORCH_SIM_STEP_SECONDS=0.2 ORCH_SIM_STEPS=3 \
        ORCH_TRACE_TICKS="$work/ticks.log" "$ORCH" submit bench --backend slurm ${POLL:+--poll-interval "$POLL"} \
        --preflight=off --set env.ORCH_SIM_PREEMPT_AT_STEP=0 --set model=Qwen/Qwen2.5-1.5B-Instruct --set resources.gpus=1 --set resources.cpus_per_task=1 \
        --quiet --json > "$work/out.json")
    python3 - "$work" "$n" "$proj" <<'PY'
import json, sys, os, statistics, bisect, glob
work, n, proj = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ticks = [float(l.split()[0]) for l in open(f"{work}/ticks.log")]
calls = [l.split(" ", 2) for l in open(f"{work}/calls.log")]
def per_tick(pred):
    counts = [0] * len(ticks)
    for t, tool, args in calls:
        if pred(tool, args):
            i = bisect.bisect_right(ticks, float(t)) - 1
            if i >= 0: counts[i] += 1
    return counts
sq = per_tick(lambda tool, a: tool == "squeue" and a.startswith("-h -t all -j"))
lk = per_tick(lambda tool, a: tool == "sacct" or (tool == "scontrol" and a.startswith("show job")))
runs = [json.loads(l) for l in open(f"{work}/out.json")]
attempts = sum(len(r["attempts"]) for r in runs)
sbatch_at = {}
for t, tool, args in calls:
    if tool == "sbatch":
        name = args.split("--job-name ")[1].split()[0]
        sbatch_at[name] = float(t)
lat = []
for r in runs:
    for a in r["attempts"][1:]:
        prev = os.path.join(proj, ".orch/runs", r["run"], "attempts", str(a["attempt"] - 1), "exit_code")
        name = f"orch-{r['run']}-a{a['attempt']}"
        if os.path.exists(prev) and name in sbatch_at:
            lat.append(sbatch_at[name] - os.path.getmtime(prev))
med = f"{statistics.median(lat):.2f} / {max(lat):.2f}" if lat else "-"
print(f"{n:<6} {attempts:<9} {len(ticks):<7} {sum(sq):<8} {sum(lk):<12} {max(sq):<20} {max(lk):<22} {med}")
PY
done
echo "(poll interval ${POLL:-30 (the default)} s; latency = next attempt's sbatch minus the failed job's exit_code marker mtime)"
