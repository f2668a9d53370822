//===- CpuObject.h - CPU kernels as objects and shared objects -*- C++ -*-===//
//
// The steps from an optimised LLVM module to a kernel.so the runtime can
// dlopen: the host target machine (PIC, the host CPU and features that the
// cache key names), the packed entry point, object emission and the link
// with the system C compiler driver. LLVM only, no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_LIB_COMPILER_CPUOBJECT_H
#define FLASHJIT_LIB_COMPILER_CPUOBJECT_H

#include "flashjit/runtime/KernelAbi.h"

#include "llvm/ADT/StringRef.h"

#include <memory>
#include <string>

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace flashjit {

/// A target machine for the host CPU and features (runtime::hostCpu()),
/// position-independent, at \p optLevel (0..3). Throws CompileError.
std::unique_ptr<llvm::TargetMachine> createHostTargetMachine(int optLevel);

/// Adds `<symbol>_packed(void **args)` to \p m: loads each argument of
/// \p symbol from args[i] and calls it (abi::kPackedSuffix).
void addPackedEntry(llvm::Module &m, llvm::StringRef symbol);

/// Adds `<symbol>_config` (abi::kConfigSuffix), the i64 words of
/// abi::cpuConfigWords(\p config), which loadCpuKernel compares with the
/// manifest before running the kernel.
void addConfigSymbol(llvm::Module &m, llvm::StringRef symbol,
                     const KernelConfig &config);

/// The relocatable object of \p m for \p tm. Throws CompileError.
std::string emitObject(llvm::Module &m, llvm::TargetMachine &tm);

/// Whether \p object references symbols it does not define: libm's
/// expf, tanhf, ... (LLVM lowers math intrinsics to these calls during code
/// generation), resolved at link time with -lm.
bool referencesUndefinedSymbols(const std::string &object);

/// The C compiler driver that links kernels ($FLASHJIT_CC, else `cc` on
/// PATH), or empty with what was looked for in \p why.
std::string findCCompiler(std::string *why = nullptr);

/// Links \p object into a shared object with \p cc (`cc -shared
/// -Wl,-z,defs`, plus -lm when \p libm) and returns its bytes. Throws
/// CompileError with the driver's output if the link fails.
std::string linkSharedObject(const std::string &cc, const std::string &object,
                             bool libm);

} // namespace flashjit

#endif // FLASHJIT_LIB_COMPILER_CPUOBJECT_H
