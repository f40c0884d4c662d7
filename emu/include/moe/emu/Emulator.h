//===- Emulator.h - A functional PTX emulator for sm_90a --------*- C++ -*-===//
//
// Part of moe-compiler. The emulator runs PTX kernels on the CPU, exactly
// as written: warps of 32 threads with their own program counters
// (divergence and reconvergence), CTAs of warps that block on barriers,
// mbarriers and warpgroup collectives, TMA copies through tensor maps and
// wgmma on shared-memory descriptors. It checks what a GPU would only
// corrupt (out-of-bounds and misaligned accesses, deadlocks, unsatisfiable
// setmaxnreg) and reports each failure with the kernel, the PTX line and
// the instruction. libcuda-emu.so puts it behind the CUDA driver API.
//
// It needs nothing but C++17: no LLVM, no CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_EMU_EMULATOR_H
#define MOE_EMU_EMULATOR_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moe::emu {

struct Module;
struct Kernel;

/// The emulated device's global memory: every allocation is host memory,
/// and an access must lie inside one.
class GlobalMemory {
public:
  GlobalMemory();
  ~GlobalMemory();
  /// Returns the allocation's address (aligned to 256 bytes), or 0.
  uint64_t allocate(size_t bytes);
  /// False when `address` is not an allocation's start.
  bool release(uint64_t address);
  /// Registers memory owned elsewhere (a module's variables). `shared`:
  /// memory other processes write too (a peer's window of symmetric
  /// memory), so a spin on it may end without this process's doing.
  void adopt(uint64_t address, size_t bytes, bool shared = false);
  void forget(uint64_t address);
  /// True when [address, address + bytes) lies inside one allocation.
  bool contains(uint64_t address, size_t bytes) const;
  /// The allocation containing `address`: its start and size, or false.
  bool find(uint64_t address, uint64_t &start, uint64_t &size) const;
  /// The allocation just below `address` when `address` is a near miss past
  /// its end (inside its 256-byte rounding).
  bool nearestBelow(uint64_t address, uint64_t &start, uint64_t &size) const;
  /// Whether `address` lies in memory adopted as shared.
  bool isShared(uint64_t address) const;
  /// Bytes allocated (not adopted).
  size_t allocatedBytes() const;
  struct Block;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  unsigned count() const { return x * y * z; }
};

struct LaunchOptions {
  /// The sanitizer's checks beyond bounds (which are always on): alignment,
  /// mbarrier transactions left over at exit, setmaxnreg budgets.
  bool checks = true;
  /// Trace every instruction of this (CTA, warp) to `traceFile` (stderr when
  /// empty); -1: none.
  long traceCta = -1;
  int traceWarp = -1;
  std::string traceFile;
  /// Stop a launch after this many warp-instructions (a hang guard).
  uint64_t instructionLimit = 1ull << 36;
  /// SMs of the emulated device (%nsmid; %smid is the CTA's index modulo).
  unsigned sms = 132;
  /// A cooperative launch: every CTA of the grid is resident at once (the
  /// grid must fit, one CTA an SM) and they run interleaved, so CTAs may
  /// wait for each other through global memory. Otherwise a grid runs a
  /// cluster at a time.
  bool cooperative = false;
};

struct LaunchStats {
  uint64_t warpInstructions = 0;   // instructions issued, per warp
  uint64_t threadInstructions = 0; // instructions times active threads
  uint64_t ctas = 0;
};

/// Parses a PTX module. Null with `error` set ("<name>:<line>: <what>") when
/// the text is malformed or uses an instruction the emulator lacks.
std::shared_ptr<Module> loadModule(const std::string &ptx,
                                   const std::string &name,
                                   std::string &error);

/// Makes a module's .global and .const variables addressable by its
/// kernels (adopted by `memory`), and forgets them again.
void adoptVariables(const Module &module, GlobalMemory &memory);
void forgetVariables(const Module &module, GlobalMemory &memory);

/// A kernel (.entry) of a module, or null.
const Kernel *findKernel(const Module &module, const std::string &name);

/// A kernel's parameters: each one's size and offset in the packed buffer.
struct ParamLayout {
  std::vector<uint32_t> sizes, offsets;
  uint32_t bytes = 0;
};
ParamLayout paramLayout(const Kernel &kernel);

/// Static shared memory of a kernel, in bytes, and its .maxntid/.reqntid
/// thread limit (0: none).
uint32_t staticSharedBytes(const Kernel &kernel);
const std::string &kernelName(const Kernel &kernel);
uint32_t maxThreads(const Kernel &kernel);

/// How a launch failed: the GPU's error for it.
enum class LaunchFailure {
  None,
  IllegalAddress,    // an access outside memory
  MisalignedAddress, // an access not aligned to its size
  BadLaunch,         // the launch's shape or resources: nothing ran
  Failed,            // anything else (trap, deadlock, a failed check)
};

struct LaunchResult {
  LaunchFailure failure = LaunchFailure::None;
  /// What failed: "<module>:<line>: kernel '<k>', CTA (x,y,z), warp w,
  /// lane l: <what>\n    <instruction>", or for a deadlock what each
  /// blocked warp waits for.
  std::string report;
  bool ok() const { return failure == LaunchFailure::None; }
};

/// Runs a grid to completion. `params` is the packed parameter buffer
/// (paramLayout).
LaunchResult launch(const Module &module, const Kernel &kernel, Dim3 grid,
                   Dim3 block, Dim3 cluster, uint32_t dynamicShared,
                   const std::vector<uint8_t> &params, GlobalMemory &memory,
                   const LaunchOptions &options, LaunchStats *stats = nullptr);

/// The tensor map layout shared by the driver's cuTensorMapEncodeTiled and
/// the TMA instructions (the CUtensorMap's 128 bytes are opaque to users).
struct TensorMapDesc {
  uint32_t magic;        // kTensorMapMagic
  uint8_t dtype;         // CUtensorMapDataType
  uint8_t rank;          // 1-5
  uint8_t interleave;    // CUtensorMapInterleave (0: none)
  uint8_t swizzle;       // CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B
  uint8_t oobFill;       // 0 zeros, 1 NaN
  uint8_t elementBytes;  // 1, 2, 4 or 8
  uint16_t box[5];       // boxDim, 1-256
  uint8_t elementStrides[5];
  uint64_t globalAddress;
  uint32_t dims[5];      // globalDim
  uint64_t strides[4];   // globalStrides of dims 1.. (bytes)
};
constexpr uint32_t kTensorMapMagic = 0x4D54454D; // "MEMT"
static_assert(sizeof(TensorMapDesc) <= 128, "a CUtensorMap is 128 bytes");

} // namespace moe::emu

#endif // MOE_EMU_EMULATOR_H
