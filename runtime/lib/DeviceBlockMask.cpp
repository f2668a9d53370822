//===- DeviceBlockMask.cpp - Block masks on the GPU -----------------------===//
//
// GpuAttentionKernel's block-mask builder (buildBlockMask,
// buildVarlenBlockMask: the <name>_block_mask kernel writes the four tile
// lists on the device), DeviceBlockMask (a BlockMask's lists in device
// memory) and DeviceCuSeqlens (checked cu_seqlens on host and device).
// The attention launches are in AttentionKernel.cpp.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/AttentionKernel.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/KernelAbi.h"
#include "flashjit/runtime/Launch.h"

#include "BufferCheck.h"
#include "GpuTensorChecks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <utility>

namespace flashjit::runtime {

using detail::checkFixedArgs;

DeviceBlockMask GpuAttentionKernel::buildBlockMask(int64_t batch,
                                                   int64_t seqlenQ,
                                                   int64_t seqlenK,
                                                   const Arguments &args,
                                                   CUstream stream) const {
  requireMode("buildBlockMask", false, true);
  return build(batch, seqlenQ, seqlenK, nullptr, args, stream);
}

DeviceBlockMask
GpuAttentionKernel::buildVarlenBlockMask(const DeviceCuSeqlens &cuSeqlens,
                                         const Arguments &args,
                                         CUstream stream) const {
  requireMode("buildVarlenBlockMask", true, true);
  int64_t maxQ = 0, maxK = 0;
  for (int64_t b = 0; b < cuSeqlens.batch(); ++b) {
    maxQ = std::max<int64_t>(maxQ,
                             cuSeqlens.hostQ()[b + 1] - cuSeqlens.hostQ()[b]);
    maxK = std::max<int64_t>(maxK,
                             cuSeqlens.hostK()[b + 1] - cuSeqlens.hostK()[b]);
  }
  return build(cuSeqlens.batch(), maxQ, maxK, &cuSeqlens, args, stream);
}

DeviceBlockMask GpuAttentionKernel::build(int64_t batch, int64_t seqlenQ,
                                          int64_t seqlenK,
                                          const DeviceCuSeqlens *cu,
                                          const Arguments &args,
                                          CUstream stream) const {
  for (auto [name, value] :
       {std::pair{"batch", batch}, std::pair{"seqlen_q", seqlenQ},
        std::pair{"seqlen_k", seqlenK}})
    if (value < 0 || value > std::numeric_limits<int32_t>::max())
      throw UserError(fmt::format("buildBlockMask: {} = {} must be in [0, "
                                  "2^31 - 1]",
                                  name, value));
  args.validateFor(spec_.variant);
  BlockMaskExtent ext = blockMaskExtent(spec_.effectiveMask(), batch,
                                        spec_.headsQ, cu != nullptr);
  DeviceBlockMask out;
  BlockMask &m = out.shape_;
  m.blockM = info_.config.blockM();
  m.blockN = info_.config.blockN;
  m.seqlenQ = seqlenQ;
  m.seqlenK = seqlenK;
  m.batch = std::max<int64_t>(ext.batch, 1);
  m.heads = std::max<int64_t>(ext.heads, 1);
  m.numQTiles = (seqlenQ + m.blockM - 1) / m.blockM;
  m.numKvTiles = (seqlenK + m.blockN - 1) / m.blockN;
  if (cu) {
    m.cuSeqlensQ = cu->hostQ();
    m.cuSeqlensK = cu->hostK();
  }
  constexpr int64_t kMaxGridYZ = 65535;
  if (m.batch > kMaxGridYZ || m.heads > kMaxGridYZ ||
      m.numQTiles > std::numeric_limits<int32_t>::max())
    throw UserError(fmt::format("buildBlockMask: batch {} x heads {} x {} "
                                "q tiles exceeds the grid",
                                m.batch, m.heads, m.numQTiles));
  int64_t rows = m.batch * m.heads * m.numQTiles;
  int64_t smem = (m.numKvTiles + 15) / 16 * 16;
  int64_t smemLimit = device_->properties().maxSharedPerBlockOptin;
  if (smem > smemLimit)
    throw UserError(fmt::format("buildBlockMask: seqlen_k = {} gives {} key "
                                "tiles; the builder keeps one byte per tile "
                                "in shared memory, at most {}",
                                seqlenK, m.numKvTiles, smemLimit));
  device_->makeCurrent();
  out.lists_[0] = DeviceBuffer(*device_, rows * sizeof(int32_t));
  out.lists_[1] = DeviceBuffer(*device_, rows * m.numKvTiles * sizeof(int32_t));
  out.lists_[2] = DeviceBuffer(*device_, rows * sizeof(int32_t));
  out.lists_[3] = DeviceBuffer(*device_, rows * m.numKvTiles * sizeof(int32_t));
  if (rows == 0)
    return out;

  // The builder evaluates the mask at the (batch, head) rows of the mask's
  // extents (m.batch, m.heads), at in-range positions only.
  const bool check = detail::needsStatusCheck(reads_, args, m.heads, m.batch,
                                              seqlenQ, seqlenK, cu);
  std::unique_lock<std::mutex> lock(statusMutex_, std::defer_lock);
  if (check) {
    lock.lock();
    status_.fill(0);
  }
  KernelArgs a;
  a.add(reinterpret_cast<void *>(status_.ptr()));
  for (const DeviceBuffer &l : out.lists_)
    a.add(reinterpret_cast<void *>(l.ptr()));
  a.add(static_cast<int32_t>(seqlenQ)).add(static_cast<int32_t>(seqlenK));
  a.add(static_cast<int32_t>(m.numQTiles))
      .add(static_cast<int32_t>(m.numKvTiles));
  if (cu)
    a.add(reinterpret_cast<void *>(cu->deviceQ()))
        .add(reinterpret_cast<void *>(cu->deviceK()));
  checkFixedArgs(a, abi::gpu::blockMaskArgTypes(cu != nullptr),
                 info_.name + abi::kBlockMaskSuffix);
  addVariantArgs(a, args);
  if (smem > 48 * 1024)
    builder_.setMaxDynamicSharedBytes(static_cast<int>(smem));
  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>(m.numQTiles),
              static_cast<unsigned>(m.heads), static_cast<unsigned>(m.batch)};
  cfg.block = {static_cast<unsigned>(abi::gpu::kBlockMaskThreads), 1, 1};
  cfg.dynamicSharedBytes = static_cast<unsigned>(smem);
  cfg.stream = stream;
  launch(builder_, cfg, a);
  if (check)
    checkStatus(args, stream);
  return out;
}

