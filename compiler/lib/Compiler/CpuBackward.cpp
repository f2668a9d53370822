//===- CpuBackward.cpp - The fused forward + backward convenience ---------===//
//
// loadOrCompileCpuBackward: backward kernels compiled once per (spec,
// options) in this process. forwardBackwardCpu: the forward through
// loadOrCompileCpu (with LSE), then the backward.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <tuple>

namespace flashjit {

std::shared_ptr<const CpuBackward>
loadOrCompileCpuBackward(const AttentionSpec &spec,
                         const CompileOptions &options) {
  using Key = std::tuple<std::string, int, int, int, bool, bool>;
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const CpuBackward>> kernels;
  Key key{printSpec(backwardSpec(spec)),
          cpuBlockM(options),
          cpuBlockN(options),
          options.optLevel,
          options.varlen,
          options.blockSparse};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = kernels.find(key); it != kernels.end())
      return it->second;
  }
  auto kernel = compileCpuBackward(spec, options);
  std::lock_guard<std::mutex> lock(mutex);
  return kernels.try_emplace(key, kernel).first->second;
}

DataGradients forwardBackwardCpu(const AttentionSpec &spec, const TensorRef &q,
                                 const TensorRef &k, const TensorRef &v,
                                 const TensorRef &dO, const TensorRef &o,
                                 const TensorRef &lse, const TensorRef &dq,
                                 const TensorRef &dk, const TensorRef &dv,
                                 const Arguments &args,
                                 const CompileOptions &options) {
  if (options.varlen || options.blockSparse)
    throw UserError("forwardBackwardCpu runs dense calls only; compile the "
                    "varlen or block-sparse forward and backward "
                    "(compileCpuBackward) and run them yourself");
  auto fwd = loadOrCompileCpu(backwardSpec(spec), options);
  fwd->run(q, k, v, o, &lse, args);
  return loadOrCompileCpuBackward(spec, options)
      ->run(q, k, v, o, lse, dO, dq, dk, dv, args);
}

} // namespace flashjit
