// RUN: moe-opt %s -split-input-file -verify-diagnostics

// One case per diagnostic of the moe dialect's attributes and verifiers.
// expected-error @+1 {{expected 0 < hidden <= 2147483647, got 0}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 0, experts = 4, top_k = 1, ffn = 4, dtype = f32>}

// -----

// expected-error @+1 {{expected 0 < experts <= 2147483647, got -4}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = -4, top_k = 1, ffn = 4, dtype = f32>}

// -----

// expected-error @+1 {{expected 0 < ffn <= 2147483647, got 4294967296}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, ffn = 4294967296, dtype = f32>}

// -----

// expected-error @+1 {{expected 1 <= top_k <= experts (4), got 5}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 5>}

// -----

// expected-error @+1 {{expected 1 <= top_k <= experts (4), got 0}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 0>}

// -----

// expected-error @+1 {{expected groups to divide experts (4), got 3}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, groups = 3>}

// -----

// expected-error @+1 {{expected 1 <= topk_groups <= groups (2), got 3}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, groups = 2, topk_groups = 3>}

// -----

// expected-error @+1 {{expected top_k <= topk_groups * experts per group (1 * 2 = 2), got 3}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 3, groups = 2, topk_groups = 1>}

// -----

// expected-error @+1 {{expected at least 2 experts per group with group_score = sum_top2, got 1}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, groups = 4, topk_groups = 2, group_score = sum_top2>}

// -----

// expected-error @+1 {{expected a finite routed_scale > 0, got 0}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, routed_scale = 0.0>}

// -----

// expected-error @+1 {{expected a finite routed_scale > 0, got -2}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, routed_scale = -2>}

// -----

// expected-error @+1 {{expected 0 <= shared_experts <= 2147483647, got -1}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_experts = -1>}

// -----

// expected-error @+1 {{expected 0 < shared_ffn <= 2147483647, got 0}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_experts = 1>}

// -----

// expected-error @+1 {{expected shared_experts * shared_ffn <= 2147483647, got 4000000000}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_experts = 2, shared_ffn = 2000000000>}

// -----

// expected-error @+1 {{expected shared_ffn = 0 without shared experts, got 16}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_ffn = 16>}

// -----

// expected-error @+1 {{expected shared_gate = false without shared experts}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_gate = true>}

// -----

// expected-error @+1 {{expected dtype to be f32, bf16 or f16, got 'i8'}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, ffn = 4, dtype = i8>}

// -----

// expected-error @+2 {{expected 'true' or 'false'}}
// expected-error @+1 {{failed to parse Moe_LayerConfigAttr parameter 'score_bias' which is to be a `bool`}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, score_bias = yes>}

// -----

// expected-error @+2 {{expected one of softmax, sigmoid, sparsemixer, got 'relu'}}
// expected-error @+1 {{failed to parse Moe_LayerConfigAttr parameter 'scoring' which is to be a `::mlir::moe::ScoringFunc`}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, scoring = relu>}

// -----

