// Lab 17 — the cluster mental model: one program, any launcher, one node or several.
//
// The program never asks who started it. mpp::init_process_group() reads whichever variables
// the launcher exported (mpprun/torchrun: RANK, WORLD_SIZE, ...; srun: SLURM_PROCID, ...;
// mpirun: OMPI_COMM_WORLD_RANK, ...), meets the other ranks at MASTER_ADDR:MASTER_PORT and
// connects Gloo over loopback (one host) or over the interface that reaches MASTER_ADDR.
//
//   mpprun --nproc-per-node 4 lab17_multinode --mode ddp
//   mpprun --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr node0 --master-port 29500
//          lab17_multinode --mode pipeline            # and the same with --node-rank 1 on node1
//   torchrun --no_python --nproc_per_node 4 lab17_multinode
//   srun -N 2 --ntasks-per-node 2 lab17_multinode     (config/slurm_example.sbatch)
//
// It trains the course MLP on a fixed synthetic regression task, either replicated (DDP: each
// rank takes its slice of every global batch) or cut into one pipeline stage per rank. Rank 0
// prints "mpp-job: step <s> loss <x>" and "mpp-job: final loss <x>": the same numbers whatever the
// launcher, because the arithmetic does not depend on who started the processes.
//
// For the fault lab: --ckpt-dir/--ckpt-every write a checkpoint per rank and resume from the
// latest complete one at start; --fault kill|stall makes one rank die by SIGKILL (or sleep)
// inside the backward pass of one step, to watch the others stop within MPP_TIMEOUT_S.
//
// --svg FILE (pipeline mode) draws the last step as every rank measured it, gathered on rank 0,
// with each rank's node in the title: across two nodes, the transfers between stage 1 and
// stage 2 are the ones that cross the link.
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "mpp/checkpoint/checkpoint.hpp"
#include "mpp/comm/init.hpp"
#include "mpp/data_parallel/ddp.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/partition/uniform.hpp"
#include "mpp/pipeline/pipeline.hpp"
#include "mpp/pipeline/report.hpp"
#include "mpp/schedule/policies.hpp"
#include "mpp/util/blas.hpp"

namespace fs = std::filesystem;

namespace {

struct Settings {
  std::string mode = "ddp";
  int steps = 8;
  std::int64_t hidden = 64;
  int layers = 4;
  std::int64_t batch = 32;  // global batch
  double lr = 3e-3;
  std::string ckpt_dir;
  int ckpt_every = 0;
  std::string fault = "none";
  int fault_rank = -1;
  int fault_step = -1;
  std::string fault_once;
  double stall_seconds = 3600;
  int step_ms = 0;
  std::string svg;  // pipeline mode: the last step's measured timeline
};

void say(const std::string& line) {
  std::printf("mpp-job: %s\n", line.c_str());
  std::fflush(stdout);
}

/// A fixed regression task every rank can rebuild on its own: y = 0.5 * roll(x, 1).
struct Task {
  torch::Tensor x, y;
  Task(std::int64_t samples, std::int64_t hidden) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    x = at::randn({samples, hidden}, gen, torch::kFloat);
    y = 0.5 * x.roll(1, 1);
  }
  /// Global batch `step` (the task is cycled through).
  std::pair<torch::Tensor, torch::Tensor> batch(int step, std::int64_t size) const {
    const std::int64_t batches = x.size(0) / size;
    const std::int64_t begin = (step % batches) * size;
    return {x.narrow(0, begin, size), y.narrow(0, begin, size)};
  }
};

/// Fires the configured fault once, inside backward (a gradient hook), on the chosen rank/step.
struct Fault {
  const Settings& s;
  int rank;
  int step = 0;        // the current step, set by the training loop
  bool fired = false;  // a hook runs once per micro-batch: fire on the first only

