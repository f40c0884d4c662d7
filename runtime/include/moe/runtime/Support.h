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
#include <functional>
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
/// F8E4M3 (safetensors F8_E4M3, the e4m3fn format: no infinities) is read
/// from checkpoints only, as the block-scaled weights of FP8 checkpoints.
enum class DType { F32, BF16, F16, I32, I64, F8E4M3, U8 };

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

/// Whether `s` ends with `suffix`.
bool endsWith(const std::string &s, const std::string &suffix);

/// An allocator of storage aligned to a cache line (64 bytes).
template <typename T> struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U> CacheLineAllocator(const CacheLineAllocator<U> &) {}
  T *allocate(size_t n) {
    return static_cast<T *>(
        ::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T *p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <typename U> bool operator==(const CacheLineAllocator<U> &) const {
    return true;
  }
  template <typename U> bool operator!=(const CacheLineAllocator<U> &) const {
    return false;
  }
};

/// Bytes that start on a cache line: a tensor's rows whose size is a
/// multiple of 64 bytes then each start on one too, and the compiled
/// code's vector loads of them never straddle two lines (which halved the
/// host GEMMs' load throughput on f32 weights).
using AlignedBytes = std::vector<uint8_t, CacheLineAllocator<uint8_t>>;

/// A host tensor owning its bytes (row-major, contiguous, 64-byte aligned).
struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  AlignedBytes data;

  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  int64_t numElements() const;
  template <typename T> T *as() { return reinterpret_cast<T *>(data.data()); }
  template <typename T> const T *as() const {
    return reinterpret_cast<const T *>(data.data());
  }
};

/// f32, bf16 or f16.
bool isFloatType(DType d);

/// Converts between float types (f32, bf16, f16; round to nearest even).
/// Integer dtypes convert only to themselves.
Expected<Tensor> convertTensor(const Tensor &tensor, DType to);

/// Converts `n` elements of float type `from` at `src` to `to` at `dst`
/// (f32, bf16, f16; round to nearest even), as convertTensor does: f32 <->
/// bf16, a layer's input and output, in typed loops, and a large count
/// split over the machine's cores.
void convertFloats(const uint8_t *src, DType from, uint8_t *dst, DType to,
                   size_t n);

/// Writes element `index` of a float tensor (f32, bf16 or f16).
void setFloatElement(Tensor &tensor, size_t index, float value);

float bf16ToFloat(uint16_t bits);
uint16_t floatToBf16(float value);
float f16ToFloat(uint16_t bits);
uint16_t floatToF16(float value);
/// The value of an e4m3fn byte (NaN for S.1111.111).
float fp8e4m3ToFloat(uint8_t bits);
/// The e4m3fn byte nearest to `value` (ties to an even code), saturated to
/// +-448 (no infinities); NaN for NaN.
uint8_t floatToFp8e4m3(float value);

/// Rows and columns of an FP8 weight's scale block (DeepSeek-V3's).
constexpr int64_t kFp8Block = 128;

/// Scale blocks covering `n` rows or columns.
inline int64_t fp8Blocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

/// Quantizes a rows x cols f32 matrix (row-major) to e4m3 `codes` and one
/// f32 `scales` entry per 128 x 128 block ([ceil(rows / 128), ceil(cols /
/// 128)], row-major): with `a` the block's largest magnitude, its values
/// become e4m3(w * (448 / a)) and its scale a / 448, so w ~ code * scale (a
/// block of zeros gets scale 1). With `perMatrix` (the per-tensor
/// recipe), `a` is the whole matrix's largest magnitude, and every block
/// gets the same scale. Returns false if the matrix holds a NaN or an
/// infinity.
bool quantizeFp8Blocks(const float *w, int64_t rows, int64_t cols,
                       uint8_t *codes, float *scales, bool perMatrix = false);

/// The f32 values of the e4m3 `codes` ([..., N, K]) with their block
/// `scales` ([..., ceil(N / 128), ceil(K / 128)] f32): code times its
/// block's scale. Fails on mismatched shapes or dtypes.
Expected<Tensor> dequantizeFp8Blocks(const Tensor &codes, const Tensor &scales);

