#!/usr/bin/env bash
# End-to-end checks of the Slurm test cluster that scripts/slurm-up.sh
# brings up (docs/TEST-CLUSTER.md). Submits real jobs and checks their end
# states. Needs the cluster up; changes nothing else.
#
# Usage: scripts/slurm-smoke.sh [--quick]
#   --quick   skip the --time=00:01:00 TIMEOUT check (it takes ~60-95 s)
# Last line: "smoke: N passed, N failed"; exit status 1 if any failed.
set -euo pipefail

QUICK=0
[[ "${1:-}" == --quick ]] && QUICK=1
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
# check NAME COMMAND...: pass if COMMAND succeeds.
check() {
	local name="$1"
	shift
	if "$@"; then ok "$name"; else bad "$name"; fi
}

W="$(mktemp -d /tmp/orch-slurm-smoke.XXXXXX)"
trap 'rm -rf "$W"' EXIT
cd "$W"

field() { # field JOBID NAME: one field of `scontrol show job -o`
	scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | awk -v k="$2=" 'index($0, k) == 1 && !n++ { print substr($0, length(k) + 1) }'
}
# wait_end JOBID SECONDS: wait until the job has left the active states.
wait_end() {
	local end=$((SECONDS + $2)) st
	while ((SECONDS < end)); do
		st="$(field "$1" JobState)"
		case "$st" in
		PENDING | RUNNING | COMPLETING | CONFIGURING | SUSPENDED | REQUEUED | RESIZING | "") sleep 0.5 ;;
		*) return 0 ;;
		esac
	done
	return 1
}
submit() { # submit NAME SBATCH-ARGS...: prints the job id
	local name="$1"
	shift
	sbatch --parsable -J "smoke-$name" -o "$W/$name.out" "$@"
}
CONFIG="$(scontrol show config)"
is_cgroup() { grep -Eq '^ProctrackType +=.*proctrack/cgroup' <<<"$CONFIG"; }
is_acct() { grep -Eq '^AccountingStorageType +=.*slurmdbd' <<<"$CONFIG"; }

echo "smoke: cluster: $(sinfo -h -N -p gpu -o '%N %T' | awk 'NR == 1'); cgroup=$(is_cgroup && echo yes || echo no) accounting=$(is_acct && echo yes || echo no)"

# --- submissions (all at once, then wait) ---
# shellcheck disable=SC2016 # $CUDA_VISIBLE_DEVICES expands in the job
J_A40="$(submit a40 --gres=gpu:a40:4 --wrap 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 1')"
check "sbatch --parsable prints a bare job id ($J_A40)" grep -Eqx '[0-9]+' <<<"$J_A40"
# shellcheck disable=SC2016
J_H100="$(submit h100 --gres=gpu:h100:8 --wrap 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 1')"
J_BIG="$(submit big --cpus-per-task=32 --mem=200G --wrap 'echo big; sleep 1')"
J_FAIL="$(submit fail --wrap 'echo failing; exit 3')"
J_CANCEL="$(submit cancel --wrap 'sleep 300')"
J_OOM="$(submit oom --mem=100M --wrap 'python3 -c "x=bytearray(600*1024*1024); import time; time.sleep(2)"')"
J_TIME=""
if ((!QUICK)); then
	J_TIME="$(submit timeout --time=00:01:00 --wrap 'echo start; sleep 300')"
fi

if sbatch --parsable --gres=gpu:a40:9 --wrap true >"$W/reject.out" 2>"$W/reject.err"; then
	bad "gpu:a40:9 should be rejected (got job $(cat "$W/reject.out"))"
else
	check "gpu:a40:9 rejected: $(cat "$W/reject.err")" grep -q 'Requested node configuration is not available' "$W/reject.err"
fi

# squeue format for queued/running jobs
sleep 1
echo "smoke: squeue -h -j $J_A40,$J_CANCEL -o '%i|%T|%r|%N' ->"
squeue -h -j "$J_A40,$J_CANCEL" -o '%i|%T|%r|%N' | sed 's/^/    /'
for ((i = 0; i < 40; i++)); do
	[[ "$(field "$J_CANCEL" JobState)" == RUNNING ]] && break
	sleep 0.5
done
scancel "$J_CANCEL"

