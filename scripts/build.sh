#!/usr/bin/env bash
# Configures (once) and builds moe-compiler into $MOE_BUILD_DIR (default
# build/). $MOE_CMAKE_ARGS adds configure arguments (a compiler, sanitizers);
# extra arguments go to `cmake --build` (e.g. --target check-moe).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
# (CMakeLists.txt uses ccache when it is installed.)
if [[ ! -f "$build/build.ninja" ]]; then
  read -r -a extra <<< "${MOE_CMAKE_ARGS:-}"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${extra[@]}"
fi
cmake --build "$build" "$@"
