#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, AddressSanitizer and UBSan (in
# build-fuzz/, or $MOE_FUZZ_BUILD_DIR) and runs each on its seed corpus in
# fuzz/corpus/ for SECONDS (default 30). New inputs go to a temporary
# directory; a crash leaves its input in build-fuzz/artifacts/ and fails.
# The libFuzzer seed is 1 unless $MOE_FUZZ_SEED says otherwise.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: ir hfconfig
#        safetensors bundle checkpoint)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${1:-30}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(ir hfconfig safetensors bundle checkpoint)

"$root/scripts/setup-deps.sh"
MOE_BUILD_DIR="$build" MOE_CMAKE_ARGS="-DCMAKE_C_COMPILER=clang-22 \
-DCMAKE_CXX_COMPILER=clang++-22 -DMOE_ENABLE_FUZZERS=ON \
-DMOE_SANITIZERS=address;undefined" "$root/scripts/build.sh" --target moe-fuzzers

mkdir -p "$build/artifacts"
status=0
for target in "${targets[@]}"; do
  fuzzer="$build/bin/moe-fuzz-$target"
  corpus="$root/fuzz/corpus/$target"
  work=$(mktemp -d)
  echo "== moe-fuzz-$target for ${seconds}s ($(ls "$corpus" | wc -l) seeds)"
  # allow_user_poisoning=0: LLVM's headers poison BumpPtrAllocator memory
  # in our instrumented code while the uninstrumented libMLIR reads it, a
  # false positive without an ASan build of LLVM. Leaks are not checked:
  # MLIR contexts keep their uniqued storage to the end.
  if ASAN_OPTIONS=detect_leaks=0:allow_user_poisoning=0 "$fuzzer" -max_total_time="$seconds" \
      -seed="${MOE_FUZZ_SEED:-1}" -rss_limit_mb=4096 -timeout=20 \
      -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$target-" "$work" "$corpus" \
      > "$work.log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$work.log" | tail -2
  else
    echo "moe-fuzz-$target FAILED; last lines of its log:"
    tail -40 "$work.log"
    status=1
  fi
  rm -rf "$work" "$work.log"
done
if [[ $status -eq 0 ]]; then
  echo "fuzz: ${#targets[@]} passed, 0 failed"
else
  echo "fuzz: crashes found; inputs in $build/artifacts"
fi
exit $status
