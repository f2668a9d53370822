//===- Parser.cpp - Reading expressions and specs from text ---------------===//
//
// A hand-written recursive-descent parser with C precedence:
//   ||  <  &&  <  == !=  <  < <= > >=  <  + -  <  * / %  <  unary - !
// Literals: `5` (i32), `5L` (i64), `5.0` / `5e3` / `5.0f` (f32), `true`,
// `false`, `inf`, `nan`. A '-' in front of a literal, with no space between,
// makes a negative literal; `-(x)` is negation (this is how the printer keeps
// the two apart).
//
// The helpers of Library.h are sugar (ParserLibrary.cpp): `causal(top_left)`,
// `sliding_window(128, 0, bottom_right[, false])`, `prefix_lm(16[, align])`,
// `chunked(64)`, `softcap(30.0)`, `alibi(slopes)`, `relative_bias(bias, 32)`
// and `aligned_q_idx(align)` expand to the very tree the C++ helper builds,
// so they print back as that tree and hash like it. Buffer arguments are a
// bare name (an f32 buffer) or `buffer<f32>(name)`. The parser's class is in
// ParserImpl.h.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Parser.h"

#include "ParserImpl.h"

#include <llvm/Support/Casting.h>

#include <charconv>
#include <cmath>
#include <limits>

