// RUN: not moe-opt %s -moe-select-tiles=max-stages=1 2>&1 | FileCheck %s

// CHECK: error: moe-select-tiles: max-stages must be at least 2, got 1
module {}
