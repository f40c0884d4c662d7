//===- Sm90Target.cpp - The Hopper (sm_90a) target ------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "KernelWork.h"

#include "moe/Conversion/Passes.h"
#include "moe/MoeOps.h"
#include "moe/Pipelines/Pipelines.h"
#include "moe/Support/Routing.h"
#include "moe/Target/Sm90.h"
#include "moe/runtime/ScheduleAbi.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>

using namespace mlir;
using namespace mlir::moe;
namespace rt = ::moe::rt;
namespace abi = ::moe::abi;

std::optional<std::string> mlir::moe::findPtxas(const std::string &preferred) {
  auto executable = [](const std::string &path) {
    return !path.empty() && llvm::sys::fs::can_execute(path);
  };
  if (!preferred.empty())
    return executable(preferred) ? std::optional<std::string>(preferred)
                                 : std::nullopt;
  if (const char *env = std::getenv("MOE_PTXAS"); env && *env)
    return executable(env) ? std::optional<std::string>(env) : std::nullopt;
  std::string configured = std::string(MOE_CUDA_TOOLKIT_ROOT) + "/bin/ptxas";
  if (std::string(MOE_CUDA_TOOLKIT_ROOT).size() && executable(configured))
    return configured;
  if (llvm::ErrorOr<std::string> found = llvm::sys::findProgramByName("ptxas"))
    return *found;
  return std::nullopt;
}

namespace {

/// Runs ptxas on `ptx`; fills `cubin` and the per-kernel register, spill
/// and static shared-memory numbers of `kernels`.
bool runPtxas(const std::string &ptxas, const std::string &ptx,
              std::vector<uint8_t> &cubin,
              std::vector<Sm90KernelReport> &kernels, std::string &error) {
  llvm::SmallString<128> ptxPath, cubinPath, logPath;
  if (llvm::sys::fs::createTemporaryFile("moe-sm90", "ptx", ptxPath) ||
      llvm::sys::fs::createTemporaryFile("moe-sm90", "cubin", cubinPath) ||
      llvm::sys::fs::createTemporaryFile("moe-sm90", "log", logPath)) {
    error = "cannot create temporary files for ptxas";
    return false;
  }
  llvm::scope_exit cleanup([&] {
    llvm::sys::fs::remove(ptxPath);
    llvm::sys::fs::remove(cubinPath);
    llvm::sys::fs::remove(logPath);
  });
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(ptxPath, ec);
    if (ec) {
      error = "cannot write " + ptxPath.str().str() + ": " + ec.message();
      return false;
    }
    os << ptx;
  }
  std::string ptxArg = ptxPath.str().str(), cubinArg = cubinPath.str().str();
  // The kernels are optimized on every CPU (--split-compile 0, CUDA 12.1
  // on; a ptxas without it runs again without).
  llvm::SmallVector<llvm::StringRef> args{
      ptxas,  "-arch=sm_90a", "-O3",          "-v", "--split-compile", "0",
      ptxArg, "-o",           cubinArg};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, logPath.str(),
                                                logPath.str()};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects, 0, 0,
                                     &message);
  auto log = llvm::MemoryBuffer::getFile(logPath);
  std::string logText = log ? (*log)->getBuffer().str() : "";
  if (rc != 0 && llvm::StringRef(logText).contains("split-compile")) {
    args.erase(args.begin() + 4, args.begin() + 6);
    message.clear();
    rc = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects, 0, 0,
                                   &message);
    log = llvm::MemoryBuffer::getFile(logPath);
    logText = log ? (*log)->getBuffer().str() : "";
  }
  if (rc != 0) {
    error = "ptxas (" + ptxas + ") failed" +
            (message.empty() ? "" : ": " + message) + "\n" + logText;
    return false;
  }
  auto binary = llvm::MemoryBuffer::getFile(cubinPath, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!binary) {
    error = "ptxas wrote no cubin";
    return false;
  }
  cubin.assign((*binary)->getBufferStart(), (*binary)->getBufferEnd());

  Sm90KernelReport *current = nullptr;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(logText).split(lines, '\n');
  for (llvm::StringRef line : lines) {
    // C7514: ptxas serialized a kernel's wgmma instructions (something
    // reads an accumulator while a batch may be in flight).
    if (line.contains("(C7514)")) {
      size_t fn = line.find("function '");
      llvm::StringRef name =
          fn == llvm::StringRef::npos ? "" : line.substr(fn + 10).split('\'').first;
      for (Sm90KernelReport &k : kernels)
        if (k.name == name)
          k.serializedWgmma = true;
      continue;
    }
    size_t at = line.find("Compiling entry function '");
    if (at != llvm::StringRef::npos) {
      llvm::StringRef name = line.substr(at + 26).split('\'').first;
      current = nullptr;
      for (Sm90KernelReport &k : kernels)
        if (k.name == name)
          current = &k;
      continue;
    }
    if (!current)
      continue;
    long long a = 0, b = 0, c = 0;
    std::string text = line.str();
    if (std::sscanf(text.c_str(),
                    " %lld bytes stack frame, %lld bytes spill stores, %lld "
                    "bytes spill loads",
                    &a, &b, &c) == 3) {
      current->spillStores = b;
      current->spillLoads = c;
    }
    size_t used = text.find("Used ");
    if (used != std::string::npos &&
        std::sscanf(text.c_str() + used, "Used %lld registers", &a) == 1) {
      current->registers = a;
      size_t smem = text.find(" bytes smem");
      if (smem != std::string::npos) {
        size_t comma = text.rfind(", ", smem);
        if (comma != std::string::npos &&
            std::sscanf(text.c_str() + comma + 2, "%lld", &a) == 1)
          current->staticSharedMemory = a;
      } else {
        current->staticSharedMemory = 0;
      }
    }
  }
  return true;
}

