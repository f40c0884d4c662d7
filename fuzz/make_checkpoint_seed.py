#!/usr/bin/env python3
"""Writes the seed of moe-fuzz-checkpoint: a valid checkpoint of step 7.

Layout of a fuzz input: u32 little-endian marker size, the COMPLETE marker,
the state file. The state follows moe-train's checkpoint format (runtime
Train.h): safetensors with the tensors b [4] and w [2, 3] (f32) and the
step and stream record; the marker holds the state's size and SHA-256.
Usage: make_checkpoint_seed.py OUT
"""
import hashlib
import json
import struct
import sys

tensors = {
    "__step_and_stream__": ("I64", [2], struct.pack("<qq", 7, 77)),
    "b": ("F32", [4], struct.pack("<4f", 0.5, -1.0, 2.0, 0.25)),
    "w": ("F32", [2, 3], struct.pack("<6f", 1, 2, 3, -4, 5, -6)),
}
header, body = {}, b""
for name, (dtype, shape, data) in sorted(tensors.items()):
    header[name] = {"dtype": dtype, "shape": shape,
                    "data_offsets": [len(body), len(body) + len(data)]}
    body += data
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
state = struct.pack("<Q", len(text)) + text + body
marker = json.dumps({
    "format": "moe-checkpoint", "version": 2, "step": 7, "stream": 77,
    "ranks": 1,
    "files": [{"name": "state.safetensors", "bytes": len(state),
               "sha256": hashlib.sha256(state).hexdigest()}],
}).encode()
open(sys.argv[1], "wb").write(struct.pack("<I", len(marker)) + marker + state)
