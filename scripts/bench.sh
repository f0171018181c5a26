#!/usr/bin/env bash
# Benchmarks, side by side in one run (release build): prints their rows and writes them into BENCHMARKS.md in place
# (one table at the top, each row's details under it; each bench's section opens with a paragraph it writes, the
# AWS-calls section up to its table; the paragraphs written by hand after those are kept). Starts what it
# measures against: the local llama.cpp engine (8 slots), the moto SQS/S3 emulator (three of them), the SQS/S3
# stand-in (aws-stand-in, where moto is the bound), the engine simulator (8, 64 and 256 slots) and, for the baselines, the AWS CLI (PyPI awscli) and a Python +
# boto3 router; profiles the worker with valgrind's callgrind when valgrind is installed. Last, the OpenAI layer's
# row (O1, scripts/bench/responses_layer.py) with the official OpenAI Python client (scripts/openai-client.sh).
# Run it on an otherwise idle machine: it takes about 25 minutes after the release build.
#
# GPUINFER_BENCH_ROWS=sim-8,sqs-sim-8 (row ids, benches/pipeline.rs lists them) measures only those rows of the
# pipeline benchmark and writes them (table line and details item) in place; the other benches do not run. The id o1
# there measures the row O1, and p7 the saturation benchmark's rows (P7, P8).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CACHE="${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}"
ENGINE_PORT="${BENCH_ENGINE_PORT:-18100}"
MOTO_PORT="${BENCH_MOTO_PORT:-15100}"
WORKER_MOTO_PORT="${BENCH_WORKER_MOTO_PORT:-15101}"
# The worker's S3: a moto of its own beside the one for its SQS (moto is one Python process, on one core at a time).
WORKER_S3_MOTO_PORT="${BENCH_WORKER_S3_MOTO_PORT:-15102}"
# The AWS-calls section's moto; the 9 ports after it are its counter's, routers' and webhook receiver's.
AWS_CALLS_MOTO_PORT="${BENCH_AWS_CALLS_MOTO_PORT:-15110}"
AWSCLI_PIN="awscli==1.46.3"
ROWS="${GPUINFER_BENCH_ROWS:-}"
# o1 is scripts/bench/responses_layer.py's row, not one of benches/pipeline.rs's: the other ids go to the pipeline
# benchmark, which runs where any is left (or none was named).
run_o1=true run_p7=true run_pipeline=true pipeline_rows=""
if [[ -n ${ROWS//[ ,]/} ]]; then
    run_o1=false run_p7=false
    IFS=, read -ra named <<<"${ROWS// /}"
    for id in "${named[@]}"; do
        case $id in
            o1) run_o1=true ;;
            p7) run_p7=true ;;
            ?*) pipeline_rows+="${pipeline_rows:+,}$id" ;;
        esac
    done
    [[ -n $pipeline_rows ]] || run_pipeline=false