  bool armed() {
    if (fired || s.fault == "none" || rank != s.fault_rank || step != s.fault_step) return false;
    fired = true;
    if (s.fault_once.empty()) return true;
    if (fs::exists(s.fault_once)) return false;  // fired in an earlier attempt
    std::ofstream(s.fault_once) << "fired at step " << step << '\n';
    return true;
  }
  void operator()() {
    if (!armed()) return;
    // Wall-clock time of the fault, so that a test can measure how long the others take to stop.
    char when[32];
    std::snprintf(
        when, sizeof when, " at t=%.3f",
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
    if (s.fault == "kill") {
      say("fault: rank " + std::to_string(rank) + " kills itself (SIGKILL) mid-step " +
          std::to_string(step) + when);
      std::raise(SIGKILL);
    }
    say("fault: rank " + std::to_string(rank) + " stalls for " + std::to_string(s.stall_seconds) +
        " s mid-step " + std::to_string(step) + when);
    std::this_thread::sleep_for(std::chrono::duration<double>(s.stall_seconds));
  }
};

/// Checkpoints: <dir>/step_<s>/rank_<r>/ per rank, and <dir>/latest naming the newest step that
/// every rank finished writing (updated by rank 0 after a barrier, atomically).
struct Checkpoints {
  fs::path dir;
  int every = 0;

  bool enabled() const { return !dir.empty() && every > 0; }
  fs::path rank_dir(int step, int rank) const {
    return dir / ("step_" + std::to_string(step)) / ("rank_" + std::to_string(rank));
  }
  int latest() const {
    std::ifstream in(dir / "latest");
    int step = 0;
    return (in >> step) ? step : 0;
  }
  void save(int step, const mpp::ProcessGroup& world, torch::nn::Module& model,
            torch::optim::AdamW& optimizer) const {
    mpp::checkpoint::write_checkpoint(
        rank_dir(step, world.rank()),
        {mpp::checkpoint::training_state_file(mpp::checkpoint::model_tensors(model), optimizer)},
        {{"progress", mpp::checkpoint::to_json({step, 0, step})}});
    world.barrier();  // every rank's files are in place before `latest` points at them
    if (world.rank() == 0) {
      const fs::path tmp = dir / "latest.tmp";
      std::ofstream(tmp) << step << '\n';
      fs::rename(tmp, dir / "latest");
    }
  }
  int restore(const mpp::ProcessGroup& world, torch::nn::Module& model,
              torch::optim::AdamW& optimizer) const {
    const int step = latest();
    if (step == 0) return 0;
    const fs::path from = rank_dir(step, world.rank());
    auto loaded = mpp::checkpoint::read_checkpoint(from);
    mpp::checkpoint::restore_training_state(loaded.files.at("state.pt"),
                                            mpp::checkpoint::model_tensors(model), optimizer,
                                            from.string());
    return static_cast<int>(mpp::checkpoint::progress_from(loaded.manifest).step);
  }
};

/// The loop both modes share: resume, step, log, checkpoint. `step_fn(step, x, y)` runs one
/// optimizer step on the global batch and returns its mean loss (the same on every rank).
/// `local` is what this rank owns and checkpoints: the whole model (DDP) or its stage.
template <class StepFn>
int train(const Settings& s, const mpp::ProcessGroup& world, torch::nn::Module& local,
          torch::optim::AdamW& optimizer, Fault& fault, StepFn&& step_fn) {
  Checkpoints ckpt{s.ckpt_dir, s.ckpt_every};
  const int start = ckpt.enabled() ? ckpt.restore(world, local, optimizer) : 0;
  if (start > 0 && world.rank() == 0) say("resumed from step " + std::to_string(start));
  // The first parameter gets its gradient last in backward: a fault there leaves the peers in
  // the middle of the step (an all-reduce in flight, or a pipeline transfer).
  local.parameters().front().register_hook([&fault](const torch::Tensor&) { fault(); });

  Task task(2 * s.batch, s.hidden);  // two global batches, cycled: the loss falls within steps
  double loss = 0;
  for (int step = start + 1; step <= s.steps; ++step) {
    if (s.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(s.step_ms));
    fault.step = step;
    fault.fired = false;
    auto [x, y] = task.batch(step - 1, s.batch);
    optimizer.zero_grad();
    loss = step_fn(x, y);
    optimizer.step();
    if (world.rank() == 0) say("step " + std::to_string(step) + " loss " + std::to_string(loss));
    if (ckpt.enabled() && step % ckpt.every == 0 && step < s.steps)
      ckpt.save(step, world, local, optimizer);
  }
  if (world.rank() == 0 && start < s.steps) {
    char text[64];
    std::snprintf(text, sizeof text, "%.9g", loss);
    say(std::string("final loss ") + text);
  }
  return 0;
}

/// Data parallel: every rank holds the whole model and takes its slice of each global batch.
int train_ddp(const Settings& s, const mpp::Group<mpp::Gloo>& world) {
  const int rank = world.rank(), size = world.size();
  if (s.batch % size != 0)
    throw std::invalid_argument("mpp-job: --batch " + std::to_string(s.batch) +
                                " must be a multiple of the world size " + std::to_string(size) +
                                " (every rank takes an equal slice)");
  const std::int64_t local = s.batch / size;
  auto model = mpp::models::make_mlp_layers({s.hidden, s.layers, 42}, 0, s.layers);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(s.lr));
  Fault fault{s, rank};
  std::optional<mpp::DistributedDataParallel<mpp::Async<mpp::Gloo>>> ddp;
  return train(
      s, world, *model, optimizer, fault, [&](const torch::Tensor& x, const torch::Tensor& y) {
        // Built on the first step, after a resume: DDP broadcasts rank 0's (restored) weights.
        if (!ddp) ddp.emplace(*model, world);
        auto loss = torch::mse_loss(model->forward(x.narrow(0, rank * local, local)),
                                    y.narrow(0, rank * local, local));
        loss.backward();
        auto global = loss.detach().clone();
        world.all_reduce_mean(global);  // equal slices: the mean of the means is the batch loss
        return global.item<double>();
      });
}

