//===- Fp8.h - FP8 quantisation with per-tensor or per-block scales -*- C++
//-*-===//
//
// Q, K and V may be stored in the OCP fp8 formats (DType::E4M3, E5M2) with
// fp32 descale factors, FlashAttention-3's scheme (Shah et al. 2024, section
// 3.3, "block quantization"): the real value of an element is float(x_fp8) *
// descale, one descale per tensor or per [batch, kv head] block. This header
// turns 16/32-bit tensors into that form (quantizeFp8) and back
// (dequantizeFp8, what the CPU backend does on load). No MLIR, no GPU.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_FP8_H
#define FLASHJIT_FRONTEND_FP8_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <cstdint>
#include <span>
#include <vector>

namespace flashjit {

/// How many descales a quantised tensor gets.
enum class Fp8Scaling : uint8_t {
  /// One descale for the whole tensor (amax over every element).
  PerTensor,
  /// One descale per [batch, kv head] block (FA3's descale shape).
  PerBlock
};

/// The descale of block (b, hkv) of \p descale (Arguments::qDescale
/// layout): 1 when unset, descale[0] when it has one element, else
/// descale[b * headsKV + hkv]. No checks (Arguments::validateDescalesFor).
double descaleAt(const BufferRef &descale, int64_t b, int64_t hkv,
                 int64_t headsKV);

/// An fp8 tensor with its descales, owning its storage.
struct Fp8Tensor {
  /// The fp8 codes, row-major in the input's logical shape.
  std::vector<uint8_t> data;
  /// 1 (per tensor) or [batch, heads / headGroup] row-major fp32 descales.
  std::vector<float> descale;
  /// A contiguous view of data with the input's shape and the fp8 dtype.
  TensorRef ref;
  /// descale as an Arguments::qDescale-style buffer.
  BufferRef descaleRef() const {
    return {descale.data(), ScalarType::Float32,
            static_cast<int64_t>(descale.size())};
  }
};

/// Quantises \p x to \p fp8 (E4M3 or E5M2): per scaling block, descale =
/// amax / fp8MaxFinite, at least the smallest normal f32 (blocks of values
/// below about 5e-36; 1 where the block is all zero) and each element
/// becomes the saturating round-to-nearest-even of x / descale (x / descale
/// is at most the format's max, so saturation only absorbs f32 rounding).
/// \p x is 4-D [batch, heads, seqlen, dim], or with \p cuSeqlens (batch + 1
/// entries) varlen 3-D [total, heads, dim]; any 16/32-bit dtype and
/// strides, host memory. A block is \p headGroup consecutive heads of one
/// batch (heads_q / heads_kv for Q, to give FA3's [batch, heads_kv] q
/// descale; 1 for K and V). Throws UserError for a non-fp8 \p fp8, an fp8
/// \p x, a bad rank, shape or cu_seqlens, a \p headGroup that does not
/// divide heads, or a non-finite element (naming its index).
Fp8Tensor quantizeFp8(const TensorRef &x, DType fp8, Fp8Scaling scaling,
                      int64_t headGroup = 1,
                      std::span<const int32_t> cuSeqlens = {});

/// An f32 tensor owning its storage.
struct DequantizedTensor {
  /// Row-major in the input's logical shape.
  std::vector<float> data;
  /// A contiguous view of data (dtype F32, the input's shape).
  TensorRef ref;
};

/// The f32 values float(x) * descale of an fp8 tensor (4-D [batch, heads,
/// seqlen, dim], or varlen [total, heads, dim] with \p cuSeqlens), head h
/// taking the descale of block (b, h / (heads / headsKV)) (descaleAt). The
/// product is rounded once to f32. An unbound \p descale (no data or size
/// 0) is 1. Throws UserError for a non-fp8 \p x, a bad rank, shape or
/// cu_seqlens, or a bound descale that is not f32 or holds neither 1 nor
/// batch * heads_kv elements; its values are checked by
/// Arguments::validateDescalesFor.
DequantizedTensor dequantizeFp8(const TensorRef &x, const BufferRef &descale,
                                int64_t headsKV,
                                std::span<const int32_t> cuSeqlens = {});

/// Whether any of Q, K, V of \p spec is stored in fp8.
inline bool hasFp8Inputs(const AttentionSpec &spec) {
  return isFp8(spec.dtypeQ) || isFp8(spec.dtypeK) || isFp8(spec.dtypeV);
}

/// Throws UserError if \p spec has fp8 inputs: \p what (e.g. "the
/// backward") does not take them yet. Names the dtypes.
void rejectFp8(const AttentionSpec &spec, const char *what);

/// \p spec with every fp8 input dtype replaced by F32: the spec of the
/// kernel the CPU backend compiles for an fp8 spec (it dequantises fp8
/// inputs to f32 on load, dequantizeInputs, and runs the f32 kernel).
AttentionSpec fp8ComputeSpec(const AttentionSpec &spec);

/// Q, K, V as an fp8ComputeSpec kernel reads them: each fp8 one
/// dequantised to a contiguous f32 copy with its descale from \p args
/// (dequantizeFp8), the others as given (views, no copy).
struct DequantizedInputs {
  DequantizedTensor qStore, kStore, vStore;
  TensorRef q, k, v;
};

/// Checks the descales of \p args for a call of \p batch sequences
/// (Arguments::validateDescalesFor with host values) and dequantises the
/// fp8 inputs of \p spec; q, k, v are 4-D, or varlen 3-D when
/// \p cuSeqlensQ / \p cuSeqlensK are given. Throws UserError as those do.
DequantizedInputs dequantizeInputs(const AttentionSpec &spec,
                                   const TensorRef &q, const TensorRef &k,
                                   const TensorRef &v, const Arguments &args,
                                   int64_t batch,
                                   std::span<const int32_t> cuSeqlensQ = {},
                                   std::span<const int32_t> cuSeqlensK = {});

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_FP8_H
