//===- AttnToNVVM.cpp - attn.attention to a GPU kernel --------------------===//
//
// Pass `convert-attn-to-nvvm`.
//
// Pre:  a module holding attn.attention ops (the IR MLIRGen builds).
// Post: each attn.attention @f is replaced by gpu.func @f (kernel) in one
//       gpu.module @flashjit_kernels, built by buildFlashForwardKernel (and,
//       block-sparse, @f_block_mask by buildBlockMaskKernel; a block-sparse
//       backward, @f_bwd_mask by buildBackwardBlockMaskKernel); the module is
//       a gpu.container_module. The mask and score regions reach the
//       kernels through the RegionEmitter (RegionEmitter.cpp), once per
//       accumulator element.
//
//===----------------------------------------------------------------------===//
#include "BackwardBlockMask.h"
#include "RegionEmitter.h"

#include "flashjit/Conversion/AttnToNVVM/FlashBackwardKernel.h"
#include "flashjit/Conversion/AttnToNVVM/FlashDecodeKernel.h"
#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"
#include "flashjit/Conversion/Passes.h"
#include "flashjit/Dialect/Attn/IR/Attn.h"
#include "flashjit/runtime/HeadDim.h"

// The pass's dependent dialects (Passes.td).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace flashjit {
#define GEN_PASS_DEF_CONVERTATTNTONVVM
#include "flashjit/Conversion/Passes.h.inc"
} // namespace flashjit

using namespace mlir;

