//===- Arguments.cpp - Checking run-time arguments against a variant ------===//
#include "flashjit/frontend/Arguments.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Variant.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

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

} // namespace flashjit
