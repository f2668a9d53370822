//===- BlockMaskKernel.cpp - The GPU block-mask builder -------------------===//
//
// Pre: a gpu.module (holding the forward kernel of a block-sparse variant).
// Post: it also holds gpu.func @<name>_block_mask, which writes the
// BlockMask lists (frontend/BlockMask.h) of the variant's mask for tiles of
// block_m x block_n, exactly as flashjit::referenceBlockMask defines them.
//
// One CTA per BlockMask row (batch, head, q tile), in three steps:
// 1. each thread classifies key tiles by interval arithmetic (the tile
//    classifier, with buffer ranges: a document mask is decided there except
//    on document boundaries);
// 2. the CTA evaluates the mask element by element on the tiles the
//    intervals leave undecided, in steps that sample every row and stop once
//    both outcomes are seen;
// 3. warp 0 compacts the partial and full lists with ballots.
// Arguments: abi::gpu::blockMaskArgTypes (runtime/KernelAbi.h), then the
// variant's parameters and buffers.
//
//===----------------------------------------------------------------------===//
#include "KernelOps.h"

#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::nvvm {
namespace {

namespace abi = flashjit::abi::gpu;

/// Tile classes kept in shared memory, one byte per key tile.
enum TileCode : int { kEmpty = 0, kPartial = 1, kFull = 2, kUndecided = 3 };

class BlockMaskBuilder {
public:
  BlockMaskBuilder(ImplicitLocOpBuilder &b, const KernelShape &c,
                   FragmentEmitter &em)
      : ops(b, c.bf16), b(b), c(c), em(em) {}

  void build(Operation *gpuModule);

private:
  void bindArguments(gpu::GPUFuncOp fn);
  /// Step 1: one key tile per thread, by interval arithmetic.
  void classifyByIntervals();
  /// Step 2: the undecided tiles, every element (all threads).
  void evaluateUndecided();
  /// One undecided tile at key tile \p j: whether any element is allowed
  /// and whether any in-range element is masked (i1 each).
  std::pair<Value, Value> sampleTile(Value j);
  /// Step 3: the lists, compacted by warp 0.
  void writeLists();

  Value clsAt(Value j) {
    return LLVM::GEPOp::create(b, ops.ptrS, ops.i8, cls, ValueRange{j});
  }
  Value code8(int code) {
    return arith::ConstantOp::create(b, b.getI8IntegerAttr(code));
  }
  /// for (i32 j = lo; j < hi; j += step) body(j)
  void forEach(Value lo, Value hi, int step,
               llvm::function_ref<void(Value)> body) {
    auto loop = scf::ForOp::create(b, ops.toIndex(lo), ops.toIndex(hi),
                                   arith::ConstantIndexOp::create(b, step));
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPoint(loop.getBody()->getTerminator());
    body(arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar()));
  }

  KernelOps ops;
  ImplicitLocOpBuilder &b;
  const KernelShape &c;
  FragmentEmitter &em;
  Value lists[4], seqlenQ, seqlenK, numQ, numKvAll, cuQ, cuK;
  Value tid, lane, m, head, batch, row, q0, qLast, nKT, cls, one;
};

