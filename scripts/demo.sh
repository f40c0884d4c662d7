#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, compiles every
# example layer for the host target, and runs the tiny one (and a Mixtral-
# shaped layer imported from a config.json) on the CPU with seeded random
# weights.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh"

bin="$build/bin"
out="$build/demo"
mkdir -p "$out"

echo
echo "== examples/tiny.mlir decomposed into moe primitives (--moe-graph-pipeline)"
"$bin/moe-opt" "$root/examples/tiny.mlir" --moe-graph-pipeline

echo
echo "== every example compiled for the host (moe-compile --target=host)"
printf '%-22s %12s %10s\n' "example" "bundle bytes" "seconds"
for example in "$root"/examples/*.mlir; do
  name=$(basename "$example" .mlir)
  start=$(date +%s%N)
  "$bin/moe-compile" "$example" --target=host -o "$out/$name.moeb"
  end=$(date +%s%N)
  printf '%-22s %12s %10s\n' "$name" "$(stat -c %s "$out/$name.moeb")" \
    "$(awk -v ns=$((end - start)) 'BEGIN {printf "%.2f", ns / 1e9}')"
done

echo
echo "== the tiny layer on the host, 256 tokens"
"$bin/moe-run" "$out/tiny.moeb" --random-weights --seed 1 --tokens 256 \
  --repeat 5 --outputs "$out/tiny-outputs.safetensors"

echo
echo "== a Mixtral-style config.json, imported, compiled and run"
"$bin/moe-compile" --hf-config "$root/test/Integration/Inputs/mixtral-tiny.json" \
  -o "$out/mixtral-tiny.moeb"
"$bin/moe-run" "$out/mixtral-tiny.moeb" --random-weights --seed 2 --tokens 64 \
  --outputs "$out/mixtral-tiny-outputs.safetensors"
echo
echo "outputs (y, topk_ids, topk_weights) are in $out"
