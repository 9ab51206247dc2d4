#!/usr/bin/env bash
# What `orch report` costs: page size and generation time for a run of 1 attempt, a run of 5
# attempts and a sweep of 100 members, made from real runs of `diamonds-seed0` on the
# simulated trainer:
#   1 attempt     the README demo with preflight on and no preemption (preflight's fit, success)
#   5 attempts    the demo with preflight off (OOM, step, preemption, success) with two more
#                 preemptions and resumes spliced in (its attempt 2 repeated, renumbered)
#   100 members   `diamonds-seed0` … `diamonds-seed99`: every tenth the 3-attempt run, the
#                 others the 1-attempt run (so the sweep table has outliers to flag)
# Prints one row per case: runs, attempts, page KiB (and gzipped), median/max ms of RUNS tries.
#
#   scripts/bench-report.sh
#
# Env: ORCH (binary; default target/release/orch, built unless NO_BUILD=1), RUNS (tries per
# figure, default 5), BENCH_DIR (where the runs are made; default a temporary directory).
# Needs python3.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-$ROOT/target/release/orch}
if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p orch)
fi
[[ -x $ORCH ]] || { echo "error: $ORCH not built" >&2; exit 1; }
TRIES=${RUNS:-5}
WORK=${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/bench-report.XXXXXX")}
cd "$WORK"
export ORCH_SIM_STEP_SECONDS=0.01

# The two real runs everything is made from.
if [[ ! -d $WORK/one ]]; then
    ORCH_RUNS_DIR=$WORK/one "$ORCH" -q submit diamonds-seed0 --backend local \
        --set env.ORCH_SIM_PREEMPT_AT_STEP=0 >/dev/null 2>&1 || true
    ORCH_RUNS_DIR=$WORK/three "$ORCH" -q submit diamonds-seed0 --backend local \
        --preflight=off >/dev/null 2>&1 || true
fi
ONE=$WORK/one/$(ls "$WORK/one" | head -n 1)
THREE=$WORK/three/$(ls "$WORK/three" | head -n 1)
[[ -f $ONE/events.jsonl && -f $THREE/events.jsonl ]] || { echo "error: the template runs were not made" >&2; exit 1; }

python3 - "$ONE" "$THREE" "$WORK" <<'PY'
import json, os, sys
one, three, work = sys.argv[1], sys.argv[2], sys.argv[3]

def events(run):
    return [json.loads(l) for l in open(os.path.join(run, "events.jsonl")) if l.strip()]

def write(dst, run_id, evs, experiment=None):
    d = os.path.join(dst, run_id)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        for e in evs:
            e = dict(e)
            if e["event"] == "created":
                e["run"] = run_id
                if experiment:
                    e["experiment"] = experiment
            f.write(json.dumps(e) + "\n")

# Five attempts: 1 (OOM), 2 (preempted), 2 again as 3 and 4 (preempted, resumed), 3 as 5.
three_ev = events(three)
by_attempt = {}
for e in three_ev:
    by_attempt.setdefault(e.get("attempt"), []).append(e)
head = [e for e in three_ev if e["event"] == "created"]
tail = [e for e in three_ev if e["event"] == "ended"]
resumed = [e for e in by_attempt[3] if e["event"] == "rendered"][0]
def renumber(group, n, like_resume=False):
    out = []
    for e in group:
        e = dict(e, attempt=n)
        if like_resume and e["event"] == "rendered":
            e["resume"], e["why"] = True, resumed["why"]
        out.append(e)
    return out
five = head + by_attempt[1] + by_attempt[2] + renumber(by_attempt[2], 3, True) \
    + renumber(by_attempt[2], 4, True) + renumber(by_attempt[3], 5) + tail
write(os.path.join(work, "runs-5"), "diamonds-seed0-20261101-000000-0005", five)
write(os.path.join(work, "runs-1"), "diamonds-seed0-20261101-000000-0001", events(one))
for i in range(100):
    src = three_ev if i % 10 == 0 else events(one)
    write(os.path.join(work, "runs-100"), f"diamonds-seed{i}-20261101-000000-{i:04x}", src,
          experiment=f"diamonds-seed{i}")
PY

# Median and max of TRIES timings of a command, in ms.
time_ms() {
    python3 - "$TRIES" "$@" <<'PY'
import statistics, subprocess, sys, time
tries, cmd = int(sys.argv[1]), sys.argv[2:]
ts = []
for _ in range(tries):
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    ts.append((time.perf_counter() - t) * 1000)
print(f"{statistics.median(ts):.1f}/{max(ts):.1f}")
PY
}

echo "orch $("$ORCH" --version | awk '{print $2}') on $(nproc) CPUs; median/max ms of $TRIES tries"
printf '%-12s %5s %9s %10s %12s %14s\n' case runs attempts "page KiB" "gzipped KiB" "ms (med/max)"
for case in 1 5 100; do
    export ORCH_RUNS_DIR=$WORK/runs-$case
    "$ORCH" status >/dev/null 2>&1    # the index, written once, as any earlier command would
    page=$WORK/report-$case.html
    ms=$(time_ms "$ORCH" report --out "$page")
    runs=$(ls "$ORCH_RUNS_DIR" | wc -l)
    attempts=$(cat "$ORCH_RUNS_DIR"/*/events.jsonl | grep -cE '"event": ?"rendered"' || true)
    kib=$(python3 -c "import os,sys; print(f'{os.path.getsize(sys.argv[1])/1024:.1f}')" "$page")
    gz=$(python3 -c "import gzip,sys; print(f'{len(gzip.compress(open(sys.argv[1],\"rb\").read()))/1024:.1f}')" "$page")
    label=$([[ $case == 100 ]] && echo "100 members" || echo "$case attempt$([[ $case == 1 ]] || echo s)")
    printf '%-12s %5s %9s %10s %12s %14s\n' "$label" "$runs" "$attempts" "$kib" "$gz" "$ms"
done
echo "pages: $WORK/report-{1,5,100}.html"
