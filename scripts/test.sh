#!/usr/bin/env bash
# The whole test suite with its set-up, from any directory, on a fresh machine: installs and
# starts the Slurm test cluster (scripts/slurm-up.sh: one node, and the two-node partition
# multi) and the loopback sshd (scripts/sshd-up.sh) the end-to-end tests use, then builds and
# runs every test.
# Needs root (it installs Debian packages and starts daemons).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/test.sh needs root: it installs and starts the test Slurm cluster and sshd (try sudo)" >&2
    exit 1
fi
# The node declares more memory than the machine has (Slurm takes it on trust), so jobs that ask
# for a profile's --mem (hundreds of GB) can run side by side.
export ORCH_SLURM_MEM_MB="${ORCH_SLURM_MEM_MB:-16777216}"
scripts/slurm-up.sh --defaults
# The SSH tests start their own sshd on loopback (scripts/sshd-up.sh); install it once here so
# parallel tests do not race for apt's lock.
if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >/dev/null
fi
# ssh2's libssh2 links OpenSSL.
if ! dpkg -s libssl-dev pkg-config >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev pkg-config >/dev/null
fi
# tests/report.rs opens `orch report`'s page in a real browser: Debian's headless Chromium.
if ! command -v chromium >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# The real trainers' config code (verl, AReaL, genrl; no GPU packages) and shellcheck, which
# tests/trainer_configs.rs gives every rendered script to.
scripts/trainer-configs-up.sh
# Both tiers: plain `cargo test` is the first (unit tests, local backend, simulator); the
# `services` features add the Slurm, SSH and crash suites that need the services started above.
cargo build --locked --workspace --all-targets --all-features
# Most tests wait on simulated jobs, not the CPU: run several at a time.
cargo test --locked --workspace --all-targets --all-features -- --test-threads="${ORCH_TEST_THREADS:-6}"
# What tests/report.rs left for a person (CI keeps it as an artefact): the demo run's page and
# its screenshot in headless Chromium.
echo "orch report of the demo run: ${CARGO_TARGET_DIR:-target}/report/diamonds-seed0.html and .png"
