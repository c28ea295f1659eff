// Bad inputs fail with the rule and the fix in the message, on the rank that can see the
// problem; a rank that dies mid-step makes the others fail within their deadline, naming a peer.
#include <doctest/doctest.h>

// GCC 12 reports a false -Wstringop-overflow inside std::string's operator+ once launch/process.hpp
// is inlined here at -O3 (GCC bug 105651); the code is correct, the warning is not.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "mpp/comm.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/partition.hpp"
#include "mpp/pipeline.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

namespace {

struct MeanSquaredError {
  at::Tensor operator()(const at::Tensor& output, const at::Tensor& target) const {
    return torch::nn::functional::mse_loss(output, target);
  }
};

/// A model whose third layer takes 24 features while the second one gives 16: the cut between
/// two stages there does not fit, and the receiving stage must say so.
struct MisfitModel {
  int num_layers() const { return 4; }
  std::int64_t layer_parameters(int layer) const { return input_shape(layer)[0] * 16 + 16; }
  std::vector<std::int64_t> input_shape(int layer) const { return {layer == 2 ? 24 : 16}; }
  c10::ScalarType dtype() const { return c10::kFloat; }
  torch::nn::Sequential build(int begin, int end) const {
    torch::nn::Sequential seq;
    for (int i = begin; i < end; ++i) {
      seq->push_back(torch::nn::Linear(input_shape(i)[0], 16));
      seq->push_back(torch::nn::ReLU());
    }
    return seq;
  }
};
static_assert(mpp::layered_model<MisfitModel>);

const mpp::models::MlpConfig small{.hidden = 16, .layers = 12, .seed = 5};

template <class Pipe, class Model>
void train_once(const auto& world, const Model& model, std::int64_t batch_size,
                c10::ScalarType input_dtype = c10::kFloat) {
  Pipe pipe(world, model);
  const auto batch = mpp::models::make_regression_batch(small, batch_size, 0);
  pipe.train_step(pipe.is_first() ? batch.inputs.to(input_dtype) : at::Tensor(),
                  pipe.is_last() ? batch.targets : at::Tensor(), MeanSquaredError{});
}

MPP_TEST_WORKER("pipeline-errors/world-size") {
  auto world = mpp::init_process_group();
  train_once<mpp::Pipeline<mpp::Uniform<2>, mpp::GPipe<4>, mpp::Async<mpp::Gloo>>>(
      world, mpp::MlpModel{small}, 8);
  return 0;
}

MPP_TEST_WORKER("pipeline-errors/more-stages-than-layers") {
  auto world = mpp::init_process_group();
  const mpp::MlpModel three_layers{{.hidden = 16, .layers = 3}};
  train_once<mpp::Pipeline<mpp::Uniform<4>, mpp::GPipe<4>, mpp::Async<mpp::Gloo>>>(world,
                                                                                   three_layers, 8);
  return 0;
}

MPP_TEST_WORKER("pipeline-errors/explicit-sum") {
  auto world = mpp::init_process_group();
  train_once<mpp::Pipeline<mpp::Explicit<5, 4>, mpp::GPipe<4>, mpp::Async<mpp::Gloo>>>(
      world, mpp::MlpModel{small}, 8);
  return 0;
}

MPP_TEST_WORKER("pipeline-errors/batch-smaller-than-m") {
  auto world = mpp::init_process_group();
  train_once<mpp::Pipeline<mpp::Uniform<2>, mpp::GPipe<8>, mpp::Blocking<mpp::Gloo>>>(
      world, mpp::MlpModel{small}, 5);
  return 0;
}

MPP_TEST_WORKER("pipeline-errors/shape-mismatch") {
  auto world = mpp::init_process_group();
  train_once<mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<2>, mpp::Async<mpp::Gloo>>>(
      world, MisfitModel{}, 8);
  return 0;
}

MPP_TEST_WORKER("pipeline-errors/input-dtype") {
  auto world = mpp::init_process_group();
  train_once<mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<2>, mpp::Blocking<mpp::Gloo>>>(
      world, mpp::MlpModel{small}, 8, c10::kDouble);
  return 0;
}

// The last rank exits in the middle of step 1 (inside its third micro-batch's loss).
template <class Comm>
int dying_rank_worker() {
  torch::set_num_threads(1);
  auto world = mpp::init_process_group();
  mpp::Pipeline<mpp::Uniform<4>, mpp::OneFOneB<4>, Comm> pipe(world, mpp::MlpModel{small});
  int calls = 0;
  auto loss = [&](const at::Tensor& out, const at::Tensor& target) {
    if (++calls == 7) std::_Exit(7);  // micro-batch 2 of the second step
    return torch::nn::functional::mse_loss(out, target);
  };
  for (int step = 0; step < 3; ++step) {
    const auto batch = mpp::models::make_regression_batch(small, 8, step);
    pipe.train_step(pipe.is_first() ? batch.inputs : at::Tensor(),
                    pipe.is_last() ? batch.targets : at::Tensor(), loss);
  }
  return 0;
}
MPP_TEST_WORKER("pipeline-errors/rank-dies-blocking") {
  return dying_rank_worker<mpp::Blocking<mpp::Gloo>>();
}
MPP_TEST_WORKER("pipeline-errors/rank-dies-async") {
  return dying_rank_worker<mpp::Async<mpp::Gloo>>();
}

mpp::test::WorldOptions error_options() {
  mpp::test::WorldOptions options;
  options.timeout = std::chrono::seconds(60);
  options.env = {{"MPP_TIMEOUT_S", "20"}, {"OMP_NUM_THREADS", "1"}};
  options.stop_all_on_failure = false;  // every rank reports its own error
  return options;
}

/// Runs `worker` and checks that `rank` failed with `message` in its error output.
void expect_failure(int world_size, const char* worker, int rank, const std::string& message) {
  const auto world = mpp::test::run_world(world_size, worker, error_options());
  INFO(world.report());
  CHECK_FALSE(world.timed_out());
  CHECK(world.exit_code(rank) != 0);
  CHECK_MESSAGE(world.error_output(rank).find(message) != std::string::npos, "rank ", rank,
                " error output:\n", world.error_output(rank), "\nexpected: ", message);
}

}  // namespace

