//===- Ptxas.h - Assembling PTX with ptxas and reading -v -------*- C++ -*-===//
//
// CI has no GPU, so every kernel is assembled with the toolkit's `ptxas -v`
// and its resource report checked: no spills, no local memory, registers
// and shared memory within the target's limits.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_PTXAS_H
#define FLASHJIT_RUNTIME_PTXAS_H

#include "flashjit/runtime/JitLink.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashjit::runtime {

/// ptxas's resource report for one kernel or device function.
struct PtxasFunctionReport {
  std::string name;
  int registers = 0;
  /// Bytes of stack frame, spill stores and spill loads per thread.
  int stackFrameBytes = 0;
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  /// Static shared memory (smem) in bytes.
  int sharedBytes = 0;
  /// Barriers used.
  int barriers = 0;
  /// True if the report has no spills and no stack frame.
  bool clean() const {
    return stackFrameBytes == 0 && spillStoreBytes == 0 && spillLoadBytes == 0;
  }
};

/// The whole report of one ptxas run.
struct PtxasReport {
  std::vector<PtxasFunctionReport> functions;
  /// ptxas's full output.
  std::string log;
  /// The entry for \p name, or nullptr.
  const PtxasFunctionReport *find(std::string_view name) const;
};

/// Parses the text `ptxas -v` prints ("Compiling entry function 'f'",
/// "Function properties for f", "N bytes stack frame, ...", "Used N
/// registers, ..."). Functions appear in the order ptxas reports them.
PtxasReport parsePtxasReport(std::string_view log);

/// True if \p ptx defines the kernel entry \p name (`.entry name(`).
bool ptxDefinesEntry(std::string_view ptx, std::string_view name);

/// What a PTX `.entry` declares about how it may be launched.
struct PtxEntryDecl {
  /// The parameter types in order, as PTX spells them without names:
  /// ".u64 .ptr" (a global pointer), ".u64", ".u32", ".f32", ".b8[128]" (a
  /// byte array, e.g. a by-value CUtensorMap; its .align is dropped), ...
  std::vector<std::string> params;
  /// `.maxntid` x (0: none), `.reqntid` x (0: none), `.minnctapersm` (0:
  /// none).
  int maxntid = 0;
  int reqntid = 0;
  int minnctapersm = 0;
};

/// The declaration of entry \p name in \p ptx (parameters and performance
/// directives up to its body), or nullopt if \p ptx does not define it or
/// the declaration does not parse.
std::optional<PtxEntryDecl> parsePtxEntry(std::string_view ptx,
                                          std::string_view name);

/// The ptxas executable: $FLASHJIT_PTXAS if set, else the toolkit's ptxas
/// found at build time.
std::string ptxasPath();

/// Runs `ptxas -v -arch=<arch> -O3` on \p ptx (written to a temporary file)
/// and parses the report. Throws DriverError with ptxas's output if it fails
/// (or cannot be run).
PtxasReport runPtxas(std::string_view ptx, std::string_view arch);

/// True if ptxasPath() names an executable file.
bool ptxasAvailable();

/// Assembles \p ptx whole-program (no -c) with `ptxas -v -arch=<arch>
/// -O<optLevel>`; infoLog is ptxas's -v output. Throws DriverError with
/// ptxas's output if it fails or cannot be run.
CubinResult ptxasToCubin(std::string_view ptx, std::string_view arch,
                         int optLevel = 3);

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_PTXAS_H
