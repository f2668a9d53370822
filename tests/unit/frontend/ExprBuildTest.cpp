//===- ExprBuildTest.cpp - Building DSL expressions: kinds and types ------===//
//
// Every leaf, operator and builtin of Expr.h builds the node kind and result
// type the header's type rules promise, promotions insert explicit casts for
// expressions and convert literals in place, and nodes remember the line of
// the test that built them.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Expr.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <source_location>

using namespace flashjit;

namespace {

const ConstantExpr &asConstant(const Expr &e) {
  REQUIRE(e.kind() == ExprKind::Constant);
  return *dynamic_cast<const ConstantExpr *>(e.get());
}

const BinaryExpr &asBinary(const Expr &e) {
  REQUIRE(e.kind() == ExprKind::Binary);
  return *dynamic_cast<const BinaryExpr *>(e.get());
}

const UnaryExpr &asUnary(const Expr &e) {
  REQUIRE(e.kind() == ExprKind::Unary);
  return *dynamic_cast<const UnaryExpr *>(e.get());
}

/// Checks that \p e is Cast(to, x) with x structurally equal to \p from.
void checkCastOf(const Expr &e, ScalarType to, const Expr &from) {
  REQUIRE(e.kind() == ExprKind::Cast);
  CHECK(e.type() == to);
  CHECK(structurallyEqual(e->operands()[0], from));
}

} // namespace

TEST_CASE("expr: index leaves and score", "[frontend][expr]") {
  struct Leaf {
    const Expr *expr;
    IndexVar var;
    const char *spelling;
  };
  const Leaf leaves[] = {{&batch, IndexVar::Batch, "batch"},
                         {&head, IndexVar::Head, "head"},
                         {&q_idx, IndexVar::QIdx, "q_idx"},
                         {&kv_idx, IndexVar::KvIdx, "kv_idx"},
                         {&seqlen_q, IndexVar::SeqlenQ, "seqlen_q"},
                         {&seqlen_k, IndexVar::SeqlenK, "seqlen_k"}};
  for (const Leaf &leaf : leaves) {
    INFO(leaf.spelling);
    REQUIRE(!leaf.expr->isNull());
    CHECK(leaf.expr->kind() == ExprKind::Index);
    CHECK(leaf.expr->type() == ScalarType::Int32);
    CHECK(dynamic_cast<const IndexExpr *>(leaf.expr->get())->var() == leaf.var);
    CHECK(toString(leaf.var) == leaf.spelling);
    CHECK(leaf.expr->get()->operands().empty());
  }
  CHECK(score.kind() == ExprKind::Score);
  CHECK(score.type() == ScalarType::Float32);
  CHECK(Expr().isNull());
  CHECK(!structurallyEqual(q_idx, kv_idx));
  CHECK(structurallyEqual(q_idx, q_idx));
}

TEST_CASE("expr: literals have the header's types", "[frontend][expr]") {
  CHECK(ExprArg(7).expr().type() == ScalarType::Int32);
  CHECK(asConstant(ExprArg(7).expr()).intValue() == 7);
  CHECK(ExprArg(static_cast<int16_t>(-3)).expr().type() == ScalarType::Int32);
  CHECK(ExprArg(int64_t{7}).expr().type() == ScalarType::Int64);
  CHECK(ExprArg(7u).expr().type() == ScalarType::Int64);
  CHECK(ExprArg(uint64_t{INT64_MAX}).expr().type() == ScalarType::Int64);
  CHECK(asConstant(ExprArg(uint64_t{INT64_MAX}).expr()).intValue() ==
        INT64_MAX);
  CHECK(ExprArg(true).expr().type() == ScalarType::Bool);
  CHECK(asConstant(ExprArg(true).expr()).boolValue());
  CHECK(!asConstant(ExprArg(false).expr()).boolValue());
  CHECK(ExprArg(2.5f).expr().type() == ScalarType::Float32);
  CHECK(asConstant(ExprArg(2.5f).expr()).floatValue() == 2.5f);
  // A double literal is stored as the nearest f32.
  CHECK(asConstant(ExprArg(0.1).expr()).floatValue() == 0.1f);
  CHECK(ExprArg(0.1).expr().type() == ScalarType::Float32);

  Expr c = constant(ScalarType::Int64, -5, 0.0f);
  CHECK(c.type() == ScalarType::Int64);
  CHECK(asConstant(c).intValue() == -5);
  Expr f = constant(ScalarType::Float32, 0, -0.0f);
  CHECK(std::signbit(asConstant(f).floatValue()));
  // -0.0 and 0.0 differ bit for bit, NaN equals NaN bit for bit.
  CHECK(!structurallyEqual(f, constant(ScalarType::Float32, 0, 0.0f)));
  float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(structurallyEqual(constant(ScalarType::Float32, 0, nan),
                          constant(ScalarType::Float32, 0, nan)));
  CHECK(!structurallyEqual(constant(ScalarType::Int32, 5, 0.0f),
                           constant(ScalarType::Int64, 5, 0.0f)));
}

