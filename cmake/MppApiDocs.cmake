# The API reference from the headers' `///` comments (docs/Doxyfile), when doxygen is installed:
#   cmake --build --preset release --target docs-api   ->  build/release/docs/api/html/index.html
# The target fails, after writing the reference, when a public declaration has no comment; the
# CTest docs.api (tests/docs) runs the same check.
include_guard(GLOBAL)

find_program(MPP_DOXYGEN doxygen DOC "doxygen, for the API reference (target docs-api)")
set(MPP_API_DOCS_COMMAND "")
if(MPP_DOXYGEN)
  set(MPP_API_DOCS_COMMAND ${CMAKE_COMMAND} -DDOXYGEN=${MPP_DOXYGEN} -DROOT=${PROJECT_SOURCE_DIR}
      -DOUTPUT=${PROJECT_BINARY_DIR}/docs/api -DVERSION=${PROJECT_VERSION}
      -P ${PROJECT_SOURCE_DIR}/cmake/RunDoxygen.cmake)
  add_custom_target(docs-api COMMAND ${MPP_API_DOCS_COMMAND}
                    COMMENT "API reference (doxygen) into ${PROJECT_BINARY_DIR}/docs/api/html"
                    VERBATIM)
endif()
