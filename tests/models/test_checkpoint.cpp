// Checkpoints of the tiny transformer: a resumed run continues the same loss curve bit for bit,
// Python's torch.load opens the state file, and truncated, corrupt or mismatched checkpoints are
// refused before anything is loaded.
#include <doctest/doctest.h>

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mpp/checkpoint/checkpoint.hpp"
#include "mpp/data_parallel/sampler.hpp"
#include "mpp/models/char_corpus.hpp"
#include "mpp/models/tiny_transformer.hpp"

namespace fs = std::filesystem;
namespace ckpt = mpp::checkpoint;
using namespace mpp::models;

namespace {

TinyTransformerConfig tiny_config(std::int64_t hidden = 16, int layers = 1) {
  TinyTransformerConfig cfg;
  cfg.model.num_hidden_layers = layers;
  cfg.model.hidden_size = hidden;
  cfg.model.num_attention_heads = 2;
  cfg.model.intermediate_size = 32;
  cfg.model.max_position_embeddings = 16;
  cfg.model.dropout = 0.1;  // so the generator state must travel with the checkpoint
  cfg.training.batch_size = 8;
  cfg.training.sequence_length = 16;
  cfg.data.train_characters = 16 * 8 * 3 + 1;  // 3 batches per epoch: runs cross epochs
  cfg.data.validation_characters = 33;
  return cfg;
}

/// The lab's loop in miniature: same batch order (epoch, position), same step.
struct Run {
  TinyTransformerConfig cfg;
  CharCorpus corpus;
  TinyTransformer model;
  torch::optim::AdamW optimizer;
  ckpt::Progress progress;

  explicit Run(const TinyTransformerConfig& c)
      : cfg(c),
        corpus(make_char_corpus(c.data, c.training.sequence_length)),
        model(c.model),
        optimizer(model->parameters(), torch::optim::AdamWOptions(c.training.learning_rate)
                                           .weight_decay(c.training.weight_decay)) {}

  std::vector<double> train(int steps) {
    std::vector<double> losses;
    const auto batch = cfg.training.batch_size;
    const auto per_epoch = corpus.train.size() / batch;
    for (int i = 0; i < steps; ++i) {
      mpp::DistributedSampler sampler(static_cast<std::size_t>(corpus.train.size()), 1, 0,
                                      {true, cfg.training.seed, mpp::Remainder::drop});
      sampler.set_epoch(static_cast<std::uint64_t>(progress.epoch));
      const auto order = sampler.indices();
      std::vector<std::int64_t> idx(order.begin() + progress.position * batch,
                                    order.begin() + (progress.position + 1) * batch);
      auto b = corpus.train.batch(idx);
      auto loss = language_model_loss(model->forward(b.inputs), b.targets);
      optimizer.zero_grad();
      loss.backward();
      torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.training.grad_clip);
      optimizer.step();
      losses.push_back(loss.item<double>());
      ++progress.step;
      if (++progress.position == per_epoch) progress = {progress.step, progress.epoch + 1, 0};
    }
    return losses;
  }

  void save(const fs::path& dir) {
    ckpt::write_checkpoint(dir, {ckpt::training_state_file(ckpt::model_tensors(*model), optimizer)},
                           {{"config", to_json(cfg)}, {"progress", ckpt::to_json(progress)}});
  }

  void resume(const fs::path& dir) {
    const auto loaded = ckpt::read_checkpoint(dir);
    ckpt::check_same_settings(loaded.manifest.at("config"), to_json(cfg), {"training.epochs"},
                              dir.string());
    ckpt::restore_training_state(loaded.files.at("state.pt"), *model, optimizer, dir.string());
    progress = ckpt::progress_from(loaded.manifest);
  }
};

fs::path scratch_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("mpp_models_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::map<std::string, torch::Tensor> snapshot(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : m.named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

bool same(const std::map<std::string, torch::Tensor>& a, const torch::nn::Module& m) {
  for (const auto& item : m.named_parameters())
    if (!torch::equal(a.at(item.key()), item.value())) return false;
  return true;
}

std::string refusal(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ckpt::CheckpointError& e) {
    return e.what();
  }
  return {};
}

