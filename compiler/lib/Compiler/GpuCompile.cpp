//===- GpuCompile.cpp - AttentionSpec to PTX ------------------------------===//
//
// The driver of the GPU backend: validate (UserError, before MLIR), MLIRGen,
// the attn-to-NVVM pipeline (convert-attn-to-nvvm, attn-expand-scalar, then
// MLIR's gpu-lower-to-nvvm pipeline with format=isa), and the PTX out of the
// resulting gpu.binary. Each step is timed; pass failures become
// CompileError carrying the diagnostics.
//
//===----------------------------------------------------------------------===//
#include "CompileSupport.h"

#include "flashjit/FrontendToMLIR/MLIRGen.h"
#include "flashjit/Pipeline/GpuPipelines.h"
#include "flashjit/Pipeline/Pipelines.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/frontend/Error.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

using namespace mlir;

namespace flashjit {

namespace {
std::unique_ptr<MLIRContext> makeGpuContext() {
  DialectRegistry registry;
  registerFlashjitDialects(registry);
  registerGpuDialects(registry);
  auto ctx =
      std::make_unique<MLIRContext>(registry, MLIRContext::Threading::DISABLED);
  ctx->loadAllAvailableDialects();
  return ctx;
}

} // namespace

/// The tiles of a dense kernel (defaultGpuTileConfig's first rules).
static GpuTileConfig denseTileConfig(const AttentionSpec &spec,
                                     const std::string &arch) {
  // Measured on the H200 (bench/RESULTS.md, tile configurations): two m16
  // tiles per warp halve the shared-memory fragment loads per mma and win
  // wherever their accumulators fit in 255 registers without spills.
  GpuTileConfig c;
  int d = std::max(spec.headDimQK, spec.headDimV);
  bool buffers = !spec.variant.buffers().empty();
  if (d <= 64) {
    if (buffers)
      return c; // ALiBi: 112 TF/s against 108 with 4 warps of 32 rows
    c.numWarps = 4;
    c.rowsPerWarp = 32;
    c.blockN = 64;
  } else if (d <= 128) {
    // 4 warps of 32 rows with 32-key tiles is 6-16% faster here, but masks
    // longer than causal's (and buffer reads) then spill 4-28 bytes at 255
    // registers: those keep 8 warps of 16 rows.
    Expr mask = spec.effectiveMask();
    if (!buffers && (mask.isNull() || mask->depth() <= 2)) {
      c.numWarps = 4;
      c.rowsPerWarp = 32;
      c.blockN = 32;
    }
  } else {
    // 8 warps of 16 rows with 64-key tiles: 4-27% faster than 4 warps with
    // 16/32-key tiles. 64-key tiles leave no registers for long masks (a
    // two-sided bottom-right window spills 8 bytes): those take 32.
    c.numWarps = 8;
    Expr mask = spec.effectiveMask();
    bool shortMask = mask.isNull() || mask->depth() <= 4;
    c.blockN = arch == "sm_80" || !shortMask ? 32 : 64;
  }
  return c;
}

const char *toString(GpuMma mma) {
  switch (mma) {
  case GpuMma::Default:
    return "default";
  case GpuMma::MmaSync:
    return "mma.sync";
  case GpuMma::Wgmma:
    return "wgmma";
  }
  return "?";
}

/// Whether the kernel evaluates a mask (one that is not the constant true).
static bool hasMaskCode(const AttentionSpec &spec) {
  Expr mask = spec.effectiveMask();
  auto *k = mask.isNull() ? nullptr : llvm::dyn_cast<ConstantExpr>(mask.get());
  return !mask.isNull() && !(k && k->boolValue());
}

/// Whether the score modifier is not the identity.
static bool hasScoreModCode(const AttentionSpec &spec) {
  const Expr &score = spec.variant.scoreExpr();
  return !score.isNull() && !llvm::isa<ScoreExpr>(score.get());
}

/// Whether wgmma kernels can be built for \p spec on \p arch.
static bool wgmmaApplies(const AttentionSpec &spec, const std::string &arch) {
  return arch == "sm_90a" && spec.headDimQK % 64 == 0 &&
         spec.headDimV % 64 == 0;
}

GpuTileConfig defaultGpuTileConfig(const AttentionSpec &spec,
                                   const std::string &arch, bool varlen,
                                   bool blockSparse, GpuMma mma) {
  if (mma == GpuMma::Wgmma ||
      (mma == GpuMma::Default && wgmmaApplies(spec, arch))) {
    // Measured on the H200 (bench/RESULTS.md, session 4 tile experiment):
    // above head_dim 64 two warpgroups of 64 query rows (FlashAttention-3's
    // block_m), 128-key tiles up to 128 and 64 above; at 64 one warpgroup
    // per CTA (several CTAs per SM do not wait at each other's barriers):
    // 128-key tiles without a mask or score modifier (317-359 TF/s against
    // 233-301 with two warpgroups), else 64-key tiles and 3 CTAs per SM
    // (softcap 131-172 against 81-169, sliding window 216-260 against
    // 166-230).
    GpuTileConfig c;
    c.wgmma = true;
    c.rowsPerWarp = 16;
    int d = std::max(spec.headDimQK, spec.headDimV);
    if (d <= 64) {
      c.numWarps = 4;
      bool plain = !hasMaskCode(spec) && !hasScoreModCode(spec);
      c.blockN = plain ? 128 : 64;
      c.minBlocksPerSM = plain ? 1 : 3;
    } else {
      c.numWarps = 8;
      c.blockN = d <= 128 ? 128 : 64;
      // Buffer reads in a mask with a score modifier, or with varlen
      // offsets or block lists, leave too few registers beside S and O (a
      // varlen document mask with soft-capping spilled 188 bytes at
      // head_dim 128, a document mask with causal 24 bytes block-sparse at
      // 256): half the keys. ALiBi (buffer, no mask) keeps its tiles: half
      // of them cost it 4% at 128 and 17% at 256 on the H200.
      if (!spec.variant.buffers().empty() &&
          ((hasScoreModCode(spec) && hasMaskCode(spec)) || varlen ||
           blockSparse))
        c.blockN /= 2;
    }
    return c;
  }
  GpuTileConfig c = denseTileConfig(spec, arch);
  // Varlen's per-sequence offsets push 4 warps of 32 rows over 255
  // registers above head_dim 64 (softcap at 128 spilled 108 bytes): those
  // keep 8 warps of 16 rows and 64-key tiles. Block-sparse list walking does
  // the same to masked kernels (a two-sided window at head_dim 64 spilled 12
  // bytes on sm_80, top-left causal at 128 16 bytes on sm_90a).
  bool masked = hasMaskCode(spec);
  if (c.rowsPerWarp == 32 &&
      ((varlen && std::max(spec.headDimQK, spec.headDimV) > 64) ||
       (blockSparse && masked)))
    c = GpuTileConfig();
  return c;
}

/// Dynamic shared memory of a kernel with tiles \p tc: the Q tile and two
/// K/V stages of 16-bit elements, rows padded by 8 elements for mma.sync
/// (ldmatrix without bank conflicts), unpadded and swizzled for wgmma.
static int64_t gpuSharedBytes(const AttentionSpec &spec,
                              const GpuTileConfig &tc) {
  int64_t pad = tc.wgmma ? 0 : 8;
  int64_t blockM = int64_t(tc.rowsPerWarp) * tc.numWarps;
  return 2 * (blockM * (spec.headDimQK + pad) +
              2 * int64_t(tc.blockN) *
                  (spec.headDimQK + pad + spec.headDimV + pad));
}

/// MLIR links libdevice from $CUDA_ROOT, $CUDA_HOME or $CUDA_PATH; when none
/// is set, CUDA_HOME becomes the toolkit flashjit was built with (once, before
/// the first GPU compile), so math functions in kernels resolve.
static void useCudaToolkitForLibdevice() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char *var : {"CUDA_ROOT", "CUDA_HOME", "CUDA_PATH"})
      if (const char *v = std::getenv(var); v && *v)
        return;
