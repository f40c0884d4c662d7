//===- ToolSupport.h - Helpers of the runtime tools ------------*- C++ -*-===//
//
// Part of moe-compiler. Shared by moe-run and moe-train, which link only the
// runtime (no LLVM command-line library).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TOOLS_TOOLSUPPORT_H
#define MOE_TOOLS_TOOLSUPPORT_H

#include "moe/runtime/Layer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace moe::tools {

/// The tool's name, for messages ("moe-run: error: ..."); each tool defines
/// it.
extern const char *const kToolName;

[[noreturn]] inline void die(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", kToolName, message.c_str());
  std::exit(1);
}

/// Matches `--name=value`, `--name value` (when `value` is given) or the
/// bare `--name` (when it is not).
inline bool flag(int argc, char **argv, int &i, const char *name,
                 std::string *value) {
  const char *arg = argv[i];
  size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0)
    return false;
  if (!value)
    return arg[n] == '\0';
  if (arg[n] == '=') {
    *value = arg + n + 1;
    return true;
  }
  if (arg[n] != '\0')
    return false;
  if (i + 1 >= argc)
    die(std::string("option '") + name + "' needs a value");
  *value = argv[++i];
  return true;
}

/// Mixed into --seed for the stream of random tokens, so tokens and
/// weights of one seed differ.
constexpr uint64_t kTokenSeedSalt = 0x5eedf00dull;

/// `tokens` x `hidden` f32 tokens, uniform in [-1, 1), from `rng`.
inline rt::Tensor randomTokens(rt::Random &rng, int64_t tokens,
                               int64_t hidden) {
  rt::Tensor x = rt::Tensor::zeros(rt::DType::F32, {tokens, hidden});
  float *data = x.as<float>();
  for (int64_t i = 0, n = x.numElements(); i < n; ++i)
    data[i] = rng.uniform(-1.0f, 1.0f);
  return x;
}

} // namespace moe::tools

#endif // MOE_TOOLS_TOOLSUPPORT_H
