//===- TensorCheckTest.cpp - TensorRef and checkAttentionTensors ----------===//
//
// Contiguous strides, numel and offsets; checkAttentionTensors reads the
// shape off consistent tensors and names the tensor, field and value of
// every inconsistency (rank, dtype, head dims, batch, GQA heads, seqlens,
// strides, null data).
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <catch2/catch.hpp>

#include <functional>
#include <limits>
#include <vector>

using namespace flashjit;
using flashjit::test::expectUserError;

namespace {

/// B=2, Hq=4, Hkv=2, Sq=5, Sk=7, Dqk=64, Dv=32, all fp32.
struct Problem {
  AttentionSpec spec;
  std::vector<float> qd, kd, vd, od, lsed;
  TensorRef q, k, v, o, lse;

  Problem()
      : qd(2 * 4 * 5 * 64), kd(2 * 2 * 7 * 64), vd(2 * 2 * 7 * 32),
        od(2 * 4 * 5 * 32), lsed(2 * 4 * 5) {
    spec.headDimQK = 64;
    spec.headDimV = 32;
    spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
    spec.headsQ = 4;
    spec.headsKV = 2;
    q = TensorRef::contiguous(qd.data(), DType::F32, {2, 4, 5, 64});
    k = TensorRef::contiguous(kd.data(), DType::F32, {2, 2, 7, 64});
    v = TensorRef::contiguous(vd.data(), DType::F32, {2, 2, 7, 32});
    o = TensorRef::contiguous(od.data(), DType::F32, {2, 4, 5, 32});
    lse = TensorRef::contiguous3(lsed.data(), DType::F32, {2, 4, 5});
  }

  AttentionShape check() const {
    return checkAttentionTensors(spec, q, k, v, &o, &lse);
  }
};

/// Applies \p mutate to a fresh problem and expects a UserError whose
/// message holds every needle.
void expectBad(const char *what, const std::function<void(Problem &)> &mutate,
               std::initializer_list<const char *> needles) {
  INFO(what);
  Problem p;
  mutate(p);
  expectUserError([&] { return p.check(); }, needles);
}

} // namespace

TEST_CASE("tensor: contiguous layout, numel, offset", "[frontend][tensor]") {
  float x = 0;
  TensorRef t = TensorRef::contiguous(&x, DType::F16, {2, 3, 4, 5});
  CHECK(t.rank == 4);
  CHECK(t.dtype == DType::F16);
  CHECK(t.strides == std::array<int64_t, 4>{60, 20, 5, 1});
  CHECK(t.numel() == 120);
  CHECK(t.offset(1, 2, 3, 4) == 119);
  CHECK(t.offset(1, 0, 2) == 70);
  TensorRef l = TensorRef::contiguous3(&x, DType::F32, {2, 3, 4});
  CHECK(l.rank == 3);
  CHECK(l.numel() == 24);
  CHECK(l.offset(1, 2, 3) == 23);
  TensorRef e = TensorRef::contiguous(&x, DType::BF16, {2, 0, 4, 5});
  CHECK(e.numel() == 0);
  CHECK(byteSize(DType::F16) == 2);
  CHECK(byteSize(DType::BF16) == 2);
  CHECK(byteSize(DType::F32) == 4);
}

TEST_CASE("tensor: consistent tensors give the shape", "[frontend][tensor]") {
  Problem p;
  AttentionShape s = p.check();
  CHECK(s.batch == 2);
  CHECK(s.headsQ == 4);
  CHECK(s.headsKV == 2);
  CHECK(s.seqlenQ == 5);
  CHECK(s.seqlenK == 7);
  CHECK(s.headDimQK == 64);
  CHECK(s.headDimV == 32);
  // Outputs are optional.
  CHECK(checkAttentionTensors(p.spec, p.q, p.k, p.v).seqlenK == 7);
  // A zero stride on an input broadcasts (e.g. K shared across the batch).
  p.k.strides[0] = 0;
  CHECK_NOTHROW(p.check());
  // A [B, S, H, D] layout is just other strides.
  Problem t;
  t.q.strides = {5 * 4 * 64, 64, 4 * 64, 1};
  CHECK_NOTHROW(t.check());
  // Empty tensors may have null data.
  Problem z;
  z.q.shape[2] = 0;
  z.q.data = nullptr;
  z.o.shape[2] = 0;
  z.o.data = nullptr;
  z.lse.shape[2] = 0;
  z.lse.data = nullptr;
  CHECK(z.check().seqlenQ == 0);
}