// expected-error @+1 {{expected 0 < sms <= 1024, got 0}}
func.func private @f() attributes {c = #moe.sm_partition<sms = 0, comm = 0>}

// -----

// The one bound on SM counts, as the runtime and moe-compile have it.
// expected-error @+1 {{expected 0 < sms <= 1024, got 4000}}
func.func private @f() attributes {c = #moe.sm_partition<sms = 4000, comm = 20>}

// -----

// expected-error @+1 {{expected 0 <= comm < sms (132), got 132}}
func.func private @f() attributes {c = #moe.sm_partition<sms = 132, comm = 132>}

// -----

// expected-error @+1 {{expected 0 <= comm < sms (132), got -1}}
func.func private @f() attributes {c = #moe.sm_partition<sms = 132, comm = -1>}

// -----

// expected-error @+1 {{expected 'moe.sm_partition' to be a #moe.sm_partition attribute, got 20 : i64}}
func.func private @f() attributes {moe.sm_partition = 20 : i64}

// -----

// expected-error @+1 {{expected 'moe.schedule' to be "dynamic" on an scf.parallel, got "dynamic" on func.func}}
func.func private @f() attributes {moe.schedule = "dynamic"}

// -----

func.func @f(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{expected 'moe.schedule' to be "dynamic" on an scf.parallel, got "guided" on scf.parallel}}
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
  } {moe.schedule = "guided"}
  return
}

// -----

// expected-error @+1 {{expected 'moe.host_read' to be an integer on a bufferization.to_buffer, got 3 : i64 on func.func}}
func.func private @f() attributes {moe.host_read = 3}

// -----

func.func @f(%t: tensor<4xf32>) -> memref<4xf32> {
  // expected-error @+1 {{expected 'moe.host_read' to be an integer on a bufferization.to_buffer, got "x" on bufferization.to_buffer}}
  %m = bufferization.to_buffer %t read_only {moe.host_read = "x"} : tensor<4xf32> to memref<4xf32>
  return %m : memref<4xf32>
}

// -----

// expected-error @+1 {{unknown moe dialect attribute 'moe.partition'}}
func.func private @f() attributes {moe.partition = #moe.sm_partition<sms = 132, comm = 20>}

// -----

func.func @f(%x: tensor<?x16xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected input dim 1 (hidden) to be 8, got 16}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x16xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<3000000000x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<3000000000x8xf32> {
  // expected-error @+1 {{expected at most 2147483647 tokens, got 3000000000}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<3000000000x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<3000000000x8xf32>
  return %y : tensor<3000000000x8xf32>
}

// -----

func.func @f(%x: tensor<?x?xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{expected a static hidden size, got 'tensor<?x?xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x?xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expected input element type 'f32', got 'bf16'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xbf16>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xf16>, %wg: tensor<4x4x8xbf16>, %wu: tensor<4x4x8xbf16>, %wd: tensor<4x8x4xbf16>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expected router weight element type f32 or 'bf16', got 'f16'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = bf16>}
       : (tensor<?x8xbf16>, tensor<4x8xf16>, tensor<4x4x8xbf16>, tensor<4x4x8xbf16>, tensor<4x8x4xbf16>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<5x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected router weight of shape [4x8], got 'tensor<5x8xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<5x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected a score-correction bias operand since score_bias = true}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, score_bias = true>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %b: tensor<4xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{unexpected score-correction bias operand unless score_bias = true}}
  %y = moe.layer %x router(%wr, bias %b) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %b: tensor<8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected score-correction bias of shape [4], got 'tensor<8xf32>'}}
  %y = moe.layer %x router(%wr, bias %b) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, score_bias = true>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x8x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected gate weight of shape [4x4x8], got 'tensor<4x8x8xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<?x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected up weight of shape [4x4x8], got 'tensor<?x4x8xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<?x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x4x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected down weight of shape [4x8x4], got 'tensor<4x4x8xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf16>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected gate weight element type 'f32', got 'f16'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf16>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected a shared expert operand since shared_experts > 0}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 1, shared_ffn = 4>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<4x8xf32>, %su: tensor<4x8xf32>, %sd: tensor<8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{unexpected shared expert operand unless shared_experts > 0}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<4x8xf32>, %su: tensor<8x8xf32>, %sd: tensor<8x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected shared gate weight of shape [8x8], got 'tensor<4x8xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 2, shared_ffn = 4>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<8x8xf32>, %su: tensor<8x4xf32>, %sd: tensor<8x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected shared up weight of shape [8x8], got 'tensor<8x4xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 2, shared_ffn = 4>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<8x8xf32>, %su: tensor<8x8xf32>, %sd: tensor<8x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected shared down weight of shape [8x8], got 'tensor<8x16xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 2, shared_ffn = 4>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<4x8xf32>, %su: tensor<4x8xf32>, %sd: tensor<8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected a shared_gate operand since shared_gate = true}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 1, shared_ffn = 4, shared_gate = true>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<4x8xf32>, %su: tensor<4x8xf32>, %sd: tensor<8x4xf32>, %g: tensor<1x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{unexpected shared_gate operand unless shared_gate = true}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) shared_gate(%g) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 1, shared_ffn = 4>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<1x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<4x8xf32>, %su: tensor<4x8xf32>, %sd: tensor<8x4xf32>, %g: tensor<8x1xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected shared expert gate of shape [1x8], got 'tensor<8x1xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) shared_gate(%g) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 1, shared_ffn = 4, shared_gate = true>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<8x1xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf16> {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<?x8xf32>' (inferred from the operands), got 'tensor<?x8xf16>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf16>
  return %y : tensor<?x8xf16>
}

// -----

func.func @f(%x: tensor<?x?xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x?xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<?x8xf32>) {
  // expected-error @+1 {{expected the weight to have a static size in dim 0, got 'tensor<?x8xf32>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16xf32>) {
  // expected-error @+1 {{expected weight dim 1 (hidden) to be 8, got 16}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<4x16xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %w: tensor<4x8xf16>) {
  // expected-error @+1 {{expected weight element type f32 or 'bf16', got 'f16'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<sigmoid>} : tensor<?x8xbf16>, tensor<4x8xf16> -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<?x4xf32>' (inferred from the operands), got 'tensor<?x5xf32>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x5xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{'moe.router' op result #0 must be 2D tensor of 32-bit float values, but got 'tensor<?x4xbf16>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x8xi32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{'moe.router' op operand #0 must be 2D tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<?x8xi32>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xi32>, tensor<4x8xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%s: tensor<?x?xf32>) {
  // expected-error @+1 {{expected scores to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %i, %w = moe.topk %s {k = 2} : tensor<?x?xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{expected bias dim 0 (experts) to be 8, got 4}}
  %i, %w = moe.topk %s bias(%b) {k = 2} : tensor<?x8xf32>, tensor<4xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>, %b: tensor<?xf32>) {
  // expected-error @+1 {{expected the bias to have a static size in dim 0, got 'tensor<?xf32>'}}
  %i, %w = moe.topk %s bias(%b) {k = 2} : tensor<?x8xf32>, tensor<?xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected 1 <= k <= experts (8), got 9}}
  %i, %w = moe.topk %s {k = 9} : tensor<?x8xf32> -> tensor<?x9xi32>, tensor<?x9xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected 1 <= k <= experts (8), got 0}}
  %i, %w = moe.topk %s {k = 0} : tensor<?x8xf32> -> tensor<?x0xi32>, tensor<?x0xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected groups to divide experts (8), got 3}}
  %i, %w = moe.topk %s {k = 2, groups = 3} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected 1 <= topk_groups <= groups (4), got 0}}
  %i, %w = moe.topk %s {k = 2, groups = 4, topk_groups = 0} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected k <= topk_groups * experts per group (1 * 2 = 2), got 3}}
  %i, %w = moe.topk %s {k = 3, groups = 4, topk_groups = 1} : tensor<?x8xf32> -> tensor<?x3xi32>, tensor<?x3xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected at least 2 experts per group with group_score = sum_top2, got 1}}
  %i, %w = moe.topk %s {k = 2, groups = 8, topk_groups = 2, group_score = #moe.group_score<sum_top2>} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected a finite scale > 0, got -1}}
  %i, %w = moe.topk %s {k = 2, scale = -1.0 : f64} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected a finite scale > 0, got INF}}
  %i, %w = moe.topk %s {k = 2, scale = 0x7FF0000000000000 : f64} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<?x2xi32>' (inferred from the operands), got 'tensor<?x3xi32>'}}
  %i, %w = moe.topk %s {k = 2} : tensor<?x8xf32> -> tensor<?x3xi32>, tensor<?x3xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected 1 <= experts <= 2147483647, got 0}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 0} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected alignment to be a power of two <= 65536, got 96}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4, alignment = 96} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected alignment to be a power of two <= 65536, got 131072}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4, alignment = 131072} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x?xi32>) {
  // expected-error @+1 {{expected the indices to have a static size in dim 1, got 'tensor<?x?xi32>'}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<?x16xf32>, tensor<?x?xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x?xi32>
  return
}

