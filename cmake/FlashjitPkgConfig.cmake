# pkg-config files under <libdir>/pkgconfig, for builds without CMake:
#   flashjit            the C++ API (flashjit/flashjit.h; compile with -std=c++20)
#   flashjit-runtime    loading and running precompiled kernels, no MLIR
#   flashjit-c          the C API with the compiler
#   flashjit-c-runtime  the C API, runtime only
# Paths are relative to the .pc file (${pcfiledir}), so a prefix can move
# (`cmake --install <build> --prefix <anywhere>`). Included from
# FlashjitInstall.cmake.

# ${pcfiledir} -> the install prefix.
file(RELATIVE_PATH _flashjit_pc_to_prefix
  /prefix/${FLASHJIT_PKGCONFIG_INSTALL_DIR} /prefix)
string(REGEX REPLACE "/$" "" _flashjit_pc_to_prefix "${_flashjit_pc_to_prefix}")

# The runtime's headers include <cuda.h>: the toolkit runtime/ found (its
# variables are not visible here; the second find is cached).
set(_flashjit_cuda_cflags "")
if(TARGET flashjit_runtime)
  find_package(CUDAToolkit QUIET)
endif()
foreach(_dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
  string(APPEND _flashjit_cuda_cflags " -I${_dir}")
endforeach()

# flashjit_pkgconfig(FILE NAME DESCRIPTION LIBS CFLAGS): writes and installs
# FILE.pc.
function(flashjit_pkgconfig file name description libs cflags)
  set(FLASHJIT_PC_NAME "${name}")
  set(FLASHJIT_PC_DESCRIPTION "${description}")
  set(FLASHJIT_PC_LIBS "${libs}")
  set(FLASHJIT_PC_CFLAGS "${cflags}")
  set(FLASHJIT_PC_PREFIX "\${pcfiledir}/${_flashjit_pc_to_prefix}")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/flashjit.pc.in
    ${PROJECT_BINARY_DIR}/package/${file}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/package/${file}.pc
    DESTINATION ${FLASHJIT_PKGCONFIG_INSTALL_DIR})
endfunction()

if(TARGET flashjit_cxx)
  flashjit_pkgconfig(flashjit flashjit
    "JIT compiler for attention kernels: DSL, compiler and runtime (C++20)"
    "-lflashjit_gpu_cache -lflashjit_compiler -lflashjit_runtime -lflashjit_runtime_core -lflashjit_frontend"
    "${_flashjit_cuda_cflags}")
endif()
if(TARGET flashjit_runtime)
  flashjit_pkgconfig(flashjit-runtime flashjit-runtime
    "flashjit runtime: loads and runs precompiled attention kernels, no MLIR (C++20)"
    "-lflashjit_runtime -lflashjit_runtime_core -lflashjit_frontend"
    "${_flashjit_cuda_cflags}")
endif()
if(TARGET flashjit_c)
  flashjit_pkgconfig(flashjit-c flashjit-c
    "flashjit C API with the compiler" "-lflashjit_c" "")
endif()
if(TARGET flashjit_c_runtime)
  flashjit_pkgconfig(flashjit-c-runtime flashjit-c-runtime
    "flashjit C API, runtime only (loads bundles, no MLIR)"
    "-lflashjit_c_runtime" "")
endif()
