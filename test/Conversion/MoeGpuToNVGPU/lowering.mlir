// RUN: moe-opt %s -split-input-file -moegpu-warp-specialize -convert-moegpu-to-nvgpu -verify-diagnostics | FileCheck %s

// The warp-specialized down projection of DeepSeek-V3 (routing weight in
// the epilogue), as moegpu-warp-specialize leaves it.

// CHECK-LABEL: gpu.module @kernels
// CHECK: memref.global @moegpu_smem : memref<0xi8, #gpu.address_space<workgroup>> {alignment = 1024 : i64}
// CHECK: gpu.func @down(%[[A:.*]]: memref<?x2048xbf16>, %[[B:.*]]: memref<256x7168x2048xbf16>, %[[O:.*]]: memref<257xi32>, %[[C:.*]]: memref<?x7168xbf16>, %[[S:.*]]: memref<?xf32>, %[[AMAP:.*]]: !llvm.ptr, %[[BMAP:.*]]: !llvm.ptr) kernel
// CHECK-SAME: moegpu.kernel_launch = #moegpu.kernel_launch<grid = 112, block = 384, smem = 229376, tile = <m = 128, n = 128, k = 64, stages = 7>>
// CHECK-SAME: moegpu.tensor_maps = [#moegpu.tensor_map<arg = 5, source = 0, view = [-1, 2048], box = [128, 64], swizzle = 128>, #moegpu.tensor_map<arg = 6, source = 1, view = [1835008, 2048], box = [128, 64], swizzle = 128>]
// CHECK-SAME: nvvm.maxntid = array<i32: 384, 1, 1>
// Programmatic dependent launch: the next kernel may be scheduled now;
// this one waits for the previous before it touches memory.
// CHECK: nvvm.griddepcontrol launch_dependents
// CHECK-NEXT: nvvm.griddepcontrol wait
// CHECK-DAG: %[[TMB:.*]] = builtin.unrealized_conversion_cast %[[BMAP]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, #gpu.address_space<workgroup>>, swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>
// CHECK-DAG: %[[TMA:.*]] = builtin.unrealized_conversion_cast %[[AMAP]] : !llvm.ptr to !nvgpu.tensormap.descriptor
// Pipeline: full and empty barriers, initialized by thread 0.
// CHECK: %[[FULL:.*]] = nvgpu.mbarrier.create -> <memorySpace = #gpu.address_space<workgroup>, num_barriers = 7>
// CHECK: %[[EMPTY:.*]] = nvgpu.mbarrier.create -> <memorySpace = #gpu.address_space<workgroup>, num_barriers = 7>
// CHECK: scf.if
// CHECK-COUNT-14: nvgpu.mbarrier.init
// CHECK: nvvm.fence.mbarrier.init
// CHECK: gpu.barrier
// Roles: the last warpgroup produces.
// CHECK: %[[WG:.*]] = arith.divui %{{.*}}, %c128
// CHECK: %[[ISPROD:.*]] = arith.cmpi eq, %[[WG]], %c2
// CHECK: scf.if %[[ISPROD]] {
// CHECK:   nvvm.setmaxregister decrease 40
// Persistent loop: from blockIdx.x to the tile count, by gridDim.x.
// CHECK:   %[[BID:.*]] = gpu.block_id x
// CHECK:   %[[GRID:.*]] = gpu.grid_dim x
// CHECK:   memref.load %[[O]][%c256]
// CHECK:   scf.for %{{.*}} = %[[BID]] to %{{.*}} step %[[GRID]]
// CHECK:     nvgpu.mbarrier.try_wait.parity %[[EMPTY]]
// CHECK:     nvgpu.mbarrier.arrive.expect_tx %[[FULL]][%{{.*}}], %c32768
// CHECK:     nvgpu.tma.async.load %[[TMA]][%{{.*}}, %{{.*}}], %[[FULL]][%{{.*}}] to %{{.*}} : {{.*}} -> memref<128x64xbf16, #gpu.address_space<workgroup>>
// CHECK:     nvgpu.tma.async.load %[[TMB]][%{{.*}}, %{{.*}}], %[[FULL]][%{{.*}}] to %{{.*}} : {{.*}} -> memref<128x64xbf16, #gpu.address_space<workgroup>>
// CHECK: } else {
// CHECK:   nvvm.setmaxregister increase 232
// CHECK:   scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// The first k block: its first wgmma's scale-d is 0 (the accumulator is
// not read), the rest accumulate.
// CHECK:     nvvm.wgmma.fence.aligned
// CHECK:     nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>]
// CHECK-COUNT-3: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// CHECK:     scf.for {{.*}} -> (vector<64xf32>)
// CHECK:       nvgpu.mbarrier.try_wait.parity %[[FULL]]
// CHECK:       nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK:       nvvm.wgmma.commit.group.sync.aligned
// CHECK:       nvvm.wgmma.wait.group.sync.aligned 1
// The previous k-block's slot goes back (one thread per warpgroup).
// CHECK:       scf.if
// CHECK:         nvgpu.mbarrier.arrive %[[EMPTY]]
// After the k loop: the last batch drained, its slot given back.
// CHECK:     nvvm.wgmma.wait.group.sync.aligned 0
// CHECK:     nvgpu.mbarrier.arrive %[[EMPTY]]
// Epilogue: routing weight per row, a thread's two adjacent columns in
// one bf16 pair store.
// CHECK:     memref.load %[[S]]
// CHECK:     arith.mulf
// CHECK:     arith.truncf %{{.*}} : f32 to bf16
// CHECK:     vector.store %{{.*}}, %[[C]][%{{.*}}, %{{.*}}] {alignment = 4 : i64} : memref<?x7168xbf16>, vector<2xbf16>
// CHECK-NOT: moegpu.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @down(%a: memref<?x2048xbf16>, %b: memref<256x7168x2048xbf16>, %o: memref<257xi32>, %c: memref<?x7168xbf16>, %s: memref<?xf32>) kernel {
      moegpu.grouped_gemm %a, %b, %o, %c scale %s {epilogue = #moegpu.epilogue<row_scale>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>, sm_range = #moegpu.sm_range<first = 0, count = 112>} : memref<?x2048xbf16>, memref<256x7168x2048xbf16>, memref<257xi32>, memref<?x7168xbf16>, memref<?xf32>
      gpu.return
    }
  }
}

