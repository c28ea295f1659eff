# Every public header compiles on its own (STYLE.md, rule 9): one generated TU per header, which
# includes it twice (the second time checks the include guard).
#
# Headers that reach LibTorch (directly or through other mpp headers) are compiled against
# mpp::mpp with a PCH of LibTorch's headers, which keeps the check cheap; the others are compiled
# against mpp::schedule alone and without the PCH, which also proves that they stay LibTorch-free.
# A header that reaches only tensors, c10d and a few ATen ops (no ATen umbrella, no torch::nn,
# optimizers, autograd or serialization) reads a PCH of just those: an empty unit starts in 1.6
# core-seconds on it instead of 3.5 on the tests' one (docs/testing.md, "Build time").
include_guard(GLOBAL)

#
# They check the header-only mode, the one users get: each TU undefines MPP_SEPARATE_COMPILATION
# (which the shared PCH and this project's other units are compiled with, MppHelpers.cmake), so
# that a header includes its impl/*.ipp and the check compiles those definitions too.
# mpp/impl/src*.hpp, the unit that compiles them once, is built as mpp_compiled instead.
file(GLOB_RECURSE mpp_public_headers CONFIGURE_DEPENDS
     RELATIVE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/include/mpp/*.hpp)
list(FILTER mpp_public_headers EXCLUDE REGEX "^mpp/impl/")
list(SORT mpp_public_headers)
set(mpp_header_only "#undef MPP_SEPARATE_COMPILATION  // header-only, as users compile mpp\n")

# Direct includes of each header: mpp ones to follow, and whether it names LibTorch itself.
set(mpp_torch_include_regex "#[ \t]*include[ \t]*[<\"](torch|ATen|c10|caffe2)/")
foreach(header ${mpp_public_headers})
  file(STRINGS ${PROJECT_SOURCE_DIR}/include/${header} lines REGEX "^[ \t]*#[ \t]*include")
  set(mpp_hdr_torch_${header} OFF)
  set(mpp_hdr_deps_${header} "")
  set(mpp_hdr_torch_includes_${header} "")
  foreach(line ${lines})
    if(line MATCHES "${mpp_torch_include_regex}")
      set(mpp_hdr_torch_${header} ON)
      if(line MATCHES "<([^>]+)>")
        list(APPEND mpp_hdr_torch_includes_${header} "<${CMAKE_MATCH_1}>")
      endif()
    elseif(line MATCHES "#[ \t]*include[ \t]*[<\"](mpp/[^>\"]+)[>\"]")
      list(APPEND mpp_hdr_deps_${header} ${CMAKE_MATCH_1})
    endif()
  endforeach()
endforeach()

# A header needs LibTorch when any header it reaches does.
function(mpp_header_needs_torch header out)
  set(pending ${header})
  set(seen "")
  while(pending)
    list(POP_FRONT pending current)
    if(current IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${current})
    if(mpp_hdr_torch_${current})
      set(${out} ON PARENT_SCOPE)
      return()
    endif()
    list(APPEND pending ${mpp_hdr_deps_${current}})
  endwhile()
  set(${out} OFF PARENT_SCOPE)
endfunction()

# The LibTorch headers a header reaches, through mpp's own.
function(mpp_header_torch_includes header out)
  set(pending ${header})
  set(seen "")
  set(found "")
  while(pending)
    list(POP_FRONT pending current)
    if(current IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${current})
    list(APPEND found ${mpp_hdr_torch_includes_${current}})
    list(APPEND pending ${mpp_hdr_deps_${current}})
  endwhile()
  list(REMOVE_DUPLICATES found)
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# The light PCH's headers: LibTorch's that the project includes, less the heavy ones.
set(mpp_heavy_torch_regex
    "^<(ATen/ATen\\.h|ATen/CPUGeneratorImpl\\.h|ATen/core/(Generator|Dict|ivalue)\\.h|torch/nn/|torch/optim/|torch/csrc/autograd/|torch/(serialize|types|utils)\\.h)")
set(mpp_light_torch_headers ${MPP_PCH_HEADERS})
list(FILTER mpp_light_torch_headers EXCLUDE REGEX "${mpp_heavy_torch_regex}")
# NCCL's header is reached only with MPP_WITH_NCCL (LibTorch with CUDA): such a check parses it.
set(mpp_light_allowed ${mpp_light_torch_headers} "<torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>")

set(mpp_std_sources "")
set(mpp_torch_sources "")
set(mpp_light_sources "")
foreach(header ${mpp_public_headers})
  string(REPLACE "/" "__" stem ${header})
  set(source ${PROJECT_BINARY_DIR}/header_check/${stem}.cpp)
  set(text "// Generated: ${header} compiles on its own.\n${mpp_header_only}")
  string(APPEND text "#include \"${header}\"\n#include \"${header}\"\n")
  # Rewritten only when the text changes, so that a reconfigure does not rebuild the check.
  file(CONFIGURE OUTPUT ${source} CONTENT "${text}" @ONLY)
  mpp_header_needs_torch(${header} torch)
  if(torch)
    mpp_header_torch_includes(${header} reached)
    set(light ON)
    foreach(include ${reached})
      if(NOT include IN_LIST mpp_light_allowed)
        set(light OFF)
      endif()
    endforeach()
    if(light)
      list(APPEND mpp_light_sources ${source})
    else()
      list(APPEND mpp_torch_sources ${source})
    endif()
  else()
    list(APPEND mpp_std_sources ${source})
  endif()
endforeach()

# Every public header in one translation unit, in name order and in reverse order: names that two
# headers declare in ways that clash only when both are seen (an enum that makes another one
# ambiguous, a helper defined twice) fail here, whichever header a program includes first.
foreach(order forward reverse)
  set(headers ${mpp_public_headers})
  if(order STREQUAL "reverse")
    list(REVERSE headers)
  endif()
  set(text "// Generated: every public header of mpp together (${order} name order).\n")
  string(APPEND text "${mpp_header_only}")
  foreach(header ${headers})
    string(APPEND text "#include \"${header}\"\n")
  endforeach()
  set(source ${PROJECT_BINARY_DIR}/header_check/all_headers_${order}.cpp)
  file(CONFIGURE OUTPUT ${source} CONTENT "${text}" @ONLY)
  list(APPEND mpp_torch_sources ${source})
endforeach()

if(mpp_std_sources)
  add_library(mpp_header_check_std OBJECT ${mpp_std_sources})
  target_link_libraries(mpp_header_check_std PRIVATE mpp::schedule)
  mpp_project_warnings(mpp_header_check_std)
  mpp_test_build(mpp_header_check_std)
endif()
if(mpp_torch_sources AND MPP_PCH_TARGET)
  add_library(mpp_header_check_torch OBJECT ${mpp_torch_sources})
  target_link_libraries(mpp_header_check_torch PRIVATE mpp::mpp)
  mpp_project_warnings(mpp_header_check_torch)
  mpp_use_pch(mpp_header_check_torch TEST)
endif()
if(mpp_light_sources AND MPP_PCH_TARGET)
  mpp_add_pch(mpp_header_check_pch HEADERS ${mpp_light_torch_headers})
  mpp_test_build(mpp_header_check_pch)
  add_library(mpp_header_check_light OBJECT ${mpp_light_sources})
  target_link_libraries(mpp_header_check_light PRIVATE mpp::mpp)
  mpp_project_warnings(mpp_header_check_light)
  mpp_test_build(mpp_header_check_light)
  if(TARGET Boost::headers)
    target_link_libraries(mpp_header_check_light PRIVATE Boost::headers)
  endif()
  target_precompile_headers(mpp_header_check_light REUSE_FROM mpp_header_check_pch)
  target_compile_options(mpp_header_check_light PRIVATE ${MPP_PCH_OPTIONS})
  mpp_separate_compilation_definition(mpp_header_check_light)
endif()
