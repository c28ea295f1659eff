// ShardedOptimizer (ZeRO stage 1): the plan gives each parameter one owner, balanced by bytes;
// DDP + ShardedOptimizer<Adam> on 2 and 4 ranks (Gloo and Shm, async and blocking) trains the
// parameters single-process Adam trains on the global batch, the replicas stay bit-identical,
// each rank keeps optimizer state for its own shard only, and a wrong setup is refused by name.
// A checkpoint of the shards resumes training bit for bit, and a bad one is refused on every rank.
#include <doctest/doctest.h>

#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "../support/worker.hpp"
#include "../support/world.hpp"
#include "mpp/checkpoint/sharded_optimizer.hpp"
#include "mpp/comm/init.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/models/mlp.hpp"

// In a namespace of its own: the directory's files compile as one unit (tests/CMakeLists.txt).
namespace sharded_optimizer_test {

namespace {

constexpr std::int64_t global_batch = 16;
constexpr int train_steps = 4;
constexpr double learning_rate = 1e-2;

mpp::models::MlpConfig small_config(std::uint64_t seed) {
  return {.hidden = 24, .layers = 5, .seed = seed};
}

torch::Tensor loss_on(torch::nn::Sequential& model, const mpp::models::Batch& b) {
  return torch::mse_loss(model->forward(b.inputs), b.targets);
}

/// Single-process Adam on the global batch, from rank 0's initial weights.
torch::nn::Sequential train_reference() {
  auto model = mpp::models::make_full_mlp(small_config(100));
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(learning_rate));
  for (int s = 0; s < train_steps; ++s) {
    opt.zero_grad();
    loss_on(model, mpp::models::make_regression_batch(small_config(100), global_batch, s))
        .backward();
    opt.step();
  }
  return model;
}

/// DDP + ShardedOptimizer<Adam> over `group`, replicas seeded differently on every rank.
/// With `to_owners`, DDP reduce-scatters each gradient to the rank that steps it.
template <class Comm>
void train_and_check(const auto& group, torch::nn::Sequential& reference, const std::string& what,
                     bool to_owners = false) {
  auto model =
      mpp::models::make_full_mlp(small_config(100 + static_cast<std::uint64_t>(group.rank())));
  mpp::ShardedOptimizer<torch::optim::Adam, Comm> opt(*model, group,
                                                      torch::optim::AdamOptions(learning_rate));
  mpp::DDP<Comm> ddp(
      *model, group,
      mpp::DdpOptions{.bucket_bytes = 1000,
                      .gradient_owners = to_owners ? opt.plan().owner : std::vector<int>{}});
  const auto per_rank = global_batch / group.size();
  for (int s = 0; s < train_steps; ++s) {
    opt.zero_grad();
    const auto full = mpp::models::make_regression_batch(small_config(100), global_batch, s);
    loss_on(model, {full.inputs.narrow(0, group.rank() * per_rank, per_rank),
                    full.targets.narrow(0, group.rank() * per_rank, per_rank)})
        .backward();
    opt.step();
  }
  const auto got = model->named_parameters();
  const auto want = reference->named_parameters();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!torch::allclose(got[i].value(), want[i].value(), 1e-4, 1e-5))
      throw std::runtime_error(
          what + ": parameter '" + got[i].key() + "' differs from single-process Adam by " +
          std::to_string((got[i].value() - want[i].value()).abs().max().item<double>()));
  const auto replicas = mpp::compare_replicas(*model, group);
  if (!replicas)
    throw std::runtime_error(what +
                             ": replicas are not bit-identical: " + replicas.first_difference);

  // Optimizer state only for this rank's shard, and every parameter in exactly one shard.
  auto* inner = opt.local_optimizer();
  const auto local = static_cast<std::int64_t>(opt.local_parameters().size());
  const auto with_state = inner == nullptr ? 0 : static_cast<std::int64_t>(inner->state().size());
  if (with_state != local)
    throw std::runtime_error(what + ": the inner optimizer holds state for " +
                             std::to_string(with_state) + " parameters, its shard has " +
                             std::to_string(local));
  at::Tensor count = at::full({1}, local, at::kLong);
  group.all_reduce(count);
  if (count.item<std::int64_t>() != static_cast<std::int64_t>(got.size()))
    throw std::runtime_error(what + ": the shards hold " +
                             std::to_string(count.item<std::int64_t>()) +
                             " parameters in all, the model has " + std::to_string(got.size()));
  std::printf("rank %d: %s matches single-process Adam (%lld of %zu parameters stepped here)\n",
              group.rank(), what.c_str(), static_cast<long long>(local), got.size());
}

