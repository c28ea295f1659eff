# cmake -P script run by the install.refuses_torch_2 test (see CMakeLists.txt for its variables).
# Fake LibTorch packages (a TorchConfig.cmake and a TorchConfigVersion.cmake, nothing else) stand
# in for LibTorch installs that mpp cannot use; each must be refused before any compiler sees a
# header, with a message naming what was found and what mpp needs:
#   - LibTorch 2.1.0: by find_package(mpp) of the installed package, and by mpp's own configure;
#   - LibTorch 1.13.1 without c10d's Gloo process group;
#   - LibTorch 1.13.1 with it, but no Gloo headers anywhere;
# and find_package(mpp) without REQUIRED reports mpp as not found instead of stopping.
set(work ${MPP_SCRATCH}/refuses-torch)
file(REMOVE_RECURSE ${work})
file(GLOB_RECURSE mpp_config ${MPP_PREFIX}/*/cmake/mpp/mppConfig.cmake)
if(NOT mpp_config)
  message(FATAL_ERROR "refuses_torch: no installed mppConfig.cmake under ${MPP_PREFIX}")
endif()
get_filename_component(mpp_dir ${mpp_config} DIRECTORY)

# fake_torch(<dir> <version> [C10D]): a LibTorch package in <dir> reporting <version>, whose include
# directory holds c10d's ProcessGroupGloo.hpp when C10D is given.
function(fake_torch dir version)
  file(WRITE ${dir}/TorchConfigVersion.cmake "
set(PACKAGE_VERSION \"${version}\")
if(PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
")
  file(WRITE ${dir}/TorchConfig.cmake "
set(TORCH_INCLUDE_DIRS \"${dir}/include\")
set(TORCH_LIBRARIES \"\")
set(Torch_FOUND TRUE)
")
  file(MAKE_DIRECTORY ${dir}/include)
  if(ARGV2 STREQUAL "C10D")
    file(WRITE ${dir}/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp "#pragma once\n")
  endif()
endfunction()

fake_torch(${work}/torch-2.1.0 2.1.0)
fake_torch(${work}/torch-1.13.1-no-c10d 1.13.1)
fake_torch(${work}/torch-1.13.1 1.13.1 C10D)

# A user's project that asks for mpp (no language: the refusal must come before any compiler).
file(WRITE ${work}/user/CMakeLists.txt "
cmake_minimum_required(VERSION 3.25)
project(user LANGUAGES NONE)
if(REQUIRE_MPP)
  find_package(mpp REQUIRED)
else()
  find_package(mpp)
  message(STATUS \"user: mpp_FOUND=\${mpp_FOUND}\")
endif()
")

set(failures 0)
# configure(<name> <expect: fail|pass> <source> <args>... PATTERNS <fixed strings>...)
function(configure name expect source)
  cmake_parse_arguments(PARSE_ARGV 3 ARG "" "" "PATTERNS")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${source} -B ${work}/build-${name}
                          -G ${MPP_GENERATOR} ${ARG_UNPARSED_ARGUMENTS}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}${err}")
  # CMake wraps long messages; compare with the lines joined.
  string(REGEX REPLACE "[ \n]+" " " flat "${all}")
  set(bad "")
  if(expect STREQUAL "fail" AND code EQUAL 0)
    set(bad "configure succeeded")
  elseif(expect STREQUAL "pass" AND NOT code EQUAL 0)
    set(bad "configure failed (${code})")
  endif()
  foreach(pattern IN LISTS ARG_PATTERNS)
    string(FIND "${flat}" "${pattern}" at)
    if(at EQUAL -1)
      string(APPEND bad "; no '${pattern}' in the output")
    endif()
  endforeach()
  if(bad)
    message(SEND_ERROR "refuses_torch: ${name}: ${bad}:\n${all}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  else()
    message(STATUS "refuses_torch: ${name}: as expected")
  endif()
endfunction()

set(found_2 "found LibTorch 2.1.0 at ${work}/torch-2.1.0")
set(supports "mpp supports LibTorch 1.13.x only")
configure(find_package_torch_2 fail ${work}/user -DREQUIRE_MPP=ON -Dmpp_DIR=${mpp_dir}
          -DTorch_DIR=${work}/torch-2.1.0 PATTERNS "${supports}" "${found_2}")
configure(mpp_configure_torch_2 fail ${MPP_SOURCE_DIR} -DCMAKE_CXX_COMPILER=${MPP_CXX_COMPILER}
          -DTorch_DIR=${work}/torch-2.1.0 -DMPP_USE_CCACHE=OFF
          PATTERNS "${supports}" "${found_2}")
configure(find_package_optional_torch_2 pass ${work}/user -Dmpp_DIR=${mpp_dir}
          -DTorch_DIR=${work}/torch-2.1.0 PATTERNS "user: mpp_FOUND=0" "${found_2}")
configure(find_package_no_c10d fail ${work}/user -DREQUIRE_MPP=ON -Dmpp_DIR=${mpp_dir}
          -DTorch_DIR=${work}/torch-1.13.1-no-c10d
          PATTERNS "mpp: LibTorch 1.13.1 at ${work}/torch-1.13.1-no-c10d has no c10d Gloo process group"
                   "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp is not under")
# Without the system's prefixes (/usr) the search cannot find Debian's Gloo headers.
configure(find_package_no_gloo fail ${work}/user -DREQUIRE_MPP=ON -Dmpp_DIR=${mpp_dir}
          -DTorch_DIR=${work}/torch-1.13.1 -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF
          PATTERNS "mpp: Gloo's headers are missing: gloo/rendezvous/store.h" "MPP_GLOO_INCLUDE_DIR")
if(failures GREATER 0)
  message(FATAL_ERROR "refuses_torch: ${failures} case(s) failed")
endif()
message(STATUS "refuses_torch: ok")