namespace flashjit {
namespace detail {

Expr Parser::parseExpr() {
  DepthGuard guard(*this);
  return parseOr();
}

Expr Parser::parseOr() {
  Expr lhs = parseAnd();
  for (;;) {
    skipSpace();
    size_t at = pos_;
    if (!accept("||"))
      return lhs;
    Expr rhs = parseAnd();
    lhs = build(at, [&] { return makeBinary(BinaryOp::Or, lhs, rhs, {}); });
  }
}

Expr Parser::parseAnd() {
  Expr lhs = parseEquality();
  for (;;) {
    skipSpace();
    size_t at = pos_;
    if (!accept("&&"))
      return lhs;
    Expr rhs = parseEquality();
    lhs = build(at, [&] { return makeBinary(BinaryOp::And, lhs, rhs, {}); });
  }
}

Expr Parser::parseEquality() {
  Expr lhs = parseRelational();
  for (;;) {
    skipSpace();
    size_t at = pos_;
    BinaryOp op;
    if (accept("=="))
      op = BinaryOp::Eq;
    else if (accept("!="))
      op = BinaryOp::Ne;
    else
      return lhs;
    Expr rhs = parseRelational();
    lhs = build(at, [&] { return makeBinary(op, lhs, rhs, {}); });
  }
}

Expr Parser::parseRelational() {
  Expr lhs = parseAdditive();
  for (;;) {
    skipSpace();
    size_t at = pos_;
    BinaryOp op;
    if (accept("<="))
      op = BinaryOp::Le;
    else if (accept(">="))
      op = BinaryOp::Ge;
    else if (accept("<"))
      op = BinaryOp::Lt;
    else if (accept(">"))
      op = BinaryOp::Gt;
    else
      return lhs;
    Expr rhs = parseAdditive();
    lhs = build(at, [&] { return makeBinary(op, lhs, rhs, {}); });
  }
}

Expr Parser::parseAdditive() {
  Expr lhs = parseMultiplicative();
  for (;;) {
    skipSpace();
    size_t at = pos_;
    BinaryOp op;
    if (accept("+"))
      op = BinaryOp::Add;
    else if (accept("-"))
      op = BinaryOp::Sub;
    else
      return lhs;
    Expr rhs = parseMultiplicative();
    lhs = build(at, [&] { return makeBinary(op, lhs, rhs, {}); });
  }
}

Expr Parser::parseMultiplicative() {
  Expr lhs = parseUnary();
  for (;;) {
    skipSpace();
    size_t at = pos_;
    BinaryOp op;
    if (accept("*"))
      op = BinaryOp::Mul;
    else if (accept("/"))
      op = BinaryOp::Div;
    else if (accept("%"))
      op = BinaryOp::Rem;
    else
      return lhs;
    Expr rhs = parseUnary();
    lhs = build(at, [&] { return makeBinary(op, lhs, rhs, {}); });
  }
}

Expr Parser::parseUnary() {
  skipSpace();
  size_t at = pos_;
  // One level per unary operator, as parseExpr counts one per parenthesis
  // or argument: the text of a tree of depth d nests at most d levels.
  if (accept("-")) {
    // A '-' glued to a literal is part of the literal.
    if (startsLiteral(pos_))
      return parseLiteral(/*negative=*/true, at);
    DepthGuard guard(*this);
    Expr operand = parseUnary();
    return build(at, [&] { return makeUnary(UnaryOp::Neg, operand, {}); });
  }
  if (accept("!")) {
    DepthGuard guard(*this);
    Expr operand = parseUnary();
    return build(at, [&] { return makeUnary(UnaryOp::Not, operand, {}); });
  }
  return parsePrimary();
}

bool Parser::startsLiteral(size_t at) const {
  if (at >= text_.size())
    return false;
  if (text_[at] >= '0' && text_[at] <= '9')
    return true;
  std::string_view word = text_.substr(at, 3);
  return (word == "inf" || word == "nan") &&
         (at + 3 >= text_.size() || !isIdentChar(text_[at + 3]));
}

Expr Parser::parseLiteral(bool negative, size_t at) {
  skipSpace();
  std::string_view id = peekIdentifier();
  if (id == "inf" || id == "nan") {
    pos_ += 3;
    float v = id == "inf" ? std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::quiet_NaN();
    return constant(ScalarType::Float32, 0, negative ? -v : v, {});
  }
  size_t start = pos_;
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
    ++pos_;
  bool isFloat = false;
  if (pos_ < text_.size() && text_[pos_] == '.') {
    isFloat = true;
    ++pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
      ++pos_;
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    isFloat = true;
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
      ++pos_;
    size_t digits = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
      ++pos_;
    if (digits == pos_)
      errorAt(at, "malformed exponent in a number");
  }
  std::string_view body = text_.substr(start, pos_ - start);
  if (isFloat) {
    if (pos_ < text_.size() && text_[pos_] == 'f')
      ++pos_;
    float v = 0;
    auto [p, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
    if (ec == std::errc::result_out_of_range)
      errorAt(at, fmt::format("'{}' is out of range for f32", excerpt(body)));
    if (ec != std::errc() || p != body.data() + body.size())
      errorAt(at, fmt::format("malformed number '{}'", excerpt(body)));
    return constant(ScalarType::Float32, 0, negative ? -v : v, {});
  }
  uint64_t magnitude = 0;
  auto [p, ec] =
      std::from_chars(body.data(), body.data() + body.size(), magnitude);
  if (ec != std::errc() || p != body.data() + body.size())
    errorAt(at, fmt::format("integer literal '{}' is malformed or too large",
                            excerpt(body)));
  bool isI64 = pos_ < text_.size() && text_[pos_] == 'L';
  if (isI64)
    ++pos_;
  if (pos_ < text_.size() && isIdentChar(text_[pos_]))
    errorAt(at, fmt::format("malformed number '{}'",
                            excerpt(text_.substr(start, pos_ + 1 - start))));
  uint64_t limit =
      isI64 ? (negative ? 9223372036854775808ull : 9223372036854775807ull)
            : (negative ? 2147483648ull : 2147483647ull);
  if (magnitude > limit)
    errorAt(at, fmt::format("integer literal {}{} does not fit in {}{}",
                            negative ? "-" : "", body, isI64 ? "i64" : "i32",
                            isI64 ? "" : " (write it with an L suffix)"));
  int64_t value = negative ? static_cast<int64_t>(0 - magnitude)
                           : static_cast<int64_t>(magnitude);
  return constant(isI64 ? ScalarType::Int64 : ScalarType::Int32, value, 0.0f,
                  {});
}

Expr Parser::parsePrimary() {
  skipSpace();
  size_t at = pos_;
  if (pos_ >= text_.size())
    error("unexpected end of text, expected an expression");
  char c = text_[pos_];
  if (c >= '0' && c <= '9')
    return parseLiteral(false, at);
  if (accept("(")) {
    Expr e = parseExpr();
    expect(")");
    return e;
  }
  std::string_view id = peekIdentifier();
  if (id.empty())
    error(fmt::format("unexpected {}, expected an expression", charAt(pos_)));
  pos_ += id.size();
  if (id == "true" || id == "false")
    return constant(ScalarType::Bool, id == "true", 0.0f, {});
  if (id == "inf" || id == "nan") {
    pos_ = at;
    return parseLiteral(false, at);
  }
  if (id == "score")
    return score;
  for (IndexVar v : {IndexVar::Batch, IndexVar::Head, IndexVar::QIdx,
                     IndexVar::KvIdx, IndexVar::SeqlenQ, IndexVar::SeqlenK})
    if (id == toString(v))
      return Expr(std::make_shared<IndexExpr>(v, std::source_location()));
  if (id == "param") {
    ScalarType t = typeArgument();
    expect("(");
    size_t nameAt = pos_;
    std::string name(identifier());
    expect(")");
    return build(nameAt, [&] { return param(name, t, {}); });
  }
  if (id == "buffer") {
    ScalarType t = typeArgument();
    expect("(");
    size_t nameAt = pos_;
    std::string name(identifier());
    expect(")");
    expect("[");
    Expr index = parseExpr();
    expect("]");
    return build(nameAt,
                 [&] { return Buffer(name, t, {})[ExprArg(index, {})]; });
  }
  if (id == "cast") {
    ScalarType t = typeArgument();
    expect("(");
    Expr operand = parseExpr();
    expect(")");
    return build(at, [&] { return cast(t, ExprArg(operand, {})); });
  }
  if (id == "select") {
    expect("(");
    Expr cond = parseExpr();
    expect(",");
    Expr a = parseExpr();
    expect(",");
    Expr b = parseExpr();
    expect(")");
    return build(at, [&] {
      return select(ExprArg(cond, {}), ExprArg(a, {}), ExprArg(b, {}));
    });
  }
  if (id == "min" || id == "max") {
    expect("(");
    Expr a = parseExpr();
    expect(",");
    Expr b = parseExpr();
    expect(")");
    BinaryOp op = id == "min" ? BinaryOp::Min : BinaryOp::Max;
    return build(at, [&] { return makeBinary(op, a, b, {}); });
  }
  for (UnaryOp op : {UnaryOp::Abs, UnaryOp::Exp, UnaryOp::Exp2, UnaryOp::Log,
                     UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Sqrt}) {
    if (id != toString(op))
      continue;
    expect("(");
    Expr a = parseExpr();
    expect(")");
    return build(at, [&] { return makeUnary(op, a, {}); });
  }
  if (std::optional<Expr> e = parseLibraryCall(id, at))
    return *e;
  errorAt(at, fmt::format("unknown identifier '{}'", excerpt(id)));
}

int Parser::parseIntValue(std::string_view field) {
  skipSpace();
  size_t at = pos_;
  bool negative = accept("-");
  skipSpace();
  size_t start = pos_;
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
    ++pos_;
  if (start == pos_)
    errorAt(at, fmt::format("expected an integer for {}", field));
  // Every digit string is a value: one past int's range is a range error
  // naming the field (spec.validate() then checks the field's own range).
  std::string_view digits = text_.substr(start, pos_ - start);
  uint64_t magnitude = 0;
  auto [p, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  (void)p;
  uint64_t limit = negative ? uint64_t(1) << 31 : (uint64_t(1) << 31) - 1;
  if (ec != std::errc() || magnitude > limit)
    errorAt(at, fmt::format("{} = {}{} is out of range (a 32-bit int)", field,
                            negative ? "-" : "", excerpt(digits)));
  return negative ? static_cast<int>(-static_cast<int64_t>(magnitude))
                  : static_cast<int>(magnitude);
}

AttentionSpec Parser::parseWholeSpec() {
  skipSpace();
  if (peekIdentifier() != "attention")
    error("a spec starts with 'attention('");
  identifier();
  expect("(");
  AttentionSpec spec;
  std::string name = "attention";
  Expr mask, scoreMod;
  std::vector<std::string> seen;
  skipSpace();
  if (!accept(")")) {
    do {
      skipSpace();
      size_t at = pos_;
      std::string key(identifier());
      for (const std::string &s : seen) {
        if (s == key)
          errorAt(at, fmt::format("field '{}' given twice", excerpt(key)));
        // head_dim sets both head dims: it cannot be mixed with either.
        bool dims =
            (s == "head_dim" &&
             (key == "head_dim_qk" || key == "head_dim_v")) ||
            (key == "head_dim" && (s == "head_dim_qk" || s == "head_dim_v"));
        if (dims)
          errorAt(at, fmt::format("field '{}' conflicts with '{}' (head_dim "
                                  "sets head_dim_qk and head_dim_v)",
                                  key, s));
        if ((s == "dtype" && key.rfind("dtype_", 0) == 0) ||
            (key == "dtype" && s.rfind("dtype_", 0) == 0))
          errorAt(at, fmt::format("field '{}' conflicts with '{}' (dtype sets "
                                  "all four dtypes; an fp8 dtype sets q/k/v "
                                  "and o = bf16)",
                                  key, s));
      }
      seen.push_back(key);
      expect("=");
      skipSpace();
      size_t valueAt = pos_;
      auto dtype = [&]() {
        std::string_view v = identifier();
        auto d = parseDType(v);
        if (!d)
          errorAt(valueAt, fmt::format("unknown dtype '{}' for {} (expected "
                                       "fp16, bf16, fp32, e4m3 or e5m2)",
                                       excerpt(v), key));
        return *d;
      };
      if (key == "name") {
        name = identifier();
      } else if (key == "mask") {
        mask = parseExpr();
      } else if (key == "score") {
        scoreMod = parseExpr();
      } else if (key == "head_dim_qk" || key == "head_dim") {
        spec.headDimQK = parseIntValue(key);
        if (key == "head_dim")
          spec.headDimV = spec.headDimQK;
      } else if (key == "head_dim_v") {
        spec.headDimV = parseIntValue(key);
      } else if (key == "dtype_q") {
        spec.dtypeQ = dtype();
      } else if (key == "dtype_k") {
        spec.dtypeK = dtype();
      } else if (key == "dtype_v") {
        spec.dtypeV = dtype();
      } else if (key == "dtype_o") {
        spec.dtypeO = dtype();
      } else if (key == "dtype") {
        // fp8 is input-only: `dtype=e4m3` gives fp8 Q/K/V and a bf16 O, as
        // FlashAttention-3's fp8 forward does.
        DType d = dtype();
        spec.dtypeQ = spec.dtypeK = spec.dtypeV = d;
        spec.dtypeO = isFp8(d) ? DType::BF16 : d;
      } else if (key == "heads_q") {
        spec.headsQ = parseIntValue(key);
      } else if (key == "heads_kv") {
        spec.headsKV = parseIntValue(key);
      } else if (key == "causal") {
        std::string_view v = identifier();
        if (v == "none")
          spec.causal = Causal::None;
        else if (v == "top_left")
          spec.causal = Causal::TopLeft;
        else if (v == "bottom_right")
          spec.causal = Causal::BottomRight;
        else
          errorAt(valueAt, fmt::format("unknown causal mode '{}' (expected "
                                       "none, top_left or bottom_right)",
                                       excerpt(v)));
      } else if (key == "scale") {
        if (peekIdentifier() == "default") {
          identifier();
          spec.scale.reset();
        } else {
          Expr v = parseUnary();
          auto *c = llvm::dyn_cast<ConstantExpr>(v.get());
          if (!c || c->type() == ScalarType::Bool)
            errorAt(valueAt, "scale must be a number or 'default'");
          spec.scale = c->type() == ScalarType::Float32
                           ? c->floatValue()
                           : static_cast<float>(c->intValue());
        }
      } else if (key == "lse") {
        std::string_view v = identifier();
        if (v != "true" && v != "false")
          errorAt(valueAt, "lse must be true or false");
        spec.returnLse = v == "true";
      } else if (key == "sink") {
        std::string_view v = identifier();
        if (v != "true" && v != "false")
          errorAt(valueAt, "sink must be true or false");
        spec.sink = v == "true";
      } else {
        errorAt(at, fmt::format("unknown field '{}'", excerpt(key)));
      }
    } while (accept(","));
    expect(")");
  }
  skipSpace();
  if (pos_ != text_.size())
    error("unexpected text after the spec");
  try {
    Variant v(name, {});
    if (!mask.isNull())
      v.mask(ExprArg(mask, {}));
    if (!scoreMod.isNull())
      v.scoreMod(ExprArg(scoreMod, {}));
    spec.variant = v;
  } catch (const ParseError &) {
    throw;
  } catch (const UserError &e) {
    // A type error of the whole mask or score: no single column to blame.
    throw UserError(fmt::format("in spec: {}", e.message()));
  }
  spec.validate();
  return spec;
}

} // namespace detail

Expr parseExpr(std::string_view text) {
  return detail::Parser(text).parseWholeExpr();
}

AttentionSpec parseSpec(std::string_view text) {
  return detail::Parser(text).parseWholeSpec();
}

} // namespace flashjit