TEST_CASE("tensor: strides whose last byte offset overflows are refused",
          "[frontend][tensor][error]") {
  expectBad("q.strides[0] = 2^61",
            [](Problem &p) { p.q.strides[0] = int64_t(1) << 61; },
            {"q.strides", "2305843009213693952", "overflows"});
  expectBad(
      "k.strides[0] = INT64_MAX",
      [](Problem &p) { p.k.strides[0] = std::numeric_limits<int64_t>::max(); },
      {"k.strides", "overflows"});
  expectBad("o.strides[2] = 2^62",
            [](Problem &p) { p.o.strides[2] = int64_t(1) << 62; },
            {"o.strides", "overflows"});
  // Large but addressable strides pass the check (without outputs: q's span
  // would cover them).
  Problem p;
  p.q.strides[0] = int64_t(1) << 40;
  CHECK_NOTHROW(checkAttentionTensors(p.spec, p.q, p.k, p.v));
}

TEST_CASE("tensor: outputs must not alias inputs or each other",
          "[frontend][tensor][error]") {
  expectBad("o = q", [](Problem &p) { p.o.data = p.q.data; }, {"o overlaps q"});
  // o (1280 floats) inside k (1792 floats).
  expectBad("o inside k", [](Problem &p) { p.o.data = p.kd.data() + 1; },
            {"o overlaps k"});
  // One arena: o's last element is v's first.
  std::vector<float> arena(2 * 4 * 5 * 32 - 1 + 2 * 2 * 7 * 32);
  expectBad("o's last element on v's first",
            [&](Problem &p) {
              p.o.data = arena.data();
              p.v.data = arena.data() + p.od.size() - 1;
            },
            {"o overlaps v"});
  expectBad("lse = v", [](Problem &p) { p.lse.data = p.vd.data(); },
            {"lse overlaps v"});
  expectBad("lse inside o", [](Problem &p) { p.lse.data = p.od.data() + 3; },
            {"lse overlaps o"});
  // Adjacent (touching, not overlapping) spans and inputs sharing memory
  // (K = Q in self-attention, packed QKV) are fine.
  Problem p;
  std::vector<float> ol(p.od.size() + p.lsed.size()); // lse right after o
  p.o.data = ol.data();
  p.lse.data = ol.data() + p.od.size();
  CHECK_NOTHROW(p.check());
  Problem self; // k = v = q
  self.spec.headDimV = 64;
  self.spec.headsKV = 4;
  self.k = self.v = self.q;
  std::vector<float> o(2 * 4 * 5 * 64);
  self.o = TensorRef::contiguous(o.data(), DType::F32, {2, 4, 5, 64});
  CHECK_NOTHROW(self.check());
}

