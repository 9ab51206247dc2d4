#!/usr/bin/env bash
# The attack of issue 22, in bounded time, on the local backend with the simulated trainer:
# orch killed at every crash point and at random moments of a sweep and of its resumes,
# event logs corrupted (a garbled line, a torn tail), cancels racing the driver (right after a
# failure is decided, and at random), resumes racing each other, and (as root) a full disk
# under a sweep. Then one last `orch resume --all` and an audit of every run directory,
# printed as one table:
#
#   kills     orch processes killed (SIGKILL) by the attack
#   runs      run directories            attempts  attempts rendered
#   lost      jobs that ran (a pid file in an attempt directory) that no event records
#   doubled   attempts with more than one job id recorded
#   late      runs with a job submitted after their cancel_requested
#   stuck     runs still `running` after the last resume
#   orphaned  job processes still alive at the end
#   panics    "panicked at" in orch's output   hangs  orch commands stopped by their timeout
#
# Usage: scripts/chaos.sh [SECONDS]   (default 60: the random part; the rest takes ~1 min)
# ORCH=path/to/orch picks the binary (default target/debug/orch), CHAOS_SEED the randomness,
# CHAOS_KEEP=1 keeps the work directory. Exits 1 when any of lost … hangs is not 0.
set -u

budget=${1:-60}
orch=$(realpath "${ORCH:-target/debug/orch}")
seed=${CHAOS_SEED:-$$}
RANDOM=$seed
work=$(mktemp -d /tmp/orch-chaos.XXXXXX)
cd "$work" || exit 2
log=$work/orch.log
export ORCH_SIM_STEP_SECONDS=0.02 ORCH_SIM_STEPS=3 ORCH_PREFLIGHT=off ORCH_SIMULATE=1
unset ORCH_RUNS_DIR ORCH_CONFIG_DIR CUDA_VISIBLE_DEVICES
kills=0
submit=(submit --backend local --simulate --set env.ORCH_SIM_PREEMPT_AT_STEP=0)

# orch with a timeout; a command stopped by it is a hang (counted in a file: `o` also runs in
# the background, in subshells).
o() {
    timeout 60 "$orch" "$@" >>"$log" 2>&1
    local code=$?
    if [ "$code" = 124 ]; then echo "orch $*" >>"$work/hangs"; fi
    return "$code"
}

# Start orch in the background and kill it (SIGKILL) after 0 to 1.5 s.
kill_soon() {
    "$orch" "$@" >>"$log" 2>&1 &
    local pid=$!
    sleep "$((RANDOM % 2)).$((RANDOM % 10))"
    kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
    wait "$pid" 2>/dev/null
}

# One random running run's id, if any.
running_run() {
    "$orch" status --json 2>/dev/null | python3 -c '
import json, random, sys
runs = [r["run"] for r in json.load(sys.stdin) if r["state"] == "running"]
print(random.Random(int(sys.argv[1])).choice(runs) if runs else "")' "$RANDOM"
}

