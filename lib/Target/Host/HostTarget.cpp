//===- HostTarget.cpp - The host (CPU) target -----------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Target/Host.h"
#include "moe/Transforms/DecomposeLayer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <atomic>
#include <cstdlib>
#include <thread>

using namespace mlir;
using namespace mlir::moe;

static MemRefType toMemRef(RankedTensorType type) {
  return MemRefType::get(type.getShape(), type.getElementType());
}

std::vector<EntryArgument> mlir::moe::entryArguments(LayerOp layer) {
  std::vector<EntryArgument> arguments;
  auto add = [&](EntryArgument::Kind kind, StringRef role, Value value) {
    if (value)
      arguments.push_back(
          {kind, role.str(), cast<RankedTensorType>(value.getType())});
  };
  using Kind = EntryArgument::Kind;
  add(Kind::Input, "x", layer.getInput());
  add(Kind::Parameter, "router_weight", layer.getRouterWeight());
  add(Kind::Parameter, "score_bias", layer.getScoreBias());
  add(Kind::Parameter, "gate_weight", layer.getGateWeight());
  add(Kind::Parameter, "up_weight", layer.getUpWeight());
  add(Kind::Parameter, "down_weight", layer.getDownWeight());
  add(Kind::Parameter, "shared_gate_weight", layer.getSharedGateWeight());
  add(Kind::Parameter, "shared_up_weight", layer.getSharedUpWeight());
  add(Kind::Parameter, "shared_down_weight", layer.getSharedDownWeight());
  add(Kind::Parameter, "shared_expert_gate", layer.getSharedExpertGate());
  add(Kind::Parameter, "output_bias", layer.getOutputBias());
  add(Kind::Parameter, "router_bias", layer.getRouterBias());
  add(Kind::Parameter, "gate_bias", layer.getGateBias());
  add(Kind::Parameter, "up_bias", layer.getUpBias());
  add(Kind::Parameter, "down_bias", layer.getDownBias());
  add(Kind::Parameter, "gate_scale", layer.getGateScale());
  add(Kind::Parameter, "up_scale", layer.getUpScale());
  add(Kind::Parameter, "down_scale", layer.getDownScale());
  add(Kind::Parameter, "shared_gate_scale", layer.getSharedGateScale());
  add(Kind::Parameter, "shared_up_scale", layer.getSharedUpScale());
  add(Kind::Parameter, "shared_down_scale", layer.getSharedDownScale());

  LayerConfigAttr config = layer.getConfig();
  Builder b(layer.getContext());
  int64_t k = config.getTopK();
  int64_t dyn = ShapedType::kDynamic;
  Type f32 = b.getF32Type();
  arguments.push_back({Kind::Output, "y",
                       RankedTensorType::get({dyn, config.getHidden()}, f32)});
  arguments.push_back({Kind::Output, "topk_ids",
                       RankedTensorType::get({dyn, k}, b.getI32Type())});
  arguments.push_back(
      {Kind::Output, "topk_weights", RankedTensorType::get({dyn, k}, f32)});
  return arguments;
}

OwningOpRef<ModuleOp>
mlir::moe::buildHostEntry(LayerOp layer, int64_t alignment,
                          std::vector<EntryArgument> &arguments) {
  MLIRContext *ctx = layer.getContext();
  Location loc = layer.getLoc();
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  arguments = entryArguments(layer);
  unsigned numOperands = layer->getNumOperands();
  Type f32 = b.getF32Type();

  SmallVector<Type> argTypes;
  for (const EntryArgument &arg : arguments)
    argTypes.push_back(toMemRef(arg.type));
  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, loc, kHostEntryName,
                                   b.getFunctionType(argTypes, {}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);

  // Operands as tensors; the layer's operands are replaced by them.
  IRMapping mapping;
  SmallVector<Value> layerOperands;
  for (unsigned i = 0; i < numOperands; ++i) {
    Value tensor = bufferization::ToTensorOp::create(
        b, loc, arguments[i].type, body->getArgument(i), /*restrict=*/true);
    layerOperands.push_back(tensor);
  }
  // Operands of the original layer in operand order: present ones only.
  unsigned next = 0;
  for (Value operand : layer->getOperands())
    mapping.map(operand, layerOperands[next++]);
  auto clone = cast<LayerOp>(b.clone(*layer, mapping));
  // The entry's x is [T, H] with a dynamic T whatever the layer declared.
  DecomposedLayer parts = decomposeLayer(b, clone, alignment);
  clone.erase();

  Value y = parts.output;
  auto yType = cast<RankedTensorType>(y.getType());
  if (!yType.getElementType().isF32()) {
    auto f32Type = RankedTensorType::get(yType.getShape(), f32);
    y = arith::ExtFOp::create(b, loc, f32Type, y);
  }
  Value outputs[] = {y, parts.indices, parts.weights};
  for (unsigned i = 0; i < 3; ++i) {
    auto op = bufferization::MaterializeInDestinationOp::create(
        b, loc, outputs[i], body->getArgument(numOperands + i));
    op.setRestrict(true);
    op.setWritable(true);
  }
  func::ReturnOp::create(b, loc);
  return module;
}

