//===- JitLink.h - PTX to cubin with nvJitLink ------------------*- C++ -*-===//
//
// nvJitLink is the toolkit's in-process assembler/linker (no GPU or driver
// needed), so cubins can be produced, inspected and cached on any machine.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_JITLINK_H
#define FLASHJIT_RUNTIME_JITLINK_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashjit::runtime {

/// The program that turned PTX into a cubin.
enum class Assembler : uint8_t {
  /// nvJitLink, in process. It assembles every input as a separately
  /// compiled unit (ptxas -c), in which ptxas 13.0 ignores `setmaxnreg`
  /// (C7504) and serialises every `wgmma.mma_async` (C7509).
  NvJitLink,
  /// The toolkit's ptxas executable (ptxasPath()), whole-program: the
  /// mode the wgmma and warp-specialised kernels are written for.
  Ptxas,
  /// No cubin here: the driver JITs the PTX when it is loaded
  /// (Module::fromPtx), whole-program like ptxas. On the H200 (session 11,
  /// bench/RESULTS.md) both run the wgmma kernels 1.15-1.30x faster than
  /// nvJitLink's cubins.
  DriverJit,
};

/// "nvjitlink" / "ptxas" / "driver".
std::string_view toString(Assembler a);

/// A cubin and the assembler's info log.
struct CubinResult {
  std::vector<char> cubin;
  /// The assembler's info log (nvJitLink with -verbose, or ptxas -v:
  /// registers, spills, shared memory).
  std::string infoLog;
  /// Which assembler made it.
  Assembler assembler = Assembler::NvJitLink;
};

/// Assembles \p ptx for \p arch ("sm_80", "sm_90a") with nvJitLink at
/// -O\p optLevel; \p extraOptions are passed through (e.g. "-verbose").
/// Throws DriverError with the result name and nvJitLink's error log.
CubinResult ptxToCubin(std::string_view ptx, std::string_view arch,
                       int optLevel = 3,
                       const std::vector<std::string> &extraOptions = {});

/// How \p ptx should become code, as FLASHJIT_ASSEMBLER says: `nvjitlink`,
/// `ptxas`, `driver`, or `auto` (unset or empty: the default): ptxas when
/// its executable exists (ptxasAvailable()); else PTX using
/// `wgmma.mma_async` or `setmaxnreg` (which nvJitLink degrades) goes to the
/// driver JIT and other PTX to nvJitLink. Throws UserError for another value of
/// the variable, or for `ptxas` when no ptxas executable exists.
Assembler chooseAssembler(std::string_view ptx);

/// Assembles \p ptx for \p arch at -O\p optLevel into a cubin here: with
/// ptxas where chooseAssembler says ptxas, or says driver but a ptxas
/// executable exists, else with nvJitLink (always with a -v / -verbose
/// resource report in infoLog); \p nvJitLinkOptions are added when
/// nvJitLink assembles. Throws DriverError with the assembler's log,
/// UserError as chooseAssembler.
CubinResult
assembleCubin(std::string_view ptx, std::string_view arch, int optLevel = 3,
              const std::vector<std::string> &nvJitLinkOptions = {});

/// nvJitLink's version as major * 1000 + minor * 10 (e.g. 13000).
int nvJitLinkVersion();

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_JITLINK_H