namespace flashjit::nvvm {
namespace {

/// Decode K/V stages: 0 (the default, 2), 2, or 3 up to head dim qk 128.
bool decodeStagesValid(const KernelShape &c) {
  return c.decodeStages == 0 || c.decodeStages == 2 ||
         (c.decodeStages == 3 && c.headDimQK <= 128);
}

/// The targets: sm_80 and sm_90a.
bool archValid(const KernelShape &c) {
  return c.arch == "sm_80" || c.arch == "sm_90a";
}

/// Warps per CTA: 4 or 8; 12 (three consumer warpgroups) when
/// warp-specialised.
bool warpsValid(const KernelShape &c) {
  return c.numWarps == 4 || c.numWarps == 8 ||
         (c.numWarps == 12 && c.warpSpecialized);
}

bool isFp8(Type t) { return isa<Float8E4M3FNType, Float8E5M2Type>(t); }

/// The first rule of the warp-specialised modes (overlap-softmax,
/// ping-pong, warp-specialized) that \p c breaks, or nullptr.
const char *warpSpecializedModeError(const KernelShape &c) {
  if (c.overlapSoftmax && !c.warpSpecialized)
    return "overlap-softmax kernels are warp-specialized";
  if (c.pingPong && (!c.overlapSoftmax || c.numWarps != 8))
    return "ping-pong kernels are overlap-softmax kernels with num-warps 8 "
           "(2 consumer warpgroups)";
  if (c.warpSpecialized && (!c.tma || c.numWarps == 4))
    return "warp-specialized kernels are tma kernels with num-warps 8 or 12 "
           "(2 or 3 consumer warpgroups)";
  return nullptr;
}

/// The fp8 forward kernel's shape (issue 18): fp8 Q/K/V, O bf16 or fp16,
/// the cp.async wgmma forward (no TMA; dense, varlen or block-sparse),
/// head_dim_qk a multiple of 32 (wgmma's k32 steps) and head_dim_v of 16
/// (the V transpose's 16-column groups), both up to 256, key tiles of 64
/// or 128 (multiples of wgmma's k32).
/// Records the element types in \p c; false (with an error) otherwise.
bool fp8Shape(attn::AttentionOp op, KernelShape &c) {
  for (Type t : {op.getDtypeK(), op.getDtypeV()})
    if (!isFp8(t)) {
      op.emitOpError("fp8 Q needs fp8 K and V");
      return false;
    }
  Type o = op.getDtypeO();
  if (!o.isBF16() && !o.isF16()) {
    op.emitOpError("the fp8 kernel writes O in bf16 or fp16");
    return false;
  }
  auto dimOk = [](int d, int step) {
    return d > 0 && d % step == 0 && d <= 256;
  };
  if (c.kind != KernelKind::Forward || !c.wgmma || c.tma ||
      (c.blockN != 64 && c.blockN != 128) || !dimOk(c.headDimQK, 32) ||
      !dimOk(c.headDimV, 16)) {
    op.emitOpError("the fp8 kernel is the wgmma forward (cp.async, no tma) "
                   "with head-dim-qk a multiple of 32, head-dim-v of 16 (up "
                   "to 256) and block-n 64 or 128");
    return false;
  }
  auto name = [](Type t) {
    return isa<Float8E4M3FNType>(t) ? std::string("e4m3") : "e5m2";
  };
  c.fp8Q = name(op.getDtypeQ());
  c.fp8K = name(op.getDtypeK());
  c.fp8V = name(op.getDtypeV());
  return true;
}

/// Q, K, V and O of one 16-bit dtype, or fp8Shape's fp8 kernel; false
/// (with an error) otherwise.
bool dtypesValid(attn::AttentionOp op, KernelShape &c) {
  Type dq = op.getDtypeQ();
  if (isFp8(dq))
    return fp8Shape(op, c);
  if (dq != op.getDtypeK() || dq != op.getDtypeV() || dq != op.getDtypeO() ||
      !(dq.isBF16() || dq.isF16())) {
    op.emitOpError("the GPU kernel needs Q, K, V and O of one 16-bit "
                   "dtype (bf16 or fp16)");
    return false;
  }
  return true;
}

struct ConvertAttnToNVVM
    : flashjit::impl::ConvertAttnToNVVMBase<ConvertAttnToNVVM> {
  using ConvertAttnToNVVMBase::ConvertAttnToNVVMBase;
  // Reads the (protected) option members.
  friend KernelConfig flashjit::fromPassOptions<>(const ConvertAttnToNVVM &);

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<attn::AttentionOp> ops(module.getOps<attn::AttentionOp>());
    if (ops.empty())
      return;
    OpBuilder b(module.getContext());
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    b.getUnitAttr());
    b.setInsertionPointToEnd(module.getBody());
    auto gm = gpu::GPUModuleOp::create(b, module.getLoc(), "flashjit_kernels");
    for (attn::AttentionOp op : ops) {
      // The tile configuration is explicit: compileGpu picks it from
      // defaultGpuTileConfig (TilePolicy.h), flashjit-opt users pass it.
      KernelShape c;
      static_cast<KernelConfig &>(c) = fromPassOptions(*this);
      c.name = op.getSymName().str();
      c.headDimQK = op.getHeadDimQk();
      c.headDimV = op.getHeadDimV();
      // rows-per-warp 8: the wgmma backward whose two warpgroups share 64
      // keys and split the head dims (BackwardWgmmaSplit.cpp).
      const bool splitBackward =
          c.kind == KernelKind::Backward && c.wgmma && c.rowsPerWarp == 8;
      Type dq = op.getDtypeQ();
      if (!dtypesValid(op, c))
        return signalPassFailure();
      // Forward kernels pad other head dims to a multiple of 16 in shared
      // memory (FlashForwardKernel.h: tensorHeadDimQK/V).
      if (c.kind == KernelKind::Forward && !c.wgmma &&
          (c.headDimQK % 16 || c.headDimV % 16) && c.headDimQK >= 1 &&
          c.headDimV >= 1) {
        c.tensorHeadDimQK = c.headDimQK;
        c.tensorHeadDimV = c.headDimV;
        c.headDimQK = paddedHeadDim(c.headDimQK);
        c.headDimV = paddedHeadDim(c.headDimV);
      }
      if (!archValid(c) || c.headDimQK % 16 || c.headDimV % 16 ||
          c.headDimQK > 256 || c.headDimV > 256 || c.blockN % 16 ||
          c.blockN <= 0 || c.blockN > 128 || !warpsValid(c) ||
          c.minBlocksPerSM < 1 || c.minBlocksPerSM > 4 ||
          (c.rowsPerWarp != 16 && c.rowsPerWarp != 32 && !splitBackward)) {
        op.emitOpError("unsupported GPU kernel shape: head dims must be "
                       "multiples of 16 up to 256 (mma.sync forward "
                       "kernels: any up to 256), block-n a multiple of 16 "
                       "up to 128, num-warps 4 or 8 (12 warp-specialized), "
                       "min-blocks-per-sm 1 to 4, rows-per-warp 16 or 32, "
                       "arch sm_80 or sm_90a");
        return signalPassFailure();
      }
      c.bf16 = c.fp8() ? op.getDtypeO().isBF16() : dq.isBF16();
      c.returnLse = op.getReturnLse();
      c.sink = op.getSink();
      // fp8: fp8Shape's head dims (k32 steps over 128-byte rows).
      if (c.wgmma && ((c.rowsPerWarp != 16 && !splitBackward) ||
                      (!c.fp8() && (c.headDimQK % 64 || c.headDimV % 64)))) {
        op.emitOpError("wgmma kernels need rows-per-warp 16 and head dims "
                       "that are multiples of 64");
        return signalPassFailure();
      }
      if (c.tma && (!c.wgmma || c.varlen || c.blockSparse ||
                    c.kind == KernelKind::Backward)) {
        op.emitOpError("tma kernels are dense wgmma forward kernels (not "
                       "varlen, block-sparse or backward)");
        return signalPassFailure();
      }
      if (c.syncBackward && (!c.wgmma || c.kind != KernelKind::Backward)) {
        op.emitOpError("sync-backward kernels are wgmma backward kernels");
        return signalPassFailure();
      }
      if (const char *e = warpSpecializedModeError(c)) {
        op.emitOpError(e);
        return signalPassFailure();
      }
      std::unique_ptr<FragmentEmitter> em = createRegionEmitter(op);
      if (c.kind == KernelKind::Backward) {
        int rowGroups = c.blockN / 16;
        if ((c.rowsPerWarp != 16 && !splitBackward) || c.blockN > 64 ||
            c.numWarps % rowGroups ||
            c.headDimQK % (16 * (c.numWarps / rowGroups))) {
          op.emitOpError("unsupported GPU backward shape: rows-per-warp 16, "
                         "block-n (query rows) 16, 32 or 64 dividing 16 * "
                         "num-warps, head_dim_qk a multiple of 16 * "
                         "num-warps / (block-n / 16)");
          return signalPassFailure();
        }
        bool wgmmaDims = splitBackward
                             ? c.headDimQK % 128 == 0 && c.headDimV % 128 == 0
                             : c.headDimQK <= 128 && c.headDimV <= 128;
        if (c.wgmma && (c.blockN != 64 || c.numWarps != 8 || !wgmmaDims)) {
          op.emitOpError("unsupported wgmma GPU backward shape: block-n 64, "
                         "num-warps 8, head dims 64 or 128 (rows-per-warp "
                         "16) or multiples of 128 (rows-per-warp 8)");
          return signalPassFailure();
        }
        if (splitBackward && em->hasScoreMod()) {
          op.emitOpError("the head-dim-split wgmma backward (rows-per-warp "
                         "8) takes no score modifier");
          return signalPassFailure();
        }
        if (em->hasScoreMod() && !op.hasScoreGrad()) {
          op.emitOpError("the GPU backward of a score modifier needs its "
                         "derivative (the op's score_grad region, built by "
                         "MLIRGen for KernelKind::Backward)");
          return signalPassFailure();
        }
        if (op.hasScoreGrad()) {
          int nested = 0;
          op.getScoreGrad().walk([&](Operation *g) {
            if (isa<attn::BufferGradOp, attn::ParamGradOp>(g) &&
                g->getBlock() != &op.getScoreGrad().front())
              ++nested;
          });
          if (nested) {
            op.emitOpError("the GPU backward takes attn.buffer_grad and "
                           "attn.param_grad at the top level of score_grad "
                           "only");
            return signalPassFailure();
          }
        }
        buildFlashBackwardKernels(b, op.getLoc(), gm, c, *em);
        if (c.blockSparse)
          buildBackwardBlockMaskKernel(b, op.getLoc(), gm, c);
        op.erase();
        continue;
      }
      if (c.kind == KernelKind::Decode) {
        if (c.wgmma || c.varlen || c.blockSparse || c.rowsPerWarp != 16 ||
            !decodeStagesValid(c)) {
          op.emitOpError("unsupported GPU decode shape: mma.sync, dense "
                         "(paged through the page table), rows-per-warp 16, "
                         "decode-stages 2 or 3 (3: head dim qk <= 128)");
          return signalPassFailure();
        }
        buildFlashDecodeKernels(b, op.getLoc(), gm, c, *em);
        op.erase();
        continue;
      }
      buildFlashForwardKernel(b, op.getLoc(), gm, c, *em);
      if (c.blockSparse)
        buildBlockMaskKernel(b, op.getLoc(), gm, c, *em);
      op.erase();
    }
  }
};

} // namespace
} // namespace flashjit::nvvm

namespace flashjit {

ConvertAttnToNVVMOptions toPassOptions(const KernelConfig &config) {
  ConvertAttnToNVVMOptions o;
  o.blockN = config.blockN;
  o.numWarps = config.numWarps;
  o.minBlocksPerSM = config.minBlocksPerSM;
  o.rowsPerWarp = config.rowsPerWarp;
  o.varlen = config.varlen;
  o.blockSparse = config.blockSparse;
  o.wgmma = config.wgmma;
  o.tma = config.tma;
  o.warpSpecialized = config.warpSpecialized;
  o.overlapSoftmax = config.overlapSoftmax;
  o.pingPong = config.pingPong;
  o.decodeStages = config.decodeStages;
  o.syncBackward = config.syncBackward;
  o.arch = config.arch;
  o.backward = config.kind == KernelKind::Backward;
  o.decode = config.kind == KernelKind::Decode;
  return o;
}

} // namespace flashjit
