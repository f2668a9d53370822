//===- flashjit.h - flashjit's C++ API in one include -----------*- C++ -*-===//
//
// The header a C++ application includes; link the CMake target
// flashjit::flashjit. It brings:
// - the attention DSL: Variant, the expression builtins, the library of
//   standard masks and score modifiers (Library.h), AttentionSpec, its
//   canonical text and parser, the float64 reference (forward and
//   backward) and the symbolic derivative of score modifiers;
// - tensors (TensorRef), run-time arguments and block masks;
// - the entry point that reads the kernel cache before compiling, for
//   both targets: loadOrCompile(spec, JitTarget::CPU or GPU, options,
//   &report) (a JitKernel with its KernelConfig; Jit.h), and its halves
//   loadOrCompileCpu (a CpuKernel) and loadOrCompileGpu (a
//   runtime::GpuAttentionKernel), all reporting through one LoadReport;
//   compileCpu and compileGpu compile without the cache;
// - the runtime: devices, device memory, launches and the disk cache.
//
// Other languages use the C API, flashjit-c/flashjit.h.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FLASHJIT_H
#define FLASHJIT_FLASHJIT_H

#ifndef __cplusplus
#error "flashjit/flashjit.h is the C++ API (C++20); C programs include flashjit-c/flashjit.h"
#endif

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Paged.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Types.h"
#include "flashjit/frontend/Variant.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCache.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/compiler/Jit.h"

#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuAttentionKernel.h"
#include "flashjit/runtime/CpuDecode.h"
#include "flashjit/runtime/DecodeKernel.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/NcclTransport.h"
#include "flashjit/runtime/PagedOps.h"
#include "flashjit/runtime/Ring.h"
#include "flashjit/runtime/RingGpu.h"
#include "flashjit/runtime/SinkGradient.h"

#endif // FLASHJIT_FLASHJIT_H
