//===- Parser.cpp - Reading expressions and specs from text ---------------===//
//
// A hand-written recursive-descent parser with C precedence:
//   ||  <  &&  <  == !=  <  < <= > >=  <  + -  <  * / %  <  unary - !
// Literals: `5` (i32), `5L` (i64), `5.0` / `5e3` / `5.0f` (f32), `true`,
// `false`, `inf`, `nan`. A '-' in front of a literal, with no space between,
// makes a negative literal; `-(x)` is negation (this is how the printer keeps
// the two apart).
//
// The helpers of Library.h are sugar: `causal(top_left)`,
// `sliding_window(128, 0, bottom_right[, false])`, `prefix_lm(16[, align])`,
// `chunked(64)`, `softcap(30.0)`, `alibi(slopes)`, `relative_bias(bias, 32)`
// and `aligned_q_idx(align)` expand to the very tree the C++ helper builds,
// so they print back as that tree and hash like it. Buffer arguments are a
// bare name (an f32 buffer) or `buffer<f32>(name)`.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Parser.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace flashjit {

namespace {

class Parser {
public:
  explicit Parser(std::string_view text) : text_(text) {}

  Expr parseWholeExpr() {
    Expr e = parseExpr();
    skipSpace();
    if (pos_ != text_.size())
      error(fmt::format("unexpected {} after the expression", charAt(pos_)));
    return e;
  }

  AttentionSpec parseWholeSpec();

  /// The character at \p pos for a message, always valid UTF-8: 'c', a
  /// whole non-ASCII character, or the byte in hex when it starts none.
  std::string charAt(size_t pos) const {
    auto c = static_cast<unsigned char>(text_[pos]);
    if (c >= 0x20 && c < 0x7f)
      return fmt::format("'{}'", static_cast<char>(c));
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    bool valid = len > 1 && pos + len <= text_.size();
    for (size_t i = 1; valid && i < len; ++i)
      valid = (static_cast<unsigned char>(text_[pos + i]) & 0xC0) == 0x80;
    if (valid)
      return fmt::format("'{}' (not ASCII)", text_.substr(pos, len));
    return fmt::format("byte 0x{:02X}", c);
  }

private:
  [[noreturn]] void error(const std::string &message) const {
    throw ParseError(message, std::string(text_), pos_ + 1);
  }
  [[noreturn]] void errorAt(size_t pos, const std::string &message) const {
    throw ParseError(message, std::string(text_), pos + 1);
  }

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  /// Consumes \p token (after spaces) if it is next.
  bool accept(std::string_view token) {
    skipSpace();
    if (text_.substr(pos_, token.size()) != token)
      return false;
    // Do not split `<=` into `<` `=`, `&&` into `&`, and so on.
    if (token.size() == 1 && pos_ + 1 < text_.size()) {
      char c = token[0], next = text_[pos_ + 1];
      if ((c == '<' || c == '>' || c == '=' || c == '!') && next == '=')
        return false;
    }
    pos_ += token.size();
    return true;
  }

  void expect(std::string_view token) {
    if (!accept(token))
      error(fmt::format("expected '{}'", token));
  }

  static bool isIdentChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (c >= '0' && c <= '9');
  }

  std::string_view peekIdentifier() {
    skipSpace();
    size_t end = pos_;
    if (end < text_.size() && isIdentChar(text_[end]) &&
        !(text_[end] >= '0' && text_[end] <= '9'))
      while (end < text_.size() && isIdentChar(text_[end]))
        ++end;
    return text_.substr(pos_, end - pos_);
  }

  std::string_view identifier() {
    std::string_view id = peekIdentifier();
    if (id.empty())
      error("expected an identifier");
    pos_ += id.size();
    return id;
  }

  ScalarType typeArgument() {
    expect("<");
    size_t at = pos_;
    std::string_view name = identifier();
    auto t = parseScalarType(name);
    if (!t || *t == ScalarType::Bool)
      errorAt(at, fmt::format("unknown type '{}' (expected i32, i64 or f32)",
                              excerpt(name)));
    expect(">");
    return *t;
  }

