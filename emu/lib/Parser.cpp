//===- Parser.cpp - PTX text to decoded kernels ----------------------------===//
//
// Part of moe-compiler's PTX emulator. A hand-written tokenizer and
// recursive-descent parser for the PTX that CUDA 13 documents, as far as
// compilers emit it: module directives, variables, entry functions with
// their parameters and performance directives, nested scopes (inline
// assembly declares registers and labels of its own), guarded
// instructions. Every opcode is decoded here; anything unknown is an error
// naming the line and the instruction.
//
//===----------------------------------------------------------------------===//

#include "Ptx.h"

#include <cctype>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>

namespace moe::emu {

const char *tyName(Ty t) {
  static const char *names[] = {
      "none", "pred", "b8",  "b16", "b32",   "b64",  "b128", "u8",
      "u16",  "u32",  "u64", "s8",  "s16",   "s32",  "s64",  "f16",
      "f16x2", "bf16", "bf16x2", "f32", "f64", "tf32", "e4m3", "e5m2",
      "e4m3x2", "e5m2x2"};
  return names[static_cast<int>(t)];
}

namespace {

struct ParseError : std::runtime_error {
  int line;
  ParseError(int line, const std::string &what)
      : std::runtime_error(what), line(line) {}
};

struct Token {
  enum Kind { Ident, Number, Punct, String, End } kind;
  std::string text;
  int line;
};

bool isIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' ||
         c == '%' || c == '.';
}
bool isIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' ||
         c == '.';
}

std::vector<Token> tokenize(const std::string &s) {
  std::vector<Token> out;
  int line = 1;
  size_t i = 0, n = s.size();
  while (i < n) {
    char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n')
        ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) {
        if (s[i] == '\n')
          ++line;
        ++i;
      }
      if (i + 1 >= n)
        throw ParseError(line, "unterminated comment");
      i += 2;
      continue;
    }
    if (c == '"') {
      size_t j = i + 1;
      while (j < n && s[j] != '"' && s[j] != '\n')
        ++j;
      if (j >= n || s[j] != '"')
        throw ParseError(line, "unterminated string");
      out.push_back({Token::String, s.substr(i + 1, j - i - 1), line});
      i = j + 1;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < n && (std::isalnum(static_cast<unsigned char>(s[j])) ||
                       s[j] == '.' ||
                       ((s[j] == '-' || s[j] == '+') && j > i &&
                        (s[j - 1] == 'e' || s[j - 1] == 'E') &&
                        !(s[i] == '0' && i + 1 < n &&
                          (s[i + 1] == 'x' || s[i + 1] == 'X' ||
                           s[i + 1] == 'f' || s[i + 1] == 'F' ||
                           s[i + 1] == 'd' || s[i + 1] == 'D')))))
        ++j;
      out.push_back({Token::Number, s.substr(i, j - i), line});
      i = j;
      continue;
    }
    if (isIdentStart(c)) {
      size_t j = i + 1;
      while (j < n) {
        if (isIdentChar(s[j])) {
          ++j;
        } else if (s[j] == ':' && j + 1 < n && s[j + 1] == ':') {
          j += 2;
        } else {
          break;
        }
      }
      out.push_back({Token::Ident, s.substr(i, j - i), line});
      i = j;
      continue;
    }
    if (std::strchr(",;{}[]()<>+-@!:=|", c)) {
      out.push_back({Token::Punct, std::string(1, c), line});
      ++i;
      continue;
    }
    throw ParseError(line, std::string("unexpected character '") + c + "'");
  }
  out.push_back({Token::End, "", line});
  return out;
}

