//===- Fp8CpuTest.cpp - fp8 inputs on the CPU backend, GPU refusal --------===//
//
// Issue 18's foundation. The CPU backend runs fp8 specs (Q, K, V in e4m3 or
// e5m2 with per-tensor or per-[batch, kv head] descales; the runtime
// dequantises them to f32 on load) and is checked against the float64
// reference on the same fp8 inputs (Fp8Test.cpp checks that reference
// against the f32 reference on inputs decoded by hand), on fresh random
// inputs of odd shapes over 16-row tiles: GQA, causal in both alignments,
// sliding window with softcap, a score modifier reading head and a runtime
// parameter, a document mask reading a buffer, block-sparse, and varlen
// with an empty sequence. O is poisoned with NaN first. Tolerance with
// reference r: |o - r| <= tol (1 + |r|), tol = 1e-4 for an fp32 O (the
// kernel computes in f32 from inputs rounded once to f32), 1e-2 for bf16;
// LSE to 1e-4 (1 + |r|). The backward, ring and paged decoding refuse fp8;
// the GPU compiler refuses it on sm_80 (no fp8 wgmma) and, on sm_90a, where
// no fp8 kernel is built (Fp8GpuCodegenTest.cpp: the ones that are).
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Reference.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::freshSeed;

namespace {

/// A case: how to set up the spec and bind its arguments.
struct Fp8Case {
  std::string name;
  std::function<void(AttentionSpec &)> setup;
  std::function<void(Arguments &, std::vector<int32_t> &)> bind =
      [](Arguments &, std::vector<int32_t> &) {};
};

std::vector<Fp8Case> cases() {
  std::vector<Fp8Case> c;
  c.push_back({"f8_plain", [](AttentionSpec &) {}});
  c.push_back({"f8_causal_br",
               [](AttentionSpec &s) { s.causal = Causal::BottomRight; }});
  c.push_back(
      {"f8_causal_tl", [](AttentionSpec &s) { s.causal = Causal::TopLeft; }});
  c.push_back({"f8_window_softcap", [](AttentionSpec &s) {
                 s.variant.mask(sliding_window(9, 2, Alignment::BottomRight));
                 s.variant.scoreMod(softcap(3.0f));
               }});
  c.push_back({"f8_score_param",
               [](AttentionSpec &s) {
                 s.variant.scoreMod(score * param<float>("temp") +
                                    cast<float>(head) * 0.25f);
               },
               [](Arguments &a, std::vector<int32_t> &) {
                 a.set("temp", Scalar::f32(1.5));
               }});
  c.push_back({"f8_document",
               [](AttentionSpec &s) {
                 Buffer doc = buffer<int32_t>("doc_id");
                 s.variant.mask(doc[q_idx] == doc[kv_idx]);
               },
               [](Arguments &a, std::vector<int32_t> &data) {
                 data.resize(64);
                 for (int i = 0; i < 64; ++i)
                   data[i] = i / 13;
                 a.bind("doc_id", data.data(), 64);
               }});
  return c;
}

/// Random N(0, 1) values with two 3x channels per row (f32, flat).
std::vector<float> randomInput(std::mt19937_64 &rng, int64_t n, int64_t dim) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(std::max<int64_t>(n, 1));
  for (int64_t i = 0; i < n; ++i)
    x[i] = g(rng) * (i % dim < 2 ? 3.0f : 1.0f);
  return x;
}

/// Checks \p o [B, H, S, D] or [T, H, D] (any layout: indexed by
/// \p oAt(i) for the reference's flat index i) against \p refO / \p refLse.
std::string compare(const std::vector<double> &refO,
                    const std::vector<double> &refLse,
                    const std::function<double(size_t)> &oAt,
                    const std::function<double(size_t)> &lseAt, double tol) {
  for (size_t i = 0; i < refO.size(); ++i)
    if (!(std::fabs(oAt(i) - refO[i]) <= tol * (1 + std::fabs(refO[i]))))
      return fmt::format("O[{}] = {}, reference {}", i, oAt(i), refO[i]);
  for (size_t i = 0; i < refLse.size(); ++i) {
    if (std::isinf(refLse[i]) ? lseAt(i) != refLse[i]
                              : !(std::fabs(lseAt(i) - refLse[i]) <=
                                  1e-4 * (1 + std::fabs(refLse[i]))))
      return fmt::format("LSE[{}] = {}, reference {}", i, lseAt(i), refLse[i]);
  }
  return "";
}

