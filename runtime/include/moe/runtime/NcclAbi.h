//===- NcclAbi.h - NCCL's types and values ----------------------*- C++ -*-===//
//
// Part of moe-compiler. NCCL's result codes, data types, the unique id and
// the communicator config, by their documented values and layouts, so
// that neither side needs an NCCL header: the runtime calls NCCL opened
// with dlopen (runtime/lib/DeviceComm.cpp), and libnccl-emu
// (emu/nccl/NcclEmu.cpp) implements the same entry points. Header-only.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_NCCLABI_H
#define MOE_RUNTIME_NCCLABI_H

#include <cstddef>

/// ncclUniqueId, under NCCL's name at global scope: it passes by value, so
/// the entry points' types name it, on both sides alike.
struct ncclUniqueId {
  char internal[128];
};

namespace moe::nccl {

using Result = int;
using Comm = void *;

// ncclResult_t values.
enum : Result {
  kSuccess = 0,
  kSystemError = 2,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

// ncclDataType_t values.
enum : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};

// ncclRedOp_t: the one reduction used.
constexpr int kSum = 0;

/// ncclConfig_t with the fields of NCCL 2.18. NCCL reads `size` bytes of a
/// config over its defaults, so later versions accept this prefix.
struct Config {
  size_t size;
  unsigned magic;
  unsigned version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
};
constexpr int kConfigUndefined = -2147483647 - 1; // NCCL_CONFIG_UNDEF_INT
constexpr unsigned kConfigMagic = 0xcafebeef;
constexpr unsigned kConfigVersion = 21800; // NCCL_VERSION(2, 18, 0)

/// The fields of NCCL 2.28's `struct ncclWindow_vidmem` that its device
/// API reads (nccl_device/impl/core__types.h): an `ncclWindow_t` is the
/// device address of one. Rank i of the window's LSA team holds its copy at
/// `lsaFlatBase + i * stride4G * 2^32`.
struct WindowFields {
  void *winHost;
  char *lsaFlatBase;
  int lsaRank;
  int worldRank;
  unsigned stride4G;
};
/// ncclCommWindowRegister's flag for a window every rank registers alike.
constexpr int kWinCollSymmetric = 0x01;
/// The first version with windows and the device API's layout above.
constexpr int kWindowVersion = 22800;

} // namespace moe::nccl

#endif // MOE_RUNTIME_NCCLABI_H
