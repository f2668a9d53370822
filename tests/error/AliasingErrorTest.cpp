//===- AliasingErrorTest.cpp - Output aliasing at every C entry point ----===//
//
// The aliasing rule (README, "Aliasing"): an output's memory overlaps no
// input and no other output; inputs may share memory. flashjit_run has
// held it since issue 21 §2 (ValuesErrorTest.cpp); these are the new-user
// findings of session 10 for the other entry points: the backward (dq, dk,
// dv and the buffer gradients), paged decoding, merge_states (exact in-place
// aliasing stays allowed), paged_append, and the block-table sizes. Every
// refusal asserts the status, that the message names both arguments, and
// that nothing was written; every rule has a positive control that runs and
// is checked against an independent computation.
//
//===----------------------------------------------------------------------===//
#include "flashjit-c/flashjit.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace {

flashjit_tensor tensor4(void *data, int64_t b, int64_t h, int64_t s,
                        int64_t d) {
  flashjit_tensor t{};
  t.data = data;
  t.dtype = FLASHJIT_FP32;
  t.rank = 4;
  t.shape[0] = b, t.shape[1] = h, t.shape[2] = s, t.shape[3] = d;
  t.strides[3] = 1, t.strides[2] = d, t.strides[1] = s * d,
  t.strides[0] = h * s * d;
  return t;
}

flashjit_tensor tensor3(void *data, int64_t b, int64_t h, int64_t s) {
  flashjit_tensor t = tensor4(data, b, h, s, 1);
  t.rank = 3;
  t.shape[3] = 1;
  t.strides[2] = 1, t.strides[1] = s, t.strides[0] = h * s;
  t.strides[3] = 1;
  return t;
}

/// Checks \p status is FLASHJIT_USER_ERROR with every needle in the message.
void expectRefused(flashjit_status status,
                   std::initializer_list<std::string> needles) {
  std::string message = flashjit_last_error();
  INFO("message: " << message);
  CHECK(status == FLASHJIT_USER_ERROR);
  for (const std::string &needle : needles) {
    INFO("expected substring: " << needle);
    CHECK(message.find(needle) != std::string::npos);
  }
}

std::vector<float> randomFloats(size_t n, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (float &e : x)
    e = u(rng);
  return x;
}

flashjit_kernel *compileCpu(const char *spec, unsigned flags) {
  setenv("FLASHJIT_DISABLE_CACHE", "1", 1);
  flashjit_kernel *kernel = nullptr;
  INFO(flashjit_last_error());
  REQUIRE(flashjit_compile_ex(spec, "cpu", flags, &kernel) == FLASHJIT_OK);
  return kernel;
}

} // namespace

