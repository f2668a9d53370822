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
// warpgroup loads, the consumer warps compute, buildWarpSpecialized); for
// each key tile that is not empty:
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

#include "KernelOps.h"
#include "MmaStrategy.h"
#include "OnlineSoftmax.h"
#include "SharedTile.h"
#include "Tma.h"
#include "VariantTile.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;

namespace flashjit::nvvm {

namespace abi = flashjit::abi::gpu;

namespace {

class ForwardKernelBuilder {
public:
  ForwardKernelBuilder(ImplicitLocOpBuilder &b, const KernelShape &c,
                       FragmentEmitter &em)
      : ops(b, c.bf16), b(b), c(c), em(em), nthreads(32 * c.numWarps) {
    sh.headDimQK = c.headDimQK;
    sh.headDimV = c.headDimV;
    sh.blockM = c.blockM();
    sh.blockN = c.blockN;
    sh.rowsPerWarp = c.rowsPerWarp;
  }

  void build(Operation *gpuModule);

private:
  gpu::GPUFuncOp declare(Operation *gpuModule);
  void bindArguments(gpu::GPUFuncOp fn);
  /// Indices of this CTA and thread, the sequence (varlen), tensor bases.
  void locate();
  /// Shared memory, the Q load, the MMA's addresses, the loop state.
  void prologue();
  /// [jBegin, jEnd]: the positions of the key tiles the loop visits.
  void planKeyTiles();
  /// Loads key tile \p j into K/V stage \p stage (cp.async, one group; tma:
  /// the caller is one thread, the stage's mbarrier completes the copy).
  void loadKV(Value j, Value stage);
  /// tma: the mbarrier of K/V stage \p stage (i32), or Q's (stage -1).
  Value barrier(Value stage) {
    return ops.gepBytes(
        bars, ops.mul(ops.ext64(ops.add(stage, ops.ci32(1))), ops.ci64(8)));
  }
  /// tma: thread 0 arms stage \p stage's mbarrier and loads key tile \p j
  /// into it, when tile position \p pos is at most jEnd.
  void issueKV(Value pos, Value stage);
  /// tma: waits for the stage of loop position \p pos (the (pos - jBegin) /
  /// stages-th use of that stage: parity its lowest bit).
  void waitKV(Value pos);
  /// The first K/V tile, then Q's fragments once Q has landed.
  void firstLoad();
  /// warpSpecialized: the producer warpgroup (setmaxnreg down; its first
  /// thread loads every K/V tile into the ring, each stage once the
  /// consumers have released it) and the consumer warps (setmaxnreg up;
  /// the loop and the epilogue) as the two branches of one scf.if.
  void buildWarpSpecialized();
  /// warpSpecialized: stage \p stage's "empty" mbarrier (numWarps * 32
  /// arrivals: every consumer thread once it has read the stage).
  Value emptyBarrier(Value stage) {
    return ops.gepBytes(barrier(stage), ops.ci64(8 * int64_t(stages)));
  }
  /// The loop over key tiles; returns the final state.
  ValueRange mainLoop();
  /// One non-empty key tile at \p kv0: the new loop state from \p state.
  SmallVector<Value> tileStep(ValueRange state, Value kv0, Value needsMask);
  /// O / l and LSE; rows with no allowed key give O = 0, LSE = -inf.
  void epilogue(ValueRange fin);

  /// (mayBeFalse, mayBeTrue) of key tile \p j for this CTA's query tile.
  std::pair<Value, Value> classify(Value j);
  /// The key tile at loop position \p it (block-sparse: from the lists).
  Value tileAt(Value it);
  /// tileAt(it) where it <= jEnd, else 0 (nothing read).
  Value tileAtIfAny(Value it) {
    return ops.guarded(ops.cmp(arith::CmpIPredicate::sle, it, jEnd), ops.i32,
                       ops.ci32(0), [&] { return tileAt(it); });
  }
  /// Element offset of this sequence in a tensor with strides \p s: batch *
  /// s[0], or (varlen) its first token * s[2].
  Value seqOff(Value *s, Value start) {
    return c.varlen ? ops.mul(ops.ext64(start), s[2])
                    : ops.mul(ops.ext64(batch), s[0]);
  }