// -----

func.func @f(%x: tensor<5x16xf32>, %i: tensor<6x2xi32>) {
  // expected-error @+1 {{expected indices dim 0 (tokens) to be 5, got 6}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<5x16xf32>, tensor<6x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<5x2xi32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x5xi32>) {
  // expected-error @+1 {{expected 1 <= experts per token <= experts (4), got 5}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<?x16xf32>, tensor<?x5xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x5xi32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected a dynamic row count with a dynamic token count, got 64}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<64x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return
}

// -----

func.func @f(%x: tensor<5x16xf32>, %i: tensor<5x2xi32>) {
  // expected-error @+1 {{expected 32 rows (the padded upper bound for 5 tokens x 2 over 4 experts with alignment 8), got 40}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4, alignment = 8} : tensor<5x16xf32>, tensor<5x2xi32> -> tensor<40x16xf32>, tensor<5xi32>, tensor<5x2xi32>
  return
}

// -----

func.func @f(%x: tensor<4611686018427387904x16xf32>, %i: tensor<4611686018427387904x2xi32>) {
  // expected-error @+1 {{padded row count for 4611686018427387904 tokens x 2 overflows}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<4611686018427387904x16xf32>, tensor<4611686018427387904x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<4611686018427387904x2xi32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected result #1 to be compatible with 'tensor<5xi32>' (inferred from the operands), got 'tensor<4xi32>'}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<4xi32>, tensor<?x2xi32>
  return
}

// -----

