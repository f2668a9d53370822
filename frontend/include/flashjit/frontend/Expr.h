//===- Expr.h - The attention DSL's expression tree --------------*- C++
//-*-===//
//
// A user writes a mask predicate and a score modifier as C++ expressions over
// the leaves `batch`, `head`, `q_idx`, `kv_idx`, `seqlen_q`, `seqlen_k` and
// `score`, constants, runtime parameters and captured buffers:
//
//   q_idx >= kv_idx && q_idx - kv_idx < 1024
//   30.0f * tanh(score / 30.0f)
//   score - buffer<float>("slope")[head] * abs(q_idx - kv_idx)
//
// Each operator builds an immutable, reference-counted node (ExprNode) that
// records its type and the user's source location. Types are checked when a
// node is built; a mistake throws UserError pointing at the user's line.
//
// Type rules:
//  - Index leaves and integer literals that fit are i32; int64_t values are
//    i64; floating-point literals are f32 (DSL floats are always f32).
//  - Arithmetic (+ - * / min max) takes numbers, never bool. Mixed operands
//    are promoted i32 -> i64 -> f32 by an explicit cast node (literals are
//    converted in place). `%` takes integers only.
//  - Integer arithmetic wraps (two's complement); `/` truncates toward zero;
//    division or remainder by zero yields 0 rather than trapping.
//  - Comparisons take two numbers (or two bools for == and !=) and give bool;
//    && || ! take bools only.
//  - exp exp2 log tanh sigmoid sqrt take numbers and give f32.
//  - Buffers are indexed by an integer; parameters and buffers have the
//    element type they were declared with (i32, i64 or f32).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_EXPR_H
#define FLASHJIT_FRONTEND_EXPR_H

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Types.h"

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace flashjit {

/// The kinds of expression node (LLVM-style RTTI through classof()).
enum class ExprKind : uint8_t {
  Constant,
  Index,
  Score,
  Param,
  BufferLoad,
  Unary,
  Binary,
  Select,
  Cast
};

/// The integer leaves: which index of the attention problem a node reads.
enum class IndexVar : uint8_t { Batch, Head, QIdx, KvIdx, SeqlenQ, SeqlenK };

/// Unary operators and functions of one argument.
enum class UnaryOp : uint8_t {
  Neg,
  Not,
  Abs,
  Exp,
  Exp2,
  Log,
  Tanh,
  Sigmoid,
  Sqrt
};

/// Binary operators and functions of two arguments.
enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Rem,
  Min,
  Max,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  And,
  Or
};

/// Canonical spelling of an index leaf ("batch", "q_idx", ...).
std::string_view toString(IndexVar var);
/// Canonical spelling of a unary op ("-", "!", "abs", "exp", ...).
std::string_view toString(UnaryOp op);
/// Canonical spelling of a binary op ("+", "&&", "min", ...).
std::string_view toString(BinaryOp op);
/// True for ops printed as functions (`min(a, b)`) rather than infix.
bool isFunctionLike(BinaryOp op);
/// True for == != < <= > >=.
bool isComparison(BinaryOp op);

class ExprNode;

/// A handle to an immutable, ref-counted node (default: null); copies share
/// it. Thread-safe: nodes never change, so share and read them anywhere.
class Expr {
public:
  Expr() = default;
  /// Wraps an existing node.
  explicit Expr(std::shared_ptr<const ExprNode> node)
      : node_(std::move(node)) {}

  /// The node; never null for an Expr built by the DSL.
  const ExprNode *get() const { return node_.get(); }
  const ExprNode *operator->() const { return node_.get(); }
  const ExprNode &operator*() const { return *node_; }
  /// True when this handle holds a node.
  bool isNull() const { return !node_; }
  /// The node's type.
  ScalarType type() const;
  /// The node's kind.
  ExprKind kind() const;

private:
  std::shared_ptr<const ExprNode> node_;
};

/// Base of every expression node. Nodes are immutable once built.
class ExprNode {
public:
  virtual ~ExprNode() = default;
  ExprKind kind() const { return kind_; }
  ScalarType type() const { return type_; }
  /// Where in the user's code this node was built.
  const std::source_location &loc() const { return loc_; }
  /// The operand list (empty for leaves).
  const std::vector<Expr> &operands() const { return operands_; }
  /// Nodes on the longest path to a leaf (a leaf has depth 1).
  int depth() const { return depth_; }

protected:
  ExprNode(ExprKind kind, ScalarType type, std::source_location loc,
           std::vector<Expr> operands = {})
      : kind_(kind), type_(type), loc_(loc), operands_(std::move(operands)) {
    for (const Expr &op : operands_)
      depth_ = std::max(depth_, op->depth() + 1);
  }

private:
  ExprKind kind_;
  ScalarType type_;
  std::source_location loc_;
  std::vector<Expr> operands_;
  int depth_ = 1;
};

