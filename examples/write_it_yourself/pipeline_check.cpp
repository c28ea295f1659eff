// check_pipeline (harness.hpp): the learner's pipeline step against the monolith and against the
// mpp::Pipeline of the same schedule, on the same ranks; and the property the lab teaches, read
// from the order in which the learner's stage ran its forwards and backwards (a probe at the end
// of the stage's layers): every schedule computes the same numbers, so only the order tells
// 1F1B from GPipe, or micro-batches from one batch.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "mpp/pipeline.hpp"
#include "mpp/pipeline/with_ranks.hpp"

#include "comparison.hpp"

namespace lab {

namespace {

/// What this rank's stage ran in one step, in order: a forward of a micro-batch of `rows` rows,
/// or the start of a micro-batch's backward (when autograd reaches the stage's last layer).
struct StageEvent {
  bool forward = true;
  int micro_batch = 0;  ///< forwards numbered in the order they ran
  std::int64_t rows = 0;
};
std::vector<StageEvent> stage_events;  // one rank per process: this process's stage

/// Identity in the forward and in the backward; records both.
struct ProbeFunction : torch::autograd::Function<ProbeFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    int forwards = 0;
    for (const auto& e : stage_events) forwards += e.forward ? 1 : 0;
    stage_events.push_back({true, forwards, x.size(0)});
    ctx->saved_data["micro_batch"] = static_cast<std::int64_t>(forwards);
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    stage_events.push_back({false, static_cast<int>(ctx->saved_data["micro_batch"].toInt()), 0});
    return {grads[0]};
  }
};
struct ProbeImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return ProbeFunction::apply(x); }
};
TORCH_MODULE(Probe);

/// "F0 F1 B0 ...": the events as the messages print them.
std::string order_text(const std::vector<StageEvent>& events) {
  // Appended piece by piece: g++ 12 at -O3 warns of a memcpy overflow in the concatenated form
  // that cannot happen (-Wstringop-overflow, a known false positive).
  std::string out;
  for (const auto& e : events) {
    if (!out.empty()) out += ' ';
    out += e.forward ? 'F' : 'B';
    out += std::to_string(e.micro_batch);
  }
  return out;
}

/// The order the lab teaches on rank `rank` of `ranks` with M micro-batches, as F/B and the
/// micro-batch of each ("F0 B0 F1 B1 ..."), or empty when only the counts are checked (GPipe may
/// run its backwards in any order).
std::string expected_order(const std::string& lab, int rank, int ranks, int m) {
  std::vector<StageEvent> e;
  if (lab == "naive_pipeline") {
    e = {{true, 0, 0}, {false, 0, 0}};
  } else if (lab == "micro_batches") {
    for (int i = 0; i < m; ++i) e.insert(e.end(), {{true, i, 0}, {false, i, 0}});
  } else if (lab == "one_f_one_b" || lab == "one_f_one_b_async") {
    const int warmup = std::min(ranks - 1 - rank, m);
    for (int i = 0; i < warmup; ++i) e.push_back({true, i, 0});
    for (int i = 0; i < m - warmup; ++i) e.insert(e.end(), {{true, warmup + i, 0}, {false, i, 0}});
    for (int i = m - warmup; i < m; ++i) e.push_back({false, i, 0});
  }
  return order_text(e);
}

/// What is wrong with one step's events for the lab's schedule ("" when nothing is): the number
/// of forwards (micro-batches), the peak of micro-batches in flight, and the order.
std::string check_schedule(const std::string& lab, int rank, int ranks, std::int64_t rows,
                           const std::vector<StageEvent>& events) {
  int forwards = 0, live = 0, peak = 0, backwards = 0;
  for (const auto& e : events) {
    if (e.forward) {
      ++forwards;
      peak = std::max(peak, ++live);
    } else {
      ++backwards;
      --live;
    }
  }
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(ranks);
  const std::string ran = "; it ran " + order_text(events);
  const int m = lab == "naive_pipeline" ? 1 : check::micro_batches;
  if (forwards != m || backwards != m) {
    if (m == 1)
      return who + " ran " + std::to_string(forwards) + " forwards and " +
             std::to_string(backwards) + " backwards; the naive pipeline runs the whole batch (" +
             std::to_string(rows) + " rows) forward once and backward once" + ran;
    return who + " ran " + std::to_string(forwards) + " forwards and " + std::to_string(backwards) +
           " backwards; " + lab + " cuts the batch of " + std::to_string(rows) + " rows into " +
           std::to_string(m) + " micro-batches, each run forward once and backward once" + ran;
  }
  if (lab == "gpipe") {
    if (peak != m)
      return who + " held at most " + std::to_string(peak) +
             " micro-batches at once; GPipe runs all " + std::to_string(m) +
             " forwards before the first backward, so it holds " + std::to_string(m) + ran;
    return "";
  }
  if (lab == "one_f_one_b" || lab == "one_f_one_b_async") {
    const int bound = std::min(ranks - rank, m);
    if (peak > bound)
      return who + " held " + std::to_string(peak) + " micro-batches at once; 1F1B holds at most " +
             std::to_string(bound) + " there (P - r, with P = " + std::to_string(ranks) + ")" + ran;
  }
  const std::string want = expected_order(lab, rank, ranks, m);
  if (!want.empty() && order_text(events) != want)
    return who + " ran " + order_text(events) + "; " + lab + " runs " + want +
           (lab == "one_f_one_b" || lab == "one_f_one_b_async"
                ? " (P - 1 - r warm-up forwards, then one forward and one backward, then the "
                  "backwards left)"
                : " (each micro-batch forward and backward before the next)");
  return "";
}

