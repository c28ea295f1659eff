// Lab 15: train a tiny transformer from scratch with a hand-written loop.
//
//   train_tiny_transformer --epochs 2
//   train_tiny_transformer --save-every 50 --out-dir runs/a
//   train_tiny_transformer --resume latest --out-dir runs/a
//   mpprun --nproc-per-node 2 train_tiny_transformer --ddp      # data parallel, same global batch
//   mpprun --nproc-per-node 2 train_tiny_transformer --pipeline # stages: embedding first, head
//   last
//
// The model's size comes from config/config.json: raise model.num_hidden_layers and run again.
// Outputs (under --out-dir): logs/rank_<r>/train.log, metrics.csv, loss_curve.svg, checkpoints/.
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loss_curve.hpp"
#include "mpp/checkpoint/checkpoint.hpp"
#include "mpp/checkpoint/sharded.hpp"
#include "mpp/comm/init.hpp"
#include "mpp/data_parallel/ddp.hpp"
#include "mpp/data_parallel/sampler.hpp"
#include "mpp/models/char_corpus.hpp"
#include "mpp/models/tiny_transformer.hpp"
#include "mpp/models/transformer_config.hpp"
#include "mpp/pipeline/with_ranks.hpp"
#include "mpp/util/blas.hpp"
#include "pipeline_stage.hpp"

namespace fs = std::filesystem;
namespace ckpt = mpp::checkpoint;
using namespace mpp::models;

