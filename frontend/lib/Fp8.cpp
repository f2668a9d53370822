//===- Fp8.cpp - FP8 quantisation with per-tensor or per-block scales -----===//
//
// Host loops over the (batch, head) blocks of a 4-D or packed varlen tensor:
// amax per block, then round to nearest even into fp8 (Types.cpp's exact
// conversions); and back to f32 with the block's descale.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Fp8.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace flashjit {
namespace {

/// The (batch, head, token, dim) structure of a 4-D or varlen tensor.
struct Blocks {
  const TensorRef &x;
  std::span<const int32_t> cu;
  int64_t batch, heads, dim, seqlen; // seqlen: 4-D only

  bool varlen() const { return !cu.empty(); }
  int64_t tokenBegin(int64_t b) const { return varlen() ? cu[b] : 0; }
  int64_t tokenEnd(int64_t b) const { return varlen() ? cu[b + 1] : seqlen; }
  /// Offset in x and index in the contiguous copy of element (b, h, t, d).
  int64_t src(int64_t b, int64_t h, int64_t t, int64_t d) const {
    return varlen() ? x.offset(t, h, d) : x.offset(b, h, t, d);
  }
  int64_t dst(int64_t b, int64_t h, int64_t t, int64_t d) const {
    return varlen() ? (t * heads + h) * dim + d
                    : ((b * heads + h) * seqlen + t) * dim + d;
  }
  /// Calls f(b, h, src, dst) for every element, block by block.
  template <class F> void forEach(F f) const {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = tokenBegin(b); t < tokenEnd(b); ++t)
          for (int64_t d = 0; d < dim; ++d)
            f(b, h, src(b, h, t, d), dst(b, h, t, d));
  }
};

Blocks blocksOf(const TensorRef &x, std::span<const int32_t> cu,
                const char *what) {
  const int want = cu.empty() ? 4 : 3;
  if (x.rank != want)
    throw UserError(fmt::format("{}: x.rank = {}, expected {} ({})", what,
                                x.rank, want,
                                cu.empty() ? "[batch, heads, seqlen, dim]"
                                           : "varlen [total, heads, dim]"));
  for (int i = 0; i < want; ++i)
    if (x.shape[i] < 0)
      throw UserError(fmt::format("{}: x.shape[{}] = {} must be >= 0", what, i,
                                  x.shape[i]));
  if (x.numel() > 0 && !x.data)
    throw UserError(fmt::format("{}: x has {} elements but a null data "
                                "pointer",
                                what, x.numel()));
  if (cu.empty())
    return {x, cu, x.shape[0], x.shape[1], x.shape[3], x.shape[2]};
  checkCuSeqlens("cu_seqlens", cu, x.shape[0]);
  return {x,          cu,         static_cast<int64_t>(cu.size()) - 1,
          x.shape[1], x.shape[2], 0};
}

TensorRef contiguousLike(const TensorRef &x, void *data, DType dtype) {
  if (x.rank == 4)
    return TensorRef::contiguous(data, dtype, x.shape);
  return TensorRef::contiguous3(data, dtype,
                                {x.shape[0], x.shape[1], x.shape[2]});
}

} // namespace

double descaleAt(const BufferRef &descale, int64_t b, int64_t hkv,
                 int64_t headsKV) {
  if (!descale.data || descale.size == 0)
    return 1.0;
  const float *d = static_cast<const float *>(descale.data);
  return descale.size == 1 ? d[0] : d[b * headsKV + hkv];
}

Fp8Tensor quantizeFp8(const TensorRef &x, DType fp8, Fp8Scaling scaling,
                      int64_t headGroup, std::span<const int32_t> cuSeqlens) {
  if (!isFp8(fp8))
    throw UserError(fmt::format("quantizeFp8: dtype = {} is not fp8 (e4m3 or "
                                "e5m2)",
                                toString(fp8)));
  if (isFp8(x.dtype))
    throw UserError(fmt::format("quantizeFp8: x.dtype = {} is already fp8",
                                toString(x.dtype)));
  Blocks bl = blocksOf(x, cuSeqlens, "quantizeFp8");
  if (headGroup < 1 || bl.heads % headGroup != 0)
    throw UserError(fmt::format("quantizeFp8: headGroup = {} must divide "
                                "heads = {}",
                                headGroup, bl.heads));
  const int64_t groups = bl.heads / headGroup;
  auto block = [&](int64_t b, int64_t h) {
    return scaling == Fp8Scaling::PerTensor ? 0 : b * groups + h / headGroup;
  };
  std::vector<float> amax(
      scaling == Fp8Scaling::PerTensor ? 1 : bl.batch * groups, 0.0f);
  bl.forEach([&](int64_t b, int64_t h, int64_t s, int64_t) {
    float v = loadAsFloat(x.data, x.dtype, s);
    if (!std::isfinite(v))
      throw UserError(fmt::format("quantizeFp8: x[batch {}, head {}] element "
                                  "at offset {} is {} (must be finite)",
                                  b, h, s, v));
    amax[block(b, h)] = std::max(amax[block(b, h)], std::fabs(v));
  });
  Fp8Tensor out;
  // At least the smallest normal f32: amax / fp8_max underflows to 0 (or
  // to a subnormal that rounds below it) for a block of values below about
  // 5e-36, which made 0 / 0 = NaN codes and x / descale past the format's
  // largest value; FLT_MIN keeps |x| / descale <= fp8_max (the codes then
  // use less of the format: an error of at most half a step times FLT_MIN).
  out.descale.resize(amax.size());
  for (size_t i = 0; i < amax.size(); ++i)
    out.descale[i] = amax[i] > 0.0f
                         ? std::max(amax[i] / fp8MaxFinite(fp8),
                                    std::numeric_limits<float>::min())
                         : 1.0f;
  out.data.assign(static_cast<size_t>(std::max<int64_t>(x.numel(), 1)), 0);
  bl.forEach([&](int64_t b, int64_t h, int64_t s, int64_t d) {
    float v = loadAsFloat(x.data, x.dtype, s) / out.descale[block(b, h)];
    out.data[d] = fp8 == DType::E4M3 ? floatToE4M3Sat(v) : floatToE5M2Sat(v);
  });
  out.ref = contiguousLike(x, out.data.data(), fp8);
  return out;
}

