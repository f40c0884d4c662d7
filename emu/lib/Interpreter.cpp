//===- Interpreter.cpp - Running PTX kernels warp by warp ------------------===//
//
// Part of moe-compiler's PTX emulator.
//
// Execution model. A launch runs its grid one cluster at a time (a cluster
// of one CTA unless the launch asks for more); the CTAs of a cluster run
// interleaved, so distributed shared memory and cluster barriers work. A
// CTA's threads are warps of 32 lanes, each lane with its own program
// counter. A warp issues the instruction at the lowest program counter
// among its ready lanes, for every ready lane there: lanes that branched
// apart run apart and meet again where their paths join, as with
// independent thread scheduling. A lane blocks on bar.sync, on an mbarrier
// phase it waits for (try_wait suspends it until the phase completes), on
// a warp collective (shfl, vote, ...) until the lanes of its member mask
// arrive, and on a warpgroup collective (wgmma.mma_async, setmaxnreg) until
// the warpgroup's 128 threads arrive. The scheduler runs each warp with
// ready lanes for a slice of instructions in turn; when no lane of any CTA
// is ready and some have not exited, the launch has deadlocked and the
// report names every blocked warp, its PTX line and what it waits for.
//
// Asynchronous operations complete at issue: a TMA copy writes shared
// memory and completes its mbarrier transaction bytes at once, a wgmma
// reads its operands and writes its accumulators at once. A correct
// program cannot tell, as it must wait for the mbarrier phase or the wgmma
// group before it reads the results.
//
// Address spaces. Global addresses are host addresses inside allocations
// of the GlobalMemory; shared addresses are offsets in the CTA's shared
// memory (static variables first, then the dynamic window); a
// shared::cluster address carries the target CTA's rank + 1 in bits 24-31
// (0: the executing CTA). Generic addresses of shared, local and parameter
// memory are windows at addresses no host pointer takes (0xFE.., 0xFD..,
// 0xFC.. in the top byte).
//
//===----------------------------------------------------------------------===//

#include "moe/emu/Emulator.h"

#include "Float.h"
#include "Ptx.h"
#include "Races.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace moe::emu {

/// How long a spin on memory that peers share waits for them to write it:
/// $MOE_EMU_PEER_TIMEOUT seconds (300, as libnccl-emu's timeout).
static double peerTimeoutSeconds() {
  static const double seconds = [] {
    const char *t = std::getenv("MOE_EMU_PEER_TIMEOUT");
    return t && *t ? std::atof(t) : 300.0;
  }();
  return seconds;
}

//===----------------------------------------------------------------------===//
// Global memory
//===----------------------------------------------------------------------===//

struct GlobalMemory::Block {
  uint64_t size;
  void *owned; // null: adopted
  bool shared = false;
};

struct GlobalMemory::Impl {
  mutable std::mutex mutex;
  std::map<uint64_t, Block> blocks;
};

GlobalMemory::GlobalMemory() : impl(std::make_unique<Impl>()) {}
GlobalMemory::~GlobalMemory() {
  for (auto &[address, block] : impl->blocks)
    std::free(block.owned);
}

/// Bytes kept free after every allocation: an access that overruns one
/// allocation lands in its guard, reported as an overrun, and never in a
/// neighbouring live allocation (as it would with the heap's allocations
/// back to back).
static constexpr size_t kGuardBytes = 64 * 1024;

uint64_t GlobalMemory::allocate(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  if (rounded > SIZE_MAX - kGuardBytes)
    return 0;
  void *p = std::aligned_alloc(256, rounded + kGuardBytes);
  if (!p)
    return 0;
  // Fresh device memory holds garbage; a recognizable pattern makes reads
  // of never-written memory stand out (NaN as bf16, f16 and f32).
  std::memset(p, 0xFF, rounded);
  std::lock_guard<std::mutex> lock(impl->mutex);
  impl->blocks[reinterpret_cast<uint64_t>(p)] = {bytes, p};
  return reinterpret_cast<uint64_t>(p);
}

bool GlobalMemory::release(uint64_t address) {
  std::lock_guard<std::mutex> lock(impl->mutex);
  auto it = impl->blocks.find(address);
  if (it == impl->blocks.end() || !it->second.owned)
    return false;
  std::free(it->second.owned);
  impl->blocks.erase(it);
  return true;
}

void GlobalMemory::adopt(uint64_t address, size_t bytes, bool shared) {
  std::lock_guard<std::mutex> lock(impl->mutex);
  impl->blocks[address] = {bytes, nullptr, shared};
}

void GlobalMemory::forget(uint64_t address) {
  std::lock_guard<std::mutex> lock(impl->mutex);
  impl->blocks.erase(address);
}

/// The allocation that starts at or below `address`, or false.
static bool atOrBelow(const std::map<uint64_t, GlobalMemory::Block> &blocks,
                      uint64_t address, uint64_t &start, uint64_t &size) {
  auto it = blocks.upper_bound(address);
  if (it == blocks.begin())
    return false;
  --it;
  start = it->first;
  size = it->second.size;
  return true;
}

bool GlobalMemory::find(uint64_t address, uint64_t &start,
                        uint64_t &size) const {
  std::lock_guard<std::mutex> lock(impl->mutex);
  return atOrBelow(impl->blocks, address, start, size) &&
         address - start < size;
}

bool GlobalMemory::nearestBelow(uint64_t address, uint64_t &start,
                                uint64_t &size) const {
  std::lock_guard<std::mutex> lock(impl->mutex);
  // Only close misses: within the allocation's rounding to 256 bytes and
  // its guard.
  return atOrBelow(impl->blocks, address, start, size) &&
         address < start + (size + 255) / 256 * 256 + kGuardBytes;
}

bool GlobalMemory::isShared(uint64_t address) const {
  std::lock_guard<std::mutex> lock(impl->mutex);
  auto it = impl->blocks.upper_bound(address);
  if (it == impl->blocks.begin())
    return false;
  --it;
  return it->second.shared && address - it->first < it->second.size;
}

size_t GlobalMemory::allocatedBytes() const {
  std::lock_guard<std::mutex> lock(impl->mutex);
  size_t total = 0;
  for (const auto &[address, block] : impl->blocks)
    if (block.owned)
      total += block.size;
  return total;
}

bool GlobalMemory::contains(uint64_t address, size_t bytes) const {
  uint64_t start, size;
  return find(address, start, size) && address + bytes <= start + size;
}

//===----------------------------------------------------------------------===//
// Module queries
//===----------------------------------------------------------------------===//

namespace {

/// Instructions the interpreter runs on a fast path: scalar integer and f32
/// arithmetic whose operands are plain registers or integer/f32 literals,
/// scalar global loads and stores through a register. Everything else
/// takes the general path.
enum Fast : uint8_t {
  FastNone, FastMov, FastAdd, FastSub, FastMulLo, FastMulWide, FastMadLo,
  FastMadWide, FastAnd, FastOr, FastXor, FastShl, FastShrU, FastShrS,
  FastSelp, FastSetpInt, FastAddF, FastSubF, FastMulF, FastFmaF, FastSetpF,
  FastCvtBf16F32, FastCvtF32Bf16, FastCvtInt, FastLdGlobal, FastStGlobal,
};

bool plainSource(const Operand &o, Ty t) {
  if (o.kind == Operand::Reg)
    return !o.negated && !(o.reg >= SrClock && o.reg <= SrGlobaltimer);
  if (o.kind == Operand::Imm)
    return !o.isDoubleLiteral && (t == Ty::F32 || !o.isFloatLiteral);
  return false;
}

uint8_t classify(const Instr &in) {
  constexpr uint32_t kRound = FRz | FRm | FRp | FRni | FRzi | FRmi | FRpi;
  if (in.ops.empty() || in.ops[0].kind != Operand::Reg ||
      in.ops[0].reg < kNumSpecial)
    return FastNone;
  auto sources = [&](size_t from, Ty t) {
    for (size_t i = from; i < in.ops.size(); ++i)
      if (!plainSource(in.ops[i], t))
        return false;
    return true;
  };
  Ty t = in.type;
  bool integer = !isFloat(t) && t != Ty::B128 && t != Ty::None;
  if (in.flags & (FCc | FCarryIn)) // the carry flag: the general path
    return FastNone;
  switch (in.op) {
  case Op::Mov:
    return (integer || t == Ty::F32) && sources(1, t) && t != Ty::Pred
               ? FastMov
               : FastNone;
  case Op::Add: case Op::Sub: case Op::Mul: case Op::Mad:
    if (t == Ty::F32 && sources(1, t) && !(in.flags & (kRound | FFtz | FSat)))
      return in.op == Op::Add   ? FastAddF
             : in.op == Op::Sub ? FastSubF
             : in.op == Op::Mul ? FastMulF
                                : FastNone;
    if (!integer || !sources(1, t) || (in.flags & (FSat | FHi)))
      return FastNone;
    if (in.op == Op::Add) return FastAdd;
    if (in.op == Op::Sub) return FastSub;
    if (in.op == Op::Mul) return (in.flags & FWide) ? FastMulWide : FastMulLo;
    return (in.flags & FWide) ? FastMadWide : FastMadLo;
  case Op::Fma:
    return t == Ty::F32 && sources(1, t) && !(in.flags & (kRound | FFtz | FSat))
               ? FastFmaF
               : FastNone;
  case Op::And: case Op::Or: case Op::Xor:
    if (!integer || !sources(1, t))
      return FastNone;
    return in.op == Op::And ? FastAnd : in.op == Op::Or ? FastOr : FastXor;
  case Op::Shl: case Op::Shr:
    if (!integer || t == Ty::Pred || !sources(1, t))
      return FastNone;
    return in.op == Op::Shl ? FastShl : isSignedInt(t) ? FastShrS : FastShrU;
  case Op::Selp:
    return (integer || t == Ty::F32) && sources(1, t) && t != Ty::Pred
               ? FastSelp
               : FastNone;
  case Op::Setp:
    if (in.ops.size() != 3 || !sources(1, t))
      return FastNone;
    if (integer && t != Ty::Pred)
      return FastSetpInt;
    return t == Ty::F32 && !(in.flags & FFtz) ? FastSetpF : FastNone;
  case Op::Cvt:
    if (in.ops.size() != 2 || !plainSource(in.ops[1], in.type2))
      return FastNone;
    if (t == Ty::BF16 && in.type2 == Ty::F32 && (in.flags & FRn) &&
        !(in.flags & (FSat | FRelu | FFtz)))
      return FastCvtBf16F32;
    if (t == Ty::F32 && in.type2 == Ty::BF16 && !(in.flags & (FFtz | FSat)))
      return FastCvtF32Bf16;
    if (integer && !isFloat(in.type2) && in.type2 != Ty::Pred &&
        !(in.flags & FSat))
      return FastCvtInt;
    return FastNone;
  case Op::Ld:
    return in.space == Space::Global && in.vec == 1 &&
                   in.ops[1].kind == Operand::Addr && in.ops[1].reg >= 0 &&
                   integer && bitsOf(t) <= 64 && in.ops.size() == 2
               ? FastLdGlobal
               : FastNone;
  default:
    return FastNone;
  }
}

/// Whether `op` changes nothing another thread can see: registers only,
/// loads, branches, warp collectives. Everything else (stores, atomics,
/// barrier and mbarrier arrivals, asynchronous copies, wgmma, exits) is
/// progress, which the hang check waits for.
bool isPure(Op op) {
  switch (op) {
  case Op::Mov: case Op::Add: case Op::Sub: case Op::Mul: case Op::Mad:
  case Op::Fma: case Op::Div: case Op::Rem: case Op::Abs: case Op::Neg:
  case Op::Min: case Op::Max: case Op::And: case Op::Or: case Op::Xor:
  case Op::Not: case Op::Cnot: case Op::Shl: case Op::Shr: case Op::Bfe:
  case Op::Bfi: case Op::Brev: case Op::Popc: case Op::Clz: case Op::Prmt:
  case Op::Selp: case Op::Setp: case Op::Cvt: case Op::Cvta: case Op::Rcp:
  case Op::Sqrt: case Op::Rsqrt: case Op::Ex2: case Op::Lg2: case Op::Sin:
  case Op::Cos: case Op::Tanh: case Op::Copysign: case Op::Testp:
  case Op::Mul24: case Op::Mad24: case Op::Sad: case Op::Ld:
  case Op::Prefetch: case Op::Bra: case Op::Nanosleep: case Op::Membar:
  case Op::Fence: case Op::Shfl: case Op::Vote: case Op::Redux:
  case Op::Elect: case Op::Activemask: case Op::Match:
  case Op::MbarTestWait: case Op::TmaPrefetch: case Op::Ldmatrix:
  case Op::Griddepcontrol: case Op::Mapa: case Op::Isspacep: case Op::Nop:
  case Op::WarpSync: case Op::Shf: case Op::Bfind: case Op::Dp4a:
  case Op::Vabsdiff4: case Op::MmaSync:
    return true;
  default:
    return false;
  }
}

uint8_t classifyStore(const Instr &in) {
  Ty t = in.type;
  if (in.op != Op::St || in.space != Space::Global || in.vec != 1 ||
      in.ops.size() != 2 || in.ops[1].kind != Operand::Addr ||
      in.ops[1].reg < 0 || isFloat(t) || bitsOf(t) > 64 ||
      in.ops[0].kind != Operand::Reg || !plainSource(in.ops[0], t))
    return FastNone;
  return FastStGlobal;
}

} // namespace

std::shared_ptr<Module> loadModule(const std::string &ptx,
                                   const std::string &name,
                                   std::string &error) {
  std::unique_ptr<Module> m = parseModule(ptx, name, error);
  if (m)
    for (Kernel &k : m->kernels)
      for (Instr &in : k.code) {
        in.fast = in.op == Op::St ? classifyStore(in) : classify(in);
        in.pure = isPure(in.op);
      }
  return std::shared_ptr<Module>(std::move(m));
}

void adoptVariables(const Module &module, GlobalMemory &memory) {
  for (const Symbol &s : module.symbols)
    if ((s.space == Space::Global || s.space == Space::Const) && s.address)
      memory.adopt(s.address, std::max<uint64_t>(s.bytes, 1));
}

void forgetVariables(const Module &module, GlobalMemory &memory) {
  for (const Symbol &s : module.symbols)
    if ((s.space == Space::Global || s.space == Space::Const) && s.address)
      memory.forget(s.address);
}

const Kernel *findKernel(const Module &module, const std::string &name) {
  auto it = module.kernelIndex.find(name);
  if (it == module.kernelIndex.end() || !module.kernels[it->second].isEntry)
    return nullptr;
  return &module.kernels[it->second];
}

ParamLayout paramLayout(const Kernel &kernel) {
  ParamLayout l;
  for (const Param &p : kernel.params) {
    l.sizes.push_back(p.bytes);
    l.offsets.push_back(p.offset);
  }
  l.bytes = kernel.paramBytes;
  return l;
}

uint32_t staticSharedBytes(const Kernel &kernel) { return kernel.staticShared; }

const std::string &kernelName(const Kernel &kernel) { return kernel.name; }

uint32_t maxThreads(const Kernel &kernel) {
  if (kernel.reqntid[0])
    return kernel.reqntid[0] * kernel.reqntid[1] * kernel.reqntid[2];
  if (kernel.maxntid[0])
    return kernel.maxntid[0] * kernel.maxntid[1] * kernel.maxntid[2];
  return 0;
}

namespace {

constexpr uint64_t kWindowMask = 0xFF00000000000000ull;
constexpr uint64_t kSharedWindow = 0xFE00000000000000ull;
constexpr uint64_t kLocalWindow = 0xFD00000000000000ull;
constexpr uint64_t kParamWindow = 0xFC00000000000000ull;
constexpr uint32_t kMaxShared = 232448; // 227 KiB: sm_90's opt-in maximum
constexpr uint32_t kRegisterFile = 65536;

enum LaneState : uint8_t {
  Ready,
  Exited,
  AtBarrier,    // bar.sync: wait = barrier id
  AtMbarrier,   // try_wait: wait = (rank << 32) | address
  AtCollective, // a warp collective at this pc
  AtWarpgroup,  // a warpgroup collective at this pc
  AtCluster,    // barrier.cluster.wait: wait = the phase waited past
};

struct MBarrier {
  uint32_t pending = 0, expected = 0;
  int64_t tx = 0;
  uint32_t phase = 0;
};

struct Warp {
  uint32_t index = 0;
  uint32_t live = 0; // lanes that exist
  uint32_t pc[32];
  uint8_t state[32];
  uint64_t wait[32];
  uint8_t cc[32]; // the carry (borrow) flag of add.cc, addc, mad.cc, ...
  uint32_t lastLoad = UINT32_MAX; // pc of the warp's latest ld (for reports)
  uint64_t *regs = nullptr;
  uint8_t *local = nullptr;
  uint32_t nreg = 0;
};

struct Cta {
  Dim3 id;
  uint32_t rank = 0;
  uint64_t linear = 0;
  std::vector<uint8_t> smem;
  std::vector<Warp> warps;
  struct Bar {
    uint32_t arrived = 0, expected = 0;
    uint32_t popc = 0;
    uint32_t waiters = 0; // warps (by index) with a lane waiting here
    bool andv = true, orv = false;
  } bars[16];
  std::unordered_map<uint32_t, MBarrier> mbars;
  uint32_t threads = 0, exited = 0;
  RaceDetector races;
};

struct Fault {};

class Engine {
public:
  Engine(const Module &m, const Kernel &k, Dim3 grid, Dim3 block,
         Dim3 cluster, uint32_t dynShared, const std::vector<uint8_t> &params,
         GlobalMemory &mem, const LaunchOptions &opt)
      : m(m), k(k), grid(grid), block(block), cluster(cluster),
        dynShared(dynShared), params(params), mem(mem), opt(opt) {}

  LaunchResult run(LaunchStats *stats);

private:
  const Module &m;
  const Kernel &k;
  Dim3 grid, block, cluster;
  uint32_t dynShared;
  const std::vector<uint8_t> &params;
  GlobalMemory &mem;
  const LaunchOptions &opt;

  std::vector<Cta> ctas; // the running cluster
  std::vector<uint64_t> regStore;
  std::vector<uint8_t> localStore;
  uint32_t warpsPerCta = 0;
  uint32_t smemBytes = 0;
  uint32_t dynBase = 0;
  uint32_t initialRegs = 0;
  std::string error;
  uint64_t warpInstructions = 0, threadInstructions = 0;
  /// warpInstructions at the last instruction that could change what
  /// another thread sees (a store, an atomic, a barrier or mbarrier
  /// arrival, an asynchronous copy, an exit...): see spinCheck().
  uint64_t lastProgress = 0;
  /// Hashes of the cluster's whole state at the ends of scheduling rounds
  /// since lastProgress went stale.
  std::unordered_set<uint64_t> spinStates;
  /// When the threads began to spin on memory that other processes write
  /// (a peer's flag in symmetric memory), or 0: such a spin ends when the
  /// peer writes, so it is waited for, up to peerTimeoutSeconds().
  std::chrono::steady_clock::time_point peerWaitSince{};
  bool yieldFlag = false;
  FILE *trace = nullptr;
  uint32_t clusterPhase = 0, clusterArrived = 0;
  // Last global allocation hit (a one-entry cache of the bounds check).
  uint64_t hitStart = 1, hitEnd = 0;
  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();

  // Context of the instruction being executed, for reports.
  Cta *curCta = nullptr;
  Warp *curWarp = nullptr;
  const Instr *curInstr = nullptr;

  /// What a failed launch was, for the driver's error code.
  LaunchFailure failure = LaunchFailure::Failed;

  /// An access outside memory: the GPU's illegal address.
  [[noreturn]] void badAddress(int lane, const std::string &what) {
    failure = LaunchFailure::IllegalAddress;
    fail(lane, what);
  }
  /// The launch itself cannot run (its shape or resources): nothing ran.
  [[noreturn]] void badLaunch(const std::string &what) {
    failure = LaunchFailure::BadLaunch;
    fail(-1, what);
  }

  [[noreturn]] void fail(int lane, const std::string &what) {
    std::ostringstream os;
    os << m.name << ":" << (curInstr ? curInstr->line : k.line)
       << ": kernel '" << k.name << "'";
    if (curCta)
      os << ", CTA (" << curCta->id.x << "," << curCta->id.y << ","
         << curCta->id.z << ")";
    if (curWarp)
      os << ", warp " << curWarp->index;
    if (lane >= 0)
      os << ", lane " << lane;
    os << ": " << what;
    if (curInstr)
      os << "\n    " << curInstr->text;
    error = os.str();
    throw Fault{};
  }

