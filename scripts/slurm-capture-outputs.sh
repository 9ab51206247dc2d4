#!/usr/bin/env bash
# Prints the exact outputs (stdout, stderr, exit code, duration) of the Slurm
# client commands that orch parses, for docs/TEST-CLUSTER.md "Findings".
# Not a test: it asserts nothing. Needs the cluster up (scripts/slurm-up.sh).
#
# Usage: scripts/slurm-capture-outputs.sh [--controller-down]
#   --controller-down  also SIGKILL slurmctld (and later SIGSTOP it) to record
#                      what clients print while it is down/hung, then bring
#                      it back with scripts/slurm-up.sh. Disruptive; as root.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
UP="$HERE/slurm-up.sh"
SD="${ORCH_SLURM_DIR:-/var/lib/orch-slurm}"
DOWN_TEST=0
[[ "${1:-}" == --controller-down ]] && DOWN_TEST=1

W="$(mktemp -d /tmp/orch-slurm-capture.XXXXXX)"
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 1

# run CMD...: print the command, its exit code, duration, stdout and stderr.
run() {
	local t0 rc
	t0="$EPOCHREALTIME"
	"$@" >"$W/o" 2>"$W/e"
	rc=$?
	printf '$ %s\n' "$*"
	awk -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" 'BEGIN { printf "  exit=%d  time=%.2fs\n", rc, b - a }'
	sed 's/^/  stdout| /' "$W/o"
	sed 's/^/  stderr| /' "$W/e"
}
state() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | awk -F= '$1 == "JobState" { print $2 }'; }
wait_end() {
	local i
	for ((i = 0; i < ${2:-240}; i++)); do
		case "$(state "$1")" in
		PENDING | RUNNING | COMPLETING | CONFIGURING | "") sleep 0.5 ;;
		*) return 0 ;;
		esac
	done
}
sb() { sbatch --parsable "$@"; }

echo "### versions"
run sinfo --version
run munge --version
echo
echo "### submissions"
run sbatch --parsable --wrap 'sleep 1'
run sbatch --wrap 'sleep 1'
run sbatch --parsable --gres=gpu:a40:9 --wrap true
run sbatch --parsable --partition=nosuch --wrap true

OK="$(sb -o ok.out --wrap 'echo hello')"
FAIL="$(sb -o fail.out --wrap 'echo failing; exit 3')"
SIG="$(sb -o sig.out --wrap 'kill -9 $$')"
CANCEL="$(sb -o cancel.out --wrap 'sleep 300')"
TIME="$(sb -o time.out --time=00:01:00 --wrap 'echo start; sleep 300')"
OOM="$(sb -o oom.out --mem=100M --wrap 'python3 -c "x=bytearray(600*1024*1024); import time; time.sleep(2)"')"
HOLD="$(sb --hold --wrap true)"
BIG1="$(sb --gres=gpu:h200:8 --wrap 'sleep 20')"
BIG2="$(sb --gres=gpu:h200:8 --wrap 'sleep 20')"
DEP="$(sb --dependency=afterok:"$BIG2" --wrap true)"
sleep 1.5
echo
echo "### squeue, pending and running jobs"
run squeue -h -j "$CANCEL,$TIME,$HOLD,$BIG1,$BIG2,$DEP" -o '%i|%T|%r|%N'
run squeue -j "$CANCEL,$HOLD,$BIG2"
run scontrol show job -o "$BIG2"
scancel "$CANCEL" "$HOLD" "$DEP"
for j in "$OK" "$FAIL" "$SIG" "$CANCEL" "$OOM"; do wait_end "$j"; done
echo
echo "### finished jobs: scontrol show job"
for j in "$OK" "$FAIL" "$SIG" "$CANCEL" "$OOM"; do run scontrol show job "$j"; done
run scontrol show job -o "$FAIL"
echo
echo "### job output files"
for f in ok fail sig cancel oom; do
	echo "--- $f.out"
	cat "$f.out"
	echo "<EOF>"
done
echo
echo "### finished-but-remembered and unknown job ids"
run squeue -h -j "$OK" -o '%i|%T|%r|%N'
run squeue -h -j 999999 -o '%i|%T|%r|%N'
run squeue -h -j "$OK,999999" -o '%i|%T|%r|%N'
run scontrol show job 999999
run scancel 999999
run sacct -X -n -P -j "$OK,$FAIL,$SIG,$CANCEL,$OOM" -o JobIDRaw,State,ExitCode,Reason
run sacct -n -P -j "$OOM" -o JobIDRaw,State,ExitCode,Reason
run sacct -X -n -P -j 999999 -o JobIDRaw,State,ExitCode,Reason

echo
echo "### TIMEOUT (waiting for the time limit: up to ~95 s)"
t0=$SECONDS
wait_end "$TIME" 300
echo "(job ended $((SECONDS - t0))s after the other jobs had finished)"
run scontrol show job "$TIME"
echo "--- time.out"
cat time.out
echo "<EOF>"
run sacct -X -n -P -j "$TIME" -o JobIDRaw,State,ExitCode,Reason,Elapsed,Timelimit

if ((DOWN_TEST)); then
	echo
	echo "### controller down (SIGKILL, restarted with slurm-up.sh after 20 s)"
	X="$(sb -o x.out --wrap 'echo x start; sleep 40; echo x done')"
	Z="$(sb -o z.out --dependency=afterok:"$X" --wrap 'echo z ran')"
	# slurmctld writes its state files a few seconds after a change; a
	# SIGKILL before that loses the change (see docs/TEST-CLUSTER.md).
	sleep 8
	run squeue -h -j "$X,$Z" -o '%i|%T|%r|%N'
	kill -KILL "$(cat "$SD/run/slurmctld.pid")"
	t0=$SECONDS
	run scontrol ping
	run squeue -h -j "$X" -o '%i|%T|%r|%N'
	run squeue
	run sinfo
	run sbatch --parsable --wrap true
	run scontrol show job "$X"
	run scancel 999999
	run sacct -X -n -P -j "$X" -o JobIDRaw,State,ExitCode,Reason
	run "$UP" --check
	while ((SECONDS - t0 < 20)); do sleep 1; done
	echo "(controller was down for $((SECONDS - t0))s)"
	run "$UP"
	run squeue -h -j "$X,$Z" -o '%i|%T|%r|%N'
	wait_end "$Z" 240
	run squeue -h -j "$X,$Z" -o '%i|%T|%r|%N'
	for j in "$X" "$Z"; do scontrol show job -o "$j" | tr ' ' '\n' | grep -E '^(JobId|JobState|ExitCode|Restarts)='; done
	cat x.out z.out

	echo
	echo "### controller hung (SIGSTOP for ~25 s, then SIGCONT)"
	P="$(cat "$SD/run/slurmctld.pid")"
	kill -STOP "$P"
	run squeue -h -j "$X" -o '%i|%T|%r|%N'
	run sbatch --parsable -J hung-submit --wrap true
	kill -CONT "$P"
	sleep 2
	echo "after SIGCONT, jobs named hung-submit (submitted while hung):"
	run squeue -h -n hung-submit -t all -o '%i|%T|%j'
fi
