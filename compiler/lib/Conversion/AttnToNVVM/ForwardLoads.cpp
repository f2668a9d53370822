//===- ForwardLoads.cpp - Q, K and V into shared memory (GPU forward) -----===//
//
// The forward kernel's loads (ForwardKernelBuilder.h): the shared-memory
// layout of Q and the K/V stages, cp.async double buffering, TMA into a
// ring of stages completing on mbarriers (Tma.cpp), and the
// warp-specialised structure (a producer warpgroup issuing the TMA loads,
// the consumer warps computing, setmaxnreg between them).
//
//===----------------------------------------------------------------------===//
#include "ForwardKernelBuilder.h"

#include "SharedTile.h"
#include "Tma.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace flashjit::nvvm::detail {

void ForwardKernelBuilder::locate() {
  tid = NVVM::ThreadIdXOp::create(b, ops.i32);
  warp = arith::DivUIOp::create(b, tid, ops.ci32(32));
  lane = arith::RemUIOp::create(b, tid, ops.ci32(32));
  g = arith::DivUIOp::create(b, lane, ops.ci32(4));
  t = arith::RemUIOp::create(b, lane, ops.ci32(4));
  // Longest query tiles first: causal rows near the end see the most keys.
  Value nqt = NVVM::GridDimXOp::create(b, ops.i32);
  qTile =
      ops.sub(ops.sub(nqt, ops.ci32(1)), NVVM::BlockIdXOp::create(b, ops.i32));
  head = NVVM::BlockIdYOp::create(b, ops.i32);
  batch = NVVM::BlockIdZOp::create(b, ops.i32);
  headKV = arith::DivUIOp::create(b, head, group);
  q0 = ops.mul(qTile, ops.ci32(c.blockM()));

  // varlen: this CTA's sequence is query tokens [qStart, qStart + seqlenQ)
  // and key tokens [kStart, kStart + seqlenK); nothing to do past its end.
  if (c.varlen) {
    VarlenSequence s = loadVarlenSequence(ops, cuQ, cuK, batch);
    qStart = s.qStart;
    kStart = s.kStart;
    seqlenQ = s.seqlenQ;
    seqlenK = s.seqlenK;
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, q0, seqlenQ));
  }
  Value qBase = inputBase(qPtr, qS, head, qStart);
  kBase = inputBase(kPtr, kS, headKV, kStart);
  vBase = inputBase(vPtr, vS, headKV, kStart);
  // The overlapped consumers' loop (ForwardOverlap.cpp) leaves no register
  // for O's base beside it: the epilogue computes it there.
  if (!c.overlapSoftmax)
    oBase = tensorBase(oPtr, oS, head, qStart);

  Value smem = ops.sharedBase();
  Value sQ = smem;
  if (c.fp8()) {
    loadDescales();
    planFp8Tiles(smem);
    loadFp8TileAsync(ops, tid, nthreads, sQ, qBase, qS[2], q0, seqlenQ,
                     c.blockM(), c.headDimQK);
    NVVM::CpAsyncCommitGroupOp::create(b);
    mma->prepare(sQ, sK, sV);
    return;
  }
  // [Q | K0 V0 | K1 V1]: stage s of K/V starts at sK + s * stageBytes.
  // The overlapped consumers of masked kernels hold the descriptors' low
  // words only (without this, ptxas -v on sm_90a at head dim 128 spilled 8
  // bytes stored, 32 loaded: the Q descriptor, reloaded once per tile);
  // unmasked ones keep 64-bit descriptors (with 32-bit ones dense spilled
  // 4 bytes).
  mma = c.wgmma ? createWgmmaForward(ops, sh, warp,
                                     c.overlapSoftmax && em.hasMask())
                : createMmaSyncForward(ops, sh, warp, lane);
  const int D = c.headDimQK, Dv = c.headDimV;
  const int pad = mma->swizzled() ? 0 : kPad;
  sK = ops.gepBytes(smem, int64_t(2) * c.blockM() * (D + pad));
  sV = ops.gepBytes(sK, int64_t(2) * c.blockN * (D + pad));
  stageBytes = int64_t(2) * c.blockN * (D + pad + Dv + pad);
  stages = c.kvStages(D, Dv);

  if (!c.tma) {
    // Q tile: loaded once.
    loadTileAsync(ops, tid, nthreads, sQ, qBase, qS[2], q0, seqlenQ, c.blockM(),
                  D, mma->swizzled(), c.tensorQK());
    NVVM::CpAsyncCommitGroupOp::create(b);
    mma->prepare(sQ, sK, sV);
    return;
  }
  // tma: [Q | stages x (K V) | mbarriers: Q, then one per stage (then,
  // warp-specialised, one "empty" per stage)]. Thread 0 initialises them
  // (one arrival each: its expect_tx; empty: every consumer thread) and
  // loads Q, 64 head_dim columns (one swizzled column block) per copy.
  bars = ops.gepBytes(sK, int64_t(stages) * stageBytes);
  isLeader = ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0));
  ops.ifThen(isLeader, [&] {
    for (int s = -1; s < stages; ++s)
      mbarrierInit(ops, barrier(ops.ci32(s)), 1);
    if (c.warpSpecialized)
      for (int s = 0; s < stages; ++s)
        mbarrierInit(ops, emptyBarrier(ops.ci32(s)), nthreads);
    initMaskedVotes();
  });
  gpu::BarrierOp::create(b);
  ops.ifThen(isLeader, [&] {
    Value bar = barrier(ops.ci32(-1));
    mbarrierArriveExpectTx(ops, bar, int64_t(2) * c.blockM() * D);
    for (int cb = 0; cb < D / 64; ++cb)
      tmaLoad4d(ops, ops.gepBytes(sQ, int64_t(cb) * c.blockM() * 128), tmQ,
                {ops.ci32(cb * 64), q0, head, batch}, bar);
  });
  mma->prepare(sQ, sK, sV);
}

