# Third-party dependencies, all from Debian bookworm packages (see scripts/setup).
find_package(Torch REQUIRED)           # libtorch-dev
find_package(Boost 1.74 REQUIRED)      # libboost-dev (Boost.Hana is header-only)

# c10d's ProcessGroupGloo.hpp includes Gloo's headers (libgloo-dev).
find_path(MPP_GLOO_INCLUDE_DIR gloo/rendezvous/store.h)
if(NOT MPP_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "mpp: Gloo headers not found; install them with: apt-get install libgloo-dev")
endif()

# NCCL is only meaningful when LibTorch itself was built with CUDA.
set(MPP_TORCH_HAS_CUDA OFF)
if(TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  set(MPP_TORCH_HAS_CUDA ON)
endif()
option(MPP_WITH_NCCL "Build the NCCL communication policy (needs LibTorch with CUDA)" ${MPP_TORCH_HAS_CUDA})
if(MPP_WITH_NCCL AND NOT MPP_TORCH_HAS_CUDA)
  message(FATAL_ERROR "mpp: MPP_WITH_NCCL=ON but this LibTorch has no CUDA; configure with -DMPP_WITH_NCCL=OFF")
endif()
