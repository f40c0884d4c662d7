#!/usr/bin/env bash
# Installs the Debian packages moe-compiler needs to build and test.
# Idempotent: when every package is already installed it changes nothing and
# makes no network request.
set -euo pipefail

packages=(
  # Compiler infrastructure: headers, shared libMLIR/libLLVM, mlir-tblgen.
  llvm-22-dev libmlir-22-dev mlir-22-tools
  # lit, FileCheck, not, count.
  llvm-22-tools
  # Build tools and the test frameworks used by test/unittests.
  cmake ninja-build g++ python3 libgtest-dev
  # Compiler cache: rebuilds, and the Python package's build beside build/,
  # reuse objects (CMakeLists.txt uses it when present).
  ccache
  # The runtime reads JSON manifests and safetensors headers.
  nlohmann-json3-dev
  # Expert-parallel training over several ranks (mpirun, the MPI plugin).
  libopenmpi-dev openmpi-bin
  # The OpenMP runtime the host code's parallel loops run on (libomp.so.5).
  libomp-dev
  # Independent numerics reference of the integration tests; venvs for the
  # optional PyTorch/transformers comparisons (scripts/torch-venv.sh).
  python3-numpy python3-venv
  # Headers of the Python package's extension (python/, nanobind from PyPI).
  python3-dev
  # Fuzzing and sanitizer builds (scripts/fuzz.sh, scripts/sanitize.sh).
  clang-22 libclang-rt-22-dev libfuzzer-22-dev
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
