//===- PagedDecodeTest.cpp - Paged decoding on the CPU vs the reference ---===//
//
// Issue 17, §3: runtime::cpuPagedDecode (the CPU twin of the GPU decode
// kernels) against referencePagedAttention, the float64 oracle that gathers
// pages and runs the plain reference. A sampled matrix: variants (dense,
// causal bottom-right, sliding window, softcap, ALiBi, and an attention sink
// with and without a mask) x page sizes 1, 16, 64 x query lengths 1, 4, 16,
// each case drawing its page-table layout (CSR or block table) and cache
// layout ([pages, heads, page_size, dim] or [pages,
// page_size, heads, dim]) at random; the GQA ratio (4/4, 6/2, 8/1) and
// dtype (fp32, bf16) rotate over the variants (one kernel each). Every case
// has random page orders, a page shared by two sequences, an empty
// sequence, a sequence shorter than q_len, and NaN in every unused slot
// and page; O and LSE are poisoned with NaN before the run. The append
// helper builds part of each cache (appendPagedKV of the last tokens).
//
// Tolerance: |O - O_ref| <= tol (1 + max |O_ref|), tol 1e-4 (fp32) or
// 2.5e-2 (bf16); LSE within 1e-4 (1 + |LSE_ref|); rows with no allowed key
// exactly O = 0 and LSE = -inf (sink[h] with a sink).
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Paged.h"
#include "flashjit/runtime/CpuDecode.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::freshSeed;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// A strided 4-D host tensor filled with NaN.
struct Buf {
  std::vector<uint8_t> bytes;
  TensorRef ref;
  Buf(DType dtype, std::array<int64_t, 4> shape, bool swap12 = false) {
    const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    bytes.assign(static_cast<size_t>(std::max<int64_t>(n, 1)) * byteSize(dtype),
                 0xFF);
    ref.data = bytes.data();
    ref.dtype = dtype;
    ref.rank = 4;
    ref.shape = shape;
    if (swap12) // [d0, d2, d1, d3] in memory
      ref.strides = {shape[1] * shape[2] * shape[3], shape[3],
                     shape[1] * shape[3], 1};
    else
      ref.strides = {shape[1] * shape[2] * shape[3], shape[2] * shape[3],
                     shape[3], 1};
  }
  double get(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return loadAsFloat(ref.data, ref.dtype, ref.offset(a, b, c, d));
  }
  void set(int64_t a, int64_t b, int64_t c, int64_t d, float v) {
    storeFromFloat(ref.data, ref.dtype, ref.offset(a, b, c, d), v);
  }
};

struct Variant_ {
  std::string name;
  AttentionSpec spec;
};

std::vector<Variant_> variants() {
  auto base = [](const char *name) {
    AttentionSpec s;
    s.variant = Variant(name);
    return s;
  };
  std::vector<Variant_> v;
  v.push_back({"dense", base("pd_dense")});
  AttentionSpec causal = base("pd_causal");
  causal.causal = Causal::BottomRight;
  v.push_back({"causal bottom-right", causal});
  AttentionSpec window = base("pd_window");
  window.variant.mask(sliding_window(9, 0, Alignment::BottomRight));
  v.push_back({"sliding window", window});
  AttentionSpec cap = base("pd_softcap");
  cap.variant.scoreMod(softcap(3.0));
  cap.causal = Causal::BottomRight;
  v.push_back({"softcap", cap});
  AttentionSpec al = base("pd_alibi");
  al.variant.scoreMod(alibi(buffer<float>("slopes")));
  al.causal = Causal::BottomRight;
  v.push_back({"alibi", al});
  AttentionSpec sink = base("pd_sink");
  sink.sink = true;
  v.push_back({"sink", sink});
  AttentionSpec sinkWin = base("pd_sink_window");
  sinkWin.variant.mask(sliding_window(5, 0, Alignment::BottomRight));
  sinkWin.sink = true;
  v.push_back({"sink + sliding window", sinkWin});
  return v;
}

