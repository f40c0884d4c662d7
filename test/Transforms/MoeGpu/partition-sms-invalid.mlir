// RUN: not moe-opt %s -moe-partition-sms="sms=20 comm=20" 2>&1 | FileCheck %s

// CHECK: error: moe-partition-sms: expected 0 <= comm < sms, got sms = 20, comm = 20
module {}
