//===- DecodeMerge.h - The decode kernel's exact LSE merge -------*- C++
//-*-===//
//
// The merge of a decode call's key splits, inside the split kernel (one
// launch, abi::gpu::DecodeArg): with one split each CTA applies the merge
// to its own state and writes O and LSE; with several and a counters
// pointer, the last CTA of a (batch, kv head, row tile) group to arrive (an
// arrival counter per group) merges the group's partial states; with a
// null counters pointer the CTAs only write their partial states and
// `<name>_decode_merge` (DecodeMergeKernel.h) merges them. All use one
// formula: for a row with partial LSEs l_s (log2 units) and a sink s (log2
// units, -inf: none), m = max(l_s, s), m' = (m == -inf ? 0 : m),
// w_s = exp2(l_s - m') for l_s != -inf and 0 for an empty split (a NaN l_s
// is live: the row becomes NaN), sum = exp2(s - m') + sum_s w_s,
// O = sum_s w_s O_s / sum and LSE = (m' + log2 sum) ln 2; a row with
// sum = 0 gets O = 0, LSE = -inf. Internal to the AttnToNVVM conversion
// (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_DECODEMERGE_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_DECODEMERGE_H

#include "KernelOps.h"

namespace flashjit::nvvm {

/// Where a decode CTA writes a row's result (abi::gpu::DecodeArg): O in
/// the 16-bit dtype at o + batch oS[0] + head oS[1] + query oS[2] + column
/// (elements), LSE (fp32, a null pointer: not written) likewise with lS;
/// the sink array when the spec has one (else null Value).
struct DecodeOutputs {
  mlir::Value o, lse, sink;
  mlir::Value oS[3], lS[3];
  /// The spec returns an LSE (KernelShape::returnLse).
  bool returnLse = true;
};

/// Programmatic dependent launch (sm_90, PTX ISA griddepcontrol) between
/// the split kernel and the merge kernel, which the runtime launches with
/// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (GpuDecodeKernel).
/// `griddepcontrol.wait` blocks the thread until the prerequisite grids
/// have completed and their memory operations are performed and visible to
/// this grid, so the merge kernel issues it before its first read of the
/// partial states; `griddepcontrol.launch_dependents` only lets the
/// dependent grid be scheduled once every CTA has issued it or exited, and
/// guarantees nothing about memory, so the split kernel may issue it
/// anywhere (it does first: the merge's launch and prologue then overlap
/// the split kernel's work). Without a programmatic launch both are no-ops.
/// Inline asm with a memory clobber, so LLVM moves no load across the wait.
/// Nothing is emitted for sm_80 (no PDL there; the runtime launches
/// plainly).
enum class GridDependency { Wait, LaunchDependents };
void emitGridDependency(KernelOps &ops, const KernelConfig &c,
                        GridDependency what);

/// One row's merge totals: m' (the row maximum, 0 when it is -inf), the
/// output factor 1 / sum (0 for an empty row) and the natural-log LSE.
struct MergedRow {
  mlir::Value mUse, inv, lse;
};

/// The sink of \p head in log2 units and whether it adds a term (it is not
/// -inf).
struct SinkLog2 {
  mlir::Value value, live;
};
SinkLog2 loadSinkLog2(KernelOps &ops, mlir::Value sink, mlir::Value head);

/// m' of the merge: \p m, or 0 when \p m is -inf (no live term).
mlir::Value mergeUse(KernelOps &ops, mlir::Value m);
/// The weight exp2(\p lseLog2 - \p mUse) of a split, 0 for an empty one
/// (LSE -inf); \p live: the split is not empty (UNE: a NaN LSE is live).
mlir::Value splitWeight(KernelOps &ops, mlir::Value lseLog2, mlir::Value mUse,
                        mlir::Value &live);
/// The sink's term of the sum: exp2(sink - mUse), 0 without one.
mlir::Value sinkTerm(KernelOps &ops, const SinkLog2 &sink, mlir::Value mUse);
/// The factor and LSE of a row whose weights sum to \p sum.
MergedRow finishRow(KernelOps &ops, mlir::Value mUse, mlir::Value sum);

/// Stores columns \p col, \p col + 1 (f32 \p x0, \p x1, packed to the
/// 16-bit dtype) of row (batch, head, query) of O.
void storeOutputPair(KernelOps &ops, const DecodeOutputs &out,
                     mlir::Value batch, mlir::Value head, mlir::Value query,
                     mlir::Value col, mlir::Value x0, mlir::Value x1);
/// Stores the LSE \p v of row (batch, head, query) when the spec returns
/// one and the call passed an LSE (the pointer is not null).
void storeOutputLse(KernelOps &ops, const DecodeOutputs &out, mlir::Value batch,
                    mlir::Value head, mlir::Value query, mlir::Value v);

/// The last-arriving CTA's merge of a (batch, kv head, row tile) group of
/// num_splits CTAs; nothing when the counters pointer is null (the merge
/// kernel merges). Every CTA has written its partial rows; the whole CTA
/// reaches emitLastBlockMerge (it holds barriers).
struct SplitMerge {
  DecodeOutputs out;
  mlir::Value tid;                      ///< i32
  int nthreads = 0;                     ///< threads of the CTA
  int headDimV = 0;                     ///< a multiple of 16
  mlir::Value oPart, lsePart, counters; ///< global pointers
  mlir::Value numSplits;                ///< i32, > 1
  mlir::Value group;     ///< i32: this CTA's counter (its group's index)
  mlir::Value rowsTotal; ///< i64: batch * heads_q * q_len
  /// i64: partial row of the group's packed row 0 in split 0,
  /// (batch * heads_q + head0) * q_len (packed row r: rowBase + r).
  mlir::Value rowBase;
  mlir::Value r0, rows; ///< i32: the tile's first packed row, its row count
  mlir::Value batch, head0, qLen; ///< i32
  mlir::Value scratch; ///< shared memory for 2 floats per row, free here
};
void emitLastBlockMerge(KernelOps &ops, const SplitMerge &m);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_DECODEMERGE_H
