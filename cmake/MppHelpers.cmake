# Build helpers shared by tests, examples, benchmarks and tools.
include_guard(GLOBAL)

# ccache, when present. The shared PCH is only cacheable with these sloppiness settings: the
# .gch is rebuilt just before its users (too new for ccache's mtime/ctime checks) and carries
# __DATE__/__TIME__ and macro state that ccache cannot see through. A cached .gch comes back
# byte-identical, so the TUs that include it hit as well. base_dir makes paths relative so that
# hits also happen across checkouts (worktrees, fresh clones) next to each other.
option(MPP_USE_CCACHE "Compile through ccache when it is installed" ON)
find_program(MPP_CCACHE ccache)
if(MPP_CCACHE AND "${CMAKE_CXX_COMPILER_LAUNCHER}" STREQUAL "${MPP_CCACHE}")
  unset(CMAKE_CXX_COMPILER_LAUNCHER CACHE)  # set by older versions of this file; replaced below
endif()
if(MPP_USE_CCACHE AND MPP_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(mpp_ccache_env CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime)
  if(NOT DEFINED ENV{CCACHE_BASEDIR})
    get_filename_component(mpp_ccache_base "${PROJECT_SOURCE_DIR}/.." ABSOLUTE)
    list(APPEND mpp_ccache_env CCACHE_BASEDIR=${mpp_ccache_base})
  endif()
  # A plain (not cached) variable: turning MPP_USE_CCACHE off takes effect on reconfigure.
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env ${mpp_ccache_env} ${MPP_CCACHE})
  set(MPP_CCACHE_ACTIVE ON)
endif()

# Sanitizers on everything this project compiles (the asan preset sets address;undefined).
# LibTorch and the other Debian libraries stay uninstrumented: see docs/testing.md, "Sanitizers".
set(MPP_SANITIZE "" CACHE STRING "Sanitizers for mpp's own code, e.g. address;undefined")
if(MPP_SANITIZE)
  list(JOIN MPP_SANITIZE "," mpp_sanitizers)
  add_compile_options(-fsanitize=${mpp_sanitizers} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${mpp_sanitizers})
endif()

# Warnings as errors only on the project's own targets.
function(mpp_project_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror
    -Wno-unused-parameter)   # LibTorch's headers trip this one through our templates
  if(MPP_SANITIZE)
    # GCC 12 documents false positives of this one under -fsanitize (seen in <regex>).
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
  endif()
endfunction()

# mpp compiled once (docs/design.md, "Compiled once"). mpp::mpp stays header-only for every user;
# with MPP_SEPARATE_COMPILATION (on when mpp is the top-level project) this project's own targets
# instead compile with the macro MPP_SEPARATE_COMPILATION, under which the headers only declare
# mpp's functions that are not templates, and link them from two static libraries built once with
# the build type's flags: mpp_std_compiled (src/mpp_std.cpp: trace/, launch/ and the other
# torch-free parts, for programs on mpp::schedule alone) and mpp_compiled (src/mpp.cpp: the rest,
# on LibTorch). The macro must be the same in every unit of a program, the PCHs included (GCC
# reads their macro state into each unit that uses them).
option(MPP_SEPARATE_COMPILATION
       "Compile mpp's functions that are not templates once (mpp_compiled) for this project's own targets"
       ${MPP_TOP_LEVEL})

# mpp_separate_compilation_definition(<target>): <target> is compiled with MPP_SEPARATE_COMPILATION
# when the option is on (the PCHs and what reuses them, which may not link mpp_compiled).
function(mpp_separate_compilation_definition target)
  if(MPP_SEPARATE_COMPILATION)
    target_compile_definitions(${target} PRIVATE MPP_SEPARATE_COMPILATION)
  endif()
endfunction()

# mpp_link_compiled(<target> [TORCH] [PUBLIC]): <target> links what mpp compiled once (mpp_compiled
# with TORCH, else mpp_std_compiled), which also brings the macro; nothing when the option is off.
function(mpp_link_compiled target)
  cmake_parse_arguments(ARG "TORCH;PUBLIC" "" "" ${ARGN})
  if(NOT MPP_SEPARATE_COMPILATION)
    return()
  endif()
  set(scope PRIVATE)
  if(ARG_PUBLIC)
    set(scope PUBLIC)
  endif()
  if(ARG_TORCH)
    target_link_libraries(${target} ${scope} mpp_compiled)
  else()
    target_link_libraries(${target} ${scope} mpp_std_compiled)
  endif()
endfunction()