func.func @f(%x: tensor<?x?xf32>, %w: tensor<4x16x8xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x?xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x?xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected the weight to have a static size in dim 2, got 'tensor<4x16x?xf32>'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x?xf32>, tensor<5xi32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x4xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected weight dim 2 (reduction size of the input) to be 8, got 4}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x4xf32>, tensor<5xi32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x8xbf16>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected weight element type 'f32', got 'bf16'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x8xbf16>, tensor<5xi32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x8xf32>, %o: tensor<?xi32>) {
  // expected-error @+1 {{expected offsets of static size experts + 1 >= 2, got 'tensor<?xi32>'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<?xi32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x8xf32>, %o: tensor<1xi32>) {
  // expected-error @+1 {{expected offsets of static size experts + 1 >= 2, got 'tensor<1xi32>'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<1xi32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x8xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{expected offsets of size experts + 1 = 5, got 4}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<4xi32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%g: tensor<?x8xf32>, %u: tensor<?x4xf32>) {
  // expected-error @+1 {{'moe.swiglu' op requires the same type for all operands and results}}
  %a = "moe.swiglu"(%g, %u) : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%r: tensor<?x16xf32>, %m: tensor<?x?xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected the row map to have a static size in dim 1, got 'tensor<?x?xi32>'}}
  %y = moe.combine %r, %m, %w : tensor<?x16xf32>, tensor<?x?xi32>, tensor<?x2xf32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%r: tensor<?x?xf32>, %m: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected the rows to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %y = moe.combine %r, %m, %w : tensor<?x?xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @f(%r: tensor<?x16xf32>, %m: tensor<?x2xi32>, %w: tensor<?x3xf32>) {
  // expected-error @+1 {{expected row map and weights of the same shape, got 'tensor<?x2xi32>' and 'tensor<?x3xf32>'}}
  %y = moe.combine %r, %m, %w : tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x3xf32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%r: tensor<?x16xf32>, %m: tensor<7x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<7x16xf32>' (inferred from the operands), got 'tensor<8x16xf32>'}}
  %y = moe.combine %r, %m, %w : tensor<?x16xf32>, tensor<7x2xi32>, tensor<?x2xf32> -> tensor<8x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x?xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>, %d: tensor<8x4xf32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x?xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<?x?xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %g: tensor<?x8xf32>, %u: tensor<4x8xf32>, %d: tensor<8x4xf32>) {
  // expected-error @+1 {{expected the gate weight to have a static size in dim 0, got 'tensor<?x8xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %g: tensor<4x16xf32>, %u: tensor<4x8xf32>, %d: tensor<8x4xf32>) {
  // expected-error @+1 {{expected gate weight of shape [4x8], got 'tensor<4x16xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x8xf32>, tensor<4x16xf32>, tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<8x8xf32>, %d: tensor<8x4xf32>) {
  // expected-error @+1 {{expected up weight of shape [4x8], got 'tensor<8x8xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>, %d: tensor<4x8xf32>) {
  // expected-error @+1 {{expected down weight of shape [8x4], got 'tensor<4x8xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xbf16>, %d: tensor<8x4xf32>) {
  // expected-error @+1 {{expected up weight element type 'f32', got 'bf16'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8x4xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>, %d: tensor<8x4xf32>, %sg: tensor<2x8xf32>) {
  // expected-error @+1 {{expected expert gate of shape [1x8], got 'tensor<2x8xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d gate(%sg) : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<2x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x?xf32>, %off: tensor<17xi32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %r, %o = moe.all_to_all %x, %off {ep_size = 4, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x?xf32>, tensor<17xi32> -> tensor<?x?xf32>, tensor<17xi32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %off: tensor<?xi32>) {
  // expected-error @+1 {{expected offsets of static size experts + 1 >= 2, got 'tensor<?xi32>'}}
  %r, %o = moe.all_to_all %x, %off {ep_size = 4, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x8xf32>, tensor<?xi32> -> tensor<?x8xf32>, tensor<?xi32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %off: tensor<17xi32>) {
  // expected-error @+1 {{expected ep_size to divide experts (16), got 3}}
  %r, %o = moe.all_to_all %x, %off {ep_size = 3, kind = #moe.all_to_all_kind<combine>} : tensor<?x8xf32>, tensor<17xi32> -> tensor<?x8xf32>, tensor<17xi32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %off: tensor<17xi32>) {
  // expected-error @+1 {{expected ep_size to divide experts (16), got 0}}
  %r, %o = moe.all_to_all %x, %off {ep_size = 0, kind = #moe.all_to_all_kind<combine>} : tensor<?x8xf32>, tensor<17xi32> -> tensor<?x8xf32>, tensor<17xi32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %off: tensor<17xi32>) {
  // expected-error @+1 {{expected ep_size to divide experts (16), got 32}}
  %r, %o = moe.all_to_all %x, %off {ep_size = 32, kind = #moe.all_to_all_kind<combine>} : tensor<?x8xf32>, tensor<17xi32> -> tensor<?x8xf32>, tensor<17xi32>
  return
}

// -----

func.func @f(%g: tensor<?x8xf32>, %u: tensor<?x8xbf16>, %d: tensor<?x8xf32>) {
  // expected-error @+1 {{'moe.swiglu_grad' op failed to verify that all of {gate, up, grad, gate_grad, up_grad} have same type}}
  %a, %b = "moe.swiglu_grad"(%g, %u, %d) : (tensor<?x8xf32>, tensor<?x8xbf16>, tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

func.func @f(%d: tensor<?x?xf32>, %w: tensor<4x16x8xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected the gradient to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %dx = moe.grouped_matmul_dx %d, %w, %o : tensor<?x?xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x16xf32>, %w: tensor<4x?x8xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected the weight to have a static size in dim 1, got 'tensor<4x?x8xf32>'}}
  %dx = moe.grouped_matmul_dx %d, %w, %o : tensor<?x16xf32>, tensor<4x?x8xf32>, tensor<5xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x12xf32>, %w: tensor<4x16x8xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected weight dim 1 (output size of the gradient) to be 12, got 16}}
  %dx = moe.grouped_matmul_dx %d, %w, %o : tensor<?x12xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x16xf32>, %w: tensor<4x16x8xbf16>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected weight element type 'f32', got 'bf16'}}
  %dx = moe.grouped_matmul_dx %d, %w, %o : tensor<?x16xf32>, tensor<4x16x8xbf16>, tensor<5xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x16xf32>, %w: tensor<4x16x8xf32>, %o: tensor<1xi32>) {
  // expected-error @+1 {{expected offsets of static size experts + 1 >= 2, got 'tensor<1xi32>'}}
  %dx = moe.grouped_matmul_dx %d, %w, %o : tensor<?x16xf32>, tensor<4x16x8xf32>, tensor<1xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x16xf32>, %w: tensor<4x16x8xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{expected offsets of size experts + 1 = 5, got 4}}
  %dx = moe.grouped_matmul_dx %d, %w, %o : tensor<?x16xf32>, tensor<4x16x8xf32>, tensor<4xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x16xf32>, %w: tensor<4x16x8xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<?x8xf32>' (inferred from the operands), got 'tensor<?x16xf32>'}}
  %dx = moe.grouped_matmul_dx %d, %w, %o : tensor<?x16xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x?xf32>, %d: tensor<?x16xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %dw = moe.grouped_matmul_dw %x, %d, %o : tensor<?x?xf32>, tensor<?x16xf32>, tensor<5xi32> -> tensor<4x16x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %d: tensor<?x?xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected the gradient to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %dw = moe.grouped_matmul_dw %x, %d, %o : tensor<?x8xf32>, tensor<?x?xf32>, tensor<5xi32> -> tensor<4x16x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %d: tensor<7x16xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected gradient dim 0 (rows of the input) to be 6, got 7}}
  %dw = moe.grouped_matmul_dw %x, %d, %o : tensor<6x8xf32>, tensor<7x16xf32>, tensor<5xi32> -> tensor<4x16x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %d: tensor<?x16xf16>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected gradient element type 'f32', got 'f16'}}
  %dw = moe.grouped_matmul_dw %x, %d, %o : tensor<?x8xf32>, tensor<?x16xf16>, tensor<5xi32> -> tensor<4x16x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %d: tensor<?x16xf32>, %o: tensor<?xi32>) {
  // expected-error @+1 {{expected offsets of static size experts + 1 >= 2, got 'tensor<?xi32>'}}
  %dw = moe.grouped_matmul_dw %x, %d, %o : tensor<?x8xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<4x16x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %d: tensor<?x16xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<4x16x8xf32>' (inferred from the operands), got 'tensor<3x16x8xf32>'}}
  %dw = moe.grouped_matmul_dw %x, %d, %o : tensor<?x8xf32>, tensor<?x16xf32>, tensor<5xi32> -> tensor<3x16x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x?xf32>, %r: tensor<?x8xf32>, %m: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected the gradient to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %a, %b = moe.combine_grad %d, %r, %m, %w : tensor<?x?xf32>, tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x8xf32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%d: tensor<?x8xf32>, %r: tensor<?x6xf32>, %m: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected rows dim 1 (hidden size of the gradient) to be 8, got 6}}
  %a, %b = moe.combine_grad %d, %r, %m, %w : tensor<?x8xf32>, tensor<?x6xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x6xf32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%d: tensor<?x8xf32>, %r: tensor<?x8xbf16>, %m: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected rows element type 'f32', got 'bf16'}}
  %a, %b = moe.combine_grad %d, %r, %m, %w : tensor<?x8xf32>, tensor<?x8xbf16>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x8xbf16>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%d: tensor<?x8xf32>, %r: tensor<?x8xf32>, %m: tensor<?x?xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected the row map to have a static size in dim 1, got 'tensor<?x?xi32>'}}
  %a, %b = moe.combine_grad %d, %r, %m, %w : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x?xi32>, tensor<?x2xf32> -> tensor<?x8xf32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%d: tensor<3x8xf32>, %r: tensor<?x8xf32>, %m: tensor<4x2xi32>, %w: tensor<4x2xf32>) {
  // expected-error @+1 {{expected row map dim 0 (tokens of the gradient) to be 3, got 4}}
  %a, %b = moe.combine_grad %d, %r, %m, %w : tensor<3x8xf32>, tensor<?x8xf32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<?x8xf32>, tensor<4x2xf32>
  return
}

