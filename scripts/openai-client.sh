#!/usr/bin/env bash
# The official OpenAI Python client, pinned, in its own venv under ${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}: the
# Batch API tests drive gpuinfer with it, as a user's code would.
#
#   scripts/openai-client.sh install   install (once) and print the venv's python
set -euo pipefail

OPENAI_PIN="openai==3.57.0"
CACHE="${GPUINFER_CACHE:-$HOME/.cache/gpuinfer}"
VENV="$CACHE/openai-venv"

die() {
    printf 'openai-client: error: %s\n' "$*" >&2
    exit 1
}

[[ ${1:-} == install ]] || die "usage: $0 install"
mkdir -p "$CACHE"
# grep without -q reads pip's whole output: with -q it may exit first, pip dies of SIGPIPE and pipefail
# fails the check.
if ! "$VENV/bin/python" -m pip show openai 2>/dev/null | grep -x "Version: ${OPENAI_PIN##*==}" >/dev/null; then
    echo "openai-client: installing $OPENAI_PIN into $VENV (once)" >&2
    python3 -m venv "$VENV" || die "could not create a venv (on Debian: apt-get install -y python3-venv)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input "$OPENAI_PIN" >"$CACHE/openai-install.log" 2>&1 ||
        die "pip install $OPENAI_PIN failed; see $CACHE/openai-install.log"
fi
echo "$VENV/bin/python"
