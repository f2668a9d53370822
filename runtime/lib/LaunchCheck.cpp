//===- LaunchCheck.cpp - A GPU launch configuration against its PTX ------===//
//
// gpuLaunchConfigMismatch (AttentionKernel.h): nothing read from disk (a
// cache entry, a bundle, an AOT .info file) may launch with a configuration
// the module does not declare. The forward, backward and decode kernels'
// entries are parsed from the PTX (parameter types, .reqntid/.maxntid,
// .minnctapersm) and compared with what the launcher would pass, and the
// dynamic shared memory each kind's configuration takes with what the
// manifest says (forward, backward and decode).
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/AttentionKernel.h"

#include "flashjit/runtime/DecodeMergeAbi.h"
#include "flashjit/runtime/Fp8Abi.h"
#include "flashjit/runtime/HeadDim.h"
#include "flashjit/runtime/KernelAbi.h"
#include "flashjit/runtime/Ptxas.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace flashjit::runtime {
namespace {

/// PTX's spelling of a kernel argument type.
const char *ptxType(abi::gpu::ArgType t) {
  switch (t) {
  case abi::gpu::ArgType::Ptr:
    return ".u64 .ptr";
  case abi::gpu::ArgType::I64:
    return ".u64";
  case abi::gpu::ArgType::I32:
    return ".u32";
  case abi::gpu::ArgType::F32:
    return ".f32";
  case abi::gpu::ArgType::TensorMap:
    return ".b8[128]"; // parsePtxEntry drops ".align 64"
  }
  return "?";
}

/// \p fixed, then the variant's parameters and buffers, in PTX types.
std::vector<std::string> expectedParams(const AttentionSpec &spec,
                                        std::vector<abi::gpu::ArgType> fixed) {
  using abi::gpu::ArgType;
  for (const ParamDecl &p : spec.variant.params())
    fixed.push_back(p.type == ScalarType::Int32   ? ArgType::I32
                    : p.type == ScalarType::Int64 ? ArgType::I64
                                                  : ArgType::F32);
  for (size_t i = 0; i < spec.variant.buffers().size(); ++i) {
    fixed.push_back(ArgType::Ptr);
    fixed.push_back(ArgType::I64);
  }
  std::vector<std::string> out;
  for (ArgType t : fixed)
    out.push_back(ptxType(t));
  return out;
}

/// Empty when entry \p name of \p ptx takes \p params and \p threads
/// threads (and \p minBlocks CTAs per SM, when >= 0), else why not.
std::string entryMismatch(std::string_view ptx, const std::string &name,
                          const std::vector<std::string> &params, int threads,
                          int minBlocks) {
  std::optional<PtxEntryDecl> decl = parsePtxEntry(ptx, name);
  if (!decl)
    return fmt::format("the PTX defines no entry '{}'", name);
  if (decl->params != params)
    return fmt::format("entry '{}' takes {} parameters of other types than "
                       "the {} its configuration passes",
                       name, decl->params.size(), params.size());
  int declared = decl->reqntid ? decl->reqntid : decl->maxntid;
  if (declared != threads)
    return fmt::format("entry '{}' declares {} threads per CTA, its "
                       "configuration launches {}",
                       name, declared, threads);
  if (minBlocks >= 0 && decl->minnctapersm != minBlocks &&
      !(decl->minnctapersm == 0 && minBlocks <= 1))
    return fmt::format("entry '{}' declares .minnctapersm {}, its "
                       "configuration says {}",
                       name, decl->minnctapersm, minBlocks);
  return {};
}

/// gpuLaunchConfigMismatch for the three backward kernels
/// (abi::gpu::BackwardArg): every one takes the fixed arguments, the
/// variant's, then one gradient pointer per buffer and one for the
/// parameters (if any); `_bwd` runs the configuration's threads, `_bwd_pre`
/// and `_bwd_post` kBackwardRowThreads; a block-sparse configuration also
/// has `_bwd_mask` (abi::gpu::backwardMaskArgTypes, kBackwardMaskThreads).
std::string backwardLaunchMismatch(const AttentionSpec &spec,
                                   const GpuKernelInfo &info,
                                   std::string_view ptx) {
  using abi::gpu::ArgType;
  std::vector<ArgType> fixed = abi::gpu::backwardArgTypes(info.config);
  std::vector<std::string> params = expectedParams(spec, fixed);
  size_t gradPtrs =
      spec.variant.buffers().size() + (spec.variant.params().empty() ? 0 : 1);
  params.insert(params.end(), gradPtrs, ptxType(ArgType::Ptr));
  if (std::string why =
          entryMismatch(ptx, info.name + abi::gpu::kBackwardMainSuffix, params,
                        info.config.threads(), -1);
      !why.empty())
    return why;
  for (const char *suffix :
       {abi::gpu::kBackwardPreSuffix, abi::gpu::kBackwardPostSuffix})
    if (std::string why = entryMismatch(ptx, info.name + suffix, params,
                                        abi::gpu::kBackwardRowThreads, -1);
        !why.empty())
      return why;
  // A block-sparse backward also has its mask transposer (no variant
  // arguments); a dense one has none.
  std::string transposer = info.name + abi::gpu::kBackwardMaskSuffix;
  if (info.config.blockSparse) {
    std::vector<std::string> maskParams;
    for (ArgType t : abi::gpu::backwardMaskArgTypes())
      maskParams.push_back(ptxType(t));
    if (std::string why = entryMismatch(ptx, transposer, maskParams,
                                        abi::gpu::kBackwardMaskThreads, -1);
        !why.empty())
      return why;
  } else if (parsePtxEntry(ptx, transposer)) {
    return fmt::format("the PTX defines '{}', but the configuration is not "
                       "block-sparse",
                       transposer);
  }
  if (info.sharedBytes !=
      info.config.sharedBytes(spec.headDimQK, spec.headDimV))
    return fmt::format("shared memory {} bytes is not the {} bytes the "
                       "backward configuration's tiles take",
                       info.sharedBytes,
                       info.config.sharedBytes(spec.headDimQK, spec.headDimV));
  return {};
}

} // namespace