/// "ranks 0-1 on node 0, ranks 2-3 on node 1": where each rank ran, as the ranks themselves
/// report it (a collective: every rank adds its node number at its own index).
std::string placement(const mpp::ProcessGroup& world, int node_rank) {
  auto nodes = torch::zeros({world.size()}, torch::kInt64);
  nodes[world.rank()] = node_rank;
  world.all_reduce(nodes);
  std::ostringstream out;
  for (int first = 0; first < world.size();) {
    const auto node = nodes[first].item<std::int64_t>();
    int last = first;
    while (last + 1 < world.size() && nodes[last + 1].item<std::int64_t>() == node) ++last;
    if (first > 0) out << ", ";
    if (first == last)
      out << "rank " << first;
    else
      out << "ranks " << first << '-' << last;
    out << " on node " << node;
    first = last + 1;
  }
  return out.str();
}

/// Draws the last pipeline step as every rank measured it (gathered on rank 0) with the library's
/// timeline renderer: compute boxes, and in grey the sends and the time blocked on a receive.
template <class Pipe>
void write_timeline(const Settings& s, const mpp::ProcessGroup& world, const Pipe& pipe,
                    int node_rank) {
  const std::string where = placement(world, node_rank);
  const auto report = mpp::report_last_step(pipe);  // every rank takes part; rank 0 gets it
  if (!report) return;
  mpp::SvgOptions svg;
  svg.title = "Lab 17 pipeline on " + std::to_string(report->figures.ranks) + " ranks (" + where +
              "): the last step as measured (microseconds)";
  char subtitle[256];
  std::snprintf(subtitle, sizeof subtitle,
                "%s; step %.1f ms, bubble %.1f%%; %d x Linear(%lld), batch %lld, one thread per "
                "rank, 2 shared cores",
                Pipe::name().c_str(), report->figures.step_us / 1e3, 100.0 * report->figures.bubble,
                s.layers, static_cast<long long>(s.hidden), static_cast<long long>(s.batch));
  svg.subtitle = subtitle;
  std::ofstream out(s.svg);
  out << mpp::trace::svg_timeline(report->traces, svg);
  if (!out) throw std::runtime_error("mpp-job: cannot write the timeline to '" + s.svg + "'");
  say("timeline of the last step (" + where + ") drawn in " + s.svg);
}