TEST_CASE("a world that does not match the pipeline's ranks is rejected with the launch line") {
  expect_failure(3, "pipeline-errors/world-size", 0,
                 "mpp: Pipeline<Uniform<2>, GPipe<4>, Async<Gloo>> runs on 2 ranks but its process "
                 "group has 3; "
                 "launch 2 ranks (mpprun --nproc-per-node 2)");
}

TEST_CASE("more stages than layers, and explicit sizes that miss the layer count, are rejected") {
  expect_failure(4, "pipeline-errors/more-stages-than-layers", 2,
                 "mpp: Uniform<4> cuts the model into 4 pieces but the model has only 3 layers");
  expect_failure(
      2, "pipeline-errors/explicit-sum", 1,
      "mpp: Explicit<5,4> covers 9 layers but the model has 12; make the sizes sum to 12");
}

TEST_CASE("a batch smaller than the number of micro-batches is rejected") {
  expect_failure(2, "pipeline-errors/batch-smaller-than-m", 0,
                 "mpp: GPipe<8> splits each batch into 8 micro-batches but the batch has only 5 "
                 "samples; use a "
                 "batch of at least 8 samples or fewer micro-batches");
}

TEST_CASE("stages that do not fit together fail on the first message with both shapes and stages") {
  // The sending stage checks what it produces against the shape it announced in the link's
  // header (the next stage's declared input) before any data travels.
  expect_failure(2, "pipeline-errors/shape-mismatch", 0,
                 "mpp: stage 1 (rank 1) expects activations Float[*, 24] but stage 0 (rank 0) "
                 "produces Float[*, 16]");
  expect_failure(2, "pipeline-errors/input-dtype", 0,
                 "mpp: stage 0 expects inputs Float[*, 16] but train_step got Double[*, 16]");
}

TEST_CASE("a rank dying mid-step makes every other rank fail within the deadline, naming a peer") {
  for (const char* worker :
       {"pipeline-errors/rank-dies-blocking", "pipeline-errors/rank-dies-async"}) {
    INFO(worker);
    auto options = error_options();
    options.env = {{"MPP_TIMEOUT_S", "8"}, {"OMP_NUM_THREADS", "1"}};
    const auto start = std::chrono::steady_clock::now();
    const auto world = mpp::test::run_world(4, worker, options);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    INFO(world.report());
    CHECK_FALSE(world.timed_out());
    CHECK(world.exit_code(3) == 7);
    // Each survivor fails by itself (nobody stops it) within its 8 s deadline plus start-up.
    CHECK(elapsed < std::chrono::seconds(40));
    for (int r = 0; r < 3; ++r) {
      CHECK(world.exit_code(r) != 0);
      const auto& err = world.error_output(r);
      const bool names_peer = err.find("from rank") != std::string::npos ||
                              err.find("to rank") != std::string::npos ||
                              err.find("rank " + std::to_string(r + 1)) != std::string::npos;
      CHECK_MESSAGE(names_peer, "rank ", r, " error output:\n", err);
    }
  }
}
