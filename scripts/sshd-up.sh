#!/usr/bin/env bash
# Bring up (or check) a throwaway OpenSSH server on 127.0.0.1 for orch's SSH
# tests. Idempotent. See --help.
set -Eeuo pipefail

PROG="$(basename "$0" .sh)"
say() { printf '%s: %s\n' "$PROG" "$*"; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

usage() {
	cat <<EOF
Usage: scripts/sshd-up.sh [--second-factor CODE] [--chatty-login] [--exit-with PID] [DIR]

Starts a private sshd (not the system one) listening on 127.0.0.1 only, with
everything it needs in DIR (default \$ORCH_SSHD_DIR, else /tmp/orch-sshd):

  DIR/sshd_config, DIR/ssh_host_{ed25519,ecdsa}_key   server config and keys
  DIR/sshd.pid, DIR/sshd.log                          pid file, server log
  DIR/login-home/                                     the login shell's HOME (SetEnv),
                                                      with a quiet .bashrc
  DIR/authorized_keys                                 the client keys below
  DIR/home/                                           a ready-made client HOME:
    .ssh/id_ed25519           client key, no passphrase
    .ssh/id_ed25519_pass      client key, passphrase "orch-test-passphrase"
    .ssh/known_hosts          the server's keys as [127.0.0.1]:PORT
    .ssh/config               Host orch-test (direct) and
                              Host orch-jump-test (ProxyJump orch-test)

Installs openssh-server (apt-get) if /usr/sbin/sshd is missing. Keys are made
once and kept; the config is rewritten each time, and a running server whose
config changed is restarted. Waits until the port answers with an SSH banner.

  --second-factor CODE
                   behave like a login node with two-factor authentication:
                   a key, then keyboard-interactive asking (through PAM) for
                   CODE (AuthenticationMethods publickey,keyboard-interactive).
                   Needs root: writes the PAM service /etc/pam.d/orch-sshd-N
                   (N: a checksum of DIR), removed by sshd-down.sh --purge.
                   Without this option a previous one's PAM file is removed.
  --chatty-login   the login shell's .bashrc prints a banner to stdout and a
                   module system's warning to stderr on every command, as some
                   clusters' do (default: a quiet one)
  --exit-with PID  also start a watcher that stops this sshd and deletes DIR
                   once process PID has exited (used by the test suite)
  -h, --help       this text

Environment: ORCH_SSHD_PORT (default 2222), ORCH_SSHD_DIR, ORCH_SSHD_WAIT
(seconds to wait for the port, default 20). Stop it with scripts/sshd-down.sh.
Try it: ssh -F DIR/home/.ssh/config orch-test true
EOF
}

EXIT_WITH=""
SECOND_FACTOR=""
CHATTY_LOGIN=""
DIR=""
while (($#)); do
	case "$1" in
	--second-factor)
		[[ $# -ge 2 && -n "$2" ]] || die "--second-factor needs a CODE"
		SECOND_FACTOR="$2"
		shift
		;;
	--chatty-login)
		CHATTY_LOGIN=1
		;;
	--exit-with)
		[[ $# -ge 2 ]] || die "--exit-with needs a PID"
		EXIT_WITH="$2"
		shift
		;;
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
PORT="${ORCH_SSHD_PORT:-2222}"
WAIT="${ORCH_SSHD_WAIT:-20}"
if ! [[ "$PORT" =~ ^[0-9]+$ ]] || ((PORT < 1 || PORT > 65535)); then die "ORCH_SSHD_PORT must be a port number, got '$PORT'"; fi
[[ -z "$EXIT_WITH" || "$EXIT_WITH" =~ ^[0-9]+$ ]] || die "--exit-with needs a numeric PID, got '$EXIT_WITH'"
SSHD=/usr/sbin/sshd
if [[ -n "$SECOND_FACTOR" && "$(id -u)" -ne 0 ]]; then
	die "--second-factor needs root (it writes a PAM service in /etc/pam.d)"
fi
LOGIN_USER="$(id -un)"

# ----------------------------------------------------------------- install ---
if [[ ! -x "$SSHD" ]] || ! command -v ssh-keygen >/dev/null; then
	[[ "$(id -u)" -eq 0 ]] || die "$SSHD is missing; install openssh-server (needs root)"
	say "installing openssh-server openssh-client"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null || die "apt-get update failed"
	apt-get install -y -qq openssh-server openssh-client >/dev/null || die "apt-get install openssh-server failed"
fi
# Privilege separation directory; sshd refuses to start without it.
if [[ ! -d /run/sshd ]]; then
	mkdir -p /run/sshd 2>/dev/null || die "cannot create /run/sshd (run as root)"
	chmod 0755 /run/sshd
fi

# -------------------------------------------------------------------- keys ---
mkdir -p "$DIR" "$DIR/home/.ssh"
chmod 0700 "$DIR/home/.ssh"
DIR="$(cd "$DIR" && pwd)"
HOME_DIR="$DIR/home"

keygen() { # keygen TYPE FILE PASSPHRASE COMMENT
	[[ -s "$2" && -s "$2.pub" ]] && return 0
	rm -f "$2" "$2.pub"
	ssh-keygen -q -t "$1" -N "$3" -C "$4" -f "$2" || die "ssh-keygen -t $1 -f $2 failed"
}
keygen ed25519 "$DIR/ssh_host_ed25519_key" "" "orch-sshd host key"
keygen ecdsa "$DIR/ssh_host_ecdsa_key" "" "orch-sshd host key"
keygen ed25519 "$HOME_DIR/.ssh/id_ed25519" "" "orch-test client"
keygen ed25519 "$HOME_DIR/.ssh/id_ed25519_pass" "orch-test-passphrase" "orch-test client with passphrase"
cat "$HOME_DIR/.ssh/id_ed25519.pub" "$HOME_DIR/.ssh/id_ed25519_pass.pub" >"$DIR/authorized_keys"
chmod 0600 "$DIR/authorized_keys"

# ------------------------------------------------------------------ config ---
write_if_changed() { # write_if_changed FILE < content; returns 0 if it changed
	local tmp
	tmp="$(mktemp "$1.XXXXXX")"
	cat >"$tmp"
	if [[ -f "$1" ]] && cmp -s "$tmp" "$1"; then
		rm -f "$tmp"
		return 1
	fi
	mv -f "$tmp" "$1"
}

# ----------------------------------------------------------- second factor ---
# sshd names its PAM service after its program name, so a link DIR/orch-sshd-N to sshd
# gets the PAM service orch-sshd-N, whose only auth module compares the answer to CODE.
PAM_SERVICE="orch-sshd-$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)"
PAM_FILE="/etc/pam.d/$PAM_SERVICE"
SSHD_RUN="$SSHD"
if [[ -n "$SECOND_FACTOR" ]]; then
	printf '%s\n' "$SECOND_FACTOR" >"$DIR/second-factor"
	chmod 0600 "$DIR/second-factor"
	cat >"$DIR/check-second-factor.sh" <<EOF
#!/bin/sh
# Run by pam_exec with the answer on stdin (NUL-terminated). Written by scripts/sshd-up.sh.
answer=\$(head -c 4096 | tr -d '\\000')
[ "\$answer" = "\$(cat '$DIR/second-factor')" ]
EOF
	chmod 0755 "$DIR/check-second-factor.sh"
	cat >"$PAM_FILE" <<EOF
# Written by scripts/sshd-up.sh for $DIR; removed by scripts/sshd-down.sh --purge.
auth     required pam_exec.so expose_authtok quiet $DIR/check-second-factor.sh
# pam_exec ignores pam_setcred; without a module that succeeds there, login fails.
auth     optional pam_permit.so
account  required pam_permit.so
session  required pam_permit.so
EOF
	ln -sfn "$SSHD" "$DIR/$PAM_SERVICE"
	SSHD_RUN="$DIR/$PAM_SERVICE"
	# PAM is not asked for root's answers under prohibit-password: sshd feeds it a bad one.
	AUTH_CONFIG="PermitRootLogin yes
UsePAM yes
KbdInteractiveAuthentication yes
AuthenticationMethods publickey,keyboard-interactive"
else
	if [[ -f "$PAM_FILE" ]] && grep -qF "for $DIR;" "$PAM_FILE"; then
		rm -f "$PAM_FILE"
	fi
	rm -f "$DIR/$PAM_SERVICE" "$DIR/second-factor" "$DIR/check-second-factor.sh"
	AUTH_CONFIG="PermitRootLogin prohibit-password
UsePAM no
KbdInteractiveAuthentication no"
fi

# The login shell's HOME: a directory of its own, with a quiet .bashrc. bash sources ~/.bashrc
# for commands run over ssh, and this machine's own (root's, say) may print to stderr: pyenv's
# `init` rehashes on every login and, with the suite's logins racing, says "pyenv: cannot
# rehash" into the remote command's stderr, which the tests compare byte for byte.
LOGIN_HOME="$DIR/login-home"
mkdir -p "$LOGIN_HOME"
if [[ -n "$CHATTY_LOGIN" ]]; then
	cat >"$LOGIN_HOME/.bashrc" <<'EOF'
# Written by scripts/sshd-up.sh --chatty-login: a login node that talks on every command.
echo "Welcome to the login node. Scratch is purged after 30 days."
echo "Lmod has detected the following error: The following module(s) are unknown: \"cuda/12\"" >&2
EOF
else
	printf '# Written by scripts/sshd-up.sh: the test sshd login shell starts quiet.\n' >"$LOGIN_HOME/.bashrc"
fi

CONFIG_CHANGED=0
write_if_changed "$DIR/sshd_config" <<EOF && CONFIG_CHANGED=1
# Written by scripts/sshd-up.sh; rewritten on each run.
Port $PORT
ListenAddress 127.0.0.1
AddressFamily inet
HostKey $DIR/ssh_host_ed25519_key
HostKey $DIR/ssh_host_ecdsa_key
PidFile $DIR/sshd.pid
AuthorizedKeysFile $DIR/authorized_keys
AllowUsers $LOGIN_USER
$AUTH_CONFIG
PubkeyAuthentication yes
PasswordAuthentication no
StrictModes no
UseDNS no
AllowTcpForwarding yes
PermitTunnel no
X11Forwarding no
PrintMotd no
Subsystem sftp internal-sftp
MaxStartups 200:30:400
MaxSessions 100
LoginGraceTime 30
SetEnv HOME=$LOGIN_HOME
LogLevel VERBOSE
EOF

key_line() { cut -d' ' -f1,2 "$1"; }
{
	printf '[127.0.0.1]:%s %s\n' "$PORT" "$(key_line "$DIR/ssh_host_ed25519_key.pub")"
	printf '[127.0.0.1]:%s %s\n' "$PORT" "$(key_line "$DIR/ssh_host_ecdsa_key.pub")"
} >"$HOME_DIR/.ssh/known_hosts"

cat >"$HOME_DIR/.ssh/config" <<EOF
# Written by scripts/sshd-up.sh for the sshd in $DIR.
# Paths are absolute so that plain OpenSSH can use it too:
#   ssh -F $HOME_DIR/.ssh/config orch-test true
Host orch-test
    HostName 127.0.0.1
    Port $PORT
    User $LOGIN_USER
    IdentityFile $HOME_DIR/.ssh/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $HOME_DIR/.ssh/known_hosts

Host orch-jump-test
    HostName 127.0.0.1
    Port $PORT
    User $LOGIN_USER
    IdentityFile $HOME_DIR/.ssh/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $HOME_DIR/.ssh/known_hosts
    ProxyJump orch-test
EOF
chmod 0600 "$HOME_DIR/.ssh/config" "$HOME_DIR/.ssh/known_hosts"

# ------------------------------------------------------------------- start ---
running_pid() { # prints the pid of our sshd if it is running
	local pid
	[[ -s "$DIR/sshd.pid" ]] || return 1
	pid="$(cat "$DIR/sshd.pid")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	# The pid may have been reused by another program since.
	grep -q sshd "/proc/$pid/cmdline" 2>/dev/null || return 1
	echo "$pid"
}

banner_ok() { # the port answers with an SSH banner
	# shellcheck disable=SC2016 # $1 expands in the inner shell
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && head -c 4 <&3' _ "$PORT" 2>/dev/null | grep -q '^SSH-'
}

"$SSHD_RUN" -t -f "$DIR/sshd_config" || die "sshd rejects $DIR/sshd_config (see above)"

if pid="$(running_pid)"; then
	if ((CONFIG_CHANGED)); then
		say "config changed; restarting sshd (pid $pid)"
		"$(dirname "$0")/sshd-down.sh" "$DIR" >/dev/null
	elif banner_ok; then
		say "already running (pid $pid) on 127.0.0.1:$PORT"
	else
		say "sshd (pid $pid) does not answer on port $PORT; restarting"
		"$(dirname "$0")/sshd-down.sh" "$DIR" >/dev/null
	fi
fi

if ! running_pid >/dev/null; then
	rm -f "$DIR/sshd.pid"
	"$SSHD_RUN" -f "$DIR/sshd_config" -E "$DIR/sshd.log" || {
		tail -n 20 "$DIR/sshd.log" >&2 2>/dev/null || true
		die "sshd did not start"
	}
	deadline=$((SECONDS + WAIT))
	until banner_ok; do
		if ((SECONDS >= deadline)); then
			tail -n 20 "$DIR/sshd.log" >&2 2>/dev/null || true
			die "sshd did not answer on 127.0.0.1:$PORT within ${WAIT}s (port taken? see $DIR/sshd.log)"
		fi
		sleep 0.1
	done
	pid="$(running_pid)" || die "sshd answers on port $PORT but $DIR/sshd.pid names no running sshd (another server on that port?)"
	say "started sshd (pid $pid) on 127.0.0.1:$PORT"
fi

if [[ -n "$EXIT_WITH" ]]; then
	# A watcher in its own session, so that it outlives this script.
	# shellcheck disable=SC2016 # $1..$3 expand in the inner shell
	setsid bash -c '
		while kill -0 "$1" 2>/dev/null; do sleep 1; done
		"$2" --purge "$3" >/dev/null 2>&1
	' _ "$EXIT_WITH" "$(cd "$(dirname "$0")" && pwd)/sshd-down.sh" "$DIR" </dev/null >/dev/null 2>&1 &
	say "will stop it and delete $DIR when process $EXIT_WITH exits"
fi

cat <<EOF
$PROG: made in $DIR:
  server config   $DIR/sshd_config (log: $DIR/sshd.log)${SECOND_FACTOR:+
  second factor   keyboard-interactive code in $DIR/second-factor (PAM service $PAM_SERVICE)}
  client HOME     $HOME_DIR
  ssh config      $HOME_DIR/.ssh/config (Host orch-test, Host orch-jump-test)
  client key      $HOME_DIR/.ssh/id_ed25519 (user $LOGIN_USER)
  known_hosts     $HOME_DIR/.ssh/known_hosts
  try:            ssh -F $HOME_DIR/.ssh/config orch-test true
EOF
