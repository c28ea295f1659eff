#pragma once
// Per-rank step traces: events, measured bubble and memory, Chrome trace JSON and timelines.
#include "mpp/trace/event.hpp"
#include "mpp/trace/recorder.hpp"
#include "mpp/trace/timeline.hpp"
