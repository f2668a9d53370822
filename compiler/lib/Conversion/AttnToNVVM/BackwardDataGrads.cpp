//===- BackwardDataGrads.cpp - score_grad and dBuffer/dParam on the GPU ---===//
#include "BackwardDataGrads.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <array>

using namespace mlir;

namespace flashjit::nvvm {

BackwardDataGrads::BackwardDataGrads(KernelOps &ops, FragmentEmitter &em,
                                     DataGradArgs args)
    : ops(ops), em(em), args(std::move(args)), sites(em.dataGradSites()),
      active_(em.hasScoreGrad()) {}

SmallVector<Value> BackwardDataGrads::initState() {
  SmallVector<Value> out;
  for (const DataGradSite &s : sites)
    for (int k = 0; k < slotsOf(s); ++k) {
      if (!s.param)
        out.push_back(ops.ci64(0));
      out.push_back(ops.cf32(0.0f));
    }
  return out;
}

void BackwardDataGrads::addToBuffer(const DataGradSite &s, Value index,
                                    Value v) {
  Value size = args.bufferSizes[s.slot];
  Value in = ops.land(ops.cmp(arith::CmpIPredicate::sge, index, ops.ci64(0)),
                      ops.cmp(arith::CmpIPredicate::slt, index, size));
  auto ifIn = scf::IfOp::create(ops.b, in, /*withElse=*/true);
  OpBuilder::InsertionGuard g(ops.b);
  ops.b.setInsertionPointToStart(ifIn.thenBlock());
  Value p = LLVM::GEPOp::create(ops.b, ops.ptrG, ops.f32,
                                args.bufferGrads[s.slot], ValueRange{index});
  LLVM::AtomicRMWOp::create(ops.b, LLVM::AtomicBinOp::fadd, p, v,
                            LLVM::AtomicOrdering::monotonic);
  ops.b.setInsertionPointToStart(ifIn.elseBlock());
  Value flag = LLVM::GEPOp::create(ops.b, ops.ptrG, ops.i32, args.status,
                                   ArrayRef<LLVM::GEPArg>{int32_t(s.slot)});
  LLVM::StoreOp::create(ops.b, ops.ci32(1), flag, /*alignment=*/4);
}

SmallVector<Value> BackwardDataGrads::scoreGrad(
    ArrayRef<Value> dsPrime, function_ref<Value(int)> scoreAt, Value batch,
    Value head, Value seqlenQ, Value seqlenK, ArrayRef<Value> kvRows,
    Value qLane, int sTiles, MutableArrayRef<Value> state) {
  ImplicitLocOpBuilder &b = ops.b;
  Value zero = ops.cf32(0.0f);
  // Per element: score_grad where dS' != 0 (as the CPU's attn.score_grad),
  // giving dS and each site's (index, value); zeros elsewhere.
  SmallVector<Type> types{ops.f32};
  for (const DataGradSite &s : sites) {
    if (!s.param)
      types.push_back(ops.i64);
    types.push_back(ops.f32);
  }
  SmallVector<Value> ds;
  // q-dependent indices: per (site, key row), the open run of equal
  // indices along the thread's columns (increasing q), summed before one
  // atomic per run. Elements are handled as they come (short live ranges).
  SmallVector<std::array<Value, 2>> runIdx(sites.size()), runSum(sites.size());
  for (size_t k = 0; k < sites.size(); ++k)
    for (int r = 0; r < 2; ++r) {
      runIdx[k][r] = ops.ci64(0);
      runSum[k][r] = zero;
    }
  auto nonZero = [&](Value v) {
    return arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, v, zero)
        .getResult();
  };
  for (int jn = 0; jn < sTiles; ++jn)
    for (int i = 0; i < 4; ++i) {
      int e = jn * 4 + i;
      Value live =
          arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, dsPrime[e], zero);
      auto ifLive = scf::IfOp::create(b, types, live, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(ifLive.thenBlock());
        Value qi = ops.add(qLane, ops.ci32(jn * 8 + (i & 1)));
        IndexValues idx{batch, head, qi, kvRows[i / 2], seqlenQ, seqlenK};
        SmallVector<DataGradValue> gv;
        Value d =
            em.emitScoreGrad(b, b.getLoc(), idx, dsPrime[e], scoreAt(e), gv);
        assert(gv.size() == sites.size() && "one value per gradient site");
        SmallVector<Value> yields{d};
        for (auto [s, v] : llvm::zip(sites, gv)) {
          if (!s.param)
            yields.push_back(
                v.index.getType().isInteger(64) ? v.index : ops.ext64(v.index));
          yields.push_back(v.value);
        }
        scf::YieldOp::create(b, yields);
        b.setInsertionPointToStart(ifLive.elseBlock());
        SmallVector<Value> zeros{zero};
        for (const DataGradSite &s : sites) {
          if (!s.param)
            zeros.push_back(ops.ci64(0));
          zeros.push_back(zero);
        }
        scf::YieldOp::create(b, zeros);
      }
      ds.push_back(ifLive.getResult(0));
      unsigned res = 1, at = 0; // result / running-sum position of a site
      for (auto [k, s] : llvm::enumerate(sites)) {
        Value index = s.param ? Value() : ifLive.getResult(res++);
        Value value = ifLive.getResult(res++);
        int slots = slotsOf(s), r = i / 2;
        if (slots > 0) {
          // Running sums: the index of the last nonzero contribution and
          // the sum (the index is the same for every element of a slot).
          unsigned pos = at + (slots == 2 ? r : 0) * (s.param ? 1 : 2);
          if (!s.param) {
            state[pos] = ops.sel(nonZero(value), index, state[pos]);
            ++pos;
          }
          state[pos] = arith::AddFOp::create(b, state[pos], value);
          at += slots * (s.param ? 1 : 2);
          continue;
        }
        Value nz = nonZero(value);
        Value same = ops.cmp(arith::CmpIPredicate::eq, index, runIdx[k][r]);
        Value idxNow = runIdx[k][r], sumNow = runSum[k][r];
        ops.ifThen(ops.land(ops.land(nz, ops.lnot(same)), nonZero(sumNow)),
                   [&] { addToBuffer(s, idxNow, sumNow); });
        Value grown =
            ops.sel(same, arith::AddFOp::create(b, sumNow, value), value);
        runSum[k][r] = ops.sel(nz, grown, sumNow);
        runIdx[k][r] = ops.sel(nz, index, idxNow);
      }
    }
  for (auto [k, s] : llvm::enumerate(sites))
    if (slotsOf(s) == 0)
      for (int r = 0; r < 2; ++r) {
        Value idx = runIdx[k][r], sum = runSum[k][r];
        ops.ifThen(nonZero(sum), [&] { addToBuffer(s, idx, sum); });
      }
  return ds;
}

