//===- TypesTest.cpp - Scalar types, dtypes, fp16/bf16 conversions --------===//
//
// Spellings round-trip; halfToFloat and bf16ToFloat agree with an
// independent decoder on all 65536 bit patterns; float -> half/bf16 rounds
// to nearest even, overflows to inf and keeps NaN.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Types.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>

using namespace flashjit;

namespace {

/// IEEE binary16 decoded from its definition.
double decodeHalf(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double magnitude;
  if (exponent == 31)
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN()
                         : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    magnitude = std::ldexp(mantissa, -24);
  else
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

} // namespace

TEST_CASE("types: spellings", "[frontend][types]") {
  for (ScalarType t : {ScalarType::Bool, ScalarType::Int32, ScalarType::Int64,
                       ScalarType::Float32})
    CHECK(parseScalarType(toString(t)) == t);
  CHECK(toString(ScalarType::Bool) == "bool");
  CHECK(toString(ScalarType::Int32) == "i32");
  CHECK(toString(ScalarType::Int64) == "i64");
  CHECK(toString(ScalarType::Float32) == "f32");
  CHECK(!parseScalarType("int"));
  CHECK(isInteger(ScalarType::Int64));
  CHECK(!isInteger(ScalarType::Float32));
  CHECK(!isNumeric(ScalarType::Bool));
  for (DType d : {DType::F16, DType::BF16, DType::F32})
    CHECK(parseDType(toString(d)) == d);
  CHECK(parseDType("f16") == DType::F16);
  CHECK(parseDType("float16") == DType::F16);
  CHECK(parseDType("bfloat16") == DType::BF16);
  CHECK(parseDType("f32") == DType::F32);
  CHECK(parseDType("float32") == DType::F32);
  CHECK(!parseDType("fp8"));
  CHECK(!parseDType(""));
}

TEST_CASE("types: fp16 and bf16 decode exactly", "[frontend][types]") {
  int64_t halfBad = 0, bf16Bad = 0;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    double expected = decodeHalf(h);
    float got = halfToFloat(h);
    if (std::isnan(expected) ? !std::isnan(got)
                             : (double(got) != expected ||
                                std::signbit(got) != std::signbit(expected)))
      ++halfBad;
    float b = bf16ToFloat(h);
    float bExpected = std::bit_cast<float>(bits << 16);
    if (std::isnan(bExpected)
            ? !std::isnan(b)
            : std::bit_cast<uint32_t>(b) != std::bit_cast<uint32_t>(bExpected))
      ++bf16Bad;
    // Encoding what was decoded gives the same bits back (non-NaN).
    if (!std::isnan(expected)) {
      if (floatToHalf(got) != h)
        ++halfBad;
      if (floatToBf16(bExpected) != h)
        ++bf16Bad;
    }
  }
  CHECK(halfBad == 0);
  CHECK(bf16Bad == 0);
  CHECK(halfToFloat(0x3C00) == 1.0f);
  CHECK(halfToFloat(0xC000) == -2.0f);
  CHECK(halfToFloat(0x7BFF) == 65504.0f);
  CHECK(halfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(bf16ToFloat(0x3F80) == 1.0f);
}

TEST_CASE("types: float -> fp16/bf16 rounds to nearest even",
          "[frontend][types]") {
  const float one = 1.0f;
  // fp16 has 10 fraction bits: halfway cases between 1 and 1 + 2^-10.
  CHECK(floatToHalf(one + std::ldexp(1.0f, -11)) == 0x3C00); // tie -> even
  CHECK(floatToHalf(one + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  CHECK(floatToHalf(one + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) ==
        0x3C01);
  CHECK(floatToHalf(65504.0f) == 0x7BFF);
  CHECK(floatToHalf(65519.0f) == 0x7BFF);
  CHECK(floatToHalf(65520.0f) == 0x7C00); // rounds to inf
  CHECK(floatToHalf(1e10f) == 0x7C00);
  CHECK(floatToHalf(-1e10f) == 0xFC00);
  CHECK(floatToHalf(-0.0f) == 0x8000);
  CHECK(floatToHalf(std::ldexp(1.0f, -25)) == 0x0000); // tie -> even (0)
  CHECK(floatToHalf(std::ldexp(3.0f, -25)) == 0x0002); // tie -> even (2)
  CHECK(floatToHalf(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(std::isnan(
      halfToFloat(floatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  // bf16 keeps 7 fraction bits.
  CHECK(floatToBf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);
  CHECK(floatToBf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);
  CHECK(floatToBf16(std::bit_cast<float>(0x3F808001u)) == 0x3F81);
  CHECK(floatToBf16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(std::isnan(
      bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lives only in the low 16 bits stays NaN.
  CHECK(
      std::isnan(bf16ToFloat(floatToBf16(std::bit_cast<float>(0x7F800001u)))));

  // loadAsFloat / storeFromFloat for every dtype.
  uint16_t h[2] = {};
  float f[2] = {};
  storeFromFloat(h, DType::F16, 1, -1.5f);
  CHECK(h[1] == 0xBE00);
  CHECK(loadAsFloat(h, DType::F16, 1) == -1.5f);
  storeFromFloat(h, DType::BF16, 0, 3.0f);
  CHECK(h[0] == 0x4040);
  CHECK(loadAsFloat(h, DType::BF16, 0) == 3.0f);
  storeFromFloat(f, DType::F32, 1, 0.1f);
  CHECK(f[1] == 0.1f);
  CHECK(loadAsFloat(f, DType::F32, 1) == 0.1f);
}