// -----

// SwiGLU: silu(gate) * up with the SFU's ex2, stored at col / 2.
// CHECK-LABEL: gpu.func @up
// CHECK: arith.divui %{{.*}}, %c2
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: arith.divf
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @up(%a: memref<?x7168xbf16>, %b: memref<256x4096x7168xbf16>, %o: memref<257xi32>, %c: memref<?x2048xbf16>) kernel {
      moegpu.grouped_gemm %a, %b, %o, %c {epilogue = #moegpu.epilogue<swiglu>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>, sm_range = #moegpu.sm_range<first = 0, count = 112>} : memref<?x7168xbf16>, memref<256x4096x7168xbf16>, memref<257xi32>, memref<?x2048xbf16>
      gpu.return
    }
  }
}

// -----

// A weight gradient (tn): both operands M- or N-major, loaded in boxes of
// 64 rows of K by 64 columns (two per 128-wide side) and read by wgmma
// transposed (A column, B row) through descriptors whose leading offset
// is the next box (8192 bytes = 512 units) and stride 8 rows of K (1024 =
// 64 units); each k step of 16 moves 16 rows of 128 bytes (128 units).
// The epilogue goes through shared memory: per warpgroup, boxes of 64 rows
// x 32 f32 columns (one 128-byte swizzle row) to [group * 384 + row, col]
// by TMA stores, two staging buffers alternating behind the pipeline's 4
// stages (131072 bytes) while the stores drain.
// CHECK-LABEL: gpu.func @dw
// CHECK-SAME: moegpu.kernel_launch = #moegpu.kernel_launch<grid = 16, block = 384, smem = 163840, tile = <m = 128, n = 128, k = 64, stages = 4>>
// CHECK-SAME: moegpu.tensor_maps = [#moegpu.tensor_map<arg = 4, source = 0, view = [-1, 384], box = [64, 64], swizzle = 128>, #moegpu.tensor_map<arg = 5, source = 1, view = [-1, 256], box = [64, 64], swizzle = 128>, #moegpu.tensor_map<arg = 6, source = 3, view = [3072, 256], box = [64, 32], swizzle = 128>]
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}, %c32768
// CHECK-COUNT-4: nvgpu.tma.async.load {{.*}} -> memref<64x64xbf16, #gpu.address_space<workgroup>>
// CHECK: arith.constant 4611686293338849280 : i64
// CHECK: nvvm.wgmma.mma_async {{.*}} A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK: arith.constant 128 : i64
// CHECK-COUNT-3: nvvm.wgmma.mma_async {{.*}} A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %{{.*}}
// CHECK: vector.store %{{.*}}, %{{.*}}[%{{.*}}] {alignment = 8 : i64} : memref<2048xf32, #gpu.address_space<workgroup>>, vector<2xf32>
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %{{.*}}
// CHECK: nvgpu.tma.async.store %{{.*}} to %{{.*}}[%{{.*}}, %{{.*}}] : memref<64x32xf32, #gpu.address_space<workgroup>>
// CHECK: nvvm.cp.async.bulk.commit.group
// CHECK: nvvm.cp.async.bulk.wait_group 1 {read}
// The consumers leave once their last stores are complete.
// CHECK: nvvm.cp.async.bulk.wait_group 0
// CHECK-NOT: {read}
// CHECK: gpu.return
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @dw(%a: memref<?x384xbf16>, %b: memref<?x256xbf16>, %o: memref<9xi32>, %c: memref<8x384x256xf32>) kernel {
      moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<tn>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 16>} : memref<?x384xbf16>, memref<?x256xbf16>, memref<9xi32>, memref<8x384x256xf32>
      gpu.return
    }
  }
}

