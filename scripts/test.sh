#!/usr/bin/env bash
# The whole test suite, with its set-up: run from anywhere, on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --all-targets
cargo test --all-targets -- --test-threads="${ORCH_TEST_THREADS:-4}"