mpp::test::WorldOptions bounded(int seconds) {
  mpp::test::WorldOptions options;
  options.timeout = std::chrono::seconds(seconds);
  return options;
}

}  // namespace

TEST_CASE("plan_shards: contiguous ranges, balanced by bytes, every parameter owned once") {
  // 16 layers of weight + bias: two ranks own 8 layers each
  std::vector<std::int64_t> layers;
  for (int i = 0; i < 16; ++i) {
    layers.push_back(4 << 20);
    layers.push_back(4 << 10);
  }
  const auto two = mpp::plan_shards(layers, 2);
  CHECK(two.bytes_of_rank[0] == two.bytes_of_rank[1]);
  for (std::size_t i = 0; i < layers.size(); ++i) CHECK(two.owner[i] == (i < 16 ? 0 : 1));

  // unequal sizes: the cut lands on the boundary nearest to the half
  const auto uneven = mpp::plan_shards({10, 10, 10, 70}, 2);
  CHECK(uneven.owner == std::vector<int>{0, 0, 0, 1});
  CHECK(uneven.bytes_of_rank == std::vector<std::int64_t>{30, 70});

  // owners never go backwards, and the bytes add up
  const auto four = mpp::plan_shards({5, 1, 1, 1, 1, 1, 5, 5, 2, 2}, 4);
  for (std::size_t i = 1; i < four.owner.size(); ++i) CHECK(four.owner[i] >= four.owner[i - 1]);
  CHECK(std::accumulate(four.bytes_of_rank.begin(), four.bytes_of_rank.end(), std::int64_t{0}) ==
        24);

  // fewer parameters than ranks: some ranks own nothing, none owns a parameter twice
  const auto sparse = mpp::plan_shards({8, 8}, 4);
  CHECK(sparse.ranks() == 4);
  CHECK(std::count(sparse.bytes_of_rank.begin(), sparse.bytes_of_rank.end(), 0) == 2);
  CHECK_THROWS_WITH(mpp::plan_shards({1}, 0), "mpp: plan_shards needs at least one rank");
}

MPP_TEST_WORKER("zero_equivalence") {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  auto reference = train_reference();
  train_and_check<mpp::Async<mpp::Gloo>>(group, reference, "DDP<Async<Gloo>> + ShardedOptimizer");
  train_and_check<mpp::Blocking<mpp::Gloo>>(group, reference,
                                            "DDP<Blocking<Gloo>> + ShardedOptimizer");
  auto shm = group.new_group<mpp::Shm>();
  train_and_check<mpp::Async<mpp::Shm>>(shm, reference, "DDP<Async<Shm>> + ShardedOptimizer");
  train_and_check<mpp::Async<mpp::Shm>>(
      shm, reference, "DDP<Async<Shm>> reduce-scattering to the owners + ShardedOptimizer", true);
  train_and_check<mpp::Blocking<mpp::Shm>>(
      shm, reference, "DDP<Blocking<Shm>> reduce-scattering to the owners + ShardedOptimizer",
      true);
  train_and_check<mpp::Async<mpp::Gloo>>(
      group, reference, "DDP<Async<Gloo>> reduce-scattering to the owners + ShardedOptimizer",
      true);
  return 0;
}

MPP_TEST_WORKER("zero_refused") {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  int caught = 0;
  auto model = mpp::models::make_full_mlp(small_config(100));
  // Given `group` itself, ShardedOptimizer<..., Async<Shm>> does not compile (a Group<Gloo>);
  // a handle whose type does not say its backend is checked where it becomes a Group<Shm>.
  const mpp::ProcessGroup erased = group;
  try {
    mpp::ShardedOptimizer<torch::optim::Adam, mpp::Async<mpp::Shm>> opt(
        *model, mpp::group_cast<mpp::Shm>(erased), torch::optim::AdamOptions(1e-3));
  } catch (const mpp::InvalidArgument& e) {
    std::printf("backend: %s\n", e.what());
    ++caught;
  }
  torch::nn::Sequential other;
  other->push_back(torch::nn::Linear(24, 24));
  other->push_back(torch::nn::Linear(24, group.rank() == 1 ? 20 : 24));
  try {
    mpp::ShardedOptimizer<torch::optim::Adam> opt(*other, group, torch::optim::AdamOptions(1e-3));
  } catch (const mpp::ReplicaMismatch& e) {
    std::printf("structure: %s\n", e.what());
    ++caught;
  }
  return caught == 2 ? 0 : 1;
}

