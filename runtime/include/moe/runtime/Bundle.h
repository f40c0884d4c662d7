//===- Bundle.h - The single-file bundle moe-compile writes -----*- C++ -*-===//
//
// Part of moe-compiler's runtime. Layout (integers little-endian):
//
//   "MOEBNDL\0"            8-byte magic
//   u32 format version     kBundleFormatVersion
//   u32 flags              0
//   u64 manifest size M
//   u64 blob count B       at most kMaxBlobs
//   u64 blob sizes[B]
//   manifest               M bytes of JSON
//   blobs                  the code objects, back to back
//   u64 checksum           FNV-1a 64 of every byte before it
//
// Everything is validated on load; a bundle that is truncated, corrupt, of
// another version or for another target is one clear error.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_BUNDLE_H
#define MOE_RUNTIME_BUNDLE_H

#include "moe/runtime/Support.h"

#include <string>
#include <vector>

namespace moe::rt {

constexpr uint32_t kBundleFormatVersion = 1;
constexpr uint64_t kMaxBlobs = 64;

/// FNV-1a, 64 bits.
uint64_t fnv1a64(const uint8_t *data, size_t size);

/// A tensor the entry point reads or writes. A negative dimension is the
/// token count, known at run time.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// A parameter of the layer: where its data comes from in a checkpoint.
struct ParameterSpec {
  /// Argument role in the layer ("router_weight", "gate_weight", ...).
  std::string role;
  /// Hugging Face name relative to the MoE block; for stacked expert
  /// weights a pattern with "{i}", e.g. "experts.{i}.gate_proj.weight".
  std::string name;
  /// Number of experts stacked along dim 0 (0: not stacked).
  int64_t stack = 0;
  /// Compute dtype and full (stacked) shape.
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// The layer's routing configuration, for reports and reference checks.
struct LayerSpec {
  std::string family; // weight naming: deepseek, mixtral, qwen
  int64_t hidden = 0, experts = 0, topK = 0, groups = 1, topkGroups = 1;
  std::string scoring, groupScore;
  bool scoreBias = false, normTopkProb = false;
  double routedScale = 1.0;
  int64_t ffn = 0, sharedExperts = 0, sharedFfn = 0;
  bool sharedGate = false;
  std::string dtype;
  int64_t alignment = 1;
};

struct Manifest {
  std::string target;   // "host" (shared object) or "sm_90a"
  std::string compiler; // version string of the writer
  std::string entry;    // symbol of the packed entry point
  int64_t maxTokens = 0;
  LayerSpec layer;
  /// Entry point arguments, in order: inputs, parameters, outputs.
  std::vector<TensorSpec> inputs;
  std::vector<ParameterSpec> parameters;
  std::vector<TensorSpec> outputs;
  /// The launch sequence; for the host target one call of `entry`.
  std::vector<std::string> schedule;
};

std::string serializeManifest(const Manifest &manifest);
Expected<Manifest> parseManifest(const std::string &text);

struct Bundle {
  Manifest manifest;
  std::vector<std::vector<uint8_t>> blobs;
};

/// The bundle's bytes.
std::vector<uint8_t> serializeBundle(const Bundle &bundle);
/// Validates and decodes bundle bytes; `name` appears in messages.
Expected<Bundle> parseBundle(const std::vector<uint8_t> &bytes,
                             const std::string &name);
Expected<Bundle> readBundle(const std::string &path);
Status writeBundle(const std::string &path, const Bundle &bundle);

} // namespace moe::rt

#endif // MOE_RUNTIME_BUNDLE_H
