#!/usr/bin/env bash
# One orch watching N runs on the local backend (a sweep of diamonds on the simulated trainer,
# each run failing once and succeeding on its second attempt): its peak RSS and its read
# syscalls (/proc/PID/io `syscr`, all of orch's threads, not its jobs), in total, per watcher
# tick and per live attempt per tick.
#
#   scripts/bench-watch.sh [N...]         (default: 10 100)
#
# Env: ORCH (binary; default target/release/orch, built unless NO_BUILD=1).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-$ROOT/target/release/orch}
if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p orch)
fi
COUNTS=("$@")
[[ ${#COUNTS[@]} -gt 0 ]] || COUNTS=(10 100)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-watch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

printf '%6s %9s %6s %12s %12s %14s %22s\n' runs attempts ticks "peak RSS MB" "read calls" "reads/tick" "reads/live attempt/tick"
for n in "${COUNTS[@]}"; do
    proj=$WORK/p$n
    mkdir -p "$proj/experiments"
    sed -e "s/^  values: .*/  values: [$(seq -s, 0 $((n - 1)))]/" "$ROOT/experiments/diamonds.yaml" \
        >"$proj/experiments/bench.yaml"
    (cd "$proj" && ORCH_SIM_STEP_SECONDS=0.05 ORCH_SIM_STEPS=${STEPS:-200} ORCH_TRACE_TICKS="$WORK/ticks-$n" \
        python3 - "$ORCH" "$WORK/stats-$n" <<'EOF'
import subprocess, sys, time
orch, out = sys.argv[1], sys.argv[2]
p = subprocess.Popen([orch, "-q", "submit", "bench", "--backend", "local", "--preflight=off",
                      "--set", "env.ORCH_SIM_PREEMPT_AT_STEP=0", "--max-attempts", "3"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
hwm, syscr = 0, 0
while p.poll() is None:
    try:
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith("VmHWM:"):
                hwm = max(hwm, int(line.split()[1]))
        for line in open(f"/proc/{p.pid}/io"):
            if line.startswith("syscr:"):
                syscr = int(line.split()[1])
    except OSError:
        pass
    time.sleep(0.02)
open(out, "w").write(f"{hwm} {syscr}\n")
EOF
    )
    read -r hwm syscr <"$WORK/stats-$n"
    python3 - "$n" "$hwm" "$syscr" "$WORK/ticks-$n" "$proj/.orch/runs" <<'EOF'
import json, os, sys
n, hwm, syscr, ticks_file, runs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
ticks = [l.split() for l in open(ticks_file)]
live = sum(int(t[2]) for t in ticks)
attempts = sum(len(os.listdir(os.path.join(runs, r, "attempts"))) for r in os.listdir(runs))
print("%6d %9d %6d %12.1f %12d %14.0f %22.1f" % (n, attempts, len(ticks), hwm / 1024, syscr,
      syscr / max(len(ticks), 1), syscr / max(live, 1)))
EOF
done
echo "(the last read of /proc/PID/io is up to 20 ms before orch exits)"
