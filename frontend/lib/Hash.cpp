//===- Hash.cpp - Structural hashes of specs ------------------------------===//
#include "flashjit/frontend/Hash.h"

#include "flashjit/frontend/Printer.h"

#include <llvm/ADT/StringExtras.h>
#include <llvm/Support/SHA256.h>

namespace flashjit {

std::string sha256Hex(std::string_view bytes) {
  auto digest = llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
  return llvm::toHex(digest, /*LowerCase=*/true);
}

std::string hashExpr(const Expr &e) { return sha256Hex(printExpr(e)); }

std::string hashSpec(const AttentionSpec &spec) {
  return sha256Hex(printSpec(spec));
}

} // namespace flashjit