namespace {

struct Options {
  std::string config_path = "config/config.json";
  std::optional<int> epochs;
  std::int64_t max_steps = -1;  // stop early (tests, quick looks); -1 runs every epoch
  std::int64_t save_every = 0;
  std::string resume;  // checkpoint directory, or "latest"
  fs::path out_dir = "runs/tiny_transformer";
  int sample_characters = 160;
  bool quiet = false;
  bool ddp = false;
  bool pipeline = false;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr
      << "train_tiny_transformer: " << problem << "\n"
      << "usage: train_tiny_transformer [--config config/config.json] [--epochs N]\n"
         "         [--max-steps N] [--save-every N] [--resume DIR|latest]\n"
         "         [--out-dir runs/tiny_transformer] [--sample N] [--quiet] [--ddp | --pipeline]\n"
         "  --ddp: one data-parallel rank of a job started by mpprun, torchrun, srun or mpirun\n"
         "  --pipeline: one pipeline stage (2 or 4 ranks; Uniform partition, 1F1B, 4 "
         "micro-batches)\n";
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i) -> std::int64_t {
    const std::string flag = argv[i], text = value(i);
    try {
      std::size_t used = 0;
      const auto n = std::stoll(text, &used);
      if (used == text.size() && n >= 0) return n;
    } catch (const std::exception&) {
    }
    usage(flag + " needs a non-negative integer (got '" + text + "')");
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config")
      o.config_path = value(i);
    else if (arg == "--epochs")
      o.epochs = static_cast<int>(number(i));
    else if (arg == "--max-steps")
      o.max_steps = number(i);
    else if (arg == "--save-every")
      o.save_every = number(i);
    else if (arg == "--resume")
      o.resume = value(i);
    else if (arg == "--out-dir")
      o.out_dir = value(i);
    else if (arg == "--sample")
      o.sample_characters = static_cast<int>(number(i));
    else if (arg == "--quiet")
      o.quiet = true;
    else if (arg == "--ddp")
      o.ddp = true;
    else if (arg == "--pipeline")
      o.pipeline = true;
    else if (arg == "--help" || arg == "-h")
      usage("help");
    else
      usage("unknown option " + arg);
  }
  if (o.epochs && *o.epochs < 1) usage("--epochs needs at least 1");
  if (o.ddp && o.pipeline) usage("--ddp and --pipeline are two ways to use the ranks: pick one");
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Mean loss over the whole held-out split, without dropout or gradients.
double validation_loss(TinyTransformer& model, const TokenWindows& validation, std::int64_t batch) {
  torch::NoGradGuard no_grad;
  model->eval();
  double total = 0;
  std::int64_t examples = 0;
  for (std::int64_t begin = 0; begin < validation.size(); begin += batch) {
    const auto end = std::min(validation.size(), begin + batch);
    auto b = validation.range(begin, end);
    total += language_model_loss(model->forward(b.inputs), b.targets).item<double>() *
             static_cast<double>(end - begin);
    examples += end - begin;
  }
  model->train();
  return total / static_cast<double>(examples);
}

/// One progress line, redrawn in place on a terminal and printed now and then otherwise.
void show_progress(bool tty, std::int64_t step, std::int64_t total_steps, std::int64_t epoch,
                   int epochs, double loss, double samples_per_second, bool force) {
  if (!tty && !force) return;
  const int width = 28;
  const int filled = static_cast<int>(width * step / std::max<std::int64_t>(1, total_steps));
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < width) bar += '>' + std::string(static_cast<std::size_t>(width - filled - 1), ' ');
  std::printf("%s[%s] epoch %lld/%d step %lld/%lld loss %.4f %.0f samples/s%s", tty ? "\r" : "",
              bar.c_str(), static_cast<long long>(epoch + 1), epochs, static_cast<long long>(step),
              static_cast<long long>(total_steps), loss, samples_per_second, tty ? "" : "\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = parse_args(argc, argv);
  torch::set_num_threads(1);

  TinyTransformerConfig cfg = load_config(opt.config_path);
  if (opt.epochs) cfg.training.epochs = *opt.epochs;
  const auto& train_cfg = cfg.training;

  // ---- processes -----------------------------------------------------------------------------
  // With --ddp every rank runs this same program on its share of each global batch; without it,
  // a launcher that starts several copies would have them train separate models into the same
  // files, so that is refused.
  // [quote:processes]
  std::optional<mpp::Group<mpp::Gloo>> group;
  if (opt.ddp || opt.pipeline) {
    group = mpp::init_process_group();
  } else if (const char* ws = std::getenv("WORLD_SIZE"); ws && std::atoi(ws) > 1) {
    throw std::runtime_error(std::string("mpp: started as one of WORLD_SIZE=") + ws +
                             " ranks without --ddp or --pipeline: every rank would train its own "
                             "copy and overwrite the others' files; add --ddp or --pipeline, or "
                             "run one process");
  }
  const int rank = group ? group->rank() : 0;
  const int world = group ? group->size() : 1;
  // [/quote:processes]
  // The data-parallel view: a pipeline's stages all work on the same global batch.
  const int dp_rank = opt.pipeline ? 0 : rank, dp_world = opt.pipeline ? 1 : world;
  if (train_cfg.batch_size % dp_world != 0)
    throw mpp::models::ConfigError(
        "mpp: training.batch_size (" + std::to_string(train_cfg.batch_size) +
        ") is the global batch and must split evenly over the " + std::to_string(dp_world) +
        " data-parallel ranks; use a multiple of " + std::to_string(dp_world));

  // ---- data ------------------------------------------------------------------------------
  const CharCorpus corpus = make_char_corpus(cfg.data, train_cfg.sequence_length);
  // [quote:sampler]
  // Every rank visits its share of one permutation per epoch (drop: equal shares, so no rank
  // waits on another in a collective); `batch_size` is the global batch.
  mpp::DistributedSampler sampler(static_cast<std::size_t>(corpus.train.size()), dp_world, dp_rank,
                                  {true, train_cfg.seed, mpp::Remainder::drop});
  const std::int64_t batch_size = train_cfg.batch_size;
  const std::int64_t local_batch = batch_size / dp_world;
  // [/quote:sampler]
  const std::int64_t steps_per_epoch =
      static_cast<std::int64_t>(sampler.size()) / local_batch;  // last partial batch dropped
  std::int64_t total_steps = steps_per_epoch * train_cfg.epochs;
  if (opt.max_steps >= 0) total_steps = std::min(total_steps, opt.max_steps);

  // ---- model and optimizer -----------------------------------------------------------------
  torch::manual_seed(train_cfg.seed);  // dropout masks
  TinyTransformer model(cfg.model);    // pipeline: rank 0's copy, for validation and the sample
  std::optional<lab::StageHandle> stage;
  if (opt.pipeline) {
    const TinyTransformerLayers layers{cfg.model, train_cfg.sequence_length};
    using Async = mpp::Async<mpp::Gloo>;
    // One binary for 2 and 4 ranks, each proven at compile time; another world size is refused
    // with the list (mpp::WorldSizeError).
    stage = mpp::with_ranks<2, 4>(world, [&](auto ranks) {
      return lab::make_stage<mpp::Pipeline<mpp::Uniform<ranks>, mpp::OneFOneB<4>, Async>>(*group,
                                                                                          layers);
    });
  }
  torch::optim::AdamW optimizer(
      stage ? stage->parameters : model->parameters(),
      torch::optim::AdamWOptions(train_cfg.learning_rate).weight_decay(train_cfg.weight_decay));
  std::int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();

  // ---- outputs -------------------------------------------------------------------------------
  const fs::path log_dir = opt.out_dir / "logs" / ("rank_" + std::to_string(rank));  // every rank
  const fs::path checkpoint_root = opt.out_dir / "checkpoints";
  fs::create_directories(log_dir);
  std::vector<lab::MetricsRow> metrics;

  // ---- resume --------------------------------------------------------------------------------
  ckpt::Progress progress;
  double elapsed_before = 0;
  if (!opt.resume.empty()) {
    fs::path dir = opt.resume;
    if (opt.resume == "latest") {
      std::ifstream latest(checkpoint_root / "latest");
      std::string name;
      if (!(latest >> name))
        throw ckpt::CheckpointError(
            "mpp: --resume latest: no checkpoint recorded in " +
            (checkpoint_root / "latest").string() +
            "; run with --save-every N first or pass a checkpoint directory");
      dir = checkpoint_root / name;
    }
    const auto loaded = ckpt::read_checkpoint(dir);
    ckpt::check_same_settings(loaded.manifest.at("config"), mpp::models::to_json(cfg),
                              {"training.epochs", "training.eval_every", "training.log_every"},
                              dir.string());
    const std::string layout = loaded.manifest.value("layout", std::string("replicated"));
    if (layout != (stage ? "pipeline" : "replicated"))
      throw ckpt::CheckpointError("mpp: refusing checkpoint " + dir.string() +
                                  ": it was written by a " + layout +
                                  " run; resume it with the same mode (--pipeline for a "
                                  "pipeline checkpoint, none or --ddp otherwise)");
    auto state = loaded.files.find(stage ? "stage_" + std::to_string(rank) + ".pt" : "state.pt");
    if (state == loaded.files.end())
      throw ckpt::CheckpointError(
          "mpp: refusing checkpoint " + dir.string() +
          ": it has no state.pt (a pipeline checkpoint?); resume it with the "
          "same parallel layout it was written with");
    const int written_by = loaded.manifest.value("world_size", 1);
    if (written_by != world)
      throw ckpt::CheckpointError("mpp: refusing checkpoint " + dir.string() +
                                  ": it was written by " + std::to_string(written_by) +
                                  " rank(s) and this run has " + std::to_string(world) +
                                  "; each rank's generator state is in it, so resume with " +
                                  std::to_string(written_by) + " rank(s)");
    if (stage)
      ckpt::restore_training_state(state->second, stage->named, optimizer, dir.string());
    else
      ckpt::restore_training_state(state->second, *model, optimizer, dir.string(),
                                   ckpt::rank_rng_key(rank));
    progress = ckpt::progress_from(loaded.manifest);
    elapsed_before = loaded.manifest.value("elapsed_seconds", 0.0);
    metrics = lab::read_metrics(opt.out_dir / "metrics.csv", progress.step);
    if (rank == 0)
      std::printf("resumed from %s at step %lld (epoch %lld, batch %lld)\n", dir.string().c_str(),
                  static_cast<long long>(progress.step), static_cast<long long>(progress.epoch + 1),
                  static_cast<long long>(progress.position));
  }
  std::ofstream train_log(log_dir / "train.log",
                          progress.step > 0 ? std::ios::app : std::ios::trunc);
  if (progress.step == 0)
    train_log << "# rank " << rank << " of " << world << ": step loss samples_per_s time_s "
              << "(this rank's loss on its " << local_batch << " samples of each batch)\n";
  if (progress.step == 0) {
    // The proof that the data is split: each rank reads a disjoint share of one permutation.
    sampler.set_epoch(0);
    const auto order = sampler.indices();
    train_log << "# sampler: rank " << rank << " reads " << sampler.size() << " of the "
              << sampler.dataset_size() << " training sequences per epoch (every " << world
              << "-th of one shuffled order); epoch 1 starts with";
    for (std::size_t i = 0; i < std::min<std::size_t>(8, order.size()); ++i)
      train_log << ' ' << order[i];
    train_log << '\n';
  } else
    train_log << "# resumed at step " << progress.step << '\n';
  // Rank 0 writes metrics.csv step by step (a stopped run leaves every finished step in it).
  std::optional<lab::MetricsFile> metrics_file;
  if (rank == 0) metrics_file.emplace(opt.out_dir / "metrics.csv", metrics);

  // [quote:ddp]
  // DDP after the resume: it checks that every rank holds the same parameter structure and
  // broadcasts rank 0's values, then averages gradients in buckets during backward().
  std::optional<mpp::DDP<>> ddp;
  if (group && !stage) ddp.emplace(*model, *group);
  // [/quote:ddp]

  const double baseline = std::log(static_cast<double>(cfg.model.vocab_size));
  if (rank == 0 && !opt.quiet) mpp::util::print_blas_report(1);
  if (rank == 0 && !opt.quiet)
    std::printf(
        "tiny transformer: %d blocks, hidden %lld, %lld heads, %lld parameters; %lld train / "
        "%lld validation sequences of %lld characters; %lld steps per epoch; uniform "
        "baseline ln(%lld) = %.3f; %d rank(s), %lld samples per rank per step\n",
        cfg.model.num_hidden_layers, static_cast<long long>(cfg.model.hidden_size),
        static_cast<long long>(cfg.model.num_attention_heads), static_cast<long long>(parameters),
        static_cast<long long>(corpus.train.size()),
        static_cast<long long>(corpus.validation.size()),
        static_cast<long long>(train_cfg.sequence_length), static_cast<long long>(steps_per_epoch),
        static_cast<long long>(cfg.model.vocab_size), baseline, world,
        static_cast<long long>(local_batch));

  // Rank 0 writes the checkpoint (the replicas are identical), with every rank's generator
  // state gathered into it; the barrier keeps the others from running ahead of a half-written
  // checkpoint.
  auto save = [&](const ckpt::Progress& at, double elapsed) {
    const std::string name = "step_" + std::to_string(at.step);
    const nlohmann::json meta = {{"config", mpp::models::to_json(cfg)},
                                 {"progress", ckpt::to_json(at)},
                                 {"elapsed_seconds", elapsed},
                                 {"world_size", world},
                                 {"layout", stage ? "pipeline" : "replicated"}};
    auto record_latest = [&] {
      const fs::path tmp = checkpoint_root / "latest.tmp";
      std::ofstream(tmp, std::ios::trunc) << name << '\n';
      fs::rename(tmp, checkpoint_root / "latest");
    };
    if (stage) {  // each stage writes its own part, rank 0 the manifest
      ckpt::write_sharded_checkpoint(
          checkpoint_root / name, *group,
          ckpt::training_state_file(stage->named, optimizer, {},
                                    "stage_" + std::to_string(rank) + ".pt"),
          meta);
      if (rank == 0) record_latest();
      group->barrier();
      return;
    }
    std::map<std::string, torch::Tensor> rng_states;
    if (group) {
      const auto mine = ckpt::cpu_rng_state();
      auto all = torch::zeros({world, mine.numel()}, torch::kByte);
      all[rank].copy_(mine);
      group->all_reduce(all);  // one non-zero row per rank: the sum is the gather
      for (int r = 0; r < world; ++r) rng_states[ckpt::rank_rng_key(r)] = all[r].clone();
    }
    if (rank == 0) {
      ckpt::write_checkpoint(
          checkpoint_root / name,
          {ckpt::training_state_file(ckpt::model_tensors(*model), optimizer, rng_states)}, meta);
      record_latest();
    }
    if (group) group->barrier();
  };

  // One pipeline step: rank 0 feeds the tokens, the last rank the targets; every rank gets the
  // batch's mean loss back. Gradients are clipped by the norm of the whole model's.
  auto pipeline_step = [&](const TokenWindows::Batch& batch) {
    optimizer.zero_grad();
    const double mean_loss = stage->train_step(rank == 0 ? batch.inputs : torch::Tensor(),
                                               rank == world - 1 ? batch.targets : torch::Tensor());
    if (train_cfg.grad_clip > 0)
      lab::clip_global_grad_norm(stage->parameters, train_cfg.grad_clip, *group);
    optimizer.step();
    return mean_loss;
  };
  if (stage && rank == 0 && !opt.quiet) std::printf("pipeline: %s\n", stage->description.c_str());

  // ---- the loop ------------------------------------------------------------------------------
  const bool show = rank == 0 && !opt.quiet;
  const bool tty = isatty(fileno(stdout)) != 0 && show;
  const auto t_start = std::chrono::steady_clock::now();
  model->train();
  std::int64_t step = progress.step;
  double last_loss = baseline;
  // [quote:loop]
  for (std::int64_t epoch = progress.epoch; epoch < train_cfg.epochs && step < total_steps;
       ++epoch) {
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const auto order = sampler.indices();
    const std::int64_t first = epoch == progress.epoch ? progress.position : 0;
    for (std::int64_t position = first; position < steps_per_epoch && step < total_steps;
         ++position) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::int64_t> indices(order.begin() + position * local_batch,
                                        order.begin() + (position + 1) * local_batch);
      const auto batch = corpus.train.batch(indices);

      torch::Tensor loss;
      if (stage) {
        loss = torch::tensor(pipeline_step(batch));  // the stages run the step together
      } else {
        loss = language_model_loss(model->forward(batch.inputs), batch.targets);
        optimizer.zero_grad();
        loss.backward();
        if (train_cfg.grad_clip > 0)
          torch::nn::utils::clip_grad_norm_(model->parameters(), train_cfg.grad_clip);
        optimizer.step();
      }

      ++step;
      // [/quote:loop]
      // [quote:global_loss]
      // This rank's loss is on its own samples; the global batch's loss is the mean over ranks
      // (equal shares), the number a single process on the whole batch would report.
      const double local_loss = loss.item<double>();
      last_loss = local_loss;
      if (ddp) {
        auto global = loss.detach().clone().reshape({1});
        group->all_reduce_mean(global);
        last_loss = global.item<double>();
      }
      // [/quote:global_loss]
      const double step_seconds = seconds_since(t0);
      const double elapsed = elapsed_before + seconds_since(t_start);
      const bool epoch_end = position + 1 == steps_per_epoch;
      lab::MetricsRow row{
          step,   epoch, last_loss, std::nullopt, static_cast<double>(batch_size) / step_seconds,
          elapsed};
      const bool evaluate = step % train_cfg.eval_every == 0 || epoch_end || step == total_steps;
      if (evaluate && stage) lab::gather_to_rank0(*stage, *group, &model);
      if (rank == 0 && evaluate)
        row.validation_loss = validation_loss(model, corpus.validation, batch_size);
      if (rank == 0) {
        metrics.push_back(row);
        metrics_file->append(row);
      }

      if (step % train_cfg.log_every == 0 || epoch_end || step == total_steps)
        train_log << step << ' ' << local_loss << ' '
                  << static_cast<double>(local_batch) / step_seconds << ' ' << elapsed << std::endl;
      if (show)
        show_progress(tty, step, total_steps, epoch, train_cfg.epochs, last_loss,
                      row.samples_per_second,
                      step % (train_cfg.eval_every) == 0 || step == total_steps);
      if (row.validation_loss && !tty && show)
        std::printf("  step %lld validation loss %.4f\n", static_cast<long long>(step),
                    *row.validation_loss);

      if (opt.save_every > 0 && step % opt.save_every == 0) {
        ckpt::Progress at{step, epoch, position + 1};
        if (at.position == steps_per_epoch) at = {step, epoch + 1, 0};
        save(at, elapsed);
      }
    }
  }
  if (tty) std::printf("\n");
  const double seconds = seconds_since(t_start);

