// RUN: not moe-opt %s -moe-autodiff=alignment=3 2>&1 | FileCheck %s

// CHECK: error: moe-autodiff: expected alignment to be a power of two <= 65536, got 3
module {}
