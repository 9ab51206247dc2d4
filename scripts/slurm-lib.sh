# shellcheck shell=bash disable=SC2034
# Shared helpers for scripts/slurm-up.sh and scripts/slurm-down.sh.
# Sourced, never executed. See docs/TEST-CLUSTER.md.

# ---------------------------------------------------------------- layout ---
ORCH_SLURM_DIR="${ORCH_SLURM_DIR:-/var/lib/orch-slurm}"
# Strip a trailing slash so that paths compare equal.
ORCH_SLURM_DIR="${ORCH_SLURM_DIR%/}"
SD="$ORCH_SLURM_DIR"
S_ETC="$SD/etc"
S_RUN="$SD/run"
S_LOG="$SD/log"
S_STATE="$SD/state"
S_SPOOL="$SD/spool"
S_DEV="$SD/dev"
S_DB="$SD/mysql"
S_CONF="$S_ETC/slurm.conf"
S_CLUSTER="orch"
# Where client commands look by default (compiled into Debian's Slurm).
S_SYS_CONF="/etc/slurm/slurm.conf"
# MariaDB (accounting mode only) listens on 127.0.0.1 on this port.
S_DB_PORT="${ORCH_SLURM_DB_PORT:-3307}"
S_DB_SOCK="$S_RUN/mysqld/mysqld.sock"
S_DB_PASS="orch-slurm"

export SLURM_CONF="$S_CONF"

# The two-node partition "multi" (docs/TEST-CLUSTER.md, "The multi partition"):
# node orch-nI is a slurmd in network namespace orch-nI (own UTS namespace,
# hostname orch-nI) whose eth0 is a veth to the bridge $S_BR on this machine.
# Addresses: bridge $S_NET.1, node I $S_NET.(10+I). /etc/hosts names them.
S_MULTI_N="${ORCH_SLURM_MULTI_NODES:-2}"
S_NET="${ORCH_SLURM_MULTI_NET:-10.250.0}"
S_BR="orch-br0"
S_NS_PREFIX="orch-n"
S_HOSTS=/etc/hosts
S_HOSTS_BEGIN="# BEGIN orch-slurm multi partition (scripts/slurm-up.sh; removed by slurm-down.sh --purge)"
S_HOSTS_END="# END orch-slurm multi partition"

S_PROG="$(basename "$0" .sh)"

# --------------------------------------------------------------- logging ---
# A reader that goes away (slurm-up.sh | head -1) must not kill us half-way
# through a start: ignore SIGPIPE and let writes fail instead. Daemons are
# started with `trap - PIPE` so that they (and jobs) get the default back.
trap '' PIPE
say() { printf '%s: %s\n' "$S_PROG" "$*" 2>/dev/null || true; }
warn() { printf '%s: WARNING: %s\n' "$S_PROG" "$*" >&2 2>/dev/null || true; }

# Print the last lines of each existing log file given, to stderr.
show_logs() {
	local f
	for f in "$@"; do
		[[ -f "$f" ]] || continue
		printf '\n----- last 40 lines of %s -----\n' "$f" >&2
		tail -n 40 "$f" >&2 || true
		printf -- '----- end of %s -----\n' "$f" >&2
	done
}

# die MESSAGE [LOGFILE...]: print the message and the logs' tails, exit 1.
die() {
	local msg="$1"
	shift
	printf '\n%s: ERROR: %s\n' "$S_PROG" "$msg" >&2
	show_logs "$@"
	printf '%s: FAILED: %s\n' "$S_PROG" "$msg" >&2
	exit 1
}

require_root() {
	if [[ "$(id -u)" != 0 ]]; then
		die "must run as root (try: sudo $0)"
	fi
}

