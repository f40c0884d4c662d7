#!/usr/bin/env bash
# Builds everything with clang, AddressSanitizer and UBSan (in build-asan/,
# or $MOE_ASAN_BUILD_DIR) and runs the whole test suite on it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_ASAN_BUILD_DIR:-$root/build-asan}
"$root/scripts/setup-deps.sh"
export MOE_BUILD_DIR="$build" MOE_CMAKE_ARGS="-DCMAKE_C_COMPILER=clang-22 \
-DCMAKE_CXX_COMPILER=clang++-22 -DMOE_SANITIZERS=address;undefined"
"$root/scripts/build.sh"
# See scripts/fuzz.sh for why user poisoning and leak checks are off.
export ASAN_OPTIONS=detect_leaks=0:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1
"$root/scripts/build.sh" --target check-moe
