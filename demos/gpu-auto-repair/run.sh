#!/usr/bin/env bash
# Injects a synthetic NVIDIA XID on a GPU instance of one tier of the stack template.yaml creates, so ECS Managed
# Instances auto repair drains and replaces it. Registers task-definition.json (`gpuinfer inject-xid`, pidMode host,
# privileged) with the tier's image, execution role and log group, runs it through the tier's capacity provider
# next to a running task of the tier, and reports the instance it landed on. Then, by default, it waits for the
# injector and prints its output and exit status; with EXEC=1 the injector idles and the injection runs through
# ECS Exec (`aws ecs execute-command … --command "gpuinfer inject-xid --xid N"`), where more can follow.
#
#   STACK_NAME=gpuinfer demos/gpu-auto-repair/run.sh                 # XID 79 on GPU 0 of a small-tier instance
#   STACK_NAME=gpuinfer TIER=large demos/gpu-auto-repair/run.sh 48 3  # XID 48 on GPU 3 (the AWS sample's form)
#   STACK_NAME=gpuinfer TIER=large XID=48 GPU=3 demos/gpu-auto-repair/run.sh
#   STACK_NAME=gpuinfer EXEC=1 demos/gpu-auto-repair/run.sh          # inject through ECS Exec
#
# Arguments: [XID [GPU]], as the AWS sample's run-injection.sh [XID_CODE] [GPU_ID]; they take the place of XID and
# GPU. --help prints the usage.
# Environment: STACK_NAME (the stack's outputs name the rest), or CLUSTER and SERVICE; TIER (small|large, small);
# AWS_REGION; XID (79); GPU (0); FORCE=1 (an XID outside the critical set); DRY_RUN=1 (print the dcgmi commands
# only); DCGMI, SOCKET (dcgmi and nv-hostengine's socket on the host, when not /usr/bin/dcgmi and
# /run/nvidia-dcgm/nv-hostengine); CONTAINER (the tier's container: inference); IMAGE (default: that container's);
# EXEC=1 (ECS Exec; needs the stack output XidInjectTaskRoleArn and the Session Manager plugin); STAY_SECONDS (how
# long an EXEC=1 injector idles: 3600).
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"

usage() {
  cat <<'EOF'
usage: demos/gpu-auto-repair/run.sh [XID [GPU]]
  XID  the XID to inject (default 79, or $XID); one outside the set ECS repairs needs FORCE=1
  GPU  the GPU index on the instance (default 0, or $GPU; the large tier's instances have 0-7)
Injects a synthetic NVIDIA XID on a GPU instance of one tier of the stack $STACK_NAME (TIER=small|large).
Environment: STACK_NAME, or CLUSTER and SERVICE; TIER; AWS_REGION; XID; GPU; FORCE=1; DRY_RUN=1; DCGMI;
SOCKET; CONTAINER; IMAGE; EXEC=1; STAY_SECONDS. More in demos/gpu-auto-repair/README.md.
EOF
}
positional=()
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    -*) echo "run.sh: unknown option $arg" >&2; usage >&2; exit 2 ;;
    *) positional+=("$arg") ;;
  esac