void BlockMaskBuilder::build(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToEnd(&region.front());
  SmallVector<Type> args = abiTypes(ops, abi::blockMaskArgTypes(c.varlen));
  for (Type t : em.extraArgumentTypes(b.getContext()))
    args.push_back(t);
  auto fn = gpu::GPUFuncOp::create(b, c.name + "_block_mask",
                                   b.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({abi::kBlockMaskThreads, 1, 1}));
  b.setInsertionPointToStart(&fn.getBody().front());
  bindArguments(fn);
  classifyByIntervals();
  if (em.hasMask())
    evaluateUndecided();
  writeLists();
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

void BlockMaskBuilder::bindArguments(gpu::GPUFuncOp fn) {
  ValueRange a = fn.getArguments();
  em.setStatus(a[abi::kMaskStatus]);
  for (int i = 0; i < 4; ++i)
    lists[i] = a[abi::kMaskLists + i];
  seqlenQ = a[abi::kMaskSeqlenQ];
  seqlenK = a[abi::kMaskSeqlenK];
  numQ = a[abi::kMaskNumQTiles];
  numKvAll = a[abi::kMaskNumKvTiles];
  unsigned next = abi::kBlockMaskFixedArgs;
  if (c.varlen) {
    cuQ = a[next];
    cuK = a[next + 1];
    next += flashjit::abi::kVarlenArgs;
  }
  em.setArguments(a.drop_front(next));

  tid = NVVM::ThreadIdXOp::create(b, ops.i32);
  lane = arith::RemUIOp::create(b, tid, ops.ci32(32));
  m = NVVM::BlockIdXOp::create(b, ops.i32);
  head = NVVM::BlockIdYOp::create(b, ops.i32);
  batch = NVVM::BlockIdZOp::create(b, ops.i32);
  Value heads = NVVM::GridDimYOp::create(b, ops.i32);
  row = ops.add(ops.mul(ops.add(ops.mul(batch, heads), head), numQ), m);
  if (c.varlen) {
    VarlenSequence s = loadVarlenSequence(ops, cuQ, cuK, batch);
    seqlenQ = s.seqlenQ;
    seqlenK = s.seqlenK;
  }
  const int BM = c.blockM(), BN = c.blockN;
  q0 = ops.mul(m, ops.ci32(BM));
  qLast = ops.sub(arith::MinSIOp::create(b, ops.add(q0, ops.ci32(BM)), seqlenQ),
                  ops.ci32(1));
  // Rows past the sequence's queries (varlen) list nothing.
  nKT = ops.sel(ops.cmp(arith::CmpIPredicate::slt, q0, seqlenQ),
                arith::DivUIOp::create(b, ops.add(seqlenK, ops.ci32(BN - 1)),
                                       ops.ci32(BN)),
                ops.ci32(0));
  cls = ops.sharedBase();
  one = arith::ConstantIndexOp::create(b, 1);
}

void BlockMaskBuilder::classifyByIntervals() {
  const int BN = c.blockN;
  forEach(tid, nKT, abi::kBlockMaskThreads, [&](Value j) {
    Value kv0 = ops.mul(j, ops.ci32(BN));
    Value kvLast =
        ops.sub(arith::MinSIOp::create(b, ops.add(kv0, ops.ci32(BN)), seqlenK),
                ops.ci32(1));
    Value mayFalse = ops.cb(false), mayTrue = ops.cb(true);
    if (em.hasMask()) {
      IndexValues lo{batch, head, q0, kv0, seqlenQ, seqlenK};
      IndexValues hi{batch, head, qLast, kvLast, seqlenQ, seqlenK};
      std::tie(mayFalse, mayTrue) =
          em.emitClassify(b, b.getLoc(), lo, hi, /*bufferRanges=*/true);
    }
    Value code = ops.sel(
        mayTrue, ops.sel(mayFalse, ops.ci32(kUndecided), ops.ci32(kFull)),
        ops.ci32(kEmpty));
    LLVM::StoreOp::create(b, arith::TruncIOp::create(b, ops.i8, code),
                          clsAt(j));
  });
  gpu::BarrierOp::create(b);
}

void BlockMaskBuilder::evaluateUndecided() {
  forEach(ops.ci32(0), nKT, 1, [&](Value j) {
    Value code = LLVM::LoadOp::create(b, ops.i8, clsAt(j));
    Value undecided =
        ops.cmp(arith::CmpIPredicate::eq, code, code8(kUndecided));
    ops.enterIf(undecided);
    auto [anyT, anyF] = sampleTile(j);
    Value code2 =
        ops.sel(anyT, ops.sel(anyF, ops.ci32(kPartial), ops.ci32(kFull)),
                ops.ci32(kEmpty));
    ops.enterIf(ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0)));
    LLVM::StoreOp::create(b, arith::TruncIOp::create(b, ops.i8, code2),
                          clsAt(j));
  });
  gpu::BarrierOp::create(b);
}