TEST_CASE("tensor: every inconsistency names the field",
          "[frontend][tensor][error]") {
  expectBad("p.q.rank = 3;", [](Problem &p) { p.q.rank = 3; }, {"q.rank", "3"});
  expectBad("p.k.shape[3] = 32;", [](Problem &p) { p.k.shape[3] = 32; },
            {"k.shape[3]", "32"});
  expectBad("p.q.shape[3] = 48;", [](Problem &p) { p.q.shape[3] = 48; },
            {"q.shape[3]", "48"});
  expectBad("p.v.shape[3] = 64;", [](Problem &p) { p.v.shape[3] = 64; },
            {"v.shape[3]", "64"});
  expectBad("p.o.shape[3] = 64;", [](Problem &p) { p.o.shape[3] = 64; },
            {"o.shape[3]", "64"});
  expectBad("p.k.shape[0] = 3;", [](Problem &p) { p.k.shape[0] = 3; },
            {"k.shape[0]", "3"});
  expectBad("p.v.shape[0] = 1;", [](Problem &p) { p.v.shape[0] = 1; },
            {"v.shape[0]", "1"});
  expectBad("p.k.shape[1] = 3;", [](Problem &p) { p.k.shape[1] = 3; },
            {"k.shape[1]", "3"});
  expectBad("p.q.shape[1] = 6;", [](Problem &p) { p.q.shape[1] = 6; },
            {"q.shape[1]", "6"});
  expectBad("p.v.shape[2] = 6;", [](Problem &p) { p.v.shape[2] = 6; },
            {"v.shape[2]", "6"});
  expectBad("p.o.shape[2] = 4;", [](Problem &p) { p.o.shape[2] = 4; },
            {"o.shape[2]", "4"});
  expectBad("p.lse.shape[1] = 2;", [](Problem &p) { p.lse.shape[1] = 2; },
            {"lse.shape[1]", "2"});
  expectBad("p.q.dtype = DType::F16;",
            [](Problem &p) { p.q.dtype = DType::F16; }, {"q.dtype", "fp16"});
  expectBad("p.v.dtype = DType::BF16;",
            [](Problem &p) { p.v.dtype = DType::BF16; }, {"v.dtype", "bf16"});
  expectBad("p.lse.dtype = DType::F16;",
            [](Problem &p) { p.lse.dtype = DType::F16; }, {"lse.dtype"});
  expectBad("p.q.strides[2] = -64;", [](Problem &p) { p.q.strides[2] = -64; },
            {"q.strides[2]", "-64"});
  expectBad("p.v.strides[0] = -1;", [](Problem &p) { p.v.strides[0] = -1; },
            {"v.strides[0]", "-1"});
  expectBad("p.o.strides[3] = 0;", [](Problem &p) { p.o.strides[3] = 0; },
            {"o.strides[3]"});
  expectBad("p.lse.strides[2] = 0;", [](Problem &p) { p.lse.strides[2] = 0; },
            {"lse.strides[2]"});
  expectBad("p.k.data = nullptr;", [](Problem &p) { p.k.data = nullptr; },
            {"k.data"});
  expectBad("p.o.data = nullptr;", [](Problem &p) { p.o.data = nullptr; },
            {"o.data"});
}

TEST_CASE("tensor: heads_kv that does not divide heads_q is rejected",
          "[frontend][tensor][error][gqa]") {
  // Tensors that agree with a spec whose grouping is impossible (4 query
  // heads over 3 kv heads): query head 3 would read kv head 3 / (4 / 3) = 3,
  // past the end of K and V. "shapes consistent with each other" covers
  // this, and the runtime relies on this check before a launch.
  expectBad("spec heads_kv = 3",
            [](Problem &p) {
              p.spec.headsKV = 3;
              p.k.shape[1] = p.v.shape[1] = 3;
            },
            {"heads"});
}

TEST_CASE("tensor: empty contiguous outputs are accepted (no overlap)",
          "[frontend][tensor]") {
  // seqlen_q = 0: contiguous strides of o and lse are 0 on the head and
  // batch dims, but an empty tensor has no elements that could overlap.
  Problem p;
  p.q = TensorRef::contiguous(p.qd.data(), DType::F32, {2, 4, 0, 64});
  p.o = TensorRef::contiguous(p.od.data(), DType::F32, {2, 4, 0, 32});
  p.lse = TensorRef::contiguous3(p.lsed.data(), DType::F32, {2, 4, 0});
  CHECK(p.o.strides[1] == 0);
  AttentionShape s = p.check();
  CHECK(s.seqlenQ == 0);
  CHECK(s.headsQ == 4);
  // A non-empty output with a zero stride still overlaps.
  Problem bad;
  bad.o.strides[1] = 0;
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("o.strides[1] = 0"));
}
