//===- CompileSupport.h - Helpers shared by the compile drivers -*- C++ -*-===//
//
// Timing, diagnostics capture, pipeline running and stage dumps used by the
// CPU and GPU compile drivers. Compiler-internal (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_COMPILESUPPORT_H
#define FLASHJIT_COMPILER_COMPILESUPPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace flashjit {

/// Seconds since construction or the last lap().
class StopWatch {
public:
  double lap() {
    auto now = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(now - t0_).count();
    t0_ = now;
    return s;
  }

private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

/// Collects a context's diagnostics as text for CompileError messages.
class DiagnosticCapture {
public:
  explicit DiagnosticCapture(mlir::MLIRContext *ctx);
  const std::string &text() const { return text_; }

private:
  std::string text_;
  mlir::ScopedDiagnosticHandler handler_;
};

/// The IR of \p op as text, with locations when \p withLocations.
std::string printOp(mlir::Operation *op, bool withLocations);

/// Runs the passes \p build adds on \p module; throws CompileError naming
/// \p stage with the captured diagnostics if they fail.
void runPipeline(mlir::MLIRContext &ctx, mlir::ModuleOp module,
                 const char *stage, const DiagnosticCapture &diag,
                 llvm::function_ref<void(mlir::OpPassManager &)> build);

/// Writes <dir>/<name><suffix> for each (suffix, text); throws UserError if
/// the directory or a file cannot be written.
void dumpFiles(const std::string &dir, const std::string &name,
               const std::vector<std::pair<std::string, std::string>> &files);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_COMPILESUPPORT_H
