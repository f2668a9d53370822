//===- JitLink.h - PTX to cubin with nvJitLink ------------------*- C++ -*-===//
//
// nvJitLink is the toolkit's in-process assembler/linker (no GPU or driver
// needed), so cubins can be produced, inspected and cached on any machine.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_JITLINK_H
#define FLASHJIT_RUNTIME_JITLINK_H

#include <string>
#include <string_view>
#include <vector>

namespace flashjit::runtime {

/// A cubin and the assembler's info log.
struct CubinResult {
  std::vector<char> cubin;
  /// nvJitLink's info log (with -verbose: registers, spills, shared memory).
  std::string infoLog;
};

/// Assembles \p ptx for \p arch ("sm_80", "sm_90a") with nvJitLink at
/// -O\p optLevel; \p extraOptions are passed through (e.g. "-verbose").
/// Throws DriverError with the result name and nvJitLink's error log.
CubinResult ptxToCubin(std::string_view ptx, std::string_view arch,
                       int optLevel = 3,
                       const std::vector<std::string> &extraOptions = {});

/// nvJitLink's version as major * 1000 + minor * 10 (e.g. 13000).
int nvJitLinkVersion();

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_JITLINK_H