/// Pipeline parallel: one stage per rank (4 ranks), 1F1B over 4 micro-batches.
int train_pipeline(const Settings& s, const mpp::Group<mpp::Gloo>& world, int node_rank) {
  using Pipe = mpp::Pipeline<mpp::Uniform<4>, mpp::OneFOneB<4>, mpp::Async<mpp::Gloo>>;
  Pipe pipe(world, mpp::MlpModel{{s.hidden, s.layers, 42}});
  torch::nn::Sequential stage = pipe.pieces().front().module;  // shares the stage's layers
  torch::optim::AdamW optimizer(pipe.parameters(), torch::optim::AdamWOptions(s.lr));
  Fault fault{s, world.rank()};
  auto mse = [](const at::Tensor& out, const at::Tensor& target) {
    return torch::mse_loss(out, target);
  };
  int stepped = 0;  // the same on every rank: they resume from the same checkpoint
  const int rc = train(s, world, *stage, optimizer, fault,
                       [&](const torch::Tensor& x, const torch::Tensor& y) {
                         ++stepped;
                         return pipe.train_step(pipe.is_first() ? x : torch::Tensor(),
                                                pipe.is_last() ? y : torch::Tensor(), mse);
                       });
  if (!s.svg.empty() && stepped > 0) write_timeline(s, world, pipe, node_rank);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"Lab 17: the same training job under any launcher, on one node or several"};
  app.add_option("--mode", s.mode, "ddp (replicas) or pipeline (one stage per rank)")
      ->check(CLI::IsMember({"ddp", "pipeline"}));
  app.add_option("--steps", s.steps, "optimizer steps in all");
  app.add_option("--hidden", s.hidden, "width of the MLP");
  app.add_option("--layers", s.layers, "Linear layers of the MLP");
  app.add_option("--batch", s.batch, "global batch size");
  app.add_option("--lr", s.lr, "AdamW learning rate");
  app.add_option("--ckpt-dir", s.ckpt_dir, "checkpoint directory (resume from its latest)");
  app.add_option("--ckpt-every", s.ckpt_every, "checkpoint every N steps");
  app.add_option("--fault", s.fault, "none, kill (SIGKILL) or stall (sleep) inside backward")
      ->check(CLI::IsMember({"none", "kill", "stall"}));
  app.add_option("--fault-rank", s.fault_rank, "rank that faults");
  app.add_option("--fault-step", s.fault_step, "step at which it faults");
  app.add_option("--fault-once", s.fault_once,
                 "fire only if this file does not exist (then create it)");
  app.add_option("--stall-seconds", s.stall_seconds, "how long a stalled rank sleeps");
  app.add_option("--step-ms", s.step_ms, "sleep before each step (to watch a run)");
  app.add_option("--svg", s.svg, "pipeline mode: draw the last step's measured timeline here");
  CLI11_PARSE(app, argc, argv);
  if (!s.svg.empty() && s.mode != "pipeline") {
    std::fprintf(stderr,
                 "mpp-job: --svg draws a pipeline step's timeline; use it with --mode pipeline\n");
    return 2;
  }

  torch::set_num_threads(1);
  try {
    const mpp::Environment env = mpp::environment();
    auto world = mpp::init_process_group();
    say("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ", node " +
        std::to_string(env.node_rank) + ", local " + std::to_string(env.local_rank) +
        ", launcher " + std::string(mpp::launcher_name(env.launcher)) + ", master " +
        env.master_addr + ":" + std::to_string(env.master_port));
    if (env.rank == 0) mpp::util::print_blas_report(1);
    if (s.mode == "ddp") return train_ddp(s, world);
    return train_pipeline(s, world, env.node_rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
