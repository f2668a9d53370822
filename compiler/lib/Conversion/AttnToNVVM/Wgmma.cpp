//===- Wgmma.cpp - wgmma.mma_async, descriptors and fences ----------------===//
//
// The primitives of Wgmma.h and the forward kernel's wgmma products
// (MmaStrategy.h): each warpgroup (4 warps, 64 query rows) computes S = Q
// K^T with Q and K read from shared memory through descriptors and O += P V
// with P in registers and V read MN-major. The accumulator of wgmma m64nN
// is, per warp, the C-fragment layout of N / 8 mma.sync n8 tiles.
//
//===----------------------------------------------------------------------===//
#include "Wgmma.h"
#include "MmaStrategy.h"

#include "llvm/Support/ErrorHandling.h"

#include <string>

using namespace mlir;

namespace flashjit::nvvm {

Value wgmmaDescriptor(KernelOps &ops, Value addr, int64_t lbo, int64_t sbo) {
  ImplicitLocOpBuilder &b = ops.b;
  Value start = arith::ShRUIOp::create(
      b, arith::AndIOp::create(b, addr, ops.ci64(0x3FFFF)), ops.ci64(4));
  int64_t bits = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (int64_t(1) << 62);
  return arith::OrIOp::create(b, start, ops.ci64(bits));
}

SmallVector<Value> wgmmaChain(KernelOps &ops, ArrayRef<Value> acc, int n,
                              ArrayRef<Value> aDesc, ArrayRef<Value> aRegs,
                              ArrayRef<Value> bDesc, bool transB) {
  const std::string ty = ops.bf16 ? "bf16" : "f16";
  return wgmmaChainOf(
      ops, acc, n, aDesc, aRegs, bDesc, "k16.f32." + ty + "." + ty,
      std::string(aRegs.empty() ? ", 0" : "") + (transB ? ", 1" : ", 0"));
}

SmallVector<Value> wgmmaChainOf(KernelOps &ops, ArrayRef<Value> acc, int n,
                                ArrayRef<Value> aDesc, ArrayRef<Value> aRegs,
                                ArrayRef<Value> bDesc, const std::string &step,
                                const std::string &tail) {
  const int nAccum = n / 2;
  const bool accumulate = !acc.empty();
  SmallVector<Value> operands(acc.begin(), acc.end());
  std::string cons;
  for (int i = 0; i < nAccum; ++i)
    cons += "=f,";
  for (int i = 0; accumulate && i < nAccum; ++i)
    cons += std::to_string(i) + ",";
  // Operand numbers: the outputs, their tied inputs, then the rest.
  int next = accumulate ? 2 * nAccum : nAccum;
  auto ref = [&](Value v, const char *constraint) {
    operands.push_back(v);
    cons += std::string(constraint) + ",";
    return "$" + std::to_string(next++);
  };
  std::string dlist = "{";
  for (int i = 0; i < nAccum; ++i)
    dlist += (i ? ", $" : "$") + std::to_string(i);
  dlist += "}";
  std::string one = ref(ops.ci32(1), "r");
  std::string asmStr = "{\n.reg .pred p, z;\nsetp.ne.b32 p, " + one +
                       ", 0;\nsetp.eq.b32 z, " + one +
                       ", 0;\nwgmma.fence.sync.aligned;\n";
  for (size_t st = 0; st < bDesc.size(); ++st) {
    std::string a;
    if (aRegs.empty()) {
      a = ref(aDesc[st], "l");
    } else {
      a = "{";
      for (int r = 0; r < 4; ++r)
        a += (r ? ", " : "") + ref(aRegs[4 * st + r], "r");
      a += "}";
    }
    std::string bd = ref(bDesc[st], "l");
    asmStr += "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + step +
              " " + dlist + ", " + a + ", " + bd +
              (st == 0 && !accumulate ? ", z" : ", p") + ", 1, 1" + tail +
              ";\n";
  }
  asmStr += "wgmma.commit_group.sync.aligned;\n"
            "wgmma.wait_group.sync.aligned 0;\n}";
  cons.pop_back();
  SmallVector<Type> fields(nAccum, ops.f32);
  auto op = ops.inlineAsm(
      LLVM::LLVMStructType::getLiteral(ops.b.getContext(), fields), operands,
      asmStr, cons);
  SmallVector<Value> out;
  for (int i = 0; i < nAccum; ++i)
    out.push_back(LLVM::ExtractValueOp::create(ops.b, op.getResult(0), i));
  return out;
}

/// wgmmaChainOffsets' chain; wgmma.wait_group 0 at its end when \p wait.
static SmallVector<Value>
emitChainOffsets(KernelOps &ops, ArrayRef<Value> acc, int n, Value aBase,
                 ArrayRef<int64_t> aSteps, ArrayRef<Value> aRegs, Value bBase,
                 ArrayRef<int64_t> bSteps, bool transB, bool transA, bool wait,
                 uint32_t narrowHi = 0) {
  const int nAccum = n / 2;
  const bool accumulate = !acc.empty(), regsA = !aRegs.empty();
  SmallVector<Value> operands(acc.begin(), acc.end());
  std::string cons;
  for (int i = 0; i < nAccum; ++i)
    cons += "=f,";
  for (int i = 0; accumulate && i < nAccum; ++i)
    cons += std::to_string(i) + ",";
  int next = accumulate ? 2 * nAccum : nAccum;
  auto ref = [&](Value v, const char *constraint) {
    operands.push_back(v);
    cons += std::string(constraint) + ",";
    return "$" + std::to_string(next++);
  };
  std::string dlist = "{";
  for (int i = 0; i < nAccum; ++i)
    dlist += (i ? ", $" : "$") + std::to_string(i);
  dlist += "}";
  const char *ty = ops.bf16 ? "bf16" : "f16";
  std::string one = ref(ops.ci32(1), "r");
  const char *baseCons = narrowHi ? "r" : "l";
  std::string aB = regsA ? "" : ref(aBase, baseCons);
  std::string bB = ref(bBase, baseCons);
  std::string asmStr = "{\n.reg .pred p, z;\n.reg .b64 da, db;\n"
                       "setp.ne.b32 p, " +
                       one + ", 0;\nsetp.eq.b32 z, " + one + ", 0;\n";
  if (narrowHi) // 32-bit low words; the constant high word joins them here
    asmStr += ".reg .b32 la, lb, hi;\nmov.b32 hi, " + std::to_string(narrowHi) +
              ";\n";
  asmStr += "wgmma.fence.sync.aligned;\n";
  // Descriptor d = base + step (64-bit, or the low word and then the pair).
  auto form = [&](const char *d, const char *lo, const std::string &base,
                  int64_t step) {
    if (!narrowHi)
      return "add.s64 " + std::string(d) + ", " + base + ", " +
             std::to_string(step) + ";\n";
    return "add.s32 " + std::string(lo) + ", " + base + ", " +
           std::to_string(step) + ";\nmov.b64 " + d + ", {" + lo + ", hi};\n";
  };
  for (size_t st = 0; st < bSteps.size(); ++st) {
    std::string a = "da";
    if (regsA) {
      a = "{";
      for (int r = 0; r < 4; ++r)
        a += (r ? ", " : "") + ref(aRegs[4 * st + r], "r");
      a += "}";
    } else {
      asmStr += form("da", "la", aB, aSteps[st]);
    }
    asmStr += form("db", "lb", bB, bSteps[st]);
    asmStr += "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) +
              "k16.f32." + ty + "." + ty + " " + dlist + ", " + a + ", db" +
              (st == 0 && !accumulate ? ", z" : ", p") + ", 1, 1" +
              (regsA ? "" : (transA ? ", 1" : ", 0")) +
              (transB ? ", 1" : ", 0") + ";\n";
  }
  asmStr += "wgmma.commit_group.sync.aligned;\n";
  if (wait)
    asmStr += "wgmma.wait_group.sync.aligned 0;\n";
  asmStr += "}";
  cons.pop_back();
  SmallVector<Type> fields(nAccum, ops.f32);
  auto op = ops.inlineAsm(
      LLVM::LLVMStructType::getLiteral(ops.b.getContext(), fields), operands,
      asmStr, cons);
  SmallVector<Value> out;
  for (int i = 0; i < nAccum; ++i)
    out.push_back(LLVM::ExtractValueOp::create(ops.b, op.getResult(0), i));
  return out;
}

SmallVector<Value> wgmmaChainOffsets(KernelOps &ops, ArrayRef<Value> acc, int n,
                                     Value aBase, ArrayRef<int64_t> aSteps,
                                     ArrayRef<Value> aRegs, Value bBase,
                                     ArrayRef<int64_t> bSteps, bool transB,
                                     bool transA) {
  return emitChainOffsets(ops, acc, n, aBase, aSteps, aRegs, bBase, bSteps,
                          transB, transA, /*wait=*/true);
}

SmallVector<Value> wgmmaIssueOffsets(KernelOps &ops, ArrayRef<Value> acc, int n,
                                     Value aBase, ArrayRef<int64_t> aSteps,
                                     ArrayRef<Value> aRegs, Value bBase,
                                     ArrayRef<int64_t> bSteps, bool transB,
                                     bool transA, uint32_t narrowHi) {
  return emitChainOffsets(ops, acc, n, aBase, aSteps, aRegs, bBase, bSteps,
                          transB, transA, /*wait=*/false, narrowHi);
}

SmallVector<Value> wgmmaWait(KernelOps &ops, ArrayRef<Value> acc, int pending,
                             ArrayRef<Value> keep) {
  const int count = int(acc.size());
  SmallVector<Value> operands(acc.begin(), acc.end());
  operands.append(keep.begin(), keep.end());
  std::string cons;
  for (int i = 0; i < count; ++i)
    cons += "=f,";
  for (int i = 0; i < count; ++i)
    cons += std::to_string(i) + ",";
  for (size_t i = 0; i < keep.size(); ++i)
    cons += "r,";
  std::string asmStr =
      "wgmma.wait_group.sync.aligned " + std::to_string(pending) + ";";
  if (!cons.empty())
    cons.pop_back();
  if (count == 0) {
    ops.inlineAsm(Type(), operands, asmStr, cons);
    return {};
  }
  SmallVector<Type> fields(count, ops.f32);
  auto op = ops.inlineAsm(
      LLVM::LLVMStructType::getLiteral(ops.b.getContext(), fields), operands,
      asmStr, cons);
  SmallVector<Value> out;
  for (int i = 0; i < count; ++i)
    out.push_back(LLVM::ExtractValueOp::create(ops.b, op.getResult(0), i));
  return out;
}

void fenceProxyAsync(KernelOps &ops) {
  ops.inlineAsm(Type(), {}, "fence.proxy.async.shared::cta;", "");
}

SmallVector<Value> ForwardMma::issueS() {
  llvm_unreachable("issueS: wgmma kernels only");
}

SmallVector<Value> ForwardMma::packP(ArrayRef<Value>) {
  llvm_unreachable("packP: wgmma kernels only");
}

SmallVector<Value> ForwardMma::unpackP(ArrayRef<Value>) {
  llvm_unreachable("unpackP: wgmma kernels only");
}

SmallVector<Value> ForwardMma::issuePV(ArrayRef<Value>, ArrayRef<Value>,
                                       Value) {
  llvm_unreachable("issuePV: wgmma kernels only");
}

namespace {

class WgmmaForward : public ForwardMma {
public:
  WgmmaForward(KernelOps &ops, const TileShape &shape, Value warp, bool narrow)
      : ops(ops), sh(shape), warp(warp), narrow(narrow) {}

