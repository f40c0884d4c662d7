#!/usr/bin/env python3
"""Regenerates the reference PTX the emulator's tests run (test/Emu/Inputs/
reference/): Triton kernels compiled for sm_90a (GPUTarget("cuda", 90,
64); no GPU needed) and, with nvcc, CUTLASS 3.x sm90 GEMMs. Each kernel's
launch facts (shared memory, warps, tensor descriptors) go into
kernels.json beside the PTX. Run by scripts/gen-reference-ptx.sh, which
makes a virtual environment with triton and nvidia-cutlass.

  generate.py OUT_DIR            every kernel (Triton's and, with nvcc, CUTLASS's)
  generate.py --more OUT_DIR     only the Triton kernels beyond GEMMs (and, with
                                 nvcc, its intrinsics kernel), merged into
                                 OUT_DIR/kernels.json
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triton_kernels as tk  # noqa: E402

TARGET = GPUTarget("cuda", 90, 64)


def compile_triton(out, name, fn, signature, constexprs, num_warps, num_stages):
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    k = triton.compile(src, target=TARGET,
                       options={"num_warps": num_warps, "num_stages": num_stages})
    with open(os.path.join(out, name + ".ptx"), "w") as f:
        f.write(k.asm["ptx"])
    meta = {"kernel": k.metadata.name, "shared": k.metadata.shared,
            "threads": 32 * k.metadata.num_warps, "compiler": "triton " + triton.__version__,
            "constexprs": constexprs}
    descs = getattr(k.metadata, "tensordesc_meta", None)
    if descs:
        meta["tensor_descriptors"] = [{"block": d["block_size"], "swizzle": d["swizzle"]}
                                      for d in descs]
    return meta


def compile_nvcc_intrinsics(out):
    """nvcc_intrinsics.cu through nvcc: CUDA intrinsics whose PTX uses the
    instructions beyond plain arithmetic (no CUTLASS needed)."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    here = os.path.dirname(os.path.abspath(__file__))
    ptx = os.path.join(out, "nvcc_intrinsics.ptx")
    subprocess.run([nvcc, "-arch=sm_90a", "--ptx", os.path.join(here, "nvcc_intrinsics.cu"),
                    "-o", ptx], check=True)
    version = subprocess.run([nvcc, "--version"], check=True, capture_output=True,
                             text=True).stdout.strip().splitlines()[-1]
    return {"nvcc_intrinsics": {"kernel": "intrinsics", "ptx": "nvcc_intrinsics.ptx",
                                "shared": 0, "threads": 32, "compiler": version}}


