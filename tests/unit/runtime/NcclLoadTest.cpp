//===- NcclLoadTest.cpp - Loading NCCL with dlopen, no GPU needed ---------===//
//
// Issue 20: libnccl is dlopen'ed like libcuda, so the runtime loads without
// it, and a missing or wrong library is a DriverError naming the path and
// the variable that points at the right one. Where libnccl is installed
// (CUDA toolkits on CI and here ship it), its version is read without a GPU.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/NcclTransport.h"

#include <catch2/catch.hpp>

#include <string>

using namespace flashjit;
using namespace flashjit::runtime;

namespace {
std::string loadError(const std::string &path) {
  try {
    Nccl::load(path);
  } catch (const DriverError &e) {
    return e.what();
  }
  return "";
}
} // namespace

TEST_CASE("a missing NCCL library is a DriverError naming the path and "
          "FLASHJIT_NCCL_LIBRARY",
          "[nccl]") {
  std::string e = loadError("/nonexistent/libnccl.so.2");
  INFO(e);
  CHECK(e.find("/nonexistent/libnccl.so.2") != std::string::npos);
  CHECK(e.find("FLASHJIT_NCCL_LIBRARY") != std::string::npos);
  // A library that is not NCCL names the first missing entry point.
  e = loadError("libm.so.6");
  INFO(e);
  CHECK(e.find("has no symbol ncclGetVersion") != std::string::npos);
}

TEST_CASE("the process's NCCL loads or says why", "[nccl]") {
  std::string why;
  if (Nccl::available(&why)) {
    const Nccl &n = Nccl::get();
    INFO("loaded " << n.path());
    CHECK(n.version() >= 20700); // ncclSend / ncclRecv: NCCL 2.7
  } else {
    INFO(why);
    CHECK(why.find("FLASHJIT_NCCL_LIBRARY") != std::string::npos);
    CHECK_THROWS_AS(Nccl::get(), DriverError);
  }
  CHECK_THROWS_AS(NcclTransport(nullptr, nullptr), UserError);
}
