#!/usr/bin/env bash
# Host-target benchmark: compile time of every example, and forward
# throughput of layers small enough to run here, through moe-run (median of
# N runs, seeded random weights and inputs).
# Usage: scripts/bench-host.sh [REPEAT]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${MOE_BUILD_DIR:-$root/build}/bin
repeat=${1:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== compile time (moe-compile --target=host, wall seconds, best of 3)"
for example in "$root"/examples/*.mlir; do
  best=
  for _ in 1 2 3; do
    start=$(date +%s%N)
    "$bin/moe-compile" "$example" --no-cache -o "$work/b.moeb"
    t=$(( $(date +%s%N) - start ))
    [[ -z $best || $t -lt $best ]] && best=$t
  done
  printf '%-22s %6.2f s\n' "$(basename "$example" .mlir)" \
    "$(awk -v ns="$best" 'BEGIN {print ns / 1e9}')"
done

echo
echo "== forward throughput (moe-run, median of $repeat)"
layer() { # name hidden experts topk ffn shared tokens
  cat > "$work/$1.json" <<JSON
{"model_type": "deepseek_v3", "hidden_size": $2, "n_routed_experts": $3,
 "num_experts_per_tok": $4, "n_group": 1, "topk_group": 1,
 "moe_intermediate_size": $5, "n_shared_experts": $6,
 "norm_topk_prob": true, "routed_scaling_factor": 2.5}
JSON
  "$bin/moe-compile" --hf-config "$work/$1.json" -o "$work/$1.moeb"
  printf '%-34s ' "$1 (T=$7)"
  "$bin/moe-run" "$work/$1.moeb" --random-weights --tokens "$7" \
    --repeat "$repeat" | sed 's/^moe-run: //'
}
layer "h64-e16-k4-f32" 64 16 4 32 1 256
layer "h512-e16-k2-f1024" 512 16 2 1024 0 256
layer "h1024-e64-k6-f256-s2" 1024 64 6 256 2 256
