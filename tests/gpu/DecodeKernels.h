//===- DecodeKernels.h - The decode kernels the [gpu] tests run --*- C++
//-*-===//
//
// One list shared by gen_decode_kernels (compiles them ahead of time where
// MLIR is) and DecodeGpuTest.cpp (loads them on the GPU machine).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_GPU_DECODEKERNELS_H
#define FLASHJIT_TESTS_GPU_DECODEKERNELS_H

#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Variant.h"

#include <string>
#include <vector>

namespace flashjit::testing {

struct DecodeKernel {
  std::string id;
  AttentionSpec spec;
  /// GpuCompileOptions::decodeStages (0: the default, 2).
  int stages = 0;
  /// The serial merge kernel of sessions 16-18
  /// (setDecodeSerialMergeForTesting), for timing beside the default.
  bool serialMerge = false;
};

/// bf16, head dim 128, GQA 32/8 unless the id says otherwise; causal masks
/// bottom-right (the decode convention). Ids starting "dec_sink" have an
/// attention sink (AttentionSpec::sink). Ids ending "_s3" are the kernel
/// before them with three K/V stages (Q on the third, one barrier per key
/// tile; measured 1-3% slower than the default two in session 17:
/// [.decodebench] times both in one run). Ids ending "_serialmerge" are the
/// kernel before them with the serial merge kernel (each CTA walks all
/// splits in order; the default before session 19): [.decodesplitbench]
/// and [.decodebench] time both merges in one run.
inline std::vector<DecodeKernel> decodeKernels() {
  auto base = [](const char *name, int hq, int hk) {
    AttentionSpec s;
    s.variant = Variant(name);
    s.headDimQK = s.headDimV = 128;
    s.headsQ = hq;
    s.headsKV = hk;
    return s;
  };
  std::vector<DecodeKernel> out;
  out.push_back({"dec_dense_g4", base("dec_dense", 32, 8)});
  AttentionSpec causal = base("dec_causal", 32, 8);
  causal.causal = Causal::BottomRight;
  out.push_back({"dec_causal_g4", causal});
  AttentionSpec window = base("dec_window", 32, 8);
  window.variant.mask(sliding_window(300, 0, Alignment::BottomRight));
  out.push_back({"dec_window_g4", window});
  AttentionSpec cap = base("dec_softcap", 32, 8);
  cap.variant.scoreMod(softcap(30.0));
  cap.causal = Causal::BottomRight;
  out.push_back({"dec_softcap_g4", cap});
  AttentionSpec al = base("dec_alibi", 32, 8);
  al.variant.scoreMod(alibi(buffer<float>("slopes")));
  al.causal = Causal::BottomRight;
  out.push_back({"dec_alibi_g4", al});
  out.push_back({"dec_dense_mqa", base("dec_mqa", 8, 1)});
  // MQA at the 32 query heads (the [.decodebench] MQA rows).
  out.push_back({"dec_dense_mqa32", base("dec_mqa32", 32, 1)});
  AttentionSpec fp16 = base("dec_fp16", 4, 4);
  fp16.headDimQK = fp16.headDimV = 64;
  fp16.dtypeQ = fp16.dtypeK = fp16.dtypeV = fp16.dtypeO = DType::F16;
  fp16.causal = Causal::BottomRight;
  out.push_back({"dec_causal_mha_d64_f16", fp16});
  // Attention sinks (issue 22): the sink joins the merge once.
  AttentionSpec sink = base("dec_sink", 32, 8);
  sink.sink = true;
  out.push_back({"dec_sink_g4", sink});
  AttentionSpec sinkCausal = base("dec_sink_causal", 6, 2);
  sinkCausal.headDimQK = sinkCausal.headDimV = 64;
  sinkCausal.dtypeQ = sinkCausal.dtypeK = sinkCausal.dtypeV =
      sinkCausal.dtypeO = DType::F16;
  sinkCausal.causal = Causal::BottomRight;
  sinkCausal.sink = true;
  out.push_back({"dec_sink_causal_g3_d64_f16", sinkCausal});
  out.push_back({"dec_dense_g4_s3", base("dec_dense", 32, 8), 3});
  out.push_back({"dec_dense_mqa32_s3", base("dec_mqa32", 32, 1), 3});
  AttentionSpec causalS3 = base("dec_causal", 32, 8);
  causalS3.causal = Causal::BottomRight;
  out.push_back({"dec_causal_g4_s3", causalS3, 3});
  out.push_back(
      {"dec_dense_mqa32_serialmerge", base("dec_mqa32", 32, 1), 0, true});
  out.push_back(
      {"dec_dense_g4_serialmerge", base("dec_dense", 32, 8), 0, true});
  return out;
}

} // namespace flashjit::testing

#endif // FLASHJIT_TESTS_GPU_DECODEKERNELS_H
