//===- Support.cpp - Errors, dtypes and tensors of the runtime ------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Support.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
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
constexpr DTypeInfo kDTypes[] = {{DType::F32, 4, "F32", "f32"},
                                 {DType::BF16, 2, "BF16", "bf16"},
                                 {DType::F16, 2, "F16", "f16"},
                                 {DType::I32, 4, "I32", "i32"},
                                 {DType::I64, 8, "I64", "i64"}};

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

static bool isFloat(DType d) {
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

Expected<Tensor> convertTensor(const Tensor &tensor, DType to) {
  if (tensor.dtype == to)
    return tensor;
  if (!isFloat(tensor.dtype) || !isFloat(to))
    return Expected<Tensor>::error(std::string("cannot convert ") +
                                   mlirName(tensor.dtype) + " to " +
                                   mlirName(to));
  Tensor out = Tensor::zeros(to, tensor.shape);
  size_t n = static_cast<size_t>(tensor.numElements());
  size_t inSize = dtypeSize(tensor.dtype), outSize = dtypeSize(to);
  for (size_t i = 0; i < n; ++i)
    storeFloat(out.data.data() + i * outSize, to,
               loadFloat(tensor.data.data() + i * inSize, tensor.dtype));
  return out;
}

Expected<std::vector<uint8_t>> readFile(const std::string &path) {
  FILE *file = std::fopen(path.c_str(), "rb");
  if (!file)
    return Expected<std::vector<uint8_t>>::error("cannot open '" + path +
                                                 "': " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), file)) > 0)
    bytes.insert(bytes.end(), chunk, chunk + n);
  bool failed = std::ferror(file);
  std::fclose(file);
  if (failed)
    return Expected<std::vector<uint8_t>>::error("cannot read '" + path + "'");
  return bytes;
}

Status writeFileAtomically(const std::string &path, const void *data,
                           size_t size) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::failure("cannot create '" + tmp +
                           "': " + std::strerror(errno));
  const auto *bytes = static_cast<const uint8_t *>(data);
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd, bytes + written, size - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::failure("cannot write '" + tmp + "': " + why);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Status::failure("cannot flush '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::failure("cannot rename '" + tmp + "' to '" + path +
                           "': " + why);
  }
  return Status::success();
}

} // namespace moe::rt
