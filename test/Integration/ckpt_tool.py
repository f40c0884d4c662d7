#!/usr/bin/env python3
"""Damages moe-train checkpoints in controlled ways for the resume tests.

Written from the checkpoint layout moe-train documents (runtime Train.h):
DIR/step-N/state.safetensors and a COMPLETE marker, a JSON record of the
step, the input stream, the ranks and each state file's size and SHA-256.

  ckpt_tool.py flip CKPT OFFSET        flip one bit of the state file (from
                                       the end when OFFSET < 0)
  ckpt_tool.py truncate CKPT SIZE      keep the state file's first SIZE bytes
  ckpt_tool.py marker CKPT KEY JSON    set a field of the marker
  ckpt_tool.py record CKPT STEP STREAM rewrite the step and stream record in
                                       the state file, and its checksum
  ckpt_tool.py nan CKPT TENSOR         make element 0 of TENSOR NaN and fix
                                       the checksum (a consistent file of
                                       non-finite state)
  ckpt_tool.py set CKPT TENSOR VALUE   set element 0 of TENSOR (finite or
                                       not) and fix the checksum
  ckpt_tool.py rehash CKPT             recompute the marker's checksum
"""
import hashlib
import json
import os
import struct
import sys


def state_path(ckpt):
    return os.path.join(ckpt, "state.safetensors")


def read_state(ckpt):
    data = bytearray(open(state_path(ckpt), "rb").read())
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    return data, header, 8 + size


def rehash(ckpt):
    marker_path = os.path.join(ckpt, "COMPLETE")
    marker = json.load(open(marker_path))
    data = open(state_path(ckpt), "rb").read()
    for f in marker["files"]:
        if f["name"] == "state.safetensors":
            f["sha256"] = hashlib.sha256(data).hexdigest()
            f["bytes"] = len(data)
    open(marker_path, "w").write(json.dumps(marker))


def main():
    cmd, ckpt, *rest = sys.argv[1:]
    if cmd == "flip":
        data = bytearray(open(state_path(ckpt), "rb").read())
        data[int(rest[0])] ^= 0x01
        open(state_path(ckpt), "wb").write(data)
    elif cmd == "truncate":
        data = open(state_path(ckpt), "rb").read()
        open(state_path(ckpt), "wb").write(data[: int(rest[0])])
    elif cmd == "marker":
        marker_path = os.path.join(ckpt, "COMPLETE")
        marker = json.load(open(marker_path))
        marker[rest[0]] = json.loads(rest[1])
        open(marker_path, "w").write(json.dumps(marker))
    elif cmd == "record":
        data, header, start = read_state(ckpt)
        begin, _ = header["__step_and_stream__"]["data_offsets"]
        struct.pack_into("<qq", data, start + begin, int(rest[0]), int(rest[1]))
        open(state_path(ckpt), "wb").write(data)
        rehash(ckpt)
    elif cmd in ("nan", "set"):
        data, header, start = read_state(ckpt)
        begin, _ = header[rest[0]]["data_offsets"]
        value = float("nan") if cmd == "nan" else float(rest[1])
        struct.pack_into("<f", data, start + begin, value)
        open(state_path(ckpt), "wb").write(data)
        rehash(ckpt)
    elif cmd == "rehash":
        rehash(ckpt)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
