# cmake -P script run by the format.check_catches_unformatted test: format.check on a scratch tree
# of one formatted and one unformatted file must fail and name the unformatted one only.
#   -DCLANG_FORMAT=<path> -DSOURCE_DIR=<mpp's top> -DSCRATCH=<empty dir to use>
file(REMOVE_RECURSE ${SCRATCH})
file(MAKE_DIRECTORY ${SCRATCH}/include ${SCRATCH}/tests)
file(COPY ${SOURCE_DIR}/.clang-format DESTINATION ${SCRATCH})
file(WRITE ${SCRATCH}/include/formatted.hpp "#pragma once\n\ninline int one() { return 1; }\n")
file(WRITE ${SCRATCH}/tests/unformatted.cpp "int   two( ){return 2;}\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DCLANG_FORMAT=${CLANG_FORMAT} -DROOT=${SCRATCH}
                        -P ${SOURCE_DIR}/cmake/CheckFormat.cmake
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(status EQUAL 0)
  message(FATAL_ERROR "format.check passed a tree with an unformatted file:\n${out}${err}")
endif()
string(FIND "${err}" "tests/unformatted.cpp" bad_named)
string(FIND "${err}" "formatted.hpp" good_named)
if(bad_named EQUAL -1 OR NOT good_named EQUAL -1)
  message(FATAL_ERROR "format.check should name tests/unformatted.cpp only:\n${err}")
endif()
message(STATUS "format.check named the unformatted file: ok")