void ForwardKernelBuilder::loadKV(Value j, Value stage) {
  Value kv0 = ops.mul(j, ops.ci32(c.blockN));
  Value off = ops.mul(ops.ext64(stage), ops.ci64(stageBytes));
  if (c.tma) {
    Value bar = barrier(stage);
    mbarrierArriveExpectTx(ops, bar,
                           int64_t(2) * c.blockN * (c.headDimQK + c.headDimV));
    auto copy = [&](Value sTile, Value map, int dim) {
      for (int cb = 0; cb < dim / 64; ++cb)
        tmaLoad4d(ops,
                  ops.gepBytes(ops.gepBytes(sTile, off),
                               int64_t(cb) * c.blockN * 128),
                  map, {ops.ci32(cb * 64), kv0, headKV, batch}, bar);
    };
    copy(sK, tmK, c.headDimQK);
    copy(sV, tmV, c.headDimV);
    return;
  }
  if (c.fp8()) {
    loadFp8TileAsync(ops, tid, nthreads, ops.gepBytes(sK, off), kBase, kS[2],
                     kv0, seqlenK, c.blockN, c.headDimQK);
    loadFp8TileAsync(ops, tid, nthreads, ops.gepBytes(sV, off), vBase, vS[2],
                     kv0, seqlenK, c.blockN, c.headDimV);
    NVVM::CpAsyncCommitGroupOp::create(b);
    return;
  }
  loadTileAsync(ops, tid, nthreads, ops.gepBytes(sK, off), kBase, kS[2], kv0,
                seqlenK, c.blockN, c.headDimQK, mma->swizzled(), c.tensorQK());
  loadTileAsync(ops, tid, nthreads, ops.gepBytes(sV, off), vBase, vS[2], kv0,
                seqlenK, c.blockN, c.headDimV, mma->swizzled(), c.tensorV());
  NVVM::CpAsyncCommitGroupOp::create(b);
}

void ForwardKernelBuilder::planFp8Tiles(Value smem) {
  // [Q | K0 V0 | K1 V1 | V^T] (Fp8Abi.h: fp8SharedBytes).
  const int D = c.headDimQK, Dv = c.headDimV, BN = c.blockN;
  sK = ops.gepBytes(smem, fp8TileBytes(c.blockM(), D));
  sV = ops.gepBytes(sK, fp8TileBytes(BN, D));
  stageBytes = fp8TileBytes(BN, D) + fp8TileBytes(BN, Dv);
  stages = 2;
  Value sVt = ops.gepBytes(sK, 2 * stageBytes);
  mma = createWgmmaFp8Forward(ops, sh, warp, tid, nthreads, sVt, c.fp8Q, c.fp8K,
                              c.fp8V);
}

void ForwardKernelBuilder::loadDescales() {
  // descale[i] ? descale[i][block ? batch * heads_kv + kv head : 0] : 1
  Value perBlock = ops.add(ops.mul(batch, headsKV), headKV);
  Value f[3];
  for (int i = 0; i < 3; ++i) {
    Value set =
        ops.cmp(arith::CmpIPredicate::ne,
                LLVM::PtrToIntOp::create(b, ops.i64, descale[i]), ops.ci64(0));
    Value at =
        ops.sel(ops.cmp(arith::CmpIPredicate::ne, descaleBlock[i], ops.ci32(0)),
                perBlock, ops.ci32(0));
    f[i] = ops.guarded(set, ops.f32, ops.cf32(1.0f), [&] {
      Value p = ops.gepBytes(descale[i], ops.mul(ops.ext64(at), ops.ci64(4)));
      return LLVM::LoadOp::create(b, ops.f32, p, /*alignment=*/4).getResult();
    });
  }
  Value qk = ops.fmul(f[0], f[1]);
  scale = ops.fmul(scale, qk);
  scaleLog2 = ops.fmul(scaleLog2, qk);
  oFactor = ops.fmul(f[2], ops.cf32(1.0f / 256.0f));
}

