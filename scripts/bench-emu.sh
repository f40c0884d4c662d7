#!/usr/bin/env bash
# The PTX emulator's speed: the tiny DeepSeek-V3 layer's sm_90a forward on
# 256 tokens and one training step on 64, run by moe-run/moe-train through
# libcuda-emu.so with MOE_EMU_STATS=1 (per kernel: launches, warp and
# thread instructions, seconds, warp instructions per second), and the
# Triton reference kernels. Prints wall times; the figures go into
# docs/Performance.md.
#
#   scripts/bench-emu.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
config=$root/test/Integration/Inputs/deepseek-v3-tiny.json
export MOE_CUDA_DRIVER=$build/lib/libcuda-emu.so
py=${PYTHON:-/usr/bin/python3}
# seconds OUT ERR CMD...: runs CMD with its output in OUT and ERR, prints
# the wall time.
seconds() {
  local out=$1 err=$2 s
  shift 2
  s=$(date +%s.%N)
  "$@" > "$out" 2> "$err"
  echo "scale=3; ($(date +%s.%N) - $s) / 1" | bc
}

"$build/bin/moe-compile" --hf-config "$config" --target=sm_90a --max-tokens=256 --no-cache -o "$work/fwd.moeb"
"$build/bin/moe-compile" --hf-config "$config" --train --target=sm_90a --max-tokens=64 --no-cache -o "$work/train.moeb"
"$py" "$root/test/Integration/reference.py" gen --config "$config" --tokens 256 --seed 1 \
  --weights "$work/w.safetensors" --inputs "$work/x.safetensors" --dtype bf16
echo "== forward, 256 tokens (moe-run --device=cuda, one core)"
t=$(seconds /dev/null "$work/fwd.stats" env MOE_EMU_STATS=1 "$build/bin/moe-run" "$work/fwd.moeb" \
  --device=cuda --weights "$work/w.safetensors" --inputs "$work/x.safetensors" --outputs "$work/y.safetensors")
cat "$work/fwd.stats"
echo "wall: $t s (process: load, upload, 9 launches)"
"$py" "$root/test/Integration/reference.py" gen --config "$config" --tokens 64 --seed 2 \
  --weights "$work/w64.safetensors" --inputs "$work/x64.safetensors" --dtype bf16
# The batch: x and a zero target, with reference.py's safetensors helpers.
PYTHONPATH=$root/test/Integration "$py" -c "
import sys, numpy as np, reference
x = reference.read_safetensors(sys.argv[1])['x'].astype(np.float32)
reference.write_safetensors(sys.argv[2], {'x': x, 'target': np.zeros_like(x)})
" "$work/x64.safetensors" "$work/batch.safetensors"
echo "== one training step, 64 tokens (moe-train --device=cuda)"
t=$(seconds /dev/null "$work/train.stats" env MOE_EMU_STATS=1 "$build/bin/moe-train" "$work/train.moeb" \
  --device=cuda --steps 1 --weights "$work/w64.safetensors" --inputs "$work/batch.safetensors")
sort -k6 -g -r "$work/train.stats" | head -6
awk '{w += $3; s += $5} END {printf "all kernels: %d warp instructions in %.2f s: %.3g per second\n", w, s, w / s}' \
  <(grep -v 'launches' "$work/train.stats" | sed 's/^moe-emu: //')
echo "wall: $t s"
echo "== Triton reference kernels (test/Emu/run_reference.py)"
t=$(seconds /dev/null /dev/null "$py" "$root/test/Emu/run_reference.py" "$MOE_CUDA_DRIVER" "$root/test/Emu/Inputs/reference")
echo "wall: $t s"
