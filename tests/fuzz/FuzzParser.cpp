//===- FuzzParser.cpp - Fuzz target: expression and spec parsing ----------===//
//
// The input, any bytes, is parsed both as a spec (parseSpec) and as an
// expression (parseExpr). Each either succeeds or throws UserError
// (ParseError is one) with a bounded message; anything else (another
// exception, a crash, a sanitizer report) is a finding. What parses must
// round-trip: the canonical text parses back to a structurally equal spec
// (the same text, the same hash). A boolean expression that reads only
// indices is also classified into tiles (classifyTile, the interval
// arithmetic the kernels run) on a small grid, and every tile called full or
// empty is checked point by point with the interpreter.
//
//===----------------------------------------------------------------------===//
#include "FuzzSupport.h"

#include "flashjit/frontend/Hash.h"
#include "flashjit/frontend/Interpreter.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/TileClass.h"

#include <cstdint>
#include <exception>
#include <string>

using namespace flashjit;
using flashjit::fuzz::checkMessage;
using flashjit::fuzz::fail;

namespace {

void fuzzSpec(std::string_view text) {
  AttentionSpec spec;
  try {
    spec = parseSpec(text);
  } catch (const UserError &e) {
    checkMessage(e.what());
    return;
  }
  std::string canonical = printSpec(spec);
  AttentionSpec again;
  try {
    again = parseSpec(canonical);
  } catch (const UserError &e) {
    fail("the canonical text of a parsed spec does not parse",
         canonical + "\n" + e.what());
  }
  if (!structurallyEqual(spec, again) || printSpec(again) != canonical ||
      hashSpec(again) != hashSpec(spec))
    fail("a spec does not round-trip through its canonical text", canonical);
}

/// Every tile of a 19 x 23 problem (4 x 8 tiles, edges clipped) that
/// classifyTile calls full (empty) must hold the mask at every (not at any)
/// point. Skipped for masks that read parameters or buffers (the interpreter
/// needs their values).
void checkTileClasses(const Expr &mask) {
  constexpr int64_t seqQ = 19, seqK = 23, bm = 4, bn = 8;
  for (int64_t q0 = 0; q0 < seqQ; q0 += bm)
    for (int64_t k0 = 0; k0 < seqK; k0 += bn) {
      TileBox box;
      box.q = {q0, std::min(q0 + bm, seqQ) - 1};
      box.kv = {k0, std::min(k0 + bn, seqK) - 1};
      box.seqlenQ = seqQ;
      box.seqlenK = seqK;
      TileClass c = classifyTile(mask, box);
      if (c == TileClass::Partial)
        continue;
      for (int64_t q = box.q.lo; q <= box.q.hi; ++q)
        for (int64_t k = box.kv.lo; k <= box.kv.hi; ++k) {
          EvalPoint p;
          p.qIdx = q;
          p.kvIdx = k;
          p.seqlenQ = seqQ;
          p.seqlenK = seqK;
          bool v = evaluate(mask, p, {}).asBool();
          if (v != (c == TileClass::Full))
            fail("classifyTile contradicts the interpreter",
                 printExpr(mask) + " at q=" + std::to_string(q) +
                     " kv=" + std::to_string(k) + ", tile called " +
                     std::string(toString(c)));
        }
    }
}

void fuzzExpr(std::string_view text) {
  Expr e;
  try {
    e = parseExpr(text);
  } catch (const UserError &err) {
    checkMessage(err.what());
    return;
  }
  std::string canonical = printExpr(e);
  Expr again;
  try {
    again = parseExpr(canonical);
  } catch (const UserError &err) {
    fail("the canonical text of a parsed expression does not parse",
         canonical + "\n" + err.what());
  }
  if (printExpr(again) != canonical || hashExpr(again) != hashExpr(e))
    fail("an expression does not round-trip through its canonical text",
         canonical);
  if (e.type() != ScalarType::Bool)
    return;
  try {
    // Throws UserError when the mask reads a parameter or buffer (no value
    // bound) or the score: then it is no index-only mask.
    evaluate(e, EvalPoint{}, {});
  } catch (const UserError &) {
    return;
  }
  checkTileClasses(e);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  try {
    fuzzSpec(text);
    fuzzExpr(text);
  } catch (const std::exception &e) {
    fail("an exception that is not a UserError", e.what());
  }
  return 0;
}
