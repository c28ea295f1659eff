// check_data_parallel (harness.hpp): the learner's data-parallel step against the monolith
// trained on the whole global batch and against mpp::NaiveDP or mpp::DDP, on the same ranks; and
// what the lab teaches, which the numbers alone do not show: each rank runs its model forward on
// its own share of the rows (a probe after the last layer counts them), and DDP's all-reduces
// start while backward() runs.
#include <torch/csrc/autograd/graph_task.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/sgd.h>

#include <string>

#include "mpp/data_parallel/ddp.hpp"
#include "mpp/data_parallel/naive_dp.hpp"

#include "comparison.hpp"

namespace lab {

void World::note_all_reduce() const {
  ++all_reduces_->started;
  // Autograd's engine runs a backward on the thread that called backward(), and a hook on a
  // parameter inside it; the graph task it runs is set only then.
  if (torch::autograd::get_current_graph_task_exec_info() != nullptr)
    ++all_reduces_->during_backward;
}

namespace {

/// Rows the replica's model ran forward in the current step, counted by a probe after its last
/// layer: a replica that trains on the whole batch gets the right numbers without the all-reduce,
/// so only the rows tell that it did not split the data.
std::int64_t rows_forward = 0;
struct RowCountImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) {
    rows_forward += x.size(0);
    return x;
  }
};
TORCH_MODULE(RowCount);

/// What is wrong with the rows rank `rank` of `ranks` ran forward in step `step` ("" if nothing).
std::string check_rows(int step, int rank, int ranks, std::int64_t rows) {
  const std::int64_t share = check::batch_rows / ranks;
  if (rows == share) return "";
  return "  step " + std::to_string(step) + ": rank " + std::to_string(rank) + " of " +
         std::to_string(ranks) + " ran its replica forward on " + std::to_string(rows) +
         " rows; data parallelism gives each rank its own share of the global batch of " +
         std::to_string(check::batch_rows) + " rows, " + std::to_string(share) +
         " here, and averages the gradients over the ranks\n";
}

/// The learner's training; `all_reduces` gets what each step started through the World, `rows`
/// what is wrong with the rows of the first step whose forward did not run on this rank's share.
check::Record train_learner(const World& world, const StartReplica& start, const check::Options& o,
                            std::vector<World::AllReduces>& all_reduces, std::string& rows) {
  const auto cfg = check::model_config();
  auto model = mpp::models::make_full_mlp(cfg);
  model->push_back(RowCount());
  auto step = start(world, model);
  auto optimizer = check::make_optimizer(model->parameters());
  check::Record r;
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::batch_rows, s);
    optimizer.zero_grad();
    const auto before = world.all_reduces();
    rows_forward = 0;
    r.losses.push_back(step(batch));
    if (rows.empty()) rows = check_rows(s, world.rank(), world.size(), rows_forward);
    const auto after = world.all_reduces();
    all_reduces.push_back(
        {after.started - before.started, after.during_backward - before.during_backward});
    optimizer.step();
  }
  check::record_layers(r, *model, 0);
  return r;
}

/// What DDP's hooks are for: each step starts some all-reduce before backward() returns, so that
/// it travels while backward computes the earlier layers' gradients. Empty when every step does.
std::string check_overlap(const std::vector<World::AllReduces>& all_reduces) {
  std::string steps;
  std::string started;
  int failing = 0;
  for (std::size_t s = 0; s < all_reduces.size(); ++s)
    if (all_reduces[s].during_backward == 0) {
      const char* comma = failing++ == 0 ? "" : ", ";
      steps += comma + std::to_string(s);
      started += comma + std::to_string(all_reduces[s].started);
    }
  if (failing == 0) return "";
  return std::string("  step") + (failing > 1 ? "s " : " ") + steps +
         ": no all-reduce started during backward() (" + started +
         " started outside it); DDP starts each gradient's (or bucket's) all-reduce from its "
         "hook, before backward() returns, so that it travels while the earlier layers' "
         "gradients are computed\n";
}

/// mpp's data parallelism: `sync` runs after backward (NaiveDP), or nothing does (DDP's hooks).
template <class Sync>
check::Record train_reference(const Group& world, torch::nn::Sequential& model, Sync sync,
                              const check::Options& o) {
  const auto cfg = check::model_config();
  auto optimizer = check::make_optimizer(model->parameters());
  check::Record r;
  const std::int64_t rows = check::batch_rows / world.size();
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::batch_rows, s);
    optimizer.zero_grad();
    const auto begin = world.rank() * rows;
    auto loss = torch::nn::functional::mse_loss(model->forward(batch.inputs.narrow(0, begin, rows)),
                                                batch.targets.narrow(0, begin, rows));
    loss.backward();
    sync();
    optimizer.step();
    auto mean = loss.detach().clone();
    world.all_reduce_mean(mean);
    r.losses.push_back(mean.item<double>());
  }
  check::record_layers(r, *model, 0);
  return r;
}

}  // namespace

int check_data_parallel(int argc, char** argv, const char* lab, DataParallelReference reference,
                        const StartReplica& start) {
  return guarded_main(lab, [&] {
    const auto o = check::parse(argc, argv, lab);
    at::set_num_threads(1);
    const auto group = mpp::init_process_group();
    const World world(group);
    if (check::batch_rows % world.size() != 0)
      throw std::invalid_argument("runs on 1, 2, 4, 8 or 16 ranks (the global batch has " +
                                  std::to_string(check::batch_rows) + " rows)");
    std::vector<World::AllReduces> all_reduces;
    std::string problems;
    const auto mine = train_learner(world, start, o, all_reduces, problems);
    const auto monolith = check::train_monolith(o, check::batch_rows);
    auto model = mpp::models::make_full_mlp(check::model_config());
    check::Record reference_record;
    std::string name;
    if (reference == DataParallelReference::naive_dp) {
      name = "mpp::NaiveDP<Blocking<Gloo>>";
      mpp::NaiveDP<mpp::Blocking<mpp::Gloo>> dp(*model, group);
      reference_record = train_reference(
          group, model, [&] { dp.sync_gradients(); }, o);
    } else {
      // Small buckets, so that several all-reduces are in flight during backward.
      name = "mpp::DDP<Async<Gloo>>";
      mpp::DDP<mpp::Async<mpp::Gloo>> ddp(*model, group, {.bucket_bytes = 8 * 1024});
      reference_record = train_reference(
          group, model, [] {}, o);
    }
    check::compare(mine, monolith, "the monolith", problems);
    check::compare(mine, reference_record, name, problems);
    const bool ddp = reference == DataParallelReference::ddp;
    if (ddp) problems += check_overlap(all_reduces);
    if (world.rank() == 0) check::print_losses(0, mine, monolith, reference_record, "mpp");
    return check::verdict(group, lab, problems,
                          std::string(lab) + " on " + std::to_string(world.size()) + " ranks, " +
                              std::to_string(o.steps) +
                              " steps: the loss and every parameter equal the monolith's and " +
                              name + "'s, each rank ran its share of the rows" +
                              (ddp ? ", and each step started all-reduces during backward" : ""));
  });
}

}  // namespace lab
