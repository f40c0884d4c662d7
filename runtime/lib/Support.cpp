//===- Support.cpp - Errors, dtypes and tensors of the runtime ------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Support.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <limits>
#include <set>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace moe::rt {

namespace {
/// Everything the runtime knows of a dtype, in one table.
struct DTypeInfo {
  DType dtype;
  size_t size;
  const char *safetensors; // name in safetensors headers
  const char *mlir;        // name in MLIR and manifests
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, 4, "F32", "f32"}, {DType::BF16, 2, "BF16", "bf16"},
    {DType::F16, 2, "F16", "f16"}, {DType::I32, 4, "I32", "i32"},
    {DType::I64, 8, "I64", "i64"}, {DType::F8E4M3, 1, "F8_E4M3", "f8E4M3FN"},
    {DType::U8, 1, "U8", "ui8"}};

const DTypeInfo &info(DType dtype) {
  for (const DTypeInfo &entry : kDTypes)
    if (entry.dtype == dtype)
      return entry;
  return kDTypes[0]; // unreachable: the table covers every enumerator
}
} // namespace

size_t dtypeSize(DType dtype) { return info(dtype).size; }
const char *safetensorsName(DType dtype) { return info(dtype).safetensors; }
const char *mlirName(DType dtype) { return info(dtype).mlir; }

std::optional<DType> parseSafetensorsName(const std::string &name) {
  for (const DTypeInfo &entry : kDTypes)
    if (name == entry.safetensors)
      return entry.dtype;
  return std::nullopt;
}

std::optional<DType> parseMlirName(const std::string &name) {
  for (const DTypeInfo &entry : kDTypes)
    if (name == entry.mlir)
      return entry.dtype;
  return std::nullopt;
}

std::optional<int64_t> elementCount(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count))
      return std::nullopt;
  }
  return count;
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") +
            (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  return text + "]";
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.assign(static_cast<size_t>(elementCount(t.shape).value_or(0)) *
                    dtypeSize(dtype),
                0);
  return t;
}

int64_t Tensor::numElements() const { return elementCount(shape).value_or(0); }

float bf16ToFloat(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

uint16_t floatToBf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if (std::isnan(value))
    return static_cast<uint16_t>((word >> 16) | 0x40); // keep it a NaN
  uint32_t rounding = 0x7fff + ((word >> 16) & 1);
  return static_cast<uint16_t>((word + rounding) >> 16);
}

float f16ToFloat(uint16_t bits) {
  uint32_t sign = (bits >> 15) & 1, exponent = (bits >> 10) & 0x1f,
           mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN()
                         : std::numeric_limits<float>::infinity();
  else
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400),
                           static_cast<int>(exponent) - 25);
  return sign ? -magnitude : magnitude;
}

uint16_t floatToF16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  uint16_t sign = static_cast<uint16_t>((word >> 16) & 0x8000);
  float magnitude = std::fabs(value);
  if (std::isnan(value))
    return sign | 0x7e00;
  if (magnitude >= 65520.0f) // rounds to infinity
    return sign | 0x7c00;
  if (magnitude < std::ldexp(1.0f, -14)) {
    // Subnormal: a multiple of 2^-24, rounded to nearest even by rint.
    auto units =
        static_cast<uint16_t>(std::nearbyint(std::ldexp(magnitude, 24)));
    return sign | units;
  }
  int exponent;
  float fraction = std::frexp(magnitude, &exponent); // [0.5, 1)
  // magnitude = (1 + m / 1024) * 2^(exponent - 1)
  auto mantissa =
      static_cast<uint32_t>(std::nearbyint((fraction * 2.0f - 1.0f) * 1024.0f));
  int biased = exponent - 1 + 15;
  if (mantissa == 1024) {
    mantissa = 0;
    ++biased;
  }
  if (biased >= 31)
    return sign | 0x7c00;
  return sign | static_cast<uint16_t>((biased << 10) | mantissa);
}

float fp8e4m3ToFloat(uint8_t bits) {
  float sign = bits & 0x80 ? -1.0f : 1.0f;
  int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7)
    return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) // subnormal: m/8 * 2^-6
    return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign *
         std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