  // ---- registers and operands --------------------------------------------

  uint64_t &reg(Warp &w, int r, int lane) { return w.regs[r * 32 + lane]; }

  uint64_t symbolAddress(int sym) const {
    if (sym <= -2) {
      const Param &p = k.params[-2 - sym];
      return kParamWindow | p.offset;
    }
    const Symbol &s = m.symbols[sym];
    if (s.space == Space::Shared && s.external)
      return dynBase;
    return s.address;
  }

  uint64_t clockValue() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now() - start)
            .count());
  }

  uint64_t read(Warp &w, const Operand &o, int lane) {
    switch (o.kind) {
    case Operand::Reg: {
      if (o.reg >= SrClock && o.reg <= SrGlobaltimer)
        return clockValue();
      uint64_t v = reg(w, o.reg, lane);
      return o.negated ? !v : v;
    }
    case Operand::Imm:
      return o.imm;
    case Operand::Sym:
      return symbolAddress(o.sym);
    case Operand::Vec:
      if (o.elems.size() == 1) // {%r}: a one-element vector
        return read(w, o.elems[0], lane);
      [[fallthrough]];
    default:
      fail(lane, "this operand cannot be read as a value");
    }
  }

  void write(Warp &w, const Operand &o, int lane, uint64_t v) {
    if (o.kind == Operand::Reg) {
      if (o.reg < kNumSpecial)
        fail(lane, "a special register is read-only");
      reg(w, o.reg, lane) = v;
    } else if (o.kind == Operand::Vec && o.elems.size() == 1) {
      write(w, o.elems[0], lane, v);
    } else if (o.kind != Operand::Sink) {
      fail(lane, "the destination is not a register");
    }
  }

  static uint64_t maskBits(uint64_t v, unsigned bits) {
    return bits >= 64 ? v : (v & ((1ull << bits) - 1));
  }
  static int64_t signExtend(uint64_t v, unsigned bits) {
    if (bits >= 64)
      return static_cast<int64_t>(v);
    uint64_t s = 1ull << (bits - 1);
    v = maskBits(v, bits);
    return static_cast<int64_t>((v ^ s) - s);
  }

  // Floating-point operand values: literals are written as f32 (0f), f64
  // (0d, decimal) or integers; registers hold the type's bits.
  float readF32(Warp &w, const Operand &o, int lane) {
    if (o.kind == Operand::Imm) {
      if (o.isDoubleLiteral)
        return static_cast<float>(bitsToF64(o.imm));
      if (o.isFloatLiteral)
        return bitsToF32(static_cast<uint32_t>(o.imm));
      return static_cast<float>(static_cast<int64_t>(o.imm));
    }
    return bitsToF32(static_cast<uint32_t>(read(w, o, lane)));
  }
  double readF64(Warp &w, const Operand &o, int lane) {
    if (o.kind == Operand::Imm) {
      if (o.isDoubleLiteral)
        return bitsToF64(o.imm);
      if (o.isFloatLiteral)
        return bitsToF32(static_cast<uint32_t>(o.imm));
      return static_cast<double>(static_cast<int64_t>(o.imm));
    }
    return bitsToF64(read(w, o, lane));
  }

  // ---- memory ------------------------------------------------------------

  uint8_t *sharedPtr(Cta &cta, uint64_t addr, size_t bytes, int lane,
                     bool cluster) {
    uint32_t rank = static_cast<uint32_t>((addr >> 24) & 0xFF);
    uint64_t offset = addr & 0xFFFFFF;
    Cta *target = &cta;
    if (rank != 0 || (addr >> 32) != 0) {
      if (!cluster || (addr >> 32) != 0)
        fail(lane, "shared address " + hex(addr) +
                       " is outside the CTA's shared memory");
      if (rank - 1 >= ctas.size())
        fail(lane, "shared::cluster address " + hex(addr) +
                       " names CTA rank " + std::to_string(rank - 1) +
                       " of a cluster of " + std::to_string(ctas.size()));
      target = &ctas[rank - 1];
    }
    if (offset + bytes > target->smem.size())
      badAddress(lane, "shared memory access of " + std::to_string(bytes) +
                           " bytes at " + hex(offset) + " is out of bounds (" +
                           std::to_string(target->smem.size()) +
                           " bytes of shared memory)");
    return target->smem.data() + offset;
  }

  static std::string hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
  }

  uint8_t *globalPtr(uint64_t addr, size_t bytes, int lane) {
    if (addr >= hitStart && addr + bytes <= hitEnd)
      return reinterpret_cast<uint8_t *>(addr);
    uint64_t s = 0, size = 0;
    if (!mem.find(addr, s, size)) {
      if (addr < 4096)
        badAddress(lane, "global access at " + hex(addr) + " (a null pointer)");
      if (mem.nearestBelow(addr, s, size))
        badAddress(lane,
                   "global access of " + std::to_string(bytes) + " bytes at " +
                       hex(addr) + " runs past the end of the " +
                       std::to_string(size) + "-byte allocation at " + hex(s) +
                       " (by " + std::to_string(addr + bytes - s - size) +
                       " bytes)");
      badAddress(lane, "global access of " + std::to_string(bytes) +
                           " bytes at " + hex(addr) +
                           " is outside every allocation");
    }
    if (addr + bytes > s + size)
      badAddress(lane, "global access of " + std::to_string(bytes) +
                           " bytes at " + hex(addr) +
                           " runs past the end of the " + std::to_string(size) +
                           "-byte allocation at " + hex(s) + " (by " +
                           std::to_string(addr + bytes - s - size) + " bytes)");
    hitStart = s;
    hitEnd = s + size;
    return reinterpret_cast<uint8_t *>(addr);
  }

  uint8_t *localPtr(Warp &w, uint64_t addr, size_t bytes, int lane) {
    if (addr + bytes > k.localBytes)
      badAddress(lane, "local memory access at " + hex(addr) +
                           " is out of bounds (" +
                           std::to_string(k.localBytes) + " bytes per thread)");
    return w.local + static_cast<size_t>(lane) * k.localBytes + addr;
  }

  static uint32_t tidOf(const Warp &w, int lane) {
    return w.index * 32 + static_cast<uint32_t>(lane);
  }

  /// The race check of an access to [p, p + bytes) when it is the CTA's
  /// shared memory.
  /// `excused`, when given, is asked once a conflict is found: true when
  /// the conflict is defined behaviour after all.
  /// `excused` is asked only once a conflict is found: true when the
  /// conflict is defined behaviour after all. (A template, not a
  /// std::function: this runs for every lane of every shared access.)
  template <typename Excused>
  void checkShared(Cta &cta, Warp &w, int lane, const uint8_t *p,
                   uint32_t bytes, bool isWrite, Excused excused) {
    if (!cta.races.enabled() || p < cta.smem.data() ||
        p >= cta.smem.data() + cta.smem.size())
      return;
    auto offset = static_cast<uint32_t>(p - cta.smem.data());
    std::string race = isWrite ? cta.races.write(tidOf(w, lane), offset, bytes)
                               : cta.races.read(tidOf(w, lane), offset, bytes);
    if (!race.empty() && !excused())
      fail(lane, race);
  }
  void checkShared(Cta &cta, Warp &w, int lane, const uint8_t *p,
                   uint32_t bytes, bool isWrite) {
    checkShared(cta, w, lane, p, bytes, isWrite, [] { return false; });
  }

  uint8_t *paramPtr(uint64_t addr, size_t bytes, int lane) {
    if (addr + bytes > params.size())
      fail(lane, "parameter access at offset " + std::to_string(addr) +
                     " is past the kernel's " + std::to_string(params.size()) +
                     " parameter bytes");
    return const_cast<uint8_t *>(params.data()) + addr;
  }

  /// Resolves an address in a state space to host memory, checking bounds
  /// and natural alignment.
  uint8_t *resolve(Cta &cta, Warp &w, Space space, uint64_t addr,
                   size_t bytes, int lane, size_t align = 0) {
    if (align == 0)
      align = bytes;
    if (opt.checks && align > 1 && (addr & (std::min<size_t>(align, 16) - 1))) {
      failure = LaunchFailure::MisalignedAddress;
      fail(lane, "misaligned " + std::to_string(bytes) + "-byte access at " +
                     hex(addr));
    }
    switch (space) {
    case Space::Generic:
      switch (addr & kWindowMask) {
      case kSharedWindow:
        return sharedPtr(cta, addr & ~kWindowMask, bytes, lane, true);
      case kLocalWindow:
        return localPtr(w, addr & ~kWindowMask, bytes, lane);
      case kParamWindow:
        return paramPtr(addr & ~kWindowMask, bytes, lane);
      default:
        return globalPtr(addr, bytes, lane);
      }
    case Space::Global:
    case Space::Const:
      if ((addr & kWindowMask) == kSharedWindow ||
          (addr & kWindowMask) == kLocalWindow)
        fail(lane, "a global access at " + hex(addr) +
                       ", which is a generic shared or local address");
      return globalPtr(addr, bytes, lane);
    case Space::Shared:
      return sharedPtr(cta, addr, bytes, lane, false);
    case Space::SharedCluster:
      return sharedPtr(cta, addr, bytes, lane, true);
    case Space::Param:
      if ((addr & kWindowMask) == kParamWindow)
        addr &= ~kWindowMask;
      return paramPtr(addr, bytes, lane);
    case Space::Local:
      if ((addr & kWindowMask) == kLocalWindow)
        addr &= ~kWindowMask;
      return localPtr(w, addr, bytes, lane);
    }
    return nullptr;
  }

  uint64_t effectiveAddress(Warp &w, const Operand &o, int lane) {
    uint64_t base = 0;
    if (o.reg >= 0)
      base = reg(w, o.reg, lane);
    else if (o.sym != -1)
      base = symbolAddress(o.sym);
    return base + static_cast<uint64_t>(o.offset);
  }

  // ---- floating point ----------------------------------------------------

  static Round roundOf(uint32_t flags, Round dflt = Round::Nearest) {
    // .rn/.rni name round-to-nearest-even explicitly (a float-to-integer
    // cvt's default is .rzi, so `dflt` must not decide them).
    if (flags & (FRn | FRni))
      return Round::Nearest;
    if (flags & (FRz | FRzi))
      return Round::Zero;
    if (flags & (FRm | FRmi))
      return Round::Down;
    if (flags & (FRp | FRpi))
      return Round::Up;
    return dflt;
  }

  static float ftz32(float f) {
    return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f;
  }

  /// The result of an f32 operation computed exactly (or nearly) in double.
  static float roundF32(double d, uint32_t flags) {
    Round r = roundOf(flags);
    float f = r == Round::Nearest ? static_cast<float>(d)
                                  : bitsToF32(encode(d, kF32, r));
    if (flags & FFtz)
      f = ftz32(f);
    if (flags & FSat)
      f = std::isnan(f) ? 0.0f : std::min(1.0f, std::max(0.0f, f));
    return f;
  }

  const Format &formatOf(Ty t) {
    switch (t) {
    case Ty::F16: case Ty::F16x2: return kF16;
    case Ty::BF16: case Ty::BF16x2: return kBF16;
    case Ty::E4M3: case Ty::E4M3x2: return kE4M3;
    case Ty::E5M2: case Ty::E5M2x2: return kE5M2;
    case Ty::TF32: return kTF32;
    default: return kF32;
    }
  }

  /// One element of a half-precision (f16/bf16) operation.
  uint32_t halfOp(Op op, const Format &f, uint32_t flags, uint32_t a,
                  uint32_t b, uint32_t c) {
    double x = decode(a, f), y = decode(b, f), z = decode(c, f);
    double r = 0;
    switch (op) {
    case Op::Add: r = x + y; break;
    case Op::Sub: r = x - y; break;
    case Op::Mul: r = x * y; break;
    case Op::Fma: case Op::Mad: r = std::fma(x, y, z); break;
    case Op::Neg: return a ^ (1u << 15);
    case Op::Abs: return a & 0x7FFF;
    case Op::Min: case Op::Max: {
      if (std::isnan(x) && std::isnan(y))
        return f.nan;
      if (std::isnan(x) || std::isnan(y)) {
        if (flags & FNaN)
          return f.nan;
        return std::isnan(x) ? b : a;
      }
      bool less = x < y || (x == y && std::signbit(x));
      uint32_t res = (op == Op::Min) == less ? a : b;
      if ((flags & FRelu) && decode(res, f) < 0)
        return 0;
      return res;
    }
    case Op::Ex2: r = std::exp2(x); break;
    case Op::Tanh: r = std::tanh(x); break;
    case Op::Rcp: r = 1.0 / x; break;
    case Op::Sqrt: r = std::sqrt(x); break;
    case Op::Rsqrt: r = 1.0 / std::sqrt(x); break;
    default:
      fail(-1, std::string("'") + "this operation is not supported on " +
                   "half-precision types");
    }
    uint32_t bits = encode(r, f, roundOf(flags));
    if (flags & FSat) {
      double v = decode(bits, f);
      if (std::isnan(v) || v < 0)
        bits = 0;
      else if (v > 1)
        bits = encode(1.0, f, Round::Nearest);
    }
    if ((flags & FRelu) && (decode(bits, f) < 0 || std::isnan(decode(bits, f))))
      bits = std::isnan(decode(bits, f)) ? f.nan : 0;
    return bits;
  }

  /// add/sub/mul/fma/min/max/... of a floating type, on raw bits.
  uint64_t floatOp(const Instr &in, Warp &w, int lane) {
    Ty t = in.type;
    Op op = in.op;
    size_t n = in.ops.size();
    if (t == Ty::F32) {
      float a = readF32(w, in.ops[1], lane);
      float b = n > 2 ? readF32(w, in.ops[2], lane) : 0.0f;
      float c = n > 3 ? readF32(w, in.ops[3], lane) : 0.0f;
      bool ftz = in.flags & FFtz;
      if (ftz) {
        a = ftz32(a);
        b = ftz32(b);
        c = ftz32(c);
      }
      double r = 0;
      switch (op) {
      case Op::Add:
        if (!(in.flags & (FRz | FRm | FRp)))
          return f32ToBits(roundF32(a + b, in.flags & (FFtz | FSat)));
        r = static_cast<double>(a) + b;
        break;
      case Op::Sub:
        if (!(in.flags & (FRz | FRm | FRp)))
          return f32ToBits(roundF32(a - b, in.flags & (FFtz | FSat)));
        r = static_cast<double>(a) - b;
        break;
      case Op::Mul:
        r = static_cast<double>(a) * b;
        break;
      case Op::Fma:
      case Op::Mad:
        if (!(in.flags & (FRz | FRm | FRp)))
          return f32ToBits(roundF32(std::fma(a, b, c), in.flags & (FFtz | FSat)));
        r = std::fma(static_cast<double>(a), static_cast<double>(b),
                     static_cast<double>(c));
        break;
      case Op::Div:
        if (in.flags & (FRz | FRm | FRp))
          r = static_cast<double>(a) / b;
        else
          return f32ToBits(roundF32(a / b, in.flags & (FFtz | FSat)));
        break;
      case Op::Min:
      case Op::Max: {
        float res;
        if (std::isnan(a) && std::isnan(b))
          res = NAN;
        else if (std::isnan(a) || std::isnan(b))
          res = (in.flags & FNaN) ? NAN : (std::isnan(a) ? b : a);
        else {
          bool less = a < b || (a == b && std::signbit(a));
          res = (op == Op::Min) == less ? a : b;
        }
        if (n > 3) { // three inputs
          float r2 = op == Op::Min ? std::fmin(res, c) : std::fmax(res, c);
          res = r2;
        }
        if ((in.flags & FRelu) && !(res >= 0))
          res = std::isnan(res) ? NAN : 0.0f;
        if (std::isnan(res))
          return 0x7FFFFFFF;
        return f32ToBits(ftz ? ftz32(res) : res);
      }
      case Op::Abs:
        return f32ToBits(ftz ? ftz32(std::fabs(a)) : std::fabs(a));
      case Op::Neg:
        return f32ToBits(ftz ? ftz32(-a) : -a);
      case Op::Rcp:
        if (in.flags & FApprox)
          return f32ToBits(roundF32(1.0f / a, in.flags & FFtz));
        r = 1.0 / static_cast<double>(a);
        return f32ToBits(roundF32(r, in.flags & ~FSat));
      case Op::Sqrt:
        if (in.flags & FApprox)
          return f32ToBits(roundF32(std::sqrt(a), in.flags & FFtz));
        return f32ToBits(roundF32(std::sqrt(static_cast<double>(a)),
                                  in.flags & ~FSat));
      case Op::Rsqrt: case Op::Ex2: case Op::Lg2: case Op::Sin:
      case Op::Cos: case Op::Tanh: {
        // The approximations, computed in double and rounded once (well
        // inside the PTX ISA's error bounds).
        double x = a;
        double r = op == Op::Rsqrt ? 1.0 / std::sqrt(x)
                   : op == Op::Ex2 ? std::exp2(x)
                   : op == Op::Lg2 ? std::log2(x)
                   : op == Op::Sin ? std::sin(x)
                   : op == Op::Cos ? std::cos(x)
                                   : std::tanh(x);
        return f32ToBits(roundF32(r, in.flags & FFtz));
      }
      case Op::Copysign:
        return f32ToBits(std::copysign(b, a));
      default:
        fail(lane, "unsupported f32 operation");
      }
      return f32ToBits(roundF32(r, in.flags));
    }
    if (t == Ty::F64) {
      double a = readF64(w, in.ops[1], lane);
      double b = n > 2 ? readF64(w, in.ops[2], lane) : 0.0;
      double c = n > 3 ? readF64(w, in.ops[3], lane) : 0.0;
      switch (op) {
      case Op::Add: return f64ToBits(a + b);
      case Op::Sub: return f64ToBits(a - b);
      case Op::Mul: return f64ToBits(a * b);
      case Op::Fma: case Op::Mad: return f64ToBits(std::fma(a, b, c));
      case Op::Div: return f64ToBits(a / b);
      case Op::Min: return f64ToBits(std::fmin(a, b));
      case Op::Max: return f64ToBits(std::fmax(a, b));
      case Op::Abs: return f64ToBits(std::fabs(a));
      case Op::Neg: return f64ToBits(-a);
      case Op::Rcp: return f64ToBits(1.0 / a);
      case Op::Sqrt: return f64ToBits(std::sqrt(a));
      case Op::Rsqrt: return f64ToBits(1.0 / std::sqrt(a));
      case Op::Ex2: return f64ToBits(std::exp2(a));
      case Op::Lg2: return f64ToBits(std::log2(a));
      case Op::Sin: return f64ToBits(std::sin(a));
      case Op::Cos: return f64ToBits(std::cos(a));
      case Op::Tanh: return f64ToBits(std::tanh(a));
      case Op::Copysign: return f64ToBits(std::copysign(b, a));
      default: fail(lane, "unsupported f64 operation");
      }
    }
    // f16, bf16 and their packed pairs.
    const Format &f = formatOf(t);
    bool pair = t == Ty::F16x2 || t == Ty::BF16x2;
    uint64_t a = read(w, in.ops[1], lane);
    uint64_t b = n > 2 ? read(w, in.ops[2], lane) : 0;
    uint64_t c = n > 3 ? read(w, in.ops[3], lane) : 0;
    uint32_t lo = halfOp(op, f, in.flags, a & 0xFFFF, b & 0xFFFF, c & 0xFFFF);
    if (!pair)
      return lo;
    uint32_t hi = halfOp(op, f, in.flags, (a >> 16) & 0xFFFF,
                         (b >> 16) & 0xFFFF, (c >> 16) & 0xFFFF);
    return lo | (static_cast<uint64_t>(hi) << 16);
  }

  // ---- integer ----------------------------------------------------------

  /// add/sub/mad with the carry flag: .cc writes the carry (for sub, the
  /// borrow) out of the full-width sum, addc/subc/madc add it in.
  uint64_t carryOp(const Instr &in, Warp &w, int lane, uint64_t a, uint64_t b,
                   uint64_t c) {
    unsigned bits = bitsOf(in.type);
    unsigned __int128 m = bits >= 64 ? ~0ull : (1ull << bits) - 1;
    unsigned __int128 cin = (in.flags & FCarryIn) ? (w.cc[lane] & 1) : 0;
    unsigned __int128 r;
    bool out;
    if (in.op == Op::Sub) {
      unsigned __int128 subtrahend = (b & m) + cin;
      out = (a & m) < subtrahend;
      r = ((a & m) - subtrahend) & m;
    } else {
      unsigned __int128 x = a & m;
      if (in.op == Op::Mad) {
        unsigned __int128 p = (a & m) * (b & m);
        if (isSignedInt(in.type))
          p = static_cast<unsigned __int128>(
              static_cast<__int128>(signExtend(a, bits)) *
              static_cast<__int128>(signExtend(b, bits)));
        x = (in.flags & FHi) ? (p >> bits) & m : p & m;
      }
      unsigned __int128 y = (in.op == Op::Mad ? c : b) & m;
      unsigned __int128 sum = x + y + cin;
      out = (sum >> bits) != 0;
      r = sum & m;
    }
    if (in.flags & FCc)
      w.cc[lane] = out;
    return static_cast<uint64_t>(r);
  }

  uint64_t intOp(const Instr &in, Warp &w, int lane) {
    unsigned bits = bitsOf(in.type);
    bool sgn = isSignedInt(in.type);
    size_t n = in.ops.size();
    uint64_t a = read(w, in.ops[1], lane);
    uint64_t b = n > 2 ? read(w, in.ops[2], lane) : 0;
    uint64_t c = n > 3 ? read(w, in.ops[3], lane) : 0;
    if ((in.flags & (FCc | FCarryIn)) &&
        (in.op == Op::Add || in.op == Op::Sub || in.op == Op::Mad))
      return carryOp(in, w, lane, a, b, c);
    auto sx = [&](uint64_t v) { return signExtend(v, bits); };
    auto mx = [&](uint64_t v) { return maskBits(v, bits); };
    auto sat32 = [&](int64_t v) -> uint64_t {
      if (v > INT32_MAX) v = INT32_MAX;
      if (v < INT32_MIN) v = INT32_MIN;
      return mx(static_cast<uint64_t>(v));
    };
    switch (in.op) {
    case Op::Add:
      if ((in.flags & FSat) && bits == 32)
        return sat32(sx(a) + sx(b));
      return mx(a + b);
    case Op::Sub:
      if ((in.flags & FSat) && bits == 32)
        return sat32(sx(a) - sx(b));
      return mx(a - b);
    case Op::Mul:
    case Op::Mad: {
      uint64_t addend = in.op == Op::Mad ? c : 0;
      if (in.flags & FWide) {
        unsigned wide = bits * 2;
        uint64_t prod = sgn ? static_cast<uint64_t>(sx(a) * sx(b))
                            : mx(a) * mx(b);
        return maskBits(prod + addend, wide);
      }
      if (in.flags & FHi) {
        unsigned __int128 p;
        if (sgn)
          p = static_cast<unsigned __int128>(static_cast<__int128>(sx(a)) *
                                             static_cast<__int128>(sx(b)));
        else
          p = static_cast<unsigned __int128>(mx(a)) * mx(b);
        uint64_t hi = static_cast<uint64_t>(p >> bits);
        if (in.op == Op::Mad && (in.flags & FSat) && bits == 32)
          return sat32(sx(hi) + sx(addend));
        return mx(hi + addend);
      }
      return mx(a * b + addend);
    }
    case Op::Mul24:
    case Op::Mad24: {
      uint64_t p = sgn ? static_cast<uint64_t>(signExtend(a, 24) * signExtend(b, 24))
                       : maskBits(a, 24) * maskBits(b, 24);
      if (in.flags & FHi)
        p >>= 16;
      return mx(p + (in.op == Op::Mad24 ? c : 0));
    }
    case Op::Sad: {
      uint64_t d = sgn ? static_cast<uint64_t>(std::llabs(sx(a) - sx(b)))
                       : (mx(a) > mx(b) ? mx(a) - mx(b) : mx(b) - mx(a));
      return mx(d + c);
    }
    case Op::Div:
      if (mx(b) == 0)
        return mx(~0ull);
      if (sgn) {
        if (sx(b) == -1)
          return mx(static_cast<uint64_t>(0) - a);
        return mx(static_cast<uint64_t>(sx(a) / sx(b)));
      }
      return mx(a) / mx(b);
    case Op::Rem:
      if (mx(b) == 0)
        return mx(a);
      if (sgn) {
        if (sx(b) == -1)
          return 0;
        return mx(static_cast<uint64_t>(sx(a) % sx(b)));
      }
      return mx(a) % mx(b);
    case Op::Min:
    case Op::Max: {
      auto pick = [&](uint64_t x, uint64_t y) {
        bool less = sgn ? sx(x) < sx(y) : mx(x) < mx(y);
        return (in.op == Op::Min) == less ? x : y;
      };
      uint64_t r = pick(a, b);
      if (n > 3)
        r = pick(r, c);
      if ((in.flags & FRelu) && sx(r) < 0)
        r = 0;
      return mx(r);
    }
    case Op::Abs:
      return mx(static_cast<uint64_t>(std::llabs(sx(a))));
    case Op::Neg:
      return mx(0 - a);
    case Op::And: return in.type == Ty::Pred ? ((a & b) & 1) : mx(a & b);
    case Op::Or: return in.type == Ty::Pred ? ((a | b) & 1) : mx(a | b);
    case Op::Xor: return in.type == Ty::Pred ? ((a ^ b) & 1) : mx(a ^ b);
    case Op::Not: return in.type == Ty::Pred ? !a : mx(~a);
    case Op::Cnot: return mx(a) == 0 ? 1 : 0;
    case Op::Shl: {
      uint64_t s = b & 0xFFFFFFFF;
      return s >= bits ? 0 : mx(a << s);
    }
    case Op::Shr: {
      uint64_t s = b & 0xFFFFFFFF;
      if (sgn)
        return mx(static_cast<uint64_t>(sx(a) >> std::min<uint64_t>(s, bits - 1)));
      return s >= bits ? 0 : mx(a) >> s;
    }
    case Op::Bfe: {
      unsigned pos = b & 0xFF, len = c & 0xFF;
      unsigned msb = bits - 1;
      uint64_t sbit = 0;
      if (sgn && len > 0)
        sbit = (a >> std::min(pos + len - 1, msb)) & 1;
      uint64_t d = 0;
      for (unsigned i = 0; i <= msb; ++i) {
        uint64_t bit = (i < len && pos + i <= msb) ? (a >> (pos + i)) & 1 : sbit;
        d |= bit << i;
      }
      return d;
    }
    case Op::Bfi: {
      uint64_t base = read(w, in.ops[2], lane);
      unsigned pos = read(w, in.ops[3], lane) & 0xFF;
      unsigned len = read(w, in.ops[4], lane) & 0xFF;
      uint64_t d = base;
      for (unsigned i = 0; i < len && pos + i < bits; ++i) {
        uint64_t bit = (a >> i) & 1;
        d = (d & ~(1ull << (pos + i))) | (bit << (pos + i));
      }
      return mx(d);
    }
    case Op::Brev: {
      uint64_t d = 0;
      for (unsigned i = 0; i < bits; ++i)
        d |= ((a >> i) & 1) << (bits - 1 - i);
      return d;
    }
    case Op::Popc:
      return static_cast<uint64_t>(__builtin_popcountll(mx(a)));
    case Op::Clz:
      return mx(a) == 0 ? bits
                        : static_cast<uint64_t>(__builtin_clzll(mx(a)) -
                                                (64 - bits));
    case Op::Prmt: {
      uint64_t bytes = (maskBits(b, 32) << 32) | maskBits(a, 32);
      uint64_t d = 0;
      for (int i = 0; i < 4; ++i) {
        unsigned sel = (c >> (4 * i)) & 0xF;
        uint64_t byte = (bytes >> (8 * (sel & 7))) & 0xFF;
        if (sel & 8)
          byte = (byte & 0x80) ? 0xFF : 0;
        d |= byte << (8 * i);
      }
      return d;
    }
    default:
      fail(lane, "unsupported integer operation");
    }
  }

  bool compare(const Instr &in, Warp &w, int lane) {
    Ty t = in.type;
    if (isFloat(t)) {
      double a, b;
      if (t == Ty::F32) {
        a = readF32(w, in.ops[1], lane);
        b = readF32(w, in.ops[2], lane);
        if (in.flags & FFtz) {
          a = ftz32(static_cast<float>(a));
          b = ftz32(static_cast<float>(b));
        }
      } else if (t == Ty::F64) {
        a = readF64(w, in.ops[1], lane);
        b = readF64(w, in.ops[2], lane);
      } else {
        const Format &f = formatOf(t);
        a = decode(read(w, in.ops[1], lane) & 0xFFFF, f);
        b = decode(read(w, in.ops[2], lane) & 0xFFFF, f);
      }
      bool nan = std::isnan(a) || std::isnan(b);
      switch (in.cmp) {
      case Cmp::Eq: return !nan && a == b;
      case Cmp::Ne: return !nan && a != b;
      case Cmp::Lt: return !nan && a < b;
      case Cmp::Le: return !nan && a <= b;
      case Cmp::Gt: return !nan && a > b;
      case Cmp::Ge: return !nan && a >= b;
      case Cmp::Equ: return nan || a == b;
      case Cmp::Neu: return nan || a != b;
      case Cmp::Ltu: return nan || a < b;
      case Cmp::Leu: return nan || a <= b;
      case Cmp::Gtu: return nan || a > b;
      case Cmp::Geu: return nan || a >= b;
      case Cmp::Num: return !nan;
      case Cmp::Nan: return nan;
      default: fail(lane, "this comparison does not apply to floats");
      }
    }
    unsigned bits = bitsOf(t);
    uint64_t a = maskBits(read(w, in.ops[1], lane), bits);
    uint64_t b = maskBits(read(w, in.ops[2], lane), bits);
    int64_t sa = signExtend(a, bits), sb = signExtend(b, bits);
    bool sgn = isSignedInt(t);
    switch (in.cmp) {
    case Cmp::Eq: return a == b;
    case Cmp::Ne: return a != b;
    case Cmp::Lt: return sgn ? sa < sb : a < b;
    case Cmp::Le: return sgn ? sa <= sb : a <= b;
    case Cmp::Gt: return sgn ? sa > sb : a > b;
    case Cmp::Ge: return sgn ? sa >= sb : a >= b;
    case Cmp::Lo: return a < b;
    case Cmp::Ls: return a <= b;
    case Cmp::Hi: return a > b;
    case Cmp::Hs: return a >= b;
    default: fail(lane, "this comparison does not apply to integers");
    }
  }

  // ---- conversions -------------------------------------------------------

  uint64_t convert(const Instr &in, Warp &w, int lane) {
    Ty dt = in.type, st = in.type2;
    uint32_t flags = in.flags;
    // Packed conversions: two f32 to a pair, or a pair to a wider pair.
    if (in.ops.size() == 3) {
      if (st != Ty::F32 || !(dt == Ty::F16x2 || dt == Ty::BF16x2 ||
                             dt == Ty::E4M3x2 || dt == Ty::E5M2x2))
        fail(lane, "unsupported packed conversion");
      const Format &f = formatOf(dt);
      bool satfinite = dt == Ty::E4M3x2 || dt == Ty::E5M2x2;
      float a = readF32(w, in.ops[1], lane), b = readF32(w, in.ops[2], lane);
      auto one = [&](float v) -> uint64_t {
        if ((flags & FRelu) && !(v >= 0))
          v = std::isnan(v) ? v : 0.0f;
        return encode(v, f, roundOf(flags), satfinite);
      };
      unsigned half = bitsOf(dt) / 2;
      return (one(a) << half) | one(b);
    }
    uint64_t raw = read(w, in.ops[1], lane);
    if (st == Ty::E4M3x2 || st == Ty::E5M2x2) { // fp8 pair -> f16x2
      const Format &f = formatOf(st);
      uint32_t lo = encode(decode(raw & 0xFF, f), kF16, Round::Nearest);
      uint32_t hi = encode(decode((raw >> 8) & 0xFF, f), kF16, Round::Nearest);
      return lo | (hi << 16);
    }
    bool srcFloat = isFloat(st), dstFloat = isFloat(dt);
    unsigned sbits = bitsOf(st), dbits = bitsOf(dt);
    if (!srcFloat && !dstFloat) {
      int64_t v = isSignedInt(st) ? signExtend(raw, sbits)
                                  : static_cast<int64_t>(maskBits(raw, sbits));
      if (flags & FSat) {
        bool dsgn = isSignedInt(dt);
        int64_t lo = dsgn ? -(1ll << (dbits - 1)) : 0;
        uint64_t hiU = dsgn ? (1ull << (dbits - 1)) - 1
                            : (dbits >= 64 ? ~0ull : (1ull << dbits) - 1);
        if (!isSignedInt(st) && maskBits(raw, sbits) > hiU)
          return hiU;
        if (isSignedInt(st) && v < lo)
          return maskBits(static_cast<uint64_t>(lo), dbits);
        if (isSignedInt(st) && v > 0 && static_cast<uint64_t>(v) > hiU)
          return hiU;
      }
      return maskBits(static_cast<uint64_t>(v), dbits);
    }
    double x;
    if (srcFloat) {
      if (st == Ty::F32) {
        float f = bitsToF32(static_cast<uint32_t>(raw));
        if (flags & FFtz)
          f = ftz32(f);
        x = f;
      } else if (st == Ty::F64) {
        x = bitsToF64(raw);
      } else {
        x = decode(static_cast<uint32_t>(maskBits(raw, sbits)), formatOf(st));
      }
    } else if (isSignedInt(st)) {
      x = static_cast<double>(signExtend(raw, sbits));
    } else {
      x = static_cast<double>(maskBits(raw, sbits));
    }
    if (dstFloat) {
      uint64_t out;
      constexpr uint32_t kToIntegral = FRni | FRzi | FRmi | FRpi;
      if (srcFloat && (flags & kToIntegral)) {
        // cvt.rXi between float types: round to an integral value.
        switch (roundOf(flags)) {
        case Round::Nearest: x = std::nearbyint(x); break;
        case Round::Zero: x = std::trunc(x); break;
        case Round::Down: x = std::floor(x); break;
        case Round::Up: x = std::ceil(x); break;
        }
        flags &= ~kToIntegral;
      }
      if (dt == Ty::F32 && !(flags & (FSat | FRz | FRm | FRp | FFtz)) &&
          (st == Ty::BF16 || st == Ty::F16 || st == Ty::F32 ||
           (!srcFloat && sbits <= 32))) {
        // Exact, or rounded to nearest by the host as PTX asks.
        return f32ToBits(static_cast<float>(x));
      }
      if (dt == Ty::F64) {
        out = f64ToBits(x);
      } else if (dt == Ty::F32) {
        float f = bitsToF32(encode(x, kF32, roundOf(flags)));
        if (flags & FFtz)
          f = ftz32(f);
        out = f32ToBits(f);
      } else if (dt == Ty::BF16 && st == Ty::F32 && roundOf(flags) == Round::Nearest &&
                 !(flags & (FSat | FRelu))) {
        out = f32ToBf16(static_cast<float>(x));
      } else {
        if ((flags & FRelu) && !(x >= 0))
          x = std::isnan(x) ? x : 0.0;
        out = encode(x, formatOf(dt), roundOf(flags),
                     dt == Ty::E4M3 || dt == Ty::E5M2);
        if (dt == Ty::TF32)
          out <<= 13; // tf32 keeps f32's layout, low bits zero
      }
      if (flags & FSat) {
        double v = dt == Ty::F32   ? bitsToF32(static_cast<uint32_t>(out))
                   : dt == Ty::F64 ? bitsToF64(out)
                                   : decode(static_cast<uint32_t>(out), formatOf(dt));
        if (std::isnan(v) || v < 0)
          out = 0;
        else if (v > 1)
          out = dt == Ty::F32   ? f32ToBits(1.0f)
                : dt == Ty::F64 ? f64ToBits(1.0)
                                : encode(1.0, formatOf(dt), Round::Nearest);
      }
      return out;
    }
    // float -> integer: round as told, saturate, NaN -> 0.
    if (std::isnan(x))
      return 0;
    double r;
    switch (roundOf(flags, Round::Zero)) {
    case Round::Nearest: r = std::nearbyint(x); break;
    case Round::Zero: r = std::trunc(x); break;
    case Round::Down: r = std::floor(x); break;
    case Round::Up: r = std::ceil(x); break;
    }
    if (isSignedInt(dt)) {
      double lo = -std::ldexp(1.0, dbits - 1), hi = std::ldexp(1.0, dbits - 1);
      if (r <= lo)
        return maskBits(static_cast<uint64_t>(static_cast<int64_t>(lo)), dbits);
      if (r >= hi)
        return maskBits((1ull << (dbits - 1)) - 1, dbits);
      return maskBits(static_cast<uint64_t>(static_cast<int64_t>(r)), dbits);
    }
    if (r <= 0)
      return 0;
    if (r >= std::ldexp(1.0, dbits))
      return dbits >= 64 ? ~0ull : (1ull << dbits) - 1;
    return static_cast<uint64_t>(r);
  }

  // ---- barriers and mbarriers -------------------------------------------

  void wakeMbarrier(Cta &cta, uint32_t addr) {
    uint64_t key = (static_cast<uint64_t>(cta.rank) << 32) | addr;
    for (Cta &c : ctas)
      for (Warp &w : c.warps)
        for (int l = 0; l < 32; ++l)
          if (w.state[l] == AtMbarrier && w.wait[l] == key)
            w.state[l] = Ready;
  }

  MBarrier &mbarrier(Cta &cta, uint32_t addr, int lane) {
    auto it = cta.mbars.find(addr);
    if (it == cta.mbars.end())
      fail(lane, "mbarrier at shared address " + hex(addr) +
                     " was never initialized (mbarrier.init)");
    return it->second;
  }

  void completePhaseIfDone(Cta &cta, uint32_t addr, MBarrier &b) {
    if (b.pending == 0 && b.tx == 0) {
      ++b.phase;
      b.pending = b.expected;
      if (cta.races.enabled())
        if (int s = cta.races.slot(addr, false); s >= 0)
          cta.races.phaseCompleted(s, b.phase);
      wakeMbarrier(cta, addr);
    }
  }

  /// Resolves an mbarrier operand: the CTA and its shared offset.
  Cta &mbarrierCta(Cta &cta, Warp &w, const Instr &in, const Operand &o,
                   int lane, uint32_t &addr) {
    uint64_t a = effectiveAddress(w, o, lane);
    if (in.space == Space::Generic) {
      if ((a & kWindowMask) != kSharedWindow)
        fail(lane, "mbarrier address " + hex(a) + " is not in shared memory");
      a &= ~kWindowMask;
    }
    if (a & 7)
      fail(lane, "mbarrier address " + hex(a) + " is not 8-byte aligned");
    uint32_t rank = static_cast<uint32_t>((a >> 24) & 0xFF);
    addr = static_cast<uint32_t>(a & 0xFFFFFF);
    if (addr + 8 > cta.smem.size())
      badAddress(lane, "mbarrier address " + hex(a) + " is out of bounds");
    if (rank == 0)
      return cta;
    if (in.space != Space::SharedCluster && in.space != Space::Generic)
      fail(lane, "a shared::cta mbarrier address names another CTA");
    if (rank - 1 >= ctas.size())
      fail(lane, "mbarrier address names CTA rank " + std::to_string(rank - 1) +
                     " outside the cluster");
    return ctas[rank - 1];
  }

  void checkBarriers(Cta &cta) {
    for (uint32_t id = 0; id < 16; ++id) {
      Cta::Bar &b = cta.bars[id];
      if (b.arrived == 0)
        continue;
      uint32_t expected = b.expected ? b.expected : cta.threads - cta.exited;
      if (b.arrived < expected)
        continue;
      for (uint32_t ws = b.waiters; ws; ws &= ws - 1) {
        Warp &w = cta.warps[__builtin_ctz(ws)];
        for (int l = 0; l < 32; ++l)
          if (w.state[l] == AtBarrier && w.wait[l] == id) {
            w.state[l] = Ready;
            ++w.pc[l];
            if (cta.races.enabled())
              cta.races.acquire(tidOf(w, l), cta.races.barrier(id));
          }
      }
      if (cta.races.enabled())
        cta.races.clearBarrier(id);
      b = Cta::Bar{};
    }
  }

  // ---- tensor memory access (TMA) -----------------------------------------

  const TensorMapDesc &tensorMap(Cta &cta, Warp &w, uint64_t addr, int lane) {
    uint8_t *p = resolve(cta, w, Space::Generic, addr, 128, lane, 64);
    const auto *d = reinterpret_cast<const TensorMapDesc *>(p);
    if (d->magic != kTensorMapMagic)
      fail(lane, "the tensor map at " + hex(addr) +
                     " was not encoded by cuTensorMapEncodeTiled");
    return *d;
  }

  static uint32_t swizzle(uint32_t addr, unsigned mode) {
    switch (mode) {
    case 1: return addr ^ ((addr >> 3) & 0x10);
    case 2: return addr ^ ((addr >> 3) & 0x30);
    case 3: return addr ^ ((addr >> 3) & 0x70);
    default: return addr;
    }
  }

  /// Walks a TMA box: `fn(sharedOffset, globalAddressOrZero)` per element.
  template <typename Fn>
  void walkBox(const TensorMapDesc &d, const int32_t *coords, uint32_t dst,
               int lane, Fn fn) {
    unsigned es = d.elementBytes;
    uint32_t count[5] = {1, 1, 1, 1, 1};
    for (unsigned i = 0; i < d.rank; ++i)
      count[i] = (d.box[i] + d.elementStrides[i] - 1) / d.elementStrides[i];
    uint32_t rowBytes = count[0] * es;
    unsigned span = d.swizzle == 3 ? 128 : d.swizzle == 2 ? 64
                    : d.swizzle == 1 ? 32 : 0;
    if (span && rowBytes > span)
      fail(lane, "the tensor map's inner box (" + std::to_string(rowBytes) +
                     " bytes) is wider than its swizzle span (" +
                     std::to_string(span) + " bytes)");
    uint32_t offset = 0;
    for (uint32_t i4 = 0; i4 < count[4]; ++i4)
      for (uint32_t i3 = 0; i3 < count[3]; ++i3)
        for (uint32_t i2 = 0; i2 < count[2]; ++i2)
          for (uint32_t i1 = 0; i1 < count[1]; ++i1)
            for (uint32_t i0 = 0; i0 < count[0]; ++i0, offset += es) {
              uint32_t idx[5] = {i0, i1, i2, i3, i4};
              bool inBounds = true;
              uint64_t g = d.globalAddress;
              for (unsigned r = 0; r < d.rank; ++r) {
                int64_t c = static_cast<int64_t>(coords[r]) +
                            static_cast<int64_t>(idx[r]) * d.elementStrides[r];
                if (c < 0 || c >= static_cast<int64_t>(d.dims[r])) {
                  inBounds = false;
                  break;
                }
                g += static_cast<uint64_t>(c) *
                     (r == 0 ? es : d.strides[r - 1]);
              }
              fn(swizzle(dst + offset, d.swizzle), inBounds ? g : 0,
                 offset);
            }
  }

  void tmaLoad(Cta &cta, Warp &w, const Instr &in, int lane) {
    // [dst], [map, {coords}], [mbar] {, ctaMask} {, cachePolicy}
    uint64_t dstAddr = effectiveAddress(w, in.ops[0], lane);
    const Operand &t = in.ops[1];
    uint64_t mapAddr = t.reg >= 0 ? reg(w, t.reg, lane) : symbolAddress(t.sym);
    const TensorMapDesc &d = tensorMap(cta, w, mapAddr, lane);
    if (t.elems.size() != d.rank || in.shapeM != d.rank)
      fail(lane, "the copy has " + std::to_string(t.elems.size()) +
                     " coordinates; its tensor map has rank " +
                     std::to_string(d.rank));
    int32_t coords[5] = {0, 0, 0, 0, 0};
    for (unsigned i = 0; i < d.rank; ++i)
      coords[i] = static_cast<int32_t>(read(w, t.elems[i], lane));
    uint16_t ctaMask = 1;
    if (in.flags & FMulticast) {
      if (in.ops.size() < 4)
        fail(lane, "a multicast copy needs a CTA mask");
      ctaMask = static_cast<uint16_t>(read(w, in.ops[3], lane));
    }
    uint32_t dst = static_cast<uint32_t>(dstAddr & 0xFFFFFF);
    if ((dstAddr >> 24) & 0xFF)
      fail(lane, "a TMA load's destination must be the executing CTA's "
                 "shared memory");
    if (dst & 127)
      fail(lane, "a TMA destination must be 128-byte aligned (" + hex(dst) +
                     ")");
    uint32_t bytes = d.elementBytes;
    for (unsigned i = 0; i < d.rank; ++i)
      bytes *= (d.box[i] + d.elementStrides[i] - 1) / d.elementStrides[i];
    uint32_t mbarAddr = 0;
    Cta &barCta = mbarrierCta(cta, w, in, in.ops[2], lane, mbarAddr);
    (void)barCta;
    std::vector<Cta *> targets;
    if (in.flags & FMulticast) {
      for (uint32_t r = 0; r < 16; ++r)
        if (ctaMask >> r & 1) {
          if (r >= ctas.size())
            fail(lane, "the multicast mask names CTA rank " +
                           std::to_string(r) + " outside the cluster");
          targets.push_back(&ctas[r]);
        }
    } else {
      targets.push_back(&cta);
    }
    for (Cta *target : targets) {
      if (dst + bytes > target->smem.size())
        badAddress(lane, "the TMA box (" + std::to_string(bytes) +
                             " bytes) runs past the end of shared memory at " +
                             hex(dst));
      uint8_t *smem = target->smem.data();
      unsigned es = d.elementBytes;
      bool nanFill = d.oobFill == 1;
      RaceDetector &races = target->races;
      int slot = races.enabled() ? races.slot(mbarAddr, false) : -1;
      uint32_t phase = mbarrier(*target, mbarAddr, lane).phase;
      walkBox(d, coords, dst, lane, [&](uint32_t s, uint64_t g, uint32_t) {
        if (s + es > target->smem.size())
          badAddress(lane, "the swizzled TMA box runs past shared memory");
        if (races.enabled()) {
          if (target == &cta) {
            std::string race =
                races.asyncWrite(tidOf(w, lane), slot, phase, s, es);
            if (!race.empty())
              fail(lane, "TMA copy: " + race);
          } else {
            races.recordAsync(slot, phase, s, es);
          }
        }
        if (g) {
          std::memcpy(smem + s, globalPtr(g, es, lane), es);
        } else if (nanFill) {
          std::memset(smem + s, 0xFF, es);
        } else {
          std::memset(smem + s, 0, es);
        }
      });
      uint32_t addr = mbarAddr;
      MBarrier &b = mbarrier(*target, addr, lane);
      if (target == &cta && slot >= 0)
        races.release(tidOf(w, lane), races.mbarrierAcc(slot));
      b.tx -= bytes;
      completePhaseIfDone(*target, addr, b);
    }
  }

  void tmaStore(Cta &cta, Warp &w, const Instr &in, int lane) {
    // [map, {coords}], [src]
    const Operand &t = in.ops[0];
    uint64_t mapAddr = t.reg >= 0 ? reg(w, t.reg, lane) : symbolAddress(t.sym);
    const TensorMapDesc &d = tensorMap(cta, w, mapAddr, lane);
    if (t.elems.size() != d.rank)
      fail(lane, "the copy's coordinates do not match its tensor map's rank");
    int32_t coords[5] = {0, 0, 0, 0, 0};
    for (unsigned i = 0; i < d.rank; ++i)
      coords[i] = static_cast<int32_t>(read(w, t.elems[i], lane));
    uint64_t srcAddr = effectiveAddress(w, in.ops[1], lane);
    uint32_t src = static_cast<uint32_t>(srcAddr & 0xFFFFFF);
    if (src & 127)
      fail(lane, "a TMA source must be 128-byte aligned");
    unsigned es = d.elementBytes;
    walkBox(d, coords, src, lane, [&](uint32_t s, uint64_t g, uint32_t) {
      if (s + es > cta.smem.size())
        badAddress(lane, "the TMA box runs past the end of shared memory");
      checkShared(cta, w, lane, cta.smem.data() + s, es, false);
      if (g)
        std::memcpy(globalPtr(g, es, lane), cta.smem.data() + s, es);
    });
  }

  // ---- wgmma ---------------------------------------------------------------

  /// The shared-memory byte offset of element (mn, k) of a wgmma operand
  /// described by `desc` (see the PTX ISA's matrix descriptor and the
  /// canonical layouts), for `es`-byte elements.
  static uint32_t descAddress(uint64_t desc, bool mnMajor, uint32_t mn,
                              uint32_t kk, unsigned es) {
    uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4;
    uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4;
    uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
    unsigned mode = static_cast<unsigned>(desc >> 62);
    // mode: 0 interleave (no swizzle), 1 128B, 2 64B, 3 32B.
    uint32_t span = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 16;
    unsigned swz = mode == 1 ? 3 : mode == 2 ? 2 : mode == 3 ? 1 : 0;
    uint32_t perChunk = 16 / es; // elements per 16 bytes
    uint32_t off;
    if (!mnMajor) {
      if (mode == 0)
        off = (mn / 8) * sbo + (kk / perChunk) * lbo + (mn % 8) * 16 +
              (kk % perChunk) * es;
      else
        off = (mn / 8) * sbo + (mn % 8) * span + kk * es;
    } else {
      uint32_t perSpan = span / es; // MN elements per swizzle row
      if (mode == 0)
        off = (mn / perChunk) * sbo + (kk / 8) * lbo + (kk % 8) * 16 +
              (mn % perChunk) * es;
      else
        off = (mn / perSpan) * lbo + (kk / 8) * sbo + (kk % 8) * span +
              (mn % perSpan) * es;
    }
    return swizzle(start + off, swz);
  }

  double loadElement(Cta &cta, uint32_t addr, Ty t, int lane) {
    unsigned es = std::max(1u, bitsOf(t) / 8);
    if (t == Ty::TF32)
      es = 4;
    if (addr + es > cta.smem.size())
      fail(lane, "a wgmma operand reads past the end of shared memory (" +
                     hex(addr) + ")");
    const uint8_t *p = cta.smem.data() + addr;
    uint32_t v = 0;
    std::memcpy(&v, p, es);
    return decodeOperand(v, t);
  }

  /// One matrix operand element (wgmma's, mma.sync's) of type `t` from
  /// its bits (the low 8, 16 or 32), as a double.
  static double decodeOperand(uint32_t v, Ty t) {
    switch (t) {
    case Ty::BF16: return bf16ToF32(v & 0xFFFF);
    case Ty::F16: return decode(v & 0xFFFF, kF16);
    case Ty::E4M3: return decode(v & 0xFF, kE4M3);
    case Ty::E5M2: return decode(v & 0xFF, kE5M2);
    case Ty::TF32: return bitsToF32(v & 0xFFFFE000u);
    case Ty::S8: return static_cast<int8_t>(v & 0xFF);
    case Ty::U8: return v & 0xFF;
    default: return 0;
    }
  }

  void wgmma(Cta &cta, const Instr &in, uint32_t group) {
    // d, a-desc|{a regs}, b-desc, scale-d, imm-scale-a, imm-scale-b
    // [, imm-trans-a, imm-trans-b]
    const int M = 64, N = in.shapeN, K = in.shapeK;
    Ty t = in.type2;
    unsigned es = t == Ty::TF32 ? 4 : std::max(1u, bitsOf(t) / 8);
    const Operand &dOp = in.ops[0];
    const Operand &aOp = in.ops[1];
    const Operand &bOp = in.ops[2];
    bool f16acc = in.type == Ty::F16;
    size_t nd = f16acc ? N / 4 : N / 2;
    if (dOp.kind != Operand::Vec || dOp.elems.size() != nd)
      fail(-1, "wgmma m64n" + std::to_string(N) + " needs " +
                   std::to_string(nd) + " accumulator registers");
    bool aRegs = aOp.kind == Operand::Vec;
    size_t pos = 3;
    const Operand &scaleD = in.ops[pos++];
    int scaleA = 1, scaleB = 1, transA = 0, transB = 0;
    auto imm = [&](size_t i) -> int64_t {
      if (i >= in.ops.size() || in.ops[i].kind != Operand::Imm)
        fail(-1, "wgmma expects an immediate operand at position " +
                     std::to_string(i + 1));
      return static_cast<int64_t>(in.ops[i].imm);
    };
    bool hasTrans = t == Ty::F16 || t == Ty::BF16;
    // Integer wgmma (s32 += s8/u8 products) takes no scale immediates.
    bool intAcc = in.type == Ty::S32;
    Ty tb = in.type3 == Ty::None ? t : in.type3;
    if (!intAcc) {
      scaleA = static_cast<int>(imm(pos++));
      scaleB = static_cast<int>(imm(pos++));
    }
    if (hasTrans && !aRegs) {
      transA = static_cast<int>(imm(pos++));
      transB = static_cast<int>(imm(pos++));
    } else if (hasTrans && aRegs) {
      transB = static_cast<int>(imm(pos++));
    }
    if (pos != in.ops.size())
      fail(-1, "wgmma has " + std::to_string(in.ops.size()) +
                   " operands; expected " + std::to_string(pos));
    if ((scaleA != 1 && scaleA != -1) || (scaleB != 1 && scaleB != -1) ||
        (transA | transB) > 1)
      fail(-1, "wgmma's scale operands must be 1 or -1 and its transpose "
               "operands 0 or 1");
    Warp *ws[4];
    for (int i = 0; i < 4; ++i)
      ws[i] = &cta.warps[group * 4 + i];
    // The first lane's descriptors stand for the warpgroup (they must agree).
    uint64_t bDesc = read(*ws[0], bOp, 0);
    uint64_t aDesc = aRegs ? 0 : read(*ws[0], aOp, 0);
    // Swizzling follows the absolute shared address, as TMA writes it; a
    // base offset (for operands not aligned to the swizzle pattern) is not
    // modelled, so it is refused rather than ignored.
    for (uint64_t desc : {aDesc, bDesc})
      if ((desc >> 49) & 7)
        fail(-1, "a wgmma descriptor with base offset " +
                     std::to_string((desc >> 49) & 7) +
                     " (not supported: align the operand to its swizzle "
                     "pattern)");
    for (int wi = 0; wi < 4; ++wi)
      for (int l = 0; l < 32; ++l) {
        if (read(*ws[wi], bOp, l) != bDesc ||
            (!aRegs && read(*ws[wi], aOp, l) != aDesc))
          fail(l, "the threads of a warpgroup pass different wgmma "
                  "descriptors");
      }
    std::vector<float> A(M * K), B(K * N);
    if (aRegs) {
      size_t na = aOp.elems.size();
      if (na != 4)
        fail(-1, "wgmma's register A operand needs 4 registers");
      for (int wi = 0; wi < 4; ++wi)
        for (int l = 0; l < 32; ++l) {
          int g = l / 4, tq = l % 4;
          for (int r = 0; r < 4; ++r) {
            uint32_t v = static_cast<uint32_t>(read(*ws[wi], aOp.elems[r], l));
            int row = wi * 16 + g + ((r & 1) ? 8 : 0);
            int perReg = 4 / es;
            int col0 = tq * perReg + ((r & 2) ? K / 2 : 0);
            for (int e = 0; e < perReg; ++e) {
              uint32_t bits = (v >> (8 * es * e)) & ((1u << (8 * es)) - 1);
              A[row * K + col0 + e] =
                  static_cast<float>(decodeOperand(bits, t));
            }
          }
        }
    }
    // An operand element: its shared address through the descriptor,
    // read (for the race check) until the group retires.
    auto element = [&](uint64_t desc, bool trans, int mn, int kk, Ty type) {
      uint32_t a = descAddress(desc, trans, mn, kk, es);
      if (cta.races.enabled()) {
        std::string race = cta.races.wgmmaRead(group, group * 128, a, es);
        if (!race.empty())
          fail(-1, race);
      }
      return static_cast<float>(loadElement(cta, a, type, -1));
    };
    if (!aRegs)
      for (int i = 0; i < M; ++i)
        for (int kk = 0; kk < K; ++kk)
          A[i * K + kk] = element(aDesc, transA, i, kk, t);
    for (int j = 0; j < N; ++j)
      for (int kk = 0; kk < K; ++kk)
        B[kk * N + j] = element(bDesc, transB, j, kk, tb);
    if (scaleA < 0)
      for (float &x : A)
        x = -x;
    if (scaleB < 0)
      for (float &x : B)
        x = -x;
    // D = A.B (+ D), per thread's fragment.
    for (int wi = 0; wi < 4; ++wi) {
      Warp &w = *ws[wi];
      for (int l = 0; l < 32; ++l) {
        bool accumulate = read(w, scaleD, l) != 0;
        int g = l / 4, tq = l % 4;
        for (size_t i = 0; i < (f16acc ? nd * 2 : nd); ++i) {
          int blk = static_cast<int>(i / 4), within = static_cast<int>(i % 4);
          int row = wi * 16 + g + ((within & 2) ? 8 : 0);
          int col = blk * 8 + tq * 2 + (within & 1);
          float acc = 0;
          for (int kk = 0; kk < K; ++kk)
            acc += A[row * K + kk] * B[kk * N + col];
          if (intAcc) {
            // Integer products of 8-bit values summed over K = 32 are
            // exact in float (< 2^24); the accumulator wraps (or, with
            // .satfinite, saturates) at 32 bits.
            const Operand &o = dOp.elems[i];
            if (o.kind != Operand::Reg)
              fail(l, "wgmma accumulators must be registers");
            uint64_t &r = reg(w, o.reg, l);
            int64_t prev = accumulate ? signExtend(r, 32) : 0;
            int64_t sum = prev + static_cast<int64_t>(acc);
            if (in.flags & FSat)
              sum = std::clamp<int64_t>(sum, INT32_MIN, INT32_MAX);
            r = maskBits(static_cast<uint64_t>(sum), 32);
          } else if (!f16acc) {
            const Operand &o = dOp.elems[i];
            if (o.kind != Operand::Reg)
              fail(l, "wgmma accumulators must be registers");
            uint64_t &r = reg(w, o.reg, l);
            float prev = accumulate ? bitsToF32(static_cast<uint32_t>(r)) : 0.0f;
            r = f32ToBits(prev + acc);
          } else {
            const Operand &o = dOp.elems[i / 2];
            uint64_t &r = reg(w, o.reg, l);
            unsigned shift = (i & 1) ? 16 : 0;
            float prev = accumulate
                             ? static_cast<float>(decode((r >> shift) & 0xFFFF, kF16))
                             : 0.0f;
            uint64_t bits = encode(prev + acc, kF16, Round::Nearest);
            r = (r & ~(0xFFFFull << shift)) | (bits << shift);
          }
        }
      }
    }
  }

  // ---- the instruction -------------------------------------------------------

  uint32_t guardMask(Warp &w, const Instr &in, uint32_t mask) {
    if (in.guard < 0)
      return mask;
    uint32_t out = 0;
    for (uint32_t mm = mask; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      bool p = reg(w, in.guard, l) != 0;
      if (p != in.guardNeg)
        out |= 1u << l;
    }
    return out;
  }

  void advance(Warp &w, uint32_t mask) {
    for (uint32_t mm = mask; mm; mm &= mm - 1)
      ++w.pc[__builtin_ctz(mm)];
  }

  /// A warp collective: true when every live lane of `members` is here;
  /// otherwise the arriving lanes wait. `mask` becomes the gathered lanes.
  bool gatherWarp(Warp &w, uint32_t pc, uint32_t &mask, uint32_t members) {
    uint32_t here = mask;
    for (int l = 0; l < 32; ++l)
      if (w.state[l] == AtCollective && w.pc[l] == pc)
        here |= 1u << l;
    uint32_t need = members & w.live;
    for (int l = 0; l < 32; ++l)
      if (w.state[l] == Exited)
        need &= ~(1u << l);
    if ((here & need) == need) {
      for (uint32_t mm = here; mm; mm &= mm - 1)
        w.state[__builtin_ctz(mm)] = Ready;
      mask = here;
      return true;
    }
    for (uint32_t mm = mask; mm; mm &= mm - 1)
      w.state[__builtin_ctz(mm)] = AtCollective;
    return false;
  }

  /// A warpgroup collective: true when all four warps' live lanes are at
  /// `pc`; otherwise this warp's lanes wait.
  bool gatherWarpgroup(Cta &cta, Warp &w, uint32_t pc, uint32_t mask) {
    for (uint32_t mm = mask; mm; mm &= mm - 1)
      w.state[__builtin_ctz(mm)] = AtWarpgroup;
    uint32_t group = w.index / 4;
    if ((group + 1) * 4 > cta.warps.size())
      fail(-1, "a warpgroup instruction in a CTA whose threads do not fill "
               "the warpgroup");
    for (uint32_t i = group * 4; i < group * 4 + 4; ++i) {
      Warp &o = cta.warps[i];
      for (int l = 0; l < 32; ++l) {
        if (!(o.live >> l & 1))
          fail(-1, "a warpgroup instruction with a partial warp");
        if (o.state[l] == Exited)
          fail(l, "a warpgroup instruction while thread " +
                      std::to_string(i * 32 + l) + " of the warpgroup exited");
        if (o.state[l] != AtWarpgroup || o.pc[l] != pc)
          return false;
      }
    }
    return true;
  }

  /// Warpgroups waiting in setmaxnreg.inc for registers look again (after
  /// a dec, or when threads exit).
  void wakeRegisterWaiters(Cta &cta) {
    for (Warp &o : cta.warps)
      for (int l = 0; l < 32; ++l)
        if (o.state[l] == AtCollective && k.code[o.pc[l]].op == Op::Setmaxnreg)
          o.state[l] = Ready;
  }

  void releaseWarpgroup(Cta &cta, uint32_t group, bool advancePc) {
    for (uint32_t i = group * 4; i < group * 4 + 4; ++i) {
      Warp &o = cta.warps[i];
      for (int l = 0; l < 32; ++l) {
        o.state[l] = Ready;
        if (advancePc)
          ++o.pc[l];
      }
    }
  }

  /// Byte `i` of `word`, signed when `t` (dp4a's and vabsdiff4's operand
  /// type) is s32.
  static int64_t byteOf(uint32_t word, int i, Ty t) {
    uint32_t b = (word >> (8 * i)) & 0xFF;
    return t == Ty::S32 ? static_cast<int8_t>(b) : static_cast<int64_t>(b);
  }

  /// match.any / match.all over the gathered lanes of `members`.
  void matchOp(Warp &w, const Instr &in, uint32_t gathered, uint32_t members) {
    uint32_t group = gathered & members;
    unsigned bits = bitsOf(in.type);
    uint64_t vals[32] = {};
    for (uint32_t mm = group; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      vals[l] = maskBits(read(w, in.ops[1], l), bits);
    }
    bool allEqual = true;
    for (uint32_t mm = group; mm; mm &= mm - 1)
      allEqual = allEqual && vals[__builtin_ctz(mm)] == vals[__builtin_ctz(group)];
    for (uint32_t mm = gathered; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      uint32_t r = 0;
      if (in.sub == SubOp::Any) {
        for (uint32_t nn = group; nn; nn &= nn - 1)
          if (vals[__builtin_ctz(nn)] == vals[l])
            r |= 1u << __builtin_ctz(nn);
      } else {
        r = allEqual ? group : 0;
      }
      const Operand &d = in.ops[0];
      if (d.kind == Operand::Vec && d.elems.size() == 2) {
        write(w, d.elems[0], l, r);
        write(w, d.elems[1], l, allEqual);
      } else {
        write(w, d, l, r);
      }
      ++w.pc[l];
    }
  }

  /// Element `i` of an mma.sync fragment register (32 / bits of `t` of
  /// them per register), as a double.
  static double mmaElement(uint32_t v, Ty t, int i) {
    unsigned bits = t == Ty::TF32 ? 32 : bitsOf(t);
    return decodeOperand(bits == 32 ? v : v >> (bits * i), t);
  }

  /// mma.sync.aligned.m16n8kK.row.col: D = A.B + C over the warp's
  /// fragments, laid out as the PTX ISA's "matrix fragments for mma.m16n8k*"
  /// give them (lane = 4 * groupID + threadID_in_group).
  void mmaSync(Warp &w, const Instr &in) {
    const int M = 16, N = 8, K = in.shapeK;
    Ty at = in.type2, bt = in.type3, dt = in.type;
    unsigned ebits = at == Ty::TF32 ? 32 : bitsOf(at);
    int perReg = 32 / static_cast<int>(ebits);
    int aRegs = M * K / 32 / perReg, bRegs = K * N / 32 / perReg;
    bool f16acc = dt == Ty::F16;
    int cRegs = f16acc ? 2 : 4;
    const Operand &dOp = in.ops[0], &aOp = in.ops[1], &bOp = in.ops[2],
                  &cOp = in.ops[3];
    auto count = [](const Operand &o) {
      return o.kind == Operand::Vec ? static_cast<int>(o.elems.size()) : 1;
    };
    if (count(aOp) != aRegs || count(bOp) != bRegs || count(cOp) != cRegs ||
        count(dOp) != cRegs)
      fail(-1, "mma.sync m16n8k" + std::to_string(K) + " takes " +
                   std::to_string(cRegs) + ", " + std::to_string(aRegs) +
                   ", " + std::to_string(bRegs) + " and " +
                   std::to_string(cRegs) + " registers for d, a, b and c");
    auto elem = [](const Operand &o, int i) -> const Operand & {
      return o.kind == Operand::Vec ? o.elems[i] : o;
    };
    std::vector<double> A(M * K), B(K * N), C(M * N);
    // The k columns one register spans across a lane group's 4 lanes.
    int kPerRegGroup = perReg * 4;
    for (int l = 0; l < 32; ++l) {
      int g = l / 4, t = l % 4;
      for (int r = 0; r < aRegs; ++r) {
        uint32_t v = static_cast<uint32_t>(read(w, elem(aOp, r), l));
        // A's registers (at least 2 in every shape) alternate rows g and
        // g + 8, then step along k by kPerRegGroup.
        int row = g + 8 * (r & 1);
        for (int e = 0; e < perReg; ++e) {
          int col = (r >> 1) * kPerRegGroup + t * perReg + e;
          A[row * K + col] = mmaElement(v, at, e);
        }
      }
      for (int r = 0; r < bRegs; ++r) {
        uint32_t v = static_cast<uint32_t>(read(w, elem(bOp, r), l));
        for (int e = 0; e < perReg; ++e) {
          int kk = r * kPerRegGroup + t * perReg + e;
          B[kk * N + g] = mmaElement(v, bt, e);
        }
      }
      for (int i = 0; i < 4; ++i) {
        int row = g + 8 * (i >> 1), col = t * 2 + (i & 1);
        uint64_t v = read(w, elem(cOp, f16acc ? i / 2 : i), l);
        C[row * N + col] =
            f16acc ? decode((v >> (16 * (i & 1))) & 0xFFFF, kF16)
            : dt == Ty::S32 ? static_cast<double>(signExtend(v, 32))
                            : bitsToF32(static_cast<uint32_t>(v));
      }
    }
    std::vector<uint64_t> out(32 * 4);
    for (int l = 0; l < 32; ++l) {
      int g = l / 4, t = l % 4;
      uint64_t regsOut[4] = {0, 0, 0, 0};
      for (int i = 0; i < 4; ++i) {
        int row = g + 8 * (i >> 1), col = t * 2 + (i & 1);
        if (dt == Ty::S32) {
          int64_t acc = static_cast<int64_t>(C[row * N + col]);
          for (int kk = 0; kk < K; ++kk)
            acc += static_cast<int64_t>(A[row * K + kk]) *
                   static_cast<int64_t>(B[kk * N + col]);
          if (in.flags & FSat)
            acc = std::clamp<int64_t>(acc, INT32_MIN, INT32_MAX);
          regsOut[i] = maskBits(static_cast<uint64_t>(acc), 32);
        } else {
          // Products are exact in double; the sum is rounded once to the
          // accumulator's type (the tensor core's order of adds is not
          // specified).
          double acc = C[row * N + col];
          for (int kk = 0; kk < K; ++kk)
            acc += A[row * K + kk] * B[kk * N + col];
          if (f16acc)
            regsOut[i / 2] |= encode(acc, kF16, Round::Nearest)
                              << (16 * (i & 1));
          else
            regsOut[i] = f32ToBits(static_cast<float>(acc));
        }
      }
      for (int r = 0; r < cRegs; ++r)
        out[l * 4 + r] = regsOut[r];
    }
    // Written after every lane's C was read (d and c may be the same
    // registers).
    for (int l = 0; l < 32; ++l)
      for (int r = 0; r < cRegs; ++r)
        write(w, elem(dOp, r), l, out[l * 4 + r]);
  }

  void memoryOp(Cta &cta, Warp &w, const Instr &in, uint32_t active);
  bool sameAsEarlierLane(Warp &w, const Instr &in, uint32_t active, int lane,
                         unsigned bytes);
  bool fastPath(Cta &cta, Warp &w, const Instr &in, uint32_t active);
  void atomicOp(Cta &cta, Warp &w, const Instr &in, uint32_t active);
  void execute(Cta &cta, Warp &w, uint32_t pc, uint32_t mask);
  void runCluster(const std::vector<Dim3> &ids);
  std::string deadlockReport();
  void spinCheck();
  uint64_t stateHash() const;
  /// Whether the kernel has cluster instructions (cluster barriers,
  /// shared::cluster accesses, mapa, multicast copies).
  bool usesClusters() const {
    for (const Instr &in : k.code)
      if (in.op == Op::BarCluster || in.op == Op::Mapa ||
          in.space == Space::SharedCluster || (in.flags & FMulticast))
        return true;
    return false;
  }
  void initCta(Cta &cta, Dim3 id, uint32_t rank, uint64_t warpBase);
};

