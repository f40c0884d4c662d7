//===- Support.h - Errors, dtypes and tensors of the runtime ----*- C++ -*-===//
//
// Part of moe-compiler's runtime, which depends on no LLVM/MLIR library so
// that frameworks can embed it.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_SUPPORT_H
#define MOE_RUNTIME_SUPPORT_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace moe::rt {

/// A value or an error message (one line: what, where, what was expected).
template <typename T> class Expected {
public:
  Expected(T value) : storage(std::move(value)) {}
  static Expected error(std::string message) {
    Expected e;
    e.storage = Error{std::move(message)};
    return e;
  }
  explicit operator bool() const { return storage.index() == 0; }
  T &operator*() { return std::get<0>(storage); }
  const T &operator*() const { return std::get<0>(storage); }
  T *operator->() { return &std::get<0>(storage); }
  const T *operator->() const { return &std::get<0>(storage); }
  const std::string &message() const { return std::get<1>(storage).message; }

private:
  struct Error {
    std::string message;
  };
  Expected() = default;
  std::variant<T, Error> storage;
};

/// An error or success, for functions with no value.
struct Status {
  std::string error;
  bool ok() const { return error.empty(); }
  static Status success() { return {}; }
  static Status failure(std::string message) {
    return {message.empty() ? std::string("unknown error") : message};
  }
};

/// Element types of tensors the runtime handles.
enum class DType { F32, BF16, F16, I32, I64 };

/// Size of one element in bytes.
size_t dtypeSize(DType dtype);
/// Names as in safetensors headers ("F32", "BF16", ...).
const char *safetensorsName(DType dtype);
std::optional<DType> parseSafetensorsName(const std::string &name);
/// Names as in MLIR and manifests ("f32", "bf16", ...).
const char *mlirName(DType dtype);
std::optional<DType> parseMlirName(const std::string &name);

/// Number of elements of `shape`, or nullopt on a negative size or
/// overflow.
std::optional<int64_t> elementCount(const std::vector<int64_t> &shape);
std::string formatShape(const std::vector<int64_t> &shape);

/// A host tensor owning its bytes (row-major, contiguous).
struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  int64_t numElements() const;
  template <typename T> T *as() { return reinterpret_cast<T *>(data.data()); }
  template <typename T> const T *as() const {
    return reinterpret_cast<const T *>(data.data());
  }
};

/// Converts between float types (f32, bf16, f16; round to nearest even).
/// Integer dtypes convert only to themselves.
Expected<Tensor> convertTensor(const Tensor &tensor, DType to);

/// Writes element `index` of a float tensor (f32, bf16 or f16).
void setFloatElement(Tensor &tensor, size_t index, float value);

float bf16ToFloat(uint16_t bits);
uint16_t floatToBf16(float value);
float f16ToFloat(uint16_t bits);
uint16_t floatToF16(float value);

/// Reads a whole file, or says why not.
Expected<std::vector<uint8_t>> readFile(const std::string &path);
/// Writes a file atomically: a temporary beside it, then rename.
Status writeFileAtomically(const std::string &path, const void *data,
                           size_t size);

} // namespace moe::rt

#endif // MOE_RUNTIME_SUPPORT_H
