//===- CApi.cpp - The C API over the compiler and the runtime -------------===//
//
// Each entry point catches every exception and turns it into a status code
// and a thread-local message: no C++ exception crosses the C boundary.
//
// Built twice: flashjit_c (FLASHJIT_C_WITH_COMPILER defined: compiles and
// loads bundles) and flashjit_c_runtime (runtime only, links no compiler or
// MLIR: loads bundles; flashjit_compile reports that it is unavailable).
//
//===----------------------------------------------------------------------===//
#include "flashjit-c/flashjit.h"

#include "CApiSupport.h"

#ifdef FLASHJIT_C_WITH_COMPILER
#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCache.h"
#endif
#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuAttentionKernel.h"
#include "flashjit/runtime/CpuBackwardKernel.h"
#include "flashjit/runtime/CpuDecode.h"
#include "flashjit/runtime/DecodeKernel.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/PagedOps.h"
#include "flashjit/runtime/SinkGradient.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

using namespace flashjit;
using flashjit::capi::guarded;

struct flashjit_kernel {
  AttentionSpec spec;
  /// printSpec(spec), for flashjit_kernel_spec.
  std::string specText;
  /// flashjit_compile_flag set.
  unsigned flags = 0;
  std::shared_ptr<const runtime::CpuAttentionKernel> cpu;
  /// The bundled backward of a CPU kernel loaded by flashjit_load (when
  /// the bundle holds one with the forward's tiles), else null.
  std::shared_ptr<const runtime::CpuBackwardKernel> cpuBackward;
  std::unique_ptr<runtime::GpuAttentionKernel> gpu;
  /// The bundled backward of a GPU kernel loaded by flashjit_load (when
  /// the bundle holds one and a GPU is present), else null.
  std::shared_ptr<const runtime::GpuAttentionBackwardKernel> gpuBackward;
  /// The bundled split-KV decode kernels of a GPU kernel loaded by
  /// flashjit_load (when the bundle holds them and a GPU is present), else
  /// null (flashjit_run_paged compiles them through the cache).
  std::shared_ptr<const runtime::GpuDecodeKernel> gpuDecode;
  std::string ptx;
  /// Tile sizes (block masks): from the loaded kernel or its artifacts.
  int64_t blockM = 0, blockN = 0;
};

struct flashjit_block_mask {
  /// Set for masks of CPU kernels (host lists).
  std::optional<BlockMask> host;
  /// Set for masks of GPU kernels (device lists).
  std::optional<runtime::DeviceBlockMask> device;
  const BlockMask &shape() const { return host ? *host : device->shape(); }
};

