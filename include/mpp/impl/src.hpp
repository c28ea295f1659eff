#pragma once
// mpp's functions that are not templates, compiled once: the one unit of a program that includes
// this file defines them all, and every unit of the program (this one included) is compiled with
// MPP_SEPARATE_COMPILATION defined, so that the headers only declare them (mpp/config.hpp).
// mpp's own build compiles its two parts as the libraries mpp_std_compiled and mpp_compiled
// (src/); a project of its own can do the same (docs/using-mpp.md, "Compiling mpp once").
#if !defined(MPP_SEPARATE_COMPILATION)
#error \
    "mpp: mpp/impl/src.hpp is compiled with MPP_SEPARATE_COMPILATION defined, as is every unit of the program that uses mpp; without it the headers define everything inline and this unit is not needed"
#endif

#include "mpp/impl/src_std.hpp"    // the standard library and POSIX only
#include "mpp/impl/src_torch.hpp"  // the rest, on LibTorch
