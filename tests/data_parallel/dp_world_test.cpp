// Data parallelism with real processes over Gloo: NaiveDP (per tensor and coalesced) and DDP
// (async and blocking, several bucket caps) on P ranks equal single-process training on the
// global batch, replicas stay bit-identical, no_sync is gradient accumulation, bad setups fail
// with a clear message on every rank.
#include <doctest/doctest.h>

#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <ATen/Parallel.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../support/worker.hpp"
#include "../support/world.hpp"
#include "mpp/comm/init.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/models/mlp.hpp"

// In a namespace of its own: the directory's files compile as one unit (tests/CMakeLists.txt).
namespace dp_world_test {

namespace {

constexpr std::int64_t global_batch = 16;
constexpr int train_steps = 4;
constexpr double learning_rate = 0.1;

mpp::models::MlpConfig small_config(std::uint64_t seed) {
  return {.hidden = 24, .layers = 5, .seed = seed};
}

/// This rank's rows of the global batch of `step`.
mpp::models::Batch shard(const mpp::models::Batch& full, int rank, int world) {
  const auto per_rank = full.inputs.size(0) / world;
  return {full.inputs.narrow(0, rank * per_rank, per_rank),
          full.targets.narrow(0, rank * per_rank, per_rank)};
}

mpp::test::WorldOptions bounded(int seconds, std::vector<std::string> args = {}) {
  mpp::test::WorldOptions options;
  options.timeout = std::chrono::seconds(seconds);
  options.args = std::move(args);
  return options;
}

torch::Tensor loss_on(torch::nn::Sequential& model, const mpp::models::Batch& b) {
  return torch::mse_loss(model->forward(b.inputs), b.targets);
}

/// The monolith: one process, the global batch, the same initial weights as rank 0's replica.
torch::nn::Sequential train_reference(int steps, std::int64_t batch, int micro_steps = 1) {
  auto model = mpp::models::make_full_mlp(small_config(100));
  torch::optim::SGD opt(model->parameters(), learning_rate);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    for (int m = 0; m < micro_steps; ++m) {
      const auto b =
          mpp::models::make_regression_batch(small_config(100), batch, s * micro_steps + m);
      (loss_on(model, b) / micro_steps).backward();
    }
    opt.step();
  }
  return model;
}

void require_close(torch::nn::Sequential& got, torch::nn::Sequential& want,
                   const std::string& what) {
  const auto g = got->named_parameters();
  const auto w = want->named_parameters();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!torch::allclose(g[i].value(), w[i].value(), 1e-5, 1e-6))
      throw std::runtime_error(
          what + ": parameter '" + g[i].key() + "' differs from single-process training by " +
          std::to_string((g[i].value() - w[i].value()).abs().max().item<double>()));
}

void require_identical(torch::nn::Sequential& model, const mpp::ProcessGroup& group,
                       const std::string& what) {
  const auto report = mpp::compare_replicas(*model, group);
  if (!report)
    throw std::runtime_error(what + ": replicas are not bit-identical: " + report.first_difference);
}

/// Trains a replica (seeded differently on every rank: the broadcast must fix that) with `Sync`.
template <class MakeSync, class AfterBackward>
torch::nn::Sequential train_replica(const auto& group, MakeSync make_sync,
                                    AfterBackward after_backward) {
  auto model =
      mpp::models::make_full_mlp(small_config(100 + static_cast<std::uint64_t>(group.rank())));
  auto sync = make_sync(*model);
  torch::optim::SGD opt(model->parameters(), learning_rate);
  for (int s = 0; s < train_steps; ++s) {
    opt.zero_grad();
    const auto full = mpp::models::make_regression_batch(small_config(100), global_batch, s);
    loss_on(model, shard(full, group.rank(), group.size())).backward();
    after_backward(*sync);
    opt.step();
  }
  return model;
}

}  // namespace