TEST_CASE("expr: arithmetic on same-typed operands", "[frontend][expr]") {
  struct Case {
    Expr e;
    BinaryOp op;
  };
  const Case cases[] = {
      {q_idx + kv_idx, BinaryOp::Add},    {q_idx - kv_idx, BinaryOp::Sub},
      {q_idx * kv_idx, BinaryOp::Mul},    {q_idx / kv_idx, BinaryOp::Div},
      {q_idx % kv_idx, BinaryOp::Rem},    {min(q_idx, kv_idx), BinaryOp::Min},
      {max(q_idx, kv_idx), BinaryOp::Max}};
  for (const Case &c : cases) {
    INFO(toString(c.op));
    const BinaryExpr &b = asBinary(c.e);
    CHECK(b.op() == c.op);
    CHECK(b.type() == ScalarType::Int32);
    CHECK(structurallyEqual(b.lhs(), q_idx));
    CHECK(structurallyEqual(b.rhs(), kv_idx));
  }
  CHECK(isFunctionLike(BinaryOp::Min));
  CHECK(isFunctionLike(BinaryOp::Max));
  CHECK(!isFunctionLike(BinaryOp::Add));
  CHECK(!isFunctionLike(BinaryOp::And));

  Expr f = score * score - score / score + score;
  CHECK(f.type() == ScalarType::Float32);
  CHECK(asBinary(f).op() == BinaryOp::Add);
  CHECK(asBinary(asBinary(f).lhs()).op() == BinaryOp::Sub);
}

TEST_CASE("expr: comparisons and logic give bool", "[frontend][expr]") {
  const std::pair<Expr, BinaryOp> cmps[] = {
      {q_idx == kv_idx, BinaryOp::Eq}, {q_idx != kv_idx, BinaryOp::Ne},
      {q_idx < kv_idx, BinaryOp::Lt},  {q_idx <= kv_idx, BinaryOp::Le},
      {q_idx > kv_idx, BinaryOp::Gt},  {q_idx >= kv_idx, BinaryOp::Ge}};
  for (const auto &[e, op] : cmps) {
    INFO(toString(op));
    CHECK(e.type() == ScalarType::Bool);
    CHECK(asBinary(e).op() == op);
    CHECK(asBinary(e).lhs().type() == ScalarType::Int32);
    CHECK(isComparison(op));
  }
  CHECK(!isComparison(BinaryOp::And));
  CHECK(!isComparison(BinaryOp::Add));

  Expr a = q_idx >= kv_idx, b = q_idx - kv_idx < 1024;
  Expr both = a && b;
  CHECK(both.type() == ScalarType::Bool);
  CHECK(asBinary(both).op() == BinaryOp::And);
  CHECK(structurallyEqual(asBinary(both).lhs(), a));
  CHECK(asBinary(a || b).op() == BinaryOp::Or);
  CHECK(asUnary(!a).op() == UnaryOp::Not);
  CHECK((!a).type() == ScalarType::Bool);
  // Two bools may be compared for (in)equality.
  CHECK((a == b).type() == ScalarType::Bool);
  CHECK((a != true).type() == ScalarType::Bool);
  // Literal operands are accepted on either side.
  CHECK((true && a).type() == ScalarType::Bool);
  CHECK((5 < q_idx).type() == ScalarType::Bool);
  CHECK(asBinary(5 < q_idx).lhs().kind() == ExprKind::Constant);
}

TEST_CASE("expr: unary ops and math builtins", "[frontend][expr]") {
  CHECK(asUnary(-q_idx).op() == UnaryOp::Neg);
  CHECK((-q_idx).type() == ScalarType::Int32);
  CHECK((-score).type() == ScalarType::Float32);
  CHECK(asUnary(abs(q_idx - kv_idx)).op() == UnaryOp::Abs);
  CHECK(abs(q_idx - kv_idx).type() == ScalarType::Int32);
  CHECK(abs(cast<int64_t>(q_idx)).type() == ScalarType::Int64);
  CHECK(abs(score).type() == ScalarType::Float32);
  const std::pair<Expr, UnaryOp> math[] = {
      {exp(score), UnaryOp::Exp},         {exp2(score), UnaryOp::Exp2},
      {log(score), UnaryOp::Log},         {tanh(score), UnaryOp::Tanh},
      {sigmoid(score), UnaryOp::Sigmoid}, {sqrt(score), UnaryOp::Sqrt}};
  for (const auto &[e, op] : math) {
    INFO(toString(op));
    CHECK(asUnary(e).op() == op);
    CHECK(e.type() == ScalarType::Float32);
    CHECK(structurallyEqual(asUnary(e).operand(), score));
  }
  // Math functions take any number and give f32.
  CHECK(exp(q_idx).type() == ScalarType::Float32);
  CHECK(sqrt(cast<int64_t>(kv_idx)).type() == ScalarType::Float32);
  CHECK(flashjit::log(2).type() == ScalarType::Float32);
  CHECK(flashjit::tanh(int64_t{3}).type() == ScalarType::Float32);
}

