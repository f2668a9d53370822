//===- BufferBoundsTest.cpp - Proving buffer reads in range ---------------===//
//
// The oracle: every buffer read's index evaluated by the interpreter at
// every position of a small call (every query head; per sequence every
// q_idx < seqlen_q and kv_idx < seqlen_k with that sequence's lengths) and
// a few scores, as though every read were made (a superset of the reads any
// kernel makes). Soundness: a buffer BufferReads proves is never read out
// of range there, over named variants (ALiBi, document masks, bias tables
// with offsets, nested reads, score-dependent indices, GQA, varlen and
// decode shapes, the backward's derivatives) sized exactly and one short,
// and over random trees and random linear indices. Usefulness: the common
// variants, sized right, are proven; linear indices over one box exactly
// when the oracle finds no out-of-range read.
//
//===----------------------------------------------------------------------===//
#include "RandomExpr.h"
#include "TestSupport.h"

#include "flashjit/frontend/BufferBounds.h"
#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Interpreter.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Variant.h"

#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

using namespace flashjit;
using flashjit::test::freshSeed;
using flashjit::test::uniformInt;

namespace {

using Names = std::vector<std::string>;

/// One call: query heads, and per sequence (seqlen_q, seqlen_k); sequence b
/// has batch index b.
struct Call {
  int64_t heads = 1;
  std::vector<std::pair<int64_t, int64_t>> seqs;

  CallPositions positions() const {
    CallPositions at(heads);
    for (size_t b = 0; b < seqs.size(); ++b)
      at.add(static_cast<int64_t>(b), 1, seqs[b].first, seqs[b].second);
    return at;
  }
};

/// A dense call: \p batch sequences of seqlen_q x seqlen_k.
Call dense(int64_t heads, int64_t batch, int64_t sq, int64_t sk) {
  return Call{heads, std::vector<std::pair<int64_t, int64_t>>(
                         static_cast<size_t>(batch), {sq, sk})};
}

/// Buffers owned by the test, bound into args.
struct Buffers {
  std::map<std::string, std::vector<int32_t>> i32;
  std::map<std::string, std::vector<int64_t>> i64;
  std::map<std::string, std::vector<float>> f32;
  Arguments args;

  Buffers &int32(const std::string &name, std::vector<int32_t> v) {
    auto &d = i32[name] = std::move(v);
    args.bind(name, d.data(), static_cast<int64_t>(d.size()));
    return *this;
  }
  Buffers &int64(const std::string &name, std::vector<int64_t> v) {
    auto &d = i64[name] = std::move(v);
    args.bind(name, d.data(), static_cast<int64_t>(d.size()));
    return *this;
  }
  Buffers &float32(const std::string &name, int64_t size) {
    auto &d = f32[name] = std::vector<float>(static_cast<size_t>(size), 0.5f);
    args.bind(name, d.data(), size);
    return *this;
  }
};

/// (buffer, index) of every read in \p exprs, plus \p extra.
using ReadList = std::vector<std::pair<std::string, Expr>>;
ReadList readsOf(const std::vector<Expr> &exprs, ReadList extra = {}) {
  std::unordered_set<const ExprNode *> seen;
  auto walk = [&](auto &self, const Expr &e) -> void {
    if (e.isNull() || !seen.insert(e.get()).second)
      return;
    if (e.kind() == ExprKind::BufferLoad) {
      auto *l = static_cast<const BufferLoadExpr *>(e.get());
      extra.emplace_back(l->name(), l->index());
    }
    for (const Expr &op : e->operands())
      self(self, op);
  };
  for (const Expr &e : exprs)
    walk(walk, e);
  return extra;
}

/// The oracle: the buffers some read of \p reads indexes outside
/// [0, size) at some position of \p call (an index whose own evaluation
/// reads out of range is that inner read's business).
std::set<std::string> bruteOutOfRange(const ReadList &reads, const Call &call,
                                      const Arguments &args) {
  std::set<std::string> out;
  const double scores[] = {2.75, -3.5, 1.0e4};
  for (size_t b = 0; b < call.seqs.size(); ++b) {
    auto [sq, sk] = call.seqs[b];
    for (int64_t h = 0; h < call.heads; ++h)
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < sk; ++j)
          for (double s : scores)
            for (const auto &[name, index] : reads) {
              EvalPoint p{static_cast<int64_t>(b), h, i, j, sq, sk, s};
              int64_t at = 0;
              try {
                at = evaluate(index, p, args).intValue;
              } catch (const UserError &) {
                continue;
              }
              if (at < 0 || at >= args.buffers.at(name).size)
                out.insert(name);
            }
  }
  return out;
}

