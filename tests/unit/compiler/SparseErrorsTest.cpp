//===- SparseErrorsTest.cpp - User errors of varlen and block-sparse runs -===//
//
// Every UserError that CpuKernel's varlen and block-sparse entry points
// raise, each checked for the field and value it names. The checks of the
// data structures themselves (BlockMask::validate, blockMaskFromBsr,
// cu_seqlens) are tested in the frontend's BlockMaskTest.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/Library.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

using namespace flashjit;
using namespace flashjit::test;

namespace {

AttentionSpec docSpec() {
  AttentionSpec s;
  s.variant = Variant("err_doc");
  Buffer doc = buffer<int32_t>("doc_id");
  s.variant.mask(doc[q_idx] == doc[kv_idx]);
  s.headDimQK = s.headDimV = 32;
  s.headsQ = 2;
  return s;
}

CompileOptions with(bool varlen, bool blockSparse) {
  CompileOptions o;
  o.varlen = varlen;
  o.blockSparse = blockSparse;
  o.blockM = 32;
  o.blockN = 32;
  return o;
}

} // namespace

TEST_CASE("kernels refuse the entry points of other modes",
          "[compiler][errors][varlen][blockmask]") {
  AttentionSpec spec = docSpec();
  std::vector<int32_t> doc(64, 0);
  Arguments args;
  args.bind("doc_id", doc.data(), 64);
  StridedTensor q(DType::BF16, {1, 2, 64, 32}, false);
  StridedTensor k(DType::BF16, {1, 1, 64, 32}, false);
  StridedTensor o(DType::BF16, {1, 2, 64, 32}, false);
  std::vector<float> lse(128);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, 2, 64});
  PackedTensor pq(DType::BF16, 64, 2, 32), pk(DType::BF16, 64, 1, 32),
      po(DType::BF16, 64, 2, 32);
  TensorRef pl = TensorRef::contiguous2(lse.data(), DType::F32, {2, 64});
  std::vector<int32_t> cu{0, 64};

  auto dense = cachedKernel(spec, with(false, false));
  auto sparse = cachedKernel(spec, with(false, true));
  auto varlen = cachedKernel(spec, with(true, false));
  auto both = cachedKernel(spec, with(true, true));
  BlockMask mask = sparse->buildBlockMask(1, 64, 64, args);

  expectUserError([&] { sparse->run(q.ref, k.ref, k.ref, o.ref, &l, args); },
                  {"CompileOptions::blockSparse", "runBlockSparse"});
  expectUserError([&] { varlen->run(q.ref, k.ref, k.ref, o.ref, &l, args); },
                  {"CompileOptions::varlen", "runVarlen"});
  expectUserError(
      [&] {
        dense->runBlockSparse(q.ref, k.ref, k.ref, o.ref, &l, mask, args);
      },
      {"without CompileOptions::blockSparse"});
  expectUserError(
      [&] { both->runBlockSparse(q.ref, k.ref, k.ref, o.ref, &l, mask, args); },
      {"runBlockSparse", "CompileOptions::varlen"});
  expectUserError(
      [&] {
        dense->runVarlen(pq.ref, pk.ref, pk.ref, po.ref, &pl, cu, cu, args);
      },
      {"without CompileOptions::varlen"});
  expectUserError(
      [&] {
        both->runVarlen(pq.ref, pk.ref, pk.ref, po.ref, &pl, cu, cu, args);
      },
      {"pass a BlockMask"});
  expectUserError([&] { dense->buildBlockMask(1, 64, 64, args); },
                  {"CompileOptions::blockSparse"});
  expectUserError([&] { varlen->buildVarlenBlockMask(cu, cu, args); },
                  {"CompileOptions::blockSparse"});
  expectUserError([&] { both->buildBlockMask(1, 64, 64, args); },
                  {"buildVarlenBlockMask"});
  expectUserError([&] { sparse->buildVarlenBlockMask(cu, cu, args); },
                  {"buildBlockMask"});
}

