//===- BackwardKernelBase.h - What the GPU backward kernels share -*- C++
//-*-===//
//
// The argument list of the three backward kernels (abi::gpu::BackwardArg,
// then the variant's parameters and buffers, then the gradient arrays of
// the buffers and parameters), their declaration as gpu.funcs and the
// address arithmetic on their strided tensors. FlashBackwardKernel.cpp
// builds the main kernel on it, BackwardRowKernels.cpp the preprocess and
// dQ-conversion kernels. Private to the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDKERNELBASE_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDKERNELBASE_H

#include "BackwardDataGrads.h"
#include "KernelOps.h"

#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace flashjit::nvvm {

using mlir::Value;
namespace arith = mlir::arith;

/// Tensors with pointer and strides (abi::gpu::BackwardArg order).
enum BackwardTensor : int { TQ = 0, TK, TV, TO, TDO, TLse, TDQ, TDK, TDV };

/// The arguments and address helpers of one backward kernel.
class BackwardKernelBase {
public:
  BackwardKernelBase(mlir::ImplicitLocOpBuilder &b, const KernelShape &c,
                     FragmentEmitter &em)
      : ops(b, c.bf16), b(b), c(c), em(em) {}

protected:
  /// Declares `<c.name><suffix>` in \p gpuModule with the backward
  /// arguments (KernelAbi.h), \p threads per CTA and \p sharedBytes of
  /// dynamic shared memory, and binds them; the builder is left at the start
  /// of its body.
  mlir::gpu::GPUFuncOp declare(mlir::Operation *gpuModule,
                               llvm::StringRef suffix, int threads,
                               int64_t sharedBytes);

  /// Element offset (i64) of row \p row of (batch, head) in tensor \p t
  /// (varlen: token qStart / kStart + row of the packed tensor).
  mlir::Value offset(int t, mlir::Value bt, mlir::Value h, mlir::Value row) {
    if (c.varlen) {
      bool kSide = t == TK || t == TV || t == TDK || t == TDV;
      Value token = ops.add(kSide ? kStart : qStart, row);
      return ops.add(ops.mul(ops.ext64(h), st[t][1]),
                     ops.mul(ops.ext64(token), st[t][2]));
    }
    return ops.add(ops.add(ops.mul(ops.ext64(bt), st[t][0]),
                           ops.mul(ops.ext64(h), st[t][1])),
                   ops.mul(ops.ext64(row), st[t][2]));
  }
  /// Byte address of element \p elem of tensor \p t (16-bit elements, or
  /// \p bytes per element).
  mlir::Value address(int t, mlir::Value elem, int64_t bytes = 2) {
    return ops.gepBytes(ptr[t], ops.mul(elem, ops.ci64(bytes)));
  }
  /// Linear row of (batch, head, row) in the fp32 workspaces ([batch,
  /// heads_q, seqlen_q], varlen [total_q, heads_q]).
  mlir::Value workRow(mlir::Value headsQ, mlir::Value h, mlir::Value row) {
    if (c.varlen)
      return ops.add(
          ops.mul(ops.ext64(ops.add(qStart, row)), ops.ext64(headsQ)),
          ops.ext64(h));
    return ops.ext64(
        ops.add(ops.mul(ops.add(ops.mul(batch, headsQ), h), seqlenQ), row));
  }
  /// varlen: replaces seqlenQ / seqlenK by sequence \p batch's lengths and
  /// sets qStart / kStart (the longest lengths stay in maxSeqlenQ/K).
  void locateSequence() {
    if (!c.varlen)
      return;
    VarlenSequence s = loadVarlenSequence(ops, cuQ, cuK, batch);
    qStart = s.qStart;
    kStart = s.kStart;
    seqlenQ = s.seqlenQ;
    seqlenK = s.seqlenK;
  }
  /// The deterministic mode's turn counter of query tile \p qTile of
  /// (batch, head \p h) (KernelAbi.h).
  mlir::Value semaphore(mlir::Value headsQ, mlir::Value h, mlir::Value qTile) {
    Value tiles = arith::DivUIOp::create(
        b, ops.add(maxSeqlenQ, ops.ci32(c.blockN - 1)), ops.ci32(c.blockN));
    Value i = ops.add(ops.mul(ops.ext64(ops.add(ops.mul(batch, headsQ), h)),
                              ops.ext64(tiles)),
                      ops.ext64(qTile));
    return ops.gepBytes(semaphores, ops.mul(i, ops.ci64(4)));
  }
  /// Two f32 from an i32 of two 16-bit floats (lo first).
  std::pair<mlir::Value, mlir::Value> unpack(mlir::Value packed);

  KernelOps ops;
  mlir::ImplicitLocOpBuilder &b;
  const KernelShape &c;
  FragmentEmitter &em;

  // Arguments.
  mlir::Value ptr[abi::gpu::kBackwardStridedTensors], dqAccum, delta;
  mlir::Value st[abi::gpu::kBackwardStridedTensors][3];
  /// seqlenQ / seqlenK: the call's (varlen: the CTA's sequence's, once
  /// locateSequence ran); maxSeqlenQ/K: the arguments.
  mlir::Value seqlenQ, seqlenK, maxSeqlenQ, maxSeqlenK, group, scale, scaleLog2;
  /// Deterministic-mode counters (null pointer: default mode).
  mlir::Value semaphores;
  /// varlen: cu_seqlens_q/k and the CTA's sequence's first tokens.
  mlir::Value cuQ, cuK, qStart, kStart;
  /// block-sparse: the transposed block mask (abi::gpu::backwardArgTypes):
  /// q_num_blocks, q_indices, full_q_num_blocks, full_q_indices,
  /// q_key_groups, and the row strides and list pitch (i32).
  mlir::Value qLists[abi::gpu::kBackwardSparseListArgs], rowBatchStride,
      rowHeadStride, listPitch;
  DataGradArgs gradArgs;
  /// The CTA's batch index (set by the kernel).
  mlir::Value batch;

private:
  void bindArguments(mlir::gpu::GPUFuncOp fn);
};

/// Adds `<c.name>_bwd_pre` (\p pre) or `<c.name>_bwd_post` to \p gpuModule
/// (abi::gpu::BackwardArg: D = rowsum(dO * O) and dQaccum = 0; or dQ =
/// scale * dQaccum in the inputs' dtype; one warp per query row).
void buildBackwardRowKernel(mlir::ImplicitLocOpBuilder &b,
                            mlir::Operation *gpuModule, const KernelShape &c,
                            FragmentEmitter &em, bool pre);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDKERNELBASE_H
