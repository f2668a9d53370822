//===- KernelOps.h - Builder primitives of the GPU kernels ------*- C++ -*-===//
//
// The small emit helpers every GPU kernel of flashjit uses (forward,
// block-mask builder; backward and decode next): constants, integer and
// float arithmetic, address arithmetic in bytes, guarded evaluation, warp
// shuffles, packing to 16-bit pairs and side-effecting inline PTX. Each
// helper creates exactly the ops it names, at the builder's insertion point,
// so a kernel reads as the algorithm it implements. Private to the
// AttnToNVVM conversion (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_KERNELOPS_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_KERNELOPS_H

#include "flashjit/runtime/KernelAbi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace flashjit::nvvm {

/// The extern shared-memory symbol every kernel of a module addresses.
inline constexpr const char *kSharedSymbol = "flashjit_smem";

/// Builder primitives over one ImplicitLocOpBuilder. \p bf16 picks the
/// 16-bit float type of pack() (bf16, else fp16).
class KernelOps {
public:
  KernelOps(mlir::ImplicitLocOpBuilder &b, bool bf16);

  mlir::ImplicitLocOpBuilder &b;
  const bool bf16;
  mlir::Type i1, i8, i32, i64, f32;
  /// Global (addrspace 1) and shared (addrspace 3) pointers.
  mlir::Type ptrG, ptrS;

  mlir::Value ci32(int64_t v) {
    return mlir::arith::ConstantOp::create(b, b.getI32IntegerAttr(v));
  }
  mlir::Value ci64(int64_t v) {
    return mlir::arith::ConstantOp::create(b, b.getI64IntegerAttr(v));
  }
  mlir::Value cf32(float v) {
    return mlir::arith::ConstantOp::create(b, b.getF32FloatAttr(v));
  }
  mlir::Value cb(bool v) {
    return mlir::arith::ConstantOp::create(b, b.getBoolAttr(v));
  }
  mlir::Value add(mlir::Value x, mlir::Value y) {
    return mlir::arith::AddIOp::create(b, x, y);
  }
  mlir::Value sub(mlir::Value x, mlir::Value y) {
    return mlir::arith::SubIOp::create(b, x, y);
  }
  mlir::Value mul(mlir::Value x, mlir::Value y) {
    return mlir::arith::MulIOp::create(b, x, y);
  }
  mlir::Value ext64(mlir::Value x) {
    return mlir::arith::ExtSIOp::create(b, i64, x);
  }
  mlir::Value cmp(mlir::arith::CmpIPredicate p, mlir::Value x, mlir::Value y) {
    return mlir::arith::CmpIOp::create(b, p, x, y);
  }
  mlir::Value sel(mlir::Value cnd, mlir::Value x, mlir::Value y) {
    return mlir::arith::SelectOp::create(b, cnd, x, y);
  }
  mlir::Value land(mlir::Value x, mlir::Value y) {
    return mlir::arith::AndIOp::create(b, x, y);
  }
  mlir::Value lor(mlir::Value x, mlir::Value y) {
    return mlir::arith::OrIOp::create(b, x, y);
  }
  mlir::Value lnot(mlir::Value x) {
    return mlir::arith::XOrIOp::create(b, x, cb(true));
  }
  /// \p cond (i1), marked as almost always false (llvm.expect): LLVM
  /// then lays the branch it guards out of the hot path.
  mlir::Value unlikely(mlir::Value cond);
  // The softmax's own arithmetic may contract into FMAs (x * scale - m is
  // one FFMA, as in FlashAttention-2); the user's regions never do.
  mlir::Value fadd(mlir::Value x, mlir::Value y) {
    return mlir::arith::AddFOp::create(b, x, y,
                                       mlir::arith::FastMathFlags::contract);
  }
  mlir::Value fmul(mlir::Value x, mlir::Value y) {
    return mlir::arith::MulFOp::create(b, x, y,
                                       mlir::arith::FastMathFlags::contract);
  }
  mlir::Value fsub(mlir::Value x, mlir::Value y) {
    return mlir::arith::SubFOp::create(b, x, y,
                                       mlir::arith::FastMathFlags::contract);
  }
  mlir::Value fmax(mlir::Value x, mlir::Value y) {
    return mlir::arith::MaximumFOp::create(b, x, y);
  }
  /// 2^x of an f32 \p x for the softmax: PTX ex2.approx.ftz.f32 (an
  /// llvm.nvvm intrinsic; KernelOps.cpp has the numerics), or math.exp2
  /// (ex2.approx.f32) under setSoftmaxExp2FtzForTesting(false), in fp16
  /// kernels or for another type.
  mlir::Value exp2(mlir::Value x);
  /// x == y for floats (ordered).
  mlir::Value feq(mlir::Value x, mlir::Value y) {
    return mlir::arith::CmpFOp::create(b, mlir::arith::CmpFPredicate::OEQ, x,
                                       y);
  }

