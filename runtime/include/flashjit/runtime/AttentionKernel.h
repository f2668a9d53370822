//===- AttentionKernel.h - Running generated attention kernels --*- C++ -*-===//
//
// Loads a generated forward-attention kernel (PTX or cubin, made by the
// compiler or read from a cache or bundle) and launches it on strided device
// tensors. Links no MLIR: a host application that ships precompiled kernels
// needs only this library and the CUDA driver.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_ATTENTIONKERNEL_H
#define FLASHJIT_RUNTIME_ATTENTIONKERNEL_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/BufferBounds.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/DataGradients.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/Module.h"

#include "flashjit/runtime/KernelAbi.h"

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashjit::runtime {

class Device;
class KernelArgs;
struct KernelArtifacts;

/// Launch facts of a generated kernel (its arguments: abi::gpu in
/// KernelAbi.h): the one kernel configuration record plus its symbol and
/// shared memory. Take it from the GpuKernelImage (GpuKernelImage::info())
/// or the cache entry (gpuKernelInfo()), never field by field.
struct GpuKernelInfo {
  /// The kernel's symbol.
  std::string name;
  /// The resolved configuration: architecture it was generated for
  /// (config.arch), kind, tiles (grid x = ceil(seqlen_q /
  /// config.blockM()), config.threads() per CTA; block-sparse kernels: the
  /// block mask's block_n is config.blockN) and modes (varlen: runVarlen;
  /// block-sparse: runBlockSparse, and the module has the builder
  /// `<name>_block_mask`).
  KernelConfig config;
  /// Dynamic shared memory per CTA, in bytes (forward, backward and
  /// decode kernels: config.sharedBytes(head dims)).
  int sharedBytes = 0;
};

/// The launch facts of a GPU kernel read from a cache entry or bundle.
GpuKernelInfo gpuKernelInfo(const KernelArtifacts &artifacts);

/// Empty when \p info can launch the kernel \p ptx defines for \p spec,
/// else what differs: the PTX targets info.config.arch; entry info.name's
/// `.entry` parameters are exactly abi::gpu::forwardArgTypes(varlen,
/// blockSparse) followed by the variant's parameters and buffers; its
/// `.reqntid`/`.maxntid` is config.threads() and its `.minnctapersm`
/// config.minBlocksPerSM; a block-sparse kernel's builder
/// `<name>_block_mask` exists with its own argument list and
/// abi::gpu::kBlockMaskThreads threads, and a dense kernel has none; a
/// forward kernel's shared memory is config.sharedBytes(head dims); a
/// decode kernel (KernelKind::Decode) has `<name>_decode` with
/// abi::gpu::decodeArgTypes() plus the variant's arguments, config.threads()
/// and config.minBlocksPerSM, and `<name>_decode_merge` with
/// abi::gpu::mergeArgTypes(spec.sink) and abi::gpu::kMergeThreads, and
/// shared memory config.sharedBytes(head dims) (the backward's: its
/// configuration's too). Needs
/// no GPU: the cache, bundles and the CLI run it before calling an entry
/// valid. (rowsPerWarp and blockN are not declared by the PTX; the
/// manifest's digest and, in the cache, the tile policy cover them.)
std::string gpuLaunchConfigMismatch(const AttentionSpec &spec,
                                    const GpuKernelInfo &info,
                                    std::string_view ptx);

/// A BlockMask (frontend/BlockMask.h) whose four lists live in device
/// memory, as int32 arrays of the same shapes: kv_num_blocks and
/// full_kv_num_blocks [batch, heads, num_q_tiles], kv_indices and
/// full_kv_indices [batch, heads, num_q_tiles, num_kv_tiles]. Built on the
/// GPU (GpuAttentionKernel::buildBlockMask) or uploaded from a host mask;
/// the caller owns it and may reuse it for every call it fits. Move-only.
class DeviceBlockMask {
public:
  DeviceBlockMask() = default;
  /// Uploads \p mask to \p device after mask.validate() (UserError naming
  /// the bad entry). Synchronous.
  DeviceBlockMask(const BlockMask &mask, Device &device);
  /// The mask's sizes, extents and (varlen) cu_seqlens; its four lists are
  /// empty (they are on the device).
  const BlockMask &shape() const { return shape_; }
  /// The device lists (int32).
  CUdeviceptr kvNumBlocks() const { return lists_[0].ptr(); }
  CUdeviceptr kvIndices() const { return lists_[1].ptr(); }
  CUdeviceptr fullKvNumBlocks() const { return lists_[2].ptr(); }
  CUdeviceptr fullKvIndices() const { return lists_[3].ptr(); }
  /// A host copy (synchronous; unused index entries are whatever the
  /// device holds).
  BlockMask toHost() const;

private:
  friend class GpuAttentionKernel;
  BlockMask shape_;
  DeviceBuffer lists_[4];
};

/// The cu_seqlens of a packed varlen batch in device memory (int32,
/// batch + 1 entries each; FlashAttention's cu_seqlens_q / cu_seqlens_k),
/// with host copies for the checks and the grid. Checked once when made,
/// owned by the caller, reused across calls. Move-only.
class DeviceCuSeqlens {
public:
  DeviceCuSeqlens() = default;
  /// Checks (checkCuSeqlens: first 0, non-decreasing; the same number of
  /// entries) and uploads both arrays to \p device. Synchronous. Throws
  /// UserError naming the entry.
  DeviceCuSeqlens(std::span<const int32_t> cuSeqlensQ,
                  std::span<const int32_t> cuSeqlensK, Device &device);
  const std::vector<int32_t> &hostQ() const { return hostQ_; }
  const std::vector<int32_t> &hostK() const { return hostK_; }
  CUdeviceptr deviceQ() const { return q_.ptr(); }
  CUdeviceptr deviceK() const { return k_.ptr(); }
  /// Number of sequences.
  int64_t batch() const { return static_cast<int64_t>(hostQ_.size()) - 1; }

private:
  std::vector<int32_t> hostQ_, hostK_;
  DeviceBuffer q_, k_;
};

/// A loaded kernel of one spec on one device. Thread-safe: runs from many
class GpuAttentionKernel { // threads and streams at once; buffer checks lock
public:
  /// Loads \p ptx for \p device (nvJitLink, else the driver JIT). A
  /// non-empty \p cubin (e.g. from a cache entry) generated for exactly the
  /// device's architecture is loaded instead, skipping the assembly; if it
  /// does not load, the PTX is. Before anything can launch, \p info is
  /// checked against what the module declares (checkGpuLaunchConfig: the
  /// `.entry` parameters, `.maxntid`/`.reqntid`, `.minnctapersm`, the
  /// block-mask builder, the loaded function's thread limit and static
  /// shared memory) and against the spec (shared memory of a forward
  /// kernel). Throws UserError if the kernel was generated for another
  /// architecture than the device's or \p info does not match the module
  /// (naming the fact), DriverError if loading fails.
  GpuAttentionKernel(AttentionSpec spec, GpuKernelInfo info,
                     std::string_view ptx, Device &device,
                     std::string_view cubin = {});

  /// Computes O (and LSE when the spec returns it) on device tensors:
  /// q [B, Hq, Sq, Dqk], k [B, Hkv, Sk, Dqk], v [B, Hkv, Sk, Dv],
  /// o [B, Hq, Sq, Dv] in the spec's 16-bit dtype, lse [B, Hq, Sq] fp32
  /// (required when the spec returns LSE). Strides are free except: the
  /// head_dim stride is 1, q/k/v rows start on 16-byte boundaries (data
  /// 16-byte aligned, other strides multiples of 8 elements), o and lse are
  /// 4-byte aligned with even o strides. Buffers in \p args must be device
  /// memory. Asynchronous on \p stream, except that a call reading buffers
  /// whose reads are not proven in range before the launch (BufferReads,
  /// frontend/BufferBounds.h) synchronises the stream to check for
  /// out-of-range reads. Throws
  /// UserError naming the bad field (also for batch or heads_q above 65535,
  /// or an out-of-range buffer read), DriverError if the launch fails.
  void run(const TensorRef &q, const TensorRef &k, const TensorRef &v,
           const TensorRef &o, const TensorRef *lse, const Arguments &args,
           CUstream stream = nullptr) const;

  /// run() for a block-sparse kernel: only the key tiles \p blockMask lists
  /// are visited (BlockMask.h gives the semantics; partial tiles run the
  /// mask per element, full tiles none). Throws UserError unless the kernel
  /// is block-sparse and not varlen and the mask fits the call
  /// (checkBlockMaskFits: tiles blockM x blockN, batch 1 or B, heads 1 or
  /// heads_q, the call's seqlens), plus everything run() throws.
  void runBlockSparse(const TensorRef &q, const TensorRef &k,
                      const TensorRef &v, const TensorRef &o,
                      const TensorRef *lse, const DeviceBlockMask &blockMask,
                      const Arguments &args = {},
                      CUstream stream = nullptr) const;
  /// Runs a varlen kernel on packed sequences (FlashAttention's
  /// flash_attn_varlen_func layout): q [total_q, heads_q, head_dim_qk],
  /// k [total_k, heads_kv, head_dim_qk], v [total_k, heads_kv, head_dim_v],
  /// o [total_q, heads_q, head_dim_v], lse [heads_q, total_q] (fp32);
  /// sequence b is query tokens [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and
  /// key tokens [cu_seqlens_k[b], cu_seqlens_k[b + 1]). Masks and score
  /// modifiers see batch = b, per-sequence q_idx / kv_idx and seqlens
  /// (causal alignment per sequence). Sequences of length 0 are allowed:
  /// nothing of theirs is written. \p blockMask is required by block-sparse
  /// kernels (tiles local to each sequence) and must be null otherwise.
  /// Alignment and stride rules as run(). Throws UserError for a kernel
  /// compiled without varlen, bad tensors (checkVarlenTensors), sequences
  /// above 2^31 - 1 tokens, arguments or block masks.
  void runVarlen(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                 const TensorRef &o, const TensorRef *lse,
                 const DeviceCuSeqlens &cuSeqlens, const Arguments &args = {},
                 const DeviceBlockMask *blockMask = nullptr,
                 CUstream stream = nullptr) const;
  /// Builds on the GPU the block mask of spec().effectiveMask() for
  /// \p batch x seqlen_q x seqlen_k calls with \p args (the mask's
  /// parameters and buffers, device memory; reuse the result only while they
  /// are unchanged): each (q tile, kv tile) is classified by interval
  /// arithmetic and, where that cannot decide, by evaluating the mask at
  /// each element; the result equals flashjit::referenceBlockMask. Extents
  /// follow blockMaskExtent. Asynchronous on \p stream, except that a mask
  /// reading buffers not proven in range (as run()) synchronises to check
  /// for out-of-range reads. Throws
  /// UserError unless the kernel is block-sparse and not varlen, for
  /// negative or too large sizes, bad arguments and out-of-range reads.
  DeviceBlockMask buildBlockMask(int64_t batch, int64_t seqlenQ,
                                 int64_t seqlenK, const Arguments &args = {},
                                 CUstream stream = nullptr) const;
  /// The same for a packed varlen batch (block-sparse varlen kernels): one
  /// row block per sequence, tiles local to each sequence; the mask keeps
  /// the cu_seqlens and only fits calls with the same ones.
  DeviceBlockMask buildVarlenBlockMask(const DeviceCuSeqlens &cuSeqlens,
                                       const Arguments &args = {},
                                       CUstream stream = nullptr) const;
  const AttentionSpec &spec() const { return spec_; }
  /// True when the module was loaded from the cubin (else from the PTX).
  bool loadedFromCubin() const { return fromCubin_; }
  const GpuKernelInfo &info() const { return info_; }
  /// The loaded function (registers, local memory: see Function).
  const Function &function() const { return function_; }
  /// How many calls (run, runVarlen, the block-mask builders) so far
  /// waited for the GPU to check their buffer reads' status flags; a call
  /// whose reads were proven in range before the launch waits for none.
  uint64_t bufferCheckSyncs() const { return checkSyncs_.load(); }

private:
  struct ForwardCall;
  void requireMode(const char *entry, bool varlen, bool blockSparse) const;
  void checkGpuTensors(const TensorRef &q, const TensorRef &k,
                       const TensorRef &v, const TensorRef &o,
                       const TensorRef *lse) const;
  void runDense(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                const TensorRef &o, const TensorRef *lse,
                const DeviceBlockMask *mask, const Arguments &args,
                CUstream stream) const;
  void launchForward(const ForwardCall &call, const Arguments &args,
                     CUstream stream) const;
  void addVariantArgs(KernelArgs &a, const Arguments &args) const;
  void checkStatus(const Arguments &args, CUstream stream) const;
  DeviceBlockMask build(int64_t batch, int64_t seqlenQ, int64_t seqlenK,
                        const DeviceCuSeqlens *cu, const Arguments &args,
                        CUstream stream) const;

  AttentionSpec spec_;
  GpuKernelInfo info_;
  Device *device_;
  Module module_;
  bool fromCubin_ = false;
  Function function_;
  Function builder_;            // block-sparse kernels: <name>_block_mask
  mutable DeviceBuffer status_; // out-of-range flags, one i32 per buffer
  mutable std::mutex statusMutex_;
  BufferReads reads_; // the variant's buffer reads, bounded per call
  mutable std::atomic<uint64_t> checkSyncs_{0};
};

/// How GpuAttentionBackwardKernel computes (FlashAttention's
/// `deterministic` flag).
struct GpuBackwardOptions {
  /// dQ bit-identical between runs on the same inputs, device and kernel:
  /// each query tile's fp32 dQ sums are added in one fixed key-tile order
  /// (per-tile turn counters in global memory, abi::gpu::kBwdSemaphores)
  /// instead of whenever each key tile's CTA gets there. dK and dV are
  /// deterministic in both modes (one CTA owns each key tile). Not
  /// available for variants with buffer or parameter gradients (f32
  /// buffers or parameters): their fp32 atomics have no fixed order yet.
  bool deterministic = false;
};

/// The loaded backward kernels of one spec on one device (compileGpu with
/// GpuCompileOptions::kind = KernelKind::Backward: `<name>_bwd_pre`,
/// `<name>_bwd`, `<name>_bwd_post`, abi::gpu::BackwardArg in KernelAbi.h).
/// The gradients are FlashAttention-2's (Algorithm 2) with the semantics of
/// referenceAttentionBackward (frontend/ReferenceBackward.h): masked
/// entries and rows with no allowed key contribute exactly zero.
class GpuAttentionBackwardKernel {
public:
  /// Loads \p ptx for \p device; \p info describes `<name>_bwd` (name:
  /// the variant's name; threads, blockM: keys per CTA, blockN: query rows
  /// per tile, sharedBytes). Throws UserError if the kernel was generated
  /// for another architecture or blockM / blockN are not positive,
  /// DriverError if loading fails.
  GpuAttentionBackwardKernel(AttentionSpec spec, GpuKernelInfo info,
                             std::string_view ptx, Device &device);

  /// Computes dQ, dK and dV on device tensors: q [B, Hq, Sq, Dqk],
  /// k [B, Hkv, Sk, Dqk], v [B, Hkv, Sk, Dv], o and dO [B, Hq, Sq, Dv] in
  /// the spec's 16-bit dtype, lse [B, Hq, Sq] fp32 (natural log, -inf for
  /// rows with no allowed key: the forward's outputs), and writes dq, dk,
  /// dv (shapes and dtype of q, k, v; under GQA dK and dV sum over the query
  /// heads of each kv head). Strides are free except: the head_dim stride
  /// is 1; q, k, v and dO rows start on 16-byte boundaries (data 16-byte
  /// aligned, other strides multiples of 8 elements); o, dq, dk and dv are
  /// 4-byte aligned with even strides; lse is 4-byte aligned. Buffers in
  /// \p args must be device memory. Returns the gradients of every f32
  /// buffer and f32 parameter of the variant (CpuBackwardKernel::run's;
  /// zero where the score modifier does not read them), accumulated with
  /// fp32 atomics (their summation order, and so their last bits, vary
  /// between runs). Asynchronous on \p stream, except that a variant with
  /// f32 buffers or parameters synchronises it (the gradients are copied
  /// to the host), and so does a call whose buffer reads are not proven in
  /// range before the launch (as GpuAttentionKernel::run; out-of-range
  /// reads are then checked); uses fp32 workspaces owned by this
  /// object, so calls on one object must not run concurrently on different
  /// streams. Throws UserError naming the bad field (shapes, dtypes,
  /// alignment, batch or heads above 65535) or the buffer read or written
  /// out of range, or for a kernel compiled varlen (use runVarlen) or
  /// block-sparse (use runBlockSparse); DriverError if a launch fails.
  DataGradients run(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                    const TensorRef &o, const TensorRef &lse,
                    const TensorRef &dO, const TensorRef &dq,
                    const TensorRef &dk, const TensorRef &dv,
                    const Arguments &args = {},
                    CUstream stream = nullptr) const;
  /// run() with \p options (GpuBackwardOptions). Throws UserError for
  /// options.deterministic on a variant with f32 buffers or parameters,
  /// plus everything run() throws.
  DataGradients run(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                    const TensorRef &o, const TensorRef &lse,
                    const TensorRef &dO, const TensorRef &dq,
                    const TensorRef &dk, const TensorRef &dv,
                    const Arguments &args, const GpuBackwardOptions &options,
                    CUstream stream = nullptr) const;
  /// The backward of GpuAttentionKernel::runVarlen, for kernels compiled
  /// with GpuCompileOptions::varlen: q, dq [total_q, heads_q, head_dim_qk],
  /// k, dk [total_k, heads_kv, head_dim_qk], v, dv [total_k, heads_kv,
  /// head_dim_v], o, dO [total_q, heads_q, head_dim_v], lse [heads_q,
  /// total_q] (fp32, natural log, -inf for rows with no allowed key);
  /// sequence b is query tokens [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and
  /// key tokens [cu_seqlens_k[b], cu_seqlens_k[b + 1]), each its own
  /// attention (masks and modifiers see batch = b and per-sequence indices
  /// and lengths). Empty sequences are allowed; keys of a sequence with no
  /// queries get dK = dV = 0, queries of one with no keys dQ = 0. The
  /// gradients are referenceVarlenAttentionBackward's. Alignment, stride
  /// and synchronisation rules as run(). Throws UserError for a kernel
  /// compiled without varlen (and run() for one compiled with it) or
  /// block-sparse (the overload below takes the block mask), bad
  /// tensors (checkVarlenTensors), sequences above 2^31 - 1 tokens, batch or
  /// heads above 65535, bad arguments or options, out-of-range buffer
  /// accesses; DriverError if a launch fails.
  DataGradients runVarlen(const TensorRef &q, const TensorRef &k,
                          const TensorRef &v, const TensorRef &o,
                          const TensorRef &lse, const TensorRef &dO,
                          const TensorRef &dq, const TensorRef &dk,
                          const TensorRef &dv, const DeviceCuSeqlens &cuSeqlens,
                          const Arguments &args = {},
                          const GpuBackwardOptions &options = {},
                          CUstream stream = nullptr) const;

  /// run() for a kernel compiled with GpuCompileOptions::blockSparse (not
  /// varlen): the gradients of GpuAttentionKernel::runBlockSparse with the
  /// same \p blockMask (referenceAttentionBackward with that mask). Each
  /// call transposes the mask on the device (`<name>_bwd_mask`, into
  /// workspaces of this object: per key tile, the listed query tiles) and
  /// the main kernel visits only those: listed partial ones classified and
  /// masked per element as the dense kernel's tiles, listed full ones with
  /// no mask code, unlisted ones never loaded; a backward tile spanning
  /// mask tiles of several classes is partial and keeps each 8-key group's
  /// class (TransposedBlockMask). The backward's block-sparse rule
  /// (checkBackwardBlockTiles): block_mask.block_m a multiple of
  /// info().config.blockN query rows, block_mask.block_n a multiple of 8
  /// keys. Throws UserError for a kernel not
  /// compiled block-sparse or compiled varlen (runVarlen takes the mask),
  /// a mask that does not fit the call (checkBlockMaskFits with the mask's
  /// own tiles) or the rule, options.deterministic (no deterministic
  /// block-sparse backward yet), plus everything run() throws.
  DataGradients
  runBlockSparse(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                 const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
                 const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                 const DeviceBlockMask &blockMask, const Arguments &args = {},
                 const GpuBackwardOptions &options = {},
                 CUstream stream = nullptr) const;
  /// runVarlen() for a kernel compiled varlen and block-sparse: the
  /// gradients of GpuAttentionKernel::runVarlen with the same \p blockMask
  /// (tiles local to each sequence; listed tiles past a sequence's end are
  /// skipped), under runBlockSparse's rule and errors.
  DataGradients
  runVarlen(const TensorRef &q, const TensorRef &k, const TensorRef &v,
            const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
            const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
            const DeviceCuSeqlens &cuSeqlens, const DeviceBlockMask &blockMask,
            const Arguments &args = {}, const GpuBackwardOptions &options = {},
            CUstream stream = nullptr) const;
  /// The transposed lists runBlockSparse gives the main kernel, built on
  /// the device by `<name>_bwd_mask` from \p blockMask and copied back
  /// (synchronous; for tests: equal to transposeBlockMask(blockMask's host
  /// copy, info().config.blockN, info().config.blockM()) on the used
  /// entries). Throws UserError for a kernel not compiled block-sparse or
  /// a mask that breaks the tile rule.
  TransposedBlockMask transposeOnDevice(const DeviceBlockMask &blockMask,
                                        CUstream stream = nullptr) const;

  const AttentionSpec &spec() const { return spec_; }
  const GpuKernelInfo &info() const { return info_; }
  /// The main kernel `<name>_bwd` (registers, local memory: see Function).
  const Function &function() const { return main_; }
  /// How many calls so far checked their buffer reads' status flags (see
  /// GpuAttentionKernel::bufferCheckSyncs).
  uint64_t bufferCheckSyncs() const { return checkSyncs_.load(); }

private:
  struct BackwardCall;
  DataGradients
  runDense(const TensorRef &q, const TensorRef &k, const TensorRef &v,
           const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
           const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
           const DeviceBlockMask *blockMask, const Arguments &args,
           const GpuBackwardOptions &options, CUstream stream) const;
  DataGradients
  runPacked(const TensorRef &q, const TensorRef &k, const TensorRef &v,
            const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
            const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
            const DeviceCuSeqlens &cuSeqlens, const DeviceBlockMask *blockMask,
            const Arguments &args, const GpuBackwardOptions &options,
            CUstream stream) const;
  DataGradients launchBackward(const BackwardCall &call, const Arguments &args,
                               const GpuBackwardOptions &options,
                               CUstream stream) const;
  /// Launches `<name>_bwd_mask` on \p mask into qLists_ (under mutex_);
  /// returns the transposed extents (lists empty).
  TransposedBlockMask launchTranspose(const DeviceBlockMask &mask,
                                      CUstream stream) const;

  AttentionSpec spec_;
  GpuKernelInfo info_;
  Device *device_;
  Module module_;
  Function pre_, main_, post_;
  Function transpose_; // block-sparse kernels: <name>_bwd_mask
  // Out-of-range flags, dQ accumulator, D, buffer/parameter gradients,
  // the deterministic mode's turn counters.
  mutable DeviceBuffer status_, accum_, delta_, grads_, turns_;
  // block-sparse: the transposed block mask's lists (q_num_blocks,
  // q_indices, full_q_num_blocks, full_q_indices, q_key_groups).
  mutable DeviceBuffer qLists_[5];
  mutable std::mutex mutex_;
  BufferReads reads_; // forward and derivative reads, gradient writes
  mutable std::atomic<uint64_t> checkSyncs_{0};
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_ATTENTIONKERNEL_H