TEST_CASE("block masks that do not fit the call are UserErrors",
          "[compiler][errors][blockmask]") {
  AttentionSpec spec = docSpec();
  std::vector<int32_t> doc(100, 0);
  Arguments args;
  args.bind("doc_id", doc.data(), 100);
  auto sparse = cachedKernel(spec, with(false, true));
  StridedTensor q(DType::BF16, {2, 2, 64, 32}, false);
  StridedTensor k(DType::BF16, {2, 1, 64, 32}, false);
  StridedTensor o(DType::BF16, {2, 2, 64, 32}, false);
  std::vector<float> lse(256);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {2, 2, 64});
  auto run = [&](const BlockMask &m) {
    sparse->runBlockSparse(q.ref, k.ref, k.ref, o.ref, &l, m, args);
  };
  BlockMask good = sparse->buildBlockMask(2, 64, 64, args);
  run(good); // fits

  BlockMask m = referenceBlockMask(spec, 16, 32, 2, 64, 64, args);
  expectUserError([&] { run(m); },
                  {"block_mask.block_m, block_n = 16, 32", "32 x 32"});
  m = sparse->buildBlockMask(2, 65, 64, args);
  expectUserError([&] { run(m); },
                  {"block_mask.seqlen_q = 65", "seqlen_q is 64"});
  m = sparse->buildBlockMask(2, 64, 100, args);
  expectUserError([&] { run(m); },
                  {"block_mask.seqlen_k = 100", "seqlen_k is 64"});
  m = good;
  m.batch = 3;
  m.kvNumBlocks.resize(3 * m.kvNumBlocks.size());
  m.fullKvNumBlocks.resize(m.kvNumBlocks.size());
  m.kvIndices.resize(m.kvNumBlocks.size() * m.numKvTiles);
  m.fullKvIndices.resize(m.kvIndices.size());
  expectUserError([&] { run(m); },
                  {"block_mask.batch = 3", "1 or the batch 2"});
  m = good;
  m.heads = 4;
  m.kvNumBlocks.resize(4 * m.kvNumBlocks.size());
  m.fullKvNumBlocks.resize(m.kvNumBlocks.size());
  m.kvIndices.resize(m.kvNumBlocks.size() * m.numKvTiles);
  m.fullKvIndices.resize(m.kvIndices.size());
  expectUserError([&] { run(m); }, {"block_mask.heads = 4", "heads_q 2"});
  m = good;
  m.fullKvIndices[0] = 7;
  m.fullKvNumBlocks[0] = 1;
  m.kvNumBlocks[0] = 0;
  expectUserError([&] { run(m); },
                  {"block_mask.full_kv_indices[b=0][h=0][row=0][0] = 7 >= "
                   "num_kv_tiles 2"});
  m = good;
  m.cuSeqlensQ = m.cuSeqlensK = {0, 64};
  expectUserError([&] { run(m); }, {"built for a varlen batch"});

  // Negative sizes and out-of-range reads while building.
  expectUserError([&] { sparse->buildBlockMask(-1, 64, 64, args); },
                  {"batch = -1"});
  expectUserError([&] { sparse->buildBlockMask(1, 200, 64, args); },
                  {"buffer 'doc_id' was read outside [0, 100)",
                   "while building the block mask"});
  expectUserError([&] { sparse->buildBlockMask(1, 64, 64, {}); }, {"doc_id"});
}