def compile_cutlass(out):
    """cutlass_gemm.cu through nvcc: its PTX, and the host program's
    description of each kernel's Params (with relocations)."""
    import cutlass_library
    source = os.path.join(os.path.dirname(cutlass_library.__file__), "source")
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    here = os.path.dirname(os.path.abspath(__file__))
    flags = ["-std=c++17", "-arch=sm_90a", "--expt-relaxed-constexpr",
             "-DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL=1",
             "-I" + os.path.join(source, "include"),
             "-I" + os.path.join(source, "tools", "util", "include")]
    cu = os.path.join(here, "cutlass_gemm.cu")
    ptx = os.path.join(out, "cutlass_gemm.ptx")
    subprocess.run([nvcc] + flags + ["--ptx", cu, "-o", ptx], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "describe")
        subprocess.run([nvcc] + flags + [cu, "-o", exe], check=True)
        described = json.loads(subprocess.run([exe], check=True, capture_output=True,
                                              text=True).stdout)
    with open(ptx) as f:
        entries = re.findall(r"\.entry\s+(\S+)\(", f.read())
    for name, meta in described.items():
        schedule = "Cooperative" if "cooperative" in name else "Pingpong"
        meta["kernel"] = next(e for e in entries if schedule in e)
        meta["ptx"] = "cutlass_gemm.ptx"
    return described


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    kernels = {}
    ptr = {"bf16": "*bf16", "fp8": "*fp8e4nv"}
    i32 = "i32"
    for dtype, warps in (("bf16", 8), ("fp8", 4)):
        sig = {"a_ptr": ptr[dtype], "b_ptr": ptr[dtype], "c_ptr": "*bf16", "M": i32, "N": i32,
               "K": i32, "stride_am": i32, "stride_bk": i32, "stride_cm": i32}
        kernels["triton_matmul_" + dtype] = compile_triton(
            out, "triton_matmul_" + dtype, tk.matmul, sig,
            {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64 if dtype == "bf16" else 128},
            warps, 3)
    kernels["triton_matmul_tn"] = compile_triton(
        out, "triton_matmul_tn", tk.matmul_tn,
        {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "M": i32, "N": i32, "K": i32,
         "stride_ak": i32, "stride_bk": i32, "stride_cm": i32},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, 8, 3)
    desc = "tensordesc<bf16[128, 64]>"
    kernels["triton_matmul_tma"] = compile_triton(
        out, "triton_matmul_tma", tk.matmul_tma,
        {"a_desc": desc, "b_desc": desc, "c_desc": "tensordesc<bf16[128, 128]>",
         "M": i32, "N": i32, "K": i32},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_SMS": 4}, 8, 3)
    kernels["triton_fused_moe"] = compile_triton(
        out, "triton_fused_moe", tk.fused_moe,
        {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "topk_w_ptr": "*fp32",
         "sorted_ids_ptr": "*i32", "expert_ids_ptr": "*i32", "num_valid": i32, "N": i32,
         "K": i32},
        {"TOP_K": 2, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, 4, 3)
    kernels.update(compile_more(out))
    kernels.update(compile_nvcc_intrinsics(out))
    kernels.update(compile_cutlass(out))
    write_kernels(out, kernels)
    print("generate: %d kernels in %s" % (len(kernels), out))


def compile_more(out):
    """Softmax, layernorm, argmax, top-k (a sort), a scan, flash attention,
    a matmul on small tiles (mma.sync) and an int8 matmul (integer
    wgmma)."""
    kernels = {}
    row = {"x_ptr": "*fp32", "N": "i32", "stride": "i32"}
    kernels["triton_softmax"] = compile_triton(
        out, "triton_softmax", tk.softmax, dict(row, y_ptr="*fp32"),
        {"BLOCK_N": 1024}, 4, 1)
    kernels["triton_layernorm"] = compile_triton(
        out, "triton_layernorm", tk.layernorm,
        {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32",
         "N": "i32", "stride": "i32", "eps": "fp32"}, {"BLOCK_N": 512}, 4, 1)
    kernels["triton_argmax"] = compile_triton(
        out, "triton_argmax", tk.argmax, dict(row, out_ptr="*i32"), {"BLOCK_N": 256}, 4, 1)
    kernels["triton_topk"] = compile_triton(
        out, "triton_topk", tk.topk, dict(row, out_ptr="*fp32"), {"BLOCK_N": 256, "K": 8}, 4, 1)
    kernels["triton_cumsum"] = compile_triton(
        out, "triton_cumsum", tk.cumsum, dict(row, y_ptr="*fp32"), {"BLOCK_N": 512}, 4, 1)
    kernels["triton_flash_attention"] = compile_triton(
        out, "triton_flash_attention", tk.flash_attention,
        {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*fp32", "S": "i32",
         "scale": "fp32"}, {"BLOCK_M": 64, "BLOCK_N": 64, "D": 64}, 4, 2)
    sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "M": "i32", "N": "i32",
           "K": "i32", "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32"}
    kernels["triton_matmul_small"] = compile_triton(
        out, "triton_matmul_small", tk.matmul, sig,
        {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32}, 1, 2)
    sig8 = dict(sig, a_ptr="*i8", b_ptr="*i8", c_ptr="*i32")
    kernels["triton_matmul_int8"] = compile_triton(
        out, "triton_matmul_int8", tk.matmul_int8, sig8,
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, 4, 2)
    return kernels


def write_kernels(out, kernels):
    with open(os.path.join(out, "kernels.json"), "w") as f:
        json.dump(kernels, f, indent=1, sort_keys=True)
        f.write("\n")


def main_more():
    """--more OUT_DIR: only the kernels of compile_more, merged into the
    kernels.json there (no nvcc or CUTLASS needed)."""
    out = sys.argv[2]
    with open(os.path.join(out, "kernels.json")) as f:
        kernels = json.load(f)
    kernels.update(compile_more(out))
    if shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"):
        kernels.update(compile_nvcc_intrinsics(out))
    write_kernels(out, kernels)
    print("generate: %d kernels in %s" % (len(kernels), out))


if __name__ == "__main__":
    main_more() if sys.argv[1] == "--more" else main()
