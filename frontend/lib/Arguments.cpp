//===- Arguments.cpp - Checking run-time arguments against a variant ------===//
#include "flashjit/frontend/Arguments.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace flashjit {

bool overflowsF32(double v) {
  // The midpoint between FLT_MAX and 2^128 and everything above it rounds to
  // inf (FLT_MAX's significand is odd, so the tie goes up too).
  constexpr double kOverflow = 0x1.ffffffp+127;
  return std::isfinite(v) && std::fabs(v) >= kOverflow;
}

Scalar Scalar::f32(double v) {
  if (overflowsF32(v))
    throw UserError(fmt::format("f32 value {} overflows f32 (largest finite "
                                "magnitude {})",
                                v, std::numeric_limits<float>::max()));
  return {ScalarType::Float32, 0, static_cast<float>(v)};
}

void Arguments::validateFor(const Variant &variant) const {
  std::vector<ParamDecl> wantParams = variant.params();
  std::vector<BufferDecl> wantBuffers = variant.buffers();
  auto declaredParam = [&](const std::string &name) -> const ParamDecl * {
    for (const ParamDecl &p : wantParams)
      if (p.name == name)
        return &p;
    return nullptr;
  };
  auto declaredBuffer = [&](const std::string &name) -> const BufferDecl * {
    for (const BufferDecl &b : wantBuffers)
      if (b.name == name)
        return &b;
    return nullptr;
  };
  // A name given twice, or given as the wrong kind, before "missing" and
  // "unknown": those would name the symptom, not the mistake.
  for (const auto &[name, value] : params)
    if (buffers.count(name))
      throw UserError(fmt::format("'{}' is given twice, as a parameter and as "
                                  "a buffer; give it once",
                                  name));
  for (const auto &[name, value] : params)
    if (const BufferDecl *b = declaredBuffer(name); b && !declaredParam(name))
      throw UserError(fmt::format("'{}' is a buffer ({} elements) of variant "
                                  "'{}' but was given a scalar {} value; bind "
                                  "a buffer to it",
                                  name, toString(b->elementType),
                                  variant.name(), toString(value.type)));
  for (const auto &[name, ref] : buffers)
    if (const ParamDecl *p = declaredParam(name); p && !declaredBuffer(name))
      throw UserError(fmt::format("'{}' is a parameter ({}) of variant '{}' "
                                  "but was given a buffer; set a scalar value",
                                  name, toString(p->type), variant.name()));
  for (const ParamDecl &p : wantParams) {
    auto it = params.find(p.name);
    if (it == params.end())
      throw UserError(fmt::format("missing value for parameter '{}' ({}) of "
                                  "variant '{}'",
                                  p.name, toString(p.type), variant.name()));
    if (it->second.type != p.type)
      throw UserError(fmt::format("parameter '{}' is {} but was given a {} "
                                  "value",
                                  p.name, toString(p.type),
                                  toString(it->second.type)));
    constexpr int64_t kMin = std::numeric_limits<int32_t>::min();
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    int64_t value = it->second.intValue;
    if (p.type == ScalarType::Int32 && (value < kMin || value > kMax))
      throw UserError(fmt::format("parameter '{}' is i32 but was given {}, "
                                  "outside [{}, {}] (declare it int64_t for "
                                  "wider values)",
                                  p.name, value, kMin, kMax));
  }
  for (const auto &[name, value] : params) {
    bool known = false;
    for (const ParamDecl &p : wantParams)
      known |= p.name == name;
    if (!known)
      throw UserError(fmt::format("unknown parameter '{}': variant '{}' reads "
                                  "no such parameter",
                                  excerpt(name), variant.name()));
  }
  for (const BufferDecl &b : wantBuffers) {
    auto it = buffers.find(b.name);
    if (it == buffers.end())
      throw UserError(fmt::format("missing buffer '{}' ({}) of variant '{}'",
                                  b.name, toString(b.elementType),
                                  variant.name()));
    const BufferRef &ref = it->second;
    if (ref.elementType != b.elementType)
      throw UserError(fmt::format("buffer '{}' holds {} but was given {} data",
                                  b.name, toString(b.elementType),
                                  toString(ref.elementType)));
    if (ref.size < 0)
      throw UserError(
          fmt::format("buffer '{}' has size {} < 0", b.name, ref.size));
    if (ref.size > 0 && !ref.data)
      throw UserError(fmt::format("buffer '{}' has size {} but a null data "
                                  "pointer",
                                  b.name, ref.size));
  }
  for (const auto &[name, ref] : buffers) {
    bool known = false;
    for (const BufferDecl &b : wantBuffers)
      known |= b.name == name;
    if (!known)
      throw UserError(fmt::format("unknown buffer '{}': variant '{}' reads no "
                                  "such buffer",
                                  excerpt(name), variant.name()));
  }
}

