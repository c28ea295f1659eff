#pragma once
// Every built-in schedule x comm policy x partition (with and without Recompute), on 2 and 4
// ranks, trains to the same parameters as the monolith from the same initial weights on the
// same batches. One process launch per (schedule, backend, ranks) runs every comm policy over that
// backend and every partition (a LibTorch process costs about 0.6 s of CPU to start).
// One translation unit per schedule keeps each compile short and lets them build in parallel:
// tests/pipeline/CMakeLists.txt generates one per entry of mpp::builtin_schedules, and
// MPP_PIPELINE_EQUIVALENCE(Schedule) registers the workers and the test case of one schedule (a
// schedule outside the list, e.g. a user's, uses the same macro).
#include <doctest/doctest.h>

// GCC 12 reports a false -Wstringop-overflow inside std::string's operator+ once launch/process.hpp
// is inlined here at -O3 (GCC bug 105651); the code is correct, the warning is not.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "mpp/comm.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/partition.hpp"
#include "mpp/pipeline.hpp"
#include "support/policies.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

namespace mpp::test::equivalence {

struct MeanSquaredError {
  at::Tensor operator()(const at::Tensor& output, const at::Tensor& target) const {
    return torch::nn::functional::mse_loss(output, target);
  }
};

constexpr int steps = 3;
// Uneven on purpose in the middle step: 10 samples in 4 micro-batches are 3, 3, 2, 2.
constexpr std::int64_t batch_for_step(int step) { return step == 1 ? 10 : 12; }

inline mpp::models::MlpConfig test_model() {
  return {.hidden = 16, .layers = mpp::test::partition_layers, .seed = 11};
}

/// Trains the pipeline and, on the same process, the monolith; returns what differs ("" if none).
template <class Pipe>
std::string compare_with_monolith(const auto& world) {
  const auto cfg = test_model();
  Pipe pipe(world, mpp::MlpModel{cfg});
  torch::optim::SGD opt(pipe.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  auto monolith = mpp::models::make_full_mlp(cfg);
  torch::optim::SGD mono_opt(monolith->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  MeanSquaredError mse;

  std::string problems;
  for (int step = 0; step < steps; ++step) {
    const auto batch = mpp::models::make_regression_batch(cfg, batch_for_step(step), step);
    opt.zero_grad();
    const double loss = pipe.train_step(pipe.is_first() ? batch.inputs : at::Tensor(),
                                        pipe.is_last() ? batch.targets : at::Tensor(), mse);
    opt.step();

    mono_opt.zero_grad();
    auto mono_loss = mse(monolith->forward(batch.inputs), batch.targets);
    mono_loss.backward();
    mono_opt.step();
    const double expected = mono_loss.template item<double>();
    if (std::abs(loss - expected) > 1e-5 * std::max(1.0, std::abs(expected)))
      problems += "  step " + std::to_string(step) + ": loss " + std::to_string(loss) +
                  " but the monolith's is " + std::to_string(expected) + "\n";
  }

  const auto full = monolith->parameters();
  for (const auto& piece : pipe.pieces()) {
    const auto params = piece.module->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& want = full[static_cast<std::size_t>(2 * piece.layers.begin) + i];
      if (!torch::allclose(params[i], want, 1e-4, 1e-5))
        problems += "  layer " + std::to_string(piece.layers.begin + static_cast<int>(i) / 2) +
                    (i % 2 ? " bias" : " weight") + " differs by up to " +
                    std::to_string((params[i] - want).abs().max().template item<double>()) + "\n";
    }
  }

  // The trace saw every compute action of the table, and the executor held activations.
  const auto& trace = pipe.last_trace();
  int computes = 0, traced = 0;
  for (const auto& a : pipe.actions()) computes += mpp::is_compute(a.op) ? 1 : 0;
  for (const auto& e : trace.events)
    traced +=
        (e.kind == mpp::trace::EventKind::forward || e.kind == mpp::trace::EventKind::backward ||
         e.kind == mpp::trace::EventKind::input_grad ||
         e.kind == mpp::trace::EventKind::weight_grad)
            ? 1
            : 0;
  if (computes != traced)
    problems += "  the trace has " + std::to_string(traced) + " compute events for " +
                std::to_string(computes) + " compute actions\n";
  // Async, every receive of the row is posted once, and the trace times each post.
  int receives = 0, posts = 0;
  for (const auto& a : pipe.actions()) receives += mpp::is_recv(a.op) ? 1 : 0;
  for (const auto& e : trace.events) posts += e.kind == mpp::trace::EventKind::recv_post ? 1 : 0;
  const int expected_posts =
      Pipe::comm_type::semantics == mpp::CommSemantics::buffered ? receives : 0;
  if (posts != expected_posts)
    problems += "  the trace has " + std::to_string(posts) + " receive posts for " +
                std::to_string(expected_posts) + " posted receives\n";
  if (trace.peak_activation_bytes <= 0 || trace.peak_in_flight <= 0)
    problems += "  no activation memory was recorded\n";

  if (!problems.empty())
    problems = Pipe::name() + " on rank " + std::to_string(pipe.rank()) + ":\n" + problems;
  return problems;
}

/// The worker's registry name. `label` names the schedule: its display name, or the test's own
/// label where several schedules share one (every `Custom` table displays as "Custom").
template <class Backend, int P>
std::string worker_name(const std::string& label) {
  return "pipeline-equivalence/" + label + "/" + std::string(Backend::name) + "/P" +
         std::to_string(P);
}

/// True for the first policy of comm_policies over Comm's backend: that policy's turn starts the
/// world in which every policy over the backend runs.
template <class Comm>
constexpr bool first_over_its_backend() {
  bool seen = false, first = false;
  for_each_type<comm_policies>([&]<class Other>() {
    if (seen || !std::is_same_v<typename Other::backend, typename Comm::backend>) return;
    seen = true;
    first = std::is_same_v<Other, Comm>;
  });
  return first;
}

template <class Sched, class Backend, int P>
int equivalence_worker(int, char**) {
  torch::set_num_threads(1);
  auto world = mpp::init_process_group<Backend>();
  std::string problems;
  int cases = 0;
  for_each_type<comm_policies>([&]<class Comm>() {
    if constexpr (std::is_same_v<typename Comm::backend, Backend>)
      for_each_type<stage_policies<P, Sched::chunks_per_rank>>([&]<class Stages>() {
        problems += compare_with_monolith<mpp::Pipeline<Stages, Sched, Comm>>(world);
        ++cases;
      });
  });
  if (!problems.empty()) {
    std::fprintf(stderr, "%s", problems.c_str());
    return 1;
  }
  std::printf("rank %d: %d pipelines equal the monolith\n", world.rank(), cases);
  return 0;
}

/// Registers one worker per (backend of comm_policies, rank count in `Ranks`) of schedule `Sched`
/// under `label`. False when another schedule holds one of those names already: its workers would
/// run in this test's place.
template <class Sched, int... Ranks>
bool register_workers(const std::string& label) {
  bool own = true;
  for_each_type<comm_policies>([&]<class Comm>() {
    using Worker = int (*)(int, char**);
    const auto add = [&](const std::string& name, Worker worker) {
      const auto [it, inserted] = worker_registry().emplace(name, worker);
      const Worker* held = it->second.template target<Worker>();
      own = own && (inserted || (held != nullptr && *held == worker));
    };
    using Backend = typename Comm::backend;
    if constexpr (first_over_its_backend<Comm>())
      (add(worker_name<Backend, Ranks>(label), &equivalence_worker<Sched, Backend, Ranks>), ...);
  });
  return own;
}

template <class Backend, int P>
void run_equivalence(const std::string& label) {
  WorldOptions options;
  options.timeout = std::chrono::seconds(120);
  options.env = {{"MPP_TIMEOUT_S", "30"}, {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  const auto world = run_world(P, worker_name<Backend, P>(label), options);
  INFO(worker_name<Backend, P>(label));
  CHECK_MESSAGE(world.ok(), world.report());
}

template <int... Ranks>
void run_all(bool registered, const std::string& label) {
  const std::string clash = "another schedule registered the workers named '" + label +
                            "': give this test its own label (MPP_PIPELINE_EQUIVALENCE_AS)";
  REQUIRE_MESSAGE(registered, clash);
  for_each_type<comm_policies>([&]<class Comm>() {
    if constexpr (first_over_its_backend<Comm>())
      (run_equivalence<typename Comm::backend, Ranks>(label), ...);
  });
}

/// The test case's name for the schedule labelled `label`, kept for the program's life (doctest
/// keeps the pointer).
template <class Sched, int... Ranks>
const char* test_name(const std::string& label) {
  static const std::string name =
      "pipeline training equals the monolith for every comm policy, partition and Recompute: " +
      label + ((" on " + std::to_string(Ranks) + " ranks") + ... + std::string());
  return name.c_str();
}

}  // namespace mpp::test::equivalence

/// One schedule's workers (registered before main() runs) and its test case, on `RANKS` ranks,
/// named `LABEL`: for schedules whose display name others share (every `Custom` table).
/// The registration flag is named by __COUNTER__: a unity group holds several schedules.
#define MPP_PIPELINE_EQUIVALENCE_AS(LABEL, RANKS, ...)                                          \
  MPP_DETAIL_EQUIVALENCE_AS(MPP_DETAIL_CAT(equivalence_registered_, __COUNTER__), LABEL, RANKS, \
                            __VA_ARGS__)
#define MPP_DETAIL_EQUIVALENCE_AS(FLAG, LABEL, RANKS, ...)                               \
  namespace {                                                                            \
  const bool FLAG = mpp::test::equivalence::register_workers<__VA_ARGS__, RANKS>(LABEL); \
  }                                                                                      \
  TEST_CASE((mpp::test::equivalence::test_name<__VA_ARGS__, RANKS>(LABEL))) {            \
    mpp::test::equivalence::run_all<RANKS>(FLAG, LABEL);                                 \
  }

/// The same, named by the schedule's display name, on 2 and 4 ranks.
#define MPP_PIPELINE_EQUIVALENCE(...) \
  MPP_DETAIL_EQUIVALENCE(MPP_DETAIL_CAT(equivalence_registered_, __COUNTER__), __VA_ARGS__)
#define MPP_DETAIL_EQUIVALENCE(FLAG, ...)                                                   \
  namespace {                                                                               \
  const bool FLAG = mpp::test::equivalence::register_workers<__VA_ARGS__, 2, 4>(            \
      mpp::schedule_display_name<__VA_ARGS__>());                                           \
  }                                                                                         \
  TEST_CASE((mpp::test::equivalence::test_name<__VA_ARGS__>(                                \
      mpp::schedule_display_name<__VA_ARGS__>()))) {                                        \
    mpp::test::equivalence::run_all<2, 4>(FLAG, mpp::schedule_display_name<__VA_ARGS__>()); \
  }
