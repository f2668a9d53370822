//===- PagedTest.cpp - Page tables, the paged oracle, merge_states --------===//
//
// The paged oracle is checked against the plain reference on K/V gathered
// here by the test's own code (per sequence, batch 1), over random page
// orders, shared pages, both cache layouts, both page-table layouts and
// NaN-filled unused slots. mergeStates is checked by splitting the keys of a
// problem, running the reference on each chunk and merging: the result must
// equal the reference on all keys.
//
//===----------------------------------------------------------------------===//
#include "ReferenceSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Paged.h"
#include "flashjit/frontend/Reference.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

using namespace flashjit;
using namespace flashjit::test;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// A random paged problem: B sequences with lengths \p lens, pages drawn in
/// random order (with \p shared, sequence 1 reuses sequence 0's first page
/// when both hold at least a full page), every unused slot NaN.
struct PagedProblem {
  int64_t pageSize;
  std::vector<int64_t> lens;
  std::vector<std::vector<int32_t>> pagesOf; // page ids per sequence
  int64_t numPages = 0;
  // CSR and block-table forms of the same table.
  std::vector<int32_t> indptr, indices, lastLen, table, seqLens;
  int64_t maxPages = 0;

  PagedProblem(std::mt19937_64 &rng, int64_t pageSize_,
               std::vector<int64_t> lens_, bool shared)
      : pageSize(pageSize_), lens(std::move(lens_)) {
    int64_t total = 0;
    for (int64_t n : lens)
      total += (n + pageSize - 1) / pageSize;
    numPages = total + 3; // a few pages nobody uses
    std::vector<int32_t> perm(static_cast<size_t>(numPages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    size_t next = 0;
    for (int64_t n : lens) {
      std::vector<int32_t> ps;
      for (int64_t p = 0; p < (n + pageSize - 1) / pageSize; ++p)
        ps.push_back(perm[next++]);
      pagesOf.push_back(ps);
      maxPages = std::max<int64_t>(maxPages, static_cast<int64_t>(ps.size()));
    }
    if (shared && lens.size() >= 2 && lens[0] >= pageSize &&
        lens[1] >= pageSize)
      pagesOf[1][0] = pagesOf[0][0]; // a shared prefix page
    maxPages += 1;                   // padding columns in the block table
    indptr.push_back(0);
    for (size_t b = 0; b < lens.size(); ++b) {
      for (int32_t p : pagesOf[b])
        indices.push_back(p);
      indptr.push_back(static_cast<int32_t>(indices.size()));
      lastLen.push_back(
          lens[b] == 0 ? 0
                       : static_cast<int32_t>((lens[b] - 1) % pageSize + 1));
      for (int64_t c = 0; c < maxPages; ++c)
        table.push_back(
            c < static_cast<int64_t>(pagesOf[b].size()) ? pagesOf[b][c] : -1);
      seqLens.push_back(static_cast<int32_t>(lens[b]));
    }
  }
  PageList csr() const {
    return checkPagedCsr({indptr, indices, lastLen},
                         static_cast<int64_t>(lens.size()), numPages, pageSize);
  }
  PageList blockTable() const {
    return checkBlockTable({table, maxPages, seqLens},
                           static_cast<int64_t>(lens.size()), numPages,
                           pageSize);
  }
};

/// Fills the used slots of \p cache ([pages, heads, page_size, dim] view)
/// with values that depend on (sequence-independent) page and slot, and
/// every other slot with NaN. Shared pages hold one value for all sharers.
void fillCache(HostTensor &cache, const PagedProblem &pp,
               std::mt19937_64 &rng) {
  cache.fill([](int64_t, int64_t, int64_t, int64_t) { return kNaN; });
  for (size_t b = 0; b < pp.lens.size(); ++b)
    for (int64_t j = 0; j < pp.lens[b]; ++j) {
      const int32_t page = pp.pagesOf[b][j / pp.pageSize];
      for (int64_t h = 0; h < cache.ref.shape[1]; ++h)
        for (int64_t d = 0; d < cache.ref.shape[3]; ++d)
          if (std::isnan(cache.get(page, h, j % pp.pageSize, d)))
            cache.set(page, h, j % pp.pageSize, d,
                      static_cast<float>(uniform(rng, -1.0, 1.0)));
    }
}

/// The reference of sequence \p b alone, on K/V gathered by this test.
ReferenceOutput perSequence(const AttentionSpec &spec, const HostTensor &q,
                            const HostTensor &kc, const HostTensor &vc,
                            const PagedProblem &pp, int64_t b,
                            const Arguments &args) {
  const int64_t hq = q.ref.shape[1], qLen = q.ref.shape[2];
  const int64_t hk = kc.ref.shape[1], d = kc.ref.shape[3];
  HostTensor qb(q.ref.dtype, {1, hq, qLen, d});
  qb.fill([&](int64_t, int64_t h, int64_t i, int64_t x) {
    return static_cast<float>(q.get(b, h, i, x));
  });
  HostTensor kb(kc.ref.dtype, {1, hk, pp.lens[b], d}),
      vb(vc.ref.dtype, {1, hk, pp.lens[b], vc.ref.shape[3]});
  auto gather = [&](const HostTensor &c) {
    return [&](int64_t, int64_t h, int64_t j, int64_t x) {
      return static_cast<float>(
          c.get(pp.pagesOf[b][j / pp.pageSize], h, j % pp.pageSize, x));
    };
  };
  kb.fill(gather(kc));
  vb.fill(gather(vc));
  return referenceAttention(spec, qb.ref, kb.ref, vb.ref, args);
}

void expectSame(const ReferenceOutput &paged, const ReferenceOutput &one,
                int64_t b) {
  const auto &s = one.shape;
  for (int64_t h = 0; h < s.headsQ; ++h)
    for (int64_t i = 0; i < s.seqlenQ; ++i) {
      INFO("b " << b << " h " << h << " i " << i);
      const double lp = const_cast<ReferenceOutput &>(paged).lseAt(b, h, i);
      const double lo = const_cast<ReferenceOutput &>(one).lseAt(0, h, i);
      if (std::isinf(lo))
        CHECK(lp == lo);
      else
        CHECK(lp == Approx(lo).epsilon(1e-12).margin(1e-12));
      for (int64_t d = 0; d < s.headDimV; ++d) {
        const double op = const_cast<ReferenceOutput &>(paged).oAt(b, h, i, d);
        REQUIRE(std::isfinite(op));
        CHECK(op == Approx(const_cast<ReferenceOutput &>(one).oAt(0, h, i, d))
                        .epsilon(1e-12)
                        .margin(1e-12));
      }
    }
}

} // namespace

TEST_CASE("paged: page_size must be a power of two in 1..256",
          "[frontend][paged]") {
  for (int64_t ok : {1, 2, 16, 64, 256})
    CHECK_NOTHROW(checkPageSize(ok));
  for (int64_t bad : {0, -16, 3, 48, 512})
    expectUserError([&] { checkPageSize(bad); },
                    {"page_size", std::to_string(bad).c_str()});
}

TEST_CASE("paged: CSR page tables are validated entry by entry",
          "[frontend][paged]") {
  std::vector<int32_t> indptr{0, 2, 3}, indices{0, 5, 2}, last{16, 7};
  PageList ok = checkPagedCsr({indptr, indices, last}, 2, 6, 16);
  CHECK(ok.seqLens == std::vector<int64_t>{32, 7});
  CHECK(ok.pageOf(0, 17) == 5);
  CHECK(ok.pageOf(1, 6) == 2);
  CHECK(ok.maxSeqLen() == 32);
  // A page id outside the cache.
  std::vector<int32_t> badIdx{0, 6, 2};
  expectUserError(
      [&] {
        checkPagedCsr({indptr, badIdx, last}, 2, 6, 16);
      },
      {"kv_indices[1] = 6", "[0, 6)"});
  std::vector<int32_t> negIdx{0, 5, -1};
  expectUserError(
      [&] {
        checkPagedCsr({indptr, negIdx, last}, 2, 6, 16);
      },
      {"kv_indices[2] = -1"});
  // last_page_len beyond the page, or 0 on a sequence that has pages.
  std::vector<int32_t> longLast{17, 7}, zeroLast{16, 0};
  expectUserError(
      [&] {
        checkPagedCsr({indptr, indices, longLast}, 2, 6, 16);
      },
      {"kv_last_page_len[0] = 17", "16"});
  expectUserError(
      [&] {
        checkPagedCsr({indptr, indices, zeroLast}, 2, 6, 16);
      },
      {"kv_last_page_len[1] = 0"});
  // indptr: first entry, order, size, bound.
  std::vector<int32_t> ip1{1, 2, 3}, ip2{0, 3, 2}, ip3{0, 2}, ip4{0, 2, 4};
  expectUserError(
      [&] {
        checkPagedCsr({ip1, indices, last}, 2, 6, 16);
      },
      {"kv_indptr[0] = 1"});
  expectUserError(
      [&] {
        checkPagedCsr({ip2, indices, last}, 2, 6, 16);
      },
      {"kv_indptr[2] = 2 < kv_indptr[1] = 3"});
  expectUserError(
      [&] {
        checkPagedCsr({ip3, indices, last}, 2, 6, 16);
      },
      {"kv_indptr has 2 entries", "3"});
  expectUserError(
      [&] {
        checkPagedCsr({ip4, indices, last}, 2, 6, 16);
      },
      {"kv_indptr[2] = 4", "3 entries of kv_indices"});
  // A sequence without pages must say last_page_len 0 and has length 0.
  std::vector<int32_t> ipEmpty{0, 0, 3}, lastEmpty{0, 7};
  CHECK(checkPagedCsr({ipEmpty, indices, lastEmpty}, 2, 6, 16).seqLens ==
        std::vector<int64_t>{0, 39});
  expectUserError(
      [&] {
        checkPagedCsr({indptr, indices, last}, 2, 6, 12);
      },
      {"page_size = 12"});
}

TEST_CASE("paged: block tables are validated, unused columns are not read",
          "[frontend][paged]") {
  // Row 1 holds garbage (-1, 99) past its one used page.
  std::vector<int32_t> table{3, 1, 0, 4, -1, 99}, lens{40, 5};
  PageList ok = checkBlockTable({table, 3, lens}, 2, 5, 16);
  CHECK(ok.seqLens == std::vector<int64_t>{40, 5});
  CHECK(ok.pageOf(0, 39) == 0);
  CHECK(ok.pageOf(1, 0) == 4);
  std::vector<int32_t> tooLong{49, 5};
  expectUserError(
      [&] {
        checkBlockTable({table, 3, tooLong}, 2, 5, 16);
      },
      {"seq_lens[0] = 49", "48"});
  std::vector<int32_t> negLen{40, -1};
  expectUserError(
      [&] {
        checkBlockTable({table, 3, negLen}, 2, 5, 16);
      },
      {"seq_lens[1] = -1"});
  std::vector<int32_t> reach{40, 17}; // now reads row 1 column 1 = -1
  expectUserError(
      [&] {
        checkBlockTable({table, 3, reach}, 2, 5, 16);
      },
      {"block_table[1][1] = -1"});
  std::vector<int32_t> bigId{3, 1, 5, 4, -1, 99};
  expectUserError(
      [&] {
        checkBlockTable({bigId, 3, lens}, 2, 5, 16);
      },
      {"block_table[0][2] = 5", "[0, 5)"});
  expectUserError(
      [&] {
        checkBlockTable({table, 2, lens}, 2, 5, 16);
      },
      {"block_table has 6 entries", "2 * 2"});
  expectUserError(
      [&] {
        checkBlockTable({table, 3, lens}, 2, 5, 0);
      },
      {"page_size = 0"});
}

TEST_CASE("paged: the cache tensors are checked against the spec",
          "[frontend][paged]") {
  AttentionSpec spec;
  spec.headDimQK = spec.headDimV = 8;
  spec.headsQ = 4;
  spec.headsKV = 2;
  HostTensor q(DType::BF16, {2, 4, 1, 8});
  HostTensor kc(DType::BF16, {6, 2, 16, 8}), vc(DType::BF16, {6, 2, 16, 8});
  PagedShape s = checkPagedTensors(spec, q.ref, kc.ref, vc.ref);
  CHECK(s.numPages == 6);
  CHECK(s.pageSize == 16);
  CHECK(s.qLen == 1);
  HostTensor v5(DType::BF16, {5, 2, 16, 8}), v8(DType::BF16, {6, 2, 8, 8}),
      k3(DType::BF16, {6, 3, 16, 8}), k24(DType::BF16, {6, 2, 24, 8}),
      v24(DType::BF16, {6, 2, 24, 8}), kf(DType::F16, {6, 2, 16, 8});
  expectUserError([&] { checkPagedTensors(spec, q.ref, kc.ref, v5.ref); },
                  {"v_cache.shape[0] = 5", "num_pages"});
  expectUserError([&] { checkPagedTensors(spec, q.ref, kc.ref, v8.ref); },
                  {"v_cache.shape[2] = 8", "page_size"});
  expectUserError([&] { checkPagedTensors(spec, q.ref, k3.ref, vc.ref); },
                  {"k_cache.shape[1] = 3"});
  expectUserError([&] { checkPagedTensors(spec, q.ref, k24.ref, v24.ref); },
                  {"page_size = 24"});
  expectUserError([&] { checkPagedTensors(spec, q.ref, kf.ref, vc.ref); },
                  {"k_cache.dtype"});
}

TEST_CASE("paged reference = the plain reference on gathered pages",
          "[frontend][paged][reference]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<float> slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  Arguments alibiArgs;
  alibiArgs.bind("slopes", slopes.data(), 4);

  struct Case {
    const char *name;
    AttentionSpec spec;
    Arguments args;
  };
  auto base = [](int hq, int hk) {
    AttentionSpec s;
    s.headDimQK = 16;
    s.headDimV = 8;
    s.headsQ = hq;
    s.headsKV = hk;
    s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = DType::F32;
    return s;
  };
  std::vector<Case> cases;
  cases.push_back({"dense GQA 4/2", base(4, 2), {}});
  AttentionSpec causalSpec = base(4, 1); // MQA
  causalSpec.causal = Causal::BottomRight;
  cases.push_back({"causal bottom-right MQA", causalSpec, {}});
  AttentionSpec win = base(4, 2);
  win.variant.mask(sliding_window(5, 0, Alignment::BottomRight));
  cases.push_back({"sliding window", win, {}});
  AttentionSpec cap = base(4, 2);
  cap.variant.scoreMod(softcap(2.0));
  cap.causal = Causal::BottomRight;
  cases.push_back({"causal softcap", cap, {}});
  AttentionSpec al = base(4, 4);
  al.variant.scoreMod(alibi(buffer<float>("slopes")));
  cases.push_back({"alibi", al, alibiArgs});

  for (const Case &c : cases)
    for (int64_t pageSize : {1, 4, 16})
      for (int64_t qLen : {1, 3}) {
        for (bool bshd : {false, true}) {
          INFO(c.name << " page_size " << pageSize << " q_len " << qLen
                      << (bshd ? " [pages, page_size, heads, dim]" : ""));
          // Odd lengths, one empty sequence, one shorter than q_len.
          std::vector<int64_t> lens{
              uniformInt(rng, 17, 40), uniformInt(rng, 17, 33), 0,
              uniformInt(rng, 1, 2), uniformInt(rng, 1, 9)};
          PagedProblem pp(rng, pageSize, lens, /*shared=*/true);
          const int64_t hq = c.spec.headsQ, hk = c.spec.headsKV;
          HostTensor q(DType::F32, {5, hq, qLen, 16});
          q.fill([&](int64_t, int64_t, int64_t, int64_t) {
            return static_cast<float>(uniform(rng, -1.0, 1.0));
          });
          HostTensor kc(DType::F32, {pp.numPages, hk, pageSize, 16}, bshd),
              vc(DType::F32, {pp.numPages, hk, pageSize, 8}, bshd);
          fillCache(kc, pp, rng);
          fillCache(vc, pp, rng);
          for (bool csr : {true, false}) {
            PageList pl = csr ? pp.csr() : pp.blockTable();
            ReferenceOutput out = referencePagedAttention(c.spec, q.ref, kc.ref,
                                                          vc.ref, pl, c.args);
            CHECK(out.shape.seqlenK == pl.maxSeqLen());
            for (int64_t b = 0; b < 5; ++b) {
              if (pp.lens[b] == 0) {
                for (int64_t h = 0; h < hq; ++h)
                  for (int64_t i = 0; i < qLen; ++i) {
                    CHECK(out.lseAt(b, h, i) == -kInf);
                    for (int64_t d = 0; d < 8; ++d)
                      CHECK(out.oAt(b, h, i, d) == 0.0);
                  }
                continue;
              }
              expectSame(out, perSequence(c.spec, q, kc, vc, pp, b, c.args), b);
            }
          }
        }
      }
}

TEST_CASE("paged reference: NaN in unused slots and pages never leaks",
          "[frontend][paged][reference]") {
  std::mt19937_64 rng(freshSeed());
  AttentionSpec spec;
  spec.headDimQK = spec.headDimV = 8;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::BF16;
  PagedProblem pp(rng, 16, {17, 31, 1}, false);
  HostTensor q(DType::BF16, {3, 1, 1, 8});
  q.fill([&](int64_t, int64_t, int64_t, int64_t) { return 1.0f; });
  HostTensor kc(DType::BF16, {pp.numPages, 1, 16, 8}),
      vc(DType::BF16, {pp.numPages, 1, 16, 8});
  fillCache(kc, pp, rng);
  fillCache(vc, pp, rng);
  // Most of the cache is NaN (the tail of each last page, 3 unused pages).
  int64_t nan = 0;
  kc.fill([&](int64_t a, int64_t b, int64_t c, int64_t d) {
    nan += std::isnan(kc.get(a, b, c, d));
    return static_cast<float>(kc.get(a, b, c, d));
  });
  CHECK(nan > 8 * 16 * 3);
  ReferenceOutput out =
      referencePagedAttention(spec, q.ref, kc.ref, vc.ref, pp.csr());
  for (double x : out.o)
    CHECK(std::isfinite(x));
  for (double x : out.lse)
    CHECK(std::isfinite(x));
  // Sequence 2 (one token): O is exactly that token's V.
  for (int64_t d = 0; d < 8; ++d)
    CHECK(out.oAt(2, 0, 0, d) == vc.get(pp.pagesOf[2][0], 0, 0, d));
}

TEST_CASE("paged reference: errors name the mismatch", "[frontend][paged]") {
  std::mt19937_64 rng(freshSeed());
  AttentionSpec spec;
  spec.headDimQK = spec.headDimV = 8;
  PagedProblem pp(rng, 16, {17, 31}, false);
  HostTensor q(DType::BF16, {3, 1, 1, 8});
  HostTensor kc(DType::BF16, {pp.numPages, 1, 16, 8}),
      vc(DType::BF16, {pp.numPages, 1, 16, 8});
  expectUserError(
      [&] { referencePagedAttention(spec, q.ref, kc.ref, vc.ref, pp.csr()); },
      {"2 sequences", "q.shape[0] = 3"});
}

namespace {

/// O [1, H, S, D] (F32) and LSE of the reference on keys [k0, k1) of \p k/v.
struct State {
  HostTensor o;
  std::vector<float> lse;
  TensorRef lseRef;
  State(const AttentionSpec &spec, const HostTensor &q, const HostTensor &k,
        const HostTensor &v, int64_t k0, int64_t k1)
      : o(DType::F32, {1, q.ref.shape[1], q.ref.shape[2], v.ref.shape[3]}) {
    auto slice = [&](const HostTensor &t) {
      TensorRef r = t.ref;
      r.data =
          static_cast<char *>(r.data) + k0 * r.strides[2] * byteSize(r.dtype);
      r.shape[2] = k1 - k0;
      return r;
    };
    ReferenceOutput ref = referenceAttention(spec, q.ref, slice(k), slice(v));
    o.fill([&](int64_t, int64_t h, int64_t i, int64_t d) {
      return static_cast<float>(ref.oAt(0, h, i, d));
    });
    for (double l : ref.lse)
      lse.push_back(static_cast<float>(l));
    lseRef = TensorRef::contiguous3(lse.data(), DType::F32,
                                    {1, q.ref.shape[1], q.ref.shape[2]});
  }
};

} // namespace

TEST_CASE("merge_states: split-then-merge equals attention over all keys",
          "[frontend][merge]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (bool cap : {false, true}) {
    AttentionSpec spec;
    spec.headDimQK = 16;
    spec.headDimV = 12;
    spec.headsQ = 3;
    spec.headsKV = 1;
    spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
    if (cap)
      spec.variant.scoreMod(softcap(3.0));
    const int64_t n = uniformInt(rng, 40, 90);
    HostTensor q(DType::F32, {1, 3, 2, 16}), k(DType::F32, {1, 1, n, 16}),
        v(DType::F32, {1, 1, n, 12});
    auto rnd = [&](int64_t, int64_t, int64_t, int64_t) {
      return static_cast<float>(uniform(rng, -2.0, 2.0));
    };
    q.fill(rnd);
    k.fill(rnd);
    v.fill(rnd);
    ReferenceOutput whole = referenceAttention(spec, q.ref, k.ref, v.ref);
    auto expectWhole = [&](const HostTensor &o, const std::vector<float> &lse) {
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t i = 0; i < 2; ++i) {
          CHECK(lse[h * 2 + i] ==
                Approx(whole.lseAt(0, h, i)).epsilon(1e-6).margin(1e-6));
          for (int64_t d = 0; d < 12; ++d)
            CHECK(o.get(0, h, i, d) ==
                  Approx(whole.oAt(0, h, i, d)).epsilon(1e-5).margin(1e-6));
        }
    };
    HostTensor out(DType::F32, {1, 3, 2, 12});
    std::vector<float> lse(6);
    TensorRef lseOut =
        TensorRef::contiguous3(lse.data(), DType::F32, {1, 3, 2});
    SECTION("two-way") {
      const int64_t cut = uniformInt(rng, 1, n - 1);
      State a(spec, q, k, v, 0, cut), b(spec, q, k, v, cut, n);
      mergeStates(a.o.ref, a.lseRef, b.o.ref, b.lseRef, out.ref, lseOut);
      expectWhole(out, lse);
      // In place into a.
      mergeStates(a.o.ref, a.lseRef, b.o.ref, b.lseRef, a.o.ref, a.lseRef);
      expectWhole(a.o, a.lse);
    }
    SECTION("n-way with an empty chunk") {
      std::vector<int64_t> cuts{0, uniformInt(rng, 1, 10), 0,
                                uniformInt(rng, 20, 30), n};
      cuts[2] = cuts[1];        // chunk 1 is empty: O = 0, LSE = -inf
      std::deque<State> states; // State is not movable
      std::vector<TensorRef> os, lses;
      for (size_t c = 0; c + 1 < cuts.size(); ++c)
        states.emplace_back(spec, q, k, v, cuts[c], cuts[c + 1]);
      for (State &s : states) {
        os.push_back(s.o.ref);
        lses.push_back(s.lseRef);
      }
      CHECK(states[1].lse[0] == -kInf);
      mergeStates(os, lses, out.ref, lseOut);
      expectWhole(out, lse);
    }
  }
}