/// DDP + ShardedOptimizer<AdamW> over Shm on one model, stepped on the global batches.
struct ShardedRun {
  using Comm = mpp::Async<mpp::Shm>;
  torch::nn::Sequential model;
  std::unique_ptr<mpp::DDP<Comm>> ddp;
  std::unique_ptr<mpp::ShardedOptimizer<torch::optim::AdamW, Comm>> opt;

  ShardedRun(const mpp::Group<mpp::Shm>& group, std::uint64_t seed)
      : model(mpp::models::make_full_mlp(small_config(seed))) {
    ddp = std::make_unique<mpp::DDP<Comm>>(*model, group, mpp::DdpOptions{.bucket_bytes = 1000});
    opt = std::make_unique<mpp::ShardedOptimizer<torch::optim::AdamW, Comm>>(
        *model, group, torch::optim::AdamWOptions(learning_rate));
  }
  void step(const mpp::ProcessGroup& group, int s) {
    const auto per_rank = global_batch / group.size();
    opt->zero_grad();
    const auto full = mpp::models::make_regression_batch(small_config(100), global_batch, s);
    loss_on(model, {full.inputs.narrow(0, group.rank() * per_rank, per_rank),
                    full.targets.narrow(0, group.rank() * per_rank, per_rank)})
        .backward();
    opt->step();
  }
};

void expect_same_parameters(torch::nn::Sequential& a, torch::nn::Sequential& b,
                            const std::string& what) {
  const auto x = a->named_parameters();
  const auto y = b->named_parameters();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!torch::equal(x[i].value(), y[i].value()))
      throw std::runtime_error(
          what + ": parameter '" + x[i].key() + "' differs by " +
          std::to_string((x[i].value() - y[i].value()).abs().max().item<double>()));
}

/// The refusal every rank must report for a checkpoint that rank 0 spoiled with `spoil`.
void expect_refused(const mpp::Group<mpp::Shm>& group, const std::filesystem::path& dir,
                    const std::function<void()>& spoil, const std::string& part) {
  group.barrier();
  if (group.rank() == 0) spoil();
  group.barrier();
  ShardedRun run(group, 300);
  try {
    mpp::checkpoint::load_sharded_optimizer(dir, *run.model, *run.opt);
  } catch (const mpp::checkpoint::CheckpointError& e) {
    if (std::string(e.what()).find(part) == std::string::npos)
      throw std::runtime_error(std::string("refused, but the message does not say '") + part +
                               "': " + e.what());
    std::printf("rank %d refused: %s\n", group.rank(), e.what());
    return;
  }
  throw std::runtime_error("a spoiled checkpoint was accepted (" + part + ")");
}

// Two steps, save, one more step: the parameters to reach. A fresh run (other initial weights)
// loads the checkpoint and takes the same third step: it must reach them bit for bit, which
// needs the parameters of every shard and each shard's AdamW moments and step count back.
MPP_TEST_WORKER("zero_checkpoint") {
  namespace fs = std::filesystem;
  at::set_num_threads(1);
  auto world = mpp::init_process_group();
  auto group = world.new_group<mpp::Shm>();
  const fs::path dir = fs::path(argv[argc - 1]) / "zero";
  ShardedRun first(group, 100);
  first.step(group, 0);
  first.step(group, 1);
  mpp::checkpoint::save_sharded_optimizer(dir, *first.model, *first.opt,
                                          {{"progress", mpp::checkpoint::to_json({2, 0, 2})}});
  auto saved = mpp::models::make_full_mlp(small_config(100));
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < saved->parameters().size(); ++i)
      saved->parameters()[i].copy_(first.model->parameters()[i]);
  }
  first.step(group, 2);

  ShardedRun resumed(group, 200);
  const auto manifest = mpp::checkpoint::load_sharded_optimizer(dir, *resumed.model, *resumed.opt);
  if (manifest.at("progress").at("step") != 2) throw std::runtime_error("progress not returned");
  expect_same_parameters(resumed.model, saved, "after loading");
  const auto replicas = mpp::compare_replicas(*resumed.model, group);
  if (!replicas)
    throw std::runtime_error("replicas differ after loading: " + replicas.first_difference);
  resumed.step(group, 2);
  expect_same_parameters(resumed.model, first.model, "one step after loading");

  // Refused on every rank, with the reason, and nothing hangs.
  const auto edit_plan = [&](const std::function<void(nlohmann::json&)>& edit) {
    return [&dir, edit] {
      std::ifstream in(dir / "manifest.json");
      auto m = nlohmann::json::parse(in);
      in.close();
      edit(m["sharded_optimizer"]);
      std::ofstream(dir / "manifest.json") << m.dump();
    };
  };
  const int n = group.size();
  expect_refused(group, dir, edit_plan([n](nlohmann::json& plan) { plan["ranks"] = 2 * n; }),
                 "it was written by " + std::to_string(2 * n) + " ranks");
  expect_refused(
      group, dir, edit_plan([n](nlohmann::json& plan) {
        plan["ranks"] = n;
        plan["owners"][0] = n;
      }),
      "its plan names owner " + std::to_string(n) + " of " + std::to_string(n) + " ranks");
  expect_refused(
      group, dir, [&] { fs::resize_file(dir / "shard_1.pt", 100); }, "shard_1.pt has 100 bytes");
  std::printf("rank %d: resumed from the sharded checkpoint bit for bit\n", group.rank());
  return 0;
}

