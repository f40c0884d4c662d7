#!/usr/bin/env python3
"""Damages moe-compiler bundles in controlled ways for the loader tests.

Implements the bundle layout from its documentation (runtime Bundle.h), not
from the runtime's code:
  bundle_tool.py flip IN OUT OFFSET         flip one bit at OFFSET (or -N from the end)
  bundle_tool.py truncate IN OUT SIZE       keep the first SIZE bytes
  bundle_tool.py version IN OUT V           set the format version, fix the checksum
  bundle_tool.py manifest IN OUT KEY JSON   set a manifest field, fix the checksum
  bundle_tool.py gpu-step IN OUT I KEY JSON set field KEY of gpu step I, fix the checksum
  bundle_tool.py gpu IN OUT KEY JSON        set field KEY of the gpu program, fix the checksum
  bundle_tool.py magic IN OUT               overwrite the magic
  bundle_tool.py flags IN OUT F             set the header's flags word, fix the checksum
  bundle_tool.py blob IN OUT I              write blob I (a host level's shared object) to OUT
  bundle_tool.py edit IN OUT PYTHON         run PYTHON on the manifest `m`, fix the checksum
  bundle_tool.py last-byte IN OUT BYTE      set the last blob's last byte, fix the checksum
"""
import json
import struct
import sys


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def reseal(body):
    return body + struct.pack("<Q", fnv1a64(body))


def manifest_span(data):
    """(start, size) of the manifest in a bundle's bytes."""
    manifest_size, blob_count = struct.unpack("<QQ", data[16:32])
    return 32 + 8 * blob_count, manifest_size


def read_manifest(path):
    """The manifest of the bundle at `path`, parsed."""
    data = open(path, "rb").read()
    start, size = manifest_span(data)
    return json.loads(data[start : start + size])


def main():
    cmd, src, dst, *rest = sys.argv[1:]
    data = bytearray(open(src, "rb").read())
    if cmd == "flip":
        offset = int(rest[0])
        data[offset] ^= 0x10
    elif cmd == "truncate":
        data = data[: int(rest[0])]
    elif cmd == "magic":
        data[0:8] = b"NOTABNDL"
    elif cmd == "version":
        body = data[:-8]
        body[8:12] = struct.pack("<I", int(rest[0]))
        data = reseal(bytes(body))
    elif cmd == "flags":
        body = data[:-8]
        body[12:16] = struct.pack("<I", int(rest[0], 0))
        data = reseal(bytes(body))
    elif cmd == "last-byte":
        # The blobs end the body, right before the checksum.
        body = bytearray(data[:-8])
        body[-1] = int(rest[0], 0)
        data = reseal(bytes(body))
    elif cmd == "blob":
        # Writes blob I (the blobs follow the manifest, sized by the table).
        manifest_size, blob_count = struct.unpack("<QQ", data[16:32])
        sizes = struct.unpack("<%dQ" % blob_count, data[32:32 + 8 * blob_count])
        offset = 32 + 8 * blob_count + manifest_size
        index = int(rest[0])
        offset += sum(sizes[:index])
        open(dst, "wb").write(bytes(data[offset:offset + sizes[index]]))
        return
    elif cmd == "dump":
        sys.stdout.write(json.dumps(read_manifest(src), indent=1) + "\n")
        return
    elif cmd in ("manifest", "gpu-step", "gpu", "edit"):
        start, manifest_size = manifest_span(data)
        manifest = json.loads(data[start : start + manifest_size])
        if cmd == "manifest":
            key, value = rest
            manifest[key] = json.loads(value)
        elif cmd == "edit":
            exec(rest[0], {"m": manifest})
        elif cmd == "gpu":
            key, value = rest
            manifest["gpu"][key] = json.loads(value)
        else:
            index, key, value = rest
            manifest["gpu"]["steps"][int(index)][key] = json.loads(value)
        text = json.dumps(manifest).encode()
        body = bytearray(data[:-8])
        body[16:24] = struct.pack("<Q", len(text))
        body = body[:start] + text + body[start + manifest_size :]
        data = reseal(bytes(body))
    else:
        sys.exit(f"unknown command {cmd}")
    open(dst, "wb").write(bytes(data))


if __name__ == "__main__":
    main()
