#!/usr/bin/env bash
# Regenerates the reference PTX that the emulator's tests run
# (test/Emu/Inputs/reference/): kernels compiled for sm_90a by other
# compilers, which is where the emulator's trust comes from: Triton's, and
# nvcc's (CUDA 13) on CUTLASS's sm90 GEMMs. Makes a virtual environment
# (build/venv-reference) with triton and nvidia-cutlass (CUTLASS's
# headers) from PyPI; the suite itself needs neither, as the PTX is
# checked in.
#
#   scripts/gen-reference-ptx.sh [OUT_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/test/Emu/Inputs/reference}
venv=$root/build/venv-reference
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check 'triton>=3.4' nvidia-cutlass numpy
TRITON_DEFAULT_FP_FUSION=1 "$venv/bin/python" "$root/test/Emu/reference/generate.py" "$out"
