//===- TileClassifierTest.cpp - Generated tile classes vs the host spec ---===//
//
// The interval arithmetic the compiler emits into kernels must classify
// every tile exactly as flashjit::classifyTile does: checked on the
// JIT-compiled classifier over many shapes and tile sizes (and, for the
// standard index-only masks, against brute force), and on instrumented
// kernels that count the classes they actually see.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"

#include "flashjit/frontend/Library.h"

#include <catch2/catch.hpp>

using namespace flashjit;
using flashjit::test::cachedKernel;
using flashjit::test::StridedTensor;

namespace {

struct MaskCase {
  const char *name;
  Expr mask;
  bool exact; ///< countTiles == bruteForceTileCounts is expected
  Arguments args;
};

std::vector<MaskCase> masks() {
  Arguments win;
  win.set("w", Scalar::i32(20));
  Arguments big;
  big.set("n", Scalar::i64(3000000000LL));
  Buffer doc = buffer<int32_t>("doc");
  return {
      {"causal_tl", causal(Alignment::TopLeft), true, {}},
      {"causal_br", causal(Alignment::BottomRight), true, {}},
      {"window", sliding_window(30, 0, Alignment::TopLeft), true, {}},
      {"window_lr", sliding_window(11, 7, Alignment::BottomRight), true, {}},
      {"window_excl",
       sliding_window(9, 2, Alignment::TopLeft, false),
       false,
       {}},
      {"window_param",
       sliding_window(param<int32_t>("w"), 0, Alignment::BottomRight), true,
       win},
      {"prefix", prefix_lm(13, Alignment::BottomRight), true, {}},
      {"chunked", chunked(24), true, {}},
      {"chunked_causal", chunked(16) && causal(Alignment::TopLeft), true, {}},
      {"doc_causal",
       doc[q_idx] == doc[kv_idx] && causal(Alignment::TopLeft),
       false,
       {}},
      {"arith", abs(q_idx - 2 * kv_idx) < 30 || q_idx % 7 == 3, false, {}},
      {"division",
       (q_idx - kv_idx) / (kv_idx - 5) > 2 ||
           max(q_idx, seqlen_k - kv_idx) / 4 == 3,
       false,
       {}},
      {"select",
       select(q_idx > 50, kv_idx < 10, kv_idx >= q_idx - 3),
       false,
       {}},
      {"wide",
       cast<int64_t>(q_idx) * 3000000000LL + kv_idx >
           param<int64_t>("n") - min(kv_idx, 5),
       false, big},
      {"neg_not", !(-q_idx > -kv_idx) && head == 0, false, {}},
  };
}

} // namespace

TEST_CASE("the generated classifier agrees with classifyTile",
          "[compiler][tiles]") {
  const int64_t lens[] = {0, 1, 5, 17, 64, 100};
  const int64_t blocks[] = {1, 3, 16, 64};
  for (const MaskCase &m : masks()) {
    AttentionSpec spec;
    spec.variant = Variant(m.name).mask(m.mask);
    auto cls = compileTileClassifier(spec);
    for (int64_t sq : lens)
      for (int64_t sk : lens)
        for (int64_t bm : blocks)
          for (int64_t bn : blocks) {
            if ((sq / bm) * (sk / bn) > 2000)
              continue; // keep the host's interpreter quick
            INFO(m.name << " " << sq << "x" << sk << " tiles " << bm << "x"
                        << bn);
            TileCounts want = countTiles(m.mask, sq, sk, bm, bn, m.args);
            REQUIRE(cls->count(sq, sk, bm, bn, m.args) == want);
            if (m.exact && bm * bn <= 256)
              REQUIRE(bruteForceTileCounts(m.mask, sq, sk, bm, bn, m.args) ==
                      want);
          }
    // Other heads and batches: the box's batch/head values reach the mask.
    for (int64_t h = 0; h < 3; ++h) {
      TileBox box{{h, h}, {h, h}, {10, 40}, {5, 9}, 100, 64};
      REQUIRE(cls->classify(box, m.args) == classifyTile(m.mask, box, m.args));
    }
  }
}

TEST_CASE("instrumented kernels see the tile classes countTiles predicts",
          "[compiler][tiles]") {
  struct Shape {
    int64_t sq, sk;
  };
  for (Expr mask : {causal(Alignment::TopLeft), causal(Alignment::BottomRight),
                    sliding_window(100, 0, Alignment::TopLeft),
                    chunked(64) && causal(Alignment::TopLeft)})
    for (int bm : {16, 64})
      for (Shape s : {Shape{300, 300}, Shape{129, 1000}, Shape{1000, 65}}) {
        AttentionSpec spec;
        spec.variant = Variant("counted").mask(mask);
        spec.headDimQK = spec.headDimV = 32;
        CompileOptions opts;
        opts.countTiles = true;
        opts.blockM = bm;
        opts.blockN = 32;
        auto k = cachedKernel(spec, opts);
        StridedTensor q(DType::BF16, {1, 1, s.sq, 32}, false);
        StridedTensor kk(DType::BF16, {1, 1, s.sk, 32}, false);
        StridedTensor v(DType::BF16, {1, 1, s.sk, 32}, false);
        StridedTensor o(DType::BF16, {1, 1, s.sq, 32}, false);
        std::vector<float> lse(s.sq);
        TensorRef l =
            TensorRef::contiguous3(lse.data(), DType::F32, {1, 1, s.sq});
        RunStats st = k->run(q.ref, kk.ref, v.ref, o.ref, &l);
        REQUIRE(st.tilesCounted);
        REQUIRE(st.tiles ==
                countTiles(spec.effectiveMask(), s.sq, s.sk, bm, 32));
      }
}

TEST_CASE("tile classes at N = 4096 with the default 64 x 64 tiles",
          "[compiler][tiles][report]") {
  for (auto [name, mask] :
       {std::pair<const char *, Expr>{"causal", causal(Alignment::TopLeft)},
        {"sliding_window_1024", sliding_window(1024, 0, Alignment::TopLeft)}}) {
    AttentionSpec spec;
    spec.variant = Variant("counted").mask(mask);
    spec.headDimQK = spec.headDimV = 32;
    auto cls = compileTileClassifier(spec);
    TileCounts c = cls->count(4096, 4096, 64, 64);
    REQUIRE(c == countTiles(mask, 4096, 4096, 64, 64));
    WARN(name << " N=4096, 64x64 tiles: full " << c.full << ", partial "
              << c.partial << ", empty " << c.empty);
  }
}
