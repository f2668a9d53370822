//===- FlashForwardKernel.cpp - FlashAttention-2 GPU forward kernel -------===//
//
// Pre: an empty gpu.module. Post: it holds one gpu.func kernel (and the
// extern shared-memory symbol) built from nvvm, llvm, arith and scf ops; the
// stock gpu-lower-to-nvvm pipeline turns it into PTX.
//
// The algorithm is FlashAttention-2's forward pass (Dao 2023, Algorithm 1):
// one CTA per (query tile, head, batch); each warp owns 16 or 32 query rows
// (one or two m16 tiles sharing every K/V fragment); for each key tile: S = Q
// K^T on tensor cores (mma.sync m16n8k16, fp32 accumulators), score modifier
// and mask on the accumulator fragments, online softmax (running max m and sum
// l, exp2 with log2(e) folded into the scale), O = O * alpha + P V with P kept
// in registers (the C-fragment layout of two n8 tiles is the A-fragment layout
// of one k16 slice). Fragment layouts: ../shared/notes/MMA-FRAGMENTS.md.
//
// With config.wgmma (sm_90a) each warpgroup (4 warps, 64 query rows) issues
// wgmma.mma_async instead: S = Q K^T with both operands read from shared
// memory through matrix descriptors, O += P V with P in registers. The
// accumulator of wgmma m64nN is, per warp, the C-fragment layout of N / 8
// mma.sync n8 tiles, so the mask, score modifier and softmax code is the
// same. Tiles are stored in 64-element column blocks of 128-byte rows with
// the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), the
// canonical layout of wgmma's descriptors (PTX ISA, "Matrix Descriptor
// Format" and "Shared Memory Matrix Layout").
//
//===----------------------------------------------------------------------===//
#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace flashjit::nvvm {

static constexpr const char *kSharedSymbol = "flashjit_smem";
static constexpr int kPad = 8; // elements of padding per shared-memory row

int KernelConfig::sharedBytes() const {
  if (wgmma) // unpadded, swizzled tiles
    return 2 * (blockM * headDimQK + 2 * blockN * (headDimQK + headDimV));
  int q = blockM * (headDimQK + kPad);
  int k = blockN * (headDimQK + kPad);
  int v = blockN * (headDimV + kPad);
  return 2 * (q + 2 * (k + v)); // K and V are double-buffered
}

namespace {

class KernelBuilder {
public:
  KernelBuilder(ImplicitLocOpBuilder &b, const KernelConfig &c,
                FragmentEmitter &em)
      : b(b), c(c), em(em) {
    MLIRContext *ctx = b.getContext();
    i1 = b.getI1Type();
    i8 = b.getI8Type();
    i32 = b.getI32Type();
    i64 = b.getI64Type();
    f32 = b.getF32Type();
    ptrG = LLVM::LLVMPointerType::get(ctx, 1);
    ptrS = LLVM::LLVMPointerType::get(ctx, 3);
    nthreads = 32 * c.numWarps;
  }