TEST_CASE("merge_states: -inf states carry no weight, even with NaN O",
          "[frontend][merge]") {
  HostTensor a(DType::BF16, {2, 1, 1, 4}), b(DType::BF16, {2, 1, 1, 4}),
      o(DType::BF16, {2, 1, 1, 4});
  a.fill([](int64_t r, int64_t, int64_t, int64_t d) {
    return r == 0 ? kNaN : static_cast<float>(d + 1);
  });
  b.fill([](int64_t, int64_t, int64_t, int64_t) { return kNaN; });
  // Row 0: a is empty (NaN O), b is empty: nothing. Row 1: a only.
  std::vector<float> la{-INFINITY, 0.5f}, lb{-INFINITY, -INFINITY}, lo(2);
  auto l3 = [](std::vector<float> &x) {
    return TensorRef::contiguous3(x.data(), DType::F32, {2, 1, 1});
  };
  mergeStates(a.ref, l3(la), b.ref, l3(lb), o.ref, l3(lo));
  CHECK(lo[0] == -INFINITY);
  CHECK(lo[1] == 0.5f);
  for (int64_t d = 0; d < 4; ++d) {
    CHECK(o.get(0, 0, 0, d) == 0.0);
    CHECK(o.get(1, 0, 0, d) == d + 1.0);
  }
  // A NaN LSE is not hidden.
  std::vector<float> ln{NAN, 0.0f};
  mergeStates(a.ref, l3(ln), b.ref, l3(lb), o.ref, l3(lo));
  CHECK(std::isnan(lo[0]));
  CHECK(std::isnan(o.get(0, 0, 0, 0)));
}

