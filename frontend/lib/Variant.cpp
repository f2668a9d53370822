//===- Variant.cpp - Variants and attention specs -------------------------===//
#include "flashjit/frontend/Variant.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Library.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <cmath>
#include <map>

namespace flashjit {

namespace {
/// Collects the parameters and buffers an expression reads, checking that a
/// name is used with one type and as one kind of thing.
struct DeclCollector {
  std::map<std::string, ParamDecl> params;
  std::map<std::string, BufferDecl> buffers;

  void visit(const Expr &e) {
    if (auto *p = llvm::dyn_cast<ParamExpr>(e.get())) {
      if (buffers.count(p->name()))
        throw UserError(fmt::format("'{}' is used both as a buffer and as a "
                                    "parameter",
                                    p->name()),
                        p->loc());
      auto [it, inserted] =
          params.try_emplace(p->name(), ParamDecl{p->name(), p->type()});
      if (!inserted && it->second.type != p->type())
        throw UserError(fmt::format("parameter '{}' is used as {} and as {}",
                                    p->name(), toString(it->second.type),
                                    toString(p->type())),
                        p->loc());
    } else if (auto *b = llvm::dyn_cast<BufferLoadExpr>(e.get())) {
      if (params.count(b->name()))
        throw UserError(fmt::format("'{}' is used both as a parameter and as "
                                    "a buffer",
                                    b->name()),
                        b->loc());
      auto [it, inserted] =
          buffers.try_emplace(b->name(), BufferDecl{b->name(), b->type()});
      if (!inserted && it->second.elementType != b->type())
        throw UserError(fmt::format("buffer '{}' is used with element type {} "
                                    "and {}",
                                    b->name(), toString(it->second.elementType),
                                    toString(b->type())),
                        b->loc());
    }
    for (const Expr &op : e->operands())
      visit(op);
  }
};
} // namespace

Variant::Variant(std::string name, std::source_location loc)
    : name_(std::move(name)),
      mask_(constant(ScalarType::Bool, 1, 0.0f, std::source_location())),
      score_(flashjit::score) {
  if (!isIdentifier(name_))
    throw UserError(fmt::format("variant name '{}' is not an identifier "
                                "([A-Za-z_][A-Za-z0-9_]*)",
                                name_),
                    loc);
}

/// Throws if \p e is deeper than kMaxExprDepth.
static void checkDepth(const Expr &e, const char *what,
                       std::source_location loc) {
  if (e->depth() > kMaxExprDepth)
    throw UserError(fmt::format("the {} is nested {} levels deep; at most {} "
                                "are supported",
                                what, e->depth(), kMaxExprDepth),
                    loc);
}

Variant &Variant::mask(ExprArg predicate) {
  const Expr &e = predicate.expr();
  checkDepth(e, "mask", predicate.loc());
  if (e.type() != ScalarType::Bool)
    throw UserError(fmt::format("the mask must be a bool expression, got {}",
                                toString(e.type())),
                    predicate.loc());
  if (readsScore(e))
    throw UserError("the mask cannot read 'score' (it depends on indices, "
                    "parameters and buffers only; change scores in the score "
                    "modifier)",
                    predicate.loc());
  DeclCollector c;
  c.visit(score_);
  c.visit(e);
  mask_ = e;
  return *this;
}

Variant &Variant::scoreMod(ExprArg modifier) {
  Expr e = modifier.expr();
  checkDepth(e, "score modifier", modifier.loc());
  if (e.type() == ScalarType::Bool)
    throw UserError("the score modifier must be a number, got bool (masks go "
                    "in mask())",
                    modifier.loc());
  if (e.type() != ScalarType::Float32)
    e = cast(ScalarType::Float32, ExprArg(e, modifier.loc()));
  DeclCollector c;
  c.visit(mask_);
  c.visit(e);
  score_ = e;
  return *this;
}

std::vector<ParamDecl> Variant::params() const {
  DeclCollector c;
  c.visit(mask_);
  c.visit(score_);
  std::vector<ParamDecl> out;
  for (auto &[name, d] : c.params)
    out.push_back(d);
  return out;
}

std::vector<BufferDecl> Variant::buffers() const {
  DeclCollector c;
  c.visit(mask_);
  c.visit(score_);
  std::vector<BufferDecl> out;
  for (auto &[name, d] : c.buffers)
    out.push_back(d);
  return out;
}

std::string_view toString(Alignment a) {
  return a == Alignment::TopLeft ? "top_left" : "bottom_right";
}

std::string_view toString(Causal c) {
  switch (c) {
  case Causal::None:
    return "none";
  case Causal::TopLeft:
    return "top_left";
  case Causal::BottomRight:
    return "bottom_right";
  }
  throw InternalError("unknown Causal");
}

float AttentionSpec::effectiveScale() const {
  if (scale)
    return *scale;
  return 1.0f / std::sqrt(static_cast<float>(headDimQK));
}

Expr AttentionSpec::effectiveMask() const {
  const Expr &m = variant.maskExpr();
  if (causal == Causal::None)
    return m;
  Expr c = flashjit::causal(causal == Causal::TopLeft ? Alignment::TopLeft
                                                      : Alignment::BottomRight);
  if (auto *k = llvm::dyn_cast<ConstantExpr>(m.get()); k && k->boolValue())
    return c;
  return m && c;
}

void AttentionSpec::validate() const {
  auto checkDim = [](const char *field, int value) {
    if (value < 1 || value > kMaxHeadDim)
      throw UserError(fmt::format("{} = {} is out of range [1, {}] (the "
                                  "CPU backend's limit; the GPU kernels "
                                  "take up to {})",
                                  field, value, kMaxHeadDim, kMaxGpuHeadDim),
                      std::source_location());
  };
  checkDim("head_dim_qk", headDimQK);
  checkDim("head_dim_v", headDimV);
  if (headsQ < 1)
    throw UserError(fmt::format("heads_q = {} must be positive", headsQ),
                    std::source_location());
  if (headsKV < 1)
    throw UserError(fmt::format("heads_kv = {} must be positive", headsKV),
                    std::source_location());
  if (headsQ % headsKV != 0)
    throw UserError(fmt::format("heads_kv = {} must divide heads_q = {} (GQA)",
                                headsKV, headsQ),
                    std::source_location());
  if (scale && !std::isfinite(*scale))
    throw UserError(fmt::format("scale = {} must be finite", *scale),
                    std::source_location());
  if (isFp8(dtypeO))
    throw UserError(fmt::format("dtype_o = {}: fp8 output is not supported "
                                "(fp8 is for q, k, v with descales; o is "
                                "bf16, fp16 or fp32)",
                                toString(dtypeO)),
                    std::source_location());
  if (variant.maskExpr().type() != ScalarType::Bool)
    throw UserError("the mask must be a bool expression",
                    std::source_location());
}

bool structurallyEqual(const AttentionSpec &a, const AttentionSpec &b) {
  auto sameScale = [](const std::optional<float> &x,
                      const std::optional<float> &y) {
    if (x.has_value() != y.has_value())
      return false;
    return !x || std::bit_cast<uint32_t>(*x) == std::bit_cast<uint32_t>(*y);
  };
  return a.variant.name() == b.variant.name() &&
         structurallyEqual(a.variant.maskExpr(), b.variant.maskExpr()) &&
         structurallyEqual(a.variant.scoreExpr(), b.variant.scoreExpr()) &&
         a.headDimQK == b.headDimQK && a.headDimV == b.headDimV &&
         a.dtypeQ == b.dtypeQ && a.dtypeK == b.dtypeK && a.dtypeV == b.dtypeV &&
         a.dtypeO == b.dtypeO && a.headsQ == b.headsQ &&
         a.headsKV == b.headsKV && a.causal == b.causal &&
         sameScale(a.scale, b.scale) && a.returnLse == b.returnLse &&
         a.sink == b.sink;
}

} // namespace flashjit
