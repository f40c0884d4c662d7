//===- moe-fuzz-checkpoint.cpp - Fuzz resuming from checkpoints -----------===//
//
// Part of moe-compiler. The input is a checkpoint of step 7: a 4-byte
// little-endian length N, N bytes of COMPLETE marker, then the state file
// (fuzz/make_checkpoint_seed.py writes a valid one). Beside it lies a valid
// checkpoint of step 3. Reading the newest valid checkpoint must give step
// 7 with finite state of the expected shapes, or exactly the step-3 state,
// or an error; never a crash, a hang, or other state.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Train.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace moe::rt;

namespace {
std::string dir;
std::map<std::string, Tensor> older;
std::map<std::string, StateSpec> specs = {{"b", {DType::F32, {4}}},
                                          {"w", {DType::F32, {2, 3}}}};

void writeAll(const std::string &path, const uint8_t *data, size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    __builtin_trap();
  std::fwrite(data, 1, size, f);
  std::fclose(f);
}

/// Removes step 7's directory and anything a fallback renamed it to.
void clearNewest() {
  DIR *d = ::opendir(dir.c_str());
  while (struct dirent *e = d ? ::readdir(d) : nullptr) {
    std::string name = e->d_name;
    if (name.rfind("step-000000000007", 0) != 0)
      continue;
    std::string path = dir + "/" + name;
    ::unlink((path + "/COMPLETE").c_str());
    ::unlink((path + "/state.safetensors").c_str());
    ::rmdir(path.c_str());
  }
  if (d)
    ::closedir(d);
}
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  char pattern[] = "/tmp/moe-fuzz-checkpoint-XXXXXX";
  if (!::mkdtemp(pattern))
    __builtin_trap();
  dir = pattern;
  std::atexit([] {
    std::string command = "rm -rf '" + dir + "'";
    if (std::system(command.c_str()) != 0)
      std::fprintf(stderr, "cannot remove %s\n", dir.c_str());
  });
  for (const auto &[name, spec] : specs) {
    Tensor t = Tensor::zeros(spec.dtype, spec.shape);
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.as<float>()[i] = 0.5f * static_cast<float>(i) - 1.0f;
    older[name] = t;
  }
  if (!writeCheckpointState(dir, older, 3, 33).ok())
    __builtin_trap();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4)
    return 0;
  uint32_t markerSize = data[0] | data[1] << 8 | data[2] << 16 |
                        static_cast<uint32_t>(data[3]) << 24;
  if (markerSize > size - 4)
    return 0;
  clearNewest();
  std::string ckpt = dir + "/step-000000000007";
  ::mkdir(ckpt.c_str(), 0755);
  writeAll(ckpt + "/COMPLETE", data + 4, markerSize);
  writeAll(ckpt + "/state.safetensors", data + 4 + markerSize,
           size - 4 - markerSize);
  Expected<ValidCheckpoint> read = readValidCheckpoint(dir, specs);
  if (!read)
    return 0;
  if (read->step == 3) {
    for (const auto &[name, t] : older)
      if (read->tensors.at(name).data != t.data || read->stream != 33)
        __builtin_trap(); // fell back to something else
    return 0;
  }
  if (read->step != 7 || read->tensors.size() != specs.size())
    __builtin_trap();
  for (const auto &[name, t] : read->tensors) {
    if (t.shape != specs.at(name).shape)
      __builtin_trap();
    for (int64_t i = 0; i < t.numElements(); ++i)
      if (!std::isfinite(t.as<float>()[i]))
        __builtin_trap(); // non-finite state resumed
  }
  return 0;
}
