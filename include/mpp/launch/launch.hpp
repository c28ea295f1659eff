#pragma once
/// \namespace mpp::launch
/// The process launcher (standard library and POSIX only): the torchrun variables, fork+exec of
/// each rank in its own process group, output capture, deadline and failure propagation.
#include "mpp/launch/cpu_latency.hpp"
#include "mpp/launch/environment.hpp"
#include "mpp/launch/launcher.hpp"
#include "mpp/launch/process.hpp"
