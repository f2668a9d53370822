//===- Types.cpp - Scalar types, dtypes and float conversions -------------===//
#include "flashjit/frontend/Types.h"

#include "flashjit/frontend/Error.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

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
  case DType::E4M3:
    return "e4m3";
  case DType::E5M2:
    return "e5m2";
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
  if (text == "e4m3" || text == "float8_e4m3fn" || text == "fp8_e4m3")
    return DType::E4M3;
  if (text == "e5m2" || text == "float8_e5m2" || text == "fp8_e5m2")
    return DType::E5M2;
  return std::nullopt;
}

int byteSize(DType dtype) {
  return dtype == DType::F32 ? 4 : isFp8(dtype) ? 1 : 2;
}

float fp8MaxFinite(DType dtype) {
  if (dtype == DType::E4M3)
    return 448.0f;
  if (dtype == DType::E5M2)
    return 57344.0f;
  throw InternalError(
      fmt::format("fp8MaxFinite: {} is not fp8", toString(dtype)));
}

namespace {

/// An OCP fp8 format: mantissa bits, exponent bias, largest finite value,
/// and the codes of its NaN and (E5M2 only) infinity, without the sign.
struct Fp8Format {
  int mantBits, bias;
  double maxFinite;
  uint8_t nan, inf; // inf == nan: no infinity (E4M3)
};
constexpr Fp8Format kE4M3{3, 7, 448.0, 0x7f, 0x7f};
constexpr Fp8Format kE5M2{2, 15, 57344.0, 0x7f, 0x7c};

/// Decodes a magnitude code (no sign bit) of \p f; NaN/inf handled by
/// the callers.
double fp8Magnitude(const Fp8Format &f, uint8_t code) {
  int exp = code >> f.mantBits;
  int mant = code & ((1 << f.mantBits) - 1);
  if (exp == 0) // subnormal: mant * 2^(1 - bias - mantBits)
    return std::ldexp(double(mant), 1 - f.bias - f.mantBits);
  return std::ldexp(double(mant + (1 << f.mantBits)),
                    exp - f.bias - f.mantBits);
}

/// Round to nearest even onto \p f's grid; an out-of-range result gives
/// the format's max (\p saturate) or its inf/NaN code.
uint8_t encodeFp8(const Fp8Format &f, float value, bool saturate) {
  uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value))
    return sign | f.nan;
  double a = std::fabs(double(value));
  uint8_t maxCode = f.inf == f.nan ? uint8_t(f.nan - 1) : uint8_t(f.inf - 1);
  if (std::isinf(a))
    return sign | (saturate ? maxCode : f.inf);
  // The grid spacing at a: 2^(e - mantBits) with e = max(floor(log2 a),
  // 1 - bias) (subnormals share the smallest normal binade's spacing).
  int e = a == 0.0 ? 1 - f.bias : std::max(std::ilogb(a), 1 - f.bias);
  double quantum = std::ldexp(1.0, e - f.mantBits);
  double r = std::nearbyint(a / quantum) * quantum; // ties to even
  if (r > f.maxFinite)
    return sign | (saturate ? maxCode : f.inf);
  int re = r == 0.0 ? 1 - f.bias : std::max(std::ilogb(r), 1 - f.bias);
  bool normal = r >= std::ldexp(1.0, 1 - f.bias);
  int mant = int(r / std::ldexp(1.0, re - f.mantBits)) -
             (normal ? (1 << f.mantBits) : 0);
  int expField = normal ? re + f.bias : 0;
  return sign | uint8_t((expField << f.mantBits) | mant);
}

float decodeFp8(const Fp8Format &f, uint8_t bits) {
  uint8_t code = bits & 0x7f;
  double m;
  if (code == f.nan || (f.inf != f.nan && code > f.inf))
    m = std::numeric_limits<double>::quiet_NaN();
  else if (f.inf != f.nan && code == f.inf)
    m = std::numeric_limits<double>::infinity();
  else
    m = fp8Magnitude(f, code);
  return static_cast<float>(bits & 0x80 ? -m : m);
}

} // namespace

float e4m3ToFloat(uint8_t bits) { return decodeFp8(kE4M3, bits); }
uint8_t floatToE4M3(float value) { return encodeFp8(kE4M3, value, false); }
uint8_t floatToE4M3Sat(float value) { return encodeFp8(kE4M3, value, true); }
float e5m2ToFloat(uint8_t bits) { return decodeFp8(kE5M2, bits); }
uint8_t floatToE5M2(float value) { return encodeFp8(kE5M2, value, false); }
uint8_t floatToE5M2Sat(float value) { return encodeFp8(kE5M2, value, true); }

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
  case DType::E4M3:
    return e4m3ToFloat(static_cast<const uint8_t *>(data)[index]);
  case DType::E5M2:
    return e5m2ToFloat(static_cast<const uint8_t *>(data)[index]);
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
  case DType::E4M3:
    static_cast<uint8_t *>(data)[index] = floatToE4M3(value);
    return;
  case DType::E5M2:
    static_cast<uint8_t *>(data)[index] = floatToE5M2(value);
    return;
  }
  throw InternalError("unknown DType");
}

} // namespace flashjit
