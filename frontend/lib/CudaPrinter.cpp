//===- CudaPrinter.cpp - DSL expressions as CUDA C++ ----------------------===//
//
// Every operator whose C++ meaning differs from the DSL's (signed overflow is
// undefined in C++, x / 0 traps, float -> int out of range is undefined,
// fminf ignores NaN) goes through a helper of the prelude; the rest map to
// the C++ operator, fully parenthesised so precedence never matters.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/CudaPrinter.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <bit>
#include <cmath>
#include <limits>

namespace flashjit {

std::string_view cudaTypeName(ScalarType type) {
  switch (type) {
  case ScalarType::Bool:
    return "bool";
  case ScalarType::Int32:
    return "int";
  case ScalarType::Int64:
    return "long long";
  case ScalarType::Float32:
    return "float";
  }
  throw InternalError("unknown ScalarType");
}

namespace {

std::string printConstant(const ConstantExpr &c) {
  switch (c.type()) {
  case ScalarType::Bool:
    return c.boolValue() ? "true" : "false";
  case ScalarType::Int32: {
    int64_t v = static_cast<int32_t>(c.intValue());
    if (v == std::numeric_limits<int32_t>::min())
      return "(-2147483647 - 1)";
    return v < 0 ? fmt::format("({})", v) : fmt::format("{}", v);
  }
  case ScalarType::Int64: {
    int64_t v = c.intValue();
    if (v == std::numeric_limits<int64_t>::min())
      return "(-9223372036854775807LL - 1LL)";
    return v < 0 ? fmt::format("({}LL)", v) : fmt::format("{}LL", v);
  }
  case ScalarType::Float32: {
    float f = c.floatValue();
    if (!std::isfinite(f)) // no literal spells inf or NaN: use the bits
      return fmt::format("__uint_as_float(0x{:08x}u)",
                         std::bit_cast<uint32_t>(f));
    // printFloat's shortest round-trip text reads back as exactly f when
    // parsed as a float literal.
    std::string text = printFloat(f) + "f";
    return std::signbit(f) ? "(" + text + ")" : text;
  }
  }
  throw InternalError("unknown constant type");
}

class CudaPrinter {
public:
  explicit CudaPrinter(const CudaNames &names) : names_(names) {}

  std::string print(const Expr &e) {
    const ExprNode *n = e.get();
    switch (n->kind()) {
    case ExprKind::Constant:
      return printConstant(*llvm::cast<ConstantExpr>(n));
    case ExprKind::Index: {
      IndexVar v = llvm::cast<IndexExpr>(n)->var();
      return names_.index ? names_.index(v) : std::string(toString(v));
    }
    case ExprKind::Score:
      return names_.score;
    case ExprKind::Param:
      return names_.paramPrefix + llvm::cast<ParamExpr>(n)->name();
    case ExprKind::BufferLoad: {
      auto *b = llvm::cast<BufferLoadExpr>(n);
      std::string ptr = names_.bufferPrefix + b->name();
      return fmt::format("fj_load({}, {}_size, (long long)({}), {})", ptr, ptr,
                         print(b->index()), bufferId(b->name()));
    }
    case ExprKind::Unary:
      return unary(*llvm::cast<UnaryExpr>(n));
    case ExprKind::Binary:
      return binary(*llvm::cast<BinaryExpr>(n));
    case ExprKind::Select: {
      auto *s = llvm::cast<SelectExpr>(n);
      return fmt::format("({} ? {} : {})", print(s->condition()),
                         print(s->trueValue()), print(s->falseValue()));
    }
    case ExprKind::Cast:
      return cast(n->type(), llvm::cast<CastExpr>(n)->operand());
    }
    throw InternalError("unknown ExprKind");
  }

private:
  int bufferId(const std::string &name) const {
    for (size_t i = 0; i < names_.bufferIds.size(); ++i)
      if (names_.bufferIds[i] == name)
        return static_cast<int>(i) + 1;
    return -1;
  }

  std::string unary(const UnaryExpr &u) {
    std::string a = print(u.operand());
    bool isFloat = u.operand().type() == ScalarType::Float32;
    switch (u.op()) {
    case UnaryOp::Not:
      return "(!" + a + ")";
    case UnaryOp::Neg:
      return isFloat ? "(-" + a + ")" : "fj_neg(" + a + ")";
    case UnaryOp::Abs:
      return isFloat ? "fabsf(" + a + ")" : "fj_abs(" + a + ")";
    case UnaryOp::Exp:
      return "expf(" + a + ")";
    case UnaryOp::Exp2:
      return "exp2f(" + a + ")";
    case UnaryOp::Log:
      return "logf(" + a + ")";
    case UnaryOp::Tanh:
      return "tanhf(" + a + ")";
    case UnaryOp::Sigmoid:
      return "fj_sigmoid(" + a + ")";
    case UnaryOp::Sqrt:
      return "sqrtf(" + a + ")";
    }
    throw InternalError("unknown UnaryOp");
  }