/// Checks soundness (nothing proven is read out of range) and returns the
/// prover's unproven buffers.
Names checkSound(const BufferReads &prover, const ReadList &oracleReads,
                 const Call &call, const Arguments &args) {
  Names unproven = prover.unproven(call.positions(), args);
  std::set<std::string> bad = bruteOutOfRange(oracleReads, call, args);
  for (const auto &[name, ref] : args.buffers) {
    (void)ref;
    bool proven =
        std::find(unproven.begin(), unproven.end(), name) == unproven.end();
    INFO("buffer " << name);
    CHECK(!(proven && bad.count(name)));
  }
  return unproven;
}

/// checkSound for a variant's forward reads.
Names forward(const Variant &v, const Call &call, const Arguments &args) {
  return checkSound(BufferReads::of(v), readsOf({v.maskExpr(), v.scoreExpr()}),
                    call, args);
}

/// The backward's reads: the forward's, the derivatives' and the gradient
/// writes.
ReadList backwardReads(const Variant &v) {
  ScoreModDerivative d =
      differentiateScoreMod(v.scoreExpr(), differentiableParams(v.scoreExpr()));
  std::vector<Expr> exprs{v.maskExpr(), v.scoreExpr(), d.score};
  ReadList writes;
  for (const BufferDerivative &b : d.buffers) {
    exprs.push_back(b.derivative);
    writes.emplace_back(b.buffer, b.index);
  }
  for (const ParamDerivative &p : d.params)
    exprs.push_back(p.derivative);
  return readsOf(exprs, writes);
}

} // namespace

TEST_CASE("ALiBi: slopes[head] is proven with heads_q slopes (head is the "
          "query head under GQA)",
          "[buffer_bounds]") {
  Variant v("alibi");
  v.scoreMod(alibi(buffer<float>("slopes")));
  // heads_q = 8 over heads_kv = 2: the DSL's head runs over query heads.
  Call call = dense(8, 2, 5, 7);
  Buffers ok;
  ok.float32("slopes", 8);
  CHECK(forward(v, call, ok.args).empty());
  CHECK(checkSound(BufferReads::of(v, true), backwardReads(v), call, ok.args)
            .empty());
  Buffers kvHeads; // sized for the key/value heads: short
  kvHeads.float32("slopes", 2);
  CHECK(forward(v, call, kvHeads.args) == Names{"slopes"});
  CHECK(bruteOutOfRange(readsOf({v.scoreExpr()}), call, kvHeads.args).size() ==
        1);
}

TEST_CASE("Document masks: doc[q_idx] == doc[kv_idx] is proven when doc "
          "covers both sequences",
          "[buffer_bounds]") {
  Buffer doc = buffer<int32_t>("doc");
  Variant v("document");
  v.mask(doc[q_idx] == doc[kv_idx]);
  for (auto [sq, sk] : {std::pair{6, 6}, std::pair{4, 9}, std::pair{9, 4}}) {
    INFO("seqlen_q " << sq << ", seqlen_k " << sk);
    const int n = std::max(sq, sk);
    Buffers ok, shortBy1;
    ok.int32("doc", std::vector<int32_t>(n, 0));
    shortBy1.int32("doc", std::vector<int32_t>(n - 1, 0));
    CHECK(forward(v, dense(2, 3, sq, sk), ok.args).empty());
    CHECK(forward(v, dense(2, 3, sq, sk), shortBy1.args) == Names{"doc"});
  }
  // No position (empty sequences, or no head): nothing is read.
  Buffers none;
  none.int32("doc", {});
  CHECK(forward(v, dense(2, 3, 0, 5), none.args).empty());
  CHECK(forward(v, dense(0, 3, 5, 5), none.args).empty());
  CHECK(forward(v, Call{2, {}}, none.args).empty());
}

