#!/usr/bin/env bash
# Checks the Python package as a user gets it: a wheel built from this
# clone (`pip wheel -v .`, its build's progress shown; the build goes to
# build-python/, reusing build/'s objects through ccache) and installed
# into a fresh venv (${MOE_BUILD_DIR:-build}/venv-package), then
# `import moe_compiler`, examples/python/run_layer.py and the package's
# numpy tests against the installed package (not the build tree's). The
# wheel's build time is printed (docs/Performance.md records it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
venv=$build/venv-package
rm -rf "$venv"
python3 -m venv "$venv"
wheels=$build/wheels
rm -rf "$wheels"
start=$(date +%s)
log=$build/wheel.log
if ! "$venv/bin/pip" wheel -v --disable-pip-version-check --no-deps \
    -w "$wheels" "$root" > "$log" 2>&1; then
  cat "$log"
  exit 1
fi
grep -E '^ *\[[0-9]+/[0-9]+\]' "$log" | tail -n 2 || true
wheel=$(ls "$wheels"/moe_compiler-*.whl)
echo "python-package: built $(basename "$wheel") in $(( $(date +%s) - start )) s"
"$venv/bin/pip" install -q --disable-pip-version-check "$wheel" pytest
cd "$build"   # away from the source tree: the installed package is used
"$venv/bin/python" -c 'import moe_compiler, sys
print("moe_compiler", moe_compiler.version(), "from", moe_compiler.__file__)
sys.exit("not the installed package" if "site-packages" not in moe_compiler.__file__ else 0)'
"$venv/bin/python" "$root/examples/python/run_layer.py"
PATH=$build/bin:$PATH MOE_CACHE_DIR=$build/test/moe-cache \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$root/test/Python/test_package.py"
