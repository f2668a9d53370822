//===- FlashForwardKernel.cpp - FlashAttention-2 GPU forward kernel -------===//
//
// Pre: an empty gpu.module. Post: it holds one gpu.func kernel (and the
// extern shared-memory symbol) built from nvvm, llvm, arith and scf ops; the
// stock gpu-lower-to-nvvm pipeline turns it into PTX.
//
// The algorithm is FlashAttention-2's forward pass (Dao 2023, Algorithm 1):
// one CTA per (query tile, head, batch), longest query tiles first; Q is
// loaded once, K/V tiles are double-buffered with cp.async (or, tma
// kernels, loaded by one thread with TMA into a ring of stages that
// complete on mbarriers, Tma.cpp; warp-specialised kernels: a producer
// warpgroup loads, the consumer warps compute; all loads: ForwardLoads.cpp);
// for each key tile that is not empty:
//   S = Q K^T                        (ForwardMma: MmaSync.cpp or Wgmma.cpp)
//   t = score_mod(scale * S) log2(e), masked where the tile is partial
//                                    (VariantTile.cpp)
//   m, l, P = exp2(t - m), alpha     (OnlineSoftmax.cpp)
//   O = O * alpha + P V              (ForwardMma)
// and the epilogue writes O / l and LSE. Tiles are classified at run time
// (empty: skipped, never loaded; full: no mask code; partial: masked per
// element); a block-sparse kernel walks the row's listed tiles instead.
// Fragment layouts: ../shared/notes/MMA-FRAGMENTS.md. Arguments:
// abi::gpu::forwardArgTypes (runtime/KernelAbi.h).
//
//===----------------------------------------------------------------------===//
#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"
#include "flashjit/Conversion/GridConstantArgs.h"
#include "flashjit/compiler/ScoreFactorTesting.h"
#include "flashjit/runtime/Fp8Abi.h"

#include "ForwardKernelBuilder.h"
#include "MaskedValues.h"
#include "SharedTile.h"
#include "Tma.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <atomic>
#include <limits>

using namespace mlir;

/// setForwardScoreRowFactorsForTesting's switch (on by default since
/// session 27).
static std::atomic<bool> forwardScoreRowFactors{true};
/// setForwardScoreFloatDistanceForTesting's switch (on by default since
/// session 27).
static std::atomic<bool> forwardScoreFloatDistance{true};

void flashjit::setForwardScoreRowFactorsForTesting(bool on) {
  forwardScoreRowFactors.store(on);
}

void flashjit::setForwardScoreFloatDistanceForTesting(bool on) {
  forwardScoreFloatDistance.store(on);
}

