// RUN: moe-opt %s --convert-moe-to-moegpu="train=true optimizer-state=bf16" | FileCheck %s
// RUN: moe-opt %s --convert-moe-to-moegpu="train=true" | FileCheck %s --check-prefix=F32
// RUN: not moe-opt %s --convert-moe-to-moegpu="train=true optimizer-state=f16" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not moe-opt %s --convert-moe-to-moegpu="optimizer-state=bf16" 2>&1 | FileCheck %s --check-prefix=NOTRAIN

// AdamW's moments in bf16 (moe-compile --optimizer-state=bf16): the
// step's moment buffers and the update's kernels take bf16 memrefs; the
// masters and gradients stay f32.
// CHECK-DAG: moegpu.buffer @arg.router_weight : memref<8x64xf32> dims [] source "arg:router_weight"
// CHECK-DAG: moegpu.buffer @arg.router_weight.m : memref<8x64xbf16> dims [] source "arg:router_weight.m"
// CHECK-DAG: moegpu.buffer @arg.gate_weight.v : memref<8x32x64xbf16> dims [] source "arg:gate_weight.v"
// CHECK-DAG: moegpu.buffer @arg.down_weight.grad : memref<8x64x32xf32> dims [] source "arg:down_weight.grad"
// CHECK-DAG: moegpu.update_check {{.*}} m({{.*}} : memref<8x64xbf16>, memref<8x32x64xbf16>, memref<8x32x64xbf16>, memref<8x64x32xbf16>)
// CHECK-DAG: moegpu.adamw {{.*}} m({{.*}} : memref<8x64xbf16>, memref<8x32x64xbf16>, memref<8x32x64xbf16>, memref<8x64x32xbf16>) v({{.*}} : memref<8x64xbf16>,
// F32: moegpu.buffer @arg.router_weight.m : memref<8x64xf32>

// KIND: error: convert-moe-to-moegpu: unknown optimizer-state 'f16' (expected f32 or bf16)
// NOTRAIN: error: 'moe.layer' op optimizer-state=bf16 is the training step's: add train
func.func @layer(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %wg: tensor<8x32x64xbf16>,
                 %wu: tensor<8x32x64xbf16>, %wd: tensor<8x64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x32x64xbf16>, tensor<8x32x64xbf16>, tensor<8x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
