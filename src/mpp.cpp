// mpp's functions on LibTorch that are not templates, compiled once for mpp's own targets
// (mpp_compiled, cmake/MppHelpers.cmake; the rest is src/mpp_std.cpp's); built with
// MPP_SEPARATE_COMPILATION, as every unit that links it.
#include "mpp/impl/src_torch.hpp"
