#pragma once
// Lab 15's --pipeline mode: the transformer's parts spread over the ranks by mpp::Pipeline
// (embedding on the first stage, head on the last), seen by the loop through a small handle.
#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpp/checkpoint/checkpoint.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/models/tiny_transformer.hpp"
#include "mpp/partition/model.hpp"
#include "mpp/partition/uniform.hpp"
#include "mpp/pipeline/pipeline.hpp"

namespace lab {

/// One rank's stage: its parameters (under the whole model's names) and its training step.
struct StageHandle {
  std::string description;                      // "Pipeline<Uniform<2>, OneFOneB<4>, ...>"
  std::vector<torch::Tensor> parameters;        // for the optimizer
  mpp::checkpoint::NamedTensors named;          // global name -> parameter
  std::vector<std::vector<std::string>> names;  // per rank: the names it owns, sorted
  std::function<double(const torch::Tensor& tokens, const torch::Tensor& targets)> train_step;
};

template <class Pipe>
StageHandle make_stage(const mpp::Group<typename Pipe::comm_type::backend>& group,
                       const mpp::models::TinyTransformerLayers& layers) {
  auto pipe = std::make_shared<Pipe>(group, layers);
  StageHandle s;
  s.description = Pipe::name();
  s.parameters = pipe->parameters();
  for (const auto& piece : pipe->pieces())
    for (const auto& item : piece.module->named_parameters())
      s.named[mpp::models::global_parameter_name(item.key())] = item.value();
  // Which parts each stage holds, from the partition itself: rank 0 needs it to gather the model.
  const auto ranges = Pipe::partition_type::split(mpp::layer_costs(layers), 1);
  for (const auto& r : ranges) {
    std::vector<std::string> owned;
    for (const auto& item :
         mpp::models::TinyTransformer(layers.config, r.begin, r.end)->named_parameters())
      owned.push_back(item.key());
    std::sort(owned.begin(), owned.end());
    s.names.push_back(std::move(owned));
  }
  s.train_step = [pipe](const torch::Tensor& tokens, const torch::Tensor& targets) {
    // Stage 0 takes the ids as floats: the pipeline carries one dtype (see TokenIds).
    return pipe->train_step(tokens.defined() ? tokens.to(torch::kFloat) : tokens, targets,
                            [](const torch::Tensor& logits, const torch::Tensor& t) {
                              return mpp::models::language_model_loss(logits, t);
                            });
  };
  return s;
}

/// Clips the gradient norm of the whole model, whose parameters are spread over the stages: the
/// same rule as torch::nn::utils::clip_grad_norm_ on one process.
inline void clip_global_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                                  const mpp::ProcessGroup& group) {
  auto sum_sq = torch::zeros({1}, torch::kDouble);
  for (const auto& p : params)
    if (p.grad().defined()) sum_sq += p.grad().to(torch::kDouble).pow(2).sum();
  group.all_reduce(sum_sq);
  const double total = std::sqrt(sum_sq.item<double>());
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().mul_(coef);
  }
}

/// Copies every stage's parameters into rank 0's whole model (for validation and the sample).
inline void gather_to_rank0(const StageHandle& stage, const mpp::ProcessGroup& group,
                            mpp::models::TinyTransformer* whole) {
  constexpr int tag_base = 1 << 23;  // above the tags a pipeline step and its trace use
  if (group.rank() != 0) {
    int i = 0;
    for (const auto& [name, tensor] : stage.named) group.send(tensor.detach(), 0, tag_base + i++);
    return;
  }
  torch::NoGradGuard no_grad;
  auto params = whole->get()->named_parameters();
  for (const auto& [name, tensor] : stage.named) params[name].copy_(tensor);
  for (int r = 1; r < group.size(); ++r) {
    int i = 0;
    for (const auto& name : stage.names[static_cast<std::size_t>(r)])
      group.recv(params[name], r, tag_base + i++);
  }
}

}  // namespace lab
