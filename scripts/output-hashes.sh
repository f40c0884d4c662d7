#!/usr/bin/env bash
# Hashes what moe-compile makes for sm_90a from every example and published
# config: the PTX, the bundle and the --report, forward and --train, bf16
# and fp8, one rank and two ranks in two chunks. A refactoring of the
# compiler that must not change its output compares two runs of this:
#   scripts/output-hashes.sh > before.txt; (change); scripts/output-hashes.sh
#   > after.txt; diff before.txt after.txt
# A variant the compiler refuses (fp8 --train) hashes its diagnostic. The
# PTX and the report are deterministic; a training bundle's cubin is not:
# ptxas 13.0 itself gives a training step's PTX different cubins from run
# to run (with or without --split-compile), so compare the PTX and report
# lines, and the bundle lines of the forward variants.
# Usage: scripts/output-hashes.sh [BUILD_DIR]   (default build/; 2 jobs, or
#        $MOE_HASH_JOBS)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
compile="$build/bin/moe-compile"
[[ -x $compile ]] || { echo "output-hashes.sh: no $compile; build first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

variants=("fwd-bf16:--dtype=bf16"
          "train-bf16:--dtype=bf16 --train"
          "fwd-fp8:--dtype=fp8"
          "train-fp8:--dtype=fp8 --train"
          "fwd-bf16-ep2:--dtype=bf16 --ep=2 --ep-chunks=2"
          "train-bf16-ep2:--dtype=bf16 --train --ep=2 --ep-chunks=2"
          "fwd-fp8-ep2:--dtype=fp8 --ep=2 --ep-chunks=2")

# One line per (input, variant, output): the sha256 of the output with the
# work directory's name taken out.
hash_one() {
  local input=$1 variant=$2 flags=$3 work=$4 compile=$5
  local name tag out
  name=$(basename "$input")
  tag="$name.$variant"
  out="$work/$tag"
  local report
  for emit in ptx bundle; do
    report=
    [[ $emit == bundle ]] && report=--report
    # shellcheck disable=SC2086
    if "$compile" --no-cache --target=sm_90a $flags "$input" --emit=$emit \
        -o "$out.$emit" $report 2>"$out.$emit.err"; then
      echo "$tag $emit $(sha256sum <"$out.$emit" | cut -c1-16)"
      [[ $emit == bundle ]] &&
        echo "$tag report $(sed "s|$work|WORK|g" "$out.$emit.err" | sha256sum | cut -c1-16)"
    else
      echo "$tag $emit-error $(sed "s|$work|WORK|g" "$out.$emit.err" | sha256sum | cut -c1-16)"
    fi
    rm -f "$out.$emit" "$out.$emit.err"
  done
}
export -f hash_one

{
  for input in "$root"/examples/*.mlir "$root"/test/Import/Inputs/published/*.json; do
    for v in "${variants[@]}"; do
      printf '%s\0%s\0%s\0' "$input" "${v%%:*}" "${v#*:}"
    done
  done
} | xargs -0 -n3 -P "${MOE_HASH_JOBS:-2}" bash -c \
      'hash_one "$1" "$2" "$3" "'"$work"'" "'"$compile"'"' _ | LC_ALL=C sort
