// DP x PP on 4 ranks (2 pipeline replicas x 2 stages) with the real Pipeline: parameters after a
// few steps equal the monolith's trained on the global batch; the replicas of each stage stay
// bit-identical; a mesh that does not match the pipeline is refused.
#include <doctest/doctest.h>

#include <torch/nn/modules/loss.h>
#include <torch/optim/sgd.h>

#include <ATen/Parallel.h>

#include <cstdio>
#include <string>

#include "../support/worker.hpp"
#include "../support/world.hpp"
#include "mpp/comm/init.hpp"
#include "mpp/data_parallel/hybrid.hpp"
#include "mpp/data_parallel/replicas.hpp"
#include "mpp/models/mlp.hpp"

// In a namespace of its own: the directory's files compile as one unit (tests/CMakeLists.txt).
namespace hybrid_test {

namespace {

constexpr std::int64_t global_batch = 16;
constexpr int steps = 3;
constexpr double learning_rate = 0.1;
const mpp::models::MlpConfig config{.hidden = 16, .layers = 6, .seed = 5};

at::Tensor mse(const at::Tensor& out, const at::Tensor& target) {
  return torch::mse_loss(out, target);
}

template <class Pipe>
void check_hybrid(const auto& world, const std::string& name) {
  mpp::DataPipelineMesh mesh(world, 2);
  mpp::DataParallelPipeline<Pipe> hybrid(mesh, mpp::MlpModel{config});
  torch::optim::SGD opt(hybrid.parameters(), learning_rate);

  auto monolith = mpp::models::make_full_mlp(config);
  torch::optim::SGD monolith_opt(monolith->parameters(), learning_rate);

  const auto per_replica = global_batch / mesh.data_degree();
  for (int s = 0; s < steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(config, global_batch, s);
    opt.zero_grad();
    const auto x = batch.inputs.narrow(0, mesh.replica() * per_replica, per_replica);
    const auto y = batch.targets.narrow(0, mesh.replica() * per_replica, per_replica);
    const double loss = hybrid.train_step(mesh.pipeline_rank() == 0 ? x : at::Tensor(),
                                          mesh.pipeline_rank() == 1 ? y : at::Tensor(), mse);
    opt.step();

    monolith_opt.zero_grad();
    auto full_loss = torch::mse_loss(monolith->forward(batch.inputs), batch.targets);
    full_loss.backward();
    monolith_opt.step();
    if (std::abs(loss - full_loss.item<double>()) > 1e-5)
      throw std::runtime_error(name + ": step " + std::to_string(s) + " loss " +
                               std::to_string(loss) + " but the monolith's is " +
                               std::to_string(full_loss.item<double>()));
  }
  // this rank's layers against the same layers of the monolith: parameters come as (weight, bias)
  // per Linear layer, so layer i's are the monolith's 2i and 2i + 1
  const auto reference = monolith->parameters();
  for (const auto& piece : hybrid.pipeline().pieces()) {
    const auto mine = piece.module->parameters();
    for (std::size_t j = 0; j < mine.size(); ++j) {
      const auto& ref = reference[static_cast<std::size_t>(2 * piece.layers.begin) + j];
      if (!torch::allclose(mine[j], ref, 1e-5, 1e-6))
        throw std::runtime_error(
            name + ": parameter " + std::to_string(j) + " of layers [" +
            std::to_string(piece.layers.begin) + ", " + std::to_string(piece.layers.end) +
            ") differs from the monolith by " +
            std::to_string(at::max(at::abs(mine[j] - ref)).template item<double>()));
    }
    const auto report = mpp::compare_replicas(*piece.module, mesh.data_group());
    if (!report)
      throw std::runtime_error(name + ": stage replicas differ: " + report.first_difference);
  }
  std::printf("rank %d (replica %d, stage %d): %s equals the monolith\n", world.rank(),
              mesh.replica(), mesh.pipeline_rank(), name.c_str());
}

}  // namespace

MPP_TEST_WORKER("dp_hybrid") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group();
  check_hybrid<mpp::Pipeline<mpp::Uniform<2>, mpp::GPipe<4>, mpp::Async<mpp::Gloo>>>(
      world, "GPipe<4>/Async");
  check_hybrid<mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<2>, mpp::Blocking<mpp::Gloo>>>(
      world, "OneFOneB<2>/Blocking");
  // a 2-stage pipeline on a mesh cut into pipelines of 4 ranks
  try {
    mpp::DataPipelineMesh mesh(world, 4);
    mpp::DataParallelPipeline<mpp::Pipeline<mpp::Uniform<2>, mpp::GPipe<2>, mpp::Async<mpp::Gloo>>>
        bad(mesh, mpp::MlpModel{config});
  } catch (const std::invalid_argument& e) {
    std::printf("mesh: %s\n", e.what());
  }
  // Ranks that threw early must not exit while a slower one is still connecting the mesh's groups.
  world.barrier();
  return 0;
}

TEST_CASE("DP x PP on 4 ranks (2 replicas x 2 stages) equals the monolith") {
  mpp::test::WorldOptions options;
  options.timeout = std::chrono::seconds(180);
  auto world = mpp::test::run_world(4, "dp_hybrid", options);
  REQUIRE_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 4; ++r) {
    CHECK(world.output(r).find("GPipe<4>/Async equals the monolith") != std::string::npos);
    CHECK(world.output(r).find("OneFOneB<2>/Blocking equals the monolith") != std::string::npos);
    CHECK(
        world.output(r).find("runs on 2 ranks but the DP x PP mesh was cut into pipelines of 4;") !=
        std::string::npos);
  }
}

}  // namespace hybrid_test