std::string describeGrid(moegpu::GridKind kind, const rt::GpuStep &step) {
  auto perBlock = [&](const std::string &count) {
    return "ceil(" + count + "/" + std::to_string(step.perBlock) + ")";
  };
  switch (kind) {
  case moegpu::GridKind::Persistent:
    return std::to_string(step.gridSize) + " (persistent)";
  case moegpu::GridKind::One:
    return "1";
  case moegpu::GridKind::Fixed:
    return std::to_string(step.gridSize);
  case moegpu::GridKind::Rows:
  case moegpu::GridKind::ReceivedRows: {
    std::string count = kind == moegpu::GridKind::Rows ? "R" : "ep*R";
    std::string times =
        step.gridSize > 1 ? "*" + std::to_string(step.gridSize) : "";
    return step.perBlock > 1 ? perBlock(count) + times
                             : count + times + " (row capacity)";
  }
  case moegpu::GridKind::Tokens:
  case moegpu::GridKind::Assignments: {
    std::string count = kind == moegpu::GridKind::Tokens ? "T" : "T*k";
    return step.perBlock == 1 ? count : perBlock(count);
  }
  }
  llvm_unreachable("a GridKind the report lacks");
}

/// The schedule ABI's names for the dialect's enums.
abi::GridKind toAbi(moegpu::GridKind kind) {
  switch (kind) {
  case moegpu::GridKind::Tokens:
    return abi::GridKind::Tokens;
  case moegpu::GridKind::Assignments:
    return abi::GridKind::Assignments;
  case moegpu::GridKind::Rows:
    return abi::GridKind::Rows;
  case moegpu::GridKind::ReceivedRows:
    return abi::GridKind::ReceivedRows;
  case moegpu::GridKind::One:
    return abi::GridKind::One;
  case moegpu::GridKind::Persistent:
    return abi::GridKind::Persistent;
  case moegpu::GridKind::Fixed:
    return abi::GridKind::Fixed;
  }
  llvm_unreachable("a GridKind the ABI lacks");
}

