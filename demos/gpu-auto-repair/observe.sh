#!/usr/bin/env bash
# Watches GPU auto repair happen: every INTERVAL seconds, the cluster's container instances with their health (overall
# and ACCELERATED_COMPUTE, the GPU check, with its reason such as XID_79), the tier's tasks, and the health events
# recorded from 30 minutes before the start on. The events come from the stack's own EventBridge rule
# (InstanceHealthRule: "ECS Container Instance Health Change" with overallStatus IMPAIRED) into its log group (output
# ContainerInstanceHealthLogGroup); a missing rule or log group is said once at the start. Ctrl-C to stop.
#
#   STACK_NAME=gpuinfer demos/gpu-auto-repair/observe.sh
#   STACK_NAME=gpuinfer demos/gpu-auto-repair/observe.sh 30     # every 30 s (the AWS sample's form)
#   CLUSTER=gpuinfer-cluster SERVICE=gpuinfer-small HEALTH_LOG_GROUP=/aws/events/gpuinfer/instance-health \
#     demos/gpu-auto-repair/observe.sh
#
# Arguments: [INTERVAL], as the AWS sample's observe-repair.sh [INTERVAL_SECONDS]; it takes the place of INTERVAL.
# --help prints the usage.
# Environment: STACK_NAME (the stack's outputs name the rest), or CLUSTER (and SERVICE, HEALTH_LOG_GROUP);
# TIER (small|large, small); AWS_REGION; INTERVAL (15).
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"