TEST_CASE("merge_states: errors name the tensor and field",
          "[frontend][merge]") {
  HostTensor a(DType::F32, {1, 2, 3, 4}), b(DType::F32, {1, 2, 3, 5});
  std::vector<float> l(6), lh(6);
  TensorRef lse = TensorRef::contiguous3(l.data(), DType::F32, {1, 2, 3});
  TensorRef lse16 = TensorRef::contiguous3(lh.data(), DType::F16, {1, 2, 3});
  TensorRef lseShort = TensorRef::contiguous3(l.data(), DType::F32, {1, 2, 2});
  expectUserError([&] { mergeStates(a.ref, lse, b.ref, lse, a.ref, lse); },
                  {"o[1].shape[3] = 5", "expected 4"});
  expectUserError([&] { mergeStates(a.ref, lse16, a.ref, lse, a.ref, lse); },
                  {"lse[0].dtype", "fp32"});
  expectUserError([&] { mergeStates(a.ref, lse, a.ref, lseShort, a.ref, lse); },
                  {"lse[1].shape[2] = 2"});
  expectUserError([&] { mergeStates({}, {}, a.ref, lse); }, {"empty"});
  const TensorRef os[] = {a.ref};
  expectUserError([&] { mergeStates(os, {}, a.ref, lse); },
                  {"1 O tensors but 0 LSE"});
}

