//===- ValuesErrorTest.cpp - Issue 21 §2 at the user's entry points ------===//
//
// Each reproduction of issue 21 §2, run where a user meets it: a compiled
// CPU kernel's run(), the C++ argument types, the parser and the C API.
// Every case asserts the exact error class and that the message names the
// field (parameter, tensor, argument index) and the value.
//
//===----------------------------------------------------------------------===//
#include "ErrorTestSupport.h"

#include "flashjit-c/flashjit.h"
#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Tensor.h"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

using namespace flashjit;
using flashjit::test::expectExactly;

namespace {

/// A mask reading an i32 parameter and an i32 buffer, a score modifier
/// reading an f32 parameter: every kind of run-time argument.
const char *kSpec =
    "attention(name=e21, mask=((kv_idx <= (q_idx + param<i32>(w))) && "
    "(buffer<i32>(doc)[q_idx] == buffer<i32>(doc)[kv_idx])), "
    "score=(param<f32>(cap) * tanh((score / param<f32>(cap)))), "
    "head_dim=16, dtype=fp32)";

struct Problem {
  static constexpr int64_t n = 8, d = 16;
  std::vector<float> q = std::vector<float>(n * d, 0.25f);
  std::vector<float> k = std::vector<float>(n * d, 0.5f);
  std::vector<float> v = std::vector<float>(n * d, 1.0f);
  std::vector<float> o = std::vector<float>(n * d, 0.0f);
  std::vector<float> lse = std::vector<float>(n, 0.0f);
  std::vector<int32_t> doc = std::vector<int32_t>(n, 0);
  TensorRef ref(std::vector<float> &x) {
    return TensorRef::contiguous(x.data(), DType::F32, {1, 1, n, d});
  }
  TensorRef lseRef() {
    return TensorRef::contiguous3(lse.data(), DType::F32, {1, 1, n});
  }
  Arguments args() {
    Arguments a;
    a.set("w", Scalar::i32(2)).set("cap", Scalar::f32(30.0));
    a.bind("doc", doc.data(), n);
    return a;
  }
};

std::shared_ptr<const CpuKernel> kernel() {
  static auto k = compileCpu(parseSpec(kSpec));
  return k;
}

} // namespace

TEST_CASE("issue 21 §2: an i32 parameter outside i32 is refused at run",
          "[error][values]") {
  Problem p;
  TensorRef q = p.ref(p.q), k = p.ref(p.k), v = p.ref(p.v), o = p.ref(p.o),
            lse = p.lseRef();
  // 2^40 once ran as w = 0; 2^31 and -2^31 - 1 were accepted.
  for (int64_t bad :
       {int64_t{1} << 40, int64_t{1} << 31, -(int64_t{1} << 31) - 1}) {
    Arguments a = p.args();
    a.set("w", Scalar::i32(bad));
    expectExactly<UserError>([&] { kernel()->run(q, k, v, o, &lse, a); },
                             {"'w'", std::to_string(bad), "i32"});
  }
  // The edges run.
  Arguments a = p.args();
  a.set("w", Scalar::i32(INT32_MIN));
  CHECK_NOTHROW(kernel()->run(q, k, v, o, &lse, a));
}

TEST_CASE("issue 21 §2: an f32 value that overflows f32 is refused",
          "[error][values]") {
  expectExactly<UserError>([] { return Scalar::f32(1e300); },
                           {"1e+300", "f32"});
  expectExactly<UserError>([] { return Scalar::f32(-1e39); }, {"-1e+39"});
}

TEST_CASE("issue 21 §2: a buffer given a scalar, a parameter given a buffer, "
          "a name given twice",
          "[error][values]") {
  Problem p;
  TensorRef q = p.ref(p.q), k = p.ref(p.k), v = p.ref(p.v), o = p.ref(p.o),
            lse = p.lseRef();
  Arguments a = p.args();
  a.buffers.erase("doc");
  a.set("doc", Scalar::i32(1)); // once "unknown parameter 'doc'"
  expectExactly<UserError>(
      [&] { kernel()->run(q, k, v, o, &lse, a); },
      {"'doc' is a buffer (i32 elements)", "given a scalar"});
  Arguments b = p.args();
  b.params.erase("w");
  std::vector<int32_t> w = {2};
  b.bind("w", w.data(), 1);
  expectExactly<UserError>([&] { kernel()->run(q, k, v, o, &lse, b); },
                           {"'w' is a parameter (i32)", "given a buffer"});
  Arguments c = p.args();
  c.set("doc", Scalar::i32(1)); // as a buffer and as a parameter
  expectExactly<UserError>([&] { kernel()->run(q, k, v, o, &lse, c); },
                           {"'doc' is given twice"});
}

