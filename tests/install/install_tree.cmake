# cmake -P script run by the install.tree test (see CMakeLists.txt): installs the build tree into
# MPP_PREFIX and checks that the package's files are there.
file(REMOVE_RECURSE ${MPP_PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${MPP_BINARY_DIR} --prefix ${MPP_PREFIX}
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "install.tree: `cmake --install ${MPP_BINARY_DIR}` failed (${code}):\n"
                      "${out}\n${err}")
endif()
foreach(file include/mpp/pipeline.hpp include/mpp/data_parallel.hpp include/mpp/comm/policy.hpp
             include/mpp/launch/launcher.hpp bin/mpprun bin/mpp-schedule share/doc/mpp/LICENSE
             share/doc/mpp/CHANGELOG.md
             # what a project needs to compile mpp once (docs/using-mpp.md)
             include/mpp/config.hpp include/mpp/impl/src.hpp include/mpp/comm/impl/shm_group.ipp
             include/mpp/launch/impl/launcher.ipp)
  if(NOT EXISTS ${MPP_PREFIX}/${file})
    message(FATAL_ERROR "install.tree: ${file} missing from the install tree ${MPP_PREFIX}")
  endif()
endforeach()
foreach(file mppConfig.cmake mppConfigVersion.cmake mppTargets.cmake MppCheckTorch.cmake)
  file(GLOB_RECURSE found ${MPP_PREFIX}/*/cmake/mpp/${file})
  if(NOT found)
    message(FATAL_ERROR "install.tree: no ${file} under ${MPP_PREFIX}/<libdir>/cmake/mpp")
  endif()
endforeach()
# The exported targets name what the public headers include, and nothing else.
file(GLOB_RECURSE targets ${MPP_PREFIX}/*/cmake/mpp/mppTargets.cmake)
file(READ "${targets}" text)
if(text MATCHES "Boost")
  message(FATAL_ERROR "install.tree: mppTargets.cmake names Boost, which no public header uses")
endif()
if(NOT text MATCHES "nlohmann_json::nlohmann_json")
  message(FATAL_ERROR "install.tree: mppTargets.cmake does not name nlohmann_json, which the "
                      "checkpoint headers include")
endif()
message(STATUS "install.tree: ok (${MPP_PREFIX})")
