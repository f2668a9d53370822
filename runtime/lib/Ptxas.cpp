//===- Ptxas.cpp - Assembling PTX with ptxas and reading -v ---------------===//
#include "flashjit/runtime/Ptxas.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/Program.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

namespace flashjit::runtime {

const PtxasFunctionReport *PtxasReport::find(std::string_view name) const {
  for (const PtxasFunctionReport &f : functions)
    if (f.name == name)
      return &f;
  return nullptr;
}

namespace {
/// The integer just before \p suffix in \p line ("400 bytes stack frame" ->
/// 400 for suffix " bytes stack frame"); 0 if absent.
int numberBefore(llvm::StringRef line, llvm::StringRef suffix) {
  size_t at = line.find(suffix);
  if (at == llvm::StringRef::npos)
    return 0;
  llvm::StringRef head = line.substr(0, at).rtrim();
  size_t start = head.find_last_not_of("0123456789");
  start = start == llvm::StringRef::npos ? 0 : start + 1;
  int v = 0;
  if (head.substr(start).getAsInteger(10, v))
    return 0;
  return v;
}

/// The name between the first pair of single quotes, or after "for ".
std::string quotedOrTail(llvm::StringRef line, llvm::StringRef marker) {
  llvm::StringRef rest = line.substr(line.find(marker) + marker.size());
  rest = rest.trim();
  if (rest.starts_with("'")) {
    rest = rest.drop_front();
    return rest.substr(0, rest.find('\'')).str();
  }
  return rest.str();
}
} // namespace

bool ptxDefinesEntry(std::string_view ptx, std::string_view name) {
  std::string want = ".entry " + std::string(name) + "(";
  for (size_t at = ptx.find(want); at != std::string_view::npos;
       at = ptx.find(want, at + 1)) {
    // Only linkage directives may precede it on its line.
    size_t start = ptx.rfind('\n', at);
    start = start == std::string_view::npos ? 0 : start + 1;
    llvm::SmallVector<llvm::StringRef, 4> words;
    llvm::StringRef(ptx.data() + start, at - start)
        .split(words, ' ', -1, /*KeepEmpty=*/false);
    if (llvm::all_of(words, [](llvm::StringRef w) {
          w = w.trim();
          return w.empty() || w == ".visible" || w == ".extern" || w == ".weak";
        }))
      return true;
  }
  return false;
}

std::optional<PtxEntryDecl> parsePtxEntry(std::string_view ptx,
                                          std::string_view name) {
  if (!ptxDefinesEntry(ptx, name))
    return std::nullopt;
  std::string want = ".entry " + std::string(name) + "(";
  // The defining occurrence: ptxDefinesEntry accepted one; the first whose
  // declaration has a body is it (a .extern declaration has none).
  for (size_t at = ptx.find(want); at != std::string_view::npos;
       at = ptx.find(want, at + 1)) {
    llvm::StringRef rest(ptx.data() + at + want.size(),
                         ptx.size() - at - want.size());
    size_t close = rest.find(')');
    size_t body = rest.find('{');
    if (close == llvm::StringRef::npos || body == llvm::StringRef::npos ||
        body < close || rest.substr(close, body - close).contains(';'))
      continue;
    PtxEntryDecl decl;
    llvm::SmallVector<llvm::StringRef, 64> params;
    rest.substr(0, close).split(params, ',', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef p : params) {
      p = p.trim();
      if (p.empty())
        continue;
      if (!p.consume_front(".param"))
        return std::nullopt;
      // ".param .u64 .ptr .global .align 1 name": keep the type words.
      llvm::SmallVector<llvm::StringRef, 8> words;
      p.split(words, ' ', -1, /*KeepEmpty=*/false);
      std::string type;
      for (size_t i = 0; i + 1 < words.size(); ++i) {
        llvm::StringRef w = words[i].trim();
        if (w == ".global" || w == ".align" ||
            (i > 0 && words[i - 1].trim() == ".align"))
          continue;
        type += (type.empty() ? "" : " ") + w.str();
      }
      // A byte array (a by-value CUtensorMap): "name[128]" keeps "[128]".
      if (!words.empty())
        if (size_t open = words.back().find('['); open != llvm::StringRef::npos)
          type += words.back().substr(open).trim().str();
      decl.params.push_back(type);
    }
    llvm::StringRef directives = rest.substr(close + 1, body - close - 1);
    auto first = [&](llvm::StringRef directive) {
      size_t d = directives.find(directive);
      if (d == llvm::StringRef::npos)
        return 0;
      llvm::StringRef v = directives.substr(d + directive.size()).ltrim();
      unsigned n = 0;
      v.consumeInteger(10, n);
      return int(n);
    };
    decl.maxntid = first(".maxntid");
    decl.reqntid = first(".reqntid");
    decl.minnctapersm = first(".minnctapersm");
    return decl;
  }
  return std::nullopt;
}

PtxasReport parsePtxasReport(std::string_view log) {
  PtxasReport report;
  report.log = std::string(log);
  llvm::SmallVector<llvm::StringRef, 64> lines;
  llvm::StringRef(log).split(lines, '\n');
  auto entry = [&](const std::string &name) -> PtxasFunctionReport & {
    for (PtxasFunctionReport &f : report.functions)
      if (f.name == name)
        return f;
    report.functions.push_back({});
    report.functions.back().name = name;
    return report.functions.back();
  };
  std::string current;
  for (llvm::StringRef line : lines) {
    if (line.contains("Compiling entry function")) {
      current = quotedOrTail(line, "Compiling entry function");
      entry(current);
    } else if (line.contains("Function properties for")) {
      current = quotedOrTail(line, "Function properties for");
      entry(current);
    } else if (line.contains("bytes stack frame") && !current.empty()) {
      PtxasFunctionReport &f = entry(current);
      f.stackFrameBytes = numberBefore(line, " bytes stack frame");
      f.spillStoreBytes = numberBefore(line, " bytes spill stores");
      f.spillLoadBytes = numberBefore(line, " bytes spill loads");
    } else if (line.contains("Used ") && line.contains(" registers") &&
               !current.empty()) {
      PtxasFunctionReport &f = entry(current);
      f.registers = numberBefore(line, " registers");
      f.barriers = numberBefore(line, " barriers");
      f.sharedBytes = numberBefore(line, " bytes smem");
    }
  }
  return report;
}

std::string ptxasPath() {
  const char *env = std::getenv("FLASHJIT_PTXAS");
  if (env && *env)
    return env;
  return FLASHJIT_PTXAS_PATH;
}

namespace {
/// What one ptxas run gave: its -v output and, when kept, the cubin.
struct PtxasRun {
  std::string log;
  std::vector<char> cubin;
};

/// Runs `ptxas -v -arch=<arch> -O<optLevel> -o <tmp> <tmp.ptx>`.
PtxasRun runPtxasTool(std::string_view ptx, std::string_view arch, int optLevel,
                      bool keepCubin) {
  llvm::SmallString<128> in, out, log;
  if (llvm::sys::fs::createTemporaryFile("flashjit", "ptx", in) ||
      llvm::sys::fs::createTemporaryFile("flashjit", "cubin", out) ||
      llvm::sys::fs::createTemporaryFile("flashjit-ptxas", "log", log))
    throw DriverError("ptxas: cannot create temporary files");
  struct Cleanup {
    llvm::SmallVectorImpl<char> *paths[3];
    ~Cleanup() {
      for (auto *p : paths)
        llvm::sys::fs::remove(llvm::Twine(*p));
    }
  } cleanup{{&in, &out, &log}};
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(in, ec);
    if (ec)
      throw DriverError(
          fmt::format("ptxas: cannot write {}: {}", in.str(), ec.message()));
    os << ptx;
  }
  std::string exe = ptxasPath();
  std::string archFlag = fmt::format("-arch={}", arch);
  std::string optFlag = fmt::format("-O{}", optLevel);
  llvm::SmallVector<llvm::StringRef, 8> args = {
      exe, "-v", archFlag, optFlag, "-o", out.str(), in.str()};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log.str(),
                                                log.str()};
  std::string err;
  int rc =
      llvm::sys::ExecuteAndWait(exe, args, std::nullopt, redirects, 0, 0, &err);
  PtxasRun run;
  if (auto buf = llvm::MemoryBuffer::getFile(log))
    run.log = (*buf)->getBuffer().str();
  if (rc != 0)
    throw DriverError(fmt::format("{} -v {} failed (exit code {}{}{})\n--- "
                                  "ptxas output ---\n{}",
                                  exe, archFlag, rc, err.empty() ? "" : ": ",
                                  err, run.log));
  if (keepCubin) {
    auto buf = llvm::MemoryBuffer::getFile(out, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    if (!buf)
      throw DriverError(fmt::format("ptxas: cannot read its output {}: {}",
                                    out.str(), buf.getError().message()));
    run.cubin.assign((*buf)->getBufferStart(), (*buf)->getBufferEnd());
  }
  return run;
}
} // namespace