usage() {
  cat <<'EOF'
usage: demos/gpu-auto-repair/observe.sh [INTERVAL]
  INTERVAL  seconds between two looks (default 15, or $INTERVAL)
Watches GPU auto repair on the cluster of the stack $STACK_NAME: its container instances and their GPU health,
the tier's tasks (TIER=small|large), the instance-health events. Ctrl-C to stop.
Environment: STACK_NAME, or CLUSTER (and SERVICE, HEALTH_LOG_GROUP); TIER; AWS_REGION; INTERVAL.
More in demos/gpu-auto-repair/README.md.
EOF
}
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  -?*) echo "observe.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
esac
if (($# > 1)); then
  echo "observe.sh: at most one argument, INTERVAL; got $#: $*" >&2
  usage >&2
  exit 2
fi
if (($# == 1)); then INTERVAL="$1"; fi
INTERVAL="${INTERVAL:-15}"
[[ "$INTERVAL" =~ ^[1-9][0-9]*$ ]] || {
  echo "observe.sh: INTERVAL is a whole number of seconds, got $INTERVAL" >&2
  usage >&2
  exit 2
}
# shellcheck source=SCRIPTDIR/stack.sh
source "$here/stack.sh"

: "${CLUSTER:?set STACK_NAME (or CLUSTER)}"
started_ms=$(($(date +%s) * 1000))
seen_ms=$((started_ms - 30 * 60 * 1000)) # the health events of the last 30 minutes, then each new one

ecs() { aws ecs "$@" --cluster "$CLUSTER"; }

# Says whether the health events can be shown: the log group exists and an enabled EventBridge rule writes to it.
health_events_ready() {
  if [[ -z "${HEALTH_LOG_GROUP:-}" ]]; then
    if [[ -n "${STACK_NAME:-}" ]]; then
      echo "health events: MISSING - stack $STACK_NAME has no ContainerInstanceHealthLogGroup output, so no"
      echo "  instance-health rule: update it with the current template.yaml (InstanceHealthRule and its log group)"
    else
      echo "health events: not shown (set STACK_NAME, or HEALTH_LOG_GROUP to a log group an EventBridge rule for"
      echo "  \"ECS Container Instance Health Change\" events writes to)"
    fi
    return 1
  fi
  local arn rules rule state enabled=""
  arn=$(aws logs describe-log-groups --log-group-name-prefix "$HEALTH_LOG_GROUP" --output text \
    --query "logGroups[?logGroupName=='$HEALTH_LOG_GROUP'] | [0].arn")
  if [[ -z "$arn" || "$arn" == None ]]; then
    echo "health events: MISSING - log group $HEALTH_LOG_GROUP does not exist: the stack's InstanceHealthLogGroup is"
    echo "  gone (update the stack with template.yaml); ECS health changes are not recorded"
    return 1
  fi
  if ! rules=$(aws events list-rule-names-by-target --target-arn "${arn%:\*}" --output text --query 'RuleNames[]'); then
    echo "health events: cannot list the EventBridge rules writing to $HEALTH_LOG_GROUP (events:ListRuleNamesByTarget);"
    echo "  showing the log group anyway"
    return 0
  fi
  for rule in $rules; do
    state=$(aws events describe-rule --name "$rule" --output text --query State)
    if [[ "$state" == ENABLED ]]; then enabled+="${enabled:+, }$rule"; fi
  done
  if [[ -z "$enabled" ]]; then
    echo "health events: MISSING - no enabled EventBridge rule writes to $HEALTH_LOG_GROUP${rules:+ (off: $rules)}:"
    echo "  the stack's InstanceHealthRule is gone or disabled (update the stack with template.yaml)"
    return 1
  fi
  echo "health events: rule $enabled -> log group $HEALTH_LOG_GROUP (instances turning IMPAIRED)"
}

instances() {
  local arns
  arns=$(ecs list-container-instances --output text --query 'containerInstanceArns[]')
  if [[ -z "$arns" ]]; then
    echo "  (no container instances: the capacity providers have none running)"
    return
  fi
  # shellcheck disable=SC2086 # one argument per ARN
  ecs describe-container-instances --container-instances $arns --include CONTAINER_INSTANCE_HEALTH --output table \
    --query "containerInstances[*].{Instance:ec2InstanceId,Status:status,Health:healthStatus.overallStatus,
      GPU:healthStatus.details[?type=='ACCELERATED_COMPUTE'] | [0].status,
      Reason:healthStatus.details[?type=='ACCELERATED_COMPUTE'] | [0].statusReason,
      Type:attributes[?name=='ecs.instance-type'] | [0].value,Agent:agentConnected,Tasks:runningTasksCount}"
}

tasks() {
  local arns
  arns=$(ecs list-tasks --service-name "$SERVICE" --output text --query 'taskArns[]')
  if [[ -z "$arns" ]]; then
    echo "  (no tasks in $SERVICE)"
    return
  fi
  # shellcheck disable=SC2086 # one argument per ARN
  ecs describe-tasks --tasks $arns --output table \
    --query 'tasks[*].{Task:taskArn,Last:lastStatus,Desired:desiredStatus,Health:healthStatus,Started:startedAt}'
}

# One line per health event: when, the instance, its overall status and the reasons in the event.
events() {
  local timestamp message fields
  while IFS=$'\t' read -r timestamp message; do
    [[ "$timestamp" =~ ^[0-9]+$ ]] || continue
    fields=$(grep -oE '"(ec2InstanceId|overallStatus|statusReason)":"[^"]*"' <<<"$message" | tr '\n' ' ' || true)
    echo "  event $(date -u -d "@$((timestamp / 1000))" +%H:%M:%S 2>/dev/null || echo "$timestamp") ${fields:-$message}"
    if ((timestamp >= seen_ms)); then seen_ms=$((timestamp + 1)); fi
  done < <(aws logs filter-log-events --log-group-name "$HEALTH_LOG_GROUP" --start-time "$seen_ms" --output text \
    --query 'events[].[timestamp,message]')
}

show_events=false
if health_events_ready; then show_events=true; fi
while true; do
  printf '\n== %s (+%ds)\n' "$(date -u +%H:%M:%S)" $((($(date +%s) * 1000 - started_ms) / 1000))
  # A failed call (throttling, a dropped connection) costs one round, not the watch.
  instances || echo "  (could not describe the container instances: retrying)"
  if [[ -n "${SERVICE:-}" ]]; then tasks || echo "  (could not describe the tasks: retrying)"; fi
  if $show_events; then events || echo "  (could not read $HEALTH_LOG_GROUP: retrying)"; fi
  sleep "$INTERVAL"
done