/// The deepest expression a Variant, the parser and the compilers accept:
/// they walk trees recursively, and deeper ones would overflow the stack.
constexpr int kMaxExprDepth = 1000;

/// A literal: bool, i32 and i64 values are kept in intValue(), f32 values in
/// floatValue().
class ConstantExpr : public ExprNode {
public:
  ConstantExpr(ScalarType type, int64_t intValue, float floatValue,
               std::source_location loc)
      : ExprNode(ExprKind::Constant, type, loc), intValue_(intValue),
        floatValue_(floatValue) {}
  int64_t intValue() const { return intValue_; }
  float floatValue() const { return floatValue_; }
  bool boolValue() const { return intValue_ != 0; }
  static bool classof(const ExprNode *n) {
    return n->kind() == ExprKind::Constant;
  }

private:
  int64_t intValue_;
  float floatValue_;
};

/// A read of batch, head, q_idx, kv_idx, seqlen_q or seqlen_k (all i32).
class IndexExpr : public ExprNode {
public:
  IndexExpr(IndexVar var, std::source_location loc)
      : ExprNode(ExprKind::Index, ScalarType::Int32, loc), var_(var) {}
  IndexVar var() const { return var_; }
  static bool classof(const ExprNode *n) {
    return n->kind() == ExprKind::Index;
  }

private:
  IndexVar var_;
};

/// The score `scale * q . k` entering the score modifier (f32).
class ScoreExpr : public ExprNode {
public:
  explicit ScoreExpr(std::source_location loc)
      : ExprNode(ExprKind::Score, ScalarType::Float32, loc) {}
  static bool classof(const ExprNode *n) {
    return n->kind() == ExprKind::Score;
  }
};

/// A runtime scalar parameter: a kernel argument, so changing its value
/// never recompiles.
class ParamExpr : public ExprNode {
public:
  ParamExpr(std::string name, ScalarType type, std::source_location loc)
      : ExprNode(ExprKind::Param, type, loc), name_(std::move(name)) {}
  const std::string &name() const { return name_; }
  static bool classof(const ExprNode *n) {
    return n->kind() == ExprKind::Param;
  }

private:
  std::string name_;
};

/// `name[index]`: one element of a captured 1-D buffer. operands()[0] is the
/// integer index; type() is the buffer's element type.
class BufferLoadExpr : public ExprNode {
public:
  BufferLoadExpr(std::string name, ScalarType elementType, Expr index,
                 std::source_location loc)
      : ExprNode(ExprKind::BufferLoad, elementType, loc, {std::move(index)}),
        name_(std::move(name)) {}
  const std::string &name() const { return name_; }
  const Expr &index() const { return operands()[0]; }
  static bool classof(const ExprNode *n) {
    return n->kind() == ExprKind::BufferLoad;
  }

private:
  std::string name_;
};

/// A unary operator or one-argument function.
class UnaryExpr : public ExprNode {
public:
  UnaryExpr(UnaryOp op, ScalarType type, Expr operand, std::source_location loc)
      : ExprNode(ExprKind::Unary, type, loc, {std::move(operand)}), op_(op) {}
  UnaryOp op() const { return op_; }
  const Expr &operand() const { return operands()[0]; }
  static bool classof(const ExprNode *n) {
    return n->kind() == ExprKind::Unary;
  }

private:
  UnaryOp op_;
};

/// A binary operator or two-argument function; both operands have one type.
class BinaryExpr : public ExprNode {
public:
  BinaryExpr(BinaryOp op, ScalarType type, Expr lhs, Expr rhs,
             std::source_location loc)
      : ExprNode(ExprKind::Binary, type, loc, {std::move(lhs), std::move(rhs)}),
        op_(op) {}
  BinaryOp op() const { return op_; }
  const Expr &lhs() const { return operands()[0]; }
  const Expr &rhs() const { return operands()[1]; }
  static bool classof(const ExprNode *n) {
    return n->kind() == ExprKind::Binary;
  }

private:
  BinaryOp op_;
};

