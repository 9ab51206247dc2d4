#!/usr/bin/env bash
# Stop the Slurm test cluster started by scripts/slurm-up.sh. Only processes
# recorded in its pid files ($ORCH_SLURM_DIR/run/*.pid) are stopped.
set -Eeuo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=slurm-lib.sh source-path=SCRIPTDIR
. "$SCRIPT_DIR/slurm-lib.sh"

usage() {
	cat <<EOF
Usage: scripts/slurm-down.sh [--cancel] [--purge]

Stops the daemons that scripts/slurm-up.sh started (slurmctld, slurmd, the
multi partition's slurmds, slurmdbd, mariadbd, and munged if slurm-up started
it), found through the pid files in \$ORCH_SLURM_DIR/run (default
/var/lib/orch-slurm/run), then removes the multi nodes' network namespaces
(orch-n1, ...; one in which jobs still run is kept), their veths and the
bridge orch-br0. Job state is kept: the next slurm-up.sh finds queued and
running jobs again.

  --cancel   scancel all jobs first and wait (up to 30 s) for them to end;
             without it, running jobs' slurmstepd processes keep running
  --purge    --cancel, stop, then delete \$ORCH_SLURM_DIR (config, job state,
             logs, accounting database) and the /etc/slurm/slurm.conf
             symlink if it points there, and the multi nodes' lines in
             /etc/hosts. Packages stay installed.
  -h, --help this text
EOF
}

CANCEL=0
PURGE=0
while (($#)); do
	case "$1" in
	--cancel) CANCEL=1 ;;
	--purge)
		PURGE=1
		CANCEL=1
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		usage >&2
		die "unknown argument: $1"
		;;
	esac
	shift
done

require_root

if [[ ! -d "$SD" ]]; then
	# shellcheck disable=SC2119 # no namespace to keep
	multi_net_down
	if ((PURGE)) && grep -qxF "$S_HOSTS_BEGIN" "$S_HOSTS" 2>/dev/null; then
		write_hosts_block remove
		say "removed the multi nodes' lines from $S_HOSTS"
	fi
	say "nothing to stop: $SD does not exist"
	exit 0
fi

exec 9>"$SD/.lock"
flock -w 120 9 || die "could not lock $SD/.lock within 120s (slurm-up.sh running?)"

if ((CANCEL)) && pid_of slurmctld >/dev/null; then
	mapfile -t jobs < <(timeout 15 squeue -h -o %i 2>/dev/null || true)
	if ((${#jobs[@]})); then
		say "cancelling ${#jobs[@]} job(s): ${jobs[*]}"
		timeout 15 scancel --quiet "${jobs[@]}" 2>/dev/null || true
		for ((i = 0; i < 150; i++)); do
			[[ -n "$(timeout 15 squeue -h -t R,CG,PD -o %i 2>/dev/null)" ]] || break
			sleep 0.2
		done
	fi
fi

running_steps() {
	# Live slurmstepd processes (one per running job step).
	local p
	for p in /proc/[0-9]*; do
		[[ "$(cat "$p/comm" 2>/dev/null)" == slurmstepd ]] || continue
		# Zombies (this machine's PID 1 reaps late) are not running.
		[[ "$(awk '{print $3}' "$p/stat" 2>/dev/null)" != Z ]] || continue
		echo "${p#/proc/}"
	done
	return 0
}

stopped=0
multi_slurmds=()
for f in "$S_RUN"/slurmd-*.pid; do
	[[ -e "$f" ]] || continue
	f="${f##*/}"
	multi_slurmds+=("${f%.pid}")
done
for d in slurmctld slurmd "${multi_slurmds[@]}" slurmdbd mariadbd munged; do
	if pid_of "$d" >/dev/null; then
		stop_daemon "$d" 30
		stopped=$((stopped + 1))
	else
		rm -f "$S_RUN/$d.pid"
	fi
done

steps="$(running_steps | tr '\n' ' ')"
if [[ -n "${steps// /}" ]]; then
	if ((CANCEL)); then
		warn "slurmstepd processes still running (pids: $steps); they belong to jobs that did not end"
	else
		say "note: jobs are still running (slurmstepd pids: $steps); slurmd re-attaches to them on the next slurm-up.sh (use --cancel to cancel jobs instead)"
	fi
fi

# shellcheck disable=SC2119 # no namespace to keep
multi_net_down

if ((PURGE)); then
	if grep -qxF "$S_HOSTS_BEGIN" "$S_HOSTS" 2>/dev/null; then
		write_hosts_block remove
		say "removed the multi nodes' lines from $S_HOSTS"
	fi
	if [[ -L "$S_SYS_CONF" && "$(readlink "$S_SYS_CONF")" == "$S_CONF" ]]; then
		rm -f "$S_SYS_CONF"
		say "removed $S_SYS_CONF"
	fi
	exec 9>&-
	rm -rf "$SD"
	say "removed $SD"
fi

say "stopped $stopped daemon(s)"