uint8_t floatToFp8e4m3(float value) {
  if (std::isnan(value))
    return 0x7f;
  uint8_t sign = std::signbit(value) ? 0x80 : 0;
  float a = std::fabs(value);
  if (a >= 448.0f)
    return sign | 0x7e;
  // a = f * 2^e with f in [0.5, 1): its binade is 2^(e-1), and below 2^-6
  // the subnormals share the spacing of the lowest binade.
  int e = 0;
  std::frexp(a, &e);
  int exponent = std::max(e - 1, -6);
  float step = std::ldexp(1.0f, exponent - 3);
  // Multiples of the spacing, rounded to nearest even (exact: the spacing
  // is a power of two); 8..16 in a normal binade, 0..16 in the lowest.
  auto q = static_cast<int>(std::nearbyint(a / step));
  int code = ((exponent + 7) << 3) + q - 8;
  return sign | static_cast<uint8_t>(std::min(code, 0x7e));
}

bool quantizeFp8Blocks(const float *w, int64_t rows, int64_t cols,
                       uint8_t *codes, float *scales, bool perMatrix) {
  int64_t blockCols = fp8Blocks(cols);
  // The amax of the rows [r0, r1) and columns [c0, c1); false for a value
  // that is not finite.
  auto amaxOf = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                    float &amax) {
    amax = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        float v = w[r * cols + c];
        if (!std::isfinite(v))
          return false;
        amax = std::max(amax, std::fabs(v));
      }
    return true;
  };
  float matrixAmax = 0.0f;
  if (perMatrix && !amaxOf(0, rows, 0, cols, matrixAmax))
    return false;
  for (int64_t r0 = 0; r0 < rows; r0 += kFp8Block)
    for (int64_t c0 = 0; c0 < cols; c0 += kFp8Block) {
      int64_t r1 = std::min(rows, r0 + kFp8Block),
              c1 = std::min(cols, c0 + kFp8Block);
      float amax = matrixAmax;
      if (!perMatrix && !amaxOf(r0, r1, c0, c1, amax))
        return false;
      bool zero = amax < std::numeric_limits<float>::min();
      float inverse = zero ? 1.0f : 448.0f / amax;
      scales[(r0 / kFp8Block) * blockCols + c0 / kFp8Block] =
          zero ? 1.0f : amax / 448.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          codes[r * cols + c] = floatToFp8e4m3(w[r * cols + c] * inverse);
    }
  return true;
}

Expected<Tensor> dequantizeFp8Blocks(const Tensor &codes,
                                     const Tensor &scales) {
  using Result = Expected<Tensor>;
  size_t rank = codes.shape.size();
  std::vector<int64_t> blocks = codes.shape;
  if (rank >= 2)
    for (size_t d = rank - 2; d < rank; ++d)
      blocks[d] = fp8Blocks(blocks[d]);
  if (codes.dtype != DType::F8E4M3 || scales.dtype != DType::F32 || rank < 2 ||
      scales.shape != blocks)
    return Result::error("expected e4m3 codes of rank 2 or more and f32 "
                         "block scales " +
                         formatShape(blocks) + ", got " +
                         formatShape(codes.shape) + " and " +
                         formatShape(scales.shape));
  int64_t rows = codes.shape[rank - 2], cols = codes.shape[rank - 1];
  int64_t matrices = codes.numElements() / std::max<int64_t>(1, rows * cols);
  int64_t blockRows = fp8Blocks(rows), blockCols = fp8Blocks(cols);
  Tensor out = Tensor::zeros(DType::F32, codes.shape);
  auto *o = reinterpret_cast<float *>(out.data.data());
  const auto *s = reinterpret_cast<const float *>(scales.data.data());
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        size_t i = static_cast<size_t>((m * rows + r) * cols + c);
        o[i] = fp8e4m3ToFloat(codes.data[i]) *
               s[(m * blockRows + r / kFp8Block) * blockCols + c / kFp8Block];
      }
  return out;
}

bool isFloatType(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16;
}

static float loadFloat(const uint8_t *p, DType d) {
  uint16_t half;
  switch (d) {
  case DType::F32: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::BF16:
    std::memcpy(&half, p, 2);
    return bf16ToFloat(half);
  default:
    std::memcpy(&half, p, 2);
    return f16ToFloat(half);
  }
}

static void storeFloat(uint8_t *p, DType d, float v) {
  uint16_t half;
  switch (d) {
  case DType::F32:
    std::memcpy(p, &v, 4);
    return;
  case DType::BF16:
    half = floatToBf16(v);
    std::memcpy(p, &half, 2);
    return;
  default:
    half = floatToF16(v);
    std::memcpy(p, &half, 2);
    return;
  }
}

