#!/usr/bin/env bash
# Bring up (or check) the Slurm test cluster on this machine: one node with
# the partitions gpu and debug, and a two-node partition multi whose nodes are
# slurmds in their own network and UTS namespaces.
# Idempotent; run as root. See docs/TEST-CLUSTER.md, or --help.
set -Eeuo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=slurm-lib.sh source-path=SCRIPTDIR
. "$SCRIPT_DIR/slurm-lib.sh"

usage() {
	cat <<EOF
Usage: scripts/slurm-up.sh [--accounting|--no-accounting] [--cgroup|--no-cgroup|--auto-cgroup]
                           [--defaults] [--check]

Installs Slurm (Debian packages slurmctld slurmd slurm-client munge) if
missing, writes the config under \$ORCH_SLURM_DIR (default
/var/lib/orch-slurm), starts munged, slurmctld and slurmd (plus MariaDB and
slurmdbd with --accounting) and waits until the node is idle. Also brings up
the partition multi: nodes orch-n1 and orch-n2, each a slurmd in its own
network namespace (address 10.250.0.11, .12 on the bridge orch-br0, named in
/etc/hosts) and UTS namespace (hostname orch-n1, orch-n2). Does nothing but
report if the cluster is already up with the wanted settings.

  --accounting      also run slurmdbd + MariaDB so that sacct works
                    (env ORCH_SLURM_ACCOUNTING=1)
  --no-accounting   accounting off: stop our slurmdbd/MariaDB
                    (env ORCH_SLURM_ACCOUNTING=0). With neither flag nor env
                    the current mode is kept; off on a first run
  --cgroup          require cgroup v1 mode: task/cgroup + proctrack/cgroup,
                    --mem enforced by the kernel, OUT_OF_MEMORY states
                    (env ORCH_SLURM_CGROUP=1)
  --no-cgroup       proctrack/linuxproc + task/none; --mem enforced only by
                    polling (JobAcctGatherParams=OverMemoryKill), such jobs
                    end FAILED (env ORCH_SLURM_CGROUP=0)
  --auto-cgroup     cgroup mode when a writable cgroup v1 memory+freezer
                    hierarchy is mounted, else --no-cgroup (env
                    ORCH_SLURM_CGROUP=auto). With no flag or env: the current
                    mode is kept if it is --no-cgroup, else auto.
  --defaults        same as --no-accounting --auto-cgroup: what a test
                    harness should pass to get the default cluster
  --check           only report whether the cluster is up and healthy
                    (exit 0) or not (exit 1); changes nothing
  -h, --help        this text

Environment: ORCH_SLURM_DIR, ORCH_SLURM_ACCOUNTING, ORCH_SLURM_CGROUP,
ORCH_SLURM_WAIT (seconds to wait for the node, default 60),
ORCH_SLURM_CPUS (128), ORCH_SLURM_MEM_MB (1048576),
ORCH_SLURM_GPU_TYPES ("a40 a100 a100_80g h100 h200 rtx4090 l40s"),
ORCH_SLURM_GPUS_PER_TYPE (8), ORCH_SLURM_DB_PORT (3307),
ORCH_SLURM_LINK_ETC (1: symlink /etc/slurm/slurm.conf to our config),
ORCH_SLURM_MULTI_NODES (2; 0: no multi partition), ORCH_SLURM_MULTI_CPUS (8),
ORCH_SLURM_MULTI_MEM_MB (65536), ORCH_SLURM_MULTI_GPU_TYPE (a100),
ORCH_SLURM_MULTI_GPUS (4 per node; 0: no GRES), ORCH_SLURM_MULTI_NET
(10.250.0: the first three octets of the multi nodes' /24).
EOF
}

# ----------------------------------------------------------------- options ---
# Accounting: flag > env ORCH_SLURM_ACCOUNTING > what the current config has
# (so a plain re-run keeps the mode) > off.
ACCOUNTING=""
if [[ -n "${ORCH_SLURM_ACCOUNTING:-}" ]]; then
	if truthy "$ORCH_SLURM_ACCOUNTING"; then ACCOUNTING=1; else ACCOUNTING=0; fi
fi
# cgroup mode: flag > env ORCH_SLURM_CGROUP > linuxproc if the current config
# uses it (kept) > auto.
CGROUP_WANT="${ORCH_SLURM_CGROUP:-}"
CHECK_ONLY=0
while (($#)); do
	case "$1" in
	--accounting) ACCOUNTING=1 ;;
	--no-accounting) ACCOUNTING=0 ;;
	--cgroup) CGROUP_WANT=1 ;;
	--no-cgroup) CGROUP_WANT=0 ;;
	--auto-cgroup) CGROUP_WANT=auto ;;
	--defaults)
		ACCOUNTING=0
		CGROUP_WANT=auto
		;;
	--check) CHECK_ONLY=1 ;;
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

if [[ -z "$ACCOUNTING" ]]; then
	ACCOUNTING=0
	if grep -qx 'AccountingStorageType=accounting_storage/slurmdbd' "$S_CONF" 2>/dev/null; then
		ACCOUNTING=1
	fi
fi
if [[ -z "$CGROUP_WANT" ]]; then
	CGROUP_WANT=auto
	if grep -qx 'ProctrackType=proctrack/linuxproc' "$S_CONF" 2>/dev/null; then
		CGROUP_WANT=0
	fi
