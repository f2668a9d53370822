//===- RandomExpr.h - Random well-typed DSL trees for property tests -*- C++
//-*-//
//
// Builds random expressions of a requested type through the public DSL
// (operators, builtins, makeUnary/makeBinary, casts, params, buffers), so the
// trees are exactly those a user can build. Covers every node kind, negative
// and extreme constants, -0.0f, inf, nan, i64 constants, casts, parameters,
// buffers and nested selects. Parameter and buffer names come from per-type
// pools so that no tree declares one name with two types.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_UNIT_FRONTEND_RANDOMEXPR_H
#define FLASHJIT_TESTS_UNIT_FRONTEND_RANDOMEXPR_H

#include "flashjit/frontend/Expr.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <source_location>

namespace flashjit::test {

class RandomExprGen {
public:
  explicit RandomExprGen(uint64_t seed) : rng_(seed) {}

  /// When false, `score` is never generated (for masks).
  bool allowScore = true;

  /// Tame trees, for derivative tests: f32 literals on a 2^-6 grid in
  /// [-4, 4], integer literals in [-10, 10], no f32 -> integer casts (so the
  /// tree is differentiable) and every buffer index reduced into
  /// [0, kTameBufferSize) (so every read is in bounds).
  bool tame = false;
  static constexpr int kTameBufferSize = 7;

  /// A random tree of type \p type with at most \p depth levels of operators.
  Expr gen(ScalarType type, int depth) {
    if (depth <= 0 || pick(4) == 0)
      return leaf(type);
    switch (type) {
    case ScalarType::Bool:
      return genBool(depth);
    case ScalarType::Float32:
      return genFloat(depth);
    default:
      return genInt(type, depth);
    }
  }

  /// A random numeric type.
  ScalarType numericType() {
    static const ScalarType ts[] = {ScalarType::Int32, ScalarType::Int64,
                                    ScalarType::Float32};
    return ts[pick(3)];
  }

  /// A random f32 bit pattern (finite or special), never a NaN with payload.
  float randomFloat() {
    if (tame)
      return static_cast<float>(static_cast<int>(pick(513)) - 256) / 64.0f;
    switch (pick(12)) {
    case 0:
      return -0.0f;
    case 1:
      return std::numeric_limits<float>::infinity();
    case 2:
      return -std::numeric_limits<float>::infinity();
    case 3:
      return std::numeric_limits<float>::quiet_NaN();
    case 4:
      return std::numeric_limits<float>::denorm_min();
    case 5:
      return pick(2) ? std::numeric_limits<float>::max()
                     : std::numeric_limits<float>::lowest();
    case 6:
      return static_cast<float>(static_cast<int>(pick(2001)) - 1000);
    case 7:
      return 0.1f * static_cast<float>(static_cast<int>(pick(200)) - 100);
    default: {
      // Any finite bit pattern.
      for (;;) {
        float f = std::bit_cast<float>(static_cast<uint32_t>(rng_()));
        if (std::isfinite(f))
          return f;
      }
    }
    }
  }

  int64_t randomInt64() {
    if (tame)
      return static_cast<int64_t>(pick(21)) - 10;
    switch (pick(6)) {
    case 0:
      return std::numeric_limits<int64_t>::min();
    case 1:
      return std::numeric_limits<int64_t>::max();
    case 2:
      return static_cast<int64_t>(pick(21)) - 10;
    default:
      return static_cast<int64_t>(rng_());
    }
  }

  int32_t randomInt32() {
    if (tame)
      return static_cast<int32_t>(pick(21)) - 10;
    switch (pick(6)) {
    case 0:
      return std::numeric_limits<int32_t>::min();
    case 1:
      return std::numeric_limits<int32_t>::max();
    case 2:
      return static_cast<int32_t>(pick(21)) - 10;
    default:
      return static_cast<int32_t>(rng_());
    }
  }

  uint64_t pick(uint64_t n) { return rng_() % n; }
  std::mt19937_64 &rng() { return rng_; }

private:
  static constexpr std::source_location here() {
    return std::source_location::current();
  }

  Expr leaf(ScalarType type) {
    switch (type) {
    case ScalarType::Bool:
      return constant(ScalarType::Bool, pick(2), 0.0f);
    case ScalarType::Int32: {
      static const Expr *const idx[] = {&batch,  &head,     &q_idx,
                                        &kv_idx, &seqlen_q, &seqlen_k};
      switch (pick(4)) {
      case 0:
        return *idx[pick(6)];
      case 1:
        return param(pick(2) ? "pi_a" : "pi_b", ScalarType::Int32);
      default:
        return constant(ScalarType::Int32, randomInt32(), 0.0f);
      }
    }
    case ScalarType::Int64:
      if (pick(3) == 0)
        return param("pl_a", ScalarType::Int64);
      return constant(ScalarType::Int64, randomInt64(), 0.0f);
    case ScalarType::Float32:
      switch (pick(4)) {
      case 0:
        if (allowScore)
          return score;
        [[fallthrough]];
      case 1:
        return param(pick(2) ? "pf_a" : "pf_b", ScalarType::Float32);
      default:
        return constant(ScalarType::Float32, 0, randomFloat());
      }
    }
    return Expr();
  }

