#!/usr/bin/env bash
# Checkpoint benchmark: moe-train on a Mixtral-style layer of HIDDEN x
# FFN with 8 experts (f32 masters and two AdamW moments: 3 x 4 bytes per
# parameter), the time of each checkpoint write (serialize, SHA-256, write,
# fsync, marker, publish) from the run's trace,
# and the time a resume spends verifying (SHA-256, shapes, finite values)
# and restoring, as the difference between a resumed one-step run and a
# fresh one.
# Usage: scripts/bench-checkpoint.sh [HIDDEN] [FFN]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${MOE_BUILD_DIR:-$root/build}/bin
hidden=${1:-1024}
ffn=${2:-2048}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/config.json" <<JSON
{"model_type": "mixtral", "hidden_size": $hidden, "num_local_experts": 8,
 "num_experts_per_tok": 2, "intermediate_size": $ffn}
JSON
"$bin/moe-compile" --hf-config "$work/config.json" --train --max-tokens 16 \
  --no-cache -o "$work/b.moeb"
"$bin/moe-train" "$work/b.moeb" --steps 3 --tokens 16 --checkpoint "$work/ck" \
  --checkpoint-every 1 --trace "$work/trace.json" > /dev/null
bytes=$(stat -c %s "$work/ck/step-000000000003/state.safetensors")
python3 - "$work/trace.json" "$bytes" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
ms = sorted(e["dur"] / 1e3 for e in events
            if e.get("ph") == "X" and e["name"].endswith("checkpoint"))
mb = int(sys.argv[2]) / 2**20
print(f"state {mb:.0f} MiB; checkpoint writes {', '.join(f'{m:.0f}' for m in ms)} ms "
      f"(median {ms[len(ms) // 2]:.0f} ms, {mb / (ms[len(ms) // 2] / 1e3):.0f} MiB/s)")
PY
seconds() {
  python3 -c 'import subprocess, sys, time
t = time.monotonic()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(f"{time.monotonic() - t:.2f}")' "$@"
}
fresh=$(seconds "$bin/moe-train" "$work/b.moeb" --steps 1 --tokens 16)
resumed=$(seconds "$bin/moe-train" "$work/b.moeb" --steps 4 --tokens 16 --resume "$work/ck")
python3 -c "import sys; f, r = map(float, sys.argv[1:]); print(f'one step: fresh {f:.2f} s, resumed {r:.2f} s (verify and restore: {r - f:.2f} s)')" "$fresh" "$resumed"