TEST_CASE("issue 21 §2: an output aliasing an input is refused",
          "[error][values]") {
  Problem p;
  TensorRef q = p.ref(p.q), k = p.ref(p.k), v = p.ref(p.v), o = p.ref(p.o),
            lse = p.lseRef();
  Arguments a = p.args();
  expectExactly<UserError>([&] { kernel()->run(q, k, v, q, &lse, a); },
                           {"o overlaps q"});
  expectExactly<UserError>([&] { kernel()->run(q, k, v, v, &lse, a); },
                           {"o overlaps v"});
  TensorRef lseOnO = TensorRef::contiguous3(p.o.data(), DType::F32, {1, 1, 8});
  expectExactly<UserError>([&] { kernel()->run(q, k, v, o, &lseOnO, a); },
                           {"lse overlaps o"});
  // Inputs may share memory (K = Q): not an error.
  CHECK_NOTHROW(kernel()->run(q, q, v, o, &lse, a));
}

TEST_CASE("issue 21 §2: messages quote a bounded excerpt of a huge input",
          "[error][values]") {
  const std::string digits(size_t(2) << 20, '9');
  // A 2 MB literal once gave a 4 MB message.
  std::string m = expectExactly<ParseError>(
      [&] { return parseSpec("attention(mask=q_idx < " + digits + ")"); },
      {"...", "bytes"});
  CHECK(m.size() < 1000);
  m = expectExactly<ParseError>([&] { return parseExpr(digits); },
                                {"...", "bytes"});
  CHECK(m.size() < 1000);
  // Through the C API too.
  std::string spec = "attention(name=" + std::string(size_t(2) << 20, 'n') +
                     ", head_dim=7000)";
  size_t needed = 0;
  CHECK(flashjit_spec_canonicalize(spec.c_str(), nullptr, 0, &needed) ==
        FLASHJIT_USER_ERROR);
  INFO(flashjit_last_error());
  CHECK(std::string(flashjit_last_error()).size() < 1000);
}

TEST_CASE("issue 21 §2: the C API refuses the same values", "[error][values]") {
  // No disk cache: this test must not depend on or change ~/.cache.
  setenv("FLASHJIT_DISABLE_CACHE", "1", 1);
  flashjit_kernel *kern = nullptr;
  REQUIRE(flashjit_compile(kSpec, "cpu", &kern) == FLASHJIT_OK);
  Problem p;
  auto tensor = [](std::vector<float> &x, int rank) {
    flashjit_tensor t{};
    t.data = x.data();
    t.dtype = FLASHJIT_FP32;
    t.rank = rank;
    std::array<int64_t, 4> shape = {1, 1, Problem::n, Problem::d};
    std::array<int64_t, 4> strides = {Problem::n * Problem::d,
                                      Problem::n * Problem::d, Problem::d, 1};
    if (rank == 3) {
      shape = {1, 1, Problem::n, 1};
      strides = {Problem::n, Problem::n, 1, 1};
    }
    for (int i = 0; i < 4; ++i) {
      t.shape[i] = shape[i];
      t.strides[i] = strides[i];
    }
    return t;
  };
  flashjit_tensor q = tensor(p.q, 4), k = tensor(p.k, 4), v = tensor(p.v, 4),
                  o = tensor(p.o, 4), lse = tensor(p.lse, 3);
  auto args = [&](int64_t w, double cap) {
    std::vector<flashjit_arg> a(3);
    a[0] = {"w", FLASHJIT_ARG_I32, 0.0, w, nullptr, 0};
    a[1] = {"cap", FLASHJIT_ARG_F32, cap, 0, nullptr, 0};
    a[2] = {"doc", FLASHJIT_ARG_BUFFER_I32, 0.0, 0, p.doc.data(), Problem::n};
    return a;
  };
  auto run = [&](const std::vector<flashjit_arg> &a,
                 const flashjit_tensor *out) {
    return flashjit_run(kern, &q, &k, &v, out, &lse, a.data(),
                        static_cast<int>(a.size()), nullptr);
  };
  REQUIRE(run(args(2, 30.0), &o) == FLASHJIT_OK);
  struct Case {
    std::vector<flashjit_arg> args;
    const flashjit_tensor *out;
    std::vector<std::string> needles;
  };
  std::vector<flashjit_arg> twice = args(2, 30.0);
  twice.push_back(twice[1]);
  std::vector<Case> cases = {
      {args(int64_t{1} << 40, 30.0), &o, {"args[0] 'w'", "1099511627776"}},
      {args(-(int64_t{1} << 31) - 1, 30.0), &o, {"'w'", "-2147483649"}},
      {args(2, 1e300), &o, {"args[1] 'cap'", "1e+300", "overflows f32"}},
      {twice, &o, {"args[3] 'cap' repeats args[1]"}},
      {args(2, 30.0), &q, {"o overlaps q"}},
  };
  for (const Case &c : cases) {
    CHECK(run(c.args, c.out) == FLASHJIT_USER_ERROR);
    std::string m = flashjit_last_error();
    INFO("message: " << m);
    for (const std::string &needle : c.needles)
      CHECK(m.find(needle) != std::string::npos);
  }
  flashjit_kernel_destroy(kern);
}