TEST_CASE("Bias tables: q_idx - kv_idx + seqlen_k - 1 needs seqlen_q + "
          "seqlen_k - 1 entries, offsets from parameters are exact",
          "[buffer_bounds]") {
  Buffer bias = buffer<float>("bias");
  Variant rel("relative");
  rel.scoreMod(score + bias[q_idx - kv_idx + seqlen_k - 1]);
  Variant off("offset");
  off.scoreMod(score + bias[q_idx - kv_idx + param<int32_t>("off")]);
  Variant clipped("clipped");
  clipped.scoreMod(relative_bias(bias, 3));
  for (auto [sq, sk] : {std::pair{5, 5}, std::pair{3, 8}}) {
    INFO("seqlen_q " << sq << ", seqlen_k " << sk);
    Call call = dense(2, 2, sq, sk);
    Buffers ok, shortBy1;
    ok.float32("bias", sq + sk - 1);
    shortBy1.float32("bias", sq + sk - 2);
    CHECK(forward(rel, call, ok.args).empty());
    CHECK(forward(rel, call, shortBy1.args) == Names{"bias"});
    CHECK(checkSound(BufferReads::of(rel, true), backwardReads(rel), call,
                     ok.args)
              .empty());
    ok.args.set("off", Scalar::i32(sk - 1));
    CHECK(forward(off, call, ok.args).empty());
    ok.args.set("off", Scalar::i32(sk)); // reads one past the end
    CHECK(forward(off, call, ok.args) == Names{"bias"});
    ok.args.params.erase("off"); // unknown offset: not proven
    CHECK(BufferReads::of(off).unproven(call.positions(), ok.args) ==
          Names{"bias"});
  }
  Buffers seven, six;
  seven.float32("bias", 7);
  six.float32("bias", 6);
  CHECK(forward(clipped, dense(1, 1, 12, 12), seven.args).empty());
  CHECK(forward(clipped, dense(1, 1, 12, 12), six.args) == Names{"bias"});
}

TEST_CASE("Reads whose index cannot be bounded stay unproven",
          "[buffer_bounds]") {
  Buffer doc = buffer<int32_t>("doc"), table = buffer<float>("table"),
         f = buffer<float>("f");
  Call call = dense(2, 2, 4, 4);
  Buffers b;
  b.int32("doc", {0, 1, 1, 7}).float32("table", 4).float32("f", 16);
  Variant nested("nested"); // table[doc[q]]: doc proven, table not
  nested.scoreMod(score + table[doc[q_idx]]);
  CHECK(forward(nested, call, b.args) == Names{"table"});
  Variant byScore("by_score"); // an index from the score
  byScore.scoreMod(score + f[cast<int32_t>(score)]);
  CHECK(forward(byScore, call, b.args) == Names{"f"});
  Variant byFloat("by_float"); // from a float buffer's value
  byFloat.scoreMod(score + f[cast<int32_t>(table[q_idx] * 2.0f)]);
  CHECK(forward(byFloat, call, b.args) == Names{"f"});
  Variant guarded("guarded"); // a guard the box ignores: sound, not proven
  guarded.mask(q_idx < 2 && doc[q_idx + 2] == 1);
  CHECK(forward(guarded, dense(1, 1, 4, 1), b.args) == Names{"doc"});
  Variant wraps("wraps"); // an index that may wrap is unbounded
  wraps.mask(doc[q_idx * 2147483647] == 0);
  CHECK(forward(wraps, call, b.args) == Names{"doc"});
  // A modifier with no derivative leaves every buffer unproven in the
  // backward (no backward kernel exists for it).
  CHECK(BufferReads::of(byScore, true).unproven(call.positions(), b.args) ==
        Names{"f"});
  Variant missing("missing");
  missing.mask(doc[q_idx] == 0);
  CHECK(BufferReads::of(missing).unproven(call.positions(), Arguments{}) ==
        Names{"doc"});
}

