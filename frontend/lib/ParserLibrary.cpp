//===- ParserLibrary.cpp - The Library.h helpers as parser sugar ----------===//
//
// `causal(top_left)`, `sliding_window(128, 0, bottom_right[, false])`,
// `prefix_lm(16[, align])`, `chunked(64)`, `softcap(30.0)`, `alibi(slopes)`,
// `relative_bias(bias, 32)` and `aligned_q_idx(align)` expand to the very
// tree the C++ helper builds, so they print back as that tree and hash like
// it. Buffer arguments are a bare name (an f32 buffer) or
// `buffer<f32>(name)`. The rest of the parser is in Parser.cpp.
//
//===----------------------------------------------------------------------===//
#include "ParserImpl.h"

#include "flashjit/frontend/Library.h"

#include <llvm/Support/Casting.h>

namespace flashjit::detail {

const std::vector<Parser::LibSig> &Parser::librarySignatures() {
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

std::string_view Parser::argName(std::string_view helper, size_t i) {
  if (helper == "sliding_window")
    return i == 0 ? "left" : "right";
  if (helper == "prefix_lm")
    return "prefix_len";
  if (helper == "chunked")
    return "chunk_size";
  return "argument";
}

Parser::LibArg Parser::parseLibArg(const LibSig &sig, size_t i) {
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
      errorAt(a.at, fmt::format("{} buffer '{}' must be f32, got {}", sig.name,
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

std::string Parser::describeNext() {
  skipSpace();
  if (pos_ >= text_.size())
    return "the end of the text";
  std::string_view id = peekIdentifier();
  if (!id.empty())
    return fmt::format("'{}'", excerpt(id));
  return charAt(pos_);
}

std::optional<Expr> Parser::parseLibraryCall(std::string_view id, size_t at) {
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
                          sig->kinds.size(), sig->kinds.size() == 1 ? "" : "s",
                          sig->usage));
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
      return alibi(Buffer(args[0].bufferName, args[0].bufferType, none), none);
    return relative_bias(Buffer(args[0].bufferName, args[0].bufferType, none),
                         static_cast<int>(args[1].value), none);
  });
}

} // namespace flashjit::detail