  bool swizzled() const override { return true; }

  // Q and K are K-major (no leading offset; 8-row groups 1024 bytes apart),
  // V is MN-major (its 64-element column blocks BN * 128 bytes apart, 8-key
  // groups 1024 bytes apart). Step kk of Q K^T reads bytes (kk / 4) * rows *
  // 128 + (kk % 4) * 32 of a tile; step kk of P V reads keys 16 kk.. at kk *
  // 2048.
  void prepare(Value sQ, Value sK, Value sV) override {
    ImplicitLocOpBuilder &b = ops.b;
    Value sAddr = LLVM::PtrToIntOp::create(b, ops.i64, sQ);
    Value wgRows =
        ops.mul(arith::DivUIOp::create(b, warp, ops.ci32(4)), ops.ci32(64));
    descQ = wgmmaDescriptor(
        ops, ops.add(sAddr, ops.ext64(ops.mul(wgRows, ops.ci32(128)))), 16,
        1024);
    descK0 = wgmmaDescriptor(
        ops, LLVM::PtrToIntOp::create(b, ops.i64, sK).getResult(), 16, 1024);
    descV0 = wgmmaDescriptor(
        ops, LLVM::PtrToIntOp::create(b, ops.i64, sV).getResult(),
        int64_t(sh.blockN) * 128, 1024);
  }