abi::BufferDim toAbi(moegpu::BufferDim dim) {
  switch (dim) {
  case moegpu::BufferDim::Tokens:
    return abi::BufferDim::Tokens;
  case moegpu::BufferDim::Rows:
    return abi::BufferDim::Rows;
  case moegpu::BufferDim::ReceivedRows:
    return abi::BufferDim::ReceivedRows;
  case moegpu::BufferDim::RowBlocks:
    return abi::BufferDim::RowBlocks;
  case moegpu::BufferDim::ReceivedRowBlocks:
    return abi::BufferDim::ReceivedRowBlocks;
  }
  llvm_unreachable("a BufferDim the ABI lacks");
}

abi::ExchangeKind toAbi(moegpu::ExchangeKind kind) {
  switch (kind) {
  case moegpu::ExchangeKind::Dispatch:
    return abi::ExchangeKind::Dispatch;
  case moegpu::ExchangeKind::Combine:
    return abi::ExchangeKind::Combine;
  case moegpu::ExchangeKind::DispatchRows:
    return abi::ExchangeKind::DispatchRows;
  case moegpu::ExchangeKind::CombineRows:
    return abi::ExchangeKind::CombineRows;
  case moegpu::ExchangeKind::DispatchPlan:
    return abi::ExchangeKind::DispatchPlan;
  }
  llvm_unreachable("an ExchangeKind the ABI lacks");
}

abi::Transport toAbi(std::optional<moegpu::Transport> transport) {
  if (!transport)
    return abi::Transport::Any;
  return *transport == moegpu::Transport::Lsa ? abi::Transport::Lsa
                                              : abi::Transport::Nccl;
}

} // namespace

namespace {

/// Each kernel of `kernels` (a gpu.module) in a module of its own: a
/// builtin.module holding a copy of the gpu.module with that kernel and
/// everything else it declares, and its operation count (what its
/// lowering costs, roughly), in the kernels' order.
SmallVector<std::pair<OwningOpRef<ModuleOp>, int64_t>>
splitKernels(gpu::GPUModuleOp kernels) {
  SmallVector<std::pair<OwningOpRef<ModuleOp>, int64_t>> modules;
  OpBuilder b(kernels.getContext());
  for (gpu::GPUFuncOp kernel : kernels.getOps<gpu::GPUFuncOp>()) {
    OwningOpRef<ModuleOp> m = ModuleOp::create(kernels.getLoc());
    (*m)->setAttrs(kernels->getParentOp()->getAttrDictionary());
    b.setInsertionPointToEnd(m->getBody());
    // The gpu.module's attributes and its other symbols, and this kernel
    // alone (copying every kernel for each would grow as their square).
    auto copy = cast<gpu::GPUModuleOp>(b.cloneWithoutRegions(*kernels));
    b.createBlock(&copy.getBodyRegion());
    int64_t ops = 0;
    for (Operation &op : kernels.getBody()->getOperations()) {
      auto func = dyn_cast<gpu::GPUFuncOp>(op);
      if (func && func != kernel)
        continue;
      b.clone(op);
      if (func)
        func.walk([&](Operation *) { ++ops; });
    }
    modules.emplace_back(std::move(m), ops);
  }
  return modules;
}

/// One PTX module of the PTX of several, each as LLVM's NVPTX backend
/// writes one (a header of .version, .target and .address_size, then the
/// extern shared memory and the kernels): the first header and one
/// declaration of each extern line, the kernels in order.
std::optional<std::string> mergePtx(ArrayRef<std::string> parts) {
  auto headerEnd = [](StringRef text) -> size_t {
    size_t at = text.find(".address_size");
    return at == StringRef::npos ? at : text.find('\n', at);
  };
  StringRef first = parts.front();
  size_t end = headerEnd(first);
  if (end == StringRef::npos)
    return std::nullopt;
  std::string out = first.str();
  std::set<std::string> externs;
  for (StringRef line : llvm::split(first, '\n'))
    if (line.starts_with(".extern "))
      externs.insert(line.str());
  for (StringRef text : parts.drop_front()) {
    size_t at = headerEnd(text);
    if (at == StringRef::npos || text.take_front(at) != first.take_front(end))
      return std::nullopt;
    for (StringRef line : llvm::split(text.drop_front(at + 1), '\n')) {
      if (line.starts_with(".extern ") && !externs.insert(line.str()).second)
        continue;
      out += line;
      out += '\n';
    }
  }
  return out;
}

} // namespace