TEST_CASE("expr: implicit promotions i32 -> i64 -> f32",
          "[frontend][expr][types]") {
  SECTION("i32 expression with i64 literal: cast node on the expression") {
    Expr e = q_idx + int64_t{3};
    CHECK(e.type() == ScalarType::Int64);
    checkCastOf(asBinary(e).lhs(), ScalarType::Int64, q_idx);
    CHECK(asConstant(asBinary(e).rhs()).type() == ScalarType::Int64);
    CHECK(asConstant(asBinary(e).rhs()).intValue() == 3);
  }
  SECTION("i32 expression with f32 literal") {
    Expr e = q_idx * 0.5f;
    CHECK(e.type() == ScalarType::Float32);
    checkCastOf(asBinary(e).lhs(), ScalarType::Float32, q_idx);
    CHECK(asConstant(asBinary(e).rhs()).floatValue() == 0.5f);
  }
  SECTION("f32 expression with i32 literal: converted in place") {
    Expr e = score + 2;
    CHECK(e.type() == ScalarType::Float32);
    CHECK(structurallyEqual(asBinary(e).lhs(), score));
    CHECK(asConstant(asBinary(e).rhs()).type() == ScalarType::Float32);
    CHECK(asConstant(asBinary(e).rhs()).floatValue() == 2.0f);
    Expr r = 3 * score;
    CHECK(asConstant(asBinary(r).lhs()).floatValue() == 3.0f);
  }
  SECTION("i64 expression with i32 literal: converted in place") {
    Expr e = cast<int64_t>(q_idx) - 7;
    CHECK(e.type() == ScalarType::Int64);
    CHECK(asConstant(asBinary(e).rhs()).type() == ScalarType::Int64);
    CHECK(asConstant(asBinary(e).rhs()).intValue() == 7);
  }
  SECTION("i32 and i64 expressions") {
    Expr n = param<int64_t>("n");
    Expr e = kv_idx < n;
    CHECK(e.type() == ScalarType::Bool);
    checkCastOf(asBinary(e).lhs(), ScalarType::Int64, kv_idx);
    CHECK(structurallyEqual(asBinary(e).rhs(), n));
  }
  SECTION("i64 and f32 expressions") {
    Expr e = max(cast<int64_t>(q_idx), score);
    CHECK(e.type() == ScalarType::Float32);
    checkCastOf(asBinary(e).lhs(), ScalarType::Float32, cast<int64_t>(q_idx));
  }
  SECTION("select promotes its branches") {
    Expr s = select(q_idx > kv_idx, q_idx, 1.5f);
    CHECK(s.kind() == ExprKind::Select);
    CHECK(s.type() == ScalarType::Float32);
    auto &sel = *dynamic_cast<const SelectExpr *>(s.get());
    CHECK(structurallyEqual(sel.condition(), q_idx > kv_idx));
    checkCastOf(sel.trueValue(), ScalarType::Float32, q_idx);
    CHECK(asConstant(sel.falseValue()).floatValue() == 1.5f);
    CHECK(select(true, q_idx, int64_t{2}).type() == ScalarType::Int64);
    CHECK(select(q_idx > 0, true, kv_idx > 0).type() == ScalarType::Bool);
    CHECK(select(q_idx > 0, 1, 2).type() == ScalarType::Int32);
  }
  SECTION("explicit casts") {
    Expr c = cast<float>(q_idx > kv_idx);
    checkCastOf(c, ScalarType::Float32, q_idx > kv_idx);
    checkCastOf(cast(ScalarType::Int32, score), ScalarType::Int32, score);
    checkCastOf(cast<int64_t>(kv_idx), ScalarType::Int64, kv_idx);
  }
}

