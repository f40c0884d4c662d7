#!/usr/bin/env bash
# Makes (once) a virtual environment with PyTorch, transformers 5,
# safetensors, numpy, nanobind and pytest from PyPI, for the tests and
# benchmarks that compare against them and the Python package (never
# needed by the C++ build), and prints its Python:
#   export MOE_TORCH_PYTHON=$(scripts/torch-venv.sh)
# The venv is ${MOE_BUILD_DIR:-build}/venv-torch; a second run only checks it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${MOE_BUILD_DIR:-$root/build}/venv-torch
check='import torch, numpy, safetensors, transformers, nanobind, pytest, sys
sys.exit(int(transformers.__version__.split(".")[0]) < 5)'
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c "$check" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  # nanobind and pytest: the build makes the Python package with them, and
  # the suite runs its tests (test/Python).
  "$venv/bin/pip" install -q --disable-pip-version-check torch numpy \
    safetensors 'transformers>=5' nanobind pytest >&2
  "$venv/bin/python" -c "$check"
fi
echo "$venv/bin/python"
