#!/usr/bin/env bash
# Builds what tools/gpu-check.sh runs on a GPU machine without LLVM/MLIR:
# moe-run, moe-train, moe-comm-bench and libmoe_runtime.so from this build,
# sm_90a bundles of the check's configs (tools/gpu-check/configs:
# DeepSeek-V3 shapes with 32 experts, Mixtral-8x7B, Qwen3-30B-A3B),
# training bundles of two tiny configs, an FP8 layer with the host's
# outputs for it (fp8/), the full DeepSeek-V3 layer (model/) and the check
# script itself.
#
#   scripts/gpu-package.sh [--tiny] [--no-build] [--tile-n N]...
#                          [--tile-m M]... [--tile-cluster C]... [OUT_DIR]
#                                       (default build/gpu-package)
#
# Each --tile-n N (--tile-m M, --tile-cluster C) adds, beside every
# forward bundle and the training-speed bundle, a variant compiled with
# moe-compile --tile-n=N (--tile-m=M, --tile-cluster=C), its name ending
# in -nN (-mM, -cC), so one GPU run compares tile shapes.
#
# Carry OUT_DIR to the GPU machine (it is under build/, which git ignores)
# and run tools/gpu-check.sh OUT_DIR there. With --tiny the forward bundles
# are the tiny configs of every family (test/Integration/Inputs), small
# enough for the PTX emulator:
#   MOE_CUDA_DRIVER=build/lib/libcuda-emu.so MOE_NCCL=build/lib/libnccl-emu.so \
#     PYTHON=<python with torch> tools/gpu-check.sh OUT_DIR --emulator --tokens 200
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
tiny=0 rebuild=1
variants=()
while [[ ${1:-} == --* ]]; do
  case $1 in
    --tiny) tiny=1 ;;
    --tile-n) variants+=("n$2:--tile-n=$2"); shift ;;
    --tile-m) variants+=("m$2:--tile-m=$2"); shift ;;
    --tile-cluster) variants+=("c$2:--tile-cluster=$2"); shift ;;
    --no-build) rebuild=0 ;; # the build is current (the suite's own use)
    *) echo "gpu-package.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out=${1:-$build/gpu-package}
if [[ $rebuild == 1 ]]; then
  "$root/scripts/build.sh" --target moe-run moe-compile moe-comm-bench moe-train >/dev/null
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/bundles/train" "$out/bundles/train-host"
cp "$build/bin/moe-run" "$build/bin/moe-comm-bench" "$build/bin/moe-train" "$out/bin/"
cp -L "$build"/lib/libmoe_runtime.so* "$out/lib/" 2>/dev/null ||
  cp -L "$(find "$build" -name 'libmoe_runtime.so*' | head -1)" "$out/lib/"
# The host bundles' code (train-host/, the multi-step comparison) needs
# the OpenMP runtime, which a GPU machine need not have.
# (awk reads to the end: an early exit would leave ldconfig writing to a
# closed pipe, and pipefail would fail on its SIGPIPE.)
libomp=$(ldconfig -p | awk '/libomp\.so\.5 .*x86-64/ && !found {print $NF; found = 1}')
[[ -n $libomp ]] || { echo "gpu-package: no libomp.so.5 here (scripts/setup-deps.sh installs it)" >&2; exit 1; }
cp -L "$libomp" "$out/lib/"
cp "$root/tools/gpu-check/gpu_check.py" "$root/tools/gpu-check/train_bench.py" \
  "$root/tools/gpu-check/device_forward.py" \
  "$root/test/Integration/reference.py" "$root/tools/gpu-check.sh" "$out/"