fi
# The local llama.cpp engine: for every run, and for a selection of rows only where one of them runs on it.
needs_engine=true
if [[ -n ${ROWS//[ ,]/} && ! ,${ROWS// /}, =~ ,(llama|sqs-llama|p7), ]]; then needs_engine=false; fi

stop_services() {
    if $needs_engine; then scripts/local-engine.sh stop --port "$ENGINE_PORT" || true; fi
    scripts/aws-emulator.sh stop --port "$MOTO_PORT" || true
    scripts/aws-emulator.sh stop --port "$WORKER_MOTO_PORT" || true
    scripts/aws-emulator.sh stop --port "$WORKER_S3_MOTO_PORT" || true
}
trap stop_services EXIT
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
target_dir="${CARGO_TARGET_DIR:-target}"
[[ $target_dir == /* ]] || target_dir="$PWD/$target_dir"
# O1, the OpenAI layer: background responses through the official OpenAI Python client (pinned, its venv from
# scripts/openai-client.sh) ÷ POST /infer + GET /results on the same `gpuinfer dev` and requests, on the engine
# simulator (8 slots), both sides driven from Python with the client's own HTTP library. Its row and details item
# are written in place, last.
responses_layer() {
    "$(scripts/openai-client.sh install)" scripts/bench/responses_layer.py --gpuinfer "$target_dir/release/gpuinfer" \
        --simulator "$target_dir/release/engine-simulator" --write BENCHMARKS.md
}
# P7 and P8: benches/saturation.rs, on the engine simulator and the local llama.cpp engine.
saturation() {
    BENCH_LOCAL_ENGINE_URL="http://127.0.0.1:$ENGINE_PORT" cargo bench --locked --bench saturation -- --write BENCHMARKS.md
}
if ! $run_pipeline; then
    if $run_p7; then
        scripts/local-engine.sh start --port "$ENGINE_PORT" --slots 8
        saturation
    fi
    if $run_o1; then
        # The two binaries O1 runs, in release (a pipeline run's `cargo bench` builds them).
        cargo build --release --locked --features test-support --bin gpuinfer --bin engine-simulator
        responses_layer
    fi
    exit 0
fi
scripts/aws-emulator.sh start --port "$MOTO_PORT"
# The SQS and the S3 of the worker runs on SQS + S3 (P1, P6): two motos of their own, one for SQS and one for S3
# (the worker is given both endpoints, AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_S3), so the emulator is not one
# Python process on one core; S3 stays one process, as a bucket cannot be split between motos. Both run under
# SCHED_IDLE, a priority below nice 19 (sched(7)), so they run on the CPU time the engine leaves. On AWS neither
# runs on the GPU host; here moto shares the engine's 2 cores, and CPU it took from the engine would be charged to
# the pipeline. Its calls may get slower instead, which the pipeline has to hide.
for port in "$WORKER_MOTO_PORT" "$WORKER_S3_MOTO_PORT"; do
    chrt --idle 0 scripts/aws-emulator.sh start --port "$port"
    # With the kernel's autogroups (sched(7): /proc/sys/kernel/sched_autogroup_enabled), the CPU is shared between
    # sessions first, and a thread's policy or nice value counts only against threads of its own session: moto, in
    # a session of its own, would still get an equal share beside the engine. Its session goes to nice 19 as well
    # (the lowest weight an autogroup can have).
    worker_moto_pid=$(cat "$CACHE/moto-$port.pid")
    if [[ -w /proc/$worker_moto_pid/autogroup ]]; then echo 19 >"/proc/$worker_moto_pid/autogroup"; fi
done
if $needs_engine; then scripts/local-engine.sh start --port "$ENGINE_PORT" --slots 8; fi
# grep without -q reads pip's whole output: with -q it may exit first, pip dies of SIGPIPE and pipefail
# fails the check.
if ! "$CACHE/awscli-venv/bin/python" -m pip freeze 2>/dev/null | grep -x "$AWSCLI_PIN" >/dev/null; then
    echo "bench: installing $AWSCLI_PIN into $CACHE/awscli-venv (once)"
    python3 -m venv "$CACHE/awscli-venv"
    "$CACHE/awscli-venv/bin/python" -m pip install -q --disable-pip-version-check "$AWSCLI_PIN"
fi

export BENCH_LOCAL_ENGINE_URL="http://127.0.0.1:$ENGINE_PORT"
export BENCH_MOTO_URL="http://127.0.0.1:$MOTO_PORT"
export BENCH_WORKER_MOTO_URL="http://127.0.0.1:$WORKER_MOTO_PORT"
export BENCH_WORKER_S3_MOTO_URL="http://127.0.0.1:$WORKER_S3_MOTO_PORT"
export BENCH_PYTHON="$CACHE/moto-venv/bin/python"   # Python 3.11 with boto3 (moto depends on it)
export BENCH_AWS_CLI="$CACHE/awscli-venv/bin/aws"
# The inference container's build, as the Dockerfile makes it (for this host, with glibc; the image's is static,
# with musl): the worker as deployed, for P1 on SQS + S3 and P6.
cargo build --profile container --locked --bin gpuinfer --no-default-features
export BENCH_CONTAINER_GPUINFER="$target_dir/container/gpuinfer"
# Line tables and symbols in the benchmark build, so the P3 profile (valgrind's callgrind) can name functions and
# crates; neither changes the code, nor any page the processes load.
export CARGO_PROFILE_BENCH_DEBUG=line-tables-only CARGO_PROFILE_BENCH_STRIP=false
GPUINFER_BENCH_ROWS="$pipeline_rows" cargo bench --locked --bench pipeline -- --write BENCHMARKS.md
if [[ -n ${ROWS//[ ,]/} ]]; then
    if $run_p7; then saturation; fi
    if $run_o1; then responses_layer; fi
    exit 0
fi
# Each writes its rows (table and details) and its section's first paragraph into BENCHMARKS.md in place.
saturation
cargo bench --locked --bench zero_idle -- --write BENCHMARKS.md
cargo bench --locked --bench batch_api -- --write BENCHMARKS.md
# AWS calls and price per request: every SQS, S3, CloudWatch, ECS and Lambda call of our router, worker and scaler and
# of the AWS sample's own code on the same requests, counted through a recording proxy in front of a moto of its own
# (started and stopped by the script), with the binaries `cargo bench` built (the counts do not depend on the build).
"$BENCH_PYTHON" scripts/bench/aws_calls.py --gpuinfer "$target_dir/release/gpuinfer" \
    --simulator "$target_dir/release/engine-simulator" --build "release build (\`cargo bench\`'s)" \
    --moto-port "$AWS_CALLS_MOTO_PORT" --port-base "$((AWS_CALLS_MOTO_PORT + 1))" --write BENCHMARKS.md
# Spot, modelled: simulate's Spot table on its default trace, its assumptions stated with it.
"$BENCH_PYTHON" scripts/bench/spot_model.py --gpuinfer "$target_dir/release/gpuinfer" --write BENCHMARKS.md
responses_layer