void setFloatElement(Tensor &tensor, size_t index, float value) {
  storeFloat(tensor.data.data() + index * dtypeSize(tensor.dtype), tensor.dtype,
             value);
}

/// One thread's share of convertFloats.
static void convertRange(const uint8_t *src, DType from, uint8_t *dst,
                         DType to, size_t begin, size_t end) {
  if (from == DType::F32 && to == DType::BF16) {
    for (size_t i = begin; i < end; ++i) {
      float v;
      std::memcpy(&v, src + 4 * i, 4);
      uint16_t h = floatToBf16(v);
      std::memcpy(dst + 2 * i, &h, 2);
    }
    return;
  }
  if (from == DType::BF16 && to == DType::F32) {
    for (size_t i = begin; i < end; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      float v = bf16ToFloat(h);
      std::memcpy(dst + 4 * i, &v, 4);
    }
    return;
  }
  size_t inSize = dtypeSize(from), outSize = dtypeSize(to);
  for (size_t i = begin; i < end; ++i)
    storeFloat(dst + i * outSize, to, loadFloat(src + i * inSize, from));
}

void convertFloats(const uint8_t *src, DType from, uint8_t *dst, DType to,
                   size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * dtypeSize(from));
    return;
  }
  // Chunks of 1M elements (about a millisecond each) over the cores: a
  // DeepSeek-V3 layer's 4096 x 7168 input is 29M.
  constexpr size_t kChunk = size_t(1) << 20;
  auto chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  int cores =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  parallelFor(chunks, cores, [&](int64_t c) {
    size_t begin = static_cast<size_t>(c) * kChunk;
    convertRange(src, from, dst, to, begin, std::min(n, begin + kChunk));
  });
}

Expected<Tensor> convertTensor(const Tensor &tensor, DType to) {
  if (tensor.dtype == to)
    return tensor;
  if (!isFloatType(tensor.dtype) || !isFloatType(to))
    return Expected<Tensor>::error(std::string("cannot convert ") +
                                   mlirName(tensor.dtype) + " to " +
                                   mlirName(to));
  Tensor out = Tensor::zeros(to, tensor.shape);
  convertFloats(tensor.data.data(), tensor.dtype, out.data.data(), to,
                static_cast<size_t>(tensor.numElements()));
  return out;
}

Expected<std::pair<int, uint64_t>> openRegularFile(const std::string &path) {
  using Result = Expected<std::pair<int, uint64_t>>;
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return Result::error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    return Result::error("cannot read '" + path + "': " + why);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    const char *kind = S_ISDIR(info.st_mode)    ? "a directory"
                       : S_ISFIFO(info.st_mode) ? "a FIFO"
                       : S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode)
                           ? "a device"
                       : S_ISSOCK(info.st_mode) ? "a socket"
                                                : "not a regular file";
    return Result::error("cannot read '" + path + "': " + kind +
                         ", expected a regular file");
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0)
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return std::make_pair(fd, static_cast<uint64_t>(info.st_size));
}

Expected<std::vector<uint8_t>> readFile(const std::string &path,
                                        uint64_t limit) {
  using Result = Expected<std::vector<uint8_t>>;
  Expected<std::pair<int, uint64_t>> opened = openRegularFile(path);
  if (!opened)
    return Result::error(opened.message());
  auto [fd, size] = *opened;
  if (size > limit) {
    ::close(fd);
    return Result::error("cannot read '" + path + "': " +
                         std::to_string(size) + " bytes, more than the " +
                         std::to_string(limit) + " accepted");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      std::string why = std::strerror(errno);
      ::close(fd);
      return Result::error("cannot read '" + path + "': " + why);
    }
    if (n == 0)
      break; // the file shrank while it was read
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

namespace {
/// "30 s", "0.5 s".
std::string formatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", seconds);
  return text;
}

/// Follows `path` through symbolic links (at most 40, as the kernel does)
/// to the name that is finally written: a link's relative target is taken
/// from the link's own directory. A name that does not exist yet ends the
/// walk (a dangling link creates its target).
Expected<std::string> resolveOutputPath(const std::string &path) {
  std::string current = path;
  for (int hops = 0; hops <= 40; ++hops) {
    struct stat info;
    if (::lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode))
      return current;
    std::vector<char> target(4096);
    ssize_t n = ::readlink(current.c_str(), target.data(), target.size());
    if (n < 0)
      return Expected<std::string>::error("cannot write '" + path +
                                          "': cannot read the link '" +
                                          current +
                                          "': " + std::strerror(errno));
    if (static_cast<size_t>(n) >= target.size())
      return Expected<std::string>::error(
          "cannot write '" + path + "': the link '" + current +
          "' points to a name longer than 4095 bytes");
    std::string next(target.data(), static_cast<size_t>(n));
    if (!next.empty() && next[0] != '/') {
      size_t slash = current.rfind('/');
      if (slash != std::string::npos)
        next = current.substr(0, slash + 1) + next;
    }
    current = next;
  }
  return Expected<std::string>::error(
      "cannot write '" + path +
      "': more than 40 symbolic links (a loop?) lead from it");
}

