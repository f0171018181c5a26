#!/usr/bin/env bash
# A real SQS/S3 server for tests and local runs: moto server from PyPI on 127.0.0.1, installed into
# ${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}/moto-venv on first use.
#
#   scripts/aws-emulator.sh start  [--port 5055]   start (or find running) and wait until it answers
#   scripts/aws-emulator.sh stop   [--port 5055]
#   scripts/aws-emulator.sh status [--port 5055]
#
# Point gpuinfer (or the AWS CLI) at it with:
#   AWS_ENDPOINT_URL=http://127.0.0.1:5055 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
set -euo pipefail

MOTO_PIN="moto[server]==5.2.5"
CACHE="${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}"
VENV="$CACHE/moto-venv"

die() {
    printf 'aws-emulator: error: %s\n' "$*" >&2
    exit 1
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
port=5055
while (($#)); do
    case "$1" in
        --port) port="${2:?--port needs a value}" && shift 2 ;;
        *) die "unknown option '$1' (usage: $0 start|stop|status [--port N])" ;;
    esac
done
[[ $port =~ ^[0-9]+$ ]] || die "--port must be a number, got '$port'"
pidfile="$CACHE/moto-$port.pid"
logfile="$CACHE/moto-$port.log"
url="http://127.0.0.1:$port"

answering() {
    local code
    code=$(curl -s --noproxy '*' --max-time 2 -o /dev/null -w '%{http_code}' "$url/moto-api/" 2>/dev/null || true)
    [[ $code == 200 ]]
}

install() {
    mkdir -p "$CACHE"
    # grep without -q reads pip's whole output: with -q it may exit first, pip dies of SIGPIPE and pipefail
    # fails the check (seen: moto installed again at a start under SCHED_IDLE).
    if [[ -x $VENV/bin/moto_server ]] && "$VENV/bin/python" -m pip show moto 2>/dev/null | grep -x "Version: ${MOTO_PIN##*==}" >/dev/null; then
        return
    fi
    echo "aws-emulator: installing $MOTO_PIN into $VENV (once)"
    python3 -m venv "$VENV" || die "could not create a venv (on Debian: apt-get install -y python3-venv)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input "$MOTO_PIN" >"$CACHE/moto-install.log" 2>&1 ||
        die "pip install $MOTO_PIN failed; see $CACHE/moto-install.log"
}

start() {
    if answering; then
        echo "aws-emulator: already running at $url"
        return
    fi
    install
    setsid nohup "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$logfile" 2>&1 </dev/null &
    echo $! >"$pidfile"
    for _ in $(seq 1 150); do
        if answering; then
            echo "aws-emulator: moto ready at $url"
            return
        fi
        kill -0 "$(cat "$pidfile")" 2>/dev/null || die "moto exited at start; last lines of $logfile: $(tail -5 "$logfile")"
        sleep 0.2
    done
    die "moto did not answer within 30 s; see $logfile"
}

stop() {
    [[ -f $pidfile ]] || return 0
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    echo "aws-emulator: stopped"
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    status)
        if answering; then
            echo "aws-emulator: running at $url"
        else
            echo "aws-emulator: not running at $url"
            exit 1
        fi
        ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' && exit 2 ;;
esac
