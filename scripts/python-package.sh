#!/usr/bin/env bash
# Checks the Python package as a user gets it: `pip install .` from this
# clone into a fresh venv (${MOE_BUILD_DIR:-build}/venv-package; the build
# goes to build-python/, reusing build/'s objects through ccache), then
# `import moe_compiler`, examples/python/run_layer.py and the package's
# numpy tests against the installed package (not the build tree's).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
venv=$build/venv-package
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "$root[test]"
cd "$build"   # away from the source tree: the installed package is used
"$venv/bin/python" -c 'import moe_compiler, sys
print("moe_compiler", moe_compiler.version(), "from", moe_compiler.__file__)
sys.exit("not the installed package" if "site-packages" not in moe_compiler.__file__ else 0)'
"$venv/bin/python" "$root/examples/python/run_layer.py"
PATH=$build/bin:$PATH MOE_CACHE_DIR=$build/test/moe-cache \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$root/test/Python/test_package.py"