DeviceBlockMask::DeviceBlockMask(const BlockMask &mask, Device &device) {
  mask.validate();
  shape_ = mask;
  shape_.kvNumBlocks.clear();
  shape_.kvIndices.clear();
  shape_.fullKvNumBlocks.clear();
  shape_.fullKvIndices.clear();
  const std::vector<int32_t> *src[4] = {&mask.kvNumBlocks, &mask.kvIndices,
                                        &mask.fullKvNumBlocks,
                                        &mask.fullKvIndices};
  for (int i = 0; i < 4; ++i) {
    lists_[i] = DeviceBuffer(device, src[i]->size() * sizeof(int32_t));
    if (!src[i]->empty())
      lists_[i].copyFromHost(src[i]->data(), src[i]->size() * sizeof(int32_t));
  }
}

BlockMask DeviceBlockMask::toHost() const {
  BlockMask m = shape_;
  std::vector<int32_t> *dst[4] = {&m.kvNumBlocks, &m.kvIndices,
                                  &m.fullKvNumBlocks, &m.fullKvIndices};
  for (int i = 0; i < 4; ++i) {
    dst[i]->resize(lists_[i].size() / sizeof(int32_t));
    if (!dst[i]->empty())
      lists_[i].copyToHost(dst[i]->data(), lists_[i].size());
  }
  return m;
}

DeviceCuSeqlens::DeviceCuSeqlens(std::span<const int32_t> cuSeqlensQ,
                                 std::span<const int32_t> cuSeqlensK,
                                 Device &device)
    : hostQ_(cuSeqlensQ.begin(), cuSeqlensQ.end()),
      hostK_(cuSeqlensK.begin(), cuSeqlensK.end()) {
  if (hostQ_.empty())
    throw UserError("cu_seqlens_q is empty: it needs batch + 1 entries");
  if (hostQ_.size() != hostK_.size())
    throw UserError(fmt::format("cu_seqlens_q has {} entries, cu_seqlens_k "
                                "has {}: both need batch + 1",
                                hostQ_.size(), hostK_.size()));
  checkCuSeqlens("cu_seqlens_q", hostQ_, hostQ_.back());
  checkCuSeqlens("cu_seqlens_k", hostK_, hostK_.back());
  q_ = DeviceBuffer(device, hostQ_.size() * sizeof(int32_t));
  k_ = DeviceBuffer(device, hostK_.size() * sizeof(int32_t));
  q_.copyFromHost(hostQ_.data(), hostQ_.size() * sizeof(int32_t));
  k_.copyFromHost(hostK_.data(), hostK_.size() * sizeof(int32_t));
}

} // namespace flashjit::runtime
