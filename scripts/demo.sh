#!/usr/bin/env bash
# The whole pipeline on this machine with a real model: starts the local engine (llama.cpp +
# gemma-3-270m, installed on first use), builds and starts `gpuinfer dev`, sends one request and
# prints its result document. The pipeline then keeps running for your own requests; Ctrl-C stops
# it and the engine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ENGINE_PORT="${ENGINE_PORT:-8000}"
LISTEN="${LISTEN_ADDR:-127.0.0.1:8080}"
URL="http://$LISTEN"

scripts/local-engine.sh start --port "$ENGINE_PORT" --slots 8
cargo build --release --locked --quiet
target/release/gpuinfer dev --listen "$LISTEN" --small-engine-url "http://127.0.0.1:$ENGINE_PORT" &
dev=$!
cleanup() {
    kill -TERM "$dev" 2>/dev/null && wait "$dev" 2>/dev/null
    scripts/local-engine.sh stop --port "$ENGINE_PORT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 100); do
    curl -sf "$URL/healthz" >/dev/null && break
    sleep 0.1
done

body='{"prompt": "Amazon ECS is a container service that", "maxTokens": 48, "temperature": 0.7}'
printf '\n$ curl -s %s/infer -H "content-type: application/json" -d %s\n' "$URL" "'$body'"
started=$(date +%s%N)
accepted=$(curl -sf "$URL/infer" -H 'content-type: application/json' -d "$body")
echo "$accepted"
id=$(sed -n 's/.*"requestId":"\([^"]*\)".*/\1/p' <<<"$accepted")

printf '\n$ curl -s %s/results/%s\n' "$URL" "$id"
until result=$(curl -sf "$URL/results/$id"); do sleep 0.2; done
echo "$result"
printf '\nPOST to result: %d ms. The pipeline is still running at %s (Ctrl-C to stop).\n' \
    "$((($(date +%s%N) - started) / 1000000))" "$URL"
wait "$dev"