MPP_TEST_WORKER("dp_equivalence") {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  auto reference = train_reference(train_steps, global_batch);
  auto none = [](auto&) {};
  auto sync = [](auto& dp) { dp.sync_gradients(); };

  {
    auto m = train_replica(
        group,
        [&](torch::nn::Module& mod) {
          return std::make_unique<mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::PerTensor>>(mod,
                                                                                          group);
        },
        sync);
    require_close(m, reference, "NaiveDP<Blocking, PerTensor>");
    require_identical(m, group, "NaiveDP<Blocking, PerTensor>");
  }
  {
    auto m = train_replica(
        group,
        [&](torch::nn::Module& mod) {
          return std::make_unique<mpp::NaiveDP<mpp::Async<mpp::Gloo>, mpp::PerTensor>>(mod, group);
        },
        sync);
    require_close(m, reference, "NaiveDP<Async, PerTensor>");
    require_identical(m, group, "NaiveDP<Async, PerTensor>");
  }
  {
    auto m = train_replica(
        group,
        [&](torch::nn::Module& mod) {
          return std::make_unique<mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::Coalesced>>(mod,
                                                                                          group);
        },
        sync);
    require_close(m, reference, "NaiveDP<Blocking, Coalesced>");
    require_identical(m, group, "NaiveDP<Blocking, Coalesced>");
  }
  // DDP: one bucket per tensor, about one layer per bucket, one bucket for everything
  for (std::size_t cap : {std::size_t{1}, std::size_t{24 * 25 * 4}, mpp::default_bucket_bytes}) {
    const std::string name = "DDP<Async> bucket cap " + std::to_string(cap);
    std::size_t buckets = 0;
    auto m = train_replica(
        group,
        [&](torch::nn::Module& mod) {
          auto ddp = std::make_unique<mpp::DDP<mpp::Async<mpp::Gloo>>>(
              mod, group, mpp::DdpOptions{.bucket_bytes = cap});
          buckets = ddp->buckets().buckets.size();
          return ddp;
        },
        none);
    if (cap == 1 && buckets != 10)
      throw std::runtime_error(name + ": expected 10 buckets, got " + std::to_string(buckets));
    if (cap == mpp::default_bucket_bytes && buckets != 1)
      throw std::runtime_error(name + ": expected 1 bucket");
    require_close(m, reference, name);
    require_identical(m, group, name);
  }
  {
    auto m = train_replica(
        group,
        [&](torch::nn::Module& mod) {
          return std::make_unique<mpp::DDP<mpp::Blocking<mpp::Gloo>>>(
              mod, group, mpp::DdpOptions{.bucket_bytes = 1000});
        },
        none);
    require_close(m, reference, "DDP<Blocking>");
    require_identical(m, group, "DDP<Blocking>");
  }
  std::printf("rank %d: all data-parallel variants match single-process training\n", group.rank());
  return 0;
}

MPP_TEST_WORKER("dp_no_sync") {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  constexpr int k = 3;
  auto reference =
      train_reference(2, global_batch, k);  // k micro-batches accumulated = k*B samples
  auto model =
      mpp::models::make_full_mlp(small_config(100 + static_cast<std::uint64_t>(group.rank())));
  mpp::DDP<> ddp(*model, group, {.bucket_bytes = 2000});
  torch::optim::SGD opt(model->parameters(), learning_rate);
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    for (int m = 0; m < k; ++m) {
      const auto full =
          mpp::models::make_regression_batch(small_config(100), global_batch, s * k + m);
      auto loss = loss_on(model, shard(full, group.rank(), group.size())) / k;
      if (m + 1 < k) {
        auto guard = ddp.no_sync();
        loss.backward();
        // nothing was exchanged: the ranks' local gradients still differ
        at::Tensor g = model->parameters().back().grad().clone();
        at::Tensor hi = g.clone(), lo = g.clone();
        group.all_reduce(hi, mpp::ReduceOp::max);
        group.all_reduce(lo, mpp::ReduceOp::min);
        if (at::equal(hi, lo))
          throw std::runtime_error("no_sync: gradients were synchronised inside no_sync()");
      } else {
        loss.backward();
      }
    }
    opt.step();
  }
  require_close(model, reference, "DDP no_sync over 3 micro-steps");
  require_identical(model, group, "DDP no_sync");
  std::printf("rank %d: no_sync accumulation equals the 3x batch\n", group.rank());
  return 0;
}

MPP_TEST_WORKER("dp_mismatch") {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  // rank 1's second layer is narrower
  torch::nn::Sequential other;
  if (group.rank() == 1) {
    other->push_back(torch::nn::Linear(24, 24));
    other->push_back(torch::nn::Linear(24, 20));
  } else {
    other->push_back(torch::nn::Linear(24, 24));
    other->push_back(torch::nn::Linear(24, 24));
  }
  int caught = 0;
  try {
    mpp::DDP<> ddp(*other, group);
  } catch (const mpp::ReplicaMismatch& e) {
    std::printf("DDP: %s\n", e.what());
    ++caught;
  }
  try {
    mpp::NaiveDP<> dp(*other, group);
  } catch (const mpp::ReplicaMismatch& e) {
    std::printf("NaiveDP: %s\n", e.what());
    ++caught;
  }
  // one parameter fewer on rank 1
  torch::nn::Sequential shorter;
  shorter->push_back(torch::nn::Linear(24, 24));
  if (group.rank() != 1) shorter->push_back(torch::nn::Linear(24, 24));
  try {
    mpp::DDP<> ddp(*shorter, group);
  } catch (const mpp::ReplicaMismatch& e) {
    std::printf("count: %s\n", e.what());
    ++caught;
  }
  return caught == 3 ? 0 : 1;
}

