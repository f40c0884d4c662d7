#!/usr/bin/env python3
"""Prints the PTX of every gpu.binary object (format=isa) of an MLIR file.

MLIR prints the assembly as a string attribute with \\XX hex escapes; this
undoes them so FileCheck and ptxas can read the PTX.
"""
import re
import sys


def main():
    text = open(sys.argv[1]).read()
    found = re.findall(r'assembly = "((?:[^"\\]|\\.)*)"', text)
    if not found:
        sys.exit("gpu_binary.py: no 'assembly' string (format=isa) in "
                 + sys.argv[1])
    for asm in found:
        sys.stdout.write(re.sub(r'\\([0-9A-Fa-f]{2})',
                                lambda m: chr(int(m.group(1), 16)), asm))


if __name__ == "__main__":
    main()
