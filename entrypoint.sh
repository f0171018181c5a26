#!/usr/bin/env bash
# Inference container start: model weights → engine (vLLM) → gpuinfer worker, supervised together.
# SIGTERM (ECS stopping the task) drains the worker first (requests in flight finish, their results
# are stored), then stops the engine. If either process dies, the other is stopped and the
# container exits non-zero so ECS replaces the task.
#
# Environment: MODEL_NAME (required), MODEL_S3_PATH (s3://bucket/prefix/, or s3://none/none/ for
# the engine's own hub download), SERVED_MODEL_NAME, QUANTIZATION (awq|gptq|none), MAX_SEQ_LEN,
# GPU_MEM_UTIL, TP_SIZE, ENGINE_PORT, MODEL_DIR; ENGINE_CMD replaces the whole engine command
# line (tests and other engines); GPUINFER is the gpuinfer binary. The worker reads the rest.
set -euo pipefail

GPUINFER="${GPUINFER:-gpuinfer}"
ENGINE_PORT="${ENGINE_PORT:-8000}"
MODEL_DIR="${MODEL_DIR:-/models/model}"

say() { printf 'entrypoint: %s\n' "$*" >&2; }

: "${MODEL_NAME:?entrypoint: MODEL_NAME must name the model (a Hugging Face id such as TheBloke/Mistral-7B-Instruct-v0.2-AWQ)}"
served_name="${SERVED_MODEL_NAME:-$MODEL_NAME}"

model_source="$MODEL_NAME"
case "${MODEL_S3_PATH:-}" in
    "" | none | s3://none/none | s3://none/none/) say "no MODEL_S3_PATH: the engine loads $MODEL_NAME from its hub" ;;
    s3://*)
        say "fetching $MODEL_S3_PATH into $MODEL_DIR"
        "$GPUINFER" fetch-model "$MODEL_S3_PATH" "$MODEL_DIR"
        model_source="$MODEL_DIR"
        ;;
    *)
        say "MODEL_S3_PATH must be an s3:// URI or s3://none/none/, got '$MODEL_S3_PATH'"
        exit 64
        ;;
esac

if [[ -n "${ENGINE_CMD:-}" ]]; then
    read -ra engine <<<"$ENGINE_CMD"
else
    engine=(vllm serve "$model_source"
        --host 127.0.0.1 --port "$ENGINE_PORT"
        --served-model-name "$served_name"
        --max-model-len "${MAX_SEQ_LEN:-2048}"
        --gpu-memory-utilization "${GPU_MEM_UTIL:-0.90}"
        --tensor-parallel-size "${TP_SIZE:-1}")
    if [[ "${QUANTIZATION:-none}" != none ]]; then
        engine+=(--quantization "$QUANTIZATION")
    fi
fi

say "starting the engine: ${engine[*]}"
"${engine[@]}" &
engine_pid=$!

export ENGINE_URL="${ENGINE_URL:-http://127.0.0.1:$ENGINE_PORT}"
export MODEL_NAME="$served_name"
"$GPUINFER" worker &
worker_pid=$!

stopping=0
trap 'stopping=1; say "stop requested: draining the worker"; kill -TERM "$worker_pid" 2>/dev/null || true' TERM INT

status=0
while :; do
    wait -n "$engine_pid" "$worker_pid" && status=0 || status=$?
    if ((stopping)) || ! kill -0 "$engine_pid" 2>/dev/null || ! kill -0 "$worker_pid" 2>/dev/null; then
        break
    fi
done

if ((stopping)); then
    wait "$worker_pid" && status=0 || status=$?
    say "worker drained (exit $status); stopping the engine"
    kill -TERM "$engine_pid" 2>/dev/null || true
    wait "$engine_pid" || true
    exit "$status"
fi

if ! kill -0 "$engine_pid" 2>/dev/null; then
    say "the engine exited (status $status); stopping the worker"
    kill -TERM "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" || true
else
    say "the worker exited (status $status); stopping the engine"
    kill -TERM "$engine_pid" 2>/dev/null || true
    wait "$engine_pid" || true
fi
exit $((status == 0 ? 1 : status))
