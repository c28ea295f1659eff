#pragma once
// The part of mpp/impl/src.hpp that needs only the standard library and POSIX (trace/, launch/,
// the store's wire format and server, the launch variables): what a program that links
// mpp::schedule alone compiles once. mpp's own build compiles it as mpp_std_compiled
// (src/mpp_std.cpp). MPP_SEPARATE_COMPILATION must be defined, as for src.hpp.
#if !defined(MPP_SEPARATE_COMPILATION)
#error \
    "mpp: mpp/impl/src_std.hpp is compiled with MPP_SEPARATE_COMPILATION defined, as is every unit of the program that uses mpp"
#endif

#include "mpp/config.hpp"

#include "mpp/comm/impl/env.ipp"
#include "mpp/comm/impl/store_server.ipp"
#include "mpp/comm/impl/store_wire.ipp"
#include "mpp/launch/impl/cpu_binding.ipp"
#include "mpp/launch/impl/cpu_latency.ipp"
#include "mpp/launch/impl/environment.ipp"
#include "mpp/launch/impl/launcher.ipp"
#include "mpp/launch/impl/process.ipp"
#include "mpp/trace/impl/costs_json.ipp"
#include "mpp/trace/impl/plot.ipp"
#include "mpp/trace/impl/timeline.ipp"
