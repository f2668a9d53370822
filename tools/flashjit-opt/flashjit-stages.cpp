//===- flashjit-stages.cpp - Compile a named variant, print its stages ----===//
//
// Compiles one of the named example variants for the CPU and prints the text
// of a stage and/or the time each compilation step took. MLIR-free: it uses
// only flashjit/compiler/Compiler.h.
//
//   flashjit-stages --variant causal --print attn     # IR for lit goldens
//   flashjit-stages --variant swa_softcap --times     # compile time per step
//   flashjit-stages --variant softcap_alibi --backward --print attn
//                                          # the backward's attn.attention
//   flashjit-stages --list
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Printer.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>

using namespace flashjit;

namespace {

std::map<std::string, std::function<AttentionSpec()>> catalogue() {
  auto base = [](Variant v) {
    AttentionSpec s;
    s.variant = std::move(v);
    s.headDimQK = s.headDimV = 64;
    return s;
  };
  std::map<std::string, std::function<AttentionSpec()>> c;
  c["none"] = [=] { return base(Variant("none")); };
  c["causal"] = [=] {
    AttentionSpec s = base(Variant("causal"));
    s.causal = Causal::TopLeft;
    return s;
  };
  c["causal_bottom_right"] = [=] {
    return base(Variant("causal_br").mask(causal(Alignment::BottomRight)));
  };
  c["sliding_window"] = [=] {
    return base(Variant("sliding_window")
                    .mask(sliding_window(1024, 0, Alignment::TopLeft)));
  };
  c["prefix_lm"] = [=] {
    return base(Variant("prefix_lm").mask(prefix_lm(128)));
  };
  c["chunked"] = [=] {
    return base(
        Variant("chunked").mask(chunked(256) && causal(Alignment::TopLeft)));
  };
  c["softcap"] = [=] {
    return base(Variant("softcap").scoreMod(softcap(30.0f)));
  };
  c["swa_softcap"] = [=] {
    return base(Variant("swa_softcap")
                    .mask(sliding_window(256, 0, Alignment::TopLeft))
                    .scoreMod(softcap(param<float>("cap"))));
  };
  c["alibi"] = [=] {
    AttentionSpec s =
        base(Variant("alibi").scoreMod(alibi(buffer<float>("slopes"))));
    s.causal = Causal::TopLeft;
    return s;
  };
  c["softcap_alibi"] = [=] {
    // Soft-capped ALiBi scores: the backward's buffer and parameter
    // gradients in one modifier.
    Expr cap = param<float>("cap");
    Buffer slopes = buffer<float>("slopes");
    Expr biased = score - slopes[head] * abs(q_idx - kv_idx);
    AttentionSpec s =
        base(Variant("softcap_alibi").scoreMod(cap * tanh(biased / cap)));
    s.causal = Causal::BottomRight;
    return s;
  };
  c["document"] = [=] {
    Buffer doc = buffer<int32_t>("doc_id");
    return base(
        Variant("document")
            .mask(doc[q_idx] == doc[kv_idx] && causal(Alignment::TopLeft)));
  };
  return c;
}

int usage() {
  std::fprintf(stderr,
               "usage: flashjit-stages --variant NAME [--print attn|tiled|"
               "llvm-dialect|llvm-ir|llvm-ir-opt] [--times] [--block-m N] "
               "[--block-n N] [--head-dim D] [--repeat N] [--backward]\n"
               "       flashjit-stages --list\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  std::string variant, print;
  bool times = false, backward = false;
  int repeat = 1, headDim = 0;
  CompileOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        std::exit(usage());
      return argv[++i];
    };
    // Integers are parsed strictly: "abc" or "1e99" is an error, not 0.
    auto integer = [&](int lo) {
      std::string text = next();
      int v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || p != text.data() + text.size() || v < lo) {
        std::fprintf(stderr,
                     "flashjit-stages: %s '%s' is not an integer >= %d\n",
                     a.c_str(), text.c_str(), lo);
        std::exit(1);
      }
      return v;
    };
    if (a == "--variant")
      variant = next();
    else if (a == "--print")
      print = next();
    else if (a == "--times")
      times = true;
    else if (a == "--backward")
      backward = true;
    else if (a == "--block-m")
      options.blockM = integer(1);
    else if (a == "--block-n")
      options.blockN = integer(1);
    else if (a == "--head-dim")
      headDim = integer(1);
    else if (a == "--repeat")
      repeat = integer(1);
    else if (a == "--list") {
      for (auto &[name, f] : catalogue())
        std::printf("%s: %s\n", name.c_str(), printSpec(f()).c_str());
      return 0;
    } else
      return usage();
  }
  auto cat = catalogue();
  if (!cat.count(variant))
    return usage();
  try {
    AttentionSpec spec = cat[variant]();
    if (headDim)
      spec.headDimQK = spec.headDimV = headDim;
    std::shared_ptr<const CpuKernel> k;
    std::shared_ptr<const CpuBackward> bk;
    for (int r = 0; r < repeat; ++r) {
      if (backward)
        bk = compileCpuBackward(spec, options);
      else
        k = compileCpu(spec, options);
      if (times) {
        std::printf("compile %d of %s:\n", r + 1, variant.c_str());
        for (const StageTiming &t : backward ? bk->timings() : k->timings())
          std::printf("  %-24s %8.1f ms\n", t.name.c_str(), t.seconds * 1e3);
      }
    }
    static const std::map<std::string, Stage> stages = {
        {"attn", Stage::Attn},
        {"tiled", Stage::Tiled},
        {"llvm-dialect", Stage::LLVMDialect},
        {"llvm-ir", Stage::LLVMIR},
        {"llvm-ir-opt", Stage::LLVMIROpt}};
    if (!print.empty()) {
      auto it = stages.find(print);
      if (it == stages.end())
        return usage();
      std::fputs(backward ? bk->stageText(it->second).c_str()
                          : k->stageText(it->second).c_str(),
                 stdout);
    }
  } catch (const Error &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