/// Writes all of `bytes` to a blocking descriptor; 0 or the errno (ENOSPC
/// for a write that takes nothing).
int writeAll(int fd, const uint8_t *bytes, size_t size) {
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd, bytes + written, size - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? errno : ENOSPC;
    written += static_cast<size_t>(n);
  }
  return 0;
}

/// Writes to a FIFO or socket-like descriptor opened non-blocking: waits
/// for room at most `timeoutMs` at a time, and turns a reader that went
/// away into EPIPE instead of the SIGPIPE that would end the process.
int writeNonBlocking(int fd, const uint8_t *bytes, size_t size,
                     int timeoutMs) {
  sigset_t pipeSet, old;
  sigemptyset(&pipeSet);
  sigaddset(&pipeSet, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipeSet, &old);
  int error = 0;
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd, bytes + written, size - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd wait = {fd, POLLOUT, 0};
      int ready = ::poll(&wait, 1, timeoutMs);
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready == 0) {
        error = ETIMEDOUT;
        break;
      }
      if (ready < 0) {
        error = errno;
        break;
      }
      continue;
    }
    error = n < 0 ? errno : EIO;
    break;
  }
  if (error == EPIPE) {
    // Take the pending SIGPIPE (if this thread raised one) before
    // unblocking, so it is not delivered afterwards.
    struct timespec zero = {0, 0};
    while (::sigtimedwait(&pipeSet, nullptr, &zero) == SIGPIPE) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return error;
}

/// Writes through to something that is not a regular file: a character
/// or block device (written in place, as `cat > /dev/null` would) or a
/// FIFO (opened without blocking; a FIFO nobody reads within the timeout
/// is an error, not a hang).
Status writeThrough(const std::string &path, const std::string &target,
                    mode_t mode, const uint8_t *bytes, size_t size) {
  const char *what = S_ISFIFO(mode) ? "FIFO" : "device";
  double timeoutSeconds = outputTimeoutSeconds();
  int fd = -1;
  if (S_ISFIFO(mode)) {
    // Opening a FIFO for writing blocks until a reader opens it; without
    // O_NONBLOCK that is a hang, with it ENXIO says nobody reads yet.
    double waited = 0;
    for (;;) {
      fd = ::open(target.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0 || errno != ENXIO || waited >= timeoutSeconds)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      waited += 0.02;
    }
    if (fd < 0 && errno == ENXIO)
      return Status::failure(
          "cannot write '" + path + "': it is a FIFO and nothing opened it "
          "for reading within " + formatSeconds(timeoutSeconds) +
          " (MOE_OUTPUT_TIMEOUT sets the wait)");
  } else {
    fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
  }
  if (fd < 0)
    return Status::failure("cannot write '" + path + "': cannot open the " +
                           what + ": " + std::strerror(errno));
  int error = 0;
  if (S_ISFIFO(mode)) {
    int timeoutMs = static_cast<int>(std::min(timeoutSeconds * 1000.0, 2e9));
    error = writeNonBlocking(fd, bytes, size, timeoutMs);
  } else {
    error = writeAll(fd, bytes, size);
  }
  ::close(fd);
  if (error == ETIMEDOUT)
    return Status::failure("cannot write '" + path + "': the FIFO's reader "
                           "took nothing for " +
                           formatSeconds(timeoutSeconds));
  if (error != 0)
    return Status::failure("cannot write '" + path + "': writing to the " +
                           what + ": " + std::strerror(error));
  return Status::success();
}
} // namespace