namespace {

/// Copies a reference state (O, LSE of a [batch, heads, q_len] problem) into
/// an F32 tensor and an LSE vector.
struct RefState {
  HostTensor o;
  std::vector<float> lse;
  TensorRef lseRef;
  explicit RefState(ReferenceOutput r)
      : o(DType::F32,
          {r.shape.batch, r.shape.headsQ, r.shape.seqlenQ, r.shape.headDimV}) {
    o.fill([&](int64_t b, int64_t h, int64_t i, int64_t d) {
      return static_cast<float>(r.oAt(b, h, i, d));
    });
    for (double l : r.lse)
      lse.push_back(static_cast<float>(l));
    lseRef = TensorRef::contiguous3(
        lse.data(), DType::F32,
        {r.shape.batch, r.shape.headsQ, r.shape.seqlenQ});
  }
};

} // namespace

TEST_CASE("merge_states with a sink: key splits merged with the sink once = "
          "paged attention with the sink",
          "[frontend][merge][sink]") {
  // Issue 22: the sink enters once, in the merge. Each sequence's keys are
  // cut at page boundaries into chunks (some empty: sequences shorter than
  // the cut), each chunk's state is the paged reference WITHOUT the sink on
  // a table of just those pages, and merging them with the sink must equal
  // the paged reference WITH the sink on the whole table. Position-free
  // variants (dense, softcap) so a chunk's scores do not depend on where it
  // starts; the GPU decode test covers masks with splits.
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (bool cap : {false, true})
    for (int64_t pageSize : {1, 4, 16}) {
      INFO((cap ? "softcap" : "dense") << " page_size " << pageSize);
      AttentionSpec plain;
      plain.headDimQK = 12;
      plain.headDimV = 10;
      plain.headsQ = 6;
      plain.headsKV = 2;
      plain.dtypeQ = plain.dtypeK = plain.dtypeV = plain.dtypeO = DType::F32;
      if (cap)
        plain.variant.scoreMod(softcap(2.5));
      AttentionSpec withSink = plain;
      withSink.sink = true;
      const int64_t qLen = uniformInt(rng, 1, 4);
      std::vector<int64_t> lens{uniformInt(rng, 30, 70),
                                uniformInt(rng, 17, 40), 0,
                                uniformInt(rng, 1, 5)};
      PagedProblem pp(rng, pageSize, lens, /*shared=*/true);
      HostTensor q(DType::F32, {4, 6, qLen, 12});
      q.fill([&](int64_t, int64_t, int64_t, int64_t) {
        return static_cast<float>(uniform(rng, -1.0, 1.0));
      });
      HostTensor kc(DType::F32, {pp.numPages, 2, pageSize, 12}),
          vc(DType::F32, {pp.numPages, 2, pageSize, 10});
      fillCache(kc, pp, rng);
      fillCache(vc, pp, rng);
      std::vector<float> sink(6);
      for (float &s : sink)
        s = static_cast<float>(uniform(rng, -2.0, 3.0));
      sink[4] = -INFINITY; // no sink for head 4
      Arguments sinkArgs;
      sinkArgs.bindSink(sink.data(), 6);
      const PageList whole = pp.csr();
      ReferenceOutput want = referencePagedAttention(withSink, q.ref, kc.ref,
                                                     vc.ref, whole, sinkArgs);
      // Chunks of `per` pages.
      const int64_t per = std::max<int64_t>(1, 24 / pageSize);
      const int64_t chunks =
          (whole.maxSeqLen() + per * pageSize - 1) / (per * pageSize) + 1;
      std::deque<RefState> states;
      std::vector<TensorRef> os, lses;
      for (int64_t c = 0; c < chunks; ++c) {
        PageList part = whole;
        for (int64_t b = 0; b < 4; ++b) {
          const int64_t from = c * per * pageSize;
          part.pageStart[b] +=
              std::min(c * per, (lens[b] + pageSize - 1) / pageSize);
          part.seqLens[b] =
              std::clamp<int64_t>(lens[b] - from, 0, per * pageSize);
        }
        states.emplace_back(
            referencePagedAttention(plain, q.ref, kc.ref, vc.ref, part));
        os.push_back(states.back().o.ref);
        lses.push_back(states.back().lseRef);
      }
      HostTensor out(DType::F32, {4, 6, qLen, 10});
      std::vector<float> lse(static_cast<size_t>(4 * 6 * qLen));
      TensorRef lseOut =
          TensorRef::contiguous3(lse.data(), DType::F32, {4, 6, qLen});
      mergeStates(os, lses, out.ref, lseOut, sink);
      for (int64_t b = 0; b < 4; ++b)
        for (int64_t h = 0; h < 6; ++h)
          for (int64_t i = 0; i < qLen; ++i) {
            INFO("b " << b << " h " << h << " i " << i);
            const double wl = want.lseAt(b, h, i);
            if (lens[b] == 0) { // no key: O = 0, LSE = sink (or -inf)
              CHECK(lse[(b * 6 + h) * qLen + i] == sink[h]);
              CHECK(wl == double(sink[h]));
            } else {
              CHECK(lse[(b * 6 + h) * qLen + i] ==
                    Approx(wl).epsilon(1e-6).margin(1e-6));
            }
            for (int64_t d = 0; d < 10; ++d)
              CHECK(out.get(b, h, i, d) ==
                    Approx(want.oAt(b, h, i, d)).epsilon(1e-5).margin(1e-6));
          }
      // The sink given to every chunk instead (once per split) is wrong:
      // the merge with no sink of states that each include it differs.
      if (!cap && pageSize == 4) {
        std::deque<RefState> twice;
        std::vector<TensorRef> os2, lses2;
        for (int64_t c = 0; c < 2; ++c) {
          PageList part = whole;
          for (int64_t b = 0; b < 4; ++b) {
            const int64_t half = (lens[b] + 1) / 2 / pageSize * pageSize;
            if (c == 1)
              part.pageStart[b] += half / pageSize;
            part.seqLens[b] = c == 0 ? half : lens[b] - half;
          }
          twice.emplace_back(referencePagedAttention(withSink, q.ref, kc.ref,
                                                     vc.ref, part, sinkArgs));
          os2.push_back(twice.back().o.ref);
          lses2.push_back(twice.back().lseRef);
        }
        mergeStates(os2, lses2, out.ref, lseOut);
        CHECK(std::fabs(lse[0] - want.lseAt(0, 0, 0)) > 1e-4);
      }
    }
}

