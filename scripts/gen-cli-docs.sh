#!/usr/bin/env bash
# Writes docs/CLI.md from the tools' --help, the one source of every
# option's help text (test/Tools/cli-docs.test checks that the page is
# current: rerun this after changing an option).
#
#   scripts/gen-cli-docs.sh [BIN_DIR] [OUT]   (build/bin, docs/CLI.md)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-${MOE_BUILD_DIR:-$root/build}/bin}
out=${2:-$root/docs/CLI.md}
{
  echo "# Command-line reference"
  echo
  echo "Each tool's \`--help\`, as \`scripts/gen-cli-docs.sh\` collects it"
  echo "(test/Tools/cli-docs.test keeps this page current). The why of the"
  echo "options is in the [README](../README.md) and"
  echo "[Architecture.md](Architecture.md)."
  for tool in moe-compile moe-run moe-train moe-comm-bench; do
    echo
    echo "## $tool"
    echo
    echo '```'
    "$bin/$tool" --help
    echo '```'
  done
  echo
  echo "## moe-opt"
  echo
  echo "\`mlir-opt\` with the project's dialects, passes and pipelines; its"
  echo "\`--help\` begins with the project's passes and pipelines (the full"
  echo "list, upstream's included, follows there):"
  echo
  echo '```'
  "$bin/moe-opt" --help | sed '/^OVERVIEW:/,$d'
  echo '```'
} > "$out"
