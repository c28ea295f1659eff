#pragma once
// How mpp's functions that are not templates are compiled (docs/design.md, "Compiled once").
//
// By default mpp is header-only: each such function is defined `inline` in its header, or in the
// .ipp file beside it (`impl/<header>.ipp`) that the header includes at its end, and every unit
// that uses it compiles it again. With MPP_SEPARATE_COMPILATION defined in every unit of a
// program, the headers only declare them and one unit compiles them all by including
// mpp/impl/src.hpp (the torch-free part alone: mpp/impl/src_std.hpp). mpp's own build does that
// (the CMake option MPP_SEPARATE_COMPILATION, targets mpp_compiled and mpp_std_compiled).

/// `inline` in the default header-only mode; nothing when MPP_SEPARATE_COMPILATION is defined, so
/// that a function declared with it is defined once, in the unit that includes mpp/impl/src.hpp.
#if defined(MPP_SEPARATE_COMPILATION)
#define MPP_DECL
#else
#define MPP_DECL inline
#endif
