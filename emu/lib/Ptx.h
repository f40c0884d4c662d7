//===- Ptx.h - The PTX emulator's decoded program ---------------*- C++ -*-===//
//
// Part of moe-compiler's PTX emulator (private). A module's text is parsed
// once into kernels of decoded instructions: every opcode, type, modifier,
// register, label and symbol is resolved at load time, so the interpreter
// never looks at text again.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_EMU_LIB_PTX_H
#define MOE_EMU_LIB_PTX_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moe::emu {

/// PTX fundamental types, as instruction suffixes name them.
enum class Ty : uint8_t {
  None,
  Pred,
  B8, B16, B32, B64, B128,
  U8, U16, U32, U64,
  S8, S16, S32, S64,
  F16, F16x2, BF16, BF16x2, F32, F64, TF32,
  E4M3, E5M2, E4M3x2, E5M2x2,
};

/// Width in bits, signedness and floatness of each type, by its enum value.
constexpr uint8_t kTyBits[] = {0, 1, 8, 16, 32, 64, 128, 8, 16, 32, 64, 8,
                               16, 32, 64, 16, 32, 16, 32, 32, 64, 32, 8, 8,
                               16, 16};
inline unsigned bitsOf(Ty t) { return kTyBits[static_cast<int>(t)]; }
inline bool isSignedInt(Ty t) {
  return t == Ty::S8 || t == Ty::S16 || t == Ty::S32 || t == Ty::S64;
}
inline bool isFloat(Ty t) {
  return t >= Ty::F16 && t <= Ty::TF32;
}
const char *tyName(Ty t);

/// State spaces of memory instructions and variables.
enum class Space : uint8_t { Generic, Global, Shared, SharedCluster, Param,
                             Local, Const };

/// Special registers: each has a fixed slot at the start of every thread's
/// register file, filled when the thread starts (the clocks when read).
enum Special : int {
  SrTidX, SrTidY, SrTidZ, SrNtidX, SrNtidY, SrNtidZ,
  SrCtaidX, SrCtaidY, SrCtaidZ, SrNctaidX, SrNctaidY, SrNctaidZ,
  SrLaneid, SrWarpid, SrNwarpid, SrSmid, SrNsmid, SrGridid,
  SrClusterCtarank, SrClusterNctarank,
  SrClusterCtaidX, SrClusterCtaidY, SrClusterCtaidZ,
  SrClusterNctaidX, SrClusterNctaidY, SrClusterNctaidZ,
  SrClusteridX, SrClusteridY, SrClusteridZ,
  SrNclusteridX, SrNclusteridY, SrNclusteridZ,
  SrLanemaskEq, SrLanemaskLt, SrLanemaskLe, SrLanemaskGt, SrLanemaskGe,
  SrDynamicSmemSize, SrTotalSmemSize,
  SrClock, SrClock64, SrGlobaltimer,
  kNumSpecial
};

struct Operand {
  enum Kind : uint8_t {
    None,
    Reg,   // reg
    Imm,   // imm (the literal's bits; isFloatLiteral for 0f/0d/decimal)
    Addr,  // [reg + offset] or [symbol + offset] or [offset]
    Vec,   // {elems...}
    Sym,   // a variable's address (mov, cvta) or a function
    Label, // target: instruction index
    Sink,  // _
    Tensor // [reg, {coords}]: a tensor map and coordinates
  };
  Kind kind = None;
  bool isFloatLiteral = false;
  bool negated = false; // !%p: a predicate read negated
  bool isDoubleLiteral = false;
  int32_t reg = -1;
  int32_t sym = -1; // index into Module::symbols
  int64_t offset = 0;
  uint64_t imm = 0;
  int32_t target = -1;
  std::vector<Operand> elems;
  std::string name; // a label's or callee's name
};

enum class Op : uint16_t {
  Mov, Add, Sub, Mul, Mad, Fma, Div, Rem, Abs, Neg, Min, Max,
  And, Or, Xor, Not, Cnot, Shl, Shr, Bfe, Bfi, Brev, Popc, Clz, Prmt,
  Selp, Setp, Cvt, Cvta, Rcp, Sqrt, Rsqrt, Ex2, Lg2, Sin, Cos, Tanh,
  Copysign, Testp, Mul24, Mad24, Sad,
  Ld, St, Atom, Red, Prefetch,
  Bra, Ret, Exit, Call, Trap, Brkpt, Nanosleep,
  BarSync, BarArrive, BarRed, Membar, Fence,
  Shfl, Vote, Redux, Elect, Activemask, Match,
  MbarInit, MbarArrive, MbarArriveDrop, MbarExpectTx, MbarCompleteTx,
  MbarTestWait, MbarTryWait, MbarInval,
  TmaLoad, TmaStore, TmaPrefetch, BulkCommit, BulkWait, BulkCopy,
  CpAsync, CpAsyncCommit, CpAsyncWait, CpAsyncMbarArrive,
  WgmmaFence, WgmmaCommit, WgmmaWait, WgmmaMma,
  Ldmatrix, Stmatrix, Setmaxnreg, Griddepcontrol, Mapa, BarCluster,
  Isspacep, Nop,
  WarpSync, Shf, Bfind, Dp4a, Vabsdiff4, MmaSync,
};