  // ---- report (rank 0) ----------------------------------------------------------------------
  if (stage && opt.sample_characters > 0) lab::gather_to_rank0(*stage, *group, &model);
  if (rank != 0) return 0;
  lab::write_loss_curve_svg(opt.out_dir / "loss_curve.svg", metrics, baseline,
                            "TinyTransformer (" + std::to_string(cfg.model.num_hidden_layers) +
                                " blocks, hidden " + std::to_string(cfg.model.hidden_size) +
                                ") on the generated corpus");
  double final_validation = std::nan("");
  for (const auto& r : metrics)
    if (r.validation_loss) final_validation = *r.validation_loss;
  std::printf(
      "done: %lld steps in %.1f s this run; last train loss %.4f, validation loss %.4f "
      "(uniform baseline %.3f)\n",
      static_cast<long long>(step), seconds, last_loss, final_validation, baseline);
  std::printf("wrote %s, %s, %s\n", (opt.out_dir / "metrics.csv").string().c_str(),
              (opt.out_dir / "loss_curve.svg").string().c_str(),
              (log_dir / "train.log").string().c_str());
  if (opt.sample_characters > 0) {
    const auto text = CharTokenizer::decode(
        greedy_generate(model, CharTokenizer::encode("the "), opt.sample_characters));
    std::printf("greedy sample: \"%s\"\n", text.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
