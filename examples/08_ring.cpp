//===- 08_ring.cpp - Context parallelism: ring attention over 4 ranks -----===//
//
// What it teaches: a sequence cut over 4 ranks (here threads of one process,
// an InProcessRing standing in for NCCL) with zigzag sharding, ring
// attention of a document mask ANDed with causal, and why the kernel is
// compiled from contextParallelSpec(spec): each rank computes on chunks of
// the sequence, but the mask must see GLOBAL token indices (doc_id has one
// entry per token of the whole sequence). The ranks' outputs, put back
// together, are checked against the float64 reference of the whole
// sequence. Exits 1 on a mismatch.
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

using namespace flashjit;

int main() {
  const int ranks = 4;
  const int64_t batch = 1, heads = 4, seqlen = 8 * 24, dim = 32;

  // Causal attention within documents of 40 tokens (the last one shorter).
  Buffer doc = buffer<int32_t>("doc_id");
  AttentionSpec spec;
  spec.variant = Variant("doc_causal").mask(doc[q_idx] == doc[kv_idx]);
  spec.causal = Causal::TopLeft;
  spec.headsQ = spec.headsKV = heads;
  spec.headDimQK = spec.headDimV = dim;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  std::vector<int32_t> docIds(seqlen);
  for (int64_t t = 0; t < seqlen; ++t)
    docIds[t] = static_cast<int32_t>(t / 40);
  Arguments args;
  args.bind("doc_id", docIds.data(), seqlen); // global: every rank binds it

  // Global Q, K, V [batch, heads, seqlen, dim] and the global output.
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n = batch * heads * seqlen * dim;
  std::vector<float> qs(n), ks(n), vs(n), os(n, NAN);
  for (auto *x : {&qs, &ks, &vs})
    for (float &e : *x)
      e = u(rng);
  const std::array<int64_t, 4> shape{batch, heads, seqlen, dim};
  TensorRef q = TensorRef::contiguous(qs.data(), DType::F32, shape);
  TensorRef k = TensorRef::contiguous(ks.data(), DType::F32, shape);
  TensorRef v = TensorRef::contiguous(vs.data(), DType::F32, shape);
  TensorRef o = TensorRef::contiguous(os.data(), DType::F32, shape);

  // The ring kernel reads q_idx + cp_q_chunk * seqlen_q (and so on) where
  // the spec reads q_idx: one kernel serves every chunk pair.
  AttentionSpec ringSpec = contextParallelSpec(spec);
  auto kernel = loadOrCompileCpu(ringSpec);
  std::printf("ring spec: %s\n", printSpec(ringSpec).c_str());

  runtime::InProcessRing ring(ranks);
  std::vector<runtime::RingStats> stats(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      // Rank r's part: chunks r and 2R - 1 - r of 2R (zigzag), [.., S/R, ..].
      const std::array<int64_t, 4> local{batch, heads, seqlen / ranks, dim};
      std::vector<float> lq(n / ranks), lk(n / ranks), lv(n / ranks),
          lo(n / ranks), ll(batch * heads * seqlen / ranks);
      TensorRef tq = TensorRef::contiguous(lq.data(), DType::F32, local);
      TensorRef tk = TensorRef::contiguous(lk.data(), DType::F32, local);
      TensorRef tv = TensorRef::contiguous(lv.data(), DType::F32, local);
      TensorRef to = TensorRef::contiguous(lo.data(), DType::F32, local);
      TensorRef tl = TensorRef::contiguous3(ll.data(), DType::F32,
                                            {batch, heads, seqlen / ranks});
      shardSequence(q, tq, r, ranks, Sharding::Zigzag);
      shardSequence(k, tk, r, ranks, Sharding::Zigzag);
      shardSequence(v, tv, r, ranks, Sharding::Zigzag);
      runtime::RingOptions options;
      options.sharding = Sharding::Zigzag;
      options.schedule = runtime::RingSchedule::Ring;
      stats[r] = runtime::ringAttentionCpu(spec, *kernel, ring.rank(r), tq, tk,
                                           tv, to, &tl, args, options);
      unshardSequence(to, o, r, ranks, Sharding::Zigzag); // disjoint parts
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < ranks; ++r)
    std::printf("rank %d: %d chunk pairs computed, %d skipped as empty\n", r,
                stats[r].pairsComputed, stats[r].pairsSkipped);

  ReferenceOutput ref = referenceAttention(spec, q, k, v, args);
  double err = 0;
  for (int64_t i = 0; i < n; ++i)
    err = std::isnan(os[i]) ? INFINITY
                            : std::max(err, std::fabs(os[i] - ref.o[i]));
  const bool ok = err <= 1e-4;
  std::printf("ring of %d ranks vs float64 reference: max |O - ref| = %.2e: "
              "%s\n",
              ranks, err, ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