/// `select(cond, a, b)`: a where cond holds, else b.
class SelectExpr : public ExprNode {
public:
  SelectExpr(ScalarType type, Expr cond, Expr a, Expr b,
             std::source_location loc)
      : ExprNode(ExprKind::Select, type, loc,
                 {std::move(cond), std::move(a), std::move(b)}) {}
  const Expr &condition() const { return operands()[0]; }
  const Expr &trueValue() const { return operands()[1]; }
  const Expr &falseValue() const { return operands()[2]; }
  static bool classof(const ExprNode *n) {
    return n->kind() == ExprKind::Select;
  }
};

/// A conversion to type(). f32 -> integer truncates toward zero and
/// saturates (NaN gives 0); integer -> f32 rounds to nearest; i64 -> i32
/// wraps (keeps the low 32 bits); bool -> number gives 0 or 1.
class CastExpr : public ExprNode {
public:
  CastExpr(ScalarType type, Expr operand, std::source_location loc)
      : ExprNode(ExprKind::Cast, type, loc, {std::move(operand)}) {}
  const Expr &operand() const { return operands()[0]; }
  static bool classof(const ExprNode *n) { return n->kind() == ExprKind::Cast; }
};

/// An operand of a DSL operator: an Expr or a C++ number or bool, plus the
/// source location of the user's code (captured by the implicit conversion,
/// so operators can report where the user wrote them).
class ExprArg {
public:
  /// An existing expression.
  ExprArg(Expr e, std::source_location loc = std::source_location::current());
  /// A bool literal.
  ExprArg(bool value,
          std::source_location loc = std::source_location::current());
  /// An integer literal: i32 for signed types of at most 32 bits, i64
  /// otherwise. Throws UserError for an unsigned value above INT64_MAX.
  template <std::integral T>
  requires(!std::same_as<T, bool>)
      ExprArg(T value,
              std::source_location loc = std::source_location::current())
      : ExprArg(fromInteger(
            static_cast<int64_t>(value), std::is_signed_v<T> && sizeof(T) <= 4,
            std::is_unsigned_v<T> &&
                static_cast<uint64_t>(value) > static_cast<uint64_t>(INT64_MAX),
            loc)) {}
  /// A floating-point literal, stored as f32.
  template <std::floating_point T>
  ExprArg(T value, std::source_location loc = std::source_location::current())
      : ExprArg(fromFloat(static_cast<float>(value), loc)) {}

  const Expr &expr() const { return expr_; }
  const std::source_location &loc() const { return loc_; }

private:
  ExprArg(Expr e, std::source_location loc, int)
      : expr_(std::move(e)), loc_(loc) {}
  static ExprArg fromInteger(int64_t value, bool isI32, bool overflow,
                             std::source_location loc);
  static ExprArg fromFloat(float value, std::source_location loc);

  Expr expr_;
  std::source_location loc_;
};

//===----------------------------------------------------------------------===//
// Leaves
//===----------------------------------------------------------------------===//

/// The batch index, in [0, batch).
extern const Expr batch;
/// The query head index, in [0, heads_q).
extern const Expr head;
/// The query position, in [0, seqlen_q).
extern const Expr q_idx;
/// The key/value position, in [0, seqlen_k).
extern const Expr kv_idx;
/// The number of queries of the current sequence.
extern const Expr seqlen_q;
/// The number of keys of the current sequence.
extern const Expr seqlen_k;
/// The score `scale * q . k` (f32); only the score modifier may read it.
extern const Expr score;

/// A literal of the given type (bool, i32 and i64 take \p intValue, f32 takes
/// \p floatValue).
Expr constant(ScalarType type, int64_t intValue, float floatValue,
              std::source_location loc = std::source_location::current());

/// A runtime scalar parameter named \p name of type \p type (i32, i64 or
/// f32): a kernel argument whose value is given at run time, so changing it
/// never recompiles. Throws UserError for a name that is not an identifier
/// or a bool type.
Expr param(std::string_view name, ScalarType type,
           std::source_location loc = std::source_location::current());

/// The ScalarType of a C++ element type (int32_t, int64_t, float).
template <class T> constexpr ScalarType scalarTypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return ScalarType::Float32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ScalarType::Int64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ScalarType::Int32;
  else
    static_assert(sizeof(T) == 0, "DSL parameters and buffers hold int32_t, "
                                  "int64_t or float");
}

/// `param<float>("softcap")`: a runtime parameter of C++ type T.
template <class T>
Expr param(std::string_view name,
           std::source_location loc = std::source_location::current()) {
  return param(name, scalarTypeOf<T>(), loc);
}

