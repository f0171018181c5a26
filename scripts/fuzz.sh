#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ for a fixed budget each and reports their executions:
#   request            request parsing and validation (src/contract/request.rs)
#   api_gateway_event  the router's Lambda path: API Gateway event → lambda_event → router app
#
#   scripts/fuzz.sh [--seconds 60] [target...]      (default: every target, 60 s each)
#
# cargo-fuzz needs a nightly Rust toolchain (libFuzzer, sanitizers). rustup cannot download one on
# the machines this project runs on, so where none is installed this script says so and exits 2;
# the property tests of the test command (tests/fuzz_request.rs, tests/fuzz_router.rs) check the
# same two paths with the same assertions on every run. Not part of the test command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() {
    printf 'fuzz: error: %s\n' "$*" >&2
    exit 1
}

seconds=60
targets=()
while (($#)); do
    case "$1" in
        --seconds) seconds="${2:?--seconds needs a value}" && shift 2 ;;
        -*) die "unknown option '$1' (usage: $0 [--seconds N] [target...])" ;;
        *) targets+=("$1") && shift ;;
    esac
done
[[ $seconds =~ ^[0-9]+$ ]] || die "--seconds must be a whole number, got '$seconds'"
((${#targets[@]})) || targets=(request api_gateway_event)

if ! rustup toolchain list 2>/dev/null | grep '^nightly' >/dev/null; then
    echo "fuzz: no nightly Rust toolchain is installed, and this machine cannot download one." >&2
    echo "fuzz: the targets in fuzz/ need it to build; the property tests in the test command cover the same paths." >&2
    exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz from crates.io (once)"
    cargo install cargo-fuzz --locked
fi

cd fuzz
for target in "${targets[@]}"; do
    log="$(mktemp)"
    echo "fuzz: $target for $seconds s"
    if ! cargo +nightly fuzz run -O "$target" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        tail -40 "$log" >&2
        die "$target failed; the input that broke it is under fuzz/artifacts/$target/"
    fi
    runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')"
    corpus="$(find "corpus/$target" -type f 2>/dev/null | wc -l)"
    echo "fuzz: $target: $runs executions in $seconds s, no failure ($corpus inputs in the corpus)"
    rm -f "$log"
done