#ifdef FLASHJIT_CUDA_TOOLKIT_DIR
    ::setenv("CUDA_HOME", FLASHJIT_CUDA_TOOLKIT_DIR, /*overwrite=*/0);
#endif
  });
}

/// The options' tile configuration, defaults filled in.
static GpuTileConfig tileConfig(const AttentionSpec &spec,
                                const GpuCompileOptions &options) {
  // Two m16 tiles per warp exist only for mma.sync: asking for them picks
  // it unless wgmma was asked for too (then validateForGpu refuses).
  GpuMma mma = options.mma;
  if (mma == GpuMma::Default && options.rowsPerWarp == 32)
    mma = GpuMma::MmaSync;
  GpuTileConfig c = defaultGpuTileConfig(spec, options.arch, options.varlen,
                                         options.blockSparse, mma);
  // A default CTAs-per-SM bound belongs to the default tiles: other warps,
  // rows or key tiles get the full register file unless it is asked for.
  bool reshaped = (options.blockN && options.blockN != c.blockN) ||
                  (options.numWarps && options.numWarps != c.numWarps) ||
                  (options.rowsPerWarp && options.rowsPerWarp != c.rowsPerWarp);
  if (reshaped)
    c.minBlocksPerSM = 1;
  if (options.blockN)
    c.blockN = options.blockN;
  if (options.numWarps)
    c.numWarps = options.numWarps;
  if (options.minBlocksPerSM)
    c.minBlocksPerSM = options.minBlocksPerSM;
  if (options.rowsPerWarp)
    c.rowsPerWarp = options.rowsPerWarp;
  return c;
}