done
if ((${#positional[@]} > 2)); then
  echo "run.sh: at most two arguments, XID and GPU; got ${#positional[@]}: ${positional[*]}" >&2
  usage >&2
  exit 2
fi
for arg in ${positional[@]+"${positional[@]}"}; do
  [[ "$arg" =~ ^[0-9]+$ ]] || { echo "run.sh: XID and GPU are numbers, got $arg" >&2; usage >&2; exit 2; }
done
if ((${#positional[@]} >= 1)); then XID="${positional[0]}"; fi
if ((${#positional[@]} == 2)); then GPU="${positional[1]}"; fi

# shellcheck source=SCRIPTDIR/stack.sh
source "$here/stack.sh"

: "${CLUSTER:?set STACK_NAME (or CLUSTER and SERVICE)}"
: "${SERVICE:?set STACK_NAME (or CLUSTER and SERVICE) to the tier whose instance should be repaired}"
XID="${XID:-79}"
GPU="${GPU:-0}"
CONTAINER="${CONTAINER:-inference}"
STAY_SECONDS="${STAY_SECONDS:-3600}"
[[ "$XID" =~ ^[0-9]+$ && "$GPU" =~ ^[0-9]+$ && "$STAY_SECONDS" =~ ^[0-9]+$ ]] || {
  echo "XID, GPU and STAY_SECONDS must be numbers" >&2
  exit 2
}
for path in "${DCGMI:-/}" "${SOCKET:-/}"; do
  [[ "$path" =~ ^/[A-Za-z0-9._/-]*$ ]] || { echo "DCGMI and SOCKET must be absolute paths, got $path" >&2; exit 2; }
done
exec_mode=false
if [[ "${EXEC:-}" == 1 ]]; then
  exec_mode=true
  task_role=$(output XidInjectTaskRoleArn)
  if [[ -z "$task_role" ]]; then
    echo "EXEC=1 needs the stack output XidInjectTaskRoleArn (a task role ECS Exec may open its channels with):" >&2
    echo "set STACK_NAME to a stack deployed from the current template.yaml" >&2
    exit 2
  fi
  command -v session-manager-plugin >/dev/null || {
    echo "EXEC=1 needs the Session Manager plugin for the AWS CLI (https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html)" >&2
    exit 2
  }
fi

ecs() { aws ecs "$@" --cluster "$CLUSTER" --output text; }

# inject-xid's arguments, one word each.
inject_args=(inject-xid --xid "$XID" --gpu "$GPU")
if [[ "${FORCE:-}" == 1 ]]; then inject_args+=(--force); fi
if [[ "${DRY_RUN:-}" == 1 ]]; then inject_args+=(--dry-run); fi
if [[ -n "${DCGMI:-}" ]]; then inject_args+=(--dcgmi "$DCGMI"); fi
if [[ -n "${SOCKET:-}" ]]; then inject_args+=(--socket "$SOCKET"); fi

# The tier: one running task, its instance and subnet; the image, execution role and log group of its container.
task=$(ecs list-tasks --service-name "$SERVICE" --desired-status RUNNING --query 'taskArns[0]')
if [[ -z "$task" || "$task" == None ]]; then
  echo "no running task in $SERVICE: send it a request first (it scales from zero), then run this again" >&2
  exit 1
fi
read -r container_instance task_definition subnet < <(ecs describe-tasks --tasks "$task" \
  --query "tasks[0].[containerInstanceArn, taskDefinitionArn,
    attachments[?type=='ElasticNetworkInterface'] | [0].details[?name=='subnetId'] | [0].value]")
target=$(ecs describe-container-instances --container-instances "$container_instance" \
  --query 'containerInstances[0].ec2InstanceId')
read -r execution_role image log_group < <(aws ecs describe-task-definition --task-definition "$task_definition" \
  --output text --query "taskDefinition.[executionRoleArn,
    containerDefinitions[?name=='$CONTAINER'] | [0].image,
    containerDefinitions[?name=='$CONTAINER'] | [0].logConfiguration.options.\"awslogs-group\"]")
if [[ "$image" == None || "$log_group" == None ]]; then
  echo "$task_definition has no container $CONTAINER logging to CloudWatch Logs: set CONTAINER to its name" >&2
  exit 1
fi
image="${IMAGE:-$image}"
strategy=$(aws ecs describe-services --cluster "$CLUSTER" --services "$SERVICE" --output json \
  --query 'services[0].capacityProviderStrategy')
read -r subnets security_groups < <(aws ecs describe-services --cluster "$CLUSTER" --services "$SERVICE" \
  --output text --query "services[0].networkConfiguration.awsvpcConfiguration.[join(',', subnets),
    join(',', securityGroups)]")
# The tier's task's own subnet, so that the injector lands in the target's Availability Zone (Managed Instances
# place a task in a zone of its subnets). The instance itself cannot be chosen: see README.
if [[ -n "$subnet" && "$subnet" != None ]]; then subnets="$subnet"; fi
network="awsvpcConfiguration={subnets=[$subnets],securityGroups=[$security_groups],assignPublicIp=DISABLED}"

rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
sed -e "s|__EXECUTION_ROLE_ARN__|$execution_role|" -e "s|__IMAGE__|$image|" -e "s|__AWS_REGION__|$AWS_REGION|" \
  -e "s|__LOG_GROUP__|$log_group|" "$here/task-definition.json" >"$rendered"
injector_definition=$(aws ecs register-task-definition --cli-input-json "file://$rendered" --output text \
  --query 'taskDefinition.taskDefinitionArn')

json_words() { # the arguments as a JSON array of strings (they hold no quote or backslash: checked above)
  local out="" word
  for word in "$@"; do out+="${out:+,}\"$word\""; done
  printf '[%s]' "$out"
}
run_args=()
if $exec_mode; then
  # The injector only checks its arguments (--dry-run) and idles; the injection runs through ECS Exec below.
  first_args=("${inject_args[@]}" --stay-seconds "$STAY_SECONDS")
  if [[ "${DRY_RUN:-}" != 1 ]]; then first_args+=(--dry-run); fi
  first=$(json_words "${first_args[@]}")
  overrides="{\"taskRoleArn\":\"$task_role\",\"containerOverrides\":[{\"name\":\"inject-xid\",\"command\":$first}]}"
  run_args+=(--enable-execute-command)
else
  overrides="{\"containerOverrides\":[{\"name\":\"inject-xid\",\"command\":$(json_words "${inject_args[@]}")}]}"
fi

echo "target: $SERVICE task ${task##*/} on $target (GPU $GPU, XID $XID)"
IFS=$'\t' read -r injector failure < <(ecs run-task --task-definition "$injector_definition" \
  --capacity-provider-strategy "$strategy" --network-configuration "$network" --overrides "$overrides" \
  --started-by gpuinfer-xid-demo ${run_args[@]+"${run_args[@]}"} --query '[tasks[0].taskArn, failures[0].reason]')
if [[ -z "$injector" || "$injector" == None ]]; then
  echo "ECS started no injector: $failure" >&2
  exit 1
fi
injector_id="${injector##*/}"
echo "injector task: $injector_id"

# Where it landed: the instance the XID goes to, and so the one auto repair replaces.
landed=None
for _ in $(seq 1 60); do
  landed=$(ecs describe-tasks --tasks "$injector" --query 'tasks[0].containerInstanceArn')
  [[ "$landed" != None && -n "$landed" ]] && break
  sleep 5
done
if [[ "$landed" == None || -z "$landed" ]]; then
  echo "the injector is not placed after 5 min: the capacity provider may be launching an instance for it (see" >&2
  echo "README); to give up: aws ecs stop-task --cluster $CLUSTER --task $injector_id" >&2
  exit 1
fi
read -r landed_instance landed_type < <(ecs describe-container-instances --container-instances "$landed" \
  --query "containerInstances[0].[ec2InstanceId, attributes[?name=='ecs.instance-type'] | [0].value]")
if [[ "$landed" == "$container_instance" ]]; then
  echo "landed on $landed_instance ($landed_type), the instance of $SERVICE task ${task##*/}"
else
  echo "landed on $landed_instance ($landed_type), not on $target: Managed Instances placed it elsewhere; the XID"
  echo "goes to $landed_instance, so that is the instance auto repair replaces"
fi

stopped_reason() {
  ecs describe-tasks --tasks "$injector" \
    --query "join('; ', [tasks[0].stoppedReason, tasks[0].containers[0].reason][?@ != null])"
}
if [[ -n "${STACK_NAME:-}" ]]; then
  observe="STACK_NAME=$STACK_NAME TIER=$TIER demos/gpu-auto-repair/observe.sh"
else
  observe="CLUSTER=$CLUSTER SERVICE=$SERVICE demos/gpu-auto-repair/observe.sh"
fi
show_log() {
  aws logs tail "$log_group" --since 1h --format short --log-stream-names "xid/inject-xid/$injector_id" || true
}

if $exec_mode; then
  if ! aws ecs wait tasks-running --cluster "$CLUSTER" --tasks "$injector"; then
    echo "the injector did not start: $(stopped_reason)" >&2
    show_log
    exit 1
  fi
  echo "waiting for the ECS Exec agent in the injector"
  agent=PENDING
  for _ in $(seq 1 36); do
    agent=$(ecs describe-tasks --tasks "$injector" \
      --query "tasks[0].containers[0].managedAgents[?name=='ExecuteCommandAgent'] | [0].lastStatus")
    [[ "$agent" == RUNNING ]] && break
    sleep 5
  done
  if [[ "$agent" != RUNNING ]]; then
    echo "the ECS Exec agent is $agent after 3 min: is ssmmessages reachable from the task's subnet?" >&2
    exit 1
  fi
  exec_command="gpuinfer ${inject_args[*]}"
  echo "aws ecs execute-command … --command \"$exec_command\""
  if ! aws ecs execute-command --cluster "$CLUSTER" --task "$injector" --container inject-xid --interactive \
    --command "$exec_command"; then
    echo "ECS Exec failed; the injector still idles: aws ecs stop-task --cluster $CLUSTER --task $injector_id" >&2
    exit 1
  fi
  cat <<EOF
The injector idles for ${STAY_SECONDS} s. More XIDs on the same instance:
  aws ecs execute-command --cluster $CLUSTER --task $injector_id --container inject-xid --interactive \\
    --command "gpuinfer inject-xid --xid 74 --gpu $GPU"
Stop it when done:
  aws ecs stop-task --cluster $CLUSTER --task $injector_id
Watch the repair:
  $observe
EOF
  exit 0
fi

echo "waiting for the injector to finish"
aws ecs wait tasks-stopped --cluster "$CLUSTER" --tasks "$injector"
status=$(ecs describe-tasks --tasks "$injector" --query 'tasks[0].containers[0].exitCode')
show_log
if [[ "$status" != 0 ]]; then
  echo "inject-xid exited with $status ($(stopped_reason)); gpuinfer inject-xid --help lists what each status means" >&2
  exit 1
fi
echo "injected on $landed_instance; watch the repair: $observe"
