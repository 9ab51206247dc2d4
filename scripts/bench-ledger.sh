#!/usr/bin/env bash
# How reading the ledger scales with the number of runs: makes N recorded runs (copies of one
# real run of `diamonds-seed0` on the simulated trainer — three attempts, two failures, a
# success — each with its own id) and times the commands that read them:
#   status, status --json      every run
#   history RUN                one run (must not depend on N)
#   resume --all               every run, with nothing to resume
# Prints one row per N: the median and max wall time of RUNS tries, in milliseconds, and the
# file opens and reads one `status` makes (strace, when installed).
#
#   scripts/bench-ledger.sh [N...]          (default: 100 1000 10000)
#
# Env: ORCH (binary; default target/release/orch, built unless NO_BUILD=1), RUNS (tries per
# figure, default 5), BENCH_DIR (where the runs are made; default a temporary directory).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-$ROOT/target/release/orch}
if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p orch)
fi
[[ -x $ORCH ]] || { echo "error: $ORCH not built" >&2; exit 1; }
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(100 1000 10000)
TRIES=${RUNS:-5}

WORK=${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/bench-ledger.XXXXXX")}
mkdir -p "$WORK"
[[ -n ${BENCH_DIR:-} ]] || trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# One real run to copy.
export ORCH_SIM_STEP_SECONDS=0.01
ORCH_RUNS_DIR=$WORK/template "$ORCH" -q submit diamonds-seed0 --backend local \
    --preflight=off --set env.ORCH_SIM_PREEMPT_AT_STEP=0 >/dev/null 2>&1 || true
TEMPLATE=$(ls "$WORK/template" | head -n 1)
[[ -n $TEMPLATE ]] || { echo "error: the template run was not made" >&2; exit 1; }

# Copies of the template run under new ids: events.jsonl only (the record), ids rewritten.
make_runs() {
    local dir=$1 n=$2
    python3 - "$WORK/template/$TEMPLATE" "$dir" "$n" "$TEMPLATE" <<'EOF'
import os, sys
src, dst, n, old = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
events = open(os.path.join(src, "events.jsonl")).read()
base = old.rsplit("-", 3)[0]
os.makedirs(dst, exist_ok=True)
for i in range(n):
    new = f"{base}-2026{i // 86400 % 12 + 1:02d}01-{i % 86400 // 3600:02d}{i % 3600 // 60:02d}{i % 60:02d}-{i % 65536:04x}"
    d = os.path.join(dst, new)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        f.write(events.replace(old, new))
EOF
}

# Median and max of TRIES timings of a command, in ms.
time_ms() {
    python3 - "$TRIES" "$@" <<'EOF'
import statistics, subprocess, sys, time
tries, cmd = int(sys.argv[1]), sys.argv[2:]
ts = []
for _ in range(tries):
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    ts.append((time.perf_counter() - t) * 1000)
print(f"{statistics.median(ts):.1f}/{max(ts):.1f}")
EOF
}

syscalls() {
    if command -v strace >/dev/null; then
        strace -f -c -e trace=openat,read -o "$WORK/strace.txt" "$@" >/dev/null 2>&1 || true
        awk '$NF == "openat" {o=$4} $NF == "read" {r=$4} END {printf "%s/%s", o+0, r+0}' "$WORK/strace.txt"
    else
        printf 'n/a'
    fi
}

echo "orch $("$ORCH" --version | awk '{print $2}') on $(nproc) CPUs; median/max ms of $TRIES tries"
printf '%7s  %14s  %14s  %14s  %14s  %18s\n' runs status "status --json" "history RUN" "resume --all" "status opens/reads"
for n in "${SIZES[@]}"; do
    dir=$WORK/runs-$n
    [[ -d $dir ]] || make_runs "$dir" "$n"
    export ORCH_RUNS_DIR=$dir
    # The first look writes any missing summaries; the figures are for the looks after it.
    "$ORCH" status >/dev/null
    one=$(ls "$dir" | tail -n 1)
    printf '%7s  %14s  %14s  %14s  %14s  %18s\n' "$n" \
        "$(time_ms "$ORCH" status)" \
        "$(time_ms "$ORCH" status --json)" \
        "$(time_ms "$ORCH" history "$one")" \
        "$(time_ms "$ORCH" resume --all)" \
        "$(syscalls "$ORCH" status)"
done