namespace {
/// \p t as a TensorRef; ranks from \p minRank to 4 are accepted (2 for the
/// LSE of varlen runs, 3 otherwise).
TensorRef toRef(const flashjit_tensor *t, const char *name, int minRank = 3) {
  if (!t)
    throw UserError(fmt::format("{} is NULL", name));
  if (t->dtype < FLASHJIT_FP16 || t->dtype > FLASHJIT_E5M2)
    throw UserError(fmt::format("{}.dtype = {} is not a flashjit_dtype", name,
                                static_cast<int>(t->dtype)));
  if (t->rank < minRank || t->rank > 4)
    throw UserError(minRank == 4
                        ? fmt::format("{}.rank = {}, expected 4", name, t->rank)
                        : fmt::format("{}.rank = {}, expected {} to 4", name,
                                      t->rank, minRank));
  TensorRef r;
  r.data = t->data;
  constexpr DType kDTypes[] = {DType::F16, DType::BF16, DType::F32, DType::E4M3,
                               DType::E5M2};
  r.dtype = kDTypes[t->dtype];
  r.rank = t->rank;
  for (int i = 0; i < 4; ++i) {
    r.shape[i] = i < t->rank ? t->shape[i] : 1;
    r.strides[i] = i < t->rank ? t->strides[i] : 1;
  }
  return r;
}

/// Binds \p a to the fp8 descale it names and returns true, or returns
/// false when its name is not a reserved descale name.
bool bindDescale(Arguments &out, const flashjit_arg &a, int i) {
  const std::string_view name(a.name);
  BufferRef *slot = name == FLASHJIT_Q_DESCALE   ? &out.qDescale
                    : name == FLASHJIT_K_DESCALE ? &out.kDescale
                    : name == FLASHJIT_V_DESCALE ? &out.vDescale
                                                 : nullptr;
  if (!slot)
    return false;
  if (a.kind != FLASHJIT_ARG_BUFFER_F32)
    throw UserError(fmt::format("args[{}] '{}': a descale must be an "
                                "FLASHJIT_ARG_BUFFER_F32 (1 or batch * "
                                "heads_kv fp32 values), got kind {}",
                                i, name, static_cast<int>(a.kind)));
  *slot = {a.data, ScalarType::Float32, a.size};
  return true;
}

Arguments toArguments(const flashjit_arg *args, int n) {
  if (n < 0 || (n > 0 && !args))
    throw UserError(fmt::format("num_args = {} with args = {}", n,
                                static_cast<const void *>(args)));
  Arguments out;
  std::map<std::string, int> seen; // name -> first index
  for (int i = 0; i < n; ++i) {
    const flashjit_arg &a = args[i];
    if (!a.name)
      throw UserError(fmt::format("args[{}].name is NULL", i));
    // A repeated name would silently replace the earlier value.
    if (auto [it, inserted] = seen.emplace(a.name, i); !inserted)
      throw UserError(fmt::format("args[{}] '{}' repeats args[{}]: give each "
                                  "argument once",
                                  i, excerpt(a.name), it->second));
    if (std::string_view(a.name) == FLASHJIT_SINK) {
      if (a.kind != FLASHJIT_ARG_BUFFER_F32)
        throw UserError(fmt::format("args[{}] '" FLASHJIT_SINK "': the sink "
                                    "must be an FLASHJIT_ARG_BUFFER_F32 "
                                    "(heads_q fp32 logits), got kind {}",
                                    i, static_cast<int>(a.kind)));
      out.bindSink(static_cast<const float *>(a.data), a.size);
      continue;
    }
    if (bindDescale(out, a, i))
      continue;
    switch (a.kind) {
    case FLASHJIT_ARG_F32:
      if (overflowsF32(a.scalar))
        throw UserError(fmt::format("args[{}] '{}': f32 value {} overflows "
                                    "f32 (largest finite magnitude {})",
                                    i, excerpt(a.name), a.scalar,
                                    std::numeric_limits<float>::max()));
      out.set(a.name, Scalar::f32(a.scalar));
      break;
    case FLASHJIT_ARG_I32:
      if (a.integer < std::numeric_limits<int32_t>::min() ||
          a.integer > std::numeric_limits<int32_t>::max())
        throw UserError(fmt::format(
            "args[{}] '{}': i32 value {} is outside [{}, {}] (pass "
            "FLASHJIT_ARG_I64 for an i64 parameter)",
            i, excerpt(a.name), a.integer, std::numeric_limits<int32_t>::min(),
            std::numeric_limits<int32_t>::max()));
      out.set(a.name, Scalar::i32(a.integer));
      break;
    case FLASHJIT_ARG_I64:
      out.set(a.name, Scalar::i64(a.integer));
      break;
    case FLASHJIT_ARG_BUFFER_F32:
      out.bind(a.name, static_cast<const float *>(a.data), a.size);
      break;
    case FLASHJIT_ARG_BUFFER_I32:
      out.bind(a.name, static_cast<const int32_t *>(a.data), a.size);
      break;
    case FLASHJIT_ARG_BUFFER_I64:
      out.bind(a.name, static_cast<const int64_t *>(a.data), a.size);
      break;
    default:
      throw UserError(fmt::format("args[{}].kind = {} is not a "
                                  "flashjit_arg_kind",
                                  i, static_cast<int>(a.kind)));
    }
  }
  return out;
}
/// The flashjit_compile_flag set of a kernel's modes.
unsigned modeFlags(bool varlen, bool blockSparse) {
  return (varlen ? unsigned{FLASHJIT_COMPILE_VARLEN} : 0u) |
         (blockSparse ? unsigned{FLASHJIT_COMPILE_BLOCK_SPARSE} : 0u);
}

/// The kernel, or UserError naming \p entry.
const flashjit_kernel &need(const flashjit_kernel *kernel, const char *entry) {
  if (!kernel)
    throw UserError(fmt::format("{}: kernel is NULL", entry));
  return *kernel;
}

/// A DriverError for a GPU kernel that could not be loaded (no GPU), or a
/// UserError for \p kernel when it holds only bundled decode kernels.
[[noreturn]] void noGpu(const flashjit_kernel *kernel = nullptr) {
  if (kernel && kernel->gpuDecode)
    throw UserError("the kernel was loaded from a bundle that holds only its "
                    "decode kernels (`flashjit bundle --kernel decode`): run "
                    "it with flashjit_run_paged, or bundle fwd,decode");
  std::string why;
  runtime::Device::available(&why);
  throw DriverError("no GPU to run this kernel on (its tensors were not "
                    "checked either): " +
                    why);
}

/// \p n + 1 host cu_seqlens entries at \p p, or UserError naming \p name.
std::span<const int32_t> cuSpan(const int32_t *p, int64_t numSeqs,
                                const char *name) {
  if (numSeqs < 0)
    throw UserError(fmt::format("num_seqs = {} is negative", numSeqs));
  if (!p)
    throw UserError(fmt::format("{} is NULL", name));
  return {p, static_cast<size_t>(numSeqs + 1)};
}

/// Checks that \p mask was made for \p kernel's target; returns it.
const flashjit_block_mask &maskFor(const flashjit_kernel &kernel,
                                   const flashjit_block_mask *mask,
                                   const char *entry) {
  if (!mask)
    throw UserError(fmt::format("{}: mask is NULL", entry));
  if (kernel.cpu && !mask->host)
    throw UserError(fmt::format("{}: the mask lives on a GPU but the kernel "
                                "runs on the CPU",
                                entry));
  if (!kernel.cpu && !mask->device)
    throw UserError(fmt::format("{}: the mask lives on the host but the "
                                "kernel runs on a GPU",
                                entry));
  return *mask;
}

/// The normalised page table of \p t for a cache of \p numPages pages of
/// \p pageSize tokens (UserError naming the entry otherwise).
PageList toPageList(const flashjit_page_table *t, int64_t numPages,
                    int64_t pageSize) {
  if (!t)
    throw UserError("table is NULL");
  if (t->batch < 0 || t->batch > std::numeric_limits<int32_t>::max())
    throw UserError(
        fmt::format("table.batch = {}, expected 0..2^31 - 1", t->batch));
  auto span = [](const int32_t *p, int64_t n, const char *name) {
    if (n < 0)
      throw UserError(fmt::format("table.{}: {} entries", name, n));
    if (n > 0 && !p)
      throw UserError(fmt::format("table.{} is NULL", name));
    return std::span<const int32_t>(p, static_cast<size_t>(n));
  };
  if (t->layout == FLASHJIT_PAGED_CSR) {
    auto indptr = span(t->kv_indptr, t->batch + 1, "kv_indptr");
    return checkPagedCsr(
        {indptr, span(t->kv_indices, t->num_indices, "kv_indices"),
         span(t->kv_last_page_len, t->batch, "kv_last_page_len")},
        t->batch, numPages, pageSize);
  }
  if (t->layout == FLASHJIT_PAGED_BLOCK_TABLE) {
    if (t->max_pages < 0)
      throw UserError(
          fmt::format("table.max_pages = {} is negative", t->max_pages));
    int64_t entries = 0;
    if (__builtin_mul_overflow(t->batch, t->max_pages, &entries) ||
        entries > std::numeric_limits<int32_t>::max())
      throw UserError(fmt::format(
          "table.batch = {} times table.max_pages = {} block_table entries "
          "is past 2^31 - 1",
          t->batch, t->max_pages));
    return checkBlockTable({span(t->block_table, entries, "block_table"),
                            t->max_pages,
                            span(t->seq_lens, t->batch, "seq_lens")},
                           t->batch, numPages, pageSize);
  }
  throw UserError(fmt::format("table.layout = {} is not a "
                              "flashjit_paged_layout (0 CSR, 1 block table)",
                              static_cast<int>(t->layout)));
}

/// The int32 arrays of \p t (sizes checked by toPageList / hostPageTable),
/// as inputs of checkPagedOutputs.
std::vector<MemoryRegion> pageTableMemory(const flashjit_page_table &t) {
  auto array = [](const char *name, const int32_t *p, int64_t n) {
    return memoryOf(fmt::format("table.{}", name), p,
                    n > 0 ? uint64_t(n) * sizeof(int32_t) : 0);
  };
  if (t.layout == FLASHJIT_PAGED_CSR)
    return {array("kv_indptr", t.kv_indptr, t.batch + 1),
            array("kv_indices", t.kv_indices, t.num_indices),
            array("kv_last_page_len", t.kv_last_page_len, t.batch)};
  return {array("block_table", t.block_table, t.batch * t.max_pages),
          array("seq_lens", t.seq_lens, t.batch)};
}

/// Whether \p p is device memory of the current context's address space
/// (host memory, pinned or not, is not). cuPointerGetAttributes, unlike
/// cuPointerGetAttribute, answers CU_MEMORYTYPE 0 with CUDA_SUCCESS for a
/// pointer the driver does not know, so probing a host array is not a failed
/// driver call (compute-sanitizer reports those as errors).
bool isDeviceMemory(const void *p) {
  unsigned type = 0;
  CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  void *data[] = {&type};
  CUresult r = runtime::Driver::get().cuPointerGetAttributes(
      1, &attr, data, reinterpret_cast<CUdeviceptr>(p));
  return r == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE;
}

/// \p t with every int32 array that lives in device memory of \p device
/// replaced by a host copy in \p storage (synchronous copies); host arrays
/// are kept as they are. The sizes are checked first (UserError naming the
/// field); the entries are checked by toPageList on the host copy.
flashjit_page_table hostPageTable(const flashjit_page_table *t,
                                  runtime::Device &device,
                                  std::vector<std::vector<int32_t>> &storage) {
  if (!t)
    throw UserError("table is NULL");
  constexpr int64_t kMost = int64_t(1) << 31;
  if (t->batch < 0 || t->batch >= kMost)
    throw UserError(
        fmt::format("table.batch = {}, expected 0..2^31 - 1", t->batch));
  flashjit_page_table h = *t;
  device.makeCurrent();
  auto host = [&](const int32_t *&p, int64_t n, const char *name) {
    if (n < 0 || n >= kMost)
      throw UserError(
          fmt::format("table.{}: {} entries, expected 0..2^31 - 1", name, n));
    if (!p || n == 0 || !isDeviceMemory(p))
      return;
    storage.emplace_back(static_cast<size_t>(n));
    runtime::copyDeviceToHost(device, storage.back().data(), p,
                              static_cast<size_t>(n) * sizeof(int32_t));
    p = storage.back().data();
  };
  if (t->layout == FLASHJIT_PAGED_CSR) {
    host(h.kv_indptr, t->batch + 1, "kv_indptr");
    host(h.kv_indices, t->num_indices, "kv_indices");
    host(h.kv_last_page_len, t->batch, "kv_last_page_len");
  } else if (t->layout == FLASHJIT_PAGED_BLOCK_TABLE) {
    if (t->max_pages < 0 || t->max_pages >= kMost)
      throw UserError(fmt::format("table.max_pages = {}, expected "
                                  "0..2^31 - 1",
                                  t->max_pages));
    host(h.block_table, t->batch * t->max_pages, "block_table");
    host(h.seq_lens, t->batch, "seq_lens");
  }
  return h;
}

/// The decode kernels of \p canonical for \p request's target in \p bundle
/// (kind decode, any tiles), checked against the spec like a forward
/// (gpuLaunchConfigMismatch), or nullopt. UserError for a broken entry or
/// more than one.
std::optional<runtime::KernelArtifacts>
bundledDecode(const runtime::Bundle &bundle, const runtime::CacheKey &request,
              const std::string &canonical, const char *bundleDir) {
  std::optional<runtime::KernelArtifacts> found;
  for (const runtime::Bundle::Item &item : bundle.items()) {
    if (item.config.kind != KernelKind::Decode ||
        item.config.arch != request.config.arch || item.specText != canonical)
      continue;
    if (found)
      throw UserError(fmt::format("flashjit_load: bundle '{}' has several {} "
                                  "decode kernels for spec '{}' with "
                                  "different tile options; keep one",
                                  bundleDir, request.config.arch, canonical));
    runtime::CacheKey key = request;
    key.specText = item.specText;
    key.config = item.config;
    key.mma = item.mma;
    found = bundle.find(key);
    const std::string *ptx = found ? found->file(runtime::kPtxFile) : nullptr;
    if (!ptx)
      throw UserError(fmt::format("flashjit_load: the bundled {} decode "
                                  "kernel for '{}' in '{}' has no {}",
                                  request.config.arch, canonical, bundleDir,
                                  runtime::kPtxFile));
    // Checked here too, so a bundle is refused the same with or without a
    // GPU (GpuDecodeKernel checks it again before loading).
    if (std::string why = runtime::gpuLaunchConfigMismatch(
            parseSpec(canonical), runtime::gpuKernelInfo(*found), *ptx);
        !why.empty())
      throw UserError(fmt::format("flashjit_load: the bundled {} decode "
                                  "kernel for '{}' in '{}' is broken: {}",
                                  request.config.arch, canonical, bundleDir,
                                  why));
  }
  return found;
}

/// The loaded decode kernels of bundled artifacts \p a (device 0).
std::shared_ptr<const runtime::GpuDecodeKernel>
loadDecode(const AttentionSpec &spec, const runtime::KernelArtifacts &a) {
  return std::make_shared<const runtime::GpuDecodeKernel>(
      spec, runtime::gpuKernelInfo(a), *a.file(runtime::kPtxFile),
      runtime::Device::get(0));
}

/// The GPU merge / append kernels of device \p ordinal, made once.
const runtime::GpuPagedOps &pagedOps(int ordinal) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<runtime::GpuPagedOps>> ops;
  std::string why;
  if (!runtime::Device::available(&why))
    throw DriverError("no GPU for device " + std::to_string(ordinal) + ": " +
                      why);
  std::lock_guard<std::mutex> lock(mu);
  auto &slot = ops[ordinal];
  if (!slot)
    slot =
        std::make_unique<runtime::GpuPagedOps>(runtime::Device::get(ordinal));
  return *slot;
}
} // namespace

