#!/usr/bin/env bash
# Stop the private sshd that scripts/sshd-up.sh started. See --help.
set -Eeuo pipefail

PROG="$(basename "$0" .sh)"
say() { printf '%s: %s\n' "$PROG" "$*"; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

usage() {
	cat <<EOF
Usage: scripts/sshd-down.sh [--keep-sessions] [--purge] [DIR]

Stops the sshd recorded in DIR/sshd.pid (DIR defaults to \$ORCH_SSHD_DIR,
else /tmp/orch-sshd) and, unless --keep-sessions, the per-connection sshd
processes it forked, so that open SSH sessions drop too. Nothing else is
touched: no other sshd, not the system one.

  --keep-sessions  stop only the listening sshd; open sessions stay up
  --purge          also delete DIR (only if it holds an sshd_config written
                   by scripts/sshd-up.sh) and its --second-factor PAM service
  -h, --help       this text
EOF
}

KEEP_SESSIONS=0
PURGE=0
DIR=""
while (($#)); do
	case "$1" in
	--keep-sessions) KEEP_SESSIONS=1 ;;
	--purge) PURGE=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	-*)
		usage >&2
		die "unknown option: $1"
		;;
	*)
		[[ -z "$DIR" ]] || die "only one DIR, got '$DIR' and '$1'"
		DIR="$1"
		;;
	esac
	shift
done
DIR="${DIR:-${ORCH_SSHD_DIR:-/tmp/orch-sshd}}"
DIR="${DIR%/}"

# Children of every pid, from one pass over /proc (no dependency on procps).
declare -A KIDS=()
index_children() {
	local stat line rest ppid child
	for stat in /proc/[0-9]*/stat; do
		{ read -r line <"$stat"; } 2>/dev/null || continue
		# Fields after the ")" that closes the command name: state ppid ...
		rest="${line##*) }"
		rest="${rest#* }"
		ppid="${rest%% *}"
		child="${stat#/proc/}"
		KIDS[$ppid]+=" ${child%/stat}"
	done
}

# Whether a pid is running (a zombie is not: it waits to be reaped by whoever adopted it).
running() {
	local line rest
	{ read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
	rest="${line##*) }"
	[[ "${rest%% *}" != Z ]]
}

# All descendants of a pid.
descendants() {
	local kid
	for kid in ${KIDS[$1]:-}; do
		echo "$kid"
		descendants "$kid"
	done
}

pid=""
if [[ -s "$DIR/sshd.pid" ]]; then
	pid="$(cat "$DIR/sshd.pid")"
	if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null || ! grep -q sshd "/proc/$pid/cmdline" 2>/dev/null; then
		pid=""
	fi
fi

if [[ -z "$pid" ]]; then
	say "no sshd running for $DIR"
else
	victims=()
	if ((!KEEP_SESSIONS)); then
		index_children
		mapfile -t victims < <(descendants "$pid")
	fi
	kill -TERM "$pid" 2>/dev/null || true
	if ((${#victims[@]})); then
		kill -TERM "${victims[@]}" 2>/dev/null || true
	fi
	for _ in $(seq 50); do
		alive=0
		for p in "$pid" "${victims[@]}"; do
			running "$p" && alive=1
		done
		((alive)) || break
		sleep 0.1
	done
	for p in "$pid" "${victims[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	rm -f "$DIR/sshd.pid"
	say "stopped sshd (pid $pid) and ${#victims[@]} session process(es)"
fi

if ((PURGE)) && [[ -d "$DIR" ]]; then
	if grep -q '^# Written by scripts/sshd-up.sh' "$DIR/sshd_config" 2>/dev/null; then
		# The PAM service of --second-factor, if this DIR has one.
		pam_file="/etc/pam.d/orch-sshd-$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)"
		if [[ -f "$pam_file" ]] && grep -qF "for $DIR;" "$pam_file"; then
			rm -f "$pam_file" && say "deleted $pam_file"
		fi
		rm -rf "$DIR"
		say "deleted $DIR"
	else
		die "not deleting $DIR: it has no sshd_config written by scripts/sshd-up.sh"
	fi
fi
