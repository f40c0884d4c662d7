// RUN: moe-opt %s --moegpu-emulate-on-host --split-input-file --verify-diagnostics | FileCheck %s

// A kernel whose threads share nothing becomes a loop over (block, thread);
// the SFU intrinsics become math ops. A kernel with a barrier is listed.
// CHECK: module attributes {moegpu.not_emulated = ["with_barrier"]}
// CHECK-NOT: gpu.module
// CHECK-LABEL: func.func @emu_scale(
// CHECK-SAME: %[[A:.*]]: memref<?xf32>, %[[GRID:.*]]: index, %[[BLOCK:.*]]: index)
// CHECK-SAME: llvm.emit_c_interface
// CHECK: scf.for %[[BX:.*]] = %{{.*}} to %[[GRID]]
// CHECK: scf.for %[[TX:.*]] = %{{.*}} to %[[BLOCK]]
// CHECK: %[[I0:.*]] = arith.muli %[[BX]], %[[BLOCK]]
// CHECK: %[[I:.*]] = arith.addi %[[I0]], %[[TX]]
// CHECK: math.exp2
// CHECK: math.sqrt
// CHECK: memref.store {{.*}}, %[[A]][%[[I]]]
// CHECK-NOT: func.func @emu_with_barrier
module attributes {gpu.container_module} {
  gpu.module @moe_kernels {
    gpu.func @scale(%a: memref<?xf32>) kernel {
      %b = gpu.block_id x
      %n = gpu.block_dim x
      %t = gpu.thread_id x
      %i0 = arith.muli %b, %n : index
      %i = arith.addi %i0, %t : index
      %v = memref.load %a[%i] : memref<?xf32>
      %e = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%v) : (f32) -> f32
      %s = llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"(%e) : (f32) -> f32
      memref.store %s, %a[%i] : memref<?xf32>
      gpu.return
    }
    gpu.func @with_barrier(%a: memref<?xf32>) kernel {
      gpu.barrier
      gpu.return
    }
  }
}

// -----

// expected-error @+1 {{moegpu-emulate-on-host expects the gpu.module @moe_kernels of convert-moe-to-moegpu}}
module {
}