  KernelOps ops;
  ImplicitLocOpBuilder &b;
  const KernelShape &c;
  FragmentEmitter &em;
  const int nthreads;
  TileShape sh;
  std::unique_ptr<ForwardMma> mma;

  // Arguments.
  Value qPtr, kPtr, vPtr, oPtr, lsePtr;
  Value qS[3], kS[3], vS[3], oS[3], lS[3];
  Value seqlenQ, seqlenK, group, scale, scaleLog2, cuQ, cuK;
  Value lists[4], rowBatchStride, rowHeadStride, listPitch;
  Value sinkPtr; // f32 [heads_q], specs with a sink only
  // Indices and bases.
  Value tid, warp, lane, g, t, qTile, head, batch, q0, qStart, kStart;
  Value kBase, vBase, oBase, sK, sV;
  int64_t stageBytes = 0;
  // tma: the tensor maps of Q, K, V, the mbarriers, the K/V head, stages.
  Value tmQ, tmK, tmV, bars, headKV, isLeader;
  int stages = 2;
  FragmentCoords at;
  Value qLast;
  // Loop state: O fragments (nAcc), m (2 MT rows), l (2 MT).
  SmallVector<Value> init;
  int nAcc = 0;
  Value numKv, jBegin, jEnd, numPartial, listRow, one;
};

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
    firstLoad();
    epilogue(mainLoop());
  }
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
  em.setArguments(a.drop_front(next));
}

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
  auto base = [&](Value ptr, Value *s, Value h, Value start) {
    Value off = ops.add(seqOff(s, start), ops.mul(ops.ext64(h), s[1]));
    return ops.gepBytes(ptr, ops.mul(off, ops.ci64(2)));
  };
  Value qBase = base(qPtr, qS, head, qStart);
  kBase = base(kPtr, kS, headKV, kStart);
  vBase = base(vPtr, vS, headKV, kStart);
  oBase = base(oPtr, oS, head, qStart);

  Value smem = ops.sharedBase();
  Value sQ = smem;
  // [Q | K0 V0 | K1 V1]: stage s of K/V starts at sK + s * stageBytes.
  mma = c.wgmma ? createWgmmaForward(ops, sh, warp)
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
                  D, mma->swizzled());
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

void ForwardKernelBuilder::prologue() {
  const int MT = sh.mTiles();
  // Rows g and g + 8 of each of the warp's m16 tiles.
  at.batch = batch;
  at.head = head;
  at.seqlenQ = seqlenQ;
  at.seqlenK = seqlenK;
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
  loadTileAsync(ops, tid, nthreads, ops.gepBytes(sK, off), kBase, kS[2], kv0,
                seqlenK, c.blockN, c.headDimQK, mma->swizzled());
  loadTileAsync(ops, tid, nthreads, ops.gepBytes(sV, off), vBase, vS[2], kv0,
                seqlenK, c.blockN, c.headDimV, mma->swizzled());
  NVVM::CpAsyncCommitGroupOp::create(b);
}

