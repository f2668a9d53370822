//===- BackwardDataGrads.h - score_grad and dBuffer/dParam on the GPU -*- C++
//-*-===//
//
// The GPU backward's part of the score modifier's derivative: dS =
// score_grad(dS', s) per element of a thread's S^T fragments (through the
// FragmentEmitter, the region MLIRGen derived symbolically, as the CPU
// backward runs it), and the gradients of the f32 buffers and parameters
// the region accumulates (attn.buffer_grad / attn.param_grad), reduced
// before they reach global memory:
//   - parameters, and buffer elements whose index depends on neither q_idx
//     nor kv_idx (ALiBi's slopes[head]): one running sum per thread over
//     every tile of a query head, added across the warp by shuffles at the
//     end of the head: one fp32 atomic per (warp, query head of the CTA);
//   - buffer elements whose index depends on kv_idx only (a per-key bias):
//     one running sum per key row of the thread, added across the row's
//     four lanes: one atomic per (key, query head of the CTA);
//   - indices that depend on q_idx (relative-position tables, full bias
//     matrices): consecutive elements of a thread's key row with the same
//     index are summed first, then one atomic per run of equal indices.
// An index outside the buffer adds nothing and sets the buffer's status
// flag, as a read there does. Private to the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDDATAGRADS_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDDATAGRADS_H

#include "KernelOps.h"

#include "flashjit/Conversion/AttnToNVVM/FragmentEmitter.h"

namespace flashjit::nvvm {

/// The kernel arguments the data gradients use.
struct DataGradArgs {
  /// Per buffer (sorted by name): element count (i64) and gradient array
  /// (f32, global; null for buffers that are not f32).
  llvm::SmallVector<mlir::Value> bufferSizes, bufferGrads;
  /// One f32 per parameter (sorted by name); null without parameters.
  mlir::Value paramGrads;
  /// i32 per buffer: set to 1 by an out-of-range access.
  mlir::Value status;
};

/// score_grad and the data gradients of one backward main kernel.
class BackwardDataGrads {
public:
  BackwardDataGrads(KernelOps &ops, FragmentEmitter &em, DataGradArgs args);

  /// Whether the kernel needs this (a non-identity score_grad region).
  bool active() const { return active_; }
  /// The running sums a query head's tile loop carries, zero.
  llvm::SmallVector<mlir::Value> initState();
  /// dS of the thread's S^T fragments (sTiles * 4 f32): score_grad on
  /// \p dsPrime (dS') and the score \p scoreAt(e) builds for element e
  /// (scale * q.k, or s' for a region of the modified score), called inside
  /// the element's dS' != 0 branch, where dS' != 0, 0 elsewhere; its data
  /// gradients added to \p state (from initState(), updated in place) or,
  /// for q-dependent indices, to global memory.
  llvm::SmallVector<mlir::Value>
  scoreGrad(llvm::ArrayRef<mlir::Value> dsPrime,
            llvm::function_ref<mlir::Value(int)> scoreAt, mlir::Value batch,
            mlir::Value head, mlir::Value seqlenQ, mlir::Value seqlenK,
            llvm::ArrayRef<mlir::Value> kvRows, mlir::Value qLane, int sTiles,
            llvm::MutableArrayRef<mlir::Value> state);
  /// Adds \p state (a query head's running sums) to global memory; \p lane
  /// is the thread's lane.
  void flush(llvm::ArrayRef<mlir::Value> state, mlir::Value lane);

private:
  /// Running sums of site \p i: none (q-dependent index), one (index
  /// uniform or parameter) or one per key row (two).
  int slotsOf(const DataGradSite &s) const {
    if (s.indexUsesQ)
      return 0;
    return s.indexUsesKV ? 2 : 1;
  }
  /// Adds \p v at \p index (i64) of site \p s's buffer, or flags it.
  void addToBuffer(const DataGradSite &s, mlir::Value index, mlir::Value v);

  KernelOps &ops;
  FragmentEmitter &em;
  DataGradArgs args;
  llvm::SmallVector<DataGradSite> sites;
  bool active_;
};

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDDATAGRADS_H