  void build(Operation *gpuModule);
  void buildBlockMask(Operation *gpuModule);

private:
  // --- small helpers -------------------------------------------------------
  Value ci32(int64_t v) {
    return arith::ConstantOp::create(b, b.getI32IntegerAttr(v));
  }
  Value ci64(int64_t v) {
    return arith::ConstantOp::create(b, b.getI64IntegerAttr(v));
  }
  Value cf32(float v) {
    return arith::ConstantOp::create(b, b.getF32FloatAttr(v));
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, x, y); }
  Value ext64(Value x) { return arith::ExtSIOp::create(b, i64, x); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, p, x, y);
  }
  Value sel(Value cnd, Value x, Value y) {
    return arith::SelectOp::create(b, cnd, x, y);
  }
  // The softmax's own arithmetic may contract into FMAs (x * scale - m is
  // one FFMA, as in FlashAttention-2); the user's regions never do.
  Value fadd(Value x, Value y) {
    return arith::AddFOp::create(b, x, y, arith::FastMathFlags::contract);
  }
  Value fmul(Value x, Value y) {
    return arith::MulFOp::create(b, x, y, arith::FastMathFlags::contract);
  }
  Value fsub(Value x, Value y) {
    return arith::SubFOp::create(b, x, y, arith::FastMathFlags::contract);
  }
  Value fmax(Value x, Value y) { return arith::MaximumFOp::create(b, x, y); }
  Value exp2(Value x) { return math::Exp2Op::create(b, x); }
  /// \p base advanced by \p bytes (i64).
  Value gepBytes(Value base, Value bytes) {
    return LLVM::GEPOp::create(b, base.getType(), i8, base, ValueRange{bytes});
  }
  Value gepBytes(Value base, int64_t bytes) {
    if (bytes == 0)
      return base;
    return LLVM::GEPOp::create(b, base.getType(), i8, base,
                               ArrayRef<LLVM::GEPArg>{LLVM::GEPArg(bytes)});
  }

  SmallVector<Value, 4> ldmatrix(Value addr, bool trans) {
    auto st =
        LLVM::LLVMStructType::getLiteral(b.getContext(), {i32, i32, i32, i32});
    Value r = NVVM::LdMatrixOp::create(
        b, st, addr, 4u, trans ? NVVM::MMALayout::col : NVVM::MMALayout::row,
        NVVM::LdStMatrixShapeAttr::get(b.getContext(), 8, 8),
        NVVM::LdStMatrixEltType::B16);
    SmallVector<Value, 4> out;
    for (int64_t i = 0; i < 4; ++i)
      out.push_back(LLVM::ExtractValueOp::create(b, r, i));
    return out;
  }

  Value asOperand(Value packed) {
    if (c.bf16)
      return packed;
    return LLVM::BitcastOp::create(b, VectorType::get({2}, b.getF16Type()),
                                   packed);
  }

  /// acc[0..3] += A(4 regs) * B(2 regs).
  void mma(ArrayRef<Value> a, Value b0, Value b1, MutableArrayRef<Value> acc) {
    auto st =
        LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
    SmallVector<Value> av, bv;
    for (Value x : a)
      av.push_back(asOperand(x));
    bv.push_back(asOperand(b0));
    bv.push_back(asOperand(b1));
    NVVM::MMATypes t = c.bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
    Value d = NVVM::MmaOp::create(
        b, st, av, bv, ValueRange(acc), ArrayRef<int64_t>{16, 8, 16},
        std::nullopt, std::nullopt, std::array<NVVM::MMATypes, 2>{t, t},
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                       NVVM::MMALayout::col});
    for (int64_t i = 0; i < 4; ++i)
      acc[i] = LLVM::ExtractValueOp::create(b, d, i);
  }

  Value cb(bool v) { return arith::ConstantOp::create(b, b.getBoolAttr(v)); }

  /// `cond ? make() : otherwise`, with make()'s code run only when \p cond
  /// holds (scf.if).
  Value guarded(Value cond, Type type, Value otherwise,
                llvm::function_ref<Value()> make) {
    auto ifOp = scf::IfOp::create(b, TypeRange{type}, cond, /*withElse=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, make());
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, otherwise);
    return ifOp.getResult(0);
  }

  Value shflXor(Value v, int offset) {
    return NVVM::ShflOp::create(b, f32, ci32(-1), v, ci32(offset), ci32(0x1f),
                                NVVM::ShflKind::bfly, UnitAttr());
  }

  /// Packs two f32 into one i32 holding two 16-bit floats (lo first).
  Value pack(Value lo, Value hi) {
    Type h = c.bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
    Value l = arith::TruncFOp::create(b, h, lo);
    Value u = arith::TruncFOp::create(b, h, hi);
    auto vt = VectorType::get({2}, h);
    Value v = LLVM::UndefOp::create(b, vt);
    v = LLVM::InsertElementOp::create(b, v, l, ci32(0));
    v = LLVM::InsertElementOp::create(b, v, u, ci32(1));
    return LLVM::BitcastOp::create(b, i32, v);
  }

  /// Byte offset in shared memory of the 16-byte chunk \p col (8 elements)
  /// of row \p row in a tile of \p rows x \p dim 16-bit elements: rows of
  /// dim + kPad elements (mma.sync), or (wgmma) 64-element column blocks of
  /// rows x 128 bytes with chunk c of row r stored at chunk c ^ (r % 8).
  Value tileOffset(Value row, Value col, int rows, int dim) {
    if (!c.wgmma)
      return mul(add(mul(row, ci32(dim + kPad)), mul(col, ci32(8))), ci32(2));
    Value block = arith::DivUIOp::create(b, col, ci32(8));
    Value chunk =
        arith::XOrIOp::create(b, arith::RemUIOp::create(b, col, ci32(8)),
                              arith::RemUIOp::create(b, row, ci32(8)));
    return add(add(mul(block, ci32(rows * 128)), mul(row, ci32(128))),
               mul(chunk, ci32(16)));
  }

  /// The wgmma matrix descriptor of a 128-byte-swizzled operand at \p addr
  /// (shared-memory byte address, i64; 1024-byte aligned up to the k-step
  /// offset) with leading / stride byte offsets \p lbo / \p sbo: start
  /// address >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45,
  /// swizzle mode 1 (128 bytes) in bits 62-63 (PTX ISA, wgmma "Matrix
  /// Descriptor Format"). Adding k-step offsets of less than 1024 bytes to
  /// the start address stays inside one swizzle atom.
  Value descriptor(Value addr, int64_t lbo, int64_t sbo) {
    Value start = arith::ShRUIOp::create(
        b, arith::AndIOp::create(b, addr, ci64(0x3FFFF)), ci64(4));
    int64_t bits = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (int64_t(1) << 62);
    return arith::OrIOp::create(b, start, ci64(bits));
  }

  /// One warpgroup's wgmma.mma_async chain, issued, committed and waited for
  /// in one inline-asm block (so nothing reads the accumulators early): the
  /// m64nN accumulator (N / 2 f32 per thread) becomes \p acc + sum over
  /// steps of A_s B_s (k16 each), or the sum alone when \p acc is empty and
  /// \p n is given (the first step then ignores the registers' contents:
  /// scale-d = 0). A_s is a shared-memory descriptor (\p aDesc[s]) or, when
  /// \p aRegs is not empty, 4 packed registers (\p aRegs[4 s..]); B_s is
  /// the descriptor \p bDesc[s], MN-major when \p transB.
  SmallVector<Value> wgmmaChain(ArrayRef<Value> acc, int n,
                                ArrayRef<Value> aDesc, ArrayRef<Value> aRegs,
                                ArrayRef<Value> bDesc, bool transB) {
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
    const char *ty = c.bf16 ? "bf16" : "f16";
    std::string one = ref(ci32(1), "r");
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
      asmStr += "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) +
                "k16.f32." + ty + "." + ty + " " + dlist + ", " + a + ", " +
                bd + (st == 0 && !accumulate ? ", z" : ", p") + ", 1, 1" +
                (aRegs.empty() ? ", 0" : "") + (transB ? ", 1" : ", 0") + ";\n";
    }
    asmStr += "wgmma.commit_group.sync.aligned;\n"
              "wgmma.wait_group.sync.aligned 0;\n}";
    cons.pop_back();
    SmallVector<Type> fields(nAccum, f32);
    auto op =
        inlineAsm(LLVM::LLVMStructType::getLiteral(b.getContext(), fields),
                  operands, asmStr, cons);
    SmallVector<Value> out;
    for (int i = 0; i < nAccum; ++i)
      out.push_back(LLVM::ExtractValueOp::create(b, op.getResult(0), i));
    return out;
  }

  /// fence.proxy.async.shared::cta: this thread's shared-memory writes
  /// (cp.async) become visible to the async proxy (wgmma's operand reads).
  void fenceProxyAsync() {
    inlineAsm(Type(), {}, "fence.proxy.async.shared::cta;", "");
  }

  /// A side-effecting inline-PTX op (AT&T dialect; \p result null: none).
  LLVM::InlineAsmOp inlineAsm(Type result, ValueRange operands, StringRef text,
                              StringRef constraints) {
    return LLVM::InlineAsmOp::create(
        b, result ? TypeRange{result} : TypeRange{}, operands, text,
        constraints, /*has_side_effects=*/true, /*is_align_stack=*/false,
        LLVM::tailcallkind::TailCallKind::None,
        LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
        ArrayAttr());
  }

  /// cp.async a tile of \p rows x \p dim 16-bit elements from global rows
  /// row0.. (row stride \p stride elements) into shared memory at \p smem
  /// (layout: tileOffset); rows at or past \p seqlen are zero-filled.
  void loadTile(Value smem, Value gBase, Value stride, Value row0, Value seqlen,
                int rows, int dim) {
    int chunksPerRow = dim / 8;
    int total = rows * chunksPerRow;
    for (int it = 0; it * nthreads < total; ++it) {
      auto emitOne = [&]() {
        Value cidx = add(tid, ci32(it * nthreads));
        Value row = arith::DivUIOp::create(b, cidx, ci32(chunksPerRow));
        Value col = arith::RemUIOp::create(b, cidx, ci32(chunksPerRow));
        Value grow = add(row0, row);
        Value valid = cmp(arith::CmpIPredicate::slt, grow, seqlen);
        Value srow = sel(valid, grow, ci32(0)); // not read: size 0
        Value goff = add(mul(ext64(srow), stride), ext64(mul(col, ci32(8))));
        Value src = gepBytes(gBase, mul(goff, ci64(2)));
        Value dst = gepBytes(smem, ext64(tileOffset(row, col, rows, dim)));
        Value size = sel(valid, ci32(16), ci32(0));
        NVVM::CpAsyncOp::create(
            b, dst, src, b.getI32IntegerAttr(16),
            NVVM::LoadCacheModifierKindAttr::get(
                b.getContext(), NVVM::LoadCacheModifierKind::CG),
            size);
      };
      if ((it + 1) * nthreads <= total) {
        emitOne();
      } else {
        Value inRange = cmp(arith::CmpIPredicate::ult,
                            add(tid, ci32(it * nthreads)), ci32(total));
        auto ifOp = scf::IfOp::create(b, inRange, /*withElse=*/false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        emitOne();
      }
    }
  }

  void buildBody(gpu::GPUFuncOp fn);
  void buildBlockMaskBody(gpu::GPUFuncOp fn);

  /// Sequence \p batch of a varlen batch: its first query and key tokens
  /// and its lengths, from cu_seqlens_q/k[batch] and [batch + 1].
  void loadSequence(Value cuQ, Value cuK, Value batch, Value &qStart,
                    Value &kStart, Value &seqlenQ, Value &seqlenK) {
    Value next = add(batch, ci32(1));
    qStart = loadI32(cuQ, batch);
    kStart = loadI32(cuK, batch);
    seqlenQ = arith::SubIOp::create(b, loadI32(cuQ, next), qStart);
    seqlenK = arith::SubIOp::create(b, loadI32(cuK, next), kStart);
  }

  /// Element \p i (i32) of the global i32 array at \p base.
  Value loadI32(Value base, Value i) {
    Value p = LLVM::GEPOp::create(b, ptrG, i32, base, ValueRange{ext64(i)});
    return LLVM::LoadOp::create(b, i32, p, /*alignment=*/4);
  }

  ImplicitLocOpBuilder &b;
  const KernelConfig &c;
  FragmentEmitter &em;
  Type i1, i8, i32, i64, f32, ptrG, ptrS;
  int nthreads;
  Value tid, warp, lane, g, t;
};

