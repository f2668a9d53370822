# Helpers shared by every flashjit target.

# flashjit's own libraries are shared, or static with FLASHJIT_STATIC_LLVM
# (cmake/FlashjitStaticLLVM.cmake: one copy of LLVM per binary, linked in).
if(FLASHJIT_STATIC_LLVM)
  set(FLASHJIT_LIBRARY_TYPE STATIC)
else()
  set(FLASHJIT_LIBRARY_TYPE SHARED)
  set(FLASHJIT_LLVM_LIBS LLVM) # the one libLLVM.so
endif()

# Warnings (as errors with FLASHJIT_WERROR) on our own code only: LLVM, MLIR,
# CUDA and Catch2 headers come in as SYSTEM includes.
function(flashjit_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(FLASHJIT_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# LLVM's include directories and definitions for a target that uses LLVM
# Support headers (LLVM_DEFINITIONS is one space-separated string).
function(flashjit_use_llvm target visibility)
  target_include_directories(${target} SYSTEM ${visibility} ${LLVM_INCLUDE_DIRS})
  separate_arguments(_defs NATIVE_COMMAND "${LLVM_DEFINITIONS}")
  target_compile_options(${target} ${visibility} ${_defs})
  target_link_libraries(${target} ${visibility} ${FLASHJIT_LLVM_LIBS})
endfunction()
