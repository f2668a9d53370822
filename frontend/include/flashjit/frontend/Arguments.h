//===- Arguments.h - Run-time parameter values and buffers -------*- C++
//-*-===//
//
// The values a variant's runtime parameters take and the buffers it reads,
// supplied per call (never part of the compiled kernel).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_ARGUMENTS_H
#define FLASHJIT_FRONTEND_ARGUMENTS_H

#include "flashjit/frontend/Types.h"

#include <cstdint>
#include <map>
#include <string>

namespace flashjit {

class Variant;
struct AttentionSpec;
struct TensorRef;

/// A typed scalar value (i32, i64 or f32).
struct Scalar {
  ScalarType type = ScalarType::Float32;
  /// The value of an i32 or i64 scalar. An i32 scalar keeps the value it was
  /// given, unwrapped: Arguments::validateFor rejects one outside the i32
  /// range, naming the parameter, instead of running with it wrapped.
  int64_t intValue = 0;
  float floatValue = 0.0f;
  /// An i32 value; one outside [-2^31, 2^31 - 1] fails validateFor.
  static Scalar i32(int64_t v) { return {ScalarType::Int32, v, 0.0f}; }
  static Scalar i64(int64_t v) { return {ScalarType::Int64, v, 0.0f}; }
  /// An f32 value. Throws UserError for a finite \p v that overflows f32
  /// (it would round to inf); inf and NaN are kept as given.
  static Scalar f32(double v);
};

/// Whether the finite double \p v overflows f32 (rounds to +-inf).
bool overflowsF32(double v);

/// A 1-D buffer in host memory (CPU backend, reference) or device memory
/// (GPU backend): \p size elements of \p elementType at \p data.
struct BufferRef {
  const void *data = nullptr;
  ScalarType elementType = ScalarType::Int32;
  int64_t size = 0;
};

/// Parameter values and buffers for one call, by name (a value type; buffers
struct Arguments { // are referenced: keep them alive, unchanged, while read)
  std::map<std::string, Scalar> params;
  std::map<std::string, BufferRef> buffers;

  /// Sets a parameter (chainable).
  Arguments &set(const std::string &name, Scalar value) {
    params[name] = value;
    return *this;
  }
  /// Binds a buffer of \p size elements (chainable).
  Arguments &bind(const std::string &name, const int32_t *data, int64_t size) {
    buffers[name] = {data, ScalarType::Int32, size};
    return *this;
  }
  Arguments &bind(const std::string &name, const int64_t *data, int64_t size) {
    buffers[name] = {data, ScalarType::Int64, size};
    return *this;
  }
  Arguments &bind(const std::string &name, const float *data, int64_t size) {
    buffers[name] = {data, ScalarType::Float32, size};
    return *this;
  }

  /// The attention sink of a spec with AttentionSpec::sink: fp32
  /// [heads_q], one logit per query head (host memory for the CPU backend
  /// and the reference, device memory for the GPU). Unset (null data, size
  /// 0) otherwise.
  BufferRef sink;
  /// Binds the sink: \p size fp32 logits, one per query head (chainable).
  Arguments &bindSink(const float *data, int64_t size) {
    sink = {data, ScalarType::Float32, size};
    return *this;
  }

  /// FP8 descale factors of Q, K and V (FlashAttention-3's q_descale,
  /// k_descale, v_descale: flash_attn_interface.py; FA3 paper, Shah et al.
  /// 2024, section 3.3): the real value of an fp8 element x is
  /// float(x) * descale, so scores are scale * q_descale * k_descale *
  /// (q_fp8 . k_fp8) and O = v_descale * sum_j P_ij v_fp8[j]. Each is fp32,
  /// either one element (per tensor) or [batch, heads_kv] row-major (per
  /// block, FA3's shape, for Q too: query head h uses descale[b, h /
  /// (heads_q / heads_kv)]); unset (null data, size 0) means 1. Only
  /// tensors whose spec dtype is fp8 (e4m3, e5m2) take one. Host memory for
  /// the CPU backend and the reference.
  BufferRef qDescale, kDescale, vDescale;
  /// Binds q_descale: 1 or batch * heads_kv fp32 values (chainable).
  Arguments &bindQDescale(const float *data, int64_t size) {
    qDescale = {data, ScalarType::Float32, size};
    return *this;
  }
  /// Binds k_descale: 1 or batch * heads_kv fp32 values (chainable).
  Arguments &bindKDescale(const float *data, int64_t size) {
    kDescale = {data, ScalarType::Float32, size};
    return *this;
  }
  /// Binds v_descale: 1 or batch * heads_kv fp32 values (chainable).
  Arguments &bindVDescale(const float *data, int64_t size) {
    vDescale = {data, ScalarType::Float32, size};
    return *this;
  }

  /// Checks the descales against \p spec for a call of \p batch
  /// sequences: each set one must belong to an fp8 tensor, be f32 with
  /// non-null data and hold 1 or batch * heads_kv elements; with
  /// \p hostValues each value must be finite. Throws UserError naming the
  /// field and value (`k_descale[3] = inf`).
  void validateDescalesFor(const AttentionSpec &spec, int64_t batch,
                           bool hostValues) const;

  /// Checks these arguments against what \p variant reads: throws UserError
  /// for a missing, unknown or wrongly typed parameter or buffer, a name
  /// given both as a parameter and as a buffer, a buffer given a scalar (or
  /// a parameter a buffer), an i32 value outside the i32 range, a negative
  /// size, or a null buffer of non-zero size.
  void validateFor(const Variant &variant) const;

  /// Checks the sink against \p spec: a spec with a sink needs one of
  /// exactly heads_q fp32 elements with non-null data; a spec without one
  /// must not be given one. With \p hostValues (the sink is host memory:
  /// CPU backend, reference) also its values: each must be finite or -inf
  /// (no sink for that head); NaN and +inf are rejected (+inf would take
  /// every row's whole probability mass and give LSE = +inf). Throws
  /// UserError naming the field and value (`sink[2] = nan`).
  void validateSinkFor(const AttentionSpec &spec, bool hostValues) const;

  /// The forward's aliasing rule for its run-time inputs: \p o and \p lse
  /// (when not null) overlap none of the bound buffers, the sink or the
  /// descales, each an input the kernel reads while it writes them (a
  /// buffer over O would change the mask or score of rows not yet written).
  /// Throws UserError naming both and their byte ranges
  /// (checkOutputsDisjoint). Call after validateFor (sizes >= 0).
  void checkNotOverwrittenBy(const TensorRef &o, const TensorRef *lse) const;
};

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_ARGUMENTS_H