  void publishStage() override {
    fenceProxyAsync(ops); // Q and this stage are read by wgmma
  }

  void selectStage(Value off) override { stageOff = off; }

  SmallVector<Value> computeS() override {
    // The stage's offset in descriptor units.
    stageDesc = arith::ShRUIOp::create(ops.b, stageOff, ops.ci64(4));
    SmallVector<Value> aD, bD;
    Value dK = ops.add(descK0, stageDesc);
    for (int kk = 0; kk < sh.qkSteps(); ++kk) {
      aD.push_back(ops.add(descQ, ops.ci64(kStep(kk, sh.blockM))));
      bD.push_back(ops.add(dK, ops.ci64(kStep(kk, sh.blockN))));
    }
    return wgmmaChain(ops, {}, sh.blockN, aD, {}, bD, /*transB=*/false);
  }

  SmallVector<Value>
  computeSWhile(llvm::function_ref<void()> whileInFlight) override {
    SmallVector<Value> acc = issueS();
    whileInFlight();
    return wgmmaWait(ops, acc, 0);
  }

  SmallVector<Value> issueS() override {
    stageDesc = arith::ShRUIOp::create(ops.b, stageOff, ops.ci64(4));
    SmallVector<int64_t> aSteps, bSteps;
    for (int kk = 0; kk < sh.qkSteps(); ++kk) {
      aSteps.push_back(kStep(kk, sh.blockM));
      bSteps.push_back(kStep(kk, sh.blockN));
    }
    if (narrow)
      return wgmmaIssueOffsets(ops, {}, sh.blockN, low(descQ), aSteps, {},
                               low(ops.add(descK0, stageDesc)), bSteps,
                               /*transB=*/false, /*transA=*/false, kHigh);
    return wgmmaIssueOffsets(ops, {}, sh.blockN, descQ, aSteps, {},
                             ops.add(descK0, stageDesc), bSteps,
                             /*transB=*/false, /*transA=*/false);
  }

