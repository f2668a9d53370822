//===- CApiSpec.cpp - The C API's error slot and spec-text entry points ---===//
//
// What the C API does with spec text alone (parse, validate, canonicalise)
// needs only the frontend: this file builds into both C libraries and into
// the fuzz targets (tests/fuzz), which link no compiler and no runtime.
//
//===----------------------------------------------------------------------===//
#include "CApiSupport.h"

#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>

#include <cstring>

using namespace flashjit;

std::string &flashjit::capi::lastError() {
  thread_local std::string message;
  return message;
}

extern "C" {

const char *flashjit_last_error(void) {
  return flashjit::capi::lastError().c_str();
}

flashjit_status flashjit_spec_canonicalize(const char *spec_text, char *out,
                                           size_t out_size, size_t *needed) {
  return flashjit::capi::guarded([&] {
    if (!spec_text)
      throw UserError("flashjit_spec_canonicalize: spec_text is NULL");
    if (!out && out_size != 0)
      throw UserError(fmt::format("flashjit_spec_canonicalize: out is NULL "
                                  "with out_size = {}",
                                  out_size));
    std::string canonical = printSpec(parseSpec(spec_text));
    if (needed)
      *needed = canonical.size() + 1;
    if (!out) // measuring only
      return;
    if (out_size < canonical.size() + 1)
      throw UserError(fmt::format(
          "flashjit_spec_canonicalize: out_size = {} bytes is too small for "
          "the canonical text ({} bytes with its NUL)",
          out_size, canonical.size() + 1));
    std::memcpy(out, canonical.c_str(), canonical.size() + 1);
  });
}

} // extern "C"
