#!/usr/bin/env bash
# Inference container start: model weights → engine (vLLM) → gpuinfer worker, supervised together.
# SIGTERM (ECS stopping the task) drains the worker first (requests in flight finish, their results
# are stored), then stops the engine. If either process dies, the other is stopped and the
# container exits non-zero so ECS replaces the task.
#
# Users: the image starts this script as root for one reason. The large tier's /dev/shm is an ECS
# task volume with no host path, which Docker creates root-owned 0755, and vLLM with tensor
# parallelism must create its shared memory there. As root the script only makes that directory
# world-writable with the sticky bit (1777, as /dev/shm always is), hands MODEL_DIR and HOME to uid
# 1000, then re-executes itself as uid 1000 (its primary group, no supplementary groups, no new
# privileges) through setpriv: the supervisor, fetch-model, the engine and the worker never run as
# root. Started as any other user (a task definition `User`, `docker run --user`) it changes no
# permission and runs as that user, as before; with TP_SIZE > 1 it refuses to start while the
# shared-memory directory is not writable, and says how to fix it.
#
# Environment: MODEL_NAME (required), MODEL_S3_PATH (s3://bucket/prefix/, or s3://none/none/ for
# the engine's own hub download), SERVED_MODEL_NAME, QUANTIZATION (awq|gptq|none), MAX_SEQ_LEN,
# GPU_MEM_UTIL, TP_SIZE, ENGINE_PORT, MODEL_DIR, TOOL_CALL_PARSER (vLLM's parser of the model's tool calls,
# which `tool_choice: "auto"` needs; empty: none, and "required" or a named function still work); SHARED_MEMORY_DIR (default /dev/shm; tests point it
# elsewhere); ENGINE_CMD replaces the whole engine command line (tests and other engines); GPUINFER
# is the gpuinfer binary. The worker reads the rest.
#
# Cold start: the script exports when it started (GPUINFER_STARTED_AT, kept across the re-execution
# as uid 1000) and when the weights were on disk (GPUINFER_WEIGHTS_READY_AT, only after a fetch),
# in Unix seconds; the worker reports the phases of the start with its first result.
set -euo pipefail

export GPUINFER_STARTED_AT="${GPUINFER_STARTED_AT:-$(date +%s.%N)}"

GPUINFER="${GPUINFER:-gpuinfer}"
ENGINE_PORT="${ENGINE_PORT:-8000}"
MODEL_DIR="${MODEL_DIR:-/models/model}"
SHARED_MEMORY_DIR="${SHARED_MEMORY_DIR:-/dev/shm}"
TP_SIZE="${TP_SIZE:-1}"
# The image's unprivileged user (the Dockerfile gives it /models and HOME).
APP_UID=1000

say() { printf 'entrypoint: %s\n' "$*" >&2; }

: "${MODEL_NAME:?entrypoint: MODEL_NAME must name the model (a Hugging Face id such as TheBloke/Mistral-7B-Instruct-v0.2-AWQ)}"
served_name="${SERVED_MODEL_NAME:-$MODEL_NAME}"

fetch=0
case "${MODEL_S3_PATH:-}" in
    "" | none | s3://none/none | s3://none/none/) model_source="$MODEL_NAME" ;;
    s3://*) model_source="$MODEL_DIR" fetch=1 ;;
    *)
        say "MODEL_S3_PATH must be an s3:// URI or s3://none/none/, got '$MODEL_S3_PATH'"
        exit 64
        ;;
esac
if [[ ! "$TP_SIZE" =~ ^[1-9][0-9]*$ ]]; then
    say "TP_SIZE must be a positive whole number of GPUs, got '$TP_SIZE'"
    exit 64
fi

if ((EUID == 0)); then
    # Root: open up what the unprivileged user needs, then become it. Nothing below this block
    # runs as root: the re-executed script takes the non-root path.
    if ! command -v setpriv >/dev/null; then
        say "setpriv (util-linux) is not installed, so the engine cannot be started as uid $APP_UID; install util-linux in the image, or start the container as uid $APP_UID (task definition User) on a tier with TP_SIZE=1"
        exit 69
    fi
    app_gid="$(getent passwd "$APP_UID" | cut -d: -f4)" || true
    app_gid="${app_gid:-$APP_UID}"
    if ! { mkdir -p "$SHARED_MEMORY_DIR" && chmod 1777 "$SHARED_MEMORY_DIR"; }; then
        say "could not make $SHARED_MEMORY_DIR writable (read-only mount?); the engine may not be able to create its shared memory"
    fi
    if ! { mkdir -p "$MODEL_DIR" && chown -R "$APP_UID:$app_gid" "$MODEL_DIR"; }; then
        say "could not hand $MODEL_DIR to uid $APP_UID (read-only mount?); fetch-model fails if it must write there"
    fi
    if [[ -z "${HOME:-}" || ! -e "$HOME" ]]; then
        # Caches (Hugging Face, vLLM, Triton) live under HOME: give the user one it owns.
        HOME="${HOME:-/home/gpuinfer}"
        install -d -o "$APP_UID" -g "$app_gid" -m 0755 "$HOME"
        export HOME
    elif [[ "$(stat -c %u "$HOME")" != "$APP_UID" ]]; then
        say "HOME=$HOME is not owned by uid $APP_UID, so the engine's caches may not be writable; set HOME to a directory uid $APP_UID owns (the image's is /home/gpuinfer)"
    fi
    say "running as uid $APP_UID (gid $app_gid) from here on; $SHARED_MEMORY_DIR is mode 1777"
    exec setpriv --reuid="$APP_UID" --regid="$app_gid" --clear-groups --no-new-privs -- "${BASH_SOURCE[0]}" "$@"
fi

if ((TP_SIZE > 1)) && [[ ! -w "$SHARED_MEMORY_DIR" || ! -x "$SHARED_MEMORY_DIR" ]]; then
    say "TP_SIZE=$TP_SIZE needs shared memory, but $SHARED_MEMORY_DIR is not writable by uid $EUID ($(stat -c '%U:%G %a' "$SHARED_MEMORY_DIR" 2>/dev/null || echo missing)); start the container as root (drop the task definition's User: the image starts as root and drops to uid $APP_UID itself) or mount a directory this user can write at $SHARED_MEMORY_DIR"
    exit 78
fi

if ((fetch)); then
    say "fetching $MODEL_S3_PATH into $MODEL_DIR"
    "$GPUINFER" fetch-model "$MODEL_S3_PATH" "$MODEL_DIR"
    GPUINFER_WEIGHTS_READY_AT="$(date +%s.%N)"
    export GPUINFER_WEIGHTS_READY_AT
else
    say "no MODEL_S3_PATH: the engine loads $MODEL_NAME from its hub"
fi

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
    if [[ -n "${TOOL_CALL_PARSER:-}" ]]; then
        engine+=(--enable-auto-tool-choice --tool-call-parser "$TOOL_CALL_PARSER")
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