// -----

// An input gradient (nn): A K-major as in the forward pass (one box of 128
// rows), B N-major from the weights as stored, viewed [E * K, N].
// CHECK-LABEL: gpu.func @dx
// CHECK-SAME: moegpu.tensor_maps = [#moegpu.tensor_map<arg = 4, source = 0, view = [-1, 512], box = [128, 64], swizzle = 128>, #moegpu.tensor_map<arg = 5, source = 1, view = [4096, 256], box = [64, 64], swizzle = 128>, #moegpu.tensor_map<arg = 6, source = 3, view = [-1, 256], box = [64, 32], swizzle = 128>]
// CHECK: nvgpu.tma.async.load {{.*}} -> memref<128x64xbf16, #gpu.address_space<workgroup>>
// CHECK-COUNT-2: nvgpu.tma.async.load {{.*}} -> memref<64x64xbf16, #gpu.address_space<workgroup>>
// CHECK: nvvm.wgmma.mma_async {{.*}} A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @dx(%a: memref<?x512xbf16>, %b: memref<8x512x256xbf16>, %o: memref<9xi32>, %c: memref<?x256xf32>) kernel {
      moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<nn>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 16>} : memref<?x512xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xf32>
      gpu.return
    }
  }
}

// -----

// An N-major side must be whole boxes of 64.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @narrow(%a: memref<?x512xbf16>, %b: memref<8x512x256xbf16>, %o: memref<9xi32>, %c: memref<?x256xf32>) kernel {
      // expected-error @+1 {{'moegpu.produce' op needs the tile's M-major and N-major sides to be multiples of 64, got 128x32}}
      moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<nn>, tile = #moegpu.tile<m = 128, n = 32, k = 64, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 16>} : memref<?x512xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xf32>
      gpu.return
    }
  }
}

// -----

