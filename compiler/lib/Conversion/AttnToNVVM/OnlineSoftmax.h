//===- OnlineSoftmax.h - Online softmax on accumulator fragments -*- C++ -*-=//
//
// The online softmax of FlashAttention (Milakov & Gimelshein 2018; Dao
// 2023, Algorithm 1) over a thread's rows of the mma.sync C-fragment
// layout: thread (g, t) holds rows g and g + 8 of each of its MT m16 tiles
// (row rr = 2 * mt + r), two columns per n8 tile; the 4 threads of a row
// (t = 0..3) combine through butterfly shuffles. Scores come in log2 units
// (log2(e) folded into the scale), so every exponential is an exp2.
// Private to the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_ONLINESOFTMAX_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_ONLINESOFTMAX_H

#include "KernelOps.h"

namespace flashjit::nvvm {

/// Running statistics of a thread's 2 * MT rows: the max m (log2 units, -inf
/// before any allowed key) and this thread's partial sum l of exp2(t - m).
struct SoftmaxRows {
  llvm::SmallVector<mlir::Value, 4> m, l;
};

/// One key tile's step: \p st (MT * nS * 4 scores in log2 units, -inf where
/// masked) becomes P = exp2(st - m_new) in place; returns the new state
/// and sets \p alpha[rr] = exp2(m_old - m_new), the factor that rescales the
/// row's output accumulator. A row whose scores are all -inf so far
/// subtracts 0 instead of m (no (-inf) - (-inf) = NaN; its P is 0).
SoftmaxRows softmaxStep(KernelOps &ops, llvm::MutableArrayRef<mlir::Value> st,
                        int mTiles, int sTiles, const SoftmaxRows &old,
                        llvm::SmallVectorImpl<mlir::Value> &alpha);

/// o[(mt * nO + jd) * 4 + i] *= alpha[2 * mt + i / 2].
void rescaleRows(KernelOps &ops, llvm::MutableArrayRef<mlir::Value> o,
                 int mTiles, int oTiles, llvm::ArrayRef<mlir::Value> alpha);

/// The finished statistics of one row: the row sum l over its 4 threads,
/// whether it is empty (l = 0: no allowed key) and 1 / l (0 when empty).
struct SoftmaxFinal {
  mlir::Value l, empty, inv;
};
/// Sums this thread's partial \p l over the row's 4 threads.
SoftmaxFinal softmaxFinish(KernelOps &ops, mlir::Value l);
/// Folds an attention sink into a finished row, exactly, as one more logit
/// with no value: m' = max(m, s), l' = l exp2(m - m') + exp2(s - m'), and
/// the output factor becomes exp2(m - m') / l' (the accumulator holds sums
/// relative to m); \p m becomes m'. \p sinkLog2 is the sink in log2 units
/// (sink * log2 e); -inf adds nothing. A row with no allowed key gets
/// l' = 1, m' = s: O = 0 and LSE = sink.
SoftmaxFinal foldSink(KernelOps &ops, mlir::Value &m, const SoftmaxFinal &f,
                      mlir::Value sinkLog2);
/// LSE = (m + log2(l)) * ln(2), natural log; -inf for an empty row.
mlir::Value logSumExp(KernelOps &ops, mlir::Value m, const SoftmaxFinal &f);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_ONLINESOFTMAX_H