MPP_TEST_WORKER("dp_unused") {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  torch::nn::Sequential model;
  model->push_back(torch::nn::Linear(8, 8));
  model->push_back(torch::nn::Linear(8, 8));
  mpp::DDP<> ddp(*model, group, {.bucket_bytes = 100});
  // only the first layer takes part in the loss
  auto loss = (*model)[0]->as<torch::nn::Linear>()->forward(torch::ones({2, 8})).sum();
  try {
    loss.backward();
  } catch (const std::exception& e) {
    std::printf("unused: %s\n", e.what());
    return 0;
  }
  return 1;
}

// A layer that only some ranks use: rank 1's loss skips layer `argv[-1]` ("first" or "last");
// rank 0 uses every layer. argv[-2]: "async" or "blocking".
MPP_TEST_WORKER("dp_unused_some") {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  torch::nn::Sequential model;
  for (int i = 0; i < 3; ++i) model->push_back(torch::nn::Linear(8, 8));
  const std::string skip = argv[argc - 1];
  auto step = [&](auto& ddp) {
    auto x = torch::ones({2, 8});
    for (int i = 0; i < 3; ++i) {
      const bool skipped =
          group.rank() == 1 && ((skip == "first" && i == 0) || (skip == "last" && i == 2));
      if (!skipped) x = (*model)[static_cast<std::size_t>(i)]->as<torch::nn::Linear>()->forward(x);
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      x.sum().backward();
    } catch (const std::exception& e) {
      std::printf("unused after %lld ms: %s\n",
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::steady_clock::now() - start)
                                             .count()),
                  e.what());
      (void)ddp;
      return 0;
    }
    return 1;
  };
  // One bucket per parameter: the missing ones sit at the start or the end of the launch order.
  if (std::string(argv[argc - 2]) == "owners") {  // reduce-scattered to the owners over Shm
    auto shm = group.new_group<mpp::Shm>();
    mpp::DDP<mpp::Async<mpp::Shm>> ddp(
        *model, shm, {.bucket_bytes = 100, .gradient_owners = {0, 0, 0, 1, 1, 1}});
    return step(ddp);
  }
  if (std::string(argv[argc - 2]) == "blocking") {
    mpp::DDP<mpp::Blocking<mpp::Gloo>> ddp(*model, group, {.bucket_bytes = 100});
    return step(ddp);
  }
  mpp::DDP<> ddp(*model, group, {.bucket_bytes = 100});
  return step(ddp);
}

MPP_TEST_WORKER("dp_mesh") {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  const int pipeline_degree = std::stoi(argv[argc - 1]);
  try {
    mpp::DataPipelineMesh mesh(group, pipeline_degree);
    // each rank contributes its global rank: sums over the two kinds of groups tell who is where
    at::Tensor t = at::full({1}, static_cast<double>(group.rank()), at::kDouble);
    mesh.data_group().all_reduce(t);
    at::Tensor u = at::full({1}, static_cast<double>(group.rank()), at::kDouble);
    mesh.pipeline_group().all_reduce(u);
    std::printf("rank %d: replica %d stage %d data-sum %.0f pipeline-sum %.0f\n", group.rank(),
                mesh.replica(), mesh.pipeline_rank(), t.item<double>(), u.item<double>());
  } catch (const std::invalid_argument& e) {
    std::printf("mesh: %s\n", e.what());
  }
  group.barrier();  // see hybrid_test.cpp: nobody exits while a slower rank is still connecting
  return 0;
}

MPP_TEST_WORKER("dp_sampler") {
  auto group = mpp::init_process_group();
  for (std::size_t n : {std::size_t{103}, std::size_t{64}}) {
    for (auto remainder : {mpp::Remainder::pad, mpp::Remainder::drop}) {
      mpp::DistributedSampler sampler(n, group.size(), group.rank(),
                                      {.seed = 9, .remainder = remainder});
      std::vector<std::size_t> previous;
      for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
        sampler.set_epoch(epoch);
        const auto mine = sampler.indices();
        if (mine == previous)
          throw std::runtime_error("sampler: epoch " + std::to_string(epoch) +
                                   " did not reshuffle");
        previous = mine;
        at::Tensor seen = at::zeros({static_cast<std::int64_t>(n)}, at::kLong);
        for (auto i : mine) seen[static_cast<std::int64_t>(i)] += 1;
        group.all_reduce(seen);
        const auto lo = seen.min().item<std::int64_t>(), hi = seen.max().item<std::int64_t>();
        const auto total = seen.sum().item<std::int64_t>();
        const auto expected_total = static_cast<std::int64_t>(sampler.total_size());
        const bool divides = n % static_cast<std::size_t>(group.size()) == 0;
        const bool ok =
            total == expected_total && (divides                            ? (lo == 1 && hi == 1)
                                        : remainder == mpp::Remainder::pad ? (lo == 1 && hi == 2)
                                                                           : (lo == 0 && hi == 1));
        if (!ok)
          throw std::runtime_error("sampler: n=" + std::to_string(n) + " counts in [" +
                                   std::to_string(lo) + ", " + std::to_string(hi) + "], total " +
                                   std::to_string(total));
      }
    }
  }
  std::printf("rank %d: sampler shards cover the dataset\n", group.rank());
  return 0;
}

