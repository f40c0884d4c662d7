#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the
# whole test suite (lit tests and GoogleTest binaries) through `check-moe`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh"
"$root/scripts/build.sh" --target check-moe
