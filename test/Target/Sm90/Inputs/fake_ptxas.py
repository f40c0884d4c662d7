#!/usr/bin/env python3
"""A ptxas stand-in for testing how moe-compile reads ptxas: it runs the
real ptxas (the first on PATH) and then alters what that reported, by
FAKE_PTXAS:

  serialize:<kernel>   adds ptxas's C7514 note (wgmma serialized) for it
  registers:<kernel>   says ptxas gave the kernel 64 registers
  no-split             refuses --split-compile, as a ptxas before 12.1
"""
import os
import re
import shutil
import subprocess
import sys

mode, _, kernel = os.environ.get("FAKE_PTXAS", "").partition(":")
args = sys.argv[1:]
if mode == "no-split" and "--split-compile" in args:
    sys.stderr.write("ptxas fatal   : Unknown option 'split-compile'\n")
    sys.exit(1)
here = os.path.dirname(os.path.abspath(sys.argv[0]))
path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                       if os.path.abspath(p) != here)
real = shutil.which("ptxas", path=path)
run = subprocess.run([real] + args, capture_output=True, text=True)
log = run.stdout + run.stderr
if mode == "serialize":
    log = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async "
           "instructions are serialized due to non wgmma instructions reading "
           "accumulator registers of  a wgmma between start and end of the "
           "pipeline stage in the function '%s'\n" % kernel) + log
elif mode == "registers":
    out, current = [], None
    for line in log.splitlines(keepends=True):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
        if current == kernel:
            line = re.sub(r"Used \d+ registers", "Used 64 registers", line)
        out.append(line)
    log = "".join(out)
sys.stderr.write(log)
sys.exit(run.returncode)