  /// \p base advanced by \p bytes (i64).
  mlir::Value gepBytes(mlir::Value base, mlir::Value bytes) {
    return mlir::LLVM::GEPOp::create(b, base.getType(), i8, base,
                                     mlir::ValueRange{bytes});
  }
  mlir::Value gepBytes(mlir::Value base, int64_t bytes) {
    if (bytes == 0)
      return base;
    return mlir::LLVM::GEPOp::create(
        b, base.getType(), i8, base,
        llvm::ArrayRef<mlir::LLVM::GEPArg>{mlir::LLVM::GEPArg(bytes)});
  }
  /// Element \p i (i32) of the global i32 array at \p base.
  mlir::Value loadI32(mlir::Value base, mlir::Value i);
  /// The address of the kernel's dynamic shared memory (kSharedSymbol).
  mlir::Value sharedBase();

  /// `cond ? make() : otherwise`, with make()'s code run only when \p cond
  /// holds (scf.if).
  mlir::Value guarded(mlir::Value cond, mlir::Type type, mlir::Value otherwise,
                      llvm::function_ref<mlir::Value()> make);
  /// Runs \p body at the start of `scf.if cond` (no else, no results); the
  /// builder's insertion point is restored after.
  void ifThen(mlir::Value cond, llvm::function_ref<void()> body);
  /// Inserts at the end of `scf.if cond` (no else, no results) from here
  /// on: the code after this call runs only where \p cond holds.
  void enterIf(mlir::Value cond);
  /// i32 -> index.
  mlir::Value toIndex(mlir::Value v);

  /// Butterfly shuffle of an f32 across the warp (lane ^ \p offset).
  mlir::Value shflXor(mlir::Value v, int offset);
  /// Packs two f32 into one i32 holding two 16-bit floats (lo first).
  mlir::Value pack(mlir::Value lo, mlir::Value hi);

  /// A side-effecting inline-PTX op (AT&T dialect; \p result null: none).
  mlir::LLVM::InlineAsmOp inlineAsm(mlir::Type result,
                                    mlir::ValueRange operands,
                                    llvm::StringRef text,
                                    llvm::StringRef constraints);
};

/// Warp-wide append (stream compaction) to a global i32 list: each lane
/// whose \p want (i1) holds stores \p value (i32) at element \p rowBase
/// (i64) + \p count + the number of lower lanes that want, so the values
/// keep lane order; returns \p count plus the number of lanes that want.
/// All 32 lanes of the warp must reach it (vote.sync.ballot, full mask);
/// \p ltMask is the lane's %lanemask_lt.
mlir::Value warpAppend(KernelOps &ops, mlir::Value want, mlir::Value value,
                       mlir::Value list, mlir::Value rowBase, mlir::Value count,
                       mlir::Value ltMask);

/// Sequence \p batch of a varlen batch: its first query and key tokens and
/// its lengths, from cu_seqlens_q/k[batch] and [batch + 1] (i32 arrays).
struct VarlenSequence {
  mlir::Value qStart, kStart, seqlenQ, seqlenK;
};
VarlenSequence loadVarlenSequence(KernelOps &ops, mlir::Value cuQ,
                                  mlir::Value cuK, mlir::Value batch);

/// The MLIR types of GPU kernel arguments of the ABI (KernelAbi.h):
/// !llvm.ptr<1>, i64, i32, f32; a tensor map: !llvm.ptr (generic, the
/// address of the by-value parameter).
llvm::SmallVector<mlir::Type>
abiTypes(KernelOps &ops, const std::vector<abi::gpu::ArgType> &types);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_KERNELOPS_H
