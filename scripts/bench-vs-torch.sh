#!/usr/bin/env bash
# The host target against PyTorch on the CPU, in one run (not a test):
# forward passes and training steps of the issue-20 layers through moe-run
# and moe-train next to PyTorch eager with the same threads, as a Markdown
# table (scripts/bench_vs_torch.py --help for the options; --write-docs
# docs/Performance.md puts the table there).
# PyTorch: $MOE_TORCH_PYTHON, else the venv of scripts/torch-venv.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${MOE_TORCH_PYTHON:-}
if [[ -z $python ]]; then
  python=$("$root/scripts/torch-venv.sh")
fi
exec "$python" "$root/scripts/bench_vs_torch.py" --bin "${MOE_BUILD_DIR:-$root/build}/bin" "$@"