/// The fp8 dtypes of one run: Q/K, V.
struct Formats {
  DType qk, v;
};

/// One dense run of \p fc with \p f8, \p scaling and output \p dtypeO.
std::string runDense(const Fp8Case &fc, Formats f8, Fp8Scaling scaling,
                     DType dtypeO, bool blockSparse, std::mt19937_64 &rng) {
  AttentionSpec spec;
  spec.variant = Variant(fc.name);
  spec.headDimQK = 40;
  spec.headDimV = 24;
  spec.headsQ = 6;
  spec.headsKV = 2;
  spec.dtypeQ = spec.dtypeK = f8.qk;
  spec.dtypeV = f8.v;
  spec.dtypeO = dtypeO;
  fc.setup(spec);
  CompileOptions opts;
  opts.blockM = opts.blockN = 16;
  opts.blockSparse = blockSparse;
  auto kernel = test::cachedKernel(spec, opts);
  const int64_t b = 2, sq = 37, sk = 53;
  std::vector<float> q = randomInput(rng, b * 6 * sq * 40, 40),
                     k = randomInput(rng, b * 2 * sk * 40, 40),
                     v = randomInput(rng, b * 2 * sk * 24, 24);
  auto f32 = [](std::vector<float> &x, std::array<int64_t, 4> sh) {
    return TensorRef::contiguous(x.data(), DType::F32, sh);
  };
  Fp8Tensor q8 = quantizeFp8(f32(q, {b, 6, sq, 40}), f8.qk, scaling, 3);
  Fp8Tensor k8 = quantizeFp8(f32(k, {b, 2, sk, 40}), f8.qk, scaling);
  Fp8Tensor v8 = quantizeFp8(f32(v, {b, 2, sk, 24}), f8.v, scaling);
  Arguments args;
  std::vector<int32_t> data;
  fc.bind(args, data);
  args.qDescale = q8.descaleRef();
  args.kDescale = k8.descaleRef();
  args.vDescale = v8.descaleRef();
  test::StridedTensor o(dtypeO, {b, 6, sq, 24}, /*seqMajor=*/true);
  std::fill(o.bytes.begin(), o.bytes.end(), uint8_t{0xFF});
  std::vector<float> lse(b * 6 * sq, std::nanf(""));
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {b, 6, sq});
  ReferenceOutput ref;
  if (blockSparse) {
    BlockMask bm = kernel->buildBlockMask(b, sq, sk, args);
    kernel->runBlockSparse(q8.ref, k8.ref, v8.ref, o.ref, &l, bm, args);
    ref = referenceAttention(spec, q8.ref, k8.ref, v8.ref, args, bm);
  } else {
    kernel->run(q8.ref, k8.ref, v8.ref, o.ref, &l, args);
    ref = referenceAttention(spec, q8.ref, k8.ref, v8.ref, args);
  }
  auto oAt = [&](size_t i) {
    int64_t d = i % 24, s = (i / 24) % sq, h = (i / (24 * sq)) % 6,
            bb = i / (24 * sq * 6);
    return double(o.at(bb, h, s, d));
  };
  return compare(
      ref.o, ref.lse, oAt, [&](size_t i) { return double(lse[i]); },
      dtypeO == DType::F32 ? 1e-4 : 1e-2);
}

} // namespace

TEST_CASE("fp8 cpu: dense variants vs the float64 reference", "[cpu][fp8]") {
  const uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  for (const Fp8Case &fc : cases())
    for (Formats f :
         {Formats{DType::E4M3, DType::E4M3}, Formats{DType::E4M3, DType::E5M2}})
      for (Fp8Scaling sc : {Fp8Scaling::PerTensor, Fp8Scaling::PerBlock}) {
        INFO(fc.name << " q/k " << toString(f.qk) << " v " << toString(f.v)
                     << (sc == Fp8Scaling::PerBlock ? " per block"
                                                    : " per tensor"));
        CHECK(runDense(fc, f, sc, DType::F32, false, rng) == "");
      }
  Formats e4{DType::E4M3, DType::E4M3};
  CHECK(runDense(cases()[1], e4, Fp8Scaling::PerBlock, DType::BF16, false,
                 rng) == "");
  CHECK(runDense(cases()[5], e4, Fp8Scaling::PerBlock, DType::F32, true, rng) ==
        "");
  CHECK(runDense(cases()[3], e4, Fp8Scaling::PerTensor, DType::F16, true,
                 rng) == "");
}