void KernelBuilder::build(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToStart(&region.front());
  if (!SymbolTable::lookupSymbolIn(gpuModule, kSharedSymbol))
    LLVM::GlobalOp::create(b, LLVM::LLVMArrayType::get(i8, 0),
                           /*isConstant=*/false, LLVM::Linkage::External,
                           kSharedSymbol, Attribute(), /*alignment=*/1024,
                           /*addrSpace=*/3);

  SmallVector<Type> args(6, ptrG);
  args.append(15, i64);
  args.append(3, i32);
  args.append(2, f32);
  if (c.varlen)
    args.append(2, ptrG);
  if (c.blockSparse) {
    args.append(4, ptrG);
    args.append(3, i32);
  }
  for (Type t : em.extraArgumentTypes(b.getContext()))
    args.push_back(t);
  auto fnType = b.getFunctionType(args, {});
  auto fn = gpu::GPUFuncOp::create(b, c.name, fnType);
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({nthreads, 1, 1}));
  // Without an explicit minimum ptxas caps registers to fit more CTAs and
  // spills (seen at 80 registers for head_dim 32); 1 leaves it all registers.
  fn->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
              b.getI32IntegerAttr(c.minBlocksPerSM));
  // The launch's dynamic shared memory, checked by compileGpu.
  fn->setAttr("flashjit.shared_bytes", b.getI64IntegerAttr(c.sharedBytes()));
  b.setInsertionPointToStart(&fn.getBody().front());
  buildBody(fn);
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

