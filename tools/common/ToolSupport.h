//===- ToolSupport.h - Helpers of the runtime tools ------------*- C++ -*-===//
//
// Part of moe-compiler. Shared by moe-run, moe-train and moe-comm-bench, which
// link only the runtime (no LLVM command-line library).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TOOLS_TOOLSUPPORT_H
#define MOE_TOOLS_TOOLSUPPORT_H

#include "moe/runtime/Comm.h"
#include "moe/runtime/Layer.h"
#include "moe/runtime/Safetensors.h"
#include "moe/Version.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace moe::tools {

/// The tool's name, for messages ("moe-run: error: ..."); each tool defines
/// it.
extern const char *const kToolName;

/// A bound for messages: "0", "1e+06", "0.001".
inline std::string formatNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

[[noreturn]] inline void die(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", kToolName, message.c_str());
  std::exit(1);
}

/// --version: the tool, the project's version and the commit it was
/// built from.
inline void printVersion() {
  std::printf("%s (moe-compiler %s, commit %s)\n", kToolName, MOE_VERSION,
              MOE_GIT_COMMIT);
}

/// Makes a failed allocation one error line and exit status 1 instead of
/// an uncaught std::bad_alloc (the tools check the sizes they know first;
/// this catches the rest).
inline void installOutOfMemoryHandler() {
  std::set_new_handler([] {
    std::fprintf(stderr,
                 "%s: error: out of memory: an allocation failed (reduce "
                 "the sizes asked for)\n",
                 kToolName);
    std::_Exit(1);
  });
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

/// `text` as a finite number in [lo, hi], or one error naming the option.
inline double parseNumber(const std::string &text, const char *what,
                          double lo, double hi = 1e18) {
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !(v >= lo) || !(v <= hi))
    die(std::string("expected a finite number in [") + formatNumber(lo) +
        ", " + formatNumber(hi) + "] for " + what + ", got '" + text + "'");
  return v;
}

/// `text` as an integer in [lo, hi], or one error naming the option and
/// the range.
inline int64_t parseCount(const std::string &text, const char *what,
                          int64_t lo = 0, int64_t hi = 1000000000000000000) {
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 ||
      !(v >= static_cast<double>(lo)) || !(v <= static_cast<double>(hi)) ||
      v != static_cast<double>(static_cast<int64_t>(v)))
    die(std::string("expected an integer in [") + std::to_string(lo) + ", " +
        std::to_string(hi) + "] for " + what + ", got '" + text + "'");
  return static_cast<int64_t>(v);
}

/// The most repeats, iterations or warm-ups a benchmarking option takes:
/// a median of a million runs is as good as any more, and a larger count
/// is a typo that would run for ever.
constexpr int64_t kMaxRepeats = 1000000;

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

/// `path` with `.rankR` before its extension when the job has several
/// ranks (each writes its own file).
inline std::string rankPath(const std::string &path,
                            const rt::Communicator &c) {
  if (c.size() == 1)
    return path;
  size_t slash = path.rfind('/');
  size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    dot = path.size();
  return path.substr(0, dot) + ".rank" + std::to_string(c.rank()) +
         path.substr(dot);
}

/// This rank's rows of a [T, hidden] batch split evenly over the ranks (the
/// batch itself on one rank).
inline rt::Tensor rankRows(rt::Tensor batch, const rt::Communicator &c) {
  if (c.size() == 1)
    return batch;
  int64_t rows = batch.shape[0] / c.size(), width = batch.shape[1];
  rt::Tensor part = rt::Tensor::zeros(batch.dtype, {rows, width});
  size_t bytes = part.data.size();
  std::memcpy(part.data.data(), batch.data.data() + bytes * c.rank(), bytes);
  return part;
}

/// Loads `layer`'s weights from `path`, a safetensors file or a sharded
/// checkpoint's index (`model.safetensors.index.json`), named under
/// `prefix`, or, with `checkpointLayer` >= 0 (`--layer N`), under the
/// prefix of that layer of the model, which the bundle records.
inline void loadWeightsOrDie(rt::Layer &layer, const std::string &path,
                             const std::string &prefix,
                             int64_t checkpointLayer) {
  std::string names = prefix;
  if (checkpointLayer >= 0) {
    if (!prefix.empty())
      die("give --layer or --weights-prefix, not both");
    rt::Expected<std::string> at =
        rt::checkpointPrefixOf(layer.getManifest(), checkpointLayer);
    if (!at)
      die(at.message());
    names = *at;
  }
  rt::Expected<rt::Checkpoint> checkpoint = rt::Checkpoint::open(path);
  if (!checkpoint)
    die(checkpoint.message());
  if (rt::Status s = layer.loadWeights(*checkpoint, names); !s.ok())
    die(s.error);
}

} // namespace moe::tools

#endif // MOE_TOOLS_TOOLSUPPORT_H
