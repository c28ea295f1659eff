# Fails when a C++ source of the project differs from what clang-format makes of it (.clang-format
# at the top). Run by CTest as format.check:
#   cmake -DCLANG_FORMAT=<path> -DROOT=<source dir> -P cmake/CheckFormat.cmake
# Fix with: clang-format -i <the files it lists>
set(sources)
foreach(dir include src tests examples benchmarks tools)
  file(GLOB_RECURSE found "${ROOT}/${dir}/*.cpp" "${ROOT}/${dir}/*.hpp" "${ROOT}/${dir}/*.h"
       "${ROOT}/${dir}/*.ipp")
  list(APPEND sources ${found})
endforeach()
list(LENGTH sources count)
if(count EQUAL 0)
  message(FATAL_ERROR "format.check: no C++ source found under ${ROOT}")
endif()
# One clang-format run over every file (a run per file costs a process start each): with --Werror
# it exits non-zero when any file differs, and names each place that does as "<file>:<line>:...".
execute_process(COMMAND "${CLANG_FORMAT}" --dry-run --Werror ${sources}
                RESULT_VARIABLE status OUTPUT_QUIET ERROR_VARIABLE report)
set(unformatted)
if(NOT status EQUAL 0)
  foreach(source IN LISTS sources)
    string(FIND "${report}" "${source}:" at)
    if(NOT at EQUAL -1)
      file(RELATIVE_PATH relative "${ROOT}" "${source}")
      list(APPEND unformatted "${relative}")
    endif()
  endforeach()
  if(NOT unformatted)  # clang-format failed without naming a file (e.g. a bad .clang-format)
    message(FATAL_ERROR "format.check: ${CLANG_FORMAT} failed (${status}):\n${report}")
  endif()
endif()
if(unformatted)
  list(JOIN unformatted "\n  " listing)
  message(FATAL_ERROR "format.check: these files are not formatted as .clang-format says:\n  "
                      "${listing}\nrun: clang-format -i <file> (from the top of the checkout)")
endif()
message(STATUS "format.check: ${count} files formatted as .clang-format says")
