//===- Sm90.h - The Hopper (sm_90a) target ----------------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TARGET_SM90_H
#define MOE_TARGET_SM90_H

#include "moe/runtime/Bundle.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/Timing.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

struct Sm90Options {
  /// Rows each expert's segment is padded to: a multiple of the GEMM's M
  /// block.
  int64_t alignment = 128;
  int64_t maxTokens = 4096;
  /// Also build the training step (the program's trainSteps).
  bool train = false;
  /// Make a cubin with ptxas (for --emit=cubin, bundles and reports).
  bool cubin = false;
  /// ptxas to run; "" finds one ($MOE_PTXAS, the configured toolkit, PATH).
  std::string ptxas;
};

/// What `ptxas -v` and the compiler say about one kernel.
struct Sm90KernelReport {
  std::string name;
  std::string grid; // e.g. "112 (persistent)" or "ceil(T / 4)"
  int64_t block = 0;
  int64_t sharedMemory = 0; // dynamic shared memory
  std::string tile;         // GEMMs: "128x128x64, 7 stages"
  int64_t registers = -1, spillStores = -1, spillLoads = -1;
  /// Registers per thread a warp-specialized kernel's setmaxnreg plan
  /// needs ptxas to allocate (0: none).
  int64_t requiredRegisters = 0;
  int64_t staticSharedMemory = -1;
};

struct Sm90Result {
  std::string ptx;
  std::vector<uint8_t> cubin; // when Sm90Options::cubin
  ::moe::rt::GpuProgram program;
  std::vector<Sm90KernelReport> kernels;
};

/// Compiles the module's moe.layer into the kernels and schedule of the
/// sm_90a target: convert-moe-to-moegpu, the moegpu kernel pipeline, the
/// upstream path to PTX, and ptxas for the cubin. Diagnostics go to the
/// context's handler; `error` says what failed otherwise.
std::optional<Sm90Result> compileSm90(ModuleOp module,
                                      const Sm90Options &options,
                                      TimingScope &timing, std::string &error);

/// Where ptxas is: `preferred`, $MOE_PTXAS, the toolkit found at configure
/// time, or PATH; std::nullopt if none is.
std::optional<std::string> findPtxas(const std::string &preferred);

} // namespace mlir::moe

#endif // MOE_TARGET_SM90_H