/// A captured 1-D buffer (e.g. per-token document ids or per-head slopes);
/// `buf[i]` reads element i. Its data is supplied at run time.
class Buffer {
public:
  /// Throws UserError for a name that is not an identifier or a bool type.
  Buffer(std::string_view name, ScalarType elementType,
         std::source_location loc = std::source_location::current());
  const std::string &name() const { return name_; }
  ScalarType elementType() const { return elementType_; }
  /// One element; throws UserError if \p index is not an integer.
  Expr operator[](ExprArg index) const;

private:
  std::string name_;
  ScalarType elementType_;
};

/// `buffer<int32_t>("doc_id")[q_idx]`: a buffer of C++ element type T.
template <class T>
Buffer buffer(std::string_view name,
              std::source_location loc = std::source_location::current()) {
  return Buffer(name, scalarTypeOf<T>(), loc);
}

//===----------------------------------------------------------------------===//
// Operators and builtins. Each throws UserError (at the user's line) when the
// operand types do not fit the rules in this file's header.
//===----------------------------------------------------------------------===//

Expr operator+(ExprArg a, ExprArg b);
Expr operator-(ExprArg a, ExprArg b);
Expr operator*(ExprArg a, ExprArg b);
Expr operator/(ExprArg a, ExprArg b);
Expr operator%(ExprArg a, ExprArg b);
Expr operator==(ExprArg a, ExprArg b);
Expr operator!=(ExprArg a, ExprArg b);
Expr operator<(ExprArg a, ExprArg b);
Expr operator<=(ExprArg a, ExprArg b);
Expr operator>(ExprArg a, ExprArg b);
Expr operator>=(ExprArg a, ExprArg b);
Expr operator&&(ExprArg a, ExprArg b);
Expr operator||(ExprArg a, ExprArg b);
Expr operator-(ExprArg a);
Expr operator!(ExprArg a);

/// The smaller of two numbers.
Expr min(ExprArg a, ExprArg b);
/// The larger of two numbers.
Expr max(ExprArg a, ExprArg b);
/// |a| (integers wrap: abs(INT32_MIN) == INT32_MIN).
Expr abs(ExprArg a);
/// e^a (f32).
Expr exp(ExprArg a);
/// 2^a (f32).
Expr exp2(ExprArg a);
/// Natural logarithm (f32).
Expr log(ExprArg a);
/// Hyperbolic tangent (f32).
Expr tanh(ExprArg a);
/// 1 / (1 + e^-a) (f32).
Expr sigmoid(ExprArg a);
/// Square root (f32).
Expr sqrt(ExprArg a);
/// `cond ? a : b`; \p cond must be bool, \p a and \p b are promoted to one
/// type.
Expr select(ExprArg cond, ExprArg a, ExprArg b);
/// Conversion to \p type (see CastExpr). Converting to bool is an error
/// (compare with 0 instead).
Expr cast(ScalarType type, ExprArg a);
/// `cast<float>(e)`, `cast<int64_t>(e)`, `cast<int32_t>(e)`.
template <class T> Expr cast(ExprArg a) { return cast(scalarTypeOf<T>(), a); }

/// Builds a node of the given operator with the DSL's type rules; used by
/// the parser and by the operators above. \p loc is the user's location.
Expr makeUnary(UnaryOp op, const Expr &a, std::source_location loc);
/// See makeUnary().
Expr makeBinary(BinaryOp op, const Expr &a, const Expr &b,
                std::source_location loc);

/// Structural equality: same kinds, types, operators, names and constants
/// (floats compared bit for bit; literals keep one NaN per sign, since the
/// text form spells every NaN `nan` or `-nan`), ignoring source locations.
bool structurallyEqual(const Expr &a, const Expr &b);

/// True if \p e reads the leaf `score` anywhere.
bool readsScore(const Expr &e);
/// True if \p e reads any buffer or parameter (its value then depends on
/// data, not only on indices).
bool readsData(const Expr &e);
/// True if \p e reads any buffer (`name[index]`) anywhere.
bool readsBuffer(const Expr &e);
/// True if \p e reads the index leaf \p var anywhere (block masks are
/// shared across batches or heads whose index the mask never reads).
bool readsIndex(const Expr &e, IndexVar var);

/// True for a C-style identifier ([A-Za-z_][A-Za-z0-9_]*).
bool isIdentifier(std::string_view name);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_EXPR_H
