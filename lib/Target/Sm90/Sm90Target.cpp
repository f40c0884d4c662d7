//===- Sm90Target.cpp - The Hopper (sm_90a) target ------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeOps.h"
#include "moe/Pipelines/Pipelines.h"
#include "moe/Support/Routing.h"
#include "moe/Target/Sm90.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <set>

using namespace mlir;
using namespace mlir::moe;
namespace rt = ::moe::rt;

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
  llvm::SmallVector<llvm::StringRef> args{ptxas,  "-arch=sm_90a", "-O3",   "-v",
                                          ptxArg, "-o",           cubinArg};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, logPath.str(),
                                                logPath.str()};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects, 0, 0,
                                     &message);
  auto log = llvm::MemoryBuffer::getFile(logPath);
  std::string logText = log ? (*log)->getBuffer().str() : "";
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

std::string describeGrid(const rt::GpuStep &step) {
  if (step.gridKind == "persistent")
    return std::to_string(step.gridSize) + " (persistent)";
  if (step.gridKind == "one")
    return "1";
  if (step.gridKind == "fixed")
    return std::to_string(step.gridSize);
  if (step.gridKind == "rows" || step.gridKind == "received_rows") {
    std::string count = step.gridKind == "rows" ? "R" : "ep*R";
    return step.perBlock > 1
               ? "ceil(" + count + "/" + std::to_string(step.perBlock) + ")"
               : count + " (row capacity)";
  }
  std::string count = step.gridKind == "tokens" ? "T" : "T*k";
  return step.perBlock == 1
             ? count
             : "ceil(" + count + "/" + std::to_string(step.perBlock) + ")";
}

} // namespace

