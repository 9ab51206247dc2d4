#!/usr/bin/env bash
# The attack of issues 22 and 41, in bounded time, on the local backend with the simulated trainer:
# orch killed at every crash point and at random moments of a sweep and of its resumes,
# event logs corrupted (a garbled line, a torn tail), cancels racing the driver (right after a
# failure is decided, and at random), resumes racing each other, (as root) a full disk under a
# sweep, one member's ledger deleted under a live sweep, pid reuse, a crash between spawning a job
# and recording it, a held evidence lock, an alias fan-out, a newline in a profile's field. Then one
# last `orch resume --all`
# and an audit of every run directory, printed as one table:
#
#   kills     orch processes killed (SIGKILL) by the attack
#   runs      run directories            attempts  attempts rendered
#   lost      jobs that ran (a pid file in an attempt directory) that no event records
#   doubled   attempts with more than one job id recorded
#   late      runs with a job submitted after their cancel_requested
#   stuck     runs still `running` after the last resume
#   orphaned  job processes still alive at the end
#   misfired  unrelated processes that did not survive an `orch cancel` of a run whose recorded
#             pid they had taken (4c)
#   survived  job processes alive after an `orch cancel` of a run whose orch died between
#             starting the job and recording it (4d)
#   accepted  an experiment whose YAML alias fans out to 17 GB that orch did not refuse (4e)
#   executed  canaries created by a command in a profile's GPU model after a newline (4e)
#   untested  attacks of 4e that did not happen as meant (the lock not held, the job not run)
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

# --- 4b. One member's ledger deleted under a live sweep (issue 41, F5) ----------------------
# The watcher must stop driving that member alone (cancelling its job: nothing could record
# it) and take the other members to their ends. Not resumed afterwards: a healthy member left
# `running` by this sweep's orch counts as stuck, a job of the deleted member left alive as
# orphaned.
damaged_member() {
    local runs=$work/damaged
    ORCH_RUNS_DIR=$runs ORCH_SIM_STEP_SECONDS=0.3 ORCH_SIM_STEPS=10 \
        o "${submit[@]}" diamonds --profile h200 --max-parallel 3 &
    local driver=$! victim=""
    for _ in $(seq 1000); do
        victim=$(grep -ls '"event":"running"' "$runs"/*/events.jsonl | head -1)
        [ -n "$victim" ] && break
        sleep 0.01
    done
    [ -n "$victim" ] && rm -f "$victim"
    wait "$driver"
}
damaged_member
# --- end of 4b ---------------------------------------------------------------------------

# The live processes of a job: those that carry its token (ORCH_JOB_TOKEN=$1 in their
# environment, wherever they are) or are in process group $2 (its pid file's). Either may be "".
job_processes() {
    python3 - "$1" "$2" <<'EOF'
import os, sys
token, pgid = sys.argv[1], sys.argv[2]
want = b"ORCH_JOB_TOKEN=" + token.encode()
for pid in os.listdir("/proc"):
    try:
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        if stat[0] == "Z":
            continue
        if (pgid and stat[2] == pgid) or (
            token and want in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        ):
            print(pid)
    except (OSError, IndexError):
        pass
EOF
}

# A run in runs directory $1 whose job hangs, its orch killed at crash point $2; prints its id.
orphaned_at() {
    { ORCH_RUNS_DIR=$1 ORCH_SIM_HANG_AT_STEP=1 ORCH_CRASH_AT=$2 timeout 60 "$orch" \
        "${submit[@]}" diamonds-seed0 --profile h200 --hang-timeout 1h >>"$log" 2>&1; } 2>/dev/null
    [ $? = 137 ] && echo killed >>"$work/crashes"
    local dirs=("$1"/*/)
    [ -d "${dirs[0]}" ] && basename "${dirs[0]}"
}

