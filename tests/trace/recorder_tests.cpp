// The step recorder: computes timed by their thread's CPU time when MPP_TRACE_CORE_TIME=1 (what
// the cost model's cores take), everything else by the wall clock.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <chrono>
#include <thread>

#include "mpp/trace/recorder.hpp"

namespace {

/// A forward and a receive wait of `rank`'s step, each around a 30 ms sleep: wall time, but
/// hardly any CPU time.
mpp::trace::RankTrace sleepy_step() {
  mpp::trace::Recorder recorder;
  recorder.begin_step(0, 4);
  for (const auto kind : {mpp::trace::EventKind::forward, mpp::trace::EventKind::recv_wait}) {
    const auto begin = recorder.now();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    recorder.record(kind, mpp::Op::F, 0, 0, -1, begin, recorder.now());
  }
  recorder.end_step();
  return recorder.trace();
}

}  // namespace

TEST_CASE("the recorder times computes in core time only when asked") {
  ::unsetenv("MPP_TRACE_CORE_TIME");
  const auto wall = sleepy_step();
  REQUIRE(wall.events.size() == 2);
  CHECK_FALSE(wall.core_time);
  CHECK(wall.events[0].duration_us() >= 30e3);
  CHECK(wall.events[1].duration_us() >= 30e3);

  ::setenv("MPP_TRACE_CORE_TIME", "1", 1);
  const auto core = sleepy_step();
  ::unsetenv("MPP_TRACE_CORE_TIME");
  REQUIRE(core.events.size() == 2);
  CHECK(core.core_time);  // the trace says so: step_figures charges no time between its events
  CHECK(core.events[0].duration_us() < 10e3);   // the forward slept: little CPU time
  CHECK(core.events[1].duration_us() >= 30e3);  // a wait keeps the wall clock
  CHECK(core.step_us >= 60e3);                  // and so does the step
  CHECK(core.events[1].begin_us >= 30e3);       // events stay on the wall clock's axis
}