// -----

func.func @f(%d: tensor<?x8xf32>, %r: tensor<?x8xf32>, %m: tensor<3x2xi32>, %w: tensor<4x2xf32>) {
  // expected-error @+1 {{expected weights dim 0 (tokens of the row map) to be 3, got 4}}
  %a, %b = moe.combine_grad %d, %r, %m, %w : tensor<?x8xf32>, tensor<?x8xf32>, tensor<3x2xi32>, tensor<4x2xf32> -> tensor<?x8xf32>, tensor<3x2xf32>
  return
}

// -----

func.func @f(%d: tensor<?x8xf32>, %r: tensor<?x8xf32>, %m: tensor<?x2xi32>, %w: tensor<?x3xf32>) {
  // expected-error @+1 {{expected weights dim 1 (k of the row map) to be 2, got 3}}
  %a, %b = moe.combine_grad %d, %r, %m, %w : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x3xf32> -> tensor<?x8xf32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%d: tensor<?x8xf32>, %r: tensor<?x8xf32>, %m: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected result #1 to be compatible with 'tensor<?x2xf32>' (inferred from the operands), got 'tensor<?x3xf32>'}}
  %a, %b = moe.combine_grad %d, %r, %m, %w : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x8xf32>, tensor<?x3xf32>
  return
}

// -----

func.func @f(%d: tensor<?x?xf32>, %m: tensor<?x2xi32>) {
  // expected-error @+1 {{expected the row gradient to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %x = moe.dispatch_grad %d, %m : tensor<?x?xf32>, tensor<?x2xi32> -> tensor<?x?xf32>
  return
}

// -----

func.func @f(%d: tensor<?x8xf32>, %m: tensor<?x?xi32>) {
  // expected-error @+1 {{expected the row map to have a static size in dim 1, got 'tensor<?x?xi32>'}}
  %x = moe.dispatch_grad %d, %m : tensor<?x8xf32>, tensor<?x?xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x8xf32>, %m: tensor<?x2xi32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<?x8xf32>' (inferred from the operands), got 'tensor<?x8xbf16>'}}
  %x = moe.dispatch_grad %d, %m : tensor<?x8xf32>, tensor<?x2xi32> -> tensor<?x8xbf16>
  return
}

// -----

