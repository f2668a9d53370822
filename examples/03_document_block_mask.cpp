//===- 03_document_block_mask.cpp - Document masking, block-sparse --------===//
//
// What it teaches: a mask that reads a run-time buffer (the document id of
// each token: tokens attend causally within their own document, as when
// several documents are packed into one sequence), and a block-sparse kernel
// that skips whole tiles: the kernel's generated builder classifies every
// (query tile, key tile) as empty, partial or full once per buffer content
// (FlexAttention's BlockMask), and the run visits only the tiles listed.
// Checked against the float64 reference; exits 1 on a mismatch.
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace flashjit;

int main() {
  const int64_t heads = 2, seqlen = 500, dim = 32;
  // Five documents of uneven length packed into one sequence of 500 tokens.
  std::vector<int32_t> doc(seqlen);
  const int64_t ends[] = {70, 210, 230, 420, seqlen};
  for (int64_t i = 0, d = 0; i < seqlen; ++i) {
    while (i >= ends[d])
      ++d;
    doc[i] = static_cast<int32_t>(d);
  }

  auto docId = buffer<int32_t>("doc");
  Variant variant("document");
  variant.mask(docId[q_idx] == docId[kv_idx] && causal(Alignment::TopLeft));
  AttentionSpec spec;
  spec.variant = variant;
  spec.headsQ = spec.headsKV = heads;
  spec.headDimQK = spec.headDimV = dim;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  spec.returnLse = false; // O only: the kernel writes no LSE
  std::printf("spec: %s\n", printSpec(spec).c_str());

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = u(rng);
    return x;
  };
  const std::array<int64_t, 4> shape{1, heads, seqlen, dim};
  std::vector<float> qs = random(heads * seqlen * dim),
                     ks = random(heads * seqlen * dim),
                     vs = random(heads * seqlen * dim), os(qs.size(), NAN);
  TensorRef q = TensorRef::contiguous(qs.data(), DType::F32, shape);
  TensorRef k = TensorRef::contiguous(ks.data(), DType::F32, shape);
  TensorRef v = TensorRef::contiguous(vs.data(), DType::F32, shape);
  TensorRef o = TensorRef::contiguous(os.data(), DType::F32, shape);
  Arguments args;
  args.bind("doc", doc.data(), seqlen);

  CompileOptions options;
  options.blockSparse = true;
  options.blockN = 32;
  auto kernel = loadOrCompileCpu(spec, options);
  BlockMask blockMask = kernel->buildBlockMask(1, seqlen, seqlen, args);
  int64_t partial = 0, full = 0;
  for (int32_t n : blockMask.kvNumBlocks)
    partial += n;
  for (int32_t n : blockMask.fullKvNumBlocks)
    full += n;
  const int64_t tiles = blockMask.numQTiles * blockMask.numKvTiles *
                        blockMask.batch * blockMask.heads;
  std::printf("block mask %lldx%lld: %lld of %lld tiles visited (%lld "
              "partial, %lld full)\n",
              (long long)blockMask.blockM, (long long)blockMask.blockN,
              (long long)(partial + full), (long long)tiles, (long long)partial,
              (long long)full);

  kernel->runBlockSparse(q, k, v, o, nullptr, blockMask, args);
  ReferenceOutput ref = referenceAttention(spec, q, k, v, args);
  double err = 0;
  for (size_t i = 0; i < os.size(); ++i)
    err = std::isnan(os[i]) ? INFINITY
                            : std::max(err, std::fabs(os[i] - ref.o[i]));
  const bool ok = err <= 1e-4 && partial + full < tiles;
  std::printf("max |O - ref| = %.2e: %s\n", err, ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
