# Is the LibTorch that find_package(Torch) found one mpp can be built against? Used by mpp's own
# build (MppDependencies.cmake) and by the installed mppConfig.cmake, so both refuse the same
# LibTorch with the same words.
#
#   mpp_check_torch(<out-var>)
#     <out-var> is empty when the LibTorch found (Torch_VERSION, Torch_DIR, TORCH_INCLUDE_DIRS)
#     has the supported version, c10d's Gloo process group and Gloo's headers; otherwise it holds
#     a message (starting with "mpp") naming what was found, what mpp needs and how to point
#     CMake elsewhere.
#     Sets MPP_GLOO_INCLUDE_DIR (a cache entry, so it can be given by hand).
include_guard(GLOBAL)

function(mpp_check_torch out)
  set(${out} "" PARENT_SCOPE)
  # c10d's C++ API changes between LibTorch releases; mpp is written against this one.
  set(supported 1.13)
  string(REPLACE "." ";" parts "${supported}")
  list(GET parts 0 major)
  list(GET parts 1 minor)
  math(EXPR next_minor "${minor} + 1")
  if(Torch_VERSION)
    set(found "LibTorch ${Torch_VERSION} at ${Torch_DIR}")
  else()
    set(found "a LibTorch of unknown version (no TorchConfigVersion.cmake) at ${Torch_DIR}")
  endif()
  string(CONCAT elsewhere "for a LibTorch ${supported} that is not the system's, set Torch_DIR to "
                "the directory of its TorchConfig.cmake or add its prefix to CMAKE_PREFIX_PATH "
                "(docs/using-mpp.md)")

  if(NOT Torch_VERSION OR Torch_VERSION VERSION_LESS "${supported}"
     OR NOT Torch_VERSION VERSION_LESS "${major}.${next_minor}")
    string(CONCAT message "mpp supports LibTorch ${supported}.x only (its c10d C++ API; tested "
                  "with Debian bookworm's 1.13.1) but found ${found}. Install LibTorch "
                  "${supported} (Debian bookworm: apt-get install libtorch-dev); ${elsewhere}.")
    set(${out} "${message}" PARENT_SCOPE)
    return()
  endif()

  # mpp's process groups are c10d's Gloo ones: a LibTorch built without USE_DISTRIBUTED or
  # USE_GLOO lacks this header.
  set(c10d_header torch/csrc/distributed/c10d/ProcessGroupGloo.hpp)
  find_file(mpp_c10d_gloo_header ${c10d_header} PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH
            NO_CACHE)
  if(NOT mpp_c10d_gloo_header)
    list(JOIN TORCH_INCLUDE_DIRS ", " dirs)
    string(CONCAT message "mpp: ${found} has no c10d Gloo process group: ${c10d_header} is not under "
                  "its include directories (${dirs}). mpp needs a LibTorch built with "
                  "USE_DISTRIBUTED and USE_GLOO, as Debian bookworm's libtorch-dev is; "
                  "${elsewhere}.")
    set(${out} "${message}" PARENT_SCOPE)
    return()
  endif()

  # ProcessGroupGloo.hpp includes Gloo's own headers, which Debian ships apart (libgloo-dev).
  set(gloo_header gloo/rendezvous/store.h)
  find_path(MPP_GLOO_INCLUDE_DIR ${gloo_header} HINTS ${TORCH_INCLUDE_DIRS}
            DOC "Directory that holds gloo/ (Gloo's headers, included by c10d)")
  if(NOT MPP_GLOO_INCLUDE_DIR)
    string(CONCAT message "mpp: Gloo's headers are missing: ${gloo_header}, which c10d's "
                  "ProcessGroupGloo.hpp of ${found} includes, is neither beside LibTorch's "
                  "headers nor in the system's include directories. Install them (Debian: "
                  "apt-get install libgloo-dev) or set MPP_GLOO_INCLUDE_DIR to the directory "
                  "that holds gloo/.")
    set(${out} "${message}" PARENT_SCOPE)
  endif()
endfunction()