/// Runs a shell command, returning (exit status, stdout).
std::pair<int, std::string> run_command(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, out};
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST_CASE("checkpoint: a resumed run continues the same loss curve bit for bit") {
  const auto cfg = tiny_config();
  const auto dir = scratch_dir("resume");

  torch::manual_seed(cfg.training.seed);
  Run whole(cfg);
  const auto reference = whole.train(8);

  torch::manual_seed(cfg.training.seed);
  Run first(cfg);
  const auto head = first.train(4);
  first.save(dir / "step_4");
  CHECK(std::vector<double>(reference.begin(), reference.begin() + 4) == head);

  // A fresh process: other weights (other model seed) and another generator state, then resume.
  torch::manual_seed(999);
  auto other = cfg;
  other.model.seed += 1;
  Run second(other);
  second.cfg = cfg;  // the config the run started with
  second.resume(dir / "step_4");
  CHECK(second.progress == ckpt::Progress{4, 1, 1});
  const auto tail = second.train(4);
  CHECK(std::vector<double>(reference.begin() + 4, reference.end()) == tail);
  for (const auto& item : whole.model->named_parameters())
    CHECK_MESSAGE(torch::equal(item.value(), second.model->named_parameters()[item.key()]),
                  item.key());
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: Python's torch.load opens the state file and sees the same numbers") {
  const auto cfg = tiny_config();
  const auto dir = scratch_dir("interop");
  torch::manual_seed(cfg.training.seed);
  Run run(cfg);
  run.train(2);
  run.save(dir / "ckpt");

  if (!fs::exists("/usr/bin/python3") ||
      run_command("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1").first != 0) {
    MESSAGE(
        "SKIPPED: /usr/bin/python3 with torch is not installed (apt-get install python3-torch)");
    return;
  }
  const fs::path script = dir / "load.py";
  std::ofstream(script) << R"(import json, sys, zlib, torch
d = sys.argv[1]
manifest = json.load(open(d + '/manifest.json'))
raw = open(d + '/state.pt', 'rb').read()
assert zlib.crc32(raw) == manifest['files']['state.pt']['crc32'], 'crc mismatch'
s = torch.load(d + '/state.pt')
w = s['model']['blocks.0.attn.qkv.weight']
print(torch.__version__.split('+')[0][:4], s['step'], s['epoch'], s['position'], list(w.shape),
      '%.9e' % w.double().sum().item(),
      '%.9e' % s['optimizer']['embed.token.weight.exp_avg'].double().abs().sum().item(),
      s['optimizer']['embed.token.weight.step'].item(), s['rng']['cpu'].dtype, len(s['model']))
)";
  const auto [status, out] =
      run_command("/usr/bin/python3 " + script.string() + " " + (dir / "ckpt").string());
  REQUIRE_MESSAGE(status == 0, out);
  const auto params = run.model->named_parameters();
  const auto& opt_state = static_cast<torch::optim::AdamWParamState&>(*run.optimizer.state().at(
      c10::guts::to_string(params["embed.token.weight"].unsafeGetTensorImpl())));
  std::istringstream fields(out);
  std::string version, shape0, shape1, dtype;
  std::int64_t step = -1, epoch = -1, position = -1, opt_step = -1;
  std::size_t count = 0;
  double weight_sum = 0, exp_avg_sum = 0;
  fields >> version >> step >> epoch >> position >> shape0 >> shape1 >> weight_sum >> exp_avg_sum >>
      opt_step >> dtype >> count;
  MESSAGE("torch.load in Python torch " << version << ": " << out);
  CHECK(step == 2);
  CHECK(epoch == 0);
  CHECK(position == 2);
  CHECK(shape0 + shape1 == "[48,16]");
  CHECK(weight_sum ==
        doctest::Approx(params["blocks.0.attn.qkv.weight"].to(torch::kDouble).sum().item<double>())
            .epsilon(1e-9));
  CHECK(exp_avg_sum ==
        doctest::Approx(opt_state.exp_avg().to(torch::kDouble).abs().sum().item<double>())
            .epsilon(1e-9));
  CHECK(opt_step == 2);
  CHECK(dtype == "torch.uint8");
  CHECK(count == params.size());
  fs::remove_all(dir);
}