Expected<std::string> resolveModelPath(const std::string &path,
                                       const std::string &kind) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    return path;
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  auto isFile = [](const std::string &p) {
    struct stat s;
    return ::stat(p.c_str(), &s) == 0 && S_ISREG(s.st_mode);
  };
  if (kind == "config") {
    if (isFile(dir + "/config.json"))
      return dir + "/config.json";
    return Expected<std::string>::error(
        "'" + path + "' is a directory without a config.json (give the "
        "model's directory or its config.json)");
  }
  for (const char *name : {"model.safetensors.index.json", "model.safetensors"})
    if (isFile(dir + "/" + name))
      return dir + "/" + name;
  std::vector<std::string> found;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (struct dirent *entry = ::readdir(d)) {
      std::string name = entry->d_name;
      if (name.size() > 12 &&
          name.compare(name.size() - 12, 12, ".safetensors") == 0 &&
          isFile(dir + "/" + name))
        found.push_back(name);
    }
    ::closedir(d);
  }
  if (found.size() == 1)
    return dir + "/" + found[0];
  std::sort(found.begin(), found.end());
  std::string list;
  for (size_t i = 0; i < found.size() && i < 4; ++i)
    list += (i ? ", " : "") + found[i];
  return Expected<std::string>::error(
      "'" + path + "' is a directory without model.safetensors.index.json "
      "or model.safetensors" +
      (found.empty() ? std::string(" (and no .safetensors file)")
                     : " and with " + std::to_string(found.size()) +
                           " .safetensors files (" + list +
                           (found.size() > 4 ? ", ..." : "") +
                           "): give the index or one file"));
}

double outputTimeoutSeconds() {
  const char *text = std::getenv("MOE_OUTPUT_TIMEOUT");
  if (!text || !*text)
    return 30.0;
  char *end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value >= 0) || value > 86400)
    return 30.0;
  return value;
}

Status writeFileAtomically(const std::string &path, const void *data,
                           size_t size) {
  const auto *bytes = static_cast<const uint8_t *>(data);
  Expected<std::string> resolved = resolveOutputPath(path);
  if (!resolved)
    return Status::failure(resolved.message());
  const std::string &target = *resolved;
  struct stat info;
  bool exists = ::stat(target.c_str(), &info) == 0;
  if (exists && S_ISDIR(info.st_mode))
    return Status::failure("cannot write '" + path +
                           "': it is a directory; expected a file name");
  if (exists && S_ISSOCK(info.st_mode))
    return Status::failure("cannot write '" + path +
                           "': it is a socket; expected a regular file, a "
                           "device or a FIFO");
  if (exists && !S_ISREG(info.st_mode))
    return writeThrough(path, target, info.st_mode, bytes, size);

  std::string tmp = target + ".tmp." + std::to_string(getpid());
  auto failure = [&](const std::string &what, int error) {
    ::unlink(tmp.c_str());
    return Status::failure("cannot write '" + path + "': " + what + ": " +
                           std::strerror(error) +
                           " (the previous file, if any, is unchanged)");
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::failure("cannot write '" + path + "': cannot create '" +
                           tmp + "': " + std::strerror(errno));
  // A file written over keeps its permissions.
  if (exists)
    ::fchmod(fd, info.st_mode & 07777);
  if (int error = writeAll(fd, bytes, size); error != 0) {
    ::close(fd);
    return failure("writing", error);
  }
  if (::fsync(fd) != 0) {
    int error = errno;
    ::close(fd);
    return failure("flushing", error);
  }
  if (::close(fd) != 0)
    return failure("closing", errno);
  if (std::rename(tmp.c_str(), target.c_str()) != 0)
    return failure("renaming '" + tmp + "' into place", errno);
  return Status::success();
}

Status checkJsonDepth(const char *data, size_t size, const std::string &what,
                      int maxDepth) {
  int depth = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < size; ++i) {
    char c = data[i];
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        return Status::failure(what + ": JSON nested deeper than " +
                               std::to_string(maxDepth) + " levels (at byte " +
                               std::to_string(i) + ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return Status::success();
}

namespace {
/// A SAX reader that finds the first key given twice in one object (JSON
/// allows it, parsers keep one of the two silently: which one differs).
class DuplicateKeys : public nlohmann::json_sax<nlohmann::json> {
public:
  std::string duplicate, where;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t &) override {
    return value();
  }
  bool string(string_t &) override { return value(); }
  bool binary(binary_t &) override { return value(); }
  bool start_object(std::size_t) override {
    frames.push_back({true, {}, pending()});
    return true;
  }
  bool key(string_t &name) override {
    Frame &frame = frames.back();
    if (!frame.keys.insert(name).second) {
      duplicate = name;
      where = frame.path;
      return false; // stop here
    }
    frame.lastKey = name;
    return true;
  }
  bool end_object() override {
    frames.pop_back();
    return value();
  }
  bool start_array(std::size_t) override {
    frames.push_back({false, {}, pending()});
    return true;
  }
  bool end_array() override {
    frames.pop_back();
    return value();
  }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &) override {
    return false; // the caller's parser reports syntax errors
  }

private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string path, lastKey;
    size_t index = 0;
  };
  std::vector<Frame> frames;

  /// The path of the value that starts now ("text_config", "a[2].b").
  std::string pending() const {
    if (frames.empty())
      return "";
    const Frame &f = frames.back();
    std::string step = f.object ? f.lastKey : "[" + std::to_string(f.index) + "]";
    if (f.path.empty() || !f.object)
      return f.path + step;
    return f.path + "." + step;
  }
  bool value() {
    if (!frames.empty() && !frames.back().object)
      ++frames.back().index;
    return true;
  }
};
} // namespace

