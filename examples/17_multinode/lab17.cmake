# Defines lab17_multinode when the layers it uses are present (comm, DDP, pipeline, checkpoints).
foreach(header comm/process_group.hpp data_parallel/ddp.hpp pipeline/pipeline.hpp checkpoint/checkpoint.hpp)
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/include/mpp/${header})
    message(STATUS "lab17_multinode: include/mpp/${header} missing, lab not built")
    return()
  endif()
endforeach()
find_package(CLI11 REQUIRED)
mpp_add_executable(lab17_multinode TORCH
  SOURCES ${PROJECT_SOURCE_DIR}/examples/17_multinode/multinode_train.cpp
  LIBS CLI11::CLI11)
# One place for the binary whichever directory defined it: build/examples/17_multinode/.
set_target_properties(lab17_multinode PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/examples/17_multinode)
