//===- ParserImpl.h - The recursive-descent parser's class ----*- C++ -*-===//
//
// The parser of Parser.cpp (the grammar, specs; its header comment states
// the language) and ParserLibrary.cpp (the Library.h helper sugar). Private
// to frontend/lib.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_LIB_PARSERIMPL_H
#define FLASHJIT_FRONTEND_LIB_PARSERIMPL_H

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashjit::detail {

/// Reads one expression or one spec from \p text; every error is a
/// ParseError with the 1-based column of the offending character.
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

  /// The grammar, lowest precedence first (Parser.cpp).
  Expr parseExpr();
  Expr parseOr();
  Expr parseAnd();
  Expr parseEquality();
  Expr parseRelational();
  Expr parseAdditive();
  Expr parseMultiplicative();
  Expr parseUnary();
  /// True if a number, `inf` or `nan` starts exactly at \p at.
  bool startsLiteral(size_t at) const;
  Expr parseLiteral(bool negative, size_t at);
  Expr parsePrimary();

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

  /// The helpers ParserLibrary.cpp expands, with their signatures.
  static const std::vector<LibSig> &librarySignatures();

  /// The argument names the helpers' own messages use, for the checks made
  /// here at the argument's column.
  static std::string_view argName(std::string_view helper, size_t i);

  /// Argument \p i of a call of \p sig, checked as the C++ helper would.
  LibArg parseLibArg(const LibSig &sig, size_t i);

  /// The next token for a message: a quoted identifier or character, or
  /// "the end of the text".
  std::string describeNext();

  /// A call of a Library.h helper, expanded into the expression the C++
  /// helper builds (so it prints, and hashes, as the expansion); nullopt if
  /// \p id names no helper.
  std::optional<Expr> parseLibraryCall(std::string_view id, size_t at);

  /// An optionally negative decimal int of spec field \p field; a ParseError
  /// naming the field and value where it does not fit an int.
  int parseIntValue(std::string_view field);

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

} // namespace flashjit::detail

#endif // FLASHJIT_FRONTEND_LIB_PARSERIMPL_H