TEST_CASE("backward: dq, dk, dv and buffer gradients overlap no input and "
          "not each other, o == q is fine",
          "[error][aliasing]") {
  // head_dim_v = head_dim_qk and heads_q = heads_kv so that o may be q.
  constexpr int64_t B = 1, H = 2, S = 5, D = 4, N = B * H * S * D;
  flashjit_kernel *kernel = compileCpu(
      "attention(name=e21_bwd_alias, score=(score - (buffer<f32>(slope)[head] "
      "* cast<f32>(abs((q_idx - kv_idx))))), head_dim=4, dtype=fp32, "
      "heads_q=2, heads_kv=2)",
      0);
  std::mt19937 rng(2112);
  std::vector<float> q = randomFloats(N, rng), k = randomFloats(N, rng),
                     v = randomFloats(N, rng), dO = randomFloats(N, rng), o(N),
                     lse(B * H * S), slope = {0.25f, 0.5f};
  flashjit_tensor tq = tensor4(q.data(), B, H, S, D),
                  tk = tensor4(k.data(), B, H, S, D),
                  tv = tensor4(v.data(), B, H, S, D),
                  to = tensor4(o.data(), B, H, S, D),
                  tdo = tensor4(dO.data(), B, H, S, D),
                  tl = tensor3(lse.data(), B, H, S);
  flashjit_arg args[1] = {
      {"slope", FLASHJIT_ARG_BUFFER_F32, 0.0, 0, slope.data(), H}};
  REQUIRE(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, args, 1, nullptr) ==
          FLASHJIT_OK);

  // Disjoint outputs: the baseline.
  std::vector<float> dq(N), dk(N), dv(N), dslope(H);
  flashjit_tensor tdq = tensor4(dq.data(), B, H, S, D),
                  tdk = tensor4(dk.data(), B, H, S, D),
                  tdv = tensor4(dv.data(), B, H, S, D);
  flashjit_grad grads[1] = {{"slope", dslope.data(), H}};
  REQUIRE(flashjit_run_backward(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &tdq,
                                &tdk, &tdv, args, 1, grads, 1,
                                nullptr) == FLASHJIT_OK);
  CHECK(std::isfinite(dq[0]));
  CHECK(dslope[0] != 0.0f);

  SECTION("inputs may alias: q given as o (and as dO) runs, and equals the "
          "same inputs in separate memory") {
    std::vector<float> qo = q, qCopy = q, qCopy2 = q;
    flashjit_tensor tqo = tensor4(qo.data(), B, H, S, D),
                    tqc = tensor4(qCopy.data(), B, H, S, D),
                    tqc2 = tensor4(qCopy2.data(), B, H, S, D);
    std::vector<float> aq(N), ak(N), av(N), bq(N), bk(N), bv(N);
    flashjit_tensor taq = tensor4(aq.data(), B, H, S, D),
                    tak = tensor4(ak.data(), B, H, S, D),
                    tav = tensor4(av.data(), B, H, S, D),
                    tbq = tensor4(bq.data(), B, H, S, D),
                    tbk = tensor4(bk.data(), B, H, S, D),
                    tbv = tensor4(bv.data(), B, H, S, D);
    // Once refused with "o overlaps q".
    INFO(flashjit_last_error());
    REQUIRE(flashjit_run_backward(kernel, &tqo, &tk, &tv, &tqo, &tl, &tqo, &taq,
                                  &tak, &tav, args, 1, nullptr, 0,
                                  nullptr) == FLASHJIT_OK);
    REQUIRE(flashjit_run_backward(kernel, &tqc, &tk, &tv, &tqc2, &tl, &tqc2,
                                  &tbq, &tbk, &tbv, args, 1, nullptr, 0,
                                  nullptr) == FLASHJIT_OK);
    CHECK(aq == bq);
    CHECK(ak == bk);
    CHECK(av == bv);
  }

  SECTION("an output overlapping an input or another output is refused "
          "before anything is written") {
    const float sentinel = -12345.0f;
    std::vector<float> big(3 * N, sentinel);
    std::vector<float> eq(N, sentinel), ek(N, sentinel), ev(N, sentinel),
        eslope(H, sentinel);
    flashjit_tensor teq = tensor4(eq.data(), B, H, S, D),
                    tek = tensor4(ek.data(), B, H, S, D),
                    tev = tensor4(ev.data(), B, H, S, D),
                    // dq and dk sharing one element of big.
        tb0 = tensor4(big.data(), B, H, S, D),
                    tb1 = tensor4(big.data() + N - 1, B, H, S, D);
    auto run = [&](const flashjit_tensor &gq, const flashjit_tensor &gk,
                   const flashjit_tensor &gv, const flashjit_grad *g, int ng) {
      return flashjit_run_backward(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &gq,
                                   &gk, &gv, args, 1, g, ng, nullptr);
    };
    expectRefused(run(tq, tek, tev, nullptr, 0), {"dq overlaps q"});
    // The new user's dk = k (dQ was wrong by 5.38).
    expectRefused(run(teq, tk, tev, nullptr, 0), {"dk overlaps k"});
    // One array as dk and dv (dK was wrong by 4.19).
    expectRefused(run(teq, tek, tek, nullptr, 0), {"dv overlaps dk"});
    expectRefused(run(tb0, tb1, tev, nullptr, 0), {"dk overlaps dq"});
    expectRefused(run(teq, tek, to, nullptr, 0), {"dv overlaps o"});
    expectRefused(run(tdo, tek, tev, nullptr, 0), {"dq overlaps dO"});
    flashjit_tensor lseAsDq = tensor3(lse.data(), B, H, S);
    lseAsDq.rank = 4; // [1, 2, 5, 4] from lse's first element
    lseAsDq.strides[2] = D, lseAsDq.strides[1] = S * D,
    lseAsDq.strides[0] = H * S * D;
    lseAsDq.shape[3] = D;
    expectRefused(run(lseAsDq, tek, tev, nullptr, 0), {"dq overlaps lse"});
    flashjit_tensor zero = teq;
    zero.strides[2] = 0;
    expectRefused(run(zero, tek, tev, nullptr, 0),
                  {"dq.strides[2] = 0", "would overlap"});

    flashjit_grad intoDq[1] = {{"slope", eq.data() + 3, H}};
    expectRefused(run(teq, tek, tev, intoDq, 1),
                  {"grads[0] 'slope' overlaps dq"});
    flashjit_grad intoBuffer[1] = {{"slope", slope.data(), H}};
    expectRefused(run(teq, tek, tev, intoBuffer, 1),
                  {"grads[0] 'slope' overlaps args[0] 'slope'"});
    flashjit_grad intoQ[1] = {{"slope", q.data() + 1, H}};
    expectRefused(run(teq, tek, tev, intoQ, 1),
                  {"grads[0] 'slope' overlaps q"});
    flashjit_grad twice[2] = {{"slope", eslope.data(), H},
                              {"slope", eslope.data(), H}};
    expectRefused(run(teq, tek, tev, twice, 2),
                  {"grads[1] 'slope' repeats grads[0]"});
    for (const std::vector<float> *x : {&eq, &ek, &ev, &eslope, &big})
      for (float e : *x)
        CHECK(e == sentinel);
    // The positive control of the same buffers: disjoint, it runs.
    flashjit_grad ok[1] = {{"slope", eslope.data(), H}};
    REQUIRE(run(teq, tek, tev, ok, 1) == FLASHJIT_OK);
    CHECK(eq == dq);
    CHECK(eslope == dslope);
  }
  flashjit_kernel_destroy(kernel);
}