TEST_CASE(
    "NaiveDP and DDP on 2 and 4 ranks equal single-process training, replicas bit-identical") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "dp_equivalence", bounded(240));
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE("DDP no_sync over k micro-steps equals one step on the k-times larger batch") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "dp_no_sync", bounded(120));
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE("Mismatched replicas are refused at construction, on every rank, with the difference") {
  auto world = mpp::test::run_world(2, "dp_mismatch", bounded(60));
  REQUIRE_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 2; ++r) {
    const auto& out = world.output(r);
    CHECK(out.find("DDP: mpp: DDP needs the same model on every rank") != std::string::npos);
    CHECK(out.find("first difference at #2: rank 0 has '1.weight' Float[24, 24]") !=
          std::string::npos);
    CHECK(out.find("NaiveDP: mpp: NaiveDP needs the same model") != std::string::npos);
    CHECK(out.find("count: mpp: DDP needs the same model") != std::string::npos);
    CHECK(out.find("rank 1 has 2 tensors, rank 0 has 4") != std::string::npos);
  }
  CHECK(world.output(1).find("this rank has '1.weight' Float[20, 24]") != std::string::npos);
}

TEST_CASE("DDP reports a parameter that never got a gradient by name instead of hanging") {
  auto world = mpp::test::run_world(2, "dp_unused", bounded(60));
  REQUIRE_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 2; ++r)
    CHECK(world.output(r).find("'1.weight', '1.bias' got no gradient") != std::string::npos);
}

TEST_CASE("DDP: a parameter unused on some ranks only is named on every rank, at once") {
  for (const char* policy : {"async", "blocking", "owners"})
    for (const char* skip : {"first", "last"}) {
      CAPTURE(policy);
      CAPTURE(skip);
      auto options = bounded(60, {policy, skip});
      options.env = {{"MPP_TIMEOUT_S", "30"}};  // a hang would show as ~30 s, then a timeout
      auto world = mpp::test::run_world(2, "dp_unused_some", options);
      REQUIRE_MESSAGE(world.ok(), world.report());
      const std::string layer = std::string(skip) == "first" ? "0" : "2";
      for (int r = 0; r < 2; ++r) {
        const auto& out = world.output(r);
        CAPTURE(out);
        CHECK(out.find("'" + layer + ".weight', '" + layer + ".bias' got no gradient") !=
              std::string::npos);
        CHECK(out.find("on rank(s) [1] of the DDP group") != std::string::npos);
        const auto at = out.find("unused after ");
        REQUIRE(at != std::string::npos);
        CHECK(std::stoll(out.substr(at + 13)) < 5'000);
      }
    }
}

TEST_CASE(
    "DP x PP mesh: sub-groups by replica and by stage; a world size the pipeline does not divide "
    "is refused") {
  auto world = mpp::test::run_world(4, "dp_mesh", bounded(60, {"2"}));
  REQUIRE_MESSAGE(world.ok(), world.report());
  // data groups {0,2} and {1,3}; pipeline groups {0,1} and {2,3}
  CHECK(world.output(0).find("rank 0: replica 0 stage 0 data-sum 2 pipeline-sum 1") !=
        std::string::npos);
  CHECK(world.output(1).find("rank 1: replica 0 stage 1 data-sum 4 pipeline-sum 1") !=
        std::string::npos);
  CHECK(world.output(2).find("rank 2: replica 1 stage 0 data-sum 2 pipeline-sum 5") !=
        std::string::npos);
  CHECK(world.output(3).find("rank 3: replica 1 stage 1 data-sum 4 pipeline-sum 5") !=
        std::string::npos);
  auto bad = mpp::test::run_world(4, "dp_mesh", bounded(60, {"3"}));
  REQUIRE_MESSAGE(bad.ok(), bad.report());
  for (int r = 0; r < 4; ++r)
    CHECK(bad.output(r).find(
              "4 ranks cannot be cut into pipelines of 3 ranks; launch a multiple of 3") !=
          std::string::npos);
}

TEST_CASE("DistributedSampler over real ranks: coverage, disjointness, reshuffle per epoch") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "dp_sampler", bounded(60));
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

}  // namespace dp_world_test
