// Chapter 04's lab — the memory wall: how many bytes a model needs to train, and what cutting it
// into pipeline stages buys. No LibTorch: the model is only described (its layers' parameter
// counts), and mpp's partition policies cut it exactly as a Pipeline would.
//
//   ./memory_wall [--gpu-gb 24] [--svg memory_wall.svg]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "mpp/partition/by_params.hpp"
#include "mpp/partition/uniform.hpp"
#include "mpp/trace/plot.hpp"

namespace {

// [quote:bytes]
// Bytes each parameter costs in float32 training with Adam.
constexpr double weight_bytes = 4;    // the parameter itself
constexpr double gradient_bytes = 4;  // its gradient, same shape and dtype
constexpr double adam_bytes = 4 + 4;  // Adam's two moments (m and v)
constexpr double training_bytes = weight_bytes + gradient_bytes + adam_bytes;  // 16
// [/quote:bytes]

constexpr double gb = 1e9;  // decimal gigabytes, as GPU memory is sold

// [quote:model]
// A GPT-like model of about 10 B parameters, as a list of layers (what a partition sees):
// token + position embedding, 48 transformer blocks of width 4096, an untied output head.
std::vector<std::int64_t> ten_billion_model() {
  const std::int64_t hidden = 4096, vocab = 50257, positions = 2048, blocks = 48;
  const std::int64_t block = 4 * hidden * hidden + 4 * hidden    // attention: qkv + output
                             + 8 * hidden * hidden + 5 * hidden  // MLP 4x wide, with biases
                             + 4 * hidden;                       // two LayerNorms
  std::vector<std::int64_t> layers{(vocab + positions) * hidden};
  for (int b = 0; b < blocks; ++b) layers.push_back(block);
  layers.push_back(vocab * hidden + 2 * hidden);  // final LayerNorm + head
  return layers;
}
// [/quote:model]

// What the busiest stage of a partition holds, for the table and the figure.
struct Row {
  std::string partition;
  double weights_gb = 0;
  double training_gb = 0;
};

template <class Partition>
Row report(const std::vector<std::int64_t>& layers, double gpu_gb) {
  // [quote:partition]
  const auto pieces = Partition::split(layers, /*chunks_per_rank=*/1);
  std::int64_t largest = 0;
  for (const auto& piece : pieces) {
    std::int64_t params = 0;
    for (int l = piece.begin; l < piece.end; ++l) params += layers[static_cast<std::size_t>(l)];
    largest = params > largest ? params : largest;
  }
  const double need = static_cast<double>(largest) * training_bytes / gb;
  // [/quote:partition]
  std::printf("| %-12s | %6zu | %8.2f B | %7.1f GB | %8.1f GB | %-4s |\n",
              Partition::name().c_str(), pieces.size(), static_cast<double>(largest) / 1e9,
              static_cast<double>(largest) * weight_bytes / gb, need,
              need <= gpu_gb ? "yes" : "no");
  return {Partition::name(), static_cast<double>(largest) * weight_bytes / gb, need};
}

}  // namespace

int main(int argc, char** argv) {
  double gpu_gb = 24;
  std::string svg;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--gpu-gb") == 0) gpu_gb = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--svg") == 0) svg = argv[i + 1];
  }

  const auto layers = ten_billion_model();
  std::int64_t total = 0;
  for (auto p : layers) total += p;
  const double n = static_cast<double>(total);

  std::printf("model: %zu layers, %.2f B parameters; GPU: %.0f GB\n\n", layers.size(), n / 1e9,
              gpu_gb);
  std::printf("| what is stored            | bytes/param | whole model |\n");
  std::printf("|---------------------------|-------------|-------------|\n");
  std::printf("| weights (float32)         | %11.0f | %8.1f GB |\n", weight_bytes,
              n * weight_bytes / gb);
  std::printf("| + gradients               | %11.0f | %8.1f GB |\n", gradient_bytes,
              n * gradient_bytes / gb);
  std::printf("| + Adam moments m and v    | %11.0f | %8.1f GB |\n", adam_bytes,
              n * adam_bytes / gb);
  std::printf("| = training state          | %11.0f | %8.1f GB |\n\n", training_bytes,
              n * training_bytes / gb);

  std::printf(
      "| partition    | stages | largest stage | its weights | training state | fits %.0f GB |\n",
      gpu_gb);
  std::printf("|--------------|--------|---------------|-------------|----------------|------|\n");
  const std::vector<Row> rows{
      report<mpp::Uniform<1>>(layers, gpu_gb),   report<mpp::Uniform<2>>(layers, gpu_gb),
      report<mpp::Uniform<4>>(layers, gpu_gb),   report<mpp::Uniform<8>>(layers, gpu_gb),
      report<mpp::ByParams<8>>(layers, gpu_gb),  report<mpp::Uniform<10>>(layers, gpu_gb),
      report<mpp::ByParams<10>>(layers, gpu_gb), report<mpp::ByParams<16>>(layers, gpu_gb)};
  if (!svg.empty()) {
    std::vector<std::string> partitions;
    std::vector<mpp::trace::Series> bars{{"training state (weights + gradients + Adam)", {}, {}},
                                         {"weights alone", {}, {}}};
    for (const Row& row : rows) {
      partitions.push_back(row.partition);
      bars[0].y.push_back(row.training_gb);
      bars[1].y.push_back(row.weights_gb);
    }
    mpp::trace::PlotOptions plot;
    char title[128];
    std::snprintf(title, sizeof title,
                  "The memory wall: a %.1f B-parameter model, float32, Adam — the busiest stage",
                  n / 1e9);
    plot.title = title;
    plot.subtitle = "computed by examples/04_memory_wall with mpp's partition policies";
    plot.y_label = "GB on the busiest device";
    plot.width = 860;
    char card[32];
    std::snprintf(card, sizeof card, "a %.0f GB card", gpu_gb);
    plot.references.push_back({card, gpu_gb});
    std::ofstream(svg) << mpp::trace::render_bar_chart(partitions, bars, plot);
    std::printf("\nfigure written to %s\n", svg.c_str());
  }
  std::printf(
      "\nActivations come on top: they grow with the micro-batches in flight (chapters 07-08).\n");
  return 0;
}
