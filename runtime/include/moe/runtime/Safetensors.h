//===- Safetensors.h - safetensors reader and writer ------------*- C++ -*-===//
//
// Part of moe-compiler's runtime. The format: an 8-byte little-endian header
// size N, N bytes of JSON mapping tensor names to {dtype, shape,
// data_offsets} (offsets relative to the data section), then the data.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_SAFETENSORS_H
#define MOE_RUNTIME_SAFETENSORS_H

#include "moe/runtime/Support.h"

#include <map>
#include <memory>
#include <string>

namespace moe::rt {

/// One tensor's entry in a safetensors header.
struct SafetensorsEntry {
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; // byte range in the data section
};

/// A parsed, validated safetensors file held in memory.
class SafetensorsFile {
public:
  /// Maps and validates `path`: header size inside the file, JSON of the
  /// expected form, supported dtypes, offsets inside the data section and
  /// not overlapping, byte sizes matching dtype and shape. The file is
  /// memory-mapped, so a checkpoint larger than memory can be read from.
  static Expected<SafetensorsFile> open(const std::string &path);
  /// The same on bytes already in memory; `name` appears in messages.
  static Expected<SafetensorsFile> parse(std::vector<uint8_t> bytes,
                                         const std::string &name);

  bool contains(const std::string &tensor) const {
    return entries.count(tensor) != 0;
  }
  const std::map<std::string, SafetensorsEntry> &getEntries() const {
    return entries;
  }
  /// Copies one tensor out, or says it is missing.
  Expected<Tensor> get(const std::string &tensor) const;
  const std::string &getName() const { return name; }

private:
  static Expected<SafetensorsFile>
  parseBytes(std::shared_ptr<const uint8_t> bytes, size_t size,
             const std::string &name);

  std::string name;
  std::shared_ptr<const uint8_t> bytes; // the whole file
  size_t size = 0;
  size_t dataStart = 0;
  std::map<std::string, SafetensorsEntry> entries;
};

/// The tensors of a checkpoint: one safetensors file, or a sharded
/// checkpoint's index (`model.safetensors.index.json`: a `weight_map` from
/// each tensor's name to its shard, a file in the index's directory). A
/// shard is opened (memory-mapped and validated) when one of its tensors
/// is first asked for, so a layer reads only the shards that hold it.
class Checkpoint {
public:
  /// An index when `path` ends in `.json`, else a safetensors file.
  static Expected<Checkpoint> open(const std::string &path);
  /// A checkpoint of one file already open.
  explicit Checkpoint(SafetensorsFile file);
  /// A checkpoint of tensors already in memory (a framework's state
  /// dict), called `name` in messages.
  Checkpoint(std::map<std::string, Tensor> tensors, std::string name);

  bool contains(const std::string &tensor) const;
  /// Copies one tensor out (opening its shard), or says why it cannot.
  Expected<Tensor> get(const std::string &tensor) const;
  /// The file `tensor` is in (its shard), or the checkpoint's name.
  std::string fileOf(const std::string &tensor) const;
  /// The prefixes P under which the checkpoint holds a tensor P + `name`
  /// (where a whole model's checkpoint keeps a layer's tensor), sorted.
  std::vector<std::string> prefixesOf(const std::string &name) const;
  const std::string &getName() const { return name; }

  /// A checkpoint without tensors.
  Checkpoint() = default;

private:
  std::string name;
  std::shared_ptr<SafetensorsFile> single;
  std::shared_ptr<const std::map<std::string, Tensor>> memory;
  // An index: tensor -> shard file name, the shards' directory, and the
  // shards opened so far.
  std::map<std::string, std::string> weightMap;
  std::string directory;
  mutable std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
};

/// The bytes of a safetensors file holding `tensors` (sorted by name,
/// contiguous, header padded to 8 bytes); the tensors are not copied.
Expected<std::vector<uint8_t>>
serializeSafetensors(const std::map<std::string, const Tensor *> &tensors);

/// Writes tensors (sorted by name, contiguous, header padded to 8 bytes)
/// atomically to `path`.
Status writeSafetensors(const std::string &path,
                        const std::map<std::string, Tensor> &tensors);

} // namespace moe::rt

#endif // MOE_RUNTIME_SAFETENSORS_H
