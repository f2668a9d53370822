//===- ArgumentsTest.cpp - Arguments::validateFor
//---------------------------===//
//
// Run-time parameter values and buffers are checked against what a variant
// reads: every missing, unknown or wrongly typed one is a UserError that
// names it; negative sizes and null data of non-zero size are rejected.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Variant.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

using namespace flashjit;
using flashjit::test::expectUserError;

namespace {

Variant variantWithData() {
  Variant v("docs");
  Buffer doc = buffer<int32_t>("doc");
  v.mask(doc[q_idx] == doc[kv_idx] && q_idx - kv_idx < param<int32_t>("w"));
  v.scoreMod(param<float>("cap") * tanh(score / param<float>("cap")) -
             buffer<float>("slope")[head]);
  return v;
}

} // namespace

TEST_CASE("arguments: complete arguments validate", "[frontend][arguments]") {
  std::vector<int32_t> doc = {1, 1, 2};
  std::vector<float> slope = {0.5f, 0.25f};
  Arguments args;
  args.set("w", Scalar::i32(4)).set("cap", Scalar::f32(30.0f));
  args.bind("doc", doc.data(), 3).bind("slope", slope.data(), 2);
  CHECK_NOTHROW(args.validateFor(variantWithData()));
  // Scalar constructors and bind() record types.
  CHECK(Scalar::i32(-3).type == ScalarType::Int32);
  CHECK(Scalar::i32(-3).intValue == -3);
  CHECK(Scalar::i64(int64_t{1} << 40).intValue == int64_t{1} << 40);
  CHECK(Scalar::f32(2.5f).floatValue == 2.5f);
  CHECK(args.buffers.at("doc").elementType == ScalarType::Int32);
  CHECK(args.buffers.at("slope").size == 2);
  // A variant that reads nothing accepts empty arguments.
  CHECK_NOTHROW(Arguments{}.validateFor(Variant()));
  // A null buffer of size 0 is fine.
  Arguments empty = args;
  empty.bind("doc", static_cast<const int32_t *>(nullptr), 0);
  CHECK_NOTHROW(empty.validateFor(variantWithData()));
}

TEST_CASE("arguments: every mistake is named", "[frontend][arguments][error]") {
  std::vector<int32_t> doc = {1, 1, 2};
  std::vector<int64_t> doc64 = {1, 1, 2};
  std::vector<float> slope = {0.5f, 0.25f};
  auto good = [&] {
    Arguments args;
    args.set("w", Scalar::i32(4)).set("cap", Scalar::f32(30.0f));
    args.bind("doc", doc.data(), 3).bind("slope", slope.data(), 2);
    return args;
  };
  const Variant v = variantWithData();
  SECTION("missing parameter") {
    Arguments a = good();
    a.params.erase("cap");
    expectUserError([&] { a.validateFor(v); }, {"cap"});
  }
  SECTION("unknown parameter") {
    Arguments a = good();
    a.set("temperature", Scalar::f32(1.0f));
    expectUserError([&] { a.validateFor(v); }, {"temperature"});
  }
  SECTION("wrongly typed parameter") {
    Arguments a = good();
    a.set("w", Scalar::f32(4.0f));
    expectUserError([&] { a.validateFor(v); }, {"w"});
    Arguments b = good();
    b.set("w", Scalar::i64(4));
    expectUserError([&] { b.validateFor(v); }, {"w"});
  }
  SECTION("i32 value outside the i32 range") {
    // Scalar::i32 keeps the value unwrapped; 2^40 once ran as 0.
    for (int64_t bad : {int64_t{1} << 40, int64_t{1} << 31,
                        -(int64_t{1} << 31) - 1, INT64_MAX, INT64_MIN}) {
      Arguments a = good();
      a.set("w", Scalar::i32(bad));
      expectUserError([&] { a.validateFor(v); }, {"'w'", "i32"});
      expectUserError([&] { a.validateFor(v); }, {std::to_string(bad).c_str()});
    }
    for (int64_t edge : {int64_t{INT32_MAX}, int64_t{INT32_MIN}}) {
      Arguments a = good();
      a.set("w", Scalar::i32(edge));
      CHECK_NOTHROW(a.validateFor(v));
    }
  }
  SECTION("f32 value overflowing f32") {
    expectUserError([] { Scalar::f32(1e300); }, {"1e+300", "f32"});
    expectUserError([] { Scalar::f32(-1e39); }, {"-1e+39"});
    // The largest finite floats, infinities and NaN are kept as given.
    CHECK(Scalar::f32(3.4028235e38).floatValue ==
          std::numeric_limits<float>::max());
    CHECK(std::isinf(Scalar::f32(INFINITY).floatValue));
    CHECK(std::isnan(Scalar::f32(NAN).floatValue));
    // Halfway between FLT_MAX and 2^128 rounds up to inf; just below, down.
    CHECK(overflowsF32(0x1.ffffffp+127));
    CHECK_FALSE(overflowsF32(std::nextafter(0x1.ffffffp+127, 0.0)));
    CHECK(static_cast<float>(std::nextafter(0x1.ffffffp+127, 0.0)) ==
          std::numeric_limits<float>::max());
  }
  SECTION("a huge unknown name is quoted in part") {
    Arguments a = good();
    const std::string name(size_t(2) << 20, 'p');
    a.set(name, Scalar::f32(1.0f));
    expectUserError(
        [&] {
          try {
            a.validateFor(v);
          } catch (const UserError &e) {
            CHECK(std::string(e.what()).size() < 1000);
            throw;
          }
        },
        {"unknown parameter", "2097152 bytes in all"});
  }
  SECTION("missing buffer") {
    Arguments a = good();
    a.buffers.erase("slope");
    expectUserError([&] { a.validateFor(v); }, {"slope"});
  }
  SECTION("unknown buffer") {
    Arguments a = good();
    a.bind("extra_table", slope.data(), 2);
    expectUserError([&] { a.validateFor(v); }, {"extra_table"});
  }
  SECTION("wrongly typed buffer") {
    Arguments a = good();
    a.bind("doc", doc64.data(), 3);
    expectUserError([&] { a.validateFor(v); }, {"doc"});
  }
  SECTION("negative size") {
    Arguments a = good();
    a.bind("doc", doc.data(), -1);
    expectUserError([&] { a.validateFor(v); }, {"doc"});
  }
  SECTION("null data of non-zero size") {
    Arguments a = good();
    a.bind("slope", static_cast<const float *>(nullptr), 2);
    expectUserError([&] { a.validateFor(v); }, {"slope"});
  }
  SECTION("a parameter passed as a buffer") {
    Arguments a = good();
    a.params.erase("w");
    std::vector<int32_t> w = {4};
    a.bind("w", w.data(), 1);
    expectUserError([&] { a.validateFor(v); },
                    {"'w' is a parameter (i32)", "given a buffer"});
  }
  SECTION("a buffer passed as a scalar") {
    // Once reported as "unknown parameter 'doc'".
    Arguments a = good();
    a.buffers.erase("doc");
    a.set("doc", Scalar::i32(1));
    expectUserError([&] { a.validateFor(v); },
                    {"'doc' is a buffer (i32 elements)", "given a scalar"});
  }
  SECTION("the same name as a parameter and as a buffer") {
    Arguments a = good();
    a.set("doc", Scalar::i32(1));
    expectUserError([&] { a.validateFor(v); }, {"'doc' is given twice"});
    Arguments b = good();
    std::vector<float> cap = {30.0f};
    b.bind("cap", cap.data(), 1);
    expectUserError([&] { b.validateFor(v); }, {"'cap' is given twice"});
  }
}