void mlir::moe::addPackedEntry(ModuleOp module, unsigned numArguments,
                               StringRef entryName, StringRef packedName) {
  MLIRContext *ctx = module.getContext();
  Location loc = module.getLoc();
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module.getBody());
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  auto voidType = LLVM::LLVMVoidType::get(ctx);
  auto packed = LLVM::LLVMFuncOp::create(
      b, loc, packedName, LLVM::LLVMFunctionType::get(voidType, {ptr}));
  Block *entry = packed.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  SmallVector<Value> args;
  for (unsigned i = 0; i < numArguments; ++i) {
    Value slot =
        LLVM::GEPOp::create(b, loc, ptr, ptr, entry->getArgument(0),
                            ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
    args.push_back(LLVM::LoadOp::create(b, loc, ptr, slot));
  }
  std::string callee = ("_mlir_ciface_" + entryName).str();
  LLVM::CallOp::create(b, loc, TypeRange{}, callee, args);
  LLVM::ReturnOp::create(b, loc, ValueRange{});
}

void mlir::moe::addSoftFloatHelpers(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  StringRef name = "__truncsfbf2";
  if (module.lookupSymbol(name))
    return;
  Location loc = module.getLoc();
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module.getBody());
  Type f32 = b.getF32Type(), bf16 = b.getBF16Type();
  Type i32 = b.getI32Type(), i16 = b.getI16Type();
  auto func = LLVM::LLVMFuncOp::create(b, loc, name,
                                       LLVM::LLVMFunctionType::get(bf16, {f32}),
                                       LLVM::Linkage::Weak);
  Block *entry = func.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  Value x = entry->getArgument(0);
  auto constant = [&](int64_t v) -> Value {
    return LLVM::ConstantOp::create(b, loc, i32, b.getI32IntegerAttr(v));
  };
  // Round to nearest even; NaNs stay quiet NaNs.
  Value bits = LLVM::BitcastOp::create(b, loc, i32, x);
  Value high = LLVM::LShrOp::create(b, loc, bits, constant(16));
  Value lsb = LLVM::AndOp::create(b, loc, high, constant(1));
  Value bias = LLVM::AddOp::create(b, loc, lsb, constant(0x7fff));
  Value rounded = LLVM::LShrOp::create(
      b, loc, LLVM::AddOp::create(b, loc, bits, bias), constant(16));
  Value quiet = LLVM::OrOp::create(b, loc, high, constant(0x40));
  Value isNan = LLVM::FCmpOp::create(b, loc, LLVM::FCmpPredicate::uno, x, x);
  Value chosen = LLVM::SelectOp::create(b, loc, isNan, quiet, rounded);
  Value half = LLVM::TruncOp::create(b, loc, i16, chosen);
  LLVM::ReturnOp::create(
      b, loc, ValueRange{LLVM::BitcastOp::create(b, loc, bf16, half)});
}

static const llvm::Target *lookupHostTarget(std::string &triple,
                                            std::string &error) {
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;
  triple = llvm::sys::getDefaultTargetTriple();
  return llvm::TargetRegistry::lookupTarget(llvm::Triple(triple), error);
}