std::string gpuLaunchConfigMismatch(const AttentionSpec &spec,
                                    const GpuKernelInfo &info,
                                    std::string_view ptx) {
  const KernelConfig &c = info.config;
  size_t target = ptx.find("\n.target ");
  if (target == std::string_view::npos ||
      ptx.substr(target + 9, c.arch.size() + 1) != c.arch + "\n")
    return fmt::format("the PTX does not target {}", c.arch);
  if (c.numWarps <= 0 || c.rowsPerWarp <= 0 || c.blockN <= 0)
    return fmt::format("configuration without tiles (warps {}, rows per "
                       "warp {}, block_n {})",
                       c.numWarps, c.rowsPerWarp, c.blockN);
  if (c.kind == KernelKind::Backward)
    return backwardLaunchMismatch(spec, info, ptx);
  if (c.kind == KernelKind::Decode) {
    // `<name>_decode` (the variant's arguments follow the fixed ones; the
    // sink pointer is the last fixed one for a spec with a sink) and
    // `<name>_decode_merge` and `<name>_decode_merge_serial` (no variant
    // arguments; the sink pointer last).
    if (std::string why = entryMismatch(
            ptx, info.name + abi::gpu::kDecodeSuffix,
            expectedParams(spec, abi::gpu::decodeArgTypes(spec.sink)),
            c.threads(), c.minBlocksPerSM);
        !why.empty())
      return why;
    std::vector<std::string> merge;
    for (abi::gpu::ArgType t : abi::gpu::mergeArgTypes(spec.sink))
      merge.push_back(ptxType(t));
    for (const char *suffix :
         {abi::gpu::kDecodeMergeSuffix, abi::gpu::kDecodeMergeSerialSuffix})
      if (std::string why = entryMismatch(ptx, info.name + suffix, merge,
                                          abi::gpu::kMergeThreads, -1);
          !why.empty())
        return why;
    // The split kernel's dynamic shared memory: the packed Q tile and
    // decodeStages padded K/V stages (KernelConfig::sharedBytes).
    if (info.sharedBytes != c.sharedBytes(spec.headDimQK, spec.headDimV))
      return fmt::format("shared memory {} bytes is not the {} bytes the "
                         "decode configuration's tiles take",
                         info.sharedBytes,
                         c.sharedBytes(spec.headDimQK, spec.headDimV));
    return {};
  }
  std::vector<abi::gpu::ArgType> fixed =
      abi::gpu::forwardArgTypes(c.varlen, c.blockSparse, spec.sink, c.tma);
  const bool fp8 = isFp8(spec.dtypeQ);
  if (fp8)
    for (abi::gpu::ArgType t : abi::gpu::fp8DescaleArgTypes())
      fixed.push_back(t);
  if (std::string why =
          entryMismatch(ptx, info.name, expectedParams(spec, fixed),
                        c.threads(), c.minBlocksPerSM);
      !why.empty())
    return why;
  std::string builder = info.name + abi::kBlockMaskSuffix;
  if (c.blockSparse) {
    if (std::string why = entryMismatch(
            ptx, builder,
            expectedParams(spec, abi::gpu::blockMaskArgTypes(c.varlen)),
            abi::gpu::kBlockMaskThreads, -1);
        !why.empty())
      return why;
  } else if (ptxDefinesEntry(ptx, builder)) {
    return fmt::format("the module has a block-mask builder '{}' but the "
                       "configuration is not block-sparse",
                       builder);
  }
  // The forward's tiles have the padded head dims (HeadDim.h).
  const int64_t fwdBytes =
      fp8 ? fp8SharedBytes(c, spec.headDimQK, spec.headDimV)
          : c.sharedBytes(paddedHeadDim(spec.headDimQK),
                          paddedHeadDim(spec.headDimV));
  if (c.kind == KernelKind::Forward && info.sharedBytes != fwdBytes)
    return fmt::format("shared memory {} bytes is not the {} bytes the "
                       "configuration's tiles take",
                       info.sharedBytes, fwdBytes);
  return {};
}

} // namespace flashjit::runtime