# --- end states ---
expect() { # expect NAME JOBID STATE [EXITCODE] [WAIT]
	local name="$1" id="$2" want="$3" code="${4:-}" st ec
	wait_end "$id" "${5:-60}" || true
	st="$(field "$id" JobState)"
	ec="$(field "$id" ExitCode)"
	if [[ "$st" == "$want" && (-z "$code" || "$ec" == "$code") ]]; then
		ok "$name: job $id $st ExitCode=$ec"
	else
		bad "$name: job $id is '$st' ExitCode=$ec, wanted $want${code:+ ExitCode=$code}"
		scontrol show job "$id" || true
		cat "$W/$name.out" 2>/dev/null || true
	fi
}
expect a40 "$J_A40" COMPLETED 0:0
check "gpu:a40:4 sets CUDA_VISIBLE_DEVICES to 4 ids ($(cat "$W/a40.out"))" grep -Eqx 'CVD=[0-9]+(,[0-9]+){3}' "$W/a40.out"
expect h100 "$J_H100" COMPLETED 0:0
check "gpu:h100:8 sets CUDA_VISIBLE_DEVICES to 8 ids ($(cat "$W/h100.out"))" grep -Eqx 'CVD=[0-9]+(,[0-9]+){7}' "$W/h100.out"
expect big "$J_BIG" COMPLETED 0:0
expect fail "$J_FAIL" FAILED 3:0
expect cancel "$J_CANCEL" CANCELLED
check "cancelled job's output has the CANCELLED banner" grep -Eq "slurmstepd.*\*\*\* JOB $J_CANCEL ON .* CANCELLED AT " "$W/cancel.out"
if is_cgroup; then
	expect oom "$J_OOM" OUT_OF_MEMORY 0:125
	check "OOM job's output has the oom-kill line" grep -q 'Detected 1 oom-kill event' "$W/oom.out"
else
	echo "smoke: skipped OUT_OF_MEMORY check: not in cgroup mode"
	scancel "$J_OOM" 2>/dev/null || true
fi
if [[ -n "$J_TIME" ]]; then
	# slurmctld checks time limits about every 30 s, then KillWait=5.
	expect timeout "$J_TIME" TIMEOUT 0:15 120
	check "timed-out job's output has the TIME LIMIT banner" grep -Eq "slurmstepd.*\*\*\* JOB $J_TIME ON .* CANCELLED AT .* DUE TO TIME LIMIT \*\*\*" "$W/timeout.out"
fi

# --- unknown job ids ---
if squeue -h -j 999999999 -o '%i' >"$W/sq.out" 2>"$W/sq.err"; then
	bad "squeue of an unknown job id should fail"
else
	check "squeue of an unknown single job id: $(cat "$W/sq.err")" grep -q 'Invalid job id specified' "$W/sq.err"
fi

# --- accounting ---
if is_acct; then
	ids="$J_A40,$J_FAIL,$J_CANCEL"
	is_cgroup && ids+=",$J_OOM"
	for ((i = 0; i < 20; i++)); do
		sacct -X -n -P -j "$ids" -o JobIDRaw,State,ExitCode,Reason >"$W/sacct.out" 2>&1 || true
		grep -q "^$J_FAIL|FAILED|3:0|" "$W/sacct.out" && break
		sleep 0.5
	done
	sed 's/^/    sacct: /' "$W/sacct.out"
	check "sacct: COMPLETED" grep -q "^$J_A40|COMPLETED|0:0|" "$W/sacct.out"
	check "sacct: FAILED 3:0" grep -q "^$J_FAIL|FAILED|3:0|" "$W/sacct.out"
	check "sacct: CANCELLED" grep -q "^$J_CANCEL|CANCELLED" "$W/sacct.out"
	if is_cgroup; then check "sacct: OUT_OF_MEMORY" grep -q "^$J_OOM|OUT_OF_MEMORY|" "$W/sacct.out"; fi
else
	if sacct -X -n -P -j "$J_A40" -o JobIDRaw,State >"$W/sacct.out" 2>&1; then
		bad "sacct should fail without accounting"
	else
		check "sacct without accounting: $(cat "$W/sacct.out")" grep -q 'accounting storage is disabled' "$W/sacct.out"
	fi
fi

echo "smoke: $PASS passed, $FAIL failed"
((FAIL == 0))
