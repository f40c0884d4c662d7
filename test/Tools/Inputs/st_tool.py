#!/usr/bin/env python3
"""Edits and crafts safetensors files for the reader tests.

Implements the format from its specification (8-byte little-endian header
size, JSON header, data), not from the runtime's code:
  st_tool.py drop IN OUT NAME          remove a tensor (the data stays
                                       contiguous, as the format requires)
  st_tool.py trail IN OUT COUNT        append COUNT bytes no tensor indexes
  st_tool.py hole IN OUT NAME          move NAME's bytes 8 bytes later,
                                       leaving a gap no tensor indexes
  st_tool.py rename IN OUT NAME NEW    rename a tensor
  st_tool.py reshape IN OUT NAME       flatten a tensor to 1-D
  st_tool.py int IN OUT NAME           relabel an F32 tensor as I32
  st_tool.py shard IN DIR PREFIX N     a sharded checkpoint in DIR: IN's
                                       tensors named PREFIX + name, dealt
                                       round-robin over N shards, and
                                       DIR/model.safetensors.index.json
  st_tool.py raw OUT HEADER DATA_BYTES [HEADER_SIZE]
                                       a file with this header text and
                                       DATA_BYTES zero bytes of data; the
                                       stored header size may be overridden
"""
import json
import struct
import sys


def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    return header, data[8 + n :]


def save(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + body)


def main():
    cmd, *args = sys.argv[1:]
    if cmd == "raw":
        out, header, size, *override = args
        text = header.encode()
        n = int(override[0]) if override else len(text)
        open(out, "wb").write(struct.pack("<Q", n) + text + b"\0" * int(size))
        return
    if cmd == "shard":
        src, directory, prefix, count = args
        header, body = load(src)
        count = int(count)
        names = sorted(k for k in header if k != "__metadata__")
        shards = [({}, b"") for _ in range(count)]
        weight_map = {}
        for i, name in enumerate(names):
            file = "model-%05d-of-%05d.safetensors" % (i % count + 1, count)
            h, b = shards[i % count]
            begin, end = header[name]["data_offsets"]
            entry = dict(header[name], data_offsets=[len(b), len(b) + end - begin])
            h[prefix + name] = entry
            shards[i % count] = (h, b + body[begin:end])
            weight_map[prefix + name] = file
        for i, (h, b) in enumerate(shards):
            save("%s/model-%05d-of-%05d.safetensors" % (directory, i + 1, count), h, b)
        json.dump({"metadata": {"total_size": len(body)}, "weight_map": weight_map},
                  open(directory + "/model.safetensors.index.json", "w"))
        return
    src, dst, name, *rest = args
    header, body = load(src)
    if cmd == "drop":
        begin, end = header.pop(name)["data_offsets"]
        body = body[:begin] + body[end:]
        for value in header.values():
            if isinstance(value, dict) and "data_offsets" in value:
                b, e = value["data_offsets"]
                if b >= end:
                    value["data_offsets"] = [b - (end - begin), e - (end - begin)]
    elif cmd == "trail":
        body = body + b"\0" * int(name)
    elif cmd == "hole":
        begin, end = header[name]["data_offsets"]
        for value in header.values():
            if isinstance(value, dict) and "data_offsets" in value:
                b, e = value["data_offsets"]
                if b >= begin:
                    value["data_offsets"] = [b + 8, e + 8]
        body = body[:begin] + b"\0" * 8 + body[begin:]
    elif cmd == "rename":
        header[rest[0]] = header.pop(name)
    elif cmd == "reshape":
        shape = header[name]["shape"]
        count = 1
        for d in shape:
            count *= d
        header[name]["shape"] = [count]
    elif cmd == "int":
        header[name]["dtype"] = "I32"
    else:
        sys.exit(f"unknown command {cmd}")
    save(dst, header, body)


if __name__ == "__main__":
    main()