void Arguments::validateSinkFor(const AttentionSpec &spec,
                                bool hostValues) const {
  if (!spec.sink) {
    if (sink.data || sink.size != 0)
      throw UserError(fmt::format("a sink of {} elements was given, but spec "
                                  "'{}' declares no sink (set sink = true in "
                                  "the spec)",
                                  sink.size, spec.variant.name()));
    return;
  }
  if (!sink.data && sink.size == 0)
    throw UserError(fmt::format("spec '{}' declares a sink, but none was "
                                "given (bind sink[heads_q = {}], fp32)",
                                spec.variant.name(), spec.headsQ));
  if (sink.elementType != ScalarType::Float32)
    throw UserError(fmt::format("sink holds {} but must be f32 (one fp32 "
                                "logit per query head)",
                                toString(sink.elementType)));
  if (sink.size != spec.headsQ)
    throw UserError(fmt::format("sink has {} elements, expected heads_q = {} "
                                "(one logit per query head)",
                                sink.size, spec.headsQ));
  if (!sink.data && sink.size > 0)
    throw UserError(fmt::format("sink has {} elements but a null data "
                                "pointer",
                                sink.size));
  if (!hostValues)
    return;
  const float *v = static_cast<const float *>(sink.data);
  for (int64_t h = 0; h < sink.size; ++h)
    if (std::isnan(v[h]) || v[h] == std::numeric_limits<float>::infinity())
      throw UserError(fmt::format("sink[{}] = {}: a sink must be finite or "
                                  "-inf (no sink for that head)",
                                  h, v[h]));
}

namespace {

void validateDescale(const char *field, const BufferRef &d, DType dtype,
                     int64_t blocks, bool hostValues) {
  if (!d.data && d.size == 0)
    return;
  if (!isFp8(dtype))
    throw UserError(fmt::format("{} was given, but the tensor's dtype is {} "
                                "(descales belong to fp8 tensors: e4m3, "
                                "e5m2)",
                                field, toString(dtype)));
  if (d.elementType != ScalarType::Float32)
    throw UserError(fmt::format("{} holds {} but must be f32", field,
                                toString(d.elementType)));
  if (d.size != 1 && d.size != blocks)
    throw UserError(fmt::format("{} has {} elements, expected 1 (per tensor) "
                                "or batch * heads_kv = {} (per block)",
                                field, d.size, blocks));
  if (!d.data)
    throw UserError(fmt::format("{} has {} elements but a null data pointer",
                                field, d.size));
  if (!hostValues)
    return;
  const float *v = static_cast<const float *>(d.data);
  for (int64_t i = 0; i < d.size; ++i)
    if (!std::isfinite(v[i]))
      throw UserError(
          fmt::format("{}[{}] = {}: descales must be finite", field, i, v[i]));
}

} // namespace

void Arguments::validateDescalesFor(const AttentionSpec &spec, int64_t batch,
                                    bool hostValues) const {
  const int64_t blocks = batch * spec.headsKV;
  validateDescale("q_descale", qDescale, spec.dtypeQ, blocks, hostValues);
  validateDescale("k_descale", kDescale, spec.dtypeK, blocks, hostValues);
  validateDescale("v_descale", vDescale, spec.dtypeV, blocks, hostValues);
}

void Arguments::checkNotOverwrittenBy(const TensorRef &o,
                                      const TensorRef *lse) const {
  // The bytes of a buffer of `size` elements, capped where they would pass
  // the end of the address space (a size claimed larger than memory).
  auto region = [](std::string name, const BufferRef &b) {
    uint64_t elt = b.elementType == ScalarType::Int64 ? 8 : 4;
    uint64_t room = std::numeric_limits<uintptr_t>::max() -
                    reinterpret_cast<uintptr_t>(b.data);
    uint64_t n = b.size > 0 ? uint64_t(b.size) : 0;
    uint64_t bytes = n > room / elt ? room : n * elt;
    return memoryOf(std::move(name), b.data, bytes);
  };
  std::vector<MemoryRegion> ins;
  for (const auto &[name, b] : buffers)
    ins.push_back(region(fmt::format("buffer '{}'", excerpt(name)), b));
  for (auto [name, b] :
       {std::pair{"sink", &sink}, std::pair{"q_descale", &qDescale},
        std::pair{"k_descale", &kDescale}, std::pair{"v_descale", &vDescale}})
    ins.push_back(region(name, *b));
  std::vector<MemoryRegion> outs{memoryOf("o", o)};
  if (lse)
    outs.push_back(memoryOf("lse", *lse));
  checkOutputsDisjoint(outs, ins);
}

} // namespace flashjit
