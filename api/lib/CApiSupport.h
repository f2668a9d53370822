//===- CApiSupport.h - Status codes and the error slot of the C API -------===//
//
// Shared by the C API's source files: every entry point runs its body
// through guarded(), which maps flashjit's exceptions to a flashjit_status and
// keeps the message in a per-thread slot (flashjit_last_error()).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_API_CAPISUPPORT_H
#define FLASHJIT_API_CAPISUPPORT_H

#include "flashjit-c/flashjit.h"

#include "flashjit/frontend/Error.h"

#include <exception>
#include <string>

namespace flashjit::capi {

/// This thread's last error message (what flashjit_last_error() returns).
std::string &lastError();

/// Runs \p f, mapping flashjit's exceptions to status codes: UserError to
/// FLASHJIT_USER_ERROR, CompileError and DriverError to theirs, anything
/// else to FLASHJIT_INTERNAL_ERROR. No exception leaves it.
template <class F> flashjit_status guarded(F &&f) {
  try {
    f();
    return FLASHJIT_OK;
  } catch (const UserError &e) {
    lastError() = e.what();
    return FLASHJIT_USER_ERROR;
  } catch (const CompileError &e) {
    lastError() = e.what();
    return FLASHJIT_COMPILE_ERROR;
  } catch (const DriverError &e) {
    lastError() = e.what();
    return FLASHJIT_DRIVER_ERROR;
  } catch (const std::exception &e) {
    lastError() = e.what();
    return FLASHJIT_INTERNAL_ERROR;
  } catch (...) {
    lastError() = "unknown exception";
    return FLASHJIT_INTERNAL_ERROR;
  }
}

} // namespace flashjit::capi

#endif // FLASHJIT_API_CAPISUPPORT_H
