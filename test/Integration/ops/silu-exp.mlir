// SwiGLU's exp (evaluated inline, a polynomial and the exponent field,
// so that its loops vectorize) against silu(g) = g / (1 + e^-g) in f64
// through libm, for g from -100 to 100 in steps of 1/128 (25601 values):
// every result within 2.5e-7 relative, or 1e-35 where silu is below f32's
// normal range, and within 2 f32 ulp (of 2^-23 relative) where it is
// normal (1.18 measured: the f32 sigmoid's own roundings included). Then
// infinities, NaN and signed zeros.
// RUN: moe-opt %s --moe-host-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %count = arith.constant 25601 : index
  %step = arith.constant 0.0078125 : f32
  %start = arith.constant -100.0 : f32
  %one = arith.constant 1.0 : f32
  %gm = memref.alloc() : memref<1x25601xf32>
  %um = memref.alloc() : memref<1x25601xf32>
  scf.for %i = %c0 to %count step %c1 {
    %ii = arith.index_cast %i : index to i32
    %fi = arith.sitofp %ii : i32 to f32
    %g2 = arith.mulf %fi, %step : f32
    %gv = arith.addf %start, %g2 : f32
    memref.store %gv, %gm[%c0, %i] : memref<1x25601xf32>
    memref.store %one, %um[%c0, %i] : memref<1x25601xf32>
  }
  %gt = bufferization.to_tensor %gm restrict : memref<1x25601xf32> to tensor<1x25601xf32>
  %ut = bufferization.to_tensor %um restrict : memref<1x25601xf32> to tensor<1x25601xf32>
  %a = moe.swiglu %gt, %ut : tensor<1x25601xf32>
  %am = bufferization.to_buffer %a : tensor<1x25601xf32> to memref<1x25601xf32>

  // Count the results outside the bound, and keep the largest relative
  // error where silu is normal.
  %rel = arith.constant 2.5e-7 : f64
  %abs = arith.constant 1.0e-35 : f64
  %tiny = arith.constant 1.0e-30 : f64
  %one64 = arith.constant 1.0 : f64
  %zero = arith.constant 0 : i32
  %zero64 = arith.constant 0.0 : f64
  %bad, %worst = scf.for %i = %c0 to %count step %c1
      iter_args(%n = %zero, %w = %zero64) -> (i32, f64) {
    %g = memref.load %gm[%c0, %i] : memref<1x25601xf32>
    %got32 = memref.load %am[%c0, %i] : memref<1x25601xf32>
    %gd = arith.extf %g : f32 to f64
    %got = arith.extf %got32 : f32 to f64
    %neg = arith.negf %gd : f64
    %e = math.exp %neg : f64
    %den = arith.addf %one64, %e : f64
    %ref = arith.divf %gd, %den : f64
    %diff = arith.subf %got, %ref : f64
    %err = math.absf %diff : f64
    %mag = math.absf %ref : f64
    %scaled = arith.mulf %rel, %mag : f64
    %bound = arith.addf %scaled, %abs : f64
    %over = arith.cmpf ugt, %err, %bound : f64
    %inc = arith.extui %over : i1 to i32
    %n2 = arith.addi %n, %inc : i32
    %normal = arith.cmpf ogt, %mag, %tiny : f64
    %r = arith.divf %err, %mag : f64
    %r2 = arith.select %normal, %r, %zero64 : f64
    %w2 = arith.maximumf %w, %r2 : f64
    scf.yield %n2, %w2 : i32, f64
  }
  vector.print %bad : i32
  %ulp = arith.constant 1.1920928955078125e-7 : f64
  %worstUlp = arith.divf %worst, %ulp : f64
  %below = arith.constant 2.0 : f64
  %ok = arith.cmpf olt, %worstUlp, %below : f64
  vector.print %ok : i1

  %sg = arith.constant dense<[[0x7F800000, 0xFF800000, 0x7FC00000, 0.0, -0.0, 88.0, -88.0]]> : tensor<1x7xf32>
  %su = arith.constant dense<[[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]> : tensor<1x7xf32>
  %s = moe.swiglu %sg, %su : tensor<1x7xf32>
  %sm = bufferization.to_buffer %s : tensor<1x7xf32> to memref<1x7xf32>
  %su2 = memref.cast %sm : memref<1x7xf32> to memref<*xf32>
  call @printMemrefF32(%su2) : (memref<*xf32>) -> ()
  return
}
// No result outside the bound; the largest relative error under 2 ulp.
// CHECK: 0
// CHECK-NEXT: 1
// silu(inf) = inf; silu(-inf) = -inf * 0 = NaN; silu(NaN) = NaN; the zeros
// keep their sign; silu(88) = 88; silu(-88) = -88 e^-88 = -5.4e-37.
// CHECK: {{\[}}[inf,   {{-?}}nan,   {{-?}}nan,   0,   -0,   88,   -5.{{[0-9]+}}e-37]]
