//===- CpuObject.cpp - CPU kernels as objects and shared objects ----------===//
//
// See CpuObject.h. The object is emitted with the same CPU name and feature
// string the cache key holds, so a kernel.so found under a key runs on the
// CPU the key names.
//
//===----------------------------------------------------------------------===//
#include "CpuObject.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/KernelAbi.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <fmt/format.h>

#include <cstdlib>

namespace fs = llvm::sys::fs;

namespace flashjit {

std::unique_ptr<llvm::TargetMachine> createHostTargetMachine(int optLevel) {
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    throw CompileError(fmt::format("no LLVM target for the host ({}): {}",
                                   triple.str(), error));
  const runtime::HostCpu &cpu = runtime::hostCpu();
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, cpu.name, cpu.features, llvm::TargetOptions(), llvm::Reloc::PIC_,
      std::nullopt,
      optLevel >= 2 ? llvm::CodeGenOptLevel::Default
                    : llvm::CodeGenOptLevel::Less));
  if (!tm)
    throw CompileError(fmt::format("cannot create a target machine for {} "
                                   "({})",
                                   triple.str(), cpu.name));
  return tm;
}

void addPackedEntry(llvm::Module &m, llvm::StringRef symbol) {
  llvm::Function *f = m.getFunction(symbol);
  if (!f)
    throw InternalError(
        fmt::format("the CPU module has no function '{}'", symbol.str()));
  llvm::LLVMContext &ctx = m.getContext();
  llvm::Type *ptr = llvm::PointerType::getUnqual(ctx);
  auto *type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr},
                                       /*isVarArg=*/false);
  auto *packed =
      llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage,
                             (symbol + abi::kPackedSuffix).str(), m);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", packed));
  llvm::Value *args = packed->getArg(0);
  llvm::SmallVector<llvm::Value *> values;
  for (auto [i, arg] : llvm::enumerate(f->args())) {
    llvm::Value *slot = b.CreateLoad(
        ptr, b.CreateConstGEP1_64(ptr, args, static_cast<uint64_t>(i)));
    values.push_back(b.CreateLoad(arg.getType(), slot));
  }
  llvm::Value *result = b.CreateCall(f, values);
  if (!f->getReturnType()->isVoidTy()) {
    llvm::Value *slot =
        b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, args, f->arg_size()));
    b.CreateStore(result, slot);
  }
  b.CreateRetVoid();
}

void addConfigSymbol(llvm::Module &m, llvm::StringRef symbol,
                     const KernelConfig &config) {
  llvm::Type *i64 = llvm::Type::getInt64Ty(m.getContext());
  std::vector<int64_t> words = abi::cpuConfigWords(config);
  llvm::SmallVector<llvm::Constant *> values;
  for (int64_t w : words)
    values.push_back(llvm::ConstantInt::get(i64, w, /*IsSigned=*/true));
  auto *type = llvm::ArrayType::get(i64, words.size());
  new llvm::GlobalVariable(m, type, /*isConstant=*/true,
                           llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantArray::get(type, values),
                           (symbol + abi::kConfigSuffix).str());
}

std::string emitObject(llvm::Module &m, llvm::TargetMachine &tm) {
  llvm::SmallString<0> bytes;
  llvm::raw_svector_ostream os(bytes);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr,
                             llvm::CodeGenFileType::ObjectFile))
    throw CompileError("the host target cannot emit object files");
  pm.run(m);
  return bytes.str().str();
}

bool referencesUndefinedSymbols(const std::string &object) {
  llvm::Expected<std::unique_ptr<llvm::object::ObjectFile>> obj =
      llvm::object::ObjectFile::createObjectFile(
          llvm::MemoryBufferRef(object, "kernel.o"));
  if (!obj) {
    llvm::consumeError(obj.takeError());
    return true; // let the link decide
  }
  for (const llvm::object::SymbolRef &sym : (*obj)->symbols()) {
    llvm::Expected<uint32_t> flags = sym.getFlags();
    if (!flags) {
      llvm::consumeError(flags.takeError());
      return true;
    }
    if (*flags & llvm::object::SymbolRef::SF_Undefined)
      return true;
  }
  return false;
}

std::string findCCompiler(std::string *why) {
  const char *env = std::getenv("FLASHJIT_CC");
  std::string name = env && *env ? env : "cc";
  if (llvm::sys::path::has_parent_path(name)) {
    if (fs::can_execute(name))
      return name;
  } else if (llvm::ErrorOr<std::string> p =
                 llvm::sys::findProgramByName(name)) {
    return *p;
  }
  if (why)
    *why = env && *env ? fmt::format("FLASHJIT_CC='{}' is not an executable "
                                     "program",
                                     name)
                       : "no C compiler driver `cc` on PATH (set "
                         "FLASHJIT_CC)";
  return {};
}

std::string linkSharedObject(const std::string &cc, const std::string &object,
                             bool libm) {
  llvm::SmallString<256> dir;
  if (std::error_code ec = fs::createUniqueDirectory("flashjit-link", dir))
    throw CompileError(fmt::format("cannot create a temporary directory to "
                                   "link a CPU kernel: {}",
                                   ec.message()));
  auto cleanup = [&] { fs::remove_directories(dir); };
  std::string obj = (dir + "/kernel.o").str(), so = (dir + "/kernel.so").str(),
              log = (dir + "/link.log").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(obj, ec);
    if (!ec) {
      os << object;
      os.close();
      ec = os.error();
      os.clear_error();
    }
    if (ec) {
      cleanup();
      throw CompileError(fmt::format("cannot write {}: {}", obj, ec.message()));
    }
  }
  std::vector<llvm::StringRef> args = {cc, "-shared", "-o",
                                       so, obj,       "-Wl,-z,defs"};
  if (libm)
    args.push_back("-lm");
  std::optional<llvm::StringRef> redirects[] = {
      std::nullopt, llvm::StringRef(log), llvm::StringRef(log)};
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(cc, args, std::nullopt, redirects,
                                     /*SecondsToWait=*/120, 0, &error);
  auto read = [](const std::string &p) {
    auto buf = llvm::MemoryBuffer::getFile(p, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    return buf ? (*buf)->getBuffer().str() : std::string();
  };
  std::string bytes = rc == 0 ? read(so) : std::string();
  std::string output = read(log);
  cleanup();
  if (rc != 0 || bytes.empty())
    throw CompileError(fmt::format("linking the CPU kernel with '{} -shared' "
                                   "failed (exit {}{}{}):\n{}",
                                   cc, rc, error.empty() ? "" : ": ", error,
                                   output));
  return bytes;
}

} // namespace flashjit