# Corrupt one random run's events.jsonl: a garbled middle line (not a `submitted` one: the
# audit reads job ids from those) or a torn tail.
corrupt() {
    local files=(.orch/runs/*/events.jsonl)
    [ -e "${files[0]}" ] || return
    local f=${files[$((RANDOM % ${#files[@]}))]}
    if [ $((RANDOM % 2)) = 0 ]; then
        printf '{"event":"finish' >>"$f"
    else
        python3 - "$f" "$RANDOM" <<'EOF'
import random, sys
path, seed = sys.argv[1], int(sys.argv[2])
lines = open(path).read().split("\n")
middle = [i for i in range(1, len(lines) - 1) if '"event":"submitted"' not in lines[i]]
if middle:
    i = random.Random(seed).choice(middle)
    lines[i] = lines[i][: len(lines[i]) // 2]
    open(path, "w").write("\n".join(lines))
EOF
    fi
}

echo "chaos: seed $seed, ${budget}s of random attack, work in $work" >&2

# 1. Killed at every crash point, then resumed.
for point in created rendered submitted recorded finished decided; do
    # (the braces keep the shell's own "Killed" line off the terminal)
    { ORCH_CRASH_AT=$point timeout 60 "$orch" "${submit[@]}" diamonds-seed0 >>"$log" 2>&1; } 2>/dev/null
    [ $? = 137 ] && kills=$((kills + 1))
    o resume --all
done

# 2. Cancels that land right after a failure is decided (the race of issue 22), each in a runs
# directory of its own so the run is easy to find.
for round in 1 2 3 4 5; do
    runs=$work/race/$round
    ORCH_RUNS_DIR=$runs o "${submit[@]}" diamonds-seed0 &
    driver=$!
    for _ in $(seq 1000); do
        grep -qs '"event":"decided"' "$runs"/*/events.jsonl && break
        sleep 0.01
    done
    for run in "$runs"/*/; do ORCH_RUNS_DIR=$runs o cancel "$(basename "$run")"; done
    wait "$driver"
done

# 3. Random kills of sweeps and resumes, corruptions, cancel races, racing resumes.
end=$((SECONDS + budget))
while [ "$SECONDS" -lt "$end" ]; do
    kill_soon "${submit[@]}" diamonds --max-parallel 3
    kill_soon resume --all --max-parallel 3
    [ $((RANDOM % 3)) = 0 ] && corrupt
    o resume --all --max-parallel 3 &
    resumer=$!
    sleep "0.$((RANDOM % 10))"
    victim=$(running_run)
    [ -n "$victim" ] && o cancel "$victim"
    o resume --all --max-parallel 3 &
    wait "$resumer"
    wait
done

# 4. A full disk under a sweep (needs root to mount a tmpfs).
if [ "$(id -u)" = 0 ] && mkdir -p full && mount -t tmpfs -o size=200k tmpfs full 2>/dev/null; then
    ORCH_RUNS_DIR=$work/full o "${submit[@]}" diamonds --max-parallel 2
    mount -o remount,size=64m full
    ORCH_RUNS_DIR=$work/full o resume --all
fi

# 5. The end: everything left running is driven to its end, then audited.
o resume --all
o resume --all
[ -d full ] && ORCH_RUNS_DIR=$work/full o resume --all
panics=$(grep -c "panicked at" "$log")
hangs=$(cat "$work/hangs" 2>/dev/null | wc -l)

python3 - "$kills" "$hangs" "$panics" .orch/runs full race/* <<'EOF'
import json, os, sys
kills, hangs, panics, dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = attempts = lost = doubled = late = stuck = orphaned = 0

def alive(pgid):
    for pid in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(stat) > 2 and stat[2] == pgid and stat[0] != "Z":
            return True
    return False

for root in dirs:
    if not os.path.isdir(root):
        continue
    for run in sorted(os.listdir(root)):
        path = os.path.join(root, run)
        events = []
        try:
            text = open(os.path.join(path, "events.jsonl")).read()
        except OSError:
            continue
        runs += 1
        for line in text.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        jobs, cancel, ended = {}, False, None
        for e in events:
            kind = e.get("event")
            if kind == "rendered":
                attempts += 1
            elif kind == "submitted":
                jobs.setdefault(e.get("attempt"), set()).add(e.get("job_id"))
                if cancel:
                    late += 1
            elif kind == "cancel_requested":
                cancel = True
            elif kind == "ended":
                ended = e.get("state")
        doubled += sum(1 for ids in jobs.values() if len(ids) > 1)
        if ended is None:
            stuck += 1
        adir = os.path.join(path, "attempts")
        for n in os.listdir(adir) if os.path.isdir(adir) else []:
            try:
                pid = open(os.path.join(adir, n, "pid")).read().strip()
            except OSError:
                continue
            if pid not in jobs.get(int(n), set()):
                lost += 1
            if alive(pid):
                orphaned += 1
cols = ["kills", "runs", "attempts", "lost", "doubled", "late", "stuck", "orphaned", "panics", "hangs"]
vals = [kills, runs, attempts, lost, doubled, late, stuck, orphaned, panics, hangs]
print(" ".join(f"{c:>8}" for c in cols))
print(" ".join(f"{v:>8}" for v in vals))
sys.exit(1 if any(int(v) for v in vals[3:]) else 0)
EOF
status=$?

# Leave nothing running: the jobs of every run directory here, by their process groups.
for pidfile in .orch/runs/*/attempts/*/pid full/*/attempts/*/pid race/*/*/attempts/*/pid; do
    [ -f "$pidfile" ] && kill -KILL -- "-$(cat "$pidfile")" 2>/dev/null
done
mountpoint -q full 2>/dev/null && umount -l full
[ "${CHAOS_KEEP:-}" = 1 ] || rm -rf "$work"
exit "$status"