namespace flashjit::nvvm {

namespace detail {

void ForwardKernelBuilder::build(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp fn = declare(gpuModule);
  b.setInsertionPointToStart(&fn.getBody().front());
  bindArguments(fn);
  locate();
  prologue();
  planKeyTiles();
  if (c.warpSpecialized) {
    buildWarpSpecialized();
  } else {
    beginScoreRowFactors();
    firstLoad();
    if (checksResults())
      epilogue(checkedLoop());
    else
      epilogue(mainLoop());
  }
  em.endScoreRowFactors();
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

gpu::GPUFuncOp ForwardKernelBuilder::declare(Operation *gpuModule) {
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToStart(&region.front());
  if (!SymbolTable::lookupSymbolIn(gpuModule, kSharedSymbol))
    LLVM::GlobalOp::create(b, LLVM::LLVMArrayType::get(ops.i8, 0),
                           /*isConstant=*/false, LLVM::Linkage::External,
                           kSharedSymbol, Attribute(), /*alignment=*/1024,
                           /*addrSpace=*/3);
  std::vector<abi::ArgType> abiArgs =
      abi::forwardArgTypes(c.varlen, c.blockSparse, c.sink, c.tma);
  if (c.fp8())
    for (abi::ArgType t : abi::fp8DescaleArgTypes())
      abiArgs.push_back(t);
  SmallVector<Type> args = abiTypes(ops, abiArgs);
  for (Type ty : em.extraArgumentTypes(b.getContext()))
    args.push_back(ty);
  auto fn = gpu::GPUFuncOp::create(b, c.name, b.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  // Tensor maps: by value in parameter space, read there by the TMA unit
  // through their generic address (grid constants: no local copy). The
  // NVVM dialect takes nvvm.grid_constant only on llvm.func kernels, so the
  // kernel names the arguments and the NVVM-to-PTX pipeline marks them
  // after convert-gpu-to-nvvm (GridConstantArgs.cpp).
  SmallVector<int32_t> tensorMaps;
  for (auto [i, t] : llvm::enumerate(abiArgs))
    if (t == abi::ArgType::TensorMap)
      tensorMaps.push_back(int32_t(i));
  if (!tensorMaps.empty())
    fn->setAttr(kGridConstantArgsAttr, b.getDenseI32ArrayAttr(tensorMaps));
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({c.threads(), 1, 1}));
  // Without an explicit minimum ptxas caps registers to fit more CTAs and
  // spills (seen at 80 registers for head_dim 32); 1 leaves it all registers.
  fn->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
              b.getI32IntegerAttr(c.minBlocksPerSM));
  // The launch's dynamic shared memory, checked by compileGpu.
  fn->setAttr("flashjit.shared_bytes", b.getI64IntegerAttr(c.sharedBytes()));
  return fn;
}

void ForwardKernelBuilder::bindArguments(gpu::GPUFuncOp fn) {
  ValueRange a = fn.getArguments();
  qPtr = a[abi::kQ];
  kPtr = a[abi::kK];
  vPtr = a[abi::kV];
  oPtr = a[abi::kO];
  lsePtr = a[abi::kLse];
  em.setStatus(a[abi::kStatus]);
  for (int i = 0; i < 3; ++i) {
    qS[i] = a[abi::kQStrides + i];
    kS[i] = a[abi::kKStrides + i];
    vS[i] = a[abi::kVStrides + i];
    oS[i] = a[abi::kOStrides + i];
    lS[i] = a[abi::kLseStrides + i];
  }
  seqlenQ = a[abi::kSeqlenQ];
  seqlenK = a[abi::kSeqlenK];
  group = a[abi::kHeadGroup];
  scale = a[abi::kScale];
  scaleLog2 = a[abi::kScaleLog2];
  unsigned next = abi::kForwardFixedArgs;
  if (c.varlen) {
    cuQ = a[next];
    cuK = a[next + 1];
    next += flashjit::abi::kVarlenArgs;
  }
  if (c.blockSparse) {
    for (int i = 0; i < 4; ++i)
      lists[i] = a[next + i];
    rowBatchStride = a[next + 4];
    rowHeadStride = a[next + 5];
    listPitch = a[next + 6];
    next += abi::kBlockSparseListArgs + abi::kBlockSparseScalarArgs;
  }
  if (c.sink)
    sinkPtr = a[next++];
  if (c.tma) {
    tmQ = a[next];
    tmK = a[next + 1];
    tmV = a[next + 2];
    next += abi::kTensorMapArgs;
  }
  if (c.fp8()) {
    for (int i = 0; i < 3; ++i) {
      descale[i] = a[next + i];
      descaleBlock[i] = a[next + 3 + i];
    }
    headsKV = a[next + 6];
    next += abi::kFp8DescaleArgs;
  }
  em.setArguments(a.drop_front(next));
}

void ForwardKernelBuilder::prologue() {
  const int MT = sh.mTiles();
  // Rows g and g + 8 of each of the warp's m16 tiles.
  at.batch = batch;
  at.head = head;
  at.seqlenQ = seqlenQ;
  at.seqlenK = seqlenK;
  at.floatDistance = forwardScoreFloatDistance.load();
  at.qRow0.resize(MT);
  at.qRow1.resize(MT);
  for (int mt = 0; mt < MT; ++mt) {
    Value r = ops.add(
        q0, ops.add(ops.mul(warp, ops.ci32(c.rowsPerWarp)), ops.ci32(mt * 16)));
    at.qRow0[mt] = ops.add(r, g);
    at.qRow1[mt] = ops.add(at.qRow0[mt], ops.ci32(8));
  }
  qLast = ops.sub(
      arith::MinSIOp::create(b, ops.add(q0, ops.ci32(c.blockM())), seqlenQ),
      ops.ci32(1));

  nAcc = MT * sh.oTiles() * 4;
  Value zero = ops.cf32(0.0f);
  Value minusInf = ops.cf32(-std::numeric_limits<float>::infinity());
  init.append(nAcc, zero);
  init.append(2 * MT, minusInf);
  init.append(2 * MT, zero);
}

std::pair<Value, Value> ForwardKernelBuilder::classify(Value j) {
  const int BN = c.blockN;
  Value kv0 = ops.mul(j, ops.ci32(BN));
  Value kvLast =
      ops.sub(arith::MinSIOp::create(b, ops.add(kv0, ops.ci32(BN)), seqlenK),
              ops.ci32(1));
  IndexValues lo{batch, head, q0, kv0, seqlenQ, seqlenK};
  IndexValues hi{batch, head, qLast, kvLast, seqlenQ, seqlenK};
  if (!em.hasMask())
    return {ops.cb(false), ops.cb(true)};
  return em.emitClassify(b, b.getLoc(), lo, hi);
}

Value ForwardKernelBuilder::tileAt(Value it) {
  if (!c.blockSparse)
    return it;
  // Both reads stay inside the row: partial + full <= num_kv_tiles.
  auto read = [&](Value list, Value i) {
    Value p = LLVM::GEPOp::create(b, ops.ptrG, ops.i32, list,
                                  ValueRange{ops.add(listRow, ops.ext64(i))});
    return LLVM::LoadOp::create(b, ops.i32, p, /*alignment=*/4).getResult();
  };
  Value isFull = ops.cmp(arith::CmpIPredicate::sge, it, numPartial);
  Value fi = arith::MaxSIOp::create(b, ops.sub(it, numPartial), ops.ci32(0));
  return ops.sel(isFull, read(lists[3], fi), read(lists[1], it));
}

void ForwardKernelBuilder::planKeyTiles() {
  const int BN = c.blockN;
  numKv = arith::DivUIOp::create(b, ops.add(seqlenK, ops.ci32(BN - 1)),
                                 ops.ci32(BN));
  one = arith::ConstantIndexOp::create(b, 1);

  // The loop runs over positions it in [jBegin, jEnd] of a list of key
  // tiles: all tiles (dense), or the row's partial tiles followed by its
  // full ones (block-sparse).
  jBegin = ops.ci32(0);
  jEnd = ops.sub(numKv, ops.ci32(1));
  if (c.blockSparse) {
    Value row = ops.add(
        ops.add(ops.mul(batch, rowBatchStride), ops.mul(head, rowHeadStride)),
        qTile);
    numPartial = ops.loadI32(lists[0], row);
    listRow = ops.mul(ops.ext64(row), ops.ext64(listPitch));
    jEnd =
        ops.sub(ops.add(numPartial, ops.loadI32(lists[2], row)), ops.ci32(1));
  }
  // The first and last key tiles that are not empty: only they are loaded.
  if (em.hasMask() && !c.blockSparse) {
    auto scan = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                   ops.toIndex(numKv), one,
                                   ValueRange{numKv, ops.ci32(-1)});
    OpBuilder::InsertionGuard sg(b);
    b.setInsertionPointToStart(scan.getBody());
    Value j = arith::IndexCastOp::create(b, ops.i32, scan.getInductionVar());
    Value nonEmpty = classify(j).second;
    Value first = ops.sel(
        nonEmpty, arith::MinSIOp::create(b, scan.getRegionIterArgs()[0], j),
        scan.getRegionIterArgs()[0]);
    Value last = ops.sel(nonEmpty, j, scan.getRegionIterArgs()[1]);
    scf::YieldOp::create(b, ValueRange{first, last});
    b.setInsertionPointAfter(scan);
    jBegin = scan.getResult(0);
    jEnd = scan.getResult(1);
  }
}

void ForwardKernelBuilder::beginScoreRowFactors() {
  // Without a mask every key of an in-range row is allowed, so a row with
  // q_idx < seqlen_q and seqlen_k > 0 reads what per-element evaluation
  // reads (a mask could disallow a whole row, a block list skip all its
  // tiles: those keep per-element reads).
  if (!forwardScoreRowFactors.load() || !em.hasScoreMod() || em.hasMask() ||
      c.blockSparse)
    return;
  SmallVector<Value> heads, rows;
  for (size_t mt = 0; mt < at.qRow0.size(); ++mt) {
    heads.append({at.head, at.head});
    rows.append({at.qRow0[mt], at.qRow1[mt]});
  }
  // seqlen_k = 0: no tile, so no row reads (seqlen_q is used only there).
  Value anyKey = ops.cmp(arith::CmpIPredicate::sgt, seqlenK, ops.ci32(0));
  em.beginScoreRowFactors(b, b.getLoc(),
                          {at.batch, Value(), Value(), Value(),
                           ops.sel(anyKey, seqlenQ, ops.ci32(0)), seqlenK},
                          heads, rows);
}

ValueRange ForwardKernelBuilder::mainLoop() {
  // Block-sparse: the loop carries the current and the next listed tile,
  // and reads the one after while this one computes (no list read stalls a
  // prefetch). Positions past jEnd read nothing.
  SmallVector<Value> loopInit(init);
  if (c.blockSparse) {
    loopInit.push_back(tileAtIfAny(jBegin));
    loopInit.push_back(tileAtIfAny(ops.add(jBegin, ops.ci32(1))));
  }
  // TMA without warp specialisation: each tile's masked-value vote comes
  // from the barrier before it (voteAtTileEnd), carried into the tile.
  const bool carryVote = votePlacement() == VotePlacement::TileEnd;
  if (carryVote)
    loopInit.push_back(voteFirstTile());
  Value lb = ops.toIndex(jBegin);
  Value ub = ops.toIndex(ops.add(jEnd, ops.ci32(1)));
  auto loop = scf::ForOp::create(b, lb, ub, one, loopInit);
  OpBuilder::InsertionGuard lg(b);
  b.setInsertionPointToStart(loop.getBody());
  Value it = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
  ValueRange state = loop.getRegionIterArgs().take_front(init.size());
  Value j = c.blockSparse ? loop.getRegionIterArgs()[init.size()] : it;
  Value jNext = c.blockSparse ? loop.getRegionIterArgs()[init.size() + 1]
                              : ops.add(it, ops.ci32(1));
  Value voted = carryVote ? loop.getRegionIterArgs().back() : Value();
  Value stage;
  Value jAfter;
  if (c.tma) {
    // Dense: position = tile. Issue the tile stages - 1 ahead into the
    // stage the last iteration's closing barrier freed; wait for this one.
    tileUse = useOf(it);
    stage = tileStage = arith::RemUIOp::create(b, tileUse, ops.ci32(stages));
    if (!c.warpSpecialized) {
      Value ahead = ops.add(it, ops.ci32(stages - 1));
      issueKV(ahead, arith::RemUIOp::create(b, useOf(ahead), ops.ci32(stages)));
    }
    waitKV(it);
  } else {
    stage = ops.land(ops.sub(it, jBegin), ops.ci32(1));
    Value nextStage = arith::XOrIOp::create(b, stage, ops.ci32(1));
    // Prefetch the next tile into the other stage, then wait for this one.
    ifElse(
        b, ops.cmp(arith::CmpIPredicate::slt, it, jEnd),
        [&] {
          loadKV(jNext, nextStage);
          NVVM::CpAsyncWaitGroupOp::create(b, 1);
        },
        [&] { NVVM::CpAsyncWaitGroupOp::create(b, 0); });
    jAfter = c.blockSparse ? tileAtIfAny(ops.add(it, ops.ci32(2))) : Value();
    mma->publishStage();
    gpu::BarrierOp::create(b);
  }
  stageOff = ops.mul(ops.ext64(stage), ops.ci64(stageBytes));
  // fp8: the vote rides on the transpose's barrier (WgmmaFp8.cpp).
  Value stageVote;
  if (fp8Isolation())
    stageVote = mma->selectStageVoting(stageOff);
  else
    mma->selectStage(stageOff);
  Value kv0 = ops.mul(j, ops.ci32(c.blockN));
  auto [mayBeFalse, mayBeTrue] = classify(j);
  if (c.blockSparse) {
    // Listed full: no mask code. Tiles past this sequence's keys (a
    // layout shared by sequences of different lengths): skipped.
    Value listedFull = ops.cmp(arith::CmpIPredicate::sge, it, numPartial);
    mayBeFalse = ops.land(mayBeFalse, ops.lnot(listedFull));
    mayBeTrue = ops.land(ops.lor(mayBeTrue, listedFull),
                         ops.cmp(arith::CmpIPredicate::slt, j, numKv));
  }
  Value pastEnd = ops.cmp(arith::CmpIPredicate::sgt,
                          ops.add(kv0, ops.ci32(c.blockN)), seqlenK);
  Value needsMask = ops.lor(mayBeFalse, pastEnd);
  if (stageVote) // only partial tiles hold a key masked for some row
    voted = ops.land(needsMask, stageVote);

  SmallVector<Type> stateTypes(init.size(), ops.f32);
  auto tileIf = scf::IfOp::create(b, stateTypes, mayBeTrue, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard eg(b);
    b.setInsertionPointToStart(tileIf.elseBlock()); // empty tile: skip
    if (votePlacement() == VotePlacement::Published)
      skipMaskedVote();
    scf::YieldOp::create(b, state);
    b.setInsertionPointToStart(tileIf.thenBlock());
    scf::YieldOp::create(b, tileStep(state, kv0, needsMask, voted));
  }
  Value votedNext;
  if (c.warpSpecialized) // this thread has read the stage (wgmma waited)
    mbarrierArrive(ops, emptyBarrier(stage));
  else if (carryVote) // the same barrier, voting on the next tile
    votedNext = voteAtTileEnd(it);
  else // this stage is free for the prefetch after next
    gpu::BarrierOp::create(b);
  SmallVector<Value> carried(tileIf.getResults());
  if (c.blockSparse)
    carried.append({jNext, jAfter});
  if (carryVote)
    carried.push_back(votedNext);
  scf::YieldOp::create(b, carried);
  return loop.getResults();
}

SmallVector<Value> ForwardKernelBuilder::tileStep(ValueRange state, Value kv0,
                                                  Value needsMask,
                                                  Value voted) {
  const int MT = sh.mTiles(), nS = sh.sTiles(), nO = sh.oTiles();
  // The masked-value vote (a scan of the V stage, then a barrier or a
  // published word) runs while S's product does (wgmma); TileEnd kernels
  // took it at the barrier before the tile.
  Value poisoned = voted;
  const VotePlacement vp = votePlacement();
  SmallVector<Value> s =
      vp == VotePlacement::InTile || vp == VotePlacement::Published
          ? mma->computeSWhile([&] { poisoned = voteMaskedValues(needsMask); })
          : mma->computeS();

  // Scores in log2 units, masked where the tile needs it.
  at.kvLane = ops.add(kv0, ops.mul(t, ops.ci32(2)));
  SmallVector<Type> sTypes(MT * nS * 4, ops.f32);
  auto maskIf = scf::IfOp::create(b, sTypes, needsMask, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard mg(b);
    for (bool masked : {true, false}) {
      b.setInsertionPointToStart(masked ? maskIf.thenBlock()
                                        : maskIf.elseBlock());
      scf::YieldOp::create(
          b, variantScores(ops, em, s, at, MT, nS, scale, scaleLog2, masked));
    }
  }
  SmallVector<Value> st(maskIf.getResults());

  SmallVector<Value> o(state.begin(), state.begin() + nAcc);
  SoftmaxRows old;
  old.m.assign(state.begin() + nAcc, state.begin() + nAcc + 2 * MT);
  old.l.assign(state.begin() + nAcc + 2 * MT, state.begin() + nAcc + 4 * MT);
  SmallVector<Value> alpha;
  SoftmaxRows next = softmaxStep(ops, st, MT, nS, old, alpha);
  rescaleRows(ops, o, MT, nO, alpha);
  if (vp == VotePlacement::Published) // as late as can be: no wait, mostly
    poisoned = awaitMaskedVote(needsMask);
  if (poisoned)
    o = isolateMaskedValues(o, st, poisoned);
  o = mma->accumulatePV(o, st);
  o.append(next.m.begin(), next.m.end());
  o.append(next.l.begin(), next.l.end());
  return o;
}

void ForwardKernelBuilder::epilogue(ValueRange fin) {
  const int MT = sh.mTiles(), nO = sh.oTiles();
  // The attention sink of this head, in the log2 units of m.
  Value sinkLog2;
  if (c.sink) {
    Value at = ops.gepBytes(sinkPtr, ops.mul(ops.ext64(head), ops.ci64(4)));
    sinkLog2 = ops.fmul(LLVM::LoadOp::create(b, ops.f32, at, /*alignment=*/4),
                        ops.cf32(1.4426950408889634f));
  }
  Value oRows = oBase ? oBase : tensorBase(oPtr, oS, head, qStart);
  for (int rr = 0; rr < 2 * MT; ++rr) {
    int mt = rr / 2, r = rr % 2;
    SoftmaxFinal f = softmaxFinish(ops, fin[nAcc + 2 * MT + rr]);
    Value m = fin[nAcc + rr];
    if (c.sink)
      f = foldSink(ops, m, f, sinkLog2);
    Value row = r == 0 ? at.qRow0[mt] : at.qRow1[mt];
    OpBuilder::InsertionGuard rg(b);
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ));
    Value rowBase = ops.gepBytes(
        oRows, ops.mul(ops.mul(ops.ext64(row), oS[2]), ops.ci64(2)));
    Value inv = c.fp8() ? ops.fmul(f.inv, oFactor) : f.inv;
    for (int jd = 0; jd < nO; ++jd) {
      int a0 = (mt * nO + jd) * 4 + 2 * r;
      Value v = ops.pack(ops.fmul(fin[a0], inv), ops.fmul(fin[a0 + 1], inv));
      Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jd * 8));
      Value p = ops.gepBytes(rowBase, ops.ext64(ops.mul(col, ops.ci32(2))));
      if (c.tensorV() != c.headDimV)
        storePaddedO(v, p, col, jd);
      else
        LLVM::StoreOp::create(b, v, p, /*alignment=*/4);
    }
    if (!c.returnLse)
      continue;
    ops.enterIf(ops.cmp(arith::CmpIPredicate::eq, t, ops.ci32(0)));
    Value lse = logSumExp(ops, m, f);
    Value off =
        ops.add(ops.add(seqOff(lS, qStart), ops.mul(ops.ext64(head), lS[1])),
                ops.mul(ops.ext64(row), lS[2]));
    Value p = ops.gepBytes(lsePtr, ops.mul(off, ops.ci64(4)));
    LLVM::StoreOp::create(b, lse, p, /*alignment=*/4);
  }
}

