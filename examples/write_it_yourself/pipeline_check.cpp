// check_pipeline (harness.hpp): the learner's pipeline step against the monolith and against the
// mpp::Pipeline of the same schedule, on the same ranks; and the property the lab teaches, read
// from the order in which the learner's stage ran its forwards and backwards (a probe at the end
// of the stage's layers): every schedule computes the same numbers, so only the order tells
// 1F1B from GPipe, or micro-batches from one batch. The probe also sees whether a forward kept
// its graph (recompute keeps none until right before the backward), and each gradient sent to
// the previous rank looks at whether the parameters' .grad changed since the one before (the
// split backward sends it before it computes the weight gradients).
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
  /// Forwards numbered in the order they ran, those with and without the graph apart.
  int micro_batch = 0;
  std::int64_t rows = 0;
  bool graph = true;  ///< a forward that built the graph its backward needs
};
std::vector<StageEvent> stage_events;  // one rank per process: this process's stage

/// The stage's parameters, their .grad when last looked at (zeros for an undefined one), and
/// whether it had changed since then at each message to the previous rank (a gradient): read
/// from .grad itself, whichever autograd call computed and added the weight gradients.
std::vector<at::Tensor> stage_params;
std::vector<at::Tensor> grads_seen;
std::vector<bool> grads_changed_at_gradient_sends;

std::vector<at::Tensor> current_grads() {
  std::vector<at::Tensor> grads;
  for (const auto& p : stage_params)
    grads.push_back(p.grad().defined() ? p.grad().detach().clone() : at::zeros_like(p));
  return grads;
}

/// Whether any parameter's .grad changed since the last look; looks again.
bool grads_changed() {
  auto now = current_grads();
  bool changed = false;
  for (std::size_t i = 0; i < now.size(); ++i)
    changed = changed || !at::equal(now[i], grads_seen[i]);
  grads_seen = std::move(now);
  return changed;
}

/// Identity in the forward and in the backward; records both.
struct ProbeFunction : torch::autograd::Function<ProbeFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            bool graph) {
    int forwards = 0;
    for (const auto& e : stage_events) forwards += e.forward && e.graph == graph ? 1 : 0;
    stage_events.push_back({true, forwards, x.size(0), graph});
    ctx->saved_data["micro_batch"] = static_cast<std::int64_t>(forwards);
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    stage_events.push_back({false, static_cast<int>(ctx->saved_data["micro_batch"].toInt()), 0});
    return {grads[0], at::Tensor()};
  }
};
struct ProbeImpl : torch::nn::Module {
  // The stage's output carries a graph exactly when its layers built one (their parameters
  // require gradients; under torch::NoGradGuard they build none).
  at::Tensor forward(const at::Tensor& x) { return ProbeFunction::apply(x, x.requires_grad()); }
};
TORCH_MODULE(Probe);

/// "1 forward", "3 forwards": `n` and the noun, `plural` (the noun and an s) unless n is 1.
std::string counted(long n, const std::string& noun, const std::string& plural = "") {
  std::string text = std::to_string(n);
  text += ' ';
  text += n == 1 ? noun : plural.empty() ? noun + "s" : plural;
  return text;
}

/// "F0 F1 B0 ...": the events as the messages print them; with `graphs`, a forward that kept its
/// graph is G and one that did not F.
std::string order_text(const std::vector<StageEvent>& events, bool graphs = false) {
  // Appended piece by piece: g++ 12 at -O3 warns of a memcpy overflow in the concatenated form
  // that cannot happen (-Wstringop-overflow, a known false positive).
  std::string out;
  for (const auto& e : events) {
    if (!out.empty()) out += ' ';
    out += !e.forward ? 'B' : graphs && e.graph ? 'G' : 'F';
    out += std::to_string(e.micro_batch);
  }
  return out;
}