  ScalarType integerType() {
    return pick(2) ? ScalarType::Int32 : ScalarType::Int64;
  }

  Expr bufferLoad(ScalarType type, int depth) {
    Expr index = gen(integerType(), depth - 1);
    if (tame) // (i % n + n) % n is in [0, n) and never overflows
      index = (index % kTameBufferSize + kTameBufferSize) % kTameBufferSize;
    switch (type) {
    case ScalarType::Int32:
      return Buffer("buf_i32", type)[index];
    case ScalarType::Int64:
      return Buffer("buf_i64", type)[index];
    default:
      return Buffer("buf_f32", type)[index];
    }
  }

  /// Operand types whose promotion gives \p type.
  std::pair<ScalarType, ScalarType> operandTypesFor(ScalarType type) {
    ScalarType a = type, b = type;
    if (type == ScalarType::Int64 && pick(3) == 0)
      (pick(2) ? a : b) = ScalarType::Int32;
    if (type == ScalarType::Float32 && pick(3) == 0)
      (pick(2) ? a : b) = integerType();
    return {a, b};
  }

  Expr arith(ScalarType type, int depth, bool allowRem) {
    static const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                                   BinaryOp::Div, BinaryOp::Min, BinaryOp::Max,
                                   BinaryOp::Rem};
    BinaryOp op = ops[pick(allowRem ? 7 : 6)];
    auto [ta, tb] = operandTypesFor(type);
    Expr a = gen(ta, depth - 1), b = gen(tb, depth - 1);
    switch (pick(3)) {
    case 0:
      return makeBinary(op, a, b, here());
    default:
      switch (op) {
      case BinaryOp::Add:
        return a + b;
      case BinaryOp::Sub:
        return a - b;
      case BinaryOp::Mul:
        return a * b;
      case BinaryOp::Div:
        return a / b;
      case BinaryOp::Rem:
        return a % b;
      case BinaryOp::Min:
        return min(a, b);
      default:
        return max(a, b);
      }
    }
  }

  Expr select3(ScalarType type, int depth) {
    return select(gen(ScalarType::Bool, depth - 1), gen(type, depth - 1),
                  gen(type, depth - 1));
  }

  Expr genInt(ScalarType type, int depth) {
    switch (pick(8)) {
    case 0:
    case 1:
    case 2:
      return arith(type, depth, true);
    case 3:
      return pick(2) ? -gen(type, depth - 1) : abs(gen(type, depth - 1));
    case 4:
      return select3(type, depth);
    case 5: {
      // A cast from another type (bool included).
      static const ScalarType from[] = {ScalarType::Bool, ScalarType::Int32,
                                        ScalarType::Int64, ScalarType::Float32};
      return cast(type, gen(from[pick(tame ? 3 : 4)], depth - 1));
    }
    case 6:
      return bufferLoad(type, depth);
    default:
      // Literal operand converted in place.
      return pick(2) ? gen(type, depth - 1) + 3 : 7 * gen(type, depth - 1);
    }
  }

  Expr genFloat(int depth) {
    static const UnaryOp math[] = {UnaryOp::Exp,     UnaryOp::Exp2,
                                   UnaryOp::Log,     UnaryOp::Tanh,
                                   UnaryOp::Sigmoid, UnaryOp::Sqrt};
    switch (pick(9)) {
    case 0:
    case 1:
    case 2:
      return arith(ScalarType::Float32, depth, false);
    case 3:
      return makeUnary(math[pick(6)], gen(numericType(), depth - 1), here());
    case 4:
      return pick(2) ? -gen(ScalarType::Float32, depth - 1)
                     : abs(gen(ScalarType::Float32, depth - 1));
    case 5:
      return select3(ScalarType::Float32, depth);
    case 6:
      return cast<float>(
          gen(pick(2) ? integerType() : ScalarType::Bool, depth - 1));
    case 7:
      return bufferLoad(ScalarType::Float32, depth);
    default:
      return gen(ScalarType::Float32, depth - 1) * randomFloat();
    }
  }

  Expr genBool(int depth) {
    static const BinaryOp cmps[] = {BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Lt,
                                    BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge};
    switch (pick(6)) {
    case 0:
    case 1: {
      ScalarType t = numericType();
      auto [ta, tb] = operandTypesFor(t);
      return makeBinary(cmps[pick(6)], gen(ta, depth - 1), gen(tb, depth - 1),
                        here());
    }
    case 2: {
      Expr a = gen(ScalarType::Bool, depth - 1),
           b = gen(ScalarType::Bool, depth - 1);
      switch (pick(4)) {
      case 0:
        return a && b;
      case 1:
        return a || b;
      case 2:
        return a == b;
      default:
        return a != b;
      }
    }
    case 3:
      return !gen(ScalarType::Bool, depth - 1);
    case 4:
      return select3(ScalarType::Bool, depth);
    default:
      return q_idx - kv_idx < gen(ScalarType::Int32, depth - 1);
    }
  }

  std::mt19937_64 rng_;
};

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_UNIT_FRONTEND_RANDOMEXPR_H