/// Runs \p then in the then-block and \p otherwise in the else-block of
/// `scf.if cond` (no results).
static void ifElse(ImplicitLocOpBuilder &b, Value cond,
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
  Value use = ops.sub(pos, jBegin);
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

ValueRange ForwardKernelBuilder::mainLoop() {
  // Block-sparse: the loop carries the current and the next listed tile,
  // and reads the one after while this one computes (no list read stalls a
  // prefetch). Positions past jEnd read nothing.
  SmallVector<Value> loopInit(init);
  if (c.blockSparse) {
    loopInit.push_back(tileAtIfAny(jBegin));
    loopInit.push_back(tileAtIfAny(ops.add(jBegin, ops.ci32(1))));
  }
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
  Value stage;
  Value jAfter;
  if (c.tma) {
    // Dense: position = tile. Issue the tile stages - 1 ahead into the
    // stage the last iteration's closing barrier freed; wait for this one.
    stage = arith::RemUIOp::create(b, ops.sub(it, jBegin), ops.ci32(stages));
    if (!c.warpSpecialized) {
      Value ahead = ops.add(it, ops.ci32(stages - 1));
      issueKV(ahead, arith::RemUIOp::create(b, ops.sub(ahead, jBegin),
                                            ops.ci32(stages)));
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
  mma->selectStage(ops.mul(ops.ext64(stage), ops.ci64(stageBytes)));
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

  SmallVector<Type> stateTypes(init.size(), ops.f32);
  auto tileIf = scf::IfOp::create(b, stateTypes, mayBeTrue, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard eg(b);
    b.setInsertionPointToStart(tileIf.elseBlock()); // empty tile: skip
    scf::YieldOp::create(b, state);
    b.setInsertionPointToStart(tileIf.thenBlock());
    scf::YieldOp::create(b, tileStep(state, kv0, needsMask));
  }
  if (c.warpSpecialized) // this thread has read the stage (wgmma waited)
    mbarrierArrive(ops, emptyBarrier(stage));
  else // this stage is free for the prefetch after next
    gpu::BarrierOp::create(b);
  SmallVector<Value> carried(tileIf.getResults());
  if (c.blockSparse)
    carried.append({jNext, jAfter});
  scf::YieldOp::create(b, carried);
  return loop.getResults();
}

void ForwardKernelBuilder::buildWarpSpecialized() {
  // FlashAttention-3's register split for two consumer warpgroups: the
  // producer keeps 24 registers per thread, the consumers get 240
  // (128 * 24 + 256 * 240 <= 65536).
  constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  Value isProducer =
      ops.cmp(arith::CmpIPredicate::sge, tid, ops.ci32(nthreads));
  ifElse(
      b, isProducer,
      [&] {
        NVVM::SetMaxRegisterOp::create(b, kProducerRegs,
                                       NVVM::SetMaxRegisterAction::decrease);
        // Use u of a stage waits for the consumers' release of use u - 1:
        // parity (u & 1) ^ 1 of its empty barrier (use 0: the phase before
        // the first, complete from the start).
        ops.ifThen(
            ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(nthreads)), [&] {
              auto loop = scf::ForOp::create(
                  b, ops.toIndex(jBegin),
                  ops.toIndex(ops.add(jEnd, ops.ci32(1))), one);
              OpBuilder::InsertionGuard lg(b);
              b.setInsertionPointToStart(loop.getBody());
              Value pos = arith::IndexCastOp::create(b, ops.i32,
                                                     loop.getInductionVar());
              Value use = ops.sub(pos, jBegin);
              Value stage = arith::RemUIOp::create(b, use, ops.ci32(stages));
              Value parity = arith::XOrIOp::create(
                  b,
                  ops.land(arith::DivUIOp::create(b, use, ops.ci32(stages)),
                           ops.ci32(1)),
                  ops.ci32(1));
              mbarrierWait(ops, emptyBarrier(stage), parity);
              loadKV(tileAt(pos), stage);
            });
      },
      [&] {
        NVVM::SetMaxRegisterOp::create(b, kConsumerRegs,
                                       NVVM::SetMaxRegisterAction::increase);
        mbarrierWait(ops, barrier(ops.ci32(-1)), ops.ci32(0)); // Q has landed
        epilogue(mainLoop());
      });
}

SmallVector<Value> ForwardKernelBuilder::tileStep(ValueRange state, Value kv0,
                                                  Value needsMask) {
  const int MT = sh.mTiles(), nS = sh.sTiles(), nO = sh.oTiles();
  SmallVector<Value> s = mma->computeS();

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
        oBase, ops.mul(ops.mul(ops.ext64(row), oS[2]), ops.ci64(2)));
    for (int jd = 0; jd < nO; ++jd) {
      int a0 = (mt * nO + jd) * 4 + 2 * r;
      Value v =
          ops.pack(ops.fmul(fin[a0], f.inv), ops.fmul(fin[a0 + 1], f.inv));
      Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jd * 8));
      Value p = ops.gepBytes(rowBase, ops.ext64(ops.mul(col, ops.ci32(2))));
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

} // namespace

void buildFlashForwardKernel(OpBuilder &builder, Location loc,
                             Operation *gpuModule, const KernelShape &config,
                             FragmentEmitter &emitter) {
  ImplicitLocOpBuilder b(loc, builder);
  ForwardKernelBuilder(b, config, emitter).build(gpuModule);
}

} // namespace flashjit::nvvm