# ------------------------------------------------------------- processes ---
# pid_of NAME: the pid recorded in $S_RUN/NAME.pid if that process is alive
# and its command name starts with NAME (guards against a reused pid);
# prints nothing and fails otherwise.
pid_of() {
	local name="$1" f="$S_RUN/$1.pid" pid comm
	[[ -r "$f" ]] || return 1
	read -r pid <"$f" 2>/dev/null || return 1
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/$pid/comm" ]] || return 1
	read -r comm <"/proc/$pid/comm" 2>/dev/null || return 1
	# /proc/PID/comm is cut at 15 characters.
	[[ "$name" == "$comm"* || "$comm" == "$name"* ]] || return 1
	# A zombie is not alive.
	[[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
	printf '%s\n' "$pid"
}

# stop_daemon NAME [TIMEOUT]: SIGTERM the process recorded in NAME.pid, wait
# up to TIMEOUT seconds (default 15), then SIGKILL. Removes the pid file.
stop_daemon() {
	local name="$1" timeout="${2:-15}" pid i
	if ! pid="$(pid_of "$name")"; then
		rm -f "$S_RUN/$name.pid"
		return 0
	fi
	say "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < timeout * 10; i++)); do
		[[ -d "/proc/$pid" ]] || break
		# Exited but not yet reaped by anyone: good enough.
		[[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || break
		sleep 0.1
	done
	if [[ -d "/proc/$pid" ]] && [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]; then
		warn "$name (pid $pid) did not exit after ${timeout}s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	rm -f "$S_RUN/$name.pid"
}

# --------------------------------------------------------------- helpers ---
# since EPOCHREALTIME-VALUE: seconds elapsed, one decimal.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

node_name() { hostname -s; }

# Accounting requested? (env ORCH_SLURM_ACCOUNTING=1/yes/true/on)
truthy() {
	case "${1,,}" in
	1 | y | yes | true | on) return 0 ;;
	*) return 1 ;;
	esac
}

# ------------------------------------------------- multi-node partition ---
# multi_nodes: the wanted multi node names, one a line (none when
# ORCH_SLURM_MULTI_NODES=0).
multi_nodes() {
	local i
	for ((i = 1; i <= S_MULTI_N; i++)); do echo "$S_NS_PREFIX$i"; done
}

# multi_addr NODE: the node's address (orch-n2 -> $S_NET.12).
multi_addr() { printf '%s.%d\n' "$S_NET" "$((10 + ${1#"$S_NS_PREFIX"}))"; }

# The host end of a node's veth pair (the other end is eth0 in its netns).
multi_veth() { printf 'orchv-%s\n' "${1#orch-}"; }

# existing_multi_netns: our network namespaces that exist now, one a line.
existing_multi_netns() {
	local f
	for f in /run/netns/"$S_NS_PREFIX"*; do
		[[ -e "$f" && "${f##*/}" =~ ^${S_NS_PREFIX}[0-9]+$ ]] && echo "${f##*/}"
	done
	return 0
}

# multi_hosts_block: what /etc/hosts should hold between our markers
# (nothing at all when there are no multi nodes).
multi_hosts_block() {
	local n
	((S_MULTI_N > 0)) || return 0
	printf '%s\n' "$S_HOSTS_BEGIN"
	for n in $(multi_nodes); do printf '%s\t%s\n' "$(multi_addr "$n")" "$n"; done
	printf '%s\n' "$S_HOSTS_END"
}

# hosts_without_block: /etc/hosts less our block.
hosts_without_block() {
	awk -v b="$S_HOSTS_BEGIN" -v e="$S_HOSTS_END" '$0 == b { skip = 1 } !skip { print } $0 == e { skip = 0 }' "$S_HOSTS"
}

# write_hosts_block write|remove: rewrite our block at the end of /etc/hosts,
# or remove it; in place (the file may be a bind mount: never replaced by
# rename).
write_hosts_block() {
	local text
	text="$(hosts_without_block)"
	if [[ "$1" == write ]]; then text+=$'\n'"$(multi_hosts_block)"; fi
	printf '%s\n' "${text%$'\n'}" >"$S_HOSTS"
}

# multi_net_down [KEEP...]: delete our namespaces (but those named), their
# veths and, when none is left, the bridge. A namespace with processes still
# in it (jobs' slurmstepd) is kept, with a warning.
multi_net_down() {
	local ns pids left=$#
	for ns in $(existing_multi_netns); do
		[[ " $* " != *" $ns "* ]] || continue
		pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
		if [[ -n "${pids// /}" ]]; then
			warn "network namespace $ns kept: processes still run in it (pids: $pids)"
			left=$((left + 1))
			continue
		fi
		ip link del "$(multi_veth "$ns")" 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
		say "removed network namespace $ns"
	done
	if ((!left)) && ip link show "$S_BR" >/dev/null 2>&1; then
		ip link del "$S_BR" 2>/dev/null || true
		say "removed bridge $S_BR"
	fi
}
