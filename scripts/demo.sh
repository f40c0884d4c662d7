#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the
# main job on every example layer. At this stage of the project the main job
# parses and verifies each layer and lowers it to the moe primitives through
# the graph pipeline; the tiny layer's result is printed in full.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh"

opt="$build/bin/moe-opt"
echo
echo "== examples/tiny.mlir through --moe-graph-pipeline"
"$opt" "$root/examples/tiny.mlir" --moe-graph-pipeline
echo
printf '%-28s %-10s %s\n' "example" "status" "ops after decomposition"
for example in "$root"/examples/*.mlir; do
  name=$(basename "$example")
  if out=$("$opt" "$example" --moe-graph-pipeline 2>&1); then
    ops=$(grep -oE '= (moe|arith|tensor)\.[a-z_]+' <<<"$out" | cut -c3- | sort | uniq -c |
          awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
    printf '%-28s %-10s %s\n' "$name" "ok" "$ops"
  else
    printf '%-28s %-10s\n' "$name" "FAILED"
    echo "$out" >&2
    exit 1
  fi
done