/// A random page table: pages in random order, sequence 1 sharing sequence
/// 0's first page, a few pages nobody uses.
struct Table {
  int64_t pageSize, numPages = 0, maxPages = 0;
  std::vector<int64_t> lens;
  std::vector<std::vector<int32_t>> pagesOf;
  std::vector<int32_t> indptr{0}, indices, lastLen, table, seqLens;
  Table(std::mt19937_64 &rng, int64_t ps, std::vector<int64_t> l)
      : pageSize(ps), lens(std::move(l)) {
    for (int64_t n : lens)
      numPages += (n + ps - 1) / ps;
    numPages += 2;
    std::vector<int32_t> perm(static_cast<size_t>(numPages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    size_t next = 0;
    for (int64_t n : lens) {
      std::vector<int32_t> p;
      for (int64_t i = 0; i < (n + ps - 1) / ps; ++i)
        p.push_back(perm[next++]);
      maxPages = std::max<int64_t>(maxPages, int64_t(p.size()));
      pagesOf.push_back(p);
    }
    if (lens[0] >= ps && lens[1] >= ps)
      pagesOf[1][0] = pagesOf[0][0];
    for (size_t b = 0; b < lens.size(); ++b) {
      indices.insert(indices.end(), pagesOf[b].begin(), pagesOf[b].end());
      indptr.push_back(static_cast<int32_t>(indices.size()));
      lastLen.push_back(lens[b] ? int32_t((lens[b] - 1) % ps + 1) : 0);
      for (int64_t c = 0; c < maxPages + 1; ++c)
        table.push_back(c < int64_t(pagesOf[b].size()) ? pagesOf[b][c] : -1);
      seqLens.push_back(static_cast<int32_t>(lens[b]));
    }
  }
  PageList list(bool csr) const {
    const int64_t batch = int64_t(lens.size());
    return csr ? checkPagedCsr({indptr, indices, lastLen}, batch, numPages,
                               pageSize)
               : checkBlockTable({table, maxPages + 1, seqLens}, batch,
                                 numPages, pageSize);
  }
};

} // namespace

TEST_CASE("CPU paged decode matches the float64 paged reference",
          "[compiler][paged][decode]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::pair<int64_t, int64_t> gqa[] = {{4, 4}, {6, 2}, {8, 1}};
  CompileOptions opt;
  opt.varlen = true;
  int cases = 0, emptyRows = 0;
  int index = 0;
  for (const Variant_ &v : variants()) {
    // One kernel per variant (compiles dominate the time): its GQA ratio
    // and dtype rotate over the variants.
    auto [hq, hk] = gqa[index % 3];
    const DType dt = index++ % 2 ? DType::BF16 : DType::F32;
    for (int64_t pageSize : {1, 16, 64})
      for (int64_t qLen : {1, 4, 16}) {
        const bool csr = rng() % 2, swap = rng() % 2;
        AttentionSpec spec = v.spec;
        spec.headsQ = int(hq);
        spec.headsKV = int(hk);
        spec.headDimQK = 16;
        spec.headDimV = 8;
        spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = dt;
        INFO(v.name << " page_size " << pageSize << " q_len " << qLen
                    << " heads " << hq << "/" << hk << (csr ? " csr" : " table")
                    << (swap ? " [pages, page_size, heads, dim]" : "") << " "
                    << toString(dt));
        auto kernel = test::cachedKernel(spec, opt);
        // Odd lengths around the page size; one empty sequence, one shorter
        // than q_len (its first rows see no key under a causal mask).
        const int64_t most = std::min<int64_t>(3 * pageSize + 37, 150);
        std::vector<int64_t> lens{int64_t(rng() % most) + pageSize + 4,
                                  int64_t(rng() % most) + pageSize + 4, 0,
                                  std::max<int64_t>(1, qLen / 2)};
        Table t(rng, pageSize, lens);
        const int64_t batch = int64_t(lens.size());
        Buf q(dt, {batch, hq, qLen, 16});
        Buf kc(dt, {t.numPages, hk, pageSize, 16}, swap),
            vc(dt, {t.numPages, hk, pageSize, 8}, swap);
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t h = 0; h < hq; ++h)
            for (int64_t i = 0; i < qLen; ++i)
              for (int64_t d = 0; d < 16; ++d)
                q.set(b, h, i, d, u(rng));
        // The cache: all but each sequence's last token written directly
        // (a shared page once), the last tokens by appendPagedKV.
        Buf kn(dt, {batch, hk, 1, 16}), vn(dt, {batch, hk, 1, 8});
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t j = 0; j < lens[b]; ++j) {
            const int32_t page = t.pagesOf[b][j / pageSize];
            const int64_t slot = j % pageSize;
            for (int64_t h = 0; h < hk; ++h) {
              const bool last = j + 1 == lens[b];
              for (int64_t d = 0; d < 16; ++d)
                if (last)
                  kn.set(b, h, 0, d, u(rng));
                else if (std::isnan(kc.get(page, h, slot, d)))
                  kc.set(page, h, slot, d, u(rng));
              for (int64_t d = 0; d < 8; ++d)
                if (last)
                  vn.set(b, h, 0, d, u(rng));
                else if (std::isnan(vc.get(page, h, slot, d)))
                  vc.set(page, h, slot, d, u(rng));
            }
          }
        const PageList pages = t.list(csr);
        // The empty sequence takes no new token: append per sequence.
        for (int64_t b = 0; b < batch; ++b) {
          if (lens[b] == 0)
            continue;
          PageList one = pages;
          one.pageStart = {pages.pageStart[b]};
          one.seqLens = {pages.seqLens[b]};
          TensorRef kb = kn.ref, vb = vn.ref;
          kb.data =
              static_cast<char *>(kb.data) + b * kb.strides[0] * byteSize(dt);
          vb.data =
              static_cast<char *>(vb.data) + b * vb.strides[0] * byteSize(dt);
          kb.shape[0] = vb.shape[0] = 1;
          appendPagedKV(kb, vb, kc.ref, vc.ref, one);
        }
        Arguments args;
        std::vector<float> slopes, sink;
        for (const BufferDecl &bd : spec.variant.buffers()) {
          (void)bd;
          for (int64_t h = 0; h < hq; ++h)
            slopes.push_back(std::exp2(-8.0f * float(h + 1) / float(hq)));
          args.bind("slopes", slopes.data(), int64_t(slopes.size()));
        }
        if (spec.sink) {
          for (int64_t h = 0; h < hq; ++h)
            sink.push_back(h == 1 ? -INFINITY : u(rng) * 2.0f);
          args.bindSink(sink.data(), hq);
        }
        Buf o(dt, {batch, hq, qLen, 8});
        std::vector<float> lse(size_t(batch * hq * qLen),
                               std::numeric_limits<float>::quiet_NaN());
        TensorRef lseRef =
            TensorRef::contiguous3(lse.data(), DType::F32, {batch, hq, qLen});
        runtime::cpuPagedDecode(*kernel, q.ref, kc.ref, vc.ref, pages, o.ref,
                                &lseRef, args);
        ReferenceOutput want =
            referencePagedAttention(spec, q.ref, kc.ref, vc.ref, pages, args);
        double scale = 0, worst = 0, worstLse = 0;
        for (double x : want.o)
          scale = std::max(scale, std::fabs(x));
        const double tol = dt == DType::F32 ? 1e-4 : 2.5e-2;
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t h = 0; h < hq; ++h)
            for (int64_t i = 0; i < qLen; ++i) {
              const double wl = want.lseAt(b, h, i);
              const float gl = lse[size_t((b * hq + h) * qLen + i)];
              const bool empty =
                  wl == -kInf ||
                  (spec.sink && wl == double(sink[h]) &&
                   (lens[b] == 0 || (qLen > lens[b] && i < qLen - lens[b])));
              if (empty) {
                // O = 0 exactly; LSE = -inf, or the sink to fp32 rounding
                // (the kernel's state is in log2 units).
                ++emptyRows;
                if (wl == -kInf)
                  REQUIRE(double(gl) == wl);
                else
                  REQUIRE(std::fabs(gl - wl) <= 1e-6 * (1.0 + std::fabs(wl)));
                for (int64_t d = 0; d < 8; ++d)
                  REQUIRE(o.get(b, h, i, d) == 0.0);
                continue;
              }
              REQUIRE(std::isfinite(gl));
              worstLse = std::max(worstLse,
                                  std::fabs(gl - wl) / (1.0 + std::fabs(wl)));
              for (int64_t d = 0; d < 8; ++d) {
                const double g = o.get(b, h, i, d);
                REQUIRE(std::isfinite(g));
                worst = std::max(worst, std::fabs(g - want.oAt(b, h, i, d)));
              }
            }
        INFO("max |O - O_ref| = " << worst << ", max rel LSE error "
                                  << worstLse);
        CHECK(worst <= tol * (1.0 + scale));
        CHECK(worstLse <= 1e-4);
        ++cases;
      }
  }
  CHECK(cases == 7 * 3 * 3);
  CHECK(emptyRows > 0); // the empty sequence (and short causal rows)
}

