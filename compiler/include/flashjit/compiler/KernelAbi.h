//===- KernelAbi.h - Argument order of generated CPU kernels -----*- C++
//-*-===//
//
// The ABI moved to the runtime, which calls the kernels:
// flashjit/runtime/KernelAbi.h.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_KERNELABI_H
#define FLASHJIT_COMPILER_KERNELABI_H

#include "flashjit/runtime/KernelAbi.h"

#endif // FLASHJIT_COMPILER_KERNELABI_H
