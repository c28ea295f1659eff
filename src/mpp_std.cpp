// The torch-free part of mpp compiled once (mpp_std_compiled, cmake/MppHelpers.cmake): what the
// programs that link mpp::schedule alone use; built with MPP_SEPARATE_COMPILATION.
#include "mpp/impl/src_std.hpp"
