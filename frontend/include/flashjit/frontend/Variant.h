//===- Variant.h - Attention variants and specs ------------------*- C++
//-*-===//
//
// A Variant is a mask predicate plus a score modifier, the two hooks of
// FlexAttention's mask_mod / score_mod. An AttentionSpec adds everything that
// fixes one compiled kernel: head dims, dtypes, the GQA grouping, an optional
// causal mask with its alignment, the softmax scale and whether LSE is
// returned.
//
// Semantics (fixed project-wide, see README.md):
//   s   = scale * q . k                      (scale defaults to 1/sqrt(d_qk))
//   s'  = score_mod(s, batch, head, q_idx, kv_idx)
//   allowed(q_idx, kv_idx) = mask(batch, head, q_idx, kv_idx) [&& causal]
//   O   = sum_allowed softmax(s') v ;  LSE = log sum_allowed exp(s')
// A query row with no allowed key gives O = 0 and LSE = -inf.
// With an attention sink (AttentionSpec::sink), the softmax denominator
// gains exp(sink[head]), a logit with no value:
//   LSE = log(exp(sink[head]) + sum_allowed exp(s')), p = exp(s' - LSE),
// and a row with no allowed key gives O = 0 and LSE = sink[head].
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_VARIANT_H
#define FLASHJIT_FRONTEND_VARIANT_H

#include "flashjit/frontend/Expr.h"

#include <concepts>
#include <optional>
#include <string>
#include <vector>

namespace flashjit {

/// A runtime parameter read by a variant: name and type.
struct ParamDecl {
  std::string name;
  ScalarType type;
  bool operator==(const ParamDecl &) const = default;
};

/// A captured buffer read by a variant: name and element type.
struct BufferDecl {
  std::string name;
  ScalarType elementType;
  bool operator==(const BufferDecl &) const = default;
};

/// A mask predicate and a score modifier (default: `true`, `score`). A
/// value type: const use from many threads is safe, setters need it alone.
class Variant {
public:
  /// \p name must be an identifier; it names the generated kernel.
  /// Throws UserError otherwise.
  explicit Variant(std::string name = "attention",
                   std::source_location loc = std::source_location::current());

  /// Sets the mask: a bool expression over batch, head, q_idx, kv_idx,
  /// seqlen_q, seqlen_k, parameters and buffers. Throws UserError (at the
  /// user's line) if it is not bool, reads `score`, or declares a parameter
  /// or buffer with a type that conflicts with the score modifier's.
  Variant &mask(ExprArg predicate);
  /// Sets the mask from `f(batch, head, q_idx, kv_idx)`.
  template <class F>
  requires std::invocable<F, Expr, Expr, Expr, Expr> Variant &
  mask(F &&f, std::source_location loc = std::source_location::current()) {
    return mask(ExprArg(Expr(f(flashjit::batch, flashjit::head, flashjit::q_idx,
                               flashjit::kv_idx)),
                        loc));
  }

  /// Sets the score modifier: a number-valued expression (promoted to f32)
  /// that may read `score`. Throws UserError if it is bool or its
  /// parameters/buffers conflict with the mask's.
  Variant &scoreMod(ExprArg modifier);
  /// Sets the score modifier from `f(score, batch, head, q_idx, kv_idx)`.
  template <class F>
  requires std::invocable<F, Expr, Expr, Expr, Expr, Expr> Variant &
  scoreMod(F &&f, std::source_location loc = std::source_location::current()) {
    return scoreMod(
        ExprArg(Expr(f(flashjit::score, flashjit::batch, flashjit::head,
                       flashjit::q_idx, flashjit::kv_idx)),
                loc));
  }

