//===- Safetensors.cpp - safetensors reader and writer --------------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moe::rt {

using json = nlohmann::json;

/// Largest header accepted (the format's reference reader uses 100 MB).
static constexpr uint64_t kMaxHeaderSize = 100u << 20;

Expected<SafetensorsFile> SafetensorsFile::open(const std::string &path) {
  using Result = Expected<SafetensorsFile>;
  Expected<std::pair<int, uint64_t>> opened = openRegularFile(path);
  if (!opened)
    return Result::error(opened.message());
  int fd = opened->first;
  auto size = static_cast<size_t>(opened->second);
  if (size == 0) {
    ::close(fd);
    return parse({}, path);
  }
  void *map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED)
    return Result::error("cannot map '" + path + "': " + std::strerror(errno));
  std::shared_ptr<const uint8_t> bytes(
      static_cast<const uint8_t *>(map),
      [size](const uint8_t *p) { ::munmap(const_cast<uint8_t *>(p), size); });
  return parseBytes(std::move(bytes), size, path);
}

Expected<SafetensorsFile> SafetensorsFile::parse(std::vector<uint8_t> bytes,
                                                 const std::string &name) {
  auto owner = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  std::shared_ptr<const uint8_t> data(owner, owner->data());
  return parseBytes(std::move(data), owner->size(), name);
}

Expected<SafetensorsFile>
SafetensorsFile::parseBytes(std::shared_ptr<const uint8_t> bytes, size_t size,
                            const std::string &name) {
  using Result = Expected<SafetensorsFile>;
  auto fail = [&](const std::string &what) {
    return Result::error(name + ": invalid safetensors file: " + what);
  };
  if (size < 8)
    return fail("expected at least 8 bytes for the header size, got " +
                std::to_string(size));
  const uint8_t *data = bytes.get();
  uint64_t headerSize = 0;
  for (int i = 7; i >= 0; --i)
    headerSize = (headerSize << 8) | data[i];
  if (headerSize > kMaxHeaderSize || headerSize > size - 8)
    return fail("header size " + std::to_string(headerSize) +
                " runs past the end of the file (" + std::to_string(size) +
                " bytes)");

  const char *headerBegin = reinterpret_cast<const char *>(data + 8);
  if (Status s = checkJsonText(headerBegin, headerSize, "header"); !s.ok())
    return fail(s.error);
  json header = json::parse(headerBegin, headerBegin + headerSize, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return fail("expected a JSON object as header");

  SafetensorsFile file;
  file.name = name;
  file.dataStart = 8 + static_cast<size_t>(headerSize);
  uint64_t dataSize = size - file.dataStart;
  for (auto &[key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        return fail("expected '__metadata__' to be an object");
      continue;
    }
    std::string where = "tensor '" + key + "'";
    if (!value.is_object())
      return fail(where + ": expected an object");
    auto dtypeIt = value.find("dtype");
    auto shapeIt = value.find("shape");
    auto offsetsIt = value.find("data_offsets");
    if (dtypeIt == value.end() || !dtypeIt->is_string())
      return fail(where + ": expected a string 'dtype'");
    if (shapeIt == value.end() || !shapeIt->is_array())
      return fail(where + ": expected an array 'shape'");
    if (offsetsIt == value.end() || !offsetsIt->is_array() ||
        offsetsIt->size() != 2)
      return fail(where + ": expected 'data_offsets' as [begin, end]");
    SafetensorsEntry entry;
    std::optional<DType> dtype =
        parseSafetensorsName(dtypeIt->get<std::string>());
    if (!dtype)
      return fail(where + ": unsupported dtype '" +
                  dtypeIt->get<std::string>() +
                  "' (expected F32, BF16, F16, F8_E4M3, I32 or I64)");
    entry.dtype = *dtype;
    for (const json &dim : *shapeIt) {
      if (!dim.is_number_unsigned())
        return fail(where + ": expected non-negative integer dimensions");
      uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(INT64_MAX))
        return fail(where + ": dimension too large");
      entry.shape.push_back(static_cast<int64_t>(d));
    }
    for (const json &offset : *offsetsIt)
      if (!offset.is_number_unsigned())
        return fail(where + ": expected non-negative integer data_offsets");
    entry.begin = (*offsetsIt)[0].get<uint64_t>();
    entry.end = (*offsetsIt)[1].get<uint64_t>();
    if (entry.begin > entry.end || entry.end > dataSize)
      return fail(where + ": data_offsets [" + std::to_string(entry.begin) +
                  ", " + std::to_string(entry.end) +
                  "] outside the data section of " + std::to_string(dataSize) +
                  " bytes");
    std::optional<int64_t> count = elementCount(entry.shape);
    uint64_t expected;
    if (!count || __builtin_mul_overflow(static_cast<uint64_t>(*count),
                                         dtypeSize(entry.dtype), &expected))
      return fail(where + ": shape " + formatShape(entry.shape) + " overflows");
    if (expected != entry.end - entry.begin)
      return fail(where + ": " + dtypeIt->get<std::string>() + " " +
                  formatShape(entry.shape) + " needs " +
                  std::to_string(expected) + " bytes, data_offsets hold " +
                  std::to_string(entry.end - entry.begin));
    file.entries.emplace(key, std::move(entry));
  }

  // The format's rule: the tensors tile the data section exactly, with
  // no two sharing bytes, no hole between them and nothing after the last.
  std::vector<std::pair<uint64_t, std::string>> starts;
  for (auto &[key, entry] : file.entries)
    if (entry.end > entry.begin)
      starts.emplace_back(entry.begin, key);
  std::sort(starts.begin(), starts.end());
  uint64_t covered = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    const SafetensorsEntry &entry = file.entries[starts[i].second];
    if (i > 0 && starts[i].first < covered)
      return fail("tensors '" + starts[i - 1].second + "' and '" +
                  starts[i].second + "' overlap");
    if (starts[i].first > covered)
      return fail("bytes [" + std::to_string(covered) + ", " +
                  std::to_string(starts[i].first) +
                  ") of the data section belong to no tensor (before '" +
                  starts[i].second + "')");
    covered = entry.end;
  }
  if (covered != dataSize)
    return fail(std::to_string(dataSize - covered) +
                " trailing bytes after the last tensor (the data section "
                "holds " +
                std::to_string(dataSize) + " bytes, the tensors " +
                std::to_string(covered) + ")");
  file.bytes = std::move(bytes);
  file.size = size;
  return file;
}