//===----------------------------------------------------------------------===//

/// Whether an earlier active lane of this st (a lower lane; the loop runs
/// lanes in order) writes exactly the bytes `lane` writes, with the same
/// values. Asked only when the race check found a conflict.
bool Engine::sameAsEarlierLane(Warp &w, const Instr &in, uint32_t active,
                               int lane, unsigned bytes) {
  unsigned n = in.vec;
  const Operand &addrOp = in.ops[1];
  const Operand &val = in.ops[0];
  for (uint32_t mm = active & ((1u << lane) - 1); mm; mm &= mm - 1) {
    int other = __builtin_ctz(mm);
    if (effectiveAddress(w, addrOp, other) != effectiveAddress(w, addrOp, lane))
      continue;
    bool same = true;
    for (unsigned e = 0; e < n && same; ++e) {
      const Operand &o = n > 1 ? val.elems[e] : val;
      uint64_t mask = bytes >= 8 ? ~0ull : (1ull << (8 * bytes)) - 1;
      same = (read(w, o, other) & mask) == (read(w, o, lane) & mask);
    }
    if (same)
      return true;
  }
  return false;
}

void Engine::memoryOp(Cta &cta, Warp &w, const Instr &in, uint32_t active) {
  unsigned bits = bitsOf(in.type);
  unsigned bytes = std::max(1u, bits / 8);
  unsigned n = in.vec;
  const Operand &addrOp = in.ops[1];
  const Operand &val = in.ops[0];
  if (n > 1 && (val.kind != Operand::Vec || val.elems.size() != n))
    fail(-1, "a .v" + std::to_string(n) + " access needs " + std::to_string(n) +
                 " registers");
  for (uint32_t mm = active; mm; mm &= mm - 1) {
    int l = __builtin_ctz(mm);
    uint64_t addr = effectiveAddress(w, addrOp, l);
    if (addrOp.sym >= 0 && in.space == Space::Generic) {
      // A variable named in a generic access: its generic address.
      const Symbol &s = m.symbols[addrOp.sym];
      if (s.space == Space::Shared)
        addr |= kSharedWindow;
      else if (s.space == Space::Local)
        addr |= kLocalWindow;
    }
    uint8_t *p = resolve(cta, w, in.space, addr, static_cast<size_t>(bytes) * n,
                         l, static_cast<size_t>(bytes) * n);
    // Lanes of one st writing the same value to the same bytes is defined
    // (one of the identical writes lands): no race between them. Other
    // overlaps of one instruction's lanes are checked as races.
    checkShared(cta, w, l, p, bytes * n, in.op == Op::St, [&] {
      return in.op == Op::St && sameAsEarlierLane(w, in, active, l, bytes);
    });
    for (unsigned e = 0; e < n; ++e) {
      const Operand &o = n > 1 ? val.elems[e] : val;
      if (in.op == Op::Ld) {
        uint64_t v = 0;
        std::memcpy(&v, p + e * bytes, std::min(bytes, 8u));
        if (isSignedInt(in.type))
          v = static_cast<uint64_t>(signExtend(v, bits));
        if (bytes == 16)
          fail(l, "128-bit registers are not supported");
        write(w, o, l, v);
      } else {
        uint64_t v;
        if (o.kind == Operand::Imm && in.type == Ty::F32 && o.isDoubleLiteral)
          v = f32ToBits(static_cast<float>(bitsToF64(o.imm)));
        else
          v = read(w, o, l);
        std::memcpy(p + e * bytes, &v, std::min(bytes, 8u));
      }
    }
  }
}