func.func @f(%s: tensor<?x?xf32>, %i: tensor<?x2xi32>, %d: tensor<?x2xf32>) {
  // expected-error @+1 {{expected the scores to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %g = moe.topk_grad %s, %i, %d : tensor<?x?xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>, %i: tensor<?x?xi32>, %d: tensor<?x2xf32>) {
  // expected-error @+1 {{expected the ids to have a static size in dim 1, got 'tensor<?x?xi32>'}}
  %g = moe.topk_grad %s, %i, %d : tensor<?x8xf32>, tensor<?x?xi32>, tensor<?x2xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%s: tensor<3x8xf32>, %i: tensor<4x2xi32>, %d: tensor<?x2xf32>) {
  // expected-error @+1 {{expected ids dim 0 (tokens of the scores) to be 3, got 4}}
  %g = moe.topk_grad %s, %i, %d : tensor<3x8xf32>, tensor<4x2xi32>, tensor<?x2xf32> -> tensor<3x8xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>, %i: tensor<3x2xi32>, %d: tensor<4x2xf32>) {
  // expected-error @+1 {{expected weight gradient dim 0 (tokens of the ids) to be 3, got 4}}
  %g = moe.topk_grad %s, %i, %d : tensor<?x8xf32>, tensor<3x2xi32>, tensor<4x2xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>, %i: tensor<?x2xi32>, %d: tensor<?x3xf32>) {
  // expected-error @+1 {{expected weight gradient dim 1 (k of the ids) to be 2, got 3}}
  %g = moe.topk_grad %s, %i, %d : tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x3xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%s: tensor<?x2xf32>, %i: tensor<?x3xi32>, %d: tensor<?x3xf32>) {
  // expected-error @+1 {{expected k = 3 to be at most the 2 experts of the scores}}
  %g = moe.topk_grad %s, %i, %d : tensor<?x2xf32>, tensor<?x3xi32>, tensor<?x3xf32> -> tensor<?x2xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>, %i: tensor<?x2xi32>, %d: tensor<?x2xf32>) {
  // expected-error @+1 {{expected a positive scale, got 0}}
  %g = moe.topk_grad %s, %i, %d {scale = 0.0 : f64} : tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>, %i: tensor<?x2xi32>, %d: tensor<?x2xf32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<?x8xf32>' (inferred from the operands), got 'tensor<?x4xf32>'}}
  %g = moe.topk_grad %s, %i, %d : tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x?xf32>, %w: tensor<8x64xf32>, %s: tensor<?x8xf32>, %d: tensor<?x8xf32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %a, %b = moe.router_grad %x, %w, %s, %d {scoring = #moe.scoring<softmax>} : tensor<?x?xf32>, tensor<8x64xf32>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x?xf32>, tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<?x64xf32>, %s: tensor<?x8xf32>, %d: tensor<?x8xf32>) {
  // expected-error @+1 {{expected the weight to have a static size in dim 0, got 'tensor<?x64xf32>'}}
  %a, %b = moe.router_grad %x, %w, %s, %d {scoring = #moe.scoring<softmax>} : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x64xf32>, tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<8x32xf32>, %s: tensor<?x8xf32>, %d: tensor<?x8xf32>) {
  // expected-error @+1 {{expected weight dim 1 (hidden size of the input) to be 64, got 32}}
  %a, %b = moe.router_grad %x, %w, %s, %d {scoring = #moe.scoring<softmax>} : tensor<?x64xf32>, tensor<8x32xf32>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x64xf32>, tensor<8x32xf32>
  return
}

// -----

func.func @f(%x: tensor<3x64xf32>, %w: tensor<8x64xf32>, %s: tensor<4x8xf32>, %d: tensor<?x8xf32>) {
  // expected-error @+1 {{expected scores dim 0 (tokens of the input) to be 3, got 4}}
  %a, %b = moe.router_grad %x, %w, %s, %d {scoring = #moe.scoring<softmax>} : tensor<3x64xf32>, tensor<8x64xf32>, tensor<4x8xf32>, tensor<?x8xf32> -> tensor<3x64xf32>, tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<8x64xf32>, %s: tensor<?x6xf32>, %d: tensor<?x8xf32>) {
  // expected-error @+1 {{expected scores dim 1 (experts of the weight) to be 8, got 6}}
  %a, %b = moe.router_grad %x, %w, %s, %d {scoring = #moe.scoring<softmax>} : tensor<?x64xf32>, tensor<8x64xf32>, tensor<?x6xf32>, tensor<?x8xf32> -> tensor<?x64xf32>, tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<8x64xf32>, %s: tensor<3x8xf32>, %d: tensor<4x8xf32>) {
  // expected-error @+1 {{expected score gradient dim 0 (tokens of the scores) to be 3, got 4}}
  %a, %b = moe.router_grad %x, %w, %s, %d {scoring = #moe.scoring<softmax>} : tensor<?x64xf32>, tensor<8x64xf32>, tensor<3x8xf32>, tensor<4x8xf32> -> tensor<?x64xf32>, tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<8x64xf32>, %s: tensor<?x8xf32>, %d: tensor<?x7xf32>) {
  // expected-error @+1 {{expected score gradient dim 1 (experts of the scores) to be 8, got 7}}
  %a, %b = moe.router_grad %x, %w, %s, %d {scoring = #moe.scoring<softmax>} : tensor<?x64xf32>, tensor<8x64xf32>, tensor<?x8xf32>, tensor<?x7xf32> -> tensor<?x64xf32>, tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>, %w: tensor<8x64xbf16>, %s: tensor<?x8xf32>, %d: tensor<?x8xf32>) {
  // expected-error @+1 {{expected result #1 to be compatible with 'tensor<8x64xf32>' (inferred from the operands), got 'tensor<8x32xf32>'}}
  %a, %b = moe.router_grad %x, %w, %s, %d {scoring = #moe.scoring<softmax>} : tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x64xbf16>, tensor<8x32xf32>
  return
}

// -----

func.func @f(%g: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{expected ep_size >= 1, got 0}}
  %s = moe.all_reduce %g {ep_size = 0} : tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

func.func @f(%g: tensor<8xbf16>) -> tensor<8xbf16> {
  // expected-error @+1 {{operand #0 must be tensor of 32-bit float values}}
  %s = moe.all_reduce %g {ep_size = 2} : tensor<8xbf16>
  return %s : tensor<8xbf16>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<8x8xf32>, %wg: tensor<8x16x8xf32>,
             %wu: tensor<8x16x8xf32>, %wd: tensor<8x8x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected ep_size to divide experts (8), got 3}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 8, top_k = 2, ffn = 16, dtype = f32>, ep_size = 3}
       : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x16x8xf32>, tensor<8x16x8xf32>, tensor<8x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<8x8xf32>, %wg: tensor<8x16x8xf32>,
             %wu: tensor<8x16x8xf32>, %wd: tensor<8x8x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected gate weight of shape [4x16x8], got 'tensor<8x16x8xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 8, top_k = 2, ffn = 16, dtype = f32>, ep_size = 2}
       : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x16x8xf32>, tensor<8x16x8xf32>, tensor<8x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%rows: tensor<?x8xf32>, %off: tensor<5xi32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected ep_size > 1 to divide experts (4), got 1}}
  %h, %o = moe.all_to_all_start %rows, %off {ep_size = 1, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x8xf32>, tensor<5xi32> -> tensor<5xi32>
  %r = moe.all_to_all_wait %h : tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

func.func @f(%rows: tensor<?x8xf32>, %off: tensor<5xi32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected its handle to be used by exactly one moe.all_to_all_wait in the same block}}
  %h, %o = moe.all_to_all_start %rows, %off {ep_size = 2, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x8xf32>, tensor<5xi32> -> tensor<5xi32>
  %r = moe.all_to_all_wait %h : tensor<?x8xf32>
  %s = moe.all_to_all_wait %h : tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

func.func @f(%h: i64) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected a handle from moe.all_to_all_start}}
  %r = moe.all_to_all_wait %h : tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

func.func @f(%rows: tensor<?x8xf32>, %off: tensor<5xi32>) -> tensor<?x4xf32> {
  %h, %o = moe.all_to_all_start %rows, %off {ep_size = 2, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x8xf32>, tensor<5xi32> -> tensor<5xi32>
  // expected-error @+1 {{expected result of type 'tensor<?x8xf32>' (rows of the start's input), got 'tensor<?x4xf32>'}}
  %r = moe.all_to_all_wait %h : tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<8x8xf32>, %wg: tensor<8x16x8xf32>,
             %wu: tensor<8x16x8xf32>, %wd: tensor<8x8x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected ep_chunks to be 1, or >= 1 with ep_size > 1, got 2}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 8, top_k = 2, ffn = 16, dtype = f32>, ep_chunks = 2}
       : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x16x8xf32>, tensor<8x16x8xf32>, tensor<8x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>, %s: tensor<?x3xf32>) {
  // expected-error @+1 {{expected indices and scales of the same shape, got 'tensor<?x2xi32>' and 'tensor<?x3xf32>'}}
  %r, %o, %m = moe.dispatch %x, %i scales %s {experts = 4} : tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x3xf32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return
}

// -----

// expected-error @+1 {{expected top_k = 2 with scoring = sparsemixer (it picks two experts), got 3}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 3, scoring = sparsemixer, ffn = 4, dtype = f32>}

// -----

// expected-error @+1 {{expected no groups, score_bias or norm_topk_prob with scoring = sparsemixer}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, scoring = sparsemixer, norm_topk_prob = true, ffn = 4, dtype = f32>}

// -----

// expected-error @+1 {{expected router_jitter = 0 unless scoring = sparsemixer, got 0.01}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, router_jitter = 0.01, ffn = 4, dtype = f32>}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected k = 2 and no bias, groups or normalize with sparsemixer}}
  %i, %w = moe.topk %s {k = 3, sparsemixer = 0.01 : f64} : tensor<?x8xf32> -> tensor<?x3xi32>, tensor<?x3xf32>
  return
}

// -----

func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected a finite sparsemixer margin >= 0, got a negative value}}
  %i, %w = moe.topk %s {k = 2, sparsemixer = -1.0 : f64} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected a block output bias operand since output_bias = true}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, output_bias = true, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %b: tensor<4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected output bias of shape [8], got 'tensor<4xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) output_bias(%b) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, output_bias = true, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%g: tensor<?x8xf32>, %m: tensor<?x2xi32>, %x: tensor<?x8xf32>, %s: tensor<?x3xf32>) {
  // expected-error @+1 {{expected row map and scales of the same shape, got 'tensor<?x2xi32>' and 'tensor<?x3xf32>'}}
  %dx, %ds = moe.scaled_dispatch_grad %g, %m, %x, %s : tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x8xf32>, tensor<?x3xf32> -> tensor<?x8xf32>, tensor<?x2xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected a router bias operand since router_bias = true}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, router_bias = true, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %b: tensor<4xbf16>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected router bias element type 'f32', got 'bf16'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) router_bias(%b) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, router_bias = true, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4xbf16>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %bg: tensor<4x4xf32>, %bd: tensor<4x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{unexpected expert gate bias operand unless expert_bias = true}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) expert_bias(%bg, %bg, %bd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %bg: tensor<4x4xf32>, %bd: tensor<4x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected expert down bias of shape [4x8], got 'tensor<4x4xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) expert_bias(%bg, %bg, %bd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, expert_bias = true, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{expected swiglu_alpha and swiglu_limit only with activation = clamped_swiglu}}
func.func @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, swiglu_limit = 3.0, dtype = f32>} {
  return
}