void validateForGpu(const AttentionSpec &spec,
                    const GpuCompileOptions &options) {
  spec.validate();
  if (options.arch != "sm_80" && options.arch != "sm_90a")
    throw UserError(fmt::format("arch = '{}' is not supported (sm_80 or "
                                "sm_90a)",
                                options.arch));
  if (spec.dtypeQ != spec.dtypeK || spec.dtypeQ != spec.dtypeV ||
      spec.dtypeQ != spec.dtypeO)
    throw UserError(fmt::format(
        "dtypes q/k/v/o = {}/{}/{}/{}: the GPU kernel needs one dtype",
        toString(spec.dtypeQ), toString(spec.dtypeK), toString(spec.dtypeV),
        toString(spec.dtypeO)));
  if (spec.dtypeQ == DType::F32)
    throw UserError("dtype = fp32 is not supported on the GPU (fp16 or "
                    "bf16; the CPU backend takes fp32)");
  for (auto [field, d] : {std::pair{"head_dim_qk", spec.headDimQK},
                          std::pair{"head_dim_v", spec.headDimV}})
    if (d % 16 != 0 || d > 256)
      throw UserError(fmt::format("{} = {} is not supported on the GPU "
                                  "(multiples of 16 up to 256)",
                                  field, d));
  GpuTileConfig tc = tileConfig(spec, options);
  int blockN = tc.blockN;
  if (blockN < 16 || blockN > 128 || blockN % 16 != 0)
    throw UserError(fmt::format("block_n = {} must be a multiple of 16 in "
                                "[16, 128]",
                                blockN));
  int warps = tc.numWarps;
  if (warps != 4 && warps != 8)
    throw UserError(fmt::format("num_warps = {} must be 4 or 8", warps));
  if (tc.minBlocksPerSM < 1 || tc.minBlocksPerSM > 4)
    throw UserError(fmt::format("min_blocks_per_sm = {} must be in [1, 4]",
                                tc.minBlocksPerSM));
  if (tc.rowsPerWarp != 16 && tc.rowsPerWarp != 32)
    throw UserError(
        fmt::format("rows_per_warp = {} must be 16 or 32", tc.rowsPerWarp));
  if (tc.wgmma) {
    if (options.arch != "sm_90a")
      throw UserError(
          fmt::format("mma = wgmma needs arch sm_90a, not '{}' (flashjit: "
                      "--target sm_90a)",
                      options.arch));
    for (auto [field, d] : {std::pair{"head_dim_qk", spec.headDimQK},
                            std::pair{"head_dim_v", spec.headDimV}})
      if (d % 64 != 0)
        throw UserError(fmt::format("{} = {} is not supported by mma = "
                                    "wgmma (multiples of 64; mma.sync takes "
                                    "multiples of 16)",
                                    field, d));
    if (tc.rowsPerWarp != 16)
      throw UserError(fmt::format("rows_per_warp = {} is not supported by "
                                  "mma = wgmma (16: a warpgroup's 64 rows)",
                                  tc.rowsPerWarp));
  }
  int64_t smem = gpuSharedBytes(spec, tc);
  const int64_t limit = options.arch == "sm_80" ? 166912 : 232448;
  if (smem > limit)
    throw UserError(fmt::format("block_n = {} with {} warps needs {} bytes "
                                "of shared memory; {} allows {}",
                                blockN, warps, smem, options.arch, limit));
}

