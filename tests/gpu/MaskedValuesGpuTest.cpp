//===- MaskedValuesGpuTest.cpp - Masked keys never reach a row on the GPU -===//
//
// Issue 21 section 3 on the GPU forward: a NaN or Inf in V or K at a key a
// row does not attend must not reach the row, also when that key shares a
// partially masked tile with keys the row attends (the kernels' guarded
// P V, compiler/lib/Conversion/AttnToNVVM/MaskedValues.h). The matrix's
// causal, two-sided window (50 left, 20 right) and document (37 tokens,
// causal) kernels at head dims 64, 96 and 128 (mma.sync, wgmma, TMA and
// warp-specialised on sm_90a), the kv_idx == 0 kernels of
// maskedValueKernels(), the benchmark's head-dim-128 kernels
// (overlapMaskedKernels(): causal, 1024-key window, causal + softcap, the
// document-causal mask) and the head-dim-128 kernels with the
// intra-warpgroup overlap by name (overlapVoteKernels(): causal, windows,
// causal + softcap, kv_idx == 0; the result check and, `_pubvote`, the
// published vote), bf16 and fp16, on these layouts of poison:
//   - issue 21's N = 2 reproduction (V[1] = inf): with kv_idx == 0 both
//     rows attend only key 0, in the tile with key 1: both must be clean;
//   - its causal one (N = 201, V[150] = +-inf, K[190] = NaN): rows that
//     attend neither share key tiles with them;
//   - keys no row attends in a partial tile (seqlen_q 77 < seqlen_k 201,
//     every key from 100 NaN or Inf in K and V): causal and document rows
//     reach key 76, window rows key 96, so the tile holding keys 64.. (or
//     0..) holds attended and poisoned keys; no row may be poisoned and
//     every row is clean (for kv_idx == 0 that tile is empty: the N = 2
//     case covers those kernels);
//   - N = 600 with keys 590.. poisoned: the poisoned tile comes after many
//     others (later uses of the K/V stages, where the votes' barrier phases
//     and marks are not the first ones);
//   - N = 777 with key 700 poisoned: only the CTAs whose key tiles hold it
//     run their row block again (result check);
//   - seqlen_q 700 > seqlen_k 149 with key 140 poisoned: window CTAs with
//     no key tile at all beside CTAs that rerun.
// Oracle: the float64 reference on the same inputs, which skips keys a row
// does not attend (test::compareAttendedRows); which rows are clean follows
// from the layouts above and is asserted, so a case cannot pass by having
// nothing to compare. The backward's and the decode's cases are in
// BackwardGpuTest.cpp and DecodeGpuTest.cpp (tag [masked]).
//
//===----------------------------------------------------------------------===//
#include "GpuTestSupport.h"
#include "KernelMatrix.h"

#include "flashjit/frontend/Printer.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::GpuTensor;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Where the poison goes: seqlen_q, seqlen_k and the value written into
/// every head of key j's V row (column d) and K row (the functions return
/// 0 for "leave it").
struct Poison {
  const char *what;
  int64_t sq, sk;
  float (*v)(int64_t j, int64_t d);
  float (*k)(int64_t j, int64_t d);
};

const Poison kIssueN2 = {
    "issue 21: N = 2, V[1] = inf", 2, 2,
    [](int64_t j, int64_t) { return j == 1 ? kInf : 0.0f; },
    [](int64_t, int64_t) { return 0.0f; }};
const Poison kIssueCausal = {
    "issue 21: N = 201, V[150] = +-inf, K[190] = NaN", 201, 201,
    [](int64_t j, int64_t d) { return j == 150 ? (d % 2 ? -kInf : kInf) : 0; },
    [](int64_t j, int64_t) { return j == 190 ? kNaN : 0.0f; }};
const Poison kUnattended = {
    "keys 100.. no row attends: NaN and Inf in K and V", 77, 201,
    [](int64_t j, int64_t d) {
      return j >= 100 ? ((j + d) % 2 ? kNaN : -kInf) : 0.0f;
    },
    [](int64_t j, int64_t d) {
      return j >= 100 ? ((j + d) % 3 ? kInf : kNaN) : 0.0f;
    }};

// Many key tiles before the poisoned one (the votes' later stage uses:
// TMA kernels vote at the barrier that closes the tile before, their first
// tile before the loop; warp-specialised ones publish a per-stage word
// whose mark is the stage's use): keys 590.. poisoned, so causal and
// document rows 0..589 and window rows 0..569 attend none of them, and the
// diagonal tile of the last query tile (use 4 of 128-key tiles: the second
// use of a stage of three, 9 of 64-key ones) holds attended and poisoned
// keys.
const Poison kLongTail = {
    "N = 600, V of keys 590.. NaN or Inf", 600, 600,
    [](int64_t j, int64_t d) {
      return j >= 590 ? ((j + d) % 2 ? kNaN : (d % 3 ? kInf : -kInf)) : 0.0f;
    },
    [](int64_t, int64_t) { return 0.0f; }};

