#!/usr/bin/env python3
"""Compiles every config.json of a directory with moe-compile and prints one
line per file, in name order:

  NAME: ok, K kernels          (the bundle was written; K from its manifest)
  NAME: refused: MESSAGE       (moe-compile failed with one error line)

Anything else (a crash, a signal, an error without the file's name, or
more than one error line) is reported as `NAME: BROKEN ...` and makes the
script exit non-zero after the listing.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "Tools", "Inputs"))
import bundle_tool  # noqa: E402


def kernels_of(bundle):
    """The kernels the forward schedule of an sm_90a bundle launches."""
    steps = bundle_tool.read_manifest(bundle).get("gpu", {}).get("steps", [])
    return len({s["kernel"] for s in steps if s.get("op") == "launch"})


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("directory")
    ap.add_argument("--work", required=True)
    ap.add_argument("--moe-compile", default="moe-compile")
    argv = sys.argv[1:]
    # moe-compile's own options follow a `--`.
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    extra = argv[cut + 1:]
    os.makedirs(a.work, exist_ok=True)
    broken = 0
    for name in sorted(os.listdir(a.directory)):
        if not name.endswith(".json"):
            continue
        stem = name[:-5]
        path = os.path.join(a.directory, name)
        out = os.path.join(a.work, stem + ".moeb")
        p = subprocess.run([a.moe_compile, "--hf-config", path, *extra,
                            "-o", out], capture_output=True, text=True)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        if p.returncode == 0 and os.path.exists(out):
            print(f"{stem}: ok, {kernels_of(out)} kernels")
        elif p.returncode == 1 and len(lines) == 1 and name in lines[0]:
            print(f"{stem}: refused: {lines[0].split(': error: ', 1)[-1]}")
        else:
            broken += 1
            print(f"{stem}: BROKEN (exit {p.returncode}): {p.stderr.strip()}")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
