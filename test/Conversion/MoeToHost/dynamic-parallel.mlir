// RUN: moe-opt %s --convert-dynamic-parallel-to-openmp --split-input-file --verify-diagnostics | FileCheck %s
// RUN: moe-opt %s --convert-dynamic-parallel-to-openmp --convert-scf-to-openmp --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=BOTH

// A marked loop becomes a dynamic worksharing loop of chunk 1, its two
// dimensions collapsed and its body in an alloca scope; an unmarked loop
// is left for convert-scf-to-openmp (static schedule).
// CHECK-LABEL: func @marked
// CHECK: omp.parallel {
// CHECK: %[[ONE:.*]] = llvm.mlir.constant(1 : i64) : i64
// CHECK: omp.wsloop schedule(dynamic = %[[ONE]] : i64) {
// CHECK: omp.loop_nest (%[[I:.*]], %[[J:.*]]) : index = (%{{.*}}, %{{.*}}) to (%{{.*}}, %{{.*}}) step (%{{.*}}, %{{.*}}) {
// CHECK: memref.alloca_scope {
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[I]], %[[J]]]
// CHECK: omp.yield
// CHECK: omp.terminator
// CHECK-NOT: moe.schedule
// CHECK: scf.parallel
// BOTH-LABEL: func @marked
// BOTH: omp.wsloop schedule(dynamic
// BOTH: omp.wsloop {
// BOTH-NOT: schedule
// BOTH-NOT: scf.parallel
func.func @marked(%buf: memref<?x?xf32>, %m: index, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = arith.constant 1.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%m, %n) step (%c1, %c1) {
    memref.store %v, %buf[%i, %j] : memref<?x?xf32>
  } {moe.schedule = "dynamic"}
  scf.parallel (%i) = (%c0) to (%m) step (%c1) {
    memref.store %v, %buf[%i, %c0] : memref<?x?xf32>
  }
  return
}

// -----

// A reduction has no dynamic form here: one error, nothing rewritten.
func.func @reduction(%n: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  // expected-error @+1 {{'scf.parallel' op with reductions cannot take the dynamic schedule of `moe.schedule`}}
  %sum = scf.parallel (%i) = (%c0) to (%n) step (%c1) init (%zero) -> f32 {
    scf.reduce(%one : f32) {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      scf.reduce.return %s : f32
    }
  } {moe.schedule = "dynamic"}
  return %sum : f32
}