/// Runs an instruction `classify` marked, for the active lanes. False when
/// a lane needs the general path (then nothing was done).
bool Engine::fastPath(Cta &cta, Warp &w, const Instr &in, uint32_t active) {
  struct Src {
    const uint64_t *row;
    uint64_t imm;
    uint64_t operator[](int l) const { return row ? row[l] : imm; }
  };
  auto src = [&](size_t i) {
    const Operand &o = in.ops[i];
    return o.kind == Operand::Reg ? Src{w.regs + o.reg * 32, 0}
                                  : Src{nullptr, o.imm};
  };
  uint64_t *d = w.regs + in.ops[0].reg * 32;
  unsigned bits = bitsOf(in.type);
  uint64_t m = bits >= 64 ? ~0ull : (1ull << bits) - 1;
  auto each = [&](auto fn) {
    if (active == 0xFFFFFFFFu) {
      for (int l = 0; l < 32; ++l)
        fn(l);
    } else {
      for (uint32_t mm = active; mm; mm &= mm - 1)
        fn(__builtin_ctz(mm));
    }
  };
  auto f = [](uint64_t v) { return bitsToF32(static_cast<uint32_t>(v)); };
  switch (in.fast) {
  case FastMov: { Src a = src(1); each([&](int l) { d[l] = a[l] & m; }); return true; }
  case FastAdd: { Src a = src(1), b = src(2); each([&](int l) { d[l] = (a[l] + b[l]) & m; }); return true; }
  case FastSub: { Src a = src(1), b = src(2); each([&](int l) { d[l] = (a[l] - b[l]) & m; }); return true; }
  case FastMulLo: { Src a = src(1), b = src(2); each([&](int l) { d[l] = (a[l] * b[l]) & m; }); return true; }
  case FastMadLo: { Src a = src(1), b = src(2), c = src(3); each([&](int l) { d[l] = (a[l] * b[l] + c[l]) & m; }); return true; }
  case FastMulWide:
  case FastMadWide: {
    Src a = src(1), b = src(2);
    Src c = in.fast == FastMadWide ? src(3) : Src{nullptr, 0};
    uint64_t wm = bits >= 32 ? ~0ull : (1ull << (2 * bits)) - 1;
    if (isSignedInt(in.type))
      each([&](int l) {
        d[l] = (static_cast<uint64_t>(signExtend(a[l], bits) * signExtend(b[l], bits)) + c[l]) & wm;
      });
    else
      each([&](int l) { d[l] = ((a[l] & m) * (b[l] & m) + c[l]) & wm; });
    return true;
  }
  case FastAnd: { Src a = src(1), b = src(2); each([&](int l) { d[l] = a[l] & b[l] & m; }); return true; }
  case FastOr: { Src a = src(1), b = src(2); each([&](int l) { d[l] = (a[l] | b[l]) & m; }); return true; }
  case FastXor: { Src a = src(1), b = src(2); each([&](int l) { d[l] = (a[l] ^ b[l]) & m; }); return true; }
  case FastShl: {
    Src a = src(1), b = src(2);
    each([&](int l) { uint64_t s = b[l] & 0xFFFFFFFF; d[l] = s >= bits ? 0 : (a[l] << s) & m; });
    return true;
  }
  case FastShrU: {
    Src a = src(1), b = src(2);
    each([&](int l) { uint64_t s = b[l] & 0xFFFFFFFF; d[l] = s >= bits ? 0 : (a[l] & m) >> s; });
    return true;
  }
  case FastShrS: {
    Src a = src(1), b = src(2);
    each([&](int l) {
      uint64_t s = std::min<uint64_t>(b[l] & 0xFFFFFFFF, bits - 1);
      d[l] = static_cast<uint64_t>(signExtend(a[l], bits) >> s) & m;
    });
    return true;
  }
  case FastSelp: {
    Src a = src(1), b = src(2), c = src(3);
    each([&](int l) { d[l] = (c[l] ? a[l] : b[l]) & m; });
    return true;
  }
  case FastSetpInt: {
    Src a = src(1), b = src(2);
    bool sgn = isSignedInt(in.type);
    Cmp cmp = in.cmp;
    each([&](int l) {
      uint64_t x = a[l] & m, y = b[l] & m;
      int64_t sx = signExtend(x, bits), sy = signExtend(y, bits);
      bool r;
      switch (cmp) {
      case Cmp::Eq: r = x == y; break;
      case Cmp::Ne: r = x != y; break;
      case Cmp::Lt: r = sgn ? sx < sy : x < y; break;
      case Cmp::Le: r = sgn ? sx <= sy : x <= y; break;
      case Cmp::Gt: r = sgn ? sx > sy : x > y; break;
      case Cmp::Ge: r = sgn ? sx >= sy : x >= y; break;
      case Cmp::Lo: r = x < y; break;
      case Cmp::Ls: r = x <= y; break;
      case Cmp::Hi: r = x > y; break;
      case Cmp::Hs: r = x >= y; break;
      default: r = false; break;
      }
      d[l] = r;
    });
    return in.cmp <= Cmp::Hs;
  }
  case FastAddF: { Src a = src(1), b = src(2); each([&](int l) { d[l] = f32ToBits(f(a[l]) + f(b[l])); }); return true; }
  case FastSubF: { Src a = src(1), b = src(2); each([&](int l) { d[l] = f32ToBits(f(a[l]) - f(b[l])); }); return true; }
  case FastMulF: { Src a = src(1), b = src(2); each([&](int l) { d[l] = f32ToBits(f(a[l]) * f(b[l])); }); return true; }
  case FastFmaF: {
    Src a = src(1), b = src(2), c = src(3);
    each([&](int l) { d[l] = f32ToBits(std::fma(f(a[l]), f(b[l]), f(c[l]))); });
    return true;
  }
  case FastSetpF: {
    Src a = src(1), b = src(2);
    Cmp cmp = in.cmp;
    if (cmp > Cmp::Nan || (cmp >= Cmp::Lo && cmp <= Cmp::Hs))
      return false;
    each([&](int l) {
      float x = f(a[l]), y = f(b[l]);
      bool nan = std::isnan(x) || std::isnan(y);
      bool r;
      switch (cmp) {
      case Cmp::Eq: r = !nan && x == y; break;
      case Cmp::Ne: r = !nan && x != y; break;
      case Cmp::Lt: r = !nan && x < y; break;
      case Cmp::Le: r = !nan && x <= y; break;
      case Cmp::Gt: r = !nan && x > y; break;
      case Cmp::Ge: r = !nan && x >= y; break;
      case Cmp::Equ: r = nan || x == y; break;
      case Cmp::Neu: r = nan || x != y; break;
      case Cmp::Ltu: r = nan || x < y; break;
      case Cmp::Leu: r = nan || x <= y; break;
      case Cmp::Gtu: r = nan || x > y; break;
      case Cmp::Geu: r = nan || x >= y; break;
      case Cmp::Num: r = !nan; break;
      default: r = nan; break;
      }
      d[l] = r;
    });
    return true;
  }
  case FastCvtBf16F32: { Src a = src(1); each([&](int l) { d[l] = f32ToBf16(f(a[l])); }); return true; }
  case FastCvtF32Bf16: { Src a = src(1); each([&](int l) { d[l] = f32ToBits(bf16ToF32(static_cast<uint32_t>(a[l]))); }); return true; }
  case FastCvtInt: {
    Src a = src(1);
    unsigned sbits = bitsOf(in.type2);
    if (isSignedInt(in.type2))
      each([&](int l) { d[l] = static_cast<uint64_t>(signExtend(a[l], sbits)) & m; });
    else
      each([&](int l) { d[l] = maskBits(a[l], sbits) & m; });
    return true;
  }
  case FastLdGlobal:
  case FastStGlobal: {
    const Operand &ao = in.ops[1];
    const uint64_t *base = w.regs + ao.reg * 32;
    unsigned bytes = std::max(1u, bits / 8);
    // Every lane inside the last allocation hit and aligned, or the
    // general path (which checks and reports).
    uint32_t bad = 0;
    each([&](int l) {
      uint64_t addr = base[l] + static_cast<uint64_t>(ao.offset);
      if (addr < hitStart || addr + bytes > hitEnd || (addr & (bytes - 1)))
        bad |= 1u << l;
    });
    if (bad)
      return false;
    (void)cta;
    if (in.fast == FastLdGlobal) {
      bool sgn = isSignedInt(in.type);
      each([&](int l) {
        uint64_t v = 0;
        std::memcpy(&v, reinterpret_cast<const void *>(base[l] + ao.offset), bytes);
        d[l] = sgn ? static_cast<uint64_t>(signExtend(v, bits)) : v;
      });
    } else {
      const uint64_t *v = w.regs + in.ops[0].reg * 32;
      each([&](int l) {
        std::memcpy(reinterpret_cast<void *>(base[l] + ao.offset), &v[l], bytes);
      });
    }
    return true;
  }
  default:
    return false;
  }
}