void ForwardKernelBuilder::storePaddedO(Value v, Value p, Value col, int jd) {
  const int dv = c.tensorV();
  if (dv % 2 == 0) {
    // Both columns lie in the row or both past it.
    if (jd * 8 + 8 <= dv)
      LLVM::StoreOp::create(b, v, p, /*alignment=*/4);
    else
      ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, col, ops.ci32(dv)),
                 [&] { LLVM::StoreOp::create(b, v, p, /*alignment=*/4); });
    return;
  }
  // Odd rows: 2-byte aligned, one store per column.
  for (int e = 0; e < 2; ++e) {
    Value half = arith::TruncIOp::create(
        b, b.getI16Type(),
        e ? arith::ShRUIOp::create(b, v, ops.ci32(16)).getResult() : v);
    Value pe = ops.gepBytes(p, int64_t(2 * e));
    if (jd * 8 + 8 <= dv)
      LLVM::StoreOp::create(b, half, pe, /*alignment=*/2);
    else
      ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, ops.add(col, ops.ci32(e)),
                         ops.ci32(dv)),
                 [&] { LLVM::StoreOp::create(b, half, pe, /*alignment=*/2); });
  }
}

} // namespace detail

void buildFlashForwardKernel(OpBuilder &builder, Location loc,
                             Operation *gpuModule, const KernelShape &config,
                             FragmentEmitter &emitter) {
  ImplicitLocOpBuilder b(loc, builder);
  detail::ForwardKernelBuilder(b, config, emitter).build(gpuModule);
}

} // namespace flashjit::nvvm