// A TMA map takes the buffer's size for one dimension only.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @both(%a: memref<?x?xbf16>, %b: memref<4x64x64xbf16>) kernel {
      %p = moegpu.pipeline.create : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>
      %i = arith.constant 0 : index
      // expected-error @+1 {{'moegpu.produce' op needs a TMA source with at most one dynamic dimension, got 'memref<?x?xbf16>'}}
      moegpu.produce %p[%i], %a[%i, %i], %b[%i, %i] : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>, memref<?x?xbf16>, memref<4x64x64xbf16>
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @view(%a: memref<?x64xbf16>, %b: memref<4x64x64xbf16>, %o: memref<5xi32>, %c: memref<?x64xbf16>) kernel {
      %sub = memref.subview %a[0, 0] [128, 64] [1, 1] : memref<?x64xbf16> to memref<128x64xbf16, strided<[64, 1]>>
      %cast = memref.cast %sub : memref<128x64xbf16, strided<[64, 1]>> to memref<?x64xbf16, strided<[64, 1]>>
      %p = moegpu.pipeline.create : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>
      %i = arith.constant 0 : index
      // expected-error @+1 {{'moegpu.produce' op needs its TMA source to be an argument of kernel @view (the runtime encodes its tensor map)}}
      moegpu.produce %p[%i], %cast[%i, %i], %b[%i, %i] : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>, memref<?x64xbf16, strided<[64, 1]>>, memref<4x64x64xbf16>
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    // expected-error @+1 {{'gpu.func' op holds moegpu ops but is not a kernel}}
    gpu.func @helper() {
      %p = moegpu.pipeline.create : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @two() kernel {
      %p = moegpu.pipeline.create : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>
      // expected-error @+1 {{'moegpu.pipeline.create' op is the second pipeline of kernel @two; a kernel holds one pipeline}}
      %q = moegpu.pipeline.create : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @passed(%p: !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>, %acc: vector<32xf32>, %i: index) kernel {
      // expected-error @+1 {{'moegpu.mma' op uses a pipeline not created in its kernel}}
      %r = moegpu.mma %p[%i], %acc, warpgroup %i : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>, vector<32xf32>
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @passed(%p: !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>, %i: index) kernel {
      // expected-error @+1 {{'moegpu.release' op uses a pipeline not created in its kernel}}
      moegpu.release %p[%i] drain : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 2>, bf16>
      gpu.return
    }
  }
}

// -----

// FP8 (the down projection of an FP8 DeepSeek-V3 layer): one-byte boxes of
// 128 columns, expect-tx of a stage's 32 KiB as in bf16, four e4m3 wgmma of
// k = 32 per k block from zero, waited for, the slot released, and the
// partial sums scaled into the accumulator by one FMA each.
// CHECK-LABEL: gpu.func @fp8_down
// CHECK-SAME: tile = <m = 128, n = 128, k = 128, stages = 6>
// CHECK-SAME: #moegpu.tensor_map<arg = 7, source = 0, view = [-1, 2048], box = [128, 128], swizzle = 128>, #moegpu.tensor_map<arg = 8, source = 1, view = [1835008, 2048], box = [128, 128], swizzle = 128>
// CHECK:     nvgpu.mbarrier.arrive.expect_tx %{{.*}}[%{{.*}}], %c32768
// CHECK:     nvgpu.tma.async.load {{.*}} -> memref<128x128xf8E4M3FN, #gpu.address_space<workgroup>>
// CHECK:   nvvm.setmaxregister increase 232
// CHECK:     scf.for {{.*}} -> (vector<64xf32>)
// CHECK:       nvvm.wgmma.fence.aligned
// CHECK:       nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 32>, D[<f32>, <zero>], A[<e4m3>, <one>, <row>], B[<e4m3>, <one>, <col>]
// CHECK-COUNT-3: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 32>, D[<f32>, <one>], A[<e4m3>, <one>, <row>], B[<e4m3>, <one>, <col>]
// CHECK:       nvvm.wgmma.wait.group.sync.aligned 0
// CHECK:       nvgpu.mbarrier.arrive
// CHECK-COUNT-2: memref.load %arg5
// CHECK:       memref.load %arg6
// CHECK:       math.fma {{.*}} : vector<64xf32>
// CHECK-NOT: moegpu.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @fp8_down(%a: memref<?x2048xf8E4M3FN>, %b: memref<256x7168x2048xf8E4M3FN>, %o: memref<257xi32>, %c: memref<?x7168xbf16>, %s: memref<?xf32>, %as: memref<?x16xf32>, %bs: memref<256x56x16xf32>) kernel {
      moegpu.grouped_gemm %a, %b, %o, %c scale %s block_scales(%as, %bs : memref<?x16xf32>, memref<256x56x16xf32>) {epilogue = #moegpu.epilogue<row_scale>, tile = #moegpu.tile<m = 128, n = 128, k = 128, stages = 6>, sm_range = #moegpu.sm_range<first = 0, count = 132>} : memref<?x2048xf8E4M3FN>, memref<256x7168x2048xf8E4M3FN>, memref<257xi32>, memref<?x7168xbf16>, memref<?xf32>
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @wide(%acc: vector<128xf32>, %as: memref<?x2xf32>, %bs: memref<8x2x2xf32>, %i: index) kernel {
      %p = moegpu.pipeline.create : !moegpu.pipeline<#moegpu.tile<m = 64, n = 256, k = 128, stages = 2>, f8E4M3FN>
      // expected-error @+1 {{'moegpu.promote' op needs a tile n that divides 128 (one block of b's scales), got 256}}
      %r = moegpu.promote %acc into %acc scales(%as, %bs)[%i, %i, %i, %i], warpgroup %i, row_end %i : vector<128xf32>, memref<?x2xf32>, memref<8x2x2xf32>
      gpu.return
    }
  }
}

// -----

// Split K (the router): the consumers' loop takes as many slices as the
// grid leaves CTAs per tile (at most 2 here, and K's 9 k blocks in slices
// of ceil(9 / slices)); the grid's first thread stores the count; each
// tile's slice is tile / (M blocks x N blocks), its first k block
// slice x per-slice, its k blocks the rest of K when that is fewer.
// CHECK-LABEL: gpu.func @router
// CHECK: } else {
// CHECK: %[[GRID:.*]] = gpu.grid_dim x
// CHECK: %[[MB:.*]] = arith.ceildivui %{{.*}}, %c128
// CHECK: %[[TILES:.*]] = arith.maxui %c1{{[_0-9]*}}, %{{.*}}
// CHECK: %[[FREE:.*]] = arith.divui %[[GRID]], %[[TILES]]
// CHECK: %[[ATLEAST:.*]] = arith.maxui %[[FREE]], %c1
// CHECK: %[[WANT:.*]] = arith.minui %[[ATLEAST]], %c2
// CHECK: %[[PER0:.*]] = arith.ceildivui %c9{{[_0-9]*}}, %[[WANT]]
// CHECK: %[[SPLITS:.*]] = arith.ceildivui %c9{{[_0-9]*}}, %[[PER0]]
// CHECK: %[[PER:.*]] = arith.ceildivui %c9{{[_0-9]*}}, %[[SPLITS]]
// CHECK: %[[ALL:.*]] = arith.muli %{{.*}}, %[[SPLITS]]
// CHECK: scf.if
// CHECK: %[[N:.*]] = arith.index_cast %[[SPLITS]] : index to i32
// CHECK: memref.store %[[N]], %{{.*}}[%{{.*}}] : memref<1xi32>
// CHECK: scf.for %[[T:.*]] = %{{.*}} to %[[ALL]] step %[[GRID]]
// CHECK: %[[SLICE:.*]] = arith.divui %[[T]], %{{.*}}
// CHECK: %[[KF:.*]] = arith.muli %[[SLICE]], %[[PER]]
// CHECK: %[[LEFT:.*]] = arith.subi %c9{{[_0-9]*}}, %[[KF]]
// CHECK: %[[KB:.*]] = arith.minui %[[PER]], %[[LEFT]]
// CHECK: vector.store %{{.*}}, %{{.*}}[%[[SLICE]], %{{.*}}, %{{.*}}] {{.*}} : memref<2x?x8xf32>, vector<2xf32>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @router(%a: memref<?x576xbf16>, %b: memref<8x576xbf16>, %c: memref<2x?x8xf32>, %n: memref<1xi32>) kernel {
      moegpu.grouped_gemm %a, %b, dense, %c split_k(%n : memref<1xi32>) {tile = #moegpu.tile<m = 128, n = 8, k = 64, stages = 8>, sm_range = #moegpu.sm_range<first = 0, count = 132>} : memref<?x576xbf16>, memref<8x576xbf16>, memref<2x?x8xf32>
      gpu.return
    }
  }
}
