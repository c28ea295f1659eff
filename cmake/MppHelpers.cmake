# Build helpers shared by tests, examples, benchmarks and tools.
include_guard(GLOBAL)

find_program(MPP_CCACHE ccache)
if(MPP_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${MPP_CCACHE} CACHE STRING "" FORCE)
endif()

# Warnings as errors only on the project's own targets.
function(mpp_project_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror
    -Wno-unused-parameter)   # LibTorch's headers trip this one through our templates
endfunction()

# One precompiled header for everything that uses LibTorch: compiled once, reused by all.
set(MPP_PCH_TARGET "")
if(TARGET mpp)
  add_library(mpp_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
  target_link_libraries(mpp_pch PUBLIC mpp::mpp)
  mpp_project_warnings(mpp_pch)
  target_precompile_headers(mpp_pch PRIVATE
    <torch/torch.h>
    <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
    <torch/csrc/distributed/c10d/TCPStore.hpp>)
  set(MPP_PCH_TARGET mpp_pch)
endif()

# mpp_add_executable(name [TORCH] SOURCES a.cpp ... [LIBS ...])
#   TORCH: links mpp::mpp and reuses the shared LibTorch PCH; otherwise links only mpp::schedule.
function(mpp_add_executable name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  mpp_project_warnings(${name})
  if(ARG_TORCH)
    target_link_libraries(${name} PRIVATE mpp::mpp ${ARG_LIBS})
    target_precompile_headers(${name} REUSE_FROM ${MPP_PCH_TARGET})
  else()
    target_link_libraries(${name} PRIVATE mpp::schedule ${ARG_LIBS})
  endif()
endfunction()

# Adds every immediate subdirectory that has a CMakeLists.txt, in name order, so that
# a new lab, tool or test folder needs no edit of its parent.
function(mpp_add_subdirectories)
  file(GLOB children RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*/CMakeLists.txt)
  list(SORT children)
  foreach(child ${children})
    get_filename_component(sub ${child} DIRECTORY)
    add_subdirectory(${sub})
  endforeach()
endfunction()
