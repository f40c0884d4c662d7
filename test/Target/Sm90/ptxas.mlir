// REQUIRES: ptxas
// RUN: moe-opt %S/grouped-gemm.mlir --moe-sm90-pipeline -o %t.mlir
// RUN: %python %S/Inputs/gpu_binary.py %t.mlir > %t.ptx
// RUN: ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck %s
// RUN: moe-opt %S/grouped-gemm.mlir --moe-sm90-pipeline=format=bin | FileCheck %s --check-prefix=BIN

// ptxas accepts every kernel for sm_90a without spilling.
// CHECK-NOT: {{[1-9][0-9]*}} bytes spill
// CHECK: Compiling entry function '{{up|down|shared}}' for 'sm_90a'
// CHECK: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// CHECK-NOT: {{[1-9][0-9]*}} bytes spill
// CHECK: Compiling entry function '{{up|down|shared}}' for 'sm_90a'
// CHECK: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// CHECK-NOT: {{[1-9][0-9]*}} bytes spill
// CHECK: Compiling entry function '{{up|down|shared}}' for 'sm_90a'
// CHECK: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// CHECK-NOT: {{[1-9][0-9]*}} bytes spill

// format=bin runs the toolkit's ptxas itself and embeds the cubin.
// BIN: gpu.binary @kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">, properties = {{.*}}, bin = "\7FELF
