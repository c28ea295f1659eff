#pragma once
/// \namespace mpp::trace
/// Per-rank step traces: events, measured bubble and memory, Chrome trace JSON and timelines;
/// line plots, bar charts and lane charts for the other figures.
#include "mpp/trace/event.hpp"
#include "mpp/trace/plot.hpp"
#include "mpp/trace/recorder.hpp"
#include "mpp/trace/timeline.hpp"
