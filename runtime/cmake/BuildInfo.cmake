# Writes <binary dir>/generated/flashjit/runtime/BuildInfo.h with flashjit's
# version and the git commit it was configured from ("unknown" outside git),
# which are part of every kernel cache key (lib/BuildId.cpp). CMake re-runs
# when HEAD moves, so a commit changes the keys of the next build.
find_package(Git QUIET)
set(FLASHJIT_GIT_COMMIT unknown)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse HEAD
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    OUTPUT_VARIABLE _flashjit_commit RESULT_VARIABLE _flashjit_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_flashjit_rc EQUAL 0)
    set(FLASHJIT_GIT_COMMIT ${_flashjit_commit})
  endif()
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --absolute-git-dir
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    OUTPUT_VARIABLE _flashjit_gitdir RESULT_VARIABLE _flashjit_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_flashjit_rc EQUAL 0)
    foreach(_f HEAD logs/HEAD)
      if(EXISTS ${_flashjit_gitdir}/${_f})
        set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
          ${_flashjit_gitdir}/${_f})
      endif()
    endforeach()
  endif()
endif()
set(FLASHJIT_VERSION_STRING ${PROJECT_VERSION})
configure_file(${CMAKE_CURRENT_LIST_DIR}/BuildInfo.h.in
  ${CMAKE_CURRENT_BINARY_DIR}/generated/flashjit/runtime/BuildInfo.h @ONLY)
