# `cmake --install`: flashjit's libraries, public headers and tools, a CMake
# package (find_package(flashjit CONFIG)) and pkg-config files.
#
#   flashjit::flashjit     the C++ API (flashjit/flashjit.h): DSL, compiler,
#                          cached CPU and GPU entry points, runtime
#   flashjit::runtime      bundles, cache, kernel loading and launch (no
#                          compiler, no MLIR); flashjit::runtime_core is its
#                          CUDA-free part, flashjit::frontend the DSL alone
#   flashjit::compiler     the compiler alone (flashjit/compiler/Compiler.h)
#   flashjit::c            the C API with the compiler (flashjit-c/flashjit.h)
#   flashjit::c_runtime    the C API, runtime only (flashjit_load of bundles)
#
# MLIR, LLVM and fmt are PRIVATE dependencies of shared libraries, and no
# public header includes them: consumers need none of their CMake packages.
# The runtime's headers include <cuda.h> (types only), so the package finds
# the CUDA toolkit's headers (CUDA::toolkit) where the runtime was built.
#
# Included from the top level once every target exists.
if(FLASHJIT_STATIC_LLVM)
  # Static libraries would export every LLVM and MLIR archive with them.
  message(STATUS "flashjit: FLASHJIT_STATIC_LLVM: no install rules")
  return()
endif()
include(CMakePackageConfigHelpers)

set(FLASHJIT_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashjit)
set(FLASHJIT_PKGCONFIG_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Library target -> its name in the package (flashjit::<name>).
set(_flashjit_exports
  flashjit_frontend=frontend
  flashjit_runtime_core=runtime_core
  flashjit_runtime=runtime
  flashjit_compiler=compiler
  flashjit_gpu_cache=gpu_cache
  flashjit_c_runtime=c_runtime
  flashjit_c=c
  flashjit_cxx=flashjit)
set(_flashjit_install_targets)
foreach(_pair IN LISTS _flashjit_exports)
  string(REPLACE "=" ";" _pair "${_pair}")
  list(GET _pair 0 _target)
  list(GET _pair 1 _name)
  if(TARGET ${_target})
    set_target_properties(${_target} PROPERTIES EXPORT_NAME ${_name})
    list(APPEND _flashjit_install_targets ${_target})
  endif()
endforeach()

# The C++ headers need C++20 (std::span, std::source_location, concepts):
# consumers get it from the targets, not from flashjit's CMAKE_CXX_STANDARD.
foreach(_target flashjit_frontend flashjit_runtime_core flashjit_runtime
                flashjit_compiler flashjit_gpu_cache flashjit_cxx)
  if(TARGET ${_target})
    get_target_property(_type ${_target} TYPE)
    if(_type STREQUAL "INTERFACE_LIBRARY")
      target_compile_features(${_target} INTERFACE cxx_std_20)
    else()
      target_compile_features(${_target} PUBLIC cxx_std_20)
    endif()
  endif()
endforeach()

install(TARGETS ${_flashjit_install_targets}
  EXPORT flashjitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Public headers: the frontend's, the runtime's, the compiler's MLIR-free
# API (flashjit/compiler/; the dialect, pass and pipeline headers stay
# internal) and the umbrella C++ and C headers.
foreach(_dir frontend/include runtime/include api/include)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_dir}/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    FILES_MATCHING PATTERN "*.h")
endforeach()
if(TARGET flashjit_compiler)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/compiler/include/flashjit/compiler/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashjit/compiler
    FILES_MATCHING PATTERN "*.h")
endif()

# Tools: the command line (compile, inspect, cache, bundle) and the MLIR
# driver.
foreach(_tool flashjit flashjit-opt)
  if(TARGET ${_tool})
    install(TARGETS ${_tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

# The CMake package.
set(FLASHJIT_PACKAGE_NEEDS_CUDA OFF)
if(TARGET flashjit_runtime)
  set(FLASHJIT_PACKAGE_NEEDS_CUDA ON)
endif()
install(EXPORT flashjitTargets
  NAMESPACE flashjit::
  DESTINATION ${FLASHJIT_CMAKE_INSTALL_DIR})
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/flashjitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/flashjitConfig.cmake
  INSTALL_DESTINATION ${FLASHJIT_CMAKE_INSTALL_DIR})
# 0.x: a minor release may break the API, so only 0.1.* satisfies 0.1.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/package/flashjitConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/package/flashjitConfig.cmake
  ${PROJECT_BINARY_DIR}/package/flashjitConfigVersion.cmake
  DESTINATION ${FLASHJIT_CMAKE_INSTALL_DIR})

include(FlashjitPkgConfig)
