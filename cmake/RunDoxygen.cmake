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

# Doxygen neither warns about an undocumented namespace or concept nor gives it a page, and it
# checks the functions, variables and aliases of a namespace only when the namespace is documented.
# So every concept of mpp's, and every namespace that has such members, must have its page (the
# XML index lists them all, documented or not).
if(EXISTS "${OUTPUT}/xml/index.xml")
  file(READ "${OUTPUT}/xml/index.xml" index)
  # A ';' (as in &quot; of `operator""_act`) would split CMake's list of compounds mid-entry.
  string(REPLACE ";" "," index "${index}")
  # One entry per compound: its first line, then one line per member.
  string(REGEX MATCHALL "<compound refid=\"(namespace|concept)mpp[^\"]*\" kind=\"[a-z]+\"><name>[^<]*</name>\n(    <member [^\n]*\n)*"
         compounds "${index}")
  foreach(compound IN LISTS compounds)
    string(REGEX MATCH "refid=\"([^\"]+)\" kind=\"([a-z]+)\"><name>([^<]*)<" unused "${compound}")
    set(refid "${CMAKE_MATCH_1}")
    set(kind "${CMAKE_MATCH_2}")
    set(name "${CMAKE_MATCH_3}")
    if(EXISTS "${OUTPUT}/html/${refid}.html" OR (kind STREQUAL "namespace" AND NOT compound MATCHES "<member "))
      continue()
    endif()
    set(where "${kind} ${name}")
    file(STRINGS "${OUTPUT}/xml/${refid}.xml" location REGEX "<location file=" LIMIT_COUNT 1)
    if(location MATCHES "file=\"([^\"]+)\" line=\"([0-9]+)\"")
      set(file "${CMAKE_MATCH_1}")
      set(line "${CMAKE_MATCH_2}")
      if(NOT IS_ABSOLUTE "${file}" AND EXISTS "${ROOT}/include/${file}")
        set(file "include/${file}")  # as STRIP_FROM_PATH left it
      endif()
      string(REPLACE "${ROOT}/" "" where "${file}:${line}")
    endif()
    if(kind STREQUAL "namespace")
      string(APPEND warnings "\n${where}: error: namespace ${name} is not documented, so doxygen "
                             "does not check its members; give it a `/// \\namespace ${name}` "
                             "comment (e.g. in its umbrella header).")
    else()
      string(APPEND warnings "\n${where}: error: concept ${name} is not documented.")
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
