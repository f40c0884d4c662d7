#!/usr/bin/env bash
# Builds what tools/gpu-check.sh runs on a GPU machine without LLVM/MLIR:
# moe-run, moe-comm-bench and libmoe_runtime.so from this build, sm_90a
# bundles of the check's configs (tools/gpu-check/configs: DeepSeek-V3
# shapes with 32 experts, Mixtral-8x7B, Qwen3-30B-A3B), and the check
# script itself.
#
#   scripts/gpu-package.sh [OUT_DIR]        (default build/gpu-package)
#
# Carry OUT_DIR to the GPU machine (it is under build/, which git ignores)
# and run tools/gpu-check.sh OUT_DIR there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
out=${1:-$build/gpu-package}
"$root/scripts/build.sh" --target moe-run moe-compile moe-comm-bench >/dev/null
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/bundles"
cp "$build/bin/moe-run" "$build/bin/moe-comm-bench" "$out/bin/"
cp -L "$build"/lib/libmoe_runtime.so* "$out/lib/" 2>/dev/null ||
  cp -L "$(find "$build" -name 'libmoe_runtime.so*' | head -1)" "$out/lib/"
cp "$root/tools/gpu-check/gpu_check.py" "$root/tools/gpu-check.sh" "$out/"
for config in "$root"/tools/gpu-check/configs/*.json; do
  name=$(basename "$config" .json)
  "$build/bin/moe-compile" --hf-config "$config" --target=sm_90a \
    --max-tokens=4096 --no-cache --report -o "$out/bundles/$name.moeb" \
    2> "$out/bundles/$name.report"
done
echo "gpu-package: $(du -sh "$out" | cut -f1) in $out"