  /// The kernel name.
  const std::string &name() const { return name_; }
  /// The mask (bool).
  const Expr &maskExpr() const { return mask_; }
  /// The score modifier (f32).
  const Expr &scoreExpr() const { return score_; }
  /// Every runtime parameter read by the mask or score modifier, sorted by
  /// name (kernel ABIs rely on this order).
  std::vector<ParamDecl> params() const;
  /// Every buffer read by the mask or score modifier, sorted by name (kernel
  /// ABIs rely on this order).
  std::vector<BufferDecl> buffers() const;

private:
  std::string name_;
  Expr mask_;
  Expr score_;
};

/// Which diagonal a causal mask follows when seqlen_q != seqlen_k.
/// TopLeft: query i sees keys 0..i. BottomRight: query i sees keys
/// 0..i + seqlen_k - seqlen_q (the last query sees every key; FlashAttention
/// 2.1+ convention).
enum class Alignment : uint8_t { TopLeft, BottomRight };
/// "top_left" / "bottom_right".
std::string_view toString(Alignment a);

/// The spec's built-in causal mask (ANDed into the variant's mask).
enum class Causal : uint8_t { None, TopLeft, BottomRight };
/// "none" / "top_left" / "bottom_right".
std::string_view toString(Causal c);

/// Everything that fixes one compiled attention kernel.
///
/// Tensors: Q [batch, heads_q, seqlen_q, head_dim_qk],
/// K [batch, heads_kv, seqlen_k, head_dim_qk],
/// V [batch, heads_kv, seqlen_k, head_dim_v],
/// O [batch, heads_q, seqlen_q, head_dim_v], LSE [batch, heads_q, seqlen_q]
/// (fp32, natural log); batch and seqlens are run-time. A value type (Variant).
/// The largest head dim a spec may have: the CPU backend's limit (the GPU
/// kernels take up to kMaxGpuHeadDim). AttentionSpec::validate checks
/// head dims against [1, kMaxHeadDim].
inline constexpr int kMaxHeadDim = 512;
/// The largest head dim of the GPU kernels (validateForGpu).
inline constexpr int kMaxGpuHeadDim = 256;

struct AttentionSpec {
  /// The mask and score modifier.
  Variant variant;
  /// Head dim of Q and K (d_qk).
  int headDimQK = 128;
  /// Head dim of V and O (d_v).
  int headDimV = 128;
  /// Element types of Q, K, V and O in memory.
  DType dtypeQ = DType::BF16;
  DType dtypeK = DType::BF16;
  DType dtypeV = DType::BF16;
  DType dtypeO = DType::BF16;
  /// Query heads; query head h reads K/V head h / (headsQ / headsKV) (GQA).
  int headsQ = 1;
  /// Key/value heads; must divide headsQ.
  int headsKV = 1;
  /// An optional causal mask with its alignment, ANDed with the variant's.
  Causal causal = Causal::None;
  /// Softmax scale; nullopt means 1/sqrt(headDimQK).
  std::optional<float> scale;
  /// Whether the kernel writes LSE.
  bool returnLse = true;
  /// Whether the softmax has a learnable attention sink: a per-query-head
  /// fp32 logit sink[heads_q] (given per call, Arguments::sink) that joins
  /// the softmax denominator with no value (gpt-oss, FlashAttention-4's
  /// learnable_sink): LSE = log(exp(sink[h]) + sum_allowed exp(s')). A sink
  /// of -inf is no sink for that head.
  bool sink = false;

  /// The scale actually applied: *scale or 1/sqrt(headDimQK).
  float effectiveScale() const;
  /// The mask the kernel applies: the variant's mask, ANDed with the causal
  /// mask if causal != None (with `true` folded away).
  Expr effectiveMask() const;
  /// Checks every field; throws UserError naming the field and value
  /// (head dims must be in [1, kMaxHeadDim], heads positive with headsKV
  /// dividing
  /// headsQ, scale finite).
  void validate() const;
};

/// Structural equality of two specs (names, expressions, every field).
bool structurallyEqual(const AttentionSpec &a, const AttentionSpec &b);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_VARIANT_H
