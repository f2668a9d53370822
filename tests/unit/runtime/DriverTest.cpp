//===- DriverTest.cpp - Loading the CUDA driver, and failing clearly ------===//
#include "flashjit/runtime/Driver.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace flashjit;
using namespace flashjit::runtime;
using Catch::Matchers::Contains;

TEST_CASE("a missing driver library gives a DriverError naming the path",
          "[runtime][driver]") {
  REQUIRE_THROWS_AS(Driver::load("/nonexistent/libcuda.so.1"), DriverError);
  REQUIRE_THROWS_WITH(Driver::load("/nonexistent/libcuda.so.1"),
                      Contains("CUDA driver not available") &&
                          Contains("/nonexistent/libcuda.so.1") &&
                          Contains("CPU path works without one"));
}

TEST_CASE("the toolkit's stub libcuda loads but cuInit fails clearly",
          "[runtime][driver]") {
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!std::filesystem::exists(stub)) {
    WARN("no CUDA stub library at " << stub << "; nothing to check");
    return;
  }
  // The stub exports every entry point and answers cuInit with an error.
  REQUIRE_THROWS_WITH(Driver::load(stub),
                      Contains("cuInit failed") && Contains("stub library"));
}

TEST_CASE("without a GPU every device call throws the same clear error",
          "[runtime][driver]") {
  std::string why;
  if (Device::available(&why)) {
    WARN("a GPU is present here; the driver-absent path is not exercised");
    return;
  }
  REQUIRE_FALSE(why.empty());
  REQUIRE_FALSE(Driver::available());
  REQUIRE_THROWS_AS(Driver::get(), DriverError);
  REQUIRE_THROWS_AS(Device::count(), DriverError);
  REQUIRE_THROWS_AS(Device::get(0), DriverError);
  // The reason is remembered, not recomputed differently on each call.
  try {
    Device::get(0);
  } catch (const DriverError &e) {
    REQUIRE(std::string(e.what()) == why);
  }
}