static std::unique_ptr<llvm::TargetMachine>
createHostMachine(llvm::StringRef cpu, std::string &error) {
  std::string triple;
  const llvm::Target *target = lookupHostTarget(triple, error);
  if (!target)
    return nullptr;
  std::string cpuName =
      cpu == "native" ? llvm::sys::getHostCPUName().str() : cpu.str();
  std::string features;
  if (cpu == "native") {
    llvm::SubtargetFeatures list;
    for (auto &feature : llvm::sys::getHostCPUFeatures())
      list.AddFeature(feature.first(), feature.second);
    features = list.getString();
  }
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      llvm::Triple(triple), cpuName, features, options, llvm::Reloc::PIC_,
      std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    error = "cannot create a target machine for " + triple;
  return machine;
}

bool mlir::moe::getHostVectorUnit(llvm::StringRef cpu, HostVectorUnit &unit,
                                  std::string &error) {
  std::unique_ptr<llvm::TargetMachine> machine = createHostMachine(cpu, error);
  if (!machine)
    return false;
  const llvm::MCSubtargetInfo *info = machine->getMCSubtargetInfo();
  const llvm::Triple &triple = machine->getTargetTriple();
  unit = HostVectorUnit{};
  if (triple.isX86()) {
    // AVX-512 doubles both the width and the register file.
    if (info->checkFeatures("+avx512f"))
      unit = {16, 32};
    else if (info->checkFeatures("+avx"))
      unit = {8, 16};
  } else if (triple.isAArch64()) {
    unit = {4, 32};
  }
  return true;
}

std::unique_ptr<llvm::Module>
mlir::moe::translateForHost(ModuleOp module, llvm::LLVMContext &context,
                            llvm::StringRef cpu, bool optimize) {
  registerBuiltinDialectTranslation(*module.getContext());
  registerLLVMDialectTranslation(*module.getContext());
  registerOpenMPDialectTranslation(*module.getContext());
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, context, "moe_layer");
  if (!llvmModule) {
    module.emitError() << "translation to LLVM IR failed";
    return nullptr;
  }
  std::string error;
  std::unique_ptr<llvm::TargetMachine> machine = createHostMachine(cpu, error);
  if (!machine) {
    module.emitError() << error;
    return nullptr;
  }
  llvmModule->setTargetTriple(machine->getTargetTriple());
  llvmModule->setDataLayout(machine->createDataLayout());
  if (!optimize)
    return llvmModule;
  auto optimizer =
      makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, machine.get());
  if (llvm::Error err = optimizer(llvmModule.get())) {
    module.emitError() << "LLVM optimization failed: "
                       << llvm::toString(std::move(err));
    return nullptr;
  }
  return llvmModule;
}

namespace {
/// Removes the files it holds when it goes out of scope.
struct TempFiles {
  std::vector<std::string> paths;
  ~TempFiles() {
    for (const std::string &path : paths)
      llvm::sys::fs::remove(path);
  }
};
} // namespace

