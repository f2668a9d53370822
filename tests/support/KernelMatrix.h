//===- KernelMatrix.h - The variant matrix GPU kernels are checked on -----===//
//
// One list shared by the no-GPU code-generation test (every kernel generated
// for sm_80 and sm_90a and assembled with ptxas) and the [gpu] tests (the
// same kernels, generated ahead of time, run on the GPU against the float64
// and NVRTC references). Header-only; needs only the frontend.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_SUPPORT_KERNELMATRIX_H
#define FLASHJIT_TESTS_SUPPORT_KERNELMATRIX_H

#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Variant.h"

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace flashjit::testing {

/// The no-GPU code-generation tests' sample of the matrix (CI time: assembling
/// every kernel for every target takes ~270 CPU-seconds). A run checks about
/// one (kernel, target) pair in \p every, drawn afresh for each run from
/// FLASHJIT_TEST_SEED (or std::random_device); FLASHJIT_TEST_FULL_MATRIX=1
/// checks every pair. The [gpu] step on the GPU machine loads every matrix
/// kernel and checks it for local memory, so the full sweep runs there.
class MatrixSample {
public:
  explicit MatrixSample(uint64_t every = 3) : every_(every) {
    const char *full = std::getenv("FLASHJIT_TEST_FULL_MATRIX");
    full_ = full && std::string(full) == "1";
    if (const char *env = std::getenv("FLASHJIT_TEST_SEED")) {
      seed_ = std::strtoull(env, nullptr, 0);
    } else {
      std::random_device rd;
      seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
  }
  /// Whether this run checks the pair named \p key (e.g. id + target).
  bool contains(const std::string &key) const {
    if (full_ || every_ <= 1)
      return true;
    uint64_t h = 1469598103934665603ull ^ seed_; // FNV-1a, seeded
    for (unsigned char c : key)
      h = (h ^ c) * 1099511628211ull;
    h ^= h >> 29; // FNV's low bits mix poorly for keys differing at the end
    return ((h * 0x9e3779b97f4a7c15ull) >> 32) % every_ == 0;
  }
  /// The seed that replays this run's sample (as FLASHJIT_TEST_SEED).
  uint64_t seed() const { return seed_; }
  /// Whether every pair is checked.
  bool full() const { return full_; }

private:
  uint64_t every_;
  uint64_t seed_ = 0;
  bool full_ = false;
};

/// One generated kernel: a spec and the id its files are named after.
struct MatrixKernel {
  std::string id;
  std::string variant;
  AttentionSpec spec;
};

/// The variants of the issue-3 matrix, by name.
inline std::vector<std::string> matrixVariants() {
  return {"none",      "causal_tl",    "causal_br", "window_left",
          "window_lr", "window_lr_br", "prefix_lm", "chunked_causal",
          "softcap",   "alibi",        "rel_bias",  "softcap_window",
          "doc_id"};
}

/// The spec of variant \p name at head dim \p d, 16-bit dtype \p dtype and
/// heads_q / heads_kv = \p hq / \p hkv.
inline AttentionSpec matrixSpec(const std::string &name, int d, DType dtype,
                                int hq, int hkv) {
  AttentionSpec s;
  Variant v(name);
  if (name == "causal_tl")
    s.causal = Causal::TopLeft;
  else if (name == "causal_br")
    s.causal = Causal::BottomRight;
  else if (name == "window_left")
    v.mask(sliding_window(37, 0, Alignment::TopLeft));
  else if (name == "window_lr")
    v.mask(sliding_window(50, 20, Alignment::TopLeft));
  else if (name == "window_lr_br")
    v.mask(sliding_window(50, 20, Alignment::BottomRight, false));
  else if (name == "prefix_lm")
    v.mask(prefix_lm(23));
  else if (name == "chunked_causal")
    v.mask(chunked(48) && causal(Alignment::TopLeft));
  else if (name == "softcap") {
    v.scoreMod(softcap(param<float>("cap")));
    s.causal = Causal::TopLeft;
  } else if (name == "alibi")
    v.scoreMod(alibi(buffer<float>("slopes")));
  else if (name == "rel_bias")
    v.scoreMod(relative_bias(buffer<float>("table"), 16));
  else if (name == "softcap_window") {
    v.mask(sliding_window(64, 0, Alignment::BottomRight));
    v.scoreMod(softcap(20.0f));
  } else if (name == "first_key") {
    v.mask(kv_idx == 0);
  } else if (name == "doc_id") {
    auto doc = buffer<int32_t>("doc_id");
    v.mask(doc[q_idx] == doc[kv_idx] && kv_idx <= q_idx);
  }
  s.variant = v;
  s.headDimQK = s.headDimV = d;
  s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = dtype;
  s.headsQ = hq;
  s.headsKV = hkv;
  return s;
}

/// Causal (top-left) with a literal softcap of 30 (the torch benchmark's
/// softcap30), bf16.
inline AttentionSpec softcap30Causal(int d, int hq, int hkv) {
  AttentionSpec s = matrixSpec("causal_tl", d, DType::BF16, hq, hkv);
  Variant v("softcap30_causal");
  v.scoreMod(softcap(30.0f));
  s.variant = v;
  return s;
}

/// bench_kernels.cpp's swa1024 at head dim 128: a causal window of 1024
/// keys (the query's own and 1023 before it), bf16, GQA 4:2.
inline AttentionSpec swa1024D128() {
  AttentionSpec swa = matrixSpec("none", 128, DType::BF16, 4, 2);
  Variant w("swa1024");
  w.mask(sliding_window(1023, 0, Alignment::TopLeft));
  swa.variant = w;
  return swa;
}

/// The benchmark's masked forwards at head dim 128 (bench_kernels.cpp's
/// causal, swa1024 and softcap30; the document-causal mask of
/// run_block_sparse.py), bf16, GQA 2: on sm_90a the first three are the
/// intra-warpgroup overlap by default (TilePolicy.cpp, overlapByDefault),
/// the document mask (buffer reads) the serial warp-specialised step.
/// Their ids start with "ovl_"; the [gpu][generated] overlap case runs them
/// over many key tiles against the float64 reference; gen_matrix_kernels
/// also writes each as `<id>_tilevote` (the in-tile vote), which the
/// [gpu][masked] tests compare with `<id>` (the result check) bit for bit.
inline std::vector<MatrixKernel> overlapMaskedKernels() {
  std::vector<MatrixKernel> out;
  out.push_back({"ovl_causal_tl_d128_bf16_g2", "causal_tl",
                 matrixSpec("causal_tl", 128, DType::BF16, 4, 2)});
  out.push_back({"ovl_swa1024_d128_bf16_g2", "swa1024", swa1024D128()});
  out.push_back({"ovl_softcap30_causal_d128_bf16_g2", "softcap30_causal",
                 softcap30Causal(128, 4, 2)});
  AttentionSpec doc = matrixSpec("doc_id", 128, DType::BF16, 4, 2);
  doc.causal = Causal::TopLeft; // run_block_sparse.py's doc_causal
  doc.variant = Variant("doc_causal");
  auto id = buffer<int32_t>("doc_id");
  doc.variant.mask(id[q_idx] == id[kv_idx]);
  out.push_back({"ovl_doc_causal_d128_bf16_g2", "doc_causal", doc});
  return out;
}

/// Masked forwards at head dim 128 built with the intra-warpgroup overlap
/// by name (GpuMma::WgmmaTmaWsOverlap on sm_90a, the default elsewhere),
/// whatever the default picks: causal, the matrix's two-sided window, the
/// benchmark's 1024-key window, causal + softcap 30 and kv_idx == 0, GQA
/// 2 and 1, both 16-bit dtypes. gen_matrix_kernels writes each as `<id>`
/// (the default: the result check, MaskedValues.h), `<id>_pubvote` (the
/// published masked-value vote, setMaskedValuePublishedVoteForTesting:
/// sessions 20-23's default) and `<id>_tilevote` (the in-tile vote,
/// setMaskedValueTileVoteForTesting: session 20's overlapped kernels); the
/// [gpu][masked] tests poison them and compare the first two with the
/// third bit for bit, the [gpu][generated][overlap] case runs `<id>` and
/// `<id>_pubvote` over many key tiles.
inline std::vector<MatrixKernel> overlapVoteKernels() {
  std::vector<MatrixKernel> out;
  out.push_back({"ovlv_causal_tl_d128_bf16_g2", "causal_tl",
                 matrixSpec("causal_tl", 128, DType::BF16, 4, 2)});
  out.push_back({"ovlv_window_lr_d128_fp16_g2", "window_lr",
                 matrixSpec("window_lr", 128, DType::F16, 4, 2)});
  out.push_back({"ovlv_swa1024_d128_bf16_g2", "swa1024", swa1024D128()});
  out.push_back({"ovlv_softcap30_causal_d128_bf16_g2", "softcap30_causal",
                 softcap30Causal(128, 4, 2)});
  out.push_back({"ovlv_first_key_d128_fp16_g1", "first_key",
                 matrixSpec("first_key", 128, DType::F16, 2, 2)});
  return out;
}

/// Forwards built with the overlap and FlashAttention-3's inter-warpgroup
/// ping-pong by name (GpuMma::WgmmaTmaWsPingPong on sm_90a, the default
/// elsewhere), ids "pingpong_*": at head dim 128 with GQA 2 dense, causal
/// top-left and bottom-right, the benchmark's 1024-key window, a two-sided
/// window, a 37-key window (in a CTA's second query tile the second
/// warpgroup's rows see nothing of key tile 0, the first's see part of it),
/// softcap (a parameter, with causal) and causal + softcap 30; ALiBi (a
/// buffer); bottom-right causal in fp16 without GQA; dense and causal at
/// head dim 64. The [gpu][generated][pingpong] case runs them over odd
/// shapes and many key tiles.
inline std::vector<MatrixKernel> pingPongKernels() {
  std::vector<MatrixKernel> out;
  for (const char *v : {"none", "causal_tl", "causal_br", "window_lr",
                        "window_left", "softcap", "alibi"})
    out.push_back({std::string("pingpong_") + v + "_d128_bf16_g2", v,
                   matrixSpec(v, 128, DType::BF16, 4, 2)});
  out.push_back({"pingpong_swa1024_d128_bf16_g2", "swa1024", swa1024D128()});
  out.push_back({"pingpong_softcap30_causal_d128_bf16_g2", "softcap30_causal",
                 softcap30Causal(128, 4, 2)});
  out.push_back({"pingpong_causal_br_d128_fp16_g1", "causal_br",
                 matrixSpec("causal_br", 128, DType::F16, 2, 2)});
  out.push_back({"pingpong_none_d64_fp16_g1", "none",
                 matrixSpec("none", 64, DType::F16, 2, 2)});
  out.push_back({"pingpong_causal_tl_d64_bf16_g2", "causal_tl",
                 matrixSpec("causal_tl", 64, DType::BF16, 4, 2)});
  return out;
}

/// Every (variant, head dim, dtype) kernel of the matrix; GQA ratios
/// {1, 2, 3, 8} rotate through the list.
inline std::vector<MatrixKernel> kernelMatrix() {
  std::vector<MatrixKernel> out;
  const int gqa[][2] = {{2, 2}, {4, 2}, {6, 2}, {8, 1}};
  int i = 0;
  for (const std::string &name : matrixVariants())
    for (int d : {32, 64, 96, 128, 192, 256})
      for (DType t : {DType::BF16, DType::F16}) {
        const int *g = gqa[i++ % 4];
        std::string id = name + "_d" + std::to_string(d) + "_" +
                         std::string(toString(t)) + "_g" +
                         std::to_string(g[0] / g[1]);
        out.push_back({id, name, matrixSpec(name, d, t, g[0], g[1])});
      }
  return out;
}

/// The default ALiBi forwards of kernelMatrix() that the [gpu][generated]
/// [alibi_factor] case runs over many key tiles: since session 27 their
/// slopes[head] are read once per row before the key loop and
/// |q_idx - kv_idx| comes from one f32 conversion per row and key tile
/// (ScoreFactorTesting.h); head dim 64 (one warpgroup, 128-key tiles), 128
/// (the intra-warpgroup overlap) and 256 (the serial warp-specialised
/// step), GQA. (The fp16 ones run the matrix case's small shapes: with 8
/// query heads the large shape's float64 reference alone took 100 s.)
inline std::vector<MatrixKernel> alibiKernels() {
  std::vector<MatrixKernel> out;
  for (const MatrixKernel &k : kernelMatrix())
    if (k.id == "alibi_d64_bf16_g3" || k.id == "alibi_d128_bf16_g3" ||
        k.id == "alibi_d256_bf16_g3")
      out.push_back(k);
  return out;
}

/// The backward kernels of the [gpu] backward tests and the no-GPU ptxas
/// test (compiled with GpuCompileOptions::kind = Backward): dense, both
/// causal alignments, a two-sided window, chunked causal and a document
/// mask (buffer reads), head dims 64, 96 and 128, both 16-bit dtypes, GQA
/// ratios 1, 2 and 3, and dense, causal and the document mask at head dim
/// 256; then the score modifiers (their score_grad region):
/// causal softcap with a runtime cap (a parameter gradient), ALiBi (slope
/// gradients: an index uniform per head), a relative-position bias table
/// (an index depending on q_idx and kv_idx) and a literal softcap under a
/// window.
inline std::vector<MatrixKernel> backwardKernels() {
  std::vector<MatrixKernel> out;
  const int gqa[][2] = {{2, 2}, {4, 2}, {3, 1}};
  int i = 0;
  for (std::string name : {"none", "causal_tl", "causal_br", "window_lr",
                           "chunked_causal", "doc_id"})
    for (int d : {64, 128}) {
      DType t = i % 2 ? DType::F16 : DType::BF16;
      const int *g = gqa[i++ % 3];
      std::string id = "bwd_" + name + "_d" + std::to_string(d) + "_" +
                       std::string(toString(t)) + "_g" +
                       std::to_string(g[0] / g[1]);
      out.push_back({id, name, matrixSpec(name, d, t, g[0], g[1])});
    }
  out.push_back({"bwd_causal_br_d96_bf16_g1", "causal_br",
                 matrixSpec("causal_br", 96, DType::BF16, 2, 2)});
  // Head dim 256: on sm_90a the wgmma kernel that splits dK and dV's
  // columns over its two warpgroups (BackwardWgmmaSplit.cpp).
  out.push_back({"bwd_none_d256_bf16_g2", "none",
                 matrixSpec("none", 256, DType::BF16, 4, 2)});
  out.push_back({"bwd_causal_tl_d256_fp16_g1", "causal_tl",
                 matrixSpec("causal_tl", 256, DType::F16, 2, 2)});
  out.push_back({"bwd_doc_id_d256_bf16_g3", "doc_id",
                 matrixSpec("doc_id", 256, DType::BF16, 3, 1)});
  const std::pair<const char *, DType> mods[] = {
      {"softcap", DType::BF16},
      {"alibi", DType::F16},
      {"rel_bias", DType::BF16},
      {"softcap_window", DType::F16}};
  for (auto [name, t] : mods)
    for (int d : {64, 128}) {
      const int *g = gqa[i++ % 3];
      std::string id = "bwd_" + std::string(name) + "_d" + std::to_string(d) +
                       "_" + std::string(toString(t)) + "_g" +
                       std::to_string(g[0] / g[1]);
      out.push_back({id, name, matrixSpec(name, d, t, g[0], g[1])});
    }
  // A literal cap under a causal mask at head dim 128: on sm_90a the wgmma
  // backward whose score_grad reads s' recovered from P (MLIRGen's
  // gradOfOutput; the runtime cap above needs the raw score: mma.sync).
  out.push_back({"bwd_softcap30_causal_d128_bf16_g2", "softcap30_causal",
                 softcap30Causal(128, 4, 2)});
  return out;
}

/// The kernels the [gpu][masked] tests (issue 21 section 3: NaN and Inf at
/// masked keys) add to the matrix's: the mask kv_idx == 0 (issue 21's
/// reproduction: every key but the first masked), forward (\p backward
/// false) or backward, both 16-bit dtypes, head dims 64 and 128.
inline std::vector<MatrixKernel> maskedValueKernels(bool backward) {
  std::vector<MatrixKernel> out;
  const std::string prefix = backward ? "mvbwd_" : "mv_";
  out.push_back({prefix + "first_key_d64_bf16_g2", "first_key",
                 matrixSpec("first_key", 64, DType::BF16, 4, 2)});
  out.push_back({prefix + "first_key_d128_fp16_g1", "first_key",
                 matrixSpec("first_key", 128, DType::F16, 2, 2)});
  return out;
}

/// The forward kernels whose results the [gpu][masked] tests also compare,
/// bit for bit, with the same spec built with the in-tile vote
/// (setMaskedValueTileVoteForTesting; gen_matrix_kernels writes those as
/// `<id>_tilevote`): the matrix's causal, window and document kernels and
/// maskedValueKernels()'s at head dims 64 and 128, both 16-bit dtypes (on
/// sm_90a kernels that check their results instead of voting,
/// MaskedValues.h: TMA at head dim 64, warp-specialised at 128).
inline std::vector<MatrixKernel> resultCheckKernels() {
  std::vector<MatrixKernel> out;
  for (const MatrixKernel &k : kernelMatrix())
    if ((k.variant == "causal_tl" || k.variant == "window_lr" ||
         k.variant == "doc_id") &&
        (k.spec.headDimQK == 64 || k.spec.headDimQK == 128))
      out.push_back(k);
  for (const MatrixKernel &k : maskedValueKernels(false))
    out.push_back(k);
  return out;
}

/// The varlen backward kernels of the [gpu][backward] tests and the no-GPU
/// ptxas test (GpuCompileOptions::varlen, kind Backward): both causal
/// alignments (per sequence), no mask, a document mask (buffer reads at
/// per-sequence positions) and causal softcap with a runtime cap (a
/// parameter gradient); GQA ratios 1, 2 and 3, both 16-bit dtypes, head
/// dims 64 and 128.
inline std::vector<MatrixKernel> backwardVarlenKernels() {
  return {
      {"bwdvl_causal_br_d64_bf16_g2", "causal_br",
       matrixSpec("causal_br", 64, DType::BF16, 4, 2)},
      {"bwdvl_causal_tl_d128_fp16_g3", "causal_tl",
       matrixSpec("causal_tl", 128, DType::F16, 3, 1)},
      {"bwdvl_none_d128_bf16_g1", "none",
       matrixSpec("none", 128, DType::BF16, 2, 2)},
      {"bwdvl_doc_id_d64_fp16_g2", "doc_id",
       matrixSpec("doc_id", 64, DType::F16, 4, 2)},
      {"bwdvl_softcap_d64_bf16_g1", "softcap",
       matrixSpec("softcap", 64, DType::BF16, 2, 2)},
  };
}

/// The block-sparse backward kernels (GpuCompileOptions::blockSparse with
/// kind Backward) of the [gpu][backward][block-sparse] tests, the ptxas
/// test and scripts/ptx-matrix.sh: a document mask (block masks built from
/// the mask), a sliding window, no mask and causal (random BSR layouts), a
/// document mask with a softcap (score_grad on listed tiles); head dims 64,
/// 128 and 256 (the split wgmma kernel; sm_90a only: mma.sync spills
/// there), both 16-bit dtypes, GQA ratios 1, 2 and 3. Ids starting
/// `bwdbsvl_` are varlen and block-sparse.
inline std::vector<MatrixKernel> backwardSparseKernels() {
  std::vector<MatrixKernel> out = {
      {"bwdbs_doc_id_d64_bf16_g2", "doc_id",
       matrixSpec("doc_id", 64, DType::BF16, 4, 2)},
      {"bwdbs_window_lr_d128_fp16_g3", "window_lr",
       matrixSpec("window_lr", 128, DType::F16, 3, 1)},
      {"bwdbs_none_d64_fp16_g1", "none",
       matrixSpec("none", 64, DType::F16, 2, 2)},
      {"bwdbs_causal_br_d128_bf16_g2", "causal_br",
       matrixSpec("causal_br", 128, DType::BF16, 4, 2)},
      {"bwdbsvl_doc_id_d64_fp16_g2", "doc_id",
       matrixSpec("doc_id", 64, DType::F16, 4, 2)},
      {"bwdbs_doc_id_d256_bf16_g2", "doc_id",
       matrixSpec("doc_id", 256, DType::BF16, 2, 1)},
  };
  AttentionSpec capped = matrixSpec("doc_id", 64, DType::BF16, 2, 2);
  capped.variant.scoreMod(softcap(20.0f));
  out.push_back({"bwdbs_doc_softcap_d64_bf16_g1", "doc_softcap", capped});
  return out;
}

/// The kernels of the block-sparse backward timing ([.bwdsparsebench],
/// in [bwdbench]): bf16 document-causal (doc_id), hidden 2048, head dims
/// 64 and 128; the block-sparse forward `<id>_fwd` (default tiles; its
/// block-mask builder makes the mask), the default backward `<id>` (wgmma
/// on sm_90a, prefetching the next listed query tile), `<id>_nopf` (the
/// same without the prefetch: setListedPrefetchBackwardForTesting off),
/// `<id>_noftz` (the default with the softmax exponentials as
/// `ex2.approx.f32`: setSoftmaxExp2FtzForTesting off) and the mma.sync
/// backward `<id>_mma` (the old paths), written by gen_matrix_kernels
/// beside the timing pairs.
inline std::vector<MatrixKernel> sparseBenchKernels() {
  std::vector<MatrixKernel> out;
  for (int d : {64, 128})
    out.push_back({"sbench_doc_d" + std::to_string(d), "doc_id",
                   matrixSpec("doc_id", d, DType::BF16, 2048 / d, 2048 / d)});
  return out;
}

/// The kernels of the [.bwdbench] timing (forward `<id>_fwd` with the
/// default tiles, backward `<id>`): bf16, dense and causal, head dims 64,
/// 128 and 256, hidden 2048 (heads = 2048 / head dim); causal softcap and ALiBi
/// (with their parameter / slope gradients) at head dim 128, and causal
/// with a literal softcap of 30 at head dim 128 (no parameter gradient), a
/// causal sliding window of 1024 keys (variant "window_1024") at head dim
/// 128. Ids ending `_sync` are the same masked specs with the wgmma
/// backward's synchronous tile step (gen_matrix_kernels:
/// GpuCompileOptions::syncBackward; the default before session 17), timed
/// beside the pipelined one they take by default. A causal sliding window
/// of 1024 keys at head dim 64 too; ids ending `_noftz` are dense, causal
/// (head dims 64 and 128) and that window with the softmax exponentials
/// as `ex2.approx.f32` (gen_matrix_kernels: setSoftmaxExp2FtzForTesting
/// off, forward and backward; the default before session 18), timed beside
/// the default `ex2.approx.ftz.f32`. Ids ending `_noscan` are the causal
/// and window kernels at head dim 64 whose tile loop steps through every
/// query tile (gen_matrix_kernels: setTileRangeBackwardForTesting off; the
/// default before session 20), timed beside the default that loops over
/// the visited range only. Ids ending `_loadfirst` are dense and causal at
/// head dim 128 whose pipelined tile step issues the next tile's loads
/// before S^T and dP^T and the dS^T stores before dV (gen_matrix_kernels:
/// setProductsFirstBackwardForTesting off; the default before session 21),
/// timed beside the default; `bench_causal_tl_d128_lateload` issues the
/// loads after the products too (setMaskedLoadsAfterProductsBackward-
/// ForTesting on; not the default for masked kernels). Ids ending `_scan`
/// are causal and the window at head dim 128 with the visited-range loop
/// (setTileRangeWideBackwardForTesting on; not the default).
inline std::vector<MatrixKernel> benchKernels() {
  std::vector<MatrixKernel> out;
  for (std::string name : {"none", "causal_tl"})
    for (int d : {64, 128, 256})
      out.push_back({"bench_" + name + "_d" + std::to_string(d), name,
                     matrixSpec(name, d, DType::BF16, 2048 / d, 2048 / d)});
  for (std::string name : {"softcap", "alibi"})
    out.push_back({"bench_" + name + "_d128", name,
                   matrixSpec(name, 128, DType::BF16, 16, 16)});
  out.push_back({"bench_softcap30_d128", "softcap30_causal",
                 softcap30Causal(128, 16, 16)});
  for (int d : {128, 64}) {
    AttentionSpec w = matrixSpec("none", d, DType::BF16, 2048 / d, 2048 / d);
    w.variant.mask(sliding_window(1024, 0, Alignment::TopLeft));
    out.push_back({"bench_window_d" + std::to_string(d), "window_1024", w});
  }
  // The synchronous step beside the pipelined one (masked, head dim 128).
  for (const char *id :
       {"bench_causal_tl_d128", "bench_softcap30_d128", "bench_window_d128"})
    for (size_t i = 0, n = out.size(); i < n; ++i)
      if (out[i].id == id)
        out.push_back({out[i].id + "_sync", out[i].variant, out[i].spec});
  // The dense tile loop stepping through every query tile (no visited-range
  // scan) beside the default (masked, head dim 64).
  for (const char *id : {"bench_causal_tl_d64", "bench_window_d64"})
    for (size_t i = 0, n = out.size(); i < n; ++i)
      if (out[i].id == id)
        out.push_back({out[i].id + "_noscan", out[i].variant, out[i].spec});
  // The pipelined head-dim-128 step with the next tile's loads and the dS^T
  // stores before its products beside the default.
  for (const char *id : {"bench_none_d128", "bench_causal_tl_d128"})
    for (size_t i = 0, n = out.size(); i < n; ++i)
      if (out[i].id == id)
        out.push_back({out[i].id + "_loadfirst", out[i].variant, out[i].spec});
  // The visited-range loop above head dim 64 (not the default) beside the
  // default loop through every query tile.
  for (const char *id : {"bench_causal_tl_d128", "bench_window_d128"})
    for (size_t i = 0, n = out.size(); i < n; ++i)
      if (out[i].id == id)
        out.push_back({out[i].id + "_scan", out[i].variant, out[i].spec});
  // Causal with the loads after the products too (not the default).
  for (size_t i = 0, n = out.size(); i < n; ++i)
    if (out[i].id == "bench_causal_tl_d128")
      out.push_back({out[i].id + "_lateload", out[i].variant, out[i].spec});
  // The softmax exponentials without ftz beside the default.
  for (const char *id :
       {"bench_none_d64", "bench_none_d128", "bench_causal_tl_d64",
        "bench_causal_tl_d128", "bench_window_d64"})
    for (size_t i = 0, n = out.size(); i < n; ++i)
      if (out[i].id == id)
        out.push_back({out[i].id + "_noftz", out[i].variant, out[i].spec});
  return out;
}

/// The kernels of the [.maskbench] timing (issue 21 section 3: what the
/// masked-value guard costs; forward `<id>_fwd` with the default tiles,
/// backward `<id>`; written by `gen_matrix_kernels DIR sm_90a mask-bench`
/// only): bf16, hidden 2048 (heads = 2048 / head dim), head dims 64 and
/// 128; causal (top-left), a causal sliding window of 1024 keys and a
/// document-causal mask (doc_id buffer). Then forward-only ids ending
/// `_ovl` (maskBenchForwardOnly): causal, the window and causal + softcap
/// 30 at head dim 128 with the intra-warpgroup overlap by name
/// (GpuMma::WgmmaTmaWsOverlap), whatever the default picks.
inline std::vector<MatrixKernel> maskBenchKernels() {
  std::vector<MatrixKernel> out;
  for (int d : {64, 128}) {
    const std::string dim = "_d" + std::to_string(d);
    out.push_back(
        {"mbench_causal" + dim, "causal_tl",
         matrixSpec("causal_tl", d, DType::BF16, 2048 / d, 2048 / d)});
    AttentionSpec w = matrixSpec("none", d, DType::BF16, 2048 / d, 2048 / d);
    w.variant.mask(sliding_window(1024, 0, Alignment::TopLeft));
    out.push_back({"mbench_window" + dim, "window_1024", w});
    out.push_back({"mbench_doc" + dim, "doc_id",
                   matrixSpec("doc_id", d, DType::BF16, 2048 / d, 2048 / d)});
  }
  for (size_t i = 0, n = out.size(); i < n; ++i)
    if (out[i].spec.headDimQK == 128 && out[i].variant != "doc_id")
      out.push_back({out[i].id + "_ovl", out[i].variant, out[i].spec});
  out.push_back(
      {"mbench_softcap30_d128_ovl", "causal_tl", softcap30Causal(128, 16, 16)});
  return out;
}

/// Whether \p k of maskBenchKernels() is timed forward only, with the
/// overlap by name (ids ending `_ovl`).
inline bool maskBenchForwardOnly(const MatrixKernel &k) {
  const std::string tail = "_ovl";
  return k.id.size() > tail.size() &&
         k.id.compare(k.id.size() - tail.size(), tail.size(), tail) == 0;
}

/// A block-sparse and/or varlen kernel of the [gpu] sparse tests.
struct SparseKernel {
  std::string id;
  AttentionSpec spec;
  bool varlen = false;
  bool blockSparse = false;
};

/// The issue-7 kernels: document-causal masks (doc_id buffer) built into
/// block masks, user block-sparse layouts over no mask and over an index
/// mask, and varlen batches with and without block masks; GQA and both
/// 16-bit dtypes.
inline std::vector<SparseKernel> sparseKernels() {
  auto spec = [](const std::string &v, int d, DType t, int hq, int hkv) {
    return matrixSpec(v, d, t, hq, hkv);
  };
  return {
      {"bs_doc_d64_bf16_g2", spec("doc_id", 64, DType::BF16, 4, 2), false,
       true},
      {"bs_doc_d128_fp16_g1", spec("doc_id", 128, DType::F16, 2, 2), false,
       true},
      {"bs_none_d128_bf16_g2", spec("none", 128, DType::BF16, 4, 2), false,
       true},
      {"bs_window_d64_fp16_g3", spec("window_lr", 64, DType::F16, 6, 2), false,
       true},
      {"bs_causal_tl_d128_bf16_g1", spec("causal_tl", 128, DType::BF16, 2, 2),
       false, true},
      {"vl_causal_br_d64_bf16_g2", spec("causal_br", 64, DType::BF16, 4, 2),
       true, false},
      {"vl_softcap_d128_fp16_g1", spec("softcap", 128, DType::F16, 2, 2), true,
       false},
      {"vl_bs_doc_d128_bf16_g2", spec("doc_id", 128, DType::BF16, 4, 2), true,
       true},
  };
}

/// The issue-22 kernels: specs with an attention sink (AttentionSpec::sink)
/// over dense, causal (top-left: rows with no allowed key), a two-sided
/// window, softcap (a parameter), a document mask (buffer reads), varlen
/// and block-sparse; GQA, both 16-bit dtypes, head dims 64 and 128 (wgmma
/// on sm_90a) and 96 (mma.sync). Written by gen_matrix_kernels in the
/// sparse format; `sink_bench_d128` is the timing pair's sink kernel (its
/// twin without a sink is `sink_bench_plain_d128`).
inline std::vector<SparseKernel> sinkKernels() {
  auto spec = [](const std::string &v, int d, DType t, int hq, int hkv) {
    AttentionSpec s = matrixSpec(v, d, t, hq, hkv);
    s.sink = true;
    return s;
  };
  AttentionSpec plain = matrixSpec("none", 128, DType::BF16, 16, 16);
  return {
      {"sink_none_d128_bf16_g2", spec("none", 128, DType::BF16, 4, 2)},
      {"sink_causal_tl_d64_fp16_g1", spec("causal_tl", 64, DType::F16, 2, 2)},
      {"sink_window_lr_d96_bf16_g3", spec("window_lr", 96, DType::BF16, 6, 2)},
      {"sink_softcap_d128_fp16_g2", spec("softcap", 128, DType::F16, 4, 2)},
      {"sink_doc_d64_bf16_g1", spec("doc_id", 64, DType::BF16, 2, 2)},
      {"sink_vl_causal_br_d64_bf16_g2",
       spec("causal_br", 64, DType::BF16, 4, 2), true, false},
      {"sink_bs_doc_d128_bf16_g2", spec("doc_id", 128, DType::BF16, 4, 2),
       false, true},
      {"sink_bench_d128", spec("none", 128, DType::BF16, 16, 16)},
      {"sink_bench_plain_d128", plain},
  };
}

/// The issue-18 kernels: fp8 Q/K/V (sm_90a only: gen_matrix_kernels writes
/// them with the sm_90a default instructions), O bf16 or fp16, over dense,
/// causal (both alignments), a two-sided window, softcap (a parameter), a
/// document mask (buffer reads) and a score modifier reading a buffer
/// (ALiBi); e4m3 throughout or e5m2 K/V; GQA; head dims 64, 128, 192 and
/// 256, 96, and unequal 160 / 80 and, masked, 96 / 112 (V transposes of
/// 640 and 896 units: a guarded last round, WgmmaFp8.cpp). Ids `fp8_vl_*` are
/// varlen, `fp8_bs_*` block-sparse (document masks built by the block-mask
/// builder, causal), `fp8_vl_bs_*` both. `fp8_bench_e4m3_d<D>` /
/// `fp8_bench_bf16_d<D>` (D = 128, 256) are the
/// [.fp8bench] timing pairs (the second the bf16 default kernel of the same
/// shape), `fp8_bench_vl_e4m3_d128` the varlen one,
/// `fp8_bench_causal_e4m3_d128` / `..._noiso` the causal pair with and
/// without masked-key isolation (gen_matrix_kernels writes `_noiso` ids
/// with setMaskedValueIsolationForTesting(false)). Written in the sparse
/// format.
inline std::vector<SparseKernel> fp8Kernels() {
  auto spec = [](const std::string &v, int d, DType kv, DType o, int hq,
                 int hkv) {
    AttentionSpec s = matrixSpec(v, d, DType::BF16, hq, hkv);
    s.dtypeQ = DType::E4M3;
    s.dtypeK = s.dtypeV = kv;
    s.dtypeO = o;
    return s;
  };
  const DType e4 = DType::E4M3, e5 = DType::E5M2;
  auto unequal = [&](int dqk, int dv, const std::string &v = "none",
                     DType o = DType::F16, int hq = 2, int hkv = 2) {
    AttentionSpec s = spec(v, dqk, e5, o, hq, hkv);
    s.headDimV = dv;
    return s;
  };
  return {
      {"fp8_none_d128_e4m3_bf16_g2", spec("none", 128, e4, DType::BF16, 4, 2)},
      {"fp8_none_d64_e4m3_fp16_g1", spec("none", 64, e4, DType::F16, 2, 2)},
      {"fp8_causal_tl_d128_e4m3_bf16_g1",
       spec("causal_tl", 128, e4, DType::BF16, 2, 2)},
      {"fp8_causal_br_d64_e5m2_bf16_g2",
       spec("causal_br", 64, e5, DType::BF16, 4, 2)},
      {"fp8_window_lr_d128_e4m3_fp16_g3",
       spec("window_lr", 128, e4, DType::F16, 6, 2)},
      {"fp8_softcap_d128_e5m2_bf16_g2",
       spec("softcap", 128, e5, DType::BF16, 4, 2)},
      {"fp8_doc_d64_e4m3_bf16_g1", spec("doc_id", 64, e4, DType::BF16, 2, 2)},
      {"fp8_alibi_d128_e4m3_bf16_g2",
       spec("alibi", 128, e4, DType::BF16, 4, 2)},
      {"fp8_bench_e4m3_d128", spec("none", 128, e4, DType::BF16, 16, 16)},
      {"fp8_bench_bf16_d128", matrixSpec("none", 128, DType::BF16, 16, 16)},
      {"fp8_none_d256_e4m3_bf16_g2", spec("none", 256, e4, DType::BF16, 4, 2)},
      {"fp8_causal_br_d256_e5m2_fp16_g3",
       spec("causal_br", 256, e5, DType::F16, 6, 2)},
      {"fp8_window_lr_d192_e4m3_bf16_g1",
       spec("window_lr", 192, e4, DType::BF16, 2, 2)},
      {"fp8_vl_causal_br_d128_e4m3_bf16_g2",
       spec("causal_br", 128, e4, DType::BF16, 4, 2), true, false},
      {"fp8_vl_softcap_d64_e5m2_fp16_g1",
       spec("softcap", 64, e5, DType::F16, 2, 2), true, false},
      {"fp8_vl_causal_tl_d256_e4m3_bf16_g2",
       spec("causal_tl", 256, e4, DType::BF16, 4, 2), true, false},
      {"fp8_bs_doc_d128_e4m3_bf16_g2",
       spec("doc_id", 128, e4, DType::BF16, 4, 2), false, true},
      {"fp8_bs_causal_tl_d64_e4m3_fp16_g1",
       spec("causal_tl", 64, e4, DType::F16, 2, 2), false, true},
      {"fp8_bs_doc_d256_e5m2_bf16_g2",
       spec("doc_id", 256, e5, DType::BF16, 4, 2), false, true},
      {"fp8_vl_bs_doc_d128_e4m3_bf16_g2",
       spec("doc_id", 128, e4, DType::BF16, 4, 2), true, true},
      {"fp8_causal_tl_d96_e4m3_bf16_g2",
       spec("causal_tl", 96, e4, DType::BF16, 4, 2)},
      {"fp8_none_dqk160_dv80_e5m2_fp16_g1", unequal(160, 80)},
      {"fp8_causal_br_dqk96_dv112_e5m2_bf16_g2",
       unequal(96, 112, "causal_br", DType::BF16, 4, 2)},
      {"fp8_bs_doc_d96_e4m3_fp16_g2", spec("doc_id", 96, e4, DType::F16, 4, 2),
       false, true},
      {"fp8_bench_e4m3_d256", spec("none", 256, e4, DType::BF16, 8, 8)},
      {"fp8_bench_bf16_d256", matrixSpec("none", 256, DType::BF16, 8, 8)},
      {"fp8_bench_vl_e4m3_d128", spec("none", 128, e4, DType::BF16, 16, 16),
       true, false},
      {"fp8_bench_causal_e4m3_d128",
       spec("causal_tl", 128, e4, DType::BF16, 16, 16)},
      {"fp8_bench_causal_e4m3_d128_noiso",
       spec("causal_tl", 128, e4, DType::BF16, 16, 16)},
  };
}

/// The issue-16 kernels: head dims that are not multiples of 16 (the GPU
/// forward pads them to one in shared memory): 8, 40, 59, 72, 111 and 200,
/// unequal head dims (qk 40 / v 72, qk 20 / v 58: 8- and 4-byte loads, qk 64
/// / v 59), a mask, a score modifier with a parameter, a buffer score
/// modifier, a document mask, varlen and block-sparse; GQA and both 16-bit
/// dtypes. mma.sync on both arches (the default for these head dims).
/// Written by gen_matrix_kernels in the sparse format.
inline std::vector<SparseKernel> paddedKernels() {
  auto spec = [](const std::string &v, int dqk, int dv, DType t, int hq,
                 int hkv) {
    AttentionSpec s = matrixSpec(v, dqk, t, hq, hkv);
    s.headDimV = dv;
    return s;
  };
  return {
      {"pad_none_d8_bf16_g1", spec("none", 8, 8, DType::BF16, 2, 2)},
      {"pad_causal_br_d40_fp16_g2",
       spec("causal_br", 40, 40, DType::F16, 4, 2)},
      {"pad_softcap_d59_bf16_g3", spec("softcap", 59, 59, DType::BF16, 6, 2)},
      {"pad_window_lr_d72_bf16_g1",
       spec("window_lr", 72, 72, DType::BF16, 2, 2)},
      {"pad_alibi_d111_fp16_g2", spec("alibi", 111, 111, DType::F16, 4, 2)},
      {"pad_doc_d200_bf16_g1", spec("doc_id", 200, 200, DType::BF16, 2, 2)},
      {"pad_none_qk40_v72_bf16_g2", spec("none", 40, 72, DType::BF16, 4, 2)},
      {"pad_causal_tl_qk20_v58_fp16_g1",
       spec("causal_tl", 20, 58, DType::F16, 2, 2)},
      {"pad_none_qk64_v59_bf16_g3", spec("none", 64, 59, DType::BF16, 6, 2)},
      {"pad_vl_causal_br_d59_fp16_g2",
       spec("causal_br", 59, 59, DType::F16, 4, 2), true, false},
      {"pad_bs_doc_d111_bf16_g2", spec("doc_id", 111, 111, DType::BF16, 4, 2),
       false, true},
  };
}

/// A kernel compiled with non-default GPU options (sm_90a): mma.sync where
/// the default is wgmma, unequal head dims, wgmma tiles other than the
/// default ones, and the warp-specialised forward where the default is
/// not (GpuCompileOptions fields; 0 and "default" keep defaults; mma as
/// toString(GpuMma) spells it).
struct OptionKernel {
  std::string id;
  AttentionSpec spec;
  std::string mma = "default";
  int blockN = 0;
  int numWarps = 0;
};

/// The option kernels: generated ahead of time with the matrix and run by
/// the [gpu] tests on the same odd shapes.
inline std::vector<OptionKernel> optionKernels() {
  auto custom = [](const std::string &name, int d, DType t, auto build) {
    AttentionSpec s = matrixSpec("none", d, t, 4, 2);
    Variant v(name);
    build(v);
    s.variant = v;
    return s;
  };
  auto unequal = [](const std::string &v, int dqk, int dv, DType t) {
    AttentionSpec s = matrixSpec(v, dqk, t, 4, 2);
    s.headDimV = dv;
    return s;
  };
  return {
      {"opt_sync_causal_tl_d128_bf16_g2",
       matrixSpec("causal_tl", 128, DType::BF16, 4, 2), "mma.sync"},
      {"opt_sync_softcap_d64_fp16_g1",
       matrixSpec("softcap", 64, DType::F16, 2, 2), "mma.sync"},
      {"opt_sync_doc_id_d256_bf16_g1",
       matrixSpec("doc_id", 256, DType::BF16, 2, 2), "mma.sync"},
      {"opt_wg_causal_tl_d128v64_bf16_g2",
       unequal("causal_tl", 128, 64, DType::BF16)},
      {"opt_wg_softcap_d64v128_fp16_g2",
       unequal("softcap", 64, 128, DType::F16)},
      {"opt_wg_window_lr_d128_bf16_n48_w4",
       matrixSpec("window_lr", 128, DType::BF16, 2, 1), "wgmma", 48, 4},
      {"opt_wg_none_d256_fp16_n16", matrixSpec("none", 256, DType::F16, 2, 2),
       "wgmma", 16},
      {"opt_wg_alibi_d192_bf16_n112",
       matrixSpec("alibi", 192, DType::BF16, 2, 2), "wgmma", 112, 8},
      // Buffer reads on the right of && / || and in select (scf.if regions
      // in the attn IR).
      {"opt_wg_causal_and_doc_d64_bf16_g2",
       custom("causal_and_doc", 64, DType::BF16,
              [](Variant &v) {
                auto doc = buffer<int32_t>("doc_id");
                v.mask(kv_idx <= q_idx && doc[q_idx] == doc[kv_idx]);
              })},
      {"opt_sync_causal_or_doc_d96_fp16_g2",
       custom("causal_or_doc", 96, DType::F16,
              [](Variant &v) {
                auto doc = buffer<int32_t>("doc_id");
                v.mask(kv_idx <= q_idx || doc[q_idx] == doc[kv_idx]);
              }),
       "mma.sync"},
      {"opt_wg_select_bias_d128_bf16_g2",
       custom("select_bias", 128, DType::BF16,
              [](Variant &v) {
                auto table = buffer<float>("table");
                v.scoreMod(
                    select(q_idx > kv_idx, score + table[q_idx % 16], score));
              })},
      // Issue 16: the warp-specialised forward at head dim 64 (two consumer
      // warpgroups, block_m 128; the default there is one warpgroup
      // without a producer), with 64-key tiles, with three consumer
      // warpgroups (num_warps 12, block_m 192; at 160 registers bottom-right
      // causal spills 4 bytes, ptxas 13) and with the intra-warpgroup
      // overlap.
      {"opt_ws_none_d64_bf16_g2", matrixSpec("none", 64, DType::BF16, 4, 2),
       "wgmma.tma.ws"},
      {"opt_ws_causal_tl_d64_fp16_g1",
       matrixSpec("causal_tl", 64, DType::F16, 2, 2), "wgmma.tma.ws"},
      {"opt_ws_causal_br_d64_bf16_g3",
       matrixSpec("causal_br", 64, DType::BF16, 6, 2), "wgmma.tma.ws"},
      {"opt_ws_window_lr_d64_bf16_g1",
       matrixSpec("window_lr", 64, DType::BF16, 2, 2), "wgmma.tma.ws"},
      {"opt_ws_softcap_d64_fp16_g2",
       matrixSpec("softcap", 64, DType::F16, 4, 2), "wgmma.tma.ws"},
      {"opt_ws_alibi_d64_bf16_g2", matrixSpec("alibi", 64, DType::BF16, 4, 2),
       "wgmma.tma.ws"},
      {"opt_ws_doc_id_d64_bf16_g1", matrixSpec("doc_id", 64, DType::BF16, 2, 2),
       "wgmma.tma.ws"},
      {"opt_ws_window_left_d64_fp16_g2_n64",
       matrixSpec("window_left", 64, DType::F16, 4, 2), "wgmma.tma.ws", 64},
      {"opt_ws3_none_d64_bf16_g2", matrixSpec("none", 64, DType::BF16, 4, 2),
       "wgmma.tma.ws", 0, 12},
      {"opt_ws3_causal_tl_d64_fp16_g1",
       matrixSpec("causal_tl", 64, DType::F16, 2, 2), "wgmma.tma.ws", 0, 12},
      {"opt_ws3_softcap_d64_bf16_g3",
       matrixSpec("softcap", 64, DType::BF16, 6, 2), "wgmma.tma.ws", 0, 12},
      {"opt_wsov_none_d64_fp16_g1", matrixSpec("none", 64, DType::F16, 2, 2),
       "wgmma.tma.ws.overlap"},
      {"opt_wsov_causal_tl_d64_bf16_g2",
       matrixSpec("causal_tl", 64, DType::BF16, 4, 2), "wgmma.tma.ws.overlap"},
      {"opt_wsov_softcap_d64_bf16_g1",
       matrixSpec("softcap", 64, DType::BF16, 2, 2), "wgmma.tma.ws.overlap"},
  };
}

/// The issue-20 ring kernels: \p spec is the attention over the whole
/// sequence; the kernel is the dense GPU forward of
/// ringKernelSpec(spec) = contextParallelSpec(spec, spec.dtypeO) (global
/// indices, partial O in the 16-bit dtype), run by ringAttentionGpu: a
/// causal mask, a document mask (buffer reads at global indices) and a
/// two-sided window; GQA and both 16-bit dtypes.
struct RingKernel {
  std::string id;
  AttentionSpec spec;
};

inline AttentionSpec ringKernelSpec(const AttentionSpec &spec) {
  return contextParallelSpec(spec, spec.dtypeO);
}

inline std::vector<RingKernel> ringKernels() {
  return {
      {"ring_causal_tl_d64_bf16_g2",
       matrixSpec("causal_tl", 64, DType::BF16, 4, 2)},
      {"ring_doc_d64_fp16_g1", matrixSpec("doc_id", 64, DType::F16, 2, 2)},
      {"ring_window_lr_d64_bf16_g1",
       matrixSpec("window_lr", 64, DType::BF16, 2, 2)},
  };
}

/// The issue-20 ring backward kernels: \p spec is the attention over the
/// whole sequence; the kernel is the dense GPU backward
/// (GpuCompileOptions::kind = Backward) of ringKernelSpec(spec), run by
/// ringAttentionBackwardGpu: no mask, a causal mask with GQA, a document
/// mask (buffer reads at global indices); both 16-bit dtypes.
inline std::vector<RingKernel> ringBackwardKernels() {
  return {
      {"ringbwd_none_d64_bf16_g1", matrixSpec("none", 64, DType::BF16, 2, 2)},
      {"ringbwd_causal_tl_d64_bf16_g2",
       matrixSpec("causal_tl", 64, DType::BF16, 4, 2)},
      {"ringbwd_doc_d64_fp16_g1", matrixSpec("doc_id", 64, DType::F16, 2, 2)},
  };
}

} // namespace flashjit::testing

#endif // FLASHJIT_TESTS_SUPPORT_KERNELMATRIX_H