# --- 4c. A dead job's pid taken by an unrelated program, then `orch cancel` (issue 41, F4) ---
# The job dies while no orch watches it; its recorded pid (ledger and pid file) now leads an
# unrelated process group. The cancel must leave that group alone.
pid_reuse() {
    local runs=$work/reuse run job unrelated
    run=$(orphaned_at "$runs" recorded)
    [ -n "$run" ] || return
    for _ in $(seq 200); do [ -s "$runs/$run/attempts/1/pid" ] && break; sleep 0.05; done
    job=$(cat "$runs/$run/attempts/1/pid" 2>/dev/null)
    [ -n "$job" ] && kill -KILL -- "-$job" 2>/dev/null
    setsid sleep 300 </dev/null >/dev/null 2>&1 &
    unrelated=$!
    sed -i "s/\"job_id\":\"$job\"/\"job_id\":\"$unrelated\"/" "$runs/$run/events.jsonl"
    echo "$unrelated" >"$runs/$run/attempts/1/pid"
    ORCH_RUNS_DIR=$runs o cancel "$run"
    sleep 0.3
    kill -0 "$unrelated" 2>/dev/null || echo "$run" >>"$work/misfired"
    kill "$unrelated" 2>/dev/null
    wait "$unrelated" 2>/dev/null
}
pid_reuse
# --- end of 4c ---------------------------------------------------------------------------

# --- 4d. orch killed between starting a job and recording it, then `orch cancel` (F3) ------
# The cancel must find the job the way a resume would, stop it and record it, and only then
# record the run cancelled: no process of the job may outlive it.
unrecorded_then_cancel() {
    local runs=$work/unrecorded run dir job token left
    run=$(orphaned_at "$runs" submitted)
    [ -n "$run" ] || return
    dir=$runs/$run/attempts/1
    ORCH_RUNS_DIR=$runs o cancel "$run"
    for _ in $(seq 50); do
        job=$(cat "$dir/pid" 2>/dev/null) token=$(cat "$dir/job_token" 2>/dev/null)
        left=$(job_processes "$token" "$job")
        [ -z "$left" ] && break
        sleep 0.1
    done
    if [ -n "$left" ]; then
        echo "$run" >>"$work/survived"
        for p in $left; do kill -KILL "$p" 2>/dev/null; done
    fi
}
unrecorded_then_cancel
# --- end of 4d ---------------------------------------------------------------------------