TEST_CASE("Varlen: sequences of different lengths are judged per distinct "
          "length pair, at most kMaxBoxes of them",
          "[buffer_bounds]") {
  Buffer bias = buffer<float>("bias");
  Variant rel("relative");
  rel.scoreMod(score + bias[q_idx - kv_idx + seqlen_k - 1]);
  // q_idx counts from each sequence's first token, seqlens are its own.
  Call call{3, {{3, 4}, {5, 5}, {0, 2}, {5, 7}, {2, 0}, {3, 4}}};
  Buffers ok, shortBy1;
  ok.float32("bias", 11); // 5 + 7 - 1
  shortBy1.float32("bias", 10);
  CallPositions at = call.positions();
  CHECK(at.boxes().size() == 3); // the empty sequences have no position
  CHECK(at.hull().seqlenK.lo == 4);
  CHECK(at.hull().seqlenK.hi == 7);
  // The hull forgets that kv_idx < seqlen_k within a sequence ...
  CHECK(BufferReads::of(rel).unproven(at.hull(), ok.args) == Names{"bias"});
  // ... the boxes of the length pairs do not.
  CHECK(forward(rel, call, ok.args).empty());
  CHECK(forward(rel, call, shortBy1.args) == Names{"bias"});
  // Past kMaxBoxes distinct pairs only the hull is left: sound, unproven.
  Call many{1, {}};
  for (int64_t n = 1; n <= int64_t(CallPositions::kMaxBoxes) + 1; ++n)
    many.seqs.emplace_back(n, n);
  Buffers big;
  big.float32("bias", 2 * int64_t(many.seqs.size()) - 1);
  CHECK(many.positions().boxes().empty());
  CHECK(forward(rel, many, big.args) == Names{"bias"});
  // A read that does not involve the lengths is proven over the hull.
  Buffer doc = buffer<int32_t>("doc");
  Variant document("document");
  document.mask(doc[q_idx] == doc[kv_idx]);
  Buffers docs;
  docs.int32("doc", std::vector<int32_t>(many.seqs.size(), 0));
  CHECK(forward(document, many, docs.args).empty());
}

TEST_CASE("Decode: q_len queries against each sequence's keys",
          "[buffer_bounds]") {
  // Paged decoding: seqlen_q = q_len, q_idx < q_len, seqlen_k the
  // sequence's length; pos[] is indexed by the query's absolute position.
  Buffer pos = buffer<int32_t>("pos"), slopes = buffer<float>("slopes");
  Variant v("decode");
  v.mask(pos[q_idx + seqlen_k - seqlen_q] >= 0);
  v.scoreMod(alibi(slopes));
  const std::vector<int64_t> lens = {9, 4, 0, 12};
  for (int64_t qLen : {1, 4, 5}) {
    INFO("q_len " << qLen);
    Call call{4, {}};
    for (int64_t l : lens)
      call.seqs.emplace_back(qLen, l);
    Buffers ok, shortBy1;
    ok.int32("pos", std::vector<int32_t>(12, 0)).float32("slopes", 4);
    shortBy1.int32("pos", std::vector<int32_t>(11, 0)).float32("slopes", 3);
    // q_len 5 > 4 keys: query 0 of that sequence reads pos[-1].
    CHECK(forward(v, call, ok.args) == (qLen <= 4 ? Names{} : Names{"pos"}));
    CHECK(forward(v, call, shortBy1.args) == (Names{"pos", "slopes"}));
  }
}

