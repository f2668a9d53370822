//===- ReferenceKernel.cpp - CUDA C++ of the naive reference kernel -------===//
//
// Generates the source described in NvrtcReference.h. The kernel is written
// for obviousness: fp32 everywhere, one warp per query row, the mask and
// score modifier evaluated exactly where the float64 reference evaluates
// them (the score modifier only for allowed keys, so a guard in the mask
// protects buffer reads in the score modifier as it does in the
// interpreter).
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/NvrtcReference.h"

#include "flashjit/frontend/CudaPrinter.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>

namespace flashjit::runtime {

namespace {

constexpr int kRowsPerBlock = 8;
constexpr int kKeysPerTile = 32;

std::string_view elementType(DType t) {
  switch (t) {
  case DType::F16:
    return "__half";
  case DType::BF16:
    return "__nv_bfloat16";
  case DType::F32:
    return "float";
  case DType::E4M3:
  case DType::E5M2:
    throw UserError(fmt::format("dtype = {}: the NVRTC reference kernel takes "
                                "fp16, bf16 or fp32 tensors (check fp8 "
                                "against the float64 reference)",
                                toString(t)));
  }
  throw InternalError("unknown DType");
}

/// The kernel body; {{...}} placeholders are replaced by generate().
constexpr std::string_view kKernelTemplate = R"CUDA(
// Sizes and element strides of every tensor (must match FjDims in
// runtime/lib/NvrtcReference.cpp).
struct FjDims {
  long long batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  long long q_stride[4], k_stride[4], v_stride[4], o_stride[4], lse_stride[3];
};

__device__ __forceinline__ float fj_to_float(float x) { return x; }
__device__ __forceinline__ float fj_to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float fj_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void fj_store(float *p, float x) { *p = x; }
__device__ __forceinline__ void fj_store(__half *p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void fj_store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }

#define FJ_DQK {{DQK}}
#define FJ_DV {{DV}}
#define FJ_ROWS {{ROWS}}
#define FJ_KEYS {{KEYS}}
#define FJ_KSTRIDE (FJ_DQK + 1) // odd row stride: lane j reads row j without bank conflicts
#define FJ_VPL ((FJ_DV + 31) / 32)
#define FJ_NEG_INF __uint_as_float(0xff800000u)
#define FJ_FULL 0xffffffffu

// mask:  {{MASK_TEXT}}
// score: {{SCORE_TEXT}}
extern "C" __global__ void __launch_bounds__(FJ_ROWS * 32, 1)
{{KERNEL}}(const {{TQ}} *__restrict__ q, const {{TK}} *__restrict__ k,
    const {{TV}} *__restrict__ v, {{TO}} *__restrict__ o,
    float *__restrict__ lse, const FjDims dims{{EXTRA_PARAMS}}) {
  extern __shared__ float fj_smem[];
  float *q_s = fj_smem;                     // [FJ_ROWS][FJ_DQK]
  float *k_s = q_s + FJ_ROWS * FJ_DQK;      // [FJ_KEYS][FJ_KSTRIDE]
  float *v_s = k_s + FJ_KEYS * FJ_KSTRIDE;  // [FJ_KEYS][FJ_DV]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long b = blockIdx.z, h = blockIdx.y;
  const long long i = (long long)blockIdx.x * FJ_ROWS + warp;
  const bool active = i < dims.seqlen_q; // the same for the whole warp
  const long long hk = h / (dims.heads_q / dims.heads_kv); // GQA
  const float fj_scale = {{SCALE}};
  // The leaves the mask and score modifier read (int32, as in the DSL).
  const int batch = (int)b, head = (int)h, q_idx = (int)i;
  const int seqlen_q = (int)dims.seqlen_q, seqlen_k = (int)dims.seqlen_k;
  (void)batch; (void)head; (void)q_idx; (void)seqlen_q; (void)seqlen_k;

  for (int d = lane; d < FJ_DQK; d += 32)
    q_s[warp * FJ_DQK + d] = active
        ? fj_to_float(q[b * dims.q_stride[0] + h * dims.q_stride[1] +
                        i * dims.q_stride[2] + d * dims.q_stride[3]])
        : 0.0f;
  const long long k_base = b * dims.k_stride[0] + hk * dims.k_stride[1];
  const long long v_base = b * dims.v_stride[0] + hk * dims.v_stride[1];

  float m = FJ_NEG_INF, l = 0.0f, acc[FJ_VPL];
#pragma unroll
  for (int t = 0; t < FJ_VPL; ++t)
    acc[t] = 0.0f;

  for (long long j0 = 0; j0 < dims.seqlen_k; j0 += FJ_KEYS) {
    __syncthreads(); // q_s written; the previous tile consumed
    for (int e = threadIdx.x; e < FJ_KEYS * FJ_DQK; e += blockDim.x) {
      const int r = e / FJ_DQK, d = e - r * FJ_DQK;
      const long long j = j0 + r;
      k_s[r * FJ_KSTRIDE + d] = j < dims.seqlen_k
          ? fj_to_float(k[k_base + j * dims.k_stride[2] + d * dims.k_stride[3]])
          : 0.0f;
    }
    for (int e = threadIdx.x; e < FJ_KEYS * FJ_DV; e += blockDim.x) {
      const int r = e / FJ_DV, d = e - r * FJ_DV;
      const long long j = j0 + r;
      v_s[r * FJ_DV + d] = j < dims.seqlen_k
          ? fj_to_float(v[v_base + j * dims.v_stride[2] + d * dims.v_stride[3]])
          : 0.0f;
    }
    __syncthreads();
    if (!active)
      continue; // keep looping: the barriers above need every warp

    // Lane r scores key j0 + r: -inf when masked, out of range, or when the
    // modified score is -inf (such keys carry no weight).
    const long long j = j0 + lane;
    float s = FJ_NEG_INF;
    if (j < dims.seqlen_k) {
      const int kv_idx = (int)j;
      (void)kv_idx;
      if ({{MASK}}) {
        float dot = 0.0f;
        for (int d = 0; d < FJ_DQK; ++d)
          dot = fmaf(q_s[warp * FJ_DQK + d], k_s[lane * FJ_KSTRIDE + d], dot);
        const float score = fj_scale * dot;
        (void)score;
        s = {{SCORE}};
      }
    }
    float tile_max = s;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      tile_max = fmaxf(tile_max, __shfl_xor_sync(FJ_FULL, tile_max, off));
    const float m_new = fmaxf(m, tile_max);
    if (m_new == FJ_NEG_INF)
      continue; // no key has contributed yet
    const float alpha = expf(m - m_new); // 0 while m is -inf
    const float p = s == FJ_NEG_INF ? 0.0f : expf(s - m_new);
    float p_sum = p;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      p_sum += __shfl_xor_sync(FJ_FULL, p_sum, off);
    l = l * alpha + p_sum;
#pragma unroll
    for (int t = 0; t < FJ_VPL; ++t)
      acc[t] *= alpha;
    for (int r = 0; r < FJ_KEYS; ++r) {
      const float p_r = __shfl_sync(FJ_FULL, p, r);
#pragma unroll
      for (int t = 0; t < FJ_VPL; ++t) {
        const int d = lane + 32 * t;
        if (d < FJ_DV)
          acc[t] = fmaf(p_r, v_s[r * FJ_DV + d], acc[t]);
      }
    }
    m = m_new;
  }
  if (!active)
    return;
  // l >= 1 once any key contributed (its own term is exp(0)).
  const bool empty = l == 0.0f;
  const float inv_l = empty ? 0.0f : 1.0f / l;
  const long long o_row = b * dims.o_stride[0] + h * dims.o_stride[1] +
                          i * dims.o_stride[2];
#pragma unroll
  for (int t = 0; t < FJ_VPL; ++t) {
    const int d = lane + 32 * t;
    if (d < FJ_DV)
      fj_store(&o[o_row + d * dims.o_stride[3]], empty ? 0.0f : acc[t] * inv_l);
  }
  if (lse != nullptr && lane == 0)
    lse[b * dims.lse_stride[0] + h * dims.lse_stride[1] +
        i * dims.lse_stride[2]] = empty ? FJ_NEG_INF : m + logf(l);
}
)CUDA";

void replaceAll(std::string &s, std::string_view key, std::string_view value) {
  for (size_t at = s.find(key); at != std::string::npos;
       at = s.find(key, at + value.size()))
    s.replace(at, key.size(), value);
}

/// A comment-safe one-line rendering of canonical text.
std::string commentText(const Expr &e) {
  std::string t = printExpr(e);
  replaceAll(t, "*/", "* /");
  replaceAll(t, "\n", " ");
  return t;
}

} // namespace

