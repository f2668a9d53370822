//===- Jit.cpp - One compile-or-load entry point, CPU and GPU -------------===//
#include "flashjit/compiler/Jit.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"

namespace flashjit {

JitKernel::JitKernel(std::shared_ptr<const CpuKernel> cpu)
    : cpu_(std::move(cpu)) {
  if (!cpu_)
    throw InternalError("JitKernel: null CPU kernel");
}

JitKernel::JitKernel(std::shared_ptr<const runtime::GpuAttentionKernel> gpu)
    : gpu_(std::move(gpu)) {
  if (!gpu_)
    throw InternalError("JitKernel: null GPU kernel");
}

const KernelConfig &JitKernel::config() const {
  return cpu_ ? cpu_->config() : gpu_->info().config;
}

const AttentionSpec &JitKernel::spec() const {
  return cpu_ ? cpu_->spec() : gpu_->spec();
}

JitKernel loadOrCompile(const AttentionSpec &spec, JitTarget target,
                        const JitOptions &options, LoadReport *report) {
  if (target == JitTarget::CPU)
    return JitKernel(
        loadOrCompileCpu(spec, options.cpu, options.cache, report));
  runtime::Device &device =
      options.device ? *options.device : runtime::Device::get(0);
  return JitKernel(
      loadOrCompileGpu(spec, device, options.gpu, options.cache, report));
}

} // namespace flashjit
