//===- CompileSupport.cpp - Helpers shared by the compile drivers ---------===//
#include "CompileSupport.h"

#include "flashjit/frontend/Error.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

using namespace mlir;

namespace flashjit {

DiagnosticCapture::DiagnosticCapture(MLIRContext *ctx)
    : handler_(ctx, [this](Diagnostic &d) {
        llvm::raw_string_ostream os(text_);
        os << d.getLocation() << ": " << d << "\n";
        return success();
      }) {}

std::string printOp(Operation *op, bool withLocations) {
  std::string s;
  llvm::raw_string_ostream os(s);
  OpPrintingFlags flags;
  if (withLocations) // inline, so each op shows the user's line
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false)
        .useLocalScope();
  op->print(os, flags);
  return s;
}

void runPipeline(MLIRContext &ctx, ModuleOp module, const char *stage,
                 const DiagnosticCapture &diag,
                 llvm::function_ref<void(OpPassManager &)> build) {
  PassManager pm(&ctx);
  build(pm);
  if (failed(pm.run(module)))
    throw CompileError(
        fmt::format("stage '{}' failed:\n{}", stage, diag.text()));
}

void dumpFiles(const std::string &dir, const std::string &name,
               const std::vector<std::pair<std::string, std::string>> &files) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    throw UserError(fmt::format("dump directory '{}': {}", dir, ec.message()));
  for (const auto &[suffix, text] : files) {
    std::string path = dir + "/" + name + suffix;
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      throw UserError(fmt::format("cannot write '{}': {}", path, ec.message()));
    os << text;
  }
}

} // namespace flashjit
