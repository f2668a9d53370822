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
#include "GpuKey.h"

#include "flashjit/FrontendToMLIR/MLIRGen.h"
#include "flashjit/Pipeline/GpuPipelines.h"
#include "flashjit/Pipeline/Pipelines.h"
#include "flashjit/compiler/GpuCache.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/DecodeMergeAbi.h"
#include "flashjit/runtime/Fp8Abi.h"
#include "flashjit/runtime/HeadDim.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <atomic>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <tuple>
#include <utility>

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

/// The dynamic shared memory of \p tc's kernel for \p spec: the forward's
/// tiles have the padded head dims (HeadDim.h; the backward and decode
/// kernels take multiples of 16 only).
static int64_t forwardTileBytes(const AttentionSpec &spec,
                                const GpuTileConfig &tc) {
  if (hasFp8Inputs(spec))
    return fp8SharedBytes(tc, spec.headDimQK, spec.headDimV);
  return tc.sharedBytes(paddedHeadDim(spec.headDimQK),
                        paddedHeadDim(spec.headDimV));
}

/// Head dims up to 256; the forward pads those that are not multiples of 16
/// to one in shared memory (mma.sync kernels; wgmma's are refused by
/// validateForGpu), the backward and the decode kernel take multiples of 16.
static void validateHeadDims(const AttentionSpec &spec, KernelKind kind) {
  for (auto [field, d] : {std::pair{"head_dim_qk", spec.headDimQK},
                          std::pair{"head_dim_v", spec.headDimV}}) {
    if (d > kMaxGpuHeadDim)
      throw UserError(fmt::format("{} = {} is not supported on the GPU "
                                  "(at most {}; the CPU backend takes up to "
                                  "{})",
                                  field, d, kMaxGpuHeadDim, kMaxHeadDim));
    if (d % 16 != 0 && kind != KernelKind::Forward)
      throw UserError(fmt::format("{} = {} is not supported by the GPU {} "
                                  "(multiples of 16 up to 256; the forward "
                                  "takes any head dim up to 256)",
                                  field, d, toString(kind)));
  }
}

/// mma = wgmma.tma.ws.overlap (or .pingpong) asked for by name: built
/// with the overlap or refused (it needs a ring of 3 K/V stages); the
/// ping-pong also needs two consumer warpgroups.
static void checkOverlapAsked(const AttentionSpec &spec,
                              const GpuCompileOptions &options,
                              const GpuTileConfig &tc) {
  bool asked = options.mma == GpuMma::WgmmaTmaWsOverlap ||
               options.mma == GpuMma::WgmmaTmaWsPingPong;
  if (tc.kind == KernelKind::Forward && asked && tc.warpSpecialized &&
      !tc.overlapSoftmax) {
    int stages = tc.kvStages(spec.headDimQK, spec.headDimV);
    if (stages < 3)
      throw UserError(fmt::format(
          "mma = {} needs a ring of 3 K/V stages (head dims up to 192 with "
          "the default tiles), not {} at head_dim {}/{} and block_n {}",
          toString(options.mma), stages, spec.headDimQK, spec.headDimV,
          tc.blockN));
    // Reshaped tiles with 3 stages (head dim 256 with block_n 32): the
    // overlap is planned on the default tiles and not brought back by
    // block_n (nu26: "not 3" read as a contradiction).
    GpuTileConfig def = defaultGpuTileConfig(spec, options.arch, options.varlen,
                                             options.blockSparse, options.mma);
    throw UserError(fmt::format(
        "mma = {} is built on the default tiles' ring of 3 K/V stages "
        "(head dims up to 192); at head_dim {}/{} the default "
        "block_n {} has {}, and block_n = {} (with {}) does not bring the "
        "overlap back",
        toString(options.mma), spec.headDimQK, spec.headDimV, def.blockN,
        def.kvStages(spec.headDimQK, spec.headDimV), tc.blockN, stages));
  }
  if (tc.kind == KernelKind::Forward &&
      options.mma == GpuMma::WgmmaTmaWsPingPong && tc.overlapSoftmax &&
      !tc.pingPong)
    throw UserError(fmt::format(
        "mma = wgmma.tma.ws.overlap.pingpong alternates two consumer "
        "warpgroups (num_warps = 8), not num_warps = {}",
        tc.numWarps));
}

