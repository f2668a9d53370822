//===- Fp8Args.cpp - The fp8 forward's launch arguments -------------------===//
//
// GpuTensorChecks.h: requireFp8Aligned, addFp8DescaleArgs (issue 18).
//
//===----------------------------------------------------------------------===//
#include "GpuTensorChecks.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Fp8Abi.h"

#include <cstdint>
#include <utility>

namespace flashjit::runtime::detail {

void requireFp8Aligned(const TensorRef &q, const TensorRef &k,
                       const TensorRef &v) {
  for (auto [name, t] :
       {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}})
    requireAligned(name, *t, 16, 16);
}

void addFp8DescaleArgs(KernelArgs &a, const AttentionSpec &spec,
                       const Arguments &args, int64_t batch, int64_t headsKV) {
  args.validateDescalesFor(spec, batch, /*hostValues=*/false);
  const BufferRef *d[3] = {&args.qDescale, &args.kDescale, &args.vDescale};
  for (const BufferRef *r : d)
    if (reinterpret_cast<uintptr_t>(r->data) % 4)
      throw UserError("descales must be 4-byte aligned (fp32 device memory)");
  for (const BufferRef *r : d)
    a.add(const_cast<void *>(r->data));
  // Per block where it holds more than one value (validateDescalesFor:
  // then exactly batch * heads_kv).
  for (const BufferRef *r : d)
    a.add(static_cast<int32_t>(r->data && r->size > 1 ? 1 : 0));
  a.add(static_cast<int32_t>(headsKV));
}

} // namespace flashjit::runtime::detail
