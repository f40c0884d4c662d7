#!/usr/bin/env bash
# Builds everything with clang, AddressSanitizer and UBSan (in build-asan/,
# or $MOE_ASAN_BUILD_DIR) and runs the whole test suite on it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_ASAN_BUILD_DIR:-$root/build-asan}
"$root/scripts/setup-deps.sh"
if [[ ! -f "$build/build.ninja" ]]; then
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DMOE_SANITIZERS="address;undefined" "${launcher[@]}" \
    > "$build.configure.log" || { cat "$build.configure.log"; exit 1; }
fi
cmake --build "$build"
# See scripts/fuzz.sh for why user poisoning and leak checks are off.
export ASAN_OPTIONS=detect_leaks=0:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1
cmake --build "$build" --target check-moe