TEST_CASE("fp8 cpu: varlen with per-sequence descales", "[cpu][fp8]") {
  const uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  AttentionSpec spec = parseSpec("attention(name=f8_varlen, mask=true, "
                                 "score=score, head_dim_qk=40, head_dim_v=24, "
                                 "dtype=e4m3, heads_q=4, heads_kv=2, "
                                 "causal=bottom_right)");
  spec.dtypeO = DType::F32;
  CompileOptions opts;
  opts.blockM = opts.blockN = 16;
  opts.varlen = true;
  auto kernel = test::cachedKernel(spec, opts);
  const std::vector<int32_t> cuQ{0, 21, 21, 50}, cuK{0, 30, 33, 80};
  const int64_t tq = cuQ.back(), tk = cuK.back();
  std::vector<float> q = randomInput(rng, tq * 4 * 40, 40),
                     k = randomInput(rng, tk * 2 * 40, 40),
                     v = randomInput(rng, tk * 2 * 24, 24);
  auto f32 = [](std::vector<float> &x, int64_t t, int64_t h, int64_t d) {
    return TensorRef::contiguous3(x.data(), DType::F32, {t, h, d});
  };
  for (Fp8Scaling sc : {Fp8Scaling::PerTensor, Fp8Scaling::PerBlock}) {
    Fp8Tensor q8 = quantizeFp8(f32(q, tq, 4, 40), DType::E4M3, sc, 2, cuQ);
    Fp8Tensor k8 = quantizeFp8(f32(k, tk, 2, 40), DType::E4M3, sc, 1, cuK);
    Fp8Tensor v8 = quantizeFp8(f32(v, tk, 2, 24), DType::E4M3, sc, 1, cuK);
    CHECK(q8.descale.size() == (sc == Fp8Scaling::PerBlock ? 6u : 1u));
    Arguments args;
    args.qDescale = q8.descaleRef();
    args.kDescale = k8.descaleRef();
    args.vDescale = v8.descaleRef();
    std::vector<float> o(tq * 4 * 24, std::nanf("")), lse(4 * tq, 0.0f);
    TensorRef oRef = f32(o, tq, 4, 24);
    TensorRef l = TensorRef::contiguous2(lse.data(), DType::F32, {4, tq});
    kernel->runVarlen(q8.ref, k8.ref, v8.ref, oRef, &l, cuQ, cuK, args);
    VarlenReferenceOutput ref =
        referenceVarlenAttention(spec, q8.ref, k8.ref, v8.ref, cuQ, cuK, args);
    CHECK(compare(
              ref.o, ref.lse, [&](size_t i) { return double(o[i]); },
              [&](size_t i) { return double(lse[i]); }, 1e-4) == "");
  }
}

TEST_CASE("fp8 cpu: bad descales and unsupported modes are user errors",
          "[cpu][fp8]") {
  AttentionSpec spec = parseSpec("attention(name=f8_err, mask=true, "
                                 "score=score, head_dim=16, dtype=e4m3, "
                                 "heads_q=2, heads_kv=1)");
  CompileOptions opts;
  opts.blockM = opts.blockN = 16;
  auto kernel = test::cachedKernel(spec, opts);
  std::vector<uint8_t> q(2 * 2 * 5 * 16, 0x38), kv(2 * 1 * 7 * 16, 0x38);
  std::vector<uint16_t> o(2 * 2 * 5 * 16);
  std::vector<float> lse(2 * 2 * 5);
  TensorRef qr = TensorRef::contiguous(q.data(), DType::E4M3, {2, 2, 5, 16});
  TensorRef kr = TensorRef::contiguous(kv.data(), DType::E4M3, {2, 1, 7, 16});
  TensorRef orf = TensorRef::contiguous(o.data(), DType::BF16, {2, 2, 5, 16});
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {2, 2, 5});
  float d3[3] = {1, 2, 3}, inf[1] = {INFINITY};
  expectUserError(
      [&] {
        kernel->run(qr, kr, kr, orf, &l, Arguments().bindKDescale(d3, 3));
      },
      {"k_descale has 3 elements", "batch * heads_kv = 2"});
  expectUserError(
      [&] {
        kernel->run(qr, kr, kr, orf, &l, Arguments().bindQDescale(inf, 1));
      },
      {"q_descale[0] = inf"});
  TensorRef kBf = kr;
  kBf.dtype = DType::BF16;
  expectUserError([&] { kernel->run(qr, kBf, kr, orf, &l); }, {"k", "e4m3"});
  // Unset descales mean 1: a constant 1.0 (0x38) input gives O = 1.
  kernel->run(qr, kr, kr, orf, &l);
  CHECK(bf16ToFloat(o[0]) == 1.0f);
  CHECK(bf16ToFloat(o.back()) == 1.0f);
  expectUserError([&] { return compileCpuBackward(spec, opts); },
                  {"e4m3", "the backward does not take fp8"});
  expectUserError([&] { return contextParallelSpec(spec); },
                  {"context parallelism"});
}

