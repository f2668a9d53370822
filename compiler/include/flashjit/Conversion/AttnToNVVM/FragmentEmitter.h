//===- FragmentEmitter.h - The variant's code inside a kernel ---*- C++ -*-===//
//
// The interface through which every GPU kernel (forward, block-mask
// builder; backward and decode next) evaluates an attention variant: the
// mask and the score modifier at one element, the mask factored over a
// fragment's rows and columns, and the interval classification of a tile.
// The AttnToNVVM pass implements it once over the attn.attention regions
// (RegionEmitter), so no two kernels evaluate a variant differently.
// Internal to the compiler (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_FRAGMENTEMITTER_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_FRAGMENTEMITTER_H

#include "mlir/IR/Builders.h"

#include <utility>

namespace flashjit::nvvm {

/// Index values of one element or one tile bound, all i32.
struct IndexValues {
  mlir::Value batch, head, qIdx, kvIdx, seqlenQ, seqlenK;
  /// Null, or float(q_idx - kv_idx) (f32), exact: emitScore then takes a
  /// score modifier's sitofp(q_idx - kv_idx), sitofp(kv_idx - q_idx) and
  /// sitofp(abs(...) of either) from it instead of converting per element
  /// (setForwardScoreRowFactorsForTesting's float distance).
  mlir::Value distF = {};
};

/// One attn.buffer_grad or attn.param_grad of the backward's score_grad
/// region (the gradient of an f32 buffer element or parameter).
struct DataGradSite {
  /// A parameter's gradient (no index), else a buffer element's.
  bool param = false;
  /// Position of the parameter / buffer among the op's parameters /
  /// buffers sorted by name.
  unsigned slot = 0;
  /// Whether the buffer index depends on q_idx, on kv_idx, or on the
  /// scores (then it is treated as depending on both indices).
  bool indexUsesQ = false, indexUsesKV = false;
};

/// The value of one DataGradSite at one element: its buffer index (the
/// region's integer type; null for a parameter) and the amount to add (f32).
struct DataGradValue {
  mlir::Value index, value;
};

/// Emits the variant's code inside the kernel.
class FragmentEmitter {
public:
  virtual ~FragmentEmitter() = default;
  /// True if the score modifier is not the identity.
  virtual bool hasScoreMod() const = 0;
  /// True if the mask is not the constant true.
  virtual bool hasMask() const = 0;
  /// True if the mask / the score modifier reads buffers: the kernel then
  /// evaluates it only where the interpreter does (mask: in-range elements;
  /// score modifier: allowed elements), so no read goes out of range.
  virtual bool maskReadsBuffers() const = 0;
  virtual bool scoreReadsBuffers() const = 0;
  /// The modified score (f32) of one element; \p score is scale * q.k.
  virtual mlir::Value emitScore(mlir::OpBuilder &b, mlir::Location loc,
                                const IndexValues &idx, mlir::Value score) = 0;
  /// The mask (i1) of one element.
  virtual mlir::Value emitMask(mlir::OpBuilder &b, mlir::Location loc,
                               const IndexValues &idx) = 0;
  /// Emits, at \p b's insertion point, the parts of the mask that depend on
  /// q_idx and not kv_idx once per value in \p qIdx (buffer reads there
  /// guarded by q_idx < seqlen_q) and the parts that depend on kv_idx and not
  /// q_idx once per value in \p kvIdx (guarded by kv_idx < seqlen_k); the
  /// other indices come from \p base. Until endMaskFactors(), emitMask of
  /// an element whose q_idx and kv_idx are among these Values emits only the
  /// rest (a document mask's doc_id[q_idx] and doc_id[kv_idx] are read once
  /// per row and column instead of once per element). The same buffer
  /// elements are read as by per-element evaluation on in-range elements.
  virtual void beginMaskFactors(mlir::OpBuilder &b, mlir::Location loc,
                                const IndexValues &base,
                                llvm::ArrayRef<mlir::Value> qIdx,
                                llvm::ArrayRef<mlir::Value> kvIdx) {}
  virtual void endMaskFactors() {}
  /// True if emitMask of one element reads buffers (after beginMaskFactors:
  /// only the parts depending on both indices count).
  virtual bool maskElementReadsBuffers() const { return maskReadsBuffers(); }
  /// Emits, at \p b's insertion point, the parts of the score modifier that
  /// depend on neither the score nor kv_idx once per row (\p heads[i],
  /// \p qIdx[i]; the other indices from \p base), buffer reads there
  /// guarded by q_idx < seqlen_q. Until endScoreRowFactors(), emitScore of
  /// an element whose head and q_idx are one of these pairs emits only the
  /// rest (ALiBi's slopes[head] is read once per row instead of once per
  /// element). Only for elements that are all allowed when their row is in
  /// range (a full tile), so the same buffer elements are read as by
  /// per-element evaluation.
  virtual void beginScoreRowFactors(mlir::OpBuilder &b, mlir::Location loc,
                                    const IndexValues &base,
                                    llvm::ArrayRef<mlir::Value> heads,
                                    llvm::ArrayRef<mlir::Value> qIdx) {}
  virtual void endScoreRowFactors() {}
  /// True if emitScore of one element reads buffers (after
  /// beginScoreRowFactors: only the parts depending on the score or kv_idx
  /// count).
  virtual bool scoreElementReadsBuffers() const { return scoreReadsBuffers(); }
  /// Interval classification of a tile whose inclusive index ranges are
  /// [lo, hi] (seqlens exact): (mayBeFalse, mayBeTrue), both i1. With
  /// \p bufferRanges, integer buffer reads over short in-range index
  /// intervals scan the buffer for their range (the tile classifier's
  /// BufferReader) instead of being unknown.
  virtual std::pair<mlir::Value, mlir::Value>
  emitClassify(mlir::OpBuilder &b, mlir::Location loc, const IndexValues &lo,
               const IndexValues &hi, bool bufferRanges = false) = 0;
  /// True if the op carries a score_grad region that is not the identity
  /// (dS = dS'): the backward then evaluates it per element.
  virtual bool hasScoreGrad() const { return false; }
  /// True if the score_grad region reads the modified score s' instead of
  /// scale * q.k (attn.attention's score_grad_of_output).
  virtual bool scoreGradOfOutput() const { return false; }
  /// The buffer and parameter gradients of the score_grad region, in the
  /// region's order (each at the region's top level).
  virtual llvm::SmallVector<DataGradSite> dataGradSites() const { return {}; }
  /// dS (f32) of one element: the score_grad region on \p dScore (dS', the
  /// gradient of the modified score) and \p score (scale * q.k, or s' where
  /// scoreGradOfOutput()); appends
  /// one DataGradValue per dataGradSites() entry to \p grads instead of
  /// accumulating anything. Only called when hasScoreGrad().
  virtual mlir::Value
  emitScoreGrad(mlir::OpBuilder &b, mlir::Location loc, const IndexValues &idx,
                mlir::Value dScore, mlir::Value score,
                llvm::SmallVectorImpl<DataGradValue> &grads) {
    return dScore;
  }
  /// How many parameters and buffers extraArgumentTypes() covers.
  virtual unsigned numParams() const { return 0; }
  virtual unsigned numBuffers() const { return 0; }
  /// Types of the kernel arguments that follow the fixed ones (parameters
  /// and buffers).
  virtual llvm::SmallVector<mlir::Type>
  extraArgumentTypes(mlir::MLIRContext *ctx) const = 0;
  /// The kernel's values for extraArgumentTypes(), before any emit call.
  virtual void setArguments(mlir::ValueRange args) = 0;
  /// The `status` argument: i32 per buffer, set to 1 by an out-of-range read.
  virtual void setStatus(mlir::Value status) = 0;
};

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_FRAGMENTEMITTER_H