  SmallVector<Value> packP(ArrayRef<Value> st) override {
    SmallVector<Value> pRegs;
    for (int kk = 0; kk < sh.pvSteps(); ++kk) {
      int n0 = 2 * kk, n1 = 2 * kk + 1;
      pRegs.append({ops.pack(st[n0 * 4 + 0], st[n0 * 4 + 1]),
                    ops.pack(st[n0 * 4 + 2], st[n0 * 4 + 3]),
                    ops.pack(st[n1 * 4 + 0], st[n1 * 4 + 1]),
                    ops.pack(st[n1 * 4 + 2], st[n1 * 4 + 3])});
    }
    return pRegs;
  }

  // packP's word i holds elements 2 i and 2 i + 1 of S's layout.
  SmallVector<Value> unpackP(ArrayRef<Value> pPacked) override {
    ImplicitLocOpBuilder &b = ops.b;
    Type h = ops.bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
    auto vt = VectorType::get({2}, h);
    SmallVector<Value> st;
    for (Value w : pPacked) {
      Value v = LLVM::BitcastOp::create(b, vt, w);
      for (int e = 0; e < 2; ++e)
        st.push_back(arith::ExtFOp::create(
            b, ops.f32,
            LLVM::ExtractElementOp::create(b, v, ops.ci32(e)).getResult()));
    }
    return st;
  }