TEST_CASE("Random trees: a proven buffer is never read out of range",
          "[buffer_bounds]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  flashjit::test::RandomExprGen gen(seed ^ 0x9e3779b97f4a7c15ull);
  int proven = 0, unproven = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    gen.allowScore = false;
    Expr mask = gen.gen(ScalarType::Bool, 3);
    gen.allowScore = true;
    Expr mod = gen.gen(ScalarType::Float32, 3);
    auto data = [&](int64_t n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto &x : v)
        x = static_cast<int32_t>(uniformInt(rng, -2, 12));
      return v;
    };
    Buffers b;
    b.int32("buf_i32", data(uniformInt(rng, 0, 12)));
    std::vector<int32_t> w = data(uniformInt(rng, 0, 12));
    b.int64("buf_i64", std::vector<int64_t>(w.begin(), w.end()));
    b.float32("buf_f32", uniformInt(rng, 0, 12));
    b.args.set("pi_a", Scalar::i32(uniformInt(rng, -3, 8)))
        .set("pi_b", Scalar::i32(uniformInt(rng, -3, 8)))
        .set("pl_a", Scalar::i64(uniformInt(rng, -3, 8)))
        .set("pf_a", Scalar::f32(1.5))
        .set("pf_b", Scalar::f32(-0.25));
    Call call{uniformInt(rng, 1, 3), {}};
    int64_t batch = uniformInt(rng, 1, 11);
    bool same = uniformInt(rng, 0, 1);
    for (int64_t i = 0; i < batch; ++i)
      call.seqs.emplace_back(
          same && i ? call.seqs[0]
                    : std::pair{uniformInt(rng, 0, 4), uniformInt(rng, 0, 4)});
    INFO("mask " << printExpr(mask) << "\nscore " << printExpr(mod));
    ReadList reads = readsOf({mask, mod});
    Names u = checkSound(BufferReads(std::vector<Expr>{mask, mod}), reads, call,
                         b.args);
    std::set<std::string> read;
    for (const auto &r : reads)
      read.insert(r.first);
    unproven += static_cast<int>(u.size());
    proven += static_cast<int>(read.size() - u.size());
  }
  // Both outcomes occur (the trees read each buffer often enough).
  CHECK(proven > 0);
  CHECK(unproven > 0);
}

TEST_CASE("Random linear indices: exact over one box, sound over many",
          "[buffer_bounds]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  const Expr leaves[] = {batch, head, q_idx, kv_idx, seqlen_q, seqlen_k};
  int exact = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // Each leaf at most once: interval arithmetic is then exact on a box.
    Expr index = constant(ScalarType::Int32, uniformInt(rng, -3, 6), 0.0f);
    for (const Expr &leaf : leaves)
      if (int c = static_cast<int>(uniformInt(rng, -2, 2)))
        index = index + c * leaf;
    if (uniformInt(rng, 0, 3) == 0)
      index = index + param<int32_t>("p");
    Variant v("linear");
    v.scoreMod(score * buffer<float>("w")[index]);
    Call call;
    const bool oneBox = uniformInt(rng, 0, 1);
    if (oneBox) {
      call = dense(uniformInt(rng, 1, 3), uniformInt(rng, 1, 3),
                   uniformInt(rng, 1, 5), uniformInt(rng, 1, 5));
    } else {
      call.heads = uniformInt(rng, 1, 3);
      for (int64_t i = uniformInt(rng, 1, 12); i > 0; --i)
        call.seqs.emplace_back(uniformInt(rng, 0, 5), uniformInt(rng, 0, 5));
    }
    // The true largest index, then a size just below, at or above it.
    Buffers probe;
    probe.float32("w", 1 << 20);
    probe.args.set("p", Scalar::i32(uniformInt(rng, -2, 4)));
    int64_t hi = -1, lo = 0;
    for (size_t b = 0; b < call.seqs.size(); ++b)
      for (int64_t h = 0; h < call.heads; ++h)
        for (int64_t i = 0; i < call.seqs[b].first; ++i)
          for (int64_t j = 0; j < call.seqs[b].second; ++j) {
            EvalPoint p{static_cast<int64_t>(b), h,  i, j, call.seqs[b].first,
                        call.seqs[b].second,     0.0};
            int64_t x = evaluate(index, p, probe.args).intValue;
            hi = std::max(hi, x);
            lo = std::min(lo, x);
          }
    Buffers b;
    b.float32("w", std::max<int64_t>(0, hi + uniformInt(rng, 0, 2)));
    b.args.params = probe.args.params;
    INFO("index " << printExpr(index) << ", size " << b.args.buffers["w"].size);
    Names u = forward(v, call, b.args);
    (void)checkSound(BufferReads::of(v, true), backwardReads(v), call, b.args);
    // A dense call is one box (batch, heads, positions all used).
    if (oneBox) {
      CHECK(u.empty() == (lo >= 0 && hi < b.args.buffers["w"].size));
      ++exact;
    }
  }
  CHECK(exact > 0);
}
