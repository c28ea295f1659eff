# cmake -P script run by the install.consumer test (see CMakeLists.txt for its variables): builds
# the consumer project against the installed prefix and runs it on 2 ranks with the installed
# mpprun.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    list(JOIN ARGV " " command)
    message(FATAL_ERROR "install.consumer: `${command}` failed (${code}):\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(build ${MPP_SCRATCH}/consumer-build)
file(REMOVE_RECURSE ${build})
set(launcher "")
if(MPP_CCACHE)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${MPP_CCACHE})
endif()
# Compiled as mpp's tests are (MPP_TEST_OPTIMIZATION, when set): what it checks does not depend on
# the optimiser.
set(flags "")
if(MPP_TEST_OPTIMIZATION)
  set(flags "-DCMAKE_CXX_FLAGS_RELEASE=${MPP_TEST_OPTIMIZATION} -DNDEBUG")
endif()
run(${CMAKE_COMMAND} -S ${MPP_CONSUMER_SOURCE} -B ${build} -G ${MPP_GENERATOR}
    -DCMAKE_BUILD_TYPE=Release ${flags} -DCMAKE_CXX_COMPILER=${MPP_CXX_COMPILER}
    -DCMAKE_PREFIX_PATH=${MPP_PREFIX} ${launcher})
run(${CMAKE_COMMAND} --build ${build})
run(${MPP_PREFIX}/bin/mpprun --nproc-per-node 2 --timeout 240 --log-dir ${build}/logs
    ${build}/mpp_consumer)
message(STATUS "${run_output}")
foreach(line "pipeline ok: Pipeline<Uniform<2>, OneFOneB<4>" "pipeline ok: Pipeline<Uniform<2>, Custom"
             "ddp ok: DDP<")
  string(FIND "${run_output}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "install.consumer: no '${line}' in the consumer's output")
  endif()
endforeach()
message(STATUS "mpp consumer: ok")