TEST_CASE("CPU paged decode: errors name the field", "[compiler][paged]") {
  std::mt19937_64 rng(freshSeed());
  AttentionSpec spec;
  spec.headDimQK = spec.headDimV = 16;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  CompileOptions opt;
  opt.varlen = true;
  auto kernel = test::cachedKernel(spec, opt);
  auto dense = test::cachedKernel(spec);
  Table t(rng, 16, {20, 3});
  const PageList pages = t.list(true);
  Buf q(DType::F32, {2, 1, 1, 16}), o(DType::F32, {2, 1, 1, 16}),
      o3(DType::F32, {2, 1, 3, 16});
  Buf kc(DType::F32, {t.numPages, 1, 16, 16});
  Buf kBig(DType::F32, {t.numPages + 1, 1, 16, 16});
  expectUserError(
      [&] {
        runtime::cpuPagedDecode(*dense, q.ref, kc.ref, kc.ref, pages, o.ref,
                                nullptr);
      },
      {"varlen = false"});
  expectUserError(
      [&] {
        runtime::cpuPagedDecode(*kernel, q.ref, kc.ref, kc.ref, pages, o3.ref,
                                nullptr);
      },
      {"o.shape = [2, 1, 3, 16]"});
  expectUserError(
      [&] {
        runtime::cpuPagedDecode(*kernel, q.ref, kBig.ref, kBig.ref, pages,
                                o.ref, nullptr);
      },
      {"num_pages", "k_cache.shape[0]"});
  PageList bad = pages;
  std::vector<int32_t> ids(bad.pages.begin(), bad.pages.end());
  ids[0] = -3;
  bad.pages = ids;
  expectUserError(
      [&] {
        runtime::cpuPagedDecode(*kernel, q.ref, kc.ref, kc.ref, bad, o.ref,
                                nullptr);
      },
      {"page id -3 of sequence 0"});
}