// Many query tiles whose key tiles hold a poisoned key (every key j with
// j % 97 == 13): at head dim 64 on sm_90a almost every CTA finds a NaN or
// Inf in its O and runs its row block again, after 1 to 16 tiles (every
// count of stage uses modulo the ring's stages and both mbarrier parities).
const Poison kScattered = {
    "N = 1000, V of keys 13, 110, 207, ... NaN or Inf", 1000, 1000,
    [](int64_t j, int64_t d) {
      return j % 97 == 13 ? (d % 2 ? kNaN : (d % 3 ? kInf : -kInf)) : 0.0f;
    },
    [](int64_t, int64_t) { return 0.0f; }};
// Only some CTAs meet a NaN or Inf (key 700 of 777: causal query tiles from
// 640, the window's rows 680..750, its document's rows), after 6 or 7 stage
// uses of a head-dim-128 kernel's ring (a rerun starting at every residue
// of 2 and 3 stages); the last key tile is partial (keys 768..776).
const Poison kSomeCtas = {
    "N = 777, V of key 700 NaN and +-Inf", 777, 777,
    [](int64_t j, int64_t d) {
      return j == 700 ? (d % 3 == 0 ? kNaN : (d % 3 == 1 ? kInf : -kInf))
                      : 0.0f;
    },
    [](int64_t, int64_t) { return 0.0f; }};
// More queries than keys (seqlen_q 700, seqlen_k 149): the window's rows
// from 199 attend no key, so its CTAs of rows 256.. visit no key tile at
// all (they decide at once and their producer loads nothing); key 140 (in
// the partial last key tile) is NaN or Inf for the rows that attend it.
const Poison kNoTiles = {"seqlen_q 700 > seqlen_k 149, V of key 140 NaN or Inf",
                         700, 149,
                         [](int64_t j, int64_t d) {
                           return j == 140 ? (d % 2 ? kNaN : kInf) : 0.0f;
                         },
                         [](int64_t, int64_t) { return 0.0f; }};
const Poison kClean = {"no NaN or Inf", 333, 333,
                       [](int64_t, int64_t) { return 0.0f; },
                       [](int64_t, int64_t) { return 0.0f; }};

/// Writes \p f(j, d) (where not 0) into every batch and head of \p t's
/// host copy, then uploads it.
void poison(GpuTensor &t, float (*f)(int64_t, int64_t)) {
  const TensorRef &r = t.hostRef;
  for (int64_t b = 0; b < r.shape[0]; ++b)
    for (int64_t h = 0; h < r.shape[1]; ++h)
      for (int64_t j = 0; j < r.shape[2]; ++j)
        for (int64_t d = 0; d < r.shape[3]; ++d)
          if (float x = f(j, d); x != 0.0f)
            storeFromFloat(r.data, r.dtype, r.offset(b, h, j, d), x);
  t.device.copyFromHost(t.host.data(), t.host.size());
}

bool selected(const std::string &id) { return test::matrixIdSelected(id); }

/// The forward kernels of the test: the matrix's causal, window and
/// document kernels at head dims 64 and 128 (wgmma on sm_90a) and 96
/// (mma.sync there too), the kv_idx == 0 ones, the benchmark's head-dim-128
/// ones and the overlapped ones (result check and published vote).
std::vector<testing::MatrixKernel> forwardKernels() {
  std::vector<testing::MatrixKernel> out;
  for (const testing::MatrixKernel &k : testing::kernelMatrix())
    if ((k.variant == "causal_tl" || k.variant == "window_lr" ||
         k.variant == "doc_id") &&
        (k.spec.headDimQK == 64 || k.spec.headDimQK == 96 ||
         k.spec.headDimQK == 128))
      out.push_back(k);
  for (const testing::MatrixKernel &k : testing::maskedValueKernels(false))
    out.push_back(k);
  for (const testing::MatrixKernel &k : testing::overlapMaskedKernels())
    out.push_back(k);
  for (const testing::MatrixKernel &k : testing::overlapVoteKernels()) {
    out.push_back(k);
    out.push_back({k.id + "_pubvote", k.variant, k.spec});
  }
  return out;
}

