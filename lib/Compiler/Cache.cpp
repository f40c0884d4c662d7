//===- Cache.cpp - The compile cache --------------------------------------===//
//
// Part of moe-compiler. Bundles by the SHA-256 of the compiler's build, the
// input and every option that changes the output; entries carry their key
// and are served only when they pass the bundle checks.
//
//===----------------------------------------------------------------------===//

#include "moe/Compiler/Compiler.h"
#include "moe/runtime/Bundle.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <climits>
#include <cstdlib>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir;
using namespace mlir::moe;
namespace rt = ::moe::rt;

CompileResult mlir::moe::compileCached(const std::string &input,
                                       const std::string &inputName,
                                       InputKind kind,
                                       const CompileOptions &options,
                                       bool useCache) {
  std::optional<std::string> dir;
  if (useCache && options.emit == "bundle" && validateOptions(options).empty())
    dir = cacheDirectory();
  if (!dir)
    return compile(input, inputName, kind, options);
  std::string key = cacheKey(input, kind, options);
  // --timing and --report want the compile itself.
  if (!options.timing && !options.report)
    if (std::optional<std::vector<uint8_t>> cached = lookupCache(*dir, key)) {
      CompileResult result;
      result.output = std::move(*cached);
      return result;
    }
  CompileResult result = compile(input, inputName, kind, options);
  // A compile with a warning is not stored: a hit would not repeat it.
  if (result.ok() && result.warning.empty())
    result.warning = storeCache(*dir, key, result.output);
  return result;
}

/// The file holding this compiler (library or executable), its size and
/// modification time: a rebuilt compiler of the same version misses the
/// cache instead of serving what the old one compiled. For code in the
/// executable, dladdr names it as it was started (argv[0], "moe-compile"
/// when found on PATH), which is no path to stat: /proc/self/exe is.
std::string mlir::moe::buildIdentity() {
  static const std::string identity = [] {
    Dl_info info;
    if (!dladdr(reinterpret_cast<void *>(&buildIdentity), &info) ||
        !info.dli_fname)
      return std::string();
    std::string file = info.dli_fname;
    char resolved[PATH_MAX];
    struct stat st;
    if (file.find('/') == std::string::npos || ::stat(file.c_str(), &st) != 0) {
      ssize_t n = ::readlink("/proc/self/exe", resolved, sizeof resolved - 1);
      if (n <= 0)
        return std::string();
      resolved[n] = 0;
      file = resolved;
    } else if (::realpath(file.c_str(), resolved)) {
      file = resolved;
    }
    if (::stat(file.c_str(), &st) != 0)
      return std::string();
    return file + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
  }();
  return identity;
}

std::string mlir::moe::cacheKey(const std::string &input, InputKind kind,
                                const CompileOptions &o) {
  std::string cpu = o.mcpu;
  if (cpu == "native") {
    cpu = "native:" + llvm::sys::getHostCPUName().str();
    for (auto &feature : llvm::sys::getHostCPUFeatures())
      if (feature.second)
        cpu += "," + feature.first().str();
  }
  llvm::SHA256 hash;
  auto field = [&](llvm::StringRef name, llvm::StringRef value) {
    hash.update(name);
    hash.update("=");
    hash.update(std::to_string(value.size()));
    hash.update(":");
    hash.update(value);
    hash.update("\n");
  };
  field("version", kCompilerVersion);
  field("build", buildIdentity());
  field("kind", kind == InputKind::Mlir ? "mlir" : "hf-config");
  field("input", input);
  field("target", o.target);
  field("emit", o.emit);
  field("dtype", o.dtype);
  field("fp8-recipe", o.fp8Recipe);
  field("optimizer-state", o.optimizerState);
  field("max-tokens", std::to_string(o.maxTokens));
  field("alignment", std::to_string(alignmentFor(o)));
  field("sm-partition", o.smPartition);
  field("tile-n", std::to_string(o.tileN));
  field("tile-m", std::to_string(o.tileM));
  field("tile-cluster", std::to_string(o.tileCluster));
  field("ptxas", o.ptxas);
  field("device-memory", std::to_string(o.deviceMemory));
  field("train", o.train ? "1" : "0");
  field("backward", o.backward ? "1" : "0");
  field("ep", std::to_string(o.ep));
  field("ep-chunks", std::to_string(o.epChunks));
  field("weight-names", o.weightNames);
  field("mcpu", cpu);
  return llvm::toHex(hash.final(), /*LowerCase=*/true);
}

std::optional<std::string> mlir::moe::cacheDirectory() {
  if (const char *dir = std::getenv("MOE_CACHE_DIR"); dir && *dir)
    return std::string(dir);
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/moe-compiler";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/moe-compiler";
  return std::nullopt;
}

static std::string entryPath(const std::string &dir, const std::string &key) {
  return dir + "/" + key + ".moeb";
}

static constexpr llvm::StringLiteral kCacheTrailer = "MOECACHE";

std::optional<std::vector<uint8_t>>
mlir::moe::lookupCache(const std::string &dir, const std::string &key) {
  // A regular file only (never a FIFO or a device), of bounded size.
  rt::Expected<std::vector<uint8_t>> bytes =
      rt::readFile(entryPath(dir, key), 1ull << 32);
  if (!bytes)
    return std::nullopt;
  // The entry must say it is this key's; its bundle must pass its checks.
  std::string trailer = kCacheTrailer.str() + key;
  if (bytes->size() < trailer.size() ||
      !std::equal(trailer.begin(), trailer.end(),
                  bytes->end() - static_cast<std::ptrdiff_t>(trailer.size())))
    return std::nullopt;
  bytes->resize(bytes->size() - trailer.size());
  if (!rt::parseBundle(*bytes, "cache entry"))
    return std::nullopt;
  return std::move(*bytes);
}

std::string mlir::moe::storeCache(const std::string &dir,
                                  const std::string &key,
                                  const std::vector<uint8_t> &bundle) {
  if (auto ec = llvm::sys::fs::create_directories(dir))
    return "cannot create the cache directory '" + dir + "': " + ec.message();
  int fd;
  llvm::SmallString<256> tmp;
  if (auto ec = llvm::sys::fs::createUniqueFile(
          dir + "/." + key + ".%%%%%%%%.tmp", fd, tmp))
    return "cannot create a file in the cache directory '" + dir +
           "': " + ec.message();
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os.write(reinterpret_cast<const char *>(bundle.data()), bundle.size());
    os << kCacheTrailer << key;
    os.flush();
    if (os.has_error()) {
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return "cannot write the cache entry '" + tmp.str().str() + "'";
    }
  }
  if (auto ec = llvm::sys::fs::rename(tmp, entryPath(dir, key))) {
    llvm::sys::fs::remove(tmp);
    return "cannot rename the cache entry into place: " + ec.message();
  }
  return "";
}