  std::string binary(const BinaryExpr &b) {
    std::string x = print(b.lhs()), y = print(b.rhs());
    bool isInt = isInteger(b.lhs().type());
    auto infix = [&](std::string_view op) {
      return fmt::format("({} {} {})", x, op, y);
    };
    auto call = [&](std::string_view fn) {
      return fmt::format("{}({}, {})", fn, x, y);
    };
    switch (b.op()) {
    case BinaryOp::Add:
      return isInt ? call("fj_add") : infix("+");
    case BinaryOp::Sub:
      return isInt ? call("fj_sub") : infix("-");
    case BinaryOp::Mul:
      return isInt ? call("fj_mul") : infix("*");
    case BinaryOp::Div:
      return isInt ? call("fj_div") : infix("/");
    case BinaryOp::Rem:
      return call("fj_rem");
    case BinaryOp::Min:
      return call("fj_min");
    case BinaryOp::Max:
      return call("fj_max");
    case BinaryOp::Eq:
      return infix("==");
    case BinaryOp::Ne:
      return infix("!=");
    case BinaryOp::Lt:
      return infix("<");
    case BinaryOp::Le:
      return infix("<=");
    case BinaryOp::Gt:
      return infix(">");
    case BinaryOp::Ge:
      return infix(">=");
    case BinaryOp::And:
      return infix("&&");
    case BinaryOp::Or:
      return infix("||");
    }
    throw InternalError("unknown BinaryOp");
  }

  std::string cast(ScalarType to, const Expr &operand) {
    ScalarType from = operand.type();
    std::string a = print(operand);
    if (from == to)
      return a;
    switch (to) {
    case ScalarType::Float32:
      if (from == ScalarType::Bool)
        return "(" + a + " ? 1.0f : 0.0f)";
      return "((float)" + a + ")"; // round to nearest even
    case ScalarType::Int32:
      if (from == ScalarType::Float32)
        return "fj_f2i(" + a + ")";
      if (from == ScalarType::Int64)
        return "fj_trunc32(" + a + ")";
      return "((int)" + a + ")";
    case ScalarType::Int64:
      if (from == ScalarType::Float32)
        return "fj_f2ll(" + a + ")";
      return "((long long)" + a + ")"; // sign-extends i32, 0/1 for bool
    case ScalarType::Bool:
      break;
    }
    throw InternalError(
        fmt::format("cast from {} to {}", toString(from), toString(to)));
  }

  const CudaNames &names_;
};

} // namespace

std::string printCudaExpr(const Expr &e, const CudaNames &names) {
  if (e.isNull())
    throw InternalError("printCudaExpr of a null expression");
  return CudaPrinter(names).print(e);
}

std::string_view cudaPrelude() {
  return R"CUDA(// flashjit DSL helpers: the DSL's integer and float semantics in CUDA C++.
#define FJ_INLINE __device__ __forceinline__
// Integers wrap (two's complement): computed on unsigned values.
FJ_INLINE int fj_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
FJ_INLINE int fj_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
FJ_INLINE int fj_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
FJ_INLINE int fj_neg(int a) { return (int)(0u - (unsigned)a); }
FJ_INLINE long long fj_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
FJ_INLINE long long fj_sub(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
FJ_INLINE long long fj_mul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
FJ_INLINE long long fj_neg(long long a) { return (long long)(0ull - (unsigned long long)a); }
// Division and remainder by zero give 0; MIN / -1 wraps to MIN, MIN % -1 is 0.
FJ_INLINE int fj_div(int a, int b) { return b == 0 ? 0 : b == -1 ? fj_neg(a) : a / b; }
FJ_INLINE int fj_rem(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
FJ_INLINE long long fj_div(long long a, long long b) { return b == 0 ? 0 : b == -1 ? fj_neg(a) : a / b; }
FJ_INLINE long long fj_rem(long long a, long long b) { return (b == 0 || b == -1) ? 0 : a % b; }
// abs wraps: abs(MIN) == MIN.
FJ_INLINE int fj_abs(int a) { return a < 0 ? fj_neg(a) : a; }
FJ_INLINE long long fj_abs(long long a) { return a < 0 ? fj_neg(a) : a; }
FJ_INLINE int fj_min(int a, int b) { return a < b ? a : b; }
FJ_INLINE int fj_max(int a, int b) { return a > b ? a : b; }
FJ_INLINE long long fj_min(long long a, long long b) { return a < b ? a : b; }
FJ_INLINE long long fj_max(long long a, long long b) { return a > b ? a : b; }
// Float min/max: NaN if either is NaN; min(-0, +0) = -0, max(-0, +0) = +0.
FJ_INLINE float fj_min(float a, float b) {
  if (a != a || b != b) return __uint_as_float(0x7fc00000u);
  if (a == b) return __float_as_int(a) < 0 ? a : b;
  return a < b ? a : b;
}
FJ_INLINE float fj_max(float a, float b) {
  if (a != a || b != b) return __uint_as_float(0x7fc00000u);
  if (a == b) return __float_as_int(a) < 0 ? b : a;
  return a > b ? a : b;
}
FJ_INLINE float fj_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
// f32 -> integer: truncate toward zero, saturate, NaN -> 0.
FJ_INLINE int fj_f2i(float x) { return x != x ? 0 : __float2int_rz(x); }
FJ_INLINE long long fj_f2ll(float x) { return x != x ? 0 : __float2ll_rz(x); }
// i64 -> i32 keeps the low 32 bits.
FJ_INLINE int fj_trunc32(long long x) { return (int)(unsigned)(unsigned long long)x; }
// Buffer reads: outside [0, n) give 0 and record (buffer id, index) once.
__device__ int fj_oob_buffer;
__device__ long long fj_oob_index;
template <class T>
FJ_INLINE T fj_load(const T *p, long long n, long long i, int id) {
  if (i < 0 || i >= n) {
    if (atomicCAS(&fj_oob_buffer, 0, id) == 0) fj_oob_index = i;
    return T(0);
  }
  return p[i];
}
)CUDA";
}

} // namespace flashjit
