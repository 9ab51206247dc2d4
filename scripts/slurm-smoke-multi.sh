#!/usr/bin/env bash
# End-to-end checks of the two-node partition "multi" of the Slurm test
# cluster (scripts/slurm-up.sh, docs/TEST-CLUSTER.md "The multi partition"):
#   1. `srun -N2 -p multi hostname` prints two different hostnames, the nodes'
#   2. in an `sbatch -N2` job, `srun --ntasks-per-node=1` runs one task per
#      node (hostname and SLURM_NODEID 0 and 1)
#   3. in that job, both nodes resolve the first host of SLURM_JOB_NODELIST
#      to node 1's address (its NodeAddr), and a TCP connection from the task
#      on node 2 to a port the task on node 1 listens on works (what PyTorch's
#      c10d rendezvous and a Ray head address need); files written by either
#      node are seen by both (shared filesystem)
# Needs the cluster up; changes nothing else. Takes about 2 s (at most about
# 100 s when something is broken).
# Usage: scripts/slurm-smoke-multi.sh [PARTITION]   (default multi)
# Last line: "smoke-multi: N passed, N failed"; exit status 1 if any failed.
set -euo pipefail

PART="${1:-multi}"
if [[ -z "${SLURM_CONF:-}" && ! -e /etc/slurm/slurm.conf ]]; then
	export SLURM_CONF="${ORCH_SLURM_DIR:-/var/lib/orch-slurm}/etc/slurm.conf"
fi

PASS=0
FAIL=0
ok() {
	PASS=$((PASS + 1))
	echo "PASS: $*"
}
bad() {
	FAIL=$((FAIL + 1))
	echo "FAIL: $*"
}
finish() {
	echo "smoke-multi: $PASS passed, $FAIL failed"
	if ((FAIL)); then
		echo "smoke-multi: FAILED: $FAIL check(s) of the multi partition failed (docs/TEST-CLUSTER.md, \"The multi partition\", says how to debug)" >&2
		exit 1
	fi
	exit 0
}

# Under /tmp: the same directory on every node, as a shared filesystem is.
W="$(mktemp -d /tmp/orch-slurm-smoke-multi.XXXXXX)"
chmod 755 "$W"
J=""
trap '[[ -z "$J" ]] || scancel "$J" 2>/dev/null; rm -rf "$W"' EXIT