  SmallVector<Value> issuePV(ArrayRef<Value> o, ArrayRef<Value> pPacked,
                             Value off) override {
    SmallVector<int64_t> vSteps;
    for (int kk = 0; kk < sh.pvSteps(); ++kk)
      vSteps.push_back((int64_t(kk) * 2048) >> 4);
    Value dV = ops.add(descV0, arith::ShRUIOp::create(ops.b, off, ops.ci64(4)));
    if (narrow)
      return wgmmaIssueOffsets(ops, o, sh.headDimV, Value(), {}, pPacked,
                               low(dV), vSteps, /*transB=*/true,
                               /*transA=*/false, kHigh);
    return wgmmaIssueOffsets(ops, o, sh.headDimV, Value(), {}, pPacked, dV,
                             vSteps, /*transB=*/true, /*transA=*/false);
  }

  SmallVector<Value> accumulatePV(ArrayRef<Value> o,
                                  ArrayRef<Value> st) override {
    SmallVector<Value> pRegs, vD;
    Value dV = ops.add(descV0, stageDesc);
    for (int kk = 0; kk < sh.pvSteps(); ++kk) {
      int n0 = 2 * kk, n1 = 2 * kk + 1;
      pRegs.append({ops.pack(st[n0 * 4 + 0], st[n0 * 4 + 1]),
                    ops.pack(st[n0 * 4 + 2], st[n0 * 4 + 3]),
                    ops.pack(st[n1 * 4 + 0], st[n1 * 4 + 1]),
                    ops.pack(st[n1 * 4 + 2], st[n1 * 4 + 3])});
      vD.push_back(ops.add(dV, ops.ci64((int64_t(kk) * 2048) >> 4)));
    }
    return wgmmaChain(ops, o, sh.headDimV, {}, pRegs, vD, /*transB=*/true);
  }

private:
  /// Descriptor offset (16-byte units) of k16 step \p kk of a K-major tile
  /// of \p rows rows.
  static int64_t kStep(int kk, int rows) {
    return (int64_t(kk / 4) * rows * 128 + (kk % 4) * 32) >> 4;
  }

  /// The low word of descriptor \p d (issueS / issuePV when narrow).
  Value low(Value d) { return arith::TruncIOp::create(ops.b, ops.i32, d); }

  /// The high word of descQ, descK0 and descV0 (all have SBO 1024).
  static constexpr uint32_t kHigh = wgmmaDescriptorHigh(1024);

  KernelOps &ops;
  TileShape sh;
  Value warp;
  /// issueS / issuePV pass the descriptors' low words (wgmmaIssueOffsets'
  /// narrowHi): the overlapped loop (KernelConfig::overlapSoftmax) then
  /// holds one register per descriptor, not two.
  bool narrow;
  Value descQ, descK0, descV0, stageOff, stageDesc;
};

} // namespace

std::unique_ptr<ForwardMma> createWgmmaForward(KernelOps &ops,
                                               const TileShape &shape,
                                               Value warp,
                                               bool narrowDescriptors) {
  return std::make_unique<WgmmaForward>(ops, shape, warp, narrowDescriptors);
}

} // namespace flashjit::nvvm