TEST_CASE("merge_states with a sink: empty rows get O = 0, LSE = sink, bad "
          "sinks are refused",
          "[frontend][merge][sink]") {
  HostTensor a(DType::F16, {1, 3, 2, 4}), o(DType::F16, {1, 3, 2, 4});
  a.fill([](int64_t, int64_t, int64_t, int64_t) { return kNaN; });
  std::vector<float> la(6, -INFINITY), lo(6);
  TensorRef l = TensorRef::contiguous3(la.data(), DType::F32, {1, 3, 2});
  TensorRef lout = TensorRef::contiguous3(lo.data(), DType::F32, {1, 3, 2});
  la[1] = 0.25f; // head 0, row 1 has a state: O = a's row (NaN: see below)
  a.fill([](int64_t, int64_t, int64_t, int64_t d) { return 1.0f + d; });
  std::vector<float> sink{0.25f, -INFINITY, -3.0f};
  const TensorRef os[] = {a.ref}, lses[] = {l};
  mergeStates(os, lses, o.ref, lout, sink);
  // Head 0 row 1: exp(0.25) + exp(0.25): LSE = 0.25 + log 2, O = a / 2.
  CHECK(lo[1] == Approx(0.25 + std::log(2.0)).epsilon(1e-6));
  for (int64_t d = 0; d < 4; ++d)
    CHECK(o.get(0, 0, 1, d) == Approx((1.0 + d) / 2).epsilon(1e-3));
  // Every other row has no state: O = 0, LSE = sink[h] (-inf: no sink).
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < 2; ++i) {
      if (h == 0 && i == 1)
        continue;
      CHECK(lo[h * 2 + i] == sink[h]);
      for (int64_t d = 0; d < 4; ++d)
        CHECK(o.get(0, h, i, d) == 0.0);
    }
  std::vector<float> shortSink{0.0f, 0.0f}, nanSink{0.0f, kNaN, 0.0f},
      infSink{0.0f, 0.0f, INFINITY};
  expectUserError([&] { mergeStates(os, lses, o.ref, lout, shortSink); },
                  {"sink has 2 entries", "heads = 3"});
  expectUserError([&] { mergeStates(os, lses, o.ref, lout, nanSink); },
                  {"sink[1] = nan"});
  expectUserError(
      [&] { mergeStates(a.ref, l, a.ref, l, o.ref, lout, infSink); },
      {"sink[2] = inf"});
}

