#!/usr/bin/env bash
# Configures (once) and builds moe-compiler into $MOE_BUILD_DIR (default
# build/). $MOE_CMAKE_ARGS adds configure arguments (a compiler, sanitizers);
# extra arguments go to `cmake --build` (e.g. --target check-moe).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
if [[ ! -f "$build/build.ninja" ]]; then
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  read -r -a extra <<< "${MOE_CMAKE_ARGS:-}"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${launcher[@]}" "${extra[@]}"
fi
cmake --build "$build" "$@"
