//===- FlashDecodeKernel.cpp - Split-KV decode over a paged KV cache ------===//
//
// Pre: a gpu.module. Post: it holds @<name>_decode and @<name>_decode_merge
// (and the extern shared-memory symbol).
//
// The algorithm is flash-decoding (Dao, Haziza, Massa, Sizov 2023,
// "Flash-Decoding for long-context inference"): the keys of each (sequence,
// KV head) are split over CTAs; each CTA runs FlashAttention-2's inner loop
// (Dao 2023, Algorithm 1) over its key tiles; the partial states are
// combined exactly through their LSEs (DecodeMerge.h) in the same launch:
// with one split the CTA writes O and LSE itself, with several each CTA
// writes a partial O and LSE in fp32 and the last CTA of the group merges
// them (or, with null counters, the merge kernel does, DecodeMergeKernel.h).
// The query heads sharing a KV head (GQA) and the q_len query tokens of a
// sequence are packed into the CTA's rows, so K and V are read once per
// group. K/V rows are gathered through the page table with cp.async (two
// stages, or three with Q on the third: DecodeStages.cpp,
// KernelConfig::decodeStages); rows at or past the sequence's length are
// zero-filled and never read, so garbage in unused page slots cannot reach
// the result. The pieces are the forward kernel's: MmaSync (S = Q K^T,
// O += P V), VariantTile (the variant per element, variantScoresPacked),
// OnlineSoftmax. Arguments: abi::gpu::decodeArgTypes / mergeArgTypes
// (runtime/KernelAbi.h).
//
//===----------------------------------------------------------------------===//
#include "flashjit/Conversion/AttnToNVVM/FlashDecodeKernel.h"

#include "DecodeKernelBuilder.h"
#include "DecodeMerge.h"
#include "DecodeMergeKernel.h"
#include "KernelOps.h"
#include "MaskedValues.h"
#include "MmaStrategy.h"
#include "OnlineSoftmax.h"
#include "SharedTile.h"
#include "VariantTile.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;

namespace flashjit::nvvm {

namespace abi = flashjit::abi::gpu;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Declares the shared-memory symbol once per module.
void declareShared(KernelOps &ops, Operation *gpuModule) {
  if (!SymbolTable::lookupSymbolIn(gpuModule, kSharedSymbol))
    LLVM::GlobalOp::create(ops.b, LLVM::LLVMArrayType::get(ops.i8, 0),
                           /*isConstant=*/false, LLVM::Linkage::External,
                           kSharedSymbol, Attribute(), /*alignment=*/1024,
                           /*addrSpace=*/3);
}

/// cp.async of a tile of \p rows x \p dim 16-bit elements into the padded
/// shared layout at \p smem; \p source(row, it) gives (valid, address of
/// the row's first element) for a tile row, copied in the thread's
/// iteration \p it (its chunk tid + it * nthreads: row
/// (tid + it * nthreads) / (dim / 8)); invalid rows are zero-filled and not
/// read (source size 0).
void loadRowsAsync(
    KernelOps &ops, Value tid, int nthreads, Value smem, int rows, int dim,
    llvm::function_ref<std::pair<Value, Value>(Value, int)> source) {
  ImplicitLocOpBuilder &b = ops.b;
  const int chunksPerRow = dim / 8, total = rows * chunksPerRow;
  for (int it = 0; it * nthreads < total; ++it) {
    auto emitOne = [&] {
      Value cidx = ops.add(tid, ops.ci32(it * nthreads));
      Value row = arith::DivUIOp::create(b, cidx, ops.ci32(chunksPerRow));
      Value col = arith::RemUIOp::create(b, cidx, ops.ci32(chunksPerRow));
      auto [valid, rowPtr] = source(row, it);
      Value src = ops.gepBytes(rowPtr, ops.ext64(ops.mul(col, ops.ci32(16))));
      Value dst = ops.gepBytes(
          smem, ops.ext64(tileOffset(ops, row, col, rows, dim, false)));
      Value size = ops.sel(valid, ops.ci32(16), ops.ci32(0));
      NVVM::CpAsyncOp::create(
          b, dst, src, b.getI32IntegerAttr(16),
          NVVM::LoadCacheModifierKindAttr::get(b.getContext(),
                                               NVVM::LoadCacheModifierKind::CG),
          size);
    };
    if ((it + 1) * nthreads <= total)
      emitOne();
    else
      ops.ifThen(ops.cmp(arith::CmpIPredicate::ult,
                         ops.add(tid, ops.ci32(it * nthreads)),
                         ops.ci32(total)),
                 emitOne);
  }
}

/// Runs \p then / \p otherwise in the branches of `scf.if cond`.

} // namespace

