//===- NewUser12ErrorTest.cpp - Session 12 new-user findings --------------===//
//
// The spec parser's integer fields and the head-dim limits, where a user
// meets them: parseSpec, the C API and the backends' checks. Each case
// asserts the exact error class and that the message names the field, the
// value and the limit that applies.
//
//===----------------------------------------------------------------------===//
#include "ErrorTestSupport.h"

#include "flashjit-c/flashjit.h"
#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/frontend/Parser.h"

#include <catch2/catch.hpp>

#include <string>

using namespace flashjit;
using flashjit::test::expectExactly;

TEST_CASE("newuser12 item 5: spec integers past int are range errors naming "
          "the field",
          "[error][values]") {
  // head_dim=2147483648 was "expected an integer".
  for (const char *field :
       {"head_dim", "head_dim_qk", "head_dim_v", "heads_q", "heads_kv"}) {
    INFO(field);
    for (const char *value :
         {"2147483648", "99999999999999999999999", "-2147483649"}) {
      std::string text =
          std::string("attention(") + field + "=" + value + ", dtype=fp32)";
      expectExactly<ParseError>([&] { return parseSpec(text); },
                                {std::string(field) + " = " + value +
                                 " is out of range (a 32-bit int)"});
    }
    // A missing value still says what was expected, and for which field.
    expectExactly<ParseError>(
        [&] { return parseSpec(std::string("attention(") + field + "=x)"); },
        {std::string("expected an integer for ") + field});
  }
  // In int's range: the field's own check (spec.validate) speaks.
  expectExactly<UserError>(
      [] { return parseSpec("attention(head_dim=2147483647)"); },
      {"head_dim_qk = 2147483647 is out of range [1, 512]"});
  expectExactly<UserError>(
      [] { return parseSpec("attention(heads_q=-2147483648)"); },
      {"heads_q = -2147483648 must be positive"});
  // The positive control: the largest head dim parses.
  CHECK(parseSpec("attention(head_dim=512, dtype=fp32)").headDimQK == 512);
  // Through the C API.
  size_t needed = 0;
  CHECK(flashjit_spec_canonicalize("attention(head_dim=4294967296)", nullptr, 0,
                                   &needed) == FLASHJIT_USER_ERROR);
  CHECK_THAT(flashjit_last_error(),
             Catch::Contains("head_dim = 4294967296 is out of range"));
}

TEST_CASE("newuser12 item 7: each head-dim check states its own limit",
          "[error][values]") {
  // The spec: [1, 512] (was [1, 1024], which no backend took).
  expectExactly<UserError>([] { return parseSpec("attention(head_dim=513)"); },
                           {"head_dim_qk = 513 is out of range [1, 512]",
                            "CPU backend's limit",
                            "GPU kernels take up to 256"});
  AttentionSpec s = parseSpec("attention(head_dim=512, dtype=fp32)");
  // The GPU: at most 256, for every kernel kind.
  AttentionSpec g = parseSpec("attention(head_dim_qk=64, head_dim_v=272)");
  for (KernelKind kind :
       {KernelKind::Forward, KernelKind::Backward, KernelKind::Decode}) {
    GpuCompileOptions o;
    o.kind = kind;
    expectExactly<UserError>([&] { validateForGpu(g, o); },
                             {"head_dim_v = 272 is not supported on the GPU "
                              "(at most 256; the CPU backend takes up to "
                              "512)"});
  }
  // The CPU takes 512 (its kernel is not built here: the check is enough).
  CompileOptions cpu;
  CHECK_NOTHROW(validateForCpu(s, cpu));
}