configs=("$root"/tools/gpu-check/configs/*.json)
tokens=4096
if [[ $tiny == 1 ]]; then
  configs=()
  for name in deepseek-v3-tiny deepseek-v2-tiny mixtral-tiny qwen3-moe-tiny qwen3-moe-top1; do
    configs+=("$root/test/Integration/Inputs/$name.json")
  done
  tokens=256
fi
for config in "${configs[@]}"; do
  name=$(basename "$config" .json)
  "$build/bin/moe-compile" --hf-config "$config" --target=sm_90a \
    --max-tokens=$tokens --no-cache --report -o "$out/bundles/$name.moeb" \
    2> "$out/bundles/$name.report"
  for v in "${variants[@]}"; do
    "$build/bin/moe-compile" --hf-config "$config" --target=sm_90a \
      --max-tokens=$tokens --no-cache --report "${v#*:}" \
      -o "$out/bundles/$name-${v%%:*}.moeb" 2> "$out/bundles/$name-${v%%:*}.report"
  done
done
# The full DeepSeek-V3 layer (256 experts, 22.7 GB of bf16 weights), whose
# kernel times the check puts beside the performance model's projection
# at 128, 512 and 4096 tokens. Not on the emulator (--tiny).
if [[ $tiny == 0 ]]; then
  mkdir -p "$out/model"
  "$build/bin/moe-compile" "$root/examples/deepseek-v3.mlir" --target=sm_90a \
    --max-tokens=4096 --no-cache --report -o "$out/model/deepseek-v3.moeb" \
    2> "$out/model/deepseek-v3.report"
fi
# Training steps of two tiny configs (DeepSeek-V3's routing with a shared
# expert, Mixtral's softmax), and their host bundles for the multi-step
# comparison.
for name in deepseek-v3-tiny mixtral-tiny; do
  "$build/bin/moe-compile" --hf-config "$root/test/Integration/Inputs/$name.json" \
    --train --target=sm_90a --max-tokens=512 --no-cache \
    -o "$out/bundles/train/$name.moeb"
  "$build/bin/moe-compile" --hf-config "$root/test/Integration/Inputs/$name.json" \
    --train --dtype=bf16 --max-tokens=512 --no-cache \
    -o "$out/bundles/train-host/$name.moeb"
done
# DeepSeek-V3's step with AdamW's moments in bf16, as it kept them.
for target in sm_90a host; do
  dir=train; [[ $target == host ]] && dir=train-host
  flags=(--target=sm_90a); [[ $target == host ]] && flags=(--dtype=bf16)
  "$build/bin/moe-compile" --hf-config "$root/test/Integration/Inputs/deepseek-v3-tiny.json" \
    --train "${flags[@]}" --optimizer-state=bf16 --max-tokens=512 --no-cache \
    -o "$out/bundles/$dir/deepseek-v3-tiny-bf16m.moeb"
done
# The backward pass alone (a framework's autograd) on device memory.
mkdir -p "$out/bundles/backward"
"$build/bin/moe-compile" --hf-config "$root/test/Integration/Inputs/deepseek-v3-tiny.json" \
  --backward --target=sm_90a --max-tokens=512 --no-cache \
  -o "$out/bundles/backward/deepseek-v3-tiny.moeb"
# A larger layer's training step for its speed (DeepSeek-V2-Lite's shapes:
# 64 experts of 1408, top-6, two shared experts; 4096 tokens). Not on the
# emulator (--tiny).
if [[ $tiny == 0 ]]; then
  mkdir -p "$out/bundles/train-bench"
  "$build/bin/moe-compile" --hf-config "$root/test/Import/Inputs/deepseek-v2-lite.json" \
    --train --target=sm_90a --max-tokens=4096 --no-cache \
    -o "$out/bundles/train-bench/deepseek-v2-lite.moeb"
  for v in "${variants[@]}"; do
    "$build/bin/moe-compile" --hf-config "$root/test/Import/Inputs/deepseek-v2-lite.json" \
      --train --target=sm_90a --max-tokens=4096 --no-cache "${v#*:}" \
      -o "$out/bundles/train-bench/deepseek-v2-lite-${v%%:*}.moeb"
  done
fi
# FP8 (--dtype fp8): the tiny DeepSeek-V3-like layer's sm_90a bundle with
# published FP8 weights and inputs for 1, 128 and 1000 tokens, and the
# host's outputs for them, computed here (the GPU machine need not run host
# bundles); and, but with --tiny, the DeepSeek-V3-shaped config in fp8
# for its kernel times next to its bf16 bundle's.
python=${PYTHON:-python3}
fp8config="$root/test/Integration/Inputs/deepseek-v3-fp8.json"
mkdir -p "$out/fp8"
cp "$root/test/GPU/fp8_vs_host.py" "$out/"
"$build/bin/moe-compile" --hf-config "$fp8config" --dtype fp8 --target=sm_90a \
  --max-tokens=1000 --no-cache -o "$out/fp8/deepseek-v3-fp8.moeb"
"$build/bin/moe-compile" --hf-config "$fp8config" --dtype fp8 --no-cache \
  -o "$out/fp8/host.moeb"
for t in 1 128 1000; do
  "$python" "$root/test/Integration/reference.py" gen --config "$fp8config" \
    --tokens $t --seed $t --fp8 --dtype bf16 \
    --weights "$out/fp8/weights-$t.safetensors" \
    --inputs "$out/fp8/inputs-$t.safetensors"
  "$build/bin/moe-run" "$out/fp8/host.moeb" --weights "$out/fp8/weights-$t.safetensors" \
    --inputs "$out/fp8/inputs-$t.safetensors" \
    --outputs "$out/fp8/host-$t.safetensors" > /dev/null
done
rm "$out/fp8/host.moeb"
if [[ $tiny == 0 ]]; then
  for config in "$root"/tools/gpu-check/configs/deepseek-v3*.json; do
    "$build/bin/moe-compile" --hf-config "$config" --dtype fp8 --target=sm_90a \
      --max-tokens=$tokens --no-cache --report \
      -o "$out/fp8/speed-$(basename "$config" .json).moeb" \
      2> "$out/fp8/speed-$(basename "$config" .json).report"
  done
fi
# Kernels on their own (test/Emu's harnesses: the FP8 step's quantization,
# weight- and input-gradient kernels, each against numpy), compiled here
# into kernels/cache (the GPU machine has no moe-opt) by running each on
# the emulator once; kernels/checks lists what the check runs. But with
# --tiny, the FP8 weight gradient at DeepSeek-V3's shapes is compiled only
# and timed there.
mkdir -p "$out/kernels"
cp "$root"/test/Emu/{lowered_kernels,ptx_run,kgrouped_fp8_gemm_run,dgrad_fp8_run,wgrad_fp8_run,quantize_columns_run,quantize_blocks_run,act_grad_run}.py \
  "$root/test/Integration/reference.py" "$out/kernels/"
cat > "$out/kernels/checks" <<'CHECKS'
quantize_columns_run.py
quantize_columns_run.py --dtype e4m3 --columns 200 --groups 256,128 --first 0
quantize_blocks_run.py
quantize_blocks_run.py --layout up_rows
act_grad_run.py --split
kgrouped_fp8_gemm_run.py
kgrouped_fp8_gemm_run.py --tile-n 128 --cluster 2 --m 264 --n 256 --groups 256,128,0,384
dgrad_fp8_run.py
wgrad_fp8_run.py
CHECKS
while read -r line; do
  # shellcheck disable=SC2086
  MOE_KERNEL_CACHE="$out/kernels/cache" "$python" "$out/kernels/"$line \
    "$build/lib/libcuda-emu.so" --moe-opt "$build/bin/moe-opt" > /dev/null
done < "$out/kernels/checks"
if [[ $tiny == 0 ]]; then
  groups=1024,1024,1024,1024,1024,1024,1024,1024
  for shape in "--m 7168 --n 2048" "--m 4096 --n 7168"; do
    line="kgrouped_fp8_gemm_run.py $shape --groups $groups --first 0 --time 20 --no-check"
    # shellcheck disable=SC2086
    MOE_KERNEL_CACHE="$out/kernels/cache" "$python" "$out/kernels/"$line \
      "$build/lib/libcuda-emu.so" --moe-opt "$build/bin/moe-opt" --compile-only > /dev/null
    echo "$line" >> "$out/kernels/checks"
  done
fi
echo "gpu-package: $(du -sh "$out" | cut -f1) in $out"
