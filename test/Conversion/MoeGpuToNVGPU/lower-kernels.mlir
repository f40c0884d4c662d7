// RUN: moe-opt %s -moegpu-lower-kernels="max-stages=4 report" -verify-diagnostics | FileCheck %s

// The umbrella pass runs the four steps: a tile (capped at 4 stages), the
// options' 70 compute SMs, warp roles, and the nvgpu/nvvm lowering.
// CHECK-LABEL: gpu.func @down
// CHECK-SAME: moegpu.kernel_launch = #moegpu.kernel_launch<grid = 70, block = 384, smem = 229376, tile = <m = 128, n = 256, k = 64, stages = 4>>
// CHECK: nvvm.setmaxregister decrease 40
// CHECK: nvgpu.tma.async.load
// CHECK: nvvm.setmaxregister increase 232
// CHECK: nvvm.wgmma.mma_async
// CHECK-NOT: moegpu.
module attributes {gpu.container_module, moe.sm_partition = #moe.sm_partition<sms = 78, comm = 8>} {
  gpu.module @kernels {
    gpu.func @down(%a: memref<?x512xbf16>, %b: memref<8x256x512xbf16>, %o: memref<9xi32>, %c: memref<?x256xbf16>) kernel {
      // expected-remark @+1 {{tile 128x256x64, 4 stages, 196608 bytes of shared memory}}
      moegpu.grouped_gemm %a, %b, %o, %c : memref<?x512xbf16>, memref<8x256x512xbf16>, memref<9xi32>, memref<?x256xbf16>
      gpu.return
    }
  }
}
