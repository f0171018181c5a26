#!/usr/bin/env bash
# Deletes a gpuinfer deployment: the CloudFormation stack, and with --delete-data everything the stack keeps
# when it is deleted (its DeletionPolicy: Retain resources: the results and access-log buckets, the ECR
# repository, the KMS key), the ECR pull-through-cache repositories its builds filled, and the artifact bucket
# scripts/deploy.sh created for it. Without --delete-data those stay, and it lists each with its measured size
# and what keeping it costs. It asks first on a terminal (unless --yes). `scripts/destroy.sh --help` says more.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# template.yaml's resources with DeletionPolicy: Retain (tests/it/deploy_journey.rs holds this list to the
# template's).
RETAINED=(ResultsBucket AccessLogsBucket Repository LogsKey)
# The cluster and its GPU services: stopped before the stack is deleted (see stop_gpu_tiers).
GPU_SERVICES=(SmallService LargeService)
POLL="${GPUINFER_DEPLOY_POLL_SECONDS:-30}"
# How long the GPU instances get to leave the cluster before the delete is tried anyway.
DRAIN_LIMIT_SECONDS="${GPUINFER_DESTROY_DRAIN_SECONDS:-1800}"
# KMS: a waiting period of 7 to 30 days before a key is deleted (ScheduleKeyDeletion); the shortest.
KEY_PENDING_DAYS=7
# Prices, from AWS's pricing pages as read on 2026-12-02. KMS: "Each AWS KMS key that you create in KMS costs
# $1/month", each automatically rotated backing key $1/month more, and nothing for a key scheduled for deletion
# (https://aws.amazon.com/kms/pricing/). S3 and ECR storage prices vary by Region: their pages are linked.
KMS_PRICING="https://aws.amazon.com/kms/pricing/, read 2026-12-02"
S3_PRICING="https://aws.amazon.com/s3/pricing/"
ECR_PRICING="https://aws.amazon.com/ecr/pricing/"
LOGS_PRICING="https://aws.amazon.com/cloudwatch/pricing/"
PULL_THROUGH_PREFIX=gpuinfer-docker-hub/
# JMESPath queries; `…` is a JMESPath literal, not a shell command.
# shellcheck disable=SC2016
USAGE_QUERY='[length(Versions || `[]`), sum(Versions[].Size || `[]`), length(DeleteMarkers || `[]`)]'
# shellcheck disable=SC2016
VERSIONS_QUERY='{Objects: [Versions[].{Key: Key, VersionId: VersionId}, DeleteMarkers[].{Key: Key, VersionId: VersionId}][], Quiet: `true`}'