void KernelBuilder::buildBlockMask(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToEnd(&region.front());
  SmallVector<Type> args(5, ptrG);
  args.append(4, i32);
  if (c.varlen)
    args.append(2, ptrG);
  for (Type t : em.extraArgumentTypes(b.getContext()))
    args.push_back(t);
  auto fn = gpu::GPUFuncOp::create(b, c.name + "_block_mask",
                                   b.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({kBlockMaskThreads, 1, 1}));
  b.setInsertionPointToStart(&fn.getBody().front());
  buildBlockMaskBody(fn);
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

void KernelBuilder::buildBlockMaskBody(gpu::GPUFuncOp fn) {
  ValueRange a = fn.getArguments();
  em.setStatus(a[0]);
  Value lists[4] = {a[1], a[2], a[3], a[4]};
  Value seqlenQ = a[5], seqlenK = a[6], numQ = a[7], numKvAll = a[8];
  Value cuQ = c.varlen ? a[9] : Value(), cuK = c.varlen ? a[10] : Value();
  em.setArguments(a.drop_front(c.varlen ? 11 : 9));
  const int BM = c.blockM, BN = c.blockN, T = kBlockMaskThreads;

  tid = NVVM::ThreadIdXOp::create(b, i32);
  lane = arith::RemUIOp::create(b, tid, ci32(32));
  Value m = NVVM::BlockIdXOp::create(b, i32);
  Value head = NVVM::BlockIdYOp::create(b, i32);
  Value batch = NVVM::BlockIdZOp::create(b, i32);
  Value heads = NVVM::GridDimYOp::create(b, i32);
  Value row = add(mul(add(mul(batch, heads), head), numQ), m);
  if (c.varlen) {
    Value q0s, k0s;
    loadSequence(cuQ, cuK, batch, q0s, k0s, seqlenQ, seqlenK);
  }
  Value q0 = mul(m, ci32(BM));
  Value qLast = arith::SubIOp::create(
      b, arith::MinSIOp::create(b, add(q0, ci32(BM)), seqlenQ), ci32(1));
  // Rows past the sequence's queries (varlen) list nothing.
  Value nKT = sel(
      cmp(arith::CmpIPredicate::slt, q0, seqlenQ),
      arith::DivUIOp::create(b, add(seqlenK, ci32(BN - 1)), ci32(BN)), ci32(0));
  // Class per key tile in shared memory: 0 empty, 1 partial, 2 full,
  // 3 undecided by intervals.
  Value cls = LLVM::AddressOfOp::create(b, ptrS, kSharedSymbol);
  auto clsAt = [&](Value j) {
    return LLVM::GEPOp::create(b, ptrS, i8, cls, ValueRange{j});
  };
  auto toIndex = [&](Value v) {
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  };
  Value one = arith::ConstantIndexOp::create(b, 1);
  auto forEach = [&](Value lo, Value hi, int step,
                     llvm::function_ref<void(Value)> body) {
    auto loop = scf::ForOp::create(b, toIndex(lo), toIndex(hi),
                                   arith::ConstantIndexOp::create(b, step));
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPoint(loop.getBody()->getTerminator());
    body(arith::IndexCastOp::create(b, i32, loop.getInductionVar()));
  };

  // 1. Interval classification, one key tile per thread.
  forEach(tid, nKT, T, [&](Value j) {
    Value kv0 = mul(j, ci32(BN));
    Value kvLast = arith::SubIOp::create(
        b, arith::MinSIOp::create(b, add(kv0, ci32(BN)), seqlenK), ci32(1));
    Value mayFalse = cb(false), mayTrue = cb(true);
    if (em.hasMask()) {
      IndexValues lo{batch, head, q0, kv0, seqlenQ, seqlenK};
      IndexValues hi{batch, head, qLast, kvLast, seqlenQ, seqlenK};
      std::tie(mayFalse, mayTrue) =
          em.emitClassify(b, b.getLoc(), lo, hi, /*bufferRanges=*/true);
    }
    Value code = sel(mayTrue, sel(mayFalse, ci32(3), ci32(2)), ci32(0));
    LLVM::StoreOp::create(b, arith::TruncIOp::create(b, i8, code), clsAt(j));
  });
  gpu::BarrierOp::create(b);

  // 2. Tiles the intervals leave undecided: every element, all threads.
  if (em.hasMask()) {
    forEach(ci32(0), nKT, 1, [&](Value j) {
      Value code = LLVM::LoadOp::create(b, i8, clsAt(j));
      Value undecided =
          cmp(arith::CmpIPredicate::eq, code,
              arith::ConstantOp::create(b, b.getI8IntegerAttr(3)));
      auto ifU = scf::IfOp::create(b, undecided, /*withElse=*/false);
      OpBuilder::InsertionGuard ug(b);
      b.setInsertionPoint(ifU.thenBlock()->getTerminator());
      Value kv0 = mul(j, ci32(BN));
      auto reduceOr = [&](Value p) {
        Value r = NVVM::BarrierOp::create(
                      b, TypeRange{i32}, Value(), Value(),
                      NVVM::BarrierReductionAttr::get(
                          b.getContext(), NVVM::BarrierReduction::OR),
                      arith::ExtUIOp::create(b, i32, p))
                      .getResult(0);
        return cmp(arith::CmpIPredicate::ne, r, ci32(0));
      };
      // Steps of K elements per thread, column-interleaved (element e is row
      // e % BM, column e / BM), so every step samples every row of the tile;
      // the CTA stops as soon as it has seen both an allowed and a masked
      // element (a tile across a document boundary: after one step).
      const int K = 4, perStep = K * T, E = BM * BN;
      const int nSteps = (E + perStep - 1) / perStep;
      auto w = scf::WhileOp::create(
          b, TypeRange{i32, i1, i1}, ValueRange{ci32(0), cb(false), cb(false)},
          [&](OpBuilder &nb, Location, ValueRange a) {
            OpBuilder::InsertionGuard wg(b);
            b.setInsertionPointToEnd(nb.getInsertionBlock());
            Value both = arith::AndIOp::create(b, a[1], a[2]);
            Value more = arith::AndIOp::create(
                b, cmp(arith::CmpIPredicate::slt, a[0], ci32(nSteps)),
                arith::XOrIOp::create(b, both, cb(true)));
            scf::ConditionOp::create(b, more, a);
          },
          [&](OpBuilder &nb, Location, ValueRange a) {
            OpBuilder::InsertionGuard wg(b);
            b.setInsertionPointToEnd(nb.getInsertionBlock());
            Value seenT = cb(false), seenF = cb(false);
            for (int k = 0; k < K; ++k) {
              Value e = add(mul(a[0], ci32(perStep)), add(ci32(k * T), tid));
              Value qi = add(q0, arith::RemUIOp::create(b, e, ci32(BM)));
              Value ki = add(kv0, arith::DivUIOp::create(b, e, ci32(BM)));
              Value ok = arith::AndIOp::create(
                  b, cmp(arith::CmpIPredicate::slt, qi, seqlenQ),
                  cmp(arith::CmpIPredicate::slt, ki, seqlenK));
              if (E % perStep)
                ok = arith::AndIOp::create(
                    b, ok, cmp(arith::CmpIPredicate::slt, e, ci32(E)));
              IndexValues idx{batch, head, qi, ki, seqlenQ, seqlenK};
              Value v = guarded(ok, i1, cb(false), [&] {
                return em.emitMask(b, b.getLoc(), idx);
              });
              seenT = arith::OrIOp::create(b, seenT, v);
              seenF = arith::OrIOp::create(
                  b, seenF,
                  arith::AndIOp::create(b, ok,
                                        arith::XOrIOp::create(b, v, cb(true))));
            }
            Value anyT = reduceOr(arith::OrIOp::create(b, a[1], seenT));
            Value anyF = reduceOr(arith::OrIOp::create(b, a[2], seenF));
            scf::YieldOp::create(b, ValueRange{add(a[0], ci32(1)), anyT, anyF});
          });
      Value anyT = w.getResult(1), anyF = w.getResult(2);
      Value code2 = sel(anyT, sel(anyF, ci32(1), ci32(2)), ci32(0));
      auto ifT0 =
          scf::IfOp::create(b, cmp(arith::CmpIPredicate::eq, tid, ci32(0)),
                            /*withElse=*/false);
      b.setInsertionPoint(ifT0.thenBlock()->getTerminator());
      LLVM::StoreOp::create(b, arith::TruncIOp::create(b, i8, code2), clsAt(j));
    });
    gpu::BarrierOp::create(b);
  }

  // 3. Lists, compacted by warp 0 (ballots in 32-tile chunks).
  auto isW0 =
      scf::IfOp::create(b, cmp(arith::CmpIPredicate::ult, tid, ci32(32)),
                        /*withElse=*/false);
  b.setInsertionPoint(isW0.thenBlock()->getTerminator());
  Value rowBase = mul(ext64(row), ext64(numKvAll));
  Value ltMask = NVVM::LaneMaskLtOp::create(b, i32);
  Value nChunks = arith::DivUIOp::create(b, add(nKT, ci32(31)), ci32(32));
  auto chunks =
      scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                         toIndex(nChunks), one, ValueRange{ci32(0), ci32(0)});
  {
    OpBuilder::InsertionGuard cg(b);
    b.setInsertionPointToStart(chunks.getBody());
    Value ch = arith::IndexCastOp::create(b, i32, chunks.getInductionVar());
    Value j = add(mul(ch, ci32(32)), lane);
    Value inR = cmp(arith::CmpIPredicate::slt, j, nKT);
    Value code = guarded(
        inR, i8, arith::ConstantOp::create(b, b.getI8IntegerAttr(0)),
        [&] { return LLVM::LoadOp::create(b, i8, clsAt(j)).getResult(); });
    SmallVector<Value, 2> counts;
    for (int kind = 0; kind < 2; ++kind) { // partial, full
      Value want =
          cmp(arith::CmpIPredicate::eq, code,
              arith::ConstantOp::create(b, b.getI8IntegerAttr(1 + kind)));
      Value ballot = NVVM::VoteSyncOp::create(b, i32, ci32(-1), want,
                                              NVVM::VoteSyncKind::ballot);
      Value base = chunks.getRegionIterArgs()[kind];
      Value pos =
          add(base, LLVM::CtPopOp::create(
                        b, i32, arith::AndIOp::create(b, ballot, ltMask)));
      auto ifW = scf::IfOp::create(b, want, /*withElse=*/false);
      {
        OpBuilder::InsertionGuard wg(b);
        b.setInsertionPoint(ifW.thenBlock()->getTerminator());
        Value p = LLVM::GEPOp::create(b, ptrG, i32, lists[1 + 2 * kind],
                                      ValueRange{add(rowBase, ext64(pos))});
        LLVM::StoreOp::create(b, j, p, 4);
      }
      counts.push_back(add(base, LLVM::CtPopOp::create(b, i32, ballot)));
    }
    scf::YieldOp::create(b, counts);
  }
  auto ifL0 = scf::IfOp::create(b, cmp(arith::CmpIPredicate::eq, tid, ci32(0)),
                                /*withElse=*/false);
  b.setInsertionPoint(ifL0.thenBlock()->getTerminator());
  for (int kind = 0; kind < 2; ++kind) {
    Value p = LLVM::GEPOp::create(b, ptrG, i32, lists[2 * kind],
                                  ValueRange{ext64(row)});
    LLVM::StoreOp::create(b, chunks.getResult(kind), p, 4);
  }
}