bool parseInteger(const std::string &t, uint64_t &value) {
  std::string s = t;
  if (!s.empty() && (s.back() == 'U' || s.back() == 'u'))
    s.pop_back();
  if (s.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    value = std::strtoull(s.c_str() + 2, &end, 16);
  else if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B'))
    value = std::strtoull(s.c_str() + 2, &end, 2);
  else if (s.size() > 1 && s[0] == '0')
    value = std::strtoull(s.c_str(), &end, 8);
  else
    value = std::strtoull(s.c_str(), &end, 10);
  return errno == 0 && end && *end == 0;
}

Ty parseTy(const std::string &s) {
  static const std::map<std::string, Ty> types = {
      {"pred", Ty::Pred},   {"b8", Ty::B8},       {"b16", Ty::B16},
      {"b32", Ty::B32},     {"b64", Ty::B64},     {"b128", Ty::B128},
      {"u8", Ty::U8},       {"u16", Ty::U16},     {"u32", Ty::U32},
      {"u64", Ty::U64},     {"s8", Ty::S8},       {"s16", Ty::S16},
      {"s32", Ty::S32},     {"s64", Ty::S64},     {"f16", Ty::F16},
      {"f16x2", Ty::F16x2}, {"bf16", Ty::BF16},   {"bf16x2", Ty::BF16x2},
      {"f32", Ty::F32},     {"f64", Ty::F64},     {"tf32", Ty::TF32},
      {"e4m3", Ty::E4M3},   {"e5m2", Ty::E5M2},   {"e4m3x2", Ty::E4M3x2},
      {"e5m2x2", Ty::E5M2x2}};
  auto it = types.find(s);
  return it == types.end() ? Ty::None : it->second;
}

struct Scope {
  int parent = -1;
  std::map<std::string, int> regs;
  std::map<std::string, std::pair<int, int>> ranges; // prefix -> base, count
  std::map<std::string, int> labels;
  std::map<std::string, int> symbols; // kernel-local variables
};

struct PendingLabel {
  int instr, operand, scope;
  std::string name;
};

class Parser {
public:
  Parser(const std::string &text, Module &m) : tokens(tokenize(text)), m(m) {}

  void run() {
    while (peek().kind != Token::End)
      topLevel();
  }

private:
  std::vector<Token> tokens;
  size_t pos = 0;
  Module &m;
  // Per kernel.
  Kernel *k = nullptr;
  std::vector<Scope> scopes;
  int scope = -1;
  std::vector<PendingLabel> pending;

  const Token &peek(size_t ahead = 0) const {
    size_t i = std::min(pos + ahead, tokens.size() - 1);
    return tokens[i];
  }
  const Token &next() {
    const Token &t = tokens[pos];
    if (pos + 1 < tokens.size())
      ++pos;
    return t;
  }
  bool accept(const char *punct) {
    if (peek().kind == Token::Punct && peek().text == punct) {
      next();
      return true;
    }
    return false;
  }
  void expect(const char *punct) {
    if (!accept(punct))
      fail("expected '" + std::string(punct) + "', found '" + peek().text +
           "'");
  }
  [[noreturn]] void fail(const std::string &what) const {
    throw ParseError(peek().line, what);
  }
  bool isWord(const char *w) const {
    return peek().kind == Token::Ident && peek().text == w;
  }
  uint64_t integer() {
    bool neg = accept("-");
    const Token &t = next();
    uint64_t v = 0;
    if (t.kind != Token::Number || !parseInteger(t.text, v))
      throw ParseError(t.line, "expected an integer, found '" + t.text + "'");
    return neg ? -v : v;
  }
  std::string ident() {
    const Token &t = next();
    if (t.kind != Token::Ident)
      throw ParseError(t.line, "expected a name, found '" + t.text + "'");
    return t.text;
  }
  void skipStatement() {
    int depth = 0;
    while (peek().kind != Token::End) {
      const Token &t = next();
      if (t.kind == Token::Punct) {
        if (t.text == "{")
          ++depth;
        else if (t.text == "}") {
          if (--depth <= 0)
            return;
        } else if (t.text == ";" && depth == 0)
          return;
      }
    }
  }

  void topLevel() {
    const Token &t = peek();
    if (t.kind == Token::Punct && t.text == ";") {
      next();
      return;
    }
    if (t.kind != Token::Ident)
      fail("unexpected '" + t.text + "' at module scope");
    if (t.text == ".version") {
      next();
      m.version = next().text;
      return;
    }
    if (t.text == ".target") {
      next();
      m.target = ident();
      while (accept(","))
        ident();
      return;
    }
    if (t.text == ".address_size") {
      next();
      if (integer() != 64)
        fail("only .address_size 64 is supported");
      return;
    }
    if (t.text == ".file" || t.text == ".loc" || t.text == ".pragma" ||
        t.text == ".section") {
      skipStatement();
      return;
    }
    bool visible = false, external = false;
    while (isWord(".visible") || isWord(".extern") || isWord(".weak") ||
           isWord(".common")) {
      external = external || peek().text == ".extern";
      visible = true;
      next();
    }
    (void)visible;
    if (isWord(".entry") || isWord(".func")) {
      function(external);
      return;
    }
    if (isWord(".global") || isWord(".shared") || isWord(".const")) {
      variable(external, -1);
      return;
    }
    fail("unknown module-level directive '" + peek().text + "'");
  }

  /// [.align N] .type name[dims] [= init] ;  (the space already peeked)
  void variable(bool external, int kernel) {
    Symbol s;
    std::string space = ident();
    s.space = space == ".global"   ? Space::Global
              : space == ".shared" ? Space::Shared
              : space == ".const"  ? Space::Const
                                   : Space::Local; // .local, a call's .param
    s.external = external;
    s.kernel = kernel;
    Ty ty = Ty::B8;
    unsigned vec = 1;
    while (peek().kind == Token::Ident && peek().text[0] == '.') {
      std::string d = ident();
      if (d == ".align")
        s.align = static_cast<uint32_t>(integer());
      else if (d == ".v2" || d == ".v4" || d == ".v8")
        vec = d[2] - '0';
      else if (d == ".ptr" || d == ".global" || d == ".shared")
        continue;
      else if (Ty t = parseTy(d.substr(1)); t != Ty::None)
        ty = t;
      else
        fail("unknown variable attribute '" + d + "'");
    }
    s.name = ident();
    uint64_t count = 1;
    bool unsized = false;
    while (accept("[")) {
      if (accept("]")) {
        unsized = true;
        continue;
      }
      count *= integer();
      expect("]");
    }
    unsigned elem = std::max(1u, bitsOf(ty) / 8) * vec;
    s.bytes = unsized ? 0 : count * elem;
    if (s.align < elem && !unsized)
      s.align = std::max<uint32_t>(s.align, 1);
    if (accept("=")) {
      std::vector<uint64_t> values;
      std::function<void()> item = [&]() {
        if (accept("{")) {
          if (!accept("}")) {
            do
              item();
            while (accept(","));
            expect("}");
          }
          return;
        }
        if (peek().kind == Token::Ident) {
          // An address of another variable (generic(x) or x): unsupported.
          fail("variable initializers that take addresses are not supported");
        }
        values.push_back(integer());
      };
      item();
      if (unsized)
        s.bytes = values.size() * elem;
      s.init.assign(s.bytes, 0);
      for (size_t i = 0; i < values.size() && (i + 1) * elem <= s.bytes; ++i)
        std::memcpy(s.init.data() + i * elem, &values[i],
                    std::min<size_t>(elem, 8));
    }
    expect(";");
    if (s.space == Space::Shared && unsized)
      s.external = true;
    if (s.space == Space::Global || s.space == Space::Const) {
      auto storage = std::make_unique<uint8_t[]>(std::max<uint64_t>(s.bytes, 1));
      std::memset(storage.get(), 0, std::max<uint64_t>(s.bytes, 1));
      if (!s.init.empty())
        std::memcpy(storage.get(), s.init.data(), s.bytes);
      s.address = reinterpret_cast<uint64_t>(storage.get());
      m.storage.push_back(std::move(storage));
    }
    int index = static_cast<int>(m.symbols.size());
    m.symbols.push_back(std::move(s));
    if (kernel >= 0)
      scopes[scope].symbols[m.symbols.back().name] = index;
  }

  void function(bool external) {
    bool isEntry = next().text == ".entry";
    Kernel kernel;
    kernel.isEntry = isEntry;
    kernel.line = peek().line;
    if (!isEntry && accept("(")) {
      // Return parameters of a .func: not supported beyond parsing.
      while (!accept(")"))
        next();
    }
    kernel.name = ident();
    if (accept("(")) {
      if (!accept(")")) {
        do
          kernel.params.push_back(param(kernel));
        while (accept(","));
        expect(")");
      }
    }
    while (peek().kind == Token::Ident && peek().text[0] == '.') {
      std::string d = ident();
      auto dims = [&](uint32_t *out) {
        out[0] = static_cast<uint32_t>(integer());
        out[1] = out[2] = 1;
        if (accept(",")) {
          out[1] = static_cast<uint32_t>(integer());
          if (accept(","))
            out[2] = static_cast<uint32_t>(integer());
        }
      };
      if (d == ".maxntid")
        dims(kernel.maxntid);
      else if (d == ".reqntid")
        dims(kernel.reqntid);
      else if (d == ".reqnctapercluster")
        dims(kernel.clusterDim);
      else if (d == ".minnctapersm")
        kernel.minnctapersm = static_cast<uint32_t>(integer());
      else if (d == ".maxnreg")
        kernel.maxnreg = static_cast<uint32_t>(integer());
      else if (d == ".maxclusterrank" || d == ".maxnctapersm")
        integer();
      else if (d == ".explicitcluster" || d == ".noreturn")
        continue;
      else if (d == ".pragma") {
        next();
        expect(";");
      } else
        fail("unknown performance directive '" + d + "'");
    }
    if (accept(";")) // a declaration (prototype)
      return;
    if (external)
      fail("an .extern function cannot have a body");
    int index = static_cast<int>(m.kernels.size());
    if (m.kernelIndex.count(kernel.name))
      fail("function '" + kernel.name + "' is defined twice");
    m.kernels.push_back(std::move(kernel));
    m.kernelIndex[m.kernels.back().name] = index;
    k = &m.kernels.back();
    scopes.clear();
    pending.clear();
    expect("{");
    openScope();
    body(index);
    resolveLabels();
    layoutShared(index);
    k = nullptr;
  }

  Param param(Kernel &kernel) {
    const Token &t = next();
    if (t.text != ".param" && t.text != ".reg")
      throw ParseError(t.line, "expected '.param', found '" + t.text + "'");
    Param p;
    Ty ty = Ty::None;
    while (peek().kind == Token::Ident && peek().text[0] == '.') {
      std::string d = ident();
      if (d == ".align")
        p.align = static_cast<uint32_t>(integer());
      else if (d == ".ptr" || d == ".global" || d == ".shared" ||
               d == ".const" || d == ".local")
        continue;
      else if (Ty t2 = parseTy(d.substr(1)); t2 != Ty::None)
        ty = t2;
      else
        fail("unknown parameter attribute '" + d + "'");
    }
    if (ty == Ty::None)
      fail("a parameter needs a type");
    p.name = ident();
    uint64_t count = 1;
    while (accept("[")) {
      count *= integer();
      expect("]");
    }
    unsigned elem = std::max(1u, bitsOf(ty) / 8);
    p.bytes = static_cast<uint32_t>(count * elem);
    p.align = std::max(p.align, elem);
    p.isTensorMap = p.bytes == 128 && p.align >= 64;
    kernel.paramBytes = (kernel.paramBytes + p.align - 1) / p.align * p.align;
    p.offset = kernel.paramBytes;
    kernel.paramBytes += p.bytes;
    return p;
  }

  void openScope() {
    Scope s;
    s.parent = scope;
    scopes.push_back(std::move(s));
    scope = static_cast<int>(scopes.size()) - 1;
  }

  int declareReg() { return static_cast<int>(k->numRegs++); }

  void regDecl() {
    Ty ty = Ty::None;
    while (peek().kind == Token::Ident && peek().text[0] == '.') {
      std::string d = ident();
      if (d == ".v2" || d == ".v4")
        fail("vector registers are not supported");
      ty = parseTy(d.substr(1));
      if (ty == Ty::None)
        fail("unknown register type '" + d + "'");
    }
    do {
      std::string name = ident();
      if (accept("<")) {
        int count = static_cast<int>(integer());
        expect(">");
        int base = static_cast<int>(k->numRegs);
        for (int i = 0; i < count; ++i)
          declareReg();
        scopes[scope].ranges[name] = {base, count};
      } else {
        scopes[scope].regs[name] = declareReg();
      }
    } while (accept(","));
    expect(";");
  }

  int lookupReg(const std::string &name) const {
    for (int s = scope; s >= 0; s = scopes[s].parent) {
      auto it = scopes[s].regs.find(name);
      if (it != scopes[s].regs.end())
        return it->second;
      size_t digits = name.size();
      while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1])))
        --digits;
      if (digits < name.size() && digits > 0) {
        auto r = scopes[s].ranges.find(name.substr(0, digits));
        if (r != scopes[s].ranges.end()) {
          // No leading zeros: %r01 is not %r1.
          if (name.size() - digits > 1 && name[digits] == '0')
            continue;
          long index = std::stol(name.substr(digits));
          if (index < r->second.second)
            return r->second.first + static_cast<int>(index);
        }
      }
    }
    return -1;
  }

  int lookupSymbol(const std::string &name) const {
    for (int s = scope; s >= 0; s = scopes[s].parent) {
      auto it = scopes[s].symbols.find(name);
      if (it != scopes[s].symbols.end())
        return it->second;
    }
    for (size_t i = 0; i < m.symbols.size(); ++i)
      if (m.symbols[i].kernel < 0 && m.symbols[i].name == name)
        return static_cast<int>(i);
    return -1;
  }

  int specialReg(const std::string &n) const {
    static const std::map<std::string, int> specials = {
        {"%tid.x", SrTidX}, {"%tid.y", SrTidY}, {"%tid.z", SrTidZ},
        {"%ntid.x", SrNtidX}, {"%ntid.y", SrNtidY}, {"%ntid.z", SrNtidZ},
        {"%ctaid.x", SrCtaidX}, {"%ctaid.y", SrCtaidY},
        {"%ctaid.z", SrCtaidZ}, {"%nctaid.x", SrNctaidX},
        {"%nctaid.y", SrNctaidY}, {"%nctaid.z", SrNctaidZ},
        {"%laneid", SrLaneid}, {"%warpid", SrWarpid},
        {"%nwarpid", SrNwarpid}, {"%smid", SrSmid}, {"%nsmid", SrNsmid},
        {"%gridid", SrGridid}, {"%cluster_ctarank", SrClusterCtarank},
        {"%cluster_nctarank", SrClusterNctarank},
        {"%cluster_ctaid.x", SrClusterCtaidX},
        {"%cluster_ctaid.y", SrClusterCtaidY},
        {"%cluster_ctaid.z", SrClusterCtaidZ},
        {"%cluster_nctaid.x", SrClusterNctaidX},
        {"%cluster_nctaid.y", SrClusterNctaidY},
        {"%cluster_nctaid.z", SrClusterNctaidZ},
        {"%clusterid.x", SrClusteridX}, {"%clusterid.y", SrClusteridY},
        {"%clusterid.z", SrClusteridZ}, {"%nclusterid.x", SrNclusteridX},
        {"%nclusterid.y", SrNclusteridY}, {"%nclusterid.z", SrNclusteridZ},
        {"%lanemask_eq", SrLanemaskEq}, {"%lanemask_lt", SrLanemaskLt},
        {"%lanemask_le", SrLanemaskLe}, {"%lanemask_gt", SrLanemaskGt},
        {"%lanemask_ge", SrLanemaskGe},
        {"%dynamic_smem_size", SrDynamicSmemSize},
        {"%total_smem_size", SrTotalSmemSize}, {"%clock", SrClock},
        {"%clock64", SrClock64}, {"%globaltimer", SrGlobaltimer},
        {"%globaltimer_lo", SrGlobaltimer}};
    auto it = specials.find(n);
    return it == specials.end() ? -1 : it->second;
  }

  Operand operand(int instrIndex, int operandIndex) {
    Operand o;
    if (accept("[")) {
      o.kind = Operand::Addr;
      if (peek().kind == Token::Number || (peek().kind == Token::Punct &&
                                           peek().text == "-")) {
        o.offset = static_cast<int64_t>(integer());
        expect("]");
        return o;
      }
      std::string name = ident();
      int r = lookupReg(name);
      if (r < 0 && name[0] == '%')
        r = specialReg(name);
      if (r >= 0) {
        o.reg = r;
      } else {
        o.sym = lookupSymbol(name);
        if (o.sym < 0) {
          // A kernel parameter.
          for (size_t i = 0; i < k->params.size(); ++i)
            if (k->params[i].name == name) {
              o.sym = -2 - static_cast<int>(i);
              break;
            }
        }
        if (o.sym == -1)
          fail("unknown register or variable '" + name + "'");
      }
      if (accept(",")) {
        // [tensorMap, {coords}]
        o.kind = Operand::Tensor;
        expect("{");
        do
          o.elems.push_back(operand(instrIndex, operandIndex));
        while (accept(","));
        expect("}");
        expect("]");
        return o;
      }
      while (accept("+")) {
        bool neg = accept("-");
        uint64_t v = integer();
        o.offset += neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
      }
      if (peek().kind == Token::Punct && peek().text == "-") {
        next();
        o.offset -= static_cast<int64_t>(integer());
      }
      expect("]");
      return o;
    }
    if (accept("{")) {
      o.kind = Operand::Vec;
      if (!accept("}")) {
        do
          o.elems.push_back(operand(instrIndex, operandIndex));
        while (accept(","));
        expect("}");
      }
      return o;
    }
    if (accept("(")) {
      // A call's argument or return list.
      o.kind = Operand::Vec;
      if (!accept(")")) {
        do
          o.elems.push_back(operand(instrIndex, operandIndex));
        while (accept(","));
        expect(")");
      }
      return o;
    }
    bool negated = accept("!");
    if (peek().kind == Token::Number ||
        (peek().kind == Token::Punct && peek().text == "-")) {
      bool neg = accept("-");
      const Token &t = next();
      o.kind = Operand::Imm;
      const std::string &s = t.text;
      if (s.size() == 10 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F')) {
        o.imm = std::strtoull(s.c_str() + 2, nullptr, 16);
        o.isFloatLiteral = true;
        if (neg)
          o.imm ^= 0x80000000u;
      } else if (s.size() == 18 && s[0] == '0' &&
                 (s[1] == 'd' || s[1] == 'D')) {
        o.imm = std::strtoull(s.c_str() + 2, nullptr, 16);
        o.isFloatLiteral = o.isDoubleLiteral = true;
        if (neg)
          o.imm ^= 0x8000000000000000ull;
      } else if (s.find_first_of(".eE") != std::string::npos &&
                 !(s.size() > 1 && (s[1] == 'x' || s[1] == 'X'))) {
        double d = std::strtod(s.c_str(), nullptr);
        if (neg)
          d = -d;
        std::memcpy(&o.imm, &d, 8);
        o.isFloatLiteral = o.isDoubleLiteral = true;
      } else {
        uint64_t v = 0;
        if (!parseInteger(s, v))
          throw ParseError(t.line, "bad number '" + s + "'");
        o.imm = neg ? -v : v;
      }
      return o;
    }
    std::string name = ident();
    if (name == "_") {
      o.kind = Operand::Sink;
      if (accept("|")) {
        Operand pair;
        pair.kind = Operand::Vec;
        pair.elems.push_back(o);
        pair.elems.push_back(operand(instrIndex, operandIndex));
        return pair;
      }
      return o;
    }
    int r = lookupReg(name);
    if (r < 0 && name[0] == '%')
      r = specialReg(name);
    if (r >= 0) {
      o.kind = Operand::Reg;
      o.reg = r;
      o.negated = negated;
      if (accept("|")) {
        // d|p: a value and a predicate destination.
        Operand pair;
        pair.kind = Operand::Vec;
        pair.elems.push_back(o);
        pair.elems.push_back(operand(instrIndex, operandIndex));
        return pair;
      }
      return o;
    }
    if (negated)
      fail("'!' applies to predicates only");
    int sym = lookupSymbol(name);
    if (sym >= 0) {
      o.kind = Operand::Sym;
      o.sym = sym;
      return o;
    }
    for (size_t i = 0; i < k->params.size(); ++i)
      if (k->params[i].name == name) {
        o.kind = Operand::Sym;
        o.sym = -2 - static_cast<int>(i);
        return o;
      }
    if (name[0] == '%')
      fail("unknown register '" + name + "'");
    // A label (resolved when the function ends) or a function name.
    o.kind = Operand::Label;
    o.name = name;
    pending.push_back({instrIndex, operandIndex, scope, name});
    return o;
  }

  void body(int kernelIndex) {
    while (true) {
      const Token &t = peek();
      if (t.kind == Token::End)
        fail("function '" + k->name + "' is not closed");
      if (t.kind == Token::Punct && t.text == "}") {
        next();
        scope = scopes[scope].parent;
        if (scope < 0)
          return;
        continue;
      }
      if (t.kind == Token::Punct && t.text == "{") {
        next();
        openScope();
        continue;
      }
      if (t.kind == Token::Punct && t.text == ";") {
        next();
        continue;
      }
      if (t.kind == Token::Ident && peek(1).kind == Token::Punct &&
          peek(1).text == ":" && t.text[0] != '.') {
        std::string name = next().text;
        next();
        if (scopes[scope].labels.count(name))
          fail("label '" + name + "' is defined twice");
        scopes[scope].labels[name] = static_cast<int>(k->code.size());
        continue;
      }
      if (t.kind == Token::Ident && t.text == ".reg") {
        next();
        regDecl();
        continue;
      }
      if (t.kind == Token::Ident &&
          (t.text == ".shared" || t.text == ".local" || t.text == ".global" ||
           t.text == ".const" || t.text == ".param")) {
        // A .param in a body is a call's argument: thread-local storage.
        variable(false, kernelIndex);
        continue;
      }
      if (t.kind == Token::Ident &&
          (t.text == ".loc" || t.text == ".pragma" || t.text == ".file")) {
        // .loc's operands end at the line; skip to the next statement.
        int line = t.line;
        next();
        while (peek().kind != Token::End && peek().line == line &&
               !(peek().kind == Token::Punct && peek().text == ";"))
          next();
        accept(";");
        continue;
      }
      if (t.kind == Token::Ident && t.text[0] == '.')
        fail("unknown directive '" + t.text + "' in a function body");
      instruction();
    }
  }

  void instruction() {
    Instr in;
    in.line = peek().line;
    size_t start = pos;
    if (accept("@")) {
      in.guardNeg = accept("!");
      std::string p = ident();
      in.guard = lookupReg(p);
      if (in.guard < 0)
        fail("unknown predicate '" + p + "'");
    }
    std::string opcode = ident();
    int index = static_cast<int>(k->code.size());
    if (!(peek().kind == Token::Punct && peek().text == ";")) {
      do
        in.ops.push_back(operand(index, static_cast<int>(in.ops.size())));
      while (accept(","));
    }
    if (!(peek().kind == Token::Punct && peek().text == ";"))
      fail("expected ';' after '" + opcode + "', found '" + peek().text + "'");
    next();
    for (size_t i = start; i + 1 < pos; ++i) {
      const Token &tok = tokens[i];
      if (!in.text.empty() && tok.kind != Token::Punct &&
          tokens[i - 1].text != "[" && tokens[i - 1].text != "{" &&
          tokens[i - 1].text != "@" && tokens[i - 1].text != "!" &&
          tokens[i - 1].text != "+")
        in.text += ' ';
      else if (tok.kind == Token::Punct && (tok.text == "{" || tok.text == "[") &&
               !in.text.empty() && in.text.back() != '[')
        in.text += ' ';
      in.text += tok.text;
    }
    in.text += ';';
    decode(opcode, in);
    // A .param variable of a body is a call's argument, thread-local
    // storage: its ld/st.param are local accesses.
    if ((in.op == Op::Ld || in.op == Op::St) && in.space == Space::Param &&
        in.ops[1].sym >= 0 && m.symbols[in.ops[1].sym].space == Space::Local)
      in.space = Space::Local;
    k->code.push_back(std::move(in));
  }

  void resolveLabels() {
    for (const PendingLabel &p : pending) {
      int target = -1;
      for (int s = p.scope; s >= 0 && target < 0; s = scopes[s].parent) {
        auto it = scopes[s].labels.find(p.name);
        if (it != scopes[s].labels.end())
          target = it->second;
      }
      Instr &in = k->code[p.instr];
      if (target < 0) {
        if (in.op == Op::Call)
          continue; // resolved against the module's functions at run time
        throw ParseError(in.line, "unknown label or name '" + p.name + "'");
      }
      in.ops[p.operand].target = target;
    }
  }

  void layoutShared(int kernelIndex) {
    uint32_t offset = 0;
    auto place = [&](Symbol &s) {
      uint32_t align = std::max<uint32_t>(s.align, 1);
      offset = (offset + align - 1) / align * align;
      s.address = offset;
      offset += static_cast<uint32_t>(s.bytes);
    };
    // Module-scope shared variables are visible to every kernel; they are
    // placed first, then the kernel's own.
    for (Symbol &s : m.symbols)
      if (s.space == Space::Shared && !s.external && s.kernel < 0)
        place(s);
    for (Symbol &s : m.symbols)
      if (s.space == Space::Shared && !s.external && s.kernel == kernelIndex)
        place(s);
    uint32_t localOffset = 0;
    for (Symbol &s : m.symbols)
      if (s.space == Space::Local && s.kernel == kernelIndex) {
        uint32_t align = std::max<uint32_t>(s.align, 1);
        localOffset = (localOffset + align - 1) / align * align;
        s.address = localOffset;
        localOffset += static_cast<uint32_t>(s.bytes);
      }
    Kernel &kernel = m.kernels[kernelIndex];
    kernel.staticShared = offset;
    kernel.localBytes = localOffset;
    for (size_t i = 0; i < m.symbols.size(); ++i) {
      Symbol &s = m.symbols[i];
      if (s.space == Space::Shared && s.external &&
          (s.kernel < 0 || s.kernel == kernelIndex)) {
        kernel.dynamicSharedAlign =
            std::max(kernel.dynamicSharedAlign, std::max<uint32_t>(s.align, 16));
        kernel.dynamicSharedSym = static_cast<int32_t>(i);
      }
    }
  }

  // ---------------------------------------------------------------------
  // Opcode decoding.
  // ---------------------------------------------------------------------

  /// The shape modifier mMnNkK of wgmma and mma into in.shapeM/N/K (left
  /// 0 when there is none; the callers check the values).
  static void parseMmaShape(const std::vector<std::string> &parts,
                            Instr &in) {
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string &p = parts[i];
      size_t n = p.find('n'), k = p.find('k');
      if (p.size() > 4 && p[0] == 'm' && n != std::string::npos &&
          k != std::string::npos && k > n &&
          std::isdigit(static_cast<unsigned char>(p[1]))) {
        in.shapeM = std::atoi(p.c_str() + 1);
        in.shapeN = std::atoi(p.c_str() + n + 1);
        in.shapeK = std::atoi(p.c_str() + k + 1);
      }
    }
  }

  /// mma.sync.aligned.mMnNkK.row.col.dtype.atype.btype.ctype d, a, b, c:
  /// the warp-wide MMA shapes Triton and nvcc emit for small tiles.
  template <typename Has>
  void decodeMma(const std::string &opcode,
                 const std::vector<std::string> &parts,
                 const std::vector<Ty> &types, Has has, Instr &in) {
    auto bad = [&]() {
      throw ParseError(in.line, "unsupported instruction '" + opcode + "'");
    };
    in.op = Op::MmaSync;
    parseMmaShape(parts, in);
    // Sparse (.sp) and block-scaled MMAs are not modelled.
    if (has("sp") || has("sp::ordered_metadata") || has("block_scale") ||
        has("kind::mxf8f6f4") || has("kind::f8f6f4"))
      bad();
    if (!has("sync") || !has("aligned") || !has("row") || !has("col") ||
        types.size() != 4 || in.shapeM != 16 || in.shapeN != 8)
      bad();
    in.type = types[0];  // d
    in.type2 = types[1]; // a
    in.type3 = types[2]; // b
    Ty a = types[1], b = types[2], c = types[3], d = types[0];
    bool half = (a == Ty::F16 || a == Ty::BF16) && a == b &&
                (in.shapeK == 8 || in.shapeK == 16) && d == Ty::F32 &&
                c == Ty::F32;
    bool f16acc = a == Ty::F16 && b == Ty::F16 && d == Ty::F16 &&
                  c == Ty::F16 && (in.shapeK == 8 || in.shapeK == 16);
    bool tf32 = a == Ty::TF32 && b == Ty::TF32 && d == Ty::F32 &&
                c == Ty::F32 && (in.shapeK == 4 || in.shapeK == 8);
    bool fp8 = (a == Ty::E4M3 || a == Ty::E5M2) &&
               (b == Ty::E4M3 || b == Ty::E5M2) && d == Ty::F32 &&
               c == Ty::F32 && in.shapeK == 32;
    bool int8 = (a == Ty::S8 || a == Ty::U8) && (b == Ty::S8 || b == Ty::U8) &&
                d == Ty::S32 && c == Ty::S32 &&
                (in.shapeK == 16 || in.shapeK == 32);
    if (!(half || f16acc || tf32 || fp8 || int8))
      bad();
    if (int8 && has("satfinite"))
      in.flags |= FSat;
    if (in.ops.size() != 4)
      throw ParseError(in.line, "'mma' takes 4 operands, found " +
                                    std::to_string(in.ops.size()));
  }

  void decode(const std::string &opcode, Instr &in) {
    std::vector<std::string> parts;
    size_t b = 0;
    for (size_t i = 0; i <= opcode.size(); ++i)
      if (i == opcode.size() || opcode[i] == '.') {
        parts.push_back(opcode.substr(b, i - b));
        b = i + 1;
      }
    const std::string &base = parts[0];
    std::vector<Ty> types;
    std::set<std::string> mods;
    for (size_t i = 1; i < parts.size(); ++i) {
      Ty t = parseTy(parts[i]);
      if (t != Ty::None)
        types.push_back(t);
      else
        mods.insert(parts[i]);
    }
    auto has = [&](const char *m2) { return mods.count(m2) != 0; };
    // The first of `names` among the modifiers, or SubOp::None.
    auto subOf =
        [&](std::initializer_list<std::pair<const char *, SubOp>> names) {
          for (const auto &[name, sub] : names)
            if (has(name))
              return sub;
          return SubOp::None;
        };
    auto ty = [&](size_t i) { return i < types.size() ? types[i] : Ty::None; };
    auto bad = [&]() {
      throw ParseError(in.line, "unsupported instruction '" + opcode + "'");
    };
    auto needOps = [&](size_t lo, size_t hi) {
      if (in.ops.size() < lo || in.ops.size() > hi)
        throw ParseError(in.line, "'" + opcode + "' takes " +
                                      std::to_string(lo) +
                                      (hi != lo ? "-" + std::to_string(hi)
                                                : std::string()) +
                                      " operands, found " +
                                      std::to_string(in.ops.size()));
    };
    static const std::pair<const char *, uint32_t> flagNames[] = {
        {"rn", FRn},   {"rz", FRz},   {"rm", FRm},     {"rp", FRp},
        {"rni", FRni}, {"rzi", FRzi}, {"rmi", FRmi},   {"rpi", FRpi},
        {"ftz", FFtz}, {"sat", FSat}, {"approx", FApprox},
        {"full", FFull}, {"hi", FHi}, {"wide", FWide}, {"uni", FUni},
        {"nc", FNc},   {"to", FTo},   {"cc", FCc},     {"relu", FRelu},
        {"clamp", FShiftClamp}, {"aligned", FAligned}, {"NaN", FNaN},
        {"xorsign", FXorsign}, {"abs", FAbsMod}, {"parity", FParity}};
    for (const auto &[name, flag] : flagNames)
      if (has(name))
        in.flags |= flag;
    if (has("lo"))
      in.flags |= FLo;
    for (const char *v : {"v2", "v4", "v8"})
      if (has(v))
        in.vec = static_cast<uint8_t>(v[1] - '0');
    auto spaceOf = [&]() {
      if (has("shared::cluster"))
        return Space::SharedCluster;
      if (has("shared") || has("shared::cta"))
        return Space::Shared;
      if (has("global"))
        return Space::Global;
      if (has("param") || has("param::entry") || has("param::func"))
        return Space::Param;
      if (has("local"))
        return Space::Local;
      if (has("const"))
        return Space::Const;
      return Space::Generic;
    };
    in.type = ty(0);
    in.type2 = ty(1);
    in.type3 = ty(2);
    auto simple = [&](Op op, size_t n) {
      in.op = op;
      needOps(n, n);
      if (in.type == Ty::None)
        bad();
    };
    if (base == "mov") {
      simple(Op::Mov, 2);
    } else if (base == "addc" || base == "subc" || base == "madc") {
      // Extended-precision arithmetic: the carry (borrow) flag in, and out
      // with .cc.
      in.flags |= FCarryIn;
      if (base == "madc") {
        simple(Op::Mad, 4);
        if (!(in.flags & (FHi | FLo)))
          bad();
      } else {
        simple(base == "addc" ? Op::Add : Op::Sub, 3);
      }
      if (in.type != Ty::U32 && in.type != Ty::S32 && in.type != Ty::U64 &&
          in.type != Ty::S64 && in.type != Ty::B32 && in.type != Ty::B64)
        bad();
    } else if (base == "shf") {
      // shf.{l,r}.{wrap,clamp}.b32 d, a, b, c: a funnel shift of b:a.
      simple(Op::Shf, 4);
      in.sub = has("l") ? SubOp::Left : has("r") ? SubOp::Right : SubOp::None;
      if (in.sub == SubOp::None || (!has("wrap") && !has("clamp")) ||
          in.type != Ty::B32)
        bad();
    } else if (base == "bfind") {
      simple(Op::Bfind, 2);
      if (has("shiftamt"))
        in.sub = SubOp::ShiftAmt;
      if (in.type != Ty::U32 && in.type != Ty::S32 && in.type != Ty::U64 &&
          in.type != Ty::S64)
        bad();
    } else if (base == "dp4a") {
      // dp4a.atype.btype d, a, b, c: c plus the four byte products.
      simple(Op::Dp4a, 4);
      for (Ty t : {in.type, in.type2})
        if (t != Ty::U32 && t != Ty::S32)
          bad();
    } else if (base == "vabsdiff4") {
      // vabsdiff4.dtype.atype.btype{.add}{.sat} d, a, b, c: per byte
      // |a - b| (operand byte selectors and result masks not supported).
      simple(Op::Vabsdiff4, 4);
      if (has("add"))
        in.sub = SubOp::AbsDiffAdd;
      else if (has("min") || has("max"))
        bad();
      for (Ty t : {in.type, in.type2, in.type3})
        if (t != Ty::U32 && t != Ty::S32)
          bad();
    } else if (base == "match") {
      // match.{any,all}.sync.b32/b64 d[|p], a, membermask.
      in.op = Op::Match;
      in.sub = has("any") ? SubOp::Any : has("all") ? SubOp::All : SubOp::None;
      if (in.sub == SubOp::None || !has("sync") ||
          (in.type != Ty::B32 && in.type != Ty::B64))
        bad();
      needOps(3, 3);
    } else if (base == "mma") {
      decodeMma(opcode, parts, types, has, in);
    } else if (base == "add" || base == "sub" || base == "min" ||
               base == "max" || base == "and" || base == "or" ||
               base == "xor" || base == "div" || base == "rem" ||
               base == "shl" || base == "shr" || base == "copysign") {
      static const std::map<std::string, Op> ops = {
          {"add", Op::Add}, {"sub", Op::Sub}, {"min", Op::Min},
          {"max", Op::Max}, {"and", Op::And}, {"or", Op::Or},
          {"xor", Op::Xor}, {"div", Op::Div}, {"rem", Op::Rem},
          {"shl", Op::Shl}, {"shr", Op::Shr}, {"copysign", Op::Copysign}};
      in.op = ops.at(base);
      if (in.type == Ty::None)
        bad();
      if ((base == "min" || base == "max") && in.ops.size() == 4)
        needOps(4, 4); // three-input min/max
      else
        needOps(3, 3);
    } else if (base == "mul" || base == "mul24") {
      simple(base == "mul" ? Op::Mul : Op::Mul24, 3);
    } else if (base == "mad" || base == "mad24") {
      simple(base == "mad" ? Op::Mad : Op::Mad24, 4);
    } else if (base == "fma") {
      simple(Op::Fma, 4);
    } else if (base == "sad") {
      simple(Op::Sad, 4);
    } else if (base == "abs" || base == "neg" || base == "not" ||
               base == "cnot" || base == "brev" || base == "popc" ||
               base == "clz" || base == "rcp" || base == "sqrt" ||
               base == "rsqrt" || base == "ex2" || base == "lg2" ||
               base == "sin" || base == "cos" || base == "tanh") {
      static const std::map<std::string, Op> ops = {
          {"abs", Op::Abs},     {"neg", Op::Neg},   {"not", Op::Not},
          {"cnot", Op::Cnot},   {"brev", Op::Brev}, {"popc", Op::Popc},
          {"clz", Op::Clz},     {"rcp", Op::Rcp},   {"sqrt", Op::Sqrt},
          {"rsqrt", Op::Rsqrt}, {"ex2", Op::Ex2},   {"lg2", Op::Lg2},
          {"sin", Op::Sin},     {"cos", Op::Cos},   {"tanh", Op::Tanh}};
      simple(ops.at(base), 2);
    } else if (base == "bfe") {
      simple(Op::Bfe, 4);
    } else if (base == "bfi") {
      simple(Op::Bfi, 5);
    } else if (base == "prmt") {
      simple(Op::Prmt, 4);
      if (mods.size() > 0)
        bad(); // the f4e/b4e/... modes
    } else if (base == "selp") {
      simple(Op::Selp, 4);
    } else if (base == "testp") {
      in.op = Op::Testp;
      needOps(2, 2);
      if (has("finite")) in.sub = SubOp::All;
      else if (has("infinite")) in.sub = SubOp::Any;
      else if (has("number")) in.sub = SubOp::Uni;
      else if (has("notanumber")) in.sub = SubOp::Ballot;
      else bad();
    } else if (base == "setp") {
      in.op = Op::Setp;
      static const std::map<std::string, Cmp> cmps = {
          {"eq", Cmp::Eq},   {"ne", Cmp::Ne},   {"lt", Cmp::Lt},
          {"le", Cmp::Le},   {"gt", Cmp::Gt},   {"ge", Cmp::Ge},
          {"lo", Cmp::Lo},   {"ls", Cmp::Ls},   {"hi", Cmp::Hi},
          {"hs", Cmp::Hs},   {"equ", Cmp::Equ}, {"neu", Cmp::Neu},
          {"ltu", Cmp::Ltu}, {"leu", Cmp::Leu}, {"gtu", Cmp::Gtu},
          {"geu", Cmp::Geu}, {"num", Cmp::Num}, {"nan", Cmp::Nan}};
      if (parts.size() < 3)
        bad();
      auto c = cmps.find(parts[1]);
      if (c == cmps.end())
        bad();
      in.cmp = c->second;
      in.flags &= ~(FLo | FHi);
      if (has("and")) in.sub = SubOp::And;
      else if (has("or")) in.sub = SubOp::Or;
      else if (has("xor")) in.sub = SubOp::Xor;
      if (in.type == Ty::None)
        bad();
      // setp.cmp.type p[|q], a, b[, {!}c]
      if (in.ops.size() < 3 || in.ops.size() > 4)
        needOps(3, 4);
    } else if (base == "cvt") {
      in.op = Op::Cvt;
      needOps(2, 3);
      if (types.size() != 2)
        bad();
    } else if (base == "cvta") {
      in.op = Op::Cvta;
      in.space = spaceOf();
      needOps(2, 2);
      if (in.space == Space::Generic)
        bad();
    } else if (base == "isspacep") {
      in.op = Op::Isspacep;
      in.space = spaceOf();
      needOps(2, 2);
    } else if (base == "ld" || base == "st" || base == "ldu") {
      in.op = base == "st" ? Op::St : Op::Ld;
      in.space = spaceOf();
      // st.async completes an mbarrier transaction (not modelled).
      if (in.type == Ty::None || has("async"))
        bad();
      // An L2 cache-policy operand may follow.
      needOps(2, 3);
      if (in.op == Op::St) {
        std::swap(in.ops[0], in.ops[1]); // value first, address second
        if (in.ops[1].kind != Operand::Addr)
          throw ParseError(in.line, "st needs an address operand");
      } else if (in.ops[1].kind != Operand::Addr) {
        throw ParseError(in.line, "ld needs an address operand");
      }
    } else if (base == "atom" || base == "red") {
      in.op = base == "atom" ? Op::Atom : Op::Red;
      in.space = spaceOf();
      if (has("async")) // red.async: an mbarrier transaction, not modelled
        bad();
      in.sub = subOf({{"add", SubOp::Add},
                      {"min", SubOp::Min},
                      {"max", SubOp::Max},
                      {"inc", SubOp::Inc},
                      {"dec", SubOp::Dec},
                      {"and", SubOp::And},
                      {"or", SubOp::Or},
                      {"xor", SubOp::Xor},
                      {"exch", SubOp::Exch},
                      {"cas", SubOp::Cas}});
      if (in.sub == SubOp::None || in.type == Ty::None)
        bad();
      if (in.op == Op::Red)
        needOps(2, 3);
      else
        needOps(in.sub == SubOp::Cas ? 4 : 3, in.sub == SubOp::Cas ? 5 : 4);
    } else if (base == "prefetch" || base == "prefetchu" ||
               base == "applypriority" || base == "discard" ||
               base == "createpolicy") {
      in.op = Op::Prefetch;
      if (base == "createpolicy") {
        // A cache policy is an opaque hint: any value serves, so it is a
        // move of 0 into its register.
        if (in.ops.empty() || in.ops[0].kind != Operand::Reg)
          bad();
        Operand zero;
        zero.kind = Operand::Imm;
        in.op = Op::Mov;
        in.type = Ty::B64;
        in.ops.resize(1);
        in.ops.push_back(zero);
      }
    } else if (base == "bra" || base == "brx") {
      if (base == "brx")
        bad();
      in.op = Op::Bra;
      needOps(1, 1);
      if (in.ops[0].kind != Operand::Label)
        throw ParseError(in.line, "bra needs a label");
    } else if (base == "ret") {
      in.op = Op::Ret;
    } else if (base == "exit") {
      in.op = Op::Exit;
    } else if (base == "call") {
      // call[.uni] [(ret),] func, (args): only __assertfail runs (as a
      // failed assertion); other calls are refused when executed.
      in.op = Op::Call;
      if (in.ops.empty())
        bad();
    } else if (base == "trap") {
      in.op = Op::Trap;
    } else if (base == "brkpt") {
      in.op = Op::Brkpt;
    } else if (base == "nanosleep") {
      in.op = Op::Nanosleep;
    } else if (base == "bar" || base == "barrier") {
      if (has("cluster")) {
        in.op = Op::BarCluster;
        in.sub = subOf({{"arrive", SubOp::Arrive}, {"wait", SubOp::Wait}});
        return;
      }
      if (has("red")) {
        in.op = Op::BarRed;
        in.sub = subOf(
            {{"popc", SubOp::Popc}, {"and", SubOp::And}, {"or", SubOp::Or}});
        if (in.sub == SubOp::None)
          bad();
        return;
      }
      if (has("warp")) {
        // bar.warp.sync membermask: __syncwarp.
        in.op = Op::WarpSync;
        needOps(1, 1);
        return;
      }
      in.op = has("arrive") ? Op::BarArrive : Op::BarSync;
      needOps(1, 2);
    } else if (base == "membar" || base == "fence") {
      in.op = Op::Fence;
    } else if (base == "shfl") {
      in.op = Op::Shfl;
      in.sub = subOf({{"up", SubOp::Up},
                      {"down", SubOp::Down},
                      {"bfly", SubOp::Bfly},
                      {"idx", SubOp::Idx}});
      if (in.sub == SubOp::None || !has("sync"))
        bad();
      needOps(5, 5);
    } else if (base == "vote") {
      in.op = Op::Vote;
      in.sub = subOf({{"all", SubOp::All},
                      {"any", SubOp::Any},
                      {"uni", SubOp::Uni},
                      {"ballot", SubOp::Ballot}});
      if (in.sub == SubOp::None || !has("sync"))
        bad();
      needOps(3, 3);
    } else if (base == "redux") {
      in.op = Op::Redux;
      in.sub = subOf({{"add", SubOp::Add},
                      {"min", SubOp::Min},
                      {"max", SubOp::Max},
                      {"and", SubOp::And},
                      {"or", SubOp::Or},
                      {"xor", SubOp::Xor}});
      if (in.sub == SubOp::None)
        bad();
      needOps(3, 3);
    } else if (base == "elect") {
      in.op = Op::Elect;
      needOps(2, 2);
    } else if (base == "activemask") {
      in.op = Op::Activemask;
      needOps(1, 1);
    } else if (base == "mbarrier") {
      if (has("init")) {
        in.op = Op::MbarInit;
        needOps(2, 2);
      } else if (has("arrive_drop")) {
        in.op = Op::MbarArriveDrop;
        if (has("expect_tx"))
          in.flags |= FInc;
      } else if (has("arrive")) {
        in.op = Op::MbarArrive;
        if (has("expect_tx"))
          in.flags |= FInc; // arrive + expect_tx
        if (has("noComplete"))
          bad();
      } else if (has("expect_tx")) {
        in.op = Op::MbarExpectTx;
      } else if (has("complete_tx")) {
        in.op = Op::MbarCompleteTx;
      } else if (has("test_wait")) {
        in.op = Op::MbarTestWait;
      } else if (has("try_wait")) {
        in.op = Op::MbarTryWait;
      } else if (has("inval")) {
        in.op = Op::MbarInval;
      } else {
        bad();
      }
      in.space = spaceOf();
      if (in.space == Space::SharedCluster && in.op != Op::MbarArrive &&
          in.op != Op::MbarExpectTx && in.op != Op::MbarCompleteTx)
        bad();
    } else if (base == "cp") {
      if (has("reduce")) {
        bad(); // cp.reduce.async.bulk{.tensor}: a reduction, not a copy
      } else if (has("async") && has("bulk") && has("tensor")) {
        in.space = Space::SharedCluster; // of the mbarrier operand
        in.op = has("prefetch") ? Op::TmaPrefetch
                : (opcode.find(".global.shared::") != std::string::npos)
                    ? Op::TmaStore
                    : Op::TmaLoad;
        if (has("im2col") || has("im2col_no_offs"))
          bad();
        if (has("multicast::cluster"))
          in.flags |= FMulticast;
        for (size_t i = 1; i < parts.size(); ++i)
          if (parts[i].size() == 2 && parts[i][1] == 'd' &&
              parts[i][0] >= '1' && parts[i][0] <= '5')
            in.shapeM = parts[i][0] - '0';
        if (in.shapeM == 0)
          bad();
      } else if (has("async") && has("bulk") &&
                 (has("commit_group") || has("wait_group") ||
                  has("wait_group.read"))) {
        in.op = has("commit_group") ? Op::BulkCommit : Op::BulkWait;
      } else if (has("async") && has("bulk")) {
        in.op = Op::BulkCopy;
        if (has("prefetch"))
          in.op = Op::Prefetch;
        else if (opcode.find(".shared::cluster.global") == std::string::npos &&
                 opcode.find(".global.shared::cta") == std::string::npos &&
                 opcode.find(".shared::cta.global") == std::string::npos)
          bad();
        in.space = opcode.find(".global.shared::cta") != std::string::npos
                       ? Space::Global
                       : Space::Shared; // the destination
        if (has("multicast::cluster"))
          bad();
      } else if (has("async") && (has("commit_group") || has("wait_group") ||
                                  has("wait_all"))) {
        in.op = has("commit_group") ? Op::CpAsyncCommit : Op::CpAsyncWait;
      } else if (has("async") && has("mbarrier")) {
        in.op = Op::CpAsyncMbarArrive;
        in.flags |= has("noinc") ? 0u : static_cast<uint32_t>(FInc);
      } else if (has("async")) {
        in.op = Op::CpAsync;
        needOps(3, 4);
      } else {
        bad();
      }
    } else if (base == "wgmma") {
      if (has("fence")) {
        in.op = Op::WgmmaFence;
      } else if (has("commit_group")) {
        in.op = Op::WgmmaCommit;
      } else if (has("wait_group")) {
        in.op = Op::WgmmaWait;
        needOps(1, 1);
      } else if (has("mma_async")) {
        in.op = Op::WgmmaMma;
        if (has("sp"))
          bad();
        parseMmaShape(parts, in);
        if (in.shapeM != 64 || in.shapeN < 8 || in.shapeN > 256 ||
            in.shapeN % 8 != 0)
          bad();
        // .dtype.atype.btype
        bool integer = types.size() == 3 && types[0] == Ty::S32 &&
                       (types[1] == Ty::S8 || types[1] == Ty::U8) &&
                       (types[2] == Ty::S8 || types[2] == Ty::U8);
        if (types.size() != 3 || (types[1] != types[2] && !integer) ||
            !(types[0] == Ty::F32 || types[0] == Ty::F16 || integer))
          bad();
        in.type = types[0];
        in.type2 = types[1];
        in.type3 = types[2];
        if (has("satfinite"))
          in.flags |= FSat;
        int k = types[1] == Ty::F16 || types[1] == Ty::BF16 ? 16
                : integer                                   ? 32
                : types[1] == Ty::TF32                      ? 8
                : (types[1] == Ty::E4M3 || types[1] == Ty::E5M2) ? 32
                                                                 : 0;
        if (k == 0 || in.shapeK != k)
          bad();
      } else {
        bad();
      }
    } else if (base == "ldmatrix" || base == "stmatrix") {
      in.op = base == "ldmatrix" ? Op::Ldmatrix : Op::Stmatrix;
      in.space = spaceOf();
      in.flags |= has("trans") ? static_cast<uint32_t>(FTrans) : 0u;
      for (const char *x : {"x1", "x2", "x4"})
        if (has(x))
          in.shapeN = x[1] - '0';
      if (!has("m8n8") || in.shapeN == 0 || in.type != Ty::B16)
        bad();
      needOps(2, 2);
      if (in.op == Op::Stmatrix)
        std::swap(in.ops[0], in.ops[1]);
    } else if (base == "setmaxnreg") {
      in.op = Op::Setmaxnreg;
      in.flags |= has("inc") ? static_cast<uint32_t>(FInc) : 0u;
      if (!has("inc") && !has("dec"))
        bad();
      needOps(1, 1);
      if (in.ops[0].kind != Operand::Imm)
        throw ParseError(in.line, "setmaxnreg needs an immediate count");
    } else if (base == "griddepcontrol") {
      in.op = Op::Griddepcontrol;
    } else if (base == "mapa") {
      in.op = Op::Mapa;
      in.space = spaceOf();
      needOps(3, 3);
    } else {
      bad();
    }
  }
};

} // namespace

std::unique_ptr<Module> parseModule(const std::string &text,
                                    const std::string &name,
                                    std::string &error) {
  auto m = std::make_unique<Module>();
  m->name = name;
  try {
    Parser p(text, *m);
    p.run();
  } catch (const ParseError &e) {
    error = name + ":" + std::to_string(e.line) + ": " + e.what();
    return nullptr;
  } catch (const std::exception &e) {
    error = name + ": " + e.what();
    return nullptr;
  }
  if (m->target.rfind("sm_", 0) != 0) {
    error = name + ": no '.target sm_NN' directive";
    return nullptr;
  }
  return m;
}

} // namespace moe::emu