# --- 4e. A held evidence lock, an alias fan-out, a newline in a profile's field (F2, F6, F7) ---
# Another holder keeps the evidence store's lock for 3 s while a sweep runs: every member must
# still end (the audit's stuck). An experiment of 0.7 MB whose alias fans out to 17 GB must be
# refused (accepted counts one that was not). A profile whose GPU model holds a newline and a
# command must never run it (executed counts a canary).
held_lock() {
    local runs=$work/locked holder
    mkdir -p "$runs" && : >"$runs/evidence.jsonl"
    flock "$runs/evidence.jsonl" sleep 3 &
    holder=$!
    # The attack only counts once the lock is held.
    for _ in $(seq 100); do flock -n "$runs/evidence.jsonl" true || break; sleep 0.01; done
    flock -n "$runs/evidence.jsonl" true && echo held_lock >>"$work/untested"
    ORCH_RUNS_DIR=$runs o "${submit[@]}" diamonds --profile h200 --max-parallel 2
    wait "$holder"
}
alias_fan_out() {
    mkdir -p experiments
    python3 -c 'print("a: &a " + "x" * 600000); print("b: [" + ", ".join(["*a"] * 28000) + "]")' \
        >experiments/bomb.yaml
    # Refused by name, not killed or aborted on the way (any other end is not a refusal).
    ORCH_RUNS_DIR=$work/bomb "$orch" "${submit[@]}" bomb --profile h200 >"$work/bomb.out" 2>&1
    grep -q "aliases expand it past" "$work/bomb.out" || echo bomb >>"$work/accepted"
    cat "$work/bomb.out" >>"$log"
    rm -f experiments/bomb.yaml
}
newline_field() {
    mkdir -p profiles
    python3 - "$work/canary" >profiles/evil.yaml <<'EOF'
import json, sys
canary = sys.argv[1]
print("description: H200 whose GPU model names a command")
print("gpu:\n  model: " + json.dumps("H200\ntouch " + canary + " #") + "\n  memory_gib: 139.8\n  per_node: 8")
print("host:\n  memory_gib: 2048")
print("slurm:\n  partition: gpu\n  gres_type: h200\n  gpus: 4\n  nodes: 1\n  cpus_per_task: 8\n  mem_gb: 64\n  time: \"01:00:00\"")
EOF
    ORCH_RUNS_DIR=$work/evil o "${submit[@]}" diamonds-seed0 --profile evil
    # The attack only counts when the job ran with the field in its scripts.
    grep -rqs "H200" "$work"/evil/*/attempts/1/ || echo newline_field >>"$work/untested"
    rm -f profiles/evil.yaml
}
held_lock
alias_fan_out
newline_field
# --- end of 4e ---------------------------------------------------------------------------

# 5. The end: everything left running is driven to its end, then audited.
o resume --all
o resume --all
[ -d full ] && ORCH_RUNS_DIR=$work/full o resume --all
panics=$(grep -c "panicked at" "$log")
hangs=$(cat "$work/hangs" 2>/dev/null | wc -l)

kills=$((kills + $(cat "$work/crashes" 2>/dev/null | wc -l)))
export CHAOS_MISFIRED=$(cat "$work/misfired" 2>/dev/null | wc -l)
export CHAOS_SURVIVED=$(cat "$work/survived" 2>/dev/null | wc -l)
export CHAOS_ACCEPTED=$(cat "$work/accepted" 2>/dev/null | wc -l)
export CHAOS_EXECUTED=$(ls "$work"/canary* 2>/dev/null | wc -l)
export CHAOS_UNTESTED=$(cat "$work/untested" 2>/dev/null | wc -l)
python3 - "$kills" "$hangs" "$panics" .orch/runs full race/* damaged reuse unrecorded locked evil <<'EOF'
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
        adir = os.path.join(path, "attempts")
        try:
            text = open(os.path.join(path, "events.jsonl")).read()
        except OSError:
            # No ledger (deleted under its watcher, 4b): no job of it may run on unaccounted.
            for n in os.listdir(adir) if os.path.isdir(adir) else []:
                try:
                    orphaned += alive(open(os.path.join(adir, n, "pid")).read().strip())
                except OSError:
                    pass
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
        for n in os.listdir(adir) if os.path.isdir(adir) else []:
            try:
                pid = open(os.path.join(adir, n, "pid")).read().strip()
            except OSError:
                continue
            if pid not in jobs.get(int(n), set()):
                lost += 1
            if alive(pid):
                orphaned += 1
misfired, survived = os.environ["CHAOS_MISFIRED"], os.environ["CHAOS_SURVIVED"]
accepted, executed = os.environ["CHAOS_ACCEPTED"], os.environ["CHAOS_EXECUTED"]
untested = os.environ["CHAOS_UNTESTED"]
cols = ["kills", "runs", "attempts", "lost", "doubled", "late", "stuck", "orphaned", "misfired", "survived", "accepted", "executed", "untested", "panics", "hangs"]
vals = [kills, runs, attempts, lost, doubled, late, stuck, orphaned, misfired, survived, accepted, executed, untested, panics, hangs]
print(" ".join(f"{c:>8}" for c in cols))
print(" ".join(f"{v:>8}" for v in vals))
sys.exit(1 if any(int(v) for v in vals[3:]) else 0)
EOF
status=$?

# Leave nothing running: the jobs of every run directory here, by their process groups.
for pidfile in .orch/runs/*/attempts/*/pid full/*/attempts/*/pid race/*/*/attempts/*/pid damaged/*/attempts/*/pid locked/*/attempts/*/pid evil/*/attempts/*/pid; do
    [ -f "$pidfile" ] && kill -KILL -- "-$(cat "$pidfile")" 2>/dev/null
done
mountpoint -q full 2>/dev/null && umount -l full
[ "${CHAOS_KEEP:-}" = 1 ] || rm -rf "$work"
exit "$status"
