//===- moe-fuzz-bundle.cpp - Fuzz the bundle loader -----------------------===//
//
// Part of moe-compiler. Any bytes as a bundle: parse and validate the
// manifest (the code is never loaded). A bundle that parses must survive a
// write and read back unchanged in meaning. Nothing may crash.
//
// Most mutations only break the checksum; MOE_FUZZ_RESEAL (default on)
// recomputes it so the fuzzer reaches the header and manifest checks.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Bundle.h"
#include "moe/runtime/Layer.h"

#include <cstddef>
#include <cstdint>

using namespace moe::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= 8) {
    uint64_t sum = fnv1a64(bytes.data(), bytes.size() - 8);
    for (int i = 0; i < 8; ++i)
      bytes[bytes.size() - 8 + i] = static_cast<uint8_t>(sum >> (8 * i));
  }
  Expected<Bundle> bundle = parseBundle(bytes, "fuzz");
  if (!bundle)
    return 0;
  (void)validateManifest(bundle->manifest);
  Expected<Bundle> again = parseBundle(serializeBundle(*bundle), "again");
  if (!again || again->blobs != bundle->blobs ||
      serializeManifest(again->manifest) != serializeManifest(bundle->manifest))
    __builtin_trap();
  return 0;
}
