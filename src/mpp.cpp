// mpp's functions that are not templates, compiled once for mpp's own targets (mpp_compiled,
// cmake/MppHelpers.cmake); built with MPP_SEPARATE_COMPILATION, as every unit that links it.
#include "mpp/impl/src.hpp"
