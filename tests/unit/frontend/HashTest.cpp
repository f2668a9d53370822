//===- HashTest.cpp - SHA-256 and structural hashes of specs --------------===//
//
// sha256Hex against the FIPS 180-2 test vectors; structurally equal specs
// (built twice, on different lines, or read back from text) hash equal;
// changing any single field or any subexpression changes the hash.
//
//===----------------------------------------------------------------------===//
#include "RandomExpr.h"
#include "TestSupport.h"

#include "flashjit/frontend/Hash.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <set>

using namespace flashjit;

namespace {

bool isLowerHex64(const std::string &h) {
  return h.size() == 64 &&
         h.find_first_not_of("0123456789abcdef") == std::string::npos;
}

AttentionSpec baseSpec() {
  AttentionSpec s;
  s.variant = Variant("doc_swa");
  Buffer doc = buffer<int32_t>("doc");
  s.variant.mask(doc[q_idx] == doc[kv_idx] &&
                 sliding_window(256, 0, Alignment::BottomRight));
  s.variant.scoreMod(softcap(param<float>("cap")));
  s.headDimQK = 128;
  s.headDimV = 64;
  s.dtypeQ = DType::F16;
  s.dtypeK = DType::F16;
  s.dtypeV = DType::F16;
  s.dtypeO = DType::F32;
  s.headsQ = 8;
  s.headsKV = 2;
  s.causal = Causal::TopLeft;
  s.scale = 0.125f;
  s.returnLse = true;
  return s;
}

} // namespace