TEST_CASE("append: new tokens land in their pages and slots, both layouts",
          "[frontend][paged][append]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int64_t pageSize : {1, 16, 64})
    for (bool bshd : {false, true}) {
      INFO("page_size " << pageSize
                        << (bshd ? " [pages, page_size, heads, "
                                   "dim]"
                                 : ""));
      // Final lengths; the sequences are built as a prefix written here,
      // then appends of 1 and then 3 tokens (block-table tables for the
      // prefix lengths, the final CSR table for the last append).
      std::vector<int64_t> lens{uniformInt(rng, 4, 150), 4,
                                uniformInt(rng, 5, 90)};
      PagedProblem pp(rng, pageSize, lens, /*shared=*/false);
      const int64_t hk = 3, dk = 10, dv = 6;
      DType dt = bshd ? DType::BF16 : DType::F32;
      HostTensor kc(dt, {pp.numPages, hk, pageSize, dk}, bshd),
          vc(dt, {pp.numPages, hk, pageSize, dv}, bshd);
      kc.fill([](int64_t, int64_t, int64_t, int64_t) { return kNaN; });
      vc.fill([](int64_t, int64_t, int64_t, int64_t) { return kNaN; });
      // The true tokens of every sequence.
      std::deque<HostTensor> kt, vt; // HostTensor is not movable
      for (int64_t b = 0; b < 3; ++b) {
        kt.emplace_back(dt, std::array<int64_t, 4>{1, hk, lens[b], dk});
        vt.emplace_back(dt, std::array<int64_t, 4>{1, hk, lens[b], dv});
        auto rnd = [&](int64_t, int64_t, int64_t, int64_t) {
          return static_cast<float>(uniform(rng, -1.0, 1.0));
        };
        kt[b].fill(rnd);
        vt[b].fill(rnd);
      }
      // The prefix (all but the last 4 tokens), written token by token.
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t j = 0; j + 4 < lens[b]; ++j)
          for (int64_t h = 0; h < hk; ++h) {
            const int32_t page = pp.pagesOf[b][j / pageSize];
            for (int64_t d = 0; d < dk; ++d)
              kc.set(page, h, j % pageSize, d,
                     static_cast<float>(kt[b].get(0, h, j, d)));
            for (int64_t d = 0; d < dv; ++d)
              vc.set(page, h, j % pageSize, d,
                     static_cast<float>(vt[b].get(0, h, j, d)));
          }
      auto appendStep = [&](int64_t from, int64_t n, const PageList &pl) {
        HostTensor kn(dt, {3, hk, n, dk}), vn(dt, {3, hk, n, dv});
        kn.fill([&](int64_t b, int64_t h, int64_t i, int64_t d) {
          return static_cast<float>(kt[b].get(0, h, lens[b] - from + i, d));
        });
        vn.fill([&](int64_t b, int64_t h, int64_t i, int64_t d) {
          return static_cast<float>(vt[b].get(0, h, lens[b] - from + i, d));
        });
        appendPagedKV(kn.ref, vn.ref, kc.ref, vc.ref, pl);
      };
      std::vector<int32_t> midLens;
      for (int64_t b = 0; b < 3; ++b)
        midLens.push_back(static_cast<int32_t>(lens[b] - 3));
      appendStep(4, 1,
                 checkBlockTable({pp.table, pp.maxPages, midLens}, 3,
                                 pp.numPages, pageSize));
      appendStep(3, 3, pp.csr());
      // Every used slot holds its token; every other element is still NaN.
      int64_t nan = 0, used = 0;
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t j = 0; j < lens[b]; ++j, ++used)
          for (int64_t h = 0; h < hk; ++h) {
            const int32_t page = pp.pagesOf[b][j / pageSize];
            for (int64_t d = 0; d < dk; ++d)
              REQUIRE(kc.get(page, h, j % pageSize, d) ==
                      kt[b].get(0, h, j, d));
            for (int64_t d = 0; d < dv; ++d)
              REQUIRE(vc.get(page, h, j % pageSize, d) ==
                      vt[b].get(0, h, j, d));
          }
      kc.fill([&](int64_t a, int64_t b, int64_t c, int64_t d) {
        nan += std::isnan(kc.get(a, b, c, d));
        return static_cast<float>(kc.get(a, b, c, d));
      });
      CHECK(nan == (pp.numPages * pageSize - used) * hk * dk);
    }
}

