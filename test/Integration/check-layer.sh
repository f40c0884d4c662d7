#!/usr/bin/env bash
# Compiles a config.json for the host, runs it with moe-run on weights and
# inputs from the independent reference, and checks the outputs against it.
#
# usage: check-layer.sh WORKDIR CONFIG [--tokens N] [--seed N] [--case C]
#          [--dtype f32|bf16|fp8] [--alignment A] [--prefix P] [--tol T]
#          [--mcpu CPU] [--checkpoint float|fp8]
# --dtype fp8 compiles FP8 experts (bf16 activations) and checks against
# the reference's FP8 layer; --checkpoint fp8 writes the weights as a
# published FP8 checkpoint (e4m3 codes and block scales) instead of bf16.
# Needs moe-compile and moe-run on PATH and $PYTHON with numpy.
set -euo pipefail
dir=$1 config=$2
shift 2
tokens=16 seed=0 case=random dtype=f32 alignment=1 prefix= tol=2e-5 mcpu=
checkpoint=float
while [[ $# -gt 0 ]]; do
  case $1 in
    --tokens) tokens=$2 ;;
    --seed) seed=$2 ;;
    --case) case=$2 ;;
    --dtype) dtype=$2 ;;
    --alignment) alignment=$2 ;;
    --prefix) prefix=$2 ;;
    --tol) tol=$2 ;;
    --mcpu) mcpu=$2 ;;
    --checkpoint) checkpoint=$2 ;;
    *) echo "check-layer.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
reference=$(dirname "$0")/reference.py
mkdir -p "$dir"
moe-compile --hf-config "$config" --dtype "$dtype" --alignment "$alignment" \
  ${mcpu:+--mcpu "$mcpu"} -o "$dir/layer.moeb"
fp8=()
gen_dtype=$dtype
if [[ $dtype == fp8 ]]; then
  fp8=(--fp8)
  gen_dtype=bf16
fi
gen_fp8=()
[[ $checkpoint == fp8 ]] && gen_fp8=(--fp8)
"$PYTHON" "$reference" gen --config "$config" --tokens "$tokens" \
  --seed "$seed" --case "$case" --dtype "$gen_dtype" --prefix "$prefix" \
  "${gen_fp8[@]}" \
  --weights "$dir/weights.safetensors" --inputs "$dir/x.safetensors"
moe-run "$dir/layer.moeb" --weights "$dir/weights.safetensors" \
  --weights-prefix "$prefix" --inputs "$dir/x.safetensors" \
  --outputs "$dir/y.safetensors"
"$PYTHON" "$reference" check --config "$config" --prefix "$prefix" \
  --weights "$dir/weights.safetensors" --inputs "$dir/x.safetensors" \
  --outputs "$dir/y.safetensors" --tol "$tol" "${fp8[@]}"