/// The model's parameters as one file (rank 0 writes, every rank reads).
void write_parameters(torch::nn::Sequential& model, const std::filesystem::path& path) {
  c10::List<torch::Tensor> list;
  for (const auto& p : model->parameters()) list.push_back(p.detach().clone());
  mpp::checkpoint::detail::write_bytes(path, torch::pickle_save(list));
}

void expect_parameters_in(torch::nn::Sequential& model, const std::filesystem::path& path,
                          double tolerance, const std::string& what) {
  const auto list = torch::pickle_load(mpp::checkpoint::detail::read_bytes(path)).toTensorList();
  const auto params = model->parameters();
  if (list.size() != params.size()) throw std::runtime_error(what + ": parameter count differs");
  double worst = 0;
  for (std::size_t i = 0; i < params.size(); ++i)
    worst = std::max(worst, (params[i] - list.get(i)).abs().max().item<double>());
  if (worst > tolerance)
    throw std::runtime_error(what + ": parameters differ by " + std::to_string(worst) +
                             " (tolerance " + std::to_string(tolerance) + ")");
  std::printf("%s (largest difference %g)\n", what.c_str(), worst);
}

// Resharding. "save": two steps, a checkpoint, then the parameters at it and after a third
// step on the same global batch. "load" (on another number of ranks): a fresh run with other
// weights loads the checkpoint, holds its parameters bit for bit, and its third step reaches the
// writer's third step up to the order of the gradient sums (which needs every parameter's AdamW
// moments and step count, now owned by other ranks than those that saved them).
MPP_TEST_WORKER("zero_reshard") {
  namespace fs = std::filesystem;
  at::set_num_threads(1);
  auto world = mpp::init_process_group();
  auto group = world.new_group<mpp::Shm>();
  const std::string mode = argv[argc - 2];
  const fs::path dir = argv[argc - 1];
  if (mode == "save") {
    ShardedRun run(group, 100);
    run.step(group, 0);
    run.step(group, 1);
    mpp::checkpoint::save_sharded_optimizer(dir / "ckpt", *run.model, *run.opt);
    if (group.rank() == 0) write_parameters(run.model, dir / "at_save.pt");
    run.step(group, 2);
    if (group.rank() == 0) write_parameters(run.model, dir / "after_step.pt");
    return 0;
  }
  ShardedRun resumed(group, 200);
  mpp::checkpoint::load_sharded_optimizer(dir / "ckpt", *resumed.model, *resumed.opt);
  expect_parameters_in(resumed.model, dir / "at_save.pt", 0.0, "after loading, bit for bit");
  const auto replicas = mpp::compare_replicas(*resumed.model, group);
  if (!replicas)
    throw std::runtime_error("replicas differ after loading: " + replicas.first_difference);
  resumed.step(group, 2);
  expect_parameters_in(resumed.model, dir / "after_step.pt", 1e-6,
                       "one step after loading equals the writer's");
  std::printf("rank %d: resharded %s\n", group.rank(), dir.filename().c_str());
  return 0;
}

