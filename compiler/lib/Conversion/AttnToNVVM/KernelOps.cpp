//===- KernelOps.cpp - Builder primitives of the GPU kernels --------------===//
#include "KernelOps.h"

#include "flashjit/compiler/Exp2Testing.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <atomic>

using namespace mlir;

namespace flashjit::nvvm {

/// setSoftmaxExp2FtzForTesting's switch.
static std::atomic<bool> ftzExp2{true};

KernelOps::KernelOps(ImplicitLocOpBuilder &b, bool bf16) : b(b), bf16(bf16) {
  MLIRContext *ctx = b.getContext();
  i1 = b.getI1Type();
  i8 = b.getI8Type();
  i32 = b.getI32Type();
  i64 = b.getI64Type();
  f32 = b.getF32Type();
  ptrG = LLVM::LLVMPointerType::get(ctx, 1);
  ptrS = LLVM::LLVMPointerType::get(ctx, 3);
}

// The softmax's exponentials are PTX ex2.approx.ftz.f32, as in
// FlashAttention-2/3/4: math.exp2 lowers (llvm.exp2) to ex2.approx.f32,
// whose subnormal handling costs extra SASS around each MUFU.EX2 on sm_80
// and sm_90. What ftz changes (PTX ISA, ex2): a subnormal input becomes
// +-0, and 2^+-0 = 1, as 2^x is for any |x| < 2^-126 in f32 anyway; a
// result below 2^-126 (an input below -126) becomes +0 instead of a
// subnormal. Every input here is a difference to a row maximum or an LSE
// (<= 0, or the merge's split LSEs to their maximum), so the flushed
// results are weights below 2^-126 beside the maximum's weight of 1: the
// row sum (>= 1) and O, dS, dK, dV cannot resolve them (f32 keeps 24
// bits, the 16-bit P that the products take 8 or 11). The special values
// are those of ex2.approx.f32: -inf -> +0 (masked scores: P is exactly +0,
// as the masked-value isolation's P == 0 tests and the backward's dS'
// check (MaskedValues.h) need), +inf -> +inf, NaN -> NaN, so the
// isnan/isinf checks on results see the same non-finite values. A weight
// that underflows to 0 is skipped by the isolation as before (an attended
// pair whose weight underflowed); ftz moves that threshold from 2^-149 to
// 2^-126. setSoftmaxExp2FtzForTesting(false) restores math.exp2.
// fp16 kernels keep math.exp2 for now: with ftz, ptxas (CUDA 13) spilled
// 20 bytes in the sm_90a backward of bwd_doc_id_d128_fp16_g3 (255
// registers either way; the PTX differs only in the ex2 form), so the
// fp16 kernels stay as they were until that one is looked at.
Value KernelOps::exp2(Value x) {
  if (!ftzExp2.load() || x.getType() != f32 || !bf16)
    return math::Exp2Op::create(b, x);
  return LLVM::CallIntrinsicOp::create(
             b, f32, b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"),
             ValueRange{x})
      .getResult(0);
}

Value KernelOps::unlikely(Value cond) {
  return LLVM::ExpectOp::create(b, cond, cb(false));
}

Value KernelOps::loadI32(Value base, Value i) {
  Value p = LLVM::GEPOp::create(b, ptrG, i32, base, ValueRange{ext64(i)});
  return LLVM::LoadOp::create(b, i32, p, /*alignment=*/4);
}

Value KernelOps::sharedBase() {
  return LLVM::AddressOfOp::create(b, ptrS, kSharedSymbol);
}

Value KernelOps::guarded(Value cond, Type type, Value otherwise,
                         llvm::function_ref<Value()> make) {
  auto ifOp = scf::IfOp::create(b, TypeRange{type}, cond, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(b, make());
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, otherwise);
  return ifOp.getResult(0);
}

void KernelOps::ifThen(Value cond, llvm::function_ref<void()> body) {
  auto ifOp = scf::IfOp::create(b, cond, /*withElse=*/false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  body();
}

void KernelOps::enterIf(Value cond) {
  auto ifOp = scf::IfOp::create(b, cond, /*withElse=*/false);
  b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
}

Value KernelOps::toIndex(Value v) {
  return arith::IndexCastOp::create(b, b.getIndexType(), v);
}

Value KernelOps::shflXor(Value v, int offset) {
  return NVVM::ShflOp::create(b, f32, ci32(-1), v, ci32(offset), ci32(0x1f),
                              NVVM::ShflKind::bfly, UnitAttr());
}

Value KernelOps::pack(Value lo, Value hi) {
  Type h = bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
  Value l = arith::TruncFOp::create(b, h, lo);
  Value u = arith::TruncFOp::create(b, h, hi);
  auto vt = VectorType::get({2}, h);
  Value v = LLVM::UndefOp::create(b, vt);
  v = LLVM::InsertElementOp::create(b, v, l, ci32(0));
  v = LLVM::InsertElementOp::create(b, v, u, ci32(1));
  return LLVM::BitcastOp::create(b, i32, v);
}

LLVM::InlineAsmOp KernelOps::inlineAsm(Type result, ValueRange operands,
                                       StringRef text, StringRef constraints) {
  return LLVM::InlineAsmOp::create(
      b, result ? TypeRange{result} : TypeRange{}, operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
}

VarlenSequence loadVarlenSequence(KernelOps &ops, Value cuQ, Value cuK,
                                  Value batch) {
  VarlenSequence s;
  Value next = ops.add(batch, ops.ci32(1));
  s.qStart = ops.loadI32(cuQ, batch);
  s.kStart = ops.loadI32(cuK, batch);
  s.seqlenQ = ops.sub(ops.loadI32(cuQ, next), s.qStart);
  s.seqlenK = ops.sub(ops.loadI32(cuK, next), s.kStart);
  return s;
}

SmallVector<Type> abiTypes(KernelOps &ops,
                           const std::vector<abi::gpu::ArgType> &types) {
  SmallVector<Type> out;
  for (abi::gpu::ArgType t : types) {
    switch (t) {
    case abi::gpu::ArgType::Ptr:
      out.push_back(ops.ptrG);
      break;
    case abi::gpu::ArgType::I64:
      out.push_back(ops.i64);
      break;
    case abi::gpu::ArgType::I32:
      out.push_back(ops.i32);
      break;
    case abi::gpu::ArgType::F32:
      out.push_back(ops.f32);
      break;
    case abi::gpu::ArgType::TensorMap:
      // A generic pointer to the parameter (byval, grid_constant:
      // FlashForwardKernel.cpp declares it).
      out.push_back(LLVM::LLVMPointerType::get(ops.b.getContext()));
      break;
    }
  }
  return out;
}

Value warpAppend(KernelOps &ops, Value want, Value value, Value list,
                 Value rowBase, Value count, Value ltMask) {
  ImplicitLocOpBuilder &b = ops.b;
  Value ballot = NVVM::VoteSyncOp::create(b, ops.i32, ops.ci32(-1), want,
                                          NVVM::VoteSyncKind::ballot);
  Value pos = ops.add(
      count, LLVM::CtPopOp::create(b, ops.i32, ops.land(ballot, ltMask)));
  ops.ifThen(want, [&] {
    Value p = LLVM::GEPOp::create(b, ops.ptrG, ops.i32, list,
                                  ValueRange{ops.add(rowBase, ops.ext64(pos))});
    LLVM::StoreOp::create(b, value, p, 4);
  });
  return ops.add(count, LLVM::CtPopOp::create(b, ops.i32, ballot));
}

} // namespace flashjit::nvvm

void flashjit::setSoftmaxExp2FtzForTesting(bool on) {
  flashjit::nvvm::ftzExp2.store(on);
}
