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

#ifdef FLASHJIT_C_WITH_COMPILER
#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCache.h"
#endif
#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuAttentionKernel.h"
#include "flashjit/runtime/Device.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace flashjit;

struct flashjit_kernel {
  AttentionSpec spec;
  std::shared_ptr<const runtime::CpuAttentionKernel> cpu;
  std::unique_ptr<runtime::GpuAttentionKernel> gpu;
  std::string ptx;
};

namespace {
thread_local std::string lastError;

/// Runs \p f, mapping flashjit's exceptions to status codes.
template <class F> flashjit_status guarded(F &&f) {
  try {
    f();
    return FLASHJIT_OK;
  } catch (const UserError &e) {
    lastError = e.what();
    return FLASHJIT_USER_ERROR;
  } catch (const CompileError &e) {
    lastError = e.what();
    return FLASHJIT_COMPILE_ERROR;
  } catch (const DriverError &e) {
    lastError = e.what();
    return FLASHJIT_DRIVER_ERROR;
  } catch (const std::exception &e) {
    lastError = e.what();
    return FLASHJIT_INTERNAL_ERROR;
  } catch (...) {
    lastError = "unknown exception";
    return FLASHJIT_INTERNAL_ERROR;
  }
}

TensorRef toRef(const flashjit_tensor *t, const char *name) {
  if (!t)
    throw UserError(fmt::format("{} is NULL", name));
  if (t->dtype < FLASHJIT_FP16 || t->dtype > FLASHJIT_FP32)
    throw UserError(fmt::format("{}.dtype = {} is not a flashjit_dtype", name,
                                static_cast<int>(t->dtype)));
  if (t->rank != 3 && t->rank != 4)
    throw UserError(
        fmt::format("{}.rank = {}, expected 3 or 4", name, t->rank));
  TensorRef r;
  r.data = t->data;
  r.dtype = t->dtype == FLASHJIT_FP16   ? DType::F16
            : t->dtype == FLASHJIT_BF16 ? DType::BF16
                                        : DType::F32;
  r.rank = t->rank;
  for (int i = 0; i < 4; ++i) {
    r.shape[i] = i < t->rank ? t->shape[i] : 1;
    r.strides[i] = i < t->rank ? t->strides[i] : 1;
  }
  return r;
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
} // namespace

extern "C" {

const char *flashjit_last_error(void) { return lastError.c_str(); }

flashjit_status flashjit_compile(const char *spec_text, const char *target,
                                 flashjit_kernel **out) {
  return guarded([&] {
    if (!spec_text || !target || !out)
      throw UserError("flashjit_compile: spec_text, target and out must not "
                      "be NULL");
#ifndef FLASHJIT_C_WITH_COMPILER
    throw UserError("flashjit_compile: this is flashjit_c_runtime, built "
                    "without the compiler; load precompiled kernels with "
                    "flashjit_load, or link flashjit_c");
#else
    auto k = std::make_unique<flashjit_kernel>();
    k->spec = parseSpec(spec_text);
    std::string t = target;
    // Both targets go through the kernel cache (FLASHJIT_CACHE_DIR, ...).
    if (t == "cpu") {
      k->cpu = loadOrCompileCpu(k->spec); // a runtime::CpuAttentionKernel
    } else if (t == "sm_80" || t == "sm_90a") {
      GpuCompileOptions o;
      o.arch = t;
      runtime::KernelArtifacts a = loadOrCompileGpuArtifacts(k->spec, o);
      k->ptx = *a.file(runtime::kPtxFile);
      const std::string *cubin = a.file(runtime::kCubinFile);
      // Loading needs a GPU; without one the kernel still carries its PTX.
      if (runtime::Device::available())
        k->gpu = std::make_unique<runtime::GpuAttentionKernel>(
            k->spec, runtime::gpuKernelInfo(a), k->ptx, runtime::Device::get(0),
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
    runtime::Bundle bundle = runtime::Bundle::open(bundle_dir);
    runtime::CacheKey request;
    request.specText = canonical;
    request.arch = t;
    if (t == "cpu") { // what `flashjit bundle --target cpu` builds
      request.blockM = request.blockN = runtime::kDefaultCpuBlock;
      request.optLevel = runtime::kDefaultCpuOptLevel;
    }
    std::optional<runtime::KernelArtifacts> a = bundle.find(request);
    if (!a) {
      // Bundled with explicit tile options (flashjit bundle --block-n ...,
      // --mma ...):
      // the one kernel of this spec and target, whatever its tiles.
      std::vector<const runtime::Bundle::Item *> same;
      for (const runtime::Bundle::Item &item : bundle.items())
        if (item.specText == canonical && item.arch == t)
          same.push_back(&item);
      if (same.size() > 1)
        throw UserError(fmt::format(
            "flashjit_load: bundle '{}' has {} {} kernels for spec '{}' with "
            "different tile options or --mma; keep one per spec and target",
            bundle_dir, same.size(), t, canonical));
      if (same.size() == 1) {
        request.blockN = same[0]->blockN;
        request.numWarps = same[0]->numWarps;
        request.blockM = same[0]->blockM;
        request.optLevel = same[0]->optLevel;
        request.countTiles = same[0]->countTiles;
        request.mma = same[0]->mma;
        a = bundle.find(request);
      }
    }
    if (!a)
      throw UserError(fmt::format("flashjit_load: bundle '{}' has no {} "
                                  "kernel for spec '{}' ({} kernels in it)",
                                  bundle_dir, t, canonical,
                                  bundle.items().size()));
    if (t == "cpu") {
      k->cpu = runtime::loadCpuKernel(*a);
      *out = k.release();
      return;
    }
    const std::string *ptx = a->file(runtime::kPtxFile);
    if (!ptx)
      throw UserError(fmt::format("flashjit_load: the bundled {} kernel for "
                                  "'{}' in '{}' has no {}",
                                  t, canonical, bundle_dir, runtime::kPtxFile));
    k->ptx = *ptx;
    if (runtime::Device::available())
      k->gpu = std::make_unique<runtime::GpuAttentionKernel>(
          k->spec, runtime::gpuKernelInfo(*a), k->ptx, runtime::Device::get(0));
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
    if (kernel->gpu) {
      kernel->gpu->run(qr, kr, vr, orf, lse ? &lr : nullptr, a,
                       static_cast<CUstream>(stream));
    } else {
      std::string why;
      runtime::Device::available(&why);
      throw DriverError("no GPU to run this kernel on (its tensors were not "
                        "checked either): " +
                        why);
    }
  });
}

flashjit_status
flashjit_run_backward(const flashjit_kernel *kernel, const flashjit_tensor *q,
                      const flashjit_tensor *k, const flashjit_tensor *v,
                      const flashjit_tensor *o, const flashjit_tensor *lse,
                      const flashjit_tensor *d_o, const flashjit_tensor *dq,
                      const flashjit_tensor *dk, const flashjit_tensor *dv,
                      const flashjit_arg *args, int num_args,
                      const flashjit_grad *grads, int num_grads,
                      void * /*stream*/) {
  return guarded([&] {
    if (!kernel)
      throw UserError("flashjit_run_backward: kernel is NULL");
    if (!kernel->cpu)
      throw UserError("flashjit_run_backward: the GPU backward is not built "
                      "yet (issue 15); compile the kernel for target 'cpu'");
    TensorRef qr = toRef(q, "q"), kr = toRef(k, "k"), vr = toRef(v, "v"),
              orf = toRef(o, "o"), lr = toRef(lse, "lse"),
              dor = toRef(d_o, "d_o"), dqr = toRef(dq, "dq"),
              dkr = toRef(dk, "dk"), dvr = toRef(dv, "dv");
    Arguments a = toArguments(args, num_args);
    if (num_grads < 0 || (num_grads > 0 && !grads))
      throw UserError(fmt::format("num_grads = {} with grads = {}", num_grads,
                                  static_cast<const void *>(grads)));
#ifndef FLASHJIT_C_WITH_COMPILER
    (void)qr, (void)kr, (void)vr, (void)orf, (void)lr, (void)dor, (void)dqr,
        (void)dkr, (void)dvr, (void)a;
    throw UserError("flashjit_run_backward: this is flashjit_c_runtime, built "
                    "without the compiler, and backward kernels are not "
                    "bundled yet; link flashjit_c");
#else
    CompileOptions options;
    options.blockM = kernel->cpu->info().blockM;
    options.blockN = kernel->cpu->info().blockN;
    std::shared_ptr<const CpuBackward> bwd =
        loadOrCompileCpuBackward(kernel->spec, options);
    DataGradients g = bwd->run(qr, kr, vr, orf, lr, dor, dqr, dkr, dvr, a);
    for (int i = 0; i < num_grads; ++i) {
      const flashjit_grad &e = grads[i];
      if (!e.name)
        throw UserError(fmt::format("grads[{}].name is NULL", i));
      std::string name = e.name;
      if (auto it = g.dBuffers.find(name); it != g.dBuffers.end()) {
        if (e.size != static_cast<int64_t>(it->second.size()))
          throw UserError(fmt::format("grads[{}] '{}': size = {}, expected {} "
                                      "(the bound buffer's length)",
                                      i, excerpt(name), e.size,
                                      it->second.size()));
        if (e.size > 0 && !e.data)
          throw UserError(
              fmt::format("grads[{}] '{}': data is NULL", i, excerpt(name)));
        std::copy(it->second.begin(), it->second.end(), e.data);
      } else if (auto p = g.dParams.find(name); p != g.dParams.end()) {
        if (e.size != 1 || !e.data)
          throw UserError(fmt::format("grads[{}] '{}': a parameter's gradient "
                                      "needs size = 1 and data, got size = {}",
                                      i, excerpt(name), e.size));
        e.data[0] = p->second;
      } else {
        throw UserError(fmt::format(
            "grads[{}] '{}' is not an f32 buffer or f32 parameter that the "
            "score modifier reads, so it has no gradient",
            i, excerpt(name)));
      }
    }
#endif
  });
}

const char *flashjit_kernel_ptx(const flashjit_kernel *kernel) {
  return kernel && !kernel->ptx.empty() ? kernel->ptx.c_str() : nullptr;
}

void flashjit_kernel_destroy(flashjit_kernel *kernel) { delete kernel; }

} // extern "C"