namespace {
/// Writes the gradients \p g into the caller's \p grads (see
/// flashjit_run_backward): \p copy writes one vector to a caller's array
/// (host or device memory), \p writeSink writes d sink [heads_q].
template <typename Copy, typename WriteSink>
void writeGrads(const AttentionSpec &spec, const DataGradients &g,
                const flashjit_grad *grads, int num_grads, Copy copy,
                WriteSink writeSink) {
  for (int i = 0; i < num_grads; ++i) {
    const flashjit_grad &e = grads[i];
    if (!e.name)
      throw UserError(fmt::format("grads[{}].name is NULL", i));
    std::string name = e.name;
    if (name == FLASHJIT_SINK) {
      if (!spec.sink)
        throw UserError(fmt::format("grads[{}] '" FLASHJIT_SINK "': the "
                                    "spec has no sink",
                                    i));
      if (e.size != spec.headsQ || !e.data)
        throw UserError(fmt::format("grads[{}] '" FLASHJIT_SINK "': size = "
                                    "{}, expected heads_q = {}, and data",
                                    i, e.size, spec.headsQ));
      writeSink(e.data);
      continue;
    }
    if (auto it = g.dBuffers.find(name); it != g.dBuffers.end()) {
      if (e.size != static_cast<int64_t>(it->second.size()))
        throw UserError(fmt::format("grads[{}] '{}': size = {}, expected {} "
                                    "(the bound buffer's length)",
                                    i, excerpt(name), e.size,
                                    it->second.size()));
      if (e.size > 0 && !e.data)
        throw UserError(
            fmt::format("grads[{}] '{}': data is NULL", i, excerpt(name)));
      copy(e.data, it->second);
    } else if (auto p = g.dParams.find(name); p != g.dParams.end()) {
      if (e.size != 1 || !e.data)
        throw UserError(fmt::format("grads[{}] '{}': a parameter's gradient "
                                    "needs size = 1 and data, got size = {}",
                                    i, excerpt(name), e.size));
      copy(e.data, std::vector<float>{p->second});
    } else {
      throw UserError(fmt::format(
          "grads[{}] '{}' is not an f32 buffer or f32 parameter that the "
          "score modifier reads, so it has no gradient",
          i, excerpt(name)));
    }
  }
}

/// The bytes of one FLASHJIT_ARG_BUFFER_* element; 0 for scalars.
uint64_t argElementBytes(flashjit_arg_kind kind) {
  switch (kind) {
  case FLASHJIT_ARG_BUFFER_F32:
  case FLASHJIT_ARG_BUFFER_I32:
    return 4;
  case FLASHJIT_ARG_BUFFER_I64:
    return 8;
  default:
    return 0;
  }
}

/// The memory of \p n elements of \p elementBytes at \p data; sizes that
/// are negative or absurd (past 2^56 elements) are left to the size checks
/// and counted as empty here.
MemoryRegion arrayMemory(std::string name, const void *data, int64_t n,
                         uint64_t elementBytes) {
  if (n <= 0 || n > (int64_t{1} << 56))
    return memoryOf(std::move(name), nullptr, 0);
  return memoryOf(std::move(name), data, uint64_t(n) * elementBytes);
}

/// The mode arguments of a backward call (flashjit_run_backward_ex):
/// cu_seqlens (varlen kernels) and the block mask (block-sparse kernels),
/// checked against the kernel's flags by backwardCall.
struct BackwardCall {
  bool varlen = false;
  std::span<const int32_t> cuQ, cuK;
  const flashjit_block_mask *mask = nullptr;
};

/// The BackwardCall of \p kernel for these arguments, or UserError naming
/// the argument a mode lacks or does not take.
BackwardCall backwardCall(const flashjit_kernel &kernel,
                          const int32_t *cuSeqlensQ, const int32_t *cuSeqlensK,
                          int64_t numSeqs, const flashjit_block_mask *mask,
                          const char *entry) {
  BackwardCall call;
  call.varlen = kernel.flags & FLASHJIT_COMPILE_VARLEN;
  bool sparse = kernel.flags & FLASHJIT_COMPILE_BLOCK_SPARSE;
  const std::string &name = kernel.spec.variant.name();
  if (call.varlen) {
    call.cuQ = cuSpan(cuSeqlensQ, numSeqs, "cu_seqlens_q");
    call.cuK = cuSpan(cuSeqlensK, numSeqs, "cu_seqlens_k");
  } else if (cuSeqlensQ || cuSeqlensK || numSeqs != 0) {
    throw UserError(fmt::format(
        "{}: cu_seqlens_q = {}, cu_seqlens_k = {}, num_seqs = {} given, but "
        "kernel '{}' was not compiled varlen (FLASHJIT_COMPILE_VARLEN): pass "
        "NULL, NULL, 0",
        entry, static_cast<const void *>(cuSeqlensQ),
        static_cast<const void *>(cuSeqlensK), numSeqs, name));
  }
  if (sparse) {
    if (!mask)
      throw UserError(fmt::format("{}: mask is NULL, but kernel '{}' was "
                                  "compiled block-sparse: pass the block "
                                  "mask its forward ran with",
                                  entry, name));
    call.mask = &maskFor(kernel, mask, entry);
  } else if (mask) {
    throw UserError(fmt::format("{}: mask given, but kernel '{}' was not "
                                "compiled block-sparse "
                                "(FLASHJIT_COMPILE_BLOCK_SPARSE): pass NULL",
                                entry, name));
  }
  return call;
}

/// flashjit_run_backward's aliasing rule, checked before anything is
/// written: q, k, v, o, lse, dO and the bound buffers are inputs (they may
/// share memory); dq, dk, dv and every grads[i].data are outputs, disjoint
/// from all inputs and from each other; no name appears twice in grads.
void checkBackwardOutputs(const AttentionSpec &spec, const TensorRef &q,
                          const TensorRef &k, const TensorRef &v,
                          const TensorRef &o, const TensorRef &lse,
                          const TensorRef &dO, const TensorRef &dq,
                          const TensorRef &dk, const TensorRef &dv,
                          const BackwardCall &call, const flashjit_arg *args,
                          int numArgs, const flashjit_grad *grads,
                          int numGrads) {
  if (call.varlen)
    (void)checkVarlenBackwardTensors(spec, q, k, v, call.cuQ, call.cuK, o, lse,
                                     dO, dq, dk, dv);
  else
    (void)checkBackwardTensors(spec, q, k, v, o, lse, dO, dq, dk, dv);
  std::vector<MemoryRegion> outs = {memoryOf("dq", dq), memoryOf("dk", dk),
                                    memoryOf("dv", dv)};
  std::vector<MemoryRegion> ins = {memoryOf("q", q),     memoryOf("k", k),
                                   memoryOf("v", v),     memoryOf("o", o),
                                   memoryOf("lse", lse), memoryOf("dO", dO)};
  if (call.varlen) {
    ins.push_back(arrayMemory("cu_seqlens_q", call.cuQ.data(),
                              static_cast<int64_t>(call.cuQ.size()),
                              sizeof(int32_t)));
    ins.push_back(arrayMemory("cu_seqlens_k", call.cuK.data(),
                              static_cast<int64_t>(call.cuK.size()),
                              sizeof(int32_t)));
  }
  for (int i = 0; i < numArgs; ++i)
    if (uint64_t bytes = argElementBytes(args[i].kind); bytes && args[i].name)
      ins.push_back(
          arrayMemory(fmt::format("args[{}] '{}'", i, excerpt(args[i].name)),
                      args[i].data, args[i].size, bytes));
  std::map<std::string, int> seen; // name -> first index
  for (int i = 0; i < numGrads; ++i) {
    const flashjit_grad &e = grads[i];
    if (!e.name)
      throw UserError(fmt::format("grads[{}].name is NULL", i));
    if (auto [it, inserted] = seen.emplace(e.name, i); !inserted)
      throw UserError(fmt::format("grads[{}] '{}' repeats grads[{}]: give "
                                  "each gradient once",
                                  i, excerpt(e.name), it->second));
    outs.push_back(
        arrayMemory(fmt::format("grads[{}] '{}'", i, excerpt(e.name)), e.data,
                    e.size, sizeof(float)));
  }
  checkOutputsDisjoint(outs, ins);
}

void hostCopy(float *dst, const std::vector<float> &src) {
  std::copy(src.begin(), src.end(), dst);
}

/// The d sink kernel of device 0 (NVRTC, compiled once per process).
const runtime::GpuSinkGradient &sinkGradient() {
  static std::mutex mutex;
  static std::unique_ptr<runtime::GpuSinkGradient> kernel;
  std::lock_guard<std::mutex> lock(mutex);
  if (!kernel)
    kernel =
        std::make_unique<runtime::GpuSinkGradient>(runtime::Device::get(0));
  return *kernel;
}

/// Runs \p bwd for \p call's mode on the GPU: dense, block-sparse (the
/// mask's tiles checked against the backward's first, so the error says
/// where they come from) or varlen (cu_seqlens uploaded for the call).
DataGradients runGpuBackwardMode(const runtime::GpuAttentionBackwardKernel &bwd,
                                 const TensorRef &q, const TensorRef &k,
                                 const TensorRef &v, const TensorRef &o,
                                 const TensorRef &lse, const TensorRef &dO,
                                 const TensorRef &dq, const TensorRef &dk,
                                 const TensorRef &dv, const BackwardCall &call,
                                 const Arguments &args, CUstream stream) {
  const runtime::DeviceBlockMask *mask =
      call.mask ? &*call.mask->device : nullptr;
  if (mask) {
    const BlockMask &m = mask->shape();
    int64_t rows = bwd.info().config.blockN, keys = bwd.info().config.blockM();
    if (m.blockM % rows != 0 || m.blockN % kBackwardKeyGroup != 0)
      throw UserError(fmt::format(
          "flashjit_run_backward_ex: the block mask's tiles ({} query rows x "
          "{} keys, the forward kernel's) do not fit the GPU backward's "
          "tiles ({} query rows x {} keys): block_m must be a multiple of {} "
          "and block_n of {} (the default forward tiles are; compile the "
          "forward with tiles that are)",
          m.blockM, m.blockN, rows, keys, rows, kBackwardKeyGroup));
  }
  if (call.varlen) {
    runtime::DeviceCuSeqlens cu(call.cuQ, call.cuK, runtime::Device::get(0));
    if (mask)
      return bwd.runVarlen(q, k, v, o, lse, dO, dq, dk, dv, cu, *mask, args, {},
                           stream);
    return bwd.runVarlen(q, k, v, o, lse, dO, dq, dk, dv, cu, args, {}, stream);
  }
  if (mask)
    return bwd.runBlockSparse(q, k, v, o, lse, dO, dq, dk, dv, *mask, args, {},
                              stream);
  return bwd.run(q, k, v, o, lse, dO, dq, dk, dv, args, stream);
}

/// flashjit_run_backward(_ex) for a GPU kernel: the bundled backward, else
/// (with the compiler) loadOrCompileGpuBackward with the kernel's mode
/// flags; gradients of buffers, parameters and the sink into device
/// arrays.
void runGpuBackward(const flashjit_kernel &kernel, const TensorRef &q,
                    const TensorRef &k, const TensorRef &v, const TensorRef &o,
                    const TensorRef &lse, const TensorRef &dO,
                    const TensorRef &dq, const TensorRef &dk,
                    const TensorRef &dv, const BackwardCall &call,
                    const Arguments &args, const flashjit_arg *rawArgs,
                    int numArgs, const flashjit_grad *grads, int num_grads,
                    CUstream stream) {
  checkBackwardOutputs(kernel.spec, q, k, v, o, lse, dO, dq, dk, dv, call,
                       rawArgs, numArgs, grads, num_grads);
  if (!runtime::Device::available())
    noGpu();
  std::shared_ptr<const runtime::GpuAttentionBackwardKernel> bwd =
      kernel.gpuBackward;
#ifndef FLASHJIT_C_WITH_COMPILER
  if (!bwd)
    throw UserError(fmt::format(
        "flashjit_run_backward: this is flashjit_c_runtime, built without "
        "the compiler, and the bundle holds no GPU backward of this kernel "
        "(make it with `flashjit bundle --kernel fwd,bwd --target "
        "sm_90a{}{}`), or link flashjit_c",
        call.varlen ? " --varlen" : "", call.mask ? " --block-sparse" : ""));
#else
  if (!bwd) {
    GpuCompileOptions options;
    options.varlen = call.varlen;
    options.blockSparse = call.mask != nullptr;
    bwd =
        loadOrCompileGpuBackward(kernel.spec, runtime::Device::get(0), options);
  }
#endif
  DataGradients g = runGpuBackwardMode(*bwd, q, k, v, o, lse, dO, dq, dk, dv,
                                       call, args, stream);
  runtime::Device &device = runtime::Device::get(0);
  writeGrads(
      kernel.spec, g, grads, num_grads,
      [&](float *dst, const std::vector<float> &src) {
        runtime::copyHostToDevice(device, dst, src.data(),
                                  src.size() * sizeof(float));
      },
      [&](float *dSink) {
        sinkGradient().run(kernel.spec, o, dO, lse, args, dSink, stream);
      });
}

/// flashjit_run_backward(_ex) for a CPU kernel: the bundled backward, else
/// (with the compiler) loadOrCompileCpuBackward with the forward's tiles
/// and mode flags.
void runCpuBackward(const flashjit_kernel &kernel, const TensorRef &q,
                    const TensorRef &k, const TensorRef &v, const TensorRef &o,
                    const TensorRef &lse, const TensorRef &dO,
                    const TensorRef &dq, const TensorRef &dk,
                    const TensorRef &dv, const BackwardCall &call,
                    const Arguments &a, const flashjit_arg *args, int numArgs,
                    const flashjit_grad *grads, int numGrads) {
  checkBackwardOutputs(kernel.spec, q, k, v, o, lse, dO, dq, dk, dv, call, args,
                       numArgs, grads, numGrads);
  std::shared_ptr<const runtime::CpuBackwardKernel> bwd = kernel.cpuBackward;
#ifndef FLASHJIT_C_WITH_COMPILER
  if (!bwd)
    throw UserError(fmt::format(
        "flashjit_run_backward: this is flashjit_c_runtime, built without "
        "the compiler, and the bundle holds no backward of this kernel "
        "(make it with `flashjit bundle --kernel fwd,bwd{}{}`), or link "
        "flashjit_c",
        call.varlen ? " --varlen" : "", call.mask ? " --block-sparse" : ""));
#else
  if (!bwd) {
    CompileOptions options;
    options.blockM = kernel.cpu->config().blockM();
    options.blockN = kernel.cpu->config().blockN;
    options.varlen = call.varlen;
    options.blockSparse = call.mask != nullptr;
    bwd = loadOrCompileCpuBackward(kernel.spec, options);
  }
#endif
  const BlockMask *mask = call.mask ? &*call.mask->host : nullptr;
  DataGradients g =
      call.varlen ? bwd->runVarlen(q, k, v, o, lse, dO, dq, dk, dv, call.cuQ,
                                   call.cuK, a, mask)
      : mask ? bwd->runBlockSparse(q, k, v, o, lse, dO, dq, dk, dv, *mask, a)
             : bwd->run(q, k, v, o, lse, dO, dq, dk, dv, a);
  writeGrads(kernel.spec, g, grads, numGrads, hostCopy,
             [&](float *dSink) { hostCopy(dSink, g.dSink); });
}

/// flashjit_run_backward_ex after the kernel check: tensors (lse rank 2
/// for varlen calls), arguments, mode arguments, then the target's run.
void runBackward(const flashjit_kernel &kernel, const flashjit_tensor *q,
                 const flashjit_tensor *k, const flashjit_tensor *v,
                 const flashjit_tensor *o, const flashjit_tensor *lse,
                 const flashjit_tensor *d_o, const flashjit_tensor *dq,
                 const flashjit_tensor *dk, const flashjit_tensor *dv,
                 const int32_t *cuSeqlensQ, const int32_t *cuSeqlensK,
                 int64_t numSeqs, const flashjit_block_mask *mask,
                 const flashjit_arg *args, int numArgs,
                 const flashjit_grad *grads, int numGrads, void *stream) {
  bool varlen = kernel.flags & FLASHJIT_COMPILE_VARLEN;
  TensorRef qr = toRef(q, "q"), kr = toRef(k, "k"), vr = toRef(v, "v"),
            orf = toRef(o, "o"), lr = toRef(lse, "lse", varlen ? 2 : 3),
            dor = toRef(d_o, "d_o"), dqr = toRef(dq, "dq"),
            dkr = toRef(dk, "dk"), dvr = toRef(dv, "dv");
  Arguments a = toArguments(args, numArgs);
  if (numGrads < 0 || (numGrads > 0 && !grads))
    throw UserError(fmt::format("num_grads = {} with grads = {}", numGrads,
                                static_cast<const void *>(grads)));
  BackwardCall call = backwardCall(kernel, cuSeqlensQ, cuSeqlensK, numSeqs,
                                   mask, "flashjit_run_backward_ex");
  if (kernel.cpu)
    runCpuBackward(kernel, qr, kr, vr, orf, lr, dor, dqr, dkr, dvr, call, a,
                   args, numArgs, grads, numGrads);
  else
    runGpuBackward(kernel, qr, kr, vr, orf, lr, dor, dqr, dkr, dvr, call, a,
                   args, numArgs, grads, numGrads,
                   static_cast<CUstream>(stream));
}

/// flashjit_run_paged for a GPU kernel: the bundled decode kernels, else
/// (with the compiler) loadOrCompileGpuDecode of the kernel's spec; the
/// table (host or device memory) checked on the host and uploaded; the
/// call synchronises \p stream before the table and the workspaces are
/// released.
void runGpuPaged(const flashjit_kernel &kernel, const TensorRef &q,
                 const TensorRef &kCache, const TensorRef &vCache,
                 const flashjit_page_table *table, const TensorRef &o,
                 const TensorRef *lse, const Arguments &args, int numSplits,
                 CUstream stream) {
  if (!kernel.gpu && !kernel.gpuDecode)
    noGpu();
  runtime::Device &device = runtime::Device::get(0);
  std::shared_ptr<const runtime::GpuDecodeKernel> decode = kernel.gpuDecode;
#ifndef FLASHJIT_C_WITH_COMPILER
  if (!decode)
    throw UserError("flashjit_run_paged: this is flashjit_c_runtime, built "
                    "without the compiler, and the bundle holds no GPU "
                    "decode kernel of this spec (make it with `flashjit "
                    "bundle --kernel fwd,decode --target sm_90a`), or link "
                    "flashjit_c");
#else
  if (!decode)
    decode = loadOrCompileGpuDecode(kernel.spec, device);
#endif
  std::vector<std::vector<int32_t>> copies;
  flashjit_page_table h = hostPageTable(table, device, copies);
  PageList pages = toPageList(&h, kCache.shape[0], kCache.shape[2]);
  checkPagedOutputs(q, kCache, vCache, o, lse, pageTableMemory(*table));
  runtime::DevicePageTable t(pages, device);
  // No lock: every run() takes its own stream-ordered workspace, so calls
  // from several threads on several streams may overlap.
  decode->run(q, kCache, vCache, t, o, lse, args, numSplits, stream);
  // The table's device copy is freed when t goes: wait for the kernels.
  if (runtime::Driver::get().cuStreamSynchronize(stream) != CUDA_SUCCESS)
    throw DriverError("flashjit_run_paged: the decode kernels failed "
                      "(cuStreamSynchronize)");
}
} // namespace

