func.func @f(%g: tensor<?x8xf32>, %u: tensor<?x4xf32>) {
  // expected-error @+1 {{'moe.swiglu' op requires the same type for all operands and results}}
  %a = "moe.swiglu"(%g, %u) : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  return
}
