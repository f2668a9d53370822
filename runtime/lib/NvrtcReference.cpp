//===- NvrtcReference.cpp - Compiling and running the reference kernel ----===//
#include "flashjit/runtime/NvrtcReference.h"

#include "Check.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Nvrtc.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

namespace flashjit::runtime {

namespace {
/// Host twin of the kernel's FjDims (ReferenceKernel.cpp).
struct FjDims {
  int64_t batch, headsQ, headsKV, seqlenQ, seqlenK;
  int64_t q[4], k[4], v[4], o[4], lse[3];
};
static_assert(sizeof(FjDims) == 24 * 8, "FjDims must have no padding");

void copyStrides(int64_t *dst, const TensorRef &t, int n) {
  for (int i = 0; i < n; ++i)
    dst[i] = t.strides[i];
}

void checkInt32(const char *field, int64_t value) {
  if (value > std::numeric_limits<int32_t>::max())
    throw UserError(fmt::format("{} = {} does not fit the DSL's int32 index "
                                "leaves",
                                field, value),
                    std::source_location());
}
} // namespace

NvrtcReference::NvrtcReference(const AttentionSpec &spec, Device &device)
    : spec_(spec), device_(&device), kernel_(generateReferenceKernel(spec)) {
  const DeviceProperties &p = device.properties();
  if (kernel_.dynamicSharedBytes > p.maxSharedPerBlockOptin)
    throw UserError(fmt::format("the NVRTC reference for head dims {}/{} needs "
                                "{} bytes of shared memory; {} allows {}",
                                spec.headDimQK, spec.headDimV,
                                kernel_.dynamicSharedBytes, p.name,
                                p.maxSharedPerBlockOptin),
                    std::source_location());
  NvrtcOptions opts;
  opts.arch = p.arch();
  opts.programName = kernel_.kernelName + ".cu";
  ptx_ = compileCuda(kernel_.source, opts).ptx;
  module_ = Module::fromPtx(device, ptx_);
  function_ = module_.function(kernel_.kernelName);
}

void NvrtcReference::run(const TensorRef &q, const TensorRef &k,
                         const TensorRef &v, const TensorRef &o,
                         const TensorRef *lse, const Arguments &args,
                         CUstream stream) {
  if (spec_.returnLse && !lse)
    throw UserError("lse: the spec returns LSE (returnLse = true) but no lse "
                    "tensor was given",
                    std::source_location());
  AttentionShape s = checkAttentionTensors(spec_, q, k, v, &o, lse);
  args.validateFor(spec_.variant);
  checkInt32("batch", s.batch);
  checkInt32("heads_q", s.headsQ);
  checkInt32("seqlen_q", s.seqlenQ);
  checkInt32("seqlen_k", s.seqlenK);
  if (s.batch == 0 || s.headsQ == 0 || s.seqlenQ == 0)
    return; // no output element: nothing to launch

  const DeviceProperties &p = device_->properties();
  int64_t blocksX =
      (s.seqlenQ + kernel_.rowsPerBlock - 1) / kernel_.rowsPerBlock;
  if (blocksX > p.maxGrid[0] || s.headsQ > p.maxGrid[1] ||
      s.batch > p.maxGrid[2])
    throw UserError(fmt::format("the NVRTC reference's grid ({}, {}, {}) = "
                                "(seqlen_q / {}, heads_q, batch) exceeds "
                                "the device's limits ({}, {}, {})",
                                blocksX, s.headsQ, s.batch,
                                kernel_.rowsPerBlock, p.maxGrid[0],
                                p.maxGrid[1], p.maxGrid[2]),
                    std::source_location());

  FjDims dims{};
  dims.batch = s.batch;
  dims.headsQ = s.headsQ;
  dims.headsKV = s.headsKV;
  dims.seqlenQ = s.seqlenQ;
  dims.seqlenK = s.seqlenK;
  copyStrides(dims.q, q, 4);
  copyStrides(dims.k, k, 4);
  copyStrides(dims.v, v, 4);
  copyStrides(dims.o, o, 4);
  if (lse)
    copyStrides(dims.lse, *lse, 3);

  KernelArgs kargs;
  kargs.add(q.data).add(k.data).add(v.data).add(o.data);
  kargs.add(lse ? lse->data : nullptr).add(dims);
  for (const ParamDecl &decl : spec_.variant.params()) {
    const Scalar &value = args.params.at(decl.name);
    switch (decl.type) {
    case ScalarType::Int32:
      kargs.add(static_cast<int32_t>(value.intValue));
      break;
    case ScalarType::Int64:
      kargs.add(static_cast<int64_t>(value.intValue));
      break;
    case ScalarType::Float32:
      kargs.add(value.floatValue);
      break;
    case ScalarType::Bool:
      throw InternalError("bool parameter");
    }
  }
  std::vector<BufferDecl> buffers = spec_.variant.buffers();
  for (const BufferDecl &decl : buffers) {
    const BufferRef &ref = args.buffers.at(decl.name);
    kargs.add(ref.data).add(static_cast<int64_t>(ref.size));
  }

  Driver &d = Driver::get();
  device_->makeCurrent();
  CUdeviceptr oobBuffer = 0, oobIndex = 0;
  if (!buffers.empty()) {
    oobBuffer = module_.global("fj_oob_buffer").first;
    oobIndex = module_.global("fj_oob_index").first;
    FLASHJIT_CHECK(d.cuMemsetD8Async(oobBuffer, 0, sizeof(int32_t), stream));
  }
  LaunchConfig config;
  config.grid = {static_cast<unsigned>(blocksX),
                 static_cast<unsigned>(s.headsQ),
                 static_cast<unsigned>(s.batch)};
  config.block = {static_cast<unsigned>(kernel_.threadsPerBlock), 1, 1};
  config.dynamicSharedBytes = static_cast<unsigned>(kernel_.dynamicSharedBytes);
  config.stream = stream;
  launch(function_, config, kargs);
  FLASHJIT_CHECK(d.cuStreamSynchronize(stream),
                 fmt::format("running {}", kernel_.kernelName));

  if (!buffers.empty()) {
    int32_t id = 0;
    int64_t index = 0;
    FLASHJIT_CHECK(d.cuMemcpyDtoH(&id, oobBuffer, sizeof(id)));
    if (id != 0) {
      FLASHJIT_CHECK(d.cuMemcpyDtoH(&index, oobIndex, sizeof(index)));
      if (id < 1 || id > static_cast<int32_t>(buffers.size()))
        throw InternalError(fmt::format("reference kernel reported an "
                                        "out-of-range read of buffer id {}",
                                        id));
      const BufferDecl &b = buffers[id - 1];
      throw UserError(fmt::format("buffer '{}' read at index {}, outside "
                                  "[0, {})",
                                  b.name, index, args.buffers.at(b.name).size),
                      std::source_location());
    }
  }
}

} // namespace flashjit::runtime