/// Splits `module` into kHostCodePartitions modules of about equal size,
/// as bitcode, so that each can be optimized and compiled on its own thread
/// in its own LLVMContext. The parallel regions OpenMP outlined are most of
/// the code and are only reached through `__kmpc_fork_call`, so splitting
/// them apart costs no inlining. An internal function that is called
/// directly (a helper) and every internal constant are copied into each
/// part, where the inliner and constant folding still see them; any other
/// internal symbol becomes a hidden global of the one part that defines it.
/// The split depends only on the module, never on the machine, so bundles
/// stay reproducible. Returns one part when the module has symbols the split
/// does not handle (aliases, ifuncs, comdats, appending arrays such as
/// llvm.global_ctors).
static std::vector<llvm::SmallString<0>> splitToBitcode(llvm::Module &module) {
  auto whole = [&] {
    std::vector<llvm::SmallString<0>> parts(1);
    llvm::raw_svector_ostream os(parts[0]);
    llvm::WriteBitcodeToFile(module, os);
    return parts;
  };
  if (!module.alias_empty() || !module.ifunc_empty() ||
      !module.getComdatSymbolTable().empty() ||
      llvm::any_of(module.globals(), [](const llvm::GlobalVariable &global) {
        return global.hasAppendingLinkage();
      }))
    return whole();

  auto isCalledDirectly = [](const llvm::Function &f) {
    return llvm::any_of(f.users(), [&](const llvm::User *user) {
      auto *call = llvm::dyn_cast<llvm::CallBase>(user);
      return call && call->getCalledOperand() == &f;
    });
  };
  llvm::DenseSet<const llvm::GlobalValue *> copied;
  llvm::DenseMap<const llvm::GlobalValue *, unsigned> owner;
  std::vector<std::pair<size_t, llvm::Function *>> functions;
  for (llvm::Function &f : module) {
    if (f.isDeclaration())
      continue;
    if (f.hasLocalLinkage() && isCalledDirectly(f)) {
      copied.insert(&f);
      continue;
    }
    functions.push_back({f.getInstructionCount(), &f});
  }
  for (llvm::GlobalVariable &global : module.globals()) {
    if (global.isDeclaration())
      continue;
    if (global.hasLocalLinkage() && global.isConstant()) {
      copied.insert(&global);
      continue;
    }
    owner[&global] = 0;
  }
  // Largest first, each to the lightest part (ties by name, so the split is
  // deterministic).
  llvm::stable_sort(functions, [](const auto &a, const auto &b) {
    if (a.first != b.first)
      return a.first > b.first;
    return a.second->getName() < b.second->getName();
  });
  std::vector<size_t> load(kHostCodePartitions, 0);
  for (auto [size, function] : functions) {
    unsigned part = std::min_element(load.begin(), load.end()) - load.begin();
    owner[function] = part;
    load[part] += size;
  }
  for (auto [global, part] : owner) {
    auto *value = const_cast<llvm::GlobalValue *>(global);
    if (value->hasLocalLinkage()) {
      // A global of another part must have a name to be linked by.
      if (!value->hasName())
        value->setName("moe.split");
      value->setLinkage(llvm::GlobalValue::ExternalLinkage);
      value->setVisibility(llvm::GlobalValue::HiddenVisibility);
    }
  }

  std::vector<llvm::SmallString<0>> parts(kHostCodePartitions);
  for (unsigned i = 0; i < kHostCodePartitions; ++i) {
    llvm::ValueToValueMapTy map;
    std::unique_ptr<llvm::Module> part =
        llvm::CloneModule(module, map, [&](const llvm::GlobalValue *global) {
          if (copied.contains(global))
            return true;
          auto it = owner.find(global);
          return it != owner.end() && it->second == i;
        });
    if (i != 0)
      part->setModuleInlineAsm("");
    llvm::raw_svector_ostream os(parts[i]);
    llvm::WriteBitcodeToFile(*part, os);
  }
  return parts;
}

/// Optimizes (O3) one part of a split module and generates its object code,
/// in a context of its own (this runs on a worker thread).
static bool compilePart(llvm::StringRef bitcode, llvm::StringRef cpu,
                        llvm::SmallString<0> &object, std::string &error) {
  llvm::LLVMContext context;
  llvm::Expected<std::unique_ptr<llvm::Module>> module =
      llvm::parseBitcodeFile(llvm::MemoryBufferRef(bitcode, "part"), context);
  if (!module) {
    error = "cannot read back a part of the module: " +
            llvm::toString(module.takeError());
    return false;
  }
  std::unique_ptr<llvm::TargetMachine> machine = createHostMachine(cpu, error);
  if (!machine)
    return false;
  auto optimizer =
      makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, machine.get());
  if (llvm::Error err = optimizer(module->get())) {
    error = "LLVM optimization failed: " + llvm::toString(std::move(err));
    return false;
  }
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager passes;
  if (machine->addPassesToEmitFile(passes, os, nullptr,
                                   llvm::CodeGenFileType::ObjectFile)) {
    error = "the host target cannot emit object files";
    return false;
  }
  passes.run(**module);
  return true;
}