  /// Runs a DSL builder, turning its type errors into ParseErrors at \p at.
  template <class F> Expr build(size_t at, F &&f) {
    Expr e;
    try {
      e = f();
    } catch (const ParseError &) {
      throw;
    } catch (const UserError &err) {
      errorAt(at, err.message());
    }
    if (e->depth() > kMaxExprDepth)
      errorAt(at, fmt::format("expression nested more than {} levels deep",
                              kMaxExprDepth));
    return e;
  }

  /// Counts the parser's recursion: deeper text would overflow the stack.
  /// One level of a tree costs at most two (a parenthesised group holding a
  /// unary operator, as the canonical text prints negation), so the limit is
  /// twice the tree's; build() enforces the tree's own.
  struct DepthGuard {
    Parser &p;
    explicit DepthGuard(Parser &p) : p(p) {
      if (++p.depth_ > 2 * kMaxExprDepth)
        p.error(fmt::format("expression nested more than {} levels deep",
                            kMaxExprDepth));
    }
    ~DepthGuard() { --p.depth_; }
  };

  Expr parseExpr() {
    DepthGuard guard(*this);
    return parseOr();
  }

  Expr parseOr() {
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

  Expr parseAnd() {
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

  Expr parseEquality() {
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

  Expr parseRelational() {
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

  Expr parseAdditive() {
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

  Expr parseMultiplicative() {
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

  Expr parseUnary() {
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

  /// True if a number, `inf` or `nan` starts exactly at \p at.
  bool startsLiteral(size_t at) const {
    if (at >= text_.size())
      return false;
    if (text_[at] >= '0' && text_[at] <= '9')
      return true;
    std::string_view word = text_.substr(at, 3);
    return (word == "inf" || word == "nan") &&
           (at + 3 >= text_.size() || !isIdentChar(text_[at + 3]));
  }

  Expr parseLiteral(bool negative, size_t at) {
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

  Expr parsePrimary() {
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

  /// What one argument of a library helper is.
  enum class ArgKind {
    IntExpr,   ///< an integer expression (a constant is range-checked)
    NumExpr,   ///< a numeric expression
    Align,     ///< top_left | bottom_right
    Bool,      ///< true | false
    BufferRef, ///< a buffer: `name` or `buffer<f32>(name)`, no subscript
    IntConst,  ///< an integer literal
  };

  /// One parsed argument of a library helper and its column.
  struct LibArg {
    size_t at = 0;
    Expr expr;
    Alignment align = Alignment::TopLeft;
    bool flag = false;
    std::string bufferName;
    ScalarType bufferType = ScalarType::Float32;
    int64_t value = 0;
  };

  /// One library helper's signature: its argument kinds (the first
  /// \c required are required) and the usage line its errors quote.
  struct LibSig {
    std::string_view name;
    std::vector<ArgKind> kinds;
    size_t required;
    std::string_view usage;
  };

  static const std::vector<LibSig> &librarySignatures() {
    static const std::vector<LibSig> sigs = {
        {"causal", {ArgKind::Align}, 1, "causal(top_left|bottom_right)"},
        {"aligned_q_idx",
         {ArgKind::Align},
         1,
         "aligned_q_idx(top_left|bottom_right)"},
        {"sliding_window",
         {ArgKind::IntExpr, ArgKind::IntExpr, ArgKind::Align, ArgKind::Bool},
         3,
         "sliding_window(left, right, top_left|bottom_right[, "
         "include_current=true|false])"},
        {"prefix_lm",
         {ArgKind::IntExpr, ArgKind::Align},
         1,
         "prefix_lm(prefix_len[, top_left|bottom_right])"},
        {"chunked", {ArgKind::IntExpr}, 1, "chunked(chunk_size)"},
        {"softcap", {ArgKind::NumExpr}, 1, "softcap(cap)"},
        {"alibi", {ArgKind::BufferRef}, 1, "alibi(slopes_buffer)"},
        {"relative_bias",
         {ArgKind::BufferRef, ArgKind::IntConst},
         2,
         "relative_bias(table_buffer, max_distance)"},
    };
    return sigs;
  }

  /// The argument names the helpers' own messages use, for the checks made
  /// here at the argument's column.
  static std::string_view argName(std::string_view helper, size_t i) {
    if (helper == "sliding_window")
      return i == 0 ? "left" : "right";
    if (helper == "prefix_lm")
      return "prefix_len";
    if (helper == "chunked")
      return "chunk_size";
    return "argument";
  }

  LibArg parseLibArg(const LibSig &sig, size_t i) {
    skipSpace();
    LibArg a;
    a.at = pos_;
    switch (sig.kinds[i]) {
    case ArgKind::IntExpr:
    case ArgKind::NumExpr: {
      a.expr = parseExpr();
      ScalarType t = a.expr.type();
      bool isInt = sig.kinds[i] == ArgKind::IntExpr;
      if (isInt ? !isInteger(t) : t == ScalarType::Bool)
        errorAt(a.at,
                fmt::format("{} {} must be {}, got {}", sig.name,
                            isInt ? argName(sig.name, i) : "cap",
                            isInt ? "an integer" : "a number", toString(t)));
      if (auto *c = llvm::dyn_cast<ConstantExpr>(a.expr.get()); c && isInt) {
        int64_t minimum = sig.name == "chunked" ? 1 : 0;
        if (c->intValue() < minimum)
          errorAt(a.at,
                  fmt::format("{} {} = {} must be >= {}", sig.name,
                              argName(sig.name, i), c->intValue(), minimum));
      }
      return a;
    }
    case ArgKind::Align: {
      std::string_view v = peekIdentifier();
      if (v == "top_left" || v == "bottom_right") {
        pos_ += v.size();
        a.align = v == "top_left" ? Alignment::TopLeft : Alignment::BottomRight;
        return a;
      }
      errorAt(a.at, fmt::format("{}: expected an alignment, top_left or "
                                "bottom_right, got {} (usage: {})",
                                sig.name, describeNext(), sig.usage));
    }
    case ArgKind::Bool: {
      std::string_view v = peekIdentifier();
      if (v == "true" || v == "false") {
        pos_ += v.size();
        a.flag = v == "true";
        return a;
      }
      errorAt(a.at, fmt::format("{}: include_current must be true or false, "
                                "got {} (usage: {})",
                                sig.name, describeNext(), sig.usage));
    }
    case ArgKind::BufferRef: {
      std::string_view v = peekIdentifier();
      if (v.empty())
        errorAt(a.at, fmt::format("{}: expected a buffer name, got {} (usage: "
                                  "{})",
                                  sig.name, describeNext(), sig.usage));
      pos_ += v.size();
      if (v == "buffer") {
        a.bufferType = typeArgument();
        expect("(");
        a.bufferName = identifier();
        expect(")");
      } else {
        a.bufferName = v;
      }
      if (a.bufferType != ScalarType::Float32)
        errorAt(a.at,
                fmt::format("{} buffer '{}' must be f32, got {}", sig.name,
                            a.bufferName, toString(a.bufferType)));
      return a;
    }
    case ArgKind::IntConst: {
      Expr e = parseExpr();
      auto *c = llvm::dyn_cast<ConstantExpr>(e.get());
      if (!c || c->type() != ScalarType::Int32)
        errorAt(a.at, fmt::format("{} max_distance must be an i32 literal, "
                                  "got '{}'",
                                  sig.name, excerpt(printExpr(e))));
      if (c->intValue() < 0)
        errorAt(a.at, fmt::format("{} max_distance = {} must be >= 0", sig.name,
                                  c->intValue()));
      a.value = c->intValue();
      return a;
    }
    }
    throw InternalError("unknown library argument kind");
  }

  /// The next token for a message: a quoted identifier or character, or
  /// "the end of the text".
  std::string describeNext() {
    skipSpace();
    if (pos_ >= text_.size())
      return "the end of the text";
    std::string_view id = peekIdentifier();
    if (!id.empty())
      return fmt::format("'{}'", excerpt(id));
    return charAt(pos_);
  }

  /// A call of a Library.h helper, expanded into the expression the C++
  /// helper builds (so it prints, and hashes, as the expansion); nullopt if
  /// \p id names no helper.
  std::optional<Expr> parseLibraryCall(std::string_view id, size_t at) {
    const LibSig *sig = nullptr;
    for (const LibSig &s : librarySignatures())
      if (s.name == id)
        sig = &s;
    if (!sig)
      return std::nullopt;
    DepthGuard guard(*this);
    skipSpace();
    if (!accept("("))
      error(fmt::format("expected '(' after '{}' (usage: {})", id, sig->usage));
    std::vector<LibArg> args;
    skipSpace();
    if (!accept(")")) {
      do {
        skipSpace();
        if (args.size() == sig->kinds.size())
          error(fmt::format("{} takes at most {} argument{} (usage: {})", id,
                            sig->kinds.size(),
                            sig->kinds.size() == 1 ? "" : "s", sig->usage));
        args.push_back(parseLibArg(*sig, args.size()));
      } while (accept(","));
      skipSpace();
      if (!accept(")"))
        error(fmt::format("expected ',' or ')' in the arguments of {} "
                          "(usage: {})",
                          id, sig->usage));
    }
    if (args.size() < sig->required)
      errorAt(pos_ - 1,
              fmt::format("{} takes {}{} argument{}, got {} (usage: {})", id,
                          sig->required == sig->kinds.size() ? "" : "at least ",
                          sig->required, sig->required == 1 ? "" : "s",
                          args.size(), sig->usage));
    const std::source_location none;
    auto arg = [&](size_t i) { return ExprArg(args[i].expr, none); };
    return build(at, [&]() -> Expr {
      if (id == "causal")
        return causal(args[0].align, none);
      if (id == "aligned_q_idx")
        return aligned_q_idx(args[0].align, none);
      if (id == "sliding_window")
        return sliding_window(arg(0), arg(1), args[2].align,
                              args.size() < 4 || args[3].flag, none);
      if (id == "prefix_lm")
        return prefix_lm(
            arg(0), args.size() < 2 ? Alignment::TopLeft : args[1].align, none);
      if (id == "chunked")
        return chunked(arg(0), none);
      if (id == "softcap")
        return softcap(arg(0), none);
      if (id == "alibi")
        return alibi(Buffer(args[0].bufferName, args[0].bufferType, none),
                     none);
      return relative_bias(Buffer(args[0].bufferName, args[0].bufferType, none),
                           static_cast<int>(args[1].value), none);
    });
  }

  int parseIntValue() {
    skipSpace();
    size_t at = pos_;
    bool negative = accept("-");
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
      ++pos_;
    int v = 0;
    auto [p, ec] =
        std::from_chars(text_.data() + start, text_.data() + pos_, v);
    if (start == pos_ || ec != std::errc())
      errorAt(at, "expected an integer");
    (void)p;
    return negative ? -v : v;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

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
                                  "all four dtypes)",
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
                                       "fp16, bf16 or fp32)",
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
        spec.headDimQK = parseIntValue();
        if (key == "head_dim")
          spec.headDimV = spec.headDimQK;
      } else if (key == "head_dim_v") {
        spec.headDimV = parseIntValue();
      } else if (key == "dtype_q") {
        spec.dtypeQ = dtype();
      } else if (key == "dtype_k") {
        spec.dtypeK = dtype();
      } else if (key == "dtype_v") {
        spec.dtypeV = dtype();
      } else if (key == "dtype_o") {
        spec.dtypeO = dtype();
      } else if (key == "dtype") {
        spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = dtype();
      } else if (key == "heads_q") {
        spec.headsQ = parseIntValue();
      } else if (key == "heads_kv") {
        spec.headsKV = parseIntValue();
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

} // namespace

Expr parseExpr(std::string_view text) { return Parser(text).parseWholeExpr(); }

AttentionSpec parseSpec(std::string_view text) {
  return Parser(text).parseWholeSpec();
}

} // namespace flashjit