/// One forward call of \p kernel on \p p's layout; the rows' counts.
test::AttendedRows runPoisoned(Device &dev, GpuAttentionKernel &kernel,
                               const AttentionSpec &spec, const Poison &p,
                               uint64_t seed) {
  INFO(p.what << ", seed " << seed);
  const int64_t batch = p.sq == 77 ? 2 : 1;
  std::mt19937_64 rng(seed);
  GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, p.sq, spec.headDimQK});
  GpuTensor kt(dev, spec.dtypeK, {batch, spec.headsKV, p.sk, spec.headDimQK});
  GpuTensor v(dev, spec.dtypeV, {batch, spec.headsKV, p.sk, spec.headDimV});
  GpuTensor o(dev, spec.dtypeO, {batch, spec.headsQ, p.sq, spec.headDimV});
  GpuTensor lse(dev, DType::F32, {batch, spec.headsQ, p.sq, 1}, 3);
  q.randomize(rng, 2.0f);
  kt.randomize(rng, 2.0f);
  v.randomize(rng);
  poison(v, p.v);
  poison(kt, p.k);
  o.poison();
  lse.poison();
  test::VariantArgs args(dev, spec, p.sq, p.sk);
  test::progress(std::string("launch poisoned ") + p.what);
  kernel.run(q.deviceRef, kt.deviceRef, v.deviceRef, o.deviceRef,
             spec.returnLse ? &lse.deviceRef : nullptr, args.device);
  o.download();
  lse.download();
  test::progress(std::string("returned poisoned ") + p.what);
  ReferenceOutput want =
      referenceAttention(spec, q.hostRef, kt.hostRef, v.hostRef, args.host);
  return test::compareAttendedRows(spec, o, lse, want, batch, p.sq);
}

} // namespace

TEST_CASE("forward: NaN and Inf at keys a row does not attend never reach it",
          "[gpu][masked]") {
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int kernels = 0;
  for (const testing::MatrixKernel &k : forwardKernels()) {
    if (!selected(k.id))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = test::loadAheadOfTime(k.id, k.spec, dev);
    ++kernels;
    const AttentionSpec &spec = k.spec;
    const int64_t heads = spec.headsQ;
    const bool firstKey = k.variant == "first_key";
    // N = 2: with kv_idx == 0 both rows attend key 0 only.
    test::AttendedRows a = runPoisoned(dev, *kernel, spec, kIssueN2, seed++);
    if (firstKey)
      CHECK(a.clean == 2 * heads);
    // N = 201: causal rows 0..149 and window rows 0..129 attend neither
    // key 150 nor 190; document rows attend within their 37 tokens, so
    // rows of documents 0..3 (0..147) are clean too.
    test::AttendedRows b =
        runPoisoned(dev, *kernel, spec, kIssueCausal, seed++);
    CHECK(b.clean >= (firstKey ? 201 : 130) * heads);
    // Keys no row attends: every row clean.
    test::AttendedRows c = runPoisoned(dev, *kernel, spec, kUnattended, seed++);
    CHECK(c.poisoned == 0);
    CHECK(c.clean == 2 * 77 * heads);
    // Many tiles before the poisoned keys: rows 0..569 clean at least.
    test::AttendedRows d = runPoisoned(dev, *kernel, spec, kLongTail, seed++);
    CHECK(d.clean >= (firstKey ? 600 : 570) * heads);
    // Only some CTAs rerun: rows 0..679 attend no key from 700.
    test::AttendedRows e = runPoisoned(dev, *kernel, spec, kSomeCtas, seed++);
    CHECK(e.clean >= (firstKey ? 777 : 680) * heads);
    if (!firstKey)
      CHECK(e.poisoned > 0);
    // CTAs with no key tile beside ones that rerun: rows 0..119 attend no
    // key from 140 (the window's rows 199.. attend no key at all).
    test::AttendedRows f = runPoisoned(dev, *kernel, spec, kNoTiles, seed++);
    CHECK(f.clean >= (firstKey ? 700 : 120) * heads);
    if (!firstKey)
      CHECK(f.poisoned > 0);
  }
  CHECK(kernels > 0);
}