void KernelBuilder::buildBody(gpu::GPUFuncOp fn) {
  ValueRange a = fn.getArguments();
  Value qPtr = a[0], kPtr = a[1], vPtr = a[2], oPtr = a[3], lsePtr = a[4];
  em.setStatus(a[5]);
  Value qS[3] = {a[6], a[7], a[8]}, kS[3] = {a[9], a[10], a[11]},
        vS[3] = {a[12], a[13], a[14]}, oS[3] = {a[15], a[16], a[17]},
        lS[3] = {a[18], a[19], a[20]};
  Value seqlenQ = a[21], seqlenK = a[22], group = a[23];
  Value scale = a[24], scaleLog2 = a[25];
  Value cuQ = c.varlen ? a[26] : Value(), cuK = c.varlen ? a[27] : Value();
  unsigned next = c.varlen ? 28 : 26;
  Value lists[4], rowBatchStride, rowHeadStride, listPitch;
  if (c.blockSparse) {
    for (int i = 0; i < 4; ++i)
      lists[i] = a[next + i];
    rowBatchStride = a[next + 4];
    rowHeadStride = a[next + 5];
    listPitch = a[next + 6];
    next += 7;
  }
  em.setArguments(a.drop_front(next));

  const int D = c.headDimQK, Dv = c.headDimV, BM = c.blockM, BN = c.blockN;
  const int RW = c.rowsPerWarp; // query rows per warp
  const int MT = RW / 16;       // m16 tiles per warp
  const int nS = BN / 8;        // n8 tiles of S per warp
  const int nO = Dv / 8;        // n8 tiles of O per warp
  const int kQ = D / 16;        // k16 steps of Q K^T
  const int kP = BN / 16;       // k16 steps of P V
  const float log2e = 1.4426950408889634f;
  const float ln2 = 0.6931471805599453f;
  const float negInf = -std::numeric_limits<float>::infinity();

  tid = NVVM::ThreadIdXOp::create(b, i32);
  warp = arith::DivUIOp::create(b, tid, ci32(32));
  lane = arith::RemUIOp::create(b, tid, ci32(32));
  g = arith::DivUIOp::create(b, lane, ci32(4));
  t = arith::RemUIOp::create(b, lane, ci32(4));
  // Longest query tiles first: causal rows near the end see the most keys.
  Value nqt = NVVM::GridDimXOp::create(b, i32);
  Value qTile = arith::SubIOp::create(b, arith::SubIOp::create(b, nqt, ci32(1)),
                                      NVVM::BlockIdXOp::create(b, i32));
  Value head = NVVM::BlockIdYOp::create(b, i32);
  Value batch = NVVM::BlockIdZOp::create(b, i32);
  Value headKV = arith::DivUIOp::create(b, head, group);
  Value q0 = mul(qTile, ci32(BM));

  // varlen: this CTA's sequence is query tokens [qStart, qStart + seqlenQ)
  // and key tokens [kStart, kStart + seqlenK); nothing to do past its end.
  Value qStart, kStart;
  if (c.varlen) {
    loadSequence(cuQ, cuK, batch, qStart, kStart, seqlenQ, seqlenK);
    auto inSeq =
        scf::IfOp::create(b, cmp(arith::CmpIPredicate::slt, q0, seqlenQ),
                          /*withElse=*/false);
    b.setInsertionPoint(inSeq.thenBlock()->getTerminator());
  }
  // Element offset of this sequence in a tensor with strides \p s: batch *
  // s[0], or (varlen) its first token * s[2].
  auto seqOff = [&](Value *s, Value start) {
    return c.varlen ? mul(ext64(start), s[2]) : mul(ext64(batch), s[0]);
  };
  auto base = [&](Value ptr, Value *s, Value h, Value start) {
    Value off = add(seqOff(s, start), mul(ext64(h), s[1]));
    return gepBytes(ptr, mul(off, ci64(2)));
  };
  Value qBase = base(qPtr, qS, head, qStart);
  Value kBase = base(kPtr, kS, headKV, kStart);
  Value vBase = base(vPtr, vS, headKV, kStart);
  Value oBase = base(oPtr, oS, head, qStart);

  Value smem = LLVM::AddressOfOp::create(b, ptrS, kSharedSymbol);
  Value sQ = smem;
  // [Q | K0 V0 | K1 V1]: stage s of K/V starts at sK + s * stageBytes.
  const int pad = c.wgmma ? 0 : kPad;
  Value sK = gepBytes(smem, int64_t(2) * BM * (D + pad));
  Value sV = gepBytes(sK, int64_t(2) * BN * (D + pad));
  const int64_t stageBytes = int64_t(2) * BN * (D + pad + Dv + pad);

  // Q tile: loaded once.
  loadTile(sQ, qBase, qS[2], q0, seqlenQ, BM, D);
  NVVM::CpAsyncCommitGroupOp::create(b);

  // Per-lane ldmatrix addresses (see MMA-FRAGMENTS.md).
  Value l16 = arith::RemUIOp::create(b, lane, ci32(16));
  Value l8 = arith::RemUIOp::create(b, lane, ci32(8));
  Value hi16 = arith::DivUIOp::create(b, lane, ci32(16));
  Value mid8 = arith::RemUIOp::create(
      b, arith::DivUIOp::create(b, lane, ci32(8)), ci32(2));
  Value qLane = add(mul(add(mul(warp, ci32(RW)), l16), ci32(D + kPad)),
                    mul(hi16, ci32(8)));
  Value aQ = gepBytes(sQ, ext64(mul(qLane, ci32(2))));
  Value kLane =
      add(mul(add(mul(hi16, ci32(8)), l8), ci32(D + kPad)), mul(mid8, ci32(8)));
  Value aK = gepBytes(sK, ext64(mul(kLane, ci32(2))));
  Value vLane = add(mul(add(l8, mul(mid8, ci32(8))), ci32(Dv + kPad)),
                    mul(hi16, ci32(8)));
  Value aV = gepBytes(sV, ext64(mul(vLane, ci32(2))));

  // Q fragments stay in registers while they fit beside the accumulators.
  const bool qInRegisters = !c.wgmma && D * MT <= 128;
  SmallVector<SmallVector<Value, 4>> qFrag; // [mt * kQ + kk]
  auto loadQFrag = [&](int mt, int kk) {
    return ldmatrix(gepBytes(aQ, 2 * (int64_t(mt) * 16 * (D + kPad) + kk * 16)),
                    false);
  };

  // wgmma descriptors (KernelBuilder::descriptor): Q and K are K-major (no
  // leading offset; 8-row groups 1024 bytes apart), V is MN-major (its
  // 64-element column blocks BN * 128 bytes apart, 8-key groups 1024 bytes
  // apart). Step kk of Q K^T reads bytes (kk / 4) * rows * 128 + (kk % 4) *
  // 32 of a tile; step kk of P V reads keys 16 kk.. at kk * 2048.
  Value descQ, descK0, descV0;
  if (c.wgmma) {
    Value sAddr = LLVM::PtrToIntOp::create(b, i64, smem);
    Value wgRows = mul(arith::DivUIOp::create(b, warp, ci32(4)), ci32(64));
    descQ = descriptor(add(sAddr, ext64(mul(wgRows, ci32(128)))), 16, 1024);
    descK0 =
        descriptor(LLVM::PtrToIntOp::create(b, i64, sK).getResult(), 16, 1024);
    descV0 = descriptor(LLVM::PtrToIntOp::create(b, i64, sV).getResult(),
                        int64_t(BN) * 128, 1024);
  }
  auto kStep = [](int kk, int rows) {
    return (int64_t(kk / 4) * rows * 128 + (kk % 4) * 32) >> 4;
  };

  // Rows g and g + 8 of each of the warp's m16 tiles.
  SmallVector<Value, 4> qRow0(MT), qRow1(MT);
  for (int mt = 0; mt < MT; ++mt) {
    qRow0[mt] = add(q0, add(mul(warp, ci32(RW)), ci32(mt * 16)));
    qRow0[mt] = add(qRow0[mt], g);
    qRow1[mt] = add(qRow0[mt], ci32(8));
  }
  Value qLast = arith::SubIOp::create(
      b, arith::MinSIOp::create(b, add(q0, ci32(BM)), seqlenQ), ci32(1));

  // Loop state: O fragments (MT * nO * 4), m (MT * 2 rows), l (MT * 2).
  const int nAcc = MT * nO * 4;
  SmallVector<Value> init;
  Value zero = cf32(0.0f), minusInf = cf32(negInf);
  init.append(nAcc, zero);
  init.append(2 * MT, minusInf);
  init.append(2 * MT, zero);
  SmallVector<Type> stateTypes(init.size(), f32);

  Value numKv = arith::DivUIOp::create(b, add(seqlenK, ci32(BN - 1)), ci32(BN));
  auto classify = [&](Value j) -> std::pair<Value, Value> {
    Value kv0 = mul(j, ci32(BN));
    Value kvLast = arith::SubIOp::create(
        b, arith::MinSIOp::create(b, add(kv0, ci32(BN)), seqlenK), ci32(1));
    IndexValues lo{batch, head, q0, kv0, seqlenQ, seqlenK};
    IndexValues hi{batch, head, qLast, kvLast, seqlenQ, seqlenK};
    if (!em.hasMask())
      return {arith::ConstantOp::create(b, b.getBoolAttr(false)),
              arith::ConstantOp::create(b, b.getBoolAttr(true))};
    return em.emitClassify(b, b.getLoc(), lo, hi);
  };
  auto toIndex = [&](Value v) {
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  };
  Value one = arith::ConstantIndexOp::create(b, 1);

  // The loop runs over positions it in [jBegin, jEnd] of a list of key
  // tiles: all tiles (dense), or the row's partial tiles followed by its
  // full ones (block-sparse).
  Value jBegin = ci32(0), jEnd = arith::SubIOp::create(b, numKv, ci32(1));
  Value numPartial, listRow;
  if (c.blockSparse) {
    Value row =
        add(add(mul(batch, rowBatchStride), mul(head, rowHeadStride)), qTile);
    numPartial = loadI32(lists[0], row);
    listRow = mul(ext64(row), ext64(listPitch));
    jEnd = arith::SubIOp::create(b, add(numPartial, loadI32(lists[2], row)),
                                 ci32(1));
  }
  auto tileAt = [&](Value it) -> Value {
    if (!c.blockSparse)
      return it;
    // Both reads stay inside the row: partial + full <= num_kv_tiles.
    auto at = [&](Value list, Value i) {
      Value p = LLVM::GEPOp::create(b, ptrG, i32, list,
                                    ValueRange{add(listRow, ext64(i))});
      return LLVM::LoadOp::create(b, i32, p, /*alignment=*/4).getResult();
    };
    Value isFull = cmp(arith::CmpIPredicate::sge, it, numPartial);
    Value fi = arith::MaxSIOp::create(
        b, arith::SubIOp::create(b, it, numPartial), ci32(0));
    return sel(isFull, at(lists[3], fi), at(lists[1], it));
  };
  // The first and last key tiles that are not empty: only they are loaded.
  if (em.hasMask() && !c.blockSparse) {
    auto scan =
        scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                           toIndex(numKv), one, ValueRange{numKv, ci32(-1)});
    OpBuilder::InsertionGuard sg(b);
    b.setInsertionPointToStart(scan.getBody());
    Value j = arith::IndexCastOp::create(b, i32, scan.getInductionVar());
    Value nonEmpty = classify(j).second;
    Value first =
        sel(nonEmpty, arith::MinSIOp::create(b, scan.getRegionIterArgs()[0], j),
            scan.getRegionIterArgs()[0]);
    Value last = sel(nonEmpty, j, scan.getRegionIterArgs()[1]);
    scf::YieldOp::create(b, ValueRange{first, last});
    b.setInsertionPointAfter(scan);
    jBegin = scan.getResult(0);
    jEnd = scan.getResult(1);
  }

  auto loadKV = [&](Value j, Value stage) {
    Value kv0 = mul(j, ci32(BN));
    Value off = mul(ext64(stage), ci64(stageBytes));
    loadTile(gepBytes(sK, off), kBase, kS[2], kv0, seqlenK, BN, D);
    loadTile(gepBytes(sV, off), vBase, vS[2], kv0, seqlenK, BN, Dv);
    NVVM::CpAsyncCommitGroupOp::create(b);
  };
  {
    Value any = cmp(arith::CmpIPredicate::sle, jBegin, jEnd);
    auto pre = scf::IfOp::create(b, any, /*withElse=*/true);
    OpBuilder::InsertionGuard pg(b);
    b.setInsertionPointToStart(pre.thenBlock());
    loadKV(tileAt(jBegin), ci32(0));
    NVVM::CpAsyncWaitGroupOp::create(b, 1); // Q has landed
    b.setInsertionPointToStart(pre.elseBlock());
    NVVM::CpAsyncWaitGroupOp::create(b, 0);
  }
  gpu::BarrierOp::create(b);
  if (qInRegisters)
    for (int mt = 0; mt < MT; ++mt)
      for (int kk = 0; kk < kQ; ++kk)
        qFrag.push_back(loadQFrag(mt, kk));

  // Block-sparse: the loop carries the current and the next listed tile,
  // and reads the one after while this one computes (no list read stalls a
  // prefetch). Positions past jEnd read nothing.
  auto tileAtIfAny = [&](Value it) {
    return guarded(cmp(arith::CmpIPredicate::sle, it, jEnd), i32, ci32(0),
                   [&] { return tileAt(it); });
  };
  SmallVector<Value> loopInit(init);
  if (c.blockSparse) {
    loopInit.push_back(tileAtIfAny(jBegin));
    loopInit.push_back(tileAtIfAny(add(jBegin, ci32(1))));
  }
  Value lb = toIndex(jBegin);
  Value ub = toIndex(add(jEnd, ci32(1)));
  auto loop = scf::ForOp::create(b, lb, ub, one, loopInit);
  {
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(loop.getBody());
    Value it = arith::IndexCastOp::create(b, i32, loop.getInductionVar());
    ValueRange state = loop.getRegionIterArgs().take_front(init.size());
    Value j = c.blockSparse ? loop.getRegionIterArgs()[init.size()] : it;
    Value jNext = c.blockSparse ? loop.getRegionIterArgs()[init.size() + 1]
                                : add(it, ci32(1));
    Value stage =
        arith::AndIOp::create(b, arith::SubIOp::create(b, it, jBegin), ci32(1));
    Value nextStage = arith::XOrIOp::create(b, stage, ci32(1));
    // Prefetch the next tile into the other stage, then wait for this one.
    Value hasNext = cmp(arith::CmpIPredicate::slt, it, jEnd);
    {
      auto pf = scf::IfOp::create(b, hasNext, /*withElse=*/true);
      OpBuilder::InsertionGuard pg(b);
      b.setInsertionPointToStart(pf.thenBlock());
      loadKV(jNext, nextStage);
      NVVM::CpAsyncWaitGroupOp::create(b, 1);
      b.setInsertionPointToStart(pf.elseBlock());
      NVVM::CpAsyncWaitGroupOp::create(b, 0);
    }
    Value jAfter = c.blockSparse ? tileAtIfAny(add(it, ci32(2))) : Value();
    if (c.wgmma)
      fenceProxyAsync(); // Q and this stage are read by wgmma
    gpu::BarrierOp::create(b);
    Value stageOff = mul(ext64(stage), ci64(stageBytes));
    Value aKs = gepBytes(aK, stageOff), aVs = gepBytes(aV, stageOff);
    Value kv0 = mul(j, ci32(BN));
    auto [mayBeFalse, mayBeTrue] = classify(j);
    if (c.blockSparse) {
      // Listed full: no mask code. Tiles past this sequence's keys (a
      // layout shared by sequences of different lengths): skipped.
      Value listedFull = cmp(arith::CmpIPredicate::sge, it, numPartial);
      mayBeFalse = arith::AndIOp::create(
          b, mayBeFalse, arith::XOrIOp::create(b, listedFull, cb(true)));
      mayBeTrue = arith::AndIOp::create(
          b, arith::OrIOp::create(b, mayBeTrue, listedFull),
          cmp(arith::CmpIPredicate::slt, j, numKv));
    }
    Value pastEnd = cmp(arith::CmpIPredicate::sgt, add(kv0, ci32(BN)), seqlenK);
    Value needsMask = arith::OrIOp::create(b, mayBeFalse, pastEnd);

    auto tileIf =
        scf::IfOp::create(b, stateTypes, mayBeTrue, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard eg(b);
      b.setInsertionPointToStart(tileIf.elseBlock()); // empty tile: skip
      scf::YieldOp::create(b, state);
    }
    b.setInsertionPointToStart(tileIf.thenBlock());

    // S = Q K^T (per warp RW x BN; s[(mt * nS + jn) * 4 + i]). Each K
    // fragment feeds the MT m16 tiles.
    SmallVector<Value> s(c.wgmma ? 0 : MT * nS * 4, zero);
    Value stageDesc; // the stage's offset in descriptor units (wgmma)
    if (c.wgmma) {
      stageDesc = arith::ShRUIOp::create(b, stageOff, ci64(4));
      SmallVector<Value> aD, bD;
      Value dK = add(descK0, stageDesc);
      for (int kk = 0; kk < kQ; ++kk) {
        aD.push_back(add(descQ, ci64(kStep(kk, BM))));
        bD.push_back(add(dK, ci64(kStep(kk, BN))));
      }
      s = wgmmaChain({}, BN, aD, {}, bD, /*transB=*/false);
    }
    for (int kk = 0; kk < kQ && !c.wgmma; ++kk) {
      SmallVector<SmallVector<Value, 4>, 2> af;
      for (int mt = 0; mt < MT; ++mt)
        af.push_back(qInRegisters ? qFrag[mt * kQ + kk] : loadQFrag(mt, kk));
      for (int jn = 0; jn < nS; jn += 2) {
        auto bf = ldmatrix(
            gepBytes(aKs, 2 * (int64_t(jn) * 8 * (D + kPad) + kk * 16)), false);
        for (int mt = 0; mt < MT; ++mt) {
          MutableArrayRef<Value> sm(s.data() + mt * nS * 4, nS * 4);
          mma(af[mt], bf[0], bf[1], sm.slice(jn * 4, 4));
          mma(af[mt], bf[2], bf[3], sm.slice((jn + 1) * 4, 4));
        }
      }
    }

    // Scores in log2 units: t = score_mod(scale * s) * log2(e), masked.
    Value kvLane = add(kv0, mul(t, ci32(2)));
    auto elementwise = [&](bool masked) {
      SmallVector<Value> out;
      // Key index of column (jn, c) of this thread's fragments; with a mask,
      // its row- and column-only parts are emitted once per row / column.
      SmallVector<Value> kvCols;
      for (int jn = 0; jn < nS; ++jn)
        for (int cc = 0; cc < 2; ++cc)
          kvCols.push_back(add(kvLane, ci32(jn * 8 + cc)));
      bool factored = masked && em.hasMask();
      if (factored) {
        SmallVector<Value> rows;
        for (int mt = 0; mt < MT; ++mt)
          rows.append({qRow0[mt], qRow1[mt]});
        em.beginMaskFactors(b, b.getLoc(),
                            {batch, head, Value(), Value(), seqlenQ, seqlenK},
                            rows, kvCols);
      }
      for (int mt = 0; mt < MT; ++mt)
        for (int jn = 0; jn < nS; ++jn)
          for (int i = 0; i < 4; ++i) {
            Value acc = s[(mt * nS + jn) * 4 + i];
            Value qi = i < 2 ? qRow0[mt] : qRow1[mt];
            Value kvi = kvCols[jn * 2 + (i & 1)];
            IndexValues idx{batch, head, qi, kvi, seqlenQ, seqlenK};
            // Buffer reads happen only where the interpreter does them: the
            // mask on in-range elements, the score modifier on allowed ones
            // (elsewhere a read could be out of range and set the flag).
            Value rowOk = cmp(arith::CmpIPredicate::slt, qi, seqlenQ);
            Value ok;
            if (masked) {
              ok = arith::AndIOp::create(
                  b, rowOk, cmp(arith::CmpIPredicate::slt, kvi, seqlenK));
              if (em.hasMask())
                ok = em.maskElementReadsBuffers()
                         ? guarded(
                               ok, i1, cb(false),
                               [&] { return em.emitMask(b, b.getLoc(), idx); })
                         : arith::AndIOp::create(
                               b, ok, em.emitMask(b, b.getLoc(), idx))
                               .getResult();
            } else {
              ok = rowOk; // a full tile: every in-range element is allowed
            }
            Value v;
            if (em.hasScoreMod()) {
              auto mod = [&] {
                return em.emitScore(b, b.getLoc(), idx, fmul(acc, scale));
              };
              v = em.scoreReadsBuffers() ? guarded(ok, f32, zero, mod) : mod();
              v = fmul(v, cf32(log2e));
            } else {
              v = fmul(acc, scaleLog2);
            }
            if (masked)
              v = sel(ok, v, minusInf);
            out.push_back(v);
          }
      if (factored)
        em.endMaskFactors();
      return out;
    };
    SmallVector<Type> sTypes(MT * nS * 4, f32);
    auto maskIf = scf::IfOp::create(b, sTypes, needsMask, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard mg(b);
      b.setInsertionPointToStart(maskIf.thenBlock());
      scf::YieldOp::create(b, elementwise(true));
      b.setInsertionPointToStart(maskIf.elseBlock());
      scf::YieldOp::create(b, elementwise(false));
    }
    SmallVector<Value> st(maskIf.getResults());

    // Online softmax (per thread: rows g and g + 8 of each m16 tile; row
    // index rr = 2 * mt + r).
    SmallVector<Value> o(state.begin(), state.begin() + nAcc);
    SmallVector<Value, 4> mOld(state.begin() + nAcc,
                               state.begin() + nAcc + 2 * MT);
    SmallVector<Value, 4> lOld(state.begin() + nAcc + 2 * MT,
                               state.begin() + nAcc + 4 * MT);
    SmallVector<Value, 4> mNew(2 * MT), alpha(2 * MT), lNew(2 * MT);
    for (int rr = 0; rr < 2 * MT; ++rr) {
      int mt = rr / 2, r = rr % 2;
      MutableArrayRef<Value> sm(st.data() + mt * nS * 4, nS * 4);
      Value mx = mOld[rr];
      for (int jn = 0; jn < nS; ++jn)
        mx = fmax(mx, fmax(sm[jn * 4 + 2 * r], sm[jn * 4 + 2 * r + 1]));
      mx = fmax(mx, shflXor(mx, 1));
      mx = fmax(mx, shflXor(mx, 2));
      mNew[rr] = mx;
      // With every score so far -inf, subtract 0 instead: exp2(-inf) = 0
      // and no (-inf) - (-inf) = NaN.
      Value isInf =
          arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, mx, minusInf);
      Value mUse = sel(isInf, zero, mx);
      alpha[rr] = exp2(fsub(mOld[rr], mUse));
      Value sum = zero;
      for (int jn = 0; jn < nS; ++jn)
        for (int i = 2 * r; i < 2 * r + 2; ++i) {
          sm[jn * 4 + i] = exp2(fsub(sm[jn * 4 + i], mUse));
          sum = fadd(sum, sm[jn * 4 + i]);
        }
      lNew[rr] = fadd(fmul(lOld[rr], alpha[rr]), sum);
    }
    for (int mt = 0; mt < MT; ++mt)
      for (int jd = 0; jd < nO; ++jd)
        for (int i = 0; i < 4; ++i) {
          Value &acc = o[(mt * nO + jd) * 4 + i];
          acc = fmul(acc, alpha[2 * mt + i / 2]);
        }

    // O += P V; each V fragment feeds the MT m16 tiles.
    if (c.wgmma) {
      SmallVector<Value> pRegs, vD;
      Value dV = add(descV0, stageDesc);
      for (int kk = 0; kk < kP; ++kk) {
        int n0 = 2 * kk, n1 = 2 * kk + 1;
        pRegs.append({pack(st[n0 * 4 + 0], st[n0 * 4 + 1]),
                      pack(st[n0 * 4 + 2], st[n0 * 4 + 3]),
                      pack(st[n1 * 4 + 0], st[n1 * 4 + 1]),
                      pack(st[n1 * 4 + 2], st[n1 * 4 + 3])});
        vD.push_back(add(dV, ci64((int64_t(kk) * 2048) >> 4)));
      }
      o = wgmmaChain(o, Dv, {}, pRegs, vD, /*transB=*/true);
    }
    for (int kk = 0; kk < kP && !c.wgmma; ++kk) {
      int n0 = 2 * kk, n1 = 2 * kk + 1;
      SmallVector<SmallVector<Value, 4>, 2> pa;
      for (int mt = 0; mt < MT; ++mt) {
        ArrayRef<Value> sm(st.data() + mt * nS * 4, nS * 4);
        pa.push_back({pack(sm[n0 * 4 + 0], sm[n0 * 4 + 1]),
                      pack(sm[n0 * 4 + 2], sm[n0 * 4 + 3]),
                      pack(sm[n1 * 4 + 0], sm[n1 * 4 + 1]),
                      pack(sm[n1 * 4 + 2], sm[n1 * 4 + 3])});
      }
      for (int jd = 0; jd < nO; jd += 2) {
        auto bf = ldmatrix(
            gepBytes(aVs, 2 * (int64_t(kk) * 16 * (Dv + kPad) + jd * 8)), true);
        for (int mt = 0; mt < MT; ++mt) {
          MutableArrayRef<Value> om(o.data() + mt * nO * 4, nO * 4);
          mma(pa[mt], bf[0], bf[1], om.slice(jd * 4, 4));
          mma(pa[mt], bf[2], bf[3], om.slice((jd + 1) * 4, 4));
        }
      }
    }
    SmallVector<Value> next(o);
    next.append(mNew.begin(), mNew.end());
    next.append(lNew.begin(), lNew.end());
    scf::YieldOp::create(b, next);
    b.setInsertionPointAfter(tileIf);
    gpu::BarrierOp::create(b); // this stage is free for the prefetch after next
    SmallVector<Value> carried(tileIf.getResults());
    if (c.blockSparse)
      carried.append({jNext, jAfter});
    scf::YieldOp::create(b, carried);
  }

  // Epilogue: O / l and LSE; rows with no allowed key give O = 0, LSE = -inf.
  ValueRange fin = loop.getResults();
  for (int rr = 0; rr < 2 * MT; ++rr) {
    int mt = rr / 2, r = rr % 2;
    Value l = fin[nAcc + 2 * MT + rr];
    l = fadd(l, shflXor(l, 1));
    l = fadd(l, shflXor(l, 2));
    Value m = fin[nAcc + rr];
    Value empty = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, l, zero);
    Value inv = sel(empty, zero, arith::DivFOp::create(b, cf32(1.0f), l));
    Value row = r == 0 ? qRow0[mt] : qRow1[mt];
    Value inRange = cmp(arith::CmpIPredicate::slt, row, seqlenQ);
    auto ifRow = scf::IfOp::create(b, inRange, /*withElse=*/false);
    OpBuilder::InsertionGuard rg(b);
    b.setInsertionPointToStart(ifRow.thenBlock());
    Value rowBase = gepBytes(oBase, mul(mul(ext64(row), oS[2]), ci64(2)));
    for (int jd = 0; jd < nO; ++jd) {
      int a0 = (mt * nO + jd) * 4 + 2 * r;
      Value v = pack(fmul(fin[a0], inv), fmul(fin[a0 + 1], inv));
      Value col = add(mul(t, ci32(2)), ci32(jd * 8));
      Value p = gepBytes(rowBase, ext64(mul(col, ci32(2))));
      LLVM::StoreOp::create(b, v, p, /*alignment=*/4);
    }
    if (c.returnLse) {
      Value first = cmp(arith::CmpIPredicate::eq, t, ci32(0));
      auto ifT = scf::IfOp::create(b, first, /*withElse=*/false);
      OpBuilder::InsertionGuard tg(b);
      b.setInsertionPointToStart(ifT.thenBlock());
      Value log2l = math::Log2Op::create(b, l);
      Value lse = sel(empty, minusInf, fmul(fadd(m, log2l), cf32(ln2)));
      Value off = add(add(seqOff(lS, qStart), mul(ext64(head), lS[1])),
                      mul(ext64(row), lS[2]));
      Value p = gepBytes(lsePtr, mul(off, ci64(4)));
      LLVM::StoreOp::create(b, lse, p, /*alignment=*/4);
    }
  }
}

} // namespace

void buildFlashForwardKernel(OpBuilder &builder, Location loc,
                             Operation *gpuModule, const KernelConfig &config,
                             FragmentEmitter &emitter) {
  ImplicitLocOpBuilder b(loc, builder);
  KernelBuilder(b, config, emitter).build(gpuModule);
}

void buildBlockMaskKernel(OpBuilder &builder, Location loc,
                          Operation *gpuModule, const KernelConfig &config,
                          FragmentEmitter &emitter) {
  ImplicitLocOpBuilder b(loc, builder);
  KernelBuilder(b, config, emitter).buildBlockMask(gpuModule);
}

} // namespace flashjit::nvvm