mapfile -t NODES < <(timeout 20 sinfo -h -N -p "$PART" -o '%N' 2>/dev/null | sort -u)
echo "smoke-multi: partition $PART: $(timeout 20 sinfo -h -N -p "$PART" -o '%N %T' 2>/dev/null | sort -u | paste -sd' ')"
if ((${#NODES[@]} < 2)); then
	bad "partition $PART has ${#NODES[@]} node(s), wanted 2 or more (is the cluster up? scripts/slurm-up.sh --check)"
	finish
fi
N1="${NODES[0]}"
N2="${NODES[1]}"
for n in "$N1" "$N2"; do
	st="$(timeout 20 sinfo -h -N -n "$n" -o '%T' 2>/dev/null | awk 'NR == 1')"
	case "$st" in
	idle | mixed | allocated | completing) ;;
	*)
		bad "node $n is '$st' ($(sinfo -h -N -n "$n" -o '%E' 2>/dev/null | awk 'NR == 1')), not usable: scripts/slurm-up.sh --check says: $(scripts_dir="$(dirname "$0")" && "$scripts_dir/slurm-up.sh" --check 2>&1)"
		finish
		;;
	esac
done
# scontrol show node prints "NodeAddr=..." among other fields on a line.
ADDR1="$(scontrol show node "$N1" | tr ' ' '\n' | awk -F= '$1 == "NodeAddr" { print $2 }')"

# --- 1. two hostnames ---
if timeout 30 srun -N2 -p "$PART" --time=1 hostname >"$W/srun.out" 2>"$W/srun.err"; then
	mapfile -t names < <(sort -u "$W/srun.out")
	if ((${#names[@]} == 2)) && [[ "${names[*]}" == "$N1 $N2" ]]; then
		ok "srun -N2 -p $PART hostname prints two hostnames: ${names[*]}"
	else
		bad "srun -N2 -p $PART hostname printed '$(paste -sd' ' "$W/srun.out")', wanted '$N1' and '$N2'"
	fi
else
	bad "srun -N2 -p $PART hostname failed (exit $?): $(cat "$W/srun.err")"
fi

# --- 2. and 3. in one sbatch -N2 job ---
cat >"$W/tcp.py" <<'EOF'
# Task 0 listens on PORT on every address; task 1 connects to HEAD:PORT.
import socket, sys, time
head, port, node_id, me = sys.argv[1], int(sys.argv[2]), sys.argv[3], socket.gethostname()
if node_id == "0":
    srv = socket.create_server(("", port))
    srv.settimeout(30)
    conn, peer = srv.accept()
    conn.settimeout(10)
    got = conn.makefile().readline().strip()
    conn.sendall(f"welcome from {me}\n".encode())
    print(f"tcp server {me} got '{got}' from {peer[0]}")
else:
    end = time.time() + 30
    while True:
        try:
            conn = socket.create_connection((head, port), timeout=5)
            break
        except OSError as e:
            if time.time() > end:
                print(f"tcp client {me} could not connect to {head}:{port}: {e}")
                sys.exit(1)
            time.sleep(0.2)
    conn.sendall(f"hello from {me}\n".encode())
    conn.settimeout(10)
    print(f"tcp client {me} connected to {head}:{port} ({conn.getpeername()[0]}) and got '{conn.makefile().readline().strip()}'")
EOF
cat >"$W/job.sh" <<EOF
#!/bin/bash
W='$W'
EOF
cat >>"$W/job.sh" <<'EOF'
HEAD="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | awk 'NR == 1')"
PORT=$((20000 + SLURM_JOB_ID % 10000))
echo "batch step on $(hostname), head $HEAD, port $PORT"
srun --ntasks-per-node=1 bash -c 'echo "task $(hostname) $SLURM_NODEID"' >"$W/tasks.out"
srun --ntasks-per-node=1 bash -c 'echo "resolve $(hostname) '"$HEAD"' $(getent ahostsv4 '"$HEAD"' | awk "NR == 1 { print \$1 }")"; hostname >"'"$W"'/shared.$(hostname)"' >"$W/resolve.out"
srun --ntasks-per-node=1 bash -c 'exec python3 "'"$W"'/tcp.py" "'"$HEAD"'" "'"$PORT"'" "$SLURM_NODEID"' >"$W/tcp.out" 2>&1
echo "tcp srun exit $?"
ls "$W"/shared.* | sed 's|.*/shared\.|shared |'
EOF
field() { # field JOBID NAME: one field of `scontrol show job -o`
	scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | awk -v k="$2=" 'index($0, k) == 1 && !n++ { print substr($0, length(k) + 1) }'
}
J="$(sbatch --parsable -J smoke-multi -N2 -p "$PART" --ntasks-per-node=1 --time=2 -o "$W/job.out" "$W/job.sh")"
end=$((SECONDS + 60))
while ((SECONDS < end)); do
	case "$(field "$J" JobState)" in
	PENDING | RUNNING | COMPLETING | CONFIGURING | "") sleep 0.5 ;;
	*) break ;;
	esac
done
st="$(field "$J" JobState)"
for f in job tasks resolve tcp; do
	[[ -s "$W/$f.out" ]] && sed "s/^/    $f.out: /" "$W/$f.out"
done
if [[ "$st" == COMPLETED ]]; then
	ok "sbatch -N2 -p $PART job $J COMPLETED on $(field "$J" NodeList)"
else
	bad "sbatch -N2 -p $PART job $J is '$st', wanted COMPLETED"
	scontrol show job "$J" || true
fi
scancel "$J" 2>/dev/null || true
J=""

mapfile -t tasks < <(sort -u "$W/tasks.out" 2>/dev/null)
if [[ "${tasks[*]}" == "task $N1 0 task $N2 1" ]]; then
	ok "srun --ntasks-per-node=1 in the job ran one task per node: ${tasks[*]}"
else
	bad "srun --ntasks-per-node=1 in the job printed '${tasks[*]}', wanted 'task $N1 0' and 'task $N2 1'"
fi

for n in "$N1" "$N2"; do
	if grep -qx "resolve $n $N1 $ADDR1" "$W/resolve.out" 2>/dev/null; then
		ok "on $n, $N1 (first of SLURM_JOB_NODELIST) resolves to its NodeAddr $ADDR1"
	else
		bad "on $n, $N1 does not resolve to its NodeAddr $ADDR1: '$(grep "^resolve $n " "$W/resolve.out" 2>/dev/null)'"
	fi
done

if grep -qx "tcp server $N1 got 'hello from $N2' from $(getent ahostsv4 "$N2" | awk 'NR == 1 { print $1 }')" "$W/tcp.out" 2>/dev/null &&
	grep -qx "tcp client $N2 connected to $N1:[0-9]* ($ADDR1) and got 'welcome from $N1'" "$W/tcp.out"; then
	ok "TCP from the task on $N2 to $N1:port (the task on $N1 listening) works both ways"
else
	bad "TCP from $N2 to $N1 failed: '$(paste -sd'|' "$W/tcp.out" 2>/dev/null)'"
fi

if [[ -f "$W/shared.$N1" && -f "$W/shared.$N2" ]]; then
	ok "files the tasks wrote on $N1 and $N2 are in one directory ($W)"
else
	bad "files from both nodes missing in $W: $(cd "$W" && echo *)"
fi

finish