Status checkJsonText(const char *data, size_t size, const std::string &what,
                     int maxDepth) {
  if (Status s = checkJsonDepth(data, size, what, maxDepth); !s.ok())
    return s;
  DuplicateKeys sax;
  (void)nlohmann::json::sax_parse(data, data + size, &sax,
                                  nlohmann::json::input_format_t::json,
                                  /*strict=*/false);
  if (!sax.duplicate.empty())
    return Status::failure(
        what + ": key '" + sax.duplicate + "' appears twice in " +
        (sax.where.empty() ? std::string("the top-level object")
                           : "'" + sax.where + "'") +
        " (which of the two a reader takes differs; keep one)");
  return Status::success();
}

//===----------------------------------------------------------------------===//
// SHA-256 (FIPS 180-4)
//===----------------------------------------------------------------------===//

namespace {
constexpr uint32_t kSha256K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
} // namespace

Sha256::Sha256()
    : h{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c,
        0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) |
           (uint32_t(p[4 * i + 2]) << 8) | uint32_t(p[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5],
           g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) +
                  ((e & f) ^ (~e & g)) + kSha256K[i] + w[i];
    uint32_t t2 =
        (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d;
  h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void Sha256::update(const void *data, size_t size) {
  const auto *p = static_cast<const uint8_t *>(data);
  total += size;
  if (buffered) {
    size_t take = std::min(size, sizeof(buffer) - buffered);
    std::memcpy(buffer + buffered, p, take);
    buffered += take;
    p += take;
    size -= take;
    if (buffered < sizeof(buffer))
      return;
    block(buffer);
    buffered = 0;
  }
  for (; size >= 64; p += 64, size -= 64)
    block(p);
  std::memcpy(buffer, p, size);
  buffered = size;
}

std::string Sha256::hexDigest() {
  uint64_t bits = total * 8;
  uint8_t pad[72] = {0x80};
  size_t padSize = (buffered < 56 ? 56 : 120) - buffered;
  for (int i = 0; i < 8; ++i)
    pad[padSize + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(pad, padSize + 8);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint32_t word : h)
    for (int shift = 28; shift >= 0; shift -= 4)
      out.push_back(kHex[(word >> shift) & 0xf]);
  return out;
}

/// Memory the kernel says can still be allocated, or nullopt when unknown.
static std::optional<uint64_t> availableMemory() {
  FILE *file = std::fopen("/proc/meminfo", "r");
  if (!file)
    return std::nullopt;
  char line[256];
  std::optional<uint64_t> bytes;
  while (std::fgets(line, sizeof(line), file)) {
    unsigned long long kib;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      bytes = static_cast<uint64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(file);
  return bytes;
}

/// Refuses allocations the machine cannot hold (keeping 512 MiB for
/// everything else), rather than letting the process be killed half-way.
Status checkAllocation(uint64_t bytes, const std::string &what) {
  std::optional<uint64_t> available = availableMemory();
  constexpr uint64_t kHeadroom = 512ull << 20;
  if (available && bytes + kHeadroom > *available)
    return Status::failure(
        what + " need " + std::to_string(bytes >> 20) + " MiB, more than the " +
        std::to_string(*available >> 20) + " MiB of memory available");
  return Status::success();
}

void parallelFor(int64_t count, int threads,
                 const std::function<void(int64_t)> &fn) {
  int64_t workers =
      std::clamp<int64_t>(threads, 1, std::max<int64_t>(count, 1));
  auto work = [&](int64_t worker) {
    for (int64_t i = worker; i < count; i += workers)
      fn(i);
  };
  // A thread that cannot start (a process at its limit) leaves its share
  // to the caller.
  std::vector<std::thread> pool;
  std::vector<int64_t> unstarted;
  for (int64_t w = 1; w < workers; ++w) {
    try {
      pool.emplace_back(work, w);
    } catch (const std::system_error &) {
      unstarted.push_back(w);
    }
  }
  work(0);
  for (int64_t w : unstarted)
    work(w);
  for (std::thread &t : pool)
    t.join();
}

/// Elements per item of the parallel scans: large enough that a thread's
/// start is nothing next to its scan, and a fixed size, so that results do
/// not depend on the thread count.
constexpr int64_t kScanChunk = 1 << 20;

/// The index of the first non-finite f32 in values[0, n), or -1. A block
/// is scanned without branches (an exponent of all ones is Inf or NaN) and
/// only a block with a non-finite value is searched.
static int64_t firstNonFinite(const uint8_t *values, int64_t n) {
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    int64_t end = std::min(n, start + kBlock);
    uint32_t bad = 0;
    for (int64_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, values + i * 4, 4);
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (!bad)
      continue;
    for (int64_t i = start; i < end; ++i)
      if (!std::isfinite(loadFloat(values + i * 4, DType::F32)))
        return i;
  }
  return -1;
}

bool allFinite(const Tensor &tensor, int64_t *first, int threads) {
  if (tensor.dtype == DType::I32 || tensor.dtype == DType::I64)
    return true;
  size_t n = static_cast<size_t>(tensor.numElements());
  size_t size = dtypeSize(tensor.dtype);
  if (n * size > tensor.data.size())
    n = tensor.data.size() / size;
  if (tensor.dtype == DType::F32) {
    // The common case (training state), at memory speed, in chunks.
    auto count = static_cast<int64_t>(n);
    int64_t chunks = (count + kScanChunk - 1) / kScanChunk;
    std::vector<int64_t> found(chunks, -1);
    parallelFor(chunks, threads, [&](int64_t c) {
      int64_t begin = c * kScanChunk;
      int64_t at = firstNonFinite(tensor.data.data() + begin * 4,
                                  std::min(kScanChunk, count - begin));
      found[c] = at < 0 ? -1 : begin + at;
    });
    for (int64_t at : found)
      if (at >= 0) {
        if (first)
          *first = at;
        return false;
      }
    return true;
  }
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(loadFloat(tensor.data.data() + i * size, tensor.dtype))) {
      if (first)
        *first = static_cast<int64_t>(i);
      return false;
    }
  return true;
}

/// sum of values[i]^2 in eight partial sums (in double) in a fixed order,
/// which the compiler vectorizes.
static double chunkSumOfSquares(const float *values, int64_t count) {
  double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    for (int lane = 0; lane < 8; ++lane) {
      double v = values[i + lane];
      partial[lane] += v * v;
    }
  for (; i < count; ++i) {
    double v = values[i];
    partial[0] += v * v;
  }
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

double sumOfSquares(const float *values, int64_t count, int threads) {
  // One sum per fixed-size chunk, the chunks' sums added in order.
  int64_t chunks = (count + kScanChunk - 1) / kScanChunk;
  std::vector<double> sums(chunks, 0.0);
  parallelFor(chunks, threads, [&](int64_t c) {
    int64_t begin = c * kScanChunk;
    sums[c] =
        chunkSumOfSquares(values + begin, std::min(kScanChunk, count - begin));
  });
  double total = 0;
  for (double sum : sums)
    total += sum;
  return total;
}

} // namespace moe::rt