PtxasReport runPtxas(std::string_view ptx, std::string_view arch) {
  return parsePtxasReport(runPtxasTool(ptx, arch, 3, false).log);
}

bool ptxasAvailable() {
  return llvm::sys::fs::can_execute(llvm::Twine(ptxasPath()));
}

CubinResult ptxasToCubin(std::string_view ptx, std::string_view arch,
                         int optLevel) {
  if (arch.substr(0, 3) != "sm_")
    throw UserError(fmt::format("arch '{}' is not of the form sm_XX", arch),
                    std::source_location());
  PtxasRun run = runPtxasTool(ptx, arch, optLevel, true);
  CubinResult out;
  out.cubin = std::move(run.cubin);
  out.infoLog = std::move(run.log);
  out.assembler = Assembler::Ptxas;
  return out;
}

std::string_view toString(Assembler a) {
  switch (a) {
  case Assembler::NvJitLink:
    return "nvjitlink";
  case Assembler::Ptxas:
    return "ptxas";
  case Assembler::DriverJit:
    return "driver";
  }
  return "unknown";
}

Assembler chooseAssembler(std::string_view ptx) {
  const char *env = std::getenv("FLASHJIT_ASSEMBLER");
  std::string_view want = env ? env : "";
  if (want == "nvjitlink")
    return Assembler::NvJitLink;
  if (want == "driver")
    return Assembler::DriverJit;
  if (want == "ptxas") {
    if (!ptxasAvailable())
      throw UserError(fmt::format("FLASHJIT_ASSEMBLER=ptxas, but {} is not an "
                                  "executable (set FLASHJIT_PTXAS to the "
                                  "toolkit's ptxas)",
                                  ptxasPath()),
                      std::source_location());
    return Assembler::Ptxas;
  }
  if (!want.empty() && want != "auto")
    throw UserError(fmt::format("FLASHJIT_ASSEMBLER = '{}': expected "
                                "nvjitlink, ptxas, driver or auto",
                                want),
                    std::source_location());
  // Whole-program ptxas wherever it exists (what CI's ptxas checks verify:
  // nvJitLink's separate compilation gave 8 bytes of stack to two masked
  // softcap backward kernels that ptxas assembles clean); without it, the
  // driver JIT for the kernels nvJitLink degrades most.
  bool degraded = ptx.find("wgmma.mma_async") != std::string_view::npos ||
                  ptx.find("setmaxnreg") != std::string_view::npos;
  if (ptxasAvailable())
    return Assembler::Ptxas;
  return degraded ? Assembler::DriverJit : Assembler::NvJitLink;
}

CubinResult assembleCubin(std::string_view ptx, std::string_view arch,
                          int optLevel,
                          const std::vector<std::string> &nvJitLinkOptions) {
  Assembler a = chooseAssembler(ptx);
  if (a == Assembler::Ptxas || (a == Assembler::DriverJit && ptxasAvailable()))
    return ptxasToCubin(ptx, arch, optLevel);
  std::vector<std::string> opts = nvJitLinkOptions;
  if (std::find(opts.begin(), opts.end(), "-verbose") == opts.end())
    opts.push_back("-verbose");
  return ptxToCubin(ptx, arch, optLevel, opts);
}

} // namespace flashjit::runtime