/// What is wrong with one step of the recompute lab ("" when nothing is): a graph kept beyond
/// the backward it serves, the forwards and backwards counted, and GPipe's order.
std::string check_recompute(int rank, int ranks, const std::vector<StageEvent>& events) {
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(ranks);
  const std::string ran = "; it ran " + order_text(events, true) +
                          " (F: a forward without the graph, G: one with it, B: a backward)";
  const int m = check::micro_batches;
  // A graph lives from the forward that builds it to its backward, with nothing in between.
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (!e.forward || !e.graph) continue;
    const bool backward_next = i + 1 < events.size() && !events[i + 1].forward &&
                               events[i + 1].micro_batch == e.micro_batch;
    if (!backward_next)
      return who + " kept the graph of micro-batch " + std::to_string(e.micro_batch) +
             " between its forward and its backward; recompute holds only the input (the "
             "forward under torch::NoGradGuard) and runs the forward again, with the graph, "
             "right before the backward" +
             ran;
  }
  int plain = 0, graphed = 0, backwards = 0, before_first_backward = 0;
  bool backward_seen = false;
  for (const auto& e : events) {
    if (!e.forward) {
      ++backwards;
      backward_seen = true;
    } else if (e.graph) {
      ++graphed;
    } else {
      ++plain;
      if (!backward_seen) ++before_first_backward;
    }
  }
  if (plain != m || graphed != m || backwards != m)
    return who + " ran " + counted(plain, "forward") + " without the graph, " +
           std::to_string(graphed) + " with it and " + counted(backwards, "backward") +
           "; recompute runs each of the " + std::to_string(m) +
           " micro-batches forward twice (without the graph, then with it right before its "
           "backward) and backward once" +
           ran;
  if (before_first_backward != m)
    return who + " ran " + counted(before_first_backward, "forward") +
           " before its first backward; GPipe runs all " + std::to_string(m) + " first" + ran;
  return "";
}

