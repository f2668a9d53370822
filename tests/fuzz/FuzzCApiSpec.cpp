//===- FuzzCApiSpec.cpp - Fuzz target: the C API on spec text -------------===//
//
// The input, any bytes up to the first NUL, is given to
// flashjit_spec_canonicalize (parse, validate, canonicalise: what
// flashjit_compile and flashjit_load do with spec text before anything is
// compiled or loaded). Each call returns FLASHJIT_OK or FLASHJIT_USER_ERROR
// with a bounded message; the size query agrees with the text written; a
// buffer one byte short is refused and left untouched; the canonical text is
// a fixed point.
//
//===----------------------------------------------------------------------===//
#include "FuzzSupport.h"

#include "flashjit-c/flashjit.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using flashjit::fuzz::checkMessage;
using flashjit::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  text.resize(std::strlen(text.c_str())); // C strings end at the first NUL
  size_t needed = 0;
  flashjit_status st =
      flashjit_spec_canonicalize(text.c_str(), nullptr, 0, &needed);
  if (st == FLASHJIT_USER_ERROR) {
    checkMessage(flashjit_last_error());
    return 0;
  }
  if (st != FLASHJIT_OK)
    fail("flashjit_spec_canonicalize: neither OK nor USER_ERROR",
         flashjit_last_error());
  if (needed < 2)
    fail("a canonical text of no characters");
  std::vector<char> out(needed, 'x');
  if (flashjit_spec_canonicalize(text.c_str(), out.data(), needed - 1,
                                 nullptr) != FLASHJIT_USER_ERROR ||
      out[0] != 'x')
    fail("a buffer one byte short was accepted or written to", text);
  checkMessage(flashjit_last_error());
  size_t needed2 = 0;
  if (flashjit_spec_canonicalize(text.c_str(), out.data(), needed, &needed2) !=
          FLASHJIT_OK ||
      needed2 != needed || std::strlen(out.data()) + 1 != needed)
    fail("the measured and the written canonical text disagree", text);
  std::string canonical = out.data();
  std::vector<char> again(needed + 1);
  if (flashjit_spec_canonicalize(canonical.c_str(), again.data(), again.size(),
                                 nullptr) != FLASHJIT_OK ||
      canonical != again.data())
    fail("the canonical text is not a fixed point", canonical);
  return 0;
}