/// Comparison operators of setp/set.
enum class Cmp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, Lo, Ls, Hi, Hs,
                           Equ, Neu, Ltu, Leu, Gtu, Geu, Num, Nan };

/// Modifier flags.
enum Flag : uint32_t {
  FRn = 1u << 0, FRz = 1u << 1, FRm = 1u << 2, FRp = 1u << 3,
  FRni = 1u << 4, FRzi = 1u << 5, FRmi = 1u << 6, FRpi = 1u << 7,
  FFtz = 1u << 8, FSat = 1u << 9, FApprox = 1u << 10, FFull = 1u << 11,
  FLo = 1u << 12, FHi = 1u << 13, FWide = 1u << 14, FUni = 1u << 15,
  FNc = 1u << 16, FTo = 1u << 17, FCc = 1u << 18, FRelu = 1u << 19,
  FShiftClamp = 1u << 20, FParity = 1u << 21, FNoCount = 1u << 22,
  FAligned = 1u << 23, FNaN = 1u << 24, FXorsign = 1u << 25,
  FAbsMod = 1u << 26, FMulticast = 1u << 27, FIm2col = 1u << 28,
  FTrans = 1u << 29, FInc = 1u << 30,
  FCarryIn = 1u << 31, // addc, subc, madc: add the carry (or borrow) flag
};

/// Sub-operations of atom/red/redux/vote/shfl/bar.red/setp's bool op.
enum class SubOp : uint8_t { None, Add, Min, Max, Inc, Dec, And, Or, Xor,
                             Exch, Cas, All, Any, Uni, Ballot, Popc, Up,
                             Down, Bfly, Idx, Arrive, Wait,
                             // shf's direction; bfind's .shiftamt;
                             // vabsdiff4's secondary .add
                             Left, Right, ShiftAmt, AbsDiffAdd };

struct Instr {
  Op op = Op::Nop;
  Ty type = Ty::None; // the (destination) type
  Ty type2 = Ty::None; // cvt's source type, wgmma's input type
  Ty type3 = Ty::None;
  Space space = Space::Generic;
  Cmp cmp = Cmp::Eq;
  SubOp sub = SubOp::None; // atom op, setp's bool op, shfl mode...
  SubOp sub2 = SubOp::None;
  uint8_t vec = 1;           // .v2/.v4/.v8
  uint32_t flags = 0;
  int32_t guard = -1;        // predicate register, or -1
  bool guardNeg = false;
  int32_t line = 0;          // PTX source line
  // wgmma: M, N, K of the shape; ld/st: tensor rank; ldmatrix: count.
  int32_t shapeM = 0, shapeN = 0, shapeK = 0;
  uint8_t fast = 0; // the interpreter's fast path for this instruction, or 0
  bool pure = false; // changes nothing another thread sees (the hang check)
  std::vector<Operand> ops;
  std::string text; // the instruction as written, for reports
};

/// A variable of the module or of a kernel (shared, global, const, local).
struct Symbol {
  std::string name;
  Space space = Space::Global;
  uint32_t align = 1;
  uint64_t bytes = 0;
  bool external = false; // .extern .shared: the dynamic shared memory
  std::vector<uint8_t> init; // initializer of .global/.const variables
  // Shared/local: the offset in the CTA's or thread's window, laid out per
  // kernel; global/const: the address of its storage.
  uint64_t address = 0;
  int32_t kernel = -1; // declared inside this kernel, or -1 (module)
};

struct Param {
  std::string name;
  uint32_t bytes = 0;
  uint32_t align = 1;
  uint32_t offset = 0;
  bool isTensorMap = false; // .param .align 64 .b8 x[128]
};

struct Kernel {
  std::string name;
  bool isEntry = true;
  std::vector<Param> params;
  uint32_t paramBytes = 0;
  std::vector<Instr> code;
  uint32_t numRegs = kNumSpecial;
  // Shared memory: static variables first, then the dynamic window.
  uint32_t staticShared = 0;
  uint32_t dynamicSharedAlign = 16;
  int32_t dynamicSharedSym = -1;
  uint32_t localBytes = 0;
  uint32_t maxntid[3] = {0, 0, 0};
  uint32_t reqntid[3] = {0, 0, 0};
  uint32_t clusterDim[3] = {0, 0, 0};
  uint32_t minnctapersm = 0;
  uint32_t maxnreg = 0;
  int32_t line = 0;
};

struct Module {
  std::string name; // for reports
  std::string version, target;
  std::vector<Kernel> kernels;
  std::vector<Symbol> symbols;
  std::map<std::string, int32_t> kernelIndex;
  // Storage of module-scope .global/.const variables.
  std::vector<std::unique_ptr<uint8_t[]>> storage;
};

/// Parses a PTX module. On error returns null and sets `error` to
/// "<name>:<line>: <what>".
std::unique_ptr<Module> parseModule(const std::string &text,
                                    const std::string &name,
                                    std::string &error);

} // namespace moe::emu

#endif // MOE_EMU_LIB_PTX_H