TEST_CASE(
    "checkpoint: truncated, corrupt, incomplete and mismatched checkpoints are refused whole") {
  const auto cfg = tiny_config();
  const auto dir = scratch_dir("corrupt");
  torch::manual_seed(cfg.training.seed);
  Run run(cfg);
  run.train(1);
  run.save(dir / "good");
  const auto state_size = fs::file_size(dir / "good" / "state.pt");

  auto copy = [&](const std::string& name) {
    fs::copy(dir / "good", dir / name, fs::copy_options::recursive);
    return dir / name;
  };

  SUBCASE("truncated state file") {
    const auto bad = copy("truncated");
    fs::resize_file(bad / "state.pt", state_size / 2);
    const auto msg = refusal([&] { ckpt::read_checkpoint(bad); });
    CHECK(msg.find("state.pt has " + std::to_string(state_size / 2) +
                   " bytes but the manifest says " + std::to_string(state_size) + " (truncated") !=
          std::string::npos);
  }
  SUBCASE("one flipped byte") {
    const auto bad = copy("flipped");
    std::fstream f(bad / "state.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(state_size / 2));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(state_size / 2));
    f.put(static_cast<char>(c ^ 0x10));
    f.close();
    CHECK(refusal([&] { ckpt::read_checkpoint(bad); }).find("fails its CRC-32 check") !=
          std::string::npos);
  }
  SUBCASE("a save that never finished: no manifest") {
    const auto bad = copy("unfinished");
    fs::remove(bad / "manifest.json");
    CHECK(refusal([&] { ckpt::read_checkpoint(bad); }).find("manifest.json is missing") !=
          std::string::npos);
  }
  SUBCASE("a manifest cut short") {
    const auto bad = copy("manifest_cut");
    fs::resize_file(bad / "manifest.json", 40);
    CHECK(refusal([&] { ckpt::read_checkpoint(bad); }).find("manifest.json is not valid JSON") !=
          std::string::npos);
  }
  SUBCASE(
      "another architecture: refused by the config check and by the tensor check, model "
      "untouched") {
    const auto loaded = ckpt::read_checkpoint(dir / "good");
    auto wider = tiny_config(32);
    CHECK(refusal([&] {
            ckpt::check_same_settings(loaded.manifest.at("config"), to_json(wider), {}, "good");
          }).find("written with model.hidden_size = 16 but the config says 32") !=
          std::string::npos);
    Run target(wider);
    const auto before = snapshot(*target.model);
    const auto msg = refusal([&] {
      ckpt::restore_training_state(loaded.files.at("state.pt"), *target.model, target.optimizer,
                                   "good");
    });
    CHECK(msg.find("refusing checkpoint good: parameter") != std::string::npos);
    CHECK(msg.find("parameter blocks.0.attn.proj.bias is Float [16] in the checkpoint but Float "
                   "[32] in the model") != std::string::npos);
    CHECK(same(before, *target.model));
    CHECK(target.optimizer.state().empty());
  }
  SUBCASE("a deeper model: the checkpoint lacks blocks.1, and nothing is copied") {
    const auto loaded = ckpt::read_checkpoint(dir / "good");
    auto deeper = tiny_config(16, 2);
    deeper.model.seed = 77;
    Run target(deeper);
    const auto before = snapshot(*target.model);
    CHECK(refusal([&] {
            ckpt::restore_training_state(loaded.files.at("state.pt"), *target.model,
                                         target.optimizer, "good");
          }).find("parameter blocks.1.attn.proj.bias is missing") != std::string::npos);
    CHECK(same(before, *target.model));  // blocks.0 matched but was not copied either
  }
  SUBCASE("a shallower model: the checkpoint has a parameter the model lacks") {
    auto deeper = tiny_config(16, 2);
    Run source(deeper);
    source.train(1);
    source.save(dir / "deep");
    Run target(cfg);
    const auto before = snapshot(*target.model);
    const auto loaded = ckpt::read_checkpoint(dir / "deep");
    CHECK(refusal([&] {
            ckpt::restore_training_state(loaded.files.at("state.pt"), *target.model,
                                         target.optimizer, "deep");
          }).find("the checkpoint has parameter blocks.1.") != std::string::npos);
    CHECK(same(before, *target.model));
  }
  // The intact checkpoint still loads.
  Run target(cfg);
  CHECK_NOTHROW(target.resume(dir / "good"));
  CHECK(same(snapshot(*run.model), *target.model));
  fs::remove_all(dir);
}