DequantizedTensor dequantizeFp8(const TensorRef &x, const BufferRef &descale,
                                int64_t headsKV,
                                std::span<const int32_t> cuSeqlens) {
  if (!isFp8(x.dtype))
    throw UserError(fmt::format("dequantizeFp8: x.dtype = {} is not fp8",
                                toString(x.dtype)));
  Blocks bl = blocksOf(x, cuSeqlens, "dequantizeFp8");
  if (headsKV < 1 || bl.heads % headsKV != 0)
    throw UserError(fmt::format("dequantizeFp8: heads_kv = {} must divide "
                                "heads = {}",
                                headsKV, bl.heads));
  const int64_t group = bl.heads / headsKV;
  // descaleAt reads element 0 or b * heads_kv + h_kv: a bound descale must
  // hold one f32 or one per block.
  if (descale.data && descale.size != 0) {
    if (descale.elementType != ScalarType::Float32)
      throw UserError(fmt::format("dequantizeFp8: descale has element type "
                                  "{}; it must be f32",
                                  toString(descale.elementType)));
    if (descale.size != 1 && descale.size != bl.batch * headsKV)
      throw UserError(fmt::format(
          "dequantizeFp8: descale has {} elements; it takes 1 (per tensor) "
          "or batch * heads_kv = {} (per block)",
          descale.size, bl.batch * headsKV));
  }
  DequantizedTensor out;
  out.data.assign(static_cast<size_t>(std::max<int64_t>(x.numel(), 1)), 0.0f);
  bl.forEach([&](int64_t b, int64_t h, int64_t s, int64_t d) {
    out.data[d] = static_cast<float>(double(loadAsFloat(x.data, x.dtype, s)) *
                                     descaleAt(descale, b, h / group, headsKV));
  });
  out.ref = contiguousLike(x, out.data.data(), DType::F32);
  return out;
}

void rejectFp8(const AttentionSpec &spec, const char *what) {
  if (hasFp8Inputs(spec))
    throw UserError(fmt::format("dtypes q/k/v = {}/{}/{}: {} does not take "
                                "fp8 inputs (the forward does: CPU backend "
                                "and reference)",
                                toString(spec.dtypeQ), toString(spec.dtypeK),
                                toString(spec.dtypeV), what));
}

AttentionSpec fp8ComputeSpec(const AttentionSpec &spec) {
  AttentionSpec s = spec;
  for (DType *t : {&s.dtypeQ, &s.dtypeK, &s.dtypeV})
    if (isFp8(*t))
      *t = DType::F32;
  return s;
}

DequantizedInputs dequantizeInputs(const AttentionSpec &spec,
                                   const TensorRef &q, const TensorRef &k,
                                   const TensorRef &v, const Arguments &args,
                                   int64_t batch,
                                   std::span<const int32_t> cuSeqlensQ,
                                   std::span<const int32_t> cuSeqlensK) {
  args.validateDescalesFor(spec, batch, /*hostValues=*/true);
  DequantizedInputs in{{}, {}, {}, q, k, v};
  auto one = [&](const TensorRef &x, const BufferRef &d,
                 std::span<const int32_t> cu, DequantizedTensor &store,
                 TensorRef &view) {
    if (!isFp8(x.dtype))
      return;
    store = dequantizeFp8(x, d, spec.headsKV, cu);
    view = store.ref;
  };
  one(q, args.qDescale, cuSeqlensQ, in.qStore, in.q);
  one(k, args.kDescale, cuSeqlensK, in.kStore, in.k);
  one(v, args.vDescale, cuSeqlensK, in.vStore, in.v);
  return in;
}

} // namespace flashjit