TEST_CASE("varlen calls check cu_seqlens, tensors and block masks",
          "[compiler][errors][varlen]") {
  AttentionSpec spec = docSpec();
  std::vector<int32_t> doc(100, 0);
  Arguments args;
  args.bind("doc_id", doc.data(), 100);
  auto varlen = cachedKernel(spec, with(true, false));
  auto both = cachedKernel(spec, with(true, true));
  PackedTensor q(DType::BF16, 50, 2, 32), k(DType::BF16, 40, 1, 32),
      o(DType::BF16, 50, 2, 32);
  std::vector<float> lse(100);
  TensorRef l = TensorRef::contiguous2(lse.data(), DType::F32, {2, 50});
  std::vector<int32_t> cuQ{0, 20, 50}, cuK{0, 10, 40};
  auto run = [&](std::vector<int32_t> cq, std::vector<int32_t> ck,
                 const TensorRef *lp) {
    varlen->runVarlen(q.ref, k.ref, k.ref, o.ref, lp, cq, ck, args);
  };
  run(cuQ, cuK, &l); // fits
  expectUserError(
      [&] {
        run({1, 20, 50}, cuK, &l);
      },
      {"cu_seqlens_q[0] = 1, expected 0"});
  expectUserError(
      [&] {
        run({0, 30, 20, 50}, {0, 10, 20, 40}, &l);
      },
      {"cu_seqlens_q[2] = 20 < cu_seqlens_q[1] = 30"});
  expectUserError(
      [&] {
        run(cuQ, {0, 10, 39}, &l);
      },
      {"cu_seqlens_k[2] = 39", "holds 40 tokens"});
  expectUserError(
      [&] {
        run(cuQ, {0, 40}, &l);
      },
      {"cu_seqlens_q has 3 entries but cu_seqlens_k has 2"});
  expectUserError([&] { run({}, {}, &l); }, {"cu_seqlens_q is empty"});
  expectUserError([&] { run(cuQ, cuK, nullptr); },
                  {"lse", "[heads_q, total_q]"});
  TensorRef badLse = TensorRef::contiguous2(lse.data(), DType::F32, {50, 2});
  expectUserError([&] { run(cuQ, cuK, &badLse); },
                  {"lse.shape[0] = 50, expected 2"});
  StridedTensor q4(DType::BF16, {1, 2, 50, 32}, false);
  expectUserError(
      [&] {
        varlen->runVarlen(q4.ref, k.ref, k.ref, o.ref, &l, cuQ, cuK, args);
      },
      {"q.rank = 4, expected 3"});

  // A varlen block mask only fits the sequences it was built for.
  BlockMask mask = both->buildVarlenBlockMask(cuQ, cuK, args);
  both->runVarlen(q.ref, k.ref, k.ref, o.ref, &l, cuQ, cuK, args, &mask);
  // A kernel that is not block-sparse refuses a mask instead of ignoring it.
  expectUserError(
      [&] {
        varlen->runVarlen(q.ref, k.ref, k.ref, o.ref, &l, cuQ, cuK, args,
                          &mask);
      },
      {"without CompileOptions::blockSparse", "pass no BlockMask"});
  std::vector<int32_t> otherQ{0, 30, 50}, otherK{0, 10, 40};
  expectUserError(
      [&] {
        both->runVarlen(q.ref, k.ref, k.ref, o.ref, &l, otherQ, otherK, args,
                        &mask);
      },
      {"block_mask.cu_seqlens_q[1] = 20", "cu_seqlens_q[1] = 30"});
  expectUserError(
      [&] {
        both->buildVarlenBlockMask(cuQ, std::vector<int32_t>{0, 40}, args);
      },
      {"cu_seqlens_q has 3 entries but cu_seqlens_k has 2"});
  expectUserError(
      [&] {
        both->buildVarlenBlockMask(std::vector<int32_t>{0, 5, 3}, cuK, args);
      },
      {"cu_seqlens_q[2] = 3 < cu_seqlens_q[1] = 5"});
}

TEST_CASE("varlen and block-sparse kernels go through the disk cache",
          "[compiler][varlen][blockmask][cache]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  AttentionSpec spec = docSpec();
  std::set<std::string> keys;
  for (auto [varlen, sparse] : {std::pair{false, false}, std::pair{true, false},
                                std::pair{false, true}, std::pair{true, true}})
    CHECK(keys.insert(cpuCacheKey(spec, with(varlen, sparse)).hash()).second);

  std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("flashjit-sparse-cache-" + std::to_string(freshSeed()));
  runtime::CacheConfig config;
  config.dir = dir.string();
  std::vector<int32_t> cu{0, 40, 40, 100}, doc(100);
  for (int i = 0; i < 100; ++i)
    doc[i] = i / 9;
  Arguments args;
  args.bind("doc_id", doc.data(), 100);
  BlockMask want = referenceVarlenBlockMask(spec, 32, 32, cu, cu, args);
  for (runtime::CacheOutcome expected :
       {runtime::CacheOutcome::Compiled, runtime::CacheOutcome::Hit}) {
    clearCpuMemoryTier();
    runtime::DiskCache cache(config); // a fresh object, as in a new process
    LoadReport report;
    auto k = loadOrCompileCpu(spec, with(true, true), &cache, &report);
    CHECK(report.outcome == expected);
    CHECK(k->varlen());
    CHECK(k->blockSparse());
    BlockMask got = k->buildVarlenBlockMask(cu, cu, args);
    CHECK(got.kvNumBlocks == want.kvNumBlocks);
    CHECK(got.fullKvNumBlocks == want.fullKvNumBlocks);
    std::mt19937 rng(static_cast<uint32_t>(freshSeed()));
    CHECK(checkVarlenRun(*k, cu, cu, args, &got, nullptr, rng) == "");
  }
  clearCpuMemoryTier();
  std::filesystem::remove_all(dir);
}