/// Largest file readFile takes unless told otherwise (bundles, manifests,
/// configs, checkpoint markers; weights are memory-mapped instead).
constexpr uint64_t kMaxReadBytes = 4ull << 30;

/// Opens `path` for reading if it is a regular file (never a device, FIFO,
/// socket or directory; opening does not block on a FIFO) and returns its
/// descriptor and size, or says why not.
Expected<std::pair<int, uint64_t>> openRegularFile(const std::string &path);

/// Reads a whole regular file of at most `limit` bytes (checked before
/// anything is allocated), or says why not.
Expected<std::vector<uint8_t>> readFile(const std::string &path,
                                        uint64_t limit = kMaxReadBytes);
/// Writes an output file the way a user who names it expects:
/// - a regular file (or a new name) is replaced atomically: a temporary
///   beside it, fsynced, then renamed over it (its permissions kept); on
///   failure the old file is untouched and the message names it and the
///   OS error;
/// - a symbolic link is followed, and its target written atomically (the
///   link stays a link);
/// - a character or block device (/dev/null) is written in place, never
///   replaced by a file;
/// - a FIFO is written in place once a reader opens it; a FIFO that nobody
///   reads (or that stops reading) for outputTimeoutSeconds() is an error,
///   never a hang;
/// - a directory or a socket is refused.
Status writeFileAtomically(const std::string &path, const void *data,
                           size_t size);

/// A model directory as Hugging Face users pass it, resolved to the file
/// wanted inside: for kind "config", DIR/config.json; for kind
/// "checkpoint", DIR/model.safetensors.index.json, else
/// DIR/model.safetensors, else the directory's only *.safetensors file.
/// A path that is not a directory is returned as it is; a directory
/// without the file is one error listing what was looked for.
Expected<std::string> resolveModelPath(const std::string &path,
                                       const std::string &kind);

/// How long an output waits for a FIFO's reader: $MOE_OUTPUT_TIMEOUT
/// seconds, 30 when unset or not a number in [0, 86400].
double outputTimeoutSeconds();

/// Deepest nesting of arrays and objects the JSON readers accept (the
/// parsers recurse; a deeper document would exhaust the stack).
constexpr int kMaxJsonDepth = 256;

/// Checks that the JSON text `data` nests arrays and objects at most
/// `maxDepth` deep (strings are skipped); the message names `what`.
Status checkJsonDepth(const char *data, size_t size, const std::string &what,
                      int maxDepth = kMaxJsonDepth);

/// checkJsonDepth, then that no object gives one key twice (the message
/// names the key and the object's path): what every JSON reader of the
/// project checks before it parses.
Status checkJsonText(const char *data, size_t size, const std::string &what,
                     int maxDepth = kMaxJsonDepth);

/// SHA-256 (FIPS 180-4), for checkpoint integrity.
class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t size);
  /// The digest as 64 lower-case hex digits; the object is spent after.
  std::string hexDigest();

private:
  void block(const uint8_t *p);
  uint32_t h[8];
  uint8_t buffer[64];
  size_t buffered = 0;
  uint64_t total = 0;
};

/// Refuses an allocation of `bytes` the machine cannot hold (keeping 512
/// MiB for everything else): the message names `what` and both sizes.
Status checkAllocation(uint64_t bytes, const std::string &what);

/// True when every element of a float tensor is finite (integer tensors
/// always are); `first` gets the index of the first that is not. Large f32
/// tensors are scanned by up to `threads` threads.
bool allFinite(const Tensor &tensor, int64_t *first = nullptr, int threads = 1);

/// sum of values[i]^2 in double, in an order that depends on `count` only
/// (not on `threads`, the most threads that share the work).
double sumOfSquares(const float *values, int64_t count, int threads = 1);

/// fn(i) for every i in [0, count), on up to `threads` threads (the
/// caller's included); fn must touch only what item i owns.
void parallelFor(int64_t count, int threads,
                 const std::function<void(int64_t)> &fn);

} // namespace moe::rt

#endif // MOE_RUNTIME_SUPPORT_H