namespace {
/// A paged problem: batch 2, heads_q 2, heads_kv 1, q_len 1, head_dim 4,
/// 4 pages of 2 tokens; sequence 0 holds 3 tokens in pages {2, 0},
/// sequence 1 holds 4 in pages {1, 3}.
struct Paged {
  static constexpr int64_t B = 2, HQ = 2, D = 4, P = 4, PS = 2, MP = 2;
  std::vector<float> q, kc, vc, o = std::vector<float>(B * HQ * D),
                                lse = std::vector<float>(B * HQ);
  std::vector<int32_t> blockTable = {2, 0, 1, 3}, seqLens = {3, 4};
  explicit Paged(std::mt19937 &rng)
      : q(randomFloats(B * HQ * D, rng)), kc(randomFloats(P * PS * D, rng)),
        vc(randomFloats(P * PS * D, rng)) {}
  flashjit_page_table table() {
    flashjit_page_table t{};
    t.layout = FLASHJIT_PAGED_BLOCK_TABLE;
    t.batch = B;
    t.block_table = blockTable.data();
    t.max_pages = MP;
    t.seq_lens = seqLens.data();
    return t;
  }
  flashjit_tensor cache(float *data) { return tensor4(data, P, 1, PS, D); }
  /// O of sequence b, head h, dim d in double (scale 1/sqrt(4), keys
  /// 0 .. seq_len - 1, all visible to the one query token).
  double expected(int64_t b, int64_t h, int64_t d) const {
    std::vector<double> s;
    double m = -INFINITY;
    for (int64_t t = 0; t < seqLens[b]; ++t) {
      const int64_t page = blockTable[b * MP + t / PS], slot = t % PS;
      double dot = 0;
      for (int64_t e = 0; e < D; ++e)
        dot += double(q[(b * HQ + h) * D + e]) * kc[(page * PS + slot) * D + e];
      s.push_back(dot * 0.5);
      m = std::max(m, s.back());
    }
    double num = 0, den = 0;
    for (int64_t t = 0; t < seqLens[b]; ++t) {
      const int64_t page = blockTable[b * MP + t / PS], slot = t % PS;
      const double w = std::exp(s[t] - m);
      den += w;
      num += w * vc[(page * PS + slot) * D + d];
    }
    return num / den;
  }
};
} // namespace