/// Writes `bytes` to a new temporary object file whose path `temps` keeps.
static bool writeTemporary(llvm::StringRef prefix, llvm::StringRef bytes,
                           TempFiles &temps, std::string &error) {
  llvm::SmallString<128> path;
  int fd;
  if (auto ec = llvm::sys::fs::createTemporaryFile(prefix, "o", fd, path)) {
    error = "cannot create a temporary file: " + ec.message();
    return false;
  }
  temps.paths.push_back(path.str().str());
  llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
  os << bytes;
  // A failed write (a full disk) is an error here, not a fatal error when
  // the stream is destroyed.
  os.close();
  if (os.has_error()) {
    error = "cannot write the temporary object file '" + path.str().str() +
            "': " + os.error().message();
    os.clear_error();
    return false;
  }
  return true;
}

/// The helpers every shared object links (moe_helpers.c, compiled by the
/// build; the file name is in the object's symbol table, so bundles stay
/// reproducible).
static const unsigned char kHelpersObject[] = {
#include "moe_helpers.o.inc"
};

bool mlir::moe::emitSharedObject(llvm::Module &module, llvm::StringRef cpu,
                                 std::vector<uint8_t> &sharedObject,
                                 std::string &error) {
  TempFiles temps;
  std::vector<llvm::SmallString<0>> parts = splitToBitcode(module);
  std::vector<llvm::SmallString<0>> objects(parts.size());
  std::vector<std::string> errors(parts.size());
  std::vector<char> compiled(parts.size(), 0);
  {
    // Workers take the parts in order; how many run changes only the time.
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < parts.size(); i = next++)
        compiled[i] = compilePart(parts[i], cpu, objects[i], errors[i]);
    };
    unsigned threads = std::min<unsigned>(
        parts.size(),
        llvm::heavyweight_hardware_concurrency().compute_thread_count());
    std::vector<std::thread> workers;
    for (unsigned t = 1; t < threads; ++t)
      workers.emplace_back(work);
    work();
    for (std::thread &worker : workers)
      worker.join();
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!compiled[i]) {
      error = errors[i];
      return false;
    }
  }

  std::string compiler = "cc";
  if (const char *env = std::getenv("MOE_HOST_CC"))
    compiler = env;
  llvm::ErrorOr<std::string> program = llvm::sys::findProgramByName(compiler);
  if (!program) {
    error = "cannot find the host C compiler '" + compiler +
            "' to link the shared object (set MOE_HOST_CC)";
    return false;
  }
  for (const llvm::SmallString<0> &object : objects)
    if (!writeTemporary("moe-layer", object, temps, error))
      return false;
  if (!writeTemporary(
          "moe-helpers",
          llvm::StringRef(reinterpret_cast<const char *>(kHelpersObject),
                          sizeof(kHelpersObject)),
          temps, error))
    return false;
  llvm::SmallString<128> libraryPath;
  if (auto ec =
          llvm::sys::fs::createTemporaryFile("moe-layer", "so", libraryPath)) {
    error = "cannot create a temporary file: " + ec.message();
    return false;
  }
  // The objects' paths stay valid: `temps` is not touched again until the
  // link has run.
  std::vector<std::string> inputs = temps.paths;
  temps.paths.push_back(libraryPath.str().str());

  // The parallel loops call the LLVM OpenMP runtime (by its soname, so no
  // development symlink is needed).
  std::string openmp = "-l:" + std::string(kOpenMPLibrary);
  llvm::SmallVector<llvm::StringRef> args = {*program, "-shared", "-fPIC", "-o",
                                             libraryPath};
  for (const std::string &input : inputs)
    args.push_back(input);
  args.push_back("-lm");
  args.push_back(openmp);
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(*program, args, std::nullopt, {}, 0, 0,
                                     &message);
  if (rc != 0) {
    error = "linking the shared object with '" + *program + "' failed" +
            (message.empty() ? "" : ": " + message) +
            " (it needs the LLVM OpenMP runtime, " + kOpenMPLibrary.str() +
            "; on Debian: apt-get install libomp-dev)";
    return false;
  }
  auto buffer = llvm::MemoryBuffer::getFile(libraryPath);
  if (!buffer) {
    error =
        "cannot read the linked shared object: " + buffer.getError().message();
    return false;
  }
  sharedObject.assign((*buffer)->getBufferStart(), (*buffer)->getBufferEnd());
  return true;
}
