#!/usr/bin/env bash
# Deploys gpuinfer to AWS, or updates a deployment, with the AWS CLI v2, git and bash only (no local Docker,
# Rust or zip): artifact bucket, build source, stack, the Lambda zip and the inference image built on
# CodeBuild, then the stack switched to them. Every step waits for AWS and stops on the first failure, saying
# what failed and where to look; nothing is switched on that was not built. `scripts/deploy.sh --help` says
# more. Its counterpart is scripts/destroy.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEFAULT_MODEL=TheBloke/Mistral-7B-Instruct-v0.2-AWQ
DEFAULT_LARGE_MODEL=TheBloke/Llama-2-70B-Chat-AWQ
DEFAULT_ROUTER_CODE_KEY=gpuinfer/bootstrap.zip
POLL="${GPUINFER_DEPLOY_POLL_SECONDS:-30}"
# Parameters this script sets itself: from its flags, or from what it built.
MANAGED_PARAMETERS=" ArtifactBucket ModelName LargeModelName LambdaArchitecture AlarmEmail ImageTag ImagePushed RouterCodeBuilt RouterCodeVersion "
TOTAL_STEPS=7

usage() {
    cat <<'EOF'
Usage: scripts/deploy.sh [--stack NAME] [--region REGION] [--profile PROFILE] [--model HF_ID]
                         [--large-model HF_ID] [--alarm-email ADDRESS] [--lambda-architecture x86_64|arm64]
                         [--artifact-bucket BUCKET] [--capacity TIER=CHOICE]... [--parameter Key=Value]...
                         [--skip-quota-check]
                         [--template-first] [--help]

Deploys gpuinfer (template.yaml) to AWS, or updates it: run it again after a change and it ships the change.
Needs the AWS CLI v2 with your usual credentials (environment keys, a profile, or SSO: `aws sso login`),
git and bash. It builds nothing locally: CodeBuild builds the Lambda zip and the inference image.

Steps (each waits for AWS and stops at the first failure with what failed and where to look):
  1 preflight   the AWS CLI is v2; who you are (aws sts get-caller-identity); the stack's state; the account's
                GPU quota (EC2 "Running On-Demand G and VT instances", in vCPUs): refused below one small task's
                instance (g6e.xlarge, 4), a warning below one of each tier's (g6e.48xlarge, 192 more).
  2 artifacts   the artifact bucket: --artifact-bucket, else the one the stack already uses, else
                <stack>-artifacts-<account>-<region>-an in your account regional namespace (no other account
                can own that name), created private (public access blocked, bucket-owner-enforced) with
                versioning on. Then the build source: `git archive` of HEAD plus your uncommitted changes to
                tracked files (untracked files are not shipped: git add them) as container-source.zip.
  3 stack       creates the stack with RouterCodeBuilt=false ImagePushed=false (no functions, API routes or
                GPU tasks yet: their code is not built), or updates it with this template while keeping the
                code it runs. On an update the image (step 5) is built first, on the stack's build project,
                so the GPU services roll once, onto template and image together (--template-first: the
                template before both builds, for a release that changes the build project itself).
  4 Lambda zip  CodeBuild builds the router/scaler zip into the artifact bucket, on a host of the functions'
                architecture; it deploys nothing, step 6 points the stack at its S3 object version. Skipped
                when the stack already runs a zip built from the same source for the same architecture.
  5 image       tag v<Cargo.toml version>-<12 hex of the source tree>; skipped when ECR already has it (the
                same source), else CodeBuild builds and pushes it.
  6 switch on   updates the stack with RouterCodeBuilt=true ImagePushed=true and that zip version and tag:
                only now can the tiers scale out.
  7 done        fetches the gpuinfer CLI to dist/gpuinfer (on Linux of the functions' architecture: the Lambda
                build's binary), prints the API URL, the dashboard, a signed request to copy, how to read its result.
Running it again is an update: nothing is created twice.

Flags:
  --stack NAME                 CloudFormation stack name (default gpuinfer).
  --region REGION              AWS Region (default: AWS_REGION, AWS_DEFAULT_REGION, then the profile's region).
  --profile PROFILE            AWS CLI profile (default: AWS_PROFILE, else the CLI's default chain).
  --model HF_ID                small tier's Hugging Face model (on create: TheBloke/Mistral-7B-Instruct-v0.2-AWQ;
                               on update: the stack's, unless given).
  --large-model HF_ID          large tier's model (on create: TheBloke/Llama-2-70B-Chat-AWQ; on update: kept).
  --alarm-email ADDRESS        subscribes ADDRESS to the alarm topic (confirm the mail AWS sends).
  --lambda-architecture ARCH   x86_64 or arm64 for the router and scaler (on create: x86_64; on update: kept);
                               a change reaches the functions with their new zip, at step 6.
  --artifact-bucket BUCKET     use this bucket of yours (versioning must be Enabled), or create it.
  --capacity TIER=CHOICE       a tier's instances (repeatable): on-demand (on create: both), spot, or
                               spot-with-fallback (On-Demand while Spot has none); e.g. --capacity small=spot.
  --parameter Key=Value        any other template parameter (repeatable), e.g. --parameter MaxTaskCount=4.
  --skip-quota-check           do not read the GPU quota (no servicequotas:GetServiceQuota, or you know better).
  --template-first             on an update, apply the template before building the image (the services may
                               roll twice: new template on the old image, then the new image).
  --help                       this text.
Environment: GPUINFER_DEPLOY_POLL_SECONDS (default 30) is how often a wait asks AWS again.
Exit status: 0 deployed; 1 a step failed (the message says which and what to do); 2 a bad command line.
EOF
}

refuse() {
    printf 'deploy: %s\n\n' "$*" >&2
    usage >&2
    exit 2
}

elapsed() { printf '%02d:%02d' $((SECONDS / 60)) $((SECONDS % 60)); }
STEP=0
step() {
    STEP=$((STEP + 1))
    printf '[%s] %d/%d %s\n' "$(elapsed)" "$STEP" "$TOTAL_STEPS" "$*"
}
note() { printf '[%s]     %s\n' "$(elapsed)" "$*"; }
die() {
    if ((STEP > 0)); then
        printf '[%s] deploy: step %d failed: %s\n' "$(elapsed)" "$STEP" "$1" >&2
    else
        printf '[%s] deploy: %s\n' "$(elapsed)" "$1" >&2
    fi
    shift
    (($# == 0)) || printf '    %s\n' "$@" >&2
    exit 1
}

# ------------------------------------------------------------------------------------------- command line

STACK=gpuinfer REGION="" PROFILE="${AWS_PROFILE:-}" MODEL="" LARGE_MODEL="" ALARM_EMAIL="" LAMBDA_ARCH=""
ARTIFACT_BUCKET="" QUOTA_CHECK=true TEMPLATE_FIRST=false
PARAMETERS=()

parse_args() {
    while (($#)); do
        local flag=$1 value
        case ${flag%%=*} in
            --stack | --region | --profile | --model | --large-model | --alarm-email | --lambda-architecture | \
                --artifact-bucket | --parameter | --capacity | --help | -h) ;;
            --skip-quota-check | --template-first)
                [[ $flag == --skip-quota-check ]] && QUOTA_CHECK=false || TEMPLATE_FIRST=true
                shift
                continue
                ;;
            *) refuse "unknown flag: $flag" ;;
        esac
        if [[ $flag == --*=* ]]; then
            value=${flag#*=} flag=${flag%%=*}
            shift
        elif [[ $flag == --help || $flag == -h ]]; then
            usage
            exit 0
        else
            (($# >= 2)) || refuse "$flag needs a value"
            value=$2
            shift 2
        fi
        case $flag in
            --stack) STACK=$value ;;
            --region) REGION=$value ;;
            --profile) PROFILE=$value ;;
            --model) MODEL=$value ;;
            --large-model) LARGE_MODEL=$value ;;
            --alarm-email) ALARM_EMAIL=$value ;;
            --lambda-architecture) LAMBDA_ARCH=$value ;;
            --artifact-bucket) ARTIFACT_BUCKET=$value ;;
            --parameter) PARAMETERS+=("$value") ;;
            --capacity)
                [[ $value =~ ^(small|large)=(on-demand|spot|spot-with-fallback)$ ]] ||
                    refuse "--capacity '$value': TIER=CHOICE, TIER small or large, CHOICE on-demand, spot or spot-with-fallback"
                local tier=${value%%=*}
                PARAMETERS+=("${tier^}Capacity=${value#*=}")
                ;;
        esac
    done
    # CloudFormation stack names: a letter, then letters, digits and hyphens, 128 at most.
    [[ $STACK =~ ^[A-Za-z][A-Za-z0-9-]{0,127}$ ]] || refuse "--stack '$STACK': a letter, then letters, digits and hyphens"
    [[ -z $REGION || $REGION =~ ^[a-z]{2}(-[a-z]+)+-[0-9]+$ ]] || refuse "--region '$REGION' is not a Region code (e.g. us-west-2)"
    [[ -z $LAMBDA_ARCH || $LAMBDA_ARCH == x86_64 || $LAMBDA_ARCH == arm64 ]] || refuse "--lambda-architecture must be x86_64 or arm64, not '$LAMBDA_ARCH'"
    [[ -z $MODEL || $MODEL =~ ^[A-Za-z0-9][A-Za-z0-9._/-]*$ ]] || refuse "--model '$MODEL' is not a Hugging Face model id"
    [[ -z $LARGE_MODEL || $LARGE_MODEL =~ ^[A-Za-z0-9][A-Za-z0-9._/-]*$ ]] || refuse "--large-model '$LARGE_MODEL' is not a Hugging Face model id"
    [[ -z $ALARM_EMAIL || $ALARM_EMAIL =~ ^[^@[:space:]]+@[^@[:space:]]+$ ]] || refuse "--alarm-email '$ALARM_EMAIL' is not a mail address"
    if [[ -n $ARTIFACT_BUCKET ]]; then
        valid_bucket_name "$ARTIFACT_BUCKET" || refuse "--artifact-bucket '$ARTIFACT_BUCKET' breaks S3's bucket naming rules (3-63 lower-case letters, digits, dots, hyphens)"
    fi
    read_template_parameters
    local parameter key close
    for parameter in "${PARAMETERS[@]}"; do
        [[ $parameter =~ ^[A-Za-z0-9]+=.*$ ]] || refuse "--parameter '$parameter' is not Key=Value"
        key=${parameter%%=*}
        [[ $MANAGED_PARAMETERS != *" $key "* ]] || refuse "--parameter $key: deploy.sh sets $key itself (see the flags, or it follows what was built)"
        if [[ $TEMPLATE_PARAMETERS != *" $key "* ]]; then
            close=$(close_parameters "$key")
            refuse "--parameter $parameter: template.yaml has no parameter $key${close:+ (did you mean $close?)};" \
                "cloudformation deploy would drop it without a word. The parameters are the keys under Parameters: in template.yaml."
        fi
    done
}

