#!/usr/bin/env bash
# Drills a Spot interruption on one tier of a gpuinfer stack with AWS Fault Injection Service: deploys the experiment
# template and its role (experiment.yaml, a stack of its own, <stack>-spot-drill-<tier>), then starts the experiment,
# which sends one running Spot instance of the tier the two-minute notice. Watch it with observe.sh; `--cleanup`
# deletes the experiment stack.
#
#   STACK_NAME=gpuinfer demos/spot-interruption/run.sh                 # the small tier
#   STACK_NAME=gpuinfer TIER=large demos/spot-interruption/run.sh
#   STACK_NAME=gpuinfer demos/spot-interruption/run.sh --cleanup
#
# Environment: STACK_NAME (required), TIER (small|large, small), AWS_REGION (else the CLI's), NOTICE (PT2M: 2 to 15
# minutes). The tier must run on Spot (SmallCapacity / LargeCapacity spot or spot-with-fallback) with a task running.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"

usage() {
  cat <<'USAGE'
usage: STACK_NAME=<stack> demos/spot-interruption/run.sh [--cleanup]
Sends one running Spot instance of the tier TIER (small|large) of the stack STACK_NAME a Spot interruption notice
through AWS FIS (the experiment template and its role: the stack <stack>-spot-drill-<tier>); --cleanup deletes that
stack. Watch with demos/spot-interruption/observe.sh. More in demos/spot-interruption/README.md.
USAGE
}
cleanup=false
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  --cleanup) cleanup=true ;;
  "") ;;
  *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
esac
: "${STACK_NAME:?set STACK_NAME to the gpuinfer stack}"
TIER="${TIER:-small}"
[[ $TIER == small || $TIER == large ]] || { echo "run.sh: TIER is small or large, got $TIER" >&2; exit 2; }
AWS_REGION="${AWS_REGION:-$(aws configure get region || true)}"
: "${AWS_REGION:?set AWS_REGION (or a region in the AWS CLI configuration)}"
export AWS_REGION
drill="${STACK_NAME}-spot-drill-${TIER}"

if $cleanup; then
  aws cloudformation delete-stack --stack-name "$drill"
  aws cloudformation wait stack-delete-complete --stack-name "$drill"
  echo "deleted $drill"
  exit 0
fi

parameter=SmallCapacity
[[ $TIER == small ]] || parameter=LargeCapacity
capacity=$(aws cloudformation describe-stacks --stack-name "$STACK_NAME" --output text \
  --query "Stacks[0].Parameters[?ParameterKey=='$parameter'].ParameterValue")
if [[ $capacity != spot && $capacity != spot-with-fallback ]]; then
  echo "run.sh: the $TIER tier of $STACK_NAME runs on ${capacity:-on-demand} capacity, not Spot:" \
    "deploy with --capacity $TIER=spot-with-fallback first" >&2
  exit 1
fi

aws cloudformation deploy --stack-name "$drill" --template-file "$here/experiment.yaml" --capabilities CAPABILITY_IAM \
  --no-fail-on-empty-changeset --parameter-overrides "StackName=$STACK_NAME" "Tier=$TIER" "DurationBeforeInterruption=${NOTICE:-PT2M}"
template=$(aws cloudformation describe-stacks --stack-name "$drill" --output text \
  --query "Stacks[0].Outputs[?OutputKey=='ExperimentTemplateId'].OutputValue")
experiment=$(aws fis start-experiment --experiment-template-id "$template" --output text --query experiment.id)
echo "experiment $experiment started: one Spot instance of $STACK_NAME's $TIER tier gets the notice"
echo "watch: STACK_NAME=$STACK_NAME TIER=$TIER EXPERIMENT=$experiment demos/spot-interruption/observe.sh"
echo "after: STACK_NAME=$STACK_NAME TIER=$TIER demos/spot-interruption/run.sh --cleanup"
