//===- Hash.h - Structural hashes of specs -----------------------*- C++
//-*-===//
//
// The hash of a spec is the SHA-256 (llvm::SHA256) of its canonical text, so
// structurally equal specs hash equal and different ones differ.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_HASH_H
#define FLASHJIT_FRONTEND_HASH_H

#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/Variant.h"

#include <string>
#include <string_view>

namespace flashjit {

/// Lower-case hex SHA-256 of arbitrary bytes (64 characters).
std::string sha256Hex(std::string_view bytes);
/// sha256Hex(printExpr(e)).
std::string hashExpr(const Expr &e);
/// sha256Hex(printSpec(spec)).
std::string hashSpec(const AttentionSpec &spec);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_HASH_H