usage() {
    cat <<'EOF'
Usage: scripts/destroy.sh [--stack NAME] [--region REGION] [--profile PROFILE] [--delete-data] [--yes] [--help]

Deletes the gpuinfer stack made by scripts/deploy.sh, and waits until it is gone.
  1 reads the stack: its status, the ids of what it keeps on delete (results bucket, access-log bucket, ECR
    repository, KMS key), its artifact bucket; measures each (object versions and bytes, image sizes).
  2 asks for confirmation on a terminal (--yes: do not ask; required when not on a terminal).
  3 stops the GPU tiers (their scaling targets and services at 0 tasks) and waits until the cluster's
    Managed Instances have left it (a capacity provider still in use cannot leave the cluster, and the
    delete would fail), then deletes the stack and waits for DELETE_COMPLETE.
  4 without --delete-data: lists what is kept, its size and what keeping it costs; run again with
    --delete-data to delete it (this works for 90 days after the stack is gone: CloudFormation keeps the
    deleted stack's record that long).
    with --delete-data: empties the results and access-log buckets of every object version and delete
    marker, deletes them, deletes the ECR repository with its images and the cluster's Container Insights
    performance log group (ECS makes it, no stack owns it), schedules the KMS key for deletion
    (7 days, the shortest wait KMS allows; cancel with aws kms cancel-key-deletion), and deletes the
    artifact bucket when deploy.sh created it for this stack (a bucket of yours passed with
    --artifact-bucket is left alone).

Flags:
  --stack NAME       the stack (default gpuinfer).
  --region REGION    its Region (default: AWS_REGION, AWS_DEFAULT_REGION, then the profile's region).
  --profile PROFILE  AWS CLI profile (default: AWS_PROFILE, else the CLI's default chain).
  --delete-data      also delete the results, logs, images and key (this cannot be undone, but for the key
                     during its waiting period).
  --yes              do not ask.
  --help             this text.
Exit status: 0 done; 1 a step failed or you said no; 2 a bad command line.
EOF
}

refuse() {
    printf 'destroy: %s\n\n' "$*" >&2
    usage >&2
    exit 2
}

elapsed() { printf '%02d:%02d' $((SECONDS / 60)) $((SECONDS % 60)); }
step() { printf '[%s] %s\n' "$(elapsed)" "$*"; }
note() { printf '[%s]     %s\n' "$(elapsed)" "$*"; }
die() {
    printf '[%s] destroy: %s\n' "$(elapsed)" "$1" >&2
    shift
    (($# == 0)) || printf '    %s\n' "$@" >&2
    exit 1
}

STACK=gpuinfer REGION="" PROFILE="${AWS_PROFILE:-}" DELETE_DATA="" YES=""

parse_args() {
    while (($#)); do
        case $1 in
            --stack | --region | --profile)
                (($# >= 2)) || refuse "$1 needs a value"
                case $1 in --stack) STACK=$2 ;; --region) REGION=$2 ;; --profile) PROFILE=$2 ;; esac
                shift 2
                ;;
            --stack=*) STACK=${1#*=} && shift ;;
            --region=*) REGION=${1#*=} && shift ;;
            --profile=*) PROFILE=${1#*=} && shift ;;
            --delete-data) DELETE_DATA=1 && shift ;;
            --yes) YES=1 && shift ;;
            -h | --help) usage && exit 0 ;;
            *) refuse "unknown argument: $1" ;;
        esac
    done
    [[ $STACK =~ ^[A-Za-z][A-Za-z0-9-]{0,127}$ ]] || refuse "--stack '$STACK': a letter, then letters, digits and hyphens"
    [[ -z $REGION || $REGION =~ ^[a-z]{2}(-[a-z]+)+-[0-9]+$ ]] || refuse "--region '$REGION' is not a Region code (e.g. us-west-2)"
}

AWS_ARGS=()
aws_() { aws "${AWS_ARGS[@]}" "$@"; }

ACCOUNT="" PARTITION=""
preflight() {
    step "preflight: the AWS CLI and your identity"
    command -v aws >/dev/null || die "the AWS CLI is not installed" "Install v2: https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
    local version identity arn
    version=$(aws --version 2>&1) || die "'aws --version' failed: $version"
    [[ $version == aws-cli/2.* ]] || die "this needs the AWS CLI v2; found: $version"
    [[ -n $REGION ]] || REGION=${AWS_REGION:-${AWS_DEFAULT_REGION:-}}
    if [[ -z $REGION ]]; then
        local args=(configure get region)
        [[ -z $PROFILE ]] || args+=(--profile "$PROFILE")
        REGION=$(aws "${args[@]}" 2>/dev/null || true)
    fi
    [[ -n $REGION ]] || refuse "no AWS Region: pass --region (e.g. --region us-west-2), or set AWS_REGION"
    AWS_ARGS=(--region "$REGION")
    [[ -z $PROFILE ]] || AWS_ARGS+=(--profile "$PROFILE")
    identity=$(aws_ sts get-caller-identity --query '[Account,Arn]' --output text) ||
        die "the AWS CLI has no working credentials${PROFILE:+ for profile $PROFILE}" "For SSO run aws sso login${PROFILE:+ --profile $PROFILE} first."
    read -r ACCOUNT arn <<<"$identity"
    PARTITION=$(cut -d: -f2 <<<"$arn")
    note "account $ACCOUNT, region $REGION, as $arn"
}

# ------------------------------------------------------------------------------------------- reading

STACK_ID="" STACK_STATUS=""
find_stack() {
    local answer
    if answer=$(aws_ cloudformation describe-stacks --stack-name "$STACK" --query 'Stacks[0].[StackId,StackStatus]' --output text 2>"$TMP/err"); then
        read -r STACK_ID STACK_STATUS <<<"$answer"
        return
    fi
    grep -q 'does not exist' "$TMP/err" || { cat "$TMP/err" >&2; die "cannot read stack $STACK"; }
    # A stack deleted earlier: CloudFormation keeps its record (and its resources' ids) for 90 days.
    STACK_ID=$(aws_ cloudformation list-stacks --stack-status-filter DELETE_COMPLETE \
        --query "StackSummaries[?StackName=='$STACK'].StackId | [0]" --output text)
    [[ -n $STACK_ID && $STACK_ID != None ]] || {
        step "no stack $STACK in $REGION (nor one deleted in the last 90 days): nothing to delete"
        exit 0
    }
    STACK_STATUS=DELETE_COMPLETE
}

stack_parameter() {
    aws_ cloudformation describe-stacks --stack-name "$STACK_ID" \
        --query "Stacks[0].Parameters[?ParameterKey=='$1'].ParameterValue | [0]" --output text | sed 's/^None$//'
}

# What the stack keeps on delete, by logical id: physical id, read before anything is deleted.
declare -A KEPT=() GPU=()
declare -A USAGE=()
PERFORMANCE_LOGS=""
ARTIFACT_BUCKET="" ARTIFACT_OURS="" PULL_THROUGH=() OUTPUT_DESTINATION=""
read_resources() {
    step "stack $STACK ($STACK_STATUS): reading what it keeps when deleted"
    local logical id
    for logical in "${RETAINED[@]}"; do
        id=$(physical_id "$logical")
        [[ -z $id ]] || KEPT[$logical]=$id
    done
    for logical in Cluster "${GPU_SERVICES[@]}"; do
        id=$(physical_id "$logical")
        [[ -z $id ]] || GPU[$logical]=$id
    done
    if [[ -n ${GPU[Cluster]:-} ]]; then
        local group="/aws/ecs/containerinsights/${GPU[Cluster]}/performance" bytes
        bytes=$(aws_ logs describe-log-groups --log-group-name-prefix "$group" \
            --query "logGroups[?logGroupName=='$group'].storedBytes | [0]" --output text 2>/dev/null || true)
        if [[ -n $bytes && $bytes != None ]]; then
            PERFORMANCE_LOGS=$group
            USAGE[PerformanceLogs]="$bytes bytes stored"
        fi
    fi
    ARTIFACT_BUCKET=$(stack_parameter ArtifactBucket)
    OUTPUT_DESTINATION=$(stack_parameter OutputDestination)
    if [[ -n $ARTIFACT_BUCKET ]] && ! bucket_exists "$ARTIFACT_BUCKET"; then
        ARTIFACT_BUCKET=""
    elif [[ -n $ARTIFACT_BUCKET ]]; then
        local tags
        tags=$(aws_ s3api get-bucket-tagging --bucket "$ARTIFACT_BUCKET" --expected-bucket-owner "$ACCOUNT" \
            --query "TagSet[?Key=='gpuinfer:stack'].Value | [0]" --output text 2>/dev/null || true)
        [[ $tags != "$STACK" ]] || ARTIFACT_OURS=1
    fi
    # With DockerHubCredentialArn the image builds pulled through an ECR cache, which made repositories of its
    # own under this prefix; the stack does not delete them.
    if [[ -n $(stack_parameter DockerHubCredentialArn) ]]; then
        read -ra PULL_THROUGH < <(aws_ ecr describe-repositories --output text \
            --query "repositories[?starts_with(repositoryName, '$PULL_THROUGH_PREFIX')].repositoryName") || true
    fi
    measure
}

# The physical id of the stack's resource $1, empty when the stack never made it. One DescribeStackResources per
# logical id: without one it returns only the first 100 resources, and this stack has more.
physical_id() {
    local id
    if id=$(aws_ cloudformation describe-stack-resources --stack-name "$STACK_ID" --logical-resource-id "$1" \
        --query 'StackResources[0].PhysicalResourceId' --output text 2>"$TMP/err"); then
        [[ $id == None ]] || printf '%s' "$id"
        return
    fi
    # A create that failed before making the resource: ValidationError "Resource … does not exist".
    grep -q 'does not exist' "$TMP/err" || { cat "$TMP/err" >&2; die "cannot read the stack's $1"; }
}

bucket_exists() {
    aws_ s3api head-bucket --bucket "$1" --expected-bucket-owner "$ACCOUNT" >/dev/null 2>"$TMP/err" && return 0
    grep -q '(404)' "$TMP/err" && return 1
    cat "$TMP/err" >&2
    die "cannot read s3://$1"
}

repository_exists() {
    aws_ ecr describe-repositories --repository-names "$1" --query 'repositories[0].repositoryName' --output text >/dev/null 2>"$TMP/err" && return 0
    grep -q RepositoryNotFoundException "$TMP/err" && return 1
    cat "$TMP/err" >&2
    die "cannot read ECR repository $1"
}

# Sizes as measured now: every object version and delete marker of a bucket (a versioned bucket bills all
# versions), every image of a repository (images share layers, so their sum is an upper bound).
measure() {
    local logical
    for logical in ResultsBucket AccessLogsBucket; do
        [[ -z ${KEPT[$logical]:-} ]] || USAGE[$logical]=$(bucket_usage "${KEPT[$logical]}")
    done
    [[ -z $ARTIFACT_BUCKET ]] || USAGE[ArtifactBucket]=$(bucket_usage "$ARTIFACT_BUCKET")
    [[ -z ${KEPT[Repository]:-} ]] || USAGE[Repository]=$(repository_usage "${KEPT[Repository]}")
    local repository
    for repository in "${PULL_THROUGH[@]}"; do USAGE[$repository]=$(repository_usage "$repository"); done
    [[ -z ${KEPT[LogsKey]:-} ]] || USAGE[LogsKey]=$(key_usage "${KEPT[LogsKey]}")
}

key_usage() {
    local state date
    if ! read -r state date < <(aws_ kms describe-key --key-id "$1" --query 'KeyMetadata.[KeyState,DeletionDate]' --output text 2>/dev/null); then
        echo gone
    elif [[ $state == PendingDeletion ]]; then
        echo "pending deletion, deleted on $date (not billed meanwhile)"
    else
        echo "$state, a customer managed key"
    fi
}

bucket_usage() {
    bucket_exists "$1" || { echo gone; return; }
    # --output text prints one line per page of results: the sums add the pages up.
    aws_ s3api list-object-versions --bucket "$1" --expected-bucket-owner "$ACCOUNT" --output text \
        --query "$USAGE_QUERY" |
        awk '{ v += $1; s += $2; m += $3 } END { printf "%d object versions, %s, %d delete markers\n", v, human(s), m }
             function human(b) { if (b >= 1073741824) return sprintf("%.1f GiB", b / 1073741824);
                                 if (b >= 1048576) return sprintf("%.1f MiB", b / 1048576);
                                 if (b >= 1024) return sprintf("%.1f KiB", b / 1024); return b " bytes" }'
}

repository_usage() {
    repository_exists "$1" || { echo gone; return; }
    aws_ ecr describe-images --repository-name "$1" --output text \
        --query '[length(imageDetails), sum(imageDetails[].imageSizeInBytes)]' |
        awk '{ n += $1; s += $2 } END { printf "%d images, up to %.1f GiB\n", n, s / 1073741824 }'
}

# ------------------------------------------------------------------------------------------- deleting

show_plan() {
    local what="stays (--delete-data deletes it too)"
    [[ -z $DELETE_DATA ]] || what="is deleted too (--delete-data), for good"
    local stack="will be deleted"
    [[ $STACK_STATUS != DELETE_COMPLETE ]] || stack="was deleted before"
    printf '\nStack %s in %s %s. What it keeps on delete %s:\n' "$STACK" "$REGION" "$stack" "$what"
    list_resources
}

list_resources() {
    [[ -z ${KEPT[ResultsBucket]:-} ]] || printf '  results bucket     s3://%s: %s\n' "${KEPT[ResultsBucket]}" "${USAGE[ResultsBucket]}"
    [[ -z ${KEPT[AccessLogsBucket]:-} ]] || printf '  access-log bucket  s3://%s: %s\n' "${KEPT[AccessLogsBucket]}" "${USAGE[AccessLogsBucket]}"
    [[ -z ${KEPT[Repository]:-} ]] || printf '  ECR repository     %s: %s\n' "${KEPT[Repository]}" "${USAGE[Repository]}"
    local repository
    for repository in "${PULL_THROUGH[@]}"; do
        printf '  ECR pull-through cache %s: %s\n' "$repository" "${USAGE[$repository]}"
    done
    [[ -z ${KEPT[LogsKey]:-} ]] || printf '  KMS key            %s: %s\n' "${KEPT[LogsKey]}" "${USAGE[LogsKey]}"
    [[ -z $PERFORMANCE_LOGS ]] || printf '  log group          %s (Container Insights): %s\n' "$PERFORMANCE_LOGS" "${USAGE[PerformanceLogs]}"
    if [[ -n $ARTIFACT_BUCKET ]]; then
        if [[ -n $ARTIFACT_OURS ]]; then
            printf '  artifact bucket    s3://%s (made by deploy.sh): %s\n' "$ARTIFACT_BUCKET" "${USAGE[ArtifactBucket]}"
        else
            printf '  artifact bucket    s3://%s: %s; not made by deploy.sh for this stack, never deleted here\n' \
                "$ARTIFACT_BUCKET" "${USAGE[ArtifactBucket]}"
        fi
    fi
    [[ -z $OUTPUT_DESTINATION ]] || printf '  results also went to %s (OutputDestination, yours): not touched\n' "$OUTPUT_DESTINATION"
}

confirm() {
    [[ -z $YES ]] || return 0
    [[ -t 0 ]] || refuse "not on a terminal: pass --yes to delete without being asked"
    local answer
    read -r -p "Type yes to go on: " answer
    [[ $answer == yes ]] || die "nothing was deleted (you answered '${answer}')"
}

# Stops both GPU tiers and waits until the cluster's Managed Instances have left it: each scaling target capped at
# 0 tasks (RegisterScalableTarget; otherwise a queued message would scale the tier up again), each service at 0
# (UpdateService), then ListContainerInstances until none is left. A capacity provider with instances registered
# cannot leave its cluster, which fails the stack's delete; past DRAIN_LIMIT_SECONDS the delete is tried anyway.
stop_gpu_tiers() {
    local cluster=${GPU[Cluster]:-} logical service left started=$SECONDS
    [[ -n $cluster ]] || return 0
    step "stopping the GPU tiers of cluster $cluster"
    for logical in "${GPU_SERVICES[@]}"; do
        service=${GPU[$logical]:-}
        [[ -n $service ]] || continue
        aws_ application-autoscaling register-scalable-target --service-namespace ecs --scalable-dimension ecs:service:DesiredCount \
            --resource-id "service/$cluster/${service##*/}" --min-capacity 0 --max-capacity 0 >/dev/null 2>"$TMP/err" ||
            note "$(grep -v '^$' "$TMP/err" | tail -n 1) (scaling target of ${service##*/}: left as it is)"
    done
    while true; do
        # Again at each look: the router still runs, and a request's wake on arrival sets a tier's count to 1.
        zero_services "$cluster"
        left=$(aws_ ecs list-container-instances --cluster "$cluster" --query 'length(containerInstanceArns)' --output text 2>"$TMP/err") || {
            grep -q ClusterNotFoundException "$TMP/err" && return 0
            cat "$TMP/err" >&2
            die "cannot list the instances of cluster $cluster"
        }
        ((left > 0)) || break
        if ((SECONDS - started >= DRAIN_LIMIT_SECONDS)); then
            note "warning: $left GPU instances still in cluster $cluster after ${DRAIN_LIMIT_SECONDS} s: deleting anyway"
            return 0
        fi
        note "waiting: $left GPU instances still in cluster $cluster (Managed Instances end idle ones)"
        sleep "$POLL"
    done
    note "no GPU instance is left in cluster $cluster"
}

# Sets both GPU services of `cluster` to 0 tasks (UpdateService); a service already gone is no error.
zero_services() {
    local logical service
    for logical in "${GPU_SERVICES[@]}"; do
        service=${GPU[$logical]:-}
        [[ -n $service ]] || continue
        aws_ ecs update-service --cluster "$1" --service "$service" --desired-count 0 >/dev/null 2>"$TMP/err" && continue
        grep -qE 'ServiceNotFoundException|ServiceNotActiveException|ClusterNotFoundException' "$TMP/err" ||
            { cat "$TMP/err" >&2; die "cannot stop service ${service##*/}"; }
    done
}

delete_stack() {
    if [[ $STACK_STATUS == DELETE_COMPLETE ]]; then
        step "stack $STACK was deleted before"
        return
    fi
    stop_gpu_tiers
    step "deleting stack $STACK"
    aws_ cloudformation delete-stack --stack-name "$STACK_ID" || die "CloudFormation refused to delete stack $STACK ($STACK_STATUS)"
    local status=DELETE_IN_PROGRESS
    while true; do
        status=$(aws_ cloudformation describe-stacks --stack-name "$STACK_ID" --query 'Stacks[0].StackStatus' --output text)
        [[ $status == *_IN_PROGRESS ]] || break
        note "waiting: stack $STACK is $status"
        sleep "$POLL"
    done
    if [[ $status != DELETE_COMPLETE ]]; then
        # The failed events among the newest 50. When the stack has more, the AWS CLI ends its text output with
        # the resume token: a line `None` through --query (aws/aws-cli issues 7277 and 10449), or
        # `NEXTTOKEN<tab><token>` from newer CLIs. Only a row with a *_FAILED status (what the query selects) is
        # an event.
        local logical reason
        printf 'Failed stack events (newest first):\n' >&2
        while IFS=$'\t' read -r logical status reason; do
            [[ -n $logical && $status == *_FAILED ]] || continue
            printf '  %s %s: %s\n' "$logical" "$status" "$reason" >&2
        done < <(aws_ cloudformation describe-stack-events --stack-name "$STACK_ID" --max-items 50 --output text \
            --query "StackEvents[?ends_with(ResourceStatus, '_FAILED')].[LogicalResourceId,ResourceStatus,ResourceStatusReason]")
        die "deleting stack $STACK failed; no data was deleted" "Fix the resources above (or delete them by hand), then run destroy again."
    fi
    note "stack $STACK: DELETE_COMPLETE"
}

delete_data() {
    step "deleting what the stack kept"
    [[ -z ${KEPT[ResultsBucket]:-} ]] || delete_bucket "${KEPT[ResultsBucket]}"
    # After the results bucket: no new access logs are written for it then.
    [[ -z ${KEPT[AccessLogsBucket]:-} ]] || delete_bucket "${KEPT[AccessLogsBucket]}"
    [[ -z ${KEPT[Repository]:-} ]] || delete_repository "${KEPT[Repository]}"
    local repository
    for repository in "${PULL_THROUGH[@]}"; do delete_repository "$repository"; done
    [[ -z ${KEPT[LogsKey]:-} ]] || delete_key "${KEPT[LogsKey]}"
    [[ -z $PERFORMANCE_LOGS ]] || delete_log_group "$PERFORMANCE_LOGS"
    if [[ -n $ARTIFACT_OURS ]]; then
        delete_bucket "$ARTIFACT_BUCKET"
        step "done: nothing of stack $STACK is left"
    elif [[ -n $ARTIFACT_BUCKET ]]; then
        step "done: nothing of stack $STACK is left but your artifact bucket s3://$ARTIFACT_BUCKET (not made by deploy.sh for it)"
    else
        step "done: nothing of stack $STACK is left"
    fi
}

# A versioned bucket is deleted only when no object version and no delete marker is left: ListObjectVersions,
# one page of at most 1,000 entries at a time (--no-paginate --max-keys 1000), and DeleteObjects with their
# version ids (up to 1,000 keys per request), until nothing is listed. Late server access logs can land in the
# log bucket while it is being emptied: then it is emptied again.
delete_bucket() {
    local bucket=$1 listing="$TMP/versions.json" count errors deleted=0
    bucket_exists "$bucket" || { note "s3://$bucket: already gone"; return; }
    for _ in 1 2 3; do
        while true; do
            aws_ s3api list-object-versions --bucket "$bucket" --expected-bucket-owner "$ACCOUNT" --no-paginate --max-keys 1000 \
                --output json --query "$VERSIONS_QUERY" \
                >"$listing"
            count=$(grep -c '"Key":' "$listing" || true)
            ((count > 0)) || break
            errors=$(aws_ s3api delete-objects --bucket "$bucket" --expected-bucket-owner "$ACCOUNT" --delete "file://$listing" \
                --query 'Errors[].[Key,VersionId,Code,Message]' --output text)
            [[ -z $errors || $errors == None ]] || die "s3://$bucket: some versions could not be deleted:" "$errors"
            deleted=$((deleted + count))
            note "s3://$bucket: $deleted object versions and delete markers deleted"
        done
        if aws_ s3api delete-bucket --bucket "$bucket" --expected-bucket-owner "$ACCOUNT" 2>"$TMP/err"; then
            note "s3://$bucket: deleted"
            return
        fi
        grep -q BucketNotEmpty "$TMP/err" || { cat "$TMP/err" >&2; die "cannot delete s3://$bucket"; }
        sleep "$POLL"
    done
    die "s3://$bucket keeps filling up; nothing else writes to it once the stack is gone: run destroy again"
}

delete_log_group() {
    if aws_ logs delete-log-group --log-group-name "$1" 2>"$TMP/err"; then
        note "log group $1: deleted"
        return
    fi
    grep -q ResourceNotFoundException "$TMP/err" || { cat "$TMP/err" >&2; die "cannot delete log group $1"; }
    note "log group $1: already gone"
}

delete_repository() {
    repository_exists "$1" || { note "ECR repository $1: already gone"; return; }
    aws_ ecr delete-repository --repository-name "$1" --force --query repository.repositoryName --output text >/dev/null
    note "ECR repository $1: deleted with its images"
}

delete_key() {
    local state
    state=$(aws_ kms describe-key --key-id "$1" --query 'KeyMetadata.[KeyState,DeletionDate]' --output text 2>"$TMP/err") || {
        grep -q NotFoundException "$TMP/err" && { note "KMS key $1: already gone"; return; }
        cat "$TMP/err" >&2
        die "cannot read KMS key $1"
    }
    if [[ $state == PendingDeletion* ]]; then
        note "KMS key $1: already scheduled for deletion on ${state#*$'\t'}"
        return
    fi
    local when
    when=$(aws_ kms schedule-key-deletion --key-id "$1" --pending-window-in-days "$KEY_PENDING_DAYS" --query DeletionDate --output text)
    note "KMS key $1: KMS deletes it on $when (no charge until then; aws kms cancel-key-deletion --key-id $1 undoes this)"
}

report_kept() {
    step "kept, and still billed until you delete it:"
    list_resources
    local kms_price="\$1/month, and \$1/month more for each backing key automatic rotation (yearly) adds; nothing once scheduled for deletion"
    [[ $PARTITION == aws ]] || kms_price="see the pricing page"
    cat <<EOF

What keeping them costs:
  S3 buckets: S3 Standard storage per GB-month of all versions above, Region $REGION: $S3_PRICING
  ECR images: storage per GB-month: $ECR_PRICING
  KMS key:    $kms_price ($KMS_PRICING)
  Log group:  CloudWatch Logs storage per GB-month: $LOGS_PRICING
Delete them with: scripts/destroy.sh --stack $STACK --region $REGION${PROFILE:+ --profile $PROFILE} --delete-data
(it finds them through the deleted stack's record for 90 days).
EOF
}

main() {
    parse_args "$@"
    export AWS_PAGER=""
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    preflight
    find_stack
    read_resources
    show_plan
    confirm
    delete_stack
    if [[ -n $DELETE_DATA ]]; then delete_data; else report_kept; fi
}

main "$@"