TEST_CASE("append: errors name the field and value", "[frontend][paged]") {
  std::mt19937_64 rng(freshSeed());
  PagedProblem pp(rng, 16, {20, 3}, false);
  HostTensor kc(DType::BF16, {pp.numPages, 2, 16, 8}),
      vc(DType::BF16, {pp.numPages, 2, 16, 4});
  HostTensor kn(DType::BF16, {2, 2, 4, 8}), vn(DType::BF16, {2, 2, 4, 4});
  HostTensor kn32(DType::F32, {2, 2, 4, 8}), vn5(DType::BF16, {2, 2, 4, 5});
  // Sequence 1 holds 3 tokens, fewer than the 4 new ones.
  expectUserError(
      [&] { appendPagedKV(kn.ref, vn.ref, kc.ref, vc.ref, pp.csr()); },
      {"seq_lens[1] = 3 < n_new = 4"});
  HostTensor kn2(DType::BF16, {2, 2, 2, 8}), vn2(DType::BF16, {2, 2, 2, 4});
  PageList bad = pp.csr();
  std::vector<int32_t> ids(bad.pages.begin(), bad.pages.end());
  ids[1] = 99; // sequence 0's second page (tokens 16..19)
  bad.pages = ids;
  expectUserError([&] { appendPagedKV(kn2.ref, vn2.ref, kc.ref, vc.ref, bad); },
                  {"page id 99 of sequence 0", "outside [0,"});
  expectUserError(
      [&] { appendPagedKV(kn32.ref, vn2.ref, kc.ref, vc.ref, pp.csr()); },
      {"k_new.dtype = fp32", "k_cache.dtype = bf16"});
  expectUserError(
      [&] { appendPagedKV(kn.ref, vn5.ref, kc.ref, vc.ref, pp.csr()); },
      {"v_new.shape[3] = 5"});
  HostTensor kBig(DType::BF16, {pp.numPages + 1, 2, 16, 8});
  expectUserError(
      [&] { appendPagedKV(kn2.ref, vn2.ref, kBig.ref, vc.ref, pp.csr()); },
      {"v_cache.shape[0]"});
}
