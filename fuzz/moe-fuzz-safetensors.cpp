//===- moe-fuzz-safetensors.cpp - Fuzz the safetensors reader -------------===//
//
// Part of moe-compiler. Any bytes as a safetensors file: parse, and when it
// parses read every tensor and convert the float ones. Nothing may crash.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Safetensors.h"

#include <cstddef>
#include <cstdint>

using namespace moe::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Expected<SafetensorsFile> file =
      SafetensorsFile::parse(std::vector<uint8_t>(data, data + size), "fuzz");
  if (!file)
    return 0;
  for (const auto &[name, entry] : file->getEntries()) {
    Expected<Tensor> tensor = file->get(name);
    if (!tensor)
      __builtin_trap(); // A listed tensor must be readable.
    if (entry.dtype == DType::BF16 || entry.dtype == DType::F16)
      (void)convertTensor(*tensor, DType::F32);
  }
  return 0;
}