template <typename T> static bool casWord(T *p, T &expected, T desired) {
  return __atomic_compare_exchange_n(p, &expected, desired, false,
                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

void Engine::atomicOp(Cta &cta, Warp &w, const Instr &in, uint32_t active) {
  bool isRed = in.op == Op::Red;
  const Operand &addrOp = isRed ? in.ops[0] : in.ops[1];
  size_t vi = isRed ? 1 : 2;
  Ty t = in.type;
  unsigned bits = bitsOf(t);
  unsigned bytes = bits / 8;
  for (uint32_t mm = active; mm; mm &= mm - 1) {
    int l = __builtin_ctz(mm);
    uint64_t addr = effectiveAddress(w, addrOp, l);
    uint8_t *p = resolve(cta, w, in.space, addr, bytes, l);
    uint64_t b = read(w, in.ops[vi], l);
    uint64_t c = in.sub == SubOp::Cas ? read(w, in.ops[vi + 1], l) : 0;
    auto apply = [&](uint64_t old) -> uint64_t {
      switch (in.sub) {
      case SubOp::Add:
        if (t == Ty::F32)
          return f32ToBits(bitsToF32(static_cast<uint32_t>(old)) +
                           bitsToF32(static_cast<uint32_t>(b)));
        if (t == Ty::F64)
          return f64ToBits(bitsToF64(old) + bitsToF64(b));
        if (t == Ty::F16 || t == Ty::BF16 || t == Ty::F16x2 ||
            t == Ty::BF16x2) {
          const Format &f = formatOf(t);
          auto one = [&](uint32_t x, uint32_t y) {
            return encode(decode(x, f) + decode(y, f), f, Round::Nearest);
          };
          uint64_t lo = one(old & 0xFFFF, b & 0xFFFF);
          if (bits == 16)
            return lo;
          return lo | (static_cast<uint64_t>(
                           one((old >> 16) & 0xFFFF, (b >> 16) & 0xFFFF))
                       << 16);
        }
        return maskBits(old + b, bits);
      case SubOp::Min:
      case SubOp::Max: {
        bool less;
        if (t == Ty::F32)
          less = bitsToF32(static_cast<uint32_t>(b)) <
                 bitsToF32(static_cast<uint32_t>(old));
        else if (isSignedInt(t))
          less = signExtend(b, bits) < signExtend(old, bits);
        else
          less = maskBits(b, bits) < maskBits(old, bits);
        return (in.sub == SubOp::Min) == less ? maskBits(b, bits) : old;
      }
      case SubOp::Inc:
        return maskBits(old, bits) >= maskBits(b, bits) ? 0 : old + 1;
      case SubOp::Dec:
        return (old == 0 || maskBits(old, bits) > maskBits(b, bits))
                   ? maskBits(b, bits)
                   : old - 1;
      case SubOp::And: return old & b;
      case SubOp::Or: return old | b;
      case SubOp::Xor: return old ^ b;
      case SubOp::Exch: return maskBits(b, bits);
      case SubOp::Cas: return maskBits(old, bits) == maskBits(b, bits)
                                  ? maskBits(c, bits) : old;
      default: fail(l, "unsupported atomic operation");
      }
    };
    uint64_t old = 0;
    if (bytes == 4) {
      auto *q = reinterpret_cast<uint32_t *>(p);
      uint32_t cur = __atomic_load_n(q, __ATOMIC_SEQ_CST);
      while (!casWord<uint32_t>(q, cur, static_cast<uint32_t>(apply(cur)))) {
      }
      old = cur;
    } else if (bytes == 8) {
      auto *q = reinterpret_cast<uint64_t *>(p);
      uint64_t cur = __atomic_load_n(q, __ATOMIC_SEQ_CST);
      while (!casWord<uint64_t>(q, cur, apply(cur))) {
      }
      old = cur;
    } else if (bytes == 2) {
      // The aligned word holding the halfword.
      auto word = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(3);
      unsigned shift = (reinterpret_cast<uintptr_t>(p) & 2) * 8;
      auto *q = reinterpret_cast<uint32_t *>(word);
      uint32_t cur = __atomic_load_n(q, __ATOMIC_SEQ_CST);
      while (true) {
        uint32_t half = (cur >> shift) & 0xFFFF;
        uint32_t next = (cur & ~(0xFFFFu << shift)) |
                        ((static_cast<uint32_t>(apply(half)) & 0xFFFF) << shift);
        if (casWord<uint32_t>(q, cur, next)) {
          old = half;
          break;
        }
      }
    } else {
      fail(l, "unsupported atomic width");
    }
    if (!isRed)
      write(w, in.ops[0], l, old);
  }
}

void Engine::execute(Cta &cta, Warp &w, uint32_t pc, uint32_t mask) {
  const Instr &in = k.code[pc];
  curInstr = &in;
  ++warpInstructions;
  if (!in.pure)
    lastProgress = warpInstructions;
  else if (in.op == Op::Ld)
    w.lastLoad = pc;
  if (trace) {
    std::fprintf(trace, "cta %llu warp %u pc %u mask %08x  line %d: %s\n",
                 static_cast<unsigned long long>(cta.linear), w.index, pc,
                 mask, in.line, in.text.c_str());
  }
  uint32_t active = guardMask(w, in, mask);
  threadInstructions += __builtin_popcount(active);
  if (in.fast && fastPath(cta, w, in, active)) {
    advance(w, mask);
    return;
  }
  auto lanes = [&](auto fn) {
    for (uint32_t mm = active; mm; mm &= mm - 1)
      fn(__builtin_ctz(mm));
  };
  switch (in.op) {
  case Op::Mov: {
    const Operand &d = in.ops[0], &s = in.ops[1];
    unsigned bits = bitsOf(in.type);
    lanes([&](int l) {
      if (d.kind == Operand::Vec) { // unpack
        unsigned part = bits / static_cast<unsigned>(d.elems.size());
        uint64_t v = read(w, s, l);
        for (size_t i = 0; i < d.elems.size(); ++i)
          write(w, d.elems[i], l, maskBits(v >> (part * i), part));
      } else if (s.kind == Operand::Vec) { // pack
        unsigned part = bits / static_cast<unsigned>(s.elems.size());
        uint64_t v = 0;
        for (size_t i = 0; i < s.elems.size(); ++i)
          v |= maskBits(read(w, s.elems[i], l), part) << (part * i);
        write(w, d, l, v);
      } else if (s.kind == Operand::Imm && in.type == Ty::F32 &&
                 s.isDoubleLiteral) {
        write(w, d, l, f32ToBits(static_cast<float>(bitsToF64(s.imm))));
      } else if (s.kind == Operand::Imm && in.type == Ty::F64 &&
                 s.isFloatLiteral && !s.isDoubleLiteral) {
        write(w, d, l, f64ToBits(bitsToF32(static_cast<uint32_t>(s.imm))));
      } else if (in.type == Ty::Pred) {
        write(w, d, l, read(w, s, l) != 0);
      } else {
        write(w, d, l, maskBits(read(w, s, l), bits));
      }
    });
    break;
  }
  case Op::Add: case Op::Sub: case Op::Mul: case Op::Mad: case Op::Fma:
  case Op::Div: case Op::Rem: case Op::Abs: case Op::Neg: case Op::Min:
  case Op::Max: case Op::Rcp: case Op::Sqrt: case Op::Rsqrt: case Op::Ex2:
  case Op::Lg2: case Op::Sin: case Op::Cos: case Op::Tanh: case Op::Copysign:
    if (isFloat(in.type))
      lanes([&](int l) { write(w, in.ops[0], l, floatOp(in, w, l)); });
    else
      lanes([&](int l) { write(w, in.ops[0], l, intOp(in, w, l)); });
    break;
  case Op::And: case Op::Or: case Op::Xor: case Op::Not: case Op::Cnot:
  case Op::Shl: case Op::Shr: case Op::Bfe: case Op::Bfi: case Op::Brev:
  case Op::Popc: case Op::Clz: case Op::Prmt: case Op::Mul24:
  case Op::Mad24: case Op::Sad:
    lanes([&](int l) { write(w, in.ops[0], l, intOp(in, w, l)); });
    break;
  case Op::Selp:
    lanes([&](int l) {
      uint64_t c = read(w, in.ops[3], l);
      uint64_t v = c ? read(w, in.ops[1], l) : read(w, in.ops[2], l);
      const Operand &src = c ? in.ops[1] : in.ops[2];
      if (src.kind == Operand::Imm && in.type == Ty::F32 && src.isDoubleLiteral)
        v = f32ToBits(static_cast<float>(bitsToF64(src.imm)));
      write(w, in.ops[0], l, maskBits(v, bitsOf(in.type)));
    });
    break;
  case Op::Setp:
    lanes([&](int l) {
      bool r = compare(in, w, l);
      bool q = !r;
      if (in.ops.size() == 4) {
        bool c = read(w, in.ops[3], l) != 0;
        switch (in.sub) {
        case SubOp::And: r = r && c; q = q && c; break;
        case SubOp::Or: r = r || c; q = q || c; break;
        case SubOp::Xor: r = r != c; q = q != c; break;
        default: fail(l, "setp with a fourth operand needs .and, .or or .xor");
        }
      }
      const Operand &d = in.ops[0];
      if (d.kind == Operand::Vec && d.elems.size() == 2) {
        write(w, d.elems[0], l, r);
        write(w, d.elems[1], l, q);
      } else {
        write(w, d, l, r);
      }
    });
    break;
  case Op::Testp:
    lanes([&](int l) {
      double x = in.type == Ty::F32 ? readF32(w, in.ops[1], l)
                                    : readF64(w, in.ops[1], l);
      bool r = in.sub == SubOp::All   ? std::isfinite(x)
               : in.sub == SubOp::Any ? std::isinf(x)
               : in.sub == SubOp::Uni ? !std::isnan(x)
                                      : std::isnan(x);
      write(w, in.ops[0], l, r);
    });
    break;
  case Op::Cvt:
    lanes([&](int l) { write(w, in.ops[0], l, convert(in, w, l)); });
    break;
  case Op::Cvta: {
    bool to = in.flags & FTo;
    unsigned bits = bitsOf(in.type);
    lanes([&](int l) {
      uint64_t a = read(w, in.ops[1], l);
      uint64_t r = a;
      switch (in.space) {
      case Space::Global: case Space::Const:
        r = a;
        break;
      case Space::Shared:
        r = to ? (a & kWindowMask) == kSharedWindow ? (a & 0xFFFFFF) : a
               : (kSharedWindow | (a & 0xFFFFFFFF));
        if (to && (a & kWindowMask) != kSharedWindow)
          fail(l, "cvta.to.shared of " + hex(a) +
                      ", which is not a generic shared address");
        break;
      case Space::SharedCluster:
        if (!to)
          fail(l, "cvta from shared::cluster is not supported");
        if ((a & kWindowMask) != kSharedWindow)
          fail(l, "cvta.to.shared::cluster of " + hex(a) +
                      ", which is not a generic shared address");
        r = a & 0xFFFFFFFF;
        break;
      case Space::Local:
        r = to ? (a & ~kWindowMask) : (kLocalWindow | a);
        break;
      case Space::Param:
        r = to ? (a & ~kWindowMask) : (kParamWindow | (a & ~kWindowMask));
        break;
      default:
        break;
      }
      write(w, in.ops[0], l, maskBits(r, bits));
    });
    break;
  }
  case Op::Isspacep:
    lanes([&](int l) {
      uint64_t a = read(w, in.ops[1], l);
      uint64_t win = a & kWindowMask;
      bool r = in.space == Space::Shared || in.space == Space::SharedCluster
                   ? win == kSharedWindow
               : in.space == Space::Local ? win == kLocalWindow
               : in.space == Space::Param ? win == kParamWindow
                                          : (win != kSharedWindow &&
                                             win != kLocalWindow &&
                                             win != kParamWindow);
      write(w, in.ops[0], l, r);
    });
    break;
  case Op::Ld:
  case Op::St:
    memoryOp(cta, w, in, active);
    break;
  case Op::Atom:
  case Op::Red:
    atomicOp(cta, w, in, active);
    break;
  case Op::Prefetch:
  case Op::TmaPrefetch:
  case Op::Membar:
  case Op::Fence:
  case Op::Griddepcontrol:
  case Op::BulkCommit:
  case Op::BulkWait:
  case Op::CpAsyncCommit:
  case Op::CpAsyncWait:
  case Op::WgmmaFence:
    break;
  case Op::WgmmaCommit:
  case Op::WgmmaWait:
    // Once per warpgroup (its warps run the same sequence): the race
    // check's record of which wgmma reads are still in flight.
    if (cta.races.enabled() && w.index % 4 == 0) {
      uint32_t group = w.index / 4;
      if (in.op == Op::WgmmaCommit)
        cta.races.wgmmaCommit(group);
      else
        cta.races.wgmmaWait(group, group * 128,
                            static_cast<uint32_t>(in.ops[0].imm));
    }
    break;
  case Op::Nop:
    break;
  case Op::Nanosleep:
    yieldFlag = true;
    break;
  case Op::Bra:
    for (uint32_t mm = mask; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      w.pc[l] = (active >> l & 1) ? static_cast<uint32_t>(in.ops[0].target)
                                  : w.pc[l] + 1;
    }
    return;
  case Op::Ret:
  case Op::Exit:
    for (uint32_t mm = active; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      w.state[l] = Exited;
      ++cta.exited;
    }
    advance(w, mask & ~active);
    if (active) {
      checkBarriers(cta);
      wakeRegisterWaiters(cta);
    }
    return;
  case Op::Trap:
    if (active)
      fail(__builtin_ctz(active), "trap");
    break;
  case Op::Brkpt:
    if (active)
      fail(__builtin_ctz(active), "brkpt (a breakpoint)");
    break;
  case Op::BarSync:
  case Op::BarArrive:
  case Op::BarRed: {
    if (!active)
      break;
    size_t base = in.op == Op::BarRed ? 1 : 0;
    int l0 = __builtin_ctz(active);
    uint32_t id = static_cast<uint32_t>(read(w, in.ops[base], l0));
    if (id >= 16)
      fail(l0, "barrier " + std::to_string(id) + " (there are 16: 0-15)");
    uint32_t count = 0;
    bool hasCount = in.ops.size() > base + 1 + (in.op == Op::BarRed ? 1 : 0);
    if (hasCount) {
      count = static_cast<uint32_t>(read(w, in.ops[base + 1], l0));
      if (count == 0 || count % 32 != 0)
        fail(l0, "a barrier's thread count must be a non-zero multiple of 32 "
                 "(" + std::to_string(count) + ")");
    } else if (in.op == Op::BarArrive) {
      fail(l0, "bar.arrive needs a thread count");
    }
    Cta::Bar &b = cta.bars[id];
    if (b.arrived && b.expected != count)
      fail(l0, "barrier " + std::to_string(id) + " is used with thread counts " +
                   std::to_string(b.expected) + " and " + std::to_string(count));
    b.expected = count;
    b.arrived += __builtin_popcount(active);
    if (cta.races.enabled())
      lanes([&](int l) { cta.races.release(tidOf(w, l), cta.races.barrier(id)); });
    if (in.op == Op::BarRed)
      lanes([&](int l) {
        bool c = read(w, in.ops.back(), l) != 0;
        b.popc += c;
        b.andv = b.andv && c;
        b.orv = b.orv || c;
      });
    advance(w, mask & ~active);
    if (in.op == Op::BarArrive) {
      advance(w, active);
    } else {
      for (uint32_t mm = active; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        w.state[l] = AtBarrier;
        w.wait[l] = id;
      }
      b.waiters |= 1u << w.index;
    }
    if (in.op == Op::BarRed) {
      // The reduction's result is written when the barrier completes.
      uint32_t expected = b.expected ? b.expected : cta.threads - cta.exited;
      if (b.arrived >= expected) {
        uint64_t result = in.sub == SubOp::Popc ? b.popc
                          : in.sub == SubOp::And ? b.andv
                                                 : b.orv;
        for (uint32_t ws = b.waiters; ws; ws &= ws - 1) {
          Warp &o = cta.warps[__builtin_ctz(ws)];
          for (int l = 0; l < 32; ++l)
            if (o.state[l] == AtBarrier && o.wait[l] == id)
              write(o, k.code[o.pc[l]].ops[0], l, result);
        }
      }
    }
    checkBarriers(cta);
    return;
  }
  case Op::BarCluster: {
    // barrier.cluster.arrive records the phase the thread arrived in;
    // .wait blocks until that phase has completed; the plain form does both.
    if (in.sub != SubOp::Wait) {
      uint32_t phase = clusterPhase;
      clusterArrived += __builtin_popcount(active);
      for (uint32_t mm = active; mm; mm &= mm - 1)
        w.wait[__builtin_ctz(mm)] = phase;
      uint32_t total = 0;
      for (Cta &c : ctas)
        total += c.threads - c.exited;
      if (clusterArrived >= total) {
        clusterArrived = 0;
        ++clusterPhase;
        for (Cta &c : ctas)
          for (Warp &o : c.warps)
            for (int l = 0; l < 32; ++l)
              if (o.state[l] == AtCluster && o.wait[l] <= phase) {
                o.state[l] = Ready;
                ++o.pc[l];
              }
      }
      if (in.sub == SubOp::Arrive)
        break;
    }
    for (uint32_t mm = active; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      if (clusterPhase > w.wait[l])
        ++w.pc[l];
      else
        w.state[l] = AtCluster;
    }
    advance(w, mask & ~active);
    return;
  }
  case Op::Shf:
    lanes([&](int l) {
      uint64_t a = maskBits(read(w, in.ops[1], l), 32);
      uint64_t b = maskBits(read(w, in.ops[2], l), 32);
      uint32_t n = static_cast<uint32_t>(read(w, in.ops[3], l));
      n = (in.flags & FShiftClamp) ? std::min(n, 32u) : (n & 31);
      uint64_t both = (b << 32) | a; // b:a
      uint64_t r = in.sub == SubOp::Left ? (both << n) >> 32 : both >> n;
      write(w, in.ops[0], l, maskBits(r, 32));
    });
    break;
  case Op::Bfind:
    lanes([&](int l) {
      unsigned bits = bitsOf(in.type);
      uint64_t a = maskBits(read(w, in.ops[1], l), bits);
      // Signed: the most significant bit that differs from the sign.
      if (isSignedInt(in.type) && ((a >> (bits - 1)) & 1))
        a = maskBits(~a, bits);
      uint64_t r = 0xFFFFFFFFu;
      if (a) {
        unsigned pos = 63 - static_cast<unsigned>(__builtin_clzll(a));
        r = in.sub == SubOp::ShiftAmt ? bits - 1 - pos : pos;
      }
      write(w, in.ops[0], l, r);
    });
    break;
  case Op::Dp4a:
    lanes([&](int l) {
      uint32_t a = static_cast<uint32_t>(read(w, in.ops[1], l));
      uint32_t b = static_cast<uint32_t>(read(w, in.ops[2], l));
      int64_t acc = static_cast<int64_t>(read(w, in.ops[3], l) & 0xFFFFFFFFu);
      for (int i = 0; i < 4; ++i)
        acc += byteOf(a, i, in.type) * byteOf(b, i, in.type2);
      write(w, in.ops[0], l, maskBits(static_cast<uint64_t>(acc), 32));
    });
    break;
  case Op::Vabsdiff4:
    lanes([&](int l) {
      uint32_t a = static_cast<uint32_t>(read(w, in.ops[1], l));
      uint32_t b = static_cast<uint32_t>(read(w, in.ops[2], l));
      uint64_t c = read(w, in.ops[3], l);
      bool sat = in.flags & FSat;
      int64_t sum = 0;
      uint64_t bytes = 0;
      for (int i = 0; i < 4; ++i) {
        int64_t x = byteOf(a, i, in.type2), y = byteOf(b, i, in.type3);
        int64_t diff = x > y ? x - y : y - x;
        sum += diff;
        if (sat)
          diff = std::min<int64_t>(diff, in.type == Ty::S32 ? 127 : 255);
        bytes |= static_cast<uint64_t>(diff & 0xFF) << (8 * i);
      }
      uint64_t r = bytes;
      if (in.sub == SubOp::AbsDiffAdd) {
        int64_t total = (in.type == Ty::S32 ? signExtend(c, 32)
                                            : static_cast<int64_t>(c & 0xFFFFFFFFu)) +
                        sum;
        if (sat)
          total = in.type == Ty::S32
                      ? std::clamp<int64_t>(total, INT32_MIN, INT32_MAX)
                      : std::clamp<int64_t>(total, 0, UINT32_MAX);
        r = maskBits(static_cast<uint64_t>(total), 32);
      }
      write(w, in.ops[0], l, r);
    });
    break;
  case Op::WarpSync: {
    if (!active)
      break;
    uint32_t members =
        static_cast<uint32_t>(read(w, in.ops[0], __builtin_ctz(active)));
    for (uint32_t mm = active; mm; mm &= mm - 1)
      if (!((members >> __builtin_ctz(mm)) & 1))
        fail(__builtin_ctz(mm), "bar.warp.sync by a lane its member mask " +
                                    hex(members) + " does not name");
    uint32_t gathered = active;
    if (!gatherWarp(w, pc, gathered, members)) {
      advance(w, mask & ~active);
      return;
    }
    // The lanes' memory accesses before it are ordered before theirs after.
    if (cta.races.enabled()) {
      std::vector<uint32_t> tids;
      for (uint32_t mm = gathered; mm; mm &= mm - 1)
        tids.push_back(tidOf(w, __builtin_ctz(mm)));
      cta.races.syncGroup(tids);
    }
    for (uint32_t mm = gathered; mm; mm &= mm - 1)
      ++w.pc[__builtin_ctz(mm)];
    advance(w, mask & ~active);
    return;
  }
  case Op::MmaSync: {
    if (!active)
      break;
    uint32_t gathered = active;
    if (!gatherWarp(w, pc, gathered, 0xFFFFFFFFu)) {
      advance(w, mask & ~active);
      return;
    }
    if (gathered != 0xFFFFFFFFu)
      fail(__builtin_ctz(gathered), "mma.sync.aligned needs all 32 lanes of "
                                    "the warp (" + hex(gathered) + " arrived)");
    mmaSync(w, in);
    for (int l = 0; l < 32; ++l)
      ++w.pc[l];
    return;
  }
  case Op::Shfl: {
    if (!active)
      break;
    uint32_t members =
        static_cast<uint32_t>(read(w, in.ops[4], __builtin_ctz(active)));
    uint32_t gathered = active;
    if (!gatherWarp(w, pc, gathered, members)) {
      advance(w, mask & ~active);
      return;
    }
    uint64_t src[32];
    for (int l = 0; l < 32; ++l)
      src[l] = (gathered >> l & 1) ? read(w, in.ops[1], l) : 0;
    uint64_t res[32];
    bool pv[32];
    for (uint32_t mm = gathered; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      uint32_t b = static_cast<uint32_t>(read(w, in.ops[2], l)) & 31;
      uint32_t c = static_cast<uint32_t>(read(w, in.ops[3], l));
      uint32_t segmask = (c >> 8) & 31, clamp = c & 31;
      uint32_t maxLane = (l & segmask) | (clamp & ~segmask);
      uint32_t minLane = l & segmask;
      int j = l;
      bool p = false;
      switch (in.sub) {
      case SubOp::Up: j = l - static_cast<int>(b); p = j >= static_cast<int>(maxLane); break;
      case SubOp::Down: j = l + static_cast<int>(b); p = j <= static_cast<int>(maxLane); break;
      case SubOp::Bfly: j = l ^ static_cast<int>(b); p = j <= static_cast<int>(maxLane); break;
      default: j = static_cast<int>(minLane | (b & ~segmask)); p = j <= static_cast<int>(maxLane); break;
      }
      if (!p)
        j = l;
      if (!(gathered >> j & 1) && opt.checks)
        fail(l, "shfl.sync reads lane " + std::to_string(j) +
                    ", which does not take part");
      res[l] = src[j];
      pv[l] = p;
    }
    for (uint32_t mm = gathered; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      const Operand &d = in.ops[0];
      if (d.kind == Operand::Vec && d.elems.size() == 2) {
        write(w, d.elems[0], l, maskBits(res[l], 32));
        write(w, d.elems[1], l, pv[l]);
      } else {
        write(w, d, l, maskBits(res[l], 32));
      }
      ++w.pc[l];
    }
    advance(w, mask & ~active);
    return;
  }
  case Op::Vote:
  case Op::Redux:
  case Op::Elect:
  case Op::Activemask:
  case Op::Match: {
    if (!active)
      break;
    if (in.op == Op::Activemask) {
      lanes([&](int l) { write(w, in.ops[0], l, active); });
      break;
    }
    size_t mi = in.op == Op::Elect ? 1 : 2;
    uint32_t members =
        static_cast<uint32_t>(read(w, in.ops[mi], __builtin_ctz(active)));
    uint32_t gathered = active;
    if (!gatherWarp(w, pc, gathered, members)) {
      advance(w, mask & ~active);
      return;
    }
    if (in.op == Op::Match) {
      matchOp(w, in, gathered, members);
      advance(w, mask & ~active);
      return;
    }
    uint64_t acc = 0;
    bool all = true, any = false;
    int64_t smin = INT64_MAX, smax = INT64_MIN;
    uint64_t umin = ~0ull, umax = 0, andv = ~0ull, orv = 0, xorv = 0;
    uint64_t first = ~0ull;
    bool uni = true;
    int leader = __builtin_ctz(gathered & members);
    for (uint32_t mm = gathered & members; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      if (in.op == Op::Elect)
        break;
      uint64_t v = read(w, in.ops[1], l);
      if (in.op == Op::Vote) {
        bool b = v != 0;
        all = all && b;
        any = any || b;
        if (first == ~0ull)
          first = b;
        uni = uni && (b == (first != 0));
        if (b)
          acc |= 1ull << l;
      } else {
        v = maskBits(v, 32);
        acc += v;
        smin = std::min<int64_t>(smin, signExtend(v, 32));
        smax = std::max<int64_t>(smax, signExtend(v, 32));
        umin = std::min(umin, v);
        umax = std::max(umax, v);
        andv &= v;
        orv |= v;
        xorv ^= v;
      }
    }
    for (uint32_t mm = gathered; mm; mm &= mm - 1) {
      int l = __builtin_ctz(mm);
      uint64_t r = 0;
      if (in.op == Op::Vote) {
        r = in.sub == SubOp::All   ? all
            : in.sub == SubOp::Any ? any
            : in.sub == SubOp::Uni ? uni
                                   : acc;
      } else if (in.op == Op::Redux) {
        bool sgn = isSignedInt(in.type);
        switch (in.sub) {
        case SubOp::Add: r = maskBits(acc, 32); break;
        case SubOp::Min: r = sgn ? maskBits(static_cast<uint64_t>(smin), 32) : umin; break;
        case SubOp::Max: r = sgn ? maskBits(static_cast<uint64_t>(smax), 32) : umax; break;
        case SubOp::And: r = maskBits(andv, 32); break;
        case SubOp::Or: r = orv; break;
        default: r = xorv; break;
        }
      } else { // elect: d|p
        const Operand &d = in.ops[0];
        if (d.kind == Operand::Vec && d.elems.size() == 2) {
          write(w, d.elems[0], l, static_cast<uint64_t>(leader));
          write(w, d.elems[1], l, l == leader);
        } else {
          write(w, d, l, l == leader);
        }
        ++w.pc[l];
        continue;
      }
      write(w, in.ops[0], l, r);
      ++w.pc[l];
    }
    advance(w, mask & ~active);
    return;
  }
  case Op::MbarInit:
    lanes([&](int l) {
      uint32_t addr;
      Cta &c = mbarrierCta(cta, w, in, in.ops[0], l, addr);
      uint32_t count = static_cast<uint32_t>(read(w, in.ops[1], l));
      if (count == 0 || count >= (1u << 20))
        fail(l, "mbarrier.init count " + std::to_string(count) +
                    " is outside [1, 2^20 - 1]");
      MBarrier b;
      b.pending = b.expected = count;
      c.mbars[addr] = b;
      if (c.races.enabled())
        c.races.slot(addr, true);
    });
    break;
  case Op::MbarArrive:
  case Op::MbarArriveDrop:
    lanes([&](int l) {
      uint32_t addr;
      Cta &c = mbarrierCta(cta, w, in, in.ops[1], l, addr);
      MBarrier &b = mbarrier(c, addr, l);
      uint32_t count = 1;
      if (in.flags & FInc) { // arrive.expect_tx: the operand is tx bytes
        if (in.ops.size() < 3)
          fail(l, "mbarrier.arrive.expect_tx needs a byte count");
        b.tx += static_cast<int64_t>(read(w, in.ops[2], l) & 0xFFFFFFFF);
      } else if (in.ops.size() > 2) {
        count = static_cast<uint32_t>(read(w, in.ops[2], l));
      }
      if (count > b.pending)
        fail(l, "mbarrier at " + hex(addr) + " gets " + std::to_string(count) +
                    " arrivals with only " + std::to_string(b.pending) +
                    " pending in its phase");
      write(w, in.ops[0], l, b.phase);
      if (&c == &cta && c.races.enabled())
        if (int s = c.races.slot(addr, false); s >= 0)
          c.races.release(tidOf(w, l), c.races.mbarrierAcc(s));
      b.pending -= count;
      if (in.op == Op::MbarArriveDrop)
        b.expected -= std::min(b.expected, count);
      completePhaseIfDone(c, addr, b);
    });
    break;
  case Op::MbarExpectTx:
  case Op::MbarCompleteTx:
    lanes([&](int l) {
      uint32_t addr;
      Cta &c = mbarrierCta(cta, w, in, in.ops[0], l, addr);
      MBarrier &b = mbarrier(c, addr, l);
      int64_t bytes = static_cast<int64_t>(read(w, in.ops[1], l) & 0xFFFFFFFF);
      b.tx += in.op == Op::MbarExpectTx ? bytes : -bytes;
      if (&c == &cta && c.races.enabled())
        if (int s = c.races.slot(addr, false); s >= 0)
          c.races.release(tidOf(w, l), c.races.mbarrierAcc(s));
      completePhaseIfDone(c, addr, b);
    });
    break;
  case Op::MbarTestWait:
  case Op::MbarTryWait: {
    uint32_t blocked = 0;
    lanes([&](int l) {
      uint32_t addr;
      Cta &c = mbarrierCta(cta, w, in, in.ops[1], l, addr);
      if (&c != &cta)
        fail(l, "waiting on another CTA's mbarrier");
      MBarrier &b = mbarrier(c, addr, l);
      uint64_t v = read(w, in.ops[2], l);
      bool done = (in.flags & FParity) ? ((b.phase & 1) != (v & 1))
                                       : (b.phase != static_cast<uint32_t>(v));
      if (done && c.races.enabled())
        if (int s = c.races.slot(addr, false); s >= 0)
          c.races.acquire(tidOf(w, l), c.races.mbarrierAcc(s));
      if (done || in.op == Op::MbarTestWait) {
        write(w, in.ops[0], l, done);
        if (!done)
          yieldFlag = true;
      } else {
        w.state[l] = AtMbarrier;
        w.wait[l] = (static_cast<uint64_t>(cta.rank) << 32) | addr;
        blocked |= 1u << l;
      }
    });
    advance(w, mask & ~blocked);
    return;
  }
  case Op::MbarInval:
    lanes([&](int l) {
      uint32_t addr;
      Cta &c = mbarrierCta(cta, w, in, in.ops[0], l, addr);
      c.mbars.erase(addr);
    });
    break;
  case Op::TmaLoad:
    lanes([&](int l) { tmaLoad(cta, w, in, l); });
    break;
  case Op::TmaStore:
    lanes([&](int l) { tmaStore(cta, w, in, l); });
    break;
  case Op::BulkCopy:
    lanes([&](int l) {
      // [dst], [src], size {, [mbar]}
      uint64_t dst = effectiveAddress(w, in.ops[0], l);
      uint64_t src = effectiveAddress(w, in.ops[1], l);
      uint32_t size = static_cast<uint32_t>(read(w, in.ops[2], l));
      if (size % 16 || dst % 16 || src % 16)
        fail(l, "cp.async.bulk needs 16-byte aligned addresses and sizes");
      if (in.space == Space::Shared) {
        uint8_t *d = resolve(cta, w, Space::SharedCluster, dst, size, l, 16);
        checkShared(cta, w, l, d, size, true);
        std::memcpy(d, resolve(cta, w, Space::Global, src, size, l, 16), size);
        uint32_t addr;
        Cta &c = mbarrierCta(cta, w, in, in.ops[3], l, addr);
        MBarrier &b = mbarrier(c, addr, l);
        if (&c == &cta && c.races.enabled())
          if (int s = c.races.slot(addr, false); s >= 0)
            c.races.release(tidOf(w, l), c.races.mbarrierAcc(s));
        b.tx -= size;
        completePhaseIfDone(c, addr, b);
      } else {
        uint8_t *from = resolve(cta, w, Space::Shared, src, size, l, 16);
        checkShared(cta, w, l, from, size, false);
        std::memcpy(resolve(cta, w, Space::Global, dst, size, l, 16), from,
                    size);
      }
    });
    break;
  case Op::CpAsync:
    lanes([&](int l) {
      uint64_t dst = effectiveAddress(w, in.ops[0], l);
      uint64_t src = effectiveAddress(w, in.ops[1], l);
      uint32_t size = static_cast<uint32_t>(read(w, in.ops[2], l));
      uint32_t srcSize = in.ops.size() > 3
                             ? static_cast<uint32_t>(read(w, in.ops[3], l))
                             : size;
      uint8_t *d = resolve(cta, w, Space::Shared, dst, size, l);
      checkShared(cta, w, l, d, size, true);
      std::memset(d, 0, size);
      if (srcSize)
        std::memcpy(d, resolve(cta, w, Space::Global, src, srcSize, l, size),
                    std::min(size, srcSize));
    });
    break;
  case Op::CpAsyncMbarArrive:
    lanes([&](int l) {
      uint32_t addr;
      Cta &c = mbarrierCta(cta, w, in, in.ops[0], l, addr);
      MBarrier &b = mbarrier(c, addr, l);
      if (!(in.flags & FInc)) { // .noinc: counts as an arrival
        if (b.pending == 0)
          fail(l, "cp.async.mbarrier.arrive.noinc with no arrival pending");
        --b.pending;
        completePhaseIfDone(c, addr, b);
      }
    });
    break;
  case Op::WgmmaMma: {
    // Lanes of a warp that branched apart may reach it at different times
    // (the lowest-PC order need not rejoin them first, where ptxas puts a
    // convergence barrier at the branches' join): the arriving lanes wait
    // for the rest of the warpgroup, and one that never comes is a
    // deadlock, reported with this line.
    if (active != mask)
      fail(-1, "wgmma.mma_async must be executed by all threads of the "
               "warpgroup, unpredicated");
    if (!gatherWarpgroup(cta, w, pc, mask))
      return;
    wgmma(cta, in, w.index / 4);
    releaseWarpgroup(cta, w.index / 4, true);
    return;
  }
  case Op::Setmaxnreg: {
    uint32_t count = static_cast<uint32_t>(in.ops[0].imm);
    if (count < 24 || count > 256 || count % 8)
      fail(-1, "setmaxnreg count " + std::to_string(count) +
                   " is not a multiple of 8 in [24, 256]");
    if (active != mask)
      fail(-1, "setmaxnreg must be executed by all threads of the "
               "warpgroup, unpredicated");
    if (!gatherWarpgroup(cta, w, pc, mask))
      return;
    uint32_t group = w.index / 4;
    uint32_t current = cta.warps[group * 4].nreg;
    bool inc = in.flags & FInc;
    if (current == 0 && opt.checks)
      fail(-1, std::string("setmaxnreg.") + (inc ? "inc " : "dec ") +
                   std::to_string(count) +
                   " in a kernel that pins no register count: ptxas gives "
                   "it as few registers per thread as its code needs, so "
                   "what setmaxnreg redistributes is unknown and an inc "
                   "may wait forever (give the kernel .minnctapersm 1, as "
                   "__launch_bounds__(threads, 1) does, or .maxnreg)");
    if (inc ? count < current : count > current)
      fail(-1, std::string("setmaxnreg.") + (inc ? "inc" : "dec") + " to " +
                   std::to_string(count) + " from " + std::to_string(current) +
                   " registers per thread");
    if (inc) {
      uint32_t used = 0;
      for (Warp &o : cta.warps)
        used += o.nreg * 32;
      uint32_t needed = (count - current) * 128;
      if (used + needed > kRegisterFile) {
        // Wait until other warpgroups release registers.
        bool others = false;
        for (Warp &o : cta.warps)
          for (int l = 0; l < 32; ++l)
            if (o.state[l] != Exited && o.state[l] != AtWarpgroup &&
                o.index / 4 != group)
              others = true;
        if (!others && opt.checks)
          fail(-1, "setmaxnreg.inc " + std::to_string(count) +
                       " cannot be satisfied: the CTA's warps hold " +
                       std::to_string(used) + " of " +
                       std::to_string(kRegisterFile) +
                       " registers and this warpgroup needs " +
                       std::to_string(needed) +
                       " more (the CTA starts with " +
                       std::to_string(initialRegs) +
                       " registers per thread for its " +
                       std::to_string(cta.threads) + " threads)");
        // Leave the lanes waiting; a later dec wakes them.
        for (uint32_t i = group * 4; i < group * 4 + 4; ++i)
          for (int l = 0; l < 32; ++l)
            cta.warps[i].state[l] = AtCollective;
        return;
      }
    }
    for (uint32_t i = group * 4; i < group * 4 + 4; ++i)
      cta.warps[i].nreg = count;
    releaseWarpgroup(cta, group, true);
    if (!inc)
      wakeRegisterWaiters(cta);
    return;
  }
  case Op::Ldmatrix:
  case Op::Stmatrix: {
    if (active != mask || mask != w.live)
      fail(-1, "ldmatrix/stmatrix must be executed by the whole warp");
    unsigned count = static_cast<unsigned>(in.shapeN);
    const Operand &regs = in.ops[0];
    if (regs.kind != Operand::Vec || regs.elems.size() != count)
      fail(-1, "ldmatrix/stmatrix .x" + std::to_string(count) + " needs " +
                   std::to_string(count) + " registers");
    bool trans = in.flags & FTrans;
    for (unsigned mat = 0; mat < count; ++mat) {
      // Rows of matrix `mat` come from lanes 8*mat .. 8*mat+7.
      uint8_t *rows[8];
      for (int r = 0; r < 8; ++r) {
        int src = static_cast<int>(mat) * 8 + r;
        uint64_t a = effectiveAddress(w, in.ops[1], src);
        rows[r] = resolve(cta, w, in.space, a, 16, src, 16);
        checkShared(cta, w, src, rows[r], 16, in.op == Op::Stmatrix);
      }
      for (int l = 0; l < 32; ++l) {
        int row = l / 4, col = (l % 4) * 2;
        uint16_t e[2] = {0, 0};
        for (int i = 0; i < 2; ++i) {
          int rr = trans ? col + i : row, cc = trans ? row : col + i;
          uint8_t *p = rows[rr] + cc * 2;
          if (in.op == Op::Ldmatrix) {
            std::memcpy(&e[i], p, 2);
          } else {
            uint32_t v = static_cast<uint32_t>(read(w, regs.elems[mat], l));
            uint16_t h = static_cast<uint16_t>(v >> (16 * i));
            std::memcpy(p, &h, 2);
          }
        }
        if (in.op == Op::Ldmatrix)
          write(w, regs.elems[mat], l,
                static_cast<uint64_t>(e[0]) | (static_cast<uint64_t>(e[1]) << 16));
      }
    }
    break;
  }
  case Op::Mapa:
    lanes([&](int l) {
      uint64_t a = read(w, in.ops[1], l);
      uint32_t rank = static_cast<uint32_t>(read(w, in.ops[2], l));
      if (rank >= ctas.size())
        fail(l, "mapa to CTA rank " + std::to_string(rank) +
                    " outside the cluster of " + std::to_string(ctas.size()));
      uint64_t off = (in.space == Space::Generic ? a & ~kWindowMask : a) &
                     0xFFFFFF;
      uint64_t r = (static_cast<uint64_t>(rank + 1) << 24) | off;
      if (in.space == Space::Generic)
        r |= kSharedWindow;
      write(w, in.ops[0], l, r);
    });
    break;
  case Op::Call: {
    if (!active)
      break;
    int l = __builtin_ctz(active);
    const Operand *callee = nullptr;
    const Operand *args = nullptr;
    for (const Operand &o : in.ops) {
      if (o.kind == Operand::Label && !callee)
        callee = &o;
      else if (o.kind == Operand::Vec && callee)
        args = &o;
    }
    if (!callee || callee->name != "__assertfail")
      fail(l, "function calls are not supported (call of '" +
                  (callee ? callee->name : std::string("?")) + "')");
    // __assertfail(message, file, line, function, size): read its
    // arguments back from the call's .param variables.
    auto arg = [&](size_t i, unsigned bytes) -> uint64_t {
      if (!args || i >= args->elems.size() || args->elems[i].kind != Operand::Sym)
        return 0;
      uint64_t v = 0;
      std::memcpy(&v, localPtr(w, symbolAddress(args->elems[i].sym), bytes, l),
                  bytes);
      return v;
    };
    auto text = [&](uint64_t addr) {
      std::string out;
      uint64_t start = 0, size = 0;
      if (!addr || !mem.find(addr, start, size))
        return std::string("?");
      for (uint64_t a = addr; a < start + size && out.size() < 512; ++a) {
        char c = *reinterpret_cast<const char *>(a);
        if (!c)
          break;
        out += c;
      }
      return out;
    };
    fail(l, "assertion failed: " + text(arg(0, 8)) + " (" + text(arg(1, 8)) +
                ":" + std::to_string(arg(2, 4)) + ", " + text(arg(3, 8)) + ")");
  }
  }
  advance(w, mask);
}

void Engine::initCta(Cta &cta, Dim3 id, uint32_t rank, uint64_t warpBase) {
  cta.id = id;
  cta.rank = rank;
  cta.linear = id.x + static_cast<uint64_t>(grid.x) * (id.y + static_cast<uint64_t>(grid.y) * id.z);
  cta.smem.assign(smemBytes, 0);
  cta.mbars.clear();
  if (opt.checks && smemBytes > 0)
    cta.races.reset(block.count(), smemBytes);
  else
    cta.races.disable();
  for (auto &b : cta.bars)
    b = Cta::Bar{};
  uint32_t threads = block.count();
  cta.threads = threads;
  cta.exited = 0;
  cta.warps.resize(warpsPerCta);
  size_t regsPerWarp = static_cast<size_t>(k.numRegs) * 32;
  size_t localPerWarp = static_cast<size_t>(k.localBytes) * 32;
  for (uint32_t wi = 0; wi < warpsPerCta; ++wi) {
    Warp &w = cta.warps[wi];
    w.index = wi;
    w.regs = regStore.data() + (warpBase + wi) * regsPerWarp;
    w.local = localStore.empty() ? nullptr
                                 : localStore.data() + (warpBase + wi) * localPerWarp;
    std::memset(w.regs, 0, regsPerWarp * sizeof(uint64_t));
    w.live = 0;
    w.nreg = initialRegs;
    Dim3 cdim = cluster;
    Dim3 nclusters{grid.x / cdim.x, grid.y / cdim.y, grid.z / cdim.z};
    for (int l = 0; l < 32; ++l) {
      uint32_t t = wi * 32 + l;
      w.pc[l] = 0;
      w.wait[l] = 0;
      w.cc[l] = 0;
      w.lastLoad = UINT32_MAX;
      if (t >= threads) {
        w.state[l] = Exited;
        continue;
      }
      w.live |= 1u << l;
      w.state[l] = Ready;
      uint64_t *r = w.regs;
      auto set = [&](int sr, uint64_t v) { r[sr * 32 + l] = v; };
      set(SrTidX, t % block.x);
      set(SrTidY, (t / block.x) % block.y);
      set(SrTidZ, t / (block.x * block.y));
      set(SrNtidX, block.x); set(SrNtidY, block.y); set(SrNtidZ, block.z);
      set(SrCtaidX, id.x); set(SrCtaidY, id.y); set(SrCtaidZ, id.z);
      set(SrNctaidX, grid.x); set(SrNctaidY, grid.y); set(SrNctaidZ, grid.z);
      set(SrLaneid, l);
      set(SrWarpid, wi);
      set(SrNwarpid, 64);
      set(SrSmid, cta.linear % opt.sms);
      set(SrNsmid, opt.sms);
      set(SrGridid, 1);
      // A cooperative grid's CTAs are clusters of one.
      set(SrClusterCtarank, opt.cooperative ? 0 : rank);
      set(SrClusterNctarank, cdim.count());
      set(SrClusterCtaidX, id.x % cdim.x);
      set(SrClusterCtaidY, id.y % cdim.y);
      set(SrClusterCtaidZ, id.z % cdim.z);
      set(SrClusterNctaidX, cdim.x); set(SrClusterNctaidY, cdim.y);
      set(SrClusterNctaidZ, cdim.z);
      set(SrClusteridX, id.x / cdim.x); set(SrClusteridY, id.y / cdim.y);
      set(SrClusteridZ, id.z / cdim.z);
      set(SrNclusteridX, nclusters.x); set(SrNclusteridY, nclusters.y);
      set(SrNclusteridZ, nclusters.z);
      set(SrLanemaskEq, 1u << l);
      set(SrLanemaskLt, (1u << l) - 1);
      set(SrLanemaskLe, l == 31 ? 0xFFFFFFFFu : (2u << l) - 1);
      set(SrLanemaskGt, l == 31 ? 0 : ~((2u << l) - 1) & 0xFFFFFFFFu);
      set(SrLanemaskGe, ~((1u << l) - 1) & 0xFFFFFFFFu);
      set(SrDynamicSmemSize, dynShared);
      set(SrTotalSmemSize, smemBytes);
    }
  }
}

std::string Engine::deadlockReport() {
  std::ostringstream os;
  os << m.name << ": kernel '" << k.name << "' deadlocked: no thread can "
     << "proceed";
  for (Cta &cta : ctas) {
    for (Warp &w : cta.warps) {
      // One line per group of lanes in the same state at the same pc.
      std::map<std::pair<uint32_t, std::pair<int, uint64_t>>, uint32_t> groups;
      for (int l = 0; l < 32; ++l)
        if (w.state[l] != Exited)
          groups[{w.pc[l], {w.state[l], w.wait[l]}}] |= 1u << l;
      for (auto &[key, lanes] : groups) {
        uint32_t pc = key.first;
        int state = key.second.first;
        uint64_t wait = key.second.second;
        const Instr &in = k.code[std::min<size_t>(pc, k.code.size() - 1)];
        os << "\n  CTA (" << cta.id.x << "," << cta.id.y << "," << cta.id.z
           << ") warp " << w.index << " lanes " << hex(lanes) << " at "
           << m.name << ":" << in.line << ": ";
        switch (state) {
        case AtBarrier: {
          const Cta::Bar &b = cta.bars[wait];
          uint32_t expected = b.expected ? b.expected : cta.threads - cta.exited;
          os << "waits at barrier " << wait << " (" << b.arrived << " of "
             << expected << " threads arrived)";
          break;
        }
        case AtMbarrier: {
          uint32_t addr = static_cast<uint32_t>(wait);
          auto it = cta.mbars.find(addr);
          os << "waits on the mbarrier at shared " << hex(addr);
          if (it != cta.mbars.end())
            os << " (phase " << it->second.phase << ", "
               << it->second.pending << " of " << it->second.expected
               << " arrivals pending, " << it->second.tx
               << " transaction bytes pending)";
          break;
        }
        case AtCollective:
          os << "waits for the other lanes of a warp collective (or for "
                "registers)";
          break;
        case AtWarpgroup:
          os << "waits for the rest of its warpgroup";
          break;
        case AtCluster:
          os << "waits at the cluster barrier";
          break;
        default:
          os << "ready";
        }
        os << "\n      " << in.text;
      }
    }
  }
  return os.str();
}

/// A hash of everything that decides what the cluster's threads do next,
/// memory aside: each lane's pc, state, wait, carry flag and registers.
uint64_t Engine::stateHash() const {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  auto mix = [&](uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  };
  size_t regsPerWarp = static_cast<size_t>(k.numRegs) * 32;
  for (const Cta &cta : ctas)
    for (const Warp &w : cta.warps) {
      for (int l = 0; l < 32; ++l) {
        mix(w.pc[l]);
        mix(static_cast<uint64_t>(w.state[l]) << 40 | w.cc[l]);
        mix(w.wait[l]);
      }
      for (size_t i = 0; i < regsPerWarp; ++i)
        mix(w.regs[i]);
    }
  return h;
}

/// The hang check. Once no thread has made progress (stored, arrived,
/// exited: see isPure) for kSpinWindow warp instructions, the memory
/// every thread reads is frozen, and the rounds of the scheduler are a
/// deterministic function of the threads' state: a state seen before at a
/// round's end means the threads go round that cycle for ever. That is
/// reported as a hang with each spinning warp's line, without waiting for
/// the instruction limit.
void Engine::spinCheck() {
  constexpr uint64_t kSpinWindow = 1u << 20;
  if (warpInstructions - lastProgress < kSpinWindow) {
    if (!spinStates.empty())
      spinStates.clear();
    peerWaitSince = {};
    return;
  }
  if (spinStates.insert(stateHash()).second) {
    if (spinStates.size() > 4096) // a cycle too long to wait for: start over
      spinStates.clear();
    return;
  }
  // A spin on memory another process writes (a peer's flag): the peer
  // ends it, so give it the processor and wait, up to the peer timeout.
  bool onPeer = false;
  for (Cta &cta : ctas)
    for (Warp &w : cta.warps) {
      if (w.lastLoad >= k.code.size())
        continue;
      const Instr &ld = k.code[w.lastLoad];
      for (int l = 0; l < 32 && !onPeer; ++l)
        if (w.state[l] == Ready && ld.ops.size() > 1 &&
            ld.ops[1].kind == Operand::Addr)
          onPeer = mem.isShared(effectiveAddress(w, ld.ops[1], l));
    }
  auto now = std::chrono::steady_clock::now();
  if (onPeer) {
    if (peerWaitSince == std::chrono::steady_clock::time_point{})
      peerWaitSince = now;
    double waited = std::chrono::duration<double>(now - peerWaitSince).count();
    if (waited < peerTimeoutSeconds()) {
      spinStates.clear();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      return;
    }
  }
  std::ostringstream os;
  if (onPeer)
    os << m.name << ": kernel '" << k.name << "' hangs: for "
       << static_cast<long>(
              peerWaitSince == now
                  ? 0
                  : std::chrono::duration<double>(now - peerWaitSince).count())
       << " s ($MOE_EMU_PEER_TIMEOUT) it waited for memory that another "
          "process shares, and no peer wrote it (a peer died, or waits "
          "itself)";
  else
    os << m.name << ": kernel '" << k.name << "' hangs: for "
       << warpInstructions - lastProgress
       << " warp instructions no thread stored, arrived at a barrier or "
          "exited, and the threads came back to a state they were in "
          "before, so nothing will change (a spin on memory that nothing "
          "writes)";
  for (Cta &cta : ctas)
    for (Warp &w : cta.warps) {
      uint32_t lanes = 0, pc = UINT32_MAX;
      for (int l = 0; l < 32; ++l)
        if (w.state[l] == Ready) {
          lanes |= 1u << l;
          pc = std::min(pc, w.pc[l]);
        }
      if (!lanes || pc >= k.code.size())
        continue;
      os << "\n  CTA (" << cta.id.x << "," << cta.id.y << "," << cta.id.z
         << ") warp " << w.index << " lanes " << hex(lanes) << " spin at "
         << m.name << ":" << k.code[pc].line << ": " << k.code[pc].text;
      if (w.lastLoad < k.code.size()) {
        const Instr &ld = k.code[w.lastLoad];
        os << "\n      reading at " << m.name << ":" << ld.line << ": "
           << ld.text;
        if (ld.ops.size() > 1 && ld.ops[1].kind == Operand::Addr)
          os << " (address "
             << hex(effectiveAddress(w, ld.ops[1], __builtin_ctz(lanes)))
             << ")";
      }
    }
  error = os.str();
  throw Fault{};
}

void Engine::runCluster(const std::vector<Dim3> &ids) {
  ctas.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    initCta(ctas[i], ids[i], static_cast<uint32_t>(i), i * warpsPerCta);
  clusterPhase = 0;
  clusterArrived = 0;
  lastProgress = warpInstructions;
  spinStates.clear();
  const uint32_t slice = 512;
  while (true) {
    bool ran = false, live = false;
    for (Cta &cta : ctas) {
      curCta = &cta;
      for (Warp &w : cta.warps) {
        curWarp = &w;
        bool traced = trace && static_cast<long>(cta.linear) == opt.traceCta &&
                      static_cast<int>(w.index) == opt.traceWarp;
        FILE *saved = trace;
        if (!traced)
          trace = nullptr;
        yieldFlag = false;
        for (uint32_t n = 0; n < slice && !yieldFlag; ++n) {
          // The ready lanes at the lowest pc run next (branch-free, so
          // the compiler vectorizes both passes).
          uint32_t key[32];
          for (int l = 0; l < 32; ++l)
            key[l] = w.state[l] == Ready ? w.pc[l] : UINT32_MAX;
          uint32_t minPc = UINT32_MAX, mask = 0;
          for (int l = 0; l < 32; ++l)
            minPc = std::min(minPc, key[l]);
          if (minPc == UINT32_MAX)
            break;
          for (int l = 0; l < 32; ++l)
            mask |= static_cast<uint32_t>(key[l] == minPc) << l;
          if (minPc >= k.code.size()) {
            curInstr = nullptr;
            fail(__builtin_ctz(mask), "ran past the end of the kernel "
                                      "without ret or exit");
          }
          ran = true;
          execute(cta, w, minPc, mask);
        }
        trace = saved;
        for (int l = 0; l < 32; ++l)
          if (w.state[l] != Exited)
            live = true;
      }
    }
    curWarp = nullptr;
    curInstr = nullptr;
    if (!live)
      break;
    if (!ran) {
      error = deadlockReport();
      throw Fault{};
    }
    spinCheck();
    if (warpInstructions > opt.instructionLimit) {
      curCta = nullptr;
      fail(-1, "stopped after " + std::to_string(warpInstructions) +
                   " warp instructions (a hang? raise MOE_EMU_INSTRUCTION_LIMIT)");
    }
  }
  if (opt.checks)
    for (Cta &cta : ctas)
      for (auto &[addr, b] : cta.mbars)
        if (b.tx > 0) {
          curCta = &cta;
          fail(-1, "the CTA exited while the mbarrier at shared " + hex(addr) +
                       " still expects " + std::to_string(b.tx) +
                       " transaction bytes that never arrived");
        }
}

LaunchResult Engine::run(LaunchStats *stats) {
  try {
    if (block.count() == 0 || block.count() > 1024)
      badLaunch("a CTA of " + std::to_string(block.count()) +
                " threads (1-1024)");
    if (grid.count() == 0)
      fail(-1, "an empty grid");
    uint32_t limit = maxThreads(k);
    if (limit && block.count() > limit)
      badLaunch("a CTA of " + std::to_string(block.count()) +
                " threads exceeds the kernel's .maxntid/.reqntid of " +
                std::to_string(limit));
    if (k.reqntid[0] && (block.x != k.reqntid[0] || block.y != k.reqntid[1] ||
                         block.z != k.reqntid[2]))
      fail(-1, "the CTA shape differs from the kernel's .reqntid");
    // A kernel compiled with .reqnctapercluster runs in clusters of that
    // shape under a launch that names none (cuLaunchKernel), as CUDA does.
    if (k.clusterDim[0] && cluster.count() == 1)
      cluster = {k.clusterDim[0], k.clusterDim[1], k.clusterDim[2]};
    if (k.clusterDim[0] && (cluster.x != k.clusterDim[0] ||
                            cluster.y != k.clusterDim[1] ||
                            cluster.z != k.clusterDim[2]))
      fail(-1, "the launch's cluster shape differs from the kernel's "
               ".reqnctapercluster");
    if (grid.x % cluster.x || grid.y % cluster.y || grid.z % cluster.z)
      fail(-1, "the grid is not a whole number of clusters");
    if (cluster.count() > 16)
      fail(-1, "a cluster of more than 16 CTAs");
    if (params.size() < k.paramBytes)
      fail(-1, "the launch passes " + std::to_string(params.size()) +
                   " parameter bytes; the kernel takes " +
                   std::to_string(k.paramBytes));
    uint32_t align = k.dynamicSharedAlign;
    dynBase = (k.staticShared + align - 1) / align * align;
    uint64_t total = static_cast<uint64_t>(dynBase) + dynShared;
    if (total > kMaxShared)
      badLaunch("the CTA needs " + std::to_string(total) +
                " bytes of shared memory (" + std::to_string(k.staticShared) +
                " static, " + std::to_string(dynShared) +
                " dynamic); sm_90 has " + std::to_string(kMaxShared));
    smemBytes = static_cast<uint32_t>(total);
    warpsPerCta = (block.count() + 31) / 32;
    // The CTA's registers per thread, where the kernel pins them: ptxas
    // gives at most .maxnreg, and with .minnctapersm N it may use as many
    // as N CTAs of this size leave (it does, for kernels that use
    // setmaxnreg). Otherwise the count is ptxas's choice, unknown here (0).
    initialRegs = 0;
    if (k.minnctapersm) {
      uint32_t byThreads = kRegisterFile / (k.minnctapersm * warpsPerCta * 32);
      initialRegs = std::min<uint32_t>(255, byThreads) / 8 * 8;
    }
    if (k.maxnreg)
      initialRegs = initialRegs ? std::min(initialRegs, k.maxnreg / 8 * 8)
                                : k.maxnreg / 8 * 8;
    if (opt.cooperative) {
      if (grid.count() > opt.sms)
        badLaunch("a cooperative grid of " + std::to_string(grid.count()) +
                  " CTAs does not fit the device's " + std::to_string(opt.sms) +
                  " SMs at once");
      if (cluster.count() > 1 || usesClusters())
        badLaunch("a cooperative launch of a kernel with clusters (the "
                  "emulator runs cooperative grids of single CTAs)");
    }
    // Every CTA of a cooperative grid at once, else a cluster's.
    size_t resident = opt.cooperative ? grid.count() : cluster.count();
    regStore.assign(resident * warpsPerCta * k.numRegs * 32, 0);
    localStore.assign(resident * warpsPerCta * 32 * k.localBytes, 0);
    if (opt.traceCta >= 0) {
      trace = opt.traceFile.empty() ? stderr
                                    : std::fopen(opt.traceFile.c_str(), "a");
      if (!trace)
        trace = stderr;
    }
    uint64_t ctasRun = 0;
    if (opt.cooperative) {
      std::vector<Dim3> ids;
      for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
          for (unsigned x = 0; x < grid.x; ++x)
            ids.push_back({x, y, z});
      runCluster(ids);
      ctasRun = ids.size();
    }
    for (unsigned cz = 0; cz < grid.z && !opt.cooperative; cz += cluster.z)
      for (unsigned cy = 0; cy < grid.y; cy += cluster.y)
        for (unsigned cx = 0; cx < grid.x; cx += cluster.x) {
          std::vector<Dim3> ids;
          for (unsigned z = 0; z < cluster.z; ++z)
            for (unsigned y = 0; y < cluster.y; ++y)
              for (unsigned x = 0; x < cluster.x; ++x)
                ids.push_back({cx + x, cy + y, cz + z});
          runCluster(ids);
          ctasRun += ids.size();
        }
    if (trace && trace != stderr)
      std::fclose(trace);
    if (stats) {
      stats->warpInstructions += warpInstructions;
      stats->threadInstructions += threadInstructions;
      stats->ctas += ctasRun;
    }
  } catch (const Fault &) {
    if (trace && trace != stderr)
      std::fclose(trace);
    return {failure, error};
  }
  return {};
}

} // namespace

LaunchResult launch(const Module &module, const Kernel &kernel, Dim3 grid,
                    Dim3 block, Dim3 cluster, uint32_t dynamicShared,
                    const std::vector<uint8_t> &params, GlobalMemory &memory,
                    const LaunchOptions &options, LaunchStats *stats) {
  Engine e(module, kernel, grid, block, cluster, dynamicShared, params, memory,
           options);
  return e.run(stats);
}

} // namespace moe::emu