void BackwardDataGrads::flush(ArrayRef<Value> state, Value lane) {
  ImplicitLocOpBuilder &b = ops.b;
  Value zero = ops.cf32(0.0f);
  auto shfl = [&](Value v, int off) {
    return NVVM::ShflOp::create(b, v.getType(), ops.ci32(-1), v, ops.ci32(off),
                                ops.ci32(0x1f), NVVM::ShflKind::bfly,
                                UnitAttr())
        .getResult();
  };
  unsigned at = 0;
  for (const DataGradSite &s : sites) {
    int slots = slotsOf(s);
    // Lanes sharing the element: the whole warp, or a key row's 4 lanes.
    SmallVector<int> offs =
        slots == 2 ? SmallVector<int>{2, 1} : SmallVector<int>{16, 8, 4, 2, 1};
    Value leader =
        ops.cmp(arith::CmpIPredicate::eq,
                arith::RemUIOp::create(b, lane, ops.ci32(slots == 2 ? 4 : 32)),
                ops.ci32(0));
    for (int slot = 0; slot < slots; ++slot) {
      if (s.param) {
        Value sum = state[at++];
        for (int off : offs)
          sum = arith::AddFOp::create(b, sum, shfl(sum, off));
        Value add =
            ops.land(leader, arith::CmpFOp::create(b, arith::CmpFPredicate::UNE,
                                                   sum, zero));
        ops.ifThen(add, [&] {
          Value p =
              LLVM::GEPOp::create(b, ops.ptrG, ops.f32, args.paramGrads,
                                  ArrayRef<LLVM::GEPArg>{int32_t(s.slot)});
          LLVM::AtomicRMWOp::create(b, LLVM::AtomicBinOp::fadd, p, sum,
                                    LLVM::AtomicOrdering::monotonic);
        });
        continue;
      }
      Value idx = state[at++], sum = state[at++];
      // The index comes from a lane that has a contribution (all such
      // lanes hold the same one).
      Value has = arith::ExtUIOp::create(
          b, ops.i32,
          arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, sum, zero));
      for (int off : offs) {
        Value lo = arith::TruncIOp::create(b, ops.i32, idx);
        Value hi = arith::TruncIOp::create(
            b, ops.i32, arith::ShRUIOp::create(b, idx, ops.ci64(32)));
        Value other = arith::OrIOp::create(
            b, arith::ExtUIOp::create(b, ops.i64, shfl(lo, off)),
            arith::ShLIOp::create(
                b, arith::ExtUIOp::create(b, ops.i64, shfl(hi, off)),
                ops.ci64(32)));
        Value mine = ops.cmp(arith::CmpIPredicate::ne, has, ops.ci32(0));
        idx = ops.sel(mine, idx, other);
        has = arith::OrIOp::create(b, has, shfl(has, off));
        sum = arith::AddFOp::create(b, sum, shfl(sum, off));
      }
      Value add = ops.land(
          leader, ops.land(ops.cmp(arith::CmpIPredicate::ne, has, ops.ci32(0)),
                           arith::CmpFOp::create(b, arith::CmpFPredicate::UNE,
                                                 sum, zero)));
      ops.ifThen(add, [&] { addToBuffer(s, idx, sum); });
    }
  }
}

} // namespace flashjit::nvvm
