#!/usr/bin/env bash
# The one-call GPU check, for a machine with one H100/H200, the CUDA driver
# and PyTorch (no LLVM/MLIR needed). It takes the package that
# scripts/gpu-package.sh builds elsewhere: moe-run, libmoe_runtime.so, sm_90a
# bundles and tools/gpu-check/gpu_check.py.
#
#   tools/gpu-check.sh [PACKAGE_DIR] [gpu_check.py options]
#
# PACKAGE_DIR defaults to build/gpu-package. Prints one PASS/FAIL line per
# kernel check and one table of kernel times next to PyTorch; exits non-zero
# when a check fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
package=${1:-$root/build/gpu-package}
[[ $# -gt 0 ]] && shift
if [[ ! -x "$package/bin/moe-run" ]]; then
  echo "gpu-check: no package in '$package' (build one with scripts/gpu-package.sh)" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$package/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
exec "${PYTHON:-python3}" "$package/gpu_check.py" --package "$package" "$@"