# Lets ccache fall back to preprocessor mode on TUs that use GCC's .gch (ccache manual).
set(MPP_PCH_OPTIONS "")
if(MPP_CCACHE_ACTIVE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(MPP_PCH_OPTIONS -fpch-preprocess)
endif()

# Programs that check behaviour rather than measure it (the tests, the header checks, the
# write-it-yourself labs) build at MPP_TEST_OPTIMIZATION: what they check does not depend on the
# optimiser, and at -O0 a test unit compiles in about 40 % of its -O3 time (docs/testing.md, "Build
# time"). The course's labs, the benchmarks and the tools keep the build type's flags: their numbers
# are what the docs quote. Empty: the tests take the build type's flags too.
set(MPP_TEST_OPTIMIZATION "-O0" CACHE STRING
    "Optimisation flag of the tests and the write-it-yourself labs (empty: the build type's)")

# mpp_test_build(<target>): compiles <target> as a test (MPP_TEST_OPTIMIZATION).
function(mpp_test_build target)
  if(MPP_TEST_OPTIMIZATION)
    target_compile_options(${target} PRIVATE ${MPP_TEST_OPTIMIZATION})
  endif()
endfunction()

# One precompiled header for everything that uses LibTorch, compiled once and reused by all; a
# second one, compiled as a test, for the tests (GCC refuses a .gch made at another -O level).
#
# It holds the LibTorch headers that the project's own sources include, not <torch/torch.h>: GCC
# reads the whole .gch into every unit, and the narrower one (about 540 MB instead of 645 MB)
# starts an empty unit in 2.4 s instead of 3.5 s and is itself built in 21 s instead of 38 s
# (docs/testing.md, "Build time"). A unit that includes <torch/torch.h> still compiles; it parses
# the rest itself.
# The list is read from the sources at configure time; one that has gone stale costs time only.
file(GLOB_RECURSE mpp_pch_scanned CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/include/*.hpp ${PROJECT_SOURCE_DIR}/tests/*.[ch]pp
     ${PROJECT_SOURCE_DIR}/examples/*.[ch]pp ${PROJECT_SOURCE_DIR}/benchmarks/*.[ch]pp
     ${PROJECT_SOURCE_DIR}/tools/*.[ch]pp)
set(MPP_PCH_HEADERS "")
foreach(source ${mpp_pch_scanned})
  file(STRINGS ${source} lines REGEX "^[ \t]*#[ \t]*include[ \t]*<(torch|ATen|c10)/")
  foreach(line ${lines})
    if(line MATCHES "<((torch|ATen|c10)/[^>]+)>")
      list(APPEND MPP_PCH_HEADERS ${CMAKE_MATCH_1})
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES MPP_PCH_HEADERS)
# <torch/torch.h> is what the PCH avoids; NCCL's header exists only where LibTorch has CUDA.
list(REMOVE_ITEM MPP_PCH_HEADERS torch/torch.h torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
list(SORT MPP_PCH_HEADERS)
list(TRANSFORM MPP_PCH_HEADERS PREPEND "<")
list(TRANSFORM MPP_PCH_HEADERS APPEND ">")

set(MPP_PCH_TARGET "")
set(MPP_TEST_PCH_TARGET "")
# mpp_add_pch(<target> [HEADERS <header>...]): the PCH of MPP_PCH_HEADERS, or of the headers given.
function(mpp_add_pch target)
  cmake_parse_arguments(ARG "" "" "HEADERS" ${ARGN})
  if(NOT ARG_HEADERS)
    set(ARG_HEADERS ${MPP_PCH_HEADERS})
  endif()
  add_library(${target} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
  target_link_libraries(${target} PUBLIC mpp::mpp)
  mpp_separate_compilation_definition(${target})  # as its users (mpp_use_pch)
  # Compiled with the flags of the executables that reuse it (mpp_add_executable below).
  if(TARGET Boost::headers)
    target_link_libraries(${target} PUBLIC Boost::headers)
  endif()
  mpp_project_warnings(${target})
  target_compile_options(${target} PRIVATE ${MPP_PCH_OPTIONS})
  target_precompile_headers(${target} PRIVATE ${ARG_HEADERS})
endfunction()
if(TARGET mpp)
  mpp_add_pch(mpp_pch)
  set(MPP_PCH_TARGET mpp_pch)
  set(MPP_TEST_PCH_TARGET mpp_pch)
  if(MPP_TEST_OPTIMIZATION)
    mpp_add_pch(mpp_test_pch)
    mpp_test_build(mpp_test_pch)
    set(MPP_TEST_PCH_TARGET mpp_test_pch)
  endif()
endif()

# mpp_use_pch(<target> [TEST]): <target> reuses the LibTorch PCH (the tests' one with TEST, and
# then it is compiled as a test too).
function(mpp_use_pch target)
  cmake_parse_arguments(ARG "TEST" "" "" ${ARGN})
  set(pch ${MPP_PCH_TARGET})
  if(ARG_TEST)
    set(pch ${MPP_TEST_PCH_TARGET})
    mpp_test_build(${target})
  endif()
  # Boost::headers for its definitions (the PCH is compiled with them) and for the tests' and
  # benchmarks' policy lists, which use Boost.Hana.
  if(TARGET Boost::headers)
    target_link_libraries(${target} PRIVATE Boost::headers)
  endif()
  target_precompile_headers(${target} REUSE_FROM ${pch})
  target_compile_options(${target} PRIVATE ${MPP_PCH_OPTIONS})
  mpp_separate_compilation_definition(${target})  # as the PCH was compiled
endfunction()

# The two libraries of mpp compiled once (see MPP_SEPARATE_COMPILATION above).
if(MPP_SEPARATE_COMPILATION)
  add_library(mpp_std_compiled STATIC ${PROJECT_SOURCE_DIR}/src/mpp_std.cpp)
  target_link_libraries(mpp_std_compiled PUBLIC mpp::schedule)
  target_compile_definitions(mpp_std_compiled PUBLIC MPP_SEPARATE_COMPILATION)
  mpp_project_warnings(mpp_std_compiled)
  if(TARGET mpp)
    add_library(mpp_compiled STATIC ${PROJECT_SOURCE_DIR}/src/mpp.cpp)
    target_link_libraries(mpp_compiled PUBLIC mpp::mpp mpp_std_compiled)
    mpp_project_warnings(mpp_compiled)
    mpp_use_pch(mpp_compiled)
  endif()
endif()

# mpp_add_executable(name [TORCH] [TEST] SOURCES a.cpp ... [LIBS ...])
#   TORCH: links mpp::mpp and reuses the shared LibTorch PCH; otherwise links only mpp::schedule.
#   TEST: a program that checks behaviour, compiled as a test (mpp_test_build).
function(mpp_add_executable name)
  cmake_parse_arguments(ARG "TORCH;TEST" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  mpp_project_warnings(${name})
  if(ARG_TORCH)
    target_link_libraries(${name} PRIVATE mpp::mpp ${ARG_LIBS})
    mpp_link_compiled(${name} TORCH)
    if(ARG_TEST)
      mpp_use_pch(${name} TEST)  # links Boost::headers too
    else()
      mpp_use_pch(${name})
    endif()
  else()
    target_link_libraries(${name} PRIVATE mpp::schedule ${ARG_LIBS})
    mpp_link_compiled(${name})
    # The tests' and benchmarks' policy lists use Boost.Hana, which mpp::schedule does not bring.
    if(TARGET Boost::headers)
      target_link_libraries(${name} PRIVATE Boost::headers)
    endif()
    if(ARG_TEST)
      mpp_test_build(${name})
    endif()
  endif()
endfunction()

# mpp_add_compile_fail_test(<test> <source> CASE <n> [REGEX <regex>]): a CTest that builds
# <source> with MPP_COMPILE_FAIL_CASE=<n> (an excluded object library, compiled as a test with the
# tests' LibTorch PCH and the project's warnings) and passes when the build output matches <regex>.
# Without REGEX the case is a control: the test passes when it compiles. The source keeps its cases
# behind #if on the macro.
function(mpp_add_compile_fail_test name source)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "CASE;REGEX" "")
  string(REGEX REPLACE "[^A-Za-z0-9_]" "_" target "mpp_compile_fail_${name}")
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${source})
  target_link_libraries(${target} PRIVATE mpp::mpp)
  mpp_use_pch(${target} TEST)
  mpp_project_warnings(${target})
  target_compile_definitions(${target} PRIVATE MPP_COMPILE_FAIL_CASE=${ARG_CASE})
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${target})
  if(ARG_REGEX)
    set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${ARG_REGEX}")
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT 300)
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

# mpp_add_lab_test(<test> <lab target> [PROGRAM name] [RANKS n] [ARGS ...]): the lab run on n
# real ranks (2 by default) through mpprun as a CTest; PROGRAM names the program of a target that
# holds several (its first argument). It fails if any rank exits non-zero or the run outlives
# mpprun's 240 s deadline (CTest's own stops it at 300 s). Nothing when tests are off.
function(mpp_add_lab_test name target)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "RANKS;PROGRAM" "ARGS")
  if(NOT MPP_BUILD_TESTS OR NOT TARGET mpprun)
    return()
  endif()
  if(NOT ARG_RANKS)
    set(ARG_RANKS 2)
  endif()
  add_test(NAME ${name}
           COMMAND mpprun --nproc-per-node ${ARG_RANKS} --log-dir "" --timeout 240
                   $<TARGET_FILE:${target}> ${ARG_PROGRAM} ${ARG_ARGS})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300)
endfunction()
