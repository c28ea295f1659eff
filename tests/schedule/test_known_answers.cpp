// Known answers of the literature, checked at run time over the whole grid.
#include <doctest/doctest.h>

#include <memory>

#include "mpp/schedule.hpp"

using namespace mpp;

namespace {
std::unique_ptr<Plan> plan_of(std::string_view kind, int p, int m, int v, CommSemantics sem) {
  auto compute = std::make_unique<ScheduleTable>();
  generate_into(*compute, ScheduleSpec{kind, m, v}, p);
  auto plan = std::make_unique<Plan>();
  plan_into(*plan, *compute, sem);
  return plan;
}
}  // namespace

TEST_CASE("GPipe and 1F1B: bubble (p-1)/(m+p-1); peak m for GPipe, min(m, p-r) for 1F1B") {
  for (int sem = 0; sem < 2; ++sem)
    for (int p = 2; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(sem);
        const auto gpipe = plan_of("GPipe", p, m, 1, CommSemantics(sem));
        const auto ofob = plan_of("OneFOneB", p, m, 1, CommSemantics(sem));
        REQUIRE(gpipe->figures.ok);
        REQUIRE(ofob->figures.ok);
        for (const Plan* plan : {gpipe.get(), ofob.get()}) {
          const VerifyResult& r = plan->figures;
          // Exact: idle * (m + p - 1) == (p - 1) * p * makespan, in integers.
          CHECK(static_cast<long>(r.total_idle()) * (m + p - 1) ==
                static_cast<long>(p - 1) * p * r.makespan);
          CHECK(r.makespan == 3 * (m + p - 1));
        }
        for (int r = 0; r < p; ++r) {
          CHECK(gpipe->figures.peak_in_flight[r] == m);
          CHECK(ofob->figures.peak_in_flight[r] == (m < p - r ? m : p - r));
        }
      }
}
