#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, compiles every
# example layer for the host target and for Hopper (sm_90a PTX and cubins,
# with each kernel's resources), and runs the tiny one (and a Mixtral-shaped
# layer imported from a config.json) on the best backend present: the GPU
# when a CUDA driver and an sm_90 device are there, else the CPU; then a few
# training steps of a small layer on the host.
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
echo "== the DeepSeek-V3 layer compiled for Hopper (moe-compile --target=sm_90a --report)"
if command -v ptxas >/dev/null || [[ -x /usr/local/cuda/bin/ptxas ]]; then
  "$bin/moe-compile" "$root/examples/deepseek-v3.mlir" --target=sm_90a \
    --report -o "$out/deepseek-v3.sm90.moeb"
else
  "$bin/moe-compile" "$root/examples/deepseek-v3.mlir" --target=sm_90a \
    --emit=ptx -o "$out/deepseek-v3.ptx"
  echo "(no ptxas here: wrote PTX only, $out/deepseek-v3.ptx)"
fi

# The GPU when the driver finds an sm_90 device, else the host.
device=host
if [[ -e /dev/nvidiactl ]] &&
   nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | grep -q '^9\.0'; then
  device=cuda
fi

echo
echo "== the tiny layer on $device, 256 tokens"
if [[ $device == cuda ]]; then
  # The tiny layer's shapes, in bf16 (the sm_90a kernels' element type).
  "$bin/moe-compile" --hf-config "$root/test/Integration/Inputs/deepseek-v3-tiny.json" \
    --target=sm_90a -o "$out/tiny.sm90.moeb"
  "$bin/moe-run" "$out/tiny.sm90.moeb" --device=cuda --random-weights --seed 1 \
    --tokens 256 --repeat 5 --outputs "$out/tiny-outputs.safetensors"
else
  "$bin/moe-run" "$out/tiny.moeb" --random-weights --seed 1 --tokens 256 \
    --repeat 5 --outputs "$out/tiny-outputs.safetensors"
fi

echo
echo "== a Mixtral-style config.json, imported, compiled and run"
"$bin/moe-compile" --hf-config "$root/test/Integration/Inputs/mixtral-tiny.json" \
  -o "$out/mixtral-tiny.moeb"
"$bin/moe-run" "$out/mixtral-tiny.moeb" --random-weights --seed 2 --tokens 64 \
  --outputs "$out/mixtral-tiny-outputs.safetensors"
echo
echo "== ten training steps of the tiny DeepSeek-V3-style layer (moe-compile --train, moe-train)"
"$bin/moe-compile" --hf-config "$root/test/Integration/Inputs/deepseek-v3-tiny.json" \
  --train --max-tokens 64 -o "$out/train.moeb"
"$bin/moe-train" "$out/train.moeb" --steps 10 --lr 1e-2 --seed 1 --tokens 64 \
  --checkpoint "$out/checkpoints" --checkpoint-every 5
if command -v mpirun >/dev/null && [[ -f "$build/lib/libmoe_comm_mpi.so" ]]; then
  echo
  echo "== the same steps with experts sharded over two ranks (--ep 2, mpirun -np 2)"
  "$bin/moe-compile" --hf-config "$root/test/Integration/Inputs/deepseek-v3-tiny.json" \
    --train --max-tokens 64 --ep 2 --ep-chunks 2 -o "$out/train-ep2.moeb"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np 2 --oversubscribe --bind-to none \
    "$bin/moe-train" "$out/train-ep2.moeb" --steps 10 --lr 1e-2 --seed 1 --tokens 64
fi
echo
echo "outputs (y, topk_ids, topk_weights) are in $out"