TEST_CASE("hash: sha256Hex matches the FIPS 180-2 vectors",
          "[frontend][hash]") {
  CHECK(sha256Hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256Hex("") ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256Hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Embedded NUL bytes are hashed, not treated as terminators.
  CHECK(sha256Hex(std::string_view("a\0b", 3)) != sha256Hex("a"));
}

TEST_CASE("hash: equal specs hash equal", "[frontend][hash]") {
  AttentionSpec a = baseSpec();
  AttentionSpec b = baseSpec();
  CHECK(structurallyEqual(a, b));
  CHECK(hashSpec(a) == hashSpec(b));
  CHECK(isLowerHex64(hashSpec(a)));
  CHECK(hashSpec(a) == sha256Hex(printSpec(a)));
  // Through text.
  AttentionSpec c = parseSpec(printSpec(a));
  CHECK(hashSpec(c) == hashSpec(a));
  // Built on other lines with the same operators.
  AttentionSpec d;
  d.variant = Variant("doc_swa");
  d.variant.mask(buffer<int32_t>("doc")[q_idx] ==
                     buffer<int32_t>("doc")[kv_idx] &&
                 sliding_window(256, 0, Alignment::BottomRight));
  d.variant.scoreMod(softcap(param<float>("cap")));
  d.headDimV = 64;
  d.dtypeQ = d.dtypeK = d.dtypeV = DType::F16;
  d.dtypeO = DType::F32;
  d.headsQ = 8;
  d.headsKV = 2;
  d.causal = Causal::TopLeft;
  d.scale = 0.125f;
  CHECK(hashSpec(d) == hashSpec(a));
  Expr e = q_idx >= kv_idx;
  CHECK(hashExpr(e) == sha256Hex(printExpr(e)));
  CHECK(isLowerHex64(hashExpr(e)));
}

TEST_CASE("hash: every field and subexpression changes the hash",
          "[frontend][hash]") {
  using Mutation =
      std::pair<const char *, std::function<void(AttentionSpec &)>>;
  const std::vector<Mutation> mutations = {
      {"name",
       [](AttentionSpec &s) {
         Variant v("doc_swa2");
         v.mask(s.variant.maskExpr());
         v.scoreMod(s.variant.scoreExpr());
         s.variant = v;
       }},
      {"head_dim_qk", [](AttentionSpec &s) { s.headDimQK = 127; }},
      {"head_dim_v", [](AttentionSpec &s) { s.headDimV = 128; }},
      {"dtype_q", [](AttentionSpec &s) { s.dtypeQ = DType::BF16; }},
      {"dtype_k", [](AttentionSpec &s) { s.dtypeK = DType::F32; }},
      {"dtype_v", [](AttentionSpec &s) { s.dtypeV = DType::BF16; }},
      {"dtype_o", [](AttentionSpec &s) { s.dtypeO = DType::F16; }},
      {"heads_q", [](AttentionSpec &s) { s.headsQ = 16; }},
      {"heads_kv", [](AttentionSpec &s) { s.headsKV = 4; }},
      {"causal none", [](AttentionSpec &s) { s.causal = Causal::None; }},
      {"causal br", [](AttentionSpec &s) { s.causal = Causal::BottomRight; }},
      {"scale", [](AttentionSpec &s) { s.scale = 0.12500001f; }},
      {"scale default", [](AttentionSpec &s) { s.scale.reset(); }},
      {"lse", [](AttentionSpec &s) { s.returnLse = false; }},
      {"window",
       [](AttentionSpec &s) {
         Buffer doc = buffer<int32_t>("doc");
         s.variant.mask(doc[q_idx] == doc[kv_idx] &&
                        sliding_window(255, 0, Alignment::BottomRight));
       }},
      {"alignment",
       [](AttentionSpec &s) {
         Buffer doc = buffer<int32_t>("doc");
         s.variant.mask(doc[q_idx] == doc[kv_idx] &&
                        sliding_window(256, 0, Alignment::TopLeft));
       }},
      {"buffer name",
       [](AttentionSpec &s) {
         Buffer doc = buffer<int32_t>("docs");
         s.variant.mask(doc[q_idx] == doc[kv_idx] &&
                        sliding_window(256, 0, Alignment::BottomRight));
       }},
      {"buffer type",
       [](AttentionSpec &s) {
         Buffer doc = buffer<int64_t>("doc");
         s.variant.mask(doc[q_idx] == doc[kv_idx] &&
                        sliding_window(256, 0, Alignment::BottomRight));
       }},
      {"buffer index",
       [](AttentionSpec &s) {
         Buffer doc = buffer<int32_t>("doc");
         s.variant.mask(doc[q_idx] == doc[q_idx] &&
                        sliding_window(256, 0, Alignment::BottomRight));
       }},
      {"param name",
       [](AttentionSpec &s) {
         s.variant.scoreMod(softcap(param<float>("c")));
       }},
      {"softcap constant",
       [](AttentionSpec &s) { s.variant.scoreMod(softcap(30.0f)); }},
      {"score identity", [](AttentionSpec &s) { s.variant.scoreMod(score); }},
  };
  const AttentionSpec base = baseSpec();
  std::set<std::string> hashes = {hashSpec(base)};
  for (const auto &[what, mutate] : mutations) {
    INFO(what);
    AttentionSpec s = baseSpec();
    mutate(s);
    CHECK(!structurallyEqual(s, base));
    std::string h = hashSpec(s);
    CHECK(isLowerHex64(h));
    CHECK(h != hashSpec(base));
    hashes.insert(h);
  }
  // All mutations are distinct from each other as well.
  CHECK(hashes.size() == mutations.size() + 1);

  // Subexpression changes the text form could blur.
  const std::pair<Expr, Expr> pairs[] = {
      {q_idx < 5, q_idx < int64_t{5}},
      {score * 0.0f, score * -0.0f},
      {score + 1.0f, score + 1.00000012f},
      {q_idx - kv_idx, kv_idx - q_idx},
      {-q_idx, q_idx * -1},
      {(q_idx + kv_idx) * 2, q_idx + kv_idx * 2},
      {exp(score), exp2(score)},
      {param<float>("a"), param<int32_t>("a") + 0.0f},
      {buffer<float>("b")[q_idx], buffer<float>("b")[kv_idx]},
      {select(q_idx > 0, 1, 2), select(q_idx > 0, 2, 1)},
  };
  for (const auto &[x, y] : pairs) {
    INFO(printExpr(x) << " vs " << printExpr(y));
    CHECK(hashExpr(x) != hashExpr(y));
  }
}

TEST_CASE("hash: random trees hash like their structure",
          "[frontend][hash][property]") {
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  flashjit::test::RandomExprGen gen(seed);
  std::map<std::string, std::string> textOfHash;
  for (int i = 0; i < 1000; ++i) {
    Expr e = gen.gen(ScalarType::Float32, 1 + i % 5);
    std::string h = hashExpr(e);
    std::string t = printExpr(e);
    auto [it, inserted] = textOfHash.emplace(h, t);
    // A hash collision between different texts would be a broken hash.
    CHECK(it->second == t);
    CHECK(hashExpr(parseExpr(t)) == h);
  }
}
