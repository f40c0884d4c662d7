//===- Host.h - The host (CPU) target ---------------------------*- C++ -*-===//
//
// Part of moe-compiler. From a moe.layer to a shared object the runtime can
// dlopen: an entry function in destination-passing style, the host
// pipeline, LLVM IR, an object file and a link by the system compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TARGET_HOST_H
#define MOE_TARGET_HOST_H

#include "moe/MoeOps.h"
#include "moe/Transforms/Autodiff.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace mlir::moe {

/// Name of the entry function built by buildHostEntry.
constexpr llvm::StringLiteral kHostEntryName = "moe_forward";
/// Name of the packed entry point, `void(void **descriptors)`, exported by
/// the shared object.
constexpr llvm::StringLiteral kHostPackedEntryName = "moe_forward_packed";

/// One argument of the entry function, in order.
struct EntryArgument {
  enum class Kind { Input, Parameter, Output };
  Kind kind;
  /// "x", "y", "topk_ids", "topk_weights", or the layer operand's role
  /// ("router_weight", "gate_weight", ...).
  std::string role;
  RankedTensorType type;
};

/// The entry function's arguments for `layer`: x, every present weight
/// operand, then the outputs y (f32), topk_ids (i32) and topk_weights (f32),
/// all `[T, ...]` with dynamic T. Also what a manifest lists for any target.
std::vector<EntryArgument> entryArguments(LayerOp layer);

/// Builds a module holding `func.func @moe_forward` for `layer`: memref
/// arguments x, every present weight operand, then the outputs y (f32),
/// topk_ids (i32) and topk_weights (f32), all `[T, ...]` with dynamic T.
/// The body is the layer decomposed into primitives.
OwningOpRef<ModuleOp> buildHostEntry(LayerOp layer, int64_t alignment,
                                     std::vector<EntryArgument> &arguments);

/// Adds `void <packed>(void **argv)`, which calls the C interface of
/// `entry` with argv[0..numArguments) (moe_forward_packed by default).
void addPackedEntry(ModuleOp llvmDialectModule, unsigned numArguments,
                    llvm::StringRef entry = kHostEntryName,
                    llvm::StringRef packed = kHostPackedEntryName);

/// Name of the training step built by addHostTrainEntry, and of its packed
/// entry point.
constexpr llvm::StringLiteral kHostTrainEntryName = "moe_train_step";
constexpr llvm::StringLiteral kHostTrainPackedEntryName =
    "moe_train_step_packed";

/// Adds `func.func @moe_train_step` to `module`: the loss (mean of
/// (y - target)^2), its gradients (buildLayerBackward) with the checks of
/// one AdamW step on fp32 master weights (bias-corrected moments; compute
/// copies in the layer's element type), and DeepSeek's auxiliary-loss-free
/// bias update `bias += gamma * sign(mean load - load)`. Returns its
/// arguments (listTrainArguments); the moments are of `momentType` (f32
/// when null, or bf16: the check rounds the new moments as the update
/// stores them).
std::vector<TrainArgument> addHostTrainEntry(ModuleOp module, LayerOp layer,
                                             Type momentType = {});

/// Name of the AdamW update built by addHostTrainUpdateEntry, and of its
/// packed entry point.
constexpr llvm::StringLiteral kHostTrainUpdateEntryName = "moe_train_update";
constexpr llvm::StringLiteral kHostTrainUpdatePackedEntryName =
    "moe_train_update_packed";

/// Adds `func.func @moe_train_update`: the AdamW step that moe_train_step
/// checked, applied in place to the weights and moments from its gradient
/// outputs (the runtime runs it once the step is known finite, so the
/// state needs no second copy). Returns its arguments
/// (listTrainUpdateArguments, with moments of `momentType`). Moments in
/// bf16 are widened to f32, the step computed in f32 (the master's update
/// from the unrounded moments) and the new moments rounded to nearest
/// even once.
std::vector<TrainArgument>
addHostTrainUpdateEntry(ModuleOp module, LayerOp layer, Type momentType = {});

/// Name of the vector-Jacobian product built by addHostBackwardEntry, and
/// of its packed entry point.
constexpr llvm::StringLiteral kHostBackwardEntryName = "moe_backward";
constexpr llvm::StringLiteral kHostBackwardPackedEntryName =
    "moe_backward_packed";

/// Adds `func.func @moe_backward`: the layer's forward pass on `x` again,
/// then its backward pass from the caller's `dy` (buildLayerBackward), for
/// frameworks whose autograd owns the loss and the optimizer. Returns its
/// arguments (listBackwardArguments).
std::vector<TrainArgument> addHostBackwardEntry(ModuleOp module, LayerOp layer);

/// Adds a weak `__truncsfbf2` (f32 to bf16, round to nearest even). LLVM's
/// x86 backend calls it to legalize bf16 values on CPUs without native
/// bf16, and libgcc before GCC 13 does not provide it.
void addSoftFloatHelpers(ModuleOp llvmDialectModule);

/// The vector unit of `cpu` ("" generic, "native" this machine's, or a CPU
/// name), as the host GEMMs block for it.
struct HostVectorUnit {
  int64_t width = 4;      // f32 lanes of a vector register
  int64_t registers = 16; // vector registers
};
/// Returns false and sets `error` when no target machine exists for `cpu`.
bool getHostVectorUnit(llvm::StringRef cpu, HostVectorUnit &unit,
                       std::string &error);

/// Translates an LLVM-dialect module to LLVM IR for the host (or `cpu`, ""
/// for the target's generic CPU, "native" for this machine's) and, with
/// `optimize`, runs the O3 pipeline. Returns null after emitting an error.
std::unique_ptr<llvm::Module> translateForHost(ModuleOp module,
                                               llvm::LLVMContext &context,
                                               llvm::StringRef cpu,
                                               bool optimize = true);

/// How many parts emitSharedObject splits a module into (a constant, so a
/// bundle's bytes do not depend on the machine that compiled it).
inline constexpr unsigned kHostCodePartitions = 4;

/// The OpenMP runtime a bundle's shared object runs its parallel loops on.
inline constexpr llvm::StringLiteral kOpenMPLibrary = "libomp.so.5";

/// Optimizes the unoptimized `module` (O3), emits it as position-independent
/// objects and links them into a shared object with the system C compiler
/// (`cc`, or $MOE_HOST_CC), with the OpenMP runtime. The module is split in
/// kHostCodePartitions parts that are optimized and compiled in parallel, on
/// as many threads as the machine has cores (up to the parts); `module` is
/// changed (its internal symbols become hidden globals).
/// Returns false and sets `error` on failure.
bool emitSharedObject(llvm::Module &module, llvm::StringRef cpu,
                      std::vector<uint8_t> &sharedObject, std::string &error);

} // namespace mlir::moe

#endif // MOE_TARGET_HOST_H