/// What is wrong with one step of the split_backward lab ("" when nothing is): an input gradient
/// sent to the previous rank after the weight gradients were added to .grad, and ZB-H1's place
/// for each W (the .grad changes once between two input gradients where ZB-H1 runs a W there).
std::string check_split(int rank, int ranks, const std::vector<StageEvent>& events,
                        const std::vector<bool>& changed_at_sends) {
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(ranks);
  const int m = check::micro_batches;
  int forwards = 0;
  for (const auto& e : events) forwards += e.forward ? 1 : 0;
  if (forwards != m)
    return who + " ran " + counted(forwards, "forward") + "; split_backward cuts the batch into " +
           std::to_string(m) + " micro-batches, each run forward once";
  if (rank > 0 && static_cast<int>(changed_at_sends.size()) != m)
    return who + " sent " + counted(static_cast<long>(changed_at_sends.size()), "message") +
           " to rank " + std::to_string(rank - 1) +
           "; it sends one input gradient per micro-batch, " + std::to_string(m);
  if (!changed_at_sends.empty() && changed_at_sends[0])
    return who +
           " sent micro-batch 0's input gradient after computing its weight gradients (the "
           "parameters' .grad had changed since the step began); a split backward sends the "
           "input gradient (I) before it computes the weight gradients (W)";
  for (int k = 1; k < static_cast<int>(changed_at_sends.size()); ++k) {
    // ZB-H1 runs the W of micro-batch i - rank right after the I of micro-batch i.
    const int w = k - 1 - rank;
    const std::string between = " between sending micro-batch " + std::to_string(k - 1) +
                                "'s input gradient and micro-batch " + std::to_string(k) + "'s";
    const std::string zb_h1 = "; ZB-H1 runs the W of micro-batch i - " + std::to_string(rank) +
                              " right after the I of micro-batch i on this rank";
    if (changed_at_sends[k] && w < 0)
      return who + " added weight gradients to .grad" + between + zb_h1 + ", so none there";
    if (!changed_at_sends[k] && w >= 0)
      return who + " added no weight gradients to .grad" + between + zb_h1 +
             ", which puts the W of micro-batch " + std::to_string(w) + " there";
  }
  return "";
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
  if (lab == "recompute") return check_recompute(rank, ranks, events);
  const int m = lab == "naive_pipeline" ? 1 : check::micro_batches;
  if (forwards != m || backwards != m) {
    if (m == 1)
      return who + " ran " + counted(forwards, "forward") + " and " +
             counted(backwards, "backward") + "; the naive pipeline runs the whole batch (" +
             std::to_string(rows) + " rows) forward once and backward once" + ran;
    return who + " ran " + counted(forwards, "forward") + " and " + counted(backwards, "backward") +
           "; " + lab + " cuts the batch of " + std::to_string(rows) + " rows into " +
           std::to_string(m) + " micro-batches, each run forward once and backward once" + ran;
  }
  if (lab == "gpipe") {
    if (peak != m)
      return who + " held at most " + counted(peak, "micro-batch", "micro-batches") +
             " at once; GPipe runs all " + std::to_string(m) +
             " forwards before the first backward, so it holds " + std::to_string(m) + ran;
    return "";
  }
  if (lab == "one_f_one_b" || lab == "one_f_one_b_async") {
    const int bound = std::min(ranks - rank, m);
    if (peak > bound)
      return who + " held " + counted(peak, "micro-batch", "micro-batches") +
             " at once; 1F1B holds at most " + std::to_string(bound) +
             " there (P - r, with P = " + std::to_string(ranks) + ")" + ran;
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
  stage_params = stage.layers->parameters();
  stage.layers->push_back(Probe());
  auto optimizer = check::make_optimizer(stage.layers->parameters());
  check::Record r;
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::pipeline_rows, s);
    optimizer.zero_grad();
    stage_events.clear();
    grads_seen = current_grads();
    grads_changed_at_gradient_sends.clear();
    const double loss = step(world, stage, batch);
    if (schedule.empty()) {
      schedule = lab == "split_backward" ? check_split(world.rank(), world.size(), stage_events,
                                                       grads_changed_at_gradient_sends)
                                         : check_schedule(lab, world.rank(), world.size(),
                                                          check::pipeline_rows, stage_events);
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
    case PipelineReference::gpipe_recompute:
      return train_pipeline<
          mpp::Pipeline<mpp::Recompute<Stages>, mpp::GPipe<M>, mpp::Blocking<mpp::Gloo>>>(world, o,
                                                                                          name);
    case PipelineReference::zero_bubble_h1:
      return train_pipeline<mpp::Pipeline<Stages, mpp::ZeroBubbleH1<M>, mpp::Async<mpp::Gloo>>>(
          world, o, name);
  }
  throw std::logic_error("unknown pipeline reference");
}

/// What the check verified besides the numbers, as the PASS line says it.
std::string order_checked(const std::string& lab) {
  if (lab == "recompute")
    return "each micro-batch's graph built only right before its backward, in GPipe's order";
  if (lab == "split_backward")
    return "each input gradient sent before its weight gradients were computed, in ZB-H1's order";
  return "in " + lab + "'s order";
}

}  // namespace

void World::note_send(const at::Tensor& tensor, int dst) const {
  sends_->push_back(tensor.numel());
  if (dst == rank() - 1 && !stage_params.empty())
    grads_changed_at_gradient_sends.push_back(grads_changed());
}

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
    if (!problems.empty()) check::diagnose_divided_by_m(mine, problems);
    if (world.rank() == world.size() - 1)
      check::print_losses(world.rank(), mine, monolith, pipeline, "mpp");
    return check::verdict(group, lab, problems,
                          std::string(lab) + " on " + std::to_string(world.size()) + " ranks, " +
                              std::to_string(o.steps) +
                              " steps: the loss and every parameter equal the monolith's and " +
                              name + "'s, " + order_checked(lab));
  });
}

}  // namespace lab