// -----

// expected-error @+1 {{expected a finite swiglu_alpha > 0, got 0}}
func.func @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, activation = clamped_swiglu, swiglu_alpha = 0.0, dtype = f32>} {
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{expected bias of shape [4], got 'tensor<8xf32>'}}
  %s = moe.router %x, %w bias %b {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x6x8xf32>, %o: tensor<5xi32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{expected bias of shape [4x6], got 'tensor<4x8xf32>'}}
  %g = moe.grouped_matmul %x, %w, %o bias %b : tensor<?x8xf32>, tensor<4x6x8xf32>, tensor<5xi32>, tensor<4x8xf32> -> tensor<?x6xf32>
  return
}

// -----

func.func @f(%g: tensor<?x8xf32>) {
  // expected-error @+1 {{expected both alpha and limit (the clamped SwiGLU) or neither}}
  %a = moe.swiglu %g, %g {limit = 7.0 : f64} : tensor<?x8xf32>
  return
}

// -----

func.func @f(%g: tensor<?x8xf32>) {
  // expected-error @+1 {{expected a finite limit > 0}}
  %a = moe.swiglu %g, %g {alpha = 1.0 : f64, limit = -7.0 : f64} : tensor<?x8xf32>
  return
}

// -----

// FP8 experts.
// expected-error @+1 {{expected expert_dtype to be the dtype ('bf16') or f8E4M3FN, got 'f16'}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, ffn = 4, dtype = bf16, expert_dtype = f16>}

// -----