void ifElse(ImplicitLocOpBuilder &b, Value cond,
            llvm::function_ref<void()> then,
            llvm::function_ref<void()> otherwise) {
  auto ifOp = scf::IfOp::create(b, cond, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  then();
  b.setInsertionPointToStart(ifOp.elseBlock());
  otherwise();
}

void ForwardKernelBuilder::issueKV(Value pos, Value stage) {
  ops.ifThen(ops.land(isLeader, ops.cmp(arith::CmpIPredicate::sle, pos, jEnd)),
             [&] { loadKV(pos, stage); });
}

void ForwardKernelBuilder::waitKV(Value pos) {
  Value use = useOf(pos);
  Value stage = arith::RemUIOp::create(b, use, ops.ci32(stages));
  Value parity =
      ops.land(arith::DivUIOp::create(b, use, ops.ci32(stages)), ops.ci32(1));
  mbarrierWait(ops, barrier(stage), parity);
}

void ForwardKernelBuilder::firstLoad() {
  if (c.tma) {
    // The first stages - 1 tiles; the loop issues one more per tile.
    for (int s = 0; s + 1 < stages; ++s)
      issueKV(ops.add(jBegin, ops.ci32(s)), ops.ci32(s));
    mbarrierWait(ops, barrier(ops.ci32(-1)), ops.ci32(0)); // Q has landed
    return;
  }
  ifElse(
      b, ops.cmp(arith::CmpIPredicate::sle, jBegin, jEnd),
      [&] {
        loadKV(tileAt(jBegin), ops.ci32(0));
        NVVM::CpAsyncWaitGroupOp::create(b, 1); // Q has landed
      },
      [&] { NVVM::CpAsyncWaitGroupOp::create(b, 0); });
  gpu::BarrierOp::create(b);
  mma->loadQ();
}

void ForwardKernelBuilder::buildWarpSpecialized() {
  // FlashAttention-3's register split: the producer keeps 24 registers per
  // thread, two consumer warpgroups get 240 (128 * 24 + 256 * 240 <=
  // 65536), three get 160 (128 * 24 + 384 * 160 <= 65536).
  constexpr int kProducerRegs = 24;
  const int kConsumerRegs = c.numWarps == 12 ? 160 : 240;
  Value isProducer =
      ops.cmp(arith::CmpIPredicate::sge, tid, ops.ci32(nthreads));
  ifElse(
      b, isProducer,
      [&] {
        NVVM::SetMaxRegisterOp::create(b, kProducerRegs,
                                       NVVM::SetMaxRegisterAction::decrease);
        // Use u of a stage waits for the consumers' release of use u - 1:
        // parity (u & 1) ^ 1 of its empty barrier (use 0: the phase before
        // the first, complete from the start). checkedLoop: after the
        // first pass the consumers' decision; where they rerun, the same
        // tiles again, the uses going on from the first pass's count (the
        // consumers released every stage of it before deciding).
        auto produce = [&](Value useBase) {
          auto loop =
              scf::ForOp::create(b, ops.toIndex(jBegin),
                                 ops.toIndex(ops.add(jEnd, ops.ci32(1))), one);
          OpBuilder::InsertionGuard lg(b);
          b.setInsertionPointToStart(loop.getBody());
          Value pos =
              arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
          Value use = ops.sub(pos, jBegin);
          if (useBase)
            use = ops.add(use, useBase);
          Value stage = arith::RemUIOp::create(b, use, ops.ci32(stages));
          Value parity = arith::XOrIOp::create(
              b,
              ops.land(arith::DivUIOp::create(b, use, ops.ci32(stages)),
                       ops.ci32(1)),
              ops.ci32(1));
          mbarrierWait(ops, emptyBarrier(stage), parity);
          loadKV(tileAt(pos), stage);
        };
        ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(nthreads)),
                   [&] {
                     produce(Value());
                     if (checksResults())
                       ops.ifThen(awaitDecision(), [&] {
                         produce(ops.add(ops.sub(jEnd, jBegin), ops.ci32(1)));
                       });
                   });
      },
      [&] {
        NVVM::SetMaxRegisterOp::create(b, kConsumerRegs,
                                       NVVM::SetMaxRegisterAction::increase);
        mbarrierWait(ops, barrier(ops.ci32(-1)), ops.ci32(0)); // Q has landed
        beginScoreRowFactors();
        if (checksResults())
          epilogue(checkedLoop());
        else if (c.overlapSoftmax)
          epilogue(overlapLoop());
        else
          epilogue(mainLoop());
      });
}

} // namespace flashjit::nvvm::detail
