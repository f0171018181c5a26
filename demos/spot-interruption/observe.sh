#!/usr/bin/env bash
# Watches a Spot interruption drill: every INTERVAL seconds (15), the FIS experiment's state (with EXPERIMENT), the
# tier's service and, on spot-with-fallback, its On-Demand fallback service: desired and running tasks. Ctrl-C to stop.
#
#   STACK_NAME=gpuinfer TIER=small EXPERIMENT=EXP123 demos/spot-interruption/observe.sh
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
case "${1:-}" in
  -h | --help)
    echo "usage: STACK_NAME=<stack> [TIER=small|large] [EXPERIMENT=<id>] [INTERVAL=15] demos/spot-interruption/observe.sh"
    exit 0
    ;;
  "") ;;
  *) echo "observe.sh: unknown argument $1" >&2; exit 2 ;;
esac
INTERVAL="${INTERVAL:-15}"
[[ $INTERVAL =~ ^[1-9][0-9]*$ ]] || { echo "observe.sh: INTERVAL is a whole number of seconds, got $INTERVAL" >&2; exit 2; }
# shellcheck source=SCRIPTDIR/../gpu-auto-repair/stack.sh
source "$here/../gpu-auto-repair/stack.sh"
: "${CLUSTER:?set STACK_NAME}"

while true; do
  printf '%s\n' "--- $(date -u +%H:%M:%S)"
  if [[ -n ${EXPERIMENT:-} ]]; then
    aws fis get-experiment --id "$EXPERIMENT" --output text --query 'experiment.state.[status,reason]' |
      sed 's/^/experiment  /'
  fi
  aws ecs describe-services --cluster "$CLUSTER" --services "$SERVICE" "$SERVICE-fallback" --output text \
    --query 'services[].[serviceName,desiredCount,runningCount,pendingCount]' | sed 's/^/service     /'
  sleep "$INTERVAL"
done
