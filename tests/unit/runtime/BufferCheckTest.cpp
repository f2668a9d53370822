//===- BufferCheckTest.cpp - When a GPU call checks its buffer reads ------===//
//
// The launchers' decision (runtime/lib/BufferCheck.h, no GPU needed): the
// positions they build for dense, varlen (from cu_seqlens) and decode calls,
// and whether a call must wait for the status check, for the variants of
// the GPU tests sized right and one element short, and for the varlen
// document mask that indexes through cu_seqlens (never provable: its index
// depends on a buffer's values).
//
//===----------------------------------------------------------------------===//
#include "BufferCheck.h"

#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Variant.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace flashjit;
using namespace flashjit::runtime::detail;

namespace {
/// A bound buffer of \p n elements (the data is never read).
Arguments sized(const char *name, ScalarType t, int64_t n) {
  Arguments a;
  a.buffers[name] = BufferRef{reinterpret_cast<const void *>(0x1000), t, n};
  return a;
}
} // namespace

TEST_CASE("the launchers' positions: dense, varlen and decode",
          "[runtime][buffer_bounds]") {
  CallPositions dense = densePositions(8, 3, 130, 77);
  REQUIRE(dense.boxes().size() == 1);
  CHECK(dense.hull().batch.hi == 2);
  CHECK(dense.hull().head.hi == 7);
  CHECK(dense.hull().q.hi == 129);
  CHECK(dense.hull().kv.hi == 76);
  CHECK(densePositions(8, 0, 130, 77).empty());
  // Sequence lengths 3, 0 (queries), 5 and keys 4, 2, 0: only sequence 0
  // has positions.
  CallPositions varlen = varlenPositions(2, std::vector<int32_t>{0, 3, 3, 8},
                                         std::vector<int32_t>{0, 4, 6, 6});
  REQUIRE(varlen.boxes().size() == 1);
  CHECK(varlen.hull().batch.lo == 0);
  CHECK(varlen.hull().batch.hi == 0);
  CHECK(varlen.hull().seqlenQ.hi == 3);
  CHECK(varlen.hull().seqlenK.hi == 4);
  CHECK(varlenPositions(2, std::vector<int32_t>{0}, std::vector<int32_t>{0})
            .empty());
  // Decode: seqlen_q = q_len, seqlen_k per sequence.
  CallPositions decode = decodePositions(32, 4, {300, 5, 0});
  REQUIRE(decode.boxes().size() == 2);
  CHECK(decode.hull().q.hi == 3);
  CHECK(decode.hull().seqlenQ.lo == 4);
  CHECK(decode.hull().seqlenK.lo == 5);
  CHECK(decode.hull().kv.hi == 299);
}

TEST_CASE("a call waits for the status check only when a read is not "
          "proven",
          "[runtime][buffer_bounds]") {
  Variant al("alibi");
  al.scoreMod(alibi(buffer<float>("slopes")));
  BufferReads alibiReads = BufferReads::of(al);
  CHECK(!needsStatusCheck(alibiReads, densePositions(32, 1, 1, 131072),
                          sized("slopes", ScalarType::Float32, 32)));
  CHECK(needsStatusCheck(alibiReads, densePositions(32, 1, 1, 131072),
                         sized("slopes", ScalarType::Float32, 31)));
  CHECK(!needsStatusCheck(alibiReads, decodePositions(32, 1, {131072, 7}),
                          sized("slopes", ScalarType::Float32, 32)));
  // The backward's reads (derivatives, slope gradient writes) too.
  CHECK(!needsStatusCheck(BufferReads::of(al, true),
                          densePositions(32, 2, 100, 100),
                          sized("slopes", ScalarType::Float32, 32)));

  Buffer doc = buffer<int32_t>("doc");
  Variant document("document");
  document.mask(doc[q_idx] == doc[kv_idx] && kv_idx <= q_idx);
  BufferReads docReads = BufferReads::of(document);
  const std::vector<int32_t> cuQ{0, 100, 100, 400}, cuK{0, 120, 130, 400};
  CHECK(!needsStatusCheck(docReads, varlenPositions(4, cuQ, cuK),
                          sized("doc", ScalarType::Int32, 300)));
  CHECK(needsStatusCheck(docReads, varlenPositions(4, cuQ, cuK),
                         sized("doc", ScalarType::Int32, 299)));
  // Packed-token documents through cu_seqlens: cu's values are device
  // memory, so doc's index is unknown and the call stays checked.
  Buffer cu = buffer<int32_t>("cu");
  Variant packed("packed_document");
  packed.mask(doc[cu[batch] + q_idx] == doc[cu[batch] + kv_idx]);
  Arguments both = sized("doc", ScalarType::Int32, 400);
  both.buffers["cu"] = sized("cu", ScalarType::Int32, 4).buffers["cu"];
  CHECK(BufferReads::of(packed).unproven(varlenPositions(4, cuQ, cuK), both) ==
        std::vector<std::string>{"doc"});
  CHECK(needsStatusCheck(BufferReads::of(packed), varlenPositions(4, cuQ, cuK),
                         both));
  // No buffers: nothing to check.
  CHECK(!needsStatusCheck(BufferReads::of(Variant("plain")),
                          densePositions(1, 1, 1, 1), Arguments{}));
}
