#!/usr/bin/env bash
# Words per page of the documentation (README.md, BENCHMARKS.md, docs/*.md), counted as `wc -w` counts them, beside
# each page's count at 51036a4 (before the docs were cut to half), and the totals. tests/it/docs.rs holds the total
# to at most half of that baseline.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -A before=(
    [README.md]=3876 [BENCHMARKS.md]=6424 [docs/api.md]=5849 [docs/architecture.md]=2218
    [docs/configuration.md]=3183 [docs/deploy.md]=5094 [docs/reliability.md]=6294 [docs/scaling.md]=4209
)
total_before=0 total_now=0
printf '%-28s %8s %8s\n' page before now
for page in README.md BENCHMARKS.md docs/*.md; do
    now=$(wc -w <"$page")
    was=${before[$page]:-0}
    printf '%-28s %8s %8s\n' "$page" "$was" "$now"
    total_before=$((total_before + was)) total_now=$((total_now + now))
done
printf '%-28s %8s %8s\n' total "$total_before" "$total_now"
