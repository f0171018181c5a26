#!/usr/bin/env bash
# Watches GPU auto-repair happen: every INTERVAL seconds, the cluster's container instances (status, health)
# and the service's tasks; with EVENTS_LOG_GROUP, also the EventBridge events recorded there since the start
# (ECS Container Instance State Change / Health Change). Ctrl-C to stop.
#
#   CLUSTER=gpu-inference SERVICE=gpu-inference-small demos/gpu-auto-repair/observe.sh
#
# Environment: CLUSTER (required); SERVICE (optional); AWS_REGION; INTERVAL (15);
# EVENTS_LOG_GROUP (a log group an EventBridge rule for aws.ecs instance events writes to).
set -euo pipefail

: "${CLUSTER:?set CLUSTER to the ECS cluster name}"
INTERVAL="${INTERVAL:-15}"
started_ms=$(($(date +%s) * 1000))
seen_ms=$started_ms

ecs() { aws ecs "$@" --cluster "$CLUSTER"; }

instances() {
  local arns
  arns=$(ecs list-container-instances --query 'containerInstanceArns[]' --output text)
  if [[ -z "$arns" ]]; then
    echo "  (no container instances: the capacity provider has none running)"
    return
  fi
  # shellcheck disable=SC2086 # one argument per ARN
  ecs describe-container-instances --container-instances $arns --output table \
    --query 'containerInstances[*].{Instance:ec2InstanceId,Status:status,Health:healthStatus.overallStatus,Agent:agentConnected,Tasks:runningTasksCount}'
}

tasks() {
  local arns
  arns=$(ecs list-tasks --service-name "$SERVICE" --query 'taskArns[]' --output text)
  if [[ -z "$arns" ]]; then
    echo "  (no tasks in $SERVICE)"
    return
  fi
  # shellcheck disable=SC2086 # one argument per ARN
  ecs describe-tasks --tasks $arns --output table \
    --query 'tasks[*].{Task:taskArn,Last:lastStatus,Desired:desiredStatus,Health:healthStatus,Started:startedAt}'
}

events() {
  local timestamp message
  while IFS=$'\t' read -r timestamp message; do
    [[ "$timestamp" =~ ^[0-9]+$ ]] || continue
    echo "  event $message"
    if ((timestamp >= seen_ms)); then seen_ms=$((timestamp + 1)); fi
  done < <(aws logs filter-log-events --log-group-name "$EVENTS_LOG_GROUP" --start-time "$seen_ms" \
    --query 'events[].[timestamp,message]' --output text)
}

while true; do
  printf '\n== %s (+%ds)\n' "$(date -u +%H:%M:%S)" $((($(date +%s) * 1000 - started_ms) / 1000))
  instances
  if [[ -n "${SERVICE:-}" ]]; then tasks; fi
  if [[ -n "${EVENTS_LOG_GROUP:-}" ]]; then events; fi
  sleep "$INTERVAL"
done