/// decode_stages asked for: 2 or 3, on a decode kernel.
static void checkDecodeStagesAsked(const GpuCompileOptions &options) {
  if (options.decodeStages != 0 &&
      (options.kind != KernelKind::Decode ||
       (options.decodeStages != 2 && options.decodeStages != 3)))
    throw UserError(fmt::format("decode_stages = {} must be 2 or 3, on a "
                                "decode kernel (kind '{}')",
                                options.decodeStages, toString(options.kind)));
}

/// The decode kernel's own limits (\p tc resolved from \p options).
static void validateDecode(const AttentionSpec &spec,
                           const GpuCompileOptions &options,
                           const GpuTileConfig &tc) {
  if (options.varlen || options.blockSparse)
    throw UserError("the GPU decode kernel reads K/V through a page table "
                    "(varlen and block_sparse do not apply)");
  if (options.mma == GpuMma::Wgmma || options.mma == GpuMma::WgmmaTma ||
      options.mma == GpuMma::WgmmaTmaWs ||
      options.mma == GpuMma::WgmmaTmaWsOverlap ||
      options.mma == GpuMma::WgmmaTmaWsPingPong)
    throw UserError(fmt::format("mma = {}: the GPU decode kernel uses "
                                "mma.sync only",
                                toString(options.mma)));
  if (tc.rowsPerWarp != 16)
    throw UserError(fmt::format("rows_per_warp = {}: the GPU decode kernel "
                                "has 16 packed query rows per warp",
                                tc.rowsPerWarp));
  if (tc.decodeStages == 3 && spec.headDimQK > 128)
    throw UserError(fmt::format(
        "decode_stages = 3 needs head_dim_qk <= 128 (Q lives in registers "
        "once loaded, its shared tile overlaid on the third stage), not "
        "{}; decode_stages = 2 takes any head dim",
        spec.headDimQK));
}

/// FP8 inputs need wgmma's fp8 operands (sm_90a). Built (issue 18): the
/// cp.async wgmma forward (dense, varlen, block-sparse), Q/K/V all fp8, O
/// bf16 or fp16, head_dim_qk a multiple of 32 and head_dim_v of 16 up to
/// 256 (runtime/Fp8Abi.h, WgmmaFp8.cpp); the rest is refused by name.
/// Returns whether the spec is fp8 (then the one-dtype rule is not asked).
static bool validateFp8ForGpu(const AttentionSpec &spec,
                              const GpuCompileOptions &options) {
  if (!hasFp8Inputs(spec))
    return false;
  const std::string &arch = options.arch;
  std::string dtypes =
      fmt::format("dtypes q/k/v = {}/{}/{}", toString(spec.dtypeQ),
                  toString(spec.dtypeK), toString(spec.dtypeV));
  if (arch != "sm_90a")
    throw UserError(fmt::format("{} on {}: fp8 needs sm_90a wgmma ({} has no "
                                "fp8 tensor-core MMA); compile for sm_90a or "
                                "run on the CPU backend",
                                dtypes, arch, arch));
  auto notBuilt = [&](const std::string &what) {
    return UserError(fmt::format("{} on sm_90a: {}: the fp8 kernel is not yet "
                                 "built (issue 18; built: the forward, dense, "
                                 "varlen or block-sparse, fp8 q/k/v, O bf16 "
                                 "or fp16, head_dim_qk a multiple of 32 and "
                                 "head_dim_v of 16 up to 256, mma = wgmma); "
                                 "the CPU backend and the "
                                 "float64 reference take fp8 inputs",
                                 dtypes, what));
  };
  if (options.kind != KernelKind::Forward)
    throw notBuilt(fmt::format("kind = {}", toString(options.kind)));
  if (!isFp8(spec.dtypeQ) || !isFp8(spec.dtypeK) || !isFp8(spec.dtypeV))
    throw notBuilt("fp8 and 16-bit inputs mixed");
  if (spec.dtypeO != DType::BF16 && spec.dtypeO != DType::F16)
    throw notBuilt(
        fmt::format("dtype_o = {} (bf16 or fp16)", toString(spec.dtypeO)));
  if (options.mma != GpuMma::Default && options.mma != GpuMma::Wgmma)
    throw notBuilt(fmt::format("mma = {}", toString(options.mma)));
  // wgmma's fp8 products take K in steps of 32 (S: head_dim_qk), the V
  // transpose moves 16-column groups (head_dim_v); both at most 256.
  for (auto [field, d, step] : {std::tuple{"head_dim_qk", spec.headDimQK, 32},
                                std::tuple{"head_dim_v", spec.headDimV, 16}})
    if (d % step != 0 || d > 256)
      throw notBuilt(
          fmt::format("{} = {} (a multiple of {} up to 256)", field, d, step));
  if (options.blockN && options.blockN != 64 && options.blockN != 128)
    throw notBuilt(fmt::format("block_n = {} (64 or 128)", options.blockN));
  return true;
}