struct MeanSquaredError {
  at::Tensor operator()(const at::Tensor& out, const at::Tensor& target) const {
    return torch::nn::functional::mse_loss(out, target);
  }
};

/// The learner's step, this rank's layers only, with the probe after them; `schedule` gets what
/// is wrong with the order of the first step that breaks the lab's schedule.
check::Record train_learner(const World& world, const PipelineStep& step, const check::Options& o,
                            const std::string& lab, std::string& schedule) {
  const auto cfg = check::model_config();
  const auto [begin, end] = check::stage_layers(cfg.layers, world.rank(), world.size());
  Stage stage{mpp::models::make_mlp_layers(cfg, begin, end), check::micro_batches,
              o.both_send_first};
  stage.layers->push_back(Probe());
  auto optimizer = check::make_optimizer(stage.layers->parameters());
  check::Record r;
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::pipeline_rows, s);
    optimizer.zero_grad();
    stage_events.clear();
    const double loss = step(world, stage, batch);
    if (schedule.empty()) {
      schedule =
          check_schedule(lab, world.rank(), world.size(), check::pipeline_rows, stage_events);
      if (!schedule.empty()) schedule = "  step " + std::to_string(s) + ": " + schedule + "\n";
    }
    optimizer.step();
    if (world.rank() == world.size() - 1) r.losses.push_back(loss);
  }
  check::record_layers(r, *stage.layers, begin);
  return r;
}

/// mpp's pipeline of the same schedule.
template <class Pipe>
check::Record train_pipeline(const Group& world, const check::Options& o, std::string& name) {
  const auto cfg = check::model_config();
  Pipe pipe(world, mpp::MlpModel{cfg});
  name = Pipe::name();
  auto optimizer = check::make_optimizer(pipe.parameters());
  check::Record r;
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::pipeline_rows, s);
    optimizer.zero_grad();
    r.losses.push_back(pipe.train_step(pipe.is_first() ? batch.inputs : at::Tensor(),
                                       pipe.is_last() ? batch.targets : at::Tensor(),
                                       MeanSquaredError{}));
    optimizer.step();
  }
  for (const auto& piece : pipe.pieces())
    check::record_layers(r, *piece.module, piece.layers.begin);
  return r;
}

template <int P>
check::Record train_reference(const Group& world, PipelineReference reference,
                              const check::Options& o, std::string& name) {
  using Stages = mpp::Uniform<P>;
  constexpr int M = check::micro_batches;
  switch (reference) {
    case PipelineReference::naive:
      return train_pipeline<mpp::Pipeline<Stages, mpp::Naive, mpp::Blocking<mpp::Gloo>>>(world, o,
                                                                                         name);
    case PipelineReference::gpipe:
      return train_pipeline<mpp::Pipeline<Stages, mpp::GPipe<M>, mpp::Blocking<mpp::Gloo>>>(
          world, o, name);
    case PipelineReference::one_f_one_b:
      return train_pipeline<mpp::Pipeline<Stages, mpp::OneFOneB<M>, mpp::Blocking<mpp::Gloo>>>(
          world, o, name);
    case PipelineReference::one_f_one_b_async:
      return train_pipeline<mpp::Pipeline<Stages, mpp::OneFOneB<M>, mpp::Async<mpp::Gloo>>>(
          world, o, name);
  }
  throw std::logic_error("unknown pipeline reference");
}

}  // namespace

int check_pipeline(int argc, char** argv, const char* lab, PipelineReference reference,
                   const PipelineStep& step) {
  return guarded_main(lab, [&] {
    const auto o = check::parse(argc, argv, lab);
    at::set_num_threads(1);
    const auto group = mpp::init_process_group();
    const World world(group);
    if (world.size() != 2 && world.size() != 4)
      throw std::invalid_argument("runs on 2 or 4 ranks (got " + std::to_string(world.size()) +
                                  "): mpprun --nproc-per-node 2 <this program>");
    std::string problems;
    const auto mine = train_learner(world, step, o, lab, problems);
    const auto monolith = check::train_monolith(o, check::pipeline_rows);
    std::string name;
    check::Record pipeline;
    mpp::with_ranks<2, 4>(world.size(), [&](auto ranks) {
      pipeline = train_reference<decltype(ranks)::value>(group, reference, o, name);
    });
    check::compare(mine, monolith, "the monolith", problems);
    check::compare(mine, pipeline, name, problems);
    if (world.rank() == world.size() - 1)
      check::print_losses(world.rank(), mine, monolith, pipeline, "mpp");
    return check::verdict(group, lab, problems,
                          std::string(lab) + " on " + std::to_string(world.size()) + " ranks, " +
                              std::to_string(o.steps) +
                              " steps: the loss and every parameter equal the monolith's and " +
                              name + "'s, in " + lab + "'s order");
  });
}

}  // namespace lab
