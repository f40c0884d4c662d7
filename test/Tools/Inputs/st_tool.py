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
  st_tool.py dtype IN OUT NAME DTYPE   relabel a tensor as DTYPE (of the
                                       same element size)
  st_tool.py shard IN DIR PREFIX N     a sharded checkpoint in DIR: IN's
                                       tensors named PREFIX + name, dealt
                                       round-robin over N shards, and
                                       DIR/model.safetensors.index.json
  st_tool.py fp8 IN OUT_FP8 OUT_F32 SEED
                                       IN's expert matrices (names with
                                       "experts") as an FP8 checkpoint:
                                       random e4m3 codes (F8_E4M3) with
                                       NAME_scale_inv block scales (128 x
                                       128), and the same values dequantized
                                       to F32 (decoded from the e4m3fn
                                       definition)
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


def e4m3(code):
    """The e4m3fn value of a byte: 1 sign, 4 exponent (bias 7), 3 mantissa
    bits; exponent 0 is subnormal; S.1111.111 is NaN (not drawn here)."""
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 0x7
    if e == 0:
        return sign * m / 8.0 * 2.0 ** -6
    return sign * (1 + m / 8.0) * 2.0 ** (e - 7)


def fp8(src, out_fp8, out_f32, seed):
    import random
    rng = random.Random(seed)
    header, body = load(src)
    tensors = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        begin, end = v["data_offsets"]
        tensors[name] = (v["dtype"], v["shape"], body[begin:end])
    q, f = {}, {}
    for name, (dtype, shape, data) in tensors.items():
        if "experts" not in name or len(shape) != 2:
            q[name] = f[name] = (dtype, shape, data)
            continue
        rows, cols = shape
        br, bc = -(-rows // 128), -(-cols // 128)
        # Exact f32 scales around 1/64, so the values stay near the
        # layer's scale.
        scales = [struct.unpack("<f", struct.pack("<f", rng.uniform(0.5, 2.0) / 64))[0]
                  for _ in range(br * bc)]
        codes = bytes(rng.choice([c for c in range(256) if c & 0x7F != 0x7F])
                      for _ in range(rows * cols))
        values = [e4m3(codes[r * cols + c]) * scales[(r // 128) * bc + c // 128]
                  for r in range(rows) for c in range(cols)]
        q[name] = ("F8_E4M3", shape, codes)
        q[name + "_scale_inv"] = ("F32", [br, bc], struct.pack("<%df" % len(scales), *scales))
        f[name] = ("F32", shape, struct.pack("<%df" % len(values), *values))
    for path, table in ((out_fp8, q), (out_f32, f)):
        h, b = {}, b""
        for name in sorted(table):
            dtype, shape, data = table[name]
            h[name] = {"dtype": dtype, "shape": shape,
                       "data_offsets": [len(b), len(b) + len(data)]}
            b += data
        save(path, h, b)


def main():
    cmd, *args = sys.argv[1:]
    if cmd == "raw":
        out, header, size, *override = args
        text = header.encode()
        n = int(override[0]) if override else len(text)
        open(out, "wb").write(struct.pack("<Q", n) + text + b"\0" * int(size))
        return
    if cmd == "fp8":
        src, out_fp8, out_f32, seed = args
        fp8(src, out_fp8, out_f32, int(seed))
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
    elif cmd == "dtype":
        header[name]["dtype"] = rest[0]
    else:
        sys.exit(f"unknown command {cmd}")
    save(dst, header, body)


if __name__ == "__main__":
    main()
