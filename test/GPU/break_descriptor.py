#!/usr/bin/env python3
"""Rewrites the wgmma shared-memory descriptors of a PTX file: every 64-bit
literal that is one (128B swizzle, stride byte offset 1024, as the
compiler builds its operand descriptors) gets another swizzle mode or
stride byte offset. The bit fields are those of the PTX ISA's matrix
descriptor: start address >> 4 in bits 0-13, leading byte offset >> 4 in
16-29, stride byte offset >> 4 in 32-45, the layout in bits 62-63
(1: 128B swizzle, 2: 64B, 3: 32B).

  break_descriptor.py IN.ptx OUT.ptx (--swizzle 64B|32B | --stride BYTES)
"""
import argparse
import re

ap = argparse.ArgumentParser()
ap.add_argument("input")
ap.add_argument("output")
ap.add_argument("--swizzle", choices=["64B", "32B"])
ap.add_argument("--stride", type=int)
a = ap.parse_args()
changed = 0


def edit(m):
    global changed
    x = int(m.group(0))
    if x >> 64 or (x >> 62) != 1 or ((x >> 32) & 0x3FFF) != 1024 >> 4:
        return m.group(0)
    if a.swizzle:
        x = (x & ~(3 << 62)) | ({"64B": 2, "32B": 3}[a.swizzle] << 62)
    if a.stride:
        x = (x & ~(0x3FFF << 32)) | ((a.stride >> 4) << 32)
    changed += 1
    return str(x)


with open(a.input) as f:
    text = f.read()
text = re.sub(r"\b[0-9]{16,20}\b", edit, text)
with open(a.output, "w") as f:
    f.write(text)
print("break_descriptor: %d descriptors changed" % changed)
