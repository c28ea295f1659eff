#pragma once
// Model replicas across the ranks of a data-parallel group: make them start equal (broadcast from
// rank 0, whatever each rank's seed was), refuse to start when they are not the same model, and
// check at any time that they are still bit-identical.
#include <torch/nn/module.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpp/comm/process_group.hpp"
#include "mpp/data_parallel/bucketed_gradients.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// The replicas of a data-parallel group are not the same model (names, shapes or dtypes).
class ReplicaMismatch : public RuntimeError {
 public:
  /// Takes the message, as std::runtime_error does.
  using RuntimeError::RuntimeError;
};

namespace detail {

inline std::string describe_param(const NamedTensor& p) {
  return "'" + p.name + "' " + describe_tensor(p.tensor);
}

inline std::vector<NamedTensor> named_parameters(const torch::nn::Module& module,
                                                 bool trainable_only) {
  std::vector<NamedTensor> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (!trainable_only || item.value().requires_grad()) out.push_back({item.key(), item.value()});
  return out;
}

inline std::vector<NamedTensor> named_buffers(const torch::nn::Module& module) {
  std::vector<NamedTensor> out;
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    out.push_back({item.key(), item.value()});
  return out;
}

/// Rank `root`'s bytes of `text`, on every rank of the group.
inline std::string broadcast_text(const ProcessGroup& group, const std::string& text, int root) {
  at::Tensor length = at::full({1}, static_cast<std::int64_t>(text.size()), at::kLong);
  group.broadcast(length, root);
  at::Tensor bytes = at::zeros({length.item<std::int64_t>()}, at::kByte);
  if (group.rank() == root && !text.empty())
    std::memcpy(bytes.data_ptr(), text.data(), text.size());
  group.broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes.data_ptr()),
                     static_cast<std::size_t>(bytes.numel()));
}

/// For every rank, the value it contributed (a sum over a one-hot vector).
inline std::vector<std::int64_t> gather_scalar(const ProcessGroup& group, std::int64_t value) {
  at::Tensor all = at::zeros({group.size()}, at::kLong);
  all[group.rank()] = value;
  group.all_reduce(all, ReduceOp::sum);
  return std::vector<std::int64_t>(all.data_ptr<std::int64_t>(),
                                   all.data_ptr<std::int64_t>() + all.numel());
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace detail

/// Throws ReplicaMismatch on every rank unless all ranks hold tensors with the same names,
/// shapes and dtypes, in the same order. `what` names the caller in the message.
inline void check_same_structure(const std::vector<NamedTensor>& tensors, const ProcessGroup& group,
                                 const std::string& what) {
  std::string mine;
  for (const auto& t : tensors) mine += detail::describe_param(t) + "\n";
  const auto reference = detail::split_lines(detail::broadcast_text(group, mine, 0));
  const auto local = detail::split_lines(mine);
  std::int64_t first_difference = -1;
  const std::size_t common = std::min(reference.size(), local.size());
  for (std::size_t i = 0; i < common && first_difference < 0; ++i)
    if (reference[i] != local[i]) first_difference = static_cast<std::int64_t>(i);
  if (first_difference < 0 && reference.size() != local.size())
    first_difference = static_cast<std::int64_t>(common);
  const auto differences = detail::gather_scalar(group, first_difference);
  const auto counts = detail::gather_scalar(group, static_cast<std::int64_t>(local.size()));

  std::string message;
  for (int r = 0; r < group.size(); ++r) {
    const auto at = differences[static_cast<std::size_t>(r)];
    if (at < 0) continue;
    const auto i = static_cast<std::size_t>(at);
    message += "\n  rank " + std::to_string(r) + " has " +
               std::to_string(counts[static_cast<std::size_t>(r)]) + " tensors, rank 0 has " +
               std::to_string(reference.size()) + "; first difference at #" + std::to_string(i) +
               ": rank 0 has " + (i < reference.size() ? reference[i] : "nothing");
    if (r == group.rank())
      message += ", this rank has " + (i < local.size() ? local[i] : "nothing");
  }
  if (!message.empty())
    throw ReplicaMismatch(
        "mpp: " + what + " needs the same model on every rank of the group " +
        "(same parameter names, shapes and dtypes in the same order), but:" + message +
        "\n  build the model from the same code and configuration on every rank");
}

/// Copies rank 0's tensors into every rank's (in place). Checks the structure first.
inline void broadcast_tensors(const std::vector<NamedTensor>& tensors, const ProcessGroup& group) {
  check_same_structure(tensors, group, "broadcast_parameters");
  at::NoGradGuard no_grad;
  for (const auto& t : tensors) group.broadcast(t.tensor, 0);
}

/// Copies rank 0's parameters and buffers into every rank's replica, so that replicas agree
/// whatever seed each rank used.
inline void broadcast_parameters(torch::nn::Module& module, const ProcessGroup& group) {
  auto tensors = detail::named_parameters(module, /*trainable_only=*/false);
  const auto buffers = detail::named_buffers(module);
  tensors.insert(tensors.end(), buffers.begin(), buffers.end());
  broadcast_tensors(tensors, group);
}

/// The outcome of a bit-for-bit comparison of replicas.
struct ReplicaReport {
  /// Whether every rank's tensors equal rank 0's bit for bit.
  bool identical = true;
  /// The first tensor that differs and the ranks holding another value; empty when identical.
  std::string first_difference;
  /// `identical`.
  explicit operator bool() const { return identical; }
};

/// Compares every rank's parameters and buffers bit for bit with rank 0's (a collective: every
/// rank of the group calls it). Costs one broadcast of the model.
inline ReplicaReport compare_replicas(const torch::nn::Module& module, const ProcessGroup& group) {
  auto tensors = detail::named_parameters(module, /*trainable_only=*/false);
  const auto buffers = detail::named_buffers(module);
  tensors.insert(tensors.end(), buffers.begin(), buffers.end());
  check_same_structure(tensors, group, "compare_replicas");
  std::int64_t first = -1;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor local = tensors[i].tensor.detach().contiguous();
    at::Tensor root = local.clone();
    group.broadcast(root, 0);
    // compare the bytes, so that NaNs and signed zeros count too
    if (first < 0 &&
        !at::equal(root.reshape({-1}).view(at::kByte), local.reshape({-1}).view(at::kByte)))
      first = static_cast<std::int64_t>(i);
  }
  const auto firsts = detail::gather_scalar(group, first);
  ReplicaReport report;
  std::int64_t earliest = -1;
  for (auto f : firsts)
    if (f >= 0 && (earliest < 0 || f < earliest)) earliest = f;
  if (earliest < 0) return report;
  report.identical = false;
  std::string ranks;
  for (std::size_t r = 0; r < firsts.size(); ++r)
    if (firsts[r] == earliest) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  report.first_difference = detail::describe_param(tensors[static_cast<std::size_t>(earliest)]) +
                            " differs from rank 0's on rank(s) [" + ranks + "]";
  return report;
}

}  // namespace mpp