# cloudformation deploy builds the change set's parameters from the template's and drops an override the
# template does not declare without a word (the AWS CLI's merge_parameters): every key this script passes, its
# own and --parameter's, is checked against template.yaml's Parameters before any AWS call. They are read
# without a YAML parser (template.yaml's short tags such as !Ref defeat plain ones): the keys of the top-level
# Parameters: block at the indentation of its first key.
TEMPLATE_PARAMETERS=" "
read_template_parameters() {
    [[ -f template.yaml ]] || die "there is no template.yaml in $(pwd)" "Run deploy.sh from a gpuinfer checkout."
    local names key
    names=$(awk '
        /^[^[:space:]#]/ { inside = ($0 ~ /^Parameters:[[:space:]]*(#.*)?$/); indent = 0; next }
        !inside || /^[[:space:]]*(#.*)?$/ { next }
        {
            match($0, /^ */)
            here = RLENGTH
            if (!indent) indent = here
            key = substr($0, here + 1)
            if (here != indent || key !~ /^["\047]?[A-Za-z0-9]+["\047]?:([[:space:]]|$)/) next
            sub(/:.*/, "", key)
            gsub(/["\047]/, "", key)
            print key
        }' template.yaml)
    [[ -n $names ]] || die "cannot read the Parameters of template.yaml" "Is it a gpuinfer template? Update your checkout."
    TEMPLATE_PARAMETERS=" ${names//$'\n'/ } "
    for key in $MANAGED_PARAMETERS; do
        [[ $TEMPLATE_PARAMETERS == *" $key "* ]] ||
            die "template.yaml has no parameter $key, which deploy.sh sets: the script and the template disagree" \
                "Use the deploy.sh and template.yaml of one checkout (git status shows what differs)."
    done
}

# Up to four of the template's parameter names closest to $1, but those deploy.sh sets, the closest (then the
# shortest) first: the same but for case, one containing the other, or a few letters apart (edit distance up
# to 2, and 1 more per 6 letters); as "A, B or C".
close_parameters() {
    # shellcheck disable=SC2086 # one name a word
    printf '%s\n' $TEMPLATE_PARAMETERS | awk -v key="$1" -v managed="$MANAGED_PARAMETERS" '
        function distance(a, b, i, j, n, m, prev, cur, cost, best) {
            n = length(a); m = length(b)
            for (j = 0; j <= m; j++) prev[j] = j
            for (i = 1; i <= n; i++) {
                cur[0] = i
                for (j = 1; j <= m; j++) {
                    cost = substr(a, i, 1) != substr(b, j, 1)
                    best = prev[j] + 1
                    if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1
                    if (prev[j - 1] + cost < best) best = prev[j - 1] + cost
                    cur[j] = best
                }
                for (j = 0; j <= m; j++) prev[j] = cur[j]
            }
            return prev[m]
        }
        NF && index(managed, " " $0 " ") == 0 {
            wanted = tolower(key); name = tolower($0)
            d = distance(wanted, name)
            if (d > 1 && (index(name, wanted) || index(wanted, name))) d = 1
            if (d <= 2 + int(length(key) / 6)) printf "%d\t%d\t%s\n", d, length($0), $0
        }' | sort -k1,1n -k2,2n -k3,3 | head -n 4 | cut -f3 |
        awk '{ names[NR] = $0 } END { for (i = 1; i <= NR; i++) printf "%s%s", names[i], i == NR ? "" : i == NR - 1 ? " or " : ", " }'
}

# S3 general purpose bucket naming rules (S3 User Guide, "General purpose bucket naming rules"): 3-63
# characters; lower-case letters, digits, dots and hyphens; a letter or digit first and last; no two adjacent
# dots; not shaped like an IP address.
valid_bucket_name() {
    [[ $1 =~ ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ && $1 != *..* && ! $1 =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]
}

AWS_ARGS=()
aws_() { aws "${AWS_ARGS[@]}" "$@"; }

# ------------------------------------------------------------------------------------------- 1 preflight

ACCOUNT="" PARTITION="" STACK_STATUS=""
declare -A STACK_PARAMS=() OUTPUTS=()

preflight() {
    step "preflight: the AWS CLI, your identity, the stack"
    command -v aws >/dev/null || die "the AWS CLI is not installed" "Install v2: https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
    local version
    version=$(aws --version 2>&1) || die "'aws --version' failed: $version"
    [[ $version == aws-cli/2.* ]] || die "this needs the AWS CLI v2; found: $version" "Install v2: https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
    git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "$(pwd) is not a git checkout: the build source is made with git archive"
    resolve_region
    AWS_ARGS=(--region "$REGION")
    [[ -z $PROFILE ]] || AWS_ARGS+=(--profile "$PROFILE")
    local identity arn
    identity=$(aws_ sts get-caller-identity --query '[Account,Arn]' --output text) ||
        die "the AWS CLI has no working credentials${PROFILE:+ for profile $PROFILE}" \
            "Check with: aws sts get-caller-identity${PROFILE:+ --profile $PROFILE}; for SSO run aws sso login${PROFILE:+ --profile $PROFILE} first."
    read -r ACCOUNT arn <<<"$identity"
    PARTITION=$(cut -d: -f2 <<<"$arn")
    note "account $ACCOUNT (partition $PARTITION), region $REGION, as $arn"
    read_stack
    note "stack $STACK: ${STACK_STATUS/NONE/not created yet}"
    usable_stack
    [[ $QUOTA_CHECK == false ]] || gpu_quota
    tier_prices
}

# What a tier costs while it runs: the On-Demand hourly price of its instance in this Region, from the AWS Price
# List Query API (GetProducts; its endpoints: us-east-1, eu-central-1, ap-south-1). Informational: a price it cannot
# read is said to be unknown, with the page that has it.
EC2_PRICING="https://aws.amazon.com/ec2/pricing/on-demand/"
tier_prices() {
    local args=(--region us-east-1) tier type price line
    [[ -z $PROFILE ]] || args+=(--profile "$PROFILE")
    for tier in "small g6e.xlarge" "large g6e.48xlarge"; do
        read -r tier type <<<"$tier"
        price=""
        line=$(aws "${args[@]}" pricing get-products --service-code AmazonEC2 --max-results 1 --query 'PriceList[0]' --output text \
            --filters "Type=TERM_MATCH,Field=instanceType,Value=$type" "Type=TERM_MATCH,Field=regionCode,Value=$REGION" \
            "Type=TERM_MATCH,Field=operatingSystem,Value=Linux" "Type=TERM_MATCH,Field=tenancy,Value=Shared" \
            "Type=TERM_MATCH,Field=preInstalledSw,Value=NA" "Type=TERM_MATCH,Field=capacitystatus,Value=Used" 2>/dev/null) || line=""
        # The product's On-Demand term comes before its Reserved ones: the first USD price after "OnDemand".
        line=${line#*\"OnDemand\"}
        if [[ ${line%%\"Reserved\"*} =~ \"USD\":[[:space:]]*\"([0-9]+)\.([0-9]{0,3}) ]]; then
            local cents=${BASH_REMATCH[2]}
            while [[ $cents == *0 ]]; do cents=${cents%0}; done
            price="\$${BASH_REMATCH[1]}${cents:+.$cents}/h"
        fi
        note "cost: a $tier-tier task runs on a $type, On-Demand ${price:-(price unknown: $EC2_PRICING)} in $REGION while it runs;" \
            "a request to the idle tier starts one"
    done
}

# The EC2 quota the tiers' instances count against (Service Quotas, service ec2): vCPUs of running On-Demand G
# instances, 0 in many new accounts, where a request would then wait in silence for an instance never started.
# Spot instances count against a quota of their own (Service Quotas: "All G and VT Spot Instance Requests").
GPU_QUOTA_CODE=L-DB2E81BA GPU_QUOTA_NAME="Running On-Demand G and VT instances"
SPOT_QUOTA_CODE=L-3819A6DF SPOT_QUOTA_NAME="All G and VT Spot Instance Requests"
SMALL_TASK_VCPUS=4 LARGE_TASK_VCPUS=192

# Parameter $1 as the deploy sets it: a --parameter (or --capacity), else the stack's, else $2.
planned() {
    local value=${STACK_PARAMS[$1]:-$2} parameter
    for parameter in "${PARAMETERS[@]}"; do
        [[ $parameter != "$1="* ]] || value=${parameter#*=}
    done
    printf '%s' "$value"
}

# Whether the tier whose most-tasks parameter is $1 runs: 0 switches it off (unset: the template default runs it).
tier_runs() {
    [[ $(planned "$1" "") != 0 ]]
}

# Each running tier's vCPUs against the quota its capacity draws on: On-Demand, Spot, or both for spot-with-fallback
# (its On-Demand tasks only while Spot has none: a shortfall there is a warning).
gpu_quota() {
    local small=0 large=0 on_demand=(0 0) spot=(0 0) fallback_only=true
    ! tier_runs MaxTaskCount || small=$SMALL_TASK_VCPUS
    ! tier_runs LargeModelMaxTaskCount || large=$LARGE_TASK_VCPUS
    local i=0 vcpus capacity
    for vcpus in "$small" "$large"; do
        capacity=$(planned "$([[ $i == 0 ]] && echo SmallCapacity || echo LargeCapacity)" on-demand)
        [[ $capacity == spot ]] || on_demand[i]=$vcpus
        [[ $capacity == on-demand ]] || spot[i]=$vcpus
        [[ $capacity != on-demand || $vcpus == 0 ]] || fallback_only=false
        i=$((i + 1))
    done
    ((on_demand[0] + on_demand[1] == 0)) || quota_covers "$GPU_QUOTA_CODE" "$GPU_QUOTA_NAME" "${on_demand[@]}" $fallback_only
    ((spot[0] + spot[1] == 0)) || quota_covers "$SPOT_QUOTA_CODE" "$SPOT_QUOTA_NAME" "${spot[@]}" false
}

# Quota $1 ($2) against the small ($3) and large ($4) tiers' vCPUs: refused below the least of them (only warned
# when $5 is true: the tiers need it only to fall back), warned below both.
quota_covers() {
    local code=$1 name=$2 small=$3 large=$4 soft=$5 value
    local wanted=$((small + large)) least=$((small > 0 ? small : large))
    local ask="aws service-quotas request-service-quota-increase --service-code ec2 --quota-code $code --desired-value $wanted --region $REGION"
    if ! value=$(aws_ service-quotas get-service-quota --service-code ec2 --quota-code "$code" \
        --query 'Quota.Value' --output text 2>"$TMP/err"); then
        die "cannot read the GPU quota \"$name\" ($code): $(grep -v '^$' "$TMP/err" | tail -n 1)" \
            "Allow servicequotas:GetServiceQuota, or check it in the Service Quotas console and pass --skip-quota-check."
    fi
    value=${value%%.*}
    [[ $value =~ ^[0-9]+$ ]] || die "the GPU quota $code reads '$value', not a number of vCPUs" "Pass --skip-quota-check to go on."
    if ((value < least)) && [[ $soft == false ]]; then
        die "the GPU quota \"$name\" ($code) is $value vCPUs in $REGION: a tier on it could not start an instance" \
            "The small tier's g6e.xlarge needs $SMALL_TASK_VCPUS, the large tier's g6e.48xlarge $LARGE_TASK_VCPUS. Ask for $wanted:" \
            "$ask" "then run deploy again once it is granted (nothing was created)."
    elif ((value < least)); then
        note "warning: the GPU quota \"$name\" ($code) is $value vCPUs in $REGION: no On-Demand fallback can start while" \
            "Spot has no instance (ask for $wanted: $ask)"
    elif ((value < wanted)); then
        note "warning: the GPU quota \"$name\" ($code) is $value vCPUs in $REGION: the small tier runs," \
            "the large tier's g6e.48xlarge ($LARGE_TASK_VCPUS vCPUs) cannot start, and large requests wait (ask for $wanted: $ask)"
    else
        note "GPU quota \"$name\": $value vCPUs in $REGION (one task of each tier on it takes $wanted)"
    fi
}

# Stops before anything is made when the stack is in a state no create or update can start from.
usable_stack() {
    case $STACK_STATUS in
        NONE | REVIEW_IN_PROGRESS | CREATE_COMPLETE | UPDATE_COMPLETE | UPDATE_ROLLBACK_COMPLETE | IMPORT_COMPLETE | IMPORT_ROLLBACK_COMPLETE) ;;
        ROLLBACK_COMPLETE)
            print_failed_events
            die "stack $STACK is ROLLBACK_COMPLETE: its first create failed and was rolled back; CloudFormation can only delete a stack in that state" \
                "Delete it with: scripts/destroy.sh --stack $STACK --region $REGION${PROFILE:+ --profile $PROFILE}" \
                "(it asks first, and lists what the failed create left behind), then run deploy again."
            ;;
        *_IN_PROGRESS)
            die "stack $STACK is $STACK_STATUS: another operation is running on it" "Wait until it ends (CloudFormation console), then run deploy again."
            ;;
        *)
            print_failed_events
            die "stack $STACK is $STACK_STATUS and cannot be updated as it is" \
                "UPDATE_ROLLBACK_FAILED: aws cloudformation continue-update-rollback --stack-name $STACK --region $REGION; DELETE_FAILED: scripts/destroy.sh; then run deploy again."
            ;;
    esac
}

resolve_region() {
    [[ -n $REGION ]] || REGION=${AWS_REGION:-${AWS_DEFAULT_REGION:-}}
    if [[ -z $REGION ]]; then
        local args=(configure get region)
        [[ -z $PROFILE ]] || args+=(--profile "$PROFILE")
        REGION=$(aws "${args[@]}" 2>/dev/null || true)
    fi
    [[ -n $REGION ]] || refuse "no AWS Region: pass --region (e.g. --region us-west-2), or set AWS_REGION"
}

# The stack's status (NONE when there is none) and its parameters.
read_stack() {
    local status
    if ! status=$(aws_ cloudformation describe-stacks --stack-name "$STACK" --query 'Stacks[0].StackStatus' --output text 2>"$TMP/err"); then
        grep -q 'does not exist' "$TMP/err" || { cat "$TMP/err" >&2; die "cannot read stack $STACK"; }
        STACK_STATUS=NONE
        STACK_PARAMS=()
        return
    fi
    STACK_STATUS=$status
    STACK_PARAMS=()
    local key value
    while IFS=$'\t' read -r key value; do
        [[ -z $key ]] || STACK_PARAMS[$key]=$value
    done < <(aws_ cloudformation describe-stacks --stack-name "$STACK" \
        --query 'Stacks[0].Parameters[].[ParameterKey,ParameterValue]' --output text)
}

read_outputs() {
    OUTPUTS=()
    local key value
    while IFS=$'\t' read -r key value; do
        [[ -z $key ]] || OUTPUTS[$key]=$value
    done < <(aws_ cloudformation describe-stacks --stack-name "$STACK" \
        --query 'Stacks[0].Outputs[].[OutputKey,OutputValue]' --output text)
}

output() {
    [[ -n ${OUTPUTS[$1]:-} ]] || die "stack $STACK has no output $1" "Is template.yaml older than this script? Update your checkout."
    printf '%s' "${OUTPUTS[$1]}"
}

# ------------------------------------------------------------------------------------------- 2 artifacts

artifacts() {
    step "artifact bucket and build source"
    if [[ -n $ARTIFACT_BUCKET ]]; then
        ensure_bucket "$ARTIFACT_BUCKET"
    elif [[ -n ${STACK_PARAMS[ArtifactBucket]:-} ]]; then
        ARTIFACT_BUCKET=${STACK_PARAMS[ArtifactBucket]}
        ensure_bucket "$ARTIFACT_BUCKET"
    else
        default_bucket
    fi
    upload_source
}

# <stack>-artifacts-<account>-<region>, lower case, in the account regional namespace (suffix -an) where S3
# offers it: a name there can only ever be created by this account (S3 User Guide, "Namespaces for general
# purpose buckets"; not offered in Middle East (Bahrain) and (UAE)). Elsewhere, or with an AWS CLI too old for
# --bucket-namespace, the same name in the global namespace.
default_bucket() {
    local base="${STACK,,}-artifacts-${ACCOUNT}-${REGION}"
    ((${#base} + 3 <= 63)) || die "the artifact bucket name $base-an is longer than S3's 63 characters" \
        "Pass --artifact-bucket NAME, or use a shorter --stack."
    if [[ $PARTITION == aws || $PARTITION == aws-cn ]] && [[ $REGION != me-south-1 && $REGION != me-central-1 ]]; then
        ARTIFACT_BUCKET="$base-an"
        ensure_bucket "$ARTIFACT_BUCKET"
        [[ -n $NO_NAMESPACE ]] || return 0
        note "this AWS CLI does not know --bucket-namespace (update it for account regional names); using the global name"
    fi
    ARTIFACT_BUCKET=$base
    ensure_bucket "$ARTIFACT_BUCKET"
    [[ -z $NO_NAMESPACE ]] || die "this AWS CLI cannot create s3://$ARTIFACT_BUCKET"
}

# Reuses the bucket when it is this account's, else creates it. NO_NAMESPACE is set when the CLI does not know
# --bucket-namespace (nothing was created then).
NO_NAMESPACE=""
ensure_bucket() {
    local name=$1
    NO_NAMESPACE=""
    if aws_ s3api head-bucket --bucket "$name" --expected-bucket-owner "$ACCOUNT" >/dev/null 2>"$TMP/err"; then
        require_versioning "$name"
        note "reusing s3://$name"
        return 0
    fi
    # HeadBucket: 404 when no bucket has the name; 403 when it exists but is not this account's (with
    # --expected-bucket-owner), or this identity may not list it.
    if grep -q '(403)' "$TMP/err"; then
        die "the bucket name $name is taken by another account (or you may not use it)" \
            "Pass --artifact-bucket NAME with a bucket of yours, or a new name."
    fi
    grep -q '(404)' "$TMP/err" || { cat "$TMP/err" >&2; die "cannot check s3://$name"; }
    create_bucket "$name"
}

create_bucket() {
    local name=$1
    local args=(s3api create-bucket --bucket "$name" --object-ownership BucketOwnerEnforced)
    [[ $name != *"-$ACCOUNT-$REGION-an" ]] || args+=(--bucket-namespace account-regional)
    # CreateBucket: us-east-1 takes no LocationConstraint (S3 refuses one); every other Region needs its own.
    [[ $REGION == us-east-1 ]] || args+=(--create-bucket-configuration "LocationConstraint=$REGION")
    if ! aws_ "${args[@]}" >/dev/null 2>"$TMP/err"; then
        if grep -qi 'unknown options: --bucket-namespace' "$TMP/err"; then
            NO_NAMESPACE=1
            return 0
        elif grep -q BucketAlreadyExists "$TMP/err"; then
            die "the bucket name $name is taken by another account" "Pass --artifact-bucket NAME with another name."
        elif ! grep -q BucketAlreadyOwnedByYou "$TMP/err"; then
            cat "$TMP/err" >&2
            die "cannot create s3://$name" "Check that ${PROFILE:-your identity} may s3:CreateBucket, or pass --artifact-bucket."
        fi
    fi
    local owner=(--bucket "$name" --expected-bucket-owner "$ACCOUNT")
    aws_ s3api put-public-access-block "${owner[@]}" \
        --public-access-block-configuration BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true
    # Versioning: the stack pins the Lambda zip by its object version (RouterCodeVersion).
    aws_ s3api put-bucket-versioning "${owner[@]}" --versioning-configuration Status=Enabled
    # The tag tells scripts/destroy.sh this bucket is the stack's to delete (a bucket passed with
    # --artifact-bucket that existed before is never deleted).
    aws_ s3api put-bucket-tagging "${owner[@]}" \
        --tagging "{\"TagSet\": [{\"Key\": \"gpuinfer:stack\", \"Value\": \"$STACK\"}, {\"Key\": \"gpuinfer:created-by\", \"Value\": \"scripts/deploy.sh\"}]}"
    note "created s3://$name (private, versioned)"
}

require_versioning() {
    local status
    status=$(aws_ s3api get-bucket-versioning --bucket "$1" --expected-bucket-owner "$ACCOUNT" --query Status --output text)
    [[ $status == Enabled ]] || die "s3://$1 has versioning ${status/None/off}: the stack pins the Lambda zip by object version" \
        "Enable it: aws s3api put-bucket-versioning --bucket $1 --versioning-configuration Status=Enabled"
}

SOURCE_TREE=""
upload_source() {
    # git stash create: a commit of HEAD plus the uncommitted changes to tracked files, without touching the
    # work tree or the stash list; nothing when there are no changes. Its author is never seen (the commit is
    # not kept), so git needs no identity of yours for it. It trusts the index's stat data: a tracked file whose
    # timestamp changed but whose content did not (a touch, an editor's save, a copied checkout) makes it exit 1
    # and print nothing (git 2.47). Refreshing the index first (what git status does) rereads those files.
    local rev changes=""
    git update-index -q --refresh >/dev/null 2>&1 || true
    rev=$(git -c user.name=gpuinfer-deploy -c user.email=deploy@invalid stash create 2>"$TMP/err") || {
        sed 's/^/    /' "$TMP/err" >&2
        die "git stash create failed: cannot take your uncommitted changes" \
            "See what git says with: git status; commit or stash your changes, then run deploy again."
    }
    if [[ -n $rev ]]; then changes=" with your uncommitted changes"; else rev=HEAD; fi
    SOURCE_TREE=$(git rev-parse "$rev^{tree}")
    git archive --format=zip -o "$TMP/container-source.zip" "$rev"
    aws_ s3api put-object --bucket "$ARTIFACT_BUCKET" --key container-source.zip --expected-bucket-owner "$ACCOUNT" \
        --body "$TMP/container-source.zip" >/dev/null
    note "uploaded s3://$ARTIFACT_BUCKET/container-source.zip: $(git rev-parse --short HEAD)$changes (tree ${SOURCE_TREE:0:12})"
}

# ------------------------------------------------------------------------------------------- 3 stack

# The overrides every stack operation passes: the bucket, the flags given (on create the defaults of the
# ones not given; on update `cloudformation deploy` keeps each parameter not passed at its current value),
# and the user's --parameter values. The functions' architecture is their zip's: it changes only with the zip,
# at the switch, so the update before the builds leaves them running the code they run.
OVERRIDES=()
base_overrides() {
    OVERRIDES=("ArtifactBucket=$ARTIFACT_BUCKET")
    if [[ $1 == create ]]; then
        OVERRIDES+=("ModelName=${MODEL:-$DEFAULT_MODEL}" "LargeModelName=${LARGE_MODEL:-$DEFAULT_LARGE_MODEL}"
            "LambdaArchitecture=${LAMBDA_ARCH:-x86_64}")
    else
        [[ -z $MODEL ]] || OVERRIDES+=("ModelName=$MODEL")
        [[ -z $LARGE_MODEL ]] || OVERRIDES+=("LargeModelName=$LARGE_MODEL")
        [[ $1 != switch || -z $LAMBDA_ARCH ]] || OVERRIDES+=("LambdaArchitecture=$LAMBDA_ARCH")
    fi
    [[ -z $ALARM_EMAIL ]] || OVERRIDES+=("AlarmEmail=$ALARM_EMAIL")
    OVERRIDES+=("${PARAMETERS[@]}")
}

prepare_stack() {
    case $STACK_STATUS in
        NONE | REVIEW_IN_PROGRESS)
            # REVIEW_IN_PROGRESS: a create that never got past its change set; cloudformation deploy creates it.
            step "stack $STACK: creating it, code and GPU tiers off (RouterCodeBuilt=false ImagePushed=false)"
            base_overrides create
            deploy_stack create "${OVERRIDES[@]}" RouterCodeBuilt=false ImagePushed=false
            ;;
        *)
            step "stack $STACK: updating it to this template${IMAGE_TAG:+ and image $IMAGE_TAG}, keeping the code it runs"
            base_overrides update
            deploy_stack update "${OVERRIDES[@]}" "${CURRENT_CODE[@]}"
            ;;
    esac
    read_stack
    read_outputs
}

# The code and image parameters the stack has now, passed back unchanged by the update that precedes the
# builds, but the image built before it (image_first). A stack made before RouterCodeBuilt existed always had its
# functions, from a zip uploaded then.
CURRENT_CODE=()
current_code() {
    CURRENT_CODE=("RouterCodeBuilt=${STACK_PARAMS[RouterCodeBuilt]:-true}" "ImagePushed=${STACK_PARAMS[ImagePushed]:-false}")
    local tag=${IMAGE_TAG:-${STACK_PARAMS[ImageTag]:-}}
    [[ -z $tag ]] || CURRENT_CODE+=("ImageTag=$tag")
    CURRENT_CODE+=("RouterCodeVersion=${STACK_PARAMS[RouterCodeVersion]:-}")
}

# cloudformation deploy creates a change set and waits for it; --no-fail-on-empty-changeset makes "no changes"
# a success; the template is over the 51,200 bytes CloudFormation takes inline, so it goes through the artifact
# bucket (--s3-bucket). While it runs, the stack's status is printed every POLL seconds.
deploy_stack() {
    local action=$1
    shift
    aws_ cloudformation deploy --stack-name "$STACK" --template-file template.yaml --s3-bucket "$ARTIFACT_BUCKET" \
        --capabilities CAPABILITY_NAMED_IAM --no-fail-on-empty-changeset --parameter-overrides "$@" \
        >"$TMP/deploy.log" 2>&1 &
    local pid=$! rc=0 status
    while kill -0 "$pid" 2>/dev/null; do
        sleep "$POLL"
        status=$(stack_status)
        [[ $status != *_IN_PROGRESS ]] || note "waiting: stack $STACK is $status"
    done
    wait "$pid" || rc=$?
    if ((rc == 0)); then
        note "stack $STACK: $(grep -Eo 'Successfully created/updated stack|No changes to deploy' "$TMP/deploy.log" | head -n1 || true) ($(stack_status))"
        return
    fi
    # The CLI's waiter gives up after an hour while CloudFormation carries on: wait for the stack itself then.
    status=$(stack_status)
    if [[ $status == *_IN_PROGRESS && $status != REVIEW_IN_PROGRESS ]]; then
        while [[ $status == *_IN_PROGRESS ]]; do
            note "waiting: stack $STACK is $status"
            sleep "$POLL"
            status=$(stack_status)
        done
        [[ $status != CREATE_COMPLETE && $status != UPDATE_COMPLETE ]] || { note "stack $STACK: $status"; return; }
    fi
    sed 's/^/    /' "$TMP/deploy.log" >&2
    print_failed_events
    if [[ $status == ROLLBACK_COMPLETE ]]; then
        die "creating stack $STACK failed and CloudFormation rolled it back (ROLLBACK_COMPLETE)" \
            "The failed resources are listed above. A stack in ROLLBACK_COMPLETE can only be deleted:" \
            "scripts/destroy.sh --stack $STACK --region $REGION${PROFILE:+ --profile $PROFILE}, then run deploy again."
    fi
    die "the stack $action failed (stack $STACK is ${status/NONE/not created})" \
        "The failed resources are listed above; the stack runs what it ran before. Fix the cause, then run deploy again." \
        "All events: aws cloudformation describe-stack-events --stack-name $STACK --region $REGION${PROFILE:+ --profile $PROFILE}"
}

stack_status() {
    aws_ cloudformation describe-stacks --stack-name "$STACK" --query 'Stacks[0].StackStatus' --output text 2>/dev/null || echo NONE
}

# The failed events among the newest 50. When the stack has more, --max-items 50 leaves events out and the
# AWS CLI ends its text output with the resume token: run through --query, a line `None` (aws/aws-cli issues
# 7277 and 10449); printed as it is by newer CLIs, `NEXTTOKEN<tab><token>`. Neither is an event: only a row
# whose status is a *_FAILED one (what the query selects) is listed.
print_failed_events() {
    local logical status reason found=""
    while IFS=$'\t' read -r logical status reason; do
        [[ -n $logical && $status == *_FAILED ]] || continue
        [[ -n $found ]] || printf 'Failed stack events (newest first):\n' >&2
        found=1
        printf '  %s %s: %s\n' "$logical" "$status" "$reason" >&2
    done < <(aws_ cloudformation describe-stack-events --stack-name "$STACK" --max-items 50 \
        --query "StackEvents[?ends_with(ResourceStatus, '_FAILED')].[LogicalResourceId,ResourceStatus,ResourceStatusReason]" \
        --output text 2>/dev/null)
}

# ------------------------------------------------------------------------------------------- 4, 5 builds

# The zip is built for a source tree and an architecture; the object version the stack runs carries both in
# a tag, so a run on the same source and architecture reuses it instead of building it again. The build runs
# natively on a CodeBuild host of the architecture asked for (the RouterBuild project's own environment is the
# stack's architecture until the switch): template.yaml's RouterBuild Environment, per architecture.
ZIP_VERSION=""
declare -A BUILD_HOST=([x86_64]="LINUX_CONTAINER aws/codebuild/amazonlinux-x86_64-standard:5.0"
    [arm64]="ARM_CONTAINER aws/codebuild/amazonlinux-aarch64-standard:3.0")
router_build() {
    step "Lambda zip (router and scaler) on CodeBuild"
    local key=${STACK_PARAMS[RouterCodeKey]:-$DEFAULT_ROUTER_CODE_KEY}
    local arch=${LAMBDA_ARCH:-${STACK_PARAMS[LambdaArchitecture]:-x86_64}}
    local built_for="$SOURCE_TREE-$arch" pinned=${STACK_PARAMS[RouterCodeVersion]:-}
    if [[ -n $pinned && ${STACK_PARAMS[RouterCodeBuilt]:-} == true && $(zip_built_for "$key" "$pinned") == "$built_for" ]]; then
        ZIP_VERSION=$pinned
        note "the stack runs zip version $ZIP_VERSION, built from this source for ${built_for#*-}: build skipped"
        return
    fi
    local project type image
    project=$(output RouterBuildProjectName)
    read -r type image <<<"${BUILD_HOST[$arch]}"
    run_build "$project" "Lambda zip" --environment-type-override "$type" --image-override "$image"
    ZIP_VERSION=$(aws_ s3api head-object --bucket "$ARTIFACT_BUCKET" --key "$key" --expected-bucket-owner "$ACCOUNT" \
        --query VersionId --output text) || die "the Lambda zip build SUCCEEDED but s3://$ARTIFACT_BUCKET/$key cannot be read"
    [[ -n $ZIP_VERSION && $ZIP_VERSION != None && $ZIP_VERSION != null ]] ||
        die "s3://$ARTIFACT_BUCKET/$key has no object version" "Enable versioning on the bucket, then run deploy again."
    aws_ s3api put-object-tagging --bucket "$ARTIFACT_BUCKET" --key "$key" --version-id "$ZIP_VERSION" \
        --expected-bucket-owner "$ACCOUNT" --tagging "{\"TagSet\": [{\"Key\": \"gpuinfer:built-for\", \"Value\": \"$built_for\"}]}" >/dev/null
    note "zip s3://$ARTIFACT_BUCKET/$key version $ZIP_VERSION"
}

zip_built_for() {
    aws_ s3api get-object-tagging --bucket "$ARTIFACT_BUCKET" --key "$1" --version-id "$2" --expected-bucket-owner "$ACCOUNT" \
        --query "TagSet[?Key=='gpuinfer:built-for'].Value" --output text 2>/dev/null || true
}

# On an update (the stack's build project exists), unless --template-first, builds the image before the stack's
# update. An update that changes the task definitions rolls the GPU services, and so does a new image tag: in one
# update they roll once; with the template first they roll twice, and a large-tier roll with MaximumPercent 200 can
# hold a second g6e.48xlarge meanwhile.
IMAGE_FIRST=false
image_first() {
    [[ $TEMPLATE_FIRST == false && $STACK_STATUS != NONE && $STACK_STATUS != REVIEW_IN_PROGRESS ]] || return 0
    read_outputs
    [[ -n ${OUTPUTS[BuildProjectName]:-} ]] || return 0
    IMAGE_FIRST=true
    image_build
}

IMAGE_TAG=""
image_build() {
    local version repository project
    version=$(awk -F'"' '/^\[package\]/ { p = 1; next } /^\[/ { p = 0 } p && /^version *=/ { print $2; exit }' Cargo.toml)
    [[ -n $version ]] || die "no package version in Cargo.toml"
    IMAGE_TAG="v${version//[^0-9A-Za-z.-]/-}-${SOURCE_TREE:0:12}"
    step "inference image $IMAGE_TAG"
    # The template's ImageTag pattern.
    [[ $IMAGE_TAG =~ ^v[0-9A-Za-z.-]+$ ]] || die "image tag $IMAGE_TAG does not match ^v[0-9A-Za-z.-]+$"
    repository=${OUTPUTS[ECRRepositoryName]:-}
    [[ -n $repository ]] || repository=$(output ECRRepositoryUri | cut -d/ -f2-)
    # The repository's versioned tags are immutable (ECR answers ImageTagAlreadyExistsException to a second
    # push): the same source is never built twice.
    if image_exists "$repository" "$IMAGE_TAG"; then
        note "ECR repository $repository already has $IMAGE_TAG (this source): build skipped"
        return
    fi
    project=$(output BuildProjectName)
    run_build "$project" "image" --environment-variables-override "name=IMAGE_TAG,value=$IMAGE_TAG,type=PLAINTEXT"
    image_exists "$repository" "$IMAGE_TAG" ||
        die "the image build SUCCEEDED but $IMAGE_TAG is not in ECR repository $repository; the tiers stay off"
}

image_exists() {
    aws_ ecr describe-images --repository-name "$1" --image-ids "imageTag=$2" --query 'imageDetails[0].imageDigest' \
        --output text >/dev/null 2>"$TMP/err" && return 0
    grep -q ImageNotFoundException "$TMP/err" && return 1
    cat "$TMP/err" >&2
    die "cannot look up image $2 in ECR repository $1"
}

# Starts a build and waits for it. CodeBuild's build statuses: IN_PROGRESS, then SUCCEEDED, FAILED, FAULT,
# STOPPED or TIMED_OUT; on anything but SUCCEEDED the phase that failed, its reason and the log link.
run_build() {
    local project=$1 label=$2 id answer status phase
    shift 2
    id=$(aws_ codebuild start-build --project-name "$project" "$@" --query build.id --output text) ||
        die "could not start the $label build (CodeBuild project $project)"
    note "$label: build $id"
    while true; do
        answer=$(aws_ codebuild batch-get-builds --ids "$id" --query 'builds[0].[buildStatus,currentPhase]' --output text)
        read -r status phase <<<"$answer"
        [[ $status == IN_PROGRESS ]] || break
        note "waiting: $label build IN_PROGRESS, phase $phase"
        sleep "$POLL"
    done
    if [[ $status == SUCCEEDED ]]; then
        note "$label build SUCCEEDED"
        return
    fi
    local link failed=() line
    link=$(aws_ codebuild batch-get-builds --ids "$id" --query 'builds[0].logs.deepLink' --output text)
    while IFS= read -r line; do
        [[ -z $line ]] || failed+=("phase ${line//$'\t'/ · }")
    done < <(aws_ codebuild batch-get-builds --ids "$id" --output text \
        --query "builds[0].phases[?phaseStatus && phaseStatus!='SUCCEEDED'].[phaseType,phaseStatus,contexts[0].statusCode,contexts[0].message]")
    local hint=()
    [[ $label != image || $IMAGE_FIRST == false ]] ||
        hint=("If it needs this template's build project (a change to BuildProject in template.yaml), run deploy again with --template-first.")
    die "the $label build ended $status" "${failed[@]}" "Build log: $link" \
        "Nothing was switched on: the stack runs what it ran before. Fix the build, then run deploy again." "${hint[@]}"
}

# ------------------------------------------------------------------------------------------- 6, 7

switch_on() {
    step "stack $STACK: switching to zip $ZIP_VERSION and image $IMAGE_TAG (RouterCodeBuilt=true ImagePushed=true)"
    base_overrides switch
    deploy_stack update "${OVERRIDES[@]}" RouterCodeBuilt=true ImagePushed=true "ImageTag=$IMAGE_TAG" "RouterCodeVersion=$ZIP_VERSION"
    read_outputs
}

# The gpuinfer CLI (api-key, submit, get, simulate…) without Rust: the Lambda build's static binary is one, for Linux
# on the functions' architecture. Fetched to dist/gpuinfer when this machine is such; else the command that fetches it,
# or `cargo install`. Sets CLI to the command the closing lines use.
CLI=gpuinfer
fetch_cli() {
    local arch=${LAMBDA_ARCH:-${STACK_PARAMS[LambdaArchitecture]:-x86_64}} mine
    local key="gpuinfer-cli/gpuinfer-linux-$arch"
    mine=$(uname -m)
    [[ $mine != aarch64 ]] || mine=arm64
    if [[ $(uname -s) == Linux && $mine == "$arch" ]] && mkdir -p dist &&
        aws_ s3api get-object dist/gpuinfer --bucket "$ARTIFACT_BUCKET" --key "$key" --expected-bucket-owner "$ACCOUNT" \
            >/dev/null 2>"$TMP/err" && chmod +x dist/gpuinfer; then
        CLI=dist/gpuinfer
        note "the gpuinfer CLI for this machine: $CLI (s3://$ARTIFACT_BUCKET/$key)"
        return
    fi
    note "the gpuinfer CLI: for Linux $arch, aws s3 cp s3://$ARTIFACT_BUCKET/$key gpuinfer --region $REGION && chmod +x gpuinfer;" \
        "elsewhere, with Rust: cargo install --locked --path ."
}

print_result() {
    step "deployed in $(elapsed)"
    fetch_cli
    local api results bucket dashboard openai keys profile_flag="" profile_env=""
    api=$(output InferenceApiUrl)
    openai=$(output OpenAiBaseUrl)
    keys=$(output ApiKeysSecretArn)
    results=$(output ResultsApiUrl)
    bucket=$(output ResultsBucketName)
    dashboard=$(output DashboardUrl)
    if [[ -n $PROFILE ]]; then
        profile_flag=" --profile $(printf '%q' "$PROFILE")"
        profile_env="AWS_PROFILE=$(printf '%q' "$PROFILE") "
    fi
    local sign="--aws-sigv4 \"aws:amz:$REGION:execute-api\" --user \"\$AWS_ACCESS_KEY_ID:\$AWS_SECRET_ACCESS_KEY\" \\
    \${AWS_SESSION_TOKEN:+-H \"x-amz-security-token: \$AWS_SESSION_TOKEN\"}"
    cat <<EOF

  API (POST):      $api
  Results (GET):   $results/<requestId>
  Dashboard:       $dashboard
  Results bucket:  $bucket

Send a request, signed with your credentials (keys, profile, SSO or temporary: export-credentials gives all):

  eval "\$(aws configure export-credentials$profile_flag --format env)"
  curl -s "$api" $sign \\
    -H 'content-type: application/json' -d '{"prompt": "What is Amazon ECS? Answer briefly.", "maxTokens": 128}'

It answers {"requestId":"…","tier":"small"}; a tier at zero tasks first starts a GPU instance (minutes).
Read the result (404 {"status":"pending"} until it is stored):

  curl -s "$results/<requestId>" $sign
  aws s3 cp "s3://$bucket/results/<requestId>.json" - --region $REGION$profile_flag

Or let the gpuinfer client sign, send and wait:

  ${profile_env}AWS_REGION=$REGION GPUINFER_URL=${api%/infer} $CLI submit --sigv4 --wait 'What is Amazon ECS? Answer briefly.'

OpenAI's clients call the /v1 API with an API key (OpenAiAuthType API_KEY): make one, then use it as OpenAI's.

  ${profile_env}AWS_REGION=$REGION $CLI api-key add --secret-id "$keys" --project my-team
  OpenAI(base_url="$openai", api_key="sk-...")

Remove it all with scripts/destroy.sh --stack $STACK --region $REGION${profile_flag}.
EOF
}

main() {
    parse_args "$@"
    export AWS_PAGER=""
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    preflight
    artifacts
    image_first
    current_code
    prepare_stack
    router_build
    [[ -n $IMAGE_TAG ]] || image_build
    switch_on
    print_result
}

main "$@"