TEST_CASE("DDP gradient owners: one run per rank and bucket, contiguous owners only") {
  // six parameters of 10 elements, buckets of two (reverse order): {5, 4}, {3, 2}, {1, 0}
  std::vector<mpp::GradSpec> specs(6, mpp::GradSpec{10, 4});
  const auto plan = mpp::plan_buckets(specs, 80);
  REQUIRE(plan.buckets.size() == 3);
  const auto runs = mpp::detail::owned_runs(plan, {0, 0, 0, 1, 1, 1}, 2);
  using Runs = mpp::detail::OwnedRuns;
  CHECK(runs[0] == Runs{{0, 0}, {0, 20}});    // parameters 5, 4: rank 1's
  CHECK(runs[1] == Runs{{10, 10}, {0, 10}});  // parameter 3 (rank 1), then 2 (rank 0)
  CHECK(runs[2] == Runs{{0, 20}, {0, 0}});    // parameters 1, 0: rank 0's
  // in one bucket, rank 1's parameters 5, 4, 3 and 1 are split by rank 0's parameter 2
  const auto one = mpp::plan_buckets(specs, 1000);
  REQUIRE(one.buckets.size() == 1);
  CHECK(mpp::detail::owned_runs(one, {0, 0, 0, 1, 1, 1}, 2)[0] == Runs{{30, 30}, {0, 30}});
  CHECK_THROWS_WITH(mpp::detail::owned_runs(one, {0, 1, 0, 1, 1, 1}, 2),
                    doctest::Contains("parameters that are not side by side"));
  CHECK_THROWS_WITH(mpp::detail::owned_runs(plan, {0, 0, 0, 1, 1, 2}, 2),
                    doctest::Contains("gradient_owners[5] = 2 is not a rank of this group of 2"));
}

TEST_CASE(
    "DDP + ShardedOptimizer<Adam> on 2 and 4 ranks equals single-process Adam, replicas "
    "bit-identical, state only for the rank's shard") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "zero_equivalence", bounded(240));
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE(
    "A Gloo group cast to Shm for ShardedOptimizer, and different models, are refused by name") {
  auto world = mpp::test::run_world(2, "zero_refused", bounded(60));
  REQUIRE_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 2; ++r) {
    const auto& out = world.output(r);
    CAPTURE(out);
    CHECK(out.find("backend: mpp: group_cast<Shm>: the group runs Gloo; create it with "
                   "init_process_group<Shm>() or world.new_group<Shm>(ranks)") !=
          std::string::npos);
    CHECK(out.find("structure: mpp: ShardedOptimizer needs the same model on every rank") !=
          std::string::npos);
  }
}

TEST_CASE(
    "ShardedOptimizer<AdamW> checkpoint: every rank saves its shard, a fresh run resumes bit for "
    "bit, a spoiled checkpoint is refused on every rank") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("mpp_zero_ckpt_" + std::to_string(::getpid()));
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    fs::remove_all(dir);
    auto options = bounded(180);
    options.args = {dir.string()};
    auto world = mpp::test::run_world(ranks, "zero_checkpoint", options);
    CHECK_MESSAGE(world.ok(), world.report());
    for (int r = 0; r < ranks; ++r) {
      CAPTURE(world.output(r));
      CHECK(world.output(r).find("resumed from the sharded checkpoint bit for bit") !=
            std::string::npos);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE(
    "ShardedOptimizer<AdamW> checkpoint written by 4 ranks resumes on 2, and by 2 on 4 (each rank "
    "assembles its new shard from the files that hold it)") {
  namespace fs = std::filesystem;
  const auto root = fs::temp_directory_path() / ("mpp_zero_reshard_" + std::to_string(::getpid()));
  for (auto [from, to] : {std::pair{4, 2}, std::pair{2, 4}}) {
    CAPTURE(from);
    CAPTURE(to);
    const auto dir = root / (std::to_string(from) + "_to_" + std::to_string(to));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto options = bounded(120);
    options.args = {"save", dir.string()};
    auto writer = mpp::test::run_world(from, "zero_reshard", options);
    REQUIRE_MESSAGE(writer.ok(), writer.report());
    options.args = {"load", dir.string()};
    auto reader = mpp::test::run_world(to, "zero_reshard", options);
    CHECK_MESSAGE(reader.ok(), reader.report());
    for (int r = 0; r < to; ++r) {
      CAPTURE(reader.output(r));
      CHECK(reader.output(r).find("resharded " + dir.filename().string()) != std::string::npos);
    }
  }
  fs::remove_all(root);
}

}  // namespace sharded_optimizer_test