void validateForGpu(const AttentionSpec &spec,
                    const GpuCompileOptions &options) {
  spec.validate();
  if (options.arch != "sm_80" && options.arch != "sm_90a")
    throw UserError(fmt::format("arch = '{}' is not supported (sm_80 or "
                                "sm_90a)",
                                options.arch));
  const bool fp8 = validateFp8ForGpu(spec, options);
  if (!fp8 && (spec.dtypeQ != spec.dtypeK || spec.dtypeQ != spec.dtypeV ||
               spec.dtypeQ != spec.dtypeO))
    throw UserError(fmt::format(
        "dtypes q/k/v/o = {}/{}/{}/{}: the GPU kernel needs one dtype",
        toString(spec.dtypeQ), toString(spec.dtypeK), toString(spec.dtypeV),
        toString(spec.dtypeO)));
  if (spec.dtypeQ == DType::F32)
    throw UserError("dtype = fp32 is not supported on the GPU (fp16 or "
                    "bf16; the CPU backend takes fp32)");
  checkDecodeStagesAsked(options);
  GpuTileConfig tc = resolveGpuTileConfig(spec, options);
  validateHeadDims(spec, tc.kind);
  if (tc.kind == KernelKind::Backward) {
    if (options.mma == GpuMma::WgmmaTma || options.mma == GpuMma::WgmmaTmaWs ||
        options.mma == GpuMma::WgmmaTmaWsOverlap ||
        options.mma == GpuMma::WgmmaTmaWsPingPong)
      throw UserError(fmt::format("mma = {}: the GPU backward uses mma.sync "
                                  "or wgmma (cp.async, no TMA)",
                                  toString(options.mma)));
    if (tc.wgmma) {
      if (tc.blockN != 64 || tc.numWarps != 8)
        throw UserError(fmt::format(
            "block_n = {} and num_warps = {}: the wgmma backward takes "
            "block_n = 64 and num_warps = 8 (two warpgroups of 64 keys, "
            "query tiles of wgmma's 64 rows)",
            tc.blockN, tc.numWarps));
      // rowsPerWarp 8: the head-dim-split kernel (TilePolicy.cpp:
      // backwardWgmmaSplits), head dims 256 without a score modifier.
      bool split = tc.rowsPerWarp == 8;
      for (auto [field, d] : {std::pair{"head_dim_qk", spec.headDimQK},
                              std::pair{"head_dim_v", spec.headDimV}})
        if (split ? d != 256 : d != 64 && d != 128)
          throw UserError(fmt::format("{} = {} is not supported by the wgmma "
                                      "backward (64, 128, or 256 for both "
                                      "without a score modifier; mma.sync "
                                      "takes multiples of 16)",
                                      field, d));
    }
    if (options.rowsPerWarp && options.rowsPerWarp != 16)
      throw UserError(fmt::format("rows_per_warp = {}: the GPU backward "
                                  "has 16 keys per warp",
                                  options.rowsPerWarp));
    if (tc.blockN != 16 && tc.blockN != 32 && tc.blockN != 64)
      throw UserError(fmt::format("block_n = {}: the GPU backward takes 16, "
                                  "32 or 64 query rows per tile",
                                  tc.blockN));
    if (tc.numWarps != 4 && tc.numWarps != 8)
      throw UserError(
          fmt::format("num_warps = {} must be 4 or 8", tc.numWarps));
    // The score modifier's derivative (UserError at the user's line).
    const Expr &mod = spec.variant.scoreExpr();
    (void)differentiateScoreMod(mod, differentiableParams(mod));
    int colGroups = tc.numWarps / (tc.blockN / 16);
    if (spec.headDimQK % (16 * colGroups))
      throw UserError(fmt::format(
          "head_dim_qk = {} with block_n = {} and {} warps: the backward "
          "splits dQ's columns over {} warps (a multiple of {} needed)",
          spec.headDimQK, tc.blockN, tc.numWarps, colGroups, 16 * colGroups));
  }
  if (tc.kind == KernelKind::Decode)
    validateDecode(spec, options, tc);
  if (options.syncBackward && tc.kind != KernelKind::Backward)
    throw UserError(fmt::format("sync_backward: the {} kernel has no "
                                "backward tile step (backward kernels only)",
                                toString(tc.kind)));
  int blockN = tc.blockN;
  if (blockN < 16 || blockN > 128 || blockN % 16 != 0)
    throw UserError(fmt::format("block_n = {} must be a multiple of 16 in "
                                "[16, 128]",
                                blockN));
  int warps = tc.numWarps;
  if (warps != 4 && warps != 8 && !(warps == 12 && tc.warpSpecialized))
    throw UserError(fmt::format("num_warps = {} must be 4 or 8 (12: three "
                                "consumer warpgroups, mma = wgmma.tma.ws)",
                                warps));
  if (tc.minBlocksPerSM < 1 || tc.minBlocksPerSM > 4)
    throw UserError(fmt::format("min_blocks_per_sm = {} must be in [1, 4]",
                                tc.minBlocksPerSM));
  // 8: the wgmma backward's warpgroups share 64 keys (resolved, never
  // asked for).
  bool splitBackward =
      tc.kind == KernelKind::Backward && tc.wgmma && tc.rowsPerWarp == 8;
  if (tc.rowsPerWarp != 16 && tc.rowsPerWarp != 32 && !splitBackward)
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
      if (d % 64 != 0 && !fp8) // fp8: validateFp8ForGpu's head dims
        throw UserError(fmt::format("{} = {} is not supported by mma = "
                                    "wgmma (multiples of 64; mma.sync takes "
                                    "any head dim up to 256)",
                                    field, d));
    if (tc.rowsPerWarp != 16 && !splitBackward)
      throw UserError(fmt::format("rows_per_warp = {} is not supported by "
                                  "mma = {} (16: a warpgroup's 64 rows)",
                                  tc.rowsPerWarp, tc.mmaName()));
  }
  // An MMA asked for by name is built as asked or refused, never replaced
  // by another one that would sit under its own cache key.
  bool askedWs = options.mma == GpuMma::WgmmaTmaWs ||
                 options.mma == GpuMma::WgmmaTmaWsOverlap ||
                 options.mma == GpuMma::WgmmaTmaWsPingPong;
  bool askedTma = options.mma == GpuMma::WgmmaTma || askedWs;
  if (tc.kind == KernelKind::Forward && askedTma &&
      (options.varlen || options.blockSparse))
    throw UserError(fmt::format(
        "mma = {}: TMA loads take dense calls only ({} kernels load with "
        "cp.async: mma = wgmma, or the default)",
        toString(options.mma), options.varlen ? "varlen" : "block-sparse"));
  if (tc.kind == KernelKind::Forward && askedWs && !tc.warpSpecialized)
    throw UserError(fmt::format(
        "mma = {} needs two consumer warpgroups (num_warps = 8), not "
        "num_warps = {} at head_dim {}/{} (mma = wgmma.tma is the TMA "
        "kernel without warp specialisation)",
        toString(options.mma), tc.numWarps, spec.headDimQK, spec.headDimV));
  checkOverlapAsked(spec, options, tc);
  if (tc.warpSpecialized &&
      ((tc.numWarps != 8 && tc.numWarps != 12) || tc.minBlocksPerSM != 1))
    throw UserError(fmt::format(
        "mma = wgmma.tma.ws needs num_warps = 8 or 12 and "
        "min_blocks_per_sm = 1 (two or three consumer warpgroups beside the "
        "producer, 240 or 160 and 24 registers per thread), not {} and {}",
        tc.numWarps, tc.minBlocksPerSM));
  int64_t smem = forwardTileBytes(spec, tc);
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
  GpuTileConfig tc = resolveGpuTileConfig(spec, options);
  image.config = tc;
  image.sharedBytes = int(forwardTileBytes(spec, tc));

  useCudaToolkitForLibdevice();
  StopWatch total, w;
  std::unique_ptr<MLIRContext> ctx = makeGpuContext();
  DiagnosticCapture diag(ctx.get());
  // The wgmma backward above head dim 64 (dK and dV of 128 columns beside
  // S^T, P^T and dP^T): a score_grad reading the score reads the modified
  // one, recovered from P after dP, so S^T dies at P (softcap spilled 12-264
  // bytes keeping it). Elsewhere the raw score, as the CPU backward.
  bool gradOfOutput = tc.kind == KernelKind::Backward && tc.wgmma &&
                      std::max(spec.headDimQK, spec.headDimV) > 64;
  OwningOpRef<ModuleOp> module = mlirGen(*ctx, spec, tc.kind, gradOfOutput);
  if (!module)
    throw CompileError("MLIRGen failed:\n" + diag.text());
  image.attnText = printOp(*module, /*withLocations=*/true);
  image.timings.push_back({"mlirgen", w.lap()});

  runPipeline(*ctx, *module, "attn-to-nvvm", diag,
              [&](OpPassManager &pm) { buildAttnToNVVMPipeline(pm, tc); });
  image.gpuText = printOp(*module, /*withLocations=*/false);
  module->walk([&](gpu::GPUFuncOp fn) {
    if (fn.getName().ends_with("_block_mask") ||
        fn.getName().ends_with(abi::gpu::kBackwardPreSuffix) ||
        fn.getName().ends_with(abi::gpu::kBackwardPostSuffix) ||
        fn.getName().ends_with(abi::gpu::kBackwardMaskSuffix) ||
        fn.getName().ends_with(abi::gpu::kDecodeMergeSuffix) ||
        fn.getName().ends_with(abi::gpu::kDecodeMergeSerialSuffix))
      return; // the builder's shared memory is one byte per key tile; the
              // backward's row kernels and mask transposer need none
    auto bytes = fn->getAttrOfType<IntegerAttr>("flashjit.shared_bytes");
    if (!bytes || bytes.getInt() != image.sharedBytes)
      throw InternalError(fmt::format(
          "kernel '{}' needs {} bytes of shared memory, the launch asks {}",
          image.name, bytes ? bytes.getInt() : -1, image.sharedBytes));
  });
  image.timings.push_back({"attn-to-nvvm", w.lap()});

  runPipeline(*ctx, *module, "nvvm-to-ptx", diag,
              [&](OpPassManager &pm) { buildNVVMToPTXPipeline(pm, tc); });
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
  // Named by the cache key: two compiles of different specs or options
  // never overwrite each other's files.
  if (!dir.empty())
    dumpFiles(
        dir,
        fmt::format("{}.{}", image.name, makeGpuCacheKey(spec, options).hash()),
        {{".attn.mlir", image.attnText},
         {".gpu.mlir", image.gpuText},
         {"." + image.config.arch + ".ptx", image.ptx}});
  return image;
}

KernelConfig requestedConfig(const GpuCompileOptions &options) {
  KernelConfig c;
  c.arch = options.arch;
  c.blockN = options.blockN;
  c.numWarps = options.numWarps;
  c.minBlocksPerSM = options.minBlocksPerSM;
  c.rowsPerWarp = options.rowsPerWarp;
  c.varlen = options.varlen;
  c.blockSparse = options.blockSparse;
  c.kind = options.kind;
  c.decodeStages = options.decodeStages;
  c.syncBackward = options.syncBackward;
  return c;
}

runtime::CacheKey makeGpuCacheKey(const AttentionSpec &spec,
                                  const GpuCompileOptions &options) {
  return runtime::CacheKey::make(printSpec(spec), requestedConfig(options),
                                 toString(options.mma));
}

} // namespace flashjit