extern "C" {

flashjit_status flashjit_compile(const char *spec_text, const char *target,
                                 flashjit_kernel **out) {
  return flashjit_compile_ex(spec_text, target, 0, out);
}

flashjit_status flashjit_compile_ex(const char *spec_text, const char *target,
                                    unsigned flags, flashjit_kernel **out) {
  return guarded([&] {
    if (!spec_text || !target || !out)
      throw UserError("flashjit_compile: spec_text, target and out must not "
                      "be NULL");
    constexpr unsigned known =
        FLASHJIT_COMPILE_VARLEN | FLASHJIT_COMPILE_BLOCK_SPARSE;
    if (flags & ~known)
      throw UserError(fmt::format("flashjit_compile_ex: flags = {:#x} has "
                                  "unknown bits {:#x} (known: "
                                  "FLASHJIT_COMPILE_VARLEN = 1, "
                                  "FLASHJIT_COMPILE_BLOCK_SPARSE = 2)",
                                  flags, flags & ~known));
#ifndef FLASHJIT_C_WITH_COMPILER
    throw UserError("flashjit_compile: this is flashjit_c_runtime, built "
                    "without the compiler; load precompiled kernels with "
                    "flashjit_load, or link flashjit_c");
#else
    auto k = std::make_unique<flashjit_kernel>();
    k->spec = parseSpec(spec_text);
    k->specText = printSpec(k->spec);
    k->flags = flags;
    bool varlen = flags & FLASHJIT_COMPILE_VARLEN;
    bool blockSparse = flags & FLASHJIT_COMPILE_BLOCK_SPARSE;
    std::string t = target;
    // Both targets go through the kernel cache (FLASHJIT_CACHE_DIR, ...).
    if (t == "cpu") {
      CompileOptions o;
      o.varlen = varlen;
      o.blockSparse = blockSparse;
      k->cpu = loadOrCompileCpu(k->spec, o); // a runtime::CpuAttentionKernel
      k->blockM = k->cpu->config().blockM();
      k->blockN = k->cpu->config().blockN;
    } else if (t == "sm_80" || t == "sm_90a") {
      GpuCompileOptions o;
      o.arch = t;
      o.varlen = varlen;
      o.blockSparse = blockSparse;
      runtime::KernelArtifacts a = loadOrCompileGpuArtifacts(k->spec, o);
      k->ptx = *a.file(runtime::kPtxFile);
      const std::string *cubin = a.file(runtime::kCubinFile);
      runtime::GpuKernelInfo info = runtime::gpuKernelInfo(a);
      k->blockM = info.config.blockM();
      k->blockN = info.config.blockN;
      // Loading needs a GPU; without one the kernel still carries its PTX.
      if (runtime::Device::available())
        k->gpu = std::make_unique<runtime::GpuAttentionKernel>(
            k->spec, info, k->ptx, runtime::Device::get(0),
            cubin ? std::string_view(*cubin) : std::string_view());
    } else {
      throw UserError(
          fmt::format("target '{}' is not cpu, sm_80 or sm_90a", excerpt(t)));
    }
    *out = k.release();
#endif
  });
}

flashjit_status flashjit_load(const char *bundle_dir, const char *spec_text,
                              const char *target, flashjit_kernel **out) {
  return guarded([&] {
    if (!bundle_dir || !spec_text || !target || !out)
      throw UserError("flashjit_load: bundle_dir, spec_text, target and out "
                      "must not be NULL");
    std::string t = target;
    if (t != "sm_80" && t != "sm_90a" && t != "cpu")
      throw UserError(
          fmt::format("flashjit_load: target '{}' is not sm_80, sm_90a or cpu",
                      excerpt(t)));
    auto k = std::make_unique<flashjit_kernel>();
    k->spec = parseSpec(spec_text);
    std::string canonical = printSpec(k->spec);
    k->specText = canonical;
    runtime::Bundle bundle = runtime::Bundle::open(bundle_dir);
    runtime::CacheKey request;
    request.specText = canonical;
    request.config.arch = t;
    request.mma = "default";
    if (t == "cpu") { // what `flashjit bundle --target cpu` builds
      request.config.cpuBlockM = request.config.blockN =
          runtime::kDefaultCpuBlock;
      request.config.optLevel = runtime::kDefaultCpuOptLevel;
      request.mma.clear();
    }
    std::optional<runtime::KernelArtifacts> a = bundle.find(request);
    if (!a) {
      // Bundled with explicit tile options (flashjit bundle --block-n ...,
      // --mma ...):
      // the one kernel of this spec and target, whatever its tiles.
      std::vector<const runtime::Bundle::Item *> same;
      for (const runtime::Bundle::Item &item : bundle.items())
        if (item.specText == canonical && item.config.arch == t &&
            item.config.kind == KernelKind::Forward)
          same.push_back(&item);
      if (same.size() > 1)
        throw UserError(fmt::format(
            "flashjit_load: bundle '{}' has {} {} kernels for spec '{}' with "
            "different tile options or --mma; keep one per spec and target",
            bundle_dir, same.size(), t, canonical));
      if (same.size() == 1) {
        request.config = same[0]->config;
        request.mma = same[0]->mma;
        a = bundle.find(request);
      }
    }
    // The decode kernels bundled for this spec and target (`flashjit
    // bundle --kernel decode` or fwd,decode), if any.
    std::optional<runtime::KernelArtifacts> decode;
    if (t != "cpu")
      decode = bundledDecode(bundle, request, canonical, bundle_dir);
    if (!a && decode) {
      // Decode kernels only: flashjit_run_paged runs them.
      if (runtime::Device::available())
        k->gpuDecode = loadDecode(k->spec, *decode);
      else
        k->ptx = *decode->file(runtime::kPtxFile);
      *out = k.release();
      return;
    }
    if (!a)
      throw UserError(fmt::format("flashjit_load: bundle '{}' has no {} "
                                  "kernel for spec '{}' ({} kernels in it)",
                                  bundle_dir, t, canonical,
                                  bundle.items().size()));
    if (t == "cpu") {
      k->cpu = runtime::loadCpuKernel(*a);
      const KernelConfig &config = k->cpu->config();
      k->blockM = config.blockM();
      k->blockN = config.blockN;
      k->flags = modeFlags(config.varlen, config.blockSparse);
      // The backward bundled beside it (`flashjit bundle --kernel fwd,bwd`):
      // the spec with LSE, the forward's tiles, kind backward.
      runtime::CacheKey bwd = request;
      AttentionSpec withLse = k->spec;
      withLse.returnLse = true;
      bwd.specText = printSpec(withLse);
      bwd.config = config;
      bwd.config.kind = KernelKind::Backward;
      bwd.config.countTiles = false;
      if (std::optional<runtime::KernelArtifacts> b = bundle.find(bwd))
        k->cpuBackward = runtime::loadCpuBackwardKernel(*b);
      *out = k.release();
      return;
    }
    const std::string *ptx = a->file(runtime::kPtxFile);
    if (!ptx)
      throw UserError(fmt::format("flashjit_load: the bundled {} kernel for "
                                  "'{}' in '{}' has no {}",
                                  t, canonical, bundle_dir, runtime::kPtxFile));
    k->ptx = *ptx;
    runtime::GpuKernelInfo info = runtime::gpuKernelInfo(*a);
    // Checked here too, so a bundle is refused the same with or without a
    // GPU (GpuAttentionKernel checks it again before loading).
    if (std::string why =
            runtime::gpuLaunchConfigMismatch(k->spec, info, k->ptx);
        !why.empty())
      throw UserError(fmt::format("flashjit_load: the bundled {} kernel for "
                                  "'{}' in '{}' is broken: {}",
                                  t, canonical, bundle_dir, why));
    k->blockM = info.config.blockM();
    k->blockN = info.config.blockN;
    k->flags = modeFlags(info.config.varlen, info.config.blockSparse);
    if (runtime::Device::available()) {
      k->gpu = std::make_unique<runtime::GpuAttentionKernel>(
          k->spec, info, k->ptx, runtime::Device::get(0));
      if (decode)
        k->gpuDecode = loadDecode(k->spec, *decode);
      // The backward bundled beside it (`flashjit bundle --kernel fwd,bwd
      // --target <arch>`): the spec with LSE, kind backward, its own tiles.
      for (const runtime::Bundle::Item &item : bundle.items()) {
        if (item.config.kind != KernelKind::Backward || item.config.arch != t ||
            item.config.varlen != info.config.varlen ||
            item.config.blockSparse != info.config.blockSparse)
          continue;
        AttentionSpec withLse = k->spec;
        withLse.returnLse = true;
        if (item.specText != printSpec(withLse))
          continue;
        runtime::CacheKey bwd = request;
        bwd.specText = item.specText;
        bwd.config = item.config;
        bwd.mma = item.mma;
        std::optional<runtime::KernelArtifacts> b = bundle.find(bwd);
        const std::string *bptx = b ? b->file(runtime::kPtxFile) : nullptr;
        if (!bptx)
          throw UserError(fmt::format("flashjit_load: the bundled {} "
                                      "backward for '{}' in '{}' has no {}",
                                      t, canonical, bundle_dir,
                                      runtime::kPtxFile));
        k->gpuBackward =
            std::make_shared<const runtime::GpuAttentionBackwardKernel>(
                withLse, runtime::gpuKernelInfo(*b), *bptx,
                runtime::Device::get(0));
        break;
      }
    }
    *out = k.release();
  });
}

flashjit_status flashjit_run(const flashjit_kernel *kernel,
                             const flashjit_tensor *q, const flashjit_tensor *k,
                             const flashjit_tensor *v, const flashjit_tensor *o,
                             const flashjit_tensor *lse,
                             const flashjit_arg *args, int num_args,
                             void *stream) {
  return guarded([&] {
    if (!kernel)
      throw UserError("flashjit_run: kernel is NULL");
    TensorRef qr = toRef(q, "q"), kr = toRef(k, "k"), vr = toRef(v, "v"),
              orf = toRef(o, "o");
    TensorRef lr;
    if (lse)
      lr = toRef(lse, "lse");
    Arguments a = toArguments(args, num_args);
    if (kernel->cpu) {
      kernel->cpu->run(qr, kr, vr, orf, lse ? &lr : nullptr, a);
      return;
    }
    if (!kernel->gpu)
      noGpu(kernel);
    kernel->gpu->run(qr, kr, vr, orf, lse ? &lr : nullptr, a,
                     static_cast<CUstream>(stream));
  });
}

flashjit_status
flashjit_run_backward(const flashjit_kernel *kernel, const flashjit_tensor *q,
                      const flashjit_tensor *k, const flashjit_tensor *v,
                      const flashjit_tensor *o, const flashjit_tensor *lse,
                      const flashjit_tensor *d_o, const flashjit_tensor *dq,
                      const flashjit_tensor *dk, const flashjit_tensor *dv,
                      const flashjit_arg *args, int num_args,
                      const flashjit_grad *grads, int num_grads, void *stream) {
  return guarded([&] {
    if (!kernel)
      throw UserError("flashjit_run_backward: kernel is NULL");
    // Its calls take cu_seqlens or a block mask, which this entry point
    // has no argument for: a dense backward would ignore them.
    if (kernel->flags &
        (FLASHJIT_COMPILE_VARLEN | FLASHJIT_COMPILE_BLOCK_SPARSE)) {
      bool varlen = kernel->flags & FLASHJIT_COMPILE_VARLEN;
      throw UserError(fmt::format(
          "flashjit_run_backward: kernel '{}' was compiled {}: "
          "flashjit_run_backward takes dense-call kernels only; pass the "
          "{} to flashjit_run_backward_ex",
          kernel->spec.variant.name(), varlen ? "varlen" : "block-sparse",
          varlen ? "cu_seqlens (and block mask)" : "block mask"));
    }
    runBackward(*kernel, q, k, v, o, lse, d_o, dq, dk, dv, nullptr, nullptr, 0,
                nullptr, args, num_args, grads, num_grads, stream);
  });
}

flashjit_status flashjit_run_backward_ex(
    const flashjit_kernel *kernel, const flashjit_tensor *q,
    const flashjit_tensor *k, const flashjit_tensor *v,
    const flashjit_tensor *o, const flashjit_tensor *lse,
    const flashjit_tensor *d_o, const flashjit_tensor *dq,
    const flashjit_tensor *dk, const flashjit_tensor *dv,
    const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k, int64_t num_seqs,
    const flashjit_block_mask *mask, const flashjit_arg *args, int num_args,
    const flashjit_grad *grads, int num_grads, void *stream) {
  return guarded([&] {
    runBackward(need(kernel, "flashjit_run_backward_ex"), q, k, v, o, lse, d_o,
                dq, dk, dv, cu_seqlens_q, cu_seqlens_k, num_seqs, mask, args,
                num_args, grads, num_grads, stream);
  });
}

const char *flashjit_kernel_ptx(const flashjit_kernel *kernel) {
  return kernel && !kernel->ptx.empty() ? kernel->ptx.c_str() : nullptr;
}

void flashjit_kernel_destroy(flashjit_kernel *kernel) { delete kernel; }

const char *flashjit_version(void) { return FLASHJIT_VERSION_STRING; }

namespace {
thread_local std::string canonicalText;
} // namespace

flashjit_status flashjit_canonical_expr(const char *text, const char **out) {
  return guarded([&] {
    if (!text || !out)
      throw UserError("flashjit_canonical_expr: text and out must not be "
                      "NULL");
    canonicalText = printExpr(parseExpr(text));
    *out = canonicalText.c_str();
  });
}

const char *flashjit_kernel_spec(const flashjit_kernel *kernel) {
  return kernel ? kernel->specText.c_str() : nullptr;
}

unsigned flashjit_kernel_flags(const flashjit_kernel *kernel) {
  return kernel ? kernel->flags : 0u;
}

flashjit_status flashjit_kernel_tiles(const flashjit_kernel *kernel,
                                      int64_t *block_m, int64_t *block_n) {
  return guarded([&] {
    const flashjit_kernel &k = need(kernel, "flashjit_kernel_tiles");
    if (block_m)
      *block_m = k.blockM;
    if (block_n)
      *block_n = k.blockN;
  });
}

flashjit_status flashjit_build_block_mask(const flashjit_kernel *kernel,
                                          int64_t batch, int64_t seqlen_q,
                                          int64_t seqlen_k,
                                          const flashjit_arg *args,
                                          int num_args, void *stream,
                                          flashjit_block_mask **out) {
  return guarded([&] {
    const flashjit_kernel &k = need(kernel, "flashjit_build_block_mask");
    if (!out)
      throw UserError("flashjit_build_block_mask: out is NULL");
    Arguments a = toArguments(args, num_args);
    auto m = std::make_unique<flashjit_block_mask>();
    if (k.cpu)
      m->host = k.cpu->buildBlockMask(batch, seqlen_q, seqlen_k, a);
    else if (k.gpu)
      m->device = k.gpu->buildBlockMask(batch, seqlen_q, seqlen_k, a,
                                        static_cast<CUstream>(stream));
    else
      noGpu(&k);
    *out = m.release();
  });
}

flashjit_status flashjit_build_varlen_block_mask(
    const flashjit_kernel *kernel, const int32_t *cu_seqlens_q,
    const int32_t *cu_seqlens_k, int64_t num_seqs, const flashjit_arg *args,
    int num_args, void *stream, flashjit_block_mask **out) {
  return guarded([&] {
    const flashjit_kernel &k = need(kernel, "flashjit_build_varlen_block_mask");
    if (!out)
      throw UserError("flashjit_build_varlen_block_mask: out is NULL");
    auto cq = cuSpan(cu_seqlens_q, num_seqs, "cu_seqlens_q");
    auto ck = cuSpan(cu_seqlens_k, num_seqs, "cu_seqlens_k");
    Arguments a = toArguments(args, num_args);
    auto m = std::make_unique<flashjit_block_mask>();
    if (k.cpu) {
      m->host = k.cpu->buildVarlenBlockMask(cq, ck, a);
    } else if (k.gpu) {
      runtime::DeviceCuSeqlens cu(cq, ck, runtime::Device::get(0));
      m->device =
          k.gpu->buildVarlenBlockMask(cu, a, static_cast<CUstream>(stream));
    } else {
      noGpu(&k);
    }
    *out = m.release();
  });
}

flashjit_status flashjit_block_mask_from_bsr(
    const flashjit_kernel *kernel, int64_t heads, int64_t seqlen_q,
    int64_t seqlen_k, const int32_t *row_offsets, const int32_t *col_indices,
    int64_t num_col_indices, flashjit_block_mask **out) {
  return guarded([&] {
    const flashjit_kernel &k = need(kernel, "flashjit_block_mask_from_bsr");
    if (!out)
      throw UserError("flashjit_block_mask_from_bsr: out is NULL");
    if (!(k.flags & FLASHJIT_COMPILE_BLOCK_SPARSE))
      throw UserError("flashjit_block_mask_from_bsr: the kernel is not "
                      "block-sparse (FLASHJIT_COMPILE_BLOCK_SPARSE)");
    if (heads < 1 || seqlen_q < 0 || seqlen_k < 0 || num_col_indices < 0)
      throw UserError(fmt::format(
          "flashjit_block_mask_from_bsr: heads = {}, seqlen_q = {}, "
          "seqlen_k = {}, num_col_indices = {} (heads >= 1, others >= 0)",
          heads, seqlen_q, seqlen_k, num_col_indices));
    BsrLayout layout;
    layout.blockM = k.blockM;
    layout.blockN = k.blockN;
    layout.heads = heads;
    layout.numQTiles = (seqlen_q + k.blockM - 1) / k.blockM;
    layout.numKvTiles = (seqlen_k + k.blockN - 1) / k.blockN;
    int64_t rows = heads * layout.numQTiles;
    if (!row_offsets || (num_col_indices > 0 && !col_indices))
      throw UserError("flashjit_block_mask_from_bsr: row_offsets or "
                      "col_indices is NULL");
    layout.rowOffsets.assign(row_offsets, row_offsets + rows + 1);
    if (num_col_indices > 0)
      layout.colIndices.assign(col_indices, col_indices + num_col_indices);
    auto m = std::make_unique<flashjit_block_mask>();
    BlockMask host = blockMaskFromBsr(layout, seqlen_q, seqlen_k);
    if (k.cpu)
      m->host = std::move(host);
    else if (k.gpu)
      m->device.emplace(host, runtime::Device::get(0));
    else
      noGpu(&k);
    *out = m.release();
  });
}

flashjit_status flashjit_block_mask_get_info(const flashjit_block_mask *mask,
                                             flashjit_block_mask_info *out) {
  return guarded([&] {
    if (!mask || !out)
      throw UserError("flashjit_block_mask_get_info: mask and out must not "
                      "be NULL");
    const BlockMask &s = mask->shape();
    *out = {s.blockM,    s.blockN,     s.seqlenQ,
            s.seqlenK,   s.batch,      s.heads,
            s.numQTiles, s.numKvTiles, s.cuSeqlensQ.empty() ? 0 : 1};
  });
}

flashjit_status flashjit_block_mask_copy(const flashjit_block_mask *mask,
                                         int32_t *kv_num_blocks,
                                         int32_t *kv_indices,
                                         int32_t *full_kv_num_blocks,
                                         int32_t *full_kv_indices) {
  return guarded([&] {
    if (!mask)
      throw UserError("flashjit_block_mask_copy: mask is NULL");
    BlockMask copy;
    const BlockMask *m = mask->host ? &*mask->host : nullptr;
    if (!m) {
      copy = mask->device->toHost();
      m = &copy;
    }
    auto put = [](const std::vector<int32_t> &from, int32_t *to) {
      if (to)
        std::copy(from.begin(), from.end(), to);
    };
    put(m->kvNumBlocks, kv_num_blocks);
    put(m->kvIndices, kv_indices);
    put(m->fullKvNumBlocks, full_kv_num_blocks);
    put(m->fullKvIndices, full_kv_indices);
  });
}

void flashjit_block_mask_destroy(flashjit_block_mask *mask) { delete mask; }

flashjit_status flashjit_run_block_sparse(
    const flashjit_kernel *kernel, const flashjit_tensor *q,
    const flashjit_tensor *k, const flashjit_tensor *v,
    const flashjit_tensor *o, const flashjit_tensor *lse,
    const flashjit_block_mask *mask, const flashjit_arg *args, int num_args,
    void *stream) {
  return guarded([&] {
    const flashjit_kernel &kern = need(kernel, "flashjit_run_block_sparse");
    TensorRef qr = toRef(q, "q"), kr = toRef(k, "k"), vr = toRef(v, "v"),
              orf = toRef(o, "o");
    TensorRef lr;
    if (lse)
      lr = toRef(lse, "lse");
    Arguments a = toArguments(args, num_args);
    if (!kern.cpu && !kern.gpu)
      noGpu(&kern);
    const flashjit_block_mask &m =
        maskFor(kern, mask, "flashjit_run_block_sparse");
    if (kern.cpu)
      kern.cpu->runBlockSparse(qr, kr, vr, orf, lse ? &lr : nullptr, *m.host,
                               a);
    else
      kern.gpu->runBlockSparse(qr, kr, vr, orf, lse ? &lr : nullptr, *m.device,
                               a, static_cast<CUstream>(stream));
  });
}

flashjit_status
flashjit_run_varlen(const flashjit_kernel *kernel, const flashjit_tensor *q,
                    const flashjit_tensor *k, const flashjit_tensor *v,
                    const flashjit_tensor *o, const flashjit_tensor *lse,
                    const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                    int64_t num_seqs, const flashjit_block_mask *mask,
                    const flashjit_arg *args, int num_args, void *stream) {
  return guarded([&] {
    const flashjit_kernel &kern = need(kernel, "flashjit_run_varlen");
    TensorRef qr = toRef(q, "q"), kr = toRef(k, "k"), vr = toRef(v, "v"),
              orf = toRef(o, "o");
    TensorRef lr;
    if (lse)
      lr = toRef(lse, "lse", 2);
    auto cq = cuSpan(cu_seqlens_q, num_seqs, "cu_seqlens_q");
    auto ck = cuSpan(cu_seqlens_k, num_seqs, "cu_seqlens_k");
    Arguments a = toArguments(args, num_args);
    if (!kern.cpu && !kern.gpu)
      noGpu(&kern);
    const flashjit_block_mask *m =
        mask ? &maskFor(kern, mask, "flashjit_run_varlen") : nullptr;
    if (kern.cpu) {
      kern.cpu->runVarlen(qr, kr, vr, orf, lse ? &lr : nullptr, cq, ck, a,
                          m ? &*m->host : nullptr);
    } else {
      runtime::DeviceCuSeqlens cu(cq, ck, runtime::Device::get(0));
      kern.gpu->runVarlen(qr, kr, vr, orf, lse ? &lr : nullptr, cu, a,
                          m ? &*m->device : nullptr,
                          static_cast<CUstream>(stream));
    }
  });
}

flashjit_status flashjit_merge_states(const flashjit_tensor *os,
                                      const flashjit_tensor *lses, int n,
                                      const flashjit_tensor *o,
                                      const flashjit_tensor *lse,
                                      const float *sink, int64_t sink_size,
                                      int device, void *stream) {
  return guarded([&] {
    if (n < 1 || !os || !lses)
      throw UserError(fmt::format("flashjit_merge_states: n = {} states "
                                  "(os {}, lses {}): need n >= 1 and both "
                                  "arrays",
                                  n, static_cast<const void *>(os),
                                  static_cast<const void *>(lses)));
    std::vector<TensorRef> o_, l_;
    for (int i = 0; i < n; ++i) {
      o_.push_back(toRef(&os[i], fmt::format("os[{}]", i).c_str()));
      l_.push_back(toRef(&lses[i], fmt::format("lses[{}]", i).c_str()));
    }
    TensorRef orf = toRef(o, "o"), lr = toRef(lse, "lse");
    if (sink_size < 0 || (sink_size > 0 && !sink) || (sink && sink_size == 0))
      throw UserError(fmt::format("flashjit_merge_states: sink = {} with "
                                  "sink_size = {}",
                                  static_cast<const void *>(sink), sink_size));
    if (device < -1)
      throw UserError(fmt::format("flashjit_merge_states: device = {}, "
                                  "expected -1 (host) or a CUDA ordinal",
                                  device));
    if (device == -1)
      mergeStates(o_, l_, orf, lr,
                  std::span<const float>(sink, static_cast<size_t>(sink_size)));
    else
      pagedOps(device).mergeStates(o_, l_, orf, lr, sink, sink_size,
                                   static_cast<CUstream>(stream));
  });
}

flashjit_status flashjit_paged_append(const flashjit_tensor *k_new,
                                      const flashjit_tensor *v_new,
                                      const flashjit_tensor *k_cache,
                                      const flashjit_tensor *v_cache,
                                      const flashjit_page_table *table,
                                      int device, void *stream) {
  return guarded([&] {
    TensorRef kn = toRef(k_new, "k_new", 4), vn = toRef(v_new, "v_new", 4),
              kc = toRef(k_cache, "k_cache", 4),
              vc = toRef(v_cache, "v_cache", 4);
    checkPageSize(kc.shape[2]);
    if (device < -1)
      throw UserError(fmt::format("flashjit_paged_append: device = {}, "
                                  "expected -1 (host) or a CUDA ordinal",
                                  device));
    if (device == -1) {
      appendPagedKV(kn, vn, kc, vc,
                    toPageList(table, kc.shape[0], kc.shape[2]));
      return;
    }
    const runtime::GpuPagedOps &ops = pagedOps(device);
    std::vector<std::vector<int32_t>> copies;
    flashjit_page_table h =
        hostPageTable(table, runtime::Device::get(device), copies);
    PageList pages = toPageList(&h, kc.shape[0], kc.shape[2]);
    runtime::DevicePageTable t(pages, runtime::Device::get(device));
    ops.append(kn, vn, kc, vc, t, static_cast<CUstream>(stream));
    // The table's device copy is freed when t goes: wait for the append.
    if (runtime::Driver::get().cuStreamSynchronize(
            static_cast<CUstream>(stream)) != CUDA_SUCCESS)
      throw DriverError("flashjit_paged_append: the append kernel failed "
                        "(cuStreamSynchronize)");
  });
}

flashjit_status flashjit_run_paged(
    const flashjit_kernel *kernel, const flashjit_tensor *q,
    const flashjit_tensor *k_cache, const flashjit_tensor *v_cache,
    const flashjit_page_table *table, const flashjit_tensor *o,
    const flashjit_tensor *lse, const flashjit_arg *args, int num_args) {
  return flashjit_run_paged_ex(kernel, q, k_cache, v_cache, table, o, lse, args,
                               num_args, 0, nullptr);
}

flashjit_status flashjit_run_paged_ex(
    const flashjit_kernel *kernel, const flashjit_tensor *q,
    const flashjit_tensor *k_cache, const flashjit_tensor *v_cache,
    const flashjit_page_table *table, const flashjit_tensor *o,
    const flashjit_tensor *lse, const flashjit_arg *args, int num_args,
    int num_splits, void *stream) {
  return guarded([&] {
    const flashjit_kernel &kern = need(kernel, "flashjit_run_paged");
    TensorRef qr = toRef(q, "q", 4), kc = toRef(k_cache, "k_cache", 4),
              vc = toRef(v_cache, "v_cache", 4), orf = toRef(o, "o", 4);
    TensorRef lr;
    if (lse)
      lr = toRef(lse, "lse");
    Arguments a = toArguments(args, num_args);
    if (!table)
      throw UserError("flashjit_run_paged: table is NULL");
    if (num_splits < 0 || num_splits > 1024)
      throw UserError(fmt::format("flashjit_run_paged: num_splits = {}, "
                                  "expected 0 (automatic) or 1..1024",
                                  num_splits));
    checkPageSize(kc.shape[2]);
    checkNumPages("k_cache", kc.shape[0]);
    if (kern.cpu) {
      // The CLI refuses --num-splits on the CPU; so does the C API rather
      // than ignore it.
      if (num_splits > 1)
        throw UserError(fmt::format("flashjit_run_paged: num_splits = {} on "
                                    "a CPU kernel, which does not split the "
                                    "keys (give 0 or 1)",
                                    num_splits));
      PageList pages = toPageList(table, kc.shape[0], kc.shape[2]);
      checkPagedOutputs(qr, kc, vc, orf, lse ? &lr : nullptr,
                        pageTableMemory(*table));
      runtime::cpuPagedDecode(*kern.cpu, qr, kc, vc, pages, orf,
                              lse ? &lr : nullptr, a);
      return;
    }
    runGpuPaged(kern, qr, kc, vc, table, orf, lse ? &lr : nullptr, a,
                num_splits, static_cast<CUstream>(stream));
  });
}

} // extern "C"
