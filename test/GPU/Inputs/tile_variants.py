#!/usr/bin/env python3
"""Checks moe-compile --report's table of the forward pass's tile variants
(read from stdin) against itself and against the bundle's manifest: the
rows up to the bundle's BLOCK_M 64 bucket are faster with BLOCK_M 64 and
say so, the rows above it run BLOCK_M 128, the first row past the bucket is
not faster with BLOCK_M 64, and the manifest's variant covers the same
tokens.

  moe-compile ... --report | tile_variants.py MANIFEST.json
"""
import json
import re
import sys

manifest = json.load(open(sys.argv[1]))
text = sys.stdin.read()
table = text[text.index("tile variants of the forward pass"):]
rows = [(int(t), float(a), float(b), int(m)) for t, a, b, m in re.findall(
    r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+BLOCK_M (\d+)$", table, re.M)]
m = re.search(r"the bundle runs BLOCK_M 64 for 1 \.\. (\d+) tokens", table)
bucket = int(m.group(1)) if m else 0
variants = manifest["gpu"].get("variants", [])
if bucket:
    if len(variants) != 1 or variants[0]["tile_m"] != 64 or \
            variants[0]["max_tokens"] != bucket:
        sys.exit("the manifest's variants %s are not BLOCK_M 64 up to %d"
                 % ([(v["tile_m"], v["max_tokens"]) for v in variants],
                    bucket))
elif variants:
    sys.exit("the report runs no variant, the manifest has %d" % len(variants))
for t, us128, us64, runs in rows:
    if runs != (64 if t <= bucket else 128):
        sys.exit("%d tokens run BLOCK_M %d, the bucket is 1 .. %d"
                 % (t, runs, bucket))
    if t <= bucket and not us64 < us128:
        sys.exit("%d tokens run BLOCK_M 64 at %.1f us, not faster than %.1f"
                 % (t, us64, us128))
    if t == bucket + 1 and us64 < us128:
        sys.exit("%d tokens, past the bucket, are faster with BLOCK_M 64"
                 % t)
print("tile variants: %d rows, BLOCK_M 64 for 1 .. %d tokens"
      % (len(rows), bucket))
