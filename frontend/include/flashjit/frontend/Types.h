//===- Types.h - Scalar types of the DSL and tensor dtypes -------*- C++
//-*-===//
//
// ScalarType is the type of a DSL expression (bool, i32, i64, f32). DType is
// the element type of an attention tensor in memory (fp16, bf16, fp32), with
// exact host conversions to and from float used by the reference and tests.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_TYPES_H
#define FLASHJIT_FRONTEND_TYPES_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace flashjit {

/// The type of a DSL expression node.
enum class ScalarType : uint8_t { Bool, Int32, Int64, Float32 };

/// Canonical spelling: "bool", "i32", "i64", "f32".
std::string_view toString(ScalarType type);
/// Inverse of toString(ScalarType); nullopt for an unknown spelling.
std::optional<ScalarType> parseScalarType(std::string_view text);
/// True for Int32 and Int64.
inline bool isInteger(ScalarType t) {
  return t == ScalarType::Int32 || t == ScalarType::Int64;
}
/// True for Int32, Int64 and Float32 (every type but Bool).
inline bool isNumeric(ScalarType t) { return t != ScalarType::Bool; }

/// Element type of Q, K, V or O in memory.
enum class DType : uint8_t { F16, BF16, F32 };

/// Canonical spelling: "fp16", "bf16", "fp32".
std::string_view toString(DType dtype);
/// Inverse of toString(DType); also accepts "f16", "f32", "float16",
/// "bfloat16", "float32". nullopt for an unknown spelling.
std::optional<DType> parseDType(std::string_view text);
/// Size of one element in bytes (2, 2, 4).
int byteSize(DType dtype);

/// IEEE binary16 bits to float (exact).
float halfToFloat(uint16_t bits);
/// float to IEEE binary16 bits, round to nearest even (overflow gives inf).
uint16_t floatToHalf(float value);
/// bfloat16 bits to float (exact).
float bf16ToFloat(uint16_t bits);
/// float to bfloat16 bits, round to nearest even (NaN stays NaN).
uint16_t floatToBf16(float value);
/// Reads element \p index of a buffer of \p dtype as a float (exact).
float loadAsFloat(const void *data, DType dtype, int64_t index);
/// Writes \p value (rounded to nearest even) as element \p index.
void storeFromFloat(void *data, DType dtype, int64_t index, float value);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_TYPES_H