TEST_CASE("fp8 gpu: refused on sm_80 and where sm_90a has no kernel",
          "[gpu_codegen][fp8]") {
  AttentionSpec spec = parseSpec("attention(name=f8_gpu, mask=true, "
                                 "score=score, head_dim=128, dtype=e4m3)");
  GpuCompileOptions o80;
  o80.arch = "sm_80";
  expectUserError([&] { validateForGpu(spec, o80); },
                  {"e4m3", "fp8 needs sm_90a wgmma"});
  expectUserError([&] { return compileGpu(spec, o80); },
                  {"fp8 needs sm_90a wgmma"});
  GpuCompileOptions o90;
  o90.arch = "sm_90a";
  validateForGpu(spec, o90); // the dense forward is built
  auto refused = [&](GpuCompileOptions o, const char *what,
                     const AttentionSpec &s) {
    expectUserError([&] { validateForGpu(s, o); },
                    {"not yet built", "issue 18", what});
  };
  GpuCompileOptions o = o90;
  // Built since: varlen, block-sparse (both together too), head_dim_qk
  // multiples of 32 and head_dim_v multiples of 16 up to 256, unequal ones
  // among them.
  o.varlen = true;
  validateForGpu(spec, o);
  o.blockSparse = true;
  validateForGpu(spec, o);
  o.varlen = false;
  validateForGpu(spec, o);
  for (auto [dqk, dv] :
       {std::pair{256, 256}, std::pair{192, 192}, std::pair{64, 256},
        std::pair{256, 128}, std::pair{96, 96}, std::pair{32, 16},
        std::pair{160, 80}, std::pair{224, 240}}) {
    AttentionSpec wide = spec;
    wide.headDimQK = dqk;
    wide.headDimV = dv;
    INFO(dqk << "/" << dv);
    validateForGpu(wide, o90);
    validateForGpu(wide, o);
  }
  o = o90;
  o.kind = KernelKind::Decode;
  refused(o, "kind = decode", spec);
  o.kind = KernelKind::Backward;
  refused(o, "kind = backward", spec);
  o = o90;
  o.mma = GpuMma::WgmmaTmaWs;
  refused(o, "mma = wgmma.tma.ws", spec);
  o = o90;
  o.blockN = 32;
  refused(o, "block_n = 32", spec);
  AttentionSpec d80 = spec;
  d80.headDimQK = d80.headDimV = 80;
  refused(o90, "head_dim_qk = 80 (a multiple of 32 up to 256)", d80);
  o = o90;
  o.varlen = true;
  refused(o, "head_dim_qk = 80", d80); // varlen: the same head dims
  AttentionSpec v72 = spec;
  v72.headDimV = 72;
  refused(o90, "head_dim_v = 72 (a multiple of 16 up to 256)", v72);
  AttentionSpec d100 = spec;
  d100.headDimQK = d100.headDimV = 100;
  refused(o90, "head_dim_qk = 100", d100);
  o = o90;
  o.blockSparse = true;
  o.mma = GpuMma::WgmmaTma;
  refused(o, "mma = wgmma.tma", spec);
  AttentionSpec f32o = spec;
  f32o.dtypeO = DType::F32;
  refused(o90, "dtype_o = fp32", f32o);
  AttentionSpec mixed = spec;
  mixed.dtypeK = mixed.dtypeV = DType::BF16; // fp8 Q alone
  refused(o90, "mixed", mixed);
}