Expected<Tensor> SafetensorsFile::get(const std::string &tensor) const {
  auto it = entries.find(tensor);
  if (it == entries.end())
    return Expected<Tensor>::error(name + ": no tensor named '" + tensor + "'");
  Tensor t;
  t.dtype = it->second.dtype;
  t.shape = it->second.shape;
  const uint8_t *base = bytes.get() + dataStart;
  t.data.assign(base + it->second.begin, base + it->second.end);
  return t;
}

Expected<std::vector<uint8_t>>
serializeSafetensors(const std::map<std::string, const Tensor *> &tensors) {
  using Result = Expected<std::vector<uint8_t>>;
  json header = json::object();
  uint64_t offset = 0;
  for (auto &[name, pointer] : tensors) {
    const Tensor &tensor = *pointer;
    std::optional<int64_t> count = elementCount(tensor.shape);
    if (!count || static_cast<uint64_t>(*count) * dtypeSize(tensor.dtype) !=
                      tensor.data.size())
      return Result::error("tensor '" + name + "' has " +
                           std::to_string(tensor.data.size()) +
                           " bytes, which does not match its shape " +
                           formatShape(tensor.shape));
    header[name] = {{"dtype", safetensorsName(tensor.dtype)},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + tensor.data.size()}}};
    offset += tensor.data.size();
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0)
    text.push_back(' ');
  std::vector<uint8_t> out(8);
  uint64_t size = text.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<uint8_t>(size >> (8 * i));
  out.insert(out.end(), text.begin(), text.end());
  for (auto &[name, tensor] : tensors)
    out.insert(out.end(), tensor->data.begin(), tensor->data.end());
  return out;
}

Status writeSafetensors(const std::string &path,
                        const std::map<std::string, Tensor> &tensors) {
  std::map<std::string, const Tensor *> pointers;
  for (const auto &[name, tensor] : tensors)
    pointers[name] = &tensor;
  Expected<std::vector<uint8_t>> bytes = serializeSafetensors(pointers);
  if (!bytes)
    return Status::failure(bytes.message());
  return writeFileAtomically(path, bytes->data(), bytes->size());
}

//===----------------------------------------------------------------------===//
// Checkpoint
//===----------------------------------------------------------------------===//

Checkpoint::Checkpoint(SafetensorsFile file)
    : name(file.getName()),
      single(std::make_shared<SafetensorsFile>(std::move(file))) {}