TEST_CASE("run_paged: o and lse overlap neither each other, q, the caches "
          "nor the page table",
          "[error][aliasing]") {
  flashjit_kernel *kernel = compileCpu(
      "attention(name=e21_paged_alias, causal=bottom_right, head_dim=4, "
      "dtype=fp32, heads_q=2, heads_kv=1)",
      FLASHJIT_COMPILE_VARLEN);
  std::mt19937 rng(77);
  Paged p(rng);
  flashjit_page_table table = p.table();
  flashjit_tensor tq = tensor4(p.q.data(), Paged::B, Paged::HQ, 1, Paged::D),
                  tk = p.cache(p.kc.data()), tv = p.cache(p.vc.data()),
                  to = tensor4(p.o.data(), Paged::B, Paged::HQ, 1, Paged::D),
                  tl = tensor3(p.lse.data(), Paged::B, Paged::HQ, 1);
  // The positive control: disjoint outputs run and match the oracle.
  INFO(flashjit_last_error());
  REQUIRE(flashjit_run_paged(kernel, &tq, &tk, &tv, &table, &to, &tl, nullptr,
                             0) == FLASHJIT_OK);
  for (int64_t b = 0; b < Paged::B; ++b)
    for (int64_t h = 0; h < Paged::HQ; ++h)
      for (int64_t d = 0; d < Paged::D; ++d)
        CHECK(p.o[(b * Paged::HQ + h) * Paged::D + d] ==
              Approx(p.expected(b, h, d)).epsilon(1e-5).margin(1e-6));

  const std::vector<float> kc = p.kc, vc = p.vc, q = p.q;
  auto run = [&](const flashjit_tensor &out, const flashjit_tensor *lse) {
    return flashjit_run_paged(kernel, &tq, &tk, &tv, &table, &out, lse, nullptr,
                              0);
  };
  // lse inside o (O was wrong by 3.33).
  flashjit_tensor lseOnO = tensor3(p.o.data() + 2, Paged::B, Paged::HQ, 1);
  expectRefused(run(to, &lseOnO), {"lse overlaps o"});
  // o in a page of v_cache (silently overwrote the cache).
  flashjit_tensor inCache =
      tensor4(p.vc.data() + 8, Paged::B, Paged::HQ, 1, Paged::D);
  expectRefused(run(inCache, &tl), {"o overlaps v_cache"});
  flashjit_tensor onQ = tensor4(p.q.data(), Paged::B, Paged::HQ, 1, Paged::D);
  expectRefused(run(onQ, nullptr), {"o overlaps q"});
  // lse [2, 2, 1] fp32 on the 4 int32 entries of the block table.
  flashjit_tensor lseOnTable =
      tensor3(p.blockTable.data(), Paged::B, Paged::HQ, 1);
  expectRefused(run(to, &lseOnTable), {"lse overlaps table.block_table"});
  // Stride 0 on an output dim (flashjit_run has always refused it).
  flashjit_tensor zero = to;
  zero.strides[1] = 0;
  expectRefused(run(zero, &tl), {"o.strides[1] = 0", "would overlap"});
  CHECK(p.kc == kc);
  CHECK(p.vc == vc);
  CHECK(p.q == q);
  CHECK(p.seqLens == std::vector<int32_t>{3, 4});

  SECTION("the messages of the paged entry point name what to pass") {
    // Once "pass an fp32 tensor [heads_q, total_q]" (the packed layout).
    expectRefused(flashjit_run_paged(kernel, &tq, &tk, &tv, &table, &to,
                                     nullptr, nullptr, 0),
                  {"lse is NULL", "[batch, heads_q, q_len] = [2, 2, 1]"});
    // Once "q.rank = 5, expected 4 to 4".
    flashjit_tensor rank5 = tq;
    rank5.rank = 5;
    expectRefused(flashjit_run_paged(kernel, &rank5, &tk, &tv, &table, &to, &tl,
                                     nullptr, 0),
                  {"q.rank = 5, expected 4"});
    CHECK(std::string(flashjit_last_error()).find("to 4") == std::string::npos);
    // num_splits on the CPU was ignored; the CLI refuses it.
    expectRefused(flashjit_run_paged_ex(kernel, &tq, &tk, &tv, &table, &to, &tl,
                                        nullptr, 0, 2, nullptr),
                  {"num_splits = 2 on a CPU kernel"});
    CHECK(flashjit_run_paged_ex(kernel, &tq, &tk, &tv, &table, &to, &tl,
                                nullptr, 0, 1, nullptr) == FLASHJIT_OK);
  }

  SECTION("block-table sizes that overflow are named, not wrapped") {
    flashjit_page_table huge = table;
    huge.max_pages = int64_t{1} << 62; // once "max_pages * page_size = 0"
    expectRefused(
        flashjit_run_paged(kernel, &tq, &tk, &tv, &huge, &to, &tl, nullptr, 0),
        {"table.batch = 2", "table.max_pages = 4611686018427387904"});
    huge.max_pages = (int64_t{1} << 62) + 1;
    expectRefused(
        flashjit_run_paged(kernel, &tq, &tk, &tv, &huge, &to, &tl, nullptr, 0),
        {"table.max_pages = 4611686018427387905"});
    // A cache claiming 2^58 pages (no int32 page id reaches past 2^31).
    flashjit_tensor hugeK = tk, hugeV = tv;
    hugeK.shape[0] = hugeV.shape[0] = int64_t{1} << 58;
    expectRefused(flashjit_run_paged(kernel, &tq, &hugeK, &hugeV, &table, &to,
                                     &tl, nullptr, 0),
                  {"k_cache.shape[0] = 288230376151711744"});
  }
  flashjit_kernel_destroy(kernel);
}