namespace {

/// O and LSE of \p kernel and \p tileVote on the same inputs (\p p's
/// layout): whether they are equal bit for bit, and how many O elements
/// of the first are NaN or Inf.
std::pair<bool, int64_t> runPair(Device &dev, GpuAttentionKernel &kernel,
                                 GpuAttentionKernel &tileVote,
                                 const AttentionSpec &spec, const Poison &p,
                                 uint64_t seed) {
  INFO(p.what << ", seed " << seed);
  std::mt19937_64 rng(seed);
  GpuTensor q(dev, spec.dtypeQ, {1, spec.headsQ, p.sq, spec.headDimQK});
  GpuTensor kt(dev, spec.dtypeK, {1, spec.headsKV, p.sk, spec.headDimQK});
  GpuTensor v(dev, spec.dtypeV, {1, spec.headsKV, p.sk, spec.headDimV});
  q.randomize(rng, 2.0f);
  kt.randomize(rng, 2.0f);
  v.randomize(rng);
  poison(v, p.v);
  poison(kt, p.k);
  test::VariantArgs args(dev, spec, p.sq, p.sk);
  std::vector<uint8_t> got[2][2];
  int i = 0;
  for (GpuAttentionKernel *k : {&kernel, &tileVote}) {
    GpuTensor o(dev, spec.dtypeO, {1, spec.headsQ, p.sq, spec.headDimV});
    GpuTensor lse(dev, DType::F32, {1, spec.headsQ, p.sq, 1}, 3);
    o.poison();
    lse.poison();
    k->run(q.deviceRef, kt.deviceRef, v.deviceRef, o.deviceRef,
           spec.returnLse ? &lse.deviceRef : nullptr, args.device);
    o.download();
    lse.download();
    got[i][0] = o.host;
    got[i++][1] = lse.host;
  }
  GpuTensor o(dev, spec.dtypeO, {1, spec.headsQ, p.sq, spec.headDimV});
  o.host = got[0][0];
  int64_t nonFinite = 0;
  for (int64_t h = 0; h < spec.headsQ; ++h)
    for (int64_t r = 0; r < p.sq; ++r)
      for (int64_t d = 0; d < spec.headDimV; ++d)
        nonFinite += !std::isfinite(o.at(0, h, r, d));
  return {got[0][0] == got[1][0] && got[0][1] == got[1][1], nonFinite};
}

} // namespace

TEST_CASE("forward: kernels that check their results for NaN and Inf equal "
          "the in-tile vote bit for bit",
          "[gpu][masked]") {
  // MaskedValues.h, "The forward at head dim 64": the TMA forward without
  // warp specialisation at head dim 64, and the warp-specialised forward
  // (serial and overlapped consumers, head dim 128), run the row block
  // without isolation and, only where an O accumulator came out NaN or
  // Inf, again with the in-tile vote (warp-specialised: the producer loads
  // the tiles again after the consumers' decision). Their O and LSE must
  // be the in-tile vote's exactly, on clean inputs (no second pass) and on
  // every poison layout (second passes after every count of ring uses, in
  // some CTAs only, beside CTAs with no key tile), including the rows that
  // attend a NaN or Inf; a CTA whose producer and consumers disagree would
  // hang or read stale stages. The same for the overlapped head-dim-128
  // kernels with the published vote (overlapVoteKernels()' `_pubvote`):
  // the vote read from the stage's word after its mbarrier phase, in every
  // partial tile, must be the in-tile barrier's, so the guarded path runs
  // in the same tiles.
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int kernels = 0;
  // (kernel, its twin with the in-tile vote)
  std::vector<std::pair<testing::MatrixKernel, std::string>> pairs;
  for (const testing::MatrixKernel &k : testing::resultCheckKernels())
    pairs.push_back({k, k.id + "_tilevote"});
  for (const testing::MatrixKernel &k : testing::overlapMaskedKernels())
    pairs.push_back({k, k.id + "_tilevote"});
  for (const testing::MatrixKernel &k : testing::overlapVoteKernels()) {
    pairs.push_back({k, k.id + "_tilevote"});
    pairs.push_back(
        {{k.id + "_pubvote", k.variant, k.spec}, k.id + "_tilevote"});
  }
  for (const auto &[k, twin] : pairs) {
    if (!selected(k.id))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = test::loadAheadOfTime(k.id, k.spec, dev);
    auto tileVote = test::loadAheadOfTime(twin, k.spec, dev);
    ++kernels;
    const bool firstKey = k.variant == "first_key";
    for (const Poison *p : {&kClean, &kIssueN2, &kIssueCausal, &kUnattended,
                            &kLongTail, &kScattered, &kSomeCtas, &kNoTiles}) {
      INFO(p->what);
      auto [same, nonFinite] =
          runPair(dev, *kernel, *tileVote, k.spec, *p, seed++);
      CHECK(same);
      // Rows that attend key 150 (N = 201) or key 13, 110, ... (N = 1000)
      // get its NaN or Inf; kv_idx == 0 rows attend none of them.
      if (p == &kClean || p == &kUnattended || firstKey)
        CHECK(nonFinite == 0);
      else if (p == &kIssueCausal || p == &kScattered || p == &kSomeCtas ||
               p == &kNoTiles)
        CHECK(nonFinite > 0);
    }
  }
  CHECK(kernels > 0);
}