Checkpoint::Checkpoint(std::map<std::string, Tensor> tensors, std::string name)
    : name(std::move(name)),
      memory(std::make_shared<const std::map<std::string, Tensor>>(
          std::move(tensors))) {}

Expected<Checkpoint> Checkpoint::open(const std::string &given) {
  using Result = Expected<Checkpoint>;
  // A model's directory: its index, or its one file.
  Expected<std::string> resolved = resolveModelPath(given, "checkpoint");
  if (!resolved)
    return Result::error(resolved.message());
  const std::string &path = *resolved;
  bool index =
      path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (!index) {
    Expected<SafetensorsFile> file = SafetensorsFile::open(path);
    if (!file)
      return Result::error(file.message());
    return Checkpoint(std::move(*file));
  }
  Expected<std::vector<uint8_t>> bytes = readFile(path);
  if (!bytes)
    return Result::error(bytes.message());
  auto fail = [&](const std::string &what) {
    return Result::error(path + ": invalid checkpoint index: " + what);
  };
  const char *text = reinterpret_cast<const char *>(bytes->data());
  if (Status s = checkJsonText(text, bytes->size(), path); !s.ok())
    return Result::error(s.error);
  json root = json::parse(text, text + bytes->size(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded())
    return fail("not JSON");
  if (!root.is_object() || !root.contains("weight_map") ||
      !root["weight_map"].is_object())
    return fail("expected an object with a 'weight_map' object (tensor "
                "name -> shard file)");
  Checkpoint checkpoint;
  checkpoint.name = path;
  size_t slash = path.find_last_of('/');
  checkpoint.directory =
      slash == std::string::npos ? "." : path.substr(0, slash);
  for (auto &[tensor, shard] : root["weight_map"].items()) {
    if (!shard.is_string())
      return fail("the shard of '" + tensor + "' is not a string");
    std::string file = shard.get<std::string>();
    // Shards are files next to the index, as the Hugging Face hub has
    // them: no directories, so an index cannot name a file elsewhere.
    if (file.empty() || file.find('/') != std::string::npos || file == "." ||
        file == "..")
      return fail("the shard of '" + tensor + "' is '" + file +
                  "', expected a file name in the index's directory");
    checkpoint.weightMap[tensor] = file;
  }
  return checkpoint;
}

bool Checkpoint::contains(const std::string &tensor) const {
  if (memory)
    return memory->count(tensor) != 0;
  return single ? single->contains(tensor) : weightMap.count(tensor) != 0;
}

std::vector<std::string>
Checkpoint::prefixesOf(const std::string &tensor) const {
  std::vector<std::string> prefixes;
  auto look = [&](const std::string &key) {
    if (key.size() > tensor.size() &&
        key.compare(key.size() - tensor.size(), tensor.size(), tensor) == 0)
      prefixes.push_back(key.substr(0, key.size() - tensor.size()));
  };
  if (memory)
    for (const auto &[key, value] : *memory)
      look(key);
  else if (single)
    for (const auto &[key, entry] : single->getEntries())
      look(key);
  else
    for (const auto &[key, shard] : weightMap)
      look(key);
  std::sort(prefixes.begin(), prefixes.end());
  return prefixes;
}

std::string Checkpoint::fileOf(const std::string &tensor) const {
  auto it = weightMap.find(tensor);
  return it == weightMap.end() ? name : directory + "/" + it->second;
}

Expected<Tensor> Checkpoint::get(const std::string &tensor) const {
  if (memory) {
    auto it = memory->find(tensor);
    if (it == memory->end())
      return Expected<Tensor>::error(name + ": no tensor '" + tensor + "'");
    return it->second;
  }
  if (single)
    return single->get(tensor);
  auto it = weightMap.find(tensor);
  if (it == weightMap.end())
    return Expected<Tensor>::error(name + ": no tensor '" + tensor +
                                   "' in the index");
  std::shared_ptr<SafetensorsFile> &shard = shards[it->second];
  if (!shard) {
    Expected<SafetensorsFile> file =
        SafetensorsFile::open(directory + "/" + it->second);
    if (!file)
      return Expected<Tensor>::error(name + ": shard of '" + tensor +
                                     "': " + file.message());
    shard = std::make_shared<SafetensorsFile>(std::move(*file));
  }
  if (!shard->contains(tensor))
    return Expected<Tensor>::error(name + ": the index puts '" + tensor +
                                   "' in " + shard->getName() +
                                   ", which does not hold it");
  return shard->get(tensor);
}

} // namespace moe::rt