TEST_CASE("CPU paged decode of sliding windows smaller and larger than the "
          "sequence, q_len 1..64",
          "[compiler][paged][decode]") {
  // cpuPagedDecode gathers only the keys some row of a sequence may see
  // (decodeVisibleKeyTiles); every key before them is NaN here, so a range
  // cut one key too short or too long shows in O, LSE or as NaN.
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  AttentionSpec spec;
  spec.variant = Variant("pd_window_param");
  spec.variant.mask(
      sliding_window(param<int32_t>("window"), 0, Alignment::BottomRight));
  spec.headsQ = 6;
  spec.headsKV = 2;
  spec.headDimQK = 16;
  spec.headDimV = 8;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  CompileOptions opt;
  opt.varlen = true;
  auto kernel = test::cachedKernel(spec, opt);
  int cases = 0, emptyRows = 0;
  for (int64_t window : {0, 3, 17, 70, 1000})
    for (int64_t qLen : {1, 2, 7, 16, 33, 64}) {
      const int64_t pageSize = std::array<int64_t, 3>{1, 16, 64}[rng() % 3];
      const bool csr = rng() % 2;
      std::vector<int64_t> lens{int64_t(rng() % 300) + 100, 0,
                                std::max<int64_t>(1, qLen / 2),
                                int64_t(rng() % 40) + qLen};
      INFO("window " << window << " q_len " << qLen << " page_size " << pageSize
                     << (csr ? " csr" : " table") << " lens " << lens[0] << ","
                     << lens[3]);
      Table t(rng, pageSize, lens);
      const int64_t batch = int64_t(lens.size()), hq = 6, hk = 2;
      Buf q(DType::F32, {batch, hq, qLen, 16}),
          o(DType::F32, {batch, hq, qLen, 8});
      Buf kc(DType::F32, {t.numPages, hk, pageSize, 16}),
          vc(DType::F32, {t.numPages, hk, pageSize, 8});
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < qLen; ++i)
            for (int64_t d = 0; d < 16; ++d)
              q.set(b, h, i, d, u(rng));
      // Keys [first, len) random, those before them NaN (no page is
      // shared here: sequence 1 is empty).
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t first = std::max<int64_t>(0, lens[b] - qLen - window);
        for (int64_t j = 0; j < lens[b]; ++j) {
          const int32_t page = t.pagesOf[b][j / pageSize];
          const int64_t slot = j % pageSize;
          for (int64_t h = 0; h < hk; ++h) {
            for (int64_t d = 0; d < 16; ++d)
              kc.set(page, h, slot, d, j >= first ? u(rng) : NAN);
            for (int64_t d = 0; d < 8; ++d)
              vc.set(page, h, slot, d, j >= first ? u(rng) : NAN);
          }
        }
      }
      Arguments args;
      args.set("window", Scalar::i32(window));
      const PageList pages = t.list(csr);
      std::vector<float> lse(size_t(batch * hq * qLen), NAN);
      TensorRef lseRef =
          TensorRef::contiguous3(lse.data(), DType::F32, {batch, hq, qLen});
      runtime::cpuPagedDecode(*kernel, q.ref, kc.ref, vc.ref, pages, o.ref,
                              &lseRef, args);
      ReferenceOutput want =
          referencePagedAttention(spec, q.ref, kc.ref, vc.ref, pages, args);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < qLen; ++i) {
            INFO("row " << b << "," << h << "," << i);
            const double wl = want.lseAt(b, h, i);
            const float gl = lse[size_t((b * hq + h) * qLen + i)];
            if (wl == -kInf) {
              ++emptyRows;
              REQUIRE(double(gl) == wl);
              for (int64_t d = 0; d < 8; ++d)
                REQUIRE(o.get(b, h, i, d) == 0.0);
              continue;
            }
            REQUIRE(std::isfinite(wl));
            REQUIRE(std::fabs(gl - wl) <= 1e-4 * (1.0 + std::fabs(wl)));
            for (int64_t d = 0; d < 8; ++d)
              REQUIRE(std::fabs(o.get(b, h, i, d) - want.oAt(b, h, i, d)) <=
                      1e-4);
          }
      ++cases;
    }
  CHECK(cases == 5 * 6);
  CHECK(emptyRows > 0); // the empty sequence and rows before any key
}
