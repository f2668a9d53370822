//===- Library.h - Standard masks and score modifiers ------------*- C++
//-*-===//
//
// The common attention variants as plain DSL expressions: nothing here is a
// special case in the compiler, which sees only the expression each helper
// returns (print it to read it). Masks return bool, score modifiers f32.
// Every node a helper builds, and every error it throws, carries the source
// location of the user's call.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_LIBRARY_H
#define FLASHJIT_FRONTEND_LIBRARY_H

#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/Variant.h"

#include <source_location>

namespace flashjit {

/// The query position moved onto the key axis by \p alignment: q_idx for
/// TopLeft, q_idx + seqlen_k - seqlen_q for BottomRight.
Expr aligned_q_idx(Alignment alignment,
                   std::source_location loc = std::source_location::current());

/// Causal mask: kv_idx <= aligned_q_idx(alignment).
Expr causal(Alignment alignment,
            std::source_location loc = std::source_location::current());

/// Sliding window (FlashAttention's window_size=(left, right)): query i sees
/// keys in [i' - left, i' + right] with i' = aligned_q_idx(alignment); the
/// bounds count tokens besides the current one, so the window holds
/// left + 1 + right keys. With \p include_current false the key at i' itself
/// is excluded. left and right may be i32 expressions (e.g. parameters);
/// constants must be >= 0 (UserError otherwise).
Expr sliding_window(ExprArg left, ExprArg right, Alignment alignment,
                    bool include_current = true,
                    std::source_location loc = std::source_location::current());

/// Prefix-LM: every query sees the first \p prefix_len keys, and the rest
/// causally (kv_idx < prefix_len || kv_idx <= aligned_q_idx(alignment)).
Expr prefix_lm(ExprArg prefix_len, Alignment alignment = Alignment::TopLeft,
               std::source_location loc = std::source_location::current());

/// Chunked attention: query and key lie in the same chunk of
/// \p chunk_size positions (q_idx / chunk_size == kv_idx / chunk_size).
/// Not causal by itself: AND it with causal() for Llama-4-style chunks.
/// A constant chunk_size must be > 0 (UserError otherwise).
Expr chunked(ExprArg chunk_size,
             std::source_location loc = std::source_location::current());

/// Tanh soft-capping (Gemma 2): cap * tanh(score / cap).
Expr softcap(ExprArg cap,
             std::source_location loc = std::source_location::current());

/// ALiBi (Press et al. 2022, "Train Short, Test Long", section 3):
/// score - slopes[head] * |q_idx - kv_idx|, with \p slopes an f32 buffer of
/// heads_q entries. Throws UserError for a non-f32 buffer.
Expr alibi(const Buffer &slopes,
           std::source_location loc = std::source_location::current());

/// Learned relative-position bias (T5/Shaw-style, clipped distance):
/// score + table[clamp(kv_idx - q_idx, -max_distance, max_distance)
/// + max_distance], with \p table an f32 buffer of 2 * max_distance + 1
/// entries. Throws UserError for a non-f32 table or max_distance < 0.
Expr relative_bias(const Buffer &table, int max_distance,
                   std::source_location loc = std::source_location::current());

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_LIBRARY_H