func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xbf16>, %wg: tensor<4x4x8xf8E4M3FN>, %wu: tensor<4x4x8xf8E4M3FN>, %wd: tensor<4x8x4xf8E4M3FN>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expected a scales(gate, up, down) operand since expert_dtype = f8E4M3FN}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = bf16, expert_dtype = f8E4M3FN>}
       : (tensor<?x8xbf16>, tensor<4x8xbf16>, tensor<4x4x8xf8E4M3FN>, tensor<4x4x8xf8E4M3FN>, tensor<4x8x4xf8E4M3FN>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xbf16>, %wg: tensor<4x4x8xbf16>, %wu: tensor<4x4x8xf8E4M3FN>, %wd: tensor<4x8x4xf8E4M3FN>, %s: tensor<4x1x1xf32>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expected gate weight element type 'f8E4M3FN', got 'bf16'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) scales(%s, %s, %s) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = bf16, expert_dtype = f8E4M3FN>}
       : (tensor<?x8xbf16>, tensor<4x8xbf16>, tensor<4x4x8xbf16>, tensor<4x4x8xf8E4M3FN>, tensor<4x8x4xf8E4M3FN>, tensor<4x1x1xf32>, tensor<4x1x1xf32>, tensor<4x1x1xf32>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xbf16>, %wg: tensor<4x4x8xf8E4M3FN>, %wu: tensor<4x4x8xf8E4M3FN>, %wd: tensor<4x8x4xf8E4M3FN>, %s: tensor<4x1x1xf32>, %t: tensor<4x2x1xf32>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expected down scale of shape [4x1x1], got 'tensor<4x2x1xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) scales(%s, %s, %t) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = bf16, expert_dtype = f8E4M3FN>}
       : (tensor<?x8xbf16>, tensor<4x8xbf16>, tensor<4x4x8xf8E4M3FN>, tensor<4x4x8xf8E4M3FN>, tensor<4x8x4xf8E4M3FN>, tensor<4x1x1xf32>, tensor<4x1x1xf32>, tensor<4x2x1xf32>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xbf16>, %wg: tensor<4x4x8xbf16>, %wu: tensor<4x4x8xbf16>, %wd: tensor<4x8x4xbf16>, %s: tensor<4x1x1xf32>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{unexpected scales(gate, up, down) operand unless expert_dtype = f8E4M3FN}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) scales(%s, %s, %s) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = bf16>}
       : (tensor<?x8xbf16>, tensor<4x8xbf16>, tensor<4x4x8xbf16>, tensor<4x4x8xbf16>, tensor<4x8x4xbf16>, tensor<4x1x1xf32>, tensor<4x1x1xf32>, tensor<4x1x1xf32>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xbf16>, %wg: tensor<4x4x8xf8E4M3FN>, %wu: tensor<4x4x8xf8E4M3FN>, %wd: tensor<4x8x4xf8E4M3FN>, %s: tensor<4x1x1xf32>, %wsg: tensor<4x8xf8E4M3FN>, %wsd: tensor<8x4xf8E4M3FN>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expected a shared_scales(gate, up, down) operand since expert_dtype = f8E4M3FN and shared experts}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) scales(%s, %s, %s) shared(%wsg, %wsg, %wsd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, shared_experts = 1, shared_ffn = 4, dtype = bf16, expert_dtype = f8E4M3FN>}
       : (tensor<?x8xbf16>, tensor<4x8xbf16>, tensor<4x4x8xf8E4M3FN>, tensor<4x4x8xf8E4M3FN>, tensor<4x8x4xf8E4M3FN>, tensor<4x8xf8E4M3FN>, tensor<4x8xf8E4M3FN>, tensor<8x4xf8E4M3FN>, tensor<4x1x1xf32>, tensor<4x1x1xf32>, tensor<4x1x1xf32>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %w: tensor<4x16x8xf8E4M3FN>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected a scale operand for the e4m3 weight}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xbf16>, tensor<4x16x8xf8E4M3FN>, tensor<5xi32> -> tensor<?x16xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %w: tensor<4x16x8xbf16>, %o: tensor<5xi32>, %s: tensor<4x1x1xf32>) {
  // expected-error @+1 {{unexpected scale operand: the weight is 'bf16', not e4m3}}
  %h = moe.grouped_matmul %x, %w, %o scale %s : tensor<?x8xbf16>, tensor<4x16x8xbf16>, tensor<5xi32> scale tensor<4x1x1xf32> -> tensor<?x16xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x300xbf16>, %w: tensor<4x16x300xf8E4M3FN>, %o: tensor<5xi32>, %s: tensor<4x1x2xf32>) {
  // expected-error @+1 {{expected scale of shape [4x1x3], got 'tensor<4x1x2xf32>'}}
  %h = moe.grouped_matmul %x, %w, %o scale %s : tensor<?x300xbf16>, tensor<4x16x300xf8E4M3FN>, tensor<5xi32> scale tensor<4x1x2xf32> -> tensor<?x16xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x8xbf16>, %g: tensor<4x8xbf16>, %d: tensor<8x4xbf16>, %s: tensor<1x1xf32>) {
  // expected-error @+1 {{unexpected gate scale operand: the gate weight is 'bf16', not e4m3}}
  %y = moe.shared_expert %x, %g, %g, %d scales(%s, %s, %s) : (tensor<?x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<1x1xf32>, tensor<1x1xf32>, tensor<1x1xf32>) -> tensor<?x8xbf16>
  return
}

// -----

// expected-error @+1 {{expected fp8_recipe only with expert_dtype = f8E4M3FN}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, ffn = 4, dtype = bf16, fp8_recipe = #moe.fp8_recipe<scaling = tensor>>}

// -----

// expected-error @+1 {{expected block = 128 (the tile of the FP8 kernels), got 32}}
func.func private @f() attributes {r = #moe.fp8_recipe<block = 32>}

// -----

func.func @f(%d: tensor<?x16xf32>) {
  // expected-error @+1 {{expected segments for 128 x 1 tiles (transposed, scaling = block)}}
  %q = moe.fp8_quantize %d {recipe = #moe.fp8_recipe<>, transposed} : tensor<?x16xf32> -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%d: tensor<?x?xf32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %q = moe.fp8_quantize %d {recipe = #moe.fp8_recipe<>} : tensor<?x?xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @f(%w: tensor<4x?x8xf32>) {
  // expected-error @+1 {{expected a static weight of rank 2 or more, got 'tensor<4x?x8xf32>'}}
  %c, %s = moe.fp8_quantize_weight %w {recipe = #moe.fp8_recipe<>} : tensor<4x?x8xf32> -> tensor<4x16x8xf8E4M3FN>, tensor<4x1x1xf32>
  return
}

// -----

func.func @f(%w: tensor<4x16x8xf32>) {
  // expected-error @+1 {{expected scales of shape [4x1x1], got 'tensor<4x2x1xf32>'}}
  %c, %s = moe.fp8_quantize_weight %w {recipe = #moe.fp8_recipe<>} : tensor<4x16x8xf32> -> tensor<4x16x8xf8E4M3FN>, tensor<4x2x1xf32>
  return
}

// -----

func.func @f(%w: tensor<4x16x8xf32>) {
  // expected-error @+1 {{expected codes of shape [4x16x8], got 'tensor<4x16x16xf8E4M3FN>'}}
  %c, %s = moe.fp8_quantize_weight %w {recipe = #moe.fp8_recipe<>} : tensor<4x16x8xf32> -> tensor<4x16x16xf8E4M3FN>, tensor<4x1x1xf32>
  return
}

// -----

func.func @f(%d: tensor<?x16xf32>, %w: tensor<4x16x8xf32>, %o: tensor<5xi32>, %s: tensor<4x1x1xf32>) {
  // expected-error @+1 {{unexpected scale operand: the weight is 'f32', not e4m3}}
  %dx = moe.grouped_matmul_dx %d, %w, %o scale %s : tensor<?x16xf32>, tensor<4x16x8xf32>, tensor<5xi32> scale tensor<4x1x1xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @f(%d: tensor<?x16xf32>, %w: tensor<4x16x8xf8E4M3FN>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected a scale operand for the e4m3 weight}}
  %dx = moe.grouped_matmul_dx %d, %w, %o : tensor<?x16xf32>, tensor<4x16x8xf8E4M3FN>, tensor<5xi32> -> tensor<?x8xf32>
  return
}
