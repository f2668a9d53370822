//===- CudaPrinter.h - DSL expressions as CUDA C++ ---------------*- C++
//-*-===//
//
// Prints any expression as one CUDA C++ expression with exactly the DSL's
// semantics (Expr.h; Interpreter.cpp is the executable spec): integer
// arithmetic wraps, division and remainder by zero give 0, f32 -> integer
// casts truncate and saturate with NaN -> 0, abs wraps, float min/max return
// NaN if either operand is NaN. f32 math is done in float (expf, tanhf, ...),
// so results agree with the interpreter (which works in double) to float
// rounding. The helpers the printed code calls are in cudaPrelude().
//
// Spellings in the printed code (changeable through CudaNames):
//   index leaves   batch head q_idx kv_idx seqlen_q seqlen_k   (int)
//   score          score                                       (float)
//   parameter x    p_x                                         (int, long long,
//   float) buffer x       buf_x (const T *), buf_x_size (long long)
// A buffer read outside [0, size) yields 0 and records the buffer's id and
// the index in the __device__ globals fj_oob_buffer / fj_oob_index (first
// failure wins), so the host can report it as the interpreter would.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_CUDAPRINTER_H
#define FLASHJIT_FRONTEND_CUDAPRINTER_H

#include "flashjit/frontend/Expr.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace flashjit {

/// How the leaves of an expression are spelled in CUDA C++.
struct CudaNames {
  /// Spelling of an index leaf; null: its DSL name ("q_idx").
  std::function<std::string(IndexVar)> index;
  /// Spelling of the leaf `score`.
  std::string score = "score";
  /// Prefix of parameter names (`p_` + name).
  std::string paramPrefix = "p_";
  /// Prefix of buffer pointers (`buf_` + name; size: `buf_` + name + `_size`).
  std::string bufferPrefix = "buf_";
  /// Buffer names in the order of their ids: a read outside buffer i
  /// records id i + 1 in fj_oob_buffer. Buffers not listed record -1.
  std::vector<std::string> bufferIds;
};

/// The CUDA C++ type of a DSL scalar type: "bool", "int", "long long",
/// "float".
std::string_view cudaTypeName(ScalarType type);

/// One CUDA C++ expression computing \p e, of type cudaTypeName(e.type()).
/// Throws InternalError for a null expression.
std::string printCudaExpr(const Expr &e, const CudaNames &names = {});

/// The __device__ helper functions and globals printCudaExpr's output calls
/// (fj_add, fj_div, fj_fmin, fj_f2i, fj_load, fj_oob_buffer, ...). Include it
/// once per translation unit, before the code that uses the expressions; it
/// needs no header.
std::string_view cudaPrelude();

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_CUDAPRINTER_H
