#!/usr/bin/env bash
# Injects a synthetic NVIDIA XID on the GPU instance that runs one tier's task, so ECS Managed Instances
# auto-repair drains and replaces it. Starts `gpuinfer inject-xid` (task-definition.json: pidMode host,
# privileged) on exactly that container instance, waits for it, and prints its exit status and output.
#
#   CLUSTER=gpu-inference SERVICE=gpu-inference-small demos/gpu-auto-repair/run.sh
#
# Environment: CLUSTER, SERVICE (required); AWS_REGION; XID (79); GPU (0); FORCE=1 (a non-critical XID);
# DRY_RUN=1 (print the dcgmi commands only); DCGMI, SOCKET (dcgmi and nv-hostengine's socket on the host,
# when not /usr/bin/dcgmi and /tmp/nv-hostengine); IMAGE [default: the service's WORKER_CONTAINER image];
# WORKER_CONTAINER (worker).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

: "${CLUSTER:?set CLUSTER to the ECS cluster name}"
: "${SERVICE:?set SERVICE to the tier service whose instance should be repaired}"
AWS_REGION="${AWS_REGION:-$(aws configure get region || true)}"
: "${AWS_REGION:?set AWS_REGION}"
export AWS_REGION
XID="${XID:-79}"
GPU="${GPU:-0}"
WORKER_CONTAINER="${WORKER_CONTAINER:-worker}"
[[ "$XID" =~ ^[0-9]+$ && "$GPU" =~ ^[0-9]+$ ]] || { echo "XID and GPU must be numbers" >&2; exit 2; }
for path in "${DCGMI:-/}" "${SOCKET:-/}"; do
  [[ "$path" =~ ^/[A-Za-z0-9._/-]*$ ]] || { echo "DCGMI and SOCKET must be absolute paths, got $path" >&2; exit 2; }
done

ecs() { aws ecs "$@" --cluster "$CLUSTER" --output text; }

task=$(ecs list-tasks --service-name "$SERVICE" --desired-status RUNNING --query 'taskArns[0]')
if [[ -z "$task" || "$task" == None ]]; then
  echo "no running task in $SERVICE: send it a request first (it scales from zero), then run this again" >&2
  exit 1
fi
read -r container_instance task_definition < <(ecs describe-tasks --tasks "$task" \
  --query 'tasks[0].[containerInstanceArn,taskDefinitionArn]')
instance=$(ecs describe-container-instances --container-instances "$container_instance" \
  --query 'containerInstances[0].ec2InstanceId')
read -r execution_role image < <(aws ecs describe-task-definition --task-definition "$task_definition" --output text \
  --query "taskDefinition.[executionRoleArn, containerDefinitions[?name=='$WORKER_CONTAINER'].image | [0]]")
image="${IMAGE:-$image}"
network=$(aws ecs describe-services --cluster "$CLUSTER" --services "$SERVICE" --output json \
  --query 'services[0].networkConfiguration')

rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
sed -e "s|__EXECUTION_ROLE_ARN__|$execution_role|" -e "s|__IMAGE__|$image|" -e "s|__AWS_REGION__|$AWS_REGION|" \
  task-definition.json >"$rendered"
injector_definition=$(aws ecs register-task-definition --cli-input-json "file://$rendered" --output text \
  --query 'taskDefinition.taskDefinitionArn')

command="\"inject-xid\",\"--xid\",\"$XID\",\"--gpu\",\"$GPU\""
if [[ "${FORCE:-}" == 1 ]]; then command+=',"--force"'; fi
if [[ "${DRY_RUN:-}" == 1 ]]; then command+=',"--dry-run"'; fi
if [[ -n "${DCGMI:-}" ]]; then command+=",\"--dcgmi\",\"$DCGMI\""; fi
if [[ -n "${SOCKET:-}" ]]; then command+=",\"--socket\",\"$SOCKET\""; fi
overrides="{\"containerOverrides\":[{\"name\":\"inject-xid\",\"command\":[$command]}]}"

echo "target: $SERVICE task $task on $instance (GPU $GPU, XID $XID)"
injector=$(ecs start-task --task-definition "$injector_definition" --container-instances "$container_instance" \
  --network-configuration "$network" --overrides "$overrides" --query 'tasks[0].taskArn')
echo "injector task: $injector (waiting for it to finish)"
aws ecs wait tasks-stopped --cluster "$CLUSTER" --tasks "$injector"
status=$(ecs describe-tasks --tasks "$injector" --query 'tasks[0].containers[0].exitCode')
aws logs tail /ecs/xid-inject --since 15m --format short --log-stream-name-prefix "xid/inject-xid/${injector##*/}" || true
if [[ "$status" != 0 ]]; then
  echo "inject-xid exited with $status (gpuinfer inject-xid --help lists what each status means)" >&2
  exit 1
fi
echo "injected; watch the repair: CLUSTER=$CLUSTER SERVICE=$SERVICE demos/gpu-auto-repair/observe.sh"