ReferenceKernelSource generateReferenceKernel(const AttentionSpec &spec) {
  spec.validate();
  for (auto [field, value] : {std::pair{"head_dim_qk", spec.headDimQK},
                              std::pair{"head_dim_v", spec.headDimV}})
    if (value > kReferenceMaxHeadDim)
      throw UserError(fmt::format("{} = {}: the NVRTC reference supports head "
                                  "dims up to {}",
                                  field, value, kReferenceMaxHeadDim),
                      std::source_location());

  const Variant &variant = spec.variant;
  CudaNames names;
  for (const BufferDecl &b : variant.buffers())
    names.bufferIds.push_back(b.name);

  std::string extra;
  for (const ParamDecl &p : variant.params())
    extra += fmt::format(",\n    const {} {}{}", cudaTypeName(p.type),
                         names.paramPrefix, p.name);
  for (const BufferDecl &b : variant.buffers())
    extra += fmt::format(",\n    const {} *__restrict__ {}{}, const long long "
                         "{}{}_size",
                         cudaTypeName(b.elementType), names.bufferPrefix,
                         b.name, names.bufferPrefix, b.name);

  ReferenceKernelSource out;
  out.kernelName = "fj_reference_" + variant.name();
  out.rowsPerBlock = kRowsPerBlock;
  out.keysPerTile = kKeysPerTile;
  out.threadsPerBlock = 32 * kRowsPerBlock;
  out.dynamicSharedBytes =
      4 * (kRowsPerBlock * spec.headDimQK +
           kKeysPerTile * (spec.headDimQK + 1) + kKeysPerTile * spec.headDimV);

  const Expr mask = spec.effectiveMask();
  std::string body(kKernelTemplate);
  replaceAll(body, "{{DQK}}", std::to_string(spec.headDimQK));
  replaceAll(body, "{{DV}}", std::to_string(spec.headDimV));
  replaceAll(body, "{{ROWS}}", std::to_string(kRowsPerBlock));
  replaceAll(body, "{{KEYS}}", std::to_string(kKeysPerTile));
  replaceAll(body, "{{MASK_TEXT}}", commentText(mask));
  replaceAll(body, "{{SCORE_TEXT}}", commentText(variant.scoreExpr()));
  replaceAll(body, "{{KERNEL}}", out.kernelName);
  replaceAll(body, "{{TQ}}", elementType(spec.dtypeQ));
  replaceAll(body, "{{TK}}", elementType(spec.dtypeK));
  replaceAll(body, "{{TV}}", elementType(spec.dtypeV));
  replaceAll(body, "{{TO}}", elementType(spec.dtypeO));
  replaceAll(
      body, "{{SCALE}}",
      printCudaExpr(constant(ScalarType::Float32, 0, spec.effectiveScale(),
                             std::source_location())));
  replaceAll(body, "{{EXTRA_PARAMS}}", extra);
  replaceAll(body, "{{MASK}}", printCudaExpr(mask, names));
  replaceAll(body, "{{SCORE}}", printCudaExpr(variant.scoreExpr(), names));

  out.source =
      fmt::format("// flashjit NVRTC reference kernel for variant "
                  "'{}' (generated; see "
                  "runtime/include/flashjit/runtime/"
                  "NvrtcReference.h)\n"
                  "// spec: {}\n"
                  "#include <cuda_fp16.h>\n"
                  "#include <cuda_bf16.h>\n\n{}{}",
                  variant.name(), printSpec(spec), cudaPrelude(), body);
  return out;
}

} // namespace flashjit::runtime
