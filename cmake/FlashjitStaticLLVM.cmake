# FLASHJIT_STATIC_LLVM=ON: flashjit's libraries are static and executables link
# LLVM and MLIR from their static component archives, so a binary such as
# `quickstart` or `flashjit` needs neither libLLVM.so (150 MB) nor libMLIR.so
# (107 MB) where it runs (the GPU machine has neither). Not used by CI.
#
# Debian's CMake packages describe the static archives, but every MLIR archive
# (and MLIRSupport) lists the `LLVM` dylib as its dependency and some list the
# `MLIR` dylib: those are rewritten here to the static LLVM components.
#
# Included from the top level after find_package(LLVM); flashjit_static_mlir()
# is called from compiler/ after find_package(MLIR).

# Every static LLVM component archive. Only the archive members a binary
# needs are linked; with --gc-sections unused functions go too.
set(_flashjit_llvm_static_libs)
foreach(_lib IN LISTS LLVM_AVAILABLE_LIBS)
  if(NOT _lib MATCHES "^LLVM" OR NOT TARGET ${_lib}
     OR _lib MATCHES "^LLVM(BOLT|Exegesis|CFIVerify|Diff|OptDriver|Fuzz|TableGen|FileCheck|Debuginfod|WindowsManifest|LineEditor)")
    continue()
  endif()
  get_target_property(_type ${_lib} TYPE)
  if(_type STREQUAL "STATIC_LIBRARY")
    list(APPEND _flashjit_llvm_static_libs ${_lib})
  endif()
endforeach()

# LLVMSupport's own dependencies name libz3.so (only the Clang analyzer's Z3
# solver uses it: dropped) and zstd::libzstd_shared, which Debian's LLVMConfig
# leaves undefined when libzstd-dev is absent: libzstd.so.1 then.
if(NOT TARGET zstd::libzstd_shared)
  find_library(FLASHJIT_ZSTD_LIBRARY NAMES zstd libzstd.so.1 REQUIRED)
  add_library(zstd::libzstd_shared SHARED IMPORTED GLOBAL)
  set_target_properties(zstd::libzstd_shared PROPERTIES
    IMPORTED_LOCATION ${FLASHJIT_ZSTD_LIBRARY})
endif()
get_target_property(_deps LLVMSupport INTERFACE_LINK_LIBRARIES)
list(FILTER _deps EXCLUDE REGEX "z3")
set_target_properties(LLVMSupport PROPERTIES INTERFACE_LINK_LIBRARIES "${_deps}")
# LLVMExtensions names Polly, whose archive is not installed (only opt's
# plugin registry references it).
get_target_property(_deps LLVMExtensions INTERFACE_LINK_LIBRARIES)
list(REMOVE_ITEM _deps Polly)
set_target_properties(LLVMExtensions PROPERTIES INTERFACE_LINK_LIBRARIES "${_deps}")

find_package(Threads REQUIRED)
add_library(flashjit_llvm_static INTERFACE)
target_link_libraries(flashjit_llvm_static INTERFACE
  ${_flashjit_llvm_static_libs} Threads::Threads)

# What flashjit_use_llvm() links.
set(FLASHJIT_LLVM_LIBS flashjit_llvm_static)

# fmt has no static archive here: use it header-only. Defining both of its
# targets first makes find_package(fmt) keep them (fmt-targets.cmake returns
# when all its targets exist).
foreach(_fmt fmt::fmt fmt::fmt-header-only)
  add_library(${_fmt} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${_fmt} PROPERTIES
    INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
endforeach()

# Whole binaries: drop unused sections, skip unused shared libraries and
# carry libstdc++/libgcc inside (the GPU machine's may be older). lld links
# the 500 archives in seconds where GNU ld takes minutes.
add_compile_options(-ffunction-sections -fdata-sections)
add_link_options(-Wl,--gc-sections -Wl,--as-needed -static-libstdc++
                 -static-libgcc)
find_program(FLASHJIT_LLD NAMES ld.lld ld.lld-22 ld.lld-14)
if(FLASHJIT_LLD)
  add_link_options(-fuse-ld=lld)
endif()

# Rewrites MLIR's static archive targets so that they depend on the static
# LLVM components instead of the LLVM and MLIR dylibs, makes them visible in
# every directory, and makes the INTERFACE library `target` link all MLIR
# archives (tests and C API left out).
function(flashjit_static_mlir target)
  get_property(_all GLOBAL PROPERTY MLIR_ALL_LIBS)
  set(_mlir_libs)
  foreach(_lib IN LISTS _all)
    if(NOT TARGET ${_lib})
      continue()
    endif()
    get_target_property(_type ${_lib} TYPE)
    if(NOT _type STREQUAL "STATIC_LIBRARY")
      continue()
    endif()
    get_target_property(_deps ${_lib} INTERFACE_LINK_LIBRARIES)
    if(_deps)
      # Named plainly or as $<LINK_ONLY:...>.
      list(TRANSFORM _deps REPLACE "^LLVM$" flashjit_llvm_static)
      list(TRANSFORM _deps REPLACE "^[$]<LINK_ONLY:LLVM>$"
                                   "$<LINK_ONLY:flashjit_llvm_static>")
      list(FILTER _deps EXCLUDE REGEX "^(MLIR|[$]<LINK_ONLY:MLIR>)$")
      set_target_properties(${_lib} PROPERTIES
        INTERFACE_LINK_LIBRARIES "${_deps}")
    endif()
    set_target_properties(${_lib} PROPERTIES IMPORTED_GLOBAL TRUE)
    if(NOT _lib MATCHES "Test|CAPI")
      list(APPEND _mlir_libs ${_lib})
    endif()
  endforeach()
  target_link_libraries(${target} INTERFACE ${_mlir_libs}
                                            flashjit_llvm_static)
endfunction()
