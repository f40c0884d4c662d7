// RUN: moe-opt %s --moe-sm90-pipeline -o %t.mlir
// RUN: %python %S/Inputs/gpu_binary.py %t.mlir > %t.ptx
// RUN: FileCheck %s < %t.ptx
// The persistent loop carries its tile ordinal: no 64-bit division or
// remainder (ptxas would call a helper for them) is left in the kernels.
// RUN: not grep -E '(div|rem)\.[us]64' %t.ptx

// The three grouped GEMMs of a DeepSeek-V3 layer (gate/up with SwiGLU,
// down with the routing weight, the shared expert as one group) through the
// whole sm_90a pipeline to PTX.

// CHECK: .target sm_90a
// CHECK: .extern .shared .align 1024 .b8 moegpu_smem[];

// CHECK-LABEL: .entry up(
// CHECK: .maxntid 384, 1, 1
// One CTA per SM: ptxas then gives the kernel the 168 registers per thread
// that the setmaxnreg plan (40 + 2 x 232, x 128 threads) hands out.
// CHECK-NEXT: .minnctapersm 1
// CHECK: mbarrier.init.shared.b64
// CHECK: setmaxnreg.dec.sync.aligned.u32 40
// CHECK: %nctaid.x
// CHECK: mbarrier.try_wait.parity
// CHECK: mbarrier.arrive.expect_tx
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK: setmaxnreg.inc.sync.aligned.u32 232
// CHECK: wgmma.fence.sync.aligned
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16
// CHECK: wgmma.commit_group.sync.aligned
// CHECK: wgmma.wait_group.sync.aligned 0
// CHECK: ex2.approx.ftz.f32
// The epilogue converts a thread's column pair at once into the staging
// boxes behind the pipeline, and one thread per warpgroup stores each box
// by TMA.
// CHECK: cvt.rn.bf16x2.f32
// CHECK: st.shared.b32
// CHECK: fence.proxy.async.shared::cta
// CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// CHECK: cp.async.bulk.commit_group

// CHECK-LABEL: .entry down(
// CHECK: setmaxnreg.dec.sync.aligned.u32 40
// CHECK: cp.async.bulk.tensor.2d
// CHECK: setmaxnreg.inc.sync.aligned.u32 232
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16

// CHECK-LABEL: .entry shared(
// CHECK: cp.async.bulk.tensor.2d
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16

module attributes {gpu.container_module, moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>} {
  gpu.module @kernels {
    gpu.func @up(%a: memref<?x7168xbf16>, %b: memref<256x4096x7168xbf16>, %o: memref<257xi32>, %c: memref<?x2048xbf16>) kernel {
      moegpu.grouped_gemm %a, %b, %o, %c {epilogue = #moegpu.epilogue<swiglu>} : memref<?x7168xbf16>, memref<256x4096x7168xbf16>, memref<257xi32>, memref<?x2048xbf16>
      gpu.return
    }
    gpu.func @down(%a: memref<?x2048xbf16>, %b: memref<256x7168x2048xbf16>, %o: memref<257xi32>, %c: memref<?x7168xbf16>, %s: memref<?xf32>) kernel {
      moegpu.grouped_gemm %a, %b, %o, %c scale %s {epilogue = #moegpu.epilogue<row_scale>} : memref<?x2048xbf16>, memref<256x7168x2048xbf16>, memref<257xi32>, memref<?x7168xbf16>, memref<?xf32>
      gpu.return
    }
    gpu.func @shared(%a: memref<?x7168xbf16>, %b: memref<1x256x7168xbf16>, %o: memref<2xi32>, %c: memref<?x256xbf16>) kernel {
      moegpu.grouped_gemm %a, %b, %o, %c : memref<?x7168xbf16>, memref<1x256x7168xbf16>, memref<2xi32>, memref<?x256xbf16>
      gpu.return
    }
  }
}