TEST_CASE("merge_states: exact in-place aliasing runs, partial overlap is "
          "refused",
          "[error][aliasing]") {
  constexpr int64_t B = 1, H = 2, S = 3, D = 4, N = B * H * S * D;
  std::mt19937 rng(5);
  std::vector<float> o1 = randomFloats(N, rng), o2 = randomFloats(N, rng),
                     l1 = randomFloats(B * H * S, rng),
                     l2 = randomFloats(B * H * S, rng), out(N),
                     outLse(B * H * S);
  flashjit_tensor os[2] = {tensor4(o1.data(), B, H, S, D),
                           tensor4(o2.data(), B, H, S, D)},
                  lses[2] = {tensor3(l1.data(), B, H, S),
                             tensor3(l2.data(), B, H, S)},
                  to = tensor4(out.data(), B, H, S, D),
                  tl = tensor3(outLse.data(), B, H, S);
  REQUIRE(flashjit_merge_states(os, lses, 2, &to, &tl, nullptr, 0, -1,
                                nullptr) == FLASHJIT_OK);
  // The oracle: o = sum_i exp(l_i - lse) o_i.
  for (int64_t r = 0; r < B * H * S; ++r) {
    const double lse = std::log(std::exp(double(l1[r])) + std::exp(l2[r]));
    CHECK(outLse[r] == Approx(lse).epsilon(1e-6));
    for (int64_t d = 0; d < D; ++d)
      CHECK(out[r * D + d] == Approx(std::exp(l1[r] - lse) * o1[r * D + d] +
                                     std::exp(l2[r] - lse) * o2[r * D + d])
                                  .epsilon(1e-5)
                                  .margin(1e-6));
  }

  SECTION("in place (README: the outputs may be exactly one of the inputs)") {
    std::vector<float> a = o1, la = l1;
    flashjit_tensor in[2] = {tensor4(a.data(), B, H, S, D), os[1]},
                    inL[2] = {tensor3(la.data(), B, H, S), lses[1]};
    REQUIRE(flashjit_merge_states(in, inL, 2, &in[0], &inL[0], nullptr, 0, -1,
                                  nullptr) == FLASHJIT_OK);
    CHECK(a == out);
    CHECK(la == outLse);
  }

  SECTION("partial overlap") {
    std::vector<float> before1 = o1, before2 = o2, beforeL1 = l1;
    // lse_out inside o_out (O was wrong by 2.4-2.6).
    flashjit_tensor lseInOut = tensor3(out.data(), B, H, S);
    expectRefused(flashjit_merge_states(os, lses, 2, &to, &lseInOut, nullptr, 0,
                                        -1, nullptr),
                  {"lse_out overlaps o_out"});
    // o_out one row past o[1]: the same memory, another view.
    std::vector<float> shifted(N + D);
    flashjit_tensor s1 = tensor4(shifted.data(), B, H, S, D),
                    s2 = tensor4(shifted.data() + D, B, H, S, D);
    flashjit_tensor ins[2] = {os[0], s1};
    expectRefused(
        flashjit_merge_states(ins, lses, 2, &s2, &tl, nullptr, 0, -1, nullptr),
        {"o_out overlaps o[1]"});
    // o_out [1, 2, 1, 4] over the LSE of the first state.
    std::vector<float> lbig(B * H * D, 0.0f);
    flashjit_tensor overL = tensor4(lbig.data(), B, H, 1, D);
    flashjit_tensor smallOs[2] = {tensor4(o1.data(), B, H, 1, D),
                                  tensor4(o2.data(), B, H, 1, D)},
                    smallL[2] = {tensor3(lbig.data(), B, H, 1),
                                 tensor3(l2.data(), B, H, 1)};
    std::vector<float> smallLse(B * H);
    flashjit_tensor tsl = tensor3(smallLse.data(), B, H, 1);
    expectRefused(flashjit_merge_states(smallOs, smallL, 2, &overL, &tsl,
                                        nullptr, 0, -1, nullptr),
                  {"o_out overlaps lse[0]"});
    CHECK(o1 == before1);
    CHECK(o2 == before2);
    CHECK(l1 == beforeL1);
  }
}

