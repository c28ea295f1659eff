# Builds the API reference (docs/Doxyfile) and fails naming every public declaration of
# include/mpp without a `///` comment. Run by the target docs-api and by CTest as docs.api:
#   cmake -DDOXYGEN=<path> -DROOT=<source dir> -DOUTPUT=<dir> [-DVERSION=<x.y.z>] -P cmake/RunDoxygen.cmake
# The reference lands in <dir>/html/index.html, also when declarations lack a comment.
foreach(var DOXYGEN ROOT OUTPUT)
  if(NOT ${var})
    message(FATAL_ERROR "RunDoxygen.cmake: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${OUTPUT}/html" "${OUTPUT}/xml")
file(MAKE_DIRECTORY "${OUTPUT}")
# docs/Doxyfile's paths are relative to the top of the checkout; only the output moves.
file(WRITE "${OUTPUT}/Doxyfile" "@INCLUDE = ${ROOT}/docs/Doxyfile\n"
                                "OUTPUT_DIRECTORY = ${OUTPUT}\n"
                                "PROJECT_NUMBER = ${VERSION}\n")
execute_process(COMMAND "${DOXYGEN}" "${OUTPUT}/Doxyfile" WORKING_DIRECTORY "${ROOT}"
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE warnings)
string(REPLACE "${ROOT}/" "" warnings "${warnings}")
string(STRIP "${warnings}" warnings)

# Doxygen checks the functions, variables and aliases of a namespace only when the namespace itself
# is documented: every namespace of mpp's that has such members (the XML index lists them all)
# must have its page in the HTML.
if(EXISTS "${OUTPUT}/xml/index.xml")
  file(READ "${OUTPUT}/xml/index.xml" index)
  # One entry per compound: its first line, then one line per member.
  string(REGEX MATCHALL "<compound refid=\"namespacempp[^\"]*\" kind=\"namespace\">[^\n]*\n(    <member [^\n]*\n)*"
         compounds "${index}")
  foreach(compound IN LISTS compounds)
    string(REGEX MATCH "refid=\"([^\"]+)\"" unused "${compound}")
    set(refid "${CMAKE_MATCH_1}")
    if(compound MATCHES "<member " AND NOT EXISTS "${OUTPUT}/html/${refid}.html")
      string(REGEX REPLACE "^namespace" "" name "${refid}")
      string(REPLACE "_1_1" "::" name "${name}")
      string(REPLACE "__" "_" name "${name}")
      string(APPEND warnings "\nnamespace ${name}: error: namespace ${name} is not documented, so "
                             "doxygen does not check its members; give it a `/// \\namespace "
                             "${name}` comment (e.g. in its umbrella header).")
    endif()
  endforeach()
elseif(status EQUAL 0)
  string(APPEND warnings "\ndocs.api: doxygen wrote no ${OUTPUT}/xml/index.xml (GENERATE_XML)")
endif()
string(STRIP "${warnings}" warnings)

if(NOT status EQUAL 0 OR warnings)
  string(REGEX MATCHALL "(^|\n)[^\n]*: (warning|error): " found "${warnings}")
  list(LENGTH found count)
  message("${warnings}\n")  # as doxygen wrote them, one per line
  message(FATAL_ERROR "docs.api: ${count} problem(s) above (doxygen's exit status: ${status}). "
                      "Give each public declaration named there a `///` comment: what it is for, "
                      "what the caller must know. Internals go into a namespace detail. "
                      "The reference, as far as it goes: ${OUTPUT}/html/index.html")
endif()
message(STATUS "docs.api: every public declaration has a comment; the reference is "
               "${OUTPUT}/html/index.html")
