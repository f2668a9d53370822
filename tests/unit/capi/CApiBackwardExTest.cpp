//===- CApiBackwardExTest.cpp - flashjit_run_backward_ex on the CPU -------===//
//
// The backward of block-sparse, varlen and block-sparse varlen kernels
// through the C API (flashjit_run_backward_ex), checked against the float64
// reference backward given the same block mask and cu_seqlens
// (referenceAttentionBackward / referenceVarlenAttentionBackward): a causal
// document mask with the mask built from it (flashjit_build_block_mask:
// empty, partial and full tiles), a BSR layout that drops tiles holding
// allowed keys (so a backward that ignored the mask would differ from the
// reference), GQA, odd lengths, an f32 buffer's gradient, and varlen
// batches with odd lengths and empty sequences. O and LSE come from the
// kernel's own forward with the same mask; dQ, dK, dV and the buffer
// gradient are poisoned with NaN first. Also every mode error: a missing or
// extra mask or cu_seqlens (naming the field and value), the dense entry
// point refusing these kernels, and the aliasing rule with cu_seqlens as
// inputs.
//
//===----------------------------------------------------------------------===//
#include "flashjit-c/flashjit.h"

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;

namespace {

constexpr int64_t D = 8, HQ = 4, HKV = 2;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Document mask with causality and an ALiBi-style f32 buffer (so the call
/// also has a buffer gradient), GQA 4:2.
const char *kDocSpec =
    "attention(name=capi_bwd_ex_doc, mask=(buffer<i32>(doc)[q_idx] == "
    "buffer<i32>(doc)[kv_idx]), score=(score - (buffer<f32>(slope)[head] * "
    "cast<f32>(abs((q_idx - kv_idx))))), causal=top_left, head_dim=8, "
    "dtype=fp32, heads_q=4, heads_kv=2)";

flashjit_tensor ctensor(float *data, int rank, std::vector<int64_t> shape) {
  flashjit_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = FLASHJIT_FP32;
  t.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

TensorRef ref(const flashjit_tensor &t) {
  TensorRef r;
  r.data = t.data;
  r.dtype = DType::F32;
  r.rank = t.rank;
  for (int i = 0; i < 4; ++i) {
    r.shape[i] = i < t.rank ? t.shape[i] : 1;
    r.strides[i] = i < t.rank ? t.strides[i] : 1;
  }
  return r;
}

std::vector<float> randomVector(std::mt19937_64 &rng, size_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// |got - want| <= 2e-4 * (1 + max |want|) everywhere, and no NaN.
void checkClose(const char *name, const std::vector<float> &got,
                const std::vector<double> &want) {
  REQUIRE(got.size() == want.size());
  double maxRef = 0, maxErr = 0;
  size_t nan = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    maxRef = std::max(maxRef, std::fabs(want[i]));
    if (std::isnan(got[i]))
      ++nan;
    else
      maxErr = std::max(maxErr, std::fabs(got[i] - want[i]));
  }
  INFO(name << ": max |err| " << maxErr << ", max |ref| " << maxRef << ", NaN "
            << nan);
  CHECK(nan == 0);
  CHECK(maxErr <= 2e-4 * (1.0 + maxRef));
  CHECK(maxRef > 0); // a test of all-zero gradients could not fail
}

/// The inputs, forward outputs and gradient arrays of one call.
struct Call {
  std::vector<float> q, k, v, o, lse, dO, dq, dk, dv;
  std::vector<int32_t> doc;
  std::vector<float> slope, dslope;
  flashjit_tensor tq, tk, tv, to, tl, tdo, tdq, tdk, tdv;
  flashjit_arg args[2];

  /// Dense layout [B, H, S, D] (varlen: [total, H, D] with B = 0).
  Call(std::mt19937_64 &rng, int64_t b, int64_t sq, int64_t sk,
       std::vector<int32_t> docs) {
    bool varlen = b == 0;
    int64_t nq = (varlen ? 1 : b) * sq * HQ * D,
            nk = (varlen ? 1 : b) * sk * HKV * D;
    q = randomVector(rng, nq), k = randomVector(rng, nk),
    v = randomVector(rng, nk), dO = randomVector(rng, nq);
    o.assign(nq, kNaN), dq.assign(nq, kNaN), dk.assign(nk, kNaN),
        dv.assign(nk, kNaN), lse.assign(nq / D, kNaN);
    slope = {0.05f, 0.1f, 0.2f, 0.4f};
    dslope.assign(HQ, kNaN);
    doc = std::move(docs);
    if (varlen) {
      tq = ctensor(q.data(), 3, {sq, HQ, D}),
      tk = ctensor(k.data(), 3, {sk, HKV, D}),
      tv = ctensor(v.data(), 3, {sk, HKV, D}),
      to = ctensor(o.data(), 3, {sq, HQ, D}),
      tl = ctensor(lse.data(), 2, {HQ, sq}),
      tdo = ctensor(dO.data(), 3, {sq, HQ, D});
      tdq = ctensor(dq.data(), 3, {sq, HQ, D}),
      tdk = ctensor(dk.data(), 3, {sk, HKV, D}),
      tdv = ctensor(dv.data(), 3, {sk, HKV, D});
    } else {
      tq = ctensor(q.data(), 4, {b, HQ, sq, D}),
      tk = ctensor(k.data(), 4, {b, HKV, sk, D}),
      tv = ctensor(v.data(), 4, {b, HKV, sk, D}),
      to = ctensor(o.data(), 4, {b, HQ, sq, D}),
      tl = ctensor(lse.data(), 3, {b, HQ, sq}),
      tdo = ctensor(dO.data(), 4, {b, HQ, sq, D});
      tdq = ctensor(dq.data(), 4, {b, HQ, sq, D}),
      tdk = ctensor(dk.data(), 4, {b, HKV, sk, D}),
      tdv = ctensor(dv.data(), 4, {b, HKV, sk, D});
    }
    std::memset(args, 0, sizeof args);
    args[0].name = "doc";
    args[0].kind = FLASHJIT_ARG_BUFFER_I32;
    args[0].data = doc.data();
    args[0].size = static_cast<int64_t>(doc.size());
    args[1].name = "slope";
    args[1].kind = FLASHJIT_ARG_BUFFER_F32;
    args[1].data = slope.data();
    args[1].size = HQ;
  }

  Arguments arguments() const {
    Arguments a;
    a.bind("doc", doc.data(), static_cast<int64_t>(doc.size()));
    a.bind("slope", slope.data(), HQ);
    return a;
  }

  flashjit_status backward(const flashjit_kernel *kernel, const int32_t *cuQ,
                           const int32_t *cuK, int64_t numSeqs,
                           const flashjit_block_mask *mask) {
    flashjit_grad grads[1] = {{"slope", dslope.data(), HQ}};
    return flashjit_run_backward_ex(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &tdq,
                                    &tdk, &tdv, cuQ, cuK, numSeqs, mask, args,
                                    2, grads, 1, nullptr);
  }
};

flashjit_kernel *compileKernel(const char *spec, unsigned flags) {
  flashjit_kernel *k = nullptr;
  INFO(flashjit_last_error());
  REQUIRE(flashjit_compile_ex(spec, "cpu", flags, &k) == FLASHJIT_OK);
  return k;
}

void checkAgainst(const Call &c, const ReferenceGradients &r) {
  checkClose("dq", c.dq, r.dq);
  checkClose("dk", c.dk, r.dk);
  checkClose("dv", c.dv, r.dv);
  checkClose("dslope", c.dslope, r.dBuffers.at("slope"));
}

/// Documents of the given lengths over one sequence of their sum.
std::vector<int32_t> documents(std::initializer_list<int> lengths) {
  std::vector<int32_t> doc;
  int id = 0;
  for (int n : lengths) {
    doc.insert(doc.end(), n, id);
    ++id;
  }
  return doc;
}

} // namespace

TEST_CASE("flashjit_run_backward_ex: block-sparse document mask against the "
          "float64 reference with the same mask",
          "[capi][backward]") {
  std::mt19937_64 rng(20261202);
  const int64_t B = 2, S = 203; // 4 tiles of 64, the last partial
  flashjit_kernel *kernel =
      compileKernel(kDocSpec, FLASHJIT_COMPILE_BLOCK_SPARSE);
  Call c(rng, B, S, S, documents({70, 1, 60, 72}));
  AttentionSpec spec = parseSpec(kDocSpec);
  int64_t bm = 0, bn = 0;
  REQUIRE(flashjit_kernel_tiles(kernel, &bm, &bn) == FLASHJIT_OK);

  SECTION("the mask built from the spec's mask") {
    flashjit_block_mask *mask = nullptr;
    REQUIRE(flashjit_build_block_mask(kernel, B, S, S, c.args, 2, nullptr,
                                      &mask) == FLASHJIT_OK);
    // Cross-document tiles are empty: the mask must skip some.
    flashjit_block_mask_info info;
    REQUIRE(flashjit_block_mask_get_info(mask, &info) == FLASHJIT_OK);
    std::vector<int32_t> n(info.batch * info.heads * info.num_q_tiles),
        nf(n.size());
    REQUIRE(flashjit_block_mask_copy(mask, n.data(), nullptr, nf.data(),
                                     nullptr) == FLASHJIT_OK);
    int64_t listed = 0;
    for (size_t i = 0; i < n.size(); ++i)
      listed += n[i] + nf[i];
    int64_t causalTiles = 0;
    for (int64_t m = 0; m < info.num_q_tiles; ++m)
      causalTiles += std::min(info.num_kv_tiles, (m * bm + bm - 1) / bn + 1);
    CHECK(listed < info.batch * info.heads * causalTiles);

    REQUIRE(flashjit_run_block_sparse(kernel, &c.tq, &c.tk, &c.tv, &c.to, &c.tl,
                                      mask, c.args, 2, nullptr) == FLASHJIT_OK);
    INFO(flashjit_last_error());
    REQUIRE(c.backward(kernel, nullptr, nullptr, 0, mask) == FLASHJIT_OK);
    BlockMask host = referenceBlockMask(spec, bm, bn, B, S, S, c.arguments());
    checkAgainst(c, referenceAttentionBackward(spec, ref(c.tq), ref(c.tk),
                                               ref(c.tv), ref(c.tdo),
                                               c.arguments(), {}, &host));
    flashjit_block_mask_destroy(mask);
  }

  SECTION("a BSR layout that drops tiles with allowed keys") {
    // Per head: row m lists key tiles 0..m except tile m - 1 (m >= 1): the
    // diagonal's left neighbour holds allowed keys of the same document.
    int64_t qt = (S + bm - 1) / bm;
    std::vector<int32_t> offsets = {0}, cols;
    for (int64_t h = 0; h < HQ; ++h)
      for (int64_t m = 0; m < qt; ++m) {
        for (int64_t t = 0; t * bn < std::min<int64_t>(S, (m + 1) * bm); ++t)
          if (t != m - 1 || h % 2 == 1)
            cols.push_back(static_cast<int32_t>(t));
        offsets.push_back(static_cast<int32_t>(cols.size()));
      }
    flashjit_block_mask *mask = nullptr;
    REQUIRE(flashjit_block_mask_from_bsr(
                kernel, HQ, S, S, offsets.data(), cols.data(),
                static_cast<int64_t>(cols.size()), &mask) == FLASHJIT_OK);
    REQUIRE(flashjit_run_block_sparse(kernel, &c.tq, &c.tk, &c.tv, &c.to, &c.tl,
                                      mask, c.args, 2, nullptr) == FLASHJIT_OK);
    INFO(flashjit_last_error());
    REQUIRE(c.backward(kernel, nullptr, nullptr, 0, mask) == FLASHJIT_OK);
    BsrLayout layout;
    layout.blockM = bm, layout.blockN = bn, layout.heads = HQ;
    layout.numQTiles = qt, layout.numKvTiles = (S + bn - 1) / bn;
    layout.rowOffsets = offsets, layout.colIndices = cols;
    BlockMask host = blockMaskFromBsr(layout, S, S);
    ReferenceGradients sparse =
        referenceAttentionBackward(spec, ref(c.tq), ref(c.tk), ref(c.tv),
                                   ref(c.tdo), c.arguments(), {}, &host);
    checkAgainst(c, sparse);
    // The dropped tiles change the gradients: the dense reference differs.
    ReferenceGradients dense = referenceAttentionBackward(
        spec, ref(c.tq), ref(c.tk), ref(c.tv), ref(c.tdo), c.arguments());
    double diff = 0;
    for (size_t i = 0; i < dense.dk.size(); ++i)
      diff = std::max(diff, std::fabs(dense.dk[i] - sparse.dk[i]));
    CHECK(diff > 1e-2);
    flashjit_block_mask_destroy(mask);
  }
  flashjit_kernel_destroy(kernel);
}

TEST_CASE("flashjit_run_backward_ex: varlen with odd lengths and empty "
          "sequences against the float64 reference",
          "[capi][backward]") {
  std::mt19937_64 rng(7);
  // Sequence 1 has no queries, sequence 3 no keys, sequence 4 neither.
  std::vector<int32_t> cuQ = {0, 37, 37, 128, 133, 133},
                       cuK = {0, 50, 63, 154, 154, 154};
  const int64_t numSeqs = 5, totalQ = 133, totalK = 154;
  // The document ids are indexed by per-sequence positions (< 91).
  std::vector<int32_t> docs = documents({20, 30, 41});
  for (bool sparse : {false, true}) {
    DYNAMIC_SECTION((sparse ? "block-sparse varlen" : "varlen")) {
      unsigned flags = FLASHJIT_COMPILE_VARLEN |
                       (sparse ? unsigned{FLASHJIT_COMPILE_BLOCK_SPARSE} : 0u);
      flashjit_kernel *kernel = compileKernel(kDocSpec, flags);
      Call c(rng, 0, totalQ, totalK, docs);
      flashjit_block_mask *mask = nullptr;
      if (sparse)
        REQUIRE(flashjit_build_varlen_block_mask(kernel, cuQ.data(), cuK.data(),
                                                 numSeqs, c.args, 2, nullptr,
                                                 &mask) == FLASHJIT_OK);
      REQUIRE(flashjit_run_varlen(kernel, &c.tq, &c.tk, &c.tv, &c.to, &c.tl,
                                  cuQ.data(), cuK.data(), numSeqs, mask, c.args,
                                  2, nullptr) == FLASHJIT_OK);
      INFO(flashjit_last_error());
      REQUIRE(c.backward(kernel, cuQ.data(), cuK.data(), numSeqs, mask) ==
              FLASHJIT_OK);
      AttentionSpec spec = parseSpec(kDocSpec);
      std::optional<BlockMask> host;
      int64_t bm = 0, bn = 0;
      REQUIRE(flashjit_kernel_tiles(kernel, &bm, &bn) == FLASHJIT_OK);
      if (sparse)
        host = referenceVarlenBlockMask(spec, bm, bn, cuQ, cuK, c.arguments());
      VarlenReferenceGradients r = referenceVarlenAttentionBackward(
          spec, ref(c.tq), ref(c.tk), ref(c.tv), ref(c.tdo), cuQ, cuK,
          c.arguments(), {}, host ? &*host : nullptr);
      checkClose("dq", c.dq, r.dq);
      checkClose("dk", c.dk, r.dk);
      checkClose("dv", c.dv, r.dv);
      checkClose("dslope", c.dslope, r.dBuffers.at("slope"));
      // Keys of sequence 1 (no queries) get exactly zero.
      for (int64_t t = 50; t < 63; ++t)
        for (int64_t i = 0; i < HKV * D; ++i)
          CHECK(c.dk[t * HKV * D + i] == 0.0f);
      flashjit_block_mask_destroy(mask);
      flashjit_kernel_destroy(kernel);
    }
  }
}

namespace {
/// The status is FLASHJIT_USER_ERROR and the message holds every part.
void expectUserError(flashjit_status s,
                     std::initializer_list<const char *> parts) {
  std::string message = flashjit_last_error();
  INFO(message);
  CHECK(s == FLASHJIT_USER_ERROR);
  for (const char *p : parts)
    CHECK(message.find(p) != std::string::npos);
}
} // namespace

TEST_CASE("flashjit_run_backward_ex: mode errors name the field and value",
          "[capi][backward]") {
  std::mt19937_64 rng(3);
  const int64_t S = 70;
  flashjit_kernel *sparse =
      compileKernel(kDocSpec, FLASHJIT_COMPILE_BLOCK_SPARSE);
  flashjit_kernel *dense = compileKernel(kDocSpec, 0);
  flashjit_kernel *varlen = compileKernel(kDocSpec, FLASHJIT_COMPILE_VARLEN);
  Call c(rng, 1, S, S, documents({30, 40}));
  flashjit_block_mask *mask = nullptr;
  REQUIRE(flashjit_build_block_mask(sparse, 1, S, S, c.args, 2, nullptr,
                                    &mask) == FLASHJIT_OK);
  int32_t cu[2] = {0, static_cast<int32_t>(S)};

  expectUserError(c.backward(sparse, nullptr, nullptr, 0, nullptr),
                  {"mask is NULL", "capi_bwd_ex_doc", "block-sparse"});
  expectUserError(c.backward(dense, nullptr, nullptr, 0, mask),
                  {"mask given", "not compiled block-sparse"});
  expectUserError(c.backward(dense, cu, cu, 1, nullptr),
                  {"num_seqs = 1", "not compiled varlen"});
  expectUserError(c.backward(varlen, nullptr, cu, 1, nullptr),
                  {"cu_seqlens_q is NULL"});
  expectUserError(c.backward(varlen, cu, cu, -1, nullptr),
                  {"num_seqs = -1 is negative"});
  expectUserError(c.backward(nullptr, nullptr, nullptr, 0, nullptr),
                  {"flashjit_run_backward_ex: kernel is NULL"});
  // The dense entry point refuses these kernels and names the new one.
  flashjit_grad none[1] = {{"slope", c.dslope.data(), HQ}};
  expectUserError(flashjit_run_backward(sparse, &c.tq, &c.tk, &c.tv, &c.to,
                                        &c.tl, &c.tdo, &c.tdq, &c.tdk, &c.tdv,
                                        c.args, 2, none, 1, nullptr),
                  {"dense-call kernels only", "flashjit_run_backward_ex"});
  // A mask made for another call's extents (seqlen_q S + 64).
  flashjit_block_mask *other = nullptr;
  int32_t offsets[4] = {0, 1, 2, 3}, cols[3] = {0, 0, 0};
  REQUIRE(flashjit_block_mask_from_bsr(sparse, 1, S + 64, S, offsets, cols, 3,
                                       &other) == FLASHJIT_OK);
  expectUserError(c.backward(sparse, nullptr, nullptr, 0, other), {"seqlen"});
  // Outputs must not overlap inputs, cu_seqlens included; nothing written.
  {
    Call w(rng, 0, S, S, documents({30, 40}));
    // cu_seqlens_q in a buffer as large as dk, so that dk's bytes cover
    // cu_seqlens_q's and nothing else (a two-element vector let dk's span
    // reach into whatever the heap put after it: v, in one CI run).
    std::vector<int32_t> cuq(w.dk.size(), 0);
    cuq[1] = static_cast<int32_t>(S);
    std::vector<float> before = w.dq;
    w.tdk.data = cuq.data(); // dk over cu_seqlens_q's bytes
    expectUserError(w.backward(varlen, cuq.data(), cuq.data(), 1, nullptr),
                    {"dk overlaps cu_seqlens_q"});
    CHECK(std::isnan(w.dq[0]));
  }
  flashjit_block_mask_destroy(other);
  flashjit_block_mask_destroy(mask);
  flashjit_kernel_destroy(varlen);
  flashjit_kernel_destroy(dense);
  flashjit_kernel_destroy(sparse);
}
