#!/usr/bin/env bash
# Host training-step benchmark: moe-train on the Integration test configs
# (student and teacher, fresh tokens each step), the median step time over
# STEPS steps after the first, as tokens/s.
# Usage: scripts/bench-train.sh [STEPS] [TOKENS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${MOE_BUILD_DIR:-$root/build}/bin
steps=${1:-50}
tokens=${2:-256}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-18s %8s %14s %12s\n' config tokens "median tok/s" "loss ratio"
for config in deepseek-v3-tiny mixtral-tiny qwen3-moe-tiny; do
  "$bin/moe-compile" --hf-config "$root/test/Integration/Inputs/$config.json" \
    --train --max-tokens "$tokens" --no-cache -o "$work/$config.moeb"
  "$bin/moe-train" "$work/$config.moeb" --steps "$steps" --lr 1e-2 --seed 1 \
    --tokens "$tokens" > "$work/$config.log"
  median=$(grep '^step' "$work/$config.log" | tail -n +2 |
           awk '{print $6}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  ratio=$(tail -1 "$work/$config.log" | sed 's/.*(\(.*\)x lower)/\1/')
  printf '%-18s %8s %14s %12s\n' "$config" "$tokens" "$median" "$ratio"
done
