#!/usr/bin/env bash
# Expert-parallel training-step benchmark on the host: the tiny DeepSeek-V3
# config under mpirun with 1, 2 and 4 ranks, all-to-alls blocking or in
# chunks. Prints the median global tokens/s over STEPS steps after the
# first and, from rank 0's trace, the all-to-all time per step and the
# share of it that overlapped the compiled code's expert compute.
# Usage: scripts/bench-ep.sh [STEPS] [TOKENS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${MOE_BUILD_DIR:-$root/build}/bin
steps=${1:-30}
tokens=${2:-1024}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
config=$root/test/Integration/Inputs/deepseek-v3-tiny.json
printf '%5s %6s %8s %14s %16s %12s\n' ranks chunks tokens "median tok/s" \
  "all-to-all ms" "overlapped"
for run in "1 1" "2 1" "2 4" "4 1" "4 4"; do
  read -r ranks chunks <<< "$run"
  name=ep$ranks-c$chunks
  args=(--train --max-tokens "$tokens" --no-cache -o "$work/$name.moeb")
  if [[ $ranks -gt 1 ]]; then args+=(--ep "$ranks" --ep-chunks "$chunks"); fi
  "$bin/moe-compile" --hf-config "$config" "${args[@]}"
  launch=()
  if [[ $ranks -gt 1 ]]; then
    launch=(mpirun -np "$ranks" --oversubscribe --bind-to none)
  fi
  "${launch[@]}" "$bin/moe-train" "$work/$name.moeb" --steps "$steps" \
    --lr 1e-2 --seed 1 --tokens "$tokens" --trace "$work/$name.json" \
    > "$work/$name.log"
  median=$(grep '^step' "$work/$name.log" | tail -n +2 |
           awk '{print $6}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  trace=$work/$name.json
  [[ -f $trace ]] || trace=$work/$name.rank0.json
  read -r a2a overlap < <(python3 - "$trace" "$steps" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
lanes = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
xs = [e for e in events if e["ph"] == "X" and not e["name"].startswith("step 1:")
      and "teacher" not in e["name"]]
# The student's step: events inside the "training step" spans.
steps = [(e["ts"], e["ts"] + e["dur"]) for e in xs if lanes[e["tid"]].startswith("training step")]
inside = lambda e: any(b <= e["ts"] < f for b, f in steps)
a2a = [e for e in xs if lanes[e["tid"]].startswith("collectives") and
       e["name"].endswith(": all-to-all") and inside(e)]
code = [e for e in xs if lanes[e["tid"]].startswith("compiled code") and
        "after all-to-all wait" in e["name"] and inside(e)]
total = sum(e["dur"] for e in a2a)
shared = 0.0
for a in a2a:
    for c in code:
        lo = max(a["ts"], c["ts"])
        hi = min(a["ts"] + a["dur"], c["ts"] + c["dur"])
        shared += max(0.0, hi - lo)
n = max(1, len(steps))
print("%.2f %s" % (total / n / 1000.0,
                   "%.0f%%" % (100.0 * shared / total) if total else "-"))
PY
)
  printf '%5s %6s %8s %14s %16s %12s\n' "$ranks" "$chunks" "$tokens" \
    "$median" "$a2a" "$overlap"
done