TEST_CASE("expr: parameters and buffers", "[frontend][expr]") {
  Expr p = param<float>("softcap");
  CHECK(p.kind() == ExprKind::Param);
  CHECK(p.type() == ScalarType::Float32);
  CHECK(dynamic_cast<const ParamExpr *>(p.get())->name() == "softcap");
  CHECK(param<int32_t>("w").type() == ScalarType::Int32);
  CHECK(param("n", ScalarType::Int64).type() == ScalarType::Int64);
  CHECK(structurallyEqual(param<float>("a"), param<float>("a")));
  CHECK(!structurallyEqual(param<float>("a"), param<float>("b")));
  CHECK(!structurallyEqual(param<float>("a"), param<int32_t>("a")));

  Buffer doc = buffer<int32_t>("doc_id");
  CHECK(doc.name() == "doc_id");
  CHECK(doc.elementType() == ScalarType::Int32);
  Expr load = doc[q_idx];
  CHECK(load.kind() == ExprKind::BufferLoad);
  CHECK(load.type() == ScalarType::Int32);
  auto &bl = *dynamic_cast<const BufferLoadExpr *>(load.get());
  CHECK(bl.name() == "doc_id");
  CHECK(structurallyEqual(bl.index(), q_idx));
  CHECK(buffer<float>("slope")[head].type() == ScalarType::Float32);
  CHECK(buffer<int64_t>("off")[batch].type() == ScalarType::Int64);
  // Any integer indexes a buffer: i64 expressions and literals too.
  CHECK(doc[cast<int64_t>(kv_idx)].type() == ScalarType::Int32);
  CHECK(doc[3].kind() == ExprKind::BufferLoad);
  Expr same = doc[q_idx] == doc[kv_idx];
  CHECK(same.type() == ScalarType::Bool);
  CHECK(!structurallyEqual(doc[q_idx], doc[kv_idx]));
  CHECK(!structurallyEqual(doc[q_idx], buffer<int32_t>("other")[q_idx]));
  CHECK(!structurallyEqual(doc[q_idx], buffer<int64_t>("doc_id")[q_idx]));
}

TEST_CASE("expr: readsScore, readsData, readsBuffer, isIdentifier",
          "[frontend][expr]") {
  CHECK(readsScore(score));
  CHECK(readsScore(select(q_idx > 0, 1.0f, exp(score))));
  CHECK(!readsScore(q_idx >= kv_idx));
  CHECK(!readsScore(param<float>("score_scale") * 2.0f));
  CHECK(readsData(param<float>("x") + 1.0f));
  CHECK(readsData(q_idx < buffer<int32_t>("len")[batch]));
  CHECK(readsData(buffer<int32_t>("b")[0] + 1));
  CHECK(!readsData(q_idx >= kv_idx && score > 0.0f));
  CHECK(readsBuffer(select(q_idx > 0, buffer<float>("b")[head], score)));
  CHECK(readsBuffer(kv_idx < buffer<int32_t>("len")[buffer<int32_t>("i")[0]]));
  CHECK(!readsBuffer(param<float>("x") + score));

  for (const char *ok : {"a", "_", "doc_id", "A9_", "_x1", "softcap"})
    CHECK(isIdentifier(ok));
  for (const char *bad : {"", "9a", "a-b", "a b", "doc.id", "x$", "é"})
    CHECK(!isIdentifier(bad));
}

TEST_CASE("expr: structural equality ignores locations, nodes keep theirs",
          "[frontend][expr][location]") {
  const unsigned line1 = std::source_location::current().line() + 1;
  Expr a = q_idx >= kv_idx && q_idx - kv_idx < 1024;
  const unsigned line2 = std::source_location::current().line() + 1;
  Expr b = q_idx >= kv_idx && q_idx - kv_idx < 1024;
  CHECK(line1 != line2);
  CHECK(structurallyEqual(a, b));
  CHECK(a->loc().line() == line1);
  CHECK(b->loc().line() == line2);
  CHECK(asBinary(a).rhs()->loc().line() == line1);
  CHECK(!structurallyEqual(a, q_idx >= kv_idx && q_idx - kv_idx < 1023));
  CHECK(!structurallyEqual(a, q_idx >= kv_idx && q_idx - kv_idx <= 1024));
  CHECK(!structurallyEqual(a, q_idx >= kv_idx || q_idx - kv_idx < 1024));
  CHECK(!structurallyEqual(a, kv_idx >= q_idx && q_idx - kv_idx < 1024));

  const unsigned line3 = std::source_location::current().line() + 1;
  Expr f = exp(score);
  CHECK(f->loc().line() == line3);
  const unsigned line4 = std::source_location::current().line() + 1;
  Expr p = param<float>("cap");
  CHECK(p->loc().line() == line4);
  // Sharing: an Expr copied into an operand is the same node.
  Expr q2 = q_idx;
  CHECK(q2.get() == q_idx.get());
}