std::optional<Sm90Result> mlir::moe::compileSm90(ModuleOp module,
                                                 const Sm90Options &options,
                                                 TimingScope &timing,
                                                 std::string &error) {
  MLIRContext *ctx = module.getContext();
  LayerOp layer = getOnlyLayer(module);
  if (!layer) {
    error = "expected exactly one moe.layer to compile";
    return std::nullopt;
  }
  LayerConfigAttr config = layer.getConfig();
  auto ranks = static_cast<int64_t>(layer.getEpSize());
  // A chunked exchange pads each (chunk, expert) segment: as many
  // segments as experts times chunks.
  int64_t chunks =
      ranks > 1 ? std::max<int64_t>(1, layer.getEpChunks()) : 1;
  std::optional<int64_t> rows =
      paddedRowsUpperBound(options.maxTokens, config.getTopK(),
                           chunks * config.getExperts(), options.alignment);
  if (!rows) {
    error = "--max-tokens " + std::to_string(options.maxTokens) +
            " gives a dispatched buffer too large to address";
    return std::nullopt;
  }
  // A rank of a sharded layer receives, from each of the ranks, that
  // rank's rows for its own experts: at most min(k, local) per token, each
  // (rank, expert) segment padded to the alignment.
  int64_t receivedRows = 0;
  if (ranks > 1) {
    int64_t local = config.getExperts() / ranks;
    std::optional<int64_t> perRank = paddedRowsUpperBound(
        options.maxTokens, std::min<int64_t>(config.getTopK(), local),
        chunks * local, options.alignment);
    if (!perRank || __builtin_mul_overflow(*perRank, ranks, &receivedRows)) {
      error = "--max-tokens " + std::to_string(options.maxTokens) +
              " gives a received-rows buffer too large to address";
      return std::nullopt;
    }
  }

  Sm90PipelineOptions pipeline;
  pipeline.format = "isa";
  pipeline.tileN = options.tileN;
  pipeline.tileM = options.tileM;
  pipeline.cluster = options.cluster;
  {
    TimingScope scope = timing.nest("Schedule (moegpu)");
    PassManager pm(ctx);
    pm.enableTiming(scope);
    ConvertMoeToMoeGpuOptions convert;
    convert.alignment = options.alignment;
    convert.train = options.train;
    convert.backward = options.backward;
    convert.optimizerState = options.optimizerState;
    pm.addPass(createConvertMoeToMoeGpu(convert));
    if (failed(pm.run(module))) {
      error = "the sm_90a layer conversion failed";
      return std::nullopt;
    }
  }
  // What each kernel is (the op of its body: moegpu.route, .quantize,
  // .grouped_gemm, ...), before the ops become code.
  llvm::StringMap<Sm90KernelWork> kernelWork;
  module.walk([&](gpu::GPUFuncOp func) {
    kernelWork[func.getName()] = kernelWorkOf(func);
  });
  {
    TimingScope scope = timing.nest("Kernels (moegpu)");
    PassManager pm(ctx);
    pm.enableTiming(scope);
    buildMoeGpuKernelPipeline(pm, pipeline);
    if (failed(pm.run(module))) {
      error = "the sm_90a kernel pipeline failed";
      return std::nullopt;
    }
  }

  Sm90Result result;
  rt::GpuProgram &program = result.program;
  program.rowCapacity = *rows;
  program.receivedRowCapacity = receivedRows;
  program.commSms = 0;
  if (auto partition = module->getAttrOfType<SmPartitionAttr>(
          MoeDialect::getSmPartitionAttrName()))
    program.commSms = partition.getComm();
  // The typed schedule (verified with the module after every pass).
  moegpu::ProgramOp gpuProgram;
  for (auto op : module.getOps<moegpu::ProgramOp>())
    gpuProgram = op;
  auto kernels = module.lookupSymbol<gpu::GPUModuleOp>("moe_kernels");
  if (!gpuProgram || !kernels) {
    error = "the kernel pipeline left no moegpu.program and moe_kernels";
    return std::nullopt;
  }
  for (auto buffer : gpuProgram.getOps<moegpu::BufferOp>()) {
    rt::GpuBuffer b;
    b.name = buffer.getSymName().str();
    MemRefType type = buffer.getMemRefType();
    std::string typeName;
    llvm::raw_string_ostream(typeName) << type.getElementType();
    std::optional<rt::DType> dtype = rt::parseMlirName(typeName);
    if (!dtype) {
      buffer.emitOpError() << "has element type " << typeName
                           << ", which the runtime has no dtype for";
      error = "the schedule has a buffer the runtime cannot hold";
      return std::nullopt;
    }
    b.dtype = *dtype;
    auto dims = buffer.getDims().getAsRange<moegpu::BufferDimAttr>();
    auto dim = dims.begin();
    for (int64_t d : type.getShape()) {
      if (!ShapedType::isDynamic(d)) {
        b.shape.push_back(d);
        continue;
      }
      b.shape.push_back(static_cast<int64_t>(toAbi((*dim++).getValue())));
    }
    // (The op's verifier parsed it already.)
    b.source = *abi::parseBufferSource(buffer.getSource());
    program.buffers.push_back(std::move(b));
  }
  // What the rows of a buffer are (its first dimension's).
  auto rowsOf = [&](StringRef name) {
    auto buffer = gpuProgram.lookupSymbol<moegpu::BufferOp>(name);
    if (!buffer || buffer.getMemRefType().getRank() == 0 ||
        !ShapedType::isDynamic(buffer.getMemRefType().getDimSize(0)))
      return Sm90Rows::Fixed;
    auto dims = buffer.getDims().getAsRange<moegpu::BufferDimAttr>();
    return dims.empty() ||
                   (*dims.begin()).getValue() == moegpu::BufferDim::Tokens
               ? Sm90Rows::Tokens
               : Sm90Rows::Routed;
  };
  std::set<std::string> reported;
  Sm90Phase phase = Sm90Phase::Forward;
  auto readLaunch = [&](moegpu::LaunchOp launch, rt::GpuStep &step) {
    step.kernel = launch.getKernel().getLeafReference().str();
    moegpu::GridAttr grid = launch.getGrid();
    step.grid = toAbi(grid.getKind());
    step.perBlock = grid.getPerBlock();
    step.gridSize = grid.getSize();
    step.block = launch.getBlock();
    auto func = kernels.lookupSymbol<gpu::GPUFuncOp>(step.kernel);
    Sm90KernelReport report;
    report.name = step.kernel;
    report.work = kernelWork.lookup(step.kernel);
    step.kernelKind = report.work.kind;
    report.work.phase = phase;
    report.work.rows = rowsOf(step.args.empty() ? "" : step.args.front());
    if (auto required = func ? func->getAttrOfType<IntegerAttr>(
                                   moegpu::kRequiredRegistersAttrName)
                             : IntegerAttr())
      report.requiredRegisters = required.getInt();
    if (auto config = func ? func->getAttrOfType<moegpu::KernelLaunchAttr>(
                                 moegpu::kKernelLaunchAttrName)
                           : moegpu::KernelLaunchAttr()) {
      step.gridSize = config.getGrid();
      if (config.getBlock())
        step.block = config.getBlock();
      step.sharedMemory = config.getSmem();
      if (moegpu::TileAttr tile = config.getTile()) {
        report.tileM = tile.getM();
        report.tileN = tile.getN();
        report.tileK = tile.getK();
        report.tileStages = tile.getStages();
        report.cluster = step.cluster = tile.getCluster();
        report.persistentCtas = config.getGrid();
        report.tmaStoreEpilogue =
            func->hasAttr(moegpu::kTmaStoreEpilogueAttrName);
      }
      if (auto maps =
              func->getAttrOfType<ArrayAttr>(moegpu::kTensorMapsAttrName))
        for (auto map : maps.getAsRange<moegpu::TensorMapAttr>())
          step.tensorMaps.push_back(
              {map.getArg(), map.getSource(),
               std::vector<int64_t>(map.getView().begin(),
                                    map.getView().end()),
               std::vector<int64_t>(map.getBox().begin(), map.getBox().end()),
               map.getSwizzle()});
    }
    // A device-initiated send runs on the comm SMs' CTAs: its fixed grid.
    if (report.work.kind == Sm90KernelKind::EpSend)
      report.persistentCtas = step.gridSize;
    report.grid = describeGrid(grid.getKind(), step);
    report.block = step.block;
    report.sharedMemory = step.sharedMemory;
    if (reported.insert(step.kernel).second)
      result.kernels.push_back(std::move(report));
  };
  auto names = [](ArrayAttr args) {
    std::vector<std::string> out;
    for (auto ref : args.getAsRange<FlatSymbolRefAttr>())
      out.push_back(ref.getValue().str());
    return out;
  };
  for (auto schedule : gpuProgram.getOps<moegpu::ScheduleOp>()) {
    StringRef entry = schedule.getEntry();
    std::vector<rt::GpuStep> &into = entry == "train"    ? program.trainSteps
                                     : entry == "update" ? program.updateSteps
                                     : entry == "backward"
                                         ? program.backwardSteps
                                         : program.steps;
    phase = entry == "train" || entry == "backward" ? Sm90Phase::Train
            : entry == "update"                     ? Sm90Phase::Update
                                                    : Sm90Phase::Forward;
    for (Operation &op : schedule.getBody().front()) {
      rt::GpuStep step;
      if (auto launch = dyn_cast<moegpu::LaunchOp>(op)) {
        step.kind = abi::StepKind::Launch;
        step.args = names(launch.getArgs());
        step.chunk = launch.getChunk().value_or(-1);
        step.transport = toAbi(launch.getTransport());
        readLaunch(launch, step);
      } else if (auto memset = dyn_cast<moegpu::MemsetOp>(op)) {
        step.kind = abi::StepKind::Memset;
        step.buffer = memset.getBuffer().str();
      } else if (auto exchange = dyn_cast<moegpu::ExchangeOp>(op)) {
        step.kind = abi::StepKind::Exchange;
        step.exchange = toAbi(exchange.getKind());
        step.args = names(exchange.getArgs());
        step.chunk = exchange.getChunk().value_or(-1);
        step.transport = toAbi(exchange.getTransport());
      } else if (auto reduce = dyn_cast<moegpu::AllReduceOp>(op)) {
        step.kind = abi::StepKind::AllReduce;
        step.args = names(reduce.getArgs());
      } else {
        op.emitOpError() << "is not a step the runtime runs";
        error = "the schedule holds an unknown step";
        return std::nullopt;
      }
      into.push_back(std::move(step));
    }
  }
  rt::indexGpuBuffers(program);
  // Its job done, the program leaves before the kernels become PTX.
  gpuProgram.erase();

  // The kernels on the machine's cores (LLVM's NVPTX backend compiles a
  // module's kernels one after another): each in a module of its own, the
  // threads taking the largest left, then the PTX merged back in the
  // kernels' order into one module for ptxas (the same PTX on every run).
  int64_t kernelCount = std::distance(kernels.getOps<gpu::GPUFuncOp>().begin(),
                                      kernels.getOps<gpu::GPUFuncOp>().end());
  int64_t workers =
      ctx->isMultithreadingEnabled()
          ? std::min<int64_t>(
                {std::max(1u, std::thread::hardware_concurrency()), kernelCount,
                 8})
          : 1;
  SmallVector<std::pair<OwningOpRef<ModuleOp>, int64_t>> shares;
  if (workers > 1) {
    shares = splitKernels(kernels);
    kernels.erase();
  }
  SmallVector<ModuleOp> targets;
  SmallVector<size_t> order;
  if (shares.empty())
    targets.push_back(module);
  for (auto &share : shares)
    targets.push_back(*share.first);
  for (size_t i = 0; i < targets.size(); ++i)
    order.push_back(i);
  if (!shares.empty())
    llvm::sort(order, [&](size_t l, size_t r) {
      return std::make_pair(-shares[l].second, l) <
             std::make_pair(-shares[r].second, r);
    });
  SmallVector<std::string> ptx(targets.size()), failures(targets.size());
  {
    TimingScope scope = timing.nest("PTX (NVPTX backend)");
    auto lower = [&](size_t i) {
      PassManager pm(ctx);
      if (targets.size() == 1)
        pm.enableTiming(scope);
      buildSm90BinaryPipeline(pm, pipeline);
      if (failed(pm.run(targets[i]))) {
        failures[i] = "lowering the kernels to PTX failed";
        return;
      }
      auto binary = targets[i].lookupSymbol<gpu::BinaryOp>("moe_kernels");
      auto object = binary && !binary.getObjects().empty()
                        ? dyn_cast<gpu::ObjectAttr>(binary.getObjects()[0])
                        : gpu::ObjectAttr();
      if (!object) {
        failures[i] = "no gpu.binary with a gpu.object after the PTX pipeline";
        return;
      }
      ptx[i] = object.getObject().str();
    };
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < order.size(); i = next++)
        lower(order[i]);
    };
    std::vector<std::thread> threads;
    for (int64_t w = 1; w < workers; ++w)
      threads.emplace_back(work);
    work();
    for (std::thread &t : threads)
      t.join();
  }
  for (const std::string &failure : failures)
    if (!failure.empty()) {
      error = failure;
      return std::nullopt;
    }
  std::optional<std::string> merged = mergePtx(ptx);
  if (!merged) {
    error = "the PTX of the kernels' shares has different headers";
    return std::nullopt;
  }
  result.ptx = std::move(*merged);

  if (options.cubin) {
    TimingScope scope = timing.nest("ptxas");
    std::optional<std::string> ptxas = findPtxas(options.ptxas);
    if (!ptxas) {
      error = options.ptxas.empty()
                  ? "ptxas not found: cubins for sm_90a need the CUDA "
                    "toolkit's ptxas (set MOE_PTXAS, --ptxas or PATH)"
                  : "--ptxas=" + options.ptxas + " is not an executable";
      return std::nullopt;
    }
    if (!runPtxas(*ptxas, result.ptx, result.cubin, result.kernels, error))
      return std::nullopt;
    // A warp-specialized kernel must start with the registers its
    // setmaxnreg plan hands out, or the consumers' setmaxnreg.inc waits
    // forever on the GPU.
    for (const Sm90KernelReport &k : result.kernels)
      if (k.requiredRegisters > 0 && k.registers >= 0 &&
          k.registers < k.requiredRegisters) {
        error = "kernel '" + k.name + "': ptxas allocated " +
                std::to_string(k.registers) +
                " registers per thread, but its warp specialization's "
                "setmaxnreg plan needs " +
                std::to_string(k.requiredRegisters) + " for its " +
                std::to_string(k.block) +
                " threads (its consumer warpgroups' setmaxnreg.inc would "
                "never be satisfied)";
        return std::nullopt;
      }
    // The pipelines keep wgmma batches in flight; ptxas serializing them
    // (its C7514) makes a kernel several times slower without failing.
    for (const Sm90KernelReport &k : result.kernels)
      if (k.serializedWgmma) {
        error = "kernel '" + k.name +
                "': ptxas serialized its wgmma instructions (C7514: "
                "something reads the accumulator while a batch may be in "
                "flight); the kernel would run but far below the tensor "
                "cores' rate. This is a bug of the compiler's lowering";
        return std::nullopt;
      }
  }
  return result;
}
