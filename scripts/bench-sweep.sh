#!/usr/bin/env bash
# One orch submitting a sweep of N members on the local backend (diamonds on the simulated
# trainer, preflight on: every member is predicted not to fit as written and moved), with
# --max-parallel jobs that hang (one simulated step takes an hour), so every other member
# waits for a slot. For each N it prints:
#
#   recorded s    from the start of `orch submit` until every member's run is created, and
#                 (in brackets) the watcher's CPU time (user + sys) until then
#   1st job s     from the start until the first attempt is submitted (CPU time in brackets)
#   idle CPU %    the watcher's own CPU time (user + sys, /proc/PID/stat; not its jobs') over
#                 IDLE seconds once every member is recorded and the slots are full
#   max RSS MB    the watcher's peak resident memory (VmHWM) before the signal
#   signal s      SIGTERM to the first word of it on stderr ("terminated (SIGTERM): ...")
#   exit s        SIGTERM to the watcher's exit (its live jobs cancelled, every waiting
#                 member recorded cancelled)
#   CPU s         the watcher's CPU time (user + sys) from start to exit (wait4: with the jobs
#                 it reaped, which sleep)
#
#   scripts/bench-sweep.sh [N...]         (default: 100 1000 10000)
#
# Env: ORCH (binary; default $CARGO_TARGET_DIR or target, release/orch, built unless
# NO_BUILD=1), IDLE (seconds, default 10), MAX_PARALLEL (default 2), SIGNAL (TERM or INT,
# default TERM), KEEP=1 keeps the projects (their runs directories) under $TMPDIR, GPUS=N
# puts orch's stand-in nvidia-smi (crates/orch/tests/fixtures) on PATH with N H100s, so that
# jobs get GPU slots and the first in line asks which cards are busy outside the watcher.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-${CARGO_TARGET_DIR:-$ROOT/target}/release/orch}
if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p orch)
fi
COUNTS=("$@")
[[ ${#COUNTS[@]} -gt 0 ]] || COUNTS=(100 1000 10000)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-sweep.XXXXXX")
if [[ -z ${KEEP:-} ]]; then
    trap 'rm -rf "$WORK"' EXIT
else
    echo "projects kept under $WORK" >&2
fi

if [[ -n ${GPUS:-} ]]; then
    mkdir -p "$WORK/bin"
    cp "$ROOT/crates/orch/tests/fixtures/nvidia-smi" "$WORK/bin/nvidia-smi"
    {
        echo "index,uuid,name,memory.total"
        for ((i = 0; i < GPUS; i++)); do echo "$i,GPU-5eed$i,NVIDIA H100 80GB HBM3,81559"; done
    } >"$WORK/bin/gpus.csv"
    export PATH=$WORK/bin:$PATH
fi
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); orch: $ORCH${GPUS:+; $GPUS stand-in GPUs}"
printf '%7s %16s %16s %10s %11s %9s %7s %7s\n' members "recorded s (CPU)" "1st job s (CPU)" "idle CPU %" \
    "max RSS MB" "signal s" "exit s" "CPU s"
for n in "${COUNTS[@]}"; do
    proj=$WORK/p$n
    mkdir -p "$proj/experiments"
    sed -e "s/^  values: .*/  values: [$(seq -s, 0 $((n - 1)))]/" "$ROOT/experiments/diamonds.yaml" \
        >"$proj/experiments/bench.yaml"
    (cd "$proj" && ORCH_SIM_STEP_SECONDS=3600 python3 - "$ORCH" "$n" "${IDLE:-10}" \
        "${MAX_PARALLEL:-2}" "${SIGNAL:-TERM}" "$proj/stderr.log" <<'EOF'
import os, signal, subprocess, sys, threading, time

orch, n, idle, max_parallel, sig, log = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), \
    sys.argv[4], getattr(signal, "SIG" + sys.argv[5]), sys.argv[6]
tick = os.sysconf("SC_CLK_TCK")
start = time.monotonic()
p = subprocess.Popen(
    [orch, "submit", "bench", "--backend", "local", "--simulate", "--preflight=on",
     "--no-climb", "--max-parallel", max_parallel, "--hang-timeout", "10h",
     "--set", "env.ORCH_SIM_PREEMPT_AT_STEP=0"],
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    start_new_session=True)
seen = {"created": 0, "recorded": None, "first": None, "signal": None, "cpu": {}}
lock = threading.Lock()

def cpu():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

def read():
    with open(log, "wb") as out:
        for line in p.stderr:
            out.write(line)
            now = time.monotonic() - start
            text = line.decode(errors="replace")
            with lock:
                if "] run " in text and " · " in text:
                    seen["created"] += 1
                    if seen["created"] == n:
                        seen["recorded"] = now
                        seen["cpu"]["recorded"] = cpu()
                elif " submitted: " in text and seen["first"] is None:
                    seen["first"] = now
                    seen["cpu"]["first"] = cpu()
                elif seen["signal"] is None and "stopping as Ctrl-C does" in text:
                    seen["signal"] = now

reader = threading.Thread(target=read, daemon=True)
reader.start()

def hwm():
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0

def dead(why):
    p.kill()
    sys.exit(f"{n} members: {why} (stderr in {log})")

# Every member recorded and the first job out; then let the start-up work settle.
while True:
    with lock:
        ready = seen["recorded"] is not None and seen["first"] is not None
    if ready:
        break
    if p.poll() is not None:
        dead(f"orch exited {p.returncode} before every member was recorded and submitted")
    if time.monotonic() - start > 3600:
        dead("not ready after an hour")
    time.sleep(0.05)
time.sleep(2)
c0, t0 = cpu(), time.monotonic()
time.sleep(idle)
c1, t1 = cpu(), time.monotonic()
rss = hwm()
sent = time.monotonic()
os.kill(p.pid, sig)
while True:
    pid, status, usage = os.wait4(p.pid, os.WNOHANG)
    if pid:
        break
    if time.monotonic() - sent > 600:
        dead("still running 10 minutes after the signal")
    time.sleep(0.01)
p.returncode = os.waitstatus_to_exitcode(status)
final = usage.ru_utime + usage.ru_stime
gone = time.monotonic()
reader.join(5)
with lock:
    answered = seen["signal"]
print("%7d %16s %16s %10.1f %11.1f %9s %7.1f %7.1f" % (
    n, "%.1f (%.1f)" % (seen["recorded"], seen["cpu"]["recorded"]),
    "%.1f (%.1f)" % (seen["first"], seen["cpu"]["first"]), 100 * (c1 - c0) / (t1 - t0), rss,
    "%.2f" % (answered - (sent - start)) if answered is not None else "-",
    gone - sent, final))
EOF
    )
done
echo "(CPU from /proc/PID/stat in clock ticks; exit s includes recording every waiting member cancelled)"
