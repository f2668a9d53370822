//===- Types.h - Scalar types of the DSL and tensor dtypes -------*- C++
//-*-===//
//
// ScalarType is the type of a DSL expression (bool, i32, i64, f32). DType is
// the element type of an attention tensor in memory (fp16, bf16, fp32, and
// the two OCP fp8 formats e4m3 and e5m2 for Q, K, V), with exact host
// conversions to and from float used by the reference and tests.
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

/// Element type of Q, K, V or O in memory. E4M3 and E5M2 are the OCP 8-bit
/// floating-point formats (OCP "OFP8 Formats for Deep Learning" v1.0, 2023;
/// torch.float8_e4m3fn and torch.float8_e5m2): E4M3 has exponent bias 7,
/// largest finite 448, no infinity, NaN = S.1111.111; E5M2 has bias 15,
/// largest finite 57344 and IEEE-style inf (S.11111.00) and NaN. They are
/// input-only types (Q, K, V, with descale factors: Arguments::qDescale).
enum class DType : uint8_t { F16, BF16, F32, E4M3, E5M2 };

/// Canonical spelling: "fp16", "bf16", "fp32", "e4m3", "e5m2".
std::string_view toString(DType dtype);
/// Inverse of toString(DType); also accepts "f16", "f32", "float16",
/// "bfloat16", "float32", "float8_e4m3fn", "fp8_e4m3", "float8_e5m2",
/// "fp8_e5m2". nullopt for an unknown spelling.
std::optional<DType> parseDType(std::string_view text);
/// Size of one element in bytes (2, 2, 4, 1, 1).
int byteSize(DType dtype);
/// True for the 8-bit formats E4M3 and E5M2.
inline bool isFp8(DType t) { return t == DType::E4M3 || t == DType::E5M2; }
/// The largest finite value of an fp8 format: 448 (E4M3), 57344 (E5M2).
/// Throws InternalError for a non-fp8 dtype.
float fp8MaxFinite(DType dtype);

/// IEEE binary16 bits to float (exact).
float halfToFloat(uint16_t bits);
/// float to IEEE binary16 bits, round to nearest even (overflow gives inf).
uint16_t floatToHalf(float value);
/// bfloat16 bits to float (exact).
float bf16ToFloat(uint16_t bits);
/// float to bfloat16 bits, round to nearest even (NaN stays NaN).
uint16_t floatToBf16(float value);
/// E4M3 bits to float (exact): NaN for 0x7f/0xff, +-0 for 0x00/0x80.
float e4m3ToFloat(uint8_t bits);
/// float to E4M3 bits, round to nearest even, NOT saturating (torch's
/// `.to(torch.float8_e4m3fn)` semantics): a value whose magnitude rounds
/// above 448 (|x| > 464; 464, the midpoint to 480, ties to 448), +-inf and
/// NaN all give NaN (0x7f, sign kept). Use floatToE4M3Sat to clamp.
uint8_t floatToE4M3(float value);
/// float to E4M3 bits, round to nearest even, saturating: finite values
/// and +-inf beyond the range give +-448 (0x7e/0xfe); NaN gives NaN.
uint8_t floatToE4M3Sat(float value);
/// E5M2 bits to float (exact): +-inf for 0x7c/0xfc, NaN for 0x7d..0x7f.
float e5m2ToFloat(uint8_t bits);
/// float to E5M2 bits, round to nearest even, NOT saturating (torch's
/// semantics, as IEEE): |x| >= 61440 (the midpoint above 57344 ties to the
/// even inf) gives inf, inf stays inf, NaN gives NaN (0x7f, sign kept).
uint8_t floatToE5M2(float value);
/// float to E5M2 bits, round to nearest even, saturating: finite values and
/// +-inf beyond the range give +-57344 (0x7b/0xfb); NaN gives NaN.
uint8_t floatToE5M2Sat(float value);
/// Reads element \p index of a buffer of \p dtype as a float (exact).
float loadAsFloat(const void *data, DType dtype, int64_t index);
/// Writes \p value (rounded to nearest even) as element \p index; fp8
/// dtypes use the non-saturating conversions (floatToE4M3, floatToE5M2).
void storeFromFloat(void *data, DType dtype, int64_t index, float value);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_TYPES_H
