#!/usr/bin/env bash
# Times moe-opt's graph pipeline (parse, verify, decompose, canonicalize,
# CSE, print) on every example: median wall time of N runs (default 20).
# Usage: scripts/bench-graph.sh [N]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
opt=${MOE_BUILD_DIR:-$root/build}/bin/moe-opt
runs=${1:-20}
printf '%-22s %10s\n' "example" "median ms"
for example in "$root"/examples/*.mlir; do
  times=()
  for ((i = 0; i < runs; ++i)); do
    start=$(date +%s%N)
    "$opt" "$example" --moe-graph-pipeline > /dev/null
    end=$(date +%s%N)
    times+=($(( (end - start) / 1000 )))
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%-22s %10s\n' "$(basename "$example")" "$(awk -v us="$median" 'BEGIN {printf "%.1f", us / 1000}')"
done