std::optional<Sm90Result> mlir::moe::compileSm90(ModuleOp module,
                                                 const Sm90Options &options,
                                                 TimingScope &timing,
                                                 std::string &error) {
  MLIRContext *ctx = module.getContext();
  LayerConfigAttr config;
  module.walk([&](LayerOp layer) { config = layer.getConfig(); });
  if (!config) {
    error = "no moe.layer to compile";
    return std::nullopt;
  }
  std::optional<int64_t> rows =
      paddedRowsUpperBound(options.maxTokens, config.getTopK(),
                           config.getExperts(), options.alignment);
  if (!rows) {
    error = "--max-tokens " + std::to_string(options.maxTokens) +
            " gives a dispatched buffer too large to address";
    return std::nullopt;
  }

  Sm90PipelineOptions pipeline;
  pipeline.sms = options.sms;
  pipeline.comm = options.comm;
  pipeline.format = "isa";
  {
    TimingScope scope = timing.nest("Kernels (moegpu)");
    PassManager pm(ctx);
    pm.enableTiming(scope);
    ConvertMoeToMoeGpuOptions convert;
    convert.alignment = options.alignment;
    convert.train = options.train;
    pm.addPass(createConvertMoeToMoeGpu(convert));
    buildMoeGpuKernelPipeline(pm, pipeline);
    if (failed(pm.run(module))) {
      error = "the sm_90a kernel pipeline failed";
      return std::nullopt;
    }
  }

  Sm90Result result;
  rt::GpuProgram &program = result.program;
  program.rowCapacity = *rows;
  program.commSms = options.comm;
  if (auto partition = module->getAttrOfType<SmPartitionAttr>(
          MoeDialect::getSmPartitionAttrName()))
    program.commSms = partition.getComm();
  auto buffers = module->getAttrOfType<ArrayAttr>("moegpu.buffers");
  auto schedule = module->getAttrOfType<ArrayAttr>("moegpu.schedule");
  auto kernels = module.lookupSymbol<gpu::GPUModuleOp>("moe_kernels");
  if (!buffers || !schedule || !kernels) {
    error = "the kernel pipeline left no schedule";
    return std::nullopt;
  }
  for (Attribute attr : buffers) {
    auto dict = cast<DictionaryAttr>(attr);
    rt::GpuBuffer b;
    b.name = cast<StringAttr>(dict.get("name")).str();
    std::string typeName;
    llvm::raw_string_ostream(typeName)
        << cast<TypeAttr>(dict.get("type")).getValue();
    std::optional<rt::DType> dtype = rt::parseMlirName(typeName);
    if (!dtype) {
      error = "buffer '" + b.name + "' has element type " + typeName +
              ", which the runtime has no dtype for";
      return std::nullopt;
    }
    b.dtype = *dtype;
    for (int64_t d : cast<DenseI64ArrayAttr>(dict.get("shape")).asArrayRef())
      b.shape.push_back(d);
    b.source = cast<StringAttr>(dict.get("source")).str();
    program.buffers.push_back(std::move(b));
  }
  std::set<std::string> reported;
  auto readStep = [&](Attribute attr, std::vector<rt::GpuStep> &into) {
    auto dict = cast<DictionaryAttr>(attr);
    rt::GpuStep step;
    step.op = cast<StringAttr>(dict.get("op")).str();
    if (step.op == "memset") {
      step.buffer = cast<StringAttr>(dict.get("buffer")).str();
      into.push_back(std::move(step));
      return;
    }
    if (step.op == "exchange" || step.op == "all_reduce") {
      if (auto kind = dict.getAs<StringAttr>("exchange"))
        step.exchange = kind.str();
      for (Attribute arg : cast<ArrayAttr>(dict.get("args")))
        step.args.push_back(cast<StringAttr>(arg).str());
      into.push_back(std::move(step));
      return;
    }
    step.kernel = cast<StringAttr>(dict.get("kernel")).str();
    for (Attribute arg : cast<ArrayAttr>(dict.get("args")))
      step.args.push_back(cast<StringAttr>(arg).str());
    auto grid = cast<DictionaryAttr>(dict.get("grid"));
    step.gridKind = cast<StringAttr>(grid.get("kind")).str();
    if (auto perBlock = grid.getAs<IntegerAttr>("per_block"))
      step.perBlock = perBlock.getInt();
    if (auto size = grid.getAs<IntegerAttr>("size"))
      step.gridSize = size.getInt();
    step.block = cast<IntegerAttr>(dict.get("block")).getInt();
    auto func = kernels.lookupSymbol<gpu::GPUFuncOp>(step.kernel);
    Sm90KernelReport report;
    report.name = step.kernel;
    if (func)
      if (auto launch = func->getAttrOfType<DictionaryAttr>("moegpu.launch")) {
        step.gridSize = cast<IntegerAttr>(launch.get("grid")).getInt();
        if (int64_t block = cast<IntegerAttr>(launch.get("block")).getInt())
          step.block = block;
        step.sharedMemory = cast<IntegerAttr>(launch.get("smem")).getInt();
        if (auto tile = launch.getAs<moegpu::TileAttr>("tile"))
          report.tile = std::to_string(tile.getM()) + "x" +
                        std::to_string(tile.getN()) + "x" +
                        std::to_string(tile.getK()) + ", " +
                        std::to_string(tile.getStages()) + " stages";
        for (Attribute m :
             func->getAttrOfType<ArrayAttr>("moegpu.tensor_maps")) {
          auto map = cast<DictionaryAttr>(m);
          rt::GpuTensorMap t;
          t.arg = cast<IntegerAttr>(map.get("arg")).getInt();
          t.source = cast<IntegerAttr>(map.get("source")).getInt();
          for (int64_t d :
               cast<DenseI64ArrayAttr>(map.get("view")).asArrayRef())
            t.view.push_back(d);
          for (int64_t d : cast<DenseI64ArrayAttr>(map.get("box")).asArrayRef())
            t.box.push_back(d);
          t.swizzle = cast<IntegerAttr>(map.get("swizzle")).getInt();
          step.tensorMaps.push_back(std::move(t));
        }
      }
    report.grid = describeGrid(step);
    report.block = step.block;
    report.sharedMemory = step.sharedMemory;
    if (!reported.count(step.kernel)) {
      reported.insert(step.kernel);
      result.kernels.push_back(std::move(report));
    }
    into.push_back(std::move(step));
  };
  for (Attribute attr : schedule)
    readStep(attr, program.steps);
  if (auto train = module->getAttrOfType<ArrayAttr>("moegpu.train_schedule"))
    for (Attribute attr : train)
      readStep(attr, program.trainSteps);

  {
    TimingScope scope = timing.nest("PTX (NVPTX backend)");
    PassManager pm(ctx);
    pm.enableTiming(scope);
    buildSm90BinaryPipeline(pm, pipeline);
    if (failed(pm.run(module))) {
      error = "lowering the kernels to PTX failed";
      return std::nullopt;
    }
  }
  auto binary = module.lookupSymbol<gpu::BinaryOp>("moe_kernels");
  if (!binary || binary.getObjects().empty()) {
    error = "no gpu.binary after the PTX pipeline";
    return std::nullopt;
  }
  result.ptx = cast<gpu::ObjectAttr>(binary.getObjects()[0]).getObject().str();

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
  }
  return result;
}
