# Third-party dependencies, all from Debian bookworm packages (see scripts/setup).
#
# What mpp::mpp's public headers need, and so what the installed mppConfig.cmake asks for too:
# LibTorch 1.13 with c10d and Gloo's headers (libtorch-dev, libgloo-dev) and nlohmann/json
# (nlohmann-json3-dev, for the checkpoint manifests).
find_package(Torch REQUIRED)
include(MppCheckTorch)
mpp_check_torch(mpp_torch_problem)
if(mpp_torch_problem)
  message(FATAL_ERROR "${mpp_torch_problem}")
endif()
find_package(nlohmann_json 3 REQUIRED)

# Only the project's own tests and benchmarks use Boost: they instantiate the one list of policies
# through Boost.Hana (tests/support/policies.hpp). No public header includes it.
if(MPP_BUILD_TESTS OR MPP_BUILD_BENCHMARKS)
  find_package(Boost 1.74 REQUIRED)    # libboost-dev (Boost.Hana is header-only)
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