namespace detail {

void DecodeKernelBuilder::build(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToStart(&region.front());
  declareShared(ops, gpuModule);
  SmallVector<Type> args = abiTypes(ops, abi::decodeArgTypes(c.sink));
  for (Type ty : em.extraArgumentTypes(b.getContext()))
    args.push_back(ty);
  auto fn = gpu::GPUFuncOp::create(b, c.name + abi::kDecodeSuffix,
                                   b.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({nthreads, 1, 1}));
  fn->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
              b.getI32IntegerAttr(c.minBlocksPerSM));
  fn->setAttr("flashjit.shared_bytes", b.getI64IntegerAttr(c.sharedBytes()));
  b.setInsertionPointToStart(&fn.getBody().front());
  bindArguments(fn);
  // The merge kernel (launched as this grid's programmatic dependent) may
  // be scheduled now: its griddepcontrol.wait still waits for this whole
  // grid and its stores (DecodeMerge.h).
  emitGridDependency(ops, c, GridDependency::LaunchDependents);
  locate();
  planKeyTiles();
  if (stages() == 3)
    prologueThree();
  else
    prologueTwo();
  // The score modifier's row-only part (ALiBi's slopes[head]) once per CTA,
  // before the loop: variantScoresPacked finds the rows' factors already
  // made, so no tile loads or bounds-checks them (per tile it cost ALiBi
  // 255 registers, 245 now). Every row in range reads its factor once, also
  // a row no key of the CTA is allowed for (per-element evaluation would
  // not): the same buffer elements, so only such a row's out-of-range read
  // can now be reported where it was not.
  if (em.hasScoreMod())
    em.beginScoreRowFactors(
        b, b.getLoc(), {batch, Value(), Value(), Value(), qLen, seqLen},
        {at.head0[0], at.head1[0]}, {at.qRow0[0], at.qRow1[0]});
  epilogue(stages() == 3 ? mainLoopThree() : mainLoop());
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

void DecodeKernelBuilder::prologueTwo() {
  // The first K/V tile, then Q's fragments once Q has landed. The page ids
  // of a tile are loaded one tile ahead of its copies (the loop carries
  // them), so a page-table miss does not hold up the cp.async issue.
  SmallVector<Value> kIds = pageIdsOf(jBegin, c.headDimQK), vIds;
  if (c.headDimV != c.headDimQK)
    vIds = pageIdsOf(jBegin, c.headDimV);
  ifElse(
      b, ops.cmp(arith::CmpIPredicate::sle, jBegin, jEnd),
      [&] {
        loadKV(jBegin, ops.ci32(0), kIds, vIds.empty() ? kIds : vIds);
        NVVM::CpAsyncWaitGroupOp::create(b, 1);
      },
      [&] { NVVM::CpAsyncWaitGroupOp::create(b, 0); });
  carryPageIdsOf(ops.add(jBegin, ops.ci32(1)));
  gpu::BarrierOp::create(b);
  mma->loadQ();
}

void DecodeKernelBuilder::bindArguments(gpu::GPUFuncOp fn) {
  ValueRange a = fn.getArguments();
  qPtr = a[abi::kDecQ];
  kPtr = a[abi::kDecKCache];
  vPtr = a[abi::kDecVCache];
  oPart = a[abi::kDecOPart];
  lsePart = a[abi::kDecLsePart];
  em.setStatus(a[abi::kDecStatus]);
  pages = a[abi::kDecPages];
  pageStartPtr = a[abi::kDecPageStart];
  seqLensPtr = a[abi::kDecSeqLens];
  counters = a[abi::kDecCounters];
  out.o = a[abi::kDecO];
  out.lse = a[abi::kDecLse];
  if (c.sink)
    out.sink = a[abi::kDecSink];
  out.returnLse = c.returnLse;
  for (int i = 0; i < 3; ++i) {
    qS[i] = a[abi::kDecQStrides + i];
    kS[i] = a[abi::kDecKStrides + i];
    vS[i] = a[abi::kDecVStrides + i];
    out.oS[i] = a[abi::kDecOStrides + i];
    out.lS[i] = a[abi::kDecLseStrides + i];
  }
  qLen = a[abi::kDecQLen];
  group = a[abi::kDecGroup];
  pageShift = a[abi::kDecPageShift];
  numSplits = a[abi::kDecNumSplits];
  rowTiles = a[abi::kDecRowTiles];
  batchCount = a[abi::kDecBatch];
  headsQ = a[abi::kDecHeadsQ];
  scale = a[abi::kDecScale];
  scaleLog2 = a[abi::kDecScaleLog2];
  em.setArguments(a.drop_front(abi::decodeArgTypes(c.sink).size()));
}

void DecodeKernelBuilder::locate() {
  tid = NVVM::ThreadIdXOp::create(b, ops.i32);
  warp = arith::DivUIOp::create(b, tid, ops.ci32(32));
  lane = arith::RemUIOp::create(b, tid, ops.ci32(32));
  g = arith::DivUIOp::create(b, lane, ops.ci32(4));
  t = arith::RemUIOp::create(b, lane, ops.ci32(4));
  Value bx = NVVM::BlockIdXOp::create(b, ops.i32);
  split = arith::DivUIOp::create(b, bx, rowTiles);
  rowTile = arith::RemUIOp::create(b, bx, rowTiles);
  headKV = NVVM::BlockIdYOp::create(b, ops.i32);
  batch = NVVM::BlockIdZOp::create(b, ops.i32);
  seqLen = ops.loadI32(seqLensPtr, batch);
  pageStart = ops.loadI32(pageStartPtr, batch);
  rows = ops.mul(group, qLen);
  r0 = ops.mul(rowTile, ops.ci32(c.blockM()));
  rLast = ops.sub(
      arith::MinSIOp::create(b, ops.add(r0, ops.ci32(c.blockM())), rows),
      ops.ci32(1));
  warpActive = ops.cmp(arith::CmpIPredicate::slt,
                       ops.add(r0, ops.mul(warp, ops.ci32(16))), rows);
  Value head0 = ops.mul(headKV, group);

  // The thread's rows g and g + 8: their query head and index (padding
  // rows: head0 and q_len, out of range).
  at.batch = batch;
  at.seqlenQ = qLen;
  at.seqlenK = seqLen;
  for (int r = 0; r < 2; ++r) {
    Value pr = ops.add(ops.add(r0, ops.mul(warp, ops.ci32(16))),
                       ops.add(g, ops.ci32(8 * r)));
    Value valid = ops.cmp(arith::CmpIPredicate::slt, pr, rows);
    Value h = ops.add(head0, arith::DivUIOp::create(b, pr, qLen));
    Value qi = arith::RemUIOp::create(b, pr, qLen);
    (r == 0 ? at.head0 : at.head1).push_back(ops.sel(valid, h, head0));
    (r == 0 ? at.qRow0 : at.qRow1).push_back(ops.sel(valid, qi, qLen));
    rowIdx.push_back(pr);
  }

  Value smem = ops.sharedBase();
  const int D = c.headDimQK, Dv = c.headDimV;
  mma = createMmaSyncForward(ops, sh, warp, lane);
  // Two stages: Q, then the stages (K, V each). Three: the stages, Q on
  // the third (KernelConfig::sharedBytes).
  Value sQ = smem;
  if (stages() == 3) {
    stageBytes = int64_t(2) * c.blockN * (D + kPad + Dv + kPad);
    sK = smem;
    sV = ops.gepBytes(sK, int64_t(2) * c.blockN * (D + kPad));
    sQ = ops.gepBytes(smem, 2 * stageBytes);
  } else {
    sK = ops.gepBytes(smem, int64_t(2) * c.blockM() * (D + kPad));
    sV = ops.gepBytes(sK, int64_t(2) * c.blockN * (D + kPad));
    stageBytes = int64_t(2) * c.blockN * (D + kPad + Dv + kPad);
  }

  // Q rows, packed: row r of the tile is query r % q_len of head
  // head0 + r / q_len; padding rows are zero-filled.
  Value qBatch = ops.gepBytes(
      qPtr, ops.mul(ops.mul(ops.ext64(batch), qS[0]), ops.ci64(2)));
  loadRowsAsync(ops, tid, nthreads, sQ, c.blockM(), D, [&](Value row, int) {
    Value pr = ops.add(r0, row);
    Value valid = ops.cmp(arith::CmpIPredicate::slt, pr, rows);
    Value prc = ops.sel(valid, pr, ops.ci32(0));
    Value h = ops.add(head0, arith::DivUIOp::create(b, prc, qLen));
    Value qi = arith::RemUIOp::create(b, prc, qLen);
    Value off =
        ops.add(ops.mul(ops.ext64(h), qS[1]), ops.mul(ops.ext64(qi), qS[2]));
    return std::pair{valid, ops.gepBytes(qBatch, ops.mul(off, ops.ci64(2)))};
  });
  NVVM::CpAsyncCommitGroupOp::create(b);
  mma->prepare(sQ, sK, sV);

  nAcc = sh.oTiles() * 4;
  init.append(nAcc, ops.cf32(0.0f));
  init.append(2, ops.cf32(kNegInf));
  init.append(2, ops.cf32(0.0f));
}

std::pair<Value, Value> DecodeKernelBuilder::classify(Value j) {
  if (!em.hasMask())
    return {ops.cb(false), ops.cb(true)};
  const int BN = c.blockN;
  Value kv0 = ops.mul(j, ops.ci32(BN));
  Value kvLast =
      ops.sub(arith::MinSIOp::create(b, ops.add(kv0, ops.ci32(BN)), seqLen),
              ops.ci32(1));
  return classifyKeys(kv0, kvLast);
}

std::pair<Value, Value> DecodeKernelBuilder::classifyKeys(Value kvLo,
                                                          Value kvHi) {
  // The box of the CTA's rows: their heads, and their queries (all of them
  // when the rows span several heads).
  Value head0 = ops.mul(headKV, group);
  Value hLo = ops.add(head0, arith::DivUIOp::create(b, r0, qLen));
  Value hHi = ops.add(head0, arith::DivUIOp::create(b, rLast, qLen));
  Value same = ops.cmp(arith::CmpIPredicate::eq, hLo, hHi);
  Value qLo = ops.sel(same, arith::RemUIOp::create(b, r0, qLen), ops.ci32(0));
  Value qHi = ops.sel(same, arith::RemUIOp::create(b, rLast, qLen),
                      ops.sub(qLen, ops.ci32(1)));
  IndexValues lo{batch, hLo, qLo, kvLo, qLen, seqLen};
  IndexValues hi{batch, hHi, qHi, kvHi, qLen, seqLen};
  return em.emitClassify(b, b.getLoc(), lo, hi);
}

Value DecodeKernelBuilder::longestEmptyRun(
    Value limit, Value steps,
    llvm::function_ref<std::pair<Value, Value>(Value)> keysOf) {
  // lo: a run proven empty (0 or a box the classifier called Empty); hi:
  // the longest run not yet excluded. Steps past lo == hi change nothing.
  auto loop =
      scf::ForOp::create(b, ops.toIndex(ops.ci32(0)), ops.toIndex(steps), one,
                         ValueRange{ops.ci32(0), limit});
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  Value lo = loop.getRegionIterArgs()[0], hi = loop.getRegionIterArgs()[1];
  Value active = ops.cmp(arith::CmpIPredicate::slt, lo, hi);
  Value mid = arith::ShRUIOp::create(b, ops.add(ops.add(lo, hi), ops.ci32(1)),
                                     ops.ci32(1));
  auto [kvLo, kvHi] = keysOf(mid);
  Value empty = ops.lnot(classifyKeys(kvLo, kvHi).second);
  Value grow = ops.land(active, empty);
  Value shrink = ops.land(active, ops.lnot(empty));
  scf::YieldOp::create(
      b, ValueRange{ops.sel(grow, mid, lo),
                    ops.sel(shrink, ops.sub(mid, ops.ci32(1)), hi)});
  return loop.getResult(0);
}

std::pair<Value, Value> DecodeKernelBuilder::visibleTiles() {
  // frontend DecodeSplits.h's visibleKeyTiles: bit_width(tiles) halvings for
  // the leading run of empty tiles (boxes [0, n tiles)), then as many for
  // the trailing one (boxes [last n tiles, seqlen_k)).
  const int BN = c.blockN;
  Value steps =
      ops.sub(ops.ci32(32), math::CountLeadingZerosOp::create(b, numKv));
  Value last = ops.sub(seqLen, ops.ci32(1));
  Value lead = longestEmptyRun(numKv, steps, [&](Value n) {
    return std::pair{
        ops.ci32(0),
        ops.sub(arith::MinSIOp::create(b, ops.mul(n, ops.ci32(BN)), seqLen),
                ops.ci32(1))};
  });
  Value trail = longestEmptyRun(ops.sub(numKv, lead), steps, [&](Value n) {
    return std::pair{ops.mul(ops.sub(numKv, n), ops.ci32(BN)), last};
  });
  return {lead, ops.sub(numKv, trail)};
}

void DecodeKernelBuilder::planKeyTiles() {
  const int BN = c.blockN;
  numKv = arith::DivUIOp::create(b, ops.add(seqLen, ops.ci32(BN - 1)),
                                 ops.ci32(BN));
  one = arith::ConstantIndexOp::create(b, 1);
  if (!em.hasMask()) {
    Value perSplit = arith::DivUIOp::create(
        b, ops.sub(ops.add(numKv, numSplits), ops.ci32(1)), numSplits);
    jBegin = ops.mul(split, perSplit);
    jEnd = ops.sub(arith::MinSIOp::create(b, numKv, ops.add(jBegin, perSplit)),
                   ops.ci32(1));
    return;
  }
  // The splits divide the tiles that may hold a visible key
  // [visFirst, visEnd) (DecodeSplits.h's decodeSplitTiles), not the whole
  // sequence: a sliding window's splits all get work.
  auto [visFirst, visEnd] = visibleTiles();
  Value count = ops.sub(visEnd, visFirst);
  Value perSplit = arith::DivUIOp::create(
      b, ops.sub(ops.add(count, numSplits), ops.ci32(1)), numSplits);
  jBegin = ops.add(visFirst, ops.mul(split, perSplit));
  jEnd = ops.sub(arith::MinSIOp::create(b, visEnd, ops.add(jBegin, perSplit)),
                 ops.ci32(1));
  // The first and last tiles of the split that are not empty (with none,
  // first = jEnd + 1 > last = jEnd).
  auto scan = scf::ForOp::create(
      b, ops.toIndex(arith::MinSIOp::create(b, jBegin, visEnd)),
      ops.toIndex(ops.add(jEnd, ops.ci32(1))), one,
      ValueRange{ops.add(jEnd, ops.ci32(1)), jEnd}); // none: first > last
  {
    OpBuilder::InsertionGuard sg(b);
    b.setInsertionPointToStart(scan.getBody());
    Value j = arith::IndexCastOp::create(b, ops.i32, scan.getInductionVar());
    Value nonEmpty = classify(j).second;
    Value first = ops.sel(
        nonEmpty, arith::MinSIOp::create(b, scan.getRegionIterArgs()[0], j),
        scan.getRegionIterArgs()[0]);
    Value last = ops.sel(nonEmpty, j, scan.getRegionIterArgs()[1]);
    scf::YieldOp::create(b, ValueRange{first, last});
  }
  jBegin = scan.getResult(0);
  jEnd = scan.getResult(1);
}

SmallVector<Value> DecodeKernelBuilder::pageIdsOf(Value j, int dim) {
  // The rows loadRowsAsync gives this thread, one per iteration; a row at or
  // past the sequence's end reads entry 0 (the table has at least one), so
  // no read leaves the table whatever j is.
  const int chunksPerRow = dim / 8, total = c.blockN * chunksPerRow;
  Value kv0 = ops.mul(j, ops.ci32(c.blockN));
  SmallVector<Value> ids;
  for (int it = 0; it * nthreads < total; ++it) {
    Value row = arith::DivUIOp::create(b, ops.add(tid, ops.ci32(it * nthreads)),
                                       ops.ci32(chunksPerRow));
    Value kv = ops.add(kv0, row);
    Value valid = ops.cmp(arith::CmpIPredicate::slt, kv, seqLen);
    Value entry = ops.sel(
        valid, ops.add(pageStart, arith::ShRUIOp::create(b, kv, pageShift)),
        ops.ci32(0));
    ids.push_back(ops.loadI32(pages, entry));
  }
  return ids;
}

void DecodeKernelBuilder::carryPageIdsOf(Value j) {
  SmallVector<Value> ids = pageIdsOf(j, c.headDimQK);
  nKIds = static_cast<int>(ids.size());
  if (c.headDimV != c.headDimQK) {
    SmallVector<Value> v = pageIdsOf(j, c.headDimV);
    nVIds = static_cast<int>(v.size());
    ids.append(v.begin(), v.end());
  }
  init.append(ids.begin(), ids.end());
}

void DecodeKernelBuilder::loadKV(Value j, Value stage, ValueRange kIds,
                                 ValueRange vIds) {
  Value kv0 = ops.mul(j, ops.ci32(c.blockN));
  Value off = ops.mul(ops.ext64(stage), ops.ci64(stageBytes));
  Value slotMask =
      ops.sub(arith::ShLIOp::create(b, ops.ci32(1), pageShift), ops.ci32(1));
  auto rowOf = [&](Value ptr, Value *s, ValueRange ids) {
    return [&, ptr, s, ids](Value row, int it) {
      Value kv = ops.add(kv0, row);
      Value valid = ops.cmp(arith::CmpIPredicate::slt, kv, seqLen);
      Value slot = ops.land(ops.sel(valid, kv, ops.ci32(0)), slotMask);
      Value e = ops.add(ops.add(ops.mul(ops.ext64(ids[it]), s[0]),
                                ops.mul(ops.ext64(headKV), s[1])),
                        ops.mul(ops.ext64(slot), s[2]));
      return std::pair{valid, ops.gepBytes(ptr, ops.mul(e, ops.ci64(2)))};
    };
  };
  loadRowsAsync(ops, tid, nthreads, ops.gepBytes(sK, off), c.blockN,
                c.headDimQK, rowOf(kPtr, kS, kIds));
  loadRowsAsync(ops, tid, nthreads, ops.gepBytes(sV, off), c.blockN, c.headDimV,
                rowOf(vPtr, vS, vIds));
  NVVM::CpAsyncCommitGroupOp::create(b);
}

ValueRange DecodeKernelBuilder::mainLoop() {
  Value lb = ops.toIndex(jBegin);
  Value ub = ops.toIndex(arith::MaxSIOp::create(
      b, ops.add(jEnd, ops.ci32(1)), jBegin)); // empty when jEnd < jBegin
  auto loop = scf::ForOp::create(b, lb, ub, one, init);
  OpBuilder::InsertionGuard lg(b);
  b.setInsertionPointToStart(loop.getBody());
  Value j = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
  ValueRange state = loop.getRegionIterArgs();
  Value stage = ops.land(ops.sub(j, jBegin), ops.ci32(1));
  Value nextStage = arith::XOrIOp::create(b, stage, ops.ci32(1));
  ValueRange kIds = state.slice(init.size() - nKIds - nVIds, nKIds);
  ValueRange vIds = nVIds ? state.slice(init.size() - nVIds, nVIds) : kIds;
  state = state.take_front(init.size() - nKIds - nVIds);
  ifElse(
      b, ops.cmp(arith::CmpIPredicate::slt, j, jEnd),
      [&] {
        loadKV(ops.add(j, ops.ci32(1)), nextStage, kIds, vIds);
        NVVM::CpAsyncWaitGroupOp::create(b, 1);
      },
      [&] { NVVM::CpAsyncWaitGroupOp::create(b, 0); });
  // The page ids of tile j + 2, in flight during this tile's math.
  SmallVector<Value> nextIds = pageIdsOf(ops.add(j, ops.ci32(2)), c.headDimQK);
  if (nVIds) {
    SmallVector<Value> v = pageIdsOf(ops.add(j, ops.ci32(2)), c.headDimV);
    nextIds.append(v.begin(), v.end());
  }
  mma->publishStage();
  gpu::BarrierOp::create(b);
  SmallVector<Value> yield = visitTile(j, stage, state);
  gpu::BarrierOp::create(b); // this stage is free for the next prefetch
  yield.append(nextIds.begin(), nextIds.end());
  scf::YieldOp::create(b, yield);
  return loop.getResults();
}

SmallVector<Value> DecodeKernelBuilder::visitTile(Value j, Value stage,
                                                  ValueRange state) {
  stageOff = ops.mul(ops.ext64(stage), ops.ci64(stageBytes));
  mma->selectStage(stageOff);
  Value kv0 = ops.mul(j, ops.ci32(c.blockN));
  auto [mayBeFalse, mayBeTrue] = classify(j);
  Value pastEnd = ops.cmp(arith::CmpIPredicate::sgt,
                          ops.add(kv0, ops.ci32(c.blockN)), seqLen);
  Value needsMask = ops.lor(mayBeFalse, pastEnd);
  Value poisoned = voteMaskedValues(mayBeTrue, needsMask);
  SmallVector<Type> stateTypes(state.size(), ops.f32);
  auto tileIf =
      scf::IfOp::create(b, stateTypes, ops.land(mayBeTrue, warpActive),
                        /*withElse=*/true);
  {
    OpBuilder::InsertionGuard eg(b);
    b.setInsertionPointToStart(tileIf.elseBlock());
    // Warps without rows share the guarded path's barriers and rewrite.
    if (poisoned)
      joinRewriteIf(ops, poisoned, sh, ops.gepBytes(sV, stageOff),
                    VoteGroup{tid, nthreads, 0}, /*swizzled=*/false,
                    /*asyncProxy=*/false);
    scf::YieldOp::create(b, state);
    b.setInsertionPointToStart(tileIf.thenBlock());
    scf::YieldOp::create(b, tileStep(state, kv0, needsMask, poisoned));
  }
  return SmallVector<Value>(tileIf.getResults());
}

Value DecodeKernelBuilder::voteMaskedValues(Value visited, Value needsMask) {
  if (!em.hasMask() || !maskedValueIsolation())
    return Value();
  return tileHasNonFiniteIf(ops, ops.land(visited, needsMask),
                            VoteGroup{tid, nthreads, 0},
                            ops.gepBytes(sV, stageOff), c.blockN, c.headDimV,
                            /*swizzled=*/false);
}

SmallVector<Value> DecodeKernelBuilder::tileStep(ValueRange state, Value kv0,
                                                 Value needsMask,
                                                 Value poisoned) {
  const int nS = sh.sTiles(), nO = sh.oTiles();
  SmallVector<Value> s = mma->computeS();
  at.kvLane = ops.add(kv0, ops.mul(t, ops.ci32(2)));
  SmallVector<Type> sTypes(nS * 4, ops.f32);
  auto maskIf = scf::IfOp::create(b, sTypes, needsMask, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard mg(b);
    for (bool masked : {true, false}) {
      b.setInsertionPointToStart(masked ? maskIf.thenBlock()
                                        : maskIf.elseBlock());
      scf::YieldOp::create(b, variantScoresPacked(ops, em, s, at, 1, nS, scale,
                                                  scaleLog2, masked));
    }
  }
  SmallVector<Value> st(maskIf.getResults());
  SmallVector<Value> o(state.begin(), state.begin() + nAcc);
  SoftmaxRows old;
  old.m.assign(state.begin() + nAcc, state.begin() + nAcc + 2);
  old.l.assign(state.begin() + nAcc + 2, state.begin() + nAcc + 4);
  SmallVector<Value> alpha;
  SoftmaxRows next = softmaxStep(ops, st, 1, nS, old, alpha);
  rescaleRows(ops, o, 1, nO, alpha);
  if (poisoned)
    o = isolateNonFiniteV(ops, sh, o, st, poisoned, ops.gepBytes(sV, stageOff),
                          lane, VoteGroup{tid, nthreads, 0},
                          /*swizzled=*/false, /*asyncProxy=*/false);
  o = mma->accumulatePV(o, st);
  o.append(next.m.begin(), next.m.end());
  o.append(next.l.begin(), next.l.end());
  return o;
}

} // namespace detail

void buildFlashDecodeKernels(OpBuilder &builder, Location loc,
                             Operation *gpuModule, const KernelShape &config,
                             FragmentEmitter &emitter) {
  ImplicitLocOpBuilder b(loc, builder);
  detail::DecodeKernelBuilder(b, config, emitter).build(gpuModule);
  detail::buildDecodeMergeKernel(b, gpuModule, config);
}

} // namespace flashjit::nvvm