std::pair<Value, Value> BlockMaskBuilder::sampleTile(Value j) {
  const int BM = c.blockM(), BN = c.blockN, T = abi::kBlockMaskThreads;
  Value kv0 = ops.mul(j, ops.ci32(BN));
  auto reduceOr = [&](Value p) {
    Value r =
        NVVM::BarrierOp::create(b, TypeRange{ops.i32}, Value(), Value(),
                                NVVM::BarrierReductionAttr::get(
                                    b.getContext(), NVVM::BarrierReduction::OR),
                                arith::ExtUIOp::create(b, ops.i32, p))
            .getResult(0);
    return ops.cmp(arith::CmpIPredicate::ne, r, ops.ci32(0));
  };
  // Steps of K elements per thread, column-interleaved (element e is row
  // e % BM, column e / BM), so every step samples every row of the tile;
  // the CTA stops as soon as it has seen both an allowed and a masked
  // element (a tile across a document boundary: after one step).
  const int K = 4, perStep = K * T, E = BM * BN;
  const int nSteps = (E + perStep - 1) / perStep;
  auto w = scf::WhileOp::create(
      b, TypeRange{ops.i32, ops.i1, ops.i1},
      ValueRange{ops.ci32(0), ops.cb(false), ops.cb(false)},
      [&](OpBuilder &nb, Location, ValueRange a) {
        OpBuilder::InsertionGuard wg(b);
        b.setInsertionPointToEnd(nb.getInsertionBlock());
        Value both = ops.land(a[1], a[2]);
        Value more =
            ops.land(ops.cmp(arith::CmpIPredicate::slt, a[0], ops.ci32(nSteps)),
                     ops.lnot(both));
        scf::ConditionOp::create(b, more, a);
      },
      [&](OpBuilder &nb, Location, ValueRange a) {
        OpBuilder::InsertionGuard wg(b);
        b.setInsertionPointToEnd(nb.getInsertionBlock());
        Value seenT = ops.cb(false), seenF = ops.cb(false);
        for (int k = 0; k < K; ++k) {
          Value e = ops.add(ops.mul(a[0], ops.ci32(perStep)),
                            ops.add(ops.ci32(k * T), tid));
          Value qi = ops.add(q0, arith::RemUIOp::create(b, e, ops.ci32(BM)));
          Value ki = ops.add(kv0, arith::DivUIOp::create(b, e, ops.ci32(BM)));
          Value ok = ops.land(ops.cmp(arith::CmpIPredicate::slt, qi, seqlenQ),
                              ops.cmp(arith::CmpIPredicate::slt, ki, seqlenK));
          if (E % perStep)
            ok = ops.land(ok,
                          ops.cmp(arith::CmpIPredicate::slt, e, ops.ci32(E)));
          IndexValues idx{batch, head, qi, ki, seqlenQ, seqlenK};
          Value v = ops.guarded(ok, ops.i1, ops.cb(false), [&] {
            return em.emitMask(b, b.getLoc(), idx);
          });
          seenT = ops.lor(seenT, v);
          seenF = ops.lor(seenF, ops.land(ok, ops.lnot(v)));
        }
        Value anyT = reduceOr(ops.lor(a[1], seenT));
        Value anyF = reduceOr(ops.lor(a[2], seenF));
        scf::YieldOp::create(
            b, ValueRange{ops.add(a[0], ops.ci32(1)), anyT, anyF});
      });
  return {w.getResult(1), w.getResult(2)};
}

void BlockMaskBuilder::writeLists() {
  // Ballots in 32-tile chunks.
  ops.enterIf(ops.cmp(arith::CmpIPredicate::ult, tid, ops.ci32(32)));
  Value rowBase = ops.mul(ops.ext64(row), ops.ext64(numKvAll));
  Value ltMask = NVVM::LaneMaskLtOp::create(b, ops.i32);
  Value nChunks =
      arith::DivUIOp::create(b, ops.add(nKT, ops.ci32(31)), ops.ci32(32));
  auto chunks = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                   ops.toIndex(nChunks), one,
                                   ValueRange{ops.ci32(0), ops.ci32(0)});
  {
    OpBuilder::InsertionGuard cg(b);
    b.setInsertionPointToStart(chunks.getBody());
    Value ch = arith::IndexCastOp::create(b, ops.i32, chunks.getInductionVar());
    Value j = ops.add(ops.mul(ch, ops.ci32(32)), lane);
    Value inR = ops.cmp(arith::CmpIPredicate::slt, j, nKT);
    Value code = ops.guarded(inR, ops.i8, code8(kEmpty), [&] {
      return LLVM::LoadOp::create(b, ops.i8, clsAt(j)).getResult();
    });
    SmallVector<Value, 2> counts;
    for (int kind = 0; kind < 2; ++kind) { // partial, full
      Value want =
          ops.cmp(arith::CmpIPredicate::eq, code, code8(kPartial + kind));
      counts.push_back(warpAppend(ops, want, j, lists[1 + 2 * kind], rowBase,
                                  chunks.getRegionIterArgs()[kind], ltMask));
    }
    scf::YieldOp::create(b, counts);
  }
  ops.enterIf(ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0)));
  for (int kind = 0; kind < 2; ++kind) {
    Value p = LLVM::GEPOp::create(b, ops.ptrG, ops.i32, lists[2 * kind],
                                  ValueRange{ops.ext64(row)});
    LLVM::StoreOp::create(b, chunks.getResult(kind), p, 4);
  }
}

} // namespace

void buildBlockMaskKernel(OpBuilder &builder, Location loc,
                          Operation *gpuModule, const KernelShape &config,
                          FragmentEmitter &emitter) {
  ImplicitLocOpBuilder b(loc, builder);
  BlockMaskBuilder(b, config, emitter).build(gpuModule);
}

} // namespace flashjit::nvvm
