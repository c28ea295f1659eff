#pragma once
// Timing computes in core time while ranks outnumber cores (MPP_TRACE_CORE_TIME=1, see
// recorder.hpp): there a compute's wall time also counts the other ranks' turns on its core,
// which the cost model charges itself (Costs::cores). What a run that writes measured costs
// holds while it measures.
//
//   const int cores = mpp::shared_cores(world);
//   const mpp::trace::CoreTimeWhileShared core_time(world.size(), cores);
//   ... train, then mpp::measured_costs_json(figures, cores);
#include <cstdlib>

namespace mpp::trace {

/// Sets MPP_TRACE_CORE_TIME=1 while it lives when `ranks` outnumber `cores` (and `cores` > 0),
/// and removes it again at the end. A value the user set is kept, whatever it is ("0": wall
/// time anyway).
class CoreTimeWhileShared {
 public:
  /// Times computes in core time from here on if `ranks` > `cores` > 0 and the user set nothing.
  CoreTimeWhileShared(int ranks, int cores) : cores_(cores > 0 && cores < ranks ? cores : 0) {
    if (cores_ == 0 || std::getenv("MPP_TRACE_CORE_TIME") != nullptr) return;
    ::setenv("MPP_TRACE_CORE_TIME", "1", /*overwrite=*/1);
    set_ = true;
  }
  /// Removes MPP_TRACE_CORE_TIME if this object set it.
  ~CoreTimeWhileShared() {
    if (set_) ::unsetenv("MPP_TRACE_CORE_TIME");
  }
  CoreTimeWhileShared(const CoreTimeWhileShared&) = delete;             ///< One owner.
  CoreTimeWhileShared& operator=(const CoreTimeWhileShared&) = delete;  ///< One owner.

  /// The cores the ranks share when they outnumber them, else 0 (a core per rank): what
  /// Costs::cores takes for a model of this run.
  int cores() const { return cores_; }

 private:
  int cores_ = 0;
  bool set_ = false;
};

}  // namespace mpp::trace