TEST_CASE("paged_append: the caches overlap neither the new tokens, the "
          "table nor each other",
          "[error][aliasing]") {
  std::mt19937 rng(9);
  Paged p(rng);
  flashjit_page_table table = p.table();
  std::vector<float> kn = randomFloats(Paged::B * Paged::D, rng),
                     vn = randomFloats(Paged::B * Paged::D, rng);
  flashjit_tensor tkn = tensor4(kn.data(), Paged::B, 1, 1, Paged::D),
                  tvn = tensor4(vn.data(), Paged::B, 1, 1, Paged::D),
                  tk = p.cache(p.kc.data()), tv = p.cache(p.vc.data());
  const std::vector<float> kc = p.kc;
  // k_cache is v_cache.
  expectRefused(
      flashjit_paged_append(&tkn, &tvn, &tk, &tk, &table, -1, nullptr),
      {"v_cache and k_cache are the same memory"});
  // k_new inside k_cache.
  flashjit_tensor inside = tensor4(p.kc.data() + 4, Paged::B, 1, 1, Paged::D);
  expectRefused(
      flashjit_paged_append(&inside, &tvn, &tk, &tv, &table, -1, nullptr),
      {"k_cache overlaps k_new"});
  CHECK(p.kc == kc);

  // The positive control: FlashInfer's interleaved [pages, 2, heads,
  // page_size, dim] cache, K and V views with equal strides, runs and puts
  // each new token at position seq_len - 1 of its sequence.
  std::vector<float> kv(Paged::P * 2 * Paged::PS * Paged::D, 0.0f);
  flashjit_tensor k2 = p.cache(kv.data()),
                  v2 = p.cache(kv.data() + Paged::PS * Paged::D);
  k2.strides[0] = v2.strides[0] = 2 * Paged::PS * Paged::D;
  INFO(flashjit_last_error());
  REQUIRE(flashjit_paged_append(&tkn, &tvn, &k2, &v2, &table, -1, nullptr) ==
          FLASHJIT_OK);
  for (int64_t b = 0; b < Paged::B; ++b) {
    const int64_t t = p.seqLens[b] - 1;
    const int64_t page = p.blockTable[b * Paged::MP + t / Paged::PS],
                  slot = t % Paged::PS;
    for (int64_t d = 0; d < Paged::D; ++d) {
      const int64_t at = page * 2 * Paged::PS * Paged::D + slot * Paged::D + d;
      CHECK(kv[at] == kn[b * Paged::D + d]);
      CHECK(kv[at + Paged::PS * Paged::D] == vn[b * Paged::D + d]);
    }
  }
}
