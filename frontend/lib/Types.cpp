//===- Types.cpp - Scalar types, dtypes and float conversions -------------===//
#include "flashjit/frontend/Types.h"

#include "flashjit/frontend/Error.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace flashjit {

std::string_view toString(ScalarType type) {
  switch (type) {
  case ScalarType::Bool:
    return "bool";
  case ScalarType::Int32:
    return "i32";
  case ScalarType::Int64:
    return "i64";
  case ScalarType::Float32:
    return "f32";
  }
  throw InternalError("unknown ScalarType");
}

std::optional<ScalarType> parseScalarType(std::string_view text) {
  for (ScalarType t : {ScalarType::Bool, ScalarType::Int32, ScalarType::Int64,
                       ScalarType::Float32})
    if (toString(t) == text)
      return t;
  return std::nullopt;
}

std::string_view toString(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return "fp16";
  case DType::BF16:
    return "bf16";
  case DType::F32:
    return "fp32";
  }
  throw InternalError("unknown DType");
}

std::optional<DType> parseDType(std::string_view text) {
  if (text == "fp16" || text == "f16" || text == "float16" || text == "half")
    return DType::F16;
  if (text == "bf16" || text == "bfloat16")
    return DType::BF16;
  if (text == "fp32" || text == "f32" || text == "float32" || text == "float")
    return DType::F32;
  return std::nullopt;
}

int byteSize(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  float magnitude;
  if (exp == 0)
    magnitude = std::ldexp(static_cast<float>(mant), -24); // subnormal / 0
  else if (exp == 31)
    magnitude = mant ? std::numeric_limits<float>::quiet_NaN()
                     : std::numeric_limits<float>::infinity();
  else
    magnitude = std::ldexp(static_cast<float>(mant | 0x400u),
                           static_cast<int>(exp) - 25);
  uint32_t bits = std::bit_cast<uint32_t>(magnitude) | sign;
  return std::bit_cast<float>(bits);
}

uint16_t floatToHalf(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  float a = std::fabs(value);
  if (std::isnan(value))
    return sign | 0x7e00u;
  if (a >= 65520.0f) // rounds to inf
    return sign | 0x7c00u;
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal half: value / 2^-24 rounded to nearest even integer.
    float scaled = a * std::ldexp(1.0f, 24);
    auto m = static_cast<uint32_t>(std::nearbyint(scaled));
    return sign | static_cast<uint16_t>(m);
  }
  uint32_t ax = std::bit_cast<uint32_t>(a);
  uint32_t exp = ((ax >> 23) & 0xffu) - 127 + 15;
  uint32_t mant = ax & 0x7fffffu;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
    ++half; // may carry into the exponent, which is correct
  return sign | static_cast<uint16_t>(half);
}

float bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t floatToBf16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  if (std::isnan(value))
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float loadAsFloat(const void *data, DType dtype, int64_t index) {
  switch (dtype) {
  case DType::F16:
    return halfToFloat(static_cast<const uint16_t *>(data)[index]);
  case DType::BF16:
    return bf16ToFloat(static_cast<const uint16_t *>(data)[index]);
  case DType::F32:
    return static_cast<const float *>(data)[index];
  }
  throw InternalError("unknown DType");
}

void storeFromFloat(void *data, DType dtype, int64_t index, float value) {
  switch (dtype) {
  case DType::F16:
    static_cast<uint16_t *>(data)[index] = floatToHalf(value);
    return;
  case DType::BF16:
    static_cast<uint16_t *>(data)[index] = floatToBf16(value);
    return;
  case DType::F32:
    static_cast<float *>(data)[index] = value;
    return;
  }
  throw InternalError("unknown DType");
}

} // namespace flashjit