GpuKernelImage compileGpu(const AttentionSpec &spec,
                          const GpuCompileOptions &options) {
  validateForGpu(spec, options); // every UserError before MLIR/LLVM
  GpuKernelImage image;
  image.name = spec.variant.name();
  image.arch = options.arch;
  GpuTileConfig tc = tileConfig(spec, options);
  int warps = tc.numWarps;
  image.threads = 32 * warps;
  image.blockM = tc.rowsPerWarp * warps;
  image.blockN = tc.blockN;
  image.wgmma = tc.wgmma;
  image.sharedBytes = int(gpuSharedBytes(spec, tc));

  useCudaToolkitForLibdevice();
  StopWatch total, w;
  std::unique_ptr<MLIRContext> ctx = makeGpuContext();
  DiagnosticCapture diag(ctx.get());
  OwningOpRef<ModuleOp> module = mlirGen(*ctx, spec);
  if (!module)
    throw CompileError("MLIRGen failed:\n" + diag.text());
  image.attnText = printOp(*module, /*withLocations=*/true);
  image.timings.push_back({"mlirgen", w.lap()});

  GpuPipelineOptions po;
  po.arch = options.arch;
  po.blockN = image.blockN;
  po.numWarps = warps;
  po.minBlocksPerSM = tc.minBlocksPerSM;
  po.rowsPerWarp = tc.rowsPerWarp;
  po.varlen = image.varlen = options.varlen;
  po.blockSparse = image.blockSparse = options.blockSparse;
  po.wgmma = tc.wgmma;
  runPipeline(*ctx, *module, "attn-to-nvvm", diag,
              [&](OpPassManager &pm) { buildAttnToNVVMPipeline(pm, po); });
  image.gpuText = printOp(*module, /*withLocations=*/false);
  module->walk([&](gpu::GPUFuncOp fn) {
    if (fn.getName().ends_with("_block_mask"))
      return; // the builder's shared memory is one byte per key tile
    auto bytes = fn->getAttrOfType<IntegerAttr>("flashjit.shared_bytes");
    if (!bytes || bytes.getInt() != image.sharedBytes)
      throw InternalError(fmt::format(
          "kernel '{}' needs {} bytes of shared memory, the launch asks {}",
          image.name, bytes ? bytes.getInt() : -1, image.sharedBytes));
  });
  image.timings.push_back({"attn-to-nvvm", w.lap()});

  runPipeline(*ctx, *module, "nvvm-to-ptx", diag,
              [&](OpPassManager &pm) { buildNVVMToPTXPipeline(pm, po); });
  module->walk([&](gpu::BinaryOp bin) {
    for (Attribute a : bin.getObjects())
      image.ptx += cast<gpu::ObjectAttr>(a).getObject().getValue().str();
  });
  if (image.ptx.empty())
    throw CompileError("the NVVM pipeline produced no PTX:\n" + diag.text());
  // Without libdevice the PTX still assembles up to the first call of a
  // math function (__nv_tanhf, __nv_exp2f, ...) and then fails to load.
  if (size_t at = image.ptx.find(".extern .func"); at != std::string::npos) {
    size_t nv = image.ptx.find("__nv_", at);
    if (nv != std::string::npos) {
      size_t end = image.ptx.find_first_of("( \n", nv);
      const char *home = std::getenv("CUDA_HOME");
      throw UserError(fmt::format(
          "kernel '{}' calls the libdevice function {} but libdevice.10.bc "
          "was not linked: CUDA_HOME = '{}' holds no "
          "nvvm/libdevice/libdevice.10.bc; set CUDA_HOME to the CUDA toolkit",
          image.name, image.ptx.substr(nv, end - nv), home ? home : ""));
    }
  }
  image.timings.push_back({"nvvm-to-ptx", w.lap()});
  image.timings.push_back({"total", total.lap()});

  std::string dir = options.dumpDir;
  if (dir.empty())
    if (const char *env = std::getenv("FLASHJIT_DUMP_DIR"))
      dir = env;
  if (!dir.empty())
    dumpFiles(dir, image.name,
              {{".attn.mlir", image.attnText},
               {".gpu.mlir", image.gpuText},
               {"." + image.arch + ".ptx", image.ptx}});
  return image;
}

} // namespace flashjit