fi
WAIT_S="${ORCH_SLURM_WAIT:-60}"
CPUS="${ORCH_SLURM_CPUS:-128}"
MEM_MB="${ORCH_SLURM_MEM_MB:-1048576}"
GPU_TYPES="${ORCH_SLURM_GPU_TYPES:-a40 a100 a100_80g h100 h200 rtx4090 l40s}"
GPUS_PER_TYPE="${ORCH_SLURM_GPUS_PER_TYPE:-8}"
LINK_ETC=1
if ! truthy "${ORCH_SLURM_LINK_ETC:-1}"; then LINK_ETC=0; fi
MULTI_CPUS="${ORCH_SLURM_MULTI_CPUS:-8}"
MULTI_MEM_MB="${ORCH_SLURM_MULTI_MEM_MB:-65536}"
MULTI_GPU_TYPE="${ORCH_SLURM_MULTI_GPU_TYPE:-a100}"
MULTI_GPUS="${ORCH_SLURM_MULTI_GPUS:-4}"
[[ "$S_MULTI_N" =~ ^[0-9]$ ]] || die "ORCH_SLURM_MULTI_NODES must be 0-9, not '$S_MULTI_N'"
[[ "$S_NET" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "ORCH_SLURM_MULTI_NET must be three octets like 10.250.0, not '$S_NET'"
mapfile -t MULTI < <(multi_nodes)
NODE="$(node_name)"
ALL_LOGS=("$S_LOG/slurmctld.log" "$S_LOG/slurmd.log" "$S_LOG/slurmdbd.log"
	"$S_LOG/mariadb.log" /var/log/munge/munged.log)
for n in "${MULTI[@]}"; do ALL_LOGS+=("$S_LOG/slurmd-$n.log"); done
trap 'die "unexpected failure (line $LINENO: $BASH_COMMAND)" "${ALL_LOGS[@]}"' ERR

# ------------------------------------------------------------- cgroup mode ---
cgroup_v1_usable() {
	local c
	[[ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" == tmpfs ]] || return 1
	for c in memory freezer; do
		[[ "$(stat -fc %T "/sys/fs/cgroup/$c" 2>/dev/null)" == cgroupfs ]] || return 1
		# (only root can write there; a non-root --check must not conclude
		# "no cgroup" from that)
		[[ "$(id -u)" != 0 || -w "/sys/fs/cgroup/$c" ]] || return 1
	done
}
CGROUP_NOTE=""
case "${CGROUP_WANT,,}" in
auto)
	if cgroup_v1_usable; then
		CGROUP=1
	else
		CGROUP=0
		CGROUP_NOTE="no writable cgroup v1 memory+freezer hierarchy under /sys/fs/cgroup: using proctrack/linuxproc (--mem enforced only by polling, OOM jobs end FAILED)"
	fi
	;;
*)
	if truthy "$CGROUP_WANT"; then
		cgroup_v1_usable || die "cgroup mode requested but /sys/fs/cgroup has no writable cgroup v1 memory and freezer hierarchies"
		CGROUP=1
	else
		CGROUP=0
	fi
	;;
esac

# ------------------------------------------------------------ config files ---
gres_list() {
	local t out=""
	for t in $GPU_TYPES; do out+="${out:+,}gpu:$t:$GPUS_PER_TYPE"; done
	printf '%s' "$out"
}

# gen_slurm_conf [MULTI-NODE]: slurm.conf for slurmctld, the clients and the
# slurmd of node $NODE; with a multi node's name, the copy its slurmd reads,
# which differs only in where slurmctld is (the bridge's address: 127.0.0.1
# in its network namespace is its own loopback) and in that slurmd's own pid
# file, spool directory and log.
gen_slurm_conf() {
	local proctrack task gather acct tres t gather_params="#JobAcctGatherParams=" gather_freq=30
	local for_node="${1:-}" header="" ctld_addr=127.0.0.1 n multi_conf="" main_nodes=ALL
	local d_pid="$S_RUN/slurmd.pid" d_spool="$S_SPOOL/slurmd" d_log="$S_LOG/slurmd.log"
	if [[ -n "$for_node" ]]; then
		header="
# The copy of $S_CONF that slurmd on $for_node (and its jobs) read."
		ctld_addr="$S_NET.1"
		d_pid="$S_RUN/slurmd-$for_node.pid" d_spool="$S_SPOOL/$for_node" d_log="$S_LOG/slurmd-$for_node.log"
	fi
	if ((${#MULTI[@]})); then
		main_nodes="$NODE"
		# The multi nodes' slurmds read copies that differ (above).
		multi_conf="DebugFlags=NO_CONF_HASH"
		for n in "${MULTI[@]}"; do
			multi_conf+="
NodeName=$n NodeAddr=$(multi_addr "$n") NodeHostname=$n CPUs=$MULTI_CPUS RealMemory=$MULTI_MEM_MB"
			if ((MULTI_GPUS > 0)); then multi_conf+=" Gres=gpu:$MULTI_GPU_TYPE:$MULTI_GPUS"; fi
			multi_conf+=" State=UNKNOWN"
		done
		multi_conf+="
PartitionName=multi Nodes=$(printf '%s\n' "${MULTI[@]}" | paste -sd,) Default=NO MaxTime=UNLIMITED State=UP"
	fi
	if ((CGROUP)); then
		proctrack=proctrack/cgroup task=task/cgroup gather=jobacct_gather/cgroup
	else
		proctrack=proctrack/linuxproc task=task/none gather=jobacct_gather/linux
		# No cgroup memory limit: poll every 5 s and kill jobs over --mem.
		gather_params="JobAcctGatherParams=OverMemoryKill" gather_freq=5
	fi
	if ((ACCOUNTING)); then
		tres="gres/gpu"
		for t in $GPU_TYPES; do tres+=",gres/gpu:$t"; done
		if ((${#MULTI[@]} && MULTI_GPUS > 0)) && [[ " $GPU_TYPES " != *" $MULTI_GPU_TYPE "* ]]; then
			tres+=",gres/gpu:$MULTI_GPU_TYPE"
		fi
		acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
AccountingStorageTRES=$tres"
	else
		acct="AccountingStorageType=accounting_storage/none"
	fi
	cat <<EOF
# Generated by orch scripts/slurm-up.sh: do not edit, it is rewritten on
# every run (docs/TEST-CLUSTER.md). Mode: cgroup=$CGROUP accounting=$ACCOUNTING$header
ClusterName=$S_CLUSTER
SlurmctldHost=$NODE($ctld_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$S_STATE
SlurmdSpoolDir=$d_spool
SlurmctldPidFile=$S_RUN/slurmctld.pid
SlurmdPidFile=$d_pid
SlurmctldLogFile=$S_LOG/slurmctld.log
SlurmdLogFile=$d_log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=$proctrack
TaskPlugin=$task
JobAcctGatherType=$gather
JobAcctGatherFrequency=$gather_freq
$gather_params
JobCompType=jobcomp/filetxt
JobCompLoc=$S_LOG/jobcomp.log
$acct
# The node declares what the jobs ask for, not what this box has.
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=60
MessageTimeout=10
InactiveLimit=0
KillWait=5
OverTimeLimit=0
MinJobAge=300
Waittime=0
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=2048
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS RealMemory=$MEM_MB Gres=$(gres_list) State=UNKNOWN
PartitionName=gpu Nodes=$main_nodes Default=YES MaxTime=UNLIMITED State=UP
PartitionName=debug Nodes=$main_nodes Default=NO MaxTime=UNLIMITED State=UP
EOF
	if [[ -n "$multi_conf" ]]; then printf '%s\n' "$multi_conf"; fi
}

gen_gres_conf() {
	local t
	echo "# Generated by orch scripts/slurm-up.sh. Placeholder char devices (1:3, like /dev/null), no GPUs."
	for t in $GPU_TYPES; do
		echo "NodeName=$NODE Name=gpu Type=$t File=$S_DEV/$t-[0-$((GPUS_PER_TYPE - 1))]"
	done
	if ((MULTI_GPUS > 0)); then
		for n in "${MULTI[@]}"; do
			echo "NodeName=$n Name=gpu Type=$MULTI_GPU_TYPE File=$S_DEV/$MULTI_GPU_TYPE-[0-$((MULTI_GPUS - 1))]"
		done
	fi
}

gen_cgroup_conf() {
	cat <<EOF
# Generated by orch scripts/slurm-up.sh (used when TaskPlugin=task/cgroup).
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=yes
AllowedRAMSpace=100
ConstrainSwapSpace=no
EOF
}

gen_slurmdbd_conf() {
	cat <<EOF
# Generated by orch scripts/slurm-up.sh.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$S_LOG/slurmdbd.log
PidFile=$S_RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$S_DB_PORT
StorageUser=slurm
StoragePass=$S_DB_PASS
StorageLoc=slurm_acct_db
EOF
}

# Wanted content of each generated file, "path|mode" -> text.
declare -A WANT=()
WANT["$S_CONF|644"]="$(gen_slurm_conf)"
WANT["$S_ETC/gres.conf|644"]="$(gen_gres_conf)"
WANT["$S_ETC/cgroup.conf|644"]="$(gen_cgroup_conf)"
if ((ACCOUNTING)); then
	WANT["$S_ETC/slurmdbd.conf|600"]="$(gen_slurmdbd_conf)"
fi
# Each multi node's slurmd reads $S_ETC/NODE/slurm.conf and finds gres.conf
# and cgroup.conf next to it.
for n in "${MULTI[@]}"; do
	WANT["$S_ETC/$n/slurm.conf|644"]="$(gen_slurm_conf "$n")"
	WANT["$S_ETC/$n/gres.conf|644"]="${WANT["$S_ETC/gres.conf|644"]}"
	WANT["$S_ETC/$n/cgroup.conf|644"]="${WANT["$S_ETC/cgroup.conf|644"]}"
done

# One hash over all wanted files: written to $S_RUN/applied once the daemons
# run with them, so that a run that died between writing the files and
# restarting the daemons is noticed by the next one.
WANT_HASH="$(for k in $(printf '%s\n' "${!WANT[@]}" | sort); do
	printf '%s\n%s\n' "$k" "${WANT[$k]}"
done | sha256sum | awk '{print $1}')"

applied_current() {
	[[ "$(cat "$S_RUN/applied" 2>/dev/null)" == "$WANT_HASH" ]]
}

configs_current() {
	local k
	for k in "${!WANT[@]}"; do
		# (2>/dev/null: cmp stops reading at the first difference)
		cmp -s "${k%|*}" <(printf '%s\n' "${WANT[$k]}" 2>/dev/null) || return 1
	done
	applied_current
}

# Writes the files that differ; sets CONFIG_CHANGED=1 if any did.
CONFIG_CHANGED=0
write_configs() {
	local k f
	for k in "${!WANT[@]}"; do
		f="${k%|*}"
		if ! cmp -s "$f" <(printf '%s\n' "${WANT[$k]}" 2>/dev/null); then
			printf '%s\n' "${WANT[$k]}" >"$f.tmp"
			chmod "${k#*|}" "$f.tmp"
			mv -f "$f.tmp" "$f"
			say "wrote $f"
			CONFIG_CHANGED=1
		fi
	done
	if ((!ACCOUNTING)) && [[ -e "$S_ETC/slurmdbd.conf" ]]; then
		rm -f "$S_ETC/slurmdbd.conf"
	fi
	if ! applied_current; then CONFIG_CHANGED=1; fi
}

# ------------------------------------------------------------ health check ---
munge_ok() {
	command -v munge >/dev/null 2>&1 || return 1
	timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1
}

# node_state [NODE]: the node's state as sinfo reports it (e.g. idle, mixed,
# down*); default $NODE.
node_state() {
	# (awk, not head: it reads all input, so no SIGPIPE under pipefail)
	timeout 15 sinfo -h -N -n "${1:-$NODE}" -o '%T' 2>/dev/null | awk 'NR == 1'
}

node_usable() {
	case "$(node_state "$@")" in
	idle | mixed | allocated | completing) return 0 ;;
	*) return 1 ;;
	esac
}

cluster_registered() {
	timeout 15 sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -x "$S_CLUSTER" >/dev/null
}

# Sets WHY to the first problem found.
WHY=""
healthy() {
	WHY=""
	command -v slurmctld >/dev/null 2>&1 || {
		WHY="Slurm is not installed"
		return 1
	}
	configs_current || {
		WHY="config in $S_ETC is missing, differs from the wanted one, or is not what the daemons were started with"
		return 1
	}
	munge_ok || {
		WHY="munge does not work"
		return 1
	}
	pid_of slurmctld >/dev/null || {
		WHY="slurmctld is not running"
		return 1
	}
	pid_of slurmd >/dev/null || {
		WHY="slurmd is not running"
		return 1
	}
	if ((ACCOUNTING)); then
		pid_of mariadbd >/dev/null || {
			WHY="mariadbd is not running"
			return 1
		}
		pid_of slurmdbd >/dev/null || {
			WHY="slurmdbd is not running"
			return 1
		}
	elif pid_of slurmdbd >/dev/null || pid_of mariadbd >/dev/null; then
		WHY="accounting daemons are running but accounting is off"
		return 1
	fi
	node_usable || {
		WHY="node $NODE is in state '$(node_state)'"
		return 1
	}
	multi_healthy
}

# The multi partition's share of healthy(): network, names, slurmds, nodes.
multi_healthy() {
	local n f
	for f in "$S_RUN"/slurmd-*.pid; do
		[[ -e "$f" ]] || continue
		n="${f##*/slurmd-}"
		n="${n%.pid}"
		if [[ " ${MULTI[*]} " != *" $n "* ]] && pid_of "slurmd-$n" >/dev/null; then
			WHY="slurmd of $n is running but $n is not wanted (ORCH_SLURM_MULTI_NODES=$S_MULTI_N)"
			return 1
		fi
	done
	for n in $(existing_multi_netns); do
		[[ " ${MULTI[*]} " == *" $n "* ]] || {
			WHY="network namespace $n is left from an earlier run"
			return 1
		}
	done
	[[ "$(hosts_without_block; multi_hosts_block)" == "$(cat "$S_HOSTS" 2>/dev/null)" ]] || {
		WHY="$S_HOSTS does not name the multi nodes as wanted"
		return 1
	}
	((${#MULTI[@]})) || return 0
	multi_bridge_ok || {
		WHY="bridge $S_BR is missing, down or without address $S_NET.1/24"
		return 1
	}
	for n in "${MULTI[@]}"; do
		multi_netns_ok "$n" || {
			WHY="network namespace $n is missing or its eth0 is not up with $(multi_addr "$n")/24"
			return 1
		}
		pid_of "slurmd-$n" >/dev/null || {
			WHY="slurmd of $n is not running"
			return 1
		}
		node_usable "$n" || {
			WHY="node $n is in state '$(node_state "$n")'"
			return 1
		}
	done
}

multi_bridge_ok() {
	ip -br addr show dev "$S_BR" 2>/dev/null | grep -E "^$S_BR +(UP|UNKNOWN|DOWN) .* $S_NET\.1/24( |$)" >/dev/null &&
		ip link show dev "$S_BR" 2>/dev/null | grep -q '<[^>]*\bUP\b'
}

# multi_netns_ok NODE: its namespace exists, the host end of its veth is a
# port of the bridge whose other end (in the namespace) is up, and (as root:
# entering a namespace needs it) that end is eth0 with the node's address.
multi_netns_ok() {
	local link
	[[ -e "/run/netns/$1" ]] || return 1
	link="$(ip link show dev "$(multi_veth "$1")" 2>/dev/null)" || return 1
	[[ "$link" == *LOWER_UP*" master $S_BR "* && "$link" == *" link-netns $1"* ]] || return 1
	[[ "$(id -u)" == 0 ]] || return 0
	ip -n "$1" -br addr show dev eth0 2>/dev/null | grep -E "^eth0@[^ ]+ +UP .*$(multi_addr "$1")/24( |$)" >/dev/null
}

# multi_states: "orch-n1 idle, orch-n2 idle" (or nothing).
multi_states() {
	local n out=""
	for n in "${MULTI[@]}"; do out+="${out:+, }$n $(node_state "$n")"; done
	printf '%s' "$out"
}

multi_summary() {
	local n
	if ((!${#MULTI[@]})); then
		echo "  no multi partition (ORCH_SLURM_MULTI_NODES=0)"
		return 0
	fi
	printf '  partition multi: %s nodes (%s CPUs, %s MB%s each):' "${#MULTI[@]}" "$MULTI_CPUS" "$MULTI_MEM_MB" "$( ((MULTI_GPUS > 0)) && echo ", gpu:$MULTI_GPU_TYPE:$MULTI_GPUS")"
	for n in "${MULTI[@]}"; do printf ' %s (%s)' "$n" "$(multi_addr "$n")"; done
	printf '\n  try:    srun -N%s -p multi hostname; %s/slurm-smoke-multi.sh\n' "${#MULTI[@]}" "$SCRIPT_DIR"
}

summary() {
	local link
	if [[ -L "$S_SYS_CONF" && "$(readlink "$S_SYS_CONF")" == "$S_CONF" ]]; then
		link="clients find it through the symlink $S_SYS_CONF"
	else
		link="clients need: export SLURM_CONF=$S_CONF"
	fi
	cat <<EOF 2>/dev/null
$S_PROG: Slurm test cluster '$S_CLUSTER' is up: node $NODE ($CPUS CPUs, ${MEM_MB} MB, gpu:{${GPU_TYPES// /,}}:$GPUS_PER_TYPE each),
  partitions gpu (default) and debug; $( ((CGROUP)) && echo "cgroup mode (--mem enforced)" || echo "linuxproc mode (--mem enforced by polling only)"); accounting $( ((ACCOUNTING)) && echo "on (sacct works)" || echo "off (sacct does not work)").
$(multi_summary)
  config: $S_CONF ($link)
  logs:   $S_LOG/
  try:    sbatch --parsable --gres=gpu:a40:1 --wrap 'echo \$CUDA_VISIBLE_DEVICES'; squeue; scontrol show job ID
  stop:   $SCRIPT_DIR/slurm-down.sh
EOF
}

if ((CHECK_ONLY)); then
	if healthy; then
		say "up and healthy (node $NODE $(node_state)$( ((${#MULTI[@]})) && echo "; partition multi: $(multi_states)"))"
		exit 0
	fi
	say "not healthy: $WHY"
	exit 1
fi

if healthy; then
	say "already up and healthy (node $NODE $(node_state)$( ((${#MULTI[@]})) && echo "; partition multi: $(multi_states)")); nothing to do"
	summary || true
	exit 0
fi

# From here on we change things: root only, one invocation at a time.
require_root
T0="$EPOCHREALTIME"
mkdir -p "$SD"
exec 9>"$SD/.lock"
if ! flock -w 600 9; then
	die "could not lock $SD/.lock within 600s (another slurm-up.sh running?)"
fi
if healthy; then
	say "already up and healthy (brought up by a concurrent slurm-up.sh)"
	summary || true
	exit 0
fi
say "bringing the cluster up: $WHY"
[[ -z "$CGROUP_NOTE" ]] || warn "$CGROUP_NOTE"

# ---------------------------------------------------------------- packages ---
pkg_installed() {
	[[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

ensure_packages() {
	local missing=() p t0 rc created_policy=0
	for p in "$@"; do pkg_installed "$p" || missing+=("$p"); done
	((${#missing[@]})) || return 0
	say "installing ${missing[*]} (log: $S_LOG/apt.log)"
	t0="$EPOCHREALTIME"
	export DEBIAN_FRONTEND=noninteractive
	# Keep the packages' maintainer scripts from starting daemons themselves
	# (we start our own): policy-rc.d exit 101 = "do not start".
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		created_policy=1
	fi
	local apt_opts=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=300
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
	rc=0
	{
		# Fresh machines may have no package lists at all.
		if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
			apt-get update -q || true
		fi
		apt-get install "${apt_opts[@]}" "${missing[@]}" ||
			{ apt-get update -q && apt-get install "${apt_opts[@]}" "${missing[@]}"; }
	} >>"$S_LOG/apt.log" 2>&1 || rc=$?
	if ((created_policy)); then rm -f /usr/sbin/policy-rc.d; fi
	((rc == 0)) || die "apt-get install ${missing[*]} failed (exit $rc)" "$S_LOG/apt.log"
	APT_S="$(since "$t0")"
	say "installed ${missing[*]} in ${APT_S}s"
}

mkdir -p "$S_ETC" "$S_RUN" "$S_LOG" "$S_STATE" "$S_SPOOL/slurmd" "$S_DEV"
for n in "${MULTI[@]}"; do mkdir -p "$S_ETC/$n" "$S_SPOOL/$n"; done
chmod 755 "$SD" "$S_ETC" "$S_RUN" "$S_LOG"
chmod 700 "$S_STATE"
APT_S=0
PKGS=(slurmctld slurmd slurm-client munge)
if ((ACCOUNTING)); then PKGS+=(slurmdbd mariadb-server); fi
# ip (netns, veth, bridge) for the multi partition; nsenter and unshare are
# util-linux's, which every Debian has.
if ((${#MULTI[@]})); then PKGS+=(iproute2); fi
ensure_packages "${PKGS[@]}"

# ------------------------------------------------------------------ config ---
# Placeholder "GPUs": character devices 1:3 (what /dev/null is). Slurm wants
# real device files here: with plain files slurmd logs "is not a valid
# character or block device" and leaves CUDA_VISIBLE_DEVICES unset.
for tn in $(for t in $GPU_TYPES; do echo "$t:$GPUS_PER_TYPE"; done) "$MULTI_GPU_TYPE:$MULTI_GPUS"; do
	for ((i = 0; i < ${tn#*:}; i++)); do
		f="$S_DEV/${tn%:*}-$i"
		[[ -c "$f" ]] && continue
		rm -f "$f"
		mknod -m 666 "$f" c 1 3 2>/dev/null || : >"$f"
	done
done
write_configs

# Let client commands (sbatch, squeue, ...) find the config without
# SLURM_CONF: /etc/slurm/slurm.conf is Debian's compiled-in default path.
if ((LINK_ETC)); then
	if [[ -L "$S_SYS_CONF" ]] || [[ ! -e "$S_SYS_CONF" ]]; then
		if [[ "$(readlink "$S_SYS_CONF" 2>/dev/null)" != "$S_CONF" ]]; then
			mkdir -p "$(dirname "$S_SYS_CONF")"
			ln -sfn "$S_CONF" "$S_SYS_CONF"
			say "linked $S_SYS_CONF -> $S_CONF"
		fi
	else
		warn "$S_SYS_CONF exists and is not our symlink; left alone. Clients need: export SLURM_CONF=$S_CONF"
	fi
fi

# ------------------------------------------------- multi partition network ---
# The bridge $S_BR ($S_NET.1/24) on this machine; per multi node a network
# namespace of its name whose eth0 ($S_NET.1I/24) is a veth to the bridge.
# Traffic stays between the namespaces and this machine: no default route,
# no forwarding.
ensure_multi_net() {
	local n a v
	if ! ip link show dev "$S_BR" >/dev/null 2>&1; then
		ip link add "$S_BR" type bridge || die "cannot create bridge $S_BR (ip link add type bridge)"
		say "created bridge $S_BR"
	fi
	if ! ip -br addr show dev "$S_BR" | grep -E " $S_NET\.1/24( |$)" >/dev/null; then
		ip addr add "$S_NET.1/24" dev "$S_BR"
	fi
	ip link set dev "$S_BR" up
	for n in "${MULTI[@]}"; do
		a="$(multi_addr "$n")"
		v="$(multi_veth "$n")"
		multi_netns_ok "$n" && continue
		if [[ ! -e "/run/netns/$n" ]]; then
			ip netns add "$n" || die "cannot create network namespace $n (ip netns add)"
			NET_RENEWED+=("$n")
		fi
		# A half-made pair (or one whose namespace went away) is made anew.
		if ! ip link show dev "$v" >/dev/null 2>&1 || ! ip -n "$n" link show dev eth0 >/dev/null 2>&1; then
			ip link del "$v" 2>/dev/null || true
			ip -n "$n" link del eth0 2>/dev/null || true
			ip link add "$v" type veth peer name eth0 netns "$n"
			NET_RENEWED+=("$n")
		fi
		ip link set dev "$v" master "$S_BR" up
		ip -n "$n" link set dev lo up
		if ! ip -n "$n" -br addr show dev eth0 | grep -E " $a/24( |$)" >/dev/null; then
			ip -n "$n" addr add "$a/24" dev eth0
		fi
		ip -n "$n" link set dev eth0 up
		say "network namespace $n: eth0 $a/24, veth $v on $S_BR"
	done
}

# Multi nodes that are not wanted (any more): their slurmds stop.
for f in "$S_RUN"/slurmd-*.pid; do
	[[ -e "$f" ]] || continue
	n="${f##*/slurmd-}"
	n="${n%.pid}"
	[[ " ${MULTI[*]} " == *" $n "* ]] || stop_daemon "slurmd-$n" 30
done
for d in "$S_ETC/$S_NS_PREFIX"*/; do
	n="$(basename "$d")"
	[[ -d "$d" && " ${MULTI[*]} " != *" $n "* ]] && rm -rf "$d"
done
multi_net_down "${MULTI[@]}"
# Nodes whose namespace or veth had to be made anew: a slurmd still running
# is in the old namespace, cut off; it is restarted below.
NET_RENEWED=()
if ((${#MULTI[@]})); then ensure_multi_net; fi
for n in "${NET_RENEWED[@]}"; do stop_daemon "slurmd-$n" 30; done
if [[ "$(hosts_without_block; multi_hosts_block)" != "$(cat "$S_HOSTS")" ]]; then
	write_hosts_block write
	say "updated the multi nodes' lines in $S_HOSTS"
fi

# ------------------------------------------------------------------- munge ---
# wait_until SECONDS COMMAND...: poll every 0.2 s.
wait_until() {
	local limit="$1" end
	shift
	end=$((SECONDS + limit))
	while ((SECONDS < end)); do
		if "$@"; then return 0; fi
		sleep 0.2
	done
	"$@"
}

start_munge() {
	if munge_ok; then return 0; fi
	local key=/etc/munge/munge.key pid
	if [[ ! -s "$key" ]]; then
		say "creating $key"
		mungekey --create --keyfile="$key" --force
	fi
	chown munge:munge "$key"
	chmod 0400 "$key"
	install -d -o munge -g munge -m 0755 /run/munge
	install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
	# A munged that died uncleanly leaves its pid file behind.
	if [[ -f /run/munge/munged.pid ]]; then
		read -r pid </run/munge/munged.pid || true
		if [[ -z "${pid:-}" || ! -d "/proc/${pid:-0}" ]]; then rm -f /run/munge/munged.pid; fi
	fi
	say "starting munged"
	(
		trap - PIPE
		exec runuser -u munge -- /usr/sbin/munged </dev/null >>"$S_LOG/munged.out" 2>&1 9>&-
	) ||
		die "munged failed to start" "$S_LOG/munged.out" /var/log/munge/munged.log
	wait_until 10 munge_ok || die "munge does not work after starting munged" /var/log/munge/munged.log
	# Record that this munged is ours (slurm-down.sh stops it).
	cp /run/munge/munged.pid "$S_RUN/munged.pid"
}
start_munge

# -------------------------------------------------------------- accounting ---
db_sql() {
	mariadb --no-defaults --socket="$S_DB_SOCK" -uroot -e "$1"
}

db_ping() {
	mariadb-admin --no-defaults --socket="$S_DB_SOCK" -uroot ping >/dev/null 2>&1
}

start_mariadb() {
	if pid_of mariadbd >/dev/null && db_ping; then return 0; fi
	stop_daemon mariadbd
	if [[ ! -d "$S_DB/mysql" ]]; then
		say "initialising MariaDB in $S_DB"
		rm -rf "$S_DB"
		install -d -o mysql -g mysql -m 0750 "$S_DB"
		mariadb-install-db --no-defaults --user=mysql --datadir="$S_DB" \
			--auth-root-authentication-method=socket --skip-test-db \
			>>"$S_LOG/mariadb-install.log" 2>&1 ||
			die "mariadb-install-db failed" "$S_LOG/mariadb-install.log"
	fi
	install -d -o mysql -g mysql -m 0755 "$S_RUN/mysqld"
	touch "$S_LOG/mariadb.log"
	chown mysql:mysql "$S_LOG/mariadb.log"
	say "starting mariadbd (127.0.0.1:$S_DB_PORT)"
	(
		exec 9>&-
		trap - PIPE
		exec setsid mariadbd --no-defaults --user=mysql --datadir="$S_DB" \
			--socket="$S_DB_SOCK" --port="$S_DB_PORT" --bind-address=127.0.0.1 \
			--pid-file="$S_RUN/mysqld/mariadbd.pid" --log-error="$S_LOG/mariadb.log" \
			--innodb-buffer-pool-size=1G --innodb-log-file-size=64M \
			--innodb-lock-wait-timeout=900 \
			</dev/null >>"$S_LOG/mariadb.out" 2>&1
	) &
	echo "$!" >"$S_RUN/mariadbd.pid"
	wait_until 60 db_ping || die "mariadbd did not come up within 60s" "$S_LOG/mariadb.log" "$S_LOG/mariadb.out"
	db_sql "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$S_DB_PASS';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$S_DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;" || die "could not create the slurm database user" "$S_LOG/mariadb.log"
}

dbd_ok() { timeout 15 sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }

start_slurmdbd() {
	if ((CONFIG_CHANGED)); then stop_daemon slurmdbd; fi
	if pid_of slurmdbd >/dev/null && dbd_ok; then return 0; fi
	stop_daemon slurmdbd
	say "starting slurmdbd"
	(
		trap - PIPE
		exec setsid slurmdbd </dev/null >>"$S_LOG/slurmdbd.out" 2>&1 9>&-
	) ||
		die "slurmdbd failed to start" "$S_LOG/slurmdbd.log" "$S_LOG/slurmdbd.out"
	wait_until 60 dbd_ok || die "slurmdbd did not answer within 60s" "$S_LOG/slurmdbd.log" "$S_LOG/slurmdbd.out" "$S_LOG/mariadb.log"
	if ! cluster_registered; then
		say "registering cluster $S_CLUSTER with slurmdbd"
		sacctmgr -i add cluster "$S_CLUSTER" >>"$S_LOG/slurmdbd.out" 2>&1 ||
			die "sacctmgr add cluster failed" "$S_LOG/slurmdbd.out" "$S_LOG/slurmdbd.log"
	fi
}

if ((ACCOUNTING)); then
	start_mariadb
	start_slurmdbd
else
	stop_daemon slurmdbd
	stop_daemon mariadbd 60
fi

# ------------------------------------------------------------------- slurm ---
if ((CONFIG_CHANGED)); then
	# Running jobs survive: their slurmstepd processes are independent of
	# slurmd, and slurmctld reloads its state from StateSaveLocation.
	stop_daemon slurmctld 30
	stop_daemon slurmd 30
	for n in "${MULTI[@]}"; do stop_daemon "slurmd-$n" 30; done
fi

# run_daemon NAME OUTFILE CMD...: start a self-daemonising Slurm daemon,
# detached from our stdio, with the limits its systemd unit would give it.
run_daemon() {
	launch_daemon "$@"
	await_daemon "$1" "$2"
}

# launch_daemon NAME OUTFILE CMD...: run_daemon's start, without the wait.
launch_daemon() {
	local name="$1" out="$2"
	shift 2
	say "starting $name"
	(
		exec 9>&- # our lock: daemons must not inherit it
		trap - PIPE
		ulimit -n 131072 2>/dev/null || true
		ulimit -l unlimited 2>/dev/null || true
		exec setsid "$@" </dev/null >>"$out" 2>&1
	) || die "$name failed to start (exit $?)" "$S_LOG/$name.log" "$out"
}

# await_daemon NAME OUTFILE: the daemon forks and then writes its pid file:
# wait for that.
await_daemon() {
	wait_until 15 pid_of "$1" >/dev/null ||
		die "$1 did not stay up (no live pid in $S_RUN/$1.pid)" "$S_LOG/$1.log" "$2"
}

ctld_up() { timeout 10 scontrol ping 2>/dev/null | grep 'is UP' >/dev/null; }

if ! pid_of slurmctld >/dev/null; then
	run_daemon slurmctld "$S_LOG/slurmctld.out" slurmctld -f "$S_CONF"
fi
end=$((SECONDS + WAIT_S))
until ctld_up; do
	pid_of slurmctld >/dev/null || die "slurmctld exited" "$S_LOG/slurmctld.log" "$S_LOG/slurmctld.out"
	((SECONDS < end)) || die "slurmctld did not answer 'scontrol ping' within ${WAIT_S}s" "$S_LOG/slurmctld.log" "$S_LOG/slurmctld.out"
	sleep 0.2
done

# When each slurmd was started by this run (0: it was running already).
declare -A STARTED_AT=()
STARTED_AT["$NODE"]=0
if ! pid_of slurmd >/dev/null; then
	STARTED_AT["$NODE"]="$(date +%s)"
	launch_daemon slurmd "$S_LOG/slurmd.out" slurmd -f "$S_CONF" -N "$NODE"
fi
# A multi node's slurmd runs in its network namespace (entered with nsenter:
# `ip netns exec` would remount /sys and hide /sys/fs/cgroup) and in a UTS
# namespace of its own whose hostname is the node's name; its jobs inherit
# both. It reads the slurm.conf in $S_ETC/NODE/.
for n in "${MULTI[@]}"; do
	STARTED_AT["$n"]=0
	pid_of "slurmd-$n" >/dev/null && continue
	STARTED_AT["$n"]="$(date +%s)"
	# shellcheck disable=SC2016 # $1 and $@ are sh's
	launch_daemon "slurmd-$n" "$S_LOG/slurmd-$n.out" \
		nsenter --net="/run/netns/$n" -- unshare --uts -- \
		sh -c 'hostname "$1" && shift && exec "$@"' sh "$n" \
		slurmd -f "$S_ETC/$n/slurm.conf" -N "$n"
done
# (started side by side, then waited for: each wait polls every 0.2 s)
if ((STARTED_AT["$NODE"])); then await_daemon slurmd "$S_LOG/slurmd.out"; fi
for n in "${MULTI[@]}"; do
	if ((STARTED_AT["$n"])); then await_daemon "slurmd-$n" "$S_LOG/slurmd-$n.out"; fi
done
# After a restart slurmctld restores the node's last state from its state
# files, so "idle" alone does not prove that the new slurmd has registered.
slurmd_registered() {
	local node="$1" t
	((STARTED_AT["$node"])) || return 0
	t="$(scontrol show node "$node" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)"
	[[ -n "$t" && "$t" != None ]] || return 1
	(($(date -d "$t" +%s 2>/dev/null || echo 0) >= STARTED_AT["$node"] - 1))
}
# wait_node NODE DAEMON: until the node is usable and its new slurmd (pid
# file DAEMON.pid) has registered, within the deadline $end.
wait_node() {
	local node="$1" daemon="$2" resumed=0 state
	until node_usable "$node" && slurmd_registered "$node"; do
		pid_of "$daemon" >/dev/null || die "$daemon exited" "$S_LOG/$daemon.log" "$S_LOG/$daemon.out" "$S_LOG/slurmctld.log"
		pid_of slurmctld >/dev/null || die "slurmctld exited" "$S_LOG/slurmctld.log" "$S_LOG/slurmctld.out"
		state="$(node_state "$node")"
		# A drained node (e.g. "Kill task failed", "Duplicate jobid") or one that
		# is down although its slurmd answers does not come back by itself:
		# resume it, once slurmd responds (no '*'; before that slurmctld answers
		# "Invalid node state specified").
		if ((resumed < 5)) && [[ "$state" != *'*' ]] && [[ "$state" == drain* || "$state" == down ]]; then
			warn "node $node is '$state' (reason: $(sinfo -h -N -n "$node" -o '%E' 2>/dev/null | awk 'NR == 1')); resuming it"
			scontrol update nodename="$node" state=resume || true
			resumed=$((resumed + 1))
		fi
		((SECONDS < end)) || die "node $node not usable within ${WAIT_S}s (state '$state')" "$S_LOG/$daemon.log" "$S_LOG/slurmctld.log"
		sleep 0.2
	done
}
wait_node "$NODE" slurmd
for n in "${MULTI[@]}"; do wait_node "$n" "slurmd-$n"; done

echo "$WANT_HASH" >"$S_RUN/applied"
healthy || die "cluster still unhealthy after start: $WHY" "${ALL_LOGS[@]}"
say "up in $(since "$T0")s (package install: ${APT_S}s)"
summary || true
