# Sourced by run.sh and observe.sh: the region, and the names of what template.yaml creates, read from the stack's
# outputs. With STACK_NAME: CLUSTER (output ClusterName), SERVICE (SmallModelServiceName, or LargeModelServiceName
# with TIER=large) and HEALTH_LOG_GROUP (ContainerInstanceHealthLogGroup), each unless already set. Without
# STACK_NAME, CLUSTER and SERVICE name a cluster and service directly (and `output` finds nothing).
# shellcheck shell=bash

AWS_REGION="${AWS_REGION:-$(aws configure get region || true)}"
: "${AWS_REGION:?set AWS_REGION (or a region in the AWS CLI configuration)}"
export AWS_REGION

stack_outputs=""
# The value of the stack output $1; empty when there is no stack or it has no such output.
output() {
  awk -F '\t' -v key="$1" '$1 == key { print $2 }' <<<"$stack_outputs"
}

if [[ -n "${STACK_NAME:-}" ]]; then
  stack_outputs=$(aws cloudformation describe-stacks --stack-name "$STACK_NAME" --output text \
    --query 'Stacks[0].Outputs[].[OutputKey,OutputValue]')
  TIER="${TIER:-small}"
  case "$TIER" in
    small) SERVICE="${SERVICE:-$(output SmallModelServiceName)}" ;;
    large) SERVICE="${SERVICE:-$(output LargeModelServiceName)}" ;;
    *) echo "TIER must be small or large, got $TIER" >&2; exit 2 ;;
  esac
  CLUSTER="${CLUSTER:-$(output ClusterName)}"
  HEALTH_LOG_GROUP="${HEALTH_LOG_GROUP:-$(output ContainerInstanceHealthLogGroup)}"
  if [[ -z "$CLUSTER" || -z "$SERVICE" ]]; then
    echo "stack $STACK_NAME has no ClusterName or $TIER service output: is it a stack of gpuinfer's template.yaml?" >&2
    exit 2
  fi
fi
