// A schedule written outside the library's list, as a user would: a type meeting mpp::schedule
// with its own generator. It goes through what the built-ins go through: the verifier's proof in
// a static_assert (the static grid's check), the equivalence test against the monolith on 2 and
// 4 ranks for every comm policy and partition (the built-ins' macro), and the measuring helpers
// the labs and benchmarks use (train_and_measure, report_last_step).
#include <doctest/doctest.h>

#include <string_view>

#include "mpp/schedule/concepts.hpp"
#include "pipeline/equivalence.hpp"

namespace user {

/// GPipe with the backwards in reverse micro-batch order (the last forward's backward first, as
/// a loop `for mb in reversed(range(M))` writes it): same bubble, and each rank can start its
/// backward on the micro-batch whose activations are freshest.
template <int M>
struct ReverseGPipe {
  static constexpr int micro_batches = M;
  static constexpr int chunks_per_rank = 1;
  static constexpr std::string_view name = "ReverseGPipe";
  static constexpr mpp::ScheduleTable table(int ranks) {
    mpp::ScheduleTable t{};
    t.ranks = ranks;
    t.micro_batches = M;
    for (int r = 0; r < ranks; ++r) {
      for (int mb = 0; mb < M; ++mb) t.push(r, mpp::actions::F(mb));
      for (int mb = M - 1; mb >= 0; --mb) t.push(r, mpp::actions::B(mb));
    }
    return t;
  }
};

}  // namespace user

static_assert(mpp::schedule<user::ReverseGPipe<4>>);
// The static grid's proof, for the ranks the equivalence test runs.
static_assert(mpp::sound<mpp::verify<user::ReverseGPipe<4>, mpp::Async<mpp::Gloo>>(2)>);
static_assert(mpp::sound<mpp::verify<user::ReverseGPipe<4>, mpp::Blocking<mpp::Gloo>>(4)>);
// Its figures: GPipe's bubble, every micro-batch in flight at the peak.
static_assert(mpp::verify<user::ReverseGPipe<4>, mpp::Async<mpp::Gloo>>(4).makespan ==
              mpp::verify<mpp::GPipe<4>, mpp::Async<mpp::Gloo>>(4).makespan);

MPP_PIPELINE_EQUIVALENCE(user::ReverseGPipe<4>)

namespace {

int measure_user_schedule(int, char**) {
  torch::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Gloo>();
  using Pipe = mpp::Pipeline<mpp::Uniform<2>, user::ReverseGPipe<4>, mpp::Async<mpp::Gloo>>;
  const auto cfg = mpp::test::equivalence::test_model();
  Pipe pipe(world, mpp::MlpModel{cfg});
  torch::optim::SGD opt(pipe.parameters(), torch::optim::SGDOptions(0.01));
  const auto figures = mpp::train_and_measure(
      pipe, opt, [&](int step) { return mpp::models::make_regression_batch(cfg, 8, step); },
      mpp::test::equivalence::MeanSquaredError{}, 2, 1);
  if (world.rank() == 0) {
    if (!figures.report || figures.samples_per_second <= 0.0) {
      std::fprintf(stderr, "no report or no samples/s for %s\n", figures.pipeline.c_str());
      return 1;
    }
    if (figures.report->predicted_unit.makespan != Pipe::predicted().makespan ||
        figures.report->figures.peak_in_flight.size() != 2) {
      std::fprintf(stderr, "the report does not describe the pipeline:\n%s",
                   figures.describe().c_str());
      return 1;
    }
    std::printf("%s", figures.describe().c_str());
  }
  return 0;
}

const bool measure_registered = [] {
  mpp::test::worker_registry().emplace("pipeline-user-schedule/measure", &measure_user_schedule);
  return true;
}();

}  // namespace

TEST_CASE(
    "a schedule outside the library's list is measured by the labs' and benchmarks' helpers") {
  REQUIRE(measure_registered);
  mpp::test::WorldOptions options;
  options.timeout = std::chrono::seconds(120);
  options.env = {{"MPP_TIMEOUT_S", "30"}, {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  const auto world = mpp::test::run_world(2, "pipeline-user-schedule/measure", options);
  CHECK_MESSAGE(world.ok(), world.report());
}
