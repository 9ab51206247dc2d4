#!/usr/bin/env bash
# Install the real trainers' config code for the test suite (crates/orch/tests/trainer_configs.rs):
# verl 0.9.1 + genrl 0.1.11 in one virtual environment, AReaL 1.0.4 in another (it pins its own
# pre-release Hydra), each from its pinned requirements file in tools/trainer-configs/, with
# `--no-deps` so no GPU package (torch, vLLM, SGLang) is installed; the modules their config
# code imports but never uses are answered by tools/trainer-configs/stubs.py. A third
# environment holds Ray (CPU) for the two-node verl test in tests/slurm.rs. Also installs
# shellcheck. Idempotent: an environment whose requirements file has not changed is kept.
#
#   scripts/trainer-configs-up.sh        (ORCH_TRAINER_VENVS=dir to put them elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
root="${ORCH_TRAINER_VENVS:-$PWD/target/trainer-configs}"
mkdir -p "$root"
for name in verl areal ray; do
    req="tools/trainer-configs/requirements-$name.txt"
    venv="$root/$name"
    if [ -f "$venv/requirements.txt" ] && cmp -s "$req" "$venv/requirements.txt"; then
        continue
    fi
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$req"
    cp "$req" "$venv/requirements.txt"
done
if ! command -v shellcheck >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
    else
        echo "scripts/trainer-configs-up.sh: shellcheck is missing; install it (apt-get install shellcheck)" >&2
        exit 1
    fi
fi
echo "trainer config code ready in $root"
